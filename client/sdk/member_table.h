/* member_table: the members of each partition the SDK may route to: those the cluster file
 * names, then those it learned from `keyload.v1.Members` answers (the configuration in effect
 * and its member directory, ARCHITECTURE.md "Replication"), so a client whose cluster file
 * is older than the partition's configuration still reaches the partition.
 *
 * One set of tables per cluster (name and seed digest) and kind of client (with a principal
 * or without), shared by every kl_client of the process that opened the same cluster file
 * the same way, like the leader cache in client.c.
 *
 * Invariants:
 * - A table holds at most KL_SDK_MEMBERS_MAX slots and is append-only: a slot below the
 *   published count never changes, so a reader may use it without a lock (the count is
 *   published with release order after the slot is written; writers hold the table mutex).
 *   A slot index is therefore a stable name for a member (client.c's connections and
 *   sealed.c's sessions are indexed by it). When the table is full a new member is refused,
 *   logged once per table and counted; routing goes on with the members it has.
 * - A slot is one identity: member id, client URL and (when known) public key. A member
 *   replaced under the same URL by a new identity gets a new slot; no slot is rewritten.
 * - `current` marks the slots of the configuration learned last (the cluster file's until
 *   something is learned). An answer whose configuration index is below the newest
 *   committed one learned, or below the one `current` shows (unless it is committed and that
 *   one is not), changes nothing: a lagging member cannot roll the view back, and a deposed
 *   leader's uncommitted configuration (which a new leader may truncate and replace at a
 *   lower index) does not hold the committed one off.
 *
 * Trust: a Members answer is learned only after it passed the same checks as any answer of
 * the call path. With a principal (sealed sessions) that means it was sealed by a session
 * whose Hello the answering member signed with the public key this table holds for it, and
 * every key in this table comes from the cluster file or from such an answer; so a learned
 * member is vouched for by a member already trusted, and sessions with it are then
 * authenticated with the key that member reported (learned members without a 32-byte key
 * are refused then). A member could lie about its directory, but a member is trusted with
 * the partition's data anyway. Without a principal nothing on the wire is authenticated, so
 * learning adds no trust that the unsealed transport did not already assume; and since such
 * an answer is not authenticated, clients with and without a principal never share tables,
 * so nothing an unsealed answer taught reaches a sealed client's sessions. */
#ifndef KL_SDK_MEMBER_TABLE_H
#define KL_SDK_MEMBER_TABLE_H

#include "common/cluster.h"
#include "common/limits.h"
#include "common/status.h"
#include "keyload/v1/membership.pb-c.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Slots per partition: KL_SDK_MEMBERS_MAX (common/limits.h). */
/* The least time between two Members sub-steps on one partition, process-wide. */
#define KL_SDK_LEARN_INTERVAL_MS 500

typedef struct kl_sdk_member {
    uint64_t id;
    char client_url[KL_URL_MAX];
    bool has_public_key;
    uint8_t public_key[KL_CLUSTER_PUBLIC_KEY_LEN];
    bool learned;              /* from a Members answer, not the cluster file */
} kl_sdk_member;

typedef struct kl_sdk_members {
    int partition;
    pthread_mutex_t mu;        /* writers (seed, learn) */
    atomic_int count;          /* published slots */
    atomic_uint_least64_t current;    /* bit per slot: in the newest configuration known */
    atomic_uint_least64_t generation; /* changes whenever count or current changes */
    atomic_int_least64_t next_learn_ms; /* CLOCK_MONOTONIC ms before which no sub-step starts */
    uint64_t conf_index;       /* under mu: the newest committed configuration learned */
    uint64_t view_index;       /* under mu: the configuration `current` shows */
    bool view_committed;       /* under mu: and whether its answer said committed */
    bool learned_any;          /* under mu */
    uint64_t refused;          /* under mu: members refused because the table was full */
    kl_sdk_member slots[KL_SDK_MEMBERS_MAX];
} kl_sdk_members;

/* ---- one partition's table (pure logic; the unit tests use it alone) */

/* An empty table of partition `partition`. */
kl_code kl_sdk_members_init(kl_sdk_members *t, int partition, kl_err *err);
void kl_sdk_members_destroy(kl_sdk_members *t);
/* Appends the cluster file's members of p (all current). */
kl_code kl_sdk_members_seed(kl_sdk_members *t, const kl_partition *p, kl_err *err);

int kl_sdk_members_count(const kl_sdk_members *t);
/* Slot i (< kl_sdk_members_count): immutable once published. */
const kl_sdk_member *kl_sdk_members_at(const kl_sdk_members *t, int i);
bool kl_sdk_members_is_current(const kl_sdk_members *t, int i);
uint64_t kl_sdk_members_generation(const kl_sdk_members *t);
/* The slot with this client URL (a current one first), or -1. */
int kl_sdk_members_find_url(const kl_sdk_members *t, const char *url);
/* The current slot of member id (else any slot of it), or -1. */
int kl_sdk_members_find_id(const kl_sdk_members *t, uint64_t id);

/* Learns the configuration and directory of a Members answer: every directory entry of a
 * voter, learner or outgoing voter gets a slot (deduplicated by identity) and those slots
 * become the current ones. need_keys: refuse entries without a 32-byte public key (a sealed
 * client could not authenticate them). *added counts new slots. An answer older than the
 * newest committed configuration learned is ignored (KL_OK, nothing added). RESOURCE_EXHAUSTED
 * "members_max" when a member did not fit (the others are learned); INVALID_ARGUMENT
 * naming the field for an answer that names no usable member of its own configuration. */
kl_code kl_sdk_members_learn(kl_sdk_members *t, const Keyload__V1__MembersAnswer *a, bool need_keys,
                             int *added, kl_err *err);
/* True (once per KL_SDK_LEARN_INTERVAL_MS per table, for all threads) when a Members
 * sub-step may start now. */
bool kl_sdk_members_learn_due(kl_sdk_members *t, int64_t now_ms);

/* ---- the process's tables, one set per cluster */

typedef struct kl_sdk_member_tables kl_sdk_member_tables;

/* The tables of cluster for clients with (sealed) or without a principal: shared with every
 * caller that passed a cluster of the same name and members and the same `sealed`, seeded
 * from it on first use; NULL when out of memory. */
kl_sdk_member_tables *kl_sdk_member_tables_acquire(const kl_cluster *cluster, bool sealed);
void kl_sdk_member_tables_release(kl_sdk_member_tables *ts);
/* The table of the cluster file's partition index pi. */
kl_sdk_members *kl_sdk_member_tables_at(kl_sdk_member_tables *ts, int pi);

#endif
