/* The daemon's RPC method table (daemon/rpc/service.c): one row per method, the rpc
 * server's table built from the same rows, and each row's request type, gate and path
 * consistent with its name; the READ rows cover every read kind the node serves. */
#include "daemon/rpc/serve.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

START_TEST(test_server_methods_are_the_table)
{
    size_t nt, nm;
    const kl_service_method *t = kl_service_method_table(&nt);
    const kl_rpc_method *m = kl_service_methods(&nm);
    ck_assert_uint_eq(nt, nm);
    ck_assert_uint_eq(nt, 18); /* 13, BackupOpen, BackupChunk, BackupClose, Members, MemberChange */
    for (size_t i = 0; i < nt; i++) {
        ck_assert_str_eq(m[i].name, t[i].name);
        ck_assert_ptr_nonnull(m[i].handler);
        for (size_t j = 0; j < i; j++) {
            ck_assert_str_ne(t[j].name, t[i].name);
            /* each row has its own entry: the server's call needs no lookup by name */
            ck_assert_ptr_ne((void *)m[j].handler, (void *)m[i].handler);
        }
    }
}
END_TEST

START_TEST(test_rows_name_their_request_and_gate)
{
    size_t n;
    const kl_service_method *t = kl_service_method_table(&n);
    for (size_t i = 0; i < n; i++) {
        char want[128];
        bool hello = strcmp(t[i].name, "keyload.v1.Hello") == 0;
        snprintf(want, sizeof want, "%s%s", t[i].name, hello ? "" : "Request");
        ck_assert_ptr_nonnull(t[i].request);
        ck_assert_str_eq(t[i].request->name, want);
        /* Hello establishes a session; every other method passes the gate first. */
        ck_assert(t[i].gated == !hello);
    }
}
END_TEST

START_TEST(test_read_rows_cover_the_node_reads)
{
    size_t n;
    const kl_service_method *t = kl_service_method_table(&n);
    int seen[KL_NODE_QUERY_READ + 1] = {0};
    for (size_t i = 0; i < n; i++) {
        if (t[i].access != KL_SERVICE_READ) {
            ck_assert_ptr_nonnull(t[i].handler);
            continue;
        }
        ck_assert_ptr_null(t[i].handler);
        ck_assert_int_ge(t[i].read, 0);
        ck_assert_int_lt(t[i].read, KL_NODE_QUERY_READ);
        seen[t[i].read]++;
    }
    for (int k = 0; k < KL_NODE_QUERY_READ; k++)
        ck_assert_int_eq(seen[k], 1);
    ck_assert_int_eq(seen[KL_NODE_QUERY_READ], 0);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(t[i].name, "keyload.v1.Batch") == 0)
            ck_assert_int_eq(t[i].access, KL_SERVICE_WRITE);
        if (strcmp(t[i].name, "keyload.v1.Query") == 0)
            ck_assert_int_eq(t[i].access, KL_SERVICE_QUERY);
    }
}
END_TEST

Suite *suite_service(void)
{
    Suite *s = suite_create("service");
    TCase *tc = tcase_create("table");
    tcase_add_test(tc, test_server_methods_are_the_table);
    tcase_add_test(tc, test_rows_name_their_request_and_gate);
    tcase_add_test(tc, test_read_rows_cover_the_node_reads);
    suite_add_tcase(s, tc);
    return s;
}
