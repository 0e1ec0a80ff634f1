/* AdvanceQueueTransferAttempt and AdvanceQueueTransferRepair (transfer.h): the
 * source's side of the seeds' capacity retry and policy repair. Every write goes to the
 * view's scratch overlay, so a refusal anywhere leaves nothing behind; a refusal is then
 * committed by the node under the caller's command id like Accept's and Complete's. */
#include "common/guid.h"
#include "daemon/engine/access.h"
#include "daemon/engine/claims.h"
#include "daemon/engine/kind.h"
#include "daemon/engine/transfer.h"
#include "daemon/engine/transfer_internal.h"
#include "daemon/engine/validate.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Which claim of a verified witness does not fit the stored intent, or NULL. The
 * generation is the compare-and-set, checked after (it has its own answer). */
static const char *witness_mismatch(const Keyload__V1__TransferClaims *w, const Keyload__V1__TransferRecord *rec,
                                    const Keyload__V1__CatalogDatabase *d, const ProtobufCBinaryData *tid,
                                    kl_code want_failure)
{
    const char *bad =
        kl_xfer_claims_mismatch(w, KEYLOAD__V1__CLAIM_PURPOSE__TRANSFER_FAILURE_WITNESS, rec, d, tid);
    if (bad != NULL)
        return bad;
    if (!kl_guid_valid(w->failed_command_id.data, w->failed_command_id.len))
        return "failed_command_id";
    if (w->failure_code != (int32_t)want_failure)
        return "failure_code";
    if (w->generation == 0)
        return "generation";
    return NULL;
}

/* The last history entry, when it is the advance this witness already made. */
static bool advanced_by(const Keyload__V1__TransferRecord *rec, const Keyload__V1__TransferClaims *w,
                        Keyload__V1__TransferEvent event)
{
    if (rec->n_history == 0 || w->generation + 1 != rec->generation)
        return false;
    const Keyload__V1__TransferHistoryEntry *h = rec->history[rec->n_history - 1];
    return h->event == event && h->generation == rec->generation &&
           kl_xfer_bytes_eq(&h->failed_command_id, w->failed_command_id.data, w->failed_command_id.len);
}

static kl_code advanced_result(kl_buf *out, const Keyload__V1__TransferRecord *rec, const uint8_t *token,
                               size_t token_len, uint64_t charged, bool already, kl_err *err)
{
    Keyload__V1__TransferAdvanced ta = KEYLOAD__V1__TRANSFER_ADVANCED__INIT;
    ta.generation = rec->generation;
    ta.intent_token.data = (uint8_t *)token;
    ta.intent_token.len = token_len;
    ta.charged_bytes = charged;
    ta.already = already;
    Keyload__V1__MutationResult res = KEYLOAD__V1__MUTATION_RESULT__INIT;
    res.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ADVANCED;
    res.transfer_advanced = &ta;
    return kl_engine_add_result(out, &res, err);
}

/* Why this advance cannot be made now, or KL_OK: a delivered intent, a witness of
 * another generation, or (attempt advances only) no ceiling or no reserved attempt left. */
static kl_code advance_refusal(const Keyload__V1__TransferRecord *rec, const Keyload__V1__TransferClaims *w,
                               bool repair, kl_err *err)
{
    if (rec->state != KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING) {
        return kl_fail(err, KL_FAILED_PRECONDITION, "state",
                       "the transfer is Delivered; a delivered transfer never takes another attempt");
    }
    if (w->generation != rec->generation) {
        return kl_fail(err, KL_FAILED_PRECONDITION, "witness:generation",
                       "the witness is for generation %llu but the intent is at generation %llu; nothing "
                       "changed", (unsigned long long)w->generation, (unsigned long long)rec->generation);
    }
    if (!repair) {
        if (rec->max_accept_attempts == NULL) {
            return kl_fail(err, KL_FAILED_PRECONDITION, "max_queue_transfer_accept_attempts",
                           "the intent was created while its database's MaxQueueTransferAcceptAttempts was "
                           "null, so it takes no attempt advance; an operator may accept it with a new "
                           "command id");
        }
        if (rec->attempt_advances + 1 >= rec->max_accept_attempts->value || rec->reserved_records == 0) {
            return kl_fail(err, KL_RESOURCE_EXHAUSTED, "limit:MaxQueueTransferAcceptAttempts",
                           "the intent has had %llu Accept attempts, its MaxQueueTransferAcceptAttempts "
                           "(%llu) reserved at creation; it stays OutputPending",
                           (unsigned long long)rec->attempt_advances + 1,
                           (unsigned long long)rec->max_accept_attempts->value);
        }
    }
    return KL_OK;
}

