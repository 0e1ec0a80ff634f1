/* node: the partition core on one member (DESIGN.md §3 write path), without I/O.
 *
 * It owns the pending overlay, the table of pending outcomes and the open log entry.
 * The driver (daemon/main.c, or a test) supplies I/O through kl_node_io: it performs the
 * durable append the node asks for and reports back with kl_node_append_done; the node
 * then commits, applies the entry to the store and answers every waiting caller. With
 * one member an entry is committed once appended; KL-2's replication sits between
 * append and commit without changing this interface's shape.
 *
 * Invariants:
 *  - at most one append is in flight; batches arriving meanwhile join the open entry
 *    (group commit), which is flushed when the in-flight append completes;
 *  - a (principal, command id) is either committed (outcome in the store), pending (in
 *    the table, with its receipt already encoded) or unknown, never two of these;
 *  - a caller is answered OK only after its entry is durable and applied.
 * Threading: every function runs on the executor (the libuv loop thread). */
#ifndef KL_NODE_H
#define KL_NODE_H

#include "common/cluster.h"
#include "common/status.h"
#include "daemon/store/store.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kl_node kl_node;

/* Answer to one submitted batch. On KL_OK, receipt holds the stored receipt bytes (valid
 * during the call only); otherwise err explains. */
typedef void (*kl_node_reply_fn)(void *cookie, kl_code code, const kl_err *err,
                                 const uint8_t *receipt, size_t len);

typedef struct kl_node_io {
    void *ctx;
    /* Starts the durable append of encoded entry `index`; the bytes stay valid until
     * kl_node_append_done(index) is called. */
    void (*append)(void *ctx, uint64_t index, const uint8_t *entry, size_t len);
    int64_t (*clock_ms)(void *ctx);
    void (*random)(uint8_t *buf, size_t n);
} kl_node_io;

typedef struct kl_node_config {
    int partition;
    kl_limits limits;
    size_t max_pending_bytes;     /* refusal (UNAVAILABLE) past this many unapplied bytes */
    size_t max_pending_batches;   /* and past this many unapplied batches */
} kl_node_config;

/* Recovers: re-applies every logged entry past the store's applied index, and writes the
 * partition's first entry (its incarnation) into an empty store. */
kl_code kl_node_open(kl_store *st, const kl_node_config *cfg, const kl_node_io *io, kl_node **out,
                     kl_err *err);
/* Answers every caller still waiting UNKNOWN_WRITE_OUTCOME (their batches may commit
 * after a restart) and frees the node. The store stays open (caller owns it). */
void kl_node_close(kl_node *n);

/* Submits an encoded BatchRequest from `principal`. reply is called exactly once, maybe
 * before this returns. */
void kl_node_submit_batch(kl_node *n, const char *principal, const uint8_t *req, size_t len,
                          kl_node_reply_fn reply, void *cookie);

/* The driver reports the append of `index`. On failure every caller of that entry is
 * answered UNKNOWN_WRITE_OUTCOME and the node refuses further batches (UNAVAILABLE):
 * its pending state can no longer be trusted; the daemon restarts to recover. */
void kl_node_append_done(kl_node *n, uint64_t index, kl_code status, const kl_err *err);

/* QueueStats over applied state. On KL_OK *answer is malloc'd (caller frees). */
kl_code kl_node_queue_stats(kl_node *n, const uint8_t *req, size_t len, uint8_t **answer,
                            size_t *answer_len, kl_err *err);

bool kl_node_broken(const kl_node *n);
uint64_t kl_node_applied_index(const kl_node *n);
size_t kl_node_pending_batches(const kl_node *n);

#endif
