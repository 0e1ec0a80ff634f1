/* raft: the protocol half of the replication core (the contract is in raft.h).
 *
 * Owns roles, terms, votes, per-follower progress, the commit index, the outbox, read-index
 * rounds and the ready/advance bookkeeping. The log window and its storage reads live in
 * raft_log.c. Nothing here blocks, allocates without a bound, or reads a clock.
 *
 * Invariants (asserted where they are maintained):
 *   commit <= last index; commit never decreases; no entry <= commit is ever truncated;
 *   a leader's log only grows, and its first entry of a term is the no-op;
 *   applied <= applied_handed <= commit; at most max_readies readies are outstanding, their
 *   writes complete in hand-out order, and one that installs a snapshot is the only one;
 *   for every follower progress on a leader: match < next <= last + 1;
 *   snap_index <= applied: only applied entries are compacted, and an install makes the
 *   snapshot index applied and committed at once; nothing <= snap_index is ever read;
 *   a snapshot is installed only by a follower, only past its commit, only with no ready
 *   outstanding; a follower progress in snapshot state gets no appends;
 *   unsent messages always speak for the current term: they are dropped when the term
 *   changes, because an append acknowledgement queued in term T may describe entries that a
 *   term-T' leader has truncated since (sending it would be a lie about what is durable);
 *   the configuration in effect is the latest CONF entry in the log, else the snapshot's,
 *   and every configuration used passed kl_raft_conf_check (I-MEMB-1, I-MEMB-4). */
#include "daemon/repl/raft.h"

#include "daemon/repl/raft_conf.h"
#include "daemon/repl/raft_log.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PR_PROBE = 0, PR_REPLICATE = 1, PR_SNAPSHOT = 2 };

/* What a leader knows about one follower (etcd's tracker.Progress). */
typedef struct progress {
    uint64_t match;    /* highest index the follower acknowledged as persisted and matching */
    uint64_t next;     /* next index to send */
    uint8_t state;     /* PR_PROBE: find the match point, one append at a time;
                        * PR_REPLICATE: stream optimistically, up to max_inflight appends;
                        * PR_SNAPSHOT: the driver streams a snapshot; nothing else goes */
    uint64_t pending_snap; /* PR_SNAPSHOT: the index of the snapshot being streamed */
    bool probe_sent;   /* probe: an append is out; wait for its answer or a heartbeat answer */
    bool active;       /* heard from since the last check-quorum */
    bool hb_restart;   /* a periodic heartbeat went out since a heartbeat answer last
                        * restarted this follower's flow (handle_heartbeat_resp) */
    uint64_t read_ack; /* highest read-index round confirmed by this follower in this term */
    uint64_t ctx_sent; /* highest read-index round sent to this follower (read_seq never
                        * decreases, across terms too) */
    uint64_t infl[KL_RAFT_MAX_INFLIGHT]; /* ring: last index of each append in flight */
    uint32_t infl_start, infl_count;
} progress;

typedef struct pending_read {
    uint64_t ctx, index, seq;
} pending_read;

/* What one outstanding ready owns until its advance. reads is one of max_readies buffers of
 * max_pending_reads states, swapped with `done` when the ready is handed out. */
typedef struct handed_ready {
    kl_raft_entry *ents, *committed;
    size_t n_ents, n_committed;
    kl_raft_msg *msgs;
    size_t n_msgs;
    kl_raft_read_state *reads;
    size_t n_reads;
    bool has_hard, install;
    uint64_t hard_term;
    uint64_t applied_after; /* applied_handed once this ready was handed out */
} handed_ready;

struct kl_raft {
    kl_raft_config cfg;
    /* The configuration in effect (the latest in the log) with its member table: per-member
     * arrays (prs, vote bits) are indexed by its slots. ch: the CONF entries past the
     * snapshot point and the configuration at it (raft_conf.h). */
    kl_rconf mc;
    kl_rconf_hist ch;
    uint64_t conf_index;   /* index of the entry of mc.c, 0 = the base */
    bool conf_dirty;       /* mc changed since the last ready */
    uint32_t reachable; /* leader: members (self included) heard in the last check window */
    kl_rlog log;
    bool fatal;

    uint64_t term, vote, commit;
    kl_raft_role role;
    uint64_t leader;
    uint32_t election_elapsed, heartbeat_elapsed, timeout;
    uint64_t rng;
    uint32_t granted, rejected; /* votes of the running (pre-)election, bits by slot */

    progress prs[KL_RAFT_MAX_MEMBERS];
    bool append_dirty; /* leader: new entries to send, flushed into the next ready */
    bool hb_dirty;     /* leader: a read-index round wants a heartbeat, likewise */
    uint64_t noop_index; /* leader: index of this term's no-op; ready once commit reaches it */

    /* follower: a snapshot stepped in, installed by the next ready (kl_raft_get_ready) */
    bool snap_pending;
    kl_raft_snapshot snap_pend;
    uint64_t snap_pend_from;

    uint64_t read_seq;        /* read-index rounds, numbered across terms */
    pending_read *reads;      /* ring of unconfirmed reads, cap max_pending_reads */
    size_t reads_head, reads_len;
    kl_raft_read_state *done; /* confirmed reads for the next ready */
    size_t done_len;

    kl_raft_msg *out; /* outbox */
    size_t out_len, out_cap, out_bytes;

    /* ready bookkeeping: the readies outstanding, oldest first, in a ring */
    handed_ready hand[KL_RAFT_MAX_READIES];
    size_t hand_head, n_out;
    kl_raft_hard_state hs_handed; /* last hard state handed out (or loaded at start) */
    kl_raft_hard_state hs_written; /* last one handed out in a ready that writes (or loaded) */
    uint64_t term_durable;        /* term of the last hard state reported written (advance) */
    kl_raft_role role_handed;
    uint64_t leader_handed, term_handed;
    uint64_t applied, applied_handed;
    kl_raft_entry *tc_ents; /* the last kl_raft_take_committed hand-out, freed by the next */
    size_t tc_n;
    kl_raft_msg *ug;        /* the last kl_raft_take_urgent hand-out (entries), likewise */
    size_t ug_n, ug_cap;
};

/* ---------------------------------------------------------------- small helpers */

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int slot_of(const kl_raft *r, uint64_t id) { return kl_rconf_slot(&r->mc, id); }

static bool self_voter(const kl_raft *r) { return kl_rconf_is_voter(&r->mc, r->mc.self); }

/* The configuration as of the commit index: the latest CONF entry at or below it, or the
 * snapshot's. */
static const kl_raft_conf *committed_conf(const kl_raft *r)
{
    const kl_raft_conf *com = &r->ch.base;
    for (size_t i = 0; i < r->ch.n && r->ch.index[i] <= r->commit; i++)
        com = &r->ch.conf[i];
    return com;
}

/* MEMBERSHIP.md rule 7: a member stops campaigning once a configuration without it as a
 * voter committed, not when it is appended: until then its vote and its log may be what
 * the members still in the joint configuration need to finish the change (it then leads
 * without counting itself in C_new, and steps down when C_new commits). */
static bool may_campaign(const kl_raft *r)
{
    if (self_voter(r))
        return true;
    const kl_raft_conf *c = committed_conf(r);
    for (uint32_t i = 0; i < c->n_members; i++)
        if (c->members[i] == r->cfg.id)
            return true;
    for (uint32_t i = 0; i < c->n_old; i++)
        if (c->old_members[i] == r->cfg.id)
            return true;
    return false;
}

static bool broken(const kl_raft *r) { return r->fatal || r->log.fatal; }
static kl_code status_of(const kl_raft *r) { return broken(r) ? KL_INTERNAL : KL_OK; }

kl_code kl_raft_quorums(size_t n, uint32_t replica_count, uint32_t *q1)
{
    if (n < 1 || n > KL_RAFT_MAX_MEMBERS || replica_count < 1 || replica_count > n)
        return KL_INVALID_ARGUMENT;
    uint32_t a = (uint32_t)n - replica_count + 1, b = (uint32_t)n / 2 + 1;
    *q1 = a > b ? a : b;
    return KL_OK;
}

/* ---------------------------------------------------------------- outbox */

static size_t msg_bytes(const kl_raft_msg *m)
{
    size_t b = sizeof *m;
    for (size_t i = 0; i < m->n_entries; i++)
        b += sizeof m->entries[i] + m->entries[i].len;
    return b;
}

static void free_msgs(kl_raft_msg *m, size_t n)
{
    for (size_t i = 0; i < n; i++)
        kl_rlog_free_entries(m[i].entries, m[i].n_entries);
}

static kl_raft_msg msg_to(const kl_raft *r, uint8_t type, uint64_t to)
{
    return (kl_raft_msg){.type = type, .from = r->cfg.id, .to = to, .term = r->term};
}

/* Queues m, taking over its entries. Past the outbox limits the message is dropped, exactly
 * as a lossy network would: Raft recovers from that, and memory stays bounded. Returns
 * whether it was queued. */
static bool send(kl_raft *r, kl_raft_msg *m)
{
    /* Every follower answer tells the leader the follower's commit index (adopt_commit). */
    if (m->type == KL_RAFT_MSG_APPEND_RESP || m->type == KL_RAFT_MSG_HEARTBEAT_RESP)
        m->commit = r->commit;
    size_t b = msg_bytes(m);
    if (r->out_len >= r->cfg.max_outbox_msgs || r->out_bytes + b > r->cfg.max_outbox_bytes)
        goto drop;
    if (r->out_len == r->out_cap) {
        size_t ncap = r->out_cap ? r->out_cap * 2 : 16;
        kl_raft_msg *n = realloc(r->out, ncap * sizeof *n);
        if (n == NULL)
            goto drop;
        r->out = n;
        r->out_cap = ncap;
    }
    r->out[r->out_len++] = *m;
    r->out_bytes += b;
    return true;
drop:
    kl_rlog_free_entries(m->entries, m->n_entries);
    return false;
}

static void drop_outbox(kl_raft *r)
{
    free_msgs(r->out, r->out_len);
    r->out_len = 0;
    r->out_bytes = 0;
}

/* ---------------------------------------------------------------- roles */

static void set_term(kl_raft *r, uint64_t term)
{
    assert(term > r->term);
    drop_outbox(r); /* see the header comment: unsent messages speak for the old term */
    r->term = term;
    r->vote = 0;
}

