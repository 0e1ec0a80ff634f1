#include "coordinator/run.h"

#include "common/log.h"
#include "coordinator/discovery.h"
#include "coordinator/status.h"
#include "coordinator/ticker.h"
#include "coordinator/turn.h"

#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

typedef struct worker {
    kl_coord *co;
    uint32_t index;
    kl_coord_ticker ticker;
} worker;

typedef struct runner {
    kl_coord *co;
    kl_coord_discovery *disc;
    kl_coord_ticker disc_ticker;
    worker *workers;
    uint32_t n_started;
    uv_loop_t loop;
    uv_signal_t sigterm, sigint;
    uv_timer_t status;
} runner;

static void on_worker_tick(void *arg)
{
    worker *w = arg;
    if (!atomic_load(&w->co->stopping))
        kl_coord_turn(w->co, w->index);
}

static void on_discovery_tick(void *arg)
{
    kl_coord_discovery_round(arg);
}

static void write_status(kl_coord *co, bool final)
{
    kl_err err;
    if (kl_coord_status_write(co, final, &err) != KL_OK)
        KL_WARN("status_not_written", "code=%s detail=%s", kl_code_name(err.code), err.detail);
}

static void on_status(uv_timer_t *h) { write_status(h->data, false); }

static void on_signal(uv_signal_t *h, int signum)
{
    runner *r = h->data;
    KL_INFO("stopping", "signal=%d note=finishing_current_turns", signum);
    atomic_store(&r->co->stopping, true);
    uv_stop(&r->loop);
}

static void stop_tickers(runner *r)
{
    kl_coord_ticker_stop(&r->disc_ticker);
    for (uint32_t i = r->n_started; i > 0; i--)
        kl_coord_ticker_stop(&r->workers[i - 1].ticker);
    r->n_started = 0;
}

/* Starts discovery and the workers; on failure stops what was started. */
static kl_code start_tickers(runner *r, kl_err *err)
{
    kl_coord *co = r->co;
    kl_code rc;
    r->workers = calloc(co->cfg.workers, sizeof *r->workers);
    if (r->workers == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "coordinator: out of memory");
    for (uint32_t i = 0; i < co->cfg.workers; i++) {
        worker *w = &r->workers[i];
        w->co = co;
        w->index = i;
        /* Spread the first turns over one interval so workers do not fire in lockstep. */
        uint64_t first = (uint64_t)co->cfg.flush_interval_ms * i / co->cfg.workers;
        if ((rc = kl_coord_ticker_start(&w->ticker, first, co->cfg.flush_interval_ms,
                                        on_worker_tick, w, err)) != KL_OK)
            goto fail_workers;
        r->n_started++;
    }
    if ((rc = kl_coord_discovery_new(co, &r->disc, err)) != KL_OK)
        goto fail_workers;
    if ((rc = kl_coord_ticker_start(&r->disc_ticker, 0, co->cfg.discovery_interval_ms,
                                    on_discovery_tick, r->disc, err)) != KL_OK)
        goto fail_discovery;
    return KL_OK;

fail_discovery:
    kl_coord_discovery_free(r->disc);
    r->disc = NULL;
fail_workers:
    atomic_store(&co->stopping, true);
    stop_tickers(r);
    free(r->workers);
    r->workers = NULL;
    return rc;
}

kl_code kl_coord_run(kl_coord *co, kl_err *err)
{
    runner r;
    memset(&r, 0, sizeof r);
    r.co = co;
    kl_code rc = KL_INTERNAL;
    /* Block the signals the main loop handles while threads start: they inherit the mask,
     * so SIGTERM is only ever taken by the main thread (never interrupting a worker's
     * call). */
    sigset_t sigs, old;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, &old);
    if (uv_loop_init(&r.loop) != 0) {
        rc = kl_fail(err, KL_INTERNAL, "uv", "coordinator: cannot create the main loop");
        goto fail_loop;
    }
    uv_signal_init(&r.loop, &r.sigterm);
    uv_signal_init(&r.loop, &r.sigint);
    uv_timer_init(&r.loop, &r.status);
    r.sigterm.data = r.sigint.data = &r;
    r.status.data = co;
    if (co->cfg.has_principal) {
        KL_INFO("starting", "database=%s principal=%s workers=%" PRIu32 " flush_interval_ms=%"
                PRIu32 " buffer_capacity=%" PRIu32 " partitions=%d",
                co->cfg.database, co->cfg.principal_id, co->cfg.workers,
                co->cfg.flush_interval_ms, co->cfg.buffer_capacity,
                co->cluster->partition_count);
        if ((rc = start_tickers(&r, err)) != KL_OK)
            goto fail_tickers;
    } else {
        KL_INFO("idle", "database=%s reason=transfer_coordinator_principal_id_is_null "
                "note=no_discovery_waiting_for_SIGTERM", co->cfg.database);
    }
    uv_signal_start(&r.sigterm, on_signal, SIGTERM);
    uv_signal_start(&r.sigint, on_signal, SIGINT);
    uv_timer_start(&r.status, on_status, 0, KL_COORD_STATUS_EVERY_MS);
    /* Unblocked only now that the handlers exist: a SIGTERM that arrived during start-up
     * (main blocked it before opening) is taken here and drains like any other. */
    pthread_sigmask(SIG_UNBLOCK, &sigs, NULL);

    uv_run(&r.loop, UV_RUN_DEFAULT); /* until on_signal */

    uv_timer_stop(&r.status);
    stop_tickers(&r);
    write_status(co, true);
    KL_INFO("stopped", "delivered=%" PRIu64 " terminal_failures=%" PRIu64 " retries=%" PRIu64,
            (uint64_t)atomic_load(&co->stats.delivered),
            (uint64_t)atomic_load(&co->stats.terminal_failures),
            (uint64_t)atomic_load(&co->stats.retries));
    kl_coord_discovery_free(r.disc);
    free(r.workers);
    rc = KL_OK;

fail_tickers:
    uv_close((uv_handle_t *)&r.sigterm, NULL);
    uv_close((uv_handle_t *)&r.sigint, NULL);
    uv_close((uv_handle_t *)&r.status, NULL);
    uv_run(&r.loop, UV_RUN_DEFAULT);
    uv_loop_close(&r.loop);
fail_loop:
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}
