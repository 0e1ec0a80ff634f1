/* raft_sim: a deterministic cluster simulator for the replication core (daemon/repl/raft.h).
 *
 * One run = N real kl_raft instances, a simulated network and simulated disks, all driven by
 * one seeded PRNG, so a seed replays exactly. The chaos phase injects message drops, delays
 * (hence reordering), duplicates, partitions that heal, crashes that lose everything not yet
 * durable (the in-memory tail and unsent messages; an outstanding write either made it or
 * not), restarts from the durable hard state and log, slow and stalled disks, client
 * proposals and read-index requests, and clock ticks. After every step it checks:
 *   election safety      at most one leader per term;
 *   log matching         equal (index, term) on two durable logs means equal prefixes
 *                        (prefix hashes, checked on every write);
 *   leader completeness  a leader holds every entry committed in an earlier term;
 *   state machine safety every member applies the same entry at each index, in order;
 *   committed is final   no committed (index, term) ever changes or is truncated, and every
 *                        entry a client was told is committed stays so;
 *   monotonicity         a member's commit never decreases, nor its durable term and commit;
 *                        a durable vote never changes within a term;
 *   read index           a confirmed read's index covers every entry committed anywhere
 *                        before the read was requested (linearizable reads);
 *   apply after write    an entry is applied only when this member's durable log holds it
 *                        and no outstanding write truncates it; applied state recorded as
 *                        durable never runs ahead of the durable log at a restart;
 *   apply order          a member applies index i + 1 after i, never an index twice and
 *                        never skipping one, except by installing a snapshot past it;
 *   snapshots            each member's state machine keeps a digest of what it applied: the
 *                        digest at every index is the same on every member, a snapshot
 *                        installs exactly the digest its sender had at its index, and only
 *                        a committed (index, term) is ever installed.
 * Members compact their logs on a threshold with a trailing window (small, drawn per seed),
 * up to what they applied durably; a leader that needs a compacted entry streams its
 * snapshot (a simulated message carrying (index, term, prefix hash, digest)) that the
 * network drops, delays, duplicates and partitions like any other, and reports delivery or
 * failure to the core; a crash with an install outstanding keeps it or not at random.
 * Writes complete late (a ready may stay outstanding over several steps while messages,
 * ticks, proposals and early applies go on) and a crash keeps or discards the outstanding
 * write at random.
 * Membership (raft.h "Membership"), in the seeds that draw it: an operator drives changes
 * towards a random target through kl_raft_propose_conf_change on whichever member leads,
 * calling it again after every refusal, leader change or fall-back: grow by one or two new
 * identities (a new identity starts empty with the configuration plus itself as a learner,
 * catches up, then becomes a voter by the joint step), shrink by one or two (the leader
 * included at times; replica_count lowered when it must), and replace one, often after
 * killing it for good first (a dead member of a 3-of-3 or 2-of-3 partition). A retired
 * identity never restarts; its disk still counts for the copies it held. On top of the
 * checks above:
 *   durability           every data entry a leader commits is, at that step, durable on
 *                        replica_count voters of the newest configuration in its log;
 *   removal              a member that is no voter of the configuration it applied never
 *                        leads afterwards (it never campaigns).
 * Then a liveness phase heals everything, lets the operator finish a change under way, and
 * requires a leader to commit a new proposal on a quorum, and every member of its
 * configuration to apply it, within a bound. */
#ifndef KL_TESTS_RAFT_SIM_H
#define KL_TESTS_RAFT_SIM_H

#include <stdbool.h>
#include <stdint.h>

typedef struct sim_opts {
    int n;          /* members, 1..9 */
    int q2;         /* replica_count */
    uint64_t seed;
    int steps;      /* chaos steps before the liveness phase */
    bool trace;     /* print every event to stderr (for replaying a failing seed) */
} sim_opts;

typedef struct sim_result {
    bool ok;
    char why[512];       /* first violated property, when !ok */
    uint64_t fail_step;
    /* what the run exercised */
    uint64_t leaders, committed, crashes, partitions, delivered, dropped;
    uint64_t proposals, acked, reads_ok, liveness_steps, truncations;
    uint64_t early_applies; /* entries applied while an unrelated write was outstanding */
    uint64_t pipelined;     /* readies taken while an earlier one's write was outstanding */
    uint64_t read_resps;    /* read rounds answered on an append's arrival (READ_RESP) */
    uint64_t compactions, installs, snapshots_sent, snapshots_failed;
    /* membership: changes started and finished (the target configuration committed), CONF
     * entries proposed, members added and removed, dead members replaced, and data entries
     * whose copies on the newest configuration's voters were counted at their commit */
    uint64_t ops_started, ops_done, conf_proposals, added, removed, dead_replaced, dur_checked;
} sim_result;

/* Runs one seed; returns res->ok. Aborts (assert) only if the core's own invariants break. */
bool sim_run(const sim_opts *o, sim_result *res);

/* "3of5" -> n 5, q2 3. False on anything else. */
bool sim_parse_config(const char *s, int *n, int *q2);

/* Set while a seed runs, so that an abort() inside the core can still name the seed. */
extern const sim_opts *sim_current;

#endif
