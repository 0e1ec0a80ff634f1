/* turn: one worker flush turn as a state machine (seeds: "at most one transfer per flush
 * turn"). A turn drives ONE due event as far as it can go now, one call at a time, in the
 * seeds' order, each read a fresh read-index read (nothing is cached between turns or
 * between steps):
 *   1. reload and freshly authorize the persisted principal (ShowPrincipal: same tenant,
 *      an administrator of the database);
 *   2. fresh-read the source intent: Delivered -> done; NOT_FOUND -> dropped; a stored
 *      intent token other than the event's -> proof_changed, dropped (discovery brings the
 *      current one);
 *   3. fresh-read the destination receipt; present -> 5;
 *   4. absent: submit ONE canonical Accept under the deterministic accept command id, then
 *      reread the receipt; still absent -> UNKNOWN_WRITE_OUTCOME (retry, same id);
 *   5. reread the source (OutputPending, same intent token) and the receipt (byte-identical
 *      to the one read before; a changed proof refuses and is retried);
 *   6. submit Complete under the deterministic complete command id: OK (or `already`) ->
 *      done.
 * An event carrying a retained failure first runs the recovery flowchart (principal,
 * source, [the receipt of a denied Complete], one failure read, at most one Advance); a
 * RECEIPT_EXISTS verdict continues with the ordinary path from step 1.
 * Terminal refusals (PERMISSION_DENIED, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, CONFLICT,
 * INVALID_ARGUMENT: the daemon commits them as no-effect outcomes of Accept and Complete)
 * leave the transfer pending, are recorded in the failed table and are not retried under a
 * new id. Everything else is transient: the event goes back to the buffer with exponential
 * backoff (event.h), same command ids. Nothing is ever reported as rolled back.
 *
 * Shape: the machine never blocks, and neither do its calls. kl_coord_turn_begin names
 * the first call in t->at; kl_coord_turn_before runs that call's before_ failpoint;
 * kl_coord_turn_start starts the call on the SDK's asynchronous API (kl_call: no thread
 * waits for it) and kl_coord_turn_collect, on the scheduler's thread once the call's done
 * ran, stores its result in t; kl_coord_turn_next consumes the result and either names the
 * next call in t->at (KL_COORD_TURN_CONTINUE) or ends the turn with an outcome that
 * kl_coord_turn_finish applies to the buffer. Unit tests drive next() with hand-made
 * results in place of the call.
 *
 * Cancellation: once the coordinator is stopping (SIGTERM), next() ends the turn before the
 * call it would have made (log "cancelled", before=<that call>); a call in flight is
 * cancelled (kl_call_cancel) and its turn ends through the same path
 * (kl_coord_turn_cancel) without looking at what it answered. Either way the transfer
 * stays as the cluster has it (a cancelled Accept or Complete may or may not have
 * committed), and the next run rediscovers it and repeats the same ids.
 *
 * Every decision is one log line (component "coordinator"): transfer id as GUID text,
 * lanes, generation, codes and details; never a token or a message body. The "delivered"
 * line carries the turn's per-call times in microseconds (us=call:time,...).
 *
 * Failpoints (common/failpoint.h): coord.before_accept, coord.after_accept_sent,
 * coord.before_complete, coord.after_complete_sent, coord.before_advance,
 * coord.after_advance. An error(CODE) action makes that stage fail with CODE (and is
 * handled like a real failure of it). The before_ ones run where a sleep parks this turn
 * only (run.c: on libuv's pool while failpoints are armed); the after_ ones run on the
 * scheduler's thread. */
#ifndef KL_COORD_TURN_H
#define KL_COORD_TURN_H

#include "common/guid.h"
#include "coordinator/coord.h"

#include <stdbool.h>
#include <stdint.h>

/* The call a turn makes next (or made last): the points of the seeds' order. */
typedef enum kl_coord_turn_at {
    KL_COORD_AT_NONE,
    KL_COORD_AT_RECOVER_PRINCIPAL, /* recovery: ShowPrincipal */
    KL_COORD_AT_RECOVER_SOURCE,    /* recovery: the source intent */
    KL_COORD_AT_FAILURE_RECEIPT,   /* recovery of a denied Complete: the receipt it carried */
    KL_COORD_AT_FAILURE_READ,      /* ReadQueueTransferFailure / the Complete's */
    KL_COORD_AT_ADVANCE,           /* one Advance (attempt or repair) batch */
    KL_COORD_AT_PRINCIPAL,         /* 1 */
    KL_COORD_AT_SOURCE,            /* 2 */
    KL_COORD_AT_RECEIPT,           /* 3 */
    KL_COORD_AT_ACCEPT,            /* 4: the Accept batch */
    KL_COORD_AT_REREAD,            /* 4: the receipt after Accept */
    KL_COORD_AT_RECHECK_SOURCE,    /* 5 */
    KL_COORD_AT_RECHECK_RECEIPT,   /* 5 */
    KL_COORD_AT_COMPLETE,          /* 6: the Complete batch */
    KL_COORD_AT_COMPLETE_STALE,    /* the source after a Complete replay answered stale */
    KL_COORD_AT_COUNT
} kl_coord_turn_at;

