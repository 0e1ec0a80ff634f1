#include "coordinator/run.h"

#include "common/failpoint.h"
#include "common/log.h"
#include "common/metrics_http.h"
#include "coordinator/discovery.h"
#include "coordinator/metrics.h"
#include "coordinator/status.h"
#include "coordinator/ticker.h"
#include "coordinator/turn.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

typedef struct runner runner;

typedef struct worker {
    runner *r;
    uint32_t index;
    uv_timer_t timer;      /* armed only while the buffer holds something */
    uv_work_t work;        /* an armed before_ failpoint, on libuv's pool (tests only) */
    bool in_pool;          /* work is queued or running */
    bool before_ok;        /* work's verdict */
    bool cancelled;        /* the call in flight was cancelled by the stop */
    struct worker *next_done; /* in the runner's done list, waiting for the loop */
    kl_coord_turn turn;
    bool busy;             /* a turn is in flight */
    bool started_once;
    int64_t last_start_ms; /* the flush pace: next turn no earlier than this + interval */
} worker;

struct runner {
    kl_coord *co;
    kl_coord_discovery *disc;
    kl_coord_ticker disc_ticker;
    bool disc_running;
    worker *workers;
    uint32_t n_workers;
    uint32_t in_flight;    /* turns, loop thread only */
    uv_loop_t loop;
    uv_signal_t sigterm, sigint;
    uv_timer_t status;
    uv_async_t wake;       /* discovery -> loop: events were dispatched */
    uv_async_t calls_done; /* SDK threads -> loop: calls ended (done list) */
    pthread_mutex_t done_mu;
    worker *done_head;     /* under done_mu */
    kl_metrics_http *metrics; /* the config's "metrics" endpoint, if any */
};

static void schedule(worker *w);

static bool on_discovery_tick(void *arg)
{
    return kl_coord_discovery_round(arg);
}

static void write_status(kl_coord *co, bool final)
{
    kl_err err;
    if (kl_coord_status_write(co, final, &err) != KL_OK)
        KL_WARN("status_not_written", "code=%s detail=%s", kl_code_name(err.code), err.detail);
}

static void on_status(uv_timer_t *h) { write_status(h->data, false); }

/* The drain is over once no turn is in flight: the loop may end. */
static void check_drained(runner *r)
{
    if (atomic_load(&r->co->stopping) && r->in_flight == 0)
        uv_stop(&r->loop);
}

/* ------------------------------------------------------------ one turn on the loop
 *
 * A turn's calls run on the SDK's asynchronous API: no thread waits for them, so every
 * worker may have its turn in flight at once. A call's end (on an SDK thread) puts its
 * worker on the done list and wakes the loop, which collects the answer and moves the
 * machine on. Armed before_ failpoints (tests) run on libuv's pool, where a sleep parks
 * that turn only. */

static void submit(worker *w);

static void end_turn(worker *w, kl_coord_turn_out o)
{
    runner *r = w->r;
    kl_coord_turn_finish(&w->turn, o);
    w->busy = false;
    w->cancelled = false;
    r->in_flight--;
    atomic_fetch_sub(&r->co->stats.turns_in_flight, 1);
    schedule(w);
    check_drained(r);
}

/* The result in w->turn is there: the machine decides the next call (or the end). */
static void turn_result(worker *w)
{
    kl_coord_turn_out o = kl_coord_turn_next(&w->turn);
    if (o == KL_COORD_TURN_CONTINUE)
        submit(w);
    else
        end_turn(w, o);
}

/* Any SDK thread (or the loop, when a call ends at once). */
static void on_call_done(kl_call *call, void *arg)
{
    (void)call;
    worker *w = arg;
    runner *r = w->r;
    pthread_mutex_lock(&r->done_mu);
    w->next_done = r->done_head;
    r->done_head = w;
    pthread_mutex_unlock(&r->done_mu);
    uv_async_send(&r->calls_done);
}

static void after_fp_work_cb(uv_work_t *req)
{
    worker *w = req->data;
    kl_coord_turn_after(&w->turn);
}

/* Whatever the failpoint did, the machine decides next: stopping, it ends the turn before
 * its next call (a work item cancelled by the stop did not run the failpoint). */
static void after_fp_done_cb(uv_work_t *req, int status)
{
    (void)status;
    worker *w = req->data;
    w->in_pool = false;
    turn_result(w);
}

