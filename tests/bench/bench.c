/* keyload-bench: closed-loop enqueue benchmark against one keyloadd, and a disk fsync probe.
 *
 *   keyload-bench --fsync-probe DIR [--samples N]
 *       Appends 4 KiB to a scratch file in DIR and fdatasync()s it, N times (default 200);
 *       prints median and p99 in microseconds. This is the floor of a durable write on
 *       that disk: a single-client enqueue cannot answer faster than one synced append.
 *
 *   keyload-bench [--url URL] [--clients N] [--batch-size B] [--seconds S | --ops N]
 *                 [--body-size BYTES] [--queue NAME] [--warmup S] [--timeout-ms MS] [--read]
 *       Creates queue NAME (default "bench") if missing, then runs N client threads, each
 *       with its own kl_rpc_client, each sending keyload.v1.Batch requests of B Enqueue
 *       mutations (body BYTES, default 100) with fresh random command ids, one request at
 *       a time (closed loop), for S seconds after a short warm-up (or until N requests in
 *       all have been answered). Prints one line of key=value results: clients, batch size,
 *       batches/s, messages/s, p50/p99/max latency in microseconds, errors.
 *       With --read the clients send keyload.v1.QueueStats reads instead (no log append,
 *       no fsync): the RPC and executor floor that every write pays on top of its fsync.
 *
 *       --url may list several members of one partition (URL,URL,URL): the bench then asks
 *       each for keyload.v1.MemberStatus, waits (up to 60 s) until one leads and serves, and
 *       sends everything there; a client answered NOT_LEADER with a hint follows it.
 *
 *   keyload-bench --leader-of URL,URL,...
 *       Waits (up to 60 s) for a serving leader among the members; prints
 *       "leader: node=pPmM member=M url=URL term=T".
 *
 *   keyload-bench --wait-caught-up URL,URL,...
 *       Waits (up to 60 s) until every member answers MemberStatus, one of them leads and
 *       serves, and every member has applied the leader's commit index (a restarted member
 *       has caught up). Prints "caughtup: ms=... commit_index=...".
 *
 *   keyload-bench --cluster FILE --principal ID --key FILE [--database TENANT/DB] [--queue NAME]
 *                 [--clients N] [--batch-size B] [--seconds S] ...
 *       The enqueue benchmark as a principal through the SDK (KL-3): every request sealed
 *       under a session (kl_client_open_principal, one kl_client and so one session per
 *       member per client thread). The queue must exist and the principal must be allowed to
 *       publish to it (run.sh sets that up with the CLI); nothing is created here. The
 *       members come from the cluster file's partition 0. Each client sends one batch before
 *       the clock starts (Hello, LocateQueue); then the leader's keyload.v1.MemberStatus is
 *       read before and after the run and the line adds the deltas of its cost counters
 *       (sealed_requests, session_ns, authz_requests, authz_ns, hellos, hello_ns: loop-thread
 *       time) and the session + authorization time per sealed request, in microseconds and
 *       as a share of the median request time.
 *
 *   keyload-bench --handshake N --cluster FILE --principal ID --key FILE --pid PID [--node pPmM]
 *       Daemon CPU per keyload.v1.Hello (KL-3) against one member (default: the first of
 *       partition 0) whose process is PID. One connection, one call at a time: N
 *       MemberStatus calls, N Hellos (each a fresh handshake, its answer verified with the
 *       member's public key from the cluster file), N MemberStatus calls again. For each
 *       phase the daemon's CPU time is read before and after from /proc/PID/stat
 *       (utime+stime, clock ticks) and from each /proc/PID/task/TID/schedstat (nanoseconds); the
 *       CPU per Hello is the Hello phase's per call minus the MemberStatus phases' (the cost
 *       of any RPC on nng). Also reports hello_ns/hellos from MemberStatus (loop thread).
 *       Prints one "handshake:" line.
 *
 *   keyload-bench --failover --url URL,URL,URL --pid-dir DIR [--run N] [--attempt-ms MS]
 *       One failover measurement. A writer thread sends single-message Batch requests one
 *       after another; each is retried with the same command id (same bytes) until
 *       acknowledged: a NOT_LEADER hint is followed, UNKNOWN_WRITE_OUTCOME or no answer
 *       within MS (default 500) moves on to the next member, a member that cannot be
 *       reached is redialed (a dead one refuses at once). Once the writer has been acked
 *       for a second, the bench finds the leader (MemberStatus), reads its pid from
 *       DIR/pPmM.pid, notes the monotonic time and kill -9s it, then waits for the first
 *       write acknowledged by another member. Prints one "failover:" line: failover_ms
 *       (kill to that ack), elected_ms (kill to a survivor reporting itself a serving
 *       leader), the killed and the new leader's node names, and what the writer saw.
 *       The caller restarts the killed member.
 *
 *   keyload-bench --transfer --cluster FILE --principal ID --key FILE --database TENANT/DB
 *                 --queue SOURCE --dest-queue DEST [--clients N] [--seconds S] [--lane-every N]
 *       Remote transfers end to end (KL-4) as a principal through the SDK, every request
 *       sealed: each client thread runs, one transfer at a time, CreateQueueTransfer on
 *       SOURCE's partition, AcceptQueueTransfer of its intent token on DEST's, the fresh
 *       InspectQueueTransferReceipt read of the receipt token, CompleteQueueTransfer on
 *       SOURCE's (which must answer Delivered). Latency is Create sent to Delivered
 *       answered. The principal must be a persisted administrator with QueuePublish and
 *       QueueInspect on both queues. Each lane retains at most MaxScanRecords transfer
 *       records and MaxBatchBytes bytes forever, so a client moves to a fresh lane (named
 *       after it, the same on both sides) every N transfers (default 200). Each client
 *       completes one transfer before the clock starts (Hello with every leader, LocateQueue).
 *       Prints one "transfer:" line: transfers/s, p50/p99/max latency in microseconds,
 *       errors (a transfer with any failed step counts once and is abandoned, pending).
 *
 *   keyload-bench --coord-create N --cluster FILE --principal ID --key FILE --database TENANT/DB
 *                 --queue SOURCE --dest-queue DEST [--clients C] [--lane-every L] [--lane-tag TAG]
 *                 [--drain-seconds S] [--rate R] [--no-wait]
 *       Coordinator-driven transfers (KL-5): C clients create N transfers while a separate
 *       keyload-coordinator drives them; the bench waits until SOURCE has nothing pending
 *       and derives rate and latency from each transfer's commit history (coord.h). Prints
 *       one "coord:" line.
 *
 *   Common to the bench and --transfer: --lat-out FILE writes every measured latency there
 *   (microseconds, ascending, one a line; what tests/bench/run.sh plots). The bench also takes
 *   --cpu-pids PID,PID,...: the user+sys CPU time of those processes (/proc/PID/stat) from
 *   the end of the warm-up to the end of the run, divided by the messages acknowledged in
 *   that window, is added as cpu_us_per_msg (the members' cost per message).
 *
 * Output lines start with "fsync:", "bench:", "leader:", "caughtup:", "failover:", "transfer:" or "coord:" so
 * scripts can pick them out. Exit code 0 when the run completed (errors are counted and
 * reported, not fatal), 1 when it could not run at all (cannot connect, cannot create the
 * queue, no leader, no ack after a kill within 60 s), 2 on bad usage. */
#include "client/keyload.h"
#include "common/cluster.h"
#include "tests/bench/coord.h"
#include "common/guid.h"
#include "common/keys.h"
#include "common/rpc.h"
#include "common/session.h"
#include "common/status.h"
#include "keyload/v1/catalog.pb-c.h"
#include "keyload/v1/queue.pb-c.h"
#include "keyload/v1/session.pb-c.h"

#include <dirent.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BATCH_METHOD "keyload.v1.Batch"
#define STATS_METHOD "keyload.v1.QueueStats"
#define STATUS_METHOD "keyload.v1.MemberStatus"
#define HELLO_METHOD "keyload.v1.Hello"
#define CONNECT_TIMEOUT_MS 5000
#define MAX_URLS 8
#define URL_MAX 256
#define LEADER_WAIT_NS (60 * 1000000000LL)

enum mode { MODE_BENCH, MODE_FSYNC, MODE_LEADER, MODE_CAUGHT_UP, MODE_FAILOVER, MODE_HANDSHAKE, MODE_TRANSFER, MODE_COORD };

typedef struct options {
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
    int batch_size;
    double seconds;
    double warmup;
    long ops;                /* > 0: run until this many requests in all, no warm-up */
    int body_size;
    int timeout_ms;
    int samples;             /* fsync probe */
    int read;                /* QueueStats instead of Batch */
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
    long cpu_pids[MAX_URLS]; /* bench: processes whose CPU is counted per acknowledged message */
    int n_cpu_pids;
} options;

/* The cluster file of --cluster (large: a static, loaded once by main). */
static kl_cluster g_cluster;

typedef struct lat_vec {
    uint64_t *v;             /* nanoseconds */
    size_t n, cap;
} lat_vec;

typedef struct client_state {
    pthread_t thread;
    int id;
    const options *opt;
    char url[URL_MAX];       /* where this client sends; follows NOT_LEADER hints */
    lat_vec lat;
    uint64_t ok;             /* measured, answered OK */
    uint64_t errors;         /* measured, answered with an error */
    uint64_t total;          /* every request sent, warm-up included */
    kl_code first_err;
    char first_err_msg[KL_ERR_MESSAGE_MAX + KL_ERR_DETAIL_MAX + 8];
    int open_failed;
    kl_client *sdk;          /* sealed bench: this thread's client (its own sessions) */
} client_state;

