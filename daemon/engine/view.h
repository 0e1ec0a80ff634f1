/* view: reads of "applied state + pending write-sets + this batch's own writes", and the
 * batch's writes, for the evaluator (ARCHITECTURE.md "Write path" step 7). Layers, highest first:
 * scratch (this batch), pending (proposed, unapplied batches), RocksDB (applied).
 * Every record a view reads counts against its scan budget (MaxScanRecords), so one
 * batch or read can only examine a bounded number of records. */
#ifndef KL_VIEW_H
#define KL_VIEW_H

#include "common/limits.h"
#include "daemon/engine/overlay.h"
#include "daemon/store/store.h"

#include <protobuf-c/protobuf-c.h>

/* Scan hints (ARCHITECTURE.md "Write path" step 7): for a scanned prefix, a key below which the
 * applied store holds no live key of that prefix, so a scan seeks its RocksDB iterator
 * there instead of walking the tombstones acked messages and settled leases leave at the
 * front of a lane's 'A' range and a queue's 'T' range (they stay until compaction). Only
 * where the store iterator starts changes: the overlays are still merged from the scan's
 * start and the live keys visited, their order and the budget charged are the same, so no
 * answer or write-set differs.
 * A hint is learnt from the first live store key a scan from the prefix (or from the hint)
 * lands on, and lowered by every put the node applies under its prefix (deletes only make
 * it conservative). The table holds for one applied index: a store that moved any other way
 * (a snapshot installed) finds it stale and it is emptied. Loop thread only. */
typedef struct kl_scan_hint {
    uint8_t prefix[KL_KEY_MAX];
    size_t plen;
    uint8_t key[KL_KEY_MAX];  /* no live store key of the prefix below it */
    size_t klen;
    uint8_t state;            /* 0 unused, 1 learning (no key yet), 2 key, 3 none live at all */
} kl_scan_hint;
typedef struct kl_scan_hints {
    uint64_t applied;         /* the store's applied index the hints hold for */
    size_t next;              /* the slot a new prefix takes (round robin) */
    uint8_t tags[32];         /* first bytes of the hinted prefixes (a filter for puts) */
    kl_scan_hint h[KL_SCAN_HINTS_MAX];
} kl_scan_hints;

/* Before the node applies an entry to a store at applied index `applied`: empties the
 * table if it held for another index, then lowers the hints each put (key) will pass. */
void kl_scan_hints_begin_apply(kl_scan_hints *h, uint64_t applied, uint64_t index);
void kl_scan_hints_note_put(kl_scan_hints *h, const uint8_t *key, size_t klen);

/* Read cache: the applied values (or absence) of keys nearly every batch reads and almost
 * none writes, each read otherwise a RocksDB lookup: catalog records ('C': tenants,
 * databases, queue definitions, principals, member keys; not the change records 'C' 'V',
 * each read once per tail), queue names ('N'), queue records ('Q') and the partition's
 * replicated meta records ('M', never a member's local ones such as "hard" or
 * "log_start", which change outside an apply).
 * Exactness: a slot answers what the store holds because every other way a cached key can
 * change is seen:
 *  - an apply the node announces (kl_read_cache_begin_apply, then kl_read_cache_note_write
 *    for every key its write-sets put or delete, before the store applies it) drops the
 *    slots of those keys, and every 'M' slot (the store's apply also writes meta records
 *    of its own: "applied", "pinc"); the 'C', 'N' and 'Q' slots it does not write stay;
 *  - any other move of the applied index (an apply nobody announced, an announced one
 *    that failed) or of kl_store_state_gen (a snapshot install, a local write) empties the
 *    table at the next read or announcement.
 * A pending write-set shadows the cache (the overlays are read first), so a batch sees its
 * own and its predecessors' writes to these keys. Values over KL_READ_CACHE_VALUE_MAX bytes
 * are not kept. Direct-mapped over KL_READ_CACHE_SLOTS slots. Loop thread only. */
typedef struct kl_read_cache_slot {
    uint8_t key[KL_KEY_MAX];
    size_t klen;                 /* 0: empty */
    uint8_t val[KL_READ_CACHE_VALUE_MAX];
    size_t vlen;
    bool found;
} kl_read_cache_slot;
typedef struct kl_read_cache {
    uint64_t applied;            /* the store's applied index the slots hold for */
    uint64_t gen;                /* and its kl_store_state_gen */
    uint64_t hits, misses;
    kl_read_cache_slot s[KL_READ_CACHE_SLOTS];
} kl_read_cache;

/* Before the node applies the entry at `index` to st: keeps the slots that entry leaves
 * alone (see above) if the table held for st's applied index, else empties it; then the
 * table holds for `index`. Follow it with kl_read_cache_note_write for each key the entry
 * writes. Cost: a pass over the slots. */
void kl_read_cache_begin_apply(kl_read_cache *c, const kl_store *st, uint64_t index);
/* The announced apply puts or deletes key: its slot is dropped. Cost: one hash of the key. */
void kl_read_cache_note_write(kl_read_cache *c, const uint8_t *key, size_t klen);
/* The announced apply failed: the table holds for no index (another entry may yet be
 * applied at that one), and the next read or announcement empties it. */
void kl_read_cache_reset(kl_read_cache *c);

typedef struct kl_view {
    kl_store *store;
    kl_overlay *pending;   /* may be NULL: read applied state only */
    kl_overlay *scratch;   /* may be NULL for read-only views */
    uint64_t scanned;
    uint64_t scan_limit;
    kl_scan_hints *hints;  /* may be NULL: every scan seeks from its start */
    kl_read_cache *reads;  /* may be NULL: every applied read goes to the store */
} kl_view;

/* Point read. On found, *val is malloc'd (caller frees). RESOURCE_EXHAUSTED past the
 * scan budget. */
kl_code kl_view_get(kl_view *v, const uint8_t *key, size_t klen, uint8_t **val, size_t *vlen,
                    bool *found, kl_err *err);
kl_code kl_view_put(kl_view *v, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen,
                    kl_err *err);
/* A meta record 'M' name holding a big-endian u64 (ARCHITECTURE.md "Store layout"): the get
 * answers 0 when the record is absent or not 8 bytes long. One point read / one put. */
kl_code kl_view_get_meta_u64(kl_view *v, const char *name, uint64_t *out, kl_err *err);
kl_code kl_view_put_meta_u64(kl_view *v, const char *name, uint64_t value, kl_err *err);
/* Packs a protobuf message and puts it under key. */
kl_code kl_view_put_msg(kl_view *v, const uint8_t *key, size_t klen, const ProtobufCMessage *m,
                        kl_err *err);
kl_code kl_view_del(kl_view *v, const uint8_t *key, size_t klen, kl_err *err);

/* Calls fn for each live key with the given prefix, in key order, until fn returns
 * non-zero or keys run out.
 * The view must not be written during the scan (collect first, then write).
 * Counts each visited record against the scan budget. */
typedef int (*kl_view_scan_fn)(void *arg, const uint8_t *key, size_t klen, const uint8_t *val,
                               size_t vlen);
kl_code kl_view_scan(kl_view *v, const uint8_t *prefix, size_t plen, kl_view_scan_fn fn,
                     void *arg, kl_err *err);
/* Same, from the first key >= start (start must carry the prefix; else the prefix). */
kl_code kl_view_scan_from(kl_view *v, const uint8_t *prefix, size_t plen, const uint8_t *start,
                          size_t slen, kl_view_scan_fn fn, void *arg, kl_err *err);

#endif
