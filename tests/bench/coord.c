/* coord: coordinator-driven transfers (KL-5 benchmark); the method is in coord.h. */
#include "tests/bench/coord.h"

#include "client/keyload.h"
#include "common/status.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LANE_MAX 96
#define TRIES 5   /* per call, for answers that may change on a retry */

typedef struct item {
    char tid[KL_COMMAND_ID_TEXT_LEN + 1];
    bool created;
    bool delivered;
    int64_t ic_ms;   /* IntentCreated commit time (unix ms), 0 when unknown */
    int64_t rv_ms;   /* ReceiptVerified commit time */
} item;

typedef struct shared {
    const bench_coord_opts *o;
    item *items;
    char tag[48];
    atomic_long next;        /* the next item a thread takes */
    int64_t start_ms;        /* creation's start (unix ms), for --rate's schedule */
    atomic_ullong errors;
    atomic_int open_failed;
    pthread_mutex_t err_mu;  /* guards first_err */
    char first_err[300];
} shared;

static int64_t unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Codes after which the same request may succeed: the SDK already followed redirects and
 * resent within its timeout, so these are a leader change or a slow commit. */
static bool transient(kl_code rc)
{
    return rc == KL_UNAVAILABLE || rc == KL_NOT_LEADER || rc == KL_DEADLINE_EXCEEDED ||
           rc == KL_UNKNOWN_WRITE_OUTCOME;
}

static void note_err(shared *s, const char *step, kl_code rc, const kl_err *err)
{
    atomic_fetch_add(&s->errors, 1);
    pthread_mutex_lock(&s->err_mu);
    if (s->first_err[0] == '\0')
        snprintf(s->first_err, sizeof s->first_err, "%s: %s (%.64s) %.160s", step, kl_code_name(rc),
                 err->detail, err->message);
    pthread_mutex_unlock(&s->err_mu);
}

static void lane_of(const shared *s, long i, char out[LANE_MAX])
{
    snprintf(out, LANE_MAX, "%s-l%ld", s->tag, i / s->o->lane_every);
}

static kl_code open_client(const shared *s, kl_client **c, kl_err *err)
{
    const bench_coord_opts *o = s->o;
    return kl_client_open_principal(o->cluster_file, o->database, o->timeout_ms, o->principal, o->key_file, c,
                                    err);
}

/* One CreateQueueTransfer; a retry resends the same batch (same command id, same transfer
 * id), so it can never create a second intent. */
static kl_code create_one(kl_client *c, const shared *s, const kl_message *msg, long i, kl_err *err)
{
    const bench_coord_opts *o = s->o;
    char lane[LANE_MAX];
    lane_of(s, i, lane);
    kl_batch *b = NULL;
    kl_code rc = kl_batch_new(NULL, &b, err);
    if (rc == KL_OK)
        rc = kl_batch_create_transfer(b, o->queue, lane, s->items[i].tid, o->dest_queue, lane, msg, err);
    for (int t = 0; rc == KL_OK && t < TRIES; t++) {
        kl_receipt *r = NULL;
        rc = kl_client_batch(c, b, &r, err);
        if (rc == KL_OK && (r->decoded->n_results != 1 ||
                            r->decoded->results[0]->kind_case != KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_CREATED))
            rc = kl_fail(err, KL_INTERNAL, "receipt", "the receipt does not carry transfer_created");
        kl_receipt_free(r);
        if (!transient(rc))
            break;
        sleep_ms(20);
    }
    kl_batch_free(b);
    return rc;
}

