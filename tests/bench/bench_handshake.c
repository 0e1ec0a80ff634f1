/* bench_handshake: --handshake, the daemon's CPU per keyload.v1.Hello against one member,
 * from /proc and from its own counters; one "handshake:" line. */
#include "tests/bench/bench_fixture.h"
#include "common/keys.h"
#include "common/session.h"
#include "keyload/v1/session.pb-c.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}


typedef struct hs_ctx {
    kl_rpc_client *c;
    const char *principal;
    uint8_t sk[KL_SESSION_SIGN_SECRET_LEN];
    const char *cluster;
    int32_t partition;
    uint64_t member;
    const uint8_t *member_pk;
} hs_ctx;

/* One complete handshake: Hello, HelloAnswer decoded and verified (kl_session_finish). */
static kl_code hs_hello(hs_ctx *h, kl_err *err)
{
    kl_session_client hc;
    kl_code rc = kl_session_hello_new(h->principal, h->sk, h->cluster, h->partition, h->member, wall_ms(),
                                      NULL, NULL, &hc, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__Hello hm = KEYLOAD__V1__HELLO__INIT;
    kl_session_hello_to_pb(&hc.hello, &hm);
    uint8_t buf[512];
    size_t n = keyload__v1__hello__get_packed_size(&hm);
    if (n > sizeof buf) {
        kl_session_client_wipe(&hc);
        return kl_fail(err, KL_INTERNAL, "hello", "the Hello does not fit %zu bytes", sizeof buf);
    }
    keyload__v1__hello__pack(&hm, buf);
    uint8_t *ans = NULL;
    size_t alen = 0;
    rc = kl_rpc_invoke(h->c, HELLO_METHOD, buf, n, 5000, &ans, &alen, NULL, 0, err);
    if (rc == KL_OK) {
        Keyload__V1__HelloAnswer *ha = keyload__v1__hello_answer__unpack(NULL, alen, ans);
        kl_session_hello_answer a;
        kl_session s;
        if (ha == NULL)
            rc = kl_fail(err, KL_INTERNAL, "hello_answer", "the HelloAnswer does not decode");
        else
            rc = kl_session_answer_from_pb(ha, &a, err);
        if (ha != NULL)
            keyload__v1__hello_answer__free_unpacked(ha, NULL);
        if (rc == KL_OK)
            rc = kl_session_finish(&hc, &a, h->member_pk, &s, err);
        if (rc == KL_OK)
            kl_session_wipe(&s);
    }
    free(ans);
    kl_session_client_wipe(&hc);
    return rc;
}

static kl_code hs_status(hs_ctx *h, Keyload__V1__MemberStatusAnswer **out, kl_err *err)
{
    uint8_t *ans = NULL;
    size_t alen = 0;
    kl_code rc = kl_rpc_invoke(h->c, STATUS_METHOD, NULL, 0, 5000, &ans, &alen, NULL, 0, err);
    if (rc == KL_OK && out != NULL) {
        *out = keyload__v1__member_status_answer__unpack(NULL, alen, ans);
        if (*out == NULL)
            rc = kl_fail(err, KL_INTERNAL, "answer", "the MemberStatus answer does not decode");
    }
    free(ans);
    return rc;
}

typedef struct hs_phase {
    double stat_ns, sched_ns; /* daemon CPU over the phase */
    double p50_us;            /* client round trip */
} hs_phase;

/* n calls of Hello (hello) or MemberStatus; the daemon's CPU over them. 0 or -1. */
static int hs_run(hs_ctx *h, long pid, long n, bool hello, hs_phase *out)
{
    uint64_t *lat = calloc((size_t)n, sizeof *lat);
    double s0, c0, s1, c1;
    if (lat == NULL || bench_proc_cpu(pid, &s0, &c0) != 0) {
        fprintf(stderr, "keyload-bench: cannot read the CPU time of pid %ld\n", pid);
        free(lat);
        return -1;
    }
    for (long i = 0; i < n; i++) {
        kl_err err;
        kl_err_clear(&err);
        int64_t t0 = bench_now_ns();
        kl_code rc = hello ? hs_hello(h, &err) : hs_status(h, NULL, &err);
        lat[i] = (uint64_t)(bench_now_ns() - t0);
        if (rc != KL_OK) {
            fprintf(stderr, "keyload-bench: %s %ld of %ld: %s (%s) %s\n", hello ? "Hello" : "MemberStatus",
                    i + 1, n, kl_code_name(rc), err.detail, err.message);
            free(lat);
            return -1;
        }
    }
    if (bench_proc_cpu(pid, &s1, &c1) != 0) {
        free(lat);
        return -1;
    }
    qsort(lat, (size_t)n, sizeof *lat, bench_cmp_u64);
    out->stat_ns = s1 - s0;
    out->sched_ns = c0 < 0 || c1 < 0 ? -1 : c1 - c0;
    out->p50_us = bench_pct(lat, (size_t)n, 50) / 1e3;
    free(lat);
    return 0;
}

int bench_run_handshake(const bench_options *o)
{
    const kl_partition *p = kl_cluster_find_partition(&bench_cluster, 0);
    const kl_member *m = NULL;
    int pid_of_node = 0;
    if (o->node != NULL)
        m = kl_cluster_find_node(&bench_cluster, o->node, &pid_of_node);
    else if (p != NULL && p->member_count > 0)
        m = &p->members[0];
    if (m == NULL || !m->has_public_key) {
        fprintf(stderr, "keyload-bench: no such member in %s, or it has no public_key\n", o->cluster_file);
        return 1;
    }
    hs_ctx h = {.principal = o->principal, .cluster = bench_cluster.name, .member_pk = m->public_key};
    kl_err err;
    kl_err_clear(&err);
    if (kl_keys_read_secret_file("principal key file", o->key_file, h.sk, sizeof h.sk, &err) != KL_OK) {
        fprintf(stderr, "keyload-bench: %s\n", err.message);
        return 1;
    }
    int rv = 1;
    Keyload__V1__MemberStatusAnswer *a = NULL, *b = NULL;
    if (kl_rpc_client_open(m->client_url, CONNECT_TIMEOUT_MS, 0, &h.c, &err) != KL_OK) {
        fprintf(stderr, "keyload-bench: cannot connect to %s: %s\n", m->client_url, err.message);
        sodium_memzero(h.sk, sizeof h.sk);
        return 1;
    }
    if (hs_status(&h, &a, &err) != KL_OK) {
        fprintf(stderr, "keyload-bench: MemberStatus of %s: %s\n", m->client_url, err.message);
        goto out;
    }
    h.partition = a->partition;
    h.member = a->member;
    keyload__v1__member_status_answer__free_unpacked(a, NULL);
    a = NULL;
    /* Warm-up (first allocations, the catalog's principal record in the cache). */
    hs_phase warm, st1, hel, st2;
    long w = o->handshakes < 50 ? o->handshakes : 50;
    if (hs_run(&h, o->pid, w, false, &warm) != 0 || hs_run(&h, o->pid, w, true, &warm) != 0)
        goto out;
    /* MemberStatus, Hello, MemberStatus: the baseline is the mean of the two around. */
    if (hs_run(&h, o->pid, o->handshakes, false, &st1) != 0 || hs_status(&h, &a, &err) != KL_OK ||
        hs_run(&h, o->pid, o->handshakes, true, &hel) != 0 || hs_status(&h, &b, &err) != KL_OK ||
        hs_run(&h, o->pid, o->handshakes, false, &st2) != 0) {
        if (err.code != KL_OK)
            fprintf(stderr, "keyload-bench: MemberStatus: %s\n", err.message);
        goto out;
    }
    double n = (double)o->handshakes;
    uint64_t hellos = b->hellos - a->hellos, hello_ns = b->hello_ns - a->hello_ns;
    double stat_status = (st1.stat_ns + st2.stat_ns) / 2, sched_status = (st1.sched_ns + st2.sched_ns) / 2;
    bool sched = st1.sched_ns >= 0 && st2.sched_ns >= 0 && hel.sched_ns >= 0;
    printf("handshake: n=%ld member=p%dm%llu pid=%ld hellos=%llu hello_loop_us=%.1f hello_p50_us=%.1f "
           "status_p50_us=%.1f hello_cpu_us=%.1f status_cpu_us=%.1f cpu_per_hello_us=%.1f "
           "sched_hello_us=%.1f sched_status_us=%.1f sched_per_hello_us=%.1f clk_tck=%ld\n",
           o->handshakes, h.partition, (unsigned long long)h.member, o->pid, (unsigned long long)hellos,
           hellos ? (double)hello_ns / (double)hellos / 1e3 : 0.0, hel.p50_us, (st1.p50_us + st2.p50_us) / 2,
           hel.stat_ns / n / 1e3, stat_status / n / 1e3, (hel.stat_ns - stat_status) / n / 1e3,
           sched ? hel.sched_ns / n / 1e3 : -1.0, sched ? sched_status / n / 1e3 : -1.0,
           sched ? (hel.sched_ns - sched_status) / n / 1e3 : -1.0, (long)sysconf(_SC_CLK_TCK));
    fflush(stdout);
    rv = hellos == (uint64_t)o->handshakes ? 0 : 1;
    if (rv != 0)
        fprintf(stderr, "keyload-bench: the member counted %llu Hellos for %ld sent\n",
                (unsigned long long)hellos, o->handshakes);
out:
    if (a != NULL)
        keyload__v1__member_status_answer__free_unpacked(a, NULL);
    if (b != NULL)
        keyload__v1__member_status_answer__free_unpacked(b, NULL);
    kl_rpc_client_close(h.c);
    sodium_memzero(h.sk, sizeof h.sk);
    return rv;
}
