/* Grow 3 -> 5 and shrink back to 3 under load, on real keyloadd processes (docs/MEMBERSHIP.md).
 *
 * One partition at its configured replica_count 3. A writer thread enqueues without pause
 * and a consumer thread receives and acknowledges, both through the C SDK, every write
 * retried under its own command id until it answers. Members 4 and 5 join one at a time
 * with empty stores (keyloadd --join), each added by MemberChange (learner, catch-up, joint,
 * leave); the leader is killed -9 right after member 5's change started and restarted, and
 * the change is retried to its end. Then the current leader is removed, with a follower
 * killed -9 in the middle of that change, and one more member, back to 3 voters. At the
 * end every member is killed -9 and the three voters restarted: each must report the
 * expected committed configuration, and every acknowledged enqueue must be acknowledged by
 * the consumer or still in the queue, exactly once.
 *
 * Members are started by proc_exec (bounded lifetime, killed with the test process) and
 * stopped by pid. Ports 10000..10899: clients base..base+4, peers base+5..base+9. */
#include "tests/cluster/proc_grow.h"

#include "tests/cluster/proc.h"

#include "client/keyload.h"
#include "keyload/v1/membership.pb-c.h"

#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define GR_N 5
#define GR_QUEUE "jobs"
#define GR_LEASE_MS 8000
#define GR_RETRY_MS 20000
#define GR_CHANGE_MS 25000

static pid_t gr_pid[GR_N] = {-1, -1, -1, -1, -1};
static char gr_url[GR_N][64], gr_peer[GR_N][64];
static char gr_seed[700], gr_j4[700], gr_full[700], gr_secret[700];

/* ---- the history the two threads record ---- */

typedef struct gr_rec {
    char body[24];
    int out; /* enqueue: 1 OK, 0 refused, -1 unknown; ack: 1 OK */
} gr_rec;

static pthread_mutex_t gr_mu = PTHREAD_MUTEX_INITIALIZER;
static gr_rec *gr_enq, *gr_ack;
static size_t gr_n_enq, gr_n_ack, gr_cap_enq, gr_cap_ack;
static atomic_bool gr_stop;
static atomic_int gr_enq_ok, gr_acked, gr_refused;

static void gr_push(gr_rec **arr, size_t *n, size_t *cap, const char *body, int out)
{
    pthread_mutex_lock(&gr_mu);
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 1024;
        gr_rec *r = realloc(*arr, c * sizeof *r);
        if (r == NULL) {
            pthread_mutex_unlock(&gr_mu);
            return;
        }
        *arr = r;
        *cap = c;
    }
    snprintf((*arr)[*n].body, sizeof (*arr)[*n].body, "%s", body);
    (*arr)[(*n)++].out = out;
    pthread_mutex_unlock(&gr_mu);
}

/* ---- processes ---- */

static unsigned gr_rc = 3; /* the file's replica_count, and the one Members must report */
static unsigned gr_change_rc; /* MemberChange's replica_count (0: keep it) */

static void gr_write_file(const char *path, int n)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return;
    fprintf(f, "{\"cluster\":\"grow\",\"replica_count\":%u,\"insecure_local_admin\":true,"
               "\"timers\":{\"tick_ms\":50,\"election_ms\":1000,\"heartbeat_ms\":150},"
               "\"partitions\":[{\"id\":0,\"members\":[", gr_rc);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s{\"id\":%d,\"client\":\"%s\",\"peer\":\"%s\",\"data\":\"%s/grow-m%d\"}", i ? "," : "", i + 1,
                gr_url[i], gr_peer[i], work, i + 1);
    fprintf(f, "]}]}\n");
    fclose(f);
}

static bool gr_files(int seed_members)
{
    int base = 10000 + (int)(getpid() % 90) * 10;
    for (int i = 0; i < GR_N; i++) {
        snprintf(gr_url[i], sizeof gr_url[i], "tcp://127.0.0.1:%d", base + i);
        snprintf(gr_peer[i], sizeof gr_peer[i], "tcp://127.0.0.1:%d", base + 5 + i);
        char cmd[800];
        snprintf(cmd, sizeof cmd, "rm -rf '%s/grow-m%d'", work, i + 1);
        if (system(cmd) != 0)
            return false;
    }
    snprintf(gr_seed, sizeof gr_seed, "%s/grow.json", work);
    snprintf(gr_j4, sizeof gr_j4, "%s/grow-j4.json", work);
    snprintf(gr_full, sizeof gr_full, "%s/grow-full.json", work);
    snprintf(gr_secret, sizeof gr_secret, "%s/grow.secret", work);
    gr_write_file(gr_seed, seed_members);
    gr_write_file(gr_j4, 4);
    gr_write_file(gr_full, 5);
    uint8_t secret[32];
    randombytes_buf(secret, sizeof secret);
    unlink(gr_secret);
    int fd = open(gr_secret, O_WRONLY | O_CREAT | O_EXCL, 0600);
    bool ok = fd >= 0 && write(fd, secret, sizeof secret) == (ssize_t)sizeof secret;
    if (fd >= 0)
        close(fd);
    sodium_memzero(secret, sizeof secret);
    return ok;
}

