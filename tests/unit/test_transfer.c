/* Remote transfers in the partition core (daemon/engine/transfer.c, node.c's committed
 * refusals) with real RocksDB stores: node A plays partition 0 (the catalog), S the source
 * partition 1 and D the destination partition 2; the test carries catalog changes from A
 * as the tail would, and tokens from S to D and back as the coordinator would. Suites are
 * named after the seeds' acceptance criteria. */
#include "tests/unit/harness.h"

#include "common/canon.h"
#include "common/keys.h"
#include "daemon/engine/catalog.h"
#include "daemon/engine/claims.h"
#include "daemon/store/keys.h"
#include "keyload/v1/claims.pb-c.h"
#include "keyload/v1/store.pb-c.h"
#include "keyload/v1/transfer.pb-c.h"

#include <check.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

static th_node A, S, D;
static char dir_a[256], dir_s[256], dir_d[256];

/* ---- plumbing ---- */

static void carry_all(th_node *to)
{
    uint64_t have, want, changes;
    kl_node_catalog_status(to->node, &have, &changes);
    kl_node_catalog_status(A.node, &want, &changes);
    for (uint64_t v = have + 1; v <= want; v++) {
        uint8_t *bytes;
        size_t len;
        bool found;
        kl_err err;
        ck_assert_int_eq(kl_node_catalog_change(A.node, v, &bytes, &len, &found, &err), KL_OK);
        ck_assert(found);
        ck_assert_int_eq(kl_node_submit_catalog(to->node, bytes, len, &err), KL_OK);
        free(bytes);
        th_drain(to);
    }
}

static void create_queue(uint8_t cmd, const char *q, int partition, uint64_t max_messages)
{
    th_batch *b = th_batch_new(cmd);
    th_create(b, q, max_messages, 0, 0, NULL);
    th_batch_set_partition(b, partition);
    keyload__v1__batch_receipt__free_unpacked(th_run(&A, b, KL_OK), NULL);
}

static void sync_catalog(void)
{
    carry_all(&S);
    carry_all(&D);
}

static void setup(void)
{
    th_tmpdir(dir_a, sizeof dir_a);
    th_tmpdir(dir_s, sizeof dir_s);
    th_tmpdir(dir_d, sizeof dir_d);
    th_open_as(&A, dir_a, 0, 3);
    th_open_as(&S, dir_s, 1, 3);
    th_open_as(&D, dir_d, 2, 3);
    create_queue(0xA1, "src", 1, 0);
    create_queue(0xA2, "dst", 2, 0);
    create_queue(0xA3, "small", 2, 1);
    create_queue(0xA4, "near", 1, 0);
    sync_catalog();
}

static void teardown(void)
{
    th_close(&A);
    th_close(&S);
    th_close(&D);
    th_rmrf(dir_a);
    th_rmrf(dir_s);
    th_rmrf(dir_d);
}

static void ref(Keyload__V1__QueueLaneRef *r, const char *queue, const char *lane)
{
    keyload__v1__queue_lane_ref__init(r);
    r->tenant = "default";
    r->database = "default";
    r->queue = (char *)queue;
    r->lane = (char *)(lane ? lane : "");
}

static void tid_of(uint8_t tid[16], uint8_t b)
{
    memset(tid, 0, 16);
    tid[0] = b;
    tid[15] = 0x5a;
}

/* One-mutation batch, packed. */
static uint8_t *pack1(uint8_t cmd_byte, Keyload__V1__Mutation *m, size_t *len)
{
    uint8_t cmd[16];
    memset(cmd, 0x33, sizeof cmd);
    cmd[0] = cmd_byte;
    Keyload__V1__BatchRequest b = KEYLOAD__V1__BATCH_REQUEST__INIT;
    b.command_id.data = cmd;
    b.command_id.len = 16;
    b.n_mutations = 1;
    b.mutations = &m;
    *len = keyload__v1__batch_request__get_packed_size(&b);
    uint8_t *out = malloc(*len);
    keyload__v1__batch_request__pack(&b, out);
    return out;
}

static th_reply submit(th_node *t, uint8_t *req, size_t len)
{
    th_reply r = {0};
    th_submit(t, req, len, &r);
    free(req);
    ck_assert_int_eq(r.count, 1);
    return r;
}

static Keyload__V1__MutationResult *only_result(const th_reply *r, Keyload__V1__BatchReceipt **rc)
{
    ck_assert_msg(r->code == KL_OK, "expected OK, got %s %s: %s", kl_code_name(r->code), r->err.detail,
                  r->err.message);
    *rc = keyload__v1__batch_receipt__unpack(NULL, r->len, r->receipt);
    ck_assert_ptr_nonnull(*rc);
    ck_assert_uint_eq((*rc)->n_results, 1);
    return (*rc)->results[0];
}

typedef struct {
    uint8_t *p;
    size_t n;
} blob;

static void blob_set(blob *b, const uint8_t *p, size_t n)
{
    b->p = malloc(n ? n : 1);
    memcpy(b->p, p, n);
    b->n = n;
}

static th_reply create_req(uint8_t cmd, const char *lane, uint8_t tidb, const char *dst, const char *body)
{
    uint8_t tid[16];
    tid_of(tid, tidb);
    Keyload__V1__QueueLaneRef s, d;
    ref(&s, "src", lane);
    ref(&d, dst, NULL);
    Keyload__V1__EnqueueMessage msg = KEYLOAD__V1__ENQUEUE_MESSAGE__INIT;
    msg.body.data = (uint8_t *)body;
    msg.body.len = strlen(body);
    Keyload__V1__CreateQueueTransfer c = KEYLOAD__V1__CREATE_QUEUE_TRANSFER__INIT;
    c.source_queue = &s;
    c.transfer_id.data = tid;
    c.transfer_id.len = 16;
    c.destination = &d;
    c.message = &msg;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE_TRANSFER;
    m.create_queue_transfer = &c;
    size_t len;
    uint8_t *req = pack1(cmd, &m, &len);
    return submit(&S, req, len);
}

/* Creates and returns the intent token. */
static blob create_ok(uint8_t cmd, const char *lane, uint8_t tidb, const char *dst, const char *body)
{
    th_reply r = create_req(cmd, lane, tidb, dst, body);
    Keyload__V1__BatchReceipt *rc;
    Keyload__V1__MutationResult *res = only_result(&r, &rc);
    ck_assert_int_eq(res->kind_case, KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_CREATED);
    blob t;
    blob_set(&t, res->transfer_created->intent_token.data, res->transfer_created->intent_token.len);
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    th_reply_free(&r);
    return t;
}

static th_reply accept_req(uint8_t cmd, const char *dst, const char *lane, const blob *intent)
{
    Keyload__V1__QueueLaneRef d;
    ref(&d, dst, lane);
    Keyload__V1__AcceptQueueTransfer a = KEYLOAD__V1__ACCEPT_QUEUE_TRANSFER__INIT;
    a.destination_queue = &d;
    a.intent_token.data = intent->p;
    a.intent_token.len = intent->n;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_ACCEPT_QUEUE_TRANSFER;
    m.accept_queue_transfer = &a;
    size_t len;
    uint8_t *req = pack1(cmd, &m, &len);
    return submit(&D, req, len);
}

static th_reply complete_req(uint8_t cmd, const char *lane, uint8_t tidb, const blob *receipt)
{
    uint8_t tid[16];
    tid_of(tid, tidb);
    Keyload__V1__QueueLaneRef s;
    ref(&s, "src", lane);
    Keyload__V1__CompleteQueueTransfer c = KEYLOAD__V1__COMPLETE_QUEUE_TRANSFER__INIT;
    c.source_queue = &s;
    c.transfer_id.data = tid;
    c.transfer_id.len = 16;
    c.receipt_token.data = receipt->p;
    c.receipt_token.len = receipt->n;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_COMPLETE_QUEUE_TRANSFER;
    m.complete_queue_transfer = &c;
    size_t len;
    uint8_t *req = pack1(cmd, &m, &len);
    return submit(&S, req, len);
}

static void expect_err(th_reply *r, kl_code code, const char *detail)
{
    ck_assert_msg(r->code == code, "expected %s, got %s (%s: %s)", kl_code_name(code), kl_code_name(r->code),
                  r->err.detail, r->err.message);
    if (detail)
        ck_assert_str_eq(r->err.detail, detail);
    th_reply_free(r);
}

/* The stored receipt token, or n == 0 when there is none (NOT_FOUND). */
static blob read_receipt(const char *lane, uint8_t tidb)
{
    uint8_t tid[16];
    tid_of(tid, tidb);
    Keyload__V1__QueueLaneRef d, s;
    ref(&d, "dst", NULL);
    ref(&s, "src", lane);
    Keyload__V1__InspectQueueTransferReceiptRequest q = KEYLOAD__V1__INSPECT_QUEUE_TRANSFER_RECEIPT_REQUEST__INIT;
    q.destination_queue = &d;
    q.source_queue = &s;
    q.transfer_id.data = tid;
    q.transfer_id.len = 16;
    uint8_t buf[1024];
    size_t n = keyload__v1__inspect_queue_transfer_receipt_request__pack(&q, buf);
    uint8_t *ans;
    size_t alen;
    kl_err err;
    blob out = {0};
    kl_code rc = kl_node_transfer_read(D.node, KL_NODE_TRANSFER_RECEIPT, "local", buf, n, &ans, &alen, &err);
    if (rc == KL_NOT_FOUND)
        return out;
    ck_assert_msg(rc == KL_OK, "receipt read: %s %s", kl_code_name(rc), err.message);
    Keyload__V1__InspectQueueTransferReceiptAnswer *a =
        keyload__v1__inspect_queue_transfer_receipt_answer__unpack(NULL, alen, ans);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(a->target_commit);
    ck_assert_int_eq(a->target_commit->partition, 2);
    blob_set(&out, a->receipt_token.data, a->receipt_token.len);
    keyload__v1__inspect_queue_transfer_receipt_answer__free_unpacked(a, NULL);
    free(ans);
    return out;
}