static void reset_timers(kl_raft *r)
{
    r->election_elapsed = 0;
    r->heartbeat_elapsed = 0;
    /* Randomized in [T, 2T) per round so that split votes resolve (Raft §5.2). */
    r->timeout = r->cfg.election_ticks + (uint32_t)(splitmix64(&r->rng) % r->cfg.election_ticks);
}

static void commit_to(kl_raft *r, uint64_t c)
{
    if (c <= r->commit)
        return;
    assert(c <= r->log.last);
    r->commit = c;
}

static void become_follower(kl_raft *r, uint64_t term, uint64_t leader)
{
    if (term > r->term)
        set_term(r, term);
    /* Unconfirmed reads die with the leadership; confirmed ones (r->done) stay valid: their
     * index was confirmed while this member still led. */
    r->reads_len = 0;
    r->append_dirty = false;
    r->hb_dirty = false;
    r->role = KL_RAFT_FOLLOWER;
    r->leader = leader;
    reset_timers(r);
}

static void become_leader(kl_raft *r);
static void become_candidate(kl_raft *r);

/* Records a (pre-)vote answer; returns true if the round is decided (and acted upon). */
static bool poll(kl_raft *r, size_t slot, bool granted)
{
    if (!kl_rconf_is_voter(&r->mc, slot))
        return false; /* a learner's answer counts for nothing */
    uint32_t bit = 1u << slot;
    if ((r->granted | r->rejected) & bit)
        return false; /* a duplicate answer */
    if (granted)
        r->granted |= bit;
    else
        r->rejected |= bit;
    if (kl_rconf_won(&r->mc, r->granted)) {
        if (r->role == KL_RAFT_PRE_CANDIDATE)
            become_candidate(r);
        else
            become_leader(r);
        return true;
    }
    /* Once more than N - Q1 refused (in either half), Q1 grants are out of reach. */
    if (kl_rconf_lost(&r->mc, r->rejected)) {
        become_follower(r, r->term, 0);
        return true;
    }
    return false;
}

static void request_votes(kl_raft *r, uint8_t type, uint64_t term)
{
    for (size_t s = 0; s < r->mc.n; s++) {
        if (s == r->mc.self || !kl_rconf_is_voter(&r->mc, s))
            continue;
        kl_raft_msg m = msg_to(r, type, r->mc.ids[s]);
        m.term = term;
        m.index = r->log.last;
        m.log_term = r->log.last_term;
        send(r, &m);
    }
}

/* Pre-vote (Raft thesis §9.6): ask whether we could win before disturbing anyone's term, so
 * a member that was cut off does not force an election when it comes back. */
static void become_pre_candidate(kl_raft *r)
{
    r->role = KL_RAFT_PRE_CANDIDATE;
    r->leader = 0;
    r->granted = r->rejected = 0;
    reset_timers(r);
    if (poll(r, r->mc.self, true))
        return;
    request_votes(r, KL_RAFT_MSG_PREVOTE, r->term + 1);
}

static void become_candidate(kl_raft *r)
{
    set_term(r, r->term + 1);
    r->vote = r->cfg.id;
    r->role = KL_RAFT_CANDIDATE;
    r->leader = 0;
    r->granted = r->rejected = 0;
    reset_timers(r);
    /* Our own vote counts once the write recording it is durable (kl_raft_advance), as
     * every other member's does: a sole voter would otherwise lead a term that a crash
     * before that write makes it forget, and then vote for another candidate in it. */
    if (r->term_durable == r->term && poll(r, r->mc.self, true))
        return;
    request_votes(r, KL_RAFT_MSG_VOTE, r->term);
}

static void become_leader(kl_raft *r)
{
    assert(r->role == KL_RAFT_CANDIDATE);
    r->role = KL_RAFT_LEADER;
    r->leader = r->cfg.id;
    r->reachable = r->mc.c.n_members; /* the voters just answered; the first check corrects it */
    reset_timers(r);
    for (size_t s = 0; s < r->mc.n; s++)
        r->prs[s] = (progress){.match = 0, .next = r->log.last + 1, .state = PR_PROBE};
    /* The no-op of the new term (Raft §8): earlier-term entries commit only indirectly, through
     * an entry of the leader's own term, and read-index needs one committed too. It bypasses
     * the unpersisted caps: a leader without it could never commit. */
    if (!kl_rlog_append(&r->log, r->term, KL_RAFT_ENTRY_NOOP, NULL, 0)) {
        become_follower(r, r->term, 0); /* out of memory: let someone else lead */
        return;
    }
    r->noop_index = r->log.last;
    r->append_dirty = true;
}

/* ---------------------------------------------------------------- membership */

/* The configuration in effect is the latest in the log (raft.h "Membership"): rebuild the
 * member table from it, keeping each remaining member's progress; a new member starts in
 * probe from the end of the log, like every follower of a new leader. */
static void conf_refresh(kl_raft *r)
{
    uint64_t idx;
    const kl_raft_conf *c = kl_rconf_hist_latest(&r->ch, &idx);
    if (idx == r->conf_index && kl_rconf_equal(c, &r->mc.c))
        return;
    kl_rconf old = r->mc;
    progress prs[KL_RAFT_MAX_MEMBERS];
    memcpy(prs, r->prs, sizeof prs);
    kl_rconf_build(&r->mc, c, r->cfg.id);
    for (size_t s = 0; s < r->mc.n; s++) {
        int o = kl_rconf_slot(&old, r->mc.ids[s]);
        r->prs[s] = o >= 0 ? prs[o] : (progress){.next = r->log.last + 1, .state = PR_PROBE};
    }
    r->granted = r->rejected = 0; /* only followers and leaders change configuration */
    r->conf_index = idx;
    r->conf_dirty = true;
}

/* Appends one entry, taking over d; a CONF entry is the configuration in effect from now on
 * (Raft thesis §4.1). False when it could not be appended (memory, or the configuration
 * history is full: a follower then takes no more entries until it compacts). */
static bool append_entry(kl_raft *r, uint64_t term, uint8_t type, uint8_t *d, size_t len)
{
    kl_raft_conf c;
    if (type == KL_RAFT_ENTRY_CONF) {
        if (kl_rconf_hist_full(&r->ch))
            return false;
        kl_code rc = kl_raft_conf_decode(d, len, &c, NULL, NULL);
        /* invariant I-MEMB-4: a CONF entry reaching the log decodes (msg_valid and
         * kl_raft_propose_conf_change checked it) */
        assert(rc == KL_OK);
        (void)rc;
    }
    if (!kl_rlog_append(&r->log, term, type, d, len))
        return false;
    if (type == KL_RAFT_ENTRY_CONF) {
        kl_rconf_hist_push(&r->ch, r->log.last, &c);
        conf_refresh(r);
    }
    return true;
}

/* Removes entries >= from; a configuration entry among them is rolled back to the latest
 * one still in the log (or the snapshot's). */
static void truncate_log(kl_raft *r, uint64_t from)
{
    kl_rlog_truncate(&r->log, from);
    if (kl_rconf_hist_truncate(&r->ch, from))
        conf_refresh(r);
}

static void bcast_heartbeat(kl_raft *r);

/* MEMBERSHIP.md rule 7: a leader that is no voter of the committed (non-joint)
 * configuration in effect tells the followers its commit and steps down. */
static void leave_if_removed(kl_raft *r)
{
    if (r->role != KL_RAFT_LEADER || r->mc.c.n_old != 0 || r->conf_index > r->commit ||
        self_voter(r))
        return;
    bcast_heartbeat(r);
    become_follower(r, r->term, 0);
}

/* ---------------------------------------------------------------- leader: replication */

static bool paused(const kl_raft *r, const progress *pr)
{
    if (pr->state == PR_SNAPSHOT)
        return true; /* one snapshot in flight, and nothing after it until it is reported */
    if (pr->state == PR_PROBE)
        return pr->probe_sent;
    return pr->infl_count >= r->cfg.max_inflight;
}

static void infl_add(progress *pr, uint32_t cap, uint64_t last)
{
    assert(pr->infl_count < cap);
    pr->infl[(pr->infl_start + pr->infl_count) % cap] = last;
    pr->infl_count++;
}

static void infl_free_to(progress *pr, uint32_t cap, uint64_t index)
{
    while (pr->infl_count > 0 && pr->infl[pr->infl_start] <= index) {
        pr->infl_start = (pr->infl_start + 1) % cap;
        pr->infl_count--;
    }
}

static void become_probe(progress *pr)
{
    pr->state = PR_PROBE;
    pr->next = pr->match + 1;
    pr->probe_sent = false;
    pr->infl_start = pr->infl_count = 0;
}

static void become_replicate(progress *pr)
{
    pr->state = PR_REPLICATE;
    pr->next = pr->match + 1;
    pr->probe_sent = false;
    pr->infl_start = pr->infl_count = 0;
}

/* The follower in slot s needs entries this leader compacted: ask the driver (through the
 * outbox, so after this ready's write like any message) to stream the snapshot. Should the
 * outbox drop it, the follower stays in probe and the next probe tries again. */
static void send_snapshot(kl_raft *r, size_t s)
{
    progress *pr = &r->prs[s];
    kl_raft_msg m = msg_to(r, KL_RAFT_MSG_SNAPSHOT, r->mc.ids[s]);
    m.snap = (kl_raft_snapshot){
        .index = r->log.snap_index, .term = r->log.snap_term, .conf = r->ch.base};
    m.commit = r->commit;
    if (!send(r, &m))
        return;
    pr->state = PR_SNAPSHOT;
    pr->pending_snap = r->log.snap_index;
    pr->probe_sent = false;
    pr->infl_start = pr->infl_count = 0;
}

/* One append to the follower in slot s, if its flow allows. send_if_empty: also when there is
 * no entry to send (a probe, or to carry a new commit index). Returns whether one was queued. */
