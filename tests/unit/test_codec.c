/* Codec round-trips and the canonical encoding behind request digests. */
#include "common/canon.h"
#include "keyload/v1/queue.pb-c.h"
#include "keyload/v1/rpc.pb-c.h"

#include <check.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

START_TEST(envelope_round_trip)
{
    Keyload__V1__Envelope e = KEYLOAD__V1__ENVELOPE__INIT;
    e.version = 1;
    e.method = "keyload.v1.Batch";
    e.request_id = 77;
    e.deadline_unix_ms = 1234567890123;
    uint8_t sid[16] = {1, 2, 3};
    e.session_id.data = sid;
    e.session_id.len = 16;
    e.counter = 9;
    e.payload.data = (uint8_t *)"abc";
    e.payload.len = 3;
    size_t n = keyload__v1__envelope__get_packed_size(&e);
    uint8_t *buf = malloc(n);
    keyload__v1__envelope__pack(&e, buf);
    Keyload__V1__Envelope *d = keyload__v1__envelope__unpack(NULL, n, buf);
    ck_assert_ptr_nonnull(d);
    ck_assert_str_eq(d->method, "keyload.v1.Batch");
    ck_assert_uint_eq(d->request_id, 77);
    ck_assert_int_eq(d->deadline_unix_ms, 1234567890123);
    ck_assert_uint_eq(d->counter, 9);
    ck_assert_uint_eq(d->session_id.len, 16);
    ck_assert_mem_eq(d->payload.data, "abc", 3);
    keyload__v1__envelope__free_unpacked(d, NULL);
    /* A truncated frame must not decode. */
    ck_assert_ptr_null(keyload__v1__envelope__unpack(NULL, n - 2, buf));
    free(buf);

    Keyload__V1__Answer a = KEYLOAD__V1__ANSWER__INIT;
    a.request_id = 77;
    a.code = KEYLOAD__V1__STATUS_CODE__CONFLICT;
    a.message = "command_id was already used";
    a.detail = "command_id_reused";
    n = keyload__v1__answer__get_packed_size(&a);
    buf = malloc(n);
    keyload__v1__answer__pack(&a, buf);
    Keyload__V1__Answer *da = keyload__v1__answer__unpack(NULL, n, buf);
    ck_assert_int_eq(da->code, 5);
    ck_assert_str_eq(da->detail, "command_id_reused");
    keyload__v1__answer__free_unpacked(da, NULL);
    free(buf);
}
END_TEST

/* A batch with one enqueue whose headers are given in the order a, b or b, a. */
typedef struct {
    Keyload__V1__BatchRequest b;
    Keyload__V1__Mutation m, *mp;
    Keyload__V1__Enqueue enq;
    Keyload__V1__QueueLaneRef lane;
    Keyload__V1__EnqueueMessage msg;
    Keyload__V1__Header h[2], *hp[2];
    uint8_t cmd[16];
} one_enqueue;

static void build(one_enqueue *x, bool swap, const char *body, const char *lane)
{
    keyload__v1__batch_request__init(&x->b);
    keyload__v1__mutation__init(&x->m);
    keyload__v1__enqueue__init(&x->enq);
    keyload__v1__queue_lane_ref__init(&x->lane);
    keyload__v1__enqueue_message__init(&x->msg);
    memset(x->cmd, 7, 16);
    x->b.command_id.data = x->cmd;
    x->b.command_id.len = 16;
    x->mp = &x->m;
    x->b.mutations = &x->mp;
    x->b.n_mutations = 1;
    x->m.kind_case = KEYLOAD__V1__MUTATION__KIND_ENQUEUE;
    x->m.enqueue = &x->enq;
    x->enq.lane = &x->lane;
    x->enq.message = &x->msg;
    x->lane.tenant = "t";
    x->lane.database = "d";
    x->lane.queue = "q";
    x->lane.lane = (char *)lane;
    x->msg.body.data = (uint8_t *)body;
    x->msg.body.len = strlen(body);
    for (int i = 0; i < 2; i++)
        keyload__v1__header__init(&x->h[i]);
    x->h[0].key = "a";
    x->h[0].value = "1";
    x->h[1].key = "b";
    x->h[1].value = "2";
    x->hp[0] = &x->h[swap ? 1 : 0];
    x->hp[1] = &x->h[swap ? 0 : 1];
    x->msg.headers = x->hp;
    x->msg.n_headers = 2;
}

