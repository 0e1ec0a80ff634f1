/* Process tests: real keyloadd processes, real RocksDB reopen, real kill -9 and
 * failpoint cuts, real nng sockets on loopback (KL-1's "tests that must exist").
 *
 *   build/proc-test --bin bin/keyloadd --work DIR
 *
 * Every daemon is started by fork/exec and killed by its pid; each test's daemon is
 * stopped before the next starts, also when a check fails. Prints a closing
 * "N passed, N failed" line. */
#include "tests/cluster/proc.h"
#include "tests/cluster/proc_grow.h"
#include "tests/support/data_end.h"

#include "client/keyload.h"
#include "common/canon.h"
#include "common/guid.h"
#include "common/keys.h"
#include "common/rpc.h"
#include "common/status.h"
#include "keyload/v1/queue.pb-c.h"
#include "keyload/v1/catalog.pb-c.h"
#include "keyload/v1/membership.pb-c.h"
#include "keyload/v1/rpc.pb-c.h"

#include <errno.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <nng/nng.h>
#include <pthread.h>
#include <nng/protocol/reqrep0/req.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *daemon_bin;
char work[512];
char url[128];
static char cluster_file[600];
static char secret_file[600]; /* every daemon's cluster secret (databases' keys derive from it) */
static pid_t daemon_pid = -1;
static bool start_without_init; /* start_daemon leaves out --init-store */
static const char *start_disk_reserve_mb; /* start_daemon passes --disk-reserve-mb this */
static const char *start_repl_trace;      /* start_daemon passes --repl-trace this */
int failures_in_test;

int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void write_cluster(int port, const char *data, const char *limits)
{
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    snprintf(cluster_file, sizeof cluster_file, "%s/cluster.json", work);
    FILE *f = fopen(cluster_file, "w");
    fprintf(f,
            "{\"cluster\":\"proctest\",\"replica_count\":1,\"insecure_local_admin\":true,\"limits\":{%s},"
            "\"partitions\":[{\"id\":0,\"members\":[{\"id\":1,\"client\":\"%s\",\"data\":\"%s\"}]}]}\n",
            limits, url, data);
    fclose(f);
}

/* ---- RPC helpers ---- */

void answer_free(answer *a)
{
    free(a->bytes);
    memset(a, 0, sizeof *a);
}

answer call(const char *method, const uint8_t *req, size_t len, int timeout_ms)
{
    answer a = {0};
    kl_rpc_client *c;
    a.code = kl_rpc_client_open(url, 2000, 0, &c, &a.err);
    if (a.code != KL_OK)
        return a;
    a.code = kl_rpc_invoke(c, method, req, len, timeout_ms, &a.bytes, &a.len, NULL, 0, &a.err);
    kl_rpc_client_close(c);
    return a;
}

Keyload__V1__QueueLaneRef *mkref(const char *queue)
{
    Keyload__V1__QueueLaneRef *r = calloc(1, sizeof *r);
    keyload__v1__queue_lane_ref__init(r);
    r->tenant = strdup("default");
    r->database = strdup("default");
    r->queue = strdup(queue);
    r->lane = strdup("");
    return r;
}

/* A batch owned through protobuf-c's own free (every pointer malloc'd). */
Keyload__V1__BatchRequest *batch_new(const uint8_t cmd[16])
{
    Keyload__V1__BatchRequest *b = calloc(1, sizeof *b);
    keyload__v1__batch_request__init(b);
    b->command_id.data = malloc(16);
    b->command_id.len = 16;
    if (cmd)
        memcpy(b->command_id.data, cmd, 16);
    else
        kl_guid_random(b->command_id.data);
    b->mutations = calloc(1000, sizeof *b->mutations);
    return b;
}

Keyload__V1__Mutation *add_mut(Keyload__V1__BatchRequest *b)
{
    Keyload__V1__Mutation *m = calloc(1, sizeof *m);
    keyload__v1__mutation__init(m);
    b->mutations[b->n_mutations++] = m;
    return m;
}

void add_create(Keyload__V1__BatchRequest *b, const char *queue, uint64_t max_messages)
{
    Keyload__V1__Mutation *m = add_mut(b);
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE;
    m->create_queue = calloc(1, sizeof *m->create_queue);
    keyload__v1__create_queue__init(m->create_queue);
    m->create_queue->queue = mkref(queue);
    m->create_queue->limits = calloc(1, sizeof *m->create_queue->limits);
    keyload__v1__queue_limits__init(m->create_queue->limits);
    m->create_queue->limits->max_messages = max_messages;
    m->create_queue->limits->dead_letter_queue = strdup("");
}

void add_create_database(Keyload__V1__BatchRequest *b)
{
    Keyload__V1__Mutation *m = add_mut(b);
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_DATABASE;
    m->create_database = calloc(1, sizeof *m->create_database);
    keyload__v1__create_database__init(m->create_database);
    m->create_database->tenant = strdup("default");
    m->create_database->database = strdup("default");
}

void add_enqueue(Keyload__V1__BatchRequest *b, const char *queue, const char *body)
{
    Keyload__V1__Mutation *m = add_mut(b);
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_ENQUEUE;
    m->enqueue = calloc(1, sizeof *m->enqueue);
    keyload__v1__enqueue__init(m->enqueue);
    m->enqueue->lane = mkref(queue);
    m->enqueue->message = calloc(1, sizeof *m->enqueue->message);
    keyload__v1__enqueue_message__init(m->enqueue->message);
    m->enqueue->message->body.len = strlen(body);
    m->enqueue->message->body.data = (uint8_t *)strdup(body);
}

void add_receive(Keyload__V1__BatchRequest *b, const char *queue, uint32_t max, uint32_t lease_ms)
{
    Keyload__V1__Mutation *m = add_mut(b);
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_RECEIVE;
    m->receive = calloc(1, sizeof *m->receive);
    keyload__v1__receive__init(m->receive);
    m->receive->lane = mkref(queue);
    m->receive->max_messages = max;
    m->receive->lease_ms = lease_ms;
}

uint8_t *pack_free(Keyload__V1__BatchRequest *b, size_t *len)
{
    *len = keyload__v1__batch_request__get_packed_size(b);
    uint8_t *buf = malloc(*len);
    keyload__v1__batch_request__pack(b, buf);
    keyload__v1__batch_request__free_unpacked(b, NULL);
    return buf;
}

static answer send_batch(Keyload__V1__BatchRequest *b, int timeout_ms)
{
    size_t len;
    uint8_t *req = pack_free(b, &len);
    answer a = call("keyload.v1.Batch", req, len, timeout_ms);
    free(req);
    return a;
}

size_t pack_stats_request(const char *queue, uint8_t buf[512])
{
    Keyload__V1__QueueStatsRequest q = KEYLOAD__V1__QUEUE_STATS_REQUEST__INIT;
    Keyload__V1__QueueLaneRef r = KEYLOAD__V1__QUEUE_LANE_REF__INIT;
    r.tenant = "default";
    r.database = "default";
    r.queue = (char *)queue;
    q.queue = &r;
    return keyload__v1__queue_stats_request__pack(&q, buf);
}

/* Returns messages held by the queue, or -1 (with the code in *code). */
static long long queue_messages(const char *queue, kl_code *code)
{
    uint8_t buf[512];
    size_t n = pack_stats_request(queue, buf);
    answer a = call("keyload.v1.QueueStats", buf, n, 3000);
    if (code)
        *code = a.code;
    long long m = -1;
    if (a.code == KL_OK) {
        Keyload__V1__QueueStatsAnswer *s = keyload__v1__queue_stats_answer__unpack(NULL, a.len, a.bytes);
        m = (long long)s->messages;
        keyload__v1__queue_stats_answer__free_unpacked(s, NULL);
    }
    answer_free(&a);
    return m;
}

/* ---- daemon lifecycle ---- */

pid_t proc_exec(char *const argv[], const char *log, const char *failpoints, unsigned lifetime_s)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127); /* the parent died before the line above took effect */
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 2);
            dup2(fd, 1);
        }
        /* The harness ignores SIGPIPE, and an ignored signal stays ignored across exec:
         * the daemon must be tested with the default a shell gives it. */
        signal(SIGPIPE, SIG_DFL);
        if (failpoints)
            setenv("KEYLOAD_FAILPOINTS", failpoints, 1);
        else
            unsetenv("KEYLOAD_FAILPOINTS");
        alarm(lifetime_s);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}


static int start_daemon(const char *failpoints)
{
    char log[700];
    snprintf(log, sizeof log, "%s/daemon.log", work);
    char *argv[16] = {(char *)daemon_bin, "--cluster", cluster_file, "--node", "p0m1", "--cluster-secret",
                      secret_file};
    int argc = 7;
    if (!start_without_init)
        argv[argc++] = "--init-store";
    if (start_disk_reserve_mb != NULL) {
        argv[argc++] = "--disk-reserve-mb";
        argv[argc++] = (char *)start_disk_reserve_mb;
    }
    if (start_repl_trace != NULL) {
        argv[argc++] = "--repl-trace";
        argv[argc++] = (char *)start_repl_trace;
    }
    argv[argc] = NULL;
    pid_t pid = proc_exec(argv, log, failpoints, PROC_LIFETIME_S);
    daemon_pid = pid;
    int64_t deadline = now_ms() + 20000;
    while (now_ms() < deadline) {
        kl_code code;
        queue_messages("__probe", &code);
        if (code == KL_NOT_FOUND || code == KL_OK)
            return 0;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            daemon_pid = -1;
            fprintf(stderr, "  keyloadd exited during start (status %d); its last log lines:\n", st);
            char cmd[800];
            snprintf(cmd, sizeof cmd, "tail -n 5 '%s' >&2", log);
            if (system(cmd) != 0)
                fprintf(stderr, "  (no log)\n");
            return -1;
        }
        sleep_ms(50);
    }
    fprintf(stderr, "  keyloadd did not answer within 20 s\n");
    return -1;
}

/* Sends sig and reaps; returns the wait status. */
static int stop_daemon(int sig)
{
    if (daemon_pid <= 0)
        return -1;
    kill(daemon_pid, sig);
    int st = 0;
    int64_t deadline = now_ms() + 15000;
    while (waitpid(daemon_pid, &st, WNOHANG) == 0) {
        if (now_ms() > deadline) {
            kill(daemon_pid, SIGKILL);
            waitpid(daemon_pid, &st, 0);
            break;
        }
        sleep_ms(20);
    }
    daemon_pid = -1;
    return st;
}

/* Waits for a daemon that is expected to exit by itself (a failpoint). */
static int wait_daemon_exit(int timeout_ms)
{
    int st = 0;
    int64_t deadline = now_ms() + timeout_ms;
    while (waitpid(daemon_pid, &st, WNOHANG) == 0) {
        if (now_ms() > deadline)
            return stop_daemon(SIGKILL) | 0x10000;
        sleep_ms(20);
    }
    daemon_pid = -1;
    return st;
}

static void fresh_store(const char *name, const char *limits)
{
    char data[700];
    snprintf(data, sizeof data, "%s/%s", work, name);
    static int port_seq;
    /* Below Linux's ephemeral range (32768+), so no client connection holds the port. */
    int port = 21000 + (getpid() % 5000) + (port_seq++ % 50);
    write_cluster(port, data, limits ? limits : "");
}

/* Creates default/default (once per store; CONFLICT after that) and queue q. */
static void create_queue(const char *q, uint64_t max_messages)
{
    Keyload__V1__BatchRequest *b = batch_new(NULL);
    add_create_database(b);
    answer d = send_batch(b, 5000);
    if (d.code != KL_OK && d.code != KL_CONFLICT)
        fprintf(stderr, "  create database: %s %s\n", kl_code_name(d.code), d.err.message);
    answer_free(&d);
    b = batch_new(NULL);
    add_create(b, q, max_messages);
    answer a = send_batch(b, 5000);
    if (a.code != KL_OK)
        fprintf(stderr, "  create queue %s: %s %s\n", q, kl_code_name(a.code), a.err.message);
    answer_free(&a);
}

/* ---- tests ---- */

static void test_kill9_durability(void)
{
    fresh_store("kill9", NULL);
    CHECK(start_daemon(NULL) == 0, "start");
    create_queue("orders", 0);
    uint8_t cmds[10][16];
    answer receipts[10];
    for (int i = 0; i < 10; i++) {
        kl_guid_random(cmds[i]);
        Keyload__V1__BatchRequest *b = batch_new(cmds[i]);
        for (int j = 0; j < 100; j++) {
            char body[32];
            snprintf(body, sizeof body, "m-%d", i * 100 + j);
            add_enqueue(b, "orders", body);
        }
        receipts[i] = send_batch(b, 10000);
        CHECK(receipts[i].code == KL_OK, "batch %d: %s", i, receipts[i].err.message);
    }
    stop_daemon(SIGKILL);
    CHECK(start_daemon(NULL) == 0, "restart after kill -9");
    long long n = queue_messages("orders", NULL);
    CHECK(n == 1000, "messages after restart: %lld", n);
    /* Every acknowledged message is there, none twice, in order. */
    Keyload__V1__BatchRequest *b = batch_new(NULL);
    add_receive(b, "orders", 1000, 60000);
    answer r = send_batch(b, 10000);
    CHECK(r.code == KL_OK, "receive: %s", r.err.message);
    Keyload__V1__BatchReceipt *rc = keyload__v1__batch_receipt__unpack(NULL, r.len, r.bytes);
    Keyload__V1__Received *got = rc->results[0]->received;
    CHECK(got->n_messages == 1000, "received %zu", got->n_messages);
    for (size_t i = 0; i < got->n_messages; i++) {
        char want[32];
        snprintf(want, sizeof want, "m-%zu", i);
        CHECK(got->messages[i]->message_id == i + 1, "id %zu", i);
        CHECK(got->messages[i]->message->body.len == strlen(want) &&
                  memcmp(got->messages[i]->message->body.data, want, strlen(want)) == 0,
              "body of message %zu", i);
    }
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    answer_free(&r);
    /* A replayed command id after restart returns the same receipt bytes and adds nothing. */
    for (int i = 0; i < 10; i += 3) {
        Keyload__V1__BatchRequest *rb = batch_new(cmds[i]);
        for (int j = 0; j < 100; j++) {
            char body[32];
            snprintf(body, sizeof body, "m-%d", i * 100 + j);
            add_enqueue(rb, "orders", body);
        }
        answer again = send_batch(rb, 10000);
        CHECK(again.code == KL_OK, "replay %d: %s", i, again.err.message);
        CHECK(again.len == receipts[i].len && memcmp(again.bytes, receipts[i].bytes, again.len) == 0,
              "replay %d receipt bytes differ", i);
        answer_free(&again);
    }
    n = queue_messages("orders", NULL);
    CHECK(n == 1000, "messages after replays: %lld", n);
    for (int i = 0; i < 10; i++)
        answer_free(&receipts[i]);
    int st = stop_daemon(SIGTERM);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "SIGTERM exit status %d", st);
}

