/* principal: principal management and database limits (ARCHITECTURE.md "Engine"), the batch builders
 * and the one-call forms (client/keyload.h "principals"), plus ShowPrincipal.
 *
 * The builders check only the shape of what they send, so that a user gets an error naming
 * the field before anything goes out; the daemon checks again (daemon/engine/authz.c
 * kl_authz_validate_grant), and decides who may do what. Tenant and database are left
 * empty here and stamped from the client's database when the batch is encoded (encode.c),
 * as queue refs are. */
#include "client/sdk/internal.h"
#include "common/grants.h"
#include "common/guid.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define METHOD_SHOW_PRINCIPAL "keyload.v1.ShowPrincipal"
#define METHOD_LIST_CATALOG "keyload.v1.ListCatalog"

/* ---------------------------------------------------------------- names */

static const char *const role_names[] = {
    [KL_ROLE_NONE] = "none",
    [KL_ROLE_DATABASE_ADMIN] = "database-admin",
    [KL_ROLE_CLUSTER_ADMIN] = "cluster-admin",
};
#define ROLE_COUNT ((int)(sizeof role_names / sizeof role_names[0]))

kl_code kl_role_parse(const char *text, kl_role *out, kl_err *err)
{
    for (int i = 0; text != NULL && i < ROLE_COUNT; i++)
        if (strcmp(text, role_names[i]) == 0) {
            *out = (kl_role)i;
            return KL_OK;
        }
    return kl_fail(err, KL_INVALID_ARGUMENT, "role",
                   "role must be database-admin, cluster-admin or none");
}

const char *kl_role_name(kl_role role)
{
    return (int)role >= 0 && (int)role < ROLE_COUNT ? role_names[role] : "unknown";
}

/* Names and the pattern rule are common/grants.h, the daemon's own. */
kl_code kl_permission_parse(const char *text, Keyload__V1__Permission *out, kl_err *err)
{
    Keyload__V1__Permission p = kl_grants_permission_parse(text);
    if (p == KEYLOAD__V1__PERMISSION__PERMISSION_UNSPECIFIED)
        return kl_fail(err, KL_INVALID_ARGUMENT, "permission",
                       "permission must be one of QueuePublish, QueueConsume, QueueAck, "
                       "QueueInspect, Query");
    *out = p;
    return KL_OK;
}

const char *kl_permission_name(Keyload__V1__Permission p) { return kl_grants_permission_name(p); }

static kl_code check_permission(Keyload__V1__Permission p, kl_err *err)
{
    if (!kl_grants_permission_known(p))
        return kl_fail(err, KL_INVALID_ARGUMENT, "permission",
                       "permission %d is not one of QueuePublish, QueueConsume, QueueAck, "
                       "QueueInspect, Query", (int)p);
    return KL_OK;
}

kl_code kl_queue_pattern_check(const char *what, const char *pattern, kl_err *err)
{
    return kl_grants_pattern_check(what, pattern, err);
}

/* ---------------------------------------------------------------- key lists */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Checks keys[0..n) as one list (entries, "*" alone, the count, no duplicates) and returns
 * a sorted, owned copy in *out. */