/* Member i (0-based) from `file`; a joining member (empty store, not in the configuration)
 * with --join. --init-store changes nothing on a store that is already the member's. */
static void gr_start(int i, const char *file, bool join)
{
    char node[16], log[700];
    snprintf(node, sizeof node, "p0m%d", i + 1);
    snprintf(log, sizeof log, "%s/grow-p0m%d.log", work, i + 1);
    char *argv[] = {(char *)daemon_bin, "--cluster", (char *)file, "--node", node, "--cluster-secret", gr_secret,
                    "--init-store", join ? "--join" : NULL, NULL};
    gr_pid[i] = proc_exec(argv, log, NULL, PROC_LIFETIME_S);
}

static void gr_kill(int i)
{
    if (gr_pid[i] <= 0)
        return;
    kill(gr_pid[i], SIGKILL);
    waitpid(gr_pid[i], NULL, 0);
    gr_pid[i] = -1;
}

void gr_stop_all(void)
{
    atomic_store(&gr_stop, true);
    for (int i = 0; i < GR_N; i++)
        gr_kill(i);
}

/* ---- Members, as each member answers it ---- */

static Keyload__V1__MembersAnswer *gr_members_of(int i)
{
    if (gr_pid[i] <= 0)
        return NULL;
    snprintf(url, sizeof url, "%s", gr_url[i]);
    answer a = call("keyload.v1.Members", (const uint8_t *)"", 0, 2000);
    Keyload__V1__MembersAnswer *m = a.code == KL_OK ? keyload__v1__members_answer__unpack(NULL, a.len, a.bytes) : NULL;
    answer_free(&a);
    return m;
}

/* Member i reports exactly the voters in `want` (a bit per member id), committed, not joint,
 * no learners. */
static bool gr_members_are(int i, unsigned want)
{
    Keyload__V1__MembersAnswer *m = gr_members_of(i);
    bool ok = m != NULL && m->committed && !m->joint && m->n_learners == 0 && m->replica_count == gr_rc;
    unsigned got = 0;
    for (size_t k = 0; ok && k < m->n_voters; k++)
        got |= m->voters[k] >= 1 && m->voters[k] <= GR_N ? 1u << (m->voters[k] - 1) : 1u << 31;
    if (m != NULL)
        keyload__v1__members_answer__free_unpacked(m, NULL);
    return ok && got == want;
}

/* Every member of `want` reports `want`, within timeout_ms. */
static bool gr_all_report(unsigned want, int timeout_ms)
{
    for (int64_t t = now_ms(); now_ms() - t < timeout_ms; sleep_ms(100)) {
        bool all = true;
        for (int i = 0; all && i < GR_N; i++)
            if (want & (1u << i))
                all = gr_members_are(i, want);
        if (all)
            return true;
    }
    return false;
}

/* The leader's member index (0-based) as a running member's Members answer names it, or -1. */
static int gr_leader(int timeout_ms)
{
    for (int64_t t = now_ms(); now_ms() - t < timeout_ms; sleep_ms(100))
        for (int i = 0; i < GR_N; i++) {
            Keyload__V1__MembersAnswer *m = gr_members_of(i);
            int l = m != NULL && m->leader >= 1 && m->leader <= GR_N ? (int)m->leader - 1 : -1;
            if (m != NULL)
                keyload__v1__members_answer__free_unpacked(m, NULL);
            if (l >= 0 && gr_pid[l] > 0) {
                Keyload__V1__MemberStatusAnswer *s = member_status(gr_url[l], 1000);
                bool serving = s != NULL && s->serving;
                if (s != NULL)
                    keyload__v1__member_status_answer__free_unpacked(s, NULL);
                if (serving)
                    return l;
            }
        }
    return -1;
}

/* ---- the load ---- */

static int gr_send_err(kl_client *c, const kl_batch *b, kl_receipt **out, kl_code *last, kl_err *e);

static int gr_send(kl_client *c, const kl_batch *b, kl_receipt **out, kl_code *last)
{
    return gr_send_err(c, b, out, last, NULL);
}

static bool gr_retryable(kl_code rc)
{
    return rc == KL_UNAVAILABLE || rc == KL_UNKNOWN_WRITE_OUTCOME || rc == KL_DEADLINE_EXCEEDED || rc == KL_NOT_LEADER;
}

/* Sends b until it answers something other than a retryable code, or GR_RETRY_MS: 1 OK,
 * 0 refused (never executed), -1 unknown. */
static int gr_send_err(kl_client *c, const kl_batch *b, kl_receipt **out, kl_code *last, kl_err *e)
{
    bool maybe = false;
    int64_t give_up = now_ms() + GR_RETRY_MS;
    for (;;) {
        kl_err err = {0};
        *out = NULL;
        *last = kl_client_batch(c, b, out, &err);
        if (e != NULL)
            *e = err;
        if (*last == KL_OK)
            return 1;
        kl_receipt_free(*out);
        *out = NULL;
        maybe = maybe || *last == KL_UNKNOWN_WRITE_OUTCOME || *last == KL_DEADLINE_EXCEEDED;
        if (!gr_retryable(*last) || now_ms() > give_up || atomic_load(&gr_stop))
            return maybe ? -1 : 0;
        sleep_ms(50);
    }
}

