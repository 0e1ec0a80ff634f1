/* node_read: the reads a member serves over its applied state once the caller passed the
 * read barrier (daemon/rpc/read_serve.c): QueueStats, the transfer reads, LocateQueue,
 * ShowPrincipal, principal lookups and catalog status. Nothing here writes or proposes. */
#include "daemon/node_internal.h"

#include "common/guid.h"
#include "common/names.h"
#include "daemon/engine/access.h"
#include "daemon/engine/catalog.h"
#include "daemon/engine/catalog_read.h"
#include "daemon/engine/queue.h"
#include "daemon/engine/transfer.h"
#include "daemon/store/keys.h"
#include "keyload/v1/queue.pb-c.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* A read's queue ref: present, with valid names (before any key is built from them). */
static kl_code check_read_ref(const Keyload__V1__QueueLaneRef *q, kl_err *err)
{
    kl_code rc;
    if (q == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "queue", "queue is missing");
    if ((rc = kl_name_check("queue.tenant", q->tenant, err)) != KL_OK ||
        (rc = kl_name_check("queue.database", q->database, err)) != KL_OK ||
        (rc = kl_name_check("queue.queue", q->queue, err)) != KL_OK)
        return rc;
    return KL_OK;
}

kl_code kl_node_queue_stats(kl_node *n, const char *principal, const uint8_t *req, size_t len,
                            uint8_t **answer, size_t *answer_len, kl_err *err)
{
    node_subject subj = {0};
    Keyload__V1__QueueStatsRequest *r = keyload__v1__queue_stats_request__unpack(NULL, len, req);
    if (r == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "payload", "the QueueStats request does not decode");
    kl_code rc;
    if ((rc = check_read_ref(r->queue, err)) != KL_OK)
        goto done;
    kl_view view = {.store = n->store, .reads = &n->reads};
    kl_limits limits;
    if ((rc = node_subject_load(n, &view, principal, NULL, &subj, err)) == KL_OK) {
        uint64_t t0 = node_mono_ns(); /* node_subject_load counts its own time */
        rc = kl_access_inspect(subj.who, r->queue, err);
        n->authz_ns += node_mono_ns() - t0;
    }
    if (rc != KL_OK)
        goto done;
    if ((rc = node_database_limits(n, &view, r->queue->tenant, r->queue->database, &limits, err)) != KL_OK)
        goto done;
    view.scan_limit = limits.max_scan_records;
    kl_eval_ctx ctx = node_eval_ctx(n, &view, &limits, &subj, node_entry_time(n));
    Keyload__V1__QueueStatsAnswer a = KEYLOAD__V1__QUEUE_STATS_ANSWER__INIT;
    Keyload__V1__QueueLimits lim;
    char dlq[KL_NAME_LEN_MAX + 1];
    if ((rc = kl_engine_queue_stats(&ctx, r->queue, &a, &lim, dlq, err)) != KL_OK)
        goto done;
    a.applied_index = kl_store_applied_index(n->store);
    *answer_len = keyload__v1__queue_stats_answer__get_packed_size(&a);
    *answer = malloc(*answer_len ? *answer_len : 1);
    if (*answer == NULL) {
        rc = kl_fail(err, KL_INTERNAL, "memory", "out of memory");
        goto done;
    }
    keyload__v1__queue_stats_answer__pack(&a, *answer);
done:
    node_subject_free(&subj);
    keyload__v1__queue_stats_request__free_unpacked(r, NULL);
    return rc;
}

kl_code kl_node_query_access(kl_node *n, const char *principal, const char *tenant,
                             const char *database, const char *queue, bool transfer, kl_err *err)
{
    Keyload__V1__QueueLaneRef q = KEYLOAD__V1__QUEUE_LANE_REF__INIT;
    q.tenant = (char *)tenant;
    q.database = (char *)database;
    q.queue = (char *)queue;
    kl_code rc = check_read_ref(&q, err);
    if (rc != KL_OK)
        return rc;
    node_subject subj = {0};
    kl_view view = {.store = n->store, .reads = &n->reads};
    if ((rc = node_subject_load(n, &view, principal, NULL, &subj, err)) == KL_OK) {
        uint64_t t0 = node_mono_ns(); /* node_subject_load counts its own time */
        rc = kl_access_query(subj.who, &q, transfer, err);
        n->authz_ns += node_mono_ns() - t0;
    }
    node_subject_free(&subj);
    return rc;
}

