#include "coordinator/turn.h"

#include "common/failpoint.h"
#include "common/log.h"
#include "coordinator/command_id.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef kl_coord_turn turn;

static const char *const at_names[KL_COORD_AT_COUNT] = {
    [KL_COORD_AT_NONE] = "none",
    [KL_COORD_AT_RECOVER_PRINCIPAL] = "principal",
    [KL_COORD_AT_RECOVER_SOURCE] = "inspect_source",
    [KL_COORD_AT_FAILURE_RECEIPT] = "failure_receipt",
    [KL_COORD_AT_FAILURE_READ] = "failure_read",
    [KL_COORD_AT_ADVANCE] = "advance",
    [KL_COORD_AT_PRINCIPAL] = "principal",
    [KL_COORD_AT_SOURCE] = "inspect_source",
    [KL_COORD_AT_RECEIPT] = "read_receipt",
    [KL_COORD_AT_ACCEPT] = "accept",
    [KL_COORD_AT_REREAD] = "reread_receipt",
    [KL_COORD_AT_RECHECK_SOURCE] = "recheck_source",
    [KL_COORD_AT_RECHECK_RECEIPT] = "recheck_receipt",
    [KL_COORD_AT_COMPLETE] = "complete",
    [KL_COORD_AT_COMPLETE_STALE] = "complete_stale",
};

const char *kl_coord_turn_at_name(kl_coord_turn_at at)
{
    return at < KL_COORD_AT_COUNT ? at_names[at] : "unknown";
}

