/* last_write: each key's last write of a sequence of key writes, in key order.
 *
 * A committed entry groups the write-sets of many client batches, and batches to one
 * queue all rewrite its queue record; applying only each key's last write gives the
 * same store as applying every write in order, with fewer memtable inserts. Once every
 * key is written once, the order of the writes no longer matters, and in key order each
 * memtable insert starts where the previous one ended (RocksDB keeps that position).
 *
 * Pure: no I/O, no allocation.
 * Invariant: of the writes of one key exactly one is kept, the one with the highest pos,
 * so applying the kept writes leaves each key as the whole sequence does.
 */
#ifndef KL_STORE_LAST_WRITE_H
#define KL_STORE_LAST_WRITE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const uint8_t *key;
    size_t len;
    size_t pos; /* the write's place in the sequence; distinct for every write */
} kl_last_write_key;

/* Sorts w[0..n) by key in byte order (RocksDB's default comparator) and keeps, of each
 * key, only the write with the highest pos: returns k, with the kept writes in w[0..k)
 * in key order. Cost: O(n log n) (heapsort), in place, no allocation. */
size_t kl_last_write_sort(kl_last_write_key *w, size_t n);

#endif
