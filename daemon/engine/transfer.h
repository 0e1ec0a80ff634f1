/* transfer: remote queue transfers (ARCHITECTURE.md "Engine"; seeds ADR-088) on one partition.
 *
 * Source side (the source queue's partition): CreateQueueTransfer commits an immutable
 * intent ('X' record, state OutputPending, signed intent token holding the owned message)
 * and its pending index ('Y'); CompleteQueueTransfer verifies a destination receipt token
 * against that intent and moves it to Delivered. Destination side: AcceptQueueTransfer
 * verifies the intent token and, in the same write-set, enqueues the message and stores the
 * immutable dedup receipt ('R') keyed by (source lane, transfer id). Nothing here talks to
 * another partition: tokens carry everything across, signed by the database key.
 *
 * Retention: each lane's 'W' record counts the transfer records it retains and their bytes;
 * a Create or Accept that would pass MaxScanRecords records or MaxBatchBytes bytes is
 * refused RESOURCE_EXHAUSTED before it writes anything. A Create also reserves the most
 * bytes its receipt can add (computed from its claims), so Complete never needs room, and
 * is refused when the Accept batch that will carry its intent token could not fit
 * MaxBatchBytes. Intents and dedup receipts are never expired or collected: acking or
 * removing messages does not touch them, and a queue retaining any cannot be deleted.
 *
 * Authorization (daemon/engine/access.h): the caller is a persisted administrator (checked
 * before evaluation); data, field and header checks here run with administrator flags off.
 *
 * Refusals: errors name the check (detail) and never carry a token, key or message byte.
 * Deterministic refusals of Accept and Complete are committed by the node as no-effect
 * outcomes (node.c, kl_transfer_refusal_is_terminal). */
#ifndef KL_TRANSFER_H
#define KL_TRANSFER_H

#include "common/limits.h"
#include "daemon/engine/engine.h"
#include "keyload/v1/transfer.pb-c.h"

#define KL_TRANSFER_PENDING_PAGE_DEFAULT 64

kl_code kl_transfer_eval_create(kl_eval_ctx *c, const Keyload__V1__CreateQueueTransfer *m, kl_buf *out,
                                kl_err *err);
kl_code kl_transfer_eval_accept(kl_eval_ctx *c, const Keyload__V1__AcceptQueueTransfer *m, kl_buf *out,
                                kl_err *err);
kl_code kl_transfer_eval_complete(kl_eval_ctx *c, const Keyload__V1__CompleteQueueTransfer *m,
                                  kl_buf *out, kl_err *err);
/* AdvanceQueueTransferAttempt (repair false) and AdvanceQueueTransferRepair (repair true),
 * on the source (transfer_advance.c): verify the failure witness against the stored intent,
 * compare-and-set its generation, append one history entry and store the next
 * generation's signed token. An attempt advance takes one of the records and the bytes
 * the intent reserved at Create (refused past MaxQueueTransferAcceptAttempts); a repair
 * is charged against the lane when it commits. */
kl_code kl_transfer_eval_advance(kl_eval_ctx *c, const Keyload__V1__QueueLaneRef *source_queue,
                                 const ProtobufCBinaryData *transfer_id, const ProtobufCBinaryData *witness,
                                 bool repair, kl_buf *out, kl_err *err);
/* SetQueueTransfersPaused for one source lane (the database switch is catalog.c's). */
kl_code kl_transfer_eval_pause_lane(kl_eval_ctx *c, const Keyload__V1__SetQueueTransfersPaused *m,
                                    kl_buf *out, kl_err *err);

/* Whether the batch is one whose deterministic refusals the node commits (it holds an
 * Accept, Complete or an advance: a failed Advance keeps its command id), and whether code is such a refusal (permission, schema, quota,
 * expiry, mismatch: the same request would be refused the same way again). */
bool kl_transfer_batch_records_refusals(const Keyload__V1__BatchRequest *b);
bool kl_transfer_refusal_is_terminal(kl_code code);


/* Reads over applied state (the caller passed the read barrier). c->who is the caller; the
 * answers are malloc'd protobuf answers packed into *answer (caller frees). */
kl_code kl_transfer_inspect(kl_eval_ctx *c, const Keyload__V1__InspectQueueTransferRequest *r,
                            uint8_t **answer, size_t *len, kl_err *err);
kl_code kl_transfer_receipt(kl_eval_ctx *c, const Keyload__V1__InspectQueueTransferReceiptRequest *r,
                            uint8_t **answer, size_t *len, kl_err *err);
/* partition_incarnation: 16 bytes (the cursor binds to it). principal_bytes: the stored
 * size of the caller's principal record, which the read charges with the others. */
kl_code kl_transfer_pending(kl_eval_ctx *c, const Keyload__V1__ListPendingQueueTransfersRequest *r,
                            const uint8_t partition_incarnation[16], uint64_t principal_bytes,
                            uint8_t **answer, size_t *len, kl_err *err);
/* The partition's OutputPending intents: its 'Y' records, every database's (metrics). Reads
 * within v's scan budget: RESOURCE_EXHAUSTED past it. */
kl_code kl_transfer_pending_count(kl_view *v, uint64_t *count, kl_err *err);
/* keyload.v1.ReadQueueTransferFailure (transfer_failure.c; transfer.proto says what it
 * answers). principal: the outcome namespace of the caller (as the node keys outcomes);
 * principal_bytes: its stored record's size (charged); policy_epoch: the caller's current
 * epoch. Writes nothing. */
kl_code kl_transfer_failure(kl_eval_ctx *c, const Keyload__V1__ReadQueueTransferFailureRequest *r,
                            const char *principal, uint64_t principal_bytes, uint64_t policy_epoch,
                            uint8_t **answer, size_t *len, kl_err *err);

#endif
