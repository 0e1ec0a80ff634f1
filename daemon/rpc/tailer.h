/* tailer: a data partition's catalog tail (ARCHITECTURE.md "Replication").
 *
 * While this member is the partition's serving leader, one thread long-polls partition
 * 0's leader (keyload.v1.CatalogTail) with the catalog version this member has applied,
 * and hands each answer to the loop, which proposes the changes in version order through
 * kl_node_submit_catalog. The thread asks again only once the loop has taken the answer
 * and the applied version has moved (or a second has passed), so a change is not fetched
 * over and over while its entry commits. A follower does not tail; a new leader starts
 * from its own applied version, and the store applies a version only at current + 1, so
 * re-proposals after a leader change are harmless.
 *
 * The catalog lease (ARCHITECTURE.md "Replication"): the leader serves requests only within catalog_lease_ms
 * of the start of its latest current tail: one that reported every version partition 0
 * had (the answer's latest version is no newer than the version it reported). A tail that
 * brings changes starts no lease, not even once they are applied: partition 0 counts only
 * current tails when it lets a catalog change return because a partition's lease has run
 * out, so a lease from a lagging tail could outlast that bound. After catching up, or
 * without a lease, a tail asks partition 0 not to hold it, so the lease starts at once. A
 * new leadership starts with no lease, so a restarted or newly elected leader serves
 * nothing before it has caught up.
 *
 * Threads: kl_tailer_* run on the loop thread; the tail thread does RPCs, owns its
 * connections and reads one catalog record per answer from the store (the key partition 0's
 * answering member is vouched for with, kl_node_find_member_key). Bounded: one answer in flight (at most KL_TAIL_MAX_CHANGES changes). */
#ifndef KL_TAILER_H
#define KL_TAILER_H

#include "common/cluster.h"
#include "common/status.h"
#include "daemon/node.h"

struct kl_keys;

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

typedef struct kl_tailer kl_tailer;

/* member and keys (borrowed, may be NULL) sign the tail requests; when the cluster file
 * lists every member's public key, answers must carry a valid signature of a member of
 * partition 0, with the key this member's catalog copy or else its cluster file gives it
 * (daemon/rpc/tail_auth.h), else they are refused and retried. */
kl_code kl_tailer_start(uv_loop_t *loop, const kl_cluster *cluster, int partition, uint64_t member,
                        const struct kl_keys *keys, kl_node *node, kl_tailer **out, kl_err *err);
/* Whether this member serves its partition now (tail only then). */
void kl_tailer_set_serving(kl_tailer *t, bool serving);
/* The catalog version applied on this member moved to `version`. */
void kl_tailer_applied(kl_tailer *t, uint64_t version);
/* Whether the lease holds now; *age_ms (may be NULL) is its age, -1 when there is none. */
bool kl_tailer_lease_valid(kl_tailer *t, int64_t *age_ms);
/* Stops the thread (waits at most one RPC timeout) and frees the tailer once the loop has
 * closed its handle. */
void kl_tailer_stop(kl_tailer *t);

#endif