bool kl_coord_refusal_is_terminal(kl_code code)
{
    return code == KL_PERMISSION_DENIED || code == KL_RESOURCE_EXHAUSTED ||
           code == KL_FAILED_PRECONDITION || code == KL_CONFLICT || code == KL_INVALID_ARGUMENT;
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
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

static kl_coord_turn_out retry(turn *t, const char *stage)
{
    t->stage = stage;
    return KL_COORD_TURN_RETRY;
}

static bool is_stale(const kl_err *e)
{
    return e->code == KL_PERMISSION_DENIED && strcmp(e->detail, "stale_authority") == 0;
}

/* ------------------------------------------------------------ the calls */

static void note_answer(turn *t);

/* The failpoints around the batch of `at` (NULL for a read). */
static const char *before_failpoint(kl_coord_turn_at at)
{
    return at == KL_COORD_AT_ACCEPT     ? "coord.before_accept"
           : at == KL_COORD_AT_COMPLETE ? "coord.before_complete"
           : at == KL_COORD_AT_ADVANCE  ? "coord.before_advance"
                                        : NULL;
}

static const char *after_failpoint(kl_coord_turn_at at)
{
    return at == KL_COORD_AT_ACCEPT     ? "coord.after_accept_sent"
           : at == KL_COORD_AT_COMPLETE ? "coord.after_complete_sent"
           : at == KL_COORD_AT_ADVANCE  ? "coord.after_advance"
                                        : NULL;
}

bool kl_coord_turn_has_failpoint(const kl_coord_turn *t)
{
    return before_failpoint(t->at) != NULL;
}

bool kl_coord_turn_before(kl_coord_turn *t)
{
    memset(&t->ans, 0, sizeof t->ans);
    kl_err_clear(&t->err);
    t->stage = NULL;
    t->after_failed = false;
    t->answer_noted = false;
    t->call_start_us = now_us();
    const char *fp = before_failpoint(t->at);
    if (fp == NULL)
        return true;
    if (KL_FAILPOINT(fp, &t->err) != KL_OK) {
        t->rc = t->err.code;
        t->stage = fp + strlen("coord.");
        return false;
    }
    /* The log line and counter of a batch that is really sent. */
    if (t->at == KL_COORD_AT_ACCEPT || t->at == KL_COORD_AT_COMPLETE) {
        bool accept = t->at == KL_COORD_AT_ACCEPT;
        atomic_fetch_add(accept ? &t->co->stats.accept_sent : &t->co->stats.complete_sent, 1);
        KL_DEBUG(accept ? "accept_sent" : "complete_sent", "%s cmd=%s attempt=%" PRIu32,
                t->fields, t->cmd, t->ev->attempt + 1);
    }
    return true;
}

static kl_code start_failure_read(turn *t, kl_call_done_fn done, void *arg)
{
    kl_coord_event *ev = t->ev;
    char failed[KL_GUID_TEXT_LEN + 1];
    kl_guid_format(ev->failed_command_id, failed);
    if (ev->failure_in_complete)
        return kl_client_read_complete_failure_start(
            t->co->client, ev->source_queue, ev->source_lane, ev->transfer_id_text,
            t->failure_rcpt->receipt_token.data, t->failure_rcpt->receipt_token.len, failed,
            &t->ans.failure, done, arg, &t->call, &t->err);
    return kl_client_read_transfer_failure_start(t->co->client, ev->dest_queue, ev->dest_lane,
                                                 ev->token, ev->token_len, failed,
                                                 &t->ans.failure, done, arg, &t->call, &t->err);
}

bool kl_coord_turn_start(kl_coord_turn *t, kl_call_done_fn done, void *arg)
{
    kl_client *c = t->co->client;
    kl_coord_event *ev = t->ev;
    kl_code rc;
    t->call = NULL;
    switch (t->at) {
    case KL_COORD_AT_RECOVER_PRINCIPAL:
    case KL_COORD_AT_PRINCIPAL:
        rc = kl_client_show_principal_start(c, t->co->cfg.principal_id, &t->ans.principal, done,
                                            arg, &t->call, &t->err);
        break;
    case KL_COORD_AT_RECOVER_SOURCE:
    case KL_COORD_AT_SOURCE:
    case KL_COORD_AT_RECHECK_SOURCE:
    case KL_COORD_AT_COMPLETE_STALE:
        rc = kl_client_inspect_transfer_start(c, ev->source_queue, ev->source_lane,
                                              ev->transfer_id_text, &t->ans.source, done, arg,
                                              &t->call, &t->err);
        break;
    case KL_COORD_AT_FAILURE_RECEIPT:
    case KL_COORD_AT_RECEIPT:
    case KL_COORD_AT_REREAD:
    case KL_COORD_AT_RECHECK_RECEIPT:
        rc = kl_client_transfer_receipt_start(c, ev->dest_queue, ev->source_queue,
                                              ev->source_lane, ev->transfer_id_text,
                                              &t->ans.receipt, done, arg, &t->call, &t->err);
        break;
    case KL_COORD_AT_FAILURE_READ:
        rc = start_failure_read(t, done, arg);
        break;
    case KL_COORD_AT_ACCEPT:
    case KL_COORD_AT_COMPLETE:
    case KL_COORD_AT_ADVANCE:
        rc = kl_client_batch_start(c, t->batch, &t->ans.batch, done, arg, &t->call, &t->err);
        break;
    default:
        rc = kl_fail(&t->err, KL_INTERNAL, "turn_state", "no call at state %d", (int)t->at);
        break;
    }
    if (rc == KL_OK)
        return true;
    t->rc = rc;
    t->call = NULL;
    return false;
}

void kl_coord_turn_collect(kl_coord_turn *t)
{
    t->rc = kl_call_result(t->call, &t->err);
    kl_call_free(t->call);
    t->call = NULL;
    if (kl_coord_turn_has_after_failpoint(t))
        note_answer(t); /* logged where the after_ failpoint can be seen to follow it */
}

bool kl_coord_turn_has_after_failpoint(const kl_coord_turn *t)
{
    return t->rc == KL_OK && after_failpoint(t->at) != NULL;
}

void kl_coord_turn_after(kl_coord_turn *t)
{
    if (!kl_coord_turn_has_after_failpoint(t))
        return;
    const char *after = after_failpoint(t->at);
    if (KL_FAILPOINT(after, &t->err) != KL_OK) {
        t->after_failed = true;
        t->stage = after + strlen("coord.");
    }
}

/* ------------------------------------------------------------ moving on */

static void note_time(turn *t)
{
    if (t->call_start_us == 0)
        return;
    size_t n = strlen(t->timing);
    long long us = (long long)(now_us() - t->call_start_us);
    if (n + 32 < sizeof t->timing)
        snprintf(t->timing + n, sizeof t->timing - n, "%s%s:%lld", n ? "," : "",
                 kl_coord_turn_at_name(t->at), us);
    t->call_start_us = 0;
}

/* The next call, unless the coordinator is stopping: then the turn ends before it. */
static kl_coord_turn_out go(turn *t, kl_coord_turn_at next)
{
    t->at = next;
    if (atomic_load(&t->co->stopping))
        return kl_coord_turn_cancel(t);
    return KL_COORD_TURN_CONTINUE;
}

kl_coord_turn_out kl_coord_turn_cancel(kl_coord_turn *t)
{
    t->stage = kl_coord_turn_at_name(t->at);
    return KL_COORD_TURN_CANCELLED;
}

static kl_code command_id(turn *t, kl_coord_step step)
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
        kl_guid_format(id, t->cmd);
    return rc;
}

