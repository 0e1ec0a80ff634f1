/* bench_sealed: the enqueue workload as a principal through the SDK, every request sealed
 * under a session (one kl_client, so one session per member, per client thread), one batch
 * at a time or --in-flight K at once per client thread, and the
 * leader's session and authorization cost counters around the run. bench_enqueue.c runs
 * the clients and prints the line. */
#include "tests/bench/bench_fixture.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

/* One batch of o->batch_size enqueues of msg under a fresh command id. */
static kl_code sealed_make_batch(const bench_options *o, const kl_message *msg, kl_batch **out, kl_err *err)
{
    kl_code rc = kl_batch_new(NULL, out, err);
    for (int i = 0; rc == KL_OK && i < o->batch_size; i++)
        rc = kl_batch_enqueue(*out, o->queue, NULL, msg, err);
    if (rc != KL_OK) {
        kl_batch_free(*out);
        *out = NULL;
    }
    return rc;
}

/* A batch's answer: an OK receipt must carry one result per mutation. */
static kl_code sealed_receipt_check(const bench_options *o, kl_code rc, const kl_receipt *r, kl_err *err)
{
    if (rc == KL_OK && r->decoded->n_results != (size_t)o->batch_size)
        rc = kl_fail(err, KL_INTERNAL, "receipt", "receipt is short (%zu results for %d mutations)",
                     r->decoded->n_results, o->batch_size);
    return rc;
}

/* kl_client_batch of b, its receipt checked. */
static kl_code sealed_send(kl_client *c, const bench_options *o, const kl_batch *b, kl_err *err)
{
    kl_receipt *r = NULL;
    kl_code rc = kl_client_batch(c, b, &r, err);
    rc = sealed_receipt_check(o, rc, r, err);
    kl_receipt_free(r);
    return rc;
}

static void cs_first_err(bench_client *cs, kl_code rc, const kl_err *err)
{
    if (cs->first_err != KL_OK)
        return;
    cs->first_err = rc;
    snprintf(cs->first_err_msg, sizeof cs->first_err_msg, "%s (%s) %s", kl_code_name(rc), err->detail,
             err->message);
}

/* Counts one answered batch sent at t0 and answered at t1 (monotonic ns): its latency when
 * it lies inside the measured window. After a refusal that retrying cures, the caller's
 * thread pauses 1 ms. -1 when the latencies outgrew memory (the client stops), else 0. */
static int sealed_count(bench_client *cs, kl_code rc, const kl_err *err, int64_t t0, int64_t t1)
{
    cs->total++;
    int64_t to = atomic_load(&bench_measure_to);
    bool measured = t0 >= atomic_load(&bench_measure_from) && (to == 0 || t1 <= to);
    if (rc != KL_OK) {
        cs_first_err(cs, rc, err);
        if (measured)
            cs->errors++;
        if (rc == KL_UNAVAILABLE || rc == KL_RESOURCE_EXHAUSTED || rc == KL_NOT_LEADER)
            bench_sleep_ns(1000000);
        return 0;
    }
    if (measured) {
        cs->ok++;
        if (bench_lat_push(&cs->lat, (uint64_t)(t1 - t0)) != 0) {
            snprintf(cs->first_err_msg, sizeof cs->first_err_msg, "out of memory for latencies");
            return -1;
        }
    }
    return 0;
}

/* ---- --in-flight K: K batches outstanding per client thread (kl_client_batch_start).
 * The SDK's done callback only marks its slot answered; the client thread does all the
 * counting and resending, so the accounting above needs no lock. */

typedef struct sealed_slot {
    bench_pipe *pipe;
    kl_batch *b;          /* lives until the call is done */
    kl_receipt *r;
    kl_call *call;        /* NULL: the slot is idle */
    int64_t t0, t1;
    bool answered;        /* bench_pipe's flag, under pipe->mu */
} sealed_slot;

static void sealed_slot_done(kl_call *call, void *arg)
{
    (void)call;
    sealed_slot *s = arg;
    bench_pipe_mark(s->pipe, &s->answered, &s->t1);
}

/* Whether the run wants another batch from this client. */
static bool sealed_more(const bench_options *o)
{
    if (atomic_load(&bench_stop))
        return false;
    return o->ops <= 0 || atomic_fetch_sub(&bench_ops_left, 1) > 0;
}

