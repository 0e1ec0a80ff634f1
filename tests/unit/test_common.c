/* Unit tests of common/: status codes, GUIDs, failpoints, cluster-file parsing. */
#include "common/cluster.h"
#include "common/failpoint.h"
#include "common/guid.h"
#include "common/status.h"

#include <check.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

START_TEST(status_names_round_trip)
{
    for (int c = 0; c < KL_CODE_COUNT; c++)
        ck_assert_int_eq(kl_code_parse(kl_code_name(c)), c);
    ck_assert_str_eq(kl_code_name(KL_UNKNOWN_WRITE_OUTCOME), "UNKNOWN_WRITE_OUTCOME");
    ck_assert_str_eq(kl_code_name(99), "UNKNOWN");
    ck_assert_int_eq(kl_code_parse("NOPE"), -1);
    kl_err e;
    ck_assert_int_eq(kl_fail(&e, KL_CONFLICT, "d", "x=%d", 5), KL_CONFLICT);
    ck_assert_str_eq(e.message, "x=5");
    ck_assert_str_eq(e.detail, "d");
}
END_TEST

START_TEST(guid_parse_format_validate)
{
    uint8_t g[16];
    ck_assert(kl_guid_parse("0f8fad5b-d9cb-469f-a165-70867728950e", g));
    char txt[37];
    kl_guid_format(g, txt);
    ck_assert_str_eq(txt, "0f8fad5b-d9cb-469f-a165-70867728950e");
    ck_assert(kl_guid_parse("0F8FAD5B-D9CB-469F-A165-70867728950E", g));
    ck_assert(!kl_guid_parse("", g));
    ck_assert(!kl_guid_parse("0f8fad5bd9cb469fa16570867728950e", g));
    ck_assert(!kl_guid_parse("0f8fad5b-d9cb-469f-a165-70867728950", g));
    ck_assert(!kl_guid_parse("0f8fad5b-d9cb-469f-a165-70867728950e0", g));
    ck_assert(!kl_guid_parse("0f8fad5b-d9cb-469f-a165-70867728950g", g));
    ck_assert(kl_guid_parse("00000000-0000-0000-0000-000000000000", g));
    ck_assert(!kl_guid_valid(g, 16));   /* all-zero is invalid */
    ck_assert(!kl_guid_valid(g, 0));    /* empty is invalid */
    kl_guid_random(g);
    ck_assert(kl_guid_valid(g, 16));
    ck_assert(!kl_guid_valid(g, 15));
    /* Time-ordered: the millisecond in the first 48 bits, big-endian; version 7, RFC
     * 9562's variant; later milliseconds compare greater whatever the random bits. */
    uint8_t a[16], b[16];
    kl_guid_time_ordered(0x0123456789abULL, a);
    ck_assert_uint_eq(a[0], 0x01);
    ck_assert_uint_eq(a[1], 0x23);
    ck_assert_uint_eq(a[5], 0xab);
    ck_assert_uint_eq(a[6] >> 4, 7);
    ck_assert_uint_eq(a[8] >> 6, 2);
    ck_assert(kl_guid_valid(a, 16));
    kl_guid_time_ordered(0x0123456789acULL, b);
    ck_assert_int_lt(memcmp(a, b, 16), 0);
    /* Two ids of one millisecond differ in their random bits. */
    kl_guid_time_ordered(0x0123456789abULL, b);
    ck_assert_int_ne(memcmp(a, b, 16), 0);
    ck_assert_int_eq(memcmp(a, b, 6), 0);
    /* Only the low 48 bits of the time are kept. */
    kl_guid_time_ordered(0xffff0123456789abULL, b);
    ck_assert_int_eq(memcmp(a, b, 6), 0);
    /* The current-time form carries the wall clock's millisecond. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t before = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    kl_guid_time_ordered_now(a);
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t after = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    uint64_t ms = 0;
    for (int i = 0; i < 6; i++)
        ms = ms << 8 | a[i];
    ck_assert_uint_ge(ms, before);
    ck_assert_uint_le(ms, after);
    ck_assert_uint_eq(a[6] >> 4, 7);
    /* The text is the canonical 8-4-4-4-12 lower-case form of every byte value. */
    for (int k = 0; k < 1000; k++) {
        for (int i = 0; i < 16; i++)
            g[i] = k < 256 ? (uint8_t)k : (uint8_t)randombytes_uniform(256);
        char want[37];
        snprintf(want, sizeof want, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                 g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13],
                 g[14], g[15]);
        kl_guid_format(g, txt);
        ck_assert_str_eq(txt, want);
        uint8_t back[16];
        ck_assert(kl_guid_parse(txt, back));
        ck_assert_mem_eq(back, g, 16);
    }
}
END_TEST

