/* Builders of the golden samples (build.h). */
#include "tests/golden/build.h"

#include "tests/golden/golden.h"

#include <stdlib.h>
#include <string.h>

static void **arena;
static size_t arena_n, arena_cap;

void *golden_alloc(size_t n)
{
    void *p = calloc(1, n ? n : 1);
    if (p == NULL)
        golden_die("out of memory");
    if (arena_n == arena_cap) {
        arena_cap = arena_cap ? arena_cap * 2 : 256;
        arena = realloc(arena, arena_cap * sizeof *arena);
        if (arena == NULL)
            golden_die("out of memory");
    }
    arena[arena_n++] = p;
    return p;
}

void golden_arena_free(void)
{
    for (size_t i = 0; i < arena_n; i++)
        free(arena[i]);
    free(arena);
    arena = NULL;
    arena_n = arena_cap = 0;
}

ProtobufCBinaryData golden_bin(const uint8_t *p, size_t n)
{
    uint8_t *c = golden_alloc(n);
    if (n)
        memcpy(c, p, n);
    return (ProtobufCBinaryData){.len = n, .data = c};
}

static char *str(const char *s) { return s ? strcpy(golden_alloc(strlen(s) + 1), s) : NULL; }

Keyload__V1__QueueLaneRef *gb_lane(const char *tenant, const char *db, const char *queue, const char *lane)
{
    Keyload__V1__QueueLaneRef *r = golden_alloc(sizeof *r);
    keyload__v1__queue_lane_ref__init(r);
    r->tenant = str(tenant);
    r->database = str(db);
    r->queue = str(queue);
    r->lane = str(lane ? lane : "");
    return r;
}

Keyload__V1__EnqueueMessage *gb_msg(const char *body)
{
    Keyload__V1__EnqueueMessage *m = golden_alloc(sizeof *m);
    keyload__v1__enqueue_message__init(m);
    m->body = golden_bin((const uint8_t *)body, strlen(body));
    return m;
}

static Keyload__V1__Header *header(const char *k, const char *v)
{
    Keyload__V1__Header *h = golden_alloc(sizeof *h);
    keyload__v1__header__init(h);
    h->key = str(k);
    h->value = str(v);
    return h;
}

static Keyload__V1__Field *field(const char *k, Keyload__V1__FieldValue__KindCase kind)
{
    Keyload__V1__Field *f = golden_alloc(sizeof *f);
    keyload__v1__field__init(f);
    f->key = str(k);
    Keyload__V1__FieldValue *v = golden_alloc(sizeof *v);
    keyload__v1__field_value__init(v);
    v->kind_case = kind;
    f->value = v;
    return f;
}

Keyload__V1__EnqueueMessage *gb_msg_rich(void)
{
    Keyload__V1__EnqueueMessage *m = gb_msg("rich body \x01\x02");
    m->n_headers = 2;
    m->headers = golden_alloc(2 * sizeof *m->headers);
    m->headers[0] = header("trace", "t-1");
    m->headers[1] = header("origin", "golden");
    m->n_fields = 5;
    m->fields = golden_alloc(5 * sizeof *m->fields);
    m->fields[0] = field("s", KEYLOAD__V1__FIELD_VALUE__KIND_STRING_VALUE);
    m->fields[0]->value->string_value = str("text");
    m->fields[1] = field("i", KEYLOAD__V1__FIELD_VALUE__KIND_INT_VALUE);
    m->fields[1]->value->int_value = -42;
    m->fields[2] = field("d", KEYLOAD__V1__FIELD_VALUE__KIND_DOUBLE_VALUE);
    m->fields[2]->value->double_value = 2.5;
    m->fields[3] = field("b", KEYLOAD__V1__FIELD_VALUE__KIND_BOOL_VALUE);
    m->fields[3]->value->bool_value = 1;
    m->fields[4] = field("y", KEYLOAD__V1__FIELD_VALUE__KIND_BYTES_VALUE);
    m->fields[4]->value->bytes_value = golden_bin((const uint8_t *)"\x00\xff", 2);
    m->expires_at_unix_ms = 1800000000000;
    m->delay_ms = 0;
    return m;
}

Keyload__V1__EnqueueMessage *gb_msg_keys(const char *body, const char *fkey, const char *hkey)
{
    Keyload__V1__EnqueueMessage *m = gb_msg(body);
    m->n_headers = 1;
    m->headers = golden_alloc(sizeof *m->headers);
    m->headers[0] = header(hkey, "hv");
    m->n_fields = 1;
    m->fields = golden_alloc(sizeof *m->fields);
    m->fields[0] = field(fkey, KEYLOAD__V1__FIELD_VALUE__KIND_INT_VALUE);
    m->fields[0]->value->int_value = 7;
    return m;
}

