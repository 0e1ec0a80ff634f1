/* tailer: a data partition's catalog tail (DESIGN.md §5).
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
 * Threads: kl_tailer_* run on the loop thread; the tail thread only does RPCs and owns
 * its connections. Bounded: one answer in flight (at most KL_TAIL_MAX_CHANGES changes). */
#ifndef KL_TAILER_H
#define KL_TAILER_H

#include "common/cluster.h"
#include "common/status.h"
#include "daemon/node.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

typedef struct kl_tailer kl_tailer;

kl_code kl_tailer_start(uv_loop_t *loop, const kl_cluster *cluster, int partition, kl_node *node,
                        kl_tailer **out, kl_err *err);
/* Whether this member serves its partition now (tail only then). */
void kl_tailer_set_serving(kl_tailer *t, bool serving);
/* The catalog version applied on this member moved to `version`. */
void kl_tailer_applied(kl_tailer *t, uint64_t version);
/* Stops the thread (waits at most one RPC timeout) and frees the tailer once the loop has
 * closed its handle. */
void kl_tailer_stop(kl_tailer *t);

#endif
