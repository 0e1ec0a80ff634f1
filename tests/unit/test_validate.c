/* The hot kinds' shape checks and the unknown-field walk format a field's path only when a
 * check fails: every refusal must still name the same field, with the same words, and a
 * request that passes must leave err untouched. */
#include "common/limits.h"
#include "common/proto_check.h"
#include "daemon/engine/kind.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

static Keyload__V1__QueueLaneRef ref_of(const char *tenant, const char *db, const char *queue, const char *lane)
{
    Keyload__V1__QueueLaneRef r = KEYLOAD__V1__QUEUE_LANE_REF__INIT;
    r.tenant = (char *)tenant;
    r.database = (char *)db;
    r.queue = (char *)queue;
    r.lane = (char *)lane;
    return r;
}

/* Runs kind's validate at idx: a refusal must carry exactly `detail` and `message`; NULL
 * message means the mutation passes and err keeps its sentinel. */
static void expect(const kl_mutation_kind *kind, size_t idx, const Keyload__V1__Mutation *m, const char *detail,
                   const char *message)
{
    kl_err err;
    memset(&err, 0, sizeof err);
    snprintf(err.message, sizeof err.message, "untouched");
    kl_code rc = kind->validate(idx, m, &err);
    if (message == NULL) {
        ck_assert_int_eq(rc, KL_OK);
        ck_assert_str_eq(err.message, "untouched");
        return;
    }
    ck_assert_int_eq(rc, KL_INVALID_ARGUMENT);
    ck_assert_int_eq(err.code, KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, detail);
    ck_assert_str_eq(err.message, message);
}

START_TEST(queue_kinds_name_the_field_at_fault)
{
    Keyload__V1__EnqueueMessage msg = KEYLOAD__V1__ENQUEUE_MESSAGE__INIT;
    Keyload__V1__QueueLaneRef good = ref_of("acme", "db", "orders", "l1");
    Keyload__V1__QueueLaneRef bad_lane = ref_of("acme", "db", "orders", "a/b");
    Keyload__V1__Enqueue enq = KEYLOAD__V1__ENQUEUE__INIT;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_ENQUEUE;
    m.enqueue = &enq;
    enq.lane = &good;
    enq.message = &msg;
    expect(&kl_queue_kind_enqueue, 2, &m, NULL, NULL);
    enq.lane = &bad_lane;
    expect(&kl_queue_kind_enqueue, 2, &m, "mutations[2].enqueue.lane.lane",
           "mutations[2].enqueue.lane.lane may hold only letters, digits and . _ - : (byte 1 is not allowed)");
    enq.lane = NULL;
    expect(&kl_queue_kind_enqueue, 2, &m, "mutations[2].enqueue.lane", "mutations[2].enqueue.lane is missing");
    enq.lane = &good;
    msg.delay_ms = -1;
    char want[256];
    snprintf(want, sizeof want, "mutations[2].enqueue.message.delay_ms must be 0..%lld", (long long)KL_DELAY_MS_MAX);
    expect(&kl_queue_kind_enqueue, 2, &m, "delay_ms", want);
    msg.delay_ms = 0;
    enq.message = NULL;
    expect(&kl_queue_kind_enqueue, 2, &m, "mutations[2].enqueue", "mutations[2].enqueue.message is missing");

    Keyload__V1__Receive rcv = KEYLOAD__V1__RECEIVE__INIT;
    Keyload__V1__QueueLaneRef no_tenant = ref_of("", "db", "orders", "");
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_RECEIVE;
    m.receive = &rcv;
    rcv.lane = &good;
    expect(&kl_queue_kind_receive, 0, &m, NULL, NULL);
    rcv.lane = &no_tenant;
    expect(&kl_queue_kind_receive, 0, &m, "mutations[0].receive.lane.tenant",
           "mutations[0].receive.lane.tenant must not be empty");

    uint8_t tok[16] = {1};
    ProtobufCBinaryData toks[1] = {{16, tok}};
    Keyload__V1__QueueLaneRef queue_only = ref_of("acme", "db", "orders", "");
    Keyload__V1__Ack ack = KEYLOAD__V1__ACK__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_ACK;
    m.ack = &ack;
    ack.queue = &queue_only;
    ack.n_lease_tokens = 1;
    ack.lease_tokens = toks;
    expect(&kl_queue_kind_ack, 1, &m, NULL, NULL);
    ack.queue = &good; /* a lane where none is allowed */
    expect(&kl_queue_kind_ack, 1, &m, "mutations[1].ack.queue.lane",
           "mutations[1].ack.queue.lane is not used here; leave it empty");

    Keyload__V1__Release rel = KEYLOAD__V1__RELEASE__INIT;
    ProtobufCBinaryData short_tok[1] = {{3, tok}};
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_RELEASE;
    m.release = &rel;
    rel.queue = &queue_only;
    rel.n_lease_tokens = 1;
    rel.lease_tokens = toks;
    expect(&kl_queue_kind_release, 1, &m, NULL, NULL);
    rel.lease_tokens = short_tok;
    expect(&kl_queue_kind_release, 1, &m, "lease_tokens",
           "mutations[1].release.lease_tokens[0] is not a 16-byte lease token");
}
END_TEST

