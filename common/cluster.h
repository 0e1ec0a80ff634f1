/* cluster: the cluster file (deploy/NAME.json), parsed with jansson.
 *
 *   { "cluster": "local", "replica_count": 1,
 *     "limits": { "MaxBatchBytes": ..., "MaxScanRecords": ..., "MaxQueryReadBytes": ...,
 *                 "MaxFrameBytes": ..., "DefaultQueueMaxMessages": ...,
 *                 "DefaultQueueMaxBytes": ... },
 *     "timers": { "tick_ms": 50, "election_ms": 1000, "heartbeat_ms": 150,
 *                 "catalog_lease_ms": 3000, "session_ttl_ms": 3600000,
 *                 "outcome_retention_ms": 86400000 },
 *     "snapshot": { "threshold_entries": 10000, "trailing_entries": 5000 },
 *     "insecure_local_admin": false,
 *     "partitions": [ { "id": 0, "members": [
 *         { "id": 1, "client": "tcp://127.0.0.1:7400", "peer": "tcp://127.0.0.1:7500",
 *           "public_key": "<base64 of the member's 32-byte Ed25519 public key; optional>" } ] } ] }
 *
 * Node names are p<partition>m<member> (ARCHITECTURE.md "Processes"). A member's data directory is
 * var/<cluster>/<node> unless the member names "data". Invariants after a successful
 * parse: 1 <= replica_count <= members of every partition; ids unique; every limit > 0;
 * MaxFrameBytes > MaxBatchBytes (a whole batch must fit one frame).
 *
 * "insecure_local_admin" (default false) is for single-user development and for tests of
 * things other than authentication: a request without a session then runs as the built-in
 * "local" principal, which may do everything in every tenant. With it false (what
 * deploy/keyload-cluster writes) such a request is refused UNAUTHENTICATED
 * "session_required", except Hello, MemberStatus and a Batch holding only Bootstrap. */
#ifndef KL_CLUSTER_H
#define KL_CLUSTER_H

#include "common/limits.h"
#include "common/status.h"

#include <stdbool.h>
#include <stdint.h>

#define KL_CLUSTER_PUBLIC_KEY_LEN 32   /* Ed25519 public key (common/keys.h) */

typedef struct kl_limits {
    uint64_t max_batch_bytes;        /* MaxBatchBytes: encoded batch request */
    uint64_t max_scan_records;       /* MaxScanRecords: records one read or batch may examine */
    uint64_t max_query_read_bytes;   /* MaxQueryReadBytes: bytes one read may return */
    uint64_t max_frame_bytes;        /* MaxFrameBytes: one RPC frame */
    uint64_t default_queue_max_messages;
    uint64_t default_queue_max_bytes;
} kl_limits;

/* Replication timers (cluster file "timers"; 0 = the driver's defaults). Generous values keep
 * a busy two-core machine from starting needless elections. */
typedef struct kl_timers {
    uint32_t tick_ms;
    uint32_t election_ms;
    uint32_t heartbeat_ms;
    /* A data partition's leader serves requests only this long after the start of its last
     * successful catalog tail (ARCHITECTURE.md "Replication"); partition 0 treats a partition silent for
     * longer as no longer serving. Always set after kl_cluster_load. */
    uint32_t catalog_lease_ms;
    /* Lifetime of a client session (ARCHITECTURE.md "Sessions and RPC"), "session_ttl_ms" in the file,
     * KL_SESSION_TTL_MIN_MS..KL_SESSION_TTL_MAX_MS. Always set after kl_cluster_load. */
    uint32_t session_ttl_ms;
    /* How long outcomes of ordinary batches are kept for replay (ARCHITECTURE.md "Store
     * layout"), "outcome_retention_ms", KL_OUTCOME_RETENTION_MIN_MS..KL_OUTCOME_RETENTION_MAX_MS.
     * Only a leader reads it: it stamps the horizon into its entries. Always set after load. */
    int64_t outcome_retention_ms;
} kl_timers;

/* Log compaction ("snapshot" in the cluster file; ARCHITECTURE.md "Replication"): once a
 * member's log holds more than threshold_entries applied entries it makes its state durable
 * and drops them but the last trailing_entries. KL_SNAP_THRESHOLD_MIN..KL_SNAP_THRESHOLD_MAX
 * and 0..threshold_entries - 1; always set after kl_cluster_load (defaults in limits.h). */
typedef struct kl_snapshot_policy {
    uint32_t threshold_entries;
    uint32_t trailing_entries;
} kl_snapshot_policy;

/* "connections" in the cluster file: caps and idle timeouts of the client and peer ports
 * (0 idle = never) and the sessions one tenant may hold on a member. Always set after
 * kl_cluster_load (defaults in common/limits.h). */
typedef struct kl_conn_limits {
    uint32_t client_max, client_idle_ms, peer_max, peer_idle_ms, sessions_per_tenant, sessions_max;
} kl_conn_limits;

typedef struct kl_member {
    int id;
    char client_url[KL_URL_MAX];
    char peer_url[KL_URL_MAX];
    char data_dir[KL_PATH_MAX];      /* resolved, see above */
    /* "metrics": HOST:PORT of the member's Prometheus endpoint, "" = none; a host that is
     * not loopback needs "metrics_token_file" (common/metrics_http.h). */
    char metrics_addr[KL_URL_MAX];
    char metrics_token_file[KL_PATH_MAX];
    bool has_public_key;             /* the member's "public_key" was given */
    uint8_t public_key[KL_CLUSTER_PUBLIC_KEY_LEN];
} kl_member;

typedef struct kl_partition {
    int id;
    int member_count;
    kl_member members[KL_CLUSTER_MAX_MEMBERS];
} kl_partition;

typedef struct kl_cluster {
    char name[KL_NAME_MAX];
    int replica_count;
    kl_limits limits;
    kl_timers timers;
    kl_conn_limits conn;
    kl_snapshot_policy snapshot;
    bool insecure_local_admin;
    int partition_count;
    kl_partition partitions[KL_CLUSTER_MAX_PARTITIONS];
} kl_cluster;

void kl_limits_default(kl_limits *l);

/* Parses path into *out. Errors name the JSON field at fault. var_root is the folder
 * data directories default under (NULL: "var"). */
kl_code kl_cluster_load(const char *path, const char *var_root, kl_cluster *out, kl_err *err);
/* Same from a JSON text (tests). */
kl_code kl_cluster_parse(const char *json, const char *var_root, kl_cluster *out, kl_err *err);

/* Finds "p<P>m<M>"; NULL when absent. */
const kl_member *kl_cluster_find_node(const kl_cluster *c, const char *node, int *partition_id);
const kl_partition *kl_cluster_find_partition(const kl_cluster *c, int partition_id);

#endif