static kl_code check_transfer_ref(const char *what, const Keyload__V1__QueueLaneRef *q, kl_err *err)
{
    kl_code rc = check_read_ref(q, err);
    if (rc == KL_OK && q->lane && q->lane[0])
        rc = kl_name_check(what, q->lane, err);
    return rc;
}

static kl_code check_transfer_id(const ProtobufCBinaryData *id, kl_err *err)
{
    if (!kl_guid_valid(id->data, id->len))
        return kl_fail(err, KL_INVALID_ARGUMENT, "transfer_id",
                       "transfer_id must be a 16-byte GUID that is not all zero");
    return KL_OK;
}

/* Decodes a transfer read's request and checks its names and ids before any key is built
 * from them. *r stays NULL when the request does not decode; otherwise the caller frees it,
 * and on KL_OK *tenant and *db name the database the read runs in. */
static kl_code transfer_read_decode(kl_node_read_kind kind, const uint8_t *req, size_t len,
                                    ProtobufCMessage **r, const char **tenant, const char **db,
                                    kl_err *err)
{
    kl_code rc = KL_OK;
    switch (kind) {
    case KL_NODE_INSPECT_TRANSFER: {
        Keyload__V1__InspectQueueTransferRequest *q = keyload__v1__inspect_queue_transfer_request__unpack(NULL, len, req);
        if ((*r = (ProtobufCMessage *)q) == NULL)
            break;
        if ((rc = check_transfer_ref("source_queue.lane", q->source_queue, err)) == KL_OK)
            rc = check_transfer_id(&q->transfer_id, err);
        if (rc == KL_OK) {
            *tenant = q->source_queue->tenant;
            *db = q->source_queue->database;
        }
        break;
    }
    case KL_NODE_TRANSFER_RECEIPT: {
        Keyload__V1__InspectQueueTransferReceiptRequest *q =
            keyload__v1__inspect_queue_transfer_receipt_request__unpack(NULL, len, req);
        if ((*r = (ProtobufCMessage *)q) == NULL)
            break;
        if ((rc = check_transfer_ref("destination_queue.lane", q->destination_queue, err)) == KL_OK &&
            (rc = check_transfer_ref("source_queue.lane", q->source_queue, err)) == KL_OK)
            rc = check_transfer_id(&q->transfer_id, err);
        if (rc == KL_OK) {
            *tenant = q->destination_queue->tenant;
            *db = q->destination_queue->database;
        }
        break;
    }
    case KL_NODE_TRANSFER_FAILURE: {
        Keyload__V1__ReadQueueTransferFailureRequest *q =
            keyload__v1__read_queue_transfer_failure_request__unpack(NULL, len, req);
        if ((*r = (ProtobufCMessage *)q) == NULL)
            break;
        /* An Accept's failure names the destination, a Complete's the source (only one). */
        const Keyload__V1__QueueLaneRef *on = q->source_queue ? q->source_queue : q->destination_queue;
        if (q->source_queue != NULL && q->destination_queue != NULL)
            rc = kl_fail(err, KL_INVALID_ARGUMENT, "source_queue",
                         "name destination_queue (a failed Accept) or source_queue (a failed Complete), not both");
        else if (q->source_queue != NULL) {
            if ((rc = check_transfer_ref("source_queue.lane", q->source_queue, err)) == KL_OK)
                rc = check_transfer_id(&q->transfer_id, err);
        } else
            rc = check_transfer_ref("destination_queue.lane", q->destination_queue, err);
        if (rc == KL_OK) {
            *tenant = on->tenant;
            *db = on->database;
        }
        break;
    }
    case KL_NODE_PENDING_TRANSFERS: {
        Keyload__V1__ListPendingQueueTransfersRequest *q =
            keyload__v1__list_pending_queue_transfers_request__unpack(NULL, len, req);
        if ((*r = (ProtobufCMessage *)q) == NULL)
            break;
        if ((rc = kl_name_check("tenant", q->tenant, err)) == KL_OK &&
            (rc = kl_name_check("database", q->database, err)) == KL_OK && q->source_queue != NULL) {
            rc = check_transfer_ref("source_queue.lane", q->source_queue, err);
            if (rc == KL_OK && (strcmp(q->source_queue->tenant, q->tenant) != 0 ||
                                strcmp(q->source_queue->database, q->database) != 0))
                rc = kl_fail(err, KL_INVALID_ARGUMENT, "source_queue",
                             "source_queue must be in the listed tenant/database");
        }
        *tenant = q->tenant;
        *db = q->database;
        break;
    }
    default:
        /* invariant I-NODE-12: only a transfer kind reaches the transfer reads */
        assert(!"a transfer read of another kind");
        break;
    }
    return rc;
}

