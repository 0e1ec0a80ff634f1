/* Log compaction, snapshot production and snapshot install against real RocksDB stores in
 * temporary directories; crash points run in a child process that dies without cleanup
 * (SIGKILL, or a failpoint's _exit) and the parent reopens what it left. */
#include "common/failpoint.h"
#include "daemon/store/keys.h"
#include "daemon/store/snapshot.h"
#include "daemon/store/store.h"
#include "harness.h"
#include <rocksdb/c.h>

#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- fixtures */

/* Entry `index` of term `term` packed into buf (at least 2048 bytes): it puts key
 * "S<index>" (with `big`, a 1 KiB value) and the replicated meta "next_queue". */
static size_t pack_entry(uint8_t *buf, uint64_t index, uint64_t term, bool big)
{
    char key[32];
    snprintf(key, sizeof key, "S%08llu", (unsigned long long)index);
    uint8_t val[1024];
    memset(val, (int)(index & 0xff), sizeof val);
    uint8_t nq[8];
    kl_be64_put(nq, index);
    kl_key mk;
    kl_key_meta(&mk, "next_queue");
    Keyload__V1__KvOp op1 = KEYLOAD__V1__KV_OP__INIT, op2 = KEYLOAD__V1__KV_OP__INIT;
    op1.key.data = (uint8_t *)key;
    op1.key.len = strlen(key);
    op1.value.data = val;
    op1.value.len = big ? sizeof val : 8;
    op2.key.data = mk.b;
    op2.key.len = mk.len;
    op2.value.data = nq;
    op2.value.len = 8;
    Keyload__V1__KvOp *ops[2] = {&op1, &op2};
    Keyload__V1__WriteSet ws = KEYLOAD__V1__WRITE_SET__INIT;
    ws.n_ops = 2;
    ws.ops = ops;
    Keyload__V1__WriteSet *wss[1] = {&ws};
    Keyload__V1__LogEntry e = KEYLOAD__V1__LOG_ENTRY__INIT;
    e.index = index;
    e.term = term;
    e.n_write_sets = 1;
    e.write_sets = wss;
    return keyload__v1__log_entry__pack(&e, buf);
}

static int apply_packed(kl_store *st, const uint8_t *buf, size_t n)
{
    Keyload__V1__LogEntry *e = keyload__v1__log_entry__unpack(NULL, n, buf);
    kl_err err;
    int rc = e != NULL && kl_store_apply(st, e, &err) == KL_OK ? 0 : -1;
    keyload__v1__log_entry__free_unpacked(e, NULL);
    return rc;
}

/* Appends (synced) and applies entry `index`. */
static int put_entry(kl_store *st, uint64_t index, uint64_t term, bool big)
{
    uint8_t buf[2048];
    size_t n = pack_entry(buf, index, term, big);
    kl_err err;
    if (kl_store_append(st, index, buf, n, &err) != KL_OK)
        return -1;
    return apply_packed(st, buf, n);
}

/* Entries from..to in synced log writes of up to 500 entries, each applied after its
 * write, as a follower does; one fsync per write keeps big fixtures fast. */
static int put_entries(kl_store *st, uint64_t from, uint64_t to, uint64_t term, bool big)
{
    enum { PER = 500 };
    static uint8_t bufs[PER][2048];
    kl_store_log_item items[PER];
    for (uint64_t i = from; i <= to;) {
        size_t k = 0;
        for (; k < PER && i <= to; k++, i++) {
            items[k].index = i;
            items[k].bytes = bufs[k];
            items[k].len = pack_entry(bufs[k], i, term, big);
        }
        kl_err err;
        if (kl_store_log_write(st, NULL, 0, items, k, &err) != KL_OK)
            return -1;
        for (size_t j = 0; j < k; j++)
            if (apply_packed(st, items[j].bytes, items[j].len) != 0)
                return -1;
    }
    return 0;
}

/* Re-applies logged entries after `applied` (what recovery does). */
static void reapply(kl_store *st)
{
    kl_err err;
    for (uint64_t i = kl_store_applied_index(st) + 1; i <= kl_store_last_index(st); i++) {
        uint8_t *v;
        size_t n;
        bool found;
        ck_assert_int_eq(kl_store_read_log(st, i, &v, &n, &found, &err), KL_OK);
        ck_assert(found);
        Keyload__V1__LogEntry *e = keyload__v1__log_entry__unpack(NULL, n, v);
        free(v);
        ck_assert_ptr_nonnull(e);
        ck_assert_int_eq(kl_store_apply(st, e, &err), KL_OK);
        keyload__v1__log_entry__free_unpacked(e, NULL);
    }
}

static bool has_key(kl_store *st, const char *key)
{
    uint8_t *v;
    size_t n;
    bool found;
    kl_err err;
    ck_assert_int_eq(kl_store_get(st, (const uint8_t *)key, strlen(key), &v, &n, &found, &err), KL_OK);
    free(v);
    return found;
}

/* BLAKE2b of every non-local key and value, in order, and their count. */
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
        uint8_t lens[16];
        kl_be64_put(lens, kl);
        kl_be64_put(lens + 8, vl);
        crypto_generichash_update(&h, lens, 16);
        crypto_generichash_update(&h, (const uint8_t *)k, kl);
        crypto_generichash_update(&h, (const uint8_t *)v, vl);
        (*count)++;
    }
    rocksdb_iter_destroy(it);
    crypto_generichash_final(&h, out, 32);
}

static kl_store *open_store(const char *dir)
{
    kl_store *st;
    kl_err err;
    kl_code rc = kl_store_open(dir, NULL, &st, &err);
    ck_assert_msg(rc == KL_OK, "open %s: %s", dir, err.message);
    return st;
}

static void wait_child(pid_t pid, bool killed)
{
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    if (killed)
        ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child status %d", status);
    else
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 77, "child status %d", status);
}

/* ---- compaction */

