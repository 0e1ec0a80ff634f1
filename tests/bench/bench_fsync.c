/* bench_fsync: --fsync-probe, the floor of a durable write on a disk: 4 KiB appended and
 * fdatasync()ed, N times; median and p99 (with --fsync-copies K, K files at once, each
 * round until the last is synced, each 4 KiB written over zeros written and synced before,
 * as the store's journal writes). --fsync-cost: what one synced write costs in time and
 * in the caller's CPU when the file grows and when it does not. */
#include "tests/bench/bench_fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

/* A scratch file in the probe's directory, already unlinked: it lives until closed, so
 * nothing is left behind on a crash. -1 (reported) when it cannot be made. */
static int scratch_file(const bench_options *o, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.XXXXXX", o->fsync_dir, name);
    int fd = mkstemp(path);
    if (fd < 0) {
        fprintf(stderr, "keyload-bench: cannot create a file in %s: %s\n", o->fsync_dir, strerror(errno));
        return -1;
    }
    unlink(path);
    return fd;
}

/* --fsync-copies K: what K copies' threads share. */
typedef struct copies_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int go;                   /* under mu: 0 wait, 1 run the rounds, -1 give up (not all started) */
    pthread_barrier_t round;  /* the K threads, at the start of every round */
    atomic_int stop_at;       /* the round after one in which a copy failed (INT_MAX: none) */
} copies_gate;

/* One copy: its thread, its file, and when each round's append began and its sync ended. */
typedef struct copy_probe {
    pthread_t thread;
    copies_gate *gate;
    const bench_options *o;
    int fd;
    int64_t *t0, *t1;         /* per round, monotonic ns */
    const char *failed_call;  /* NULL, or the call that failed (errno in err; 0: a short write) */
    int err;
} copy_probe;

static void *copy_main(void *arg)
{
    copy_probe *c = arg;
    copies_gate *g = c->gate;
    uint8_t block[4096];
    randombytes_buf(block, sizeof block);
    pthread_mutex_lock(&g->mu);
    while (g->go == 0)
        pthread_cond_wait(&g->cv, &g->mu);
    int go = g->go;
    pthread_mutex_unlock(&g->mu);
    if (go < 0)
        return NULL;
    for (int i = 0; i < c->o->samples; i++) {
        /* Every copy reaches every barrier until all of them stop at the same one: a copy
         * that fails in round r sets stop_at to r + 1 before it waits again, so after the
         * barrier of round i every copy sees the same answer to stop_at <= i (a failure in
         * round i itself, still under way in another copy, does not count until i + 1). */
        int b = pthread_barrier_wait(&g->round);
        if (b != 0 && b != PTHREAD_BARRIER_SERIAL_THREAD) {
            /* Only for a barrier that is not one (EINVAL): then no copy gets past it. */
            c->failed_call = "pthread_barrier_wait";
            c->err = b;
            break;
        }
        if (atomic_load(&g->stop_at) <= i)
            break;
        c->t0[i] = bench_now_ns();
        ssize_t w = pwrite(c->fd, block, sizeof block, (off_t)i * (off_t)sizeof block);
        if (w != (ssize_t)sizeof block) {
            c->failed_call = "write";
            c->err = w < 0 ? errno : 0;
        } else if (fdatasync(c->fd) != 0) {
            c->failed_call = "fdatasync";
            c->err = errno;
        }
        c->t1[i] = bench_now_ns();
        if (c->failed_call != NULL)
            atomic_store(&g->stop_at, i + 1);
    }
    return NULL;
}

/* Writes len zero bytes at the start of fd and syncs them: later writes there overwrite
 * written blocks, as the store's journal does in its segments. 0, or -1 (printed). */
