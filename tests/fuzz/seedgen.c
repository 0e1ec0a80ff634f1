/* seedgen DIR [BATCH_DIR]: writes the seed corpus of fuzz_envelope into DIR, one valid
 * encoded frame per file, and (given BATCH_DIR) that of fuzz_batch into BATCH_DIR, one
 * encoded BatchRequest per file, so that no binary blobs need to be checked in. Built by
 * tests/fuzz/fuzz.mk, run by tests/fuzz/run.sh. Deterministic (fixed command ids and
 * tokens). The batch seeds name the queues fuzz_batch creates: "q", "small" (3 messages,
 * 64 bytes), "dlq" (4 messages), "work" (max_deliveries 1, dead letters to "dlq") and
 * "drop" (max_deliveries 1, no dead-letter queue), all in database default/default on
 * partition 0 of 3. A batch that creates a database or a queue must hold only that
 * mutation, so the seeds that reach a new queue's states come in steps (libFuzzer runs
 * the seed corpus in order of size, so the later steps may meet the earlier ones' state,
 * or not: both are worth reaching); a few mixed ones stay as refusals. */
#include "keyload/v1/queue.pb-c.h"
#include "keyload/v1/rpc.pb-c.h"

#include <stdbool.h>
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

static uint8_t *pack_batch(Keyload__V1__Mutation **muts, size_t n, uint8_t id_seed, size_t *len)
{
    uint8_t id[16];
    for (int i = 0; i < 16; i++)
        id[i] = (uint8_t)(id_seed + i + 1);
    Keyload__V1__BatchRequest b = KEYLOAD__V1__BATCH_REQUEST__INIT;
    b.command_id.data = id;
    b.command_id.len = sizeof id;
    b.mutations = muts;
    b.n_mutations = n;
    *len = keyload__v1__batch_request__get_packed_size(&b);
    uint8_t *buf = malloc(*len + 1);
    keyload__v1__batch_request__pack(&b, buf);
    return buf;
}

/* A bare BatchRequest (fuzz_batch's input). */
static void write_raw_batch(const char *name, Keyload__V1__Mutation **muts, size_t n, uint8_t id_seed)
{
    size_t len;
    uint8_t *buf = pack_batch(muts, n, id_seed, &len);
    write_file(name, buf, len);
    free(buf);
}

static void write_batch(const char *name, Keyload__V1__Mutation **muts, size_t n, uint8_t id_seed)
{
    size_t len;
    uint8_t *buf = pack_batch(muts, n, id_seed, &len);
    write_envelope(name, "keyload.v1.Batch", buf, len);
    free(buf);
}

/* ---- fuzz_batch seeds ---- */

static Keyload__V1__QueueLaneRef *ref(const char *queue, const char *lane)
{
    Keyload__V1__QueueLaneRef *r = calloc(1, sizeof *r);
    keyload__v1__queue_lane_ref__init(r);
    r->tenant = "default";
    r->database = "default";
    r->queue = (char *)queue;
    r->lane = (char *)(lane ? lane : "");
    return r;
}

static Keyload__V1__Mutation *mut(void)
{
    Keyload__V1__Mutation *m = calloc(1, sizeof *m);
    keyload__v1__mutation__init(m);
    return m;
}

static Keyload__V1__Mutation *m_create(const char *queue, uint64_t max_messages, uint64_t max_bytes,
                                       uint32_t max_deliveries, const char *dlq, int partition)
{
    Keyload__V1__QueueLimits *l = calloc(1, sizeof *l);
    keyload__v1__queue_limits__init(l);
    l->max_messages = max_messages;
    l->max_bytes = max_bytes;
    l->max_deliveries = max_deliveries;
    l->dead_letter_queue = (char *)(dlq ? dlq : "");
    Keyload__V1__CreateQueue *c = calloc(1, sizeof *c);
    keyload__v1__create_queue__init(c);
    c->queue = ref(queue, NULL);
    c->limits = l;
    c->partition = partition;
    Keyload__V1__Mutation *m = mut();
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE;
    m->create_queue = c;
    return m;
}

