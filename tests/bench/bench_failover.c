/* bench_failover: --failover, one measurement of kill -9 of the leader to the first write
 * acknowledged by another member, with a writer that retries each message under its
 * command id; one "failover:" line. */
#include "tests/bench/bench_fixture.h"
#include "common/guid.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* True when pid is a running keyloadd started with "--node node": pids are recycled quickly
 * on a busy machine, so a pid file alone is not enough to kill -9 what it names. */
static bool is_member_process(long pid, const char *node)
{
    char path[64], buf[8192];
    snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    bool daemon = false, named = false;
    const char *prev = "";
    for (size_t i = 0; i < n; i += strlen(buf + i) + 1) {
        const char *arg = buf + i;
        if (i == 0) {
            const char *base = strrchr(arg, '/');
            daemon = strcmp(base ? base + 1 : arg, "keyloadd") == 0;
        }
        if (strcmp(prev, "--node") == 0 && strcmp(arg, node) == 0)
            named = true;
        prev = arg;
    }
    return daemon && named;
}

typedef struct fo_writer {
    pthread_t thread;
    const bench_options *o;
    bench_members ms;              /* the writer's own connections */
    int start;                  /* member index to try first */
    atomic_int stop;
    atomic_ullong acks;
    _Atomic int64_t first_ack_ns;   /* monotonic; first ack since any */
    _Atomic int64_t kill_ns;        /* 0 until the leader is killed */
    atomic_int killed;              /* index of the killed member */
    _Atomic int64_t after_ack_ns;   /* first ack after kill_ns from another member */
    atomic_int after_ack_member;
    /* Counted after the kill, by the writer only (read after join). */
    uint64_t no_answer, unknown, not_leader, unavailable, unreachable, other;
    char other_msg[KL_ERR_MESSAGE_MAX + KL_ERR_DETAIL_MAX + 8];
} fo_writer;

static void *fo_writer_main(void *arg)
{
    fo_writer *w = arg;
    const bench_options *o = w->o;
    uint8_t body[100];
    memset(body, 'f', sizeof body);
    Keyload__V1__QueueLaneRef lane;
    bench_lane_ref(&lane, o->queue);
    Keyload__V1__EnqueueMessage msg = KEYLOAD__V1__ENQUEUE_MESSAGE__INIT;
    msg.body.data = body;
    msg.body.len = sizeof body;
    Keyload__V1__Enqueue enq = KEYLOAD__V1__ENQUEUE__INIT;
    enq.lane = &lane;
    enq.message = &msg;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_ENQUEUE;
    m.enqueue = &enq;
    Keyload__V1__Mutation *mp[] = {&m};
    uint8_t id[KL_GUID_LEN];
    Keyload__V1__BatchRequest b = KEYLOAD__V1__BATCH_REQUEST__INIT;
    b.command_id.data = id;
    b.command_id.len = sizeof id;
    b.mutations = mp;
    b.n_mutations = 1;
    uint8_t *buf = NULL;
    size_t cap = 0;
    kl_guid_random(id);
    size_t len = bench_pack_batch(&b, &buf, &cap);
    int target = w->start, fails = 0, refused = 0;
    while (!atomic_load(&w->stop) && len > 0) {
        kl_err err;
        kl_err_clear(&err);
        char leader[URL_MAX] = "";
        uint8_t *ans = NULL;
        size_t alen = 0;
        kl_code rc;
        bool reached = true;
        kl_rpc_client *c = bench_ms_conn(&w->ms, target, 200, &err);
        if (c == NULL) {
            rc = err.code;
            reached = false;
        } else {
            rc = kl_rpc_invoke(c, BATCH_METHOD, buf, len, o->attempt_ms, &ans, &alen, leader,
                               sizeof leader, &err);
        }
        int64_t t = bench_now_ns();
        free(ans);
        int64_t k = atomic_load(&w->kill_ns);
        bool after = k != 0 && t > k;
        if (rc == KL_OK) {
            atomic_fetch_add(&w->acks, 1);
            int64_t zero = 0;
            atomic_compare_exchange_strong(&w->first_ack_ns, &zero, t);
            if (after && target != atomic_load(&w->killed)) {
                zero = 0;
                if (atomic_compare_exchange_strong(&w->after_ack_ns, &zero, t))
                    atomic_store(&w->after_ack_member, target);
            }
            kl_guid_random(id); /* the next message; a retried one keeps its id */
            len = bench_pack_batch(&b, &buf, &cap);
            fails = refused = 0;
            continue;
        }
        fails++;
        int next = (target + 1) % w->ms.n;
        switch (rc) {
        case KL_NOT_LEADER: {
            w->not_leader += after;
            int li = leader[0] ? bench_ms_index(&w->ms, leader) : -1;
            target = li >= 0 && li != target ? li : next;
            break;
        }
        case KL_UNAVAILABLE:
            if (!reached || strcmp(err.detail, "no_connection") == 0 || strcmp(err.detail, "send") == 0) {
                w->unreachable += after;
                bench_ms_drop(&w->ms, target);
                target = next;
            } else {
                /* Refused before proposing (e.g. a new leader not serving yet): stay a while. */
                w->unavailable += after;
                if (++refused > 20) {
                    refused = 0;
                    target = next;
                }
                bench_sleep_ns(5000000LL);
            }
            break;
        case KL_DEADLINE_EXCEEDED:
        case KL_UNKNOWN_WRITE_OUTCOME:
            /* Outcome unknown: resend the same bytes (same command id) elsewhere. */
            if (rc == KL_DEADLINE_EXCEEDED) {
                w->no_answer += after;
                bench_ms_drop(&w->ms, target);
            } else {
                w->unknown += after;
            }
            target = next;
            break;
        default:
            w->other++;
            if (w->other_msg[0] == '\0')
                snprintf(w->other_msg, sizeof w->other_msg, "%s (%s) %s", kl_code_name(rc), err.detail,
                         err.message);
            kl_guid_random(id);
            len = bench_pack_batch(&b, &buf, &cap);
            break;
        }
        if (fails % w->ms.n == 0)
            bench_sleep_ns(10000000LL); /* a whole round without an ack: do not spin */
    }
    free(buf);
    bench_ms_close(&w->ms);
    return NULL;
}

