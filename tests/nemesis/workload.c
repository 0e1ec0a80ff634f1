/* The recorded workload (nemesis.h): principals and queues set up through the SDK, then
 * threads that enqueue, receive + ack/release, read stats, create transfers as the
 * coordinator's principal, and revoke/restore the consumer's grant. Every write has a fixed
 * command id and is retried by the README's rules: the same batch again after
 * UNKNOWN_WRITE_OUTCOME, UNAVAILABLE, NOT_LEADER or a deadline, never with a fresh id; an
 * operation whose last answer left its outcome open is recorded as unknown and settled by
 * check.c from the final state. */
#include "tests/nemesis/nemesis.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

nm_history nm_hist = {.mu = PTHREAD_MUTEX_INITIALIZER};
const char *const nm_queues[2] = {"nq-a", "nq-b"};

#define WRITERS 2
#define LEASE_MS 6000
#define GIVE_UP_MS 30000

static atomic_bool stop_flag;
static atomic_uint_fast64_t enq_ok[2], ack_sent[2];
static pthread_t threads[8];
static int n_threads;
static uint64_t wl_seed;
static const char *op_names[OP_KINDS] = {"enqueue", "receive", "ack", "release", "stats",
                                         "transfer", "inspect", "revoke", "restore", "replay"};

#define PUSH(arr, n, cap, val)                                                                   \
    do {                                                                                         \
        if ((n) == (cap)) {                                                                      \
            (cap) = (cap) ? (cap) * 2 : 1024;                                                    \
            (arr) = realloc((arr), (cap) * sizeof *(arr));                                       \
            if ((arr) == NULL)                                                                   \
                abort();                                                                         \
        }                                                                                        \
        (arr)[(n)++] = (val);                                                                    \
    } while (0)

/* PERMISSION_DENIED stale_authority says the command id's original committed and withholds
 * its receipt: the batch took effect, with an outcome this client cannot see. */
static bool is_stale_authority(kl_code rc, const kl_err *err)
{
    return rc == KL_PERMISSION_DENIED && err != NULL && strcmp(err->detail, "stale_authority") == 0;
}

static bool retryable(kl_code rc)
{
    return rc == KL_UNAVAILABLE || rc == KL_UNKNOWN_WRITE_OUTCOME || rc == KL_DEADLINE_EXCEEDED || rc == KL_NOT_LEADER;
}

/* Whether an answer is among the codes the README documents for this operation in this
 * workload: the retryable ones everywhere, plus the refusals the workload provokes. A
 * replay (the same command id sent again, by this workload or inside the SDK, which
 * retries its own command id after UNAVAILABLE) of the consumer's may also answer
 * PERMISSION_DENIED stale_authority: its grants changed since the original committed (the
 * workload revokes and restores them), which the seeds require to make a replay stale. The
 * other principals' grants never change here, so their replays are never stale. */
static bool documented(nm_op k, kl_code rc, const kl_err *err, bool replay)
{
    if (rc == KL_OK || retryable(rc))
        return true;
    bool consumer_op = k == OP_RECEIVE || k == OP_ACK || k == OP_RELEASE;
    (void)replay;
    if (consumer_op && is_stale_authority(rc, err))
        return true;
    switch (k) {
    case OP_RECEIVE: return rc == KL_PERMISSION_DENIED; /* while the grant is revoked */
    case OP_ACK:
    case OP_RELEASE: return rc == KL_FAILED_PRECONDITION; /* a lease that expired */
    case OP_INSPECT: return rc == KL_NOT_FOUND;         /* checked by the caller */
    /* Transfer records are kept for ever, and a lane retains at most MaxBatchBytes and
       MaxScanRecords of them (README "Transfer records are never discarded"): a long run
       fills nx-src's lane and each further create is refused naming the limit. */
    case OP_TRANSFER:
        return rc == KL_RESOURCE_EXHAUSTED && err != NULL && strncmp(err->detail, "limit:", 6) == 0;
    default: return false;
    }
}

