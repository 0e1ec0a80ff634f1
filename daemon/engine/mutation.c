/* mutation: the table of mutation kinds and the one path through it (mutation.h). */
#include "daemon/engine/mutation.h"

#include "common/guid.h"
#include "common/proto_check.h"
#include "daemon/engine/access.h"
#include "daemon/engine/catalog.h"
#include "daemon/engine/queue.h"
#include "daemon/engine/transfer.h"
#include "daemon/engine/validate.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

/* ---- evaluate column: each kind's submessage handed to its module ---- */

static kl_code eval_create_queue(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_catalog_eval_create_queue(c, m->create_queue, out, err);
}

static kl_code eval_delete_queue(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_catalog_eval_delete_queue(c, m->delete_queue, out, err);
}

static kl_code eval_enqueue(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_queue_eval_enqueue(c, m->enqueue, out, err);
}

static kl_code eval_receive(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_queue_eval_receive(c, m->receive, out, err);
}

static kl_code eval_ack(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_queue_eval_ack_release(c, m->ack->queue, m->ack->n_lease_tokens, m->ack->lease_tokens, true, out, err);
}

static kl_code eval_release(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_queue_eval_ack_release(c, m->release->queue, m->release->n_lease_tokens,
                                     m->release->lease_tokens, false, out, err);
}

static kl_code eval_create_database(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_catalog_eval_create_database(c, m->create_database, out, err);
}

static kl_code eval_bootstrap(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_catalog_eval_bootstrap(c, m->bootstrap, out, err);
}

static kl_code eval_create_principal(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_catalog_eval_create_principal(c, m->create_principal, out, err);
}

static kl_code eval_grant_permission(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_catalog_eval_grant(c, m->grant_permission, out, err);
}

static kl_code eval_revoke_permission(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_catalog_eval_revoke(c, m->revoke_permission, out, err);
}

static kl_code eval_set_principal_key(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_catalog_eval_set_principal_key(c, m->set_principal_key, out, err);
}

static kl_code eval_set_database_limits(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_catalog_eval_set_database_limits(c, m->set_database_limits, out, err);
}

static kl_code eval_create_queue_transfer(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_transfer_eval_create(c, m->create_queue_transfer, out, err);
}

static kl_code eval_accept_queue_transfer(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_transfer_eval_accept(c, m->accept_queue_transfer, out, err);
}

static kl_code eval_complete_queue_transfer(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_transfer_eval_complete(c, m->complete_queue_transfer, out, err);
}

static kl_code eval_set_queue_transfers_paused(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out,
                                               kl_err *err)
{
    /* Without a source queue it is the database's switch, kept in the catalog. */
    return m->set_queue_transfers_paused->source_queue == NULL
               ? kl_catalog_eval_set_transfers_paused(c, m->set_queue_transfers_paused, out, err)
               : kl_transfer_eval_pause_lane(c, m->set_queue_transfers_paused, out, err);
}

static kl_code eval_advance_queue_transfer_attempt(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out,
                                                   kl_err *err)
{
    const Keyload__V1__AdvanceQueueTransferAttempt *a = m->advance_queue_transfer_attempt;
    return kl_transfer_eval_advance(c, a->source_queue, &a->transfer_id, &a->witness_token, false, out, err);
}

static kl_code eval_advance_queue_transfer_repair(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out,
                                                  kl_err *err)
{
    const Keyload__V1__AdvanceQueueTransferRepair *a = m->advance_queue_transfer_repair;
    return kl_transfer_eval_advance(c, a->source_queue, &a->transfer_id, &a->witness_token, true, out, err);
}

/* ---- ref column: the queue ref that names the batch's database ---- */