START_TEST(compaction_refused_above_durable)
{
    char dir[256];
    th_tmpdir(dir, sizeof dir);
    kl_store *st = open_store(dir);
    kl_err err;
    for (uint64_t i = 1; i <= 10; i++)
        ck_assert_int_eq(put_entry(st, i, 1 + i / 4, false), 0);
    ck_assert_uint_eq(kl_store_first_index(st), 1);
    ck_assert_uint_eq(kl_store_durable_applied(st), 0);
    /* Applied but only in the memtable: a crash could take the state back below entry 6. */
    ck_assert_int_eq(kl_store_compact_log(st, 6, NULL, 0, &err), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(err.detail, "compact_not_durable");
    uint64_t durable;
    ck_assert_int_eq(kl_store_make_durable(st, &durable, &err), KL_OK);
    ck_assert_uint_eq(durable, 10);
    ck_assert_int_eq(kl_store_compact_log(st, 12, NULL, 0, &err), KL_FAILED_PRECONDITION);
    ck_assert_int_eq(kl_store_compact_log(st, 6, (const uint8_t *)"cfg", 3, &err), KL_OK);
    ck_assert_uint_eq(kl_store_first_index(st), 6);
    uint8_t *v;
    size_t n;
    bool found;
    ck_assert_int_eq(kl_store_read_log(st, 5, &v, &n, &found, &err), KL_OK);
    ck_assert(!found);
    ck_assert_int_eq(kl_store_read_log(st, 6, &v, &n, &found, &err), KL_OK);
    ck_assert(found);
    free(v);
    ck_assert_int_eq(kl_store_compact_log(st, 4, NULL, 0, &err), KL_OK); /* below: no-op */
    ck_assert_uint_eq(kl_store_first_index(st), 6);
    /* The whole log may go once it is durably applied: the log is then empty. */
    ck_assert_int_eq(kl_store_compact_log(st, 11, (const uint8_t *)"cfg2", 4, &err), KL_OK);
    kl_store_close(st);
    st = open_store(dir);
    ck_assert_uint_eq(kl_store_first_index(st), 11);
    ck_assert_uint_eq(kl_store_last_index(st), 10);
    uint64_t first, prev_term;
    uint8_t *cfg;
    size_t cfg_len;
    ck_assert_int_eq(kl_store_log_start(st, &first, &prev_term, &cfg, &cfg_len, &err), KL_OK);
    ck_assert_uint_eq(first, 11);
    ck_assert_uint_eq(prev_term, 1 + 10 / 4); /* term of entry 10 */
    ck_assert_uint_eq(cfg_len, 4);
    ck_assert_mem_eq(cfg, "cfg2", 4);
    free(cfg);
    ck_assert_int_eq(put_entry(st, 11, 5, false), 0); /* the log goes on after it */
    kl_store_close(st);
    th_rmrf(dir);
}
END_TEST

/* Files of the log family at `level`. */
static int log_files_at(kl_store *st, int level)
{
    char prop[64];
    snprintf(prop, sizeof prop, "rocksdb.num-files-at-level%d", level);
    char *v = rocksdb_property_value_cf(kl_store_db(st), kl_store_log_family(st), prop);
    ck_assert_ptr_nonnull(v);
    int n = atoi(v);
    rocksdb_free(v);
    return n;
}

/* Flushes the log family's memtable and waits (5 s at most) until its L0 file has moved. */
static void flush_log_family(kl_store *st)
{
    rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
    rocksdb_flushoptions_set_wait(fo, 1);
    char *rerr = NULL;
    rocksdb_flush_cf(kl_store_db(st), fo, kl_store_log_family(st), &rerr);
    rocksdb_flushoptions_destroy(fo);
    ck_assert_ptr_null(rerr);
    for (int i = 0; i < 500 && log_files_at(st, 0) > 0; i++)
        usleep(10 * 1000);
    ck_assert_int_eq(log_files_at(st, 0), 0);
}

/* The log family is never rewritten: each flushed file (entries in index order, no
 * tombstone below them) moves to L1 whole, and after a log compaction the drop removes the
 * files that hold only entries below its first index, keeping one that reaches past it. Four flushes of
 * 100 entries leave four L1 files; a merge would have left one. */
START_TEST(compaction_drops_log_files_whole)
{
    char dir[256];
    th_tmpdir(dir, sizeof dir);
    kl_store *st = open_store(dir);
    kl_err err;
    for (uint64_t k = 0; k < 4; k++) {
        ck_assert_int_eq(put_entries(st, k * 100 + 1, k * 100 + 100, 1, false), 0);
        flush_log_family(st);
        ck_assert_int_eq(log_files_at(st, 1), (int)k + 1);
    }
    uint64_t durable;
    ck_assert_int_eq(kl_store_make_durable(st, &durable, &err), KL_OK);
    ck_assert_uint_eq(durable, 400);
    ck_assert_int_eq(kl_store_compact_log(st, 250, NULL, 0, &err), KL_OK);
    ck_assert_int_eq(log_files_at(st, 1), 4); /* the loop's part drops nothing */
    ck_assert_int_eq(kl_store_drop_compacted_log(st, &err), KL_OK);
    ck_assert_int_eq(log_files_at(st, 1), 2); /* 201..300 reaches past 249: kept */
    uint8_t *v;
    size_t n;
    bool found;
    ck_assert_int_eq(kl_store_read_log(st, 249, &v, &n, &found, &err), KL_OK);
    ck_assert(!found); /* still in a file on disk, but below the log */
    ck_assert_ptr_null(v);
    ck_assert_int_eq(kl_store_read_log(st, 250, &v, &n, &found, &err), KL_OK);
    ck_assert(found);
    free(v);
    ck_assert_int_eq(kl_store_compact_log(st, 401, NULL, 0, &err), KL_OK);
    ck_assert_int_eq(kl_store_drop_compacted_log(st, &err), KL_OK);
    ck_assert_int_eq(log_files_at(st, 1), 0);
    kl_store_close(st);
    st = open_store(dir);
    ck_assert_uint_eq(kl_store_first_index(st), 401);
    ck_assert_uint_eq(kl_store_last_index(st), 400);
    ck_assert_int_eq(put_entry(st, 401, 1, false), 0);
    kl_store_close(st);
    th_rmrf(dir);
}
END_TEST

typedef struct flush_arg {
    kl_store *st;
    kl_code rc;
} flush_arg;

static void *flush_thread(void *p)
{
    flush_arg *a = p;
    kl_err err;
    a->rc = kl_store_flush(a->st, &err);
    return NULL;
}

/* The driver's off-loop flush: the applied index read before the flush starts is what
 * becomes durable, whatever is applied while the flush runs on another thread; the log
 * may be compacted to it and no further. */
START_TEST(flush_off_thread_notes_index_read_before)
{
    char dir[256];
    th_tmpdir(dir, sizeof dir);
    kl_store *st = open_store(dir);
    kl_err err;
    for (uint64_t i = 1; i <= 10; i++)
        ck_assert_int_eq(put_entry(st, i, 1, false), 0);
    uint64_t applied = kl_store_applied_index(st);
    ck_assert_uint_eq(applied, 10);
    flush_arg a = {.st = st, .rc = KL_INTERNAL};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, flush_thread, &a), 0);
    for (uint64_t i = 11; i <= 15; i++) /* applies racing the flush */
        ck_assert_int_eq(put_entry(st, i, 1, false), 0);
    ck_assert_uint_eq(kl_store_durable_applied(st), 0); /* nothing noted before the flush ends */
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_int_eq(a.rc, KL_OK);
    kl_store_note_durable(st, applied);
    ck_assert_uint_eq(kl_store_durable_applied(st), 10);
    kl_store_note_durable(st, 4); /* never backwards */
    ck_assert_uint_eq(kl_store_durable_applied(st), 10);
    ck_assert_int_eq(kl_store_compact_log(st, 12, NULL, 0, &err), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(err.detail, "compact_not_durable");
    ck_assert_int_eq(kl_store_compact_log(st, 11, NULL, 0, &err), KL_OK);
    kl_store_close(st);
    st = open_store(dir);
    ck_assert_uint_eq(kl_store_first_index(st), 11);
    ck_assert_uint_ge(kl_store_applied_index(st), 10);
    kl_store_close(st);
    th_rmrf(dir);
}
END_TEST

