#include "daemon/store/store.h"

#include "common/failpoint.h"
#include "daemon/store/keys.h"
#include "daemon/store/journal.h"
#include "daemon/store/last_write.h"

#include <assert.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

struct kl_store {
    rocksdb_t *db;
    rocksdb_options_t *opts;
    /* RocksDB's default environment, with its compaction pool's threads at the lowest CPU
     * priority (kl_store_open says why); the opts point at it. */
    rocksdb_env_t *env;
    rocksdb_cache_t *cache;
    rocksdb_block_based_table_options_t *table;
    /* The log lives in its own column family (KL_STORE_LOG_FAMILY): its entries are written
     * once, read back by index and deleted from the front, while state keys are random and
     * long-lived. Sharing one memtable made every state flush and compaction carry the log
     * too. Both families share the WAL, so a log write still holds hard state and entries
     * in one synced batch. */
    rocksdb_options_t *log_opts;
    rocksdb_block_based_table_options_t *log_table;
    rocksdb_column_family_handle_t *state_cf; /* "default" */
    rocksdb_column_family_handle_t *log_cf;
    rocksdb_readoptions_t *ropts;
    rocksdb_writeoptions_t *wsync;
    rocksdb_writeoptions_t *wnosync;
    /* The log's synced writes (hard state, truncations, entries) go to the journal, then
     * to RocksDB without its WAL (journal.h says why). jmu orders them with the rare synced
     * writes of the same keys that go through RocksDB's WAL (kl_store_write_local, the
     * install): those first flush and cut the journal under it, so that a replay at open,
     * which runs after RocksDB's own, never puts an older journal record over them. */
    kl_journal *journal;
    pthread_mutex_t jmu;
    uint8_t incarnation[16];
    uint64_t applied;
    /* Moved by every change of state keys that is not an apply (an install, a local
     * write), before and after it: what caches of applied values compare besides the
     * applied index (kl_store_state_gen). Loop thread only, like applies. */
    uint64_t state_gen;
    _Atomic uint64_t last;
    _Atomic uint64_t first;  /* first log index ('M'"log_start"; 1 without it) */
    uint64_t durable;        /* applied index known to be in SST files */
    char *dir;
    /* Set by the first failed write. Nothing is written after it: RocksDB's WAL writer may
     * be left in an error state (and this build asserts on a write after one), and after a
     * failed fsync nothing of what the process holds is trusted; the member exits. */
    _Atomic bool write_failed;
    /* The first failure's error, readable once first_failure_set is true (release/acquire):
     * a write refused after it (an apply racing the persist worker's failed log write) then
     * reports the cause instead of only "an earlier write failed". */
    _Atomic bool failure_claimed;
    _Atomic bool first_failure_set;
    kl_err first_failure;
    /* 'M'"catalog_version" and 'M'"catalog_changes" as applied: every applied entry and
     * most requests read them, and they change only when a catalog change applies. Loop
     * thread only (their one writer, kl_store_apply, and every reader run there). Dropped
     * by an apply that writes either key and by an install; refilled by the next read. */
    bool catalog_cached;
    uint64_t catalog_version;
    uint64_t catalog_changes;
    /* The last log write's sync time. Log writes never overlap (one replication round's
     * write at a time), and the caller reads it after its write returned. */
    uint64_t log_sync_ns;
    /* kl_store_apply's batch and op lists, kept from one apply to the next (loop thread
     * only, like every apply), so that an apply allocates nothing sized to its entry.
     * Released once an apply leaves them past KL_STORE_APPLY_KEEP_BYTES. */
    rocksdb_writebatch_t *apply_wb;
    const Keyload__V1__KvOp **apply_ops;
    kl_last_write_key *apply_w;
    size_t apply_cap; /* entries of apply_ops and apply_w */
};

/* What kl_store_apply keeps between applies at most (batch bytes; op list bytes). */
#define KL_STORE_APPLY_KEEP_BYTES (1u << 20)

static void apply_lists_free(kl_store *st);

uint64_t kl_store_last_log_sync_ns(const kl_store *st) { return st->log_sync_ns; }

/* Marks the store failed (no write after this one) and keeps the first cause. Any thread. */
static void mark_failed(kl_store *st, const char *what, const char *why)
{
    bool expected = false;
    if (atomic_compare_exchange_strong(&st->failure_claimed, &expected, true)) {
        kl_fail(&st->first_failure, KL_INTERNAL, "store", "store: %s failed: %.160s", what, why ? why : "?");
        atomic_store_explicit(&st->first_failure_set, true, memory_order_release);
    }
    atomic_store(&st->write_failed, true);
}

bool kl_store_first_failure(kl_store *st, kl_err *out)
{
    if (!atomic_load(&st->write_failed))
        return false;
    if (atomic_load_explicit(&st->first_failure_set, memory_order_acquire))
        *out = st->first_failure;
    else /* the failing thread is still writing its cause down */
        kl_fail(out, KL_INTERNAL, "store", "store: a write failed (its cause is being recorded)");
    return true;
}

void kl_store_options_default(kl_store_options *o)
{
    /* 8 MiB. 32 MiB cut the members' CPU per message at 64 writers in flight by 10-15%
     * (fewer flushes and L1 rewrites), but the log's records stay on disk until their
     * memtable is flushed (then in RocksDB's WAL, now in the journal, whose segments retire
     * after a flush), so each member then needs tens of MiB more disk: on a small volume
     * (the fault harness's 64 MiB disk) the member ran out of space for good. */
    o->write_buffer_bytes = 8u << 20;
    o->block_cache_bytes = 16u << 20;
    /* About one log memtable of entries: a segment retires after a flush, so a smaller one
     * would force flushes of small memtables. Three of them (current, spare, one waiting
     * for its flush) are what the journal holds on disk in steady state. */
    o->journal_segment_bytes = 8u << 20;
    o->init = true;
    o->identity = NULL;
}

rocksdb_t *kl_store_db(kl_store *st) { return st->db; }
rocksdb_column_family_handle_t *kl_store_log_family(kl_store *st) { return st->log_cf; }
const uint8_t *kl_store_incarnation(const kl_store *st) { return st->incarnation; }
uint64_t kl_store_applied_index(const kl_store *st) { return st->applied; }
bool kl_store_journal_direct(kl_store *st) { return st->journal != NULL && kl_journal_direct(st->journal); }
uint64_t kl_store_state_gen(const kl_store *st) { return st->state_gen; }
uint64_t kl_store_last_index(const kl_store *st) { return atomic_load(&st->last); }
uint64_t kl_store_first_index(const kl_store *st) { return atomic_load(&st->first); }
uint64_t kl_store_durable_applied(const kl_store *st) { return st->durable; }
const char *kl_store_dir(const kl_store *st) { return st->dir; }

/* RocksDB counts into a thread-local perf context on every key comparison, get and write
 * unless the calling thread turned that off, and from a shared library each count costs a
 * __tls_get_addr call: 4% of a follower's samples at 64 in flight, most of it memtable
 * inserts. Nothing here reads those counts, so each thread that calls in turns them off
 * once (the flag is this executable's own TLS, which costs no call). A thread that sets
 * another level after its first store call keeps it, as tests that read the counts do. */
static _Thread_local bool perf_counts_off;

static inline void perf_counts_stop(void)
{
    if (!perf_counts_off) {
        rocksdb_set_perf_level(rocksdb_disable);
        perf_counts_off = true;
    }
}

/* One write of the store: refused once any write failed (see write_failed). */
static void store_write(kl_store *st, const rocksdb_writeoptions_t *wo, rocksdb_writebatch_t *wb, char **rerr)
{
    if (atomic_load(&st->write_failed)) {
        *rerr = strdup("IO error: an earlier write of this store failed; no further writes");
        return;
    }
    perf_counts_stop();
    rocksdb_write(st->db, (rocksdb_writeoptions_t *)wo, wb, rerr);
    if (*rerr != NULL)
        mark_failed(st, "write", *rerr);
}

/* store_write of one key. */
static void store_put(kl_store *st, const rocksdb_writeoptions_t *wo, rocksdb_column_family_handle_t *cf,
                      const uint8_t *key, size_t klen, const void *val, size_t vlen, char **rerr)
{
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    rocksdb_writebatch_put_cf(wb, cf, (const char *)key, klen, (const char *)val, vlen);
    store_write(st, wo, wb, rerr);
    rocksdb_writebatch_destroy(wb);
}

static kl_code rocks_fail(kl_err *err, const char *what, char *rerr)
{
    /* RocksDB messages hold paths and codes, never user data. */
    kl_fail(err, KL_INTERNAL, "store", "store: %s failed: %.160s", what, rerr ? rerr : "?");
    rocksdb_free(rerr);
    return KL_INTERNAL;
}

/* A synced write of the log's keys: the batch goes to the journal and is synced there,
 * then into RocksDB without its WAL. Only after the sync, so that no flushed file ever
 * holds a record the journal may lose (a replay over it would then put older records back
 * over a newer one). Persistence worker, or a test's thread; one at a time. */
