/* raft: the replication core of one partition member, as a pure state machine (ARCHITECTURE.md "Replication").
 *
 * Raft (Ongaro & Ousterhout 2014) with pre-vote and flexible quorums (Howard et al. 2016), in the
 * style of etcd/raft: no sockets, clock, disk, threads or global state in here. The driver feeds
 * ticks, peer messages, proposals and read requests in, and takes a `kl_raft_ready` out, which
 * says what to persist, what to send and what to apply; then it calls kl_raft_advance.
 *
 * Pre-vote (thesis §9.6) is always on, and so is the leader lease that goes with it: a member
 * that heard from a leader within an election timeout ignores campaigns, and a leader steps
 * down when it heard from fewer than N - Q1 + 1 members in one (the reason is in raft.c).
 *
 * Quorums, for N members and replica_count Q2 (1 <= Q2 <= N):
 *   commit    an index of the current term commits once Q2 members have PERSISTED it; the
 *             leader counts itself only after the driver reported its own write (advance);
 *   election  Q1 = max(N - Q2 + 1, floor(N/2) + 1) votes, self included, for pre-votes and votes;
 *   read      N - Q1 + 1 members (self included) answer a read-index round: every such set
 *             meets every election quorum, so no later leader can exist unseen.
 * Every Q1 set meets every Q2 set (no committed entry is lost across elections) and any two Q1
 * sets meet (one leader per term).
 *
 * What a kl_raft owns: its configuration, the hard state (term, vote, commit), the role, the
 * per-follower progress, an in-memory window of the log holding every entry not yet reported
 * persisted plus a bounded cache of recent persisted ones, the unsent messages and the pending
 * read requests. Everything is bounded by the limits in kl_raft_config. Older log entries are
 * read back through kl_raft_storage, which the driver implements over its durable log.
 *
 * The ready/advance contract (the same rule as etcd's):
 *   1. while kl_raft_has_ready(), call kl_raft_get_ready(r, &rd);
 *   2. install rd.snapshot (if rd.has_snapshot: see "Snapshots and compaction" below), then
 *      persist rd.hard (if rd.has_hard_state), delete stored entries >= rd.truncate_from (if
 *      nonzero) and write rd.entries, ATOMICALLY (one synced RocksDB write batch); if that is
 *      impossible: term and vote first (no entry may carry a term past the stored one), then
 *      the truncation and the entries, then commit (never past the stored log). A ready
 *      whose hard state differs from the persisted one only in its commit index, with no
 *      truncation and no entries, may be left unwritten: the commit index need not be
 *      durable (kl_raft_new starts from max(commit, applied));
 *   3. only then send rd.msgs: a vote grant or an append acknowledgement is a promise that the
 *      vote or the entries are durable, and step 2 is what makes it true (a candidate's vote
 *      for itself counts, like every other, only once advance reports it durable);
 *   4. apply rd.committed in order, serve rd.reads (a read state {ctx, index} may be answered
 *      once the applied index is >= index);
 *   5. call kl_raft_advance(r, &rd): everything in rd is durable and applied.
 * Between kl_raft_get_ready and kl_raft_advance the driver may keep calling tick/step/propose/
 * read_index (e.g. while a sync write runs on another thread): their effects go into the next
 * ready. A failed write is not reported to the core: the driver must drop this kl_raft and
 * start a new one from what is on disk (a crash is the only failure Raft needs to handle).
 *
 * Pipelined readies (cfg.max_readies > 1): the next ready may be taken while earlier ones
 * are outstanding, so its write can be queued while theirs run. Rules, on top of 1-5:
 *   - the writes of outstanding readies complete IN THE ORDER the readies were handed out
 *     (one writer, a FIFO): a ready's truncation and entries assume every earlier ready's
 *     write is on disk before its own, and a crash may keep any prefix of them, never a
 *     write without the ones before it;
 *   - each ready goes through steps 3-5 after its own write, oldest first, and
 *     kl_raft_advance names the oldest outstanding ready (KL_INVALID_ARGUMENT otherwise);
 *   - a ready's committed entries may lie in its own write or in an earlier one: apply them
 *     only after its own write completed (then all of those have);
 *   - a ready that installs a snapshot is handed out only with none outstanding, and none
 *     after it until it is advanced.
 * Nothing is acknowledged, voted or counted for a commit before the write that makes it
 * true: acknowledgements ride in the ready whose write holds the entries (or a later one),
 * and the core's persisted index moves only at kl_raft_advance.
 *
 * Snapshots and compaction (Raft §7; ARCHITECTURE.md "Replication"). The log starts after a
 * snapshot point (snap_index, snap_term): entries <= snap_index are compacted away and only
 * the state machine's snapshot holds them. A new member has snap_index 0 and nothing is
 * compacted. Three places, all driven by the driver:
 *   compaction   kl_raft_compact(r, I) tells the core the driver dropped stored entries <= I.
 *                The driver decides when, only for an I it has applied (I <= the applied index
 *                reported through kl_raft_advance) and whose applied state is durable, and it
 *                must keep a snapshot of its state machine at exactly I that it can stream
 *                until it compacts further. It calls kl_raft_compact first (the core reads the
 *                term at I from storage during the call) and then deletes the entries itself,
 *                in any write, since the core never asks for an index <= I again. The snapshot
 *                point must be durable with it: a restart passes it in kl_raft_config.
 *   sending      a leader that needs an entry <= its snap_index for a follower puts that
 *                follower in snapshot state and emits, in rd.msgs, one KL_RAFT_MSG_SNAPSHOT
 *                whose snap names (index, term, configuration). The driver does not send it
 *                as a frame: it streams its snapshot at that index, or at any later index it
 *                applied (committed, so as good; the receiver then steps that point in and
 *                acknowledges it, which the progress takes like any acknowledgement; the
 *                point it names then carries the configuration as of that later index, the
 *                latest KL_RAFT_ENTRY_CONF at or below it, or the install would lose a
 *                configuration change), to m.to
 *                in chunks and calls kl_raft_report_snapshot(r, m.to, ok) exactly once when the receiver
 *                has every byte (ok) or the stream failed (or it has no snapshot at that
 *                index any more: not ok). Until then, or until the follower acknowledges the
 *                snapshot index, nothing else is sent to that follower but heartbeats: one
 *                snapshot in flight per follower, at most.
 *   installing   the receiving driver stages the streamed bytes and verifies them, then
 *                steps a KL_RAFT_MSG_SNAPSHOT (term, from and snap as the sender's core
 *                emitted it) into the core. The core ignores one whose index its commit
 *                already covers (it answers with its commit), only commits up to it when
 *                its log already holds the snapshot's (index, term) (the entries after it
 *                stay), and otherwise asks, in the next ready, for the install:
 *                rd.has_snapshot with rd.snapshot. The driver keeps every staged snapshot
 *                until a ready installs it or one with a higher index, and drops staged
 *                ones when it restarts (so does the core).
 * A ready with has_snapshot is handled before anything else of that ready: the driver makes
 * the staged state machine at (index, term) current, deletes every stored log entry, records
 * (index, term) as its snapshot point and writes rd.hard (commit = index), ATOMICALLY and
 * synced, before any of rd.msgs leaves (they include the acknowledgement, an append answer
 * with index = snapshot index: a promise that the install is durable, like any ack) and
 * before kl_raft_advance. Such a ready carries no entries and no committed entries; after
 * its advance the applied index is the snapshot index. The install changes neither term nor
 * vote (the snapshot carries no term or vote of its sender, only its own (index, term,
 * configuration)); the message's term is handled like an append's (a later term is
 * adopted, an older one refused). A crash before the install completed restarts from the
 * old state.
 *
 * Membership (Raft thesis §4, joint consensus; docs/MEMBERSHIP.md has the rules and the
 * proof). The configuration is replicated: a KL_RAFT_ENTRY_CONF entry holds a whole
 * kl_raft_conf (kl_raft_conf_encode) and the proposer's opaque context after it. A member
 * uses the LATEST configuration in its log, committed or not, from the moment the entry is
 * appended; a truncation that removes it falls back to the previous one; a snapshot install
 * uses the snapshot's. With no CONF entry ever proposed, the configuration is the static one
 * the driver passes in and every quorum is the one described above, unchanged.
 *   quorums      per configuration C (N voters, Q2 = replica_count): Q1(C) as above and
 *                R(C) = N - Q1(C) + 1. An election needs Q1 grants from the voters of each
 *                configuration in effect (both halves of a joint one). A CONF entry commits
 *                on R persisted copies among the voters of each half; a NORMAL or NOOP entry
 *                on that and on Q2 voters of the newest half; the commit index is the largest
 *                index of the current term all of whose entries meet their rule. Read rounds
 *                and check-quorum need R in each half. Learners receive appends and
 *                snapshots, never vote, never campaign and count for nothing.
 *   changes      one voting change at a time, through kl_raft_propose_conf_change on the
 *                leader, only when every CONF entry past its commit index is a learner-only
 *                change or the leave step of a committed joint one (a joint entry may
 *                follow those and commits them with it; no committed entry of the
 *                leader's own term is required: at replica_count = N with a dead member
 *                its no-op never commits): learners only (C -> C'), else
 *                C_old -> joint(C_old, C_new) -> C_new; every new voter must be a caught-up
 *                learner first; replica_count <= voters in every configuration. A leader not
 *                in C_new leads until C_new commits, then steps down. A member campaigns
 *                while it is a voter of its latest configuration or of the committed one (a
 *                removed leader that lost touch before C_new committed may have to finish
 *                the change), never once a configuration without it committed.
 *   commit news  followers report their commit index in append and heartbeat answers, and
 *                a leader adopts a reported one (it is committed, and the leader's log holds
 *                every committed entry): a new leader whose no-op cannot commit still
 *                learns that an earlier-term CONF entry did, and one that restarted with a
 *                stored commit index behind its log still applies what it holds committed.
 *   the driver   (a) persists CONF entries like any other and applies them in order (their
 *                data is kl_raft_conf_decode's); (b) on rd.conf_changed connects to the
 *                members of rd.conf it has no link to and may drop links to members no
 *                longer in it, before sending rd.msgs (messages only go to members of the
 *                configuration in effect, but a message to a removed member may still be in
 *                rd.msgs after a fall-back: dropping it is harmless); it must keep the link
 *                to the leader it follows (rd.leader), since on a member catching up
 *                rd.conf is a historical one that may not name that leader; (c) stores with each
 *                snapshot the configuration at its index (kl_raft_conf_get's at_snapshot
 *                right after kl_raft_compact, or rd.snapshot.conf for an install), and
 *                passes it back in kl_raft_config.conf at restart; (d) implements
 *                storage.last_conf once its log can hold CONF entries; (e) accepts messages
 *                from members it does not know yet: a leader of a newer configuration may
 *                be one (the core takes appends, heartbeats, snapshots and vote requests
 *                from any member, answers from the members of its configuration only).
 *
 * Ownership: every pointer inside a kl_raft_ready (entries, messages and their entries,
 * committed entries, read states; a snapshot and the snapshot in a message are values) is
 * owned by the kl_raft and stays valid until
 * kl_raft_advance or kl_raft_free, whichever comes first. Pointers passed IN (step's message,
 * propose's data) are borrowed for the call only: the core copies what it keeps. Entries the
 * storage callback returns are handed over: the core frees their data with free().
 *
 * Errors: every function that can fail returns a kl_code. Programming errors and broken
 * internal invariants (e.g. truncating a committed entry) are assert()s. A storage callback
 * failure is fatal for the instance: every later call returns KL_INTERNAL and the driver must
 * restart the member from disk. Peer messages are never trusted to be well formed: a malformed
 * one is refused with KL_INVALID_ARGUMENT and changes nothing. */
