#include "daemon/engine/access.h"

#include <assert.h>
#include <string.h>

static kl_code queue_check(const kl_authz_subject *who, const Keyload__V1__QueueLaneRef *q,
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

static kl_code cluster_admin(const kl_authz_subject *who, const char *tenant, kl_err *err)
{
    kl_code rc = kl_access_tenant(who, tenant, err);
    if (rc != KL_OK)
        return rc;
    if (who->admin_off || !who->principal->cluster_admin)
        return kl_fail(err, KL_PERMISSION_DENIED, "role:cluster_admin",
                       "creating a database needs a cluster administrator of tenant %s", tenant);
    return KL_OK;
}

kl_code kl_access_enqueue(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    return queue_check(who, m->enqueue->lane, KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH,
                       m->enqueue->message, err);
}

kl_code kl_access_receive(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    return queue_check(who, m->receive->lane, KEYLOAD__V1__PERMISSION__QUEUE_CONSUME, NULL, err);
}

kl_code kl_access_ack(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    return queue_check(who, m->ack->queue, KEYLOAD__V1__PERMISSION__QUEUE_ACK, NULL, err);
}

kl_code kl_access_release(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    return queue_check(who, m->release->queue, KEYLOAD__V1__PERMISSION__QUEUE_ACK, NULL, err);
}

kl_code kl_access_create_queue(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    if (m->create_queue->queue == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "queue", "the mutation names no queue");
    return kl_authz_require_admin(who, m->create_queue->queue->tenant,
                                  m->create_queue->queue->database, err);
}

kl_code kl_access_delete_queue(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    if (m->delete_queue->queue == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "queue", "the mutation names no queue");
    return kl_authz_require_admin(who, m->delete_queue->queue->tenant,
                                  m->delete_queue->queue->database, err);
}

kl_code kl_access_set_database_limits(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    return kl_authz_require_admin(who, m->set_database_limits->tenant,
                                  m->set_database_limits->database, err);
}

kl_code kl_access_create_database(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    return cluster_admin(who, m->create_database->tenant, err);
}

kl_code kl_access_create_principal(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    const Keyload__V1__CreatePrincipal *cp = m->create_principal;
    Keyload__V1__CatalogPrincipal target = KEYLOAD__V1__CATALOG_PRINCIPAL__INIT;
    target.tenant = cp->tenant;
    kl_authz_roles to = {.cluster_admin = cp->cluster_admin, .database_admin = cp->database_admin,
                         .database = cp->database};
    return kl_authz_can_set_roles(who, &target, &to, err);
}

kl_code kl_access_principal_change(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    (void)m;
    /* invariant I-ENG-10: a row's access check runs only for a subject read from the catalog */
    assert(who != NULL);
    /* Checked against the target's stored record, which catalog.c reads. */
    return kl_access_tenant(who, who->principal ? who->principal->tenant : NULL, err);
}

kl_code kl_access_bootstrap(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    (void)m;
    (void)who;
    (void)err;
    return KL_OK;
}

kl_code kl_access_create_queue_transfer(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    const Keyload__V1__CreateQueueTransfer *t = m->create_queue_transfer;
    kl_code rc = kl_access_transfer_admin(who, t->source_queue->tenant, t->source_queue->database, err);
    if (rc == KL_OK)
        rc = kl_access_transfer_data(who, t->source_queue, KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH,
                                     t->message, err);
    if (rc == KL_OK)
        rc = kl_access_transfer_data(who, t->destination, KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH,
                                     t->message, err);
    return rc;
}

kl_code kl_access_accept_queue_transfer(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    /* The data check needs the intent's message: transfer.c runs it after the token. */
    return kl_access_transfer_admin(who, m->accept_queue_transfer->destination_queue->tenant,
                                    m->accept_queue_transfer->destination_queue->database, err);
}

kl_code kl_access_complete_queue_transfer(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    const Keyload__V1__CompleteQueueTransfer *t = m->complete_queue_transfer;
    kl_code rc = kl_access_transfer_admin(who, t->source_queue->tenant, t->source_queue->database, err);
    if (rc == KL_OK)
        rc = kl_access_transfer_data(who, t->source_queue, KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, NULL, err);
    return rc;
}

kl_code kl_access_advance_queue_transfer(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    /* The same fields in both; the data check (QueuePublish on the source, like
     * Complete) runs in transfer_advance.c after the witness. */
    const Keyload__V1__QueueLaneRef *src = m->kind_case == KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_ATTEMPT
                                               ? m->advance_queue_transfer_attempt->source_queue
                                               : m->advance_queue_transfer_repair->source_queue;
    return kl_access_transfer_admin(who, src->tenant, src->database, err);
}

kl_code kl_access_set_queue_transfers_paused(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    return kl_access_transfer_admin(who, m->set_queue_transfers_paused->tenant,
                                    m->set_queue_transfers_paused->database, err);
}

kl_code kl_access_received(const kl_authz_subject *who, const Keyload__V1__QueueLaneRef *q,
                           const Keyload__V1__EnqueueMessage *msg, kl_err *err)
{
    if (who == NULL)
        return KL_OK;
    return queue_check(who, q, KEYLOAD__V1__PERMISSION__QUEUE_CONSUME, msg, err);
}

kl_code kl_access_inspect(const kl_authz_subject *who, const Keyload__V1__QueueLaneRef *q, kl_err *err)
{
    if (who == NULL)
        return KL_OK;
    return queue_check(who, q, KEYLOAD__V1__PERMISSION__QUEUE_INSPECT, NULL, err);
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
    return queue_check(&data, q, perm, msg, err);
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
    return queue_check(&s, q, KEYLOAD__V1__PERMISSION__QUERY, NULL, err);
}
