/* bench: keyload-bench's command line (bench_main.c parses it; its opening comment is the
 * reference of every mode) and the entry point of each mode, one file per mode:
 *   bench_enqueue.c    the enqueue benchmark (unsealed, or sealed with bench_sealed.c)
 *   bench_fsync.c      --fsync-probe
 *   bench_leader.c     --leader-of, --wait-caught-up
 *   bench_serve.c      --serve-probe
 *   bench_failover.c   --failover
 *   bench_handshake.c  --handshake
 *   bench_transfer.c   --transfer
 *   coord.c            --coord-create (coord.h)
 * What the modes share (clock, latencies, client threads, the members of a partition,
 * queue setup, /proc readings) is bench_fixture.h. Each entry point returns the process's
 * exit code: 0 the run completed, 1 it could not run. */
#ifndef KL_BENCH_H
#define KL_BENCH_H

#include "common/cluster.h"

#define BATCH_METHOD "keyload.v1.Batch"
#define STATS_METHOD "keyload.v1.QueueStats"
#define STATUS_METHOD "keyload.v1.MemberStatus"
#define HELLO_METHOD "keyload.v1.Hello"
#define CONNECT_TIMEOUT_MS 5000
#define MAX_URLS 8
#define URL_MAX 256
#define LEADER_WAIT_NS (60 * 1000000000LL)
#define FSYNC_COPIES_MAX 8   /* --fsync-copies: files synced at once, at most */

enum bench_mode { MODE_BENCH, MODE_FSYNC, MODE_LEADER, MODE_CAUGHT_UP, MODE_FAILOVER, MODE_HANDSHAKE, MODE_TRANSFER, MODE_COORD,
                  MODE_SERVE, MODE_FSYNC_COST, MODE_WAKE };

typedef struct bench_options {
    int mode;
    const char *url;         /* the first of urls */
    const char *urls[MAX_URLS];
    int n_urls;
    const char *pid_dir;     /* --failover */
    int run;                 /* --failover: run number, for the output line */
    int attempt_ms;          /* --failover: per-attempt timeout */
    const char *queue;
    const char *fsync_dir;
    int clients;
    int in_flight;           /* sealed bench: batches each client keeps outstanding (1: blocking) */
    int batch_size;
    double seconds;
    double warmup;
    long ops;                /* > 0: run until this many requests in all, no warm-up */
    int body_size;
    int timeout_ms;
    int samples;             /* fsync probe */
    int fsync_copies;        /* fsync probe: files appended and synced at once (1..FSYNC_COPIES_MAX) */
    int read;                /* QueueStats instead of Batch */
    int cycle;               /* each request: enqueue, then receive it and ack it (bench_cycle.c) */
    long long since_ms;      /* --serve-probe: CLOCK_REALTIME ms its times count from (0: its start) */
    int random_body;         /* each enqueued body new random bytes (incompressible state) */
    const char *cluster_file; /* sealed bench, --handshake: members and their public keys */
    const char *principal;   /* sealed bench, --handshake: act as this principal */
    const char *key_file;    /* its Ed25519 secret key */
    const char *database;    /* sealed bench: TENANT/DB of the queue */
    const char *node;        /* --handshake: pPmM (NULL: the first member of partition 0) */
    long handshakes;         /* --handshake: calls per phase */
    long pid;                /* --handshake: the member's pid */
    const char *dest_queue;  /* --transfer: the destination queue (queue is the source) */
    long lane_every;         /* --transfer: transfers per lane and client */
    long coord_transfers;    /* --coord-create: transfers to create */
    const char *lane_tag;    /* --coord-create: lane name prefix */
    double drain_s;          /* --coord-create: longest wait for the coordinator */
    int no_wait;             /* --coord-create: create only */
    double coord_rate;       /* --coord-create: creates per second (0: as fast as possible) */
    const char *lat_out;     /* bench, --transfer: every measured latency (us, one a line) */
    const char *trace_out;   /* --transfer --in-flight: "client trace" lines of sampled indexes */
    int trace_every;         /* with trace_out: batches committed at a multiple of this index */
    long cpu_pids[MAX_URLS]; /* bench: processes whose CPU is counted per acknowledged message */
    int n_cpu_pids;
} bench_options;


/* The cluster file of --cluster (large: loaded once by main). */
extern kl_cluster bench_cluster;

int bench_run_enqueue(const bench_options *o);
int bench_run_fsync(const bench_options *o);
int bench_run_fsync_cost(const bench_options *o);
int bench_run_wake(const bench_options *o);
int bench_run_leader_of(const bench_options *o);
int bench_run_wait_caught_up(const bench_options *o);
int bench_run_serve_probe(const bench_options *o);
int bench_run_failover(const bench_options *o);
int bench_run_handshake(const bench_options *o);
int bench_run_transfer(const bench_options *o);
/* --cycle: after an acknowledged enqueue into lane, receive one message of that lane and
 * acknowledge it on the same connection (so a run ends with an empty queue). */
struct kl_rpc_client;
kl_code bench_cycle_rest(struct kl_rpc_client *c, const bench_options *o, const char *queue, const char *lane,
                         kl_err *err);

#endif
