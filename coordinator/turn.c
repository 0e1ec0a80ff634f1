#include "coordinator/turn.h"

#include "common/failpoint.h"
#include "common/guid.h"
#include "common/log.h"
#include "coordinator/command_id.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

typedef enum {
    OUT_CONTINUE, /* the stage passed: go on */
    OUT_DONE,     /* Delivered: by this turn or found so */
    OUT_DROP,     /* nothing to do with this event any more (intent gone or changed) */
    OUT_RETRY,    /* transient: back to the buffer with backoff, same command ids */
    OUT_FAILED,   /* terminal refusal: stays pending, recorded, not retried */
    OUT_CANCELLED, /* SIGTERM: stopped between two calls; discovery finds it after a restart */
    OUT_RECOVER,  /* a retained quota/permission failure: back to the buffer, later turns
                   * run the recovery flowchart (KL-6) */
} turn_out;

typedef struct turn {
    kl_coord *co;
    kl_coord_event *ev;
    uint32_t worker;
    Keyload__V1__QueueLaneRef src, dst; /* complete refs (command id inputs) */
    const char *stage;                  /* what failed, for the retry line */
    const char *step;                   /* "accept" / "complete", for a terminal failure */
    bool stale;                         /* a replay answered stale_authority */
    kl_err err;
    char fields[700];                   /* the event's common log fields */
} turn;

bool kl_coord_refusal_is_terminal(kl_code code)
{
    return code == KL_PERMISSION_DENIED || code == KL_RESOURCE_EXHAUSTED ||
           code == KL_FAILED_PRECONDITION || code == KL_CONFLICT || code == KL_INVALID_ARGUMENT;
}

/* A log value without double quotes (messages name fields and limits, never secrets). */
static const char *clean(const char *s, char *buf, size_t cap)
{
    size_t i = 0;
    for (; s != NULL && s[i] != '\0' && i + 1 < cap; i++)
        buf[i] = s[i] == '"' ? '\'' : s[i];
    buf[i] = '\0';
    return buf;
}

static turn_out retry(turn *t, const char *stage)
{
    t->stage = stage;
    return OUT_RETRY;
}

static bool is_stale(const kl_err *e)
{
    return e->code == KL_PERMISSION_DENIED && strcmp(e->detail, "stale_authority") == 0;
}

/* ------------------------------------------------------------ stages */

/* 1. Persisted-principal reload (seeds: "freshly authorized for each signed source/target
 * inspection and Batch"): the daemon checks authority on every call anyway; this makes a
 * revoked or moved principal visible as such, before anything is sent. */
static turn_out authorize(turn *t)
{
    const kl_coord_config *cfg = &t->co->cfg;
    Keyload__V1__ShowPrincipalAnswer *a = NULL;
    if (kl_client_show_principal(t->co->client, cfg->principal_id, &a, &t->err) != KL_OK)
        return retry(t, "principal");
    const Keyload__V1__CatalogPrincipal *p = a->principal;
    bool tenant = p != NULL && p->tenant != NULL && strcmp(p->tenant, cfg->tenant) == 0;
    bool admin = p != NULL && (p->cluster_admin ||
                               (p->database_admin && p->database != NULL &&
                                strcmp(p->database, cfg->db) == 0));
    kl_principal_answer_free(a);
    if (!tenant)
        kl_fail(&t->err, KL_PERMISSION_DENIED, "principal_tenant",
                "principal %s is not in tenant %s", cfg->principal_id, cfg->tenant);
    else if (!admin)
        kl_fail(&t->err, KL_PERMISSION_DENIED, "principal_not_administrator",
                "principal %s is no administrator of %s", cfg->principal_id, cfg->database);
    return tenant && admin ? OUT_CONTINUE : retry(t, "principal");
}

/* The token of the intent's current generation (what discovery listed). */
static const ProtobufCBinaryData *current_token(const Keyload__V1__InspectQueueTransferAnswer *a)
{
    return a->current_token.len ? &a->current_token : &a->intent_token;
}

