/* transfer_json: the canonical public JSON of the transfer reads and the display-only
 * description of a token (client/keyload.h documents the keys). Same rules as json.c:
 * one fixed key order, byte strings in base64, states under the seeds' names. Tokens are
 * credentials: KL_JSON_OMIT_TOKENS leaves them out, and a token description never shows
 * the message it carries (only its body's length). */
#include "client/sdk/internal.h"
#include "client/sdk/json_util.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

/* json.c's short names, so both files read alike. */
#define set kl_sdk_json_set
#define u64 kl_sdk_json_u64
#define i64 kl_sdk_json_i64
#define b64 kl_sdk_json_b64
#define text kl_sdk_json_text

static json_t *done(json_t *o, bool ok)
{
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* A lane ref as {tenant, database, queue, lane}; an absent ref is all empty strings, so the
 * keys are always there. */
static json_t *ref_json(const Keyload__V1__QueueLaneRef *r)
{
    static const Keyload__V1__QueueLaneRef none = KEYLOAD__V1__QUEUE_LANE_REF__INIT;
    if (r == NULL)
        r = &none;
    json_t *o = json_object();
    return done(o, o != NULL && set(o, "tenant", text(r->tenant)) &&
                       set(o, "database", text(r->database)) && set(o, "queue", text(r->queue)) &&
                       set(o, "lane", text(r->lane)));
}

static json_t *effect_json(const Keyload__V1__TargetEffect *e)
{
    static const Keyload__V1__TargetEffect none = KEYLOAD__V1__TARGET_EFFECT__INIT;
    if (e == NULL)
        e = &none;
    json_t *o = json_object();
    return done(o, o != NULL && set(o, "message_id", u64(e->message_id)) &&
                       set(o, "partition", i64(e->partition)) && set(o, "term", u64(e->term)) &&
                       set(o, "index", u64(e->index)));
}

/* The events that record a refused Accept (what failed, and how). */
static bool names_failure(Keyload__V1__TransferEvent e)
{
    return e == KEYLOAD__V1__TRANSFER_EVENT__ATTEMPT_ADVANCED ||
           e == KEYLOAD__V1__TRANSFER_EVENT__POLICY_REPAIRED;
}

static json_t *history_json(Keyload__V1__TransferHistoryEntry *const *h, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr != NULL && i < n; i++) {
        json_t *o = json_object();
        o = done(o, o != NULL &&
                        set(o, "event", json_string(kl_transfer_event_name(h[i]->event))) &&
                        set(o, "generation", u64(h[i]->generation)) &&
                        set(o, "unix_ms", i64(h[i]->unix_ms)) && set(o, "term", u64(h[i]->term)) &&
                        set(o, "index", u64(h[i]->index)) &&
                        (!names_failure(h[i]->event) ||
                         (set(o, "failed_command_id", kl_sdk_json_guid(&h[i]->failed_command_id)) &&
                          set(o, "failure_code",
                              json_string(kl_code_name(h[i]->failure_code))))));
        if (o == NULL || json_array_append_new(arr, o) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

/* A token under key unless tokens are omitted; an empty token is null (not there yet). */
static bool set_token(json_t *o, const char *key, const ProtobufCBinaryData *t, unsigned flags)
{
    if (flags & KL_JSON_OMIT_TOKENS)
        return true;
    return set(o, key, t->len ? b64(t->data, t->len) : json_null());
}

char *kl_transfer_to_json(const Keyload__V1__InspectQueueTransferAnswer *a, unsigned flags)
{
    const Keyload__V1__NullableU64 *max = a->max_accept_attempts;
    json_t *o = json_object();
    bool ok = o != NULL && set(o, "state", json_string(kl_transfer_state_name(a->state))) &&
              set(o, "generation", u64(a->generation)) && set(o, "source", ref_json(a->source)) &&
              set(o, "destination", ref_json(a->destination)) &&
              set(o, "principal_id", text(a->principal_id)) &&
              set(o, "fingerprint", b64(a->fingerprint.data, a->fingerprint.len)) &&
              set(o, "max_accept_attempts", max ? u64(max->value) : json_null()) &&
              set(o, "attempt_advances", u64(a->attempt_advances)) &&
              set(o, "retained_records", u64(a->retained_records)) &&
              set(o, "retained_bytes", u64(a->retained_bytes)) &&
              set(o, "reserved_records", u64(a->reserved_records)) &&
              set(o, "reserved_bytes", u64(a->reserved_bytes)) &&
              set(o, "history", history_json(a->history, a->n_history)) &&
              set_token(o, "intent_token", &a->intent_token, flags) &&
              set_token(o, "current_token", &a->current_token, flags) &&
              set_token(o, "receipt_token", &a->receipt_token, flags) &&
              set(o, "applied_index", u64(a->applied_index));
    return kl_sdk_json_dump(done(o, ok), flags);
}

char *kl_transfer_receipt_to_json(const Keyload__V1__InspectQueueTransferReceiptAnswer *a,
                                  unsigned flags)
{
    json_t *o = json_object();
    bool ok = o != NULL && set(o, "destination", ref_json(a->destination)) &&
              set(o, "target_commit", effect_json(a->target_commit)) &&
              set_token(o, "receipt_token", &a->receipt_token, flags) &&
              set(o, "applied_index", u64(a->applied_index));
    return kl_sdk_json_dump(done(o, ok), flags);
}

char *kl_transfer_failure_to_json(const Keyload__V1__ReadQueueTransferFailureAnswer *a,
                                  unsigned flags)
{
    json_t *o = json_object();
    bool ok = o != NULL && set(o, "verdict", json_string(kl_failure_verdict_name(a->verdict))) &&
              set_token(o, "receipt_token", &a->receipt_token, flags) &&
              /* only a receipt has a target commit: null rather than a zero effect */
              set(o, "target_commit", a->target_commit ? effect_json(a->target_commit)
                                                       : json_null()) &&
              set_token(o, "witness_token", &a->witness_token, flags) &&
              set(o, "failure_code", json_string(kl_code_name(a->failure_code))) &&
              set(o, "failure_detail", text(a->failure_detail)) &&
              set(o, "unchanged_detail", text(a->unchanged_detail)) &&
              set(o, "failure_policy_epoch", u64(a->failure_policy_epoch)) &&
              set(o, "policy_epoch", u64(a->policy_epoch)) &&
              set(o, "records_charged", u64(a->records_charged)) &&
              set(o, "bytes_charged", u64(a->bytes_charged)) &&
              set(o, "applied_index", u64(a->applied_index));
    return kl_sdk_json_dump(done(o, ok), flags);
}

static json_t *pending_json(const Keyload__V1__PendingQueueTransfer *p, unsigned flags)
{
    json_t *o = json_object();
    return done(o, o != NULL && set(o, "source", ref_json(p->source)) &&
                       set(o, "transfer_id", kl_sdk_json_guid(&p->transfer_id)) &&
                       set(o, "generation", u64(p->generation)) &&
                       set(o, "destination", ref_json(p->destination)) &&
                       set_token(o, "intent_token", &p->intent_token, flags));
}

char *kl_pending_transfers_to_json(const Keyload__V1__ListPendingQueueTransfersAnswer *a,
                                   unsigned flags)
{
    json_t *o = json_object();
    bool ok = o != NULL && set(o, "items", json_array());
    json_t *items = ok ? json_object_get(o, "items") : NULL;
    for (size_t i = 0; ok && i < a->n_items; i++) {
        json_t *x = pending_json(a->items[i], flags);
        ok = x != NULL && json_array_append_new(items, x) == 0;
    }
    ok = ok && set(o, "next_cursor", b64(a->next_cursor.data, a->next_cursor.len)) &&
         set(o, "done", json_boolean(a->done)) &&
         set(o, "partition_incarnation",
             b64(a->partition_incarnation.data, a->partition_incarnation.len)) &&
         set(o, "cursor_reset", json_boolean(a->cursor_reset)) &&
         set(o, "records_charged", u64(a->records_charged)) &&
         set(o, "bytes_charged", u64(a->bytes_charged)) &&
         set(o, "applied_index", u64(a->applied_index));
    return kl_sdk_json_dump(done(o, ok), flags);
}

/* ---------------------------------------------------------------- token description */

static const char *purpose_name(Keyload__V1__ClaimPurpose p)
{
    switch (p) {
    case KEYLOAD__V1__CLAIM_PURPOSE__TRANSFER_INTENT: return "TransferIntent";
    case KEYLOAD__V1__CLAIM_PURPOSE__TRANSFER_RECEIPT: return "TransferReceipt";
    case KEYLOAD__V1__CLAIM_PURPOSE__TRANSFER_FAILURE_WITNESS: return "TransferFailureWitness";
    default: return "unknown";
    }
}

static json_t *hex(const ProtobufCBinaryData *d)
{
    char *s = malloc(d->len * 2 + 1);
    if (s == NULL)
        return NULL;
    sodium_bin2hex(s, d->len * 2 + 1, d->data, d->len);
    json_t *v = json_string(s);
    free(s);
    return v;
}

static json_t *claims_json(const Keyload__V1__SignedToken *t, const Keyload__V1__TransferClaims *c)
{
    json_t *o = json_object();
    bool ok = o != NULL && set(o, "purpose", json_string(purpose_name(c->purpose))) &&
              set(o, "version", u64(c->version)) &&
              set(o, "database_incarnation",
                  b64(c->database_incarnation.data, c->database_incarnation.len)) &&
              set(o, "source", ref_json(c->source)) && set(o, "target", ref_json(c->target)) &&
              set(o, "transfer_id", kl_sdk_json_guid(&c->transfer_id)) &&
              set(o, "generation", u64(c->generation)) &&
              set(o, "principal_id", text(c->principal_id)) &&
              set(o, "fingerprint_hex", hex(&c->fingerprint)) &&
              /* the message's size, never its content */
              (c->message == NULL || set(o, "body_bytes", u64(c->message->body.len))) &&
              (c->effect == NULL || set(o, "effect", effect_json(c->effect))) &&
              /* a failure witness: which Accept failed, and how */
              (c->purpose != KEYLOAD__V1__CLAIM_PURPOSE__TRANSFER_FAILURE_WITNESS ||
               (set(o, "failed_command_id", kl_sdk_json_guid(&c->failed_command_id)) &&
                set(o, "failure_code", json_string(kl_code_name(c->failure_code))))) &&
              set(o, "issued_unix_ms", i64(c->issued_unix_ms)) &&
              set(o, "key_id", b64(t->key_id.data, t->key_id.len));
    return done(o, ok);
}

kl_code kl_transfer_token_describe(const uint8_t *token, size_t len, unsigned flags, char **out,
                                   kl_err *err)
{
    *out = NULL;
    if (token == NULL || len == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "token", "token is empty");
    Keyload__V1__SignedToken *t = keyload__v1__signed_token__unpack(NULL, len, token);
    Keyload__V1__TransferClaims *c =
        t ? keyload__v1__transfer_claims__unpack(NULL, t->claims.len, t->claims.data) : NULL;
    kl_code rc = KL_OK;
    if (c == NULL || t->claims.len == 0) {
        rc = kl_fail(err, KL_INVALID_ARGUMENT, "token",
                     "token does not decode as a keyload.v1.SignedToken holding TransferClaims");
    } else {
        *out = kl_sdk_json_dump(claims_json(t, c), flags);
        if (*out == NULL)
            rc = kl_sdk_oom(err);
    }
    if (c != NULL)
        keyload__v1__transfer_claims__free_unpacked(c, NULL);
    if (t != NULL)
        keyload__v1__signed_token__free_unpacked(t, NULL);
    return rc;
}
