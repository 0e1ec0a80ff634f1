/* bench_enqueue: the closed-loop enqueue benchmark (the default mode): N client threads,
 * one request at a time each, unsealed over kl_rpc_client or sealed through the SDK
 * (bench_sealed.c); one "bench:" line. */
#include "tests/bench/bench_fixture.h"
#include "common/guid.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A Batch answer's receipt must decode and carry one result per mutation. */
static kl_code check_receipt(const bench_options *o, const uint8_t *ans, size_t alen, kl_err *err)
{
    kl_code rc = KL_OK;
    Keyload__V1__BatchReceipt *r = keyload__v1__batch_receipt__unpack(NULL, alen, ans);
    if (r == NULL || r->n_results != (size_t)o->batch_size) {
        rc = kl_fail(err, KL_INTERNAL, "receipt", "receipt %s (%zu results for %d mutations)",
                     r ? "is short" : "does not decode", r ? r->n_results : 0, o->batch_size);
    }
    if (r != NULL)
        keyload__v1__batch_receipt__free_unpacked(r, NULL);
    return rc;
}

/* A request answered rc != KL_OK: noted, counted when measured, a refusing server not
 * spun on, and a NOT_LEADER hint followed (*c then the new leader's connection). */
static void client_failed(bench_client *cs, kl_code rc, kl_err *err, bool measured, const char *leader,
                          kl_rpc_client **c)
{
    if (cs->first_err == KL_OK) {
        cs->first_err = rc;
        snprintf(cs->first_err_msg, sizeof cs->first_err_msg, "%s (%s) %s", kl_code_name(rc),
                 err->detail, err->message);
    }
    if (measured)
        cs->errors++;
    if (rc == KL_UNAVAILABLE || rc == KL_RESOURCE_EXHAUSTED || rc == KL_NOT_LEADER)
        bench_sleep_ns(1000000); /* back off instead of spinning on a refusing server */
    if (rc == KL_NOT_LEADER && leader[0] != '\0' && strcmp(leader, cs->url) != 0) {
        /* Leadership moved (only with several members): follow the hint. */
        kl_rpc_client *nc;
        if (kl_rpc_client_open(leader, CONNECT_TIMEOUT_MS, 0, &nc, err) == KL_OK) {
            kl_rpc_client_close(*c);
            *c = nc;
            snprintf(cs->url, sizeof cs->url, "%s", leader);
        }
    }
}