static kl_code list_copy(const char *what, const char *const *keys, size_t n, kl_key_list *out,
                         kl_err *err)
{
    memset(out, 0, sizeof *out);
    if (n > KL_KEY_LIST_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s holds %zu keys; the limit is %d",
                       what, n, KL_KEY_LIST_MAX);
    if (n > 0 && keys == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s is NULL but has %zu keys", what, n);
    for (size_t i = 0; i < n; i++) {
        if (keys[i] != NULL && strcmp(keys[i], "*") == 0) {
            if (n != 1)
                return kl_fail(err, KL_INVALID_ARGUMENT, what,
                               "%s: \"*\" (every key) must be the only entry", what);
            continue;
        }
        char where[64];
        snprintf(where, sizeof where, "%s entry %zu", what, i + 1);
        kl_err e;
        if (kl_sdk_check_name(where, keys[i], KL_SDK_NAME_QUEUE, &e) != KL_OK)
            return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s", e.message);
    }
    if (n == 0)
        return KL_OK;
    out->keys = calloc(n, sizeof *out->keys);
    if (out->keys == NULL)
        return kl_sdk_oom(err);
    for (; out->n < n; out->n++)
        if ((out->keys[out->n] = strdup(keys[out->n])) == NULL) {
            kl_key_list_clear(out);
            return kl_sdk_oom(err);
        }
    qsort(out->keys, out->n, sizeof *out->keys, cmp_str);
    for (size_t i = 1; i < out->n; i++)
        if (strcmp(out->keys[i - 1], out->keys[i]) == 0) {
            kl_code rc = kl_fail(err, KL_INVALID_ARGUMENT, what, "%s names '%s' twice", what,
                                 out->keys[i]);
            kl_key_list_clear(out);
            return rc;
        }
    return KL_OK;
}

kl_code kl_key_list_parse(const char *what, const char *text, kl_key_list *out, kl_err *err)
{
    memset(out, 0, sizeof *out);
    if (text == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s is missing", what);
    if (text[0] == '\0')
        return KL_OK; /* explicitly none */
    char *copy = strdup(text);
    size_t cap = 1;
    for (const char *p = text; *p; p++)
        cap += *p == ',';
    const char **parts = calloc(cap, sizeof *parts);
    if (copy == NULL || parts == NULL) {
        free(copy);
        free(parts);
        return kl_sdk_oom(err);
    }
    size_t n = 0;
    kl_code rc = KL_OK;
    for (char *s = copy;;) {
        char *comma = strchr(s, ',');
        if (comma != NULL)
            *comma = '\0';
        if (*s == '\0') {
            rc = kl_fail(err, KL_INVALID_ARGUMENT, what,
                         "%s entry %zu is empty (write the keys as a,b,c)", what, n + 1);
            break;
        }
        parts[n++] = s;
        if (comma == NULL)
            break;
        s = comma + 1;
    }
    if (rc == KL_OK)
        rc = list_copy(what, parts, n, out, err);
    free(parts);
    free(copy);
    return rc;
}

void kl_key_list_clear(kl_key_list *l)
{
    if (l == NULL)
        return;
    for (size_t i = 0; i < l->n; i++)
        free(l->keys[i]);
    free(l->keys);
    l->keys = NULL;
    l->n = 0;
}

/* ---------------------------------------------------------------- builders */

static kl_code check_principal(const char *principal_id, kl_err *err)
{
    return kl_sdk_check_name("principal_id", principal_id, KL_SDK_NAME_DB_PART, err);
}

static kl_code check_public_key(const uint8_t *public_key, kl_err *err)
{
    if (public_key == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "public_key",
                       "public_key (32-byte Ed25519) is missing");
    return KL_OK;
}

kl_code kl_batch_create_principal(kl_batch *b, const char *principal_id,
                                  const uint8_t public_key[32], kl_role role, kl_err *err)
{
    kl_code rc = check_principal(principal_id, err);
    if (rc == KL_OK)
        rc = check_public_key(public_key, err);
    if (rc == KL_OK && (int)role != KL_ROLE_NONE && (int)role != KL_ROLE_DATABASE_ADMIN &&
        (int)role != KL_ROLE_CLUSTER_ADMIN)
        rc = kl_fail(err, KL_INVALID_ARGUMENT, "role", "role %d is not a kl_role", (int)role);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__CreatePrincipal cp = KEYLOAD__V1__CREATE_PRINCIPAL__INIT;
    cp.principal_id = (char *)principal_id;
    cp.public_key.data = (uint8_t *)public_key;
    cp.public_key.len = 32;
    cp.cluster_admin = role == KL_ROLE_CLUSTER_ADMIN;
    cp.database_admin = role == KL_ROLE_DATABASE_ADMIN; /* database: stamped at encoding */
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_PRINCIPAL;
    m.create_principal = &cp;
    return kl_sdk_batch_add(b, &m, err);
}

kl_code kl_batch_grant(kl_batch *b, const char *principal_id, const kl_grant *grant, kl_err *err)
{
    kl_code rc = check_principal(principal_id, err);
    if (rc != KL_OK)
        return rc;
    if (grant == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "grant", "grant is missing");
    if ((rc = check_permission(grant->permission, err)) != KL_OK ||
        (rc = kl_queue_pattern_check("queue_pattern", grant->queue_pattern, err)) != KL_OK)
        return rc;
    if (grant->permission == KEYLOAD__V1__PERMISSION__QUEUE_ACK &&
        (grant->n_fields > 0 || grant->n_headers > 0))
        return kl_fail(err, KL_INVALID_ARGUMENT, grant->n_fields > 0 ? "fields" : "headers",
                       "a QueueAck grant carries no fields or headers (ack and release neither "
                       "write nor read message content)");
    kl_key_list fields, headers;
    if ((rc = list_copy("fields", grant->fields, grant->n_fields, &fields, err)) != KL_OK)
        return rc;
    if ((rc = list_copy("headers", grant->headers, grant->n_headers, &headers, err)) != KL_OK) {
        kl_key_list_clear(&fields);
        return rc;
    }
    Keyload__V1__Grant g = KEYLOAD__V1__GRANT__INIT;
    g.permission = grant->permission;
    g.queue_pattern = (char *)grant->queue_pattern;
    g.n_fields = fields.n;
    g.fields = fields.keys;
    g.n_headers = headers.n;
    g.headers = headers.keys;
    Keyload__V1__GrantPermission gp = KEYLOAD__V1__GRANT_PERMISSION__INIT;
    gp.principal_id = (char *)principal_id;
    gp.grant = &g;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_GRANT_PERMISSION;
    m.grant_permission = &gp;
    rc = kl_sdk_batch_add(b, &m, err);
    kl_key_list_clear(&fields);
    kl_key_list_clear(&headers);
    return rc;
}

kl_code kl_batch_revoke(kl_batch *b, const char *principal_id, Keyload__V1__Permission permission,
                        const char *queue_pattern, kl_err *err)
{
    kl_code rc = check_principal(principal_id, err);
    if (rc == KL_OK)
        rc = check_permission(permission, err);
    if (rc == KL_OK)
        rc = kl_queue_pattern_check("queue_pattern", queue_pattern, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__RevokePermission rp = KEYLOAD__V1__REVOKE_PERMISSION__INIT;
    rp.principal_id = (char *)principal_id;
    rp.permission = permission;
    rp.queue_pattern = (char *)queue_pattern;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_REVOKE_PERMISSION;
    m.revoke_permission = &rp;
    return kl_sdk_batch_add(b, &m, err);
}

kl_code kl_batch_set_principal_key(kl_batch *b, const char *principal_id,
                                   const uint8_t public_key[32], kl_err *err)
{
    kl_code rc = check_principal(principal_id, err);
    if (rc == KL_OK)
        rc = check_public_key(public_key, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__SetPrincipalKey sk = KEYLOAD__V1__SET_PRINCIPAL_KEY__INIT;
    sk.principal_id = (char *)principal_id;
    sk.public_key.data = (uint8_t *)public_key;
    sk.public_key.len = 32;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_SET_PRINCIPAL_KEY;
    m.set_principal_key = &sk;
    return kl_sdk_batch_add(b, &m, err);
}

static kl_code limits_mutation(kl_batch *b, const kl_database_limits *limits, uint32_t fields, kl_err *err);
static kl_code limits_call(kl_client *c, const char *command_id, const kl_database_limits *limits,
                           uint32_t fields, kl_limits_result *out, kl_receipt **receipt, kl_err *err);

kl_code kl_batch_set_database_limits(kl_batch *b, const kl_database_limits *limits, kl_err *err)
{
    return limits_mutation(b, limits, 0, err);
}

kl_code kl_batch_change_database_limits(kl_batch *b, const kl_database_limits *limits, uint32_t fields,
                                        kl_err *err)
{
    if (fields == 0 || (fields & ~(uint32_t)15) != 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "fields",
                       "fields must name at least one limit and only KL_DB_FIELD_* bits");
    return limits_mutation(b, limits, fields, err);
}

/* SetDatabaseLimits: fields 0 replaces every limit (the encoding it always had). */
static kl_code limits_mutation(kl_batch *b, const kl_database_limits *limits, uint32_t fields, kl_err *err)
{
    Keyload__V1__DatabaseLimits lim;
    Keyload__V1__NullableU64 attempts;
    kl_code rc = kl_sdk_limits_to_pb(limits, &lim, &attempts, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__SetDatabaseLimits sl = KEYLOAD__V1__SET_DATABASE_LIMITS__INIT;
    sl.limits = &lim; /* tenant and database: stamped at encoding */
    sl.fields = fields;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_SET_DATABASE_LIMITS;
    m.set_database_limits = &sl;
    return kl_sdk_batch_add(b, &m, err);
}

/* ---------------------------------------------------------------- calls */

void kl_command_id_new(char out[KL_COMMAND_ID_TEXT_LEN + 1])
{
    uint8_t id[KL_GUID_LEN];
    if (sodium_init() < 0)
        abort(); /* no CSPRNG: nothing here may go on with a predictable id */
    kl_guid_time_ordered_now(id);
    kl_guid_format(id, out);
}

/* Sends the one-mutation batch b (freed here, whatever happens) and returns its single
 * result of kind `kind`; *receipt (when wanted) gets the receipt, else it is freed. */
static kl_code send_one(kl_client *c, kl_batch *b, int kind, kl_receipt **keep,
                        const Keyload__V1__MutationResult **res, kl_receipt **receipt, kl_err *err)
{
    *keep = NULL;
    *res = NULL;
    if (receipt != NULL)
        *receipt = NULL;
    kl_receipt *r = NULL;
    kl_code rc = kl_client_batch(c, b, &r, err);
    kl_batch_free(b);
    if (rc != KL_OK)
        return rc;
    const Keyload__V1__BatchReceipt *d = r->decoded;
    if (d->n_results != 1 || (int)d->results[0]->kind_case != kind) {
        kl_receipt_free(r);
        return kl_fail(err, KL_INTERNAL, "receipt",
                       "the receipt holds %zu results, not the one this command expects",
                       d->n_results);
    }
    *res = d->results[0];
    *keep = r;
    return KL_OK;
}

/* Hands r to the caller when wanted, else frees it. */
static void give(kl_receipt *r, kl_receipt **receipt)
{
    if (receipt != NULL)
        *receipt = r;
    else
        kl_receipt_free(r);
}

/* A new batch under the caller's command id (required for these calls). */
static kl_code new_batch(const char *command_id, kl_batch **b, kl_err *err)
{
    *b = NULL;
    if (command_id == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "command_id",
                       "command_id is required (keep it to replay the call; kl_command_id_new "
                       "makes one)");
    return kl_batch_new(command_id, b, err);
}

/* Sends b (a principal change) and fills out from its PrincipalChanged. */
static kl_code principal_call(kl_client *c, kl_batch *b, kl_principal_result *out,
                              kl_receipt **receipt, kl_err *err)
{
    if (out != NULL)
        memset(out, 0, sizeof *out);
    kl_receipt *r;
    const Keyload__V1__MutationResult *res;
    kl_code rc = send_one(c, b, KEYLOAD__V1__MUTATION_RESULT__KIND_PRINCIPAL_CHANGED, &r, &res,
                          receipt, err);
    if (rc != KL_OK)
        return rc;
    const Keyload__V1__PrincipalChanged *pc = res->principal_changed;
    if (out != NULL) {
        snprintf(out->principal_id, sizeof out->principal_id, "%s",
                 pc->principal_id ? pc->principal_id : "");
        out->key_id_len = pc->key_id.len <= sizeof out->key_id ? pc->key_id.len : sizeof out->key_id;
        if (out->key_id_len > 0)
            memcpy(out->key_id, pc->key_id.data, out->key_id_len);
        out->policy_epoch = pc->policy_epoch;
        out->changed = pc->changed;
        out->catalog_version = pc->catalog_version;
    }
    give(r, receipt);
    return KL_OK;
}

kl_code kl_client_create_principal(kl_client *c, const char *command_id, const char *principal_id,
                                   const uint8_t public_key[32], kl_role role,
                                   kl_principal_result *out, kl_receipt **receipt, kl_err *err)
{
    kl_batch *b;
    kl_code rc = new_batch(command_id, &b, err);
    if (rc == KL_OK && (rc = kl_batch_create_principal(b, principal_id, public_key, role, err)) != KL_OK)
        kl_batch_free(b);
    return rc == KL_OK ? principal_call(c, b, out, receipt, err) : rc;
}

kl_code kl_client_grant(kl_client *c, const char *command_id, const char *principal_id,
                        const kl_grant *grant, kl_principal_result *out, kl_receipt **receipt,
                        kl_err *err)
{
    kl_batch *b;
    kl_code rc = new_batch(command_id, &b, err);
    if (rc == KL_OK && (rc = kl_batch_grant(b, principal_id, grant, err)) != KL_OK)
        kl_batch_free(b);
    return rc == KL_OK ? principal_call(c, b, out, receipt, err) : rc;
}

kl_code kl_client_revoke(kl_client *c, const char *command_id, const char *principal_id,
                         Keyload__V1__Permission permission, const char *queue_pattern,
                         kl_principal_result *out, kl_receipt **receipt, kl_err *err)
{
    kl_batch *b;
    kl_code rc = new_batch(command_id, &b, err);
    if (rc == KL_OK &&
        (rc = kl_batch_revoke(b, principal_id, permission, queue_pattern, err)) != KL_OK)
        kl_batch_free(b);
    return rc == KL_OK ? principal_call(c, b, out, receipt, err) : rc;
}

kl_code kl_client_set_principal_key(kl_client *c, const char *command_id,
                                    const char *principal_id, const uint8_t public_key[32],
                                    kl_principal_result *out, kl_receipt **receipt, kl_err *err)
{
    kl_batch *b;
    kl_code rc = new_batch(command_id, &b, err);
    if (rc == KL_OK && (rc = kl_batch_set_principal_key(b, principal_id, public_key, err)) != KL_OK)
        kl_batch_free(b);
    return rc == KL_OK ? principal_call(c, b, out, receipt, err) : rc;
}

kl_code kl_client_set_database_limits(kl_client *c, const char *command_id,
                                      const kl_database_limits *limits, kl_limits_result *out,
                                      kl_receipt **receipt, kl_err *err)
{
    return limits_call(c, command_id, limits, 0, out, receipt, err);
}

kl_code kl_client_change_database_limits(kl_client *c, const char *command_id,
                                         const kl_database_limits *limits, uint32_t fields,
                                         kl_limits_result *out, kl_receipt **receipt, kl_err *err)
{
    if (fields == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "fields", "fields must name at least one limit");
    return limits_call(c, command_id, limits, fields, out, receipt, err);
}

static kl_code limits_call(kl_client *c, const char *command_id, const kl_database_limits *limits,
                           uint32_t fields, kl_limits_result *out, kl_receipt **receipt, kl_err *err)
{
    if (out != NULL)
        memset(out, 0, sizeof *out);
    kl_batch *b;
    kl_code rc = new_batch(command_id, &b, err);
    if (rc == KL_OK && (rc = limits_mutation(b, limits, fields, err)) != KL_OK)
        kl_batch_free(b);
    if (rc != KL_OK)
        return rc;
    kl_receipt *r;
    const Keyload__V1__MutationResult *res;
    rc = send_one(c, b, KEYLOAD__V1__MUTATION_RESULT__KIND_DATABASE_LIMITS_SET, &r, &res, receipt,
                  err);
    if (rc != KL_OK)
        return rc;
    const Keyload__V1__DatabaseLimitsSet *ls = res->database_limits_set;
    if (out != NULL) {
        const Keyload__V1__DatabaseLimits *l = ls->limits;
        if (l != NULL) {
            out->limits.max_scan_records = l->max_scan_records;
            out->limits.max_batch_bytes = l->max_batch_bytes;
            out->limits.max_query_read_bytes = l->max_query_read_bytes;
            out->limits.has_max_queue_transfer_accept_attempts =
                l->max_queue_transfer_accept_attempts != NULL;
            if (l->max_queue_transfer_accept_attempts != NULL)
                out->limits.max_queue_transfer_accept_attempts =
                    l->max_queue_transfer_accept_attempts->value;
        }
        out->catalog_version = ls->catalog_version;
    }
    give(r, receipt);
    return KL_OK;
}

static kl_code dec_show_principal(const uint8_t *ans, size_t len, void *out, kl_err *err)
{
    Keyload__V1__ShowPrincipalAnswer **o = out;
    *o = keyload__v1__show_principal_answer__unpack(NULL, len, ans);
    if (*o == NULL || (*o)->principal == NULL) {
        kl_principal_answer_free(*o);
        *o = NULL;
        return kl_fail(err, KL_INTERNAL, "answer",
                       "the answer does not decode as keyload.v1.ShowPrincipalAnswer");
    }
    return KL_OK;
}

static kl_code show_principal(kl_client *c, const char *principal_id,
                              Keyload__V1__ShowPrincipalAnswer **out, const kl_sdk_async *as,
                              kl_err *err)
{
    *out = NULL;
    kl_code rc = check_principal(principal_id, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__ShowPrincipalRequest sr = KEYLOAD__V1__SHOW_PRINCIPAL_REQUEST__INIT;
    sr.principal_id = (char *)principal_id;
    uint8_t req[2 * KL_SDK_NAME_MAX];
    size_t len = keyload__v1__show_principal_request__get_packed_size(&sr);
    if (len > sizeof req)
        return kl_fail(err, KL_INVALID_ARGUMENT, "principal_id", "principal_id is too long");
    keyload__v1__show_principal_request__pack(&sr, req);
    return kl_sdk_read(c, NULL, 0, METHOD_SHOW_PRINCIPAL, req, len, dec_show_principal, out, as,
                       err);
}

kl_code kl_client_show_principal(kl_client *c, const char *principal_id,
                                 Keyload__V1__ShowPrincipalAnswer **out, kl_err *err)
{
    return show_principal(c, principal_id, out, NULL, err);
}

kl_code kl_client_show_principal_start(kl_client *c, const char *principal_id,
                                       Keyload__V1__ShowPrincipalAnswer **out,
                                       kl_call_done_fn done, void *arg, kl_call **call,
                                       kl_err *err)
{
    kl_sdk_async as = {.done = done, .arg = arg, .call = call};
    return show_principal(c, principal_id, out, &as, err);
}

void kl_principal_answer_free(Keyload__V1__ShowPrincipalAnswer *a)
{
    if (a != NULL)
        keyload__v1__show_principal_answer__free_unpacked(a, NULL);
}

kl_code kl_client_list_catalog(kl_client *c, Keyload__V1__CatalogListKind kind, const char *database,
                               const uint8_t *cursor, size_t cursor_len, uint32_t max,
                               Keyload__V1__ListCatalogAnswer **out, kl_err *err)
{
    *out = NULL;
    char tenant[KL_SDK_NAME_MAX + 1], db[KL_SDK_NAME_MAX + 1];
    const char *which = database != NULL ? database : kl_client_database(c);
    kl_code rc = kl_sdk_split_database(which, tenant, db, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__ListCatalogRequest lr = KEYLOAD__V1__LIST_CATALOG_REQUEST__INIT;
    lr.kind = kind;
    lr.tenant = tenant;
    /* A database list names one database only when asked for one. */
    lr.database = kind == KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_DATABASES && database == NULL ? "" : db;
    lr.cursor.data = (uint8_t *)cursor;
    lr.cursor.len = cursor != NULL ? cursor_len : 0;
    lr.max = max;
    size_t len = keyload__v1__list_catalog_request__get_packed_size(&lr);
    uint8_t *req = malloc(len ? len : 1);
    if (req == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    keyload__v1__list_catalog_request__pack(&lr, req);
    uint8_t *ans;
    size_t ans_len;
    rc = kl_sdk_catalog_read(c, METHOD_LIST_CATALOG, req, len, &ans, &ans_len, err);
    free(req);
    if (rc != KL_OK)
        return rc;
    *out = keyload__v1__list_catalog_answer__unpack(NULL, ans_len, ans);
    free(ans);
    if (*out == NULL)
        return kl_fail(err, KL_INTERNAL, "answer", "the answer does not decode as keyload.v1.ListCatalogAnswer");
    return KL_OK;
}

void kl_catalog_list_free(Keyload__V1__ListCatalogAnswer *a)
{
    if (a != NULL)
        keyload__v1__list_catalog_answer__free_unpacked(a, NULL);
}