/* Builds the batch of `at` (Accept, Complete or Advance) and moves there. A shape the SDK
 * refuses will never pass: a terminal failure of that step. */
static kl_coord_turn_out go_batch(turn *t, kl_coord_turn_at at, const uint8_t *proof,
                                  size_t proof_len)
{
    kl_coord_event *ev = t->ev;
    kl_coord_step step = at == KL_COORD_AT_ACCEPT     ? KL_COORD_STEP_ACCEPT
                         : at == KL_COORD_AT_COMPLETE ? KL_COORD_STEP_COMPLETE
                         : t->repair                  ? KL_COORD_STEP_REPAIR
                                                      : KL_COORD_STEP_ADVANCE;
    const char *name = at == KL_COORD_AT_ADVANCE ? (t->repair ? "repair" : "advance")
                                                 : kl_coord_turn_at_name(at);
    if (command_id(t, step) != KL_OK)
        return retry(t, "command_id");
    kl_batch_free(t->batch);
    t->batch = NULL;
    kl_code rc = kl_batch_new(t->cmd, &t->batch, &t->err);
    if (rc == KL_OK && at == KL_COORD_AT_ACCEPT)
        rc = kl_batch_accept_transfer(t->batch, ev->dest_queue, ev->dest_lane, ev->token,
                                      ev->token_len, &t->err);
    else if (rc == KL_OK && at == KL_COORD_AT_COMPLETE)
        rc = kl_batch_complete_transfer(t->batch, ev->source_queue, ev->source_lane,
                                        ev->transfer_id_text, proof, proof_len, &t->err);
    else if (rc == KL_OK)
        rc = (t->repair ? kl_batch_advance_transfer_repair : kl_batch_advance_transfer_attempt)(
            t->batch, ev->source_queue, ev->source_lane, ev->transfer_id_text, proof, proof_len,
            &t->err);
    if (rc != KL_OK) {
        t->step = name;
        return KL_COORD_TURN_FAILED;
    }
    return go(t, at);
}

/* ------------------------------------------------------------ results (next) */

/* 1. Persisted-principal reload (seeds: "freshly authorized for each signed source/target
 * inspection and Batch"): the daemon checks authority on every call anyway; this makes a
 * revoked or moved principal visible as such, before anything is sent. */
static kl_coord_turn_out on_principal(turn *t)
{
    const kl_coord_config *cfg = &t->co->cfg;
    if (t->rc != KL_OK)
        return retry(t, "principal");
    const Keyload__V1__CatalogPrincipal *p = t->ans.principal->principal;
    bool tenant = p != NULL && p->tenant != NULL && strcmp(p->tenant, cfg->tenant) == 0;
    bool admin = p != NULL && (p->cluster_admin ||
                               (p->database_admin && p->database != NULL &&
                                strcmp(p->database, cfg->db) == 0));
    if (!tenant)
        kl_fail(&t->err, KL_PERMISSION_DENIED, "principal_tenant",
                "principal %s is not in tenant %s", cfg->principal_id, cfg->tenant);
    else if (!admin)
        kl_fail(&t->err, KL_PERMISSION_DENIED, "principal_not_administrator",
                "principal %s is no administrator of %s", cfg->principal_id, cfg->database);
    if (!tenant || !admin)
        return retry(t, "principal");
    return go(t, t->at == KL_COORD_AT_RECOVER_PRINCIPAL ? KL_COORD_AT_RECOVER_SOURCE
                                                        : KL_COORD_AT_SOURCE);
}

/* The token of the intent's current generation (what discovery listed). */
static const ProtobufCBinaryData *current_token(const Keyload__V1__InspectQueueTransferAnswer *a)
{
    return a->current_token.len ? &a->current_token : &a->intent_token;
}