/* An answered batch's after_ failpoint runs on the thread pool, as the before_ ones do: a
 * sleep there must not hold the loop, which takes SIGTERM. */
static void queue_after(worker *w)
{
    w->work.data = w;
    w->in_pool = true;
    if (uv_queue_work(&w->r->loop, &w->work, after_fp_work_cb, after_fp_done_cb) != 0)
        after_fp_done_cb(&w->work, UV_ECANCELED); /* cannot happen with a live loop */
}

/* A call cancelled by the stop ends its turn "cancelled" whatever it answered. */
static void on_calls_done(uv_async_t *h)
{
    runner *r = h->data;
    pthread_mutex_lock(&r->done_mu);
    worker *w = r->done_head;
    r->done_head = NULL;
    pthread_mutex_unlock(&r->done_mu);
    /* The next calls of every turn handled here leave together, one write per member
     * connection (kl_calls_hold): with one send per call the coordinator spent 28% of its
     * CPU sending; held, 18%, and its CPU per transfer fell by about a quarter. No call
     * here waits for another, so nothing held can block the pass. */
    kl_calls_hold();
    while (w != NULL) {
        worker *next = w->next_done;
        w->next_done = NULL;
        if (w->cancelled) {
            end_turn(w, kl_coord_turn_cancel(&w->turn));
        } else {
            kl_coord_turn_collect(&w->turn);
            if (kl_failpoints_armed && kl_coord_turn_has_after_failpoint(&w->turn))
                queue_after(w);
            else
                turn_result(w);
        }
        w = next;
    }
    kl_calls_release();
}

/* Starts the call after its before_ failpoint passed; a call that cannot start has its
 * result already. */
static void start_call(worker *w)
{
    if (!kl_coord_turn_start(&w->turn, on_call_done, w))
        turn_result(w);
}

static void work_cb(uv_work_t *req)
{
    worker *w = req->data;
    w->before_ok = kl_coord_turn_before(&w->turn);
}

static void after_work_cb(uv_work_t *req, int status)
{
    worker *w = req->data;
    w->in_pool = false;
    if (status == UV_ECANCELED)
        end_turn(w, kl_coord_turn_cancel(&w->turn)); /* queued when the stop came */
    else if (!w->before_ok)
        turn_result(w);
    else if (atomic_load(&w->r->co->stopping))
        end_turn(w, kl_coord_turn_cancel(&w->turn)); /* stopped while the failpoint ran */
    else
        start_call(w);
}

/* The call named by the turn's machine. */
static void submit(worker *w)
{
    if (kl_failpoints_armed && kl_coord_turn_has_failpoint(&w->turn)) {
        w->work.data = w;
        w->in_pool = true;
        if (uv_queue_work(&w->r->loop, &w->work, work_cb, after_work_cb) != 0)
            after_work_cb(&w->work, UV_ECANCELED); /* cannot happen with a live loop */
        return;
    }
    if (!kl_coord_turn_before(&w->turn)) {
        turn_result(w);
        return;
    }
    start_call(w);
}

static void start_turn(worker *w, int64_t now)
{
    runner *r = w->r;
    kl_coord *co = r->co;
    kl_coord_event *ev = kl_coord_buffer_pop_due(co->buffers[w->index], now);
    if (ev == NULL)
        return;
    w->busy = true;
    w->started_once = true;
    w->last_start_ms = now;
    r->in_flight++;
    atomic_fetch_add(&co->stats.turns, 1);
    uint64_t n = atomic_fetch_add(&co->stats.turns_in_flight, 1) + 1;
    if (n > atomic_load(&co->stats.turns_in_flight_peak))
        atomic_store(&co->stats.turns_in_flight_peak, n); /* the loop is the only writer */
    kl_coord_turn_begin(&w->turn, co, ev, w->index);
    submit(w);
}

static void on_worker_timer(uv_timer_t *h) { schedule(h->data); }

/* An idle worker: start its next turn now if one is due and the flush pace allows it, else
 * arm its timer for that moment; nothing queued: no timer (discovery wakes it). */
