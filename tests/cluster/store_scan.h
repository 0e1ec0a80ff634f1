/* store_scan: what process tests compare between members once they stopped: one pass over a
 * store's keys in key order, keeping those a filter wants, counting them through a callback and
 * folding each kept key and value, length-prefixed, into one BLAKE2b-256 digest. Two members
 * whose kept keys and values are equal byte for byte get the same digest; any difference in a
 * key, a value or a boundary between them gives another (the lengths are hashed too). */
#ifndef KL_TESTS_STORE_SCAN_H
#define KL_TESTS_STORE_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/store/store.h"

/* Whether key k (kl > 0) takes part. */
typedef bool (*store_scan_keep)(const uint8_t *k, size_t kl, void *arg);
/* Called for every kept key, in key order; may be NULL. */
typedef void (*store_scan_each)(const uint8_t *k, size_t kl, const uint8_t *v, size_t vl, void *arg);

/* Scans st (open, read only by this caller) and writes the digest of every kept key. */
void store_scan_digest(kl_store *st, store_scan_keep keep, store_scan_each each, void *arg, uint8_t digest[32]);

#endif
