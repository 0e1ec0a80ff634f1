#include "daemon/node.h"

#include "common/canon.h"
#include "common/guid.h"
#include "common/names.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "daemon/engine/access.h"
#include "daemon/engine/catalog.h"
#include "daemon/engine/subject_cache.h"
#include "daemon/engine/claims.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/transfer.h"
#include "daemon/entry_clock.h"
#include "daemon/park.h"
#include "daemon/store/keys.h"
#include "keyload/v1/queue.pb-c.h"
#include "keyload/v1/store.pb-c.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

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

typedef struct waiter {
    kl_node_reply_fn fn;
    void *cookie;
} waiter;

/* A proposed, not yet applied batch. */
typedef struct pending {
    char *principal;
    uint8_t command_id[16];
    uint8_t digest[KL_DIGEST_LEN];
    uint64_t index, term;
    uint8_t *receipt;
    size_t receipt_len;
    bool refused;                /* a committed refusal: callers get `refusal` at apply */
    kl_err refusal;
    waiter *waiters;
    size_t n_waiters, cap_waiters;
} pending;

/* One batch's write-set as the leader built it, owning its bytes: the leader applies its own
 * entries from these rather than decoding what it proposed. `ws` is first, so a
 * Keyload__V1__WriteSet * taken from it is also the node_ws *. */
typedef struct node_ws {
    Keyload__V1__WriteSet ws;
    Keyload__V1__KvOp *ops;
    Keyload__V1__KvOp **opp;
    uint8_t *blob;               /* principal, ids, receipt, keys and values */
} node_ws;

/* A LogEntry of the leader's own: the group being filled, or one proposed and not applied. */
typedef struct node_entry {
    uint64_t index, term;
    int64_t time_ms;
    Keyload__V1__WriteSet **sets;  /* each a node_ws */
    size_t n, cap;
} node_entry;

struct kl_node {
    kl_store *store;
    kl_node_config cfg;
    kl_node_io io;
    kl_overlay overlay;          /* writes of every pending batch, owner = entry index */
    pending *pend;
    size_t n_pend, cap_pend;
    kl_entry_clock clock;        /* partition time: the latest entry time and its reference */
    bool serving;                /* leader whose own-term entry is committed and applied */
    uint64_t pinc_proposed;      /* index of our incarnation proposal, 0 = none pending */
    bool broken;
    uint64_t authz_requests, authz_ns;  /* for MemberStatus (make bench) */
    kl_signing_cache signing;    /* derived database signing keys (wiped at close) */
    kl_subject_cache *subjects;  /* decoded principals and databases per catalog version */
    /* The group: batches evaluated since the last proposal, one entry at group.index. Its
     * writes are in `overlay` (owner group.index) so later batches see them; group_undo
     * keeps the overlay entries they replaced, restored if the proposal fails. */
    node_entry group;            /* open while group.n > 0 */
    kl_buf group_bytes;          /* its write-sets encoded, each as LogEntry field 5 */
    kl_overlay group_undo;
    node_entry *proposed;        /* own entries proposed, not applied yet, in index order */
    size_t n_proposed, cap_proposed;
    kl_node_costs costs;
    kl_park park;                /* Receives waiting for messages (park.h) */
};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

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
static int64_t entry_time(kl_node *n)
{
    return kl_entry_clock_stamp(&n->clock, n->io.clock_ms(n->io.ctx), boot_ns(n));
}

static void pending_free(pending *p)
{
    free(p->principal);
    free(p->receipt);
    free(p->waiters);
}

static pending *pending_find(kl_node *n, const char *principal, const uint8_t cmd[16])
{
    for (size_t i = 0; i < n->n_pend; i++)
        if (memcmp(n->pend[i].command_id, cmd, 16) == 0 && strcmp(n->pend[i].principal, principal) == 0)
            return &n->pend[i];
    return NULL;
}

static int pending_add_waiter(pending *p, kl_node_reply_fn fn, void *cookie)
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

static void ws_free(Keyload__V1__WriteSet *w)
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
        ws_free(e->sets[i]);
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
static node_ws *ws_build(const char *principal, const uint8_t *cmd, const uint8_t *digest,
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
        ws_free(&nw->ws);
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
    return nw;
}

/* Appends w, encoded, as LogEntry field 5. */
static kl_code ws_pack(const Keyload__V1__WriteSet *w, kl_buf *out, kl_err *err)
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

/* Answers every parked Receive with err: nothing of theirs was proposed. */
static void park_drop(kl_node *n, const kl_err *err)
{
    kl_parked *p;
    while ((p = kl_park_take_any(&n->park)) != NULL)
        kl_parked_answer(p, err->code, err, NULL, 0);
}