/* 2 and 5 (source half): the intent must still be this event's, and pending. */
static kl_coord_turn_out check_source(turn *t, const char *stage)
{
    kl_coord_event *ev = t->ev;
    const Keyload__V1__InspectQueueTransferAnswer *a = t->ans.source;
    if (t->rc == KL_NOT_FOUND) {
        atomic_fetch_add(&t->co->stats.dropped, 1);
        KL_INFO("dropped", "%s stage=%s reason=intent_not_found", t->fields, stage);
        return KL_COORD_TURN_DROP;
    }
    if (t->rc != KL_OK)
        return retry(t, stage);
    if (a->state == KEYLOAD__V1__TRANSFER_STATE__DELIVERED) {
        atomic_fetch_add(&t->co->stats.found_delivered, 1);
        KL_INFO("delivered", "%s stage=%s by=other", t->fields, stage);
        return KL_COORD_TURN_DONE;
    }
    if (current_token(a)->len != ev->token_len ||
        memcmp(current_token(a)->data, ev->token, ev->token_len) != 0 ||
        a->generation != ev->generation) {
        atomic_fetch_add(&t->co->stats.proof_changed, 1);
        KL_WARN("proof_changed", "%s stage=%s what=intent stored_gen=%" PRIu64 " action=drop",
                t->fields, stage, a->generation);
        return KL_COORD_TURN_DROP;
    }
    if (a->state != KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING) {
        kl_fail(&t->err, KL_FAILED_PRECONDITION, "state", "intent state %u is not OutputPending",
                (unsigned)a->state);
        return retry(t, stage);
    }
    return KL_COORD_TURN_CONTINUE;
}

static kl_coord_turn_out on_source(turn *t)
{
    const char *stage = kl_coord_turn_at_name(t->at);
    kl_coord_turn_out o = check_source(t, stage);
    if (o != KL_COORD_TURN_CONTINUE)
        return o;
    switch (t->at) {
    case KL_COORD_AT_RECOVER_SOURCE:
        return go(t, t->ev->failure_in_complete ? KL_COORD_AT_FAILURE_RECEIPT
                                                : KL_COORD_AT_FAILURE_READ);
    case KL_COORD_AT_SOURCE:
        return go(t, KL_COORD_AT_RECEIPT);
    case KL_COORD_AT_RECHECK_SOURCE:
        return go(t, KL_COORD_AT_RECHECK_RECEIPT);
    default: /* COMPLETE_STALE: the Complete committed, yet the intent is still pending */
        t->step = "complete";
        return KL_COORD_TURN_FAILED;
    }
}

/* A refusal of the batch of `step`: terminal (recorded) or transient (retried). A replay
 * refused as stale_authority means the original command DID commit: the caller rereads to
 * learn what it did instead of declaring a failure. */
static kl_coord_turn_out refused(turn *t, const char *step, const char *stage)
{
    if (is_stale(&t->err)) {
        t->stale = true;
        KL_INFO("stale_authority", "%s step=%s note=original_command_committed", t->fields,
                step);
        return KL_COORD_TURN_CONTINUE;
    }
    if (kl_coord_refusal_is_terminal(t->err.code)) {
        t->step = step;
        return KL_COORD_TURN_FAILED;
    }
    return retry(t, stage);
}

/* Keeps the failure of the command (Accept or Complete) with the event. */
static void retain(turn *t, bool in_complete)
{
    t->ev->has_failure = true;
    t->ev->failure_in_complete = in_complete;
    t->ev->failure_code = t->err.code;
    kl_guid_parse(t->cmd, t->ev->failed_command_id);
}

/* The first result of a batch receipt when it is of `kind`, else NULL. */
static const Keyload__V1__MutationResult *result_of(const kl_receipt *r,
                                                    Keyload__V1__MutationResult__KindCase kind)
{
    const Keyload__V1__BatchReceipt *d = r != NULL ? r->decoded : NULL;
    return d != NULL && d->n_results > 0 && d->results[0]->kind_case == kind ? d->results[0]
                                                                               : NULL;
}

/* The counters and log line of an Accept or Advance answered OK, once per answer: made
 * where the call ran (before its after_ failpoint), or by next() when a test fed it. */
