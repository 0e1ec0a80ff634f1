/* lossyfs: a FUSE passthrough filesystem that can lose power, for tests.
 *
 *   build/lossyfs [--state FILE] BACKING_DIR MOUNTPOINT
 *
 * Mounts BACKING_DIR at MOUNTPOINT (single-threaded, in the foreground, default_permissions,
 * no attribute or entry caching) until it is unmounted (`fusermount3 -u MOUNTPOINT`) or gets
 * SIGTERM/SIGINT. Run it in the background and keep its pid.
 *
 * Power loss: `kill -USR1 PID` drops every write not yet made durable by fsync/fdatasync:
 * each file's contents and size go back to what they were at its last sync (a file created
 * since then is empty). Do it after kill -9 of the processes using the mount (like a machine
 * that lost power, nothing runs on it), then start them again on the same mount.
 * With --state FILE, lossyfs writes one line to FILE (replaced atomically) once the mount is
 * ready, after each power loss and after each SIGUSR2:
 *   power_losses=N files=F bytes=B fsync_lies=L
 * (N power losses so far; F files and B bytes of unsynced data the last one dropped), so a
 * harness waits for N to grow instead of sleeping. The same line goes to stderr, after one
 * line per file put back. One lossyfs process serves one mount.
 * A lying disk, to prove a durability check can fail: `kill -USR2 PID` toggles a mode in
 * which fsync and fdatasync return success and make nothing durable (L = 1, else 0).
 *
 * The model, and what it does not model:
 *  - data: a write goes to the backing file at once, but the first time since the last
 *    sync that it overwrites a byte below the file's size at that sync, the old byte is
 *    saved (an undo record per inode; appends save nothing). fsync or fdatasync of any
 *    descriptor of the inode forgets the record and fsyncs the backing file; power loss
 *    truncates to the synced size and writes the saved bytes back. Reads see the latest
 *    write, as a page cache would. close() persists nothing. The kernel drops the mount's
 *    page cache of a file when it is opened, so a process started after the power loss
 *    reads what was put back.
 *  - truncate and fallocate are data changes like writes (the synced size is restored);
 *    hole punching and zero ranges are refused (EOPNOTSUPP), so callers fall back.
 *  - metadata (create, mkdir, rename, link, unlink, rmdir, chmod, utimens) is applied to the
 *    backing directory at once and survives power loss: an ordered-metadata journal like
 *    ext4 data=ordered, where a rename is durable once it returns. Directory fsync is a
 *    no-op. RocksDB's protocol (fsync the new MANIFEST, then rename CURRENT) is kept.
 *  - torn writes and reordering between two synced writes are not modelled; nor is lossyfs
 *    itself crashing (unsynced data then stays in the backing files).
 *  - locks (fcntl, flock) are left to the kernel's local locking.
 */
#define FUSE_USE_VERSION 31
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <fuse.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* Original bytes of [off, off + len) at the last sync. */
typedef struct saved {
    off_t off;
    size_t len;
    char *data;
} saved;

/* Unsynced changes of one inode of the backing filesystem. */
typedef struct undo {
    dev_t dev;
    ino_t ino;
    int fd;              /* our own descriptor: power loss restores through it after renames */
    off_t synced_size;
    saved *ranges;       /* sorted by off, disjoint */
    size_t n, cap;
    struct undo *next;
} undo;

static struct {
    int backing;           /* O_PATH descriptor of BACKING_DIR */
    const char *state_file;
    undo *undos;
    unsigned long power_losses;
    bool fsync_lies;       /* SIGUSR2: fsync answers success and syncs nothing */
    pthread_mutex_t lock;  /* the FUSE thread's operations vs the power-loss thread */
} G = {.backing = -1, .lock = PTHREAD_MUTEX_INITIALIZER};

/* FUSE paths start with '/': relative to the backing directory. */
static const char *rel(const char *path)
{
    return path[1] == '\0' ? "." : path + 1;
}

static void state_line(size_t files, size_t bytes)
{
    char line[128];
    snprintf(line, sizeof line, "power_losses=%lu files=%zu bytes=%zu fsync_lies=%d\n",
             G.power_losses, files, bytes, G.fsync_lies);
    fprintf(stderr, "lossyfs: %s", line);
    if (G.state_file == NULL)
        return;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", G.state_file);
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return;
    fputs(line, f);
    if (fclose(f) == 0)
        rename(tmp, G.state_file);
}

/* ---- undo records ---- */