static bool send_append(kl_raft *r, size_t s, bool send_if_empty)
{
    progress *pr = &r->prs[s];
    assert(pr->match < pr->next && pr->next <= r->log.last + 1);
    if (paused(r, pr))
        return false;
    if (pr->next - 1 < r->log.snap_index) {
        send_snapshot(r, s); /* the entry before next, or next itself, is compacted */
        return false;
    }
    kl_raft_msg m = msg_to(r, KL_RAFT_MSG_APPEND, r->mc.ids[s]);
    m.index = pr->next - 1;
    m.log_term = kl_rlog_term(&r->log, m.index);
    m.commit = r->commit;
    if (broken(r))
        return false;
    if (pr->next <= r->log.last &&
        !kl_rlog_copy(&r->log, pr->next, r->log.last + 1, r->cfg.max_msg_bytes,
                      KL_RAFT_MAX_MSG_ENTRIES, &m.entries, &m.n_entries))
        return false; /* out of memory or storage failure: as if the message were lost */
    if (m.n_entries == 0 && !send_if_empty)
        return false;
    if (r->reads_len > 0) {
        /* It leaves after every pending read arrived: it is a confirmation round for them
         * (see release_reads), so no heartbeat of its own goes to this follower. */
        m.ctx = r->read_seq;
        pr->ctx_sent = r->read_seq;
    }
    if (pr->state == PR_REPLICATE) {
        if (m.n_entries > 0) {
            uint64_t last = m.entries[m.n_entries - 1].index;
            pr->next = last + 1;
            infl_add(pr, r->cfg.max_inflight, last);
        }
    } else {
        pr->probe_sent = true;
    }
    send(r, &m);
    return true;
}

static void bcast_append(kl_raft *r, bool send_if_empty)
{
    for (size_t s = 0; s < r->mc.n; s++)
        if (s != r->mc.self)
            while (send_append(r, s, send_if_empty) && !send_if_empty)
                ; /* replicate state: stream until the window or the log is exhausted */
}

static void bcast_heartbeat(kl_raft *r)
{
    for (size_t s = 0; s < r->mc.n; s++) {
        if (s == r->mc.self)
            continue;
        kl_raft_msg m = msg_to(r, KL_RAFT_MSG_HEARTBEAT, r->mc.ids[s]);
        /* Never more than the follower is known to hold: it cannot check the entries. */
        m.commit = min_u64(r->prs[s].match, r->commit);
        m.ctx = r->read_seq;
        r->prs[s].ctx_sent = r->read_seq;
        r->prs[s].hb_restart = true;
        send(r, &m);
    }
}

/* The round for the reads queued since the last one: a heartbeat to every follower that no
 * append has already carried it to (send_append). Called after the appends are flushed. */
static void bcast_read_round(kl_raft *r)
{
    for (size_t s = 0; s < r->mc.n; s++) {
        if (s == r->mc.self || r->prs[s].ctx_sent >= r->read_seq)
            continue;
        kl_raft_msg m = msg_to(r, KL_RAFT_MSG_HEARTBEAT, r->mc.ids[s]);
        m.commit = min_u64(r->prs[s].match, r->commit);
        m.ctx = r->read_seq;
        r->prs[s].ctx_sent = r->read_seq;
        send(r, &m);
    }
}

/* How a new commit index reaches the followers ("commit travels"): no round of its own.
 * Every append carries the leader's commit index, so under load the next append (new entries, sent at once)
 * brings it; when nothing else goes out, the next periodic heartbeat carries
 * min(match, commit). Only the leader's answer to the client waits for the commit, and the
 * leader applies without telling anyone; a follower learns it at most one heartbeat
 * interval later. An empty append per commit per follower would cost a frame in the
 * peer's window, a ready and a commit save on every follower for every commit. */

static void leave_if_removed(kl_raft *r);

/* Commit by counting (Raft §5.3, §5.4.2, with Q2): the highest index persisted by Q2
 * members, the leader counted only up to what its driver reported durable, commits if it is
 * of the current term. With configuration entries the count is MEMBERSHIP.md rule 4
 * (kl_rconf_commit_candidate); without, it is exactly the Q2 count. */
static bool maybe_commit(kl_raft *r)
{
    uint64_t v[KL_RAFT_MAX_MEMBERS];
    for (size_t s = 0; s < r->mc.n; s++)
        v[s] = s == r->mc.self ? r->log.persisted : r->prs[s].match;
    uint64_t c = kl_rconf_commit_candidate(&r->mc, v, &r->ch);
    if (c <= r->commit || kl_rlog_term(&r->log, c) != r->term)
        return false;
    commit_to(r, c);
    leave_if_removed(r);
    return true;
}

/* Confirms, oldest first, the reads whose round N - Q1 + 1 members (self included) have
 * answered: the smallest set that meets every election quorum (Q1).
 * The rule, exactly: a read numbered seq (read_seq when it arrived) is served only when
 * N - Q1 + 1 members (the leader included) answered, in the leader's current term, a message
 * carrying ctx >= seq. Every heartbeat and append carries ctx = read_seq as of its sending,
 * so only a message sent AFTER the read arrived can carry ctx >= seq: an answer to an append
 * or heartbeat sent before it names a smaller ctx and never counts. Answers of another term
 * never reach here (step_msg), and read_ack only moves up to read_seq (note_read_ack). A member that answered
 * round q in our term had not voted in a later term yet, so no newer leader existed when the
 * read was recorded, and none had committed anything our index misses (our commit covers
 * every earlier term once our no-op committed). Requiring Q2 instead would make every read
 * of a 3-of-3 group wait for the member that is down, though no rival can be elected. This
 * is the check-quorum count (kl_raft_tick); etcd confirms with its election quorum. */
static void release_reads(kl_raft *r)
{
    size_t cap = r->cfg.max_pending_reads;
    while (r->reads_len > 0) {
        pending_read *pr = &r->reads[r->reads_head];
        uint32_t acks = r->mc.self < r->mc.n ? 1u << r->mc.self : 0;
        for (size_t s = 0; s < r->mc.n; s++)
            if (s != r->mc.self && r->prs[s].read_ack >= pr->seq)
                acks |= 1u << s;
        if (!kl_rconf_survives(&r->mc, acks))
            break;
        assert(r->done_len < cap);
        r->done[r->done_len++] = (kl_raft_read_state){.ctx = pr->ctx, .index = pr->index};
        r->reads_head = (r->reads_head + 1) % cap;
        r->reads_len--;
    }
}

/* ---------------------------------------------------------------- message handlers */

static bool up_to_date(kl_raft *r, uint64_t last_term, uint64_t last_index)
{
    /* Raft §5.4.1: the later last term wins; with equal terms the longer log. */
    return last_term > r->log.last_term ||
           (last_term == r->log.last_term && last_index >= r->log.last);
}

static void handle_vote_request(kl_raft *r, const kl_raft_msg *m)
{
    bool pre = m->type == KL_RAFT_MSG_PREVOTE;
    uint8_t rtype = pre ? KL_RAFT_MSG_PREVOTE_RESP : KL_RAFT_MSG_VOTE_RESP;
    /* A real vote: at most one candidate per term, and none while we follow a leader. A
     * pre-vote for a later term commits us to nothing, so only the log decides it (the lease
     * check in step_msg already refused it if we heard from a leader recently). */
    bool can = r->vote == m->from || (r->vote == 0 && r->leader == 0) ||
               (pre && m->term > r->term);
    kl_raft_msg resp = msg_to(r, rtype, m->from);
    if (can && up_to_date(r, m->log_term, m->index)) {
        resp.term = m->term; /* a pre-vote grant names the term asked about */
        if (!pre) {
            r->vote = m->from;
            r->election_elapsed = 0;
        }
    } else {
        resp.reject = true;
    }
    send(r, &resp);
}

static bool room_for(const kl_raft *r, size_t len)
{
    uint64_t unp = kl_rlog_unpersisted(&r->log);
    if (unp == 0)
        return true; /* one entry always fits, or a big entry could never pass */
    return unp < r->cfg.max_unpersisted_entries &&
           r->log.unp_bytes + len <= r->cfg.max_unpersisted_bytes;
}

static void handle_append(kl_raft *r, const kl_raft_msg *m)
{
    if (m->ctx != 0) {
        /* The read round it carries is answered now, whatever becomes of the entries: like a
         * heartbeat answer it promises only our term, not our disk. */
        kl_raft_msg rr = msg_to(r, KL_RAFT_MSG_READ_RESP, m->from);
        rr.ctx = m->ctx;
        send(r, &rr);
    }
    kl_raft_msg resp = msg_to(r, KL_RAFT_MSG_APPEND_RESP, m->from);
    if (m->index < r->commit) {
        /* Everything up to commit matches any leader's log (state machine safety); say so, and
         * let the leader resend from there. */
        resp.index = r->commit;
        send(r, &resp);
        return;
    }
    if (!kl_rlog_match(&r->log, m->index, m->log_term)) {
        if (broken(r))
            return;
        /* Fast backtracking (etcd): point the leader at our last entry whose term is <= the
         * term it asked about; it can skip whole terms instead of one index per round. */
        uint64_t hint = kl_rlog_conflict_by_term(&r->log, min_u64(m->index, r->log.last),
                                                 m->log_term);
        resp.reject = true;
        resp.index = m->index;
        resp.reject_hint = hint;
        resp.log_term = kl_rlog_term(&r->log, hint);
        if (!broken(r))
            send(r, &resp);
        return;
    }
    size_t i = 0;
    for (; i < m->n_entries; i++) {
        const kl_raft_entry *e = &m->entries[i];
        if (e->index > r->log.last)
            break;
        uint64_t t = kl_rlog_term(&r->log, e->index);
        if (broken(r))
            return;
        if (t != e->term) {
            /* Log matching (Raft §5.3): the suffix from the first conflict goes. It can never
             * hold a committed entry: a leader's log contains every committed entry. */
            assert(e->index > r->commit);
            truncate_log(r, e->index);
            break;
        }
    }
    for (; i < m->n_entries; i++) {
        const kl_raft_entry *e = &m->entries[i];
        if (!room_for(r, e->len))
            break; /* the leader will resend the rest */
        uint8_t *d = NULL;
        if (e->len > 0 && (d = malloc(e->len)) == NULL)
            break;
        if (e->len > 0)
            memcpy(d, e->data, e->len);
        if (!append_entry(r, e->term, e->type, d, e->len)) {
            free(d);
            break;
        }
    }
    if (broken(r))
        return;
    uint64_t last_new = m->index + i; /* entries up to here now match the leader's */
    commit_to(r, min_u64(m->commit, last_new));
    resp.index = last_new;
    send(r, &resp);
}

