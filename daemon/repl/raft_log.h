/* raft_log: the log as the core sees it; internal to daemon/repl (raft.c is its only user).
 *
 * Owns an in-memory window of entries [mem_first, last]: every entry the driver has not yet
 * reported durable, plus a bounded cache of recent durable ones. Entries before the window
 * and after the snapshot point (snap_index, snap_term) are read from the driver's storage
 * (kl_raft_storage); entries <= snap_index are compacted and nobody reads them. It also tracks what the driver has
 * written, so that a truncation of entries the driver may already hold is reported once.
 *
 * Invariants (kl_rlog_check asserts the O(1) ones; -DKL_RAFT_DEEP_CHECK walks the window too):
 *   snap_index <= persisted <= last and mem_first <= persisted + 1: no unpersisted entry
 *   lives only on disk, and nothing compacted was unpersisted; snap_index < mem_first;
 *   the window holds exactly indexes mem_first .. last, contiguous, owning their data;
 *   unp_bytes = data bytes of entries (persisted, last]; mem_bytes = data bytes of the window;
 *   the readies outstanding hold entries up to handed_hi[0] <= handed_hi[1] <= ... (oldest
 *   first), each persisted <= handed_hi[k] <= last; a truncation caps them all;
 *   pending_trunc is 0 or handed_through() + 1 when a ready is handed out (the first index
 *   no outstanding ready holds).
 * A storage failure sets `fatal`; every answer after it is meaningless and the core stops. */
#ifndef KL_REPL_RAFT_LOG_H
#define KL_REPL_RAFT_LOG_H

#include "common/limits.h"
#include "daemon/repl/raft_entry.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kl_rlog {
    kl_raft_storage st;
    kl_raft_entry *ents; /* window: ents[head .. head + len) hold mem_first .. last */
    size_t head, len, cap;
    uint64_t mem_first;
    uint64_t snap_index, snap_term; /* compacted up to snap_index; its entry had snap_term */
    uint64_t last, last_term;
    uint64_t persisted;     /* entries <= persisted are durable with their current content */
    uint64_t written_hi;    /* highest index the driver's store may hold (maybe stale) */
    uint64_t pending_trunc; /* 0, or the driver must delete stored entries >= this */
    /* Readies outstanding, oldest first: the one at handed_hi[k] writes entries up to there
     * (the ring's slot (handed_head + k) % KL_RAFT_MAX_READIES). */
    uint64_t handed_hi[KL_RAFT_MAX_READIES];
    size_t handed_head, n_handed;
    size_t unp_bytes, mem_bytes;
    size_t cache_entries, cache_bytes;
    bool fatal;
} kl_rlog;

/* Starts from a store compacted up to (snap_index, snap_term) whose last index is last_index
 * (>= snap_index). KL_INTERNAL if the store fails. */
kl_code kl_rlog_init(kl_rlog *l, const kl_raft_storage *st, uint64_t snap_index,
                     uint64_t snap_term, uint64_t last_index, size_t cache_entries,
                     size_t cache_bytes);
void kl_rlog_free(kl_rlog *l);

/* Term at index; 0 for index 0, for index > last, below snap_index (compacted: unknown),
 * and after a storage failure (fatal set). */
uint64_t kl_rlog_term(kl_rlog *l, uint64_t index);
/* snap_index <= index <= last and the entry there has this term (index 0 matches term 0). */
bool kl_rlog_match(kl_rlog *l, uint64_t index, uint64_t term);
/* Largest j <= index whose term is <= term (0 if none): etcd's findConflictByTerm. Stops at
 * snap_index (or at index itself when that is below it): terms below are unknown, and the
 * callers treat such a point as "needs the snapshot" (leader) or as committed (follower). */
uint64_t kl_rlog_conflict_by_term(kl_rlog *l, uint64_t index, uint64_t term);

/* Appends at last + 1, taking over data (malloc'd or NULL). False if memory ran out (nothing
 * changed; data still belongs to the caller). */
bool kl_rlog_append(kl_rlog *l, uint64_t term, uint8_t type, uint8_t *data, size_t len);
/* Removes entries >= from (1 <= from <= last). The caller guarantees from > commit. */
void kl_rlog_truncate(kl_rlog *l, uint64_t from);

/* Entries <= index (snap_index <= index <= persisted) are compacted: dropped from the window,
 * never read again; the term at index is kept as snap_term. */
void kl_rlog_compact(kl_rlog *l, uint64_t index);
/* The log is replaced by a snapshot at (index, term): empty after it, persisted = index (the
 * install is in the ready handed out right after this; the caller keeps every reader off it
 * until then). Only with no ready outstanding. */
void kl_rlog_restore(kl_rlog *l, uint64_t index, uint64_t term);

/* Unpersisted count and bytes, for the caps. */
uint64_t kl_rlog_unpersisted(const kl_rlog *l);

/* Deep copies of entries lo .. hi-1 into a new array (*out, *n; free with kl_rlog_free_entries):
 * at least one when lo < hi, then stopping at max_n entries or before max_bytes of data.
 * False on memory or storage failure (nothing returned). */
bool kl_rlog_copy(kl_rlog *l, uint64_t lo, uint64_t hi, size_t max_bytes, size_t max_n,
                  kl_raft_entry **out, size_t *n);
void kl_rlog_free_entries(kl_raft_entry *e, size_t n);

/* The last index some outstanding ready holds (persisted when none is outstanding): a new
 * ready takes the entries after it. */
uint64_t kl_rlog_handed_through(const kl_rlog *l);
/* A ready takes entries (handed_through, last]: marks them handed out and returns the
 * truncation point the driver must apply first (0 = none). Fewer than KL_RAFT_MAX_READIES
 * outstanding. */
uint64_t kl_rlog_hand_out(kl_rlog *l);
/* The oldest outstanding ready is durable: persisted moves to what it was handed and still
 * stands. */
void kl_rlog_stable(kl_rlog *l);
/* Drops cached durable entries from the front while over the cache limits. */
void kl_rlog_evict(kl_rlog *l);

#ifndef NDEBUG
void kl_rlog_check(const kl_rlog *l);
#else
#define kl_rlog_check(l) ((void)0)
#endif

#endif
