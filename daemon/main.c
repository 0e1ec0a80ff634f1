/* keyloadd: one replica of one partition (ARCHITECTURE.md "Processes").
 *
 *   keyloadd --cluster FILE --node pPmM [--data DIR] [--var DIR]
 *            [--cluster-secret FILE] [--member-key FILE] [--init-store]
 *            [--metrics-addr HOST:PORT] [--metrics-token-file FILE]
 *   keyloadd keygen ...          key files (daemon/keygen.h)
 *
 * Keys (common/keys.h) are read and checked before anything else starts: a member key
 * must match the member's public_key in the cluster file, and a member the cluster file
 * gives a public_key must be started with --member-key. A refusal exits 2. Keys stay in
 * memory only and are never logged.
 *
 * The store records the cluster (name and secret-derived id), partition and member it
 * belongs to; another member's store is refused (exit 2). A directory without a store is
 * refused (exit 2) unless --init-store is given: only a member's very first start may
 * create one, because a member whose disk was wiped has forgotten its votes. --init-store on
 * a store that is already this member's changes nothing.
 *
 * Threads: the libuv loop is the executor and owns all partition state, and serves the
 * client port and the peer links itself on numeric addresses (common/rpc_tcp.c,
 * daemon/repl/peer_tcp.c; nng threads only for a client port on a host name); the
 * catalog tail's calls go through common/rpc_direct.c's I/O thread; the replication driver's
 * synced log writes run on libuv's thread pool, one at a time, and report back to the loop.
 * SIGTERM/SIGINT stop accepting requests, stop replication (letting an in-flight write
 * finish), answer what is left UNKNOWN_WRITE_OUTCOME and close the store, or exit after
 * STOP_GRACE_MS whatever is still pending (as safe as kill -9). A failed log write
 * ends the process at once with exit code 1 (repl_fatal); a failed apply stops it the same
 * way as a signal, with exit code 1. Recovery on restart re-applies the durable log. */
#include "common/clock.h"
#include "common/cluster.h"
#include "common/failpoint.h"
#include "common/keys.h"
#include "common/log.h"
#include "common/metrics_http.h"
#include "common/rpc.h"
#include "daemon/keygen.h"
#include "daemon/metrics.h"
#include "daemon/node.h"
#include "daemon/restore.h"
#include "daemon/notify.h"
#include "daemon/repl/driver.h"
#include "daemon/repl/trace.h"
#include "daemon/rpc/serve.h"
#include "daemon/rpc/sessions.h"
#include "daemon/rpc/tailer.h"
#include "daemon/store/store.h"

#include <errno.h>
#include <getopt.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <sodium.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

typedef struct daemon_state {
    uv_loop_t *loop;
    kl_store *store;
    kl_node *node;
    kl_repl *repl;
    kl_service service;
    kl_tailer *tailer;           /* data partitions only */
    uint64_t catalog_version;    /* applied here, as last seen */
    kl_rpc_server *rpc;
    uv_signal_t sigterm, sigint;
    bool stopping;
    int exit_code;
    kl_keys *keys;    /* cluster secret and member key pair, in memory only */
    const char *data_dir;
    uint64_t disk_reserve;       /* bytes that must stay free for a batch to be admitted */
    int64_t disk_checked_ms;     /* monotonic time of the last statvfs */
    uint64_t disk_free;          /* bytes free for unprivileged writers at that time */
    bool disk_low;
    uv_prepare_t flush_prep;     /* proposes the node's open group before the loop waits */
    uv_check_t flush_check;      /* ... or right after the poll that evaluated its batches */
    bool flush_prep_ready;
    kl_dmetrics metrics;         /* loop thread only (daemon/metrics.h) */
    kl_metrics_http *metrics_http; /* the member's "metrics" endpoint, if any */
} daemon_state;

static int64_t clock_ms(void *ctx)
{
    (void)ctx;
    return kl_clock_ms(CLOCK_REALTIME);
}

