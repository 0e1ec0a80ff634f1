/* bench_fsync: --fsync-probe, the floor of a durable write on a disk: 4 KiB appended and
 * fdatasync()ed, N times; median and p99. */
#include "tests/bench/bench_fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int bench_run_fsync(const bench_options *o)
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