static const Keyload__V1__QueueLaneRef *ref_create_queue(const Keyload__V1__Mutation *m) { return m->create_queue->queue; }
static const Keyload__V1__QueueLaneRef *ref_delete_queue(const Keyload__V1__Mutation *m) { return m->delete_queue->queue; }
static const Keyload__V1__QueueLaneRef *ref_enqueue(const Keyload__V1__Mutation *m) { return m->enqueue->lane; }
static const Keyload__V1__QueueLaneRef *ref_receive(const Keyload__V1__Mutation *m) { return m->receive->lane; }
static const Keyload__V1__QueueLaneRef *ref_ack(const Keyload__V1__Mutation *m) { return m->ack->queue; }
static const Keyload__V1__QueueLaneRef *ref_release(const Keyload__V1__Mutation *m) { return m->release->queue; }
static const Keyload__V1__QueueLaneRef *ref_create_queue_transfer(const Keyload__V1__Mutation *m) { return m->create_queue_transfer->source_queue; }
static const Keyload__V1__QueueLaneRef *ref_accept_queue_transfer(const Keyload__V1__Mutation *m) { return m->accept_queue_transfer->destination_queue; }
static const Keyload__V1__QueueLaneRef *ref_complete_queue_transfer(const Keyload__V1__Mutation *m) { return m->complete_queue_transfer->source_queue; }
static const Keyload__V1__QueueLaneRef *ref_set_queue_transfers_paused(const Keyload__V1__Mutation *m) { return m->set_queue_transfers_paused->source_queue; }
static const Keyload__V1__QueueLaneRef *ref_advance_queue_transfer_attempt(const Keyload__V1__Mutation *m) { return m->advance_queue_transfer_attempt->source_queue; }
static const Keyload__V1__QueueLaneRef *ref_advance_queue_transfer_repair(const Keyload__V1__Mutation *m) { return m->advance_queue_transfer_repair->source_queue; }

/* ---- changes_catalog column ---- */

static bool catalog_always(const Keyload__V1__Mutation *m)
{
    (void)m;
    return true;
}

/* SetQueueTransfersPaused changes the catalog only as the database's switch. */
static bool catalog_pause_switch(const Keyload__V1__Mutation *m)
{
    return m->set_queue_transfers_paused->source_queue == NULL;
}

/* ---- the table ---- */

#define ROW(KIND, VALIDATE, ACCESS, CANON, EVAL, REF, CATALOG)                                              \
    [KEYLOAD__V1__MUTATION__KIND_##KIND] = {.validate = VALIDATE, .access = ACCESS, .canon = CANON,          \
                                            .eval = EVAL, .ref = REF, .changes_catalog = CATALOG}

