/* Outcome retention on real keyloadd processes (ARCHITECTURE.md "Outcome retention"): three
 * members of one partition, replica_count 3, timers.outcome_retention_ms at its minimum
 * (10 s). An outcome replays before the horizon; after it the next entry sweeps it on
 * every member, a retry with the old command id and first-sent time is refused
 * outcome_expired, the outcome of a batch holding a transfer mutation survives and replays,
 * and a member killed -9 after the sweep and restarted agrees. Each member's store is then
 * read directly (after SIGTERM closes it cleanly): the same outcomes, index keys and mark on
 * all three. Members are started by proc_exec (bounded lifetime) and killed by pid. */
#include "tests/cluster/proc.h"

#include "common/rpc.h"
#include "daemon/store/keys.h"
#include "daemon/store/store.h"
#include "tests/cluster/store_scan.h"

#include <rocksdb/c.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RT_MEMBERS 3
#define RT_QUEUE "kept"
#define RT_RETENTION_MS 10000

static char rt_file[700];
static char rt_url[RT_MEMBERS][64];
static char rt_data[RT_MEMBERS][700];
static pid_t rt_pid[RT_MEMBERS] = {-1, -1, -1};

/* Ports 23000..23999 (apart from the other tests' ranges): clients base..base+2, peers
 * base+5..base+7. */
static void rt_write(int attempt)
{
    int base = 23000 + (int)((getpid() + attempt * 37) % 100) * 10;
    snprintf(rt_file, sizeof rt_file, "%s/retain.json", work);
    FILE *f = fopen(rt_file, "w");
    fprintf(f, "{\"cluster\":\"retain\",\"replica_count\":3,\"insecure_local_admin\":true,"
               "\"timers\":{\"tick_ms\":50,\"election_ms\":1000,\"heartbeat_ms\":150,"
               "\"outcome_retention_ms\":%d},\"partitions\":[{\"id\":0,\"members\":[",
            RT_RETENTION_MS);
    for (int i = 0; i < RT_MEMBERS; i++) {
        snprintf(rt_url[i], sizeof rt_url[i], "tcp://127.0.0.1:%d", base + i);
        snprintf(rt_data[i], sizeof rt_data[i], "%s/retain%d-m%d", work, attempt, i + 1);
        fprintf(f, "%s{\"id\":%d,\"client\":\"%s\",\"peer\":\"tcp://127.0.0.1:%d\",\"data\":\"%s\"}",
                i ? "," : "", i + 1, rt_url[i], base + 5 + i, rt_data[i]);
    }
    fprintf(f, "]}]}\n");
    fclose(f);
}

static void rt_kill(int i)
{
    if (rt_pid[i] <= 0)
        return;
    kill(rt_pid[i], SIGKILL);
    waitpid(rt_pid[i], NULL, 0);
    rt_pid[i] = -1;
}

void rt_stop_all(void)
{
    for (int i = 0; i < RT_MEMBERS; i++)
        rt_kill(i);
}

/* SIGTERM (the store is closed cleanly, applied state flushed), then kill -9 after 10 s. */
static bool rt_term(int i)
{
    if (rt_pid[i] <= 0)
        return false;
    kill(rt_pid[i], SIGTERM);
    for (int waited = 0; waited < 10000; waited += 50) {
        int st;
        if (waitpid(rt_pid[i], &st, WNOHANG) == rt_pid[i]) {
            rt_pid[i] = -1;
            return true;
        }
        sleep_ms(50);
    }
    rt_kill(i);
    return false;
}

static answer rt_call(int i, const uint8_t *req, size_t len)
{
    answer a = {0};
    kl_rpc_client *c;
    a.code = kl_rpc_client_open(rt_url[i], 2000, 0, &c, &a.err);
    if (a.code != KL_OK)
        return a;
    a.code = kl_rpc_invoke(c, "keyload.v1.Batch", req, len, 10000, &a.bytes, &a.len, NULL, 0, &a.err);
    kl_rpc_client_close(c);
    return a;
}

