/* access: which authorization check each batch mutation and read needs (ARCHITECTURE.md "Engine"), on
 * top of the one evaluator in authz.h. The helpers here serve the reads and the kinds'
 * access functions, which live with each kind in the module that evaluates it
 * (daemon/engine/kind.h). Pure: the caller passes the subject read from its own applied
 * catalog (never what a request claims), or NULL for the trusted built-in local
 * administrator of "insecure_local_admin" clusters (common/cluster.h).
 *
 *   Enqueue                     QueuePublish on the lane's queue, with the message's field
 *                               and header keys
 *   Receive                     QueueConsume; then each message handed out, by its keys
 *                               (kl_access_received)
 *   Ack, Release                QueueAck
 *   QueueStats                  QueueInspect
 *   CreateQueue, DeleteQueue,   a persisted administrator of the database
 *   SetDatabaseLimits
 *   CreateDatabase              a cluster administrator of the tenant
 *   CreatePrincipal             kl_authz_can_set_roles (only a cluster administrator makes one)
 *   Grant/Revoke/SetPrincipalKey  checked in catalog.c against the target's stored record
 *   Bootstrap                   nothing here: its proof of the cluster secret is the check
 *   CreateQueueTransfer         a persisted administrator of the database, then (admin flags
 *                               off) QueuePublish on source and destination with the message's
 *                               field and header keys
 *   AcceptQueueTransfer         a persisted administrator here; transfer.c then checks
 *                               QueuePublish on the destination with the intent's message keys
 *   CompleteQueueTransfer       a persisted administrator, then QueuePublish on the source
 *   SetQueueTransfersPaused     a persisted administrator
 *   transfer reads              a persisted administrator, then QueueInspect (transfer.c)
 *   Query (a Q1 statement)      Query on the statement's routing queue (kl_access_query), then
 *                               the native operation's own check above
 *
 * A refusal is PERMISSION_DENIED naming the missing grant or role, never data. */
#ifndef KL_ACCESS_H
#define KL_ACCESS_H

#include "daemon/engine/authz.h"
#include "keyload/v1/queue.pb-c.h"

/* perm on q's queue, with msg's field and header keys when msg is set; INVALID_ARGUMENT
 * "queue" when q is NULL. who is not NULL. */
kl_code kl_access_queue(const kl_authz_subject *who, const Keyload__V1__QueueLaneRef *q,
                        Keyload__V1__Permission perm, const Keyload__V1__EnqueueMessage *msg,
                        kl_err *err);
/* A cluster administrator of tenant (CreateDatabase), its role on the stored record and not
 * switched off for the request. who is not NULL. */
kl_code kl_access_cluster_admin(const kl_authz_subject *who, const char *tenant, kl_err *err);

/* A message Receive is about to hand out: every field and header key must be readable
 * under who's QueueConsume grants on q's queue. KL_OK when who is NULL. */
kl_code kl_access_received(const kl_authz_subject *who, const Keyload__V1__QueueLaneRef *q,
                           const Keyload__V1__EnqueueMessage *msg, kl_err *err);

/* QueueStats (QueueInspect) and reads of catalog definitions (LocateQueue: any principal
 * of the tenant). KL_OK when who is NULL. */
kl_code kl_access_inspect(const kl_authz_subject *who, const Keyload__V1__QueueLaneRef *q, kl_err *err);
kl_code kl_access_tenant(const kl_authz_subject *who, const char *tenant, kl_err *err);

/* ListCatalog (kind a Keyload__V1__CatalogListKind): administrators of tenant only, on the
 * stored record. QUEUES: an administrator of *database. DATABASES and PRINCIPALS: a cluster
 * or database administrator of the tenant (PERMISSION_DENIED "role:administrator" else); a
 * database administrator's DATABASES list is its own database alone (*database is set to it
 * when empty, and another one is refused). KL_OK when who is NULL. */
kl_code kl_access_list_catalog(const kl_authz_subject *who, int kind, const char *tenant,
                               const char **database, kl_err *err);

/* Transfers (ARCHITECTURE.md "Engine"): the caller must be a persisted administrator of the database,
 * read from its stored record; KL_OK when who is NULL. */
kl_code kl_access_transfer_admin(const kl_authz_subject *who, const char *tenant, const char *database,
                                 kl_err *err);
/* A transfer's data check: perm on q (with msg's field and header keys when msg is set),
 * evaluated with every administrator flag off. KL_OK when who is NULL. */
kl_code kl_access_transfer_data(const kl_authz_subject *who, const Keyload__V1__QueueLaneRef *q,
                                Keyload__V1__Permission perm, const Keyload__V1__EnqueueMessage *msg,
                                kl_err *err);

/* The Query permission (Q1 statements, daemon/rpc/query_serve.c) on q's queue, without
 * field or header keys (the native operation checks those). transfer: the statement is a
 * transfer alias, so it is evaluated with every administrator flag off, like the transfers'
 * own data checks. KL_OK when who is NULL. */
kl_code kl_access_query(const kl_authz_subject *who, const Keyload__V1__QueueLaneRef *q, bool transfer,
                        kl_err *err);

#endif
