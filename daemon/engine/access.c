#include "daemon/engine/access.h"

#include "keyload/v1/catalog.pb-c.h"

#include <string.h>

kl_code kl_access_queue(const kl_authz_subject *who, const Keyload__V1__QueueLaneRef *q,
                        Keyload__V1__Permission perm, const Keyload__V1__EnqueueMessage *msg,
                        kl_err *err)
{
    if (q == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "queue", "the mutation names no queue");
    kl_authz_request r = {.tenant = q->tenant, .database = q->database, .permission = perm,
                          .queue = q->queue, .message = msg};
    return kl_authz_check(who, &r, err);
}

kl_code kl_access_tenant(const kl_authz_subject *who, const char *tenant, kl_err *err)
{
    if (who == NULL)
        return KL_OK;
    if (who->principal == NULL)
        return kl_fail(err, KL_UNAUTHENTICATED, "principal", "the request has no principal");
    if (tenant == NULL || strcmp(who->principal->tenant, tenant) != 0)
        return kl_fail(err, KL_PERMISSION_DENIED, "tenant",
                       "principal %s belongs to another tenant than the one the request names",
                       who->principal->principal_id);
    return KL_OK;
}

kl_code kl_access_cluster_admin(const kl_authz_subject *who, const char *tenant, kl_err *err)
{
    kl_code rc = kl_access_tenant(who, tenant, err);
    if (rc != KL_OK)
        return rc;
    if (who->admin_off || !who->principal->cluster_admin)
        return kl_fail(err, KL_PERMISSION_DENIED, "role:cluster_admin",
                       "creating a database needs a cluster administrator of tenant %s", tenant);
    return KL_OK;
}

kl_code kl_access_received(const kl_authz_subject *who, const Keyload__V1__QueueLaneRef *q,
                           const Keyload__V1__EnqueueMessage *msg, kl_err *err)
{
    if (who == NULL)
        return KL_OK;
    return kl_access_queue(who, q, KEYLOAD__V1__PERMISSION__QUEUE_CONSUME, msg, err);
}

kl_code kl_access_inspect(const kl_authz_subject *who, const Keyload__V1__QueueLaneRef *q, kl_err *err)
{
    if (who == NULL)
        return KL_OK;
    return kl_access_queue(who, q, KEYLOAD__V1__PERMISSION__QUEUE_INSPECT, NULL, err);
}

kl_code kl_access_transfer_admin(const kl_authz_subject *who, const char *tenant, const char *database,
                                 kl_err *err)
{
    if (who == NULL)
        return KL_OK;
    kl_code rc = kl_access_tenant(who, tenant, err);
    if (rc != KL_OK)
        return rc;
    /* Always on the stored record, whatever the subject's admin_off says. */
    kl_authz_subject stored = *who;
    stored.admin_off = false;
    return kl_authz_require_admin(&stored, tenant, database, err);
}

kl_code kl_access_transfer_data(const kl_authz_subject *who, const Keyload__V1__QueueLaneRef *q,
                                Keyload__V1__Permission perm, const Keyload__V1__EnqueueMessage *msg,
                                kl_err *err)
{
    if (who == NULL)
        return KL_OK;
    kl_authz_subject data = *who;
    data.admin_off = true;
    return kl_access_queue(&data, q, perm, msg, err);
}

kl_code kl_access_query(const kl_authz_subject *who, const Keyload__V1__QueueLaneRef *q, bool transfer,
                        kl_err *err)
{
    if (who == NULL)
        return KL_OK;
    kl_authz_subject s = *who;
    s.admin_off = s.admin_off || transfer;
    /* No field or header keys: what the statement writes or reads is checked by the native
     * operation's own grants (QueuePublish, QueueConsume, QueueInspect) right after. */
    return kl_access_queue(&s, q, KEYLOAD__V1__PERMISSION__QUERY, NULL, err);
}

kl_code kl_access_list_catalog(const kl_authz_subject *who, int kind, const char *tenant,
                               const char **database, kl_err *err)
{
    if (who == NULL)
        return KL_OK;
    kl_code rc = kl_access_tenant(who, tenant, err);
    if (rc != KL_OK)
        return rc;
    /* A read: the stored roles decide, whatever the subject's admin_off says. */
    kl_authz_subject stored = *who;
    stored.admin_off = false;
    const Keyload__V1__CatalogPrincipal *p = who->principal;
    if (kind == KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_QUEUES)
        return kl_authz_require_admin(&stored, tenant, *database, err);
    if (!p->cluster_admin && !p->database_admin)
        return kl_fail(err, KL_PERMISSION_DENIED, "role:administrator",
                       "listing databases or principals needs an administrator of tenant %s", tenant);
    if (kind == KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_DATABASES && !p->cluster_admin) {
        if ((*database)[0] != '\0')
            return kl_authz_require_admin(&stored, tenant, *database, err);
        *database = p->database; /* a database administrator lists the one it administers */
    }
    return KL_OK;
}
