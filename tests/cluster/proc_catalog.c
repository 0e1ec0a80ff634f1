/* Process test of the catalog (KL-2 test f) on a real 3 x 3 cluster: three partitions of
 * three keyloadd members each, replica_count 2, on loopback ports 20000..20999.
 *
 * Queue definitions committed on partition 0 must reach every member of every data
 * partition, each version applied exactly once and in order (MemberStatus reports both
 * the applied version and how many changes were applied; they must be equal), also when a
 * data partition's leader is killed -9 and after a cold restart of all nine processes.
 * Every process is started by fork/exec and killed by its pid. */
#include "tests/cluster/proc.h"

#include "common/guid.h"
#include "keyload/v1/catalog.pb-c.h"

#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MP_PARTS 3
#define MP_MEMBERS 3

static char mp_file[700];
static char mp_url[MP_PARTS][MP_MEMBERS][64];
static pid_t mp_pid[MP_PARTS][MP_MEMBERS];
static bool mp_written;
static int mp_parts = MP_PARTS, mp_members = MP_MEMBERS;

/* A cluster of `parts` partitions of `members` members (at most 3 x 3). */
static void mp_write(const char *name, int parts, int members, int replica_count, int lease_ms)
{
    static int seq;
    int base = 20000 + (getpid() % 22) * 40 + (seq++ % 2) * 20; /* clients base.., peers base+10.. */
    mp_parts = parts;
    mp_members = members;
    snprintf(mp_file, sizeof mp_file, "%s/%s.json", work, name);
    FILE *f = fopen(mp_file, "w");
    fprintf(f, "{\"cluster\":\"%s\",\"replica_count\":%d,\"insecure_local_admin\":true,"
               "\"timers\":{\"tick_ms\":50,\"election_ms\":1000,\"heartbeat_ms\":150,\"catalog_lease_ms\":%d},"
               "\"partitions\":[", name, replica_count, lease_ms);
    for (int p = 0; p < MP_PARTS; p++)
        for (int m = 0; m < MP_MEMBERS; m++)
            mp_pid[p][m] = -1;
    for (int p = 0; p < parts; p++) {
        fprintf(f, "%s{\"id\":%d,\"members\":[", p ? "," : "", p);
        for (int m = 0; m < members; m++) {
            int k = p * MP_MEMBERS + m;
            snprintf(mp_url[p][m], sizeof mp_url[p][m], "tcp://127.0.0.1:%d", base + k);
            fprintf(f, "%s{\"id\":%d,\"client\":\"%s\",\"peer\":\"tcp://127.0.0.1:%d\",\"data\":\"%s/%s-p%dm%d\"}",
                    m ? "," : "", m + 1, mp_url[p][m], base + 10 + k, work, name, p, m + 1);
        }
        fprintf(f, "]}");
    }
    fprintf(f, "]}\n");
    fclose(f);
    mp_written = true;
}

static bool mp_start_with_database(void);

static void mp_start(int p, int m) { mp_pid[p][m] = spawn_member(mp_file, p, m + 1); }

static void mp_kill(int p, int m)
{
    if (mp_pid[p][m] <= 0)
        return;
    kill(mp_pid[p][m], SIGKILL);
    waitpid(mp_pid[p][m], NULL, 0);
    mp_pid[p][m] = -1;
}

void mp_stop_all(void)
{
    if (!mp_written)
        return;
    for (int p = 0; p < mp_parts; p++)
        for (int m = 0; m < mp_members; m++)
            mp_kill(p, m);
}

static void mp_start_all(void)
{
    for (int p = 0; p < mp_parts; p++)
        for (int m = 0; m < mp_members; m++)
            mp_start(p, m);
}

/* Sends to partition p's members until one answers other than NOT_LEADER/UNAVAILABLE. */
static answer mp_call(int p, const char *method, const uint8_t *req, size_t len, int total_ms)
{
    int64_t deadline = now_ms() + total_ms;
    answer a = {0};
    for (;;) {
        for (int m = 0; m < mp_members; m++) {
            if (mp_pid[p][m] <= 0)
                continue;
            snprintf(url, sizeof url, "%.100s", mp_url[p][m]);
            answer_free(&a);
            a = call(method, req, len, 3000);
            if (a.code != KL_NOT_LEADER && a.code != KL_UNAVAILABLE)
                return a;
        }
        if (now_ms() > deadline)
            return a;
        sleep_ms(100);
    }
}

