/* bench_serve: --serve-probe, when a restarted partition (or member) serves again.
 *
 * The first URL is the member being watched (the one just started); the rest are the other
 * members of its partition. Every 20 ms it asks each for MemberStatus and notes, in ms since
 * --since-ms (a CLOCK_REALTIME epoch in ms taken by the caller just before it started the
 * process; the probe's own start when absent), the first time that
 *   answer:    the watched member answers MemberStatus (its store is open, its port serves);
 *   caught_up: the watched member has applied a serving leader's commit index;
 *   write:     one enqueue of one message (body --body-size bytes into --queue, which must
 *              exist), sent to the serving leader and retried under one command id until
 *              acknowledged, is acknowledged;
 *   read:      a QueueStats of that queue is answered by the serving leader.
 * Prints one "serve:" line once all four happened; exit 1 when they did not within 60 s. */
#include "tests/bench/bench_fixture.h"
#include "common/guid.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t epoch_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct probe_req {
    uint8_t *batch, *stats;
    size_t batch_len, stats_len;
} probe_req;

/* The one enqueue (its command id fixed, so a retry is the same request) and the read. */
static int probe_req_build(const bench_options *o, probe_req *r)
{
    uint8_t id[KL_GUID_LEN];
    kl_guid_random(id);
    uint8_t *body = malloc((size_t)o->body_size + 1);
    if (body == NULL)
        return -1;
    memset(body, 'p', (size_t)o->body_size);
    Keyload__V1__QueueLaneRef lane;
    bench_lane_ref(&lane, o->queue);
    Keyload__V1__EnqueueMessage msg = KEYLOAD__V1__ENQUEUE_MESSAGE__INIT;
    msg.body.data = body;
    msg.body.len = (size_t)o->body_size;
    Keyload__V1__Enqueue enq = KEYLOAD__V1__ENQUEUE__INIT;
    enq.lane = &lane;
    enq.message = &msg;
    Keyload__V1__Mutation mut = KEYLOAD__V1__MUTATION__INIT;
    mut.kind_case = KEYLOAD__V1__MUTATION__KIND_ENQUEUE;
    mut.enqueue = &enq;
    Keyload__V1__Mutation *mp = &mut;
    Keyload__V1__BatchRequest b = KEYLOAD__V1__BATCH_REQUEST__INIT;
    b.command_id.data = id;
    b.command_id.len = sizeof id;
    b.mutations = &mp;
    b.n_mutations = 1;
    size_t cap = 0;
    r->batch = NULL;
    r->batch_len = bench_pack_batch(&b, &r->batch, &cap);
    free(body);
    Keyload__V1__QueueStatsRequest sr = KEYLOAD__V1__QUEUE_STATS_REQUEST__INIT;
    sr.queue = &lane;
    r->stats_len = keyload__v1__queue_stats_request__get_packed_size(&sr);
    r->stats = malloc(r->stats_len ? r->stats_len : 1);
    if (r->batch_len == 0 || r->stats == NULL) {
        free(r->batch);
        free(r->stats);
        return -1;
    }
    keyload__v1__queue_stats_request__pack(&sr, r->stats);
    return 0;
}

/* One call to member i; KL_OK when it answered OK. */
static kl_code probe_call(bench_members *ms, int i, const char *method, const uint8_t *req, size_t len,
                          int timeout_ms, kl_err *err)
{
    kl_rpc_client *c = bench_ms_conn(ms, i, 1000, err);
    if (c == NULL)
        return err->code;
    uint8_t *ans = NULL;
    size_t alen = 0;
    char leader[URL_MAX] = "";
    kl_code rc = kl_rpc_invoke(c, method, req, len, timeout_ms, &ans, &alen, leader, sizeof leader, err);
    free(ans);
    if (rc == KL_UNAVAILABLE || rc == KL_DEADLINE_EXCEEDED)
        bench_ms_drop(ms, i); /* redial: the member may have been restarted */
    return rc;
}

int bench_run_serve_probe(const bench_options *o)
{
    int64_t since = o->since_ms > 0 ? o->since_ms : epoch_ms();
    probe_req req;
    if (probe_req_build(o, &req) != 0) {
        fprintf(stderr, "keyload-bench: out of memory\n");
        return 1;
    }
    bench_members ms;
    bench_ms_init(&ms, o);
    int64_t answer = -1, caught = -1, write = -1, read = -1, deadline = bench_now_ns() + LEADER_WAIT_NS;
    char why[KL_ERR_MESSAGE_MAX + 64] = "no answer yet";
    uint64_t commit = 0;
    while (answer < 0 || caught < 0 || write < 0 || read < 0) {
        if (bench_now_ns() > deadline) {
            fprintf(stderr, "keyload-bench: not serving within 60 s (answer=%lld caught_up=%lld write=%lld read=%lld): %s\n",
                    (long long)answer, (long long)caught, (long long)write, (long long)read, why);
            bench_ms_close(&ms);
            free(req.batch);
            free(req.stats);
            return 1;
        }
        Keyload__V1__MemberStatusAnswer *st[MAX_URLS] = {0};
        int li = -1;
        for (int i = 0; i < ms.n; i++) {
            kl_err err;
            kl_err_clear(&err);
            if (bench_ms_status(&ms, i, 500, &st[i], &err) != KL_OK) {
                st[i] = NULL;
                snprintf(why, sizeof why, "%s: %s", ms.url[i], err.message);
                bench_ms_drop(&ms, i);
                continue;
            }
            if (i == 0 && answer < 0)
                answer = epoch_ms() - since;
            if (bench_is_serving_leader(st[i]))
                li = i;
        }
        if (li >= 0) {
            commit = st[li]->commit_index;
            if (caught < 0 && st[0] != NULL && st[0]->applied_index >= commit)
                caught = epoch_ms() - since;
            kl_err err;
            kl_err_clear(&err);
            if (write < 0) {
                kl_code rc = probe_call(&ms, li, BATCH_METHOD, req.batch, req.batch_len, o->timeout_ms, &err);
                if (rc == KL_OK)
                    write = epoch_ms() - since;
                else
                    snprintf(why, sizeof why, "write: %s %s", kl_code_name(rc), err.message);
            }
            kl_err_clear(&err);
            if (read < 0) {
                kl_code rc = probe_call(&ms, li, STATS_METHOD, req.stats, req.stats_len, o->timeout_ms, &err);
                if (rc == KL_OK)
                    read = epoch_ms() - since;
                else
                    snprintf(why, sizeof why, "read: %s %s", kl_code_name(rc), err.message);
            }
        } else {
            snprintf(why, sizeof why, "no serving leader");
        }
        for (int i = 0; i < ms.n; i++)
            if (st[i] != NULL)
                keyload__v1__member_status_answer__free_unpacked(st[i], NULL);
        if (answer < 0 || caught < 0 || write < 0 || read < 0)
            bench_sleep_ns(20000000LL);
    }
    printf("serve: answer_ms=%lld caught_up_ms=%lld write_ms=%lld read_ms=%lld commit_index=%llu\n",
           (long long)answer, (long long)caught, (long long)write, (long long)read, (unsigned long long)commit);
    bench_ms_close(&ms);
    free(req.batch);
    free(req.stats);
    return 0;
}
