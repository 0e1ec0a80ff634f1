/* keyload.v1.ReadQueueTransferFailure (transfer.h): the fresh, bounded target read
 * of the seeds' flowchart after a failed Accept (on the destination), and the same read for
 * a denied Complete (on the source). It writes nothing: the "would the same
 * Accept pass now" question is answered by evaluating that Accept into a scratch overlay
 * that is dropped. */
#include "common/canon.h"
#include "common/guid.h"
#include "daemon/engine/access.h"
#include "daemon/engine/claims.h"
#include "daemon/engine/overlay.h"
#include "daemon/engine/transfer.h"
#include "daemon/engine/transfer_internal.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH_METHOD "keyload.v1.Batch"

/* Whether the stored outcome is that of a batch of exactly this one mutation under the
 * failed command id: its request digest is that batch's. */
static kl_code outcome_is_batch_of(const char *principal, const Keyload__V1__OutcomeRecord *o,
                                   const ProtobufCBinaryData *cmd, Keyload__V1__Mutation *m, bool *yes,
                                   kl_err *err)
{
    Keyload__V1__BatchRequest b = KEYLOAD__V1__BATCH_REQUEST__INIT;
    b.command_id = *cmd;
    b.n_mutations = 1;
    b.mutations = &m;
    b.first_sent_unix_ms = o->first_sent_unix_ms; /* in the digest when the sender set it */
    uint8_t digest[KL_DIGEST_LEN];
    if (kl_canon_batch_digest(BATCH_METHOD, principal, &b, digest) != 0)
        return kl_record_oom(err);
    *yes = kl_xfer_bytes_eq(&o->request_digest, digest, sizeof digest);
    return KL_OK;
}

/* ... of one Accept of this token to this target. */
static kl_code outcome_is_this_accept(const char *principal, const Keyload__V1__OutcomeRecord *o,
                                      const Keyload__V1__ReadQueueTransferFailureRequest *r,
                                      const Keyload__V1__QueueLaneRef *target, bool *yes, kl_err *err)
{
    Keyload__V1__AcceptQueueTransfer a = KEYLOAD__V1__ACCEPT_QUEUE_TRANSFER__INIT;
    a.destination_queue = (Keyload__V1__QueueLaneRef *)target;
    a.intent_token = r->intent_token;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_ACCEPT_QUEUE_TRANSFER;
    m.accept_queue_transfer = &a;
    return outcome_is_batch_of(principal, o, &r->failed_command_id, &m, yes, err);
}