/* Child: entries 1..20 applied and made durable, 21..25 logged and applied but not
 * durable, the log compacted below 21, then SIGKILL with no close. */
static void compact_then_die(const char *dir)
{
    kl_store *st;
    kl_err err;
    if (kl_store_open(dir, NULL, &st, &err) != KL_OK)
        _exit(1);
    uint64_t durable = 0;
    for (uint64_t i = 1; i <= 20; i++)
        if (put_entry(st, i, 2, false) != 0)
            _exit(2);
    if (kl_store_make_durable(st, &durable, &err) != KL_OK || durable != 20)
        _exit(3);
    for (uint64_t i = 21; i <= 25; i++)
        if (put_entry(st, i, 3, false) != 0)
            _exit(4);
    if (kl_store_compact_log(st, 21, (const uint8_t *)"c", 1, &err) != KL_OK)
        _exit(5);
    kill(getpid(), SIGKILL);
    _exit(6);
}

START_TEST(compaction_survives_kill9)
{
    char dir[256];
    th_tmpdir(dir, sizeof dir);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        compact_then_die(dir);
    wait_child(pid, true);
    kl_store *st = open_store(dir);
    ck_assert_uint_eq(kl_store_first_index(st), 21);
    ck_assert_uint_eq(kl_store_last_index(st), 25);
    /* The state is never behind the log's first entry: recovery can re-apply from there. */
    ck_assert_uint_ge(kl_store_applied_index(st), kl_store_first_index(st) - 1);
    ck_assert(has_key(st, "S00000001"));
    ck_assert(has_key(st, "S00000020"));
    reapply(st);
    ck_assert_uint_eq(kl_store_applied_index(st), 25);
    ck_assert(has_key(st, "S00000025"));
    kl_store_close(st);
    th_rmrf(dir);
}
END_TEST

/* Child: a log start past the unflushed applied state, as a compaction without the
 * durability check would leave it, then SIGKILL. */
static void bad_compact_then_die(const char *dir)
{
    kl_store *st;
    kl_err err;
    if (kl_store_open(dir, NULL, &st, &err) != KL_OK)
        _exit(1);
    for (uint64_t i = 1; i <= 5; i++)
        if (put_entry(st, i, 1, false) != 0)
            _exit(2);
    kl_key k;
    kl_key_meta(&k, "log_start");
    uint8_t v[16];
    kl_be64_put(v, 6);
    kl_be64_put(v + 8, 1);
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(wo, 1);
    char *rerr = NULL;
    rocksdb_put(kl_store_db(st), wo, (const char *)k.b, k.len, (const char *)v, 16, &rerr);
    if (rerr != NULL)
        _exit(3);
    kill(getpid(), SIGKILL);
    _exit(4);
}

START_TEST(open_refuses_log_past_state)
{
    char dir[256];
    th_tmpdir(dir, sizeof dir);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        bad_compact_then_die(dir);
    wait_child(pid, true);
    kl_store *st;
    kl_err err;
    ck_assert_int_eq(kl_store_open(dir, NULL, &st, &err), KL_INTERNAL);
    ck_assert_str_eq(err.detail, "log_start");
    th_rmrf(dir);
}
END_TEST

/* ---- snapshots */

/* Source: entries 1..n (1 KiB values, term 4), log compacted below `compact`. */
static kl_store *make_source(char *dir, size_t cap, uint64_t n, uint64_t compact)
{
    th_tmpdir(dir, cap);
    kl_store *st = open_store(dir);
    ck_assert_int_eq(put_entries(st, 1, n, 4, true), 0);
    kl_err err;
    if (compact > 1) {
        uint64_t durable;
        ck_assert_int_eq(kl_store_make_durable(st, &durable, &err), KL_OK);
        ck_assert_int_eq(kl_store_compact_log(st, compact, NULL, 0, &err), KL_OK);
    }
    return st;
}

/* Replicated keys of the target that the source lacks, one in each gap between the local
 * keys ('L', "Mapplied", "Mformat", "Mhard", "Minstall", "Mlog_start"). */
static const char *const old_keys[] = {"Aold", "Mcatalog_version", "Mhz", "Mj", "Mpinc", "Zold"};

/* Target: its own state (3 entries with other keys), term 9, vote 2. */
static kl_store *make_target(char *dir, size_t cap)
{
    th_tmpdir(dir, cap);
    kl_store *st = open_store(dir);
    kl_err err;
    for (uint64_t i = 1; i <= 3; i++)
        ck_assert_int_eq(put_entry(st, i, 9, false), 0);
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    for (size_t i = 0; i < sizeof old_keys / sizeof old_keys[0]; i++) {
        char *rerr = NULL;
        rocksdb_put(kl_store_db(st), wo, old_keys[i], strlen(old_keys[i]), "x", 1, &rerr);
        ck_assert_ptr_null(rerr);
    }
    rocksdb_writeoptions_destroy(wo);
    Keyload__V1__HardState h = KEYLOAD__V1__HARD_STATE__INIT;
    h.term = 9;
    h.vote = 2;
    h.commit = 3;
    ck_assert_int_eq(kl_store_log_write(st, &h, 0, NULL, 0, &err), KL_OK);
    return st;
}