static void *gr_writer(void *arg)
{
    kl_client *c = arg;
    for (unsigned seq = 0; !atomic_load(&gr_stop); seq++) {
        char body[24];
        snprintf(body, sizeof body, "g-%u", seq);
        kl_message *m = NULL;
        kl_batch *b = NULL;
        if (kl_message_new(body, strlen(body), &m, NULL) != KL_OK || kl_batch_new(NULL, &b, NULL) != KL_OK ||
            kl_batch_enqueue(b, GR_QUEUE, NULL, m, NULL) != KL_OK) {
            kl_message_free(m);
            kl_batch_free(b);
            break;
        }
        kl_receipt *r = NULL;
        kl_code last;
        kl_err err = {0};
        int out = gr_send_err(c, b, &r, &last, &err);
        gr_push(&gr_enq, &gr_n_enq, &gr_cap_enq, body, out);
        if (out == 1)
            atomic_fetch_add(&gr_enq_ok, 1);
        else if (out == 0 && !atomic_load(&gr_stop)) {
            atomic_fetch_add(&gr_refused, 1);
            fprintf(stderr, "  enqueue %s refused: %s %s (%s)\n", body, kl_code_name(last), err.message, err.detail);
        }
        kl_receipt_free(r);
        kl_batch_free(b);
        kl_message_free(m);
        sleep_ms(5);
    }
    return NULL;
}

/* Acknowledges what one receive leased; an ack answered OK is recorded per body. */
static void gr_ack_all(kl_client *c, const Keyload__V1__Received *got)
{
    size_t n = got->n_messages;
    kl_bytes *toks = calloc(n, sizeof *toks);
    kl_batch *b = NULL;
    if (toks == NULL || kl_batch_new(NULL, &b, NULL) != KL_OK) {
        free(toks);
        return;
    }
    for (size_t i = 0; i < n; i++)
        toks[i] = (kl_bytes){got->messages[i]->lease_token.data, got->messages[i]->lease_token.len};
    kl_receipt *r = NULL;
    kl_code last;
    if (kl_batch_ack(b, GR_QUEUE, toks, n, NULL) == KL_OK && gr_send(c, b, &r, &last) == 1)
        for (size_t i = 0; i < n; i++) {
            const ProtobufCBinaryData *body = &got->messages[i]->message->body;
            char text[24];
            snprintf(text, sizeof text, "%.*s", (int)(body->len < 23 ? body->len : 23), (const char *)body->data);
            gr_push(&gr_ack, &gr_n_ack, &gr_cap_ack, text, 1);
            atomic_fetch_add(&gr_acked, 1);
        }
    kl_receipt_free(r);
    kl_batch_free(b);
    free(toks);
}

static void *gr_consumer(void *arg)
{
    kl_client *c = arg;
    while (!atomic_load(&gr_stop)) {
        kl_batch *b = NULL;
        if (kl_batch_new(NULL, &b, NULL) != KL_OK || kl_batch_receive(b, GR_QUEUE, NULL, 16, GR_LEASE_MS, NULL) != KL_OK) {
            kl_batch_free(b);
            break;
        }
        kl_receipt *r = NULL;
        kl_code last;
        const Keyload__V1__Received *got = NULL;
        if (gr_send(c, b, &r, &last) == 1 && r->decoded->n_results == 1)
            got = r->decoded->results[0]->received;
        if (got != NULL && got->n_messages > 0)
            gr_ack_all(c, got);
        else
            sleep_ms(20);
        kl_receipt_free(r);
        kl_batch_free(b);
    }
    return NULL;
}

/* ---- the changes ---- */

/* One MemberChange through the SDK (it finds the leader); KL_OK when it started or is done. */
static kl_code gr_change(kl_client *c, const char *op, int member, bool *done)
{
    Keyload__V1__MemberInfo info = KEYLOAD__V1__MEMBER_INFO__INIT;
    Keyload__V1__MemberChangeRequest q = KEYLOAD__V1__MEMBER_CHANGE_REQUEST__INIT;
    q.op = (char *)op;
    q.replica_count = gr_change_rc;
    if (strcmp(op, "add") == 0) {
        info.id = (uint64_t)member + 1;
        info.peer_url = gr_peer[member];
        info.client_url = gr_url[member];
        q.member = &info;
    } else {
        q.old_member_id = (uint64_t)member + 1;
    }
    Keyload__V1__MemberChangeAnswer *a = NULL;
    kl_err err = {0};
    kl_code rc = kl_client_member_change(c, 0, &q, &a, &err);
    *done = rc == KL_OK && a != NULL && a->done;
    if (rc != KL_OK && !gr_retryable(rc))
        fprintf(stderr, "  MemberChange %s %d: %s %s (%s)\n", op, member + 1, kl_code_name(rc), err.message, err.detail);
    if (a != NULL)
        keyload__v1__member_change_answer__free_unpacked(a, NULL);
    return rc;
}

