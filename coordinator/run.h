/* run: the coordinator process's life after its configuration was loaded.
 *
 * One libuv loop on the main thread holds everything that decides: the SIGTERM/SIGINT
 * handlers, the status timer and `workers` worker slots. A worker is not a thread: it is a
 * timer and one turn state machine (turn.h), so hundreds cost a few KiB each. A worker
 * whose buffer holds a due event starts a turn at most once per flush_interval_ms (the
 * seeds' timer: at most one transfer per flush turn) and drives it call by call; a worker
 * with nothing due arms no timer at all (discovery wakes it when it dispatches), so an idle
 * coordinator does not poll. Each call of a turn is started on the SDK's asynchronous API
 * (kl_call): no thread waits for it, its end puts the worker on a done list and wakes the
 * loop (uv_async), which collects the answer and decides the next call. So the turns in
 * flight, and the calls in flight (one per turn), are at most `workers`: fixed by the
 * configuration, and every turn holds one event of a bounded buffer (whose refusal is
 * counted as buffer_full). Discovery runs on its own ticker thread (discovery.interval_ms)
 * and shares the thread-safe kl_client. With a null principal there are no workers and no
 * discovery: the process says once that it idles and waits for a signal. libuv's
 * threadpool (`call_threads` threads) is started only while failpoints are armed (tests):
 * a before_ failpoint runs there, so its sleep parks that turn only.
 *
 * Shutdown on SIGTERM/SIGINT, one path: `stopping` is set (discovery stops between pages),
 * every call in flight is cancelled (kl_call_cancel: it ends at once) and every turn ends
 * "cancelled" (turn.h: before=<the call it did not finish or make>). Nothing is reported as
 * rolled back: a cancelled Accept or Complete may or may not have committed, the transfer
 * is still pending as far as this process knows, and the next coordinator resumes it with
 * the same command ids. Then discovery is joined, the final status is written, and the
 * process exits 0. */
#ifndef KL_COORD_RUN_H
#define KL_COORD_RUN_H

#include "coordinator/coord.h"

/* Runs until a signal. KL_OK after a clean shutdown. */
kl_code kl_coord_run(kl_coord *co, kl_err *err);

#endif