static void note(nm_op k, kl_code rc, const kl_err *err, bool replay)
{
    pthread_mutex_lock(&nm_hist.mu);
    nm_hist.codes[k][rc >= 0 && rc < KL_CODE_COUNT ? rc : KL_CODE_COUNT]++;
    if (rc == KL_UNAUTHENTICATED)
        nm_hist.unknown_principal++;
    if (!documented(k, rc, err, replay)) {
        nm_hist.bad_codes++;
        char kind[160];
        snprintf(kind, sizeof kind, "%s %s %.100s", op_names[k], kl_code_name(rc), err ? err->detail : "");
        size_t i = 0;
        while (i < nm_hist.n_bad_kinds && strcmp(nm_hist.bad_kinds[i], kind) != 0)
            i++;
        if (i == nm_hist.n_bad_kinds && i < sizeof nm_hist.bad_kinds / sizeof nm_hist.bad_kinds[0])
            snprintf(nm_hist.bad_kinds[nm_hist.n_bad_kinds++], sizeof nm_hist.bad_kinds[0], "%s", kind);
        if (!nm_hist.first_bad[0])
            snprintf(nm_hist.first_bad, sizeof nm_hist.first_bad, "%s answered %s (%.60s: %.120s)", op_names[k],
                     kl_code_name(rc), err ? err->detail : "", err ? err->message : "");
    }
    pthread_mutex_unlock(&nm_hist.mu);
}

/* Sends b until a definite answer or GIVE_UP_MS; *out is the receipt on OK. */
static nm_outcome send_batch(kl_client *c, const kl_batch *b, nm_op k, kl_receipt **out, kl_code *last)
{
    bool maybe = false;
    int64_t give_up = nm_now_ms() + GIVE_UP_MS;
    for (int attempt = 0;; attempt++) {
        kl_err err = {0};
        kl_receipt *r = NULL;
        kl_code rc = kl_client_batch(c, b, &r, &err);
        note(k, rc, &err, attempt > 0 || k == OP_REPLAY);
        *last = rc;
        if (rc == KL_OK) {
            *out = r;
            return OUT_OK;
        }
        kl_receipt_free(r);
        if (is_stale_authority(rc, &err))
            return OUT_UNKNOWN; /* committed; which messages it leased or acked is settled from the end state */
        if (rc == KL_UNKNOWN_WRITE_OUTCOME || rc == KL_DEADLINE_EXCEEDED)
            maybe = true;
        /* Only UNAVAILABLE / NOT_LEADER / refusals so far: never executed (README). */
        if (!retryable(rc) || nm_now_ms() > give_up)
            return maybe ? OUT_UNKNOWN : OUT_REFUSED;
        nm_sleep_ms(100 + rand() % 200);
    }
}

static kl_client *open_as(const char *principal, const char *key)
{
    kl_client *c = NULL;
    kl_err err;
    if (kl_client_open_principal(nm.file, NM_DATABASE, 2000, principal, key, &c, &err) != KL_OK) {
        fprintf(stderr, "nemesis: open as %s: %s: %s\n", principal, kl_code_name(err.code), err.message);
        return NULL;
    }
    return c;
}

kl_client *nm_admin_client(void) { return open_as("root", nm.root_key); }

/* Bumped when the cluster file changed (members.c): each thread reopens its client. */
static atomic_uint client_gen;

void nm_workload_reopen(void) { atomic_fetch_add(&client_gen, 1); }

/* Reopens *c from the cluster file when it changed since *gen; keeps the old client while
 * a new one cannot be opened (the next call tries again). */
static void refresh(kl_client **c, unsigned *gen, const char *principal, const char *key)
{
    unsigned g = atomic_load(&client_gen);
    if (g == *gen)
        return;
    kl_client *n = open_as(principal, key);
    if (n == NULL)
        return;
    kl_client_close(*c);
    *c = n;
    *gen = g;
}

/* ---- setup ---- */

typedef kl_code (*setup_fn)(kl_client *c, const char *cmd, const void *arg, kl_err *err);

/* One setup call under a fixed command id, retried on the retryable codes for 60 s. */
static bool setup_call(kl_client *c, const char *what, setup_fn fn, const void *arg)
{
    char cmd[KL_COMMAND_ID_TEXT_LEN + 1];
    kl_command_id_new(cmd);
    int64_t give_up = nm_now_ms() + 60000;
    for (;;) {
        kl_err err = {0};
        kl_code rc = fn(c, cmd, arg, &err);
        if (rc == KL_OK)
            return true;
        if (!retryable(rc) || nm_now_ms() > give_up) {
            fprintf(stderr, "nemesis: setup %s: %s: %s (%s)\n", what, kl_code_name(rc), err.message, err.detail);
            return false;
        }
        nm_sleep_ms(300);
    }
}

static kl_code do_batch(kl_client *c, kl_batch *b, kl_err *err)
{
    kl_receipt *r = NULL;
    kl_code rc = kl_client_batch(c, b, &r, err);
    kl_receipt_free(r);
    return rc;
}

