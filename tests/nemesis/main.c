/* build/nemesis: the harness's driver (nemesis.h). Run by tests/nemesis/run.sh inside the
 * hub namespace; it writes the cluster file with the members' namespace addresses, starts
 * every member with `ip netns exec` (which execs, so the pid is the daemon's), sets up the
 * principals and queues, runs workload and faults, heals, checks and prints the report. */
#include "tests/nemesis/nemesis.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

nm_cluster nm;

static uint64_t opt_seed;
static int opt_seconds = 60;
static const char *opt_schedule = "soak";

int64_t nm_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void nm_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int nm_sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    int rc = st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    if (rc != 0)
        fprintf(stderr, "nemesis: `%s` exited %d\n", cmd, rc);
    return rc;
}

static bool sh_out(const char *cmd, char *out, size_t cap)
{
    FILE *f = popen(cmd, "r");
    if (f == NULL)
        return false;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    return pclose(f) == 0;
}

/* ---- cluster file and keys ---- */

bool nm_member_keygen(nm_member *mb)
{
    char cmd[1400];
    unlink(mb->key);
    snprintf(cmd, sizeof cmd, "'%s/bin/keyloadd' keygen --secret-out '%s'", nm.root, mb->key);
    if (!sh_out(cmd, mb->pub, sizeof mb->pub))
        return false;
    mb->pub[strcspn(mb->pub, "\r\n")] = 0;
    return mb->pub[0] != 0;
}

static void member_entry(FILE *f, const nm_member *mb, bool first)
{
    fprintf(f, "%s{\"id\":%d,\"client\":\"%s\",\"peer\":\"tcp://%s:%d\",\"data\":\"%s\",\"public_key\":\"%s\"}",
            first ? "" : ",", mb->id, mb->url, mb->addr, NM_PEER_PORT, mb->data, mb->pub);
}

bool nm_write_cluster_file(const char *path, const nm_member *extra)
{
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return false;
    /* Generous timers: nine daemons, a coordinator and the workload share two cores. */
    fprintf(f, "{\"cluster\":\"nemesis-%s\",\"replica_count\":3,"
               "\"timers\":{\"tick_ms\":50,\"election_ms\":%d,\"heartbeat_ms\":150,\"catalog_lease_ms\":3000},"
               "\"partitions\":[",
            nm.tag, NM_ELECTION_MS);
    for (int p = 0; p < NM_PARTS; p++) {
        fprintf(f, "%s{\"id\":%d,\"members\":[", p ? "," : "", p);
        bool first = true;
        for (int m = 0; m < NM_SLOTS; m++)
            if (nm.mb[p][m].active) {
                member_entry(f, &nm.mb[p][m], first);
                first = false;
            }
        if (extra != NULL && extra->p == p)
            member_entry(f, extra, first);
        fprintf(f, "]}");
    }
    fprintf(f, "]}\n");
    if (fclose(f) != 0)
        return false;
    return rename(tmp, path) == 0;
}

static bool write_cluster_file(void)
{
    if (nm_sh("'%s/bin/keyloadd' keygen --cluster-secret-out '%s' >/dev/null", nm.root, nm.secret) != 0)
        return false;
    for (int p = 0; p < NM_PARTS; p++)
        for (int m = 0; m < NM_SLOTS; m++)
            if (nm.mb[p][m].active && !nm_member_keygen(&nm.mb[p][m]))
                return false;
    return nm_write_cluster_file(nm.file, NULL);
}

/* Slots 1-3 of each partition hold its members 1-3 (198.18.0.10-18); slot 4 of each data
 * partition is spare (198.18.0.19-20); partition 0 has none. */