/* 2 and 5 (source half): the intent must still be this event's, and pending. */
static turn_out inspect_source(turn *t, const char *stage)
{
    kl_coord_event *ev = t->ev;
    Keyload__V1__InspectQueueTransferAnswer *a = NULL;
    kl_code rc = kl_client_inspect_transfer(t->co->client, ev->source_queue, ev->source_lane,
                                            ev->transfer_id_text, &a, &t->err);
    if (rc == KL_NOT_FOUND) {
        atomic_fetch_add(&t->co->stats.dropped, 1);
        KL_INFO("dropped", "%s stage=%s reason=intent_not_found", t->fields, stage);
        return OUT_DROP;
    }
    if (rc != KL_OK)
        return retry(t, stage);
    turn_out o = OUT_CONTINUE;
    if (a->state == KEYLOAD__V1__TRANSFER_STATE__DELIVERED) {
        atomic_fetch_add(&t->co->stats.found_delivered, 1);
        KL_INFO("delivered", "%s stage=%s by=other", t->fields, stage);
        o = OUT_DONE;
    } else if (current_token(a)->len != ev->token_len ||
               memcmp(current_token(a)->data, ev->token, ev->token_len) != 0 ||
               a->generation != ev->generation) {
        atomic_fetch_add(&t->co->stats.proof_changed, 1);
        KL_WARN("proof_changed", "%s stage=%s what=intent stored_gen=%" PRIu64
                " action=drop", t->fields, stage, a->generation);
        o = OUT_DROP;
    } else if (a->state != KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING) {
        kl_fail(&t->err, KL_FAILED_PRECONDITION, "state", "intent state %u is not OutputPending",
                (unsigned)a->state);
        o = retry(t, stage);
    }
    kl_transfer_answer_free(a);
    return o;
}

/* 3, 4 and 5 (destination half): *out is the answer or NULL when there is no receipt. */
static turn_out read_receipt(turn *t, const char *stage,
                             Keyload__V1__InspectQueueTransferReceiptAnswer **out)
{
    kl_coord_event *ev = t->ev;
    kl_code rc = kl_client_transfer_receipt(t->co->client, ev->dest_queue, ev->source_queue,
                                            ev->source_lane, ev->transfer_id_text, out, &t->err);
    if (rc == KL_NOT_FOUND) {
        *out = NULL;
        return OUT_CONTINUE;
    }
    return rc == KL_OK ? OUT_CONTINUE : retry(t, stage);
}

static kl_code command_id(turn *t, kl_coord_step step, char text[KL_GUID_TEXT_LEN + 1])
{
    const kl_coord_config *cfg = &t->co->cfg;
    kl_coord_tuple tu = {
        .principal_id = cfg->principal_id,
        .tenant = cfg->tenant,
        .database = cfg->db,
        .source = &t->src,
        .transfer_id = t->ev->transfer_id,
        .destination = &t->dst,
        .fingerprint = t->ev->fingerprint,
        .fingerprint_len = t->ev->fingerprint_len,
        .generation = t->ev->generation,
    };
    uint8_t id[16];
    kl_code rc = kl_coord_command_id(step, &tu, id, &t->err);
    if (rc == KL_OK)
        kl_guid_format(id, text);
    return rc;
}

/* A refusal of the batch of `step`: terminal (recorded) or transient (retried). A replay
 * refused as stale_authority means the original command DID commit: the caller rereads to
 * learn what it did instead of declaring a failure. */
static turn_out refused(turn *t, const char *step, const char *stage)
{
    if (is_stale(&t->err)) {
        t->stale = true;
        KL_INFO("stale_authority", "%s step=%s note=original_command_committed", t->fields,
                step);
        return OUT_CONTINUE;
    }
    if (kl_coord_refusal_is_terminal(t->err.code)) {
        t->step = step;
        return OUT_FAILED;
    }
    return retry(t, stage);
}

