/* Metrics: the text exposition (common/metrics.h: escaping, cumulative histogram buckets
 * with +Inf, _sum and _count, the per-queue cap, addresses), the daemon's refusal table
 * (daemon/metrics.h: fixed details only, capped) and the HTTP endpoint
 * (common/metrics_http.h) over a real socket: a page rendered on the loop thread, 401
 * without the token, and 503 after the bounded wait when the loop does not render. */
#include "common/metrics.h"
#include "common/metrics_http.h"
#include "daemon/metrics.h"
#include "ports.h"
#include "tests/unit/harness.h"

#include <arpa/inet.h>
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char *render(void (*fn)(kl_metrics_buf *))
{
    kl_metrics_buf b = {0};
    fn(&b);
    size_t len;
    char *p = kl_metrics_buf_take(&b, &len);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(strlen(p), len);
    return p;
}

static void escaping_page(kl_metrics_buf *b)
{
    kl_metrics_family(b, "keyload_x_total", "counter", "a \\ backslash\nand a newline");
    kl_metrics_label l[2] = {{"detail", "q\"uo\\te\nnl"}, {"code", "NOT_FOUND"}};
    kl_metrics_u64(b, "keyload_x_total", l, 2, 7);
}

START_TEST(label_values_and_help_are_escaped)
{
    char *p = render(escaping_page);
    ck_assert_str_eq(p, "# HELP keyload_x_total a \\\\ backslash\\nand a newline\n"
                        "# TYPE keyload_x_total counter\n"
                        "keyload_x_total{detail=\"q\\\"uo\\\\te\\nnl\",code=\"NOT_FOUND\"} 7\n");
    free(p);
}
END_TEST

static const double bounds[] = {0.001, 0.01, 0.1};

static void hist_page(kl_metrics_buf *b)
{
    kl_metrics_hist h;
    kl_metrics_hist_init(&h, bounds, 3);
    kl_metrics_hist_observe(&h, 0.0005); /* first bucket */
    kl_metrics_hist_observe(&h, 0.001);  /* le is inclusive: still the first */
    kl_metrics_hist_observe(&h, 0.05);   /* third */
    kl_metrics_hist_observe(&h, 3);      /* only +Inf */
    kl_metrics_hist_write(b, "keyload_lat_seconds", "latency", &h);
}

START_TEST(histogram_buckets_are_cumulative_with_inf_sum_count)
{
    char *p = render(hist_page);
    ck_assert_str_eq(p, "# HELP keyload_lat_seconds latency\n"
                        "# TYPE keyload_lat_seconds histogram\n"
                        "keyload_lat_seconds_bucket{le=\"0.001\"} 2\n"
                        "keyload_lat_seconds_bucket{le=\"0.01\"} 2\n"
                        "keyload_lat_seconds_bucket{le=\"0.1\"} 3\n"
                        "keyload_lat_seconds_bucket{le=\"+Inf\"} 4\n"
                        "keyload_lat_seconds_sum 3.0515\n"
                        "keyload_lat_seconds_count 4\n");
    free(p);
}
END_TEST

START_TEST(the_queue_cap_counts_what_it_drops)
{
    kl_metrics_cap c;
    kl_metrics_cap_init(&c, 3);
    int taken = 0;
    for (int i = 0; i < 5; i++)
        taken += kl_metrics_cap_take(&c, 2);
    ck_assert_int_eq(taken, 3);
    ck_assert_uint_eq(c.dropped, 4); /* two queues left out, two series each */
}
END_TEST

