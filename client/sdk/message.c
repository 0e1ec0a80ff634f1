/* message: the kl_message builder (body, headers, typed fields) and the CLI's k=v forms. */
#include "client/sdk/internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kl_code kl_message_new(const void *body, size_t len, kl_message **out, kl_err *err)
{
    *out = NULL;
    if (body == NULL && len != 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "body", "body is NULL but its length is %zu",
                       len);
    kl_message *m = calloc(1, sizeof *m);
    Keyload__V1__EnqueueMessage *pb = malloc(sizeof *pb);
    if (m == NULL || pb == NULL) {
        free(m);
        free(pb);
        return kl_sdk_oom(err);
    }
    keyload__v1__enqueue_message__init(pb);
    if (len > 0) {
        pb->body.data = malloc(len);
        if (pb->body.data == NULL) {
            free(pb);
            free(m);
            return kl_sdk_oom(err);
        }
        memcpy(pb->body.data, body, len);
        pb->body.len = len;
    }
    m->pb = pb;
    *out = m;
    return KL_OK;
}

void kl_message_free(kl_message *m)
{
    if (m == NULL)
        return;
    keyload__v1__enqueue_message__free_unpacked(m->pb, NULL);
    free(m);
}

const Keyload__V1__EnqueueMessage *kl_message_view(const kl_message *m)
{
    return m->pb;
}

static kl_code check_key(const kl_message *m, bool header, const char *key, kl_err *err)
{
    const char *what = header ? "header key" : "field key";
    kl_code rc = kl_sdk_check_name(what, key, KL_SDK_NAME_KEY, err);
    if (rc != KL_OK)
        return rc;
    const Keyload__V1__EnqueueMessage *pb = m->pb;
    if (header) {
        for (size_t i = 0; i < pb->n_headers; i++)
            if (strcmp(pb->headers[i]->key, key) == 0)
                return kl_fail(err, KL_INVALID_ARGUMENT, "header key",
                               "header '%s' is given twice", key);
    } else {
        for (size_t i = 0; i < pb->n_fields; i++)
            if (strcmp(pb->fields[i]->key, key) == 0)
                return kl_fail(err, KL_INVALID_ARGUMENT, "field key",
                               "field '%s' is given twice", key);
    }
    return KL_OK;
}

