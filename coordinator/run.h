/* run: the coordinator process's life after its configuration was loaded (DESIGN.md §8).
 *
 * Threads: the main thread runs a libuv loop with the SIGTERM/SIGINT handlers and the
 * status timer; one discovery ticker (discovery.interval_ms) and `workers` worker tickers
 * (flush_interval_ms; each turn drives at most one transfer, turn.h) run on their own
 * threads and loops and share the thread-safe kl_client. With a null principal there are
 * no tickers: the process says once that it idles and waits for a signal.
 *
 * Shutdown on SIGTERM/SIGINT: `stopping` is set (discovery stops between pages), every
 * ticker is stopped and joined (a worker finishes the turn it is in, which its call
 * timeout bounds; none is cancelled midway and nothing is reported as rolled back: an
 * unfinished transfer is simply still pending and the next coordinator resumes it with the
 * same command ids), the final status is written, and the process exits 0. */
#ifndef KL_COORD_RUN_H
#define KL_COORD_RUN_H

#include "coordinator/coord.h"

/* Runs until a signal. KL_OK after a clean shutdown. */
kl_code kl_coord_run(kl_coord *co, kl_err *err);

#endif
