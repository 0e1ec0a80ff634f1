/* json: the canonical public JSON of receipts, stats and errors (keyload.h documents the
 * shape). Objects are built in one fixed key order and dumped with JSON_PRESERVE_ORDER, so
 * two equal receipts always print the same text: comparing receipts by value is comparing
 * these strings. Tokens appear only as base64 values, never in error text. */
#include "client/sdk/internal.h"
#include "client/sdk/json_util.h"
#include "common/guid.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Every builder returns NULL on OOM; set() then fails the whole object. */
static bool set(json_t *obj, const char *key, json_t *v)
{
    return v != NULL && json_object_set_new(obj, key, v) == 0;
}

static json_t *u64(uint64_t v)
{
    if (v > (uint64_t)INT64_MAX) { /* not representable as a jansson integer */
        char buf[24];
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
        return json_string(buf);
    }
    return json_integer((json_int_t)v);
}

static json_t *i64(int64_t v) { return json_integer((json_int_t)v); }

static json_t *b64(const uint8_t *p, size_t n)
{
    char *s = kl_base64_encode(p, n);
    if (s == NULL)
        return NULL;
    json_t *v = json_string(s);
    free(s);
    return v;
}

/* A protobuf string as JSON; bytes that are not UTF-8 (the wire does not enforce it)
 * become U+FFFD, so that the output is always valid JSON. */
