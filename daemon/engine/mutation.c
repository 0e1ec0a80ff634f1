/* mutation: the table of mutation kinds and the one path through it (mutation.h). */
#include "daemon/engine/mutation.h"

#include "common/guid.h"
#include "common/proto_check.h"
#include "daemon/engine/catalog.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

/* ---- the table: each kind's descriptor, exported by the module that evaluates it ---- */

static const kl_mutation_kind *const kinds[] = {
    [KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE] = &kl_catalog_kind_create_queue,
    [KEYLOAD__V1__MUTATION__KIND_DELETE_QUEUE] = &kl_catalog_kind_delete_queue,
    [KEYLOAD__V1__MUTATION__KIND_ENQUEUE] = &kl_queue_kind_enqueue,
    [KEYLOAD__V1__MUTATION__KIND_RECEIVE] = &kl_queue_kind_receive,
    [KEYLOAD__V1__MUTATION__KIND_ACK] = &kl_queue_kind_ack,
    [KEYLOAD__V1__MUTATION__KIND_RELEASE] = &kl_queue_kind_release,
    [KEYLOAD__V1__MUTATION__KIND_CREATE_DATABASE] = &kl_catalog_kind_create_database,
    [KEYLOAD__V1__MUTATION__KIND_BOOTSTRAP] = &kl_catalog_kind_bootstrap,
    [KEYLOAD__V1__MUTATION__KIND_CREATE_PRINCIPAL] = &kl_catalog_kind_create_principal,
    [KEYLOAD__V1__MUTATION__KIND_GRANT_PERMISSION] = &kl_catalog_kind_grant_permission,
    [KEYLOAD__V1__MUTATION__KIND_REVOKE_PERMISSION] = &kl_catalog_kind_revoke_permission,
    [KEYLOAD__V1__MUTATION__KIND_SET_PRINCIPAL_KEY] = &kl_catalog_kind_set_principal_key,
    [KEYLOAD__V1__MUTATION__KIND_SET_DATABASE_LIMITS] = &kl_catalog_kind_set_database_limits,
    [KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE_TRANSFER] = &kl_transfer_kind_create_queue_transfer,
    [KEYLOAD__V1__MUTATION__KIND_ACCEPT_QUEUE_TRANSFER] = &kl_transfer_kind_accept_queue_transfer,
    [KEYLOAD__V1__MUTATION__KIND_COMPLETE_QUEUE_TRANSFER] = &kl_transfer_kind_complete_queue_transfer,
    [KEYLOAD__V1__MUTATION__KIND_SET_QUEUE_TRANSFERS_PAUSED] = &kl_transfer_kind_set_queue_transfers_paused,
    [KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_ATTEMPT] = &kl_transfer_advance_kind_attempt,
    [KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_REPAIR] = &kl_transfer_advance_kind_repair,
    [KEYLOAD__V1__MUTATION__KIND_SET_TRANSFER_HOLD] = &kl_hold_kind_set_transfer_hold,
    [KEYLOAD__V1__MUTATION__KIND_SET_MEMBER_KEY] = &kl_member_key_kind_set,
};
_Static_assert(sizeof kinds / sizeof kinds[0] == KEYLOAD__V1__MUTATION__KIND_SET_MEMBER_KEY + 1,
               "one row per mutation kind, up to the last kind queue.proto defines");

const kl_mutation_kind *kl_mutation_kind_of(int kind)
{
    if (kind <= 0 || (size_t)kind >= sizeof kinds / sizeof kinds[0] || kinds[kind] == NULL ||
        kinds[kind]->eval == NULL)
        return NULL;
    return kinds[kind];
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
