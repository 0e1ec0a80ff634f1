#include "common/canon.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

void kl_canon_init(kl_canon *c) { memset(c, 0, sizeof *c); }
void kl_canon_init_fixed(kl_canon *c, uint8_t *buf, size_t cap)
{
    memset(c, 0, sizeof *c);
    c->buf = buf;
    c->cap = cap;
    c->fixed = 1;
}

void kl_canon_free(kl_canon *c)
{
    if (!c->fixed)
        free(c->buf);
    memset(c, 0, sizeof *c);
}

static void put(kl_canon *c, const void *p, size_t n)
{
    if (c->oom)
        return;
    if (c->fixed && n > c->cap - c->len) {
        c->oom = 1;
        return;
    }
    if (c->len + n > c->cap) {
        size_t cap = c->cap ? c->cap : 256;
        while (cap < c->len + n)
            cap *= 2;
        uint8_t *nb = realloc(c->buf, cap);
        if (nb == NULL) {
            c->oom = 1;
            return;
        }
        c->buf = nb;
        c->cap = cap;
    }
    if (n)
        memcpy(c->buf + c->len, p, n);
    c->len += n;
}

static void put_be(kl_canon *c, uint64_t v, int bytes)
{
    uint8_t b[8];
    for (int i = 0; i < bytes; i++)
        b[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
    put(c, b, (size_t)bytes);
}

void kl_canon_u64(kl_canon *c, uint8_t tag, uint64_t v)
{
    put(c, &tag, 1);
    put_be(c, v, 8);
}

void kl_canon_bytes(kl_canon *c, uint8_t tag, const void *p, size_t n)
{
    put(c, &tag, 1);
    put_be(c, n, 4);
    put(c, p, n);
}

void kl_canon_str(kl_canon *c, uint8_t tag, const char *s)
{
    kl_canon_bytes(c, tag, s ? s : "", s ? strlen(s) : 0);
}

void kl_canon_lane(kl_canon *c, uint8_t tag, const Keyload__V1__QueueLaneRef *r)
{
    if (r == NULL) {
        uint8_t z = 0;
        put(c, &z, 1);
        return;
    }
    put(c, &tag, 1);
    kl_canon_str(c, 1, r->tenant);
    kl_canon_str(c, 2, r->database);
    kl_canon_str(c, 3, r->queue);
    /* An empty lane means "default": both spell the same request. */
    kl_canon_str(c, 4, (r->lane && r->lane[0]) ? r->lane : "default");
}

static int cmp_header(const void *a, const void *b)
{
    const Keyload__V1__Header *x = *(Keyload__V1__Header *const *)a;
    const Keyload__V1__Header *y = *(Keyload__V1__Header *const *)b;
    return strcmp(x->key, y->key);
}

static int cmp_field(const void *a, const void *b)
{
    const Keyload__V1__Field *x = *(Keyload__V1__Field *const *)a;
    const Keyload__V1__Field *y = *(Keyload__V1__Field *const *)b;
    return strcmp(x->key, y->key);
}

static void canon_value(kl_canon *c, const Keyload__V1__FieldValue *v)
{
    uint8_t kind = v ? (uint8_t)v->kind_case : 0;
    put(c, &kind, 1);
    if (v == NULL)
        return;
    switch (v->kind_case) {
    case KEYLOAD__V1__FIELD_VALUE__KIND_STRING_VALUE: kl_canon_str(c, 1, v->string_value); break;
    case KEYLOAD__V1__FIELD_VALUE__KIND_INT_VALUE: kl_canon_u64(c, 2, (uint64_t)v->int_value); break;
    case KEYLOAD__V1__FIELD_VALUE__KIND_DOUBLE_VALUE: {
        uint64_t bits;
        memcpy(&bits, &v->double_value, sizeof bits);
        kl_canon_u64(c, 3, bits);
        break;
    }
    case KEYLOAD__V1__FIELD_VALUE__KIND_BOOL_VALUE: kl_canon_u64(c, 4, v->bool_value ? 1 : 0); break;
    case KEYLOAD__V1__FIELD_VALUE__KIND_BYTES_VALUE:
        kl_canon_bytes(c, 5, v->bytes_value.data, v->bytes_value.len);
        break;
    default: break;
    }
}

void kl_canon_message(kl_canon *c, uint8_t tag, const Keyload__V1__EnqueueMessage *m)
{
    if (m == NULL) {
        uint8_t z = 0;
        put(c, &z, 1);
        return;
    }
    put(c, &tag, 1);
    kl_canon_bytes(c, 1, m->body.data, m->body.len);
    /* Sort copies of the pointer arrays; the message itself is left untouched. */
    Keyload__V1__Header **h = NULL;
    Keyload__V1__Field **f = NULL;
    if (m->n_headers) {
        h = malloc(m->n_headers * sizeof *h);
        if (h == NULL) { c->oom = 1; return; }
        memcpy(h, m->headers, m->n_headers * sizeof *h);
        qsort(h, m->n_headers, sizeof *h, cmp_header);
    }
    put_be(c, m->n_headers, 4);
    for (size_t i = 0; i < m->n_headers; i++) {
        kl_canon_str(c, 2, h[i]->key);
        kl_canon_str(c, 2, h[i]->value);
    }
    free(h);
    if (m->n_fields) {
        f = malloc(m->n_fields * sizeof *f);
        if (f == NULL) { c->oom = 1; return; }
        memcpy(f, m->fields, m->n_fields * sizeof *f);
        qsort(f, m->n_fields, sizeof *f, cmp_field);
    }
    put_be(c, m->n_fields, 4);
    for (size_t i = 0; i < m->n_fields; i++) {
        kl_canon_str(c, 3, f[i]->key);
        canon_value(c, f[i]->value);
    }
    free(f);
    kl_canon_u64(c, 4, (uint64_t)m->expires_at_unix_ms);
    kl_canon_u64(c, 5, (uint64_t)m->delay_ms);
}

static void canon_tokens(kl_canon *c, ProtobufCBinaryData *t, size_t n)
{
    put_be(c, n, 4);
    for (size_t i = 0; i < n; i++)
        kl_canon_bytes(c, 2, t[i].data, t[i].len);
}

/* DatabaseLimits: the three limits (tag 3), then MaxQueueTransferAcceptAttempts as a
 * presence item and its value (tag 4), so null and any value differ. */
static void canon_db_limits(kl_canon *c, const Keyload__V1__DatabaseLimits *l)
{
    kl_canon_u64(c, 3, l ? l->max_scan_records : 0);
    kl_canon_u64(c, 3, l ? l->max_batch_bytes : 0);
    kl_canon_u64(c, 3, l ? l->max_query_read_bytes : 0);
    const Keyload__V1__NullableU64 *a = l ? l->max_queue_transfer_accept_attempts : NULL;
    kl_canon_u64(c, 4, a ? 1 : 0);
    kl_canon_u64(c, 4, a ? a->value : 0);
}

void kl_canon_create_queue(kl_canon *c, const Keyload__V1__Mutation *m)
{
    const Keyload__V1__CreateQueue *q = m->create_queue;
    kl_canon_lane(c, 1, q->queue);
    const Keyload__V1__QueueLimits *l = q->limits;
    kl_canon_u64(c, 2, l ? l->max_messages : 0);
    kl_canon_u64(c, 2, l ? l->max_bytes : 0);
    kl_canon_u64(c, 2, l ? l->max_deliveries : 0);
    kl_canon_str(c, 2, l ? l->dead_letter_queue : "");
    kl_canon_u64(c, 3, (uint64_t)(int64_t)q->partition);
}

void kl_canon_delete_queue(kl_canon *c, const Keyload__V1__Mutation *m)
{
    kl_canon_lane(c, 1, m->delete_queue->queue);
}

void kl_canon_bootstrap(kl_canon *c, const Keyload__V1__Mutation *m)
{
    const Keyload__V1__Bootstrap *b = m->bootstrap;
    kl_canon_str(c, 1, b->tenant);
    kl_canon_str(c, 2, b->database);
    kl_canon_str(c, 3, b->admin_id);
    kl_canon_bytes(c, 4, b->admin_public_key.data, b->admin_public_key.len);
    kl_canon_bytes(c, 5, b->proof.data, b->proof.len);
}

void kl_canon_create_database(kl_canon *c, const Keyload__V1__Mutation *m)
{
    const Keyload__V1__CreateDatabase *d = m->create_database;
    kl_canon_str(c, 1, d->tenant);
    kl_canon_str(c, 2, d->database);
    canon_db_limits(c, d->limits);
}

void kl_canon_enqueue(kl_canon *c, const Keyload__V1__Mutation *m)
{
    kl_canon_lane(c, 1, m->enqueue->lane);
    kl_canon_message(c, 2, m->enqueue->message);
}

void kl_canon_receive(kl_canon *c, const Keyload__V1__Mutation *m)
{
    kl_canon_lane(c, 1, m->receive->lane);
    kl_canon_u64(c, 2, m->receive->max_messages);
    kl_canon_u64(c, 3, m->receive->lease_ms);
}

void kl_canon_ack(kl_canon *c, const Keyload__V1__Mutation *m)
{
    kl_canon_lane(c, 1, m->ack->queue);
    canon_tokens(c, m->ack->lease_tokens, m->ack->n_lease_tokens);
}

void kl_canon_release(kl_canon *c, const Keyload__V1__Mutation *m)
{
    kl_canon_lane(c, 1, m->release->queue);
    canon_tokens(c, m->release->lease_tokens, m->release->n_lease_tokens);
}

void kl_canon_create_principal(kl_canon *c, const Keyload__V1__Mutation *m)
{
    const Keyload__V1__CreatePrincipal *p = m->create_principal;
    kl_canon_str(c, 1, p->tenant);
    kl_canon_str(c, 2, p->principal_id);
    kl_canon_bytes(c, 3, p->public_key.data, p->public_key.len);
    kl_canon_u64(c, 4, p->cluster_admin ? 1 : 0);
    kl_canon_u64(c, 5, p->database_admin ? 1 : 0);
    kl_canon_str(c, 6, p->database);
}

void kl_canon_grant_permission(kl_canon *c, const Keyload__V1__Mutation *m)
{
    const Keyload__V1__Grant *g = m->grant_permission->grant;
    kl_canon_str(c, 1, m->grant_permission->principal_id);
    if (g == NULL) {
        uint8_t z = 0;
        put(c, &z, 1);
        return;
    }
    uint8_t t = 2;
    put(c, &t, 1);
    kl_canon_str(c, 1, g->database);
    kl_canon_u64(c, 2, (uint64_t)g->permission);
    kl_canon_str(c, 3, g->queue_pattern);
    /* Lists are kept as sent: the stored grant sorts them, but a different order is
     * still a different request only in bytes, and validation refuses duplicates. */
    put_be(c, g->n_fields, 4);
    for (size_t i = 0; i < g->n_fields; i++)
        kl_canon_str(c, 4, g->fields[i]);
    put_be(c, g->n_headers, 4);
    for (size_t i = 0; i < g->n_headers; i++)
        kl_canon_str(c, 5, g->headers[i]);
}

void kl_canon_revoke_permission(kl_canon *c, const Keyload__V1__Mutation *m)
{
    const Keyload__V1__RevokePermission *r = m->revoke_permission;
    kl_canon_str(c, 1, r->principal_id);
    kl_canon_str(c, 2, r->database);
    kl_canon_u64(c, 3, (uint64_t)r->permission);
    kl_canon_str(c, 4, r->queue_pattern);
}

void kl_canon_set_principal_key(kl_canon *c, const Keyload__V1__Mutation *m)
{
    kl_canon_str(c, 1, m->set_principal_key->principal_id);
    kl_canon_bytes(c, 2, m->set_principal_key->public_key.data, m->set_principal_key->public_key.len);
}

void kl_canon_set_database_limits(kl_canon *c, const Keyload__V1__Mutation *m)
{
    const Keyload__V1__SetDatabaseLimits *d = m->set_database_limits;
    kl_canon_str(c, 1, d->tenant);
    kl_canon_str(c, 2, d->database);
    canon_db_limits(c, d->limits);
    /* Only when set, so a request without it keeps the encoding (and digest) it always had. */
    if (d->fields != 0)
        kl_canon_u64(c, 5, d->fields);
}

void kl_canon_create_queue_transfer(kl_canon *c, const Keyload__V1__Mutation *m)
{
    const Keyload__V1__CreateQueueTransfer *t = m->create_queue_transfer;
    kl_canon_lane(c, 1, t->source_queue);
    kl_canon_bytes(c, 2, t->transfer_id.data, t->transfer_id.len);
    kl_canon_lane(c, 3, t->destination);
    kl_canon_message(c, 4, t->message);
}

void kl_canon_accept_queue_transfer(kl_canon *c, const Keyload__V1__Mutation *m)
{
    kl_canon_lane(c, 1, m->accept_queue_transfer->destination_queue);
    kl_canon_bytes(c, 2, m->accept_queue_transfer->intent_token.data,
                   m->accept_queue_transfer->intent_token.len);
}

void kl_canon_complete_queue_transfer(kl_canon *c, const Keyload__V1__Mutation *m)
{
    kl_canon_lane(c, 1, m->complete_queue_transfer->source_queue);
    kl_canon_bytes(c, 2, m->complete_queue_transfer->transfer_id.data,
                   m->complete_queue_transfer->transfer_id.len);
    kl_canon_bytes(c, 3, m->complete_queue_transfer->receipt_token.data,
                   m->complete_queue_transfer->receipt_token.len);
}

void kl_canon_set_queue_transfers_paused(kl_canon *c, const Keyload__V1__Mutation *m)
{
    const Keyload__V1__SetQueueTransfersPaused *p = m->set_queue_transfers_paused;
    kl_canon_str(c, 1, p->tenant);
    kl_canon_str(c, 2, p->database);
    kl_canon_lane(c, 3, p->source_queue);
    kl_canon_u64(c, 4, p->paused ? 1 : 0);
}

void kl_canon_advance_queue_transfer_attempt(kl_canon *c, const Keyload__V1__Mutation *m)
{
    const Keyload__V1__AdvanceQueueTransferAttempt *a = m->advance_queue_transfer_attempt;
    kl_canon_lane(c, 1, a->source_queue);
    kl_canon_bytes(c, 2, a->transfer_id.data, a->transfer_id.len);
    kl_canon_bytes(c, 3, a->witness_token.data, a->witness_token.len);
}

void kl_canon_advance_queue_transfer_repair(kl_canon *c, const Keyload__V1__Mutation *m)
{
    const Keyload__V1__AdvanceQueueTransferRepair *a = m->advance_queue_transfer_repair;
    kl_canon_lane(c, 1, a->source_queue);
    kl_canon_bytes(c, 2, a->transfer_id.data, a->transfer_id.len);
    kl_canon_bytes(c, 3, a->witness_token.data, a->witness_token.len);
}

void kl_canon_set_transfer_hold(kl_canon *c, const Keyload__V1__Mutation *m)
{
    kl_canon_u64(c, 1, m->set_transfer_hold->hold_ms);
}

void kl_canon_set_member_key(kl_canon *c, const Keyload__V1__Mutation *m)
{
    const Keyload__V1__SetMemberKey *k = m->set_member_key;
    kl_canon_u64(c, 1, (uint64_t)(int64_t)k->partition);
    kl_canon_u64(c, 2, k->member);
    kl_canon_bytes(c, 3, k->public_key.data, k->public_key.len);
}

/* Each kind's body encoder, by kind number; a kind without one encodes as its kind byte
 * alone. daemon/engine/mutation.c's table points at the same functions. */
static void (*const canon_kinds[])(kl_canon *c, const Keyload__V1__Mutation *m) = {
    [KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE] = kl_canon_create_queue,
    [KEYLOAD__V1__MUTATION__KIND_DELETE_QUEUE] = kl_canon_delete_queue,
    [KEYLOAD__V1__MUTATION__KIND_BOOTSTRAP] = kl_canon_bootstrap,
    [KEYLOAD__V1__MUTATION__KIND_CREATE_DATABASE] = kl_canon_create_database,
    [KEYLOAD__V1__MUTATION__KIND_ENQUEUE] = kl_canon_enqueue,
    [KEYLOAD__V1__MUTATION__KIND_RECEIVE] = kl_canon_receive,
    [KEYLOAD__V1__MUTATION__KIND_ACK] = kl_canon_ack,
    [KEYLOAD__V1__MUTATION__KIND_RELEASE] = kl_canon_release,
    [KEYLOAD__V1__MUTATION__KIND_CREATE_PRINCIPAL] = kl_canon_create_principal,
    [KEYLOAD__V1__MUTATION__KIND_GRANT_PERMISSION] = kl_canon_grant_permission,
    [KEYLOAD__V1__MUTATION__KIND_REVOKE_PERMISSION] = kl_canon_revoke_permission,
    [KEYLOAD__V1__MUTATION__KIND_SET_PRINCIPAL_KEY] = kl_canon_set_principal_key,
    [KEYLOAD__V1__MUTATION__KIND_SET_DATABASE_LIMITS] = kl_canon_set_database_limits,
    [KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE_TRANSFER] = kl_canon_create_queue_transfer,
    [KEYLOAD__V1__MUTATION__KIND_ACCEPT_QUEUE_TRANSFER] = kl_canon_accept_queue_transfer,
    [KEYLOAD__V1__MUTATION__KIND_COMPLETE_QUEUE_TRANSFER] = kl_canon_complete_queue_transfer,
    [KEYLOAD__V1__MUTATION__KIND_SET_QUEUE_TRANSFERS_PAUSED] = kl_canon_set_queue_transfers_paused,
    [KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_ATTEMPT] = kl_canon_advance_queue_transfer_attempt,
    [KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_REPAIR] = kl_canon_advance_queue_transfer_repair,
    [KEYLOAD__V1__MUTATION__KIND_SET_TRANSFER_HOLD] = kl_canon_set_transfer_hold,
    [KEYLOAD__V1__MUTATION__KIND_SET_MEMBER_KEY] = kl_canon_set_member_key,
};

kl_canon_mutation_fn kl_canon_mutation_encoder(int kind)
{
    if (kind < 0 || (size_t)kind >= sizeof canon_kinds / sizeof canon_kinds[0])
        return NULL;
    return canon_kinds[kind];
}

void kl_canon_mutation(kl_canon *c, const Keyload__V1__Mutation *m)
{
    uint8_t kind = (uint8_t)m->kind_case;
    put(c, &kind, 1);
    kl_canon_mutation_fn f = kl_canon_mutation_encoder((int)m->kind_case);
    if (f != NULL)
        f(c, m);
}

static int finish(kl_canon *c, uint8_t out[KL_DIGEST_LEN])
{
    if (c->oom) {
        kl_canon_free(c);
        return -1;
    }
    crypto_generichash(out, KL_DIGEST_LEN, c->buf, c->len, NULL, 0);
    kl_canon_free(c);
    return 0;
}

int kl_canon_batch_digest(const char *method, const char *principal,
                          const Keyload__V1__BatchRequest *batch, uint8_t out[KL_DIGEST_LEN])
{
    kl_canon c;
    kl_canon_init(&c);
    kl_canon_str(&c, 0xB1, "keyload.batch-digest.v1");
    kl_canon_str(&c, 1, method);
    kl_canon_str(&c, 2, principal);
    kl_canon_bytes(&c, 3, batch->command_id.data, batch->command_id.len);
    put_be(&c, batch->n_mutations, 4);
    for (size_t i = 0; i < batch->n_mutations; i++)
        kl_canon_mutation(&c, batch->mutations[i]);
    /* Only when set, so that the digest of a batch without it (every batch before the field
     * existed, and every stored command id) stays byte for byte the same. */
    if (batch->first_sent_unix_ms != 0)
        kl_canon_u64(&c, 5, (uint64_t)batch->first_sent_unix_ms);
    return finish(&c, out);
}

int kl_canon_message_fingerprint(const Keyload__V1__EnqueueMessage *m, uint8_t out[KL_DIGEST_LEN])
{
    kl_canon c;
    kl_canon_init(&c);
    kl_canon_str(&c, 0xF1, "keyload.message-fingerprint.v1");
    kl_canon_message(&c, 1, m);
    return finish(&c, out);
}

int kl_canon_bootstrap_proof(const uint8_t secret[32], const char *tenant, const char *database,
                             const char *admin_id, const uint8_t *pk, size_t pk_len,
                             uint8_t out[KL_DIGEST_LEN])
{
    kl_canon c;
    kl_canon_init(&c);
    kl_canon_str(&c, 0xB2, "keyload.bootstrap.v1");
    kl_canon_str(&c, 1, tenant);
    kl_canon_str(&c, 2, database);
    kl_canon_str(&c, 3, admin_id);
    kl_canon_bytes(&c, 4, pk, pk_len);
    if (c.oom) {
        kl_canon_free(&c);
        return -1;
    }
    crypto_generichash(out, KL_DIGEST_LEN, c.buf, c.len, secret, 32);
    kl_canon_free(&c);
    return 0;
}

bool kl_canon_kind_keeps_outcome(Keyload__V1__Mutation__KindCase kind)
{
    switch (kind) {
    case KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE_TRANSFER:
    case KEYLOAD__V1__MUTATION__KIND_ACCEPT_QUEUE_TRANSFER:
    case KEYLOAD__V1__MUTATION__KIND_COMPLETE_QUEUE_TRANSFER:
    case KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_ATTEMPT:
    case KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_REPAIR:
    case KEYLOAD__V1__MUTATION__KIND_SET_QUEUE_TRANSFERS_PAUSED:
        return true;
    default:
        return false;
    }
}
