/* log_writer: jobs run on the writer's own thread, or on the loop for those submitted to
 * run there, in submission order; each done callback runs once on the loop thread, and a
 * stop never blocks the loop: a job that runs finishes, gets no done callback, a job not
 * started never runs, and the writer goes once its thread exited. Real threads and a real
 * libuv loop; every wait is bounded. */
#include "daemon/repl/log_writer.h"

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define JOBS 300

typedef struct chain {
    kl_log_writer *w;
    pthread_t loop_thread;
    int order[JOBS];     /* job ids in the order run saw them */
    atomic_int n_run;
    int n_done;
    bool run_on_loop;    /* a run call happened on the loop thread */
    bool done_off_loop;  /* a done call happened elsewhere */
    bool done_before_run;
    bool mixed;          /* odd jobs are submitted to run on the loop */
    bool in_submit;      /* a submit call is on the stack */
    bool ran_in_submit;  /* a run call happened inside a submit call */
    bool wrong_thread;   /* a job ran on the other thread than it was submitted to */
    int closed;
    atomic_bool started, release, finished;
} chain;

typedef struct job {
    chain *c;
    int id;
    bool block; /* run waits for c->release (bounded) */
} job;

static void sleep_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

static void run_job(void *p)
{
    job *j = p;
    chain *c = j->c;
    bool on_loop = pthread_equal(pthread_self(), c->loop_thread);
    if (on_loop)
        c->run_on_loop = true;
    if (on_loop && c->in_submit)
        c->ran_in_submit = true;
    if (on_loop != (c->mixed && j->id % 2 == 1))
        c->wrong_thread = true;
    atomic_store(&c->started, true);
    for (int i = 0; j->block && !atomic_load(&c->release) && i < 5000; i++)
        sleep_ms(1);
    int k = atomic_fetch_add(&c->n_run, 1);
    if (k < JOBS)
        c->order[k] = j->id;
    atomic_store(&c->finished, true);
}

static job jobs[JOBS];

static void done_job(void *p)
{
    job *j = p;
    chain *c = j->c;
    if (!pthread_equal(pthread_self(), c->loop_thread))
        c->done_off_loop = true;
    if (atomic_load(&c->n_run) <= c->n_done)
        c->done_before_run = true;
    c->n_done++;
    if (j->id + 1 < JOBS) {
        ck_assert(!kl_log_writer_busy(c->w));
        c->in_submit = true;
        if (c->mixed && (j->id + 1) % 2 == 1)
            kl_log_writer_submit_here(c->w, &jobs[j->id + 1]);
        else
            kl_log_writer_submit(c->w, &jobs[j->id + 1]);
        c->in_submit = false;
        ck_assert(kl_log_writer_busy(c->w));
    }
}

static void on_closed(void *ctx) { ((chain *)ctx)->closed++; }

static kl_log_writer *start(uv_loop_t *loop, chain *c)
{
    memset(c, 0, sizeof *c);
    c->loop_thread = pthread_self();
    for (int i = 0; i < JOBS; i++)
        jobs[i] = (job){c, i, false};
    kl_err err;
    kl_err_clear(&err);
    kl_log_writer *w = NULL;
    ck_assert_int_eq(kl_log_writer_start(loop, run_job, done_job, &w, &err), KL_OK);
    c->w = w;
    return w;
}

/* Runs the loop until cond(c) or 10 s. */
static void run_until(uv_loop_t *loop, chain *c, bool (*cond)(const chain *))
{
    for (int i = 0; i < 10000 && !cond(c); i++) {
        uv_run(loop, UV_RUN_NOWAIT);
        if (!cond(c))
            sleep_ms(1);
    }
}

static bool all_done(const chain *c) { return c->n_done == JOBS; }
static bool closed(const chain *c) { return c->closed > 0; }

/* Runs JOBS jobs, each submitted by the previous one's done; with mixed, odd ones go to the
 * loop. One order, every job on the thread it was submitted to, a loop job never run inside
 * the submit call (its done would start the next round inside the current one), every done
 * on the loop after its run; then the writer stops and leaves nothing behind. */