/* Sends the change, runs `mid` (a kill -9 in the middle, or nothing) once it started, then
 * retries it until it answers done and every member of `want` reports `want`. The writes
 * acknowledged meanwhile go to *acked_during. */
static bool gr_change_to(kl_client *c, const char *op, int member, unsigned want, int kill_mid, int *acked_during,
                         int64_t *took)
{
    int64_t t0 = now_ms();
    int w0 = atomic_load(&gr_enq_ok);
    bool done = false, started = false;
    while (!started && now_ms() - t0 < GR_CHANGE_MS) {
        started = gr_change(c, op, member, &done) == KL_OK;
        if (!started)
            sleep_ms(200);
    }
    if (!started)
        return false;
    if (kill_mid >= 0) {
        printf("  kill -9 of member %d in the middle of %s %d\n", kill_mid + 1, op, member + 1);
        gr_kill(kill_mid);
        sleep_ms(1500);
        gr_start(kill_mid, gr_full, false);
    }
    bool ok = false;
    while (!ok && now_ms() - t0 < GR_CHANGE_MS) {
        sleep_ms(300);
        if (!done)
            gr_change(c, op, member, &done);
        ok = done && gr_all_report(want, 1000);
    }
    *took = now_ms() - t0;
    *acked_during = atomic_load(&gr_enq_ok) - w0;
    return ok;
}

/* ---- the final state ---- */

static int gr_cmp(const void *a, const void *b) { return strcmp(((const gr_rec *)a)->body, ((const gr_rec *)b)->body); }

static size_t gr_count(const gr_rec *sorted, size_t n, const char *body)
{
    gr_rec key;
    snprintf(key.body, sizeof key.body, "%s", body);
    const gr_rec *hit = bsearch(&key, sorted, n, sizeof *sorted, gr_cmp);
    if (hit == NULL)
        return 0;
    const gr_rec *lo = hit, *hi = hit;
    while (lo > sorted && strcmp(lo[-1].body, body) == 0)
        lo--;
    while (hi + 1 < sorted + n && strcmp(hi[1].body, body) == 0)
        hi++;
    return (size_t)(hi - lo) + 1;
}

/* Receives (long leases) until an empty answer, appending each body to *left. */
static bool gr_drain(kl_client *c, gr_rec **left, size_t *n, size_t *cap)
{
    for (int round = 0; round < 1000; round++) {
        kl_batch *b = NULL;
        if (kl_batch_new(NULL, &b, NULL) != KL_OK || kl_batch_receive(b, GR_QUEUE, NULL, 100, 600000, NULL) != KL_OK) {
            kl_batch_free(b);
            return false;
        }
        kl_receipt *r = NULL;
        kl_code last;
        int out = gr_send(c, b, &r, &last);
        kl_batch_free(b);
        const Keyload__V1__Received *got = out == 1 && r->decoded->n_results == 1 ? r->decoded->results[0]->received : NULL;
        if (out != 1 || got == NULL) {
            fprintf(stderr, "  drain: %s\n", kl_code_name(last));
            kl_receipt_free(r);
            return false;
        }
        size_t k = got->n_messages;
        for (size_t i = 0; i < k; i++) {
            const ProtobufCBinaryData *body = &got->messages[i]->message->body;
            char text[24];
            snprintf(text, sizeof text, "%.*s", (int)(body->len < 23 ? body->len : 23), (const char *)body->data);
            gr_push(left, n, cap, text, 1);
        }
        kl_receipt_free(r);
        if (k == 0)
            return true;
    }
    return false;
}

/* Every enqueue answered OK is acknowledged or left, exactly once in all; an unknown one at
 * most once; nothing else is there. Returns the violations; *lost the OK ones missing. */
static int gr_account(const gr_rec *left, size_t n_left, int *lost, char *ex, size_t cap)
{
    size_t n_all = gr_n_ack + n_left;
    gr_rec *all = calloc(n_all + 1, sizeof *all);
    gr_rec *enq = calloc(gr_n_enq + 1, sizeof *enq);
    if (all == NULL || enq == NULL) {
        free(all);
        free(enq);
        snprintf(ex, cap, "out of memory");
        return 1;
    }
    memcpy(all, gr_ack, gr_n_ack * sizeof *all);
    memcpy(all + gr_n_ack, left, n_left * sizeof *all);
    qsort(all, n_all, sizeof *all, gr_cmp);
    memcpy(enq, gr_enq, gr_n_enq * sizeof *enq);
    qsort(enq, gr_n_enq, sizeof *enq, gr_cmp);
    int bad = 0;
    *lost = 0;
    for (size_t i = 0; i < gr_n_enq; i++) {
        size_t k = gr_count(all, n_all, gr_enq[i].body);
        if ((gr_enq[i].out == 1 && k != 1) || k > 1 || (gr_enq[i].out == 0 && k != 0)) {
            bad++;
            *lost += gr_enq[i].out == 1 && k == 0;
            snprintf(ex, cap, "%s (enqueue %s) seen %zu times", gr_enq[i].body,
                     gr_enq[i].out == 1 ? "OK" : gr_enq[i].out == 0 ? "refused" : "unknown", k);
        }
    }
    for (size_t i = 0; i < n_all; i++)
        if (gr_count(enq, gr_n_enq, all[i].body) == 0) {
            bad++;
            snprintf(ex, cap, "%s was never enqueued", all[i].body);
        }
    free(all);
    free(enq);
    return bad;
}

