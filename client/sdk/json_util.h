/* json_util: the value builders of json.c, shared with transfer_json.c so that every public
 * JSON object follows one set of rules (client/keyload.h "JSON and base64"): uint64 above
 * 2^63-1 as a decimal string, byte strings as padded base64, protobuf strings made valid
 * UTF-8, GUIDs as canonical text. Each builder returns NULL when out of memory; set() then
 * reports false (and frees nothing it was not given), so a whole object fails at once. */
#ifndef KL_SDK_JSON_UTIL_H
#define KL_SDK_JSON_UTIL_H

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Adds v under key (taking v); false when v is NULL or the add fails. */
bool kl_sdk_json_set(json_t *obj, const char *key, json_t *v);
json_t *kl_sdk_json_u64(uint64_t v);
json_t *kl_sdk_json_i64(int64_t v);
json_t *kl_sdk_json_b64(const uint8_t *p, size_t n);
json_t *kl_sdk_json_text(const char *s);
/* Canonical GUID text for 16 bytes; anything else as base64 (never dropped). */
json_t *kl_sdk_json_guid(const ProtobufCBinaryData *g);
/* Dumps o in its insertion order (compact, or indented with KL_JSON_PRETTY) and releases
 * it. NULL when o is NULL or out of memory. */
char *kl_sdk_json_dump(json_t *o, unsigned flags);

#endif
