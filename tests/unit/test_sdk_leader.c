/* The SDK's leader cache against two scripted members (real kl_rpc_servers on loopback):
 * a client remembers each partition's last leader, shared by every thread using it and
 * every other client of the process that opened the same cluster, so
 * only the first call meets a follower's NOT_LEADER; a NOT_LEADER naming another member,
 * or an UNAVAILABLE, moves the next calls on; a leader that answers it is full is asked
 * again after a pause and stays the leader. */
#include "client/keyload.h"
#include "common/rpc.h"
#include "tests/unit/harness.h"
#include "tests/unit/ports.h"

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

enum { LEADS, FOLLOWS, UNAVAILABLE_ONCE, SILENT, BUSY };

typedef struct member {
    uv_loop_t loop;
    uv_async_t ctl;
    pthread_t thread;
    kl_rpc_server *srv;
    char url[64];
    atomic_int mode;
    atomic_int calls;
    atomic_int busy_left; /* BUSY: "full" answers before it serves again (< 0: for ever) */
    struct member *other; /* the leader a follower names */
    kl_rpc_call *held[256]; /* SILENT: calls never answered (loop thread only) */
    int n_held;
} member;

static member mb[2];

static void answer_receipt(kl_rpc_call *call)
{
    size_t len;
    const uint8_t *p = kl_rpc_call_payload(call, &len);
    Keyload__V1__BatchRequest *b = keyload__v1__batch_request__unpack(NULL, len, p);
    Keyload__V1__BatchReceipt r = KEYLOAD__V1__BATCH_RECEIPT__INIT;
    r.command_id = b->command_id;
    r.index = 7;
    uint8_t buf[256];
    size_t n = keyload__v1__batch_receipt__pack(&r, buf);
    keyload__v1__batch_request__free_unpacked(b, NULL);
    kl_rpc_reply(call, buf, n);
}

static void on_batch(void *owner, kl_rpc_call *call)
{
    member *m = owner;
    atomic_fetch_add(&m->calls, 1);
    kl_err e;
    int mode = atomic_load(&m->mode);
    if (mode == LEADS) {
        answer_receipt(call);
    } else if (mode == SILENT && m->n_held < 256) {
        m->held[m->n_held++] = call; /* answered only after the server stopped: never sent */
    } else if (mode == BUSY) {
        if (atomic_load(&m->busy_left) == 0) {
            answer_receipt(call);
            return;
        }
        if (atomic_load(&m->busy_left) > 0)
            atomic_fetch_sub(&m->busy_left, 1);
        kl_fail(&e, KL_UNAVAILABLE, "write_pipeline_full", "the write pipeline is full");
        kl_rpc_reply_error(call, &e, NULL);
    } else if (mode == FOLLOWS) {
        kl_fail(&e, KL_NOT_LEADER, "not_leader", "this member does not lead partition 0 now");
        kl_rpc_reply_error(call, &e, m->other->url);
    } else {
        atomic_store(&m->mode, FOLLOWS);
        kl_fail(&e, KL_UNAVAILABLE, "leader_not_ready", "this member cannot commit yet; retry");
        kl_rpc_reply_error(call, &e, NULL);
    }
}

static const kl_rpc_method methods[] = {{"keyload.v1.Batch", on_batch}};

static void on_ctl(uv_async_t *h)
{
    member *m = h->data;
    kl_rpc_server_stop(m->srv);
    kl_err e;
    kl_fail(&e, KL_UNAVAILABLE, "stopped", "the test member stopped");
    for (int i = 0; i < m->n_held; i++)
        kl_rpc_reply_error(m->held[i], &e, NULL);
    uv_close((uv_handle_t *)&m->ctl, NULL);
}

static void *loop_main(void *arg)
{
    uv_run(&((member *)arg)->loop, UV_RUN_DEFAULT);
    return NULL;
}

