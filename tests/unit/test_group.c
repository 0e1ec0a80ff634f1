/* Grouped entries: batches evaluated before kl_node_flush share one LogEntry (one write-set
 * each, in submit order, within a count and a byte bound), each keeps its own outcome and
 * receipt, a refused proposal answers the whole group and leaves the pending overlay exact,
 * and every command id replays after a restart. Real RocksDB; the log is the harness's. */
#include "harness.h"
#include "keyload/v1/store.pb-c.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static th_node T;
static char dir[256];

static void open_grouped(const kl_limits *limits)
{
    th_tmpdir(dir, sizeof dir);
    th_open(&T, dir, limits);
    th_batch *b = th_batch_new(0x01);
    th_create(b, "orders", 0, 0, 0, NULL);
    Keyload__V1__BatchReceipt *r = th_run(&T, b, KL_OK);
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
    /* From here on batches wait in the group until the test flushes it. */
    T.group = true;
    T.auto_persist = false;
    kl_node_close(T.node);
    kl_store_close(T.store);
    th_reopen(&T);
}

static void setup(void) { open_grouped(NULL); }

static void teardown(void)
{
    th_close(&T);
    th_rmrf(dir);
}

static void submit_enqueue(uint8_t cmd, const char *body, th_reply *r)
{
    th_batch *b = th_batch_new(cmd);
    th_enqueue(b, "orders", NULL, body);
    size_t len;
    uint8_t *req = th_batch_pack(b, &len);
    th_submit(&T, req, len, r);
    free(req);
}

static Keyload__V1__LogEntry *prop_entry(size_t i)
{
    ck_assert_uint_gt(T.n_props, i);
    Keyload__V1__LogEntry *e = keyload__v1__log_entry__unpack(NULL, T.props[i].len, T.props[i].bytes);
    ck_assert_ptr_nonnull(e);
    return e;
}

static Keyload__V1__BatchReceipt *receipt_of(const th_reply *r)
{
    ck_assert_int_eq(r->count, 1);
    ck_assert_msg(r->code == KL_OK, "%s: %s", kl_code_name(r->code), r->err.message);
    Keyload__V1__BatchReceipt *rc = keyload__v1__batch_receipt__unpack(NULL, r->len, r->receipt);
    ck_assert_ptr_nonnull(rc);
    return rc;
}

START_TEST(test_batches_share_one_entry)
{
    th_reply r[5] = {{0}};
    for (int i = 0; i < 5; i++)
        submit_enqueue((uint8_t)(0x10 + i), "m", &r[i]);
    ck_assert_uint_eq(T.n_props, 0); /* nothing proposed before the flush */
    ck_assert_int_eq(T.flush_asked, 1); /* asked once, when the group opened */
    kl_node_flush(T.node);
    ck_assert_uint_eq(T.n_props, 1);
    Keyload__V1__LogEntry *e = prop_entry(0);
    uint64_t index = T.props[0].index;
    ck_assert_uint_eq(e->n_write_sets, 5);
    for (int i = 0; i < 5; i++) {
        ck_assert_uint_eq(e->write_sets[i]->command_id.len, 16);
        ck_assert_uint_eq(e->write_sets[i]->command_id.data[0], 0x10 + i); /* submit order */
        ck_assert_int_eq(r[i].count, 0);
    }
    keyload__v1__log_entry__free_unpacked(e, NULL);
    kl_node_costs c0, c1;
    kl_node_costs_get(T.node, &c0);
    th_drain(&T);
    kl_node_costs_get(T.node, &c1);
    ck_assert_uint_eq(c1.own_entries_applied, c0.own_entries_applied + 1); /* not decoded */
    ck_assert_uint_eq(c1.apply_decode_ns, c0.apply_decode_ns);
    for (int i = 0; i < 5; i++) {
        Keyload__V1__BatchReceipt *rc = receipt_of(&r[i]);
        ck_assert_uint_eq(rc->index, index); /* the grouped entry's index */
        ck_assert_uint_eq(rc->command_id.data[0], 0x10 + i);
        ck_assert_uint_eq(rc->results[0]->enqueued->message_id, (uint64_t)i + 1); /* in order */
        keyload__v1__batch_receipt__free_unpacked(rc, NULL);
        th_reply_free(&r[i]);
    }
    ck_assert_uint_eq(th_queue_messages(&T, "orders", NULL), 5);
}
END_TEST