/* Charges an advance's exact bytes: an attempt advance turns one reserved record into a
 * charged one and gives the reservation's slack back; a repair, for which nothing was
 * reserved, needs room on the lane now. */
static kl_code charge_advance(const kl_eval_ctx *c, Keyload__V1__TransferRecord *rec,
                              Keyload__V1__LaneTransferRecord *lane, uint64_t exact, uint64_t reserve, bool repair,
                              const Keyload__V1__QueueLaneRef *src, kl_err *err)
{
    if (!repair) {
        /* One reserved record becomes a charged one; the reservation's slack goes back. */
        if (exact > reserve || rec->reserved_bytes < reserve || lane->bytes < reserve) {
            return kl_fail(err, KL_INTERNAL, "advance_reserve",
                           "an attempt advance needs %llu bytes, more than the %llu its intent reserved",
                           (unsigned long long)exact, (unsigned long long)reserve);
        }
        rec->reserved_records--;
        rec->reserved_bytes -= reserve;
        lane->bytes -= reserve - exact;
    } else {
        /* Nothing was reserved for repairs: the lane must have room now. */
        kl_code rc = kl_xfer_admit(c, lane, 1, exact, "source", src, err);
        if (rc != KL_OK)
            return rc;
        lane->records += 1;
        lane->bytes += exact;
    }
    return KL_OK;
}

/* The next generation's token: the immutable intent's claims (*ic, unpacked for the
 * caller to free), one generation on, signed once the caller may publish to the source.
 * *reserve: the bytes an attempt advance reserved for it. */
static kl_code sign_next_generation(const kl_eval_ctx *c, const Keyload__V1__QueueLaneRef *src,
                                    const Keyload__V1__TransferRecord *rec, const Keyload__V1__CatalogDatabase *d,
                                    Keyload__V1__TransferClaims **ic, uint64_t *reserve, uint8_t **token,
                                    size_t *token_len, kl_err *err)
{
    uint8_t sk[64];
    kl_code rc;
    if (kl_claims_decode("intent_token", rec->intent_token.data, rec->intent_token.len, NULL, ic, err) != KL_OK)
        return kl_record_corrupt(err, "transfer intent");
    if ((rc = kl_xfer_data_check(c, src, KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, NULL, err)) != KL_OK ||
        (rc = kl_xfer_signing_key(c, d, sk, err)) != KL_OK)
        return rc;
    *reserve = kl_xfer_advance_reserve(*ic);
    (*ic)->generation = rec->generation + 1;
    (*ic)->issued_unix_ms = c->now_ms;
    rc = kl_claims_sign(*ic, sk, d->signing_key_id.data, token, token_len, err);
    sodium_memzero(sk, sizeof sk);
    return rc;
}