#ifndef KL_REPL_RAFT_H
#define KL_REPL_RAFT_H

#include "common/limits.h"
#include "common/status.h"
#include "daemon/repl/raft_entry.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


typedef enum kl_raft_role {
    KL_RAFT_FOLLOWER = 0,
    KL_RAFT_PRE_CANDIDATE = 1,
    KL_RAFT_CANDIDATE = 2,
    KL_RAFT_LEADER = 3,
} kl_raft_role;

/* What must survive a crash besides the log. commit is persisted too, so that a restarted
 * member knows how far it may apply without hearing from a leader. */
typedef struct kl_raft_hard_state {
    uint64_t term;
    uint64_t vote; /* member id voted for in term, 0 = none */
    uint64_t commit;
} kl_raft_hard_state;

typedef enum kl_raft_msg_type {
    KL_RAFT_MSG_PREVOTE = 0,      /* term = the term the sender would campaign in */
    KL_RAFT_MSG_PREVOTE_RESP = 1, /* reject = refused; a grant carries the pre-vote's term */
    KL_RAFT_MSG_VOTE = 2,         /* index/log_term = the candidate's last entry */
    KL_RAFT_MSG_VOTE_RESP = 3,
    KL_RAFT_MSG_APPEND = 4,       /* index/log_term = the entry before entries[0]; commit;
                                   * ctx = read-index round it also confirms, 0 = none */
    KL_RAFT_MSG_APPEND_RESP = 5,  /* accept: index = last index now persisted and matching;
                                   * reject: index = the refused prev index, reject_hint and
                                   * log_term = the follower's guess for fast backtracking */
    KL_RAFT_MSG_HEARTBEAT = 6,    /* commit; ctx = read-index round being confirmed */
    KL_RAFT_MSG_HEARTBEAT_RESP = 7, /* ctx echoed */
    KL_RAFT_MSG_SNAPSHOT = 8,     /* snap = the snapshot to stream or install (not a frame) */
    /* 9: never a core message (on the wire, a snapshot stream's answer: snapwire.h) */
    KL_RAFT_MSG_READ_RESP = 10,   /* ctx of an append echoed at once, before its write */
    KL_RAFT_MSG_TYPE_COUNT = 11,
} kl_raft_msg_type;

