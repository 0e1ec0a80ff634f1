/* keyloadd: one replica of one partition (DESIGN.md §3).
 *
 *   keyloadd --cluster FILE --node pPmM [--data DIR] [--var DIR]
 *
 * Threads: the libuv loop is the executor and owns all partition state; nng threads
 * receive and send frames (common/rpc.c); the synced log append runs on libuv's thread
 * pool, one at a time, and reports back to the loop. SIGTERM/SIGINT stop accepting
 * requests, let an in-flight append finish, answer what is left UNKNOWN_WRITE_OUTCOME and
 * close the store. A storage failure ends the process with exit code 1: its pending state
 * cannot be trusted, and recovery on restart re-applies the durable log. */
#include "common/cluster.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/rpc.h"
#include "daemon/node.h"
#include "daemon/rpc/service.h"
#include "daemon/store/store.h"

#include <errno.h>
#include <getopt.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <uv.h>

typedef struct daemon_state {
    uv_loop_t *loop;
    kl_store *store;
    kl_node *node;
    kl_service service;
    kl_rpc_server *rpc;
    uv_signal_t sigterm, sigint;
    uv_work_t append_work;
    bool append_busy;
    bool stopping;
    int exit_code;
    /* the in-flight append */
    uint64_t append_index;
    const uint8_t *append_bytes;
    size_t append_len;
    kl_code append_rc;
    kl_err append_err;
} daemon_state;

