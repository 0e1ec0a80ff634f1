/* proc_coord_fixture: the fixture of the coordinator process suites (proc_coord.h): the
 * RF3 cluster, the principals and their SDK clients, databases and queues, and the
 * keyload-coordinator processes with their configs, logs and status files. */
#include "tests/cluster/proc_coord.h"

#include "common/keys.h"

#include <signal.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

const char *const cc_who_id[CC_WHOS] = {"root", "coord", "other"};

cc_fixture cc_fx = {.coords = {{.pid = -1}, {.pid = -1}}};

/* ---- processes ---- */

static void cc_clients_close(void)
{
    for (int i = 0; i < cc_fx.nconns; i++)
        kl_client_close(cc_fx.conns[i].c);
    cc_fx.nconns = 0;
}

kl_client *cc_client(int who, const char *db)
{
    for (int i = 0; i < cc_fx.nconns; i++)
        if (cc_fx.conns[i].who == who && strcmp(cc_fx.conns[i].db, db) == 0)
            return cc_fx.conns[i].c;
    if (cc_fx.nconns == CC_CONNS)
        return NULL;
    kl_client *c = NULL;
    kl_err err;
    if (kl_client_open_principal(cc_fx.cluster.file, db, CC_TIMEOUT_MS, cc_who_id[who], cc_fx.whos[who].key_path, &c, &err) !=
        KL_OK) {
        fprintf(stderr, "  open client %s on %s: %s\n", cc_who_id[who], db, err.message);
        return NULL;
    }
    cc_fx.conns[cc_fx.nconns].who = who;
    snprintf(cc_fx.conns[cc_fx.nconns].db, sizeof cc_fx.conns[cc_fx.nconns].db, "%s", db);
    cc_fx.conns[cc_fx.nconns++].c = c;
    return c;
}

static void cc_coord_kill(int i)
{
    if (cc_fx.coords[i].pid <= 0)
        return;
    kill(cc_fx.coords[i].pid, SIGKILL);
    waitpid(cc_fx.coords[i].pid, NULL, 0);
    cc_fx.coords[i].pid = -1;
}

void cc_stop_all(void)
{
    for (int i = 0; i < CC_COORDS; i++)
        cc_coord_kill(i);
    cc_clients_close();
    rf3_kill_all(&cc_fx.cluster);
    cc_fx.up = false;
    cc_fx.keep = false;
}

void cc_after_test(bool failed)
{
    for (int i = 0; i < CC_COORDS; i++)
        cc_coord_kill(i);
    if (failed || !cc_fx.keep)
        cc_stop_all();
    cc_fx.keep = false;
}

int cc_leader(int p) { return rf3_leader(&cc_fx.cluster, p); }
bool cc_wait_all(int timeout_ms) { return rf3_wait_all(&cc_fx.cluster, timeout_ms); }
void cc_kill(int p, int m) { rf3_kill(&cc_fx.cluster, p, m); }
void cc_spawn(int p, int m) { rf3_spawn(&cc_fx.cluster, p, m, NULL); }

/* The suites open new SDK clients afterwards, which say Hello to the new processes. */
bool cc_cold_restart(void)
{
    cc_clients_close();
    return rf3_cold_restart(&cc_fx.cluster);
}

/* ---- set-up: keys, cluster file, members, principals ---- */

static bool cc_who_new(int who)
{
    cc_who *w = &cc_fx.whos[who];
    crypto_sign_keypair(w->pk, w->sk);
    snprintf(w->key_path, sizeof w->key_path, "%s/%s-%s.key", work, cc_fx.cluster.run, cc_who_id[who]);
    unlink(w->key_path);
    kl_err err;
    return kl_keys_write_secret_file("principal key file", w->key_path, w->sk, sizeof w->sk, &err) == KL_OK;
}

kl_code cc_send(kl_client *c, kl_batch *b, kl_receipt **out, kl_err *err)
{
    kl_receipt *r = NULL;
    kl_code rc = c ? kl_client_batch(c, b, &r, err) : kl_fail(err, KL_INTERNAL, "client", "no client");
    kl_batch_free(b);
    if (out)
        *out = r;
    else
        kl_receipt_free(r);
    return rc;
}

