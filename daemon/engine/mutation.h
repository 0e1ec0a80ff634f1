/* mutation: the table of mutation kinds, one row per kind, and the one path every
 * mutation takes through it (validate, authorize, encode canonically, evaluate),
 * transfers included. Each row points at the descriptor (daemon/engine/kind.h) that the
 * kind's module exports; adding a kind is that module's functions and descriptor, its
 * declaration in kind.h and one row here.
 *
 * The batch-level entry points that walk this table are declared in engine.h
 * (kl_engine_validate_batch, kl_engine_batch_database, kl_engine_eval_batch). This module
 * sits above queue, catalog, transfer and transfer_advance (and so above validate and
 * access, which they use); none of them calls it. */
#ifndef KL_MUTATION_H
#define KL_MUTATION_H

#include "common/canon.h"
#include "daemon/engine/authz.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/kind.h"

/* The row of a kind number, or NULL for NOT_SET and kinds this daemon does not know. */
const kl_mutation_kind *kl_mutation_kind_of(int kind);

/* The authorization of one mutation before it is evaluated. KL_OK when who is NULL. */
kl_code kl_mutation_access(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err);

#endif
