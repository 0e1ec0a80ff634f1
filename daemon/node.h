/* node: the partition state machine on one member (ARCHITECTURE.md "Write path"), without I/O.
 *
 * It owns the pending overlay (writes of proposed, not yet applied batches) and the table
 * of pending outcomes. The replication driver (daemon/repl/driver.h, or a test) supplies the
 * log through kl_node_io: on the leader a batch is validated, evaluated against applied
 * state plus pending writes, and its write-set joins the group: the one LogEntry at the slot
 * (term, index) the log promised (io.next) that every batch evaluated until kl_node_flush
 * shares, up to a count and a byte bound (node.c). kl_node_flush proposes the group
 * (io.propose); every member applies committed entries through kl_node_apply, in log order,
 * each entry's write-sets in order in one RocksDB write (the leader applies its own entries
 * from the write-sets it built, without decoding them). The leader answers a batch's callers
 * as soon as its entry is committed (kl_node_committed), or else when it applies: the answer
 * is what evaluation computed, and a committed entry always applies, the same everywhere. A receipt's `index` is the index of the entry
 * that committed the batch, which batches of one group share; the command id tells them
 * apart. Group commit also happens below: the driver persists every entry proposed since
 * its last synced write in one write.
 *
 * Invariants:
 *  - a (principal, command id) is either committed (outcome in the store), pending (in the
 *    table, with its receipt already encoded) or unknown, never two of these;
 *  - a caller is answered OK only after its entry is committed: the leader of the term that
 *    proposed it counts a quorum of durable copies (kl_node_committed), or it applies;
 *  - an answered batch stays pending, its receipt kept, until its entry applies here, so a
 *    retry meanwhile is answered the same (the store holds no outcome for it yet);
 *  - pending state exists only while this member leads; kl_node_role(leader=false) answers
 *    every waiting caller UNKNOWN_WRITE_OUTCOME and drops the overlay (the entries may still
 *    commit under the next leader: a retry with the same command id finds out).
 * Threading: every function runs on the executor (the libuv loop thread). */
#ifndef KL_NODE_H
#define KL_NODE_H

#include "common/cluster.h"
#include "common/status.h"
#include "daemon/reply.h"
#include "daemon/store/store.h"
#include "keyload/v1/catalog.pb-c.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kl_node kl_node;

typedef struct kl_node_io {
    void *ctx;
    /* Where the next proposal would land, and whether this member serves writes now (a
     * leader whose own-term entry is committed and applied). */
    void (*next)(void *ctx, uint64_t *index, uint64_t *term, bool *serving);
    /* Proposes an encoded LogEntry at the index `next` returned. KL_OK: it is in the log,
     * not yet committed. KL_NOT_LEADER / KL_UNAVAILABLE: nothing was proposed. The bytes
     * are the node's only until the call returns (the callee copies what it keeps). */
    kl_code (*propose)(void *ctx, const uint8_t *entry, size_t len);
    /* Optional (NULL: always): whether this member can take a write now, asked by a serving
     * leader before it evaluates a batch; non-OK refuses the batch with err (e.g. UNAVAILABLE
     * "disk_full"), nothing proposed. */
    kl_code (*admit)(void *ctx, kl_err *err);
    int64_t (*clock_ms)(void *ctx);      /* wall clock, Unix ms */
    /* CLOCK_BOOTTIME in ns: bounds how far entry time follows clock_ms (entry_clock.h).
     * NULL: clock_ms is the only clock and never steps (a simulated clock in tests). */
    int64_t (*boot_ns)(void *ctx);
    void (*random)(uint8_t *buf, size_t n);
    /* Optional: the node opened a group; the driver calls kl_node_flush soon, at the latest
     * before the loop waits for I/O again (daemon/main.c: after the poll that evaluated the
     * batch, else before the next poll), so that the batches evaluated meanwhile share one
     * entry. NULL: every batch is proposed as its own entry before submit returns. */
    void (*flush_soon)(void *ctx);
} kl_node_io;

/* Where a member's write path spends its time (ns on the loop thread), and how many
 * batches and entries it carried; logged when the node closes. */