static atomic_int g_go;               /* start barrier */
static atomic_int g_stop;
static _Atomic int64_t g_measure_from; /* monotonic ns; requests started earlier are warm-up */
static _Atomic int64_t g_measure_to;   /* monotonic ns; 0 = open */
static atomic_long g_ops_left;
static atomic_int g_primed;           /* sealed bench: clients done with their first batch */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_ns(int64_t ns)
{
    struct timespec ts = {.tv_sec = ns / 1000000000LL, .tv_nsec = ns % 1000000000LL};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int lat_push(lat_vec *l, uint64_t ns)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4096;
        uint64_t *nv = realloc(l->v, cap * sizeof *nv);
        if (nv == NULL)
            return -1;
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = ns;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of a sorted array. */
static uint64_t pct(const uint64_t *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t rank = (size_t)(p / 100.0 * (double)n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return v[rank - 1];
}

/* ---- fsync probe ---- */

static int fsync_probe(const options *o)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/keyload-fsync-probe.XXXXXX", o->fsync_dir);
    int fd = mkstemp(path);
    if (fd < 0) {
        fprintf(stderr, "keyload-bench: cannot create a file in %s: %s\n", o->fsync_dir, strerror(errno));
        return 1;
    }
    unlink(path); /* the file lives until closed; nothing to clean up on a crash */
    uint8_t block[4096];
    randombytes_buf(block, sizeof block);
    uint64_t *s = calloc((size_t)o->samples, sizeof *s);
    if (s == NULL) {
        close(fd);
        return 1;
    }
    for (int i = 0; i < o->samples; i++) {
        int64_t t0 = now_ns();
        if (write(fd, block, sizeof block) != (ssize_t)sizeof block || fdatasync(fd) != 0) {
            fprintf(stderr, "keyload-bench: write/fdatasync in %s failed: %s\n", o->fsync_dir,
                    strerror(errno));
            close(fd);
            free(s);
            return 1;
        }
        s[i] = (uint64_t)(now_ns() - t0);
    }
    close(fd);
    double sum = 0;
    for (int i = 0; i < o->samples; i++)
        sum += (double)s[i];
    qsort(s, (size_t)o->samples, sizeof *s, cmp_u64);
    printf("fsync: dir=%s samples=%d write=4096 median_us=%.1f p99_us=%.1f mean_us=%.1f max_us=%.1f\n",
           o->fsync_dir, o->samples, pct(s, (size_t)o->samples, 50) / 1e3,
           pct(s, (size_t)o->samples, 99) / 1e3, sum / o->samples / 1e3, s[o->samples - 1] / 1e3);
    free(s);
    return 0;
}

/* ---- requests ---- */

static void lane_ref(Keyload__V1__QueueLaneRef *r, const char *queue)
{
    keyload__v1__queue_lane_ref__init(r);
    r->tenant = "default";
    r->database = "default";
    r->queue = (char *)queue;
}

/* Packs b into *buf (grown as needed); returns the length or 0 on OOM. */
static size_t pack_batch(const Keyload__V1__BatchRequest *b, uint8_t **buf, size_t *cap)
{
    size_t n = keyload__v1__batch_request__get_packed_size(b);
    if (n > *cap) {
        uint8_t *nb = realloc(*buf, n);
        if (nb == NULL)
            return 0;
        *buf = nb;
        *cap = n;
    }
    return keyload__v1__batch_request__pack(b, *buf);
}

/* ---- members of one partition: connections and MemberStatus ---- */

typedef struct member_set {
    int n;
    const char *url[MAX_URLS];
    kl_rpc_client *conn[MAX_URLS];
    uint64_t member[MAX_URLS];   /* member id learned from MemberStatus; 0 = not yet */
    int partition;
} member_set;

static void ms_init(member_set *s, const options *o)
{
    memset(s, 0, sizeof *s);
    s->n = o->n_urls;
    for (int i = 0; i < o->n_urls; i++)
        s->url[i] = o->urls[i];
}

/* The connection to member i, dialed when missing; NULL (err set) when it cannot be dialed.
 * A dead member refuses the dial at once, so a dropped connection costs nothing to retry. */
static kl_rpc_client *ms_conn(member_set *s, int i, int connect_ms, kl_err *err)
{
    if (s->conn[i] == NULL && kl_rpc_client_open(s->url[i], connect_ms, 0, &s->conn[i], err) != KL_OK)
        s->conn[i] = NULL;
    return s->conn[i];
}

/* Forgets member i's connection: an nng REQ socket whose peer died would hold the next
 * request until its timeout waiting for a reconnect. */
static void ms_drop(member_set *s, int i)
{
    if (s->conn[i] != NULL)
        kl_rpc_client_close(s->conn[i]);
    s->conn[i] = NULL;
}

static void ms_close(member_set *s)
{
    for (int i = 0; i < s->n; i++)
        ms_drop(s, i);
}

static int ms_index(const member_set *s, const char *url)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->url[i], url) == 0)
            return i;
    return -1;
}

static const char *ms_node(const member_set *s, int i, char *buf, size_t cap)
{
    if (i < 0 || s->member[i] == 0)
        snprintf(buf, cap, "?");
    else
        snprintf(buf, cap, "p%dm%llu", s->partition, (unsigned long long)s->member[i]);
    return buf;
}

/* keyload.v1.MemberStatus of member i; *out belongs to the caller. */
static kl_code ms_status(member_set *s, int i, int timeout_ms, Keyload__V1__MemberStatusAnswer **out,
                         kl_err *err)
{
    *out = NULL;
    kl_rpc_client *c = ms_conn(s, i, timeout_ms, err);
    if (c == NULL)
        return err->code;
    Keyload__V1__MemberStatusRequest req = KEYLOAD__V1__MEMBER_STATUS_REQUEST__INIT;
    uint8_t buf[16];
    size_t len = keyload__v1__member_status_request__pack(&req, buf);
    uint8_t *ans = NULL;
    size_t alen = 0;
    kl_code rc = kl_rpc_invoke(c, STATUS_METHOD, buf, len, timeout_ms, &ans, &alen, NULL, 0, err);
    if (rc == KL_OK) {
        *out = keyload__v1__member_status_answer__unpack(NULL, alen, ans);
        if (*out == NULL) {
            rc = kl_fail(err, KL_INTERNAL, "answer", "MemberStatus answer from %s does not decode",
                         s->url[i]);
        } else {
            s->member[i] = (*out)->member;
            s->partition = (*out)->partition;
        }
    } else if (rc == KL_UNAVAILABLE || rc == KL_DEADLINE_EXCEEDED) {
        ms_drop(s, i);
    }
    free(ans);
    return rc;
}

static bool is_serving_leader(const Keyload__V1__MemberStatusAnswer *a)
{
    return a != NULL && strcmp(a->role, "leader") == 0 && a->serving;
}

/* Polls the members (skipping `skip`, -1 for none) until one says it leads and serves, or
 * until deadline (monotonic ns). Returns its index and, when out is not NULL, its status
 * (caller frees); -1 at the deadline. */
static int ms_find_leader(member_set *s, int skip, int64_t deadline, Keyload__V1__MemberStatusAnswer **out)
{
    if (out != NULL)
        *out = NULL;
    for (;;) {
        for (int i = 0; i < s->n; i++) {
            if (i == skip)
                continue;
            kl_err err;
            kl_err_clear(&err);
            Keyload__V1__MemberStatusAnswer *a;
            if (ms_status(s, i, 500, &a, &err) != KL_OK)
                continue;
            bool leads = is_serving_leader(a);
            if (leads && out != NULL)
                *out = a;
            else
                keyload__v1__member_status_answer__free_unpacked(a, NULL);
            if (leads)
                return i;
        }
        if (now_ns() > deadline)
            return -1;
        sleep_ns(20000000LL);
    }
}

/* ms_find_leader over every member for up to LEADER_WAIT_NS; on failure says so and
 * closes the set. */
static int ms_wait_leader(member_set *s, Keyload__V1__MemberStatusAnswer **out)
{
    int li = ms_find_leader(s, -1, now_ns() + LEADER_WAIT_NS, out);
    if (li < 0) {
        fprintf(stderr, "keyload-bench: no member became a serving leader within 60 s\n");
        ms_close(s);
    }
    return li;
}

/* ---- queue setup ---- */

/* Sends a one-mutation batch to *target (a NOT_LEADER hint is followed and *target updated)
 * until it gets a definitive answer; a CONFLICT with detail exists_detail means "already
 * there" and counts as success. A daemon that just started may not lead yet: retries go on
 * for up to 20 s. Every retry sends the same bytes (same command id), so an earlier attempt
 * that did commit is answered with its receipt, never executed twice. 0 or -1. */
static int setup_mutation(const options *o, char *target, size_t target_cap, Keyload__V1__Mutation *m,
                          const char *exists_detail, const char *what)
{
    kl_err err;
    kl_err_clear(&err);
    kl_rpc_client *c = NULL;
    Keyload__V1__Mutation *ms[] = {m};
    uint8_t id[KL_GUID_LEN];
    kl_guid_random(id);
    Keyload__V1__BatchRequest b = KEYLOAD__V1__BATCH_REQUEST__INIT;
    b.command_id.data = id;
    b.command_id.len = sizeof id;
    b.mutations = ms;
    b.n_mutations = 1;
    uint8_t *buf = NULL, *ans = NULL;
    size_t cap = 0, alen = 0;
    size_t len = pack_batch(&b, &buf, &cap);
    int rv = -1;
    kl_code rc = KL_UNAVAILABLE;
    for (int attempt = 0; attempt <= 200; attempt++) {
        free(ans);
        ans = NULL;
        kl_err_clear(&err);
        if (c == NULL && kl_rpc_client_open(target, CONNECT_TIMEOUT_MS, 0, &c, &err) != KL_OK) {
            c = NULL;
            rc = err.code;
        } else {
            char leader[URL_MAX] = "";
            rc = kl_rpc_invoke(c, BATCH_METHOD, buf, len, o->timeout_ms, &ans, &alen, leader,
                               sizeof leader, &err);
            if (rc == KL_NOT_LEADER && leader[0] != '\0' && strcmp(leader, target) != 0) {
                snprintf(target, target_cap, "%s", leader);
                kl_rpc_client_close(c);
                c = NULL;
                continue;
            }
        }
        bool retry = rc == KL_NOT_LEADER || rc == KL_UNAVAILABLE || rc == KL_UNKNOWN_WRITE_OUTCOME ||
                     (rc == KL_DEADLINE_EXCEEDED && strcmp(err.detail, "no_answer") == 0);
        if (!retry)
            break;
        usleep(100000);
    }
    if (rc == KL_OK) {
        fprintf(stderr, "keyload-bench: created %s\n", what);
        rv = 0;
    } else if (rc == KL_CONFLICT && strcmp(err.detail, exists_detail) == 0) {
        rv = 0;
    } else {
        fprintf(stderr, "keyload-bench: creating %s at %s failed: %s (%s) %s\n", what, target,
                kl_code_name(rc), err.detail, err.message);
    }
    free(ans);
    free(buf);
    if (c != NULL)
        kl_rpc_client_close(c);
    return rv;
}

/* Everything the benchmark needs before it measures, kept in one place because the catalog
 * is still changing: the database default/default (a catalog mutation on partition 0),
 * then queue o->queue pinned to partition 0 (every bench cluster is partition 0 only).
 * Existing ones are fine. Returns 0 or -1 (reason on stderr). */
static int bench_setup_queue(const options *o, const char *url)
{
    char target[URL_MAX], what[200];
    snprintf(target, sizeof target, "%s", url);

    Keyload__V1__CreateDatabase cd = KEYLOAD__V1__CREATE_DATABASE__INIT;
    cd.tenant = "default";
    cd.database = "default";
    Keyload__V1__Mutation md = KEYLOAD__V1__MUTATION__INIT;
    md.kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_DATABASE;
    md.create_database = &cd;
    if (setup_mutation(o, target, sizeof target, &md, "database_exists", "database default/default") != 0)
        return -1;

    Keyload__V1__QueueLaneRef q;
    lane_ref(&q, o->queue);
    Keyload__V1__QueueLimits lim = KEYLOAD__V1__QUEUE_LIMITS__INIT;
    lim.max_messages = 100000000ULL;
    lim.max_bytes = 100ULL << 30;
    Keyload__V1__CreateQueue cq = KEYLOAD__V1__CREATE_QUEUE__INIT;
    cq.queue = &q;
    cq.limits = &lim;
    cq.partition = 0;
    Keyload__V1__Mutation mq = KEYLOAD__V1__MUTATION__INIT;
    mq.kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE;
    mq.create_queue = &cq;
    snprintf(what, sizeof what, "queue %s", o->queue);
    return setup_mutation(o, target, sizeof target, &mq, "queue_exists", what);
}

