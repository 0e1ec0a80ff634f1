/* run: the coordinator process's life after its configuration was loaded.
 *
 * One libuv loop on the main thread holds everything that decides: the SIGTERM/SIGINT
 * handlers, the status timer and `workers` worker slots. A worker is not a thread: it is a
 * timer and one turn state machine (turn.h), so hundreds cost a few KiB each. A worker
 * whose buffer holds a due event starts a turn at most once per flush_interval_ms (the
 * seeds' timer: at most one transfer per flush turn) and drives it call by call; a worker
 * with nothing due arms no timer at all (discovery wakes it when it dispatches), so an idle
 * coordinator does not poll. Each call of a turn runs on the call pool (libuv's
 * threadpool, `call_threads` threads, because the SDK's calls block); its answer comes back
 * to the loop, which decides the next call. So the calls in flight are at most
 * min(workers, call_threads), the pool's queue holds at most one call per turn, and the
 * turns in flight are at most `workers`: all fixed by the configuration, and every turn
 * holds one event of a bounded buffer (whose refusal is counted as buffer_full). Discovery runs on
 * its own ticker thread (discovery.interval_ms) and shares the thread-safe kl_client. With
 * a null principal there are no workers and no discovery: the process says once that it
 * idles and waits for a signal.
 *
 * Shutdown on SIGTERM/SIGINT, one path: `stopping` is set (discovery stops between pages),
 * calls queued on the pool but not started are cancelled, and every turn ends at its next
 * point between two calls (turn.h: "cancelled", before=<the call it did not make>); a call
 * that is running is never abandoned midway, so the drain waits for at most one call per
 * turn (call_timeout_ms bounds it). Nothing is reported as rolled back: an unfinished
 * transfer is still pending and the next coordinator resumes it with the same command ids.
 * Then discovery is joined, the final status is written, and the process exits 0. */
#ifndef KL_COORD_RUN_H
#define KL_COORD_RUN_H

#include "coordinator/coord.h"

/* Runs until a signal. KL_OK after a clean shutdown. */
kl_code kl_coord_run(kl_coord *co, kl_err *err);

#endif