/* A snapshot the driver staged (raft.h "Snapshots and compaction"). What it covers is
 * committed, so a follower whose commit already covers it only says how far it is, and one
 * whose log holds its (index, term) holds everything in it (log matching) and keeps its
 * entries after it. Otherwise the install waits for the next ready: a write may be
 * outstanding, and the log it replaces must not change under it. */
static void answer_or_keep_snapshot(kl_raft *r, const kl_raft_snapshot *sn, uint64_t from,
                                    bool keep)
{
    kl_raft_msg resp = msg_to(r, KL_RAFT_MSG_APPEND_RESP, from);
    if (sn->index <= r->commit) {
        resp.index = r->commit;
        send(r, &resp);
        return;
    }
    if (kl_rlog_match(&r->log, sn->index, sn->term)) {
        /* The acknowledgement leaves with the next ready, after the write of every entry up
         * to the last one: a promise like any append answer. */
        commit_to(r, sn->index);
        resp.index = sn->index;
        send(r, &resp);
        return;
    }
    if (broken(r) || !keep)
        return;
    if (!r->snap_pending || sn->index >= r->snap_pend.index) {
        r->snap_pending = true;
        r->snap_pend = *sn;
        r->snap_pend_from = from;
    }
}

/* Called by kl_raft_get_ready with no ready outstanding: the pending snapshot, if any, is
 * looked at again (appends may have caught the log up since) and installed if still needed.
 * Returns whether the ready being built installs it. */
static bool install_pending(kl_raft *r)
{
    if (!r->snap_pending)
        return false;
    r->snap_pending = false;
    /* A member that campaigns or leads never installs: its log is not behind the commit it
     * could win with (a leader holds every committed entry), and its log may only grow. */
    if (r->role != KL_RAFT_FOLLOWER)
        return false;
    kl_raft_snapshot sn = r->snap_pend;
    answer_or_keep_snapshot(r, &sn, r->snap_pend_from, true);
    if (!r->snap_pending)
        return false; /* answered: nothing to install */
    r->snap_pending = false;
    /* invariant I-SNAP-3: installed only by a follower, past its commit, no ready out */
    assert(sn.index > r->commit && r->role == KL_RAFT_FOLLOWER && r->n_out == 0);
    kl_rlog_restore(&r->log, sn.index, sn.term);
    r->ch = (kl_rconf_hist){.base = sn.conf};
    conf_refresh(r);
    r->commit = sn.index;
    kl_raft_msg resp = msg_to(r, KL_RAFT_MSG_APPEND_RESP, r->snap_pend_from);
    resp.index = sn.index;
    send(r, &resp);
    return true;
}

static void handle_heartbeat(kl_raft *r, const kl_raft_msg *m)
{
    /* The leader sends min(match, commit), so the entries are ours already; the clamp only
     * guards against a malformed message. */
    commit_to(r, min_u64(m->commit, r->log.last));
    kl_raft_msg resp = msg_to(r, KL_RAFT_MSG_HEARTBEAT_RESP, m->from);
    resp.ctx = m->ctx;
    send(r, &resp);
}

/* A follower's commit index is committed (only a leader's commit ever reaches it), and this
 * leader's log holds every committed entry: adopting it is no counting of earlier-term
 * copies (Raft §5.4.2 forbids that). A new leader needs it where its no-op can never commit
 * (a dead member at replica_count = N): nothing else would tell it that an earlier-term
 * configuration entry committed, so no further change could go; and a leader restarted
 * with a stored commit index behind what it holds (the index rides on the next synced
 * write, and applies skip RocksDB's WAL) would apply nothing, so it could never serve the
 * catalog that replacing the dead member needs. */
static void adopt_commit(kl_raft *r, const kl_raft_msg *m)
{
    if (m->commit > r->commit) {
        commit_to(r, min_u64(m->commit, r->log.last));
        leave_if_removed(r);
    }
}

static void handle_append_resp(kl_raft *r, size_t s, const kl_raft_msg *m)
{
    progress *pr = &r->prs[s];
    pr->active = true;
    adopt_commit(r, m);
    if (r->role != KL_RAFT_LEADER)
        return;
    if (m->index > r->log.last)
        return; /* claims entries we never had: malformed or from a past life; ignore */
    if (m->reject) {
        uint64_t hint = min_u64(m->reject_hint, r->log.last);
        if (m->log_term > 0)
            hint = kl_rlog_conflict_by_term(&r->log, hint, m->log_term);
        if (broken(r))
            return;
        if (pr->state == PR_SNAPSHOT)
            return; /* answers an append from before the snapshot; the report decides */
        if (pr->state == PR_REPLICATE) {
            if (m->index <= pr->match)
                return; /* stale */
            become_probe(pr);
        } else {
            if (pr->next - 1 != m->index)
                return; /* answers an older probe */
            pr->next = max_u64(min_u64(m->index, hint + 1), pr->match + 1);
            pr->probe_sent = false;
        }
        send_append(r, s, true);
        return;
    }
    bool updated = false;
    if (m->index > pr->match) {
        pr->match = m->index;
        updated = true;
    }
    if (pr->next < pr->match + 1)
        pr->next = pr->match + 1;
    if (pr->state == PR_SNAPSHOT) {
        /* The follower's acknowledgement of the snapshot index (or past it) is the delivery
         * report too: whatever the driver reports later finds the follower moved on. */
        if (pr->match < pr->pending_snap) {
            if (updated)
                (void)maybe_commit(r);
            return;
        }
        become_probe(pr);
    }
    if (!updated && !(pr->state == PR_PROBE && m->index == pr->match))
        return;
    if (pr->state == PR_PROBE)
        become_replicate(pr);
    else
        infl_free_to(pr, r->cfg.max_inflight, m->index);
    (void)maybe_commit(r); /* no round of its own: see "commit travels" */
    if (r->role != KL_RAFT_LEADER)
        return; /* removed by the configuration that just committed */
    while (send_append(r, s, false))
        ;
}

/* The follower answered, in our current term, a round numbered ctx (release_reads). */
static void note_read_ack(kl_raft *r, progress *pr, uint64_t ctx)
{
    if (ctx > pr->read_ack && ctx <= r->read_seq) {
        pr->read_ack = ctx;
        release_reads(r);
    }
}

static void handle_heartbeat_resp(kl_raft *r, size_t s, const kl_raft_msg *m)
{
    progress *pr = &r->prs[s];
    pr->active = true;
    adopt_commit(r, m);
    if (r->role != KL_RAFT_LEADER)
        return;
    /* Restarting a stalled flow (a lost probe, lost appends) is the periodic heartbeat's job,
     * once per heartbeat interval. The answer to a read round's heartbeat restarts nothing:
     * rounds go out about once per fresh read, and with entries in flight each restart was
     * an empty append (everything already sent) and its answer, a quarter of all peer frames
     * in the transfer cell, and a slot taken out of the window while acks were on their way. */
    if (pr->hb_restart) {
        pr->hb_restart = false;
        pr->probe_sent = false;
        /* If every append in flight was lost, acks will never free the window: free one
         * slot, so the next append goes out, and its rejection puts the follower back into
         * probe. */
        if (pr->state == PR_REPLICATE && pr->infl_count >= r->cfg.max_inflight) {
            pr->infl_start = (pr->infl_start + 1) % r->cfg.max_inflight;
            pr->infl_count--;
        }
        if (pr->match < r->log.last)
            send_append(r, s, true);
    }
    note_read_ack(r, pr, m->ctx);
}

/* A follower's answer to the read-index round an append carried, sent on arrival (before
 * the append's write): it speaks for the term only, like a heartbeat answer, and moves
 * nothing in the replication flow. */
static void handle_read_resp(kl_raft *r, size_t s, const kl_raft_msg *m)
{
    r->prs[s].active = true;
    note_read_ack(r, &r->prs[s], m->ctx);
}

static bool in_lease(const kl_raft *r)
{
    return r->leader != 0 && r->election_elapsed < r->cfg.election_ticks;
}

static void step_msg(kl_raft *r, const kl_raft_msg *m)
{
    bool from_leader = m->type == KL_RAFT_MSG_APPEND || m->type == KL_RAFT_MSG_HEARTBEAT ||
                       m->type == KL_RAFT_MSG_SNAPSHOT;
    bool vote_req = m->type == KL_RAFT_MSG_PREVOTE || m->type == KL_RAFT_MSG_VOTE;
    if (m->term > r->term) {
        /* Leader stickiness (etcd's check-quorum lease): while we heard from a leader within
         * an election timeout, a campaign elsewhere is a partitioned member coming back;
         * ignoring it keeps one flaky member from deposing a healthy leader. A leader is
         * always in its own lease. */
        if (vote_req && in_lease(r))
            return;
        if (m->type == KL_RAFT_MSG_PREVOTE) {
            /* answered below without touching our term */
        } else if (m->type == KL_RAFT_MSG_PREVOTE_RESP && !m->reject) {
            /* a grant carries the term we would campaign in, not a newer term */
        } else {
            become_follower(r, m->term, from_leader ? m->from : 0);
        }
    } else if (m->term < r->term) {
        if (from_leader) {
            /* A leader of an older term, or one that missed our later term: tell it, or a
             * member that moved ahead (a failed election) could never rejoin. */
            kl_raft_msg resp = msg_to(r, KL_RAFT_MSG_APPEND_RESP, m->from);
            resp.reject = true;
            send(r, &resp);
        } else if (m->type == KL_RAFT_MSG_PREVOTE) {
            kl_raft_msg resp = msg_to(r, KL_RAFT_MSG_PREVOTE_RESP, m->from);
            resp.reject = true;
            send(r, &resp);
        }
        return;
    }
    if (vote_req) {
        handle_vote_request(r, m);
        return;
    }
    int slot = slot_of(r, m->from);
    switch (r->role) {
    case KL_RAFT_LEADER:
        if (slot < 0)
            return; /* an answer from a member no longer in the configuration */
        if (m->type == KL_RAFT_MSG_APPEND_RESP)
            handle_append_resp(r, (size_t)slot, m);
        else if (m->type == KL_RAFT_MSG_HEARTBEAT_RESP)
            handle_heartbeat_resp(r, (size_t)slot, m);
        else if (m->type == KL_RAFT_MSG_READ_RESP)
            handle_read_resp(r, (size_t)slot, m);
        return; /* anything else is stale */
    case KL_RAFT_PRE_CANDIDATE:
    case KL_RAFT_CANDIDATE:
        if (from_leader) {
            become_follower(r, m->term, m->from); /* someone won this term */
            break;
        }
        if ((r->role == KL_RAFT_PRE_CANDIDATE && m->type == KL_RAFT_MSG_PREVOTE_RESP &&
             (m->reject || m->term == r->term + 1)) ||
            (r->role == KL_RAFT_CANDIDATE && m->type == KL_RAFT_MSG_VOTE_RESP))
            poll(r, (size_t)slot, !m->reject);
        return;
    case KL_RAFT_FOLLOWER:
        break;
    }
    if (!from_leader)
        return;
    r->election_elapsed = 0;
    r->leader = m->from;
    if (m->type == KL_RAFT_MSG_APPEND)
        handle_append(r, m);
    else if (m->type == KL_RAFT_MSG_SNAPSHOT)
        answer_or_keep_snapshot(r, &m->snap, m->from, true);
    else
        handle_heartbeat(r, m);
}

