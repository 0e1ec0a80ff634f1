/* The partition core against a real RocksDB: outcome replay, pending waits, conflicts,
 * all-or-nothing batches, quotas, leases, dead-lettering, group commit and recovery. */
#include "daemon/store/keys.h"
#include "harness.h"

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
    Keyload__V1__BatchReceipt *r;
    th_batch *b = th_batch_new(0x01);
    th_create(b, "orders", 0, 0, 0, NULL);
    r = th_run(&T, b, KL_OK);
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
}

static void teardown(void)
{
    th_close(&T);
    th_rmrf(dir);
}

static th_reply submit(th_batch *b)
{
    size_t len;
    uint8_t *req = th_batch_pack(b, &len);
    th_reply r = {0};
    th_submit(&T, req, len, &r);
    free(req);
    return r;
}

START_TEST(replay_returns_identical_bytes)
{
    th_batch *b = th_batch_new(0x10);
    th_enqueue(b, "orders", NULL, "one");
    th_enqueue(b, "orders", NULL, "two");
    th_reply first = submit(b);
    ck_assert_int_eq(first.code, KL_OK);
    b = th_batch_new(0x10);
    th_enqueue(b, "orders", NULL, "one");
    th_enqueue(b, "orders", "default", "two"); /* same batch: empty lane means default */
    th_reply again = submit(b);
    ck_assert_int_eq(again.code, KL_OK);
    ck_assert_uint_eq(first.len, again.len);
    ck_assert_mem_eq(first.receipt, again.receipt, first.len);
    ck_assert_uint_eq(th_queue_messages(&T, "orders", NULL), 2); /* not enqueued twice */
    Keyload__V1__BatchReceipt *rc = keyload__v1__batch_receipt__unpack(NULL, first.len, first.receipt);
    ck_assert_uint_eq(rc->n_results, 2);
    ck_assert_uint_eq(rc->results[0]->enqueued->message_id, 1);
    ck_assert_uint_eq(rc->results[1]->enqueued->message_id, 2);
    ck_assert_uint_eq(rc->request_digest.len, 32);
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    th_reply_free(&first);
    th_reply_free(&again);
}
END_TEST

START_TEST(conflict_on_different_content)
{
    th_batch *b = th_batch_new(0x11);
    th_enqueue(b, "orders", NULL, "one");
    th_reply r = submit(b);
    ck_assert_int_eq(r.code, KL_OK);
    th_reply_free(&r);
    b = th_batch_new(0x11);
    th_enqueue(b, "orders", NULL, "ONE");
    r = submit(b);
    ck_assert_int_eq(r.code, KL_CONFLICT);
    ck_assert_str_eq(r.err.detail, "command_id_reused");
    ck_assert_ptr_null(strstr(r.err.message, "ONE")); /* never echo the body */
    th_reply_free(&r);
    ck_assert_uint_eq(th_queue_messages(&T, "orders", NULL), 1);
}
END_TEST

START_TEST(pending_same_key_waits_for_commit)
{
    T.auto_persist = false;
    th_batch *b = th_batch_new(0x12);
    th_enqueue(b, "orders", NULL, "x");
    size_t len;
    uint8_t *req = th_batch_pack(b, &len);
    th_reply r1 = {0}, r2 = {0}, r3 = {0};
    th_submit(&T, req, len, &r1);
    th_submit(&T, req, len, &r2);
    ck_assert_int_eq(r1.count, 0); /* nobody is answered before the entry is durable */
    ck_assert_int_eq(r2.count, 0);
    /* A different batch under the same key while pending: CONFLICT at once. */
    b = th_batch_new(0x12);
    th_enqueue(b, "orders", NULL, "y");
    size_t len3;
    uint8_t *req3 = th_batch_pack(b, &len3);
    th_submit(&T, req3, len3, &r3);
    ck_assert_int_eq(r3.count, 1);
    ck_assert_int_eq(r3.code, KL_CONFLICT);
    th_persist(&T);
    ck_assert_int_eq(r1.count, 1);
    ck_assert_int_eq(r2.count, 1);
    ck_assert_int_eq(r1.code, KL_OK);
    ck_assert_int_eq(r2.code, KL_OK);
    ck_assert_mem_eq(r1.receipt, r2.receipt, r1.len);
    ck_assert_uint_eq(th_queue_messages(&T, "orders", NULL), 1);
    free(req);
    free(req3);
    th_reply_free(&r1);
    th_reply_free(&r2);
    th_reply_free(&r3);
}
END_TEST