static kl_code fn_bootstrap(kl_client *c, const char *cmd, const void *arg, kl_err *err)
{
    (void)arg;
    uint8_t pk[32], proof[32];
    kl_code rc = kl_key_file_public(nm.root_key, pk, err);
    if (rc == KL_OK)
        rc = kl_bootstrap_proof(nm.secret, NM_DATABASE, "root", pk, proof, err);
    kl_batch *b = NULL;
    if (rc == KL_OK)
        rc = kl_batch_new(cmd, &b, err);
    if (rc == KL_OK)
        rc = kl_batch_bootstrap(b, NM_DATABASE, "root", pk, proof, err);
    if (rc == KL_OK)
        rc = do_batch(c, b, err);
    kl_batch_free(b);
    return rc;
}

typedef struct principal_arg {
    const char *id, *key;
    kl_role role;
} principal_arg;

static kl_code fn_principal(kl_client *c, const char *cmd, const void *arg, kl_err *err)
{
    const principal_arg *a = arg;
    uint8_t pk[32];
    kl_code rc = kl_key_file_public(a->key, pk, err);
    return rc == KL_OK ? kl_client_create_principal(c, cmd, a->id, pk, a->role, NULL, NULL, err) : rc;
}

typedef struct grant_arg {
    const char *id;
    kl_grant g;
} grant_arg;

static kl_code fn_grant(kl_client *c, const char *cmd, const void *arg, kl_err *err)
{
    const grant_arg *a = arg;
    return kl_client_grant(c, cmd, a->id, &a->g, NULL, NULL, err);
}

typedef struct queue_arg {
    const char *name;
    int partition;
} queue_arg;

static kl_code fn_queue(kl_client *c, const char *cmd, const void *arg, kl_err *err)
{
    const queue_arg *a = arg;
    kl_queue_options o = {.pin_partition = true, .partition = a->partition};
    kl_batch *b = NULL;
    kl_code rc = kl_batch_new(cmd, &b, err);
    if (rc == KL_OK)
        rc = kl_batch_create_queue(b, a->name, &o, err);
    if (rc == KL_OK)
        rc = do_batch(c, b, err);
    kl_batch_free(b);
    return rc;
}

static bool grant_all(kl_client *c, const char *who, const char *pattern, bool publish)
{
    static const char *const all[] = {"*"};
    Keyload__V1__Permission perms[] = {KEYLOAD__V1__PERMISSION__QUEUE_CONSUME, KEYLOAD__V1__PERMISSION__QUEUE_INSPECT,
                                       KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, KEYLOAD__V1__PERMISSION__QUEUE_ACK};
    for (int i = 0; i < 4; i++) {
        if (perms[i] == KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH && !publish)
            continue;
        bool lists = perms[i] != KEYLOAD__V1__PERMISSION__QUEUE_ACK;
        grant_arg g = {who, {perms[i], pattern, lists ? all : NULL, lists, lists ? all : NULL, lists}};
        if (!setup_call(c, "grant", fn_grant, &g))
            return false;
    }
    return true;
}

static bool write_coord_config(void)
{
    snprintf(nm.coord_cfg, sizeof nm.coord_cfg, "%s/coordinator.json", nm.work);
    snprintf(nm.coord_log, sizeof nm.coord_log, "%s/coordinator.log", nm.work);
    FILE *f = fopen(nm.coord_cfg, "w");
    if (f == NULL)
        return false;
    fprintf(f, "{\"cluster_file\":\"%s\",\"database\":\"%s\",\"transfer_coordinator_principal_id\":\"coord\","
               "\"principal_key_file\":\"%s\",\"flush_interval_ms\":100,\"workers\":2,\"call_timeout_ms\":2000}\n",
            nm.file, NM_DATABASE, nm.coord_key);
    return fclose(f) == 0;
}