static Keyload__V1__MemberStatusAnswer *rt_status(int i)
{
    return rt_pid[i] > 0 ? member_status(rt_url[i], 1000) : NULL;
}

static int rt_leader(int timeout_ms)
{
    int64_t end = now_ms() + timeout_ms;
    do {
        for (int i = 0; i < RT_MEMBERS; i++) {
            Keyload__V1__MemberStatusAnswer *s = rt_status(i);
            bool serving = s != NULL && s->serving;
            if (s)
                keyload__v1__member_status_answer__free_unpacked(s, NULL);
            if (serving)
                return i;
        }
        sleep_ms(100);
    } while (now_ms() < end);
    return -1;
}

/* Every running member applied at least `index`, within timeout_ms. */
static bool rt_applied_all(uint64_t index, int timeout_ms)
{
    int64_t end = now_ms() + timeout_ms;
    do {
        int ok = 0;
        for (int i = 0; i < RT_MEMBERS; i++) {
            Keyload__V1__MemberStatusAnswer *s = rt_status(i);
            if (s != NULL && s->applied_index >= index)
                ok++;
            if (s)
                keyload__v1__member_status_answer__free_unpacked(s, NULL);
        }
        if (ok == RT_MEMBERS)
            return true;
        sleep_ms(100);
    } while (now_ms() < end);
    return false;
}

/* Wall-clock Unix ms: what an SDK stamps as first-sent time (now_ms is monotonic). */
static int64_t rt_unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint8_t *rt_enqueue_req(const uint8_t cmd[16], int64_t first_sent, size_t *len)
{
    Keyload__V1__BatchRequest *b = batch_new(cmd);
    add_enqueue(b, RT_QUEUE, "retained body");
    b->first_sent_unix_ms = first_sent;
    return pack_free(b, len);
}

/* A batch holding a transfer mutation: pause transfers out of the queue's default lane. */
static uint8_t *rt_pause_req(const uint8_t cmd[16], size_t *len)
{
    Keyload__V1__BatchRequest *b = batch_new(cmd);
    Keyload__V1__Mutation *m = add_mut(b);
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_SET_QUEUE_TRANSFERS_PAUSED;
    m->set_queue_transfers_paused = calloc(1, sizeof *m->set_queue_transfers_paused);
    keyload__v1__set_queue_transfers_paused__init(m->set_queue_transfers_paused);
    m->set_queue_transfers_paused->tenant = strdup("default");
    m->set_queue_transfers_paused->database = strdup("default");
    m->set_queue_transfers_paused->source_queue = mkref(RT_QUEUE);
    m->set_queue_transfers_paused->paused = true;
    return pack_free(b, len);
}

/* len is read here, after the arguments (the request builder among them) were evaluated. */
static kl_code rt_send(int leader, uint8_t *req, const size_t *len, answer *out)
{
    *out = rt_call(leader, req, *len);
    free(req);
    return out->code;
}

static bool rt_all_running(void)
{
    for (int i = 0; i < RT_MEMBERS; i++)
        if (rt_pid[i] <= 0 || waitpid(rt_pid[i], NULL, WNOHANG) != 0) {
            rt_pid[i] = -1;
            return false;
        }
    return true;
}

static int rt_setup(void)
{
    bool running = false;
    for (int attempt = 0; attempt < 3 && !running; attempt++) {
        rt_stop_all();
        rt_write(attempt);
        for (int i = 0; i < RT_MEMBERS; i++)
            rt_pid[i] = spawn_member(rt_file, 0, i + 1);
        sleep_ms(1000);
        running = rt_all_running();
        if (!running)
            fprintf(stderr, "  a member did not start (port in use?); trying other ports\n");
    }
    int leader = running ? rt_leader(30000) : -1;
    for (int step = 0; leader >= 0 && step < 2; step++) {
        Keyload__V1__BatchRequest *b = batch_new(NULL);
        if (step == 0)
            add_create_database(b);
        else
            add_create(b, RT_QUEUE, 0);
        size_t len;
        uint8_t *req = pack_free(b, &len);
        answer a;
        kl_code rc = rt_send(leader, req, &len, &a);
        answer_free(&a);
        if (rc != KL_OK)
            return -1;
    }
    return leader;
}