typedef struct chunks {
    uint8_t *b[64];
    size_t len[64];
    int n;
} chunks;

static void read_all(kl_store *src, chunks *c)
{
    kl_snap_reader *r;
    kl_err err;
    ck_assert_int_eq(kl_snap_reader_open(src, (const uint8_t *)"members:1,2,3", 13, &r, &err), KL_OK);
    bool last = false;
    c->n = 0;
    while (!last) {
        const uint8_t *p;
        size_t n;
        ck_assert_int_eq(kl_snap_reader_next(r, &p, &n, &last, &err), KL_OK);
        ck_assert_int_lt(c->n, 64);
        ck_assert_uint_le(n, KL_SNAP_CHUNK_MAX);
        c->b[c->n] = malloc(n);
        memcpy(c->b[c->n], p, n);
        c->len[c->n++] = n;
    }
    kl_snap_reader_close(r);
}

static void free_chunks(chunks *c)
{
    for (int i = 0; i < c->n; i++)
        free(c->b[i]);
}

/* The target holds exactly the source's state, kept its own term and vote, and its log
 * starts after the snapshot. */
static void check_installed(kl_store *dst, const uint8_t want[32], uint64_t want_count, uint64_t index)
{
    uint8_t got[32];
    uint64_t count;
    state_digest(dst, got, &count);
    ck_assert_uint_eq(count, want_count);
    ck_assert_mem_eq(got, want, 32);
    for (size_t i = 0; i < sizeof old_keys / sizeof old_keys[0]; i++)
        ck_assert_msg(!has_key(dst, old_keys[i]), "%s survived the install", old_keys[i]);
    ck_assert_uint_eq(kl_store_applied_index(dst), index);
    ck_assert_uint_eq(kl_store_first_index(dst), index + 1);
    ck_assert_uint_eq(kl_store_last_index(dst), index);
    uint64_t term, vote, commit, first, prev_term;
    kl_err err;
    ck_assert_int_eq(kl_store_load_hard(dst, &term, &vote, &commit, &err), KL_OK);
    ck_assert_uint_eq(term, 9);
    ck_assert_uint_eq(vote, 2);
    ck_assert_uint_eq(commit, index);
    uint8_t *cfg;
    size_t cfg_len;
    ck_assert_int_eq(kl_store_log_start(dst, &first, &prev_term, &cfg, &cfg_len, &err), KL_OK);
    ck_assert_uint_eq(prev_term, 4);
    ck_assert_uint_eq(cfg_len, 13);
    ck_assert_mem_eq(cfg, "members:1,2,3", 13);
    free(cfg);
}

static void check_old(kl_store *dst)
{
    for (size_t i = 0; i < sizeof old_keys / sizeof old_keys[0]; i++)
        ck_assert(has_key(dst, old_keys[i]));
    ck_assert(has_key(dst, "S00000003"));
    ck_assert(!has_key(dst, "S00000004"));
    ck_assert_uint_eq(kl_store_applied_index(dst), 3);
    ck_assert_uint_eq(kl_store_first_index(dst), 1);
}

/* The reader's key count is exact when the state lies in many SST files whose smallest keys
 * split it (on both sides of the local keys and inside them), with keys overwritten and
 * deleted across files: the count pass is cut at those keys into slices counted apart. */
START_TEST(snapshot_count_over_many_files)
{
    char dir[256];
    th_tmpdir(dir, sizeof dir);
    kl_store *st = open_store(dir);
    kl_err err;
    uint64_t durable;
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    for (int round = 0; round < 4; round++) {
        ck_assert_int_eq(put_entries(st, (uint64_t)round * 300 + 1, (uint64_t)round * 300 + 300, 4, true), 0);
        for (int i = 0; i < 50; i++) {
            char k[32];
            char *rerr = NULL;
            snprintf(k, sizeof k, "%c%04d", round % 2 ? 'Z' : 'A', round * 20 + i);
            rocksdb_put(kl_store_db(st), wo, k, strlen(k), "v", 1, &rerr);
            ck_assert_ptr_null(rerr);
            if (i % 7 == 0) { /* deleted again: in the file, not in the state */
                rocksdb_delete(kl_store_db(st), wo, k, strlen(k), &rerr);
                ck_assert_ptr_null(rerr);
            }
        }
        ck_assert_int_eq(kl_store_make_durable(st, &durable, &err), KL_OK);
    }
    rocksdb_writeoptions_destroy(wo);
    const rocksdb_livefiles_t *lf = rocksdb_livefiles(kl_store_db(st));
    ck_assert_int_ge(rocksdb_livefiles_count(lf), 4);
    rocksdb_livefiles_destroy(lf);
    uint8_t d[32];
    uint64_t want;
    state_digest(st, d, &want);
    kl_snap_reader *r;
    ck_assert_int_eq(kl_snap_reader_open(st, NULL, 0, &r, &err), KL_OK);
    uint64_t index, term, keys;
    kl_snap_reader_meta(r, &index, &term, &keys);
    ck_assert_uint_eq(keys, want);
    ck_assert_uint_eq(index, 1200);
    kl_snap_reader_close(r);
    kl_store_close(st);
    th_rmrf(dir);
}
END_TEST

