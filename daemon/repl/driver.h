/* driver: runs one partition member's replication on the member's libuv loop (ARCHITECTURE.md "Replication").
 *
 * Owns one kl_raft (the pure core, raft.h), one kl_peer (frames to the other members, peer.h;
 * none when the member is alone), one uv_timer_t (ticks), one uv_check_t (the per-iteration
 * flush below), one uv_prepare_t (a read round still unsent leaves before the poll) and
 * the log-persistence worker: one
 * kl_store_log_write at a time, a leader's on the member's log writer thread (log_writer.h),
 * a follower's on the loop itself while the disk answers quickly (write_start in driver.c),
 * never on libuv's shared pool, where the compaction's and snapshots' jobs run. The kl_store is
 * borrowed: it must outlive the driver, and the caller applies committed entries to it.
 *
 * The round ("pump"), run after every tick, received message, proposal and read request and
 * after each persist completes, never re-entrantly (a callback that proposes only marks the
 * round for another pass):
 *   1. if no persist is in flight and the core has a ready, take it;
 *   2. if it carries a hard state, a truncation or entries, write them in one synced RocksDB
 *      batch on the log writer ('L' records are encoded keyload.v1.LogEntry: a normal
 *      entry's data IS those bytes, a no-op is stored as LogEntry{term, index, raft_type=1});
 *      a leader whose term is already durable sends the ready's messages now;
 *   3. while that write runs, apply the ready's committed entries that an EARLIER write
 *      already made durable here (the bound is the store's last index before the write
 *      started; the write syncs outside RocksDB's write queue, so these applies never wait
 *      for its fsync); a write that runs on the loop (a follower's) goes first, and they
 *      follow it in step 4;
 *   4. on the loop, once durable: send the messages (keyload.v1.RaftMessage, raft.proto),
 *      call apply for the remaining committed entries in order, read_ready for confirmed
 *      reads whose index is applied, read_dropped for reads the core dropped, role if
 *      anything changed, then kl_raft_advance and go back to 1.
 * A ready with nothing to persist does step 4 inline. One write runs at a time. When it
 * completes, the next ready is taken at once (take_next: the core hands out two, raft.h
 * "Pipelined readies") and its write starts before the completed round's step 4, so the
 * sends, applies and advance of one round overlap the next write; the next round's own step
 * 4 follows its write (next_round). Nothing of that ready leaves or is applied before its
 * write completed, and a compaction that found a ready outstanding holds the next one back
 * (compact_due) so that a round ends with none.
 * While a write runs, nothing unrelated waits for it: once per loop iteration (a uv_check
 * after the poll phase), after every received frame and after every proposal (the node
 * proposes just before the poll, which may wait for I/O), the leader's new appends and every
 * heartbeat, heartbeat answer and read confirmation leave (kl_raft_take_urgent, take_reads),
 * and entries that committed meanwhile and that an EARLIER write made durable here are
 * applied (kl_raft_take_committed), their reads served.
 * The rules that keep this safe (each enforced where noted):
 *   - a follower acknowledges, and a member grants a vote, only in step 4 of the round whose
 *     synced write holds the entries or the vote (append answers never leave as urgent);
 *   - the leader counts itself toward a commit only once its write was reported
 *     (kl_raft_advance moves the core's persisted index);
 *   - term and vote are synced before any message of that term leaves: urgent messages
 *     and early leader sends wait while a ready that changes the term is outstanding;
 *   - an entry is applied only after its own local log write completed (applies skip the
 *     WAL, so an earlier apply could reach an SST file ahead of its log entry and the member
 *     would refuse to start): step 3 stops below the write's truncation point and
 *     kl_raft_take_committed stops at the core's persisted index;
 *   - a truncation never races a write it would overwrite: it travels in the next ready,
 *     whose write starts only after the running one completed.
 * Sending only after the synced write is what makes a vote grant or an append
 * acknowledgement a true statement about the disk.
 *
 * Compaction and snapshots (raft.h "Snapshots and compaction"). After a round completes
 * (no ready outstanding) and on every tick, once the core's applied index is more than
 * snapshot_threshold past its snapshot point, the driver makes the applied state durable
 * (kl_store_flush on libuv's thread pool, the loop going on; one at a time) and compacts up
 * to min(durable applied, applied) - snapshot_trailing: kl_raft_compact first, then
 * kl_store_compact_log (one synced write, on the loop), then kl_store_drop_compacted_log on
 * the thread pool (its MANIFEST sync off the loop; one at a time, a compaction meanwhile
 * asks for one more; a failure is fatal like a failed write). The state machine IS the snapshot: a leader asked
 * for one streams its current applied state (snapwire.h), at an index at least the
 * compacted one. A follower installs a streamed snapshot through the core's has_snapshot
 * ready before anything else of that ready and before its messages (the acknowledgement)
 * leave. At start the snapshot point is the store's log_start (first index - 1, prev term).
 *
 * Received frames are decoded and checked before the core sees them: a frame that does not
 * decode, carries unknown fields, names a `from` other than the member the connection's hello
 * named or a `to` other than this member, has more than KL_RAFT_MAX_MSG_ENTRIES entries, an
 * unknown type, or an entry whose bytes are not a LogEntry of that term, index and type, is
 * counted in `refused` and dropped; so is one the core refuses as malformed.
 *
 * Failure: a failed persist, or a core that reports a storage failure, calls fatal once; the
 * driver then stops ticking, networking and processing readies (propose and read_index
 * answer UNAVAILABLE) and waits for kl_repl_stop. The member must exit and restart from disk.
 *
 * Threading: every kl_repl_* function and every callback runs on the loop thread. The log
 * writer thread (kl_store_log_write) and the pool's threads (the compaction's kl_store_flush
 * and kl_store_drop_compacted_log) touch only the store and the round's buffers. A stop
 * does not wait for a running log write: the memory goes once it finished.
 *
 * Invariants: at most one persist in flight; the core's ready is advanced only after its
 * write completed and its messages, applies and reads were handed out; every applied index
 * is in the synced log; apply sees every index
 * from the store's applied_index + 1 on, exactly once per index for the lifetime of the
 * process, in log order; read_ready for a read is called only once applied >= its index. */