bool nm_setup(void)
{
    snprintf(nm.root_key, sizeof nm.root_key, "%s/root.key", nm.work);
    snprintf(nm.consumer_key, sizeof nm.consumer_key, "%s/consumer.key", nm.work);
    snprintf(nm.coord_key, sizeof nm.coord_key, "%s/coord.key", nm.work);
    uint8_t pk[32];
    kl_err err;
    const char *keys[] = {nm.root_key, nm.consumer_key, nm.coord_key};
    for (int i = 0; i < 3; i++)
        if (kl_key_file_new(keys[i], pk, &err) != KL_OK) {
            fprintf(stderr, "nemesis: key %s: %s\n", keys[i], err.message);
            return false;
        }
    kl_client *anon = NULL;
    if (kl_client_open(nm.file, NULL, 5000, &anon, &err) != KL_OK)
        return false;
    bool ok = setup_call(anon, "bootstrap", fn_bootstrap, NULL);
    kl_client_close(anon);
    kl_client *c = ok ? open_as("root", nm.root_key) : NULL;
    if (c == NULL)
        return false;
    principal_arg consumer = {"consumer", nm.consumer_key, KL_ROLE_NONE};
    principal_arg coord = {"coord", nm.coord_key, KL_ROLE_DATABASE_ADMIN};
    queue_arg qs[] = {{"nq-a", 1}, {"nq-b", 2}, {"nx-src", 1}, {"nx-dst", 2}};
    ok = setup_call(c, "principal consumer", fn_principal, &consumer) &&
         setup_call(c, "principal coord", fn_principal, &coord) && grant_all(c, "consumer", "nq-*", false) &&
         grant_all(c, "coord", "nx-*", true);
    for (int i = 0; ok && i < 4; i++)
        ok = setup_call(c, qs[i].name, fn_queue, &qs[i]);
    kl_client_close(c);
    if (ok)
        printf("nemesis: set up principals root, consumer, coord; queues nq-a (p1), nq-b (p2), nx-src (p1), "
               "nx-dst (p2)\n");
    return ok && write_coord_config();
}

/* ---- threads ---- */

static void writer_replay(kl_client *c, const kl_batch *b, const kl_receipt *orig)
{
    kl_receipt *r = NULL;
    kl_code last;
    nm_outcome o = send_batch(c, b, OP_REPLAY, &r, &last);
    pthread_mutex_lock(&nm_hist.mu);
    nm_hist.replays++;
    if (o == OUT_OK && (r->len != orig->len || memcmp(r->bytes, orig->bytes, r->len) != 0))
        nm_hist.replay_mismatch++;
    else if (o == OUT_REFUSED)
        nm_hist.replay_mismatch++;
    pthread_mutex_unlock(&nm_hist.mu);
    kl_receipt_free(r);
}

static void *writer(void *arg)
{
    int w = (int)(intptr_t)arg;
    kl_client *c = open_as("root", nm.root_key);
    if (c == NULL)
        return NULL;
    unsigned seed = (unsigned)(wl_seed + (uint64_t)w), gen = atomic_load(&client_gen);
    for (uint64_t seq = 0; !atomic_load(&stop_flag); seq++) {
        refresh(&c, &gen, "root", nm.root_key);
        nm_enq e = {.queue = (int)(seq % 2), .out = OUT_UNKNOWN};
        snprintf(e.body, sizeof e.body, "e%d-%llu", w, (unsigned long long)seq);
        kl_message *m = NULL;
        kl_batch *b = NULL;
        if (kl_message_new(e.body, strlen(e.body), &m, NULL) != KL_OK || kl_batch_new(NULL, &b, NULL) != KL_OK ||
            kl_batch_enqueue(b, nm_queues[e.queue], NULL, m, NULL) != KL_OK)
            abort();
        kl_receipt *r = NULL;
        kl_code last;
        e.out = send_batch(c, b, OP_ENQUEUE, &r, &last);
        if (e.out == OUT_OK && r->decoded->n_results == 1 && r->decoded->results[0]->enqueued)
            e.message_id = r->decoded->results[0]->enqueued->message_id;
        pthread_mutex_lock(&nm_hist.mu);
        PUSH(nm_hist.enq, nm_hist.n_enq, nm_hist.cap_enq, e);
        if (e.out == OUT_OK)
            atomic_fetch_add(&enq_ok[e.queue], 1);
        pthread_mutex_unlock(&nm_hist.mu);
        if (e.out == OUT_OK && rand_r(&seed) % 10 == 0)
            writer_replay(c, b, r);
        kl_receipt_free(r);
        kl_batch_free(b);
        kl_message_free(m);
        nm_sleep_ms(10 + (int)(rand_r(&seed) % 20));
    }
    kl_client_close(c);
    return NULL;
}