static int64_t boot_ns(void *ctx)
{
    (void)ctx;
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void random_bytes(uint8_t *buf, size_t n) { randombytes_buf(buf, n); }

static void begin_stop(daemon_state *d);

/* ---- the node's view of the log ---- */

static void node_next(void *ctx, uint64_t *index, uint64_t *term, bool *serving)
{
    daemon_state *d = ctx;
    kl_repl_next(d->repl, index, term, serving);
}

/* Free space is read at most every DISK_CHECK_MS: one statvfs per batch would cost more
 * than the check is worth, and space is only foreseen, not reserved, either way. */
#define DISK_CHECK_MS 250
#define DISK_RESERVE_MB_DEFAULT 64

static int64_t mono_ms(void)
{
    return kl_clock_ms(CLOCK_MONOTONIC);
}

/* A batch is refused before it is proposed while the data directory's file system has
 * less than the reserve free: a write that does hit ENOSPC ends the member (repl_fatal),
 * so a full disk is better met with a retryable refusal. Served again once space returns. */
static kl_code node_admit(void *ctx, kl_err *err)
{
    daemon_state *d = ctx;
    int64_t now = mono_ms();
    if (d->disk_checked_ms == 0 || now - d->disk_checked_ms >= DISK_CHECK_MS) {
        struct statvfs sv;
        d->disk_checked_ms = now;
        if (statvfs(d->data_dir, &sv) != 0)
            return KL_OK; /* unknown: the write itself will tell */
        d->disk_free = (uint64_t)sv.f_bavail * sv.f_frsize;
        bool low = d->disk_free < d->disk_reserve;
        if (low != d->disk_low)
            kl_log(low ? KL_LOG_WARN : KL_LOG_INFO, low ? "disk full: refusing writes" : "disk space back: writing again",
                   "data=%s free_mb=%llu reserve_mb=%llu", d->data_dir,
                   (unsigned long long)(d->disk_free >> 20), (unsigned long long)(d->disk_reserve >> 20));
        d->disk_low = low;
    }
    if (!d->disk_low)
        return KL_OK;
    return kl_fail(err, KL_UNAVAILABLE, "disk_full",
                   "the leader's data directory has %llu MiB free, below its reserve of %llu MiB "
                   "(--disk-reserve-mb); nothing was written; retry once space is freed",
                   (unsigned long long)(d->disk_free >> 20), (unsigned long long)(d->disk_reserve >> 20));
}

/* Batches evaluated in one loop turn share one log entry. A batch evaluated in the poll
 * phase (a client's frame) is proposed in the check phase right after it, with every batch
 * that poll evaluated: waiting for the next turn's prepare phase put the timers and the
 * delivery of peer frames (acknowledgements, applies) of that turn before the proposal
 * (ARCHITECTURE.md "Write path", step 8, has the figures). A batch evaluated in any other
 * phase (a timer, a delivery) is proposed in the prepare phase, before the loop may wait
 * for I/O. Whichever of the two runs first proposes and stops both. */
static void flush_group(daemon_state *d)
{
    uv_prepare_stop(&d->flush_prep);
    uv_check_stop(&d->flush_check);
    if (d->node != NULL)
        kl_node_flush(d->node);
}

static void on_flush_prep(uv_prepare_t *h) { flush_group(h->data); }

static void on_flush_check(uv_check_t *h) { flush_group(h->data); }

static void node_flush_soon(void *ctx)
{
    daemon_state *d = ctx;
    if (d->flush_prep_ready && !d->stopping) {
        uv_prepare_start(&d->flush_prep, on_flush_prep);
        uv_check_start(&d->flush_check, on_flush_check);
    } else if (d->node != NULL) {
        kl_node_flush(d->node);
    }
}

static kl_code node_propose(void *ctx, const uint8_t *entry, size_t len)
{
    daemon_state *d = ctx;
    uint64_t leader;
    return kl_repl_propose(d->repl, entry, len, &leader);
}

/* ---- the driver's callbacks ---- */

static void repl_fatal(void *ctx, const kl_err *err);

static void repl_apply(void *ctx, const kl_raft_entry *e)
{
    daemon_state *d = ctx;
    kl_err err;
    if (d->node == NULL)
        return;
    if (kl_node_apply(d->node, e->index, e->term, e->len ? e->data : NULL, e->len, &err) != KL_OK) {
        kl_err first;
        /* An apply refused because the persist worker's log write just failed: that failure
         * is the cause, and it ends the process the same way, before its report arrives. */
        if (kl_store_first_failure(d->store, &first))
            repl_fatal(d, &first);
        KL_ERROR("apply failed; exiting so that recovery can re-apply the durable log",
                 "index=%llu detail=%s", (unsigned long long)e->index, err.detail);
        d->exit_code = 1;
        begin_stop(d);
        return;
    }
    kl_dmetrics_applied(&d->metrics, e->len);
    uint64_t version, changes;
    kl_node_catalog_status(d->node, &version, &changes);
    if (version != d->catalog_version) {
        d->catalog_version = version;
        if (d->tailer)
            kl_tailer_applied(d->tailer, version);
    }
    kl_service_applied(&d->service);
}

/* A batch is answered once its entry is committed, before this member applies it: the
 * applies that follow may wait for the leader's own log write, the answer need not. The
 * answers leave now, ahead of those applies. */
static void repl_committed(void *ctx, uint64_t term, uint64_t upto)
{
    daemon_state *d = ctx;
    if (d->node != NULL && kl_node_committed(d->node, term, upto) > 0)
        kl_rpc_server_flush(d->rpc);
}

static void repl_role(void *ctx, kl_raft_role role, uint64_t term, uint64_t leader, bool leader_ready)
{
    daemon_state *d = ctx;
    KL_INFO("role", "role=%s term=%llu leader=%llu serving=%d", kl_raft_role_name(role),
            (unsigned long long)term, (unsigned long long)leader, leader_ready);
    d->service.leader = leader;
    kl_dmetrics_role(&d->metrics, role == KL_RAFT_CANDIDATE, leader);
    if (d->node)
        kl_node_role(d->node, role == KL_RAFT_LEADER && leader_ready);
    kl_service_role(&d->service, role == KL_RAFT_LEADER);
    if (d->tailer)
        kl_tailer_set_serving(d->tailer, role == KL_RAFT_LEADER && leader_ready);
}

static void repl_read_ready(void *ctx, uint64_t read_ctx)
{
    kl_service_read_ready(&((daemon_state *)ctx)->service, read_ctx);
}

static void repl_read_dropped(void *ctx, uint64_t read_ctx)
{
    kl_service_read_dropped(&((daemon_state *)ctx)->service, read_ctx);
}

/* A failed log write or fsync ends the process at once, without closing the store: after a
 * failed fsync the kernel may have dropped the dirty pages and marked them clean, so nothing
 * this process still holds (memtables, page cache, the round it was writing) may be trusted,
 * written again, acknowledged or voted on. Restart recovers from what reached the disk. */
static void repl_fatal(void *ctx, const kl_err *err)
{
    (void)ctx;
    KL_ERROR("storage failure; exiting without another write so that recovery starts from the "
             "durable log", "detail=%s error=\"%s\"", err->detail, err->message);
    fflush(stdout);
    fflush(stderr);
    _exit(1);
}

/* ---- shutdown ---- */

/* How long an orderly stop may take before the process ends anyway. Some steps can block
 * well past it: nng 1.5.2's nng_close can hang (a client socket on a host name, which
 * closes on the loop thread), and a data partition's
 * catalog tail is joined only after its RPC returns (up to 2.5 s). Ending here is as safe
 * as kill -9, which the store is built for: the log is synced before anything is
 * acknowledged and recovery re-applies it. */
#define STOP_GRACE_MS 1500

static _Atomic bool stop_finished;

static void *stop_watchdog(void *arg)
{
    int code = *(const int *)arg; /* set before the stop began */
    struct timespec ts = {STOP_GRACE_MS / 1000, (STOP_GRACE_MS % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    if (atomic_load(&stop_finished))
        return NULL;
    KL_WARN("stop did not finish in time; exiting without waiting (recovery replays the log)",
            "grace_ms=%d exit_code=%d", STOP_GRACE_MS, code);
    fflush(stdout);
    fflush(stderr);
    _exit(code);
}

static void arm_stop_watchdog(int *exit_code)
{
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    if (pthread_create(&t, &attr, stop_watchdog, exit_code) != 0)
        KL_WARN("no stop watchdog thread; the stop may take longer", "grace_ms=%d", STOP_GRACE_MS);
    pthread_attr_destroy(&attr);
}

static void begin_stop(daemon_state *d)
{
    if (d->stopping)
        return;
    d->stopping = true;
    arm_stop_watchdog(&d->exit_code);
    kl_metrics_http_stop(d->metrics_http); /* before what a render reads goes away */
    d->metrics_http = NULL;
    if (d->rpc) {
        kl_rpc_server_stop(d->rpc);
        d->rpc = NULL;
        d->service.client_rpc = NULL;
    }
    kl_service_drop_reads(&d->service);
    kl_service_stop(&d->service);
    if (d->tailer) {
        kl_tailer_stop(d->tailer);
        d->tailer = NULL;
        d->service.tailer = NULL;
    }
    if (d->repl) {
        kl_repl_stop(d->repl);
        d->repl = NULL;
    }
    kl_node_close(d->node);
    d->node = NULL;
    if (d->flush_prep_ready) {
        uv_close((uv_handle_t *)&d->flush_prep, NULL);
        uv_close((uv_handle_t *)&d->flush_check, NULL);
    }
    d->flush_prep_ready = false;
    uv_close((uv_handle_t *)&d->sigterm, NULL);
    uv_close((uv_handle_t *)&d->sigint, NULL);
}

/* Tells a service manager (systemd Type=notify) about the member; a failure is logged and
 * otherwise ignored, because serving matters more than the manager's view of it. */
static void notify_manager(const char *state)
{
    kl_err err;
    kl_err_clear(&err);
    if (kl_notify(state, &err) != KL_OK)
        KL_WARN("notify failed", "detail=%s error=\"%s\"", err.detail, err.message);
}

static void on_signal(uv_signal_t *h, int signum)
{
    daemon_state *d = h->data;
    if (d->stopping)
        return;
    KL_INFO("stopping", "signal=%d", signum);
    notify_manager("STOPPING=1");
    begin_stop(d);
}

static int mkdirs(const char *path)
{
    char buf[KL_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0700) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return (mkdir(buf, 0700) != 0 && errno != EEXIST) ? -1 : 0;
}

/* Reads and checks the key files (see the top of this file). Returns 0, or -1 after printing
 * why the member may not start (naming the member and the file, never a key byte). */
static int load_keys(daemon_state *d, const char *node, const kl_member *me, const char *cluster_file,
                     const char *secret_file, const char *key_file)
{
    kl_err err;
    kl_err_clear(&err);
    if (key_file == NULL && me->has_public_key) {
        fprintf(stderr, "keyloadd: %s: cluster file %s records a public_key for this member, "
                        "so it must be started with --member-key FILE (its secret key)\n",
                node, cluster_file);
        return -1;
    }
    if (key_file != NULL && !me->has_public_key) {
        fprintf(stderr, "keyloadd: %s: cluster file %s has no public_key for this member, so "
                        "member key file %s cannot be checked; add the member's public_key\n",
                node, cluster_file, key_file);
        return -1;
    }
    if (key_file == NULL && secret_file == NULL)
        return 0;
    if (kl_keys_new(&d->keys, &err) != KL_OK ||
        (secret_file != NULL && kl_keys_load_cluster_secret(d->keys, secret_file, &err) != KL_OK) ||
        (key_file != NULL && kl_keys_load_member_key(d->keys, key_file, node, me->public_key, &err) != KL_OK)) {
        fprintf(stderr, "keyloadd: %s: %s\n", node, err.message);
        kl_keys_free(d->keys);
        d->keys = NULL;
        return -1;
    }
    KL_INFO("keys loaded", "node=%s cluster_secret=%s member_key=%s", node,
            secret_file ? secret_file : "-", key_file ? key_file : "-");
    return 0;
}

/* Opens the member's store and checks whose it is. Returns 0, or the exit code after
 * printing why: 2 when the store is not this member's to serve (another member's, none yet
 * without --init-store, corrupt), 1 when the disk failed. */
static int open_store(daemon_state *d, const kl_cluster *cluster, int partition, const kl_member *me,
                      const char *node, const char *data_dir, bool init_store)
{
    uint8_t cluster_id[16];
    bool has_secret = d->keys != NULL && d->keys->has_cluster_secret;
    if (has_secret)
        kl_store_cluster_id(d->keys->cluster_secret, sizeof d->keys->cluster_secret, cluster_id);
    kl_store_identity id = {.cluster = cluster->name, .cluster_id = has_secret ? cluster_id : NULL,
                            .partition = (uint32_t)partition, .member = (uint64_t)me->id};
    kl_store_options so;
    kl_store_options_default(&so);
    so.init = init_store;
    so.identity = &id;
    kl_err err;
    kl_err_clear(&err);
    kl_code rc = kl_store_open(data_dir, &so, &d->store, &err);
    if (rc == KL_OK)
        return 0;
    fprintf(stderr, "keyloadd: %s: %s\n", node, err.message);
    KL_ERROR("store refused", "node=%s data=%s detail=%s", node, data_dir, err.detail);
    return rc == KL_FAILED_PRECONDITION ? 2 : 1;
}

static void usage(void)
{
    fprintf(stderr, "usage: keyloadd --cluster FILE --node pPmM [--data DIR] [--var DIR]\n"
                    "                [--cluster-secret FILE] [--member-key FILE] [--init-store]\n"
                    "                [--disk-reserve-mb N] [--metrics-addr HOST:PORT]\n"
                    "                [--metrics-token-file FILE] [--restore-from DIR/partition-P]\n"
                    "                [--join] [--repl-trace N]\n"
                    "       keyloadd keygen --help\n"
                    "  --init-store  create this member's store in an empty data directory. Pass it\n"
                    "                on the member's first start only: without it an empty or wiped\n"
                    "                directory is refused (exit 2), because a wiped member cannot\n"
                    "                know which terms it voted in (README: Recovering a member).\n"
                    "                On a store that is already this member's it changes nothing.\n"
                    "  --restore-from D  with --init-store: install the backup of this member's\n"
                    "                partition from D (keyload admin backup) into the new store, then\n"
                    "                serve it (README: Backup and restore).\n"
                    "  --disk-reserve-mb N  refuse batches (UNAVAILABLE, detail disk_full) while the\n"
                    "                data directory's file system has less than N MiB free\n"
                    "                (default %d); writing resumes once space returns.\n"
                    "  --metrics-addr HOST:PORT  serve Prometheus /metrics there instead of the\n"
                    "                member's \"metrics\" in the cluster file. HOST is an IP address or\n"
                    "                localhost; an address that is not loopback (127.0.0.0/8, ::1,\n"
                    "                localhost) needs a token file, else keyloadd exits 2.\n"
                    "  --metrics-token-file FILE  the bearer token scrapers must send, instead of\n"
                    "                the member's \"metrics_token_file\" in the cluster file.\n"
                    "  --join        this member is new to its partition (with --init-store on an\n"
                    "                empty directory): the partition's other members in the cluster\n"
                    "                file are the running ones it first contacts; it takes their log\n"
                    "                once a membership change made it a learner, and never\n"
                    "                campaigns before a configuration makes it a voter. Keep passing\n"
                    "                it until the change finished (docs/MEMBERSHIP.md).\n"
                    "  --repl-trace N  log the replication stamps of every N-th log index, one\n"
                    "                \"repl trace\" line per member and index (0, the default: off;\n"
                    "                at most %u). A diagnostic for tests/bench/repl_trace.sh.\n",
            DISK_RESERVE_MB_DEFAULT, KL_TRACE_EVERY_MAX);
}

typedef struct daemon_args {
    const char *cluster_file, *node_name, *data_dir, *var_root;
    const char *cluster_secret_file, *member_key_file;
    const char *metrics_addr, *metrics_token_file; /* NULL: the cluster file's */
    bool init_store;
    bool join;
    uint64_t disk_reserve_mb;
    const char *restore_from;
    uint32_t repl_trace; /* --repl-trace: 0 = off */
} daemon_args;

/* Returns -1 to go on, else the exit code (0 after --help, 2 on a usage error). */
static int parse_args(int argc, char **argv, daemon_args *a)
{
    *a = (daemon_args){.var_root = "var", .disk_reserve_mb = DISK_RESERVE_MB_DEFAULT};
    static const struct option opts[] = {
        {"cluster", required_argument, NULL, 'c'}, {"node", required_argument, NULL, 'n'},
        {"data", required_argument, NULL, 'd'},    {"var", required_argument, NULL, 'v'},
        {"cluster-secret", required_argument, NULL, 's'},
        {"member-key", required_argument, NULL, 'k'},
        {"init-store", no_argument, NULL, 'i'},
        {"disk-reserve-mb", required_argument, NULL, 'r'},
        {"metrics-addr", required_argument, NULL, 'm'},
        {"metrics-token-file", required_argument, NULL, 't'},
        {"restore-from", required_argument, NULL, 'R'},
        {"join", no_argument, NULL, 'j'},
        {"repl-trace", required_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'c': a->cluster_file = optarg; break;
        case 'n': a->node_name = optarg; break;
        case 'd': a->data_dir = optarg; break;
        case 'v': a->var_root = optarg; break;
        case 's': a->cluster_secret_file = optarg; break;
        case 'k': a->member_key_file = optarg; break;
        case 'i': a->init_store = true; break;
        case 'j': a->join = true; break;
        case 'm': a->metrics_addr = optarg; break;
        case 't': a->metrics_token_file = optarg; break;
        case 'R': a->restore_from = optarg; break;
        case 'r': {
            char *end;
            errno = 0;
            unsigned long long mb = strtoull(optarg, &end, 10);
            if (errno != 0 || end == optarg || *end != '\0' || mb > (1ull << 30)) {
                fprintf(stderr, "keyloadd: --disk-reserve-mb must be a number of MiB (0..%llu)\n", 1ull << 30);
                return 2;
            }
            a->disk_reserve_mb = mb;
            break;
        }
        case 'T': {
            char *end;
            errno = 0;
            unsigned long n = strtoul(optarg, &end, 10);
            if (errno != 0 || end == optarg || *end != '\0' || optarg[0] == '-' || n > KL_TRACE_EVERY_MAX) {
                fprintf(stderr, "keyloadd: --repl-trace must be a number of log indexes (0..%u)\n",
                        KL_TRACE_EVERY_MAX);
                return 2;
            }
            a->repl_trace = (uint32_t)n;
            break;
        }
        case 'h': usage(); return 0;
        default: usage(); return 2;
        }
    }
    if (a->restore_from != NULL && !a->init_store) {
        fprintf(stderr, "keyloadd: --restore-from needs --init-store (a restore makes a new member's store)\n");
        return 2;
    }
    if (a->cluster_file == NULL || a->node_name == NULL) {
        usage();
        return 2;
    }
    return -1;
}

/* --metrics-addr and --metrics-token-file replace the member's cluster-file values (m is a
 * member of the caller's own cluster copy) under the same rules (common/metrics.h
 * kl_metrics_endpoint_check); a refusal exits 2 before any store is opened. */
static int metrics_override(const daemon_args *a, kl_member *m, kl_err *err)
{
    if (a->metrics_addr == NULL && a->metrics_token_file == NULL)
        return -1;
    if ((a->metrics_addr != NULL &&
         snprintf(m->metrics_addr, sizeof m->metrics_addr, "%s", a->metrics_addr) >= (int)sizeof m->metrics_addr) ||
        (a->metrics_token_file != NULL &&
         snprintf(m->metrics_token_file, sizeof m->metrics_token_file, "%s", a->metrics_token_file) >=
             (int)sizeof m->metrics_token_file)) {
        fprintf(stderr, "keyloadd: --metrics-addr must be under %d bytes, --metrics-token-file under %d\n",
                KL_URL_MAX, KL_PATH_MAX);
        return 2;
    }
    if (kl_metrics_endpoint_check(m->metrics_addr, m->metrics_token_file,
                                  a->metrics_addr != NULL ? "--metrics-addr" : "the cluster file's metrics",
                                  "--metrics-token-file (or the member's metrics_token_file)", err) != KL_OK) {
        fprintf(stderr, "keyloadd: %s\n", err->message);
        return 2;
    }
    return -1;
}

/* Failpoints, libsodium, the cluster file and this member's place in it. Returns -1 to go
 * on, else the exit code. */
static int load_cluster(const daemon_args *a, kl_cluster *cluster, int *partition,
                        const kl_member **me, kl_err *err)
{
    if (kl_failpoint_init(err) != KL_OK) {
        fprintf(stderr, "keyloadd: %s\n", err->message);
        return 2;
    }
    if (sodium_init() < 0) {
        fprintf(stderr, "keyloadd: libsodium failed to initialise\n");
        return 1;
    }
    if (kl_cluster_load(a->cluster_file, a->var_root, cluster, err) != KL_OK) {
        fprintf(stderr, "keyloadd: %s\n", err->message);
        return 2;
    }
    *me = kl_cluster_find_node(cluster, a->node_name, partition);
    if (*me == NULL) {
        fprintf(stderr, "keyloadd: node '%s' is not in cluster file %s (names look like p0m1)\n",
                a->node_name, a->cluster_file);
        return 2;
    }
    return metrics_override(a, (kl_member *)*me, err);
}

/* The node over the open store; the node copies its config and io. */
static kl_code open_node(daemon_state *d, const kl_cluster *cluster, int partition,
                         const char *data_dir, uint64_t disk_reserve_mb, kl_err *err)
{
    kl_node_config nc = {.partition = partition, .partition_count = cluster->partition_count,
                         .limits = cluster->limits,
                         .max_pending_bytes = 256u << 20, .max_pending_batches = 8192,
                         .cluster_secret = d->keys != NULL && d->keys->has_cluster_secret ? d->keys->cluster_secret : NULL,
                         .insecure_local_admin = cluster->insecure_local_admin,
                         .outcome_retention_ms = cluster->timers.outcome_retention_ms};
    d->data_dir = data_dir;
    d->disk_reserve = disk_reserve_mb << 20;
    kl_node_io io = {.ctx = d, .next = node_next, .propose = node_propose, .admit = node_admit,
                     .clock_ms = clock_ms, .boot_ns = boot_ns,
                     .random = random_bytes, .flush_soon = node_flush_soon};
    return kl_node_open(d->store, &nc, &io, &d->node, err);
}

static void repl_config(kl_repl_config *rcfg, const kl_cluster *cluster, int partition,
                        const kl_partition *part, const kl_member *me, const daemon_state *d,
                        bool join)
{
    *rcfg = (kl_repl_config){.cluster = cluster->name, .partition = partition, .self = (uint64_t)me->id,
                           .replica_count = (uint32_t)cluster->replica_count,
                           .tick_ms = cluster->timers.tick_ms, .election_ms = cluster->timers.election_ms,
                           .heartbeat_ms = cluster->timers.heartbeat_ms,
                           .max_frame = cluster->limits.max_frame_bytes + KL_REPL_FRAME_OVERHEAD};
    for (int i = 0; i < part->member_count; i++) {
        rcfg->members[i] = (uint64_t)part->members[i].id;
        rcfg->peer_urls[i] = part->members[i].peer_url[0] ? part->members[i].peer_url : NULL;
        rcfg->public_keys[i] = part->members[i].has_public_key ? part->members[i].public_key : NULL;
    }
    /* Replication links authenticate with member keys when this member has one and every
       member of the partition has a public_key (daemon/repl/peer.h). */
    rcfg->member_secret = d->keys != NULL && d->keys->has_member_key ? d->keys->member_secret : NULL;
    rcfg->n_members = (size_t)part->member_count;
    if (join) { /* the seed is the others: this member is not in the configuration yet */
        size_t k = 0;
        for (size_t i = 0; i < rcfg->n_members; i++) {
            if (rcfg->members[i] == (uint64_t)me->id)
                continue;
            rcfg->members[k] = rcfg->members[i];
            rcfg->peer_urls[k] = rcfg->peer_urls[i];
            rcfg->public_keys[k] = rcfg->public_keys[i];
            k++;
        }
        rcfg->n_members = k;
        /* The file's replica_count may count this member (a 3-of-3 partition replacing a dead
           member lists the two survivors and itself); the seed is only where to find the
           others, and the configuration comes from the leader's snapshot and log. */
        if (rcfg->replica_count > k && k > 0)
            rcfg->replica_count = (uint32_t)k;
        rcfg->join = true;
        rcfg->join_peer_url = me->peer_url;
    }
    rcfg->peer_max = cluster->conn.peer_max;
    rcfg->peer_idle_ms = cluster->conn.peer_idle_ms;
    rcfg->snapshot_threshold = cluster->snapshot.threshold_entries;
    rcfg->snapshot_trailing = cluster->snapshot.trailing_entries;
}

/* Renders the member's page on the loop thread (common/metrics_http.h hands it over). */
static void render_metrics(void *ctx, kl_metrics_buf *out)
{
    daemon_state *d = ctx;
    kl_dmetrics_src src = {.m = &d->metrics, .node = d->node, .repl = d->repl, .store = d->store,
                           .sessions = d->service.sessions};
    kl_dmetrics_render(&src, out);
}

/* The member's "metrics" endpoint when the cluster file gives one; 1 when it cannot start. */
static int start_metrics(daemon_state *d, int partition, const kl_member *me, kl_err *err)
{
    d->metrics.partition = partition;
    d->metrics.member = (uint64_t)me->id;
    if (me->metrics_addr[0] == '\0')
        return 0;
    if (kl_metrics_http_start(d->loop, me->metrics_addr, me->metrics_token_file[0] ? me->metrics_token_file : NULL,
                              render_metrics, d, &d->metrics_http, err) != KL_OK) {
        fprintf(stderr, "keyloadd: %s\n", err->message);
        return 1;
    }
    return 0;
}

/* The sessions, the service, the catalog tailer (data partitions), replication and the
 * client port, in that order. On failure what was started is stopped again and 1 returned;
 * the caller still closes the node and the store. */
static int start_serving(daemon_state *d, kl_cluster *cluster, int partition, const kl_partition *part,
                         const kl_member *me, const kl_repl_config *rcfg,
                         const kl_repl_callbacks *cb, kl_err *err)
{
    d->service.node = d->node;
    d->service.store = d->store;
    d->service.cluster = cluster;
    d->service.partition = part;
    d->service.member_id = (uint64_t)me->id;
    d->service.trace_every = rcfg->trace_every;
    d->service.keys = d->keys;
    /* Sessions need the member key (Hello is signed with it); without it none exist. */
    if (d->keys != NULL && d->keys->has_member_key &&
        (kl_sessions_new(cluster->conn.sessions_max,
                         cluster->conn.sessions_max < KL_SESSIONS_PER_PRINCIPAL ? cluster->conn.sessions_max
                                                                                : KL_SESSIONS_PER_PRINCIPAL,
                         &d->service.sessions, err) != KL_OK ||
         kl_sessions_set_per_tenant(d->service.sessions, cluster->conn.sessions_per_tenant, err) != KL_OK)) {
        fprintf(stderr, "keyloadd: %s\n", err->message);
        goto fail_sessions;
    }
    kl_service_start(&d->service, d->loop);
    if (partition != 0 && kl_tailer_start(d->loop, cluster, partition, (uint64_t)me->id, d->keys, d->node,
                                              &d->tailer, err) != KL_OK) {
        fprintf(stderr, "keyloadd: %s\n", err->message);
        goto fail_tailer;
    }
    d->service.tailer = d->tailer;
    if (kl_repl_start(d->loop, d->store, rcfg, cb, &d->repl, err) != KL_OK) {
        fprintf(stderr, "keyloadd: %s\n", err->message);
        goto fail_repl;
    }
    d->service.repl = d->repl;
    size_t nmethods;
    const kl_rpc_method *methods = kl_service_methods(&nmethods);
    kl_rpc_server_config rc = {.listen_url = me->client_url, .methods = methods,
                               .method_count = nmethods, .owner = &d->service,
                               .max_frame = cluster->limits.max_frame_bytes, .contexts = KL_CLIENT_RPC_CONTEXTS,
                               .max_conns = (int)cluster->conn.client_max,
                               .idle_ms = (int)cluster->conn.client_idle_ms,
                               .on_refusal = kl_dmetrics_refusal_hook, .refusal_ctx = &d->metrics};
    if (kl_rpc_server_start(d->loop, &rc, &d->rpc, err) != KL_OK) {
        fprintf(stderr, "keyloadd: %s\n", err->message);
        goto fail_rpc;
    }
    d->service.client_rpc = d->rpc;
    if (start_metrics(d, partition, me, err) != 0)
        goto fail_metrics;
    return 0;

fail_metrics:
    kl_rpc_server_stop(d->rpc);
    d->rpc = NULL;
    d->service.client_rpc = NULL;
fail_rpc:
    kl_repl_stop(d->repl);
fail_repl:
    if (d->tailer)
        kl_tailer_stop(d->tailer);
fail_tailer:
    kl_service_stop(&d->service);
    uv_run(d->loop, UV_RUN_DEFAULT);
fail_sessions:
    kl_sessions_free(d->service.sessions);
    return 1;
}

/* Runs the loop until a signal stops it, then closes what is left; the exit code. */
static int serve(daemon_state *d, const kl_cluster *cluster, int partition, const kl_partition *part,
                 const kl_member *me, const char *node_name, const char *data_dir)
{
    uv_prepare_init(d->loop, &d->flush_prep);
    d->flush_prep.data = d;
    uv_check_init(d->loop, &d->flush_check);
    d->flush_check.data = d;
    d->flush_prep_ready = true;
    uv_signal_init(d->loop, &d->sigterm);
    uv_signal_init(d->loop, &d->sigint);
    d->sigterm.data = d->sigint.data = d;
    uv_signal_start(&d->sigterm, on_signal, SIGTERM);
    uv_signal_start(&d->sigint, on_signal, SIGINT);
    KL_INFO("ready", "node=%s partition=%d members=%d replica_count=%d listen=%s data=%s applied_index=%llu",
            node_name, partition, part->member_count, cluster->replica_count, me->client_url, data_dir,
            (unsigned long long)kl_store_applied_index(d->store));
    /* Started, not yet caught up: a rolling restart waits for catch-up separately
     * (`keyload cluster-status --wait-ready NODE`), since only the leader can judge it. */
    notify_manager("READY=1\nSTATUS=started; replicating");
    uv_run(d->loop, UV_RUN_DEFAULT);
    kl_store_close(d->store);
    uv_loop_close(d->loop);
    kl_sessions_free(d->service.sessions);
    kl_keys_free(d->keys);
    KL_INFO("stopped", "exit_code=%d", d->exit_code);
    atomic_store(&stop_finished, true);
    return d->exit_code;
}

/* RocksDB's memtables take their memory in 1 MiB blocks and free a whole memtable after each
 * flush. glibc's default thresholds (they adapt upwards from 128 KiB) hand such freed heap
 * back to the kernel, so each new memtable page-faults its memory in again, 4 KiB at a time
 * (an RF3 partition at 64 in flight, three members together, past its first seconds:
 * 0.2-0.3 minor faults per message, 0.13 with this).
 * Keeping blocks below 32 MiB (glibc's largest threshold) on the heap and trimming only
 * beyond 64 MiB free lets freed memtables serve the next ones. The member's memory stays
 * bounded by its peak, which its caches and memtable limits bound. */
static void tune_malloc(void)
{
#ifdef __GLIBC__
    if (mallopt(M_MMAP_THRESHOLD, 32 << 20) != 1 || mallopt(M_TRIM_THRESHOLD, 64 << 20) != 1)
        KL_WARN("malloc tuning refused", "detail=%s", "mallopt M_MMAP_THRESHOLD or M_TRIM_THRESHOLD");
#endif
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "keygen") == 0)
        return kl_keygen_main(argc - 1, argv + 1);
    daemon_args a;
    int prc = parse_args(argc, argv, &a);
    if (prc >= 0)
        return prc;
    const char *node_name = a.node_name, *data_dir = a.data_dir;
    kl_log_set_component("keyloadd");
    tune_malloc();
    /* A client or peer that goes away with answers owed makes a write to its socket fail
     * with EPIPE; libuv writes with write(2), which would also raise SIGPIPE and end the
     * member (systemd ignores SIGPIPE for its services, a shell does not). The write's
     * error closes that one connection instead. */
    signal(SIGPIPE, SIG_IGN);
    kl_err err;
    kl_err_clear(&err);
    static kl_cluster cluster;
    int partition;
    const kl_member *me;
    int lrc = load_cluster(&a, &cluster, &partition, &me, &err);
    if (lrc >= 0)
        return lrc;
    static daemon_state d;
    if (load_keys(&d, node_name, me, a.cluster_file, a.cluster_secret_file, a.member_key_file) != 0)
        return 2;
    if (data_dir == NULL)
        data_dir = me->data_dir;
    if (a.init_store && mkdirs(data_dir) != 0) {
        fprintf(stderr, "keyloadd: cannot create data directory %s: %s\n", data_dir, strerror(errno));
        kl_keys_free(d.keys);
        return 1;
    }

    d.loop = uv_default_loop();
    int orc = open_store(&d, &cluster, partition, me, node_name, data_dir, a.init_store);
    if (orc != 0) {
        kl_keys_free(d.keys);
        return orc;
    }
    uint64_t rindex, rterm;
    if (a.restore_from != NULL && kl_restore_install(d.store, a.restore_from, partition, &rindex, &rterm, &err) != KL_OK) {
        fprintf(stderr, "keyloadd: restore from %s refused (%s): %s\n", a.restore_from, err.detail, err.message);
        KL_ERROR("restore refused", "node=%s from=%s detail=%s", node_name, a.restore_from, err.detail);
        kl_store_close(d.store);
        kl_keys_free(d.keys);
        return 2;
    }
    if (open_node(&d, &cluster, partition, data_dir, a.disk_reserve_mb, &err) != KL_OK) {
        fprintf(stderr, "keyloadd: %s\n", err.message);
        goto fail_node;
    }
    const kl_partition *part = kl_cluster_find_partition(&cluster, partition);
    kl_repl_config rcfg;
    repl_config(&rcfg, &cluster, partition, part, me, &d, a.join);
    rcfg.trace_every = a.repl_trace;
    kl_repl_callbacks cb = {.ctx = &d, .apply = repl_apply, .committed = repl_committed, .role = repl_role,
                            .read_ready = repl_read_ready, .read_dropped = repl_read_dropped,
                            .fatal = repl_fatal};
    if (start_serving(&d, &cluster, partition, part, me, &rcfg, &cb, &err) != 0) {
        kl_node_close(d.node);
        goto fail_node;
    }
    return serve(&d, &cluster, partition, part, me, node_name, data_dir);

fail_node:
    kl_store_close(d.store);
    kl_keys_free(d.keys);
    return 1;
}