START_TEST(digest_is_canonical)
{
    one_enqueue x, y;
    uint8_t d1[32], d2[32];
    build(&x, false, "hello", "");
    build(&y, true, "hello", "default");
    ck_assert_int_eq(kl_canon_batch_digest("keyload.v1.Batch", "p", &x.b, d1), 0);
    ck_assert_int_eq(kl_canon_batch_digest("keyload.v1.Batch", "p", &y.b, d2), 0);
    /* Header order and the spelling of the default lane do not change the digest. */
    ck_assert_mem_eq(d1, d2, 32);
    build(&y, false, "hellO", "");
    kl_canon_batch_digest("keyload.v1.Batch", "p", &y.b, d2);
    ck_assert(memcmp(d1, d2, 32) != 0);
    kl_canon_batch_digest("keyload.v1.Batch", "other", &x.b, d2);
    ck_assert(memcmp(d1, d2, 32) != 0); /* principal is part of the digest */
    kl_canon_batch_digest("keyload.v1.Other", "p", &x.b, d2);
    ck_assert(memcmp(d1, d2, 32) != 0); /* method too */
    /* Moving bytes between body and header value must change the encoding (lengths are prefixed). */
    build(&y, false, "hello", "");
    y.h[0].value = "1h";
    y.msg.body.data = (uint8_t *)"ello";
    y.msg.body.len = 4;
    kl_canon_batch_digest("keyload.v1.Batch", "p", &y.b, d2);
    ck_assert(memcmp(d1, d2, 32) != 0);
}
END_TEST

/* first_sent_unix_ms is covered only when set: 0 leaves the digest as it was before the
 * field existed; any set value changes it, and two values differ. */
START_TEST(digest_covers_first_sent_only_when_set)
{
    one_enqueue x;
    uint8_t d0[32], d1[32], d2[32], again[32];
    build(&x, false, "hello", "");
    ck_assert_int_eq(x.b.first_sent_unix_ms, 0);
    ck_assert_int_eq(kl_canon_batch_digest("keyload.v1.Batch", "p", &x.b, d0), 0);
    x.b.first_sent_unix_ms = 1767225600000;
    ck_assert_int_eq(kl_canon_batch_digest("keyload.v1.Batch", "p", &x.b, d1), 0);
    ck_assert(memcmp(d0, d1, 32) != 0);
    x.b.first_sent_unix_ms = 1767225600001;
    ck_assert_int_eq(kl_canon_batch_digest("keyload.v1.Batch", "p", &x.b, d2), 0);
    ck_assert(memcmp(d1, d2, 32) != 0);
    x.b.first_sent_unix_ms = 0;
    ck_assert_int_eq(kl_canon_batch_digest("keyload.v1.Batch", "p", &x.b, again), 0);
    ck_assert_mem_eq(d0, again, 32);
}
END_TEST

START_TEST(digest_ignores_wire_encoding)
{
    /* Pack, unpack and digest again: same typed batch, same digest. */
    one_enqueue x;
    build(&x, false, "body", "l1");
    uint8_t d1[32], d2[32];
    kl_canon_batch_digest("m", "p", &x.b, d1);
    size_t n = keyload__v1__batch_request__get_packed_size(&x.b);
    uint8_t *buf = malloc(n);
    keyload__v1__batch_request__pack(&x.b, buf);
    Keyload__V1__BatchRequest *b = keyload__v1__batch_request__unpack(NULL, n, buf);
    kl_canon_batch_digest("m", "p", b, d2);
    ck_assert_mem_eq(d1, d2, 32);
    keyload__v1__batch_request__free_unpacked(b, NULL);
    free(buf);
}
END_TEST