static void settle_leases(kl_client *c, int q, const Keyload__V1__Received *got, bool release, unsigned *seed)
{
    (void)seed;
    size_t n = got->n_messages;
    kl_bytes *toks = calloc(n, sizeof *toks);
    for (size_t i = 0; i < n; i++)
        toks[i] = (kl_bytes){got->messages[i]->lease_token.data, got->messages[i]->lease_token.len};
    kl_batch *b = NULL;
    if (kl_batch_new(NULL, &b, NULL) != KL_OK ||
        (release ? kl_batch_release(b, nm_queues[q], toks, n, NULL) : kl_batch_ack(b, nm_queues[q], toks, n, NULL)) !=
            KL_OK)
        abort();
    if (!release)
        atomic_fetch_add(&ack_sent[q], n);
    kl_receipt *r = NULL;
    kl_code last;
    nm_outcome o = send_batch(c, b, release ? OP_RELEASE : OP_ACK, &r, &last);
    int64_t t = nm_now_ms();
    if (!release) {
        pthread_mutex_lock(&nm_hist.mu);
        for (size_t i = 0; i < n; i++) {
            nm_ack a = {.queue = q, .out = o, .t_end = t};
            const ProtobufCBinaryData *body = &got->messages[i]->message->body;
            snprintf(a.body, sizeof a.body, "%.*s", (int)body->len, (const char *)body->data);
            PUSH(nm_hist.ack, nm_hist.n_ack, nm_hist.cap_ack, a);
        }
        pthread_mutex_unlock(&nm_hist.mu);
    }
    kl_receipt_free(r);
    kl_batch_free(b);
    free(toks);
}

static void record_deliveries(int q, const Keyload__V1__Received *got, int64_t t_send, bool consumer)
{
    int64_t t = nm_now_ms();
    pthread_mutex_lock(&nm_hist.mu);
    for (size_t i = 0; i < got->n_messages; i++) {
        nm_delivery d = {.queue = q, .t_send = t_send, .t_end = t, .consumer = consumer};
        const ProtobufCBinaryData *body = &got->messages[i]->message->body;
        snprintf(d.body, sizeof d.body, "%.*s", (int)body->len, (const char *)body->data);
        PUSH(nm_hist.dlv, nm_hist.n_dlv, nm_hist.cap_dlv, d);
    }
    pthread_mutex_unlock(&nm_hist.mu);
}

static void *consumer(void *arg)
{
    (void)arg;
    kl_client *c = open_as("consumer", nm.consumer_key);
    if (c == NULL)
        return NULL;
    unsigned seed = (unsigned)(wl_seed * 7 + 1), gen = atomic_load(&client_gen);
    for (uint64_t seq = 0; !atomic_load(&stop_flag); seq++) {
        refresh(&c, &gen, "consumer", nm.consumer_key);
        int q = (int)(seq % 2);
        kl_batch *b = NULL;
        if (kl_batch_new(NULL, &b, NULL) != KL_OK || kl_batch_receive(b, nm_queues[q], NULL, 8, LEASE_MS, NULL) != KL_OK)
            abort();
        int64_t t_send = nm_now_ms();
        kl_receipt *r = NULL;
        kl_code last;
        nm_outcome o = send_batch(c, b, OP_RECEIVE, &r, &last);
        const Keyload__V1__Received *got =
            o == OUT_OK && r->decoded->n_results == 1 ? r->decoded->results[0]->received : NULL;
        if (got != NULL && got->n_messages > 0) {
            record_deliveries(q, got, t_send, true);
            settle_leases(c, q, got, rand_r(&seed) % 8 == 0, &seed);
        } else {
            nm_sleep_ms(last == KL_PERMISSION_DENIED ? 200 : 30);
        }
        kl_receipt_free(r);
        kl_batch_free(b);
    }
    kl_client_close(c);
    return NULL;
}

/* Fresh reads: queue stats must count every enqueue answered OK before the read was sent,
 * less the messages acks sent before its answer may have removed. */
static void *reader(void *arg)
{
    (void)arg;
    kl_client *c = open_as("root", nm.root_key);
    if (c == NULL)
        return NULL;
    unsigned gen = atomic_load(&client_gen);
    for (uint64_t seq = 0; !atomic_load(&stop_flag); seq++) {
        refresh(&c, &gen, "root", nm.root_key);
        int q = (int)(seq % 2);
        nm_read rd = {.queue = q, .enq_ok_before_send = atomic_load(&enq_ok[q])};
        int64_t give_up = nm_now_ms() + GIVE_UP_MS;
        for (;;) {
            Keyload__V1__QueueStatsAnswer *s = NULL;
            kl_err err = {0};
            kl_code rc = kl_client_queue_stats(c, nm_queues[q], &s, &err);
            note(OP_STATS, rc, &err, false);
            if (rc == KL_OK) {
                rd.acks_sent_before_end = atomic_load(&ack_sent[q]);
                rd.messages = s->messages;
                kl_queue_stats_free(s);
                pthread_mutex_lock(&nm_hist.mu);
                PUSH(nm_hist.rd, nm_hist.n_rd, nm_hist.cap_rd, rd);
                pthread_mutex_unlock(&nm_hist.mu);
                break;
            }
            if (!retryable(rc) || nm_now_ms() > give_up || atomic_load(&stop_flag))
                break;
            nm_sleep_ms(200);
        }
        nm_sleep_ms(150);
    }
    kl_client_close(c);
    return NULL;
}

