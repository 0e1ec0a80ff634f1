#include "daemon/engine/catalog.h"
#include "daemon/engine/record.h"
#include "daemon/engine/queue.h"

#include "common/canon.h"
#include "common/keys.h"
#include "daemon/engine/access.h"
#include "daemon/engine/authz.h"
#include "daemon/engine/kind.h"
#include "daemon/engine/validate.h"
#include "daemon/store/keys.h"

#include <sodium.h>

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kl_code kl_catalog_version(kl_view *v, uint64_t *out, kl_err *err)
{
    return kl_view_get_meta_u64(v, "catalog_version", out, err);
}

/* ---- applying items (both sides) ---- */

kl_code kl_catalog_apply_item(kl_view *v, int partition, int64_t now_ms,
                              const Keyload__V1__CatalogItem *item, kl_err *err)
{
    (void)now_ms;
    kl_key k;
    kl_code rc;
    switch (item->kind_case) {
    case KEYLOAD__V1__CATALOG_ITEM__KIND_PUT_TENANT:
        kl_key_catalog_tenant(&k, item->put_tenant->tenant);
        return kl_view_put_msg(v, k.b, k.len, &item->put_tenant->base, err);
    case KEYLOAD__V1__CATALOG_ITEM__KIND_PUT_PRINCIPAL: {
        const Keyload__V1__CatalogPrincipal *p = item->put_principal;
        kl_key_catalog_principal(&k, p->tenant, p->principal_id);
        if ((rc = kl_view_put_msg(v, k.b, k.len, &p->base, err)) != KL_OK)
            return rc;
        /* The id -> tenant index (daemon/store/keys.h), on every partition's copy. */
        kl_key_catalog_principal_index(&k, p->principal_id);
        return kl_view_put(v, k.b, k.len, (const uint8_t *)p->tenant, strlen(p->tenant), err);
    }
    case KEYLOAD__V1__CATALOG_ITEM__KIND_PUT_MEMBER_KEY:
        kl_key_catalog_member_key(&k, item->put_member_key->partition, item->put_member_key->member);
        return kl_view_put_msg(v, k.b, k.len, &item->put_member_key->base, err);
    case KEYLOAD__V1__CATALOG_ITEM__KIND_PUT_DATABASE:
        kl_key_catalog_database(&k, item->put_database->tenant, item->put_database->database);
        return kl_view_put_msg(v, k.b, k.len, &item->put_database->base, err);
    case KEYLOAD__V1__CATALOG_ITEM__KIND_PUT_QUEUE: {
        const Keyload__V1__CatalogQueue *q = item->put_queue;
        kl_key_catalog_queue(&k, q->tenant, q->database, q->queue);
        if ((rc = kl_view_put_msg(v, k.b, k.len, &q->base, err)) != KL_OK)
            return rc;
        return q->partition == partition ? kl_queue_create_local(v, q, err) : KL_OK;
    }
    case KEYLOAD__V1__CATALOG_ITEM__KIND_DROP_QUEUE: {
        const Keyload__V1__CatalogQueue *q = item->drop_queue;
        kl_key_catalog_queue(&k, q->tenant, q->database, q->queue);
        if ((rc = kl_view_del(v, k.b, k.len, err)) != KL_OK)
            return rc;
        return q->partition == partition ? kl_queue_drop_local(v, q, err) : KL_OK;
    }
    default:
        return kl_fail(err, KL_INTERNAL, "catalog", "catalog change holds an item of unknown kind");
    }
}

static kl_code bump_counters(kl_view *v, uint64_t version, kl_err *err)
{
    uint64_t changes;
    kl_code rc = kl_view_get_meta_u64(v, "catalog_changes", &changes, err);
    if (rc == KL_OK)
        rc = kl_view_put_meta_u64(v, "catalog_version", version, err);
    if (rc == KL_OK)
        rc = kl_view_put_meta_u64(v, "catalog_changes", changes + 1, err);
    return rc;
}

kl_code kl_catalog_apply_change(kl_view *v, int partition, int64_t now_ms,
                                const Keyload__V1__CatalogChange *ch, kl_err *err)
{
    uint64_t cur;
    kl_code rc = kl_catalog_version(v, &cur, err);
    if (rc != KL_OK)
        return rc;
    if (ch->version != cur + 1)
        return kl_fail(err, KL_FAILED_PRECONDITION, "catalog_version",
                       "catalog change %llu does not follow the applied version %llu",
                       (unsigned long long)ch->version, (unsigned long long)cur);
    for (size_t i = 0; i < ch->n_items; i++)
        if ((rc = kl_catalog_apply_item(v, partition, now_ms, ch->items[i], err)) != KL_OK)
            return rc;
    return bump_counters(v, ch->version, err);
}

/* ---- partition 0: catalog mutations ---- */

static kl_code need_catalog(kl_eval_ctx *c, const char *what, kl_err *err)
{
    if (c->catalog != NULL)
        return KL_OK;
    return kl_fail(err, KL_FAILED_PRECONDITION, "catalog_partition",
                   "%s changes the catalog, which lives on partition 0; this is partition %d", what,
                   c->partition);
}

/* Applies the item here (partition 0's own records) and adds it to the batch's change. */
static kl_code record_item(kl_eval_ctx *c, const Keyload__V1__CatalogItem *item, kl_err *err)
{
    /* invariant I-ENG-9: catalog items are recorded only into partition 0's catalog batch (need_catalog) */
    assert(c->catalog != NULL);
    kl_code rc = kl_catalog_apply_item(c->view, c->partition, c->now_ms, item, err);
    if (rc != KL_OK)
        return rc;
    size_t n = keyload__v1__catalog_item__get_packed_size(item);
    uint8_t *b = malloc(n ? n : 1);
    if (b == NULL)
        return kl_record_oom(err);
    keyload__v1__catalog_item__pack(item, b);
    int bad = kl_buf_append_field(&c->catalog->items, (2 << 3) | 2, b, n);
    free(b);
    return bad ? kl_record_oom(err) : KL_OK;
}

kl_code kl_catalog_record_item(kl_eval_ctx *c, const Keyload__V1__CatalogItem *item, kl_err *err)
{
    return record_item(c, item, err);
}

static kl_code next_version(kl_eval_ctx *c, kl_err *err)
{
    if (c->catalog->version != 0)
        return KL_OK;
    uint64_t cur;
    kl_code rc = kl_catalog_version(c->view, &cur, err);
    if (rc == KL_OK)
        c->catalog->version = cur + 1;
    return rc;
}

kl_code kl_catalog_next_version(kl_eval_ctx *c, kl_err *err)
{
    return next_version(c, err);
}

static kl_code allocate(kl_view *v, const char *counter, uint64_t *out, kl_err *err)
{
    uint64_t next;
    kl_code rc = kl_view_get_meta_u64(v, counter, &next, err);
    if (rc != KL_OK)
        return rc;
    *out = next ? next : 1;
    return kl_view_put_meta_u64(v, counter, *out + 1, err);
}