static int zero_fill(int fd, size_t len)
{
    static const uint8_t zeros[1u << 16];
    for (size_t off = 0; off < len;) {
        size_t want = len - off < sizeof zeros ? len - off : sizeof zeros;
        ssize_t w = pwrite(fd, zeros, want, (off_t)off);
        if (w <= 0) {
            fprintf(stderr, "keyload-bench: zero-filling a probe file: %s\n", w < 0 ? strerror(errno) : "short write");
            return -1;
        }
        off += (size_t)w;
    }
    if (fdatasync(fd) != 0) {
        fprintf(stderr, "keyload-bench: syncing a probe file: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

/* The device floor of a commit that must be synced on K copies sharing one disk, as the
 * members of an RF3 partition do when the bench runs them on one machine: K threads, each
 * with its own scratch file in DIR (zero-filled and synced first, as a journal segment is),
 * start each round together (a barrier), write the round's 4 KiB over those zeros and
 * fdatasync() their own file; a round's time runs from the earliest start to the last sync
 * done. Costs K files (unlinked at once), K threads and N rounds of K synced overwrites.
 * Prints the K=1 line's fields plus copies=K. */
static int fsync_copies_probe(const bench_options *o)
{
    int k = o->fsync_copies, n = o->samples, opened = 0, started = 0, rc = 1, e;
    copies_gate g = {.go = 0};
    atomic_init(&g.stop_at, INT_MAX);
    copy_probe *c = calloc((size_t)k, sizeof *c);
    int64_t *times = calloc((size_t)k * (size_t)n * 2, sizeof *times);
    uint64_t *s = calloc((size_t)n, sizeof *s);
    if (c == NULL || times == NULL || s == NULL) {
        fprintf(stderr, "keyload-bench: out of memory for %d copies x %d rounds\n", k, n);
        goto fail_alloc;
    }
    for (; opened < k; opened++) {
        c[opened] = (copy_probe){.gate = &g, .o = o, .t0 = times + (size_t)opened * n * 2,
                                 .t1 = times + (size_t)opened * n * 2 + n};
        if ((c[opened].fd = scratch_file(o, "keyload-fsync-probe")) < 0)
            goto fail_files;
        if (zero_fill(c[opened].fd, (size_t)n * 4096u) != 0) {
            opened++;
            goto fail_files;
        }
    }
    if ((e = pthread_mutex_init(&g.mu, NULL)) != 0) {
        fprintf(stderr, "keyload-bench: pthread_mutex_init: %s\n", strerror(e));
        goto fail_files;
    }
    if ((e = pthread_cond_init(&g.cv, NULL)) != 0) {
        fprintf(stderr, "keyload-bench: pthread_cond_init: %s\n", strerror(e));
        goto fail_mutex;
    }
    if ((e = pthread_barrier_init(&g.round, NULL, (unsigned)k)) != 0) {
        fprintf(stderr, "keyload-bench: pthread_barrier_init: %s\n", strerror(e));
        goto fail_cond;
    }
    for (; started < k; started++)
        if ((e = pthread_create(&c[started].thread, NULL, copy_main, &c[started])) != 0) {
            fprintf(stderr, "keyload-bench: cannot start copy thread %d of %d: %s\n", started + 1, k, strerror(e));
            break;
        }
    /* Started threads wait for go; with one missing the barrier would never fill. */
    pthread_mutex_lock(&g.mu);
    g.go = started == k ? 1 : -1;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    bool ok = started == k;
    for (int i = 0; i < started; i++)
        if ((e = pthread_join(c[i].thread, NULL)) != 0) {
            fprintf(stderr, "keyload-bench: pthread_join of copy thread %d: %s\n", i + 1, strerror(e));
            ok = false;
        }
    for (int i = 0; i < started; i++)
        if (c[i].failed_call != NULL) {
            fprintf(stderr, "keyload-bench: %s in %s failed (copy %d of %d): %s\n", c[i].failed_call, o->fsync_dir,
                    i + 1, k, c[i].err != 0 ? strerror(c[i].err) : "short write");
            ok = false;
        }
    if (!ok)
        goto fail_barrier;
    double sum = 0;
    for (int r = 0; r < n; r++) {
        int64_t first = c[0].t0[r], last = c[0].t1[r];
        for (int i = 1; i < k; i++) {
            if (c[i].t0[r] < first)
                first = c[i].t0[r];
            if (c[i].t1[r] > last)
                last = c[i].t1[r];
        }
        s[r] = (uint64_t)(last - first);
        sum += (double)s[r];
    }
    qsort(s, (size_t)n, sizeof *s, bench_cmp_u64);
    printf("fsync: dir=%s samples=%d write=4096 copies=%d median_us=%.1f p99_us=%.1f mean_us=%.1f max_us=%.1f\n",
           o->fsync_dir, n, k, bench_pct(s, (size_t)n, 50) / 1e3, bench_pct(s, (size_t)n, 99) / 1e3, sum / n / 1e3,
           s[n - 1] / 1e3);
    rc = 0;
fail_barrier:
    pthread_barrier_destroy(&g.round);
fail_cond:
    pthread_cond_destroy(&g.cv);
fail_mutex:
    pthread_mutex_destroy(&g.mu);
fail_files:
    while (opened-- > 0)
        close(c[opened].fd);
fail_alloc:
    free(s);
    free(times);
    free(c);
    return rc;
}

int bench_run_fsync(const bench_options *o)
{
    if (o->fsync_copies > 1)
        return fsync_copies_probe(o);
    int fd = scratch_file(o, "keyload-fsync-probe");
    if (fd < 0)
        return 1;
    uint8_t block[4096];
    randombytes_buf(block, sizeof block);
    uint64_t *s = calloc((size_t)o->samples, sizeof *s);
    if (s == NULL) {
        close(fd);
        return 1;
    }
    for (int i = 0; i < o->samples; i++) {
        int64_t t0 = bench_now_ns();
        if (write(fd, block, sizeof block) != (ssize_t)sizeof block || fdatasync(fd) != 0) {
            fprintf(stderr, "keyload-bench: write/fdatasync in %s failed: %s\n", o->fsync_dir,
                    strerror(errno));
            close(fd);
            free(s);
            return 1;
        }
        s[i] = (uint64_t)(bench_now_ns() - t0);
    }
    close(fd);
    double sum = 0;
    for (int i = 0; i < o->samples; i++)
        sum += (double)s[i];
    qsort(s, (size_t)o->samples, sizeof *s, bench_cmp_u64);
    printf("fsync: dir=%s samples=%d write=4096 median_us=%.1f p99_us=%.1f mean_us=%.1f max_us=%.1f\n",
           o->fsync_dir, o->samples, bench_pct(s, (size_t)o->samples, 50) / 1e3,
           bench_pct(s, (size_t)o->samples, 99) / 1e3, sum / o->samples / 1e3, s[o->samples - 1] / 1e3);
    free(s);
    return 0;
}

#define COST_WRITE 1024

static int64_t thread_cpu_ns(void)
{
    struct rusage u;
    if (getrusage(RUSAGE_THREAD, &u) != 0)
        return 0;
    return ((int64_t)u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000000000LL +
           ((int64_t)u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1000LL;
}

/* One way of writing, n samples. An fdatasync after an append must also write the inode
 * (the size changed); after an overwrite inside the file's size it writes the data alone.
 * RocksDB's WAL always appends (its preallocation keeps the size), so the gap between the
 * two lines is what a log in pre-written segment files would save per sync. */
static int cost_one(const bench_options *o, bool overwrite, uint64_t *s)
{
    int fd = scratch_file(o, "keyload-fsync-cost");
    if (fd < 0)
        return 1;
    uint8_t block[COST_WRITE];
    randombytes_buf(block, sizeof block);
    int rc = 0;
    if (overwrite) {
        for (int i = 0; i < o->samples && rc == 0; i++)
            if (write(fd, block, sizeof block) != (ssize_t)sizeof block)
                rc = 1;
        if (rc == 0 && fsync(fd) != 0)
            rc = 1;
    }
    int64_t cpu0 = thread_cpu_ns();
    for (int i = 0; i < o->samples && rc == 0; i++) {
        int64_t t0 = bench_now_ns();
        ssize_t w = overwrite ? pwrite(fd, block, sizeof block, (off_t)i * COST_WRITE)
                              : write(fd, block, sizeof block);
        if (w != (ssize_t)sizeof block || fdatasync(fd) != 0)
            rc = 1;
        s[i] = (uint64_t)(bench_now_ns() - t0);
    }
    int64_t cpu = thread_cpu_ns() - cpu0;
    if (rc != 0) {
        fprintf(stderr, "keyload-bench: write/fdatasync in %s failed: %s\n", o->fsync_dir, strerror(errno));
        close(fd);
        return 1;
    }
    close(fd);
    qsort(s, (size_t)o->samples, sizeof *s, bench_cmp_u64);
    printf("fsync_cost: dir=%s mode=%s samples=%d write=%d median_us=%.1f p99_us=%.1f cpu_us_per_sync=%.1f\n",
           o->fsync_dir, overwrite ? "overwrite" : "append", o->samples, COST_WRITE,
           bench_pct(s, (size_t)o->samples, 50) / 1e3, bench_pct(s, (size_t)o->samples, 99) / 1e3,
           (double)cpu / o->samples / 1e3);
    return 0;
}

int bench_run_fsync_cost(const bench_options *o)
{
    uint64_t *s = calloc((size_t)o->samples, sizeof *s);
    if (s == NULL)
        return 1;
    int rc = cost_one(o, false, s);
    if (rc == 0)
        rc = cost_one(o, true, s);
    free(s);
    return rc;
}