static void inspect_fresh(kl_client *c, const nm_xfer *x)
{
    int64_t give_up = nm_now_ms() + 10000;
    for (;;) {
        Keyload__V1__InspectQueueTransferAnswer *a = NULL;
        kl_err err = {0};
        kl_code rc = kl_client_inspect_transfer(c, "nx-src", NULL, x->id, &a, &err);
        note(OP_INSPECT, rc, &err, false);
        kl_transfer_answer_free(a);
        if (rc == KL_NOT_FOUND) {
            pthread_mutex_lock(&nm_hist.mu);
            nm_hist.fresh_inspect_missing++;
            pthread_mutex_unlock(&nm_hist.mu);
        }
        if (!retryable(rc) || nm_now_ms() > give_up || atomic_load(&stop_flag))
            return;
        nm_sleep_ms(200);
    }
}

static void *transfers(void *arg)
{
    (void)arg;
    kl_client *c = open_as("coord", nm.coord_key);
    if (c == NULL)
        return NULL;
    unsigned gen = atomic_load(&client_gen);
    for (uint64_t seq = 0; !atomic_load(&stop_flag); seq++) {
        refresh(&c, &gen, "coord", nm.coord_key);
        nm_xfer x = {.out = OUT_UNKNOWN};
        kl_command_id_new(x.id);
        snprintf(x.body, sizeof x.body, "x-%llu", (unsigned long long)seq);
        kl_message *m = NULL;
        kl_batch *b = NULL;
        if (kl_message_new(x.body, strlen(x.body), &m, NULL) != KL_OK || kl_batch_new(NULL, &b, NULL) != KL_OK ||
            kl_batch_create_transfer(b, "nx-src", NULL, x.id, "nx-dst", NULL, m, NULL) != KL_OK)
            abort();
        kl_receipt *r = NULL;
        kl_code last;
        x.out = send_batch(c, b, OP_TRANSFER, &r, &last);
        pthread_mutex_lock(&nm_hist.mu);
        PUSH(nm_hist.xf, nm_hist.n_xf, nm_hist.cap_xf, x);
        pthread_mutex_unlock(&nm_hist.mu);
        if (x.out == OUT_OK)
            inspect_fresh(c, &x);
        kl_receipt_free(r);
        kl_batch_free(b);
        kl_message_free(m);
        nm_sleep_ms(400);
    }
    kl_client_close(c);
    return NULL;
}

/* Revokes the consumer's QueueConsume every few seconds and restores it two seconds later. */
static void *grants(void *arg)
{
    (void)arg;
    kl_client *c = open_as("root", nm.root_key);
    if (c == NULL)
        return NULL;
    static const char *const all[] = {"*"};
    kl_grant g = {KEYLOAD__V1__PERMISSION__QUEUE_CONSUME, "nq-*", all, 1, all, 1};
    unsigned gen = atomic_load(&client_gen);
    while (!atomic_load(&stop_flag)) {
        refresh(&c, &gen, "root", nm.root_key);
        for (int i = 0; i < 40 && !atomic_load(&stop_flag); i++)
            nm_sleep_ms(100);
        for (int restore = 0; restore < 2; restore++) {
            char cmd[KL_COMMAND_ID_TEXT_LEN + 1];
            kl_command_id_new(cmd);
            int64_t t_send = nm_now_ms();
            kl_code rc;
            bool maybe = false;
            for (;;) {
                kl_err err = {0};
                rc = restore ? kl_client_grant(c, cmd, "consumer", &g, NULL, NULL, &err)
                             : kl_client_revoke(c, cmd, "consumer", g.permission, g.queue_pattern, NULL, NULL, &err);
                note(restore ? OP_RESTORE : OP_REVOKE, rc, &err, false);
                maybe = maybe || rc == KL_UNKNOWN_WRITE_OUTCOME || rc == KL_DEADLINE_EXCEEDED;
                /* The grant must come back whatever happens: retried until it answers. */
                if (!retryable(rc) && (rc == KL_OK || !restore))
                    break;
                nm_sleep_ms(300);
            }
            pthread_mutex_lock(&nm_hist.mu);
            if (!restore && rc == KL_OK && nm_hist.n_rv < sizeof nm_hist.rv / sizeof nm_hist.rv[0])
                nm_hist.rv[nm_hist.n_rv++] = (nm_revoke){nm_now_ms(), INT64_MAX};
            else if (restore && nm_hist.n_rv > 0 && nm_hist.rv[nm_hist.n_rv - 1].t_restore == INT64_MAX)
                nm_hist.rv[nm_hist.n_rv - 1].t_restore = t_send;
            pthread_mutex_unlock(&nm_hist.mu);
            if (!restore)
                for (int i = 0; i < 20; i++)
                    nm_sleep_ms(100);
        }
    }
    kl_client_close(c);
    return NULL;
}

