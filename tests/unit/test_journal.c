/* store/journal: segments, replay order, torn tails against damage, retirement and cuts, on
 * real files. The flush callback stands for the store's memtable flush: it can be told to
 * fail, which keeps every sealed segment. */
#include "daemon/store/journal.h"
#include "tests/unit/harness.h"

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    int flushes;
    bool fail;
} flusher;

static kl_code flush_cb(void *arg, kl_err *err)
{
    flusher *f = arg;
    __atomic_add_fetch(&f->flushes, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&f->fail, __ATOMIC_SEQ_CST))
        return kl_fail(err, KL_INTERNAL, "flush", "test: flush fails");
    return KL_OK;
}

/* What a replay saw: each record's number (its first 4 bytes) in order. */
typedef struct {
    uint32_t seen[4096];
    size_t n;
    bool bad_body;
} replayed;

static kl_code replay_cb(void *arg, const uint8_t *rec, size_t len, kl_err *err)
{
    (void)err;
    replayed *r = arg;
    uint32_t no;
    ck_assert_uint_ge(len, 4);
    memcpy(&no, rec, 4);
    for (size_t i = 4; i < len; i++)
        if (rec[i] != (uint8_t)(no + i))
            r->bad_body = true;
    ck_assert_uint_lt(r->n, 4096);
    r->seen[r->n++] = no;
    return KL_OK;
}

/* Record `no`: its number, then len - 4 bytes that depend on it. */
static size_t record(uint32_t no, size_t len, uint8_t *buf)
{
    memcpy(buf, &no, 4);
    for (size_t i = 4; i < len; i++)
        buf[i] = (uint8_t)(no + i);
    return len;
}

static kl_journal *jopen(const char *dir, size_t seg, flusher *f, replayed *r, kl_code want, kl_err *err)
{
    kl_journal_options o = {.segment_bytes = seg, .flush = flush_cb, .flush_arg = f};
    kl_journal *j = NULL;
    memset(r, 0, sizeof *r);
    kl_code rc = kl_journal_open(dir, &o, replay_cb, r, &j, err);
    if (rc != want)
        fprintf(stderr, "journal open: %s\n", err->message);
    ck_assert_int_eq(rc, want);
    ck_assert(!r->bad_body);
    return j;
}

static void append_n(kl_journal *j, uint32_t from, uint32_t to, size_t len)
{
    uint8_t buf[2048];
    kl_err err;
    for (uint32_t no = from; no < to; no++)
        ck_assert_int_eq(kl_journal_append(j, buf, record(no, len, buf), NULL, &err), KL_OK);
}

/* The journal's segment files, sorted, into names (at most cap). */
static size_t seg_files(const char *dir, char names[][300], size_t cap)
{
    struct dirent **list;
    int n = scandir(dir, &list, NULL, alphasort);
    ck_assert_int_ge(n, 0);
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        const char *nm = list[i]->d_name;
        if (strlen(nm) == 20 && strcmp(nm + 16, ".seg") == 0 && k < cap)
            snprintf(names[k++], 300, "%s/%s", dir, nm);
        free(list[i]);
    }
    free(list);
    return k;
}

/* Copies a journal directory as it is now: what a power loss leaves of files synced. */
static void image_of(const char *dir, const char *image)
{
    char cmd[800];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -a '%s' '%s'", image, dir, image);
    ck_assert_int_eq(system(cmd), 0);
}

/* Without a flush that succeeds nothing retires: a reopen replays every record, in order,
 * across segment switches. */
START_TEST(journal_replays_everything_in_order)
{
    char dir[256];
    th_tmpdir(dir, sizeof dir);
    flusher f = {.fail = true};
    replayed r;
    kl_err err;
    kl_journal *j = jopen(dir, 8192, &f, &r, KL_OK, &err);
    ck_assert_uint_eq(r.n, 0);
    append_n(j, 0, 300, 100); /* about 40 records per segment */
    char names[64][300];
    ck_assert_uint_ge(seg_files(dir, names, 64), 5);
    kl_journal_close(j);
    j = jopen(dir, 8192, &f, &r, KL_OK, &err);
    ck_assert_uint_eq(r.n, 300);
    for (uint32_t i = 0; i < 300; i++)
        ck_assert_uint_eq(r.seen[i], i);
    /* The reopen wrote nothing: a second one replays the same records. */
    kl_journal_close(j);
    j = jopen(dir, 8192, &f, &r, KL_OK, &err);
    ck_assert_uint_eq(r.n, 300);
    kl_journal_close(j);
    th_rmrf(dir);
}
END_TEST

/* With flushes succeeding, sealed segments retire (recycled as spares or removed): the disk
 * holds a bounded number of segments, and a reopen replays an unbroken run of the newest
 * records, the last one included. */
