/* Key layout and the store's format/feature-flag checks, against a real RocksDB. */
#include "daemon/store/keys.h"
#include "common/failpoint.h"
#include "daemon/engine/view.h"
#include "daemon/store/store.h"
#include "daemon/store/last_write.h"
#include "harness.h"

#include <rocksdb/c.h>

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int kcmp(const kl_key *a, const kl_key *b)
{
    size_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->b, b->b, n);
    return c ? c : (a->len < b->len ? -1 : a->len > b->len);
}

START_TEST(key_order_matches_numeric_order)
{
    kl_key a, b;
    kl_key_log(&a, 255);
    kl_key_log(&b, 256);
    ck_assert_int_lt(kcmp(&a, &b), 0);
    kl_key_available(&a, 1, "default", 9);
    kl_key_available(&b, 1, "default", 10);
    ck_assert_int_lt(kcmp(&a, &b), 0);
    /* Lanes do not interleave: every key of lane "a" sorts before lane "ab". */
    kl_key_available(&a, 1, "a", UINT64_MAX);
    kl_key_available(&b, 1, "ab", 0);
    ck_assert_int_lt(kcmp(&a, &b), 0);
    kl_key_timed(&a, 1, 1000, 99);
    kl_key_timed(&b, 1, 1001, 1);
    ck_assert_int_lt(kcmp(&a, &b), 0);
    uint64_t q, s;
    int64_t t;
    ck_assert_int_eq(kl_key_parse_timed(a.b, a.len, &q, &t, &s), 0);
    ck_assert_uint_eq(q, 1);
    ck_assert_int_eq(t, 1000);
    ck_assert_uint_eq(s, 99);
    kl_key_available(&a, 7, "lane", 42);
    ck_assert_int_eq(kl_key_parse_available(a.b, a.len, &q, &s), 0);
    ck_assert_uint_eq(q, 7);
    ck_assert_uint_eq(s, 42);
    /* Prefixes really are prefixes. */
    kl_key p;
    kl_key_available_lane(&p, 7, "lane");
    ck_assert_mem_eq(p.b, a.b, p.len);
    kl_key_timed_queue(&p, 1);
    ck_assert_mem_eq(p.b, b.b, p.len);
    /* Queue names: tenant/database boundaries cannot be confused. */
    kl_key_queue_name(&a, "ab", "c", "q");
    kl_key_queue_name(&b, "a", "bc", "q");
    ck_assert_int_ne(kcmp(&a, &b), 0);
}
END_TEST

START_TEST(store_append_apply_reopen)
{
    char dir[256];
    th_tmpdir(dir, sizeof dir);
    kl_store *st;
    kl_err err;
    ck_assert_int_eq(kl_store_open(dir, NULL, &st, &err), KL_OK);
    uint8_t inc[16];
    memcpy(inc, kl_store_incarnation(st), 16);
    ck_assert_uint_eq(kl_store_last_index(st), 0);
    ck_assert_int_eq(kl_store_append(st, 2, (const uint8_t *)"x", 1, &err), KL_INTERNAL); /* gap */
    Keyload__V1__LogEntry e = KEYLOAD__V1__LOG_ENTRY__INIT;
    e.index = 1;
    uint8_t buf[64];
    size_t n = keyload__v1__log_entry__pack(&e, buf);
    ck_assert_int_eq(kl_store_append(st, 1, buf, n, &err), KL_OK);
    ck_assert_int_eq(kl_store_apply(st, &e, &err), KL_OK);
    ck_assert_int_eq(kl_store_apply(st, &e, &err), KL_INTERNAL); /* twice */
    kl_store_close(st);
    ck_assert_int_eq(kl_store_open(dir, NULL, &st, &err), KL_OK);
    ck_assert_mem_eq(kl_store_incarnation(st), inc, 16); /* incarnation survives reopen */
    ck_assert_uint_eq(kl_store_last_index(st), 1);
    ck_assert_uint_eq(kl_store_applied_index(st), 1);
    kl_store_close(st);
    th_rmrf(dir);
}
END_TEST

