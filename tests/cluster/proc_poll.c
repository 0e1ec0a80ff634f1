/* Long-poll receive on real keyloadd processes: three members of one partition
 * (replica_count 2), raw RPCs and the SDK. An idle consumer's long poll appends no log
 * entry and is not cut by the client port's idle timeout; a message enqueued while it waits
 * is delivered right after its commit; a retry joins the waiting request; the cap refuses;
 * a leader killed while a Receive waits leaves the SDK's call to finish on the new leader.
 * Members are started by proc_exec (bounded lifetime) and killed by pid. */
#include "tests/cluster/proc.h"

#include "client/keyload.h"
#include "common/guid.h"
#include "common/rpc.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PL_MEMBERS 3
#define PL_QUEUE "poll"

static char pl_file[700];
static char pl_url[PL_MEMBERS][64];
static pid_t pl_pid[PL_MEMBERS] = {-1, -1, -1};

/* Ports 22000..22999 (below the ephemeral range, apart from the other tests' ranges):
 * clients base..base+2, peers base+5..base+7. */
static void pl_write(int attempt)
{
    int base = 22000 + (int)((getpid() + attempt * 37) % 100) * 10;
    snprintf(pl_file, sizeof pl_file, "%s/poll.json", work);
    FILE *f = fopen(pl_file, "w");
    /* A short client idle timeout: a waiting Receive must outlive it. */
    fprintf(f, "{\"cluster\":\"poll\",\"replica_count\":2,\"insecure_local_admin\":true,"
               "\"timers\":{\"tick_ms\":50,\"election_ms\":1000,\"heartbeat_ms\":150},"
               "\"connections\":{\"client_idle_ms\":2000},"
               "\"partitions\":[{\"id\":0,\"members\":[");
    for (int i = 0; i < PL_MEMBERS; i++) {
        snprintf(pl_url[i], sizeof pl_url[i], "tcp://127.0.0.1:%d", base + i);
        fprintf(f, "%s{\"id\":%d,\"client\":\"%s\",\"peer\":\"tcp://127.0.0.1:%d\",\"data\":\"%s/poll%d-m%d\"}",
                i ? "," : "", i + 1, pl_url[i], base + 5 + i, work, attempt, i + 1);
    }
    fprintf(f, "]}]}\n");
    fclose(f);
}

static void pl_kill(int i)
{
    if (pl_pid[i] <= 0)
        return;
    kill(pl_pid[i], SIGKILL);
    waitpid(pl_pid[i], NULL, 0);
    pl_pid[i] = -1;
}

void pl_stop_all(void)
{
    for (int i = 0; i < PL_MEMBERS; i++)
        pl_kill(i);
}

/* One request to member_url on a fresh connection (thread-safe: no shared url). */
static answer pl_call(const char *member_url, const uint8_t *req, size_t len, int timeout_ms)
{
    answer a = {0};
    kl_rpc_client *c;
    a.code = kl_rpc_client_open(member_url, 2000, 0, &c, &a.err);
    if (a.code != KL_OK)
        return a;
    a.code = kl_rpc_invoke(c, "keyload.v1.Batch", req, len, timeout_ms, &a.bytes, &a.len, NULL, 0, &a.err);
    kl_rpc_client_close(c);
    return a;
}