static kl_code sign_witness(const kl_eval_ctx *c, const Keyload__V1__CatalogDatabase *d,
                            const Keyload__V1__TransferClaims *ic, const ProtobufCBinaryData *failed_cmd,
                            int32_t code, uint8_t **token, size_t *len, kl_err *err)
{
    uint8_t sk[64];
    kl_code rc = kl_xfer_signing_key(c, d, sk, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__TransferClaims w = KEYLOAD__V1__TRANSFER_CLAIMS__INIT;
    w.version = KL_CLAIMS_VERSION;
    w.purpose = KEYLOAD__V1__CLAIM_PURPOSE__TRANSFER_FAILURE_WITNESS;
    w.database_incarnation = d->incarnation;
    w.source = ic->source;
    w.target = ic->target;
    w.transfer_id = ic->transfer_id;
    w.generation = ic->generation;
    w.principal_id = ic->principal_id;
    w.fingerprint = ic->fingerprint;
    w.issued_unix_ms = c->now_ms;
    w.failed_command_id = *failed_cmd;
    w.failure_code = code;
    rc = kl_claims_sign(&w, sk, d->signing_key_id.data, token, len, err);
    sodium_memzero(sk, sizeof sk);
    return rc;
}

/* The verdict of the evaluated command: a witness when it would pass now, UNCHANGED with the
 * detail of a terminal refusal (why must outlive the answer); a transient refusal is the
 * read's own error. */
static kl_code settle(const kl_eval_ctx *c, const Keyload__V1__CatalogDatabase *d,
                      const Keyload__V1__TransferClaims *ic, const Keyload__V1__OutcomeRecord *o,
                      const ProtobufCBinaryData *failed, kl_code would, const kl_err *why,
                      Keyload__V1__ReadQueueTransferFailureAnswer *a, uint8_t **witness, size_t *wlen, kl_err *err)
{
    if (would == KL_OK) {
        kl_code rc = sign_witness(c, d, ic, failed, o->error_code, witness, wlen, err);
        if (rc == KL_OK) {
            a->verdict = KEYLOAD__V1__FAILURE_VERDICT__WITNESS_ISSUED;
            a->witness_token.data = *witness;
            a->witness_token.len = *wlen;
        }
        return rc;
    }
    if (kl_transfer_refusal_is_terminal(would)) {
        a->verdict = KEYLOAD__V1__FAILURE_VERDICT__UNCHANGED;
        a->unchanged_detail = (char *)why->detail;
        return KL_OK;
    }
    *err = *why; /* transient (or internal): the caller reads again later */
    return would;
}

static kl_code pack_verdict(const kl_eval_ctx *c, const kl_xfer_charge_t *ch,
                            Keyload__V1__ReadQueueTransferFailureAnswer *a, uint8_t **answer, size_t *len,
                            kl_err *err)
{
    a->records_charged = ch->records;
    a->bytes_charged = ch->bytes;
    a->applied_index = kl_store_applied_index(c->view->store);
    return kl_xfer_pack_answer(&a->base, answer, len, err);
}

/* ... of one Complete of this receipt for this transfer. */
static kl_code outcome_is_this_complete(const char *principal, const Keyload__V1__OutcomeRecord *o,
                                        const Keyload__V1__ReadQueueTransferFailureRequest *r,
                                        const Keyload__V1__QueueLaneRef *source, bool *yes, kl_err *err)
{
    Keyload__V1__CompleteQueueTransfer cq = KEYLOAD__V1__COMPLETE_QUEUE_TRANSFER__INIT;
    cq.source_queue = (Keyload__V1__QueueLaneRef *)source;
    cq.transfer_id = r->transfer_id;
    cq.receipt_token = r->receipt_token;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_COMPLETE_QUEUE_TRANSFER;
    m.complete_queue_transfer = &cq;
    return outcome_is_batch_of(principal, o, &r->failed_command_id, &m, yes, err);
}

/* The committed outcome under (principal, failed_command_id), charged; NOT_FOUND when none. */
static kl_code load_outcome(kl_eval_ctx *c, kl_xfer_charge_t *ch, const char *principal,
                            const ProtobufCBinaryData *cmd, Keyload__V1__OutcomeRecord **o, kl_err *err)
{
    if (!kl_guid_valid(cmd->data, cmd->len))
        return kl_fail(err, KL_INVALID_ARGUMENT, "failed_command_id",
                       "failed_command_id must be a 16-byte GUID that is not all zero");
    kl_key k;
    size_t stored = 0;
    kl_key_outcome(&k, principal, cmd->data);
    kl_code rc = kl_xfer_get_record(c->view, &k, &keyload__v1__outcome_record__descriptor, (ProtobufCMessage **)o,
                                    &stored, err);
    if (rc == KL_OK)
        rc = kl_xfer_charge(ch, stored, "outcome", err);
    if (rc == KL_OK && *o == NULL)
        rc = kl_fail(err, KL_NOT_FOUND, "failed_command_id",
                     "no outcome is committed under failed_command_id for this principal on this partition");
    return rc;
}

/* The denied-Complete read on the source (transfer.proto): fresh authorization, a changed
 * policy epoch, then the same Complete evaluated into a dropped overlay. */
static kl_code complete_failure(kl_eval_ctx *c, const Keyload__V1__ReadQueueTransferFailureRequest *r,
                                const char *principal, uint64_t principal_bytes, uint64_t policy_epoch,
                                uint8_t **answer, size_t *len, kl_err *err)
{
    kl_xfer_charge_t ch = {c, "reading a transfer failure", 0, 0};
    Keyload__V1__QueueLaneRef src;
    kl_claims_lane(&src, r->source_queue);
    Keyload__V1__QueueRecord *q = NULL;
    Keyload__V1__TransferRecord *rec = NULL;
    Keyload__V1__TransferClaims *ic = NULL;
    Keyload__V1__CatalogDatabase *d = NULL;
    Keyload__V1__OutcomeRecord *o = NULL;
    uint8_t *witness = NULL;
    size_t witness_len = 0, stored = 0;
    uint64_t qid;
    kl_key k;
    kl_overlay scratch;
    kl_overlay_init(&scratch);
    kl_buf results = {0};
    Keyload__V1__ReadQueueTransferFailureAnswer a = KEYLOAD__V1__READ_QUEUE_TRANSFER_FAILURE_ANSWER__INIT;
    kl_code rc = kl_access_transfer_admin(c->who, src.tenant, src.database, err);
    if (rc == KL_OK)
        rc = kl_xfer_data_check(c, &src, KEYLOAD__V1__PERMISSION__QUEUE_INSPECT, NULL, err);
    if (rc == KL_OK)
        rc = kl_xfer_charge(&ch, principal_bytes, "principal", err);
    if (rc == KL_OK)
        rc = kl_engine_load_queue(c->view, &src, &qid, &q, err);
    if (rc == KL_OK)
        rc = kl_xfer_charge(&ch, keyload__v1__queue_record__get_packed_size(q), "queue", err);
    if (rc != KL_OK)
        goto done;
    kl_key_transfer(&k, qid, src.lane, r->transfer_id.data);
    if ((rc = kl_xfer_get_record(c->view, &k, &keyload__v1__transfer_record__descriptor, (ProtobufCMessage **)&rec,
                                 &stored, err)) != KL_OK ||
        (rc = kl_xfer_charge(&ch, stored, "intent", err)) != KL_OK)
        goto done;
    if (rec == NULL) {
        rc = kl_fail(err, KL_NOT_FOUND, "transfer", "source lane %s/%s has no transfer with this transfer_id",
                     src.queue, src.lane);
        goto done;
    }
    if (rec->state != KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING) {
        rc = kl_fail(err, KL_FAILED_PRECONDITION, "state", "the transfer is Delivered: nothing failed to repair");
        goto done;
    }
    if ((rc = kl_xfer_catalog_database(c->view, src.tenant, src.database, &d, err)) != KL_OK ||
        (rc = kl_xfer_charge(&ch, keyload__v1__catalog_database__get_packed_size(d), "database", err)) != KL_OK ||
        (rc = load_outcome(c, &ch, principal, &r->failed_command_id, &o, err)) != KL_OK)
        goto done;
    bool same = false;
    if ((rc = outcome_is_this_complete(principal, o, r, &src, &same, err)) != KL_OK)
        goto done;
    if (!same || o->error_code != KL_PERMISSION_DENIED || strcmp(o->error_detail, "stale_authority") == 0) {
        rc = kl_fail(err, KL_FAILED_PRECONDITION, "failure_authority",
                     "the outcome under failed_command_id is not a no-effect PERMISSION_DENIED refusal "
                     "of a batch of exactly this one Complete; only such a failure can start a policy "
                     "repair of a Complete");
        goto done;
    }
    a.failure_code = o->error_code;
    a.failure_detail = o->error_detail;
    a.failure_policy_epoch = o->policy_epoch;
    a.policy_epoch = policy_epoch;
    if (o->policy_epoch == policy_epoch) {
        a.verdict = KEYLOAD__V1__FAILURE_VERDICT__UNCHANGED;
        a.unchanged_detail = "policy_epoch";
        goto answer;
    }
    kl_view dry = *c->view;
    dry.scratch = &scratch;
    kl_eval_ctx dc = *c;
    dc.view = &dry;
    Keyload__V1__CompleteQueueTransfer cq = KEYLOAD__V1__COMPLETE_QUEUE_TRANSFER__INIT;
    cq.source_queue = &src;
    cq.transfer_id = r->transfer_id;
    cq.receipt_token = r->receipt_token;
    kl_err why;
    kl_err_clear(&why);
    kl_code would = kl_transfer_eval_complete(&dc, &cq, &results, &why);
    c->view->scanned = dry.scanned;
    if (would == KL_OK) {
        if (kl_claims_decode("intent_token", rec->intent_token.data, rec->intent_token.len, NULL, &ic, err) !=
            KL_OK) {
            rc = kl_record_corrupt(err, "transfer intent");
            goto done;
        }
        ic->generation = rec->generation; /* the generation whose Complete was denied */
    }
    if ((rc = settle(c, d, ic, o, &r->failed_command_id, would, &why, &a, &witness, &witness_len, err)) != KL_OK)
        goto done;
answer:
    rc = pack_verdict(c, &ch, &a, answer, len, err);
done:
    kl_overlay_free(&scratch);
    kl_buf_free(&results);
    free(witness);
    if (q)
        keyload__v1__queue_record__free_unpacked(q, NULL);
    if (rec)
        keyload__v1__transfer_record__free_unpacked(rec, NULL);
    if (ic)
        keyload__v1__transfer_claims__free_unpacked(ic, NULL);
    if (d)
        keyload__v1__catalog_database__free_unpacked(d, NULL);
    if (o)
        keyload__v1__outcome_record__free_unpacked(o, NULL);
    return rc;
}

/* Whether a committed outcome is a no-effect refusal that may start an attempt advance
 * (RESOURCE_EXHAUSTED) or a policy repair (PERMISSION_DENIED, not a stale authority). */
static bool is_failure_authority(const Keyload__V1__OutcomeRecord *o)
{
    return o->error_code != 0 && (o->error_code == KL_RESOURCE_EXHAUSTED || o->error_code == KL_PERMISSION_DENIED) &&
           !(o->error_code == KL_PERMISSION_DENIED && strcmp(o->error_detail, "stale_authority") == 0);
}

/* Evaluates the same Accept against the applied state into a scratch overlay the caller
 * drops (never written); returns what it would answer, *why its refusal. */
static kl_code dry_accept(kl_eval_ctx *c, const Keyload__V1__ReadQueueTransferFailureRequest *r,
                          Keyload__V1__QueueLaneRef *dst, kl_overlay *scratch, kl_buf *results, kl_err *why)
{
    kl_view dry = *c->view;
    dry.scratch = scratch;
    kl_eval_ctx dc = *c;
    dc.view = &dry;
    Keyload__V1__AcceptQueueTransfer acc = KEYLOAD__V1__ACCEPT_QUEUE_TRANSFER__INIT;
    acc.destination_queue = dst;
    acc.intent_token = r->intent_token;
    kl_err_clear(why);
    kl_code would = kl_transfer_eval_accept(&dc, &acc, results, why);
    c->view->scanned = dry.scanned;
    return would;
}

kl_code kl_transfer_failure(kl_eval_ctx *c, const Keyload__V1__ReadQueueTransferFailureRequest *r,
                            const char *principal, uint64_t principal_bytes, uint64_t policy_epoch,
                            uint8_t **answer, size_t *len, kl_err *err)
{
    if (r->source_queue != NULL)
        return complete_failure(c, r, principal, principal_bytes, policy_epoch, answer, len, err);
    kl_xfer_charge_t ch = {c, "reading a transfer failure", 0, 0};
    Keyload__V1__QueueLaneRef dst;
    kl_claims_lane(&dst, r->destination_queue);
    Keyload__V1__SignedToken *tok = NULL;
    Keyload__V1__TransferClaims *ic = NULL;
    Keyload__V1__CatalogDatabase *d = NULL;
    Keyload__V1__QueueRecord *q = NULL;
    Keyload__V1__DedupRecord *dr = NULL;
    Keyload__V1__OutcomeRecord *o = NULL;
    uint8_t *witness = NULL;
    size_t witness_len = 0;
    uint64_t qid;
    kl_key k;
    kl_overlay scratch;
    kl_overlay_init(&scratch);
    kl_buf results = {0};
    Keyload__V1__ReadQueueTransferFailureAnswer a = KEYLOAD__V1__READ_QUEUE_TRANSFER_FAILURE_ANSWER__INIT;
    /* Who may ask: the intent's principal, an administrator, with QueueInspect on the
     * destination for the message's keys (checked after the token). Its QueuePublish is
     * part of "would the Accept pass now" below: a denial still in force is UNCHANGED, so
     * that a coordinator whose grant was revoked keeps waiting for the repair. */
    kl_code rc = kl_access_transfer_admin(c->who, dst.tenant, dst.database, err);
    if (rc == KL_OK)
        rc = kl_xfer_charge(&ch, principal_bytes, "principal", err);
    if (rc == KL_OK)
        rc = kl_claims_decode("intent_token", r->intent_token.data, r->intent_token.len, &tok, &ic, err);
    if (rc != KL_OK)
        goto done;
    if (strcmp(ic->principal_id, kl_xfer_caller_id(c)) != 0) {
        rc = kl_fail(err, KL_PERMISSION_DENIED, "intent_principal",
                     "the intent was created by another principal; only the principal that created a "
                     "transfer may read its failures");
        goto done;
    }
    if (ic->target == NULL || !kl_claims_lane_eq(ic->target, &dst) || ic->target->lane[0] == '\0') {
        rc = kl_fail(err, KL_INVALID_ARGUMENT, "destination_queue",
                     "destination_queue (%s/%s) is not the intent's target", dst.queue, dst.lane);
        goto done;
    }
    if ((rc = kl_xfer_catalog_database(c->view, dst.tenant, dst.database, &d, err)) != KL_OK ||
        (rc = kl_xfer_charge(&ch, keyload__v1__catalog_database__get_packed_size(d), "database", err)) != KL_OK ||
        (rc = kl_xfer_verify_token(c, "intent_token", tok, d, err)) !=
            KL_OK ||
        (rc = kl_xfer_intent_claims_ok(ic, d, err)) != KL_OK ||
        (rc = kl_xfer_data_check(c, &dst, KEYLOAD__V1__PERMISSION__QUEUE_INSPECT, ic->message, err)) != KL_OK ||
        (rc = kl_engine_load_queue(c->view, &dst, &qid, &q, err)) != KL_OK ||
        (rc = kl_xfer_charge(&ch, keyload__v1__queue_record__get_packed_size(q), "queue", err)) != KL_OK)
        goto done;
    /* 1. A receipt always wins. */
    size_t stored = 0;
    kl_key_transfer_dedup(&k, qid, ic->source->queue, ic->source->lane, ic->transfer_id.data);
    if ((rc = kl_xfer_get_record(c->view, &k, &keyload__v1__dedup_record__descriptor, (ProtobufCMessage **)&dr,
                                 &stored, err)) != KL_OK ||
        (rc = kl_xfer_charge(&ch, stored, "receipt", err)) != KL_OK)
        goto done;
    if (dr != NULL) {
        if (!kl_xfer_bytes_eq(&dr->fingerprint, ic->fingerprint.data, ic->fingerprint.len)) {
            rc = kl_fail(err, KL_CONFLICT, "transfer_id",
                         "a different message was already accepted for this source lane and transfer_id");
            goto done;
        }
        a.verdict = KEYLOAD__V1__FAILURE_VERDICT__RECEIPT_EXISTS;
        a.receipt_token = dr->receipt_token;
        a.target_commit = dr->effect;
        goto answer;
    }
    /* 2. The failure authority: the committed no-effect refusal of exactly this Accept. */
    if ((rc = load_outcome(c, &ch, principal, &r->failed_command_id, &o, err)) != KL_OK)
        goto done;
    bool same = false;
    if ((rc = outcome_is_this_accept(principal, o, r, &dst, &same, err)) != KL_OK)
        goto done;
    if (!same || !is_failure_authority(o)) {
        rc = kl_fail(err, KL_FAILED_PRECONDITION, "failure_authority",
                     "the outcome under failed_command_id is not a no-effect RESOURCE_EXHAUSTED or "
                     "PERMISSION_DENIED refusal of a batch of exactly this one Accept; only such a "
                     "failure can start an attempt advance or a policy repair");
        goto done;
    }
    a.failure_code = o->error_code;
    a.failure_detail = o->error_detail;
    a.failure_policy_epoch = o->policy_epoch;
    a.policy_epoch = policy_epoch;
    /* 3. A denial repairs only after a real persisted policy change. */
    if (o->error_code == KL_PERMISSION_DENIED && o->policy_epoch == policy_epoch) {
        a.verdict = KEYLOAD__V1__FAILURE_VERDICT__UNCHANGED;
        a.unchanged_detail = "policy_epoch";
        goto answer;
    }
    /* 4. Would the same Accept pass now? Evaluated, never written. */
    kl_err why;
    kl_code would = dry_accept(c, r, &dst, &scratch, &results, &why);
    if ((rc = settle(c, d, ic, o, &r->failed_command_id, would, &why, &a, &witness, &witness_len, err)) != KL_OK)
        goto done;
answer:
    rc = pack_verdict(c, &ch, &a, answer, len, err);
done:
    kl_overlay_free(&scratch);
    kl_buf_free(&results);
    free(witness);
    if (tok)
        keyload__v1__signed_token__free_unpacked(tok, NULL);
    if (ic)
        keyload__v1__transfer_claims__free_unpacked(ic, NULL);
    if (d)
        keyload__v1__catalog_database__free_unpacked(d, NULL);
    if (q)
        keyload__v1__queue_record__free_unpacked(q, NULL);
    if (dr)
        keyload__v1__dedup_record__free_unpacked(dr, NULL);
    if (o)
        keyload__v1__outcome_record__free_unpacked(o, NULL);
    return rc;
}
