#include "daemon/node_internal.h"

#include "common/failpoint.h"
#include "common/log.h"
#include "daemon/engine/catalog.h"
#include "daemon/store/keys.h"
#include "keyload/v1/store.pb-c.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

void kl_node_authz_costs(const kl_node *n, uint64_t *requests, uint64_t *ns)
{
    *requests = n->authz_requests;
    *ns = n->authz_ns;
}

void kl_node_subject_cache_costs(const kl_node *n, uint64_t *hits, uint64_t *misses)
{
    kl_subject_cache_stats st;
    kl_subject_cache_stats_get(n->subjects, &st);
    *hits = st.hits;
    *misses = st.misses + st.bypasses;
}

bool kl_node_broken(const kl_node *n) { return n->broken; }
void kl_node_costs_get(const kl_node *n, kl_node_costs *out) { *out = n->costs; }
void kl_node_transfer_counts_get(const kl_node *n, kl_node_transfer_counts *out) { *out = n->xfer; }
uint64_t kl_node_applied_index(const kl_node *n) { return kl_store_applied_index(n->store); }
size_t kl_node_pending_batches(const kl_node *n) { return n->n_pend; }

/* Elapsed-time reference for entry_time: the driver's CLOCK_BOOTTIME, or, for a driver
 * with one simulated clock (tests), that clock. */
static int64_t boot_ns(kl_node *n)
{
    if (n->io.boot_ns)
        return n->io.boot_ns(n->io.ctx);
    return n->io.clock_ms(n->io.ctx) * 1000000;
}

/* The time of the entry being built (and "now" of a read): the leader's wall clock,
 * clamped to [last + e (1 - r), last + e (1 + r)], where last is the previous entry time
 * stamped or applied here, e the CLOCK_BOOTTIME elapsed since then and r = 1%
 * (daemon/entry_clock.h has the rule and its bounds). So a clock step of this member, either
 * way, ends no lease or expiry more than 1% early and never freezes partition time. */
int64_t node_entry_time(kl_node *n)
{
    return kl_entry_clock_stamp(&n->clock, n->io.clock_ms(n->io.ctx), boot_ns(n));
}

void node_pending_free(pending *p)
{
    free(p->principal);
    free(p->receipt);
    free(p->waiters);
}

pending *node_pending_find(kl_node *n, const char *principal, const uint8_t cmd[16])
{
    for (size_t i = 0; i < n->n_pend; i++)
        if (memcmp(n->pend[i].command_id, cmd, 16) == 0 && strcmp(n->pend[i].principal, principal) == 0)
            return &n->pend[i];
    return NULL;
}

int node_pending_add_waiter(pending *p, kl_node_reply_fn fn, void *cookie)
{
    if (p->n_waiters == p->cap_waiters) {
        size_t cap = p->cap_waiters ? p->cap_waiters * 2 : 2;
        waiter *nw = realloc(p->waiters, cap * sizeof *nw);
        if (nw == NULL)
            return -1;
        p->waiters = nw;
        p->cap_waiters = cap;
    }
    p->waiters[p->n_waiters++] = (waiter){fn, cookie};
    return 0;
}

/* ---- entries ---- */

/* Encodes LogEntry{term, index, time, pinc, raft_type} followed by the given write-set
 * fields (field 5), in field order, so a protobuf decoder reads one LogEntry. */
static int encode_entry(kl_buf *out, uint64_t index, uint64_t term, int64_t time_ms,
                        const uint8_t *pinc, const kl_buf *write_sets, uint32_t raft_type)
{
    Keyload__V1__LogEntry e = KEYLOAD__V1__LOG_ENTRY__INIT;
    e.term = term;
    e.index = index;
    e.time_unix_ms = time_ms;
    if (pinc) {
        e.partition_incarnation.data = (uint8_t *)pinc;
        e.partition_incarnation.len = 16;
    }
    size_t n = keyload__v1__log_entry__get_packed_size(&e);
    uint8_t head[96];
    /* invariant I-NODE-7: a LogEntry's head (term, index, time, incarnation) fits its buffer */
    assert(n <= sizeof head);
    keyload__v1__log_entry__pack(&e, head);
    out->len = 0;
    if (kl_buf_append(out, head, n) || (write_sets && kl_buf_append(out, write_sets->p, write_sets->len)))
        return -1;
    if (raft_type != 0 && kl_buf_append_varint_field(out, (6 << 3) | 0, raft_type))
        return -1;
    return 0;
}

