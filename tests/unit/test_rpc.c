/* Unit tests for common/rpc: a real nng REP server on 127.0.0.1 (random high port) with
 * its libuv loop on a thread, driven by the rpc client and by raw REQ sockets for frames
 * the client would never send. Every test stops the server, closes the loop and frees
 * everything, so LeakSanitizer checks the shutdown paths too. */
#include "common/failpoint.h"
#include "common/rpc.h"
#include "common/rpc_direct.h"
#include "common/rpc_tcp.h"
#include "common/tcp_url.h"

#include "keyload/v1/rpc.pb-c.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>

#include "ports.h"
#include <netinet/in.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FX_MAX_HELD 80
#define FX_CONCURRENT 64

/* One server, its loop thread and the handlers' state. Handler fields belong to the
 * loop thread; the test thread reads only the atomics. */
typedef struct rpc_fixture {
    uv_loop_t loop;
    uv_async_t ctl; /* test thread -> loop: stop the server */
    pthread_t thread;
    kl_rpc_server *srv;
    char url[64];

    kl_rpc_call *held[FX_MAX_HELD];
    int held_count;
    int hold_target; /* test.Hold answers everything once this many are held */
    uv_timer_t timer;
    kl_rpc_call *deferred;
    atomic_int handled; /* handler invocations */
    atomic_int max_held;
    uv_timer_t step_timer; /* test.Step: answers the oldest held call while step_release */
    bool step_timer_on;
    atomic_bool step_release;
    atomic_int step_handled;
    bool in_reply;         /* loop: step_fire is inside kl_rpc_reply */
    atomic_int nested;     /* handlers that ran inside another call's kl_rpc_reply */
} rpc_fixture;

static rpc_fixture fx;

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---------------------------------------------------------------- handlers (loop) */

static void h_echo(void *owner, kl_rpc_call *call)
{
    rpc_fixture *f = owner;
    atomic_fetch_add(&f->handled, 1);
    size_t len;
    const uint8_t *p = kl_rpc_call_payload(call, &len);
    kl_rpc_reply(call, p, len); /* payload points into the call: reply must copy first */
}

static void h_empty(void *owner, kl_rpc_call *call)
{
    rpc_fixture *f = owner;
    atomic_fetch_add(&f->handled, 1);
    kl_rpc_reply(call, NULL, 0);
}

static void h_not_leader(void *owner, kl_rpc_call *call)
{
    rpc_fixture *f = owner;
    atomic_fetch_add(&f->handled, 1);
    kl_err err;
    kl_fail(&err, KL_NOT_LEADER, "leader", "this replica is not the leader");
    kl_rpc_reply_error(call, &err, "tcp://10.0.0.9:7400");
}

static void deferred_fire(uv_timer_t *t)
{
    rpc_fixture *f = t->data;
    size_t len;
    const uint8_t *p = kl_rpc_call_payload(f->deferred, &len);
    kl_rpc_reply(f->deferred, p, len);
    f->deferred = NULL;
    uv_close((uv_handle_t *)t, NULL);
}

static void h_deferred(void *owner, kl_rpc_call *call)
{
    rpc_fixture *f = owner;
    atomic_fetch_add(&f->handled, 1);
    f->deferred = call;
    ck_assert_int_eq(uv_timer_init(&f->loop, &f->timer), 0);
    f->timer.data = f;
    ck_assert_int_eq(uv_timer_start(&f->timer, deferred_fire, 50, 0), 0);
}

static void hold(rpc_fixture *f, kl_rpc_call *call)
{
    atomic_fetch_add(&f->handled, 1);
    ck_assert_int_lt(f->held_count, FX_MAX_HELD);
    f->held[f->held_count++] = call;
    if (f->held_count > atomic_load(&f->max_held))
        atomic_store(&f->max_held, f->held_count);
}

static void answer_held(rpc_fixture *f)
{
    for (int i = 0; i < f->held_count; i++) {
        size_t len;
        const uint8_t *p = kl_rpc_call_payload(f->held[i], &len);
        kl_rpc_reply(f->held[i], p, len);
    }
    f->held_count = 0;
}

/* Holds calls until hold_target of them are in flight, then answers them all. */
static void h_hold(void *owner, kl_rpc_call *call)
{
    rpc_fixture *f = owner;
    hold(f, call);
    if (f->held_count == f->hold_target)
        answer_held(f);
}

/* Never answers; the fixture answers after stopping the server. */
static void h_never(void *owner, kl_rpc_call *call) { hold(owner, call); }

/* While step_release is set, answers the oldest held call every 20 ms. */
static void step_fire(uv_timer_t *t)
{
    rpc_fixture *f = t->data;
    if (!atomic_load(&f->step_release) || f->held_count == 0)
        return;
    size_t len;
    const uint8_t *p = kl_rpc_call_payload(f->held[0], &len);
    f->in_reply = true;
    kl_rpc_reply(f->held[0], p, len);
    f->in_reply = false;
    memmove(f->held, f->held + 1, (size_t)(f->held_count - 1) * sizeof f->held[0]);
    f->held_count--;
}

/* Held until the test releases calls one at a time (step_fire). */
static void h_step(void *owner, kl_rpc_call *call)
{
    rpc_fixture *f = owner;
    atomic_fetch_add(&f->step_handled, 1);
    if (f->in_reply)
        atomic_fetch_add(&f->nested, 1);
    hold(f, call);
    if (!f->step_timer_on) {
        ck_assert_int_eq(uv_timer_init(&f->loop, &f->step_timer), 0);
        f->step_timer.data = f;
        ck_assert_int_eq(uv_timer_start(&f->step_timer, step_fire, 20, 20), 0);
        f->step_timer_on = true;
    }
}

static const kl_rpc_method fx_methods[] = {
    {"test.Step", h_step},
    {"test.Echo", h_echo},         {"test.Empty", h_empty}, {"test.NotLeader", h_not_leader},
    {"test.Deferred", h_deferred}, {"test.Hold", h_hold},   {"test.Never", h_never},
};

/* ---------------------------------------------------------------- fixture */

static void fx_ctl(uv_async_t *h)
{
    rpc_fixture *f = h->data;
    kl_rpc_server_stop(f->srv);
    f->srv = NULL;
    /* Answers given after stop must be dropped without touching the closed socket; the
     * server is freed by the last of them. */
    answer_held(f);
    if (f->step_timer_on)
        uv_close((uv_handle_t *)&f->step_timer, NULL);
    uv_close((uv_handle_t *)&f->ctl, NULL);
}

static void *fx_loop_main(void *arg)
{
    rpc_fixture *f = arg;
    uv_run(&f->loop, UV_RUN_DEFAULT);
    return NULL;
}

/* Starts a server on a random high port, retrying on ports already taken. */
/* The fixture's listening host: a numeric address is served by the loop's own TCP
 * transport (common/rpc_tcp.c), a host name by nng's REP socket; the fixture tests run
 * under both (the "nng" case sets it). */
static const char *fx_host = "127.0.0.1";

/* The client dials by number (common/rpc_direct.c) unless fx_client_host is set. */
static bool fx_client_host = false;
static int fx_port = 0; /* nonzero: listen on this port */
static void fx_use_nng(void)
{
    fx_host = "localhost";
    fx_client_host = true;
}
/* The nng REP server, reached by the direct client (numeric address). */
static void fx_use_nng_direct(void)
{
    fx_host = "localhost";
    fx_client_host = false;
}
static void fx_use_default(void)
{
    fx_host = "127.0.0.1";
    fx_client_host = false;
    fx_port = 0;
}