static void member_names(void)
{
    for (int p = 0; p < NM_PARTS; p++) {
        nm.last_id[p] = NM_MEMBERS;
        for (int m = 0; m < NM_SLOTS; m++) {
            nm_member *mb = &nm.mb[p][m];
            int k = m < NM_MEMBERS ? p * NM_MEMBERS + m : p > 0 ? NM_PARTS * NM_MEMBERS + p - 1 : 99 /* unused */;
            mb->p = p;
            mb->m = m;
            mb->pid = -1;
            mb->id = m + 1;
            mb->active = m < NM_MEMBERS;
            snprintf(mb->slot, sizeof mb->slot, "p%dm%d", p, m + 1);
            snprintf(mb->node, sizeof mb->node, "p%dm%d", p, mb->id);
            snprintf(mb->ns, sizeof mb->ns, "kln%s-%s", nm.tag, mb->slot);
            snprintf(mb->addr, sizeof mb->addr, "198.18.0.%d", 10 + k);
            snprintf(mb->url, sizeof mb->url, "tcp://%s:%d", mb->addr, NM_CLIENT_PORT);
            snprintf(mb->key, sizeof mb->key, "%s/%s.key", nm.work, mb->node);
            snprintf(mb->log, sizeof mb->log, "%s/%s.log", nm.work, mb->node);
            snprintf(mb->clock_file, sizeof mb->clock_file, "%s/%s.clock", nm.work, mb->slot);
            if (strcmp(mb->slot, nm.disk_node) == 0 && nm.disk_dir[0])
                snprintf(mb->data, sizeof mb->data, "%s/data", nm.disk_dir);
            else if (strcmp(mb->slot, nm.lossy_node) == 0 && nm.lossy_dir[0])
                snprintf(mb->data, sizeof mb->data, "%s/data", nm.lossy_dir);
            else
                snprintf(mb->data, sizeof mb->data, "%s/data-%s", nm.work, mb->slot);
        }
    }
}

/* ---- processes ---- */

static void child_env(nm_member *mb)
{
    /* Every member runs with its wall clock offset by its clock file ("+0" unless stepped) so
     * that any one of them can be stepped later; the monotonic clock stays real. */
    if (nm.libfaketime) {
        setenv("LD_PRELOAD", nm.faketime_lib, 1);
        setenv("FAKETIME_TIMESTAMP_FILE", mb->clock_file, 1);
        setenv("FAKETIME_NO_CACHE", "1", 1);
        setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1", 1);
    } else if (nm.faketime_lib[0]) {
        setenv("LD_PRELOAD", nm.faketime_lib, 1);
        setenv("NEMESIS_CLOCK_FILE", mb->clock_file, 1);
    }
    if (mb->failpoints[0])
        setenv("KEYLOAD_FAILPOINTS", mb->failpoints, 1);
    else
        unsetenv("KEYLOAD_FAILPOINTS");
}

#define NM_DISK_RESERVE_MB "8"

static pid_t spawn(char *const argv[], const char *log, nm_member *mb)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    if (mb != NULL)
        child_env(mb);
    execvp(argv[0], argv);
    _exit(127);
}

bool nm_member_start(nm_member *mb)
{
    if (mb->pid > 0)
        return true;
    char bin[600];
    snprintf(bin, sizeof bin, "%s/bin/keyloadd", nm.root);
    char *argv[24]; /* the most below is 19, NULL included */
    int n = 0;
    argv[n++] = "ip";
    argv[n++] = "netns";
    argv[n++] = "exec";
    argv[n++] = mb->ns;
    argv[n++] = bin;
    argv[n++] = "--cluster";
    argv[n++] = mb->join_file[0] ? mb->join_file : nm.member_file[mb->p][0] ? nm.member_file[mb->p] : nm.file;
    argv[n++] = "--node";
    argv[n++] = mb->node;
    argv[n++] = "--cluster-secret";
    argv[n++] = nm.secret;
    argv[n++] = "--member-key";
    argv[n++] = mb->key;
    /* A joining member keeps it until its change committed, as the launcher keeps it until a
       member was once ready: killed before its store was made, it is still new. */
    if (nm.init_store_flag && (!mb->started_once || mb->join_file[0]))
        argv[n++] = "--init-store";
    if (mb->join_file[0])
        argv[n++] = "--join";
    /* The 64 MiB image is below the default 64 MiB reserve: that member would refuse every
       batch as soon as it led. Filling the image still crosses this smaller reserve. */
    if (strcmp(mb->slot, nm.disk_node) == 0 && nm.disk_dir[0]) {
        argv[n++] = "--disk-reserve-mb";
        argv[n++] = NM_DISK_RESERVE_MB;
    }
    assert((size_t)n < sizeof argv / sizeof argv[0]);
    argv[n] = NULL;
    mb->pid = spawn(argv, mb->log, mb);
    mb->failpoints[0] = 0;
    mb->paused = false;
    if (mb->pid < 0)
        return false;
    mb->started_once = true;
    return true;
}