START_TEST(journal_retires_flushed_segments)
{
    char dir[256];
    th_tmpdir(dir, sizeof dir);
    flusher f = {0};
    replayed r;
    kl_err err;
    kl_journal *j = jopen(dir, 8192, &f, &r, KL_OK, &err);
    for (uint32_t k = 0; k < 20; k++) {
        append_n(j, k * 100, (k + 1) * 100, 100);
        ck_assert_int_eq(kl_journal_settle(j, 5000, &err), KL_OK);
        ck_assert_uint_le(kl_journal_segment_count(j), 3); /* active, spare, at most one more */
    }
    ck_assert_int_gt(f.flushes, 0);
    kl_journal_close(j);
    j = jopen(dir, 8192, &f, &r, KL_OK, &err);
    ck_assert_uint_ge(r.n, 1);
    ck_assert_uint_lt(r.n, 2000);
    for (size_t i = 0; i < r.n; i++)
        ck_assert_uint_eq(r.seen[i], 2000 - r.n + i);
    kl_journal_close(j);
    th_rmrf(dir);
}
END_TEST

/* The last record half written (its sync never returned): dropped, and the journal opens
 * with every record before it; the next open agrees (the new segment's link records where
 * the damaged one ended). */
START_TEST(journal_torn_tail_is_dropped)
{
    char dir[256], image[300];
    th_tmpdir(dir, sizeof dir);
    snprintf(image, sizeof image, "%s-image", dir);
    flusher f = {.fail = true};
    replayed r;
    kl_err err;
    kl_journal *j = jopen(dir, 1 << 20, &f, &r, KL_OK, &err);
    append_n(j, 0, 50, 600);
    image_of(dir, image);
    kl_journal_close(j);
    char names[8][300];
    ck_assert_uint_eq(seg_files(image, names, 8), 1);
    long end = th_file_data_end(names[0]);
    static const uint8_t zeros[300];
    th_file_poke(names[0], end - 300, zeros, sizeof zeros);
    j = jopen(image, 1 << 20, &f, &r, KL_OK, &err);
    ck_assert_uint_eq(r.n, 49);
    append_n(j, 1000, 1010, 600);
    kl_journal_close(j);
    j = jopen(image, 1 << 20, &f, &r, KL_OK, &err);
    ck_assert_uint_eq(r.n, 59);
    ck_assert_uint_eq(r.seen[48], 48);
    ck_assert_uint_eq(r.seen[49], 1000);
    ck_assert_uint_eq(r.seen[58], 1009);
    kl_journal_close(j);
    th_rmrf(image);
    th_rmrf(dir);
}
END_TEST

/* A damaged record with valid ones after it is synced data gone bad, not a torn write: the
 * open refuses, naming the segment and the way out. */
START_TEST(journal_damage_in_the_middle_refuses)
{
    char dir[256], image[300];
    th_tmpdir(dir, sizeof dir);
    snprintf(image, sizeof image, "%s-image", dir);
    flusher f = {.fail = true};
    replayed r;
    kl_err err;
    kl_journal *j = jopen(dir, 1 << 20, &f, &r, KL_OK, &err);
    append_n(j, 0, 50, 600);
    kl_journal_close(j);
    image_of(dir, image);
    char names[8][300];
    ck_assert_uint_eq(seg_files(image, names, 8), 1);
    th_file_flip(names[0], th_file_data_end(names[0]) / 2);
    j = jopen(image, 1 << 20, &f, &r, KL_FAILED_PRECONDITION, &err);
    ck_assert_ptr_null(j);
    ck_assert_str_eq(err.detail, "journal_corrupt");
    ck_assert_ptr_nonnull(strstr(err.message, image));
    ck_assert_ptr_nonnull(strstr(err.message, "Recovering a member"));
    th_rmrf(image);
    th_rmrf(dir);
}
END_TEST

/* The last record of a segment that is not the last one damaged: the next segment's link
 * says how far its records reached, so this is damage, not a torn write. */
START_TEST(journal_damage_before_a_link_refuses)
{
    char dir[256];
    th_tmpdir(dir, sizeof dir);
    flusher f = {.fail = true};
    replayed r;
    kl_err err;
    kl_journal *j = jopen(dir, 8192, &f, &r, KL_OK, &err);
    append_n(j, 0, 100, 100);
    kl_journal_close(j);
    char names[16][300];
    size_t n = seg_files(dir, names, 16);
    ck_assert_uint_ge(n, 2);
    static const uint8_t zeros[64];
    th_file_poke(names[0], th_file_data_end(names[0]) - 64, zeros, sizeof zeros);
    j = jopen(dir, 8192, &f, &r, KL_FAILED_PRECONDITION, &err);
    ck_assert_str_eq(err.detail, "journal_corrupt");
    th_rmrf(dir);
}
END_TEST

