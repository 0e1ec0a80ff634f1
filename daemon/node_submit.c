/* node_submit: the write path, kl_node_submit_batch as a pipeline of named steps (submit:
 * admit, slot, dedupe, evaluate, join), the evaluation of one batch for a slot of the group,
 * and the group it joins; node.c proposes the group (kl_node_flush) and applies it. */
#include "daemon/node_internal.h"

#include "common/canon.h"
#include "common/failpoint.h"
#include "daemon/engine/catalog.h"
#include "daemon/engine/transfer.h"
#include "daemon/node_retain.h"
#include "daemon/store/keys.h"
#include "keyload/v1/store.pb-c.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define BATCH_METHOD "keyload.v1.Batch"

/* Bounds of one grouped entry (several batches' write-sets in one LogEntry). Batches: every
 * member applies an entry in one RocksDB write and the leader answers its callers in one
 * pass, so the count bounds how long one apply holds the loop. Bytes: the entry must fit one
 * replication frame (the peer link's limit is MaxFrameBytes + 64 KiB, less the append's
 * slack, so the bound is also capped at MaxFrameBytes), and a smaller one keeps a follower's
 * decode and the frames queued behind it on the link short. A batch whose write-set alone
 * is larger still goes out, alone, as before grouping. */
#define NODE_GROUP_MAX_BATCHES 64
#define NODE_GROUP_MAX_BYTES (512u << 10)

static void reply_err(kl_node_reply_fn fn, void *cookie, const kl_err *err)
{
    fn(cookie, err->code, err, NULL, 0);
}
/* Whether a request with digest `digest` is the one stored with `stored` (and its
 * first-sent time): the same digest, or the same batch sent again with another
 * first_sent_unix_ms (a retry from a process that did not keep it): the digest of b with the
 * stored first-sent time matches. Replays stay byte for byte the original's. */
static bool same_request(const char *principal, const Keyload__V1__BatchRequest *b,
                         const uint8_t digest[KL_DIGEST_LEN], const uint8_t stored[KL_DIGEST_LEN],
                         int64_t stored_first_sent)
{
    if (memcmp(digest, stored, KL_DIGEST_LEN) == 0)
        return true;
    if (b->first_sent_unix_ms == stored_first_sent)
        return false;
    Keyload__V1__BatchRequest again = *b;
    again.first_sent_unix_ms = stored_first_sent;
    uint8_t d[KL_DIGEST_LEN];
    return kl_canon_batch_digest(BATCH_METHOD, principal, &again, d) == 0 &&
           memcmp(d, stored, KL_DIGEST_LEN) == 0;
}

/* The first-sent time of a parked request (0 when it has none or does not decode). */
static int64_t parked_first_sent(const kl_parked *p)
{
    Keyload__V1__BatchRequest *b = keyload__v1__batch_request__unpack(NULL, p->len, p->req);
    int64_t t = b != NULL ? b->first_sent_unix_ms : 0;
    if (b != NULL)
        keyload__v1__batch_request__free_unpacked(b, NULL);
    return t;
}

/* Looks up a committed outcome. Returns KL_OK with *found and, when found, handled (the
 * caller was answered). A replay whose principal's policy epoch differs from the one its
 * outcome recorded (after the original's own effect: epoch_after_effect) is refused
 * PERMISSION_DENIED "stale_authority": the original did commit and its outcome stays
 * stored; a fresh command id runs under current grants. */