/* The serving member (leader with its first entry applied), waiting up to timeout_ms; -1. */
static int pl_leader(int timeout_ms)
{
    int64_t end = now_ms() + timeout_ms;
    do {
        for (int i = 0; i < PL_MEMBERS; i++) {
            if (pl_pid[i] <= 0)
                continue;
            Keyload__V1__MemberStatusAnswer *s = member_status(pl_url[i], 1000);
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

static uint64_t pl_last_index(int i)
{
    Keyload__V1__MemberStatusAnswer *s = member_status(pl_url[i], 1000);
    uint64_t last = s ? s->last_index : 0;
    if (s)
        keyload__v1__member_status_answer__free_unpacked(s, NULL);
    return last;
}

static uint8_t *receive_req(const uint8_t cmd[16], uint32_t max, uint32_t wait_ms, size_t *len)
{
    Keyload__V1__BatchRequest *b = batch_new(cmd);
    add_receive(b, PL_QUEUE, max, 60000);
    b->mutations[0]->receive->wait_ms = wait_ms;
    return pack_free(b, len);
}

static kl_code pl_enqueue(int leader, int n)
{
    Keyload__V1__BatchRequest *b = batch_new(NULL);
    for (int i = 0; i < n; i++)
        add_enqueue(b, PL_QUEUE, "m");
    size_t len;
    uint8_t *req = pack_free(b, &len);
    answer a = pl_call(pl_url[leader], req, len, 5000);
    free(req);
    kl_code rc = a.code;
    if (rc != KL_OK)
        fprintf(stderr, "  enqueue: %s %s\n", kl_code_name(rc), a.err.message);
    answer_free(&a);
    return rc;
}

/* Messages in an OK Batch answer and its receipt index; -1 when not OK. */
static long messages_of(const answer *a, uint64_t *index)
{
    if (a->code != KL_OK)
        return -1;
    Keyload__V1__BatchReceipt *r = keyload__v1__batch_receipt__unpack(NULL, a->len, a->bytes);
    if (r == NULL || r->n_results != 1 || r->results[0]->received == NULL) {
        if (r)
            keyload__v1__batch_receipt__free_unpacked(r, NULL);
        return -1;
    }
    long n = (long)r->results[0]->received->n_messages;
    *index = r->index;
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
    return n;
}

typedef struct waiting {
    const char *url;
    uint8_t *req;
    size_t len;
    int timeout_ms;
    answer a;
    int64_t answered_ms;
    pthread_t t;
} waiting;

static void *wait_thread(void *arg)
{
    waiting *w = arg;
    w->a = pl_call(w->url, w->req, w->len, w->timeout_ms);
    w->answered_ms = now_ms();
    return NULL;
}

static void wait_start(waiting *w, const char *member_url, const uint8_t cmd[16], uint32_t max, uint32_t wait_ms)
{
    memset(w, 0, sizeof *w);
    w->url = member_url;
    w->req = receive_req(cmd, max, wait_ms, &w->len);
    w->timeout_ms = (int)wait_ms + 3000;
    pthread_create(&w->t, NULL, wait_thread, w);
}

static void wait_join(waiting *w)
{
    pthread_join(w->t, NULL);
    free(w->req);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Whether every member still runs (one whose port was taken has exited). */
static bool pl_all_running(void)
{
    for (int i = 0; i < PL_MEMBERS; i++)
        if (pl_pid[i] <= 0 || waitpid(pl_pid[i], NULL, WNOHANG) != 0) {
            pl_pid[i] = -1;
            return false;
        }
    return true;
}

static int pl_setup(void)
{
    bool running = false;
    for (int attempt = 0; attempt < 3 && !running; attempt++) {
        pl_stop_all();
        pl_write(attempt);
        for (int i = 0; i < PL_MEMBERS; i++)
            pl_pid[i] = spawn_member(pl_file, 0, i + 1);
        sleep_ms(1000);
        running = pl_all_running();
        if (!running)
            fprintf(stderr, "  a member did not start (port in use?); trying other ports\n");
    }
    if (!running)
        return -1;
    int leader = pl_leader(30000);
    if (leader < 0)
        return -1;
    for (int step = 0; step < 2; step++) {
        Keyload__V1__BatchRequest *b = batch_new(NULL);
        if (step == 0)
            add_create_database(b);
        else
            add_create(b, PL_QUEUE, 0);
        size_t len;
        uint8_t *req = pack_free(b, &len);
        answer a = pl_call(pl_url[leader], req, len, 10000);
        free(req);
        kl_code rc = a.code;
        answer_free(&a);
        if (rc != KL_OK)
            return -1;
    }
    return leader;
}

/* Empty receives commit nothing; a 10 s long poll with nothing arriving appends nothing
 * and outlives the 2 s client idle timeout. */
static void poll_idle(int leader)
{
    uint64_t before = pl_last_index(leader), index = 99;
    for (int i = 0; i < 3; i++) {
        size_t len;
        uint8_t *req = receive_req(NULL, 10, 0, &len);
        answer a = pl_call(pl_url[leader], req, len, 5000);
        free(req);
        long n = messages_of(&a, &index);
        answer_free(&a);
        CHECK(n == 0 && index == 0, "empty receive %d: %ld messages, index %llu", i, n, (unsigned long long)index);
    }
    uint64_t after = pl_last_index(leader);
    printf("  three empty receives: leader's last index %llu -> %llu\n", (unsigned long long)before,
           (unsigned long long)after);
    CHECK(after == before, "empty receives appended %llu entries", (unsigned long long)(after - before));
    before = after;
    waiting w;
    int64_t t0 = now_ms();
    wait_start(&w, pl_url[leader], NULL, 10, 10000);
    wait_join(&w);
    long n = messages_of(&w.a, &index);
    int64_t took = w.answered_ms - t0;
    kl_code code = w.a.code;
    answer_free(&w.a);
    after = pl_last_index(leader);
    printf("  idle 10 s long poll: answered after %lld ms, last index %llu -> %llu\n", (long long)took,
           (unsigned long long)before, (unsigned long long)after);
    CHECK(code == KL_OK && n == 0 && index == 0, "idle long poll: %s, %ld messages", kl_code_name(code), n);
    CHECK(took >= 9800 && took < 11500, "the wait took %lld ms", (long long)took);
    CHECK(after == before, "an idle long poll appended %llu entries", (unsigned long long)(after - before));
}

/* A message enqueued while a Receive waits is delivered right after its commit. */
static void poll_wakes(int leader)
{
    int64_t lat[5];
    for (int i = 0; i < 5; i++) {
        waiting w;
        wait_start(&w, pl_url[leader], NULL, 1, 10000);
        sleep_ms(400);
        CHECK(pl_enqueue(leader, 1) == KL_OK, "enqueue");
        int64_t committed = now_ms(); /* its answer came after its commit */
        wait_join(&w);
        uint64_t index = 0;
        long n = messages_of(&w.a, &index);
        kl_code code = w.a.code;
        answer_free(&w.a);
        CHECK(code == KL_OK && n == 1 && index > 0, "woken receive: %s, %ld messages", kl_code_name(code), n);
        lat[i] = w.answered_ms - committed;
    }
    qsort(lat, 5, sizeof lat[0], cmp_i64);
    printf("  delivered after the enqueue's answer (ms, sorted): %lld %lld %lld %lld %lld\n", (long long)lat[0],
           (long long)lat[1], (long long)lat[2], (long long)lat[3], (long long)lat[4]);
    /* Without the wake-up the answer would come at the wait's end, 10 s later. */
    CHECK(lat[2] < 250, "median delivery %lld ms after the commit", (long long)lat[2]);
}

/* A retry of the same bytes joins the waiting request; other content under its command id
 * is refused at once. */
static void poll_retry_joins(int leader)
{
    uint8_t cmd[16];
    kl_guid_random(cmd);
    waiting a, b;
    wait_start(&a, pl_url[leader], cmd, 1, 10000);
    sleep_ms(300);
    wait_start(&b, pl_url[leader], cmd, 1, 10000);
    sleep_ms(300);
    size_t len;
    uint8_t *req = receive_req(cmd, 2, 10000, &len);
    int64_t t0 = now_ms();
    answer other = pl_call(pl_url[leader], req, len, 5000);
    free(req);
    kl_code oc = other.code;
    bool reused = strcmp(other.err.detail, "command_id_reused") == 0;
    answer_free(&other);
    uint64_t before = pl_last_index(leader);
    kl_code ec = pl_enqueue(leader, 1);
    wait_join(&a);
    wait_join(&b);
    uint64_t ia = 0, ib = 0;
    long na = messages_of(&a.a, &ia), nb = messages_of(&b.a, &ib);
    bool same = a.a.len == b.a.len && a.a.len > 0 && memcmp(a.a.bytes, b.a.bytes, a.a.len) == 0;
    answer_free(&a.a);
    answer_free(&b.a);
    uint64_t after = pl_last_index(leader);
    CHECK(oc == KL_CONFLICT && reused && now_ms() - t0 < 3000, "other content: %s", kl_code_name(oc));
    CHECK(ec == KL_OK, "enqueue");
    CHECK(na == 1 && nb == 1 && same && ia == ib, "joined: %ld and %ld messages, same receipt %d", na, nb, same);
    CHECK(after - before == 2, "the enqueue and one receive commit: %llu entries", (unsigned long long)(after - before));
}

/* KL_PARK_MAX wait; one more is refused RESOURCE_EXHAUSTED naming the limit. */
static void poll_cap(int leader)
{
    enum { CAP = 48 };
    waiting *w = calloc(CAP, sizeof *w);
    for (int i = 0; i < CAP; i++)
        wait_start(&w[i], pl_url[leader], NULL, 1, 15000);
    sleep_ms(2000);
    int64_t end = now_ms() + 8000;
    kl_code rc = KL_OK;
    char detail[128] = "";
    /* Some may still be on their way: ask until the refusal comes, each probe answered at
     * once (refused) or ending its own 1 s wait before the next. */
    while (now_ms() < end) {
        size_t len;
        uint8_t *req = receive_req(NULL, 1, 1000, &len);
        answer a = pl_call(pl_url[leader], req, len, 4000);
        free(req);
        rc = a.code;
        snprintf(detail, sizeof detail, "%s", a.err.detail);
        answer_free(&a);
        if (rc == KL_RESOURCE_EXHAUSTED)
            break;
    }
    kl_code ec = pl_enqueue(leader, CAP);
    int ok = 0;
    for (int i = 0; i < CAP; i++) {
        wait_join(&w[i]);
        uint64_t index;
        ok += messages_of(&w[i].a, &index) == 1;
        answer_free(&w[i].a);
    }
    free(w);
    printf("  %d waiting receives: the next one %s (%s); after an enqueue of %d, %d got one each\n", CAP,
           kl_code_name(rc), detail, CAP, ok);
    CHECK(rc == KL_RESOURCE_EXHAUSTED && strcmp(detail, "parked_receives") == 0, "cap: %s %s",
          kl_code_name(rc), detail);
    CHECK(ec == KL_OK && ok == CAP, "%d of %d waiting receives got a message", ok, CAP);
}

typedef struct sdk_wait {
    const char *file;
    kl_code rc;
    kl_err err;
    long messages;
    int64_t answered_ms;
} sdk_wait;

static void *sdk_wait_thread(void *arg)
{
    sdk_wait *s = arg;
    kl_client *c = NULL;
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    s->messages = -1;
    s->rc = kl_client_open(s->file, NULL, 5000, &c, &s->err);
    if (s->rc == KL_OK)
        s->rc = kl_batch_new(NULL, &b, &s->err);
    if (s->rc == KL_OK)
        s->rc = kl_batch_receive_wait(b, PL_QUEUE, NULL, 1, 60000, 15000, &s->err);
    if (s->rc == KL_OK)
        s->rc = kl_client_batch(c, b, &r, &s->err);
    if (s->rc == KL_OK)
        s->messages = (long)r->decoded->results[0]->received->n_messages;
    s->answered_ms = now_ms();
    kl_receipt_free(r);
    kl_batch_free(b);
    kl_client_close(c);
    return NULL;
}

/* The leader dies while Receives wait there: a raw request ends with a retryable answer
 * within its bound, and the SDK's call goes on at the new leader and gets the message
 * enqueued there. */
static void poll_leader_killed(int leader)
{
    waiting raw;
    wait_start(&raw, pl_url[leader], NULL, 1, 10000);
    sdk_wait s = {.file = pl_file};
    pthread_t t;
    pthread_create(&t, NULL, sdk_wait_thread, &s);
    sleep_ms(800);
    int64_t killed = now_ms();
    pl_kill(leader);
    wait_join(&raw);
    kl_code raw_code = raw.a.code;
    char raw_detail[128];
    snprintf(raw_detail, sizeof raw_detail, "%s", raw.a.err.detail);
    answer_free(&raw.a);
    int next = pl_leader(20000);
    kl_code ec = next >= 0 ? pl_enqueue(next, 1) : KL_UNAVAILABLE;
    int64_t enqueued = now_ms();
    pthread_join(t, NULL);
    printf("  leader killed: the raw waiting request answered %s (%s) after %lld ms; new leader m%d; the "
           "SDK call answered %s with %ld message(s) %lld ms after the enqueue\n",
           kl_code_name(raw_code), raw_detail, (long long)(raw.answered_ms - killed), next + 1,
           kl_code_name(s.rc), s.messages, (long long)(s.answered_ms - enqueued));
    CHECK(raw_code == KL_UNAVAILABLE || raw_code == KL_NOT_LEADER || raw_code == KL_DEADLINE_EXCEEDED,
          "raw: %s", kl_code_name(raw_code));
    CHECK(raw.answered_ms - killed < 9000, "the raw request waited %lld ms", (long long)(raw.answered_ms - killed));
    CHECK(next >= 0 && ec == KL_OK, "no new leader or enqueue failed");
    CHECK(s.rc == KL_OK && s.messages == 1, "SDK: %s %s, %ld messages", kl_code_name(s.rc), s.err.message,
          s.messages);
}

/* The SDK lets a waiting call run past its timeout: a 3 s wait under a 1 s client timeout
 * ends with the empty answer, not a lost one. */
static void poll_sdk_deadline(void)
{
    kl_client *c = NULL;
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    kl_err err;
    kl_code rc = kl_client_open(pl_file, NULL, 1000, &c, &err);
    if (rc == KL_OK)
        rc = kl_batch_new(NULL, &b, &err);
    if (rc == KL_OK)
        rc = kl_batch_receive_wait(b, PL_QUEUE, NULL, 1, 60000, 3000, &err);
    int64_t t0 = now_ms();
    if (rc == KL_OK)
        rc = kl_client_batch(c, b, &r, &err);
    int64_t took = now_ms() - t0;
    long n = rc == KL_OK ? (long)r->decoded->results[0]->received->n_messages : -1;
    uint64_t index = rc == KL_OK ? r->decoded->index : 1;
    kl_receipt_free(r);
    kl_batch_free(b);
    kl_client_close(c);
    printf("  SDK, 1 s timeout, 3 s wait: %s after %lld ms\n", kl_code_name(rc), (long long)took);
    CHECK(rc == KL_OK && n == 0 && index == 0, "SDK wait: %s %s", kl_code_name(rc), rc == KL_OK ? "" : err.message);
    CHECK(took >= 2900 && took < 4500, "the SDK's wait took %lld ms", (long long)took);
}

void test_long_poll(void)
{
    int leader = pl_setup();
    CHECK(leader >= 0, "the group did not start");
    poll_idle(leader);
    if (failures_in_test)
        return;
    poll_sdk_deadline();
    if (failures_in_test)
        return;
    poll_wakes(leader);
    if (failures_in_test)
        return;
    poll_retry_joins(leader);
    if (failures_in_test)
        return;
    poll_cap(leader);
    if (failures_in_test)
        return;
    poll_leader_killed(leader);
    pl_stop_all();
}
