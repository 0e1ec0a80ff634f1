/* node_retain: outcome retention; see node_retain.h and ARCHITECTURE.md "Store layout". */
#include "daemon/node_retain.h"

#include "common/canon.h"
#include "common/limits.h"
#include "daemon/store/keys.h"
#include "keyload/v1/store.pb-c.h"

#include <stdlib.h>
#include <string.h>

bool kl_retain_batch_expires(const Keyload__V1__BatchRequest *b, bool refused)
{
    if (refused)
        return false;
    for (size_t i = 0; i < b->n_mutations; i++)
        if (kl_canon_kind_keeps_outcome(b->mutations[i]->kind_case))
            return false;
    return true;
}

int64_t kl_retain_index_time(int64_t entry_ms, int64_t first_sent_ms)
{
    return first_sent_ms > entry_ms ? first_sent_ms : entry_ms;
}

int64_t kl_retain_mark_next(int64_t mark, int64_t entry_ms, int64_t retention_ms)
{
    if (retention_ms <= 0 || entry_ms <= retention_ms)
        return mark;
    int64_t horizon = entry_ms - retention_ms;
    return horizon > mark ? horizon : mark;
}

kl_code kl_retain_check_first_sent(int64_t first_sent_ms, int64_t entry_ms, int64_t wall_ms, kl_err *err)
{
    if (first_sent_ms < 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "first_sent_unix_ms",
                       "first_sent_unix_ms must not be negative (0 = not given)");
    if (first_sent_ms > KL_FIRST_SENT_LATEST_MS)
        return kl_fail(err, KL_INVALID_ARGUMENT, "first_sent_unix_ms",
                       "first_sent_unix_ms is past the year 9999, which no clock gives: it is a "
                       "Unix time in milliseconds (0 = not given)");
    /* Partition time may lag the wall clock for long after a clock step or an outage (it
     * catches up slowly, entry_clock.h), so the bound is taken from the later of the two. */
    int64_t ref = wall_ms > entry_ms ? wall_ms : entry_ms;
    if (first_sent_ms > ref && first_sent_ms - ref > KL_FIRST_SENT_AHEAD_MAX_MS)
        return kl_fail(err, KL_UNAVAILABLE, "first_sent_ahead",
                       "first_sent_unix_ms is %lld ms ahead of this leader's clock and of the "
                       "partition's time (at most %lld); the clocks disagree: retry once they "
                       "agree (check the client's clock)",
                       (long long)(first_sent_ms - ref), (long long)KL_FIRST_SENT_AHEAD_MAX_MS);
    return KL_OK;
}

kl_code kl_retain_check_expired(int64_t first_sent_ms, int64_t mark, kl_err *err)
{
    if (first_sent_ms == 0 || first_sent_ms >= mark)
        return KL_OK;
    return kl_fail(err, KL_FAILED_PRECONDITION, "outcome_expired",
                   "first_sent_unix_ms is older than the outcome retention of this partition: the "
                   "outcome of this command id may have expired, so it is not run again; check "
                   "whether it took effect, then use a fresh command id");
}

kl_code kl_retain_mark_read(kl_view *v, int64_t *mark, int64_t *cursor, kl_err *err)
{
    *mark = 0;
    *cursor = 0;
    kl_key k;
    kl_key_meta(&k, KL_RETAIN_MARK_META);
    uint8_t *val = NULL;
    size_t len = 0;
    bool found = false;
    kl_code rc = kl_view_get(v, k.b, k.len, &val, &len, &found, err);
    if (rc != KL_OK || !found)
        return rc;
    if (len == 16) {
        *mark = (int64_t)kl_be64_get(val);
        *cursor = (int64_t)kl_be64_get(val + 8);
    }
    free(val);
    if (len != 16)
        return kl_fail(err, KL_INTERNAL, "store", "the stored outcome mark is %zu bytes, not 16", len);
    return KL_OK;
}

kl_code kl_retain_index(kl_overlay *scratch, int64_t time_ms, const char *principal,
                        const uint8_t command_id[16], kl_err *err)
{
    kl_key k;
    kl_key_outcome_expiry(&k, time_ms, principal, command_id);
    return kl_overlay_set(scratch, k.b, k.len, (const uint8_t *)"", 0, false, 0, err);
}

