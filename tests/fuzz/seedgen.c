/* seedgen DIR: writes the seed corpus of fuzz_envelope into DIR, one valid encoded frame
 * per file, so that no binary blobs need to be checked in. Built by tests/fuzz/fuzz.mk,
 * run by tests/fuzz/run.sh. Deterministic (fixed command ids and tokens). */
#include "keyload/v1/queue.pb-c.h"
#include "keyload/v1/rpc.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_dir;
static int g_count;

static void write_file(const char *name, const uint8_t *p, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
    g_count++;
}

/* Wraps a payload in an Envelope for method and writes it. */
static void write_envelope(const char *name, const char *method, const uint8_t *payload, size_t n)
{
    Keyload__V1__Envelope e = KEYLOAD__V1__ENVELOPE__INIT;
    e.version = 1;
    e.method = (char *)method;
    e.request_id = 42;
    e.deadline_unix_ms = 1700000000000LL;
    e.payload.data = (uint8_t *)payload;
    e.payload.len = n;
    size_t len = keyload__v1__envelope__get_packed_size(&e);
    uint8_t *buf = malloc(len + 1);
    keyload__v1__envelope__pack(&e, buf);
    write_file(name, buf, len);
    free(buf);
}

static void write_batch(const char *name, Keyload__V1__Mutation **muts, size_t n, uint8_t id_seed)
{
    uint8_t id[16];
    for (int i = 0; i < 16; i++)
        id[i] = (uint8_t)(id_seed + i + 1);
    Keyload__V1__BatchRequest b = KEYLOAD__V1__BATCH_REQUEST__INIT;
    b.command_id.data = id;
    b.command_id.len = sizeof id;
    b.mutations = muts;
    b.n_mutations = n;
    size_t len = keyload__v1__batch_request__get_packed_size(&b);
    uint8_t *buf = malloc(len + 1);
    keyload__v1__batch_request__pack(&b, buf);
    write_envelope(name, "keyload.v1.Batch", buf, len);
    free(buf);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: seedgen DIR\n");
        return 2;
    }
    g_dir = argv[1];

    Keyload__V1__QueueLaneRef q = KEYLOAD__V1__QUEUE_LANE_REF__INIT;
    q.tenant = "default";
    q.database = "default";
    q.queue = "orders";
    Keyload__V1__QueueLaneRef lane = q;
    lane.lane = "eu-west.1";

    /* CreateQueue with limits and a dead-letter queue. */
    Keyload__V1__QueueLimits lim = KEYLOAD__V1__QUEUE_LIMITS__INIT;
    lim.max_messages = 1000;
    lim.max_bytes = 1 << 20;
    lim.max_deliveries = 5;
    lim.dead_letter_queue = "orders-dlq";
    Keyload__V1__CreateQueue cq = KEYLOAD__V1__CREATE_QUEUE__INIT;
    cq.queue = &q;
    cq.limits = &lim;
    Keyload__V1__Mutation m_create = KEYLOAD__V1__MUTATION__INIT;
    m_create.kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE;
    m_create.create_queue = &cq;

    /* Enqueue with headers, every field kind, expiry and delay. */
    Keyload__V1__Header h1 = KEYLOAD__V1__HEADER__INIT, h2 = KEYLOAD__V1__HEADER__INIT;
    h1.key = "trace";
    h1.value = "abc123";
    h2.key = "content-type";
    h2.value = "application/json";
    Keyload__V1__Header *hs[] = {&h1, &h2};
    Keyload__V1__FieldValue v[5];
    Keyload__V1__Field f[5];
    Keyload__V1__Field *fs[5];
    static const char *keys[] = {"s", "i", "d", "b", "y"};
    for (int i = 0; i < 5; i++) {
        keyload__v1__field_value__init(&v[i]);
        keyload__v1__field__init(&f[i]);
        f[i].key = (char *)keys[i];
        f[i].value = &v[i];
        fs[i] = &f[i];
    }
    v[0].kind_case = KEYLOAD__V1__FIELD_VALUE__KIND_STRING_VALUE;
    v[0].string_value = "eu";
    v[1].kind_case = KEYLOAD__V1__FIELD_VALUE__KIND_INT_VALUE;
    v[1].int_value = -7;
    v[2].kind_case = KEYLOAD__V1__FIELD_VALUE__KIND_DOUBLE_VALUE;
    v[2].double_value = 2.5;
    v[3].kind_case = KEYLOAD__V1__FIELD_VALUE__KIND_BOOL_VALUE;
    v[3].bool_value = 1;
    v[4].kind_case = KEYLOAD__V1__FIELD_VALUE__KIND_BYTES_VALUE;
    v[4].bytes_value.data = (uint8_t *)"\x00\x01\x02";
    v[4].bytes_value.len = 3;
    Keyload__V1__EnqueueMessage msg = KEYLOAD__V1__ENQUEUE_MESSAGE__INIT;
    msg.body.data = (uint8_t *)"hello, queue";
    msg.body.len = 12;
    msg.headers = hs;
    msg.n_headers = 2;
    msg.fields = fs;
    msg.n_fields = 5;
    msg.expires_at_unix_ms = 1800000000000LL;
    msg.delay_ms = 1500;
    Keyload__V1__Enqueue enq = KEYLOAD__V1__ENQUEUE__INIT;
    enq.lane = &lane;
    enq.message = &msg;
    Keyload__V1__Mutation m_enq = KEYLOAD__V1__MUTATION__INIT;
    m_enq.kind_case = KEYLOAD__V1__MUTATION__KIND_ENQUEUE;
    m_enq.enqueue = &enq;

    /* A plain small enqueue, as the benchmark sends. */
    Keyload__V1__EnqueueMessage msg2 = KEYLOAD__V1__ENQUEUE_MESSAGE__INIT;
    msg2.body.data = (uint8_t *)"x";
    msg2.body.len = 1;
    Keyload__V1__Enqueue enq2 = KEYLOAD__V1__ENQUEUE__INIT;
    enq2.lane = &q;
    enq2.message = &msg2;
    Keyload__V1__Mutation m_enq2 = KEYLOAD__V1__MUTATION__INIT;
    m_enq2.kind_case = KEYLOAD__V1__MUTATION__KIND_ENQUEUE;
    m_enq2.enqueue = &enq2;

    Keyload__V1__Receive rcv = KEYLOAD__V1__RECEIVE__INIT;
    rcv.lane = &lane;
    rcv.max_messages = 10;
    rcv.lease_ms = 30000;
    Keyload__V1__Mutation m_rcv = KEYLOAD__V1__MUTATION__INIT;
    m_rcv.kind_case = KEYLOAD__V1__MUTATION__KIND_RECEIVE;
    m_rcv.receive = &rcv;

    uint8_t tok_a[16], tok_b[16];
    memset(tok_a, 0xa5, sizeof tok_a);
    memset(tok_b, 0x5a, sizeof tok_b);
    ProtobufCBinaryData toks[2] = {{16, tok_a}, {16, tok_b}};
    Keyload__V1__Ack ack = KEYLOAD__V1__ACK__INIT;
    ack.queue = &q;
    ack.lease_tokens = toks;
    ack.n_lease_tokens = 2;
    Keyload__V1__Mutation m_ack = KEYLOAD__V1__MUTATION__INIT;
    m_ack.kind_case = KEYLOAD__V1__MUTATION__KIND_ACK;
    m_ack.ack = &ack;
    Keyload__V1__Release rel = KEYLOAD__V1__RELEASE__INIT;
    rel.queue = &q;
    rel.lease_tokens = toks;
    rel.n_lease_tokens = 1;
    Keyload__V1__Mutation m_rel = KEYLOAD__V1__MUTATION__INIT;
    m_rel.kind_case = KEYLOAD__V1__MUTATION__KIND_RELEASE;
    m_rel.release = &rel;
    Keyload__V1__DeleteQueue dq = KEYLOAD__V1__DELETE_QUEUE__INIT;
    dq.queue = &q;
    Keyload__V1__Mutation m_del = KEYLOAD__V1__MUTATION__INIT;
    m_del.kind_case = KEYLOAD__V1__MUTATION__KIND_DELETE_QUEUE;
    m_del.delete_queue = &dq;

    /* Forward compatibility: a newer client's fields this build does not know (field 16,
     * a two-byte tag) inside an enqueued message and inside queue limits. */
    uint8_t one = 1;
    ProtobufCMessageUnknownField uf = {.tag = 16, .wire_type = PROTOBUF_C_WIRE_TYPE_VARINT,
                                       .len = 1, .data = &one};
    Keyload__V1__EnqueueMessage msg3 = msg2;
    msg3.base.n_unknown_fields = 1;
    msg3.base.unknown_fields = &uf;
    Keyload__V1__Enqueue enq3 = enq2;
    enq3.message = &msg3;
    Keyload__V1__Mutation m_enq3 = m_enq2;
    m_enq3.enqueue = &enq3;
    Keyload__V1__QueueLimits lim2 = KEYLOAD__V1__QUEUE_LIMITS__INIT;
    lim2.max_messages = 10;
    lim2.base.n_unknown_fields = 1;
    lim2.base.unknown_fields = &uf;
    Keyload__V1__CreateQueue cq2 = cq;
    cq2.limits = &lim2;
    Keyload__V1__Mutation m_create2 = m_create;
    m_create2.create_queue = &cq2;
    Keyload__V1__Mutation *newer[] = {&m_create2, &m_enq3};
    write_batch("batch-unknown-fields", newer, 2, 4);

    Keyload__V1__Mutation *one_create[] = {&m_create};
    write_batch("batch-create", one_create, 1, 0);
    Keyload__V1__Mutation *one_enq[] = {&m_enq};
    write_batch("batch-enqueue-rich", one_enq, 1, 1);
    Keyload__V1__Mutation *many[] = {&m_enq2, &m_enq2, &m_enq2, &m_enq2};
    write_batch("batch-enqueue-4", many, 4, 2);
    Keyload__V1__Mutation *mixed[] = {&m_create, &m_enq, &m_rcv, &m_ack, &m_rel, &m_del};
    write_batch("batch-mixed", mixed, 6, 3);

    /* QueueStats request. */
    {
        Keyload__V1__QueueStatsRequest r = KEYLOAD__V1__QUEUE_STATS_REQUEST__INIT;
        r.queue = &q;
        uint8_t buf[256];
        size_t n = keyload__v1__queue_stats_request__pack(&r, buf);
        write_envelope("queue-stats", "keyload.v1.QueueStats", buf, n);
    }

    /* A BatchReceipt with a result of every kind, as the payload of an envelope. */
    {
        Keyload__V1__QueueCreated qc = KEYLOAD__V1__QUEUE_CREATED__INIT;
        qc.queue_id = 7;
        Keyload__V1__Enqueued eq = KEYLOAD__V1__ENQUEUED__INIT;
        eq.message_id = 99;
        eq.lane = "default";
        Keyload__V1__ReceivedMessage rm = KEYLOAD__V1__RECEIVED_MESSAGE__INIT;
        rm.message_id = 99;
        rm.lane = "default";
        rm.lease_token.data = tok_a;
        rm.lease_token.len = 16;
        rm.delivery_count = 1;
        rm.message = &msg;
        rm.lease_expires_unix_ms = 1700000030000LL;
        rm.enqueued_unix_ms = 1700000000000LL;
        Keyload__V1__ReceivedMessage *rms[] = {&rm};
        Keyload__V1__Received rd = KEYLOAD__V1__RECEIVED__INIT;
        rd.messages = rms;
        rd.n_messages = 1;
        Keyload__V1__Acked ak = KEYLOAD__V1__ACKED__INIT;
        ak.count = 2;
        Keyload__V1__MutationResult r[4];
        for (int i = 0; i < 4; i++)
            keyload__v1__mutation_result__init(&r[i]);
        r[0].kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_QUEUE_CREATED;
        r[0].queue_created = &qc;
        r[1].kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_ENQUEUED;
        r[1].enqueued = &eq;
        r[2].kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_RECEIVED;
        r[2].received = &rd;
        r[3].kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_ACKED;
        r[3].acked = &ak;
        Keyload__V1__MutationResult *rs[] = {&r[0], &r[1], &r[2], &r[3]};
        Keyload__V1__BatchReceipt rc = KEYLOAD__V1__BATCH_RECEIPT__INIT;
        rc.command_id.data = tok_b;
        rc.command_id.len = 16;
        rc.term = 1;
        rc.index = 12;
        rc.committed_unix_ms = 1700000000000LL;
        rc.results = rs;
        rc.n_results = 4;
        rc.request_digest.data = tok_a;
        rc.request_digest.len = 16;
        size_t n = keyload__v1__batch_receipt__get_packed_size(&rc);
        uint8_t *buf = malloc(n);
        keyload__v1__batch_receipt__pack(&rc, buf);
        write_envelope("receipt", "keyload.v1.Batch", buf, n);
        free(buf);
    }

    /* An error Answer frame (the client side). */
    {
        Keyload__V1__Answer a = KEYLOAD__V1__ANSWER__INIT;
        a.request_id = 42;
        a.code = KEYLOAD__V1__STATUS_CODE__NOT_LEADER;
        a.message = "not the leader";
        a.detail = "leader";
        a.leader_address = "tcp://127.0.0.1:7402";
        uint8_t buf[256];
        size_t n = keyload__v1__answer__pack(&a, buf);
        write_file("answer-not-leader", buf, n);
    }
    printf("seedgen: wrote %d seeds to %s\n", g_count, g_dir);
    return 0;
}