/* Drains the queue and accounts; a message whose receive answer was lost stays leased for
 * GR_LEASE_MS, so a shortfall is drained again until the leases ran out. */
static int gr_final_check(kl_client *c, size_t *n_left_out, char *ex, size_t cap)
{
    gr_rec *left = NULL;
    size_t n_left = 0, cap_left = 0;
    int bad = 1, lost = 0;
    for (int64_t t0 = now_ms(); now_ms() - t0 < GR_LEASE_MS + 4000; sleep_ms(1000)) {
        if (!gr_drain(c, &left, &n_left, &cap_left)) {
            snprintf(ex, cap, "the queue could not be drained");
            break;
        }
        bad = gr_account(left, n_left, &lost, ex, cap);
        if (bad == 0 || lost != bad)
            break;
    }
    free(left);
    *n_left_out = n_left;
    return bad;
}

/* ---- the test ---- */

static bool gr_setup(kl_client *c)
{
    for (int step = 0; step < 2; step++) {
        kl_batch *b = NULL;
        kl_queue_options o = {0};
        if (kl_batch_new(NULL, &b, NULL) != KL_OK ||
            (step == 0 ? kl_batch_create_database(b, "default/default", NULL, NULL)
                       : kl_batch_create_queue(b, GR_QUEUE, &o, NULL)) != KL_OK) {
            kl_batch_free(b);
            return false;
        }
        kl_receipt *r = NULL;
        kl_code last = KL_UNAVAILABLE;
        int out = 0;
        for (int64_t t = now_ms(); out != 1 && now_ms() - t < 20000; sleep_ms(200))
            out = gr_send(c, b, &r, &last);
        kl_receipt_free(r);
        kl_batch_free(b);
        if (out != 1) {
            fprintf(stderr, "  setup step %d: %s\n", step, kl_code_name(last));
            return false;
        }
    }
    return true;
}

/* A voter other than `not_a` and `not_b` in `set` (lowest index), or -1. */
static int gr_other(unsigned set, int not_a, int not_b)
{
    for (int i = 0; i < GR_N; i++)
        if ((set & (1u << i)) && i != not_a && i != not_b)
            return i;
    return -1;
}

/* Changes that ran, and those during which no enqueue was acknowledged (then the change
 * did not run under load). */
static int gr_changes, gr_changes_idle;

static void gr_log_change(const char *what, int64_t took, int acked)
{
    gr_changes++;
    gr_changes_idle += acked == 0;
    printf("  %s under load: %lld ms, %d enqueues acknowledged meanwhile\n", what, (long long)took, acked);
}

/* A new test's history, counters and files for a partition seeded with n members at
 * replica_count n. */
static bool gr_begin(int n)
{
    atomic_store(&gr_stop, false);
    gr_n_enq = gr_n_ack = 0;
    gr_changes = gr_changes_idle = 0;
    atomic_store(&gr_enq_ok, 0);
    atomic_store(&gr_acked, 0);
    atomic_store(&gr_refused, 0);
    gr_rc = (unsigned)n;
    gr_change_rc = 0;
    return gr_files(n);
}