static void *create_main(void *arg)
{
    shared *s = arg;
    const bench_coord_opts *o = s->o;
    kl_err err;
    kl_err_clear(&err);
    kl_client *c = NULL;
    kl_message *msg = NULL;
    uint8_t *body = malloc((size_t)o->body_size + 1);
    kl_code rc = body == NULL ? kl_fail(&err, KL_INTERNAL, "memory", "out of memory") : KL_OK;
    for (int i = 0; body != NULL && i < o->body_size; i++)
        body[i] = (uint8_t)('a' + i % 26);
    if (rc == KL_OK)
        rc = kl_message_new(body, (size_t)o->body_size, &msg, &err);
    if (rc == KL_OK)
        rc = open_client(s, &c, &err);
    if (rc != KL_OK) {
        note_err(s, "open", rc, &err);
        atomic_fetch_add(&s->open_failed, 1);
    }
    long i;
    while (rc == KL_OK && (i = atomic_fetch_add(&s->next, 1)) < o->transfers) {
        if (o->rate > 0) { /* item i is due i/rate seconds after the start */
            int64_t due = s->start_ms + (int64_t)((double)i * 1000.0 / o->rate);
            int64_t now = unix_ms();
            if (due > now)
                sleep_ms((long)(due - now));
        }
        kl_err_clear(&err);
        kl_code r = create_one(c, s, msg, i, &err);
        if (r == KL_OK)
            s->items[i].created = true;
        else
            note_err(s, "create", r, &err);
    }
    kl_client_close(c);
    kl_message_free(msg);
    free(body);
    return NULL;
}

static void *inspect_main(void *arg)
{
    shared *s = arg;
    const bench_coord_opts *o = s->o;
    kl_err err;
    kl_client *c = NULL;
    kl_code rc = open_client(s, &c, &err);
    if (rc != KL_OK) {
        note_err(s, "open", rc, &err);
        return NULL;
    }
    long i;
    while ((i = atomic_fetch_add(&s->next, 1)) < o->transfers) {
        item *it = &s->items[i];
        if (!it->created)
            continue;
        char lane[LANE_MAX];
        lane_of(s, i, lane);
        Keyload__V1__InspectQueueTransferAnswer *a = NULL;
        for (int t = 0; t < TRIES; t++) {
            kl_err_clear(&err);
            rc = kl_client_inspect_transfer(c, o->queue, lane, it->tid, &a, &err);
            if (!transient(rc))
                break;
            sleep_ms(20);
        }
        if (rc != KL_OK) {
            note_err(s, "inspect", rc, &err);
            continue;
        }
        it->delivered = a->state == KEYLOAD__V1__TRANSFER_STATE__DELIVERED;
        for (size_t h = 0; h < a->n_history; h++) {
            const Keyload__V1__TransferHistoryEntry *e = a->history[h];
            if (e->event == KEYLOAD__V1__TRANSFER_EVENT__INTENT_CREATED && it->ic_ms == 0)
                it->ic_ms = e->unix_ms;
            else if (e->event == KEYLOAD__V1__TRANSFER_EVENT__RECEIPT_VERIFIED)
                it->rv_ms = e->unix_ms;
        }
        kl_transfer_answer_free(a);
    }
    kl_client_close(c);
    return NULL;
}

/* Runs n threads of fn over the items (s->next restarts at 0); 0 when every one started. */
static int run_threads(shared *s, int n, void *(*fn)(void *))
{
    pthread_t *th = calloc((size_t)n, sizeof *th);
    if (th == NULL)
        return -1;
    atomic_store(&s->next, 0);
    int started = 0;
    for (; started < n; started++)
        if (pthread_create(&th[started], NULL, fn, s) != 0)
            break;
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    free(th);
    return started == n ? 0 : -1;
}

/* Polls until SOURCE lists no pending intent or the drain deadline passes. 1 drained, 0 not,
 * -1 no client. */