/* One failover measurement: the members, the writer, and what the kill found. */
typedef struct fo_run {
    bench_members ms;
    fo_writer *w;
    int li;                 /* the leader killed */
    uint64_t term;          /* its term */
    char node[32];          /* its name, pPmM */
    long pid;
    int64_t t_kill, t_elected, t_ack;
    int elected;            /* the first survivor seen leading, -1 */
    unsigned long long acks_before;
} fo_run;

/* Waits for a leader, learns every member's id, sets up the queue and starts the writer
 * there. 0, or 1 with everything released. */
static int failover_start(const bench_options *o, fo_run *r)
{
    bench_members *ms = &r->ms;
    bench_ms_init(ms, o);
    Keyload__V1__MemberStatusAnswer *a = NULL;
    int li = bench_ms_wait_leader(ms, &a);
    if (li < 0)
        return 1;
    keyload__v1__member_status_answer__free_unpacked(a, NULL);
    a = NULL;
    for (int i = 0; i < ms->n; i++) { /* learn every member's id, for node names */
        kl_err err;
        Keyload__V1__MemberStatusAnswer *s;
        if (bench_ms_status(ms, i, 1000, &s, &err) == KL_OK)
            keyload__v1__member_status_answer__free_unpacked(s, NULL);
    }
    if (bench_setup_queue(o, ms->url[li]) != 0) {
        bench_ms_close(ms);
        return 1;
    }

    fo_writer *w = calloc(1, sizeof *w);
    if (w == NULL) {
        bench_ms_close(ms);
        return 1;
    }
    w->o = o;
    bench_ms_init(&w->ms, o);
    w->start = li;
    atomic_store(&w->killed, -1);
    atomic_store(&w->after_ack_member, -1);
    if (pthread_create(&w->thread, NULL, fo_writer_main, w) != 0) {
        fprintf(stderr, "keyload-bench: cannot start the writer thread\n");
        free(w);
        bench_ms_close(ms);
        return 1;
    }
    r->w = w;
    return 0;
}

/* Steady state first: the writer has been acknowledged for a second. 0, or -1 after 30 s. */
static int failover_steady(fo_writer *w)
{
    int64_t deadline = bench_now_ns() + 30 * 1000000000LL;
    for (;;) {
        int64_t f = atomic_load(&w->first_ack_ns);
        if (f != 0 && bench_now_ns() - f >= 1000000000LL)
            break;
        if (bench_now_ns() > deadline) {
            fprintf(stderr, "keyload-bench: the writer got no ack within 30 s\n");
            return -1;
        }
        bench_sleep_ns(20000000LL);
    }
    return 0;
}

/* Finds the serving leader and kill -9s it (its pid from the pid directory, checked to be
 * that member's keyloadd). 0, or -1 when nothing was killed. */