START_TEST(test_count_bound)
{
    enum { N = 64 + 3 };
    th_reply r[N];
    memset(r, 0, sizeof r);
    for (int i = 0; i < N; i++)
        submit_enqueue((uint8_t)(0x10 + i), "m", &r[i]);
    ck_assert_uint_eq(T.n_props, 1); /* the 65th batch closed the first group */
    kl_node_flush(T.node);
    ck_assert_uint_eq(T.n_props, 2);
    Keyload__V1__LogEntry *a = prop_entry(0), *b = prop_entry(1);
    ck_assert_uint_eq(a->n_write_sets, 64);
    ck_assert_uint_eq(b->n_write_sets, 3);
    ck_assert_uint_eq(b->index, a->index + 1);
    keyload__v1__log_entry__free_unpacked(a, NULL);
    keyload__v1__log_entry__free_unpacked(b, NULL);
    th_drain(&T);
    for (int i = 0; i < N; i++) {
        Keyload__V1__BatchReceipt *rc = receipt_of(&r[i]);
        ck_assert_uint_eq(rc->index, T.next_index - (i < 64 ? 2 : 1));
        keyload__v1__batch_receipt__free_unpacked(rc, NULL);
        th_reply_free(&r[i]);
    }
    ck_assert_uint_eq(th_queue_messages(&T, "orders", NULL), N);
}
END_TEST

START_TEST(test_byte_bound)
{
    th_close(&T);
    th_rmrf(dir);
    kl_limits l;
    kl_limits_default(&l);
    l.max_frame_bytes = 8192; /* the group's byte bound follows the frame limit down */
    open_grouped(&l);
    char body[1501];
    memset(body, 'x', sizeof body - 1);
    body[sizeof body - 1] = '\0';
    enum { N = 20 };
    th_reply r[N];
    memset(r, 0, sizeof r);
    for (int i = 0; i < N; i++)
        submit_enqueue((uint8_t)(0x10 + i), body, &r[i]);
    kl_node_flush(T.node);
    ck_assert_uint_gt(T.n_props, 2);
    ck_assert_uint_lt(T.n_props, N);
    size_t sets = 0;
    for (size_t p = 0; p < T.n_props; p++) {
        Keyload__V1__LogEntry *e = prop_entry(p);
        size_t ws_bytes = 0;
        for (size_t i = 0; i < e->n_write_sets; i++)
            ws_bytes += keyload__v1__write_set__get_packed_size(e->write_sets[i]) + 3; /* tag, 2-byte length */
        ck_assert_uint_le(ws_bytes, 8192);
        ck_assert_uint_gt(e->n_write_sets, 1);
        sets += e->n_write_sets;
        keyload__v1__log_entry__free_unpacked(e, NULL);
    }
    ck_assert_uint_eq(sets, N);
    th_drain(&T);
    for (int i = 0; i < N; i++) {
        Keyload__V1__BatchReceipt *rc = receipt_of(&r[i]);
        ck_assert_uint_eq(rc->results[0]->enqueued->message_id, (uint64_t)i + 1);
        keyload__v1__batch_receipt__free_unpacked(rc, NULL);
        th_reply_free(&r[i]);
    }
}
END_TEST

START_TEST(test_mixed_refused_and_ok)
{
    th_reply ok1 = {0}, bad = {0}, ok2 = {0}, again = {0};
    submit_enqueue(0x10, "a", &ok1);
    th_batch *b = th_batch_new(0x11);
    th_enqueue(b, "nosuchqueue", NULL, "x");
    size_t len;
    uint8_t *req = th_batch_pack(b, &len);
    th_submit(&T, req, len, &bad);
    free(req);
    ck_assert_int_eq(bad.count, 1); /* refused at evaluation: answered at once, not grouped */
    ck_assert_int_eq(bad.code, KL_NOT_FOUND);
    submit_enqueue(0x12, "b", &ok2);
    submit_enqueue(0x10, "a", &again); /* a retry joins its pending batch */
    kl_node_flush(T.node);
    ck_assert_uint_eq(T.n_props, 1);
    Keyload__V1__LogEntry *e = prop_entry(0);
    ck_assert_uint_eq(e->n_write_sets, 2);
    keyload__v1__log_entry__free_unpacked(e, NULL);
    th_drain(&T);
    ck_assert_int_eq(again.count, 1);
    ck_assert_uint_eq(again.len, ok1.len);
    ck_assert_mem_eq(again.receipt, ok1.receipt, ok1.len);
    Keyload__V1__BatchReceipt *r2 = receipt_of(&ok2);
    ck_assert_uint_eq(r2->results[0]->enqueued->message_id, 2);
    keyload__v1__batch_receipt__free_unpacked(r2, NULL);
    ck_assert_uint_eq(th_queue_messages(&T, "orders", NULL), 2);
    th_reply_free(&ok1);
    th_reply_free(&bad);
    th_reply_free(&ok2);
    th_reply_free(&again);
}
END_TEST

