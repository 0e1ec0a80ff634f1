/* Readable settings: the SetDatabaseLimits merge of named limits into the stored ones and
 * its shape check (daemon/engine/catalog.c), ListCatalog's cursor (catalog_read.c) and its
 * pages over a real store (kl_node_list_catalog). */
#include "harness.h"

#include "daemon/engine/catalog.h"
#include "daemon/engine/kind.h"
#include "keyload/v1/catalog.pb-c.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static Keyload__V1__DatabaseLimits limits(uint64_t scan, uint64_t batch, uint64_t read, Keyload__V1__NullableU64 *a)
{
    Keyload__V1__DatabaseLimits l = KEYLOAD__V1__DATABASE_LIMITS__INIT;
    l.max_scan_records = scan;
    l.max_batch_bytes = batch;
    l.max_query_read_bytes = read;
    l.max_queue_transfer_accept_attempts = a;
    return l;
}

START_TEST(merge_takes_named_limits_and_keeps_the_others)
{
    Keyload__V1__NullableU64 seven = KEYLOAD__V1__NULLABLE_U64__INIT, nine = KEYLOAD__V1__NULLABLE_U64__INIT;
    seven.value = 7;
    nine.value = 9;
    Keyload__V1__DatabaseLimits stored = limits(500, 1000, 0, &seven);
    Keyload__V1__DatabaseLimits req = limits(300, 0, 99, NULL);
    Keyload__V1__DatabaseLimits out;
    Keyload__V1__NullableU64 buf;

    /* Scan records and accept attempts named: both from the request (attempts to null). */
    kl_catalog_merge_db_limits(&stored, &req, KL_CATALOG_FIELD_SCAN_RECORDS | KL_CATALOG_FIELD_ACCEPT_ATTEMPTS,
                               &out, &buf);
    ck_assert_uint_eq(out.max_scan_records, 300);
    ck_assert_uint_eq(out.max_batch_bytes, 1000);
    ck_assert_uint_eq(out.max_query_read_bytes, 0);
    ck_assert_ptr_null(out.max_queue_transfer_accept_attempts);

    /* Only the read bytes: everything else as stored, attempts copied out of stored. */
    kl_catalog_merge_db_limits(&stored, &req, KL_CATALOG_FIELD_QUERY_READ_BYTES, &out, &buf);
    ck_assert_uint_eq(out.max_scan_records, 500);
    ck_assert_uint_eq(out.max_batch_bytes, 1000);
    ck_assert_uint_eq(out.max_query_read_bytes, 99);
    ck_assert_ptr_eq(out.max_queue_transfer_accept_attempts, &buf);
    ck_assert_uint_eq(buf.value, 7);

    /* 0 replaces all (the meaning a request without fields always had). */
    req.max_queue_transfer_accept_attempts = &nine;
    kl_catalog_merge_db_limits(&stored, &req, 0, &out, &buf);
    ck_assert_uint_eq(out.max_scan_records, 300);
    ck_assert_uint_eq(out.max_batch_bytes, 0);
    ck_assert_uint_eq(out.max_query_read_bytes, 99);
    ck_assert_uint_eq(out.max_queue_transfer_accept_attempts->value, 9);

    /* No stored limits and no request limits: all zero, null. */
    kl_catalog_merge_db_limits(NULL, NULL, KL_CATALOG_FIELD_BATCH_BYTES, &out, &buf);
    ck_assert_uint_eq(out.max_scan_records + out.max_batch_bytes + out.max_query_read_bytes, 0);
    ck_assert_ptr_null(out.max_queue_transfer_accept_attempts);
    kl_catalog_merge_db_limits(&stored, NULL, KL_CATALOG_FIELD_BATCH_BYTES, &out, &buf);
    ck_assert_uint_eq(out.max_scan_records, 500);
    ck_assert_uint_eq(out.max_batch_bytes, 0);
}
END_TEST

