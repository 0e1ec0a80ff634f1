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
 * Output lines start with "fsync:" or "bench:" so scripts can pick them out. Exit code 0
 * when the run completed (errors are counted and reported, not fatal), 1 when it could
 * not run at all (cannot connect, cannot create the queue), 2 on bad usage. */
#include "common/guid.h"
#include "common/rpc.h"
#include "common/status.h"
#include "keyload/v1/queue.pb-c.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
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
#define CONNECT_TIMEOUT_MS 5000

typedef struct options {
    const char *url;
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
} options;

typedef struct lat_vec {
    uint64_t *v;             /* nanoseconds */
    size_t n, cap;
} lat_vec;

typedef struct client_state {
    pthread_t thread;
    int id;
    const options *opt;
    lat_vec lat;
    uint64_t ok;             /* measured, answered OK */
    uint64_t errors;         /* measured, answered with an error */
    uint64_t total;          /* every request sent, warm-up included */
    kl_code first_err;
    char first_err_msg[KL_ERR_MESSAGE_MAX + KL_ERR_DETAIL_MAX + 8];
    int open_failed;
} client_state;

static atomic_int g_go;               /* start barrier */
static atomic_int g_stop;
static _Atomic int64_t g_measure_from; /* monotonic ns; requests started earlier are warm-up */
static _Atomic int64_t g_measure_to;   /* monotonic ns; 0 = open */
static atomic_long g_ops_left;

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

static int create_queue(const options *o)
{
    kl_err err;
    kl_err_clear(&err);
    kl_rpc_client *c;
    if (kl_rpc_client_open(o->url, CONNECT_TIMEOUT_MS, 0, &c, &err) != KL_OK) {
        fprintf(stderr, "keyload-bench: cannot connect to %s: %s\n", o->url, err.message);
        return -1;
    }
    Keyload__V1__QueueLaneRef q;
    lane_ref(&q, o->queue);
    Keyload__V1__QueueLimits lim = KEYLOAD__V1__QUEUE_LIMITS__INIT;
    lim.max_messages = 100000000ULL;
    lim.max_bytes = 100ULL << 30;
    Keyload__V1__CreateQueue cq = KEYLOAD__V1__CREATE_QUEUE__INIT;
    cq.queue = &q;
    cq.limits = &lim;
    cq.partition = 0;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE;
    m.create_queue = &cq;
    Keyload__V1__Mutation *ms[] = {&m};
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
    /* A daemon that just started may not lead yet: retry for up to 20 s (the create is
     * refused before proposing, so a retry with the same command id is safe). */
    kl_code rc;
    for (int attempt = 0;; attempt++) {
        free(ans);
        ans = NULL;
        rc = kl_rpc_invoke(c, BATCH_METHOD, buf, len, o->timeout_ms, &ans, &alen, NULL, 0, &err);
        if ((rc != KL_NOT_LEADER && rc != KL_UNAVAILABLE) || attempt >= 200)
            break;
        usleep(100000);
    }
    if (rc == KL_OK) {
        fprintf(stderr, "keyload-bench: created queue %s\n", o->queue);
        rv = 0;
    } else if (rc == KL_CONFLICT && strcmp(err.detail, "queue_exists") == 0) {
        rv = 0;
    } else {
        fprintf(stderr, "keyload-bench: creating queue %s failed: %s (%s) %s\n", o->queue,
                kl_code_name(rc), err.detail, err.message);
    }
    free(ans);
    free(buf);
    kl_rpc_client_close(c);
    return rv;
}