START_TEST(store_refuses_unknown_flags)
{
    char dir[256];
    th_tmpdir(dir, sizeof dir);
    kl_store *st;
    kl_err err;
    /* Unknown compat bits are fine. */
    ck_assert_int_eq(kl_store_debug_set_flags(dir, 1ull << 40, 0, KL_FEAT_INCOMPAT_KNOWN, 1, &err), KL_OK);
    ck_assert_int_eq(kl_store_open(dir, NULL, &st, &err), KL_OK);
    kl_store_close(st);
    /* Unknown ro_compat bits refuse a writable open. */
    ck_assert_int_eq(kl_store_debug_set_flags(dir, 0, 1ull << 3, KL_FEAT_INCOMPAT_KNOWN, 1, &err), KL_OK);
    ck_assert_int_eq(kl_store_open(dir, NULL, &st, &err), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(err.detail, "feature_ro_compat");
    ck_assert_ptr_nonnull(strstr(err.message, "0x8"));
    th_rmrf(dir);

    th_tmpdir(dir, sizeof dir);
    ck_assert_int_eq(kl_store_debug_set_flags(dir, 0, 0, KL_FEAT_INCOMPAT_KNOWN | (1ull << 9), 1, &err), KL_OK);
    ck_assert_int_eq(kl_store_open(dir, NULL, &st, &err), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(err.detail, "feature_incompat");
    ck_assert_ptr_nonnull(strstr(err.message, "0x200"));
    th_rmrf(dir);

    th_tmpdir(dir, sizeof dir);
    ck_assert_int_eq(kl_store_debug_set_flags(dir, 0, 0, KL_FEAT_INCOMPAT_KNOWN, 2, &err), KL_OK);
    ck_assert_int_eq(kl_store_open(dir, NULL, &st, &err), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(err.detail, "format_version");
    th_rmrf(dir);
}
END_TEST

/* A store last opened by a binary that wrote BLAKE2b journal segments gets
 * KL_FEAT_INCOMPAT_JOURNAL_CRC32C at its next open, before the journal writes a segment of
 * the newer format: from then on such a binary refuses it rather than delete the segments.
 * The records it journaled replay across the upgrade. */
START_TEST(store_upgrade_records_the_journal_check)
{
    char dir[256];
    th_tmpdir(dir, sizeof dir);
    kl_store *st;
    kl_err err;
    ck_assert_int_eq(kl_store_debug_set_flags(dir, KL_FEAT_COMPAT_KNOWN, 0,
                                              KL_FEAT_INCOMPAT_KNOWN & ~KL_FEAT_INCOMPAT_JOURNAL_CRC32C, 1, &err),
                     KL_OK);
    ck_assert_int_eq(kl_store_open(dir, NULL, &st, &err), KL_OK);
    kl_key k;
    kl_key_meta(&k, "format");
    uint8_t *v;
    size_t n;
    bool found;
    ck_assert_int_eq(kl_store_get(st, k.b, k.len, &v, &n, &found, &err), KL_OK);
    ck_assert(found);
    Keyload__V1__FormatRecord *f = keyload__v1__format_record__unpack(NULL, n, v);
    free(v);
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(f->incompat & KL_FEAT_INCOMPAT_JOURNAL_CRC32C, KL_FEAT_INCOMPAT_JOURNAL_CRC32C);
    keyload__v1__format_record__free_unpacked(f, NULL);
    kl_store_close(st);
    th_rmrf(dir);
}
END_TEST

/* ---- store identity and WAL recovery ---- */

static const uint8_t id_a[16] = {1, 2, 3};

static kl_code open_as(const char *dir, bool init, const char *cluster, uint32_t part, uint64_t member,
                       kl_store **st, kl_err *err)
{
    kl_store_identity id = {.cluster = cluster, .cluster_id = id_a, .partition = part, .member = member};
    kl_store_options o;
    kl_store_options_default(&o);
    o.init = init;
    o.identity = &id;
    return kl_store_open(dir, &o, st, err);
}

START_TEST(store_identity_is_checked)
{
    char dir[256], sub[300];
    th_tmpdir(dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/data", dir);
    kl_store *st;
    kl_err err;
    /* No store and no init: refused, and nothing is created. */
    ck_assert_int_eq(open_as(sub, false, "c1", 1, 2, &st, &err), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(err.detail, "init_store");
    ck_assert_ptr_nonnull(strstr(err.message, "--init-store"));
    ck_assert_int_ne(access(sub, F_OK), 0);
    ck_assert_int_eq(open_as(sub, true, "c1", 1, 2, &st, &err), KL_OK);
    kl_store_close(st);
    /* Reopened without init: it is this member's. With init again: harmless. */
    ck_assert_int_eq(open_as(sub, false, "c1", 1, 2, &st, &err), KL_OK);
    kl_store_close(st);
    ck_assert_int_eq(open_as(sub, true, "c1", 1, 2, &st, &err), KL_OK);
    kl_store_close(st);
    /* Another partition, member or cluster: refused naming both, also with init. */
    ck_assert_int_eq(open_as(sub, true, "c1", 2, 2, &st, &err), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(err.detail, "store_identity");
    ck_assert_ptr_nonnull(strstr(err.message, "partition 1 member 2"));
    ck_assert_ptr_nonnull(strstr(err.message, "partition 2 member 2"));
    ck_assert_ptr_nonnull(strstr(err.message, sub));
    ck_assert_int_eq(open_as(sub, false, "c1", 1, 3, &st, &err), KL_FAILED_PRECONDITION);
    ck_assert_int_eq(open_as(sub, false, "c2", 1, 2, &st, &err), KL_FAILED_PRECONDITION);
    ck_assert_ptr_nonnull(strstr(err.message, "(cluster 'c2'"));
    /* A store made before identities (no identity in its format record) adopts this one. */
    th_rmrf(dir);
    th_tmpdir(dir, sizeof dir);
    ck_assert_int_eq(kl_store_open(dir, NULL, &st, &err), KL_OK);
    kl_store_close(st);
    ck_assert_int_eq(open_as(dir, false, "c1", 1, 2, &st, &err), KL_OK);
    kl_store_close(st);
    ck_assert_int_eq(open_as(dir, false, "c1", 0, 2, &st, &err), KL_FAILED_PRECONDITION);
    th_rmrf(dir);
}
END_TEST

/* After a failed log write every later write is refused, and the refusal's reader (an apply
 * racing the persist worker) can name the first failure as the cause. */
START_TEST(store_first_failure_is_kept)
{
    char dir[256];
    th_tmpdir(dir, sizeof dir);
    kl_store *st;
    kl_err err;
    ck_assert_int_eq(kl_store_open(dir, NULL, &st, &err), KL_OK);
    kl_err first;
    ck_assert(!kl_store_first_failure(st, &first));
    uint8_t body[16] = {0};
    kl_store_log_item it = {.index = 1, .bytes = body, .len = sizeof body};
    ck_assert_int_eq(kl_failpoint_configure("store.log_write=error(UNAVAILABLE)", &err), KL_OK);
    ck_assert_int_eq(kl_store_log_write(st, NULL, 0, &it, 1, &err), KL_INTERNAL);
    ck_assert_int_eq(kl_failpoint_configure(NULL, &err), KL_OK);
    ck_assert(kl_store_first_failure(st, &first));
    ck_assert_ptr_nonnull(strstr(first.message, "failpoint store.log_write"));
    /* Nothing is written after it: neither the log nor an apply. */
    ck_assert_int_eq(kl_store_log_write(st, NULL, 0, &it, 1, &err), KL_INTERNAL);
    Keyload__V1__LogEntry e = KEYLOAD__V1__LOG_ENTRY__INIT;
    e.index = 1;
    ck_assert_int_eq(kl_store_apply(st, &e, &err), KL_INTERNAL);
    ck_assert(kl_store_first_failure(st, &first));
    ck_assert_ptr_nonnull(strstr(first.message, "failpoint store.log_write")); /* still the first */
    ck_assert_uint_eq(kl_store_last_index(st), 0);
    kl_store_close(st);
    th_rmrf(dir);
}
END_TEST

/* A store with entries 1..n synced, copied while open: the image a power loss right after
 * the last sync leaves (nothing flushed, every entry only in the journal). Gives the path
 * of the journal segment holding them. */
static void crash_image(const char *dir, const char *image, int n, char *seg, size_t cap)
{
    kl_store *st;
    kl_err err;
    ck_assert_int_eq(kl_store_open(dir, NULL, &st, &err), KL_OK);
    uint8_t body[600];
    for (int i = 1; i <= n; i++) {
        memset(body, 'a' + i % 26, sizeof body);
        kl_store_log_item it = {.index = (uint64_t)i, .bytes = body, .len = sizeof body};
        ck_assert_int_eq(kl_store_log_write(st, NULL, 0, &it, 1, &err), KL_OK);
    }
    char cmd[700];
    snprintf(cmd, sizeof cmd, "cp -a '%s' '%s' && ls '%s'/journal/*.seg | tail -n 1", dir, image, image);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_nonnull(fgets(seg, (int)cap, p));
    pclose(p);
    seg[strcspn(seg, "\n")] = '\0';
    kl_store_close(st);
}

START_TEST(store_journal_corruption_refuses)
{
    char dir[256], image[300], seg[512];
    th_tmpdir(dir, sizeof dir);
    snprintf(image, sizeof image, "%s-image", dir);
    crash_image(dir, image, 20, seg, sizeof seg);
    long end = th_file_data_end(seg);
    ck_assert_int_gt(end, 20 * 600);
    /* One flipped byte in the middle of the records: a synced one no longer reads. */
    th_file_flip(seg, end / 2);
    kl_store *st;
    kl_err err;
    ck_assert_int_eq(kl_store_open(image, NULL, &st, &err), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(err.detail, "journal_corrupt");
    ck_assert_ptr_nonnull(strstr(err.message, image));
    ck_assert_ptr_nonnull(strstr(err.message, "Recovering a member"));
    th_rmrf(image);
    th_rmrf(dir);
}
END_TEST

START_TEST(store_journal_torn_tail_recovers)
{
    char dir[256], image[300], seg[512];
    th_tmpdir(dir, sizeof dir);
    snprintf(image, sizeof image, "%s-image", dir);
    crash_image(dir, image, 20, seg, sizeof seg);
    /* The last record's second half never reached the disk: a write whose sync never
     * returned, never acknowledged. */
    static const uint8_t zeros[300];
    th_file_poke(seg, th_file_data_end(seg) - 300, zeros, sizeof zeros);
    kl_store *st;
    kl_err err;
    ck_assert_int_eq(kl_store_open(image, NULL, &st, &err), KL_OK);
    ck_assert_uint_eq(kl_store_last_index(st), 19);
    uint8_t *e;
    size_t n;
    bool found;
    ck_assert_int_eq(kl_store_read_log(st, 19, &e, &n, &found, &err), KL_OK);
    ck_assert(found);
    ck_assert_uint_eq(n, 600);
    ck_assert_uint_eq(e[0], 'a' + 19);
    free(e);
    ck_assert_int_eq(kl_store_read_log(st, 20, &e, &n, &found, &err), KL_OK);
    ck_assert(!found);
    kl_store_close(st);
    th_rmrf(image);
    th_rmrf(dir);
}
END_TEST

/* A member killed (-9) in the middle of a run of log writes, across journal segment
 * switches, retirements after flushes and a truncation, reopens with every entry whose
 * write returned and the hard state of the last one. */
START_TEST(store_log_survives_kill)
{
    char dir[256];
    th_tmpdir(dir, sizeof dir);
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(pfd[0]);
        kl_store_options o;
        kl_store_options_default(&o);
        o.journal_segment_bytes = 64 << 10;
        o.write_buffer_bytes = 256 << 10;
        kl_store *st;
        kl_err err;
        if (kl_store_open(dir, &o, &st, &err) != KL_OK)
            _exit(3);
        uint8_t body[700];
        Keyload__V1__HardState h = KEYLOAD__V1__HARD_STATE__INIT;
        for (uint64_t i = 1; i <= 3000; i++) {
            memset(body, (int)(i % 251), sizeof body);
            uint64_t at = i == 2000 ? 1990 : i > 2000 ? i - 10 : i; /* one truncation */
            kl_store_log_item it = {.index = at, .bytes = body, .len = sizeof body};
            h.term = i;
            h.commit = at - 1;
            if (kl_store_log_write(st, &h, i == 2000 ? 1990 : 0, &it, 1, &err) != KL_OK)
                _exit(4);
        }
        if (write(pfd[1], "k", 1) != 1)
            _exit(5);
        for (;;)
            pause(); /* killed here, with the store open */
    }
    close(pfd[1]);
    char c;
    ck_assert_int_eq(read(pfd[0], &c, 1), 1);
    close(pfd[0]);
    kill(pid, SIGKILL);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFSIGNALED(status));
    kl_store *st;
    kl_err err;
    ck_assert_int_eq(kl_store_open(dir, NULL, &st, &err), KL_OK);
    ck_assert_uint_eq(kl_store_last_index(st), 2990);
    for (uint64_t at = 1; at <= 2990; at++) {
        uint64_t i = at < 1990 ? at : at + 10;
        uint8_t *e;
        size_t n;
        bool found;
        ck_assert_int_eq(kl_store_read_log(st, at, &e, &n, &found, &err), KL_OK);
        ck_assert(found);
        ck_assert_uint_eq(n, 700);
        ck_assert_uint_eq(e[0], i % 251);
        ck_assert_uint_eq(e[699], i % 251);
        free(e);
    }
    uint64_t term, vote, commit;
    ck_assert_int_eq(kl_store_load_hard(st, &term, &vote, &commit, &err), KL_OK);
    ck_assert_uint_eq(term, 3000);
    ck_assert_uint_eq(commit, 2989);
    kl_store_close(st);
    th_rmrf(dir);
}
END_TEST

/* ---- scan hints (engine/view.h) against a real RocksDB ---- */

#define HINT_N 2000

/* Applies one entry of a single write-set (ops of keys[i], deleted when del) at `index`,
 * telling the hints first as the node does, unless `noted` is false (a store changed some
 * other way, as by an installed snapshot). */
static void apply_ops(kl_store *st, kl_scan_hints *h, uint64_t index, const kl_key *keys, size_t n, bool del,
                      bool noted)
{
    Keyload__V1__KvOp *ops = calloc(n, sizeof *ops);
    Keyload__V1__KvOp **opp = calloc(n, sizeof *opp);
    ck_assert(ops != NULL && opp != NULL);
    for (size_t i = 0; i < n; i++) {
        keyload__v1__kv_op__init(&ops[i]);
        ops[i].del = del;
        ops[i].key = (ProtobufCBinaryData){keys[i].len, (uint8_t *)keys[i].b};
        ops[i].value = (ProtobufCBinaryData){del ? 0 : 1, (uint8_t *)"v"};
        opp[i] = &ops[i];
    }
    Keyload__V1__WriteSet ws = KEYLOAD__V1__WRITE_SET__INIT;
    ws.n_ops = n;
    ws.ops = opp;
    Keyload__V1__WriteSet *wsp = &ws;
    Keyload__V1__LogEntry e = KEYLOAD__V1__LOG_ENTRY__INIT;
    e.index = index;
    e.n_write_sets = 1;
    e.write_sets = &wsp;
    kl_err err;
    if (noted) {
        kl_scan_hints_begin_apply(h, kl_store_applied_index(st), index);
        for (size_t i = 0; i < n; i++)
            if (!del)
                kl_scan_hints_note_put(h, keys[i].b, keys[i].len);
    }
    ck_assert_int_eq(kl_store_apply(st, &e, &err), KL_OK);
    free(ops);
    free(opp);
}

typedef struct first_keys {
    uint64_t seq[4];
    size_t n, want;
} first_keys;

static int take_first(void *arg, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    (void)val, (void)vlen;
    first_keys *f = arg;
    uint64_t qid, seq;
    if (kl_key_parse_available(key, klen, &qid, &seq) != 0)
        return 1;
    f->seq[f->n++] = seq;
    return f->n == f->want;
}

/* Scans lane `lane` of queue 7 for its first available key; *skipped: the tombstones RocksDB
 * stepped over meanwhile (its perf context). Returns the seq found, 0 for none. */
static uint64_t first_available(kl_store *st, kl_scan_hints *h, const char *lane, uint64_t *skipped)
{
    kl_view v = {.store = st, .scan_limit = UINT64_MAX, .hints = h};
    kl_key p;
    kl_key_available_lane(&p, 7, lane);
    first_keys f = {.want = 1};
    kl_err err;
    rocksdb_perfcontext_t *pc = rocksdb_perfcontext_create();
    rocksdb_perfcontext_reset(pc);
    ck_assert_int_eq(kl_view_scan(&v, p.b, p.len, take_first, &f, &err), KL_OK);
    *skipped = rocksdb_perfcontext_metric(pc, rocksdb_internal_delete_skipped_count);
    rocksdb_perfcontext_destroy(pc);
    return f.n ? f.seq[0] : 0;
}

/* A lane whose first HINT_N messages were leased (their 'A' keys deleted) and whose last one
 * is available: without hints every scan steps over the HINT_N - 1 tombstones; with them only
 * the first (learning) scan does, and later ones seek to the live key. Every scan still
 * answers the same key; a put below the hint, a lane with no live key that gets one, and a
 * store changed without the hints being told (as by an installed snapshot) are all seen. */
START_TEST(scan_hints_seek_past_tombstones_and_stay_exact)
{
    char dir[256];
    th_tmpdir(dir, sizeof dir);
    kl_store *st;
    kl_err err;
    ck_assert_int_eq(kl_store_open(dir, NULL, &st, &err), KL_OK);
    rocksdb_set_perf_level(2 /* enable_count */);
    static kl_scan_hints h; /* zeroed, as in the node */
    static kl_key keys[HINT_N];
    for (size_t i = 0; i < HINT_N; i++)
        kl_key_available(&keys[i], 7, "l", i + 1);
    apply_ops(st, &h, 1, keys, HINT_N, false, true);
    apply_ops(st, &h, 2, keys, HINT_N - 1, true, true);
    /* tombstones after the lane too: lane "m" (sorts after "l") held and lost 500 keys */
    static kl_key mkeys[500];
    for (size_t i = 0; i < 500; i++)
        kl_key_available(&mkeys[i], 7, "m", i + 1);
    apply_ops(st, &h, 3, mkeys, 500, false, true);
    apply_ops(st, &h, 4, mkeys, 500, true, true);
    uint64_t skipped;
    ck_assert_uint_eq(first_available(st, NULL, "l", &skipped), HINT_N);
    ck_assert_uint_ge(skipped, HINT_N - 1); /* what every Receive paid without hints */
    ck_assert_uint_eq(first_available(st, &h, "l", &skipped), HINT_N); /* learns */
    for (int i = 0; i < 3; i++) {
        ck_assert_uint_eq(first_available(st, &h, "l", &skipped), HINT_N);
        ck_assert_uint_le(skipped, 2);
    }
    /* a message made available again below the hint (a lease expired) */
    kl_key again;
    kl_key_available(&again, 7, "l", 5);
    apply_ops(st, &h, 5, &again, 1, false, true);
    ck_assert_uint_eq(first_available(st, &h, "l", &skipped), 5);
    /* lane "m" has no live key: learnt as none, then a put there is found */
    ck_assert_uint_eq(first_available(st, &h, "m", &skipped), 0);
    ck_assert_uint_eq(first_available(st, &h, "m", &skipped), 0);
    ck_assert_uint_eq(skipped, 0);
    kl_key m9;
    kl_key_available(&m9, 7, "m", 900);
    apply_ops(st, &h, 6, &m9, 1, false, true);
    ck_assert_uint_eq(first_available(st, &h, "m", &skipped), 900);
    /* changed without telling the hints (a snapshot would): the table is found stale */
    kl_key two;
    kl_key_available(&two, 7, "l", 2);
    apply_ops(st, &h, 7, &two, 1, false, false);
    ck_assert_uint_eq(first_available(st, &h, "l", &skipped), 2);
    rocksdb_set_perf_level(1 /* disable */);
    kl_store_close(st);
    th_rmrf(dir);
}
END_TEST

/* A new store in a new temporary directory (dir, cap: its path). */
static kl_store *tmp_store(char *dir, size_t cap)
{
    th_tmpdir(dir, cap);
    kl_store *st;
    kl_err err;
    ck_assert_int_eq(kl_store_open(dir, NULL, &st, &err), KL_OK);
    return st;
}

/* Entries 1 .. n of term 1, each in its own synced log write. */
static void write_log_entries(kl_store *st, uint64_t n)
{
    kl_err err;
    for (uint64_t i = 1; i <= n; i++) {
        Keyload__V1__LogEntry e = KEYLOAD__V1__LOG_ENTRY__INIT;
        e.index = i;
        e.term = 1;
        uint8_t buf[64];
        size_t len = keyload__v1__log_entry__pack(&e, buf);
        kl_store_log_item it = {.index = i, .bytes = buf, .len = len};
        ck_assert_int_eq(kl_store_log_write(st, NULL, 0, &it, 1, &err), KL_OK);
    }
}

/* RocksDB's own info log ("LOG" in the store) does not grow with the replication log: a
 * debug line per synced write (FlushWAL) made it about 170 bytes per enqueue/receive/ack
 * cycle, unbounded, the largest part of a member's disk growth. 2000 synced log writes must
 * leave it well under 64 KiB. */
START_TEST(store_info_log_stays_small)
{
    char dir[256], path[320];
    kl_store *st = tmp_store(dir, sizeof dir);
    write_log_entries(st, 2000);
    kl_store_close(st);
    snprintf(path, sizeof path, "%s/LOG", dir);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_int_lt(sb.st_size, 64 * 1024);
    th_rmrf(dir);
}
END_TEST

/* Disk a store's WAL files hold (allocated blocks, not their size), in bytes. */
static long long wal_allocated(const char *dir)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "find '%s' -maxdepth 1 -name '*.log' -printf '%%b\\n'", dir);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    long long blocks = 0, b;
    while (fscanf(f, "%lld", &b) == 1)
        blocks += b;
    ck_assert_int_eq(pclose(f), 0);
    return blocks * 512;
}

/* RocksDB preallocates each WAL file's blocks by the largest memtable (1.1 x 8 MiB), capped
 * by max_total_wal_size: a sync then allocates nothing (without it a synced log write took
 * twice as long), but a fresh member holds those blocks from its first write, and a larger
 * memtable would take a small volume's free space at once. They must stay within the WAL
 * bound (32 MiB) at the very most. */
START_TEST(store_wal_preallocation_is_bounded)
{
    char dir[256];
    kl_store *st = tmp_store(dir, sizeof dir);
    write_log_entries(st, 10);
    long long held = wal_allocated(dir);
    ck_assert_int_gt(held, 0);
    ck_assert_int_le(held, 32 << 20);
    kl_store_close(st);
    th_rmrf(dir);
}
END_TEST

START_TEST(last_write_keeps_only_each_keys_last)
{
    /* a b a c b a, plus a key that is a prefix of another and an empty key twice */
    const char *k[] = {"a", "b", "a", "c", "b", "a", "ab", "", ""};
    size_t n = sizeof k / sizeof k[0];
    kl_last_write_key w[9];
    for (size_t i = 0; i < n; i++)
        w[i] = (kl_last_write_key){(const uint8_t *)k[i], strlen(k[i]), i};
    /* Each key once, its last write, in byte order. */
    const char *want_key[] = {"", "a", "ab", "b", "c"};
    const size_t want_pos[] = {8, 5, 6, 4, 3};
    ck_assert_uint_eq(kl_last_write_sort(w, n), 5);
    for (size_t i = 0; i < 5; i++) {
        ck_assert_msg(w[i].len == strlen(want_key[i]) && memcmp(w[i].key, want_key[i], w[i].len) == 0,
                      "kept write %zu is not key \"%s\"", i, want_key[i]);
        ck_assert_uint_eq(w[i].pos, want_pos[i]);
    }
    /* Many distinct keys with one repeat at the ends, given in reverse order. */
    enum { N = 5000 };
    static uint8_t kb[N][8];
    static kl_last_write_key many[N];
    for (size_t i = 0; i < N; i++) {
        kl_be64_put(kb[i], i == N - 1 ? 0 : N - 2 - i); /* N-2 .. 0, then 0 again */
        many[i] = (kl_last_write_key){kb[i], 8, i};
    }
    ck_assert_uint_eq(kl_last_write_sort(many, N), N - 1);
    ck_assert_uint_eq(kl_be64_get(many[0].key), 0);
    ck_assert_uint_eq(many[0].pos, N - 1); /* key 0: its second write */
    for (size_t i = 1; i < N - 1; i++) {
        ck_assert_uint_eq(kl_be64_get(many[i].key), i);
        ck_assert_uint_eq(many[i].pos, N - 2 - i);
    }
    ck_assert_uint_eq(kl_last_write_sort(many, 1), 1);
    ck_assert_uint_eq(kl_last_write_sort(many, 0), 0);
    /* 2000 writes of 97 keys in a scrambled order: each key once, with its highest pos. */
    enum { M = 2000, K = 97 };
    size_t last_pos[K];
    uint32_t x = 12345;
    for (size_t i = 0; i < M; i++) {
        x = x * 1103515245u + 12345u;
        uint64_t key = (x >> 16) % K;
        kl_be64_put(kb[i], key);
        many[i] = (kl_last_write_key){kb[i], 8, i};
        last_pos[key] = i;
    }
    ck_assert_uint_eq(kl_last_write_sort(many, M), K);
    for (size_t i = 0; i < K; i++) {
        ck_assert_uint_eq(kl_be64_get(many[i].key), i);
        ck_assert_uint_eq(many[i].pos, last_pos[i]);
    }
}
END_TEST

/* A put, a delete and a put of one key in three write-sets of an entry, a delete that a
 * later put revives and a put that a later delete removes: the store holds what applying
 * every op in order gives, and the skipped write-set (its outcome already stored) does not
 * count as the last write. */
START_TEST(store_apply_last_write_wins_within_an_entry)
{
    char dir[256];
    kl_store *st = tmp_store(dir, sizeof dir);
    kl_err err;
    Keyload__V1__KvOp o[7];
    for (size_t i = 0; i < 7; i++)
        keyload__v1__kv_op__init(&o[i]);
    o[0].key = (ProtobufCBinaryData){1, (uint8_t *)"k"};
    o[0].value = (ProtobufCBinaryData){2, (uint8_t *)"v1"};
    o[1].key = (ProtobufCBinaryData){1, (uint8_t *)"k"};
    o[1].del = true;
    o[2].key = (ProtobufCBinaryData){1, (uint8_t *)"k"};
    o[2].value = (ProtobufCBinaryData){2, (uint8_t *)"v3"};
    o[3].key = (ProtobufCBinaryData){1, (uint8_t *)"d"};
    o[3].value = (ProtobufCBinaryData){2, (uint8_t *)"d1"};
    o[4].key = (ProtobufCBinaryData){1, (uint8_t *)"d"};
    o[4].del = true;
    o[5].key = (ProtobufCBinaryData){1, (uint8_t *)"r"};
    o[5].del = true;
    o[6].key = (ProtobufCBinaryData){1, (uint8_t *)"r"};
    o[6].value = (ProtobufCBinaryData){2, (uint8_t *)"r1"};
    /* The write-set of an already applied command: its outcome is in the store. */
    uint8_t cmd[16];
    memset(cmd, 7, sizeof cmd);
    kl_key ok;
    kl_key_outcome(&ok, "p", cmd);
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    char *rerr = NULL;
    rocksdb_put(kl_store_db(st), wo, (const char *)ok.b, ok.len, "x", 1, &rerr);
    ck_assert_ptr_null(rerr);
    rocksdb_put(kl_store_db(st), wo, "d", 1, "old", 3, &rerr);
    ck_assert_ptr_null(rerr);
    rocksdb_writeoptions_destroy(wo);
    Keyload__V1__KvOp stale;
    keyload__v1__kv_op__init(&stale);
    stale.key = (ProtobufCBinaryData){1, (uint8_t *)"k"};
    stale.value = (ProtobufCBinaryData){5, (uint8_t *)"stale"};

    Keyload__V1__KvOp *a[] = {&o[0], &o[3]}, *b[] = {&o[1], &o[5]}, *c[] = {&o[2], &o[4], &o[6]},
                      *d[] = {&stale};
    Keyload__V1__WriteSet w[4];
    for (size_t i = 0; i < 4; i++)
        keyload__v1__write_set__init(&w[i]);
    w[0].ops = a, w[0].n_ops = 2;
    w[1].ops = b, w[1].n_ops = 2;
    w[2].ops = c, w[2].n_ops = 3;
    w[3].ops = d, w[3].n_ops = 1;
    w[3].principal = "p";
    w[3].command_id = (ProtobufCBinaryData){16, cmd};
    Keyload__V1__WriteSet *ws[] = {&w[0], &w[1], &w[2], &w[3]};
    Keyload__V1__LogEntry e = KEYLOAD__V1__LOG_ENTRY__INIT;
    e.index = 1;
    e.write_sets = ws;
    e.n_write_sets = 4;
    uint8_t buf[512];
    size_t n = keyload__v1__log_entry__pack(&e, buf);
    ck_assert_int_eq(kl_store_append(st, 1, buf, n, &err), KL_OK);
    ck_assert_int_eq(kl_store_apply(st, &e, &err), KL_OK);
    uint8_t *v;
    size_t vn;
    bool found;
    ck_assert_int_eq(kl_store_get(st, (const uint8_t *)"k", 1, &v, &vn, &found, &err), KL_OK);
    ck_assert(found);
    ck_assert_uint_eq(vn, 2);
    ck_assert_mem_eq(v, "v3", 2);
    free(v);
    ck_assert_int_eq(kl_store_get(st, (const uint8_t *)"d", 1, &v, &vn, &found, &err), KL_OK);
    ck_assert(!found);
    free(v);
    ck_assert_int_eq(kl_store_get(st, (const uint8_t *)"r", 1, &v, &vn, &found, &err), KL_OK);
    ck_assert(found);
    ck_assert_mem_eq(v, "r1", 2);
    free(v);
    kl_store_close(st);
    th_rmrf(dir);
}
END_TEST

/* The second line of defence over many commands in one entry: each command whose outcome
 * the store holds (in a flushed file or in the memtable) is skipped, each other one applies,
 * and a command twice in the entry applies both times (the store before the entry is what
 * is asked, as one read per write-set asked it). */
START_TEST(store_apply_skips_exactly_the_commands_already_applied)
{
    char dir[256];
    kl_store *st = tmp_store(dir, sizeof dir);
    kl_err err;
    enum { N = 12 };
    uint8_t cmd[N][16];
    char key[N][4], val[N][4];
    Keyload__V1__KvOp op[N], *ops[N][1];
    Keyload__V1__WriteSet w[N], *ws[N + 1];
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    for (int i = 0; i < N; i++) {
        memset(cmd[i], 0x40 + i, 16);
        snprintf(key[i], sizeof key[i], "c%02d", i);
        snprintf(val[i], sizeof val[i], "v%02d", i);
        keyload__v1__kv_op__init(&op[i]);
        op[i].key = (ProtobufCBinaryData){3, (uint8_t *)key[i]};
        op[i].value = (ProtobufCBinaryData){3, (uint8_t *)val[i]};
        ops[i][0] = &op[i];
        keyload__v1__write_set__init(&w[i]);
        w[i].ops = ops[i];
        w[i].n_ops = 1;
        w[i].principal = i % 2 ? "p" : "q";
        w[i].command_id = (ProtobufCBinaryData){16, cmd[i]};
        ws[i] = &w[i];
        if (i % 3 == 0) { /* applied before: its outcome is stored */
            kl_key ok;
            kl_key_outcome(&ok, w[i].principal, cmd[i]);
            char *rerr = NULL;
            rocksdb_put(kl_store_db(st), wo, (const char *)ok.b, ok.len, "x", 1, &rerr);
            ck_assert_ptr_null(rerr);
        }
        if (i == 5)
            ck_assert_int_eq(kl_store_flush(st, &err), KL_OK); /* outcomes 0 and 3 in a file */
    }
    rocksdb_writeoptions_destroy(wo);
    /* command 1 a second time, last: both copies apply (it writes the same key again) */
    Keyload__V1__WriteSet again = w[1];
    ws[N] = &again;
    Keyload__V1__LogEntry e = KEYLOAD__V1__LOG_ENTRY__INIT;
    e.index = 1;
    e.write_sets = ws;
    e.n_write_sets = N + 1;
    uint8_t buf[2048];
    size_t n = keyload__v1__log_entry__pack(&e, buf);
    ck_assert_int_eq(kl_store_append(st, 1, buf, n, &err), KL_OK);
    ck_assert_int_eq(kl_store_apply(st, &e, &err), KL_OK);
    for (int i = 0; i < N; i++) {
        uint8_t *v;
        size_t vn;
        bool found;
        ck_assert_int_eq(kl_store_get(st, (const uint8_t *)key[i], 3, &v, &vn, &found, &err), KL_OK);
        ck_assert_msg(found == (i % 3 != 0), "command %d: written %d", i, found);
        if (found)
            ck_assert_mem_eq(v, val[i], 3);
        free(v);
    }
    kl_store_close(st);
    th_rmrf(dir);
}
END_TEST

/* Appends and applies one entry holding one write-set of ops at the store's next index; the
 * write-set is a tailed catalog change of version `catalog` when that is not 0. With a
 * read cache, the apply is announced to it first, as the node does (node.c note_apply). */
static void apply_entry(kl_store *st, kl_read_cache *announce, Keyload__V1__KvOp **op, size_t n, uint64_t catalog)
{
    Keyload__V1__WriteSet w = KEYLOAD__V1__WRITE_SET__INIT, *ws[] = {&w};
    w.ops = op;
    w.n_ops = n;
    w.catalog_version = catalog;
    Keyload__V1__LogEntry e = KEYLOAD__V1__LOG_ENTRY__INIT;
    e.index = kl_store_last_index(st) + 1;
    e.write_sets = ws;
    e.n_write_sets = 1;
    uint8_t buf[1024];
    size_t len = keyload__v1__log_entry__pack(&e, buf);
    kl_err err;
    ck_assert_int_eq(kl_store_append(st, e.index, buf, len, &err), KL_OK);
    if (announce != NULL) {
        kl_read_cache_begin_apply(announce, st, e.index);
        for (size_t i = 0; i < n; i++)
            kl_read_cache_note_write(announce, op[i]->key.data, op[i]->key.len);
    }
    ck_assert_int_eq(kl_store_apply(st, &e, &err), KL_OK);
}

static void apply_write_set(kl_store *st, Keyload__V1__KvOp **op, size_t n, uint64_t catalog)
{
    apply_entry(st, NULL, op, n, catalog);
}

/* Applies one entry of (key, value) pairs at the store's next index, announced to cache
 * when it is not NULL; a NULL value is a delete. */
static void apply_kv(kl_store *st, kl_read_cache *cache, const char *const *kv, size_t n)
{
    Keyload__V1__KvOp o[8], *op[8];
    ck_assert_uint_le(n, 8);
    for (size_t i = 0; i < n; i++) {
        keyload__v1__kv_op__init(&o[i]);
        o[i].key = (ProtobufCBinaryData){strlen(kv[2 * i]), (uint8_t *)kv[2 * i]};
        o[i].del = kv[2 * i + 1] == NULL;
        if (!o[i].del)
            o[i].value = (ProtobufCBinaryData){strlen(kv[2 * i + 1]), (uint8_t *)kv[2 * i + 1]};
        op[i] = &o[i];
    }
    apply_entry(st, cache, op, n, 0);
}

/* Applies one entry of puts (key, value) pairs at the store's next index. */
static void apply_puts(kl_store *st, const char *const *kv, size_t n) { apply_kv(st, NULL, kv, n); }

/* What a view with the read cache answers for key: 1 found with want, 0 absent. */
static void view_expect(kl_view *v, const char *key, const char *want)
{
    uint8_t *val;
    size_t n;
    bool found;
    kl_err err;
    ck_assert_int_eq(kl_view_get(v, (const uint8_t *)key, strlen(key), &val, &n, &found, &err), KL_OK);
    if (want == NULL) {
        ck_assert_msg(!found, "%s is present", key);
    } else {
        ck_assert_msg(found, "%s is absent", key);
        ck_assert_uint_eq(n, strlen(want));
        ck_assert_mem_eq(val, want, n);
    }
    free(val);
}

/* A new store, an empty read cache and a view of the store through it. */
static kl_store *cache_store(char *dir, size_t dir_len, kl_read_cache *rc, kl_view *v)
{
    kl_store *st = tmp_store(dir, dir_len);
    memset(rc, 0, sizeof *rc);
    *v = (kl_view){.store = st, .reads = rc, .scan_limit = UINT64_MAX};
    return st;
}

/* The read cache answers what the store holds: a hit only while the applied index stays,
 * emptied by the next apply (a changed value, a key that appeared), never for a member's
 * local meta or a long value. */
START_TEST(view_read_cache_follows_the_applied_index)
{
    char dir[256];
    kl_err err;
    static kl_read_cache rc;
    kl_view v;
    kl_store *st = cache_store(dir, sizeof dir, &rc, &v);
    const char *a[] = {"Nq1", "id-1", "Mcatalog_version", "v1"};
    apply_puts(st, a, 2);
    view_expect(&v, "Nq1", "id-1");
    view_expect(&v, "Nq1", "id-1");
    view_expect(&v, "Nq2", NULL);
    view_expect(&v, "Nq2", NULL);
    view_expect(&v, "Mcatalog_version", "v1");
    ck_assert_uint_eq(rc.misses, 3);
    ck_assert_uint_eq(rc.hits, 2);
    const char *b[] = {"Nq1", "id-9", "Nq2", "id-2"};
    apply_puts(st, b, 2);
    view_expect(&v, "Nq1", "id-9");
    view_expect(&v, "Nq2", "id-2");
    view_expect(&v, "Mcatalog_version", "v1");
    ck_assert_uint_eq(rc.misses, 6);
    /* A member's own meta ('M' "hard") changes outside applies: never cached. */
    Keyload__V1__HardState hs = KEYLOAD__V1__HARD_STATE__INIT;
    hs.term = 7;
    hs.commit = 1;
    ck_assert_int_eq(kl_store_log_write(st, &hs, 0, NULL, 0, &err), KL_OK);
    uint64_t hits = rc.hits, misses = rc.misses;
    uint8_t *val;
    size_t n;
    bool found;
    ck_assert_int_eq(kl_view_get(&v, (const uint8_t *)"Mhard", 5, &val, &n, &found, &err), KL_OK);
    ck_assert(found);
    free(val);
    ck_assert_uint_eq(rc.hits, hits);
    ck_assert_uint_eq(rc.misses, misses);
    /* A value over KL_READ_CACHE_VALUE_MAX is read from the store each time. */
    char big[KL_READ_CACHE_VALUE_MAX + 2];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    const char *c[] = {"Nbig", big};
    apply_puts(st, c, 1);
    view_expect(&v, "Nbig", big);
    view_expect(&v, "Nbig", big);
    ck_assert_uint_eq(rc.misses, misses + 2);
    kl_store_close(st);
    th_rmrf(dir);
}
END_TEST

/* The cache keeps catalog records, queue names and queue records across applies that leave
 * them alone, when every apply is announced: an announced put or delete drops the key, every
 * announced apply drops the meta records, and an apply nobody announced, a failed one or a
 * local write (kl_store_state_gen) empties the table. Every read must give what the store
 * holds then, and the hit and miss counts show which reads the cache answered. */
START_TEST(view_read_cache_keeps_what_announced_applies_leave)
{
    char dir[256];
    kl_err err;
    static kl_read_cache rc;
    kl_view v;
    kl_store *st = cache_store(dir, sizeof dir, &rc, &v);
    const char *a[] = {"CDt", "db-1", "Q1", "q-1", "Nq1", "id-1", "Mcatalog_version", "v1"};
    apply_kv(st, &rc, a, 4);
    view_expect(&v, "CDt", "db-1");
    view_expect(&v, "Q1", "q-1");
    view_expect(&v, "Nq1", "id-1");
    view_expect(&v, "Mcatalog_version", "v1");
    view_expect(&v, "Q2", NULL);
    ck_assert_uint_eq(rc.misses, 5);
    ck_assert_uint_eq(rc.hits, 0);
    /* An apply writing other keys: the 'C', 'N' and 'Q' values and absences stay, 'M' goes. */
    const char *b[] = {"Nq3", "id-3", "X1", "intent"};
    apply_kv(st, &rc, b, 2);
    view_expect(&v, "CDt", "db-1");
    view_expect(&v, "Q1", "q-1");
    view_expect(&v, "Nq1", "id-1");
    view_expect(&v, "Q2", NULL);
    ck_assert_uint_eq(rc.hits, 4);
    view_expect(&v, "Mcatalog_version", "v1");
    ck_assert_uint_eq(rc.misses, 6);
    /* Announced writes of cached keys: a changed value, a delete, a key that appeared. */
    const char *c[] = {"Q1", "q-9", "CDt", NULL, "Q2", "q-2"};
    apply_kv(st, &rc, c, 3);
    view_expect(&v, "Q1", "q-9");
    view_expect(&v, "CDt", NULL);
    view_expect(&v, "Q2", "q-2");
    ck_assert_uint_eq(rc.misses, 9);
    view_expect(&v, "Nq1", "id-1");
    ck_assert_uint_eq(rc.hits, 5);
    /* An apply nobody announced moves the applied index: everything is read again. */
    const char *d[] = {"Nq1", "id-7"};
    apply_kv(st, NULL, d, 1);
    view_expect(&v, "Nq1", "id-7");
    view_expect(&v, "Q1", "q-9");
    ck_assert_uint_eq(rc.misses, 11);
    ck_assert_uint_eq(rc.hits, 5);
    /* A local write (as a restore's or an install's) changes state keys at the same applied
     * index: kl_store_state_gen moves and the table is emptied. */
    uint64_t gen = kl_store_state_gen(st), applied = kl_store_applied_index(st);
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    rocksdb_writebatch_put(wb, "Q1", 2, "q-local", 7);
    ck_assert_int_eq(kl_store_write_local(st, wb, &err), KL_OK);
    rocksdb_writebatch_destroy(wb);
    ck_assert_uint_ne(kl_store_state_gen(st), gen);
    ck_assert_uint_eq(kl_store_applied_index(st), applied);
    view_expect(&v, "Q1", "q-local");
    ck_assert_uint_eq(rc.misses, 12);
    /* An announced apply that failed: the table holds for no index, so another entry applied
     * at that index without an announcement cannot be taken for the announced one. */
    view_expect(&v, "Nq1", "id-7");
    kl_read_cache_begin_apply(&rc, st, kl_store_applied_index(st) + 1);
    kl_read_cache_reset(&rc);
    const char *e[] = {"Nq1", "id-8"};
    apply_kv(st, NULL, e, 1);
    view_expect(&v, "Nq1", "id-8");
    /* The catalog's change records are never kept: each is read once per tail. */
    const char *f[] = {"CV1", "change"};
    apply_kv(st, &rc, f, 1);
    uint64_t misses = rc.misses;
    view_expect(&v, "CV1", "change");
    view_expect(&v, "CV1", "change");
    ck_assert_uint_eq(rc.misses, misses);
    kl_store_close(st);
    th_rmrf(dir);
}
END_TEST

/* Applies one entry whose one write-set puts u64 value under meta name; a tailed catalog
 * change of version `catalog` when that is not 0. */
static void apply_meta(kl_store *st, const char *name, uint64_t value, uint64_t catalog)
{
    kl_key k;
    kl_key_meta(&k, name);
    uint8_t vb[8];
    kl_be64_put(vb, value);
    Keyload__V1__KvOp o = KEYLOAD__V1__KV_OP__INIT, *op[] = {&o};
    o.key = (ProtobufCBinaryData){k.len, k.b};
    o.value = (ProtobufCBinaryData){8, vb};
    apply_write_set(st, op, 1, catalog);
}

static void expect_counters(kl_store *st, uint64_t version, uint64_t changes)
{
    uint64_t v, c;
    kl_err err;
    ck_assert_int_eq(kl_store_meta_u64(st, "catalog_version", &v, &err), KL_OK);
    ck_assert_int_eq(kl_store_meta_u64(st, "catalog_changes", &c, &err), KL_OK);
    ck_assert_uint_eq(v, version);
    ck_assert_uint_eq(c, changes);
}

/* The catalog counters are cached in the store: every apply that writes one is seen by the
 * next read, a skipped catalog write-set changes nothing, and a reopen reads them again. */
START_TEST(store_catalog_counters_follow_applies)
{
    char dir[256];
    kl_store *st = tmp_store(dir, sizeof dir);
    kl_err err;
    expect_counters(st, 0, 0);
    apply_meta(st, "catalog_version", 1, 1);
    expect_counters(st, 1, 0);
    apply_meta(st, "catalog_changes", 3, 0);
    expect_counters(st, 1, 3);
    /* version 5 is not current + 1: the write-set is skipped, its op never applies */
    apply_meta(st, "catalog_version", 5, 5);
    expect_counters(st, 1, 3);
    apply_meta(st, "catalog_version", 2, 2);
    expect_counters(st, 2, 3);
    const char *other[] = {"x", "y"};
    apply_puts(st, other, 1);
    expect_counters(st, 2, 3);
    ck_assert_int_eq(kl_store_flush(st, &err), KL_OK);
    kl_store_close(st);
    ck_assert_int_eq(kl_store_open(dir, NULL, &st, &err), KL_OK);
    expect_counters(st, 2, 3);
    kl_store_close(st);
    th_rmrf(dir);
}
END_TEST

/* A store of the one-family layout (log entries under 'L' in the default column family, no
 * log family) opens with its log moved into the log family: the same entries and last
 * index, no 'L' key left among the state, the state untouched. */
START_TEST(store_moves_an_old_layout_log_into_its_family)
{
    char dir[256];
    kl_store *st = tmp_store(dir, sizeof dir);
    kl_err err;
    kl_store_close(st);
    /* Remove the log family and write the log where the old layout kept it. */
    rocksdb_options_t *o = rocksdb_options_create();
    const char *names[2] = {"default", KL_STORE_LOG_FAMILY};
    const rocksdb_options_t *fo[2] = {o, o};
    rocksdb_column_family_handle_t *h[2];
    char *rerr = NULL;
    rocksdb_t *db = rocksdb_open_column_families(o, dir, 2, names, fo, h, &rerr);
    ck_assert_ptr_null(rerr);
    rocksdb_drop_column_family(db, h[1], &rerr);
    ck_assert_ptr_null(rerr);
    rocksdb_column_family_handle_destroy(h[0]);
    rocksdb_column_family_handle_destroy(h[1]);
    rocksdb_close(db);
    db = rocksdb_open(o, dir, &rerr);
    ck_assert_ptr_null(rerr);
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    uint8_t entry[5000][8];
    for (uint64_t i = 1; i <= 5000; i++) {
        kl_key k;
        kl_key_log(&k, i);
        kl_be64_put(entry[i - 1], i * 7);
        rocksdb_put(db, wo, (const char *)k.b, k.len, (const char *)entry[i - 1], 8, &rerr);
        ck_assert_ptr_null(rerr);
    }
    rocksdb_put(db, wo, "x", 1, "y", 1, &rerr);
    ck_assert_ptr_null(rerr);
    rocksdb_writeoptions_destroy(wo);
    rocksdb_close(db);
    rocksdb_options_destroy(o);

    ck_assert_int_eq(kl_store_open(dir, NULL, &st, &err), KL_OK);
    ck_assert_uint_eq(kl_store_last_index(st), 5000);
    for (uint64_t i = 1; i <= 5000; i += 1249) {
        uint8_t *v;
        size_t n;
        bool found;
        ck_assert_int_eq(kl_store_read_log(st, i, &v, &n, &found, &err), KL_OK);
        ck_assert(found);
        ck_assert_uint_eq(n, 8);
        ck_assert_mem_eq(v, entry[i - 1], 8);
        free(v);
    }
    rocksdb_iterator_t *it = kl_store_iterator(st);
    rocksdb_iter_seek(it, "L", 1);
    ck_assert(rocksdb_iter_valid(it));
    size_t kl;
    ck_assert_uint_ne((uint8_t)rocksdb_iter_key(it, &kl)[0], 'L');
    rocksdb_iter_destroy(it);
    uint8_t *v;
    size_t n;
    bool found;
    ck_assert_int_eq(kl_store_get(st, (const uint8_t *)"x", 1, &v, &n, &found, &err), KL_OK);
    ck_assert(found);
    free(v);
    /* the next entry goes after the moved ones, into the log family */
    ck_assert_int_eq(kl_store_append(st, 5001, (const uint8_t *)"e", 1, &err), KL_OK);
    kl_store_close(st);
    ck_assert_int_eq(kl_store_open(dir, NULL, &st, &err), KL_OK);
    ck_assert_uint_eq(kl_store_last_index(st), 5001);
    kl_store_close(st);
    th_rmrf(dir);
}
END_TEST

/* Counts RocksDB's key comparisons on this thread while it applies 200 keys and reads them. */
static uint64_t comparisons_of_a_pass(kl_store *st, uint64_t index, bool count_after_first_call)
{
    kl_key probe;
    kl_key_meta(&probe, "no_such_record");
    uint8_t *v;
    size_t n;
    bool found;
    kl_err err;
    ck_assert_int_eq(kl_store_get(st, probe.b, probe.len, &v, &n, &found, &err), KL_OK);
    ck_assert(!found);
    if (count_after_first_call)
        rocksdb_set_perf_level(2 /* enable_count */);
    rocksdb_perfcontext_t *pc = rocksdb_perfcontext_create();
    rocksdb_perfcontext_reset(pc);
    static kl_key keys[200];
    for (size_t i = 0; i < 200; i++)
        kl_key_available(&keys[i], 9, "p", index * 1000 + i);
    static kl_scan_hints h;
    apply_ops(st, &h, index, keys, 200, false, false);
    for (size_t i = 0; i < 200; i++) {
        ck_assert_int_eq(kl_store_get(st, keys[i].b, keys[i].len, &v, &n, &found, &err), KL_OK);
        ck_assert(found);
        free(v);
    }
    uint64_t c = rocksdb_perfcontext_metric(pc, rocksdb_user_key_comparison_count);
    rocksdb_perfcontext_destroy(pc);
    return c;
}

typedef struct {
    kl_store *st;
    uint64_t index;
    bool count;
    uint64_t comparisons;
} perf_pass;

static void *perf_pass_thread(void *arg)
{
    perf_pass *p = arg;
    p->comparisons = comparisons_of_a_pass(p->st, p->index, p->count);
    return NULL;
}

/* A thread's first store call turns RocksDB's per-thread perf counting off (store.c
 * perf_counts_stop): applies and gets on a fresh thread count nothing. The control pass turns
 * counting back on after its first call, as a test that reads the counts does, and must see
 * the same work counted, so the zero is not an artifact of the measurement. */
START_TEST(store_calls_count_nothing_in_rocksdb_perf_context)
{
    char dir[256];
    th_tmpdir(dir, sizeof dir);
    kl_store *st;
    kl_err err;
    ck_assert_int_eq(kl_store_open(dir, NULL, &st, &err), KL_OK);
    perf_pass quiet = {.st = st, .index = 1, .count = false};
    perf_pass counted = {.st = st, .index = 2, .count = true};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, perf_pass_thread, &quiet), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_int_eq(pthread_create(&t, NULL, perf_pass_thread, &counted), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_uint_eq(quiet.comparisons, 0);
    ck_assert_uint_gt(counted.comparisons, 200);
    kl_store_close(st);
    th_rmrf(dir);
}
END_TEST

/* Bytes RocksDB's compactions wrote in the store at dir: total_output_size of every
 * compaction_finished event in its info log, rolled files included. */
static long long compaction_output_bytes(const char *dir)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "cat '%s'/LOG.old.* '%s'/LOG 2>/dev/null | grep -o '\"total_output_size\": [0-9]*' | "
             "awk '{s += $2} END {print s + 0}'",
             dir, dir);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    long long bytes = -1;
    ck_assert_int_eq(fscanf(f, "%lld", &bytes), 1);
    ck_assert_int_eq(pclose(f), 0);
    return bytes;
}

/* Waits (at most 60 s) until RocksDB has no compaction running or due. */
static void compactions_settle(rocksdb_t *db)
{
    for (int i = 0; i < 60000; i++) {
        uint64_t pending = 1, running = 1;
        ck_assert_int_eq(rocksdb_property_int(db, "rocksdb.compaction-pending", &pending), 0);
        ck_assert_int_eq(rocksdb_property_int(db, "rocksdb.num-running-compactions", &running), 0);
        if (pending == 0 && running == 0)
            return;
        usleep(1000);
    }
    ck_abort_msg("compactions did not settle within 60 s");
}

/* The nice values of this process's threads named comm (RocksDB names its pools' threads
 * "rocksdb:low" and "rocksdb:high"): names from /proc/self/task, each thread's nice from
 * getpriority, which on Linux takes a thread id. Returns how many were found. */
static int threads_nice(const char *comm, int *nices, int cap)
{
    DIR *d = opendir("/proc/self/task");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < cap) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], name[64] = {0};
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue; /* the thread ended */
        bool got = fgets(name, sizeof name, f) != NULL;
        fclose(f);
        name[strcspn(name, "\n")] = 0;
        if (!got || strcmp(name, comm) != 0)
            continue;
        errno = 0;
        int nice = getpriority(PRIO_PROCESS, (id_t)strtol(e->d_name, NULL, 10));
        if (nice == -1 && errno == ESRCH)
            continue; /* the thread ended */
        ck_assert_int_eq(errno, 0);
        nices[n++] = nice;
    }
    closedir(d);
    return n;
}

