/* bench_transfer: --transfer, remote transfers end to end as a principal through the SDK:
 * Create -> Accept -> receipt read -> Complete per transfer, one at a time per client
 * thread (or --in-flight K at once, bench_transfer_pipe.c); one "transfer:" line. */
#include "tests/bench/bench_fixture.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

kl_code bench_xfer_receipt_check(const kl_receipt *r, int kind, kl_err *err)
{
    if (r->decoded->n_results != 1 || (int)r->decoded->results[0]->kind_case != kind)
        return kl_fail(err, KL_INTERNAL, "receipt", "the receipt does not carry the expected result");
    if (kind == KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_COMPLETED &&
        r->decoded->results[0]->transfer_completed->state != KEYLOAD__V1__TRANSFER_STATE__DELIVERED)
        return kl_fail(err, KL_INTERNAL, "state", "Complete did not answer Delivered");
    return KL_OK;
}

void bench_xfer_first_err(bench_client *cs, const char *step, kl_code rc, const kl_err *err)
{
    if (cs->first_err != KL_OK)
        return;
    cs->first_err = rc;
    snprintf(cs->first_err_msg, sizeof cs->first_err_msg, "%.10s: %.24s (%.64s) %.200s", step, kl_code_name(rc),
             err->detail, err->message);
}

/* Sends b (freed here); on KL_OK *out is the receipt, checked by bench_xfer_receipt_check. */
static kl_code xfer_send(kl_client *c, kl_batch *b, int kind, kl_receipt **out, kl_err *err)
{
    *out = NULL;
    kl_code rc = kl_client_batch(c, b, out, err);
    kl_batch_free(b);
    if (rc == KL_OK && (rc = bench_xfer_receipt_check(*out, kind, err)) != KL_OK) {
        kl_receipt_free(*out);
        *out = NULL;
    }
    return rc;
}

/* One whole transfer of msg from queue/lane to dest_queue/lane; `step` names the step
 * that failed. Tokens pass through unchanged; none is logged. */
static kl_code xfer_one(kl_client *c, const bench_options *o, const kl_message *msg, const char *lane,
                        const char **step, kl_err *err)
{
    char tid[KL_COMMAND_ID_TEXT_LEN + 1];
    kl_command_id_new(tid);
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    uint8_t *intent = NULL, *receipt = NULL;
    size_t intent_len = 0, receipt_len = 0;
    Keyload__V1__InspectQueueTransferReceiptAnswer *ra = NULL;
    *step = "create";
    kl_code rc = kl_batch_new(NULL, &b, err);
    if (rc == KL_OK && (rc = kl_batch_create_transfer(b, o->queue, lane, tid, o->dest_queue, lane, msg, err)) != KL_OK)
        kl_batch_free(b);
    if (rc == KL_OK && (rc = xfer_send(c, b, KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_CREATED, &r, err)) == KL_OK) {
        const ProtobufCBinaryData *t = &r->decoded->results[0]->transfer_created->intent_token;
        if ((intent = malloc(t->len ? t->len : 1)) == NULL)
            rc = kl_fail(err, KL_INTERNAL, "memory", "out of memory");
        else
            memcpy(intent, t->data, intent_len = t->len);
    }
    kl_receipt_free(r);
    r = NULL;
    if (rc == KL_OK) {
        *step = "accept";
        if ((rc = kl_batch_new(NULL, &b, err)) == KL_OK &&
            (rc = kl_batch_accept_transfer(b, o->dest_queue, lane, intent, intent_len, err)) != KL_OK)
            kl_batch_free(b);
        if (rc == KL_OK)
            rc = xfer_send(c, b, KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ACCEPTED, &r, err);
        kl_receipt_free(r);
        r = NULL;
    }
    if (rc == KL_OK) {
        *step = "receipt";
        if ((rc = kl_client_transfer_receipt(c, o->dest_queue, o->queue, lane, tid, &ra, err)) == KL_OK) {
            if ((receipt = malloc(ra->receipt_token.len ? ra->receipt_token.len : 1)) == NULL)
                rc = kl_fail(err, KL_INTERNAL, "memory", "out of memory");
            else
                memcpy(receipt, ra->receipt_token.data, receipt_len = ra->receipt_token.len);
        }
        kl_transfer_receipt_answer_free(ra);
    }
    if (rc == KL_OK) {
        *step = "complete";
        if ((rc = kl_batch_new(NULL, &b, err)) == KL_OK &&
            (rc = kl_batch_complete_transfer(b, o->queue, lane, tid, receipt, receipt_len, err)) != KL_OK)
            kl_batch_free(b);
        if (rc == KL_OK)
            rc = xfer_send(c, b, KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_COMPLETED, &r, err);
        kl_receipt_free(r);
    }
    free(intent);
    free(receipt);
    return rc;
}