int kl_node_encode_empty_entry(uint64_t index, uint64_t term, uint32_t raft_type, uint8_t **out,
                               size_t *len)
{
    kl_buf b = {0};
    if (encode_entry(&b, index, term, 0, NULL, NULL, raft_type) != 0) {
        kl_buf_free(&b);
        return -1;
    }
    *out = b.p;
    *len = b.len;
    return 0;
}

void node_ws_free(Keyload__V1__WriteSet *w)
{
    node_ws *nw = (node_ws *)w;
    if (nw == NULL)
        return;
    free(nw->ops);
    free(nw->opp);
    free(nw->blob);
    free(nw);
}

static void entry_free(node_entry *e)
{
    for (size_t i = 0; i < e->n; i++)
        node_ws_free(e->sets[i]);
    free(e->sets);
    *e = (node_entry){0};
}

static uint8_t *blob_put(uint8_t **at, const void *p, size_t n)
{
    uint8_t *start = *at;
    if (n)
        memcpy(start, p, n);
    *at += n;
    return start;
}

/* A write-set of every scratch write, its bytes copied (the scratch moves into the pending
 * overlay, where later batches may replace them). principal NULL: a tailed catalog change. */
node_ws *node_ws_build(const char *principal, const uint8_t *cmd, const uint8_t *digest,
                       uint64_t policy_epoch, const kl_buf *receipt, const kl_overlay *scratch,
                       uint64_t catalog_version)
{
    size_t plen = principal ? strlen(principal) + 1 : 0, total = plen + (cmd ? 16 : 0) +
                  (digest ? KL_DIGEST_LEN : 0) + (receipt ? receipt->len : 0);
    for (size_t i = 0; i < scratch->n; i++)
        total += scratch->v[i].klen + scratch->v[i].vlen;
    node_ws *nw = calloc(1, sizeof *nw);
    if (nw == NULL)
        return NULL;
    nw->ops = calloc(scratch->n ? scratch->n : 1, sizeof *nw->ops);
    nw->opp = calloc(scratch->n ? scratch->n : 1, sizeof *nw->opp);
    nw->blob = malloc(total ? total : 1);
    if (nw->ops == NULL || nw->opp == NULL || nw->blob == NULL) {
        node_ws_free(&nw->ws);
        return NULL;
    }
    keyload__v1__write_set__init(&nw->ws);
    uint8_t *at = nw->blob;
    if (principal)
        nw->ws.principal = (char *)blob_put(&at, principal, plen);
    if (cmd)
        nw->ws.command_id = (ProtobufCBinaryData){16, blob_put(&at, cmd, 16)};
    if (digest)
        nw->ws.request_digest = (ProtobufCBinaryData){KL_DIGEST_LEN, blob_put(&at, digest, KL_DIGEST_LEN)};
    if (receipt)
        nw->ws.receipt = (ProtobufCBinaryData){receipt->len, blob_put(&at, receipt->p, receipt->len)};
    nw->ws.policy_epoch = policy_epoch;
    nw->ws.catalog_version = catalog_version;
    for (size_t i = 0; i < scratch->n; i++) {
        const kl_ov_entry *o = &scratch->v[i];
        keyload__v1__kv_op__init(&nw->ops[i]);
        nw->ops[i].del = o->del;
        nw->ops[i].key = (ProtobufCBinaryData){o->klen, blob_put(&at, o->key, o->klen)};
        nw->ops[i].value = (ProtobufCBinaryData){o->vlen, blob_put(&at, o->val, o->vlen)};
        nw->opp[i] = &nw->ops[i];
    }
    nw->ws.n_ops = scratch->n;
    nw->ws.ops = nw->opp;
    /* invariant I-NODE-8: a write-set's blob holds exactly its parts, nothing past its end */
    assert((size_t)(at - nw->blob) == total);
    return nw;
}