void test_grow_shrink_under_load(void)
{
    int64_t t_start = now_ms();
    CHECK(gr_begin(3), "cannot write the cluster files or the secret");
    for (int i = 0; i < 3; i++)
        gr_start(i, gr_seed, false);
    kl_client *c = NULL;
    kl_err err = {0};
    CHECK(kl_client_open(gr_full, "default/default", 5000, &c, &err) == KL_OK, "open: %s", err.message);
    if (!gr_setup(c)) {
        kl_client_close(c);
        CHECK(false, "the partition did not create its database and queue");
    }
    pthread_t tw, tc;
    pthread_create(&tw, NULL, gr_writer, c);
    pthread_create(&tc, NULL, gr_consumer, c);
    bool ok = true;
    int acked = 0;
    int64_t took = 0;
    for (int64_t t = now_ms(); atomic_load(&gr_enq_ok) < 20 && now_ms() - t < 10000;)
        sleep_ms(50);
    /* Grow: member 4, then member 5 with the leader killed -9 once that change started. */
    gr_start(3, gr_j4, true);
    ok = gr_change_to(c, "add", 3, 0xFu, -1, &acked, &took);
    if (ok)
        gr_log_change("add member 4 (joins empty, learner, joint, leave)", took, acked);
    int leader = ok ? gr_leader(5000) : -1;
    if (leader >= 0) {
        gr_start(4, gr_full, true);
        ok = gr_change_to(c, "add", 4, 0x1Fu, leader, &acked, &took);
        if (ok)
            gr_log_change("add member 5 with the leader killed -9 mid-change", took, acked);
    }
    bool five = ok && gr_all_report(0x1Fu, 5000);
    /* Shrink: the current leader, with a follower killed -9 mid-change, then a follower. */
    unsigned set = 0x1Fu;
    int removed[2] = {-1, -1};
    leader = five ? gr_leader(5000) : -1;
    if (leader >= 0) {
        removed[0] = leader;
        set &= ~(1u << leader);
        int victim = gr_other(set, leader, 4);
        ok = gr_change_to(c, "remove", leader, set, victim, &acked, &took);
        if (ok)
            gr_log_change("remove the leader with a follower killed -9 mid-change", took, acked);
    }
    if (removed[0] >= 0)
        gr_kill(removed[0]); /* out of the configuration: it has no more part */
    int now_leader = ok && removed[0] >= 0 ? gr_leader(5000) : -1;
    if (now_leader >= 0) {
        removed[1] = gr_other(set, now_leader, -1);
        set &= ~(1u << removed[1]);
        ok = gr_change_to(c, "remove", removed[1], set, -1, &acked, &took);
        if (ok)
            gr_log_change("remove a follower", took, acked);
        gr_kill(removed[1]);
    }
    sleep_ms(1000);
    atomic_store(&gr_stop, true);
    pthread_join(tw, NULL);
    pthread_join(tc, NULL);
    if (!five || removed[1] < 0 || !ok) {
        kl_client_close(c);
        CHECK(five, "the partition did not grow to 5 voters {1,2,3,4,5} committed on every member");
        CHECK(removed[1] >= 0 && ok, "the partition did not shrink back to 3 voters (removed %d, %d)",
              removed[0] + 1, removed[1] + 1);
    }
    printf("  grown to 5 and shrunk to 3 (removed members %d, the leader then, and %d); %d enqueues and %d acks "
           "acknowledged\n", removed[0] + 1, removed[1] + 1, atomic_load(&gr_enq_ok), atomic_load(&gr_acked));
    /* kill -9 of every member and a restart: the stored configuration decides, not the file. */
    for (int i = 0; i < GR_N; i++)
        gr_kill(i);
    for (int i = 0; i < GR_N; i++)
        if (set & (1u << i))
            gr_start(i, gr_full, false);
    bool conf = gr_all_report(set, 20000);
    size_t n_left = 0;
    char ex[160] = "";
    int bad = conf && gr_leader(15000) >= 0 ? gr_final_check(c, &n_left, ex, sizeof ex) : -1;
    kl_client_close(c);
    CHECK(conf, "after kill -9 of all and a restart the members do not all report the 3 expected voters");
    CHECK(bad == 0, "%d acknowledged-message violations (e.g. %s)", bad, ex);
    CHECK(gr_changes == 4 && gr_changes_idle == 0, "%d of %d changes ran without an acknowledged enqueue",
          gr_changes_idle, gr_changes);
    CHECK(atomic_load(&gr_acked) > 0, "the consumer acknowledged nothing");
    CHECK(atomic_load(&gr_refused) == 0, "%d enqueues refused", atomic_load(&gr_refused));
    printf("  after kill -9 of all and a restart: 3 voters committed on each; %d acknowledged enqueues: %d acked "
           "by the consumer, %zu still queued, each exactly once; test %lld ms\n",
           atomic_load(&gr_enq_ok), atomic_load(&gr_acked), n_left, (long long)(now_ms() - t_start));
}

/* How many members kl_cluster_status_to_json (what `keyload cluster-status` prints) reports
 * up and "voter" in partition 0, reading the cluster file at path; -1 when it fails. */
static int gr_status_voters_up(const char *path)
{
    char *report = NULL;
    kl_err err = {0};
    if (kl_cluster_status_to_json(path, 1000, 0, &report, &err) != KL_OK)
        return -1;
    json_t *root = json_loads(report, 0, NULL);
    free(report);
    json_t *members = json_object_get(json_array_get(json_object_get(root, "partitions"), 0), "members");
    int n = 0;
    size_t i;
    json_t *m;
    json_array_foreach(members, i, m) {
        const char *place = json_string_value(json_object_get(m, "configuration"));
        n += json_is_true(json_object_get(m, "up")) && place != NULL && strcmp(place, "voter") == 0;
    }
    json_decref(root);
    return root != NULL ? n : -1;
}

/* Whether n more enqueues are acknowledged within timeout_ms. */
static bool gr_acked_more(int n, int timeout_ms)
{
    int w0 = atomic_load(&gr_enq_ok);
    for (int64_t t = now_ms(); now_ms() - t < timeout_ms; sleep_ms(20))
        if (atomic_load(&gr_enq_ok) - w0 >= n)
            return true;
    return false;
}

/* A partition started with one member (replica_count 1) grows to 2 (replica_count 2) and to 3
 * (replica_count 3) under load; then every member is killed -9 and restarted, the first from
 * its one-member seed file, so the stored configuration must decide. */