/* A snapshot names a point no later than its sender's term, and a well-formed configuration
 * (the configuration at its index, which the install makes ours). */
static bool snapshot_valid(const kl_raft_msg *m)
{
    const kl_raft_snapshot *sn = &m->snap;
    return sn->index >= 1 && sn->term >= 1 && sn->term <= m->term &&
           kl_raft_conf_check(&sn->conf, NULL) == KL_OK;
}

static bool entry_valid(const kl_raft_entry *e)
{
    if (e->type > KL_RAFT_ENTRY_CONF || (e->len > 0 && e->data == NULL))
        return false;
    kl_raft_conf c;
    return e->type != KL_RAFT_ENTRY_CONF ||
           kl_raft_conf_decode(e->data, e->len, &c, NULL, NULL) == KL_OK;
}

/* Peer input is not trusted: anything that could trip an assertion is refused here. */
static bool msg_valid(const kl_raft *r, const kl_raft_msg *m)
{
    if (m->type >= KL_RAFT_MSG_TYPE_COUNT || m->term == 0)
        return false;
    /* Any sender: a leader of a newer configuration may be a member this one does not know
     * yet, and answers from a member just removed are still in flight (step_msg ignores
     * answers from outside the configuration). */
    if (m->to != r->cfg.id || m->from == r->cfg.id || m->from == 0)
        return false;
    if (m->type == KL_RAFT_MSG_SNAPSHOT && (m->n_entries > 0 || !snapshot_valid(m)))
        return false;
    if (m->n_entries == 0)
        return true;
    if (m->type != KL_RAFT_MSG_APPEND || m->entries == NULL ||
        m->index > UINT64_MAX - m->n_entries - 1)
        return false;
    uint64_t prev_term = m->log_term;
    for (size_t i = 0; i < m->n_entries; i++) {
        const kl_raft_entry *e = &m->entries[i];
        if (e->index != m->index + 1 + i || e->term < prev_term || e->term > m->term ||
            !entry_valid(e))
            return false;
        prev_term = e->term;
    }
    return true;
}

/* ---------------------------------------------------------------- public API */

void kl_raft_config_default(kl_raft_config *c)
{
    memset(c, 0, sizeof *c);
    c->election_ticks = 10;
    c->heartbeat_ticks = 2;
    c->max_inflight = 64;
    c->max_readies = 1;
    c->max_msg_bytes = 1u << 20;
    c->max_unpersisted_entries = 4096;
    c->max_unpersisted_bytes = 64u << 20;
    c->max_cached_entries = 1024;
    c->max_cached_bytes = 16u << 20;
    c->max_apply_bytes = 16u << 20;
    c->max_pending_reads = 1024;
    c->max_outbox_msgs = 4096;
    c->max_outbox_bytes = 64u << 20;
}

/* The snapshot point a restart passes in: a compacted prefix is applied state. */
static kl_code check_snapshot_point(const kl_raft_config *c, kl_err *err)
{
    if ((c->snap_index == 0) != (c->snap_term == 0) || c->snap_term > c->hard.term)
        return kl_fail(err, KL_INVALID_ARGUMENT, "snap_term",
                       "snapshot term %llu at index %llu (persisted term %llu)",
                       (unsigned long long)c->snap_term, (unsigned long long)c->snap_index,
                       (unsigned long long)c->hard.term);
    if (c->snap_index > c->last_index || c->snap_index > c->applied)
        return kl_fail(err, KL_INVALID_ARGUMENT, "snap_index",
                       "snapshot index %llu past the last index %llu or the applied index %llu",
                       (unsigned long long)c->snap_index, (unsigned long long)c->last_index,
                       (unsigned long long)c->applied);
    return KL_OK;
}

/* The static member list (a driver that passes no kl_raft_conf): as before membership
 * changes, the id must be a member and the vote for one. */
static kl_code check_members(const kl_raft_config *c, kl_err *err)
{
    if (c->n_members < 1 || c->n_members > KL_RAFT_MAX_MEMBERS)
        return kl_fail(err, KL_INVALID_ARGUMENT, "n_members", "n_members %zu outside 1..%d",
                       c->n_members, KL_RAFT_MAX_MEMBERS);
    bool self = false;
    for (size_t i = 0; i < c->n_members; i++) {
        if (c->members[i] == 0)
            return kl_fail(err, KL_INVALID_ARGUMENT, "members", "member id 0 is reserved");
        for (size_t j = 0; j < i; j++)
            if (c->members[j] == c->members[i])
                return kl_fail(err, KL_INVALID_ARGUMENT, "members", "member %llu listed twice",
                               (unsigned long long)c->members[i]);
        self |= c->members[i] == c->id;
    }
    if (!self)
        return kl_fail(err, KL_INVALID_ARGUMENT, "id", "id %llu is not a member",
                       (unsigned long long)c->id);
    uint32_t q1;
    if (kl_raft_quorums(c->n_members, c->replica_count, &q1) != KL_OK)
        return kl_fail(err, KL_INVALID_ARGUMENT, "replica_count",
                       "replica_count %u outside 1..%zu", c->replica_count, c->n_members);
    bool vote_ok = c->hard.vote == 0;
    for (size_t i = 0; i < c->n_members; i++)
        vote_ok |= c->hard.vote == c->members[i];
    if (!vote_ok)
        return kl_fail(err, KL_INVALID_ARGUMENT, "hard.vote", "vote for non-member %llu",
                       (unsigned long long)c->hard.vote);
    return KL_OK;
}

static kl_code check_config(const kl_raft_config *c, kl_err *err)
{
    /* A replicated configuration may leave this member out (removed, or not added yet) and
     * its vote may have gone to a member of another one. */
    kl_code rc = c->conf.n_members > 0 ? kl_raft_conf_check(&c->conf, err) : check_members(c, err);
    if (rc != KL_OK)
        return rc;
    if (c->election_ticks < 2 || c->heartbeat_ticks < 1 ||
        c->heartbeat_ticks >= c->election_ticks)
        return kl_fail(err, KL_INVALID_ARGUMENT, "heartbeat_ticks",
                       "need 1 <= heartbeat_ticks < election_ticks (got %u, %u)",
                       c->heartbeat_ticks, c->election_ticks);
    if (c->max_inflight < 1 || c->max_inflight > KL_RAFT_MAX_INFLIGHT)
        return kl_fail(err, KL_INVALID_ARGUMENT, "max_inflight", "max_inflight %u outside 1..%d",
                       c->max_inflight, KL_RAFT_MAX_INFLIGHT);
    if (c->max_readies < 1 || c->max_readies > KL_RAFT_MAX_READIES)
        return kl_fail(err, KL_INVALID_ARGUMENT, "max_readies", "max_readies %u outside 1..%d",
                       c->max_readies, KL_RAFT_MAX_READIES);
    if (c->max_msg_bytes < 1 || c->max_unpersisted_entries < 1 ||
        c->max_unpersisted_bytes < 1 || c->max_apply_bytes < 1 || c->max_pending_reads < 1 ||
        c->max_outbox_msgs < 1 || c->max_outbox_bytes < 1)
        return kl_fail(err, KL_INVALID_ARGUMENT, "limits", "every max_* limit must be >= 1");
    if (c->storage.term == NULL || c->storage.entries == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "storage", "storage callbacks missing");
    if (c->hard.commit > c->last_index || c->applied > c->last_index)
        return kl_fail(err, KL_INVALID_ARGUMENT, "hard.commit",
                       "commit %llu or applied %llu past the last index %llu",
                       (unsigned long long)c->hard.commit, (unsigned long long)c->applied,
                       (unsigned long long)c->last_index);
    return check_snapshot_point(c, err);
}

/* The CONF entries of the stored log past the snapshot point, found through the driver's
 * optional storage.last_conf (a store without it holds none: raft_entry.h). */
static kl_code load_conf_history(kl_raft *r, kl_err *err)
{
    const kl_raft_storage *st = &r->cfg.storage;
    if (st->last_conf == NULL)
        return KL_OK;
    uint64_t idx[KL_RAFT_MAX_CONF_HISTORY];
    size_t n = 0;
    for (uint64_t hi = r->log.last; hi > r->log.snap_index;) {
        uint64_t i = 0;
        if (st->last_conf(st->ctx, hi, &i) != KL_OK)
            return kl_fail(err, KL_INTERNAL, "storage", "finding configuration entries failed");
        if (i <= r->log.snap_index)
            break;
        if (i > hi || n == KL_RAFT_MAX_CONF_HISTORY)
            return kl_fail(err, KL_INTERNAL, "storage",
                           "configuration entry %llu past %llu, or more than %d of them",
                           (unsigned long long)i, (unsigned long long)hi,
                           KL_RAFT_MAX_CONF_HISTORY);
        idx[n++] = i;
        hi = i - 1;
    }
    while (n > 0) {
        uint64_t i = idx[--n];
        kl_raft_entry *e = NULL;
        size_t k = 0;
        kl_raft_conf c;
        if (!kl_rlog_copy(&r->log, i, i + 1, SIZE_MAX, 1, &e, &k))
            return kl_fail(err, KL_INTERNAL, "storage", "reading configuration entry %llu failed",
                           (unsigned long long)i);
        kl_code rc = e[0].type == KL_RAFT_ENTRY_CONF
                         ? kl_raft_conf_decode(e[0].data, e[0].len, &c, NULL, NULL)
                         : KL_INVALID_ARGUMENT;
        kl_rlog_free_entries(e, k);
        if (rc != KL_OK)
            return kl_fail(err, KL_INTERNAL, "storage", "stored entry %llu is no valid configuration",
                           (unsigned long long)i);
        kl_rconf_hist_push(&r->ch, i, &c);
    }
    return KL_OK;
}