static void note_answer(turn *t)
{
    if (t->answer_noted || (t->at != KL_COORD_AT_ACCEPT && t->at != KL_COORD_AT_ADVANCE))
        return;
    t->answer_noted = true;
    if (t->at == KL_COORD_AT_ADVANCE) {
        const Keyload__V1__MutationResult *res =
            result_of(t->ans.batch, KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ADVANCED);
        uint64_t gen = res != NULL ? res->transfer_advanced->generation : 0;
        atomic_fetch_add(&t->co->stats.advanced, 1);
        KL_INFO("advanced", "%s cmd=%s kind=%s new_gen=%" PRIu64
                " note=next_generation_via_discovery", t->fields, t->cmd,
                t->repair ? "repair" : "attempt", gen);
        return;
    }
    const Keyload__V1__MutationResult *res =
        result_of(t->ans.batch, KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ACCEPTED);
    const Keyload__V1__TransferAccepted *ta = res ? res->transfer_accepted : NULL;
    bool dedup = ta != NULL && ta->deduplicated;
    atomic_fetch_add(&t->co->stats.accepted, 1);
    if (dedup)
        atomic_fetch_add(&t->co->stats.accept_deduplicated, 1);
    KL_DEBUG("accepted", "%s cmd=%s deduplicated=%s message_id=%" PRIu64 " dest_partition=%d "
            "index=%" PRIu64, t->fields, t->cmd, dedup ? "true" : "false",
            ta ? ta->message_id : 0, ta ? ta->partition : -1, ta ? ta->index : 0);
}

/* 4. The Accept's answer. */
static kl_coord_turn_out on_accept(turn *t)
{
    if (t->rc != KL_OK) {
        kl_coord_turn_out o = refused(t, "accept", t->stage ? t->stage : "accept");
        /* Only a refusal the daemon committed is retained (t->stage names an injected one). */
        if (o == KL_COORD_TURN_FAILED && t->stage == NULL &&
            (t->err.code == KL_RESOURCE_EXHAUSTED || t->err.code == KL_PERMISSION_DENIED)) {
            /* The seeds' "retained original failure authority": kept with the event; a
             * later turn reads the target afresh instead of resending this command. */
            retain(t, false);
            return KL_COORD_TURN_RECOVER;
        }
        return o == KL_COORD_TURN_CONTINUE ? go(t, KL_COORD_AT_REREAD) : o;
    }
    note_answer(t);
    if (t->after_failed)
        return retry(t, "after_accept_sent");
    return go(t, KL_COORD_AT_REREAD);
}

static void log_receipt(turn *t)
{
    const Keyload__V1__TargetEffect *e = t->first->target_commit;
    KL_DEBUG("receipt_read", "%s message_id=%" PRIu64 " dest_partition=%d index=%" PRIu64,
            t->fields, e ? e->message_id : 0, e ? e->partition : -1, e ? e->index : 0);
}

static bool same_receipt(const Keyload__V1__InspectQueueTransferReceiptAnswer *a,
                         const Keyload__V1__InspectQueueTransferReceiptAnswer *b)
{
    return a != NULL && b != NULL && a->receipt_token.len == b->receipt_token.len &&
           memcmp(a->receipt_token.data, b->receipt_token.data, a->receipt_token.len) == 0;
}

/* 3, 4 and 5 (destination half), and the receipt a denied Complete carried. */
static kl_coord_turn_out on_receipt(turn *t)
{
    const char *stage = t->at == KL_COORD_AT_FAILURE_RECEIPT ? "failure_read"
                                                             : kl_coord_turn_at_name(t->at);
    bool absent = t->rc == KL_NOT_FOUND;
    if (!absent && t->rc != KL_OK)
        return retry(t, stage);
    Keyload__V1__InspectQueueTransferReceiptAnswer *a = absent ? NULL : t->ans.receipt;
    t->ans.receipt = NULL; /* owned below */
    switch (t->at) {
    case KL_COORD_AT_FAILURE_RECEIPT:
        if (a == NULL) {
            kl_fail(&t->err, KL_FAILED_PRECONDITION, "proof_changed",
                    "the receipt of a denied Complete is gone");
            return retry(t, stage);
        }
        t->failure_rcpt = a;
        return go(t, KL_COORD_AT_FAILURE_READ);
    case KL_COORD_AT_RECEIPT:
    case KL_COORD_AT_REREAD:
        if (a == NULL && t->at == KL_COORD_AT_RECEIPT)
            return go_batch(t, KL_COORD_AT_ACCEPT, NULL, 0);
        if (a == NULL && t->stale) { /* the committed Accept was a refusal (older authority) */
            t->step = "accept";
            return KL_COORD_TURN_FAILED;
        }
        if (a == NULL) {
            kl_fail(&t->err, KL_UNKNOWN_WRITE_OUTCOME, "no_receipt_after_accept",
                    "no receipt after Accept: the outcome is unknown, retrying the same command");
            return retry(t, stage);
        }
        t->first = a;
        log_receipt(t);
        return go(t, KL_COORD_AT_RECHECK_SOURCE);
    default: { /* RECHECK_RECEIPT: the proof Complete will carry, unchanged */
        bool same = same_receipt(t->first, a);
        kl_transfer_receipt_answer_free(a);
        if (!same) {
            atomic_fetch_add(&t->co->stats.proof_changed, 1);
            KL_WARN("proof_changed", "%s stage=recheck_receipt what=%s action=retry", t->fields,
                    a == NULL ? "receipt_missing" : "receipt_bytes");
            kl_fail(&t->err, KL_FAILED_PRECONDITION, "proof_changed",
                    "the destination receipt changed between two reads");
            return retry(t, stage);
        }
        return go_batch(t, KL_COORD_AT_COMPLETE, t->first->receipt_token.data,
                        t->first->receipt_token.len);
    }
    }
}