static kl_code apply_encoded(kl_node *n, const uint8_t *bytes, size_t len, kl_err *err)
{
    uint64_t t0 = mono_ns();
    Keyload__V1__LogEntry *e = keyload__v1__log_entry__unpack(NULL, len, bytes);
    if (e == NULL)
        return kl_fail(err, KL_INTERNAL, "log", "log entry does not decode");
    uint64_t t1 = mono_ns();
    kl_entry_clock_observe(&n->clock, e->time_unix_ms, boot_ns(n));
    kl_code rc = kl_store_apply(n->store, e, err);
    if (rc == KL_OK && n->park.n > 0)
        park_note_entry(n, e);
    keyload__v1__log_entry__free_unpacked(e, NULL);
    n->costs.apply_decode_ns += t1 - t0;
    n->costs.apply_write_ns += mono_ns() - t1;
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
    uint64_t t0 = mono_ns();
    Keyload__V1__LogEntry e = KEYLOAD__V1__LOG_ENTRY__INIT;
    e.term = own->term;
    e.index = own->index;
    e.time_unix_ms = own->time_ms;
    e.n_write_sets = own->n;
    e.write_sets = own->sets;
    kl_entry_clock_observe(&n->clock, e.time_unix_ms, boot_ns(n));
    kl_code rc = kl_store_apply(n->store, &e, err);
    /* The leader holds the parked Receives, and its own entries skip apply_encoded. */
    if (rc == KL_OK && n->park.n > 0)
        park_note_entry(n, &e);
    entry_free(own);
    memmove(n->proposed, n->proposed + 1, (n->n_proposed - 1) * sizeof *n->proposed);
    n->n_proposed--;
    n->costs.own_entries_applied++;
    n->costs.apply_write_ns += mono_ns() - t0;
    return rc;
}

static void proposed_clear(kl_node *n)
{
    for (size_t i = 0; i < n->n_proposed; i++)
        entry_free(&n->proposed[i]);
    n->n_proposed = 0;
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
        for (size_t j = 0; j < p->n_waiters; j++) {
            if (ok && p->refused)
                p->waiters[j].fn(p->waiters[j].cookie, p->refusal.code, &p->refusal, NULL, 0);
            else
                p->waiters[j].fn(p->waiters[j].cookie, ok ? KL_OK : KL_UNKNOWN_WRITE_OUTCOME,
                                 ok ? NULL : &lost, ok ? p->receipt : NULL, ok ? p->receipt_len : 0);
        }
        pending_free(p);
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
        for (size_t j = 0; j < p->n_waiters; j++)
            p->waiters[j].fn(p->waiters[j].cookie, err->code, err, NULL, 0);
        pending_free(p);
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
        for (size_t j = 0; j < p->n_waiters; j++)
            p->waiters[j].fn(p->waiters[j].cookie, err->code, err, NULL, 0);
        pending_free(p);
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
    uint64_t t0 = mono_ns();
    kl_buf entry = {0};
    kl_err err;
    kl_code rc = KL_OK;
    if (encode_entry(&entry, n->group.index, n->group.term, n->group.time_ms, NULL, &n->group_bytes, 0) != 0) {
        rc = kl_fail(&err, KL_INTERNAL, "memory", "out of memory encoding the log entry");
    } else {
        kl_err fe;
        (void)KL_FAILPOINT("daemon.before_append", &fe);
        uint64_t t1 = mono_ns();
        n->costs.encode_ns += t1 - t0;
        /* Proposed means in the log, not committed: the callers are answered at apply. */
        rc = n->io.propose(n->io.ctx, entry.p, entry.len);
        n->costs.propose_ns += mono_ns() - t1;
        if (rc != KL_OK)
            kl_fail(&err, rc, rc == KL_NOT_LEADER ? "not_leader" : "unavailable",
                    "the batch could not be proposed (%s); nothing was written, retry", kl_code_name(rc));
    }
    kl_buf_free(&entry);
    if (rc != KL_OK) {
        group_fail(n, &err);
        return;
    }
    n->costs.entries_proposed++;
    n->costs.batches_grouped += n->group.n;
    proposed_keep(n);
    group_reset(n);
}