kl_code kl_raft_new(const kl_raft_config *cfg, kl_raft **out, kl_err *err)
{
    *out = NULL;
    kl_code rc = check_config(cfg, err);
    if (rc != KL_OK)
        return rc;
    kl_raft *r = calloc(1, sizeof *r);
    if (r == NULL)
        return kl_fail(err, KL_UNAVAILABLE, "memory", "out of memory");
    r->cfg = *cfg;
    r->ch.base = cfg->conf;
    if (cfg->conf.n_members == 0) {
        memcpy(r->ch.base.members, cfg->members, sizeof r->ch.base.members);
        r->ch.base.n_members = (uint32_t)cfg->n_members;
        r->ch.base.replica_count = cfg->replica_count;
    }
    kl_rconf_build(&r->mc, &r->ch.base, cfg->id);
    r->rng = cfg->rand_seed ^ (cfg->id * 0x9e3779b97f4a7c15ull);
    r->reads = calloc(cfg->max_pending_reads, sizeof *r->reads);
    r->done = calloc(cfg->max_pending_reads, sizeof *r->done);
    bool reads_ok = true;
    for (size_t k = 0; k < cfg->max_readies; k++) {
        r->hand[k].reads = calloc(cfg->max_pending_reads, sizeof *r->hand[k].reads);
        reads_ok = reads_ok && r->hand[k].reads != NULL;
    }
    if (r->reads == NULL || r->done == NULL || !reads_ok) {
        kl_raft_free(r);
        return kl_fail(err, KL_UNAVAILABLE, "memory", "out of memory");
    }
    if (kl_rlog_init(&r->log, &cfg->storage, cfg->snap_index, cfg->snap_term, cfg->last_index,
                     cfg->max_cached_entries, cfg->max_cached_bytes) != KL_OK) {
        kl_raft_free(r);
        return kl_fail(err, KL_INTERNAL, "storage", "reading the last log entry failed");
    }
    if (load_conf_history(r, err) != KL_OK) {
        kl_raft_free(r);
        return err ? err->code : KL_INTERNAL;
    }
    conf_refresh(r);
    r->conf_dirty = false; /* the driver started from this configuration's log */
    if (r->log.last_term > cfg->hard.term) {
        uint64_t lt = r->log.last_term;
        kl_raft_free(r);
        return kl_fail(err, KL_INVALID_ARGUMENT, "hard.term",
                       "log holds term %llu past the persisted term %llu",
                       (unsigned long long)lt, (unsigned long long)cfg->hard.term);
    }
    r->term = cfg->hard.term;
    r->vote = cfg->hard.vote;
    /* Applied entries were committed, even if the commit write lagged behind. */
    r->commit = max_u64(cfg->hard.commit, cfg->applied);
    r->applied = r->applied_handed = cfg->applied;
    r->hs_handed = r->hs_written = cfg->hard;
    r->term_durable = cfg->hard.term;
    r->role = r->role_handed = KL_RAFT_FOLLOWER;
    r->term_handed = r->term;
    become_follower(r, r->term, 0);
    *out = r;
    return KL_OK;
}

/* Frees what the ready owns; its read buffer stays for the next ready in the slot. */
static void free_ready_buffers(handed_ready *h)
{
    kl_rlog_free_entries(h->ents, h->n_ents);
    kl_rlog_free_entries(h->committed, h->n_committed);
    free_msgs(h->msgs, h->n_msgs);
    free(h->msgs);
    h->ents = h->committed = NULL;
    h->msgs = NULL;
    h->n_ents = h->n_committed = h->n_msgs = h->n_reads = 0;
}

static handed_ready *hand_at(kl_raft *r, size_t k)
{
    return &r->hand[(r->hand_head + k) % r->cfg.max_readies];
}

static void free_taken(kl_raft *r)
{
    kl_rlog_free_entries(r->tc_ents, r->tc_n);
    r->tc_ents = NULL;
    r->tc_n = 0;
}

static void free_urgent(kl_raft *r)
{
    free_msgs(r->ug, r->ug_n);
    r->ug_n = 0;
}

void kl_raft_free(kl_raft *r)
{
    if (r == NULL)
        return;
    for (size_t k = 0; k < KL_RAFT_MAX_READIES; k++) {
        free_ready_buffers(&r->hand[k]);
        free(r->hand[k].reads);
    }
    free_taken(r);
    free_urgent(r);
    free(r->ug);
    drop_outbox(r);
    free(r->out);
    free(r->reads);
    free(r->done);
    kl_rlog_free(&r->log);
    free(r);
}

/* A leader counts the members it heard from in the last election timeout and steps down
 * when fewer than N - Q1 + 1 (itself included) answered.
 * Why that number rather than Q2 or Q1 (etcd uses its election quorum):
 *  - stepping down only helps when someone else could win an election. Members that heard
 *    from us within the timeout refuse pre-votes (the lease in step_msg), so a rival needs Q1
 *    members outside the ones answering us: possible exactly when fewer than N - Q1 + 1 do.
 *  - with Q2: a 3-of-3 leader with one member down would step down, be re-elected by the
 *    two that remain, and repeat forever, a new term each time, while nobody can commit.
 *  - with Q1: a 1-of-3 leader (Q1 = 3) would step down as soon as one member fails, though
 *    it is the only member that can still commit and no one else can be elected.
 * N - Q1 + 1 = min(Q2, ceil(N/2)); for the usual majority configurations it is etcd's rule.
 * Safety never depends on this; it only returns a leader that lost touch to follower. */
static void tick_leader(kl_raft *r)
{
    r->heartbeat_elapsed++;
    r->election_elapsed++;
    if (r->election_elapsed >= r->cfg.election_ticks) {
        r->election_elapsed = 0;
        uint32_t heard = r->mc.self < r->mc.n ? 1u << r->mc.self : 0;
        for (size_t s = 0; s < r->mc.n; s++) {
            if (s == r->mc.self)
                continue;
            if (r->prs[s].active)
                heard |= 1u << s;
            r->prs[s].active = false;
        }
        r->reachable = kl_rconf_voters_in(&r->mc, heard);
        if (!kl_rconf_survives(&r->mc, heard)) {
            become_follower(r, r->term, 0);
            return;
        }
    }
    if (r->heartbeat_elapsed >= r->cfg.heartbeat_ticks) {
        r->heartbeat_elapsed = 0;
        bcast_heartbeat(r);
    }
}

kl_code kl_raft_tick(kl_raft *r)
{
    if (broken(r))
        return KL_INTERNAL;
    if (r->role == KL_RAFT_LEADER)
        tick_leader(r);
    else if (++r->election_elapsed >= r->timeout && may_campaign(r))
        become_pre_candidate(r);
    else if (r->election_elapsed >= r->timeout)
        reset_timers(r); /* learners and removed members never campaign */
    kl_rlog_check(&r->log);
    return status_of(r);
}

kl_code kl_raft_step(kl_raft *r, const kl_raft_msg *m)
{
    if (broken(r))
        return KL_INTERNAL;
    if (!msg_valid(r, m))
        return KL_INVALID_ARGUMENT;
    step_msg(r, m);
    kl_rlog_check(&r->log);
    return status_of(r);
}

kl_code kl_raft_propose(kl_raft *r, const void *data, size_t len, kl_raft_proposal *out)
{
    memset(out, 0, sizeof *out);
    if (broken(r))
        return KL_INTERNAL;
    if (r->role != KL_RAFT_LEADER) {
        out->leader = r->leader;
        return KL_NOT_LEADER;
    }
    if (len > r->cfg.max_unpersisted_bytes)
        return KL_INVALID_ARGUMENT;
    if (kl_rlog_unpersisted(&r->log) >= r->cfg.max_unpersisted_entries ||
        r->log.unp_bytes + len > r->cfg.max_unpersisted_bytes)
        return KL_UNAVAILABLE;
    uint8_t *d = NULL;
    if (len > 0) {
        if (data == NULL)
            return KL_INVALID_ARGUMENT;
        if ((d = malloc(len)) == NULL)
            return KL_UNAVAILABLE;
        memcpy(d, data, len);
    }
    if (!kl_rlog_append(&r->log, r->term, KL_RAFT_ENTRY_NORMAL, d, len)) {
        free(d);
        return KL_UNAVAILABLE;
    }
    r->append_dirty = true;
    out->index = r->log.last;
    out->term = r->term;
    out->leader = r->cfg.id;
    return KL_OK;
}

kl_code kl_raft_read_index(kl_raft *r, uint64_t ctx, uint64_t *leader)
{
    *leader = r->leader;
    if (broken(r))
        return KL_INTERNAL;
    if (r->role != KL_RAFT_LEADER)
        return KL_NOT_LEADER;
    /* Until an entry of our term commits, our commit index may lag entries an earlier leader
     * committed (Raft §8): not ready to serve reads yet. */
    if (r->commit < r->noop_index)
        return KL_NOT_LEADER;
    size_t cap = r->cfg.max_pending_reads;
    if (r->reads_len + r->done_len >= cap)
        return KL_UNAVAILABLE;
    r->reads[(r->reads_head + r->reads_len) % cap] =
        (pending_read){.ctx = ctx, .index = r->commit, .seq = ++r->read_seq};
    r->reads_len++;
    release_reads(r); /* N - Q1 + 1 = 1: we alone are enough */
    if (r->reads_len > 0)
        r->hb_dirty = true;
    return KL_OK;
}

