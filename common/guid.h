/* guid: 16-byte GUIDs (command ids, transfer ids) in canonical text form
 * xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx. Empty and all-zero GUIDs are invalid (ARCHITECTURE.md "Sessions and RPC"). */
#ifndef KL_GUID_H
#define KL_GUID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KL_GUID_LEN 16
#define KL_GUID_TEXT_LEN 36

/* Parses canonical text (hyphens required, either case). Returns false on any other form. */
bool kl_guid_parse(const char *text, uint8_t out[KL_GUID_LEN]);
/* Writes 36 chars plus NUL into out. */
void kl_guid_format(const uint8_t g[KL_GUID_LEN], char out[KL_GUID_TEXT_LEN + 1]);
/* True when len == 16 and not all bytes are zero. */
bool kl_guid_valid(const uint8_t *g, size_t len);
/* A fresh random (version 4) GUID from libsodium's CSPRNG. */
void kl_guid_random(uint8_t out[KL_GUID_LEN]);

#endif