static void member_start(member *m, int mode, member *other)
{
    memset(m, 0, sizeof *m);
    atomic_store(&m->mode, mode);
    m->other = other;
    ck_assert_int_eq(uv_loop_init(&m->loop), 0);
    ck_assert_int_eq(uv_async_init(&m->loop, &m->ctl, on_ctl), 0);
    m->ctl.data = m;
    snprintf(m->url, sizeof m->url, "tcp://127.0.0.1:%d", th_free_port());
    kl_rpc_server_config cfg = {.listen_url = m->url, .methods = methods, .method_count = 1,
                                .owner = m, .max_frame = 1 << 20};
    kl_err err;
    ck_assert_msg(kl_rpc_server_start(&m->loop, &cfg, &m->srv, &err) == KL_OK, "%s", err.message);
    ck_assert_int_eq(pthread_create(&m->thread, NULL, loop_main, m), 0);
}

static void member_stop(member *m)
{
    ck_assert_int_eq(uv_async_send(&m->ctl), 0);
    ck_assert_int_eq(pthread_join(m->thread, NULL), 0);
    ck_assert_int_eq(uv_loop_close(&m->loop), 0);
}

static int calls(member *m) { return atomic_load(&m->calls); }

static char dir[256], path[512];

/* mb[0] follows (first in the cluster file), mb[1] leads. */
static void setup(void)
{
    member_start(&mb[0], FOLLOWS, &mb[1]);
    member_start(&mb[1], LEADS, &mb[0]);
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/cluster.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "{\"cluster\":\"sdk\",\"replica_count\":1,\"insecure_local_admin\":true,\"partitions\":[{\"id\":0,"
               "\"members\":[{\"id\":1,\"client\":\"%s\"},{\"id\":2,\"client\":\"%s\"}]}]}\n",
            mb[0].url, mb[1].url);
    fclose(f);
}

static void teardown(void)
{
    member_stop(&mb[0]);
    member_stop(&mb[1]);
    th_rmrf(dir);
}

/* One enqueue batch through c: its result, with its receipt's index in *index. */
static kl_code try_one(kl_client *c, uint64_t *index, kl_err *err)
{
    kl_batch *b;
    kl_message *m;
    ck_assert_int_eq(kl_batch_new(NULL, &b, err), KL_OK);
    ck_assert_int_eq(kl_message_new("x", 1, &m, err), KL_OK);
    ck_assert_int_eq(kl_batch_enqueue(b, "q", NULL, m, err), KL_OK);
    kl_receipt *r = NULL;
    kl_code rc = kl_client_batch(c, b, &r, err);
    if (rc == KL_OK)
        *index = r->decoded->index;
    kl_receipt_free(r);
    kl_message_free(m);
    kl_batch_free(b);
    return rc;
}

static void send_one(kl_client *c)
{
    kl_err err;
    uint64_t index = 0;
    kl_code rc = try_one(c, &index, &err);
    ck_assert_msg(rc == KL_OK, "%s %s", kl_code_name(rc), err.message);
    ck_assert_uint_eq(index, 7);
}

static kl_client *open_client(void)
{
    kl_client *c;
    kl_err err;
    ck_assert_int_eq(kl_client_open(path, "t/d", 5000, &c, &err), KL_OK);
    return c;
}

/* Only the first call meets the first-listed follower. */
START_TEST(the_leader_is_remembered)
{
    kl_client *c = open_client();
    for (int i = 0; i < 5; i++)
        send_one(c);
    ck_assert_int_eq(calls(&mb[0]), 1);
    ck_assert_int_eq(calls(&mb[1]), 5);
    kl_client_close(c);
}
END_TEST

/* The leader moves: the old one answers NOT_LEADER naming the new one, once. */
START_TEST(not_leader_moves_the_cache)
{
    kl_client *c = open_client();
    send_one(c);
    send_one(c);
    atomic_store(&mb[1].mode, FOLLOWS);
    atomic_store(&mb[0].mode, LEADS);
    for (int i = 0; i < 3; i++)
        send_one(c);
    ck_assert_int_eq(calls(&mb[1]), 3); /* 2 served, 1 redirect */
    ck_assert_int_eq(calls(&mb[0]), 4); /* 1 redirect, 3 served */
    kl_client_close(c);
}
END_TEST

/* A cached leader that answers UNAVAILABLE is forgotten: the call goes on to the other
 * member, which serves it and every call after it. */