START_TEST(pending_batches_see_each_other)
{
    T.auto_persist = false;
    th_reply r[4] = {{0}};
    for (int i = 0; i < 4; i++) {
        th_batch *b = th_batch_new((uint8_t)(0x20 + i));
        th_enqueue(b, "orders", NULL, "m");
        size_t len;
        uint8_t *req = th_batch_pack(b, &len);
        th_submit(&T, req, len, &r[i]);
        free(req);
    }
    /* All four are in the log, none committed, nobody answered. */
    ck_assert_uint_eq(T.n_props, 4);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(r[i].count, 0);
    th_persist(&T);
    ck_assert_int_eq(r[0].count, 1);
    ck_assert_int_eq(r[1].count, 0);
    th_drain(&T);
    uint64_t idx[4];
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(r[i].code, KL_OK);
        Keyload__V1__BatchReceipt *rc = keyload__v1__batch_receipt__unpack(NULL, r[i].len, r[i].receipt);
        idx[i] = rc->index;
        ck_assert_uint_eq(rc->term, T.term);
        /* Each batch saw the pending ones before it: ids are 1, 2, 3, 4. */
        ck_assert_uint_eq(rc->results[0]->enqueued->message_id, (uint64_t)i + 1);
        keyload__v1__batch_receipt__free_unpacked(rc, NULL);
        th_reply_free(&r[i]);
    }
    for (int i = 1; i < 4; i++)
        ck_assert_uint_eq(idx[i], idx[i - 1] + 1);
    ck_assert_uint_eq(th_queue_messages(&T, "orders", NULL), 4);
}
END_TEST

START_TEST(leadership_loss_answers_unknown_and_drops_pending)
{
    T.auto_persist = false;
    th_batch *b = th_batch_new(0x28);
    th_enqueue(b, "orders", NULL, "m");
    size_t len;
    uint8_t *req = th_batch_pack(b, &len);
    th_reply r = {0};
    th_submit(&T, req, len, &r);
    ck_assert_int_eq(r.count, 0);
    kl_node_role(T.node, false);
    /* Never "rolled back": the entry may still commit under the next leader. */
    ck_assert_int_eq(r.count, 1);
    ck_assert_int_eq(r.code, KL_UNKNOWN_WRITE_OUTCOME);
    ck_assert_uint_eq(kl_node_pending_batches(T.node), 0);
    /* A follower refuses new batches with NOT_LEADER. */
    T.serving = false;
    th_reply r2 = {0};
    th_submit(&T, req, len, &r2);
    ck_assert_int_eq(r2.code, KL_NOT_LEADER);
    /* The old proposal commits after all (a new leader kept it): applying it on this member
     * changes state exactly once; the retry then finds the outcome. */
    th_persist(&T);
    ck_assert_uint_eq(th_queue_messages(&T, "orders", NULL), 1);
    T.serving = true;
    kl_node_role(T.node, true);
    T.auto_persist = true;
    th_reply r3 = {0};
    th_submit(&T, req, len, &r3);
    ck_assert_int_eq(r3.code, KL_OK);
    ck_assert_uint_eq(th_queue_messages(&T, "orders", NULL), 1);
    free(req);
    th_reply_free(&r);
    th_reply_free(&r2);
    th_reply_free(&r3);
}
END_TEST

