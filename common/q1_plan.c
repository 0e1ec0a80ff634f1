/* q1_plan: the alias table and the mapping of each alias's arguments onto its native
 * request (common/q1_plan.h). Requests are built from borrowed pieces plus an arena of
 * allocations, packed, and the arena wiped and freed: nothing here outlives the call except
 * the packed bytes the plan owns. */
#include "common/q1_plan.h"

#include "common/guid.h"
#include "keyload/v1/queue.pb-c.h"
#include "keyload/v1/transfer.pb-c.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- an arena: every allocation of one build, freed (wiped) together ---- */

typedef struct arena_item {
    struct arena_item *next;
    size_t size;
} arena_item;

typedef struct arena {
    arena_item *head;
} arena;

static void *arena_alloc(arena *ar, size_t size)
{
    arena_item *it = calloc(1, sizeof *it + size + 1);
    if (it == NULL)
        return NULL;
    it->size = size;
    it->next = ar->head;
    ar->head = it;
    return it + 1;
}

static void arena_free(arena *ar)
{
    while (ar->head != NULL) {
        arena_item *it = ar->head;
        ar->head = it->next;
        sodium_memzero(it + 1, it->size);
        free(it);
    }
}

/* ---- argument access: presence, type, and which ones the mapping read ---- */

typedef struct args {
    const kl_q1_call *call;
    const char *alias;
    const char *params;      /* the alias's argument names, for messages */
    uint64_t used;           /* bit i: call->args[i] was read */
    const char *tenant, *database;
    arena ar;
} args;

static const kl_q1_arg *arg_take(args *a, const char *name)
{
    for (size_t i = 0; i < a->call->n_args; i++)
        if (strcmp(a->call->args[i].name, name) == 0) {
            a->used |= (uint64_t)1 << i;
            return a->call->args[i].kind == KL_Q1_NULL ? NULL : &a->call->args[i];
        }
    return NULL;
}

static kl_code missing(args *a, const char *name, const char *type, kl_err *err)
{
    return kl_fail(err, KL_INVALID_ARGUMENT, name, "%s needs argument %s (%s)", a->alias, name,
                   type);
}

static kl_code wrong_type(args *a, const kl_q1_arg *v, const char *type, kl_err *err)
{
    return kl_fail(err, KL_INVALID_ARGUMENT, v->name,
                   "argument %s of %s (line %d, column %d) must be %s, not %s", v->name, a->alias,
                   v->line, v->column, type, kl_q1_kind_name(v->kind));
}

/* A string argument; NULL (absent or NULL) is allowed unless required. */
static kl_code arg_str(args *a, const char *name, bool required, const char **out, kl_err *err)
{
    *out = NULL;
    const kl_q1_arg *v = arg_take(a, name);
    if (v == NULL)
        return required ? missing(a, name, "a string", err) : KL_OK;
    if (v->kind != KL_Q1_STRING)
        return wrong_type(a, v, "a string", err);
    *out = v->str;
    return KL_OK;
}

static kl_code arg_int(args *a, const char *name, int64_t min, int64_t max, int64_t *out,
                       kl_err *err)
{
    *out = 0;
    const kl_q1_arg *v = arg_take(a, name);
    if (v == NULL)
        return KL_OK;
    if (v->kind != KL_Q1_INT)
        return wrong_type(a, v, "an integer", err);
    if (v->i < min || v->i > max)
        return kl_fail(err, KL_INVALID_ARGUMENT, name,
                       "argument %s of %s must be between %lld and %lld", name, a->alias,
                       (long long)min, (long long)max);
    *out = v->i;
    return KL_OK;
}

static kl_code arg_json(args *a, const char *name, const json_t **out, kl_err *err)
{
    *out = NULL;
    const kl_q1_arg *v = arg_take(a, name);
    if (v == NULL)
        return KL_OK;
    if (v->kind != KL_Q1_JSON)
        return wrong_type(a, v, "a JSON object", err);
    *out = v->json;
    return KL_OK;
}