START_TEST(addresses_and_loopback)
{
    kl_err err;
    ck_assert_int_eq(kl_metrics_addr_check("127.0.0.1:9401", "metrics", &err), KL_OK);
    ck_assert_int_eq(kl_metrics_addr_check("[::1]:9401", "metrics", &err), KL_OK);
    ck_assert_int_eq(kl_metrics_addr_check("localhost:1", "metrics", &err), KL_OK);
    const char *bad[] = {"127.0.0.1", "127.0.0.1:0", "127.0.0.1:70000", ":9401", "host.example:9401",
                         "127.0.0.1:94x", "[::1:9401"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(kl_metrics_addr_check(bad[i], "metrics", &err), KL_INVALID_ARGUMENT);
        ck_assert_str_eq(err.detail, "metrics");
    }
    ck_assert(kl_metrics_addr_is_loopback("127.0.0.1:1"));
    ck_assert(kl_metrics_addr_is_loopback("127.0.0.2:1"));
    ck_assert(kl_metrics_addr_is_loopback("[::1]:1"));
    ck_assert(kl_metrics_addr_is_loopback("localhost:1"));
    ck_assert(!kl_metrics_addr_is_loopback("0.0.0.0:1"));
    ck_assert(!kl_metrics_addr_is_loopback("10.1.2.3:1"));
    ck_assert(!kl_metrics_addr_is_loopback("[::]:1"));
}
END_TEST

START_TEST(refusals_keep_fixed_details_only_and_are_capped)
{
    kl_dmetrics *m = calloc(1, sizeof *m);
    kl_dmetrics_refusal_hook(m, KL_NOT_FOUND, "queue");
    kl_dmetrics_refusal_hook(m, KL_NOT_FOUND, "queue");
    kl_dmetrics_refusal_hook(m, KL_RESOURCE_EXHAUSTED, "limit:MaxScanRecords");
    kl_dmetrics_refusal_hook(m, KL_INVALID_ARGUMENT, "body text with spaces\"");
    ck_assert_uint_eq(m->nrefusals, 2);
    ck_assert_uint_eq(m->refusals[0].n, 2);
    ck_assert_uint_eq(m->refusals_other, 1);
    char d[16];
    for (int i = 0; i < KL_METRICS_REFUSALS_MAX + 10; i++) {
        snprintf(d, sizeof d, "d%d", i);
        kl_dmetrics_refusal_hook(m, KL_INTERNAL, d);
    }
    ck_assert_uint_eq(m->nrefusals, KL_METRICS_REFUSALS_MAX);
    ck_assert_uint_eq(m->refusals_other, 1 + 12);
    free(m);
}
END_TEST

static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
}

START_TEST(token_files)
{
    char dir[256], path[272];
    th_tmpdir_named(dir, sizeof dir, "kl-metrics");
    snprintf(path, sizeof path, "%s/token", dir);
    char tok[KL_METRICS_TOKEN_MAX + 1];
    kl_err err;
    write_file(path, "0123456789abcdefXYZ\n", 0600);
    ck_assert_int_eq(kl_metrics_token_load(path, tok, sizeof tok, &err), KL_OK);
    ck_assert_str_eq(tok, "0123456789abcdefXYZ");
    write_file(path, "0123456789abcdefXYZ\n", 0644);
    ck_assert_int_eq(kl_metrics_token_load(path, tok, sizeof tok, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "metrics_token_file");
    write_file(path, "short\n", 0600);
    ck_assert_int_eq(kl_metrics_token_load(path, tok, sizeof tok, &err), KL_INVALID_ARGUMENT);
    ck_assert_ptr_null(strstr(err.message, "short")); /* never echoes the file */
    unlink(path);
    rmdir(dir);
}
END_TEST

/* ---- the endpoint over a real socket */

typedef struct http_get {
    int port;
    const char *auth; /* Authorization header or NULL */
    char answer[8192];
    volatile int done;
} http_get;

static void *do_get(void *arg)
{
    http_get *g = arg;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g->port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    g->answer[0] = '\0';
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        char req[512];
        int n = snprintf(req, sizeof req, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s%s%s\r\n",
                         g->auth ? "Authorization: " : "", g->auth ? g->auth : "", g->auth ? "\r\n" : "");
        if (write(fd, req, (size_t)n) == n) {
            size_t off = 0;
            ssize_t r;
            while (off < sizeof g->answer - 1 && (r = read(fd, g->answer + off, sizeof g->answer - 1 - off)) > 0)
                off += (size_t)r;
            g->answer[off] = '\0';
        }
    }
    close(fd);
    g->done = 1;
    return NULL;
}