/* 6. The Complete's answer. */
static kl_coord_turn_out on_complete(turn *t)
{
    if (t->rc != KL_OK) {
        kl_coord_turn_out o = refused(t, "complete", t->stage ? t->stage : "complete");
        if (o == KL_COORD_TURN_FAILED && t->stage == NULL && t->err.code == KL_PERMISSION_DENIED) {
            retain(t, true); /* a denied Complete waits for a policy repair */
            return KL_COORD_TURN_RECOVER;
        }
        /* stale_authority: the Complete committed under the old authority; whether it
         * moved the intent says the source. */
        return o == KL_COORD_TURN_CONTINUE ? go(t, KL_COORD_AT_COMPLETE_STALE) : o;
    }
    if (t->after_failed)
        return retry(t, "after_complete_sent");
    const Keyload__V1__MutationResult *res =
        result_of(t->ans.batch, KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_COMPLETED);
    bool already = res != NULL && res->transfer_completed->already;
    atomic_fetch_add(&t->co->stats.delivered, 1);
    KL_INFO("delivered", "%s cmd=%s by=self already=%s us=%s", t->fields, t->cmd,
            already ? "true" : "false", t->timing);
    return KL_COORD_TURN_DONE;
}

/* The seeds' flowchart after a retained failure: one fresh bounded failure read, then at
 * most one Advance. RECEIPT_EXISTS goes on to the original Complete (the ordinary path
 * from its first step); a witness leads to one Advance, after which discovery lists the
 * next generation and a later turn accepts it; UNCHANGED keeps the failure. */
static kl_coord_turn_out on_failure_read(turn *t)
{
    kl_coord_event *ev = t->ev;
    char failed[KL_GUID_TEXT_LEN + 1];
    kl_guid_format(ev->failed_command_id, failed);
    if (t->rc != KL_OK) {
        if (kl_coord_refusal_is_terminal(t->err.code) || t->err.code == KL_NOT_FOUND) {
            t->step = "failure_read";
            return KL_COORD_TURN_FAILED; /* no failure authority after all: an operator's case */
        }
        return retry(t, "failure_read");
    }
    atomic_fetch_add(&t->co->stats.failure_reads, 1);
    const Keyload__V1__ReadQueueTransferFailureAnswer *a = t->ans.failure;
    if (a->verdict == KEYLOAD__V1__FAILURE_VERDICT__RECEIPT_EXISTS) {
        KL_INFO("failure_read", "%s verdict=receipt_exists failed_cmd=%s action=complete",
                t->fields, failed);
        ev->has_failure = false;
        return go(t, KL_COORD_AT_PRINCIPAL);
    }
    if (a->verdict == KEYLOAD__V1__FAILURE_VERDICT__WITNESS_ISSUED) {
        atomic_fetch_add(&t->co->stats.witnesses, 1);
        t->repair = ev->failure_code == KL_PERMISSION_DENIED;
        KL_INFO("failure_read", "%s verdict=witness step=%s failed_cmd=%s code=%s action=%s",
                t->fields, ev->failure_in_complete ? "complete" : "accept", failed,
                kl_code_name(ev->failure_code), t->repair ? "repair" : "advance");
        return go_batch(t, KL_COORD_AT_ADVANCE, a->witness_token.data, a->witness_token.len);
    }
    const char *still = a->unchanged_detail ? a->unchanged_detail : "";
    KL_INFO("failure_read", "%s verdict=unchanged failed_cmd=%s code=%s still=%s action=wait",
            t->fields, failed, kl_code_name(ev->failure_code), still);
    kl_fail(&t->err, ev->failure_code, still[0] ? still : "unchanged",
            "the failed Accept would still be refused");
    return KL_COORD_TURN_RECOVER;
}

