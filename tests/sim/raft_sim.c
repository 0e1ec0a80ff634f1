/* raft_sim: see raft_sim.h. Built into the unit-test runner (through tests/unit/test_raft.c)
 * and into the soak runner (tests/sim/soak.c). */
#include "tests/sim/raft_sim.h"

#include "daemon/repl/raft.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const sim_opts *sim_current;

typedef struct s_ent {
    uint64_t term;
    uint8_t type;
    uint8_t *data;
    size_t len;
    uint64_t h; /* hash of the whole prefix 1..index */
} s_ent;

/* A snapshot as the simulated driver keeps, streams and stages it: the point, the prefix hash
 * of the log up to it (log matching across installs) and the state machine digest there. */
typedef struct s_snap {
    uint64_t index, term, h, dig;
} s_snap;

#define SIM_STAGED 4
#define SIM_MAX_NODES 16 /* identities per run: the first n plus those membership adds */

struct sim;

typedef struct s_node {
    struct sim *sim;
    uint64_t id;
    kl_raft *r; /* NULL while crashed */
    /* the simulated disk */
    kl_raft_hard_state hs;
    s_ent *log; /* log[k] holds index snap_index + 1 + k */
    size_t len, cap;
    uint64_t snap_index, snap_term, snap_h, snap_dig; /* compacted up to snap_index */
    uint64_t applied_durable, dig_durable;
    /* the simulated state machine: digest after each applied index (valid above snap_index
     * up to applied; the disk's snapshot and applied_durable survive a crash) */
    uint64_t dig, *digs;
    size_t cap_digs;
    s_snap staged[SIM_STAGED]; /* streamed snapshots waiting for an install (volatile) */
    int n_staged;
    /* the simulated driver */
    /* the readies outstanding, oldest first: their writes complete in this order */
    kl_raft_ready rds[KL_RAFT_MAX_READIES];
    int rd_wait[KL_RAFT_MAX_READIES]; /* steps until that write completes, after the ones before */
    int n_rd;
    bool stall;  /* the disk never completes (tests hold a member back) */
    uint64_t commit_seen, checked_commit, applied, leader_checked_term;
    int group; /* partition group; messages cross groups only when equal */
    /* membership: the configuration at the disk's snapshot point (what a driver stores with
     * its snapshot), and an identity that is gone for good (its disk wiped or its machine
     * dead: it never restarts; its disk is still counted as the copies it held) */
    kl_raft_conf snap_conf;
    bool retired;
    uint64_t dur_term, dur_checked; /* durability check: leader term and index checked */
} s_node;

typedef struct s_msg {
    uint64_t at;
    kl_raft_msg m;
    s_snap pay; /* KL_RAFT_MSG_SNAPSHOT: the streamed bytes */
} s_msg;

typedef struct s_prop {
    uint64_t node, index, term, applied_index;
    bool acked; /* the proposer applied (index, term): a client was told "committed" */
} s_prop;

typedef struct s_read {
    uint64_t node, min_index;
    bool done;
} s_read;

typedef struct s_commit {
    uint64_t term, commit_term, h;
    uint64_t dig; /* applied: the state machine digest after this index */
} s_commit;

typedef struct s_hslot {
    uint64_t index, term, h;
} s_hslot;

typedef struct sim {
    sim_opts o;
    sim_result *res;
    bool failed;
    uint64_t rng, now;
    int n;
    s_node nodes[SIM_MAX_NODES];
    s_msg *net;
    size_t net_len, net_cap;
    /* per-seed knobs */
    int drop_pct, dup_pct, max_delay, crash_pm, restart_pct, part_pm, heal_pct, prop_pct,
        read_pct, slow_pct, tick_pct;
    uint64_t snap_threshold, snap_trailing; /* compaction: how far applied runs ahead, kept */
    /* Stragglers: per mille of messages held for 1..3 election timeouts (an answer stuck in
     * a queue while the cluster elects and commits elsewhere: a read round must never count
     * it). Drawn from a stream of their own, and 0 for half the seeds, so that the main
     * stream, and every seed without stragglers, run exactly as before. */
    int late_pm;
    uint64_t late_rng;
    /* membership: per-mille chance per chaos step to start a change (0: static seed), the
     * change under way (target, steps spent) and what the run did */
    int memb_pm;
    bool op_on;
    kl_raft_conf op_target;
    uint64_t op_steps;
    int ops_started;
    uint32_t election_ticks, heartbeat_ticks;
    bool chaos;
    /* global truth */
    s_commit *committed; /* [i - 1] for index i */
    size_t n_committed, cap_committed;
    s_commit *applied; /* term and entry hash applied at each index (commit_term unused) */
    size_t n_applied, cap_applied;
    uint64_t *leader_of_term;
    size_t cap_lot;
    s_hslot *ht; /* (index, term) -> prefix hash, for log matching */
    size_t ht_len, ht_cap;
    s_prop *props;
    size_t n_props, cap_props;
    s_read *reads;
    size_t n_reads, cap_reads;
} sim;

/* ---------------------------------------------------------------- utilities */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rnd(sim *s) { return mix64(s->rng += 0x9e3779b97f4a7c15ull); }
static uint64_t below(sim *s, uint64_t n) { return n ? rnd(s) % n : 0; }
static bool pct(sim *s, int p) { return (int)below(s, 100) < p; }
static bool permille(sim *s, int p) { return (int)below(s, 1000) < p; }

static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *n = realloc(p, c * elem);
    if (n == NULL) {
        fprintf(stderr, "raft_sim: out of memory\n");
        abort();
    }
    memset((char *)n + *cap * elem, 0, (c - *cap) * elem);
    *cap = c;
    return n;
}

static void fail(sim *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(sim *s, const char *fmt, ...)
{
    if (s->failed)
        return;
    s->failed = true;
    s->res->ok = false;
    s->res->fail_step = s->now;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->res->why, sizeof s->res->why, fmt, ap);
    va_end(ap);
    if (s->o.trace)
        fprintf(stderr, "FAIL at step %llu: %s\n", (unsigned long long)s->now, s->res->why);
}