static kl_code journal_write(kl_store *st, rocksdb_writebatch_t *wb, uint64_t *sync_ns, kl_err *err)
{
    if (atomic_load(&st->write_failed))
        return kl_fail(err, KL_INTERNAL, "log_write", "store: log write refused: an earlier write of this store failed");
    size_t len;
    const char *data = rocksdb_writebatch_data(wb, &len);
    pthread_mutex_lock(&st->jmu);
    kl_code rc = kl_journal_append(st->journal, (const uint8_t *)data, len, sync_ns, err);
    char *rerr = NULL;
    if (rc != KL_OK)
        mark_failed(st, "log write", err->message);
    else
        store_write(st, st->wnosync, wb, &rerr);
    pthread_mutex_unlock(&st->jmu);
    if (rerr != NULL)
        return rocks_fail(err, "log write", rerr);
    return rc;
}

/* The log family and the default one (where "hard" is) flushed, waiting: what makes a
 * journal segment's records durable in SST files. Any thread. */
static kl_code flush_log_keys(kl_store *st, kl_err *err)
{
    rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
    rocksdb_flushoptions_set_wait(fo, 1);
    char *rerr = NULL;
    rocksdb_flush_cf(st->db, fo, st->log_cf, &rerr);
    if (rerr == NULL)
        rocksdb_flush_cf(st->db, fo, st->state_cf, &rerr);
    rocksdb_flushoptions_destroy(fo);
    return rerr != NULL ? rocks_fail(err, "flush", rerr) : KL_OK;
}

static kl_code journal_flush_cb(void *arg, kl_err *err) { return flush_log_keys(arg, err); }

static kl_code journal_replay_cb(void *arg, const uint8_t *rec, size_t len, kl_err *err)
{
    kl_store *st = arg;
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create_from((const char *)rec, len);
    char *rerr = NULL;
    if (wb == NULL)
        return kl_fail(err, KL_INTERNAL, "journal", "store: a journal record does not parse");
    store_write(st, st->wnosync, wb, &rerr);
    rocksdb_writebatch_destroy(wb);
    return rerr != NULL ? rocks_fail(err, "journal replay", rerr) : KL_OK;
}

/* A synced write through RocksDB's WAL of keys the journal's records also write: under
 * jmu, everything journaled is flushed and the journal cut first, so that no record older
 * than this write replays after it. Cost: a flush of both families and a directory sync
 * besides the write: for installs and restores, never per request. */
static void store_write_cut(kl_store *st, rocksdb_writebatch_t *wb, char **rerr)
{
    kl_err e;
    kl_err_clear(&e);
    pthread_mutex_lock(&st->jmu);
    kl_code rc = st->journal != NULL ? flush_log_keys(st, &e) : KL_OK;
    if (rc == KL_OK && st->journal != NULL)
        rc = kl_journal_cut(st->journal, &e);
    if (rc != KL_OK) {
        mark_failed(st, "journal cut", e.message);
        *rerr = strdup(e.message);
    } else {
        store_write(st, st->wsync, wb, rerr);
    }
    pthread_mutex_unlock(&st->jmu);
}

kl_code kl_store_write_local(kl_store *st, rocksdb_writebatch_t *wb, kl_err *err)
{
    char *rerr = NULL;
    st->state_gen++;
    store_write_cut(st, wb, &rerr);
    return rerr != NULL ? rocks_fail(err, "local write", rerr) : KL_OK;
}

static kl_code family_get(kl_store *st, rocksdb_column_family_handle_t *cf, const uint8_t *key, size_t klen,
                          uint8_t **val, size_t *vlen, bool *found, kl_err *err)
{
    char *rerr = NULL;
    size_t n = 0;
    perf_counts_stop();
    char *v = rocksdb_get_cf(st->db, st->ropts, cf, (const char *)key, klen, &n, &rerr);
    if (rerr != NULL)
        return rocks_fail(err, "get", rerr);
    *found = v != NULL;
    *val = NULL;
    *vlen = 0;
    if (v == NULL)
        return KL_OK;
    /* Copy into our own allocation so callers free() uniformly. */
    *val = malloc(n ? n : 1);
    if (*val == NULL) {
        rocksdb_free(v);
        return kl_fail(err, KL_INTERNAL, "memory", "store: out of memory reading %zu bytes", n);
    }
    memcpy(*val, v, n);
    *vlen = n;
    rocksdb_free(v);
    return KL_OK;
}

kl_code kl_store_get(kl_store *st, const uint8_t *key, size_t klen, uint8_t **val, size_t *vlen,
                     bool *found, kl_err *err)
{
    return family_get(st, st->state_cf, key, klen, val, vlen, found, err);
}

rocksdb_iterator_t *kl_store_iterator(kl_store *st)
{
    perf_counts_stop();
    return rocksdb_create_iterator(st->db, st->ropts);
}

rocksdb_iterator_t *kl_store_log_iterator(kl_store *st)
{
    perf_counts_stop();
    return rocksdb_create_iterator_cf(st->db, st->ropts, st->log_cf);
}

static kl_code meta_u64_read(kl_store *st, const char *meta, uint64_t *out, kl_err *err)
{
    kl_key k;
    kl_key_meta(&k, meta);
    uint8_t *v;
    size_t n;
    bool found;
    kl_code rc = kl_store_get(st, k.b, k.len, &v, &n, &found, err);
    if (rc != KL_OK)
        return rc;
    *out = 0;
    if (found) {
        if (n != 8) {
            free(v);
            return kl_fail(err, KL_INTERNAL, "store", "store: meta %s is corrupt", meta);
        }
        *out = kl_be64_get(v);
        free(v);
    }
    return KL_OK;
}

/* Whether key is the 'M' key of one of the cached catalog counters. */
static bool is_catalog_counter(const uint8_t *key, size_t len)
{
    kl_key v, c;
    kl_key_meta(&v, "catalog_version");
    kl_key_meta(&c, "catalog_changes");
    return (len == v.len && memcmp(key, v.b, len) == 0) || (len == c.len && memcmp(key, c.b, len) == 0);
}

kl_code kl_store_meta_u64(kl_store *st, const char *meta, uint64_t *out, kl_err *err)
{
    bool version = strcmp(meta, "catalog_version") == 0;
    if (!version && strcmp(meta, "catalog_changes") != 0)
        return meta_u64_read(st, meta, out, err);
    if (!st->catalog_cached) {
        uint64_t v, c;
        kl_code rc = meta_u64_read(st, "catalog_version", &v, err);
        if (rc == KL_OK)
            rc = meta_u64_read(st, "catalog_changes", &c, err);
        if (rc != KL_OK)
            return rc;
        st->catalog_version = v;
        st->catalog_changes = c;
        st->catalog_cached = true;
    }
    *out = version ? st->catalog_version : st->catalog_changes;
    return KL_OK;
}

static kl_code write_format(kl_store *st, const Keyload__V1__FormatRecord *f, kl_err *err)
{
    size_t n = keyload__v1__format_record__get_packed_size(f);
    uint8_t *buf = malloc(n ? n : 1);
    if (buf == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "store: out of memory");
    keyload__v1__format_record__pack(f, buf);
    kl_key k;
    kl_key_meta(&k, "format");
    char *rerr = NULL;
    store_put(st, st->wsync, st->state_cf, k.b, k.len, buf, n, &rerr);
    free(buf);
    if (rerr != NULL)
        return rocks_fail(err, "write format record", rerr);
    return KL_OK;
}

void kl_store_cluster_id(const uint8_t *cluster_secret, size_t len, uint8_t out[16])
{
    static const char label[] = "keyload.v1 store cluster id";
    crypto_generichash(out, 16, (const uint8_t *)label, sizeof label - 1, cluster_secret, len);
}

static void identity_fill(Keyload__V1__StoreIdentity *pb, const kl_store_identity *id)
{
    keyload__v1__store_identity__init(pb);
    pb->cluster = (char *)id->cluster;
    pb->cluster_id.data = (uint8_t *)id->cluster_id;
    pb->cluster_id.len = id->cluster_id ? 16 : 0;
    pb->partition = id->partition;
    pb->member = id->member;
}

static void identity_describe(char *buf, size_t cap, const char *cluster, const uint8_t *cid, size_t cid_len,
                              uint32_t partition, uint64_t member)
{
    char hex[33] = "none";
    if (cid_len == 16)
        sodium_bin2hex(hex, sizeof hex, cid, 16);
    snprintf(buf, cap, "cluster '%.40s' id %.8s partition %u member %llu", cluster ? cluster : "",
             hex, partition, (unsigned long long)member);
}

/* Compares the stored identity with the configured one. */
static kl_code identity_check(const Keyload__V1__StoreIdentity *have, const kl_store_identity *want,
                              const char *dir, kl_err *err)
{
    size_t want_len = want->cluster_id ? 16 : 0;
    bool same = strcmp(have->cluster ? have->cluster : "", want->cluster) == 0 &&
                have->cluster_id.len == want_len &&
                (want_len == 0 || memcmp(have->cluster_id.data, want->cluster_id, 16) == 0) &&
                have->partition == want->partition && have->member == want->member;
    if (same)
        return KL_OK;
    char stored[160], configured[160];
    identity_describe(stored, sizeof stored, have->cluster, have->cluster_id.data, have->cluster_id.len,
                      have->partition, have->member);
    identity_describe(configured, sizeof configured, want->cluster, want->cluster_id, want_len,
                      want->partition, want->member);
    return kl_fail(err, KL_FAILED_PRECONDITION, "store_identity",
                   "store %s belongs to %s, not to this member (%s); refused", dir, stored,
                   configured);
}

