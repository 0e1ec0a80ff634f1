#include "daemon/store/snapshot.h"

#include "daemon/store/keys.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK_FIXED 40 /* magic .. after_len */
static const uint8_t chunk_magic[4] = {'K', 'L', 'S', 'C'};

static void be32_put(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t be32_get(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int key_cmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    return c ? c : (an < bn ? -1 : an > bn);
}

/* digest = BLAKE2b-256(prev || bytes) */
static void chain_digest(const uint8_t prev[KL_SNAP_DIGEST_BYTES], const uint8_t *bytes, size_t n,
                         uint8_t out[KL_SNAP_DIGEST_BYTES])
{
    crypto_generichash_state h;
    crypto_generichash_init(&h, NULL, 0, KL_SNAP_DIGEST_BYTES);
    crypto_generichash_update(&h, prev, KL_SNAP_DIGEST_BYTES);
    crypto_generichash_update(&h, bytes, n);
    crypto_generichash_final(&h, out, KL_SNAP_DIGEST_BYTES);
}

/* ================================================================ production */

struct kl_snap_reader {
    rocksdb_t *db;
    rocksdb_column_family_handle_t *log_cf;
    const rocksdb_snapshot_t *snap;
    rocksdb_readoptions_t *ro;
    rocksdb_iterator_t *it;
    bool reseek;   /* position the iterator from pos.after before reading */
    bool done;
    uint64_t index, term, key_count;
    uint8_t config[KL_SNAP_CONFIG_MAX];
    size_t config_len;
    kl_snap_pos pos;
    uint8_t *buf;
    size_t cap, len;
};

static bool buf_reserve(kl_snap_reader *r, size_t more)
{
    if (r->len + more <= r->cap)
        return true;
    size_t cap = r->cap ? r->cap : KL_SNAP_CHUNK_BYTES + 4096;
    while (cap < r->len + more)
        cap *= 2;
    uint8_t *b = realloc(r->buf, cap);
    if (b == NULL)
        return false;
    r->buf = b;
    r->cap = cap;
    return true;
}

static void buf_put(kl_snap_reader *r, const void *p, size_t n)
{
    memcpy(r->buf + r->len, p, n);
    r->len += n;
}

static kl_code iter_fail(rocksdb_iterator_t *it, kl_err *err)
{
    char *rerr = NULL;
    rocksdb_iter_get_error(it, &rerr);
    if (rerr == NULL)
        return KL_OK;
    kl_fail(err, KL_INTERNAL, "store", "snapshot: read failed: %.160s", rerr);
    rocksdb_free(rerr);
    return KL_INTERNAL;
}

/* Moves `it` to the first state key at or after where it stands: past the log in one seek
 * and past the local meta records one by one. */
static void skip_local(rocksdb_iterator_t *it)
{
    while (rocksdb_iter_valid(it)) {
        size_t kl;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
        if (!kl_store_key_is_local(k, kl))
            return;
        if (k[0] == 'L')
            rocksdb_iter_seek(it, "M", 1);
        else
            rocksdb_iter_next(it);
    }
}

static kl_code snap_get_u64(kl_snap_reader *r, const kl_key *k, uint64_t *out, bool *found, kl_err *err)
{
    char *rerr = NULL;
    size_t n = 0;
    char *v = rocksdb_get(r->db, r->ro, (const char *)k->b, k->len, &n, &rerr);
    if (rerr != NULL) {
        kl_fail(err, KL_INTERNAL, "store", "snapshot: read failed: %.160s", rerr);
        rocksdb_free(rerr);
        return KL_INTERNAL;
    }
    *found = v != NULL;
    *out = 0;
    kl_code rc = KL_OK;
    if (v != NULL && n >= 8)
        *out = kl_be64_get((const uint8_t *)v);
    else if (v != NULL)
        rc = kl_fail(err, KL_INTERNAL, "store", "snapshot: meta record of %zu bytes", n);
    rocksdb_free(v);
    return rc;
}

/* The applied index and its term, as the pin sees them. */
static kl_code reader_index_term(kl_snap_reader *r, kl_err *err)
{
    kl_key k;
    bool found;
    kl_key_meta(&k, "applied");
    kl_code rc = snap_get_u64(r, &k, &r->index, &found, err);
    if (rc != KL_OK || r->index == 0)
        return rc;
    kl_key_log(&k, r->index);
    char *rerr = NULL;
    size_t n = 0;
    char *v = rocksdb_get_cf(r->db, r->ro, r->log_cf, (const char *)k.b, k.len, &n, &rerr);
    if (rerr != NULL) {
        kl_fail(err, KL_INTERNAL, "store", "snapshot: read failed: %.160s", rerr);
        rocksdb_free(rerr);
        return KL_INTERNAL;
    }
    if (v == NULL) { /* compacted: the log starts right after it and names its term */
        uint64_t first;
        kl_key_meta(&k, "log_start");
        if ((rc = snap_get_u64(r, &k, &first, &found, err)) != KL_OK)
            return rc;
        if (!found || first != r->index + 1)
            return kl_fail(err, KL_INTERNAL, "log", "snapshot: applied entry %llu is not in the log",
                           (unsigned long long)r->index);
        v = rocksdb_get(r->db, r->ro, (const char *)k.b, k.len, &n, &rerr);
        if (rerr != NULL || v == NULL || n < 16) {
            rocksdb_free(rerr);
            rocksdb_free(v);
            return kl_fail(err, KL_INTERNAL, "log_start", "snapshot: log_start unreadable");
        }
        r->term = kl_be64_get((const uint8_t *)v + 8);
        rocksdb_free(v);
        return KL_OK;
    }
    Keyload__V1__LogEntry *e = keyload__v1__log_entry__unpack(NULL, n, (const uint8_t *)v);
    rocksdb_free(v);
    if (e == NULL)
        return kl_fail(err, KL_INTERNAL, "log", "snapshot: log entry %llu does not decode",
                       (unsigned long long)r->index);
    r->term = e->term;
    keyload__v1__log_entry__free_unpacked(e, NULL);
    return KL_OK;
}

/* The key count pass reads the whole state before the first chunk can leave, so it is cut
 * into COUNT_SLICES key ranges counted on as many threads: the same work, but it ends
 * sooner when a CPU is free or the machine is shared. The split keys are the smallest keys
 * of the live SST files at about equal steps of their bytes; any keys would give the same
 * total (the ranges partition the key space), they only balance the slices. */
#define COUNT_SLICES 4

typedef struct count_slice {
    rocksdb_t *db;
    const rocksdb_snapshot_t *snap;
    const uint8_t *lo, *hi; /* [lo, hi); NULL: unbounded */
    size_t lo_len, hi_len;
    uint64_t n;
    kl_code rc;
    kl_err err;
} count_slice;

static void *count_slice_run(void *arg)
{
    count_slice *c = arg;
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_readoptions_set_snapshot(ro, c->snap);
    rocksdb_readoptions_set_fill_cache(ro, 0);
    if (c->hi != NULL)
        rocksdb_readoptions_set_iterate_upper_bound(ro, (const char *)c->hi, c->hi_len);
    rocksdb_iterator_t *it = rocksdb_create_iterator(c->db, ro);
    if (c->lo != NULL)
        rocksdb_iter_seek(it, (const char *)c->lo, c->lo_len);
    else
        rocksdb_iter_seek_to_first(it);
    uint64_t n = 0;
    for (skip_local(it); rocksdb_iter_valid(it); rocksdb_iter_next(it), skip_local(it))
        n++;
    c->rc = iter_fail(it, &c->err);
    c->n = n;
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    return NULL;
}

typedef struct split_file {
    const char *key;
    size_t len;
    uint64_t bytes;
} split_file;

static int split_file_cmp(const void *a, const void *b)
{
    const split_file *x = a, *y = b;
    return key_cmp((const uint8_t *)x->key, x->len, (const uint8_t *)y->key, y->len);
}

/* Up to COUNT_SLICES - 1 strictly increasing split keys, pointing into *lf (destroyed by
 * the caller after the count). */
static size_t count_splits(rocksdb_t *db, const rocksdb_livefiles_t **lf, const uint8_t **keys,
                           size_t *lens)
{
    *lf = rocksdb_livefiles(db);
    int nf = *lf != NULL ? rocksdb_livefiles_count(*lf) : 0;
    if (nf < 2)
        return 0;
    split_file *f = malloc((size_t)nf * sizeof *f);
    if (f == NULL)
        return 0;
    uint64_t total = 0;
    for (int i = 0; i < nf; i++) {
        f[i].key = rocksdb_livefiles_smallestkey(*lf, i, &f[i].len);
        f[i].bytes = rocksdb_livefiles_size(*lf, i);
        total += f[i].bytes;
    }
    qsort(f, (size_t)nf, sizeof *f, split_file_cmp);
    size_t k = 0;
    uint64_t acc = 0;
    for (int i = 0; i < nf && k < COUNT_SLICES - 1; i++) {
        if (acc >= total / COUNT_SLICES * (k + 1) && f[i].len > 0 &&
            (k == 0 || key_cmp((const uint8_t *)f[i].key, f[i].len, keys[k - 1], lens[k - 1]) > 0)) {
            keys[k] = (const uint8_t *)f[i].key;
            lens[k] = f[i].len;
            k++;
        }
        acc += f[i].bytes;
    }
    free(f);
    return k;
}

static kl_code reader_count(kl_snap_reader *r, kl_err *err)
{
    const rocksdb_livefiles_t *lf = NULL;
    const uint8_t *keys[COUNT_SLICES - 1];
    size_t lens[COUNT_SLICES - 1];
    size_t nsplit = count_splits(r->db, &lf, keys, lens);
    count_slice c[COUNT_SLICES];
    pthread_t th[COUNT_SLICES];
    bool started[COUNT_SLICES] = {false};
    for (size_t i = 0; i <= nsplit; i++)
        c[i] = (count_slice){.db = r->db, .snap = r->snap,
                             .lo = i > 0 ? keys[i - 1] : NULL, .lo_len = i > 0 ? lens[i - 1] : 0,
                             .hi = i < nsplit ? keys[i] : NULL, .hi_len = i < nsplit ? lens[i] : 0};
    for (size_t i = 1; i <= nsplit; i++)
        started[i] = pthread_create(&th[i], NULL, count_slice_run, &c[i]) == 0;
    count_slice_run(&c[0]);
    kl_code rc = c[0].rc;
    if (rc != KL_OK)
        *err = c[0].err;
    uint64_t n = c[0].n;
    for (size_t i = 1; i <= nsplit; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else
            count_slice_run(&c[i]); /* no thread to be had: count it here */
        if (rc == KL_OK && c[i].rc != KL_OK) {
            rc = c[i].rc;
            *err = c[i].err;
        }
        n += c[i].n;
    }
    if (lf != NULL)
        rocksdb_livefiles_destroy(lf);
    r->key_count = n;
    return rc;
}

kl_code kl_snap_reader_open(kl_store *st, const uint8_t *config, size_t config_len, kl_snap_reader **out,
                            kl_err *err)
{
    if (config_len > KL_SNAP_CONFIG_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "config",
                       "snapshot: configuration of %zu bytes exceeds KL_SNAP_CONFIG_MAX (%d)", config_len,
                       KL_SNAP_CONFIG_MAX);
    kl_snap_reader *r = calloc(1, sizeof *r);
    if (r == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "snapshot: out of memory");
    r->db = kl_store_db(st);
    r->log_cf = kl_store_log_family(st);
    r->snap = rocksdb_create_snapshot(r->db);
    r->ro = rocksdb_readoptions_create();
    rocksdb_readoptions_set_snapshot(r->ro, r->snap);
    /* One pass over everything: keep the block cache for the member's own reads. */
    rocksdb_readoptions_set_fill_cache(r->ro, 0);
    if (config_len > 0)
        memcpy(r->config, config, config_len);
    r->config_len = config_len;
    kl_code rc = reader_index_term(r, err);
    if (rc == KL_OK)
        rc = reader_count(r, err);
    if (rc != KL_OK) {
        kl_snap_reader_close(r);
        return rc;
    }
    *out = r;
    return KL_OK;
}

kl_code kl_snap_reader_set_config(kl_snap_reader *r, const uint8_t *config, size_t config_len, kl_err *err)
{
    if (config_len > KL_SNAP_CONFIG_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "config",
                       "snapshot: configuration of %zu bytes exceeds KL_SNAP_CONFIG_MAX (%d)", config_len,
                       KL_SNAP_CONFIG_MAX);
    /* invariant: the header chunk (seq 0), which carries the configuration, is not produced yet */
    assert(r->pos.seq == 0 && r->len == 0);
    if (config_len > 0)
        memcpy(r->config, config, config_len);
    r->config_len = config_len;
    return KL_OK;
}

void kl_snap_reader_meta(const kl_snap_reader *r, uint64_t *index, uint64_t *term, uint64_t *key_count)
{
    *index = r->index;
    *term = r->term;
    *key_count = r->key_count;
}

void kl_snap_reader_seek(kl_snap_reader *r, const kl_snap_pos *pos)
{
    r->pos = *pos;
    r->reseek = true;
    r->done = false;
}

/* Writes the fixed fields and the resume key; returns the offset of body_len. */
static size_t chunk_begin(kl_snap_reader *r, uint32_t flags)
{
    uint8_t f[CHUNK_FIXED];
    memcpy(f, chunk_magic, 4);
    be32_put(f + 4, KL_SNAP_VERSION);
    kl_be64_put(f + 8, r->index);
    kl_be64_put(f + 16, r->term);
    kl_be64_put(f + 24, r->pos.seq);
    be32_put(f + 32, flags);
    be32_put(f + 36, (uint32_t)r->pos.after_len);
    r->len = 0;
    buf_put(r, f, sizeof f);
    buf_put(r, r->pos.after, r->pos.after_len);
    size_t at = r->len;
    r->len += 4;
    return at;
}

/* Closes the chunk: body length, last flag, running digest; moves the position on. */
static void chunk_end(kl_snap_reader *r, size_t body_at, bool last)
{
    be32_put(r->buf + body_at, (uint32_t)(r->len - body_at - 4));
    if (last)
        be32_put(r->buf + 32, KL_SNAP_FLAG_LAST);
    uint8_t d[KL_SNAP_DIGEST_BYTES];
    chain_digest(r->pos.digest, r->buf, r->len, d);
    buf_put(r, d, sizeof d);
    memcpy(r->pos.digest, d, sizeof d);
    r->pos.seq++;
}

static kl_code reader_header(kl_snap_reader *r, kl_err *err)
{
    if (!buf_reserve(r, CHUNK_FIXED + 4 + 12 + KL_SNAP_CONFIG_MAX + KL_SNAP_DIGEST_BYTES))
        return kl_fail(err, KL_INTERNAL, "memory", "snapshot: out of memory");
    memset(r->pos.digest, 0, sizeof r->pos.digest);
    r->pos.after_len = 0;
    r->pos.keys = 0;
    size_t at = chunk_begin(r, 0);
    uint8_t b[12];
    kl_be64_put(b, r->key_count);
    be32_put(b + 8, (uint32_t)r->config_len);
    buf_put(r, b, sizeof b);
    buf_put(r, r->config, r->config_len);
    chunk_end(r, at, false);
    return KL_OK;
}

static void reader_position(kl_snap_reader *r)
{
    if (r->it == NULL)
        r->it = rocksdb_create_iterator(r->db, r->ro);
    if (r->pos.after_len == 0) {
        rocksdb_iter_seek_to_first(r->it);
    } else {
        /* Resume strictly after the last key the receiver has. */
        rocksdb_iter_seek(r->it, (const char *)r->pos.after, r->pos.after_len);
        size_t kl;
        if (rocksdb_iter_valid(r->it)) {
            const uint8_t *k = (const uint8_t *)rocksdb_iter_key(r->it, &kl);
            if (key_cmp(k, kl, r->pos.after, r->pos.after_len) == 0)
                rocksdb_iter_next(r->it);
        }
    }
    r->reseek = false;
}

/* Appends the record under the iterator (INTERNAL "snapshot_value" when it is too big). */
static kl_code reader_record(kl_snap_reader *r, kl_err *err)
{
    size_t kl, vl;
    const char *k = rocksdb_iter_key(r->it, &kl);
    const char *v = rocksdb_iter_value(r->it, &vl);
    if (vl > KL_SNAP_VALUE_MAX || kl > KL_KEY_MAX)
        return kl_fail(err, KL_INTERNAL, "snapshot_value",
                       "snapshot: a record of %zu key and %zu value bytes exceeds KL_KEY_MAX or "
                       "KL_SNAP_VALUE_MAX (%u)", kl, vl, (unsigned)KL_SNAP_VALUE_MAX);
    if (!buf_reserve(r, 8 + kl + vl + KL_SNAP_DIGEST_BYTES))
        return kl_fail(err, KL_INTERNAL, "memory", "snapshot: out of memory");
    uint8_t n[4];
    be32_put(n, (uint32_t)kl);
    buf_put(r, n, 4);
    buf_put(r, k, kl);
    be32_put(n, (uint32_t)vl);
    buf_put(r, n, 4);
    buf_put(r, v, vl);
    memcpy(r->pos.after, k, kl);
    r->pos.after_len = kl;
    r->pos.keys++;
    return KL_OK;
}

kl_code kl_snap_reader_next(kl_snap_reader *r, const uint8_t **chunk, size_t *len, bool *last, kl_err *err)
{
    *chunk = NULL;
    *len = 0;
    *last = r->done;
    if (r->done)
        return KL_OK;
    if (r->pos.seq == 0) {
        kl_code rc = reader_header(r, err);
        *chunk = r->buf;
        *len = r->len;
        r->reseek = true;
        return rc;
    }
    if (r->reseek || r->it == NULL)
        reader_position(r);
    if (!buf_reserve(r, CHUNK_FIXED + KL_KEY_MAX + 4 + KL_SNAP_DIGEST_BYTES))
        return kl_fail(err, KL_INTERNAL, "memory", "snapshot: out of memory");
    size_t at = chunk_begin(r, 0);
    kl_code rc = KL_OK;
    for (skip_local(r->it); rocksdb_iter_valid(r->it); skip_local(r->it)) {
        if ((rc = reader_record(r, err)) != KL_OK)
            return rc;
        rocksdb_iter_next(r->it);
        if (r->len - at >= KL_SNAP_CHUNK_BYTES)
            break;
    }
    if ((rc = iter_fail(r->it, err)) != KL_OK)
        return rc;
    skip_local(r->it);
    r->done = !rocksdb_iter_valid(r->it);
    chunk_end(r, at, r->done);
    *chunk = r->buf;
    *len = r->len;
    *last = r->done;
    return KL_OK;
}

void kl_snap_reader_close(kl_snap_reader *r)
{
    if (r == NULL)
        return;
    if (r->it != NULL)
        rocksdb_iter_destroy(r->it);
    rocksdb_readoptions_destroy(r->ro);
    rocksdb_release_snapshot(r->db, r->snap);
    free(r->buf);
    free(r);
}

/* ================================================================ install */

/* "<store dir>/install/STATE": the resume point of the staged snapshot, replaced atomically
 * (write, fsync, rename, fsync of the directory) each time a staged file is finished.
 *   "KLSS" version(4) index(8) term(8) key_count(8) files(4) complete(4) seq(8) keys(8)
 *   digest(32) after_len(4) after config_len(4) config */
static const uint8_t state_magic[4] = {'K', 'L', 'S', 'S'};
#define STATE_FIXED 88

struct kl_snap_install {
    kl_store *st;
    char dir[KL_PATH_MAX + 16];
    bool staged, complete;
    uint64_t index, term, key_count;
    uint8_t config[KL_SNAP_CONFIG_MAX];
    size_t config_len;
    kl_snap_pos pos;   /* through the last chunk staged (possibly in the open file) */
    uint32_t files;    /* finished staged files */
    rocksdb_options_t *opts;
    rocksdb_envoptions_t *env;
    rocksdb_sstfilewriter_t *w; /* the file being written (number `files`), or NULL */
    uint64_t wbytes;
    int wclass;                 /* key_class of every record in the open file */
    uint64_t file_bytes;        /* KL_SNAP_STAGE_FILE_BYTES (tests lower it) */
};

/* Which side of the store's local key range ('L', 'M': kl_store_key_is_local) a key is on:
 * 0 below, 1 inside, 2 above. A staged file holds one class only, so a file of class 0 or 2
 * overlaps nothing the store keeps across an install and is ingested by link; class 1
 * holds the replicated 'M' records between the local ones and is copied (store.h
 * "kl_store_install"). */
static int key_class(const uint8_t *k, size_t kl)
{
    if (kl == 0 || k[0] < 'L')
        return 0;
    return k[0] <= 'M' ? 1 : 2;
}

static void stage_file(const kl_snap_install *in, uint32_t i, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%06u.sst", in->dir, i);
}

/* The mark of a staged file that must be ingested by copy (KL_STORE_INSTALL_COPY_SUFFIX). */
static void stage_copy_mark(const kl_snap_install *in, uint32_t i, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%06u%s", in->dir, i, KL_STORE_INSTALL_COPY_SUFFIX);
}

static kl_code sys_fail(kl_err *err, const char *what, const char *path)
{
    return kl_fail(err, KL_INTERNAL, "snapshot_stage", "snapshot: %s %s: %s", what, path, strerror(errno));
}

static kl_code fsync_path(const char *path, kl_err *err)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return sys_fail(err, "open", path);
    int rc = fsync(fd);
    close(fd);
    return rc == 0 ? KL_OK : sys_fail(err, "fsync", path);
}