/* The 'E' keys below the mark, oldest first, at most KL_OUTCOME_SWEEP_MAX. */
typedef struct sweep_scan {
    int64_t mark;
    kl_key *keys;
    size_t n;
} sweep_scan;

static int sweep_collect(void *arg, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    (void)val;
    (void)vlen;
    sweep_scan *s = arg;
    if (klen < 9 || (int64_t)kl_be64_get(key + 1) >= s->mark || klen > sizeof s->keys[0].b)
        return 1;
    memcpy(s->keys[s->n].b, key, klen);
    s->keys[s->n].len = klen;
    return ++s->n == KL_OUTCOME_SWEEP_MAX;
}

static kl_code sweep_delete(kl_view *v, const sweep_scan *s, int64_t *cursor, kl_err *err)
{
    for (size_t i = 0; i < s->n; i++) {
        kl_key ok;
        int64_t t;
        if (kl_key_parse_outcome_expiry(s->keys[i].b, s->keys[i].len, &t, &ok) != 0)
            return kl_fail(err, KL_INTERNAL, "store", "a stored outcome expiry key does not parse");
        kl_code rc = kl_view_del(v, s->keys[i].b, s->keys[i].len, err);
        if (rc == KL_OK)
            rc = kl_view_del(v, ok.b, ok.len, err);
        if (rc != KL_OK)
            return rc;
        *cursor = t;
    }
    return KL_OK;
}

