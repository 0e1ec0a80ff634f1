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

/* A fresh time-ordered (version 7, RFC 9562) GUID: unix_ms (a Unix time in milliseconds,
 * taken modulo 2^48) in the first 48 bits, big-endian, then the version, 74 bits from
 * libsodium's CSPRNG and the variant. Ids made later compare greater byte by byte, except
 * within one millisecond, where they are in random order.
 *
 * Why the SDK makes command ids and transfer ids this way: they end the store's busiest
 * keys (an outcome `'O' principal 0 command_id`, a transfer's `'X'`, `'Y'` and `'R'`
 * records; ARCHITECTURE.md "Store layout"), which every member writes once per command.
 * With random ids each such write lands at a random place in RocksDB's memtable, a
 * skip-list search from its top level with a cache miss at most steps; with ids that grow
 * with time it lands next to the one before, where the skip list's last insert position
 * is reused. Uniqueness still rests on the 74 random bits (a collision needs two ids of
 * one principal in one millisecond to share them). An id so made reveals the
 * millisecond it was made in, to whoever may see the id. */
void kl_guid_time_ordered(uint64_t unix_ms, uint8_t out[KL_GUID_LEN]);

/* kl_guid_time_ordered at the wall clock's current millisecond (CLOCK_REALTIME). A clock
 * stepped back only costs the ordering, never uniqueness. */
void kl_guid_time_ordered_now(uint8_t out[KL_GUID_LEN]);

#endif