/* Keeps the failure of the command `cmd` (Accept or Complete) with the event. */
static void retain(turn *t, bool in_complete, const char *cmd)
{
    t->ev->has_failure = true;
    t->ev->failure_in_complete = in_complete;
    t->ev->failure_code = t->err.code;
    kl_guid_parse(cmd, t->ev->failed_command_id);
}

/* 4. One canonical Accept. */
static turn_out accept(turn *t)
{
    char cmd[KL_GUID_TEXT_LEN + 1];
    if (command_id(t, KL_COORD_STEP_ACCEPT, cmd) != KL_OK)
        return retry(t, "command_id");
    if (KL_FAILPOINT("coord.before_accept", &t->err) != KL_OK)
        return refused(t, "accept", "before_accept");
    kl_batch *b = NULL;
    if (kl_batch_new(cmd, &b, &t->err) != KL_OK ||
        kl_batch_accept_transfer(b, t->ev->dest_queue, t->ev->dest_lane, t->ev->token,
                                 t->ev->token_len, &t->err) != KL_OK) {
        kl_batch_free(b);
        t->step = "accept";
        return OUT_FAILED; /* the SDK refuses the shape: it will never pass */
    }
    atomic_fetch_add(&t->co->stats.accept_sent, 1);
    KL_INFO("accept_sent", "%s cmd=%s attempt=%" PRIu32, t->fields, cmd, t->ev->attempt + 1);
    kl_receipt *r = NULL;
    kl_code rc = kl_client_batch(t->co->client, b, &r, &t->err);
    kl_batch_free(b);
    if (rc != KL_OK) {
        turn_out o = refused(t, "accept", "accept");
        if (o == OUT_FAILED && (t->err.code == KL_RESOURCE_EXHAUSTED || t->err.code == KL_PERMISSION_DENIED)) {
            /* The seeds' "retained original failure authority": kept with the event; a
             * later turn reads the target afresh instead of resending this command. */
            retain(t, false, cmd);
            return OUT_RECOVER;
        }
        return o;
    }
    const Keyload__V1__BatchReceipt *d = r->decoded;
    const Keyload__V1__TransferAccepted *ta =
        (d != NULL && d->n_results > 0 && d->results[0]->kind_case ==
                                              KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ACCEPTED)
            ? d->results[0]->transfer_accepted
            : NULL;
    bool dedup = ta != NULL && ta->deduplicated;
    atomic_fetch_add(&t->co->stats.accepted, 1);
    if (dedup)
        atomic_fetch_add(&t->co->stats.accept_deduplicated, 1);
    KL_INFO("accepted", "%s cmd=%s deduplicated=%s message_id=%" PRIu64 " dest_partition=%d "
            "index=%" PRIu64, t->fields, cmd, dedup ? "true" : "false",
            ta ? ta->message_id : 0, ta ? ta->partition : -1, ta ? ta->index : 0);
    kl_receipt_free(r);
    if (KL_FAILPOINT("coord.after_accept_sent", &t->err) != KL_OK)
        return retry(t, "after_accept_sent");
    return OUT_CONTINUE;
}