kl_code kl_retain_sweep(kl_view *v, int64_t entry_ms, int64_t retention_ms, bool *full, kl_err *err)
{
    *full = false;
    int64_t mark, cursor;
    kl_code rc = kl_retain_mark_read(v, &mark, &cursor, err);
    if (rc != KL_OK)
        return rc;
    int64_t next = kl_retain_mark_next(mark, entry_ms, retention_ms);
    if (next == 0)
        return KL_OK;
    sweep_scan s = {.mark = next, .keys = malloc(KL_OUTCOME_SWEEP_MAX * sizeof *s.keys)};
    if (s.keys == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory sweeping outcomes");
    /* From the cursor: the keys before it are deleted already, and starting there keeps
     * the seek from walking over their tombstones. */
    kl_key from;
    kl_key_outcome_expiry(&from, cursor, "", (const uint8_t *)"\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0");
    from.len = 9;
    int64_t new_cursor = cursor;
    rc = kl_view_scan_from(v, from.b, 1, from.b, from.len, sweep_collect, &s, err);
    if (rc == KL_OK)
        rc = sweep_delete(v, &s, &new_cursor, err);
    *full = s.n == KL_OUTCOME_SWEEP_MAX;
    free(s.keys);
    if (rc != KL_OK || (next == mark && new_cursor == cursor))
        return rc;
    uint8_t rec[16];
    kl_be64_put(rec, (uint64_t)next);
    kl_be64_put(rec + 8, (uint64_t)new_cursor);
    kl_key mk;
    kl_key_meta(&mk, KL_RETAIN_MARK_META);
    return kl_view_put(v, mk.b, mk.len, rec, sizeof rec, err);
}

/* Packs r into a malloc'd buffer. */
static kl_code pack_receipt(const Keyload__V1__BatchReceipt *r, uint8_t **out, size_t *out_len, kl_err *err)
{
    *out_len = keyload__v1__batch_receipt__get_packed_size(r);
    if ((*out = malloc(*out_len ? *out_len : 1)) == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory encoding a receipt");
    keyload__v1__batch_receipt__pack(r, *out);
    return KL_OK;
}

static bool batch_receives(const Keyload__V1__BatchRequest *b)
{
    for (size_t i = 0; i < b->n_mutations; i++)
        if (b->mutations[i]->kind_case == KEYLOAD__V1__MUTATION__KIND_RECEIVE)
            return true;
    return false;
}

/* Drops every received message's body from r; whether any was dropped. */
static bool drop_bodies(Keyload__V1__BatchReceipt *r)
{
    bool any = false;
    for (size_t i = 0; i < r->n_results; i++) {
        Keyload__V1__MutationResult *res = r->results[i];
        if (res->kind_case != KEYLOAD__V1__MUTATION_RESULT__KIND_RECEIVED)
            continue;
        for (size_t j = 0; j < res->received->n_messages; j++) {
            Keyload__V1__ReceivedMessage *m = res->received->messages[j];
            if (m->message != NULL) {
                keyload__v1__enqueue_message__free_unpacked(m->message, NULL);
                m->message = NULL;
                any = true;
            }
        }
    }
    return any;
}

kl_code kl_retain_strip_bodies(const Keyload__V1__BatchRequest *b, const uint8_t *receipt, size_t len,
                               uint8_t **out, size_t *out_len, kl_err *err)
{
    *out = NULL;
    *out_len = 0;
    if (!batch_receives(b))
        return KL_OK;
    Keyload__V1__BatchReceipt *r = keyload__v1__batch_receipt__unpack(NULL, len, receipt);
    if (r == NULL)
        return KL_OK; /* stored whole */
    /* Only a receipt that re-encodes to the same bytes can be rebuilt byte for byte later. */
    uint8_t *again = NULL;
    size_t again_len = 0;
    kl_code rc = pack_receipt(r, &again, &again_len, err);
    bool canonical = rc == KL_OK && again_len == len && memcmp(again, receipt, len) == 0;
    free(again);
    if (rc == KL_OK && canonical && drop_bodies(r))
        rc = pack_receipt(r, out, out_len, err);
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
    return rc;
}

static kl_code released(kl_err *err)
{
    return kl_fail(err, KL_FAILED_PRECONDITION, "receive_outcome_released",
                   "this command id's Receive committed, but a message it leased was acknowledged or "
                   "released since, or its lease passed on, so the bodies are no longer held for a "
                   "replay; receive again with a fresh command id");
}

/* The body of received message m, read back through its lease; *out NULL when it is gone. */
static kl_code body_of(kl_view *v, const Keyload__V1__ReceivedMessage *m, Keyload__V1__EnqueueMessage **out,
                       kl_err *err)
{
    *out = NULL;
    if (m->lease_token.len != 16)
        return KL_OK;
    kl_key k;
    kl_key_lease(&k, m->lease_token.data);
    uint8_t *val = NULL;
    size_t len = 0;
    bool found = false;
    kl_code rc = kl_view_get(v, k.b, k.len, &val, &len, &found, err);
    if (rc != KL_OK || !found)
        return rc;
    Keyload__V1__LeaseRecord *lr = keyload__v1__lease_record__unpack(NULL, len, val);
    free(val);
    if (lr == NULL)
        return kl_fail(err, KL_INTERNAL, "store", "a stored lease record does not decode");
    kl_key_message(&k, lr->queue_id, lr->lane, lr->seq);
    keyload__v1__lease_record__free_unpacked(lr, NULL);
    found = false;
    if ((rc = kl_view_get(v, k.b, k.len, &val, &len, &found, err)) != KL_OK || !found)
        return rc;
    Keyload__V1__MessageRecord *rec = keyload__v1__message_record__unpack(NULL, len, val);
    free(val);
    if (rec == NULL)
        return kl_fail(err, KL_INTERNAL, "store", "a stored message record does not decode");
    if (rec->seq == m->message_id && rec->lease_token.len == 16 &&
        memcmp(rec->lease_token.data, m->lease_token.data, 16) == 0) {
        *out = rec->message;
        rec->message = NULL;
    }
    keyload__v1__message_record__free_unpacked(rec, NULL);
    return KL_OK;
}

kl_code kl_retain_restore_bodies(kl_view *v, const uint8_t *stored, size_t len, uint8_t **out, size_t *out_len,
                                 kl_err *err)
{
    *out = NULL;
    Keyload__V1__BatchReceipt *r = keyload__v1__batch_receipt__unpack(NULL, len, stored);
    if (r == NULL)
        return kl_fail(err, KL_INTERNAL, "store", "a stored receipt does not decode");
    kl_code rc = KL_OK;
    for (size_t i = 0; rc == KL_OK && i < r->n_results; i++) {
        Keyload__V1__MutationResult *res = r->results[i];
        if (res->kind_case != KEYLOAD__V1__MUTATION_RESULT__KIND_RECEIVED)
            continue;
        for (size_t j = 0; rc == KL_OK && j < res->received->n_messages; j++) {
            Keyload__V1__ReceivedMessage *m = res->received->messages[j];
            if ((rc = body_of(v, m, &m->message, err)) == KL_OK && m->message == NULL)
                rc = released(err);
        }
    }
    if (rc == KL_OK)
        rc = pack_receipt(r, out, out_len, err);
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
    return rc;
}