/* libfaketime keeps its state in /dev/shm under names made of the pid it is loaded into and
 * removes them only on a normal exit; a member killed or crashed under it leaves them. Only
 * that member's two names are removed. */
static void drop_faketime_shm(pid_t pid)
{
    if (!nm.libfaketime)
        return;
    char path[64];
    snprintf(path, sizeof path, "/dev/shm/faketime_shm_%ld", (long)pid);
    (void)unlink(path);
    snprintf(path, sizeof path, "/dev/shm/sem.faketime_sem_%ld", (long)pid);
    (void)unlink(path);
}

void nm_member_kill(nm_member *mb)
{
    if (mb->pid <= 0)
        return;
    kill(mb->pid, SIGKILL);
    if (mb->paused)
        kill(mb->pid, SIGCONT);
    waitpid(mb->pid, NULL, 0);
    drop_faketime_shm(mb->pid);
    mb->pid = -1;
    mb->paused = false;
}

bool nm_member_alive(nm_member *mb)
{
    if (mb->pid <= 0)
        return false;
    int st;
    if (waitpid(mb->pid, &st, WNOHANG) == mb->pid) {
        fprintf(stderr, "  %s exited (%s %d; see %s)\n", mb->node, WIFEXITED(st) ? "exit" : "signal",
                WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), mb->log);
        drop_faketime_shm(mb->pid);
        mb->pid = -1;
        return false;
    }
    return true;
}

bool nm_coord_start(void)
{
    if (nm.coord_pid > 0)
        return true;
    char bin[600];
    snprintf(bin, sizeof bin, "%s/bin/keyload-coordinator", nm.root);
    char *argv[] = {bin, "--config", nm.coord_cfg, NULL};
    nm.coord_pid = spawn(argv, nm.coord_log, NULL);
    return nm.coord_pid > 0;
}

void nm_coord_kill(void)
{
    if (nm.coord_pid <= 0)
        return;
    kill(nm.coord_pid, SIGKILL);
    waitpid(nm.coord_pid, NULL, 0);
    nm.coord_pid = -1;
}

bool nm_coord_alive(void)
{
    if (nm.coord_pid <= 0)
        return false;
    int st;
    if (waitpid(nm.coord_pid, &st, WNOHANG) == nm.coord_pid) {
        fprintf(stderr, "  coordinator exited (status %d; see %s)\n", st, nm.coord_log);
        nm.coord_pid = -1;
        return false;
    }
    return true;
}

int nm_leader(int p, int timeout_ms)
{
    for (int m = 0; m < NM_SLOTS; m++) {
        nm_member *mb = &nm.mb[p][m];
        if (!mb->active || !nm_member_alive(mb) || mb->paused)
            continue;
        Keyload__V1__MemberStatusAnswer *a = NULL;
        if (kl_member_status(mb->url, timeout_ms, &a, NULL) != KL_OK)
            continue;
        bool ok = a->serving && (p == 0 || a->catalog_lease_valid);
        kl_member_status_free(a);
        if (ok)
            return m;
    }
    return -1;
}

int64_t nm_wait_serving(int p, int timeout_ms)
{
    int64_t t0 = nm_now_ms();
    while (nm_leader(p, 500) < 0) {
        if (nm_now_ms() - t0 > timeout_ms)
            return -1;
        nm_sleep_ms(100);
    }
    return nm_now_ms() - t0;
}

/* ---- probes ---- */