static void trace(sim *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void trace(sim *s, const char *fmt, ...)
{
    if (!s->o.trace)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%6llu ", (unsigned long long)s->now);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static uint64_t hash_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t entry_hash(uint64_t term, uint8_t type, const uint8_t *d, size_t len)
{
    return mix64(hash_bytes(d, len) ^ mix64(term) ^ ((uint64_t)type << 56));
}

static s_node *node_by_id(sim *s, uint64_t id)
{
    return id >= 1 && id <= (uint64_t)s->n ? &s->nodes[id - 1] : NULL;
}

static uint64_t disk_last(const s_node *n) { return n->snap_index + n->len; }
static s_ent *dent(s_node *n, uint64_t i) { return &n->log[i - n->snap_index - 1]; }

static void set_dig(s_node *n, uint64_t index, uint64_t d)
{
    n->digs = grow(n->digs, &n->cap_digs, index + 1, sizeof *n->digs);
    n->digs[index] = d;
}

bool sim_parse_config(const char *str, int *n, int *q2)
{
    int a, b;
    char tail;
    if (sscanf(str, "%dof%d%c", &a, &b, &tail) != 2 || b < 1 || b > 9 || a < 1 || a > b)
        return false;
    *q2 = a;
    *n = b;
    return true;
}

/* ---------------------------------------------------------------- global truth */

/* Log matching: every durable (index, term) maps to one prefix hash, across all members and
 * all time. */
static void ht_check(sim *s, uint64_t index, uint64_t term, uint64_t h, uint64_t node)
{
    if (s->ht_len * 2 >= s->ht_cap) {
        size_t ncap = s->ht_cap ? s->ht_cap * 2 : 1024;
        s_hslot *n = calloc(ncap, sizeof *n);
        for (size_t i = 0; i < s->ht_cap; i++) {
            if (s->ht[i].index == 0)
                continue;
            size_t j = mix64(s->ht[i].index * 31 + s->ht[i].term) & (ncap - 1);
            while (n[j].index != 0)
                j = (j + 1) & (ncap - 1);
            n[j] = s->ht[i];
        }
        free(s->ht);
        s->ht = n;
        s->ht_cap = ncap;
    }
    size_t j = mix64(index * 31 + term) & (s->ht_cap - 1);
    while (s->ht[j].index != 0) {
        if (s->ht[j].index == index && s->ht[j].term == term) {
            if (s->ht[j].h != h)
                fail(s, "log matching: n%llu holds (%llu, term %llu) with a different prefix",
                     (unsigned long long)node, (unsigned long long)index,
                     (unsigned long long)term);
            return;
        }
        j = (j + 1) & (s->ht_cap - 1);
    }
    s->ht[j] = (s_hslot){index, term, h};
    s->ht_len++;
}

static uint64_t term_of(sim *s, s_node *n, uint64_t index)
{
    uint64_t t = 0;
    kl_code rc = kl_raft_term_at(n->r, index, &t);
    if (rc != KL_OK) {
        fail(s, "n%llu: term_at(%llu) = %s", (unsigned long long)n->id,
             (unsigned long long)index, kl_code_name(rc));
        return 0;
    }
    return t;
}

static void check_leader_has(sim *s, s_node *l, uint64_t from, uint64_t lterm)
{
    kl_raft_status st;
    kl_raft_status_get(l->r, &st);
    /* Below its snapshot index the leader holds the entries only as applied state, which
     * came from a committed (index, term) (checked at every install and compaction). */
    for (uint64_t i = from > st.snap_index ? from : st.snap_index; i <= s->n_committed && !s->failed;
         i++) {
        const s_commit *c = &s->committed[i - 1];
        if (i == 0 || c->commit_term >= lterm)
            continue;
        if (i > st.last_index || term_of(s, l, i) != c->term)
            fail(s, "leader completeness: leader n%llu of term %llu lacks committed (%llu, "
                    "term %llu)", (unsigned long long)l->id, (unsigned long long)lterm,
                 (unsigned long long)i, (unsigned long long)c->term);
    }
}

static void record_committed(sim *s, uint64_t index, uint64_t term, uint64_t cterm,
                             uint64_t node)
{
    if (index <= s->n_committed) {
        s_commit *c = &s->committed[index - 1];
        if (c->term != term)
            fail(s, "committed entry changed: index %llu term %llu, now term %llu on n%llu",
                 (unsigned long long)index, (unsigned long long)c->term,
                 (unsigned long long)term, (unsigned long long)node);
        if (cterm < c->commit_term)
            c->commit_term = cterm;
        return;
    }
    if (index != s->n_committed + 1) {
        fail(s, "sim: commit recorded out of order (%llu after %llu)", (unsigned long long)index,
             (unsigned long long)s->n_committed);
        return;
    }
    s->committed = grow(s->committed, &s->cap_committed, index, sizeof *s->committed);
    s->committed[index - 1] = (s_commit){.term = term, .commit_term = cterm};
    s->n_committed = index;
    s->res->committed = index;
    /* Leaders of later terms that already exist must hold it too. */
    for (int k = 0; k < s->n; k++) {
        s_node *l = &s->nodes[k];
        if (l->r == NULL)
            continue;
        kl_raft_status st;
        kl_raft_status_get(l->r, &st);
        if (st.role == KL_RAFT_LEADER && st.term > cterm)
            check_leader_has(s, l, index, st.term);
    }
}

/* ---------------------------------------------------------------- simulated disk */

/* What the core reported durable; while kl_raft_new runs (n->r not set yet), the whole disk. */
static uint64_t core_persisted(const s_node *n)
{
    if (n->r == NULL)
        return disk_last(n);
    kl_raft_status st;
    kl_raft_status_get(n->r, &st);
    return st.persisted;
}

static kl_code st_term(void *ctx, uint64_t index, uint64_t *term)
{
    s_node *n = ctx;
    uint64_t persisted = core_persisted(n);
    /* The core promised to read only what it knows is durable; stale entries above that
     * (written before a truncation was reported) must never be read. */
    if (index <= n->snap_index || index > disk_last(n) || index > persisted) {
        fail(n->sim, "n%llu: core read term of %llu (stored %llu..%llu, persisted %llu)",
             (unsigned long long)n->id, (unsigned long long)index,
             (unsigned long long)n->snap_index + 1, (unsigned long long)disk_last(n),
             (unsigned long long)persisted);
        return KL_INTERNAL;
    }
    *term = dent(n, index)->term;
    return KL_OK;
}

static kl_code st_entries(void *ctx, uint64_t lo, uint64_t hi, size_t max_bytes,
                          kl_raft_entry *out, size_t cap, size_t *cnt)
{
    s_node *n = ctx;
    uint64_t persisted = core_persisted(n);
    *cnt = 0;
    if (lo <= n->snap_index || hi > disk_last(n) + 1 || hi > persisted + 1 || lo >= hi) {
        fail(n->sim, "n%llu: core read entries %llu..%llu (stored %llu..%llu, persisted %llu)",
             (unsigned long long)n->id, (unsigned long long)lo, (unsigned long long)hi,
             (unsigned long long)n->snap_index + 1, (unsigned long long)disk_last(n),
             (unsigned long long)persisted);
        return KL_INTERNAL;
    }
    size_t k = 0, bytes = 0;
    for (uint64_t i = lo; i < hi && k < cap; i++) {
        const s_ent *e = dent(n, i);
        if (k > 0 && bytes + e->len > max_bytes)
            break;
        out[k] = (kl_raft_entry){.term = e->term, .index = i, .type = e->type, .len = e->len};
        if (e->len) {
            out[k].data = malloc(e->len);
            memcpy(out[k].data, e->data, e->len);
        }
        bytes += e->len;
        k++;
    }
    *cnt = k;
    return KL_OK;
}

/* The driver's optional index of configuration entries (raft_entry.h), here a scan. */
static kl_code st_last_conf(void *ctx, uint64_t hi, uint64_t *index)
{
    s_node *n = ctx;
    *index = 0;
    if (hi > disk_last(n))
        hi = disk_last(n);
    for (uint64_t i = hi; i > n->snap_index; i--)
        if (dent(n, i)->type == KL_RAFT_ENTRY_CONF) {
            *index = i;
            break;
        }
    return KL_OK;
}

static void disk_truncate(s_node *n, uint64_t from)
{
    for (uint64_t i = from; i <= disk_last(n); i++)
        free(dent(n, i)->data);
    n->len = (size_t)(from - 1 - n->snap_index);
}

/* The install of a ready's snapshot (raft.h "Snapshots and compaction"): the staged stream
 * with that (index, term) becomes the state machine, and the log is replaced by its point. */
static void disk_install(sim *s, s_node *n, const kl_raft_snapshot *sn)
{
    const s_snap *st = NULL;
    for (int i = 0; i < n->n_staged; i++)
        if (n->staged[i].index == sn->index && n->staged[i].term == sn->term)
            st = &n->staged[i];
    if (st == NULL) {
        fail(s, "n%llu: ready installs (%llu, term %llu), which was never staged",
             (unsigned long long)n->id, (unsigned long long)sn->index,
             (unsigned long long)sn->term);
        return;
    }
    s_snap p = *st;
    if (p.index <= n->applied_durable || p.index <= n->applied)
        fail(s, "apply order: n%llu installs %llu with %llu already applied (an index twice)",
             (unsigned long long)n->id, (unsigned long long)p.index,
             (unsigned long long)n->applied);
    if (p.index > s->n_committed || s->committed[p.index - 1].term != p.term)
        fail(s, "n%llu installs (%llu, term %llu), which is not committed",
             (unsigned long long)n->id, (unsigned long long)p.index, (unsigned long long)p.term);
    else if (p.index > s->n_applied || s->applied[p.index - 1].dig != p.dig)
        fail(s, "n%llu installs a snapshot at %llu whose digest no member had there",
             (unsigned long long)n->id, (unsigned long long)p.index);
    ht_check(s, p.index, p.term, p.h, n->id);
    disk_truncate(n, n->snap_index + 1);
    n->snap_index = p.index;
    n->snap_term = p.term;
    n->snap_h = p.h;
    n->snap_dig = p.dig;
    n->snap_conf = sn->conf;
    n->applied_durable = p.index;
    n->dig_durable = p.dig;
    int keep = 0;
    for (int i = 0; i < n->n_staged; i++)
        if (n->staged[i].index > p.index)
            n->staged[keep++] = n->staged[i];
    n->n_staged = keep;
    s->res->installs++;
}

/* Performs the durable part of a ready: hard state, truncation, entries; one atomic write. */
static void persist(sim *s, s_node *n, const kl_raft_ready *rd)
{
    if (rd->has_snapshot)
        disk_install(s, n, &rd->snapshot);
    /* As the driver: a ready that only moves the commit index writes nothing. */
    bool commit_only = rd->has_hard_state && !rd->has_snapshot && rd->truncate_from == 0 &&
                       rd->n_entries == 0 && rd->hard.term == n->hs.term &&
                       rd->hard.vote == n->hs.vote;
    if (rd->has_hard_state && !commit_only) {
        const kl_raft_hard_state *h = &rd->hard;
        if (h->term < n->hs.term || h->commit < n->hs.commit)
            fail(s, "n%llu: durable term/commit went back (%llu/%llu -> %llu/%llu)",
                 (unsigned long long)n->id, (unsigned long long)n->hs.term,
                 (unsigned long long)n->hs.commit, (unsigned long long)h->term,
                 (unsigned long long)h->commit);
        if (h->term == n->hs.term && n->hs.vote != 0 && h->vote != n->hs.vote)
            fail(s, "n%llu: vote changed within term %llu", (unsigned long long)n->id,
                 (unsigned long long)h->term);
        n->hs = *h;
    }
    if (rd->truncate_from) {
        s->res->truncations++;
        if (rd->truncate_from <= n->applied_durable)
            fail(s, "n%llu: truncation at %llu of applied state (applied %llu)",
                 (unsigned long long)n->id, (unsigned long long)rd->truncate_from,
                 (unsigned long long)n->applied_durable);
        if (rd->truncate_from > disk_last(n) + 1 || rd->truncate_from <= n->snap_index ||
            (rd->n_entries > 0 && rd->entries[0].index != rd->truncate_from))
            fail(s, "n%llu: bad truncate_from %llu", (unsigned long long)n->id,
                 (unsigned long long)rd->truncate_from);
        else
            disk_truncate(n, rd->truncate_from);
    }
    for (size_t i = 0; i < rd->n_entries && !s->failed; i++) {
        const kl_raft_entry *e = &rd->entries[i];
        if (e->index != disk_last(n) + 1) {
            fail(s, "n%llu: ready entry %llu does not follow stored %llu",
                 (unsigned long long)n->id, (unsigned long long)e->index,
                 (unsigned long long)disk_last(n));
            return;
        }
        n->log = grow(n->log, &n->cap, n->len + 1, sizeof *n->log);
        uint64_t prev = n->len ? n->log[n->len - 1].h : n->snap_h;
        s_ent *d = &n->log[n->len++];
        d->term = e->term;
        d->type = e->type;
        d->len = e->len;
        d->data = NULL;
        if (e->len) {
            d->data = malloc(e->len);
            memcpy(d->data, e->data, e->len);
        }
        d->h = mix64(prev ^ entry_hash(e->term, e->type, e->data, e->len));
        ht_check(s, e->index, e->term, d->h, n->id);
    }
    /* What is on disk must be restartable: commit inside the log, no committed entry cut. */
    if (n->hs.commit > disk_last(n))
        fail(s, "n%llu: durable commit %llu past the durable log %llu", (unsigned long long)n->id,
             (unsigned long long)n->hs.commit, (unsigned long long)disk_last(n));
    for (uint64_t i = n->snap_index + 1; i <= n->hs.commit && i <= s->n_committed && rd->truncate_from;
         i++)
        if (dent(n, i)->term != s->committed[i - 1].term)
            fail(s, "n%llu: durable log lost committed %llu", (unsigned long long)n->id,
                 (unsigned long long)i);
}

/* ---------------------------------------------------------------- members */

static void trace_conf(sim *s, const char *what, const kl_raft_conf *c);

static void node_start(sim *s, s_node *n)
{
    kl_raft_config c;
    kl_raft_config_default(&c);
    c.id = n->id;
    if (s->memb_pm > 0) {
        c.conf = n->snap_conf; /* the configuration stored with the disk's snapshot */
    } else {
        c.n_members = (size_t)s->o.n; /* a driver that knows nothing of membership */
        for (int i = 0; i < s->o.n; i++)
            c.members[i] = (uint64_t)i + 1;
        c.replica_count = (uint32_t)s->o.q2;
    }
    c.election_ticks = s->election_ticks;
    c.heartbeat_ticks = s->heartbeat_ticks;
    c.rand_seed = rnd(s);
    /* Small limits, varied per start, so that caps, eviction, storage reads, pipelining and
     * dropped outbox messages are all exercised. */
    c.max_inflight = 1 + (uint32_t)below(s, 8);
    c.max_msg_bytes = 64 + below(s, 512);
    c.max_unpersisted_entries = 4 + below(s, 60);
    c.max_unpersisted_bytes = 256 + below(s, 4096);
    c.max_cached_entries = below(s, 40);
    c.max_cached_bytes = below(s, 2048);
    c.max_apply_bytes = 1 + below(s, 1024);
    c.max_pending_reads = 1 + below(s, 16);
    c.max_outbox_msgs = 16 + below(s, 256);
    c.max_outbox_bytes = 4096 + below(s, 65536);
    /* Pipelined writes in most starts: up to max_readies writes queued, completing in order. */
    c.max_readies = 1 + (uint32_t)below(s, KL_RAFT_MAX_READIES);
    if (n->applied_durable > disk_last(n) || n->applied_durable < n->snap_index) {
        fail(s, "n%llu: applied state %llu outside the durable log %llu..%llu: the member "
                "could not restart", (unsigned long long)n->id,
             (unsigned long long)n->applied_durable, (unsigned long long)n->snap_index,
             (unsigned long long)disk_last(n));
        return;
    }
    c.hard = n->hs;
    c.snap_index = n->snap_index;
    c.snap_term = n->snap_term;
    c.last_index = disk_last(n);
    c.applied = n->applied_durable;
    c.storage = (kl_raft_storage){.ctx = n, .term = st_term, .entries = st_entries,
                                  .last_conf = s->memb_pm > 0 ? st_last_conf : NULL};
    kl_err err;
    n->r = NULL;
    kl_code rc = kl_raft_new(&c, &n->r, &err);
    if (rc != KL_OK) {
        fail(s, "n%llu: restart refused: %s", (unsigned long long)n->id, err.message);
        return;
    }
    n->n_rd = 0;
    n->applied = n->applied_durable;
    n->dig = n->dig_durable;
    set_dig(n, n->applied, n->dig);
    n->n_staged = 0;
    n->commit_seen = 0;
    n->checked_commit = 0;
    n->leader_checked_term = 0;
    trace(s, "n%llu start term %llu vote %llu commit %llu snap %llu last %llu applied %llu",
          (unsigned long long)n->id, (unsigned long long)n->hs.term,
          (unsigned long long)n->hs.vote, (unsigned long long)n->hs.commit,
          (unsigned long long)n->snap_index, (unsigned long long)disk_last(n),
          (unsigned long long)n->applied_durable);
    if (s->memb_pm > 0 && s->o.trace) {
        kl_raft_conf c;
        uint64_t ci;
        kl_raft_conf_get(n->r, &c, &ci, NULL);
        char what[64];
        snprintf(what, sizeof what, "n%llu starts with (at %llu)", (unsigned long long)n->id,
                 (unsigned long long)ci);
        trace_conf(s, what, &c);
    }
}

static void node_crash(sim *s, s_node *n)
{
    /* Writes complete in order: any prefix of the queued ones made it, nothing after it. */
    int wrote = 0;
    while (wrote < n->n_rd && pct(s, 50))
        persist(s, n, &n->rds[wrote++]);
    trace(s, "n%llu crash (%d of %d outstanding writes made it)", (unsigned long long)n->id, wrote,
          n->n_rd);
    kl_raft_free(n->r);
    n->r = NULL;
    n->n_rd = 0;
    n->n_staged = 0; /* staged streams do not survive a crash */
    s->res->crashes++;
}

static void apply_entry(sim *s, s_node *n, const kl_raft_entry *e)
{
    if (e->index != n->applied + 1) {
        fail(s, "apply order: n%llu applied %llu after %llu (an index twice, or one skipped "
                "without a snapshot)", (unsigned long long)n->id,
             (unsigned long long)e->index, (unsigned long long)n->applied);
        return;
    }
    /* Applied state skips the WAL: an entry applied before this member's own synced write of
     * it could reach disk ahead of its log entry. So the durable log must hold exactly this
     * entry, and no outstanding write may be about to cut it. */
    bool cut = false; /* an outstanding write is about to cut it */
    for (int k = 0; k < n->n_rd; k++)
        cut = cut || (n->rds[k].truncate_from != 0 && e->index >= n->rds[k].truncate_from);
    if (e->index <= n->snap_index || e->index > disk_last(n) || dent(n, e->index)->term != e->term ||
        cut) {
        fail(s, "n%llu applied (%llu, term %llu) before its own log write of it completed",
             (unsigned long long)n->id, (unsigned long long)e->index,
             (unsigned long long)e->term);
        return;
    }
    uint64_t h = entry_hash(e->term, e->type, e->data, e->len);
    n->dig = mix64(n->dig ^ h);
    set_dig(n, e->index, n->dig);
    if (e->index <= s->n_applied) {
        s_commit *a = &s->applied[e->index - 1];
        if (a->term != e->term || a->h != h)
            fail(s, "state machine safety: n%llu applied a different entry at %llu",
                 (unsigned long long)n->id, (unsigned long long)e->index);
        else if (a->dig != n->dig)
            fail(s, "snapshots: n%llu's state machine digest at %llu differs from another "
                    "member's", (unsigned long long)n->id, (unsigned long long)e->index);
    } else {
        s->applied = grow(s->applied, &s->cap_applied, e->index, sizeof *s->applied);
        s->applied[e->index - 1] = (s_commit){.term = e->term, .h = h, .dig = n->dig};
        s->n_applied = e->index;
    }
    if (e->index <= s->n_committed && s->committed[e->index - 1].term != e->term)
        fail(s, "n%llu applied (%llu, term %llu) but (%llu, term %llu) committed",
             (unsigned long long)n->id, (unsigned long long)e->index,
             (unsigned long long)e->term, (unsigned long long)e->index,
             (unsigned long long)s->committed[e->index - 1].term);
    n->applied = e->index;
    if (e->type != KL_RAFT_ENTRY_NORMAL)
        return;
    uint64_t c;
    if (e->len < 8) {
        fail(s, "applied payload too short");
        return;
    }
    memcpy(&c, e->data, 8);
    if (c >= s->n_props) {
        fail(s, "applied unknown proposal %llu", (unsigned long long)c);
        return;
    }
    s_prop *p = &s->props[c];
    if (p->applied_index == 0)
        p->applied_index = e->index;
    else if (p->applied_index != e->index)
        fail(s, "proposal %llu applied at %llu and %llu", (unsigned long long)c,
             (unsigned long long)p->applied_index, (unsigned long long)e->index);
    if (n->id == p->node && e->index == p->index && e->term == p->term && !p->acked) {
        p->acked = true;
        s->res->acked++;
    }
}

/* The end of a snapshot stream, told to the sender's core (whatever instance runs now: a
 * report to a restarted or deposed member must change nothing harmful). */
static void snap_report(sim *s, const kl_raft_msg *m, bool ok)
{
    s_node *f = node_by_id(s, m->from);
    if (!ok)
        s->res->snapshots_failed++;
    if (f == NULL || f->r == NULL)
        return;
    kl_code rc = kl_raft_report_snapshot(f->r, m->to, ok);
    if (rc != KL_OK)
        fail(s, "n%llu: report_snapshot = %s", (unsigned long long)f->id, kl_code_name(rc));
}

static void net_send_pay(sim *s, const kl_raft_msg *m, const s_snap *pay)
{
    if (s->chaos && pct(s, s->drop_pct)) {
        s->res->dropped++;
        if (m->type == KL_RAFT_MSG_SNAPSHOT)
            snap_report(s, m, false);
        return;
    }
    int copies = 1 + (s->chaos && pct(s, s->dup_pct));
    for (int c = 0; c < copies; c++) {
        s->net = grow(s->net, &s->net_cap, s->net_len + 1, sizeof *s->net);
        s_msg *d = &s->net[s->net_len++];
        d->at = s->now + 1 + below(s, (uint64_t)s->max_delay);
        if (s->chaos && s->late_pm > 0) {
            uint64_t z = mix64(++s->late_rng);
            if ((int)(z % 1000) < s->late_pm)
                d->at += (1 + (z >> 32) % 3) * s->election_ticks;
        }
        d->m = *m;
        d->pay = pay ? *pay : (s_snap){0};
        d->m.entries = NULL;
        if (m->n_entries) {
            d->m.entries = malloc(m->n_entries * sizeof *m->entries);
            for (size_t i = 0; i < m->n_entries; i++) {
                d->m.entries[i] = m->entries[i];
                d->m.entries[i].data = NULL;
                if (m->entries[i].len) {
                    d->m.entries[i].data = malloc(m->entries[i].len);
                    memcpy(d->m.entries[i].data, m->entries[i].data, m->entries[i].len);
                }
            }
        }
    }
}

static void net_send(sim *s, const kl_raft_msg *m) { net_send_pay(s, m, NULL); }

/* A snapshot request from the core: stream the disk's snapshot if it is still the one asked
 * for (a later compaction replaced it: report the failure, the core asks again). */
static void send_snapshot(sim *s, s_node *n, const kl_raft_msg *m)
{
    if (n->snap_index != m->snap.index || n->snap_term != m->snap.term) {
        snap_report(s, m, false);
        return;
    }
    s_snap p = {n->snap_index, n->snap_term, n->snap_h, n->snap_dig};
    kl_raft_msg at = *m;
    if (n->applied > n->snap_index && pct(s, 50)) {
        /* The daemon streams its CURRENT applied state (snapwire.h), at an index A >= the
         * one asked for, and names A in the message the receiver steps: model both. */
        const s_ent *e = dent(n, n->applied);
        p = (s_snap){n->applied, e->term, e->h, n->digs[n->applied]};
        at.snap.index = p.index;
        at.snap.term = p.term;
        /* ... with the configuration as of A, not the one as of the index asked for: a
         * configuration entry between them would otherwise be lost by the install. */
        for (uint64_t i = n->applied; i > n->snap_index; i--) {
            const s_ent *c = dent(n, i);
            if (c->type != KL_RAFT_ENTRY_CONF)
                continue;
            size_t off;
            kl_err err;
            if (kl_raft_conf_decode(c->data, c->len, &at.snap.conf, &off, &err) != KL_OK)
                fail(s, "n%llu: CONF entry %llu does not decode: %s", (unsigned long long)n->id,
                     (unsigned long long)i, err.message);
            break;
        }
    }
    s->res->snapshots_sent++;
    trace(s, "n%llu streams snapshot %llu (term %llu) to n%llu", (unsigned long long)n->id,
          (unsigned long long)p.index, (unsigned long long)p.term, (unsigned long long)m->to);
    net_send_pay(s, &at, &p);
}

/* The receiving driver keeps the highest staged snapshots until an install (raft.h). */
static void stage(s_node *n, const s_snap *p)
{
    int low = 0;
    for (int i = 0; i < n->n_staged; i++) {
        if (n->staged[i].index == p->index && n->staged[i].term == p->term)
            return;
        if (n->staged[i].index < n->staged[low].index)
            low = i;
    }
    if (n->n_staged < SIM_STAGED)
        n->staged[n->n_staged++] = *p;
    else if (n->staged[low].index < p->index)
        n->staged[low] = *p;
}

/* Compaction on a threshold, keeping a trailing window: only what this member applied
 * durably and saw committed (so the committed truth has every index it drops). */
static void maybe_compact(sim *s, s_node *n)
{
    kl_raft_status st;
    kl_raft_status_get(n->r, &st);
    uint64_t top = n->applied_durable;
    if (st.applied < top)
        top = st.applied;
    if (n->checked_commit < top)
        top = n->checked_commit;
    if (top < n->snap_index + s->snap_threshold || top <= s->snap_trailing)
        return;
    uint64_t to = top - s->snap_trailing;
    if (to <= n->snap_index)
        return;
    /* The core first (it reads the term at `to`), then the disk, as raft.h orders it. */
    kl_code rc = kl_raft_compact(n->r, to);
    if (rc != KL_OK) {
        fail(s, "n%llu: compact = %s", (unsigned long long)n->id, kl_code_name(rc));
        return;
    }
    const s_ent *e = dent(n, to);
    kl_raft_conf_get(n->r, NULL, NULL, &n->snap_conf);
    n->snap_term = e->term;
    n->snap_h = e->h;
    n->snap_dig = n->digs[to];
    size_t drop = (size_t)(to - n->snap_index);
    for (size_t i = 0; i < drop; i++)
        free(n->log[i].data);
    memmove(n->log, n->log + drop, (n->len - drop) * sizeof *n->log);
    n->len -= drop;
    n->snap_index = to;
    s->res->compactions++;
    trace(s, "n%llu compacts to %llu", (unsigned long long)n->id, (unsigned long long)to);
}

static void free_msg(kl_raft_msg *m)
{
    for (size_t i = 0; i < m->n_entries; i++)
        free(m->entries[i].data);
    free(m->entries);
}

/* A read state handed out by n, in a ready or early: each read once, never stale. */
static void read_confirmed(sim *s, s_node *n, const kl_raft_read_state *rs)
{
    if (rs->ctx >= s->n_reads || s->reads[rs->ctx].node != n->id || s->reads[rs->ctx].done) {
        fail(s, "n%llu: unexpected read state ctx %llu", (unsigned long long)n->id,
             (unsigned long long)rs->ctx);
        return;
    }
    s_read *q = &s->reads[rs->ctx];
    q->done = true;
    if (rs->index < q->min_index)
        fail(s, "stale read: n%llu confirmed read %llu at index %llu, but %llu was "
                "committed before it was asked", (unsigned long long)n->id,
             (unsigned long long)rs->ctx, (unsigned long long)rs->index,
             (unsigned long long)q->min_index);
    s->res->reads_ok++;
}

/* True while some outstanding ready still holds committed entries not applied yet: those
 * wait for its write, and nothing may be applied past them meanwhile. */
static bool outstanding_unapplied(const s_node *n)
{
    for (int k = 0; k < n->n_rd; k++) {
        const kl_raft_ready *rd = &n->rds[k];
        if (rd->n_committed > 0 && rd->committed[rd->n_committed - 1].index > n->applied)
            return true;
    }
    return false;
}

/* As the driver does when it takes a ready: its committed entries that an earlier write
 * already made durable here (below any truncation an outstanding write makes) are applied
 * before the write starts, unless an earlier outstanding ready's entries still wait for
 * their write; the rest wait for it (complete). */
static void apply_durable_committed(sim *s, s_node *n)
{
    for (int k = 0; k + 1 < n->n_rd; k++) {
        const kl_raft_ready *rd = &n->rds[k];
        if (rd->n_committed > 0 && rd->committed[rd->n_committed - 1].index > n->applied)
            return;
    }
    const kl_raft_ready *rd = &n->rds[n->n_rd - 1];
    uint64_t durable = disk_last(n);
    for (int k = 0; k < n->n_rd; k++)
        if (n->rds[k].truncate_from != 0 && n->rds[k].truncate_from - 1 < durable)
            durable = n->rds[k].truncate_from - 1;
    for (size_t i = 0; i < rd->n_committed && !s->failed; i++) {
        const kl_raft_entry *e = &rd->committed[i];
        if (e->index > durable)
            break;
        if (e->index > n->applied)
            apply_entry(s, n, e);
    }
}

/* The driver's half of the contract for the oldest outstanding ready: persist, then send,
 * then apply, then advance. */
static void complete(sim *s, s_node *n)
{
    /* The write completed: the ready leaves the queue (the next one is the oldest now), so
     * that its own truncation no longer counts as one about to happen. */
    kl_raft_ready done = n->rds[0];
    kl_raft_ready *rd = &done;
    memmove(&n->rds[0], &n->rds[1], (size_t)(n->n_rd - 1) * sizeof n->rds[0]);
    memmove(&n->rd_wait[0], &n->rd_wait[1], (size_t)(n->n_rd - 1) * sizeof n->rd_wait[0]);
    n->n_rd--;
    trace(s, "n%llu completes a write (%d more queued)", (unsigned long long)n->id, n->n_rd);
    persist(s, n, rd);
    for (size_t i = 0; i < rd->n_msgs && !s->failed; i++) {
        if (rd->msgs[i].type == KL_RAFT_MSG_SNAPSHOT)
            send_snapshot(s, n, &rd->msgs[i]);
        else
            net_send(s, &rd->msgs[i]);
    }
    if (rd->has_snapshot && !s->failed) {
        /* The install skipped the state machine to the snapshot (disk_install checked it
         * moves forward): the one allowed jump in apply order. */
        n->applied = rd->snapshot.index;
        n->dig = n->snap_dig;
        set_dig(n, n->applied, n->dig);
    }
    for (size_t i = 0; i < rd->n_committed && !s->failed; i++)
        if (rd->committed[i].index > n->applied) /* not applied early (take_ready) */
            apply_entry(s, n, &rd->committed[i]);
    for (size_t i = 0; i < rd->n_reads && !s->failed; i++)
        read_confirmed(s, n, &rd->reads[i]);
    n->applied_durable = n->applied;
    n->dig_durable = n->dig;
    kl_code rc = kl_raft_advance(n->r, rd);
    if (rc != KL_OK)
        fail(s, "n%llu: advance = %s", (unsigned long long)n->id, kl_code_name(rc));
    else if (!s->failed)
        maybe_compact(s, n);
}

/* Applies what an earlier write already made durable here while writes run (the driver's
 * apply_early): only once every outstanding ready's committed entries are applied. Applied
 * state may reach disk at once or not (applies skip the WAL): sometimes it is recorded as
 * durable, so a restart must find every such entry in its log. */
static void apply_taken(sim *s, s_node *n)
{
    if (outstanding_unapplied(n))
        return;
    const kl_raft_entry *e;
    size_t k;
    while (!s->failed && (k = kl_raft_take_committed(n->r, &e)) > 0) {
        trace(s, "n%llu takes committed %llu..%llu", (unsigned long long)n->id,
              (unsigned long long)e[0].index, (unsigned long long)e[k - 1].index);
        for (size_t i = 0; i < k && !s->failed; i++)
            apply_entry(s, n, &e[i]);
        s->res->early_applies += k;
    }
    if (pct(s, 50)) {
        n->applied_durable = n->applied;
        n->dig_durable = n->dig;
    }
}

/* As the driver does after every step and tick: heartbeats and their answers leave at once,
 * and confirmed reads are taken, whatever write is outstanding (kl_raft_take_urgent,
 * kl_raft_take_reads). */
static void send_urgent(sim *s, s_node *n)
{
    kl_raft_msg m[2 * KL_RAFT_MAX_MEMBERS];
    size_t k;
    do {
        k = kl_raft_take_urgent(n->r, m, sizeof m / sizeof m[0]);
        for (size_t i = 0; i < k; i++)
            net_send(s, &m[i]);
    } while (k == sizeof m / sizeof m[0]);
    kl_raft_read_state rs[8];
    do {
        k = kl_raft_take_reads(n->r, rs, 8);
        for (size_t i = 0; i < k && !s->failed; i++)
            read_confirmed(s, n, &rs[i]);
    } while (k == 8 && !s->failed);
    if (!s->failed)
        apply_taken(s, n);
}

/* Takes every ready the core hands out (up to its max_readies queued, each with its own
 * write time), then completes the oldest writes whose time has come, in order. */
static void process_ready(sim *s, s_node *n)
{
    if (n->r && !s->failed)
        send_urgent(s, n);
    for (int iter = 0; iter < 2 && n->r && !s->failed; iter++) {
        while (n->r && !s->failed && n->n_rd < KL_RAFT_MAX_READIES && kl_raft_has_ready(n->r)) {
            kl_code rc = kl_raft_get_ready(n->r, &n->rds[n->n_rd]);
            if (rc != KL_OK) {
                fail(s, "n%llu: ready = %s", (unsigned long long)n->id, kl_code_name(rc));
                return;
            }
            if (n->n_rd > 0)
                s->res->pipelined++;
            {
                const kl_raft_ready *q = &n->rds[n->n_rd];
                trace(s, "n%llu ready #%d: trunc %llu ents %llu..%llu committed %llu..%llu hard %d commit %llu",
                      (unsigned long long)n->id, n->n_rd, (unsigned long long)q->truncate_from,
                      (unsigned long long)(q->n_entries ? q->entries[0].index : 0),
                      (unsigned long long)(q->n_entries ? q->entries[q->n_entries - 1].index : 0),
                      (unsigned long long)(q->n_committed ? q->committed[0].index : 0),
                      (unsigned long long)(q->n_committed ? q->committed[q->n_committed - 1].index : 0),
                      (int)q->has_hard_state, (unsigned long long)q->hard.commit);
            }
            n->rd_wait[n->n_rd] = s->chaos && pct(s, s->slow_pct) ? 1 + (int)below(s, 4) : 0;
            n->n_rd++;
            apply_durable_committed(s, n);
            /* A driver may also take the next ready only later: sometimes stop here. */
            if (pct(s, 30))
                break;
        }
        if (n->n_rd == 0 || n->stall)
            return;
        if (n->rd_wait[0] > 0) {
            n->rd_wait[0]--;
            return;
        }
        complete(s, n);
    }
}

/* ---------------------------------------------------------------- the step */

static s_node *random_live(sim *s)
{
    int live[SIM_MAX_NODES], k = 0;
    for (int i = 0; i < s->n; i++)
        if (s->nodes[i].r)
            live[k++] = i;
    return k ? &s->nodes[live[below(s, (uint64_t)k)]] : NULL;
}

static s_node *some_leader(sim *s)
{
    s_node *best = NULL;
    uint64_t best_term = 0;
    for (int i = 0; i < s->n; i++) {
        s_node *n = &s->nodes[i];
        if (!n->r)
            continue;
        kl_raft_status st;
        kl_raft_status_get(n->r, &st);
        if (st.role == KL_RAFT_LEADER && st.term > best_term) {
            best = n;
            best_term = st.term;
        }
    }
    return best;
}

/* Any member that believes it leads, stale ones included: proposals to a deposed leader
 * grow the divergent tails that later elections must truncate. */
static s_node *any_leader(sim *s)
{
    int ls[SIM_MAX_NODES], k = 0;
    for (int i = 0; i < s->n; i++) {
        if (!s->nodes[i].r)
            continue;
        kl_raft_status st;
        kl_raft_status_get(s->nodes[i].r, &st);
        if (st.role == KL_RAFT_LEADER)
            ls[k++] = i;
    }
    return k ? &s->nodes[ls[below(s, (uint64_t)k)]] : NULL;
}

static uint64_t max_commit_anywhere(sim *s)
{
    uint64_t m = s->n_committed;
    for (int i = 0; i < s->n; i++) {
        if (!s->nodes[i].r)
            continue;
        kl_raft_status st;
        kl_raft_status_get(s->nodes[i].r, &st);
        if (st.commit > m)
            m = st.commit;
    }
    return m;
}

static bool propose(sim *s, s_node *n, uint64_t *counter)
{
    uint64_t c = s->n_props;
    uint8_t buf[64];
    size_t len = 8 + (size_t)below(s, 56);
    memcpy(buf, &c, 8);
    for (size_t i = 8; i < len; i++)
        buf[i] = (uint8_t)mix64(c * 131 + i);
    kl_raft_proposal p;
    kl_code rc = kl_raft_propose(n->r, buf, len, &p);
    if (rc == KL_NOT_LEADER || rc == KL_UNAVAILABLE)
        return false;
    if (rc != KL_OK) {
        fail(s, "n%llu: propose = %s", (unsigned long long)n->id, kl_code_name(rc));
        return false;
    }
    s->props = grow(s->props, &s->cap_props, c + 1, sizeof *s->props);
    s->props[c] = (s_prop){.node = n->id, .index = p.index, .term = p.term};
    s->n_props = c + 1;
    s->res->proposals++;
    if (counter)
        *counter = c;
    trace(s, "n%llu propose #%llu at (%llu, term %llu)", (unsigned long long)n->id,
          (unsigned long long)c, (unsigned long long)p.index, (unsigned long long)p.term);
    return true;
}

static void clients(sim *s)
{
    int burst = 1 + (int)below(s, 3);
    for (int b = 0; b < burst; b++) {
        if (!pct(s, s->prop_pct))
            continue;
        s_node *n = pct(s, 80) ? any_leader(s) : NULL;
        if (n == NULL)
            n = random_live(s);
        if (n)
            propose(s, n, NULL);
    }
    if (pct(s, s->read_pct)) {
        s_node *n = pct(s, 70) ? any_leader(s) : NULL;
        if (n == NULL)
            n = random_live(s);
        if (n == NULL)
            return;
        uint64_t ctx = s->n_reads, hint;
        uint64_t min_index = max_commit_anywhere(s);
        kl_code rc = kl_raft_read_index(n->r, ctx, &hint);
        if (rc == KL_OK) {
            s->reads = grow(s->reads, &s->cap_reads, ctx + 1, sizeof *s->reads);
            s->reads[ctx] = (s_read){.node = n->id, .min_index = min_index};
            s->n_reads = ctx + 1;
        } else if (rc != KL_NOT_LEADER && rc != KL_UNAVAILABLE) {
            fail(s, "n%llu: read_index = %s", (unsigned long long)n->id, kl_code_name(rc));
        }
    }
}

static void faults(sim *s)
{
    if (permille(s, s->crash_pm)) {
        /* Leaders are the interesting victims: half the crashes aim at one. */
        s_node *n = pct(s, 50) ? some_leader(s) : NULL;
        if (n == NULL)
            n = random_live(s);
        if (n)
            node_crash(s, n);
    }
    for (int i = 0; i < s->n; i++)
        if (!s->nodes[i].r && !s->nodes[i].retired && pct(s, s->restart_pct))
            node_start(s, &s->nodes[i]);
    bool split = false;
    for (int i = 0; i < s->n; i++)
        split |= s->nodes[i].group != 0;
    if (split && pct(s, s->heal_pct)) {
        for (int i = 0; i < s->n; i++)
            s->nodes[i].group = 0;
        trace(s, "heal");
    } else if (!split && permille(s, s->part_pm)) {
        s_node *l = some_leader(s);
        if (l && pct(s, 40)) {
            /* Cut the leader off alone: the rest elect, the old leader keeps its tail. */
            for (int i = 0; i < s->n; i++)
                s->nodes[i].group = &s->nodes[i] == l;
        } else {
            int groups = 2 + (int)below(s, 2);
            for (int i = 0; i < s->n; i++)
                s->nodes[i].group = (int)below(s, (uint64_t)groups);
        }
        s->res->partitions++;
        if (s->o.trace) {
            char b[64] = "";
            for (int i = 0; i < s->n; i++)
                b[i] = (char)('0' + s->nodes[i].group);
            trace(s, "partition %s", b);
        }
    }
}

static void deliver(sim *s)
{
    /* Due messages, in random order (delays already reorder across steps). */
    size_t due = 0;
    for (size_t i = 0; i < s->net_len; i++) {
        if (s->net[i].at <= s->now) {
            s_msg t = s->net[due];
            s->net[due] = s->net[i];
            s->net[i] = t;
            due++;
        }
    }
    for (size_t i = due; i > 1; i--) {
        size_t j = below(s, i);
        s_msg t = s->net[i - 1];
        s->net[i - 1] = s->net[j];
        s->net[j] = t;
    }
    for (size_t i = 0; i < due && !s->failed; i++) {
        kl_raft_msg *m = &s->net[i].m;
        s_node *from = node_by_id(s, m->from), *to = node_by_id(s, m->to);
        if (to == NULL || to->r == NULL || from->group != to->group) {
            s->res->dropped++;
            if (m->type == KL_RAFT_MSG_SNAPSHOT)
                snap_report(s, m, false);
            continue;
        }
        if (m->type == KL_RAFT_MSG_SNAPSHOT)
            stage(to, &s->net[i].pay); /* every byte arrived and was verified */
        trace(s, "n%llu <- n%llu %s term %llu idx %llu lterm %llu commit %llu n %zu%s ctx %llu",
              (unsigned long long)m->to, (unsigned long long)m->from,
              kl_raft_msg_type_name(m->type), (unsigned long long)m->term,
              (unsigned long long)m->index, (unsigned long long)m->log_term,
              (unsigned long long)m->commit, m->n_entries, m->reject ? " reject" : "",
              (unsigned long long)m->ctx);
        kl_code rc = kl_raft_step(to->r, m);
        if (rc != KL_OK)
            fail(s, "n%llu: step = %s", (unsigned long long)to->id, kl_code_name(rc));
        if (m->type == KL_RAFT_MSG_SNAPSHOT)
            snap_report(s, m, true);
        if (m->type == KL_RAFT_MSG_READ_RESP)
            s->res->read_resps++;
        s->res->delivered++;
    }
    for (size_t i = 0; i < due; i++)
        free_msg(&s->net[i].m);
    if (due > 0)
        memmove(s->net, s->net + due, (s->net_len - due) * sizeof *s->net);
    s->net_len -= due;
}

/* ---------------------------------------------------------------- membership */

static bool has_id(const uint64_t *ids, uint32_t n, uint64_t id)
{
    for (uint32_t i = 0; i < n; i++)
        if (ids[i] == id)
            return true;
    return false;
}

static bool conf_voter(const kl_raft_conf *c, uint64_t id)
{
    return has_id(c->members, c->n_members, id) || has_id(c->old_members, c->n_old, id);
}

static bool conf_member(const kl_raft_conf *c, uint64_t id)
{
    return conf_voter(c, id) || has_id(c->learners, c->n_learners, id);
}

static bool same_ids(const uint64_t *a, uint32_t na, const uint64_t *b, uint32_t nb)
{
    if (na != nb)
        return false;
    for (uint32_t i = 0; i < na; i++)
        if (!has_id(b, nb, a[i]))
            return false;
    return true;
}

static bool conf_same(const kl_raft_conf *a, const kl_raft_conf *b)
{
    return a->n_old == 0 && b->n_old == 0 && a->replica_count == b->replica_count &&
           same_ids(a->members, a->n_members, b->members, b->n_members) &&
           same_ids(a->learners, a->n_learners, b->learners, b->n_learners);
}

static void trace_conf(sim *s, const char *what, const kl_raft_conf *c)
{
    if (!s->o.trace)
        return;
    char b[256];
    int k = 0;
    k += snprintf(b + k, sizeof b - (size_t)k, "%u of {", c->replica_count);
    for (uint32_t i = 0; i < c->n_members; i++)
        k += snprintf(b + k, sizeof b - (size_t)k, " n%llu", (unsigned long long)c->members[i]);
    k += snprintf(b + k, sizeof b - (size_t)k, " } learners {");
    for (uint32_t i = 0; i < c->n_learners; i++)
        k += snprintf(b + k, sizeof b - (size_t)k, " n%llu", (unsigned long long)c->learners[i]);
    k += snprintf(b + k, sizeof b - (size_t)k, " } old %u of {", c->old_replica_count);
    for (uint32_t i = 0; i < c->n_old; i++)
        k += snprintf(b + k, sizeof b - (size_t)k, " n%llu", (unsigned long long)c->old_members[i]);
    trace(s, "%s %s }", what, b);
}

/* A new identity on an empty disk, started with cur plus itself as a learner (what a
 * driver learns from any member that answers before it joins). */
static uint64_t node_new(sim *s, const kl_raft_conf *cur)
{
    s_node *n = &s->nodes[s->n];
    memset(n, 0, sizeof *n);
    n->sim = s;
    n->id = (uint64_t)s->n + 1;
    s->n++;
    n->snap_conf = *cur;
    n->snap_conf.learners[n->snap_conf.n_learners++] = n->id;
    node_start(s, n);
    s->res->added++;
    trace(s, "n%llu created (a new identity, empty disk)", (unsigned long long)n->id);
    return n->id;
}

/* Gone for good: the machine died or its directory was wiped. */
static void node_retire(sim *s, s_node *n)
{
    if (n->r)
        node_crash(s, n);
    n->retired = true;
    trace(s, "n%llu retired for good", (unsigned long long)n->id);
}

static void remove_random_voter(sim *s, kl_raft_conf *t, bool kill)
{
    uint32_t k = (uint32_t)below(s, t->n_members);
    s_node *x = node_by_id(s, t->members[k]);
    t->members[k] = t->members[--t->n_members];
    s->res->removed++;
    if (kill && x) {
        node_retire(s, x); /* the member to replace is dead before the change starts */
        s->res->dead_replaced++;
    }
}

/* Picks a change from the leader's committed configuration: grow by one or two new
 * identities, shrink by one or two voters, or replace one (often dead already). */
static void memb_start(sim *s)
{
    s_node *l = some_leader(s);
    if (l == NULL)
        return;
    kl_raft_conf cur, t;
    uint64_t ci;
    kl_raft_status st;
    kl_raft_conf_get(l->r, &cur, &ci, NULL);
    kl_raft_status_get(l->r, &st);
    if (cur.n_old > 0 || ci > st.commit)
        return;
    t = cur;
    t.n_learners = 0;
    uint32_t n = cur.n_members;
    int kind = (int)below(s, 3), room = SIM_MAX_NODES - s->n;
    if (kind == 0 && n < 7 && room >= 2) {
        for (int k = 1 + (int)below(s, 2); k > 0; k--)
            t.members[t.n_members++] = node_new(s, &cur);
        if (pct(s, 30))
            t.replica_count = 1 + (uint32_t)below(s, t.n_members);
    } else if (kind == 1 && n >= 2) {
        for (int k = n >= 4 ? 1 + (int)below(s, 2) : 1; k > 0; k--)
            remove_random_voter(s, &t, false);
        if (t.replica_count > t.n_members)
            t.replica_count = t.n_members;
    } else if (kind == 2 && room >= 1) {
        /* Killed first only where the others can still elect (n - 1 >= Q1): at 1-of-3 every
         * member must vote, and no configuration change can be elected without a leader. */
        uint32_t q1 = n - cur.replica_count + 1 > n / 2 + 1 ? n - cur.replica_count + 1 : n / 2 + 1;
        remove_random_voter(s, &t, n - 1 >= q1 && pct(s, 60));
        t.members[t.n_members++] = node_new(s, &cur);
    } else {
        return;
    }
    s->op_on = true;
    s->op_target = t;
    s->op_steps = 0;
    s->res->ops_started++;
    trace_conf(s, "membership: target", &t);
}

/* The change is over: members left out stop (or keep running, left alone, at times). */
static void memb_done(sim *s, const kl_raft_conf *cur)
{
    s->op_on = false;
    s->res->ops_done++;
    trace_conf(s, "membership: committed", cur);
    for (int i = 0; i < s->n; i++) {
        s_node *x = &s->nodes[i];
        if (!x->retired && !conf_member(cur, x->id) && pct(s, 70))
            node_retire(s, x);
    }
}

/* The next step towards the target from the leader's log: leave a joint configuration,
 * add the new voters as learners, or the target itself (the joint step). */
static void memb_drive(sim *s)
{
    s->op_steps++;
    s_node *l = some_leader(s);
    if (l == NULL)
        return;
    kl_raft_conf cur, next;
    uint64_t ci;
    kl_raft_status st;
    kl_raft_conf_get(l->r, &cur, &ci, NULL);
    kl_raft_status_get(l->r, &st);
    if (conf_same(&cur, &s->op_target) && ci <= st.commit) {
        memb_done(s, &cur);
        return;
    }
    if (!pct(s, 30))
        return;
    next = cur;
    if (cur.n_old > 0) {
        next.n_old = 0;
        next.old_replica_count = 0;
    } else {
        bool missing = false;
        for (uint32_t i = 0; i < s->op_target.n_members; i++) {
            uint64_t id = s->op_target.members[i];
            if (!conf_member(&cur, id)) {
                next.learners[next.n_learners++] = id;
                missing = true;
            }
        }
        if (!missing)
            next = s->op_target;
    }
    static const char ctx[] = "addresses and keys";
    kl_raft_proposal p;
    kl_err err = {0};
    kl_code rc = kl_raft_propose_conf_change(l->r, &next, ctx, pct(s, 50) ? sizeof ctx : 0, &p,
                                             &err);
    if (rc == KL_OK && p.index > 0) {
        s->res->conf_proposals++;
        trace(s, "n%llu proposes a configuration at (%llu, term %llu)",
              (unsigned long long)l->id, (unsigned long long)p.index, (unsigned long long)p.term);
        trace_conf(s, "membership: proposed", &next);
    } else if (rc != KL_OK && rc != KL_NOT_LEADER && rc != KL_UNAVAILABLE) {
        fail(s, "n%llu: conf change refused: %s (%s)", (unsigned long long)l->id,
             kl_code_name(rc), err.message);
    }
}

/* Durability: every data entry the leader l commits is durable on replica_count voters of
 * the newest configuration in its log (MEMBERSHIP.md rule 3), counted on the disks. */
static void dur_check(sim *s, s_node *l, const kl_raft_status *st, uint64_t known)
{
    if (l->dur_term != st->term) {
        l->dur_term = st->term; /* what it committed before it led, earlier leaders checked */
        l->dur_checked = st->commit;
        return;
    }
    kl_raft_conf c;
    uint64_t ci;
    kl_raft_conf_get(l->r, &c, &ci, NULL);
    for (uint64_t i = l->dur_checked + 1; i <= st->commit && !s->failed; i++) {
        if (i < st->snap_index || i <= known)
            continue; /* compacted in this very step, or committed (and checked) earlier: a
                       * leader adopts a follower's commit index */
        uint64_t t = term_of(s, l, i);
        int copies = 0, type = -1;
        for (int k = 0; k < s->n; k++) {
            s_node *x = &s->nodes[k];
            bool held = i <= x->snap_index;
            if (!held && i <= disk_last(x) && dent(x, i)->term == t) {
                held = true;
                type = dent(x, i)->type;
            }
            copies += held && has_id(c.members, c.n_members, x->id);
        }
        if (type != KL_RAFT_ENTRY_NORMAL)
            continue;
        s->res->dur_checked++;
        if (copies < (int)c.replica_count)
            fail(s, "durability: n%llu committed data entry (%llu, term %llu) with %d copies "
                    "on the voters of its newest configuration, replica_count %u",
                 (unsigned long long)l->id, (unsigned long long)i, (unsigned long long)t,
                 copies, c.replica_count);
    }
    l->dur_checked = st->commit;
    /* MEMBERSHIP.md rule 7: once a configuration without it committed, it does not lead. */
    if (!conf_voter(&c, l->id) && ci <= st->commit)
        fail(s, "removal: n%llu leads term %llu after committing a configuration without it",
             (unsigned long long)l->id, (unsigned long long)st->term);
}

static void check(sim *s)
{
    uint64_t known = s->n_committed; /* committed anywhere before this step */
    for (int k = 0; k < s->n && !s->failed; k++) {
        s_node *n = &s->nodes[k];
        if (!n->r)
            continue;
        kl_raft_status st;
        kl_raft_status_get(n->r, &st);
        if (st.commit > st.last_index || st.applied > st.commit || st.persisted > st.last_index)
            fail(s, "n%llu: commit %llu applied %llu persisted %llu last %llu",
                 (unsigned long long)n->id, (unsigned long long)st.commit,
                 (unsigned long long)st.applied, (unsigned long long)st.persisted,
                 (unsigned long long)st.last_index);
        if (st.commit < n->commit_seen)
            fail(s, "n%llu: commit went back from %llu to %llu", (unsigned long long)n->id,
                 (unsigned long long)n->commit_seen, (unsigned long long)st.commit);
        n->commit_seen = st.commit;
        if (st.role == KL_RAFT_LEADER) {
            s->leader_of_term = grow(s->leader_of_term, &s->cap_lot, st.term + 1,
                                     sizeof *s->leader_of_term);
            uint64_t *l = &s->leader_of_term[st.term];
            if (*l == 0) {
                *l = n->id;
                s->res->leaders++;
                trace(s, "n%llu leads term %llu", (unsigned long long)n->id,
                      (unsigned long long)st.term);
            } else if (*l != n->id) {
                fail(s, "election safety: n%llu and n%llu both lead term %llu",
                     (unsigned long long)*l, (unsigned long long)n->id,
                     (unsigned long long)st.term);
            }
        }
        /* Below the snapshot index the terms are gone; installs and compactions check that
         * their point is committed. */
        uint64_t from = n->checked_commit + 1;
        if (from < st.snap_index)
            from = st.snap_index;
        for (uint64_t i = from; i <= st.commit && !s->failed; i++)
            record_committed(s, i, term_of(s, n, i), st.term, n->id);
        n->checked_commit = st.commit;
        if (st.role == KL_RAFT_LEADER)
            dur_check(s, n, &st, known);
        if (st.role == KL_RAFT_LEADER && n->leader_checked_term != st.term) {
            check_leader_has(s, n, 1, st.term);
            n->leader_checked_term = st.term;
        }
    }
}

static void step(sim *s)
{
    s->now++;
    if (s->chaos) {
        faults(s);
        clients(s);
        if (!s->op_on && permille(s, s->memb_pm))
            memb_start(s);
    }
    if (s->op_on && !s->failed)
        memb_drive(s);
    for (int i = 0; i < s->n && !s->failed; i++) {
        s_node *n = &s->nodes[i];
        if (n->r && (!s->chaos || pct(s, s->tick_pct))) {
            kl_code rc = kl_raft_tick(n->r);
            if (rc != KL_OK)
                fail(s, "n%llu: tick = %s", (unsigned long long)n->id, kl_code_name(rc));
        }
    }
    deliver(s);
    for (int i = 0; i < s->n && !s->failed; i++)
        if (s->nodes[i].r)
            process_ready(s, &s->nodes[i]);
    if (!s->failed)
        check(s);
}

/* Heal everything, then a leader must commit a fresh proposal and everyone must apply it. */
static void liveness(sim *s)
{
    s->chaos = false;
    for (int i = 0; i < s->n; i++) {
        s_node *n = &s->nodes[i];
        n->group = 0;
        n->stall = false;
        for (int k = 0; k < KL_RAFT_MAX_READIES; k++)
            n->rd_wait[k] = 0;
        if (!n->r && !n->retired)
            node_start(s, n);
    }
    /* Elections, plus catching up the longest log one round trip per entry at worst
     * (max_inflight 1, one entry per message). */
    uint64_t longest = 0;
    for (int i = 0; i < s->n; i++) {
        kl_raft_status st;
        if (s->nodes[i].r == NULL)
            continue;
        kl_raft_status_get(s->nodes[i].r, &st);
        longest = st.last_index > longest ? st.last_index : longest;
    }
    uint64_t bound = 400 + 40ull * s->election_ticks + 2ull * ((uint64_t)s->max_delay + 1) * longest;
    if (s->op_on)
        bound += 1000 + 40ull * s->election_ticks; /* three configuration entries to commit */
    kl_raft_conf fin_conf = {0};
    bool proposed = false, committed = false;
    uint64_t fin_term = 0, fin_index = 0, fin = 0;
    for (uint64_t k = 0; k < bound && !s->failed; k++) {
        step(s);
        s->res->liveness_steps++;
        if (!committed) {
            s_node *l = some_leader(s);
            if (l) {
                kl_raft_status st;
                kl_raft_status_get(l->r, &st);
                if (!proposed || st.term != fin_term) {
                    uint64_t c;
                    if (propose(s, l, &c)) {
                        proposed = true;
                        fin = c;
                        fin_term = st.term;
                    }
                }
            }
            if (proposed && s->props[fin].acked && !s->op_on) {
                committed = true;
                kl_raft_conf_get(node_by_id(s, s->props[fin].node)->r, &fin_conf, NULL, NULL);
                fin_index = s->props[fin].index;
                trace(s, "liveness: final proposal committed at %llu", (unsigned long long)fin_index);
            }
            continue;
        }
        bool all = true;
        for (int i = 0; i < s->n; i++)
            all &= s->nodes[i].applied >= fin_index ||
                   (s->memb_pm > 0 && !conf_member(&fin_conf, s->nodes[i].id));
        if (all)
            return;
    }
    if (s->failed)
        return;
    if (!committed)
        fail(s, "liveness: no leader committed a final proposal within %llu healed steps",
             (unsigned long long)bound);
    else
        fail(s, "liveness: members did not all apply index %llu within %llu healed steps",
             (unsigned long long)fin_index, (unsigned long long)bound);
}

static void final_checks(sim *s)
{
    for (size_t c = 0; c < s->n_props && !s->failed; c++) {
        const s_prop *p = &s->props[c];
        if (p->acked && (p->index > s->n_committed || s->committed[p->index - 1].term != p->term))
            fail(s, "acknowledged proposal %zu at (%llu, term %llu) is not committed", c,
                 (unsigned long long)p->index, (unsigned long long)p->term);
    }
}

static void sim_free(sim *s)
{
    for (int i = 0; i < s->n; i++) {
        s_node *n = &s->nodes[i];
        kl_raft_free(n->r);
        disk_truncate(n, n->snap_index + 1);
        free(n->log);
        free(n->digs);
    }
    for (size_t i = 0; i < s->net_len; i++)
        free_msg(&s->net[i].m);
    free(s->net);
    free(s->committed);
    free(s->applied);
    free(s->leader_of_term);
    free(s->ht);
    free(s->props);
    free(s->reads);
}

bool sim_run(const sim_opts *o, sim_result *res)
{
    memset(res, 0, sizeof *res);
    res->ok = true;
    sim *s = calloc(1, sizeof *s);
    s->o = *o;
    s->res = res;
    s->n = o->n;
    s->rng = mix64(o->seed ^ ((uint64_t)o->n << 40) ^ ((uint64_t)o->q2 << 48));
    sim_current = o;
    /* Knobs drawn per seed, so that the seed space covers calm and violent runs alike. */
    s->drop_pct = (int)below(s, 20);
    s->dup_pct = (int)below(s, 8);
    s->max_delay = 1 + (int)below(s, 4);
    s->crash_pm = (int)below(s, 80);
    s->restart_pct = 5 + (int)below(s, 20);
    s->part_pm = (int)below(s, 60);
    s->heal_pct = 2 + (int)below(s, 10);
    s->prop_pct = 10 + (int)below(s, 50);
    s->read_pct = (int)below(s, 20);
    s->slow_pct = (int)below(s, 40);
    s->tick_pct = 70 + (int)below(s, 31);
    /* Compaction: small values so that followers fall behind the first index often. */
    s->snap_threshold = 1 + below(s, 24);
    s->snap_trailing = below(s, 8);
    /* Raft needs broadcast time << election timeout: keep the timeout above a heartbeat
     * interval plus a round trip (two deliveries), by a margin varied per seed. In the chaos
     * phase slow disks and drops still push runs past it, which is the point. */
    s->heartbeat_ticks = 1 + (uint32_t)below(s, 3);
    s->election_ticks = s->heartbeat_ticks + 2 * (uint32_t)s->max_delay + 2 + (uint32_t)below(s, 10);
    s->late_rng = mix64(s->rng ^ 0x5157a66e7ull);
    s->late_pm = s->late_rng % 2 ? 1 + (int)((s->late_rng >> 8) % 20) : 0;
    s->chaos = true;
    trace(s, "knobs: drop %d%% dup %d%% delay 1..%d crash %d/1000 restart %d%% partition %d/1000 "
             "heal %d%% propose %d%% read %d%% slow disk %d%% tick %d%% heartbeat %u election %u",
          s->drop_pct, s->dup_pct, s->max_delay, s->crash_pm, s->restart_pct, s->part_pm,
          s->heal_pct, s->prop_pct, s->read_pct, s->slow_pct, s->tick_pct, s->heartbeat_ticks,
          s->election_ticks);
    /* Membership in most seeds; the others run the static configuration as a driver that
     * knows nothing of it passes it. */
    s->memb_pm = pct(s, 70) ? 2 + (int)below(s, 10) : 0;
    kl_raft_conf c0 = {.n_members = (uint32_t)s->n, .replica_count = (uint32_t)o->q2};
    for (int i = 0; i < s->n; i++) {
        c0.members[i] = (uint64_t)i + 1;
        s->nodes[i].sim = s;
        s->nodes[i].id = (uint64_t)i + 1;
    }
    for (int i = 0; i < s->n; i++) {
        s->nodes[i].snap_conf = c0;
        node_start(s, &s->nodes[i]);
    }
    for (int k = 0; k < o->steps && !s->failed; k++)
        step(s);
    if (!s->failed)
        liveness(s);
    if (!s->failed)
        final_checks(s);
    sim_free(s);
    free(s);
    sim_current = NULL;
    return res->ok;
}