static void *client_main(void *arg)
{
    client_state *cs = arg;
    const options *o = cs->opt;
    kl_err err;
    kl_err_clear(&err);
    kl_rpc_client *c;
    if (kl_rpc_client_open(o->url, CONNECT_TIMEOUT_MS, 0, &c, &err) != KL_OK) {
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
        int64_t t0 = now_ns();
        kl_code rc = kl_rpc_invoke(c, method, buf, len, o->timeout_ms, &ans, &alen, NULL, 0, &err);
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
            if (rc == KL_UNAVAILABLE || rc == KL_RESOURCE_EXHAUSTED)
                sleep_ns(1000000); /* back off instead of spinning on a refusing server */
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

static int run_bench(const options *o)
{
    if (create_queue(o) != 0)
        return 1;
    client_state *cs = calloc((size_t)o->clients, sizeof *cs);
    if (cs == NULL)
        return 1;
    atomic_store(&g_ops_left, o->ops);
    for (int i = 0; i < o->clients; i++) {
        cs[i].id = i;
        cs[i].opt = o;
        if (pthread_create(&cs[i].thread, NULL, client_main, &cs[i]) != 0) {
            fprintf(stderr, "keyload-bench: cannot start client thread %d\n", i);
            atomic_store(&g_stop, 1);
            atomic_store(&g_go, 1);
            for (int j = 0; j < i; j++)
                pthread_join(cs[j].thread, NULL);
            free(cs);
            return 1;
        }
    }
    /* Give every thread time to connect before the clock starts. */
    sleep_ns(200000000LL);
    int64_t start = now_ns();
    int64_t from = o->ops > 0 ? start : start + (int64_t)(o->warmup * 1e9);
    atomic_store(&g_measure_from, from);
    atomic_store(&g_go, 1);
    int64_t end;
    if (o->ops > 0) {
        for (int i = 0; i < o->clients; i++)
            pthread_join(cs[i].thread, NULL);
        end = now_ns();
    } else {
        end = from + (int64_t)(o->seconds * 1e9);
        sleep_ns(end - now_ns());
        atomic_store(&g_measure_to, end);
        atomic_store(&g_stop, 1);
        for (int i = 0; i < o->clients; i++)
            pthread_join(cs[i].thread, NULL);
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
    printf("bench: %sclients=%d batch=%d body=%d seconds=%.2f batches=%llu batches_per_s=%.1f "
           "msgs_per_s=%.1f p50_us=%.1f p99_us=%.1f mean_us=%.1f max_us=%.1f errors=%llu\n",
           o->read ? "read=1 " : "", o->clients, o->batch_size, o->body_size, secs, (unsigned long long)ok, ok / secs,
           ok * (double)(o->read ? 0 : o->batch_size) / secs, pct(all, n, 50) / 1e3, pct(all, n, 99) / 1e3,
           n ? sum / (double)n / 1e3 : 0.0, n ? all[n - 1] / 1e3 : 0.0,
           (unsigned long long)(errors + (uint64_t)open_failed));
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

static void usage(FILE *f)
{
    fprintf(f,
            "usage: keyload-bench [--url URL] [--clients N] [--batch-size B] [--seconds S | --ops N]\n"
            "                     [--body-size BYTES] [--queue NAME] [--warmup S] [--timeout-ms MS] [--read]\n"
            "       keyload-bench --fsync-probe DIR [--samples N]\n");
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

int main(int argc, char **argv)
{
    options o = {.url = "tcp://127.0.0.1:7401", .queue = "bench", .clients = 1, .batch_size = 1,
                 .seconds = 5, .warmup = 0.5, .body_size = 100, .timeout_ms = 10000, .samples = 200};
    static const struct option lo[] = {
        {"url", required_argument, NULL, 'u'},        {"clients", required_argument, NULL, 'c'},
        {"batch-size", required_argument, NULL, 'b'}, {"seconds", required_argument, NULL, 's'},
        {"ops", required_argument, NULL, 'o'},        {"fsync-probe", required_argument, NULL, 'f'},
        {"samples", required_argument, NULL, 'n'},    {"body-size", required_argument, NULL, 'B'},
        {"queue", required_argument, NULL, 'q'},      {"warmup", required_argument, NULL, 'w'},
        {"timeout-ms", required_argument, NULL, 't'}, {"help", no_argument, NULL, 'h'},
        {"read", no_argument, NULL, 'r'},
        {NULL, 0, NULL, 0}};
    int ch, li = -1;
    long v;
    char *end;
    while ((li = -1, ch = getopt_long(argc, argv, "", lo, &li)) != -1) {
        switch (ch) {
        case 'u': o.url = optarg; break;
        case 'q': o.queue = optarg; break;
        case 'f': o.fsync_dir = optarg; break;
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
    if (o.fsync_dir != NULL)
        return fsync_probe(&o);
    return run_bench(&o);
bad:
    if (li >= 0)
        fprintf(stderr, "keyload-bench: bad value for --%s: %s\n", lo[li].name, optarg);
    else
        fprintf(stderr, "keyload-bench: unexpected argument %s\n", argv[optind]);
    usage(stderr);
    return 2;
}
