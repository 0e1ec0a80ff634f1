/* trace: sampled stamps of one replicated write on every member, so the legs BETWEEN members
 * (leader send -> follower read, follower acknowledgement -> leader read) can be measured,
 * which stages.h, one member's own view, cannot show.
 *
 * Off unless `every` > 0 (keyloadd --repl-trace N). Then each log index that is a multiple
 * of `every` gets a record on each member: on the leader from its proposal, on a follower
 * from the moment its transport read the append carrying it. A leader's record goes to the
 * sink once the index is applied, a follower's once the acknowledgement covering it left.
 * Stamps are CLOCK_MONOTONIC microseconds, comparable between the members of one host only
 * (tests/bench/repl_trace.sh joins their lines on the index).
 *
 * Owns a ring of KL_TRACE_RING records, slot = (index / every) % KL_TRACE_RING. A record
 * whose slot a newer index took (a member that stopped leading, an index never applied here)
 * is dropped without a report. Every stamp is the FIRST of its kind for the record: a
 * retransmitted append or a repeated acknowledgement changes nothing. Per peer, stamps are
 * kept for at most KL_TRACE_MAX_PEERS members (common/limits.h; more are ignored).
 *
 * Cost: off, one NULL check per call (kl_trace_new returns no tracer). On: per call, one step
 * per sampled index in the range, bounded by the ring (a range is clamped to its newest
 * KL_TRACE_RING sampled indexes); one sink call per sampled index. No allocation after new.
 * Loop thread only. */
#ifndef KL_REPL_TRACE_H
#define KL_REPL_TRACE_H

#include "common/limits.h"
#include "common/status.h"

#include <stdbool.h>
#include <stdint.h>

#define KL_TRACE_RING 256

typedef enum kl_trace_point {
    KL_TP_PROPOSE = 0,  /* leader: proposed */
    KL_TP_READ = 1,     /* follower: its transport read the append */
    KL_TP_STEP = 2,     /* follower: the core stepped that append */
    KL_TP_W_START = 3,  /* the synced write holding it was handed to the log writer */
    KL_TP_W_DONE = 4,   /* that write's completion reached the loop */
    KL_TP_ACK_SENT = 5, /* follower: the acknowledgement covering it was sent (stamped just
                         * before the send call, as KL_TPP_SENT is; kept only if it went) */
    KL_TP_COMMIT = 6,   /* leader: the core's commit index reached it */
    KL_TP_APPLIED = 7,  /* leader: applied */
    KL_TP_COUNT = 8,
} kl_trace_point;

typedef enum kl_trace_peer_point {
    KL_TPP_SENT = 0,     /* leader: the first append carrying it was sent to the peer (stamped
                          * just before the send call) */
    KL_TPP_ACK_READ = 1, /* leader: the transport read the peer's first acknowledgement of it */
    KL_TPP_ACK_STEP = 2, /* leader: the core stepped that acknowledgement */
    KL_TPP_COUNT = 3,
} kl_trace_peer_point;

typedef struct kl_trace_record {
    uint64_t index;  /* 0 = empty slot */
    bool leader;
    uint64_t t[KL_TP_COUNT]; /* us; 0 = not stamped */
    uint64_t peer[KL_TRACE_MAX_PEERS]; /* member id per column of p; 0 = unused */
    uint64_t p[KL_TRACE_MAX_PEERS][KL_TPP_COUNT];
} kl_trace_record;

/* Receives each finished record (valid during the call only). */
typedef void (*kl_trace_sink)(void *ctx, const kl_trace_record *rec);

typedef struct kl_trace kl_trace;

/* every = 0: *out = NULL and KL_OK (tracing off; every other call accepts NULL).
 * KL_INVALID_ARGUMENT (detail "repl_trace") when every > KL_TRACE_EVERY_MAX, KL_INTERNAL
 * when out of memory. */
kl_code kl_trace_new(uint32_t every, kl_trace_sink sink, void *ctx, kl_trace **out, kl_err *err);
void kl_trace_free(kl_trace *t);
/* Starts the records of the sampled indexes in [lo, hi] (a slot's older record is dropped)
 * and stamps p: PROPOSE for a leader's own proposal, READ for a follower's received append. */
void kl_trace_begin(kl_trace *t, uint64_t lo, uint64_t hi, bool leader, kl_trace_point p, uint64_t now_ns);
/* Stamps p on the started records of the sampled indexes in [lo, hi]. */
void kl_trace_mark(kl_trace *t, uint64_t lo, uint64_t hi, kl_trace_point p, uint64_t now_ns);
/* Stamps p for peer on the started records of the sampled indexes in [lo, hi]. */
void kl_trace_peer_mark(kl_trace *t, uint64_t lo, uint64_t hi, uint64_t peer, kl_trace_peer_point p,
                        uint64_t now_ns);
/* Hands the started records of the sampled indexes in [lo, hi] of this role to the sink and
 * empties their slots. */
void kl_trace_emit(kl_trace *t, uint64_t lo, uint64_t hi, bool leader);

#endif
