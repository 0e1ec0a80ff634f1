/* snap-bench: time and peak memory of producing and installing a snapshot of a generated
 * state, each phase in its own process so that its VmHWM is its own.
 *
 *   build/snap-bench --dir DIR [--mb N] [--value BYTES] [--max-rss-mb M]
 *
 * DIR must not exist. Phases: populate (N MiB of state records of BYTES-byte values in a
 * store, one applied entry, log compacted), produce (every chunk of the snapshot written
 * to a spool file), install (the spool fed to a fresh store's kl_snap_install, then
 * committed, then every record counted). Prints one line per phase; exits 1 when the
 * produce or install peak RSS exceeds --max-rss-mb (default 160), or the installed state
 * differs in record count or digest. Nothing of it runs in `make test`: it writes N MiB
 * several times over. */
#include "common/limits.h"
#include "daemon/store/keys.h"
#include "daemon/store/snapshot.h"
#include "daemon/store/store.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_dir[512];
static uint64_t g_mb = 200, g_value = 1000, g_max_rss_mb = 160;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A line of /proc/self/status in KiB ("VmHWM", "VmRSS"). */
static long status_kib(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, field, n) == 0 && line[n] == ':')
            v = strtol(line + n + 1, NULL, 10);
    if (f != NULL)
        fclose(f);
    return v;
}

static void die(const char *what, const kl_err *err)
{
    fprintf(stderr, "snap-bench: %s: %s\n", what, err ? err->message : strerror(errno));
    exit(2);
}

static kl_store *open_at(const char *name)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    kl_store *st;
    kl_err err;
    if (kl_store_open(path, NULL, &st, &err) != KL_OK)
        die("open", &err);
    return st;
}

/* State digest over every non-local record, and their count. */
static void state_digest(kl_store *st, uint8_t out[32], uint64_t *count)
{
    crypto_generichash_state h;
    crypto_generichash_init(&h, NULL, 0, 32);
    rocksdb_iterator_t *it = kl_store_iterator(st);
    *count = 0;
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const char *k = rocksdb_iter_key(it, &kl);
        const char *v = rocksdb_iter_value(it, &vl);
        if (kl_store_key_is_local((const uint8_t *)k, kl))
            continue;
        crypto_generichash_update(&h, (const uint8_t *)k, kl);
        crypto_generichash_update(&h, (const uint8_t *)v, vl);
        (*count)++;
    }
    rocksdb_iter_destroy(it);
    crypto_generichash_final(&h, out, 32);
}

static void populate(void)
{
    kl_store *st = open_at("src");
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    rocksdb_writeoptions_disable_WAL(wo, 1);
    uint8_t *val = malloc(g_value);
    uint64_t n = (g_mb << 20) / (g_value + 24);
    for (uint64_t i = 0; i < n;) {
        rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
        for (int j = 0; j < 1000 && i < n; j++, i++) {
            kl_key k;
            kl_key_message(&k, 1 + i / 100000, "lane", i);
            randombytes_buf(val, g_value); /* incompressible, as message bodies may be */
            rocksdb_writebatch_put(wb, (const char *)k.b, k.len, (const char *)val, g_value);
        }
        char *rerr = NULL;
        rocksdb_write(kl_store_db(st), wo, wb, &rerr);
        rocksdb_writebatch_destroy(wb);
        if (rerr != NULL)
            die(rerr, NULL);
    }
    Keyload__V1__LogEntry e = KEYLOAD__V1__LOG_ENTRY__INIT;
    e.index = 1;
    e.term = 3;
    uint8_t buf[64];
    size_t len = keyload__v1__log_entry__pack(&e, buf);
    kl_err err;
    uint64_t durable;
    if (kl_store_append(st, 1, buf, len, &err) != KL_OK || kl_store_apply(st, &e, &err) != KL_OK ||
        kl_store_make_durable(st, &durable, &err) != KL_OK ||
        kl_store_compact_log(st, 2, (const uint8_t *)"bench", 5, &err) != KL_OK)
        die("populate", &err);
    free(val);
    rocksdb_writeoptions_destroy(wo);
    kl_store_close(st);
    printf("populate: %llu records of %llu bytes (%llu MiB)\n", (unsigned long long)n,
           (unsigned long long)g_value, (unsigned long long)g_mb);
}