static int failover_kill(const bench_options *o, fo_run *r)
{
    fo_writer *w = r->w;
    Keyload__V1__MemberStatusAnswer *a = NULL;
    int li = r->li = bench_ms_find_leader(&r->ms, -1, bench_now_ns() + 10 * 1000000000LL, &a);
    if (li < 0) {
        fprintf(stderr, "keyload-bench: no serving leader before the kill\n");
        return -1;
    }
    r->term = a->term;
    keyload__v1__member_status_answer__free_unpacked(a, NULL);
    a = NULL;
    char *node = r->node;
    bench_ms_node(&r->ms, li, node, sizeof r->node);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.pid", o->pid_dir, node);
    FILE *pf = fopen(path, "r");
    long pid = 0;
    if (pf == NULL || fscanf(pf, "%ld", &pid) != 1 || pid <= 1) {
        fprintf(stderr, "keyload-bench: cannot read the leader's pid from %s\n", path);
        if (pf != NULL)
            fclose(pf);
        return -1;
    }
    fclose(pf);
    r->pid = pid;
    if (!is_member_process(pid, node)) {
        fprintf(stderr, "keyload-bench: pid %ld (from %s) is not keyloadd --node %s; not killing it\n",
                pid, path, node);
        return -1;
    }
    r->acks_before = atomic_load(&w->acks);
    atomic_store(&w->killed, li);
    int64_t t_kill = r->t_kill = bench_now_ns();
    atomic_store(&w->kill_ns, t_kill);
    if (kill((pid_t)pid, SIGKILL) != 0) {
        fprintf(stderr, "keyload-bench: kill -9 %ld (%s): %s\n", pid, node, strerror(errno));
        return -1;
    }
    bench_ms_drop(&r->ms, li);
    return 0;
}

/* Until the writer is acknowledged by another member: note when a survivor first
 * reports itself a serving leader (election plus its own-term no-op commit). */
static void failover_wait(fo_run *r)
{
    fo_writer *w = r->w;
    int64_t t_elected = 0, t_ack = 0;
    int elected = -1;
    int64_t deadline = r->t_kill + LEADER_WAIT_NS;
    while ((t_ack = atomic_load(&w->after_ack_ns)) == 0 && bench_now_ns() < deadline) {
        if (t_elected == 0) {
            for (int i = 0; i < r->ms.n && t_elected == 0; i++) {
                if (i == r->li)
                    continue;
                kl_err err;
                kl_err_clear(&err);
                Keyload__V1__MemberStatusAnswer *s;
                if (bench_ms_status(&r->ms, i, 200, &s, &err) != KL_OK)
                    continue;
                if (bench_is_serving_leader(s) && s->term > r->term) {
                    t_elected = bench_now_ns();
                    elected = i;
                }
                keyload__v1__member_status_answer__free_unpacked(s, NULL);
            }
        }
        bench_sleep_ns(10000000LL);
    }
    r->t_elected = t_elected;
    r->t_ack = t_ack;
    r->elected = elected;
}

/* The "failover:" line (the writer has been joined); the exit code. */
static int failover_report(const bench_options *o, fo_run *r)
{
    fo_writer *w = r->w;
    int rv = 1;
    char node2[32];
    const char *node = r->node;
    long pid = r->pid;
    uint64_t term = r->term;
    int64_t t_kill = r->t_kill, t_elected = r->t_elected, t_ack = r->t_ack;
    unsigned long long acks_before = r->acks_before;
    int nl = atomic_load(&w->after_ack_member);
    if (t_ack == 0) {
        printf("failover: run=%d killed=%s pid=%ld term=%llu failover_ms=timeout elected_ms=%s "
               "acks_before=%llu\n", o->run, node, pid, (unsigned long long)term,
               t_elected ? "seen" : "none", acks_before);
    } else {
        char el[32];
        if (t_elected != 0 && t_elected <= t_ack)
            snprintf(el, sizeof el, "%.1f", (t_elected - t_kill) / 1e6);
        else
            snprintf(el, sizeof el, "n/a"); /* the ack came first: the poll missed the moment */
        printf("failover: run=%d killed=%s pid=%ld term=%llu failover_ms=%.1f elected_ms=%s "
               "new_leader=%s acks_before=%llu no_answer=%llu unknown_outcome=%llu not_leader=%llu "
               "unavailable=%llu unreachable=%llu\n",
               o->run, node, pid, (unsigned long long)term, (t_ack - t_kill) / 1e6, el,
               bench_ms_node(&r->ms, nl >= 0 ? nl : r->elected, node2, sizeof node2), acks_before,
               (unsigned long long)w->no_answer, (unsigned long long)w->unknown,
               (unsigned long long)w->not_leader, (unsigned long long)w->unavailable,
               (unsigned long long)w->unreachable);
        rv = 0;
    }
    fflush(stdout);
    if (w->other_msg[0] != '\0')
        fprintf(stderr, "keyload-bench: writer: %llu unexpected errors, first: %s\n",
                (unsigned long long)w->other, w->other_msg);
    return rv;
}

int bench_run_failover(const bench_options *o)
{
    fo_run r = {.li = -1, .elected = -1};
    if (failover_start(o, &r) != 0)
        return 1;
    int rv = 1;
    if (failover_steady(r.w) == 0 && failover_kill(o, &r) == 0) {
        failover_wait(&r);
        atomic_store(&r.w->stop, 1);
        pthread_join(r.w->thread, NULL);
        rv = failover_report(o, &r);
    } else {
        atomic_store(&r.w->stop, 1);
        pthread_join(r.w->thread, NULL);
    }
    free(r.w);
    bench_ms_close(&r.ms);
    return rv;
}