static const kl_mutation_kind kinds[] = {
    ROW(CREATE_QUEUE, kl_validate_create_queue, kl_access_create_queue, kl_canon_create_queue,
        eval_create_queue, ref_create_queue, catalog_always),
    ROW(DELETE_QUEUE, kl_validate_delete_queue, kl_access_delete_queue, kl_canon_delete_queue,
        eval_delete_queue, ref_delete_queue, NULL),
    ROW(ENQUEUE, kl_validate_enqueue, kl_access_enqueue, kl_canon_enqueue,
        eval_enqueue, ref_enqueue, NULL),
    ROW(RECEIVE, kl_validate_receive, kl_access_receive, kl_canon_receive,
        eval_receive, ref_receive, NULL),
    ROW(ACK, kl_validate_ack, kl_access_ack, kl_canon_ack,
        eval_ack, ref_ack, NULL),
    ROW(RELEASE, kl_validate_release, kl_access_release, kl_canon_release,
        eval_release, ref_release, NULL),
    ROW(CREATE_DATABASE, kl_validate_create_database, kl_access_create_database, kl_canon_create_database,
        eval_create_database, NULL, catalog_always),
    ROW(BOOTSTRAP, kl_validate_bootstrap, kl_access_bootstrap, kl_canon_bootstrap,
        eval_bootstrap, NULL, catalog_always),
    ROW(CREATE_PRINCIPAL, kl_validate_create_principal, kl_access_create_principal, kl_canon_create_principal,
        eval_create_principal, NULL, catalog_always),
    ROW(GRANT_PERMISSION, kl_validate_grant_permission, kl_access_principal_change, kl_canon_grant_permission,
        eval_grant_permission, NULL, catalog_always),
    ROW(REVOKE_PERMISSION, kl_validate_revoke_permission, kl_access_principal_change, kl_canon_revoke_permission,
        eval_revoke_permission, NULL, catalog_always),
    ROW(SET_PRINCIPAL_KEY, kl_validate_set_principal_key, kl_access_principal_change, kl_canon_set_principal_key,
        eval_set_principal_key, NULL, catalog_always),
    ROW(SET_DATABASE_LIMITS, kl_validate_set_database_limits, kl_access_set_database_limits, kl_canon_set_database_limits,
        eval_set_database_limits, NULL, catalog_always),
    ROW(CREATE_QUEUE_TRANSFER, kl_validate_create_queue_transfer, kl_access_create_queue_transfer, kl_canon_create_queue_transfer,
        eval_create_queue_transfer, ref_create_queue_transfer, NULL),
    ROW(ACCEPT_QUEUE_TRANSFER, kl_validate_accept_queue_transfer, kl_access_accept_queue_transfer, kl_canon_accept_queue_transfer,
        eval_accept_queue_transfer, ref_accept_queue_transfer, NULL),
    ROW(COMPLETE_QUEUE_TRANSFER, kl_validate_complete_queue_transfer, kl_access_complete_queue_transfer, kl_canon_complete_queue_transfer,
        eval_complete_queue_transfer, ref_complete_queue_transfer, NULL),
    ROW(SET_QUEUE_TRANSFERS_PAUSED, kl_validate_set_queue_transfers_paused, kl_access_set_queue_transfers_paused, kl_canon_set_queue_transfers_paused,
        eval_set_queue_transfers_paused, ref_set_queue_transfers_paused, catalog_pause_switch),
    ROW(ADVANCE_QUEUE_TRANSFER_ATTEMPT, kl_validate_advance_queue_transfer, kl_access_advance_queue_transfer, kl_canon_advance_queue_transfer_attempt,
        eval_advance_queue_transfer_attempt, ref_advance_queue_transfer_attempt, NULL),
    ROW(ADVANCE_QUEUE_TRANSFER_REPAIR, kl_validate_advance_queue_transfer, kl_access_advance_queue_transfer, kl_canon_advance_queue_transfer_repair,
        eval_advance_queue_transfer_repair, ref_advance_queue_transfer_repair, NULL),
};
_Static_assert(sizeof kinds / sizeof kinds[0] == KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_REPAIR + 1,
               "one row per mutation kind, up to the last kind queue.proto defines");

const kl_mutation_kind *kl_mutation_kind_of(int kind)
{
    if (kind <= 0 || (size_t)kind >= sizeof kinds / sizeof kinds[0] || kinds[kind].eval == NULL)
        return NULL;
    return &kinds[kind];
}

kl_code kl_mutation_access(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    if (who == NULL)
        return KL_OK;
    const kl_mutation_kind *k = kl_mutation_kind_of((int)m->kind_case);
    if (k == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "mutations", "a mutation has no known kind");
    return k->access(who, m, err);
}

/* ---- the batch-level walks ---- */

kl_code kl_engine_validate_batch(const Keyload__V1__BatchRequest *b, size_t encoded_len,
                                 const kl_limits *limits, kl_err *err)
{
    if (encoded_len > limits->max_batch_bytes)
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "limit:MaxBatchBytes",
                       "batch of %zu bytes exceeds MaxBatchBytes (%llu)", encoded_len,
                       (unsigned long long)limits->max_batch_bytes);
    char where[160];
    if (kl_proto_has_unknown(&b->base, where, sizeof where))
        return kl_fail(err, KL_INVALID_ARGUMENT, "unknown_field",
                       "the batch carries a field this daemon does not know%s%s; upgrade the "
                       "daemon or drop the field", where[0] ? " in " : "", where);
    if (!kl_guid_valid(b->command_id.data, b->command_id.len))
        return kl_fail(err, KL_INVALID_ARGUMENT, "command_id",
                       "command_id must be a 16-byte GUID that is not all zero");
    if (b->n_mutations == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "mutations", "a batch needs at least one mutation");
    if (b->n_mutations > KL_BATCH_MUTATIONS_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "mutations", "a batch holds at most %d mutations",
                       KL_BATCH_MUTATIONS_MAX);
    size_t catalog = 0;
    for (size_t i = 0; i < b->n_mutations; i++) {
        const Keyload__V1__Mutation *m = b->mutations[i];
        const kl_mutation_kind *k = kl_mutation_kind_of((int)m->kind_case);
        if (k == NULL)
            return kl_fail(err, KL_INVALID_ARGUMENT, "mutations", "mutations[%zu] has no known kind", i);
        kl_code rc = k->validate(i, m, err);
        if (rc != KL_OK)
            return rc;
        if (k->changes_catalog != NULL && k->changes_catalog(m))
            catalog++;
    }
    /* A catalog change is one version on partition 0; mixing it with queue data would
     * commit data whose queue a data partition has not seen yet. */
    if (catalog > 0 && b->n_mutations != 1)
        return kl_fail(err, KL_INVALID_ARGUMENT, "mutations",
                       "a batch that changes the catalog (databases, queue definitions, principals, limits) holds exactly that one mutation");
    return KL_OK;
}