static void probe_daemon(void)
{
    char cmd[1400], out[8192];
    snprintf(cmd, sizeof cmd, "'%s/bin/keyloadd' --help 2>&1", nm.root);
    sh_out(cmd, out, sizeof out);
    nm.init_store_flag = strstr(out, "--init-store") != NULL;
    /* A failpoint name the daemon does not know is refused before anything else happens;
     * a known one lets it go on to refuse the missing cluster file instead. */
    snprintf(cmd, sizeof cmd,
             "KEYLOAD_FAILPOINTS='store.log_write=1*error(INTERNAL)' '%s/bin/keyloadd' --cluster /nonexistent "
             "--node p0m1 2>&1",
             nm.root);
    sh_out(cmd, out, sizeof out);
    nm.eio_available = strstr(out, "store.log_write") == NULL && strstr(out, "KEYLOAD_FAILPOINTS") == NULL &&
                       strstr(out, "failpoint") == NULL;
    /* NEMESIS_CLOCK=libfaketime runs the members under Debian's libfaketime instead of
     * build/nemesis-clockshim.so (see clockshim.c for why that is not the default);
     * NEMESIS_CLOCK=none preloads nothing. */
    const char *mode = getenv("NEMESIS_CLOCK") ? getenv("NEMESIS_CLOCK") : "shim";
    nm.libfaketime = strcmp(mode, "libfaketime") == 0;
    if (nm.libfaketime)
        snprintf(nm.faketime_lib, sizeof nm.faketime_lib, "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1");
    else if (strcmp(mode, "none") != 0)
        snprintf(nm.faketime_lib, sizeof nm.faketime_lib, "%s/build/nemesis-clockshim.so", nm.root);
    if (nm.faketime_lib[0] && access(nm.faketime_lib, R_OK) != 0)
        nm.faketime_lib[0] = 0;
    printf("nemesis: daemon --init-store: %s; store.log_write failpoint: %s; wall clock preload: %s\n",
           nm.init_store_flag ? "yes (first start only)" : "no", nm.eio_available ? "accepted" : "not accepted",
           nm.faketime_lib[0] ? nm.faketime_lib : "none");
    if (!nm.eio_available)
        printf("faults eio and slow-disk: unavailable in this daemon build\n");
}

/* ---- main ---- */

static void stop_everything(void)
{
    nm_coord_kill();
    for (int p = 0; p < NM_PARTS; p++)
        for (int m = 0; m < NM_SLOTS; m++)
            nm_member_kill(&nm.mb[p][m]);
    nm_faults_cleanup();
}

static void on_signal(int sig)
{
    (void)sig;
    /* Children die with us (PR_SET_PDEATHSIG); run.sh removes the namespaces. */
    _exit(130);
}

static bool parse_args(int argc, char **argv)
{
    static const struct option opts[] = {{"root", 1, 0, 'r'},     {"work", 1, 0, 'w'},      {"tag", 1, 0, 't'},
                                         {"seconds", 1, 0, 's'},  {"seed", 1, 0, 'S'},      {"schedule", 1, 0, 'c'},
                                         {"disk-node", 1, 0, 'n'}, {"disk-dir", 1, 0, 'd'},
                                         {"lossy-node", 1, 0, 'N'}, {"lossy-dir", 1, 0, 'D'}, {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'r': snprintf(nm.root, sizeof nm.root, "%s", optarg); break;
        case 'w': snprintf(nm.work, sizeof nm.work, "%s", optarg); break;
        case 't': snprintf(nm.tag, sizeof nm.tag, "%s", optarg); break;
        case 's': opt_seconds = atoi(optarg); break;
        case 'S': opt_seed = strtoull(optarg, NULL, 10); break;
        case 'c': opt_schedule = optarg; break;
        case 'n': snprintf(nm.disk_node, sizeof nm.disk_node, "%s", optarg); break;
        case 'd': snprintf(nm.disk_dir, sizeof nm.disk_dir, "%s", optarg); break;
        case 'N': snprintf(nm.lossy_node, sizeof nm.lossy_node, "%s", optarg); break;
        case 'D': snprintf(nm.lossy_dir, sizeof nm.lossy_dir, "%s", optarg); break;
        default: return false;
        }
    }
    return nm.root[0] && nm.work[0] && nm.tag[0] && opt_seconds > 0;
}

