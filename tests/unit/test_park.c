/* Long-poll receive on the partition core (daemon/park.h) against a real RocksDB: an idle
 * Receive commits nothing, a waiting one parks and wakes on the apply that makes a message
 * available, on a lease's end or at its wait's end; retries join it; leadership loss, the
 * cap and closing answer it. Plus the pure parts of the park table. */
#include "client/sdk/internal.h"
#include "daemon/engine/engine.h"
#include "daemon/park.h"
#include "daemon/store/keys.h"
#include "harness.h"

#include "common/canon.h"

#include <check.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

static th_node T;
static char dir[256];

static void setup(void)
{
    th_tmpdir(dir, sizeof dir);
    th_open(&T, dir, NULL);
    th_batch *b = th_batch_new(0x01);
    th_create(b, "orders", 0, 0, 0, NULL);
    keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
}

static void teardown(void)
{
    th_close(&T);
    th_rmrf(dir);
}

static void submit(th_batch *b, th_reply *r)
{
    size_t len;
    uint8_t *req = th_batch_pack(b, &len);
    th_submit(&T, req, len, r);
    free(req);
}

static void enqueue(uint8_t cmd, const char *body)
{
    th_batch *b = th_batch_new(cmd);
    th_enqueue(b, "orders", NULL, body);
    keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
}

/* The messages of an OK reply's receipt, and its index. */
static size_t received(const th_reply *r, uint64_t *index)
{
    ck_assert_int_eq(r->code, KL_OK);
    Keyload__V1__BatchReceipt *rc = keyload__v1__batch_receipt__unpack(NULL, r->len, r->receipt);
    ck_assert_ptr_nonnull(rc);
    ck_assert_uint_eq(rc->n_results, 1);
    size_t n = rc->results[0]->received->n_messages;
    *index = rc->index;
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    return n;
}

START_TEST(idle_receives_commit_nothing)
{
    uint64_t applied = kl_node_applied_index(T.node), index;
    for (uint8_t i = 0; i < 3; i++) {
        th_batch *b = th_batch_new((uint8_t)(0x20 + i));
        th_receive(b, "orders", NULL, 10, 1000);
        th_reply r = {0};
        submit(b, &r);
        ck_assert_int_eq(r.count, 1);
        ck_assert_uint_eq(received(&r, &index), 0);
        ck_assert_uint_eq(index, 0); /* not committed anywhere */
        th_reply_free(&r);
    }
    ck_assert_uint_eq(kl_node_applied_index(T.node), applied);
    /* Nothing stored under the command id: once a message is there, the same request
     * leases it (the replay promise holds per committed command id). */
    enqueue(0x30, "late");
    th_batch *b = th_batch_new(0x20);
    th_receive(b, "orders", NULL, 10, 1000);
    th_reply r = {0};
    submit(b, &r);
    ck_assert_uint_eq(received(&r, &index), 1);
    ck_assert_uint_gt(index, applied);
    th_reply_free(&r);
}
END_TEST

START_TEST(receive_with_other_mutations_commits_as_before)
{
    uint64_t applied = kl_node_applied_index(T.node), index;
    th_batch *b = th_batch_new(0x21);
    th_receive(b, "orders", NULL, 1, 1000);
    th_enqueue(b, "orders", NULL, "x");
    th_reply r = {0};
    submit(b, &r);
    ck_assert_int_eq(r.code, KL_OK);
    Keyload__V1__BatchReceipt *rc = keyload__v1__batch_receipt__unpack(NULL, r.len, r.receipt);
    index = rc->index;
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    ck_assert_uint_eq(index, applied + 1);
    th_reply_free(&r);
}
END_TEST

START_TEST(wait_ms_over_the_maximum_is_refused)
{
    th_batch *b = th_batch_new(0x22);
    th_receive_wait(b, "orders", 1, 1000, KL_RECEIVE_WAIT_MS_MAX + 1);
    kl_err err;
    th_run_err(&T, b, KL_INVALID_ARGUMENT, &err);
    ck_assert_str_eq(err.detail, "wait_ms");
}
END_TEST

