/* view: reads of "applied state + pending write-sets + this batch's own writes", and the
 * batch's writes, for the evaluator (ARCHITECTURE.md "Write path" step 7). Layers, highest first:
 * scratch (this batch), pending (proposed, unapplied batches), RocksDB (applied).
 * Every record a view reads counts against its scan budget (MaxScanRecords), so one
 * batch or read can only examine a bounded number of records. */
#ifndef KL_VIEW_H
#define KL_VIEW_H

#include "daemon/engine/overlay.h"
#include "daemon/store/store.h"

#include <protobuf-c/protobuf-c.h>

typedef struct kl_view {
    kl_store *store;
    kl_overlay *pending;   /* may be NULL: read applied state only */
    kl_overlay *scratch;   /* may be NULL for read-only views */
    uint64_t scanned;
    uint64_t scan_limit;
} kl_view;

/* Point read. On found, *val is malloc'd (caller frees). RESOURCE_EXHAUSTED past the
 * scan budget. */
kl_code kl_view_get(kl_view *v, const uint8_t *key, size_t klen, uint8_t **val, size_t *vlen,
                    bool *found, kl_err *err);
kl_code kl_view_put(kl_view *v, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen,
                    kl_err *err);
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
