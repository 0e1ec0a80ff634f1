/* coord: the KL-5 part of keyload-bench (tests/bench/coord.c): transfers created by a
 * client and driven to Delivered by a separate keyload-coordinator process.
 *
 *   keyload-bench --coord-create N --cluster FILE --principal ID --key FILE --database T/DB
 *                 --queue SOURCE --dest-queue DEST [--clients C] [--lane-every L]
 *                 [--lane-tag TAG] [--drain-seconds S] [--rate R] [--no-wait]
 *
 * C client threads create N transfers as fast as they can (SOURCE's lanes TAG-l0, TAG-l1,
 * ..., L transfers per lane, the same lane names at DEST; with --rate, R creates per second
 * in all instead, each on its schedule, so there is no backlog to wait behind; each lane retains its transfer
 * records forever, up to MaxScanRecords records and MaxBatchBytes bytes). The principal
 * must be the coordinator's: it drives only the intents its own principal created. Then,
 * unless --no-wait, the bench polls ListPendingQueueTransfers on SOURCE (one item per page,
 * every 50 ms, at most S seconds, default 120) until nothing is pending, and reads every
 * transfer once with InspectQueueTransfer. Its history gives the commit times (the source
 * leader's clock, in unix ms) of IntentCreated and ReceiptVerified: latency is their
 * difference, and the rate is the delivered transfers over the span from the first
 * IntentCreated to the last ReceiptVerified (the drain's wall time in commit time).
 *
 * Prints one "coord:" line (with --no-wait only the creation's figures). Exit 0 when the
 * run completed (errors are counted), 1 when it could not run, 2 on bad usage. */
#ifndef KL_BENCH_COORD_H
#define KL_BENCH_COORD_H

#include <stdbool.h>

typedef struct bench_coord_opts {
    const char *cluster_file;
    const char *principal;
    const char *key_file;
    const char *database;
    const char *queue;       /* source */
    const char *dest_queue;
    const char *lane_tag;    /* lane name prefix; NULL: "c<pid>" */
    long transfers;
    int clients;
    long lane_every;
    int body_size;
    int timeout_ms;
    double drain_s;
    double rate;             /* creates per second in all; 0: as fast as possible */
    bool no_wait;
} bench_coord_opts;

int bench_coord_run(const bench_coord_opts *o);

#endif