static kl_code refuse_uninitialised(const char *dir, kl_err *err)
{
    return kl_fail(err, KL_FAILED_PRECONDITION, "init_store",
                   "store %s is empty (new or wiped). A wiped member cannot know which terms it "
                   "voted in; only a new member's first start may pass --init-store (README: "
                   "Recovering a member)", dir);
}

static kl_code create_format(kl_store *st, const kl_store_options *opt, kl_err *err)
{
    Keyload__V1__FormatRecord f = KEYLOAD__V1__FORMAT_RECORD__INIT;
    Keyload__V1__StoreIdentity id;
    f.format_version = KL_FORMAT_VERSION;
    f.incompat = KL_FEAT_INCOMPAT_WRITESET_LOG | KL_FEAT_INCOMPAT_LOG_FAMILY | KL_FEAT_INCOMPAT_JOURNAL |
                 KL_FEAT_INCOMPAT_JOURNAL_CRC32C;
    f.compat = KL_FEAT_COMPAT_TRANSFERS;
    randombytes_buf(st->incarnation, sizeof st->incarnation);
    f.store_incarnation.data = st->incarnation;
    f.store_incarnation.len = sizeof st->incarnation;
    f.created_unix_ms = (int64_t)time(NULL) * 1000;
    if (opt->identity != NULL) {
        identity_fill(&id, opt->identity);
        f.identity = &id;
    }
    return write_format(st, &f, err);
}

/* Rewrites the record when it lacks something this binary records: the transfers flag of a
 * store from before transfers, or the identity of one from before identities (adopting the
 * configured one: such a store was this member's under the old binary). */
static kl_code upgrade_format(kl_store *st, Keyload__V1__FormatRecord *f, const kl_store_options *opt, kl_err *err)
{
    bool write = false;
    if (!(f->incompat & KL_FEAT_INCOMPAT_LOG_FAMILY)) {
        f->incompat |= KL_FEAT_INCOMPAT_LOG_FAMILY; /* move_log_to_family runs next */
        write = true;
    }
    if (!(f->compat & KL_FEAT_COMPAT_TRANSFERS)) {
        f->compat |= KL_FEAT_COMPAT_TRANSFERS;
        write = true;
    }
    if (!(f->incompat & KL_FEAT_INCOMPAT_JOURNAL)) {
        f->incompat |= KL_FEAT_INCOMPAT_JOURNAL; /* synced before the journal opens */
        write = true;
    }
    if (!(f->incompat & KL_FEAT_INCOMPAT_JOURNAL_CRC32C)) {
        f->incompat |= KL_FEAT_INCOMPAT_JOURNAL_CRC32C; /* before the open's first new segment */
        write = true;
    }
    Keyload__V1__StoreIdentity id;
    Keyload__V1__StoreIdentity *old = f->identity;
    if (old == NULL && opt->identity != NULL) {
        identity_fill(&id, opt->identity);
        f->identity = &id;
        write = true;
    }
    kl_code rc = write ? write_format(st, f, err) : KL_OK;
    f->identity = old;
    return rc;
}

/* Checks (or, for a new store, creates) the format record and the identity in it. */
static kl_code check_format(kl_store *st, const char *dir, const kl_store_options *opt, kl_err *err)
{
    kl_key k;
    kl_key_meta(&k, "format");
    uint8_t *v;
    size_t n;
    bool found;
    kl_code rc = kl_store_get(st, k.b, k.len, &v, &n, &found, err);
    if (rc != KL_OK)
        return rc;
    if (!found)
        return opt->init ? create_format(st, opt, err) : refuse_uninitialised(dir, err);
    Keyload__V1__FormatRecord *f = keyload__v1__format_record__unpack(NULL, n, v);
    free(v);
    if (f == NULL || f->store_incarnation.len != 16) {
        if (f)
            keyload__v1__format_record__free_unpacked(f, NULL);
        return kl_fail(err, KL_INTERNAL, "format", "store %s: format record is corrupt", dir);
    }
    memcpy(st->incarnation, f->store_incarnation.data, 16);
    uint32_t version = f->format_version;
    uint64_t unknown_incompat = f->incompat & ~KL_FEAT_INCOMPAT_KNOWN;
    uint64_t unknown_ro = f->ro_compat & ~KL_FEAT_RO_COMPAT_KNOWN;
    rc = KL_OK;
    if (f->identity != NULL && opt->identity != NULL)
        rc = identity_check(f->identity, opt->identity, dir, err);
    if (rc == KL_OK && version == KL_FORMAT_VERSION && !unknown_incompat && !unknown_ro)
        rc = upgrade_format(st, f, opt, err);
    keyload__v1__format_record__free_unpacked(f, NULL);
    if (rc != KL_OK)
        return rc;
    if (version != KL_FORMAT_VERSION)
        return kl_fail(err, KL_FAILED_PRECONDITION, "format_version",
                       "store %s: on-disk format version %u is not supported by this binary "
                       "(it knows version %u); refusing to open", dir, version, KL_FORMAT_VERSION);
    if (unknown_incompat)
        return kl_fail(err, KL_FAILED_PRECONDITION, "feature_incompat",
                       "store %s: unknown incompatible feature flags 0x%llx; a newer binary "
                       "wrote this store, refusing to open", dir, (unsigned long long)unknown_incompat);
    if (unknown_ro)
        return kl_fail(err, KL_FAILED_PRECONDITION, "feature_ro_compat",
                       "store %s: unknown read-only-compatible feature flags 0x%llx; this "
                       "binary could only read it and keyloadd must write, refusing to open",
                       dir, (unsigned long long)unknown_ro);
    return KL_OK;
}

static kl_code find_last_index(kl_store *st, kl_err *err)
{
    (void)err;
    rocksdb_iterator_t *it = kl_store_log_iterator(st);
    kl_key hi;
    kl_key_log(&hi, UINT64_MAX);
    rocksdb_iter_seek_for_prev(it, (const char *)hi.b, hi.len);
    uint64_t last = 0;
    if (rocksdb_iter_valid(it)) {
        size_t kl;
        const char *key = rocksdb_iter_key(it, &kl);
        if (kl == 9 && key[0] == 'L')
            last = kl_be64_get((const uint8_t *)key + 1);
    }
    rocksdb_iter_destroy(it);
    if (last < atomic_load(&st->first) - 1) /* compacted or installed up to its end */
        last = atomic_load(&st->first) - 1;
    atomic_store(&st->last, last);
    return KL_OK;
}

/* Moves log entries a store of the one-family layout holds under 'L' in the state family
 * into the log family, in synced batches that each move a run of keys (put there, delete
 * here): a crash between two leaves every entry in exactly one family, and the next open
 * moves the rest. Runs at open, before anything reads the log. */
static kl_code move_log_to_family(kl_store *st, kl_err *err)
{
    kl_key lo; /* where the next batch starts: past the keys moved, never over their tombstones */
    kl_key_log(&lo, 0);
    for (;;) {
        rocksdb_iterator_t *it = rocksdb_create_iterator_cf(st->db, st->ropts, st->state_cf);
        rocksdb_iter_seek(it, (const char *)lo.b, lo.len);
        rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
        size_t moved = 0, bytes = 0;
        while (rocksdb_iter_valid(it) && moved < 4096 && bytes < (4u << 20)) {
            size_t kl, vl;
            const char *k = rocksdb_iter_key(it, &kl);
            if (kl == 0 || k[0] != 'L')
                break;
            const char *v = rocksdb_iter_value(it, &vl);
            rocksdb_writebatch_put_cf(wb, st->log_cf, k, kl, v, vl);
            rocksdb_writebatch_delete_cf(wb, st->state_cf, k, kl);
            moved++;
            bytes += kl + vl;
            if (kl < sizeof lo.b) { /* the next key in byte order: this one and a 0 byte */
                memcpy(lo.b, k, kl);
                lo.b[kl] = 0;
                lo.len = kl + 1;
            }
            rocksdb_iter_next(it);
        }
        char *rerr = NULL;
        rocksdb_iter_get_error(it, &rerr);
        rocksdb_iter_destroy(it);
        if (rerr == NULL && moved > 0)
            store_write(st, st->wsync, wb, &rerr);
        rocksdb_writebatch_destroy(wb);
        if (rerr != NULL)
            return rocks_fail(err, "log move to its column family", rerr);
        if (moved == 0)
            return KL_OK;
    }
}

/* The state family's tables, memtables and compaction shape, on st->opts (st->cache made). */
static void state_family_shape(kl_store *st, const kl_store_options *opt)
{
    st->table = rocksdb_block_based_options_create();
    rocksdb_block_based_options_set_block_cache(st->table, st->cache);
    /* Outcome lookups of new command ids usually miss; a bloom filter answers those
     * without reading every data file. The table options own the policy. */
    rocksdb_block_based_options_set_filter_policy(st->table, rocksdb_filterpolicy_create_bloom_full(10));
    rocksdb_options_set_block_based_table_factory(st->opts, st->table);
    /* The same misses cost a skip-list search of each memtable first (the memtables hold
     * most recent keys, so most lookups reach them). A whole-key bloom filter over them,
     * sized at a tenth of the write buffer, answers most misses without that search; it
     * uses no prefix extractor, so iterators over the log and queues are unaffected. */
    rocksdb_options_set_memtable_prefix_bloom_size_ratio(st->opts, 0.1);
    rocksdb_options_set_memtable_whole_key_filtering(st->opts, 1);
    /* Outcome keys are random, so every flushed file spans the whole key space and each L0->L1
     * compaction rewrites all of L1. With RocksDB's default 256 MiB level base that rewrite
     * grows with the store until L1 is full (measured: the compaction thread went from 3% to
     * 17% of a core per member within four 6 s cells of 64 in flight). A level base about the
     * size of the L0 files that trigger a compaction (8 flushes of the write buffer,
     * compressed: 4 write buffers) keeps each L0->L1 rewrite near the size of what it merges,
     * and files of half a write buffer let an L1->L2 compaction take one file's key range, not
     * all of L1's. Point reads stay cheap across the extra L0 files: each is asked through its
     * bloom filter (ARCHITECTURE.md "Store layout"). */
    rocksdb_options_set_level0_file_num_compaction_trigger(st->opts, 8);
    rocksdb_options_set_max_bytes_for_level_base(st->opts, (uint64_t)opt->write_buffer_bytes * 4);
    rocksdb_options_set_target_file_size_base(st->opts, (uint64_t)opt->write_buffer_bytes / 2);
}

