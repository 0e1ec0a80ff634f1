/* Key layout and the store's format/feature-flag checks, against a real RocksDB. */
#include "daemon/store/keys.h"
#include "daemon/store/store.h"
#include "harness.h"

#include <check.h>
#include <string.h>

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

Suite *suite_store(void)
{
    Suite *s = suite_create("store");
    TCase *t = tcase_create("store");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, key_order_matches_numeric_order);
    tcase_add_test(t, store_append_apply_reopen);
    tcase_add_test(t, store_refuses_unknown_flags);
    suite_add_tcase(s, t);
    return s;
}
