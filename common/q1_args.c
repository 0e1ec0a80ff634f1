/* q1_args: what the alias mapping functions of q1_plan.c read arguments with (common/q1_args.h):
 * presence and type checks that name the argument at fault, the name rules, GUIDs, base64,
 * and the message arguments shared by enqueue and transfer create. Everything built lives in
 * the args' arena. */
#include "common/q1_args.h"

#include "common/guid.h"
#include "common/names.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- an arena: every allocation of one build, freed (wiped) together ---- */


void *kl_q1_arena_alloc(kl_q1_arena *ar, size_t size)
{
    kl_q1_arena_item *it = calloc(1, sizeof *it + size + 1);
    if (it == NULL)
        return NULL;
    it->size = size;
    it->next = ar->head;
    ar->head = it;
    return it + 1;
}

void kl_q1_arena_free(kl_q1_arena *ar)
{
    while (ar->head != NULL) {
        kl_q1_arena_item *it = ar->head;
        ar->head = it->next;
        sodium_memzero(it + 1, it->size);
        free(it);
    }
}

/* ---- argument access: presence, type, and which ones the mapping read ---- */


static const kl_q1_arg *arg_take(kl_q1_args *a, const char *name)
{
    for (size_t i = 0; i < a->call->n_args; i++)
        if (strcmp(a->call->args[i].name, name) == 0) {
            a->used |= (uint64_t)1 << i;
            return a->call->args[i].kind == KL_Q1_NULL ? NULL : &a->call->args[i];
        }
    return NULL;
}

static kl_code missing(kl_q1_args *a, const char *name, const char *type, kl_err *err)
{
    return kl_fail(err, KL_INVALID_ARGUMENT, name, "%s needs argument %s (%s)", a->alias, name,
                   type);
}

static kl_code wrong_type(kl_q1_args *a, const kl_q1_arg *v, const char *type, kl_err *err)
{
    return kl_fail(err, KL_INVALID_ARGUMENT, v->name,
                   "argument %s of %s (line %d, column %d) must be %s, not %s", v->name, a->alias,
                   v->line, v->column, type, kl_q1_kind_name(v->kind));
}

/* A string argument; NULL (absent or NULL) is allowed unless required. */
kl_code kl_q1_arg_str(kl_q1_args *a, const char *name, bool required, const char **out, kl_err *err)
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

