/* catalog: the catalog's records in a partition's state (ARCHITECTURE.md "Engine").
 *
 * Partition 0 owns the catalog: its batches create databases and queue definitions, and
 * each catalog batch becomes one catalog version (a CatalogChange stored under 'C' 'V').
 * Every other partition keeps a copy, applied from partition 0's changes by its leader's
 * tail, strictly in version order: a change applies only at version current + 1.
 * Both sides go through kl_catalog_apply_item, so partition 0's records and every copy
 * are the same function of the same changes; the item that defines a queue also creates
 * the queue's records on the partition it is placed on.
 *
 * Pure like the rest of the engine: reads and writes go through a kl_view. */
#ifndef KL_CATALOG_H
#define KL_CATALOG_H

#include "daemon/engine/catalog_read.h"
#include "daemon/engine/engine.h"
#include "keyload/v1/catalog.pb-c.h"

/* Versions and items of the catalog batch being evaluated on partition 0. */
typedef struct kl_catalog_batch {
    uint64_t version;   /* the version this batch creates; 0 until its first item */
    kl_buf items;       /* encoded CatalogChange.items fields (field 2 each) */
} kl_catalog_batch;

/* The catalog version applied in this view (meta "catalog_version"), 0 when none. */
kl_code kl_catalog_version(kl_view *v, uint64_t *out, kl_err *err);


/* Catalog mutations, partition 0 only (ctx->catalog set). Each appends its result to
 * results and its item to ctx->catalog. */
kl_code kl_catalog_eval_create_database(kl_eval_ctx *c, const Keyload__V1__CreateDatabase *m,
                                        kl_buf *results, kl_err *err);
kl_code kl_catalog_eval_create_queue(kl_eval_ctx *c, const Keyload__V1__CreateQueue *m,
                                     kl_buf *results, kl_err *err);
/* The principal id requests without a session act as (KL_LOCAL_PRINCIPAL); never a
 * catalog principal. */
#define KL_CATALOG_RESERVED_PRINCIPAL "local"

/* The first administrator (queue.proto Bootstrap): checks the proof of the cluster secret
 * (UNAUTHENTICATED "bootstrap_proof") and that no cluster administrator exists
 * (FAILED_PRECONDITION "bootstrap_done") and that no principal of any tenant has its
 * admin_id (CONFLICT "principal_exists"), then creates the tenant, the database and the
 * principal as one catalog version. */
kl_code kl_catalog_eval_bootstrap(kl_eval_ctx *c, const Keyload__V1__Bootstrap *m, kl_buf *results,
                                  kl_err *err);
/* Principal management (queue.proto CreatePrincipal ... SetDatabaseLimits), partition 0
 * only. Authorization beyond daemon/engine/access.h (which runs first) happens here where
 * it needs the target's stored record: grant and revoke through kl_authz_can_grant, key
 * rotation by the principal itself or through kl_authz_can_set_roles. NOT_FOUND
 * "principal", "tenant" or "database" for what does not exist. A grant naming a database
 * of the tenant that does not exist is refused. Grant, revoke and roles bump the policy
 * epoch when they change something; a key rotation does not (the sessions of the old key
 * end because a session records its key id). */
kl_code kl_catalog_eval_create_principal(kl_eval_ctx *c, const Keyload__V1__CreatePrincipal *m,
                                         kl_buf *results, kl_err *err);
kl_code kl_catalog_eval_grant(kl_eval_ctx *c, const Keyload__V1__GrantPermission *m, kl_buf *results,
                              kl_err *err);
kl_code kl_catalog_eval_revoke(kl_eval_ctx *c, const Keyload__V1__RevokePermission *m, kl_buf *results,
                               kl_err *err);
kl_code kl_catalog_eval_set_principal_key(kl_eval_ctx *c, const Keyload__V1__SetPrincipalKey *m,
                                          kl_buf *results, kl_err *err);
/* SetDatabaseLimits: `fields` 0 replaces every limit; otherwise only the limits whose bit
 * is set change, merged into the stored limits here, at evaluation (so a concurrent change
 * of another limit is kept). The merged limits are checked against the cluster's. */
kl_code kl_catalog_eval_set_database_limits(kl_eval_ctx *c, const Keyload__V1__SetDatabaseLimits *m,
                                            kl_buf *results, kl_err *err);
/* The bits of SetDatabaseLimits.fields (queue.proto). */
#define KL_CATALOG_FIELD_SCAN_RECORDS 1u
#define KL_CATALOG_FIELD_BATCH_BYTES 2u
#define KL_CATALOG_FIELD_QUERY_READ_BYTES 4u
#define KL_CATALOG_FIELD_ACCEPT_ATTEMPTS 8u
#define KL_CATALOG_FIELDS_ALL 15u
/* The limits a SetDatabaseLimits leaves in force: each limit whose bit is in `fields` (0:
 * all) from req (NULL: all zero, accept attempts null), every other from stored (NULL: the
 * same). *out is initialized here; its accept attempts, when not null, point at *attempts. */
void kl_catalog_merge_db_limits(const Keyload__V1__DatabaseLimits *stored,
                                const Keyload__V1__DatabaseLimits *req, uint32_t fields,
                                Keyload__V1__DatabaseLimits *out, Keyload__V1__NullableU64 *attempts);
/* SetQueueTransfersPaused without a source queue: the database's transfers_paused switch.
 * Setting it to what it is changes nothing (no new version). */
kl_code kl_catalog_eval_set_transfers_paused(kl_eval_ctx *c, const Keyload__V1__SetQueueTransfersPaused *m,
                                             kl_buf *results, kl_err *err);
/* DeleteQueue. On the queue's partition: close it (step 1 of the SDK's delete). On
 * partition 0: drop the definition from the catalog (step 2), closing it first when it
 * lives there too. */
kl_code kl_catalog_eval_delete_queue(kl_eval_ctx *c, const Keyload__V1__DeleteQueue *m, kl_buf *out,
                                     kl_err *err);
/* Removes a queue's definition. The queue's own partition has already emptied and closed
 * it (for a queue on partition 0 the caller did that in the same batch). */
kl_code kl_catalog_eval_drop_queue(kl_eval_ctx *c, const Keyload__V1__CatalogQueue *def,
                                   kl_buf *results, kl_err *err);
/* For catalog mutations evaluated outside this module (partition 0, ctx->catalog set):
 * the version this batch creates (allocated on first use, into ctx->catalog->version), and
 * an item applied here and added to the batch's change. */
kl_code kl_catalog_next_version(kl_eval_ctx *c, kl_err *err);
kl_code kl_catalog_record_item(kl_eval_ctx *c, const Keyload__V1__CatalogItem *item, kl_err *err);
/* Ends a catalog batch: stores the CatalogChange under its version and advances the
 * version and change counters. Nothing to do when the batch has no item. */
kl_code kl_catalog_finish(kl_eval_ctx *c, kl_err *err);

/* Applies one catalog item to the view as partition `partition` keeps it. */
kl_code kl_catalog_apply_item(kl_view *v, int partition, int64_t now_ms,
                              const Keyload__V1__CatalogItem *item, kl_err *err);
/* Applies a whole change on a data partition: requires ch->version == current + 1
 * (FAILED_PRECONDITION otherwise, nothing written) and advances the counters. */
kl_code kl_catalog_apply_change(kl_view *v, int partition, int64_t now_ms,
                                const Keyload__V1__CatalogChange *ch, kl_err *err);

#endif