/* A queue name argument (identifier rule, common/names.h). */
static kl_code arg_queue(args *a, const char *name, const char **out, kl_err *err)
{
    kl_code rc = arg_str(a, name, true, out, err);
    return rc == KL_OK ? kl_name_check(name, *out, err) : rc;
}

/* A lane argument: absent, NULL or '' is the default lane. */
static kl_code arg_lane(args *a, const char *name, const char **out, kl_err *err)
{
    kl_code rc = arg_str(a, name, false, out, err);
    if (rc != KL_OK)
        return rc;
    if (*out == NULL || (*out)[0] == '\0') {
        *out = "";
        return KL_OK;
    }
    return kl_name_check(name, *out, err);
}

/* A complete lane ref in the plan's tenant/database, in the arena. */
static kl_code lane_ref(args *a, const char *queue_arg, const char *lane_arg,
                        Keyload__V1__QueueLaneRef **out, kl_err *err)
{
    const char *queue, *lane = "";
    kl_code rc = arg_queue(a, queue_arg, &queue, err);
    if (rc == KL_OK && lane_arg != NULL)
        rc = arg_lane(a, lane_arg, &lane, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__QueueLaneRef *r = arena_alloc(&a->ar, sizeof *r);
    if (r == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    keyload__v1__queue_lane_ref__init(r);
    r->tenant = (char *)a->tenant;
    r->database = (char *)a->database;
    r->queue = (char *)queue;
    r->lane = (char *)lane;
    *out = r;
    return KL_OK;
}

static kl_code guid_arg(args *a, const char *name, ProtobufCBinaryData *out, kl_err *err)
{
    const char *text;
    kl_code rc = arg_str(a, name, true, &text, err);
    if (rc != KL_OK)
        return rc;
    uint8_t *g = arena_alloc(&a->ar, KL_GUID_LEN);
    if (g == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    if (!kl_guid_parse(text, g) || !kl_guid_valid(g, KL_GUID_LEN))
        return kl_fail(err, KL_INVALID_ARGUMENT, name,
                       "argument %s of %s must be a GUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx), "
                       "not all zero",
                       name, a->alias);
    out->data = g;
    out->len = KL_GUID_LEN;
    return KL_OK;
}

/* Canonical standard base64 (padding required) into the arena; the text is never quoted. */
static kl_code base64_bytes(args *a, const char *name, const char *text, ProtobufCBinaryData *out,
                            kl_err *err)
{
    size_t n = strlen(text), cap = n / 4 * 3 + 3, len = 0;
    const char *end = NULL;
    uint8_t *buf = arena_alloc(&a->ar, cap);
    if (buf == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    if (sodium_base642bin(buf, cap, text, n, NULL, &len, &end, sodium_base64_VARIANT_ORIGINAL) != 0 ||
        end != text + n)
        return kl_fail(err, KL_INVALID_ARGUMENT, name,
                       "argument %s of %s must be standard base64 with padding", name, a->alias);
    out->data = buf;
    out->len = len;
    return KL_OK;
}

static kl_code arg_base64(args *a, const char *name, bool required, ProtobufCBinaryData *out,
                          kl_err *err)
{
    const char *text;
    out->data = NULL;
    out->len = 0;
    kl_code rc = arg_str(a, name, required, &text, err);
    if (rc != KL_OK || text == NULL)
        return rc;
    if ((rc = base64_bytes(a, name, text, out, err)) != KL_OK)
        return rc;
    if (required && out->len == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, name, "argument %s of %s is empty", name,
                       a->alias);
    return KL_OK;
}

/* ---- the message of enqueue and transfer create ---- */

/* headers: {"key": "value", ...} */
static kl_code headers_arg(args *a, Keyload__V1__EnqueueMessage *m, kl_err *err)
{
    const json_t *obj;
    kl_code rc = arg_json(a, "headers", &obj, err);
    if (rc != KL_OK || obj == NULL)
        return rc;
    size_t n = json_object_size(obj), i = 0;
    Keyload__V1__Header **hs = arena_alloc(&a->ar, (n ? n : 1) * sizeof *hs);
    if (hs == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)obj, key, val) {
        if (!json_is_string(val))
            return kl_fail(err, KL_INVALID_ARGUMENT, "headers",
                           "argument headers of %s: header %zu's value must be a JSON string",
                           a->alias, i + 1);
        Keyload__V1__Header *h = arena_alloc(&a->ar, sizeof *h);
        if (h == NULL)
            return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
        keyload__v1__header__init(h);
        h->key = (char *)key;
        h->value = (char *)json_string_value(val);
        hs[i++] = h;
    }
    m->headers = hs;
    m->n_headers = n;
    return KL_OK;
}

/* One field value: a JSON string, integer, real or boolean, or {"type": T, "value": V} with T
 * one of string, int, double, bool, bytes (bytes: base64), the form the canonical JSON
 * serializer prints. */
static kl_code field_value(args *a, size_t pos, json_t *val, Keyload__V1__FieldValue *fv,
                           kl_err *err)
{
    keyload__v1__field_value__init(fv);
    const char *type = NULL;
    if (json_is_object(val)) {
        json_t *t = json_object_get(val, "type");
        json_t *v = json_object_get(val, "value");
        if (!json_is_string(t) || v == NULL || json_object_size(val) != 2)
            return kl_fail(err, KL_INVALID_ARGUMENT, "fields",
                           "argument fields of %s: field %zu must be a scalar or "
                           "{\"type\": ..., \"value\": ...}",
                           a->alias, pos);
        type = json_string_value(t);
        val = v;
    }
    if (json_is_string(val) && (type == NULL || strcmp(type, "string") == 0)) {
        fv->kind_case = KEYLOAD__V1__FIELD_VALUE__KIND_STRING_VALUE;
        fv->string_value = (char *)json_string_value(val);
    } else if (json_is_string(val) && strcmp(type, "bytes") == 0) {
        fv->kind_case = KEYLOAD__V1__FIELD_VALUE__KIND_BYTES_VALUE;
        kl_code rc = base64_bytes(a, "fields", json_string_value(val), &fv->bytes_value, err);
        if (rc != KL_OK)
            return rc;
    } else if (json_is_integer(val) && (type == NULL || strcmp(type, "int") == 0)) {
        fv->kind_case = KEYLOAD__V1__FIELD_VALUE__KIND_INT_VALUE;
        fv->int_value = json_integer_value(val);
    } else if (json_is_number(val) && (type == NULL || strcmp(type, "double") == 0)) {
        fv->kind_case = KEYLOAD__V1__FIELD_VALUE__KIND_DOUBLE_VALUE;
        fv->double_value = json_number_value(val);
    } else if (json_is_boolean(val) && (type == NULL || strcmp(type, "bool") == 0)) {
        fv->kind_case = KEYLOAD__V1__FIELD_VALUE__KIND_BOOL_VALUE;
        fv->bool_value = json_is_true(val);
    } else {
        return kl_fail(err, KL_INVALID_ARGUMENT, "fields",
                       "argument fields of %s: field %zu has an unsupported value (a JSON string, "
                       "integer, number or boolean, or {\"type\": string|int|double|bool|bytes, "
                       "\"value\": ...})",
                       a->alias, pos);
    }
    return KL_OK;
}

static kl_code fields_arg(args *a, Keyload__V1__EnqueueMessage *m, kl_err *err)
{
    const json_t *obj;
    kl_code rc = arg_json(a, "fields", &obj, err);
    if (rc != KL_OK || obj == NULL)
        return rc;
    size_t n = json_object_size(obj), i = 0;
    Keyload__V1__Field **fs = arena_alloc(&a->ar, (n ? n : 1) * sizeof *fs);
    if (fs == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)obj, key, val) {
        Keyload__V1__Field *f = arena_alloc(&a->ar, sizeof *f);
        Keyload__V1__FieldValue *fv = arena_alloc(&a->ar, sizeof *fv);
        if (f == NULL || fv == NULL)
            return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
        keyload__v1__field__init(f);
        f->key = (char *)key;
        if ((rc = field_value(a, i + 1, val, fv, err)) != KL_OK)
            return rc;
        f->value = fv;
        fs[i++] = f;
    }
    m->fields = fs;
    m->n_fields = n;
    return KL_OK;
}

/* body (UTF-8 text) or body_base64 (bytes), at most one (neither: an empty body); headers;
 * fields; expires_at_unix_ms; delay_ms. */
static kl_code message_args(args *a, Keyload__V1__EnqueueMessage **out, kl_err *err)
{
    Keyload__V1__EnqueueMessage *m = arena_alloc(&a->ar, sizeof *m);
    if (m == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    keyload__v1__enqueue_message__init(m);
    const char *body;
    ProtobufCBinaryData raw;
    kl_code rc = arg_str(a, "body", false, &body, err);
    if (rc == KL_OK)
        rc = arg_base64(a, "body_base64", false, &raw, err);
    if (rc != KL_OK)
        return rc;
    if (body != NULL && raw.data != NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "body_base64",
                       "%s takes body or body_base64, not both", a->alias);
    if (body != NULL) {
        m->body.data = (uint8_t *)body;
        m->body.len = strlen(body);
    } else if (raw.data != NULL) {
        m->body = raw;
    }
    if ((rc = headers_arg(a, m, err)) != KL_OK || (rc = fields_arg(a, m, err)) != KL_OK)
        return rc;
    if ((rc = arg_int(a, "expires_at_unix_ms", 0, INT64_MAX, &m->expires_at_unix_ms, err)) != KL_OK ||
        (rc = arg_int(a, "delay_ms", 0, INT64_MAX, &m->delay_ms, err)) != KL_OK)
        return rc;
    *out = m;
    return KL_OK;
}

/* ---- the mapping functions: one per alias ---- */

/* What a mapping function fills: one mutation (batch aliases) or a read request. */
typedef struct target {
    Keyload__V1__Mutation mutation;
    const ProtobufCMessage *read;   /* read aliases */
    const char *route;              /* the queue name that routes the call */
} target;

static kl_code map_transfer_create(args *a, target *t, kl_err *err)
{
    Keyload__V1__CreateQueueTransfer *m = arena_alloc(&a->ar, sizeof *m);
    if (m == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    keyload__v1__create_queue_transfer__init(m);
    kl_code rc;
    if ((rc = lane_ref(a, "source_queue", "source_lane", &m->source_queue, err)) != KL_OK ||
        (rc = guid_arg(a, "transfer_id", &m->transfer_id, err)) != KL_OK ||
        (rc = lane_ref(a, "destination_queue", "destination_lane", &m->destination, err)) != KL_OK ||
        (rc = message_args(a, &m->message, err)) != KL_OK)
        return rc;
    t->mutation.kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE_TRANSFER;
    t->mutation.create_queue_transfer = m;
    t->route = m->source_queue->queue;
    return KL_OK;
}

static kl_code map_transfer_accept(args *a, target *t, kl_err *err)
{
    Keyload__V1__AcceptQueueTransfer *m = arena_alloc(&a->ar, sizeof *m);
    if (m == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    keyload__v1__accept_queue_transfer__init(m);
    kl_code rc;
    if ((rc = lane_ref(a, "destination_queue", "destination_lane", &m->destination_queue, err)) != KL_OK ||
        (rc = arg_base64(a, "intent_token", true, &m->intent_token, err)) != KL_OK)
        return rc;
    t->mutation.kind_case = KEYLOAD__V1__MUTATION__KIND_ACCEPT_QUEUE_TRANSFER;
    t->mutation.accept_queue_transfer = m;
    t->route = m->destination_queue->queue;
    return KL_OK;
}

static kl_code map_transfer_complete(args *a, target *t, kl_err *err)
{
    Keyload__V1__CompleteQueueTransfer *m = arena_alloc(&a->ar, sizeof *m);
    if (m == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    keyload__v1__complete_queue_transfer__init(m);
    kl_code rc;
    if ((rc = lane_ref(a, "source_queue", "source_lane", &m->source_queue, err)) != KL_OK ||
        (rc = guid_arg(a, "transfer_id", &m->transfer_id, err)) != KL_OK ||
        (rc = arg_base64(a, "receipt_token", true, &m->receipt_token, err)) != KL_OK)
        return rc;
    t->mutation.kind_case = KEYLOAD__V1__MUTATION__KIND_COMPLETE_QUEUE_TRANSFER;
    t->mutation.complete_queue_transfer = m;
    t->route = m->source_queue->queue;
    return KL_OK;
}

static kl_code map_transfer_inspect(args *a, target *t, kl_err *err)
{
    Keyload__V1__InspectQueueTransferRequest *r = arena_alloc(&a->ar, sizeof *r);
    if (r == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    keyload__v1__inspect_queue_transfer_request__init(r);
    kl_code rc;
    if ((rc = lane_ref(a, "source_queue", "source_lane", &r->source_queue, err)) != KL_OK ||
        (rc = guid_arg(a, "transfer_id", &r->transfer_id, err)) != KL_OK)
        return rc;
    t->read = &r->base;
    t->route = r->source_queue->queue;
    return KL_OK;
}

static kl_code map_transfer_inspect_receipt(args *a, target *t, kl_err *err)
{
    Keyload__V1__InspectQueueTransferReceiptRequest *r = arena_alloc(&a->ar, sizeof *r);
    if (r == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    keyload__v1__inspect_queue_transfer_receipt_request__init(r);
    kl_code rc;
    /* The destination's lane is not an argument: the receipt names it. */
    if ((rc = lane_ref(a, "destination_queue", NULL, &r->destination_queue, err)) != KL_OK ||
        (rc = lane_ref(a, "source_queue", "source_lane", &r->source_queue, err)) != KL_OK ||
        (rc = guid_arg(a, "transfer_id", &r->transfer_id, err)) != KL_OK)
        return rc;
    t->read = &r->base;
    t->route = r->destination_queue->queue;
    return KL_OK;
}

static kl_code map_enqueue(args *a, target *t, kl_err *err)
{
    Keyload__V1__Enqueue *m = arena_alloc(&a->ar, sizeof *m);
    if (m == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    keyload__v1__enqueue__init(m);
    kl_code rc;
    if ((rc = lane_ref(a, "queue", "lane", &m->lane, err)) != KL_OK ||
        (rc = message_args(a, &m->message, err)) != KL_OK)
        return rc;
    t->mutation.kind_case = KEYLOAD__V1__MUTATION__KIND_ENQUEUE;
    t->mutation.enqueue = m;
    t->route = m->lane->queue;
    return KL_OK;
}

static kl_code map_receive(args *a, target *t, kl_err *err)
{
    Keyload__V1__Receive *m = arena_alloc(&a->ar, sizeof *m);
    if (m == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    keyload__v1__receive__init(m);
    int64_t max, lease;
    kl_code rc;
    if ((rc = lane_ref(a, "queue", "lane", &m->lane, err)) != KL_OK ||
        (rc = arg_int(a, "max", 0, UINT32_MAX, &max, err)) != KL_OK ||
        (rc = arg_int(a, "lease_ms", 0, UINT32_MAX, &lease, err)) != KL_OK)
        return rc;
    m->max_messages = (uint32_t)max;
    m->lease_ms = (uint32_t)lease;
    t->mutation.kind_case = KEYLOAD__V1__MUTATION__KIND_RECEIVE;
    t->mutation.receive = m;
    t->route = m->lane->queue;
    return KL_OK;
}

#define LEASE_TOKENS_MAX 1000 /* per ack; the daemon's MaxBatchBytes bounds it further */

/* lease_tokens: one string of base64 tokens separated by commas (base64 has no comma). */
static kl_code map_ack(args *a, target *t, kl_err *err)
{
    Keyload__V1__Ack *m = arena_alloc(&a->ar, sizeof *m);
    if (m == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    keyload__v1__ack__init(m);
    const char *list;
    kl_code rc;
    if ((rc = lane_ref(a, "queue", NULL, &m->queue, err)) != KL_OK ||
        (rc = arg_str(a, "lease_tokens", true, &list, err)) != KL_OK)
        return rc;
    size_t n = 1;
    for (const char *p = list; *p; p++)
        n += *p == ',';
    if (n > LEASE_TOKENS_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "lease_tokens",
                       "argument lease_tokens of %s holds more than %d tokens", a->alias,
                       LEASE_TOKENS_MAX);
    m->lease_tokens = arena_alloc(&a->ar, n * sizeof *m->lease_tokens);
    char *copy = arena_alloc(&a->ar, strlen(list));
    if (m->lease_tokens == NULL || copy == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    memcpy(copy, list, strlen(list) + 1); /* arena items have one spare byte for the NUL */
    char *save = NULL;
    size_t i = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        size_t len = strlen(tok);
        while (len > 0 && tok[len - 1] == ' ')
            tok[--len] = '\0';
        if (len == 0)
            continue;
        if ((rc = base64_bytes(a, "lease_tokens", tok, &m->lease_tokens[i], err)) != KL_OK)
            return rc;
        if (m->lease_tokens[i].len == 0)
            return kl_fail(err, KL_INVALID_ARGUMENT, "lease_tokens",
                           "argument lease_tokens of %s holds an empty token", a->alias);
        i++;
    }
    if (i == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "lease_tokens",
                       "argument lease_tokens of %s names no token", a->alias);
    m->n_lease_tokens = i;
    t->mutation.kind_case = KEYLOAD__V1__MUTATION__KIND_ACK;
    t->mutation.ack = m;
    t->route = m->queue->queue;
    return KL_OK;
}

/* ---- the alias table ---- */

typedef kl_code (*map_fn)(args *a, target *t, kl_err *err);

static const struct alias {
    const char *name;
    kl_q1_op op;
    bool transfer;
    const char *params;   /* for "unknown argument" messages */
    map_fn map;
} aliases[] = {
    {"keyload.queue-transfer.create.v1", KL_Q1_OP_BATCH, true,
     "source_queue, source_lane, transfer_id, destination_queue, destination_lane, body | "
     "body_base64, headers, fields, expires_at_unix_ms, delay_ms",
     map_transfer_create},
    {"keyload.queue-transfer.accept.v1", KL_Q1_OP_BATCH, true,
     "destination_queue, destination_lane, intent_token", map_transfer_accept},
    {"keyload.queue-transfer.complete.v1", KL_Q1_OP_BATCH, true,
     "source_queue, source_lane, transfer_id, receipt_token", map_transfer_complete},
    {"keyload.queue-transfer.inspect.v1", KL_Q1_OP_INSPECT_TRANSFER, true,
     "source_queue, source_lane, transfer_id", map_transfer_inspect},
    {"keyload.queue-transfer.inspect-receipt.v1", KL_Q1_OP_TRANSFER_RECEIPT, true,
     "destination_queue, source_queue, source_lane, transfer_id", map_transfer_inspect_receipt},
    {"keyload.queue.enqueue.v1", KL_Q1_OP_BATCH, false,
     "queue, lane, body | body_base64, headers, fields, expires_at_unix_ms, delay_ms", map_enqueue},
    {"keyload.queue.receive.v1", KL_Q1_OP_BATCH, false, "queue, lane, max, lease_ms", map_receive},
    {"keyload.queue.ack.v1", KL_Q1_OP_BATCH, false, "queue, lease_tokens", map_ack},
};
#define N_ALIASES (sizeof aliases / sizeof aliases[0])

const char *kl_q1_alias_name(size_t i)
{
    return i < N_ALIASES ? aliases[i].name : NULL;
}

static kl_code pack(const ProtobufCMessage *m, kl_q1_plan *out, kl_err *err)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    out->request = malloc(n ? n : 1);
    if (out->request == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    out->request_len = protobuf_c_message_pack(m, out->request);
    return KL_OK;
}

kl_code kl_q1_plan_build(const kl_q1_call *call, const char *tenant, const char *database,
                         const uint8_t *default_command_id, kl_q1_plan *out, kl_err *err)
{
    memset(out, 0, sizeof *out);
    const struct alias *al = NULL;
    for (size_t i = 0; i < N_ALIASES && al == NULL; i++)
        if (strcmp(aliases[i].name, call->alias) == 0)
            al = &aliases[i];
    if (al == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "alias",
                       "unknown alias %s (known: keyload.queue.enqueue.v1, receive.v1, ack.v1 and "
                       "keyload.queue-transfer.create.v1, accept.v1, complete.v1, inspect.v1, "
                       "inspect-receipt.v1)",
                       call->alias);
    if (al->op != KL_Q1_OP_BATCH && call->has_command_id)
        return kl_fail(err, KL_INVALID_ARGUMENT, "command_id",
                       "%s is a read: it takes no WITH COMMAND_ID", al->name);
    args a = {.call = call, .alias = al->name, .params = al->params, .tenant = tenant,
              .database = database};
    target t;
    memset(&t, 0, sizeof t);
    keyload__v1__mutation__init(&t.mutation);
    kl_code rc = al->map(&a, &t, err);
    for (size_t i = 0; rc == KL_OK && i < call->n_args; i++)
        if (!(a.used & ((uint64_t)1 << i)))
            rc = kl_fail(err, KL_INVALID_ARGUMENT, call->args[i].name,
                         "%s takes no argument %s (it takes: %s)", al->name, call->args[i].name,
                         al->params);
    if (rc == KL_OK && strlen(t.route) >= sizeof out->queue)
        rc = kl_fail(err, KL_INTERNAL, "queue", "the routing queue name is too long");
    if (rc == KL_OK) {
        out->alias = al->name;
        out->op = al->op;
        out->transfer = al->transfer;
        strcpy(out->queue, t.route);
        if (al->op == KL_Q1_OP_BATCH) {
            if (call->has_command_id)
                memcpy(out->command_id, call->command_id, 16);
            else if (default_command_id != NULL && kl_guid_valid(default_command_id, 16))
                memcpy(out->command_id, default_command_id, 16);
            else
                kl_guid_random(out->command_id);
            Keyload__V1__BatchRequest b = KEYLOAD__V1__BATCH_REQUEST__INIT;
            Keyload__V1__Mutation *muts[1] = {&t.mutation};
            b.command_id.data = out->command_id;
            b.command_id.len = 16;
            b.mutations = muts;
            b.n_mutations = 1;
            rc = pack(&b.base, out, err);
        } else {
            rc = pack(t.read, out, err);
        }
    }
    arena_free(&a.ar);
    if (rc != KL_OK)
        kl_q1_plan_free(out);
    return rc;
}

void kl_q1_plan_free(kl_q1_plan *p)
{
    if (p == NULL)
        return;
    if (p->request != NULL) {
        sodium_memzero(p->request, p->request_len);
        free(p->request);
    }
    memset(p, 0, sizeof *p);
}