kl_code kl_transfer_eval_advance(kl_eval_ctx *c, const Keyload__V1__QueueLaneRef *source_queue,
                                 const ProtobufCBinaryData *transfer_id, const ProtobufCBinaryData *witness,
                                 bool repair, kl_buf *out, kl_err *err)
{
    Keyload__V1__QueueLaneRef src;
    kl_claims_lane(&src, source_queue);
    Keyload__V1__QueueRecord *q = NULL;
    Keyload__V1__TransferRecord *rec = NULL;
    Keyload__V1__SignedToken *tok = NULL;
    Keyload__V1__TransferClaims *w = NULL, *ic = NULL;
    Keyload__V1__CatalogDatabase *d = NULL;
    Keyload__V1__LaneTransferRecord *lane = NULL;
    Keyload__V1__TransferHistoryEntry **hist = NULL;
    uint8_t *token = NULL;
    size_t token_len = 0;
    uint64_t qid;
    kl_key k;
    const kl_code want = repair ? KL_PERMISSION_DENIED : KL_RESOURCE_EXHAUSTED;
    const Keyload__V1__TransferEvent event =
        repair ? KEYLOAD__V1__TRANSFER_EVENT__POLICY_REPAIRED : KEYLOAD__V1__TRANSFER_EVENT__ATTEMPT_ADVANCED;
    kl_code rc = kl_engine_load_queue(c->view, &src, &qid, &q, err);
    if (rc != KL_OK)
        goto done;
    kl_key_transfer(&k, qid, src.lane, transfer_id->data);
    if ((rc = kl_xfer_get_record(c->view, &k, &keyload__v1__transfer_record__descriptor,
                                 (ProtobufCMessage **)&rec, NULL, err)) != KL_OK)
        goto done;
    if (rec == NULL) {
        rc = kl_fail(err, KL_NOT_FOUND, "transfer", "source lane %s/%s has no transfer with this transfer_id",
                     src.queue, src.lane);
        goto done;
    }
    if ((rc = kl_claims_decode("witness_token", witness->data, witness->len, &tok, &w, err)) != KL_OK ||
        (rc = kl_xfer_catalog_database(c->view, src.tenant, src.database, &d, err)) != KL_OK ||
        (rc = kl_xfer_verify_token(c, "witness_token", tok, d, err)) !=
            KL_OK)
        goto done;
    const char *bad = witness_mismatch(w, rec, d, transfer_id, want);
    if (bad != NULL) {
        char detail[40];
        snprintf(detail, sizeof detail, "witness:%s", bad);
        rc = kl_fail(err, KL_FAILED_PRECONDITION, detail,
                     "witness_token's %s does not fit this %s of the stored intent; nothing changed",
                     bad, repair ? "policy repair" : "attempt advance");
        goto done;
    }
    const ProtobufCBinaryData *current = rec->attempt_token.len ? &rec->attempt_token : &rec->intent_token;
    if (advanced_by(rec, w, event)) {
        /* The advance this witness asked for was made (by an earlier command): say so, with
         * the generation it made, instead of refusing a retry that lost its answer. */
        rc = advanced_result(out, rec, current->data, current->len, 0, true, err);
        goto done;
    }
    if ((rc = advance_refusal(rec, w, repair, err)) != KL_OK)
        goto done;
    uint64_t reserve = 0;
    if ((rc = sign_next_generation(c, &src, rec, d, &ic, &reserve, &token, &token_len, err)) != KL_OK)
        goto done;
    Keyload__V1__TransferHistoryEntry h;
    if ((rc = kl_xfer_history_append(c, rec, event, rec->generation + 1, &h, &hist, err)) != KL_OK)
        goto done;
    h.failed_command_id = w->failed_command_id;
    h.failure_code = w->failure_code;
    /* The exact bytes this advance adds to the stored record (charged_bytes was counted at
     * its widest when the intent was created, so its own growth is already paid for). */
    size_t before = keyload__v1__transfer_record__get_packed_size(rec);
    Keyload__V1__TransferHistoryEntry **old_hist = rec->history;
    size_t old_n = rec->n_history;
    ProtobufCBinaryData old_token = rec->attempt_token;
    rec->history = hist;
    rec->n_history = old_n + 1;
    rec->attempt_token.data = token;
    rec->attempt_token.len = token_len;
    rec->generation++;
    rec->advance_records++;
    if (!repair)
        rec->attempt_advances++;
    size_t after = keyload__v1__transfer_record__get_packed_size(rec);
    uint64_t exact = after > before ? after - before : 0;
    if ((rc = kl_xfer_lane_load(c->view, qid, src.lane, &lane, err)) != KL_OK)
        goto restore;
    if ((rc = charge_advance(c, rec, lane, exact, reserve, repair, &src, err)) != KL_OK)
        goto restore;
    rec->charged_bytes += exact;
    if ((rc = kl_view_put_msg(c->view, k.b, k.len, &rec->base, err)) == KL_OK &&
        (rc = kl_xfer_lane_save(c->view, qid, src.lane, lane, err)) == KL_OK)
        rc = advanced_result(out, rec, token, token_len, exact, false, err);
restore:
    rec->history = old_hist;
    rec->n_history = old_n;
    rec->attempt_token = old_token;
done:
    free(token);
    free(hist);
    if (q)
        keyload__v1__queue_record__free_unpacked(q, NULL);
    if (rec)
        keyload__v1__transfer_record__free_unpacked(rec, NULL);
    if (tok)
        keyload__v1__signed_token__free_unpacked(tok, NULL);
    if (w)
        keyload__v1__transfer_claims__free_unpacked(w, NULL);
    if (ic)
        keyload__v1__transfer_claims__free_unpacked(ic, NULL);
    if (d)
        keyload__v1__catalog_database__free_unpacked(d, NULL);
    if (lane)
        keyload__v1__lane_transfer_record__free_unpacked(lane, NULL);
    return rc;
}