static int produce(void)
{
    kl_store *st = open_at("src");
    long base = status_kib("VmRSS");
    double t0 = now_s();
    kl_snap_reader *r;
    kl_err err;
    if (kl_snap_reader_open(st, (const uint8_t *)"bench", 5, &r, &err) != KL_OK)
        die("reader", &err);
    double t1 = now_s();
    char path[600];
    snprintf(path, sizeof path, "%s/spool", g_dir);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        die(path, NULL);
    uint64_t chunks = 0, bytes = 0;
    for (bool last = false; !last;) {
        const uint8_t *p;
        size_t n;
        if (kl_snap_reader_next(r, &p, &n, &last, &err) != KL_OK)
            die("next", &err);
        uint32_t n32 = (uint32_t)n;
        if (fwrite(&n32, 4, 1, f) != 1 || fwrite(p, 1, n, f) != n)
            die("spool write", NULL);
        chunks++;
        bytes += n;
    }
    fclose(f);
    uint64_t index, term, keys;
    kl_snap_reader_meta(r, &index, &term, &keys);
    kl_snap_reader_close(r);
    double t2 = now_s();
    uint8_t d[32];
    uint64_t count;
    state_digest(st, d, &count);
    snprintf(path, sizeof path, "%s/digest", g_dir);
    f = fopen(path, "w");
    if (f == NULL || fwrite(d, 1, 32, f) != 32 || fwrite(&count, 8, 1, f) != 1)
        die(path, NULL);
    fclose(f);
    kl_store_close(st);
    long hwm = status_kib("VmHWM");
    printf("produce: index %llu term %llu, %llu records, %llu chunks, %.1f MiB streamed; count pass "
           "%.2f s, stream %.2f s; VmRSS at start %ld MiB, VmHWM %ld MiB\n",
           (unsigned long long)index, (unsigned long long)term, (unsigned long long)keys,
           (unsigned long long)chunks, bytes / 1048576.0, t1 - t0, t2 - t1, base / 1024, hwm / 1024);
    return hwm / 1024 > (long)g_max_rss_mb;
}

static int install(void)
{
    kl_store *st = open_at("dst");
    long base = status_kib("VmRSS");
    double t0 = now_s();
    kl_snap_install *in;
    kl_err err;
    if (kl_snap_install_open(st, &in, &err) != KL_OK)
        die("install open", &err);
    char path[600];
    snprintf(path, sizeof path, "%s/spool", g_dir);
    FILE *f = fopen(path, "r");
    uint8_t *buf = malloc(KL_SNAP_CHUNK_MAX);
    bool done = false;
    uint32_t n;
    while (f != NULL && !done && fread(&n, 4, 1, f) == 1) {
        if (n > KL_SNAP_CHUNK_MAX || fread(buf, 1, n, f) != n)
            die("spool read", NULL);
        if (kl_snap_install_chunk(in, buf, n, &done, &err) != KL_OK)
            die("install chunk", &err);
    }
    if (f != NULL)
        fclose(f);
    free(buf);
    double t1 = now_s();
    if (!done || kl_snap_install_commit(in, &err) != KL_OK)
        die("install commit", &err);
    kl_snap_install_close(in);
    double t2 = now_s();
    long hwm = status_kib("VmHWM");
    uint8_t want[32], got[32];
    uint64_t want_count = 0, count;
    snprintf(path, sizeof path, "%s/digest", g_dir);
    f = fopen(path, "r");
    if (f == NULL || fread(want, 1, 32, f) != 32 || fread(&want_count, 8, 1, f) != 1)
        die(path, NULL);
    fclose(f);
    state_digest(st, got, &count);
    bool same = count == want_count && memcmp(got, want, 32) == 0;
    printf("install: stage+verify %.2f s, commit (ingest) %.2f s; applied %llu; %llu records %s; "
           "VmRSS at start %ld MiB, VmHWM %ld MiB\n",
           t1 - t0, t2 - t1, (unsigned long long)kl_store_applied_index(st), (unsigned long long)count,
           same ? "identical to the source" : "DIFFERENT from the source", base / 1024, hwm / 1024);
    kl_store_close(st);
    return !same || hwm / 1024 > (long)g_max_rss_mb;
}

/* Each phase in a child: RocksDB's background threads do not survive a fork, and a
 * process's VmHWM is then the phase's own. */
static int run_child(int (*fn)(void))
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int rc = fn();
        fflush(stdout);
        _exit(rc);
    }
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return 2;
    return WEXITSTATUS(status);
}

static int populate_fn(void)
{
    populate();
    return 0;
}

int main(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--dir") == 0)
            snprintf(g_dir, sizeof g_dir, "%s", argv[i + 1]);
        else if (strcmp(argv[i], "--mb") == 0)
            g_mb = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--value") == 0)
            g_value = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--max-rss-mb") == 0)
            g_max_rss_mb = strtoull(argv[i + 1], NULL, 10);
    }
    if (g_dir[0] == 0 || g_value < 64 || g_value > KL_SNAP_VALUE_MAX || mkdir(g_dir, 0700) != 0) {
        fprintf(stderr, "usage: snap-bench --dir NEWDIR [--mb N] [--value BYTES>=64] [--max-rss-mb M]\n");
        return 2;
    }
    if (sodium_init() < 0)
        return 2;
    int rc = run_child(populate_fn);
    if (rc == 0)
        rc = run_child(produce);
    if (rc == 0)
        rc = run_child(install);
    if (rc != 0)
        fprintf(stderr, "snap-bench: failed (%d)\n", rc);
    return rc;
}