START_TEST(test_refused_proposal_answers_group)
{
    th_reply a = {0}, b = {0}, c = {0}, d = {0}, b2 = {0};
    submit_enqueue(0x10, "a", &a);
    kl_node_flush(T.node); /* a is proposed, pending */
    submit_enqueue(0x11, "b", &b);
    submit_enqueue(0x12, "c", &c);
    T.propose_code = KL_NOT_LEADER;
    kl_node_flush(T.node);
    ck_assert_int_eq(b.count, 1);
    ck_assert_int_eq(b.code, KL_NOT_LEADER);
    ck_assert_int_eq(c.count, 1);
    ck_assert_int_eq(c.code, KL_NOT_LEADER);
    ck_assert_int_eq(a.count, 0); /* still pending in its own entry */
    ck_assert_uint_eq(kl_node_pending_batches(T.node), 1);
    T.propose_code = KL_OK;
    /* The overlay holds a's writes again, not b's or c's: d is the queue's second message. */
    submit_enqueue(0x13, "d", &d);
    submit_enqueue(0x11, "b", &b2); /* b's command id is free: nothing of it was written */
    kl_node_flush(T.node);
    th_drain(&T);
    Keyload__V1__BatchReceipt *rd = receipt_of(&d), *rb = receipt_of(&b2);
    ck_assert_uint_eq(rd->results[0]->enqueued->message_id, 2);
    ck_assert_uint_eq(rb->results[0]->enqueued->message_id, 3);
    keyload__v1__batch_receipt__free_unpacked(rd, NULL);
    keyload__v1__batch_receipt__free_unpacked(rb, NULL);
    ck_assert_int_eq(a.count, 1);
    ck_assert_int_eq(a.code, KL_OK);
    ck_assert_uint_eq(th_queue_messages(&T, "orders", NULL), 3);
    th_reply_free(&a);
    th_reply_free(&b);
    th_reply_free(&c);
    th_reply_free(&d);
    th_reply_free(&b2);
}
END_TEST

START_TEST(test_replay_each_after_restart)
{
    th_reply r[3] = {{0}};
    for (int i = 0; i < 3; i++)
        submit_enqueue((uint8_t)(0x20 + i), "m", &r[i]);
    kl_node_flush(T.node);
    th_drain(&T);
    th_close(&T);
    th_reopen(&T); /* the store reopened from disk */
    for (int i = 0; i < 3; i++) {
        th_reply again = {0};
        submit_enqueue((uint8_t)(0x20 + i), "m", &again);
        ck_assert_int_eq(again.count, 1); /* answered from the stored outcome */
        ck_assert_int_eq(again.code, KL_OK);
        ck_assert_uint_eq(again.len, r[i].len);
        ck_assert_mem_eq(again.receipt, r[i].receipt, r[i].len);
        th_reply_free(&again);
        th_reply_free(&r[i]);
    }
    kl_node_flush(T.node);
    ck_assert_uint_eq(T.n_props, 0);
    ck_assert_uint_eq(th_queue_messages(&T, "orders", NULL), 3);
}
END_TEST

START_TEST(test_follower_applies_grouped_entry)
{
    /* The stored entry decodes and applies on a member that did not build it. */
    th_reply r[3] = {{0}};
    for (int i = 0; i < 3; i++)
        submit_enqueue((uint8_t)(0x30 + i), "m", &r[i]);
    kl_node_flush(T.node);
    th_persist_only(&T); /* durable, not applied: the restart re-applies it by decoding */
    th_close(&T);
    th_reopen(&T);
    ck_assert_uint_eq(th_queue_messages(&T, "orders", NULL), 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(r[i].code, KL_UNKNOWN_WRITE_OUTCOME); /* the shutdown answered them */
        th_reply again = {0};
        submit_enqueue((uint8_t)(0x30 + i), "m", &again);
        Keyload__V1__BatchReceipt *rc = receipt_of(&again);
        ck_assert_uint_eq(rc->results[0]->enqueued->message_id, (uint64_t)i + 1);
        keyload__v1__batch_receipt__free_unpacked(rc, NULL);
        th_reply_free(&again);
        th_reply_free(&r[i]);
    }
}
END_TEST

/* A retry's answer: answered once, OK, with the first answer's receipt byte for byte. */
static void ck_same_receipt(const th_reply *retry, const th_reply *first)
{
    ck_assert_int_eq(retry->count, 1);
    ck_assert_int_eq(retry->code, KL_OK);
    ck_assert_uint_eq(retry->len, first->len);
    ck_assert_mem_eq(retry->receipt, first->receipt, first->len);
}

/* A batch is answered once its entry is committed (kl_node_committed), before this member
 * applies it: only for the term it was proposed in and an index the commit covers; a retry
 * meanwhile gets the same receipt without a new proposal; the apply answers nobody twice,
 * and after it the stored outcome answers the same. */