/* A snapshot point: the state machine after applying every entry up to index, whose entry
 * there had term. Never the sender's term, vote or log. */
typedef struct kl_raft_snapshot {
    uint64_t index;
    uint64_t term;
    kl_raft_conf conf;
} kl_raft_snapshot;

typedef struct kl_raft_msg {
    uint8_t type; /* kl_raft_msg_type */
    bool reject;
    uint64_t from, to;
    uint64_t term;
    uint64_t index;
    uint64_t log_term;
    uint64_t commit;
    uint64_t reject_hint;
    uint64_t ctx;
    kl_raft_entry *entries;
    size_t n_entries;
    kl_raft_snapshot snap; /* KL_RAFT_MSG_SNAPSHOT only */
} kl_raft_msg;

/* A confirmed read: the read identified by ctx may be served from applied state once the
 * applied index is >= index. */
typedef struct kl_raft_read_state {
    uint64_t ctx;
    uint64_t index;
} kl_raft_read_state;

typedef struct kl_raft_config {
    uint64_t id;                                 /* this member, nonzero, one of members */
    uint64_t members[KL_RAFT_MAX_MEMBERS];       /* distinct nonzero ids; static */
    size_t n_members;                            /* 1 .. KL_RAFT_MAX_MEMBERS */
    uint32_t replica_count;                      /* Q2, 1 .. n_members */
    uint32_t election_ticks;   /* T: election timeout drawn per round from [T, 2T) */
    uint32_t heartbeat_ticks;  /* 1 .. T-1 */
    uint64_t rand_seed;        /* seeds this member's private PRNG (election jitter) */
    uint32_t max_inflight;     /* 1 .. KL_RAFT_MAX_INFLIGHT */
    uint32_t max_readies;      /* readies outstanding at once, 1 .. KL_RAFT_MAX_READIES */
    size_t max_msg_bytes;      /* entry data per append message (one entry always fits) */
    size_t max_unpersisted_entries; /* proposals past these get KL_UNAVAILABLE; followers */
    size_t max_unpersisted_bytes;   /* accept only what fits and let the leader resend */
    size_t max_cached_entries; /* persisted entries kept in memory beyond the unpersisted */
    size_t max_cached_bytes;
    size_t max_apply_bytes;    /* committed entry data per ready (one entry always fits) */
    size_t max_pending_reads;  /* read_index requests not yet handed out */
    size_t max_outbox_msgs;    /* unsent messages; more are dropped, as a network would */
    size_t max_outbox_bytes;
    /* What the driver found on disk at start (all zero for a new member). */
    kl_raft_hard_state hard;
    uint64_t snap_index; /* durable snapshot point: entries <= it are compacted (0 = none) */
    uint64_t snap_term;  /* term at snap_index (0 iff snap_index is 0) */
    uint64_t last_index; /* last stored log index (>= snap_index; equal when the log is empty) */
    uint64_t applied;    /* last index the state machine has applied (>= snap_index) */
    /* The configuration at snap_index when conf.n_members > 0 (members, n_members and
     * replica_count are then ignored and id need not be in it): see "Membership". */
    kl_raft_conf conf;
    kl_raft_storage storage;
} kl_raft_config;

