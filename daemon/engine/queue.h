/* queue: a queue's own records on the partition that holds it (the queue record, its
 * messages, their availability, timed and lease index entries) and the mutations that
 * change them. Every write goes to the evaluation context's scratch overlay; see
 * daemon/store/keys.h for the layout and its invariants, which every function here
 * preserves. */
#ifndef KL_QUEUE_H
#define KL_QUEUE_H

#include "daemon/engine/engine.h"

/* The evaluate column of the queue kinds' rows (daemon/engine/mutation.c). Each appends
 * its MutationResult to out. */
kl_code kl_queue_eval_delete(kl_eval_ctx *c, const Keyload__V1__DeleteQueue *m, kl_buf *out, kl_err *err);
kl_code kl_queue_eval_enqueue(kl_eval_ctx *c, const Keyload__V1__Enqueue *m, kl_buf *out, kl_err *err);
kl_code kl_queue_eval_receive(kl_eval_ctx *c, const Keyload__V1__Receive *m, kl_buf *out, kl_err *err);
/* Ack (ack true) or Release of ntok lease tokens of ref's queue, all or none. */
kl_code kl_queue_eval_ack_release(kl_eval_ctx *c, const Keyload__V1__QueueLaneRef *ref, size_t ntok,
                                  const ProtobufCBinaryData *toks, bool ack, kl_buf *out, kl_err *err);

#endif