#ifndef KL_REPL_DRIVER_H
#define KL_REPL_DRIVER_H

#include "common/status.h"
#include "daemon/repl/confstore.h"
#include "daemon/repl/peer.h"
#include "daemon/repl/raft.h"
#include "daemon/repl/stages.h"
#include "daemon/store/store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct kl_repl kl_repl;

typedef struct kl_repl_callbacks {
    void *ctx;
    /* A committed entry, in log order, exactly once per index for the lifetime of the process,
       starting at store applied_index + 1. e->data is the stored LogEntry bytes for a normal
       entry (NULL/0 for a no-op and for a configuration entry, which the driver keeps and
       the state machine applies as a no-op). The callee applies it to the store synchronously. */
    void (*apply)(void *ctx, const kl_raft_entry *e);
    /* Optional. This member leads `term` and its commit index reached `upto`: entries of
       `term` up to it are committed, whether applied yet or not. Called once per loop
       iteration when the commit index moved, and before any apply of an entry above the last
       index reported; never for a follower. The callee may answer those entries' callers
       (what a batch did was decided when it was evaluated; its apply follows in order). */
    void (*committed)(void *ctx, uint64_t term, uint64_t upto);
    /* Role, term or leader changed, or leader_ready became true (leader whose own-term no-op
       is committed AND applied: it may now serve). Called after the apply calls of the same round. */
    void (*role)(void *ctx, kl_raft_role role, uint64_t term, uint64_t leader, bool leader_ready);
    /* A read_index request confirmed: serve it once applied >= index (the driver only calls
       this after applying up to index, so the callee can serve at once). */
    void (*read_ready)(void *ctx, uint64_t read_ctx);
    /* A read_index request dropped (leadership lost): answer it UNAVAILABLE/NOT_LEADER. */
    void (*read_dropped)(void *ctx, uint64_t read_ctx);
    /* Storage failure: the member must exit (the node restarts from disk). */
    void (*fatal)(void *ctx, const kl_err *err);
    /* Optional: after kl_repl_stop, once the driver has released everything (no persist in
       flight, handles closed, memory freed): the store may be closed now. The only callback
       after kl_repl_stop. */
    void (*stopped)(void *ctx);
} kl_repl_callbacks;

