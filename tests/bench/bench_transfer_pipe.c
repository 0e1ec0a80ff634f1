/* bench_transfer_pipe: --transfer --in-flight K, K transfers outstanding on one client
 * thread through the SDK's asynchronous calls, the way an event-driven caller (or the
 * coordinator) keeps many transfers moving without a thread each.
 *
 * Every transfer makes exactly the four calls of the blocking client (bench_transfer.c),
 * in the same order and each only after the previous one answered: Create, Accept of the
 * intent token, the fresh receipt read, Complete with that receipt (which must answer
 * Delivered). Each slot has its own lanes, so no two outstanding transfers share one.
 * The SDK's done callback only marks its slot answered; this thread does all counting and
 * starts every call, so the accounting needs no lock. The calls one wake-up starts leave
 * together (kl_calls_hold), as the coordinator's do. */
#include "tests/bench/bench_fixture.h"

#include <pthread.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum xfer_step { STEP_CREATE, STEP_ACCEPT, STEP_RECEIPT, STEP_COMPLETE };

typedef struct xfer_slot {
    bench_pipe *pipe;
    int index;
    enum xfer_step step;
    long seq;                   /* transfers this slot started: picks its lane */
    char tid[KL_COMMAND_ID_TEXT_LEN + 1];
    char lane[64];
    kl_batch *b;                /* lives until its call is done */
    kl_receipt *r;
    Keyload__V1__InspectQueueTransferReceiptAnswer *ra;
    kl_call *call;              /* NULL: the slot is idle */
    uint8_t *token;             /* the intent (after Create) or the receipt (after the read) */
    size_t token_len;
    int64_t t0, t1;
    int64_t step_t0[4], step_t1[4]; /* when each step's call started and was answered */
    bool answered;              /* bench_pipe's flag, under pipe->mu */
} xfer_slot;

static const char *step_name(enum xfer_step s)
{
    switch (s) {
    case STEP_CREATE: return "create";
    case STEP_ACCEPT: return "accept";
    case STEP_RECEIPT: return "receipt";
    case STEP_COMPLETE: return "complete";
    }
    return "?";
}

static void slot_done(kl_call *call, void *arg)
{
    (void)call;
    xfer_slot *s = arg;
    bench_pipe_mark(s->pipe, &s->answered, &s->t1);
}