static void run_chain(bool mixed)
{
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    chain c;
    kl_log_writer *w = start(&loop, &c);
    c.mixed = mixed;
    ck_assert(!kl_log_writer_busy(w));
    kl_log_writer_submit(w, &jobs[0]);
    run_until(&loop, &c, all_done);
    ck_assert_int_eq(c.n_done, JOBS);
    ck_assert_int_eq(atomic_load(&c.n_run), JOBS);
    for (int i = 0; i < JOBS; i++)
        ck_assert_int_eq(c.order[i], i);
    ck_assert(c.run_on_loop == mixed);
    ck_assert(!c.wrong_thread);
    ck_assert(!c.ran_in_submit);
    ck_assert(!c.done_off_loop);
    ck_assert(!c.done_before_run);
    ck_assert(!kl_log_writer_busy(w));
    kl_log_writer_stop(w, on_closed, &c);
    run_until(&loop, &c, closed);
    ck_assert_int_eq(c.closed, 1);
    ck_assert_int_eq(uv_run(&loop, UV_RUN_NOWAIT), 0); /* nothing of the writer is left */
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}

START_TEST(jobs_run_in_order_and_done_on_the_loop) { run_chain(false); }
END_TEST

/* Jobs alternate between the thread and the loop. */
START_TEST(jobs_on_the_loop_keep_the_order) { run_chain(true); }
END_TEST

/* A job submitted to the loop and stopped before the loop ran never runs. */
START_TEST(stop_before_a_loop_job_ran_drops_it)
{
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    chain c;
    kl_log_writer *w = start(&loop, &c);
    c.mixed = true;
    jobs[1].id = JOBS + 1; /* odd: submitted to the loop; done would submit nothing */
    kl_log_writer_submit_here(w, &jobs[1]);
    ck_assert(kl_log_writer_busy(w));
    ck_assert_int_eq(atomic_load(&c.n_run), 0);
    kl_log_writer_stop(w, on_closed, &c);
    run_until(&loop, &c, closed);
    ck_assert_int_eq(c.closed, 1);
    ck_assert_int_eq(atomic_load(&c.n_run), 0);
    ck_assert_int_eq(c.n_done, 0);
    ck_assert_int_eq(uv_run(&loop, UV_RUN_NOWAIT), 0);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

START_TEST(stop_during_a_job_lets_it_finish_without_done)
{
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    chain c;
    kl_log_writer *w = start(&loop, &c);
    jobs[0].block = true;
    jobs[0].id = JOBS; /* done would submit nothing */
    kl_log_writer_submit(w, &jobs[0]);
    for (int i = 0; i < 5000 && !atomic_load(&c.started); i++)
        sleep_ms(1);
    ck_assert(atomic_load(&c.started));
    kl_log_writer_stop(w, on_closed, &c); /* returns while the job still runs */
    ck_assert(!atomic_load(&c.finished));
    uv_run(&loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(c.closed, 0); /* the thread has not exited yet */
    atomic_store(&c.release, true);
    run_until(&loop, &c, closed);
    ck_assert_int_eq(c.closed, 1);
    ck_assert(atomic_load(&c.finished));
    ck_assert_int_eq(c.n_done, 0);
    ck_assert_int_eq(uv_run(&loop, UV_RUN_NOWAIT), 0);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

START_TEST(stop_when_idle_or_just_submitted_closes)
{
    for (int round = 0; round < 2; round++) {
        uv_loop_t loop;
        ck_assert_int_eq(uv_loop_init(&loop), 0);
        chain c;
        kl_log_writer *w = start(&loop, &c);
        if (round == 1) {
            jobs[0].id = JOBS;
            kl_log_writer_submit(w, &jobs[0]); /* may or may not be taken before the stop */
        }
        kl_log_writer_stop(w, on_closed, &c);
        kl_log_writer_stop(w, on_closed, &c); /* a second stop is ignored */
        run_until(&loop, &c, closed);
        ck_assert_int_eq(c.closed, 1);
        ck_assert_int_eq(c.n_done, 0);
        ck_assert_int_le(atomic_load(&c.n_run), 1);
        ck_assert_int_eq(uv_run(&loop, UV_RUN_NOWAIT), 0);
        ck_assert_int_eq(uv_loop_close(&loop), 0);
    }
    kl_log_writer_stop(NULL, on_closed, NULL); /* accepted, does nothing */
}
END_TEST

Suite *suite_log_writer(void)
{
    Suite *s = suite_create("log_writer");
    TCase *t = tcase_create("log_writer");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, jobs_run_in_order_and_done_on_the_loop);
    tcase_add_test(t, jobs_on_the_loop_keep_the_order);
    tcase_add_test(t, stop_before_a_loop_job_ran_drops_it);
    tcase_add_test(t, stop_during_a_job_lets_it_finish_without_done);
    tcase_add_test(t, stop_when_idle_or_just_submitted_closes);
    suite_add_tcase(s, t);
    return s;
}