static bool cc_setup(char *why, size_t cap)
{
    char run[32];
    snprintf(run, sizeof run, "cc%d", cc_fx.runs++);
    /* 45 slots of 20 ports: 13000..13899. */
    int base = 13000 + (int)(getpid() % 45) * 20;
    if (!rf3_write(&cc_fx.cluster, run, base, PROC_LIFETIME_S, why, cap))
        return false;
    cc_fx.up = true; /* from here on cc_stop_all has processes to stop */
    int64_t t0 = now_ms();
    if (!rf3_start_all(&cc_fx.cluster, 40000)) {
        snprintf(why, cap, "the cluster did not serve within 40 s");
        return false;
    }
    for (int w = 0; w < CC_WHOS; w++)
        if (!cc_who_new(w)) {
            snprintf(why, cap, "principal key files");
            return false;
        }
    kl_err err;
    kl_err_clear(&err);
    if (sdk_bootstrap(cc_fx.cluster.file, cc_fx.cluster.secret, "acme/base", "root", cc_fx.whos[WHO_ROOT].pk, NULL, NULL, &err) != KL_OK) {
        snprintf(why, cap, "bootstrap: %s %s", kl_code_name(err.code), err.message);
        return false;
    }
    for (int w = WHO_COORD; w < CC_WHOS; w++) {
        char cid[KL_COMMAND_ID_TEXT_LEN + 1];
        kl_command_id_new(cid);
        kl_principal_result res;
        if (kl_client_create_principal(cc_client(WHO_ROOT, "acme/base"), cid, cc_who_id[w], cc_fx.whos[w].pk,
                                       KL_ROLE_CLUSTER_ADMIN, &res, NULL, &err) != KL_OK) {
            snprintf(why, cap, "create principal %s: %s %s", cc_who_id[w], kl_code_name(err.code), err.message);
            return false;
        }
    }
    fprintf(stderr, "  cluster %s: %d members (ports %d..%d), principals ready in %lld ms\n", cc_fx.cluster.run,
            CC_PARTS * CC_MEMBERS, base, base + 2 * CC_PARTS * CC_MEMBERS - 1, (long long)(now_ms() - t0));
    return true;
}

bool cc_ensure(char *why, size_t cap)
{
    if (cc_fx.up) {
        for (int p = 0; p < CC_PARTS; p++)
            for (int m = 0; m < CC_MEMBERS; m++)
                if (cc_fx.cluster.pid[p][m] <= 0) {
                    cc_stop_all();
                    return cc_setup(why, cap);
                }
        return true;
    }
    return cc_setup(why, cap);
}

kl_code cc_grant(const char *db, int who, Keyload__V1__Permission perm, const char *pattern, kl_err *err)
{
    char cmd[KL_COMMAND_ID_TEXT_LEN + 1];
    kl_command_id_new(cmd);
    kl_grant g = {.permission = perm, .queue_pattern = pattern};
    kl_principal_result res;
    return kl_client_grant(cc_client(WHO_ROOT, db), cmd, cc_who_id[who], &g, &res, NULL, err);
}

/* A suite's database: "coord" and "other" may publish to and inspect src.* and dst.*. */
bool cc_database(const char *db, char *why, size_t cap)
{
    kl_err err;
    kl_batch *b = NULL;
    kl_code rc = kl_batch_new(NULL, &b, &err);
    if (rc == KL_OK)
        rc = kl_batch_create_database(b, db, NULL, &err);
    if (rc == KL_OK)
        rc = cc_send(cc_client(WHO_ROOT, "acme/base"), b, NULL, &err);
    else
        kl_batch_free(b);
    if (rc != KL_OK) {
        snprintf(why, cap, "create database %s: %s %s", db, kl_code_name(rc), err.message);
        return false;
    }
    static const char *const patterns[] = {"src.*", "dst.*"};
    for (int w = WHO_COORD; w < CC_WHOS; w++)
        for (int i = 0; i < 2; i++)
            if (cc_grant(db, w, KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, patterns[i], &err) != KL_OK ||
                cc_grant(db, w, KEYLOAD__V1__PERMISSION__QUEUE_INSPECT, patterns[i], &err) != KL_OK) {
                snprintf(why, cap, "grant %s to %s on %s: %s", patterns[i], cc_who_id[w], db, err.message);
                return false;
            }
    return true;
}

kl_code cc_queue(const char *db, const char *name, int partition, kl_err *err)
{
    kl_batch *b = NULL;
    kl_queue_options o = {.pin_partition = true, .partition = partition};
    kl_code rc = kl_batch_new(NULL, &b, err);
    if (rc == KL_OK)
        rc = kl_batch_create_queue(b, name, &o, err);
    if (rc != KL_OK) {
        kl_batch_free(b);
        return rc;
    }
    return cc_send(cc_client(WHO_ROOT, db), b, NULL, err);
}


/* ---- coordinators ---- */

/* bin/keyload-coordinator next to the daemon binary. */
static const char *cc_coord_bin(void)
{
    static char path[600];
    const char *slash = strrchr(daemon_bin, '/');
    snprintf(path, sizeof path, "%.*skeyload-coordinator", slash ? (int)(slash - daemon_bin + 1) : 0, daemon_bin);
    return path;
}

/* Writes coordinator slot i's config (its own log and status file, named after tag) and
 * truncates its log. */