static void *client_main(void *arg)
{
    client_state *cs = arg;
    const options *o = cs->opt;
    kl_err err;
    kl_err_clear(&err);
    kl_rpc_client *c;
    if (kl_rpc_client_open(cs->url, CONNECT_TIMEOUT_MS, 0, &c, &err) != KL_OK) {
        snprintf(cs->first_err_msg, sizeof cs->first_err_msg, "connect: %s", err.message);
        cs->first_err = err.code;
        cs->open_failed = 1;
        return NULL;
    }

    uint8_t *buf = NULL;
    size_t cap = 0;
    /* One request template: B enqueues of the same body; only the command id changes. */
    uint8_t *body = malloc((size_t)o->body_size + 1);
    Keyload__V1__Mutation *muts = calloc((size_t)o->batch_size, sizeof *muts);
    Keyload__V1__Mutation **mptr = calloc((size_t)o->batch_size, sizeof *mptr);
    if (body == NULL || muts == NULL || mptr == NULL) {
        snprintf(cs->first_err_msg, sizeof cs->first_err_msg, "out of memory");
        cs->open_failed = 1;
        goto out;
    }
    for (int i = 0; i < o->body_size; i++)
        body[i] = (uint8_t)('a' + (i + cs->id) % 26);
    Keyload__V1__QueueLaneRef lane;
    lane_ref(&lane, o->queue);
    Keyload__V1__EnqueueMessage msg = KEYLOAD__V1__ENQUEUE_MESSAGE__INIT;
    msg.body.data = body;
    msg.body.len = (size_t)o->body_size;
    Keyload__V1__Enqueue enq = KEYLOAD__V1__ENQUEUE__INIT;
    enq.lane = &lane;
    enq.message = &msg;
    for (int i = 0; i < o->batch_size; i++) {
        keyload__v1__mutation__init(&muts[i]);
        muts[i].kind_case = KEYLOAD__V1__MUTATION__KIND_ENQUEUE;
        muts[i].enqueue = &enq;
        mptr[i] = &muts[i];
    }
    uint8_t id[KL_GUID_LEN];
    Keyload__V1__BatchRequest b = KEYLOAD__V1__BATCH_REQUEST__INIT;
    b.command_id.data = id;
    b.command_id.len = sizeof id;
    b.mutations = mptr;
    b.n_mutations = (size_t)o->batch_size;
    const char *method = BATCH_METHOD;
    size_t stats_len = 0;
    if (o->read) {
        Keyload__V1__QueueStatsRequest sr = KEYLOAD__V1__QUEUE_STATS_REQUEST__INIT;
        sr.queue = &lane;
        stats_len = keyload__v1__queue_stats_request__get_packed_size(&sr);
        buf = malloc(stats_len ? stats_len : 1);
        if (buf == NULL) {
            snprintf(cs->first_err_msg, sizeof cs->first_err_msg, "out of memory");
            cs->open_failed = 1;
            goto out;
        }
        keyload__v1__queue_stats_request__pack(&sr, buf);
        method = STATS_METHOD;
    }

    while (!atomic_load(&g_go))
        sleep_ns(100000);
    while (!atomic_load(&g_stop)) {
        if (o->ops > 0 && atomic_fetch_sub(&g_ops_left, 1) <= 0)
            break;
        size_t len = stats_len;
        if (!o->read) {
            kl_guid_random(id);
            len = pack_batch(&b, &buf, &cap);
        }
        uint8_t *ans = NULL;
        size_t alen = 0;
        kl_err_clear(&err);
        char leader[URL_MAX] = "";
        int64_t t0 = now_ns();
        kl_code rc = kl_rpc_invoke(c, method, buf, len, o->timeout_ms, &ans, &alen, leader,
                                   sizeof leader, &err);
        int64_t t1 = now_ns();
        cs->total++;
        if (rc == KL_OK && !o->read) {
            /* A receipt must carry one result per mutation. */
            Keyload__V1__BatchReceipt *r = keyload__v1__batch_receipt__unpack(NULL, alen, ans);
            if (r == NULL || r->n_results != (size_t)o->batch_size) {
                rc = kl_fail(&err, KL_INTERNAL, "receipt", "receipt %s (%zu results for %d mutations)",
                             r ? "is short" : "does not decode", r ? r->n_results : 0, o->batch_size);
            }
            if (r != NULL)
                keyload__v1__batch_receipt__free_unpacked(r, NULL);
        }
        free(ans);
        int64_t to = atomic_load(&g_measure_to);
        bool measured = t0 >= atomic_load(&g_measure_from) && (to == 0 || t1 <= to);
        if (rc != KL_OK) {
            if (cs->first_err == KL_OK) {
                cs->first_err = rc;
                snprintf(cs->first_err_msg, sizeof cs->first_err_msg, "%s (%s) %s", kl_code_name(rc),
                         err.detail, err.message);
            }
            if (measured)
                cs->errors++;
            if (rc == KL_UNAVAILABLE || rc == KL_RESOURCE_EXHAUSTED || rc == KL_NOT_LEADER)
                sleep_ns(1000000); /* back off instead of spinning on a refusing server */
            if (rc == KL_NOT_LEADER && leader[0] != '\0' && strcmp(leader, cs->url) != 0) {
                /* Leadership moved (only with several members): follow the hint. */
                kl_rpc_client *nc;
                if (kl_rpc_client_open(leader, CONNECT_TIMEOUT_MS, 0, &nc, &err) == KL_OK) {
                    kl_rpc_client_close(c);
                    c = nc;
                    snprintf(cs->url, sizeof cs->url, "%s", leader);
                }
            }
            continue;
        }
        if (measured) {
            cs->ok++;
            if (lat_push(&cs->lat, (uint64_t)(t1 - t0)) != 0) {
                snprintf(cs->first_err_msg, sizeof cs->first_err_msg, "out of memory for latencies");
                break;
            }
        }
    }
out:
    free(buf);
    free(mptr);
    free(muts);
    free(body);
    kl_rpc_client_close(c);
    return NULL;
}

/* ---- sealed bench (KL-3): the enqueue workload as a principal through the SDK ---- */

/* One batch of o->batch_size enqueues of msg under a fresh command id. */
static kl_code sealed_make_batch(const options *o, const kl_message *msg, kl_batch **out, kl_err *err)
{
    kl_code rc = kl_batch_new(NULL, out, err);
    for (int i = 0; rc == KL_OK && i < o->batch_size; i++)
        rc = kl_batch_enqueue(*out, o->queue, NULL, msg, err);
    if (rc != KL_OK) {
        kl_batch_free(*out);
        *out = NULL;
    }
    return rc;
}

/* kl_client_batch of b; a receipt must carry one result per mutation. */
static kl_code sealed_send(kl_client *c, const options *o, const kl_batch *b, kl_err *err)
{
    kl_receipt *r = NULL;
    kl_code rc = kl_client_batch(c, b, &r, err);
    if (rc == KL_OK && r->decoded->n_results != (size_t)o->batch_size)
        rc = kl_fail(err, KL_INTERNAL, "receipt", "receipt is short (%zu results for %d mutations)",
                     r->decoded->n_results, o->batch_size);
    kl_receipt_free(r);
    return rc;
}

static void cs_first_err(client_state *cs, kl_code rc, const kl_err *err)
{
    if (cs->first_err != KL_OK)
        return;
    cs->first_err = rc;
    snprintf(cs->first_err_msg, sizeof cs->first_err_msg, "%s (%s) %s", kl_code_name(rc), err->detail,
             err->message);
}

static void *sealed_client_main(void *arg)
{
    client_state *cs = arg;
    const options *o = cs->opt;
    kl_err err;
    kl_err_clear(&err);
    kl_message *msg = NULL;
    kl_batch *b = NULL;
    uint8_t *body = malloc((size_t)o->body_size + 1);
    kl_code rc = body == NULL ? kl_fail(&err, KL_INTERNAL, "memory", "out of memory") : KL_OK;
    for (int i = 0; body != NULL && i < o->body_size; i++)
        body[i] = (uint8_t)('a' + (i + cs->id) % 26);
    if (rc == KL_OK)
        rc = kl_message_new(body, (size_t)o->body_size, &msg, &err);
    if (rc == KL_OK)
        rc = kl_client_open_principal(o->cluster_file, o->database, o->timeout_ms, o->principal,
                                      o->key_file, &cs->sdk, &err);
    /* The first batch before the clock: Hello with the leader, LocateQueue. */
    if (rc == KL_OK)
        rc = sealed_make_batch(o, msg, &b, &err);
    if (rc == KL_OK)
        rc = sealed_send(cs->sdk, o, b, &err);
    kl_batch_free(b);
    b = NULL;
    if (rc != KL_OK) {
        cs_first_err(cs, rc, &err);
        cs->open_failed = 1;
    }
    atomic_fetch_add(&g_primed, 1);
    if (rc != KL_OK)
        goto out;
    while (!atomic_load(&g_go))
        sleep_ns(100000);
    while (!atomic_load(&g_stop)) {
        if (o->ops > 0 && atomic_fetch_sub(&g_ops_left, 1) <= 0)
            break;
        kl_err_clear(&err);
        if ((rc = sealed_make_batch(o, msg, &b, &err)) != KL_OK) {
            cs_first_err(cs, rc, &err);
            break;
        }
        int64_t t0 = now_ns();
        rc = sealed_send(cs->sdk, o, b, &err);
        int64_t t1 = now_ns();
        kl_batch_free(b);
        b = NULL;
        cs->total++;
        int64_t to = atomic_load(&g_measure_to);
        bool measured = t0 >= atomic_load(&g_measure_from) && (to == 0 || t1 <= to);
        if (rc != KL_OK) {
            cs_first_err(cs, rc, &err);
            if (measured)
                cs->errors++;
            if (rc == KL_UNAVAILABLE || rc == KL_RESOURCE_EXHAUSTED || rc == KL_NOT_LEADER)
                sleep_ns(1000000);
            continue;
        }
        if (measured) {
            cs->ok++;
            if (lat_push(&cs->lat, (uint64_t)(t1 - t0)) != 0) {
                snprintf(cs->first_err_msg, sizeof cs->first_err_msg, "out of memory for latencies");
                break;
            }
        }
    }
out:
    kl_message_free(msg);
    free(body);
    return NULL;
}

/* The leader's cost counters (MemberStatus fields 15-20) and who it was. */
typedef struct cost_snap {
    bool ok;
    uint64_t member, term;
    uint64_t sealed_requests, session_ns, authz_requests, authz_ns, hellos, hello_ns;
    uint64_t applied_index;
} cost_snap;

static void cost_read(member_set *ms, int li, cost_snap *out)
{
    memset(out, 0, sizeof *out);
    kl_err err;
    kl_err_clear(&err);
    Keyload__V1__MemberStatusAnswer *a = NULL;
    if (li < 0 || ms_status(ms, li, 5000, &a, &err) != KL_OK) {
        fprintf(stderr, "keyload-bench: MemberStatus of the leader failed: %s\n", err.message);
        return;
    }
    *out = (cost_snap){.ok = true, .member = a->member, .term = a->term,
                       .sealed_requests = a->sealed_requests, .session_ns = a->session_ns,
                       .authz_requests = a->authz_requests, .authz_ns = a->authz_ns,
                       .hellos = a->hellos, .hello_ns = a->hello_ns, .applied_index = a->applied_index};
    keyload__v1__member_status_answer__free_unpacked(a, NULL);
}

/* " sealed_requests=... cost_pct_p50=..." for the bench line: the deltas between two
 * snapshots of the same leader in the same term ("costs=n/a" otherwise). */
