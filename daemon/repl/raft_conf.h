/* raft_conf: membership for the core (raft.h "Membership"; docs/MEMBERSHIP.md); internal to
 * daemon/repl (raft.c is its only user; the entry encoding is public in raft_entry.h).
 *
 * Pure functions over a configuration: the member table (one slot per voter or learner of
 * either half, so the core's per-member arrays stay indexed by slot), the quorum counts of
 * each half, the commit index rule, the next step of a change, and the history of the CONF
 * entries the log holds past the snapshot point (for the fall-back after a truncation and
 * for the configuration a snapshot carries). No allocation. */
#ifndef KL_REPL_RAFT_CONF_H
#define KL_REPL_RAFT_CONF_H

#include "daemon/repl/raft_entry.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KL_RCONF_NO_SLOT ((size_t)-1)

/* A configuration with its member table and quorum numbers. */
typedef struct kl_rconf {
    kl_raft_conf c;
    uint64_t ids[KL_RAFT_MAX_MEMBERS]; /* slot -> member id: voters of either half, learners */
    size_t n;
    size_t self;              /* this member's slot, or KL_RCONF_NO_SLOT */
    uint32_t mask_new;        /* slots of c.members */
    uint32_t mask_old;        /* slots of c.old_members (0 when not joint) */
    uint32_t q1_new, q2_new, r_new;
    uint32_t q1_old, q2_old, r_old;
} kl_rconf;

/* Builds the table for c (which kl_raft_conf_check accepted) as seen by member self_id. */
void kl_rconf_build(kl_rconf *rc, const kl_raft_conf *c, uint64_t self_id);
int kl_rconf_slot(const kl_rconf *rc, uint64_t id);
/* A voter of either half. */
bool kl_rconf_is_voter(const kl_rconf *rc, size_t slot);
/* The vote bits (by slot) win, or can no longer win, the election. */
bool kl_rconf_won(const kl_rconf *rc, uint32_t granted);
bool kl_rconf_lost(const kl_rconf *rc, uint32_t rejected);
/* bits hold R voters of each half (read rounds, check-quorum). */
bool kl_rconf_survives(const kl_rconf *rc, uint32_t bits);
/* Voters of the newest half in bits. */
uint32_t kl_rconf_voters_in(const kl_rconf *rc, uint32_t bits);

/* The CONF entries of the log past the snapshot point, oldest first, and the configuration
 * at the snapshot point (base). */
typedef struct kl_rconf_hist {
    kl_raft_conf base;
    uint64_t base_index; /* index of base's entry when known (compacted into it), else 0 */
    uint64_t index[KL_RAFT_MAX_CONF_HISTORY];
    kl_raft_conf conf[KL_RAFT_MAX_CONF_HISTORY];
    size_t n;
} kl_rconf_hist;

/* The latest configuration (base when the log holds none) and its index (0 then). */
const kl_raft_conf *kl_rconf_hist_latest(const kl_rconf_hist *h, uint64_t *index);
bool kl_rconf_hist_full(const kl_rconf_hist *h);
/* Records a CONF entry appended at index (> every recorded one; the caller checked room). */
void kl_rconf_hist_push(kl_rconf_hist *h, uint64_t index, const kl_raft_conf *c);
/* The log lost entries >= from: forget their configurations. Returns whether any went. */
bool kl_rconf_hist_truncate(kl_rconf_hist *h, uint64_t from);
/* Entries <= index were compacted: fold their configurations into base. */
void kl_rconf_hist_compact(kl_rconf_hist *h, uint64_t index);
bool kl_rconf_hist_has(const kl_rconf_hist *h, uint64_t index);

/* The commit candidate of MEMBERSHIP.md rule 4 from the persisted match index of each slot:
 * c_R (R of each half) and c_D (Q2 of the newest); the largest i <= c_R with no entry other
 * than a CONF one in (c_D, i]. With no CONF entry that is c_D, the static rule. */
uint64_t kl_rconf_commit_candidate(const kl_rconf *rc, const uint64_t *match,
                                   const kl_rconf_hist *h);

/* The next configuration on the way from cur to target (raft.h kl_raft_propose_conf_change):
 * KL_OK with *next set and *promote = the slots-free list of learners the step makes voters
 * (their ids, *n_promote of them), or KL_OK with *same when cur already is target. */
kl_code kl_rconf_next(const kl_raft_conf *cur, const kl_raft_conf *target, kl_raft_conf *next,
                      bool *same, uint64_t *promote, size_t *n_promote, kl_err *err);

/* Equal as sets (order of ids ignored). */
bool kl_rconf_equal(const kl_raft_conf *a, const kl_raft_conf *b);

#endif