START_TEST(unknown_field_bits_are_refused)
{
    Keyload__V1__SetDatabaseLimits s = KEYLOAD__V1__SET_DATABASE_LIMITS__INIT;
    s.tenant = "default";
    s.database = "default";
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_SET_DATABASE_LIMITS;
    m.set_database_limits = &s;
    kl_err err;
    s.fields = 15;
    ck_assert_int_eq(kl_catalog_kind_set_database_limits.validate(2, &m, &err), KL_OK);
    s.fields = 16;
    ck_assert_int_eq(kl_catalog_kind_set_database_limits.validate(2, &m, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "mutations[2].set_database_limits.fields");
}
END_TEST

START_TEST(cursor_round_trip_and_malformed)
{
    enum { DB = KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_DATABASES,
           Q = KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_QUEUES };
    uint8_t cur[KL_CATALOG_CURSOR_MAX];
    char name[KL_NAME_LEN_MAX + 1];
    kl_err err;
    size_t n = kl_catalog_cursor_encode(Q, "orders", cur);
    ck_assert_int_eq(kl_catalog_cursor_decode(Q, cur, n, name, &err), KL_OK);
    ck_assert_str_eq(name, "orders");
    /* Another kind's cursor, a truncated one, a bad version, a NUL, too long, empty name. */
    ck_assert_int_eq(kl_catalog_cursor_decode(DB, cur, n, name, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "cursor");
    ck_assert_int_eq(kl_catalog_cursor_decode(Q, cur, 2, name, &err), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_catalog_cursor_decode(Q, cur, 0, name, &err), KL_INVALID_ARGUMENT);
    cur[0] = 2;
    ck_assert_int_eq(kl_catalog_cursor_decode(Q, cur, n, name, &err), KL_INVALID_ARGUMENT);
    cur[0] = 1;
    cur[4] = 0;
    ck_assert_int_eq(kl_catalog_cursor_decode(Q, cur, n, name, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "cursor");
    uint8_t big[KL_CATALOG_CURSOR_MAX + 1];
    memset(big, 'a', sizeof big);
    big[0] = 1;
    big[1] = Q;
    ck_assert_int_eq(kl_catalog_cursor_decode(Q, big, sizeof big, name, &err), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_catalog_cursor_decode(Q, big, sizeof big - 1, name, &err), KL_OK);
}
END_TEST

static th_node T;
static char dir[256];

static void setup(void)
{
    th_tmpdir(dir, sizeof dir);
    th_open(&T, dir, NULL);
}

static void teardown(void)
{
    th_close(&T);
    th_rmrf(dir);
}

/* One ListCatalog page of default/default's queues as the local administrator. */
static Keyload__V1__ListCatalogAnswer *page(const ProtobufCBinaryData *cursor, uint32_t max, kl_code want,
                                            kl_err *err)
{
    Keyload__V1__ListCatalogRequest r = KEYLOAD__V1__LIST_CATALOG_REQUEST__INIT;
    r.kind = KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_QUEUES;
    r.tenant = "default";
    r.database = "default";
    if (cursor != NULL)
        r.cursor = *cursor;
    r.max = max;
    uint8_t req[512], *ans = NULL;
    size_t len = keyload__v1__list_catalog_request__pack(&r, req), alen = 0;
    kl_code rc = kl_node_list_catalog(T.node, "local", req, len, &ans, &alen, err);
    ck_assert_int_eq(rc, want);
    if (rc != KL_OK)
        return NULL;
    Keyload__V1__ListCatalogAnswer *a = keyload__v1__list_catalog_answer__unpack(NULL, alen, ans);
    free(ans);
    ck_assert_ptr_nonnull(a);
    return a;
}

START_TEST(pages_list_every_queue_once)
{
    const char *names[] = {"a1", "a10", "a2", "b", "c", "d", "e"}; /* key order */
    for (size_t i = 0; i < 7; i++) {
        th_batch *b = th_batch_new((uint8_t)(0x10 + i));
        th_create(b, names[6 - i], 0, 0, 0, NULL); /* created out of order */
        keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
    }
    kl_err err;
    size_t seen = 0, pages = 0;
    ProtobufCBinaryData cur = {0, NULL};
    uint8_t keep[KL_CATALOG_CURSOR_MAX];
    do {
        Keyload__V1__ListCatalogAnswer *a = page(pages ? &cur : NULL, 3, KL_OK, &err);
        ck_assert_uint_le(a->n_queues, 3);
        for (size_t i = 0; i < a->n_queues; i++)
            ck_assert_str_eq(a->queues[i]->queue, names[seen++]);
        ck_assert_uint_le(a->next_cursor.len, sizeof keep);
        if (a->next_cursor.len > 0)
            memcpy(keep, a->next_cursor.data, a->next_cursor.len);
        cur.data = keep;
        cur.len = a->next_cursor.len;
        keyload__v1__list_catalog_answer__free_unpacked(a, NULL);
        pages++;
    } while (cur.len > 0 && pages < 10);
    ck_assert_uint_eq(seen, 7);
    ck_assert_uint_eq(pages, 3);
    /* An exact page has no cursor: nothing follows. */
    Keyload__V1__ListCatalogAnswer *a = page(NULL, 7, KL_OK, &err);
    ck_assert_uint_eq(a->n_queues, 7);
    ck_assert_uint_eq(a->next_cursor.len, 0);
    keyload__v1__list_catalog_answer__free_unpacked(a, NULL);
    /* Refusals name what is wrong. */
    uint8_t junk[] = {9, 9, 9};
    ProtobufCBinaryData bad = {sizeof junk, junk};
    page(&bad, 3, KL_INVALID_ARGUMENT, &err);
    ck_assert_str_eq(err.detail, "cursor");
    page(NULL, KL_CATALOG_LIST_MAX + 1, KL_INVALID_ARGUMENT, &err);
    ck_assert_str_eq(err.detail, "max");
}
END_TEST

Suite *suite_settings(void)
{
    Suite *s = suite_create("settings");
    TCase *t = tcase_create("pure");
    tcase_add_test(t, merge_takes_named_limits_and_keeps_the_others);
    tcase_add_test(t, unknown_field_bits_are_refused);
    tcase_add_test(t, cursor_round_trip_and_malformed);
    suite_add_tcase(s, t);
    t = tcase_create("store");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, pages_list_every_queue_once);
    suite_add_tcase(s, t);
    return s;
}