Keyload__V1__DatabaseLimits *gb_db_limits(uint64_t scan, uint64_t batch_bytes, uint64_t read_bytes,
                                          bool attempts_set, uint64_t attempts)
{
    Keyload__V1__DatabaseLimits *l = golden_alloc(sizeof *l);
    keyload__v1__database_limits__init(l);
    l->max_scan_records = scan;
    l->max_batch_bytes = batch_bytes;
    l->max_query_read_bytes = read_bytes;
    if (attempts_set) {
        l->max_queue_transfer_accept_attempts = golden_alloc(sizeof *l->max_queue_transfer_accept_attempts);
        keyload__v1__nullable_u64__init(l->max_queue_transfer_accept_attempts);
        l->max_queue_transfer_accept_attempts->value = attempts;
    }
    return l;
}

static Keyload__V1__Mutation *mutation(Keyload__V1__Mutation__KindCase kind)
{
    Keyload__V1__Mutation *m = golden_alloc(sizeof *m);
    keyload__v1__mutation__init(m);
    m->kind_case = kind;
    return m;
}

#define MSG(type, init) type *x = golden_alloc(sizeof *x); init(x)

Keyload__V1__Mutation *gb_create_queue(Keyload__V1__QueueLaneRef *q, uint64_t max_messages, uint64_t max_bytes,
                                       uint32_t max_deliveries, const char *dlq, int32_t partition)
{
    MSG(Keyload__V1__CreateQueue, keyload__v1__create_queue__init);
    x->queue = q;
    x->limits = golden_alloc(sizeof *x->limits);
    keyload__v1__queue_limits__init(x->limits);
    x->limits->max_messages = max_messages;
    x->limits->max_bytes = max_bytes;
    x->limits->max_deliveries = max_deliveries;
    x->limits->dead_letter_queue = str(dlq ? dlq : "");
    x->partition = partition;
    Keyload__V1__Mutation *m = mutation(KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE);
    m->create_queue = x;
    return m;
}

Keyload__V1__Mutation *gb_delete_queue(Keyload__V1__QueueLaneRef *q)
{
    MSG(Keyload__V1__DeleteQueue, keyload__v1__delete_queue__init);
    x->queue = q;
    Keyload__V1__Mutation *m = mutation(KEYLOAD__V1__MUTATION__KIND_DELETE_QUEUE);
    m->delete_queue = x;
    return m;
}

Keyload__V1__Mutation *gb_enqueue(Keyload__V1__QueueLaneRef *lane, Keyload__V1__EnqueueMessage *msg)
{
    MSG(Keyload__V1__Enqueue, keyload__v1__enqueue__init);
    x->lane = lane;
    x->message = msg;
    Keyload__V1__Mutation *m = mutation(KEYLOAD__V1__MUTATION__KIND_ENQUEUE);
    m->enqueue = x;
    return m;
}

Keyload__V1__Mutation *gb_receive(Keyload__V1__QueueLaneRef *lane, uint32_t max, uint32_t lease_ms,
                                  uint32_t wait_ms)
{
    MSG(Keyload__V1__Receive, keyload__v1__receive__init);
    x->lane = lane;
    x->max_messages = max;
    x->lease_ms = lease_ms;
    x->wait_ms = wait_ms;
    Keyload__V1__Mutation *m = mutation(KEYLOAD__V1__MUTATION__KIND_RECEIVE);
    m->receive = x;
    return m;
}

static ProtobufCBinaryData *tokens_copy(const ProtobufCBinaryData *t, size_t n)
{
    ProtobufCBinaryData *c = golden_alloc(n * sizeof *c);
    for (size_t i = 0; i < n; i++)
        c[i] = golden_bin(t[i].data, t[i].len);
    return c;
}

Keyload__V1__Mutation *gb_ack(Keyload__V1__QueueLaneRef *q, const ProtobufCBinaryData *tokens, size_t n)
{
    MSG(Keyload__V1__Ack, keyload__v1__ack__init);
    x->queue = q;
    x->n_lease_tokens = n;
    x->lease_tokens = tokens_copy(tokens, n);
    Keyload__V1__Mutation *m = mutation(KEYLOAD__V1__MUTATION__KIND_ACK);
    m->ack = x;
    return m;
}