/* InspectQueueTransfer on S; NULL when NOT_FOUND. */
static Keyload__V1__InspectQueueTransferAnswer *inspect(const char *lane, uint8_t tidb)
{
    uint8_t tid[16];
    tid_of(tid, tidb);
    Keyload__V1__QueueLaneRef s;
    ref(&s, "src", lane);
    Keyload__V1__InspectQueueTransferRequest q = KEYLOAD__V1__INSPECT_QUEUE_TRANSFER_REQUEST__INIT;
    q.source_queue = &s;
    q.transfer_id.data = tid;
    q.transfer_id.len = 16;
    uint8_t buf[512];
    size_t n = keyload__v1__inspect_queue_transfer_request__pack(&q, buf);
    uint8_t *ans;
    size_t alen;
    kl_err err;
    kl_code rc = kl_node_transfer_read(S.node, KL_NODE_INSPECT_TRANSFER, "local", buf, n, &ans, &alen, &err);
    if (rc == KL_NOT_FOUND)
        return NULL;
    ck_assert_msg(rc == KL_OK, "inspect: %s %s", kl_code_name(rc), err.message);
    Keyload__V1__InspectQueueTransferAnswer *a = keyload__v1__inspect_queue_transfer_answer__unpack(NULL, alen, ans);
    free(ans);
    ck_assert_ptr_nonnull(a);
    return a;
}

static uint32_t state_of(const char *lane, uint8_t tidb)
{
    Keyload__V1__InspectQueueTransferAnswer *a = inspect(lane, tidb);
    if (a == NULL)
        return 0;
    uint32_t st = a->state;
    keyload__v1__inspect_queue_transfer_answer__free_unpacked(a, NULL);
    return st;
}

/* Lane counters of queue `queue` on node t ('W' record), zero when absent. */
static void lane_counters(th_node *t, const char *queue, const char *lane, uint64_t *records, uint64_t *bytes)
{
    kl_view v = {.store = t->store, .scan_limit = UINT64_MAX};
    kl_key k;
    kl_err err;
    kl_key_queue_name(&k, "default", "default", queue);
    uint8_t *val;
    size_t n;
    bool found;
    ck_assert_int_eq(kl_view_get(&v, k.b, k.len, &val, &n, &found, &err), KL_OK);
    ck_assert(found);
    uint64_t qid = kl_be64_get(val);
    free(val);
    kl_key_lane_transfers(&k, qid, lane);
    *records = *bytes = 0;
    ck_assert_int_eq(kl_view_get(&v, k.b, k.len, &val, &n, &found, &err), KL_OK);
    if (!found)
        return;
    Keyload__V1__LaneTransferRecord *l = keyload__v1__lane_transfer_record__unpack(NULL, n, val);
    free(val);
    *records = l->records;
    *bytes = l->bytes;
    keyload__v1__lane_transfer_record__free_unpacked(l, NULL);
}

/* Runs one flow to a stored receipt: create on S, accept on D; returns the receipt. */
static blob to_receipt(uint8_t cmd, uint8_t tidb, const char *body)
{
    blob intent = create_ok(cmd, NULL, tidb, "dst", body);
    th_reply r = accept_req(cmd, "dst", NULL, &intent);
    Keyload__V1__BatchReceipt *rc;
    Keyload__V1__MutationResult *res = only_result(&r, &rc);
    ck_assert_int_eq(res->kind_case, KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ACCEPTED);
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    th_reply_free(&r);
    free(intent.p);
    return read_receipt(NULL, tidb);
}

/* ---- RemoteTransferIntentTests (AC-XFER-001) ---- */

START_TEST(intent_same_identity_replays_changes_conflict)
{
    blob t1 = create_ok(0x10, NULL, 1, "dst", "hello");
    ck_assert_uint_eq(state_of(NULL, 1), KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING);
    /* Same id and body under a new command id: the existing intent, byte for byte. */
    th_reply r = create_req(0x11, NULL, 1, "dst", "hello");
    Keyload__V1__BatchReceipt *rc;
    Keyload__V1__MutationResult *res = only_result(&r, &rc);
    ck_assert(res->transfer_created->existing);
    ck_assert_uint_eq(res->transfer_created->intent_token.len, t1.n);
    ck_assert_mem_eq(res->transfer_created->intent_token.data, t1.p, t1.n);
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    th_reply_free(&r);
    /* The same command id replays its receipt. */
    th_reply again = create_req(0x10, NULL, 1, "dst", "hello");
    ck_assert_int_eq(again.code, KL_OK);
    th_reply_free(&again);
    /* Changed payload or destination under the id: CONFLICT. */
    th_reply p = create_req(0x12, NULL, 1, "dst", "other body");
    expect_err(&p, KL_CONFLICT, "transfer_id");
    create_queue(0xA5, "dst2", 2, 0);
    sync_catalog();
    th_reply d = create_req(0x13, NULL, 1, "dst2", "hello");
    expect_err(&d, KL_CONFLICT, "transfer_id");
    uint64_t recs, bytes;
    lane_counters(&S, "src", "default", &recs, &bytes);
    ck_assert_uint_eq(recs, 1);
    free(t1.p);
}
END_TEST

START_TEST(intent_batch_rollback_creates_nothing)
{
    /* Create, then an Enqueue to a queue that does not exist: the batch fails whole. */
    uint8_t tid[16];
    tid_of(tid, 2);
    Keyload__V1__QueueLaneRef s, d, missing;
    ref(&s, "src", NULL);
    ref(&d, "dst", NULL);
    ref(&missing, "nosuchqueue", NULL);
    Keyload__V1__EnqueueMessage msg = KEYLOAD__V1__ENQUEUE_MESSAGE__INIT;
    msg.body.data = (uint8_t *)"x";
    msg.body.len = 1;
    Keyload__V1__CreateQueueTransfer c = KEYLOAD__V1__CREATE_QUEUE_TRANSFER__INIT;
    c.source_queue = &s;
    c.transfer_id.data = tid;
    c.transfer_id.len = 16;
    c.destination = &d;
    c.message = &msg;
    Keyload__V1__Enqueue e = KEYLOAD__V1__ENQUEUE__INIT;
    e.lane = &missing;
    e.message = &msg;
    Keyload__V1__Mutation m1 = KEYLOAD__V1__MUTATION__INIT, m2 = KEYLOAD__V1__MUTATION__INIT;
    m1.kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE_TRANSFER;
    m1.create_queue_transfer = &c;
    m2.kind_case = KEYLOAD__V1__MUTATION__KIND_ENQUEUE;
    m2.enqueue = &e;
    Keyload__V1__Mutation *ms[2] = {&m1, &m2};
    uint8_t cmd[16];
    memset(cmd, 0x44, 16);
    Keyload__V1__BatchRequest b = KEYLOAD__V1__BATCH_REQUEST__INIT;
    b.command_id.data = cmd;
    b.command_id.len = 16;
    b.n_mutations = 2;
    b.mutations = ms;
    size_t len = keyload__v1__batch_request__get_packed_size(&b);
    uint8_t *req = malloc(len);
    keyload__v1__batch_request__pack(&b, req);
    th_reply r = submit(&S, req, len);
    expect_err(&r, KL_NOT_FOUND, NULL);
    ck_assert_uint_eq(state_of(NULL, 2), 0);
    uint64_t recs, bytes;
    lane_counters(&S, "src", "default", &recs, &bytes);
    ck_assert_uint_eq(recs, 0);
    ck_assert_uint_eq(bytes, 0);
}
END_TEST

START_TEST(intent_survives_reopen)
{
    blob t = create_ok(0x14, "eu", 3, "dst", "durable");
    th_close(&S);
    th_reopen(&S);
    Keyload__V1__InspectQueueTransferAnswer *a = inspect("eu", 3);
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_eq(a->state, KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING);
    ck_assert_uint_eq(a->generation, 1);
    ck_assert_uint_eq(a->intent_token.len, t.n);
    ck_assert_mem_eq(a->intent_token.data, t.p, t.n);
    ck_assert_str_eq(a->destination->lane, "default");
    ck_assert_str_eq(a->source->lane, "eu");
    ck_assert_uint_eq(a->n_history, 1);
    keyload__v1__inspect_queue_transfer_answer__free_unpacked(a, NULL);
    free(t.p);
}
END_TEST

START_TEST(intent_refuses_same_partition)
{
    th_reply r = create_req(0x15, NULL, 4, "near", "x");
    ck_assert_int_eq(r.code, KL_FAILED_PRECONDITION);
    ck_assert_str_eq(r.err.detail, "same_partition");
    ck_assert_ptr_nonnull(strstr(r.err.message, "--partition"));
    th_reply_free(&r);
}
END_TEST

START_TEST(fingerprint_is_canonical)
{
    Keyload__V1__Header h1 = KEYLOAD__V1__HEADER__INIT, h2 = KEYLOAD__V1__HEADER__INIT;
    h1.key = "a";
    h1.value = "1";
    h2.key = "b";
    h2.value = "2";
    Keyload__V1__Header *ab[2] = {&h1, &h2}, *ba[2] = {&h2, &h1};
    Keyload__V1__EnqueueMessage m = KEYLOAD__V1__ENQUEUE_MESSAGE__INIT;
    m.body.data = (uint8_t *)"body";
    m.body.len = 4;
    m.n_headers = 2;
    m.headers = ab;
    uint8_t f1[32], f2[32], f3[32];
    ck_assert_int_eq(kl_canon_message_fingerprint(&m, f1), 0);
    m.headers = ba; /* map order does not matter */
    ck_assert_int_eq(kl_canon_message_fingerprint(&m, f2), 0);
    ck_assert_mem_eq(f1, f2, 32);
    m.delay_ms = 1; /* every field does */
    ck_assert_int_eq(kl_canon_message_fingerprint(&m, f3), 0);
    ck_assert(memcmp(f1, f3, 32) != 0);
    /* Pinned: the encoding of common/canon.h v1 must never change under stored tokens. */
    Keyload__V1__EnqueueMessage plain = KEYLOAD__V1__ENQUEUE_MESSAGE__INIT;
    plain.body.data = (uint8_t *)"hi";
    plain.body.len = 2;
    uint8_t got[32], want[32];
    ck_assert_int_eq(kl_canon_message_fingerprint(&plain, got), 0);
    /* By hand: 0xF1 + len "keyload.message-fingerprint.v1", then tag 1 (message), tag 1 +
     * len 2 + "hi", header count 0, field count 0, tag 4 + 0 (8 bytes), tag 5 + 0. */
    uint8_t enc[128];
    size_t n = 0;
    const char *dom = "keyload.message-fingerprint.v1";
    enc[n++] = 0xF1;
    enc[n++] = 0; enc[n++] = 0; enc[n++] = 0; enc[n++] = (uint8_t)strlen(dom);
    memcpy(enc + n, dom, strlen(dom));
    n += strlen(dom);
    enc[n++] = 1;
    enc[n++] = 1;
    enc[n++] = 0; enc[n++] = 0; enc[n++] = 0; enc[n++] = 2;
    enc[n++] = 'h'; enc[n++] = 'i';
    memset(enc + n, 0, 4); n += 4; /* header count */
    memset(enc + n, 0, 4); n += 4; /* field count */
    enc[n++] = 4;
    memset(enc + n, 0, 8); n += 8;
    enc[n++] = 5;
    memset(enc + n, 0, 8); n += 8;
    crypto_generichash(want, 32, enc, n, NULL, 0);
    ck_assert_mem_eq(got, want, 32);
}
END_TEST