static undo *undo_find(dev_t dev, ino_t ino)
{
    for (undo *u = G.undos; u; u = u->next)
        if (u->dev == dev && u->ino == ino)
            return u;
    return NULL;
}

static void undo_free(undo *u)
{
    for (size_t i = 0; i < u->n; i++)
        free(u->ranges[i].data);
    free(u->ranges);
    close(u->fd);
    free(u);
}

/* Forgets the record of (dev, ino), if any: its data was synced or the inode is gone. */
static void undo_drop(dev_t dev, ino_t ino)
{
    for (undo **p = &G.undos; *p; p = &(*p)->next) {
        if ((*p)->dev == dev && (*p)->ino == ino) {
            undo *u = *p;
            *p = u->next;
            undo_free(u);
            return;
        }
    }
}

/* The record of fd's inode, created (synced size = current size) on the first change. */
static int undo_get(int fd, undo **out)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -errno;
    undo *u = undo_find(st.st_dev, st.st_ino);
    if (u == NULL) {
        u = calloc(1, sizeof *u);
        if (u == NULL)
            return -ENOMEM;
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        u->fd = open(proc, O_RDWR | O_CLOEXEC);
        if (u->fd < 0) {
            int e = -errno;
            free(u);
            return e;
        }
        u->dev = st.st_dev;
        u->ino = st.st_ino;
        u->synced_size = st.st_size;
        u->next = G.undos;
        G.undos = u;
    }
    *out = u;
    return 0;
}

static int undo_insert(undo *u, size_t at, off_t off, size_t len)
{
    if (u->n == u->cap) {
        size_t cap = u->cap ? u->cap * 2 : 8;
        saved *r = realloc(u->ranges, cap * sizeof *r);
        if (r == NULL)
            return -ENOMEM;
        u->ranges = r;
        u->cap = cap;
    }
    char *data = malloc(len);
    if (data == NULL)
        return -ENOMEM;
    ssize_t got = pread(u->fd, data, len, off);
    if (got < 0) {
        int e = -errno;
        free(data);
        return e;
    }
    if ((size_t)got < len) /* the file is shorter now: those bytes were zeros at the sync */
        memset(data + got, 0, len - (size_t)got);
    memmove(&u->ranges[at + 1], &u->ranges[at], (u->n - at) * sizeof *u->ranges);
    u->ranges[at] = (saved){off, len, data};
    u->n++;
    return 0;
}

/* Saves the synced bytes of [off, off + len) that are not saved yet, before they change. */
static int undo_save(undo *u, off_t off, off_t len)
{
    off_t end = off + len < u->synced_size ? off + len : u->synced_size;
    off_t pos = off;
    size_t i = 0;
    while (pos < end) {
        while (i < u->n && u->ranges[i].off + (off_t)u->ranges[i].len <= pos)
            i++;
        if (i < u->n && u->ranges[i].off <= pos) { /* already saved up to its end */
            pos = u->ranges[i].off + (off_t)u->ranges[i].len;
            continue;
        }
        off_t gap_end = i < u->n && u->ranges[i].off < end ? u->ranges[i].off : end;
        int rc = undo_insert(u, i, pos, (size_t)(gap_end - pos));
        if (rc != 0)
            return rc;
        pos = gap_end;
    }
    return 0;
}

/* Before data of fd changes in [off, off + len): record what it was at the last sync. */
static int before_change(int fd, off_t off, off_t len)
{
    undo *u = NULL;
    int rc = undo_get(fd, &u);
    return rc != 0 ? rc : undo_save(u, off, len);
}

/* fsync/fdatasync: the inode's data is durable from here on. */
static int sync_fd(int fd, int datasync)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -errno;
    if (G.fsync_lies)
        return 0;
    if ((datasync ? fdatasync(fd) : fsync(fd)) != 0)
        return -errno;
    undo_drop(st.st_dev, st.st_ino);
    return 0;
}

/* An inode's last name is going away (unlink, or replaced by rename): its data goes too. */
static void before_last_link(int dirfd, const char *name)
{
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1)
        undo_drop(st.st_dev, st.st_ino);
}

/* ---- power loss ---- */