static void schedule(worker *w)
{
    kl_coord *co = w->r->co;
    if (w->busy || atomic_load(&co->stopping))
        return;
    int64_t due;
    if (!kl_coord_buffer_next_due(co->buffers[w->index], &due)) {
        uv_timer_stop(&w->timer);
        return;
    }
    int64_t at = w->started_once ? w->last_start_ms + co->cfg.flush_interval_ms : due;
    if (due > at)
        at = due;
    int64_t now = kl_coord_now_ms();
    uint64_t wait = at > now ? (uint64_t)(at - now) : 0;
    if (wait == 0) {
        uv_timer_stop(&w->timer);
        start_turn(w, now);
        if (w->busy)
            return;
        wait = co->cfg.flush_interval_ms; /* only the loop pops: not reached, but never spin */
    }
    uv_timer_start(&w->timer, on_worker_timer, wait, 0);
}

/* ------------------------------------------------------------ wake-ups and the stop */

static void wake_loop(void *arg) { uv_async_send(arg); }

static void on_wake(uv_async_t *h)
{
    runner *r = h->data;
    for (uint32_t i = 0; i < r->n_workers; i++)
        schedule(&r->workers[i]);
}

static void on_signal(uv_signal_t *h, int signum)
{
    runner *r = h->data;
    KL_INFO("stopping", "signal=%d turns_in_flight=%" PRIu32 " note=ending_turns_between_calls",
            signum, r->in_flight);
    atomic_store(&r->co->stopping, true);
    for (uint32_t i = 0; i < r->n_workers; i++) {
        worker *w = &r->workers[i];
        uv_timer_stop(&w->timer);
        if (w->busy && w->in_pool) /* queued, not started: ends "cancelled" (after_work_cb) */
            uv_cancel((uv_req_t *)&w->work);
        if (w->busy && w->turn.call != NULL) { /* ends at once, "cancelled" (on_calls_done) */
            w->cancelled = true;
            kl_call_cancel(w->turn.call);
        }
    }
    check_drained(r);
}

static void noop_work(uv_work_t *req) { (void)req; }
static void noop_after(uv_work_t *req, int status)
{
    (void)status;
    free(req);
}

/* Sizes libuv's threadpool (process-wide, fixed at its first use) and starts it now, while
 * the signals the loop handles are blocked, so its threads inherit that mask. Only armed
 * failpoints use it (tests): calls need no thread. */
static kl_code start_pool(runner *r, kl_err *err)
{
    if (!kl_failpoints_armed)
        return KL_OK;
    char n[16];
    snprintf(n, sizeof n, "%" PRIu32, r->co->cfg.call_threads);
    setenv("UV_THREADPOOL_SIZE", n, 1);
    uv_work_t *req = calloc(1, sizeof *req);
    if (req == NULL || uv_queue_work(&r->loop, req, noop_work, noop_after) != 0) {
        free(req);
        return kl_fail(err, KL_INTERNAL, "call_threads", "coordinator: cannot start %s call threads", n);
    }
    return KL_OK;
}

/* The worker slots (timers on the loop), the failpoint pool (armed only) and discovery. */
static kl_code start_workers(runner *r, kl_err *err)
{
    kl_coord *co = r->co;
    r->workers = calloc(co->cfg.workers, sizeof *r->workers);
    if (r->workers == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "coordinator: out of memory");
    for (uint32_t i = 0; i < co->cfg.workers; i++) {
        worker *w = &r->workers[i];
        w->r = r;
        w->index = i;
        uv_timer_init(&r->loop, &w->timer);
        w->timer.data = w;
        r->n_workers++;
    }
    kl_code rc = start_pool(r, err);
    if (rc == KL_OK)
        rc = kl_coord_discovery_new(co, &r->disc, err);
    if (rc != KL_OK)
        return rc;
    co->wake_arg = &r->wake;
    co->wake = wake_loop;
    rc = kl_coord_ticker_start(&r->disc_ticker, 0, co->cfg.discovery_interval_ms,
                               on_discovery_tick, r->disc, err);
    r->disc_running = rc == KL_OK;
    return rc;
}

