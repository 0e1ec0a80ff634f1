/* transfer_internal: what the transfer evaluation files (transfer.c, transfer_advance.c,
 * transfer_failure.c) share. Not for use outside daemon/engine/transfer*.c.
 *
 * Catalog reads here run outside the request's scan budget (the catalog is metadata the
 * node reads anyway); record reads go through the view and count against it. Every
 * returned protobuf object belongs to the caller. */
#ifndef KL_TRANSFER_INTERNAL_H
#define KL_TRANSFER_INTERNAL_H

#include "daemon/engine/engine.h"
#include "daemon/engine/record.h"
#include "daemon/store/keys.h"
#include "keyload/v1/catalog.pb-c.h"
#include "keyload/v1/claims.pb-c.h"
#include "keyload/v1/store.pb-c.h"

/* The caller's principal id (the reserved local one when c->who is NULL). */
const char *kl_xfer_caller_id(const kl_eval_ctx *c);
/* The database's catalog record, with its signing key and incarnation (FAILED_PRECONDITION
 * signing_key when the partition's catalog lacks them, NOT_FOUND database). */
kl_code kl_xfer_catalog_database(kl_view *v, const char *tenant, const char *db,
                                 Keyload__V1__CatalogDatabase **out, kl_err *err);
kl_code kl_xfer_catalog_queue(kl_view *v, const Keyload__V1__QueueLaneRef *r, Keyload__V1__CatalogQueue **out,
                              kl_err *err);
/* The database's Ed25519 signing secret (derived, cached in c->signing; caller wipes). */
kl_code kl_xfer_signing_key(const kl_eval_ctx *c, const Keyload__V1__CatalogDatabase *d, uint8_t sk[64],
                            kl_err *err);
/* kl_claims_verify against database d's key, through the re-signing check when this member
 * holds the database's secret (a member without a cluster secret verifies in full). */
kl_code kl_xfer_verify_token(const kl_eval_ctx *c, const char *what, const Keyload__V1__SignedToken *tok,
                             const Keyload__V1__CatalogDatabase *d, kl_err *err);
/* Data, field and header checks with every administrator flag off (ARCHITECTURE.md "Engine"). */
kl_code kl_xfer_data_check(const kl_eval_ctx *c, const Keyload__V1__QueueLaneRef *q,
                           Keyload__V1__Permission perm, const Keyload__V1__EnqueueMessage *msg, kl_err *err);
/* A point read of one protobuf record; *out NULL when absent; *stored its stored size. */
kl_code kl_xfer_get_record(kl_view *v, const kl_key *k, const ProtobufCMessageDescriptor *d,
                           ProtobufCMessage **out, size_t *stored, kl_err *err);
/* A lane's 'W' record (an empty one when absent). */
kl_code kl_xfer_lane_load(kl_view *v, uint64_t qid, const char *lane, Keyload__V1__LaneTransferRecord **out,
                          kl_err *err);
kl_code kl_xfer_lane_save(kl_view *v, uint64_t qid, const char *lane, const Keyload__V1__LaneTransferRecord *l,
                          kl_err *err);
/* RESOURCE_EXHAUSTED (limit:MaxScanRecords / limit:MaxBatchBytes) when the lane cannot
 * retain `records` more records of `bytes` more bytes. */
kl_code kl_xfer_admit(const kl_eval_ctx *c, const Keyload__V1__LaneTransferRecord *l, uint64_t records,
                      uint64_t bytes, const char *side, const Keyload__V1__QueueLaneRef *r, kl_err *err);
bool kl_xfer_bytes_eq(const ProtobufCBinaryData *a, const uint8_t *p, size_t n);
/* Claims of a verified intent token that a correct source always sets (PERMISSION_DENIED
 * intent_claims:<claim> otherwise). */
kl_code kl_xfer_intent_claims_ok(const Keyload__V1__TransferClaims *cl, const Keyload__V1__CatalogDatabase *d,
                                 kl_err *err);
/* Which identity claim of a verified token of `purpose` does not match the stored intent
 * (version, purpose, incarnation, principal, source, target, transfer_id, fingerprint), or
 * NULL. The caller checks what is particular to the purpose. */
const char *kl_xfer_claims_mismatch(const Keyload__V1__TransferClaims *c, Keyload__V1__ClaimPurpose purpose,
                                    const Keyload__V1__TransferRecord *rec, const Keyload__V1__CatalogDatabase *d,
                                    const ProtobufCBinaryData *tid);
/* rec's history with one more entry, *h (initialized here: event, generation and this
 * commit's time, term and index; the caller may set more), as a new array *out (the caller
 * frees it; the entries stay rec's and h's). */
kl_code kl_xfer_history_append(const kl_eval_ctx *c, const Keyload__V1__TransferRecord *rec,
                               Keyload__V1__TransferEvent event, uint64_t generation,
                               Keyload__V1__TransferHistoryEntry *h, Keyload__V1__TransferHistoryEntry ***out,
                               kl_err *err);
/* Packs m into a malloc'd answer. */
kl_code kl_xfer_pack_answer(const ProtobufCMessage *m, uint8_t **answer, size_t *len, kl_err *err);

/* What a coordination read has examined so far (REQ/AC-XFER-COORDINATION-READ-001): each
 * record counts one against MaxScanRecords and its stored bytes against MaxQueryReadBytes. */
typedef struct kl_xfer_charge_t {
    const kl_eval_ctx *c;
    const char *read;            /* what the refusal says would pass the limit */
    uint64_t records, bytes;
} kl_xfer_charge_t;
kl_code kl_xfer_charge(kl_xfer_charge_t *ch, uint64_t bytes, const char *what, kl_err *err);

/* The most one attempt advance can add to an intent record of these intent claims: its
 * history entry and the next generation's token, every number at its widest. */
uint64_t kl_xfer_advance_reserve(const Keyload__V1__TransferClaims *intent);

#endif
