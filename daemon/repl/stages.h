/* stages: where a replicated write's time goes, measured on the loop thread.
 *
 * Leader, per own proposal: propose -> its synced log write starts -> that write completes ->
 * the index commits (quorum acknowledged) -> it is applied (the node answers from the apply);
 * and, beside the write, propose -> the first append carrying it leaves -> commit: the
 * followers' path (transit, their writes, their acknowledgements). Whichever of "write" and
 * "replicate" is longer is the one the commit waited for.
 * Follower, per received entry: received -> its synced write starts -> that write completes
 * (the acknowledgement leaves right after). Each synced write (either role) is also split in
 * three: the hand-off to the thread-pool worker, the worker's RocksDB write and sync, and the
 * hand-off back to the loop; the sync alone is reported too, so what the disk costs shows
 * apart from what RocksDB's write costs. Stamps live in a ring keyed by index, so an
 * index older than the ring is simply not measured; samples are the last KL_STAGES_SAMPLES
 * deltas per stage. kl_stages_report logs p50/p99 per stage and resets; the driver calls it
 * every few seconds when there are new samples and at stop. Cost: a clock read per stage
 * per write plus one per entry (two more per write on the worker, kept in the job until its
 * completion reaches the loop), no allocation after init. */
#ifndef KL_REPL_STAGES_H
#define KL_REPL_STAGES_H

#include "common/metrics.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KL_STAGES_RING 8192
#define KL_STAGES_SAMPLES 16384

typedef enum kl_stage {
    KL_STAGE_PROPOSE = 0, /* leader: kl_repl_propose; follower: frame received */
    KL_STAGE_PERSIST_START = 1,
    KL_STAGE_PERSIST_DONE = 2,
    KL_STAGE_COMMIT = 3,  /* leader only: the driver saw commit >= index */
    KL_STAGE_APPLY = 4,   /* leader only */
    KL_STAGE_SENT = 5,    /* leader only: the first append carrying the index left */
    KL_STAGE_COUNT = 6,
} kl_stage;

/* Deltas reported (microseconds). */
typedef enum kl_stage_span {
    KL_SPAN_QUEUE = 0,   /* propose/receive -> write start: waiting behind another write */
    KL_SPAN_WRITE = 1,   /* write start -> done: the synced RocksDB write */
    KL_SPAN_QUORUM = 2,  /* write done -> commit: waiting for the other members */
    KL_SPAN_APPLY = 3,   /* commit -> applied */
    KL_SPAN_TOTAL = 4,   /* propose -> applied */
    KL_SPAN_F_QUEUE = 5, /* follower: received -> write start */
    KL_SPAN_F_WRITE = 6, /* follower: write start -> done (ack sent) */
    KL_SPAN_APPLY_CALL = 7, /* time inside the node's apply callback, per entry */
    KL_SPAN_SEND = 8,     /* leader: propose -> the first append carrying it left */
    KL_SPAN_REPLICATE = 9, /* leader: that append left -> commit */
    /* Per synced write (leader and follower), the three parts of "write"/"f_write": the hand-off
     * to the worker thread, the worker's RocksDB write and sync, the hand-off back to the loop. */
    KL_SPAN_W_HOP = 10,
    KL_SPAN_W_RUN = 11,
    KL_SPAN_W_BACK = 12,
    /* The sync inside w_run (kl_store_last_log_sync_ns): w_run - w_sync is RocksDB's write. */
    KL_SPAN_W_SYNC = 13,
    KL_SPAN_COUNT = 14,
} kl_stage_span;

typedef struct kl_stages kl_stages;

kl_stages *kl_stages_new(void);
void kl_stages_free(kl_stages *s);
uint64_t kl_stages_now(void); /* CLOCK_MONOTONIC, ns */
/* Stamps index with stage at now (ns). PROPOSE starts the index's record. */
void kl_stages_mark(kl_stages *s, uint64_t index, kl_stage stage, uint64_t now);
/* Stamps every index in [lo, hi] that already has a record and not yet this stage
 * (bounded by the ring). */
void kl_stages_mark_range(kl_stages *s, uint64_t lo, uint64_t hi, kl_stage stage, uint64_t now);
/* Leader: index applied; turns its record into samples. */
void kl_stages_applied(kl_stages *s, uint64_t index, uint64_t now);
/* Follower: index's write completed; turns its record into samples. */
void kl_stages_follower_done(kl_stages *s, uint64_t index, uint64_t now);
/* Adds one sample of span: to - from (ns), if both are set. */
void kl_stages_span(kl_stages *s, kl_stage_span span, uint64_t from, uint64_t to);
/* Logs and resets when there are samples; with force also when few. member names the log. */
void kl_stages_report(kl_stages *s, uint64_t member, bool force);
/* Prometheus histograms fed from the same stamps, never reset (ARCHITECTURE.md "Metrics"):
 * commit latency, leader only, propose -> commit, one observation per own entry; fsync
 * latency, one observation per synced log write (leader and follower), start -> done. */
void kl_stages_write_begin(kl_stages *s, uint64_t now);
void kl_stages_write_end(kl_stages *s, uint64_t now);
const kl_metrics_hist *kl_stages_commit_hist(const kl_stages *s);
const kl_metrics_hist *kl_stages_fsync_hist(const kl_stages *s);
/* For tests: the number of samples and the median of span (us), 0 if none. */
size_t kl_stages_count(const kl_stages *s, kl_stage_span span);
uint64_t kl_stages_median(const kl_stages *s, kl_stage_span span);

#endif
