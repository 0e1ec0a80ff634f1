/* Process tests of fresh reads and of partition 0's catalog barrier under member faults, on
 * a real cluster: two partitions of three keyloadd members each, replica_count 3 (3-of-3),
 * insecure local admin (raw unsealed calls), loopback ports 24000..24999. Every member is
 * started by fork/exec and killed by its pid (rd_stop_all, also after a failed check).
 *
 * Reads: with one follower of partition 1 down, queue stats answers OK within its read
 * deadline (p50/p99 printed); with both down, reads answer UNAVAILABLE within their
 * deadline, and a burst of 200 reads with 1 s timeouts neither hangs nor takes the client
 * port from MemberStatus and Hello.
 *
 * Barrier: with one follower of partition 1 down, partition 1 keeps tailing but cannot
 * commit the new catalog version; a queue creation on partition 0 returns within
 * catalog_lease_ms x (1 + drift) + margin instead of holding until its deadline.
 *
 * Lease: a Receive admitted under a valid catalog lease that commits only after the lease
 * ran out (partition 0 killed meanwhile) is refused UNAVAILABLE catalog_lease, no body out;
 * so is a read admitted under a valid lease and confirmed only after it ran out.
 *
 * Lagging tail: partition 1's leader proposes catalog change A as a follower pauses (A
 * cannot commit), tails without catching up until partition 0 lets A and then B return; with
 * partition 0 paused, the follower resumes and A commits: partition 1 holds catalog A, older
 * than B, and must hand out nothing (UNAVAILABLE catalog_lease); it serves again once
 * partition 0 resumes.
 *
 * Replay: on the sessions cluster of rf3.h, an administrator's grant to itself with one
 * follower of partition 1 down answers OK within the barrier's bound, through the SDK's retry
 * of its command id after UNAVAILABLE catalog_barrier, and so does its replay. */
#include "tests/cluster/proc.h"

#include "client/keyload.h"
#include "common/rpc.h"
#include "tests/cluster/rf3.h"
#include "keyload/v1/catalog.pb-c.h"
#include "keyload/v1/queue.pb-c.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define RD_PARTS 2
#define RD_MEMBERS 3
#define RD_LEASE_MS 3000
#define RD_READ_DEADLINE_MS 2000 /* the daemon's KL_SERVICE_READ_DEADLINE_MS */
#define RD_SLACK_MS 700          /* scheduling and RPC slack on two shared cores */

static char rd_file[700];
static char rd_url[RD_PARTS][RD_MEMBERS][64];
static pid_t rd_pid[RD_PARTS][RD_MEMBERS];
static bool rd_written;

static void rd_write(const char *name, int election_ms, int lease_ms)
{
    static int seq;
    int base = 24000 + (int)(getpid() % 45) * 20 + (seq++ % 2) * 10; /* clients base.., peers +6 */
    snprintf(rd_file, sizeof rd_file, "%s/%s.json", work, name);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/%s-p'*", work, name);
    if (system(cmd) != 0)
        fprintf(stderr, "  cannot remove old stores of %s\n", name);
    FILE *f = fopen(rd_file, "w");
    fprintf(f, "{\"cluster\":\"%s\",\"replica_count\":3,\"insecure_local_admin\":true,"
               "\"timers\":{\"tick_ms\":50,\"election_ms\":%d,\"heartbeat_ms\":150,\"catalog_lease_ms\":%d},"
               "\"partitions\":[", name, election_ms, lease_ms);
    for (int p = 0; p < RD_PARTS; p++) {
        fprintf(f, "%s{\"id\":%d,\"members\":[", p ? "," : "", p);
        for (int m = 0; m < RD_MEMBERS; m++) {
            int k = p * RD_MEMBERS + m;
            rd_pid[p][m] = -1;
            snprintf(rd_url[p][m], sizeof rd_url[p][m], "tcp://127.0.0.1:%d", base + k);
            fprintf(f, "%s{\"id\":%d,\"client\":\"%s\",\"peer\":\"tcp://127.0.0.1:%d\",\"data\":\"%s/%s-p%dm%d\"}",
                    m ? "," : "", m + 1, rd_url[p][m], base + 6 + k, work, name, p, m + 1);
        }
        fprintf(f, "]}");
    }
    fprintf(f, "]}\n");
    fclose(f);
    rd_written = true;
}