static void *client_main(void *arg)
{
    bench_client *cs = arg;
    const bench_options *o = cs->opt;
    kl_err err;
    kl_err_clear(&err);
    kl_rpc_client *c;
    if (kl_rpc_client_open(cs->url, CONNECT_TIMEOUT_MS, 0, &c, &err) != KL_OK) {
        snprintf(cs->first_err_msg, sizeof cs->first_err_msg, "connect: %s", err.message);
        cs->first_err = err.code;
        cs->open_failed = 1;
        return NULL;
    }

    uint8_t *buf = NULL;
    size_t cap = 0;
    /* One request template: B enqueues of the same body; only the command id changes. */
    /* --random-body: each mutation its own body, new random bytes every batch, so that the
     * store cannot compress the state (a large-state benchmark measures its real size). */
    size_t n_bodies = o->random_body ? (size_t)o->batch_size : 1;
    uint8_t *body = malloc(n_bodies * (size_t)o->body_size + 1);
    Keyload__V1__Mutation *muts = calloc((size_t)o->batch_size, sizeof *muts);
    Keyload__V1__Mutation **mptr = calloc((size_t)o->batch_size, sizeof *mptr);
    Keyload__V1__EnqueueMessage *msgs = calloc(n_bodies, sizeof *msgs);
    Keyload__V1__Enqueue *enqs = calloc(n_bodies, sizeof *enqs);
    if (body == NULL || muts == NULL || mptr == NULL || msgs == NULL || enqs == NULL) {
        snprintf(cs->first_err_msg, sizeof cs->first_err_msg, "out of memory");
        cs->open_failed = 1;
        goto out;
    }
    for (int i = 0; i < o->body_size; i++)
        body[i] = (uint8_t)('a' + (i + cs->id) % 26);
    Keyload__V1__QueueLaneRef lane;
    bench_lane_ref(&lane, o->queue);
    char own_lane[16];
    snprintf(own_lane, sizeof own_lane, "c%d", cs->id);
    if (o->cycle)
        lane.lane = own_lane;
    for (size_t i = 0; i < n_bodies; i++) {
        keyload__v1__enqueue_message__init(&msgs[i]);
        msgs[i].body.data = body + i * (size_t)o->body_size;
        msgs[i].body.len = (size_t)o->body_size;
        keyload__v1__enqueue__init(&enqs[i]);
        enqs[i].lane = &lane;
        enqs[i].message = &msgs[i];
    }
    for (int i = 0; i < o->batch_size; i++) {
        keyload__v1__mutation__init(&muts[i]);
        muts[i].kind_case = KEYLOAD__V1__MUTATION__KIND_ENQUEUE;
        muts[i].enqueue = &enqs[o->random_body ? (size_t)i : 0];
        mptr[i] = &muts[i];
    }
    uint8_t id[KL_GUID_LEN];
    Keyload__V1__BatchRequest b = KEYLOAD__V1__BATCH_REQUEST__INIT;
    b.command_id.data = id;
    b.command_id.len = sizeof id;
    b.mutations = mptr;
    b.n_mutations = (size_t)o->batch_size;
    const char *method = BATCH_METHOD;
    size_t stats_len = 0;
    if (o->read) {
        Keyload__V1__QueueStatsRequest sr = KEYLOAD__V1__QUEUE_STATS_REQUEST__INIT;
        sr.queue = &lane;
        stats_len = keyload__v1__queue_stats_request__get_packed_size(&sr);
        buf = malloc(stats_len ? stats_len : 1);
        if (buf == NULL) {
            snprintf(cs->first_err_msg, sizeof cs->first_err_msg, "out of memory");
            cs->open_failed = 1;
            goto out;
        }
        keyload__v1__queue_stats_request__pack(&sr, buf);
        method = STATS_METHOD;
    }

    while (!atomic_load(&bench_go))
        bench_sleep_ns(100000);
    while (!atomic_load(&bench_stop)) {
        if (o->ops > 0 && atomic_fetch_sub(&bench_ops_left, 1) <= 0)
            break;
        size_t len = stats_len;
        if (!o->read) {
            kl_guid_random(id);
            if (o->random_body)
                randombytes_buf(body, n_bodies * (size_t)o->body_size);
            len = bench_pack_batch(&b, &buf, &cap);
        }
        uint8_t *ans = NULL;
        size_t alen = 0;
        kl_err_clear(&err);
        char leader[URL_MAX] = "";
        int64_t t0 = bench_now_ns();
        kl_code rc = kl_rpc_invoke(c, method, buf, len, o->timeout_ms, &ans, &alen, leader,
                                   sizeof leader, &err);
        int64_t t1 = bench_now_ns();
        cs->total++;
        if (rc == KL_OK && !o->read)
            rc = check_receipt(o, ans, alen, &err);
        free(ans);
        if (rc == KL_OK && o->cycle)
            rc = bench_cycle_rest(c, o, o->queue, own_lane, &err);
        int64_t to = atomic_load(&bench_measure_to);
        bool measured = t0 >= atomic_load(&bench_measure_from) && (to == 0 || t1 <= to);
        if (rc != KL_OK) {
            client_failed(cs, rc, &err, measured, leader, &c);
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
    free(buf);
    free(mptr);
    free(muts);
    free(enqs);
    free(msgs);
    free(body);
    kl_rpc_client_close(c);
    return NULL;
}

/* --cpu-pids: user+sys of every listed process in ns (/proc/PID/stat, clock ticks); -1 when
 * one of them cannot be read (it has ended: the figure would be wrong, so none is given). */
static double cpu_pids_ns(const bench_options *o)
{
    double sum = 0;
    for (int i = 0; i < o->n_cpu_pids; i++) {
        double st, sched;
        if (bench_proc_cpu(o->cpu_pids[i], &st, &sched) != 0)
            return -1;
        sum += st;
    }
    return sum;
}

/* This process's user+sys in ns (the clients' share of a cell's CPU), -1 when unreadable. */
static double self_cpu_ns(void)
{
    double st, sched;
    return bench_proc_cpu(getpid(), &st, &sched) == 0 ? st : -1;
}

/* One run of the enqueue benchmark, from the leader's choice to the printed line. */
typedef struct enqueue_run {
    bool sealed;
    bench_members ms;  /* sealed: kept open for the leader's cost counters */
    int li;            /* the leader's index in ms, -1 with a single unsealed member */
    char target[URL_MAX];
    bench_client *cs;
    bench_cost_snap before, after;
    int64_t from, end; /* the measured window (monotonic ns) */
    double cpu0, cpu1; /* --cpu-pids at its start and end */
    double self0, self1; /* this process (the clients) at the same two moments */
} enqueue_run;

/* Several members: wait for a serving leader and start there. 0, or 1 when none leads. */
static int enqueue_target(const bench_options *o, enqueue_run *r)
{
    snprintf(r->target, sizeof r->target, "%s", o->url);
    memset(&r->ms, 0, sizeof r->ms);
    r->li = -1;
    if (o->n_urls > 1 || r->sealed) {
        bench_ms_init(&r->ms, o);
        Keyload__V1__MemberStatusAnswer *a;
        r->li = bench_ms_wait_leader(&r->ms, &a);
        if (r->li < 0)
            return 1;
        char node[32];
        fprintf(stderr, "keyload-bench: leader %s at %s (term %llu)\n", bench_ms_node(&r->ms, r->li, node, sizeof node),
                r->ms.url[r->li], (unsigned long long)a->term);
        snprintf(r->target, sizeof r->target, "%s", r->ms.url[r->li]);
        keyload__v1__member_status_answer__free_unpacked(a, NULL);
        if (!r->sealed)
            bench_ms_close(&r->ms);
    }
    return 0;
}

/* Starts the client threads (waiting at bench_go); 0, or 1 when one cannot be started
 * (those started are stopped and joined, the member set closed). */
static int enqueue_start(const bench_options *o, enqueue_run *r)
{
    bench_client *cs = r->cs = calloc((size_t)o->clients, sizeof *cs);
    if (cs == NULL) {
        if (r->sealed)
            bench_ms_close(&r->ms);
        return 1;
    }
    atomic_store(&bench_ops_left, o->ops);
    for (int i = 0; i < o->clients; i++) {
        cs[i].id = i;
        cs[i].opt = o;
        snprintf(cs[i].url, sizeof cs[i].url, "%s", r->target);
        if (pthread_create(&cs[i].thread, NULL, r->sealed ? bench_sealed_client_main : client_main, &cs[i]) != 0) {
            fprintf(stderr, "keyload-bench: cannot start client thread %d\n", i);
            atomic_store(&bench_stop, 1);
            atomic_store(&bench_go, 1);
            for (int j = 0; j < i; j++) {
                pthread_join(cs[j].thread, NULL);
                kl_client_close(cs[j].sdk);
            }
            free(cs);
            r->cs = NULL;
            if (r->sealed)
                bench_ms_close(&r->ms);
            return 1;
        }
    }
    return 0;
}

/* Opens the gate, measures (for o->seconds after the warm-up, or until o->ops requests)
 * and joins the clients; sealed, the leader's cost counters around it. */
static void enqueue_measure(const bench_options *o, enqueue_run *r)
{
    bench_client *cs = r->cs;
    /* Give every thread time to connect before the clock starts. */
    bench_sleep_ns(200000000LL);
    if (r->sealed) {
        /* Every client has shaken hands and sent its first batch (bounded by its timeout). */
        int64_t deadline = bench_now_ns() + (int64_t)(o->timeout_ms + 5000) * 1000000LL;
        while (atomic_load(&bench_primed) < o->clients && bench_now_ns() < deadline)
            bench_sleep_ns(10000000LL);
        bench_cost_read(&r->ms, r->li, &r->before);
    }
    int64_t start = bench_now_ns();
    int64_t from = r->from = o->ops > 0 ? start : start + (int64_t)(o->warmup * 1e9);
    atomic_store(&bench_measure_from, from);
    atomic_store(&bench_go, 1);
    int64_t end;
    r->cpu0 = r->cpu1 = r->self0 = r->self1 = -1;
    if (o->ops > 0) {
        for (int i = 0; i < o->clients; i++)
            pthread_join(cs[i].thread, NULL);
        end = bench_now_ns();
    } else {
        end = from + (int64_t)(o->seconds * 1e9);
        /* The members' CPU over exactly the measured window (warm-up excluded). */
        if (o->n_cpu_pids > 0) {
            bench_sleep_ns(from - bench_now_ns());
            r->cpu0 = cpu_pids_ns(o);
            r->self0 = self_cpu_ns();
        }
        bench_sleep_ns(end - bench_now_ns());
        if (o->n_cpu_pids > 0) {
            r->cpu1 = cpu_pids_ns(o);
            r->self1 = self_cpu_ns();
        }
        atomic_store(&bench_measure_to, end);
        atomic_store(&bench_stop, 1);
        for (int i = 0; i < o->clients; i++)
            pthread_join(cs[i].thread, NULL);
    }
    r->end = end;
    if (r->sealed) {
        bench_cost_read(&r->ms, r->li, &r->after);
        bench_ms_close(&r->ms);
        for (int i = 0; i < o->clients; i++)
            kl_client_close(cs[i].sdk);
    }
}

/* The "bench:" line and each distinct first error; frees the clients. The exit code. */
static int enqueue_report(const bench_options *o, enqueue_run *r)
{
    bench_client *cs = r->cs;
    bool sealed = r->sealed;
    double cpu0 = r->cpu0, cpu1 = r->cpu1;
    double secs = (double)(r->end - r->from) / 1e9;

    uint64_t ok = 0, errors = 0, total = 0;
    int open_failed = 0;
    for (int i = 0; i < o->clients; i++) {
        ok += cs[i].ok;
        errors += cs[i].errors;
        total += cs[i].total;
        open_failed += cs[i].open_failed;
    }
    size_t n;
    uint64_t *all = bench_lat_sorted(cs, o->clients, -1, &n);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (double)all[i];
    if (o->lat_out != NULL && bench_lat_write(o->lat_out, all, n) != 0)
        open_failed = o->clients;
    printf("bench: %sclients=%d batch=%d body=%d seconds=%.2f batches=%llu batches_per_s=%.1f "
           "msgs_per_s=%.1f p50_us=%.1f p99_us=%.1f mean_us=%.1f max_us=%.1f errors=%llu",
           o->read ? "read=1 " : sealed ? "sealed=1 " : "", o->clients, o->batch_size, o->body_size, secs, (unsigned long long)ok, ok / secs,
           ok * (double)(o->read ? 0 : o->batch_size) / secs, bench_pct(all, n, 50) / 1e3, bench_pct(all, n, 99) / 1e3,
           n ? sum / (double)n / 1e3 : 0.0, n ? all[n - 1] / 1e3 : 0.0,
           (unsigned long long)(errors + (uint64_t)open_failed));
    if (sealed && o->in_flight > 1)
        printf(" in_flight=%d", o->in_flight);
    if (sealed)
        bench_cost_print(&r->before, &r->after, bench_pct(all, n, 50) / 1e3);
    if (o->n_cpu_pids > 0) {
        uint64_t msgs = ok * (uint64_t)(o->read ? 1 : o->batch_size);
        if (cpu0 >= 0 && cpu1 >= 0 && msgs > 0)
            printf(" cpu_us_per_msg=%.1f cpu_pids=%d", (cpu1 - cpu0) / 1e3 / (double)msgs, o->n_cpu_pids);
        if (r->self0 >= 0 && r->self1 >= 0 && msgs > 0)
            printf(" client_cpu_us_per_msg=%.1f", (r->self1 - r->self0) / 1e3 / (double)msgs);
        else
            printf(" cpu_us_per_msg=n/a cpu_pids=%d", o->n_cpu_pids);
    }
    printf("\n");
    fflush(stdout);
    /* Report each distinct first error once, so a broken run says why. */
    for (int i = 0; i < o->clients; i++) {
        if (cs[i].first_err_msg[0] == '\0')
            continue;
        bool seen = false;
        for (int j = 0; j < i && !seen; j++)
            seen = strcmp(cs[j].first_err_msg, cs[i].first_err_msg) == 0;
        if (!seen)
            fprintf(stderr, "keyload-bench: client %d: first error: %s\n", i, cs[i].first_err_msg);
    }
    (void)total;
    for (int i = 0; i < o->clients; i++)
        free(cs[i].lat.v);
    free(all);
    free(cs);
    return open_failed == o->clients ? 1 : 0;
}

int bench_run_enqueue(const bench_options *o)
{
    enqueue_run r = {.sealed = o->principal != NULL};
    if (enqueue_target(o, &r) != 0)
        return 1;
    /* Sealed: the queue and the grant are the caller's (an unsealed request is refused). */
    if (!r.sealed && bench_setup_queue(o, r.target) != 0)
        return 1;
    if (enqueue_start(o, &r) != 0)
        return 1;
    enqueue_measure(o, &r);
    return enqueue_report(o, &r);
}