static kl_code check_db_limit(const char *name, uint64_t asked, uint64_t cluster, kl_err *err)
{
    if (asked > cluster)
        return kl_fail(err, KL_INVALID_ARGUMENT, name,
                       "%s %llu is above the cluster's %llu; database limits may only tighten it",
                       name, (unsigned long long)asked, (unsigned long long)cluster);
    return KL_OK;
}

/* DatabaseLimits may only tighten the cluster's; MaxQueueTransferAcceptAttempts is null or
 * 1..MaxScanRecords (the database's when set, else the cluster's). */
static kl_code check_db_limits(const kl_eval_ctx *c, const Keyload__V1__DatabaseLimits *l, kl_err *err)
{
    kl_code rc;
    if (l == NULL)
        return KL_OK;
    if ((rc = check_db_limit("MaxScanRecords", l->max_scan_records, c->limits->max_scan_records, err)) != KL_OK ||
        (rc = check_db_limit("MaxBatchBytes", l->max_batch_bytes, c->limits->max_batch_bytes, err)) != KL_OK ||
        (rc = check_db_limit("MaxQueryReadBytes", l->max_query_read_bytes, c->limits->max_query_read_bytes,
                             err)) != KL_OK)
        return rc;
    if (l->max_queue_transfer_accept_attempts) {
        uint64_t attempts = l->max_queue_transfer_accept_attempts->value;
        uint64_t scan = l->max_scan_records ? l->max_scan_records : c->limits->max_scan_records;
        if (attempts == 0 || attempts > scan)
            return kl_fail(err, KL_INVALID_ARGUMENT, "MaxQueueTransferAcceptAttempts",
                           "MaxQueueTransferAcceptAttempts must be null or 1..MaxScanRecords (%llu)",
                           (unsigned long long)scan);
    }
    return KL_OK;
}

/* Buffers a new database's result points into (they outlive create_database). */
typedef struct db_made {
    Keyload__V1__DatabaseCreated dc;
    uint8_t incarnation[16];
    uint8_t pk[32];
    uint8_t key_id[KL_DATABASE_KEY_ID_LEN];
} db_made;

/* Creates database m (and its tenant when new) as one item of the catalog batch. */
static kl_code create_database(kl_eval_ctx *c, const Keyload__V1__CreateDatabase *m, db_made *out,
                               kl_err *err)
{
    kl_code rc = check_db_limits(c, m->limits, err);
    if (rc != KL_OK)
        return rc;
    const Keyload__V1__DatabaseLimits *l = m->limits;
    if (c->cluster_secret == NULL)
        return kl_fail(err, KL_FAILED_PRECONDITION, "cluster_secret",
                       "this member has no cluster secret, from which a database's signing key is "
                       "derived; start keyloadd with --cluster-secret FILE (deploy/keyload-cluster does)");
    Keyload__V1__CatalogDatabase *old;
    bool found;
    if ((rc = kl_catalog_get_database(c->view, m->tenant, m->database, &old, &found, err)) != KL_OK)
        return rc;
    if (found) {
        keyload__v1__catalog_database__free_unpacked(old, NULL);
        return kl_fail(err, KL_CONFLICT, "database_exists", "database %s/%s already exists",
                       m->tenant, m->database);
    }
    if ((rc = next_version(c, err)) != KL_OK)
        return rc;
    kl_key tk;
    kl_key_catalog_tenant(&tk, m->tenant);
    uint8_t *tv;
    size_t tn;
    if ((rc = kl_view_get(c->view, tk.b, tk.len, &tv, &tn, &found, err)) != KL_OK)
        return rc;
    free(tv);
    if (!found) {
        Keyload__V1__CatalogTenant t = KEYLOAD__V1__CATALOG_TENANT__INIT;
        t.tenant = m->tenant;
        t.created_unix_ms = c->now_ms;
        Keyload__V1__CatalogItem it = KEYLOAD__V1__CATALOG_ITEM__INIT;
        it.kind_case = KEYLOAD__V1__CATALOG_ITEM__KIND_PUT_TENANT;
        it.put_tenant = &t;
        if ((rc = record_item(c, &it, err)) != KL_OK)
            return rc;
    }
    Keyload__V1__DatabaseLimits lim = KEYLOAD__V1__DATABASE_LIMITS__INIT;
    Keyload__V1__NullableU64 attempts = KEYLOAD__V1__NULLABLE_U64__INIT;
    if (l) {
        lim.max_scan_records = l->max_scan_records;
        lim.max_batch_bytes = l->max_batch_bytes;
        lim.max_query_read_bytes = l->max_query_read_bytes;
        if (l->max_queue_transfer_accept_attempts) {
            attempts.value = l->max_queue_transfer_accept_attempts->value;
            lim.max_queue_transfer_accept_attempts = &attempts;
        }
    }
    uint8_t *inc = out->incarnation;
    c->random(inc, sizeof out->incarnation);
    Keyload__V1__CatalogDatabase d = KEYLOAD__V1__CATALOG_DATABASE__INIT;
    d.tenant = m->tenant;
    d.database = m->database;
    if ((rc = allocate(c->view, "next_database", &d.database_id, err)) != KL_OK)
        return rc;
    d.incarnation.data = inc;
    d.incarnation.len = sizeof out->incarnation;
    d.limits = &lim;
    /* Only the public half is kept; the secret half is derived again where it is used. */
    uint8_t sk[64];
    rc = kl_keys_database_signing(c->cluster_secret, d.database_id, out->pk, sk, out->key_id, err);
    sodium_memzero(sk, sizeof sk);
    if (rc != KL_OK)
        return rc;
    d.signing_public_key.data = out->pk;
    d.signing_public_key.len = sizeof out->pk;
    d.signing_key_id.data = out->key_id;
    d.signing_key_id.len = sizeof out->key_id;
    d.created_unix_ms = c->now_ms;
    d.version = c->catalog->version;
    Keyload__V1__CatalogItem it = KEYLOAD__V1__CATALOG_ITEM__INIT;
    it.kind_case = KEYLOAD__V1__CATALOG_ITEM__KIND_PUT_DATABASE;
    it.put_database = &d;
    if ((rc = record_item(c, &it, err)) != KL_OK)
        return rc;
    keyload__v1__database_created__init(&out->dc);
    out->dc.database_id = d.database_id;
    out->dc.incarnation = d.incarnation;
    out->dc.catalog_version = d.version;
    out->dc.signing_public_key = d.signing_public_key;
    out->dc.signing_key_id = d.signing_key_id;
    return KL_OK;
}