/* Serves a decoded transfer read over ctx's applied state; authorization is transfer.c's. */
static kl_code transfer_read_serve(kl_eval_ctx *ctx, kl_node_read_kind kind, ProtobufCMessage *r,
                                   const char *principal, const node_subject *subj,
                                   uint8_t **answer, size_t *answer_len, kl_err *err)
{
    kl_code rc;
    switch (kind) {
    case KL_NODE_INSPECT_TRANSFER:
        rc = kl_transfer_inspect(ctx, (Keyload__V1__InspectQueueTransferRequest *)r, answer, answer_len, err);
        break;
    case KL_NODE_TRANSFER_RECEIPT:
        rc = kl_transfer_receipt(ctx, (Keyload__V1__InspectQueueTransferReceiptRequest *)r, answer, answer_len,
                                 err);
        break;
    case KL_NODE_TRANSFER_FAILURE:
        rc = kl_transfer_failure(ctx, (Keyload__V1__ReadQueueTransferFailureRequest *)r, principal,
                                 subj->record ? keyload__v1__catalog_principal__get_packed_size(subj->record) : 0,
                                 subj->policy_epoch, answer, answer_len, err);
        break;
    case KL_NODE_PENDING_TRANSFERS: {
        /* Cursors bind to the partition incarnation: a partition rebuilt from nothing
         * (same names, new log) never resumes an old cursor. */
        uint8_t pinc[16] = {0};
        kl_key pk;
        kl_key_meta(&pk, "pinc");
        uint8_t *pv;
        size_t pn;
        bool found;
        if ((rc = kl_store_get(ctx->view->store, pk.b, pk.len, &pv, &pn, &found, err)) != KL_OK)
            break;
        if (found) {
            if (pn == 16)
                memcpy(pinc, pv, 16);
            free(pv);
        }
        rc = kl_transfer_pending(ctx, (Keyload__V1__ListPendingQueueTransfersRequest *)r, pinc,
                                 subj->record ? keyload__v1__catalog_principal__get_packed_size(subj->record) : 0,
                                 answer, answer_len, err);
        break;
    }
    default:
        /* invariant I-NODE-12: only a transfer kind reaches the transfer reads */
        assert(!"a transfer read of another kind");
        rc = kl_fail(err, KL_INTERNAL, "read_kind", "not a transfer read");
        break;
    }
    return rc;
}

kl_code kl_node_transfer_read(kl_node *n, kl_node_read_kind kind, const char *principal,
                              const uint8_t *req, size_t len, uint8_t **answer, size_t *answer_len,
                              kl_err *err)
{
    node_subject subj = {0};
    ProtobufCMessage *r = NULL;
    const char *tenant = NULL, *db = NULL;
    kl_code rc = transfer_read_decode(kind, req, len, &r, &tenant, &db, err);
    if (r == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "payload", "the transfer read request does not decode");
    if (rc != KL_OK)
        goto done;
    kl_view view = {.store = n->store, .reads = &n->reads};
    kl_limits limits;
    if ((rc = node_subject_load(n, &view, principal, NULL, &subj, err)) != KL_OK ||
        (rc = node_database_limits(n, &view, tenant, db, &limits, err)) != KL_OK)
        goto done;
    view.scan_limit = limits.max_scan_records;
    kl_eval_ctx ctx = node_eval_ctx(n, &view, &limits, &subj, node_entry_time(n));
    rc = transfer_read_serve(&ctx, kind, r, principal, &subj, answer, answer_len, err);
    n->authz_ns += ctx.authz_ns;
done:
    node_subject_free(&subj);
    protobuf_c_message_free_unpacked(r, NULL);
    return rc;
}

