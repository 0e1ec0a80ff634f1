/* queue: a queue's own records on the partition that holds it (the queue record, its
 * messages, their availability, timed and lease index entries) and the mutations that
 * change them. Every write goes to the evaluation context's scratch overlay; see
 * daemon/store/keys.h for the layout and its invariants, which every function here
 * preserves. */
#ifndef KL_QUEUE_H
#define KL_QUEUE_H

#include "daemon/engine/engine.h"
#include "keyload/v1/catalog.pb-c.h"

/* The evaluate column of the queue kinds' rows (daemon/engine/mutation.c). Each appends
 * its MutationResult to out. */
kl_code kl_queue_eval_enqueue(kl_eval_ctx *c, const Keyload__V1__Enqueue *m, kl_buf *out, kl_err *err);
kl_code kl_queue_eval_receive(kl_eval_ctx *c, const Keyload__V1__Receive *m, kl_buf *out, kl_err *err);
/* Ack (ack true) or Release of ntok lease tokens of ref's queue, all or none. */
kl_code kl_queue_eval_ack_release(kl_eval_ctx *c, const Keyload__V1__QueueLaneRef *ref, size_t ntok,
                                  const ProtobufCBinaryData *toks, bool ack, kl_buf *out, kl_err *err);

/* Closes an empty queue on its own partition (DeleteQueue's first step): it takes no more
 * messages, and its records go when the catalog's drop arrives. FAILED_PRECONDITION
 * "queue_not_empty" or "queue_has_transfers" otherwise. *qid names the queue. */
kl_code kl_queue_close_local(kl_eval_ctx *c, const Keyload__V1__QueueLaneRef *ref, uint64_t *qid, kl_err *err);

/* The queue's own records on the partition the catalog places it on, created when the
 * catalog item that defines it is applied. */
kl_code kl_queue_create_local(kl_view *v, const Keyload__V1__CatalogQueue *q, kl_err *err);
/* Removes a closed, empty queue's records when the catalog drops its definition; one that
 * still holds messages or transfer records keeps them. */
kl_code kl_queue_drop_local(kl_view *v, const Keyload__V1__CatalogQueue *q, kl_err *err);

/* Whether queue qid retains transfer records (DeleteQueue refuses then). */
kl_code kl_queue_retains_transfers(kl_view *v, uint64_t qid, bool *retains, kl_err *err);

/* Per-queue gauges for metrics (ARCHITECTURE.md "Metrics"): the partition's live queues in
 * queue id order. The first `max` get their depth (retained messages) and in-flight count
 * (leased or delayed at now_ms: a scan of their 'T' records) in out; *total counts every
 * live queue. Every record read is charged to v's scan limit, which bounds the cost: past
 * it the answer is RESOURCE_EXHAUSTED with what was filled so far in *filled. */
typedef struct kl_queue_gauge {
    uint64_t qid, messages, bytes, in_flight;
} kl_queue_gauge;
kl_code kl_queue_gauges(kl_view *v, int64_t now_ms, kl_queue_gauge *out, size_t max,
                        size_t *filled, size_t *total, kl_err *err);

#endif