typedef struct kl_raft_ready {
    bool has_hard_state;
    kl_raft_hard_state hard;
    uint64_t truncate_from; /* 0, or delete stored entries >= this first; then it equals the
                             * index of entries[0] (entries may be empty) */
    const kl_raft_entry *entries; /* contiguous, to append durably */
    size_t n_entries;
    const kl_raft_msg *msgs; /* to send after the above is durable */
    size_t n_msgs;
    const kl_raft_entry *committed; /* to apply in order */
    size_t n_committed;
    const kl_raft_read_state *reads;
    size_t n_reads;
    /* Install the staged snapshot and replace the stored log by it, first (see above). */
    bool has_snapshot;
    kl_raft_snapshot snapshot;
    uint64_t snapshot_from; /* the member whose stream was staged */
    /* The configuration in effect (the latest in the log, committed or not) changed since
     * the last ready: connect to new members, stop waiting for removed ones ("Membership"). */
    bool conf_changed;
    kl_raft_conf conf;
    uint64_t conf_index; /* index of its entry; 0 = the snapshot's or the starting one */
    /* Soft state, never persisted: when role leaves KL_RAFT_LEADER, every proposal still in
     * flight has an unknown outcome and every pending read_index was dropped. */
    kl_raft_role role;
    uint64_t leader; /* 0 = unknown */
    uint64_t term;
} kl_raft_ready;

