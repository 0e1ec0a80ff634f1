/* journal: see journal.h for what it owns and its invariants J1-J4. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "daemon/store/journal.h"

#include "common/deadline.h"
#include "daemon/store/crc32c.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SEG_HEADER 64u
#define FRAME_HEADER 32u
#define LINK_PAYLOAD 16u
#define LINK_FRAME (FRAME_HEADER + LINK_PAYLOAD)
/* Direct appends write whole blocks of this size at offsets that are multiples of it: the
 * largest logical block size a Linux block device reports. Every segment's size is a
 * multiple of it. */
#define DIRECT_BLOCK 4096u
/* The staging buffer kept between direct appends; a larger write gets one of its own. */
#define STAGE_KEEP (1u << 20)
#define TYPE_RECORD 1u
#define TYPE_LINK 2u
#define RECORD_MAX KL_JOURNAL_RECORD_MAX
/* An open may find SEALED_MAX + 1 segments holding records (the sealed ones and the
 * current one); a cut takes the current one too. */
#define SEALED_MAX KL_JOURNAL_SEALED_MAX
#define SEALED_CAP (SEALED_MAX + 2u)
#define KEEPER_RETRY_MS 200

/* Segments are written in format 2 (frames checked by CRC-32C); format 1 (BLAKE2b-128)
 * is what binaries before it wrote, still read at open so that an upgraded member replays
 * its records. A store's KL_FEAT_INCOMPAT_JOURNAL_CRC32C keeps binaries that know only
 * format 1 away: they would take a format 2 header for a crashed recycle and delete it. */
#define FMT_BLAKE2B 1u
#define FMT_CRC32C 2u
static const char seg_magic_blake2b[8] = {'K', 'L', 'J', 'R', 'N', 'L', '0', '1'};
static const char seg_magic[8] = {'K', 'L', 'J', 'R', 'N', 'L', '0', '2'};

typedef struct seg {
    uint64_t seq;
    uint64_t nonce;
    int fd;     /* -1 when not open */
    size_t cap; /* file size */
    size_t end; /* where the next frame goes */
} seg;

struct kl_journal {
    char *dir;
    int dirfd;
    size_t seg_bytes;
    kl_journal_flush_fn flush;
    void *flush_arg;

    /* The appender's own (append and cut are serialised by the caller). */
    seg active;
    bool link_pending; /* the next write into `active` starts with its link frame */
    uint64_t link_prev_seq, link_prev_end;
    bool failed;
    kl_err failure;
    /* Direct appends (journal.h "Direct appends"): the active segment opened with O_DIRECT,
     * -1 when its appends go through the page cache. `stage` is DIRECT_BLOCK-aligned, at
     * least DIRECT_BLOCK long, and its first (active.end % DIRECT_BLOCK) bytes are the
     * file's bytes from the block that holds active.end up to active.end. */
    bool no_direct;
    int direct_fd;
    uint8_t *stage;
    size_t stage_cap;
    _Atomic bool direct_on; /* direct_fd >= 0, for readers on other threads (metrics) */

    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t wake; /* the keeper's: work or stop */
    pthread_cond_t done; /* the appender's and settle's: a spare is ready or a retire finished */
    bool stop;
    bool keeper_started;
    pthread_t keeper;
    seg spare; /* fd >= 0 when one is ready; always segment_bytes */
    uint64_t sealed[SEALED_CAP];
    size_t sealed_cap[SEALED_CAP];
    size_t nsealed;
    uint64_t next_seq;
    bool keeper_busy;
    bool spare_creating; /* the keeper is writing a spare's zeros */
    /* The appender asks for a spare once its segment is half full: a store opened for a
     * few writes (most tests) then never writes a second segment of zeros. */
    bool want_spare;
    /* The highest seq made active. Segments activate in seq order (the open's chain
     * follows links back through lower seqs), so a spare numbered below it is dropped. */
    uint64_t activated_seq;
};

static void spare_drop(kl_journal *j, seg *s);
static void direct_begin(kl_journal *j);
static void direct_end(kl_journal *j);

