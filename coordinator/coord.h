/* coord: the keyload-coordinator's shared state (ARCHITECTURE.md "Coordinator"): configuration, cluster
 * file, the one kl_client every thread shares (it is thread-safe), one buffer per worker,
 * the failed table, counters, and the per-lane pending counts of the last discovery round.
 *
 * Lifetime: kl_coord_open builds everything (unwinding on failure); threads (discovery.h,
 * run.h, turn.h) borrow it; kl_coord_close frees it after every thread was joined. Nothing here
 * is persisted: everything is rebuilt by discovery after a restart.
 *
 * Threads: counters are atomics; the lane table has its own mutex; buffers and the failed
 * table lock themselves. `stopping` is set once by the main thread on SIGTERM/SIGINT. */
#ifndef KL_COORD_COORD_H
#define KL_COORD_COORD_H

#include "client/keyload.h"
#include "common/cluster.h"
#include "coordinator/buffer.h"
#include "coordinator/config.h"
#include "coordinator/failed.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Lanes the status view counts one by one; more are summed under "other". */
#define KL_COORD_LANES_MAX 256

typedef struct kl_coord_stats {
    atomic_uint_fast64_t rounds;            /* discovery rounds finished */
    atomic_uint_fast64_t listed;            /* pending items seen by discovery */
    atomic_uint_fast64_t skipped_foreign;   /* another principal's (or tenant's) intent */
    atomic_uint_fast64_t skipped_failed;    /* in the failed table */
    atomic_uint_fast64_t skipped_malformed; /* undecodable token or inconsistent item */
    atomic_uint_fast64_t dispatched;        /* added to a buffer */
    atomic_uint_fast64_t duplicates;        /* already buffered or in flight */
    atomic_uint_fast64_t buffer_full;       /* refused by a full buffer (page stopped) */
    atomic_uint_fast64_t list_errors;       /* failed ListPendingQueueTransfers pages */
    atomic_uint_fast64_t turns;             /* worker turns that handled a transfer */
    atomic_uint_fast64_t turns_in_flight;   /* turns begun and not yet finished */
    atomic_uint_fast64_t turns_in_flight_peak;
    atomic_uint_fast64_t accept_sent;
    atomic_uint_fast64_t accepted;
    atomic_uint_fast64_t accept_deduplicated;
    atomic_uint_fast64_t complete_sent;
    atomic_uint_fast64_t delivered;         /* this coordinator's Complete answered OK (or
                                             * `already`): per process, so two coordinators
                                             * racing over one transfer may both count it;
                                             * the source's state is the truth */
    atomic_uint_fast64_t found_delivered;   /* found Delivered (someone else completed it) */
    atomic_uint_fast64_t terminal_failures;
    atomic_uint_fast64_t terminal_by_code[KL_CODE_COUNT]; /* the same, by the failing call's code */
    atomic_uint_fast64_t retries;
    atomic_uint_fast64_t dropped;           /* intent gone (NOT_FOUND) */
    atomic_uint_fast64_t proof_changed;
    atomic_uint_fast64_t cancelled;         /* turns stopped between two calls by SIGTERM */
    atomic_uint_fast64_t failures_retained; /* turns that ended keeping a quota/permission
                                             * failure of an Accept (first one and waits) */
    atomic_uint_fast64_t failure_reads;     /* ReadQueueTransferFailure calls answered */
    atomic_uint_fast64_t witnesses;         /* of which issued a failure witness */
    atomic_uint_fast64_t advanced;          /* Advance (attempt or repair) committed */
} kl_coord_stats;

typedef struct kl_coord_lane_count {
    char source[2 * 129 + 1]; /* "queue/lane" */
    int32_t partition;
    uint64_t pending;
} kl_coord_lane_count;

typedef struct kl_coord {
    kl_coord_config cfg;
    kl_cluster *cluster;
    kl_client *client;             /* NULL without a principal (no discovery) */
    kl_coord_buffer **buffers;     /* cfg.workers, NULL without a principal */
    kl_coord_failed *failed;
    kl_coord_stats stats;
    atomic_bool stopping;
    int64_t started_unix_ms;
    /* Called (from discovery's thread) after events were added to the buffers, so idle
     * workers start at once instead of polling. NULL: nobody listens. */
    void (*wake)(void *arg);
    void *wake_arg;

    pthread_mutex_t lanes_mu;      /* guards the four below */
    kl_coord_lane_count lanes[KL_COORD_LANES_MAX];
    size_t n_lanes;
    uint64_t other_lanes_pending;
    int64_t lanes_unix_ms;         /* when the last round that published them ended */
} kl_coord;

/* Loads the cluster file, opens the client as the principal (when there is one) and builds
 * the buffers and the failed table. *out belongs to the caller (kl_coord_close). */
kl_code kl_coord_open(const kl_coord_config *cfg, kl_coord **out, kl_err *err);
/* Frees everything; no thread may still use co. NULL is accepted. */
void kl_coord_close(kl_coord *co);

/* Replaces the lane table with a round's counts. */
void kl_coord_publish_lanes(kl_coord *co, const kl_coord_lane_count *lanes, size_t n,
                            uint64_t other);

/* The worker that owns a transfer identity: key % workers. */
uint32_t kl_coord_worker_of(const kl_coord *co, const uint8_t key[KL_COORD_KEY_LEN]);

/* Monotonic milliseconds (scheduling) and wall-clock unix milliseconds (reports). */
int64_t kl_coord_now_ms(void);
int64_t kl_coord_unix_ms(void);

#endif