static kl_code replay_committed(kl_node *n, const char *principal, const Keyload__V1__BatchRequest *b,
                                const uint8_t digest[KL_DIGEST_LEN], uint64_t policy_epoch, bool *found,
                                kl_node_reply_fn fn, void *cookie, kl_err *err)
{
    const uint8_t *cmd = b->command_id.data;
    kl_key k;
    kl_key_outcome(&k, principal, cmd);
    uint8_t *val;
    size_t len;
    kl_code rc = kl_store_get(n->store, k.b, k.len, &val, &len, found, err);
    if (rc != KL_OK || !*found)
        return rc;
    Keyload__V1__OutcomeRecord *o = keyload__v1__outcome_record__unpack(NULL, len, val);
    free(val);
    if (o == NULL)
        return kl_fail(err, KL_INTERNAL, "store", "stored outcome record does not decode");
    if (o->request_digest.len != KL_DIGEST_LEN ||
        !same_request(principal, b, digest, o->request_digest.data, o->first_sent_unix_ms)) {
        unsigned long long at = (unsigned long long)o->index;
        keyload__v1__outcome_record__free_unpacked(o, NULL);
        return kl_fail(err, KL_CONFLICT, "command_id_reused",
                       "command_id was already used for a different batch (committed at index %llu)", at);
    }
    if (o->error_code != 0) {
        /* A committed refusal answers the same every time (ARCHITECTURE.md "Engine"), whatever the
         * principal's grants became: it had no effect, so there is no outcome to withhold
         * from changed authority (stale_authority would wrongly say it committed one). */
        kl_err e;
        kl_fail(&e, (kl_code)o->error_code, o->error_detail, "%s", o->error_message);
        keyload__v1__outcome_record__free_unpacked(o, NULL);
        fn(cookie, e.code, &e, NULL, 0);
        return KL_OK;
    }
    if (o->policy_epoch != policy_epoch) {
        unsigned long long at = (unsigned long long)o->index, was = (unsigned long long)o->policy_epoch;
        keyload__v1__outcome_record__free_unpacked(o, NULL);
        return kl_fail(err, KL_PERMISSION_DENIED, "stale_authority",
                       "the original command committed (at index %llu) under policy epoch %llu; the "
                       "principal's grants have changed since (epoch %llu), so its outcome is not "
                       "returned again: use a fresh command id under the current grants",
                       at, was, (unsigned long long)policy_epoch);
    }
    if (!o->receipt_bodies_elided) {
        fn(cookie, KL_OK, NULL, o->receipt.data, o->receipt.len);
        keyload__v1__outcome_record__free_unpacked(o, NULL);
        return KL_OK;
    }
    /* A Receive's outcome without its bodies: read back through the leases, or refused
     * (ARCHITECTURE.md "Store layout"). */
    kl_view v = {.store = n->store, .reads = &n->reads, .pending = &n->overlay, .scan_limit = UINT64_MAX};
    uint8_t *full = NULL;
    size_t full_len = 0;
    kl_code rc2 = kl_retain_restore_bodies(&v, o->receipt.data, o->receipt.len, &full, &full_len, err);
    keyload__v1__outcome_record__free_unpacked(o, NULL);
    if (rc2 != KL_OK)
        return rc2;
    fn(cookie, KL_OK, NULL, full, full_len);
    free(full);
    return KL_OK;
}

/* The caller's policy epoch with this batch's own effect in (the view's scratch holds it):
 * what its outcome records, so that a batch changing its own principal (an administrator
 * granting itself) does not make its own replay stale, while any later change still does.
 * Outcomes stored before this rule hold the epoch before the effect and replay as they
 * always did. Only partition 0 changes principals, so elsewhere it is the admission epoch. */
static kl_code epoch_after_effect(kl_node *n, kl_view *v, const char *principal, const node_subject *subj,
                                  uint64_t *out, kl_err *err)
{
    *out = subj->policy_epoch;
    /* Without a catalog change in the batch or pending, the record is the one loaded. */
    if (subj->record == NULL || n->cfg.partition != 0 || !kl_subject_cache_view_changes_catalog(v))
        return KL_OK;
    Keyload__V1__CatalogPrincipal *rec = NULL;
    bool found = false;
    uint64_t limit = v->scan_limit, scanned = v->scanned;
    v->scan_limit = UINT64_MAX; /* a catalog read is not the request's scan */
    kl_code rc = kl_catalog_find_principal(v, principal, &rec, &found, err);
    v->scan_limit = limit;
    v->scanned = scanned;
    if (rc == KL_OK && found)
        *out = rec->policy_epoch;
    if (rec != NULL)
        keyload__v1__catalog_principal__free_unpacked(rec, NULL);
    return rc;
}

/* Encodes BatchReceipt fields 1-5, the results (field 6), field 7 and (when not 0)
 * field 8, in field order. */
static int encode_receipt(kl_buf *out, const Keyload__V1__BatchRequest *b, int partition,
                          uint64_t index, uint64_t term, int64_t now, const kl_buf *results,
                          const uint8_t digest[KL_DIGEST_LEN], uint64_t catalog_version)
{
    Keyload__V1__BatchReceipt head = KEYLOAD__V1__BATCH_RECEIPT__INIT;
    head.command_id = b->command_id;
    head.partition = partition;
    head.term = term;
    head.index = index;
    head.committed_unix_ms = now;
    uint8_t hb[128];
    size_t hn = keyload__v1__batch_receipt__pack(&head, hb);
    return kl_buf_append(out, hb, hn) || kl_buf_append(out, results->p, results->len) ||
           kl_buf_append_field(out, (7 << 3) | 2, digest, KL_DIGEST_LEN) ||
           (catalog_version && kl_buf_append_varint_field(out, (8 << 3) | 0, catalog_version));
}

