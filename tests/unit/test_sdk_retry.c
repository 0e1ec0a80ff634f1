/* The SDK's retry rule against a scripted member (a real kl_rpc_server on loopback): a
 * batch answered UNKNOWN_WRITE_OUTCOME (the leader changed after proposing it) is sent
 * again, byte for byte, while the client's timeout lasts; only when time runs out does the
 * caller see UNKNOWN_WRITE_OUTCOME. */
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
#include <unistd.h>
#include <uv.h>

typedef struct member {
    uv_loop_t loop;
    uv_async_t ctl;
    pthread_t thread;
    kl_rpc_server *srv;
    char url[64];
    int unknown_first;     /* answer this many Batch calls UNKNOWN_WRITE_OUTCOME */
    atomic_int calls;
    atomic_bool same_bytes; /* every call carried the first call's payload */
    uint8_t *first;         /* loop thread only */
    size_t first_len;
} member;

static member mb;

static void on_batch(void *owner, kl_rpc_call *call)
{
    member *m = owner;
    size_t len;
    const uint8_t *p = kl_rpc_call_payload(call, &len);
    int n = atomic_fetch_add(&m->calls, 1);
    if (n == 0) {
        m->first = malloc(len ? len : 1);
        memcpy(m->first, p, len);
        m->first_len = len;
    } else if (len != m->first_len || memcmp(p, m->first, len) != 0) {
        atomic_store(&m->same_bytes, false);
    }
    kl_err e;
    if (n < m->unknown_first) {
        kl_fail(&e, KL_UNKNOWN_WRITE_OUTCOME, "leader_changed", "leadership changed before the batch committed");
        kl_rpc_reply_error(call, &e, NULL);
        return;
    }
    Keyload__V1__BatchRequest *b = keyload__v1__batch_request__unpack(NULL, len, p);
    Keyload__V1__BatchReceipt r = KEYLOAD__V1__BATCH_RECEIPT__INIT;
    r.command_id = b->command_id;
    r.index = 7;
    uint8_t buf[256];
    size_t n_out = keyload__v1__batch_receipt__pack(&r, buf);
    keyload__v1__batch_request__free_unpacked(b, NULL);
    kl_rpc_reply(call, buf, n_out);
}

static const kl_rpc_method methods[] = {{"keyload.v1.Batch", on_batch}};

static void on_ctl(uv_async_t *h)
{
    member *m = h->data;
    kl_rpc_server_stop(m->srv);
    uv_close((uv_handle_t *)&m->ctl, NULL);
}

static void *loop_main(void *arg)
{
    uv_run(&((member *)arg)->loop, UV_RUN_DEFAULT);
    return NULL;
}

static void member_start(int unknown_first)
{
    memset(&mb, 0, sizeof mb);
    mb.unknown_first = unknown_first;
    atomic_store(&mb.same_bytes, true);
    ck_assert_int_eq(uv_loop_init(&mb.loop), 0);
    ck_assert_int_eq(uv_async_init(&mb.loop, &mb.ctl, on_ctl), 0);
    mb.ctl.data = &mb;
    snprintf(mb.url, sizeof mb.url, "tcp://127.0.0.1:%d", th_free_port());
    kl_rpc_server_config cfg = {.listen_url = mb.url, .methods = methods, .method_count = 1,
                                .owner = &mb, .max_frame = 1 << 20};
    kl_err err;
    ck_assert_msg(kl_rpc_server_start(&mb.loop, &cfg, &mb.srv, &err) == KL_OK, "%s", err.message);
    ck_assert_int_eq(pthread_create(&mb.thread, NULL, loop_main, &mb), 0);
}

static void member_stop(void)
{
    ck_assert_int_eq(uv_async_send(&mb.ctl), 0);
    ck_assert_int_eq(pthread_join(mb.thread, NULL), 0);
    ck_assert_int_eq(uv_loop_close(&mb.loop), 0);
    free(mb.first);
}

/* A one-member cluster file naming the scripted member. */
static void cluster_file(char *path, size_t cap, char *dir)
{
    th_tmpdir(dir, 256);
    snprintf(path, cap, "%s/cluster.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "{\"cluster\":\"sdk\",\"replica_count\":1,\"insecure_local_admin\":true,\"partitions\":[{\"id\":0,\"members\":"
               "[{\"id\":1,\"client\":\"%s\"}]}]}\n", mb.url);
    fclose(f);
}

static kl_code send_one(int timeout_ms, kl_err *err)
{
    char dir[256], path[512];
    cluster_file(path, sizeof path, dir);
    kl_client *c;
    ck_assert_int_eq(kl_client_open(path, "t/d", timeout_ms, &c, err), KL_OK);
    kl_batch *b;
    kl_message *m;
    ck_assert_int_eq(kl_batch_new(NULL, &b, err), KL_OK);
    ck_assert_int_eq(kl_message_new("x", 1, &m, err), KL_OK);
    ck_assert_int_eq(kl_batch_enqueue(b, "q", NULL, m, err), KL_OK);
    kl_receipt *r = NULL;
    kl_code rc = kl_client_batch(c, b, &r, err);
    if (rc == KL_OK)
        ck_assert_uint_eq(r->decoded->index, 7);
    kl_receipt_free(r);
    kl_message_free(m);
    kl_batch_free(b);
    kl_client_close(c);
    th_rmrf(dir);
    return rc;
}

START_TEST(unknown_outcome_is_retried_with_the_same_bytes)
{
    member_start(2);
    kl_err err;
    kl_code rc = send_one(5000, &err);
    ck_assert_msg(rc == KL_OK, "%s %s", kl_code_name(rc), err.message);
    ck_assert_int_eq(atomic_load(&mb.calls), 3);
    ck_assert(atomic_load(&mb.same_bytes));
    member_stop();
}
END_TEST

START_TEST(unknown_outcome_when_time_runs_out)
{
    member_start(1 << 30);
    kl_err err;
    kl_code rc = send_one(700, &err);
    ck_assert_int_eq(rc, KL_UNKNOWN_WRITE_OUTCOME);
    ck_assert_str_eq(err.detail, "leader_changed");
    ck_assert_int_ge(atomic_load(&mb.calls), 2);
    ck_assert(atomic_load(&mb.same_bytes));
    member_stop();
}
END_TEST

Suite *suite_sdk_retry(void)
{
    Suite *s = suite_create("sdk_retry");
    TCase *t = tcase_create("sdk_retry");
    tcase_set_timeout(t, 30);
    tcase_add_test(t, unknown_outcome_is_retried_with_the_same_bytes);
    tcase_add_test(t, unknown_outcome_when_time_runs_out);
    suite_add_tcase(s, t);
    return s;
}