/* The log family's options, from the state family's (st->opts, complete by now): no
 * memtable or table bloom filters (every read of it is a hit by index) and no compression
 * (its entries are deleted soon after they are written). */
static void log_family_options(kl_store *st)
{
    st->log_opts = rocksdb_options_create_copy(st->opts);
    rocksdb_options_set_memtable_prefix_bloom_size_ratio(st->log_opts, 0);
    rocksdb_options_set_memtable_whole_key_filtering(st->log_opts, 0);
    rocksdb_options_set_compression(st->log_opts, rocksdb_no_compression);
    /* Entries arrive in index order and a log compaction writes no tombstone below the
     * log (kl_store_drop_compacted_log drops whole files instead), so a flushed file never
     * overlaps the files before it: moving it to L1 at once is a trivial move, no rewrite,
     * and only L1 and below are files DeleteFilesInRange may drop. A truncation's bounded
     * tombstone overlaps the newest file only, which one real compaction then merges. */
    rocksdb_options_set_level0_file_num_compaction_trigger(st->log_opts, 1);
    st->log_table = rocksdb_block_based_options_create();
    rocksdb_block_based_options_set_block_cache(st->log_table, st->cache);
    rocksdb_options_set_block_based_table_factory(st->log_opts, st->log_table);
}

static kl_code open_failed(const char *dir, const char *rerr, kl_err *err)
{
    if (strncmp(rerr, "Corruption", 10) == 0)
        return kl_fail(err, KL_FAILED_PRECONDITION, "wal_corrupt",
                       "store %s: corrupt WAL record (%.60s); acknowledged entries or votes may be "
                       "lost, so it is not served. Keep the directory (README: Recovering a member)",
                       dir, rerr);
    return kl_fail(err, KL_UNAVAILABLE, "data", "store: cannot open %s: %.200s", dir, rerr);
}

static kl_code store_open_log_start(kl_store *st, const char *dir, kl_err *err);

kl_code kl_store_open(const char *dir, const kl_store_options *opt, kl_store **out, kl_err *err)
{
    kl_store_options defaults;
    if (opt == NULL) {
        kl_store_options_default(&defaults);
        opt = &defaults;
    }
    if (!opt->init) {
        /* Refuse before RocksDB creates anything, so the directory stays as it was found. */
        char current[4096];
        snprintf(current, sizeof current, "%s/CURRENT", dir);
        if (access(current, F_OK) != 0)
            return refuse_uninitialised(dir, err);
    } else if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        return kl_fail(err, KL_INTERNAL, "data", "store: cannot create directory %s: %s", dir,
                       strerror(errno));
    }
    kl_store *st = calloc(1, sizeof *st);
    if (st == NULL || (st->dir = strdup(dir)) == NULL) {
        free(st);
        return kl_fail(err, KL_INTERNAL, "memory", "store: out of memory");
    }
    pthread_mutex_init(&st->jmu, NULL);
    kl_code rc;
    char *rerr = NULL;
    st->opts = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(st->opts, opt->init);
    /* The log is synced before anything is acknowledged, so every complete WAL record may
     * hold an acknowledged entry or a vote. Point-in-time recovery would silently stop at a
     * corrupt record and drop those after it; tolerating only a torn last record (a write
     * whose sync never returned) refuses every other corruption instead. */
    rocksdb_options_set_wal_recovery_mode(st->opts, rocksdb_tolerate_corrupted_tail_records_recovery);
    rocksdb_options_set_write_buffer_size(st->opts, opt->write_buffer_bytes);
    rocksdb_options_set_max_write_buffer_number(st->opts, 2);
    rocksdb_options_set_max_background_jobs(st->opts, 1);
    /* Compactions and flushes run at the lowest CPU priority (nice 19). Neither is waited
     * for by a request, while the loop and log writer threads they compete with hold
     * replies: on a machine whose cores the members share, an equal share let them
     * stretch the 64-in-flight p99 (ARCHITECTURE.md "Store layout", where the figures
     * are). Both still get every idle cycle, and the writes pace them when they fall
     * behind: a compaction by RocksDB's L0 slowdown trigger; a flush has the whole time the
     * second memtable takes to fill (max_write_buffer_number 2), after which RocksDB
     * stalls the writes, which frees the CPU it needs. */
    st->env = rocksdb_create_default_env();
    rocksdb_env_lower_thread_pool_cpu_priority(st->env);
    rocksdb_env_lower_high_priority_thread_pool_cpu_priority(st->env);
    rocksdb_options_set_env(st->opts, st->env);
    /* RocksDB's own info log: the packaged library logs a debug line per synced log write
     * (FlushWAL), which grew a member's disk by ~170 bytes per cycle for ever. INFO keeps
     * flushes and compactions; two rolled files of 4 MiB bound it. */
    rocksdb_options_set_info_log_level(st->opts, 1 /* INFO */);
    rocksdb_options_set_max_log_file_size(st->opts, 4u << 20);
    rocksdb_options_set_keep_log_file_num(st->opts, 2);
    rocksdb_options_set_max_open_files(st->opts, 256);
    st->cache = rocksdb_cache_create_lru(opt->block_cache_bytes);
    state_family_shape(st, opt);
    st->ropts = rocksdb_readoptions_create();
    st->wsync = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(st->wsync, 1);
    st->wnosync = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(st->wnosync, 0);
    /* Applied state skips the WAL: it is derived from the durable log, and its
     * applied_index travels in the same memtable write, so after a crash state and
     * applied_index roll back together to the last flush and recovery re-applies the
     * log from there. This halves WAL traffic and removes a write() from every commit. */
    rocksdb_writeoptions_disable_WAL(st->wnosync, 1);
    log_family_options(st);
    /* Only the rare synced writes outside the journal reach the WAL now (the format record,
     * compactions' "log_start", installs), yet RocksDB keeps every WAL file from the one a
     * memtable started in until that memtable is flushed. This bound flushes the families
     * once the WAL holds 32 MiB, so the WAL stays off the disk whatever happens. */
    rocksdb_options_set_max_total_wal_size(st->opts, 32u << 20);
    /* A store of the one-family layout gains the log family at its first open here. */
    rocksdb_options_set_create_missing_column_families(st->opts, 1);
    const char *families[2] = {"default", KL_STORE_LOG_FAMILY};
    const rocksdb_options_t *family_opts[2] = {st->opts, st->log_opts};
    rocksdb_column_family_handle_t *handles[2] = {NULL, NULL};
    st->db = rocksdb_open_column_families(st->opts, dir, 2, families, family_opts, handles, &rerr);
    if (rerr != NULL) {
        rc = open_failed(dir, rerr, err);
        rocksdb_free(rerr);
        goto fail_open;
    }
    st->state_cf = handles[0];
    st->log_cf = handles[1];
    if ((rc = check_format(st, dir, opt, err)) != KL_OK)
        goto fail_checked;
    /* After RocksDB's own recovery (what its WAL holds is older than any journal record
     * that survived a cut), before anything reads the log or the hard state. */
    char jdir[4200];
    snprintf(jdir, sizeof jdir, "%s/journal", dir);
    kl_journal_options jo = {.segment_bytes = opt->journal_segment_bytes, .flush = journal_flush_cb, .flush_arg = st};
    if ((rc = kl_journal_open(jdir, &jo, journal_replay_cb, st, &st->journal, err)) != KL_OK)
        goto fail_checked;
    if ((rc = move_log_to_family(st, err)) != KL_OK)
        goto fail_checked;
    if ((rc = store_open_log_start(st, dir, err)) != KL_OK)
        goto fail_checked;
    if ((rc = find_last_index(st, err)) != KL_OK)
        goto fail_checked;
    if (st->applied > kl_store_last_index(st)) {
        rc = kl_fail(err, KL_INTERNAL, "applied_index",
                     "store %s: applied index %llu is past the log end %llu", dir,
                     (unsigned long long)st->applied, (unsigned long long)kl_store_last_index(st));
        goto fail_checked;
    }
    *out = st;
    return KL_OK;

fail_checked:
    kl_store_close(st);
    return rc;
fail_open:
    st->db = NULL;
    kl_store_close(st);
    return rc;
}

