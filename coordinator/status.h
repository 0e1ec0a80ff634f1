/* status: the coordinator's status snapshot (its "status view"), a JSON file written
 * atomically (temporary file of mode 0600 in the same folder, fsync, rename) every few
 * seconds and at exit, and printed by `keyload-coordinator --status`.
 *
 * Keys: version (1), written_unix_ms, started_unix_ms, pid, final (true in the snapshot
 * written at exit), discovery ("enabled" | "disabled: null principal"), config {cluster_file,
 * database, principal_id (null), flush_interval_ms, workers, buffer_capacity, discovery
 * {interval_ms, max_records, max_bytes, max_work}, call_timeout_ms} (no key file, no key),
 * pending {lanes[] ({source "queue/lane", partition, pending}), other_lanes, round_unix_ms}
 * (what the last discovery round saw), buffers[] ({worker, queued, in_flight, bytes,
 * capacity}), in_flight, counters {...kl_coord_stats...}, failed {count, latest[] (up to
 * 100, newest first: transfer_id, source, generation, step, code, detail, message,
 * unix_ms)}. Never a token, a key or a message body. */
#ifndef KL_COORD_STATUS_H
#define KL_COORD_STATUS_H

#include "coordinator/coord.h"

#include <stdbool.h>

#define KL_COORD_STATUS_EVERY_MS 2000
#define KL_COORD_STATUS_FAILED_MAX 100

/* The snapshot as a JSON text (malloc'd, free()); NULL when out of memory. */
char *kl_coord_status_json(kl_coord *co, bool final);
/* Writes the snapshot to co->cfg.status_file atomically. */
kl_code kl_coord_status_write(kl_coord *co, bool final, kl_err *err);
/* Prints the file at path to stdout. NOT_FOUND when there is none yet. */
kl_code kl_coord_status_print(const char *path, kl_err *err);

#endif