/* Starts one batch in slot s; on a refused start counts the error and tries again (after
 * sealed_count's pause) while the run lasts. KL_OK: started. */
static kl_code sealed_slot_start(bench_client *cs, sealed_slot *s, const kl_message *msg)
{
    const bench_options *o = cs->opt;
    kl_err err;
    for (;;) {
        kl_err_clear(&err);
        kl_code rc = sealed_make_batch(o, msg, &s->b, &err);
        if (rc != KL_OK) {
            cs_first_err(cs, rc, &err);
            return rc;
        }
        s->r = NULL;
        s->answered = false;
        s->t0 = bench_now_ns();
        rc = kl_client_batch_start(cs->sdk, s->b, &s->r, sealed_slot_done, s, &s->call, &err);
        if (rc == KL_OK)
            return KL_OK;
        s->call = NULL;
        kl_batch_free(s->b);
        s->b = NULL;
        if (sealed_count(cs, rc, &err, s->t0, bench_now_ns()) != 0 || atomic_load(&bench_stop))
            return rc;
    }
}

/* Collects answered slot s: its outcome counted, its call and batch freed, the slot idle. */
static int sealed_slot_collect(bench_client *cs, sealed_slot *s)
{
    kl_err err;
    kl_err_clear(&err);
    kl_code rc = kl_call_result(s->call, &err);
    rc = sealed_receipt_check(cs->opt, rc, s->r, &err);
    kl_call_free(s->call);
    s->call = NULL;
    kl_receipt_free(s->r);
    s->r = NULL;
    kl_batch_free(s->b);
    s->b = NULL;
    return sealed_count(cs, rc, &err, s->t0, s->t1);
}

/* The measured loop with o->in_flight batches outstanding; returns once every started
 * batch was answered. */
static void sealed_pipelined(bench_client *cs, const kl_message *msg)
{
    const bench_options *o = cs->opt;
    int k = o->in_flight;
    sealed_slot *slot = bench_slots_new(cs, k, sizeof *slot);
    bench_pipe pipe;
    if (slot == NULL)
        return;
    bench_pipe_init(&pipe);
    int active = 0;
    bool stopping = false;
    for (int i = 0; i < k; i++) {
        slot[i].pipe = &pipe;
        if (sealed_more(o) && sealed_slot_start(cs, &slot[i], msg) == KL_OK)
            active++;
    }
    while (active > 0) {
        bench_pipe_wait(&pipe);
        for (int i = 0; i < k; i++) {
            if (!bench_pipe_take(&pipe, &slot[i].answered, slot[i].call != NULL))
                continue;
            active--;
            if (sealed_slot_collect(cs, &slot[i]) != 0)
                stopping = true;
            if (!stopping && sealed_more(o) && sealed_slot_start(cs, &slot[i], msg) == KL_OK)
                active++;
        }
    }
    bench_pipe_destroy(&pipe);
    free(slot);
}