size_t kl_raft_take_urgent(kl_raft *r, kl_raft_msg *out, size_t cap)
{
    /* A heartbeat or its answer speaks for our term only; until the write that records a
     * new term is reported, a restart could forget the term it claims. */
    free_urgent(r);
    if (broken(r) || r->term != r->term_durable || cap == 0)
        return 0;
    if (r->ug_cap < cap) {
        kl_raft_msg *ug = realloc(r->ug, cap * sizeof *ug);
        if (ug == NULL)
            return 0; /* everything waits for the next ready */
        r->ug = ug;
        r->ug_cap = cap;
    }
    /* A leader's appends promise nothing about its own disk (it counts itself only once its
     * write is reported), so proposals made while its write runs leave now and the followers
     * write them in parallel with it (thesis §10.2.1). All proposals since the last call
     * share one append per follower; they carry the read round too, and only the followers
     * they miss get a heartbeat for it. */
    if (r->role == KL_RAFT_LEADER && r->append_dirty) {
        bcast_append(r, false);
        r->append_dirty = false;
        if (broken(r))
            return 0;
    }
    if (r->role == KL_RAFT_LEADER && r->hb_dirty) {
        bcast_read_round(r);
        r->hb_dirty = false;
    }
    size_t n = 0, keep = 0;
    for (size_t i = 0; i < r->out_len; i++) {
        kl_raft_msg *m = &r->out[i];
        bool leader_append = m->type == KL_RAFT_MSG_APPEND && r->role == KL_RAFT_LEADER;
        bool urgent = n < cap && m->term == r->term_durable &&
                      (m->type == KL_RAFT_MSG_HEARTBEAT || m->type == KL_RAFT_MSG_HEARTBEAT_RESP ||
                       m->type == KL_RAFT_MSG_READ_RESP || leader_append);
        if (urgent) {
            r->out_bytes -= msg_bytes(m);
            r->ug[r->ug_n++] = *m;
            out[n++] = *m;
        } else {
            r->out[keep++] = *m;
        }
    }
    r->out_len = keep;
    return n;
}

size_t kl_raft_take_reads(kl_raft *r, kl_raft_read_state *out, size_t cap)
{
    size_t n = r->done_len < cap ? r->done_len : cap;
    if (n == 0)
        return 0;
    memcpy(out, r->done, n * sizeof *out);
    memmove(r->done, r->done + n, (r->done_len - n) * sizeof *r->done);
    r->done_len -= n;
    return n;
}

size_t kl_raft_take_committed(kl_raft *r, const kl_raft_entry **out)
{
    free_taken(r);
    *out = NULL;
    if (broken(r))
        return 0;
    /* The rule that makes an apply safe: only entries this member's own log write has made
     * durable (persisted moves only when the driver reports the write, and drops below a
     * pending truncation), so applied state, which skips the WAL, can never reach disk
     * ahead of the log entry it came from. Committed entries of the outstanding ready are
     * above that line until it is advanced. */
    uint64_t from = r->n_out > 0 ? r->applied_handed : r->applied;
    uint64_t hi = min_u64(r->commit, r->log.persisted);
    if (hi <= from)
        return 0;
    kl_raft_entry *ents = NULL;
    size_t n = 0;
    if (!kl_rlog_copy(&r->log, from + 1, hi + 1, r->cfg.max_apply_bytes,
                      KL_RAFT_MAX_MSG_ENTRIES, &ents, &n))
        return 0; /* out of memory (or storage failure, which the next call reports) */
    r->tc_ents = ents;
    r->tc_n = n;
    r->applied_handed = from + n;
    if (r->n_out == 0)
        r->applied = r->applied_handed;
    *out = ents;
    return n;
}

/* A snapshot install needs every earlier write done and nothing after it until its own is:
 * with an install outstanding, or one pending while others are, nothing more is handed out
 * for it (the install waits for the last advance). */
static bool install_out(const kl_raft *r)
{
    for (size_t k = 0; k < r->n_out; k++)
        if (r->hand[(r->hand_head + k) % r->cfg.max_readies].install)
            return true;
    return false;
}

bool kl_raft_has_ready(const kl_raft *r)
{
    if (r->n_out >= r->cfg.max_readies || install_out(r))
        return false;
    if (broken(r))
        return true; /* kl_raft_get_ready reports the failure */
    return r->term != r->hs_handed.term || r->vote != r->hs_handed.vote ||
           r->commit != r->hs_handed.commit || kl_rlog_handed_through(&r->log) < r->log.last ||
           r->log.pending_trunc != 0 || r->out_len > 0 || r->done_len > 0 ||
           r->append_dirty || r->hb_dirty || r->applied_handed < r->commit ||
           (r->snap_pending && r->n_out == 0) ||
           r->role != r->role_handed || r->leader != r->leader_handed ||
           r->term != r->term_handed || r->conf_dirty;
}

kl_code kl_raft_get_ready(kl_raft *r, kl_raft_ready *rd)
{
    memset(rd, 0, sizeof *rd);
    if (r->n_out >= r->cfg.max_readies || install_out(r))
        return KL_FAILED_PRECONDITION;
    if (broken(r))
        return KL_INTERNAL;
    /* An install replaces the log under every earlier write: only with none outstanding. */
    bool install = r->n_out == 0 && install_pending(r);
    /* Coalesced sends: all proposals since the last ready travel in one append per follower,
     * and all read-index requests share one round, carried by those appends where they go. */
    if (r->role == KL_RAFT_LEADER) {
        if (r->append_dirty)
            bcast_append(r, false);
        if (r->hb_dirty)
            bcast_read_round(r);
        r->append_dirty = r->hb_dirty = false;
        if (broken(r))
            return KL_INTERNAL;
    }
    kl_raft_entry *ents = NULL, *com = NULL;
    size_t n_ents = 0, n_com = 0;
    /* Entries after what the outstanding readies write: the driver writes them after those. */
    uint64_t from = kl_rlog_handed_through(&r->log) + 1;
    uint64_t unp = r->log.last + 1 - from;
    if (unp > 0 && !kl_rlog_copy(&r->log, from, r->log.last + 1, SIZE_MAX, SIZE_MAX, &ents,
                                 &n_ents))
        return status_of(r) == KL_OK ? KL_UNAVAILABLE : KL_INTERNAL;
    assert(n_ents == unp);
    /* An install hands out no committed entries: the snapshot holds them all. Committed
     * entries of this ready may sit in its own write or an earlier one; the driver applies
     * them after this ready's write, when all of those are done. */
    if (!install && r->applied_handed < r->commit &&
        !kl_rlog_copy(&r->log, r->applied_handed + 1, r->commit + 1, r->cfg.max_apply_bytes,
                      KL_RAFT_MAX_MSG_ENTRIES, &com, &n_com)) {
        kl_rlog_free_entries(ents, n_ents);
        return status_of(r) == KL_OK ? KL_UNAVAILABLE : KL_INTERNAL;
    }
    /* From here on nothing can fail. */
    handed_ready *h = hand_at(r, r->n_out);
    assert(h->ents == NULL && h->msgs == NULL && h->committed == NULL);
    kl_raft_hard_state hs = {.term = r->term, .vote = r->vote, .commit = r->commit};
    /* A ready whose hard state differs only in commit, with nothing else to write, is one the
     * driver does not write (raft.h: the commit index need not be durable). So a ready that
     * writes anyway carries the hard state whenever the commit index moved since the last
     * one that wrote: otherwise the stored commit index falls arbitrarily far behind, and a
     * member restarted after kill -9 knows nothing it holds is committed until a leader (or,
     * as leader, a follower) tells it, which at replica_count = N with a dead member may be
     * never for a leader's own no-op. */
    bool writes = install || n_ents > 0 || r->log.pending_trunc != 0 ||
                  hs.term != r->hs_written.term || hs.vote != r->hs_written.vote;
    if (memcmp(&hs, &r->hs_handed, sizeof hs) != 0 ||
        (writes && memcmp(&hs, &r->hs_written, sizeof hs) != 0)) {
        rd->has_hard_state = true;
        rd->hard = hs;
        r->hs_handed = hs;
        if (writes)
            r->hs_written = hs;
    }
    h->has_hard = rd->has_hard_state;
    h->hard_term = hs.term;
    rd->truncate_from = kl_rlog_hand_out(&r->log);
    assert(rd->truncate_from == 0 || n_ents == 0 || ents[0].index == rd->truncate_from);
    h->ents = ents;
    h->n_ents = n_ents;
    rd->entries = ents;
    rd->n_entries = n_ents;
    h->committed = com;
    h->n_committed = n_com;
    rd->committed = com;
    rd->n_committed = n_com;
    r->applied_handed = install ? r->commit : r->applied_handed + n_com;
    h->applied_after = r->applied_handed;
    h->install = install;
    rd->has_snapshot = install;
    if (install) {
        rd->snapshot = r->snap_pend;
        rd->snapshot_from = r->snap_pend_from;
    }
    h->msgs = r->out;
    h->n_msgs = r->out_len;
    rd->msgs = r->out;
    rd->n_msgs = r->out_len;
    r->out = NULL;
    r->out_len = r->out_cap = r->out_bytes = 0;
    kl_raft_read_state *t = h->reads; /* swap the slot's read buffer with the confirmed ones */
    h->reads = r->done;
    h->n_reads = r->done_len;
    r->done = t;
    r->done_len = 0;
    rd->reads = h->reads;
    rd->n_reads = h->n_reads;
    if (r->conf_dirty) {
        rd->conf_changed = true;
        rd->conf = r->mc.c;
        rd->conf_index = r->conf_index;
        r->conf_dirty = false;
    }
    rd->role = r->role_handed = r->role;
    rd->leader = r->leader_handed = r->leader;
    rd->term = r->term_handed = r->term;
    r->n_out++;
    return KL_OK;
}

kl_code kl_raft_advance(kl_raft *r, const kl_raft_ready *rd)
{
    if (r->n_out == 0)
        return KL_FAILED_PRECONDITION;
    handed_ready *h = hand_at(r, 0);
    if (rd == NULL || rd->msgs != h->msgs || rd->n_entries != h->n_ents ||
        rd->entries != h->ents || rd->committed != h->committed)
        return KL_INVALID_ARGUMENT; /* not the oldest ready we handed out */
    if (broken(r))
        return KL_INTERNAL;
    kl_rlog_stable(&r->log);
    if (h->has_hard)
        r->term_durable = h->hard_term;
    if (r->role == KL_RAFT_CANDIDATE && r->term_durable == r->term)
        (void)poll(r, r->mc.self, true); /* a duplicate answer is ignored */
    /* Entries handed out by take_committed while this ready was the last one out are
     * counted with it: the driver applied them after this ready's own. */
    r->applied = r->n_out == 1 ? r->applied_handed : h->applied_after;
    assert(r->applied <= r->commit && r->applied <= r->applied_handed);
    free_ready_buffers(h);
    h->install = false;
    r->hand_head = (r->hand_head + 1) % r->cfg.max_readies;
    r->n_out--;
    kl_rlog_evict(&r->log);
    /* Our own write may complete a commit quorum. */
    if (r->role == KL_RAFT_LEADER)
        (void)maybe_commit(r);
    kl_rlog_check(&r->log);
    return status_of(r);
}