/* 6. Complete with the receipt read (and reread) from the destination. */
static turn_out complete(turn *t, const Keyload__V1__InspectQueueTransferReceiptAnswer *rc_ans)
{
    char cmd[KL_GUID_TEXT_LEN + 1];
    if (command_id(t, KL_COORD_STEP_COMPLETE, cmd) != KL_OK)
        return retry(t, "command_id");
    if (KL_FAILPOINT("coord.before_complete", &t->err) != KL_OK)
        return refused(t, "complete", "before_complete");
    kl_batch *b = NULL;
    if (kl_batch_new(cmd, &b, &t->err) != KL_OK ||
        kl_batch_complete_transfer(b, t->ev->source_queue, t->ev->source_lane,
                                   t->ev->transfer_id_text, rc_ans->receipt_token.data,
                                   rc_ans->receipt_token.len, &t->err) != KL_OK) {
        kl_batch_free(b);
        t->step = "complete";
        return OUT_FAILED;
    }
    atomic_fetch_add(&t->co->stats.complete_sent, 1);
    KL_INFO("complete_sent", "%s cmd=%s attempt=%" PRIu32, t->fields, cmd, t->ev->attempt + 1);
    kl_receipt *r = NULL;
    kl_code rc = kl_client_batch(t->co->client, b, &r, &t->err);
    kl_batch_free(b);
    if (rc != KL_OK) {
        turn_out o = refused(t, "complete", "complete");
        if (o == OUT_FAILED && t->err.code == KL_PERMISSION_DENIED) {
            retain(t, true, cmd); /* a denied Complete waits for a policy repair */
            return OUT_RECOVER;
        }
        if (o != OUT_CONTINUE)
            return o;
        /* stale_authority: the Complete committed under the old authority; whether it
         * moved the intent says the source. */
        o = inspect_source(t, "complete_stale");
        if (o == OUT_CONTINUE) {
            t->step = "complete";
            return OUT_FAILED; /* committed, yet still pending: it was a refusal */
        }
        return o;
    }
    const Keyload__V1__BatchReceipt *d = r->decoded;
    const Keyload__V1__TransferCompleted *tc =
        (d != NULL && d->n_results > 0 && d->results[0]->kind_case ==
                                              KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_COMPLETED)
            ? d->results[0]->transfer_completed
            : NULL;
    bool already = tc != NULL && tc->already;
    kl_receipt_free(r);
    if (KL_FAILPOINT("coord.after_complete_sent", &t->err) != KL_OK)
        return retry(t, "after_complete_sent");
    atomic_fetch_add(&t->co->stats.delivered, 1);
    KL_INFO("delivered", "%s cmd=%s by=self already=%s", t->fields, cmd,
            already ? "true" : "false");
    return OUT_DONE;
}

static bool same_receipt(const Keyload__V1__InspectQueueTransferReceiptAnswer *a,
                         const Keyload__V1__InspectQueueTransferReceiptAnswer *b)
{
    return a != NULL && b != NULL && a->receipt_token.len == b->receipt_token.len &&
           memcmp(a->receipt_token.data, b->receipt_token.data, a->receipt_token.len) == 0;
}

/* The cancellation path of a turn: a stop (SIGTERM) is honoured between two calls, never
 * inside one, so a drain waits for at most one call (bounded by call_timeout_ms), not for
 * a whole turn of them. What was sent stays sent; the deterministic command ids let the
 * next run pick the transfer up exactly where it stands. */
static turn_out stop_point(turn *t, const char *next)
{
    if (!atomic_load(&t->co->stopping))
        return OUT_CONTINUE;
    t->stage = next;
    return OUT_CANCELLED;
}

/* KL-6, the seeds' flowchart after a retained failure: one fresh bounded target read,
 * then at most one Advance. RECEIPT_EXISTS goes on to the original Complete (the caller
 * continues the ordinary path); a witness leads to one Advance, after which discovery
 * lists the next generation and a later turn accepts it; UNCHANGED keeps the failure. */