/* A meta counter for status reports: 0 when absent or unreadable. */
static uint64_t meta_u64(kl_store *st, const char *name)
{
    uint64_t out;
    kl_err err;
    return kl_store_meta_u64(st, name, &out, &err) == KL_OK ? out : 0;
}

void kl_node_catalog_status(kl_node *n, uint64_t *version, uint64_t *changes)
{
    *version = meta_u64(n->store, "catalog_version");
    *changes = meta_u64(n->store, "catalog_changes");
}

kl_code kl_node_catalog_change(kl_node *n, uint64_t version, uint8_t **bytes, size_t *len, bool *found,
                               kl_err *err)
{
    kl_key k;
    kl_key_catalog_change(&k, version);
    return kl_store_get(n->store, k.b, k.len, bytes, len, found, err);
}

kl_code kl_node_locate_queue(kl_node *n, const char *principal, const uint8_t *req, size_t len,
                             uint8_t **answer, size_t *answer_len, kl_err *err)
{
    node_subject subj = {0};
    Keyload__V1__LocateQueueRequest *r = keyload__v1__locate_queue_request__unpack(NULL, len, req);
    if (r == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "payload", "the LocateQueue request does not decode");
    kl_code rc;
    Keyload__V1__CatalogQueue *def = NULL;
    if ((rc = check_read_ref(r->queue, err)) != KL_OK)
        goto done;
    kl_view view = {.store = n->store, .scan_limit = 16};
    if ((rc = node_subject_load(n, &view, principal, NULL, &subj, err)) != KL_OK ||
        (rc = kl_access_tenant(subj.who, r->queue->tenant, err)) != KL_OK)
        goto done;
    bool found;
    if ((rc = kl_catalog_get_queue(&view, r->queue->tenant, r->queue->database, r->queue->queue, &def,
                                   &found, err)) != KL_OK)
        goto done;
    if (!found) {
        rc = kl_fail(err, KL_NOT_FOUND, "queue", "queue '%s' does not exist in %s/%s", r->queue->queue,
                     r->queue->tenant, r->queue->database);
        goto done;
    }
    Keyload__V1__LocateQueueAnswer a = KEYLOAD__V1__LOCATE_QUEUE_ANSWER__INIT;
    a.queue = def;
    uint64_t changes;
    kl_node_catalog_status(n, &a.catalog_version, &changes);
    *answer_len = keyload__v1__locate_queue_answer__get_packed_size(&a);
    *answer = malloc(*answer_len ? *answer_len : 1);
    if (*answer == NULL) {
        rc = kl_fail(err, KL_INTERNAL, "memory", "out of memory");
        goto done;
    }
    keyload__v1__locate_queue_answer__pack(&a, *answer);
done:
    node_subject_free(&subj);
    if (def)
        keyload__v1__catalog_queue__free_unpacked(def, NULL);
    keyload__v1__locate_queue_request__free_unpacked(r, NULL);
    return rc;
}

kl_code kl_node_find_principal(kl_node *n, const char *principal_id,
                               Keyload__V1__CatalogPrincipal **out, bool *found, kl_err *err)
{
    kl_view view = {.store = n->store, .scan_limit = 16};
    return kl_catalog_find_principal(&view, principal_id, out, found, err);
}

kl_code kl_node_find_member_key(kl_node *n, int partition, uint64_t member,
                                Keyload__V1__CatalogMemberKey **out, bool *found, kl_err *err)
{
    kl_view view = {.store = n->store, .scan_limit = 16};
    return kl_catalog_get_member_key(&view, partition, member, out, found, err);
}

kl_code kl_node_find_principal_cached(kl_node *n, const char *principal_id,
                                      const Keyload__V1__CatalogPrincipal **out, bool *found,
                                      kl_err *err)
{
    kl_view view = {.store = n->store, .scan_limit = 16};
    return kl_subject_cache_principal(n->subjects, &view, principal_id, out, found, err);
}