START_TEST(slot_taken_by_another_term_is_unknown)
{
    T.auto_persist = false;
    th_batch *b = th_batch_new(0x29);
    th_enqueue(b, "orders", NULL, "m");
    size_t len;
    uint8_t *req = th_batch_pack(b, &len);
    th_reply r = {0};
    th_submit(&T, req, len, &r);
    /* Another leader's entry (a different term) commits at our batch's index. */
    T.props[0].term = T.term + 1;
    uint8_t *noop;
    size_t nlen;
    ck_assert_int_eq(kl_node_encode_empty_entry(T.props[0].index, T.props[0].term, 1, &noop, &nlen), 0);
    free(T.props[0].bytes);
    T.props[0].bytes = noop;
    T.props[0].len = nlen;
    th_persist(&T);
    ck_assert_int_eq(r.count, 1);
    ck_assert_int_eq(r.code, KL_UNKNOWN_WRITE_OUTCOME);
    ck_assert_uint_eq(th_queue_messages(&T, "orders", NULL), 0);
    free(req);
    th_reply_free(&r);
}
END_TEST

START_TEST(batch_is_all_or_nothing)
{
    th_batch *b = th_batch_new(0x30);
    th_enqueue(b, "orders", NULL, "a");
    th_enqueue(b, "orders", NULL, "b");
    th_enqueue(b, "missing", NULL, "c");
    th_reply r = submit(b);
    ck_assert_int_eq(r.code, KL_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(r.err.message, "mutations[2]"));
    th_reply_free(&r);
    ck_assert_uint_eq(th_queue_messages(&T, "orders", NULL), 0);
    ck_assert_uint_eq(kl_node_pending_batches(T.node), 0);
    /* The same command id with a fixed batch may now commit: nothing was recorded. */
    b = th_batch_new(0x30);
    th_enqueue(b, "orders", NULL, "a");
    Keyload__V1__BatchReceipt *rc = th_run(&T, b, KL_OK);
    ck_assert_uint_eq(rc->results[0]->enqueued->message_id, 1); /* seq not consumed by the failure */
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
}
END_TEST

START_TEST(quota_refuses_before_mutation)
{
    th_batch *b = th_batch_new(0x40);
    th_create(b, "small", 2, 0, 0, NULL);
    keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
    b = th_batch_new(0x41);
    th_enqueue(b, "small", NULL, "1");
    th_enqueue(b, "small", NULL, "2");
    th_enqueue(b, "small", NULL, "3");
    th_reply r = submit(b);
    ck_assert_int_eq(r.code, KL_RESOURCE_EXHAUSTED);
    ck_assert_str_eq(r.err.detail, "limit:max_messages");
    th_reply_free(&r);
    ck_assert_uint_eq(th_queue_messages(&T, "small", NULL), 0);
    b = th_batch_new(0x42);
    th_create(b, "tiny", 0, 10, 0, NULL);
    keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
    b = th_batch_new(0x43);
    th_enqueue(b, "tiny", NULL, "0123456789abcdef");
    r = submit(b);
    ck_assert_int_eq(r.code, KL_RESOURCE_EXHAUSTED);
    ck_assert_str_eq(r.err.detail, "limit:max_bytes");
    th_reply_free(&r);
    ck_assert_uint_eq(th_queue_messages(&T, "tiny", NULL), 0);
}
END_TEST