typedef struct kl_node_costs {
    uint64_t batches;              /* batches that joined a group */
    uint64_t batches_grouped;      /* of those, in entries proposed */
    uint64_t entries_proposed;
    uint64_t own_entries_applied;  /* applied from the leader's kept write-sets */
    uint64_t eval_ns;              /* engine evaluation */
    uint64_t encode_ns;            /* receipt, outcome, write-set and entry encoding */
    uint64_t propose_ns;           /* io.propose */
    uint64_t apply_decode_ns;      /* unpacking stored entries at apply */
    uint64_t apply_write_ns;       /* the store's apply */
} kl_node_costs;
void kl_node_costs_get(const kl_node *n, kl_node_costs *out);

/* Transfer events in the entries this member applied since it started, read from their
 * write-sets (ARCHITECTURE.md "Metrics"): intents created ('Y' pending keys written),
 * intents Delivered ('Y' keys deleted by Complete), and committed terminal refusals (an
 * Accept, Complete or advance whose outcome records an error) by status code. */
typedef struct kl_node_transfer_counts {
    uint64_t created, delivered;
    uint64_t failed[KL_CODE_COUNT];
} kl_node_transfer_counts;
void kl_node_transfer_counts_get(const kl_node *n, kl_node_transfer_counts *out);

typedef struct kl_node_config {
    int partition;
    int partition_count;          /* partitions in the cluster (queue placement) */
    kl_limits limits;
    size_t max_pending_bytes;     /* refusal (UNAVAILABLE) past this many unapplied bytes */
    size_t max_pending_batches;   /* and past this many unapplied batches */
    const uint8_t *cluster_secret;  /* 32 bytes (borrowed, outlives the node) or NULL */
    /* Requests without a session run as the trusted local administrator (common/cluster.h
     * "insecure_local_admin"); false: they are refused UNAUTHENTICATED "session_required",
     * except a Batch holding only Bootstrap. */
    bool insecure_local_admin;
    /* How long outcomes of ordinary batches are kept (cluster file
     * timers.outcome_retention_ms); 0 = for ever: no expiry index, no mark, no sweep. */
    int64_t outcome_retention_ms;
} kl_node_config;

kl_code kl_node_open(kl_store *st, const kl_node_config *cfg, const kl_node_io *io, kl_node **out,
                     kl_err *err);
/* Answers every caller still waiting UNKNOWN_WRITE_OUTCOME (their batches may commit
 * after a restart) and frees the node. The store stays open (caller owns it). */
void kl_node_close(kl_node *n);

/* Submits an encoded BatchRequest from `principal` (a session's principal id, or
 * KL_CATALOG_RESERVED_PRINCIPAL for a request without a session). Every mutation is
 * authorized against the principal's applied catalog record (daemon/engine/access.h); the
 * stored outcome records its policy epoch, and a replay under another epoch answers
 * PERMISSION_DENIED "stale_authority". reply is called exactly once, maybe before this
 * returns. NOT_LEADER when this member does not serve writes now. */
void kl_node_submit_batch(kl_node *n, const char *principal, const uint8_t *req, size_t len,
                          kl_node_reply_fn reply, void *cookie);

/* Proposes the open group, if any, as one LogEntry. A refused proposal answers every batch
 * of the group (nothing of them was written) and takes their writes out of the pending
 * overlay. Called by the driver after io.flush_soon, and by the node itself before anything
 * else is proposed. */
void kl_node_flush(kl_node *n);
/* kl_node_submit_batch for a caller that can wait at most wait_cap_ms (its deadline): a
 * batch of Receives that leases nothing commits nothing; when a Receive asks to wait
 * (wait_ms) the request is parked (daemon/park.h) until messages come or the wait,
 * bounded by wait_cap_ms, ends. kl_node_submit_batch bounds it by KL_RECEIVE_WAIT_MS_MAX.
 * A parked request is answered NOT_LEADER when this member stops leading, UNAVAILABLE when
 * it closes; the cap refuses RESOURCE_EXHAUSTED "parked_receives". */
void kl_node_submit_batch_wait(kl_node *n, const char *principal, const uint8_t *req, size_t len,
                               int64_t wait_cap_ms, kl_node_reply_fn fn, void *cookie);
/* Evaluates again the parked requests that are due (woken by an applied entry, a lease or
 * delay ending, or their wait ending). Call it often (the service's timer) and soon after
 * an apply for which kl_node_park_due says so. */
void kl_node_park_tick(kl_node *n);
bool kl_node_park_due(const kl_node *n);
size_t kl_node_parked(const kl_node *n);
/* Answers every parked request with err (e.g. the catalog lease ran out). */
void kl_node_park_drop(kl_node *n, const kl_err *err);