static void restore(undo *u, size_t *bytes)
{
    struct stat st;
    if (fstat(u->fd, &st) != 0 || st.st_nlink == 0)
        return; /* unlinked while we held it: nothing left to restore */
    char proc[64], name[4096];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", u->fd);
    ssize_t n = readlink(proc, name, sizeof name - 1);
    name[n > 0 ? n : 0] = '\0';
    fprintf(stderr, "lossyfs: power loss: %s back to %lld bytes (was %lld), %zu ranges restored\n",
            name, (long long)u->synced_size, (long long)st.st_size, u->n);
    if (ftruncate(u->fd, u->synced_size) != 0)
        fprintf(stderr, "lossyfs: restoring inode %lu: truncate: %s\n", (unsigned long)u->ino,
                strerror(errno));
    if (st.st_size > u->synced_size)
        *bytes += (size_t)(st.st_size - u->synced_size);
    for (size_t i = 0; i < u->n; i++) {
        if (pwrite(u->fd, u->ranges[i].data, u->ranges[i].len, u->ranges[i].off) != (ssize_t)u->ranges[i].len)
            fprintf(stderr, "lossyfs: restoring inode %lu: write: %s\n", (unsigned long)u->ino,
                    strerror(errno));
        *bytes += u->ranges[i].len;
    }
    if (fsync(u->fd) != 0)
        fprintf(stderr, "lossyfs: restoring inode %lu: fsync: %s\n", (unsigned long)u->ino,
                strerror(errno));
}

static void power_loss(void)
{
    pthread_mutex_lock(&G.lock);
    size_t files = 0, bytes = 0;
    while (G.undos) {
        undo *u = G.undos;
        G.undos = u->next;
        restore(u, &bytes);
        files++;
        undo_free(u);
    }
    G.power_losses++;
    state_line(files, bytes);
    pthread_mutex_unlock(&G.lock);
}

static void toggle_lies(void)
{
    pthread_mutex_lock(&G.lock);
    G.fsync_lies = !G.fsync_lies;
    state_line(0, 0);
    pthread_mutex_unlock(&G.lock);
}

/* SIGUSR1 and SIGUSR2 are blocked in every thread; this one takes them synchronously, so a
 * power loss never runs inside an operation (it waits for the lock). */
static void *power_thread(void *arg)
{
    sigset_t *set = arg;
    for (;;) {
        int sig;
        if (sigwait(set, &sig) != 0)
            continue;
        if (sig == SIGUSR1)
            power_loss();
        else if (sig == SIGUSR2)
            toggle_lies();
    }
    return NULL;
}

/* ---- operations: passthrough relative to the backing directory ---- */

/* Metadata operations use the path when there is one: fi->fh is a descriptor only for
 * regular files (a directory's is its DIR *); without a path (a file unlinked while open)
 * fi is that of a regular file. */
static int lf_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
    int rc = path ? fstatat(G.backing, rel(path), st, AT_SYMLINK_NOFOLLOW) : fstat((int)fi->fh, st);
    return rc == 0 ? 0 : -errno;
}

static int lf_access(const char *path, int mask)
{
    return faccessat(G.backing, rel(path), mask, 0) == 0 ? 0 : -errno;
}

static int lf_readlink(const char *path, char *buf, size_t size)
{
    ssize_t n = readlinkat(G.backing, rel(path), buf, size - 1);
    if (n < 0)
        return -errno;
    buf[n] = '\0';
    return 0;
}

static int lf_opendir(const char *path, struct fuse_file_info *fi)
{
    int fd = openat(G.backing, rel(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    DIR *d = fdopendir(fd);
    if (d == NULL) {
        int e = -errno;
        close(fd);
        return e;
    }
    fi->fh = (uint64_t)(uintptr_t)d;
    return 0;
}

static int lf_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
                      struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
    (void)path;
    (void)flags;
    DIR *d = (DIR *)(uintptr_t)fi->fh;
    if (off == 0)
        rewinddir(d);
    else
        seekdir(d, off);
    struct dirent *e;
    while ((errno = 0, e = readdir(d)) != NULL) {
        struct stat st = {.st_ino = e->d_ino, .st_mode = (mode_t)DTTOIF(e->d_type)};
        if (fill(buf, e->d_name, &st, telldir(d), 0))
            break;
    }
    return errno == 0 ? 0 : -errno;
}

static int lf_releasedir(const char *path, struct fuse_file_info *fi)
{
    (void)path;
    closedir((DIR *)(uintptr_t)fi->fh);
    return 0;
}

static int lf_mkdir(const char *path, mode_t mode)
{
    return mkdirat(G.backing, rel(path), mode) == 0 ? 0 : -errno;
}

static int lf_rmdir(const char *path)
{
    return unlinkat(G.backing, rel(path), AT_REMOVEDIR) == 0 ? 0 : -errno;
}

static int lf_symlink(const char *target, const char *path)
{
    return symlinkat(target, G.backing, rel(path)) == 0 ? 0 : -errno;
}

static int lf_link(const char *from, const char *to)
{
    return linkat(G.backing, rel(from), G.backing, rel(to), 0) == 0 ? 0 : -errno;
}

static int lf_unlink(const char *path)
{
    pthread_mutex_lock(&G.lock);
    before_last_link(G.backing, rel(path));
    int rc = unlinkat(G.backing, rel(path), 0) == 0 ? 0 : -errno;
    pthread_mutex_unlock(&G.lock);
    return rc;
}

static int lf_rename(const char *from, const char *to, unsigned int flags)
{
    pthread_mutex_lock(&G.lock);
    if (!(flags & (RENAME_EXCHANGE | RENAME_NOREPLACE)))
        before_last_link(G.backing, rel(to));
    int rc = renameat2(G.backing, rel(from), G.backing, rel(to), flags) == 0 ? 0 : -errno;
    pthread_mutex_unlock(&G.lock);
    return rc;
}

static int lf_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
    int rc = path ? fchmodat(G.backing, rel(path), mode, 0) : fchmod((int)fi->fh, mode);
    return rc == 0 ? 0 : -errno;
}