typedef struct kl_raft_proposal {
    uint64_t index;  /* KL_OK: where the entry sits in the log */
    uint64_t term;   /* KL_OK: the entry's term; it committed iff (index, term) is applied */
    uint64_t leader; /* KL_NOT_LEADER: the leader this member knows of, 0 = unknown */
} kl_raft_proposal;

typedef struct kl_raft_status {
    uint64_t id;
    kl_raft_role role;
    uint64_t leader;
    uint64_t term, vote, commit;
    uint64_t applied;   /* last index handed out for applying and advanced */
    uint64_t last_index, last_term;
    uint64_t snap_index, snap_term; /* compacted up to here; the log starts at snap_index + 1 */
    uint64_t persisted; /* last index the driver reported durable */
    uint32_t q1, q2;
    uint32_t reachable; /* leader only: members (itself included) it heard from in the last
                         * election timeout; below q2, new writes cannot commit now */
    bool joint;         /* a joint configuration is in effect */
    uint64_t conf_index;   /* index of the configuration entry in effect (0: none in the log) */
    uint32_t conf_entries; /* CONF entries past the snapshot point (at most
                            * KL_RAFT_MAX_CONF_HISTORY; a full history refuses changes) */
    bool leader_ready;  /* leader whose no-op (own-term entry) has committed: it may serve
                         * read_index; ARCHITECTURE.md "Write path" also holds client batches until then */
} kl_raft_status;