START_TEST(snapshot_roundtrip)
{
    char sdir[256], ddir[256];
    /* ~3 MiB: several chunks; the whole log compacted, so the term comes from log_start */
    kl_store *src = make_source(sdir, sizeof sdir, 3000, 3001);
    kl_store *dst = make_target(ddir, sizeof ddir);
    uint8_t want[32];
    uint64_t want_count;
    state_digest(src, want, &want_count);
    ck_assert_uint_eq(want_count, 3001); /* 3000 "S" keys + "next_queue" */
    chunks c;
    read_all(src, &c);
    ck_assert_int_ge(c.n, 4); /* header + at least 3 data chunks */
    uint8_t inc[16];
    memcpy(inc, kl_store_incarnation(dst), 16);
    kl_snap_install *in;
    kl_err err;
    ck_assert_int_eq(kl_snap_install_open(dst, &in, &err), KL_OK);
    bool done = false;
    for (int i = 0; i < c.n; i++) {
        ck_assert(!done);
        ck_assert_int_eq(kl_snap_install_chunk(in, c.b[i], c.len[i], &done, &err), KL_OK);
        if (i + 1 < c.n)
            check_old(dst); /* staged, not live */
    }
    ck_assert(done);
    ck_assert_int_eq(kl_snap_install_commit(in, &err), KL_OK);
    kl_snap_install_close(in);
    check_installed(dst, want, want_count, 3000);
    kl_store_close(dst);
    dst = open_store(ddir);
    check_installed(dst, want, want_count, 3000);
    ck_assert_mem_eq(kl_store_incarnation(dst), inc, 16); /* identity record kept */
    ck_assert_int_eq(put_entry(dst, 3001, 10, false), 0); /* the log continues */
    kl_store_close(dst);
    kl_store_close(src);
    free_chunks(&c);
    th_rmrf(sdir);
    th_rmrf(ddir);
}
END_TEST

START_TEST(snapshot_resumes_after_cut_and_restart)
{
    char sdir[256], ddir[256];
    kl_store *src = make_source(sdir, sizeof sdir, 6000, 0); /* 6 data chunks */
    kl_store *dst = make_target(ddir, sizeof ddir);
    uint8_t want[32];
    uint64_t want_count;
    state_digest(src, want, &want_count);
    kl_snap_install *in;
    kl_err err;
    ck_assert_int_eq(kl_snap_install_open(dst, &in, &err), KL_OK);
    kl_snap_install_debug_file_bytes(in, 1); /* a resume point after every chunk */
    kl_snap_reader *r;
    ck_assert_int_eq(kl_snap_reader_open(src, (const uint8_t *)"members:1,2,3", 13, &r, &err), KL_OK);
    const uint8_t *p;
    size_t n;
    bool last, done;
    for (int i = 0; i < 3; i++) { /* header and two data chunks, then the cut */
        ck_assert_int_eq(kl_snap_reader_next(r, &p, &n, &last, &err), KL_OK);
        ck_assert_int_eq(kl_snap_install_chunk(in, p, n, &done, &err), KL_OK);
    }
    ck_assert_int_eq(kl_snap_reader_next(r, &p, &n, &last, &err), KL_OK); /* lost on the way */
    ck_assert_int_eq(kl_snap_reader_next(r, &p, &n, &last, &err), KL_OK);
    ck_assert_int_eq(kl_snap_install_chunk(in, p, n, &done, &err), KL_FAILED_PRECONDITION);
    ck_assert_msg(strcmp(err.detail, "snapshot_resume") == 0, "%s: %s", err.detail, err.message);
    kl_snap_reader_close(r);
    kl_snap_install_close(in); /* the receiver restarts */
    ck_assert_int_eq(kl_snap_install_open(dst, &in, &err), KL_OK);
    bool staged;
    uint64_t index, term;
    kl_snap_pos pos;
    kl_snap_install_pos(in, &staged, &index, &term, &pos);
    ck_assert(staged);
    ck_assert_uint_eq(index, 6000);
    ck_assert_uint_eq(term, 4);
    ck_assert_uint_eq(pos.seq, 3);
    ck_assert_uint_gt(pos.keys, 0);
    ck_assert_int_eq(kl_snap_reader_open(src, (const uint8_t *)"members:1,2,3", 13, &r, &err), KL_OK);
    kl_snap_reader_seek(r, &pos); /* a new sender process resumes where the receiver is */
    for (done = false; !done;) {
        ck_assert_int_eq(kl_snap_reader_next(r, &p, &n, &last, &err), KL_OK);
        ck_assert_uint_gt(n, 0);
        ck_assert_int_eq(kl_snap_install_chunk(in, p, n, &done, &err), KL_OK);
        ck_assert_int_eq(done, last);
    }
    kl_snap_reader_close(r);
    check_old(dst);
    ck_assert_int_eq(kl_snap_install_commit(in, &err), KL_OK);
    kl_snap_install_close(in);
    check_installed(dst, want, want_count, 6000);
    kl_store_close(dst);
    kl_store_close(src);
    th_rmrf(sdir);
    th_rmrf(ddir);
}
END_TEST

/* A cut without a restart: the receiver's position includes records still in its open
 * staged file, and a new sender resumes from it. */