START_TEST(failpoint_spec)
{
    kl_err e;
    ck_assert_int_eq(kl_failpoint_configure("coord.before_accept=error(UNAVAILABLE),"
                                            "coord.before_complete=sleep(1),"
                                            "daemon.before_reply=2*error(CONFLICT)", &e), KL_OK);
    ck_assert(kl_failpoints_armed);
    ck_assert_int_eq(KL_FAILPOINT("coord.before_accept", &e), KL_UNAVAILABLE);
    ck_assert_int_eq(KL_FAILPOINT("coord.before_complete", &e), KL_OK);
    ck_assert_int_eq(KL_FAILPOINT("daemon.before_append", &e), KL_OK); /* not armed */
    ck_assert_int_eq(KL_FAILPOINT("daemon.before_reply", &e), KL_OK);       /* first hit passes */
    ck_assert_int_eq(KL_FAILPOINT("daemon.before_reply", &e), KL_CONFLICT); /* second hit fires */
    ck_assert_int_eq(KL_FAILPOINT("daemon.before_reply", &e), KL_OK);
    ck_assert_int_eq(kl_failpoint_configure("daemon.before_reply", &e), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_failpoint_configure("daemon.before_reply=explode", &e), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_failpoint_configure("daemon.before_reply=error(NOPE)", &e), KL_INVALID_ARGUMENT);
    /* A misspelt site is refused, naming it, and disarms everything. */
    ck_assert_int_eq(kl_failpoint_configure("daemon.before_reply=exit,coord.befor_accept=exit", &e),
                     KL_INVALID_ARGUMENT);
    ck_assert(strstr(e.message, "coord.befor_accept") != NULL);
    ck_assert(!kl_failpoints_armed);
    ck_assert_int_eq(kl_failpoint_configure(NULL, &e), KL_OK);
    ck_assert(!kl_failpoints_armed);
}
END_TEST

static const char *good_cluster =
    "{\"cluster\":\"t1\",\"replica_count\":1,\"limits\":{\"MaxBatchBytes\":1000,\"MaxFrameBytes\":2000},"
    "\"partitions\":[{\"id\":0,\"members\":[{\"id\":1,\"client\":\"tcp://127.0.0.1:1\"}]},"
    "{\"id\":3,\"members\":[{\"id\":1,\"client\":\"tcp://127.0.0.1:2\",\"data\":\"/tmp/x\"}]}]}";

START_TEST(cluster_parse_good)
{
    static kl_cluster c;
    kl_err e;
    ck_assert_int_eq(kl_cluster_parse(good_cluster, "v", &c, &e), KL_OK);
    ck_assert_str_eq(c.name, "t1");
    ck_assert_int_eq(c.partition_count, 2);
    ck_assert_uint_eq(c.limits.max_batch_bytes, 1000);
    ck_assert_uint_eq(c.limits.max_scan_records, 10000); /* default kept */
    int p;
    const kl_member *m = kl_cluster_find_node(&c, "p0m1", &p);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(p, 0);
    ck_assert_str_eq(m->data_dir, "v/t1/p0m1");
    m = kl_cluster_find_node(&c, "p3m1", &p);
    ck_assert_str_eq(m->data_dir, "/tmp/x");
    ck_assert_ptr_null(kl_cluster_find_node(&c, "p3m2", NULL));
    ck_assert_ptr_null(kl_cluster_find_node(&c, "p3m1x", NULL));
    ck_assert_uint_eq(c.timers.catalog_lease_ms, KL_CATALOG_LEASE_DEFAULT_MS);
    ck_assert_uint_eq(c.timers.session_ttl_ms, KL_SESSION_TTL_DEFAULT_MS);
    ck_assert_int_eq(kl_cluster_parse("{\"cluster\":\"a\",\"replica_count\":1,\"timers\":"
                                      "{\"session_ttl_ms\":7200000},\"partitions\":"
                                      "[{\"id\":0,\"members\":[{\"id\":1,\"client\":\"x\"}]}]}",
                                      NULL, &c, &e), KL_OK);
    ck_assert_uint_eq(c.timers.session_ttl_ms, 7200000);
}
END_TEST

/* "connections": defaults, values taken, a tenant bound above the table's size clamped, and
 * a value out of range refused naming it. */