bool cc_coord_config(int i, const char *tag, const cc_opts *o)
{
    cc_coord *c = &cc_fx.coords[i];
    char run[sizeof cc_fx.cluster.run]; /* a copy: the names are written into the same fixture */
    memcpy(run, cc_fx.cluster.run, sizeof run);
    snprintf(c->config, sizeof c->config, "%s/%s-coord-%s.json", work, run, tag);
    snprintf(c->log, sizeof c->log, "%s/%s-coord-%s.log", work, run, tag);
    snprintf(c->status, sizeof c->status, "%s/%s-coord-%s.status.json", work, run, tag);
    unlink(c->log);
    unlink(c->status);
    FILE *f = fopen(c->config, "w");
    if (f == NULL)
        return false;
    fprintf(f, "{\"cluster_file\":\"%s\",\"database\":\"%s\",", cc_fx.cluster.file, o->db);
    if (o->who < 0)
        fprintf(f, "\"transfer_coordinator_principal_id\":null,");
    else
        fprintf(f, "\"transfer_coordinator_principal_id\":\"%s\",\"principal_key_file\":\"%s\",", cc_who_id[o->who],
                cc_fx.whos[o->who].key_path);
    /* The checks below read the per-step lines ("dispatched", "accept_sent", ...). */
    fprintf(f, "\"log_level\":\"debug\",");
    if (o->defaults) {
        fprintf(f, "\"status_file\":\"%s\"}\n", c->status);
        return fclose(f) == 0;
    }
    fprintf(f,
            "\"flush_interval_ms\":%u,\"workers\":%u,\"buffer_capacity\":%u,"
            "\"discovery\":{\"interval_ms\":%u,\"max_records\":%u,\"max_bytes\":4194304,\"max_work\":%u},"
            "\"status_file\":\"%s\",\"call_timeout_ms\":%u",
            o->flush_ms ? o->flush_ms : 5, o->workers ? o->workers : 1, o->buffer ? o->buffer : 1024,
            o->discovery_ms ? o->discovery_ms : 50, o->max_records ? o->max_records : 64,
            o->max_work ? o->max_work : 16, c->status,
            o->call_timeout_ms ? o->call_timeout_ms : 3000);
    if (o->call_threads)
        fprintf(f, ",\"call_threads\":%u", o->call_threads);
    fprintf(f, "}\n");
    return fclose(f) == 0;
}

void cc_coord_start(int i, const char *failpoints)
{
    char *argv[] = {(char *)cc_coord_bin(), "--config", cc_fx.coords[i].config, NULL};
    cc_fx.coords[i].pid = proc_exec(argv, cc_fx.coords[i].log, failpoints, CC_COORD_LIFETIME_S);
}

/* Waits for coordinator i to exit by itself (a failpoint); its wait status, or -1 after
 * timeout_ms (it is then killed). */
int cc_coord_wait(int i, int timeout_ms)
{
    int st = 0;
    int64_t deadline = now_ms() + timeout_ms;
    while (waitpid(cc_fx.coords[i].pid, &st, WNOHANG) == 0) {
        if (now_ms() > deadline) {
            cc_coord_kill(i);
            return -1;
        }
        sleep_ms(10);
    }
    cc_fx.coords[i].pid = -1;
    return st;
}

/* SIGTERM (drain) and reap; the wait status, or -1 when it had to be killed after 20 s. */
int cc_coord_stop(int i)
{
    if (cc_fx.coords[i].pid <= 0)
        return -1;
    /* Its first status file is written once the signal handlers are in place (run.c starts
     * the status timer right after them). main blocks SIGTERM before opening, so an earlier
     * one would wait there; waiting for the file makes this test the drain of a running
     * coordinator rather than of one still connecting. */
    int64_t deadline = now_ms() + 10000;
    siginfo_t si;
    for (;;) {
        si.si_pid = 0;
        if (access(cc_fx.coords[i].status, F_OK) == 0 || now_ms() > deadline ||
            waitid(P_PID, (id_t)cc_fx.coords[i].pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid != 0)
            break; /* ready, or already gone (left unreaped for cc_coord_wait) */
        sleep_ms(5);
    }
    kill(cc_fx.coords[i].pid, SIGTERM);
    return cc_coord_wait(i, 20000);
}

bool cc_exited_with(int st, int code) { return st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == code; }

/* Lines of coordinator i's log holding every one of a and b (b NULL: only a). */
int cc_log_count(int i, const char *a, const char *b)
{
    FILE *f = fopen(cc_fx.coords[i].log, "r");
    if (f == NULL)
        return 0;
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, a) != NULL && (b == NULL || strstr(line, b) != NULL);
    fclose(f);
    return n;
}

/* Coordinator i's status file (jansson; json_decref), NULL while there is none. */
/* Waits up to timeout_ms for coordinator i's log to hold a line with both msg and tid;
 * returns how many it holds then. */
int cc_wait_log(int i, const char *msg, const char *tid, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    while (cc_log_count(i, msg, tid) == 0 && now_ms() < deadline)
        sleep_ms(10);
    return cc_log_count(i, msg, tid);
}

json_t *cc_status_load(int i)
{
    json_error_t e;
    return json_load_file(cc_fx.coords[i].status, 0, &e);
}

long long cc_counter(const json_t *st, const char *name)
{
    json_t *v = json_object_get(json_object_get(st, "counters"), name);
    return json_is_integer(v) ? (long long)json_integer_value(v) : -1;
}

/* Peak resident set of a live process in KiB (VmHWM), -1 when unreadable. */
long cc_vmhwm_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