static int lf_chown(const char *path, uid_t uid, gid_t gid, struct fuse_file_info *fi)
{
    int rc = path ? fchownat(G.backing, rel(path), uid, gid, AT_SYMLINK_NOFOLLOW)
                  : fchown((int)fi->fh, uid, gid);
    return rc == 0 ? 0 : -errno;
}

static int lf_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi)
{
    int rc = path ? utimensat(G.backing, rel(path), tv, AT_SYMLINK_NOFOLLOW) : futimens((int)fi->fh, tv);
    return rc == 0 ? 0 : -errno;
}

/* A size change is a data change: bytes cut off are saved first. */
static int truncate_fd(int fd, off_t size)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -errno;
    int rc = size < st.st_size ? before_change(fd, size, st.st_size - size) : 0;
    if (rc == 0 && size != st.st_size)
        rc = before_change(fd, st.st_size, 0); /* records the synced size */
    if (rc == 0 && ftruncate(fd, size) != 0)
        rc = -errno;
    return rc;
}

static int lf_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
    pthread_mutex_lock(&G.lock);
    int rc = 0, fd = fi ? (int)fi->fh : openat(G.backing, rel(path), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        rc = -errno;
    else
        rc = truncate_fd(fd, size);
    if (!fi && fd >= 0)
        close(fd);
    pthread_mutex_unlock(&G.lock);
    return rc;
}

/* open and create: O_TRUNC is done here as a truncate, so that it is undone on power loss.
 * An O_DIRECT open is served in FUSE's direct_io mode (each write reaches lossyfs as the
 * caller made it, none through the mount's page cache) on a backing descriptor without
 * O_DIRECT, whose alignment rules FUSE's buffers would not meet. Its writes are unsynced
 * like any other until an fsync: a direct write also sits in a disk's volatile cache. */
static int open_common(const char *path, int flags, mode_t mode, struct fuse_file_info *fi)
{
    pthread_mutex_lock(&G.lock);
    int rc = 0;
    if (flags & O_DIRECT)
        fi->direct_io = 1;
    int fd = openat(G.backing, rel(path), (flags & ~(O_TRUNC | O_DIRECT)) | O_CLOEXEC, mode);
    if (fd < 0)
        rc = -errno;
    else if ((flags & O_TRUNC) && (rc = truncate_fd(fd, 0)) != 0)
        close(fd);
    else
        fi->fh = (uint64_t)fd;
    pthread_mutex_unlock(&G.lock);
    return rc;
}

static int lf_create(const char *path, mode_t mode, struct fuse_file_info *fi)
{
    return open_common(path, fi->flags, mode, fi);
}

static int lf_open(const char *path, struct fuse_file_info *fi)
{
    return open_common(path, fi->flags, 0, fi);
}

static int lf_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
    (void)path;
    ssize_t n = pread((int)fi->fh, buf, size, off);
    return n < 0 ? -errno : (int)n;
}

static int lf_write(const char *path, const char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
    (void)path;
    pthread_mutex_lock(&G.lock);
    int rc = before_change((int)fi->fh, off, (off_t)size);
    ssize_t n = rc != 0 ? rc : pwrite((int)fi->fh, buf, size, off);
    if (n < 0 && rc == 0)
        n = -errno;
    pthread_mutex_unlock(&G.lock);
    return (int)n;
}