/* Cuts the daemon at a failpoint while a batch is in flight, then checks that a retry
 * with the same command id commits exactly once. durable: whether the cut point is
 * after the log append (the batch must already be there after restart). */
/* The daemon exits at `failpoint` during a two-message batch; `durable`: the batch is in the
 * store after the restart; `answered`: the caller got its OK before the cut (the answer
 * leaves at the commit, the apply after it). A retry with the same command id gets exactly
 * the two messages and, across another restart, the same receipt bytes. */
static void cut_and_retry(const char *failpoint, bool durable, bool answered)
{
    fresh_store(failpoint, NULL);
    CHECK(start_daemon(NULL) == 0, "start");
    create_queue("q", 0);
    stop_daemon(SIGTERM);
    char spec[128];
    snprintf(spec, sizeof spec, "%s=exit", failpoint);
    CHECK(start_daemon(spec) == 0, "start armed");
    uint8_t cmd[16];
    kl_guid_random(cmd);
    Keyload__V1__BatchRequest *b = batch_new(cmd);
    add_enqueue(b, "q", "a");
    add_enqueue(b, "q", "b");
    answer a = send_batch(b, 3000);
    if (answered)
        CHECK(a.code == KL_OK, "the batch cut after its answer was not answered OK: %s", a.err.message);
    else
        CHECK(a.code != KL_OK, "the cut batch was answered OK");
    int st = wait_daemon_exit(10000);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 77, "daemon did not stop at %s (status %d)", failpoint, st);
    CHECK(start_daemon(NULL) == 0, "restart");
    long long n = queue_messages("q", NULL);
    CHECK(n == (durable ? 2 : 0), "%s: %lld messages after restart", failpoint, n);
    b = batch_new(cmd);
    add_enqueue(b, "q", "a");
    add_enqueue(b, "q", "b");
    answer r1 = send_batch(b, 5000);
    CHECK(r1.code == KL_OK, "retry: %s", r1.err.message);
    CHECK(!answered || (r1.len == a.len && memcmp(r1.bytes, a.bytes, a.len) == 0),
          "the retry's receipt differs from the answer given before the cut");
    answer_free(&a);
    n = queue_messages("q", NULL);
    CHECK(n == 2, "%s: %lld messages after retry (want exactly 2)", failpoint, n);
    stop_daemon(SIGKILL);
    CHECK(start_daemon(NULL) == 0, "second restart");
    b = batch_new(cmd);
    add_enqueue(b, "q", "a");
    add_enqueue(b, "q", "b");
    answer r2 = send_batch(b, 5000);
    CHECK(r2.code == KL_OK && r2.len == r1.len && memcmp(r2.bytes, r1.bytes, r1.len) == 0,
          "receipt bytes changed across restart");
    answer_free(&r1);
    answer_free(&r2);
    stop_daemon(SIGTERM);
}

static void test_cut_after_append(void) { cut_and_retry("daemon.after_append_before_reply", true, false); }
static void test_cut_after_reply(void) { cut_and_retry("daemon.after_reply_before_apply", true, true); }
static void test_cut_before_append(void) { cut_and_retry("daemon.before_append", false, false); }

static void test_lease_expiry_redelivers(void)
{
    fresh_store("lease", NULL);
    CHECK(start_daemon(NULL) == 0, "start");
    create_queue("jobs", 0);
    Keyload__V1__BatchRequest *b = batch_new(NULL);
    add_enqueue(b, "jobs", "work");
    answer a = send_batch(b, 5000);
    CHECK(a.code == KL_OK, "enqueue");
    answer_free(&a);
    b = batch_new(NULL);
    add_receive(b, "jobs", 1, 300);
    a = send_batch(b, 5000);
    Keyload__V1__BatchReceipt *rc = keyload__v1__batch_receipt__unpack(NULL, a.len, a.bytes);
    CHECK(rc->results[0]->received->n_messages == 1, "first receive");
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    answer_free(&a);
    b = batch_new(NULL);
    add_receive(b, "jobs", 1, 300);
    a = send_batch(b, 5000);
    rc = keyload__v1__batch_receipt__unpack(NULL, a.len, a.bytes);
    CHECK(rc->results[0]->received->n_messages == 0, "leased message delivered twice");
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    answer_free(&a);
    /* Survives a kill -9 while leased: leases are replicated state. */
    stop_daemon(SIGKILL);
    CHECK(start_daemon(NULL) == 0, "restart");
    sleep_ms(400);
    b = batch_new(NULL);
    add_receive(b, "jobs", 1, 300);
    a = send_batch(b, 5000);
    rc = keyload__v1__batch_receipt__unpack(NULL, a.len, a.bytes);
    CHECK(rc->results[0]->received->n_messages == 1, "not redelivered after lease expiry");
    CHECK(rc->results[0]->received->messages[0]->delivery_count == 2, "delivery count %u",
          rc->results[0]->received->messages[0]->delivery_count);
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    answer_free(&a);
    stop_daemon(SIGTERM);
}

static void test_quota_refusals_change_nothing(void)
{
    fresh_store("quota", NULL);
    CHECK(start_daemon(NULL) == 0, "start");
    create_queue("small", 5);
    Keyload__V1__BatchRequest *b = batch_new(NULL);
    for (int i = 0; i < 6; i++)
        add_enqueue(b, "small", "x");
    answer a = send_batch(b, 5000);
    CHECK(a.code == KL_RESOURCE_EXHAUSTED, "6 into 5: %s", kl_code_name(a.code));
    CHECK(strstr(a.err.message, "max_messages") != NULL, "message names the limit: %s", a.err.message);
    answer_free(&a);
    CHECK(queue_messages("small", NULL) == 0, "refused batch left messages");
    b = batch_new(NULL);
    for (int i = 0; i < 5; i++)
        add_enqueue(b, "small", "x");
    a = send_batch(b, 5000);
    CHECK(a.code == KL_OK, "5 into 5: %s", a.err.message);
    answer_free(&a);
    b = batch_new(NULL);
    add_enqueue(b, "small", "x");
    a = send_batch(b, 5000);
    CHECK(a.code == KL_RESOURCE_EXHAUSTED, "6th: %s", kl_code_name(a.code));
    answer_free(&a);
    stop_daemon(SIGKILL);
    CHECK(start_daemon(NULL) == 0, "restart");
    CHECK(queue_messages("small", NULL) == 5, "count after restart");
    stop_daemon(SIGTERM);
}

/* Sends raw bytes on a REQ socket and decodes the answer. */
static int raw_call(const uint8_t *bytes, size_t len, Keyload__V1__Answer **out)
{
    nng_socket s;
    if (nng_req0_open(&s) != 0)
        return -1;
    nng_setopt_ms(s, NNG_OPT_RECVTIMEO, 5000);
    nng_setopt_size(s, NNG_OPT_RECVMAXSZ, 0);
    int rc = nng_dial(s, url, NULL, 0);
    if (rc == 0)
        rc = nng_send(s, (void *)bytes, len, 0);
    void *buf = NULL;
    size_t n = 0;
    if (rc == 0)
        rc = nng_recv(s, &buf, &n, NNG_FLAG_ALLOC);
    if (rc == 0) {
        *out = keyload__v1__answer__unpack(NULL, n, buf);
        nng_free(buf, n);
    }
    nng_close(s);
    return rc == 0 && *out ? 0 : -1;
}

static void test_bad_input(void)
{
    fresh_store("bad", "\"MaxBatchBytes\":10000,\"MaxFrameBytes\":20000");
    CHECK(start_daemon(NULL) == 0, "start");
    create_queue("q", 0);
    Keyload__V1__Answer *a = NULL;
    CHECK(raw_call((const uint8_t *)"\x0a\xff\xff\xff\x0f garbage", 14, &a) == 0, "garbage frame got no answer");
    CHECK(a->code == KEYLOAD__V1__STATUS_CODE__INVALID_ARGUMENT, "garbage: code %d", a->code);
    keyload__v1__answer__free_unpacked(a, NULL);
    /* Unknown method. */
    Keyload__V1__Envelope e = KEYLOAD__V1__ENVELOPE__INIT;
    e.version = 1;
    e.method = "keyload.v1.NoSuchThing";
    e.request_id = 5;
    uint8_t buf[256];
    size_t n = keyload__v1__envelope__pack(&e, buf);
    CHECK(raw_call(buf, n, &a) == 0, "unknown method got no answer");
    CHECK(a->code == KEYLOAD__V1__STATUS_CODE__NOT_FOUND, "unknown method: code %d", a->code);
    CHECK(strstr(a->message, "keyload.v1.NoSuchThing") != NULL, "message: %s", a->message);
    keyload__v1__answer__free_unpacked(a, NULL);
    /* Oversized frame. */
    size_t big = 30000;
    uint8_t *payload = calloc(1, big);
    e.method = "keyload.v1.Batch";
    e.payload.data = payload;
    e.payload.len = big;
    n = keyload__v1__envelope__get_packed_size(&e);
    uint8_t *frame = malloc(n);
    keyload__v1__envelope__pack(&e, frame);
    int rc = raw_call(frame, n, &a);
    free(frame);
    free(payload);
    CHECK(rc == 0, "oversized frame got no answer");
    CHECK(a->code == KEYLOAD__V1__STATUS_CODE__RESOURCE_EXHAUSTED, "oversized: code %d", a->code);
    keyload__v1__answer__free_unpacked(a, NULL);
    /* Batch over MaxBatchBytes but under the frame limit. */
    Keyload__V1__BatchRequest *b = batch_new(NULL);
    char *body = malloc(12001);
    memset(body, 'b', 12000);
    body[12000] = 0;
    add_enqueue(b, "q", body);
    free(body);
    answer r = send_batch(b, 5000);
    CHECK(r.code == KL_RESOURCE_EXHAUSTED && strstr(r.err.message, "MaxBatchBytes"), "big batch: %s %s",
          kl_code_name(r.code), r.err.message);
    answer_free(&r);
    /* Invalid GUID and a bad name: clear refusals. */
    uint8_t zero[16] = {0};
    b = batch_new(zero);
    add_enqueue(b, "q", "x");
    r = send_batch(b, 5000);
    CHECK(r.code == KL_INVALID_ARGUMENT && strstr(r.err.message, "command_id"), "zero guid: %s", r.err.message);
    answer_free(&r);
    b = batch_new(NULL);
    add_enqueue(b, "bad/name", "x");
    r = send_batch(b, 5000);
    CHECK(r.code == KL_INVALID_ARGUMENT, "bad name: %s", kl_code_name(r.code));
    answer_free(&r);
    /* Still alive and unchanged. */
    CHECK(queue_messages("q", NULL) == 0, "bad input changed state");
    int st = stop_daemon(SIGTERM);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "daemon did not survive bad input (status %d)", st);
}

/* Connections that send requests and close before the answers come: the answers' writes
 * fail with EPIPE (a FIN and then the closed socket's RST), which must close those
 * connections only. Each round sends RESET_CALLS enqueues on a fresh raw connection (more
 * than one write of answers carries, so a connection meets a second write after the
 * first drew the RST), reads the hello and closes at once; the daemon must then still
 * be running and answer. */
#define RESET_CALLS 200
static void test_reset_clients(void)
{
    fresh_store("reset", NULL);
    CHECK(start_daemon(NULL) == 0, "start");
    create_queue("q", 0);
    const char *colon = strrchr(url, ':');
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const uint8_t hello[8] = {0, 'S', 'P', 0, 0, 0x30, 0, 0};
    for (int round = 0; round < 40 && failures_in_test == 0; round++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        CHECK(fd >= 0, "socket: %s", strerror(errno));
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
            close(fd);
            break; /* refused: the daemon's state is checked below */
        }
        struct timeval tv = {.tv_sec = 5};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        uint8_t rep[8];
        if (send(fd, hello, sizeof hello, MSG_NOSIGNAL) != (ssize_t)sizeof hello ||
            recv(fd, rep, sizeof rep, MSG_WAITALL) != (ssize_t)sizeof rep) {
            close(fd);
            break; /* no hello: the daemon's state is checked below */
        }
        for (uint32_t i = 0; i < RESET_CALLS; i++) {
            Keyload__V1__BatchRequest *b = batch_new(NULL);
            add_enqueue(b, "q", "owed");
            size_t blen;
            uint8_t *breq = pack_free(b, &blen);
            Keyload__V1__Envelope e = KEYLOAD__V1__ENVELOPE__INIT;
            e.version = 1;
            e.method = "keyload.v1.Batch";
            e.request_id = i + 1;
            e.payload.data = breq;
            e.payload.len = blen;
            size_t elen = keyload__v1__envelope__get_packed_size(&e);
            uint8_t *frame = malloc(8 + 4 + elen);
            uint64_t flen = 4 + elen;
            for (int k = 0; k < 8; k++)
                frame[k] = (uint8_t)(flen >> (56 - 8 * k));
            uint32_t id = 0x80000000u | (uint32_t)(round * RESET_CALLS + i + 1);
            for (int k = 0; k < 4; k++)
                frame[8 + k] = (uint8_t)(id >> (24 - 8 * k));
            keyload__v1__envelope__pack(&e, frame + 12);
            CHECK(send(fd, frame, 12 + elen, MSG_NOSIGNAL) == (ssize_t)(12 + elen), "request %u", i);
            free(frame);
            free(breq);
        }
        close(fd);
        if (round % 8 == 7)
            sleep_ms(20); /* let some rounds' answers meet closed sockets, others racing ones */
    }
    sleep_ms(500);
    int ended = 0;
    if (waitpid(daemon_pid, &ended, WNOHANG) != 0) {
        daemon_pid = -1; /* reaped here */
        CHECK(false, "the daemon ended (%s %d) while clients went away with answers owed",
              WIFSIGNALED(ended) ? "signal" : "exit status", WIFSIGNALED(ended) ? WTERMSIG(ended) : WEXITSTATUS(ended));
    }
    long long n = queue_messages("q", NULL);
    CHECK(n >= 0 && n <= 40 * RESET_CALLS, "messages after the rounds: %lld", n);
    int st = stop_daemon(SIGTERM);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d after the rounds", st);
}