START_TEST(test_answered_at_commit_before_apply)
{
    th_reply r1 = {0}, r2 = {0}, r3 = {0};
    submit_enqueue(0x30, "early", &r1);
    kl_node_flush(T.node);
    ck_assert_uint_eq(T.n_props, 1);
    uint64_t index = T.props[0].index, term = T.props[0].term;
    ck_assert_uint_eq(kl_node_committed(T.node, term, index - 1), 0);
    ck_assert_uint_eq(kl_node_committed(T.node, term + 1, index), 0);
    ck_assert_int_eq(r1.count, 0);
    ck_assert_uint_eq(kl_node_committed(T.node, term, index), 1);
    Keyload__V1__BatchReceipt *rc = receipt_of(&r1);
    ck_assert_uint_eq(rc->index, index);
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    ck_assert_uint_lt(kl_store_applied_index(T.store), index); /* answered, not applied */
    ck_assert_uint_eq(kl_node_committed(T.node, term, index), 0); /* once */
    int asked = T.flush_asked;
    submit_enqueue(0x30, "early", &r2);
    ck_same_receipt(&r2, &r1);
    ck_assert_uint_eq(T.n_props, 1);
    ck_assert_int_eq(T.flush_asked, asked); /* nothing evaluated again */
    th_drain(&T);
    ck_assert_uint_eq(kl_store_applied_index(T.store), index);
    ck_assert_int_eq(r1.count, 1);
    ck_assert_int_eq(r2.count, 1);
    submit_enqueue(0x30, "early", &r3);
    ck_same_receipt(&r3, &r1);
    ck_assert_uint_eq(th_queue_messages(&T, "orders", NULL), 1);
    th_reply_free(&r1);
    th_reply_free(&r2);
    th_reply_free(&r3);
}
END_TEST

/* A caller answered at the commit is not answered again when the member stops leading
 * before the apply; the entry still applies, and the stored outcome answers a retry the same. */
START_TEST(test_answered_at_commit_survives_leader_change)
{
    th_reply r1 = {0}, r2 = {0};
    submit_enqueue(0x31, "kept", &r1);
    kl_node_flush(T.node);
    uint64_t index = T.props[0].index, term = T.props[0].term;
    ck_assert_uint_eq(kl_node_committed(T.node, term, index), 1);
    ck_assert_int_eq(r1.count, 1);
    kl_node_role(T.node, false);
    ck_assert_int_eq(r1.count, 1);
    ck_assert_int_eq(r1.code, KL_OK);
    th_drain(&T);
    ck_assert_uint_eq(th_queue_messages(&T, "orders", NULL), 1);
    kl_node_role(T.node, true);
    submit_enqueue(0x31, "kept", &r2);
    ck_same_receipt(&r2, &r1);
    th_reply_free(&r1);
    th_reply_free(&r2);
}
END_TEST

/* A batch that changes the catalog is answered at its apply, not at its commit: catalog
 * lookups read applied state without a read barrier and must show what its caller was told. */
START_TEST(test_catalog_change_answered_at_apply)
{
    th_reply r = {0};
    th_batch *b = th_batch_new(0x32);
    th_create(b, "invoices", 0, 0, 0, NULL);
    size_t len;
    uint8_t *req = th_batch_pack(b, &len);
    th_submit(&T, req, len, &r);
    free(req);
    kl_node_flush(T.node);
    ck_assert_uint_eq(T.n_props, 1);
    ck_assert_uint_eq(kl_node_committed(T.node, T.props[0].term, T.props[0].index), 0);
    ck_assert_int_eq(r.count, 0);
    th_drain(&T);
    ck_assert_int_eq(r.count, 1);
    ck_assert_msg(r.code == KL_OK, "%s: %s", kl_code_name(r.code), r.err.message);
    th_reply_free(&r);
}
END_TEST

Suite *suite_group(void)
{
    Suite *s = suite_create("group");
    TCase *tc = tcase_create("group");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_batches_share_one_entry);
    tcase_add_test(tc, test_count_bound);
    tcase_add_test(tc, test_byte_bound);
    tcase_add_test(tc, test_mixed_refused_and_ok);
    tcase_add_test(tc, test_refused_proposal_answers_group);
    tcase_add_test(tc, test_replay_each_after_restart);
    tcase_add_test(tc, test_follower_applies_grouped_entry);
    tcase_add_test(tc, test_answered_at_commit_before_apply);
    tcase_add_test(tc, test_answered_at_commit_survives_leader_change);
    tcase_add_test(tc, test_catalog_change_answered_at_apply);
    suite_add_tcase(s, tc);
    return s;
}