/* Proposes an encoded CatalogChange tailed from partition 0 (data partitions only). KL_OK
 * when proposed, or when that version is already applied or proposed (nothing to do).
 * NOT_LEADER when this member does not serve; FAILED_PRECONDITION when the change does
 * not follow the version applied plus proposed (the tail must deliver in order). The
 * entry's write-set applies on every member only at catalog version - 1 (store.c). */
kl_code kl_node_submit_catalog(kl_node *n, const uint8_t *change, size_t len, kl_err *err);

/* The replication log's commit index reached `upto` while this member leads `term`: every
 * pending batch proposed in `term` at an index <= upto is committed (a leader never
 * overwrites its own entries, and every later leader holds every committed one). Answers
 * their callers now, OK with the receipt evaluation encoded (or the committed refusal); the
 * outcome stays pending until kl_node_apply applies its entry. Batches of other terms are
 * left to kl_node_apply, which checks the entry's term; so are batches that change the
 * catalog, whose lookups (LocateQueue, ShowPrincipal, ListCatalog) read applied state
 * without a read barrier and must show a change its caller was told about. Returns how
 * many callers it answered. Cost: one pass over the pending table. */
size_t kl_node_committed(kl_node *n, uint64_t term, uint64_t upto);

/* Applies the committed entry (index, term): `entry` is the stored LogEntry (NULL for a
 * no-op). Index must be the store's applied index + 1. Answers the callers of a pending
 * batch at that index that kl_node_committed did not: OK when the committed entry is the
 * one proposed (same term), else UNKNOWN_WRITE_OUTCOME; then forgets it. A failure marks the
 * node broken (the member must restart). */
kl_code kl_node_apply(kl_node *n, uint64_t index, uint64_t term, const uint8_t *entry, size_t len,
                      kl_err *err);

/* Leadership changed. Leaving it answers every pending caller UNKNOWN_WRITE_OUTCOME and
 * drops the pending overlay. A serving leader of a partition without an incarnation yet
 * proposes the entry that records it. */
void kl_node_role(kl_node *n, bool serving);

/* Encodes the LogEntry a no-op (or any entry without write-sets) is stored as. */
int kl_node_encode_empty_entry(uint64_t index, uint64_t term, uint32_t raft_type, uint8_t **out,
                               size_t *len);

/* QueueStats over applied state, authorized as QueueInspect. On KL_OK *answer is malloc'd
 * (caller frees). */
kl_code kl_node_queue_stats(kl_node *n, const char *principal, const uint8_t *req, size_t len,
                            uint8_t **answer, size_t *answer_len, kl_err *err);

/* The Query permission of a Q1 statement (daemon/rpc/query_serve.c) on tenant/database/queue
 * for principal, over the applied catalog (engine/access.h kl_access_query; transfer: with
 * every administrator flag off). KL_OK when allowed; the native operation's own checks come
 * after, on its native path. */
kl_code kl_node_query_access(kl_node *n, const char *principal, const char *tenant,
                             const char *database, const char *queue, bool transfer, kl_err *err);

/* The reads a member serves over applied state once the caller passed the read barrier: one
 * kind per read RPC. KL_NODE_QUERY_READ is a Q1 read statement (daemon/rpc/query_serve.c):
 * the rpc layer maps it to the transfer read its statement names once parsed. */
typedef enum kl_node_read_kind {
    KL_NODE_QUEUE_STATS,               /* keyload.v1.QueueStats */
    KL_NODE_INSPECT_TRANSFER,          /* keyload.v1.InspectQueueTransfer */
    KL_NODE_TRANSFER_RECEIPT,          /* keyload.v1.InspectQueueTransferReceipt */
    KL_NODE_PENDING_TRANSFERS,         /* keyload.v1.ListPendingQueueTransfers */
    KL_NODE_TRANSFER_FAILURE,          /* keyload.v1.ReadQueueTransferFailure */
    KL_NODE_QUERY_READ,                /* keyload.v1.Query, a read statement */
} kl_node_read_kind;

/* Remote transfer reads (ARCHITECTURE.md "Engine") over applied state; the caller passed the read
 * barrier. req is the encoded request of the kind's RPC (transfer.proto); on KL_OK
 * *answer is the encoded answer (malloc'd). Authorization is transfer.c's. kind is one of
 * the four transfer kinds. */