/* Adds the batch's outcome record to its scratch writes: the outcome is one more write of
 * the batch, applied with it and visible to later batches through the pending overlay. */
static kl_code batch_outcome(const char *principal, uint64_t policy_epoch,
                             const Keyload__V1__BatchRequest *b, const uint8_t digest[KL_DIGEST_LEN],
                             kl_overlay *scratch, const kl_buf *receipt, bool elided, const kl_err *refusal,
                             uint64_t index, kl_err *err)
{
    Keyload__V1__OutcomeRecord o = KEYLOAD__V1__OUTCOME_RECORD__INIT;
    if (refusal != NULL) {
        o.error_code = (int32_t)refusal->code;
        o.error_detail = (char *)refusal->detail;
        o.error_message = (char *)refusal->message;
    }
    o.request_digest.data = (uint8_t *)digest;
    o.request_digest.len = KL_DIGEST_LEN;
    o.receipt.data = receipt->p;
    o.receipt.len = receipt->len;
    o.index = index;
    o.policy_epoch = policy_epoch;
    o.first_sent_unix_ms = b->first_sent_unix_ms;
    o.receipt_bodies_elided = elided;
    size_t on = keyload__v1__outcome_record__get_packed_size(&o);
    uint8_t *ob = malloc(on);
    if (ob == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory encoding a write-set");
    keyload__v1__outcome_record__pack(&o, ob);
    kl_key ok;
    kl_key_outcome(&ok, principal, b->command_id.data);
    kl_code rc = kl_overlay_set(scratch, ok.b, ok.len, ob, on, false, 0, err);
    free(ob);
    return rc;
}

/* Whether a batch that evaluated without refusal holds only Receives that lease nothing
 * and do no housekeeping: such a batch changes nothing, so it commits nothing. */
static kl_code batch_idle(kl_node *n, const Keyload__V1__BatchRequest *b, const kl_overlay *scratch,
                          bool *idle, kl_err *err)
{
    uint32_t wait_ms;
    kl_park_receive_only(b, idle, &wait_ms);
    if (!*idle)
        return KL_OK;
    kl_view base = {.store = n->store, .reads = &n->reads, .pending = &n->overlay, .scan_limit = UINT64_MAX};
    return kl_park_idle(&base, scratch, idle, err);
}

/* One batch evaluated for a slot (index, term), ready to join the group there. */
typedef struct batch_eval {
    kl_overlay scratch;          /* its writes, the outcome record included */
    kl_buf results, receipt;
    kl_catalog_batch catalog;
    node_ws *ws;                 /* its write-set (bytes owned) */
    kl_buf packed;               /* the same, encoded as LogEntry field 5 */
    bool refused;                /* a committed refusal: only the outcome is written */
    kl_err refusal;
    bool idle;                   /* only Receives that lease nothing: nothing to commit */
} batch_eval;

static void batch_eval_free(batch_eval *ev)
{
    kl_overlay_free(&ev->scratch);
    kl_buf_free(&ev->results);
    kl_buf_free(&ev->receipt);
    kl_buf_free(&ev->catalog.items);
    kl_buf_free(&ev->packed);
    if (ev->ws != NULL)
        node_ws_free(&ev->ws->ws);
    memset(ev, 0, sizeof *ev);
    kl_overlay_init(&ev->scratch);
}

/* Retention's writes of an evaluated batch (ARCHITECTURE.md "Store layout"): the
 * expiry index of its outcome when that expires, and, for the first batch of an entry, the
 * mark's advance and the sweep below it, paced by KL_OUTCOME_SWEEP_EVERY_MS unless the last
 * sweep was full. Pacing is the leader's choice alone: what a sweep deletes travels in the
 * entry, so every member applies the same. */
static kl_code batch_retention(kl_node *n, const char *principal, const Keyload__V1__BatchRequest *b,
                               batch_eval *ev, int64_t now, kl_err *err)
{
    int64_t retention = n->cfg.outcome_retention_ms;
    if (retention <= 0)
        return KL_OK;
    kl_code rc = KL_OK;
    if (kl_retain_batch_expires(b, ev->refused))
        rc = kl_retain_index(&ev->scratch, kl_retain_index_time(now, b->first_sent_unix_ms), principal,
                             b->command_id.data, err);
    if (rc != KL_OK || n->group.n > 0)
        return rc;
    if (!n->retain_sweep_full && now < n->retain_sweep_next_ms)
        return KL_OK;
    kl_view v = {.store = n->store, .reads = &n->reads, .pending = &n->overlay, .scratch = &ev->scratch, .scan_limit = UINT64_MAX};
    bool full = false;
    if ((rc = kl_retain_sweep(&v, now, retention, &full, err)) != KL_OK)
        return rc;
    n->retain_sweep_full = full;
    n->retain_sweep_next_ms = now + KL_OUTCOME_SWEEP_EVERY_MS;
    return KL_OK;
}

/* Evaluates b against applied state plus every pending write, as the entry at (index,
 * term) with time now, and builds its receipt, outcome and write-set. */
static kl_code batch_evaluate(kl_node *n, const char *principal, const Keyload__V1__BatchRequest *b,
                              const uint8_t digest[KL_DIGEST_LEN], const node_subject *subj,
                              const kl_limits *limits, uint64_t index, uint64_t term, int64_t now,
                              batch_eval *ev, kl_err *err)
{
    kl_view view = {.store = n->store, .reads = &n->reads, .pending = &n->overlay, .scratch = &ev->scratch,
                    .scan_limit = limits->max_scan_records, .hints = &n->hints};
    kl_eval_ctx ctx = node_eval_ctx(n, &view, limits, subj, now);
    ctx.index = index;
    ctx.term = term;
    ctx.catalog = n->cfg.partition == 0 ? &ev->catalog : NULL;
    uint64_t t0 = node_mono_ns();
    kl_code rc = kl_engine_eval_batch(&ctx, b, &ev->results, err);
    n->authz_ns += ctx.authz_ns;
    n->costs.eval_ns += node_mono_ns() - t0;
    if (rc != KL_OK) {
        if (!kl_transfer_batch_records_refusals(b) || !kl_transfer_refusal_is_terminal(rc))
            return rc;
        /* A deterministic refusal of Accept or Complete commits as a no-effect outcome:
         * nothing of the batch is written, and its command id answers this forever. */
        ev->refusal = *err;
        ev->refused = true;
        kl_overlay_clear(&ev->scratch);
    }
    /* Checked before the outcome record joins the scratch writes. */
    if (!ev->refused && (rc = batch_idle(n, b, &ev->scratch, &ev->idle, err)) != KL_OK)
        return rc;
    if (ev->idle)
        return KL_OK;
    t0 = node_mono_ns();
    if (!ev->refused && encode_receipt(&ev->receipt, b, n->cfg.partition, index, term, now, &ev->results,
                                       digest, ev->catalog.version) != 0)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory encoding the receipt");
    uint64_t epoch_after = subj->policy_epoch;
    if (!ev->refused && (rc = epoch_after_effect(n, &view, principal, subj, &epoch_after, err)) != KL_OK)
        return rc;
    /* What is stored (outcome and write-set): the receipt without a Receive's bodies; the
     * caller is answered the whole receipt. */
    uint8_t *lean = NULL;
    size_t lean_len = 0;
    if (!ev->refused && (rc = kl_retain_strip_bodies(b, ev->receipt.p, ev->receipt.len, &lean, &lean_len, err)) != KL_OK)
        return rc;
    kl_buf stored = lean != NULL ? (kl_buf){.p = lean, .len = lean_len} : ev->receipt;
    rc = batch_outcome(principal, epoch_after, b, digest, &ev->scratch, &stored, lean != NULL,
                       ev->refused ? &ev->refusal : NULL, index, err);
    if (rc == KL_OK)
        rc = batch_retention(n, principal, b, ev, now, err);
    if (rc == KL_OK && (ev->ws = node_ws_build(principal, b->command_id.data, digest, epoch_after, &stored,
                                                &ev->scratch, 0)) == NULL)
        rc = kl_fail(err, KL_INTERNAL, "memory", "out of memory encoding a write-set");
    free(lean);
    if (rc != KL_OK)
        return rc;
    rc = node_ws_pack(&ev->ws->ws, &ev->packed, err);
    n->costs.encode_ns += node_mono_ns() - t0;
    return rc;
}

/* Where a batch evaluated now lands: the open group's slot while it is still the log's next
 * one and the group has room for another batch; otherwise the group is proposed first (or
 * refused, when the log moved under it: another term) and the batch opens the next. */
static void group_next(kl_node *n, uint64_t *index, uint64_t *term, bool *serving)
{
    if (n->group.n >= NODE_GROUP_MAX_BATCHES)
        kl_node_flush(n);
    n->io.next(n->io.ctx, index, term, serving);
    if (n->group.n > 0 && (*index != n->group.index || *term != n->group.term)) {
        kl_node_flush(n);
        n->io.next(n->io.ctx, index, term, serving);
    }
}

static bool group_fits(const kl_node *n, const batch_eval *ev)
{
    size_t bound = NODE_GROUP_MAX_BYTES;
    if (n->cfg.limits.max_frame_bytes < bound)
        bound = (size_t)n->cfg.limits.max_frame_bytes;
    return n->group.n == 0 || n->group_bytes.len + ev->packed.len <= bound;
}

/* Records the pending-overlay entries the batch's writes will replace (the first time the
 * group replaces each), so that a refused proposal restores them. */
static kl_code group_note_undo(kl_node *n, const kl_overlay *scratch, kl_err *err)
{
    for (size_t i = 0; i < scratch->n; i++) {
        const kl_ov_entry *s = &scratch->v[i];
        const kl_ov_entry *old = kl_overlay_find(&n->overlay, s->key, s->klen);
        if (old == NULL || old->owner == n->group.index)
            continue;
        kl_code rc = kl_overlay_set(&n->group_undo, old->key, old->klen, old->val, old->vlen, old->del,
                                    old->owner, err);
        if (rc != KL_OK)
            return rc;
    }
    return KL_OK;
}

/* Adds the evaluated batch to the group at (index, term) (opening it when empty): its
 * write-set, its writes into the pending overlay, and its pending outcome with the caller
 * waiting. Nothing is proposed here; kl_node_flush does, for the whole group. */
static kl_code group_join(kl_node *n, const char *principal, const Keyload__V1__BatchRequest *b,
                          const uint8_t digest[KL_DIGEST_LEN], batch_eval *ev, uint64_t index,
                          uint64_t term, int64_t now, kl_node_reply_fn fn, void *cookie, kl_err *err)
{
    assert(!n->answering); /* invariant I-NODE-14 */
    if (n->n_pend == n->cap_pend) {
        size_t cap = n->cap_pend ? n->cap_pend * 2 : 64;
        pending *np = realloc(n->pend, cap * sizeof *np);
        if (np == NULL)
            return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
        n->pend = np;
        n->cap_pend = cap;
    }
    if (n->group.n == n->group.cap) {
        size_t cap = n->group.cap ? n->group.cap * 2 : 8;
        Keyload__V1__WriteSet **ns = realloc(n->group.sets, cap * sizeof *ns);
        if (ns == NULL)
            return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
        n->group.sets = ns;
        n->group.cap = cap;
    }
    if (n->group.n == 0) {
        n->group.index = index;
        n->group.term = term;
        n->group.time_ms = now;
    }
    /* invariant I-NODE-11: every batch of a group was evaluated for the group's slot, with its
     * write-set built */
    assert(n->group.index == index && n->group.term == term && ev->ws != NULL);
    kl_code rc = group_note_undo(n, &ev->scratch, err);
    if (rc != KL_OK)
        return rc;
    size_t bytes_before = n->group_bytes.len;
    if (kl_buf_append(&n->group_bytes, ev->packed.p, ev->packed.len) != 0)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    pending *p = &n->pend[n->n_pend];
    memset(p, 0, sizeof *p);
    p->principal = strdup(principal);
    if (p->principal == NULL || node_pending_add_waiter(p, fn, cookie) != 0) {
        node_pending_free(p);
        n->group_bytes.len = bytes_before;
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    }
    if ((rc = kl_overlay_absorb(&n->overlay, &ev->scratch, index, err)) != KL_OK) {
        /* The pending overlay is now partial; no safe way back but a restart. */
        node_pending_free(p);
        n->group_bytes.len = bytes_before;
        n->broken = true;
        return rc;
    }
    memcpy(p->command_id, b->command_id.data, 16);
    memcpy(p->digest, digest, KL_DIGEST_LEN);
    p->first_sent_ms = b->first_sent_unix_ms;
    p->index = index;
    p->term = term;
    p->receipt = ev->receipt.p;
    p->receipt_len = ev->receipt.len;
    p->refused = ev->refused;
    p->at_apply = ev->catalog.version != 0;
    if (ev->refused)
        p->refusal = ev->refusal;
    ev->receipt = (kl_buf){0};
    n->n_pend++;
    n->group.sets[n->group.n++] = &ev->ws->ws;
    ev->ws = NULL;
    n->costs.batches++;
    return KL_OK;
}

/* A batch of Receives that leases nothing: parked until messages come or its wait ends
 * (wait_ms, bounded by the caller's wait_cap_ms; `again`: it waited already), else answered
 * with its empty results under index 0: nothing is proposed and no outcome stored. */
static void idle_answer(kl_node *n, const Keyload__V1__BatchRequest *b, const char *principal,
                        const uint8_t *req, size_t len, const uint8_t digest[KL_DIGEST_LEN],
                        int64_t wait_cap_ms, kl_parked *again, const kl_buf *results, int64_t entry_ms,
                        kl_node_reply_fn fn, void *cookie)
{
    bool receive_only;
    uint32_t wait_ms;
    kl_park_receive_only(b, &receive_only, &wait_ms);
    int64_t now = n->io.clock_ms(n->io.ctx);
    int64_t until = again ? again->until_ms : now + (wait_ms < wait_cap_ms ? (int64_t)wait_ms : wait_cap_ms);
    kl_err err;
    kl_code rc = KL_OK;
    if (now < until) {
        kl_parked *p = again ? again : kl_parked_new(principal, b->command_id.data, digest, req, len);
        kl_view base = {.store = n->store, .reads = &n->reads, .pending = &n->overlay, .scan_limit = UINT64_MAX};
        if (p == NULL || (again == NULL && kl_parked_add_waiter(p, fn, cookie) != 0))
            rc = kl_fail(&err, KL_UNAVAILABLE, "memory", "out of memory parking the receive; retry");
        if (rc == KL_OK && (rc = kl_park_watch(&base, b, p, &err)) == KL_OK) {
            p->until_ms = until;
            p->woken = false;
            rc = kl_park_insert(&n->park, p, &err);
        }
        if (rc == KL_OK)
            return;
        if (again == NULL)
            kl_parked_free(p);
        fn(cookie, rc, &err, NULL, 0); /* again: fn answers every waiter and frees it */
        return;
    }
    kl_buf receipt = {0};
    if (encode_receipt(&receipt, b, n->cfg.partition, 0, 0, entry_ms, results, digest, 0) != 0) {
        kl_fail(&err, KL_INTERNAL, "memory", "out of memory encoding the receipt");
        fn(cookie, err.code, &err, NULL, 0);
    } else {
        fn(cookie, KL_OK, NULL, receipt.p, receipt.len);
    }
    kl_buf_free(&receipt);
}

static kl_code refuse_not_leader(const kl_node *n, kl_err *err)
{
    return kl_fail(err, KL_NOT_LEADER, "not_leader",
                   "this member does not lead partition %d now; send the batch to the leader",
                   n->cfg.partition);
}

/* One batch on its way through the write path: what each step of submit learns for the
 * next. It lives on submit's stack, so the pipeline costs no allocation of its own. */
typedef struct submit_req {
    kl_node *n;
    const char *principal;
    const uint8_t *req;
    size_t len;
    int64_t wait_cap_ms;         /* how long an idle Receive may be parked */
    kl_parked *again;            /* a parked request evaluated again, else NULL */
    kl_node_reply_fn fn;
    void *cookie;
    Keyload__V1__BatchRequest *b;
    uint8_t digest[KL_DIGEST_LEN];
    kl_limits limits;            /* the cluster's, tightened by the database's own */
    node_subject subj;
    uint64_t index, term;        /* the slot the batch is evaluated for */
    int64_t now;                 /* its entry time */
    batch_eval ev;
    bool answered;               /* a step answered the caller (or handed it on): stop */
    kl_err *err;                 /* submit's, outside so that r's zeroing stays small */
} submit_req;

/* Step 1: shape first (names are checked before any key is built from them), then again
 * under the database's own limits, then who the request acts as. */
static kl_code submit_admit(submit_req *r)
{
    kl_node *n = r->n;
    kl_view view = {.store = n->store, .reads = &n->reads, .pending = &n->overlay};
    const char *tenant, *db;
    kl_code rc = kl_engine_validate_batch(r->b, r->len, &n->cfg.limits, r->err);
    if (rc == KL_OK)
        rc = kl_engine_batch_database(r->b, &tenant, &db, r->err);
    if (rc == KL_OK)
        rc = node_database_limits(n, &view, tenant, db, &r->limits, r->err);
    if (rc == KL_OK)
        rc = kl_engine_validate_batch(r->b, r->len, &r->limits, r->err);
    if (rc == KL_OK)
        rc = node_subject_load(n, &view, r->principal, r->b, &r->subj, r->err);
    return rc;
}

/* Step 2: the slot the batch would take, refused when this member does not serve or
 * cannot take a write now. */
static kl_code submit_slot(submit_req *r)
{
    kl_node *n = r->n;
    bool serving;
    group_next(n, &r->index, &r->term, &serving);
    if (!serving)
        return refuse_not_leader(n, r->err);
    if (n->io.admit != NULL)
        return n->io.admit(n->io.ctx, r->err);
    return KL_OK;
}

/* Step 3: the request's digest, and whether its (principal, command id) is already
 * pending, parked or committed: then the caller waits with it or is answered from it. */
static kl_code submit_dedupe(submit_req *r)
{
    kl_node *n = r->n;
    const uint8_t *cmd = r->b->command_id.data;
    kl_code rc = KL_OK;
    if (kl_canon_batch_digest(BATCH_METHOD, r->principal, r->b, r->digest) != 0)
        return kl_fail(r->err, KL_INTERNAL, "memory", "out of memory computing the request digest");
    pending *p = node_pending_find(n, r->principal, cmd);
    if (p != NULL) {
        if (!same_request(r->principal, r->b, r->digest, p->digest, p->first_sent_ms))
            return kl_fail(r->err, KL_CONFLICT, "command_id_reused",
                           "command_id is in use by a different batch that is still committing");
        if (p->answered) {
            /* Committed and answered, not applied yet: the same answer. */
            node_pending_reply(p, r->fn, r->cookie);
            r->answered = true;
            return KL_OK;
        }
        /* Same request still in flight: wait for that entry's commit. */
        assert(!n->answering); /* invariant I-NODE-14 */
        if (node_pending_add_waiter(p, r->fn, r->cookie) != 0)
            return kl_fail(r->err, KL_INTERNAL, "memory", "out of memory");
        r->answered = true;
        return KL_OK;
    }
    kl_parked *parked = kl_park_find(&n->park, r->principal, cmd);
    if (parked != NULL) {
        /* A retry of a Receive that waits for messages: answered with it. */
        if (!same_request(r->principal, r->b, r->digest, parked->digest, parked_first_sent(parked)))
            rc = kl_fail(r->err, KL_CONFLICT, "command_id_reused",
                         "command_id is in use by a different batch that waits for messages");
        else if (kl_parked_add_waiter(parked, r->fn, r->cookie) != 0)
            rc = kl_fail(r->err, KL_INTERNAL, "memory", "out of memory");
        r->answered = rc == KL_OK;
        return rc;
    }
    bool found;
    if ((rc = replay_committed(n, r->principal, r->b, r->digest, r->subj.policy_epoch, &found, r->fn,
                               r->cookie, r->err)) != KL_OK)
        return rc;
    r->answered = found;
    if (found || r->b->first_sent_unix_ms == 0 || n->cfg.outcome_retention_ms <= 0)
        return KL_OK;
    /* No outcome: new, or expired. The applied mark, because the deletes below it are
     * applied in the same write as the mark (ARCHITECTURE.md "Store layout"). */
    int64_t mark, cursor;
    kl_view applied = {.store = n->store, .reads = &n->reads, .scan_limit = UINT64_MAX};
    if ((rc = kl_retain_mark_read(&applied, &mark, &cursor, r->err)) != KL_OK)
        return rc;
    return kl_retain_check_expired(r->b->first_sent_unix_ms, mark, r->err);
}

/* Step 4: room in the write pipeline, then the evaluation for the group's slot (batches of
 * one group share its slot and its time). At most two passes: after the flush the group is
 * empty, and an empty group fits any batch. An idle batch is answered (or parked) here. */
static kl_code submit_evaluate(submit_req *r)
{
    kl_node *n = r->n;
    kl_code rc;
    if (n->n_pend >= n->cfg.max_pending_batches || n->overlay.bytes >= n->cfg.max_pending_bytes)
        return kl_fail(r->err, KL_UNAVAILABLE, "write_pipeline_full",
                       "the write pipeline is full (%zu batches pending); retry shortly", n->n_pend);
    r->now = n->group.n > 0 ? n->group.time_ms : node_entry_time(n);
    if ((rc = kl_retain_check_first_sent(r->b->first_sent_unix_ms, r->now, n->io.clock_ms(n->io.ctx),
                                         r->err)) != KL_OK)
        return rc;
    for (;;) {
        if ((rc = batch_evaluate(n, r->principal, r->b, r->digest, &r->subj, &r->limits, r->index, r->term,
                                 r->now, &r->ev, r->err)) != KL_OK)
            return rc;
        if (r->ev.idle) {
            idle_answer(n, r->b, r->principal, r->req, r->len, r->digest, r->wait_cap_ms, r->again,
                        &r->ev.results, r->now, r->fn, r->cookie);
            r->answered = true;
            return KL_OK;
        }
        if (group_fits(n, &r->ev))
            return KL_OK;
        /* Its write-set would take the group past its byte bound: propose the group, and
         * evaluate this batch again for the slot after it (its receipt names its index). */
        batch_eval_free(&r->ev);
        kl_node_flush(n);
        bool serving;
        group_next(n, &r->index, &r->term, &serving);
        if (!serving)
            return refuse_not_leader(n, r->err);
        r->now = node_entry_time(n);
    }
}

/* Step 5: the batch joins the group; the caller is now answered at its commit
 * (kl_node_committed) or apply, or by the group's failure. */
static kl_code submit_join(submit_req *r)
{
    kl_node *n = r->n;
    kl_code rc = group_join(n, r->principal, r->b, r->digest, &r->ev, r->index, r->term, r->now, r->fn,
                            r->cookie, r->err);
    if (rc != KL_OK)
        return rc;
    r->answered = true;
    if (n->io.flush_soon == NULL)
        kl_node_flush(n);
    else if (n->group.n == 1)
        n->io.flush_soon(n->io.ctx);
    return KL_OK;
}

/* kl_node_submit_batch; wait_cap_ms bounds how long an idle Receive may be parked, and
 * `again` is a parked request evaluated again (fn/cookie then answer all its waiters).
 * The steps run in order until one fails (the caller is answered its error) or answers. */
static void submit(kl_node *n, const char *principal, const uint8_t *req, size_t len, int64_t wait_cap_ms,
                   kl_parked *again, kl_node_reply_fn fn, void *cookie)
{
    kl_err err;
    kl_err_clear(&err);
    submit_req r = {.n = n, .principal = principal, .req = req, .len = len, .wait_cap_ms = wait_cap_ms,
                    .again = again, .fn = fn, .cookie = cookie, .err = &err};
    if (n->broken) {
        kl_fail(&err, KL_UNAVAILABLE, "node_broken",
                "this member stopped accepting writes after a storage failure; it must restart");
        reply_err(fn, cookie, &err);
        return;
    }
    r.b = keyload__v1__batch_request__unpack(NULL, len, req);
    if (r.b == NULL) {
        kl_fail(&err, KL_INVALID_ARGUMENT, "payload", "the Batch request does not decode");
        reply_err(fn, cookie, &err);
        return;
    }
    kl_overlay_init(&r.ev.scratch);
    kl_code rc = submit_admit(&r);
    if (rc == KL_OK)
        rc = submit_slot(&r);
    if (rc == KL_OK)
        rc = submit_dedupe(&r);
    if (rc == KL_OK && !r.answered)
        rc = submit_evaluate(&r);
    if (rc == KL_OK && !r.answered)
        rc = submit_join(&r);
    if (rc != KL_OK)
        reply_err(fn, cookie, &err);
    batch_eval_free(&r.ev);
    node_subject_free(&r.subj);
    keyload__v1__batch_request__free_unpacked(r.b, NULL);
}


void kl_node_submit_batch(kl_node *n, const char *principal, const uint8_t *req, size_t len,
                          kl_node_reply_fn fn, void *cookie)
{
    submit(n, principal, req, len, KL_RECEIVE_WAIT_MS_MAX, NULL, fn, cookie);
}

void kl_node_submit_batch_wait(kl_node *n, const char *principal, const uint8_t *req, size_t len,
                               int64_t wait_cap_ms, kl_node_reply_fn fn, void *cookie)
{
    submit(n, principal, req, len, wait_cap_ms > 0 ? wait_cap_ms : 0, NULL, fn, cookie);
}

void kl_node_park_tick(kl_node *n)
{
    int64_t now = n->io.clock_ms(n->io.ctx);
    /* Each request at most once per tick: one parked again stays due when its queue's
     * due lease has not reached partition time yet. */
    size_t budget = n->park.n;
    kl_parked *p;
    while (budget-- > 0 && (p = kl_park_take_due(&n->park, now)) != NULL)
        submit(n, p->principal, p->req, p->len, 0, p, kl_parked_answer, p);
}

bool kl_node_park_due(const kl_node *n)
{
    return kl_park_any_due(&n->park, n->io.clock_ms(n->io.ctx));
}