START_TEST(unavailable_forgets_the_leader)
{
    kl_client *c = open_client();
    send_one(c); /* mb[0] redirects, mb[1] serves: mb[1] cached */
    atomic_store(&mb[0].mode, LEADS);
    atomic_store(&mb[1].mode, UNAVAILABLE_ONCE); /* then it follows, naming mb[0] */
    for (int i = 0; i < 3; i++)
        send_one(c);
    ck_assert_int_eq(calls(&mb[1]), 2);
    ck_assert_int_eq(calls(&mb[0]), 4);
    kl_client_close(c);
}
END_TEST

/* A cached leader that answers it is full is asked again after a pause, and stays cached:
 * the follower (which would only redirect back to it) is not asked again. */
START_TEST(busy_leader_is_asked_again)
{
    kl_client *c = open_client();
    send_one(c); /* mb[0] redirects, mb[1] serves: mb[1] cached */
    atomic_store(&mb[1].busy_left, 2);
    atomic_store(&mb[1].mode, BUSY);
    for (int i = 0; i < 3; i++)
        send_one(c);
    ck_assert_int_eq(calls(&mb[0]), 1);
    ck_assert_int_eq(calls(&mb[1]), 1 + 2 + 3); /* 1 served, 2 full, then 3 served */
    kl_client_close(c);
}
END_TEST

/* A leader full until the call's time runs out: the call fails with the member's own
 * refusal (retryable, naming the full bound), after a bounded number of paced attempts. */
START_TEST(busy_until_the_deadline_names_the_bound)
{
    kl_client *c;
    kl_err err;
    ck_assert_int_eq(kl_client_open(path, "t/d", 500, &c, &err), KL_OK);
    send_one(c); /* mb[0] redirects, mb[1] serves: mb[1] cached */
    atomic_store(&mb[1].busy_left, -1);
    atomic_store(&mb[1].mode, BUSY);
    uint64_t index = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kl_code rc = try_one(c, &index, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ck_assert_int_eq(rc, KL_UNAVAILABLE);
    ck_assert_str_eq(err.detail, "write_pipeline_full");
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    ck_assert_msg(ms >= 300 && ms < 2000, "the call took %ld ms with a 500 ms timeout", ms);
    /* pauses of 2, 4, ... 64, 64, ... ms in 500 ms: about a dozen attempts, not a spin */
    ck_assert_int_le(calls(&mb[1]), 1 + 16);
    ck_assert_int_ge(calls(&mb[1]), 1 + 5);
    ck_assert_int_eq(calls(&mb[0]), 1);
    kl_client_close(c);
}
END_TEST

static void *sender(void *arg)
{
    for (int i = 0; i < 10; i++)
        send_one(arg);
    return NULL;
}

/* Every thread of one client uses what any of them learned. */
START_TEST(threads_share_the_cache)
{
    kl_client *c = open_client();
    send_one(c);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, sender, c), 0);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pthread_join(t[i], NULL), 0);
    ck_assert_int_eq(calls(&mb[0]), 1);
    ck_assert_int_eq(calls(&mb[1]), 41);
    kl_client_close(c);
}
END_TEST

/* A second client of the same cluster starts where the first one learned: no redirect. */
START_TEST(clients_of_one_cluster_share_the_cache)
{
    kl_client *a = open_client();
    send_one(a); /* mb[0] redirects, mb[1] serves */
    kl_client *b = open_client();
    for (int i = 0; i < 3; i++)
        send_one(b);
    ck_assert_int_eq(calls(&mb[0]), 1);
    ck_assert_int_eq(calls(&mb[1]), 4);
    kl_client_close(a);
    kl_client_close(b);
}
END_TEST

/* What one client forgets (its cached leader answered UNAVAILABLE) and then learns, the
 * other uses at once: it never asks the member the first one gave up on. */
START_TEST(clients_share_what_is_forgotten)
{
    kl_client *a = open_client();
    kl_client *b = open_client();
    send_one(a); /* mb[0] redirects, mb[1] serves: mb[1] cached */
    send_one(b); /* straight to mb[1] */
    atomic_store(&mb[0].mode, LEADS);
    atomic_store(&mb[1].mode, UNAVAILABLE_ONCE); /* then it follows, naming mb[0] */
    send_one(a); /* mb[1] refuses and is forgotten; mb[0] serves and is cached */
    kl_client_close(a);
    send_one(b); /* straight to mb[0]; a cache of its own would have asked mb[1] first */
    ck_assert_int_eq(calls(&mb[1]), 3); /* 2 served, 1 refused */
    ck_assert_int_eq(calls(&mb[0]), 3); /* 1 redirect, 2 served */
    kl_client_close(b);
}
END_TEST