START_TEST(transfer_kinds_name_the_field_at_fault)
{
    uint8_t id[16] = {7};
    uint8_t token[4] = {1, 2, 3, 4};
    char long_name[KL_NAME_LEN_MAX + 2];
    memset(long_name, 'q', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    Keyload__V1__EnqueueMessage msg = KEYLOAD__V1__ENQUEUE_MESSAGE__INIT;
    Keyload__V1__QueueLaneRef src = ref_of("acme", "db", "outbox", "l1");
    Keyload__V1__QueueLaneRef dst = ref_of("acme", "db", "inbox", "");
    Keyload__V1__QueueLaneRef bad_db = ref_of("acme", "d b", "inbox", "");
    Keyload__V1__QueueLaneRef long_queue = ref_of("acme", "db", long_name, "");

    Keyload__V1__CreateQueueTransfer cr = KEYLOAD__V1__CREATE_QUEUE_TRANSFER__INIT;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE_TRANSFER;
    m.create_queue_transfer = &cr;
    cr.source_queue = &src;
    cr.destination = &dst;
    cr.message = &msg;
    cr.transfer_id = (ProtobufCBinaryData){16, id};
    expect(&kl_transfer_kind_create_queue_transfer, 0, &m, NULL, NULL);
    cr.destination = &bad_db;
    expect(&kl_transfer_kind_create_queue_transfer, 0, &m, "mutations[0].create_queue_transfer.destination.database",
           "mutations[0].create_queue_transfer.destination.database may hold only letters, digits and . _ - : "
           "(byte 1 is not allowed)");
    cr.destination = &dst;
    cr.source_queue = NULL;
    expect(&kl_transfer_kind_create_queue_transfer, 0, &m, "mutations[0].create_queue_transfer.source_queue",
           "mutations[0].create_queue_transfer.source_queue is missing");
    cr.source_queue = &src;
    msg.expires_at_unix_ms = -5;
    expect(&kl_transfer_kind_create_queue_transfer, 0, &m, "expires_at_unix_ms",
           "mutations[0].create_queue_transfer.message.expires_at_unix_ms must not be negative");
    msg.expires_at_unix_ms = 0;

    Keyload__V1__AcceptQueueTransfer acc = KEYLOAD__V1__ACCEPT_QUEUE_TRANSFER__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_ACCEPT_QUEUE_TRANSFER;
    m.accept_queue_transfer = &acc;
    acc.destination_queue = &dst;
    acc.intent_token = (ProtobufCBinaryData){sizeof token, token};
    expect(&kl_transfer_kind_accept_queue_transfer, 3, &m, NULL, NULL);
    acc.destination_queue = &long_queue;
    char want[256];
    snprintf(want, sizeof want, "mutations[3].accept_queue_transfer.destination_queue.queue is %d bytes; the limit is %d",
             KL_NAME_LEN_MAX + 1, KL_NAME_LEN_MAX);
    expect(&kl_transfer_kind_accept_queue_transfer, 3, &m, "mutations[3].accept_queue_transfer.destination_queue.queue",
           want);

    Keyload__V1__CompleteQueueTransfer co = KEYLOAD__V1__COMPLETE_QUEUE_TRANSFER__INIT;
    Keyload__V1__QueueLaneRef bad_src_lane = ref_of("acme", "db", "outbox", "x!");
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_COMPLETE_QUEUE_TRANSFER;
    m.complete_queue_transfer = &co;
    co.source_queue = &src;
    co.transfer_id = (ProtobufCBinaryData){16, id};
    co.receipt_token = (ProtobufCBinaryData){sizeof token, token};
    expect(&kl_transfer_kind_complete_queue_transfer, 1, &m, NULL, NULL);
    co.source_queue = &bad_src_lane;
    expect(&kl_transfer_kind_complete_queue_transfer, 1, &m, "mutations[1].complete_queue_transfer.source_queue.lane",
           "mutations[1].complete_queue_transfer.source_queue.lane may hold only letters, digits and . _ - : "
           "(byte 1 is not allowed)");
}
END_TEST

/* An unknown field two messages down is found and named; none leaves the path empty. */
START_TEST(unknown_field_path_is_named_only_when_found)
{
    Keyload__V1__EnqueueMessage msg = KEYLOAD__V1__ENQUEUE_MESSAGE__INIT;
    Keyload__V1__QueueLaneRef lane = ref_of("acme", "db", "orders", "");
    Keyload__V1__Enqueue enq = KEYLOAD__V1__ENQUEUE__INIT;
    enq.lane = &lane;
    enq.message = &msg;
    Keyload__V1__Mutation m0 = KEYLOAD__V1__MUTATION__INIT, m1 = KEYLOAD__V1__MUTATION__INIT;
    m0.kind_case = m1.kind_case = KEYLOAD__V1__MUTATION__KIND_ENQUEUE;
    m0.enqueue = m1.enqueue = &enq;
    Keyload__V1__Mutation *muts[2] = {&m0, &m1};
    Keyload__V1__BatchRequest b = KEYLOAD__V1__BATCH_REQUEST__INIT;
    b.n_mutations = 2;
    b.mutations = muts;
    char path[128];
    ck_assert(!kl_proto_has_unknown(&b.base, path, sizeof path));
    ck_assert_str_eq(path, "");
    Keyload__V1__Enqueue enq2 = enq;
    Keyload__V1__EnqueueMessage msg2 = msg;
    ProtobufCMessageUnknownField uf = {.tag = 99, .wire_type = PROTOBUF_C_WIRE_TYPE_VARINT, .len = 1,
                                       .data = (uint8_t *)"\x01"};
    msg2.base.n_unknown_fields = 1;
    msg2.base.unknown_fields = &uf;
    enq2.message = &msg2;
    m1.enqueue = &enq2;
    ck_assert(kl_proto_has_unknown(&b.base, path, sizeof path));
    ck_assert_str_eq(path, "mutations[1].enqueue.message");
    char tiny[4];
    ck_assert(kl_proto_has_unknown(&b.base, tiny, sizeof tiny)); /* a short buffer still answers */
}
END_TEST

Suite *suite_validate(void)
{
    Suite *s = suite_create("validate");
    TCase *t = tcase_create("validate");
    tcase_add_test(t, queue_kinds_name_the_field_at_fault);
    tcase_add_test(t, transfer_kinds_name_the_field_at_fault);
    tcase_add_test(t, unknown_field_path_is_named_only_when_found);
    suite_add_tcase(s, t);
    return s;
}
