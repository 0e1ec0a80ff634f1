/* bench_fixture: what keyload-bench's modes share (bench_fixture.h). */
#include "tests/bench/bench_fixture.h"
#include "common/guid.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The cluster file of --cluster (bench.h; large, so not on a stack: loaded once by main). */
kl_cluster bench_cluster;

atomic_int bench_go;               /* start barrier */
atomic_int bench_stop;
_Atomic int64_t bench_measure_from; /* monotonic ns; requests started earlier are warm-up */
_Atomic int64_t bench_measure_to;   /* monotonic ns; 0 = open */
atomic_long bench_ops_left;
atomic_int bench_primed;           /* sealed bench: clients done with their first batch */

int64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void bench_sleep_ns(int64_t ns)
{
    struct timespec ts = {.tv_sec = ns / 1000000000LL, .tv_nsec = ns % 1000000000LL};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int bench_lat_push(bench_lat *l, uint64_t ns)
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

int bench_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of a sorted array. */
uint64_t bench_pct(const uint64_t *v, size_t n, double p)
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

/* ---- requests ---- */

void bench_lane_ref(Keyload__V1__QueueLaneRef *r, const char *queue)
{
    keyload__v1__queue_lane_ref__init(r);
    r->tenant = "default";
    r->database = "default";
    r->queue = (char *)queue;
}

/* Packs b into *buf (grown as needed); returns the length or 0 on OOM. */
size_t bench_pack_batch(const Keyload__V1__BatchRequest *b, uint8_t **buf, size_t *cap)
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

/* ---- queue setup ---- */

/* Sends a one-mutation batch to *target (a NOT_LEADER hint is followed and *target updated)
 * until it gets a definitive answer; a CONFLICT with detail exists_detail means "already
 * there" and counts as success. A daemon that just started may not lead yet: retries go on
 * for up to 20 s. Every retry sends the same bytes (same command id), so an earlier attempt
 * that did commit is answered with its receipt, never executed twice. 0 or -1. */
static int setup_mutation(const bench_options *o, char *target, size_t target_cap, Keyload__V1__Mutation *m,
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
    size_t len = bench_pack_batch(&b, &buf, &cap);
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
int bench_setup_queue(const bench_options *o, const char *url)
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
    bench_lane_ref(&q, o->queue);
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

uint64_t *bench_lat_sorted(const bench_client *cs, int clients, int step, size_t *n)
{
    size_t total = 0, k = 0;
    for (int i = 0; i < clients; i++)
        total += (step < 0 ? &cs[i].lat : &cs[i].step_lat[step])->n;
    uint64_t *v = malloc((total ? total : 1) * sizeof *v);
    *n = v != NULL ? total : 0;
    for (int i = 0; i < clients && v != NULL; i++) {
        const bench_lat *l = step < 0 ? &cs[i].lat : &cs[i].step_lat[step];
        memcpy(v + k, l->v, l->n * sizeof *v);
        k += l->n;
    }
    if (v != NULL)
        qsort(v, total, sizeof *v, bench_cmp_u64);
    return v;
}

/* --lat-out: the sorted latencies (ns) as microseconds, one a line. */
int bench_lat_write(const char *path, const uint64_t *v, size_t n)
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


/* The CPU time pid has used: utime+stime of /proc/PID/stat (clock ticks, in ns) and the sum
 * of its threads' /proc/PID/task/TID/schedstat run times (ns; -1 when unreadable). */
int bench_proc_cpu(long pid, double *stat_ns, double *sched_ns)
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

void bench_pipe_init(bench_pipe *p)
{
    p->answered = 0;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
}

void bench_pipe_destroy(bench_pipe *p)
{
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
}

void bench_pipe_mark(bench_pipe *p, bool *flag, int64_t *t1)
{
    int64_t now = bench_now_ns();
    pthread_mutex_lock(&p->mu);
    *t1 = now;
    *flag = true;
    p->answered++;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void bench_pipe_wait(bench_pipe *p)
{
    pthread_mutex_lock(&p->mu);
    while (p->answered == 0)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

bool bench_pipe_take(bench_pipe *p, bool *flag, bool busy)
{
    pthread_mutex_lock(&p->mu);
    bool answered = busy && *flag;
    if (answered)
        p->answered--;
    pthread_mutex_unlock(&p->mu);
    return answered;
}

void *bench_slots_new(bench_client *cs, int k, size_t slot_size)
{
    void *v = calloc((size_t)k, slot_size);
    if (v == NULL)
        snprintf(cs->first_err_msg, sizeof cs->first_err_msg, "out of memory for %d slots", k);
    return v;
}