static void rd_kill(int p, int m)
{
    if (rd_pid[p][m] <= 0)
        return;
    kill(rd_pid[p][m], SIGKILL);
    waitpid(rd_pid[p][m], NULL, 0);
    rd_pid[p][m] = -1;
}

void rd_stop_all(void)
{
    if (!rd_written)
        return;
    for (int p = 0; p < RD_PARTS; p++)
        for (int m = 0; m < RD_MEMBERS; m++)
            rd_kill(p, m);
}

/* One call to member (p, m) on a fresh connection; *ms its latency. */
static answer rd_call_member(int p, int m, const char *method, const uint8_t *req, size_t len, int timeout_ms,
                             int64_t *ms)
{
    char saved[128];
    snprintf(saved, sizeof saved, "%s", url);
    snprintf(url, sizeof url, "%.100s", rd_url[p][m]);
    int64_t t0 = now_ms();
    answer a = call(method, req, len, timeout_ms);
    if (ms)
        *ms = now_ms() - t0;
    snprintf(url, sizeof url, "%s", saved);
    return a;
}

/* Sends to partition p's members until one answers other than NOT_LEADER/UNAVAILABLE. */
static answer rd_call(int p, const char *method, const uint8_t *req, size_t len, int total_ms)
{
    int64_t deadline = now_ms() + total_ms;
    answer a = {0};
    for (;;) {
        for (int m = 0; m < RD_MEMBERS; m++) {
            if (rd_pid[p][m] <= 0)
                continue;
            answer_free(&a);
            a = rd_call_member(p, m, method, req, len, 3000, NULL);
            if (a.code != KL_NOT_LEADER && a.code != KL_UNAVAILABLE)
                return a;
        }
        if (now_ms() > deadline)
            return a;
        sleep_ms(100);
    }
}

/* The serving leader of partition p (a valid catalog lease on a data partition), or -1. */
static int rd_leader(int p, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    do {
        for (int m = 0; m < RD_MEMBERS; m++) {
            if (rd_pid[p][m] <= 0)
                continue;
            Keyload__V1__MemberStatusAnswer *s = member_status(rd_url[p][m], 1000);
            bool ok = s && s->serving && (p == 0 || s->catalog_lease_valid);
            if (s)
                keyload__v1__member_status_answer__free_unpacked(s, NULL);
            if (ok)
                return m;
        }
        sleep_ms(100);
    } while (now_ms() < deadline);
    return -1;
}

/* Creates queue q pinned to partition pin through partition 0; the batch's code, its
 * latency in *ms and its error in *err. */
static kl_code rd_create_queue(const char *q, int pin, int timeout_ms, int64_t *ms, kl_err *err)
{
    Keyload__V1__BatchRequest *b = batch_new(NULL);
    add_create(b, q, 0);
    b->mutations[0]->create_queue->partition = pin;
    size_t len;
    uint8_t *req = pack_free(b, &len);
    int l0 = rd_leader(0, 20000);
    int64_t t0 = now_ms();
    answer a = l0 >= 0 ? rd_call_member(0, l0, "keyload.v1.Batch", req, len, timeout_ms, NULL)
                       : rd_call(0, "keyload.v1.Batch", req, len, timeout_ms);
    *ms = now_ms() - t0;
    free(req);
    kl_code rc = a.code;
    *err = a.err;
    answer_free(&a);
    return rc;
}

/* Six members, default/default and queue q on partition 1 holding one message; false
 * with why filled when the cluster does not get there. */