static void cost_print(const cost_snap *x, const cost_snap *y, double p50_us)
{
    if (!x->ok || !y->ok || x->member != y->member || x->term != y->term ||
        y->sealed_requests <= x->sealed_requests) {
        printf(" costs=n/a");
        return;
    }
    uint64_t req = y->sealed_requests - x->sealed_requests, sess = y->session_ns - x->session_ns;
    uint64_t areq = y->authz_requests - x->authz_requests, authz = y->authz_ns - x->authz_ns;
    double per = (double)(sess + authz) / (double)req / 1e3;
    printf(" leader_member=%llu sealed_requests=%llu session_ns=%llu authz_requests=%llu authz_ns=%llu "
           "hellos=%llu hello_ns=%llu session_us_per_req=%.2f authz_us_per_req=%.2f cost_us_per_req=%.2f "
           "cost_pct_p50=%.3f",
           (unsigned long long)y->member, (unsigned long long)req, (unsigned long long)sess,
           (unsigned long long)areq, (unsigned long long)authz,
           (unsigned long long)(y->hellos - x->hellos), (unsigned long long)(y->hello_ns - x->hello_ns),
           (double)sess / (double)req / 1e3, (double)authz / (double)req / 1e3, per,
           p50_us > 0 ? 100.0 * per / p50_us : 0.0);
    /* Log entries the leader applied per request: below 1 when batches share an entry
     * (the status calls themselves append nothing). */
    printf(" entries=%llu entries_per_req=%.3f", (unsigned long long)(y->applied_index - x->applied_index),
           (double)(y->applied_index - x->applied_index) / (double)req);
}

static int proc_cpu(long pid, double *stat_ns, double *sched_ns);