/* A call that succeeds leaves the caller's kl_err as it was (callers reuse one across
 * calls and read it only after a failure, as the SDK always allowed). */
START_TEST(a_success_leaves_err_alone)
{
    kl_client *c = open_client();
    kl_message *m;
    kl_err err;
    kl_batch *b;
    ck_assert_int_eq(kl_batch_new(NULL, &b, &err), KL_OK);
    ck_assert_int_eq(kl_message_new("x", 1, &m, &err), KL_OK);
    ck_assert_int_eq(kl_batch_enqueue(b, "q", NULL, m, &err), KL_OK);
    kl_fail(&err, KL_NOT_FOUND, "earlier", "an earlier failure");
    kl_receipt *r = NULL;
    ck_assert_int_eq(kl_client_batch(c, b, &r, &err), KL_OK);
    ck_assert_str_eq(err.detail, "earlier");
    ck_assert_int_eq(err.code, KL_NOT_FOUND);
    kl_receipt_free(r);
    kl_message_free(m);
    kl_batch_free(b);
    kl_client_close(c);
}
END_TEST

/* ---- the asynchronous API over the same members */

typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int done;
} waiter;

static void on_done(kl_call *call, void *arg)
{
    (void)call;
    waiter *w = arg;
    pthread_mutex_lock(&w->mu);
    atomic_fetch_add(&w->done, 1);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void wait_done(waiter *w, int n)
{
    pthread_mutex_lock(&w->mu);
    while (atomic_load(&w->done) < n)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static kl_batch *one_batch(kl_message **m)
{
    kl_err err;
    kl_batch *b;
    ck_assert_int_eq(kl_batch_new(NULL, &b, &err), KL_OK);
    ck_assert_int_eq(kl_message_new("x", 1, m, &err), KL_OK);
    ck_assert_int_eq(kl_batch_enqueue(b, "q", NULL, *m, &err), KL_OK);
    return b;
}

static int threads_now(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int n = -1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "Threads: %d", &n) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return n;
}

/* A batch started without waiting follows the follower's redirect like the blocking call,
 * and its done runs once, with the receipt written. */
START_TEST(async_batch_follows_a_redirect)
{
    kl_client *c = open_client();
    waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    kl_message *m;
    kl_batch *b = one_batch(&m);
    kl_receipt *r = NULL;
    kl_call *call = NULL;
    kl_err err;
    ck_assert_int_eq(kl_client_batch_start(c, b, &r, on_done, &w, &call, &err), KL_OK);
    wait_done(&w, 1);
    ck_assert_int_eq(kl_call_result(call, &err), KL_OK);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(r->decoded->index, 7);
    kl_call_free(call);
    ck_assert_int_eq(atomic_load(&w.done), 1);
    ck_assert_int_eq(calls(&mb[0]), 1);
    ck_assert_int_eq(calls(&mb[1]), 1);
    kl_receipt_free(r);
    kl_message_free(m);
    kl_batch_free(b);
    kl_client_close(c);
}
END_TEST

/* Cancelled after it was sent to a member that never answers: it ends at once (not at the
 * 5 s timeout) as an unknown write outcome, never as "not executed". */
START_TEST(async_cancel_after_send_is_unknown_outcome)
{
    kl_client *c = open_client();
    send_one(c); /* mb[1] cached */
    atomic_store(&mb[1].mode, SILENT);
    waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    kl_message *m;
    kl_batch *b = one_batch(&m);
    kl_receipt *r = NULL;
    kl_call *call = NULL;
    kl_err err;
    ck_assert_int_eq(kl_client_batch_start(c, b, &r, on_done, &w, &call, &err), KL_OK);
    int64_t until = mono_ms() + 2000;
    while (calls(&mb[1]) < 2 && mono_ms() < until)
        usleep(5000);
    ck_assert_int_eq(calls(&mb[1]), 2); /* it reached the member */
    int64_t t0 = mono_ms();
    kl_call_cancel(call);
    wait_done(&w, 1);
    ck_assert_int_lt(mono_ms() - t0, 1000);
    kl_code rc = kl_call_result(call, &err);
    ck_assert_msg(rc == KL_UNKNOWN_WRITE_OUTCOME, "%s %s", kl_code_name(rc), err.message);
    ck_assert_ptr_null(r);
    kl_call_free(call);
    kl_message_free(m);
    kl_batch_free(b);
    kl_client_close(c);
}
END_TEST

/* No member answers: the call ends by the client's deadline, and starting it did not wait. */
START_TEST(async_deadline_without_a_waiting_thread)
{
    atomic_store(&mb[0].mode, SILENT);
    atomic_store(&mb[1].mode, SILENT);
    kl_client *c;
    kl_err err;
    ck_assert_int_eq(kl_client_open(path, "t/d", 800, &c, &err), KL_OK);
    waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    kl_message *m;
    kl_batch *b = one_batch(&m);
    kl_receipt *r = NULL;
    kl_call *call = NULL;
    int64_t t0 = mono_ms();
    ck_assert_int_eq(kl_client_batch_start(c, b, &r, on_done, &w, &call, &err), KL_OK);
    ck_assert_int_lt(mono_ms() - t0, 200);
    wait_done(&w, 1);
    int64_t took = mono_ms() - t0;
    ck_assert_msg(took >= 700 && took < 2500, "ended after %lld ms (timeout 800)", (long long)took);
    kl_code rc = kl_call_result(call, &err);
    ck_assert_msg(rc == KL_UNKNOWN_WRITE_OUTCOME, "%s %s", kl_code_name(rc), err.message);
    kl_call_free(call);
    kl_message_free(m);
    kl_batch_free(b);
    kl_client_close(c);
}
END_TEST

/* Two hundred calls in flight from one thread: all answered, without a thread each. */
START_TEST(async_many_in_flight_hold_no_thread_each)
{
    enum { N = 200 };
    kl_client *c = open_client();
    send_one(c);
    int before = threads_now();
    waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    static kl_message *m[N];
    static kl_batch *b[N];
    static kl_receipt *r[N];
    static kl_call *call[N];
    kl_err err;
    for (int i = 0; i < N; i++) {
        b[i] = one_batch(&m[i]);
        ck_assert_int_eq(kl_client_batch_start(c, b[i], &r[i], on_done, &w, &call[i], &err), KL_OK);
    }
    int during = threads_now();
    wait_done(&w, N);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(kl_call_result(call[i], &err), KL_OK);
        ck_assert_uint_eq(r[i]->decoded->index, 7);
        kl_call_free(call[i]);
        kl_receipt_free(r[i]);
        kl_message_free(m[i]);
        kl_batch_free(b[i]);
    }
    ck_assert_msg(during - before < 16, "%d threads before, %d with %d calls in flight", before,
                  during, N);
    ck_assert_int_eq(calls(&mb[1]), N + 1);
    kl_client_close(c);
}
END_TEST

Suite *suite_sdk_leader(void)
{
    Suite *s = suite_create("sdk_leader");
    TCase *t = tcase_create("sdk_leader");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 30);
    tcase_add_test(t, the_leader_is_remembered);
    tcase_add_test(t, not_leader_moves_the_cache);
    tcase_add_test(t, unavailable_forgets_the_leader);
    tcase_add_test(t, busy_leader_is_asked_again);
    tcase_add_test(t, busy_until_the_deadline_names_the_bound);
    tcase_add_test(t, threads_share_the_cache);
    tcase_add_test(t, clients_of_one_cluster_share_the_cache);
    tcase_add_test(t, clients_share_what_is_forgotten);
    suite_add_tcase(s, t);
    t = tcase_create("sdk_async");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 30);
    tcase_add_test(t, a_success_leaves_err_alone);
    tcase_add_test(t, async_batch_follows_a_redirect);
    tcase_add_test(t, async_cancel_after_send_is_unknown_outcome);
    tcase_add_test(t, async_deadline_without_a_waiting_thread);
    tcase_add_test(t, async_many_in_flight_hold_no_thread_each);
    suite_add_tcase(s, t);
    return s;
}