static kl_code state_save(kl_snap_install *in, kl_err *err)
{
    uint8_t b[STATE_FIXED + KL_KEY_MAX + 4 + KL_SNAP_CONFIG_MAX];
    memcpy(b, state_magic, 4);
    be32_put(b + 4, KL_SNAP_VERSION);
    kl_be64_put(b + 8, in->index);
    kl_be64_put(b + 16, in->term);
    kl_be64_put(b + 24, in->key_count);
    be32_put(b + 32, in->files);
    be32_put(b + 36, in->complete);
    kl_be64_put(b + 40, in->pos.seq);
    kl_be64_put(b + 48, in->pos.keys);
    memcpy(b + 56, in->pos.digest, KL_SNAP_DIGEST_BYTES);
    be32_put(b + 84, (uint32_t)in->pos.after_len); /* 56 + 32 = 88 - 4 */
    size_t n = STATE_FIXED;
    memcpy(b + n, in->pos.after, in->pos.after_len);
    n += in->pos.after_len;
    be32_put(b + n, (uint32_t)in->config_len);
    memcpy(b + n + 4, in->config, in->config_len);
    n += 4 + in->config_len;
    char tmp[KL_PATH_MAX + 32], path[KL_PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s/STATE.tmp", in->dir);
    snprintf(path, sizeof path, "%s/STATE", in->dir);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return sys_fail(err, "create", tmp);
    bool ok = write(fd, b, n) == (ssize_t)n && fsync(fd) == 0;
    close(fd);
    if (!ok || rename(tmp, path) != 0)
        return sys_fail(err, "write", path);
    return fsync_path(in->dir, err);
}

/* Loads STATE; false when there is none or it does not parse (then nothing is staged). */
static bool state_load(kl_snap_install *in)
{
    char path[KL_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/STATE", in->dir);
    uint8_t b[STATE_FIXED + KL_KEY_MAX + 4 + KL_SNAP_CONFIG_MAX + 1];
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, b, sizeof b);
    close(fd);
    if (n < STATE_FIXED + 4 || memcmp(b, state_magic, 4) != 0 || be32_get(b + 4) != KL_SNAP_VERSION)
        return false;
    size_t after = be32_get(b + 84);
    if (after > KL_KEY_MAX || (size_t)n < STATE_FIXED + after + 4)
        return false;
    size_t cfg = be32_get(b + STATE_FIXED + after);
    if (cfg > KL_SNAP_CONFIG_MAX || (size_t)n != STATE_FIXED + after + 4 + cfg)
        return false;
    in->index = kl_be64_get(b + 8);
    in->term = kl_be64_get(b + 16);
    in->key_count = kl_be64_get(b + 24);
    in->files = be32_get(b + 32);
    in->complete = be32_get(b + 36) != 0;
    in->pos.seq = kl_be64_get(b + 40);
    in->pos.keys = kl_be64_get(b + 48);
    memcpy(in->pos.digest, b + 56, KL_SNAP_DIGEST_BYTES);
    in->pos.after_len = after;
    memcpy(in->pos.after, b + STATE_FIXED, after);
    in->config_len = cfg;
    memcpy(in->config, b + STATE_FIXED + after + 4, cfg);
    in->staged = true;
    return true;
}

/* Drops the open staged file: it is not part of any saved resume point. */
static void writer_drop(kl_snap_install *in)
{
    if (in->w == NULL)
        return;
    rocksdb_sstfilewriter_destroy(in->w);
    in->w = NULL;
    in->wbytes = 0;
    char path[KL_PATH_MAX + 32];
    stage_file(in, in->files, path, sizeof path);
    unlink(path);
    stage_copy_mark(in, in->files, path, sizeof path);
    unlink(path);
}

/* Removes staged files from number `from` on (they are numbered without gaps). */
static void stage_unlink_from(kl_snap_install *in, uint32_t from)
{
    char path[KL_PATH_MAX + 32];
    for (uint32_t i = from;; i++) {
        stage_copy_mark(in, i, path, sizeof path);
        unlink(path);
        stage_file(in, i, path, sizeof path);
        if (unlink(path) != 0)
            break;
    }
}

void kl_snap_install_discard(kl_snap_install *in)
{
    writer_drop(in);
    stage_unlink_from(in, 0);
    char path[KL_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/STATE", in->dir);
    unlink(path);
    in->staged = in->complete = false;
    in->files = 0;
    memset(&in->pos, 0, sizeof in->pos);
}

kl_code kl_snap_install_open(kl_store *st, kl_snap_install **out, kl_err *err)
{
    kl_snap_install *in = calloc(1, sizeof *in);
    if (in == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "snapshot: out of memory");
    in->st = st;
    snprintf(in->dir, sizeof in->dir, "%s/install", kl_store_dir(st));
    if (mkdir(in->dir, 0700) != 0 && errno != EEXIST) {
        kl_code rc = sys_fail(err, "mkdir", in->dir);
        free(in);
        return rc;
    }
    in->opts = rocksdb_options_create();
    in->env = rocksdb_envoptions_create();
    in->file_bytes = KL_SNAP_STAGE_FILE_BYTES;
    if (!state_load(in) || in->index <= kl_store_applied_index(st))
        kl_snap_install_discard(in); /* nothing, unreadable, or already installed/overtaken */
    else
        stage_unlink_from(in, in->files); /* a file begun after the resume point */
    *out = in;
    return KL_OK;
}

void kl_snap_install_debug_file_bytes(kl_snap_install *in, uint64_t bytes) { in->file_bytes = bytes; }

void kl_snap_install_close(kl_snap_install *in)
{
    if (in == NULL)
        return;
    writer_drop(in);
    rocksdb_envoptions_destroy(in->env);
    rocksdb_options_destroy(in->opts);
    free(in);
}

void kl_snap_install_pos(const kl_snap_install *in, bool *staged, uint64_t *index, uint64_t *term,
                         kl_snap_pos *pos)
{
    *staged = in->staged;
    *index = in->index;
    *term = in->term;
    *pos = in->pos;
}

typedef struct chunk_view {
    uint64_t index, term, seq;
    uint32_t flags;
    const uint8_t *after, *body, *digest;
    size_t after_len, body_len, signed_len;
} chunk_view;

static kl_code chunk_parse(const uint8_t *c, size_t len, chunk_view *v, kl_err *err)
{
    if (len < CHUNK_FIXED + 4 + KL_SNAP_DIGEST_BYTES || len > KL_SNAP_CHUNK_MAX ||
        memcmp(c, chunk_magic, 4) != 0 || be32_get(c + 4) != KL_SNAP_VERSION)
        return kl_fail(err, KL_FAILED_PRECONDITION, "snapshot_corrupt",
                       "snapshot: chunk of %zu bytes is not a version %d snapshot chunk", len,
                       KL_SNAP_VERSION);
    v->index = kl_be64_get(c + 8);
    v->term = kl_be64_get(c + 16);
    v->seq = kl_be64_get(c + 24);
    v->flags = be32_get(c + 32);
    v->after_len = be32_get(c + 36);
    if (v->after_len > KL_KEY_MAX || len < CHUNK_FIXED + v->after_len + 4 + KL_SNAP_DIGEST_BYTES)
        return kl_fail(err, KL_FAILED_PRECONDITION, "snapshot_corrupt",
                       "snapshot: chunk %llu: resume key of %zu bytes", (unsigned long long)v->seq,
                       v->after_len);
    v->after = c + CHUNK_FIXED;
    v->body_len = be32_get(c + CHUNK_FIXED + v->after_len);
    v->body = c + CHUNK_FIXED + v->after_len + 4;
    v->signed_len = CHUNK_FIXED + v->after_len + 4 + v->body_len;
    if (v->signed_len + KL_SNAP_DIGEST_BYTES != len)
        return kl_fail(err, KL_FAILED_PRECONDITION, "snapshot_corrupt",
                       "snapshot: chunk %llu: body length %zu does not match the chunk's %zu bytes",
                       (unsigned long long)v->seq, v->body_len, len);
    v->digest = c + v->signed_len;
    return KL_OK;
}

static kl_code digest_check(const kl_snap_install *in, const uint8_t *c, const chunk_view *v,
                            const uint8_t prev[KL_SNAP_DIGEST_BYTES], kl_err *err)
{
    (void)in;
    uint8_t d[KL_SNAP_DIGEST_BYTES];
    chain_digest(prev, c, v->signed_len, d);
    if (sodium_memcmp(d, v->digest, sizeof d) != 0)
        return kl_fail(err, KL_UNAVAILABLE, "snapshot_digest",
                       "snapshot %llu: chunk %llu does not match its running digest; resend it",
                       (unsigned long long)v->index, (unsigned long long)v->seq);
    return KL_OK;
}

/* Discards the staging after a stream that is wrong though its digests hold. */
static kl_code stage_refuse(kl_snap_install *in, kl_err *err, const char *what, unsigned long long a,
                            unsigned long long b)
{
    unsigned long long index = in->index;
    kl_snap_install_discard(in);
    return kl_fail(err, KL_FAILED_PRECONDITION, "snapshot_corrupt",
                   "snapshot %llu refused: %s (%llu, %llu); nothing was installed", index, what, a, b);
}

/* Chunk 0: a new staging for (index, term, key_count, config). */
static kl_code stage_header(kl_snap_install *in, const uint8_t *c, const chunk_view *v, kl_err *err)
{
    static const uint8_t zero[KL_SNAP_DIGEST_BYTES];
    kl_code rc = digest_check(in, c, v, zero, err);
    if (rc != KL_OK)
        return rc;
    if (v->body_len < 12 || v->after_len != 0 || (v->flags & KL_SNAP_FLAG_LAST) ||
        be32_get(v->body + 8) > KL_SNAP_CONFIG_MAX || v->body_len != 12 + be32_get(v->body + 8))
        return kl_fail(err, KL_FAILED_PRECONDITION, "snapshot_corrupt",
                       "snapshot %llu: malformed header chunk", (unsigned long long)v->index);
    if (v->index <= kl_store_applied_index(in->st))
        return kl_fail(err, KL_FAILED_PRECONDITION, "snapshot_stale",
                       "snapshot at %llu is not past the applied index %llu",
                       (unsigned long long)v->index, (unsigned long long)kl_store_applied_index(in->st));
    kl_snap_install_discard(in);
    in->index = v->index;
    in->term = v->term;
    in->key_count = kl_be64_get(v->body);
    in->config_len = be32_get(v->body + 8);
    memcpy(in->config, v->body + 12, in->config_len);
    in->pos.seq = 1;
    memcpy(in->pos.digest, v->digest, KL_SNAP_DIGEST_BYTES);
    in->staged = true;
    return state_save(in, err);
}

/* Checks every record of a data chunk before any is staged; returns the count. */
static kl_code records_check(kl_snap_install *in, const chunk_view *v, uint64_t *count, kl_err *err)
{
    const uint8_t *prev = in->pos.after, *p = v->body, *end = v->body + v->body_len;
    size_t prev_len = in->pos.after_len;
    uint64_t n = 0;
    while (p < end) {
        if (end - p < 4 || be32_get(p) == 0 || be32_get(p) > KL_KEY_MAX || (size_t)(end - p - 4) < be32_get(p) + 4)
            return stage_refuse(in, err, "record key out of bounds at chunk, offset", v->seq,
                                (unsigned long long)(p - v->body));
        size_t kl = be32_get(p);
        const uint8_t *k = p + 4;
        size_t vl = be32_get(k + kl);
        if (vl > KL_SNAP_VALUE_MAX || (size_t)(end - (k + kl + 4)) < vl)
            return stage_refuse(in, err, "record value out of bounds at chunk, offset", v->seq,
                                (unsigned long long)(p - v->body));
        if (key_cmp(k, kl, prev, prev_len) <= 0 || kl_store_key_is_local(k, kl))
            return stage_refuse(in, err, "record key out of order or local at chunk, record", v->seq, n);
        prev = k;
        prev_len = kl;
        p = k + kl + 4 + vl;
        n++;
    }
    if (in->pos.keys + n > in->key_count)
        return stage_refuse(in, err, "more records than the header's key count", in->pos.keys + n,
                            in->key_count);
    *count = n;
    return KL_OK;
}

/* Finishes the open staged file (SstFileWriter syncs it). What a restart keeps is decided
 * by the next state_save: a file finished in the middle of a chunk is dropped by a resume
 * from the point saved before it. */
static kl_code stage_writer_finish(kl_snap_install *in, kl_err *err)
{
    if (in->w != NULL) {
        char *rerr = NULL;
        rocksdb_sstfilewriter_finish(in->w, &rerr);
        rocksdb_sstfilewriter_destroy(in->w);
        in->w = NULL;
        in->wbytes = 0;
        if (rerr != NULL) {
            kl_fail(err, KL_INTERNAL, "snapshot_stage", "snapshot: staged file: %.160s", rerr);
            rocksdb_free(rerr);
            return KL_INTERNAL;
        }
        char path[KL_PATH_MAX + 32];
        stage_file(in, in->files, path, sizeof path);
        kl_code rc = fsync_path(path, err);
        if (rc != KL_OK)
            return rc;
        in->files++;
    }
    return KL_OK;
}

/* Finishes the open staged file and saves the resume point. */
static kl_code stage_file_finish(kl_snap_install *in, kl_err *err)
{
    kl_code rc = stage_writer_finish(in, err);
    return rc != KL_OK ? rc : state_save(in, err);
}

static kl_code stage_put(kl_snap_install *in, const uint8_t *k, size_t kl, const uint8_t *val, size_t vl,
                         kl_err *err)
{
    char *rerr = NULL;
    int cls = key_class(k, kl);
    if (in->w != NULL && in->wclass != cls) {
        kl_code rc = stage_writer_finish(in, err);
        if (rc != KL_OK) { /* back to the saved resume point, as below */
            if (!state_load(in))
                kl_snap_install_discard(in);
            return rc;
        }
    }
    if (in->w == NULL) {
        char path[KL_PATH_MAX + 32];
        if (cls == 1) { /* marked before any record is in it: never linked by mistake */
            stage_copy_mark(in, in->files, path, sizeof path);
            int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (fd < 0)
                return sys_fail(err, "create", path);
            close(fd);
        }
        stage_file(in, in->files, path, sizeof path);
        in->w = rocksdb_sstfilewriter_create(in->env, in->opts);
        in->wclass = cls;
        rocksdb_sstfilewriter_open(in->w, path, &rerr);
    }
    if (rerr == NULL)
        rocksdb_sstfilewriter_put(in->w, (const char *)k, kl, (const char *)val, vl, &rerr);
    if (rerr != NULL) {
        kl_fail(err, KL_INTERNAL, "snapshot_stage", "snapshot: staging a record: %.160s", rerr);
        rocksdb_free(rerr);
        /* The open file is lost: go back to the saved resume point. */
        writer_drop(in);
        if (!state_load(in))
            kl_snap_install_discard(in);
        return KL_INTERNAL;
    }
    in->wbytes += kl + vl;
    return KL_OK;
}

/* A data chunk whose digest and records were checked: stage it and move the position. */
static kl_code stage_records(kl_snap_install *in, const chunk_view *v, uint64_t n, kl_err *err)
{
    const uint8_t *p = v->body;
    for (uint64_t i = 0; i < n; i++) {
        size_t kl = be32_get(p);
        size_t vl = be32_get(p + 4 + kl);
        kl_code rc = stage_put(in, p + 4, kl, p + 8 + kl, vl, err);
        if (rc != KL_OK)
            return rc;
        if (i + 1 == n) {
            memcpy(in->pos.after, p + 4, kl);
            in->pos.after_len = kl;
        }
        p += 8 + kl + vl;
    }
    in->pos.keys += n;
    in->pos.seq++;
    memcpy(in->pos.digest, v->digest, KL_SNAP_DIGEST_BYTES);
    return KL_OK;
}

kl_code kl_snap_install_chunk(kl_snap_install *in, const uint8_t *chunk, size_t len, bool *done, kl_err *err)
{
    *done = false;
    chunk_view v;
    kl_code rc = chunk_parse(chunk, len, &v, err);
    if (rc != KL_OK)
        return rc;
    if (v.seq == 0)
        return stage_header(in, chunk, &v, err);
    if (!in->staged || in->complete || v.index != in->index || v.term != in->term)
        return kl_fail(err, KL_FAILED_PRECONDITION, "snapshot_mismatch",
                       "snapshot chunk of (%llu, %llu) but (%llu, %llu) is staged%s; start from chunk 0",
                       (unsigned long long)v.index, (unsigned long long)v.term,
                       (unsigned long long)in->index, (unsigned long long)in->term,
                       in->complete ? " complete" : "");
    if (v.seq != in->pos.seq ||
        key_cmp(v.after, v.after_len, in->pos.after, in->pos.after_len) != 0)
        return kl_fail(err, KL_FAILED_PRECONDITION, "snapshot_resume",
                       "snapshot %llu: chunk %llu received, chunk %llu expected; resend from there",
                       (unsigned long long)v.index, (unsigned long long)v.seq,
                       (unsigned long long)in->pos.seq);
    if ((rc = digest_check(in, chunk, &v, in->pos.digest, err)) != KL_OK)
        return rc;
    uint64_t n = 0;
    if ((rc = records_check(in, &v, &n, err)) != KL_OK)
        return rc;
    if ((rc = stage_records(in, &v, n, err)) != KL_OK)
        return rc;
    bool last = (v.flags & KL_SNAP_FLAG_LAST) != 0;
    if (last && in->pos.keys != in->key_count)
        return stage_refuse(in, err, "stream ended with records, header said", in->pos.keys, in->key_count);
    in->complete = last;
    if (last || in->wbytes >= in->file_bytes)
        rc = stage_file_finish(in, err);
    *done = last && rc == KL_OK;
    return rc;
}

kl_code kl_snap_install_commit(kl_snap_install *in, kl_err *err)
{
    if (!in->complete)
        return kl_fail(err, KL_FAILED_PRECONDITION, "snapshot_incomplete",
                       "snapshot %llu: %llu of %llu records staged; the install needs them all",
                       (unsigned long long)in->index, (unsigned long long)in->pos.keys,
                       (unsigned long long)in->key_count);
    kl_code rc = kl_store_install(in->st, in->files, in->index, in->term, in->config, in->config_len, err);
    if (rc == KL_OK) { /* the store removed the staged files */
        in->staged = in->complete = false;
        in->files = 0;
        memset(&in->pos, 0, sizeof in->pos);
    }
    return rc;
}