static turn_out recover(turn *t)
{
    kl_coord_event *ev = t->ev;
    char failed[KL_GUID_TEXT_LEN + 1];
    kl_guid_format(ev->failed_command_id, failed);
    Keyload__V1__ReadQueueTransferFailureAnswer *a = NULL;
    kl_code rrc;
    if (ev->failure_in_complete) {
        /* The denied Complete carried the destination's receipt: read it again, then ask
         * the source about that Complete. */
        Keyload__V1__InspectQueueTransferReceiptAnswer *rcpt = NULL;
        turn_out o = read_receipt(t, "failure_read", &rcpt);
        if (o != OUT_CONTINUE)
            return o;
        if (rcpt == NULL) {
            kl_fail(&t->err, KL_FAILED_PRECONDITION, "proof_changed", "the receipt of a denied Complete is gone");
            return retry(t, "failure_read");
        }
        rrc = kl_client_read_complete_failure(t->co->client, ev->source_queue, ev->source_lane, ev->transfer_id_text,
                                              rcpt->receipt_token.data, rcpt->receipt_token.len, failed, &a,
                                              &t->err);
        kl_transfer_receipt_answer_free(rcpt);
    } else {
        rrc = kl_client_read_transfer_failure(t->co->client, ev->dest_queue, ev->dest_lane, ev->token,
                                              ev->token_len, failed, &a, &t->err);
    }
    if (rrc != KL_OK) {
        if (kl_coord_refusal_is_terminal(t->err.code) || t->err.code == KL_NOT_FOUND) {
            t->step = "failure_read";
            return OUT_FAILED; /* no failure authority after all: an operator's case */
        }
        return retry(t, "failure_read");
    }
    atomic_fetch_add(&t->co->stats.failure_reads, 1);
    turn_out o = OUT_CONTINUE;
    switch (a->verdict) {
    case KEYLOAD__V1__FAILURE_VERDICT__RECEIPT_EXISTS:
        KL_INFO("failure_read", "%s verdict=receipt_exists failed_cmd=%s action=complete", t->fields, failed);
        ev->has_failure = false;
        break;
    case KEYLOAD__V1__FAILURE_VERDICT__WITNESS_ISSUED: {
        atomic_fetch_add(&t->co->stats.witnesses, 1);
        bool repair = ev->failure_code == KL_PERMISSION_DENIED;
        KL_INFO("failure_read", "%s verdict=witness step=%s failed_cmd=%s code=%s action=%s", t->fields,
                ev->failure_in_complete ? "complete" : "accept", failed, kl_code_name(ev->failure_code),
                repair ? "repair" : "advance");
        char cmd[KL_GUID_TEXT_LEN + 1];
        kl_batch *b = NULL;
        if (command_id(t, repair ? KL_COORD_STEP_REPAIR : KL_COORD_STEP_ADVANCE, cmd) != KL_OK) {
            o = retry(t, "command_id");
            break;
        }
        if ((o = stop_point(t, "advance")) != OUT_CONTINUE)
            break;
        if (KL_FAILPOINT("coord.before_advance", &t->err) != KL_OK) {
            o = retry(t, "before_advance");
            break;
        }
        kl_code brc = kl_batch_new(cmd, &b, &t->err);
        if (brc == KL_OK)
            brc = (repair ? kl_batch_advance_transfer_repair : kl_batch_advance_transfer_attempt)(
                b, ev->source_queue, ev->source_lane, ev->transfer_id_text, a->witness_token.data,
                a->witness_token.len, &t->err);
        if (brc != KL_OK) {
            kl_batch_free(b);
            t->step = repair ? "repair" : "advance";
            o = OUT_FAILED;
            break;
        }
        kl_receipt *r = NULL;
        kl_code rc = kl_client_batch(t->co->client, b, &r, &t->err);
        kl_batch_free(b);
        if (rc != KL_OK) {
            /* A failed Advance keeps its id: recorded, left to an operator. */
            o = kl_coord_refusal_is_terminal(rc) ? (t->step = repair ? "repair" : "advance", OUT_FAILED)
                                                 : retry(t, "advance");
            break;
        }
        const Keyload__V1__BatchReceipt *d = r->decoded;
        uint64_t gen = (d != NULL && d->n_results > 0 &&
                        d->results[0]->kind_case == KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ADVANCED)
                           ? d->results[0]->transfer_advanced->generation
                           : 0;
        kl_receipt_free(r);
        atomic_fetch_add(&t->co->stats.advanced, 1);
        KL_INFO("advanced", "%s cmd=%s kind=%s new_gen=%" PRIu64 " note=next_generation_via_discovery",
                t->fields, cmd, repair ? "repair" : "attempt", gen);
        if (KL_FAILPOINT("coord.after_advance", &t->err) != KL_OK) {
            o = retry(t, "after_advance");
            break;
        }
        o = OUT_DROP; /* this generation is over; discovery lists the next */
        break;
    }
    default:
        KL_INFO("failure_read", "%s verdict=unchanged failed_cmd=%s code=%s still=%s action=wait", t->fields,
                failed, kl_code_name(ev->failure_code), a->unchanged_detail ? a->unchanged_detail : "");
        kl_fail(&t->err, ev->failure_code, a->unchanged_detail ? a->unchanged_detail : "unchanged",
                "the failed Accept would still be refused");
        o = OUT_RECOVER;
        break;
    }
    kl_transfer_failure_answer_free(a);
    return o;
}