void *bench_sealed_client_main(void *arg)
{
    bench_client *cs = arg;
    const bench_options *o = cs->opt;
    kl_err err;
    kl_err_clear(&err);
    kl_message *msg = NULL;
    kl_batch *b = NULL;
    uint8_t *body = malloc((size_t)o->body_size + 1);
    kl_code rc = body == NULL ? kl_fail(&err, KL_INTERNAL, "memory", "out of memory") : KL_OK;
    for (int i = 0; body != NULL && i < o->body_size; i++)
        body[i] = (uint8_t)('a' + (i + cs->id) % 26);
    if (rc == KL_OK)
        rc = kl_message_new(body, (size_t)o->body_size, &msg, &err);
    if (rc == KL_OK)
        rc = kl_client_open_principal(o->cluster_file, o->database, o->timeout_ms, o->principal,
                                      o->key_file, &cs->sdk, &err);
    /* The first batch before the clock: Hello with the leader, LocateQueue. */
    if (rc == KL_OK)
        rc = sealed_make_batch(o, msg, &b, &err);
    if (rc == KL_OK)
        rc = sealed_send(cs->sdk, o, b, &err);
    kl_batch_free(b);
    b = NULL;
    if (rc != KL_OK) {
        cs_first_err(cs, rc, &err);
        cs->open_failed = 1;
    }
    atomic_fetch_add(&bench_primed, 1);
    if (rc != KL_OK)
        goto out;
    while (!atomic_load(&bench_go))
        bench_sleep_ns(100000);
    if (o->in_flight > 1) {
        sealed_pipelined(cs, msg);
        goto out;
    }
    while (!atomic_load(&bench_stop)) {
        if (o->ops > 0 && atomic_fetch_sub(&bench_ops_left, 1) <= 0)
            break;
        kl_err_clear(&err);
        if (o->random_body) { /* new random bytes per batch (its messages share them) */
            randombytes_buf(body, (size_t)o->body_size);
            kl_message_free(msg);
            msg = NULL;
            if ((rc = kl_message_new(body, (size_t)o->body_size, &msg, &err)) != KL_OK) {
                cs_first_err(cs, rc, &err);
                break;
            }
        }
        if ((rc = sealed_make_batch(o, msg, &b, &err)) != KL_OK) {
            cs_first_err(cs, rc, &err);
            break;
        }
        int64_t t0 = bench_now_ns();
        rc = sealed_send(cs->sdk, o, b, &err);
        int64_t t1 = bench_now_ns();
        kl_batch_free(b);
        b = NULL;
        if (sealed_count(cs, rc, &err, t0, t1) != 0)
            break;
    }
out:
    kl_message_free(msg);
    free(body);
    return NULL;
}

void bench_cost_read(bench_members *ms, int li, bench_cost_snap *out)
{
    memset(out, 0, sizeof *out);
    kl_err err;
    kl_err_clear(&err);
    Keyload__V1__MemberStatusAnswer *a = NULL;
    if (li < 0 || bench_ms_status(ms, li, 5000, &a, &err) != KL_OK) {
        fprintf(stderr, "keyload-bench: MemberStatus of the leader failed: %s\n", err.message);
        return;
    }
    *out = (bench_cost_snap){.ok = true, .member = a->member, .term = a->term,
                       .sealed_requests = a->sealed_requests, .session_ns = a->session_ns,
                       .authz_requests = a->authz_requests, .authz_ns = a->authz_ns,
                       .hellos = a->hellos, .hello_ns = a->hello_ns, .applied_index = a->applied_index};
    keyload__v1__member_status_answer__free_unpacked(a, NULL);
}

/* " sealed_requests=... cost_pct_p50=..." for the bench line: the deltas between two
 * snapshots of the same leader in the same term ("costs=n/a" otherwise). */
void bench_cost_print(const bench_cost_snap *x, const bench_cost_snap *y, double p50_us)
{
    if (!x->ok || !y->ok || x->member != y->member || x->term != y->term ||
        y->sealed_requests <= x->sealed_requests) {
        printf(" costs=n/a");
        return;
    }
    uint64_t req = y->sealed_requests - x->sealed_requests, sess = y->session_ns - x->session_ns;
    uint64_t areq = y->authz_requests - x->authz_requests, authz = y->authz_ns - x->authz_ns;
    double per = (double)(sess + authz) / (double)req / 1e3;
    printf(" leader_member=%llu sealed_requests=%llu session_ns=%llu authz_requests=%llu authz_ns=%llu "
           "hellos=%llu hello_ns=%llu session_us_per_req=%.2f authz_us_per_req=%.2f cost_us_per_req=%.2f "
           "cost_pct_p50=%.3f",
           (unsigned long long)y->member, (unsigned long long)req, (unsigned long long)sess,
           (unsigned long long)areq, (unsigned long long)authz,
           (unsigned long long)(y->hellos - x->hellos), (unsigned long long)(y->hello_ns - x->hello_ns),
           (double)sess / (double)req / 1e3, (double)authz / (double)req / 1e3, per,
           p50_us > 0 ? 100.0 * per / p50_us : 0.0);
    /* Log entries the leader applied per request: below 1 when batches share an entry
     * (the status calls themselves append nothing). */
    printf(" entries=%llu entries_per_req=%.3f", (unsigned long long)(y->applied_index - x->applied_index),
           (double)(y->applied_index - x->applied_index) / (double)req);
}
