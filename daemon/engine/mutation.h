/* mutation: the table of mutation kinds, one row per kind, and the one path every
 * mutation takes through it (validate, authorize, encode canonically, evaluate),
 * transfers included. Adding a kind is one row here and its functions in its module.
 *
 * The batch-level entry points that walk this table are declared in engine.h
 * (kl_engine_validate_batch, kl_engine_batch_database, kl_engine_eval_batch). This module
 * sits above queue, catalog, transfer, validate and access; none of them calls it. */
#ifndef KL_MUTATION_H
#define KL_MUTATION_H

#include "common/canon.h"
#include "daemon/engine/authz.h"
#include "daemon/engine/engine.h"

typedef struct kl_mutation_kind {
    /* Stateless shape checks; idx is the mutation's index in its batch. */
    kl_code (*validate)(size_t idx, const Keyload__V1__Mutation *m, kl_err *err);
    /* Authorization before evaluation; never called with the trusted local administrator. */
    kl_code (*access)(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err);
    /* The kind's body in the request digest (common/canon.c, shared with the SDK side). */
    kl_canon_mutation_fn canon;
    /* Evaluation into the context's scratch overlay; appends the MutationResult to out. */
    kl_code (*eval)(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err);
    /* The queue ref that names the batch's database, or NULL when the kind names none. */
    const Keyload__V1__QueueLaneRef *(*ref)(const Keyload__V1__Mutation *m);
    /* true: the mutation changes the catalog (it must be alone in its batch). */
    bool (*changes_catalog)(const Keyload__V1__Mutation *m);
} kl_mutation_kind;

/* The row of a kind number, or NULL for NOT_SET and kinds this daemon does not know. */
const kl_mutation_kind *kl_mutation_kind_of(int kind);

/* The authorization of one mutation before it is evaluated. KL_OK when who is NULL. */
kl_code kl_mutation_access(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err);

#endif