static kl_coord_turn_out on_advance(turn *t)
{
    const char *name = t->repair ? "repair" : "advance";
    if (t->rc != KL_OK) {
        if (t->stage != NULL)
            return retry(t, t->stage); /* the before_advance failpoint */
        if (kl_coord_refusal_is_terminal(t->rc)) {
            t->step = name; /* a failed Advance keeps its id: recorded, left to an operator */
            return KL_COORD_TURN_FAILED;
        }
        return retry(t, "advance");
    }
    note_answer(t);
    if (t->after_failed)
        return retry(t, "after_advance");
    return KL_COORD_TURN_DROP; /* this generation is over; discovery lists the next */
}

/* Frees the answer of the call just consumed (what the turn keeps was moved out). */
static void free_answer(turn *t, kl_coord_turn_at at)
{
    switch (at) {
    case KL_COORD_AT_RECOVER_PRINCIPAL:
    case KL_COORD_AT_PRINCIPAL:
        kl_principal_answer_free(t->ans.principal);
        break;
    case KL_COORD_AT_RECOVER_SOURCE:
    case KL_COORD_AT_SOURCE:
    case KL_COORD_AT_RECHECK_SOURCE:
    case KL_COORD_AT_COMPLETE_STALE:
        kl_transfer_answer_free(t->ans.source);
        break;
    case KL_COORD_AT_FAILURE_RECEIPT:
    case KL_COORD_AT_RECEIPT:
    case KL_COORD_AT_REREAD:
    case KL_COORD_AT_RECHECK_RECEIPT:
        kl_transfer_receipt_answer_free(t->ans.receipt);
        break;
    case KL_COORD_AT_FAILURE_READ:
        kl_transfer_failure_answer_free(t->ans.failure);
        break;
    case KL_COORD_AT_ACCEPT:
    case KL_COORD_AT_COMPLETE:
    case KL_COORD_AT_ADVANCE:
        kl_receipt_free(t->ans.batch);
        break;
    default:
        break;
    }
    memset(&t->ans, 0, sizeof t->ans);
}

kl_coord_turn_out kl_coord_turn_next(kl_coord_turn *t)
{
    kl_coord_turn_at at = t->at;
    note_time(t);
    kl_coord_turn_out o;
    switch (at) {
    case KL_COORD_AT_RECOVER_PRINCIPAL:
    case KL_COORD_AT_PRINCIPAL:
        o = on_principal(t);
        break;
    case KL_COORD_AT_RECOVER_SOURCE:
    case KL_COORD_AT_SOURCE:
    case KL_COORD_AT_RECHECK_SOURCE:
    case KL_COORD_AT_COMPLETE_STALE:
        o = on_source(t);
        break;
    case KL_COORD_AT_FAILURE_RECEIPT:
    case KL_COORD_AT_RECEIPT:
    case KL_COORD_AT_REREAD:
    case KL_COORD_AT_RECHECK_RECEIPT:
        o = on_receipt(t);
        break;
    case KL_COORD_AT_FAILURE_READ:
        o = on_failure_read(t);
        break;
    case KL_COORD_AT_ADVANCE:
        o = on_advance(t);
        break;
    case KL_COORD_AT_ACCEPT:
        o = on_accept(t);
        break;
    case KL_COORD_AT_COMPLETE:
        o = on_complete(t);
        break;
    default:
        kl_fail(&t->err, KL_INTERNAL, "turn_state", "no call at state %d", (int)at);
        o = retry(t, "turn_state");
        break;
    }
    free_answer(t, at);
    t->after_failed = false;
    t->answer_noted = false;
    return o;
}