/* What a member's store holds about outcomes, read after it stopped. */
typedef struct rt_outcomes {
    size_t outcomes, index_keys;
    uint8_t digest[32];  /* over every 'O' and 'E' key and the mark record, in key order */
    bool has_a, has_pause;
    int64_t mark;
} rt_outcomes;

static bool rt_keep(const uint8_t *k, size_t kl, void *arg)
{
    (void)arg;
    bool mark = kl == 1 + strlen("outcome_mark") && memcmp(k, "Moutcome_mark", kl) == 0;
    return k[0] == 'O' || k[0] == 'E' || mark;
}

typedef struct rt_scan {
    rt_outcomes *o;
    const uint8_t *cmd_a, *cmd_p;
} rt_scan;

static void rt_count(const uint8_t *k, size_t kl, const uint8_t *v, size_t vl, void *arg)
{
    rt_scan *s = arg;
    if (k[0] == 'O') {
        s->o->outcomes++;
        s->o->has_a |= kl >= 16 && memcmp(k + kl - 16, s->cmd_a, 16) == 0;
        s->o->has_pause |= kl >= 16 && memcmp(k + kl - 16, s->cmd_p, 16) == 0;
    } else if (k[0] == 'E') {
        s->o->index_keys++;
    } else if (vl == 16) {
        s->o->mark = (int64_t)kl_be64_get(v);
    }
}

static bool rt_read_store(int i, const uint8_t cmd_a[16], const uint8_t cmd_p[16], rt_outcomes *o, char *why,
                          size_t cap)
{
    memset(o, 0, sizeof *o);
    kl_store *st;
    kl_err err;
    if (kl_store_open(rt_data[i], NULL, &st, &err) != KL_OK) {
        snprintf(why, cap, "open the store of member %d: %s", i + 1, err.message);
        return false;
    }
    rt_scan scan = {.o = o, .cmd_a = cmd_a, .cmd_p = cmd_p};
    store_scan_digest(st, rt_keep, rt_count, &scan, o->digest);
    kl_store_close(st);
    return true;
}

/* Sends A (first-sent now) and the pause P; A replays byte for byte before the horizon. */
static void rt_before_horizon(int leader, const uint8_t a_cmd[16], int64_t a_sent, const uint8_t p_cmd[16],
                              answer *a, answer *p)
{
    size_t len;
    CHECK(rt_send(leader, rt_enqueue_req(a_cmd, a_sent, &len), &len, a) == KL_OK, "A: %s %s",
          kl_code_name(a->code), a->err.message);
    CHECK(rt_send(leader, rt_pause_req(p_cmd, &len), &len, p) == KL_OK, "pause: %s %s", kl_code_name(p->code),
          p->err.message);
    answer again;
    CHECK(rt_send(leader, rt_enqueue_req(a_cmd, a_sent, &len), &len, &again) == KL_OK && again.len == a->len &&
              memcmp(again.bytes, a->bytes, a->len) == 0,
          "A's replay before the horizon: %s %s", kl_code_name(again.code), again.err.message);
    answer_free(&again);
}

/* Past the horizon: one more batch sweeps; A's retry is refused, P's replays. Returns the
 * index of the sweeping batch in *swept_at. */