static turn_out drive(turn *t)
{
    turn_out o;
    if (t->ev->has_failure) {
        if ((o = authorize(t)) != OUT_CONTINUE || (o = stop_point(t, "inspect_source")) != OUT_CONTINUE ||
            (o = inspect_source(t, "inspect_source")) != OUT_CONTINUE ||
            (o = stop_point(t, "failure_read")) != OUT_CONTINUE || (o = recover(t)) != OUT_CONTINUE)
            return o;
        /* The receipt exists: the ordinary path below finds it and completes. */
    }
    if ((o = authorize(t)) != OUT_CONTINUE || (o = stop_point(t, "inspect_source")) != OUT_CONTINUE ||
        (o = inspect_source(t, "inspect_source")) != OUT_CONTINUE ||
        (o = stop_point(t, "read_receipt")) != OUT_CONTINUE)
        return o;
    Keyload__V1__InspectQueueTransferReceiptAnswer *first = NULL, *again = NULL;
    if ((o = read_receipt(t, "read_receipt", &first)) != OUT_CONTINUE)
        return o;
    if (first == NULL) {
        if ((o = stop_point(t, "accept")) != OUT_CONTINUE || (o = accept(t)) != OUT_CONTINUE ||
            (o = stop_point(t, "reread_receipt")) != OUT_CONTINUE ||
            (o = read_receipt(t, "reread_receipt", &first)) != OUT_CONTINUE)
            return o;
        if (first == NULL) {
            if (t->stale) { /* the committed Accept was a refusal (under older authority) */
                t->step = "accept";
                return OUT_FAILED;
            }
            kl_fail(&t->err, KL_UNKNOWN_WRITE_OUTCOME, "no_receipt_after_accept",
                    "no receipt after Accept: the outcome is unknown, retrying the same command");
            return retry(t, "reread_receipt");
        }
    }
    const Keyload__V1__TargetEffect *e = first->target_commit;
    KL_INFO("receipt_read", "%s message_id=%" PRIu64 " dest_partition=%d index=%" PRIu64,
            t->fields, e ? e->message_id : 0, e ? e->partition : -1, e ? e->index : 0);
    /* 5. Before Complete: both proofs again, unchanged. */
    if ((o = stop_point(t, "recheck_source")) == OUT_CONTINUE &&
        (o = inspect_source(t, "recheck_source")) == OUT_CONTINUE &&
        (o = stop_point(t, "recheck_receipt")) == OUT_CONTINUE &&
        (o = read_receipt(t, "recheck_receipt", &again)) == OUT_CONTINUE &&
        !same_receipt(first, again)) {
        atomic_fetch_add(&t->co->stats.proof_changed, 1);
        KL_WARN("proof_changed", "%s stage=recheck_receipt what=%s action=retry", t->fields,
                again == NULL ? "receipt_missing" : "receipt_bytes");
        kl_fail(&t->err, KL_FAILED_PRECONDITION, "proof_changed",
                "the destination receipt changed between two reads");
        o = retry(t, "recheck_receipt");
    }
    if (o == OUT_CONTINUE && (o = stop_point(t, "complete")) == OUT_CONTINUE)
        o = complete(t, first);
    kl_transfer_receipt_answer_free(first);
    kl_transfer_receipt_answer_free(again);
    return o;
}