void test_grow_from_one_member(void)
{
    int64_t t_start = now_ms();
    CHECK(gr_begin(1), "cannot write the cluster files or the secret");
    gr_start(0, gr_seed, false);
    kl_client *c = NULL;
    kl_err err = {0};
    CHECK(kl_client_open(gr_seed, "default/default", 5000, &c, &err) == KL_OK, "open: %s", err.message);
    if (!gr_setup(c)) {
        kl_client_close(c);
        CHECK(false, "the one-member partition did not create its database and queue");
    }
    pthread_t tw, tc;
    pthread_create(&tw, NULL, gr_writer, c);
    pthread_create(&tc, NULL, gr_consumer, c);
    for (int64_t t = now_ms(); atomic_load(&gr_enq_ok) < 20 && now_ms() - t < 10000;)
        sleep_ms(50);
    int acked = 0;
    int64_t took = 0;
    gr_start(1, gr_full, true);
    gr_rc = 2;
    gr_change_rc = 2;
    bool two = gr_change_to(c, "add", 1, 0x3u, -1, &acked, &took);
    if (two)
        gr_log_change("add member 2 to a one-member partition (replica_count 1 -> 2)", took, acked);
    bool after[2] = {two && gr_acked_more(10, 10000), false};
    bool three = false;
    if (two) {
        /* Its file names the partition at its target, replica_count 3, with itself as the
           third member: the seed it joins with has two others. */
        char j3[700];
        snprintf(j3, sizeof j3, "%s/grow-j3.json", work);
        gr_rc = 3;
        gr_write_file(j3, 3);
        gr_start(2, j3, true);
        gr_change_rc = 3;
        three = gr_change_to(c, "add", 2, 0x7u, -1, &acked, &took);
        if (three)
            gr_log_change("add member 3 (replica_count 2 -> 3)", took, acked);
        after[1] = three && gr_acked_more(10, 10000);
    }
    sleep_ms(500);
    atomic_store(&gr_stop, true);
    pthread_join(tw, NULL);
    pthread_join(tc, NULL);
    if (!three) {
        kl_client_close(c);
        gr_stop_all();
        CHECK(two, "a one-member partition did not grow to 2 voters (replica_count 2) committed on both");
        CHECK(three, "the partition did not grow from 2 to 3 voters (replica_count 3)");
    }
    for (int i = 0; i < 3; i++)
        gr_kill(i);
    gr_start(0, gr_seed, false); /* its file still names one member: the log must decide */
    gr_start(1, gr_full, false);
    gr_start(2, gr_full, false);
    bool conf = gr_all_report(0x7u, 20000);
    size_t n_left = 0;
    char ex[160] = "";
    int bad = conf && gr_leader(15000) >= 0 ? gr_final_check(c, &n_left, ex, sizeof ex) : -1;
    kl_client_close(c);
    int listed = conf ? gr_status_voters_up(gr_seed) : -1;
    gr_stop_all();
    CHECK(conf, "after kill -9 of all and a restart the members do not all report voters {1,2,3} at replica_count 3");
    CHECK(listed == 3, "cluster-status from the one-member file lists %d members up as voters, not 3", listed);
    CHECK(bad == 0, "%d acknowledged-message violations (e.g. %s)", bad, ex);
    CHECK(after[0] && after[1], "10 enqueues were not acknowledged within 10 s after a change (after 2 voters: %d, "
          "after 3: %d)", after[0], after[1]);
    CHECK(atomic_load(&gr_refused) == 0, "%d enqueues refused", atomic_load(&gr_refused));
    printf("  one member grown to three; after kill -9 of all and a restart (member 1 from its one-member file): "
           "voters {1,2,3} at replica_count 3 on each; %d acknowledged enqueues: %d acked, %zu still queued, each "
           "exactly once; test %lld ms\n",
           atomic_load(&gr_enq_ok), atomic_load(&gr_acked), n_left, (long long)(now_ms() - t_start));
}

/* A one-member partition whose file gives its member no peer address cannot be reached by a
 * new member: MemberChange add is refused, naming the missing field, and changes nothing. */