static void rt_after_horizon(int leader, const uint8_t a_cmd[16], int64_t a_sent, const uint8_t p_cmd[16],
                             const answer *p, uint64_t *swept_at)
{
    size_t len;
    answer b, again;
    CHECK(rt_send(leader, rt_enqueue_req(NULL, rt_unix_ms(), &len), &len, &b) == KL_OK, "B: %s %s",
          kl_code_name(b.code), b.err.message);
    Keyload__V1__BatchReceipt *r = keyload__v1__batch_receipt__unpack(NULL, b.len, b.bytes);
    CHECK(r != NULL, "B's receipt does not decode");
    *swept_at = r->index;
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
    answer_free(&b);
    kl_code rc = rt_send(leader, rt_enqueue_req(a_cmd, a_sent, &len), &len, &again);
    bool refused = rc == KL_FAILED_PRECONDITION && strcmp(again.err.detail, "outcome_expired") == 0 &&
                   strstr(again.err.message, "first_sent_unix_ms") != NULL;
    CHECK(refused, "A's retry after the horizon: %s %s %s", kl_code_name(rc), again.err.detail, again.err.message);
    answer_free(&again);
    rc = rt_send(leader, rt_pause_req(p_cmd, &len), &len, &again);
    bool same = rc == KL_OK && again.len == p->len && memcmp(again.bytes, p->bytes, p->len) == 0;
    answer_free(&again);
    CHECK(same, "the pause's outcome (a transfer mutation) did not replay after the horizon: %s", kl_code_name(rc));
}

void test_outcome_retention(void)
{
    int leader = rt_setup();
    CHECK(leader >= 0, "the group did not start");
    uint8_t a_cmd[16], p_cmd[16];
    memset(a_cmd, 0xA7, 16);
    memset(p_cmd, 0xB7, 16);
    int64_t a_sent = rt_unix_ms();
    answer a = {0}, p = {0};
    rt_before_horizon(leader, a_cmd, a_sent, p_cmd, &a, &p);
    answer_free(&a);
    if (failures_in_test) {
        answer_free(&p);
        return;
    }
    sleep_ms(RT_RETENTION_MS + 1500);
    uint64_t swept_at = 0;
    rt_after_horizon(leader, a_cmd, a_sent, p_cmd, &p, &swept_at);
    answer_free(&p);
    if (failures_in_test)
        return;
    CHECK(rt_applied_all(swept_at, 10000), "not every member applied the sweep at index %llu",
          (unsigned long long)swept_at);
    /* A follower killed -9 after the sweep restarts and re-applies to the same state. */
    int f = (leader + 1) % RT_MEMBERS;
    rt_kill(f);
    rt_pid[f] = spawn_member(rt_file, 0, f + 1);
    CHECK(rt_applied_all(swept_at, 20000), "the restarted member %d did not apply index %llu", f + 1,
          (unsigned long long)swept_at);
    rt_outcomes o[RT_MEMBERS];
    char why[600];
    for (int i = 0; i < RT_MEMBERS; i++)
        CHECK(rt_term(i), "member %d did not stop on SIGTERM", i + 1);
    for (int i = 0; i < RT_MEMBERS; i++) {
        CHECK(rt_read_store(i, a_cmd, p_cmd, &o[i], why, sizeof why), "%s", why);
        fprintf(stderr, "  member %d: %zu outcomes, %zu index keys, mark %lld (a_sent %lld)\n", i + 1,
                o[i].outcomes, o[i].index_keys, (long long)o[i].mark, (long long)a_sent);
        CHECK(!o[i].has_a, "member %d still holds A's outcome", i + 1);
        CHECK(o[i].has_pause, "member %d lost the pause's outcome", i + 1);
        CHECK(o[i].mark > a_sent, "member %d: mark %lld not past A's first-sent time", i + 1, (long long)o[i].mark);
        CHECK(o[i].outcomes == o[0].outcomes && o[i].index_keys == o[0].index_keys && o[i].mark == o[0].mark &&
                  memcmp(o[i].digest, o[0].digest, 32) == 0,
              "member %d's outcomes differ from member 1's", i + 1);
    }
    rt_stop_all();
}