kl_code kl_node_transfer_read(kl_node *n, kl_node_read_kind kind, const char *principal,
                              const uint8_t *req, size_t len, uint8_t **answer, size_t *answer_len,
                              kl_err *err);
/* The read of `kind` (QueueStats or a transfer read), as kl_node_queue_stats and
 * kl_node_transfer_read answer it. */
kl_code kl_node_read(kl_node *n, kl_node_read_kind kind, const char *principal, const uint8_t *req,
                     size_t len, uint8_t **answer, size_t *answer_len, kl_err *err);

/* Per-queue depth and in-flight over applied state for metrics (engine/queue.h
 * kl_queue_gauges), at most max queues, reading at most scan_limit records. */
typedef struct kl_queue_gauge kl_queue_gauge;
/* The partition's OutputPending intents as applied (its 'Y' records), reading at most
 * scan_limit records: RESOURCE_EXHAUSTED past it. */
kl_code kl_node_transfers_pending(kl_node *n, uint64_t scan_limit, uint64_t *count, kl_err *err);
kl_code kl_node_queue_gauges(kl_node *n, kl_queue_gauge *out, size_t max, uint64_t scan_limit,
                             size_t *filled, size_t *total, kl_err *err);

/* The catalog version this member has applied, and how many catalog changes it applied
 * (equal unless something is badly wrong). Reads applied state; 0 when none. */
void kl_node_catalog_status(kl_node *n, uint64_t *version, uint64_t *changes);

/* ListCatalog over this member's applied catalog (catalog.proto ListCatalogRequest): one
 * page of databases, queues or principals for an administrator of the tenant
 * (kl_access_list_catalog). principal as for kl_node_show_principal. */
kl_code kl_node_list_catalog(kl_node *n, const char *principal, const uint8_t *req, size_t len,
                             uint8_t **answer, size_t *answer_len, kl_err *err);

/* The stored CatalogChange of `version` (partition 0); *bytes malloc'd when found. */
kl_code kl_node_catalog_change(kl_node *n, uint64_t version, uint8_t **bytes, size_t *len, bool *found,
                               kl_err *err);
/* LocateQueue over this member's applied catalog, for any principal of the queue's tenant.
 * On KL_OK *answer is malloc'd. */
kl_code kl_node_locate_queue(kl_node *n, const char *principal, const uint8_t *req, size_t len,
                             uint8_t **answer, size_t *answer_len, kl_err *err);
/* ShowPrincipal over this member's applied catalog: for the principal itself or an
 * administrator of its tenant. On KL_OK *answer is malloc'd. */
kl_code kl_node_show_principal(kl_node *n, const char *principal, const uint8_t *req, size_t len,
                               uint8_t **answer, size_t *answer_len, kl_err *err);

/* A principal by id in this member's applied catalog (kl_catalog_find_principal). On found
 * *out is unpacked (caller frees with keyload__v1__catalog_principal__free_unpacked). */
kl_code kl_node_find_principal(kl_node *n, const char *principal_id,
                               Keyload__V1__CatalogPrincipal **out, bool *found, kl_err *err);
/* The same record from the decoded cache of this member's applied catalog: *out is
 * borrowed, valid until the node's next principal lookup (loop thread only). */
kl_code kl_node_find_principal_cached(kl_node *n, const char *principal_id,
                                      const Keyload__V1__CatalogPrincipal **out, bool *found,
                                      kl_err *err);
/* The member-key record of (partition, member) in this member's applied catalog
 * (kl_catalog_get_member_key). On found *out is unpacked (caller frees with
 * keyload__v1__catalog_member_key__free_unpacked). Only a store read: callable from a thread
 * other than the loop's (the catalog tail's) while the node is open. */
kl_code kl_node_find_member_key(kl_node *n, int partition, uint64_t member,
                                Keyload__V1__CatalogMemberKey **out, bool *found, kl_err *err);

bool kl_node_broken(const kl_node *n);
/* Requests whose principal was loaded for authorization, and the time (ns) spent loading
 * records and evaluating grants, since the node opened. */
void kl_node_authz_costs(const kl_node *n, uint64_t *requests, uint64_t *ns);
/* Principal and database lookups answered by the decoded cache, and the others. */
void kl_node_subject_cache_costs(const kl_node *n, uint64_t *hits, uint64_t *misses);
uint64_t kl_node_applied_index(const kl_node *n);
size_t kl_node_pending_batches(const kl_node *n);

#endif