Keyload__V1__Mutation *gb_release(Keyload__V1__QueueLaneRef *q, const ProtobufCBinaryData *tokens, size_t n)
{
    MSG(Keyload__V1__Release, keyload__v1__release__init);
    x->queue = q;
    x->n_lease_tokens = n;
    x->lease_tokens = tokens_copy(tokens, n);
    Keyload__V1__Mutation *m = mutation(KEYLOAD__V1__MUTATION__KIND_RELEASE);
    m->release = x;
    return m;
}

Keyload__V1__Mutation *gb_create_database(const char *tenant, const char *db, Keyload__V1__DatabaseLimits *l)
{
    MSG(Keyload__V1__CreateDatabase, keyload__v1__create_database__init);
    x->tenant = str(tenant);
    x->database = str(db);
    x->limits = l;
    Keyload__V1__Mutation *m = mutation(KEYLOAD__V1__MUTATION__KIND_CREATE_DATABASE);
    m->create_database = x;
    return m;
}

Keyload__V1__Mutation *gb_bootstrap(const char *tenant, const char *db, const char *admin,
                                    const uint8_t pk[32], const uint8_t proof[32])
{
    MSG(Keyload__V1__Bootstrap, keyload__v1__bootstrap__init);
    x->tenant = str(tenant);
    x->database = str(db);
    x->admin_id = str(admin);
    x->admin_public_key = golden_bin(pk, 32);
    x->proof = golden_bin(proof, 32);
    Keyload__V1__Mutation *m = mutation(KEYLOAD__V1__MUTATION__KIND_BOOTSTRAP);
    m->bootstrap = x;
    return m;
}

Keyload__V1__Mutation *gb_create_principal(const char *tenant, const char *id, const uint8_t pk[32],
                                           bool cluster_admin, bool db_admin, const char *db)
{
    MSG(Keyload__V1__CreatePrincipal, keyload__v1__create_principal__init);
    x->tenant = str(tenant);
    x->principal_id = str(id);
    x->public_key = golden_bin(pk, 32);
    x->cluster_admin = cluster_admin;
    x->database_admin = db_admin;
    x->database = str(db ? db : "");
    Keyload__V1__Mutation *m = mutation(KEYLOAD__V1__MUTATION__KIND_CREATE_PRINCIPAL);
    m->create_principal = x;
    return m;
}

static char **one_key(const char *k, size_t *n)
{
    *n = k ? 1 : 0;
    if (k == NULL)
        return NULL;
    char **l = golden_alloc(sizeof *l);
    l[0] = str(k);
    return l;
}

Keyload__V1__Mutation *gb_grant(const char *id, const char *db, Keyload__V1__Permission perm,
                                const char *pattern, const char *fkey, const char *hkey)
{
    MSG(Keyload__V1__GrantPermission, keyload__v1__grant_permission__init);
    x->principal_id = str(id);
    x->grant = golden_alloc(sizeof *x->grant);
    keyload__v1__grant__init(x->grant);
    x->grant->database = str(db);
    x->grant->permission = perm;
    x->grant->queue_pattern = str(pattern);
    x->grant->fields = one_key(fkey, &x->grant->n_fields);
    x->grant->headers = one_key(hkey, &x->grant->n_headers);
    Keyload__V1__Mutation *m = mutation(KEYLOAD__V1__MUTATION__KIND_GRANT_PERMISSION);
    m->grant_permission = x;
    return m;
}

Keyload__V1__Mutation *gb_revoke(const char *id, const char *db, Keyload__V1__Permission perm,
                                 const char *pattern)
{
    MSG(Keyload__V1__RevokePermission, keyload__v1__revoke_permission__init);
    x->principal_id = str(id);
    x->database = str(db);
    x->permission = perm;
    x->queue_pattern = str(pattern);
    Keyload__V1__Mutation *m = mutation(KEYLOAD__V1__MUTATION__KIND_REVOKE_PERMISSION);
    m->revoke_permission = x;
    return m;
}

Keyload__V1__Mutation *gb_set_key(const char *id, const uint8_t pk[32])
{
    MSG(Keyload__V1__SetPrincipalKey, keyload__v1__set_principal_key__init);
    x->principal_id = str(id);
    x->public_key = golden_bin(pk, 32);
    Keyload__V1__Mutation *m = mutation(KEYLOAD__V1__MUTATION__KIND_SET_PRINCIPAL_KEY);
    m->set_principal_key = x;
    return m;
}