void kl_coord_turn_begin(kl_coord_turn *t, kl_coord *co, kl_coord_event *ev, uint32_t worker)
{
    memset(t, 0, sizeof *t);
    t->co = co;
    t->ev = ev;
    t->worker = worker;
    t->src.tenant = t->dst.tenant = co->cfg.tenant;
    t->src.database = t->dst.database = co->cfg.db;
    t->src.queue = ev->source_queue;
    t->src.lane = ev->source_lane;
    t->dst.queue = ev->dest_queue;
    t->dst.lane = ev->dest_lane;
    kl_err_clear(&t->err);
    snprintf(t->fields, sizeof t->fields, "id=%s source=%s/%s dest=%s/%s gen=%" PRIu64 " worker=%u",
             ev->transfer_id_text, ev->source_queue, ev->source_lane, ev->dest_queue,
             ev->dest_lane, ev->generation, worker);
    t->at = ev->has_failure ? KL_COORD_AT_RECOVER_PRINCIPAL : KL_COORD_AT_PRINCIPAL;
}

/* Back to the buffer after a growing wait (a retry, or a retained failure that keeps the
 * transfer's slot). */
static void requeue(turn *t)
{
    t->ev->attempt++;
    kl_coord_buffer_requeue(t->co->buffers[t->worker], t->ev,
                            kl_coord_now_ms() + kl_coord_backoff_ms(t->ev->attempt));
}

void kl_coord_turn_finish(kl_coord_turn *t, kl_coord_turn_out out)
{
    kl_coord *co = t->co;
    kl_coord_event *ev = t->ev;
    kl_coord_buffer *buf = co->buffers[t->worker];
    char detail[KL_ERR_DETAIL_MAX], msg[KL_ERR_MESSAGE_MAX];
    switch (out) {
    case KL_COORD_TURN_RETRY:
        atomic_fetch_add(&co->stats.retries, 1);
        KL_WARN("retry", "%s attempt=%" PRIu32 " reason=%s code=%s detail=\"%s\" error=\"%s\" "
                "next_ms=%" PRIu32, t->fields, ev->attempt + 1, t->stage ? t->stage : "unknown",
                kl_code_name(t->err.code), clean(t->err.detail, detail, sizeof detail),
                clean(t->err.message, msg, sizeof msg), kl_coord_backoff_ms(ev->attempt + 1));
        requeue(t);
        break;
    case KL_COORD_TURN_FAILED:
        atomic_fetch_add(&co->stats.terminal_failures, 1);
        if (t->err.code > KL_OK && t->err.code < KL_CODE_COUNT)
            atomic_fetch_add(&co->stats.terminal_by_code[t->err.code], 1);
        KL_ERROR("terminal_failure", "%s step=%s code=%s detail=\"%s\" error=\"%s\" "
                 "action=left_pending", t->fields, t->step ? t->step : "unknown",
                 kl_code_name(t->err.code), clean(t->err.detail, detail, sizeof detail),
                 clean(t->err.message, msg, sizeof msg));
        kl_coord_failed_record(co->failed, ev, t->step ? t->step : "unknown", &t->err,
                               kl_coord_unix_ms());
        kl_coord_buffer_done(buf, ev);
        break;
    case KL_COORD_TURN_RECOVER:
        atomic_fetch_add(&co->stats.failures_retained, 1);
        KL_WARN("failure_retained", "%s code=%s detail=\"%s\" next_ms=%" PRIu32, t->fields,
                kl_code_name(ev->failure_code), clean(t->err.detail, detail, sizeof detail),
                kl_coord_backoff_ms(ev->attempt + 1));
        requeue(t);
        break;
    case KL_COORD_TURN_CANCELLED:
        atomic_fetch_add(&co->stats.cancelled, 1);
        KL_INFO("cancelled", "%s before=%s note=stopping_left_pending", t->fields,
                t->stage ? t->stage : "unknown");
        kl_coord_buffer_done(buf, ev);
        break;
    default: /* DONE, DROP */
        kl_coord_buffer_done(buf, ev);
        break;
    }
    kl_call_free(t->call); /* not collected: the turn ended without its answer */
    free_answer(t, t->at);
    kl_transfer_receipt_answer_free(t->first);
    kl_transfer_receipt_answer_free(t->failure_rcpt);
    kl_batch_free(t->batch);
    memset(t, 0, sizeof *t);
}