/* Outcome keys are random, so every flushed file spans the state family's whole key range
 * and each L0->L1 compaction rewrites all of L1; only the level base bounds that rewrite
 * (store.c, state_family_shape). 25 MiB of random keys, 200 KiB per flush of a 256 KiB write
 * buffer, each flush's compactions run to rest before the next, so the shape alone decides
 * what is rewritten: RocksDB's default shape (the three options removed) wrote 18.1 times
 * the data in compactions here, the store's shape 5.5 times. */
START_TEST(store_random_keys_compact_in_bounded_steps)
{
    char dir[256];
    th_tmpdir(dir, sizeof dir);
    kl_store_options o;
    kl_store_options_default(&o);
    o.write_buffer_bytes = 256 << 10;
    kl_store *st;
    kl_err err;
    ck_assert_int_eq(kl_store_open(dir, &o, &st, &err), KL_OK);
    rocksdb_t *db = kl_store_db(st);
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    rocksdb_writeoptions_disable_WAL(wo, 1);
    uint64_t x = 0x9e3779b97f4a7c15u; /* xorshift64: the same keys every run */
    uint8_t key[17], val[96];
    long long written = 0;
    for (int step = 0; step < 128; step++) {
        rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
        for (size_t bytes = 0; bytes + sizeof key + sizeof val < (200u << 10); bytes += sizeof key + sizeof val) {
            key[0] = 'O';
            for (size_t i = 1; i < sizeof key; i += 8) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                memcpy(key + i, &x, sizeof key - i < 8 ? sizeof key - i : 8);
            }
            for (size_t i = 0; i < sizeof val; i += 8) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                memcpy(val + i, &x, 8);
            }
            rocksdb_writebatch_put(wb, (const char *)key, sizeof key, (const char *)val, sizeof val);
            written += (long long)(sizeof key + sizeof val);
        }
        char *rerr = NULL;
        rocksdb_write(db, wo, wb, &rerr);
        ck_assert_msg(rerr == NULL, "write: %s", rerr ? rerr : "");
        rocksdb_writebatch_destroy(wb);
        ck_assert_int_eq(kl_store_flush(st, &err), KL_OK);
        compactions_settle(db);
    }
    rocksdb_writeoptions_destroy(wo);
    /* Compactions ran on the low pool's thread and flushes on the high pool's, both at the
     * lowest CPU priority (store.c, kl_store_open). */
    errno = 0;
    int own = getpriority(PRIO_PROCESS, 0); /* this thread's: the runner may itself be niced */
    ck_assert_int_eq(errno, 0);
    ck_assert_int_lt(own, 19); /* else the checks below could not fail */
    int nices[8], n = threads_nice("rocksdb:low", nices, 8);
    ck_assert_int_ge(n, 1);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(nices[i], 19);
    n = threads_nice("rocksdb:high", nices, 8);
    ck_assert_int_ge(n, 1);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(nices[i], 19);
    kl_store_close(st);
    long long out = compaction_output_bytes(dir);
    fprintf(stderr, "store_random_keys_compact_in_bounded_steps: %lld B written, %lld B of compaction output (%.1fx)\n",
            written, out, (double)out / (double)written);
    ck_assert_int_gt(out, 0);          /* compactions ran and were logged */
    ck_assert_int_lt(out, written * 8); /* the default shape: about 18x */
    th_rmrf(dir);
}
END_TEST