/* --lat-out: the sorted latencies (ns) as microseconds, one a line. */
static int lat_write(const char *path, const uint64_t *v, size_t n)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "keyload-bench: --lat-out %s: %s\n", path, strerror(errno));
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%.1f\n", (double)v[i] / 1e3);
    if (fclose(f) != 0) {
        fprintf(stderr, "keyload-bench: --lat-out %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* --cpu-pids: user+sys of every listed process in ns (/proc/PID/stat, clock ticks); -1 when
 * one of them cannot be read (it has ended: the figure would be wrong, so none is given). */
static double cpu_pids_ns(const options *o)
{
    double sum = 0;
    for (int i = 0; i < o->n_cpu_pids; i++) {
        double st, sched;
        if (proc_cpu(o->cpu_pids[i], &st, &sched) != 0)
            return -1;
        sum += st;
    }
    return sum;
}

static int run_bench(const options *o)
{
    /* Several members: wait for a serving leader and start there. */
    char target[URL_MAX];
    snprintf(target, sizeof target, "%s", o->url);
    bool sealed = o->principal != NULL;
    member_set ms;  /* sealed: kept open for the leader's cost counters */
    memset(&ms, 0, sizeof ms);
    int li = -1;
    if (o->n_urls > 1 || sealed) {
        ms_init(&ms, o);
        Keyload__V1__MemberStatusAnswer *a;
        li = ms_wait_leader(&ms, &a);
        if (li < 0)
            return 1;
        char node[32];
        fprintf(stderr, "keyload-bench: leader %s at %s (term %llu)\n", ms_node(&ms, li, node, sizeof node),
                ms.url[li], (unsigned long long)a->term);
        snprintf(target, sizeof target, "%s", ms.url[li]);
        keyload__v1__member_status_answer__free_unpacked(a, NULL);
        if (!sealed)
            ms_close(&ms);
    }
    /* Sealed: the queue and the grant are the caller's (an unsealed request is refused). */
    if (!sealed && bench_setup_queue(o, target) != 0)
        return 1;
    client_state *cs = calloc((size_t)o->clients, sizeof *cs);
    if (cs == NULL) {
        if (sealed)
            ms_close(&ms);
        return 1;
    }
    atomic_store(&g_ops_left, o->ops);
    for (int i = 0; i < o->clients; i++) {
        cs[i].id = i;
        cs[i].opt = o;
        snprintf(cs[i].url, sizeof cs[i].url, "%s", target);
        if (pthread_create(&cs[i].thread, NULL, sealed ? sealed_client_main : client_main, &cs[i]) != 0) {
            fprintf(stderr, "keyload-bench: cannot start client thread %d\n", i);
            atomic_store(&g_stop, 1);
            atomic_store(&g_go, 1);
            for (int j = 0; j < i; j++) {
                pthread_join(cs[j].thread, NULL);
                kl_client_close(cs[j].sdk);
            }
            free(cs);
            if (sealed)
                ms_close(&ms);
            return 1;
        }
    }
    /* Give every thread time to connect before the clock starts. */
    sleep_ns(200000000LL);
    cost_snap before = {0}, after = {0};
    if (sealed) {
        /* Every client has shaken hands and sent its first batch (bounded by its timeout). */
        int64_t deadline = now_ns() + (int64_t)(o->timeout_ms + 5000) * 1000000LL;
        while (atomic_load(&g_primed) < o->clients && now_ns() < deadline)
            sleep_ns(10000000LL);
        cost_read(&ms, li, &before);
    }
    int64_t start = now_ns();
    int64_t from = o->ops > 0 ? start : start + (int64_t)(o->warmup * 1e9);
    atomic_store(&g_measure_from, from);
    atomic_store(&g_go, 1);
    int64_t end;
    double cpu0 = -1, cpu1 = -1;
    if (o->ops > 0) {
        for (int i = 0; i < o->clients; i++)
            pthread_join(cs[i].thread, NULL);
        end = now_ns();
    } else {
        end = from + (int64_t)(o->seconds * 1e9);
        /* The members' CPU over exactly the measured window (warm-up excluded). */
        if (o->n_cpu_pids > 0) {
            sleep_ns(from - now_ns());
            cpu0 = cpu_pids_ns(o);
        }
        sleep_ns(end - now_ns());
        if (o->n_cpu_pids > 0)
            cpu1 = cpu_pids_ns(o);
        atomic_store(&g_measure_to, end);
        atomic_store(&g_stop, 1);
        for (int i = 0; i < o->clients; i++)
            pthread_join(cs[i].thread, NULL);
    }
    if (sealed) {
        cost_read(&ms, li, &after);
        ms_close(&ms);
        for (int i = 0; i < o->clients; i++)
            kl_client_close(cs[i].sdk);
    }
    double secs = (double)(end - from) / 1e9;

    size_t n = 0;
    uint64_t ok = 0, errors = 0, total = 0;
    int open_failed = 0;
    for (int i = 0; i < o->clients; i++) {
        n += cs[i].lat.n;
        ok += cs[i].ok;
        errors += cs[i].errors;
        total += cs[i].total;
        open_failed += cs[i].open_failed;
    }
    uint64_t *all = malloc((n ? n : 1) * sizeof *all);
    size_t k = 0;
    for (int i = 0; i < o->clients; i++) {
        if (all != NULL)
            memcpy(all + k, cs[i].lat.v, cs[i].lat.n * sizeof *all);
        k += cs[i].lat.n;
    }
    if (all == NULL)
        n = 0;
    qsort(all, n, sizeof *all, cmp_u64);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (double)all[i];
    if (o->lat_out != NULL && lat_write(o->lat_out, all, n) != 0)
        open_failed = o->clients;
    printf("bench: %sclients=%d batch=%d body=%d seconds=%.2f batches=%llu batches_per_s=%.1f "
           "msgs_per_s=%.1f p50_us=%.1f p99_us=%.1f mean_us=%.1f max_us=%.1f errors=%llu",
           o->read ? "read=1 " : sealed ? "sealed=1 " : "", o->clients, o->batch_size, o->body_size, secs, (unsigned long long)ok, ok / secs,
           ok * (double)(o->read ? 0 : o->batch_size) / secs, pct(all, n, 50) / 1e3, pct(all, n, 99) / 1e3,
           n ? sum / (double)n / 1e3 : 0.0, n ? all[n - 1] / 1e3 : 0.0,
           (unsigned long long)(errors + (uint64_t)open_failed));
    if (sealed)
        cost_print(&before, &after, pct(all, n, 50) / 1e3);
    if (o->n_cpu_pids > 0) {
        uint64_t msgs = ok * (uint64_t)(o->read ? 1 : o->batch_size);
        if (cpu0 >= 0 && cpu1 >= 0 && msgs > 0)
            printf(" cpu_us_per_msg=%.1f cpu_pids=%d", (cpu1 - cpu0) / 1e3 / (double)msgs, o->n_cpu_pids);
        else
            printf(" cpu_us_per_msg=n/a cpu_pids=%d", o->n_cpu_pids);
    }
    printf("\n");
    fflush(stdout);
    /* Report each distinct first error once, so a broken run says why. */
    for (int i = 0; i < o->clients; i++) {
        if (cs[i].first_err_msg[0] == '\0')
            continue;
        bool seen = false;
        for (int j = 0; j < i && !seen; j++)
            seen = strcmp(cs[j].first_err_msg, cs[i].first_err_msg) == 0;
        if (!seen)
            fprintf(stderr, "keyload-bench: client %d: first error: %s\n", i, cs[i].first_err_msg);
    }
    (void)total;
    for (int i = 0; i < o->clients; i++)
        free(cs[i].lat.v);
    free(all);
    free(cs);
    return open_failed == o->clients ? 1 : 0;
}

/* ---- --transfer (KL-4): Create -> Accept -> receipt read -> Complete ---- */

/* Sends b (freed here); on KL_OK *out is the receipt, whose first result must be `kind`. */
static kl_code xfer_send(kl_client *c, kl_batch *b, int kind, kl_receipt **out, kl_err *err)
{
    *out = NULL;
    kl_code rc = kl_client_batch(c, b, out, err);
    kl_batch_free(b);
    if (rc == KL_OK && ((*out)->decoded->n_results != 1 || (int)(*out)->decoded->results[0]->kind_case != kind)) {
        kl_receipt_free(*out);
        *out = NULL;
        rc = kl_fail(err, KL_INTERNAL, "receipt", "the receipt does not carry the expected result");
    }
    return rc;
}

/* One whole transfer of msg from queue/lane to dest_queue/lane; `step` names the step
 * that failed. Tokens pass through unchanged; none is logged. */
static kl_code xfer_one(kl_client *c, const options *o, const kl_message *msg, const char *lane,
                        const char **step, kl_err *err)
{
    char tid[KL_COMMAND_ID_TEXT_LEN + 1];
    kl_command_id_new(tid);
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    uint8_t *intent = NULL, *receipt = NULL;
    size_t intent_len = 0, receipt_len = 0;
    Keyload__V1__InspectQueueTransferReceiptAnswer *ra = NULL;
    *step = "create";
    kl_code rc = kl_batch_new(NULL, &b, err);
    if (rc == KL_OK && (rc = kl_batch_create_transfer(b, o->queue, lane, tid, o->dest_queue, lane, msg, err)) != KL_OK)
        kl_batch_free(b);
    if (rc == KL_OK && (rc = xfer_send(c, b, KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_CREATED, &r, err)) == KL_OK) {
        const ProtobufCBinaryData *t = &r->decoded->results[0]->transfer_created->intent_token;
        if ((intent = malloc(t->len ? t->len : 1)) == NULL)
            rc = kl_fail(err, KL_INTERNAL, "memory", "out of memory");
        else
            memcpy(intent, t->data, intent_len = t->len);
    }
    kl_receipt_free(r);
    r = NULL;
    if (rc == KL_OK) {
        *step = "accept";
        if ((rc = kl_batch_new(NULL, &b, err)) == KL_OK &&
            (rc = kl_batch_accept_transfer(b, o->dest_queue, lane, intent, intent_len, err)) != KL_OK)
            kl_batch_free(b);
        if (rc == KL_OK)
            rc = xfer_send(c, b, KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ACCEPTED, &r, err);
        kl_receipt_free(r);
        r = NULL;
    }
    if (rc == KL_OK) {
        *step = "receipt";
        if ((rc = kl_client_transfer_receipt(c, o->dest_queue, o->queue, lane, tid, &ra, err)) == KL_OK) {
            if ((receipt = malloc(ra->receipt_token.len ? ra->receipt_token.len : 1)) == NULL)
                rc = kl_fail(err, KL_INTERNAL, "memory", "out of memory");
            else
                memcpy(receipt, ra->receipt_token.data, receipt_len = ra->receipt_token.len);
        }
        kl_transfer_receipt_answer_free(ra);
    }
    if (rc == KL_OK) {
        *step = "complete";
        if ((rc = kl_batch_new(NULL, &b, err)) == KL_OK &&
            (rc = kl_batch_complete_transfer(b, o->queue, lane, tid, receipt, receipt_len, err)) != KL_OK)
            kl_batch_free(b);
        if (rc == KL_OK)
            rc = xfer_send(c, b, KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_COMPLETED, &r, err);
        if (rc == KL_OK && r->decoded->results[0]->transfer_completed->state != KEYLOAD__V1__TRANSFER_STATE__DELIVERED)
            rc = kl_fail(err, KL_INTERNAL, "state", "Complete did not answer Delivered");
        kl_receipt_free(r);
    }
    free(intent);
    free(receipt);
    return rc;
}

/* cs_first_err with the step that failed in front. */
static void xfer_first_err(client_state *cs, const char *step, kl_code rc, const kl_err *err)
{
    if (cs->first_err != KL_OK)
        return;
    cs->first_err = rc;
    snprintf(cs->first_err_msg, sizeof cs->first_err_msg, "%.10s: %.24s (%.64s) %.200s", step, kl_code_name(rc),
             err->detail, err->message);
}

static void *xfer_client_main(void *arg)
{
    client_state *cs = arg;
    const options *o = cs->opt;
    kl_err err;
    kl_err_clear(&err);
    kl_message *msg = NULL;
    const char *step = "open";
    char lane[64];
    long seq = 0;
    uint8_t *body = malloc((size_t)o->body_size + 1);
    kl_code rc = body == NULL ? kl_fail(&err, KL_INTERNAL, "memory", "out of memory") : KL_OK;
    for (int i = 0; body != NULL && i < o->body_size; i++)
        body[i] = (uint8_t)('a' + (i + cs->id) % 26);
    if (rc == KL_OK)
        rc = kl_message_new(body, (size_t)o->body_size, &msg, &err);
    if (rc == KL_OK)
        rc = kl_client_open_principal(o->cluster_file, o->database, o->timeout_ms, o->principal, o->key_file,
                                      &cs->sdk, &err);
    /* One transfer before the clock: Hello with both partitions' leaders, LocateQueue. The
     * lane names carry the process id so a second run on the same cluster starts afresh. */
    snprintf(lane, sizeof lane, "p%ldw%dl%ld", (long)getpid() % 100000, cs->id, seq / o->lane_every);
    if (rc == KL_OK && (rc = xfer_one(cs->sdk, o, msg, lane, &step, &err)) == KL_OK)
        seq++;
    if (rc != KL_OK) {
        xfer_first_err(cs, step, rc, &err);
        cs->open_failed = 1;
    }
    atomic_fetch_add(&g_primed, 1);
    if (rc != KL_OK)
        goto out;
    while (!atomic_load(&g_go))
        sleep_ns(100000);
    while (!atomic_load(&g_stop)) {
        snprintf(lane, sizeof lane, "p%ldw%dl%ld", (long)getpid() % 100000, cs->id, seq / o->lane_every);
        seq++;
        kl_err_clear(&err);
        int64_t t0 = now_ns();
        rc = xfer_one(cs->sdk, o, msg, lane, &step, &err);
        int64_t t1 = now_ns();
        cs->total++;
        int64_t to = atomic_load(&g_measure_to);
        bool measured = t0 >= atomic_load(&g_measure_from) && (to == 0 || t1 <= to);
        if (rc != KL_OK) {
            xfer_first_err(cs, step, rc, &err);
            if (measured)
                cs->errors++;
            if (rc == KL_UNAVAILABLE || rc == KL_RESOURCE_EXHAUSTED || rc == KL_NOT_LEADER)
                sleep_ns(1000000);
            continue;
        }
        if (measured) {
            cs->ok++;
            if (lat_push(&cs->lat, (uint64_t)(t1 - t0)) != 0) {
                snprintf(cs->first_err_msg, sizeof cs->first_err_msg, "out of memory for latencies");
                break;
            }
        }
    }
out:
    kl_message_free(msg);
    free(body);
    return NULL;
}

static int run_transfer(const options *o)
{
    client_state *cs = calloc((size_t)o->clients, sizeof *cs);
    if (cs == NULL)
        return 1;
    int started = 0;
    for (int i = 0; i < o->clients; i++) {
        cs[i].id = i;
        cs[i].opt = o;
        if (pthread_create(&cs[i].thread, NULL, xfer_client_main, &cs[i]) != 0) {
            fprintf(stderr, "keyload-bench: cannot start client thread %d\n", i);
            break;
        }
        started++;
    }
    /* Every client has done its first transfer (bounded by its timeouts) before the clock. */
    int64_t deadline = now_ns() + (int64_t)(4 * o->timeout_ms + 5000) * 1000000LL;
    while (atomic_load(&g_primed) < started && now_ns() < deadline)
        sleep_ns(10000000LL);
    int64_t from = now_ns() + (int64_t)(o->warmup * 1e9);
    atomic_store(&g_measure_from, from);
    atomic_store(&g_go, 1);
    int64_t end = from + (int64_t)(o->seconds * 1e9);
    if (started == o->clients) {
        sleep_ns(end - now_ns());
        atomic_store(&g_measure_to, end);
    }
    atomic_store(&g_stop, 1);
    for (int i = 0; i < started; i++) {
        pthread_join(cs[i].thread, NULL);
        kl_client_close(cs[i].sdk);
    }
    double secs = (double)(end - from) / 1e9;
    size_t n = 0;
    uint64_t ok = 0, errors = 0;
    int open_failed = o->clients - started;
    for (int i = 0; i < started; i++) {
        n += cs[i].lat.n;
        ok += cs[i].ok;
        errors += cs[i].errors;
        open_failed += cs[i].open_failed;
    }
    uint64_t *all = malloc((n ? n : 1) * sizeof *all);
    size_t k = 0;
    for (int i = 0; i < started && all != NULL; i++) {
        memcpy(all + k, cs[i].lat.v, cs[i].lat.n * sizeof *all);
        k += cs[i].lat.n;
    }
    if (all == NULL)
        n = 0;
    qsort(all, n, sizeof *all, cmp_u64);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (double)all[i];
    if (o->lat_out != NULL && lat_write(o->lat_out, all, n) != 0)
        open_failed = o->clients;
    printf("transfer: clients=%d body=%d lane_every=%ld seconds=%.2f transfers=%llu transfers_per_s=%.1f "
           "p50_us=%.1f p99_us=%.1f mean_us=%.1f max_us=%.1f errors=%llu\n",
           o->clients, o->body_size, o->lane_every, secs, (unsigned long long)ok, ok / secs, pct(all, n, 50) / 1e3,
           pct(all, n, 99) / 1e3, n ? sum / (double)n / 1e3 : 0.0, n ? all[n - 1] / 1e3 : 0.0,
           (unsigned long long)(errors + (uint64_t)open_failed));
    fflush(stdout);
    for (int i = 0; i < started; i++) {
        if (cs[i].first_err_msg[0] == '\0')
            continue;
        bool seen = false;
        for (int j = 0; j < i && !seen; j++)
            seen = strcmp(cs[j].first_err_msg, cs[i].first_err_msg) == 0;
        if (!seen)
            fprintf(stderr, "keyload-bench: transfer client %d: first error: %s\n", i, cs[i].first_err_msg);
    }
    for (int i = 0; i < o->clients; i++)
        free(cs[i].lat.v);
    free(all);
    free(cs);
    return open_failed == o->clients ? 1 : 0;
}

/* ---- --leader-of, --wait-caught-up ---- */

static int run_leader_of(const options *o)
{
    member_set ms;
    ms_init(&ms, o);
    Keyload__V1__MemberStatusAnswer *a;
    int li = ms_wait_leader(&ms, &a);
    if (li < 0)
        return 1;
    char node[32];
    printf("leader: node=%s member=%llu url=%s term=%llu commit_index=%llu applied_index=%llu last_index=%llu\n",
           ms_node(&ms, li, node, sizeof node), (unsigned long long)a->member, ms.url[li],
           (unsigned long long)a->term, (unsigned long long)a->commit_index, (unsigned long long)a->applied_index,
           (unsigned long long)a->last_index);
    keyload__v1__member_status_answer__free_unpacked(a, NULL);
    ms_close(&ms);
    return 0;
}

static int run_wait_caught_up(const options *o)
{
    member_set ms;
    ms_init(&ms, o);
    int64_t t0 = now_ns(), deadline = t0 + LEADER_WAIT_NS;
    Keyload__V1__MemberStatusAnswer *st[MAX_URLS];
    char why[300] = "no status yet";
    for (;;) {
        int li = -1, answered = 0;
        for (int i = 0; i < ms.n; i++) {
            kl_err err;
            kl_err_clear(&err);
            if (ms_status(&ms, i, 500, &st[i], &err) == KL_OK)
                answered++;
            else
                snprintf(why, sizeof why, "%s: %s", ms.url[i], err.message);
            if (st[i] != NULL && is_serving_leader(st[i]))
                li = i;
        }
        bool done = false;
        if (answered == ms.n && li >= 0) {
            uint64_t commit = st[li]->commit_index;
            done = true;
            for (int i = 0; i < ms.n; i++)
                if (st[i]->applied_index < commit) {
                    done = false;
                    snprintf(why, sizeof why, "%s applied %llu < leader commit %llu", ms.url[i],
                             (unsigned long long)st[i]->applied_index, (unsigned long long)commit);
                }
            if (done) {
                char node[32];
                printf("caughtup: ms=%.0f leader=%s commit_index=%llu\n", (now_ns() - t0) / 1e6,
                       ms_node(&ms, li, node, sizeof node), (unsigned long long)commit);
            }
        } else if (answered == ms.n) {
            snprintf(why, sizeof why, "no serving leader");
        }
        for (int i = 0; i < ms.n; i++)
            if (st[i] != NULL)
                keyload__v1__member_status_answer__free_unpacked(st[i], NULL);
        if (done)
            break;
        if (now_ns() > deadline) {
            fprintf(stderr, "keyload-bench: members not caught up within 60 s: %s\n", why);
            ms_close(&ms);
            return 1;
        }
        sleep_ns(50000000LL);
    }
    ms_close(&ms);
    return 0;
}

/* ---- --failover ---- */

/* True when pid is a running keyloadd started with "--node node": pids are recycled quickly
 * on a busy machine, so a pid file alone is not enough to kill -9 what it names. */
static bool is_member_process(long pid, const char *node)
{
    char path[64], buf[8192];
    snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    bool daemon = false, named = false;
    const char *prev = "";
    for (size_t i = 0; i < n; i += strlen(buf + i) + 1) {
        const char *arg = buf + i;
        if (i == 0) {
            const char *base = strrchr(arg, '/');
            daemon = strcmp(base ? base + 1 : arg, "keyloadd") == 0;
        }
        if (strcmp(prev, "--node") == 0 && strcmp(arg, node) == 0)
            named = true;
        prev = arg;
    }
    return daemon && named;
}

typedef struct fo_writer {
    pthread_t thread;
    const options *o;
    member_set ms;              /* the writer's own connections */
    int start;                  /* member index to try first */
    atomic_int stop;
    atomic_ullong acks;
    _Atomic int64_t first_ack_ns;   /* monotonic; first ack since any */
    _Atomic int64_t kill_ns;        /* 0 until the leader is killed */
    atomic_int killed;              /* index of the killed member */
    _Atomic int64_t after_ack_ns;   /* first ack after kill_ns from another member */
    atomic_int after_ack_member;
    /* Counted after the kill, by the writer only (read after join). */
    uint64_t no_answer, unknown, not_leader, unavailable, unreachable, other;
    char other_msg[KL_ERR_MESSAGE_MAX + KL_ERR_DETAIL_MAX + 8];
} fo_writer;

static void *fo_writer_main(void *arg)
{
    fo_writer *w = arg;
    const options *o = w->o;
    uint8_t body[100];
    memset(body, 'f', sizeof body);
    Keyload__V1__QueueLaneRef lane;
    lane_ref(&lane, o->queue);
    Keyload__V1__EnqueueMessage msg = KEYLOAD__V1__ENQUEUE_MESSAGE__INIT;
    msg.body.data = body;
    msg.body.len = sizeof body;
    Keyload__V1__Enqueue enq = KEYLOAD__V1__ENQUEUE__INIT;
    enq.lane = &lane;
    enq.message = &msg;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_ENQUEUE;
    m.enqueue = &enq;
    Keyload__V1__Mutation *mp[] = {&m};
    uint8_t id[KL_GUID_LEN];
    Keyload__V1__BatchRequest b = KEYLOAD__V1__BATCH_REQUEST__INIT;
    b.command_id.data = id;
    b.command_id.len = sizeof id;
    b.mutations = mp;
    b.n_mutations = 1;
    uint8_t *buf = NULL;
    size_t cap = 0;
    kl_guid_random(id);
    size_t len = pack_batch(&b, &buf, &cap);
    int target = w->start, fails = 0, refused = 0;
    while (!atomic_load(&w->stop) && len > 0) {
        kl_err err;
        kl_err_clear(&err);
        char leader[URL_MAX] = "";
        uint8_t *ans = NULL;
        size_t alen = 0;
        kl_code rc;
        bool reached = true;
        kl_rpc_client *c = ms_conn(&w->ms, target, 200, &err);
        if (c == NULL) {
            rc = err.code;
            reached = false;
        } else {
            rc = kl_rpc_invoke(c, BATCH_METHOD, buf, len, o->attempt_ms, &ans, &alen, leader,
                               sizeof leader, &err);
        }
        int64_t t = now_ns();
        free(ans);
        int64_t k = atomic_load(&w->kill_ns);
        bool after = k != 0 && t > k;
        if (rc == KL_OK) {
            atomic_fetch_add(&w->acks, 1);
            int64_t zero = 0;
            atomic_compare_exchange_strong(&w->first_ack_ns, &zero, t);
            if (after && target != atomic_load(&w->killed)) {
                zero = 0;
                if (atomic_compare_exchange_strong(&w->after_ack_ns, &zero, t))
                    atomic_store(&w->after_ack_member, target);
            }
            kl_guid_random(id); /* the next message; a retried one keeps its id */
            len = pack_batch(&b, &buf, &cap);
            fails = refused = 0;
            continue;
        }
        fails++;
        int next = (target + 1) % w->ms.n;
        switch (rc) {
        case KL_NOT_LEADER: {
            w->not_leader += after;
            int li = leader[0] ? ms_index(&w->ms, leader) : -1;
            target = li >= 0 && li != target ? li : next;
            break;
        }
        case KL_UNAVAILABLE:
            if (!reached || strcmp(err.detail, "no_connection") == 0 || strcmp(err.detail, "send") == 0) {
                w->unreachable += after;
                ms_drop(&w->ms, target);
                target = next;
            } else {
                /* Refused before proposing (e.g. a new leader not serving yet): stay a while. */
                w->unavailable += after;
                if (++refused > 20) {
                    refused = 0;
                    target = next;
                }
                sleep_ns(5000000LL);
            }
            break;
        case KL_DEADLINE_EXCEEDED:
        case KL_UNKNOWN_WRITE_OUTCOME:
            /* Outcome unknown: resend the same bytes (same command id) elsewhere. */
            if (rc == KL_DEADLINE_EXCEEDED) {
                w->no_answer += after;
                ms_drop(&w->ms, target);
            } else {
                w->unknown += after;
            }
            target = next;
            break;
        default:
            w->other++;
            if (w->other_msg[0] == '\0')
                snprintf(w->other_msg, sizeof w->other_msg, "%s (%s) %s", kl_code_name(rc), err.detail,
                         err.message);
            kl_guid_random(id);
            len = pack_batch(&b, &buf, &cap);
            break;
        }
        if (fails % w->ms.n == 0)
            sleep_ns(10000000LL); /* a whole round without an ack: do not spin */
    }
    free(buf);
    ms_close(&w->ms);
    return NULL;
}

static int run_failover(const options *o)
{
    member_set ms;
    ms_init(&ms, o);
    int rv = 1;
    char node[32], node2[32];
    Keyload__V1__MemberStatusAnswer *a = NULL;
    int li = ms_wait_leader(&ms, &a);
    if (li < 0)
        return 1;
    keyload__v1__member_status_answer__free_unpacked(a, NULL);
    a = NULL;
    for (int i = 0; i < ms.n; i++) { /* learn every member's id, for node names */
        kl_err err;
        Keyload__V1__MemberStatusAnswer *s;
        if (ms_status(&ms, i, 1000, &s, &err) == KL_OK)
            keyload__v1__member_status_answer__free_unpacked(s, NULL);
    }
    if (bench_setup_queue(o, ms.url[li]) != 0) {
        ms_close(&ms);
        return 1;
    }

    fo_writer *w = calloc(1, sizeof *w);
    if (w == NULL) {
        ms_close(&ms);
        return 1;
    }
    w->o = o;
    ms_init(&w->ms, o);
    w->start = li;
    atomic_store(&w->killed, -1);
    atomic_store(&w->after_ack_member, -1);
    if (pthread_create(&w->thread, NULL, fo_writer_main, w) != 0) {
        fprintf(stderr, "keyload-bench: cannot start the writer thread\n");
        free(w);
        ms_close(&ms);
        return 1;
    }
    /* Steady state first: the writer has been acknowledged for a second. */
    int64_t deadline = now_ns() + 30 * 1000000000LL;
    for (;;) {
        int64_t f = atomic_load(&w->first_ack_ns);
        if (f != 0 && now_ns() - f >= 1000000000LL)
            break;
        if (now_ns() > deadline) {
            fprintf(stderr, "keyload-bench: the writer got no ack within 30 s\n");
            goto out;
        }
        sleep_ns(20000000LL);
    }
    li = ms_find_leader(&ms, -1, now_ns() + 10 * 1000000000LL, &a);
    if (li < 0) {
        fprintf(stderr, "keyload-bench: no serving leader before the kill\n");
        goto out;
    }
    uint64_t term = a->term;
    keyload__v1__member_status_answer__free_unpacked(a, NULL);
    a = NULL;
    ms_node(&ms, li, node, sizeof node);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.pid", o->pid_dir, node);
    FILE *pf = fopen(path, "r");
    long pid = 0;
    if (pf == NULL || fscanf(pf, "%ld", &pid) != 1 || pid <= 1) {
        fprintf(stderr, "keyload-bench: cannot read the leader's pid from %s\n", path);
        if (pf != NULL)
            fclose(pf);
        goto out;
    }
    fclose(pf);
    if (!is_member_process(pid, node)) {
        fprintf(stderr, "keyload-bench: pid %ld (from %s) is not keyloadd --node %s; not killing it\n",
                pid, path, node);
        goto out;
    }
    unsigned long long acks_before = atomic_load(&w->acks);
    atomic_store(&w->killed, li);
    int64_t t_kill = now_ns();
    atomic_store(&w->kill_ns, t_kill);
    if (kill((pid_t)pid, SIGKILL) != 0) {
        fprintf(stderr, "keyload-bench: kill -9 %ld (%s): %s\n", pid, node, strerror(errno));
        goto out;
    }
    ms_drop(&ms, li);
    /* Until the writer is acknowledged by another member: note when a survivor first
     * reports itself a serving leader (election plus its own-term no-op commit). */
    int64_t t_elected = 0, t_ack = 0;
    int elected = -1;
    deadline = t_kill + LEADER_WAIT_NS;
    while ((t_ack = atomic_load(&w->after_ack_ns)) == 0 && now_ns() < deadline) {
        if (t_elected == 0) {
            for (int i = 0; i < ms.n && t_elected == 0; i++) {
                if (i == li)
                    continue;
                kl_err err;
                kl_err_clear(&err);
                Keyload__V1__MemberStatusAnswer *s;
                if (ms_status(&ms, i, 200, &s, &err) != KL_OK)
                    continue;
                if (is_serving_leader(s) && s->term > term) {
                    t_elected = now_ns();
                    elected = i;
                }
                keyload__v1__member_status_answer__free_unpacked(s, NULL);
            }
        }
        sleep_ns(10000000LL);
    }
    atomic_store(&w->stop, 1);
    pthread_join(w->thread, NULL);
    int nl = atomic_load(&w->after_ack_member);
    if (t_ack == 0) {
        printf("failover: run=%d killed=%s pid=%ld term=%llu failover_ms=timeout elected_ms=%s "
               "acks_before=%llu\n", o->run, node, pid, (unsigned long long)term,
               t_elected ? "seen" : "none", acks_before);
    } else {
        char el[32];
        if (t_elected != 0 && t_elected <= t_ack)
            snprintf(el, sizeof el, "%.1f", (t_elected - t_kill) / 1e6);
        else
            snprintf(el, sizeof el, "n/a"); /* the ack came first: the poll missed the moment */
        printf("failover: run=%d killed=%s pid=%ld term=%llu failover_ms=%.1f elected_ms=%s "
               "new_leader=%s acks_before=%llu no_answer=%llu unknown_outcome=%llu not_leader=%llu "
               "unavailable=%llu unreachable=%llu\n",
               o->run, node, pid, (unsigned long long)term, (t_ack - t_kill) / 1e6, el,
               ms_node(&ms, nl >= 0 ? nl : elected, node2, sizeof node2), acks_before,
               (unsigned long long)w->no_answer, (unsigned long long)w->unknown,
               (unsigned long long)w->not_leader, (unsigned long long)w->unavailable,
               (unsigned long long)w->unreachable);
        rv = 0;
    }
    fflush(stdout);
    if (w->other_msg[0] != '\0')
        fprintf(stderr, "keyload-bench: writer: %llu unexpected errors, first: %s\n",
                (unsigned long long)w->other, w->other_msg);
    free(w);
    ms_close(&ms);
    return rv;
out:
    atomic_store(&w->stop, 1);
    pthread_join(w->thread, NULL);
    free(w);
    ms_close(&ms);
    return rv;
}

/* ---- --handshake: daemon CPU per Hello (KL-3) ---- */

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The CPU time pid has used: utime+stime of /proc/PID/stat (clock ticks, in ns) and the sum
 * of its threads' /proc/PID/task/TID/schedstat run times (ns; -1 when unreadable). */
static int proc_cpu(long pid, double *stat_ns, double *sched_ns)
{
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    unsigned long ut, st;
    if (p == NULL || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    *stat_ns = (double)(ut + st) * 1e9 / (double)sysconf(_SC_CLK_TCK);
    *sched_ns = 0;
    snprintf(path, sizeof path, "/proc/%ld/task", pid);
    DIR *d = opendir(path);
    if (d == NULL) {
        *sched_ns = -1;
        return 0;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char tp[320];
        unsigned long long run;
        snprintf(tp, sizeof tp, "/proc/%ld/task/%s/schedstat", pid, e->d_name);
        FILE *tf = fopen(tp, "r");
        if (tf == NULL)
            continue; /* the thread just ended */
        if (fscanf(tf, "%llu", &run) == 1)
            *sched_ns += (double)run;
        else
            *sched_ns = -1e300;
        fclose(tf);
    }
    closedir(d);
    if (*sched_ns < 0)
        *sched_ns = -1;
    return 0;
}

typedef struct hs_ctx {
    kl_rpc_client *c;
    const char *principal;
    uint8_t sk[KL_SESSION_SIGN_SECRET_LEN];
    const char *cluster;
    int32_t partition;
    uint64_t member;
    const uint8_t *member_pk;
} hs_ctx;

/* One complete handshake: Hello, HelloAnswer decoded and verified (kl_session_finish). */
static kl_code hs_hello(hs_ctx *h, kl_err *err)
{
    kl_session_client hc;
    kl_code rc = kl_session_hello_new(h->principal, h->sk, h->cluster, h->partition, h->member, wall_ms(),
                                      NULL, NULL, &hc, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__Hello hm = KEYLOAD__V1__HELLO__INIT;
    kl_session_hello_to_pb(&hc.hello, &hm);
    uint8_t buf[512];
    size_t n = keyload__v1__hello__get_packed_size(&hm);
    if (n > sizeof buf) {
        kl_session_client_wipe(&hc);
        return kl_fail(err, KL_INTERNAL, "hello", "the Hello does not fit %zu bytes", sizeof buf);
    }
    keyload__v1__hello__pack(&hm, buf);
    uint8_t *ans = NULL;
    size_t alen = 0;
    rc = kl_rpc_invoke(h->c, HELLO_METHOD, buf, n, 5000, &ans, &alen, NULL, 0, err);
    if (rc == KL_OK) {
        Keyload__V1__HelloAnswer *ha = keyload__v1__hello_answer__unpack(NULL, alen, ans);
        kl_session_hello_answer a;
        kl_session s;
        if (ha == NULL)
            rc = kl_fail(err, KL_INTERNAL, "hello_answer", "the HelloAnswer does not decode");
        else
            rc = kl_session_answer_from_pb(ha, &a, err);
        if (ha != NULL)
            keyload__v1__hello_answer__free_unpacked(ha, NULL);
        if (rc == KL_OK)
            rc = kl_session_finish(&hc, &a, h->member_pk, &s, err);
        if (rc == KL_OK)
            kl_session_wipe(&s);
    }
    free(ans);
    kl_session_client_wipe(&hc);
    return rc;
}

static kl_code hs_status(hs_ctx *h, Keyload__V1__MemberStatusAnswer **out, kl_err *err)
{
    uint8_t *ans = NULL;
    size_t alen = 0;
    kl_code rc = kl_rpc_invoke(h->c, STATUS_METHOD, NULL, 0, 5000, &ans, &alen, NULL, 0, err);
    if (rc == KL_OK && out != NULL) {
        *out = keyload__v1__member_status_answer__unpack(NULL, alen, ans);
        if (*out == NULL)
            rc = kl_fail(err, KL_INTERNAL, "answer", "the MemberStatus answer does not decode");
    }
    free(ans);
    return rc;
}

typedef struct hs_phase {
    double stat_ns, sched_ns; /* daemon CPU over the phase */
    double p50_us;            /* client round trip */
} hs_phase;

/* n calls of Hello (hello) or MemberStatus; the daemon's CPU over them. 0 or -1. */
static int hs_run(hs_ctx *h, long pid, long n, bool hello, hs_phase *out)
{
    uint64_t *lat = calloc((size_t)n, sizeof *lat);
    double s0, c0, s1, c1;
    if (lat == NULL || proc_cpu(pid, &s0, &c0) != 0) {
        fprintf(stderr, "keyload-bench: cannot read the CPU time of pid %ld\n", pid);
        free(lat);
        return -1;
    }
    for (long i = 0; i < n; i++) {
        kl_err err;
        kl_err_clear(&err);
        int64_t t0 = now_ns();
        kl_code rc = hello ? hs_hello(h, &err) : hs_status(h, NULL, &err);
        lat[i] = (uint64_t)(now_ns() - t0);
        if (rc != KL_OK) {
            fprintf(stderr, "keyload-bench: %s %ld of %ld: %s (%s) %s\n", hello ? "Hello" : "MemberStatus",
                    i + 1, n, kl_code_name(rc), err.detail, err.message);
            free(lat);
            return -1;
        }
    }
    if (proc_cpu(pid, &s1, &c1) != 0) {
        free(lat);
        return -1;
    }
    qsort(lat, (size_t)n, sizeof *lat, cmp_u64);
    out->stat_ns = s1 - s0;
    out->sched_ns = c0 < 0 || c1 < 0 ? -1 : c1 - c0;
    out->p50_us = pct(lat, (size_t)n, 50) / 1e3;
    free(lat);
    return 0;
}

static int run_handshake(const options *o)
{
    const kl_partition *p = kl_cluster_find_partition(&g_cluster, 0);
    const kl_member *m = NULL;
    int pid_of_node = 0;
    if (o->node != NULL)
        m = kl_cluster_find_node(&g_cluster, o->node, &pid_of_node);
    else if (p != NULL && p->member_count > 0)
        m = &p->members[0];
    if (m == NULL || !m->has_public_key) {
        fprintf(stderr, "keyload-bench: no such member in %s, or it has no public_key\n", o->cluster_file);
        return 1;
    }
    hs_ctx h = {.principal = o->principal, .cluster = g_cluster.name, .member_pk = m->public_key};
    kl_err err;
    kl_err_clear(&err);
    if (kl_keys_read_secret_file("principal key file", o->key_file, h.sk, sizeof h.sk, &err) != KL_OK) {
        fprintf(stderr, "keyload-bench: %s\n", err.message);
        return 1;
    }
    int rv = 1;
    Keyload__V1__MemberStatusAnswer *a = NULL, *b = NULL;
    if (kl_rpc_client_open(m->client_url, CONNECT_TIMEOUT_MS, 0, &h.c, &err) != KL_OK) {
        fprintf(stderr, "keyload-bench: cannot connect to %s: %s\n", m->client_url, err.message);
        sodium_memzero(h.sk, sizeof h.sk);
        return 1;
    }
    if (hs_status(&h, &a, &err) != KL_OK) {
        fprintf(stderr, "keyload-bench: MemberStatus of %s: %s\n", m->client_url, err.message);
        goto out;
    }
    h.partition = a->partition;
    h.member = a->member;
    keyload__v1__member_status_answer__free_unpacked(a, NULL);
    a = NULL;
    /* Warm-up (first allocations, the catalog's principal record in the cache). */
    hs_phase warm, st1, hel, st2;
    long w = o->handshakes < 50 ? o->handshakes : 50;
    if (hs_run(&h, o->pid, w, false, &warm) != 0 || hs_run(&h, o->pid, w, true, &warm) != 0)
        goto out;
    /* MemberStatus, Hello, MemberStatus: the baseline is the mean of the two around. */
    if (hs_run(&h, o->pid, o->handshakes, false, &st1) != 0 || hs_status(&h, &a, &err) != KL_OK ||
        hs_run(&h, o->pid, o->handshakes, true, &hel) != 0 || hs_status(&h, &b, &err) != KL_OK ||
        hs_run(&h, o->pid, o->handshakes, false, &st2) != 0) {
        if (err.code != KL_OK)
            fprintf(stderr, "keyload-bench: MemberStatus: %s\n", err.message);
        goto out;
    }
    double n = (double)o->handshakes;
    uint64_t hellos = b->hellos - a->hellos, hello_ns = b->hello_ns - a->hello_ns;
    double stat_status = (st1.stat_ns + st2.stat_ns) / 2, sched_status = (st1.sched_ns + st2.sched_ns) / 2;
    bool sched = st1.sched_ns >= 0 && st2.sched_ns >= 0 && hel.sched_ns >= 0;
    printf("handshake: n=%ld member=p%dm%llu pid=%ld hellos=%llu hello_loop_us=%.1f hello_p50_us=%.1f "
           "status_p50_us=%.1f hello_cpu_us=%.1f status_cpu_us=%.1f cpu_per_hello_us=%.1f "
           "sched_hello_us=%.1f sched_status_us=%.1f sched_per_hello_us=%.1f clk_tck=%ld\n",
           o->handshakes, h.partition, (unsigned long long)h.member, o->pid, (unsigned long long)hellos,
           hellos ? (double)hello_ns / (double)hellos / 1e3 : 0.0, hel.p50_us, (st1.p50_us + st2.p50_us) / 2,
           hel.stat_ns / n / 1e3, stat_status / n / 1e3, (hel.stat_ns - stat_status) / n / 1e3,
           sched ? hel.sched_ns / n / 1e3 : -1.0, sched ? sched_status / n / 1e3 : -1.0,
           sched ? (hel.sched_ns - sched_status) / n / 1e3 : -1.0, (long)sysconf(_SC_CLK_TCK));
    fflush(stdout);
    rv = hellos == (uint64_t)o->handshakes ? 0 : 1;
    if (rv != 0)
        fprintf(stderr, "keyload-bench: the member counted %llu Hellos for %ld sent\n",
                (unsigned long long)hellos, o->handshakes);
out:
    if (a != NULL)
        keyload__v1__member_status_answer__free_unpacked(a, NULL);
    if (b != NULL)
        keyload__v1__member_status_answer__free_unpacked(b, NULL);
    kl_rpc_client_close(h.c);
    sodium_memzero(h.sk, sizeof h.sk);
    return rv;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: keyload-bench [--url URL] [--clients N] [--batch-size B] [--seconds S | --ops N]\n"
            "                     [--body-size BYTES] [--queue NAME] [--warmup S] [--timeout-ms MS] [--read]\n"
            "       keyload-bench --fsync-probe DIR [--samples N]\n"
            "       keyload-bench --leader-of URL,URL,... | --wait-caught-up URL,URL,...\n"
            "       keyload-bench --failover --url URL,URL,... --pid-dir DIR [--run N] [--attempt-ms MS] [--queue NAME]\n"
            "       keyload-bench --cluster FILE --principal ID --key FILE [--database TENANT/DB] [bench options]\n"
            "       keyload-bench --handshake N --cluster FILE --principal ID --key FILE --pid PID [--node pPmM]\n"
            "       keyload-bench --transfer --cluster FILE --principal ID --key FILE --database TENANT/DB\n"
            "                     --queue SOURCE --dest-queue DEST [--clients N] [--seconds S] [--lane-every N]\n"
            "       keyload-bench --coord-create N --cluster FILE --principal ID --key FILE --database TENANT/DB\n"
            "                     --queue SOURCE --dest-queue DEST [--clients C] [--lane-every L] [--lane-tag TAG]\n"
            "                     [--drain-seconds S] [--rate R] [--no-wait]\n"
            "The bench and --transfer also take --lat-out FILE; the bench --cpu-pids PID,PID,...\n"
            "URL may be a comma-separated list of the members of one partition (at most %d).\n",
            MAX_URLS);
}

/* Splits a comma-separated URL list (modified in place) into o->urls. */
static int parse_urls(char *list, options *o)
{
    o->n_urls = 0;
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        if (o->n_urls == MAX_URLS || strlen(t) >= URL_MAX)
            return -1;
        o->urls[o->n_urls++] = t;
    }
    if (o->n_urls == 0)
        return -1;
    o->url = o->urls[0];
    return 0;
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* --cpu-pids: a comma-separated list of at most MAX_URLS pids (modified in place). */
static int parse_pids(char *list, options *o)
{
    o->n_cpu_pids = 0;
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        long v;
        if (o->n_cpu_pids == MAX_URLS || parse_int(t, 2, 1L << 30, &v) != 0)
            return -1;
        o->cpu_pids[o->n_cpu_pids++] = v;
    }
    return o->n_cpu_pids > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    options o = {.url = "tcp://127.0.0.1:7401", .queue = "bench", .clients = 1, .batch_size = 1,
                 .seconds = 5, .warmup = 0.5, .body_size = 100, .timeout_ms = 10000, .samples = 200,
                 .attempt_ms = 500, .lane_every = 200, .drain_s = 120};
    o.urls[0] = o.url;
    o.n_urls = 1;
    static const struct option lo[] = {
        {"url", required_argument, NULL, 'u'},        {"clients", required_argument, NULL, 'c'},
        {"batch-size", required_argument, NULL, 'b'}, {"seconds", required_argument, NULL, 's'},
        {"ops", required_argument, NULL, 'o'},        {"fsync-probe", required_argument, NULL, 'f'},
        {"samples", required_argument, NULL, 'n'},    {"body-size", required_argument, NULL, 'B'},
        {"queue", required_argument, NULL, 'q'},      {"warmup", required_argument, NULL, 'w'},
        {"timeout-ms", required_argument, NULL, 't'}, {"help", no_argument, NULL, 'h'},
        {"read", no_argument, NULL, 'r'},             {"leader-of", required_argument, NULL, 'L'},
        {"wait-caught-up", required_argument, NULL, 'W'}, {"failover", no_argument, NULL, 'F'},
        {"pid-dir", required_argument, NULL, 'P'},    {"run", required_argument, NULL, 'R'},
        {"attempt-ms", required_argument, NULL, 'A'},
        {"cluster", required_argument, NULL, 'C'},    {"principal", required_argument, NULL, 'p'},
        {"key", required_argument, NULL, 'k'},        {"database", required_argument, NULL, 'd'},
        {"handshake", required_argument, NULL, 'H'},  {"pid", required_argument, NULL, 'i'},
        {"node", required_argument, NULL, 'N'},
        {"transfer", no_argument, NULL, 'X'},         {"dest-queue", required_argument, NULL, 'D'},
        {"lane-every", required_argument, NULL, 'E'},
        {"coord-create", required_argument, NULL, 'Z'}, {"lane-tag", required_argument, NULL, 'T'},
        {"drain-seconds", required_argument, NULL, 'G'}, {"no-wait", no_argument, NULL, 'Y'},
        {"rate", required_argument, NULL, 'V'},
        {"lat-out", required_argument, NULL, 'l'},    {"cpu-pids", required_argument, NULL, 'U'},
        {NULL, 0, NULL, 0}};
    int ch, li = -1;
    long v;
    char *end;
    while ((li = -1, ch = getopt_long(argc, argv, "", lo, &li)) != -1) {
        switch (ch) {
        case 'u':
        case 'L':
        case 'W':
            if (parse_urls(optarg, &o) != 0)
                goto bad;
            if (ch != 'u')
                o.mode = ch == 'L' ? MODE_LEADER : MODE_CAUGHT_UP;
            break;
        case 'F': o.mode = MODE_FAILOVER; break;
        case 'P': o.pid_dir = optarg; break;
        case 'R':
            if (parse_int(optarg, 0, 1000000, &v) != 0)
                goto bad;
            o.run = (int)v;
            break;
        case 'A':
            if (parse_int(optarg, 1, 600000, &v) != 0)
                goto bad;
            o.attempt_ms = (int)v;
            break;
        case 'q': o.queue = optarg; break;
        case 'C': o.cluster_file = optarg; break;
        case 'p': o.principal = optarg; break;
        case 'k': o.key_file = optarg; break;
        case 'd': o.database = optarg; break;
        case 'N': o.node = optarg; break;
        case 'X': o.mode = MODE_TRANSFER; break;
        case 'Z':
            if (parse_int(optarg, 1, 10000000, &v) != 0)
                goto bad;
            o.coord_transfers = v;
            o.mode = MODE_COORD;
            break;
        case 'T': o.lane_tag = optarg; break;
        case 'Y': o.no_wait = 1; break;
        case 'G':
        case 'V': {
            double d = strtod(optarg, &end);
            if (end == optarg || *end != '\0' || !(d > 0) || d > 1000000)
                goto bad;
            if (ch == 'G')
                o.drain_s = d;
            else
                o.coord_rate = d;
            break;
        }
        case 'D': o.dest_queue = optarg; break;
        case 'l': o.lat_out = optarg; break;
        case 'U':
            if (parse_pids(optarg, &o) != 0)
                goto bad;
            break;
        case 'E':
            if (parse_int(optarg, 1, 1000000, &v) != 0)
                goto bad;
            o.lane_every = v;
            break;
        case 'H':
            if (parse_int(optarg, 1, 1000000, &v) != 0)
                goto bad;
            o.handshakes = v;
            o.mode = MODE_HANDSHAKE;
            break;
        case 'i':
            if (parse_int(optarg, 2, 1L << 30, &v) != 0)
                goto bad;
            o.pid = v;
            break;
        case 'f': o.fsync_dir = optarg; o.mode = MODE_FSYNC; break;
        case 'c':
            if (parse_int(optarg, 1, 4096, &v) != 0)
                goto bad;
            o.clients = (int)v;
            break;
        case 'b':
            if (parse_int(optarg, 1, 1000, &v) != 0)
                goto bad;
            o.batch_size = (int)v;
            break;
        case 'o':
            if (parse_int(optarg, 1, 1L << 40, &v) != 0)
                goto bad;
            o.ops = v;
            break;
        case 'n':
            if (parse_int(optarg, 1, 1000000, &v) != 0)
                goto bad;
            o.samples = (int)v;
            break;
        case 'B':
            if (parse_int(optarg, 0, 1 << 20, &v) != 0)
                goto bad;
            o.body_size = (int)v;
            break;
        case 't':
            if (parse_int(optarg, 1, 3600000, &v) != 0)
                goto bad;
            o.timeout_ms = (int)v;
            break;
        case 's':
        case 'w': {
            double d = strtod(optarg, &end);
            if (end == optarg || *end != '\0' || !(d >= 0) || d > 86400 || (ch == 's' && d <= 0))
                goto bad;
            if (ch == 's')
                o.seconds = d;
            else
                o.warmup = d;
            break;
        }
        case 'r': o.read = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc)
        goto bad;
    if (sodium_init() < 0) {
        fprintf(stderr, "keyload-bench: libsodium failed to initialise\n");
        return 1;
    }
    if (o.mode == MODE_FAILOVER && (o.pid_dir == NULL || o.n_urls < 2)) {
        fprintf(stderr, "keyload-bench: --failover needs --url with the members and --pid-dir\n");
        usage(stderr);
        return 2;
    }
    if (o.mode == MODE_TRANSFER && (o.cluster_file == NULL || o.principal == NULL || o.key_file == NULL ||
                                    o.database == NULL || o.dest_queue == NULL || o.read)) {
        fprintf(stderr, "keyload-bench: --transfer needs --cluster, --principal, --key, --database, --queue "
                        "(the source) and --dest-queue\n");
        usage(stderr);
        return 2;
    }
    if (o.mode == MODE_COORD && (o.cluster_file == NULL || o.principal == NULL || o.key_file == NULL ||
                                 o.database == NULL || o.dest_queue == NULL || o.read)) {
        fprintf(stderr, "keyload-bench: --coord-create needs --cluster, --principal, --key, --database, --queue "
                        "(the source) and --dest-queue\n");
        usage(stderr);
        return 2;
    }
    if (o.mode != MODE_TRANSFER && o.mode != MODE_COORD && (o.principal != NULL || o.mode == MODE_HANDSHAKE) &&
        (o.cluster_file == NULL || o.principal == NULL || o.key_file == NULL ||
         (o.mode == MODE_HANDSHAKE && o.pid == 0) || (o.mode != MODE_BENCH && o.mode != MODE_HANDSHAKE) ||
         o.read)) {
        fprintf(stderr, "keyload-bench: --principal and --handshake need --cluster, --principal and --key "
                        "(--handshake also --pid); --read is unsealed only\n");
        usage(stderr);
        return 2;
    }
    if (o.cluster_file != NULL) {
        kl_err err;
        if (kl_cluster_load(o.cluster_file, NULL, &g_cluster, &err) != KL_OK) {
            fprintf(stderr, "keyload-bench: %s\n", err.message);
            return 2;
        }
        /* The sealed bench talks to partition 0's members (every bench cluster's only one). */
        const kl_partition *p0 = kl_cluster_find_partition(&g_cluster, 0);
        if (p0 == NULL || p0->member_count < 1 || p0->member_count > MAX_URLS) {
            fprintf(stderr, "keyload-bench: %s: partition 0 needs 1..%d members\n", o.cluster_file, MAX_URLS);
            return 2;
        }
        if (o.mode == MODE_BENCH) {
            o.n_urls = p0->member_count;
            for (int i = 0; i < p0->member_count; i++)
                o.urls[i] = p0->members[i].client_url;
            o.url = o.urls[0];
        }
    }
    signal(SIGPIPE, SIG_IGN);
    switch (o.mode) {
    case MODE_FSYNC: return fsync_probe(&o);
    case MODE_LEADER: return run_leader_of(&o);
    case MODE_CAUGHT_UP: return run_wait_caught_up(&o);
    case MODE_FAILOVER: return run_failover(&o);
    case MODE_HANDSHAKE: return run_handshake(&o);
    case MODE_TRANSFER: return run_transfer(&o);
    case MODE_COORD: {
        bench_coord_opts co = {.cluster_file = o.cluster_file, .principal = o.principal, .key_file = o.key_file,
                               .database = o.database, .queue = o.queue, .dest_queue = o.dest_queue,
                               .lane_tag = o.lane_tag, .transfers = o.coord_transfers, .clients = o.clients,
                               .lane_every = o.lane_every, .body_size = o.body_size, .timeout_ms = o.timeout_ms,
                               .drain_s = o.drain_s, .rate = o.coord_rate, .no_wait = o.no_wait != 0};
        return bench_coord_run(&co);
    }
    default: return run_bench(&o);
    }
bad:
    if (li >= 0)
        fprintf(stderr, "keyload-bench: bad value for --%s: %s\n", lo[li].name, optarg);
    else
        fprintf(stderr, "keyload-bench: unexpected argument %s\n", argv[optind]);
    usage(stderr);
    return 2;
}
