/* ticker: a thread running its own libuv loop with one repeating timer (the discovery pace;
 * workers are not threads, run.h). A callback that returns true asks for the next one at
 * once (the loop's next turn) instead of after the interval; the interval then counts
 * from that one.
 *
 * The callback runs on the ticker's thread, synchronously: the SDK calls it makes are
 * blocking and bounded by the client's call timeout, so the loop has nothing else to serve
 * meanwhile and a round is never interleaved with another. If a callback
 * overruns the interval, the next one starts right after it (libuv repeat semantics), never
 * two at once.
 *
 * Stop: kl_coord_ticker_stop wakes the loop through a uv_async; the loop stops the timer
 * once the running callback (if any) returned, closes its handles and ends; then the thread
 * is joined. So a stop waits for at most one callback and never interrupts a call midway;
 * a discovery round also returns between two pages once the coordinator is stopping. */
#ifndef KL_COORD_TICKER_H
#define KL_COORD_TICKER_H

#include "common/status.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

typedef bool (*kl_coord_tick_fn)(void *arg);

typedef struct kl_coord_ticker {
    uv_loop_t loop;
    uv_timer_t timer;
    uv_async_t stop;
    pthread_t thread;
    kl_coord_tick_fn fn;
    void *arg;
    bool running;          /* started and not yet stopped */
    atomic_bool stopping;  /* set by stop: no new callback starts (an overrun timer would
                            * otherwise fire once more before the wake-up is seen) */
} kl_coord_ticker;

/* Starts the thread; the first tick comes after first_ms, then every interval_ms. The
 * caller should have blocked the signals the main thread handles (the thread inherits the
 * mask). */
kl_code kl_coord_ticker_start(kl_coord_ticker *t, uint64_t first_ms, uint64_t interval_ms,
                              kl_coord_tick_fn fn, void *arg, kl_err *err);
/* Stops and joins (see above). A ticker that is not running is left alone. */
void kl_coord_ticker_stop(kl_coord_ticker *t);

#endif