static Keyload__V1__Mutation *m_create_db(const char *tenant, const char *database, uint64_t max_batch_bytes)
{
    Keyload__V1__CreateDatabase *c = calloc(1, sizeof *c);
    keyload__v1__create_database__init(c);
    c->tenant = (char *)tenant;
    c->database = (char *)database;
    if (max_batch_bytes) {
        Keyload__V1__DatabaseLimits *l = calloc(1, sizeof *l);
        keyload__v1__database_limits__init(l);
        l->max_batch_bytes = max_batch_bytes;
        l->max_scan_records = 100;
        c->limits = l;
    }
    Keyload__V1__Mutation *m = mut();
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_DATABASE;
    m->create_database = c;
    return m;
}

static Keyload__V1__Mutation *m_delete(const char *queue)
{
    Keyload__V1__DeleteQueue *d = calloc(1, sizeof *d);
    keyload__v1__delete_queue__init(d);
    d->queue = ref(queue, NULL);
    Keyload__V1__Mutation *m = mut();
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_DELETE_QUEUE;
    m->delete_queue = d;
    return m;
}

static Keyload__V1__Mutation *m_enqueue(const char *queue, const char *lane,
                                        Keyload__V1__EnqueueMessage *msg)
{
    Keyload__V1__Enqueue *e = calloc(1, sizeof *e);
    keyload__v1__enqueue__init(e);
    e->lane = ref(queue, lane);
    e->message = msg;
    Keyload__V1__Mutation *m = mut();
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_ENQUEUE;
    m->enqueue = e;
    return m;
}

static Keyload__V1__EnqueueMessage *plain(const char *body)
{
    Keyload__V1__EnqueueMessage *msg = calloc(1, sizeof *msg);
    keyload__v1__enqueue_message__init(msg);
    msg->body.data = (uint8_t *)body;
    msg->body.len = strlen(body);
    return msg;
}

static Keyload__V1__Mutation *m_receive(const char *queue, const char *lane, uint32_t max, uint32_t lease_ms)
{
    Keyload__V1__Receive *r = calloc(1, sizeof *r);
    keyload__v1__receive__init(r);
    r->lane = ref(queue, lane);
    r->max_messages = max;
    r->lease_ms = lease_ms;
    Keyload__V1__Mutation *m = mut();
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_RECEIVE;
    m->receive = r;
    return m;
}

static Keyload__V1__Mutation *m_settle(bool ack, const char *queue, ProtobufCBinaryData *toks, size_t n)
{
    Keyload__V1__Mutation *m = mut();
    if (ack) {
        Keyload__V1__Ack *a = calloc(1, sizeof *a);
        keyload__v1__ack__init(a);
        a->queue = ref(queue, NULL);
        a->lease_tokens = toks;
        a->n_lease_tokens = n;
        m->kind_case = KEYLOAD__V1__MUTATION__KIND_ACK;
        m->ack = a;
    } else {
        Keyload__V1__Release *a = calloc(1, sizeof *a);
        keyload__v1__release__init(a);
        a->queue = ref(queue, NULL);
        a->lease_tokens = toks;
        a->n_lease_tokens = n;
        m->kind_case = KEYLOAD__V1__MUTATION__KIND_RELEASE;
        m->release = a;
    }
    return m;
}