kl_code kl_message_add_header(kl_message *m, const char *key, const char *value, kl_err *err)
{
    kl_code rc = check_key(m, true, key, err);
    if (rc == KL_OK)
        rc = kl_sdk_check_text("header value", value, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__EnqueueMessage *pb = m->pb;
    Keyload__V1__Header **arr = realloc(pb->headers, (pb->n_headers + 1) * sizeof *arr);
    if (arr == NULL)
        return kl_sdk_oom(err);
    pb->headers = arr;
    Keyload__V1__Header *h = malloc(sizeof *h);
    if (h == NULL)
        return kl_sdk_oom(err);
    keyload__v1__header__init(h);
    h->key = strdup(key);
    h->value = strdup(value);
    if (h->key == NULL || h->value == NULL) {
        free(h->key);
        free(h->value);
        free(h);
        return kl_sdk_oom(err);
    }
    pb->headers[pb->n_headers++] = h;
    return KL_OK;
}

/* Appends a field whose value v (malloc'd, fully owned) the message now owns. */
static kl_code add_field(kl_message *m, const char *key, Keyload__V1__FieldValue *v,
                         kl_err *err)
{
    Keyload__V1__EnqueueMessage *pb = m->pb;
    Keyload__V1__Field *f = NULL;
    Keyload__V1__Field **arr = realloc(pb->fields, (pb->n_fields + 1) * sizeof *arr);
    if (arr == NULL)
        goto oom;
    pb->fields = arr;
    f = malloc(sizeof *f);
    if (f == NULL)
        goto oom;
    keyload__v1__field__init(f);
    f->key = strdup(key);
    if (f->key == NULL)
        goto oom;
    f->value = v;
    pb->fields[pb->n_fields++] = f;
    return KL_OK;
oom:
    free(f);
    keyload__v1__field_value__free_unpacked(v, NULL);
    return kl_sdk_oom(err);
}

static kl_code new_value(kl_message *m, const char *key, Keyload__V1__FieldValue **out,
                         kl_err *err)
{
    kl_code rc = check_key(m, false, key, err);
    if (rc != KL_OK)
        return rc;
    *out = malloc(sizeof **out);
    if (*out == NULL)
        return kl_sdk_oom(err);
    keyload__v1__field_value__init(*out);
    return KL_OK;
}

kl_code kl_message_add_field_string(kl_message *m, const char *key, const char *value,
                                    kl_err *err)
{
    Keyload__V1__FieldValue *v;
    kl_code rc = kl_sdk_check_text("field value", value, err);
    if (rc == KL_OK)
        rc = new_value(m, key, &v, err);
    if (rc != KL_OK)
        return rc;
    v->string_value = strdup(value);
    if (v->string_value == NULL) {
        free(v);
        return kl_sdk_oom(err);
    }
    v->kind_case = KEYLOAD__V1__FIELD_VALUE__KIND_STRING_VALUE;
    return add_field(m, key, v, err);
}

kl_code kl_message_add_field_int(kl_message *m, const char *key, int64_t value, kl_err *err)
{
    Keyload__V1__FieldValue *v;
    kl_code rc = new_value(m, key, &v, err);
    if (rc != KL_OK)
        return rc;
    v->kind_case = KEYLOAD__V1__FIELD_VALUE__KIND_INT_VALUE;
    v->int_value = value;
    return add_field(m, key, v, err);
}

kl_code kl_message_add_field_double(kl_message *m, const char *key, double value, kl_err *err)
{
    if (!isfinite(value))
        return kl_fail(err, KL_INVALID_ARGUMENT, "field value",
                       "field '%s': a double must be finite", key ? key : "");
    Keyload__V1__FieldValue *v;
    kl_code rc = new_value(m, key, &v, err);
    if (rc != KL_OK)
        return rc;
    v->kind_case = KEYLOAD__V1__FIELD_VALUE__KIND_DOUBLE_VALUE;
    v->double_value = value;
    return add_field(m, key, v, err);
}

kl_code kl_message_add_field_bool(kl_message *m, const char *key, bool value, kl_err *err)
{
    Keyload__V1__FieldValue *v;
    kl_code rc = new_value(m, key, &v, err);
    if (rc != KL_OK)
        return rc;
    v->kind_case = KEYLOAD__V1__FIELD_VALUE__KIND_BOOL_VALUE;
    v->bool_value = value;
    return add_field(m, key, v, err);
}

kl_code kl_message_add_field_bytes(kl_message *m, const char *key, const void *value,
                                   size_t len, kl_err *err)
{
    if (value == NULL && len != 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "field value",
                       "field '%s': value is NULL but its length is %zu", key ? key : "", len);
    Keyload__V1__FieldValue *v;
    kl_code rc = new_value(m, key, &v, err);
    if (rc != KL_OK)
        return rc;
    v->kind_case = KEYLOAD__V1__FIELD_VALUE__KIND_BYTES_VALUE;
    v->bytes_value.len = len;
    v->bytes_value.data = malloc(len ? len : 1);
    if (v->bytes_value.data == NULL) {
        free(v);
        return kl_sdk_oom(err);
    }
    if (len)
        memcpy(v->bytes_value.data, value, len);
    return add_field(m, key, v, err);
}

kl_code kl_message_set_expiry(kl_message *m, int64_t expires_at_unix_ms, kl_err *err)
{
    if (expires_at_unix_ms < 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "expires_at_unix_ms",
                       "expires_at_unix_ms must be >= 0 (0 = never)");
    m->pb->expires_at_unix_ms = expires_at_unix_ms;
    return KL_OK;
}

kl_code kl_message_set_delay(kl_message *m, int64_t delay_ms, kl_err *err)
{
    if (delay_ms < 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "delay_ms", "delay_ms must be >= 0");
    m->pb->delay_ms = delay_ms;
    return KL_OK;
}

/* Splits "k=v" at the first '='; *key is malloc'd (caller frees), *value points into spec. */
static kl_code split_kv(const char *what, const char *spec, char **key, const char **value,
                        kl_err *err)
{
    if (spec == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s is missing", what);
    const char *eq = strchr(spec, '=');
    if (eq == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s must have the form key=value",
                       what);
    *key = strndup(spec, (size_t)(eq - spec));
    if (*key == NULL)
        return kl_sdk_oom(err);
    *value = eq + 1;
    return KL_OK;
}

kl_code kl_message_parse_header(kl_message *m, const char *spec, kl_err *err)
{
    char *key;
    const char *value;
    kl_code rc = split_kv("header", spec, &key, &value, err);
    if (rc != KL_OK)
        return rc;
    rc = kl_message_add_header(m, key, value, err);
    free(key);
    return rc;
}

static kl_code parse_typed(kl_message *m, const char *key, const char *type, const char *value,
                           kl_err *err)
{
    /* The key first, so that later messages quote only a validated name. */
    kl_code krc = kl_sdk_check_name("field key", key, KL_SDK_NAME_KEY, err);
    if (krc != KL_OK)
        return krc;
    if (strcmp(type, "string") == 0)
        return kl_message_add_field_string(m, key, value, err);
    if (strcmp(type, "int") == 0) {
        char *end;
        errno = 0;
        long long v = strtoll(value, &end, 10);
        if (value[0] == '\0' || *end != '\0' || errno == ERANGE || value[0] == '+' ||
            isspace((unsigned char)value[0]))
            return kl_fail(err, KL_INVALID_ARGUMENT, "field value",
                           "field '%s': int value must be a decimal integer in the int64 range",
                           key);
        return kl_message_add_field_int(m, key, (int64_t)v, err);
    }
    if (strcmp(type, "double") == 0) {
        char *end;
        errno = 0;
        double v = strtod(value, &end);
        if (value[0] == '\0' || *end != '\0' || errno == ERANGE || !isfinite(v) ||
            isspace((unsigned char)value[0]))
            return kl_fail(err, KL_INVALID_ARGUMENT, "field value",
                           "field '%s': double value must be a finite decimal number", key);
        return kl_message_add_field_double(m, key, v, err);
    }
    if (strcmp(type, "bool") == 0) {
        if (strcmp(value, "true") == 0)
            return kl_message_add_field_bool(m, key, true, err);
        if (strcmp(value, "false") == 0)
            return kl_message_add_field_bool(m, key, false, err);
        return kl_fail(err, KL_INVALID_ARGUMENT, "field value",
                       "field '%s': bool value must be true or false", key);
    }
    if (strcmp(type, "bytes") == 0) {
        uint8_t *bytes;
        size_t len;
        char what[KL_SDK_NAME_MAX + 32];
        snprintf(what, sizeof what, "field '%s' (bytes)", key);
        kl_code rc = kl_base64_decode(what, value, &bytes, &len, err);
        if (rc != KL_OK) {
            if (err != NULL)
                snprintf(err->detail, sizeof err->detail, "field value");
            return rc;
        }
        rc = kl_message_add_field_bytes(m, key, bytes, len, err);
        free(bytes);
        return rc;
    }
    return kl_fail(err, KL_INVALID_ARGUMENT, "field type",
                   "field '%s': unknown type '%s' (use string, int, double, bool or bytes)",
                   key, type);
}

kl_code kl_message_parse_field(kl_message *m, const char *spec, kl_err *err)
{
    char *left;
    const char *value;
    kl_code rc = split_kv("field", spec, &left, &value, err);
    if (rc != KL_OK)
        return rc;
    char *colon = strrchr(left, ':');
    if (colon == NULL) {
        rc = kl_message_add_field_string(m, left, value, err);
    } else {
        *colon = '\0';
        rc = parse_typed(m, left, colon + 1, value, err);
    }
    free(left);
    return rc;
}
