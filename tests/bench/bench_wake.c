/* bench_wake: --wake-probe, what one thread waking another costs on this host, the unit a
 * replicated write pays several times over (a request read by a member's loop, the loop's
 * hand-off to its log writer and back, a follower's loop reading the append, the leader's
 * reading the answer, the client's reading the reply).
 *
 * A waker signals a condition variable after an idle gap of 600 us (about the spacing of the
 * 1-client cell's writes, so the waiter's CPU has gone idle), and the waiter stamps the time
 * it runs; N rounds (--samples, default 200) three ways: the two threads pinned to different
 * CPUs, both pinned to one CPU, and unpinned (where the scheduler puts them). On a virtual
 * machine a wake-up that crosses to an idle virtual CPU costs an interrupt the hypervisor
 * delivers, an order of magnitude more than one on the same CPU. */
#include "tests/bench/bench_fixture.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WAKE_GAP_US 600

typedef struct wake_pair {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long long signalled_ns; /* under mu: when the waker signalled; 0 once taken */
    int cpu;                /* the waiter's CPU, or -1 unpinned */
    bool pinned;            /* the waiter's pin took (set before its first wait) */
    long long *lat_ns;      /* per round: signal -> the waiter ran */
    int rounds;
} wake_pair;

static long long mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Pins the calling thread to cpu (-1: any). False when the kernel refuses. */
static bool pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    if (cpu < 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        for (long i = 0; i < n && i < CPU_SETSIZE; i++)
            CPU_SET((int)i, &s);
    } else {
        CPU_SET(cpu, &s);
    }
    return pthread_setaffinity_np(pthread_self(), sizeof s, &s) == 0;
}

static void *waiter_main(void *arg)
{
    wake_pair *w = arg;
    w->pinned = pin(w->cpu);
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < w->rounds;) {
        while (w->signalled_ns == 0)
            pthread_cond_wait(&w->cv, &w->mu);
        w->lat_ns[i++] = mono_ns() - w->signalled_ns;
        w->signalled_ns = 0;
        pthread_cond_signal(&w->cv); /* the waker may start the next gap */
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

/* One way: the waker on waker_cpu, the waiter on waiter_cpu (-1: unpinned). Sets the
 * median and p99 in us; false (reported) when a thread cannot start. */
static bool wake_way(int rounds, int waker_cpu, int waiter_cpu, double *p50_us, double *p99_us)
{
    wake_pair w = {.signalled_ns = 0, .cpu = waiter_cpu, .rounds = rounds};
    w.lat_ns = calloc((size_t)rounds, sizeof *w.lat_ns);
    if (w.lat_ns == NULL) {
        fprintf(stderr, "keyload-bench: out of memory\n");
        return false;
    }
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    if (!pin(waker_cpu)) {
        fprintf(stderr, "keyload-bench: cannot pin a thread to CPU %d\n", waker_cpu);
        goto fail_thread;
    }
    pthread_t t;
    int prc = pthread_create(&t, NULL, waiter_main, &w);
    if (prc != 0) {
        fprintf(stderr, "keyload-bench: cannot start the waiter thread: %s\n", strerror(prc));
        goto fail_thread;
    }
    for (int i = 0; i < rounds; i++) {
        struct timespec gap = {0, WAKE_GAP_US * 1000L};
        nanosleep(&gap, NULL);
        pthread_mutex_lock(&w.mu);
        w.signalled_ns = mono_ns();
        pthread_mutex_unlock(&w.mu);
        pthread_cond_signal(&w.cv); /* after the unlock, as the log writer's submit does */
        pthread_mutex_lock(&w.mu);
        while (w.signalled_ns != 0) /* the waiter ran and took it */
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
    }
    pthread_join(t, NULL);
    (void)pin(-1);
    if (!w.pinned) {
        fprintf(stderr, "keyload-bench: cannot pin a thread to CPU %d\n", waiter_cpu);
        goto fail_pinned;
    }
    qsort(w.lat_ns, (size_t)rounds, sizeof *w.lat_ns, cmp_ll);
    *p50_us = (double)w.lat_ns[rounds / 2] / 1000.0;
    *p99_us = (double)w.lat_ns[(rounds * 99) / 100] / 1000.0;
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    free(w.lat_ns);
    return true;

fail_thread:
    (void)pin(-1);
fail_pinned:
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    free(w.lat_ns);
    return false;
}

int bench_run_wake(const bench_options *o)
{
    int rounds = o->samples;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    double cross50 = 0, cross99 = 0, same50, same99, any50, any99;
    bool cross = cpus >= 2;
    if ((cross && !wake_way(rounds, 0, 1, &cross50, &cross99)) || !wake_way(rounds, 0, 0, &same50, &same99) ||
        !wake_way(rounds, -1, -1, &any50, &any99))
        return 1;
    printf("wake: samples=%d gap_us=%d cpus=%ld", rounds, WAKE_GAP_US, cpus);
    if (cross)
        printf(" cross_cpu_p50_us=%.1f cross_cpu_p99_us=%.1f", cross50, cross99);
    printf(" same_cpu_p50_us=%.1f same_cpu_p99_us=%.1f unpinned_p50_us=%.1f unpinned_p99_us=%.1f\n", same50, same99,
           any50, any99);
    return 0;
}
