/* encode: a kl_batch as a keyload.v1.BatchRequest, with the database stamped into every
 * queue ref, principal, grant, limits change and transfer. The batch itself stays untouched (it may be shared between threads), so the
 * refs and their parents are shallow-copied for the duration of the pack. */
#include "client/sdk/internal.h"
#include "common/canon.h"

#include <stdlib.h>
#include <string.h>

typedef struct stamped {
    Keyload__V1__Mutation m;
    union {
        Keyload__V1__CreateQueue cq;
        Keyload__V1__DeleteQueue dq;
        Keyload__V1__Enqueue eq;
        Keyload__V1__Receive rv;
        Keyload__V1__Ack ak;
        Keyload__V1__Release rl;
        Keyload__V1__CreatePrincipal cp;
        Keyload__V1__GrantPermission gp;
        Keyload__V1__RevokePermission rp;
        Keyload__V1__SetDatabaseLimits sl;
        Keyload__V1__CreateQueueTransfer ct;
        Keyload__V1__AcceptQueueTransfer at;
        Keyload__V1__CompleteQueueTransfer co;
        Keyload__V1__SetQueueTransfersPaused tp;
        Keyload__V1__AdvanceQueueTransferAttempt aa;
        Keyload__V1__AdvanceQueueTransferRepair ar;
    } sub;
    Keyload__V1__Grant grant;
    Keyload__V1__QueueLaneRef ref;
    Keyload__V1__QueueLaneRef dest; /* a transfer's second lane: its destination */
} stamped;

/* Fills *to from *from with the client's tenant and database; false when from is NULL. */
static bool stamp_ref(Keyload__V1__QueueLaneRef *to, const Keyload__V1__QueueLaneRef *from,
                      char *tenant, char *database)
{
    if (from == NULL)
        return false;
    *to = *from;
    to->tenant = tenant;
    to->database = database;
    return true;
}

/* Transfers name up to two lanes, both in the client's database (ARCHITECTURE.md "Engine": the
 * destination must be in the same tenant/database). */
static bool stamp_transfer(stamped *s, const Keyload__V1__Mutation *src, char *tenant,
                           char *database)
{
    switch (src->kind_case) {
    case KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE_TRANSFER:
        s->sub.ct = *src->create_queue_transfer;
        s->sub.ct.source_queue = &s->ref;
        s->sub.ct.destination = &s->dest;
        s->m.create_queue_transfer = &s->sub.ct;
        return stamp_ref(&s->ref, src->create_queue_transfer->source_queue, tenant, database) &&
               stamp_ref(&s->dest, src->create_queue_transfer->destination, tenant, database);
    case KEYLOAD__V1__MUTATION__KIND_ACCEPT_QUEUE_TRANSFER:
        s->sub.at = *src->accept_queue_transfer;
        s->sub.at.destination_queue = &s->dest;
        s->m.accept_queue_transfer = &s->sub.at;
        return stamp_ref(&s->dest, src->accept_queue_transfer->destination_queue, tenant,
                         database);
    case KEYLOAD__V1__MUTATION__KIND_COMPLETE_QUEUE_TRANSFER:
        s->sub.co = *src->complete_queue_transfer;
        s->sub.co.source_queue = &s->ref;
        s->m.complete_queue_transfer = &s->sub.co;
        return stamp_ref(&s->ref, src->complete_queue_transfer->source_queue, tenant, database);
    case KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_ATTEMPT:
        s->sub.aa = *src->advance_queue_transfer_attempt;
        s->sub.aa.source_queue = &s->ref;
        s->m.advance_queue_transfer_attempt = &s->sub.aa;
        return stamp_ref(&s->ref, src->advance_queue_transfer_attempt->source_queue, tenant,
                         database);
    case KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_REPAIR:
        s->sub.ar = *src->advance_queue_transfer_repair;
        s->sub.ar.source_queue = &s->ref;
        s->m.advance_queue_transfer_repair = &s->sub.ar;
        return stamp_ref(&s->ref, src->advance_queue_transfer_repair->source_queue, tenant,
                         database);
    case KEYLOAD__V1__MUTATION__KIND_SET_QUEUE_TRANSFERS_PAUSED:
        s->sub.tp = *src->set_queue_transfers_paused;
        s->sub.tp.tenant = tenant;
        s->sub.tp.database = database;
        s->m.set_queue_transfers_paused = &s->sub.tp;
        if (src->set_queue_transfers_paused->source_queue == NULL)
            return true; /* the whole database */
        s->sub.tp.source_queue = &s->ref;
        return stamp_ref(&s->ref, src->set_queue_transfers_paused->source_queue, tenant,
                         database);
    default:
        return false;
    }
}

/* Copies src into s with the client's tenant/database filled in (queue refs, principals,
 * grants, limits); false for an unknown kind. */