static int wait_drained(shared *s)
{
    const bench_coord_opts *o = s->o;
    kl_err err;
    kl_client *c = NULL;
    if (open_client(s, &c, &err) != KL_OK) {
        note_err(s, "open", err.code, &err);
        return -1;
    }
    int64_t deadline = unix_ms() + (int64_t)(o->drain_s * 1000);
    int drained = 0;
    while (!drained && unix_ms() < deadline) {
        Keyload__V1__ListPendingQueueTransfersAnswer *a = NULL;
        kl_err_clear(&err);
        kl_code rc = kl_client_pending_transfers(c, o->queue, NULL, -1, NULL, 0, 1, &a, &err);
        if (rc == KL_OK && a->n_items == 0)
            drained = 1;
        else if (rc != KL_OK && !transient(rc))
            note_err(s, "pending", rc, &err);
        kl_pending_transfers_free(a);
        if (!drained)
            sleep_ms(50);
    }
    kl_client_close(c);
    return drained;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double pct_i64(const int64_t *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t k = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
    return (double)v[k < n ? k : n - 1];
}

int bench_coord_run(const bench_coord_opts *o)
{
    shared s;
    memset(&s, 0, sizeof s);
    s.o = o;
    pthread_mutex_init(&s.err_mu, NULL);
    if (o->lane_tag != NULL)
        snprintf(s.tag, sizeof s.tag, "%s", o->lane_tag);
    else
        snprintf(s.tag, sizeof s.tag, "c%ld", (long)getpid());
    s.items = calloc((size_t)o->transfers, sizeof *s.items);
    if (s.items == NULL)
        return 1;
    for (long i = 0; i < o->transfers; i++)
        kl_command_id_new(s.items[i].tid);

    int64_t t0 = unix_ms();
    s.start_ms = t0;
    if (run_threads(&s, o->clients, create_main) != 0) {
        fprintf(stderr, "keyload-bench: cannot start the creating threads\n");
        return 1;
    }
    int64_t t1 = unix_ms();
    long created = 0;
    for (long i = 0; i < o->transfers; i++)
        created += s.items[i].created;
    double create_s = (double)(t1 - t0) / 1000.0;
    if (atomic_load(&s.open_failed) == o->clients || created == 0) {
        fprintf(stderr, "keyload-bench: coord: no transfer created: %s\n", s.first_err);
        return 1;
    }
    if (o->no_wait) {
        printf("coord: phase=create transfers=%ld created=%ld create_s=%.2f creates_per_s=%.1f errors=%llu\n",
               o->transfers, created, create_s, created / (create_s > 0 ? create_s : 1e-3),
               (unsigned long long)atomic_load(&s.errors));
        if (s.first_err[0] != '\0')
            fprintf(stderr, "keyload-bench: coord: first error: %s\n", s.first_err);
        free(s.items);
        return 0;
    }

    int drained = wait_drained(&s);
    int64_t t2 = unix_ms();
    if (drained < 0)
        return 1;
    if (run_threads(&s, o->clients, inspect_main) != 0) {
        fprintf(stderr, "keyload-bench: cannot start the inspecting threads\n");
        return 1;
    }
    int64_t *lat = calloc((size_t)o->transfers + 1, sizeof *lat);
    if (lat == NULL)
        return 1;
    size_t n = 0;
    int64_t first_ic = INT64_MAX, last_rv = 0;
    for (long i = 0; i < o->transfers; i++) {
        const item *it = &s.items[i];
        if (!it->delivered || it->ic_ms == 0 || it->rv_ms == 0)
            continue;
        lat[n++] = it->rv_ms - it->ic_ms;
        if (it->ic_ms < first_ic)
            first_ic = it->ic_ms;
        if (it->rv_ms > last_rv)
            last_rv = it->rv_ms;
    }
    qsort(lat, n, sizeof *lat, cmp_i64);
    double span_s = n ? (double)(last_rv - first_ic) / 1000.0 : 0;
    double wall_s = (double)(t2 - t0) / 1000.0;
    printf("coord: transfers=%ld created=%ld delivered=%zu drained=%d create_s=%.2f creates_per_s=%.1f "
           "span_s=%.2f transfers_per_s=%.1f wall_s=%.2f wall_per_s=%.1f p50_ms=%.0f p99_ms=%.0f max_ms=%.0f "
           "errors=%llu\n",
           o->transfers, created, n, drained, create_s, created / (create_s > 0 ? create_s : 1e-3), span_s,
           span_s > 0 ? (double)n / span_s : 0.0, wall_s, wall_s > 0 ? (double)n / wall_s : 0.0,
           pct_i64(lat, n, 50), pct_i64(lat, n, 99), n ? (double)lat[n - 1] : 0.0,
           (unsigned long long)atomic_load(&s.errors));
    fflush(stdout);
    if (s.first_err[0] != '\0')
        fprintf(stderr, "keyload-bench: coord: first error: %s\n", s.first_err);
    free(lat);
    free(s.items);
    pthread_mutex_destroy(&s.err_mu);
    return 0;
}
