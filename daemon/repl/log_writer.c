#include "daemon/repl/log_writer.h"

#include <assert.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct kl_log_writer {
    uv_async_t async;
    pthread_t thread;
    pthread_mutex_t mu; /* with cv: the thread sleeps until a job or the stop */
    pthread_cond_t cv;
    kl_log_writer_fn run, done;
    void *next;               /* under mu: submitted, not yet taken by the thread */
    bool stopping;            /* under mu */
    _Atomic(void *) finished; /* run returned, done not yet called */
    atomic_bool exited;       /* the thread returned: join will not wait */
    void *here;               /* loop thread only: submitted to run on the loop itself */
    bool busy;                /* loop thread only */
    bool stopped;             /* loop thread only: kl_log_writer_stop was called */
    void (*closed)(void *);
    void *closed_ctx;
};

static void *writer_main(void *arg)
{
    kl_log_writer *w = arg;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        while (w->next == NULL && !w->stopping)
            pthread_cond_wait(&w->cv, &w->mu);
        void *job = w->stopping ? NULL : w->next;
        w->next = NULL;
        pthread_mutex_unlock(&w->mu);
        if (job == NULL)
            break;
        w->run(job);
        void *prev = atomic_exchange(&w->finished, job);
        assert(prev == NULL); /* one job outstanding at a time */
        (void)prev;
        uv_async_send(&w->async);
    }
    atomic_store(&w->exited, true);
    uv_async_send(&w->async);
    return NULL;
}

static void on_closed(uv_handle_t *h)
{
    kl_log_writer *w = h->data;
    void (*closed)(void *) = w->closed;
    void *ctx = w->closed_ctx;
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
    if (closed != NULL)
        closed(ctx);
}

/* A writer whose lock could not be made: nothing but its memory to release. */
static void free_unstarted(uv_handle_t *h) { free(h->data); }

static void on_async(uv_async_t *a)
{
    kl_log_writer *w = a->data;
    if (w->stopped) {
        if (!atomic_load(&w->exited) || uv_is_closing((uv_handle_t *)a))
            return;
        pthread_join(w->thread, NULL);
        uv_close((uv_handle_t *)a, on_closed);
        return;
    }
    void *job = atomic_exchange(&w->finished, NULL);
    if (job == NULL && w->here != NULL) {
        job = w->here;
        w->here = NULL;
        w->run(job);
    }
    if (job == NULL)
        return; /* sends coalesce: this one's job was taken by an earlier callback */
    assert(w->busy);
    w->busy = false;
    w->done(job);
}

kl_code kl_log_writer_start(uv_loop_t *loop, kl_log_writer_fn run, kl_log_writer_fn done, kl_log_writer **out,
                            kl_err *err)
{
    kl_log_writer *w = calloc(1, sizeof *w);
    if (w == NULL)
        return kl_fail(err, KL_INTERNAL, "log_writer", "log writer: out of memory");
    w->run = run;
    w->done = done;
    atomic_init(&w->finished, NULL);
    atomic_init(&w->exited, false);
    int urc = uv_async_init(loop, &w->async, on_async);
    if (urc != 0) {
        free(w);
        return kl_fail(err, KL_INTERNAL, "log_writer", "log writer: %s", uv_strerror(urc));
    }
    w->async.data = w;
    int prc = pthread_mutex_init(&w->mu, NULL);
    if (prc != 0)
        goto fail_mutex;
    if ((prc = pthread_cond_init(&w->cv, NULL)) != 0)
        goto fail_cond;
    /* The thread takes no signals: the member's loop handles them, and a handler run on this
     * thread in the middle of a write would only delay it. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    prc = pthread_create(&w->thread, NULL, writer_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (prc != 0)
        goto fail_thread;
    *out = w;
    return KL_OK;

fail_thread:
    w->stopped = true; /* on_closed destroys the mutex and the condition and frees */
    uv_close((uv_handle_t *)&w->async, on_closed);
    return kl_fail(err, KL_INTERNAL, "log_writer", "log writer: cannot start its thread: %s", strerror(prc));
fail_cond:
    pthread_mutex_destroy(&w->mu);
fail_mutex:
    uv_close((uv_handle_t *)&w->async, free_unstarted);
    return kl_fail(err, KL_INTERNAL, "log_writer", "log writer: cannot make its lock: %s", strerror(prc));
}

void kl_log_writer_submit(kl_log_writer *w, void *job)
{
    assert(job != NULL && !w->busy && !w->stopped);
    w->busy = true;
    pthread_mutex_lock(&w->mu);
    assert(w->next == NULL);
    w->next = job;
    pthread_mutex_unlock(&w->mu);
    /* Signalled after the unlock: woken under the lock, the thread would at once block on the
     * mutex the loop still holds, and be woken a second time by the unlock (strace of a
     * follower: five futex calls per write that way, three this way). The job was published
     * under the lock, so a thread that has not reached its wait yet finds it there. */
    pthread_cond_signal(&w->cv);
}

void kl_log_writer_submit_here(kl_log_writer *w, void *job)
{
    assert(job != NULL && !w->busy && !w->stopped && w->here == NULL);
    w->busy = true;
    w->here = job;
    /* Run from the loop's next poll phase, not from here: the caller is in the middle of a
     * round, and done() starts the next one. */
    uv_async_send(&w->async);
}

bool kl_log_writer_busy(const kl_log_writer *w) { return w->busy; }

void kl_log_writer_stop(kl_log_writer *w, void (*closed)(void *ctx), void *ctx)
{
    if (w == NULL || w->stopped)
        return;
    w->stopped = true;
    w->closed = closed;
    w->closed_ctx = ctx;
    w->here = NULL; /* not started: it never runs, as a job the thread has not taken */
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    w->next = NULL; /* not taken yet: it never runs, and nobody was told it would */
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    /* The thread's last uv_async_send (after it exited its loop) reaches on_async. */
}