static answer mp_batch(int p, Keyload__V1__BatchRequest *b, int total_ms)
{
    size_t len;
    uint8_t *req = pack_free(b, &len);
    answer a = mp_call(p, "keyload.v1.Batch", req, len, total_ms);
    free(req);
    return a;
}

static Keyload__V1__MemberStatusAnswer *mp_status(int p, int m) { return member_status(mp_url[p][m], 1000); }

/* The serving leader of partition p, or -1 after timeout_ms. */
static int mp_leader(int p, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    do {
        for (int m = 0; m < mp_members; m++) {
            if (mp_pid[p][m] <= 0)
                continue;
            Keyload__V1__MemberStatusAnswer *s = mp_status(p, m);
            bool leads = s && s->serving;
            if (s)
                keyload__v1__member_status_answer__free_unpacked(s, NULL);
            if (leads)
                return m;
        }
        sleep_ms(100);
    } while (now_ms() < deadline);
    return -1;
}

/* Waits until every running member has applied catalog version `v`, exactly once per
 * version. Fills why (and returns false) with the first member that did not. A member
 * that ever reports changes != version fails at once: a version applied twice or
 * skipped cannot heal. */
static bool mp_catalog_everywhere(uint64_t v, int timeout_ms, char *why, size_t cap)
{
    int64_t deadline = now_ms() + timeout_ms;
    for (;;) {
        bool all = true;
        for (int p = 0; p < mp_parts; p++)
            for (int m = 0; m < mp_members; m++) {
                if (mp_pid[p][m] <= 0)
                    continue;
                Keyload__V1__MemberStatusAnswer *s = mp_status(p, m);
                if (s == NULL) {
                    snprintf(why, cap, "p%dm%d does not answer MemberStatus", p, m + 1);
                    all = false;
                    continue;
                }
                if (s->catalog_changes_applied != s->catalog_version) {
                    snprintf(why, cap, "p%dm%d applied %llu changes for version %llu", p, m + 1,
                             (unsigned long long)s->catalog_changes_applied,
                             (unsigned long long)s->catalog_version);
                    keyload__v1__member_status_answer__free_unpacked(s, NULL);
                    return false;
                }
                if (s->catalog_version != v) {
                    snprintf(why, cap, "p%dm%d is at catalog version %llu, not %llu", p, m + 1,
                             (unsigned long long)s->catalog_version, (unsigned long long)v);
                    all = false;
                }
                keyload__v1__member_status_answer__free_unpacked(s, NULL);
            }
        if (all)
            return true;
        if (now_ms() > deadline)
            return false;
        sleep_ms(100);
    }
}

/* Every running member's own catalog copy places `queue` on `partition`. */
static bool mp_located_everywhere(const char *queue, int partition, char *why, size_t cap)
{
    Keyload__V1__LocateQueueRequest r = KEYLOAD__V1__LOCATE_QUEUE_REQUEST__INIT;
    r.queue = mkref(queue);
    r.local = true;
    uint8_t buf[512];
    size_t n = keyload__v1__locate_queue_request__pack(&r, buf);
    keyload__v1__queue_lane_ref__free_unpacked(r.queue, NULL);
    for (int p = 0; p < mp_parts; p++)
        for (int m = 0; m < mp_members; m++) {
            if (mp_pid[p][m] <= 0)
                continue;
            snprintf(url, sizeof url, "%.100s", mp_url[p][m]);
            answer a = call("keyload.v1.LocateQueue", buf, n, 2000);
            Keyload__V1__LocateQueueAnswer *l =
                a.code == KL_OK ? keyload__v1__locate_queue_answer__unpack(NULL, a.len, a.bytes) : NULL;
            bool ok = l && l->queue && l->queue->partition == partition;
            if (!ok)
                snprintf(why, cap, "p%dm%d: %s %.150s", p, m + 1, kl_code_name(a.code),
                         l ? "wrong placement" : a.err.message);
            if (l)
                keyload__v1__locate_queue_answer__free_unpacked(l, NULL);
            answer_free(&a);
            if (!ok)
                return false;
        }
    return true;
}

/* Creates queue q on partition 0 (placement chosen there unless pin >= 0); returns the
 * placement and the catalog version the receipt names, or -1. */
