/* bench_fsync: --fsync-probe, the floor of a durable write on a disk: 4 KiB appended and
 * fdatasync()ed, N times; median and p99. --fsync-cost: what one synced write costs in
 * time and in the caller's CPU when the file grows and when it does not. */
#include "tests/bench/bench_fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
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

int bench_run_fsync(const bench_options *o)
{
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