/* ---- RemoteTransferDestinationTests (AC-XFER-002) ---- */

START_TEST(destination_once_and_byte_identical)
{
    blob intent = create_ok(0x20, NULL, 5, "dst", "payload");
    th_reply r1 = accept_req(0x21, "dst", NULL, &intent);
    Keyload__V1__BatchReceipt *rc;
    Keyload__V1__MutationResult *res = only_result(&r1, &rc);
    ck_assert(!res->transfer_accepted->deduplicated);
    ck_assert_uint_eq(res->transfer_accepted->message_id, 1);
    uint64_t index = res->transfer_accepted->index;
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    blob first = read_receipt(NULL, 5);
    ck_assert_uint_gt(first.n, 0);
    /* The same command again: the stored batch receipt, byte for byte. */
    th_reply same = accept_req(0x21, "dst", NULL, &intent);
    ck_assert_int_eq(same.code, KL_OK);
    ck_assert_uint_eq(same.len, r1.len);
    ck_assert_mem_eq(same.receipt, r1.receipt, r1.len);
    th_reply_free(&same);
    th_reply_free(&r1);
    /* A new command id (retry after an unknown outcome): deduplicated, same effect. */
    th_reply r2 = accept_req(0x22, "dst", NULL, &intent);
    res = only_result(&r2, &rc);
    ck_assert(res->transfer_accepted->deduplicated);
    ck_assert_uint_eq(res->transfer_accepted->message_id, 1);
    ck_assert_uint_eq(res->transfer_accepted->index, index);
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    th_reply_free(&r2);
    /* Reopen: the same receipt bytes, still one message. */
    th_close(&D);
    th_reopen(&D);
    blob again = read_receipt(NULL, 5);
    ck_assert_uint_eq(again.n, first.n);
    ck_assert_mem_eq(again.p, first.p, first.n);
    ck_assert_uint_eq(th_queue_messages(&D, "dst", NULL), 1);
    free(again.p);
    free(first.p);
    free(intent.p);
}
END_TEST

START_TEST(destination_quota_failure_leaves_nothing_and_is_committed)
{
    /* "small" holds one message; fill it, then a transfer to it is refused. */
    th_batch *b = th_batch_new(0x23);
    th_enqueue(b, "small", NULL, "filler");
    keyload__v1__batch_receipt__free_unpacked(th_run(&D, b, KL_OK), NULL);
    blob intent = create_ok(0x24, NULL, 6, "small", "payload");
    th_reply r = accept_req(0x25, "small", NULL, &intent);
    ck_assert_int_eq(r.code, KL_RESOURCE_EXHAUSTED);
    char detail[KL_ERR_DETAIL_MAX];
    memcpy(detail, r.err.detail, sizeof detail);
    th_reply_free(&r);
    ck_assert_uint_eq(th_queue_messages(&D, "small", NULL), 1);
    uint64_t recs, bytes;
    lane_counters(&D, "small", "default", &recs, &bytes);
    ck_assert_uint_eq(recs, 0);
    ck_assert_uint_eq(state_of(NULL, 6), KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING);
    /* Make room: the refusal was committed, so the same command id answers the same. */
    th_batch *rb = th_batch_new(0x26);
    th_receive(rb, "small", NULL, 1, 30000);
    Keyload__V1__BatchReceipt *rr = th_run(&D, rb, KL_OK);
    th_batch *ab = th_batch_new(0x27);
    th_ack(ab, "small", rr->results[0]->received->messages[0]->lease_token.data, 1);
    keyload__v1__batch_receipt__free_unpacked(rr, NULL);
    keyload__v1__batch_receipt__free_unpacked(th_run(&D, ab, KL_OK), NULL);
    ck_assert_uint_eq(th_queue_messages(&D, "small", NULL), 0);
    th_reply same = accept_req(0x25, "small", NULL, &intent);
    ck_assert_int_eq(same.code, KL_RESOURCE_EXHAUSTED);
    ck_assert_str_eq(same.err.detail, detail);
    th_reply_free(&same);
    ck_assert_uint_eq(th_queue_messages(&D, "small", NULL), 0);
    /* ... and survives a reopen; a new command id goes through. */
    th_close(&D);
    th_reopen(&D);
    th_reply same2 = accept_req(0x25, "small", NULL, &intent);
    expect_err(&same2, KL_RESOURCE_EXHAUSTED, detail);
    th_reply ok = accept_req(0x28, "small", NULL, &intent);
    ck_assert_int_eq(ok.code, KL_OK);
    th_reply_free(&ok);
    ck_assert_uint_eq(th_queue_messages(&D, "small", NULL), 1);
    /* The lane is full again, yet a retry still returns the receipt (dedup first). */
    th_reply dup = accept_req(0x29, "small", NULL, &intent);
    Keyload__V1__BatchReceipt *rc;
    ck_assert(only_result(&dup, &rc)->transfer_accepted->deduplicated);
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    th_reply_free(&dup);
    free(intent.p);
}
END_TEST

START_TEST(destination_refuses_bad_intents)
{
    blob intent = create_ok(0x30, NULL, 7, "dst", "payload");
    /* Another destination than the intent's target. */
    create_queue(0xA6, "dst3", 2, 0);
    sync_catalog();
    th_reply wrong = accept_req(0x31, "dst3", NULL, &intent);
    expect_err(&wrong, KL_INVALID_ARGUMENT, "destination_queue");
    th_reply lane = accept_req(0x32, "dst", "otherlane", &intent);
    expect_err(&lane, KL_INVALID_ARGUMENT, "destination_queue");
    /* A flipped bit anywhere in the claims: the signature fails. */
    blob bad;
    blob_set(&bad, intent.p, intent.n);
    bad.p[bad.n / 2] ^= 0x01;
    th_reply t = accept_req(0x33, "dst", NULL, &bad);
    ck_assert(t.code == KL_PERMISSION_DENIED || t.code == KL_INVALID_ARGUMENT);
    th_reply_free(&t);
    /* Garbage is refused without effect. */
    blob junk;
    blob_set(&junk, (const uint8_t *)"not a token", 11);
    th_reply j = accept_req(0x34, "dst", NULL, &junk);
    expect_err(&j, KL_INVALID_ARGUMENT, "intent_token");
    ck_assert_uint_eq(th_queue_messages(&D, "dst", NULL), 0);
    blob none = read_receipt(NULL, 7);
    ck_assert_uint_eq(none.n, 0);
    /* An intent re-signed with a wrong purpose (a receipt used as intent). */
    free(bad.p);
    free(junk.p);
    free(intent.p);
}
END_TEST

START_TEST(destination_refuses_expired_message)
{
    uint8_t tid[16];
    tid_of(tid, 8);
    Keyload__V1__QueueLaneRef s, d;
    ref(&s, "src", NULL);
    ref(&d, "dst", NULL);
    Keyload__V1__EnqueueMessage msg = KEYLOAD__V1__ENQUEUE_MESSAGE__INIT;
    msg.body.data = (uint8_t *)"soon gone";
    msg.body.len = 9;
    msg.expires_at_unix_ms = S.now + 1000;
    Keyload__V1__CreateQueueTransfer c = KEYLOAD__V1__CREATE_QUEUE_TRANSFER__INIT;
    c.source_queue = &s;
    c.transfer_id.data = tid;
    c.transfer_id.len = 16;
    c.destination = &d;
    c.message = &msg;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE_TRANSFER;
    m.create_queue_transfer = &c;
    size_t len;
    uint8_t *req = pack1(0x35, &m, &len);
    th_reply r = submit(&S, req, len);
    Keyload__V1__BatchReceipt *rc;
    Keyload__V1__MutationResult *res = only_result(&r, &rc);
    blob intent;
    blob_set(&intent, res->transfer_created->intent_token.data, res->transfer_created->intent_token.len);
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    th_reply_free(&r);
    D.now = S.now + 5000;
    th_reply a = accept_req(0x36, "dst", NULL, &intent);
    expect_err(&a, KL_FAILED_PRECONDITION, "expires_at_unix_ms");
    ck_assert_uint_eq(th_queue_messages(&D, "dst", NULL), 0);
    ck_assert_uint_eq(state_of(NULL, 8), KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING);
    free(intent.p);
}
END_TEST

/* ---- token verification with the signing secret (pure: claims.c only) ---- */

/* A second valid Ed25519 signature of m under sk, made with a random nonce where the
 * deterministic signer hashes one (R = rB, S = r + H(R || A || m) a mod L), as a signer
 * built with randomized nonces would make it. */
static void sign_with_random_nonce(uint8_t sig[64], const uint8_t *m, size_t mn, const uint8_t sk[64])
{
    uint8_t h[64], wide[64] = {0}, a[32], r[32], k[64], kr[32], ka[32];
    crypto_hash_sha512(h, sk, 32);
    h[0] &= 248;
    h[31] &= 127;
    h[31] |= 64;
    memcpy(wide, h, 32);
    crypto_core_ed25519_scalar_reduce(a, wide);
    crypto_core_ed25519_scalar_random(r);
    ck_assert_int_eq(crypto_scalarmult_ed25519_base_noclamp(sig, r), 0);
    crypto_hash_sha512_state st;
    crypto_hash_sha512_init(&st);
    crypto_hash_sha512_update(&st, sig, 32);
    crypto_hash_sha512_update(&st, sk + 32, 32);
    crypto_hash_sha512_update(&st, m, mn);
    crypto_hash_sha512_final(&st, k);
    crypto_core_ed25519_scalar_reduce(kr, k);
    crypto_core_ed25519_scalar_mul(ka, kr, a);
    crypto_core_ed25519_scalar_add(sig + 32, r, ka);
}

static Keyload__V1__SignedToken *signed_test_token(const uint8_t sk[64], const uint8_t kid[8])
{
    Keyload__V1__TransferClaims cl = KEYLOAD__V1__TRANSFER_CLAIMS__INIT;
    cl.version = KL_CLAIMS_VERSION;
    cl.purpose = KEYLOAD__V1__CLAIM_PURPOSE__TRANSFER_RECEIPT;
    cl.principal_id = "alice";
    cl.generation = 1;
    cl.issued_unix_ms = 1764950400000;
    uint8_t *t;
    size_t n;
    kl_err err;
    ck_assert_int_eq(kl_claims_sign(&cl, sk, kid, &t, &n, &err), KL_OK);
    Keyload__V1__SignedToken *tok = keyload__v1__signed_token__unpack(NULL, n, t);
    free(t);
    ck_assert_ptr_nonnull(tok);
    return tok;
}