/* On stderr (stdout carries only the "transfer:" line run.sh parses): p50 and p99 of each
 * step of the measured transfers, from its call's start to its answer, so a transfer's
 * latency shows which step it waits in. */
static void print_step_latencies(const bench_client *cs, int started)
{
    static const char *name[4] = {"create", "accept", "receipt", "complete"};
    fprintf(stderr, "transfer steps:");
    for (int j = 0; j < 4; j++) {
        size_t n;
        uint64_t *v = bench_lat_sorted(cs, started, j, &n);
        if (v == NULL) {
            fprintf(stderr, " (out of memory)");
            break;
        }
        fprintf(stderr, " %s_p50_us=%.1f %s_p99_us=%.1f", name[j], bench_pct(v, n, 50) / 1e3, name[j],
                bench_pct(v, n, 99) / 1e3);
        free(v);
    }
    fprintf(stderr, "\n");
}

static void *xfer_client_main(void *arg)
{
    bench_client *cs = arg;
    const bench_options *o = cs->opt;
    kl_err err;
    kl_err_clear(&err);
    kl_message *msg = NULL;
    const char *step = "open";
    char lane[64];
    long seq = 0;
    uint8_t *body = malloc((size_t)o->body_size + 1);
    kl_code rc = body == NULL ? kl_fail(&err, KL_INTERNAL, "memory", "out of memory") : KL_OK;
    for (int i = 0; body != NULL && i < o->body_size; i++)
        body[i] = (uint8_t)('a' + (i + cs->id) % 26);
    if (rc == KL_OK)
        rc = kl_message_new(body, (size_t)o->body_size, &msg, &err);
    if (rc == KL_OK)
        rc = kl_client_open_principal(o->cluster_file, o->database, o->timeout_ms, o->principal, o->key_file,
                                      &cs->sdk, &err);
    /* One transfer before the clock: Hello with both partitions' leaders, LocateQueue. The
     * lane names carry the process id so a second run on the same cluster starts afresh. */
    snprintf(lane, sizeof lane, "p%ldw%dl%ld", (long)getpid() % 100000, cs->id, seq / o->lane_every);
    if (rc == KL_OK && (rc = xfer_one(cs->sdk, o, msg, lane, &step, &err)) == KL_OK)
        seq++;
    if (rc != KL_OK) {
        bench_xfer_first_err(cs, step, rc, &err);
        cs->open_failed = 1;
    }
    atomic_fetch_add(&bench_primed, 1);
    if (rc != KL_OK)
        goto out;
    while (!atomic_load(&bench_go))
        bench_sleep_ns(100000);
    if (o->in_flight > 1) {
        bench_transfer_pipelined(cs, msg);
        goto out;
    }
    while (!atomic_load(&bench_stop)) {
        snprintf(lane, sizeof lane, "p%ldw%dl%ld", (long)getpid() % 100000, cs->id, seq / o->lane_every);
        seq++;
        kl_err_clear(&err);
        int64_t t0 = bench_now_ns();
        rc = xfer_one(cs->sdk, o, msg, lane, &step, &err);
        int64_t t1 = bench_now_ns();
        cs->total++;
        int64_t to = atomic_load(&bench_measure_to);
        bool measured = t0 >= atomic_load(&bench_measure_from) && (to == 0 || t1 <= to);
        if (rc != KL_OK) {
            bench_xfer_first_err(cs, step, rc, &err);
            if (measured)
                cs->errors++;
            if (rc == KL_UNAVAILABLE || rc == KL_RESOURCE_EXHAUSTED || rc == KL_NOT_LEADER)
                bench_sleep_ns(1000000);
            continue;
        }
        if (measured) {
            cs->ok++;
            if (bench_lat_push(&cs->lat, (uint64_t)(t1 - t0)) != 0) {
                snprintf(cs->first_err_msg, sizeof cs->first_err_msg, "out of memory for latencies");
                break;
            }
        }
    }
out:
    kl_message_free(msg);
    free(body);
    return NULL;
}