typedef struct kl_repl_config {
    const char *cluster;           /* name, for the peer hello */
    int32_t partition;             /* bound into authenticated peer hellos */
    uint64_t self;
    uint64_t members[9]; const char *peer_urls[9]; size_t n_members; /* self included */
    /* Peer authentication (peer.h "Two modes"): this member's Ed25519 secret key (64 bytes)
       and each member's public key (32 bytes, by the index of members[]; self's is unused);
       NULL = absent. With the secret and every other member's public key, links are
       authenticated and sealed; otherwise plain (logged once at start). Copied at start. */
    const uint8_t *member_secret;
    const uint8_t *public_keys[9];
    uint32_t replica_count;
    uint32_t tick_ms, election_ms, heartbeat_ms;   /* election_ticks = election_ms/tick_ms etc. */
    size_t max_frame;
    uint32_t peer_max, peer_idle_ms;  /* peer port: kl_peer_config max_pipes, idle_ms */
    /* Compaction (see "Compaction and snapshots" above): 0 threshold = the defaults of
       common/limits.h; otherwise KL_SNAP_THRESHOLD_MIN <= threshold and trailing < threshold. */
    uint32_t snapshot_threshold, snapshot_trailing;
    /* A NEW member joining a running partition (ARCHITECTURE.md "Membership in the driver"):
       self is not among members (the seed members it first contacts, with their URLs and
       keys), join_peer_url is its own peer URL. It starts from the seed configuration
       without itself, never campaigns until a configuration makes it a voter, and takes the
       leader's appends or snapshot once a learner entry naming it reached the members. Once
       its store holds a configuration, that configuration is the one in effect. */
    bool join;
    const char *join_peer_url;
    /* The replication trace (trace.h): every trace_every-th log index is stamped on this
       member and logged as one "repl trace" line; 0 = off. At most KL_TRACE_EVERY_MAX. */
    uint32_t trace_every;
} kl_repl_config;

/* Defaults for zero fields of kl_repl_config. */
#define KL_REPL_DEFAULT_TICK_MS 50
#define KL_REPL_DEFAULT_ELECTION_MS 1000
#define KL_REPL_DEFAULT_HEARTBEAT_MS 150
/* Room kept in a peer frame around one entry's bytes (RaftMessage framing). */
#define KL_REPL_FRAME_SLACK 1024

/* Loads the hard state, last and applied index from the store, starts the core as a
 * follower, the tick timer and (N > 1) the peer transport. cfg is copied. Zero tick_ms,
 * election_ms, heartbeat_ms or max_frame take the defaults above (KL_PEER_DEFAULT_MAX_FRAME).
 * KL_INVALID_ARGUMENT for a bad configuration (err names the field: self not a member, a
 * missing peer URL, replica_count outside 1..N, election_ms < 2 ticks, heartbeat_ms not
 * below election_ms or under one tick); KL_UNAVAILABLE when the peer URL cannot be bound;
 * KL_INTERNAL when the store cannot be read. A member alone (n_members 1) opens no socket. */
kl_code kl_repl_start(uv_loop_t *loop, kl_store *store, const kl_repl_config *cfg,
                      const kl_repl_callbacks *cb, kl_repl **out, kl_err *err);
/* Where the next proposal will land if proposed now: (last_index + 1, current term), and
   whether this member is a serving leader. Lets the node write (term, index) into the entry
   and its receipts before proposing. */
void kl_repl_next(const kl_repl *r, uint64_t *index, uint64_t *term, bool *serving);
/* Proposes an encoded LogEntry; must land exactly at the index kl_repl_next returned
   (the driver asserts it). KL_NOT_LEADER (leader id out), KL_UNAVAILABLE.
   Also: KL_INVALID_ARGUMENT (nothing proposed) when the bytes are not a LogEntry whose
   term and index are the ones kl_repl_next gives now, whose raft_type is not 0, or which
   could never fit a peer frame (len > max_frame - KL_REPL_FRAME_SLACK); KL_UNAVAILABLE
   after a failure or stop, or when the core's unpersisted limits are full. A proposal on a leader that is not yet serving is accepted
   (the caller decides whether to wait for serving). */