kl_code kl_raft_compact(kl_raft *r, uint64_t index)
{
    if (broken(r))
        return KL_INTERNAL;
    /* invariant I-SNAP-1: only applied entries are compacted (applied <= commit) */
    assert(index <= r->applied);
    if (index <= r->log.snap_index)
        return KL_OK;
    kl_rlog_compact(&r->log, index);
    kl_rconf_hist_compact(&r->ch, index);
    kl_rlog_check(&r->log);
    return status_of(r);
}

kl_code kl_raft_report_snapshot(kl_raft *r, uint64_t to, bool ok)
{
    if (broken(r))
        return KL_INTERNAL;
    int s = slot_of(r, to);
    if (to == 0 || to == r->cfg.id)
        return KL_INVALID_ARGUMENT;
    if (s < 0)
        return KL_OK; /* no longer a member: nothing to probe */
    progress *pr = &r->prs[s];
    if (r->role != KL_RAFT_LEADER || pr->state != PR_SNAPSHOT)
        return KL_OK; /* stale: another term, or the follower already answered */
    uint64_t snap = pr->pending_snap;
    become_probe(pr);
    if (ok)
        pr->next = max_u64(pr->match, snap) + 1;
    /* Probe only once the follower answers (its install acknowledgement, or a heartbeat):
     * it may still be installing, and a probe now would be refused and ask for the
     * snapshot again. After a failure this waits a heartbeat interval before the retry. */
    pr->probe_sent = true;
    return KL_OK;
}

void kl_raft_status_get(const kl_raft *r, kl_raft_status *st)
{
    *st = (kl_raft_status){
        .id = r->cfg.id, .role = r->role, .leader = r->leader, .term = r->term,
        .vote = r->vote, .commit = r->commit, .applied = r->applied,
        .last_index = r->log.last, .last_term = r->log.last_term,
        .snap_index = r->log.snap_index, .snap_term = r->log.snap_term,
        .persisted = r->log.persisted, .q1 = r->mc.q1_new, .q2 = r->mc.q2_new,
        .joint = r->mc.c.n_old > 0, .conf_index = r->conf_index,
        .conf_entries = (uint32_t)r->ch.n,
        .leader_ready = r->role == KL_RAFT_LEADER && r->commit >= r->noop_index,
        .reachable = r->role == KL_RAFT_LEADER ? r->reachable : 0,
    };
}

kl_code kl_raft_term_at(kl_raft *r, uint64_t index, uint64_t *term)
{
    *term = 0;
    if (broken(r))
        return KL_INTERNAL;
    if (index > r->log.last || (index > 0 && index < r->log.snap_index))
        return KL_NOT_FOUND;
    *term = kl_rlog_term(&r->log, index);
    return status_of(r);
}

const char *kl_raft_role_name(kl_raft_role role)
{
    switch (role) {
    case KL_RAFT_FOLLOWER: return "follower";
    case KL_RAFT_PRE_CANDIDATE: return "pre-candidate";
    case KL_RAFT_CANDIDATE: return "candidate";
    case KL_RAFT_LEADER: return "leader";
    }
    return "unknown";
}

const char *kl_raft_msg_type_name(int type)
{
    static const char *const names[KL_RAFT_MSG_TYPE_COUNT] = {
        "prevote", "prevote-resp", "vote", "vote-resp",
        "append", "append-resp", "heartbeat", "heartbeat-resp", "snapshot",
        "reserved-9", "read-resp",
    };
    return type >= 0 && type < KL_RAFT_MSG_TYPE_COUNT ? names[type] : "unknown";
}

/* ---------------------------------------------------------------- membership API */

/* MEMBERSHIP.md rule 8: a learner becomes a voter only once it has stored the configuration
 * entry in effect (so it answered at least once, past any snapshot it needed) and is within
 * one follower write of the leader's log, so the joint step cannot stall on it. The first
 * condition matters on short logs, where "within one write" alone holds for a learner that
 * never answered. */
static kl_code check_caught_up(kl_raft *r, const uint64_t *ids, size_t n, kl_err *err)
{
    for (size_t i = 0; i < n; i++) {
        int s = slot_of(r, ids[i]);
        if (s >= 0 && r->prs[s].match < r->conf_index)
            return kl_fail(err, KL_UNAVAILABLE, "members",
                           "learner %llu has not yet stored configuration entry %llu",
                           (unsigned long long)ids[i], (unsigned long long)r->conf_index);
        uint64_t behind = s < 0 ? r->log.last : r->log.last - min_u64(r->prs[s].match, r->log.last);
        if (behind > r->cfg.max_unpersisted_entries)
            return kl_fail(err, KL_UNAVAILABLE, "members",
                           "learner %llu is %llu entries behind (at most %zu to be promoted)",
                           (unsigned long long)ids[i], (unsigned long long)behind,
                           r->cfg.max_unpersisted_entries);
    }
    return KL_OK;
}

/* The voters of c (learners dropped); with new_half, those of a joint c's new half alone. */
static kl_raft_conf voters_of(const kl_raft_conf *c, bool new_half)
{
    kl_raft_conf v = *c;
    v.n_learners = 0;
    if (new_half) {
        v.n_old = 0;
        v.old_replica_count = 0;
    }
    return v;
}

/* MEMBERSHIP.md rule 6: one voting change at a time. Every CONF entry past the commit index
 * must keep the voters of the committed configuration C, or, when C is joint, may be its
 * leave step (voters = C's new half): learner-only changes never move a quorum, and every
 * configuration one step from a committed joint one still needs its new half's quorums
 * (MEMBERSHIP.md "Refinements", leave step as base). A joint entry may follow them and
 * commits them with it. Demanding a committed entry of the leader's own term first would
 * make a dead member of a 3-of-3 partition irreplaceable: a leader elected after the death
 * can never commit its no-op (MEMBERSHIP.md "Replacing a dead member"). */
static kl_code conf_change_allowed(kl_raft *r, kl_raft_proposal *out, kl_err *err)
{
    if (broken(r))
        return kl_fail(err, KL_INTERNAL, "storage", "the replication core stopped");
    if (r->role != KL_RAFT_LEADER) {
        out->leader = r->leader;
        return kl_fail(err, KL_NOT_LEADER, "leader", "not the leader");
    }
    const kl_raft_conf *com = committed_conf(r);
    kl_raft_conf cv = voters_of(com, false), half = voters_of(com, true);
    for (size_t i = 0; i < r->ch.n; i++) {
        if (r->ch.index[i] <= r->commit)
            continue;
        kl_raft_conf voters = voters_of(&r->ch.conf[i], false);
        if (!kl_rconf_equal(&voters, &cv) && !(com->n_old > 0 && kl_rconf_equal(&voters, &half)))
            return kl_fail(err, KL_UNAVAILABLE, "conf",
                           "the configuration entry at %llu is not committed yet",
                           (unsigned long long)r->ch.index[i]);
    }
    if (kl_rconf_hist_full(&r->ch))
        return kl_fail(err, KL_UNAVAILABLE, "conf",
                       "%d configuration entries past the snapshot point: compact first",
                       KL_RAFT_MAX_CONF_HISTORY);
    return KL_OK;
}

kl_code kl_raft_propose_conf_change(kl_raft *r, const kl_raft_conf *target, const void *ctx,
                                    size_t ctx_len, kl_raft_proposal *out, kl_err *err)
{
    memset(out, 0, sizeof *out);
    kl_code rc = conf_change_allowed(r, out, err);
    if (rc != KL_OK)
        return rc;
    out->leader = r->cfg.id;
    kl_raft_conf next;
    bool same;
    uint64_t promote[KL_RAFT_MAX_MEMBERS];
    size_t n_promote;
    if ((rc = kl_rconf_next(&r->mc.c, target, &next, &same, promote, &n_promote, err)) != KL_OK)
        return rc;
    if (same)
        return KL_OK;
    if ((rc = check_caught_up(r, promote, n_promote, err)) != KL_OK)
        return rc;
    if (ctx_len > r->cfg.max_unpersisted_bytes || (ctx_len > 0 && ctx == NULL))
        return kl_fail(err, KL_INVALID_ARGUMENT, "ctx", "context of %zu bytes (at most %zu)",
                       ctx_len, r->cfg.max_unpersisted_bytes);
    size_t len = KL_RAFT_CONF_MAX_BYTES + ctx_len;
    if (kl_rlog_unpersisted(&r->log) >= r->cfg.max_unpersisted_entries ||
        r->log.unp_bytes + len > r->cfg.max_unpersisted_bytes)
        return kl_fail(err, KL_UNAVAILABLE, "max_unpersisted_entries",
                       "too many entries not yet written");
    uint8_t *d = malloc(len);
    if (d == NULL)
        return kl_fail(err, KL_UNAVAILABLE, "memory", "out of memory");
    size_t n = kl_raft_conf_encode(&next, d);
    if (ctx_len > 0)
        memcpy(d + n, ctx, ctx_len);
    if (!append_entry(r, r->term, KL_RAFT_ENTRY_CONF, d, n + ctx_len)) {
        free(d);
        return kl_fail(err, KL_UNAVAILABLE, "memory", "out of memory");
    }
    r->append_dirty = true;
    out->index = r->log.last;
    out->term = r->term;
    return KL_OK;
}

void kl_raft_conf_get(const kl_raft *r, kl_raft_conf *latest, uint64_t *latest_index,
                      kl_raft_conf *at_snapshot)
{
    if (latest)
        *latest = r->mc.c;
    if (latest_index)
        *latest_index = r->conf_index;
    if (at_snapshot)
        *at_snapshot = r->ch.base;
}