static kl_client *probe_client;
static unsigned probe_gen;

/* One fresh read (queue stats) of workload queue q from the fault thread, timed; used while
 * a follower of q's partition is down, when the leader must still answer within the
 * client's deadline (an answer of any code counts: UNAVAILABLE is an answer). */
void nm_probe_read(int q)
{
    if (probe_client == NULL && (probe_gen = atomic_load(&client_gen), probe_client = open_as("root", nm.root_key)) == NULL)
        return;
    refresh(&probe_client, &probe_gen, "root", nm.root_key);
    Keyload__V1__QueueStatsAnswer *s = NULL;
    kl_err err = {0};
    int64_t t0 = nm_now_ms();
    kl_code rc = kl_client_queue_stats(probe_client, nm_queues[q], &s, &err);
    int64_t ms = nm_now_ms() - t0;
    kl_queue_stats_free(s);
    note(OP_STATS, rc, &err, false);
    pthread_mutex_lock(&nm_hist.mu);
    nm_hist.probe_reads++;
    if (rc == KL_DEADLINE_EXCEEDED)
        nm_hist.probe_no_answer++;
    if (ms > nm_hist.probe_max_ms)
        nm_hist.probe_max_ms = ms;
    nm_hist.probe_sum_ms += ms;
    pthread_mutex_unlock(&nm_hist.mu);
}

bool nm_workload_start(uint64_t seed)
{
    wl_seed = seed;
    srand((unsigned)seed);
    for (int w = 0; w < WRITERS; w++)
        pthread_create(&threads[n_threads++], NULL, writer, (void *)(intptr_t)w);
    pthread_create(&threads[n_threads++], NULL, consumer, NULL);
    pthread_create(&threads[n_threads++], NULL, reader, NULL);
    pthread_create(&threads[n_threads++], NULL, transfers, NULL);
    pthread_create(&threads[n_threads++], NULL, grants, NULL);
    printf("nemesis: workload: %d writers, 1 consumer (receive + ack/release, lease %d ms), 1 stats reader, "
           "1 transfer creator (as coord), revoke/restore of consumer's QueueConsume\n",
           WRITERS, LEASE_MS);
    return true;
}

void nm_workload_stop(void)
{
    atomic_store(&stop_flag, true);
    for (int i = 0; i < n_threads; i++)
        pthread_join(threads[i], NULL);
    n_threads = 0;
    kl_client_close(probe_client);
    probe_client = NULL;
}

void nm_workload_report(void)
{
    printf("operations by kind and answer (every attempt):\n");
    for (int k = 0; k < OP_KINDS; k++) {
        uint64_t sum = 0;
        for (int c = 0; c <= KL_CODE_COUNT; c++)
            sum += nm_hist.codes[k][c];
        if (sum == 0)
            continue;
        printf("  %-9s %7llu:", op_names[k], (unsigned long long)sum);
        for (int c = 0; c <= KL_CODE_COUNT; c++)
            if (nm_hist.codes[k][c])
                printf(" %s %llu", c < KL_CODE_COUNT ? kl_code_name(c) : "OUT_OF_RANGE",
                       (unsigned long long)nm_hist.codes[k][c]);
        printf("\n");
    }
    size_t out[3] = {0};
    for (size_t i = 0; i < nm_hist.n_enq; i++)
        out[nm_hist.enq[i].out]++;
    printf("enqueues by outcome: ok %zu, refused %zu, unknown %zu; deliveries %zu, acks %zu, fresh reads %zu, "
           "transfers %zu, revokes %zu, replays %llu\n",
           out[OUT_OK], out[OUT_REFUSED], out[OUT_UNKNOWN], nm_hist.n_dlv, nm_hist.n_ack, nm_hist.n_rd, nm_hist.n_xf,
           nm_hist.n_rv, (unsigned long long)nm_hist.replays);
}

