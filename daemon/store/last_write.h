/* last_write: which writes of a sequence of key writes are overwritten later in it.
 *
 * A committed entry groups the write-sets of many client batches, and batches to one
 * queue all rewrite its queue record; applying only each key's last write gives the
 * same store as applying every write in order, with fewer memtable inserts.
 *
 * Pure: no I/O, no allocation but the caller-visible scratch of kl_last_write_mark.
 * Invariant: for every key, exactly one write (its last) is left unmarked, so applying
 * the unmarked writes in their original order leaves each key as the full sequence does.
 */
#ifndef KL_STORE_LAST_WRITE_H
#define KL_STORE_LAST_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const uint8_t *key;
    size_t len;
} kl_last_write_key;

/* Sets superseded[i] to true where keys[i] is written again at some j > i, false
 * otherwise. Cost: O(n) expected, one allocation of 2-4n slots. Returns false (and
 * marks nothing superseded) only when that allocation fails; the caller then applies
 * every write, which is still correct. */
bool kl_last_write_mark(const kl_last_write_key *keys, size_t n, bool *superseded);

#endif
