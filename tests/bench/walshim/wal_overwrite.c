/* wal_overwrite.c: a measurement shim for tests/bench/wal_overwrite.sh, never linked into
 * KeyLoad. Loaded with LD_PRELOAD into keyloadd, it turns RocksDB's preallocation of a WAL
 * file (fallocate with FALLOC_FL_KEEP_SIZE on a "*.log" file) into zero-filled blocks inside
 * the file's size. RocksDB then writes its WAL over blocks that exist, so an fdatasync of
 * it flushes the data alone: on ext4 without a journal an appending fdatasync also writes
 * the inode (the size and the extent changed), a second I/O per commit on every member.
 *
 * What it changes besides the cost is why the product cannot do this: a WAL followed by
 * zeros cannot tell a torn last record from a damaged record in the middle, which our WAL
 * recovery mode must refuse (store.c). The zero fill runs on the writer, in the write path,
 * at each new WAL file (write_buffer_size x 1.1 bytes), so tail latencies get worse. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef int (*fallocate_fn)(int, int, off_t, off_t);

static int names_a_wal(int fd)
{
    char link[64], path[512];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 4)
        return 0;
    path[n] = '\0';
    return strcmp(path + n - 4, ".log") == 0;
}

static int zero_fill(int fd, off_t off, off_t len)
{
    static const char zeros[1 << 16];
    while (len > 0) {
        size_t k = len > (off_t)sizeof zeros ? sizeof zeros : (size_t)len;
        ssize_t w = pwrite(fd, zeros, k, off);
        if (w <= 0)
            return -1;
        off += w;
        len -= w;
    }
    return fdatasync(fd);
}

int fallocate(int fd, int mode, off_t off, off_t len)
{
    static fallocate_fn real;
    if (real == NULL)
        real = (fallocate_fn)dlsym(RTLD_NEXT, "fallocate");
    if (mode == FALLOC_FL_KEEP_SIZE && names_a_wal(fd))
        return zero_fill(fd, off, len);
    return real(fd, mode, off, len);
}

int fallocate64(int fd, int mode, off_t off, off_t len)
{
    return fallocate(fd, mode, off, len);
}