void test_grow_refused_without_peer_address(void)
{
    CHECK(gr_begin(1), "cannot write the cluster files or the secret");
    char file[700];
    snprintf(file, sizeof file, "%s/grow-nopeer.json", work);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL, "cannot write %s", file);
    fprintf(f, "{\"cluster\":\"grow\",\"replica_count\":1,\"insecure_local_admin\":true,"
               "\"partitions\":[{\"id\":0,\"members\":[{\"id\":1,\"client\":\"%s\",\"data\":\"%s/grow-m1\"}]}]}\n",
            gr_url[0], work);
    fclose(f);
    gr_start(0, file, false);
    kl_client *c = NULL;
    kl_err err = {0};
    CHECK(kl_client_open(file, "default/default", 3000, &c, &err) == KL_OK, "open: %s", err.message);
    Keyload__V1__MemberInfo info = KEYLOAD__V1__MEMBER_INFO__INIT;
    info.id = 2;
    info.peer_url = gr_peer[1];
    info.client_url = gr_url[1];
    Keyload__V1__MemberChangeRequest q = KEYLOAD__V1__MEMBER_CHANGE_REQUEST__INIT;
    q.op = "add";
    q.member = &info;
    kl_code rc = KL_UNAVAILABLE;
    for (int64_t t = now_ms(); gr_retryable(rc) && now_ms() - t < 10000; sleep_ms(100)) {
        Keyload__V1__MemberChangeAnswer *a = NULL;
        rc = kl_client_member_change(c, 0, &q, &a, &err);
        if (a != NULL)
            keyload__v1__member_change_answer__free_unpacked(a, NULL);
    }
    Keyload__V1__MembersAnswer *m = gr_members_of(0);
    bool alone = m != NULL && m->n_voters == 1 && m->n_learners == 0;
    if (m != NULL)
        keyload__v1__members_answer__free_unpacked(m, NULL);
    kl_client_close(c);
    gr_stop_all();
    CHECK(rc == KL_FAILED_PRECONDITION && strcmp(err.detail, "peer_url") == 0,
          "MemberChange add answered %s (%s), not FAILED_PRECONDITION peer_url", kl_code_name(rc), err.detail);
    CHECK(alone, "the refused change left more than the one voter (or Members did not answer)");
    printf("  refused: %s\n", err.message);
}

/* MemberChange replace of old -> nw (0-based), retried until it answers done and every
 * member of `want` reports `want`. */
static bool gr_replace_to(kl_client *c, int old, int nw, unsigned want, char *why, size_t cap)
{
    Keyload__V1__MemberInfo info = KEYLOAD__V1__MEMBER_INFO__INIT;
    info.id = (uint64_t)nw + 1;
    info.peer_url = gr_peer[nw];
    info.client_url = gr_url[nw];
    Keyload__V1__MemberChangeRequest q = KEYLOAD__V1__MEMBER_CHANGE_REQUEST__INIT;
    q.op = "replace";
    q.member = &info;
    q.old_member_id = (uint64_t)old + 1;
    for (int64_t t = now_ms(); now_ms() - t < GR_CHANGE_MS; sleep_ms(200)) {
        Keyload__V1__MemberChangeAnswer *a = NULL;
        kl_err err = {0};
        kl_code rc = kl_client_member_change(c, 0, &q, &a, &err);
        bool done = rc == KL_OK && a != NULL && a->done;
        if (a != NULL)
            keyload__v1__member_change_answer__free_unpacked(a, NULL);
        if (rc != KL_OK)
            snprintf(why, cap, "%s %s: %s", kl_code_name(rc), err.detail, err.message);
        if (done && gr_all_report(want, 2000))
            return true;
    }
    return false;
}

/* A 3-of-3 partition replaces dead member 3 by a joined member 4, then dead member 4 by 5,
 * through one client that learned the configuration (Members) in between: the seed members'
 * entries in the replicated directory must still be reachable, or the client would route
 * only to the dead joined member and the second replacement could never start. */
void test_replace_a_replaced_member(void)
{
    CHECK(gr_begin(3), "cannot write the cluster files or the secret");
    for (int i = 0; i < 3; i++)
        gr_start(i, gr_seed, false);
    kl_client *c = NULL;
    kl_err err = {0};
    CHECK(kl_client_open(gr_seed, "default/default", 2000, &c, &err) == KL_OK, "open: %s", err.message);
    if (!gr_setup(c)) {
        kl_client_close(c);
        gr_stop_all();
        CHECK(false, "the partition did not create its database and queue");
    }
    char why[400] = "none";
    gr_kill(2);
    gr_start(3, gr_j4, true);
    bool first = gr_replace_to(c, 2, 3, 0xBu, why, sizeof why);
    Keyload__V1__MembersAnswer *m = NULL;
    bool learned = first && kl_client_members(c, 0, &m, &err) == KL_OK;
    if (m != NULL)
        keyload__v1__members_answer__free_unpacked(m, NULL);
    gr_kill(3);
    gr_start(4, gr_full, true);
    char why2[400] = "none";
    bool second = learned && gr_replace_to(c, 3, 4, 0x13u, why2, sizeof why2);
    kl_receipt *r = NULL;
    kl_code last = KL_UNAVAILABLE;
    kl_batch *b = NULL;
    kl_message *msg = NULL;
    int out = 0;
    if (second && kl_message_new("after", 5, &msg, NULL) == KL_OK && kl_batch_new(NULL, &b, NULL) == KL_OK &&
        kl_batch_enqueue(b, GR_QUEUE, NULL, msg, NULL) == KL_OK)
        out = gr_send(c, b, &r, &last);
    kl_receipt_free(r);
    kl_batch_free(b);
    kl_message_free(msg);
    kl_client_close(c);
    gr_stop_all();
    CHECK(first, "dead member 3 was not replaced by 4 (last refusal: %s)", why);
    CHECK(learned, "Members did not answer after the first replacement");
    CHECK(second, "dead member 4 was not replaced by 5 through the client that learned {1,2,4} (last refusal: %s)",
          why2);
    CHECK(out == 1, "no write acknowledged after the second replacement: %s", kl_code_name(last));
}
