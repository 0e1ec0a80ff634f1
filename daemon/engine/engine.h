/* engine: validation and evaluation of batches into write-sets (ARCHITECTURE.md "Write path", "Engine").
 *
 * Pure with respect to I/O: it reads through a kl_view and writes only into the view's
 * scratch overlay; time, partition and limits come in through kl_eval_ctx. Given the same
 * view contents, context and request it produces the same writes, which is what lets
 * followers apply a leader's write-set instead of re-evaluating.
 *
 * All or nothing: a failing mutation returns its error and the caller drops the scratch
 * overlay, so nothing of the earlier mutations survives. Every limit is checked before
 * the write it guards. */
#ifndef KL_ENGINE_H
#define KL_ENGINE_H

#include "common/canon.h"
#include "common/cluster.h"
#include "common/limits.h"
#include "common/names.h"
#include "daemon/engine/buf.h"
#include "daemon/engine/record.h"
#include "daemon/engine/view.h"
#include "keyload/v1/queue.pb-c.h"


struct kl_catalog_batch;
struct kl_signing_cache;
struct kl_authz_subject;

typedef struct kl_eval_ctx {
    kl_view *view;
    const kl_limits *limits;
    int partition;
    int partition_count;     /* partitions in the cluster (placement choices) */
    struct kl_catalog_batch *catalog;  /* partition 0: the catalog batch; NULL elsewhere */
    const uint8_t *cluster_secret;     /* 32 bytes, or NULL when the daemon has none (databases
                                        * need it: their signing keys derive from it) */
    struct kl_signing_cache *signing;  /* NULL, or where derived database keys are kept */
    uint64_t index, term;    /* where this batch's entry will commit (leader: io.next);
                              * transfer receipts name it. 0 for reads. */
    int64_t now_ms;          /* entry time: the leader's clock, rate-bounded (daemon/entry_clock.h) */
    void (*random)(uint8_t *buf, size_t n);  /* lease tokens; injected so tests control it */
    /* Who asks, as this partition's applied catalog records it; NULL = the trusted local
     * administrator (insecure_local_admin clusters). Every mutation is authorized through
     * daemon/engine/access.h before it is evaluated. */
    const struct kl_authz_subject *who;
    /* Optional (NULL: not measured): a monotonic clock, and the time authorization checks
     * took is added to authz_ns (make bench reports it). Never changes a result. */
    uint64_t (*clock_ns)(void);
    uint64_t authz_ns;
} kl_eval_ctx;


/* Shape checks needing no state: command id, mutation count, names, message sizes.
 * encoded_len is the request's wire size, checked against MaxBatchBytes. */
kl_code kl_engine_validate_batch(const Keyload__V1__BatchRequest *b, size_t encoded_len,
                                 const kl_limits *limits, kl_err *err);

/* The one database the batch's queue refs name (*tenant NULL when none does, e.g. a
 * database creation). INVALID_ARGUMENT when they name two. Pointers borrow from b. */
kl_code kl_engine_batch_database(const Keyload__V1__BatchRequest *b, const char **tenant,
                                 const char **database, kl_err *err);

/* Evaluates every mutation in order into ctx->view's scratch overlay and appends each
 * result, encoded, to results. */
kl_code kl_engine_eval_batch(kl_eval_ctx *ctx, const Keyload__V1__BatchRequest *b, kl_buf *results,
                             kl_err *err);

/* Stores msg as a new message of ref's lane (quota and expiry checked first); Enqueue and
 * transfer Accept. *qid and *seq name the queue and the new message. */
kl_code kl_engine_enqueue_message(kl_eval_ctx *c, const Keyload__V1__QueueLaneRef *ref,
                                  Keyload__V1__EnqueueMessage *msg, uint64_t *qid, uint64_t *seq,
                                  kl_err *err);
struct Keyload__V1__QueueRecord;
/* A live queue of this partition by name (NOT_FOUND, detail wrong_partition when the
 * catalog places it elsewhere). *rec unpacked (caller frees). */
kl_code kl_engine_load_queue(kl_view *v, const Keyload__V1__QueueLaneRef *ref, uint64_t *qid,
                             struct Keyload__V1__QueueRecord **rec, kl_err *err);

/* Read of one queue's counters and limits from applied state (QueueStats). */
/* dlq_out (KL_NAME_LEN_MAX + 1 bytes) receives the dead-letter queue name that
 * limits_out->dead_letter_queue then points at. */
kl_code kl_engine_queue_stats(kl_eval_ctx *ctx, const Keyload__V1__QueueLaneRef *q,
                              Keyload__V1__QueueStatsAnswer *out, Keyload__V1__QueueLimits *limits_out,
                              char *dlq_out, kl_err *err);

#endif