Suite *suite_store(void)
{
    Suite *s = suite_create("store");
    TCase *t = tcase_create("store");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, key_order_matches_numeric_order);
    tcase_add_test(t, store_append_apply_reopen);
    tcase_add_test(t, store_refuses_unknown_flags);
    tcase_add_test(t, store_upgrade_records_the_journal_check);
    tcase_add_test(t, store_apply_skips_exactly_the_commands_already_applied);
    tcase_add_test(t, store_identity_is_checked);
    tcase_add_test(t, store_journal_corruption_refuses);
    tcase_add_test(t, store_journal_torn_tail_recovers);
    tcase_add_test(t, store_log_survives_kill);
    tcase_add_test(t, store_first_failure_is_kept);
    tcase_add_test(t, scan_hints_seek_past_tombstones_and_stay_exact);
    tcase_add_test(t, store_info_log_stays_small);
    tcase_add_test(t, store_wal_preallocation_is_bounded);
    tcase_add_test(t, last_write_keeps_only_each_keys_last);
    tcase_add_test(t, store_apply_last_write_wins_within_an_entry);
    tcase_add_test(t, view_read_cache_follows_the_applied_index);
    tcase_add_test(t, view_read_cache_keeps_what_announced_applies_leave);
    tcase_add_test(t, store_catalog_counters_follow_applies);
    tcase_add_test(t, store_moves_an_old_layout_log_into_its_family);
    tcase_add_test(t, store_calls_count_nothing_in_rocksdb_perf_context);
    tcase_add_test(t, store_random_keys_compact_in_bounded_steps);
    suite_add_tcase(s, t);
    return s;
}