/* Joins discovery (it may still wake the loop until then) and closes every handle. */
static void close_all(runner *r)
{
    if (r->disc_running)
        kl_coord_ticker_stop(&r->disc_ticker);
    r->disc_running = false;
    r->co->wake = NULL;
    kl_coord_discovery_free(r->disc);
    r->disc = NULL;
    for (uint32_t i = 0; i < r->n_workers; i++)
        uv_close((uv_handle_t *)&r->workers[i].timer, NULL);
    uv_close((uv_handle_t *)&r->wake, NULL);
    uv_close((uv_handle_t *)&r->calls_done, NULL);
    uv_close((uv_handle_t *)&r->sigterm, NULL);
    uv_close((uv_handle_t *)&r->sigint, NULL);
    uv_close((uv_handle_t *)&r->status, NULL);
    kl_metrics_http_stop(r->metrics);
    r->metrics = NULL;
    uv_run(&r->loop, UV_RUN_DEFAULT);
    free(r->workers);
    r->workers = NULL;
    r->n_workers = 0;
}

static void init_handles(runner *r)
{
    uv_signal_init(&r->loop, &r->sigterm);
    uv_signal_init(&r->loop, &r->sigint);
    uv_timer_init(&r->loop, &r->status);
    uv_async_init(&r->loop, &r->wake, on_wake);
    uv_async_init(&r->loop, &r->calls_done, on_calls_done);
    pthread_mutex_init(&r->done_mu, NULL);
    r->sigterm.data = r->sigint.data = r->wake.data = r->calls_done.data = r;
    r->status.data = r->co;
}

kl_code kl_coord_run(kl_coord *co, kl_err *err)
{
    runner r;
    memset(&r, 0, sizeof r);
    r.co = co;
    kl_code rc = KL_OK;
    /* Block the signals the main loop handles while threads start: they inherit the mask,
     * so SIGTERM is only ever taken by the main thread (never interrupting a call). */
    sigset_t sigs, old;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, &old);
    if (uv_loop_init(&r.loop) != 0) {
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return kl_fail(err, KL_INTERNAL, "uv", "coordinator: cannot create the main loop");
    }
    init_handles(&r);
    if (co->cfg.metrics_addr[0] != '\0')
        rc = kl_metrics_http_start(&r.loop, co->cfg.metrics_addr,
                                   co->cfg.metrics_token_file[0] ? co->cfg.metrics_token_file : NULL,
                                   kl_coord_metrics_render, co, &r.metrics, err);
    if (rc == KL_OK && co->cfg.has_principal) {
        KL_INFO("starting", "database=%s principal=%s workers=%" PRIu32 " call_threads=%" PRIu32
                " flush_interval_ms=%" PRIu32 " buffer_capacity=%" PRIu32 " partitions=%d",
                co->cfg.database, co->cfg.principal_id, co->cfg.workers, co->cfg.call_threads,
                co->cfg.flush_interval_ms, co->cfg.buffer_capacity, co->cluster->partition_count);
        rc = start_workers(&r, err);
    } else if (rc == KL_OK) {
        KL_INFO("idle", "database=%s reason=transfer_coordinator_principal_id_is_null "
                "note=no_discovery_waiting_for_SIGTERM", co->cfg.database);
    }
    if (rc == KL_OK) {
        uv_signal_start(&r.sigterm, on_signal, SIGTERM);
        uv_signal_start(&r.sigint, on_signal, SIGINT);
        uv_timer_start(&r.status, on_status, 0, KL_COORD_STATUS_EVERY_MS);
        /* Unblocked only now that the handlers exist: a SIGTERM that arrived during start-up
         * (main blocked it before opening) is taken here and drains like any other. */
        pthread_sigmask(SIG_UNBLOCK, &sigs, NULL);
        uv_run(&r.loop, UV_RUN_DEFAULT); /* until the drain after a signal */
        uv_timer_stop(&r.status);
    } else {
        atomic_store(&co->stopping, true);
    }
    close_all(&r);
    if (rc == KL_OK) {
        write_status(co, true);
        KL_INFO("stopped", "delivered=%" PRIu64 " terminal_failures=%" PRIu64 " retries=%" PRIu64
                " turns_in_flight_peak=%" PRIu64,
                (uint64_t)atomic_load(&co->stats.delivered),
                (uint64_t)atomic_load(&co->stats.terminal_failures),
                (uint64_t)atomic_load(&co->stats.retries),
                (uint64_t)atomic_load(&co->stats.turns_in_flight_peak));
    }
    uv_loop_close(&r.loop);
    pthread_mutex_destroy(&r.done_mu);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}
