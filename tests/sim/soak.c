/* raft-soak: runs the replication simulator (raft_sim.h) over many seeds, -O2, in parallel
 * worker processes. `make soak` runs it; a failing seed is printed with the command that
 * replays it alone, with --trace for a step-by-step log.
 *
 *   build/raft-soak [--config 3of5|all] [--first S] [--seeds N | --seconds T] [--steps K]
 *                   [--jobs J]
 *   build/raft-soak --config 3of5 --seed S [--steps K] [--trace]      (replay one seed) */
#include "tests/sim/raft_sim.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *const all_configs[] = {"3of3", "2of3", "1of3", "3of5", "4of5", "5of5"};
#define N_CONFIGS (sizeof all_configs / sizeof all_configs[0])

static const char *prog = "build/raft-soak";

static void replay_line(FILE *f, const sim_opts *o)
{
    fprintf(f, "replay: %s --config %dof%d --seed %llu --steps %d --trace\n", prog, o->q2, o->n,
            (unsigned long long)o->seed, o->steps);
}

/* An assert() inside the core aborts the worker: name the seed before dying. */
static void on_abort(int sig)
{
    (void)sig;
    if (sim_current) {
        char b[256];
        int k = snprintf(b, sizeof b,
                         "ABORT (core assertion) in seed: %s --config %dof%d --seed %llu "
                         "--steps %d --trace\n",
                         prog, sim_current->q2, sim_current->n,
                         (unsigned long long)sim_current->seed, sim_current->steps);
        if (k > 0)
            (void)!write(2, b, (size_t)k);
    }
    signal(SIGABRT, SIG_DFL);
    abort();
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void usage(void)
{
    fprintf(stderr, "usage: %s [--config NofM|all] [--first S] [--seeds N | --seconds T] "
                    "[--steps K] [--jobs J] | --config NofM --seed S [--steps K] [--trace]\n",
            prog);
    exit(2);
}

int main(int argc, char **argv)
{
    const char *config = "all";
    uint64_t first = 1, seed = 0, seeds = 0;
    double seconds = 0;
    int steps = 2000, jobs = 2;
    bool one = false, tr = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--trace")) {
            tr = true;
            continue;
        }
        if (v == NULL)
            usage();
        i++;
        if (!strcmp(a, "--config"))
            config = v;
        else if (!strcmp(a, "--first"))
            first = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--seed")) {
            seed = strtoull(v, NULL, 10);
            one = true;
        } else if (!strcmp(a, "--seeds"))
            seeds = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--seconds"))
            seconds = atof(v);
        else if (!strcmp(a, "--steps"))
            steps = atoi(v);
        else if (!strcmp(a, "--jobs"))
            jobs = atoi(v);
        else
            usage();
    }
    signal(SIGABRT, on_abort);
    int cn[N_CONFIGS], cq[N_CONFIGS];
    size_t nc = 0;
    if (!strcmp(config, "all")) {
        for (size_t i = 0; i < N_CONFIGS; i++, nc++)
            sim_parse_config(all_configs[i], &cn[nc], &cq[nc]);
    } else if (sim_parse_config(config, &cn[0], &cq[0])) {
        nc = 1;
    } else {
        usage();
    }
    if (one) {
        if (nc != 1)
            usage();
        sim_opts o = {.n = cn[0], .q2 = cq[0], .seed = seed, .steps = steps, .trace = tr};
        sim_result r;
        bool ok = sim_run(&o, &r);
        printf("%s seed %llu: leaders %llu committed %llu crashes %llu partitions %llu "
               "delivered %llu dropped %llu proposals %llu acked %llu reads %llu (read-resps %llu) "
               "truncations %llu "
               "early_applies %llu pipelined %llu liveness %llu compactions %llu installs %llu "
               "snapshots sent %llu failed %llu\n",
               ok ? "ok" : "FAIL", (unsigned long long)seed, (unsigned long long)r.leaders,
               (unsigned long long)r.committed, (unsigned long long)r.crashes,
               (unsigned long long)r.partitions, (unsigned long long)r.delivered,
               (unsigned long long)r.dropped, (unsigned long long)r.proposals,
               (unsigned long long)r.acked, (unsigned long long)r.reads_ok,
               (unsigned long long)r.read_resps,
               (unsigned long long)r.truncations, (unsigned long long)r.early_applies,
               (unsigned long long)r.pipelined, (unsigned long long)r.liveness_steps, (unsigned long long)r.compactions,
               (unsigned long long)r.installs, (unsigned long long)r.snapshots_sent,
               (unsigned long long)r.snapshots_failed);
        printf("membership: %llu changes started, %llu committed, %llu CONF entries proposed, "
               "%llu added, %llu removed, %llu dead replaced, %llu data entries' copies "
               "counted\n", (unsigned long long)r.ops_started, (unsigned long long)r.ops_done,
               (unsigned long long)r.conf_proposals, (unsigned long long)r.added,
               (unsigned long long)r.removed, (unsigned long long)r.dead_replaced,
               (unsigned long long)r.dur_checked);
        if (!ok)
            printf("step %llu: %s\n", (unsigned long long)r.fail_step, r.why);
        return ok ? 0 : 1;
    }
    if (seeds == 0 && seconds <= 0)
        seconds = 60;
    if (jobs < 1)
        jobs = 1;
    printf("raft soak: configs %s, %d steps per seed, %d jobs, %s\n", config, steps, jobs,
           seeds ? "fixed seed count" : "time-bounded");
    fflush(stdout);
    double t0 = now_s();
    int fds[64];
    if (jobs > 64)
        jobs = 64;
    for (int w = 0; w < jobs; w++) {
        int p[2];
        if (pipe(p) != 0) {
            perror("pipe");
            return 2;
        }
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            close(p[0]);
            uint64_t done = 0, failed = 0, comp = 0, inst = 0, sent = 0, ops = 0, dead = 0, pipe_n = 0;
            for (uint64_t k = (uint64_t)w;; k += (uint64_t)jobs) {
                if (seeds && k >= seeds)
                    break;
                if (!seeds && now_s() - t0 >= seconds)
                    break;
                size_t ci = (size_t)(k % nc);
                sim_opts o = {.n = cn[ci], .q2 = cq[ci], .seed = first + k / nc, .steps = steps};
                sim_result r;
                if (!sim_run(&o, &r)) {
                    failed++;
                    printf("FAIL %dof%d seed %llu at step %llu: %s\n", o.q2, o.n,
                           (unsigned long long)o.seed, (unsigned long long)r.fail_step, r.why);
                    replay_line(stdout, &o);
                    fflush(stdout);
                }
                comp += r.compactions;
                inst += r.installs;
                sent += r.snapshots_sent;
                ops += r.ops_done;
                dead += r.dead_replaced;
                pipe_n += r.pipelined;
                done++;
            }
            char b[128];
            int n = snprintf(b, sizeof b, "%llu %llu %llu %llu %llu %llu %llu %llu\n",
                             (unsigned long long)done, (unsigned long long)failed,
                             (unsigned long long)comp, (unsigned long long)inst,
                             (unsigned long long)sent, (unsigned long long)ops,
                             (unsigned long long)dead, (unsigned long long)pipe_n);
            (void)!write(p[1], b, (size_t)n);
            _exit(0);
        }
        close(p[1]);
        fds[w] = p[0];
    }
    uint64_t total = 0, failed = 0, comp = 0, inst = 0, sent = 0, ops = 0, dead = 0, piped = 0;
    int crashed = 0;
    for (int w = 0; w < jobs; w++) {
        char b[128] = "";
        ssize_t n = read(fds[w], b, sizeof b - 1);
        close(fds[w]);
        unsigned long long d = 0, f = 0, c = 0, i = 0, sn = 0, op = 0, de = 0, pp = 0;
        if (n > 0 && sscanf(b, "%llu %llu %llu %llu %llu %llu %llu %llu", &d, &f, &c, &i, &sn,
                            &op, &de, &pp) == 8) {
            piped += pp;
            ops += op;
            dead += de;
            total += d;
            failed += f;
            comp += c;
            inst += i;
            sent += sn;
        } else {
            crashed++;
        }
    }
    while (wait(NULL) > 0)
        ;
    double dt = now_s() - t0;
    printf("raft soak: %llu seeds in %.1f s (%.1f seeds/s), %llu failed%s\n",
           (unsigned long long)total, dt, dt > 0 ? total / dt : 0.0,
           (unsigned long long)failed, crashed ? ", a worker aborted (see above)" : "");
    printf("raft soak: %llu compactions, %llu snapshots streamed, %llu installed\n",
           (unsigned long long)comp, (unsigned long long)sent, (unsigned long long)inst);
    printf("raft soak: %llu membership changes committed, %llu of them replacing a dead member\n",
           (unsigned long long)ops, (unsigned long long)dead);
    printf("raft soak: %llu readies taken while an earlier write was still queued\n",
           (unsigned long long)piped);
    return failed == 0 && crashed == 0 ? 0 : 1;
}