static bool start_cluster(void)
{
    snprintf(nm.file, sizeof nm.file, "%s/cluster.json", nm.work);
    snprintf(nm.secret, sizeof nm.secret, "%s/cluster.secret", nm.work);
    member_names();
    for (int p = 0; p < NM_PARTS; p++)
        for (int m = 0; m < NM_SLOTS; m++) {
            FILE *f = fopen(nm.mb[p][m].clock_file, "w");
            if (f == NULL)
                return false;
            fputs("+0\n", f);
            fclose(f);
        }
    if (!write_cluster_file())
        return false;
    for (int p = 0; p < NM_PARTS; p++)
        for (int m = 0; m < NM_MEMBERS; m++)
            if (!nm_member_start(&nm.mb[p][m]))
                return false;
    for (int p = 0; p < NM_PARTS; p++) {
        int64_t ms = nm_wait_serving(p, 60000);
        if (ms < 0) {
            fprintf(stderr, "nemesis: partition %d does not serve 60 s after start\n", p);
            return false;
        }
    }
    return true;
}

static int finish(int violations, int64_t t_start)
{
    printf("nemesis: seed %llu, %d s of faults, took %lld s in all\n", (unsigned long long)opt_seed, opt_seconds,
           (long long)((nm_now_ms() - t_start) / 1000));
    nm_faults_report();
    nm_workload_report();
    printf("violations: %d\n", violations);
    if (violations > 0)
        printf("nemesis: FAILED; replay with: make nemesis SEED=%llu SECONDS=%d%s\n", (unsigned long long)opt_seed,
               opt_seconds, strcmp(opt_schedule, "test") == 0 ? " SCHEDULE=test" : "");
    printf("%d passed, %d failed\n", violations ? 0 : 1, violations ? 1 : 0);
    return violations ? 1 : 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 2 && strcmp(argv[1], "--self-test") == 0)
        return nm_selftest() ? 1 : 0;
    if (!parse_args(argc, argv)) {
        fprintf(stderr, "usage: nemesis --root DIR --work DIR --tag T --seconds N [--seed S] [--schedule test|soak] "
                        "[--disk-node pPmM --disk-dir DIR]\n");
        return 2;
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    signal(SIGPIPE, SIG_IGN);
    /* A bound on the whole run even if run.sh is gone: SIGALRM ends this process, and every
     * member and the coordinator die with it (PR_SET_PDEATHSIG). */
    alarm((unsigned)opt_seconds + 1200);
    int64_t t_start = nm_now_ms();
    printf("nemesis: seed %llu, %d s, schedule %s (replay: make nemesis SEED=%llu SECONDS=%d)\n",
           (unsigned long long)opt_seed, opt_seconds, opt_schedule, (unsigned long long)opt_seed,
           opt_seconds);
    probe_daemon();
    if (!start_cluster() || !nm_setup() || !nm_coord_start() || !nm_workload_start(opt_seed)) {
        fprintf(stderr, "nemesis: the harness could not start the cluster or its workload (logs in %s)\n", nm.work);
        stop_everything();
        printf("0 passed, 1 failed\n");
        return 1;
    }
    bool test = strcmp(opt_schedule, "test") == 0;
    /* The make-test run has a 600 s budget (NEMESIS_BUDGET_S overrides): no fault starts in
     * its last 150 s, which the final heal, drain and checks need. */
    int budget_s = test ? 600 : 0;
    if (getenv("NEMESIS_BUDGET_S"))
        budget_s = atoi(getenv("NEMESIS_BUDGET_S"));
    int64_t hard = budget_s > 150 ? t_start + (int64_t)(budget_s - 150) * 1000 : 0;
    bool ok = nm_faults_run(opt_seed, nm_now_ms() + (int64_t)opt_seconds * 1000, test ? 3 : 0, hard);
    nm_heal_all();
    /* The workload goes on for a while on the healed cluster: what was retried settles. */
    nm_sleep_ms(5000);
    nm_workload_stop();
    nm_final_state();
    int violations = nm_check_history();
    if (!ok) {
        printf("  check %-34s %8d checked, 1 violations: the budget ran out first\n", "every planned fault ran", 1);
        violations++;
    }
    stop_everything();
    return finish(violations, t_start);
}