static int64_t clock_ms(void *ctx)
{
    (void)ctx;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void random_bytes(uint8_t *buf, size_t n) { randombytes_buf(buf, n); }

static void finish_shutdown(daemon_state *d);
static void begin_stop(daemon_state *d);

static void append_run(uv_work_t *w)
{
    daemon_state *d = w->data;
    kl_err_clear(&d->append_err);
    d->append_rc = kl_store_append(d->store, d->append_index, d->append_bytes, d->append_len,
                                   &d->append_err);
}

static void append_after(uv_work_t *w, int status)
{
    daemon_state *d = w->data;
    d->append_busy = false;
    if (status != 0)
        d->append_rc = kl_fail(&d->append_err, KL_INTERNAL, "append", "append work was cancelled");
    kl_node_append_done(d->node, d->append_index, d->append_rc, &d->append_err);
    if (kl_node_broken(d->node)) {
        KL_ERROR("storage failure; exiting so that recovery can re-apply the durable log", "index=%llu",
                 (unsigned long long)d->append_index);
        d->exit_code = 1;
        begin_stop(d);
        return;
    }
    if (d->stopping && !d->append_busy)
        finish_shutdown(d);
}

static void append_start(void *ctx, uint64_t index, const uint8_t *entry, size_t len)
{
    daemon_state *d = ctx;
    d->append_index = index;
    d->append_bytes = entry;
    d->append_len = len;
    d->append_busy = true;
    d->append_work.data = d;
    int rc = uv_queue_work(d->loop, &d->append_work, append_run, append_after);
    if (rc != 0) {
        d->append_busy = false;
        kl_err e;
        kl_fail(&e, KL_INTERNAL, "append", "cannot queue the log append: %s", uv_strerror(rc));
        kl_node_append_done(d->node, index, KL_INTERNAL, &e);
    }
}

static void finish_shutdown(daemon_state *d)
{
    if (d->node == NULL)
        return;
    kl_node_close(d->node);
    d->node = NULL;
    uv_close((uv_handle_t *)&d->sigterm, NULL);
    uv_close((uv_handle_t *)&d->sigint, NULL);
}

static void on_signal(uv_signal_t *h, int signum)
{
    daemon_state *d = h->data;
    if (d->stopping)
        return;
    KL_INFO("stopping", "signal=%d", signum);
    begin_stop(d);
}

/* Stops taking requests; the node closes once no append is in flight. */
static void begin_stop(daemon_state *d)
{
    d->stopping = true;
    if (d->rpc) {
        kl_rpc_server_stop(d->rpc);
        d->rpc = NULL;
    }
    if (!d->append_busy)
        finish_shutdown(d);
}

static int mkdirs(const char *path)
{
    char buf[KL_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0700) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return (mkdir(buf, 0700) != 0 && errno != EEXIST) ? -1 : 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: keyloadd --cluster FILE --node pPmM [--data DIR] [--var DIR]\n");
}

int main(int argc, char **argv)
{
    const char *cluster_file = NULL, *node_name = NULL, *data_dir = NULL, *var_root = "var";
    static const struct option opts[] = {
        {"cluster", required_argument, NULL, 'c'}, {"node", required_argument, NULL, 'n'},
        {"data", required_argument, NULL, 'd'},    {"var", required_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'c': cluster_file = optarg; break;
        case 'n': node_name = optarg; break;
        case 'd': data_dir = optarg; break;
        case 'v': var_root = optarg; break;
        case 'h': usage(); return 0;
        default: usage(); return 2;
        }
    }
    if (cluster_file == NULL || node_name == NULL) {
        usage();
        return 2;
    }
    kl_log_set_component("keyloadd");
    kl_err err;
    kl_err_clear(&err);
    if (kl_failpoint_init(&err) != KL_OK) {
        fprintf(stderr, "keyloadd: %s\n", err.message);
        return 2;
    }
    if (sodium_init() < 0) {
        fprintf(stderr, "keyloadd: libsodium failed to initialise\n");
        return 1;
    }
    static kl_cluster cluster;
    if (kl_cluster_load(cluster_file, var_root, &cluster, &err) != KL_OK) {
        fprintf(stderr, "keyloadd: %s\n", err.message);
        return 2;
    }
    int partition;
    const kl_member *me = kl_cluster_find_node(&cluster, node_name, &partition);
    if (me == NULL) {
        fprintf(stderr, "keyloadd: node '%s' is not in cluster file %s (names look like p0m1)\n",
                node_name, cluster_file);
        return 2;
    }
    if (data_dir == NULL)
        data_dir = me->data_dir;
    if (mkdirs(data_dir) != 0) {
        fprintf(stderr, "keyloadd: cannot create data directory %s: %s\n", data_dir, strerror(errno));
        return 1;
    }

    static daemon_state d;
    d.loop = uv_default_loop();
    kl_store_options so;
    kl_store_options_default(&so);
    if (kl_store_open(data_dir, &so, &d.store, &err) != KL_OK) {
        fprintf(stderr, "keyloadd: %s\n", err.message);
        return 1;
    }
    kl_node_config nc = {.partition = partition, .limits = cluster.limits,
                         .max_pending_bytes = 256u << 20, .max_pending_batches = 8192};
    kl_node_io io = {.ctx = &d, .append = append_start, .clock_ms = clock_ms, .random = random_bytes};
    if (kl_node_open(d.store, &nc, &io, &d.node, &err) != KL_OK) {
        fprintf(stderr, "keyloadd: recovery failed: %s\n", err.message);
        goto fail_node;
    }
    d.service.node = d.node;
    size_t nmethods;
    const kl_rpc_method *methods = kl_service_methods(&nmethods);
    kl_rpc_server_config rc = {.listen_url = me->client_url, .methods = methods,
                               .method_count = nmethods, .owner = &d.service,
                               .max_frame = cluster.limits.max_frame_bytes, .contexts = 128};
    if (kl_rpc_server_start(d.loop, &rc, &d.rpc, &err) != KL_OK) {
        fprintf(stderr, "keyloadd: %s\n", err.message);
        goto fail_rpc;
    }
    uv_signal_init(d.loop, &d.sigterm);
    uv_signal_init(d.loop, &d.sigint);
    d.sigterm.data = d.sigint.data = &d;
    uv_signal_start(&d.sigterm, on_signal, SIGTERM);
    uv_signal_start(&d.sigint, on_signal, SIGINT);
    KL_INFO("ready", "node=%s partition=%d listen=%s data=%s applied_index=%llu", node_name, partition,
            me->client_url, data_dir, (unsigned long long)kl_node_applied_index(d.node));
    uv_run(d.loop, UV_RUN_DEFAULT);
    if (d.rpc)
        kl_rpc_server_stop(d.rpc);
    finish_shutdown(&d);
    uv_run(d.loop, UV_RUN_DEFAULT);
    kl_store_close(d.store);
    uv_loop_close(d.loop);
    KL_INFO("stopped", "exit_code=%d", d.exit_code);
    return d.exit_code;

fail_rpc:
    kl_node_close(d.node);
fail_node:
    kl_store_close(d.store);
    return 1;
}
