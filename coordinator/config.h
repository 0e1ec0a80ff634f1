/* config: the keyload-coordinator's JSON configuration (ARCHITECTURE.md "Coordinator").
 *
 *   { "cluster_file": "var/local/cluster.json",         required
 *     "database": "TENANT/DB",                           required
 *     "transfer_coordinator_principal_id": "ops" | null, required key; null = no discovery
 *     "principal_key_file": "var/local/ops.key",         required unless the principal is null
 *     "flush_interval_ms": 10,         1..60000: a worker starts at most one turn per interval
 *     "workers": 256,                  turns in flight at most, 1..4096 (not threads)
 *     "buffer_capacity": 32,           events per worker buffer, 1..100000
 *     "call_threads": 64,              threads for armed failpoints only (tests), 1..1024
 *     "discovery": { "interval_ms": 500,        1..600000
 *                    "max_records": 64,         items per page, 1..1000
 *                    "max_bytes": 4194304,      intent-token bytes held per page, 1024..1 GiB
 *                    "max_work": 16 },          pages per round per partition, 1..100000
 *     "status_file": "...",            default <dir of cluster_file>/coordinator-<principal>.status.json
 *     "call_timeout_ms": 5000,         one SDK call, 100..600000
 *     "log_level": "info" }            "info": one line per delivered transfer and per
 *                                      retry, failure or cancel; "debug": also one per step
 *                                      (dispatched, accept_sent, accepted, receipt_read,
 *                                      complete_sent)
 *
 * Invariants after a successful parse: every number is inside its range; strings are
 * non-empty and fit their buffers; database is "TENANT/DB" with both parts non-empty;
 * has_principal false means the principal and key file are empty. Unknown keys and wrong
 * types are refused with the key named (err->detail is the key's path, e.g.
 * "discovery.max_records"). The principal is only selected: nothing here creates
 * credentials or grants. */
#ifndef KL_COORD_CONFIG_H
#define KL_COORD_CONFIG_H

#include "common/status.h"

#include <stdbool.h>
#include <stdint.h>

#define KL_COORD_PATH_MAX 512
#define KL_COORD_NAME_MAX 128

/* Sized so a default coordinator keeps up with a cluster's client-driven transfer rate:
 * a turn is 8 calls (6 fresh reads, 2 commits) made one after another, so a coordinator's
 * rate is the turns it keeps in flight over a turn's latency, and matching 32 clients that
 * make 4 calls per transfer takes several times their concurrency in turns. On an RF3
 * cluster sharing two cores (tests/bench/run.sh, BENCH_PARTS=xcoord, five runs each) 128
 * workers drove 0.59-0.93x the client-driven rate and 256 drove 0.79-0.86x; 512 added
 * nothing more, the cluster being busy. Idle workers cost nothing (no timer), and the
 * buffers hold 256 x 32 = 8192 events at most. */
#define KL_COORD_DEFAULT_FLUSH_MS 10
#define KL_COORD_DEFAULT_WORKERS 256
#define KL_COORD_WORKERS_MAX 4096
#define KL_COORD_DEFAULT_BUFFER 32
#define KL_COORD_DEFAULT_CALL_THREADS 64
#define KL_COORD_DEFAULT_DISCOVERY_MS 500
#define KL_COORD_DEFAULT_MAX_RECORDS 64
#define KL_COORD_DEFAULT_MAX_BYTES (4u << 20)
#define KL_COORD_DEFAULT_MAX_WORK 16
#define KL_COORD_DEFAULT_CALL_TIMEOUT_MS 5000

typedef struct kl_coord_config {
    char cluster_file[KL_COORD_PATH_MAX];
    char database[2 * KL_COORD_NAME_MAX + 2];   /* "TENANT/DB" as given */
    char tenant[KL_COORD_NAME_MAX + 1];         /* split from database */
    char db[KL_COORD_NAME_MAX + 1];
    bool has_principal;
    char principal_id[KL_COORD_NAME_MAX + 1];
    char principal_key_file[KL_COORD_PATH_MAX];
    uint32_t flush_interval_ms;
    uint32_t workers;
    uint32_t buffer_capacity;
    uint32_t discovery_interval_ms;
    uint32_t discovery_max_records;
    uint64_t discovery_max_bytes;
    uint32_t discovery_max_work;
    char status_file[KL_COORD_PATH_MAX];
    /* "metrics": HOST:PORT of the Prometheus endpoint ("" = none); a host that is not
     * loopback needs "metrics_token_file" (common/metrics_http.h). */
    char metrics_addr[KL_COORD_PATH_MAX];
    char metrics_token_file[KL_COORD_PATH_MAX];
    uint32_t call_timeout_ms;
    uint32_t call_threads;
    bool log_debug;   /* "log_level": "debug" */
} kl_coord_config;

/* Parses a configuration text. Pure (no file is opened): what the files hold is checked
 * when the process opens them. On error *out is unspecified. */
kl_code kl_coord_config_parse(const char *json_text, kl_coord_config *out, kl_err *err);
/* Reads path and parses it (errors name the file and the key). */
kl_code kl_coord_config_load(const char *path, kl_coord_config *out, kl_err *err);

#endif