static int mp_create_queue(const char *q, int pin, uint64_t *version)
{
    Keyload__V1__BatchRequest *b = batch_new(NULL);
    add_create(b, q, 0);
    b->mutations[0]->create_queue->partition = pin;
    answer a = mp_batch(0, b, 20000);
    int placed = -1;
    if (a.code == KL_OK) {
        Keyload__V1__BatchReceipt *r = keyload__v1__batch_receipt__unpack(NULL, a.len, a.bytes);
        if (r && r->n_results == 1 && r->results[0]->queue_created) {
            placed = r->results[0]->queue_created->partition;
            *version = r->catalog_version;
        }
        if (r)
            keyload__v1__batch_receipt__free_unpacked(r, NULL);
    } else {
        fprintf(stderr, "  create %s: %s %s\n", q, kl_code_name(a.code), a.err.message);
    }
    answer_free(&a);
    return placed;
}

static long long mp_messages(int p, const char *queue)
{
    uint8_t buf[512];
    size_t n = pack_stats_request(queue, buf);
    answer a = mp_call(p, "keyload.v1.QueueStats", buf, n, 20000);
    long long m = -1;
    if (a.code == KL_OK) {
        Keyload__V1__QueueStatsAnswer *s = keyload__v1__queue_stats_answer__unpack(NULL, a.len, a.bytes);
        m = s ? (long long)s->messages : -1;
        if (s)
            keyload__v1__queue_stats_answer__free_unpacked(s, NULL);
    }
    answer_free(&a);
    return m;
}

void test_catalog_reaches_every_partition(void)
{
    char why[256] = "";
    mp_write("mp", 3, 3, 2, 3000);
    CHECK(mp_start_with_database(), "the cluster did not create default/default");
    Keyload__V1__BatchRequest *b;
    answer a;

    /* Placement: chosen (a data partition) and pinned. The answer comes after the barrier,
     * so both data partitions' leaders have applied it; followers follow. */
    uint64_t v1 = 0, v2 = 0, v3 = 0, v4 = 0;
    int pa = mp_create_queue("alpha", -1, &v1);
    CHECK(pa == 1 || pa == 2, "alpha placed on %d", pa);
    int pb = mp_create_queue("beta", 2, &v2);
    CHECK(pb == 2 && v2 == v1 + 1, "beta placed on %d at version %llu", pb, (unsigned long long)v2);
    CHECK(mp_catalog_everywhere(v2, 15000, why, sizeof why), "after two queues: %s", why);
    CHECK(mp_located_everywhere("alpha", pa, why, sizeof why), "alpha: %s", why);
    b = batch_new(NULL);
    add_enqueue(b, "alpha", "kept across everything");
    a = mp_batch(pa, b, 20000);
    CHECK(a.code == KL_OK, "enqueue on partition %d: %s %s", pa, kl_code_name(a.code), a.err.message);
    answer_free(&a);
    /* A data partition's leader is not where definitions are made. */
    b = batch_new(NULL);
    add_create(b, "nowhere", 0);
    a = mp_batch(1, b, 20000);
    CHECK(a.code == KL_FAILED_PRECONDITION, "create on partition 1: %s", kl_code_name(a.code));
    answer_free(&a);

    /* A data partition's leader dies: its successor resumes the tail from its own applied
     * version; the killed member catches up from the log when it returns. */
    int l1 = mp_leader(1, 15000);
    CHECK(l1 >= 0, "partition 1 has no serving leader");
    mp_kill(1, l1);
    int pc = mp_create_queue("gamma", 1, &v3);
    CHECK(pc == 1 && v3 == v2 + 1, "gamma during failover: partition %d version %llu", pc,
          (unsigned long long)v3);
    CHECK(mp_catalog_everywhere(v3, 15000, why, sizeof why), "after failover: %s", why);
    mp_start(1, l1);
    CHECK(mp_catalog_everywhere(v3, 20000, why, sizeof why), "killed member back: %s", why);
    CHECK(mp_located_everywhere("gamma", 1, why, sizeof why), "gamma: %s", why);

    /* Cold restart of all nine: every version still applied once, state back, and the
     * next version reaches everyone. */
    mp_stop_all();
    mp_start_all();
    CHECK(mp_catalog_everywhere(v3, 30000, why, sizeof why), "after cold restart: %s", why);
    for (int p = 0; p < mp_parts; p++)
        CHECK(mp_leader(p, 20000) >= 0, "partition %d elected no leader after the cold restart", p);
    CHECK(mp_messages(pa, "alpha") == 1, "alpha lost its message over the cold restart");
    int pd = mp_create_queue("delta", -1, &v4);
    CHECK(pd >= 1 && v4 == v3 + 1, "delta after cold restart: partition %d version %llu", pd,
          (unsigned long long)v4);
    CHECK(mp_catalog_everywhere(v4, 15000, why, sizeof why), "after delta: %s", why);
    CHECK(mp_located_everywhere("delta", pd, why, sizeof why), "delta: %s", why);
    mp_stop_all();
}

