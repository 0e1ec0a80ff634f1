/* The field-shape checks the kinds' validate functions share (validate.h).
 * Every message names the mutation index and field at fault, never their contents
 * beyond names, which are identifiers. */
#include "daemon/engine/validate.h"

#include "common/guid.h"
#include "common/limits.h"
#include "common/names.h"

#include <stdio.h>
#include <string.h>

/* The names alone, formatting nothing (kl_name_check with no err only answers). */
static bool ref_names_ok(const Keyload__V1__QueueLaneRef *r, bool lane_allowed)
{
    return r != NULL && kl_name_check(NULL, r->tenant, NULL) == KL_OK &&
           kl_name_check(NULL, r->database, NULL) == KL_OK && kl_name_check(NULL, r->queue, NULL) == KL_OK &&
           (r->lane == NULL || r->lane[0] == '\0' || (lane_allowed && kl_name_check(NULL, r->lane, NULL) == KL_OK));
}

/* The ref's checks, naming its fields under where. */
static kl_code ref_check(const char *where, const Keyload__V1__QueueLaneRef *r, bool lane_allowed, kl_err *err)
{
    char what[112]; /* where (at most 96 bytes) and ".database" */
    if (r == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, where, "%s is missing", where);
    kl_code rc;
    snprintf(what, sizeof what, "%s.tenant", where);
    if ((rc = kl_name_check(what, r->tenant, err)) != KL_OK)
        return rc;
    snprintf(what, sizeof what, "%s.database", where);
    if ((rc = kl_name_check(what, r->database, err)) != KL_OK)
        return rc;
    snprintf(what, sizeof what, "%s.queue", where);
    if ((rc = kl_name_check(what, r->queue, err)) != KL_OK)
        return rc;
    if (r->lane != NULL && r->lane[0] != '\0') {
        snprintf(what, sizeof what, "%s.lane", where);
        if (!lane_allowed)
            return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s is not used here; leave it empty", what);
        if ((rc = kl_name_check(what, r->lane, err)) != KL_OK)
            return rc;
    }
    return KL_OK;
}

/* The message's checks, naming its fields under where. */
static kl_code message_check(const char *where, const Keyload__V1__EnqueueMessage *m, kl_err *err)
{
    if (m == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, where, "%s.message is missing", where);
    if (m->n_headers > KL_MAP_ENTRIES_MAX || m->n_fields > KL_MAP_ENTRIES_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "headers",
                       "%s.message: at most %d headers and %d fields", where, KL_MAP_ENTRIES_MAX,
                       KL_MAP_ENTRIES_MAX);
    for (size_t i = 0; i < m->n_headers; i++) {
        const char *k = m->headers[i]->key;
        size_t kn = strlen(k);
        if (kn == 0 || kn > KL_NAME_LEN_MAX)
            return kl_fail(err, KL_INVALID_ARGUMENT, "headers.key",
                           "%s.message.headers[%zu].key must be 1..%d bytes", where, i, KL_NAME_LEN_MAX);
        if (strlen(m->headers[i]->value) > KL_HEADER_VALUE_MAX)
            return kl_fail(err, KL_INVALID_ARGUMENT, "headers.value",
                           "%s.message.headers[%zu].value is over %d bytes", where, i, KL_HEADER_VALUE_MAX);
        for (size_t j = 0; j < i; j++)
            if (strcmp(m->headers[j]->key, k) == 0)
                return kl_fail(err, KL_INVALID_ARGUMENT, "headers.key",
                               "%s.message.headers[%zu].key repeats headers[%zu].key", where, i, j);
    }
    for (size_t i = 0; i < m->n_fields; i++) {
        const char *k = m->fields[i]->key;
        size_t kn = strlen(k);
        if (kn == 0 || kn > KL_NAME_LEN_MAX)
            return kl_fail(err, KL_INVALID_ARGUMENT, "fields.key",
                           "%s.message.fields[%zu].key must be 1..%d bytes", where, i, KL_NAME_LEN_MAX);
        if (m->fields[i]->value == NULL ||
            m->fields[i]->value->kind_case == KEYLOAD__V1__FIELD_VALUE__KIND__NOT_SET)
            return kl_fail(err, KL_INVALID_ARGUMENT, "fields.value",
                           "%s.message.fields[%zu].value has no type", where, i);
        for (size_t j = 0; j < i; j++)
            if (strcmp(m->fields[j]->key, k) == 0)
                return kl_fail(err, KL_INVALID_ARGUMENT, "fields.key",
                               "%s.message.fields[%zu].key repeats fields[%zu].key", where, i, j);
    }
    if (m->expires_at_unix_ms < 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "expires_at_unix_ms",
                       "%s.message.expires_at_unix_ms must not be negative", where);
    if (m->delay_ms < 0 || m->delay_ms > KL_DELAY_MS_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "delay_ms",
                       "%s.message.delay_ms must be 0..%lld", where, (long long)KL_DELAY_MS_MAX);
    return KL_OK;
}

/* The tokens' checks, naming them under where. */
static kl_code tokens_check(const char *where, size_t n, const ProtobufCBinaryData *t, kl_err *err)
{
    if (n == 0 || n > KL_RECEIVE_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "lease_tokens", "%s.lease_tokens must hold 1..%d tokens",
                       where, KL_RECEIVE_MAX);
    for (size_t i = 0; i < n; i++)
        if (t[i].len != 16)
            return kl_fail(err, KL_INVALID_ARGUMENT, "lease_tokens",
                           "%s.lease_tokens[%zu] is not a 16-byte lease token", where, i);
    return KL_OK;
}

/* Every request passes through these: a field's path ("mutations[i].kind.field") is
 * formatted only for a refusal. The checks run once with no err, which formats nothing, and
 * again with the path only when they refuse. */
kl_code kl_validate_ref(size_t idx, const char *kind, const char *field, const Keyload__V1__QueueLaneRef *r,
                        bool lane_allowed, kl_err *err)
{
    if (ref_names_ok(r, lane_allowed))
        return KL_OK;
    char where[96];
    snprintf(where, sizeof where, "mutations[%zu].%s.%s", idx, kind, field);
    return ref_check(where, r, lane_allowed, err);
}

kl_code kl_validate_message(size_t idx, const char *kind, const Keyload__V1__EnqueueMessage *m, kl_err *err)
{
    if (message_check("", m, NULL) == KL_OK)
        return KL_OK;
    char where[96];
    snprintf(where, sizeof where, "mutations[%zu].%s", idx, kind);
    return message_check(where, m, err);
}

kl_code kl_validate_tokens(size_t idx, const char *kind, size_t n, const ProtobufCBinaryData *t, kl_err *err)
{
    if (tokens_check("", n, t, NULL) == KL_OK)
        return KL_OK;
    char where[96];
    snprintf(where, sizeof where, "mutations[%zu].%s", idx, kind);
    return tokens_check(where, n, t, err);
}

kl_code kl_validate_transfer_id(size_t idx, const char *what, const ProtobufCBinaryData *id, kl_err *err)
{
    if (!kl_guid_valid(id->data, id->len))
        return kl_fail(err, KL_INVALID_ARGUMENT, "transfer_id",
                       "mutations[%zu].%s.transfer_id must be a 16-byte GUID that is not all zero",
                       idx, what);
    return KL_OK;
}
