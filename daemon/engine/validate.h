/* validate: the field-shape checks that the kinds' validate functions share (each kind's
 * own checks are in the module that evaluates it; daemon/engine/kind.h). Stateless; every
 * refusal is INVALID_ARGUMENT naming the mutation index and field at fault, never their
 * contents beyond names, which are identifiers. */
#ifndef KL_VALIDATE_H
#define KL_VALIDATE_H

#include "common/status.h"
#include "keyload/v1/queue.pb-c.h"

#include <stdbool.h>
#include <stddef.h>

/* A queue ref at mutations[idx].kind.field: tenant, database and queue names, and the
 * lane's name when lane_allowed (a lane where none is allowed is refused). Like the two
 * below, it formats the field's path only when it refuses. */
kl_code kl_validate_ref(size_t idx, const char *kind, const char *field, const Keyload__V1__QueueLaneRef *r,
                        bool lane_allowed, kl_err *err);
/* An EnqueueMessage at mutations[idx].kind.message: header and field counts, keys, value
 * sizes, expiry and delay. */
kl_code kl_validate_message(size_t idx, const char *kind, const Keyload__V1__EnqueueMessage *m, kl_err *err);
/* mutations[idx].kind.lease_tokens: 1..KL_RECEIVE_MAX tokens of 16 bytes each. */
kl_code kl_validate_tokens(size_t idx, const char *kind, size_t n, const ProtobufCBinaryData *t, kl_err *err);
/* mutations[idx].what.transfer_id: a 16-byte GUID that is not all zero. */
kl_code kl_validate_transfer_id(size_t idx, const char *what, const ProtobufCBinaryData *id, kl_err *err);

#endif