static bool rd_setup_timers(const char *name, int election_ms, int lease_ms, char *why, size_t cap)
{
    rd_write(name, election_ms, lease_ms);
    for (int p = 0; p < RD_PARTS; p++)
        for (int m = 0; m < RD_MEMBERS; m++)
            rd_pid[p][m] = spawn_member(rd_file, p, m + 1);
    if (rd_leader(0, 30000) < 0 || rd_leader(1, 30000) < 0) {
        snprintf(why, cap, "no serving leaders within 30 s");
        return false;
    }
    Keyload__V1__BatchRequest *b = batch_new(NULL);
    add_create_database(b);
    size_t len;
    uint8_t *req = pack_free(b, &len);
    answer a = rd_call(0, "keyload.v1.Batch", req, len, 30000);
    free(req);
    kl_code rc = a.code;
    answer_free(&a);
    if (rc != KL_OK) {
        snprintf(why, cap, "create database: %s", kl_code_name(rc));
        return false;
    }
    int64_t ms;
    kl_err err;
    if ((rc = rd_create_queue("q", 1, 20000, &ms, &err)) != KL_OK) {
        snprintf(why, cap, "create queue q: %s %.180s", kl_code_name(rc), err.message);
        return false;
    }
    b = batch_new(NULL);
    add_enqueue(b, "q", "hello");
    req = pack_free(b, &len);
    a = rd_call(1, "keyload.v1.Batch", req, len, 20000);
    free(req);
    rc = a.code;
    answer_free(&a);
    if (rc != KL_OK) {
        snprintf(why, cap, "enqueue on partition 1: %s", kl_code_name(rc));
        return false;
    }
    return true;
}