typedef struct kl_raft kl_raft;

/* Q1 for n members and replica_count q2; KL_INVALID_ARGUMENT unless 1 <= n <= 9 and
 * 1 <= q2 <= n. */
kl_code kl_raft_quorums(size_t n, uint32_t replica_count, uint32_t *q1);

/* Fills timers and limits with defaults; the caller sets id, members, replica_count,
 * rand_seed, storage and the persisted state. */
void kl_raft_config_default(kl_raft_config *cfg);

/* Validates cfg (err names the field at fault) and starts a follower from the persisted state. */
kl_code kl_raft_new(const kl_raft_config *cfg, kl_raft **out, kl_err *err);
void kl_raft_free(kl_raft *r);

/* One logical clock tick. */
kl_code kl_raft_tick(kl_raft *r);

/* A message from a peer. KL_INVALID_ARGUMENT for a malformed one (nothing changes). */
kl_code kl_raft_step(kl_raft *r, const kl_raft_msg *m);

/* Appends a normal entry (data copied). KL_NOT_LEADER (out->leader = the known leader) on a
 * non-leader; KL_UNAVAILABLE when the unpersisted limits are reached; KL_INVALID_ARGUMENT
 * when len alone is past max_unpersisted_bytes. Appending is not committing: the entry may
 * still be lost if leadership changes; it committed iff it is applied at (index, term). */
kl_code kl_raft_propose(kl_raft *r, const void *data, size_t len, kl_raft_proposal *out);

/* Read-index barrier: on a leader whose current term has a committed entry, records the
 * commit index and confirms leadership with a heartbeat round acknowledged by N - Q1 + 1
 * members (self included); then a read state {ctx, index} appears in a ready. KL_NOT_LEADER
 * on a follower (with *leader = the known leader) and on a leader whose own-term entry has
 * not committed yet (*leader = this member: retry shortly); KL_UNAVAILABLE past
 * max_pending_reads. Reads still pending when the member stops leading are dropped. */
kl_code kl_raft_read_index(kl_raft *r, uint64_t ctx, uint64_t *leader);

/* Heartbeats, heartbeat answers and a leader's appends promise nothing about this member's
 * log, only its term: once that term is durable (no ready that changed it is still
 * outstanding) they may leave at once instead of waiting for the next ready, so a read-index
 * round (or a check-quorum answer) is never queued behind an unrelated log write, and
 * followers write new entries while the leader does. Append answers and vote grants never
 * leave here: they wait for the write that makes them true. Moves up to cap of them from the
 * outbox into out (the caller sends them in order; their entries stay owned by the core and
 * valid until the next kl_raft_take_urgent or kl_raft_free) and returns how many; a leader
 * first flushes a pending read-index round into its heartbeats and new proposals into
 * appends. Callable at any time, a ready outstanding or not. */
size_t kl_raft_take_urgent(kl_raft *r, kl_raft_msg *out, size_t cap);

/* Read states confirmed since the last ready, handed out now rather than in the next ready
 * (a confirmation needs no write of ours, so the driver may serve it while a log write
 * runs). Moves up to cap of them, oldest first, into out and returns how many; every read
 * state still appears exactly once, here or in a ready, and in confirmation order. */
size_t kl_raft_take_reads(kl_raft *r, kl_raft_read_state *out, size_t cap);

/* Committed entries this member's own synced log write has already made durable, handed
 * out now rather than in the next ready, so the driver can apply them while an unrelated
 * write runs. Returns how many (in log order, continuing after every committed entry
 * handed out before, in a ready or here); *out stays valid until the next call or
 * kl_raft_free. The caller applies them in order
 * after the committed entries of every outstanding ready (those are never
 * durable-but-unapplied: they wait for that ready's write), so it takes none while such
 * entries are still unapplied. */