static void test_refuses_non_store_dir(void)
{
    /* Format-flag refusal is covered at the store level by the unit suite; here the
     * process must refuse a data directory that is not a store, without crashing. */
    fresh_store("flags", NULL);
    char cmd[3000];
    /* The daemon's --data points at a directory that is not a store: it must refuse
     * cleanly rather than crash. */
    snprintf(cmd, sizeof cmd, "%s/notastore", work);
    FILE *f = fopen(cmd, "w");
    fputs("x", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s --cluster %s --node p0m1 --data %s/notastore 2>%s/refuse.log",
             daemon_bin, cluster_file, work, work);
    int st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0, "daemon accepted a file as its data directory");
}

/* Runs keyloadd (bounded by 20 s) with the arguments after the binary; its stderr into
 * out. Returns its exit status (-1 when it did not exit by itself). */
static int run_refused(char *out, size_t cap, const char *fmt, ...)
{
    char args[2000], cmd[3400], log[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(log, sizeof log, "%s/refused.log", work);
    snprintf(cmd, sizeof cmd, "timeout -s KILL 20 '%s' %s >'%s' 2>&1", daemon_bin, args, log);
    int st = system(cmd);
    out[0] = '\0';
    FILE *f = fopen(log, "r");
    if (f) {
        size_t n = fread(out, 1, cap - 1, f);
        out[n] = '\0';
        fclose(f);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Flips one byte halfway through the records of the newest journal segment of a data
 * directory (records end at the last nonzero byte: the rest of a segment is zeros).
 * 0 on success. */
static int journal_flip_middle(const char *data)
{
    char cmd[900], path[1200];
    snprintf(cmd, sizeof cmd, "ls '%s'/journal/*.seg 2>/dev/null | tail -n 1", data);
    FILE *p = popen(cmd, "r");
    if (p == NULL || fgets(path, sizeof path, p) == NULL) {
        if (p)
            pclose(p);
        return -1;
    }
    pclose(p);
    path[strcspn(path, "\n")] = '\0';
    FILE *f = fopen(path, "r+b");
    if (f == NULL)
        return -1;
    long end = test_data_end(f);
    int c;
    int rc = -1;
    if (end > 4096 && fseek(f, end / 2, SEEK_SET) == 0 && (c = fgetc(f)) != EOF &&
        fseek(f, end / 2, SEEK_SET) == 0 && fputc(c ^ 0x40, f) != EOF)
        rc = 0;
    fclose(f);
    return rc;
}

/* A synced log record damaged while the member was down (one byte flipped in the middle
 * of its journal's records, after kill -9): the member refuses to start, exit 2, naming
 * journal_corrupt and its directory, instead of dropping that record and the ones after it.
 * A torn last record (a write whose sync never returned) is the unit tests' case. */
static void test_journal_damage_refused(void)
{
    fresh_store("jdmg", NULL);
    char data[700], cmd[1600], out[4096];
    snprintf(data, sizeof data, "%s/jdmg", work);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", data);
    CHECK(system(cmd) == 0, "rm");
    CHECK(start_daemon(NULL) == 0, "start");
    create_queue("q", 0);
    for (int i = 0; i < 40; i++) {
        Keyload__V1__BatchRequest *b = batch_new(NULL);
        add_enqueue(b, "q", "a message whose record is in the journal");
        answer a = send_batch(b, 5000);
        CHECK(a.code == KL_OK, "enqueue %d: %s", i, a.err.message);
        answer_free(&a);
    }
    stop_daemon(SIGKILL);
    CHECK(journal_flip_middle(data) == 0, "no journal segment with records under %s/journal", data);
    int rc = run_refused(out, sizeof out, "--cluster '%s' --node p0m1 --cluster-secret '%s'", cluster_file,
                         secret_file);
    CHECK(rc == 2, "a member with a damaged journal started (exit %d): %s", rc, out);
    CHECK(strstr(out, "journal_corrupt") && strstr(out, data) && strstr(out, "Recovering a member"),
          "the refusal does not name journal_corrupt, the directory and what to do: %s", out);
}

static void test_store_identity(void)
{
    fresh_store("ident", NULL);
    char data[700], cmd[1600], out[4096], other[700];
    snprintf(data, sizeof data, "%s/ident", work);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", data);
    CHECK(system(cmd) == 0, "rm");
    /* An empty directory without --init-store: refused, nothing created. */
    int rc = run_refused(out, sizeof out, "--cluster '%s' --node p0m1 --cluster-secret '%s'", cluster_file,
                         secret_file);
    CHECK(rc == 2, "a member without a store started without --init-store (exit %d): %s", rc, out);
    CHECK(strstr(out, "p0m1") && strstr(out, "--init-store") && strstr(out, "voted") && strstr(out, data),
          "the refusal does not name the member, the flag, the reason and the directory: %s", out);
    snprintf(cmd, sizeof cmd, "%s/CURRENT", data);
    CHECK(access(cmd, F_OK) != 0, "the refused start created a store");
    /* First start with --init-store, one message; later starts without it keep it. */
    CHECK(start_daemon(NULL) == 0, "start with --init-store");
    create_queue("q", 0);
    Keyload__V1__BatchRequest *b = batch_new(NULL);
    add_enqueue(b, "q", "kept");
    answer a = send_batch(b, 5000);
    CHECK(a.code == KL_OK, "enqueue: %s", a.err.message);
    answer_free(&a);
    CHECK(stop_daemon(SIGTERM) == 0, "stop");
    start_without_init = true;
    CHECK(start_daemon(NULL) == 0, "restart without --init-store");
    CHECK(queue_messages("q", NULL) == 1, "the message is not there after the restart");
    stop_daemon(SIGTERM);
    start_without_init = false;
    CHECK(start_daemon(NULL) == 0, "--init-store on the member's own store is refused");
    CHECK(queue_messages("q", NULL) == 1, "--init-store on the member's own store changed it");
    stop_daemon(SIGTERM);
    /* Wiped: the directory emptied (as by a disk replacement) is refused, not a new member. */
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir '%s'", data, data);
    CHECK(system(cmd) == 0, "wipe");
    rc = run_refused(out, sizeof out, "--cluster '%s' --node p0m1 --cluster-secret '%s'", cluster_file,
                     secret_file);
    CHECK(rc == 2 && strstr(out, "wiped"), "a wiped member started (exit %d): %s", rc, out);
    /* Another partition's directory: refused naming both, with --init-store too. */
    CHECK(start_daemon(NULL) == 0, "start again with --init-store");
    stop_daemon(SIGTERM);
    snprintf(other, sizeof other, "%s/ident2.json", work);
    FILE *f = fopen(other, "w");
    fprintf(f, "{\"cluster\":\"proctest\",\"replica_count\":1,\"insecure_local_admin\":true,\"partitions\":["
               "{\"id\":0,\"members\":[{\"id\":1,\"client\":\"%s\",\"data\":\"%s/unused\"}]},"
               "{\"id\":1,\"members\":[{\"id\":1,\"client\":\"tcp://127.0.0.1:1\",\"data\":\"%s\"}]}]}\n",
            url, work, data);
    fclose(f);
    for (int init = 0; init < 2; init++) {
        rc = run_refused(out, sizeof out, "--cluster '%s' --node p1m1 --cluster-secret '%s'%s", other, secret_file,
                         init ? " --init-store" : "");
        CHECK(rc == 2, "p1m1 started on p0m1's directory (init %d, exit %d): %s", init, rc, out);
        CHECK(strstr(out, "partition 0 member 1") && strstr(out, "partition 1 member 1") && strstr(out, data),
              "the refusal does not name both identities and the directory: %s", out);
    }
    /* The same cluster name with another secret: another cluster. */
    snprintf(cmd, sizeof cmd, "%s/other.secret", work);
    f = fopen(cmd, "w");
    fputs("0123456789abcdef0123456789abcdef", f);
    fclose(f);
    chmod(cmd, 0600);
    rc = run_refused(out, sizeof out, "--cluster '%s' --node p0m1 --cluster-secret '%s'", cluster_file, cmd);
    CHECK(rc == 2 && strstr(out, "cluster 'proctest'"), "a store of another cluster secret was served (exit %d): %s",
          rc, out);
}

/* ---- a full disk: the store on a small loop-mounted ext4 image ---- */

static char disk_img[700], disk_mnt[700], disk_loop[64];

/* Unmounts, detaches and deletes whatever disk_setup made (also after a failed check). */
static void disk_cleanup(void)
{
    char cmd[3000];
    if (disk_mnt[0]) {
        snprintf(cmd, sizeof cmd, "umount '%s' 2>/dev/null || umount -l '%s' 2>/dev/null; rmdir '%s' 2>/dev/null",
                 disk_mnt, disk_mnt, disk_mnt);
        if (system(cmd) != 0)
            fprintf(stderr, "  cleanup: could not unmount %s\n", disk_mnt);
        disk_mnt[0] = '\0';
    }
    if (disk_loop[0]) {
        snprintf(cmd, sizeof cmd, "losetup -d '%s'", disk_loop);
        if (system(cmd) != 0)
            fprintf(stderr, "  cleanup: could not detach %s\n", disk_loop);
        disk_loop[0] = '\0';
    }
    if (disk_img[0]) {
        unlink(disk_img);
        disk_img[0] = '\0';
    }
}

/* A 64 MiB ext4 image on its own loop device, mounted at work/diskfull. */
static bool disk_setup(void)
{
    snprintf(disk_img, sizeof disk_img, "%s/diskfull.img", work);
    char cmd[3000];
    snprintf(cmd, sizeof cmd, "truncate -s 64M '%s'", disk_img);
    if (system(cmd) != 0)
        return false;
    snprintf(cmd, sizeof cmd, "timeout 20 losetup --find --show '%s'", disk_img);
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return false;
    bool got = fgets(disk_loop, sizeof disk_loop, p) != NULL;
    if (pclose(p) != 0 || !got) {
        disk_loop[0] = '\0';
        return false;
    }
    disk_loop[strcspn(disk_loop, "\n")] = '\0';
    snprintf(disk_mnt, sizeof disk_mnt, "%s/diskfull", work);
    snprintf(cmd, sizeof cmd, "timeout 30 mkfs.ext4 -q -F '%s' && mkdir -p '%s' && timeout 20 mount '%s' '%s'",
             disk_loop, disk_mnt, disk_loop, disk_mnt);
    if (system(cmd) != 0) {
        rmdir(disk_mnt);
        disk_mnt[0] = '\0';
        return false;
    }
    return true;
}

static uint64_t disk_free_mb(void)
{
    struct statvfs sv;
    if (statvfs(disk_mnt, &sv) != 0)
        return 0;
    return (uint64_t)sv.f_bavail * sv.f_frsize >> 20;
}

static answer enqueue_one(const char *body)
{
    Keyload__V1__BatchRequest *b = batch_new(NULL);
    add_enqueue(b, "q", body);
    return send_batch(b, 5000);
}

/* keyloadd --repl-trace 1 samples every index: the lone member logs a "repl trace" line per
 * index with its own stamps and a "batch trace" line per answered batch, and
 * tests/bench/repl_trace.sh joins them into the server's legs (arrival to proposal to
 * answer). A value that is not a number of indexes is refused at start (exit 2). */
static void test_repl_trace_logged(void)
{
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "'%s' --repl-trace abc >/dev/null 2>&1", daemon_bin);
    int st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2, "--repl-trace abc: status %d, want exit 2", st);
    fresh_store("trace", NULL);
    start_repl_trace = "1";
    int started = start_daemon(NULL);
    start_repl_trace = NULL;
    CHECK(started == 0, "start with --repl-trace 1");
    create_queue("q", 0);
    for (int i = 0; i < 12; i++) {
        answer a = enqueue_one("traced");
        CHECK(a.code == KL_OK, "enqueue %d: %s", i, a.err.message);
        answer_free(&a);
    }
    stop_daemon(SIGTERM);
    snprintf(cmd, sizeof cmd, "bash tests/bench/repl_trace.sh '%s/daemon.log' 2>&1", work);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL, "popen repl_trace.sh");
    char out[16384];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    st = pclose(p);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "repl_trace.sh: status %d: %.400s", st, out);
    CHECK(strstr(out, "leader: own write (start -> done)") != NULL, "no own-write leg: %.400s", out);
    const char *leg = strstr(out, "server: arrived -> answered");
    CHECK(leg != NULL, "no server leg: %.600s", out);
    int legs = 0, p50 = -1;
    const char *np = strstr(leg, "n=");
    const char *pp = strstr(leg, "p50=");
    CHECK(np != NULL && pp != NULL && sscanf(np, "n=%d", &legs) == 1 && sscanf(pp, "p50=%d", &p50) == 1,
          "unreadable leg: %.200s", leg);
    CHECK(legs >= 12, "%d batches joined to their index, want at least the 12 enqueues", legs);
    CHECK(p50 > 0, "arrived -> answered p50 %d us", p50);
    CHECK(strstr(out, "transit out") == NULL && strstr(out, ", 0 follower records") != NULL,
          "a lone member reported a follower: %.400s", out);
}