static bool rd_setup(const char *name, char *why, size_t cap)
{
    return rd_setup_timers(name, 1000, RD_LEASE_MS, why, cap);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* ---- a burst of concurrent reads ---- */

#define RD_BURST 200

typedef struct burst_read {
    pthread_t th;
    int leader;
    int timeout_ms;
    kl_code code;
    char detail[64];
    int64_t ms;
} burst_read;

static void *burst_main(void *arg)
{
    burst_read *r = arg;
    uint8_t buf[512];
    size_t n = pack_stats_request("q", buf);
    kl_rpc_client *c;
    kl_err err;
    int64_t t0 = now_ms();
    r->code = kl_rpc_client_open(rd_url[1][r->leader], 2000, 0, &c, &err);
    if (r->code == KL_OK) {
        uint8_t *ans = NULL;
        size_t alen;
        r->code = kl_rpc_invoke(c, "keyload.v1.QueueStats", buf, n, r->timeout_ms, &ans, &alen, NULL, 0, &err);
        free(ans);
        kl_rpc_client_close(c);
    }
    r->ms = now_ms() - t0;
    snprintf(r->detail, sizeof r->detail, "%.60s", r->code == KL_OK ? "" : err.detail);
    return NULL;
}

/* MemberStatus and a Hello to (p, m) both answer within timeout_ms (a Hello without a
 * session key is refused, but answered). */
static bool rd_port_answers(int p, int m, int timeout_ms, char *why, size_t cap)
{
    int64_t ms;
    answer a = rd_call_member(p, m, "keyload.v1.MemberStatus", (const uint8_t *)"", 0, timeout_ms, &ms);
    bool ok = a.code == KL_OK;
    if (!ok)
        snprintf(why, cap, "MemberStatus: %s %s after %lld ms", kl_code_name(a.code), a.err.detail, (long long)ms);
    answer_free(&a);
    if (!ok)
        return false;
    a = rd_call_member(p, m, "keyload.v1.Hello", (const uint8_t *)"", 0, timeout_ms, &ms);
    ok = a.code != KL_DEADLINE_EXCEEDED && strcmp(a.err.detail, "no_answer") != 0 && ms < timeout_ms;
    if (!ok)
        snprintf(why, cap, "Hello: %s %s after %lld ms", kl_code_name(a.code), a.err.detail, (long long)ms);
    answer_free(&a);
    return ok;
}

void test_reads_under_member_faults(void)
{
    char why[256];
    CHECK(rd_setup("rdreads", why, sizeof why), "%s", why);
    int l = rd_leader(1, 20000);
    CHECK(l >= 0, "partition 1 has no serving leader");
    int f1 = (l + 1) % RD_MEMBERS, f2 = (l + 2) % RD_MEMBERS;

    /* One follower down: reads are confirmed by the leader and the other follower. */
    rd_kill(1, f1);
    uint8_t buf[512];
    size_t n = pack_stats_request("q", buf);
    int64_t lat[50];
    for (int i = 0; i < 50; i++) {
        answer a = rd_call_member(1, l, "keyload.v1.QueueStats", buf, n, 4000, &lat[i]);
        kl_code rc = a.code;
        char detail[64];
        snprintf(detail, sizeof detail, "%.60s", a.err.detail);
        answer_free(&a);
        CHECK(rc == KL_OK, "read %d with one follower down: %s %s after %lld ms", i, kl_code_name(rc), detail,
              (long long)lat[i]);
        CHECK(lat[i] <= RD_READ_DEADLINE_MS, "read %d took %lld ms", i, (long long)lat[i]);
    }
    qsort(lat, 50, sizeof lat[0], cmp_i64);
    fprintf(stderr, "  queue stats with one follower of 3-of-3 down: p50 %lld ms, p99 %lld ms (50 reads)\n",
            (long long)lat[24], (long long)lat[49]);

    /* Both followers down: nothing can confirm a read. Every read answers UNAVAILABLE by
     * its deadline, and the burst takes neither MemberStatus nor Hello from the port. */
    rd_kill(1, f2);
    static burst_read br[RD_BURST + 1];
    for (int i = 0; i <= RD_BURST; i++) {
        br[i] = (burst_read){.leader = l, .timeout_ms = i == 0 ? 4000 : 1000};
        CHECK(pthread_create(&br[i].th, NULL, burst_main, &br[i]) == 0, "thread %d", i);
        if (i == 0)
            sleep_ms(50); /* the long read goes first: it must wait for its own deadline */
    }
    sleep_ms(200);
    bool port_ok = rd_port_answers(1, l, 500, why, sizeof why);
    for (int i = 0; i <= RD_BURST; i++)
        pthread_join(br[i].th, NULL);
    CHECK(port_ok, "partition 1's leader stopped answering during the read burst: %s", why);
    CHECK(br[0].code == KL_UNAVAILABLE && br[0].ms <= RD_READ_DEADLINE_MS + RD_SLACK_MS,
          "a read with both followers down: %s %s after %lld ms (deadline %d ms)", kl_code_name(br[0].code),
          br[0].detail, (long long)br[0].ms, RD_READ_DEADLINE_MS);
    int refused = 0, full = 0, expired = 0;
    for (int i = 1; i <= RD_BURST; i++) {
        CHECK(br[i].code == KL_UNAVAILABLE || br[i].code == KL_NOT_LEADER,
              "burst read %d: %s %s after %lld ms (1 s timeout)", i, kl_code_name(br[i].code), br[i].detail,
              (long long)br[i].ms);
        refused++;
        full += strcmp(br[i].detail, "reads_full") == 0;
        expired += strcmp(br[i].detail, "read_deadline") == 0;
    }
    fprintf(stderr, "  both followers down: a read answered %s/%s in %lld ms; %d burst reads answered "
                    "(%d reads_full, %d read_deadline)\n",
            kl_code_name(br[0].code), br[0].detail, (long long)br[0].ms, refused, full, expired);
    CHECK(rd_port_answers(1, l, 500, why, sizeof why), "after the burst: %s", why);
}

void test_catalog_barrier_bounded(void)
{
    char why[256];
    CHECK(rd_setup("rdbarrier", why, sizeof why), "%s", why);
    int l = rd_leader(1, 20000);
    CHECK(l >= 0, "partition 1 has no serving leader");
    /* Partition 1's leader keeps tailing but cannot commit the new version (3-of-3, one
     * follower down): the creation waits at most for its catalog lease to run out. */
    rd_kill(1, (l + 1) % RD_MEMBERS);
    int64_t ms;
    kl_err err;
    kl_code rc = rd_create_queue("q2", 1, 15000, &ms, &err);
    int64_t bound = RD_LEASE_MS + RD_LEASE_MS / 10 + 200 + RD_SLACK_MS;
    fprintf(stderr, "  queue creation with partition 1 unable to commit: %s after %lld ms (bound %lld ms)\n",
            kl_code_name(rc), (long long)ms, (long long)bound);
    CHECK(rc == KL_OK, "create q2: %s %s", kl_code_name(rc), err.message);
    CHECK(ms <= bound, "create q2 took %lld ms, bound %lld ms", (long long)ms, (long long)bound);
}

/* ---- the catalog lease where a Receive commits ---- */

typedef struct late_receive {
    pthread_t th;
    int leader;
    kl_code code;
    char detail[64];
    long long delivered; /* messages in an OK receipt */
} late_receive;

static void *late_receive_main(void *arg)
{
    late_receive *r = arg;
    Keyload__V1__BatchRequest *b = batch_new(NULL);
    add_receive(b, "q", 10, 60000);
    size_t len;
    uint8_t *req = pack_free(b, &len);
    answer a = rd_call_member(1, r->leader, "keyload.v1.Batch", req, len, 20000, NULL);
    free(req);
    r->code = a.code;
    snprintf(r->detail, sizeof r->detail, "%.60s", a.err.detail);
    r->delivered = 0;
    if (a.code == KL_OK) {
        Keyload__V1__BatchReceipt *rc = keyload__v1__batch_receipt__unpack(NULL, a.len, a.bytes);
        if (rc != NULL && rc->n_results == 1 && rc->results[0]->received != NULL)
            r->delivered = (long long)rc->results[0]->received->n_messages;
        if (rc != NULL)
            keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    }
    answer_free(&a);
    return NULL;
}

void test_receive_commits_after_lease(void)
{
    char why[256];
    CHECK(rd_setup("rdlease", why, sizeof why), "%s", why);
    int l = rd_leader(1, 20000);
    CHECK(l >= 0, "partition 1 has no serving leader");
    int f1 = (l + 1) % RD_MEMBERS;
    /* A Receive admitted under a valid lease cannot commit (3-of-3, one follower down)... */
    rd_kill(1, f1);
    static late_receive lr;
    lr = (late_receive){.leader = l};
    CHECK(pthread_create(&lr.th, NULL, late_receive_main, &lr) == 0, "thread");
    sleep_ms(300);
    /* ...partition 0 goes away, so the lease runs out before the commit... */
    for (int m = 0; m < RD_MEMBERS; m++)
        rd_kill(0, m);
    /* Its last tail began before partition 0 died, so the lease has run out RD_LEASE_MS
     * later (MemberStatus cannot show it: a leader that cannot commit reports no lease). */
    sleep_ms(RD_LEASE_MS + 700);
    /* ...and commits once the follower is back: its messages must not be handed out. */
    rd_pid[1][f1] = spawn_member(rd_file, 1, f1 + 1);
    pthread_join(lr.th, NULL);
    fprintf(stderr, "  a Receive committed after the catalog lease ran out: %s %s (%lld messages handed out)\n",
            kl_code_name(lr.code), lr.detail, lr.delivered);
    CHECK(lr.code == KL_UNAVAILABLE && strcmp(lr.detail, "catalog_lease") == 0 && lr.delivered == 0,
          "the late Receive answered %s %s with %lld messages", kl_code_name(lr.code), lr.detail, lr.delivered);
}

/* ---- the catalog lease where a read is served ---- */

typedef struct late_read {
    pthread_t th;
    int leader;
    answer a;
    int64_t ms;
} late_read;

static void *late_read_main(void *arg)
{
    late_read *r = arg;
    uint8_t buf[512];
    size_t n = pack_stats_request("q", buf);
    r->a = rd_call_member(1, r->leader, "keyload.v1.QueueStats", buf, n, 5000, &r->ms);
    return NULL;
}

void test_read_confirmed_after_lease(void)
{
    char why[256];
    /* A long election timeout keeps the leader leading while its followers are paused; the
     * shortest catalog lease runs out well within one read deadline. */
    CHECK(rd_setup_timers("rdlread", 4000, 1500, why, sizeof why), "%s", why);
    int l = rd_leader(1, 20000);
    CHECK(l >= 0, "partition 1 has no serving leader");
    int f1 = (l + 1) % RD_MEMBERS, f2 = (l + 2) % RD_MEMBERS;
    /* The read is admitted under a valid lease but no follower can confirm it yet... */
    kill(rd_pid[1][f1], SIGSTOP);
    kill(rd_pid[1][f2], SIGSTOP);
    for (int m = 0; m < RD_MEMBERS; m++)
        rd_kill(0, m);
    static late_read lr;
    lr = (late_read){.leader = l};
    if (pthread_create(&lr.th, NULL, late_read_main, &lr) != 0) {
        kill(rd_pid[1][f1], SIGCONT);
        kill(rd_pid[1][f2], SIGCONT);
        CHECK(false, "thread");
    }
    /* ...the lease (1500 ms from a tail begun before partition 0 died) runs out, and then
     * the followers confirm it: it must not be served. */
    sleep_ms(1700);
    kill(rd_pid[1][f1], SIGCONT);
    kill(rd_pid[1][f2], SIGCONT);
    pthread_join(lr.th, NULL);
    kl_code rc = lr.a.code;
    char detail[64];
    snprintf(detail, sizeof detail, "%.60s", lr.a.err.detail);
    answer_free(&lr.a);
    fprintf(stderr, "  a read confirmed after the catalog lease ran out: %s %s after %lld ms\n", kl_code_name(rc),
            detail, (long long)lr.ms);
    CHECK(rc == KL_UNAVAILABLE && strcmp(detail, "catalog_lease") == 0, "the late read answered %s %s",
          kl_code_name(rc), detail);
}

/* ---- a catalog tail is answered only by a confirmed partition-0 leader ---- */

static answer rd_tail(int m, int timeout_ms, int64_t *ms)
{
    Keyload__V1__CatalogTailRequest tr = KEYLOAD__V1__CATALOG_TAIL_REQUEST__INIT;
    tr.partition = 1;
    tr.applied_version = 0;
    tr.wait_ms = 0;
    uint8_t buf[64];
    size_t n = keyload__v1__catalog_tail_request__pack(&tr, buf);
    return rd_call_member(0, m, "keyload.v1.CatalogTail", buf, n, timeout_ms, ms);
}

void test_tail_needs_confirmed_leader(void)
{
    char why[256];
    /* A long election timeout keeps partition 0's leader leading while both its followers
     * are paused: it cannot confirm that it still leads, so it must not answer a tail (a data
     * partition renews its catalog lease from the answer). */
    CHECK(rd_setup_timers("rdltail", 4000, 3000, why, sizeof why), "%s", why);
    int l = rd_leader(0, 20000);
    CHECK(l >= 0, "partition 0 has no serving leader");
    int64_t ms = 0;
    answer a = rd_tail(l, 3000, &ms);
    kl_code rc = a.code;
    answer_free(&a);
    CHECK(rc == KL_OK, "a tail to the leader with its followers up answered %s", kl_code_name(rc));
    int f1 = (l + 1) % RD_MEMBERS, f2 = (l + 2) % RD_MEMBERS;
    kill(rd_pid[0][f1], SIGSTOP);
    kill(rd_pid[0][f2], SIGSTOP);
    a = rd_tail(l, 3000, &ms);
    rc = a.code;
    char detail[64];
    snprintf(detail, sizeof detail, "%.60s", a.err.detail);
    answer_free(&a);
    kill(rd_pid[0][f1], SIGCONT);
    kill(rd_pid[0][f2], SIGCONT);
    fprintf(stderr, "  a tail to a leader that cannot confirm its leadership: %s %s after %lld ms\n",
            kl_code_name(rc), detail, (long long)ms);
    CHECK(rc != KL_OK, "a leader that could not confirm its leadership answered a tail OK after %lld ms",
          (long long)ms);
    /* Once it can confirm again, tails are answered. */
    int64_t deadline = now_ms() + 10000;
    do {
        a = rd_tail(l, 3000, &ms);
        rc = a.code;
        answer_free(&a);
        if (rc == KL_OK)
            break;
        l = rd_leader(0, 5000);
        sleep_ms(100);
    } while (now_ms() < deadline && l >= 0);
    CHECK(rc == KL_OK, "no tail answered OK within 10 s after the followers resumed (last %s)", kl_code_name(rc));
}

/* ---- an administrator's grant to itself while a data partition cannot commit ---- */

static rf3 rd_sc;         /* the sessions cluster of test_self_grant_with_lagging_partition */
static bool rd_sc_written;

void rd_stop_sessions(void)
{
    if (rd_sc_written)
        rf3_kill_all(&rd_sc);
}

void test_self_grant_with_lagging_partition(void)
{
    char why[256];
    int base = 25000 + (int)(getpid() % 45) * 20;
    CHECK(rf3_write(&rd_sc, "rdgrant", base, PROC_LIFETIME_S, why, sizeof why), "%s", why);
    rd_sc_written = true;
    CHECK(rf3_start_all(&rd_sc, 40000), "the sessions cluster did not serve within 40 s");
    char key[760];
    uint8_t pk[32];
    kl_err err;
    snprintf(key, sizeof key, "%s/rdgrant-root.key", work);
    unlink(key);
    CHECK(kl_key_file_new(key, pk, &err) == KL_OK, "key file: %s", err.message);
    CHECK(sdk_bootstrap(rd_sc.file, rd_sc.secret, "acme/shop", "root", pk, NULL, NULL, &err) == KL_OK,
          "bootstrap: %s %s", kl_code_name(err.code), err.message);
    /* 8 s per call: each attempt gets 2 s, so the first attempt's barrier answers UNAVAILABLE
     * catalog_barrier before partition 1's lease bound and the SDK retries its command id. */
    kl_client *c = NULL;
    CHECK(kl_client_open_principal(rd_sc.file, "acme/shop", 8000, "root", key, &c, &err) == KL_OK, "open: %s",
          err.message);
    int l = rf3_leader(&rd_sc, 1);
    if (l < 0)
        kl_client_close(c);
    CHECK(l >= 0, "partition 1 has no serving leader");
    rf3_kill(&rd_sc, 1, (l + 1) % RF3_MEMBERS);
    char cmd[KL_COMMAND_ID_TEXT_LEN + 1];
    kl_command_id_new(cmd);
    kl_grant g = {.permission = KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, .queue_pattern = "orders.*"};
    kl_principal_result res;
    int64_t t0 = now_ms();
    kl_code rc = kl_client_grant(c, cmd, "root", &g, &res, NULL, &err);
    int64_t ms = now_ms() - t0;
    /* The same command id again, as a caller that lost the answer would send it. */
    kl_err err2;
    kl_code rc2 = rc == KL_OK ? kl_client_grant(c, cmd, "root", &g, &res, NULL, &err2) : rc;
    kl_client_close(c);
    int64_t bound = 3000 + 300 + 200 + RD_SLACK_MS; /* rf3's catalog_lease_ms x 1.1 + margin */
    fprintf(stderr, "  self-grant with one follower of partition 1 down (3-of-3): %s %s after %lld ms "
                    "(bound %lld ms); its replay: %s\n",
            kl_code_name(rc), rc == KL_OK ? "" : err.detail, (long long)ms, (long long)bound, kl_code_name(rc2));
    CHECK(rc == KL_OK, "the grant answered %s %s: %s", kl_code_name(rc), err.detail, err.message);
    CHECK(ms <= bound, "the grant took %lld ms, bound %lld ms", (long long)ms, (long long)bound);
    CHECK(rc2 == KL_OK, "its replay answered %s %s", kl_code_name(rc2), err2.detail);
}

/* ---- a lease from a tail that lagged ---- */

static uint64_t rd_catalog_version(int p, int m)
{
    Keyload__V1__MemberStatusAnswer *s = member_status(rd_url[p][m], 1000);
    uint64_t v = s ? s->catalog_version : 0;
    if (s)
        keyload__v1__member_status_answer__free_unpacked(s, NULL);
    return v;
}

static void rd_signal_partition(int p, int sig)
{
    for (int m = 0; m < RD_MEMBERS; m++)
        if (rd_pid[p][m] > 0)
            kill(rd_pid[p][m], sig);
}

void test_lagging_tail_grants_no_lease(void)
{
    char why[256];
    CHECK(rd_setup("rdlag", why, sizeof why), "%s", why);
    int l = rd_leader(1, 20000), l0 = rd_leader(0, 20000);
    CHECK(l >= 0 && l0 >= 0, "no serving leaders");
    int f1 = (l + 1) % RD_MEMBERS;
    Keyload__V1__MemberStatusAnswer *s = member_status(rd_url[1][l], 1000);
    CHECK(s != NULL, "no MemberStatus from partition 1's leader");
    uint64_t last0 = s->last_index;
    keyload__v1__member_status_answer__free_unpacked(s, NULL);
    /* Catalog change A reaches partition 1's leader while it still counts the paused
     * follower: it proposes A, which cannot commit (3-of-3). Its later tails lag, so partition
     * 0 lets A return once partition 1's lease bound has passed. */
    kill(rd_pid[1][f1], SIGSTOP);
    int64_t ms;
    kl_err err;
    kl_code rc = rd_create_queue("qa", 1, 15000, &ms, &err);
    uint64_t va = rd_catalog_version(0, l0);
    s = member_status(rd_url[1][l], 1000);
    bool stuck = s != NULL && s->last_index > last0 && s->commit_index < s->last_index && s->catalog_version < va;
    if (s)
        keyload__v1__member_status_answer__free_unpacked(s, NULL);
    if (rc != KL_OK || !stuck)
        kill(rd_pid[1][f1], SIGCONT);
    CHECK(rc == KL_OK, "create qa: %s %s", kl_code_name(rc), err.detail);
    CHECK(stuck, "partition 1's leader holds no uncommitted entry for catalog version %llu", (unsigned long long)va);
    /* Change B returns at once: partition 1 has not sent a current tail for longer than its
     * lease. Partition 0 then pauses, so no later tail tells partition 1 about B. */
    rc = rd_create_queue("qb", 1, 15000, &ms, &err);
    rd_signal_partition(0, SIGSTOP);
    int64_t b_ok = now_ms();
    kill(rd_pid[1][f1], SIGCONT);
    /* A commits on partition 1. Its leader now holds catalog version A, older than B. */
    uint64_t v1 = 0;
    while (now_ms() - b_ok < 1500 && (v1 = rd_catalog_version(1, l)) < va)
        sleep_ms(20);
    /* Until the leader hears from the follower again it refuses for want of replicas. */
    Keyload__V1__BatchRequest *b = batch_new(NULL);
    add_receive(b, "q", 10, 60000);
    size_t len;
    uint8_t *req = pack_free(b, &len);
    kl_code rrc;
    char detail[64];
    int64_t at;
    do {
        answer a = rd_call_member(1, l, "keyload.v1.Batch", req, len, 3000, NULL);
        at = now_ms() - b_ok;
        rrc = a.code;
        snprintf(detail, sizeof detail, "%.60s", a.err.detail);
        answer_free(&a);
    } while (rrc == KL_UNAVAILABLE && strcmp(detail, "replicas_unavailable") == 0 && at < 4000 && (sleep_ms(20), 1));
    free(req);
    rd_signal_partition(0, SIGCONT);
    fprintf(stderr, "  create qb (catalog version %llu) answered %s in %lld ms; partition 1 applied %llu; a Receive "
                    "%lld ms after it returned: %s %s\n",
            (unsigned long long)va + 1, kl_code_name(rc), (long long)ms, (unsigned long long)v1, (long long)at,
            kl_code_name(rrc), detail);
    CHECK(rc == KL_OK, "create qb: %s %s", kl_code_name(rc), err.detail);
    CHECK(v1 >= va, "partition 1 did not apply catalog version %llu within 1.5 s", (unsigned long long)va);
    CHECK(rrc != KL_OK, "partition 1 handed out messages under catalog version %llu after version %llu returned",
          (unsigned long long)v1, (unsigned long long)va + 1);
    CHECK(rrc == KL_UNAVAILABLE && strcmp(detail, "catalog_lease") == 0, "the Receive answered %s %s",
          kl_code_name(rrc), detail);
    /* Partition 0 back: partition 1 catches up and serves again. */
    b = batch_new(NULL);
    add_enqueue(b, "qb", "after");
    req = pack_free(b, &len);
    answer a = rd_call(1, "keyload.v1.Batch", req, len, 15000);
    free(req);
    rc = a.code;
    answer_free(&a);
    CHECK(rc == KL_OK, "partition 1 does not serve qb after partition 0 resumed: %s", kl_code_name(rc));
}