/* After a cut nothing from before it replays, even when no flush ever succeeded. */
START_TEST(journal_cut_drops_everything_before)
{
    char dir[256];
    th_tmpdir(dir, sizeof dir);
    flusher f = {.fail = true};
    replayed r;
    kl_err err;
    kl_journal *j = jopen(dir, 8192, &f, &r, KL_OK, &err);
    append_n(j, 0, 100, 100);
    ck_assert_int_eq(kl_journal_cut(j, &err), KL_OK);
    append_n(j, 500, 510, 100);
    kl_journal_close(j);
    j = jopen(dir, 8192, &f, &r, KL_OK, &err);
    ck_assert_uint_eq(r.n, 10);
    ck_assert_uint_eq(r.seen[0], 500);
    /* A cut with nothing appended after it, then a reopen: nothing replays. */
    ck_assert_int_eq(kl_journal_cut(j, &err), KL_OK);
    kl_journal_close(j);
    j = jopen(dir, 8192, &f, &r, KL_OK, &err);
    ck_assert_uint_eq(r.n, 0);
    kl_journal_close(j);
    th_rmrf(dir);
}
END_TEST

/* A recycled segment's old frames (another nonce) end its records: a reopen after records
 * went into recycled segments replays only the new ones. A record larger than a segment
 * gets one of its own. */
START_TEST(journal_recycled_and_large_records)
{
    char dir[256];
    th_tmpdir(dir, sizeof dir);
    flusher f = {0};
    replayed r;
    kl_err err;
    kl_journal *j = jopen(dir, 8192, &f, &r, KL_OK, &err);
    for (uint32_t k = 0; k < 10; k++) {
        append_n(j, k * 60, (k + 1) * 60, 100);
        ck_assert_int_eq(kl_journal_settle(j, 5000, &err), KL_OK);
    }
    __atomic_store_n(&f.fail, true, __ATOMIC_SEQ_CST);
    uint8_t *big = malloc(20000);
    ck_assert_ptr_nonnull(big);
    ck_assert_int_eq(kl_journal_append(j, big, record(7777, 20000, big), NULL, &err), KL_OK);
    free(big);
    append_n(j, 9000, 9003, 100);
    kl_journal_close(j);
    j = jopen(dir, 8192, &f, &r, KL_OK, &err);
    ck_assert_uint_ge(r.n, 4);
    ck_assert_uint_eq(r.seen[r.n - 4], 7777);
    ck_assert_uint_eq(r.seen[r.n - 1], 9002);
    for (size_t i = 1; i + 4 < r.n; i++)
        ck_assert_uint_eq(r.seen[i], r.seen[i - 1] + 1);
    kl_journal_close(j);
    th_rmrf(dir);
}
END_TEST

/* Flushes that keep failing leave sealed segments behind; past SEALED_MAX of them an append
 * fails, and so does every append after it, instead of filling the disk or waiting for
 * ever. A reopen still replays every record whose append returned OK. */
START_TEST(journal_refuses_when_flushes_keep_failing)
{
    char dir[256];
    th_tmpdir(dir, sizeof dir);
    flusher f = {.fail = true};
    replayed r;
    kl_err err;
    kl_journal *j = jopen(dir, 4096, &f, &r, KL_OK, &err);
    uint8_t buf[100];
    uint32_t ok = 0;
    kl_code rc = KL_OK;
    while (ok < 4000 && (rc = kl_journal_append(j, buf, record(ok, sizeof buf, buf), NULL, &err)) == KL_OK)
        ok++;
    ck_assert_int_eq(rc, KL_INTERNAL);
    ck_assert_ptr_nonnull(strstr(err.message, "KL_JOURNAL_SEALED_MAX"));
    ck_assert_uint_gt(ok, 64 * 20);
    ck_assert_int_eq(kl_journal_append(j, buf, record(ok, sizeof buf, buf), NULL, &err), KL_INTERNAL);
    kl_journal_close(j);
    j = jopen(dir, 4096, &f, &r, KL_OK, &err);
    ck_assert_uint_eq(r.n, ok);
    for (uint32_t i = 0; i < ok; i++)
        ck_assert_uint_eq(r.seen[i], i);
    kl_journal_close(j);
    th_rmrf(dir);
}
END_TEST

Suite *suite_journal(void)
{
    Suite *s = suite_create("journal");
    TCase *t = tcase_create("journal");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, journal_replays_everything_in_order);
    tcase_add_test(t, journal_retires_flushed_segments);
    tcase_add_test(t, journal_torn_tail_is_dropped);
    tcase_add_test(t, journal_damage_in_the_middle_refuses);
    tcase_add_test(t, journal_damage_before_a_link_refuses);
    tcase_add_test(t, journal_cut_drops_everything_before);
    tcase_add_test(t, journal_recycled_and_large_records);
    tcase_add_test(t, journal_refuses_when_flushes_keep_failing);
    suite_add_tcase(s, t);
    return s;
}