kl_code kl_catalog_eval_create_database(kl_eval_ctx *c, const Keyload__V1__CreateDatabase *m,
                                        kl_buf *results, kl_err *err)
{
    db_made made;
    kl_code rc = need_catalog(c, "create_database", err);
    if (rc == KL_OK)
        rc = create_database(c, m, &made, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__MutationResult res = KEYLOAD__V1__MUTATION_RESULT__INIT;
    res.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_DATABASE_CREATED;
    res.database_created = &made.dc;
    return kl_engine_add_result(results, &res, err);
}

/* ---- bootstrap and principals ---- */

/* CONFLICT "principal_exists" when principal_id names a principal of any tenant. */
static kl_code principal_id_free(kl_view *v, const char *principal_id, kl_err *err)
{
    kl_key k;
    kl_key_catalog_principal_index(&k, principal_id);
    uint8_t *val;
    size_t n;
    bool found;
    kl_code rc = kl_view_get(v, k.b, k.len, &val, &n, &found, err);
    if (rc != KL_OK)
        return rc;
    free(val);
    if (found)
        return kl_fail(err, KL_CONFLICT, "principal_exists",
                       "principal '%s' exists already (principal ids are unique across tenants)",
                       principal_id);
    return KL_OK;
}

/* Writes p as a PUT_PRINCIPAL item of this batch's catalog version. */
static kl_code put_principal(kl_eval_ctx *c, Keyload__V1__CatalogPrincipal *p, kl_err *err)
{
    kl_code rc = next_version(c, err);
    if (rc != KL_OK)
        return rc;
    p->version = c->catalog->version;
    Keyload__V1__CatalogItem it = KEYLOAD__V1__CATALOG_ITEM__INIT;
    it.kind_case = KEYLOAD__V1__CATALOG_ITEM__KIND_PUT_PRINCIPAL;
    it.put_principal = p;
    return record_item(c, &it, err);
}

/* A new principal's record without roles or grants, policy epoch 1 (fields borrow from the
 * arguments; key_id receives the key's id). */
static kl_code principal_new(kl_eval_ctx *c, char *id, char *tenant, const ProtobufCBinaryData *public_key,
                             uint8_t key_id[KL_KEY_ID_LEN], Keyload__V1__CatalogPrincipal *p, kl_err *err)
{
    if (kl_keys_key_id(public_key->data, key_id) != 0)
        return kl_record_oom(err);
    keyload__v1__catalog_principal__init(p);
    p->principal_id = id;
    p->tenant = tenant;
    p->public_key = *public_key;
    p->key_id.data = key_id;
    p->key_id.len = KL_KEY_ID_LEN;
    p->policy_epoch = 1;
    p->created_unix_ms = c->now_ms;
    return KL_OK;
}

kl_code kl_catalog_eval_bootstrap(kl_eval_ctx *c, const Keyload__V1__Bootstrap *m, kl_buf *results,
                                  kl_err *err)
{
    kl_code rc = need_catalog(c, "bootstrap", err);
    if (rc != KL_OK)
        return rc;
    if (c->cluster_secret == NULL)
        return kl_fail(err, KL_FAILED_PRECONDITION, "cluster_secret",
                       "this member has no cluster secret to check the bootstrap proof against; start "
                       "keyloadd with --cluster-secret FILE");
    uint8_t expect[KL_DIGEST_LEN];
    if (kl_canon_bootstrap_proof(c->cluster_secret, m->tenant, m->database, m->admin_id,
                                 m->admin_public_key.data, m->admin_public_key.len, expect) != 0)
        return kl_record_oom(err);
    bool proven = m->proof.len == KL_DIGEST_LEN && sodium_memcmp(expect, m->proof.data, KL_DIGEST_LEN) == 0;
    sodium_memzero(expect, sizeof expect);
    if (!proven)
        return kl_fail(err, KL_UNAUTHENTICATED, "bootstrap_proof",
                       "the bootstrap's proof of the cluster secret does not verify (wrong cluster "
                       "secret file?)");
    /* "local" is who every request without a session acts as (daemon/rpc/serve.h): a
     * principal of that name would share its command-id namespace and outcomes. */
    if (strcmp(m->admin_id, KL_CATALOG_RESERVED_PRINCIPAL) == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "admin_id",
                       "admin_id '%s' is reserved (requests without a session act as it)",
                       KL_CATALOG_RESERVED_PRINCIPAL);
    uint64_t admins;
    if ((rc = kl_view_get_meta_u64(c->view, "cluster_admins", &admins, err)) != KL_OK)
        return rc;
    if (admins > 0)
        return kl_fail(err, KL_FAILED_PRECONDITION, "bootstrap_done",
                       "a cluster administrator exists already; bootstrap works only before the first");
    if ((rc = principal_id_free(c->view, m->admin_id, err)) != KL_OK)
        return rc;
    Keyload__V1__CreateDatabase cd = KEYLOAD__V1__CREATE_DATABASE__INIT;
    cd.tenant = m->tenant;
    cd.database = m->database;
    db_made made;
    if ((rc = create_database(c, &cd, &made, err)) != KL_OK)
        return rc;
    uint8_t key_id[KL_KEY_ID_LEN];
    Keyload__V1__CatalogPrincipal p;
    if ((rc = principal_new(c, m->admin_id, m->tenant, &m->admin_public_key, key_id, &p, err)) != KL_OK)
        return rc;
    p.cluster_admin = true;
    if ((rc = put_principal(c, &p, err)) != KL_OK || (rc = kl_view_put_meta_u64(c->view, "cluster_admins", 1, err)) != KL_OK)
        return rc;
    Keyload__V1__Bootstrapped bs = KEYLOAD__V1__BOOTSTRAPPED__INIT;
    bs.database = &made.dc;
    bs.admin_id = m->admin_id;
    bs.admin_key_id = p.key_id;
    bs.policy_epoch = p.policy_epoch;
    bs.catalog_version = c->catalog->version;
    Keyload__V1__MutationResult res = KEYLOAD__V1__MUTATION_RESULT__INIT;
    res.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_BOOTSTRAPPED;
    res.bootstrapped = &bs;
    return kl_engine_add_result(results, &res, err);
}

static kl_code principal_result(kl_eval_ctx *c, const Keyload__V1__CatalogPrincipal *p, bool changed,
                                kl_buf *results, kl_err *err)
{
    Keyload__V1__PrincipalChanged pc = KEYLOAD__V1__PRINCIPAL_CHANGED__INIT;
    pc.principal_id = p->principal_id;
    pc.key_id = p->key_id;
    pc.policy_epoch = p->policy_epoch;
    pc.changed = changed;
    pc.catalog_version = changed ? c->catalog->version : 0;
    Keyload__V1__MutationResult res = KEYLOAD__V1__MUTATION_RESULT__INIT;
    res.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_PRINCIPAL_CHANGED;
    res.principal_changed = &pc;
    return kl_engine_add_result(results, &res, err);
}

/* NOT_FOUND "database" unless tenant/database exists. */
static kl_code database_exists(kl_eval_ctx *c, const char *tenant, const char *database, kl_err *err)
{
    Keyload__V1__CatalogDatabase *d;
    bool found;
    kl_code rc = kl_catalog_get_database(c->view, tenant, database, &d, &found, err);
    if (rc != KL_OK)
        return rc;
    if (!found)
        return kl_fail(err, KL_NOT_FOUND, "database", "database %s/%s does not exist", tenant, database);
    keyload__v1__catalog_database__free_unpacked(d, NULL);
    return KL_OK;
}

/* The principal a mutation changes, by id: NOT_FOUND "principal" when absent. */
static kl_code target_principal(kl_eval_ctx *c, const char *id, Keyload__V1__CatalogPrincipal **out,
                                kl_err *err)
{
    bool found;
    kl_code rc = kl_catalog_find_principal(c->view, id, out, &found, err);
    if (rc == KL_OK && !found)
        rc = kl_fail(err, KL_NOT_FOUND, "principal", "principal %s does not exist", id);
    return rc;
}

kl_code kl_catalog_eval_create_principal(kl_eval_ctx *c, const Keyload__V1__CreatePrincipal *m,
                                         kl_buf *results, kl_err *err)
{
    kl_code rc = need_catalog(c, "create_principal", err);
    if (rc != KL_OK)
        return rc;
    if (strcmp(m->principal_id, KL_CATALOG_RESERVED_PRINCIPAL) == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "principal_id",
                       "principal_id '%s' is reserved (requests without a session act as it)",
                       KL_CATALOG_RESERVED_PRINCIPAL);
    bool has_db = m->database != NULL && m->database[0] != '\0';
    if ((m->cluster_admin && m->database_admin) || m->database_admin != has_db)
        return kl_fail(err, KL_INVALID_ARGUMENT, "roles",
                       "a principal has at most one role, and a database administrator names exactly "
                       "its database");
    if ((rc = principal_id_free(c->view, m->principal_id, err)) != KL_OK)
        return rc;
    kl_key tk;
    kl_key_catalog_tenant(&tk, m->tenant);
    uint8_t *tv;
    size_t tn;
    bool found;
    if ((rc = kl_view_get(c->view, tk.b, tk.len, &tv, &tn, &found, err)) != KL_OK)
        return rc;
    free(tv);
    if (!found)
        return kl_fail(err, KL_NOT_FOUND, "tenant", "tenant %s does not exist", m->tenant);
    if (m->database_admin && (rc = database_exists(c, m->tenant, m->database, err)) != KL_OK)
        return rc;
    uint8_t key_id[KL_KEY_ID_LEN];
    Keyload__V1__CatalogPrincipal p;
    if ((rc = principal_new(c, m->principal_id, m->tenant, &m->public_key, key_id, &p, err)) != KL_OK)
        return rc;
    p.cluster_admin = m->cluster_admin;
    p.database_admin = m->database_admin;
    p.database = has_db ? m->database : "";
    if ((rc = put_principal(c, &p, err)) != KL_OK)
        return rc;
    if (m->cluster_admin) {
        uint64_t admins;
        if ((rc = kl_view_get_meta_u64(c->view, "cluster_admins", &admins, err)) != KL_OK ||
            (rc = kl_view_put_meta_u64(c->view, "cluster_admins", admins + 1, err)) != KL_OK)
            return rc;
    }
    return principal_result(c, &p, true, results, err);
}

/* Grant (revoke false) or revoke g on principal id: the target's stored record is read,
 * the granter's standing over it checked (authz.h kl_authz_can_grant), the record edited;
 * written only when it changed. A grant names a database that must exist. */
static kl_code change_grant(kl_eval_ctx *c, const char *id, const Keyload__V1__Grant *g, bool revoke,
                            kl_buf *results, kl_err *err)
{
    Keyload__V1__CatalogPrincipal *t = NULL;
    bool changed = false;
    kl_code rc = need_catalog(c, revoke ? "revoke" : "grant", err);
    if (rc == KL_OK)
        rc = target_principal(c, id, &t, err);
    if (rc == KL_OK && c->who != NULL)
        rc = kl_authz_can_grant(c->who, t, g, err);
    if (rc == KL_OK && !revoke)
        rc = database_exists(c, t->tenant, g->database, err);
    if (rc == KL_OK)
        rc = revoke ? kl_authz_revoke(t, g->database, g->permission, g->queue_pattern, &changed, err)
                    : kl_authz_apply_grant(t, g, &changed, err);
    if (rc == KL_OK && changed)
        rc = put_principal(c, t, err);
    if (rc == KL_OK)
        rc = principal_result(c, t, changed, results, err);
    if (t != NULL)
        keyload__v1__catalog_principal__free_unpacked(t, NULL);
    return rc;
}

kl_code kl_catalog_eval_grant(kl_eval_ctx *c, const Keyload__V1__GrantPermission *m, kl_buf *results,
                              kl_err *err)
{
    return change_grant(c, m->principal_id, m->grant, false, results, err);
}

kl_code kl_catalog_eval_revoke(kl_eval_ctx *c, const Keyload__V1__RevokePermission *m, kl_buf *results,
                               kl_err *err)
{
    Keyload__V1__Grant g = KEYLOAD__V1__GRANT__INIT;
    g.database = m->database;
    g.permission = m->permission;
    g.queue_pattern = m->queue_pattern;
    return change_grant(c, m->principal_id, &g, true, results, err);
}

/* Key rotation: the principal itself, or whoever may manage its roles. The policy epoch
 * stays (grants are unchanged); sessions of the old key end because they record its id. */
kl_code kl_catalog_eval_set_principal_key(kl_eval_ctx *c, const Keyload__V1__SetPrincipalKey *m,
                                          kl_buf *results, kl_err *err)
{
    Keyload__V1__CatalogPrincipal *t = NULL;
    kl_code rc = need_catalog(c, "set_principal_key", err);
    if (rc == KL_OK)
        rc = target_principal(c, m->principal_id, &t, err);
    if (rc != KL_OK)
        goto done;
    if (c->who != NULL && (c->who->principal == NULL ||
                           strcmp(c->who->principal->principal_id, t->principal_id) != 0)) {
        kl_authz_roles same = {.cluster_admin = t->cluster_admin, .database_admin = t->database_admin,
                               .database = t->database};
        if ((rc = kl_authz_can_set_roles(c->who, t, &same, err)) != KL_OK)
            goto done;
    }
    bool changed = t->public_key.len != m->public_key.len ||
                   memcmp(t->public_key.data, m->public_key.data, m->public_key.len) != 0;
    if (changed) {
        uint8_t *pk = malloc(m->public_key.len), *kid = malloc(KL_KEY_ID_LEN);
        if (pk == NULL || kid == NULL || kl_keys_key_id(m->public_key.data, kid) != 0) {
            free(pk);
            free(kid);
            rc = kl_record_oom(err);
            goto done;
        }
        memcpy(pk, m->public_key.data, m->public_key.len);
        free(t->public_key.data);
        free(t->key_id.data);
        t->public_key.data = pk;
        t->public_key.len = m->public_key.len;
        t->key_id.data = kid;
        t->key_id.len = KL_KEY_ID_LEN;
        rc = put_principal(c, t, err);
    }
    if (rc == KL_OK)
        rc = principal_result(c, t, changed, results, err);
done:
    if (t != NULL)
        keyload__v1__catalog_principal__free_unpacked(t, NULL);
    return rc;
}

void kl_catalog_merge_db_limits(const Keyload__V1__DatabaseLimits *stored,
                                const Keyload__V1__DatabaseLimits *req, uint32_t fields,
                                Keyload__V1__DatabaseLimits *out, Keyload__V1__NullableU64 *attempts)
{
    static const Keyload__V1__DatabaseLimits none = KEYLOAD__V1__DATABASE_LIMITS__INIT;
    const Keyload__V1__DatabaseLimits *s = stored != NULL ? stored : &none;
    const Keyload__V1__DatabaseLimits *r = req != NULL ? req : &none;
    if (fields == 0)
        fields = KL_CATALOG_FIELDS_ALL;
    keyload__v1__database_limits__init(out);
    keyload__v1__nullable_u64__init(attempts);
    out->max_scan_records = (fields & KL_CATALOG_FIELD_SCAN_RECORDS ? r : s)->max_scan_records;
    out->max_batch_bytes = (fields & KL_CATALOG_FIELD_BATCH_BYTES ? r : s)->max_batch_bytes;
    out->max_query_read_bytes = (fields & KL_CATALOG_FIELD_QUERY_READ_BYTES ? r : s)->max_query_read_bytes;
    const Keyload__V1__NullableU64 *a =
        (fields & KL_CATALOG_FIELD_ACCEPT_ATTEMPTS ? r : s)->max_queue_transfer_accept_attempts;
    if (a != NULL) {
        attempts->value = a->value;
        out->max_queue_transfer_accept_attempts = attempts;
    }
}

kl_code kl_catalog_eval_set_database_limits(kl_eval_ctx *c, const Keyload__V1__SetDatabaseLimits *m,
                                            kl_buf *results, kl_err *err)
{
    Keyload__V1__CatalogDatabase *d = NULL;
    bool found = false;
    Keyload__V1__DatabaseLimits merged;
    Keyload__V1__NullableU64 attempts;
    kl_code rc = need_catalog(c, "set_database_limits", err);
    if (rc == KL_OK && m->fields == 0)
        rc = check_db_limits(c, m->limits, err); /* a full replacement: refused as it always was */
    if (rc == KL_OK)
        rc = kl_catalog_get_database(c->view, m->tenant, m->database, &d, &found, err);
    if (rc == KL_OK && !found)
        rc = kl_fail(err, KL_NOT_FOUND, "database", "database %s/%s does not exist", m->tenant, m->database);
    /* Merged from the record this evaluation reads, never from what a client read earlier,
     * so a change of another limit committed in between stays; the result is what gets
     * checked (an accept-attempts limit against the MaxScanRecords it will live with). */
    if (rc == KL_OK) {
        kl_catalog_merge_db_limits(d->limits, m->limits, m->fields, &merged, &attempts);
        rc = check_db_limits(c, &merged, err);
    }
    if (rc == KL_OK)
        rc = next_version(c, err);
    if (rc != KL_OK)
        goto done;
    Keyload__V1__DatabaseLimits *stored = d->limits;
    uint64_t created = d->version;
    /* The record keeps the version that created it; the change carries the new one. */
    d->limits = &merged;
    Keyload__V1__CatalogItem it = KEYLOAD__V1__CATALOG_ITEM__INIT;
    it.kind_case = KEYLOAD__V1__CATALOG_ITEM__KIND_PUT_DATABASE;
    it.put_database = d;
    rc = record_item(c, &it, err);
    Keyload__V1__DatabaseLimitsSet set = KEYLOAD__V1__DATABASE_LIMITS_SET__INIT;
    set.limits = d->limits;
    set.catalog_version = c->catalog->version;
    Keyload__V1__MutationResult res = KEYLOAD__V1__MUTATION_RESULT__INIT;
    res.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_DATABASE_LIMITS_SET;
    res.database_limits_set = &set;
    if (rc == KL_OK)
        rc = kl_engine_add_result(results, &res, err);
    d->limits = stored;
    d->version = created;
done:
    if (d != NULL)
        keyload__v1__catalog_database__free_unpacked(d, NULL);
    return rc;
}

kl_code kl_catalog_eval_set_transfers_paused(kl_eval_ctx *c, const Keyload__V1__SetQueueTransfersPaused *m,
                                             kl_buf *results, kl_err *err)
{
    Keyload__V1__CatalogDatabase *d = NULL;
    bool found = false;
    kl_code rc = need_catalog(c, "set_queue_transfers_paused", err);
    if (rc == KL_OK)
        rc = kl_catalog_get_database(c->view, m->tenant, m->database, &d, &found, err);
    if (rc == KL_OK && !found)
        rc = kl_fail(err, KL_NOT_FOUND, "database", "database %s/%s does not exist", m->tenant, m->database);
    if (rc != KL_OK)
        goto done;
    Keyload__V1__TransfersPaused out = KEYLOAD__V1__TRANSFERS_PAUSED__INIT;
    out.paused = m->paused;
    out.changed = d->transfers_paused != m->paused;
    if (out.changed) {
        /* A real change is a catalog version, so it reaches every data partition (and the
         * barrier holds the answer until they applied it). */
        if ((rc = next_version(c, err)) != KL_OK)
            goto done;
        d->transfers_paused = m->paused;
        Keyload__V1__CatalogItem it = KEYLOAD__V1__CATALOG_ITEM__INIT;
        it.kind_case = KEYLOAD__V1__CATALOG_ITEM__KIND_PUT_DATABASE;
        it.put_database = d;
        if ((rc = record_item(c, &it, err)) != KL_OK)
            goto done;
        out.catalog_version = c->catalog->version;
    }
    Keyload__V1__MutationResult res = KEYLOAD__V1__MUTATION_RESULT__INIT;
    res.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFERS_PAUSED;
    res.transfers_paused = &out;
    rc = kl_engine_add_result(results, &res, err);
done:
    if (d != NULL)
        keyload__v1__catalog_database__free_unpacked(d, NULL);
    return rc;
}

/* Where a new queue goes: the dead-letter queue's partition when it has one (they must
 * share it), else the data partitions in turn by queue id. Partition 0 holds queues only
 * in a single-partition cluster or when pinned there. */
static int partition_count(const kl_eval_ctx *c) { return c->partition_count > 0 ? c->partition_count : 1; }

static int choose_partition(const kl_eval_ctx *c, uint64_t qid)
{
    if (partition_count(c) <= 1)
        return 0;
    return 1 + (int)((qid - 1) % (uint64_t)(partition_count(c) - 1));
}

kl_code kl_catalog_eval_create_queue(kl_eval_ctx *c, const Keyload__V1__CreateQueue *m,
                                     kl_buf *results, kl_err *err)
{
    kl_code rc = need_catalog(c, "create_queue", err);
    if (rc != KL_OK)
        return rc;
    const Keyload__V1__QueueLaneRef *r = m->queue;
    if (m->partition >= partition_count(c))
        return kl_fail(err, KL_INVALID_ARGUMENT, "partition",
                       "queue placement: partition %d does not exist (the cluster has %d)", m->partition,
                       partition_count(c));
    Keyload__V1__CatalogDatabase *db;
    bool found;
    if ((rc = kl_catalog_get_database(c->view, r->tenant, r->database, &db, &found, err)) != KL_OK)
        return rc;
    if (!found)
        return kl_fail(err, KL_NOT_FOUND, "database",
                       "database %s/%s does not exist; create it first", r->tenant, r->database);
    keyload__v1__catalog_database__free_unpacked(db, NULL);
    Keyload__V1__CatalogQueue *old;
    if ((rc = kl_catalog_get_queue(c->view, r->tenant, r->database, r->queue, &old, &found, err)) != KL_OK)
        return rc;
    if (found) {
        keyload__v1__catalog_queue__free_unpacked(old, NULL);
        return kl_fail(err, KL_CONFLICT, "queue_exists", "queue '%s' already exists in %s/%s",
                       r->queue, r->tenant, r->database);
    }
    int placement = m->partition;
    const char *dlq = m->limits ? m->limits->dead_letter_queue : "";
    if (dlq[0] != '\0') {
        if (strcmp(dlq, r->queue) == 0)
            return kl_fail(err, KL_INVALID_ARGUMENT, "dead_letter_queue",
                           "dead_letter_queue must name another queue");
        Keyload__V1__CatalogQueue *d;
        if ((rc = kl_catalog_get_queue(c->view, r->tenant, r->database, dlq, &d, &found, err)) != KL_OK)
            return rc;
        if (!found)
            return kl_fail(err, KL_NOT_FOUND, "dead_letter_queue",
                           "dead_letter_queue '%s' does not exist; create it first", dlq);
        int dp = d->partition;
        keyload__v1__catalog_queue__free_unpacked(d, NULL);
        if (placement >= 0 && placement != dp)
            return kl_fail(err, KL_FAILED_PRECONDITION, "dead_letter_queue",
                           "dead_letter_queue '%s' lives on partition %d, not %d; a dead-letter "
                           "queue must be on its queue's partition", dlq, dp, placement);
        placement = dp;
    }
    if ((rc = next_version(c, err)) != KL_OK)
        return rc;
    Keyload__V1__QueueLimits limits = KEYLOAD__V1__QUEUE_LIMITS__INIT;
    if (m->limits) { /* known fields only: the record never inherits request extras */
        limits.max_messages = m->limits->max_messages;
        limits.max_bytes = m->limits->max_bytes;
        limits.max_deliveries = m->limits->max_deliveries;
        limits.dead_letter_queue = m->limits->dead_letter_queue;
    }
    Keyload__V1__CatalogQueue q = KEYLOAD__V1__CATALOG_QUEUE__INIT;
    q.tenant = r->tenant;
    q.database = r->database;
    q.queue = r->queue;
    if ((rc = allocate(c->view, "next_queue", &q.queue_id, err)) != KL_OK)
        return rc;
    q.partition = placement >= 0 ? placement : choose_partition(c, q.queue_id);
    q.limits = &limits;
    q.version = c->catalog->version;
    q.created_unix_ms = c->now_ms;
    Keyload__V1__CatalogItem it = KEYLOAD__V1__CATALOG_ITEM__INIT;
    it.kind_case = KEYLOAD__V1__CATALOG_ITEM__KIND_PUT_QUEUE;
    it.put_queue = &q;
    if ((rc = record_item(c, &it, err)) != KL_OK)
        return rc;
    Keyload__V1__QueueCreated qc = KEYLOAD__V1__QUEUE_CREATED__INIT;
    qc.queue_id = q.queue_id;
    qc.partition = q.partition;
    qc.catalog_version = q.version;
    Keyload__V1__MutationResult res = KEYLOAD__V1__MUTATION_RESULT__INIT;
    res.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_QUEUE_CREATED;
    res.queue_created = &qc;
    return kl_engine_add_result(results, &res, err);
}

/* On the queue's partition: close it (step 1 of the SDK's delete). On partition 0: drop
 * the definition from the catalog (step 2), closing it first when it lives there too. */
kl_code kl_catalog_eval_delete_queue(kl_eval_ctx *c, const Keyload__V1__DeleteQueue *m, kl_buf *out,
                                     kl_err *err)
{
    const Keyload__V1__QueueLaneRef *r = m->queue;
    uint64_t qid;
    kl_code rc = KL_OK;
    if (c->catalog != NULL) {
        Keyload__V1__CatalogQueue *def;
        bool found;
        if ((rc = kl_catalog_get_queue(c->view, r->tenant, r->database, r->queue, &def, &found, err)) != KL_OK)
            return rc;
        if (!found)
            return kl_fail(err, KL_NOT_FOUND, "queue", "queue '%s' does not exist in %s/%s", r->queue,
                           r->tenant, r->database);
        if (def->partition == c->partition)
            rc = kl_queue_close_local(c, r, &qid, err);
        if (rc == KL_OK)
            rc = kl_catalog_eval_drop_queue(c, def, out, err);
        keyload__v1__catalog_queue__free_unpacked(def, NULL);
        return rc;
    }
    if ((rc = kl_queue_close_local(c, r, &qid, err)) != KL_OK)
        return rc;
    Keyload__V1__QueueDeleted qd = KEYLOAD__V1__QUEUE_DELETED__INIT;
    qd.queue_id = qid;
    Keyload__V1__MutationResult res = KEYLOAD__V1__MUTATION_RESULT__INIT;
    res.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_QUEUE_DELETED;
    res.queue_deleted = &qd;
    return kl_engine_add_result(out, &res, err);
}

kl_code kl_catalog_eval_drop_queue(kl_eval_ctx *c, const Keyload__V1__CatalogQueue *def,
                                   kl_buf *results, kl_err *err)
{
    kl_code rc = need_catalog(c, "delete_queue", err);
    if (rc != KL_OK || (rc = next_version(c, err)) != KL_OK)
        return rc;
    Keyload__V1__CatalogItem it = KEYLOAD__V1__CATALOG_ITEM__INIT;
    it.kind_case = KEYLOAD__V1__CATALOG_ITEM__KIND_DROP_QUEUE;
    it.drop_queue = (Keyload__V1__CatalogQueue *)def;
    if ((rc = record_item(c, &it, err)) != KL_OK)
        return rc;
    Keyload__V1__QueueDeleted qd = KEYLOAD__V1__QUEUE_DELETED__INIT;
    qd.queue_id = def->queue_id;
    qd.catalog_version = c->catalog->version;
    Keyload__V1__MutationResult res = KEYLOAD__V1__MUTATION_RESULT__INIT;
    res.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_QUEUE_DELETED;
    res.queue_deleted = &qd;
    return kl_engine_add_result(results, &res, err);
}

kl_code kl_catalog_finish(kl_eval_ctx *c, kl_err *err)
{
    if (c->catalog == NULL || c->catalog->version == 0)
        return KL_OK;
    Keyload__V1__CatalogChange head = KEYLOAD__V1__CATALOG_CHANGE__INIT;
    head.version = c->catalog->version;
    head.committed_unix_ms = c->now_ms;
    /* Field order: version (1), items (2), committed_unix_ms (3); packing the head gives
     * fields 1 and 3, and protobuf readers accept fields in any order. */
    size_t hn = keyload__v1__catalog_change__get_packed_size(&head);
    kl_buf b = {0};
    uint8_t hb[32];
    keyload__v1__catalog_change__pack(&head, hb);
    if (kl_buf_append(&b, hb, hn) || kl_buf_append(&b, c->catalog->items.p, c->catalog->items.len)) {
        kl_buf_free(&b);
        return kl_record_oom(err);
    }
    kl_key k;
    kl_key_catalog_change(&k, c->catalog->version);
    kl_code rc = kl_view_put(c->view, k.b, k.len, b.p, b.len, err);
    kl_buf_free(&b);
    if (rc != KL_OK)
        return rc;
    return bump_counters(c->view, c->catalog->version, err);
}

/* ==== the rows of the catalog kinds (daemon/engine/kind.h) ====
 * Each kind's shape checks, authorization, evaluation and database ref, and the
 * descriptor daemon/engine/mutation.c indexes by kind number. */

/* The changes_catalog column of the kinds that always change it. */
static bool catalog_always(const Keyload__V1__Mutation *m)
{
    (void)m;
    return true;
}

/* ---- CreateQueue ---- */

static kl_code validate_create_queue(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    if ((rc = kl_validate_ref(idx, "create_queue", "queue", m->create_queue->queue, false, err)) != KL_OK)
        return rc;
    if (m->create_queue->partition < -1)
        return kl_fail(err, KL_INVALID_ARGUMENT, "partition",
                       "mutations[%zu].create_queue.partition must be -1 (choose) or a partition id",
                       idx);
    if (m->create_queue->limits && m->create_queue->limits->dead_letter_queue[0] != '\0') {
        snprintf(where, sizeof where, "mutations[%zu].create_queue.limits.dead_letter_queue", idx);
        return kl_name_check(where, m->create_queue->limits->dead_letter_queue, err);
    }
    return KL_OK;
}

static kl_code access_create_queue(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    if (m->create_queue->queue == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "queue", "the mutation names no queue");
    return kl_authz_require_admin(who, m->create_queue->queue->tenant,
                                  m->create_queue->queue->database, err);
}

static kl_code eval_create_queue(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_catalog_eval_create_queue(c, m->create_queue, out, err);
}

static const Keyload__V1__QueueLaneRef *ref_create_queue(const Keyload__V1__Mutation *m) { return m->create_queue->queue; }

const kl_mutation_kind kl_catalog_kind_create_queue = {
    .validate = validate_create_queue,
    .access = access_create_queue,
    .canon = kl_canon_create_queue,
    .eval = eval_create_queue,
    .ref = ref_create_queue,
    .changes_catalog = catalog_always,
};

/* ---- DeleteQueue ---- */

static kl_code validate_delete_queue(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    return kl_validate_ref(idx, "delete_queue", "queue", m->delete_queue->queue, false, err);
}

static kl_code access_delete_queue(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    if (m->delete_queue->queue == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "queue", "the mutation names no queue");
    return kl_authz_require_admin(who, m->delete_queue->queue->tenant,
                                  m->delete_queue->queue->database, err);
}

static kl_code eval_delete_queue(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_catalog_eval_delete_queue(c, m->delete_queue, out, err);
}

static const Keyload__V1__QueueLaneRef *ref_delete_queue(const Keyload__V1__Mutation *m) { return m->delete_queue->queue; }

const kl_mutation_kind kl_catalog_kind_delete_queue = {
    .validate = validate_delete_queue,
    .access = access_delete_queue,
    .canon = kl_canon_delete_queue,
    .eval = eval_delete_queue,
    .ref = ref_delete_queue,
};

/* ---- CreateDatabase ---- */

static kl_code validate_create_database(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    snprintf(where, sizeof where, "mutations[%zu].create_database.tenant", idx);
    if ((rc = kl_name_check(where, m->create_database->tenant, err)) != KL_OK)
        return rc;
    snprintf(where, sizeof where, "mutations[%zu].create_database.database", idx);
    return kl_name_check(where, m->create_database->database, err);
}

static kl_code access_create_database(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    return kl_access_cluster_admin(who, m->create_database->tenant, err);
}

static kl_code eval_create_database(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_catalog_eval_create_database(c, m->create_database, out, err);
}

const kl_mutation_kind kl_catalog_kind_create_database = {
    .validate = validate_create_database,
    .access = access_create_database,
    .canon = kl_canon_create_database,
    .eval = eval_create_database,
    .changes_catalog = catalog_always,
};

/* ---- Bootstrap ---- */

static kl_code validate_bootstrap(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    const Keyload__V1__Bootstrap *b = m->bootstrap;
    snprintf(where, sizeof where, "mutations[%zu].bootstrap.tenant", idx);
    if ((rc = kl_name_check(where, b->tenant, err)) != KL_OK)
        return rc;
    snprintf(where, sizeof where, "mutations[%zu].bootstrap.database", idx);
    if ((rc = kl_name_check(where, b->database, err)) != KL_OK)
        return rc;
    snprintf(where, sizeof where, "mutations[%zu].bootstrap.admin_id", idx);
    if ((rc = kl_name_check(where, b->admin_id, err)) != KL_OK)
        return rc;
    if (b->admin_public_key.len != 32)
        return kl_fail(err, KL_INVALID_ARGUMENT, "admin_public_key",
                       "mutations[%zu].bootstrap.admin_public_key must be a 32-byte Ed25519 key", idx);
    if (b->proof.len != 32)
        return kl_fail(err, KL_INVALID_ARGUMENT, "proof", "mutations[%zu].bootstrap.proof must be 32 bytes",
                       idx);
    return KL_OK;
}

static kl_code access_bootstrap(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    (void)m;
    (void)who;
    (void)err;
    return KL_OK;
}

static kl_code eval_bootstrap(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_catalog_eval_bootstrap(c, m->bootstrap, out, err);
}

const kl_mutation_kind kl_catalog_kind_bootstrap = {
    .validate = validate_bootstrap,
    .access = access_bootstrap,
    .canon = kl_canon_bootstrap,
    .eval = eval_bootstrap,
    .changes_catalog = catalog_always,
};

/* ---- CreatePrincipal ---- */

static kl_code validate_create_principal(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    const Keyload__V1__CreatePrincipal *p = m->create_principal;
    snprintf(where, sizeof where, "mutations[%zu].create_principal.tenant", idx);
    if ((rc = kl_name_check(where, p->tenant, err)) != KL_OK)
        return rc;
    snprintf(where, sizeof where, "mutations[%zu].create_principal.principal_id", idx);
    if ((rc = kl_name_check(where, p->principal_id, err)) != KL_OK)
        return rc;
    if (p->public_key.len != 32)
        return kl_fail(err, KL_INVALID_ARGUMENT, "public_key",
                       "mutations[%zu].create_principal.public_key must be a 32-byte Ed25519 key", idx);
    return KL_OK; /* roles: kl_authz_set_roles checks their shape */
}

static kl_code access_create_principal(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    const Keyload__V1__CreatePrincipal *cp = m->create_principal;
    Keyload__V1__CatalogPrincipal target = KEYLOAD__V1__CATALOG_PRINCIPAL__INIT;
    target.tenant = cp->tenant;
    kl_authz_roles to = {.cluster_admin = cp->cluster_admin, .database_admin = cp->database_admin,
                         .database = cp->database};
    return kl_authz_can_set_roles(who, &target, &to, err);
}

static kl_code eval_create_principal(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_catalog_eval_create_principal(c, m->create_principal, out, err);
}

const kl_mutation_kind kl_catalog_kind_create_principal = {
    .validate = validate_create_principal,
    .access = access_create_principal,
    .canon = kl_canon_create_principal,
    .eval = eval_create_principal,
    .changes_catalog = catalog_always,
};

/* ---- GrantPermission ---- */

static kl_code validate_grant_permission(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    snprintf(where, sizeof where, "mutations[%zu].grant_permission.principal_id", idx);
    if ((rc = kl_name_check(where, m->grant_permission->principal_id, err)) != KL_OK)
        return rc;
    if (m->grant_permission->grant == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "grant", "mutations[%zu].grant_permission.grant is missing", idx);
    return kl_authz_validate_grant(m->grant_permission->grant, err);
}

static kl_code access_principal_change(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    (void)m;
    /* invariant I-ENG-10: a row's access check runs only for a subject read from the catalog */
    assert(who != NULL);
    /* Checked against the target's stored record, which catalog.c reads. */
    return kl_access_tenant(who, who->principal ? who->principal->tenant : NULL, err);
}

static kl_code eval_grant_permission(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_catalog_eval_grant(c, m->grant_permission, out, err);
}

const kl_mutation_kind kl_catalog_kind_grant_permission = {
    .validate = validate_grant_permission,
    .access = access_principal_change,
    .canon = kl_canon_grant_permission,
    .eval = eval_grant_permission,
    .changes_catalog = catalog_always,
};

/* ---- RevokePermission ---- */

static kl_code validate_revoke_permission(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    snprintf(where, sizeof where, "mutations[%zu].revoke_permission.principal_id", idx);
    if ((rc = kl_name_check(where, m->revoke_permission->principal_id, err)) != KL_OK)
        return rc;
    snprintf(where, sizeof where, "mutations[%zu].revoke_permission.database", idx);
    return kl_name_check(where, m->revoke_permission->database, err);
}

static kl_code eval_revoke_permission(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_catalog_eval_revoke(c, m->revoke_permission, out, err);
}

const kl_mutation_kind kl_catalog_kind_revoke_permission = {
    .validate = validate_revoke_permission,
    .access = access_principal_change,
    .canon = kl_canon_revoke_permission,
    .eval = eval_revoke_permission,
    .changes_catalog = catalog_always,
};

/* ---- SetPrincipalKey ---- */

static kl_code validate_set_principal_key(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    snprintf(where, sizeof where, "mutations[%zu].set_principal_key.principal_id", idx);
    if ((rc = kl_name_check(where, m->set_principal_key->principal_id, err)) != KL_OK)
        return rc;
    if (m->set_principal_key->public_key.len != 32)
        return kl_fail(err, KL_INVALID_ARGUMENT, "public_key",
                       "mutations[%zu].set_principal_key.public_key must be a 32-byte Ed25519 key", idx);
    return KL_OK;
}

static kl_code eval_set_principal_key(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_catalog_eval_set_principal_key(c, m->set_principal_key, out, err);
}

const kl_mutation_kind kl_catalog_kind_set_principal_key = {
    .validate = validate_set_principal_key,
    .access = access_principal_change,
    .canon = kl_canon_set_principal_key,
    .eval = eval_set_principal_key,
    .changes_catalog = catalog_always,
};

/* ---- SetDatabaseLimits ---- */

static kl_code validate_set_database_limits(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    snprintf(where, sizeof where, "mutations[%zu].set_database_limits.tenant", idx);
    if ((rc = kl_name_check(where, m->set_database_limits->tenant, err)) != KL_OK)
        return rc;
    snprintf(where, sizeof where, "mutations[%zu].set_database_limits.database", idx);
    if ((rc = kl_name_check(where, m->set_database_limits->database, err)) != KL_OK)
        return rc;
    if ((m->set_database_limits->fields & ~KL_CATALOG_FIELDS_ALL) != 0) {
        snprintf(where, sizeof where, "mutations[%zu].set_database_limits.fields", idx);
        return kl_fail(err, KL_INVALID_ARGUMENT, where,
                       "fields may only name limits 1 (MaxScanRecords), 2 (MaxBatchBytes), "
                       "4 (MaxQueryReadBytes) and 8 (MaxQueueTransferAcceptAttempts)");
    }
    return KL_OK;
}

static kl_code access_set_database_limits(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    return kl_authz_require_admin(who, m->set_database_limits->tenant,
                                  m->set_database_limits->database, err);
}

static kl_code eval_set_database_limits(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_catalog_eval_set_database_limits(c, m->set_database_limits, out, err);
}

const kl_mutation_kind kl_catalog_kind_set_database_limits = {
    .validate = validate_set_database_limits,
    .access = access_set_database_limits,
    .canon = kl_canon_set_database_limits,
    .eval = eval_set_database_limits,
    .changes_catalog = catalog_always,
};