static void fx_listen(rpc_fixture *f, size_t max_frame)
{
    srand((unsigned)(getpid() ^ time(NULL)));
    kl_rpc_server_config cfg = {
        .methods = fx_methods,
        .method_count = sizeof fx_methods / sizeof fx_methods[0],
        .owner = f,
        .max_frame = max_frame,
        .contexts = 0, /* raised to KL_RPC_MIN_CONTEXTS */
        .listen_url = f->url,
    };
    kl_err err;
    kl_code rc = KL_UNAVAILABLE;
    for (int attempt = 0; attempt < 50 && rc == KL_UNAVAILABLE; attempt++) {
        snprintf(f->url, sizeof f->url, "tcp://%s:%d", fx_host, fx_port ? fx_port : 30000 + rand() % 30000);
        rc = kl_rpc_server_start(&f->loop, &cfg, &f->srv, &err);
    }
    ck_assert_msg(rc == KL_OK, "server start: %s", err.message);
}

static void fx_start(size_t max_frame)
{
    memset(&fx, 0, sizeof fx);
    ck_assert_int_eq(uv_loop_init(&fx.loop), 0);
    ck_assert_int_eq(uv_async_init(&fx.loop, &fx.ctl, fx_ctl), 0);
    fx.ctl.data = &fx;
    /* Started before the loop thread exists, which orders it like a loop-thread call. */
    fx_listen(&fx, max_frame);
    ck_assert_int_eq(pthread_create(&fx.thread, NULL, fx_loop_main, &fx), 0);
}

static void fx_stop(void)
{
    ck_assert_int_eq(uv_async_send(&fx.ctl), 0);
    ck_assert_int_eq(pthread_join(fx.thread, NULL), 0);
    /* Every handle (the server's async, our timer) must be closed by now. */
    ck_assert_int_eq(uv_loop_close(&fx.loop), 0);
}

static kl_rpc_client *fx_client(void)
{
    kl_rpc_client *c = NULL;
    kl_err err;
    char url[sizeof fx.url + 16];
    const char *port = strrchr(fx.url, ':');
    if (fx_client_host)
        snprintf(url, sizeof url, "%s", fx.url);
    else
        snprintf(url, sizeof url, "tcp://127.0.0.1%s", port);
    kl_code rc = kl_rpc_client_open(url, 2000, 0, &c, &err);
    ck_assert_msg(rc == KL_OK, "client open: %s", err.message);
    return c;
}

/* Sends one raw frame from a plain REQ socket and decodes the answer. */
static Keyload__V1__Answer *raw_exchange(const void *frame, size_t len)
{
    nng_socket s;
    ck_assert_int_eq(nng_req0_open(&s), 0);
    ck_assert_int_eq(nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 5000), 0);
    ck_assert_int_eq(nng_dial(s, fx.url, NULL, 0), 0);
    ck_assert_int_eq(nng_send(s, (void *)frame, len, 0), 0);
    void *buf = NULL;
    size_t n = 0;
    ck_assert_int_eq(nng_recv(s, &buf, &n, NNG_FLAG_ALLOC), 0);
    Keyload__V1__Answer *ans = keyload__v1__answer__unpack(NULL, n, buf);
    nng_free(buf, n);
    ck_assert_int_eq(nng_close(s), 0);
    ck_assert_ptr_nonnull(ans);
    return ans;
}

static Keyload__V1__Answer *raw_envelope(uint32_t version, const char *method,
                                         uint64_t request_id, int64_t deadline_ms)
{
    Keyload__V1__Envelope env = KEYLOAD__V1__ENVELOPE__INIT;
    env.version = version;
    env.method = (char *)method;
    env.request_id = request_id;
    env.deadline_unix_ms = deadline_ms;
    uint8_t buf[256];
    size_t n = keyload__v1__envelope__get_packed_size(&env);
    ck_assert_uint_le(n, sizeof buf);
    keyload__v1__envelope__pack(&env, buf);
    return raw_exchange(buf, n);
}


/* ---------------------------------------------------------------- tests */

START_TEST(test_echo_round_trip)
{
    fx_start(0);
    kl_rpc_client *c = fx_client();
    kl_err err;
    uint8_t *ans = NULL;
    size_t ans_len = 0;
    char leader[64];

    kl_code rc = kl_rpc_invoke(c, "test.Echo", (const uint8_t *)"hello", 5, 5000, &ans, &ans_len,
                               leader, sizeof leader, &err);
    ck_assert_msg(rc == KL_OK, "echo: %s", err.message);
    ck_assert_uint_eq(ans_len, 5);
    ck_assert_mem_eq(ans, "hello", 5);
    free(ans);

    /* An empty answer is still an allocation the caller can free. */
    rc = kl_rpc_invoke(c, "test.Empty", NULL, 0, 5000, &ans, &ans_len, NULL, 0, &err);
    ck_assert_int_eq(rc, KL_OK);
    ck_assert_ptr_nonnull(ans);
    ck_assert_uint_eq(ans_len, 0);
    free(ans);

    rc = kl_rpc_invoke(c, "test.NotLeader", NULL, 0, 5000, &ans, &ans_len, leader, sizeof leader,
                       &err);
    ck_assert_int_eq(rc, KL_NOT_LEADER);
    ck_assert_ptr_null(ans);
    ck_assert_str_eq(err.detail, "leader");
    ck_assert_str_eq(err.message, "this replica is not the leader");
    ck_assert_str_eq(leader, "tcp://10.0.0.9:7400");

    kl_rpc_client_close(c);
    fx_stop();
    ck_assert_int_eq(atomic_load(&fx.handled), 3);
}
END_TEST

START_TEST(test_unknown_method)
{
    fx_start(0);
    kl_rpc_client *c = fx_client();
    kl_err err;
    uint8_t *ans = NULL;
    size_t ans_len = 0;

    kl_code rc = kl_rpc_invoke(c, "test.Nope", NULL, 0, 5000, &ans, &ans_len, NULL, 0, &err);
    ck_assert_int_eq(rc, KL_NOT_FOUND);
    ck_assert_str_eq(err.detail, "method");
    ck_assert_ptr_nonnull(strstr(err.message, "test.Nope"));

    /* A hostile name is echoed truncated and without raw bytes. */
    char name[200];
    snprintf(name, sizeof name, "bad\x01\xffname");
    memset(name + strlen(name), 'x', 150);
    name[sizeof name - 1] = '\0';
    rc = kl_rpc_invoke(c, name, NULL, 0, 5000, &ans, &ans_len, NULL, 0, &err);
    ck_assert_int_eq(rc, KL_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(err.message, "bad??name"));
    ck_assert_uint_lt(strlen(err.message), 100);
    for (const char *p = err.message; *p; p++)
        ck_assert(*p >= 0x20 && *p < 0x7f);

    kl_rpc_client_close(c);
    fx_stop();
    ck_assert_int_eq(atomic_load(&fx.handled), 0);
}
END_TEST

START_TEST(test_malformed_frame)
{
    fx_start(0);
    /* Field 2 (method) claims 16 bytes but carries one. */
    static const uint8_t truncated[] = {0x12, 0x10, 'a'};
    Keyload__V1__Answer *a = raw_exchange(truncated, sizeof truncated);
    ck_assert_int_eq(a->code, KEYLOAD__V1__STATUS_CODE__INVALID_ARGUMENT);
    ck_assert_uint_eq(a->request_id, 0);
    ck_assert_str_eq(a->message, "malformed request frame");
    keyload__v1__answer__free_unpacked(a, NULL);

    /* An over-long varint tag. */
    static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                      0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    a = raw_exchange(garbage, sizeof garbage);
    ck_assert_int_eq(a->code, KEYLOAD__V1__STATUS_CODE__INVALID_ARGUMENT);
    ck_assert_uint_eq(a->request_id, 0);
    keyload__v1__answer__free_unpacked(a, NULL);

    fx_stop();
    ck_assert_int_eq(atomic_load(&fx.handled), 0);
}
END_TEST