/* ==== the rows of the Advance kinds (daemon/engine/kind.h) ====
 * Each kind's shape checks, authorization, evaluation and database ref, and the
 * descriptor daemon/engine/mutation.c indexes by kind number. */

/* ---- AdvanceQueueTransferAttempt ---- */

static kl_code validate_advance_queue_transfer(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    kl_code rc;
    bool attempt = m->kind_case == KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_ATTEMPT;
    const char *name = attempt ? "advance_queue_transfer_attempt" : "advance_queue_transfer_repair";
    const Keyload__V1__QueueLaneRef *src = attempt ? m->advance_queue_transfer_attempt->source_queue
                                                   : m->advance_queue_transfer_repair->source_queue;
    const ProtobufCBinaryData *tid = attempt ? &m->advance_queue_transfer_attempt->transfer_id
                                             : &m->advance_queue_transfer_repair->transfer_id;
    const ProtobufCBinaryData *wit = attempt ? &m->advance_queue_transfer_attempt->witness_token
                                             : &m->advance_queue_transfer_repair->witness_token;
    if ((rc = kl_validate_ref(idx, name, "source_queue", src, true, err)) != KL_OK)
        return rc;
    if ((rc = kl_validate_transfer_id(idx, name, tid, err)) != KL_OK)
        return rc;
    if (wit->len == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "witness_token", "mutations[%zu].%s.witness_token is missing",
                       idx, name);
    return KL_OK;
}

static kl_code access_advance_queue_transfer(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    /* The same fields in both; the data check (QueuePublish on the source, like
     * Complete) runs in transfer_advance.c after the witness. */
    const Keyload__V1__QueueLaneRef *src = m->kind_case == KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_ATTEMPT
                                               ? m->advance_queue_transfer_attempt->source_queue
                                               : m->advance_queue_transfer_repair->source_queue;
    return kl_access_transfer_admin(who, src->tenant, src->database, err);
}

static kl_code eval_advance_queue_transfer_attempt(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out,
                                                   kl_err *err)
{
    const Keyload__V1__AdvanceQueueTransferAttempt *a = m->advance_queue_transfer_attempt;
    return kl_transfer_eval_advance(c, a->source_queue, &a->transfer_id, &a->witness_token, false, out, err);
}

static const Keyload__V1__QueueLaneRef *ref_advance_queue_transfer_attempt(const Keyload__V1__Mutation *m) { return m->advance_queue_transfer_attempt->source_queue; }

const kl_mutation_kind kl_transfer_advance_kind_attempt = {
    .validate = validate_advance_queue_transfer,
    .access = access_advance_queue_transfer,
    .canon = kl_canon_advance_queue_transfer_attempt,
    .eval = eval_advance_queue_transfer_attempt,
    .ref = ref_advance_queue_transfer_attempt,
};

/* ---- AdvanceQueueTransferRepair ---- */

static kl_code eval_advance_queue_transfer_repair(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out,
                                                  kl_err *err)
{
    const Keyload__V1__AdvanceQueueTransferRepair *a = m->advance_queue_transfer_repair;
    return kl_transfer_eval_advance(c, a->source_queue, &a->transfer_id, &a->witness_token, true, out, err);
}

static const Keyload__V1__QueueLaneRef *ref_advance_queue_transfer_repair(const Keyload__V1__Mutation *m) { return m->advance_queue_transfer_repair->source_queue; }

const kl_mutation_kind kl_transfer_advance_kind_repair = {
    .validate = validate_advance_queue_transfer,
    .access = access_advance_queue_transfer,
    .canon = kl_canon_advance_queue_transfer_repair,
    .eval = eval_advance_queue_transfer_repair,
    .ref = ref_advance_queue_transfer_repair,
};