size_t kl_raft_take_committed(kl_raft *r, const kl_raft_entry **out);

/* The driver dropped its stored entries <= index (see "Snapshots and compaction" above).
 * index must be <= the applied index reported through kl_raft_advance (an assert: a driver
 * bug); an index at or below the current snapshot point changes nothing. */
kl_code kl_raft_compact(kl_raft *r, uint64_t index);

/* The snapshot stream to member `to` that a KL_RAFT_MSG_SNAPSHOT asked for is over: ok when
 * the receiver holds every byte, false when it failed. The follower is probed again from the
 * snapshot index + 1 (ok) or from its last known match (not ok) once it answers a heartbeat
 * or the snapshot. A report for a follower not in snapshot state, on a member that no
 * longer leads, or for a member no longer in the configuration, changes nothing.
 * KL_INVALID_ARGUMENT when `to` is 0 or this member. */
kl_code kl_raft_report_snapshot(kl_raft *r, uint64_t to, bool ok);

/* Proposes the next step from the configuration in effect towards target (a non-joint
 * configuration; see "Membership"): the learner-only change, the joint step, or, while joint,
 * the leave step (target must then be the new half). ctx (may be NULL when ctx_len is 0) is
 * carried after the configuration in the entry's data for the driver (member addresses and
 * keys); the core ignores it. KL_OK with out->index 0 when the configuration in effect
 * already is target. Refusals, err naming the field:
 *   KL_NOT_LEADER          not the leader (out->leader = the known one);
 *   KL_UNAVAILABLE         "conf": an earlier voting configuration entry is not committed
 *                          yet, or the log already holds KL_RAFT_MAX_CONF_HISTORY of them
 *                          past the snapshot point;
 *                          "members": a learner to promote is still catching up; the
 *                          unpersisted limits: all retryable;
 *   KL_INVALID_ARGUMENT    "replica_count" above the voters (or 0), "members" (zero,
 *                          repeated or too many distinct ids), "learners", "conf" (joint);
 *   KL_FAILED_PRECONDITION "members": a new voter that is not a learner yet (an unknown
 *                          member: add it as a learner first); "conf": a target other than
 *                          the new half while joint. */
kl_code kl_raft_propose_conf_change(kl_raft *r, const kl_raft_conf *target, const void *ctx,
                                    size_t ctx_len, kl_raft_proposal *out, kl_err *err);

/* The configuration in effect (latest in the log) and its index (0: none in the log), and
 * the one at the snapshot point (what a snapshot taken at snap_index must carry); any
 * pointer may be NULL. */
void kl_raft_conf_get(const kl_raft *r, kl_raft_conf *latest, uint64_t *latest_index,
                      kl_raft_conf *at_snapshot);

/* True when kl_raft_get_ready would return something (or an error), and fewer than
 * max_readies readies are outstanding (none if one of them installs a snapshot). */
bool kl_raft_has_ready(const kl_raft *r);
/* KL_FAILED_PRECONDITION while max_readies readies (or an install) are outstanding;
 * KL_UNAVAILABLE when memory for it could not be allocated (nothing changed; try again). */
kl_code kl_raft_get_ready(kl_raft *r, kl_raft_ready *rd);
/* Reports that everything in the oldest outstanding ready is durable, sent and applied. */
kl_code kl_raft_advance(kl_raft *r, const kl_raft_ready *rd);

void kl_raft_status_get(const kl_raft *r, kl_raft_status *st);
/* Term of the entry at index as this member currently sees it (0 for index 0); KL_NOT_FOUND
 * past the last index and below the snapshot index (compacted; the snapshot index itself has
 * the snapshot's term). */
kl_code kl_raft_term_at(kl_raft *r, uint64_t index, uint64_t *term);

const char *kl_raft_role_name(kl_raft_role role);
const char *kl_raft_msg_type_name(int type);

#endif