START_TEST(test_bad_version)
{
    fx_start(0);
    Keyload__V1__Answer *a = raw_envelope(7, "test.Echo", 42, 0);
    ck_assert_int_eq(a->code, KEYLOAD__V1__STATUS_CODE__INVALID_ARGUMENT);
    ck_assert_str_eq(a->detail, "version");
    ck_assert_uint_eq(a->request_id, 42);
    keyload__v1__answer__free_unpacked(a, NULL);

    /* Version 0 (field unset) is accepted. */
    a = raw_envelope(0, "test.Empty", 43, 0);
    ck_assert_int_eq(a->code, KEYLOAD__V1__STATUS_CODE__OK);
    ck_assert_uint_eq(a->request_id, 43);
    keyload__v1__answer__free_unpacked(a, NULL);

    fx_stop();
    ck_assert_int_eq(atomic_load(&fx.handled), 1);
}
END_TEST

START_TEST(test_oversized_frame)
{
    fx_start(1024);
    kl_rpc_client *c = fx_client();
    kl_err err;
    uint8_t *ans = NULL;
    size_t ans_len = 0;
    uint8_t big[2000];
    memset(big, 0xab, sizeof big);

    kl_code rc =
        kl_rpc_invoke(c, "test.Echo", big, sizeof big, 5000, &ans, &ans_len, NULL, 0, &err);
    ck_assert_int_eq(rc, KL_RESOURCE_EXHAUSTED);
    ck_assert_str_eq(err.detail, "limit:MaxFrameBytes");
    ck_assert_ptr_nonnull(strstr(err.message, "MaxFrameBytes"));
    ck_assert_ptr_nonnull(strstr(err.message, "1024"));
    ck_assert_ptr_null(ans);

    /* The connection and the server are still fine afterwards. */
    rc = kl_rpc_invoke(c, "test.Echo", big, 100, 5000, &ans, &ans_len, NULL, 0, &err);
    ck_assert_msg(rc == KL_OK, "small echo: %s", err.message);
    ck_assert_uint_eq(ans_len, 100);
    free(ans);

    kl_rpc_client_close(c);
    fx_stop();
    ck_assert_int_eq(atomic_load(&fx.handled), 1);
}
END_TEST

START_TEST(test_expired_deadline)
{
    fx_start(0);
    Keyload__V1__Answer *a = raw_envelope(1, "test.Echo", 7, wall_ms() - 1000);
    ck_assert_int_eq(a->code, KEYLOAD__V1__STATUS_CODE__DEADLINE_EXCEEDED);
    ck_assert_uint_eq(a->request_id, 7);
    keyload__v1__answer__free_unpacked(a, NULL);

    /* A future deadline is served. */
    a = raw_envelope(1, "test.Empty", 8, wall_ms() + 60000);
    ck_assert_int_eq(a->code, KEYLOAD__V1__STATUS_CODE__OK);
    keyload__v1__answer__free_unpacked(a, NULL);

    fx_stop();
    ck_assert_int_eq(atomic_load(&fx.handled), 1);
}
END_TEST

START_TEST(test_deferred_reply)
{
    fx_start(0);
    kl_rpc_client *c = fx_client();
    kl_err err;
    uint8_t *ans = NULL;
    size_t ans_len = 0;

    int64_t t0 = mono_ms();
    kl_code rc = kl_rpc_invoke(c, "test.Deferred", (const uint8_t *)"later", 5, 5000, &ans,
                               &ans_len, NULL, 0, &err);
    ck_assert_msg(rc == KL_OK, "deferred: %s", err.message);
    ck_assert_int_ge(mono_ms() - t0, 40);
    ck_assert_uint_eq(ans_len, 5);
    ck_assert_mem_eq(ans, "later", 5);
    free(ans);

    kl_rpc_client_close(c);
    fx_stop();
}
END_TEST

typedef struct concurrent_job {
    kl_rpc_client *client;
    int index;
    kl_code rc;
    bool echoed;
    char message[KL_ERR_MESSAGE_MAX];
} concurrent_job;

static void *concurrent_main(void *arg)
{
    concurrent_job *job = arg;
    char payload[32];
    int n = snprintf(payload, sizeof payload, "call-%d", job->index);
    uint8_t *ans = NULL;
    size_t ans_len = 0;
    kl_err err;
    job->rc = kl_rpc_invoke(job->client, "test.Hold", (const uint8_t *)payload, (size_t)n, 20000,
                            &ans, &ans_len, NULL, 0, &err);
    if (job->rc == KL_OK)
        job->echoed = ans_len == (size_t)n && memcmp(ans, payload, ans_len) == 0;
    else
        snprintf(job->message, sizeof job->message, "%s", err.message);
    free(ans);
    return NULL;
}

START_TEST(test_concurrent_calls)
{
    fx_start(0);
    fx.hold_target = FX_CONCURRENT; /* before any call: the loop reads it later */
    kl_rpc_client *c = fx_client();
    pthread_t threads[FX_CONCURRENT];
    concurrent_job jobs[FX_CONCURRENT];
    for (int i = 0; i < FX_CONCURRENT; i++) {
        jobs[i] = (concurrent_job){.client = c, .index = i};
        ck_assert_int_eq(pthread_create(&threads[i], NULL, concurrent_main, &jobs[i]), 0);
    }
    for (int i = 0; i < FX_CONCURRENT; i++)
        ck_assert_int_eq(pthread_join(threads[i], NULL), 0);
    for (int i = 0; i < FX_CONCURRENT; i++) {
        ck_assert_msg(jobs[i].rc == KL_OK, "call %d: %s", i, jobs[i].message);
        ck_assert_msg(jobs[i].echoed, "call %d got another call's answer", i);
    }
    /* The handler answers only once all of them are held: all were in flight at once. */
    ck_assert_int_eq(atomic_load(&fx.max_held), FX_CONCURRENT);
    kl_rpc_client_close(c);
    fx_stop();
}
END_TEST

START_TEST(test_client_timeout)
{
    fx_start(0);
    kl_rpc_client *c = fx_client();
    kl_err err;
    uint8_t *ans = NULL;
    size_t ans_len = 0;

    int64_t t0 = mono_ms();
    kl_code rc = kl_rpc_invoke(c, "test.Never", (const uint8_t *)"x", 1, 300, &ans, &ans_len, NULL,
                               0, &err);
    int64_t elapsed = mono_ms() - t0;
    ck_assert_int_eq(rc, KL_DEADLINE_EXCEEDED);
    ck_assert_str_eq(err.detail, "no_answer");
    ck_assert_ptr_nonnull(strstr(err.message, "300 ms"));
    ck_assert_ptr_nonnull(strstr(err.message, "may have been executed"));
    ck_assert_ptr_null(ans);
    ck_assert_int_ge(elapsed, 250);
    ck_assert_int_lt(elapsed, 5000);
    ck_assert_int_eq(atomic_load(&fx.handled), 1);

    kl_rpc_client_close(c);
    fx_stop(); /* the held call is answered after stop, which only frees it */
}
END_TEST