START_TEST(parked_receive_wakes_on_enqueue)
{
    th_batch *b = th_batch_new(0x40);
    th_receive_wait(b, "orders", 5, 1000, 10000);
    th_reply r = {0};
    submit(b, &r);
    ck_assert_int_eq(r.count, 0);
    ck_assert_uint_eq(kl_node_parked(T.node), 1);
    T.now += 100;
    kl_node_park_tick(T.node); /* nothing arrived: still parked, nothing proposed */
    ck_assert_int_eq(r.count, 0);
    ck_assert_uint_eq(T.n_props, 0);
    ck_assert(!kl_node_park_due(T.node));
    enqueue(0x41, "hello");
    ck_assert(kl_node_park_due(T.node));
    kl_node_park_tick(T.node);
    th_drain(&T);
    ck_assert_int_eq(r.count, 1);
    uint64_t index;
    ck_assert_uint_eq(received(&r, &index), 1);
    ck_assert_uint_gt(index, 0);
    ck_assert_uint_eq(kl_node_parked(T.node), 0);
    th_reply_free(&r);
}
END_TEST

START_TEST(a_retry_joins_the_parked_request)
{
    th_batch *b = th_batch_new(0x42);
    th_receive_wait(b, "orders", 1, 1000, 10000);
    th_reply first = {0}, retry = {0}, other = {0};
    submit(b, &first);
    b = th_batch_new(0x42);
    th_receive_wait(b, "orders", 1, 1000, 3000); /* the wait is not part of the request */
    submit(b, &retry);
    ck_assert_int_eq(retry.count, 0);
    ck_assert_uint_eq(kl_node_parked(T.node), 1);
    b = th_batch_new(0x42);
    th_receive_wait(b, "orders", 2, 1000, 10000); /* other content, same command id */
    submit(b, &other);
    ck_assert_int_eq(other.count, 1);
    ck_assert_int_eq(other.code, KL_CONFLICT);
    ck_assert_str_eq(other.err.detail, "command_id_reused");
    enqueue(0x43, "one");
    kl_node_park_tick(T.node);
    th_drain(&T);
    ck_assert_int_eq(first.count, 1);
    ck_assert_int_eq(retry.count, 1);
    ck_assert_uint_eq(first.len, retry.len);
    ck_assert_mem_eq(first.receipt, retry.receipt, first.len);
    uint64_t index;
    ck_assert_uint_eq(received(&first, &index), 1);
    th_reply_free(&first);
    th_reply_free(&retry);
    th_reply_free(&other);
}
END_TEST

START_TEST(wait_ends_with_an_empty_answer_and_no_entry)
{
    uint64_t applied = kl_node_applied_index(T.node), index;
    th_batch *b = th_batch_new(0x44);
    th_receive_wait(b, "orders", 1, 1000, 2000);
    th_reply r = {0};
    submit(b, &r);
    T.now += 1999;
    kl_node_park_tick(T.node);
    ck_assert_int_eq(r.count, 0);
    T.now += 1;
    kl_node_park_tick(T.node);
    ck_assert_int_eq(r.count, 1);
    ck_assert_uint_eq(received(&r, &index), 0);
    ck_assert_uint_eq(index, 0);
    ck_assert_uint_eq(kl_node_applied_index(T.node), applied);
    ck_assert_uint_eq(T.n_props, 0);
    th_reply_free(&r);
}
END_TEST

START_TEST(wait_is_bounded_by_the_callers_deadline)
{
    th_batch *b = th_batch_new(0x45);
    th_receive_wait(b, "orders", 1, 1000, 10000);
    size_t len;
    uint8_t *req = th_batch_pack(b, &len);
    th_reply r = {0};
    kl_node_submit_batch_wait(T.node, "local", req, len, 500, th_reply_fn(), &r);
    free(req);
    ck_assert_int_eq(r.count, 0);
    T.now += 500;
    kl_node_park_tick(T.node);
    ck_assert_int_eq(r.count, 1);
    ck_assert_int_eq(r.code, KL_OK);
    th_reply_free(&r);
}
END_TEST