kl_code kl_engine_batch_database(const Keyload__V1__BatchRequest *b, const char **tenant,
                                 const char **database, kl_err *err)
{
    *tenant = *database = NULL;
    for (size_t i = 0; i < b->n_mutations; i++) {
        const kl_mutation_kind *k = kl_mutation_kind_of((int)b->mutations[i]->kind_case);
        const Keyload__V1__QueueLaneRef *r = (k && k->ref) ? k->ref(b->mutations[i]) : NULL;
        if (r == NULL || r->tenant == NULL || r->database == NULL)
            continue;
        if (*tenant == NULL) {
            *tenant = r->tenant;
            *database = r->database;
        } else if (strcmp(*tenant, r->tenant) != 0 || strcmp(*database, r->database) != 0) {
            return kl_fail(err, KL_INVALID_ARGUMENT, "database",
                           "mutations[%zu] names database %s/%s but the batch acts on %s/%s; a batch "
                           "acts on one database", i, r->tenant, r->database, *tenant, *database);
        }
    }
    return KL_OK;
}

/* Prefixes the mutation index so the caller knows which one failed. */
static void prefix_index(kl_err *err, size_t i)
{
    char msg[KL_ERR_MESSAGE_MAX];
    memcpy(msg, err->message, sizeof msg);
    if (strncmp(msg, "mutations[", 10) != 0) {
        int h = snprintf(err->message, sizeof err->message, "mutations[%zu]: ", i);
        if (h > 0 && (size_t)h < sizeof err->message)
            memccpy(err->message + h, msg, '\0', sizeof err->message - (size_t)h - 1);
        err->message[sizeof err->message - 1] = '\0';
    }
}

kl_code kl_engine_eval_batch(kl_eval_ctx *c, const Keyload__V1__BatchRequest *b, kl_buf *results,
                             kl_err *err)
{
    /* invariant I-ENG-7: an evaluation context carries a view, limits and a source of lease tokens */
    assert(c->view != NULL && c->limits != NULL && c->random != NULL);
    /* invariant I-ENG-8: only partition 0 evaluates into a catalog batch */
    assert(c->catalog == NULL || c->partition == 0);
    for (size_t i = 0; i < b->n_mutations; i++) {
        const Keyload__V1__Mutation *m = b->mutations[i];
        uint64_t t0 = c->clock_ns ? c->clock_ns() : 0;
        kl_code rc = kl_mutation_access(c->who, m, err);
        if (c->clock_ns)
            c->authz_ns += c->clock_ns() - t0;
        if (rc == KL_OK) {
            const kl_mutation_kind *k = kl_mutation_kind_of((int)m->kind_case);
            /* kl_mutation_access refuses a mutation without a kind unless who is NULL */
            rc = k != NULL ? k->eval(c, m, results, err)
                           : kl_fail(err, KL_INVALID_ARGUMENT, "mutations", "mutations[%zu] has no known kind", i);
        }
        if (rc != KL_OK) {
            prefix_index(err, i);
            return rc;
        }
    }
    return kl_catalog_finish(c, err);
}