typedef struct pending_job {
    kl_rpc_client *client;
    kl_code rc;
    char detail[KL_ERR_DETAIL_MAX];
} pending_job;

static void *pending_main(void *arg)
{
    pending_job *job = arg;
    uint8_t *ans = NULL;
    size_t ans_len = 0;
    kl_err err;
    job->rc = kl_rpc_invoke(job->client, "test.Never", NULL, 0, 3000, &ans, &ans_len, NULL, 0,
                            &err);
    snprintf(job->detail, sizeof job->detail, "%s", err.detail);
    free(ans);
    return NULL;
}

START_TEST(test_stop_with_call_in_flight)
{
    fx_start(0);
    kl_rpc_client *c = fx_client();
    pending_job job = {.client = c};
    pthread_t thread;
    ck_assert_int_eq(pthread_create(&thread, NULL, pending_main, &job), 0);
    while (atomic_load(&fx.handled) == 0)
        usleep(1000);
    fx_stop();
    ck_assert_int_eq(pthread_join(thread, NULL), 0);
    /* Outcome unknown to the caller: never UNAVAILABLE ("not executed"). */
    ck_assert_int_eq(job.rc, KL_DEADLINE_EXCEEDED);
    ck_assert_str_eq(job.detail, "no_answer");
    kl_rpc_client_close(c);
}
END_TEST

START_TEST(test_connect_refused)
{
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", th_free_port());
    kl_rpc_client *c = NULL;
    kl_err err;
    int64_t t0 = mono_ms();
    kl_code rc = kl_rpc_client_open(url, 2000, 0, &c, &err);
    ck_assert_int_eq(rc, KL_UNAVAILABLE);
    ck_assert_ptr_null(c);
    ck_assert_ptr_nonnull(strstr(err.message, url));
    ck_assert_int_lt(mono_ms() - t0, 1500); /* refused fails fast, not at the timeout */

    /* Without a bound the dial is plainly synchronous. */
    rc = kl_rpc_client_open(url, 0, 0, &c, &err);
    ck_assert_int_eq(rc, KL_UNAVAILABLE);
    ck_assert_ptr_null(c);
}
END_TEST

START_TEST(test_connect_timeout)
{
    /* A TCP listener that never speaks: the TCP handshake completes in the kernel but
     * nng's SP handshake never does, so only the bound ends the dial. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(fd, 8), 0);
    socklen_t sl = sizeof sa;
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", ntohs(sa.sin_port));

    kl_rpc_client *c = NULL;
    kl_err err;
    int64_t t0 = mono_ms();
    kl_code rc = kl_rpc_client_open(url, 300, 0, &c, &err);
    int64_t elapsed = mono_ms() - t0;
    close(fd);
    ck_assert_int_eq(rc, KL_UNAVAILABLE);
    ck_assert_ptr_null(c);
    ck_assert_ptr_nonnull(strstr(err.message, "300 ms"));
    ck_assert_int_ge(elapsed, 250);
    ck_assert_int_lt(elapsed, 3000);
}
END_TEST

/* A dial that does not end when its dialer is closed (nng 1.5.2 can leave one waiting for
 * ever) still bounds the open: the caller gives up RPC_DIAL_CLOSE_WAIT_MS (1 s) after its
 * timeout and leaves the thread behind. A host name, because only those go through nng's
 * dialer (numeric addresses use common/rpc_direct.c). */
START_TEST(test_connect_timeout_dial_never_returns)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(fd, 8), 0);
    socklen_t sl = sizeof sa;
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    char url[64];
    snprintf(url, sizeof url, "tcp://localhost:%d", ntohs(sa.sin_port));
    kl_err err;
    ck_assert_int_eq(kl_failpoint_configure("rpc.dial_returned=sleep(4000)", &err), KL_OK);
    kl_rpc_client *c = NULL;
    int64_t t0 = mono_ms();
    kl_code rc = kl_rpc_client_open(url, 300, 0, &c, &err);
    int64_t elapsed = mono_ms() - t0;
    ck_assert_int_eq(kl_failpoint_configure(NULL, &err), KL_OK);
    ck_assert_int_eq(rc, KL_UNAVAILABLE);
    ck_assert_ptr_null(c);
    ck_assert_ptr_nonnull(strstr(err.message, "300 ms"));
    ck_assert_int_ge(elapsed, 1250);
    ck_assert_int_lt(elapsed, 3000);
    /* The left thread ends on its own and frees its job (LeakSanitizer checks at exit). */
    usleep(4500 * 1000);
    close(fd);
}
END_TEST

/* The direct client outlives its server: a call while the server is down is not sent and
 * says why (UNAVAILABLE no_connection, naming the refusal), a call after the server came
 * back on the same port connects again by itself and is answered. */
START_TEST(test_direct_reconnects)
{
    fx_port = th_free_port();
    fx_start(0);
    kl_rpc_client *c = fx_client();
    kl_err err;
    uint8_t *ans = NULL;
    size_t ans_len = 0;
    ck_assert_int_eq(kl_rpc_invoke(c, "test.Echo", (const uint8_t *)"a", 1, 2000, &ans, &ans_len, NULL, 0, &err), KL_OK);
    free(ans);
    ans = NULL;
    fx_stop();

    /* The server's close may not have reached the client's I/O thread yet: a call written
     * on the closing connection was sent and cannot know whether it ran (DEADLINE_EXCEEDED
     * no_answer); by the next call the client knows and sends nothing. */
    kl_code rc = kl_rpc_invoke(c, "test.Echo", (const uint8_t *)"b", 1, 400, &ans, &ans_len, NULL, 0, &err);
    if (rc == KL_DEADLINE_EXCEEDED) {
        ck_assert_str_eq(err.detail, "no_answer");
        rc = kl_rpc_invoke(c, "test.Echo", (const uint8_t *)"b", 1, 400, &ans, &ans_len, NULL, 0, &err);
    }
    ck_assert_int_eq(rc, KL_UNAVAILABLE);
    int64_t t0 = mono_ms();
    rc = kl_rpc_invoke(c, "test.Echo", (const uint8_t *)"b", 1, 400, &ans, &ans_len, NULL, 0, &err);
    ck_assert_int_eq(rc, KL_UNAVAILABLE);
    ck_assert_str_eq(err.detail, "no_connection");
    ck_assert_ptr_nonnull(strstr(err.message, "refused"));
    ck_assert_int_ge(mono_ms() - t0, 350);
    ck_assert_ptr_null(ans);

    fx_start(0);
    rc = kl_rpc_invoke(c, "test.Echo", (const uint8_t *)"c", 1, 5000, &ans, &ans_len, NULL, 0, &err);
    ck_assert_msg(rc == KL_OK, "after the restart: %s", err.message);
    ck_assert_uint_eq(ans_len, 1);
    ck_assert_int_eq(ans[0], 'c');
    free(ans);
    kl_rpc_client_close(c);
    fx_stop();
    fx_port = 0;
}
END_TEST