Keyload__V1__Mutation *gb_set_db_limits(const char *tenant, const char *db, Keyload__V1__DatabaseLimits *l)
{
    MSG(Keyload__V1__SetDatabaseLimits, keyload__v1__set_database_limits__init);
    x->tenant = str(tenant);
    x->database = str(db);
    x->limits = l;
    Keyload__V1__Mutation *m = mutation(KEYLOAD__V1__MUTATION__KIND_SET_DATABASE_LIMITS);
    m->set_database_limits = x;
    return m;
}

Keyload__V1__Mutation *gb_create_transfer(Keyload__V1__QueueLaneRef *src, const uint8_t tid[16],
                                          Keyload__V1__QueueLaneRef *dst, Keyload__V1__EnqueueMessage *msg)
{
    MSG(Keyload__V1__CreateQueueTransfer, keyload__v1__create_queue_transfer__init);
    x->source_queue = src;
    x->transfer_id = golden_bin(tid, 16);
    x->destination = dst;
    x->message = msg;
    Keyload__V1__Mutation *m = mutation(KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE_TRANSFER);
    m->create_queue_transfer = x;
    return m;
}

Keyload__V1__Mutation *gb_accept(Keyload__V1__QueueLaneRef *dst, ProtobufCBinaryData intent)
{
    MSG(Keyload__V1__AcceptQueueTransfer, keyload__v1__accept_queue_transfer__init);
    x->destination_queue = dst;
    x->intent_token = golden_bin(intent.data, intent.len);
    Keyload__V1__Mutation *m = mutation(KEYLOAD__V1__MUTATION__KIND_ACCEPT_QUEUE_TRANSFER);
    m->accept_queue_transfer = x;
    return m;
}

Keyload__V1__Mutation *gb_complete(Keyload__V1__QueueLaneRef *src, const uint8_t tid[16],
                                   ProtobufCBinaryData receipt)
{
    MSG(Keyload__V1__CompleteQueueTransfer, keyload__v1__complete_queue_transfer__init);
    x->source_queue = src;
    x->transfer_id = golden_bin(tid, 16);
    x->receipt_token = golden_bin(receipt.data, receipt.len);
    Keyload__V1__Mutation *m = mutation(KEYLOAD__V1__MUTATION__KIND_COMPLETE_QUEUE_TRANSFER);
    m->complete_queue_transfer = x;
    return m;
}

Keyload__V1__Mutation *gb_pause(const char *tenant, const char *db, Keyload__V1__QueueLaneRef *src, bool paused)
{
    MSG(Keyload__V1__SetQueueTransfersPaused, keyload__v1__set_queue_transfers_paused__init);
    x->tenant = str(tenant);
    x->database = str(db);
    x->source_queue = src;
    x->paused = paused;
    Keyload__V1__Mutation *m = mutation(KEYLOAD__V1__MUTATION__KIND_SET_QUEUE_TRANSFERS_PAUSED);
    m->set_queue_transfers_paused = x;
    return m;
}

Keyload__V1__Mutation *gb_advance(Keyload__V1__QueueLaneRef *src, const uint8_t tid[16],
                                  ProtobufCBinaryData witness, bool repair)
{
    Keyload__V1__Mutation *m;
    if (repair) {
        MSG(Keyload__V1__AdvanceQueueTransferRepair, keyload__v1__advance_queue_transfer_repair__init);
        x->source_queue = src;
        x->transfer_id = golden_bin(tid, 16);
        x->witness_token = golden_bin(witness.data, witness.len);
        m = mutation(KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_REPAIR);
        m->advance_queue_transfer_repair = x;
    } else {
        MSG(Keyload__V1__AdvanceQueueTransferAttempt, keyload__v1__advance_queue_transfer_attempt__init);
        x->source_queue = src;
        x->transfer_id = golden_bin(tid, 16);
        x->witness_token = golden_bin(witness.data, witness.len);
        m = mutation(KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_ATTEMPT);
        m->advance_queue_transfer_attempt = x;
    }
    return m;
}

uint8_t *gb_pack(const uint8_t cmd[16], Keyload__V1__Mutation **m, size_t n, size_t *len)
{
    Keyload__V1__BatchRequest b = KEYLOAD__V1__BATCH_REQUEST__INIT;
    b.command_id.data = (uint8_t *)cmd;
    b.command_id.len = 16;
    b.n_mutations = n;
    b.mutations = m;
    *len = keyload__v1__batch_request__get_packed_size(&b);
    uint8_t *out = malloc(*len ? *len : 1);
    if (out == NULL)
        golden_die("out of memory");
    keyload__v1__batch_request__pack(&b, out);
    return out;
}