START_TEST(lease_expiry_wakes_a_parked_receive)
{
    enqueue(0x46, "m");
    th_batch *b = th_batch_new(0x47);
    th_receive(b, "orders", NULL, 1, 1000);
    keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
    b = th_batch_new(0x48);
    th_receive_wait(b, "orders", 1, 1000, 10000);
    th_reply r = {0};
    submit(b, &r);
    ck_assert_int_eq(r.count, 0);
    T.now += 999;
    ck_assert(!kl_node_park_due(T.node));
    T.now += 1;
    ck_assert(kl_node_park_due(T.node));
    kl_node_park_tick(T.node);
    th_drain(&T);
    uint64_t index;
    ck_assert_uint_eq(received(&r, &index), 1);
    th_reply_free(&r);
}
END_TEST

START_TEST(leadership_loss_answers_not_leader)
{
    th_batch *b = th_batch_new(0x49);
    th_receive_wait(b, "orders", 1, 1000, 10000);
    th_reply r = {0};
    submit(b, &r);
    ck_assert_int_eq(r.count, 0);
    kl_node_role(T.node, false);
    ck_assert_int_eq(r.count, 1);
    ck_assert_int_eq(r.code, KL_NOT_LEADER);
    ck_assert_str_eq(r.err.detail, "leader_changed");
    ck_assert_uint_eq(kl_node_parked(T.node), 0);
    th_reply_free(&r);
}
END_TEST

START_TEST(closing_answers_unavailable)
{
    th_batch *b = th_batch_new(0x4a);
    th_receive_wait(b, "orders", 1, 1000, 10000);
    th_reply r = {0};
    submit(b, &r);
    th_close(&T);
    ck_assert_int_eq(r.count, 1);
    ck_assert_int_eq(r.code, KL_UNAVAILABLE);
    ck_assert_str_eq(r.err.detail, "shutdown");
    th_reply_free(&r);
    th_reopen(&T);
}
END_TEST

START_TEST(parked_requests_are_capped)
{
    th_reply r[KL_PARK_MAX + 1];
    memset(r, 0, sizeof r);
    for (int i = 0; i <= KL_PARK_MAX; i++) {
        th_batch *b = th_batch_new((uint8_t)(0x80 + i));
        th_receive_wait(b, "orders", 1, 1000, 10000);
        submit(b, &r[i]);
    }
    for (int i = 0; i < KL_PARK_MAX; i++)
        ck_assert_int_eq(r[i].count, 0);
    ck_assert_int_eq(r[KL_PARK_MAX].count, 1);
    ck_assert_int_eq(r[KL_PARK_MAX].code, KL_RESOURCE_EXHAUSTED);
    ck_assert_str_eq(r[KL_PARK_MAX].err.detail, "parked_receives");
    ck_assert_ptr_nonnull(strstr(r[KL_PARK_MAX].err.message, "48"));
    kl_node_role(T.node, false);
    for (int i = 0; i <= KL_PARK_MAX; i++) {
        ck_assert_int_eq(r[i].count, 1);
        th_reply_free(&r[i]);
    }
}
END_TEST