START_TEST(test_start_errors)
{
    /* Nobody runs this loop: start and stop happen on this thread, which owns it. */
    rpc_fixture f;
    memset(&f, 0, sizeof f);
    ck_assert_int_eq(uv_loop_init(&f.loop), 0);
    fx_listen(&f, 0);
    kl_rpc_server *second = NULL;
    kl_err err;
    kl_rpc_server_config cfg = {.listen_url = f.url, .methods = fx_methods, .method_count = 1};

    ck_assert_int_eq(kl_rpc_server_start(&f.loop, &cfg, &second, &err), KL_UNAVAILABLE);
    ck_assert_ptr_null(second);
    ck_assert_ptr_nonnull(strstr(err.message, f.url));

    cfg.listen_url = "nope://127.0.0.1:1";
    ck_assert_int_eq(kl_rpc_server_start(&f.loop, &cfg, &second, &err), KL_INVALID_ARGUMENT);
    cfg.listen_url = NULL;
    ck_assert_int_eq(kl_rpc_server_start(&f.loop, &cfg, &second, &err), KL_INVALID_ARGUMENT);
    /* The lookup table is sorted once at start: a name listed twice, or more methods than
     * it holds, is refused before anything listens. */
    static const kl_rpc_method twice[] = {{"test.Echo", h_echo}, {"test.Empty", h_empty}, {"test.Echo", h_empty}};
    cfg.listen_url = "tcp://127.0.0.1:1";
    cfg.methods = twice;
    cfg.method_count = 3;
    ck_assert_int_eq(kl_rpc_server_start(&f.loop, &cfg, &second, &err), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.message, "listed twice"));
    cfg.methods = fx_methods;
    cfg.method_count = KL_RPC_MAX_METHODS + 1;
    ck_assert_int_eq(kl_rpc_server_start(&f.loop, &cfg, &second, &err), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.message, "KL_RPC_MAX_METHODS"));

    kl_rpc_server_stop(f.srv);
    ck_assert_int_eq(uv_run(&f.loop, UV_RUN_DEFAULT), 0); /* runs the close callback */
    ck_assert_int_eq(uv_loop_close(&f.loop), 0);
}
END_TEST

/* ---------------------------------------------------------------- the loop's TCP transport */

/* A raw TCP connection to 127.0.0.1:port, reads bounded at 5 s. */
static int tcp_raw_connect_port(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    struct timeval tv = {.tv_sec = 5};
    ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    return fd;
}

/* A raw TCP connection to the fixture's port (what no nng client would send). */
static int tcp_raw_connect(void)
{
    const char *colon = strrchr(fx.url, ':');
    ck_assert_ptr_nonnull(colon);
    return tcp_raw_connect_port(atoi(colon + 1));
}