static json_t *text(const char *s)
{
    if (s == NULL)
        s = "";
    size_t n = strlen(s);
    if (kl_sdk_utf8_valid((const uint8_t *)s, n))
        return json_stringn(s, n);
    char *fixed = malloc(n * 3 + 1);
    if (fixed == NULL)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t len = 1;
        while (len <= 4 && i + len <= n && !kl_sdk_utf8_valid((const uint8_t *)s + i, len))
            len++;
        if (len <= 4 && i + len <= n) {
            memcpy(fixed + o, s + i, len);
            o += len;
            i += len;
        } else {
            memcpy(fixed + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    json_t *v = json_stringn(fixed, o);
    free(fixed);
    return v;
}

static json_t *guid_text(const ProtobufCBinaryData *g)
{
    if (g->len != KL_GUID_LEN) /* not a GUID: show what it is, never drop it */
        return b64(g->data, g->len);
    char buf[KL_GUID_TEXT_LEN + 1];
    kl_guid_format(g->data, buf);
    return json_string(buf);
}

static int cmp_header(const void *a, const void *b)
{
    return strcmp((*(Keyload__V1__Header *const *)a)->key, (*(Keyload__V1__Header *const *)b)->key);
}

static int cmp_field(const void *a, const void *b)
{
    return strcmp((*(Keyload__V1__Field *const *)a)->key, (*(Keyload__V1__Field *const *)b)->key);
}

static json_t *headers_json(const Keyload__V1__EnqueueMessage *m)
{
    json_t *obj = json_object();
    if (obj == NULL)
        return NULL;
    if (m == NULL || m->n_headers == 0)
        return obj;
    Keyload__V1__Header **sorted = malloc(m->n_headers * sizeof *sorted);
    if (sorted == NULL)
        goto fail;
    memcpy(sorted, m->headers, m->n_headers * sizeof *sorted);
    qsort(sorted, m->n_headers, sizeof *sorted, cmp_header);
    for (size_t i = 0; i < m->n_headers; i++) {
        json_t *k = text(sorted[i]->key); /* the key, made valid UTF-8 */
        if (k == NULL || !set(obj, json_string_value(k), text(sorted[i]->value))) {
            json_decref(k);
            free(sorted);
            goto fail;
        }
        json_decref(k);
    }
    free(sorted);
    return obj;
fail:
    json_decref(obj);
    return NULL;
}

static json_t *field_value(const Keyload__V1__FieldValue *v)
{
    json_t *o = json_object();
    if (o == NULL)
        return NULL;
    bool ok;
    switch (v ? v->kind_case : KEYLOAD__V1__FIELD_VALUE__KIND__NOT_SET) {
    case KEYLOAD__V1__FIELD_VALUE__KIND_STRING_VALUE:
        ok = set(o, "type", json_string("string")) && set(o, "value", text(v->string_value));
        break;
    case KEYLOAD__V1__FIELD_VALUE__KIND_INT_VALUE:
        ok = set(o, "type", json_string("int")) && set(o, "value", i64(v->int_value));
        break;
    case KEYLOAD__V1__FIELD_VALUE__KIND_DOUBLE_VALUE:
        ok = set(o, "type", json_string("double"));
        if (ok && isfinite(v->double_value))
            ok = set(o, "value", json_real(v->double_value));
        else if (ok) /* JSON has no NaN or infinities */
            ok = set(o, "value", json_string(isnan(v->double_value) ? "NaN"
                                             : v->double_value > 0 ? "Infinity" : "-Infinity"));
        break;
    case KEYLOAD__V1__FIELD_VALUE__KIND_BOOL_VALUE:
        ok = set(o, "type", json_string("bool")) && set(o, "value", json_boolean(v->bool_value));
        break;
    case KEYLOAD__V1__FIELD_VALUE__KIND_BYTES_VALUE:
        ok = set(o, "type", json_string("bytes")) &&
             set(o, "value", b64(v->bytes_value.data, v->bytes_value.len));
        break;
    default:
        ok = set(o, "type", json_string("unset")) && set(o, "value", json_null());
        break;
    }
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *fields_json(const Keyload__V1__EnqueueMessage *m)
{
    json_t *obj = json_object();
    if (obj == NULL)
        return NULL;
    if (m == NULL || m->n_fields == 0)
        return obj;
    Keyload__V1__Field **sorted = malloc(m->n_fields * sizeof *sorted);
    if (sorted == NULL)
        goto fail;
    memcpy(sorted, m->fields, m->n_fields * sizeof *sorted);
    qsort(sorted, m->n_fields, sizeof *sorted, cmp_field);
    for (size_t i = 0; i < m->n_fields; i++) {
        json_t *k = text(sorted[i]->key);
        if (k == NULL || !set(obj, json_string_value(k), field_value(sorted[i]->value))) {
            json_decref(k);
            free(sorted);
            goto fail;
        }
        json_decref(k);
    }
    free(sorted);
    return obj;
fail:
    json_decref(obj);
    return NULL;
}

/* Adds "body" (base64) and, when the body is valid UTF-8, "body_utf8". */
static bool set_body(json_t *o, const ProtobufCBinaryData *body)
{
    if (!set(o, "body", b64(body->data, body->len)))
        return false;
    if (body->len == 0)
        return set(o, "body_utf8", json_string(""));
    if (kl_sdk_utf8_valid(body->data, body->len))
        return set(o, "body_utf8", json_stringn((const char *)body->data, body->len));
    return true;
}

static json_t *received_message(const Keyload__V1__ReceivedMessage *rm)
{
    static const ProtobufCBinaryData empty = {0, NULL};
    const Keyload__V1__EnqueueMessage *m = rm->message;
    json_t *o = json_object();
    if (o == NULL)
        return NULL;
    bool ok = set(o, "message_id", u64(rm->message_id)) && set(o, "lane", text(rm->lane)) &&
              set(o, "delivery_count", u64(rm->delivery_count)) &&
              set(o, "lease_token", b64(rm->lease_token.data, rm->lease_token.len)) &&
              set(o, "lease_expires_unix_ms", i64(rm->lease_expires_unix_ms)) &&
              set(o, "enqueued_unix_ms", i64(rm->enqueued_unix_ms)) &&
              set(o, "expires_at_unix_ms", i64(m ? m->expires_at_unix_ms : 0)) &&
              set(o, "delay_ms", i64(m ? m->delay_ms : 0)) &&
              set(o, "headers", headers_json(m)) && set(o, "fields", fields_json(m)) &&
              set_body(o, m ? &m->body : &empty);
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* DatabaseLimits; the nullable accept attempts are JSON null when absent. */
static json_t *limits_json(const Keyload__V1__DatabaseLimits *l)
{
    json_t *o = json_object();
    const Keyload__V1__NullableU64 *a = l ? l->max_queue_transfer_accept_attempts : NULL;
    bool ok = o != NULL && set(o, "max_scan_records", u64(l ? l->max_scan_records : 0)) &&
              set(o, "max_batch_bytes", u64(l ? l->max_batch_bytes : 0)) &&
              set(o, "max_query_read_bytes", u64(l ? l->max_query_read_bytes : 0)) &&
              set(o, "max_queue_transfer_accept_attempts", a ? u64(a->value) : json_null());
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* A list of strings as a JSON array, in the order given (the catalog keeps them sorted). */
static json_t *strings_json(char *const *v, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr != NULL && i < n; i++) {
        json_t *x = text(v[i]);
        if (x == NULL || json_array_append_new(arr, x) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

/* The fields of a catalog change's result (queues, databases, principals, limits, pausing). */
static bool catalog_result_json(json_t *o, const Keyload__V1__MutationResult *r)
{
    bool ok;
    switch (r->kind_case) {
    case KEYLOAD__V1__MUTATION_RESULT__KIND_QUEUE_CREATED:
        ok = set(o, "kind", json_string("queue_created")) &&
             set(o, "queue_id", u64(r->queue_created->queue_id)) &&
             set(o, "partition", i64(r->queue_created->partition)) &&
             (r->queue_created->catalog_version == 0 ||
              set(o, "catalog_version", u64(r->queue_created->catalog_version)));
        break;
    case KEYLOAD__V1__MUTATION_RESULT__KIND_QUEUE_DELETED:
        ok = set(o, "kind", json_string("queue_deleted")) &&
             set(o, "queue_id", u64(r->queue_deleted->queue_id)) &&
             (r->queue_deleted->catalog_version == 0 ||
              set(o, "catalog_version", u64(r->queue_deleted->catalog_version)));
        break;
    case KEYLOAD__V1__MUTATION_RESULT__KIND_BOOTSTRAPPED: {
        const Keyload__V1__Bootstrapped *b = r->bootstrapped;
        ok = set(o, "kind", json_string("bootstrapped")) && set(o, "admin_id", text(b->admin_id)) &&
             set(o, "admin_key_id", b64(b->admin_key_id.data, b->admin_key_id.len)) &&
             set(o, "policy_epoch", u64(b->policy_epoch)) &&
             set(o, "catalog_version", u64(b->catalog_version)) &&
             (b->database == NULL || (set(o, "database_id", u64(b->database->database_id)) &&
                                      set(o, "signing_public_key", b64(b->database->signing_public_key.data,
                                                                       b->database->signing_public_key.len))));
        break;
    }
    case KEYLOAD__V1__MUTATION_RESULT__KIND_DATABASE_CREATED:
        ok = set(o, "kind", json_string("database_created")) &&
             set(o, "database_id", u64(r->database_created->database_id)) &&
             set(o, "incarnation", b64(r->database_created->incarnation.data,
                                       r->database_created->incarnation.len)) &&
             set(o, "catalog_version", u64(r->database_created->catalog_version)) &&
             (r->database_created->signing_public_key.len == 0 ||
              (set(o, "signing_public_key", b64(r->database_created->signing_public_key.data,
                                                r->database_created->signing_public_key.len)) &&
               set(o, "signing_key_id", b64(r->database_created->signing_key_id.data,
                                            r->database_created->signing_key_id.len))));
        break;
    case KEYLOAD__V1__MUTATION_RESULT__KIND_PRINCIPAL_CHANGED: {
        const Keyload__V1__PrincipalChanged *p = r->principal_changed;
        ok = set(o, "kind", json_string("principal_changed")) &&
             set(o, "principal_id", text(p->principal_id)) &&
             set(o, "key_id", b64(p->key_id.data, p->key_id.len)) &&
             set(o, "policy_epoch", u64(p->policy_epoch)) &&
             set(o, "changed", json_boolean(p->changed)) &&
             set(o, "catalog_version", u64(p->catalog_version));
        break;
    }
    case KEYLOAD__V1__MUTATION_RESULT__KIND_DATABASE_LIMITS_SET:
        ok = set(o, "kind", json_string("database_limits_set")) &&
             set(o, "limits", limits_json(r->database_limits_set->limits)) &&
             set(o, "catalog_version", u64(r->database_limits_set->catalog_version));
        break;
    case KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFERS_PAUSED:
        ok = set(o, "kind", json_string("transfers_paused")) &&
             set(o, "paused", json_boolean(r->transfers_paused->paused)) &&
             set(o, "changed", json_boolean(r->transfers_paused->changed)) &&
             set(o, "catalog_version", u64(r->transfers_paused->catalog_version));
        break;
    default:
        ok = false; /* result_json sends only the kinds above here */
        break;
    }
    return ok;
}

/* The fields of a transfer step's result. */
static bool transfer_result_json(json_t *o, const Keyload__V1__MutationResult *r, unsigned flags)
{
    bool ok;
    switch (r->kind_case) {
    case KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_CREATED: {
        /* The intent token is what creating a transfer is for: it is returned here. */
        const Keyload__V1__TransferCreated *t = r->transfer_created;
        ok = set(o, "kind", json_string("transfer_created")) &&
             set(o, "intent_token", b64(t->intent_token.data, t->intent_token.len)) &&
             set(o, "state", json_string(kl_transfer_state_name(t->state))) &&
             set(o, "generation", u64(t->generation)) &&
             set(o, "existing", json_boolean(t->existing));
        break;
    }
    case KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ACCEPTED: {
        const Keyload__V1__TransferAccepted *t = r->transfer_accepted;
        ok = set(o, "kind", json_string("transfer_accepted")) &&
             set(o, "message_id", u64(t->message_id)) && set(o, "lane", text(t->lane)) &&
             set(o, "partition", i64(t->partition)) && set(o, "term", u64(t->term)) &&
             set(o, "index", u64(t->index)) &&
             set(o, "deduplicated", json_boolean(t->deduplicated));
        break;
    }
    case KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_COMPLETED:
        ok = set(o, "kind", json_string("transfer_completed")) &&
             set(o, "state", json_string(kl_transfer_state_name(r->transfer_completed->state))) &&
             set(o, "already", json_boolean(r->transfer_completed->already));
        break;
    case KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ADVANCED: {
        /* The next Accept's token, as transfer_json.c prints tokens: left out with
         * KL_JSON_OMIT_TOKENS, null when the daemon sent none. */
        const Keyload__V1__TransferAdvanced *t = r->transfer_advanced;
        ok = set(o, "kind", json_string("transfer_advanced")) &&
             set(o, "generation", u64(t->generation)) &&
             ((flags & KL_JSON_OMIT_TOKENS) ||
              set(o, "intent_token", t->intent_token.len
                                         ? b64(t->intent_token.data, t->intent_token.len)
                                         : json_null())) &&
             set(o, "charged_bytes", u64(t->charged_bytes)) &&
             set(o, "already", json_boolean(t->already));
        break;
    }
    default:
        ok = false; /* result_json sends only the kinds above here */
        break;
    }
    return ok;
}

static json_t *result_json(const Keyload__V1__MutationResult *r, unsigned flags)
{
    json_t *o = json_object();
    if (o == NULL)
        return NULL;
    bool ok;
    switch (r->kind_case) {
    case KEYLOAD__V1__MUTATION_RESULT__KIND_QUEUE_CREATED:
    case KEYLOAD__V1__MUTATION_RESULT__KIND_QUEUE_DELETED:
    case KEYLOAD__V1__MUTATION_RESULT__KIND_BOOTSTRAPPED:
    case KEYLOAD__V1__MUTATION_RESULT__KIND_DATABASE_CREATED:
    case KEYLOAD__V1__MUTATION_RESULT__KIND_PRINCIPAL_CHANGED:
    case KEYLOAD__V1__MUTATION_RESULT__KIND_DATABASE_LIMITS_SET:
    case KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFERS_PAUSED:
        ok = catalog_result_json(o, r);
        break;
    case KEYLOAD__V1__MUTATION_RESULT__KIND_ENQUEUED:
        ok = set(o, "kind", json_string("enqueued")) &&
             set(o, "message_id", u64(r->enqueued->message_id)) &&
             set(o, "lane", text(r->enqueued->lane));
        break;
    case KEYLOAD__V1__MUTATION_RESULT__KIND_RECEIVED: {
        ok = set(o, "kind", json_string("received")) && set(o, "messages", json_array());
        json_t *arr = json_object_get(o, "messages");
        for (size_t i = 0; ok && i < r->received->n_messages; i++) {
            json_t *m = received_message(r->received->messages[i]);
            ok = m != NULL && json_array_append_new(arr, m) == 0;
        }
        break;
    }
    case KEYLOAD__V1__MUTATION_RESULT__KIND_ACKED:
        ok = set(o, "kind", json_string("acked")) && set(o, "count", u64(r->acked->count));
        break;
    case KEYLOAD__V1__MUTATION_RESULT__KIND_RELEASED:
        ok = set(o, "kind", json_string("released")) && set(o, "count", u64(r->released->count));
        break;
    case KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_CREATED:
    case KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ACCEPTED:
    case KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_COMPLETED:
    case KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ADVANCED:
        ok = transfer_result_json(o, r, flags);
        break;
    default:
        ok = set(o, "kind", json_string("unknown"));
        break;
    }
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static char *dump(json_t *o, unsigned flags)
{
    if (o == NULL)
        return NULL;
    size_t f = JSON_PRESERVE_ORDER;
    f |= (flags & KL_JSON_PRETTY) ? JSON_INDENT(2) : JSON_COMPACT;
    char *s = json_dumps(o, f);
    json_decref(o);
    return s;
}

char *kl_receipt_to_json(const Keyload__V1__BatchReceipt *r, unsigned flags)
{
    json_t *o = json_object();
    bool ok = o != NULL && set(o, "command_id", guid_text(&r->command_id)) &&
         set(o, "partition", i64(r->partition)) && set(o, "term", u64(r->term)) &&
         set(o, "index", u64(r->index)) &&
         set(o, "committed_unix_ms", i64(r->committed_unix_ms)) &&
         set(o, "request_digest", b64(r->request_digest.data, r->request_digest.len)) &&
         (r->catalog_version == 0 || set(o, "catalog_version", u64(r->catalog_version))) &&
         set(o, "results", json_array());
    json_t *results = ok ? json_object_get(o, "results") : NULL;
    for (size_t i = 0; ok && i < r->n_results; i++) {
        json_t *x = result_json(r->results[i], flags);
        ok = x != NULL && json_array_append_new(results, x) == 0;
    }
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return dump(o, flags);
}

char *kl_queue_stats_to_json(const char *queue, const Keyload__V1__QueueStatsAnswer *s,
                             unsigned flags)
{
    json_t *o = json_object();
    const Keyload__V1__QueueLimits *l = s->limits;
    bool ok = o != NULL && (queue == NULL || set(o, "queue", text(queue))) &&
         set(o, "queue_id", u64(s->queue_id)) && set(o, "partition", i64(s->partition)) &&
         set(o, "messages", u64(s->messages)) && set(o, "bytes", u64(s->bytes)) &&
         set(o, "available", u64(s->available)) && set(o, "in_flight", u64(s->in_flight)) &&
         set(o, "limits", json_object());
    json_t *lim = ok ? json_object_get(o, "limits") : NULL;
    ok = ok && set(lim, "max_messages", u64(l ? l->max_messages : 0)) &&
         set(lim, "max_bytes", u64(l ? l->max_bytes : 0)) &&
         set(lim, "max_deliveries", u64(l ? l->max_deliveries : 0)) &&
         set(lim, "dead_letter_queue", text(l ? l->dead_letter_queue : "")) &&
         set(o, "applied_index", u64(s->applied_index));
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return dump(o, flags);
}

static json_t *grant_json(const Keyload__V1__Grant *g)
{
    json_t *o = json_object();
    bool ok = o != NULL && set(o, "database", text(g->database)) &&
              set(o, "permission", json_string(kl_permission_name(g->permission))) &&
              set(o, "queue_pattern", text(g->queue_pattern)) &&
              set(o, "fields", strings_json(g->fields, g->n_fields)) &&
              set(o, "headers", strings_json(g->headers, g->n_headers));
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* A stored principal's public fields (it holds no secret). */
static json_t *principal_obj(const Keyload__V1__CatalogPrincipal *p)
{
    kl_role role = p->cluster_admin ? KL_ROLE_CLUSTER_ADMIN
                   : p->database_admin ? KL_ROLE_DATABASE_ADMIN : KL_ROLE_NONE;
    json_t *o = json_object();
    bool ok = o != NULL && set(o, "principal_id", text(p->principal_id)) &&
              set(o, "tenant", text(p->tenant)) &&
              set(o, "role", json_string(kl_role_name(role))) &&
              set(o, "database", text(p->database)) &&
              set(o, "public_key", b64(p->public_key.data, p->public_key.len)) &&
              set(o, "key_id", b64(p->key_id.data, p->key_id.len)) &&
              set(o, "policy_epoch", u64(p->policy_epoch)) && set(o, "grants", json_array());
    json_t *grants = ok ? json_object_get(o, "grants") : NULL;
    for (size_t i = 0; ok && i < p->n_grants; i++) {
        json_t *g = grant_json(p->grants[i]);
        ok = g != NULL && json_array_append_new(grants, g) == 0;
    }
    ok = ok && set(o, "created_unix_ms", i64(p->created_unix_ms)) && set(o, "version", u64(p->version));
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *kl_principal_to_json(const Keyload__V1__ShowPrincipalAnswer *a, unsigned flags)
{
    static const Keyload__V1__CatalogPrincipal none = KEYLOAD__V1__CATALOG_PRINCIPAL__INIT;
    json_t *o = principal_obj(a->principal ? a->principal : &none);
    if (o == NULL || !set(o, "catalog_version", u64(a->catalog_version))) {
        json_decref(o);
        return NULL;
    }
    return dump(o, flags);
}

static json_t *database_obj(const Keyload__V1__CatalogDatabase *d)
{
    json_t *o = json_object();
    bool ok = o != NULL && set(o, "tenant", text(d->tenant)) && set(o, "database", text(d->database)) &&
              set(o, "database_id", u64(d->database_id)) && set(o, "limits", limits_json(d->limits)) &&
              set(o, "transfers_paused", json_boolean(d->transfers_paused)) &&
              set(o, "created_unix_ms", i64(d->created_unix_ms)) && set(o, "version", u64(d->version));
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *queue_obj(const Keyload__V1__CatalogQueue *q)
{
    static const Keyload__V1__QueueLimits none = KEYLOAD__V1__QUEUE_LIMITS__INIT;
    const Keyload__V1__QueueLimits *l = q->limits ? q->limits : &none;
    json_t *o = json_object();
    bool ok = o != NULL && set(o, "tenant", text(q->tenant)) && set(o, "database", text(q->database)) &&
              set(o, "queue", text(q->queue)) && set(o, "queue_id", u64(q->queue_id)) &&
              set(o, "partition", i64(q->partition)) && set(o, "max_messages", u64(l->max_messages)) &&
              set(o, "max_bytes", u64(l->max_bytes)) && set(o, "max_deliveries", u64(l->max_deliveries)) &&
              set(o, "dead_letter_queue", text(l->dead_letter_queue)) &&
              set(o, "created_unix_ms", i64(q->created_unix_ms)) && set(o, "version", u64(q->version));
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *kl_catalog_list_to_json(const Keyload__V1__ListCatalogAnswer *a, Keyload__V1__CatalogListKind kind,
                              unsigned flags)
{
    json_t *o = json_object(), *items = json_array();
    bool ok = o != NULL && items != NULL;
    const char *key = kind == KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_QUEUES       ? "queues"
                      : kind == KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_PRINCIPALS ? "principals"
                                                                                        : "databases";
    for (size_t i = 0; ok && i < a->n_databases; i++)
        ok = json_array_append_new(items, database_obj(a->databases[i])) == 0;
    for (size_t i = 0; ok && i < a->n_queues; i++)
        ok = json_array_append_new(items, queue_obj(a->queues[i])) == 0;
    for (size_t i = 0; ok && i < a->n_principals; i++)
        ok = json_array_append_new(items, principal_obj(a->principals[i])) == 0;
    if (ok) {
        ok = set(o, key, items); /* set owns items from here, even when it fails */
        items = NULL;
    }
    ok = ok && set(o, "next_cursor", a->next_cursor.len ? b64(a->next_cursor.data, a->next_cursor.len) : json_null()) &&
         set(o, "catalog_version", u64(a->catalog_version));
    json_decref(items);
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return dump(o, flags);
}

char *kl_error_to_json(const kl_err *err, unsigned flags)
{
    json_t *o = json_object();
    bool ok = o != NULL && set(o, "error", json_object());
    json_t *e = ok ? json_object_get(o, "error") : NULL;
    ok = ok && set(e, "code", json_string(kl_code_name(err->code))) &&
         set(e, "message", text(err->message)) && set(e, "detail", text(err->detail));
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return dump(o, flags);
}

/* ---------------------------------------------------------------- shared helpers
 * (json_util.h): the same value rules for transfer_json.c. */

bool kl_sdk_json_set(json_t *obj, const char *key, json_t *v) { return set(obj, key, v); }
json_t *kl_sdk_json_u64(uint64_t v) { return u64(v); }
json_t *kl_sdk_json_i64(int64_t v) { return i64(v); }
json_t *kl_sdk_json_b64(const uint8_t *p, size_t n) { return b64(p, n); }
json_t *kl_sdk_json_text(const char *s) { return text(s); }
json_t *kl_sdk_json_guid(const ProtobufCBinaryData *g) { return guid_text(g); }
char *kl_sdk_json_dump(json_t *o, unsigned flags) { return dump(o, flags); }