START_TEST(batch_limits_and_bad_ids)
{
    kl_limits l;
    kl_limits_default(&l);
    th_close(&T);
    l.max_batch_bytes = 200;
    T.limits = l;
    th_reopen(&T);
    th_batch *b = th_batch_new(0x50);
    char big[300];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = 0;
    th_enqueue(b, "orders", NULL, big);
    th_reply r = submit(b);
    ck_assert_int_eq(r.code, KL_RESOURCE_EXHAUSTED);
    ck_assert_str_eq(r.err.detail, "limit:MaxBatchBytes");
    th_reply_free(&r);
    b = th_batch_new(0x00); /* all-zero command id */
    th_enqueue(b, "orders", NULL, "x");
    r = submit(b);
    ck_assert_int_eq(r.code, KL_INVALID_ARGUMENT);
    ck_assert_str_eq(r.err.detail, "command_id");
    th_reply_free(&r);
    b = th_batch_new(0x51);
    th_enqueue(b, "", NULL, "x");
    r = submit(b);
    ck_assert_int_eq(r.code, KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(r.err.message, "queue must not be empty"));
    th_reply_free(&r);
    th_close(&T);
    kl_limits_default(&T.limits);
    th_reopen(&T);
    char longname[200];
    memset(longname, 'q', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    b = th_batch_new(0x52);
    th_enqueue(b, longname, NULL, "x");
    r = submit(b);
    ck_assert_int_eq(r.code, KL_INVALID_ARGUMENT);
    th_reply_free(&r);
    /* Garbage bytes are refused and change nothing. */
    th_reply g = {0};
    th_submit(&T, (const uint8_t *)"\xff\xff\xff\xff", 4, &g);
    ck_assert_int_eq(g.code, KL_INVALID_ARGUMENT);
    th_reply_free(&g);
    ck_assert_uint_eq(th_queue_messages(&T, "orders", NULL), 0);
}
END_TEST

static Keyload__V1__BatchReceipt *receive(uint8_t cmd, uint32_t max, uint32_t lease)
{
    th_batch *b = th_batch_new(cmd);
    th_receive(b, "orders", NULL, max, lease);
    return th_run(&T, b, KL_OK);
}

START_TEST(lease_expiry_redelivers_in_order)
{
    th_batch *b = th_batch_new(0x60);
    th_enqueue(b, "orders", NULL, "first");
    th_enqueue(b, "orders", NULL, "second");
    keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
    Keyload__V1__BatchReceipt *r1 = receive(0x61, 1, 1000);
    Keyload__V1__Received *got = r1->results[0]->received;
    ck_assert_uint_eq(got->n_messages, 1);
    ck_assert_uint_eq(got->messages[0]->message_id, 1);
    ck_assert_uint_eq(got->messages[0]->delivery_count, 1);
    uint8_t tok[16];
    memcpy(tok, got->messages[0]->lease_token.data, 16);
    uint64_t inflight;
    ck_assert_uint_eq(th_queue_messages(&T, "orders", &inflight), 2);
    ck_assert_uint_eq(inflight, 1);
    T.now += 2000; /* the lease runs out */
    Keyload__V1__BatchReceipt *r2 = receive(0x62, 2, 1000);
    got = r2->results[0]->received;
    ck_assert_uint_eq(got->n_messages, 2);
    ck_assert_uint_eq(got->messages[0]->message_id, 1); /* back at its place in the lane */
    ck_assert_uint_eq(got->messages[0]->delivery_count, 2);
    ck_assert_uint_eq(got->messages[1]->message_id, 2);
    /* The expired lease no longer acknowledges. */
    b = th_batch_new(0x63);
    th_ack(b, "orders", tok, 1);
    th_reply r = submit(b);
    ck_assert_int_eq(r.code, KL_FAILED_PRECONDITION);
    th_reply_free(&r);
    /* The current leases do. */
    uint8_t toks[32];
    memcpy(toks, got->messages[0]->lease_token.data, 16);
    memcpy(toks + 16, got->messages[1]->lease_token.data, 16);
    b = th_batch_new(0x64);
    th_ack(b, "orders", toks, 2);
    keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
    ck_assert_uint_eq(th_queue_messages(&T, "orders", NULL), 0);
    keyload__v1__batch_receipt__free_unpacked(r1, NULL);
    keyload__v1__batch_receipt__free_unpacked(r2, NULL);
    /* An empty queue can now be deleted. */
    b = th_batch_new(0x65);
    th_delete(b, "orders");
    keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
}
END_TEST

START_TEST(release_and_delete_rules)
{
    th_batch *b = th_batch_new(0x70);
    th_enqueue(b, "orders", NULL, "a");
    keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
    b = th_batch_new(0x71);
    th_delete(b, "orders");
    th_reply r = submit(b);
    ck_assert_int_eq(r.code, KL_FAILED_PRECONDITION);
    ck_assert_str_eq(r.err.detail, "queue_not_empty");
    th_reply_free(&r);
    Keyload__V1__BatchReceipt *r1 = receive(0x72, 1, 60000);
    uint8_t tok[16];
    memcpy(tok, r1->results[0]->received->messages[0]->lease_token.data, 16);
    b = th_batch_new(0x73);
    th_release(b, "orders", tok, 1);
    keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
    /* Released: available again at once, delivery count kept. */
    Keyload__V1__BatchReceipt *r2 = receive(0x74, 1, 60000);
    ck_assert_uint_eq(r2->results[0]->received->n_messages, 1);
    ck_assert_uint_eq(r2->results[0]->received->messages[0]->delivery_count, 2);
    /* Ack with a token of another queue is refused. */
    b = th_batch_new(0x75);
    th_create(b, "other", 0, 0, 0, NULL);
    keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
    b = th_batch_new(0x76);
    th_ack(b, "other", r2->results[0]->received->messages[0]->lease_token.data, 1);
    r = submit(b);
    ck_assert_int_eq(r.code, KL_INVALID_ARGUMENT);
    th_reply_free(&r);
    /* Creating an existing queue conflicts. */
    b = th_batch_new(0x77);
    th_create(b, "orders", 0, 0, 0, NULL);
    r = submit(b);
    ck_assert_int_eq(r.code, KL_CONFLICT);
    th_reply_free(&r);
    keyload__v1__batch_receipt__free_unpacked(r1, NULL);
    keyload__v1__batch_receipt__free_unpacked(r2, NULL);
}
END_TEST

START_TEST(max_deliveries_moves_to_dlq)
{
    th_batch *b = th_batch_new(0x80);
    th_create(b, "dead", 0, 0, 0, NULL);
    keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
    b = th_batch_new(0xD1);
    th_create(b, "work", 0, 0, 1, "dead");
    keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
    b = th_batch_new(0xD2);
    th_enqueue(b, "work", NULL, "poison");
    keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
    b = th_batch_new(0x81);
    th_receive(b, "work", NULL, 1, 100);
    keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
    T.now += 1000;
    b = th_batch_new(0x82);
    th_receive(b, "work", NULL, 1, 100);
    Keyload__V1__BatchReceipt *r = th_run(&T, b, KL_OK);
    ck_assert_uint_eq(r->results[0]->received->n_messages, 0);
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
    ck_assert_uint_eq(th_queue_messages(&T, "work", NULL), 0);
    ck_assert_uint_eq(th_queue_messages(&T, "dead", NULL), 1);
}
END_TEST

START_TEST(recovery_reapplies_durable_entries)
{
    T.auto_persist = false;
    th_batch *b = th_batch_new(0x90);
    th_enqueue(b, "orders", NULL, "durable");
    size_t len;
    uint8_t *req = th_batch_pack(b, &len);
    th_reply r = {0};
    th_submit(&T, req, len, &r);
    /* The entry reaches disk but the member dies before apply and reply. */
    th_persist_only(&T);
    th_close(&T);
    ck_assert_int_eq(r.count, 1);
    ck_assert_int_eq(r.code, KL_UNKNOWN_WRITE_OUTCOME); /* never "rolled back" */
    th_reply_free(&r);
    T.auto_persist = true;
    th_reopen(&T);
    ck_assert_uint_eq(th_queue_messages(&T, "orders", NULL), 1);
    /* The retry with the same command id finds the outcome instead of enqueueing again. */
    th_submit(&T, req, len, &r);
    ck_assert_int_eq(r.code, KL_OK);
    ck_assert_uint_eq(th_queue_messages(&T, "orders", NULL), 1);
    uint8_t *first = r.receipt;
    size_t first_len = r.len;
    r.receipt = NULL;
    th_reply_free(&r);
    th_close(&T);
    th_reopen(&T);
    th_submit(&T, req, len, &r);
    ck_assert_uint_eq(r.len, first_len);
    ck_assert_mem_eq(r.receipt, first, first_len);
    th_reply_free(&r);
    free(first);
    free(req);
}
END_TEST

START_TEST(unknown_fields_are_refused)
{
    /* Found by the fuzzer: field number 0 in a two-byte tag inside an enqueued message
     * decodes, but re-encodes to bytes protobuf-c refuses, which used to poison the lane. */
    static const char b64[] =
        "ChABAgMEBQYHCAkKCwwNDg8QEioaKAoZCgdkZWZhdWx0EgdkZWZhdWx0GgViZW5jaBILCgZwb2lzb26AAAE=";
    uint8_t req[128];
    size_t len;
    ck_assert_int_eq(sodium_base642bin(req, sizeof req, b64, strlen(b64), NULL, &len, NULL,
                                       sodium_base64_VARIANT_ORIGINAL), 0);
    th_batch *b = th_batch_new(0x99);
    th_create(b, "bench", 0, 0, 0, NULL);
    keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
    th_reply r = {0};
    th_submit(&T, req, len, &r);
    ck_assert_int_eq(r.code, KL_INVALID_ARGUMENT);
    ck_assert_str_eq(r.err.detail, "unknown_field");
    ck_assert_ptr_nonnull(strstr(r.err.message, "mutations[0].enqueue.message"));
    th_reply_free(&r);
    ck_assert_uint_eq(th_queue_messages(&T, "bench", NULL), 0);
    /* A legitimate unknown field (number 16) in the limits of a CreateQueue too. */
    b = th_batch_new(0x9a);
    th_create(b, "q2", 0, 0, 0, NULL);
    size_t blen;
    uint8_t *breq = th_batch_pack(b, &blen);
    Keyload__V1__BatchRequest *br = keyload__v1__batch_request__unpack(NULL, blen, breq);
    ProtobufCMessageUnknownField uf = {.tag = 16, .wire_type = PROTOBUF_C_WIRE_TYPE_VARINT,
                                       .len = 1, .data = (uint8_t *)"\x01"};
    br->mutations[0]->create_queue->limits->base.n_unknown_fields = 1;
    br->mutations[0]->create_queue->limits->base.unknown_fields = &uf;
    size_t n2 = keyload__v1__batch_request__get_packed_size(br);
    uint8_t *req2 = malloc(n2);
    keyload__v1__batch_request__pack(br, req2);
    br->mutations[0]->create_queue->limits->base.n_unknown_fields = 0;
    br->mutations[0]->create_queue->limits->base.unknown_fields = NULL;
    keyload__v1__batch_request__free_unpacked(br, NULL);
    th_submit(&T, req2, n2, &r);
    ck_assert_int_eq(r.code, KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(r.err.message, "mutations[0].create_queue.limits"));
    th_reply_free(&r);
    free(req2);
    free(breq);
}
END_TEST

/* Receive promotes due leases and delays and drops expired messages in the same batch;
 * with more of them than MaxScanRecords allows in one batch, every Receive used to fail
 * RESOURCE_EXHAUSTED and nothing ever cleared the backlog: the queue was wedged for good.
 * Now each Receive works off a bounded share of the backlog and delivers. */
START_TEST(receive_works_off_a_backlog_over_the_scan_budget)
{
    kl_limits l;
    kl_limits_default(&l);
    l.max_scan_records = 100;
    th_close(&T);
    T.limits = l;
    th_reopen(&T);
    /* 80 leased messages (more than a 100-record budget can promote at once). */
    for (uint8_t i = 0; i < 4; i++) {
        th_batch *b = th_batch_new((uint8_t)(0xa0 + i));
        for (int j = 0; j < 20; j++)
            th_enqueue(b, "orders", NULL, "m");
        keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
    }
    for (uint8_t i = 0; i < 4; i++) {
        Keyload__V1__BatchReceipt *r = receive((uint8_t)(0xa8 + i), 20, 1000);
        ck_assert_uint_eq(r->results[0]->received->n_messages, 20);
        keyload__v1__batch_receipt__free_unpacked(r, NULL);
    }
    T.now += 2000; /* all 80 leases run out together */
    uint64_t delivered = 0;
    for (uint8_t i = 0; i < 40 && delivered < 80; i++) {
        Keyload__V1__BatchReceipt *r = receive((uint8_t)(0xb0 + i), 5, 60000);
        delivered += r->results[0]->received->n_messages;
        keyload__v1__batch_receipt__free_unpacked(r, NULL);
    }
    ck_assert_uint_eq(delivered, 80); /* every message redelivered, none lost */
    uint64_t inflight;
    ck_assert_uint_eq(th_queue_messages(&T, "orders", &inflight), 80);
    ck_assert_uint_eq(inflight, 80);

    /* The same for 60 messages whose expiry passed while they waited in the lane. */
    th_batch *b = th_batch_new(0xe0);
    th_create(b, "brief", 0, 0, 0, NULL);
    keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
    for (uint8_t i = 0; i < 3; i++) {
        size_t len;
        b = th_batch_new((uint8_t)(0xe1 + i));
        for (int j = 0; j < 20; j++)
            th_enqueue(b, "brief", NULL, "gone soon");
        uint8_t *req = th_batch_pack(b, &len);
        Keyload__V1__BatchRequest *br = keyload__v1__batch_request__unpack(NULL, len, req);
        for (size_t j = 0; j < br->n_mutations; j++)
            br->mutations[j]->enqueue->message->expires_at_unix_ms = T.now + 10;
        size_t n2 = keyload__v1__batch_request__get_packed_size(br);
        uint8_t *req2 = malloc(n2);
        keyload__v1__batch_request__pack(br, req2);
        keyload__v1__batch_request__free_unpacked(br, NULL);
        th_reply r = {0};
        th_submit(&T, req2, n2, &r);
        ck_assert_int_eq(r.code, KL_OK);
        th_reply_free(&r);
        free(req2);
        free(req);
    }
    b = th_batch_new(0xe8);
    th_enqueue(b, "brief", NULL, "keeper");
    keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
    T.now += 100;
    delivered = 0;
    for (uint8_t i = 0; i < 30 && delivered == 0; i++) {
        b = th_batch_new((uint8_t)(0xf0 + i));
        th_receive(b, "brief", NULL, 1, 0);
        Keyload__V1__BatchReceipt *r = th_run(&T, b, KL_OK);
        delivered += r->results[0]->received->n_messages;
        keyload__v1__batch_receipt__free_unpacked(r, NULL);
    }
    ck_assert_uint_eq(delivered, 1);
    ck_assert_uint_eq(th_queue_messages(&T, "brief", NULL), 1); /* the 60 expired are gone */
}
END_TEST

Suite *suite_engine(void)
{
    Suite *s = suite_create("engine");
    TCase *t = tcase_create("node");
    tcase_set_timeout(t, 60);
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, replay_returns_identical_bytes);
    tcase_add_test(t, conflict_on_different_content);
    tcase_add_test(t, pending_same_key_waits_for_commit);
    tcase_add_test(t, pending_batches_see_each_other);
    tcase_add_test(t, leadership_loss_answers_unknown_and_drops_pending);
    tcase_add_test(t, slot_taken_by_another_term_is_unknown);
    tcase_add_test(t, batch_is_all_or_nothing);
    tcase_add_test(t, quota_refuses_before_mutation);
    tcase_add_test(t, batch_limits_and_bad_ids);
    tcase_add_test(t, lease_expiry_redelivers_in_order);
    tcase_add_test(t, release_and_delete_rules);
    tcase_add_test(t, max_deliveries_moves_to_dlq);
    tcase_add_test(t, recovery_reapplies_durable_entries);
    tcase_add_test(t, unknown_fields_are_refused);
    tcase_add_test(t, receive_works_off_a_backlog_over_the_scan_budget);
    suite_add_tcase(s, t);
    return s;
}
