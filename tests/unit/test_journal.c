/* store/journal: segments, replay order, torn tails against damage, retirement and cuts, on
 * real files. The flush callback stands for the store's memtable flush: it can be told to
 * fail, which keeps every sealed segment. */
#include "daemon/store/crc32c.h"
#include "daemon/store/journal.h"
#include "tests/unit/harness.h"

#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <sodium.h>
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

/* The replay saw records 0 .. n-1, each once, in order. */
static void assert_replayed_in_order(const replayed *r, uint32_t n)
{
    ck_assert_uint_eq(r->n, n);
    for (uint32_t i = 0; i < n; i++)
        ck_assert_uint_eq(r->seen[i], i);
}

static kl_journal *jopen_with(const char *dir, size_t seg, bool no_direct, flusher *f, replayed *r, kl_code want,
                              kl_err *err)
{
    kl_journal_options o = {.segment_bytes = seg, .flush = flush_cb, .flush_arg = f, .no_direct = no_direct};
    kl_journal *j = NULL;
    memset(r, 0, sizeof *r);
    kl_code rc = kl_journal_open(dir, &o, replay_cb, r, &j, err);
    if (rc != want)
        fprintf(stderr, "journal open: %s\n", err->message);
    ck_assert_int_eq(rc, want);
    ck_assert(!r->bad_body);
    return j;
}

static kl_journal *jopen(const char *dir, size_t seg, flusher *f, replayed *r, kl_code want, kl_err *err)
{
    return jopen_with(dir, seg, false, f, r, want, err);
}

/* Whether files in dir can be opened with O_DIRECT (tmpfs, for one, refuses). */
static bool dir_takes_direct(const char *dir)
{
    char path[400];
    snprintf(path, sizeof path, "%s/direct-probe", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
    if (fd >= 0)
        close(fd);
    unlink(path);
    return fd >= 0;
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
    assert_replayed_in_order(&r, 300);
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

/* Direct appends and page-cache appends write the same records: opens alternate between
 * the two, each appending records of lengths that end anywhere in a 4 KiB block (some
 * spanning several blocks, one larger than the direct stage that is kept, so it gets
 * blocks of its own), and every reopen replays all of them, in order, byte for byte.
 * Where the filesystem takes O_DIRECT the direct opens do write directly. */
START_TEST(journal_direct_and_page_cache_appends_agree)
{
    char dir[256];
    th_tmpdir(dir, sizeof dir);
    flusher f = {.fail = true};
    replayed r;
    kl_err err;
    bool direct_ok = dir_takes_direct(dir);
    size_t big_len = (3u << 20) / 2; /* more than the kept stage (1 MiB) */
    uint8_t *buf = malloc(big_len);
    ck_assert_ptr_nonnull(buf);
    uint32_t no = 0;
    for (int round = 0; round < 6; round++) {
        bool no_direct = round % 2 == 1;
        kl_journal *j = jopen_with(dir, 64u << 10, no_direct, &f, &r, KL_OK, &err);
        assert_replayed_in_order(&r, no);
        ck_assert(kl_journal_direct(j) == (direct_ok && !no_direct));
        for (int k = 0; k < 40; k++, no++) {
            size_t len = round == 2 && k == 20 ? big_len : 4 + (size_t)(no * 1237u) % 9000u;
            ck_assert_int_eq(kl_journal_append(j, buf, record(no, len, buf), NULL, &err), KL_OK);
        }
        ck_assert(kl_journal_direct(j) == (direct_ok && !no_direct));
        kl_journal_close(j);
    }
    kl_journal *j = jopen(dir, 64u << 10, &f, &r, KL_OK, &err);
    assert_replayed_in_order(&r, no);
    kl_journal_close(j);
    free(buf);
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

/* ---- CRC-32C, the check of the frames written ---- */

/* Published check values (RFC 3720 B.4 and the CRC catalogue), through the table and, where
 * the CPU has it, the instruction; then both agree with each other and with themselves
 * continued piecewise, at every alignment and length up to 300 bytes. */
START_TEST(crc32c_known_values_and_both_paths_agree)
{
    uint8_t zeros[32] = {0}, ones[32], inc[32];
    memset(ones, 0xff, sizeof ones);
    for (int i = 0; i < 32; i++)
        inc[i] = (uint8_t)i;
    ck_assert_uint_eq(kl_crc32c_table(0, "123456789", 9), 0xE3069283u);
    ck_assert_uint_eq(kl_crc32c_table(0, zeros, 32), 0x8A9136AAu);
    ck_assert_uint_eq(kl_crc32c_table(0, ones, 32), 0x62A8AB43u);
    ck_assert_uint_eq(kl_crc32c_table(0, inc, 32), 0x46DD794Eu);
    ck_assert_uint_eq(kl_crc32c(0, "123456789", 9), 0xE3069283u);
    ck_assert_uint_eq(kl_crc32c(0, NULL, 0), 0);
    uint8_t buf[320];
    randombytes_buf(buf, sizeof buf);
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n <= 300; n++) {
            uint32_t t = kl_crc32c_table(0, buf + off, n);
            if (kl_crc32c_have_instruction())
                ck_assert_uint_eq(kl_crc32c_instruction(0, buf + off, n), t);
            size_t half = n / 3;
            ck_assert_uint_eq(kl_crc32c(kl_crc32c(0, buf + off, half), buf + off + half, n - half), t);
        }
    if (kl_crc32c_have_instruction())
        ck_assert_uint_eq(kl_crc32c_instruction(0, "123456789", 9), 0xE3069283u);
}
END_TEST

/* ---- segments of the previous format (BLAKE2b-128 checks) ---- */

static void put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Writes <dir>/<seq>.seg as binaries before the CRC-32C format wrote it, built here from the
 * layout in journal.h rather than by the journal's code: header "KLJRNL01", seq, nonce and
 * BLAKE2b-128 of its first 32 bytes; a link frame (type 2) naming no segment before it; then
 * records from..to-1 of len bytes, each a frame of
 * nonce, length, type 1, BLAKE2b-128 of those 16 bytes and the payload, and the payload
 * padded to 8; then zeros to seg bytes. damage >= 0 flips a payload byte of that record. */
static void write_blake2b_segment(const char *dir, uint64_t seq, size_t seg, uint32_t from, uint32_t to,
                                  size_t len, long damage)
{
    uint8_t *b = calloc(1, seg);
    ck_assert_ptr_nonnull(b);
    uint64_t nonce = 0x5eed5eed12345678ull + seq;
    memcpy(b, "KLJRNL01", 8);
    put_le(b + 8, seq, 8);
    put_le(b + 16, nonce, 8);
    crypto_generichash(b + 32, 16, b, 32, NULL, 0);
    /* the link every segment starts with; seq 0, offset 0: the journal's first segment */
    put_le(b + 64, nonce, 8);
    put_le(b + 72, 16, 4);
    put_le(b + 76, 2, 4);
    crypto_generichash_state ls;
    crypto_generichash_init(&ls, NULL, 0, 16);
    crypto_generichash_update(&ls, b + 64, 16);
    crypto_generichash_update(&ls, b + 96, 16);
    crypto_generichash_final(&ls, b + 80, 16);
    size_t off = 64 + 32 + 16;
    for (uint32_t no = from; no < to; no++) {
        uint8_t *h = b + off;
        ck_assert_uint_le(off + 32 + ((len + 7) & ~(size_t)7), seg);
        put_le(h, nonce, 8);
        put_le(h + 8, len, 4);
        put_le(h + 12, 1, 4);
        record(no, len, h + 32);
        crypto_generichash_state st;
        crypto_generichash_init(&st, NULL, 0, 16);
        crypto_generichash_update(&st, h, 16);
        crypto_generichash_update(&st, h + 32, len);
        crypto_generichash_final(&st, h + 16, 16);
        if ((long)(no - from) == damage)
            h[32 + len / 2] ^= 0x10;
        off += 32 + ((len + 7) & ~(size_t)7);
    }
    char path[400];
    snprintf(path, sizeof path, "%s/%016llx.seg", dir, (unsigned long long)seq);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, b, seg), (ssize_t)seg);
    close(fd);
    free(b);
}