static bool stamp(stamped *s, const Keyload__V1__Mutation *src, char *tenant, char *database)
{
    s->m = *src;
    const Keyload__V1__QueueLaneRef *ref;
    switch (src->kind_case) {
    case KEYLOAD__V1__MUTATION__KIND_CREATE_DATABASE:
    case KEYLOAD__V1__MUTATION__KIND_BOOTSTRAP:
    case KEYLOAD__V1__MUTATION__KIND_SET_PRINCIPAL_KEY:
    case KEYLOAD__V1__MUTATION__KIND_SET_MEMBER_KEY:
        return true; /* names its own tenant and database, or none */
    case KEYLOAD__V1__MUTATION__KIND_CREATE_PRINCIPAL:
        s->sub.cp = *src->create_principal;
        s->sub.cp.tenant = tenant;
        s->sub.cp.database = src->create_principal->database_admin ? database : (char *)"";
        s->m.create_principal = &s->sub.cp;
        return true;
    case KEYLOAD__V1__MUTATION__KIND_GRANT_PERMISSION:
        if (src->grant_permission->grant == NULL)
            return false;
        s->grant = *src->grant_permission->grant;
        s->grant.database = database;
        s->sub.gp = *src->grant_permission;
        s->sub.gp.grant = &s->grant;
        s->m.grant_permission = &s->sub.gp;
        return true;
    case KEYLOAD__V1__MUTATION__KIND_REVOKE_PERMISSION:
        s->sub.rp = *src->revoke_permission;
        s->sub.rp.database = database;
        s->m.revoke_permission = &s->sub.rp;
        return true;
    case KEYLOAD__V1__MUTATION__KIND_SET_DATABASE_LIMITS:
        s->sub.sl = *src->set_database_limits;
        s->sub.sl.tenant = tenant;
        s->sub.sl.database = database;
        s->m.set_database_limits = &s->sub.sl;
        return true;
    case KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE_TRANSFER:
    case KEYLOAD__V1__MUTATION__KIND_ACCEPT_QUEUE_TRANSFER:
    case KEYLOAD__V1__MUTATION__KIND_COMPLETE_QUEUE_TRANSFER:
    case KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_ATTEMPT:
    case KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_REPAIR:
    case KEYLOAD__V1__MUTATION__KIND_SET_QUEUE_TRANSFERS_PAUSED:
        return stamp_transfer(s, src, tenant, database);
    case KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE:
        s->sub.cq = *src->create_queue;
        s->sub.cq.queue = &s->ref;
        s->m.create_queue = &s->sub.cq;
        ref = src->create_queue->queue;
        break;
    case KEYLOAD__V1__MUTATION__KIND_DELETE_QUEUE:
        s->sub.dq = *src->delete_queue;
        s->sub.dq.queue = &s->ref;
        s->m.delete_queue = &s->sub.dq;
        ref = src->delete_queue->queue;
        break;
    case KEYLOAD__V1__MUTATION__KIND_ENQUEUE:
        s->sub.eq = *src->enqueue;
        s->sub.eq.lane = &s->ref;
        s->m.enqueue = &s->sub.eq;
        ref = src->enqueue->lane;
        break;
    case KEYLOAD__V1__MUTATION__KIND_RECEIVE:
        s->sub.rv = *src->receive;
        s->sub.rv.lane = &s->ref;
        s->m.receive = &s->sub.rv;
        ref = src->receive->lane;
        break;
    case KEYLOAD__V1__MUTATION__KIND_ACK:
        s->sub.ak = *src->ack;
        s->sub.ak.queue = &s->ref;
        s->m.ack = &s->sub.ak;
        ref = src->ack->queue;
        break;
    case KEYLOAD__V1__MUTATION__KIND_RELEASE:
        s->sub.rl = *src->release;
        s->sub.rl.queue = &s->ref;
        s->m.release = &s->sub.rl;
        ref = src->release->queue;
        break;
    default:
        return false;
    }
    if (ref == NULL)
        return false;
    s->ref = *ref;
    s->ref.tenant = tenant;
    s->ref.database = database;
    return true;
}

/* Whether b holds a transfer mutation (its outcome is kept for ever). */
static bool holds_transfer(const kl_batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        if (kl_canon_kind_keeps_outcome(b->muts[i]->kind_case))
            return true;
    return false;
}

kl_code kl_batch_encode(const kl_batch *b, const char *database, uint8_t **out,
                        size_t *out_len, kl_err *err)
{
    *out = NULL;
    *out_len = 0;
    char tenant[KL_SDK_NAME_MAX + 1], db[KL_SDK_NAME_MAX + 1];
    kl_code rc = kl_sdk_split_database(database ? database : KL_DEFAULT_DATABASE, tenant, db,
                                       err);
    if (rc != KL_OK)
        return rc;
    if (b->n == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "mutations",
                       "a batch needs at least one mutation");
    stamped *s = calloc(b->n, sizeof *s);
    Keyload__V1__Mutation **ptrs = calloc(b->n, sizeof *ptrs);
    if (s == NULL || ptrs == NULL) {
        free(s);
        free(ptrs);
        return kl_sdk_oom(err);
    }
    for (size_t i = 0; i < b->n; i++) {
        if (!stamp(&s[i], b->muts[i], tenant, db)) {
            free(s);
            free(ptrs);
            return kl_fail(err, KL_INTERNAL, "mutations", "mutation %zu has no known kind",
                           i + 1);
        }
        ptrs[i] = &s[i].m;
    }
    Keyload__V1__BatchRequest req = KEYLOAD__V1__BATCH_REQUEST__INIT;
    req.command_id.data = (uint8_t *)b->command_id;
    req.command_id.len = KL_GUID_LEN;
    req.n_mutations = b->n;
    req.mutations = ptrs;
    /* Transfer outcomes never expire, so their batches carry no first-sent time: the
     * coordinator's deterministic command ids then replay across its restarts unchanged. */
    if (!holds_transfer(b))
        req.first_sent_unix_ms = b->first_sent_ms;
    size_t len = keyload__v1__batch_request__get_packed_size(&req);
    uint8_t *buf = malloc(len ? len : 1);
    if (buf == NULL) {
        rc = kl_sdk_oom(err);
    } else {
        keyload__v1__batch_request__pack(&req, buf);
        *out = buf;
        *out_len = len;
    }
    free(s);
    free(ptrs);
    return rc;
}