/* The leader refuses batches with UNAVAILABLE "disk_full" before proposing anything while
 * its file system is below the reserve, keeps serving reads, and writes again once space
 * returns; the refused batches left nothing behind. */
static void test_disk_full(void)
{
    CHECK(disk_setup(), "could not make and mount a loop ext4 image (needs root, losetup, mkfs.ext4)");
    char data[800], filler[800], cmd[3000];
    snprintf(data, sizeof data, "%s/data", disk_mnt);
    snprintf(filler, sizeof filler, "%s/filler", disk_mnt);
    static int port_seq;
    write_cluster(22000 + (getpid() % 5000) + (port_seq++ % 50), data, "");
    start_disk_reserve_mb = "16";
    int started = start_daemon(NULL);
    start_disk_reserve_mb = NULL;
    CHECK(started == 0, "start on the loop file system");
    create_queue("q", 0);
    answer a = enqueue_one("before");
    CHECK(a.code == KL_OK, "enqueue with space: %s %s", kl_code_name(a.code), a.err.message);
    answer_free(&a);
    uint64_t free_mb = disk_free_mb();
    CHECK(free_mb > 24, "only %llu MiB free on a fresh 64 MiB image", (unsigned long long)free_mb);
    /* Leave 8 MiB: under the 16 MiB reserve, room for what RocksDB still writes. */
    snprintf(cmd, sizeof cmd, "fallocate -l %lluM '%s'", (unsigned long long)(free_mb - 8), filler);
    CHECK(system(cmd) == 0, "fallocate");
    sleep_ms(400); /* past the daemon's 250 ms free-space cache */
    for (int i = 0; i < 3; i++) {
        a = enqueue_one("refused");
        CHECK(a.code == KL_UNAVAILABLE && strcmp(a.err.detail, "disk_full") == 0,
              "enqueue on a full disk: %s detail %s (%s)", kl_code_name(a.code), a.err.detail, a.err.message);
        CHECK(strstr(a.err.message, "reserve") != NULL && strstr(a.err.message, "16 MiB") != NULL,
              "the refusal does not name the reserve: %s", a.err.message);
        answer_free(&a);
    }
    CHECK(queue_messages("q", NULL) == 1, "reads stop or see a refused write while the disk is full");
    int st;
    CHECK(waitpid(daemon_pid, &st, WNOHANG) == 0, "the daemon exited on a full disk");
    uint64_t refused_free = disk_free_mb();
    unlink(filler);
    int64_t back = now_ms(), deadline = back + 5000;
    kl_code code = KL_UNAVAILABLE;
    while (code != KL_OK && now_ms() < deadline) {
        a = enqueue_one("after");
        code = a.code;
        answer_free(&a);
        if (code != KL_OK)
            sleep_ms(100);
    }
    CHECK(code == KL_OK, "no write accepted within 5 s of freeing space: %s", kl_code_name(code));
    CHECK(queue_messages("q", NULL) == 2, "messages after the refusals: want 2 (before, after)");
    printf("  disk full: refused while %llu MiB free (reserve 16), writing again %lld ms after space returned\n",
           (unsigned long long)refused_free, (long long)(now_ms() - back));
    CHECK(stop_daemon(SIGTERM) == 0, "stop");
    /* Without a reserve the write itself hits ENOSPC: the member exits (1) without answering
     * OK, and after space returns it restarts with every acknowledged message. */
    start_without_init = true;
    start_disk_reserve_mb = "0";
    started = start_daemon(NULL);
    start_disk_reserve_mb = NULL;
    CHECK(started == 0, "restart without a reserve");
    snprintf(cmd, sizeof cmd, "fallocate -l %lluM '%s'; dd if=/dev/zero of='%s.tail' bs=4k 2>/dev/null; sync",
             (unsigned long long)disk_free_mb(), filler, filler);
    CHECK(system(cmd) >= 0, "fill");
    /* Large bodies: RocksDB preallocates the WAL, so small writes would fit in space it
     * already holds. 100 x 200 KiB is past any preallocation of an 8 MiB memtable. */
    int ok_on_full = 0;
    static char body[200 << 10];
    memset(body, 'z', sizeof body - 1);
    for (int i = 0; i < 100; i++) {
        int64_t t0 = now_ms();
        a = enqueue_one(body);
        ok_on_full += a.code == KL_OK;
        answer_free(&a);
        siginfo_t info = {0};
        if (waitid(P_PID, (id_t)daemon_pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0)
            break; /* exited; wait_daemon_exit reaps it */
        if (now_ms() - t0 > 4000)
            break;
    }
    st = wait_daemon_exit(5000);
    start_without_init = false;
    CHECK(!(st & 0x10000), "the daemon kept running on a full disk");
    /* Exit code 1 from repl_fatal, or SIGABRT: this RocksDB build asserts inside the write
     * that failed on ENOSPC before returning the error. Either way nothing was answered OK
     * for it and the process is gone. */
    CHECK((WIFEXITED(st) && WEXITSTATUS(st) == 1) || (WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT),
          "status %d on ENOSPC, want exit code 1 or SIGABRT", st);
    snprintf(cmd, sizeof cmd, "%s.tail", filler);
    unlink(cmd);
    unlink(filler);
    start_without_init = true;
    started = start_daemon(NULL);
    start_without_init = false;
    CHECK(started == 0, "restart after space returned");
    long long n = queue_messages("q", NULL);
    CHECK(n >= 2 + ok_on_full, "messages after the ENOSPC exit: %lld, want at least %d", n, 2 + ok_on_full);
    printf("  ENOSPC on the write: %s after %d acknowledged writes on the full disk, all %lld there\n",
           WIFEXITED(st) ? "exit code 1" : "SIGABRT (RocksDB assertion)", ok_on_full, n);
    CHECK(stop_daemon(SIGTERM) == 0, "stop");
}

/* ---- replica groups: several keyloadd members of one partition ---- */

#define GROUP_MAX 4
static int group_n;
static char group_url[GROUP_MAX][128];
static pid_t group_pid[GROUP_MAX];

static void write_group(const char *name, int n, int replica_count)
{
    static int group_seq;
    int base = 30000 + (getpid() % 300) * 3 + (group_seq++ % 2) * 1000; /* 30000..31999 */
    group_n = n;
    snprintf(cluster_file, sizeof cluster_file, "%s/%s.json", work, name);
    FILE *f = fopen(cluster_file, "w");
    fprintf(f, "{\"cluster\":\"%s\",\"replica_count\":%d,\"insecure_local_admin\":true,"
               "\"timers\":{\"tick_ms\":50,\"election_ms\":1000,\"heartbeat_ms\":150},"
               "\"partitions\":[{\"id\":0,\"members\":[", name, replica_count);
    for (int i = 0; i < n; i++) {
        snprintf(group_url[i], sizeof group_url[i], "tcp://127.0.0.1:%d", base + i);
        fprintf(f, "%s{\"id\":%d,\"client\":\"%s\",\"peer\":\"tcp://127.0.0.1:%d\",\"data\":\"%s/%s-m%d\"}",
                i ? "," : "", i + 1, group_url[i], base + 100 + i, work, name, i + 1);
        group_pid[i] = -1;
    }
    fprintf(f, "]}]}\n");
    fclose(f);
}

pid_t spawn_keyloadd(const char *cluster, int partition, int member, const char *secret, const char *member_key)
{
    char log[700], node[16];
    snprintf(log, sizeof log, "%s/%s-p%dm%d.log", work, strrchr(cluster, '/') ? strrchr(cluster, '/') + 1 : cluster,
             partition, member);
    snprintf(node, sizeof node, "p%dm%d", partition, member);
    const char *argv[] = {daemon_bin, "--cluster", cluster, "--node", node, "--cluster-secret", secret,
                          "--init-store", member_key ? "--member-key" : NULL, member_key, NULL};
    return proc_exec((char *const *)argv, log, NULL, PROC_LIFETIME_S);
}

bool member_keygen(const char *path, char *pub_b64, size_t cap)
{
    unlink(path);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "'%s' keygen --secret-out '%s'", daemon_bin, path);
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return false;
    char line[128] = "";
    bool got = fgets(line, sizeof line, p) != NULL;
    if (pclose(p) != 0 || !got)
        return false;
    line[strcspn(line, "\r\n")] = '\0';
    snprintf(pub_b64, cap, "%s", line);
    return strlen(line) == 44;
}

bool keygen_files(const char *secret_path, const char *member_key_path, char *pub_b64, size_t cap)
{
    unlink(secret_path);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "'%s' keygen --cluster-secret-out '%s' >/dev/null", daemon_bin, secret_path);
    if (system(cmd) != 0)
        return false;
    return member_keygen(member_key_path, pub_b64, cap);
}

pid_t spawn_member(const char *cluster, int partition, int member)
{
    return spawn_keyloadd(cluster, partition, member, secret_file, NULL);
}

static const char *group_failpoints; /* armed in every member group_start starts */

static void group_start(int i)
{
    if (group_failpoints == NULL) {
        group_pid[i] = spawn_member(cluster_file, 0, i + 1);
        return;
    }
    char node[16], log[700];
    snprintf(node, sizeof node, "p0m%d", i + 1);
    snprintf(log, sizeof log, "%s/%s-p0m%d.log", work, strrchr(cluster_file, '/') + 1, i + 1);
    char *argv[] = {(char *)daemon_bin, "--cluster", cluster_file, "--node", node, "--cluster-secret",
                    secret_file, "--init-store", NULL};
    group_pid[i] = proc_exec(argv, log, group_failpoints, PROC_LIFETIME_S);
}

static void group_kill(int i, int sig)
{
    if (group_pid[i] <= 0)
        return;
    kill(group_pid[i], sig);
    int st;
    int64_t deadline = now_ms() + 15000;
    while (waitpid(group_pid[i], &st, WNOHANG) == 0) {
        if (now_ms() > deadline) {
            kill(group_pid[i], SIGKILL);
            waitpid(group_pid[i], &st, 0);
            break;
        }
        sleep_ms(20);
    }
    group_pid[i] = -1;
}

static void group_stop_all(void)
{
    for (int i = 0; i < group_n; i++)
        group_kill(i, SIGKILL);
}

/* Sends to the member that serves: tries every member until one answers with something other
 * than NOT_LEADER or UNAVAILABLE (no connection, leader not ready), for up to total_ms. A request
 * that got no answer (DEADLINE_EXCEEDED) is returned as is: its outcome is unknown. *who is
 * the member that answered. */
static answer group_call(const char *method, const uint8_t *req, size_t len, int total_ms, int *who)
{
    int64_t deadline = now_ms() + total_ms;
    answer a = {0};
    for (;;) {
        for (int i = 0; i < group_n; i++) {
            if (group_pid[i] <= 0)
                continue;
            snprintf(url, sizeof url, "%s", group_url[i]);
            answer_free(&a);
            a = call(method, req, len, 2000);
            /* UNAVAILABLE: no connection, or refused before anything was proposed. */
            bool elsewhere = a.code == KL_NOT_LEADER || a.code == KL_UNAVAILABLE;
            if (!elsewhere) {
                if (who)
                    *who = i;
                return a;
            }
        }
        if (now_ms() > deadline)
            return a;
        sleep_ms(100);
    }
}

static answer group_batch(Keyload__V1__BatchRequest *b, int total_ms, int *who)
{
    size_t len;
    uint8_t *req = pack_free(b, &len);
    answer a = group_call("keyload.v1.Batch", req, len, total_ms, who);
    free(req);
    return a;
}

static long long group_messages(const char *queue)
{
    uint8_t buf[512];
    size_t n = pack_stats_request(queue, buf);
    answer a = group_call("keyload.v1.QueueStats", buf, n, 20000, NULL);
    long long m = -1;
    if (a.code == KL_OK) {
        Keyload__V1__QueueStatsAnswer *s = keyload__v1__queue_stats_answer__unpack(NULL, a.len, a.bytes);
        m = (long long)s->messages;
        keyload__v1__queue_stats_answer__free_unpacked(s, NULL);
    } else {
        fprintf(stderr, "  stats: %s %s\n", kl_code_name(a.code), a.err.message);
    }
    answer_free(&a);
    return m;
}

/* Starts every member of the group written last, creates default/default and queue q,
 * and returns the member that answered (the leader then), or -1. */
static int group_start_with_queue(const char *q)
{
    for (int i = 0; i < group_n; i++)
        group_start(i);
    int leader = -1;
    for (int step = 0; step < 2; step++) {
        Keyload__V1__BatchRequest *b = batch_new(NULL);
        if (step == 0)
            add_create_database(b);
        else
            add_create(b, q, 0);
        answer a = group_batch(b, 20000, &leader);
        kl_code code = a.code;
        if (code != KL_OK)
            fprintf(stderr, "  %s: %s %s\n", step ? "create queue" : "create database", kl_code_name(code),
                    a.err.message);
        answer_free(&a);
        if (code != KL_OK)
            return -1;
    }
    return leader;
}

/* replica_count 3 of 3: every commit is on all three members. With the leader killed, a
 * new leader is elected but cannot commit (refusing before proposing); once the member is
 * back, writes go on and nothing acknowledged is lost or doubled; receipts replay. */
