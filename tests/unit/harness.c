#include "harness.h"

#include "tests/support/data_end.h"
#include "keyload/v1/store.pb-c.h"

#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char run_root[128];

int th_run_root_make(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(run_root, sizeof run_root, "%s/kl-unit-run-XXXXXX",
             base != NULL && base[0] != '\0' && strlen(base) < 64 ? base : "/tmp");
    if (mkdtemp(run_root) == NULL) {
        run_root[0] = '\0';
        return -1;
    }
    return 0;
}

void th_tmpdir_named(char *out, size_t cap, const char *prefix)
{
    ck_assert_msg(run_root[0] != '\0', "th_run_root_make was not called");
    int n = snprintf(out, cap, "%s/%s-XXXXXX", run_root, prefix);
    ck_assert_msg(n > 0 && (size_t)n < cap, "temporary path longer than %zu bytes", cap);
    ck_assert_ptr_nonnull(mkdtemp(out));
}

void th_tmpdir(char *out, size_t cap) { th_tmpdir_named(out, cap, "kl-unit"); }

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

void th_rmrf(const char *dir) { nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

void th_run_root_remove(void)
{
    if (run_root[0] != '\0')
        th_rmrf(run_root);
    run_root[0] = '\0';
}

static void th_next(void *ctx, uint64_t *index, uint64_t *term, bool *serving)
{
    th_node *t = ctx;
    *index = t->next_index;
    *term = t->term;
    *serving = t->serving;
}

static kl_code th_propose(void *ctx, const uint8_t *entry, size_t len)
{
    th_node *t = ctx;
    if (t->propose_code != KL_OK)
        return t->propose_code;
    ck_assert_uint_lt(t->n_props, sizeof t->props / sizeof t->props[0]);
    th_prop *p = &t->props[t->n_props++];
    p->index = t->next_index++;
    p->term = t->term;
    p->bytes = malloc(len ? len : 1);
    memcpy(p->bytes, entry, len);
    p->len = len;
    return KL_OK;
}

static void th_flush_soon(void *ctx) { ((th_node *)ctx)->flush_asked++; }

static void pop_prop(th_node *t)
{
    free(t->props[0].bytes);
    memmove(&t->props[0], &t->props[1], (t->n_props - 1) * sizeof t->props[0]);
    t->n_props--;
}

void th_persist_only(th_node *t)
{
    ck_assert_uint_gt(t->n_props, 0);
    kl_err err;
    kl_store_log_item it = {t->props[0].index, t->props[0].bytes, t->props[0].len};
    ck_assert_int_eq(kl_store_log_write(t->store, NULL, 0, &it, 1, &err), KL_OK);
}

void th_persist(th_node *t)
{
    th_persist_only(t);
    kl_err err;
    ck_assert_int_eq(kl_node_apply(t->node, t->props[0].index, t->props[0].term, t->props[0].bytes,
                                   t->props[0].len, &err), KL_OK);
    pop_prop(t);
}

void th_drain(th_node *t)
{
    while (t->n_props > 0)
        th_persist(t);
}

static int64_t th_clock(void *ctx) { return ((th_node *)ctx)->now; }
static int64_t th_boot(void *ctx)
{
    th_node *t = ctx;
    return (t->boot_clock ? t->boot_ms : t->now) * 1000000;
}

static th_node *rand_owner;
static void th_random(uint8_t *buf, size_t n)
{
    /* Deterministic and distinct: a counter spread over the buffer. */
    uint64_t c = ++rand_owner->rand_counter;
    memset(buf, 0xA5, n);
    memcpy(buf, &c, n < 8 ? n : 8);
}

const uint8_t th_cluster_secret[32] = {0x74, 0x68, 0x2d, 0x73, 0x65, 0x63, 0x72, 0x65, 0x74};

void th_reopen(th_node *t);
Keyload__V1__BatchReceipt *th_run(th_node *t, th_batch *b, kl_code expect);

static void th_open_with(th_node *t, const char *dir, const kl_limits *limits, int partition, int count)
{
    memset(t, 0, sizeof *t);
    t->partition = partition;
    t->partition_count = count;
    snprintf(t->dir, sizeof t->dir, "%s", dir);
    t->now = 1700000000000;
    t->auto_persist = true;
    t->serving = true;
    t->term = 1;
    if (limits)
        t->limits = *limits;
    else
        kl_limits_default(&t->limits);
    th_reopen(t);
    if (t->auto_persist && t->serving && partition == 0) {
        /* Queues need their database in the catalog (partition 0 is this node). */
        th_batch *b = th_batch_new(0xDB);
        th_create_database(b, "default", "default");
        Keyload__V1__BatchReceipt *r = th_run(t, b, KL_OK);
        keyload__v1__batch_receipt__free_unpacked(r, NULL);
    }
}

void th_open(th_node *t, const char *dir, const kl_limits *limits)
{
    th_open_with(t, dir, limits, 0, 1);
}

void th_open_as(th_node *t, const char *dir, int partition, int count)
{
    th_open_with(t, dir, NULL, partition, count);
}

void th_reopen(th_node *t)
{
    kl_err err;
    rand_owner = t;
    ck_assert_int_eq(kl_store_open(t->dir, NULL, &t->store, &err), KL_OK);
    kl_node_config cfg = {.partition = t->partition, .partition_count = t->partition_count,
                          .cluster_secret = th_cluster_secret, .insecure_local_admin = !t->require_sessions, .limits = t->limits, .max_pending_bytes = 1u << 26,
                          .max_pending_batches = 1024, .outcome_retention_ms = t->outcome_retention_ms};
    kl_node_io io = {.ctx = t, .next = th_next, .propose = th_propose, .clock_ms = th_clock,
                     .boot_ns = th_boot, .random = th_random,
                     .flush_soon = t->group ? th_flush_soon : NULL};
    ck_assert_int_eq(kl_node_open(t->store, &cfg, &io, &t->node, &err), KL_OK);
    /* One member: every durable entry is committed; re-apply the ones not yet applied, as
     * the driver's Raft group hands them out after a restart. */
    uint64_t last = kl_store_last_index(t->store);
    for (uint64_t i = kl_store_applied_index(t->store) + 1; i <= last; i++) {
        uint8_t *bytes;
        size_t len;
        bool found;
        ck_assert_int_eq(kl_store_read_log(t->store, i, &bytes, &len, &found, &err), KL_OK);
        ck_assert(found);
        Keyload__V1__LogEntry *e = keyload__v1__log_entry__unpack(NULL, len, bytes);
        ck_assert_ptr_nonnull(e);
        uint64_t term = e->term;
        keyload__v1__log_entry__free_unpacked(e, NULL);
        ck_assert_int_eq(kl_node_apply(t->node, i, term, bytes, len, &err), KL_OK);
        free(bytes);
    }
    t->next_index = last + 1;
    t->term++; /* a restarted member leads a new term */
    kl_node_role(t->node, t->serving);
    if (t->auto_persist)
        th_drain(t);
}

void th_close(th_node *t)
{
    kl_node_close(t->node);
    kl_store_close(t->store);
    while (t->n_props > 0)
        pop_prop(t);
    t->node = NULL;
    t->store = NULL;
}

static void on_reply(void *cookie, kl_code code, const kl_err *err, const uint8_t *receipt, size_t len)
{
    th_reply *r = cookie;
    r->count++;
    r->code = code;
    if (err)
        r->err = *err;
    free(r->receipt);
    r->receipt = NULL;
    r->len = len;
    if (receipt) {
        r->receipt = malloc(len ? len : 1);
        memcpy(r->receipt, receipt, len);
    }
}

kl_node_reply_fn th_reply_fn(void) { return on_reply; }

void th_reply_free(th_reply *r)
{
    free(r->receipt);
    memset(r, 0, sizeof *r);
}

/* ---- batches: a protobuf-c tree with every piece owned by th_batch ---- */

struct th_batch {
    Keyload__V1__BatchRequest b;
    uint8_t cmd[16];
    void *owned[256];
    int n_owned;
};

static void *own(th_batch *b, size_t n)
{
    void *p = calloc(1, n);
    ck_assert_int_lt(b->n_owned, 256);
    b->owned[b->n_owned++] = p;
    return p;
}

th_batch *th_batch_new(uint8_t cmd_byte)
{
    th_batch *b = calloc(1, sizeof *b);
    keyload__v1__batch_request__init(&b->b);
    memset(b->cmd, cmd_byte, 16);
    b->b.command_id.data = b->cmd;
    b->b.command_id.len = 16;
    b->b.mutations = own(b, 64 * sizeof(void *));
    return b;
}

void th_batch_cmd(th_batch *b, const uint8_t cmd[16]) { memcpy(b->cmd, cmd, 16); }

static Keyload__V1__QueueLaneRef *ref(th_batch *b, const char *queue, const char *lane)
{
    Keyload__V1__QueueLaneRef *r = own(b, sizeof *r);
    keyload__v1__queue_lane_ref__init(r);
    r->tenant = "default";
    r->database = "default";
    r->queue = (char *)queue;
    r->lane = (char *)(lane ? lane : "");
    return r;
}

static Keyload__V1__Mutation *mut(th_batch *b)
{
    Keyload__V1__Mutation *m = own(b, sizeof *m);
    keyload__v1__mutation__init(m);
    b->b.mutations[b->b.n_mutations++] = m;
    return m;
}

void th_create(th_batch *b, const char *queue, uint64_t max_messages, uint64_t max_bytes,
               uint32_t max_deliveries, const char *dlq)
{
    Keyload__V1__Mutation *m = mut(b);
    Keyload__V1__CreateQueue *c = own(b, sizeof *c);
    keyload__v1__create_queue__init(c);
    Keyload__V1__QueueLimits *l = own(b, sizeof *l);
    keyload__v1__queue_limits__init(l);
    l->max_messages = max_messages;
    l->max_bytes = max_bytes;
    l->max_deliveries = max_deliveries;
    l->dead_letter_queue = (char *)(dlq ? dlq : "");
    c->queue = ref(b, queue, NULL);
    c->limits = l;
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE;
    m->create_queue = c;
}

static Keyload__V1__Mutation *last_mut(th_batch *b)
{
    ck_assert_uint_gt(b->b.n_mutations, 0);
    return b->b.mutations[b->b.n_mutations - 1];
}

void th_batch_set_partition(th_batch *b, int partition)
{
    Keyload__V1__Mutation *m = last_mut(b);
    ck_assert_int_eq(m->kind_case, KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE);
    m->create_queue->partition = partition;
}

void th_batch_set_database(th_batch *b, const char *database)
{
    Keyload__V1__Mutation *m = last_mut(b);
    switch (m->kind_case) {
    case KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE: m->create_queue->queue->database = (char *)database; break;
    case KEYLOAD__V1__MUTATION__KIND_ENQUEUE: m->enqueue->lane->database = (char *)database; break;
    default: ck_abort_msg("th_batch_set_database: unsupported mutation kind");
    }
}

void th_batch_set_db_limits(th_batch *b, uint64_t scan, uint64_t batch_bytes, uint64_t read_bytes)
{
    Keyload__V1__Mutation *m = last_mut(b);
    ck_assert_int_eq(m->kind_case, KEYLOAD__V1__MUTATION__KIND_CREATE_DATABASE);
    Keyload__V1__DatabaseLimits *l = own(b, sizeof *l);
    keyload__v1__database_limits__init(l);
    l->max_scan_records = scan;
    l->max_batch_bytes = batch_bytes;
    l->max_query_read_bytes = read_bytes;
    m->create_database->limits = l;
}

void th_batch_set_db_accept_attempts(th_batch *b, uint64_t attempts)
{
    Keyload__V1__Mutation *m = last_mut(b);
    ck_assert_int_eq(m->kind_case, KEYLOAD__V1__MUTATION__KIND_CREATE_DATABASE);
    if (m->create_database->limits == NULL) {
        Keyload__V1__DatabaseLimits *l = own(b, sizeof *l);
        keyload__v1__database_limits__init(l);
        m->create_database->limits = l;
    }
    Keyload__V1__NullableU64 *n = own(b, sizeof *n);
    keyload__v1__nullable_u64__init(n);
    n->value = attempts;
    m->create_database->limits->max_queue_transfer_accept_attempts = n;
}

void th_bootstrap(th_batch *b, const char *tenant, const char *database, const char *admin,
                  const uint8_t pk[32], const uint8_t proof[32])
{
    Keyload__V1__Mutation *m = mut(b);
    Keyload__V1__Bootstrap *bs = own(b, sizeof *bs);
    keyload__v1__bootstrap__init(bs);
    bs->tenant = (char *)tenant;
    bs->database = (char *)database;
    bs->admin_id = (char *)admin;
    uint8_t *k = own(b, 64);
    memcpy(k, pk, 32);
    memcpy(k + 32, proof, 32);
    bs->admin_public_key.data = k;
    bs->admin_public_key.len = 32;
    bs->proof.data = k + 32;
    bs->proof.len = 32;
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_BOOTSTRAP;
    m->bootstrap = bs;
}

void th_create_principal(th_batch *b, const char *id, const uint8_t pk[32], bool cluster_admin,
                         const char *admin_of)
{
    Keyload__V1__Mutation *m = mut(b);
    Keyload__V1__CreatePrincipal *c = own(b, sizeof *c);
    keyload__v1__create_principal__init(c);
    c->tenant = "default";
    c->principal_id = (char *)id;
    uint8_t *k = own(b, 32);
    memcpy(k, pk, 32);
    c->public_key.data = k;
    c->public_key.len = 32;
    c->cluster_admin = cluster_admin;
    c->database_admin = admin_of != NULL;
    c->database = (char *)(admin_of ? admin_of : "");
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_PRINCIPAL;
    m->create_principal = c;
}

void th_grant(th_batch *b, const char *id, Keyload__V1__Permission perm, const char *pattern,
              const char *field, const char *header)
{
    Keyload__V1__Mutation *m = mut(b);
    Keyload__V1__GrantPermission *g = own(b, sizeof *g);
    keyload__v1__grant_permission__init(g);
    Keyload__V1__Grant *gr = own(b, sizeof *gr);
    keyload__v1__grant__init(gr);
    gr->database = "default";
    gr->permission = perm;
    gr->queue_pattern = (char *)pattern;
    if (field) {
        gr->fields = own(b, sizeof(char *));
        gr->fields[0] = (char *)field;
        gr->n_fields = 1;
    }
    if (header) {
        gr->headers = own(b, sizeof(char *));
        gr->headers[0] = (char *)header;
        gr->n_headers = 1;
    }
    g->principal_id = (char *)id;
    g->grant = gr;
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_GRANT_PERMISSION;
    m->grant_permission = g;
}

void th_revoke(th_batch *b, const char *id, Keyload__V1__Permission perm, const char *pattern)
{
    Keyload__V1__Mutation *m = mut(b);
    Keyload__V1__RevokePermission *r = own(b, sizeof *r);
    keyload__v1__revoke_permission__init(r);
    r->principal_id = (char *)id;
    r->database = "default";
    r->permission = perm;
    r->queue_pattern = (char *)pattern;
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_REVOKE_PERMISSION;
    m->revoke_permission = r;
}

void th_set_key(th_batch *b, const char *id, const uint8_t pk[32])
{
    Keyload__V1__Mutation *m = mut(b);
    Keyload__V1__SetPrincipalKey *k = own(b, sizeof *k);
    keyload__v1__set_principal_key__init(k);
    k->principal_id = (char *)id;
    uint8_t *c = own(b, 32);
    memcpy(c, pk, 32);
    k->public_key.data = c;
    k->public_key.len = 32;
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_SET_PRINCIPAL_KEY;
    m->set_principal_key = k;
}

void th_enqueue_keys(th_batch *b, const char *queue, const char *body, const char *field,
                     const char *header)
{
    th_enqueue(b, queue, NULL, body);
    Keyload__V1__EnqueueMessage *msg = last_mut(b)->enqueue->message;
    if (field) {
        Keyload__V1__Field *f = own(b, sizeof *f);
        keyload__v1__field__init(f);
        Keyload__V1__FieldValue *v = own(b, sizeof *v);
        keyload__v1__field_value__init(v);
        v->kind_case = KEYLOAD__V1__FIELD_VALUE__KIND_INT_VALUE;
        v->int_value = 7;
        f->key = (char *)field;
        f->value = v;
        msg->fields = own(b, sizeof(void *));
        msg->fields[0] = f;
        msg->n_fields = 1;
    }
    if (header) {
        Keyload__V1__Header *h = own(b, sizeof *h);
        keyload__v1__header__init(h);
        h->key = (char *)header;
        h->value = "v";
        msg->headers = own(b, sizeof(void *));
        msg->headers[0] = h;
        msg->n_headers = 1;
    }
}

void th_create_database(th_batch *b, const char *tenant, const char *database)
{
    Keyload__V1__Mutation *m = mut(b);
    Keyload__V1__CreateDatabase *d = own(b, sizeof *d);
    keyload__v1__create_database__init(d);
    d->tenant = (char *)tenant;
    d->database = (char *)database;
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_DATABASE;
    m->create_database = d;
}

void th_delete(th_batch *b, const char *queue)
{
    Keyload__V1__Mutation *m = mut(b);
    Keyload__V1__DeleteQueue *d = own(b, sizeof *d);
    keyload__v1__delete_queue__init(d);
    d->queue = ref(b, queue, NULL);
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_DELETE_QUEUE;
    m->delete_queue = d;
}

void th_enqueue(th_batch *b, const char *queue, const char *lane, const char *body)
{
    Keyload__V1__Mutation *m = mut(b);
    Keyload__V1__Enqueue *e = own(b, sizeof *e);
    keyload__v1__enqueue__init(e);
    Keyload__V1__EnqueueMessage *msg = own(b, sizeof *msg);
    keyload__v1__enqueue_message__init(msg);
    msg->body.data = (uint8_t *)body;
    msg->body.len = strlen(body);
    e->lane = ref(b, queue, lane);
    e->message = msg;
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_ENQUEUE;
    m->enqueue = e;
}

void th_receive(th_batch *b, const char *queue, const char *lane, uint32_t max, uint32_t lease_ms)
{
    Keyload__V1__Mutation *m = mut(b);
    Keyload__V1__Receive *r = own(b, sizeof *r);
    keyload__v1__receive__init(r);
    r->lane = ref(b, queue, lane);
    r->max_messages = max;
    r->lease_ms = lease_ms;
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_RECEIVE;
    m->receive = r;
}

void th_receive_wait(th_batch *b, const char *queue, uint32_t max, uint32_t lease_ms, uint32_t wait_ms)
{
    th_receive(b, queue, NULL, max, lease_ms);
    b->b.mutations[b->b.n_mutations - 1]->receive->wait_ms = wait_ms;
}

static ProtobufCBinaryData *tokens(th_batch *b, const uint8_t *t, size_t n)
{
    ProtobufCBinaryData *v = own(b, n * sizeof *v);
    uint8_t *copy = own(b, n * 16);
    memcpy(copy, t, n * 16);
    for (size_t i = 0; i < n; i++) {
        v[i].data = copy + 16 * i;
        v[i].len = 16;
    }
    return v;
}

void th_ack(th_batch *b, const char *queue, const uint8_t *t, size_t n)
{
    Keyload__V1__Mutation *m = mut(b);
    Keyload__V1__Ack *a = own(b, sizeof *a);
    keyload__v1__ack__init(a);
    a->queue = ref(b, queue, NULL);
    a->lease_tokens = tokens(b, t, n);
    a->n_lease_tokens = n;
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_ACK;
    m->ack = a;
}

void th_release(th_batch *b, const char *queue, const uint8_t *t, size_t n)
{
    Keyload__V1__Mutation *m = mut(b);
    Keyload__V1__Release *a = own(b, sizeof *a);
    keyload__v1__release__init(a);
    a->queue = ref(b, queue, NULL);
    a->lease_tokens = tokens(b, t, n);
    a->n_lease_tokens = n;
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_RELEASE;
    m->release = a;
}

uint8_t *th_batch_pack(th_batch *b, size_t *len)
{
    *len = keyload__v1__batch_request__get_packed_size(&b->b);
    uint8_t *buf = malloc(*len ? *len : 1);
    keyload__v1__batch_request__pack(&b->b, buf);
    for (int i = 0; i < b->n_owned; i++)
        free(b->owned[i]);
    free(b);
    return buf;
}

void th_submit(th_node *t, const uint8_t *req, size_t len, th_reply *r)
{
    rand_owner = t;
    kl_node_submit_batch(t->node, t->principal ? t->principal : "local", req, len, on_reply, r);
    if (t->auto_persist)
        th_drain(t);
}

/* Packs, submits and checks that exactly one answer with code `expect` came. */
static void run_expect(th_node *t, th_batch *b, kl_code expect, th_reply *r)
{
    size_t len;
    uint8_t *req = th_batch_pack(b, &len);
    th_submit(t, req, len, r);
    free(req);
    ck_assert_int_eq(r->count, 1);
    ck_assert_msg(r->code == expect, "expected %s, got %s: %s", kl_code_name(expect), kl_code_name(r->code),
                  r->err.message);
}

void th_run_err(th_node *t, th_batch *b, kl_code expect, kl_err *err)
{
    th_reply r = {0};
    run_expect(t, b, expect, &r);
    *err = r.err;
    th_reply_free(&r);
}

Keyload__V1__BatchReceipt *th_run(th_node *t, th_batch *b, kl_code expect)
{
    th_reply r = {0};
    run_expect(t, b, expect, &r);
    Keyload__V1__BatchReceipt *rc = NULL;
    if (r.code == KL_OK) {
        rc = keyload__v1__batch_receipt__unpack(NULL, r.len, r.receipt);
        ck_assert_ptr_nonnull(rc);
    }
    th_reply_free(&r);
    return rc;
}

uint64_t th_queue_messages(th_node *t, const char *queue, uint64_t *in_flight)
{
    Keyload__V1__QueueStatsRequest q = KEYLOAD__V1__QUEUE_STATS_REQUEST__INIT;
    Keyload__V1__QueueLaneRef r = KEYLOAD__V1__QUEUE_LANE_REF__INIT;
    r.tenant = "default";
    r.database = "default";
    r.queue = (char *)queue;
    q.queue = &r;
    uint8_t buf[512];
    size_t n = keyload__v1__queue_stats_request__pack(&q, buf);
    uint8_t *ans;
    size_t alen;
    kl_err err;
    ck_assert_int_eq(kl_node_queue_stats(t->node, t->reader ? t->reader : "local", buf, n, &ans, &alen, &err), KL_OK);
    Keyload__V1__QueueStatsAnswer *a = keyload__v1__queue_stats_answer__unpack(NULL, alen, ans);
    uint64_t m = a->messages;
    if (in_flight)
        *in_flight = a->in_flight;
    keyload__v1__queue_stats_answer__free_unpacked(a, NULL);
    free(ans);
    return m;
}

long th_file_data_end(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    long end = test_data_end(f);
    fclose(f);
    return end;
}

void th_file_poke(const char *path, long off, const uint8_t *bytes, size_t n)
{
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, off, SEEK_SET), 0);
    ck_assert_uint_eq(fwrite(bytes, 1, n, f), n);
    fclose(f);
}

void th_file_flip(const char *path, long off)
{
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, off, SEEK_SET), 0);
    int c = fgetc(f);
    ck_assert_int_ne(c, EOF);
    ck_assert_int_eq(fseek(f, off, SEEK_SET), 0);
    ck_assert_int_ne(fputc(c ^ 0x40, f), EOF);
    fclose(f);
}