START_TEST(snapshot_resumes_after_cut_in_process)
{
    char sdir[256], ddir[256];
    kl_store *src = make_source(sdir, sizeof sdir, 4000, 0);
    kl_store *dst = make_target(ddir, sizeof ddir);
    uint8_t want[32];
    uint64_t want_count;
    state_digest(src, want, &want_count);
    chunks c;
    read_all(src, &c);
    ck_assert_int_ge(c.n, 5);
    kl_snap_install *in;
    kl_err err;
    bool done;
    ck_assert_int_eq(kl_snap_install_open(dst, &in, &err), KL_OK);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(kl_snap_install_chunk(in, c.b[i], c.len[i], &done, &err), KL_OK);
    ck_assert_int_eq(kl_snap_install_chunk(in, c.b[4], c.len[4], &done, &err), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(err.detail, "snapshot_resume");
    ck_assert_int_eq(kl_snap_install_chunk(in, c.b[1], c.len[1], &done, &err), KL_FAILED_PRECONDITION);
    bool staged;
    uint64_t index, term;
    kl_snap_pos pos;
    kl_snap_install_pos(in, &staged, &index, &term, &pos);
    ck_assert(staged);
    ck_assert_uint_eq(pos.seq, 3);
    kl_snap_reader *r;
    ck_assert_int_eq(kl_snap_reader_open(src, (const uint8_t *)"members:1,2,3", 13, &r, &err), KL_OK);
    kl_snap_reader_seek(r, &pos);
    for (done = false; !done;) {
        const uint8_t *p;
        size_t n;
        bool last;
        ck_assert_int_eq(kl_snap_reader_next(r, &p, &n, &last, &err), KL_OK);
        ck_assert_int_eq(kl_snap_install_chunk(in, p, n, &done, &err), KL_OK);
    }
    kl_snap_reader_close(r);
    ck_assert_int_eq(kl_snap_install_commit(in, &err), KL_OK);
    kl_snap_install_close(in);
    check_installed(dst, want, want_count, 4000);
    kl_store_close(dst);
    kl_store_close(src);
    free_chunks(&c);
    th_rmrf(sdir);
    th_rmrf(ddir);
}
END_TEST

START_TEST(snapshot_corrupt_chunk_refused)
{
    char sdir[256], ddir[256];
    kl_store *src = make_source(sdir, sizeof sdir, 1500, 0);
    kl_store *dst = make_target(ddir, sizeof ddir);
    chunks c;
    read_all(src, &c);
    ck_assert_int_ge(c.n, 3);
    kl_snap_install *in;
    kl_err err;
    bool done;
    ck_assert_int_eq(kl_snap_install_open(dst, &in, &err), KL_OK);
    ck_assert_int_eq(kl_snap_install_chunk(in, c.b[0], c.len[0], &done, &err), KL_OK);
    /* A flipped bit in a value: refused on arrival, nothing of the chunk staged. */
    c.b[1][c.len[1] / 2] ^= 0x10;
    ck_assert_int_eq(kl_snap_install_chunk(in, c.b[1], c.len[1], &done, &err), KL_UNAVAILABLE);
    ck_assert_str_eq(err.detail, "snapshot_digest");
    ck_assert_int_eq(kl_snap_install_commit(in, &err), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(err.detail, "snapshot_incomplete");
    check_old(dst);
    c.b[1][c.len[1] / 2] ^= 0x10; /* resent intact: the stream goes on */
    for (int i = 1; i < c.n; i++)
        ck_assert_int_eq(kl_snap_install_chunk(in, c.b[i], c.len[i], &done, &err), KL_OK);
    ck_assert(done);
    /* A damaged last digest (the whole stream's) is refused too. */
    kl_snap_install_discard(in);
    ck_assert_int_eq(kl_snap_install_chunk(in, c.b[0], c.len[0], &done, &err), KL_OK);
    for (int i = 1; i + 1 < c.n; i++)
        ck_assert_int_eq(kl_snap_install_chunk(in, c.b[i], c.len[i], &done, &err), KL_OK);
    c.b[c.n - 1][c.len[c.n - 1] - 1] ^= 1;
    ck_assert_int_eq(kl_snap_install_chunk(in, c.b[c.n - 1], c.len[c.n - 1], &done, &err), KL_UNAVAILABLE);
    ck_assert(!done);
    kl_snap_install_close(in);
    check_old(dst);
    kl_store_close(dst);
    dst = open_store(ddir);
    check_old(dst);
    kl_store_close(dst);
    kl_store_close(src);
    free_chunks(&c);
    th_rmrf(sdir);
    th_rmrf(ddir);
}
END_TEST

/* An install that fails after its marker (the ingestion's error, by failpoint) leaves a
 * store that takes no write; the next open finishes the install. */
START_TEST(snapshot_install_error_stops_writes)
{
    char sdir[256], ddir[256];
    kl_store *src = make_source(sdir, sizeof sdir, 1500, 0);
    kl_store *dst = make_target(ddir, sizeof ddir);
    uint8_t want[32];
    uint64_t want_count;
    state_digest(src, want, &want_count);
    chunks c;
    read_all(src, &c);
    kl_snap_install *in;
    kl_err err;
    bool done = false;
    ck_assert_int_eq(kl_snap_install_open(dst, &in, &err), KL_OK);
    for (int i = 0; i < c.n; i++)
        ck_assert_int_eq(kl_snap_install_chunk(in, c.b[i], c.len[i], &done, &err), KL_OK);
    ck_assert(done);
    ck_assert_int_eq(kl_failpoint_configure("store.install_ingested=error(INTERNAL)", &err), KL_OK);
    ck_assert_int_eq(kl_snap_install_commit(in, &err), KL_INTERNAL);
    ck_assert_int_eq(kl_failpoint_configure("", &err), KL_OK);
    kl_snap_install_close(in);
    uint8_t buf[2048];
    size_t n = pack_entry(buf, 4, 9, false);
    ck_assert_int_eq(kl_store_append(dst, 4, buf, n, &err), KL_INTERNAL);
    kl_store_close(dst);
    dst = open_store(ddir);
    check_installed(dst, want, want_count, 1500);
    kl_store_close(dst);
    kl_store_close(src);
    free_chunks(&c);
    th_rmrf(sdir);
    th_rmrf(ddir);
}
END_TEST

/* The digest of a whole file, and its link count; false when it cannot be read. */
static bool file_digest(const char *path, uint8_t out[32], nlink_t *links)
{
    struct stat sb;
    FILE *f = fopen(path, "rb");
    if (f == NULL || fstat(fileno(f), &sb) != 0) {
        if (f != NULL)
            fclose(f);
        return false;
    }
    *links = sb.st_nlink;
    crypto_generichash_state h;
    crypto_generichash_init(&h, NULL, 0, 32);
    uint8_t buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        crypto_generichash_update(&h, buf, n);
    fclose(f);
    crypto_generichash_final(&h, out, 32);
    return true;
}

/* The install links the staged files of keys below and above the local range into the store
 * and copies the marked ones (replicated 'M' records) without changing any staged original:
 * after the ingestion (cut there by failpoint) every staged file is byte-identical to what
 * was staged, the linked ones are shared with the store (a second link), and the next open
 * finishes the install from them. */
START_TEST(snapshot_install_links_without_changing_staged_files)
{
    char sdir[256], ddir[256];
    kl_store *src = make_source(sdir, sizeof sdir, 1500, 0);
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    static const char *const extra[] = {"Ab", "Mcv", "Mi", "Zy"}; /* none of old_keys */
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
        char *rerr = NULL;
        rocksdb_put(kl_store_db(src), wo, extra[i], strlen(extra[i]), "v", 1, &rerr);
        ck_assert_ptr_null(rerr);
    }
    rocksdb_writeoptions_destroy(wo);
    kl_store *dst = make_target(ddir, sizeof ddir);
    uint8_t want[32];
    uint64_t want_count;
    state_digest(src, want, &want_count);
    chunks c;
    read_all(src, &c);
    kl_snap_install *in;
    kl_err err;
    bool done = false;
    ck_assert_int_eq(kl_snap_install_open(dst, &in, &err), KL_OK);
    kl_snap_install_debug_file_bytes(in, 1 << 20); /* several staged files */
    for (int i = 0; i < c.n; i++)
        ck_assert_int_eq(kl_snap_install_chunk(in, c.b[i], c.len[i], &done, &err), KL_OK);
    ck_assert(done);
    enum { MAXF = 64 };
    uint8_t before[MAXF][32];
    bool copied[MAXF];
    int nfiles = 0, ncopy = 0;
    for (; nfiles < MAXF; nfiles++) {
        char path[600];
        nlink_t links;
        snprintf(path, sizeof path, "%s/install/%06d.sst", ddir, nfiles);
        if (!file_digest(path, before[nfiles], &links))
            break;
        ck_assert_uint_eq(links, 1);
        snprintf(path, sizeof path, "%s/install/%06d%s", ddir, nfiles, KL_STORE_INSTALL_COPY_SUFFIX);
        copied[nfiles] = access(path, F_OK) == 0;
        ncopy += copied[nfiles];
    }
    ck_assert_int_ge(nfiles, 3);
    ck_assert_int_eq(ncopy, 1); /* "Mcv" .. "Mnext_queue" in a file of their own */
    ck_assert_int_eq(kl_failpoint_configure("store.install_ingested=error(INTERNAL)", &err), KL_OK);
    ck_assert_int_eq(kl_snap_install_commit(in, &err), KL_INTERNAL);
    ck_assert_int_eq(kl_failpoint_configure("", &err), KL_OK);
    kl_snap_install_close(in);
    for (int i = 0; i < nfiles; i++) {
        char path[600];
        uint8_t after[32];
        nlink_t links;
        snprintf(path, sizeof path, "%s/install/%06d.sst", ddir, i);
        ck_assert(file_digest(path, after, &links));
        ck_assert_mem_eq(after, before[i], 32);
        ck_assert_msg(copied[i] ? links == 1 : links == 2, "staged file %d: %u links", i, (unsigned)links);
    }
    kl_store_close(dst);
    dst = open_store(ddir);
    check_installed(dst, want, want_count, 1500);
    char path[600];
    snprintf(path, sizeof path, "%s/install/%06d.sst", ddir, 0);
    ck_assert_int_ne(access(path, F_OK), 0); /* the staging is gone */
    kl_store_close(dst);
    dst = open_store(ddir);
    check_installed(dst, want, want_count, 1500);
    kl_store_close(dst);
    kl_store_close(src);
    free_chunks(&c);
    th_rmrf(sdir);
    th_rmrf(ddir);
}
END_TEST

/* Builds a chunk as a sender would (the format of snapshot.h), digest included. */
static size_t forge_chunk(uint8_t *out, const uint8_t prev[32], uint64_t index, uint64_t seq, uint32_t flags,
                          const uint8_t *body, size_t body_len)
{
    memcpy(out, "KLSC", 4);
    out[4] = out[5] = out[6] = 0;
    out[7] = KL_SNAP_VERSION;
    kl_be64_put(out + 8, index);
    kl_be64_put(out + 16, 4);
    kl_be64_put(out + 24, seq);
    memset(out + 32, 0, 8);
    out[35] = (uint8_t)flags;
    out[40] = (uint8_t)(body_len >> 24);
    out[41] = (uint8_t)(body_len >> 16);
    out[42] = (uint8_t)(body_len >> 8);
    out[43] = (uint8_t)body_len;
    memcpy(out + 44, body, body_len);
    size_t n = 44 + body_len;
    crypto_generichash_state h;
    crypto_generichash_init(&h, NULL, 0, 32);
    crypto_generichash_update(&h, prev, 32);
    crypto_generichash_update(&h, out, n);
    crypto_generichash_final(&h, out + n, 32);
    return n + 32;
}

START_TEST(snapshot_refuses_local_keys_and_bad_count)
{
    char ddir[256];
    kl_store *dst = make_target(ddir, sizeof ddir);
    kl_snap_install *in;
    kl_err err;
    bool done;
    ck_assert_int_eq(kl_snap_install_open(dst, &in, &err), KL_OK);
    uint8_t zero[32] = {0}, hdr[256], data[256], body[64];
    kl_be64_put(body, 1); /* key_count 1, no config */
    memset(body + 8, 0, 4);
    size_t hn = forge_chunk(hdr, zero, 50, 0, 0, body, 12);
    ck_assert_int_eq(kl_snap_install_chunk(in, hdr, hn, &done, &err), KL_OK);
    /* A record that would overwrite the receiver's vote: its digest is right, it is refused. */
    uint8_t rec[] = {0, 0, 0, 5, 'M', 'h', 'a', 'r', 'd', 0, 0, 0, 1, 'x'};
    size_t dn = forge_chunk(data, hdr + hn - 32, 50, 1, KL_SNAP_FLAG_LAST, rec, sizeof rec);
    ck_assert_int_eq(kl_snap_install_chunk(in, data, dn, &done, &err), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(err.detail, "snapshot_corrupt");
    bool staged;
    uint64_t index, term;
    kl_snap_pos pos;
    kl_snap_install_pos(in, &staged, &index, &term, &pos);
    ck_assert(!staged); /* discarded */
    /* Fewer records than the header promised. */
    kl_be64_put(body, 2);
    hn = forge_chunk(hdr, zero, 50, 0, 0, body, 12);
    ck_assert_int_eq(kl_snap_install_chunk(in, hdr, hn, &done, &err), KL_OK);
    uint8_t ok[] = {0, 0, 0, 2, 'S', 'x', 0, 0, 0, 1, 'y'};
    dn = forge_chunk(data, hdr + hn - 32, 50, 1, KL_SNAP_FLAG_LAST, ok, sizeof ok);
    ck_assert_int_eq(kl_snap_install_chunk(in, data, dn, &done, &err), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(err.detail, "snapshot_corrupt");
    ck_assert(!done);
    /* A snapshot not past the applied index. */
    hn = forge_chunk(hdr, zero, 3, 0, 0, body, 12);
    ck_assert_int_eq(kl_snap_install_chunk(in, hdr, hn, &done, &err), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(err.detail, "snapshot_stale");
    kl_snap_install_close(in);
    check_old(dst);
    uint64_t hterm, vote, commit;
    ck_assert_int_eq(kl_store_load_hard(dst, &hterm, &vote, &commit, &err), KL_OK);
    ck_assert_uint_eq(hterm, 9);
    kl_store_close(dst);
    th_rmrf(ddir);
}
END_TEST

/* The crash children open RocksDB only after the fork: RocksDB's background threads
 * belong to a process-wide Env that a fork does not copy, so a child of a process that
 * had a store open would wait for ever on its first flush. */

/* Child: builds the source and spools its chunks and state digest into files. */
static void spool_source(const char *dir, const char *spool)
{
    char sdir[256];
    kl_store *src = make_source(sdir, sizeof sdir, 3000, 0);
    uint8_t want[32];
    uint64_t count;
    state_digest(src, want, &count);
    chunks c;
    read_all(src, &c);
    kl_store_close(src);
    FILE *f = fopen(spool, "w");
    if (f == NULL)
        _exit(1);
    fwrite(want, 1, 32, f);
    fwrite(&count, sizeof count, 1, f);
    fwrite(&c.n, sizeof c.n, 1, f);
    for (int i = 0; i < c.n; i++) {
        fwrite(&c.len[i], sizeof c.len[i], 1, f);
        fwrite(c.b[i], 1, c.len[i], f);
    }
    fclose(f);
    free_chunks(&c);
    th_rmrf(sdir);
    (void)dir;
    _exit(77);
}

static void load_spool(const char *spool, uint8_t want[32], uint64_t *count, chunks *c)
{
    FILE *f = fopen(spool, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fread(want, 1, 32, f), 32);
    ck_assert_uint_eq(fread(count, sizeof *count, 1, f), 1);
    ck_assert_uint_eq(fread(&c->n, sizeof c->n, 1, f), 1);
    ck_assert(c->n > 0 && c->n <= 64);
    for (int i = 0; i < c->n; i++) {
        ck_assert_uint_eq(fread(&c->len[i], sizeof c->len[i], 1, f), 1);
        c->b[i] = malloc(c->len[i]);
        ck_assert_uint_eq(fread(c->b[i], 1, c->len[i], f), c->len[i]);
    }
    fclose(f);
}

/* Child: makes the target in dir, stages the whole snapshot and dies at `cut` (a failpoint
 * spec, or NULL: SIGKILL once staged, before the commit). */
static void install_then_die(const char *dir, const chunks *c, const char *cut)
{
    kl_err err;
    if (cut != NULL && kl_failpoint_configure(cut, &err) != KL_OK)
        _exit(1);
    char tmp[256];
    kl_store *st = make_target(tmp, sizeof tmp);
    kl_store_close(st);
    if (rename(tmp, dir) != 0)
        _exit(2);
    if (kl_store_open(dir, NULL, &st, &err) != KL_OK)
        _exit(2);
    kl_snap_install *in;
    if (kl_snap_install_open(st, &in, &err) != KL_OK)
        _exit(3);
    kl_snap_install_debug_file_bytes(in, 1 << 20); /* several staged files */
    bool done = false;
    for (int i = 0; i < c->n; i++)
        if (kl_snap_install_chunk(in, c->b[i], c->len[i], &done, &err) != KL_OK)
            _exit(4);
    if (!done)
        _exit(5);
    if (cut == NULL)
        kill(getpid(), SIGKILL);
    kl_snap_install_commit(in, &err); /* the failpoint exits in here */
    _exit(6);
}

static const char *const install_cuts[] = {
    NULL,
    "store.install_begun=exit",
    "store.install_ingested=exit",
    "store.install_finished=exit",
};

START_TEST(snapshot_install_crash_points)
{
    const char *cut = install_cuts[_i];
    char work[256], spool[300], ddir[300];
    th_tmpdir(work, sizeof work);
    snprintf(spool, sizeof spool, "%s/spool", work);
    snprintf(ddir, sizeof ddir, "%s/member", work);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        spool_source(work, spool);
    wait_child(pid, false);
    uint8_t want[32];
    uint64_t want_count;
    chunks c;
    load_spool(spool, want, &want_count, &c);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        install_then_die(ddir, &c, cut);
    wait_child(pid, cut == NULL);
    kl_store *dst = open_store(ddir);
    kl_err err;
    if (cut == NULL) { /* died before anything live changed: the old state, and the staging */
        check_old(dst);
        kl_snap_install *in;
        ck_assert_int_eq(kl_snap_install_open(dst, &in, &err), KL_OK);
        ck_assert_int_eq(kl_snap_install_commit(in, &err), KL_OK);
        kl_snap_install_close(in);
    }
    check_installed(dst, want, want_count, 3000);
    kl_store_close(dst);
    dst = open_store(ddir);
    check_installed(dst, want, want_count, 3000);
    kl_snap_install *in;
    ck_assert_int_eq(kl_snap_install_open(dst, &in, &err), KL_OK); /* nothing left staged */
    bool staged;
    uint64_t index, term;
    kl_snap_pos pos;
    kl_snap_install_pos(in, &staged, &index, &term, &pos);
    ck_assert(!staged);
    kl_snap_install_close(in);
    kl_store_close(dst);
    free_chunks(&c);
    th_rmrf(work);
}
END_TEST

Suite *suite_snapshot(void)
{
    Suite *s = suite_create("snapshot");
    TCase *t = tcase_create("compaction");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, compaction_refused_above_durable);
    tcase_add_test(t, compaction_drops_log_files_whole);
    tcase_add_test(t, flush_off_thread_notes_index_read_before);
    tcase_add_test(t, compaction_survives_kill9);
    tcase_add_test(t, open_refuses_log_past_state);
    suite_add_tcase(s, t);
    t = tcase_create("stream");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, snapshot_roundtrip);
    tcase_add_test(t, snapshot_count_over_many_files);
    tcase_add_test(t, snapshot_resumes_after_cut_and_restart);
    tcase_add_test(t, snapshot_resumes_after_cut_in_process);
    tcase_add_test(t, snapshot_corrupt_chunk_refused);
    tcase_add_test(t, snapshot_refuses_local_keys_and_bad_count);
    tcase_add_test(t, snapshot_install_error_stops_writes);
    tcase_add_test(t, snapshot_install_links_without_changing_staged_files);
    suite_add_tcase(s, t);
    t = tcase_create("install_crash");
    tcase_set_timeout(t, 120);
    tcase_add_loop_test(t, snapshot_install_crash_points, 0, 4);
    suite_add_tcase(s, t);
    return s;
}