static void test_group_rf3_all_copies(void)
{
    write_group("rf3", 3, 3);
    int leader = group_start_with_queue("orders");
    CHECK(leader >= 0, "the group did not create its database and queue");
    Keyload__V1__BatchRequest *b;
    answer a;
    uint8_t cmd[16];
    kl_guid_random(cmd);
    answer first = {0};
    for (int i = 0; i < 5; i++) {
        b = batch_new(i == 0 ? cmd : NULL);
        for (int j = 0; j < 20; j++)
            add_enqueue(b, "orders", "x");
        a = group_batch(b, 10000, &leader);
        CHECK(a.code == KL_OK, "batch %d: %s %s", i, kl_code_name(a.code), a.err.message);
        if (i == 0)
            first = a;
        else
            answer_free(&a);
    }
    group_kill(leader, SIGKILL);
    b = batch_new(NULL);
    add_enqueue(b, "orders", "during");
    a = group_batch(b, 3000, NULL);
    CHECK(a.code != KL_OK, "a batch committed with a replica_count-3 member down");
    CHECK(a.code == KL_UNAVAILABLE || a.code == KL_NOT_LEADER || a.code == KL_UNKNOWN_WRITE_OUTCOME ||
              a.code == KL_DEADLINE_EXCEEDED,
          "refusal code %s (%s)", kl_code_name(a.code), a.err.message);
    bool maybe = a.code == KL_UNKNOWN_WRITE_OUTCOME || a.code == KL_DEADLINE_EXCEEDED;
    answer_free(&a);
    group_start(leader);
    b = batch_new(NULL);
    add_enqueue(b, "orders", "after");
    a = group_batch(b, 20000, NULL);
    CHECK(a.code == KL_OK, "after restart: %s %s", kl_code_name(a.code), a.err.message);
    answer_free(&a);
    long long n = group_messages("orders");
    CHECK(n == 101 || (maybe && n == 102), "messages: %lld", n);
    /* The first batch replays byte for byte from whichever member leads now. */
    b = batch_new(cmd);
    for (int j = 0; j < 20; j++)
        add_enqueue(b, "orders", "x");
    a = group_batch(b, 10000, NULL);
    CHECK(a.code == KL_OK && a.len == first.len && memcmp(a.bytes, first.bytes, a.len) == 0,
          "replay after failover differs (%s)", kl_code_name(a.code));
    answer_free(&a);
    answer_free(&first);
    group_stop_all();
}

/* replica_count 3 of 3 with a follower down (KL-2 test c): a batch the leader proposed
 * answers UNKNOWN_WRITE_OUTCOME at its deadline; once the leader knows the member is gone,
 * a new batch is refused before proposing (UNAVAILABLE); when the member returns, the
 * first batch's retry (same command id) answers OK and it took effect exactly once. */
static void test_group_rf3_follower_down(void)
{
    write_group("rf3c", 3, 3);
    int leader = group_start_with_queue("c");
    CHECK(leader >= 0, "the group did not create its database and queue");
    Keyload__V1__BatchRequest *b;
    answer a;
    int down = (leader + 1) % 3;
    group_kill(down, SIGKILL);
    uint8_t cmd[16];
    kl_guid_random(cmd);
    b = batch_new(cmd);
    add_enqueue(b, "c", "one");
    size_t len;
    uint8_t *one = pack_free(b, &len);
    snprintf(url, sizeof url, "%s", group_url[leader]);
    a = call("keyload.v1.Batch", one, len, 1500);
    CHECK(a.code == KL_UNKNOWN_WRITE_OUTCOME && strcmp(a.err.detail, "deadline") == 0,
          "proposed with a member down: %s %s (%s)", kl_code_name(a.code), a.err.detail, a.err.message);
    answer_free(&a);
    sleep_ms(3000); /* two election timeouts: the leader has counted who answers */
    b = batch_new(NULL);
    add_enqueue(b, "c", "two");
    uint8_t *two = pack_free(b, &len);
    size_t two_len = len;
    snprintf(url, sizeof url, "%s", group_url[leader]);
    a = call("keyload.v1.Batch", two, two_len, 1500);
    free(two);
    CHECK(a.code == KL_UNAVAILABLE && strcmp(a.err.detail, "replicas_unavailable") == 0,
          "refused before proposing: %s %s (%s)", kl_code_name(a.code), a.err.detail, a.err.message);
    answer_free(&a);
    group_start(down);
    b = batch_new(cmd);
    add_enqueue(b, "c", "one");
    a = group_batch(b, 20000, NULL);
    CHECK(a.code == KL_OK, "retry after the member returned: %s %s", kl_code_name(a.code), a.err.message);
    answer first = a;
    b = batch_new(cmd);
    add_enqueue(b, "c", "one");
    a = group_batch(b, 20000, NULL);
    CHECK(a.code == KL_OK && a.len == first.len && memcmp(a.bytes, first.bytes, a.len) == 0,
          "second retry differs: %s", kl_code_name(a.code));
    answer_free(&a);
    answer_free(&first);
    free(one);
    long long n = group_messages("c");
    CHECK(n == 1, "messages after the retries: %lld (want exactly 1)", n);
    group_stop_all();
}

/* ---- a follower that missed 10,000 entries (KL-2 test e) ---- */

#define CATCHUP_ENTRIES 10000
#define CATCHUP_THREADS 8

typedef struct {
    const char *url;
    int first, count, acked;
} catchup_writer;

/* Single-message batches over one connection: each commits as its own log entry. */
static void *catchup_write(void *arg)
{
    catchup_writer *w = arg;
    kl_rpc_client *c;
    kl_err err;
    if (kl_rpc_client_open(w->url, 2000, 0, &c, &err) != KL_OK)
        return NULL;
    for (int i = 0; i < w->count; i++) {
        char body[32];
        snprintf(body, sizeof body, "m-%d", w->first + i);
        Keyload__V1__BatchRequest *b = batch_new(NULL);
        add_enqueue(b, "backlog", body);
        size_t len;
        uint8_t *req = pack_free(b, &len);
        uint8_t *ans;
        size_t alen;
        if (kl_rpc_invoke(c, "keyload.v1.Batch", req, len, 10000, &ans, &alen, NULL, 0, &err) == KL_OK) {
            w->acked++;
            free(ans);
        }
        free(req);
    }
    kl_rpc_client_close(c);
    return NULL;
}

Keyload__V1__MemberStatusAnswer *member_status(const char *client_url, int timeout_ms)
{
    snprintf(url, sizeof url, "%.120s", client_url);
    answer a = call("keyload.v1.MemberStatus", NULL, 0, timeout_ms);
    Keyload__V1__MemberStatusAnswer *s = NULL;
    if (a.code == KL_OK)
        s = keyload__v1__member_status_answer__unpack(NULL, a.len, a.bytes);
    answer_free(&a);
    return s;
}

kl_code sdk_bootstrap(const char *cluster_file, const char *secret_file, const char *database,
                      const char *admin_id, const uint8_t admin_pk[32], const char *command_id,
                      kl_receipt **out, kl_err *err)
{
    uint8_t secret[KL_CLUSTER_SECRET_LEN], proof[KL_DIGEST_LEN];
    char tenant[KL_SDK_NAME_MAX + 1];
    const char *slash = strchr(database, '/');
    if (slash == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "database", "database must be TENANT/DB");
    snprintf(tenant, sizeof tenant, "%.*s", (int)(slash - database), database);
    kl_code rc = kl_keys_read_secret_file("cluster secret file", secret_file, secret, sizeof secret, err);
    if (rc != KL_OK)
        return rc;
    int bad = kl_canon_bootstrap_proof(secret, tenant, slash + 1, admin_id, admin_pk, 32, proof);
    sodium_memzero(secret, sizeof secret);
    if (bad)
        return kl_fail(err, KL_INTERNAL, "proof", "kl_canon_bootstrap_proof failed");
    kl_client *c = NULL;
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    rc = kl_client_open(cluster_file, NULL, 15000, &c, err);
    if (rc == KL_OK)
        rc = kl_batch_new(command_id, &b, err);
    if (rc == KL_OK)
        rc = kl_batch_bootstrap(b, database, admin_id, admin_pk, proof, err);
    if (rc == KL_OK)
        rc = kl_client_batch(c, b, &r, err);
    kl_batch_free(b);
    kl_client_close(c);
    if (out != NULL)
        *out = r;
    else
        kl_receipt_free(r);
    return rc;
}

static long long member_applied(int i)
{
    Keyload__V1__MemberStatusAnswer *s = member_status(group_url[i], 1000);
    long long applied = s ? (long long)s->applied_index : -1;
    if (s)
        keyload__v1__member_status_answer__free_unpacked(s, NULL);
    return applied;
}

static void test_group_follower_catches_up(void)
{
    write_group("catchup", 3, 2);
    int leader = group_start_with_queue("backlog");
    CHECK(leader >= 0, "the group did not create its database and queue");
    int behind = (leader + 1) % 3;
    group_kill(behind, SIGKILL);
    catchup_writer w[CATCHUP_THREADS];
    pthread_t th[CATCHUP_THREADS];
    int64_t t0 = now_ms();
    for (int i = 0; i < CATCHUP_THREADS; i++) {
        w[i] = (catchup_writer){.url = group_url[leader], .first = i * (CATCHUP_ENTRIES / CATCHUP_THREADS),
                                .count = CATCHUP_ENTRIES / CATCHUP_THREADS};
        pthread_create(&th[i], NULL, catchup_write, &w[i]);
    }
    int acked = 0;
    for (int i = 0; i < CATCHUP_THREADS; i++) {
        pthread_join(th[i], NULL);
        acked += w[i].acked;
    }
    int64_t t1 = now_ms();
    CHECK(acked == CATCHUP_ENTRIES, "%d of %d batches acknowledged", acked, CATCHUP_ENTRIES);
    long long target = member_applied(leader);
    /* Batches in flight together share log entries, at most one per writer thread each. */
    CHECK(target >= CATCHUP_ENTRIES / CATCHUP_THREADS, "leader applied only %lld", target);
    group_start(behind);
    int64_t deadline = now_ms() + 60000;
    long long got;
    while ((got = member_applied(behind)) < target && now_ms() < deadline)
        sleep_ms(100);
    int64_t t2 = now_ms();
    CHECK(got >= target, "the restarted member applied %lld of %lld entries within 60 s", got, target);
    fprintf(stderr, "  %d batches (%lld entries) written in %lld ms with one member down; it caught up in %lld ms\n",
            CATCHUP_ENTRIES, target, (long long)(t1 - t0), (long long)(t2 - t1));
    /* Its copy is a real one: without the old leader, it and the third member serve all of it. */
    group_kill(leader, SIGKILL);
    long long n = group_messages("backlog");
    CHECK(n == CATCHUP_ENTRIES, "messages after the old leader left: %lld", n);
    group_stop_all();
}

/* replica_count 2 of 3: the leader is killed -9 in the middle of a stream of single-message
 * batches; the two others elect a leader and go on. Every acknowledged message is there
 * exactly once after the old leader comes back (retries reuse their command ids). */
static void test_group_rf2_failover(void)
{
    write_group("rf2", 3, 2);
    int leader = group_start_with_queue("jobs");
    CHECK(leader >= 0, "the group did not create its database and queue");
    Keyload__V1__BatchRequest *b;
    answer a;
    int acked = 0;
    for (int i = 0; i < 60; i++) {
        if (i == 30)
            group_kill(leader, SIGKILL);
        uint8_t cmd[16];
        kl_guid_random(cmd);
        char body[32];
        snprintf(body, sizeof body, "job-%d", i);
        for (int attempt = 0; attempt < 20; attempt++) {
            b = batch_new(cmd);
            add_enqueue(b, "jobs", body);
            a = group_batch(b, 10000, &leader);
            kl_code code = a.code;
            answer_free(&a);
            if (code == KL_OK) {
                acked++;
                break;
            }
            CHECK(code == KL_UNKNOWN_WRITE_OUTCOME || code == KL_DEADLINE_EXCEEDED || code == KL_UNAVAILABLE,
                  "batch %d: %s", i, kl_code_name(code));
        }
    }
    CHECK(acked == 60, "only %d of 60 batches acknowledged", acked);
    for (int i = 0; i < 3; i++)
        if (group_pid[i] <= 0)
            group_start(i);
    b = batch_new(NULL);
    add_receive(b, "jobs", 100, 60000);
    a = group_batch(b, 20000, NULL);
    CHECK(a.code == KL_OK, "receive: %s", kl_code_name(a.code));
    Keyload__V1__BatchReceipt *rc = keyload__v1__batch_receipt__unpack(NULL, a.len, a.bytes);
    Keyload__V1__Received *got = rc->results[0]->received;
    bool seen[60] = {false};
    int dup = 0, n = 0;
    for (size_t i = 0; i < got->n_messages; i++) {
        int k;
        char buf[40] = {0};
        memcpy(buf, got->messages[i]->message->body.data,
               got->messages[i]->message->body.len < 39 ? got->messages[i]->message->body.len : 39);
        if (sscanf(buf, "job-%d", &k) == 1 && k >= 0 && k < 60) {
            dup += seen[k];
            seen[k] = true;
            n++;
        }
    }
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    answer_free(&a);
    CHECK(dup == 0, "%d messages delivered twice", dup);
    CHECK(n == 60, "%d of 60 acknowledged messages present", n);
    group_stop_all();
}

/* ---- membership changes on real members (docs/MEMBERSHIP.md) ---- */

/* Client ports base .. base + 3, peer ports base + 100 .. base + 103, in 18000..19899: below
 * the kernel's ephemeral range (32768 on), where an outgoing connection could hold a port
 * a restarted member needs, and clear of the other process tests' ranges. */
#define MEMBERS_PORT_BASE(k) (18000 + (getpid() % 90) * 20 + (k) * 6)

/* A one-partition cluster file of members 1..n at fixed ports (client base + i, peer
 * base + 100 + i): the seed (3) and, for the joining member, the same plus member 4. */
static void write_members_file(const char *path, const char *name, int n, int base, int replica_count)
{
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"cluster\":\"%s\",\"replica_count\":%d,\"insecure_local_admin\":true,"
               "\"timers\":{\"tick_ms\":50,\"election_ms\":1000,\"heartbeat_ms\":150},"
               "\"partitions\":[{\"id\":0,\"members\":[", name, replica_count);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s{\"id\":%d,\"client\":\"tcp://127.0.0.1:%d\",\"peer\":\"tcp://127.0.0.1:%d\","
                   "\"data\":\"%s/%s-m%d\"}", i ? "," : "", i + 1, base + i, base + 100 + i, work, name, i + 1);
    fprintf(f, "]}]}\n");
    fclose(f);
}