int bench_run_transfer(const bench_options *o)
{
    bench_client *cs = calloc((size_t)o->clients, sizeof *cs);
    if (cs == NULL)
        return 1;
    int started = 0;
    for (int i = 0; i < o->clients; i++) {
        cs[i].id = i;
        cs[i].opt = o;
        if (pthread_create(&cs[i].thread, NULL, xfer_client_main, &cs[i]) != 0) {
            fprintf(stderr, "keyload-bench: cannot start client thread %d\n", i);
            break;
        }
        started++;
    }
    /* Every client has done its first transfer (bounded by its timeouts) before the clock. */
    int64_t deadline = bench_now_ns() + (int64_t)(4 * o->timeout_ms + 5000) * 1000000LL;
    while (atomic_load(&bench_primed) < started && bench_now_ns() < deadline)
        bench_sleep_ns(10000000LL);
    int64_t from = bench_now_ns() + (int64_t)(o->warmup * 1e9);
    atomic_store(&bench_measure_from, from);
    atomic_store(&bench_go, 1);
    int64_t end = from + (int64_t)(o->seconds * 1e9);
    if (started == o->clients) {
        bench_sleep_ns(end - bench_now_ns());
        atomic_store(&bench_measure_to, end);
    }
    atomic_store(&bench_stop, 1);
    for (int i = 0; i < started; i++) {
        pthread_join(cs[i].thread, NULL);
        kl_client_close(cs[i].sdk);
    }
    double secs = (double)(end - from) / 1e9;
    uint64_t ok = 0, errors = 0;
    int open_failed = o->clients - started;
    for (int i = 0; i < started; i++) {
        ok += cs[i].ok;
        errors += cs[i].errors;
        open_failed += cs[i].open_failed;
    }
    size_t n;
    uint64_t *all = bench_lat_sorted(cs, started, -1, &n);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (double)all[i];
    if (o->lat_out != NULL && bench_lat_write(o->lat_out, all, n) != 0)
        open_failed = o->clients;
    printf("transfer: clients=%d in_flight=%d body=%d lane_every=%ld seconds=%.2f transfers=%llu transfers_per_s=%.1f "
           "p50_us=%.1f p99_us=%.1f mean_us=%.1f max_us=%.1f errors=%llu\n",
           o->clients, o->clients * o->in_flight, o->body_size, o->lane_every, secs, (unsigned long long)ok, ok / secs, bench_pct(all, n, 50) / 1e3,
           bench_pct(all, n, 99) / 1e3, n ? sum / (double)n / 1e3 : 0.0, n ? all[n - 1] / 1e3 : 0.0,
           (unsigned long long)(errors + (uint64_t)open_failed));
    fflush(stdout);
    if (o->in_flight > 1)
        print_step_latencies(cs, started);
    for (int i = 0; i < started; i++) {
        if (cs[i].first_err_msg[0] == '\0')
            continue;
        bool seen = false;
        for (int j = 0; j < i && !seen; j++)
            seen = strcmp(cs[j].first_err_msg, cs[i].first_err_msg) == 0;
        if (!seen)
            fprintf(stderr, "keyload-bench: transfer client %d: first error: %s\n", i, cs[i].first_err_msg);
    }
    for (int i = 0; i < o->clients; i++) {
        free(cs[i].lat.v);
        for (int j = 0; j < 4; j++)
            free(cs[i].step_lat[j].v);
    }
    free(all);
    free(cs);
    return open_failed == o->clients ? 1 : 0;
}