void kl_store_close(kl_store *st)
{
    if (st == NULL)
        return;
    kl_journal_close(st->journal); /* its keeper flushes through the db: before the db goes */
    if (st->state_cf != NULL)
        rocksdb_column_family_handle_destroy(st->state_cf);
    if (st->log_cf != NULL)
        rocksdb_column_family_handle_destroy(st->log_cf);
    if (st->db != NULL)
        rocksdb_close(st->db);
    rocksdb_writeoptions_destroy(st->wnosync);
    rocksdb_writeoptions_destroy(st->wsync);
    rocksdb_readoptions_destroy(st->ropts);
    if (st->log_opts != NULL)
        rocksdb_options_destroy(st->log_opts);
    if (st->log_table != NULL)
        rocksdb_block_based_options_destroy(st->log_table);
    rocksdb_options_destroy(st->opts);
    if (st->env != NULL)
        rocksdb_env_destroy(st->env);
    rocksdb_block_based_options_destroy(st->table);
    rocksdb_cache_destroy(st->cache);
    if (st->apply_wb != NULL)
        rocksdb_writebatch_destroy(st->apply_wb);
    apply_lists_free(st);
    pthread_mutex_destroy(&st->jmu);
    free(st->dir);
    free(st);
}

kl_code kl_store_append(kl_store *st, uint64_t index, const uint8_t *entry, size_t len, kl_err *err)
{
    if (index != atomic_load(&st->last) + 1)
        return kl_fail(err, KL_INTERNAL, "log", "store: append of index %llu after %llu",
                       (unsigned long long)index, (unsigned long long)atomic_load(&st->last));
    kl_key k;
    kl_key_log(&k, index);
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    rocksdb_writebatch_put_cf(wb, st->log_cf, (const char *)k.b, k.len, (const char *)entry, len);
    kl_code rc = journal_write(st, wb, NULL, err);
    rocksdb_writebatch_destroy(wb);
    if (rc != KL_OK)
        return rc;
    atomic_store(&st->last, index);
    return KL_OK;
}

kl_code kl_store_log_write(kl_store *st, const Keyload__V1__HardState *hard, uint64_t truncate_from,
                           const kl_store_log_item *items, size_t n, kl_err *err)
{
    uint64_t last = atomic_load(&st->last);
    uint64_t expect = truncate_from ? truncate_from : last + 1;
    if (truncate_from > last + 1)
        return kl_fail(err, KL_INTERNAL, "log", "store: truncation at %llu past the log end %llu",
                       (unsigned long long)truncate_from, (unsigned long long)last);
    /* The loop thread may apply while this write runs (below its truncation point). */
    uint64_t applied = __atomic_load_n(&st->applied, __ATOMIC_RELAXED);
    if (truncate_from != 0 && truncate_from <= applied)
        return kl_fail(err, KL_INTERNAL, "log", "store: truncation at %llu of applied entries (applied %llu)",
                       (unsigned long long)truncate_from, (unsigned long long)applied);
    if (KL_FAILPOINT("store.log_write", err) != KL_OK) {
        mark_failed(st, "log write", "IO error: Input/output error (failpoint store.log_write)");
        return kl_fail(err, KL_INTERNAL, "log_write",
                       "store: log write failed: IO error: Input/output error (failpoint store.log_write)");
    }
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    if (hard != NULL) {
        uint8_t buf[64];
        size_t hn = keyload__v1__hard_state__pack(hard, buf);
        kl_key hk;
        kl_key_meta(&hk, "hard");
        rocksdb_writebatch_put(wb, (const char *)hk.b, hk.len, (const char *)buf, hn);
    }
    if (truncate_from != 0 && truncate_from <= last) {
        /* Up to last + 1, not to the end of the key space: no entry past last exists
         * (the open finds the last one on disk), and a tombstone reaching past every
         * later entry would make every later flushed file overlap it (log_family_options). */
        kl_key lo, hi;
        kl_key_log(&lo, truncate_from);
        kl_key_log(&hi, last + 1);
        rocksdb_writebatch_delete_range_cf(wb, st->log_cf, (const char *)lo.b, lo.len, (const char *)hi.b, hi.len);
    }
    for (size_t i = 0; i < n; i++) {
        if (items[i].index != expect + i) {
            rocksdb_writebatch_destroy(wb);
            return kl_fail(err, KL_INTERNAL, "log", "store: log item %llu out of order (want %llu)",
                           (unsigned long long)items[i].index, (unsigned long long)(expect + i));
        }
        kl_key k;
        kl_key_log(&k, items[i].index);
        rocksdb_writebatch_put_cf(wb, st->log_cf, (const char *)k.b, k.len, (const char *)items[i].bytes,
                                  items[i].len);
    }
    uint64_t sync_ns = 0;
    kl_code rc = journal_write(st, wb, &sync_ns, err);
    rocksdb_writebatch_destroy(wb);
    if (rc != KL_OK)
        return rc;
    st->log_sync_ns = sync_ns;
    if (n > 0)
        atomic_store(&st->last, items[n - 1].index);
    else if (truncate_from != 0 && truncate_from <= last)
        atomic_store(&st->last, truncate_from - 1);
    return KL_OK;
}

kl_code kl_store_load_hard(kl_store *st, uint64_t *term, uint64_t *vote, uint64_t *commit, kl_err *err)
{
    kl_key k;
    kl_key_meta(&k, "hard");
    uint8_t *v;
    size_t n;
    bool found;
    kl_code rc = kl_store_get(st, k.b, k.len, &v, &n, &found, err);
    *term = *vote = *commit = 0;
    if (rc != KL_OK || !found)
        return rc;
    Keyload__V1__HardState *h = keyload__v1__hard_state__unpack(NULL, n, v);
    free(v);
    if (h == NULL)
        return kl_fail(err, KL_INTERNAL, "store", "store: hard state does not decode");
    *term = h->term;
    *vote = h->vote;
    *commit = h->commit;
    keyload__v1__hard_state__free_unpacked(h, NULL);
    return KL_OK;
}

kl_code kl_store_read_log(kl_store *st, uint64_t index, uint8_t **entry, size_t *len, bool *found,
                          kl_err *err)
{
    if (index < atomic_load(&st->first)) {
        /* Compacted: a file holding it may still be on disk (kl_store_drop_compacted_log). */
        *entry = NULL;
        *len = 0;
        *found = false;
        return KL_OK;
    }
    kl_key k;
    kl_key_log(&k, index);
    return family_get(st, st->log_cf, k.b, k.len, entry, len, found, err);
}

/* Adds op to wb; drops the catalog counters' cache when op writes one of them. */
static void batch_op(kl_store *st, rocksdb_writebatch_t *wb, const Keyload__V1__KvOp *op)
{
    if (op->key.len > 0 && op->key.data[0] == 'M' && is_catalog_counter(op->key.data, op->key.len))
        st->catalog_cached = false;
    if (op->del)
        rocksdb_writebatch_delete(wb, (const char *)op->key.data, op->key.len);
    else
        rocksdb_writebatch_put(wb, (const char *)op->key.data, op->key.len,
                               (const char *)op->value.data, op->value.len);
}

/* Makes kl_store_apply's op lists hold n entries (growing by doubling); on a failed
 * allocation they stay as they were and the apply writes ops in entry order instead. */
static void apply_lists_reserve(kl_store *st, size_t n)
{
    if (n <= st->apply_cap)
        return;
    size_t cap = st->apply_cap ? st->apply_cap : 64;
    while (cap < n)
        cap *= 2;
    const Keyload__V1__KvOp **ops = malloc(cap * sizeof *ops);
    kl_last_write_key *w = malloc(cap * sizeof *w);
    if (ops == NULL || w == NULL) {
        free(ops);
        free(w);
        return;
    }
    free(st->apply_ops);
    free(st->apply_w);
    st->apply_ops = ops;
    st->apply_w = w;
    st->apply_cap = cap;
}

static void apply_lists_free(kl_store *st)
{
    free(st->apply_ops);
    free(st->apply_w);
    st->apply_ops = NULL;
    st->apply_w = NULL;
    st->apply_cap = 0;
}

/* After an apply: what it grew past KL_STORE_APPLY_KEEP_BYTES goes back. */
static void apply_keep_or_release(kl_store *st)
{
    size_t bytes = 0;
    (void)rocksdb_writebatch_data(st->apply_wb, &bytes);
    if (bytes > KL_STORE_APPLY_KEEP_BYTES) {
        rocksdb_writebatch_destroy(st->apply_wb);
        st->apply_wb = NULL;
    }
    if (st->apply_cap * (sizeof *st->apply_ops + sizeof *st->apply_w) > KL_STORE_APPLY_KEEP_BYTES)
        apply_lists_free(st);
}

/* A write-set of a client command: its outcome key names it (the second line of defence in
 * kl_store_apply). */
static bool is_command(const Keyload__V1__WriteSet *ws)
{
    return ws->catalog_version == 0 && ws->command_id.len == 16;
}

/* Which write-sets of e are commands whose outcome the store already holds, all read in one
 * batched MultiGet of the store as it is before e's batch, so each answer is the one a Get
 * per write-set gave. Why batched: on a follower those Gets were 5.6% of its CPU in the
 * transfer cell, nearly all of it filter probes of the memtables and of up to eight L0
 * files for outcomes that do not exist; the batch probes each file once for all keys.
 * *stored (malloc'd, n_write_sets flags) is NULL when e holds no command.
 * Cost: one MultiGet of the commands' outcome keys; KL_INTERNAL on a read error or OOM. */