static void le64_put(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t le64_get(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}
static void le32_put(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t le32_get(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static size_t pad8(size_t n) { return (n + 7u) & ~(size_t)7u; }
static size_t frame_bytes(size_t payload) { return FRAME_HEADER + pad8(payload); }

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A frame's check over its first 16 header bytes and its payload: in format 2 the CRC-32C
 * (little-endian) and 12 zero bytes, in format 1 the BLAKE2b-128. */
static void frame_hash(unsigned fmt, const uint8_t head[16], const uint8_t *payload, size_t len, uint8_t out[16])
{
    if (fmt == FMT_CRC32C) {
        uint32_t c = kl_crc32c(0, head, 16);
        if (len > 0)
            c = kl_crc32c(c, payload, len);
        memset(out, 0, 16);
        le32_put(out, c);
        return;
    }
    assert(fmt == FMT_BLAKE2B);
    crypto_generichash_state s;
    crypto_generichash_init(&s, NULL, 0, 16);
    crypto_generichash_update(&s, head, 16);
    if (len > 0)
        crypto_generichash_update(&s, payload, len);
    crypto_generichash_final(&s, out, 16);
}

static void frame_header(uint8_t h[FRAME_HEADER], uint64_t nonce, uint32_t type, const uint8_t *payload,
                         size_t len)
{
    le64_put(h, nonce);
    le32_put(h + 8, (uint32_t)len);
    le32_put(h + 12, type);
    frame_hash(FMT_CRC32C, h, payload, len, h + 16);
}

static void seg_header(uint8_t h[SEG_HEADER], uint64_t seq, uint64_t nonce)
{
    memset(h, 0, SEG_HEADER);
    memcpy(h, seg_magic, 8);
    le64_put(h + 8, seq);
    le64_put(h + 16, nonce);
    crypto_generichash(h + 32, 16, h, 32, NULL, 0);
}

/* Whether h is a segment header of either format; its seq, nonce and format then. */
static bool seg_header_parse(const uint8_t *h, uint64_t *seq, uint64_t *nonce, unsigned *fmt)
{
    uint8_t want[16];
    if (memcmp(h, seg_magic, 8) == 0)
        *fmt = FMT_CRC32C;
    else if (memcmp(h, seg_magic_blake2b, 8) == 0)
        *fmt = FMT_BLAKE2B;
    else
        return false;
    crypto_generichash(want, 16, h, 32, NULL, 0);
    if (sodium_memcmp(want, h + 32, 16) != 0)
        return false;
    *seq = le64_get(h + 8);
    *nonce = le64_get(h + 16);
    return true;
}

/* The frame at off in buf[0..size) when it is whole and valid for this nonce, in a segment
 * of format fmt. */
static bool frame_at(const uint8_t *buf, size_t size, size_t off, uint64_t nonce, unsigned fmt, uint32_t *type,
                     const uint8_t **payload, size_t *len)
{
    if (off > size || size - off < FRAME_HEADER)
        return false;
    const uint8_t *h = buf + off;
    if (le64_get(h) != nonce)
        return false;
    size_t n = le32_get(h + 8);
    if (n > RECORD_MAX || size - off - FRAME_HEADER < pad8(n))
        return false;
    uint8_t want[16];
    frame_hash(fmt, h, h + FRAME_HEADER, n, want);
    if (sodium_memcmp(want, h + 16, 16) != 0)
        return false;
    *type = le32_get(h + 12);
    *payload = h + FRAME_HEADER;
    *len = n;
    return true;
}

static void seg_name(const kl_journal *j, uint64_t seq, const char *suffix, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%016" PRIx64 "%s", j->dir, seq, suffix);
}

static kl_code sys_fail(kl_err *err, const char *what, const char *path, int e)
{
    return kl_fail(err, KL_INTERNAL, "journal", "journal: %s %s: %s", what, path, strerror(e));
}

static kl_code dir_sync(kl_journal *j, kl_err *err)
{
    if (fsync(j->dirfd) != 0)
        return sys_fail(err, "sync of directory", j->dir, errno);
    return KL_OK;
}

/* Writes every byte of iov[0..n) at off. */
static int pwritev_all(int fd, struct iovec *iov, int n, off_t off)
{
    while (n > 0) {
        ssize_t w = pwritev(fd, iov, n, off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        off += w;
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

/* A new segment file of cap bytes: header, then zeros to the end (so that every later
 * write into it is an overwrite of written blocks), synced, then renamed into place and
 * the directory synced. Cost: cap bytes written and one fdatasync. */
static kl_code seg_create(kl_journal *j, uint64_t seq, size_t cap, seg *out, kl_err *err)
{
    char tmp[4200], path[4200];
    seg_name(j, seq, ".tmp", tmp, sizeof tmp);
    seg_name(j, seq, ".seg", path, sizeof path);
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return sys_fail(err, "cannot create", tmp, errno);
    kl_code rc = KL_OK;
    /* Reserve the space first: a full disk fails here, not halfway through the zeros. */
    int fe = posix_fallocate(fd, 0, (off_t)cap);
    if (fe != 0 && fe != EOPNOTSUPP && fe != EINVAL) {
        rc = sys_fail(err, "cannot allocate", tmp, fe);
        goto fail_file;
    }
    uint64_t nonce;
    randombytes_buf(&nonce, sizeof nonce);
    static const uint8_t zeros[1u << 16];
    uint8_t h[SEG_HEADER];
    seg_header(h, seq, nonce);
    size_t off = 0;
    while (off < cap) {
        const uint8_t *p = off == 0 ? h : zeros;
        size_t n = off == 0 ? SEG_HEADER : (cap - off < sizeof zeros ? cap - off : sizeof zeros);
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            rc = sys_fail(err, "cannot write", tmp, w < 0 ? errno : ENOSPC);
            goto fail_file;
        }
        if (off == 0 && (size_t)w != SEG_HEADER) {
            rc = sys_fail(err, "short header write to", tmp, EIO);
            goto fail_file;
        }
        off += (size_t)w;
    }
    if (fdatasync(fd) != 0) {
        rc = sys_fail(err, "cannot sync", tmp, errno);
        goto fail_file;
    }
    /* The zeros are on disk; direct appends would otherwise invalidate their cached pages
     * one write at a time. */
    (void)posix_fadvise(fd, 0, (off_t)cap, POSIX_FADV_DONTNEED);
    if (rename(tmp, path) != 0) {
        rc = sys_fail(err, "cannot rename", tmp, errno);
        goto fail_file;
    }
    if ((rc = dir_sync(j, err)) != KL_OK) {
        close(fd);
        unlink(path);
        return rc;
    }
    *out = (seg){.seq = seq, .nonce = nonce, .fd = fd, .cap = cap, .end = SEG_HEADER};
    return KL_OK;

fail_file:
    close(fd);
    unlink(tmp);
    return rc;
}

/* A retired segment made the spare `seq`: a new header (new nonce, so its old frames read
 * as the end of the records), synced, then the rename. A crash in between leaves a file
 * whose header names another seq than its name: the open removes it. */
static kl_code seg_recycle(kl_journal *j, uint64_t old_seq, uint64_t seq, seg *out, kl_err *err)
{
    char from[4200], to[4200];
    seg_name(j, old_seq, ".seg", from, sizeof from);
    seg_name(j, seq, ".seg", to, sizeof to);
    int fd = open(from, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return sys_fail(err, "cannot open", from, errno);
    uint64_t nonce;
    randombytes_buf(&nonce, sizeof nonce);
    uint8_t h[SEG_HEADER];
    seg_header(h, seq, nonce);
    kl_code rc;
    if (pwrite(fd, h, sizeof h, 0) != (ssize_t)sizeof h)
        rc = sys_fail(err, "cannot write header of", from, errno ? errno : EIO);
    else if (fdatasync(fd) != 0)
        rc = sys_fail(err, "cannot sync", from, errno);
    else if (rename(from, to) != 0)
        rc = sys_fail(err, "cannot rename", from, errno);
    else
        rc = dir_sync(j, err);
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); /* as seg_create's zeros */
    if (rc != KL_OK) {
        close(fd);
        return rc;
    }
    *out = (seg){.seq = seq, .nonce = nonce, .fd = fd, .cap = j->seg_bytes, .end = SEG_HEADER};
    return KL_OK;
}

static void seg_close(seg *s)
{
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
}

/* A spare that will never be used: it holds no record, so no directory sync is owed. */
static void spare_drop(kl_journal *j, seg *s)
{
    char path[4200];
    seg_name(j, s->seq, ".seg", path, sizeof path);
    seg_close(s);
    unlink(path);
}

/* ---- The keeper: retires sealed segments after a flush, keeps one spare ready. */

static void keeper_wait(kl_journal *j, int ms)
{
    struct timespec ts;
    kl_deadline_after_ms(&ts, ms);
    pthread_cond_timedwait(&j->wake, &j->mu, &ts);
}

/* Retires the first n sealed segments (their records are durable elsewhere): one may
 * become the spare, the others are unlinked. Called with mu held; drops it meanwhile. */
static void keeper_retire(kl_journal *j, size_t n)
{
    uint64_t seqs[SEALED_CAP];
    size_t caps[SEALED_CAP];
    memcpy(seqs, j->sealed, n * sizeof seqs[0]);
    memcpy(caps, j->sealed_cap, n * sizeof caps[0]);
    memmove(j->sealed, j->sealed + n, (j->nsealed - n) * sizeof j->sealed[0]);
    memmove(j->sealed_cap, j->sealed_cap + n, (j->nsealed - n) * sizeof j->sealed_cap[0]);
    j->nsealed -= n;
    bool want_spare = j->spare.fd < 0;
    uint64_t spare_seq = want_spare ? j->next_seq++ : 0;
    pthread_mutex_unlock(&j->mu);
    seg spare = {.fd = -1};
    bool unlinked = false;
    for (size_t i = 0; i < n; i++) {
        kl_err e;
        if (want_spare && spare.fd < 0 && caps[i] == j->seg_bytes &&
            seg_recycle(j, seqs[i], spare_seq, &spare, &e) == KL_OK)
            continue;
        char path[4200];
        seg_name(j, seqs[i], ".seg", path, sizeof path);
        unlinked |= unlink(path) == 0;
    }
    if (unlinked) /* J4 holds without it: an unlink that did not last leaves a stale file */
        (void)fsync(j->dirfd);
    pthread_mutex_lock(&j->mu);
    if (spare.fd >= 0) {
        if (j->spare.fd < 0 && spare.seq > j->activated_seq)
            j->spare = spare;
        else
            spare_drop(j, &spare);
    }
    pthread_cond_broadcast(&j->done);
}

static void *keeper_main(void *arg)
{
    kl_journal *j = arg;
    pthread_mutex_lock(&j->mu);
    while (!j->stop) {
        if (j->nsealed > 0) {
            j->keeper_busy = true;
            size_t n = j->nsealed;
            pthread_mutex_unlock(&j->mu);
            kl_err e;
            kl_err_clear(&e);
            kl_code rc = j->flush(j->flush_arg, &e);
            pthread_mutex_lock(&j->mu);
            if (rc == KL_OK) {
                keeper_retire(j, n); /* J4: the flush started after these were sealed */
            } else {
                j->keeper_busy = false;
                pthread_cond_broadcast(&j->done); /* a cut waiting for the keeper goes on */
                keeper_wait(j, KEEPER_RETRY_MS);
                continue;
            }
            j->keeper_busy = false;
            continue;
        }
        if (j->spare.fd < 0 && j->want_spare) {
            j->keeper_busy = true;
            j->spare_creating = true;
            uint64_t seq = j->next_seq++;
            pthread_mutex_unlock(&j->mu);
            seg s;
            kl_err e;
            kl_code rc = seg_create(j, seq, j->seg_bytes, &s, &e);
            pthread_mutex_lock(&j->mu);
            j->keeper_busy = false;
            j->spare_creating = false;
            if (rc == KL_OK) {
                if (j->spare.fd < 0 && s.seq > j->activated_seq)
                    j->spare = s;
                else /* the appender made one itself meanwhile */
                    spare_drop(j, &s);
                pthread_cond_broadcast(&j->done);
            } else {
                pthread_cond_broadcast(&j->done); /* an appender waiting for it makes its own */
                keeper_wait(j, KEEPER_RETRY_MS); /* a full disk: try again later */
            }
            continue;
        }
        pthread_cond_broadcast(&j->done);
        pthread_cond_wait(&j->wake, &j->mu);
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* ---- Open: find the chain of segments holding records, replay it. */

typedef struct found_seg {
    uint64_t seq;
    uint64_t nonce;
    unsigned fmt;
    size_t size;
    uint8_t *buf; /* the whole file */
    size_t end;   /* first offset not holding a valid frame */
    bool has_frames;
    bool has_link;
    uint64_t link_seq, link_end;
    bool in_chain;
} found_seg;

static int found_cmp(const void *a, const void *b)
{
    uint64_t x = ((const found_seg *)a)->seq, y = ((const found_seg *)b)->seq;
    return x < y ? -1 : x > y;
}

static kl_code read_file(const char *path, uint8_t **buf, size_t *size, kl_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sys_fail(err, "cannot open", path, errno);
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return sys_fail(err, "cannot stat", path, e);
    }
    size_t n = (size_t)sb.st_size;
    uint8_t *b = malloc(n > 0 ? n : 1);
    if (b == NULL) {
        close(fd);
        return kl_fail(err, KL_INTERNAL, "memory", "journal: out of memory reading %s", path);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, b + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = r < 0 ? errno : EIO;
            free(b);
            close(fd);
            return sys_fail(err, "cannot read", path, e);
        }
        got += (size_t)r;
    }
    close(fd);
    *buf = b;
    *size = n;
    return KL_OK;
}

/* Walks the frames of f: end, has_frames and the link. */
static void found_scan(found_seg *f)
{
    size_t off = SEG_HEADER;
    uint32_t type;
    const uint8_t *p;
    size_t len;
    while (frame_at(f->buf, f->size, off, f->nonce, f->fmt, &type, &p, &len)) {
        if (!f->has_frames && type == TYPE_LINK && len == LINK_PAYLOAD) {
            f->has_link = true;
            f->link_seq = le64_get(p);
            f->link_end = le64_get(p + 8);
        }
        f->has_frames = true;
        off += frame_bytes(len);
    }
    f->end = off;
}

/* Whether a valid frame of f starts anywhere after its end (frames are 8-aligned). */
static bool found_valid_after(const found_seg *f)
{
    uint32_t type;
    const uint8_t *p;
    size_t len;
    for (size_t off = f->end + 8; off + FRAME_HEADER <= f->size; off += 8)
        if (le64_get(f->buf + off) == f->nonce && frame_at(f->buf, f->size, off, f->nonce, f->fmt, &type, &p, &len))
            return true;
    return false;
}

static kl_code corrupt(kl_err *err, const kl_journal *j, uint64_t seq, size_t off, const char *why)
{
    return kl_fail(err, KL_FAILED_PRECONDITION, "journal_corrupt",
                   "journal %s: segment %016" PRIx64 " at offset %zu: %s; the synced log is damaged. "
                   "Keep the directory (README: Recovering a member)",
                   j->dir, seq, off, why);
}

/* Every segment file of the directory, read whole and scanned, sorted by seq, into *out
 * (*n of them, caller frees each buf and the array); *max_seq gets the highest seq named.
 * Leftovers of a creation or a recycle that a crash interrupted are removed here. */
static kl_code open_read_all(kl_journal *j, found_seg **out, size_t *n, uint64_t *max_seq, kl_err *err)
{
    DIR *d = fdopendir(dup(j->dirfd));
    if (d == NULL)
        return sys_fail(err, "cannot list", j->dir, errno);
    found_seg *fs = NULL;
    size_t nf = 0, capf = 0;
    kl_code rc = KL_OK;
    struct dirent *de;
    while (rc == KL_OK && (de = readdir(d)) != NULL) {
        const char *nm = de->d_name;
        if (strlen(nm) != 20 || (strcmp(nm + 16, ".seg") != 0 && strcmp(nm + 16, ".tmp") != 0))
            continue;
        char *endp, hex[17], path[4200];
        memcpy(hex, nm, 16);
        hex[16] = 0;
        uint64_t seq = strtoull(hex, &endp, 16);
        if (*endp != 0)
            continue;
        if (seq > *max_seq)
            *max_seq = seq;
        snprintf(path, sizeof path, "%s/%s", j->dir, nm);
        if (strcmp(nm + 16, ".tmp") == 0) { /* a spare whose creation never finished */
            unlink(path);
            continue;
        }
        uint8_t *buf = NULL;
        size_t size = 0;
        if ((rc = read_file(path, &buf, &size, err)) != KL_OK)
            break;
        uint64_t hseq, nonce;
        unsigned fmt;
        if (size < SEG_HEADER || !seg_header_parse(buf, &hseq, &nonce, &fmt) || hseq != seq) {
            /* A recycle a crash interrupted (its records were retired), or a creation
             * that never reached its rename: nothing in it is needed. */
            free(buf);
            unlink(path);
            continue;
        }
        if (nf == capf) {
            size_t nc = capf ? capf * 2 : 8;
            found_seg *g = realloc(fs, nc * sizeof *g);
            if (g == NULL) {
                free(buf);
                rc = kl_fail(err, KL_INTERNAL, "memory", "journal: out of memory");
                break;
            }
            fs = g;
            capf = nc;
        }
        fs[nf] = (found_seg){.seq = seq, .nonce = nonce, .fmt = fmt, .size = size, .buf = buf};
        found_scan(&fs[nf]);
        nf++;
    }
    closedir(d);
    if (nf > 0)
        qsort(fs, nf, sizeof *fs, found_cmp);
    *out = fs;
    *n = nf;
    return rc;
}

/* Marks in_chain the segments from fs[last] back along the links (J3): each link must name
 * the segment before it and the offset its records ended at, or a segment that is gone
 * (retired, and every one before it with it). */
static kl_code open_chain(const kl_journal *j, found_seg *fs, ssize_t last, kl_err *err)
{
    if (found_valid_after(&fs[last]))
        return corrupt(err, j, fs[last].seq, fs[last].end, "a damaged record is followed by valid ones");
    for (ssize_t i = last; i >= 0;) {
        found_seg *f = &fs[i];
        f->in_chain = true;
        if (!f->has_link)
            return corrupt(err, j, f->seq, SEG_HEADER, "the segment does not start with its link");
        if (f->link_seq == 0)
            return KL_OK; /* the journal's first segment */
        ssize_t prev = -1;
        for (ssize_t k = i - 1; k >= 0 && prev < 0; k--)
            if (fs[k].seq == f->link_seq)
                prev = k;
        for (ssize_t k = i - 1; k > prev; k--)
            if (fs[k].seq > f->link_seq && fs[k].has_frames)
                return corrupt(err, j, fs[k].seq, SEG_HEADER, "a segment with records is off the chain");
        if (prev < 0)
            return KL_OK; /* the linked segment was retired: so was every one before it */
        if (fs[prev].end != f->link_end)
            return corrupt(err, j, fs[prev].seq, fs[prev].end,
                           fs[prev].end < f->link_end ? "records the next segment's link counts are damaged"
                                                      : "the segment holds records past its link's end");
        i = prev;
    }
    return KL_OK;
}

/* Every record of the chain through replay, oldest first (J2). */
static kl_code open_replay_chain(const kl_journal *j, const found_seg *fs, size_t nf, kl_journal_replay_fn replay,
                                 void *arg, kl_err *err)
{
    kl_code rc = KL_OK;
    for (size_t i = 0; rc == KL_OK && i < nf; i++) {
        if (!fs[i].in_chain)
            continue;
        size_t off = SEG_HEADER;
        uint32_t type;
        const uint8_t *p;
        size_t len;
        while (rc == KL_OK && off < fs[i].end && frame_at(fs[i].buf, fs[i].size, off, fs[i].nonce, fs[i].fmt, &type, &p, &len)) {
            if (type == TYPE_RECORD)
                rc = replay(arg, p, len, err);
            else if (type != TYPE_LINK)
                rc = corrupt(err, j, fs[i].seq, off, "a frame of unknown type");
            off += frame_bytes(len);
        }
    }
    return rc;
}

/* Replays the records of the chain that ends at the last segment holding frames, keeps its
 * segments as sealed ones, and removes every other segment file (older ones are retired,
 * later ones never held a record). Sets *last_seq and *last_end to where the next
 * segment's link points. */
static kl_code open_replay(kl_journal *j, kl_journal_replay_fn replay, void *arg, uint64_t *last_seq,
                           uint64_t *last_end, kl_err *err)
{
    found_seg *fs = NULL;
    size_t nf = 0;
    uint64_t max_seq = 0;
    kl_code rc = open_read_all(j, &fs, &nf, &max_seq, err);
    ssize_t last = -1;
    for (size_t i = 0; i < nf; i++)
        if (fs[i].has_frames)
            last = (ssize_t)i;
    if (rc == KL_OK && last >= 0)
        rc = open_chain(j, fs, last, err);
    if (rc == KL_OK)
        rc = open_replay_chain(j, fs, nf, replay, arg, err);
    if (rc == KL_OK) {
        *last_seq = last >= 0 ? fs[last].seq : 0;
        *last_end = last >= 0 ? fs[last].end : 0;
        j->next_seq = max_seq + 1;
        for (size_t i = 0; i < nf && rc == KL_OK; i++) {
            char path[4200];
            seg_name(j, fs[i].seq, ".seg", path, sizeof path);
            if (!fs[i].in_chain) {
                unlink(path);
            } else if (j->nsealed == SEALED_CAP) {
                rc = kl_fail(err, KL_INTERNAL, "journal", "journal %s: more than %u segments hold records",
                             j->dir, SEALED_CAP);
            } else { /* sealed: retired by the keeper after its first flush */
                j->sealed_cap[j->nsealed] = fs[i].size;
                j->sealed[j->nsealed++] = fs[i].seq;
            }
        }
        if (rc == KL_OK)
            rc = dir_sync(j, err);
    }
    for (size_t i = 0; i < nf; i++)
        free(fs[i].buf);
    free(fs);
    return rc;
}

/* The segment an open starts: small, so that opening a store costs little; the spares
 * that follow are segment_bytes. */
static size_t first_segment_bytes(const kl_journal *j)
{
    return j->seg_bytes < (1u << 20) ? j->seg_bytes : (1u << 20);
}

kl_code kl_journal_open(const char *dir, const kl_journal_options *opt, kl_journal_replay_fn replay,
                        void *replay_arg, kl_journal **out, kl_err *err)
{
    if (opt->segment_bytes < KL_JOURNAL_MIN_SEGMENT || opt->flush == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "segment_bytes",
                       "journal: segment_bytes %zu is below %u (or no flush callback)", opt->segment_bytes,
                       KL_JOURNAL_MIN_SEGMENT);
    if (sodium_init() < 0)
        return kl_fail(err, KL_INTERNAL, "sodium", "journal: libsodium failed to initialise");
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return sys_fail(err, "cannot create directory", dir, errno);
    kl_journal *j = calloc(1, sizeof *j);
    if (j == NULL || (j->dir = strdup(dir)) == NULL) {
        free(j);
        return kl_fail(err, KL_INTERNAL, "memory", "journal: out of memory");
    }
    j->seg_bytes = opt->segment_bytes & ~(size_t)4095u;
    j->flush = opt->flush;
    j->flush_arg = opt->flush_arg;
    j->active.fd = -1;
    j->spare.fd = -1;
    j->direct_fd = -1;
    j->no_direct = opt->no_direct;
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->wake, &ca);
    pthread_cond_init(&j->done, &ca);
    pthread_condattr_destroy(&ca);
    kl_code rc;
    j->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (j->dirfd < 0) {
        rc = sys_fail(err, "cannot open directory", dir, errno);
        goto fail_dir;
    }
    uint64_t last_seq, last_end;
    if ((rc = open_replay(j, replay, replay_arg, &last_seq, &last_end, err)) != KL_OK)
        goto fail_replay;
    /* Never append to a segment found here: its tail may be a torn record, and J3 allows
     * that only in the last segment holding records. */
    j->activated_seq = j->next_seq++;
    if ((rc = seg_create(j, j->activated_seq, first_segment_bytes(j), &j->active, err)) != KL_OK)
        goto fail_replay;
    direct_begin(j);
    j->link_pending = true;
    j->link_prev_seq = last_seq;
    j->link_prev_end = last_end;
    if (pthread_create(&j->keeper, NULL, keeper_main, j) != 0) {
        rc = kl_fail(err, KL_INTERNAL, "journal", "journal: cannot start its keeper thread");
        goto fail_replay;
    }
    j->keeper_started = true;
    *out = j;
    return KL_OK;

fail_replay:
    seg_close(&j->active);
fail_dir:
    kl_journal_close(j);
    return rc;
}

void kl_journal_close(kl_journal *j)
{
    if (j == NULL)
        return;
    if (j->keeper_started) {
        pthread_mutex_lock(&j->mu);
        j->stop = true;
        pthread_cond_broadcast(&j->wake);
        pthread_mutex_unlock(&j->mu);
        pthread_join(j->keeper, NULL);
    }
    direct_end(j);
    free(j->stage);
    seg_close(&j->active);
    seg_close(&j->spare);
    if (j->dirfd >= 0)
        close(j->dirfd);
    pthread_cond_destroy(&j->done);
    pthread_cond_destroy(&j->wake);
    pthread_mutex_destroy(&j->mu);
    free(j->dir);
    free(j);
}

/* ---- Direct appends (journal.h). */

static void direct_end(kl_journal *j)
{
    if (j->direct_fd >= 0)
        close(j->direct_fd);
    j->direct_fd = -1;
    atomic_store_explicit(&j->direct_on, false, memory_order_relaxed);
}

/* Opens the segment that just became active for direct appends and reads the block that
 * holds its end into the stage. Any failure (a filesystem without O_DIRECT, no memory)
 * leaves this segment's appends on the page cache: slower, as durable. */
static void direct_begin(kl_journal *j)
{
    direct_end(j);
    if (j->no_direct)
        return;
    assert(j->active.cap % DIRECT_BLOCK == 0); /* a direct write's last block ends inside the segment */
    if (j->stage == NULL) {
        j->stage = aligned_alloc(DIRECT_BLOCK, DIRECT_BLOCK);
        if (j->stage == NULL)
            return;
        j->stage_cap = DIRECT_BLOCK;
    }
    char path[4200];
    seg_name(j, j->active.seq, ".seg", path, sizeof path);
    int fd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
    if (fd < 0)
        return;
    off_t base = (off_t)(j->active.end - j->active.end % DIRECT_BLOCK);
    ssize_t r;
    do
        r = pread(fd, j->stage, DIRECT_BLOCK, base);
    while (r < 0 && errno == EINTR);
    if (r != (ssize_t)DIRECT_BLOCK) {
        close(fd);
        return;
    }
    j->direct_fd = fd;
    atomic_store_explicit(&j->direct_on, true, memory_order_relaxed);
}

/* Writes the frames in iov (bytes in all) at active.end as whole blocks through the direct
 * descriptor: the stage's head (the bytes already in the first block), the frames, zeros
 * to the block's end. Returns 0, or -1 with errno (ENOMEM: nothing was written; EINVAL: the
 * device refused the alignment; after either the caller may write through the page cache).
 * Cost: a copy of the frames and one
 * pwrite of ceil((end % DIRECT_BLOCK + bytes) / DIRECT_BLOCK) blocks. */
static int direct_write(kl_journal *j, const struct iovec *iov, int n, size_t bytes)
{
    size_t head = j->active.end % DIRECT_BLOCK;
    size_t total = head + bytes;
    size_t wlen = (total + DIRECT_BLOCK - 1) & ~(size_t)(DIRECT_BLOCK - 1);
    off_t at = (off_t)(j->active.end - head);
    assert((size_t)at + wlen <= j->active.cap);
    uint8_t *buf = j->stage;
    if (wlen > j->stage_cap) {
        size_t cap = wlen <= STAGE_KEEP ? STAGE_KEEP : wlen;
        buf = aligned_alloc(DIRECT_BLOCK, cap);
        if (buf == NULL) {
            errno = ENOMEM;
            return -1;
        }
        memcpy(buf, j->stage, head);
        if (cap == STAGE_KEEP) { /* the new stage, kept */
            free(j->stage);
            j->stage = buf;
            j->stage_cap = cap;
        }
    }
    size_t off = head;
    for (int i = 0; i < n; i++) {
        memcpy(buf + off, iov[i].iov_base, iov[i].iov_len);
        off += iov[i].iov_len;
    }
    assert(off == total);
    memset(buf + total, 0, wlen - total);
    int rc = 0;
    for (size_t done = 0; done < wlen;) {
        ssize_t w = pwrite(j->direct_fd, buf + done, wlen - done, at + (off_t)done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0 || (size_t)w % DIRECT_BLOCK != 0) { /* a short write cannot go on aligned */
            if (w >= 0)
                errno = w == 0 ? ENOSPC : EIO;
            rc = -1;
            break;
        }
        done += (size_t)w;
    }
    if (rc == 0) {
        size_t keep = total % DIRECT_BLOCK; /* the new end's block, for the next append */
        if (keep > 0)
            memmove(j->stage, buf + (total - keep), keep);
    }
    if (buf != j->stage)
        free(buf);
    return rc;
}

static kl_code journal_failed(kl_journal *j, kl_err *err)
{
    if (err != NULL)
        *err = j->failure;
    return j->failure.code;
}

/* The appender's failure: kept, and every later append refused with it. */
static kl_code fail_append(kl_journal *j, kl_code rc, kl_err *err)
{
    j->failed = true;
    j->failure = *err;
    return rc;
}

/* Seals the active segment and makes a segment that holds `need` bytes of frames active:
 * the spare when it is ready and large enough, else one made here. */
static kl_code switch_segment(kl_journal *j, size_t need, bool seal_old, kl_err *err)
{
    seg old = j->active;
    bool big = SEG_HEADER + need > j->seg_bytes;
    pthread_mutex_lock(&j->mu);
    if (seal_old && j->nsealed >= SEALED_MAX) {
        pthread_mutex_unlock(&j->mu);
        return kl_fail(err, KL_INTERNAL, "journal",
                       "journal %s: %u segments wait for a flush that keeps failing (KL_JOURNAL_SEALED_MAX)", j->dir,
                       SEALED_MAX);
    }
    if (seal_old) {
        j->sealed_cap[j->nsealed] = old.cap;
        j->sealed[j->nsealed++] = old.seq;
    }
    /* A spare being written is nearer done than one started here would be. */
    while (!big && j->spare.fd < 0 && j->spare_creating)
        pthread_cond_wait(&j->done, &j->mu);
    seg next = {.fd = -1};
    if (!big && j->spare.fd >= 0) {
        next = j->spare;
        j->spare = (seg){.fd = -1};
    }
    j->want_spare = false;
    uint64_t seq = next.fd < 0 ? j->next_seq++ : next.seq;
    j->activated_seq = seq;
    if (j->spare.fd >= 0 && j->spare.seq < seq)
        spare_drop(j, &j->spare);
    pthread_cond_signal(&j->wake);
    pthread_mutex_unlock(&j->mu);
    direct_end(j);
    seg_close(&old);
    j->active = (seg){.fd = -1};
    if (next.fd < 0) {
        size_t cap = big ? (SEG_HEADER + need + 4095u) & ~(size_t)4095u : j->seg_bytes;
        kl_code rc = seg_create(j, seq, cap, &next, err);
        if (rc != KL_OK)
            return rc;
    }
    j->active = next;
    direct_begin(j);
    j->link_pending = true;
    j->link_prev_seq = old.seq;
    j->link_prev_end = old.end;
    return KL_OK;
}

kl_code kl_journal_append(kl_journal *j, const uint8_t *rec, size_t len, uint64_t *sync_ns, kl_err *err)
{
    if (j->failed)
        return journal_failed(j, err);
    if (len > RECORD_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "record", "journal: a record of %zu bytes exceeds %u", len,
                       RECORD_MAX);
    if (j->active.fd < 0 || j->active.end + frame_bytes(len) + (j->link_pending ? LINK_FRAME : 0) > j->active.cap) {
        kl_code rc = switch_segment(j, frame_bytes(len) + LINK_FRAME, j->active.fd >= 0, err);
        if (rc != KL_OK)
            return fail_append(j, rc, err);
    }
    uint8_t link_h[FRAME_HEADER], link_p[LINK_PAYLOAD], rec_h[FRAME_HEADER];
    static const uint8_t pad[8];
    struct iovec iov[5];
    int n = 0;
    size_t bytes = frame_bytes(len);
    if (j->link_pending) {
        le64_put(link_p, j->link_prev_seq);
        le64_put(link_p + 8, j->link_prev_end);
        frame_header(link_h, j->active.nonce, TYPE_LINK, link_p, LINK_PAYLOAD);
        iov[n++] = (struct iovec){link_h, FRAME_HEADER};
        iov[n++] = (struct iovec){link_p, LINK_PAYLOAD};
        bytes += LINK_FRAME;
    }
    frame_header(rec_h, j->active.nonce, TYPE_RECORD, rec, len);
    iov[n++] = (struct iovec){rec_h, FRAME_HEADER};
    if (len > 0)
        iov[n++] = (struct iovec){(void *)rec, len};
    if (pad8(len) > len)
        iov[n++] = (struct iovec){(void *)pad, pad8(len) - len};
    assert(j->active.end + bytes <= j->active.cap); /* J1: a frame never crosses a segment's end */
    char path[4200];
    int wr = -1;
    if (j->direct_fd >= 0) {
        wr = direct_write(j, iov, n, bytes);
        /* No memory for the blocks, or a device whose blocks are larger than DIRECT_BLOCK:
         * the page cache write below rewrites every byte of the frames, so this segment goes
         * on through it. */
        if (wr != 0 && (errno == ENOMEM || errno == EINVAL))
            direct_end(j);
    }
    if (j->direct_fd < 0)
        wr = pwritev_all(j->active.fd, iov, n, (off_t)j->active.end);
    if (wr != 0) {
        seg_name(j, j->active.seq, ".seg", path, sizeof path);
        return fail_append(j, sys_fail(err, "cannot write", path, errno), err);
    }
    uint64_t t0 = monotonic_ns();
    if (fdatasync(j->active.fd) != 0) { /* either descriptor syncs the file's data */
        seg_name(j, j->active.seq, ".seg", path, sizeof path);
        return fail_append(j, sys_fail(err, "cannot sync", path, errno), err);
    }
    if (sync_ns != NULL)
        *sync_ns = monotonic_ns() - t0;
    j->active.end += bytes;
    j->link_pending = false;
    if (j->active.end > j->active.cap / 2 && !j->want_spare) {
        pthread_mutex_lock(&j->mu);
        if (j->spare.fd < 0) {
            j->want_spare = true;
            pthread_cond_signal(&j->wake);
        }
        pthread_mutex_unlock(&j->mu);
    }
    return KL_OK;
}

kl_code kl_journal_cut(kl_journal *j, kl_err *err)
{
    if (j->failed)
        return journal_failed(j, err);
    /* Every sealed segment and the active one go now; the keeper's own retire of any of
     * them (after a flush already running) finds them gone. */
    pthread_mutex_lock(&j->mu);
    while (j->keeper_busy) /* let a retire or a spare in progress finish first */
        pthread_cond_wait(&j->done, &j->mu);
    uint64_t seqs[SEALED_CAP + 1];
    size_t n = j->nsealed;
    memcpy(seqs, j->sealed, n * sizeof seqs[0]);
    j->nsealed = 0;
    pthread_mutex_unlock(&j->mu);
    if (j->active.fd >= 0) {
        seqs[n++] = j->active.seq;
        direct_end(j);
        seg_close(&j->active);
    }
    uint64_t prev_seq = n > 0 ? seqs[n - 1] : 0;
    for (size_t i = 0; i < n; i++) {
        char path[4200];
        seg_name(j, seqs[i], ".seg", path, sizeof path);
        if (unlink(path) != 0 && errno != ENOENT)
            return fail_append(j, sys_fail(err, "cannot remove", path, errno), err);
    }
    kl_code rc = dir_sync(j, err);
    if (rc != KL_OK)
        return fail_append(j, rc, err);
    /* A link to a segment that is gone: the open then takes the chain to start here. */
    if ((rc = switch_segment(j, LINK_FRAME, false, err)) != KL_OK)
        return fail_append(j, rc, err);
    j->link_prev_seq = prev_seq;
    j->link_prev_end = 0;
    return KL_OK;
}

bool kl_journal_direct(kl_journal *j) { return atomic_load_explicit(&j->direct_on, memory_order_relaxed); }

size_t kl_journal_segment_count(kl_journal *j)
{
    DIR *d = opendir(j->dir);
    size_t n = 0;
    struct dirent *de;
    while (d != NULL && (de = readdir(d)) != NULL)
        n += strlen(de->d_name) == 20 && strcmp(de->d_name + 16, ".seg") == 0;
    if (d != NULL)
        closedir(d);
    return n;
}

kl_code kl_journal_settle(kl_journal *j, int timeout_ms, kl_err *err)
{
    struct timespec ts;
    kl_deadline_after_ms(&ts, timeout_ms);
    pthread_mutex_lock(&j->mu);
    int e = 0;
    while ((j->nsealed > 0 || (j->want_spare && j->spare.fd < 0) || j->keeper_busy) && e == 0) {
        pthread_cond_signal(&j->wake);
        e = pthread_cond_timedwait(&j->done, &j->mu, &ts);
    }
    bool idle = j->nsealed == 0 && !(j->want_spare && j->spare.fd < 0) && !j->keeper_busy;
    pthread_mutex_unlock(&j->mu);
    return idle ? KL_OK
                : kl_fail(err, KL_DEADLINE_EXCEEDED, "journal", "journal: keeper still busy after %d ms",
                          timeout_ms);
}
