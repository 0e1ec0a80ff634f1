/* kind: what a mutation kind is to the engine (ARCHITECTURE.md "Engine"), and the one
 * descriptor each kind's module exports. The module that evaluates a kind owns all of its
 * row: shape checks, authorization, evaluation and the ref that names the batch's
 * database, with the canonical encoding pointing into common/canon.c (the SDK shares it).
 * daemon/engine/mutation.c indexes these descriptors by kind number; nothing below it
 * calls through them. */
#ifndef KL_KIND_H
#define KL_KIND_H

#include "common/canon.h"
#include "daemon/engine/engine.h"

struct kl_authz_subject;

typedef struct kl_mutation_kind {
    /* Stateless shape checks; idx is the mutation's index in its batch. */
    kl_code (*validate)(size_t idx, const Keyload__V1__Mutation *m, kl_err *err);
    /* Authorization before evaluation; never called with the trusted local administrator. */
    kl_code (*access)(const struct kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err);
    /* The kind's body in the request digest (common/canon.c, shared with the SDK side). */
    kl_canon_mutation_fn canon;
    /* Evaluation into the context's scratch overlay; appends the MutationResult to out. */
    kl_code (*eval)(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err);
    /* The queue ref that names the batch's database, or NULL when the kind names none. */
    const Keyload__V1__QueueLaneRef *(*ref)(const Keyload__V1__Mutation *m);
    /* true: the mutation changes the catalog (it must be alone in its batch). NULL: never. */
    bool (*changes_catalog)(const Keyload__V1__Mutation *m);
    /* Names no queue and changes no catalog: its caller sends it to each partition it means
     * (SetTransferHold, a backup's hold on every partition), not through a queue's route. */
    bool per_partition;
} kl_mutation_kind;

/* engine/queue */
extern const kl_mutation_kind kl_queue_kind_enqueue;
extern const kl_mutation_kind kl_queue_kind_receive;
extern const kl_mutation_kind kl_queue_kind_ack;
extern const kl_mutation_kind kl_queue_kind_release;

/* engine/catalog */
extern const kl_mutation_kind kl_catalog_kind_create_queue;
extern const kl_mutation_kind kl_catalog_kind_delete_queue;
extern const kl_mutation_kind kl_catalog_kind_create_database;
extern const kl_mutation_kind kl_catalog_kind_bootstrap;
extern const kl_mutation_kind kl_catalog_kind_create_principal;
extern const kl_mutation_kind kl_catalog_kind_grant_permission;
extern const kl_mutation_kind kl_catalog_kind_revoke_permission;
extern const kl_mutation_kind kl_catalog_kind_set_principal_key;
extern const kl_mutation_kind kl_catalog_kind_set_database_limits;

/* engine/transfer */
extern const kl_mutation_kind kl_transfer_kind_create_queue_transfer;
extern const kl_mutation_kind kl_transfer_kind_accept_queue_transfer;
extern const kl_mutation_kind kl_transfer_kind_complete_queue_transfer;
extern const kl_mutation_kind kl_transfer_kind_set_queue_transfers_paused;

/* engine/hold */
extern const kl_mutation_kind kl_hold_kind_set_transfer_hold;

/* engine/member_key */
extern const kl_mutation_kind kl_member_key_kind_set;

/* engine/transfer_advance */
extern const kl_mutation_kind kl_transfer_advance_kind_attempt;
extern const kl_mutation_kind kl_transfer_advance_kind_repair;

#endif