bool kl_coord_turn(kl_coord *co, uint32_t worker)
{
    kl_coord_buffer *buf = co->buffers[worker];
    kl_coord_event *ev = kl_coord_buffer_pop_due(buf, kl_coord_now_ms());
    if (ev == NULL)
        return false;
    atomic_fetch_add(&co->stats.turns, 1);
    turn t;
    memset(&t, 0, sizeof t);
    t.co = co;
    t.ev = ev;
    t.worker = worker;
    t.src.tenant = t.dst.tenant = co->cfg.tenant;
    t.src.database = t.dst.database = co->cfg.db;
    t.src.queue = ev->source_queue;
    t.src.lane = ev->source_lane;
    t.dst.queue = ev->dest_queue;
    t.dst.lane = ev->dest_lane;
    kl_err_clear(&t.err);
    snprintf(t.fields, sizeof t.fields, "id=%s source=%s/%s dest=%s/%s gen=%" PRIu64 " worker=%u",
             ev->transfer_id_text, ev->source_queue, ev->source_lane, ev->dest_queue,
             ev->dest_lane, ev->generation, worker);

    turn_out o = drive(&t);
    char detail[KL_ERR_DETAIL_MAX], msg[KL_ERR_MESSAGE_MAX];
    switch (o) {
    case OUT_RETRY: {
        ev->attempt++;
        uint32_t wait = kl_coord_backoff_ms(ev->attempt);
        atomic_fetch_add(&co->stats.retries, 1);
        KL_WARN("retry", "%s attempt=%" PRIu32 " reason=%s code=%s detail=\"%s\" error=\"%s\" "
                "next_ms=%" PRIu32, t.fields, ev->attempt, t.stage ? t.stage : "unknown",
                kl_code_name(t.err.code), clean(t.err.detail, detail, sizeof detail),
                clean(t.err.message, msg, sizeof msg), wait);
        kl_coord_buffer_requeue(buf, ev, kl_coord_now_ms() + wait);
        break;
    }
    case OUT_FAILED:
        atomic_fetch_add(&co->stats.terminal_failures, 1);
        KL_ERROR("terminal_failure", "%s step=%s code=%s detail=\"%s\" error=\"%s\" "
                 "action=left_pending", t.fields, t.step ? t.step : "unknown",
                 kl_code_name(t.err.code), clean(t.err.detail, detail, sizeof detail),
                 clean(t.err.message, msg, sizeof msg));
        kl_coord_failed_record(co->failed, ev, t.step ? t.step : "unknown", &t.err,
                               kl_coord_unix_ms());
        kl_coord_buffer_done(buf, ev);
        break;
    case OUT_RECOVER: {
        /* Kept in the buffer (its slot is the transfer's), due after a growing wait. */
        ev->attempt++;
        uint32_t wait = kl_coord_backoff_ms(ev->attempt);
        atomic_fetch_add(&co->stats.failures_retained, 1);
        KL_WARN("failure_retained", "%s code=%s detail=\"%s\" next_ms=%" PRIu32, t.fields,
                kl_code_name(ev->failure_code), clean(t.err.detail, detail, sizeof detail), wait);
        kl_coord_buffer_requeue(buf, ev, kl_coord_now_ms() + wait);
        break;
    }
    case OUT_CANCELLED:
        atomic_fetch_add(&co->stats.cancelled, 1);
        KL_INFO("cancelled", "%s before=%s note=stopping_left_pending", t.fields, t.stage);
        kl_coord_buffer_done(buf, ev);
        break;
    case OUT_DONE:
    case OUT_DROP:
    case OUT_CONTINUE: /* not returned by drive */
        kl_coord_buffer_done(buf, ev);
        break;
    }
    return true;
}