kl_code kl_node_show_principal(kl_node *n, const char *principal, const uint8_t *req, size_t len,
                               uint8_t **answer, size_t *answer_len, kl_err *err)
{
    Keyload__V1__ShowPrincipalRequest *r = keyload__v1__show_principal_request__unpack(NULL, len, req);
    if (r == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "payload", "the ShowPrincipal request does not decode");
    node_subject subj = {0};
    Keyload__V1__CatalogPrincipal *p = NULL;
    kl_view view = {.store = n->store, .scan_limit = 16};
    bool found = false;
    kl_code rc = kl_name_check("principal_id", r->principal_id, err);
    if (rc == KL_OK)
        rc = node_subject_load(n, &view, principal, NULL, &subj, err);
    if (rc == KL_OK)
        rc = kl_catalog_find_principal(&view, r->principal_id, &p, &found, err);
    if (rc == KL_OK && !found)
        rc = kl_fail(err, KL_NOT_FOUND, "principal", "principal %s does not exist", r->principal_id);
    /* The principal itself, or an administrator of its tenant (a database administrator
     * manages the principals it grants to). The same answer for another tenant's principal
     * as for none would hide existence; ids are unique cluster-wide anyway. */
    if (rc == KL_OK && subj.who != NULL && strcmp(subj.record->principal_id, p->principal_id) != 0) {
        rc = kl_access_tenant(subj.who, p->tenant, err);
        if (rc == KL_OK && !subj.record->cluster_admin && !subj.record->database_admin)
            rc = kl_fail(err, KL_PERMISSION_DENIED, "role:administrator",
                         "only the principal itself or an administrator of its tenant may read it");
    }
    if (rc == KL_OK) {
        Keyload__V1__ShowPrincipalAnswer a = KEYLOAD__V1__SHOW_PRINCIPAL_ANSWER__INIT;
        a.principal = p;
        uint64_t changes;
        kl_node_catalog_status(n, &a.catalog_version, &changes);
        *answer_len = keyload__v1__show_principal_answer__get_packed_size(&a);
        *answer = malloc(*answer_len ? *answer_len : 1);
        if (*answer == NULL)
            rc = kl_fail(err, KL_INTERNAL, "memory", "out of memory");
        else
            keyload__v1__show_principal_answer__pack(&a, *answer);
    }
    if (p != NULL)
        keyload__v1__catalog_principal__free_unpacked(p, NULL);
    node_subject_free(&subj);
    keyload__v1__show_principal_request__free_unpacked(r, NULL);
    return rc;
}

/* ListCatalog's kind, names and page size, checked before any key is built from them. */
static kl_code list_check(const Keyload__V1__ListCatalogRequest *r, const char *tenant, const char *database,
                          size_t *max, kl_err *err)
{
    if (r->kind != KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_DATABASES &&
        r->kind != KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_QUEUES &&
        r->kind != KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_PRINCIPALS)
        return kl_fail(err, KL_INVALID_ARGUMENT, "kind", "kind must be databases, queues or principals");
    if (r->max > KL_CATALOG_LIST_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "max", "max is at most %d records per page",
                       KL_CATALOG_LIST_MAX);
    *max = r->max ? r->max : KL_CATALOG_LIST_DEFAULT;
    kl_code rc = kl_name_check("tenant", tenant, err);
    if (rc == KL_OK && (database[0] != '\0' || r->kind == KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_QUEUES))
        rc = kl_name_check("database", database, err);
    return rc;
}

/* One database as a one-record page (how its limits are read back). */
static kl_code list_one_database(kl_view *v, const char *tenant, const char *database,
                                 Keyload__V1__ListCatalogAnswer *a, kl_err *err)
{
    Keyload__V1__CatalogDatabase *d = NULL;
    bool found = false;
    kl_code rc = kl_catalog_get_database(v, tenant, database, &d, &found, err);
    if (rc == KL_OK && !found)
        return kl_fail(err, KL_NOT_FOUND, "database", "database %s/%s does not exist", tenant, database);
    if (rc != KL_OK)
        return rc;
    if ((a->databases = malloc(sizeof *a->databases)) == NULL) {
        keyload__v1__catalog_database__free_unpacked(d, NULL);
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    }
    a->databases[0] = d;
    a->n_databases = 1;
    return KL_OK;
}