/* kl_claims_verify with the secret accepts exactly what it accepts without it: its own
 * deterministic signature, another valid signature of the same claims, never a changed
 * byte, and never a token of another key because the secret it was handed is that key's. */
START_TEST(claims_verify_with_secret_accepts_exactly_what_verify_accepts)
{
    uint8_t pk[32], sk[64], pk_other[32], sk_other[64];
    const uint8_t kid[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    crypto_sign_keypair(pk, sk);
    crypto_sign_keypair(pk_other, sk_other);
    kl_err err;
    Keyload__V1__SignedToken *tok = signed_test_token(sk, kid);
    ck_assert_int_eq(kl_claims_verify("receipt_token", tok, pk, kid, sk, &err), KL_OK);
    ck_assert_int_eq(kl_claims_verify("receipt_token", tok, pk, kid, NULL, &err), KL_OK);

    /* another valid signature: the re-signed one differs, the full verification accepts */
    uint8_t own[64], other[64], *m = malloc(sizeof KL_CLAIMS_DOMAIN - 1 + tok->claims.len);
    size_t mn = sizeof KL_CLAIMS_DOMAIN - 1 + tok->claims.len;
    memcpy(m, KL_CLAIMS_DOMAIN, sizeof KL_CLAIMS_DOMAIN - 1);
    memcpy(m + sizeof KL_CLAIMS_DOMAIN - 1, tok->claims.data, tok->claims.len);
    memcpy(own, tok->signature.data, 64);
    sign_with_random_nonce(other, m, mn, sk);
    ck_assert_int_eq(crypto_sign_verify_detached(other, m, mn, pk), 0);
    ck_assert(memcmp(own, other, 64) != 0);
    memcpy(tok->signature.data, other, 64);
    ck_assert_int_eq(kl_claims_verify("receipt_token", tok, pk, kid, sk, &err), KL_OK);
    ck_assert_int_eq(kl_claims_verify("receipt_token", tok, pk, kid, NULL, &err), KL_OK);

    /* one changed byte anywhere in the signature: refused either way */
    for (size_t i = 0; i < 64; i += 7) {
        memcpy(tok->signature.data, own, 64);
        tok->signature.data[i] ^= 0x20;
        ck_assert_int_eq(kl_claims_verify("receipt_token", tok, pk, kid, sk, &err), KL_PERMISSION_DENIED);
        ck_assert_str_eq(err.detail, "receipt_signature");
        ck_assert_int_eq(kl_claims_verify("receipt_token", tok, pk, kid, NULL, &err), KL_PERMISSION_DENIED);
    }
    memcpy(tok->signature.data, own, 64);
    /* changed claims under the old signature: refused */
    tok->claims.data[tok->claims.len - 1] ^= 1;
    ck_assert_int_eq(kl_claims_verify("receipt_token", tok, pk, kid, sk, &err), KL_PERMISSION_DENIED);
    tok->claims.data[tok->claims.len - 1] ^= 1;

    /* handed another key's secret: a token signed by that key is not pk's */
    Keyload__V1__SignedToken *foreign = signed_test_token(sk_other, kid);
    ck_assert_int_eq(kl_claims_verify("receipt_token", foreign, pk, kid, sk_other, &err), KL_PERMISSION_DENIED);
    ck_assert_int_eq(kl_claims_verify("receipt_token", foreign, pk_other, kid, sk_other, &err), KL_OK);
    /* and pk's own token still verifies through the full check */
    ck_assert_int_eq(kl_claims_verify("receipt_token", tok, pk, kid, sk_other, &err), KL_OK);

    free(m);
    sodium_memzero(sk, sizeof sk);
    sodium_memzero(sk_other, sizeof sk_other);
    keyload__v1__signed_token__free_unpacked(foreign, NULL);
    keyload__v1__signed_token__free_unpacked(tok, NULL);
}
END_TEST

/* kl_claims_is_own_signature finds exactly crypto_sign_detached's signature: for many keys
 * and message lengths (0 to 700 bytes, past a SHA-512 block) it accepts that signature, and
 * refuses every single-bit change of R or S, a changed message byte, another valid
 * signature of the same message, and the signature of the same message by another key. */
START_TEST(claims_own_signature_is_exactly_the_deterministic_one)
{
    uint8_t pk[32], sk[64], pk2[32], sk2[64], sig[64], sig2[64], m[700];
    for (int round = 0; round < 64; round++) {
        crypto_sign_keypair(pk, sk);
        crypto_sign_keypair(pk2, sk2);
        size_t mn = (size_t)round * 11;
        randombytes_buf(m, sizeof m);
        ck_assert_int_eq(crypto_sign_detached(sig, NULL, m, mn, sk), 0);
        ck_assert(kl_claims_is_own_signature(sig, m, mn, sk));
        for (int bit = round % 8; bit < 512; bit += 8) {
            sig[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            ck_assert_msg(!kl_claims_is_own_signature(sig, m, mn, sk), "round %d bit %d", round, bit);
            sig[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        }
        if (mn > 0) {
            m[round % mn] ^= 0x40;
            ck_assert(!kl_claims_is_own_signature(sig, m, mn, sk));
            m[round % mn] ^= 0x40;
        }
        sign_with_random_nonce(sig2, m, mn, sk);
        ck_assert_int_eq(crypto_sign_verify_detached(sig2, m, mn, pk), 0);
        ck_assert(!kl_claims_is_own_signature(sig2, m, mn, sk));
        ck_assert_int_eq(crypto_sign_detached(sig2, NULL, m, mn, sk2), 0);
        ck_assert(!kl_claims_is_own_signature(sig2, m, mn, sk));
        ck_assert(kl_claims_is_own_signature(sig2, m, mn, sk2));
    }
    sodium_memzero(sk, sizeof sk);
    sodium_memzero(sk2, sizeof sk2);
}
END_TEST

/* ---- RemoteTransferReceiptTests (AC-XFER-003) ---- */

/* Re-signs the genuine receipt's claims after `edit` changed them. */
static blob resign(const blob *genuine, void (*edit)(Keyload__V1__TransferClaims *))
{
    Keyload__V1__SignedToken *tok;
    Keyload__V1__TransferClaims *cl;
    kl_err err;
    ck_assert_int_eq(kl_claims_decode("receipt_token", genuine->p, genuine->n, &tok, &cl, &err), KL_OK);
    edit(cl);
    kl_view v = {.store = S.store, .scan_limit = UINT64_MAX};
    Keyload__V1__CatalogDatabase *d;
    bool found;
    ck_assert_int_eq(kl_catalog_get_database(&v, "default", "default", &d, &found, &err), KL_OK);
    ck_assert(found);
    uint8_t pk[32], sk[64], kid[8];
    ck_assert_int_eq(kl_keys_database_signing(th_cluster_secret, d->database_id, pk, sk, kid, &err), KL_OK);
    blob out;
    ck_assert_int_eq(kl_claims_sign(cl, sk, kid, &out.p, &out.n, &err), KL_OK);
    sodium_memzero(sk, sizeof sk);
    keyload__v1__catalog_database__free_unpacked(d, NULL);
    keyload__v1__signed_token__free_unpacked(tok, NULL);
    keyload__v1__transfer_claims__free_unpacked(cl, NULL);
    return out;
}

/* Edits replace unpacked fields with heap copies (free_unpacked frees them). */
static void swap_str(char **field)
{
    free(*field);
    *field = strdup("other");
}
static void swap_bytes(ProtobufCBinaryData *field, size_t n)
{
    free(field->data);
    field->data = calloc(1, n);
    field->data[0] = 9;
    field->len = n;
}
static void e_purpose(Keyload__V1__TransferClaims *c) { c->purpose = KEYLOAD__V1__CLAIM_PURPOSE__TRANSFER_INTENT; }
static void e_incarnation(Keyload__V1__TransferClaims *c) { swap_bytes(&c->database_incarnation, 16); }
static void e_principal(Keyload__V1__TransferClaims *c) { swap_str(&c->principal_id); }
static void e_source(Keyload__V1__TransferClaims *c) { swap_str(&c->source->lane); }
static void e_target(Keyload__V1__TransferClaims *c) { swap_str(&c->target->queue); }
static void e_fingerprint(Keyload__V1__TransferClaims *c) { swap_bytes(&c->fingerprint, 32); }
static void e_generation(Keyload__V1__TransferClaims *c) { c->generation = 2; }
static void e_transfer_id(Keyload__V1__TransferClaims *c) { c->transfer_id.data[1] ^= 1; }
static void e_version(Keyload__V1__TransferClaims *c) { c->version = 2; }

START_TEST(receipt_mismatches_refuse_and_keep_pending)
{
    blob genuine = to_receipt(0x40, 9, "pay");
    struct {
        void (*edit)(Keyload__V1__TransferClaims *);
        const char *detail;
    } cases[] = {
        {e_purpose, "receipt:purpose"},         {e_incarnation, "receipt:incarnation"},
        {e_principal, "receipt:principal"},     {e_source, "receipt:source"},
        {e_target, "receipt:target"},           {e_fingerprint, "receipt:fingerprint"},
        {e_generation, "receipt:generation"},   {e_transfer_id, "receipt:transfer_id"},
        {e_version, "receipt:version"},
    };
    uint8_t cmd = 0x41;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++, cmd++) {
        blob forged = resign(&genuine, cases[i].edit);
        th_reply r = complete_req(cmd, NULL, 9, &forged);
        ck_assert_msg(r.code == KL_FAILED_PRECONDITION && strcmp(r.err.detail, cases[i].detail) == 0,
                      "case %s: got %s %s", cases[i].detail, kl_code_name(r.code), r.err.detail);
        th_reply_free(&r);
        /* The refusal is committed: the same command id answers the same. */
        th_reply again = complete_req(cmd, NULL, 9, &forged);
        expect_err(&again, KL_FAILED_PRECONDITION, cases[i].detail);
        ck_assert_uint_eq(state_of(NULL, 9), KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING);
        free(forged.p);
    }
    /* Tampered bytes: the signature does not verify. */
    blob tampered;
    blob_set(&tampered, genuine.p, genuine.n);
    tampered.p[10] ^= 0x40;
    th_reply t = complete_req(cmd++, NULL, 9, &tampered);
    ck_assert(t.code == KL_PERMISSION_DENIED || t.code == KL_INVALID_ARGUMENT);
    th_reply_free(&t);
    /* A receipt signed by another key. */
    Keyload__V1__SignedToken *tok = keyload__v1__signed_token__unpack(NULL, genuine.n, genuine.p);
    uint8_t pk[32], sk[64];
    crypto_sign_keypair(pk, sk);
    uint8_t sig[64];
    crypto_sign_detached(sig, NULL, tok->claims.data, tok->claims.len, sk);
    memcpy(tok->signature.data, sig, 64);
    blob foreign;
    foreign.n = keyload__v1__signed_token__get_packed_size(tok);
    foreign.p = malloc(foreign.n);
    keyload__v1__signed_token__pack(tok, foreign.p);
    keyload__v1__signed_token__free_unpacked(tok, NULL);
    th_reply f = complete_req(cmd++, NULL, 9, &foreign);
    expect_err(&f, KL_PERMISSION_DENIED, "receipt_signature");
    /* An intent token is no receipt. */
    Keyload__V1__InspectQueueTransferAnswer *a = inspect(NULL, 9);
    blob intent;
    blob_set(&intent, a->intent_token.data, a->intent_token.len);
    keyload__v1__inspect_queue_transfer_answer__free_unpacked(a, NULL);
    th_reply it = complete_req(cmd++, NULL, 9, &intent);
    expect_err(&it, KL_FAILED_PRECONDITION, "receipt:purpose");
    ck_assert_uint_eq(state_of(NULL, 9), KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING);
    /* The genuine receipt completes; completing again is stable; reopen keeps it. */
    th_reply ok = complete_req(cmd++, NULL, 9, &genuine);
    Keyload__V1__BatchReceipt *rc;
    ck_assert(!only_result(&ok, &rc)->transfer_completed->already);
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    th_reply_free(&ok);
    th_reply dup = complete_req(cmd++, NULL, 9, &genuine);
    ck_assert(only_result(&dup, &rc)->transfer_completed->already);
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    th_reply_free(&dup);
    th_close(&S);
    th_reopen(&S);
    a = inspect(NULL, 9);
    ck_assert_uint_eq(a->state, KEYLOAD__V1__TRANSFER_STATE__DELIVERED);
    ck_assert_uint_eq(a->receipt_token.len, genuine.n);
    ck_assert_mem_eq(a->receipt_token.data, genuine.p, genuine.n);
    ck_assert_uint_eq(a->n_history, 2);
    ck_assert_int_eq(a->history[1]->event, KEYLOAD__V1__TRANSFER_EVENT__RECEIPT_VERIFIED);
    keyload__v1__inspect_queue_transfer_answer__free_unpacked(a, NULL);
    free(intent.p);
    free(foreign.p);
    free(tampered.p);
    free(genuine.p);
}
END_TEST

/* ---- RemoteTransferRetentionTests (AC-XFER-004) ---- */

/* Replaces the database's limits (0: the cluster's; attempts 0: a null ceiling). */
static void set_limits(uint8_t cmd, uint64_t scan, uint64_t batch_bytes, uint64_t read_bytes, uint64_t attempts)
{
    Keyload__V1__NullableU64 n = KEYLOAD__V1__NULLABLE_U64__INIT;
    n.value = attempts;
    Keyload__V1__DatabaseLimits l = KEYLOAD__V1__DATABASE_LIMITS__INIT;
    l.max_scan_records = scan;
    l.max_batch_bytes = batch_bytes;
    l.max_query_read_bytes = read_bytes;
    l.max_queue_transfer_accept_attempts = attempts ? &n : NULL;
    Keyload__V1__SetDatabaseLimits s = KEYLOAD__V1__SET_DATABASE_LIMITS__INIT;
    s.tenant = "default";
    s.database = "default";
    s.limits = &l;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_SET_DATABASE_LIMITS;
    m.set_database_limits = &s;
    size_t len;
    uint8_t *req = pack1(cmd, &m, &len);
    th_reply r = submit(&A, req, len);
    ck_assert_msg(r.code == KL_OK, "set limits: %s", r.err.message);
    th_reply_free(&r);
    sync_catalog();
}

static void set_db_limits(uint8_t cmd, uint64_t scan, uint64_t batch_bytes, uint64_t read_bytes)
{
    set_limits(cmd, scan, batch_bytes, read_bytes, 0);
}

START_TEST(retention_record_bound_exact_and_one_over)
{
    /* MaxScanRecords is also each request's scan budget, which a Create stays well under. */
    set_db_limits(0x50, 12, 0, 0);
    for (uint8_t i = 0; i < 12; i++) {
        blob t = create_ok((uint8_t)(0xC0 + i), NULL, (uint8_t)(100 + i), "dst", "x");
        free(t.p);
    }
    th_reply r = create_req(0x55, NULL, 24, "dst", "x");
    expect_err(&r, KL_RESOURCE_EXHAUSTED, "limit:MaxScanRecords");
    ck_assert_uint_eq(state_of(NULL, 24), 0);
    /* Another lane has its own count. */
    blob t = create_ok(0x56, "other", 24, "dst", "x");
    free(t.p);
}
END_TEST

START_TEST(retention_byte_bound_exact_and_one_over)
{
    blob t = create_ok(0x60, NULL, 30, "dst", "same size body");
    free(t.p);
    uint64_t recs, charge;
    lane_counters(&S, "src", "default", &recs, &charge);
    ck_assert_uint_eq(recs, 1);
    ck_assert_uint_gt(charge, 200);
    /* Exactly two records' bytes: the second fits, the third does not. */
    set_db_limits(0x61, 0, 2 * charge, 0);
    t = create_ok(0x62, NULL, 31, "dst", "same size body");
    free(t.p);
    uint64_t bytes;
    lane_counters(&S, "src", "default", &recs, &bytes);
    ck_assert_uint_eq(bytes, 2 * charge);
    th_reply r = create_req(0x63, NULL, 32, "dst", "same size body");
    expect_err(&r, KL_RESOURCE_EXHAUSTED, "limit:MaxBatchBytes");
    lane_counters(&S, "src", "default", &recs, &bytes);
    ck_assert_uint_eq(recs, 2);
    /* One byte less on a fresh lane (a name as long as "default": the same charge): the
     * second is refused. */
    set_db_limits(0x64, 0, 2 * charge - 1, 0);
    t = create_ok(0x65, "lane_b2", 33, "dst", "same size body");
    free(t.p);
    th_reply r2 = create_req(0x66, "lane_b2", 34, "dst", "same size body");
    expect_err(&r2, KL_RESOURCE_EXHAUSTED, "limit:MaxBatchBytes");
}
END_TEST

START_TEST(retention_token_bound)
{
    /* A message whose Accept batch could not fit MaxBatchBytes is never admitted. */
    set_db_limits(0x70, 0, 4096, 0);
    char body[3900];
    memset(body, 'b', sizeof body - 1);
    body[sizeof body - 1] = 0;
    th_reply r = create_req(0x71, NULL, 40, "dst", body);
    expect_err(&r, KL_RESOURCE_EXHAUSTED, "limit:MaxBatchBytes");
    ck_assert_uint_eq(state_of(NULL, 40), 0);
    uint64_t recs, bytes;
    lane_counters(&S, "src", "default", &recs, &bytes);
    ck_assert_uint_eq(recs, 0);
}
END_TEST

START_TEST(retention_ack_and_removal_keep_records)
{
    blob receipt = to_receipt(0x72, 41, "keep me");
    /* Acknowledge the destination message, then Accept again: deduplicated, nothing new. */
    th_batch *rb = th_batch_new(0x73);
    th_receive(rb, "dst", NULL, 1, 30000);
    Keyload__V1__BatchReceipt *rr = th_run(&D, rb, KL_OK);
    ck_assert_uint_eq(rr->results[0]->received->n_messages, 1);
    th_batch *ab = th_batch_new(0x74);
    th_ack(ab, "dst", rr->results[0]->received->messages[0]->lease_token.data, 1);
    keyload__v1__batch_receipt__free_unpacked(rr, NULL);
    keyload__v1__batch_receipt__free_unpacked(th_run(&D, ab, KL_OK), NULL);
    ck_assert_uint_eq(th_queue_messages(&D, "dst", NULL), 0);
    Keyload__V1__InspectQueueTransferAnswer *a = inspect(NULL, 41);
    blob intent;
    blob_set(&intent, a->intent_token.data, a->intent_token.len);
    keyload__v1__inspect_queue_transfer_answer__free_unpacked(a, NULL);
    th_reply again = accept_req(0x75, "dst", NULL, &intent);
    Keyload__V1__BatchReceipt *rc;
    ck_assert(only_result(&again, &rc)->transfer_accepted->deduplicated);
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    th_reply_free(&again);
    ck_assert_uint_eq(th_queue_messages(&D, "dst", NULL), 0); /* not resurrected */
    blob same = read_receipt(NULL, 41);
    ck_assert_uint_eq(same.n, receipt.n);
    ck_assert_mem_eq(same.p, receipt.p, receipt.n);
    /* The source queue's own messages come and go without touching the intent. */
    th_batch *eb = th_batch_new(0x76);
    th_enqueue(eb, "src", NULL, "ordinary");
    keyload__v1__batch_receipt__free_unpacked(th_run(&S, eb, KL_OK), NULL);
    th_batch *rb2 = th_batch_new(0x77);
    th_receive(rb2, "src", NULL, 1, 30000);
    rr = th_run(&S, rb2, KL_OK);
    th_batch *ab2 = th_batch_new(0x78);
    th_ack(ab2, "src", rr->results[0]->received->messages[0]->lease_token.data, 1);
    keyload__v1__batch_receipt__free_unpacked(rr, NULL);
    keyload__v1__batch_receipt__free_unpacked(th_run(&S, ab2, KL_OK), NULL);
    ck_assert_uint_eq(state_of(NULL, 41), KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING);
    /* Queues retaining transfer records cannot be deleted (nothing is collected). */
    th_batch *db = th_batch_new(0x79);
    th_delete(db, "src");
    kl_err err;
    th_run_err(&S, db, KL_FAILED_PRECONDITION, &err);
    ck_assert_str_eq(err.detail, "queue_has_transfers");
    th_batch *dd = th_batch_new(0x7A);
    th_delete(dd, "dst");
    th_run_err(&D, dd, KL_FAILED_PRECONDITION, &err);
    ck_assert_str_eq(err.detail, "queue_has_transfers");
    free(same.p);
    free(intent.p);
    free(receipt.p);
}
END_TEST


START_TEST(retention_catalog_drop_keeps_transfer_records)
{
    /* Partition 0 drops the definition of a source queue (a client skipping the SDK's
     * close step): the source partition keeps the queue's records, because it retains
     * a transfer intent, so the intent stays reachable. */
    blob t = create_ok(0x7B, NULL, 42, "dst", "kept");
    th_batch *db = th_batch_new(0x7C);
    th_delete(db, "src");
    keyload__v1__batch_receipt__free_unpacked(th_run(&A, db, KL_OK), NULL);
    sync_catalog();
    Keyload__V1__InspectQueueTransferAnswer *a = inspect(NULL, 42);
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_eq(a->state, KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING);
    ck_assert_mem_eq(a->intent_token.data, t.p, t.n);
    keyload__v1__inspect_queue_transfer_answer__free_unpacked(a, NULL);
    free(t.p);
}
END_TEST

static th_reply pause_req(th_node *t, uint8_t cmd, const char *queue, bool paused)
{
    Keyload__V1__QueueLaneRef s;
    ref(&s, queue ? queue : "src", NULL);
    Keyload__V1__SetQueueTransfersPaused p = KEYLOAD__V1__SET_QUEUE_TRANSFERS_PAUSED__INIT;
    p.tenant = "default";
    p.database = "default";
    p.source_queue = queue ? &s : NULL;
    p.paused = paused;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_SET_QUEUE_TRANSFERS_PAUSED;
    m.set_queue_transfers_paused = &p;
    size_t len;
    uint8_t *req = pack1(cmd, &m, &len);
    return submit(t, req, len);
}

START_TEST(retention_pause_keeps_everything)
{
    blob intent = create_ok(0x80, NULL, 50, "dst", "before pause");
    th_reply p = pause_req(&S, 0x81, "src", true);
    ck_assert_int_eq(p.code, KL_OK);
    th_reply_free(&p);
    th_reply r = create_req(0x82, NULL, 51, "dst", "while paused");
    expect_err(&r, KL_FAILED_PRECONDITION, "transfers_paused");
    /* The pending one still goes through to Delivered. */
    th_reply a = accept_req(0x83, "dst", NULL, &intent);
    ck_assert_int_eq(a.code, KL_OK);
    th_reply_free(&a);
    blob receipt = read_receipt(NULL, 50);
    th_reply c = complete_req(0x84, NULL, 50, &receipt);
    ck_assert_int_eq(c.code, KL_OK);
    th_reply_free(&c);
    th_reply res = pause_req(&S, 0x85, "src", false);
    ck_assert_int_eq(res.code, KL_OK);
    th_reply_free(&res);
    blob t = create_ok(0x86, NULL, 51, "dst", "after resume");
    free(t.p);
    /* The database switch is a catalog change that reaches the partition. */
    th_reply dbp = pause_req(&A, 0x87, NULL, true);
    ck_assert_int_eq(dbp.code, KL_OK);
    th_reply_free(&dbp);
    sync_catalog();
    th_reply r2 = create_req(0x88, "x", 52, "dst", "db paused");
    expect_err(&r2, KL_FAILED_PRECONDITION, "transfers_paused");
    ck_assert_uint_eq(state_of(NULL, 51), KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING);
    free(receipt.p);
    free(intent.p);
}
END_TEST

/* ---- Coordination reads (COORDINATION-READ-001) ---- */

static kl_code list_pending(uint32_t max, const blob *cursor, Keyload__V1__ListPendingQueueTransfersAnswer **out,
                            kl_err *err)
{
    Keyload__V1__ListPendingQueueTransfersRequest q = KEYLOAD__V1__LIST_PENDING_QUEUE_TRANSFERS_REQUEST__INIT;
    q.tenant = "default";
    q.database = "default";
    q.max_items = max;
    if (cursor) {
        q.cursor.data = cursor->p;
        q.cursor.len = cursor->n;
    }
    uint8_t buf[1024];
    size_t n = keyload__v1__list_pending_queue_transfers_request__pack(&q, buf);
    uint8_t *ans;
    size_t alen;
    kl_code rc = kl_node_transfer_read(S.node, KL_NODE_PENDING_TRANSFERS, "local", buf, n, &ans, &alen, err);
    *out = NULL;
    if (rc == KL_OK) {
        *out = keyload__v1__list_pending_queue_transfers_answer__unpack(NULL, alen, ans);
        free(ans);
    }
    return rc;
}

START_TEST(coordination_read_bounds_exact_and_one_over)
{
    for (uint8_t i = 0; i < 3; i++) {
        blob t = create_ok((uint8_t)(0x90 + i), NULL, (uint8_t)(60 + i), "dst", "pending");
        free(t.p);
    }
    Keyload__V1__ListPendingQueueTransfersAnswer *a;
    kl_err err;
    kl_code lrc = list_pending(2, NULL, &a, &err);
    ck_assert_msg(lrc == KL_OK, "list: %s %s %s", kl_code_name(lrc), err.detail, err.message);
    ck_assert_uint_eq(a->n_items, 2);
    ck_assert(!a->done);
    /* principal + database + 2 x (index entry + intent) + the look-ahead entry */
    ck_assert_uint_eq(a->records_charged, 7);
    uint64_t bytes = a->bytes_charged;
    blob cursor;
    blob_set(&cursor, a->next_cursor.data, a->next_cursor.len);
    keyload__v1__list_pending_queue_transfers_answer__free_unpacked(a, NULL);
    /* The rest, from the cursor. */
    ck_assert_int_eq(list_pending(2, &cursor, &a, &err), KL_OK);
    ck_assert_uint_eq(a->n_items, 1);
    ck_assert(a->done);
    keyload__v1__list_pending_queue_transfers_answer__free_unpacked(a, NULL);
    /* Exact record bound passes, one under refuses with nothing. */
    set_db_limits(0x94, 7, 0, 0);
    ck_assert_int_eq(list_pending(2, NULL, &a, &err), KL_OK);
    ck_assert_uint_eq(a->n_items, 2);
    keyload__v1__list_pending_queue_transfers_answer__free_unpacked(a, NULL);
    set_db_limits(0x95, 6, 0, 0);
    ck_assert_int_eq(list_pending(2, NULL, &a, &err), KL_RESOURCE_EXHAUSTED);
    ck_assert_str_eq(err.detail, "limit:MaxScanRecords");
    ck_assert_ptr_null(a);
    /* Bytes likewise. The database record is charged too and holds the limit itself, so
     * measure under a limit of the same varint width (2 bytes) as the exact one. */
    set_db_limits(0x99, 0, 0, 16383);
    ck_assert_int_eq(list_pending(2, NULL, &a, &err), KL_OK);
    bytes = a->bytes_charged;
    ck_assert_uint_gt(bytes, 128);
    keyload__v1__list_pending_queue_transfers_answer__free_unpacked(a, NULL);
    set_db_limits(0x96, 0, 0, bytes);
    ck_assert_int_eq(list_pending(2, NULL, &a, &err), KL_OK);
    ck_assert_uint_eq(a->bytes_charged, bytes);
    keyload__v1__list_pending_queue_transfers_answer__free_unpacked(a, NULL);
    set_db_limits(0x97, 0, 0, bytes - 1);
    ck_assert_int_eq(list_pending(2, NULL, &a, &err), KL_RESOURCE_EXHAUSTED);
    ck_assert_str_eq(err.detail, "limit:MaxQueryReadBytes");
    ck_assert_ptr_null(a);
    /* A cursor from another incarnation restarts from the beginning. */
    Keyload__V1__PendingCursor *pc = keyload__v1__pending_cursor__unpack(NULL, cursor.n, cursor.p);
    pc->partition_incarnation.data[0] ^= 0xff;
    blob foreign;
    foreign.n = keyload__v1__pending_cursor__get_packed_size(pc);
    foreign.p = malloc(foreign.n);
    keyload__v1__pending_cursor__pack(pc, foreign.p);
    keyload__v1__pending_cursor__free_unpacked(pc, NULL);
    set_db_limits(0x98, 0, 0, 0);
    ck_assert_int_eq(list_pending(10, &foreign, &a, &err), KL_OK);
    ck_assert(a->cursor_reset);
    ck_assert_uint_eq(a->n_items, 3);
    keyload__v1__list_pending_queue_transfers_answer__free_unpacked(a, NULL);
    free(foreign.p);
    free(cursor.p);
}
END_TEST

/* One test case per acceptance criterion, each test on fresh stores. */

/* ---- RemoteTransferAdvanceTests (KL-6: capacity retry and policy repair) ---- */

/* set_db_limits with a MaxQueueTransferAcceptAttempts ceiling (0: null). */
static void set_attempts(uint8_t cmd, uint64_t scan, uint64_t batch_bytes, uint64_t attempts)
{
    set_limits(cmd, scan, batch_bytes, 0, attempts);
}

/* pack1's command id for cmd_byte. */
static void cmd_of(uint8_t cmd[16], uint8_t cmd_byte)
{
    memset(cmd, 0x33, 16);
    cmd[0] = cmd_byte;
}

/* ReadQueueTransferFailure on D; NULL when it answers an error (checked against want). */
static Keyload__V1__ReadQueueTransferFailureAnswer *failure_read(const char *dst, const blob *token,
                                                                 uint8_t failed_cmd, kl_code want,
                                                                 const char *want_detail)
{
    Keyload__V1__QueueLaneRef d;
    ref(&d, dst, "default");
    uint8_t cmd[16];
    cmd_of(cmd, failed_cmd);
    Keyload__V1__ReadQueueTransferFailureRequest q = KEYLOAD__V1__READ_QUEUE_TRANSFER_FAILURE_REQUEST__INIT;
    q.destination_queue = &d;
    q.intent_token.data = token->p;
    q.intent_token.len = token->n;
    q.failed_command_id.data = cmd;
    q.failed_command_id.len = 16;
    size_t n = keyload__v1__read_queue_transfer_failure_request__get_packed_size(&q);
    uint8_t *buf = malloc(n);
    keyload__v1__read_queue_transfer_failure_request__pack(&q, buf);
    uint8_t *ans;
    size_t alen;
    kl_err err;
    kl_code rc = kl_node_transfer_read(D.node, KL_NODE_TRANSFER_FAILURE, "local", buf, n, &ans, &alen, &err);
    free(buf);
    ck_assert_msg(rc == want, "failure read: want %s, got %s %s: %s", kl_code_name(want), kl_code_name(rc),
                  err.detail, err.message);
    if (rc != KL_OK) {
        if (want_detail)
            ck_assert_str_eq(err.detail, want_detail);
        return NULL;
    }
    Keyload__V1__ReadQueueTransferFailureAnswer *a =
        keyload__v1__read_queue_transfer_failure_answer__unpack(NULL, alen, ans);
    free(ans);
    ck_assert_ptr_nonnull(a);
    /* principal, database, queue, receipt (and the outcome when there is no receipt) */
    ck_assert_uint_ge(a->records_charged, a->verdict == KEYLOAD__V1__FAILURE_VERDICT__RECEIPT_EXISTS ? 4 : 5);
    return a;
}

static th_reply advance_req(uint8_t cmd, uint8_t tidb, const blob *witness, bool repair)
{
    uint8_t tid[16];
    tid_of(tid, tidb);
    Keyload__V1__QueueLaneRef s;
    ref(&s, "src", NULL);
    Keyload__V1__AdvanceQueueTransferAttempt a = KEYLOAD__V1__ADVANCE_QUEUE_TRANSFER_ATTEMPT__INIT;
    Keyload__V1__AdvanceQueueTransferRepair rp = KEYLOAD__V1__ADVANCE_QUEUE_TRANSFER_REPAIR__INIT;
    a.source_queue = rp.source_queue = &s;
    a.transfer_id.data = rp.transfer_id.data = tid;
    a.transfer_id.len = rp.transfer_id.len = 16;
    a.witness_token.data = rp.witness_token.data = witness->p;
    a.witness_token.len = rp.witness_token.len = witness->n;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    if (repair) {
        m.kind_case = KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_REPAIR;
        m.advance_queue_transfer_repair = &rp;
    } else {
        m.kind_case = KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_ATTEMPT;
        m.advance_queue_transfer_attempt = &a;
    }
    size_t len;
    uint8_t *req = pack1(cmd, &m, &len);
    return submit(&S, req, len);
}

/* Fills "small" (one message) on D, and empties it. */
static void fill_small(uint8_t cmd)
{
    th_batch *b = th_batch_new(cmd);
    th_enqueue(b, "small", NULL, "filler");
    keyload__v1__batch_receipt__free_unpacked(th_run(&D, b, KL_OK), NULL);
}
static void drain_small(uint8_t cmd)
{
    th_batch *rb = th_batch_new(cmd);
    th_receive(rb, "small", NULL, 1, 30000);
    Keyload__V1__BatchReceipt *rr = th_run(&D, rb, KL_OK);
    ck_assert_uint_eq(rr->results[0]->received->n_messages, 1);
    th_batch *ab = th_batch_new((uint8_t)(cmd + 1));
    th_ack(ab, "small", rr->results[0]->received->messages[0]->lease_token.data, 1);
    keyload__v1__batch_receipt__free_unpacked(rr, NULL);
    keyload__v1__batch_receipt__free_unpacked(th_run(&D, ab, KL_OK), NULL);
}

/* The stored size of the intent record of tidb on S. */
static size_t intent_stored_size(uint8_t tidb)
{
    kl_view v = {.store = S.store, .scan_limit = UINT64_MAX};
    kl_key k;
    kl_err err;
    kl_key_queue_name(&k, "default", "default", "src");
    uint8_t *val;
    size_t n;
    bool found;
    ck_assert_int_eq(kl_view_get(&v, k.b, k.len, &val, &n, &found, &err), KL_OK);
    ck_assert(found);
    uint64_t qid = kl_be64_get(val);
    free(val);
    uint8_t tid[16];
    tid_of(tid, tidb);
    kl_key_transfer(&k, qid, "default", tid);
    ck_assert_int_eq(kl_view_get(&v, k.b, k.len, &val, &n, &found, &err), KL_OK);
    ck_assert(found);
    free(val);
    return n;
}

/* Runs the capacity failure of tidb's current token to a witness: Accept (cmd) refused
 * RESOURCE_EXHAUSTED while "small" is full, UNCHANGED while it stays full, then a witness
 * once room was made. */
static blob capacity_witness(uint8_t cmd, uint8_t tidb, const blob *token)
{
    fill_small((uint8_t)(cmd + 1));
    th_reply r = accept_req(cmd, "small", NULL, token);
    expect_err(&r, KL_RESOURCE_EXHAUSTED, NULL);
    Keyload__V1__ReadQueueTransferFailureAnswer *a = failure_read("small", token, cmd, KL_OK, NULL);
    ck_assert_int_eq(a->verdict, KEYLOAD__V1__FAILURE_VERDICT__UNCHANGED);
    ck_assert_int_eq(a->failure_code, KL_RESOURCE_EXHAUSTED);
    ck_assert_uint_eq(a->witness_token.len, 0);
    keyload__v1__read_queue_transfer_failure_answer__free_unpacked(a, NULL);
    drain_small((uint8_t)(cmd + 2));
    a = failure_read("small", token, cmd, KL_OK, NULL);
    ck_assert_int_eq(a->verdict, KEYLOAD__V1__FAILURE_VERDICT__WITNESS_ISSUED);
    blob w;
    blob_set(&w, a->witness_token.data, a->witness_token.len);
    keyload__v1__read_queue_transfer_failure_answer__free_unpacked(a, NULL);
    (void)tidb;
    return w;
}

static Keyload__V1__TransferAdvanced *advanced_of(th_reply *r, Keyload__V1__BatchReceipt **rc)
{
    Keyload__V1__MutationResult *res = only_result(r, rc);
    ck_assert_int_eq(res->kind_case, KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ADVANCED);
    return res->transfer_advanced;
}

START_TEST(advance_capacity_retry_delivers_once_at_next_generation)
{
    set_attempts(0xD0, 0, 0, 3);
    blob intent = create_ok(0xD1, NULL, 70, "small", "payload");
    Keyload__V1__InspectQueueTransferAnswer *i = inspect(NULL, 70);
    ck_assert_uint_eq(i->reserved_records, 2);
    ck_assert_uint_eq(i->retained_records, 3);
    uint64_t reserve_each = i->reserved_bytes / 2;
    ck_assert_uint_gt(reserve_each, intent.n);
    keyload__v1__inspect_queue_transfer_answer__free_unpacked(i, NULL);
    uint64_t recs0, bytes0;
    lane_counters(&S, "src", "default", &recs0, &bytes0);
    ck_assert_uint_eq(recs0, 3);
    /* Nothing failed under this command id yet: no failure authority. */
    Keyload__V1__ReadQueueTransferFailureAnswer *none = failure_read("small", &intent, 0xD2, KL_NOT_FOUND,
                                                                     "failed_command_id");
    ck_assert_ptr_null(none);
    blob w = capacity_witness(0xD2, 70, &intent);
    size_t before = intent_stored_size(70);
    th_reply r = advance_req(0xD6, 70, &w, false);
    Keyload__V1__BatchReceipt *rc;
    Keyload__V1__TransferAdvanced *adv = advanced_of(&r, &rc);
    ck_assert_uint_eq(adv->generation, 2);
    ck_assert(!adv->already);
    blob next;
    blob_set(&next, adv->intent_token.data, adv->intent_token.len);
    uint64_t exact = adv->charged_bytes;
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    th_reply_free(&r);
    /* One record plus its exact bytes: the stored record grew by exactly what was charged,
     * and the lane gave back the rest of the one advance it had reserved. */
    ck_assert_uint_eq(intent_stored_size(70) - before, exact);
    uint64_t recs1, bytes1;
    lane_counters(&S, "src", "default", &recs1, &bytes1);
    ck_assert_uint_eq(recs1, recs0);
    ck_assert_uint_eq(bytes0 - bytes1, reserve_each - exact);
    i = inspect(NULL, 70);
    ck_assert_uint_eq(i->generation, 2);
    ck_assert_uint_eq(i->attempt_advances, 1);
    ck_assert_uint_eq(i->reserved_records, 1);
    ck_assert_uint_eq(i->retained_records, 3);
    ck_assert_uint_eq(i->n_history, 2);
    ck_assert_int_eq(i->history[1]->event, KEYLOAD__V1__TRANSFER_EVENT__ATTEMPT_ADVANCED);
    ck_assert_int_eq(i->history[1]->failure_code, KL_RESOURCE_EXHAUSTED);
    ck_assert(i->current_token.len == next.n && memcmp(i->current_token.data, next.p, next.n) == 0);
    ck_assert(i->intent_token.len == intent.n && memcmp(i->intent_token.data, intent.p, intent.n) == 0);
    keyload__v1__inspect_queue_transfer_answer__free_unpacked(i, NULL);
    /* The same witness again, under another command id: the advance it made, not a second. */
    th_reply again = advance_req(0xD7, 70, &w, false);
    adv = advanced_of(&again, &rc);
    ck_assert(adv->already);
    ck_assert_uint_eq(adv->generation, 2);
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    th_reply_free(&again);
    /* The next generation's Accept enqueues exactly once; its receipt says generation 2. */
    th_reply ok = accept_req(0xD8, "small", NULL, &next);
    ck_assert_int_eq(ok.code, KL_OK);
    th_reply_free(&ok);
    ck_assert_uint_eq(th_queue_messages(&D, "small", NULL), 1);
    blob receipt = read_receipt(NULL, 70);
    (void)receipt;
    free(receipt.p);
    Keyload__V1__QueueLaneRef dref;
    ref(&dref, "small", NULL);
    /* The receipt wins over any later failure read, and over the generation-1 token. */
    Keyload__V1__ReadQueueTransferFailureAnswer *fa = failure_read("small", &intent, 0xD2, KL_OK, NULL);
    ck_assert_int_eq(fa->verdict, KEYLOAD__V1__FAILURE_VERDICT__RECEIPT_EXISTS);
    blob rcpt;
    blob_set(&rcpt, fa->receipt_token.data, fa->receipt_token.len);
    keyload__v1__read_queue_transfer_failure_answer__free_unpacked(fa, NULL);
    Keyload__V1__TransferClaims *rcl;
    kl_err err;
    ck_assert_int_eq(kl_claims_decode("receipt_token", rcpt.p, rcpt.n, NULL, &rcl, &err), KL_OK);
    ck_assert_uint_eq(rcl->generation, 2);
    keyload__v1__transfer_claims__free_unpacked(rcl, NULL);
    th_reply dup = accept_req(0xD9, "small", NULL, &intent);
    ck_assert(only_result(&dup, &rc)->transfer_accepted->deduplicated);
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    th_reply_free(&dup);
    ck_assert_uint_eq(th_queue_messages(&D, "small", NULL), 1);
    /* Complete with it: Delivered, and the unused reservation goes back to the lane. */
    th_reply done = complete_req(0xDA, NULL, 70, &rcpt);
    ck_assert_int_eq(done.code, KL_OK);
    th_reply_free(&done);
    ck_assert_uint_eq(state_of(NULL, 70), KEYLOAD__V1__TRANSFER_STATE__DELIVERED);
    uint64_t recs2, bytes2;
    lane_counters(&S, "src", "default", &recs2, &bytes2);
    ck_assert_uint_eq(recs2, recs1 - 1);
    ck_assert_uint_eq(bytes2, bytes1 - reserve_each);
    /* A delivered transfer takes no advance, even with a fresh command id. */
    th_reply late = advance_req(0xDB, 70, &w, false);
    expect_err(&late, KL_FAILED_PRECONDITION, "state");
    free(rcpt.p);
    free(next.p);
    free(w.p);
    free(intent.p);
}
END_TEST

static void w_purpose(Keyload__V1__TransferClaims *c) { c->purpose = KEYLOAD__V1__CLAIM_PURPOSE__TRANSFER_RECEIPT; }
static void w_generation(Keyload__V1__TransferClaims *c) { c->generation = 2; }
static void w_transfer(Keyload__V1__TransferClaims *c) { c->transfer_id.data[1] ^= 1; }
static void w_code(Keyload__V1__TransferClaims *c) { c->failure_code = KL_PERMISSION_DENIED; }
static void w_command(Keyload__V1__TransferClaims *c) { memset(c->failed_command_id.data, 0, c->failed_command_id.len); }

START_TEST(advance_witness_forgeries_refused_generation_unchanged)
{
    set_attempts(0xE0, 0, 0, 3);
    blob intent = create_ok(0xE1, NULL, 71, "small", "payload");
    blob w = capacity_witness(0xE2, 71, &intent);
    struct {
        void (*edit)(Keyload__V1__TransferClaims *);
        const char *detail;
    } cases[] = {
        {w_purpose, "witness:purpose"},       {w_generation, "witness:generation"},
        {w_transfer, "witness:transfer_id"},  {w_code, "witness:failure_code"},
        {w_command, "witness:failed_command_id"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        blob bad = resign(&w, cases[k].edit);
        th_reply r = advance_req((uint8_t)(0xE8 + k), 71, &bad, false);
        expect_err(&r, KL_FAILED_PRECONDITION, cases[k].detail);
        /* Committed: the same command id answers the same. */
        th_reply again = advance_req((uint8_t)(0xE8 + k), 71, &bad, false);
        expect_err(&again, KL_FAILED_PRECONDITION, cases[k].detail);
        free(bad.p);
    }
    /* A tampered signature, and a genuine witness offered to the repair. */
    blob tampered;
    blob_set(&tampered, w.p, w.n);
    tampered.p[tampered.n - 1] ^= 1;
    th_reply r = advance_req(0xF0, 71, &tampered, false);
    expect_err(&r, KL_PERMISSION_DENIED, "witness_signature");
    th_reply rep = advance_req(0xF1, 71, &w, true);
    expect_err(&rep, KL_FAILED_PRECONDITION, "witness:failure_code");
    /* The failure read signs nothing for an outcome that is not a failed Accept: the
     * Create's command id was a success on another partition, a foreign one is absent. */
    ck_assert_ptr_null(failure_read("small", &intent, 0xE1, KL_NOT_FOUND, "failed_command_id"));
    fill_small(0xF2);
    th_reply okacc = accept_req(0xF4, "dst", NULL, &intent); /* wrong target: refused, committed */
    expect_err(&okacc, KL_INVALID_ARGUMENT, "destination_queue");
    ck_assert_ptr_null(failure_read("small", &intent, 0xF4, KL_FAILED_PRECONDITION, "failure_authority"));
    Keyload__V1__InspectQueueTransferAnswer *i = inspect(NULL, 71);
    ck_assert_uint_eq(i->generation, 1);
    ck_assert_uint_eq(i->attempt_advances, 0);
    ck_assert_uint_eq(i->n_history, 1);
    keyload__v1__inspect_queue_transfer_answer__free_unpacked(i, NULL);
    free(tampered.p);
    free(w.p);
    free(intent.p);
}
END_TEST

START_TEST(advance_ceiling_refused_exactly_at_max_attempts)
{
    set_attempts(0x80, 0, 0, 2);
    blob intent = create_ok(0x81, NULL, 72, "small", "payload");
    blob w1 = capacity_witness(0x82, 72, &intent);
    th_reply r = advance_req(0x86, 72, &w1, false);
    Keyload__V1__BatchReceipt *rc;
    Keyload__V1__TransferAdvanced *adv = advanced_of(&r, &rc);
    blob g2;
    blob_set(&g2, adv->intent_token.data, adv->intent_token.len);
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    th_reply_free(&r);
    /* Attempt 2 (the ceiling) fails too; its witness cannot advance to a third. */
    blob w2 = capacity_witness(0x88, 72, &g2);
    th_reply over = advance_req(0x8C, 72, &w2, false);
    expect_err(&over, KL_RESOURCE_EXHAUSTED, "limit:MaxQueueTransferAcceptAttempts");
    Keyload__V1__InspectQueueTransferAnswer *i = inspect(NULL, 72);
    ck_assert_uint_eq(i->generation, 2);
    ck_assert_uint_eq(i->reserved_records, 0);
    keyload__v1__inspect_queue_transfer_answer__free_unpacked(i, NULL);
    /* A null ceiling (the default) reserves nothing and takes no attempt advance. */
    set_attempts(0x8D, 0, 0, 0);
    blob n1 = create_ok(0x8E, NULL, 73, "small", "payload");
    i = inspect(NULL, 73);
    ck_assert_uint_eq(i->reserved_records, 0);
    ck_assert_ptr_null(i->max_accept_attempts);
    keyload__v1__inspect_queue_transfer_answer__free_unpacked(i, NULL);
    blob wn = capacity_witness(0x90, 73, &n1);
    th_reply off = advance_req(0x94, 73, &wn, false);
    expect_err(&off, KL_FAILED_PRECONDITION, "max_queue_transfer_accept_attempts");
    free(wn.p);
    free(n1.p);
    free(w2.p);
    free(g2.p);
    free(w1.p);
    free(intent.p);
}
END_TEST

START_TEST(advance_reservation_counts_against_lane_exact_and_one_over)
{
    /* A ceiling of 4 reserves 3 advances: each intent holds 4 of the lane's records. */
    set_attempts(0xA6, 12, 0, 4);
    for (uint8_t k = 0; k < 3; k++) {
        blob t = create_ok((uint8_t)(0xA7 + k), NULL, (uint8_t)(74 + k), "dst", "x");
        free(t.p);
    }
    uint64_t recs, bytes;
    lane_counters(&S, "src", "default", &recs, &bytes);
    ck_assert_uint_eq(recs, 12);
    th_reply r = create_req(0xAB, NULL, 77, "dst", "x");
    expect_err(&r, KL_RESOURCE_EXHAUSTED, "limit:MaxScanRecords");
    /* Bytes, on fresh lanes named as long as "default" (the same charge): exactly two
     * intents' worth admits two, one byte less only one. */
    uint64_t one = bytes / 3;
    ck_assert_uint_eq(one * 3, bytes);
    set_attempts(0xAC, 0, 2 * one, 4);
    for (uint8_t k = 0; k < 2; k++) {
        blob t = create_ok((uint8_t)(0xB0 + k), "lane_c1", (uint8_t)(78 + k), "dst", "x");
        free(t.p);
    }
    lane_counters(&S, "src", "lane_c1", &recs, &bytes);
    ck_assert_uint_eq(bytes, 2 * one);
    th_reply r2 = create_req(0xB2, "lane_c1", 80, "dst", "x");
    expect_err(&r2, KL_RESOURCE_EXHAUSTED, "limit:MaxBatchBytes");
    set_attempts(0xB3, 0, 2 * one - 1, 4);
    blob t = create_ok(0xB4, "lane_c2", 81, "dst", "x");
    free(t.p);
    th_reply r3 = create_req(0xB5, "lane_c2", 82, "dst", "x");
    expect_err(&r3, KL_RESOURCE_EXHAUSTED, "limit:MaxBatchBytes");
}
END_TEST

static TCase *criterion(Suite *s, const char *name)
{
    TCase *t = tcase_create(name);
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 60);
    suite_add_tcase(s, t);
    return t;
}

Suite *suite_transfer(void)
{
    Suite *s = suite_create("transfer");
    TCase *intent = criterion(s, "RemoteTransferIntentTests");
    tcase_add_test(intent, intent_same_identity_replays_changes_conflict);
    tcase_add_test(intent, intent_batch_rollback_creates_nothing);
    tcase_add_test(intent, intent_survives_reopen);
    tcase_add_test(intent, intent_refuses_same_partition);
    tcase_add_test(intent, fingerprint_is_canonical);
    TCase *dest = criterion(s, "RemoteTransferDestinationTests");
    tcase_add_test(dest, destination_once_and_byte_identical);
    tcase_add_test(dest, destination_quota_failure_leaves_nothing_and_is_committed);
    tcase_add_test(dest, destination_refuses_bad_intents);
    tcase_add_test(dest, destination_refuses_expired_message);
    TCase *rcpt = criterion(s, "RemoteTransferReceiptTests");
    tcase_add_test(rcpt, receipt_mismatches_refuse_and_keep_pending);
    tcase_add_test(rcpt, claims_verify_with_secret_accepts_exactly_what_verify_accepts);
    tcase_add_test(rcpt, claims_own_signature_is_exactly_the_deterministic_one);
    TCase *ret = criterion(s, "RemoteTransferRetentionTests");
    tcase_add_test(ret, retention_record_bound_exact_and_one_over);
    tcase_add_test(ret, retention_byte_bound_exact_and_one_over);
    tcase_add_test(ret, retention_token_bound);
    tcase_add_test(ret, retention_ack_and_removal_keep_records);
    tcase_add_test(ret, retention_pause_keeps_everything);
    tcase_add_test(ret, retention_catalog_drop_keeps_transfer_records);
    TCase *coord = criterion(s, "CoordinationReadTests");
    tcase_add_test(coord, coordination_read_bounds_exact_and_one_over);
    TCase *adv = criterion(s, "RemoteTransferAdvanceTests");
    tcase_add_test(adv, advance_capacity_retry_delivers_once_at_next_generation);
    tcase_add_test(adv, advance_witness_forgeries_refused_generation_unchanged);
    tcase_add_test(adv, advance_ceiling_refused_exactly_at_max_attempts);
    tcase_add_test(adv, advance_reservation_counts_against_lane_exact_and_one_over);
    return s;
}
