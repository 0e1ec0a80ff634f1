/* validate: the stateless shape checks of each mutation kind, the validate column of its
 * row in daemon/engine/mutation.c. idx is the mutation's index in its batch; every
 * refusal is INVALID_ARGUMENT naming the mutation index and field at fault, never their
 * contents beyond names, which are identifiers. Each expects m->kind_case to be its kind. */
#ifndef KL_VALIDATE_H
#define KL_VALIDATE_H

#include "common/status.h"
#include "keyload/v1/queue.pb-c.h"

#include <stddef.h>

kl_code kl_validate_create_queue(size_t idx, const Keyload__V1__Mutation *m, kl_err *err);
kl_code kl_validate_create_database(size_t idx, const Keyload__V1__Mutation *m, kl_err *err);
kl_code kl_validate_bootstrap(size_t idx, const Keyload__V1__Mutation *m, kl_err *err);
kl_code kl_validate_create_principal(size_t idx, const Keyload__V1__Mutation *m, kl_err *err);
kl_code kl_validate_grant_permission(size_t idx, const Keyload__V1__Mutation *m, kl_err *err);
kl_code kl_validate_revoke_permission(size_t idx, const Keyload__V1__Mutation *m, kl_err *err);
kl_code kl_validate_set_principal_key(size_t idx, const Keyload__V1__Mutation *m, kl_err *err);
kl_code kl_validate_set_database_limits(size_t idx, const Keyload__V1__Mutation *m, kl_err *err);
kl_code kl_validate_delete_queue(size_t idx, const Keyload__V1__Mutation *m, kl_err *err);
kl_code kl_validate_enqueue(size_t idx, const Keyload__V1__Mutation *m, kl_err *err);
kl_code kl_validate_receive(size_t idx, const Keyload__V1__Mutation *m, kl_err *err);
kl_code kl_validate_ack(size_t idx, const Keyload__V1__Mutation *m, kl_err *err);
kl_code kl_validate_release(size_t idx, const Keyload__V1__Mutation *m, kl_err *err);
kl_code kl_validate_create_queue_transfer(size_t idx, const Keyload__V1__Mutation *m, kl_err *err);
kl_code kl_validate_accept_queue_transfer(size_t idx, const Keyload__V1__Mutation *m, kl_err *err);
kl_code kl_validate_complete_queue_transfer(size_t idx, const Keyload__V1__Mutation *m, kl_err *err);
kl_code kl_validate_advance_queue_transfer(size_t idx, const Keyload__V1__Mutation *m, kl_err *err);
kl_code kl_validate_set_queue_transfers_paused(size_t idx, const Keyload__V1__Mutation *m, kl_err *err);

#endif