/* Starts every member and creates default/default on partition 0. */
static bool mp_start_with_database(void)
{
    mp_start_all();
    Keyload__V1__BatchRequest *b = batch_new(NULL);
    add_create_database(b);
    answer a = mp_batch(0, b, 30000);
    kl_code code = a.code;
    if (code != KL_OK)
        fprintf(stderr, "  create database: %s %s\n", kl_code_name(code), a.err.message);
    answer_free(&a);
    return code == KL_OK;
}

/* Whether partition p's member m (its only member here) holds a catalog lease. */
static bool mp_lease_valid(int p, int m)
{
    Keyload__V1__MemberStatusAnswer *s = mp_status(p, m);
    bool v = s && s->catalog_lease_valid;
    if (s)
        keyload__v1__member_status_answer__free_unpacked(s, NULL);
    return v;
}

static kl_code mp_enqueue(int p, const char *q, int total_ms, kl_err *err)
{
    Keyload__V1__BatchRequest *b = batch_new(NULL);
    add_enqueue(b, q, "x");
    answer a = mp_batch(p, b, total_ms);
    kl_code rc = a.code;
    *err = a.err;
    answer_free(&a);
    return rc;
}

/* The catalog lease (KL-3 item 2, DESIGN.md §5) on two single-member partitions with
 * catalog_lease_ms 1500: cut from partition 0, a data partition serves until its lease
 * runs out and then refuses (UNAVAILABLE catalog_lease); partition 0 back, it serves
 * again. A catalog change with a data partition down returns once that partition's lease
 * has run out, not at the caller's deadline. */
void test_catalog_lease(void)
{
    kl_err err;
    char why[256] = "";
    mp_write("lease", 2, 1, 1, 1500);
    CHECK(mp_start_with_database(), "the cluster did not create default/default");
    uint64_t v = 0;
    CHECK(mp_create_queue("q", 1, &v) == 1, "queue q not placed on partition 1");
    CHECK(mp_enqueue(1, "q", 10000, &err) == KL_OK, "enqueue: %s", err.message);
    CHECK(mp_lease_valid(1, 0), "partition 1 holds no lease with partition 0 up");

    mp_kill(0, 0);
    int64_t cut = now_ms();
    /* Within the lease it still serves (a single attempt, no retries). */
    CHECK(mp_enqueue(1, "q", 0, &err) == KL_OK, "enqueue right after the cut: %s", err.message);
    sleep_ms(2200);
    kl_code rc = mp_enqueue(1, "q", 0, &err);
    CHECK(rc == KL_UNAVAILABLE && strcmp(err.detail, "catalog_lease") == 0,
          "%lld ms after the cut: %s %s (%s)", (long long)(now_ms() - cut), kl_code_name(rc), err.detail,
          err.message);
    CHECK(!mp_lease_valid(1, 0), "MemberStatus still reports a lease");

    mp_start(0, 0);
    CHECK(mp_enqueue(1, "q", 20000, &err) == KL_OK, "after partition 0 returned: %s", err.message);

    /* Partition 1 down: a catalog change returns after its lease, well before the deadline. */
    mp_kill(1, 0);
    int64_t t0 = now_ms();
    uint64_t v2 = 0;
    CHECK(mp_create_queue("q2", 1, &v2) == 1, "q2 not created while partition 1 is down");
    int64_t took = now_ms() - t0;
    CHECK(took < 6000, "the create waited %lld ms for a partition whose lease had run out", (long long)took);
    fprintf(stderr, "  create with a data partition down answered in %lld ms (lease 1500 ms)\n", (long long)took);
    mp_start(1, 0);
    CHECK(mp_catalog_everywhere(v2, 15000, why, sizeof why), "partition 1 back: %s", why);
    CHECK(mp_enqueue(1, "q2", 20000, &err) == KL_OK, "enqueue to q2: %s", err.message);
    mp_stop_all();
}