START_TEST(cluster_parse_connections)
{
    static kl_cluster c;
    kl_err e;
    ck_assert_int_eq(kl_cluster_parse(good_cluster, "v", &c, &e), KL_OK);
    ck_assert_uint_eq(c.conn.client_max, KL_CONN_CLIENT_MAX_DEFAULT);
    ck_assert_uint_eq(c.conn.client_idle_ms, KL_CONN_CLIENT_IDLE_DEFAULT_MS);
    ck_assert_uint_eq(c.conn.peer_max, KL_CONN_PEER_MAX_DEFAULT);
    ck_assert_uint_eq(c.conn.peer_idle_ms, 0);
    ck_assert_uint_eq(c.conn.sessions_max, KL_CONN_SESSIONS_MAX_DEFAULT);
    const char *fmt = "{\"cluster\":\"a\",\"replica_count\":1,\"connections\":%s,\"partitions\":"
                      "[{\"id\":0,\"members\":[{\"id\":1,\"client\":\"x\"}]}]}";
    char json[512];
    snprintf(json, sizeof json, fmt,
             "{\"client_max\":4,\"client_idle_ms\":0,\"sessions_max\":8,\"sessions_per_tenant\":100}");
    ck_assert_int_eq(kl_cluster_parse(json, NULL, &c, &e), KL_OK);
    ck_assert_uint_eq(c.conn.client_max, 4);
    ck_assert_uint_eq(c.conn.client_idle_ms, 0);
    ck_assert_uint_eq(c.conn.sessions_per_tenant, 8);
    snprintf(json, sizeof json, fmt, "{\"peer_max\":33}");
    ck_assert_int_eq(kl_cluster_parse(json, NULL, &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "peer_max");
    snprintf(json, sizeof json, fmt, "[]");
    ck_assert_int_eq(kl_cluster_parse(json, NULL, &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "connections");
}
END_TEST

START_TEST(cluster_parse_refusals)
{
    static kl_cluster c;
    kl_err e;
    ck_assert_int_eq(kl_cluster_parse("{", NULL, &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_cluster_parse("{\"cluster\":\"a\",\"replica_count\":2,\"partitions\":"
                                      "[{\"id\":0,\"members\":[{\"id\":1,\"client\":\"x\"}]}]}",
                                      NULL, &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "replica_count");
    ck_assert_int_eq(kl_cluster_parse("{\"cluster\":\"a\",\"replica_count\":0,\"partitions\":"
                                      "[{\"id\":0,\"members\":[{\"id\":1,\"client\":\"x\"}]}]}",
                                      NULL, &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_cluster_parse("{\"cluster\":\"a\",\"replica_count\":1,\"limits\":"
                                      "{\"MaxBatchBytes\":5000,\"MaxFrameBytes\":100},\"partitions\":"
                                      "[{\"id\":0,\"members\":[{\"id\":1,\"client\":\"x\"}]}]}",
                                      NULL, &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "MaxFrameBytes");
    ck_assert_int_eq(kl_cluster_parse("{\"cluster\":\"a\",\"replica_count\":1,\"partitions\":"
                                      "[{\"id\":0,\"members\":[{\"id\":1,\"client\":\"x\"},"
                                      "{\"id\":1,\"client\":\"y\"}]}]}",
                                      NULL, &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_cluster_parse("{\"cluster\":\"A B\",\"replica_count\":1,\"partitions\":"
                                      "[{\"id\":0,\"members\":[{\"id\":1,\"client\":\"x\"}]}]}",
                                      NULL, &c, &e), KL_INVALID_ARGUMENT);
    /* A lease shorter than a held tail would lapse between two successful tails. */
    ck_assert_int_eq(kl_cluster_parse("{\"cluster\":\"a\",\"replica_count\":1,\"timers\":"
                                      "{\"catalog_lease_ms\":1000},\"partitions\":"
                                      "[{\"id\":0,\"members\":[{\"id\":1,\"client\":\"x\"}]}]}",
                                      NULL, &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "catalog_lease_ms");
    ck_assert_int_eq(kl_cluster_parse("{\"cluster\":\"a\",\"replica_count\":1,\"timers\":"
                                      "{\"session_ttl_ms\":999},\"partitions\":"
                                      "[{\"id\":0,\"members\":[{\"id\":1,\"client\":\"x\"}]}]}",
                                      NULL, &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "session_ttl_ms");
}
END_TEST

/* "timers.outcome_retention_ms": the default when left out, a value in range taken, and
 * one below the minimum (or not an integer) refused naming the field. */
START_TEST(cluster_parse_outcome_retention)
{
    static kl_cluster c;
    kl_err e;
    ck_assert_int_eq(kl_cluster_parse(good_cluster, "v", &c, &e), KL_OK);
    ck_assert_int_eq(c.timers.outcome_retention_ms, KL_OUTCOME_RETENTION_DEFAULT_MS);
    ck_assert_int_eq(c.timers.outcome_retention_ms, 86400000);
    const char *fmt = "{\"cluster\":\"a\",\"replica_count\":1,\"timers\":{\"outcome_retention_ms\":%s},"
                      "\"partitions\":[{\"id\":0,\"members\":[{\"id\":1,\"client\":\"x\"}]}]}";
    char json[512];
    snprintf(json, sizeof json, fmt, "10000");
    ck_assert_int_eq(kl_cluster_parse(json, NULL, &c, &e), KL_OK);
    ck_assert_int_eq(c.timers.outcome_retention_ms, 10000);
    const char *bad[] = {"9999", "0", "-1", "\"1h\"", "31536000001"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(json, sizeof json, fmt, bad[i]);
        ck_assert_int_eq(kl_cluster_parse(json, NULL, &c, &e), KL_INVALID_ARGUMENT);
        ck_assert_str_eq(e.detail, "outcome_retention_ms");
        ck_assert_ptr_nonnull(strstr(e.message, "timers.outcome_retention_ms"));
    }
}
END_TEST

/* A member's "metrics" and "metrics_token_file" (ARCHITECTURE.md "Metrics"): a loopback
 * address is taken without a token file; a malformed address is refused naming `metrics`
 * and the member's path; an address that is not loopback without a token file is refused
 * naming `metrics_token_file`, and taken with one; not a string is refused naming the key. */
START_TEST(cluster_parse_metrics_refusals)
{
    static kl_cluster c;
    kl_err e;
    const char *fmt = "{\"cluster\":\"a\",\"replica_count\":1,\"partitions\":[{\"id\":0,\"members\":["
                      "{\"id\":1,\"client\":\"x\"},{\"id\":2,\"client\":\"y\",%s}]}]}";
    char json[512];
    const char *good[] = {"\"metrics\":\"127.0.0.1:9401\"", "\"metrics\":\"127.9.9.9:1\"",
                          "\"metrics\":\"localhost:65535\"", "\"metrics\":\"[::1]:9401\"",
                          "\"metrics\":\"0.0.0.0:9401\",\"metrics_token_file\":\"/etc/keyload/t\"",
                          "\"metrics\":\"10.1.2.3:9401\",\"metrics_token_file\":\"t\"",
                          "\"metrics\":\"[::]:9401\",\"metrics_token_file\":\"t\""};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        snprintf(json, sizeof json, fmt, good[i]);
        ck_assert_msg(kl_cluster_parse(json, NULL, &c, &e) == KL_OK, "%s: %s", good[i], e.message);
        ck_assert(c.partitions[0].members[1].metrics_addr[0] != '\0');
        ck_assert_str_eq(c.partitions[0].members[0].metrics_addr, ""); /* none given: no endpoint */
    }
    const char *malformed[] = {"127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536",
                               "127.0.0.1:94x1", ":9401", "example.com:9401", "::1:9401",
                               "[::1]9401", "[nope]:1", "256.0.0.1:1", "http://127.0.0.1:1"};
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        char item[96];
        snprintf(item, sizeof item, "\"metrics\":\"%s\",\"metrics_token_file\":\"t\"", malformed[i]);
        snprintf(json, sizeof json, fmt, item);
        ck_assert_msg(kl_cluster_parse(json, NULL, &c, &e) == KL_INVALID_ARGUMENT, "%s accepted", malformed[i]);
        ck_assert_str_eq(e.detail, "metrics");
        ck_assert_ptr_nonnull(strstr(e.message, "partitions[0].members[1].metrics"));
    }
    const char *open_addr[] = {"0.0.0.0:9401", "10.0.0.1:9401", "[::]:9401", "128.0.0.1:1"};
    for (size_t i = 0; i < sizeof open_addr / sizeof open_addr[0]; i++) {
        char item[96];
        snprintf(item, sizeof item, "\"metrics\":\"%s\"", open_addr[i]);
        snprintf(json, sizeof json, fmt, item);
        ck_assert_msg(kl_cluster_parse(json, NULL, &c, &e) == KL_INVALID_ARGUMENT, "%s accepted", open_addr[i]);
        ck_assert_str_eq(e.detail, "metrics_token_file");
        ck_assert_ptr_nonnull(strstr(e.message, "partitions[0].members[1].metrics is not a loopback"));
    }
    const char *bad_type[][2] = {{"\"metrics\":9401", "metrics"}, {"\"metrics\":\"\"", "metrics"},
                                 {"\"metrics\":\"0.0.0.0:1\",\"metrics_token_file\":7", "metrics_token_file"}};
    for (size_t i = 0; i < sizeof bad_type / sizeof bad_type[0]; i++) {
        snprintf(json, sizeof json, fmt, bad_type[i][0]);
        ck_assert_int_eq(kl_cluster_parse(json, NULL, &c, &e), KL_INVALID_ARGUMENT);
        ck_assert_str_eq(e.detail, bad_type[i][1]);
    }
}
END_TEST

/* "snapshot": defaults when left out, values in range taken (a small threshold without a
 * trailing window gets half of it), and each out-of-range value refused naming its field. */
START_TEST(cluster_parse_snapshot_policy)
{
    static kl_cluster c;
    kl_err e;
    ck_assert_int_eq(kl_cluster_parse(good_cluster, "v", &c, &e), KL_OK);
    ck_assert_uint_eq(c.snapshot.threshold_entries, KL_SNAP_THRESHOLD_DEFAULT);
    ck_assert_uint_eq(c.snapshot.trailing_entries, KL_SNAP_TRAILING_DEFAULT);
    const char *fmt = "{\"cluster\":\"a\",\"replica_count\":1,\"snapshot\":%s,"
                      "\"partitions\":[{\"id\":0,\"members\":[{\"id\":1,\"client\":\"x\"}]}]}";
    char json[512];
    snprintf(json, sizeof json, fmt, "{\"threshold_entries\":200,\"trailing_entries\":50}");
    ck_assert_int_eq(kl_cluster_parse(json, NULL, &c, &e), KL_OK);
    ck_assert_uint_eq(c.snapshot.threshold_entries, 200);
    ck_assert_uint_eq(c.snapshot.trailing_entries, 50);
    snprintf(json, sizeof json, fmt, "{\"threshold_entries\":100}");
    ck_assert_int_eq(kl_cluster_parse(json, NULL, &c, &e), KL_OK);
    ck_assert_uint_eq(c.snapshot.trailing_entries, 50);
    snprintf(json, sizeof json, fmt, "{\"trailing_entries\":0}");
    ck_assert_int_eq(kl_cluster_parse(json, NULL, &c, &e), KL_OK);
    ck_assert_uint_eq(c.snapshot.trailing_entries, 0);
    static const struct { const char *v, *field; } bad[] = {
        {"{\"threshold_entries\":7}", "threshold_entries"},
        {"{\"threshold_entries\":1000000001}", "threshold_entries"},
        {"{\"threshold_entries\":\"10k\"}", "threshold_entries"},
        {"{\"threshold_entries\":100,\"trailing_entries\":100}", "trailing_entries"},
        {"{\"trailing_entries\":-1}", "trailing_entries"},
        {"{\"trailing_entries\":10000}", "trailing_entries"},
        {"7", "snapshot"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(json, sizeof json, fmt, bad[i].v);
        ck_assert_int_eq(kl_cluster_parse(json, NULL, &c, &e), KL_INVALID_ARGUMENT);
        ck_assert_str_eq(e.detail, bad[i].field);
    }
}
END_TEST

Suite *suite_common(void)
{
    Suite *s = suite_create("common");
    TCase *t = tcase_create("core");
    tcase_add_test(t, status_names_round_trip);
    tcase_add_test(t, guid_parse_format_validate);
    tcase_add_test(t, failpoint_spec);
    suite_add_tcase(s, t);
    return s;
}

Suite *suite_cluster(void)
{
    Suite *s = suite_create("cluster");
    TCase *t = tcase_create("file");
    tcase_add_test(t, cluster_parse_good);
    tcase_add_test(t, cluster_parse_refusals);
    tcase_add_test(t, cluster_parse_connections);
    tcase_add_test(t, cluster_parse_outcome_retention);
    tcase_add_test(t, cluster_parse_snapshot_policy);
    tcase_add_test(t, cluster_parse_metrics_refusals);
    suite_add_tcase(s, t);
    return s;
}