static int lf_statfs(const char *path, struct statvfs *st)
{
    (void)path;
    int fd = openat(G.backing, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fstatvfs(fd, st) == 0 ? 0 : -errno;
    close(fd);
    return rc;
}

static int lf_release(const char *path, struct fuse_file_info *fi)
{
    (void)path;
    close((int)fi->fh); /* persists nothing: the undo record outlives the descriptor */
    return 0;
}

static int lf_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
    (void)path;
    pthread_mutex_lock(&G.lock);
    int rc = sync_fd((int)fi->fh, datasync);
    pthread_mutex_unlock(&G.lock);
    return rc;
}

/* Metadata is durable when applied: nothing to do. */
static int lf_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi)
{
    (void)path;
    (void)datasync;
    (void)fi;
    return 0;
}

static int lf_fallocate(const char *path, int mode, off_t off, off_t len, struct fuse_file_info *fi)
{
    (void)path;
    if (mode & ~FALLOC_FL_KEEP_SIZE)
        return -EOPNOTSUPP;
    pthread_mutex_lock(&G.lock);
    /* allocation changes no byte; without KEEP_SIZE it may grow the file (records size) */
    int rc = (mode & FALLOC_FL_KEEP_SIZE) ? 0 : before_change((int)fi->fh, off, 0);
    if (rc == 0 && fallocate((int)fi->fh, mode, off, len) != 0)
        rc = -errno;
    pthread_mutex_unlock(&G.lock);
    return rc;
}

static off_t lf_lseek(const char *path, off_t off, int whence, struct fuse_file_info *fi)
{
    (void)path;
    off_t r = lseek((int)fi->fh, off, whence);
    return r < 0 ? -errno : r;
}

static void *lf_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
    (void)conn;
    cfg->use_ino = 1;
    cfg->nullpath_ok = 1;
    cfg->hard_remove = 1;      /* no .fuse_hidden files: every op on an open file uses its fd */
    cfg->entry_timeout = 0;    /* the backing directory changes on power loss: cache nothing */
    cfg->attr_timeout = 0;
    cfg->negative_timeout = 0;
    cfg->kernel_cache = 0;     /* page cache dropped at each open */
    cfg->direct_io = 0;
    pthread_mutex_lock(&G.lock);
    state_line(0, 0);
    pthread_mutex_unlock(&G.lock);
    return NULL;
}

static const struct fuse_operations lf_ops = {
    .init = lf_init,
    .getattr = lf_getattr,
    .access = lf_access,
    .readlink = lf_readlink,
    .opendir = lf_opendir,
    .readdir = lf_readdir,
    .releasedir = lf_releasedir,
    .mkdir = lf_mkdir,
    .rmdir = lf_rmdir,
    .symlink = lf_symlink,
    .link = lf_link,
    .unlink = lf_unlink,
    .rename = lf_rename,
    .chmod = lf_chmod,
    .chown = lf_chown,
    .utimens = lf_utimens,
    .truncate = lf_truncate,
    .create = lf_create,
    .open = lf_open,
    .read = lf_read,
    .write = lf_write,
    .statfs = lf_statfs,
    .release = lf_release,
    .fsync = lf_fsync,
    .fsyncdir = lf_fsyncdir,
    .fallocate = lf_fallocate,
    .lseek = lf_lseek,
};

static int usage(void)
{
    fprintf(stderr, "usage: lossyfs [--state FILE] BACKING_DIR MOUNTPOINT\n"
                    "       kill -USR1 PID: power loss (drop every write not yet fsynced)\n"
                    "       kill -USR2 PID: toggle fsync lying (success, nothing synced)\n");
    return 2;
}

int main(int argc, char **argv)
{
    int i = 1;
    if (i + 1 < argc && strcmp(argv[i], "--state") == 0) {
        G.state_file = argv[i + 1];
        i += 2;
    }
    if (argc - i != 2)
        return usage();
    G.backing = open(argv[i], O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (G.backing < 0) {
        fprintf(stderr, "lossyfs: backing directory %s: %s\n", argv[i], strerror(errno));
        return 2;
    }
    static sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* before any thread: all inherit it */
    pthread_t t;
    if (pthread_create(&t, NULL, power_thread, &set) != 0) {
        fprintf(stderr, "lossyfs: cannot start the power-loss thread\n");
        return 1;
    }
    pthread_detach(t);
    umask(0);
    char *fargv[] = {argv[0], "-f", "-s", "-o", "default_permissions,fsname=lossyfs,subtype=lossyfs",
                     argv[i + 1], NULL};
    return fuse_main(6, fargv, &lf_ops, NULL);
}
