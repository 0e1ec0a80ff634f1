#include "tests/cluster/rf3.h"

#include "tests/cluster/proc.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

bool rf3_write(rf3 *c, const char *run, int base, unsigned lifetime_s, char *why, size_t cap)
{
    snprintf(c->run, sizeof c->run, "%s", run);
    c->base = base;
    c->lifetime_s = lifetime_s;
    for (int p = 0; p < RF3_PARTS; p++)
        for (int m = 0; m < RF3_MEMBERS; m++)
            c->pid[p][m] = -1;
    char cmd[1600];
    /* A work folder used before may hold this run name's stores: start from empty ones. */
    snprintf(cmd, sizeof cmd, "rm -rf '%s/%s-data-'p*", work, run);
    if (system(cmd) != 0) {
        snprintf(why, cap, "cannot remove old stores");
        return false;
    }
    snprintf(c->secret, sizeof c->secret, "%s/%s.secret", work, run);
    unlink(c->secret);
    snprintf(cmd, sizeof cmd, "'%s' keygen --cluster-secret-out '%s' >/dev/null", daemon_bin, c->secret);
    if (system(cmd) != 0) {
        snprintf(why, cap, "keyloadd keygen --cluster-secret-out failed");
        return false;
    }
    snprintf(c->file, sizeof c->file, "%s/%s.json", work, run);
    FILE *f = fopen(c->file, "w");
    if (f == NULL) {
        snprintf(why, cap, "cannot write %s", c->file);
        return false;
    }
    /* Generous timers: nine daemons and a coordinator share two cores. */
    fprintf(f, "{\"cluster\":\"%s\",\"replica_count\":3,"
               "\"timers\":{\"tick_ms\":50,\"election_ms\":1000,\"heartbeat_ms\":150,\"catalog_lease_ms\":3000},"
               "\"partitions\":[",
            run);
    for (int p = 0; p < RF3_PARTS; p++) {
        fprintf(f, "%s{\"id\":%d,\"members\":[", p ? "," : "", p);
        for (int m = 0; m < RF3_MEMBERS; m++) {
            int k = p * RF3_MEMBERS + m;
            char b64[128];
            snprintf(c->mkey[p][m], sizeof c->mkey[p][m], "%s/%s-p%dm%d.key", work, run, p, m + 1);
            if (!member_keygen(c->mkey[p][m], b64, sizeof b64)) {
                fclose(f);
                snprintf(why, cap, "keyloadd keygen --secret-out failed for p%dm%d", p, m + 1);
                return false;
            }
            snprintf(c->url[p][m], sizeof c->url[p][m], "tcp://127.0.0.1:%d", base + 2 * k);
            snprintf(c->log[p][m], sizeof c->log[p][m], "%s/%s-p%dm%d.log", work, run, p, m + 1);
            fprintf(f,
                    "%s{\"id\":%d,\"client\":\"%s\",\"peer\":\"tcp://127.0.0.1:%d\",\"data\":\"%s/%s-data-p%dm%d\","
                    "\"public_key\":\"%s\"}",
                    m ? "," : "", m + 1, c->url[p][m], base + 2 * k + 1, work, run, p, m + 1, b64);
        }
        fprintf(f, "]}");
    }
    fprintf(f, "]}\n");
    if (fclose(f) != 0) {
        snprintf(why, cap, "cannot write %s", c->file);
        return false;
    }
    return true;
}

void rf3_spawn(rf3 *c, int p, int m, const char *failpoints)
{
    char node[16];
    snprintf(node, sizeof node, "p%dm%d", p, m + 1);
    char *argv[] = {(char *)daemon_bin, "--cluster", c->file, "--node", node, "--cluster-secret", c->secret,
                    "--member-key", c->mkey[p][m], "--init-store", NULL};
    c->pid[p][m] = proc_exec(argv, c->log[p][m], failpoints, c->lifetime_s);
}

void rf3_kill(rf3 *c, int p, int m)
{
    if (c->pid[p][m] <= 0)
        return;
    kill(c->pid[p][m], SIGKILL);
    waitpid(c->pid[p][m], NULL, 0);
    c->pid[p][m] = -1;
}

void rf3_kill_all(rf3 *c)
{
    for (int p = 0; p < RF3_PARTS; p++)
        for (int m = 0; m < RF3_MEMBERS; m++)
            rf3_kill(c, p, m);
}

bool rf3_alive(rf3 *c, int p, int m)
{
    if (c->pid[p][m] <= 0)
        return false;
    int st;
    if (waitpid(c->pid[p][m], &st, WNOHANG) == c->pid[p][m]) {
        fprintf(stderr, "  p%dm%d exited (status %d; see %s)\n", p, m + 1, st, c->log[p][m]);
        c->pid[p][m] = -1;
        return false;
    }
    return true;
}

int rf3_leader(rf3 *c, int p)
{
    for (int m = 0; m < RF3_MEMBERS; m++) {
        if (!rf3_alive(c, p, m))
            continue;
        Keyload__V1__MemberStatusAnswer *s = member_status(c->url[p][m], 1000);
        bool ok = s && s->serving && (p == 0 || s->catalog_lease_valid);
        if (s)
            keyload__v1__member_status_answer__free_unpacked(s, NULL);
        if (ok)
            return m;
    }
    return -1;
}

bool rf3_wait_all(rf3 *c, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    for (int p = 0; p < RF3_PARTS; p++)
        while (rf3_leader(c, p) < 0) {
            if (now_ms() > deadline)
                return false;
            sleep_ms(100);
        }
    return true;
}

bool rf3_start_all(rf3 *c, int timeout_ms)
{
    for (int p = 0; p < RF3_PARTS; p++)
        for (int m = 0; m < RF3_MEMBERS; m++)
            rf3_spawn(c, p, m, NULL);
    return rf3_wait_all(c, timeout_ms);
}

bool rf3_cold_restart(rf3 *c)
{
    rf3_kill_all(c);
    int64_t t0 = now_ms();
    bool ok = rf3_start_all(c, 40000);
    fprintf(stderr, "  cold restart of %d members (kill -9 of all): serving again after %lld ms\n",
            RF3_PARTS * RF3_MEMBERS, (long long)(now_ms() - t0));
    return ok;
}