/* The pieces are left to the process exit: seedgen runs once and exits. */
static void batch_seeds(void)
{
    /* Enqueue to "q" with headers, every field kind, a far expiry and a delay. */
    static Keyload__V1__Header h1 = KEYLOAD__V1__HEADER__INIT, h2 = KEYLOAD__V1__HEADER__INIT;
    h1.key = "trace";
    h1.value = "abc123";
    h2.key = "content-type";
    h2.value = "application/json";
    static Keyload__V1__Header *hs[2];
    hs[0] = &h1;
    hs[1] = &h2;
    static Keyload__V1__FieldValue v[5];
    static Keyload__V1__Field f[5];
    static Keyload__V1__Field *fs[5];
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
    Keyload__V1__EnqueueMessage *rich = plain("hello, queue");
    rich->headers = hs;
    rich->n_headers = 2;
    rich->fields = fs;
    rich->n_fields = 5;
    rich->expires_at_unix_ms = 4000000000000LL; /* 2096: fuzz_batch's clock starts in 2023 */
    rich->delay_ms = 1500;
    Keyload__V1__Mutation *enq_rich[] = {m_enqueue("q", NULL, rich)};
    write_raw_batch("enqueue-q-rich", enq_rich, 1, 0x20);

    Keyload__V1__Mutation *enq_lane[] = {m_enqueue("q", "eu-west.1", plain("x")),
                                         m_enqueue("q", NULL, plain("y"))};
    write_raw_batch("enqueue-q-lanes", enq_lane, 2, 0x21);

    Keyload__V1__Mutation *rcv[] = {m_receive("q", NULL, 10, 30000)};
    write_raw_batch("receive-q", rcv, 1, 0x22);

    Keyload__V1__Mutation *small[5];
    for (int i = 0; i < 5; i++)
        small[i] = m_enqueue("small", NULL, plain("0123456789"));
    write_raw_batch("enqueue-small-5", small, 5, 0x23);

    /* A queue's life in steps (a create is a batch of its own). A step that needs an
     * earlier one's state is padded (a longer body) so that it sorts after it by size. */
    static const char pad[] = "a body that makes this seed larger than the one it follows";
    Keyload__V1__Mutation *c_tmp[] = {m_create("tmp", 10, 1000, 2, "dlq", 0)};
    write_raw_batch("create-tmp", c_tmp, 1, 0x24);
    /* A delete (a catalog change) may share its batch with data. */
    Keyload__V1__Mutation *d_tmp[] = {m_delete("tmp"), m_enqueue("q", NULL, plain(pad))};
    write_raw_batch("delete-tmp-and-enqueue", d_tmp, 2, 0x35);
    /* Refused: a create mixed with anything else (INVALID_ARGUMENT). */
    Keyload__V1__Mutation *cd[] = {m_create("tmp", 10, 1000, 2, "dlq", 0), m_delete("tmp")};
    write_raw_batch("create-delete-mixed", cd, 2, 0x36);

    /* The catalog: databases. */
    Keyload__V1__Mutation *db[] = {m_create_db("acme", "shop", 0)};
    write_raw_batch("create-database", db, 1, 0x37);
    Keyload__V1__Mutation *db_lim[] = {m_create_db("acme", "tight", 4096)};
    write_raw_batch("create-database-limits", db_lim, 1, 0x38);
    Keyload__V1__Mutation *db_dup[] = {m_create_db("default", "default", 0)};
    write_raw_batch("create-database-exists", db_dup, 1, 0x39);
    Keyload__V1__Mutation *db_big[] = {m_create_db("acme", "big", 1ull << 40)};
    write_raw_batch("create-database-over-limit", db_big, 1, 0x3a);
    Keyload__V1__Mutation *db_two[] = {m_create_db("acme", "one", 0), m_create_db("acme", "two", 0)};
    write_raw_batch("create-database-two", db_two, 2, 0x3b);
    Keyload__V1__Mutation *db_q[] = {m_create_db("acme", "three", 0), m_enqueue("q", NULL, plain("z"))};
    write_raw_batch("create-database-mixed", db_q, 2, 0x3c);
    /* A queue in another database (after create-database), and in a missing one. */
    Keyload__V1__Mutation *c_acme[] = {m_create("orders", 0, 0, 0, NULL, 0)};
    c_acme[0]->create_queue->queue->tenant = "acme";
    c_acme[0]->create_queue->queue->database = "shop";
    write_raw_batch("create-queue-acme", c_acme, 1, 0x3d);
    Keyload__V1__Mutation *e_acme[] = {m_enqueue("orders", NULL, plain(pad)), m_receive("orders", NULL, 1, 0)};
    e_acme[0]->enqueue->lane->tenant = e_acme[1]->receive->lane->tenant = "acme";
    e_acme[0]->enqueue->lane->database = e_acme[1]->receive->lane->database = "shop";
    write_raw_batch("use-queue-acme", e_acme, 2, 0x3e);
    Keyload__V1__Mutation *c_nodb[] = {m_create("orders", 0, 0, 0, NULL, 0)};
    c_nodb[0]->create_queue->queue->database = "missing";
    write_raw_batch("create-queue-missing-database", c_nodb, 1, 0x3f);

    /* Placement: chosen by partition 0 (-1: a data partition), pinned elsewhere, pinned
     * past the last partition, and a dead-letter queue on another partition. */
    Keyload__V1__Mutation *c_any[] = {m_create("anywhere", 0, 0, 0, NULL, -1)};
    write_raw_batch("create-chosen-partition", c_any, 1, 0x40);
    Keyload__V1__Mutation *e_any[] = {m_enqueue("anywhere", NULL, plain(pad))};
    write_raw_batch("enqueue-wrong-partition", e_any, 1, 0x41);
    Keyload__V1__Mutation *d_any[] = {m_delete("anywhere"), m_enqueue("q", NULL, plain(pad)),
                                      m_enqueue("q", "x", plain("y"))};
    write_raw_batch("delete-elsewhere", d_any, 3, 0x42);
    Keyload__V1__Mutation *c_far[] = {m_create("far", 0, 0, 0, NULL, 9)};
    write_raw_batch("create-no-such-partition", c_far, 1, 0x43);
    Keyload__V1__Mutation *c_split[] = {m_create("split", 0, 0, 2, "dlq", 2)};
    write_raw_batch("create-dlq-other-partition", c_split, 1, 0x44);
    Keyload__V1__Mutation *c_follow[] = {m_create("follow", 0, 0, 2, "dlq", -1)};
    write_raw_batch("create-chosen-follows-dlq", c_follow, 1, 0x45);

    Keyload__V1__Mutation *c_only[] = {m_create("tmp2", 0, 0, 3, "dlq", 0)};
    write_raw_batch("create-with-dlq", c_only, 1, 0x25);

    Keyload__V1__Mutation *c_part[] = {m_create("elsewhere", 0, 0, 0, NULL, 1)};
    write_raw_batch("create-other-partition", c_part, 1, 0x26);

    static uint8_t tok[16];
    memset(tok, 0x3c, sizeof tok);
    static ProtobufCBinaryData toks[1] = {{16, tok}};
    Keyload__V1__Mutation *ack[] = {m_settle(true, "q", toks, 1)};
    write_raw_batch("ack-unknown-token", ack, 1, 0x27);
    Keyload__V1__Mutation *rel[] = {m_settle(false, "work", toks, 1)};
    write_raw_batch("release-unknown-token", rel, 1, 0x28);

    /* fuzz_batch overwrites 16 bytes starting "KLTOK" with a recent lease token (byte 5
     * picks which), so these settle real leases. */
    static uint8_t mark[4][16];
    static ProtobufCBinaryData marks[4];
    for (int i = 0; i < 4; i++) {
        memcpy(mark[i], "KLTOK", 5);
        memset(mark[i] + 5, 0, 11);
        mark[i][5] = (uint8_t)i;
        marks[i] = (ProtobufCBinaryData){16, mark[i]};
    }
    Keyload__V1__Mutation *ack_recent[] = {m_settle(true, "q", marks, 2)};
    write_raw_batch("ack-recent-leases", ack_recent, 1, 0x2c);
    Keyload__V1__Mutation *settle_recent[] = {m_settle(false, "work", marks, 1),
                                              m_settle(true, "q", marks + 1, 1),
                                              m_settle(false, "q", marks + 2, 2)};
    write_raw_batch("settle-recent-leases", settle_recent, 3, 0x2d);
    Keyload__V1__Mutation *rcv_ack[] = {m_receive("q", NULL, 3, 5000), m_settle(true, "q", marks, 1)};
    write_raw_batch("receive-then-ack-recent", rcv_ack, 2, 0x2e);

    /* "drop" (max_deliveries 1, no dead-letter queue) drops a message on its second try. */
    Keyload__V1__Mutation *drop[] = {m_enqueue("drop", NULL, plain("once")), m_receive("drop", NULL, 2, 1)};
    write_raw_batch("drop-cycle", drop, 2, 0x2f);

    /* Refusals that need state: deleting a queue that holds messages; a message over
     * "small"'s 64 bytes; a queue naming itself as its dead-letter queue; a release that
     * dead-letters into a dead-letter queue deleted in the same batch. */
    Keyload__V1__Mutation *del_q[] = {m_delete("q")};
    write_raw_batch("delete-non-empty", del_q, 1, 0x30);
    Keyload__V1__Mutation *big[] = {
        m_enqueue("small", NULL, plain("a body of seventy bytes, more than small's max_bytes allows ....."))};
    write_raw_batch("enqueue-small-too-big", big, 1, 0x31);
    Keyload__V1__Mutation *self[] = {m_create("self", 0, 0, 1, "self", 0)};
    write_raw_batch("create-self-dlq", self, 1, 0x32);
    Keyload__V1__Mutation *lost_dlq[] = {m_delete("dlq"), m_settle(false, "work", marks, 1)};
    write_raw_batch("release-into-deleted-dlq", lost_dlq, 2, 0x33);

    /* Receive, then with an expired or short lease, "work" dead-letters to "dlq". */
    Keyload__V1__Mutation *work[] = {m_enqueue("work", NULL, plain("job")), m_receive("work", NULL, 5, 1),
                                     m_receive("dlq", NULL, 5, 0)};
    write_raw_batch("work-cycle", work, 3, 0x29);

    /* Everything at once, meant to commit: a new queue (created first, on its own) used,
     * with a delete (a catalog change) in the same batch. */
    Keyload__V1__Mutation *c_mix[] = {m_create("mix", 100, 4096, 1, "dlq", 0)};
    write_raw_batch("create-mix", c_mix, 1, 0x46);
    Keyload__V1__Mutation *mixed[] = {m_enqueue("mix", "a", plain("one")),
                                      m_enqueue("mix", "b", plain("two")),
                                      m_receive("mix", "a", 2, 1000),
                                      m_enqueue("q", NULL, plain("three")),
                                      m_receive("q", NULL, 1, 0),
                                      m_delete("tmp2")};
    write_raw_batch("mixed", mixed, 6, 0x2a);

    /* Mixed, bound to fail at its last mutation (all or nothing). */
    Keyload__V1__Mutation *mixed_bad[] = {m_enqueue("q", NULL, plain("four")), m_receive("q", NULL, 3, 0),
                                          m_settle(true, "q", toks, 1), m_settle(false, "q", toks, 1),
                                          m_delete("small")};
    write_raw_batch("mixed-failing", mixed_bad, 5, 0x2b);

    /* Remote transfers: a destination on partition 1 (only its definition lives here),
     * a transfer from "q" to it, then Accept and Complete with tokens that are not
     * genuine (they must be refused, committed as no-effect outcomes), and the pause. */
    Keyload__V1__Mutation *c_dest[] = {m_create("dest", 0, 0, 0, NULL, 1)};
    write_raw_batch("create-dest", c_dest, 1, 0x50);
    static uint8_t tid[16] = {0x7f, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    Keyload__V1__CreateQueueTransfer *ct = calloc(1, sizeof *ct);
    keyload__v1__create_queue_transfer__init(ct);
    ct->source_queue = ref("q", "out");
    ct->transfer_id.data = tid;
    ct->transfer_id.len = 16;
    ct->destination = ref("dest", NULL);
    ct->message = plain("transferred");
    Keyload__V1__Mutation *m_ct = mut();
    m_ct->kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE_TRANSFER;
    m_ct->create_queue_transfer = ct;
    Keyload__V1__Mutation *xfer_create[] = {m_ct};
    write_raw_batch("transfer-create", xfer_create, 1, 0x51);
    /* Something shaped like a SignedToken: field 1 (claims), 2 (key id), 3 (signature). */
    static uint8_t fake[2 + 4 + 2 + 8 + 2 + 64] = {0x0a, 4, 0x08, 1, 0x10, 1, 0x12, 8};
    fake[16] = 0x1a;
    fake[17] = 64;
    Keyload__V1__AcceptQueueTransfer *at = calloc(1, sizeof *at);
    keyload__v1__accept_queue_transfer__init(at);
    at->destination_queue = ref("q", NULL);
    at->intent_token.data = fake;
    at->intent_token.len = sizeof fake;
    Keyload__V1__Mutation *m_at = mut();
    m_at->kind_case = KEYLOAD__V1__MUTATION__KIND_ACCEPT_QUEUE_TRANSFER;
    m_at->accept_queue_transfer = at;
    Keyload__V1__Mutation *xfer_accept[] = {m_at};
    write_raw_batch("transfer-accept-forged", xfer_accept, 1, 0x52);
    Keyload__V1__CompleteQueueTransfer *cpt = calloc(1, sizeof *cpt);
    keyload__v1__complete_queue_transfer__init(cpt);
    cpt->source_queue = ref("q", "out");
    cpt->transfer_id.data = tid;
    cpt->transfer_id.len = 16;
    cpt->receipt_token.data = fake;
    cpt->receipt_token.len = sizeof fake;
    Keyload__V1__Mutation *m_cpt = mut();
    m_cpt->kind_case = KEYLOAD__V1__MUTATION__KIND_COMPLETE_QUEUE_TRANSFER;
    m_cpt->complete_queue_transfer = cpt;
    Keyload__V1__Mutation *xfer_complete[] = {m_cpt};
    write_raw_batch("transfer-complete-forged", xfer_complete, 1, 0x53);
    Keyload__V1__SetQueueTransfersPaused *sp = calloc(1, sizeof *sp);
    keyload__v1__set_queue_transfers_paused__init(sp);
    sp->tenant = "default";
    sp->database = "default";
    sp->source_queue = ref("q", "out");
    sp->paused = true;
    Keyload__V1__Mutation *m_sp = mut();
    m_sp->kind_case = KEYLOAD__V1__MUTATION__KIND_SET_QUEUE_TRANSFERS_PAUSED;
    m_sp->set_queue_transfers_paused = sp;
    Keyload__V1__Mutation *xfer_pause[] = {m_sp};
    write_raw_batch("transfer-pause-lane", xfer_pause, 1, 0x54);
    /* KL-6: both advances with a forged witness (refused, committed as no-effect). */
    Keyload__V1__AdvanceQueueTransferAttempt *aa = calloc(1, sizeof *aa);
    keyload__v1__advance_queue_transfer_attempt__init(aa);
    aa->source_queue = ref("q", "out");
    aa->transfer_id.data = tid;
    aa->transfer_id.len = 16;
    aa->witness_token.data = fake;
    aa->witness_token.len = sizeof fake;
    Keyload__V1__Mutation *m_aa = mut();
    m_aa->kind_case = KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_ATTEMPT;
    m_aa->advance_queue_transfer_attempt = aa;
    Keyload__V1__Mutation *xfer_advance[] = {m_aa};
    write_raw_batch("transfer-advance-forged", xfer_advance, 1, 0x55);
    Keyload__V1__AdvanceQueueTransferRepair *ar = calloc(1, sizeof *ar);
    keyload__v1__advance_queue_transfer_repair__init(ar);
    ar->source_queue = ref("q", "out");
    ar->transfer_id.data = tid;
    ar->transfer_id.len = 16;
    ar->witness_token.data = fake;
    ar->witness_token.len = sizeof fake;
    Keyload__V1__Mutation *m_ar = mut();
    m_ar->kind_case = KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_REPAIR;
    m_ar->advance_queue_transfer_repair = ar;
    Keyload__V1__Mutation *xfer_repair[] = {m_ar};
    write_raw_batch("transfer-repair-forged", xfer_repair, 1, 0x56);
}

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: seedgen DIR [BATCH_DIR]\n");
        return 2;
    }
    if (argc == 3) {
        g_dir = argv[2];
        batch_seeds();
        printf("seedgen: wrote %d seeds to %s\n", g_count, g_dir);
        g_count = 0;
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
    Keyload__V1__Mutation *mixed[] = {&m_enq, &m_rcv, &m_ack, &m_rel, &m_del};
    write_batch("batch-mixed", mixed, 5, 3);
    /* Refused by validation: a create mixed with other mutations. */
    Keyload__V1__Mutation *mixed_create[] = {&m_create, &m_enq, &m_rcv, &m_ack, &m_rel, &m_del};
    write_batch("batch-mixed-create", mixed_create, 6, 5);
    /* The catalog mutation: create_database with limits; and a queue left to partition 0. */
    Keyload__V1__DatabaseLimits dl = KEYLOAD__V1__DATABASE_LIMITS__INIT;
    dl.max_scan_records = 100;
    dl.max_batch_bytes = 4096;
    dl.max_query_read_bytes = 65536;
    Keyload__V1__CreateDatabase cdb = KEYLOAD__V1__CREATE_DATABASE__INIT;
    cdb.tenant = "acme";
    cdb.database = "shop";
    cdb.limits = &dl;
    Keyload__V1__Mutation m_cdb = KEYLOAD__V1__MUTATION__INIT;
    m_cdb.kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_DATABASE;
    m_cdb.create_database = &cdb;
    Keyload__V1__Mutation *one_db[] = {&m_cdb};
    write_batch("batch-create-database", one_db, 1, 6);
    Keyload__V1__CreateQueue cq_any = cq;
    cq_any.partition = -1;
    Keyload__V1__Mutation m_create_any = m_create;
    m_create_any.create_queue = &cq_any;
    Keyload__V1__Mutation *one_any[] = {&m_create_any};
    write_batch("batch-create-chosen", one_any, 1, 7);

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