static int renders;
static void render_page(void *ctx, kl_metrics_buf *out)
{
    (void)ctx;
    renders++;
    kl_metrics_one(out, "keyload_test_total", "counter", "test", 42);
}

/* Runs the loop (when run_loop) until the GET finished; returns its answer. */
static void get_while(uv_loop_t *loop, http_get *g, bool run_loop)
{
    pthread_t t;
    g->done = 0;
    ck_assert_int_eq(pthread_create(&t, NULL, do_get, g), 0);
    while (!g->done) {
        if (run_loop)
            uv_run(loop, UV_RUN_NOWAIT);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    pthread_join(t, NULL);
}

START_TEST(endpoint_renders_on_the_loop_checks_the_token_and_bounds_the_wait)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    char dir[256], path[272];
    th_tmpdir_named(dir, sizeof dir, "kl-metrics");
    snprintf(path, sizeof path, "%s/token", dir);
    write_file(path, "tok-0123456789abcdef\n", 0600);
    int port = th_free_port();
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    kl_metrics_http *m = NULL;
    kl_err err;
    ck_assert_int_eq(kl_metrics_http_start(&loop, addr, path, render_page, NULL, &m, &err), KL_OK);
    http_get g = {.port = port};
    get_while(&loop, &g, true);
    ck_assert_msg(strstr(g.answer, " 401 ") != NULL, "no token: %s", g.answer);
    g.auth = "Bearer tok-0123456789abcdeX";
    get_while(&loop, &g, true);
    ck_assert_msg(strstr(g.answer, " 401 ") != NULL, "wrong token: %s", g.answer);
    g.auth = "Bearer tok-0123456789abcdef";
    get_while(&loop, &g, true);
    ck_assert_msg(strstr(g.answer, " 200 ") != NULL && strstr(g.answer, "keyload_test_total 42\n") != NULL,
                  "token: %s", g.answer);
    ck_assert_int_eq(renders, 1);
    /* The loop does not run: the scrape waits KL_METRICS_RENDER_WAIT_MS, then 503. */
    time_t t0 = time(NULL);
    get_while(&loop, &g, false);
    ck_assert_msg(strstr(g.answer, " 503 ") != NULL, "stuck loop: %s", g.answer);
    ck_assert_int_ge(time(NULL) - t0, KL_METRICS_RENDER_WAIT_MS / 1000 - 1);
    uv_run(&loop, UV_RUN_NOWAIT); /* the late render is thrown away */
    ck_assert_uint_eq(kl_metrics_http_served(m), 1);
    kl_metrics_http_stop(m);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(a_non_loopback_address_needs_a_token_file)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    kl_metrics_http *m = NULL;
    kl_err err;
    ck_assert_int_eq(kl_metrics_http_start(&loop, "0.0.0.0:1", NULL, render_page, NULL, &m, &err),
                     KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "metrics_token_file");
    ck_assert_ptr_null(m);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

Suite *suite_metrics(void)
{
    Suite *s = suite_create("Metrics");
    TCase *tc = tcase_create("exposition");
    tcase_add_test(tc, label_values_and_help_are_escaped);
    tcase_add_test(tc, histogram_buckets_are_cumulative_with_inf_sum_count);
    tcase_add_test(tc, the_queue_cap_counts_what_it_drops);
    tcase_add_test(tc, addresses_and_loopback);
    tcase_add_test(tc, refusals_keep_fixed_details_only_and_are_capped);
    tcase_add_test(tc, token_files);
    suite_add_tcase(s, tc);
    TCase *http = tcase_create("endpoint");
    tcase_set_timeout(http, 30);
    tcase_add_test(http, endpoint_renders_on_the_loop_checks_the_token_and_bounds_the_wait);
    tcase_add_test(http, a_non_loopback_address_needs_a_token_file);
    suite_add_tcase(s, http);
    return s;
}