START_TEST(fingerprint_known_answer)
{
    /* Pins the canonical encoding: a change to it changes every stored fingerprint,
     * so it must be deliberate (and versioned). */
    Keyload__V1__EnqueueMessage m = KEYLOAD__V1__ENQUEUE_MESSAGE__INIT;
    m.body.data = (uint8_t *)"x";
    m.body.len = 1;
    uint8_t fp[32];
    ck_assert_int_eq(kl_canon_message_fingerprint(&m, fp), 0);
    kl_canon c;
    kl_canon_init(&c);
    kl_canon_str(&c, 0xF1, "keyload.message-fingerprint.v1");
    kl_canon_message(&c, 1, &m);
    /* tag(1)+len(4)+30 domain bytes, tag, body item (1+4+1), two empty maps (4+4),
     * expiry item (1+8), delay item (1+8) */
    ck_assert_uint_eq(c.len, 35 + 1 + 6 + 4 + 4 + 9 + 9);
    ck_assert_uint_eq(c.buf[36], 1);   /* body tag */
    ck_assert_uint_eq(c.buf[40], 1);   /* body length low byte */
    ck_assert_uint_eq(c.buf[41], 'x');
    kl_canon_free(&c);
}
END_TEST


/* Every mutation kind's content is in the digest, so one command id with other content
 * is CONFLICT, never the earlier outcome: principal management and transfers included. */
static void digest_of(Keyload__V1__Mutation *m, uint8_t out[32])
{
    uint8_t cmd[16] = {1};
    Keyload__V1__BatchRequest b = KEYLOAD__V1__BATCH_REQUEST__INIT;
    b.command_id.data = cmd;
    b.command_id.len = 16;
    b.n_mutations = 1;
    b.mutations = &m;
    ck_assert_int_eq(kl_canon_batch_digest("keyload.v1.Batch", "p", &b, out), 0);
}

START_TEST(digest_covers_every_kind)
{
    uint8_t d1[32], d2[32];
    Keyload__V1__Grant g = KEYLOAD__V1__GRANT__INIT;
    g.database = "db";
    g.permission = KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH;
    g.queue_pattern = "orders";
    Keyload__V1__GrantPermission gp = KEYLOAD__V1__GRANT_PERMISSION__INIT;
    gp.principal_id = "alice";
    gp.grant = &g;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_GRANT_PERMISSION;
    m.grant_permission = &gp;
    digest_of(&m, d1);
    g.queue_pattern = "*";
    digest_of(&m, d2);
    ck_assert(memcmp(d1, d2, 32) != 0);
    Keyload__V1__SetPrincipalKey sk = KEYLOAD__V1__SET_PRINCIPAL_KEY__INIT;
    uint8_t k1[32] = {1}, k2[32] = {2};
    sk.principal_id = "alice";
    sk.public_key.data = k1;
    sk.public_key.len = 32;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_SET_PRINCIPAL_KEY;
    m.set_principal_key = &sk;
    digest_of(&m, d1);
    sk.public_key.data = k2;
    digest_of(&m, d2);
    ck_assert(memcmp(d1, d2, 32) != 0);
    Keyload__V1__QueueLaneRef r = KEYLOAD__V1__QUEUE_LANE_REF__INIT;
    r.tenant = "t";
    r.database = "d";
    r.queue = "q";
    uint8_t tok1[4] = {1, 2, 3, 4}, tok2[4] = {1, 2, 3, 5};
    Keyload__V1__AcceptQueueTransfer a = KEYLOAD__V1__ACCEPT_QUEUE_TRANSFER__INIT;
    a.destination_queue = &r;
    a.intent_token.data = tok1;
    a.intent_token.len = 4;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_ACCEPT_QUEUE_TRANSFER;
    m.accept_queue_transfer = &a;
    digest_of(&m, d1);
    a.intent_token.data = tok2;
    digest_of(&m, d2);
    ck_assert(memcmp(d1, d2, 32) != 0);
}
END_TEST

Suite *suite_codec(void)
{
    Suite *s = suite_create("codec");
    TCase *t = tcase_create("codec");
    tcase_add_test(t, envelope_round_trip);
    tcase_add_test(t, digest_is_canonical);
    tcase_add_test(t, digest_covers_first_sent_only_when_set);
    tcase_add_test(t, digest_ignores_wire_encoding);
    tcase_add_test(t, fingerprint_known_answer);
    tcase_add_test(t, digest_covers_every_kind);
    suite_add_tcase(s, t);
    return s;
}
