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
 * then a liveness phase heals everything and requires a leader to commit a new proposal on a
 * quorum, and every member to apply it, within a bound. */
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
    uint64_t compactions, installs, snapshots_sent, snapshots_failed;
} sim_result;

/* Runs one seed; returns res->ok. Aborts (assert) only if the core's own invariants break. */
bool sim_run(const sim_opts *o, sim_result *res);

/* "3of5" -> n 5, q2 3. False on anything else. */
bool sim_parse_config(const char *s, int *n, int *q2);

/* Set while a seed runs, so that an abort() inside the core can still name the seed. */
extern const sim_opts *sim_current;

#endif
