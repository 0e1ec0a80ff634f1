/* member_key: SetMemberKey (member_key.h). */
#include "daemon/engine/member_key.h"

#include "daemon/engine/authz.h"
#include "daemon/engine/catalog.h"
#include "daemon/engine/kind.h"
#include "daemon/engine/record.h"

#include <stdio.h>
#include <string.h>

#define COUNT_META "member_keys"

static kl_code validate_set_member_key(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    const Keyload__V1__SetMemberKey *k = m->set_member_key;
    char where[64];
    if (k->partition < 0) {
        snprintf(where, sizeof where, "mutations[%zu].set_member_key.partition", idx);
        return kl_fail(err, KL_INVALID_ARGUMENT, where, "%s must name a partition (0 or above)", where);
    }
    if (k->member == 0) {
        snprintf(where, sizeof where, "mutations[%zu].set_member_key.member", idx);
        return kl_fail(err, KL_INVALID_ARGUMENT, where, "%s must be a nonzero member id", where);
    }
    if (k->public_key.len != 0 && k->public_key.len != 32) {
        snprintf(where, sizeof where, "mutations[%zu].set_member_key.public_key", idx);
        return kl_fail(err, KL_INVALID_ARGUMENT, where,
                       "%s must be a 32-byte Ed25519 key (or empty to remove the member's key), got %zu bytes",
                       where, k->public_key.len);
    }
    return KL_OK;
}

/* Any tenant's cluster administrator: membership is the cluster's, as MemberChange's
 * check (daemon/rpc/member_serve.c) is. */
static kl_code access_set_member_key(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    (void)m;
    if (who == NULL || who->principal == NULL || who->admin_off || !who->principal->cluster_admin)
        return kl_fail(err, KL_PERMISSION_DENIED, "role:cluster_admin",
                       "only a cluster administrator may register or remove a member's key");
    return KL_OK;
}

static bool same_record(const Keyload__V1__CatalogMemberKey *old, const Keyload__V1__CatalogMemberKey *now)
{
    return old->removed == now->removed && old->public_key.len == now->public_key.len &&
           (now->public_key.len == 0 || memcmp(old->public_key.data, now->public_key.data, now->public_key.len) == 0);
}

static kl_code result(kl_buf *out, bool changed, uint64_t version, kl_err *err)
{
    Keyload__V1__MemberKeySet ks = KEYLOAD__V1__MEMBER_KEY_SET__INIT;
    ks.changed = changed;
    ks.catalog_version = changed ? version : 0;
    Keyload__V1__MutationResult res = KEYLOAD__V1__MUTATION_RESULT__INIT;
    res.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_MEMBER_KEY_SET;
    res.member_key_set = &ks;
    return kl_engine_add_result(out, &res, err);
}

/* A new record counts against KL_MEMBER_KEYS_MAX; a rewrite of one does not. */
static kl_code count_new(kl_eval_ctx *c, kl_err *err)
{
    uint64_t n;
    kl_code rc = kl_view_get_meta_u64(c->view, COUNT_META, &n, err);
    if (rc != KL_OK)
        return rc;
    if (n >= KL_MEMBER_KEYS_MAX)
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "member_keys_full",
                       "the catalog holds %d member-key records (KL_MEMBER_KEYS_MAX), registered or removed; "
                       "no new member can be vouched for", KL_MEMBER_KEYS_MAX);
    return kl_view_put_meta_u64(c->view, COUNT_META, n + 1, err);
}

static kl_code eval_set_member_key(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    const Keyload__V1__SetMemberKey *k = m->set_member_key;
    if (c->catalog == NULL)
        return kl_fail(err, KL_FAILED_PRECONDITION, "catalog_partition",
                       "set_member_key changes the catalog, which lives on partition 0; this is partition %d",
                       c->partition);
    if (k->partition >= c->partition_count)
        return kl_fail(err, KL_INVALID_ARGUMENT, "set_member_key.partition",
                       "partition %d is not a partition of this cluster (0..%d)", (int)k->partition,
                       c->partition_count - 1);
    Keyload__V1__CatalogMemberKey rec = KEYLOAD__V1__CATALOG_MEMBER_KEY__INIT, *old = NULL;
    rec.partition = k->partition;
    rec.member = k->member;
    rec.public_key = k->public_key;
    rec.removed = k->public_key.len == 0;
    bool found;
    kl_code rc = kl_catalog_get_member_key(c->view, k->partition, k->member, &old, &found, err);
    if (rc != KL_OK)
        return rc;
    bool same = found && same_record(old, &rec);
    if (old != NULL)
        keyload__v1__catalog_member_key__free_unpacked(old, NULL);
    if (same)
        return result(out, false, 0, err);
    if ((!found && (rc = count_new(c, err)) != KL_OK) || (rc = kl_catalog_next_version(c, err)) != KL_OK)
        return rc;
    rec.version = c->catalog->version;
    Keyload__V1__CatalogItem it = KEYLOAD__V1__CATALOG_ITEM__INIT;
    it.kind_case = KEYLOAD__V1__CATALOG_ITEM__KIND_PUT_MEMBER_KEY;
    it.put_member_key = &rec;
    if ((rc = kl_catalog_record_item(c, &it, err)) != KL_OK)
        return rc;
    return result(out, true, rec.version, err);
}

static bool catalog_always(const Keyload__V1__Mutation *m)
{
    (void)m;
    return true;
}

const kl_mutation_kind kl_member_key_kind_set = {
    .validate = validate_set_member_key,
    .access = access_set_member_key,
    .canon = kl_canon_set_member_key,
    .eval = eval_set_member_key,
    .changes_catalog = catalog_always,
};