/* The configuration member i answers (Members), or NULL. */
static Keyload__V1__MembersAnswer *members_of(int i)
{
    snprintf(url, sizeof url, "%s", group_url[i]);
    answer a = call("keyload.v1.Members", (const uint8_t *)"", 0, 2000);
    Keyload__V1__MembersAnswer *m = a.code == KL_OK ? keyload__v1__members_answer__unpack(NULL, a.len, a.bytes) : NULL;
    answer_free(&a);
    return m;
}

/* Member i reports exactly `want` (n voters) as its committed, non-joint configuration. */
static bool members_are(int i, const uint64_t *want, size_t n)
{
    Keyload__V1__MembersAnswer *m = members_of(i);
    bool ok = m != NULL && m->committed && !m->joint && m->n_voters == n && m->n_learners == 0;
    for (size_t k = 0; ok && k < n; k++) {
        bool f = false;
        for (size_t j = 0; j < m->n_voters; j++)
            f = f || m->voters[j] == want[k];
        ok = f;
    }
    if (m != NULL)
        keyload__v1__members_answer__free_unpacked(m, NULL);
    return ok;
}

/* One acknowledged enqueue of "m-<k>" (retried under the same command id). */
static bool mgrow_enqueue(int k)
{
    uint8_t cmd[16];
    kl_guid_random(cmd);
    char body[32];
    snprintf(body, sizeof body, "m-%d", k);
    for (int attempt = 0; attempt < 30; attempt++) {
        Keyload__V1__BatchRequest *b = batch_new(cmd);
        add_enqueue(b, "jobs", body);
        answer a = group_batch(b, 10000, NULL);
        kl_code code = a.code;
        answer_free(&a);
        if (code == KL_OK)
            return true;
        sleep_ms(100);
    }
    return false;
}

/* Sends a MemberChange to whichever member leads, then keeps writing (one acknowledged
 * enqueue per round, counted in *acked) until member `probe` reports `want`. */
static bool change_under_load(Keyload__V1__MemberChangeRequest *q, const uint64_t *want, size_t n, int probe,
                              int *acked, int64_t *took_ms)
{
    size_t len = keyload__v1__member_change_request__get_packed_size(q);
    uint8_t req[512];
    keyload__v1__member_change_request__pack(q, req);
    int64_t t0 = now_ms();
    answer a = group_call("keyload.v1.MemberChange", req, len, 20000, NULL);
    kl_code code = a.code;
    if (code != KL_OK)
        fprintf(stderr, "  MemberChange %s: %s %s\n", q->op, kl_code_name(code), a.err.message);
    answer_free(&a);
    if (code != KL_OK)
        return false;
    while (now_ms() - t0 < 60000) {
        if (mgrow_enqueue(*acked))
            (*acked)++;
        if (members_are(probe, want, n)) {
            *took_ms = now_ms() - t0;
            return true;
        }
    }
    return false;
}

/* Receives every message of "jobs" from the leader; true when each of m-0 .. m-(acked-1)
 * is there exactly once. */
static bool all_present_once(int acked)
{
    bool *seen = calloc((size_t)acked + 1, 1);
    int dup = 0, n = 0;
    for (int round = 0; round < 50; round++) {
        Keyload__V1__BatchRequest *b = batch_new(NULL);
        add_receive(b, "jobs", 100, 600000);
        answer a = group_batch(b, 20000, NULL);
        if (a.code != KL_OK) {
            answer_free(&a);
            break;
        }
        Keyload__V1__BatchReceipt *rc = keyload__v1__batch_receipt__unpack(NULL, a.len, a.bytes);
        Keyload__V1__Received *got = rc->results[0]->received;
        size_t cnt = got->n_messages;
        for (size_t i = 0; i < cnt; i++) {
            char buf[40] = {0};
            size_t l = got->messages[i]->message->body.len;
            memcpy(buf, got->messages[i]->message->body.data, l < 39 ? l : 39);
            int k;
            if (sscanf(buf, "m-%d", &k) == 1 && k >= 0 && k < acked) {
                dup += seen[k];
                seen[k] = true;
                n++;
            }
        }
        keyload__v1__batch_receipt__free_unpacked(rc, NULL);
        answer_free(&a);
        if (cnt == 0)
            break;
    }
    free(seen);
    if (dup != 0 || n != acked)
        fprintf(stderr, "  %d of %d acknowledged messages present, %d twice\n", n, acked, dup);
    return dup == 0 && n == acked;
}

/* Grow a 3-member partition (replica_count 2) by a 4th member that joins with an empty
 * store (keyloadd --join), promote it, then remove member 1, all under a steady write load;
 * kill -9 of every member and a restart (2 and 3 from the SEED cluster file, which names
 * member 1 and not 4; 4 from the full file without --join) keeps {2, 3, 4}; every acknowledged message is
 * there once (received from the new leader); a retried remove answers done. */
static void test_member_grow_and_remove(void)
{
    int64_t t_start = now_ms();
    int base = MEMBERS_PORT_BASE(0);
    char seed[580], full[580];
    snprintf(seed, sizeof seed, "%s/mgrow.json", work);
    snprintf(full, sizeof full, "%s/mgrow-full.json", work);
    write_members_file(seed, "mgrow", 3, base, 2);
    write_members_file(full, "mgrow", 4, base, 2);
    snprintf(cluster_file, sizeof cluster_file, "%s", seed);
    group_n = 3;
    for (int i = 0; i < GROUP_MAX; i++) {
        snprintf(group_url[i], sizeof group_url[i], "tcp://127.0.0.1:%d", base + i);
        group_pid[i] = -1;
    }
    CHECK(group_start_with_queue("jobs") >= 0, "the group did not create its database and queue");
    int acked = 0;
    for (int k = 0; k < 20; k++)
        acked += mgrow_enqueue(acked);
    char log[700];
    snprintf(log, sizeof log, "%s/mgrow-p0m4.log", work);
    char *argv[] = {(char *)daemon_bin, "--cluster", full, "--node", "p0m4", "--cluster-secret", secret_file,
                    "--init-store", "--join", NULL};
    group_pid[3] = proc_exec(argv, log, NULL, PROC_LIFETIME_S);
    group_n = 4;
    char peer4[64], client4[64];
    snprintf(peer4, sizeof peer4, "tcp://127.0.0.1:%d", base + 103);
    snprintf(client4, sizeof client4, "tcp://127.0.0.1:%d", base + 3);
    Keyload__V1__MemberInfo info = KEYLOAD__V1__MEMBER_INFO__INIT;
    info.id = 4;
    info.peer_url = peer4;
    info.client_url = client4;
    Keyload__V1__MemberChangeRequest q = KEYLOAD__V1__MEMBER_CHANGE_REQUEST__INIT;
    q.op = "add";
    q.member = &info;
    uint64_t four[4] = {1, 2, 3, 4}, three[3] = {2, 3, 4};
    int64_t took;
    CHECK(change_under_load(&q, four, 4, 3, &acked, &took), "member 4 did not become a voter");
    printf("  add member 4 (learner, catch-up, joint, leave) under load: %lld ms, %d writes acked so far\n",
           (long long)took, acked);
    Keyload__V1__MemberChangeRequest r = KEYLOAD__V1__MEMBER_CHANGE_REQUEST__INIT;
    r.op = "remove";
    r.old_member_id = 1;
    CHECK(change_under_load(&r, three, 3, 3, &acked, &took), "member 1 was not removed");
    printf("  remove member 1 under load: %lld ms, %d writes acked\n", (long long)took, acked);
    /* A retried request for a finished change answers done. */
    size_t rlen = keyload__v1__member_change_request__get_packed_size(&r);
    uint8_t rbuf[64];
    keyload__v1__member_change_request__pack(&r, rbuf);
    bool done = false; /* it may first join the change its leader is still closing */
    kl_code rcode = KL_OK;
    for (int64_t t = now_ms(); !done && now_ms() - t < 5000; sleep_ms(100)) {
        answer again = group_call("keyload.v1.MemberChange", rbuf, rlen, 20000, NULL);
        rcode = again.code;
        Keyload__V1__MemberChangeAnswer *ra =
            again.code == KL_OK ? keyload__v1__member_change_answer__unpack(NULL, again.len, again.bytes) : NULL;
        done = ra != NULL && ra->done;
        if (ra != NULL)
            keyload__v1__member_change_answer__free_unpacked(ra, NULL);
        answer_free(&again);
    }
    CHECK(done, "a retried remove does not answer done: %s", kl_code_name(rcode));
    group_stop_all();
    group_start(1); /* the seed file: a stored configuration, not the file, says who */
    group_start(2);
    /* Member 4 now without --join, from the full file (which still names member 1): its
     * stored configuration decides, and members run from different files still connect. */
    char *argv2[] = {(char *)daemon_bin, "--cluster", full, "--node", "p0m4", "--cluster-secret", secret_file,
                     NULL};
    group_pid[3] = proc_exec(argv2, log, NULL, PROC_LIFETIME_S);
    bool ok = false;
    for (int64_t t = now_ms(); !ok && now_ms() - t < 30000; sleep_ms(200))
        ok = members_are(1, three, 3) && members_are(2, three, 3) && members_are(3, three, 3);
    CHECK(ok, "after a restart of all members the configuration is not {2, 3, 4}");
    CHECK(all_present_once(acked), "acknowledged messages lost or doubled");
    printf("  %d acknowledged messages present once after the restart; test %lld ms\n", acked,
           (long long)(now_ms() - t_start));
    group_stop_all();
    group_n = 3;
}

/* Starts member 4 of `full` as a joining member (empty store). */
static void start_joiner(const char *full, const char *name)
{
    char log[700];
    snprintf(log, sizeof log, "%s/%s-p0m4.log", work, name);
    char *argv[] = {(char *)daemon_bin, "--cluster", (char *)full, "--node", "p0m4", "--cluster-secret",
                    secret_file, "--init-store", "--join", NULL};
    group_pid[3] = proc_exec(argv, log, NULL, PROC_LIFETIME_S);
    group_n = 4;
}

/* Sets up the 3-member partition `name` (replica_count rc) with queue "jobs" and 20
 * acknowledged messages; the full file names member 4 too. */
static bool members_setup(const char *name, int rc, int base, char *seed, char *full, size_t cap, int *acked)
{
    snprintf(seed, cap, "%s/%s.json", work, name);
    snprintf(full, cap, "%s/%s-full.json", work, name);
    write_members_file(seed, name, 3, base, rc);
    write_members_file(full, name, 4, base, rc);
    snprintf(cluster_file, sizeof cluster_file, "%s", seed);
    group_n = 3;
    for (int i = 0; i < GROUP_MAX; i++) {
        snprintf(group_url[i], sizeof group_url[i], "tcp://127.0.0.1:%d", base + i);
        group_pid[i] = -1;
    }
    if (group_start_with_queue("jobs") < 0)
        return false;
    *acked = 0;
    for (int k = 0; k < 20; k++)
        *acked += mgrow_enqueue(*acked);
    return *acked == 20;
}

/* The replacement of a dead member at 3-of-3 (docs/MEMBERSHIP.md "Replacing a dead member"):
 * member 3 is killed -9 and never comes back, so no write can commit; a new identity
 * (member 4, empty directory, keyloadd --join) replaces it with MemberChange replace. Writes
 * resume; the outage from the command to the first acknowledged write after it and the
 * state (the leader's data directory) are printed; nothing acknowledged is lost. */
static void test_member_replace_dead_3of3(void)
{
    int base = MEMBERS_PORT_BASE(1);
    char seed[580], full[580];
    int acked;
    CHECK(members_setup("mrepl", 3, base, seed, full, sizeof seed, &acked), "setup: %d writes acked", acked);
    group_kill(2, SIGKILL);
    start_joiner(full, "mrepl");
    char peer4[64], client4[64];
    snprintf(peer4, sizeof peer4, "tcp://127.0.0.1:%d", base + 103);
    snprintf(client4, sizeof client4, "tcp://127.0.0.1:%d", base + 3);
    Keyload__V1__MemberInfo info = KEYLOAD__V1__MEMBER_INFO__INIT;
    info.id = 4;
    info.peer_url = peer4;
    info.client_url = client4;
    Keyload__V1__MemberChangeRequest q = KEYLOAD__V1__MEMBER_CHANGE_REQUEST__INIT;
    q.op = "replace";
    q.member = &info;
    q.old_member_id = 3;
    size_t len = keyload__v1__member_change_request__get_packed_size(&q);
    uint8_t req[512];
    keyload__v1__member_change_request__pack(&q, req);
    int64_t t0 = now_ms();
    answer a = group_call("keyload.v1.MemberChange", req, len, 20000, NULL);
    CHECK(a.code == KL_OK, "MemberChange replace: %s %s", kl_code_name(a.code), a.err.message);
    answer_free(&a);
    CHECK(mgrow_enqueue(acked), "no write acknowledged after the replace command");
    acked++;
    int64_t outage = now_ms() - t0;
    uint64_t want[3] = {1, 2, 4};
    bool ok = false;
    for (int64_t t = now_ms(); !ok && now_ms() - t < 30000; sleep_ms(100))
        ok = members_are(0, want, 3) && members_are(3, want, 3);
    CHECK(ok, "the configuration did not become {1, 2, 4}");
    for (int k = 0; k < 10; k++)
        acked += mgrow_enqueue(acked);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "du -sk '%s/mrepl-m1' | cut -f1", work);
    FILE *p = popen(cmd, "r");
    long kb = -1;
    if (p != NULL && fscanf(p, "%ld", &kb) != 1)
        kb = -1;
    if (p != NULL)
        pclose(p);
    printf("  replace of a dead member at 3-of-3: write outage %lld ms from the command to the first "
           "acknowledged write (state: %ld KiB on member 1)\n", (long long)outage, kb);
    CHECK(all_present_once(acked), "acknowledged messages lost or doubled");
    group_stop_all();
    group_n = 3;
}

/* kill -9 of the leader in the middle of a change (member 4 being added at 2-of-3): the
 * change is finished by a retry on the new leader or was abandoned cleanly; either way the
 * members agree on a committed configuration and nothing acknowledged is lost. */