static kl_code outcomes_stored(kl_store *st, const Keyload__V1__LogEntry *e, bool **stored, kl_err *err)
{
    *stored = NULL;
    size_t n = 0;
    for (size_t i = 0; i < e->n_write_sets; i++)
        n += is_command(e->write_sets[i]);
    if (n == 0)
        return KL_OK;
    kl_key *keys = malloc(n * sizeof *keys);
    const char **kp = malloc(n * sizeof *kp);
    size_t *kn = malloc(n * sizeof *kn);
    rocksdb_pinnableslice_t **vals = calloc(n, sizeof *vals);
    char **errs = calloc(n, sizeof *errs);
    bool *out = calloc(e->n_write_sets, sizeof *out);
    kl_code rc = KL_OK;
    if (keys == NULL || kp == NULL || kn == NULL || vals == NULL || errs == NULL || out == NULL) {
        rc = kl_fail(err, KL_INTERNAL, "memory", "store: out of memory reading %zu outcomes", n);
        goto done;
    }
    for (size_t i = 0, k = 0; i < e->n_write_sets; i++) {
        const Keyload__V1__WriteSet *ws = e->write_sets[i];
        if (!is_command(ws))
            continue;
        kl_key_outcome(&keys[k], ws->principal, ws->command_id.data);
        kp[k] = (const char *)keys[k].b;
        kn[k] = keys[k].len;
        k++;
    }
    perf_counts_stop();
    rocksdb_batched_multi_get_cf(st->db, st->ropts, st->state_cf, n, kp, kn, vals, errs, false);
    for (size_t i = 0, k = 0; i < e->n_write_sets; i++) {
        if (!is_command(e->write_sets[i]))
            continue;
        if (errs[k] != NULL && rc == KL_OK)
            rc = rocks_fail(err, "get", errs[k]); /* frees it */
        else
            rocksdb_free(errs[k]);
        out[i] = vals[k] != NULL;
        if (vals[k] != NULL)
            rocksdb_pinnableslice_destroy(vals[k]);
        k++;
    }
done:
    free(keys);
    free(kp);
    free(kn);
    free(vals);
    free(errs);
    if (rc == KL_OK)
        *stored = out;
    else
        free(out);
    return rc;
}

kl_code kl_store_apply(kl_store *st, const Keyload__V1__LogEntry *e, kl_err *err)
{
    if (e->index != st->applied + 1)
        return kl_fail(err, KL_INTERNAL, "applied_index", "store: apply of index %llu after %llu",
                       (unsigned long long)e->index, (unsigned long long)st->applied);
    if (st->apply_wb == NULL)
        st->apply_wb = rocksdb_writebatch_create();
    else
        rocksdb_writebatch_clear(st->apply_wb);
    rocksdb_writebatch_t *wb = st->apply_wb;
    kl_code rc = KL_OK;
    /* The ops of the write-sets that apply, gathered so that only each key's last write
     * goes into the batch, in key order (last_write.h). Without memory for the lists every
     * op is written in entry order, which gives the same store. */
    size_t n_all = 0;
    for (size_t i = 0; i < e->n_write_sets; i++)
        n_all += e->write_sets[i]->n_ops;
    apply_lists_reserve(st, n_all);
    const Keyload__V1__KvOp **ops = st->apply_ops;
    kl_last_write_key *w = st->apply_w;
    bool gather = n_all > 0 && st->apply_cap >= n_all;
    size_t n_ops = 0;
    uint64_t catalog = 0; /* catalog version as of the write-sets applied so far */
    bool catalog_read = false;
    bool *stored = NULL;
    if ((rc = outcomes_stored(st, e, &stored, err)) != KL_OK)
        goto out;
    for (size_t i = 0; i < e->n_write_sets; i++) {
        const Keyload__V1__WriteSet *ws = e->write_sets[i];
        if (ws->catalog_version != 0) {
            /* A tailed catalog change applies only at current + 1: a new leader may
             * propose a version its predecessor's entry already carried. */
            if (!catalog_read) {
                if ((rc = kl_store_meta_u64(st, "catalog_version", &catalog, err)) != KL_OK)
                    goto out;
                catalog_read = true;
            }
            if (ws->catalog_version != catalog + 1)
                continue;
            catalog = ws->catalog_version;
        } else if (stored != NULL && stored[i]) {
            /* Second line of defence (ARCHITECTURE.md "Write path"): a write-set whose outcome already
             * exists was applied before and must not apply twice. */
            continue;
        }
        for (size_t j = 0; j < ws->n_ops; j++) {
            const Keyload__V1__KvOp *op = ws->ops[j];
            if (!gather) {
                batch_op(st, wb, op);
                continue;
            }
            assert(n_ops < n_all);
            w[n_ops] = (kl_last_write_key){op->key.data, op->key.len, n_ops};
            ops[n_ops++] = op;
        }
    }
    if (gather) {
        size_t kept = kl_last_write_sort(w, n_ops);
        for (size_t i = 0; i < kept; i++)
            batch_op(st, wb, ops[w[i].pos]);
    }
    if (e->partition_incarnation.len == 16) {
        /* The first incarnation applied wins: a leader that failed before its proposal
         * committed may be followed by another proposing a different one. */
        kl_key pk;
        kl_key_meta(&pk, "pinc");
        uint8_t *v;
        size_t n;
        bool found;
        if ((rc = kl_store_get(st, pk.b, pk.len, &v, &n, &found, err)) != KL_OK)
            goto out;
        free(v);
        if (!found)
            rocksdb_writebatch_put(wb, (const char *)pk.b, pk.len,
                                   (const char *)e->partition_incarnation.data, 16);
    }
    kl_key ak;
    kl_key_meta(&ak, "applied");
    uint8_t ab[8];
    kl_be64_put(ab, e->index);
    rocksdb_writebatch_put(wb, (const char *)ak.b, ak.len, (const char *)ab, 8);
    char *rerr = NULL;
    store_write(st, st->wnosync, wb, &rerr);
    if (rerr != NULL) {
        rc = rocks_fail(err, "apply", rerr);
        goto out;
    }
    __atomic_store_n(&st->applied, e->index, __ATOMIC_RELAXED); /* read by a running log write */
out:
    free(stored);
    apply_keep_or_release(st);
    return rc;
}