static kl_code list_pack(kl_node *n, Keyload__V1__ListCatalogAnswer *a, uint8_t **answer, size_t *answer_len,
                         kl_err *err)
{
    uint64_t changes;
    kl_node_catalog_status(n, &a->catalog_version, &changes);
    *answer_len = keyload__v1__list_catalog_answer__get_packed_size(a);
    if ((*answer = malloc(*answer_len ? *answer_len : 1)) == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    keyload__v1__list_catalog_answer__pack(a, *answer);
    return KL_OK;
}

kl_code kl_node_list_catalog(kl_node *n, const char *principal, const uint8_t *req, size_t len,
                             uint8_t **answer, size_t *answer_len, kl_err *err)
{
    Keyload__V1__ListCatalogRequest *r = keyload__v1__list_catalog_request__unpack(NULL, len, req);
    if (r == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "payload", "the ListCatalog request does not decode");
    node_subject subj = {0};
    Keyload__V1__ListCatalogAnswer a = KEYLOAD__V1__LIST_CATALOG_ANSWER__INIT;
    kl_view view = {.store = n->store, .scan_limit = 16};
    char after[KL_NAME_LEN_MAX + 1];
    const char *tenant = r->tenant ? r->tenant : "", *database = r->database ? r->database : "";
    size_t max = 0;
    kl_code rc = node_subject_load(n, &view, principal, NULL, &subj, err);
    if (rc == KL_OK && tenant[0] == '\0' && subj.who != NULL)
        tenant = subj.record->tenant; /* the caller's own tenant, the only one it may read */
    if (rc == KL_OK)
        rc = list_check(r, tenant, database, &max, err);
    if (rc == KL_OK)
        rc = kl_access_list_catalog(subj.who, r->kind, tenant, &database, err);
    if (rc == KL_OK && r->cursor.len > 0)
        rc = kl_catalog_cursor_decode(r->kind, r->cursor.data, r->cursor.len, after, err);
    if (rc == KL_OK) {
        /* The page's records and the one after it, which says whether another page follows. */
        view.scanned = 0;
        view.scan_limit = max + 2;
        if (r->kind == KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_DATABASES && database[0] != '\0')
            rc = list_one_database(&view, tenant, database, &a, err);
        else
            rc = kl_catalog_list(&view, r->kind, tenant, database, r->cursor.len > 0 ? after : NULL, max,
                                 KL_CATALOG_LIST_ANSWER_BYTES, &a, err);
    }
    if (rc == KL_OK)
        rc = list_pack(n, &a, answer, answer_len, err);
    kl_catalog_page_free(&a);
    node_subject_free(&subj);
    keyload__v1__list_catalog_request__free_unpacked(r, NULL);
    return rc;
}

kl_code kl_node_read(kl_node *n, kl_node_read_kind kind, const char *principal, const uint8_t *req,
                     size_t len, uint8_t **answer, size_t *answer_len, kl_err *err)
{
    switch (kind) {
    case KL_NODE_QUEUE_STATS:
        return kl_node_queue_stats(n, principal, req, len, answer, answer_len, err);
    case KL_NODE_INSPECT_TRANSFER:
    case KL_NODE_TRANSFER_RECEIPT:
    case KL_NODE_PENDING_TRANSFERS:
    case KL_NODE_TRANSFER_FAILURE:
        return kl_node_transfer_read(n, kind, principal, req, len, answer, answer_len, err);
    case KL_NODE_QUERY_READ:
        break;
    }
    /* invariant I-NODE-13: a Q1 read is served as the transfer read its statement maps to */
    assert(kind != KL_NODE_QUERY_READ);
    return kl_fail(err, KL_INTERNAL, "read_kind", "not a read the node serves by kind");
}

kl_code kl_node_transfers_pending(kl_node *n, uint64_t scan_limit, uint64_t *count, kl_err *err)
{
    kl_view view = {.store = n->store, .scan_limit = scan_limit};
    return kl_transfer_pending_count(&view, count, err);
}

kl_code kl_node_queue_gauges(kl_node *n, kl_queue_gauge *out, size_t max, uint64_t scan_limit,
                             size_t *filled, size_t *total, kl_err *err)
{
    kl_view view = {.store = n->store, .scan_limit = scan_limit};
    return kl_queue_gauges(&view, n->io.clock_ms(n->io.ctx), out, max, filled, total, err);
}