static void test_member_change_leader_killed(void)
{
    int base = MEMBERS_PORT_BASE(2);
    char seed[580], full[580];
    int acked;
    CHECK(members_setup("mkill", 2, base, seed, full, sizeof seed, &acked), "setup: %d writes acked", acked);
    start_joiner(full, "mkill");
    char peer4[64], client4[64];
    snprintf(peer4, sizeof peer4, "tcp://127.0.0.1:%d", base + 103);
    snprintf(client4, sizeof client4, "tcp://127.0.0.1:%d", base + 3);
    Keyload__V1__MemberInfo info = KEYLOAD__V1__MEMBER_INFO__INIT;
    info.id = 4;
    info.peer_url = peer4;
    info.client_url = client4;
    Keyload__V1__MemberChangeRequest q = KEYLOAD__V1__MEMBER_CHANGE_REQUEST__INIT;
    q.op = "add";
    q.member = &info;
    size_t len = keyload__v1__member_change_request__get_packed_size(&q);
    uint8_t req[512];
    keyload__v1__member_change_request__pack(&q, req);
    int leader = -1;
    answer a = group_call("keyload.v1.MemberChange", req, len, 20000, &leader);
    CHECK(a.code == KL_OK && leader >= 0, "MemberChange add: %s", kl_code_name(a.code));
    answer_free(&a);
    group_kill(leader, SIGKILL); /* mid-change: its steps may be anywhere */
    for (int k = 0; k < 5; k++)
        acked += mgrow_enqueue(acked);
    /* The retry finishes it (or answers done if the new leader's log already did). */
    uint64_t want[4] = {1, 2, 3, 4};
    bool ok = false;
    for (int64_t t = now_ms(); !ok && now_ms() - t < 40000; sleep_ms(200)) {
        answer r = group_call("keyload.v1.MemberChange", req, len, 5000, NULL);
        answer_free(&r);
        int probe = leader == 0 ? 1 : 0;
        ok = members_are(probe, want, 4);
    }
    CHECK(ok, "the change neither finished nor could be retried to the end");
    group_start(leader); /* the old leader comes back and follows */
    for (int k = 0; k < 5; k++)
        acked += mgrow_enqueue(acked);
    ok = false;
    for (int64_t t = now_ms(); !ok && now_ms() - t < 20000; sleep_ms(200))
        ok = members_are(leader, want, 4);
    CHECK(ok, "the restarted old leader does not report {1, 2, 3, 4}");
    CHECK(all_present_once(acked), "acknowledged messages lost or doubled");
    group_stop_all();
    group_n = 3;
}

typedef struct {
    const char *name;
    void (*fn)(void);
} test_case;

/* Waits up to timeout_ms for group member i to exit; its wait status, or -1 (still running). */
static int group_wait_exit(int i, int timeout_ms, int64_t *exited_at)
{
    int64_t deadline = now_ms() + timeout_ms;
    int st;
    for (;;) {
        if (waitpid(group_pid[i], &st, WNOHANG) == group_pid[i]) {
            group_pid[i] = -1;
            if (exited_at)
                *exited_at = now_ms();
            return st;
        }
        if (now_ms() >= deadline)
            return -1;
        sleep_ms(10);
    }
}

/* A failed log write (failpoint store.log_write: EIO) on a follower ends that process with a
 * non-zero status, promptly and without acknowledging the round; after a restart every
 * acknowledged write is there, exactly once. */
static void test_group_log_write_failure_exits(void)
{
    write_group("eio", 3, 3);
    int leader = group_start_with_queue("q");
    CHECK(leader >= 0, "the group did not create its database and queue");
    if (leader < 0)
        return;
    int f = (leader + 1) % 3;
    group_kill(f, SIGKILL);
    char node[16], log[700];
    snprintf(node, sizeof node, "p0m%d", f + 1);
    snprintf(log, sizeof log, "%s/eio-failed-%s.log", work, node);
    char *argv[] = {(char *)daemon_bin, "--cluster", cluster_file, "--node", node, "--cluster-secret",
                    secret_file, NULL};
    group_pid[f] = proc_exec(argv, log, "store.log_write=12*error(UNAVAILABLE)", PROC_LIFETIME_S);
    int acked = 0, unknown = 0, st = -1;
    int64_t exited_at = 0, first_refused = 0;
    for (int i = 0; i < 200 && st == -1; i++) {
        Keyload__V1__BatchRequest *b = batch_new(NULL);
        add_enqueue(b, "q", "m");
        answer a = group_batch(b, 1500, &leader);
        if (a.code == KL_OK)
            acked++;
        else if (a.code == KL_UNKNOWN_WRITE_OUTCOME || a.code == KL_DEADLINE_EXCEEDED)
            unknown++;
        if (a.code != KL_OK && first_refused == 0)
            first_refused = now_ms();
        answer_free(&a);
        st = group_wait_exit(f, 0, &exited_at);
    }
    if (st == -1)
        st = group_wait_exit(f, 5000, &exited_at);
    CHECK(st != -1, "the follower whose log write failed is still running");
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 1, "exit status %d, want exit code 1", st);
    CHECK(first_refused == 0 || exited_at - first_refused < 3000,
          "the follower exited %lld ms after commits stopped", (long long)(exited_at - first_refused));
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "grep -q 'storage failure' '%s' && grep -q 'store.log_write' '%s'", log, log);
    CHECK(system(cmd) == 0, "the follower did not log the failed log write (%s)", log);
    CHECK(acked >= 5, "only %d writes were acknowledged before the failure", acked);
    group_start(f);
    Keyload__V1__BatchRequest *b = batch_new(NULL);
    add_enqueue(b, "q", "after");
    answer a = group_batch(b, 20000, NULL);
    CHECK(a.code == KL_OK, "after the restart: %s %s", kl_code_name(a.code), a.err.message);
    answer_free(&a);
    long long n = group_messages("q");
    CHECK(n >= acked + 1 && n <= acked + unknown + 1, "messages %lld, acknowledged %d (+%d unknown) + 1", n,
          acked, unknown);
    /* The restarted follower holds them too: it applied up to the leader's index. */
    int64_t deadline = now_ms() + 10000;
    while (member_applied(f) < member_applied(leader) && now_ms() < deadline)
        sleep_ms(100);
    CHECK(member_applied(f) >= member_applied(leader), "the restarted follower did not catch up");
    printf("  log write failure: follower exited %lld ms after commits stopped; %d acknowledged, %d unknown\n",
           (long long)(exited_at - first_refused), acked, unknown);
}

/* SIGTERM ends a member within 2 s also when a follower is gone (kill -9), the leader has
 * writes it cannot commit and reads it cannot confirm, and closing the replication socket
 * hangs (as nng 1.5.2's nng_close can; failpoint peer.before_close): leader first, then the
 * remaining follower. */
static void test_group_sigterm_with_follower_down(void)
{
    write_group("term", 3, 3);
    group_failpoints = "peer.before_close=sleep(5000)";
    int leader = group_start_with_queue("q");
    group_failpoints = NULL;
    CHECK(leader >= 0, "the group did not create its database and queue");
    if (leader < 0)
        return;
    int down = (leader + 1) % 3, other = (leader + 2) % 3;
    group_kill(down, SIGKILL);
    /* A write that cannot commit (3 of 3 with one down), and fresh reads, left waiting. */
    snprintf(url, sizeof url, "%s", group_url[leader]);
    Keyload__V1__BatchRequest *b = batch_new(NULL);
    add_enqueue(b, "q", "stuck");
    answer a = send_batch(b, 1000);
    answer_free(&a);
    uint8_t buf[512];
    size_t n = pack_stats_request("q", buf);
    a = call("keyload.v1.QueueStats", buf, n, 500);
    answer_free(&a);
    sleep_ms(1500); /* the leader keeps sending to the dead follower */
    int targets[2] = {leader, other};
    char log[1600];
    for (int k = 0; k < 2; k++) {
        int i = targets[k];
        int64_t t0 = now_ms(), t1 = 0;
        kill(group_pid[i], SIGTERM);
        int st = group_wait_exit(i, 10000, &t1);
        CHECK(st != -1, "%s did not stop within 10 s of SIGTERM", k ? "the follower" : "the leader");
        if (st == -1) {
            group_kill(i, SIGKILL);
            continue;
        }
        CHECK(t1 - t0 <= 2000, "%s took %lld ms to stop after SIGTERM", k ? "the follower" : "the leader",
              (long long)(t1 - t0));
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s stopped with status %d",
              k ? "the follower" : "the leader", st);
        snprintf(log, sizeof log, "grep -q 'stop did not finish in time' '%s/term.json-p0m%d.log'", work, i + 1);
        CHECK(system(log) == 0, "member %d did not log why it ended its stop early", i + 1);
        printf("  SIGTERM with a follower down: %s stopped in %lld ms\n", k ? "follower" : "leader",
               (long long)(t1 - t0));
    }
}

/* Batches this member refused before decoding them because it did not serve (MemberStatus
 * not_leader_batches), or -1 when it does not answer. */
static long long not_leader_batches(int i)
{
    Keyload__V1__MemberStatusAnswer *s = member_status(group_url[i], 2000);
    if (s == NULL)
        return -1;
    long long n = (long long)s->not_leader_batches;
    keyload__v1__member_status_answer__free_unpacked(s, NULL);
    return n;
}

/* A follower answers a Batch NOT_LEADER, naming the leader, before it decodes, validates or
 * reads anything: bytes that are no BatchRequest get NOT_LEADER from a follower and
 * INVALID_ARGUMENT only from the leader. */
static void test_group_follower_refuses_before_decoding(void)
{
    write_group("refuse", 3, 2);
    int leader = group_start_with_queue("q");
    CHECK(leader >= 0, "the group did not create its database and queue");
    static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    for (int i = 0; i < group_n; i++) {
        long long before = not_leader_batches(i);
        snprintf(url, sizeof url, "%s", group_url[i]);
        answer a = call("keyload.v1.Batch", garbage, sizeof garbage, 5000);
        kl_code code = a.code;
        char detail[sizeof a.err.detail];
        snprintf(detail, sizeof detail, "%s", a.err.detail);
        answer_free(&a);
        long long after = not_leader_batches(i);
        if (i == leader) {
            CHECK(code == KL_INVALID_ARGUMENT && strcmp(detail, "payload") == 0,
                  "leader m%d: %s %s", i + 1, kl_code_name(code), detail);
            CHECK(after == before, "the leader counted %lld refusals", after - before);
        } else {
            CHECK(code == KL_NOT_LEADER, "follower m%d answered %s %s, not NOT_LEADER", i + 1,
                  kl_code_name(code), detail);
            CHECK(before >= 0 && after == before + 1, "follower m%d counted %lld -> %lld", i + 1, before, after);
        }
    }
}

/* Waits until member i reports a leader other than itself; true when it did in time. */
static bool knows_leader(int i, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    while (now_ms() < deadline) {
        Keyload__V1__MemberStatusAnswer *s = member_status(group_url[i], 1000);
        bool ok = s != NULL && s->leader != 0 && s->leader != (uint64_t)(i + 1) && s->leader_address[0];
        if (s != NULL)
            keyload__v1__member_status_answer__free_unpacked(s, NULL);
        if (ok)
            return true;
        sleep_ms(100);
    }
    return false;
}

/* The SDK where the leader is not the first-listed member: members 2 and 3 elect one before
 * member 1 starts; of 20 batches from one client, at most the first meets member 1's
 * NOT_LEADER (without the SDK's leader cache, every one did). */
static void test_group_sdk_leader_not_first(void)
{
    write_group("sdkleader", 3, 2);
    group_start(1);
    group_start(2);
    Keyload__V1__BatchRequest *b = batch_new(NULL);
    add_create_database(b);
    int leader = -1;
    answer a = group_batch(b, 20000, &leader);
    CHECK(a.code == KL_OK, "create database: %s %s", kl_code_name(a.code), a.err.message);
    answer_free(&a);
    b = batch_new(NULL);
    add_create(b, "q", 0);
    a = group_batch(b, 20000, &leader);
    CHECK(a.code == KL_OK, "create queue: %s %s", kl_code_name(a.code), a.err.message);
    answer_free(&a);
    group_start(0);
    CHECK(knows_leader(0, 20000), "member 1 learned no leader");
    long long before = not_leader_batches(0);
    kl_client *c;
    kl_err err;
    CHECK(kl_client_open(cluster_file, "default/default", 10000, &c, &err) == KL_OK, "open: %s", err.message);
    int ok = 0;
    for (int i = 0; i < 20; i++) {
        kl_batch *kb;
        kl_message *m;
        kl_receipt *r = NULL;
        if (kl_batch_new(NULL, &kb, &err) != KL_OK)
            break;
        if (kl_message_new("x", 1, &m, &err) == KL_OK) {
            if (kl_batch_enqueue(kb, "q", NULL, m, &err) == KL_OK && kl_client_batch(c, kb, &r, &err) == KL_OK)
                ok++;
            kl_message_free(m);
        }
        kl_receipt_free(r);
        kl_batch_free(kb);
    }
    kl_client_close(c);
    long long after = not_leader_batches(0);
    printf("  leader m%d; NOT_LEADER answers of the first-listed member for 20 SDK batches: %lld\n",
           leader + 1, after - before);
    CHECK(ok == 20, "%d of 20 batches committed (last: %s)", ok, err.message);
    CHECK(leader != 0, "member 1 led");
    CHECK(before >= 0 && after - before <= 1, "%lld redirects for 20 batches", after - before);
}

