/* overlay: a sorted in-memory map of key -> value-or-tombstone, layered over RocksDB.
 *
 * Two overlays exist while the leader evaluates: the partition's pending overlay (writes
 * of batches proposed but not yet applied, each tagged with its log index as owner) and
 * a per-batch scratch overlay (the batch being evaluated; merged into pending on success,
 * dropped on failure, which is what makes a batch all or nothing).
 * Cost: lookup O(log n); insert O(n) memmove, fine for the bounded pending set
 * (kl_node refuses new batches past its pending-bytes limit).
 * Memory: the entry array grows by doubling from a small start (a batch's scratch rarely
 * needs more, and an allocation that small stays in malloc's per-thread cache), and
 * absorb merges into a second array kept for the purpose and swaps the two, so that a
 * steady stream of batches reuses the same two arrays instead of allocating one of the
 * pending set's size per batch (a medium size that changes with every batch, which glibc
 * serves from its slow paths). Both are released when the overlay empties while large. */
#ifndef KL_OVERLAY_H
#define KL_OVERLAY_H

#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kl_ov_entry {
    uint8_t *key;        /* one malloc'd block: the key, then the value */
    size_t klen;
    uint8_t *val;        /* key + klen; NULL for a tombstone */
    size_t vlen;
    bool del;
    uint64_t owner;      /* log index of the batch that wrote it (pending overlay) */
} kl_ov_entry;

typedef struct kl_overlay {
    kl_ov_entry *v;
    size_t n, cap;
    size_t bytes;        /* sum of key and value sizes held */
    kl_ov_entry *spare;  /* absorb's merge target, swapped with v (contents meaningless) */
    size_t spare_cap;
} kl_overlay;

/* Entries a fresh overlay's array holds before it first grows. */
#define KL_OVERLAY_START_CAP 8
/* An overlay that empties with arrays larger than this (in entries) releases them. */
#define KL_OVERLAY_KEEP_CAP 4096

void kl_overlay_init(kl_overlay *o);
void kl_overlay_free(kl_overlay *o);
void kl_overlay_clear(kl_overlay *o);

/* Copies key and value. Replaces an existing entry for the key. */
kl_code kl_overlay_set(kl_overlay *o, const uint8_t *key, size_t klen, const uint8_t *val,
                       size_t vlen, bool del, uint64_t owner, kl_err *err);
const kl_ov_entry *kl_overlay_find(const kl_overlay *o, const uint8_t *key, size_t klen);
/* Index of the first entry >= key. */
size_t kl_overlay_lower_bound(const kl_overlay *o, const uint8_t *key, size_t klen);
/* Moves every entry of src into dst with the given owner; src is left empty. */
kl_code kl_overlay_absorb(kl_overlay *dst, kl_overlay *src, uint64_t owner, kl_err *err);
/* Drops the entries whose owner <= index (they are applied to RocksDB now). */
void kl_overlay_drop_upto(kl_overlay *o, uint64_t index);
/* Drops the entries whose owner is exactly `owner` (an entry that was never proposed). */
void kl_overlay_drop_owner(kl_overlay *o, uint64_t owner);

int kl_key_compare(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen);

#endif