static void tcp_raw_send(int fd, const void *b, size_t n)
{
    ck_assert_int_eq(send(fd, b, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Reads exactly n bytes; false on end of stream. A timeout fails the test. */
static bool tcp_raw_read(int fd, uint8_t *b, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(fd, b + got, n - got, 0);
        ck_assert_msg(r >= 0, "no answer and no close within 5 s");
        if (r == 0)
            return false;
        got += (size_t)r;
    }
    return true;
}

static void tcp_raw_frame(int fd, const uint8_t *body, size_t n)
{
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)((uint64_t)n >> (56 - 8 * i));
    tcp_raw_send(fd, len, sizeof len);
    tcp_raw_send(fd, body, n);
}

static const uint8_t tcp_req_hello[8] = {0, 'S', 'P', 0, 0, 0x30, 0, 0};

typedef struct {
    atomic_int done;
} cork_count;

static void cork_done(void *arg)
{
    atomic_fetch_add(&((cork_count *)arg)->done, 1);
}

/* A raw REP peer on a fresh port: *lfd listens, *fd is the accepted client connection
 * after both hellos, *c the client. */
static void raw_rep_open(int *lfd, int *fd, kl_rpc_direct **c)
{
    int port = th_free_port();
    *lfd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(*lfd, 0);
    int one = 1;
    setsockopt(*lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(*lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(*lfd, 1), 0);
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    kl_err err;
    ck_assert_int_eq(kl_rpc_direct_open(url, -1, 1 << 20, c, &err), KL_OK);
    *fd = accept(*lfd, NULL, NULL);
    ck_assert_int_ge(*fd, 0);
    struct timeval tv = {.tv_sec = 5};
    ck_assert_int_eq(setsockopt(*fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    uint8_t hello[8];
    ck_assert(tcp_raw_read(*fd, hello, sizeof hello));
    ck_assert_mem_eq(hello, tcp_req_hello, sizeof hello);
    const uint8_t rep_hello[8] = {0, 'S', 'P', 0, 0, 0x31, 0, 0};
    tcp_raw_send(*fd, rep_hello, sizeof rep_hello);
}

/* Answers request frame f (its 8-byte length and 4-byte id read) with the one-byte body. */
static void raw_answer(int fd, const uint8_t *f, uint8_t body)
{
    uint8_t a[8 + 4 + 1] = {0, 0, 0, 0, 0, 0, 0, 5, f[8], f[9], f[10], f[11], body};
    tcp_raw_send(fd, a, sizeof a);
}

/* Requests started while the thread is corked stay off the wire (a raw REP peer reads
 * nothing); the uncork writes all of them, whole and in start order, and each is answered.
 * A request started after the uncork is written at once again. */
START_TEST(test_direct_cork_holds_then_writes_in_order)
{
    int lfd, fd;
    kl_rpc_direct *c = NULL;
    kl_err err;
    raw_rep_open(&lfd, &fd, &c);
    usleep(100 * 1000); /* the client's I/O thread reads the hello: the connection is ready */

    enum { N = 5 };
    cork_count cc = {0};
    kl_rpc_direct_req r[N];
    memset(r, 0, sizeof r);
    kl_rpc_direct_cork();
    for (int i = 0; i < N; i++) {
        r[i].done = cork_done;
        r[i].arg = &cc;
        uint8_t body[3] = {'b', (uint8_t)('0' + i), 'z'};
        ck_assert_int_eq(kl_rpc_direct_start(c, &r[i], body, sizeof body, 5000, 5000, &err), KL_OK);
    }
    usleep(100 * 1000);
    uint8_t b[64];
    ck_assert_int_lt(recv(fd, b, sizeof b, MSG_DONTWAIT), 0); /* nothing written yet */
    ck_assert_int_eq(errno, EAGAIN);
    kl_rpc_direct_uncork();
    for (int i = 0; i < N; i++) {
        uint8_t f[8 + 4 + 3];
        ck_assert(tcp_raw_read(fd, f, sizeof f));
        ck_assert_uint_eq(f[7], 4 + 3); /* big-endian length of id and body */
        ck_assert_uint_ge(f[8], 0x80);  /* a request id */
        ck_assert_int_eq(f[13], '0' + i); /* start order */
        raw_answer(fd, f, 'a');
    }
    for (int k = 0; k < 500 && atomic_load(&cc.done) < N; k++)
        usleep(10 * 1000);
    ck_assert_int_eq(atomic_load(&cc.done), N);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(r[i].outcome, KL_RPC_DIRECT_ANSWERED);
        ck_assert_uint_eq(r[i].reply_len, 1);
        free(r[i].reply);
    }
    /* not corked: written by the start itself */
    kl_rpc_direct_req last = {.done = cork_done, .arg = &cc};
    ck_assert_int_eq(kl_rpc_direct_start(c, &last, (const uint8_t *)"bXz", 3, 5000, 5000, &err), KL_OK);
    uint8_t f[8 + 4 + 3];
    ck_assert(tcp_raw_read(fd, f, sizeof f));
    ck_assert_int_eq(f[13], 'X');
    kl_rpc_direct_close(c);
    for (int k = 0; k < 500 && atomic_load(&cc.done) < N + 1; k++)
        usleep(10 * 1000);
    ck_assert_int_eq(atomic_load(&cc.done), N + 1);
    ck_assert_int_ne(last.outcome, KL_RPC_DIRECT_ANSWERED);
    free(last.reply);
    close(fd);
    close(lfd);
}
END_TEST


/* Connections owed a write by a corked start: one closed before the uncork leaves the
 * uncork's list with it (its memory goes on the I/O thread; under ASan a later visit would
 * be a use after free), and the uncork still writes every other owed connection's
 * requests. Three connections, requests corked on all three, the middle one closed. */
START_TEST(test_direct_uncork_skips_closed_connection)
{
    enum { K = 3 };
    int lfd[K], fd[K];
    kl_rpc_direct *c[K];
    for (int i = 0; i < K; i++)
        raw_rep_open(&lfd[i], &fd[i], &c[i]);
    usleep(100 * 1000); /* the I/O thread reads the hellos: every connection is ready */
    cork_count cc = {0};
    kl_rpc_direct_req r[K];
    memset(r, 0, sizeof r);
    kl_err err;
    kl_rpc_direct_cork();
    for (int i = 0; i < K; i++) {
        r[i].done = cork_done;
        r[i].arg = &cc;
        uint8_t body[3] = {'b', (uint8_t)('0' + i), 'z'};
        ck_assert_int_eq(kl_rpc_direct_start(c[i], &r[i], body, sizeof body, 5000, 5000, &err), KL_OK);
    }
    kl_rpc_direct_close(c[1]);
    usleep(100 * 1000); /* the I/O thread frees the closed connection */
    ck_assert_int_eq(atomic_load(&cc.done), 1);
    ck_assert_int_eq(r[1].outcome, KL_RPC_DIRECT_NOT_SENT_CLOSED);
    kl_rpc_direct_uncork();
    for (int i = 0; i < K; i += 2) {
        uint8_t f[8 + 4 + 3];
        ck_assert(tcp_raw_read(fd[i], f, sizeof f));
        ck_assert_int_eq(f[13], '0' + i);
        raw_answer(fd[i], f, 'a');
    }
    for (int k = 0; k < 500 && atomic_load(&cc.done) < K; k++)
        usleep(10 * 1000);
    ck_assert_int_eq(atomic_load(&cc.done), K);
    for (int i = 0; i < K; i += 2) {
        ck_assert_int_eq(r[i].outcome, KL_RPC_DIRECT_ANSWERED);
        free(r[i].reply);
        kl_rpc_direct_close(c[i]);
    }
    for (int i = 0; i < K; i++) {
        close(fd[i]);
        close(lfd[i]);
    }
}
END_TEST

typedef struct {
    kl_rpc_direct *conn[2];
    kl_rpc_direct_req next[2];
    cork_count cc;
    atomic_int started;
} chain_ctx;

static chain_ctx chain;

static void chain_second_done(void *arg) { cork_done(arg); }

/* The first answer's callback (on the I/O thread) starts one request on each connection. */
static void chain_first_done(void *arg)
{
    (void)arg;
    kl_err err;
    for (int i = 0; i < 2; i++) {
        chain.next[i].done = chain_second_done;
        chain.next[i].arg = &chain.cc;
        uint8_t body[3] = {'n', (uint8_t)('0' + i), 'z'};
        if (kl_rpc_direct_start(chain.conn[i], &chain.next[i], body, sizeof body, 5000, 5000, &err) == KL_OK)
            atomic_fetch_add(&chain.started, 1);
    }
    atomic_fetch_add(&chain.cc.done, 1);
}

/* Requests started inside done callbacks are held until the I/O thread's batch of callbacks
 * ends, then written: none is left unwritten waiting for an uncork nobody calls. */
START_TEST(test_direct_requests_started_in_callbacks_are_written)
{
    int lfd[2], fd[2];
    memset(&chain, 0, sizeof chain);
    for (int i = 0; i < 2; i++)
        raw_rep_open(&lfd[i], &fd[i], &chain.conn[i]);
    usleep(100 * 1000); /* both connections ready */
    kl_rpc_direct_req first = {.done = chain_first_done, .arg = NULL};
    kl_err err;
    ck_assert_int_eq(kl_rpc_direct_start(chain.conn[0], &first, (const uint8_t *)"f0z", 3, 5000, 5000, &err), KL_OK);
    uint8_t f[8 + 4 + 3];
    ck_assert(tcp_raw_read(fd[0], f, sizeof f));
    ck_assert_int_eq(f[13], '0');
    raw_answer(fd[0], f, 'a');
    for (int i = 0; i < 2; i++) { /* each connection gets the request its callback started */
        ck_assert_msg(tcp_raw_read(fd[i], f, sizeof f), "connection %d: nothing written", i);
        ck_assert_int_eq(f[12], 'n');
        ck_assert_int_eq(f[13], '0' + i);
        raw_answer(fd[i], f, 'b');
    }
    for (int k = 0; k < 500 && atomic_load(&chain.cc.done) < 3; k++)
        usleep(10 * 1000);
    ck_assert_int_eq(atomic_load(&chain.started), 2);
    ck_assert_int_eq(atomic_load(&chain.cc.done), 3);
    free(first.reply);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(chain.next[i].outcome, KL_RPC_DIRECT_ANSWERED);
        free(chain.next[i].reply);
        kl_rpc_direct_close(chain.conn[i]);
        close(fd[i]);
        close(lfd[i]);
    }
}
END_TEST

/* A wrong hello and a frame over the receive limit close the connection unserved; a frame
 * without a backtrace is dropped; a request's backtrace comes back on its answer. */
START_TEST(test_tcp_wire)
{
    fx_start(1024);
    uint8_t b[256];

    int fd = tcp_raw_connect();
    const uint8_t rep_hello[8] = {0, 'S', 'P', 0, 0, 0x31, 0, 0};
    tcp_raw_send(fd, rep_hello, sizeof rep_hello); /* a REP talking to a REP */
    ck_assert(tcp_raw_read(fd, b, 8));
    ck_assert_mem_eq(b, rep_hello, 8);
    ck_assert(!tcp_raw_read(fd, b, 1));
    close(fd);

    fd = tcp_raw_connect();
    tcp_raw_send(fd, tcp_req_hello, sizeof tcp_req_hello);
    uint8_t len[8] = {0, 0, 0, 0, 0, 0x01, 0, 0}; /* 65536 bytes: over 4 x 1024 + slack */
    tcp_raw_send(fd, len, sizeof len);
    ck_assert(tcp_raw_read(fd, b, 8));
    ck_assert(!tcp_raw_read(fd, b, 1));
    close(fd);

    fd = tcp_raw_connect();
    tcp_raw_send(fd, tcp_req_hello, sizeof tcp_req_hello);
    ck_assert(tcp_raw_read(fd, b, 8));
    const uint8_t no_trace[5] = {0, 0, 0, 1, 'x'};
    tcp_raw_frame(fd, no_trace, sizeof no_trace);
    Keyload__V1__Envelope env = KEYLOAD__V1__ENVELOPE__INIT;
    env.method = (char *)"test.Echo";
    env.request_id = 7;
    env.payload.data = (uint8_t *)"hi";
    env.payload.len = 2;
    uint8_t req[128] = {0x80, 0, 0, 0x2a};
    size_t n = keyload__v1__envelope__get_packed_size(&env);
    ck_assert_uint_le(n + 4, sizeof req);
    keyload__v1__envelope__pack(&env, req + 4);
    tcp_raw_frame(fd, req, n + 4);
    ck_assert(tcp_raw_read(fd, b, 8));
    uint64_t alen = 0;
    for (int i = 0; i < 8; i++)
        alen = alen << 8 | b[i];
    ck_assert_uint_gt(alen, 4);
    ck_assert_uint_le(alen, sizeof b);
    ck_assert(tcp_raw_read(fd, b, (size_t)alen));
    ck_assert_mem_eq(b, req, 4); /* the first answer is the request's: the other was dropped */
    Keyload__V1__Answer *ans = keyload__v1__answer__unpack(NULL, (size_t)alen - 4, b + 4);
    ck_assert_ptr_nonnull(ans);
    ck_assert_int_eq(ans->code, KEYLOAD__V1__STATUS_CODE__OK);
    ck_assert_uint_eq(ans->request_id, 7);
    ck_assert_uint_eq(ans->payload.len, 2);
    ck_assert_mem_eq(ans->payload.data, "hi", 2);
    keyload__v1__answer__free_unpacked(ans, NULL);
    close(fd);

    fx_stop();
    ck_assert_int_eq(atomic_load(&fx.handled), 1);
}
END_TEST

/* One raw request frame (backtrace id, then the Envelope) of method on fd. */
static void tcp_raw_request(int fd, const char *method, uint32_t id)
{
    Keyload__V1__Envelope env = KEYLOAD__V1__ENVELOPE__INIT;
    env.method = (char *)method;
    env.request_id = id;
    uint8_t req[128] = {(uint8_t)(0x80 | (id >> 24)), (uint8_t)(id >> 16), (uint8_t)(id >> 8), (uint8_t)id};
    size_t n = keyload__v1__envelope__get_packed_size(&env);
    ck_assert_uint_le(n + 4, sizeof req);
    keyload__v1__envelope__pack(&env, req + 4);
    tcp_raw_frame(fd, req, n + 4);
}

/* A busy connection cannot starve an older one: A holds every call the server may hold
 * (KL_RPC_MIN_CONTEXTS) and has 20 more queued when B's one request arrives; as held calls
 * are answered one at a time, B's request is served after a few of them, not after all of
 * A's queue (resuming used to visit the newest connection first and stop at its next pause). */
START_TEST(test_tcp_fair_resume)
{
    fx_start(1024);
    uint8_t b[8];
    int fb = tcp_raw_connect(), fa = tcp_raw_connect();
    tcp_raw_send(fb, tcp_req_hello, sizeof tcp_req_hello);
    ck_assert(tcp_raw_read(fb, b, 8));
    tcp_raw_send(fa, tcp_req_hello, sizeof tcp_req_hello);
    ck_assert(tcp_raw_read(fa, b, 8));
    for (uint32_t i = 1; i <= KL_RPC_MIN_CONTEXTS + 20; i++)
        tcp_raw_request(fa, "test.Step", i);
    for (int64_t t0 = mono_ms(); atomic_load(&fx.max_held) < KL_RPC_MIN_CONTEXTS && mono_ms() - t0 < 5000;)
        usleep(1000);
    ck_assert_int_eq(atomic_load(&fx.max_held), KL_RPC_MIN_CONTEXTS);
    tcp_raw_request(fb, "test.Echo", 9999);
    usleep(100 * 1000); /* B's request is read (or waits in the kernel) while the server is paused */
    ck_assert_int_eq(atomic_load(&fx.step_handled), KL_RPC_MIN_CONTEXTS);
    atomic_store(&fx.step_release, true);
    uint8_t len[8];
    ck_assert(tcp_raw_read(fb, len, 8)); /* B's answer */
    int a_extra = atomic_load(&fx.step_handled) - KL_RPC_MIN_CONTEXTS;
    ck_assert_msg(a_extra < 10, "B was served only after %d more of A's requests", a_extra);
    close(fa);
    close(fb);
    fx_stop();
}
END_TEST

/* An answer never runs another call's handler on its own stack: the frames that waited
 * while the server was paused are delivered on a later loop turn. A handler nested inside
 * the code that answered (a node walking its table of pending batches, say) would change
 * that code's state under its feet. */
START_TEST(test_tcp_resume_not_nested)
{
    fx_start(1024);
    uint8_t b[8];
    int fa = tcp_raw_connect();
    tcp_raw_send(fa, tcp_req_hello, sizeof tcp_req_hello);
    ck_assert(tcp_raw_read(fa, b, 8));
    for (uint32_t i = 1; i <= KL_RPC_MIN_CONTEXTS + 10; i++)
        tcp_raw_request(fa, "test.Step", i);
    for (int64_t t0 = mono_ms(); atomic_load(&fx.max_held) < KL_RPC_MIN_CONTEXTS && mono_ms() - t0 < 5000;)
        usleep(1000);
    ck_assert_int_eq(atomic_load(&fx.step_handled), KL_RPC_MIN_CONTEXTS);
    atomic_store(&fx.step_release, true);
    for (int64_t t0 = mono_ms(); atomic_load(&fx.step_handled) < KL_RPC_MIN_CONTEXTS + 10 && mono_ms() - t0 < 10000;)
        usleep(1000);
    ck_assert_int_eq(atomic_load(&fx.step_handled), KL_RPC_MIN_CONTEXTS + 10);
    ck_assert_int_eq(atomic_load(&fx.nested), 0);
    close(fa);
    fx_stop();
}
END_TEST

/* ---- the TCP transport alone, its loop run by the test thread */

#define TD_CALLS 20

typedef struct tcp_direct {
    kl_rpc_tcp_conn *conn[TD_CALLS];
    uint8_t hdr[TD_CALLS][4];
    int n;
} tcp_direct;

static void td_frame(void *owner, kl_rpc_tcp_conn *conn, const uint8_t *hdr, size_t hdr_len,
                     const uint8_t *body, size_t len)
{
    (void)body;
    (void)len;
    tcp_direct *td = owner;
    ck_assert_int_lt(td->n, TD_CALLS);
    ck_assert_uint_eq(hdr_len, 4);
    td->conn[td->n] = conn;
    memcpy(td->hdr[td->n], hdr, 4);
    td->n++;
}

/* The answers one loop turn gives leave in one write, in the order they were given (here
 * the reverse of the requests'), each whole and under its own request's backtrace. */
START_TEST(test_tcp_answers_flushed_in_order)
{
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    tcp_direct td = {.n = 0};
    kl_rpc_tcp *t = NULL;
    char url[64];
    int port = 0;
    kl_err err;
    kl_code rc = KL_UNAVAILABLE;
    srand((unsigned)(getpid() ^ time(NULL)));
    for (int attempt = 0; attempt < 50 && rc == KL_UNAVAILABLE; attempt++) {
        port = 30000 + rand() % 30000;
        snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
        kl_rpc_tcp_config cfg = {.url = url, .recv_max = 1024, .on_frame = td_frame, .owner = &td};
        rc = kl_rpc_tcp_start(&loop, &cfg, &t, &err);
    }
    ck_assert_msg(rc == KL_OK, "start: %s", err.message);
    int fd = tcp_raw_connect_port(port);
    tcp_raw_send(fd, tcp_req_hello, sizeof tcp_req_hello);
    for (uint8_t i = 0; i < TD_CALLS; i++) {
        const uint8_t req[5] = {0x80, 0, 1, i, 'x'};
        tcp_raw_frame(fd, req, sizeof req);
    }
    for (int64_t t0 = mono_ms(); td.n < TD_CALLS && mono_ms() - t0 < 5000;)
        uv_run(&loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(td.n, TD_CALLS);
    uint8_t b[16];
    ck_assert(tcp_raw_read(fd, b, 8)); /* the hello */
    kl_rpc_tcp_stats before, after;
    kl_rpc_tcp_stats_get(t, &before);
    for (int i = TD_CALLS - 1; i >= 0; i--) {
        uint8_t *frame = malloc(8 + 4 + 1);
        ck_assert_ptr_nonnull(frame);
        frame[12] = (uint8_t)(100 + i);
        kl_rpc_tcp_answer(td.conn[i], td.hdr[i], 4, frame, 13);
    }
    kl_rpc_tcp_stats_get(t, &after);
    ck_assert_uint_eq(after.answer_writes, before.answer_writes); /* nothing written yet */
    uv_run(&loop, UV_RUN_NOWAIT);
    kl_rpc_tcp_stats_get(t, &after);
    ck_assert_uint_eq(after.answers - before.answers, TD_CALLS);
    ck_assert_uint_eq(after.answer_writes - before.answer_writes, 1);
    for (int k = 0; k < TD_CALLS; k++) {
        int i = TD_CALLS - 1 - k;
        ck_assert(tcp_raw_read(fd, b, 8 + 4 + 1));
        uint64_t len = 0;
        for (int j = 0; j < 8; j++)
            len = len << 8 | b[j];
        ck_assert_uint_eq(len, 5);
        ck_assert_mem_eq(b + 8, td.hdr[i], 4);
        ck_assert_uint_eq(b[12], 100 + i);
    }
    close(fd);
    kl_rpc_tcp_stop(t, NULL, NULL);
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

static void op_flag_done(void *arg) { atomic_store((atomic_bool *)arg, true); }

/* A call in flight when its client is closed ends as sent-but-unanswered, and its result
 * names the URL although the client is gone by the time its callback runs (ASan would
 * report the freed client's memory otherwise). */
START_TEST(test_op_outlives_its_client)
{
    fx_start(0);
    kl_rpc_client *c = fx_client();
    atomic_bool done = false;
    kl_rpc_op *op = NULL;
    kl_err err;
    ck_assert_int_eq(kl_rpc_op_new(op_flag_done, &done, &op, &err), KL_OK);
    ck_assert_int_eq(kl_rpc_op_start(op, c, "test.Never", (const uint8_t *)"x", 1, NULL, 5000, &err), KL_OK);
    for (int64_t t0 = mono_ms(); atomic_load(&fx.handled) < 1 && mono_ms() - t0 < 5000;)
        usleep(1000);
    ck_assert_int_eq(atomic_load(&fx.handled), 1);
    char url[KL_URL_MAX];
    snprintf(url, sizeof url, "tcp://127.0.0.1%s", strrchr(fx.url, ':'));
    kl_rpc_client_close(c);
    for (int64_t t0 = mono_ms(); !atomic_load(&done) && mono_ms() - t0 < 5000;)
        usleep(1000);
    ck_assert(atomic_load(&done));
    uint8_t *ans = NULL;
    size_t len = 0;
    ck_assert_int_eq(kl_rpc_op_result(op, &ans, &len, NULL, NULL, 0, &err), KL_DEADLINE_EXCEEDED);
    ck_assert_str_eq(err.detail, "no_answer");
    ck_assert_ptr_nonnull(strstr(err.message, url));
    kl_rpc_op_free(op);
    fx_stop();
}
END_TEST

/* Which URLs KeyLoad's own transports take (common/tcp_url.h); the rest go to nng. */
START_TEST(test_tcp_url_forms)
{
    struct sockaddr_storage ss;
    socklen_t len;
    ck_assert(kl_tcp_url_parse("tcp://127.0.0.1:7400", false, &ss, &len));
    ck_assert_int_eq(ss.ss_family, AF_INET);
    ck_assert_int_eq(ntohs(((struct sockaddr_in *)&ss)->sin_port), 7400);
    ck_assert(kl_tcp_url_parse("tcp://[::1]:7400", false, &ss, &len));
    ck_assert_int_eq(ss.ss_family, AF_INET6);
    ck_assert_uint_eq(len, sizeof(struct sockaddr_in6));
    ck_assert(kl_tcp_url_parse("tcp://*:7400", true, &ss, &len));
    ck_assert(kl_tcp_url_parse("tcp://:0", true, &ss, &len));
    ck_assert(!kl_tcp_url_parse("tcp://*:7400", false, &ss, &len)); /* a client names a peer */
    ck_assert(!kl_tcp_url_parse("tcp://127.0.0.1:0", false, &ss, &len));
    ck_assert(!kl_tcp_url_parse("tcp://localhost:7400", true, &ss, &len)); /* host names: nng */
    ck_assert(!kl_tcp_url_parse("ipc:///tmp/x", true, &ss, &len));
    ck_assert(!kl_tcp_url_parse("tcp://127.0.0.1:70000", true, &ss, &len));
    ck_assert(!kl_tcp_url_parse("tcp://127.0.0.1:", true, &ss, &len));
    ck_assert(!kl_tcp_url_parse("tcp://127.0.0.1:7x", true, &ss, &len));
    ck_assert(!kl_tcp_url_parse(NULL, true, &ss, &len));
}
END_TEST

Suite *suite_rpc(void)
{
    Suite *s = suite_create("rpc");
    TCase *tc = tcase_create("rpc");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_echo_round_trip);
    tcase_add_test(tc, test_unknown_method);
    tcase_add_test(tc, test_malformed_frame);
    tcase_add_test(tc, test_bad_version);
    tcase_add_test(tc, test_oversized_frame);
    tcase_add_test(tc, test_expired_deadline);
    tcase_add_test(tc, test_deferred_reply);
    tcase_add_test(tc, test_concurrent_calls);
    tcase_add_test(tc, test_client_timeout);
    tcase_add_test(tc, test_stop_with_call_in_flight);
    tcase_add_test(tc, test_connect_refused);
    tcase_add_test(tc, test_connect_timeout);
    tcase_add_test(tc, test_connect_timeout_dial_never_returns);
    tcase_add_test(tc, test_start_errors);
    tcase_add_test(tc, test_tcp_wire);
    tcase_add_test(tc, test_tcp_fair_resume);
    tcase_add_test(tc, test_direct_reconnects);
    tcase_add_test(tc, test_direct_cork_holds_then_writes_in_order);
    tcase_add_test(tc, test_direct_uncork_skips_closed_connection);
    tcase_add_test(tc, test_direct_requests_started_in_callbacks_are_written);
    tcase_add_test(tc, test_tcp_resume_not_nested);
    tcase_add_test(tc, test_tcp_answers_flushed_in_order);
    tcase_add_test(tc, test_tcp_url_forms);
    tcase_add_test(tc, test_op_outlives_its_client);
    suite_add_tcase(s, tc);
    TCase *nng = tcase_create("nng");
    tcase_set_timeout(nng, 30);
    tcase_add_checked_fixture(nng, fx_use_nng, NULL);
    tcase_add_test(nng, test_echo_round_trip);
    tcase_add_test(nng, test_unknown_method);
    tcase_add_test(nng, test_malformed_frame);
    tcase_add_test(nng, test_oversized_frame);
    tcase_add_test(nng, test_deferred_reply);
    tcase_add_test(nng, test_concurrent_calls);
    tcase_add_test(nng, test_stop_with_call_in_flight);
    suite_add_tcase(s, nng);
    TCase *nd = tcase_create("nng_server_direct_client");
    tcase_set_timeout(nd, 30);
    tcase_add_checked_fixture(nd, fx_use_nng_direct, fx_use_default);
    tcase_add_test(nd, test_echo_round_trip);
    tcase_add_test(nd, test_unknown_method);
    tcase_add_test(nd, test_client_timeout);
    tcase_add_test(nd, test_concurrent_calls);
    tcase_add_test(nd, test_stop_with_call_in_flight);
    suite_add_tcase(s, nd);
    return s;
}