/* A member upgraded from a binary that wrote BLAKE2b segments replays them; its new records
 * go to CRC-32C segments linked to the old one, and a later open replays both in order. A
 * damaged old record followed by a valid one still refuses. */
START_TEST(journal_replays_segments_of_the_previous_format)
{
    char dir[256];
    th_tmpdir(dir, sizeof dir);
    flusher f = {.fail = true};
    replayed r;
    kl_err err;
    write_blake2b_segment(dir, 1, 8192, 0, 40, 100, -1);
    kl_journal *j = jopen(dir, 8192, &f, &r, KL_OK, &err);
    assert_replayed_in_order(&r, 40);
    append_n(j, 40, 140, 100); /* into new segments, across switches */
    kl_journal_close(j);
    char names[64][300];
    size_t n = seg_files(dir, names, 64);
    ck_assert_uint_ge(n, 3);
    size_t old = 0;
    for (size_t i = 0; i < n; i++) {
        FILE *fp = fopen(names[i], "rb");
        char magic[9] = {0};
        ck_assert_uint_eq(fread(magic, 1, 8, fp), 8);
        fclose(fp);
        old += strcmp(magic, "KLJRNL01") == 0;
        ck_assert(strcmp(magic, "KLJRNL01") == 0 || strcmp(magic, "KLJRNL02") == 0);
    }
    ck_assert_uint_eq(old, 1); /* only the one written here; the journal wrote format 2 */
    j = jopen(dir, 8192, &f, &r, KL_OK, &err);
    assert_replayed_in_order(&r, 140);
    kl_journal_close(j);
    th_rmrf(dir);

    th_tmpdir(dir, sizeof dir);
    write_blake2b_segment(dir, 1, 8192, 0, 40, 100, 20);
    j = jopen(dir, 8192, &f, &r, KL_FAILED_PRECONDITION, &err);
    ck_assert_ptr_null(j);
    ck_assert_str_eq(err.detail, "journal_corrupt");
    th_rmrf(dir);

    /* damage in the last old record only: a torn tail, dropped */
    th_tmpdir(dir, sizeof dir);
    write_blake2b_segment(dir, 1, 8192, 0, 40, 100, 39);
    j = jopen(dir, 8192, &f, &r, KL_OK, &err);
    ck_assert_uint_eq(r.n, 39);
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
    tcase_add_test(t, journal_direct_and_page_cache_appends_agree);
    tcase_add_test(t, crc32c_known_values_and_both_paths_agree);
    tcase_add_test(t, journal_replays_segments_of_the_previous_format);
    suite_add_tcase(s, t);
    return s;
}