/* Appends w, encoded, as LogEntry field 5. */
kl_code node_ws_pack(const Keyload__V1__WriteSet *w, kl_buf *out, kl_err *err)
{
    size_t wn = keyload__v1__write_set__get_packed_size(w);
    uint8_t *wb = malloc(wn ? wn : 1);
    if (wb == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory encoding a write-set");
    keyload__v1__write_set__pack(w, wb);
    int bad = kl_buf_append_field(out, (5 << 3) | 2, wb, wn);
    free(wb);
    return bad ? kl_fail(err, KL_INTERNAL, "memory", "out of memory encoding a write-set") : KL_OK;
}

/* Wakes the parked Receives whose queues this applied entry made messages available in
 * (or changed the leases and delays of). */
static void park_note_entry(kl_node *n, const Keyload__V1__LogEntry *e)
{
    for (size_t i = 0; i < e->n_write_sets; i++)
        for (size_t j = 0; j < e->write_sets[i]->n_ops; j++)
            kl_park_note_key(&n->park, e->write_sets[i]->ops[j]->key.data, e->write_sets[i]->ops[j]->key.len);
}

/* Counts an applied entry's transfer events (kl_node_transfer_counts) from its write-sets'
 * keys: one byte compared per op, and only a committed refusal's outcome (a client batch
 * stored without a receipt) is decoded. Only counts: nothing here can fail the apply. */
static void note_transfers(kl_node *n, const Keyload__V1__LogEntry *e)
{
    for (size_t i = 0; i < e->n_write_sets; i++) {
        const Keyload__V1__WriteSet *w = e->write_sets[i];
        bool refusal = w->principal != NULL && w->principal[0] != '\0' && w->receipt.len == 0;
        for (size_t j = 0; j < w->n_ops; j++) {
            const Keyload__V1__KvOp *op = w->ops[j];
            if (op->key.len == 0)
                continue;
            if (op->key.data[0] == 'Y') {
                if (op->del)
                    n->xfer.delivered++;
                else
                    n->xfer.created++;
            } else if (refusal && op->key.data[0] == 'O' && !op->del) {
                Keyload__V1__OutcomeRecord *o = keyload__v1__outcome_record__unpack(NULL, op->value.len,
                                                                                    op->value.data);
                if (o != NULL && o->error_code > 0 && o->error_code < KL_CODE_COUNT)
                    n->xfer.failed[o->error_code]++;
                keyload__v1__outcome_record__free_unpacked(o, NULL);
            }
        }
    }
}

/* Keeps the scan hints and the read cache true across the apply of e (engine/view.h): each
 * put may lower a hint, each put or delete drops the key's cached value. Called before the
 * store applies it; lowering a hint or dropping a value early is always safe. */
static void note_apply(kl_node *n, const Keyload__V1__LogEntry *e)
{
    kl_scan_hints_begin_apply(&n->hints, kl_store_applied_index(n->store), e->index);
    kl_read_cache_begin_apply(&n->reads, n->store, e->index);
    for (size_t i = 0; i < e->n_write_sets; i++)
        for (size_t j = 0; j < e->write_sets[i]->n_ops; j++) {
            const Keyload__V1__KvOp *op = e->write_sets[i]->ops[j];
            kl_read_cache_note_write(&n->reads, op->key.data, op->key.len);
            if (!op->del)
                kl_scan_hints_note_put(&n->hints, op->key.data, op->key.len);
        }
}

/* Answers every parked Receive with err: nothing of theirs was proposed. */
static void park_drop(kl_node *n, const kl_err *err)
{
    kl_parked *p;
    while ((p = kl_park_take_any(&n->park)) != NULL)
        kl_parked_answer(p, err->code, err, NULL, 0);
}

static kl_code apply_encoded(kl_node *n, const uint8_t *bytes, size_t len, kl_err *err)
{
    uint64_t t0 = node_mono_ns();
    /* Everything below copies what it keeps of e (the store's batch, the scan hints, the
     * park's wake-ups), so e lives in the apply arena until this returns. */
    Keyload__V1__LogEntry *e = keyload__v1__log_entry__unpack(kl_pb_arena_allocator(&n->apply_arena), len, bytes);
    if (e == NULL) {
        kl_pb_arena_reset(&n->apply_arena);
        return kl_fail(err, KL_INTERNAL, "log", "log entry does not decode");
    }
    uint64_t t1 = node_mono_ns();
    kl_entry_clock_observe(&n->clock, e->time_unix_ms, boot_ns(n));
    note_apply(n, e);
    kl_code rc = kl_store_apply(n->store, e, err);
    if (rc != KL_OK)
        kl_read_cache_reset(&n->reads); /* announced, not applied */
    if (rc == KL_OK && n->park.n > 0)
        park_note_entry(n, e);
    if (rc == KL_OK)
        note_transfers(n, e);
    kl_pb_arena_reset(&n->apply_arena);
    n->costs.apply_decode_ns += t1 - t0;
    n->costs.apply_write_ns += node_mono_ns() - t1;
    return rc;
}

/* The leader's own entry at (index, term), if it proposed one and still holds it: the
 * stored bytes are then exactly what it encoded (one entry per index and term), so it
 * applies the write-sets it kept. Older kept entries were overwritten: dropped. */
static node_entry *proposed_take(kl_node *n, uint64_t index, uint64_t term)
{
    size_t drop = 0;
    while (drop < n->n_proposed && n->proposed[drop].index < index)
        entry_free(&n->proposed[drop++]);
    if (drop) {
        memmove(n->proposed, n->proposed + drop, (n->n_proposed - drop) * sizeof *n->proposed);
        n->n_proposed -= drop;
    }
    if (n->n_proposed == 0 || n->proposed[0].index != index)
        return NULL;
    if (n->proposed[0].term != term) {
        entry_free(&n->proposed[0]);
        memmove(n->proposed, n->proposed + 1, (n->n_proposed - 1) * sizeof *n->proposed);
        n->n_proposed--;
        return NULL;
    }
    return &n->proposed[0];
}

static kl_code apply_own(kl_node *n, node_entry *own, kl_err *err)
{
    uint64_t t0 = node_mono_ns();
    Keyload__V1__LogEntry e = KEYLOAD__V1__LOG_ENTRY__INIT;
    e.term = own->term;
    e.index = own->index;
    e.time_unix_ms = own->time_ms;
    e.n_write_sets = own->n;
    e.write_sets = own->sets;
    kl_entry_clock_observe(&n->clock, e.time_unix_ms, boot_ns(n));
    note_apply(n, &e);
    kl_code rc = kl_store_apply(n->store, &e, err);
    if (rc != KL_OK)
        kl_read_cache_reset(&n->reads); /* announced, not applied */
    /* The leader holds the parked Receives, and its own entries skip apply_encoded. */
    if (rc == KL_OK && n->park.n > 0)
        park_note_entry(n, &e);
    if (rc == KL_OK)
        note_transfers(n, &e);
    entry_free(own);
    memmove(n->proposed, n->proposed + 1, (n->n_proposed - 1) * sizeof *n->proposed);
    n->n_proposed--;
    n->costs.own_entries_applied++;
    n->costs.apply_write_ns += node_mono_ns() - t0;
    return rc;
}

static void proposed_clear(kl_node *n)
{
    for (size_t i = 0; i < n->n_proposed; i++)
        entry_free(&n->proposed[i]);
    n->n_proposed = 0;
}

void node_pending_reply(const pending *p, kl_node_reply_fn fn, void *cookie)
{
    if (p->refused)
        fn(cookie, p->refusal.code, &p->refusal, NULL, 0);
    else
        fn(cookie, KL_OK, NULL, p->receipt, p->receipt_len);
}

/* The cut points of a client's batch: its entry is committed, nobody has been answered and
 * this member has not applied it. */
static void cut_committed_unanswered(void)
{
    kl_err fe;
    (void)KL_FAILPOINT("daemon.after_append_before_apply", &fe);
    (void)KL_FAILPOINT("daemon.after_append_before_reply", &fe);
}

/* Answers the waiting callers of pending batch p with its committed result. */
static void answer_committed(kl_node *n, pending *p)
{
    n->answering = true;
    for (size_t j = 0; j < p->n_waiters; j++)
        node_pending_reply(p, p->waiters[j].fn, p->waiters[j].cookie);
    n->answering = false;
    p->n_waiters = 0;
}

size_t kl_node_committed(kl_node *n, uint64_t term, uint64_t upto)
{
    size_t answered = 0;
    bool cut = false;
    for (size_t i = 0; i < n->n_pend; i++) {
        pending *p = &n->pend[i];
        if (p->answered || p->at_apply || p->term != term || p->index == 0 || p->index > upto)
            continue;
        /* invariant I-NODE-15: only a proposed batch is answered at commit: the open group's
         * slot lies past the log's last index, so past every commit index */
        assert(n->group.n == 0 || p->index < n->group.index);
        if (p->n_waiters > 0 && !cut) {
            cut_committed_unanswered();
            cut = true;
        }
        answered += p->n_waiters;
        p->answered = true;
        answer_committed(n, p);
    }
    return answered;
}

/* Answers every caller of the pending batch at `index` (if any): OK with its receipt when
 * the committed entry has the term it was proposed in, else UNKNOWN_WRITE_OUTCOME (another
 * leader's entry took the slot; this batch did not commit there). */
static void answer_index(kl_node *n, uint64_t index, uint64_t term)
{
    kl_err lost;
    kl_fail(&lost, KL_UNKNOWN_WRITE_OUTCOME, "leader_changed",
            "leadership changed before the batch committed; retry with the same command id");
    size_t w = 0;
    for (size_t i = 0; i < n->n_pend; i++) {
        pending *p = &n->pend[i];
        if (p->index != index) {
            n->pend[w++] = *p;
            continue;
        }
        bool ok = p->term == term;
        /* invariant I-NODE-16: a batch answered at its commit is the entry applied at its
         * index (else a caller holds an OK for an effect the partition never took) */
        assert(!p->answered || ok);
        if (ok) {
            answer_committed(n, p);
        } else {
            n->answering = true;
            for (size_t j = 0; j < p->n_waiters; j++)
                p->waiters[j].fn(p->waiters[j].cookie, KL_UNKNOWN_WRITE_OUTCOME, &lost, NULL, 0);
            n->answering = false;
        }
        node_pending_free(p);
    }
    n->n_pend = w;
}

/* Forgets the group (its batches' pending entries and overlay writes are the caller's). */
static void group_reset(kl_node *n)
{
    entry_free(&n->group);
    n->group_bytes.len = 0;
    kl_overlay_clear(&n->group_undo);
}

/* Answers every pending caller with err and forgets all pending state. */
static void drop_pending(kl_node *n, const kl_err *err)
{
    for (size_t i = 0; i < n->n_pend; i++) {
        pending *p = &n->pend[i];
        n->answering = true;
        for (size_t j = 0; j < p->n_waiters; j++)
            p->waiters[j].fn(p->waiters[j].cookie, err->code, err, NULL, 0);
        n->answering = false;
        node_pending_free(p);
    }
    n->n_pend = 0;
    kl_overlay_clear(&n->overlay);
    group_reset(n);
    proposed_clear(n);
}

/* The group was not proposed: answers each of its batches err (nothing of them is in the
 * log) and takes their writes out of the pending overlay, restoring what they replaced, so
 * the overlay is again exactly the proposed entries' writes. */
static void group_fail(kl_node *n, const kl_err *err)
{
    uint64_t index = n->group.index;
    size_t w = 0;
    for (size_t i = 0; i < n->n_pend; i++) {
        pending *p = &n->pend[i];
        if (p->index != index) {
            n->pend[w++] = *p;
            continue;
        }
        n->answering = true;
        for (size_t j = 0; j < p->n_waiters; j++)
            p->waiters[j].fn(p->waiters[j].cookie, err->code, err, NULL, 0);
        n->answering = false;
        node_pending_free(p);
    }
    n->n_pend = w;
    kl_overlay_drop_owner(&n->overlay, index);
    kl_err oom;
    for (size_t i = 0; i < n->group_undo.n; i++) {
        const kl_ov_entry *u = &n->group_undo.v[i];
        if (kl_overlay_set(&n->overlay, u->key, u->klen, u->val, u->vlen, u->del, u->owner, &oom) != KL_OK)
            n->broken = true; /* the overlay lost a pending write: only a restart is exact */
    }
    group_reset(n);
}

/* Keeps the group's entry for the leader's own apply. Out of memory only costs the
 * shortcut: the apply then decodes the stored entry like a follower. */
static void proposed_keep(kl_node *n)
{
    if (n->n_proposed == n->cap_proposed) {
        size_t cap = n->cap_proposed ? n->cap_proposed * 2 : 16;
        node_entry *np = realloc(n->proposed, cap * sizeof *np);
        if (np == NULL) {
            entry_free(&n->group);
            return;
        }
        n->proposed = np;
        n->cap_proposed = cap;
    }
    n->proposed[n->n_proposed++] = n->group;
    n->group = (node_entry){0};
}

void kl_node_flush(kl_node *n)
{
    if (n->group.n == 0)
        return;
    uint64_t t0 = node_mono_ns();
    /* One buffer for every entry (encode_entry starts it empty), so that proposing
     * allocates nothing sized to the entry. */
    kl_buf *entry = &n->entry_bytes;
    kl_err err;
    kl_code rc = KL_OK;
    if (encode_entry(entry, n->group.index, n->group.term, n->group.time_ms, NULL, &n->group_bytes, 0) != 0) {
        rc = kl_fail(&err, KL_INTERNAL, "memory", "out of memory encoding the log entry");
    } else {
        kl_err fe;
        (void)KL_FAILPOINT("daemon.before_append", &fe);
        uint64_t t1 = node_mono_ns();
        n->costs.encode_ns += t1 - t0;
        /* Proposed means in the log, not committed: the callers are answered at the
         * commit (kl_node_committed) or the apply. */
        rc = n->io.propose(n->io.ctx, entry->p, entry->len);
        n->costs.propose_ns += node_mono_ns() - t1;
        if (rc != KL_OK)
            kl_fail(&err, rc, rc == KL_NOT_LEADER ? "not_leader" : "unavailable",
                    "the batch could not be proposed (%s); nothing was written, retry", kl_code_name(rc));
    }
    if (entry->cap > KL_NODE_ENTRY_KEEP_BYTES)
        kl_buf_free(entry);
    if (rc != KL_OK)
        group_fail(n, &err);
    else {
        n->costs.entries_proposed++;
        n->costs.batches_grouped += n->group.n;
        proposed_keep(n);
        group_reset(n);
    }
    /* invariant I-NODE-9: a flush leaves no open group: proposed, or refused and undone */
    assert(n->group.n == 0 && n->group_bytes.len == 0 && n->group_undo.n == 0);
}

/* Whether the pending batches at index have a caller still waiting (*waiting) and whether
 * one was answered at its commit (*answered). Cost: one pass over the pending table. */
static void pending_at(const kl_node *n, uint64_t index, bool *waiting, bool *answered)
{
    *waiting = *answered = false;
    for (size_t i = 0; i < n->n_pend; i++) {
        if (n->pend[i].index != index)
            continue;
        *waiting = *waiting || n->pend[i].n_waiters > 0;
        *answered = *answered || n->pend[i].answered;
    }
}

kl_code kl_node_apply(kl_node *n, uint64_t index, uint64_t term, const uint8_t *entry, size_t len,
                      kl_err *err)
{
    kl_code rc;
    kl_err fe;
    if (n->group.n > 0 && index >= n->group.index) {
        /* The log filled the group's slot without it: leadership moved on. */
        kl_fail(&fe, KL_NOT_LEADER, "not_leader",
                "leadership changed before the batch was proposed; nothing was written, retry");
        group_fail(n, &fe);
    }
    /* Only entries with a waiting caller pass the cut points, so a restart's no-op does
     * not; a batch answered at its commit (kl_node_committed) passes its own. */
    bool waiting, answered;
    pending_at(n, index, &waiting, &answered);
    if (waiting)
        cut_committed_unanswered();
    else if (answered)
        (void)KL_FAILPOINT("daemon.after_reply_before_apply", &fe);
    node_entry *own = proposed_take(n, index, term);
    if (own != NULL) {
        rc = apply_own(n, own, err);
    } else if (entry == NULL) {
        uint8_t *e;
        size_t elen;
        if (kl_node_encode_empty_entry(index, term, 1, &e, &elen) != 0)
            return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
        rc = apply_encoded(n, e, elen, err);
        free(e);
    } else {
        rc = apply_encoded(n, entry, len, err);
    }
    if (rc != KL_OK) {
        KL_ERROR("apply failed", "index=%llu detail=%s", (unsigned long long)index, err->detail);
        n->broken = true;
        kl_err lost;
        kl_fail(&lost, KL_UNKNOWN_WRITE_OUTCOME, "apply_failed",
                "the member failed to apply committed state; retry with the same command id");
        drop_pending(n, &lost);
        kl_fail(&lost, KL_UNAVAILABLE, "node_broken",
                "this member stopped accepting writes after a storage failure; nothing was written, retry");
        park_drop(n, &lost);
        return rc;
    }
    kl_overlay_drop_upto(&n->overlay, index);
    if (index == n->pinc_proposed)
        n->pinc_proposed = 0;
    answer_index(n, index, term);
    /* invariant I-NODE-10: the open group's slot lies after every applied index */
    assert(n->group.n == 0 || n->group.index > index);
    return KL_OK;
}

/* The partition's first serving leader records the partition incarnation (cursors and
 * claims bind to it). Until it commits, later leaders propose it again; the store keeps
 * the first one applied. */
static void propose_incarnation(kl_node *n)
{
    kl_key k;
    kl_key_meta(&k, "pinc");
    uint8_t *v;
    size_t vn;
    bool found;
    kl_err err;
    if (n->pinc_proposed != 0 || kl_store_get(n->store, k.b, k.len, &v, &vn, &found, &err) != KL_OK)
        return;
    free(v);
    if (found)
        return;
    kl_node_flush(n); /* the next index must be free */
    uint64_t index, term;
    bool serving;
    n->io.next(n->io.ctx, &index, &term, &serving);
    if (!serving)
        return;
    uint8_t pinc[16];
    n->io.random(pinc, sizeof pinc);
    kl_buf e = {0};
    if (encode_entry(&e, index, term, node_entry_time(n), pinc, NULL, 0) == 0 &&
        n->io.propose(n->io.ctx, e.p, e.len) == KL_OK)
        n->pinc_proposed = index;
    kl_buf_free(&e);
}

void kl_node_role(kl_node *n, bool serving)
{
    if (n->serving && !serving) {
        kl_err lost;
        kl_fail(&lost, KL_UNKNOWN_WRITE_OUTCOME, "leader_changed",
                "this member stopped leading before the batch was answered; retry with the same "
                "command id");
        drop_pending(n, &lost);
        kl_fail(&lost, KL_NOT_LEADER, "leader_changed",
                "this member stopped leading while the receive waited for messages; nothing was "
                "written, retry on the leader");
        park_drop(n, &lost);
        n->pinc_proposed = 0;
    }
    n->serving = serving;
    if (serving)
        propose_incarnation(n);
}

size_t kl_node_parked(const kl_node *n) { return n->park.n; }

void kl_node_park_drop(kl_node *n, const kl_err *err) { park_drop(n, err); }

/* ---- catalog tail ---- */

kl_code kl_node_submit_catalog(kl_node *n, const uint8_t *change, size_t len, kl_err *err)
{
    if (n->broken)
        return kl_fail(err, KL_UNAVAILABLE, "node_broken", "this member stopped after a storage failure");
    if (n->cfg.partition == 0)
        return kl_fail(err, KL_FAILED_PRECONDITION, "catalog_partition",
                       "partition 0 owns the catalog; it does not tail it");
    kl_node_flush(n); /* the next index must be free */
    uint64_t index, term;
    bool serving;
    n->io.next(n->io.ctx, &index, &term, &serving);
    if (!serving)
        return kl_fail(err, KL_NOT_LEADER, "not_leader", "only a serving leader applies catalog changes");
    Keyload__V1__CatalogChange *ch = keyload__v1__catalog_change__unpack(NULL, len, change);
    if (ch == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "catalog_change", "a tailed catalog change does not decode");
    kl_overlay scratch;
    kl_overlay_init(&scratch);
    kl_buf ws = {0}, entry = {0};
    /* The catalog is small and a change is written in full: no scan budget applies. */
    kl_view view = {.store = n->store, .pending = &n->overlay, .scratch = &scratch,
                    .scan_limit = UINT64_MAX};
    uint64_t current;
    kl_code rc = kl_catalog_version(&view, &current, err);
    if (rc != KL_OK || ch->version <= current)
        goto done; /* applied or already proposed */
    if (n->overlay.bytes >= n->cfg.max_pending_bytes) {
        rc = kl_fail(err, KL_UNAVAILABLE, "write_pipeline_full", "the write pipeline is full");
        goto done;
    }
    int64_t now = node_entry_time(n);
    if ((rc = kl_catalog_apply_change(&view, n->cfg.partition, now, ch, err)) != KL_OK)
        goto done;
    node_ws *w = node_ws_build(NULL, NULL, NULL, 0, NULL, &scratch, ch->version);
    if (w == NULL) {
        rc = kl_fail(err, KL_INTERNAL, "memory", "out of memory encoding a write-set");
        goto done;
    }
    rc = node_ws_pack(&w->ws, &ws, err);
    node_ws_free(&w->ws);
    if (rc != KL_OK)
        goto done;
    if (encode_entry(&entry, index, term, now, NULL, &ws, 0) != 0) {
        rc = kl_fail(err, KL_INTERNAL, "memory", "out of memory encoding the log entry");
        goto done;
    }
    if ((rc = n->io.propose(n->io.ctx, entry.p, entry.len)) != KL_OK) {
        kl_fail(err, rc, "not_proposed", "the catalog change could not be proposed (%s)", kl_code_name(rc));
        goto done;
    }
    if ((rc = kl_overlay_absorb(&n->overlay, &scratch, index, err)) != KL_OK)
        n->broken = true;
done:
    kl_overlay_free(&scratch);
    kl_buf_free(&ws);
    kl_buf_free(&entry);
    keyload__v1__catalog_change__free_unpacked(ch, NULL);
    return rc;
}

/* ---- open / close ---- */

/* A restarted member's partition time resumes from the latest timed entry it applied
 * before (no-ops carry none), referenced at open: its downtime is not counted, so a clock
 * that stepped while it was down cannot end leases early either. A read failure leaves the
 * clock unreferenced (the wall clock is taken once), as for a new partition. */
static void clock_resume(kl_node *n)
{
    uint64_t applied = kl_store_applied_index(n->store);
    for (uint64_t i = applied; i > 0 && applied - i < 64; i--) {
        uint8_t *bytes = NULL;
        size_t len;
        bool found;
        kl_err err;
        if (kl_store_read_log(n->store, i, &bytes, &len, &found, &err) != KL_OK || !found)
            return;
        Keyload__V1__LogEntry *e = keyload__v1__log_entry__unpack(NULL, len, bytes);
        free(bytes);
        if (e == NULL)
            return;
        int64_t t = e->time_unix_ms;
        keyload__v1__log_entry__free_unpacked(e, NULL);
        if (t > 0) {
            kl_entry_clock_observe(&n->clock, t, boot_ns(n));
            return;
        }
    }
}

kl_code kl_node_open(kl_store *st, const kl_node_config *cfg, const kl_node_io *io, kl_node **out,
                     kl_err *err)
{
    kl_node *n = calloc(1, sizeof *n);
    if (n == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    n->store = st;
    n->cfg = *cfg;
    n->io = *io;
    kl_overlay_init(&n->overlay);
    if ((n->subjects = kl_subject_cache_new()) == NULL) {
        free(n);
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    }
    kl_overlay_init(&n->group_undo);
    kl_pb_arena_init(&n->apply_arena, KL_NODE_APPLY_ARENA_KEEP_BYTES);
    clock_resume(n);
    *out = n;
    return KL_OK;
}

void kl_node_close(kl_node *n)
{
    if (n == NULL)
        return;
    kl_err err;
    kl_fail(&err, KL_UNKNOWN_WRITE_OUTCOME, "shutdown",
            "the member shut down before the batch was answered; retry with the same command id");
    drop_pending(n, &err);
    const kl_node_costs *c = &n->costs;
    KL_INFO("write path costs", "batches=%llu entries_proposed=%llu batches_per_entry=%.2f "
            "own_entries_applied=%llu eval_ns=%llu encode_ns=%llu propose_ns=%llu apply_decode_ns=%llu "
            "apply_write_ns=%llu", (unsigned long long)c->batches, (unsigned long long)c->entries_proposed,
            c->entries_proposed ? (double)c->batches_grouped / (double)c->entries_proposed : 0.0,
            (unsigned long long)c->own_entries_applied, (unsigned long long)c->eval_ns,
            (unsigned long long)c->encode_ns, (unsigned long long)c->propose_ns,
            (unsigned long long)c->apply_decode_ns, (unsigned long long)c->apply_write_ns);
    kl_fail(&err, KL_UNAVAILABLE, "shutdown",
            "the member shut down while the receive waited for messages; nothing was written, retry");
    park_drop(n, &err);
    free(n->pend);
    free(n->proposed);
    kl_buf_free(&n->group_bytes);
    kl_buf_free(&n->entry_bytes);
    kl_pb_arena_fini(&n->apply_arena);
    kl_overlay_free(&n->group_undo);
    kl_overlay_free(&n->overlay);
    kl_signing_cache_wipe(&n->signing);
    kl_subject_cache_free(n->subjects);
    free(n);
}