kl_code kl_q1_arg_int(kl_q1_args *a, const char *name, int64_t min, int64_t max, int64_t *out,
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

static kl_code arg_json(kl_q1_args *a, const char *name, const json_t **out, kl_err *err)
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
static kl_code arg_queue(kl_q1_args *a, const char *name, const char **out, kl_err *err)
{
    kl_code rc = kl_q1_arg_str(a, name, true, out, err);
    return rc == KL_OK ? kl_name_check(name, *out, err) : rc;
}

/* A lane argument: absent, NULL or '' is the default lane. */
static kl_code arg_lane(kl_q1_args *a, const char *name, const char **out, kl_err *err)
{
    kl_code rc = kl_q1_arg_str(a, name, false, out, err);
    if (rc != KL_OK)
        return rc;
    if (*out == NULL || (*out)[0] == '\0') {
        *out = "";
        return KL_OK;
    }
    return kl_name_check(name, *out, err);
}

/* A complete lane ref in the plan's tenant/database, in the arena. */
kl_code kl_q1_lane_ref(kl_q1_args *a, const char *queue_arg, const char *lane_arg,
                        Keyload__V1__QueueLaneRef **out, kl_err *err)
{
    const char *queue, *lane = "";
    kl_code rc = arg_queue(a, queue_arg, &queue, err);
    if (rc == KL_OK && lane_arg != NULL)
        rc = arg_lane(a, lane_arg, &lane, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__QueueLaneRef *r = kl_q1_arena_alloc(&a->ar, sizeof *r);
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

kl_code kl_q1_arg_guid(kl_q1_args *a, const char *name, ProtobufCBinaryData *out, kl_err *err)
{
    const char *text;
    kl_code rc = kl_q1_arg_str(a, name, true, &text, err);
    if (rc != KL_OK)
        return rc;
    uint8_t *g = kl_q1_arena_alloc(&a->ar, KL_GUID_LEN);
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
kl_code kl_q1_base64_bytes(kl_q1_args *a, const char *name, const char *text, ProtobufCBinaryData *out,
                            kl_err *err)
{
    size_t n = strlen(text), cap = n / 4 * 3 + 3, len = 0;
    const char *end = NULL;
    uint8_t *buf = kl_q1_arena_alloc(&a->ar, cap);
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

kl_code kl_q1_arg_base64(kl_q1_args *a, const char *name, bool required, ProtobufCBinaryData *out,
                          kl_err *err)
{
    const char *text;
    out->data = NULL;
    out->len = 0;
    kl_code rc = kl_q1_arg_str(a, name, required, &text, err);
    if (rc != KL_OK || text == NULL)
        return rc;
    if ((rc = kl_q1_base64_bytes(a, name, text, out, err)) != KL_OK)
        return rc;
    if (required && out->len == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, name, "argument %s of %s is empty", name,
                       a->alias);
    return KL_OK;
}

/* ---- the message of enqueue and transfer create ---- */

/* headers: {"key": "value", ...} */
static kl_code headers_arg(kl_q1_args *a, Keyload__V1__EnqueueMessage *m, kl_err *err)
{
    const json_t *obj;
    kl_code rc = arg_json(a, "headers", &obj, err);
    if (rc != KL_OK || obj == NULL)
        return rc;
    size_t n = json_object_size(obj), i = 0;
    Keyload__V1__Header **hs = kl_q1_arena_alloc(&a->ar, (n ? n : 1) * sizeof *hs);
    if (hs == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)obj, key, val) {
        if (!json_is_string(val))
            return kl_fail(err, KL_INVALID_ARGUMENT, "headers",
                           "argument headers of %s: header %zu's value must be a JSON string",
                           a->alias, i + 1);
        Keyload__V1__Header *h = kl_q1_arena_alloc(&a->ar, sizeof *h);
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
static kl_code field_value(kl_q1_args *a, size_t pos, json_t *val, Keyload__V1__FieldValue *fv,
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
        kl_code rc = kl_q1_base64_bytes(a, "fields", json_string_value(val), &fv->bytes_value, err);
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

static kl_code fields_arg(kl_q1_args *a, Keyload__V1__EnqueueMessage *m, kl_err *err)
{
    const json_t *obj;
    kl_code rc = arg_json(a, "fields", &obj, err);
    if (rc != KL_OK || obj == NULL)
        return rc;
    size_t n = json_object_size(obj), i = 0;
    Keyload__V1__Field **fs = kl_q1_arena_alloc(&a->ar, (n ? n : 1) * sizeof *fs);
    if (fs == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)obj, key, val) {
        Keyload__V1__Field *f = kl_q1_arena_alloc(&a->ar, sizeof *f);
        Keyload__V1__FieldValue *fv = kl_q1_arena_alloc(&a->ar, sizeof *fv);
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
kl_code kl_q1_arg_message(kl_q1_args *a, Keyload__V1__EnqueueMessage **out, kl_err *err)
{
    Keyload__V1__EnqueueMessage *m = kl_q1_arena_alloc(&a->ar, sizeof *m);
    if (m == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    keyload__v1__enqueue_message__init(m);
    const char *body;
    ProtobufCBinaryData raw;
    kl_code rc = kl_q1_arg_str(a, "body", false, &body, err);
    if (rc == KL_OK)
        rc = kl_q1_arg_base64(a, "body_base64", false, &raw, err);
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
    if ((rc = kl_q1_arg_int(a, "expires_at_unix_ms", 0, INT64_MAX, &m->expires_at_unix_ms, err)) != KL_OK ||
        (rc = kl_q1_arg_int(a, "delay_ms", 0, INT64_MAX, &m->delay_ms, err)) != KL_OK)
        return rc;
    *out = m;
    return KL_OK;
}