static bool pending_at(const kl_node *n, uint64_t index)
{
    for (size_t i = 0; i < n->n_pend; i++)
        if (n->pend[i].index == index)
            return true;
    return false;
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
    /* The cut points of a client's batch: its entry is durable and committed, nobody has
     * been answered. Only entries with a waiting caller pass them, so a restart's no-op
     * does not. */
    bool waited = pending_at(n, index);
    if (waited) {
        (void)KL_FAILPOINT("daemon.after_append_before_apply", &fe);
        (void)KL_FAILPOINT("daemon.after_append_before_reply", &fe);
    }
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
    if (waited)
        (void)KL_FAILPOINT("daemon.after_apply_before_reply", &fe);
    kl_overlay_drop_upto(&n->overlay, index);
    if (index == n->pinc_proposed)
        n->pinc_proposed = 0;
    answer_index(n, index, term);
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
    if (encode_entry(&e, index, term, entry_time(n), pinc, NULL, 0) == 0 &&
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

/* The limits a batch or read of database tenant/db runs under: the cluster file's,
 * tightened by the database's own (DatabaseLimits, from this partition's catalog copy). */
static kl_code database_limits(kl_node *n, kl_view *v, const char *tenant, const char *db, kl_limits *out,
                               kl_err *err)
{
    *out = n->cfg.limits;
    if (tenant == NULL)
        return KL_OK;
    const Keyload__V1__CatalogDatabase *d;
    bool found;
    kl_code rc = kl_subject_cache_database(n->subjects, v, tenant, db, &d, &found, err);
    v->scanned = 0;
    if (rc != KL_OK || !found)
        return rc;
    const Keyload__V1__DatabaseLimits *l = d->limits;
    if (l && l->max_scan_records && l->max_scan_records < out->max_scan_records)
        out->max_scan_records = l->max_scan_records;
    if (l && l->max_batch_bytes && l->max_batch_bytes < out->max_batch_bytes)
        out->max_batch_bytes = l->max_batch_bytes;
    if (l && l->max_query_read_bytes && l->max_query_read_bytes < out->max_query_read_bytes)
        out->max_query_read_bytes = l->max_query_read_bytes;
    return KL_OK;
}

/* ---- submit ---- */

static void reply_err(kl_node_reply_fn fn, void *cookie, const kl_err *err)
{
    fn(cookie, err->code, err, NULL, 0);
}

/* Who a request acts as (DESIGN.md §5): the principal's record in this partition's catalog
 * as applied (and proposed) here, never anything the request claims. */
typedef struct node_subject {
    kl_authz_subject subject;
    /* Borrowed from n->subjects until the next principal lookup; NULL for the local
     * administrator. */
    const Keyload__V1__CatalogPrincipal *record;
    const kl_authz_subject *who;            /* &subject, or NULL: the trusted local administrator */
    uint64_t policy_epoch;                  /* 0 for the local administrator */
} node_subject;

static bool bootstrap_only(const Keyload__V1__BatchRequest *b)
{
    for (size_t i = 0; i < b->n_mutations; i++)
        if (b->mutations[i]->kind_case != KEYLOAD__V1__MUTATION__KIND_BOOTSTRAP)
            return false;
    return b->n_mutations > 0;
}

/* Requests without a session act as the local principal: allowed only on an
 * insecure_local_admin cluster, or for a batch that is only a Bootstrap (its proof of the
 * cluster secret is its authentication). UNAUTHENTICATED "principal" when a session's
 * principal is gone from the catalog (its sessions end at the gate too). */
static kl_code subject_load(kl_node *n, kl_view *v, const char *principal,
                            const Keyload__V1__BatchRequest *b, node_subject *out, kl_err *err);

static kl_code node_subject_load(kl_node *n, kl_view *v, const char *principal,
                                 const Keyload__V1__BatchRequest *b, node_subject *out, kl_err *err)
{
    uint64_t t0 = mono_ns();
    kl_code rc = subject_load(n, v, principal, b, out, err);
    n->authz_requests++;
    n->authz_ns += mono_ns() - t0;
    return rc;
}

static kl_code subject_load(kl_node *n, kl_view *v, const char *principal,
                            const Keyload__V1__BatchRequest *b, node_subject *out, kl_err *err)
{
    memset(out, 0, sizeof *out);
    if (strcmp(principal, KL_CATALOG_RESERVED_PRINCIPAL) == 0) {
        if (n->cfg.insecure_local_admin || (b != NULL && bootstrap_only(b)))
            return KL_OK;
        return kl_fail(err, KL_UNAUTHENTICATED, "session_required",
                       "this cluster requires a session: say Hello with a principal's key first "
                       "(keyload --principal ID --key FILE)");
    }
    bool found;
    kl_code rc = kl_subject_cache_principal(n->subjects, v, principal, &out->record, &found, err);
    if (rc != KL_OK)
        return rc;
    if (!found)
        return kl_fail(err, KL_UNAUTHENTICATED, "principal",
                       "the session's principal no longer exists in this partition's catalog");
    out->subject.principal = out->record;
    out->who = &out->subject;
    out->policy_epoch = out->record->policy_epoch;
    return KL_OK;
}

static void node_subject_free(node_subject *s)
{
    s->record = NULL; /* the cache owns it */
}

/* Looks up a committed outcome. Returns KL_OK with *found and, when found, handled (the
 * caller was answered). A replay whose principal's policy epoch differs from the one its
 * outcome recorded (after the original's own effect: epoch_after_effect) is refused
 * PERMISSION_DENIED "stale_authority": the original did commit and its outcome stays
 * stored; a fresh command id runs under current grants. */
static kl_code replay_committed(kl_node *n, const char *principal, const uint8_t cmd[16],
                                const uint8_t digest[KL_DIGEST_LEN], uint64_t policy_epoch, bool *found,
                                kl_node_reply_fn fn, void *cookie, kl_err *err)
{
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
    if (o->request_digest.len != KL_DIGEST_LEN || memcmp(o->request_digest.data, digest, KL_DIGEST_LEN) != 0) {
        unsigned long long at = (unsigned long long)o->index;
        keyload__v1__outcome_record__free_unpacked(o, NULL);
        return kl_fail(err, KL_CONFLICT, "command_id_reused",
                       "command_id was already used for a different batch (committed at index %llu)", at);
    }
    if (o->error_code != 0) {
        /* A committed refusal answers the same every time (DESIGN.md §7), whatever the
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
    fn(cookie, KL_OK, NULL, o->receipt.data, o->receipt.len);
    keyload__v1__outcome_record__free_unpacked(o, NULL);
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
                             kl_overlay *scratch, const kl_buf *receipt, const kl_err *refusal,
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
    kl_view base = {.store = n->store, .pending = &n->overlay, .scan_limit = UINT64_MAX};
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
        ws_free(&ev->ws->ws);
    memset(ev, 0, sizeof *ev);
    kl_overlay_init(&ev->scratch);
}

/* Evaluates b against applied state plus every pending write, as the entry at (index,
 * term) with time now, and builds its receipt, outcome and write-set. */
static kl_code batch_evaluate(kl_node *n, const char *principal, const Keyload__V1__BatchRequest *b,
                              const uint8_t digest[KL_DIGEST_LEN], const node_subject *subj,
                              const kl_limits *limits, uint64_t index, uint64_t term, int64_t now,
                              batch_eval *ev, kl_err *err)
{
    kl_view view = {.store = n->store, .pending = &n->overlay, .scratch = &ev->scratch,
                    .scan_limit = limits->max_scan_records};
    kl_eval_ctx ctx = {.view = &view, .limits = limits, .partition = n->cfg.partition,
                       .partition_count = n->cfg.partition_count, .now_ms = now,
                       .random = n->io.random, .index = index, .term = term,
                       .catalog = n->cfg.partition == 0 ? &ev->catalog : NULL,
                       .cluster_secret = n->cfg.cluster_secret, .who = subj->who,
                       .clock_ns = mono_ns, .signing = &n->signing};
    uint64_t t0 = mono_ns();
    kl_code rc = kl_engine_eval_batch(&ctx, b, &ev->results, err);
    n->authz_ns += ctx.authz_ns;
    n->costs.eval_ns += mono_ns() - t0;
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
    t0 = mono_ns();
    if (!ev->refused && encode_receipt(&ev->receipt, b, n->cfg.partition, index, term, now, &ev->results,
                                       digest, ev->catalog.version) != 0)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory encoding the receipt");
    uint64_t epoch_after = subj->policy_epoch;
    if (!ev->refused && (rc = epoch_after_effect(n, &view, principal, subj, &epoch_after, err)) != KL_OK)
        return rc;
    if ((rc = batch_outcome(principal, epoch_after, b, digest, &ev->scratch, &ev->receipt,
                            ev->refused ? &ev->refusal : NULL, index, err)) != KL_OK)
        return rc;
    ev->ws = ws_build(principal, b->command_id.data, digest, epoch_after, &ev->receipt, &ev->scratch, 0);
    if (ev->ws == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory encoding a write-set");
    rc = ws_pack(&ev->ws->ws, &ev->packed, err);
    n->costs.encode_ns += mono_ns() - t0;
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
    kl_code rc = group_note_undo(n, &ev->scratch, err);
    if (rc != KL_OK)
        return rc;
    size_t bytes_before = n->group_bytes.len;
    if (kl_buf_append(&n->group_bytes, ev->packed.p, ev->packed.len) != 0)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    pending *p = &n->pend[n->n_pend];
    memset(p, 0, sizeof *p);
    p->principal = strdup(principal);
    if (p->principal == NULL || pending_add_waiter(p, fn, cookie) != 0) {
        pending_free(p);
        n->group_bytes.len = bytes_before;
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    }
    if ((rc = kl_overlay_absorb(&n->overlay, &ev->scratch, index, err)) != KL_OK) {
        /* The pending overlay is now partial; no safe way back but a restart. */
        pending_free(p);
        n->group_bytes.len = bytes_before;
        n->broken = true;
        return rc;
    }
    memcpy(p->command_id, b->command_id.data, 16);
    memcpy(p->digest, digest, KL_DIGEST_LEN);
    p->index = index;
    p->term = term;
    p->receipt = ev->receipt.p;
    p->receipt_len = ev->receipt.len;
    p->refused = ev->refused;
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
        kl_view base = {.store = n->store, .pending = &n->overlay, .scan_limit = UINT64_MAX};
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

/* kl_node_submit_batch; wait_cap_ms bounds how long an idle Receive may be parked, and
 * `again` is a parked request evaluated again (fn/cookie then answer all its waiters). */
static void submit(kl_node *n, const char *principal, const uint8_t *req, size_t len, int64_t wait_cap_ms,
                   kl_parked *again, kl_node_reply_fn fn, void *cookie)
{
    kl_err err;
    kl_err_clear(&err);
    if (n->broken) {
        kl_fail(&err, KL_UNAVAILABLE, "node_broken",
                "this member stopped accepting writes after a storage failure; it must restart");
        reply_err(fn, cookie, &err);
        return;
    }
    Keyload__V1__BatchRequest *b = keyload__v1__batch_request__unpack(NULL, len, req);
    if (b == NULL) {
        kl_fail(&err, KL_INVALID_ARGUMENT, "payload", "the Batch request does not decode");
        reply_err(fn, cookie, &err);
        return;
    }
    batch_eval ev;
    memset(&ev, 0, sizeof ev);
    kl_overlay_init(&ev.scratch);
    uint8_t digest[KL_DIGEST_LEN];
    kl_view view = {.store = n->store, .pending = &n->overlay};
    kl_limits limits;
    const char *tenant, *db;
    node_subject subj = {0};
    /* Shape first (names are checked before any key is built from them), then again
     * under the database's own limits. */
    kl_code rc = kl_engine_validate_batch(b, len, &n->cfg.limits, &err);
    if (rc == KL_OK)
        rc = kl_engine_batch_database(b, &tenant, &db, &err);
    if (rc == KL_OK)
        rc = database_limits(n, &view, tenant, db, &limits, &err);
    if (rc == KL_OK)
        rc = kl_engine_validate_batch(b, len, &limits, &err);
    if (rc == KL_OK)
        rc = node_subject_load(n, &view, principal, b, &subj, &err);
    if (rc != KL_OK)
        goto fail;
    uint64_t index, term;
    bool serving;
    group_next(n, &index, &term, &serving);
    if (!serving) {
        rc = refuse_not_leader(n, &err);
        goto fail;
    }
    if (n->io.admit != NULL && (rc = n->io.admit(n->io.ctx, &err)) != KL_OK)
        goto fail;
    if (kl_canon_batch_digest(BATCH_METHOD, principal, b, digest) != 0) {
        rc = kl_fail(&err, KL_INTERNAL, "memory", "out of memory computing the request digest");
        goto fail;
    }
    pending *p = pending_find(n, principal, b->command_id.data);
    if (p != NULL) {
        if (memcmp(p->digest, digest, KL_DIGEST_LEN) != 0) {
            rc = kl_fail(&err, KL_CONFLICT, "command_id_reused",
                         "command_id is in use by a different batch that is still committing");
            goto fail;
        }
        /* Same request still in flight: wait for that entry's commit. */
        if (pending_add_waiter(p, fn, cookie) != 0) {
            rc = kl_fail(&err, KL_INTERNAL, "memory", "out of memory");
            goto fail;
        }
        goto done;
    }
    kl_parked *parked = kl_park_find(&n->park, principal, b->command_id.data);
    if (parked != NULL) {
        /* A retry of a Receive that waits for messages: answered with it. */
        if (memcmp(parked->digest, digest, KL_DIGEST_LEN) != 0)
            rc = kl_fail(&err, KL_CONFLICT, "command_id_reused",
                         "command_id is in use by a different batch that waits for messages");
        else if (kl_parked_add_waiter(parked, fn, cookie) != 0)
            rc = kl_fail(&err, KL_INTERNAL, "memory", "out of memory");
        if (rc != KL_OK)
            goto fail;
        goto done;
    }
    bool found;
    if ((rc = replay_committed(n, principal, b->command_id.data, digest, subj.policy_epoch, &found, fn,
                               cookie, &err)) != KL_OK)
        goto fail;
    if (found)
        goto done;
    if (n->n_pend >= n->cfg.max_pending_batches || n->overlay.bytes >= n->cfg.max_pending_bytes) {
        rc = kl_fail(&err, KL_UNAVAILABLE, "write_pipeline_full",
                     "the write pipeline is full (%zu batches pending); retry shortly", n->n_pend);
        goto fail;
    }
    /* Batches of one group share its slot and its time. At most two passes: after the
     * flush the group is empty, and an empty group fits any batch. */
    int64_t now = n->group.n > 0 ? n->group.time_ms : entry_time(n);
    for (;;) {
        if ((rc = batch_evaluate(n, principal, b, digest, &subj, &limits, index, term, now, &ev, &err)) != KL_OK)
            goto fail;
        if (ev.idle) {
            idle_answer(n, b, principal, req, len, digest, wait_cap_ms, again, &ev.results, now, fn, cookie);
            goto done;
        }
        if (group_fits(n, &ev))
            break;
        /* Its write-set would take the group past its byte bound: propose the group, and
         * evaluate this batch again for the slot after it (its receipt names its index). */
        batch_eval_free(&ev);
        kl_node_flush(n);
        group_next(n, &index, &term, &serving);
        if (!serving) {
            rc = refuse_not_leader(n, &err);
            goto fail;
        }
        now = entry_time(n);
    }
    if ((rc = group_join(n, principal, b, digest, &ev, index, term, now, fn, cookie, &err)) != KL_OK)
        goto fail;
    /* The caller is now answered at apply, or by the group's failure. */
    if (n->io.flush_soon == NULL)
        kl_node_flush(n);
    else if (n->group.n == 1)
        n->io.flush_soon(n->io.ctx);
    goto done;
fail:
    reply_err(fn, cookie, &err);
done:
    batch_eval_free(&ev);
    node_subject_free(&subj);
    keyload__v1__batch_request__free_unpacked(b, NULL);
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
    int64_t now = entry_time(n);
    if ((rc = kl_catalog_apply_change(&view, n->cfg.partition, now, ch, err)) != KL_OK)
        goto done;
    node_ws *w = ws_build(NULL, NULL, NULL, 0, NULL, &scratch, ch->version);
    if (w == NULL) {
        rc = kl_fail(err, KL_INTERNAL, "memory", "out of memory encoding a write-set");
        goto done;
    }
    rc = ws_pack(&w->ws, &ws, err);
    ws_free(&w->ws);
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

/* ---- reads ---- */

/* A read's queue ref: present, with valid names (before any key is built from them). */
static kl_code check_read_ref(const Keyload__V1__QueueLaneRef *q, kl_err *err)
{
    kl_code rc;
    if (q == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "queue", "queue is missing");
    if ((rc = kl_name_check("queue.tenant", q->tenant, err)) != KL_OK ||
        (rc = kl_name_check("queue.database", q->database, err)) != KL_OK ||
        (rc = kl_name_check("queue.queue", q->queue, err)) != KL_OK)
        return rc;
    return KL_OK;
}

kl_code kl_node_queue_stats(kl_node *n, const char *principal, const uint8_t *req, size_t len,
                            uint8_t **answer, size_t *answer_len, kl_err *err)
{
    node_subject subj = {0};
    Keyload__V1__QueueStatsRequest *r = keyload__v1__queue_stats_request__unpack(NULL, len, req);
    if (r == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "payload", "the QueueStats request does not decode");
    kl_code rc;
    if ((rc = check_read_ref(r->queue, err)) != KL_OK)
        goto done;
    kl_view view = {.store = n->store};
    kl_limits limits;
    if ((rc = node_subject_load(n, &view, principal, NULL, &subj, err)) == KL_OK) {
        uint64_t t0 = mono_ns(); /* node_subject_load counts its own time */
        rc = kl_access_inspect(subj.who, r->queue, err);
        n->authz_ns += mono_ns() - t0;
    }
    if (rc != KL_OK)
        goto done;
    if ((rc = database_limits(n, &view, r->queue->tenant, r->queue->database, &limits, err)) != KL_OK)
        goto done;
    view.scan_limit = limits.max_scan_records;
    kl_eval_ctx ctx = {.view = &view, .limits = &limits, .partition = n->cfg.partition,
                       .now_ms = entry_time(n), .random = n->io.random};
    Keyload__V1__QueueStatsAnswer a = KEYLOAD__V1__QUEUE_STATS_ANSWER__INIT;
    Keyload__V1__QueueLimits lim;
    char dlq[KL_NAME_LEN_MAX + 1];
    if ((rc = kl_engine_queue_stats(&ctx, r->queue, &a, &lim, dlq, err)) != KL_OK)
        goto done;
    a.applied_index = kl_store_applied_index(n->store);
    *answer_len = keyload__v1__queue_stats_answer__get_packed_size(&a);
    *answer = malloc(*answer_len ? *answer_len : 1);
    if (*answer == NULL) {
        rc = kl_fail(err, KL_INTERNAL, "memory", "out of memory");
        goto done;
    }
    keyload__v1__queue_stats_answer__pack(&a, *answer);
done:
    node_subject_free(&subj);
    keyload__v1__queue_stats_request__free_unpacked(r, NULL);
    return rc;
}

kl_code kl_node_query_access(kl_node *n, const char *principal, const char *tenant,
                             const char *database, const char *queue, bool transfer, kl_err *err)
{
    Keyload__V1__QueueLaneRef q = KEYLOAD__V1__QUEUE_LANE_REF__INIT;
    q.tenant = (char *)tenant;
    q.database = (char *)database;
    q.queue = (char *)queue;
    kl_code rc = check_read_ref(&q, err);
    if (rc != KL_OK)
        return rc;
    node_subject subj = {0};
    kl_view view = {.store = n->store};
    if ((rc = node_subject_load(n, &view, principal, NULL, &subj, err)) == KL_OK) {
        uint64_t t0 = mono_ns(); /* node_subject_load counts its own time */
        rc = kl_access_query(subj.who, &q, transfer, err);
        n->authz_ns += mono_ns() - t0;
    }
    node_subject_free(&subj);
    return rc;
}

static kl_code check_transfer_ref(const char *what, const Keyload__V1__QueueLaneRef *q, kl_err *err)
{
    kl_code rc = check_read_ref(q, err);
    if (rc == KL_OK && q->lane && q->lane[0])
        rc = kl_name_check(what, q->lane, err);
    return rc;
}

static kl_code check_transfer_id(const ProtobufCBinaryData *id, kl_err *err)
{
    if (!kl_guid_valid(id->data, id->len))
        return kl_fail(err, KL_INVALID_ARGUMENT, "transfer_id",
                       "transfer_id must be a 16-byte GUID that is not all zero");
    return KL_OK;
}

kl_code kl_node_transfer_read(kl_node *n, kl_node_transfer_read_kind kind, const char *principal,
                              const uint8_t *req, size_t len, uint8_t **answer, size_t *answer_len,
                              kl_err *err)
{
    node_subject subj = {0};
    ProtobufCMessage *r = NULL;
    const char *tenant = NULL, *db = NULL;
    kl_code rc = KL_OK;
    switch (kind) {
    case KL_NODE_INSPECT_TRANSFER: {
        Keyload__V1__InspectQueueTransferRequest *q = keyload__v1__inspect_queue_transfer_request__unpack(NULL, len, req);
        if ((r = (ProtobufCMessage *)q) == NULL)
            break;
        if ((rc = check_transfer_ref("source_queue.lane", q->source_queue, err)) == KL_OK)
            rc = check_transfer_id(&q->transfer_id, err);
        if (rc == KL_OK) {
            tenant = q->source_queue->tenant;
            db = q->source_queue->database;
        }
        break;
    }
    case KL_NODE_TRANSFER_RECEIPT: {
        Keyload__V1__InspectQueueTransferReceiptRequest *q =
            keyload__v1__inspect_queue_transfer_receipt_request__unpack(NULL, len, req);
        if ((r = (ProtobufCMessage *)q) == NULL)
            break;
        if ((rc = check_transfer_ref("destination_queue.lane", q->destination_queue, err)) == KL_OK &&
            (rc = check_transfer_ref("source_queue.lane", q->source_queue, err)) == KL_OK)
            rc = check_transfer_id(&q->transfer_id, err);
        if (rc == KL_OK) {
            tenant = q->destination_queue->tenant;
            db = q->destination_queue->database;
        }
        break;
    }
    case KL_NODE_TRANSFER_FAILURE: {
        Keyload__V1__ReadQueueTransferFailureRequest *q =
            keyload__v1__read_queue_transfer_failure_request__unpack(NULL, len, req);
        if ((r = (ProtobufCMessage *)q) == NULL)
            break;
        /* An Accept's failure names the destination, a Complete's the source (only one). */
        const Keyload__V1__QueueLaneRef *on = q->source_queue ? q->source_queue : q->destination_queue;
        if (q->source_queue != NULL && q->destination_queue != NULL)
            rc = kl_fail(err, KL_INVALID_ARGUMENT, "source_queue",
                         "name destination_queue (a failed Accept) or source_queue (a failed Complete), not both");
        else if (q->source_queue != NULL) {
            if ((rc = check_transfer_ref("source_queue.lane", q->source_queue, err)) == KL_OK)
                rc = check_transfer_id(&q->transfer_id, err);
        } else
            rc = check_transfer_ref("destination_queue.lane", q->destination_queue, err);
        if (rc == KL_OK) {
            tenant = on->tenant;
            db = on->database;
        }
        break;
    }
    case KL_NODE_PENDING_TRANSFERS: {
        Keyload__V1__ListPendingQueueTransfersRequest *q =
            keyload__v1__list_pending_queue_transfers_request__unpack(NULL, len, req);
        if ((r = (ProtobufCMessage *)q) == NULL)
            break;
        if ((rc = kl_name_check("tenant", q->tenant, err)) == KL_OK &&
            (rc = kl_name_check("database", q->database, err)) == KL_OK && q->source_queue != NULL) {
            rc = check_transfer_ref("source_queue.lane", q->source_queue, err);
            if (rc == KL_OK && (strcmp(q->source_queue->tenant, q->tenant) != 0 ||
                                strcmp(q->source_queue->database, q->database) != 0))
                rc = kl_fail(err, KL_INVALID_ARGUMENT, "source_queue",
                             "source_queue must be in the listed tenant/database");
        }
        tenant = q->tenant;
        db = q->database;
        break;
    }
    }
    if (r == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "payload", "the transfer read request does not decode");
    if (rc != KL_OK)
        goto done;
    kl_view view = {.store = n->store};
    kl_limits limits;
    if ((rc = node_subject_load(n, &view, principal, NULL, &subj, err)) != KL_OK ||
        (rc = database_limits(n, &view, tenant, db, &limits, err)) != KL_OK)
        goto done;
    view.scan_limit = limits.max_scan_records;
    kl_eval_ctx ctx = {.view = &view, .limits = &limits, .partition = n->cfg.partition,
                       .partition_count = n->cfg.partition_count, .now_ms = entry_time(n),
                       .random = n->io.random, .cluster_secret = n->cfg.cluster_secret,
                       .who = subj.who, .clock_ns = mono_ns};
    switch (kind) {
    case KL_NODE_INSPECT_TRANSFER:
        rc = kl_transfer_inspect(&ctx, (Keyload__V1__InspectQueueTransferRequest *)r, answer, answer_len, err);
        break;
    case KL_NODE_TRANSFER_RECEIPT:
        rc = kl_transfer_receipt(&ctx, (Keyload__V1__InspectQueueTransferReceiptRequest *)r, answer, answer_len,
                                 err);
        break;
    case KL_NODE_TRANSFER_FAILURE:
        rc = kl_transfer_failure(&ctx, (Keyload__V1__ReadQueueTransferFailureRequest *)r, principal,
                                 subj.record ? keyload__v1__catalog_principal__get_packed_size(subj.record) : 0,
                                 subj.policy_epoch, answer, answer_len, err);
        break;
    case KL_NODE_PENDING_TRANSFERS: {
        /* Cursors bind to the partition incarnation: a partition rebuilt from nothing
         * (same names, new log) never resumes an old cursor. */
        uint8_t pinc[16] = {0};
        kl_key pk;
        kl_key_meta(&pk, "pinc");
        uint8_t *pv;
        size_t pn;
        bool found;
        if ((rc = kl_store_get(n->store, pk.b, pk.len, &pv, &pn, &found, err)) != KL_OK)
            break;
        if (found) {
            if (pn == 16)
                memcpy(pinc, pv, 16);
            free(pv);
        }
        rc = kl_transfer_pending(&ctx, (Keyload__V1__ListPendingQueueTransfersRequest *)r, pinc,
                                 subj.record ? keyload__v1__catalog_principal__get_packed_size(subj.record) : 0,
                                 answer, answer_len, err);
        break;
    }
    }
    n->authz_ns += ctx.authz_ns;
done:
    node_subject_free(&subj);
    protobuf_c_message_free_unpacked(r, NULL);
    return rc;
}

/* A meta counter for status reports: 0 when absent or unreadable. */
static uint64_t meta_u64(kl_store *st, const char *name)
{
    uint64_t out;
    kl_err err;
    return kl_store_meta_u64(st, name, &out, &err) == KL_OK ? out : 0;
}

void kl_node_catalog_status(kl_node *n, uint64_t *version, uint64_t *changes)
{
    *version = meta_u64(n->store, "catalog_version");
    *changes = meta_u64(n->store, "catalog_changes");
}

kl_code kl_node_catalog_change(kl_node *n, uint64_t version, uint8_t **bytes, size_t *len, bool *found,
                               kl_err *err)
{
    kl_key k;
    kl_key_catalog_change(&k, version);
    return kl_store_get(n->store, k.b, k.len, bytes, len, found, err);
}

kl_code kl_node_locate_queue(kl_node *n, const char *principal, const uint8_t *req, size_t len,
                             uint8_t **answer, size_t *answer_len, kl_err *err)
{
    node_subject subj = {0};
    Keyload__V1__LocateQueueRequest *r = keyload__v1__locate_queue_request__unpack(NULL, len, req);
    if (r == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "payload", "the LocateQueue request does not decode");
    kl_code rc;
    Keyload__V1__CatalogQueue *def = NULL;
    if ((rc = check_read_ref(r->queue, err)) != KL_OK)
        goto done;
    kl_view view = {.store = n->store, .scan_limit = 16};
    if ((rc = node_subject_load(n, &view, principal, NULL, &subj, err)) != KL_OK ||
        (rc = kl_access_tenant(subj.who, r->queue->tenant, err)) != KL_OK)
        goto done;
    bool found;
    if ((rc = kl_catalog_get_queue(&view, r->queue->tenant, r->queue->database, r->queue->queue, &def,
                                   &found, err)) != KL_OK)
        goto done;
    if (!found) {
        rc = kl_fail(err, KL_NOT_FOUND, "queue", "queue '%s' does not exist in %s/%s", r->queue->queue,
                     r->queue->tenant, r->queue->database);
        goto done;
    }
    Keyload__V1__LocateQueueAnswer a = KEYLOAD__V1__LOCATE_QUEUE_ANSWER__INIT;
    a.queue = def;
    uint64_t changes;
    kl_node_catalog_status(n, &a.catalog_version, &changes);
    *answer_len = keyload__v1__locate_queue_answer__get_packed_size(&a);
    *answer = malloc(*answer_len ? *answer_len : 1);
    if (*answer == NULL) {
        rc = kl_fail(err, KL_INTERNAL, "memory", "out of memory");
        goto done;
    }
    keyload__v1__locate_queue_answer__pack(&a, *answer);
done:
    node_subject_free(&subj);
    if (def)
        keyload__v1__catalog_queue__free_unpacked(def, NULL);
    keyload__v1__locate_queue_request__free_unpacked(r, NULL);
    return rc;
}

kl_code kl_node_find_principal(kl_node *n, const char *principal_id,
                               Keyload__V1__CatalogPrincipal **out, bool *found, kl_err *err)
{
    kl_view view = {.store = n->store, .scan_limit = 16};
    return kl_catalog_find_principal(&view, principal_id, out, found, err);
}

kl_code kl_node_find_principal_cached(kl_node *n, const char *principal_id,
                                      const Keyload__V1__CatalogPrincipal **out, bool *found,
                                      kl_err *err)
{
    kl_view view = {.store = n->store, .scan_limit = 16};
    return kl_subject_cache_principal(n->subjects, &view, principal_id, out, found, err);
}

kl_code kl_node_show_principal(kl_node *n, const char *principal, const uint8_t *req, size_t len,
                               uint8_t **answer, size_t *answer_len, kl_err *err)
{
    Keyload__V1__ShowPrincipalRequest *r = keyload__v1__show_principal_request__unpack(NULL, len, req);
    if (r == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "payload", "the ShowPrincipal request does not decode");
    node_subject subj = {0};
    Keyload__V1__CatalogPrincipal *p = NULL;
    kl_view view = {.store = n->store, .scan_limit = 16};
    bool found = false;
    kl_code rc = kl_name_check("principal_id", r->principal_id, err);
    if (rc == KL_OK)
        rc = node_subject_load(n, &view, principal, NULL, &subj, err);
    if (rc == KL_OK)
        rc = kl_catalog_find_principal(&view, r->principal_id, &p, &found, err);
    if (rc == KL_OK && !found)
        rc = kl_fail(err, KL_NOT_FOUND, "principal", "principal %s does not exist", r->principal_id);
    /* The principal itself, or an administrator of its tenant (a database administrator
     * manages the principals it grants to). The same answer for another tenant's principal
     * as for none would hide existence; ids are unique cluster-wide anyway. */
    if (rc == KL_OK && subj.who != NULL && strcmp(subj.record->principal_id, p->principal_id) != 0) {
        rc = kl_access_tenant(subj.who, p->tenant, err);
        if (rc == KL_OK && !subj.record->cluster_admin && !subj.record->database_admin)
            rc = kl_fail(err, KL_PERMISSION_DENIED, "role:administrator",
                         "only the principal itself or an administrator of its tenant may read it");
    }
    if (rc == KL_OK) {
        Keyload__V1__ShowPrincipalAnswer a = KEYLOAD__V1__SHOW_PRINCIPAL_ANSWER__INIT;
        a.principal = p;
        uint64_t changes;
        kl_node_catalog_status(n, &a.catalog_version, &changes);
        *answer_len = keyload__v1__show_principal_answer__get_packed_size(&a);
        *answer = malloc(*answer_len ? *answer_len : 1);
        if (*answer == NULL)
            rc = kl_fail(err, KL_INTERNAL, "memory", "out of memory");
        else
            keyload__v1__show_principal_answer__pack(&a, *answer);
    }
    if (p != NULL)
        keyload__v1__catalog_principal__free_unpacked(p, NULL);
    node_subject_free(&subj);
    keyload__v1__show_principal_request__free_unpacked(r, NULL);
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
    kl_overlay_free(&n->group_undo);
    kl_overlay_free(&n->overlay);
    kl_signing_cache_wipe(&n->signing);
    kl_subject_cache_free(n->subjects);
    free(n);
}