/* ---- final state ---- */

nm_final nm_fin;

/* Receives everything left in queue (root, long lease) until an empty answer. */
static bool drain(kl_client *c, const char *queue, char (**bodies)[32], size_t *n)
{
    size_t cap = 0;
    for (int empty_rounds = 0; empty_rounds < 1;) {
        kl_batch *b = NULL;
        if (kl_batch_new(NULL, &b, NULL) != KL_OK || kl_batch_receive(b, queue, NULL, 100, 600000, NULL) != KL_OK)
            abort();
        kl_receipt *r = NULL;
        kl_code last;
        nm_outcome o = send_batch(c, b, OP_RECEIVE, &r, &last);
        kl_batch_free(b);
        if (o != OUT_OK) {
            fprintf(stderr, "nemesis: draining %s: %s\n", queue, kl_code_name(last));
            return false;
        }
        const Keyload__V1__Received *got = r->decoded->results[0]->received;
        for (size_t i = 0; got && i < got->n_messages; i++) {
            if (*n == cap) {
                cap = cap ? cap * 2 : 1024;
                *bodies = realloc(*bodies, cap * sizeof **bodies);
            }
            const ProtobufCBinaryData *body = &got->messages[i]->message->body;
            snprintf((*bodies)[(*n)++], 32, "%.*s", (int)body->len, (const char *)body->data);
        }
        if (got == NULL || got->n_messages == 0)
            empty_rounds++;
        kl_receipt_free(r);
    }
    return true;
}

static int transfer_state(kl_client *c, const char *id)
{
    Keyload__V1__InspectQueueTransferAnswer *a = NULL;
    kl_err err = {0};
    kl_code rc = kl_client_inspect_transfer(c, "nx-src", NULL, id, &a, &err);
    int st = rc == KL_NOT_FOUND ? 0 : rc != KL_OK ? -1 : a->state == KEYLOAD__V1__TRANSFER_STATE__DELIVERED ? 2 : 1;
    kl_transfer_answer_free(a);
    return st;
}

/* Waits up to 90 s for every transfer that may exist to be Delivered. */
static void transfers_settle(kl_client *c)
{
    nm_fin.xfer_state = calloc(nm_hist.n_xf + 1, sizeof *nm_fin.xfer_state);
    int64_t give_up = nm_now_ms() + 90000;
    for (size_t i = 0; i < nm_hist.n_xf; i++) {
        for (;;) {
            nm_fin.xfer_state[i] = transfer_state(c, nm_hist.xf[i].id);
            if (nm_fin.xfer_state[i] == 2 || (nm_fin.xfer_state[i] == 0 && nm_hist.xf[i].out != OUT_OK) ||
                nm_now_ms() > give_up)
                break;
            nm_sleep_ms(300);
        }
    }
}

bool nm_final_state(void)
{
    for (int p = 0; p < NM_PARTS; p++)
        if (nm_wait_serving(p, 60000) < 0) {
            /* A finding (check.c counts it); restarting the partition lets the history
             * still be checked against its final state. */
            printf("nemesis: partition %d does not serve 60 s after the final heal; restarting its members\n", p);
            nm_hist.serve_timeouts++;
            if (!nm_hist.first_serve_timeout[0])
                snprintf(nm_hist.first_serve_timeout, sizeof nm_hist.first_serve_timeout,
                         "partition %d after the final heal", p);
            for (int m = 0; m < NM_SLOTS; m++) {
                if (!nm.mb[p][m].active)
                    continue;
                nm_member_kill(&nm.mb[p][m]);
                nm_member_start(&nm.mb[p][m]);
            }
            if (nm_wait_serving(p, 60000) < 0) {
                printf("nemesis: partition %d does not serve after a restart either\n", p);
                return false;
            }
        }
    /* Leases the consumer held when it stopped run out first, so that draining sees them. */
    nm_sleep_ms(LEASE_MS + 1000);
    kl_client *c = open_as("root", nm.root_key);
    kl_client *x = open_as("coord", nm.coord_key);
    bool ok = c && x;
    for (int q = 0; ok && q < 2; q++)
        ok = drain(c, nm_queues[q], &nm_fin.remain, &nm_fin.n_remain);
    if (ok)
        transfers_settle(x);
    if (ok)
        ok = drain(x, "nx-dst", &nm_fin.dest, &nm_fin.n_dest);
    nm_fin.drained = ok;
    kl_client_close(c);
    kl_client_close(x);
    return ok;
}