kl_code kl_repl_propose(kl_repl *r, const uint8_t *data, size_t len, uint64_t *leader);
/* Read-index barrier (ARCHITECTURE.md "Read path"). KL_OK: read_ready or read_dropped will be called once
   for read_ctx (read_ctx values of outstanding reads should be distinct), never from inside
   this call: the confirmation round leaves at the end of the loop iteration, shared by every
   read queued in it and carried by appends proposed meanwhile. KL_NOT_LEADER with
   *leader = the known leader (this member itself while its no-op has not committed: retry
   shortly); KL_UNAVAILABLE when too many reads are outstanding, after a failure or stop. */
kl_code kl_repl_read_index(kl_repl *r, uint64_t read_ctx, uint64_t *leader);
/* The core's status, except leader_ready, which is the driver's: leader whose own-term no-op
   is committed AND applied (the same flag the role callback reports). */
void kl_repl_status(const kl_repl *r, kl_raft_status *st);

/* Membership (raft.h "Membership"; docs/MEMBERSHIP.md). Proposes the next step from the
 * configuration in effect towards target (kl_raft_propose_conf_change: learners only, or
 * enter joint, or leave joint), the entry carrying directory (an encoded MemberDirectory,
 * membership.proto) after the configuration. *index = the entry's index (0 when the
 * configuration in effect already is target). Errors as kl_raft_propose_conf_change's, err
 * naming the field; KL_INVALID_ARGUMENT "directory" when it could not fit a configuration
 * blob (KL_MEMBER_CONF_BLOB_MAX). The driver persists and applies CONF entries, stores the
 * configuration with every compaction and install, and restarts from it (the cluster file
 * then no longer says who the members are). */
kl_code kl_repl_propose_conf(kl_repl *r, const kl_raft_conf *target, const uint8_t *directory,
                             size_t directory_len, uint64_t *index, uint64_t *leader, kl_err *err);
/* The configuration in effect (the latest in the log), its entry's index (0: the stored base
 * or the cluster file's) and whether that index is committed. */
void kl_repl_conf(const kl_repl *r, kl_raft_conf *conf, uint64_t *index, bool *committed);
/* What the member directories (or the cluster file's seed) say about member id: its URLs
 * and key; NULL when nothing. Valid until the next call into the driver. */
const kl_confstore_member *kl_repl_member(const kl_repl *r, uint64_t id);

typedef struct kl_repl_counters {
    uint64_t refused;      /* received frames dropped by the checks above */
    uint64_t send_drops;   /* messages kl_peer_send refused (no connection, queue full, size) */
    uint64_t persists;     /* synced writes completed */
    uint64_t chained;      /* of them, started the moment the one before completed (take_next) */
    uint64_t on_loop;      /* of them, run on the loop instead of the log writer (write_start) */
    uint64_t rounds;       /* readies processed */
    uint64_t early_applies; /* entries applied while an unrelated log write ran */
    uint64_t entries_appended, bytes_appended; /* log entries (and their bytes) synced here */
    /* Metrics hooks (ARCHITECTURE.md "Metrics"): the snapshot and log-compaction work
     * increments these where it takes/installs a snapshot and compacts the log. */
    uint64_t snapshots, compactions;
} kl_repl_counters;
void kl_repl_counters_get(const kl_repl *r, kl_repl_counters *out);
/* The stage timings and their histograms (stages.h); NULL when they could not be allocated. */
const kl_stages *kl_repl_stages(const kl_repl *r);

/* Stops ticking and networking; waits (by callback) for an in-flight persist; then frees.
   Keep running the loop after stop. No callback but `stopped` is called after stop
   (outstanding reads and proposals are the caller's to answer). Safe to call from inside a
   callback, and after fatal. Call once; no other kl_repl_* call after it. */
void kl_repl_stop(kl_repl *r);

/* The replication configuration's index, carried in peer hellos: constant until
 * membership changes exist (they will move it). */
#define KL_REPL_CONFIG_INDEX 1
/* The peer transport's counters (zeros for a member alone). */
void kl_repl_peer_stats(kl_repl *r, kl_peer_counters *out);

#endif
