#include "coordinator/ticker.h"

#include <assert.h>
#include <string.h>

static void on_tick(uv_timer_t *h)
{
    kl_coord_ticker *t = h->data;
    if (!atomic_load(&t->stopping) && t->fn(t->arg) && !atomic_load(&t->stopping)) {
        /* Fails only without a callback: the same timer was started with this one. */
        int r = uv_timer_start(&t->timer, on_tick, 0, uv_timer_get_repeat(&t->timer));
        assert(r == 0);
        (void)r;
    }
}

static void on_stop(uv_async_t *h)
{
    kl_coord_ticker *t = h->data;
    uv_timer_stop(&t->timer);
    uv_close((uv_handle_t *)&t->timer, NULL);
    uv_close((uv_handle_t *)&t->stop, NULL);
}

static void *run(void *arg)
{
    kl_coord_ticker *t = arg;
    uv_run(&t->loop, UV_RUN_DEFAULT); /* returns once on_stop closed both handles */
    return NULL;
}

/* Closes what was initialized and lets the loop process the closes. */
static void close_loop(kl_coord_ticker *t)
{
    uv_run(&t->loop, UV_RUN_DEFAULT);
    uv_loop_close(&t->loop);
}

kl_code kl_coord_ticker_start(kl_coord_ticker *t, uint64_t first_ms, uint64_t interval_ms,
                              kl_coord_tick_fn fn, void *arg, kl_err *err)
{
    memset(t, 0, sizeof *t);
    atomic_init(&t->stopping, false);
    t->fn = fn;
    t->arg = arg;
    int r;
    if ((r = uv_loop_init(&t->loop)) != 0)
        goto fail_loop;
    if ((r = uv_timer_init(&t->loop, &t->timer)) != 0)
        goto fail_timer;
    t->timer.data = t;
    if ((r = uv_async_init(&t->loop, &t->stop, on_stop)) != 0)
        goto fail_async;
    t->stop.data = t;
    if ((r = uv_timer_start(&t->timer, on_tick, first_ms, interval_ms)) != 0)
        goto fail_start;
    if ((r = pthread_create(&t->thread, NULL, run, t)) != 0)
        goto fail_thread;
    t->running = true;
    return KL_OK;

fail_thread:
    uv_timer_stop(&t->timer);
fail_start:
    uv_close((uv_handle_t *)&t->stop, NULL);
fail_async:
    uv_close((uv_handle_t *)&t->timer, NULL);
fail_timer:
    close_loop(t);
fail_loop:
    return kl_fail(err, KL_INTERNAL, "ticker", "cannot start a timer thread (%s)",
                   r > 0 ? strerror(r) : uv_strerror(r));
}

void kl_coord_ticker_stop(kl_coord_ticker *t)
{
    if (!t->running)
        return;
    atomic_store(&t->stopping, true);
    uv_async_send(&t->stop);
    pthread_join(t->thread, NULL);
    uv_loop_close(&t->loop);
    t->running = false;
}