START_TEST(sdk_receive_wait_is_bounded_and_sets_the_calls_wait)
{
    kl_batch *b;
    kl_err err;
    ck_assert_int_eq(kl_batch_new(NULL, &b, &err), KL_OK);
    ck_assert_int_eq(kl_batch_receive_wait(b, "q", NULL, 1, 0, KL_RECEIVE_WAIT_MS_MAX + 1, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "wait_ms");
    ck_assert_uint_eq(kl_batch_count(b), 0);
    ck_assert_int_eq(kl_batch_receive(b, "q", NULL, 1, 0, &err), KL_OK);
    ck_assert_uint_eq(kl_sdk_batch_wait_ms(b), 0);
    ck_assert_int_eq(kl_batch_receive_wait(b, "q", "eu", 1, 0, 2500, &err), KL_OK);
    ck_assert_uint_eq(kl_sdk_batch_wait_ms(b), 2500);
    kl_batch_free(b);
}
END_TEST

/* ---- as principals: a woken request is authorized again ---- */

#define PUB KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH
#define CONSUME KEYLOAD__V1__PERMISSION__QUEUE_CONSUME

static void setup_sessions(void)
{
    th_tmpdir(dir, sizeof dir);
    th_open(&T, dir, NULL);
    T.require_sessions = true;
    th_close(&T);
    th_reopen(&T);
    T.reader = "root";
}

static void run_as(const char *who, th_batch *b)
{
    T.principal = who;
    keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
}

START_TEST(a_woken_receive_is_authorized_again)
{
    uint8_t pk[32], sk[64], proof[32];
    crypto_sign_keypair(pk, sk);
    ck_assert_int_eq(kl_canon_bootstrap_proof(th_cluster_secret, "default", "boot", "root", pk, 32, proof), 0);
    th_batch *b = th_batch_new(0xB0);
    th_bootstrap(b, "default", "boot", "root", pk, proof);
    run_as(NULL, b);
    b = th_batch_new(0xB1);
    th_create(b, "q", 0, 0, 0, NULL);
    run_as("root", b);
    crypto_sign_keypair(pk, sk);
    b = th_batch_new(0xB4);
    th_create_principal(b, "alice", pk, false, NULL);
    run_as("root", b);
    b = th_batch_new(0xB5);
    th_grant(b, "alice", CONSUME, "q", "*", "*");
    run_as("root", b);
    b = th_batch_new(0xB6);
    th_grant(b, "root", PUB, "q", "*", "*");
    run_as("root", b);
    b = th_batch_new(0xB2);
    th_receive_wait(b, "q", 1, 1000, 10000);
    T.principal = "alice";
    th_reply r = {0};
    submit(b, &r);
    ck_assert_int_eq(r.count, 0); /* alice may consume: it waits */
    b = th_batch_new(0xB3);
    th_revoke(b, "alice", CONSUME, "q");
    run_as("root", b);
    ck_assert_int_eq(r.count, 0); /* a catalog change wakes nothing */
    b = th_batch_new(0xB7);
    th_enqueue(b, "q", NULL, "secret");
    run_as("root", b);
    kl_node_park_tick(T.node);
    th_drain(&T);
    ck_assert_int_eq(r.count, 1);
    ck_assert_int_eq(r.code, KL_PERMISSION_DENIED);
    uint64_t in_flight;
    ck_assert_uint_eq(th_queue_messages(&T, "q", &in_flight), 1);
    ck_assert_uint_eq(in_flight, 0); /* nothing was leased to alice */
    th_reply_free(&r);
}
END_TEST

/* ---- the table alone ---- */

static kl_parked *parked(uint8_t cmd, uint64_t qid)
{
    uint8_t id[16] = {cmd}, digest[KL_DIGEST_LEN] = {0};
    kl_parked *p = kl_parked_new("alice", id, digest, (const uint8_t *)"x", 1);
    ck_assert_ptr_nonnull(p);
    p->qids[0] = qid;
    p->n_qids = 1;
    p->until_ms = 1000;
    p->due_ms = INT64_MAX;
    return p;
}

START_TEST(table_wakes_only_watchers_of_the_changed_queue)
{
    kl_park k = {0};
    kl_err err;
    ck_assert_int_eq(kl_park_insert(&k, parked(1, 7), &err), KL_OK);
    ck_assert_int_eq(kl_park_insert(&k, parked(2, 8), &err), KL_OK);
    kl_key key;
    kl_key_message(&key, 8, "default", 3); /* a message record: not a wake-up */
    kl_park_note_key(&k, key.b, key.len);
    ck_assert(!kl_park_any_due(&k, 0));
    kl_key_available(&key, 8, "default", 3);
    kl_park_note_key(&k, key.b, key.len);
    ck_assert(kl_park_any_due(&k, 0));
    kl_parked *p = kl_park_take_due(&k, 0);
    ck_assert_uint_eq(p->command_id[0], 2);
    kl_parked_free(p);
    ck_assert_ptr_null(kl_park_take_due(&k, 0));
    kl_key_timed(&key, 7, 500, 1);
    kl_park_note_key(&k, key.b, key.len);
    p = kl_park_take_due(&k, 0);
    ck_assert_uint_eq(p->command_id[0], 1);
    kl_parked_free(p);
    ck_assert_uint_eq(k.n, 0);
}
END_TEST

START_TEST(table_due_by_time_and_find)
{
    kl_park k = {0};
    kl_err err;
    kl_parked *a = parked(1, 7);
    a->due_ms = 300;
    ck_assert_int_eq(kl_park_insert(&k, a, &err), KL_OK);
    uint8_t id[16] = {1}, other[16] = {9};
    ck_assert_ptr_eq(kl_park_find(&k, "alice", id), a);
    ck_assert_ptr_null(kl_park_find(&k, "bob", id));
    ck_assert_ptr_null(kl_park_find(&k, "alice", other));
    ck_assert(!kl_park_any_due(&k, 299));
    ck_assert(kl_park_any_due(&k, 300));
    a->due_ms = INT64_MAX;
    ck_assert(kl_park_any_due(&k, 1000)); /* until_ms */
    for (int i = 1; i < KL_PARK_MAX; i++)
        ck_assert_int_eq(kl_park_insert(&k, parked((uint8_t)(i + 1), 7), &err), KL_OK);
    kl_parked *extra = parked(200, 7);
    ck_assert_int_eq(kl_park_insert(&k, extra, &err), KL_RESOURCE_EXHAUSTED);
    ck_assert_str_eq(err.detail, "parked_receives");
    kl_parked_free(extra);
    kl_parked *p;
    while ((p = kl_park_take_any(&k)) != NULL)
        kl_parked_free(p);
}
END_TEST

Suite *suite_park(void)
{
    Suite *s = suite_create("park");
    TCase *t = tcase_create("node");
    tcase_set_timeout(t, 60);
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, idle_receives_commit_nothing);
    tcase_add_test(t, receive_with_other_mutations_commits_as_before);
    tcase_add_test(t, wait_ms_over_the_maximum_is_refused);
    tcase_add_test(t, parked_receive_wakes_on_enqueue);
    tcase_add_test(t, a_retry_joins_the_parked_request);
    tcase_add_test(t, wait_ends_with_an_empty_answer_and_no_entry);
    tcase_add_test(t, wait_is_bounded_by_the_callers_deadline);
    tcase_add_test(t, lease_expiry_wakes_a_parked_receive);
    tcase_add_test(t, leadership_loss_answers_not_leader);
    tcase_add_test(t, closing_answers_unavailable);
    tcase_add_test(t, parked_requests_are_capped);
    suite_add_tcase(s, t);
    TCase *a = tcase_create("principals");
    tcase_set_timeout(a, 60);
    tcase_add_checked_fixture(a, setup_sessions, teardown);
    tcase_add_test(a, a_woken_receive_is_authorized_again);
    suite_add_tcase(s, a);
    TCase *k = tcase_create("table");
    tcase_add_test(k, table_wakes_only_watchers_of_the_changed_queue);
    tcase_add_test(k, table_due_by_time_and_find);
    tcase_add_test(k, sdk_receive_wait_is_bounded_and_sets_the_calls_wait);
    suite_add_tcase(s, k);
    return s;
}