/* Keeps a copy of a token the next step sends. */
static kl_code slot_keep(xfer_slot *s, const ProtobufCBinaryData *t, kl_err *err)
{
    free(s->token);
    s->token_len = 0;
    if ((s->token = malloc(t->len ? t->len : 1)) == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    memcpy(s->token, t->data, s->token_len = t->len);
    return KL_OK;
}

/* Starts the slot's current step. KL_OK: started (slot_done follows). */
static kl_code slot_start_step(bench_client *cs, xfer_slot *s, const kl_message *msg, kl_err *err)
{
    const bench_options *o = cs->opt;
    kl_code rc;
    s->r = NULL;
    s->ra = NULL;
    s->answered = false;
    s->step_t0[s->step] = bench_now_ns();
    if (s->step == STEP_RECEIPT)
        return kl_client_transfer_receipt_start(cs->sdk, o->dest_queue, o->queue, s->lane, s->tid, &s->ra, slot_done,
                                                s, &s->call, err);
    if ((rc = kl_batch_new(NULL, &s->b, err)) != KL_OK)
        return rc;
    if (s->step == STEP_CREATE)
        rc = kl_batch_create_transfer(s->b, o->queue, s->lane, s->tid, o->dest_queue, s->lane, msg, err);
    else if (s->step == STEP_ACCEPT)
        rc = kl_batch_accept_transfer(s->b, o->dest_queue, s->lane, s->token, s->token_len, err);
    else
        rc = kl_batch_complete_transfer(s->b, o->queue, s->lane, s->tid, s->token, s->token_len, err);
    if (rc == KL_OK)
        rc = kl_client_batch_start(cs->sdk, s->b, &s->r, slot_done, s, &s->call, err);
    if (rc != KL_OK) {
        kl_batch_free(s->b);
        s->b = NULL;
    }
    return rc;
}

/* With --trace-out: one line for a batch step committed at a sampled index (bench_main.c). */
static void slot_trace(bench_client *cs, const xfer_slot *s, FILE *out)
{
    const Keyload__V1__BatchReceipt *d = s->r != NULL ? s->r->decoded : NULL;
    if (out == NULL || d == NULL || d->index == 0 || d->index % (uint64_t)cs->opt->trace_every != 0)
        return;
    char cmd[17]; /* as the leader's batch trace names it (daemon/rpc/batch_serve.c) */
    sodium_bin2hex(cmd, sizeof cmd, d->command_id.data, d->command_id.len < 8 ? d->command_id.len : 8);
    fprintf(out, "client trace partition=%d index=%llu step=%s cmd=%s sent=%lld answered=%lld\n", (int)d->partition,
            (unsigned long long)d->index, step_name(s->step), cmd, (long long)(s->step_t0[s->step] / 1000),
            (long long)(s->step_t1[s->step] / 1000));
}

/* Whether the run wants another transfer. */
static bool pipe_more(void)
{
    return !atomic_load(&bench_stop);
}

/* Starts a fresh transfer in idle slot s; a refused start is counted as a failed transfer.
 * KL_OK: started. */
static kl_code slot_begin(bench_client *cs, xfer_slot *s, const kl_message *msg)
{
    const bench_options *o = cs->opt;
    kl_err err;
    kl_err_clear(&err);
    kl_command_id_new(s->tid);
    snprintf(s->lane, sizeof s->lane, "p%ldw%ds%dl%ld", (long)getpid() % 100000, cs->id, s->index,
             s->seq / o->lane_every);
    s->seq++;
    s->step = STEP_CREATE;
    s->t0 = bench_now_ns();
    cs->total++;
    kl_code rc = slot_start_step(cs, s, msg, &err);
    if (rc != KL_OK) {
        s->call = NULL;
        bench_xfer_first_err(cs, step_name(s->step), rc, &err);
        if (s->t0 >= atomic_load(&bench_measure_from))
            cs->errors++;
    }
    return rc;
}

/* The answered call of slot s: checks it, frees it, and either starts the next step
 * (returns true: still active) or ends the transfer, counted (returns false: idle). */
static bool slot_collect(bench_client *cs, xfer_slot *s, const kl_message *msg, FILE *trace)
{
    kl_err err;
    kl_err_clear(&err);
    s->step_t1[s->step] = s->t1;
    kl_code rc = kl_call_result(s->call, &err);
    kl_call_free(s->call);
    s->call = NULL;
    kl_batch_free(s->b);
    s->b = NULL;
    if (rc == KL_OK && s->step != STEP_RECEIPT) {
        static const int want[] = {
            [STEP_CREATE] = KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_CREATED,
            [STEP_ACCEPT] = KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ACCEPTED,
            [STEP_COMPLETE] = KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_COMPLETED,
        };
        rc = bench_xfer_receipt_check(s->r, want[s->step], &err);
        if (rc == KL_OK)
            slot_trace(cs, s, trace);
    }
    if (rc == KL_OK && s->step == STEP_CREATE)
        rc = slot_keep(s, &s->r->decoded->results[0]->transfer_created->intent_token, &err);
    if (rc == KL_OK && s->step == STEP_RECEIPT)
        rc = slot_keep(s, &s->ra->receipt_token, &err);
    kl_receipt_free(s->r);
    s->r = NULL;
    kl_transfer_receipt_answer_free(s->ra);
    s->ra = NULL;
    if (rc == KL_OK && s->step != STEP_COMPLETE) {
        s->step++;
        if ((rc = slot_start_step(cs, s, msg, &err)) == KL_OK)
            return true;
        s->call = NULL;
    }
    int64_t to = atomic_load(&bench_measure_to);
    bool measured = s->t0 >= atomic_load(&bench_measure_from) && (to == 0 || s->t1 <= to);
    /* Each step from its call's start to its answer; what the four leave of the transfer's
     * latency is this thread's own delay in collecting answers and starting the next step. */
    for (int i = STEP_CREATE; rc == KL_OK && measured && i <= STEP_COMPLETE; i++) {
        if (bench_lat_push(&cs->step_lat[i], (uint64_t)(s->step_t1[i] - s->step_t0[i])) != 0)
            snprintf(cs->first_err_msg, sizeof cs->first_err_msg, "out of memory for latencies");
    }
    if (rc != KL_OK) {
        bench_xfer_first_err(cs, step_name(s->step), rc, &err);
        if (measured)
            cs->errors++;
    } else if (measured) {
        cs->ok++;
        if (bench_lat_push(&cs->lat, (uint64_t)(s->t1 - s->t0)) != 0)
            snprintf(cs->first_err_msg, sizeof cs->first_err_msg, "out of memory for latencies");
    }
    return false;
}

void bench_transfer_pipelined(bench_client *cs, const kl_message *msg)
{
    int k = cs->opt->in_flight;
    xfer_slot *slot = bench_slots_new(cs, k, sizeof *slot);
    bench_pipe pipe;
    if (slot == NULL)
        return;
    FILE *trace = NULL;
    if (cs->opt->trace_out != NULL && cs->opt->trace_every > 0 && (trace = fopen(cs->opt->trace_out, "a")) == NULL)
        fprintf(stderr, "keyload-bench: cannot open %s for the client trace; running without it\n", cs->opt->trace_out);
    bench_pipe_init(&pipe);
    int active = 0;
    for (int i = 0; i < k; i++) {
        slot[i].pipe = &pipe;
        slot[i].index = i;
        if (pipe_more() && slot_begin(cs, &slot[i], msg) == KL_OK)
            active++;
    }
    while (active > 0) {
        bench_pipe_wait(&pipe);
        /* The next steps started in one pass leave together, one write per leader
         * (kl_calls_hold), as any client that pipelines through the SDK should: nothing in
         * the pass waits for an answer. */
        kl_calls_hold();
        for (int i = 0; i < k; i++) {
            if (!bench_pipe_take(&pipe, &slot[i].answered, slot[i].call != NULL) ||
                slot_collect(cs, &slot[i], msg, trace))
                continue;
            active--;
            if (pipe_more() && slot_begin(cs, &slot[i], msg) == KL_OK)
                active++;
        }
        kl_calls_release();
    }
    for (int i = 0; i < k; i++)
        free(slot[i].token);
    bench_pipe_destroy(&pipe);
    if (trace != NULL && fclose(trace) != 0)
        fprintf(stderr, "keyload-bench: the client trace in %s may be incomplete\n", cs->opt->trace_out);
    free(slot);
}