kl_code kl_store_debug_set_flags(const char *dir, uint64_t compat, uint64_t ro_compat,
                                 uint64_t incompat, uint32_t version, kl_err *err)
{
    kl_store *st;
    kl_code rc = kl_store_open(dir, NULL, &st, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__FormatRecord f = KEYLOAD__V1__FORMAT_RECORD__INIT;
    f.format_version = version;
    f.compat = compat;
    f.ro_compat = ro_compat;
    f.incompat = incompat;
    f.store_incarnation.data = st->incarnation;
    f.store_incarnation.len = 16;
    rc = write_format(st, &f, err);
    kl_store_close(st);
    return rc;
}

/* ---- Log compaction and snapshot install (ARCHITECTURE.md "Store layout"). */

/* The member's own meta records, in byte order (the install deletes the gaps between). */
static const char *const local_meta[] = {"applied", "format", "hard", "install", "log_start"};
#define LOCAL_META_N (sizeof local_meta / sizeof local_meta[0])

bool kl_store_key_is_local(const uint8_t *key, size_t len)
{
    if (len == 0)
        return false;
    if (key[0] == 'L')
        return true;
    if (key[0] != 'M')
        return false;
    for (size_t i = 0; i < LOCAL_META_N; i++)
        if (len - 1 == strlen(local_meta[i]) && memcmp(key + 1, local_meta[i], len - 1) == 0)
            return true;
    return false;
}

static void log_start_put(rocksdb_writebatch_t *wb, uint64_t first, uint64_t prev_term,
                          const uint8_t *config, size_t config_len)
{
    uint8_t buf[16 + KL_SNAP_CONFIG_MAX];
    kl_be64_put(buf, first);
    kl_be64_put(buf + 8, prev_term);
    if (config_len > 0)
        memcpy(buf + 16, config, config_len);
    kl_key k;
    kl_key_meta(&k, "log_start");
    rocksdb_writebatch_put(wb, (const char *)k.b, k.len, (const char *)buf, 16 + config_len);
}

kl_code kl_store_log_start(kl_store *st, uint64_t *first, uint64_t *prev_term, uint8_t **config,
                           size_t *config_len, kl_err *err)
{
    kl_key k;
    kl_key_meta(&k, "log_start");
    uint8_t *v;
    size_t n;
    bool found;
    *first = 1;
    *prev_term = 0;
    *config = NULL;
    *config_len = 0;
    kl_code rc = kl_store_get(st, k.b, k.len, &v, &n, &found, err);
    if (rc != KL_OK || !found)
        return rc;
    if (n < 16 || n > 16 + KL_SNAP_CONFIG_MAX || kl_be64_get(v) == 0) {
        free(v);
        return kl_fail(err, KL_INTERNAL, "log_start", "store: meta log_start is corrupt (%zu bytes)", n);
    }
    *first = kl_be64_get(v);
    *prev_term = kl_be64_get(v + 8);
    if (n > 16) {
        memmove(v, v + 16, n - 16);
        *config = v;
        *config_len = n - 16;
    } else {
        free(v);
    }
    return KL_OK;
}

kl_code kl_store_flush(kl_store *st, kl_err *err)
{
    rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
    rocksdb_flushoptions_set_wait(fo, 1);
    char *rerr = NULL;
    rocksdb_flush(st->db, fo, &rerr);
    rocksdb_flushoptions_destroy(fo);
    if (rerr != NULL)
        return rocks_fail(err, "flush", rerr);
    return KL_OK;
}

void kl_store_note_durable(kl_store *st, uint64_t applied)
{
    if (applied > st->durable)
        st->durable = applied;
}

kl_code kl_store_make_durable(kl_store *st, uint64_t *durable, kl_err *err)
{
    uint64_t applied = st->applied; /* applies run on this thread: none during the flush */
    kl_code rc = kl_store_flush(st, err);
    if (rc != KL_OK)
        return rc;
    kl_store_note_durable(st, applied);
    *durable = st->durable;
    return KL_OK;
}

/* Term of log entry `index`: 0 for index 0, log_start's prev_term just below the log. */
static kl_code entry_term(kl_store *st, uint64_t index, uint64_t *term, kl_err *err)
{
    *term = 0;
    if (index == 0)
        return KL_OK;
    if (index == atomic_load(&st->first) - 1) {
        uint64_t first;
        uint8_t *cfg;
        size_t cfg_len;
        kl_code rc = kl_store_log_start(st, &first, term, &cfg, &cfg_len, err);
        free(cfg);
        return rc;
    }
    uint8_t *v;
    size_t n;
    bool found;
    kl_code rc = kl_store_read_log(st, index, &v, &n, &found, err);
    if (rc != KL_OK)
        return rc;
    if (!found)
        return kl_fail(err, KL_INTERNAL, "log", "store: log entry %llu is missing",
                       (unsigned long long)index);
    Keyload__V1__LogEntry *e = keyload__v1__log_entry__unpack(NULL, n, v);
    free(v);
    if (e == NULL)
        return kl_fail(err, KL_INTERNAL, "log", "store: log entry %llu does not decode",
                       (unsigned long long)index);
    *term = e->term;
    keyload__v1__log_entry__free_unpacked(e, NULL);
    return KL_OK;
}

kl_code kl_store_compact_log(kl_store *st, uint64_t first, const uint8_t *config, size_t config_len,
                             kl_err *err)
{
    uint64_t old_first = atomic_load(&st->first);
    if (first <= old_first)
        return KL_OK;
    if (config_len > KL_SNAP_CONFIG_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "config",
                       "store: configuration of %zu bytes exceeds KL_SNAP_CONFIG_MAX (%d)", config_len,
                       KL_SNAP_CONFIG_MAX);
    if (first - 1 > st->durable)
        return kl_fail(err, KL_FAILED_PRECONDITION, "compact_not_durable",
                       "store: log compaction below %llu refused: applied state is durable only "
                       "up to %llu (make it durable first)",
                       (unsigned long long)first, (unsigned long long)st->durable);
    uint64_t prev_term;
    kl_code rc = entry_term(st, first - 1, &prev_term, err);
    if (rc != KL_OK)
        return rc;
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    log_start_put(wb, first, prev_term, config, config_len);
    char *rerr = NULL;
    store_write(st, st->wsync, wb, &rerr);
    rocksdb_writebatch_destroy(wb);
    if (rerr != NULL)
        return rocks_fail(err, "log compaction", rerr);
    atomic_store(&st->first, first);
    /* invariant: I-STORE-13 the log starts at most one past the durably applied index */
    assert(st->durable >= first - 1);
    /* The entries below first are gone once "log_start" says so: every reader of the log
     * starts at first (kl_store_read_log refuses below it); kl_store_drop_compacted_log
     * then frees their disk. No tombstone: one below the log would make the next flushed
     * file overlap every older one, and each flush would rewrite the live log. */
    return KL_OK;
}

kl_code kl_store_drop_compacted_log(kl_store *st, kl_err *err)
{
    if (atomic_load(&st->write_failed))
        return kl_fail(err, KL_INTERNAL, "store", "store: an earlier write of this store failed");
    uint64_t first = atomic_load(&st->first);
    if (first <= 1)
        return KL_OK;
    kl_key hi;
    kl_key_log(&hi, first - 1);
    char *rerr = NULL;
    rocksdb_delete_file_in_range_cf(st->db, st->log_cf, NULL, 0, (const char *)hi.b, hi.len, &rerr);
    if (rerr != NULL) {
        mark_failed(st, "log file drop", rerr);
        return rocks_fail(err, "log file drop", rerr);
    }
    return KL_OK;
}

/* Deletes every replicated key and the whole log: the complement of the local meta
 * records, as range tombstones. Tags are ASCII, so "\xff" bounds the key space. */
static void delete_state_and_log(kl_store *st, rocksdb_writebatch_t *wb)
{
    kl_key from;
    from.len = 0;
    for (size_t i = 0; i <= LOCAL_META_N; i++) {
        kl_key to;
        if (i < LOCAL_META_N) {
            kl_key_meta(&to, local_meta[i]);
        } else {
            to.b[0] = 0xff;
            to.len = 1;
        }
        rocksdb_writebatch_delete_range(wb, (const char *)from.b, from.len, (const char *)to.b, to.len);
        if (i < LOCAL_META_N) {
            from = to;
            from.b[from.len++] = 0; /* the first key after this record */
        }
    }
    rocksdb_writebatch_delete_range_cf(wb, st->log_cf, "", 0, "\xff", 1);
}

static void install_path(const kl_store *st, char *out, size_t cap, const char *prefix, uint32_t i)
{
    snprintf(out, cap, "%s/install/%s%06u.sst", st->dir, prefix, i);
}

/* One rocksdb_ingest_external_file of names[0..n), moved (the names are links of our own)
 * or copied. A moved file shares its inode with a staged original, so RocksDB must not
 * write a global sequence number into it: it is told to refuse instead (the caller then
 * copies). */
static kl_code ingest_files(kl_store *st, char **names, uint32_t n, bool move, kl_err *err)
{
    if (n == 0)
        return KL_OK;
    rocksdb_ingestexternalfileoptions_t *io = rocksdb_ingestexternalfileoptions_create();
    rocksdb_ingestexternalfileoptions_set_move_files(io, move ? 1 : 0);
    if (move)
        rocksdb_ingestexternalfileoptions_set_allow_global_seqno(io, 0);
    char *rerr = NULL;
    rocksdb_ingest_external_file(st->db, (const char *const *)names, n, io, &rerr);
    rocksdb_ingestexternalfileoptions_destroy(io);
    return rerr != NULL ? rocks_fail(err, "snapshot ingestion", rerr) : KL_OK;
}

/* Drops what the install marker's range deletion covers (the old state and log) from the
 * SST files, tombstones included, so that an ingested file below or above the local keys
 * overlaps nothing: RocksDB then ingests it at sequence number 0 and never writes into it.
 * Costs a pass over the old state (little on a new or wiped member). */
static kl_code install_clear_old(kl_store *st)
{
    rocksdb_compactoptions_t *co = rocksdb_compactoptions_create();
    rocksdb_compactoptions_set_bottommost_level_compaction(co, 2); /* kForce: drop tombstones */
    rocksdb_compact_range_opt(st->db, co, NULL, 0, NULL, 0);
    rocksdb_compactoptions_destroy(co);
    char *v = rocksdb_property_value(st->db, "rocksdb.num-snapshots");
    bool none = v != NULL && strcmp(v, "0") == 0;
    rocksdb_free(v);
    return none ? KL_OK : KL_FAILED_PRECONDITION; /* a snapshot held: link nothing */
}

/* Whether any key outside the local range ('L' .. 'M') is there: after the marker's
 * deletion only an ingestion of linked files puts one back. */
static bool install_linked_done(kl_store *st)
{
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_iterator_t *it = rocksdb_create_iterator(st->db, ro);
    rocksdb_iter_seek_to_first(it);
    bool found = rocksdb_iter_valid(it) && ((const uint8_t *)rocksdb_iter_key(it, &(size_t){0}))[0] < 'L';
    if (!found) {
        rocksdb_iter_seek(it, "N", 1);
        found = rocksdb_iter_valid(it);
    }
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    return found;
}

/* Ingests the staged files. A staged original must stay as it was until the install
 * finished: ingestion writes a global sequence number into a file that overlaps the store's
 * keys, a changed file is refused by a second ingestion, and the open after a crash between
 * this step and the last write ingests again. So a file marked KL_STORE_INSTALL_COPY_SUFFIX
 * (it holds replicated 'M' records between the local ones) is copied; every other file is
 * hard-linked under a name of its own and moved in, which costs no copy: install_clear_old
 * left nothing it could overlap, so RocksDB writes nothing into it (with a RocksDB snapshot
 * held it would, and then everything is copied). The linked files go in first, in one
 * ingestion; a second run (the open after a crash) skips them once their keys are there and
 * copies the marked ones again (a copy overlapping an earlier one is harmless: same
 * records). */
static kl_code install_ingest(kl_store *st, uint32_t nfiles, kl_err *err)
{
    if (nfiles == 0)
        return KL_OK;
    char **copies = calloc(nfiles, sizeof *copies);
    char **links = calloc(nfiles, sizeof *links);
    if (copies == NULL || links == NULL) {
        free(copies);
        free(links);
        return kl_fail(err, KL_INTERNAL, "memory", "store: out of memory");
    }
    bool clear = install_clear_old(st) == KL_OK;
    bool done = install_linked_done(st);
    uint32_t ncopy = 0, nlink = 0;
    kl_code rc = KL_OK;
    for (uint32_t i = 0; i < nfiles && rc == KL_OK; i++) {
        char path[4200], other[4200];
        install_path(st, path, sizeof path, "", i);
        if (access(path, R_OK) != 0) {
            rc = kl_fail(err, KL_INTERNAL, "install_incomplete",
                         "store %s: staged snapshot file %u: %s", st->dir, i, strerror(errno));
            break;
        }
        install_path(st, other, sizeof other, "", i);
        snprintf(other + strlen(other) - 4, 16, "%s", KL_STORE_INSTALL_COPY_SUFFIX);
        bool copy = access(other, F_OK) == 0;
        if (!copy && done)
            continue; /* linked in before a crash: its records are in the store */
        if (!copy && clear) {
            install_path(st, other, sizeof other, "", i);
            snprintf(other + strlen(other) - 4, 16, ".link");
            unlink(other);
            if (link(path, other) != 0) {
                rc = kl_fail(err, KL_INTERNAL, "install_link",
                             "store %s: cannot link staged snapshot file %u: %s", st->dir, i, strerror(errno));
                break;
            }
        }
        char *name = strdup(!copy && clear ? other : path);
        if (name == NULL)
            rc = kl_fail(err, KL_INTERNAL, "memory", "store: out of memory");
        else if (!copy && clear)
            links[nlink++] = name;
        else
            copies[ncopy++] = name;
    }
    if (rc == KL_OK && ingest_files(st, links, nlink, true, err) != KL_OK) {
        /* Refused rather than written into (a snapshot or an overlap appeared after
         * install_clear_old): the unchanged originals go in by copy instead. */
        for (uint32_t i = 0; i < nlink && rc == KL_OK; i++) {
            size_t len = strlen(links[i]);
            snprintf(links[i] + len - strlen(".link"), strlen(".link") + 1, ".sst");
            copies[ncopy++] = links[i];
            links[i] = NULL;
        }
        kl_err_clear(err);
    }
    if (rc == KL_OK)
        rc = ingest_files(st, copies, ncopy, false, err);
    for (uint32_t i = 0; i < nfiles; i++) {
        free(copies[i]);
        free(links[i]);
    }
    free(copies);
    free(links);
    return rc;
}

static void install_remove_stage(kl_store *st)
{
    char path[4200];
    for (uint32_t i = 0;; i++) {
        install_path(st, path, sizeof path, "", i);
        snprintf(path + strlen(path) - 4, 16, "%s", KL_STORE_INSTALL_COPY_SUFFIX);
        unlink(path);
        install_path(st, path, sizeof path, "", i);
        snprintf(path + strlen(path) - 4, 16, ".link");
        unlink(path);
        install_path(st, path, sizeof path, "", i);
        if (unlink(path) != 0)
            break;
    }
    snprintf(path, sizeof path, "%s/install/STATE", st->dir);
    unlink(path);
}

/* The last step: applied, log start and commit move to the snapshot; the marker goes. */
static kl_code install_finish(kl_store *st, uint64_t index, uint64_t term, const uint8_t *config,
                              size_t config_len, kl_err *err)
{
    uint64_t hterm, vote, commit;
    kl_code rc = kl_store_load_hard(st, &hterm, &vote, &commit, err);
    if (rc != KL_OK)
        return rc;
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    Keyload__V1__HardState h = KEYLOAD__V1__HARD_STATE__INIT;
    h.term = hterm;
    h.vote = vote;
    h.commit = index;
    uint8_t hb[64];
    size_t hn = keyload__v1__hard_state__pack(&h, hb);
    kl_key k;
    kl_key_meta(&k, "hard");
    rocksdb_writebatch_put(wb, (const char *)k.b, k.len, (const char *)hb, hn);
    uint8_t ab[8];
    kl_be64_put(ab, index);
    kl_key_meta(&k, "applied");
    rocksdb_writebatch_put(wb, (const char *)k.b, k.len, (const char *)ab, 8);
    log_start_put(wb, index + 1, term, config, config_len);
    kl_key_meta(&k, "install");
    rocksdb_writebatch_delete(wb, (const char *)k.b, k.len);
    char *rerr = NULL;
    store_write_cut(st, wb, &rerr); /* "hard" is a journaled key */
    rocksdb_writebatch_destroy(wb);
    if (rerr != NULL)
        return rocks_fail(err, "install finish", rerr);
    if ((rc = KL_FAILPOINT("store.install_finished", err)) != KL_OK)
        return rc;
    __atomic_store_n(&st->applied, index, __ATOMIC_RELAXED);
    st->state_gen++;
    st->durable = index;
    atomic_store(&st->first, index + 1);
    atomic_store(&st->last, index);
    install_remove_stage(st);
    return KL_OK;
}

/* Ingestion and finish: the steps after the marker, also run by the open after a crash. */
static kl_code install_complete(kl_store *st, uint32_t nfiles, uint64_t index, uint64_t term,
                                const uint8_t *config, size_t config_len, kl_err *err)
{
    kl_code rc = install_ingest(st, nfiles, err);
    if (rc == KL_OK)
        rc = KL_FAILPOINT("store.install_ingested", err);
    if (rc == KL_OK)
        rc = install_finish(st, index, term, config, config_len, err);
    return rc;
}

kl_code kl_store_install(kl_store *st, uint32_t nfiles, uint64_t index, uint64_t term,
                         const uint8_t *config, size_t config_len, kl_err *err)
{
    if (index <= st->applied)
        return kl_fail(err, KL_FAILED_PRECONDITION, "snapshot_stale",
                       "store: snapshot at %llu is not past the applied index %llu",
                       (unsigned long long)index, (unsigned long long)st->applied);
    if (config_len > KL_SNAP_CONFIG_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "config",
                       "store: configuration of %zu bytes exceeds KL_SNAP_CONFIG_MAX (%d)", config_len,
                       KL_SNAP_CONFIG_MAX);
    /* 'M'"install": index(8) term(8) nfiles(4) config */
    uint8_t mark[20 + KL_SNAP_CONFIG_MAX];
    kl_be64_put(mark, index);
    kl_be64_put(mark + 8, term);
    mark[16] = (uint8_t)(nfiles >> 24);
    mark[17] = (uint8_t)(nfiles >> 16);
    mark[18] = (uint8_t)(nfiles >> 8);
    mark[19] = (uint8_t)nfiles;
    if (config_len > 0)
        memcpy(mark + 20, config, config_len);
    st->state_gen++; /* before the first state key changes; install_finish moves it again */
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    delete_state_and_log(st, wb);
    kl_key k;
    kl_key_meta(&k, "install");
    rocksdb_writebatch_put(wb, (const char *)k.b, k.len, (const char *)mark, 20 + config_len);
    char *rerr = NULL;
    store_write_cut(st, wb, &rerr); /* it deletes the log, the journal's keys */
    rocksdb_writebatch_destroy(wb);
    if (rerr != NULL)
        return rocks_fail(err, "install begin", rerr);
    st->catalog_cached = false; /* the snapshot's counters replace the applied ones */
    kl_code rc = KL_FAILPOINT("store.install_begun", err);
    if (rc == KL_OK)
        rc = install_complete(st, nfiles, index, term, config, config_len, err);
    /* Past the marker the old state is gone and the new one not whole: nothing may be
     * written (or served) before an open finishes the install. */
    if (rc != KL_OK)
        atomic_store(&st->write_failed, true);
    return rc;
}

/* At open: finishes an install a crash interrupted after its marker, then loads the log
 * start and the applied index and checks that the log still reaches the state. */
static kl_code store_open_log_start(kl_store *st, const char *dir, kl_err *err)
{
    kl_key k;
    kl_key_meta(&k, "install");
    uint8_t *v;
    size_t n;
    bool found;
    kl_code rc = kl_store_get(st, k.b, k.len, &v, &n, &found, err);
    if (rc != KL_OK)
        return rc;
    if (found) {
        if (n < 20 || n > 20 + KL_SNAP_CONFIG_MAX) {
            free(v);
            return kl_fail(err, KL_INTERNAL, "install_incomplete",
                           "store %s: install marker is corrupt (%zu bytes)", dir, n);
        }
        uint32_t nfiles = (uint32_t)v[16] << 24 | (uint32_t)v[17] << 16 | (uint32_t)v[18] << 8 | v[19];
        rc = install_complete(st, nfiles, kl_be64_get(v), kl_be64_get(v + 8), v + 20, n - 20, err);
        free(v);
        if (rc != KL_OK)
            return rc;
    }
    uint64_t first, prev_term;
    uint8_t *cfg;
    size_t cfg_len;
    if ((rc = kl_store_log_start(st, &first, &prev_term, &cfg, &cfg_len, err)) != KL_OK)
        return rc;
    free(cfg);
    atomic_store(&st->first, first);
    if ((rc = kl_store_meta_u64(st, "applied", &st->applied, err)) != KL_OK)
        return rc;
    /* Applied state read at open is in SST files: applies never reach the WAL. */
    st->durable = st->applied;
    if (st->applied < first - 1)
        return kl_fail(err, KL_INTERNAL, "log_start",
                       "store %s: the log starts at %llu but the state is applied only to %llu; "
                       "entries in between are gone. Keep the directory (README: Recovering a member)",
                       dir, (unsigned long long)first, (unsigned long long)st->applied);
    return KL_OK;
}