typedef enum kl_coord_turn_out {
    KL_COORD_TURN_CONTINUE,  /* t->at names the next call */
    KL_COORD_TURN_DONE,      /* Delivered: by this turn or found so */
    KL_COORD_TURN_DROP,      /* nothing to do with this event any more */
    KL_COORD_TURN_RETRY,     /* transient: back to the buffer with backoff, same ids */
    KL_COORD_TURN_FAILED,    /* terminal refusal: stays pending, recorded, not retried */
    KL_COORD_TURN_CANCELLED, /* stopping: ended before the call named by t->stage */
    KL_COORD_TURN_RECOVER,   /* a retained quota/permission failure: back to the buffer */
} kl_coord_turn_out;

typedef struct kl_coord_turn {
    kl_coord *co;
    kl_coord_event *ev;
    uint32_t worker;
    kl_coord_turn_at at;                /* the call to make / just made */
    kl_call *call;                      /* the call in flight (started, not collected) */
    Keyload__V1__QueueLaneRef src, dst; /* complete refs (command id inputs) */
    /* The call's input when it is a batch (Accept, Complete, Advance). */
    kl_batch *batch;
    char cmd[KL_GUID_TEXT_LEN + 1];
    bool repair;                        /* the Advance is a repair (else an attempt) */
    /* The call's result, written by exec (or a test), consumed by next. */
    kl_code rc;
    kl_err err;
    bool after_failed;                  /* a batch answered OK, then its after_ failpoint
                                         * fired: the answer is set aside */
    bool answer_noted;                  /* the answer's counters and log line are done */
    union {
        Keyload__V1__ShowPrincipalAnswer *principal;
        Keyload__V1__InspectQueueTransferAnswer *source;
        Keyload__V1__InspectQueueTransferReceiptAnswer *receipt;
        Keyload__V1__ReadQueueTransferFailureAnswer *failure;
        kl_receipt *batch;
    } ans;
    /* Held across calls: the receipt read before Complete; the receipt of a denied
     * Complete (the failure read's input). */
    Keyload__V1__InspectQueueTransferReceiptAnswer *first, *failure_rcpt;
    const char *stage;                  /* what failed (retry line) or the call not made */
    const char *step;                   /* "accept" / "complete" ... for a terminal failure */
    bool stale;                         /* a replay answered stale_authority */
    int64_t call_start_us;              /* timing of the call in flight */
    char timing[256];                   /* "principal:812,inspect_source:1203,..." */
    char fields[700];                   /* the event's common log fields */
} kl_coord_turn;

/* Whether an Accept or Complete refusal is terminal (the daemon's
 * kl_transfer_refusal_is_terminal: it committed the refusal under the command id). */
bool kl_coord_refusal_is_terminal(kl_code code);

/* The call's name as log lines and status views spell it. */
const char *kl_coord_turn_at_name(kl_coord_turn_at at);

/* Starts a turn of worker `worker` over ev (popped from that worker's buffer, in flight):
 * t->at is the first call. */
void kl_coord_turn_begin(kl_coord_turn *t, kl_coord *co, kl_coord_event *ev, uint32_t worker);
/* Whether the call named by t->at has failpoints (the batches). */
bool kl_coord_turn_has_failpoint(const kl_coord_turn *t);
/* Clears the previous result and runs the before_ failpoint of t->at (any thread; a sleep
 * there waits): false = it failed, and t holds that result (no call is made). */
bool kl_coord_turn_before(kl_coord_turn *t);
/* Starts the call named by t->at (SDK asynchronous API, bounded by the client's timeout):
 * true = in flight, done(t->call, arg) runs once on an SDK thread; false = it could not
 * start and t holds that result. */
bool kl_coord_turn_start(kl_coord_turn *t, kl_call_done_fn done, void *arg);
/* After done, on the scheduler's thread: the call's result into t; the call is freed. */
void kl_coord_turn_collect(kl_coord_turn *t);
/* Whether the collected result has an after_ failpoint to run (an answered batch). */
bool kl_coord_turn_has_after_failpoint(const kl_coord_turn *t);
/* Runs the after_ failpoint of the collected result (any thread; a sleep there waits, so
 * the scheduler runs it off its loop, which then still takes a SIGTERM meanwhile). */
void kl_coord_turn_after(kl_coord_turn *t);
/* Consumes the result of t->at: CONTINUE with the next call in t->at, or the outcome. */
kl_coord_turn_out kl_coord_turn_next(kl_coord_turn *t);
/* The call named by t->at will not be made (stopping): CANCELLED. */
kl_coord_turn_out kl_coord_turn_cancel(kl_coord_turn *t);
/* Applies an outcome other than CONTINUE (buffer, failed table, counters, log) and frees
 * what the turn holds. t may be reused afterwards. */
void kl_coord_turn_finish(kl_coord_turn *t, kl_coord_turn_out out);

#endif