int main(int argc, char **argv)
{
    const char *only = NULL; /* --only TEXT: run the tests whose name contains TEXT */
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--bin") == 0)
            daemon_bin = argv[i + 1];
        else if (strcmp(argv[i], "--work") == 0)
            snprintf(work, sizeof work, "%s", argv[i + 1]);
        else if (strcmp(argv[i], "--only") == 0)
            only = argv[i + 1];
    }
    if (!daemon_bin || !work[0]) {
        fprintf(stderr, "usage: proc-test --bin PATH --work DIR [--only TEXT]\n");
        return 2;
    }
    if (sodium_init() < 0)
        return 1;
    signal(SIGPIPE, SIG_IGN);
    snprintf(secret_file, sizeof secret_file, "%s/cluster.secret", work);
    {
        uint8_t secret[32];
        randombytes_buf(secret, sizeof secret);
        unlink(secret_file);
        int fd = open(secret_file, O_WRONLY | O_CREAT | O_EXCL, 0600);
        if (fd < 0 || write(fd, secret, sizeof secret) != (ssize_t)sizeof secret) {
            fprintf(stderr, "proc-test: cannot write %s\n", secret_file);
            return 1;
        }
        close(fd);
        sodium_memzero(secret, sizeof secret);
    }
    test_case tests[] = {
        {"kill -9 keeps every acknowledged message, replay is byte-identical", test_kill9_durability},
        {"cut after append: retry commits once", test_cut_after_append},
        {"repl trace: sampled stamps and the server legs are logged and joined", test_repl_trace_logged},
        {"cut after the answer, before the apply: the retry gets the same receipt", test_cut_after_reply},
        {"cut before append: retry commits once", test_cut_before_append},
        {"lease expiry redelivers (also across kill -9)", test_lease_expiry_redelivers},
        {"quota refusals change nothing", test_quota_refusals_change_nothing},
        {"bad input answers clearly and changes nothing", test_bad_input},
        {"clients resetting with answers owed do not end the daemon", test_reset_clients},
        {"a non-store data directory is refused", test_refuses_non_store_dir},
        {"journal: a synced record damaged while the member was down refuses the start, exit 2, "
         "naming journal_corrupt", test_journal_damage_refused},
        {"store identity: a wiped member refuses to start without --init-store, another partition's or "
         "cluster's directory is refused naming both, --init-store on its own store changes nothing",
         test_store_identity},
        {"disk full (loop-mounted ext4): batches refused UNAVAILABLE disk_full before anything is proposed, "
         "reads go on, writes resume once space returns", test_disk_full},
        {"3 members, replica_count 3: leader killed, commits wait for all copies", test_group_rf3_all_copies},
        {"3 members, replica_count 3: a follower down: UNKNOWN_WRITE_OUTCOME, then UNAVAILABLE, then one effect",
         test_group_rf3_follower_down},
        {"3 members, replica_count 2: leader killed -9 mid-stream, nothing lost or doubled", test_group_rf2_failover},
        {"membership: a 4th member joins empty (--join) as learner and is promoted, member 1 is removed, "
         "under writes; a restart of all from the seed file keeps {2,3,4}; nothing acknowledged lost",
         test_member_grow_and_remove},
        {"membership: member 3 of a 3-of-3 partition killed -9 for good is replaced by a new identity "
         "on an empty directory under writes; writes resume, nothing acknowledged lost",
         test_member_replace_dead_3of3},
        {"membership: the leader killed -9 in the middle of adding a member; a retry on the new leader "
         "finishes the change, nothing acknowledged lost", test_member_change_leader_killed},
        {"grow: a 3-of-3 partition grows to 5 members (4 and 5 join empty) and shrinks back to 3 (the leader "
         "removed) under a writer and a consumer, kill -9 mid-change twice, then kill -9 of all and restart; "
         "every acknowledged message exactly once", test_grow_shrink_under_load},
        {"grow: a partition started with one member (replica_count 1) grows to 2 and 3 members (replica_count "
         "2, then 3; member 3 joins from a file at replica_count 3 naming the two others and itself) under a "
         "writer and a consumer; after kill -9 of all, member 1 restarted from its one-member "
         "file reports the three; every acknowledged message exactly once", test_grow_from_one_member},
        {"grow: a one-member partition whose member has no peer address refuses MemberChange add "
         "(FAILED_PRECONDITION peer_url) and keeps its one voter", test_grow_refused_without_peer_address},
        {"grow: at 3-of-3 dead member 3 is replaced by a joined member 4, then dead member 4 by 5, through one "
         "client that learned the configuration in between (it must still reach the seed members)",
         test_replace_a_replaced_member},
        {"3 members, replica_count 2: a follower that missed 10,000 entries catches up", test_group_follower_catches_up},
        {"3 members, replica_count 3: a follower whose log write fails (EIO) exits non-zero at once; "
         "after its restart every acknowledged write is there", test_group_log_write_failure_exits},
        {"3 members, replica_count 3: SIGTERM stops the leader and a follower within 2 s while "
         "another follower is down", test_group_sigterm_with_follower_down},
        {"3 members: a follower answers a Batch NOT_LEADER before decoding it (garbage included)",
         test_group_follower_refuses_before_decoding},
        {"3 members, leader not first-listed: the SDK meets a follower's NOT_LEADER once, not per batch",
         test_group_sdk_leader_not_first},
        {"member keys: a forged replication message from a process that is not a member is refused, "
         "group state unchanged", test_peer_auth_refuses_intruders},
        {"3x3 cluster: catalog versions reach every data partition once, in order, across failover "
         "and cold restart", test_catalog_reaches_every_partition},
        {"catalog lease: a data partition cut from partition 0 stops serving after its lease; "
         "a catalog change does not wait for a partition whose lease ran out", test_catalog_lease},
        {"fresh reads RF3 3-of-3: one follower down answers OK within the read deadline, both down answer "
         "UNAVAILABLE by it, a burst of 200 reads leaves MemberStatus and Hello answering",
         test_reads_under_member_faults},
        {"catalog barrier RF3 3-of-3: a data partition that tails but cannot commit holds a catalog change "
         "no longer than its catalog lease", test_catalog_barrier_bounded},
        {"catalog lease RF3 3-of-3: a Receive that commits after its partition's lease ran out hands out "
         "nothing (UNAVAILABLE catalog_lease)", test_receive_commits_after_lease},
        {"catalog lease RF3 3-of-3: a read confirmed after its partition's lease ran out is not served "
         "(UNAVAILABLE catalog_lease)", test_read_confirmed_after_lease},
        {"catalog tail RF3 3-of-3: partition 0's leader answers a tail only after confirming it still leads "
         "(its followers paused: no answer)", test_tail_needs_confirmed_leader},
        {"self-grant RF3 3-of-3 with sessions: an administrator's grant to itself with a data partition unable "
         "to commit answers OK within the barrier bound, through the SDK's retry, and so does its replay",
         test_self_grant_with_lagging_partition},
        {"lagging tail RF3 3-of-3: a data partition whose tails lagged gets no catalog lease from them once it "
         "catches up, so it serves nothing under a catalog older than a change that returned",
         test_lagging_tail_grants_no_lease},
        {"sessions: Hello, sealed batches and reads; every forged, stale, replayed or mislabelled "
         "request refused and nothing run; a restart or the ttl ends a session", test_sessions},
        {"SDK sessions: one client with a principal goes sealed from many threads, shakes hands "
         "again by itself after kill -9 and restart, and a replay returns the same receipt",
         test_sdk_sessions},
        {"authz matrix: each queue method allowed exactly with its grant, field and header grants, "
         "unsealed, other-tenant, non-admin and malformed requests refused and nothing changed",
         test_authz_matrix},
        {"authz revocation: refused once the revoke returns, a replay across epochs is stale_authority, "
         "a data partition without partition 0 stops within its catalog lease and resumes",
         test_authz_revocation},
        {"authz cold restart RF3: principals, grants and database keys identical after kill -9 of all, "
         "Hello again, and no secret in any data file or log",
         test_authz_cold_restart},
        {"RemoteTransferIntentTests (RF3, 3x3, sessions): a rolled-back batch creates no intent, the same "
         "identity replays, a changed destination or payload conflicts, pending survives a cold restart",
         test_xfer_intent},
        {"RemoteTransferDestinationTests: repeat, unknown-ACK cut and reopen give one enqueue and one "
         "byte-identical receipt; failed quota and authorization leave neither; a full lane still answers",
         test_xfer_destination},
        {"RemoteTransferReceiptTests: tampered and foreign receipts refused and the source stays pending, "
         "duplicate completion is stable, Delivered survives a cold restart",
         test_xfer_receipt},
        {"RemoteTransferRetentionTests: destination ack then retry resurrects nothing, source messages and "
         "deletion do not touch intents, database and lane pause",
         test_xfer_retention},
        {"CoordinationReadTests: ListPendingQueueTransfers charges exactly, one record or byte less is "
         "RESOURCE_EXHAUSTED with nothing returned",
         test_xfer_coordination_read},
        {"RemoteTransferRecoveryTests (Coordinator, RF3 3x3, sessions): cut before Accept, after Accept, after "
         "Complete, source and destination leaders killed -9, cold restart between Accept and Complete, "
         "SIGTERM mid-turn: one message, a byte-identical receipt, Delivered",
         test_coord_recovery},
        {"TwoCoordinatorTests: two coordinators race over 500 transfers, each delivered with exactly one "
         "destination effect",
         test_coord_two},
        {"CoordinatorDiscoveryPaceTests: rounds cut at the work ceiling follow each other at once: 200 "
         "intents, 16 a round, a 60 s interval, all delivered within 30 s and then no more rounds",
         test_coord_pace},
        {"CoordinatorInFlightTests: hundreds of turns in flight on one loop, no thread per call; SIGTERM "
         "cancels them through one path, then all delivered exactly once",
         test_coord_many},
        {"CoordinatorLeaderKillTests: a default coordinator's calls in flight when the destination leader is "
         "killed -9 are retried under the same ids and follow the new leader; all delivered exactly once, no "
         "thread per call",
         test_coord_leader_kill},
        {"CoordinatorPrincipalTests: a null principal discovers nothing and idles; another principal's transfers "
         "are not driven",
         test_coord_principal},
        {"CoordinatorPolicyRepairTests: destination publish revoked: each denied Accept retained, the fresh read "
         "refuses a witness while the epoch is unchanged; the grant restored: repaired to generation 2 and "
         "delivered once, the historical Accept still denied; a denied Complete retained, repaired and delivered",
         test_coord_revoked},
        {"CoordinatorCapacityRetryTests: quota refusal retained, room made, coordinator cut between witness and "
         "Advance and between Advance and Accept with the source leader killed -9: delivered once at generation "
         "2; a receipt that appears meanwhile wins over any witness",
         test_coord_capacity},
        {"RemoteTransferAdvanceTests: by hand on RF3: forged witnesses refused, each attempt advance charges one "
         "record plus its exact bytes, the ceiling refuses exactly at MaxQueueTransferAcceptAttempts",
         test_coord_advance},
        {"CoordinatorBacklogTests: 10,000 pending intents after a cold restart all delivered, coordinator RSS "
         "under 64 MiB",
         test_coord_backlog},
        {"conn: a member behind on the catalog answers a Hello UNAVAILABLE catalog_behind, never "
         "UNAUTHENTICATED; the SDK retries it; a current catalog still refuses an unknown principal",
         test_conn_catalog_behind},
        {"conn: a replayed Hello is refused, a tenant at its session limit evicts only its own, the "
         "client port refuses past its cap and closes idle connections, each counted",
         test_conn_limits},
        {"conn: a member started with another replica_count is refused by its peers (counted, logged "
         "with both digests); the two that agree still commit",
         test_conn_peer_config},
        {"long poll: empty receives and an idle 10 s wait append no entry and outlive the idle timeout, "
         "a message enqueued meanwhile is delivered at once, a retry joins, the cap refuses, a killed "
         "leader's waiting receive goes on at the next",
         test_long_poll},
        {"outcome retention (3 members, retention 10 s): replays before the horizon, swept on every member "
         "after it, the old command id refused outcome_expired, a transfer mutation's outcome kept, a member "
         "killed -9 after the sweep agrees",
         test_outcome_retention},
        {"snapshot catch-up (3 members, replica_count 2, threshold 200): a follower killed while the leader "
         "compacts past it installs a snapshot and ends with the same replicated state",
         test_snapshot_catchup},
        {"snapshot: every member killed -9 right after its first compaction restarts and serves with every "
         "acknowledged batch",
         test_snapshot_kill_after_compact},
        {"snapshot: a compaction's flush runs off the loop (batches acknowledged while it takes 10 s) and every "
         "member killed -9 during it restarts with every acknowledged batch",
         test_snapshot_kill_during_flush},
        {"snapshot: a leader opening a snapshot for a follower for 3 s keeps its term and acknowledges "
         "batches meanwhile (the open runs off the loop)",
         test_snapshot_open_off_loop},
        {"snapshot: the log is bounded in bytes too (32 MB of large entries, far under the entry threshold, "
         "compacted to the byte window on every member)",
         test_snapshot_log_bytes_bound},
        {"snapshot: a stream cut midway (the receiver dies after 3 chunks) completes after its restart",
         test_snapshot_cut_midstream},
        {"learn: a client and the coordinator holding the original cluster file follow partition 1 through "
         "a join on a new URL and a removal (reaching the new member), then serve through learned members only",
         test_learn_members},
    };
    int passed = 0, failed = 0;
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        if (only != NULL && strstr(tests[i].name, only) == NULL)
            continue;
        failures_in_test = 0;
        int64_t t0 = now_ms();
        tests[i].fn();
        if (daemon_pid > 0)
            stop_daemon(SIGKILL); /* a failed check leaves no process behind */
        group_stop_all();
        disk_cleanup(); /* after every daemon on it was stopped */
        pa_stop_all();
        mp_stop_all();
        rd_stop_all();
        rd_stop_sessions();
        ss_stop_all();
        sk_stop_all();
        az_stop_all();
        xf_after_test(failures_in_test != 0);
        cc_after_test(failures_in_test != 0);
        cn_stop_all();
        cn_stop_all_peers();
        pl_stop_all();
        rt_stop_all();
        sn_stop_all();
        lr_stop_all();
        gr_stop_all();
        printf("%s %s (%lld ms)\n", failures_in_test ? "FAIL" : "ok  ", tests[i].name,
               (long long)(now_ms() - t0));
        fflush(stdout);
        if (failures_in_test)
            failed++;
        else
            passed++;
    }
    xf_stop_all();
    cc_stop_all();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
