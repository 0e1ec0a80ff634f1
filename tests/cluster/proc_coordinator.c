/* Process tests of keyload-coordinator (KL-5; DESIGN.md §7, §8, §11) against real processes:
 * nine keyloadd members (3 partitions x 3 members, replica_count 3, sessions REQUIRED: member
 * key pairs, public keys in the cluster file, one cluster secret) and bin/keyload-coordinator
 * processes started with a config file written here. Loopback ports 13000..13999 (other
 * suites own other ranges; all below Linux's ephemeral range).
 *
 * Principals (tenant acme): "root" bootstraps and counts; "coord" is the coordinator's
 * principal and "other" a second transfer creator, both persisted cluster administrators
 * (the coordinator reauthorizes its principal as an administrator on every turn) with
 * QueuePublish and QueueInspect on src.* and dst.* in each test's database. Each suite has
 * its own database: a coordinator discovers every pending intent of its database, so one
 * suite's leftovers (another principal's or a refused transfer stays pending forever) must
 * not become the next suite's first event, which an exact failpoint cut relies on.
 *
 * The suites:
 *   RemoteTransferRecoveryTests  one transfer per cut, "workers": 1 so the first hit of a
 *                                failpoint is that transfer: the coordinator cut before any
 *                                Accept, after the Accept committed, after Complete; the
 *                                source leader (before Complete) and the destination leader
 *                                (before, and right after, the Accept) kill -9'd while a
 *                                sleep failpoint parks the coordinator with the transfer half
 *                                done (checked at the kill; it must then meet the outage and
 *                                retry); the whole cluster cold-restarted between Accept and
 *                                Complete; SIGTERM while parked after the Accept (the drain
 *                                ends the turn between two calls, exit 0, no Complete sent).
 *                                Each ends with one destination message, the
 *                                receipt token byte-identical across the cut, the source
 *                                Delivered with that same receipt, and every Accept and
 *                                Complete its coordinators sent under the command ids
 *                                derived here (no retry or restart minted a new identity).
 *   TwoCoordinatorTests          two coordinators (same principal and config, own status
 *                                files) race over 500 transfers: all Delivered, 500 distinct
 *                                messages at the destination, both really worked.
 *   CoordinatorPrincipalTests    a null principal discovers nothing and says once that it
 *                                idles; another principal's transfers are not driven while
 *                                the coordinator's own are delivered.
 *   CoordinatorPolicyRepairTests the destination QueuePublish revoked: each denied Accept is
 *                                retained (no terminal failure), the fresh failure read
 *                                refuses a witness while the policy epoch is unchanged, the
 *                                deterministic Accept (id derived here) answers its committed
 *                                denial; the grant restored: each repaired to generation 2
 *                                and delivered once; the historical Accept still denied. Then
 *                                the source publish grant revoked: the Accept commits, the
 *                                Complete is denied and retained, and once the grant is back
 *                                it is repaired (generation 2) and completed with the
 *                                generation-1 receipt.
 *   CoordinatorCapacityRetryTests (KL-6) a full destination: the quota refusal retained, room
 *                                made, the coordinator cut (exit failpoints) between witness
 *                                and Advance and between Advance and the next Accept, the
 *                                source leader killed -9 before each restart: one message,
 *                                generation 2's receipt; then a receipt made by an operator
 *                                while the coordinator holds a failure wins over any witness.
 *   RemoteTransferAdvanceTests   the same by hand through the SDK: forged witnesses refused,
 *                                each advance one reserved record plus its exact bytes, the
 *                                ceiling refused exactly at MaxQueueTransferAcceptAttempts.
 *   CoordinatorBacklogTests      10,000 intents over 100 lanes in both directions, a cold
 *                                restart, then 32 workers at 1 ms deliver them all; peak RSS
 *                                (VmHWM) under 64 MiB with a buffer bound smaller than the
 *                                backlog.
 *
 * The suites share one cluster (cc_keep, as proc_transfer.c does); coordinators never outlive
 * their suite. Every process is started by fork/exec with a bounded lifetime (alarm(2)
 * survives exec and ends it; PR_SET_PDEATHSIG kills it if this process dies) and is killed
 * by its pid, also after a failed check (cc_after_test). */
#include "tests/cluster/proc.h"
#include "tests/cluster/rf3.h"

#include "client/keyload.h"
#include "common/canon.h"
#include "common/guid.h"
#include "common/keys.h"
#include "keyload/v1/catalog.pb-c.h"
#include "keyload/v1/transfer.pb-c.h"

#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CC_PARTS RF3_PARTS
#define CC_MEMBERS RF3_MEMBERS
#define CC_SRC 1 /* the recovery cuts' source partition */
#define CC_DST 2 /* and destination partition */
#define CC_TIMEOUT_MS 15000
/* A coordinator's lifetime: a few minutes (members get PROC_LIFETIME_S); normally each is
 * killed long before. */
#define CC_COORD_LIFETIME_S 300
#define CC_COORDS 2
#define CC_EXIT_FAILPOINT 77 /* common/failpoint.h: `exit` is _exit(77) */

enum { WHO_ROOT, WHO_COORD, WHO_OTHER, CC_WHOS };
static const char *const cc_who_id[CC_WHOS] = {"root", "coord", "other"};

/* ---- processes ---- */

static rf3 cc_c; /* the nine members (tests/cluster/rf3.h) */
static bool cc_up, cc_keep;
static int cc_runs;

typedef struct cc_who {
    uint8_t pk[32], sk[64];
    char key_path[760];
} cc_who;
static cc_who cc_whos[CC_WHOS];

/* SDK clients per (principal, database), opened on first use and closed before a cold
 * restart (the suites then say Hello to the new processes). */
#define CC_CONNS 32
static struct {
    int who;
    char db[64];
    kl_client *c;
} cc_conns[CC_CONNS];
static int cc_nconns;

typedef struct cc_coord {
    pid_t pid;
    char config[760], log[760], status[760];
} cc_coord;
static cc_coord cc_coords[CC_COORDS] = {{.pid = -1}, {.pid = -1}};

static void cc_clients_close(void)
{
    for (int i = 0; i < cc_nconns; i++)
        kl_client_close(cc_conns[i].c);
    cc_nconns = 0;
}

static kl_client *cc_client(int who, const char *db)
{
    for (int i = 0; i < cc_nconns; i++)
        if (cc_conns[i].who == who && strcmp(cc_conns[i].db, db) == 0)
            return cc_conns[i].c;
    if (cc_nconns == CC_CONNS)
        return NULL;
    kl_client *c = NULL;
    kl_err err;
    if (kl_client_open_principal(cc_c.file, db, CC_TIMEOUT_MS, cc_who_id[who], cc_whos[who].key_path, &c, &err) !=
        KL_OK) {
        fprintf(stderr, "  open client %s on %s: %s\n", cc_who_id[who], db, err.message);
        return NULL;
    }
    cc_conns[cc_nconns].who = who;
    snprintf(cc_conns[cc_nconns].db, sizeof cc_conns[cc_nconns].db, "%s", db);
    cc_conns[cc_nconns++].c = c;
    return c;
}

static void cc_coord_kill(int i)
{
    if (cc_coords[i].pid <= 0)
        return;
    kill(cc_coords[i].pid, SIGKILL);
    waitpid(cc_coords[i].pid, NULL, 0);
    cc_coords[i].pid = -1;
}

void cc_stop_all(void)
{
    for (int i = 0; i < CC_COORDS; i++)
        cc_coord_kill(i);
    cc_clients_close();
    rf3_kill_all(&cc_c);
    cc_up = false;
    cc_keep = false;
}

void cc_after_test(bool failed)
{
    for (int i = 0; i < CC_COORDS; i++)
        cc_coord_kill(i);
    if (failed || !cc_keep)
        cc_stop_all();
    cc_keep = false;
}

static int cc_leader(int p) { return rf3_leader(&cc_c, p); }
static bool cc_wait_all(int timeout_ms) { return rf3_wait_all(&cc_c, timeout_ms); }
static void cc_kill(int p, int m) { rf3_kill(&cc_c, p, m); }
static void cc_spawn(int p, int m) { rf3_spawn(&cc_c, p, m, NULL); }

/* The suites open new SDK clients afterwards, which say Hello to the new processes. */
static bool cc_cold_restart(void)
{
    cc_clients_close();
    return rf3_cold_restart(&cc_c);
}

/* ---- set-up: keys, cluster file, members, principals ---- */

static bool cc_who_new(int who)
{
    cc_who *w = &cc_whos[who];
    crypto_sign_keypair(w->pk, w->sk);
    snprintf(w->key_path, sizeof w->key_path, "%s/%s-%s.key", work, cc_c.run, cc_who_id[who]);
    unlink(w->key_path);
    kl_err err;
    return kl_keys_write_secret_file("principal key file", w->key_path, w->sk, sizeof w->sk, &err) == KL_OK;
}

static kl_code cc_send(kl_client *c, kl_batch *b, kl_receipt **out, kl_err *err)
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
    snprintf(run, sizeof run, "cc%d", cc_runs++);
    /* 45 slots of 20 ports: 13000..13899. */
    int base = 13000 + (int)(getpid() % 45) * 20;
    if (!rf3_write(&cc_c, run, base, PROC_LIFETIME_S, why, cap))
        return false;
    cc_up = true; /* from here on cc_stop_all has processes to stop */
    int64_t t0 = now_ms();
    if (!rf3_start_all(&cc_c, 40000)) {
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
    if (sdk_bootstrap(cc_c.file, cc_c.secret, "acme/base", "root", cc_whos[WHO_ROOT].pk, NULL, NULL, &err) != KL_OK) {
        snprintf(why, cap, "bootstrap: %s %s", kl_code_name(err.code), err.message);
        return false;
    }
    for (int w = WHO_COORD; w < CC_WHOS; w++) {
        char cid[KL_COMMAND_ID_TEXT_LEN + 1];
        kl_command_id_new(cid);
        kl_principal_result res;
        if (kl_client_create_principal(cc_client(WHO_ROOT, "acme/base"), cid, cc_who_id[w], cc_whos[w].pk,
                                       KL_ROLE_CLUSTER_ADMIN, &res, NULL, &err) != KL_OK) {
            snprintf(why, cap, "create principal %s: %s %s", cc_who_id[w], kl_code_name(err.code), err.message);
            return false;
        }
    }
    fprintf(stderr, "  cluster %s: %d members (ports %d..%d), principals ready in %lld ms\n", cc_c.run,
            CC_PARTS * CC_MEMBERS, base, base + 2 * CC_PARTS * CC_MEMBERS - 1, (long long)(now_ms() - t0));
    return true;
}

static bool cc_ensure(char *why, size_t cap)
{
    if (cc_up) {
        for (int p = 0; p < CC_PARTS; p++)
            for (int m = 0; m < CC_MEMBERS; m++)
                if (cc_c.pid[p][m] <= 0) {
                    cc_stop_all();
                    return cc_setup(why, cap);
                }
        return true;
    }
    return cc_setup(why, cap);
}

static kl_code cc_grant(const char *db, int who, Keyload__V1__Permission perm, const char *pattern, kl_err *err)
{
    char cmd[KL_COMMAND_ID_TEXT_LEN + 1];
    kl_command_id_new(cmd);
    kl_grant g = {.permission = perm, .queue_pattern = pattern};
    kl_principal_result res;
    return kl_client_grant(cc_client(WHO_ROOT, db), cmd, cc_who_id[who], &g, &res, NULL, err);
}

/* A suite's database: "coord" and "other" may publish to and inspect src.* and dst.*. */
static bool cc_database(const char *db, char *why, size_t cap)
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

static kl_code cc_queue(const char *db, const char *name, int partition, kl_err *err)
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

typedef struct cc_opts {
    const char *db;
    int who; /* -1: "transfer_coordinator_principal_id": null */
    unsigned workers, flush_ms, buffer, discovery_ms, max_records, call_timeout_ms;
    unsigned call_threads; /* 0: the default */
    bool defaults;         /* write no tuning key at all: the shipped defaults */
} cc_opts;

/* Writes coordinator slot i's config (its own log and status file, named after tag) and
 * truncates its log. */
static bool cc_coord_config(int i, const char *tag, const cc_opts *o)
{
    cc_coord *c = &cc_coords[i];
    snprintf(c->config, sizeof c->config, "%s/%s-coord-%s.json", work, cc_c.run, tag);
    snprintf(c->log, sizeof c->log, "%s/%s-coord-%s.log", work, cc_c.run, tag);
    snprintf(c->status, sizeof c->status, "%s/%s-coord-%s.status.json", work, cc_c.run, tag);
    unlink(c->log);
    unlink(c->status);
    FILE *f = fopen(c->config, "w");
    if (f == NULL)
        return false;
    fprintf(f, "{\"cluster_file\":\"%s\",\"database\":\"%s\",", cc_c.file, o->db);
    if (o->who < 0)
        fprintf(f, "\"transfer_coordinator_principal_id\":null,");
    else
        fprintf(f, "\"transfer_coordinator_principal_id\":\"%s\",\"principal_key_file\":\"%s\",", cc_who_id[o->who],
                cc_whos[o->who].key_path);
    if (o->defaults) {
        fprintf(f, "\"status_file\":\"%s\"}\n", c->status);
        return fclose(f) == 0;
    }
    fprintf(f,
            "\"flush_interval_ms\":%u,\"workers\":%u,\"buffer_capacity\":%u,"
            "\"discovery\":{\"interval_ms\":%u,\"max_records\":%u,\"max_bytes\":4194304,\"max_work\":16},"
            "\"status_file\":\"%s\",\"call_timeout_ms\":%u",
            o->flush_ms ? o->flush_ms : 5, o->workers ? o->workers : 1, o->buffer ? o->buffer : 1024,
            o->discovery_ms ? o->discovery_ms : 50, o->max_records ? o->max_records : 64, c->status,
            o->call_timeout_ms ? o->call_timeout_ms : 3000);
    if (o->call_threads)
        fprintf(f, ",\"call_threads\":%u", o->call_threads);
    fprintf(f, "}\n");
    return fclose(f) == 0;
}

static void cc_coord_start(int i, const char *failpoints)
{
    char *argv[] = {(char *)cc_coord_bin(), "--config", cc_coords[i].config, NULL};
    cc_coords[i].pid = proc_exec(argv, cc_coords[i].log, failpoints, CC_COORD_LIFETIME_S);
}

/* Waits for coordinator i to exit by itself (a failpoint); its wait status, or -1 after
 * timeout_ms (it is then killed). */
static int cc_coord_wait(int i, int timeout_ms)
{
    int st = 0;
    int64_t deadline = now_ms() + timeout_ms;
    while (waitpid(cc_coords[i].pid, &st, WNOHANG) == 0) {
        if (now_ms() > deadline) {
            cc_coord_kill(i);
            return -1;
        }
        sleep_ms(10);
    }
    cc_coords[i].pid = -1;
    return st;
}

/* SIGTERM (drain) and reap; the wait status, or -1 when it had to be killed after 20 s. */
static int cc_coord_stop(int i)
{
    if (cc_coords[i].pid <= 0)
        return -1;
    /* Its first status file is written once the signal handlers are in place (run.c starts
     * the status timer right after them). main blocks SIGTERM before opening, so an earlier
     * one would wait there; waiting for the file makes this test the drain of a running
     * coordinator rather than of one still connecting. */
    int64_t deadline = now_ms() + 10000;
    siginfo_t si;
    for (;;) {
        si.si_pid = 0;
        if (access(cc_coords[i].status, F_OK) == 0 || now_ms() > deadline ||
            waitid(P_PID, (id_t)cc_coords[i].pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid != 0)
            break; /* ready, or already gone (left unreaped for cc_coord_wait) */
        sleep_ms(5);
    }
    kill(cc_coords[i].pid, SIGTERM);
    return cc_coord_wait(i, 20000);
}

static bool cc_exited_with(int st, int code) { return st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == code; }

/* Lines of coordinator i's log holding every one of a and b (b NULL: only a). */
static int cc_log_count(int i, const char *a, const char *b)
{
    FILE *f = fopen(cc_coords[i].log, "r");
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
static int cc_wait_log(int i, const char *msg, const char *tid, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    while (cc_log_count(i, msg, tid) == 0 && now_ms() < deadline)
        sleep_ms(10);
    return cc_log_count(i, msg, tid);
}

static json_t *cc_status_load(int i)
{
    json_error_t e;
    return json_load_file(cc_coords[i].status, 0, &e);
}

static long long cc_counter(const json_t *st, const char *name)
{
    json_t *v = json_object_get(json_object_get(st, "counters"), name);
    return json_is_integer(v) ? (long long)json_integer_value(v) : -1;
}

/* Peak resident set of a live process in KiB (VmHWM), -1 when unreadable. */
static long cc_vmhwm_kib(pid_t pid)
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

/* ---- transfers through the SDK ---- */

typedef struct cc_tok {
    uint8_t b[4096];
    size_t n;
} cc_tok;

static bool cc_tok_set(cc_tok *t, const uint8_t *p, size_t n)
{
    if (n > sizeof t->b)
        return false;
    memcpy(t->b, p, n);
    t->n = n;
    return true;
}

static bool cc_tok_eq(const cc_tok *t, const uint8_t *p, size_t n) { return t->n == n && memcmp(t->b, p, n) == 0; }

typedef char cc_id[KL_COMMAND_ID_TEXT_LEN + 1];

static kl_code cc_create(kl_client *c, const char *src, const char *lane, const char *tid, const char *dst,
                         const char *dst_lane, const char *body, kl_err *err)
{
    kl_batch *b = NULL;
    kl_message *m = NULL;
    kl_code rc = kl_message_new(body, strlen(body), &m, err);
    if (rc == KL_OK)
        rc = kl_batch_new(NULL, &b, err);
    if (rc == KL_OK)
        rc = kl_batch_create_transfer(b, src, lane, tid, dst, dst_lane, m, err);
    kl_message_free(m);
    if (rc != KL_OK) {
        kl_batch_free(b);
        return rc;
    }
    return cc_send(c, b, NULL, err);
}

/* The destination's receipt token for (src lane, tid): KL_OK, KL_NOT_FOUND or an error. */
static kl_code cc_receipt(kl_client *c, const char *dst, const char *src, const char *lane, const char *tid,
                          cc_tok *tok, kl_err *err)
{
    Keyload__V1__InspectQueueTransferReceiptAnswer *a = NULL;
    kl_code rc = kl_client_transfer_receipt(c, dst, src, lane, tid, &a, err);
    if (rc == KL_OK && !cc_tok_set(tok, a->receipt_token.data, a->receipt_token.len))
        rc = kl_fail(err, KL_INTERNAL, "answer", "the receipt token is huge");
    kl_transfer_receipt_answer_free(a);
    return rc;
}

/* The source's state (0 on error) and, once Delivered, its verified receipt into *receipt
 * (when not NULL). */
static uint32_t cc_state(kl_client *c, const char *src, const char *lane, const char *tid, cc_tok *receipt)
{
    Keyload__V1__InspectQueueTransferAnswer *a = NULL;
    kl_err err;
    uint32_t state = 0;
    if (kl_client_inspect_transfer(c, src, lane, tid, &a, &err) == KL_OK) {
        state = a->state;
        if (receipt && !cc_tok_set(receipt, a->receipt_token.data, a->receipt_token.len))
            state = 0;
    }
    kl_transfer_answer_free(a);
    return state;
}

static bool cc_wait_state(kl_client *c, const char *src, const char *lane, const char *tid, uint32_t want,
                          int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    while (cc_state(c, src, lane, tid, NULL) != want) {
        if (now_ms() > deadline)
            return false;
        sleep_ms(50);
    }
    return true;
}

static long long cc_messages(kl_client *root, const char *queue)
{
    Keyload__V1__QueueStatsAnswer *s = NULL;
    kl_err err;
    if (kl_client_queue_stats(root, queue, &s, &err) != KL_OK) {
        fprintf(stderr, "  stats %s: %s %s\n", queue, kl_code_name(err.code), err.message);
        return -1;
    }
    long long n = (long long)s->messages;
    kl_queue_stats_free(s);
    return n;
}

/* Leases up to max messages of queue/lane for a minute (nothing acked) and copies their
 * bodies (up to 63 bytes each) into bodies; returns how many, -1 on error. */
static int cc_receive(kl_client *root, const char *queue, const char *lane, int max, char (*bodies)[64])
{
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    kl_err err;
    if (kl_batch_new(NULL, &b, &err) != KL_OK || kl_batch_receive(b, queue, lane, (uint32_t)max, 60000, &err) != KL_OK) {
        kl_batch_free(b);
        return -1;
    }
    if (cc_send(root, b, &r, &err) != KL_OK || r->decoded->n_results != 1 ||
        r->decoded->results[0]->kind_case != KEYLOAD__V1__MUTATION_RESULT__KIND_RECEIVED) {
        kl_receipt_free(r);
        return -1;
    }
    const Keyload__V1__Received *got = r->decoded->results[0]->received;
    int n = (int)got->n_messages;
    for (int i = 0; i < n && bodies; i++) {
        size_t l = got->messages[i]->message->body.len < 63 ? got->messages[i]->message->body.len : 63;
        memcpy(bodies[i], got->messages[i]->message->body.data, l);
        bodies[i][l] = '\0';
    }
    kl_receipt_free(r);
    return n;
}

/* OutputPending items listed on partition p (one page of up to max), -1 on error. */
static long cc_pending_on(kl_client *c, int p, uint32_t max)
{
    Keyload__V1__ListPendingQueueTransfersAnswer *a = NULL;
    kl_err err;
    long n = -1;
    if (kl_client_pending_transfers(c, NULL, NULL, p, NULL, 0, max, &a, &err) == KL_OK)
        n = (long)a->n_items;
    kl_pending_transfers_free(a);
    return n;
}

/* The coordinator's command id of `step` for the transfer as InspectQueueTransfer shows it,
 * computed here from DESIGN.md §8 and coordinator/command_id.h's documented encoding (not
 * by calling the coordinator's code): first 16 bytes of BLAKE2b-256 over the canonical
 * (domain, step, principal, tenant, database, complete source lane, transfer id, complete
 * destination lane, fingerprint, generation). An independent derivation, so a test that
 * finds this id in the coordinator's log and gets the coordinator's committed outcome under
 * it proves the documented formula, not merely the code agreeing with itself. */
static bool cc_command_id(const char *step, const char *principal, const char *db,
                          const Keyload__V1__InspectQueueTransferAnswer *a, const char *tid, char out[KL_GUID_TEXT_LEN + 1])
{
    char tenant[64];
    const char *slash = strchr(db, '/');
    uint8_t id[16], digest[32];
    if (slash == NULL || a->source == NULL || a->destination == NULL || !kl_guid_parse(tid, id))
        return false;
    snprintf(tenant, sizeof tenant, "%.*s", (int)(slash - db), db);
    kl_canon c;
    kl_canon_init(&c);
    kl_canon_str(&c, 1, "keyload.coordinator.command.v1");
    kl_canon_str(&c, 2, step);
    kl_canon_str(&c, 3, principal);
    kl_canon_str(&c, 4, tenant);
    kl_canon_str(&c, 5, slash + 1);
    kl_canon_lane(&c, 6, a->source);
    kl_canon_bytes(&c, 7, id, 16);
    kl_canon_lane(&c, 8, a->destination);
    kl_canon_bytes(&c, 9, a->fingerprint.data, a->fingerprint.len);
    kl_canon_u64(&c, 10, a->generation);
    bool ok = !c.oom;
    if (ok)
        crypto_generichash(digest, sizeof digest, c.buf, c.len, NULL, 0);
    kl_canon_free(&c);
    if (!ok)
        return false;
    uint8_t any = 0;
    for (int i = 0; i < 16; i++)
        any |= digest[i];
    if (any == 0)
        digest[15] = 1;
    kl_guid_format(digest, out);
    return true;
}

#define CC_BEGIN(name)                                                                                             \
    fprintf(stderr, "  " name "\n");                                                                               \
    char why[1024] = "";                                                                                           \
    kl_err err;                                                                                                    \
    kl_err_clear(&err);                                                                                            \
    CHECK(cc_ensure(why, sizeof why), "cluster: %s", why)

/* ---- RemoteTransferRecoveryTests ---- */

#define REC_DB "acme/rec"

/* One recovery cut's transfer: src.rN (partition 1) -> dst.rN (partition 2), default lanes. */
typedef struct rec_cut {
    char src[32], dst[32], body[32];
    cc_id tid;
    cc_tok before; /* the receipt as read before the cut's repair (n 0: there was none) */
} rec_cut;

static bool rec_prepare(rec_cut *t, int n, char *why, size_t cap)
{
    kl_err err;
    snprintf(t->src, sizeof t->src, "src.r%d", n);
    snprintf(t->dst, sizeof t->dst, "dst.r%d", n);
    snprintf(t->body, sizeof t->body, "recovery-%d", n);
    t->before.n = 0;
    kl_command_id_new(t->tid);
    kl_code rc;
    const char *step = "queue src";
    if ((rc = cc_queue(REC_DB, t->src, CC_SRC, &err)) == KL_OK && (step = "queue dst", true) &&
        (rc = cc_queue(REC_DB, t->dst, CC_DST, &err)) == KL_OK && (step = "create", true))
        rc = cc_create(cc_client(WHO_COORD, REC_DB), t->src, NULL, t->tid, t->dst, NULL, t->body, &err);
    if (rc != KL_OK)
        snprintf(why, cap, "cut %d %s: %s %s (%s)", n, step, kl_code_name(rc), err.detail, err.message);
    return rc == KL_OK;
}

/* The Accepts and Completes coordinator i logged for tid: how many, and whether each was
 * sent under the command id derived here for its step (acc, cmp). -1 with why filled when
 * one was not: a retry or restart that minted a new effect identity. */
static int rec_logged_ids(int i, const char *tid, const char *acc, const char *cmp, char *why, size_t cap)
{
    FILE *f = fopen(cc_coords[i].log, "r");
    if (f == NULL)
        return 0;
    char line[2048];
    int n = 0;
    while (n >= 0 && fgets(line, sizeof line, f)) {
        bool is_acc = strstr(line, "msg=\"accept_sent\"") != NULL;
        if ((!is_acc && strstr(line, "msg=\"complete_sent\"") == NULL) || strstr(line, tid) == NULL)
            continue;
        const char *c = strstr(line, " cmd=");
        if (c == NULL || strncmp(c + 5, is_acc ? acc : cmp, KL_GUID_TEXT_LEN) != 0) {
            snprintf(why, cap, "%s sent under %.41s, not the derived %s (log %s)", is_acc ? "an Accept" : "a Complete",
                     c ? c + 1 : "(no cmd)", is_acc ? acc : cmp, cc_coords[i].log);
            n = -1;
        } else
            n++;
    }
    fclose(f);
    return n;
}

/* What every cut ends with: exactly one destination message, with the transfer's body; the
 * receipt byte-identical to the one read before the repair (when there was one) and to the
 * Delivered intent's; the source Delivered. */
static bool rec_verify(const rec_cut *t, char *why, size_t cap)
{
    kl_client *op = cc_client(WHO_COORD, REC_DB), *root = cc_client(WHO_ROOT, REC_DB);
    kl_err err;
    cc_tok after, delivered;
    kl_code rc = cc_receipt(op, t->dst, t->src, NULL, t->tid, &after, &err);
    uint32_t state = cc_state(op, t->src, NULL, t->tid, &delivered);
    long long n = cc_messages(root, t->dst);
    char bodies[4][64];
    int got = cc_receive(root, t->dst, NULL, 4, bodies);
    if (rc != KL_OK)
        snprintf(why, cap, "receipt after the repair: %s %s", kl_code_name(rc), err.message);
    else if (t->before.n > 0 && !cc_tok_eq(&t->before, after.b, after.n))
        snprintf(why, cap, "the receipt token changed across the cut (%zu bytes before, %zu after)", t->before.n,
                 after.n);
    else if (state != KEYLOAD__V1__TRANSFER_STATE__DELIVERED)
        snprintf(why, cap, "source state %s (want Delivered)", kl_transfer_state_name(state));
    else if (!cc_tok_eq(&after, delivered.b, delivered.n))
        snprintf(why, cap, "the Delivered intent holds another receipt than the destination's");
    else if (n != 1 || got != 1 || strcmp(bodies[0], t->body) != 0)
        snprintf(why, cap, "destination holds %lld messages, received %d (want exactly 1, body %s)", n, got,
                 t->body);
    else {
        /* Every Accept and Complete of the cut's two coordinators (the one cut and the one
         * that repaired) went out under the transfer's deterministic ids. */
        Keyload__V1__InspectQueueTransferAnswer *a = NULL;
        char acc[KL_GUID_TEXT_LEN + 1], cmp[KL_GUID_TEXT_LEN + 1];
        bool derived = kl_client_inspect_transfer(op, t->src, NULL, t->tid, &a, &err) == KL_OK &&
                       cc_command_id("accept", "coord", REC_DB, a, t->tid, acc) &&
                       cc_command_id("complete", "coord", REC_DB, a, t->tid, cmp);
        kl_transfer_answer_free(a);
        if (!derived) {
            snprintf(why, cap, "deriving the command ids");
            return false;
        }
        int s0 = rec_logged_ids(0, t->tid, acc, cmp, why, cap);
        int s1 = s0 < 0 ? 0 : rec_logged_ids(1, t->tid, acc, cmp, why, cap);
        if (s0 < 0 || s1 < 0)
            return false;
        if (s0 + s1 < 1) {
            snprintf(why, cap, "no coordinator logged an Accept or Complete for %s", t->tid);
            return false;
        }
        return true;
    }
    return false;
}

static void rec_opts(cc_opts *o)
{
    *o = (cc_opts){.db = REC_DB, .who = WHO_COORD, .workers = 1, .flush_ms = 5, .discovery_ms = 50,
                   .call_timeout_ms = 2000};
}

/* Cut at an exit failpoint: the coordinator runs until `failpoint` ends it with _exit(77). */
static bool rec_exit_at(int slot, const char *tag, const char *failpoint, char *why, size_t cap)
{
    cc_opts o;
    rec_opts(&o);
    if (!cc_coord_config(slot, tag, &o)) {
        snprintf(why, cap, "coordinator config");
        return false;
    }
    char spec[128];
    snprintf(spec, sizeof spec, "%s=exit", failpoint);
    cc_coord_start(slot, spec);
    int st = cc_coord_wait(slot, 20000);
    if (!cc_exited_with(st, CC_EXIT_FAILPOINT)) {
        snprintf(why, cap, "the coordinator armed with %s ended with wait status %d (want exit %d; log %s)", spec, st,
                 CC_EXIT_FAILPOINT, cc_coords[slot].log);
        return false;
    }
    return true;
}

/* The repair: a coordinator without failpoints drives the transfer to Delivered, then
 * drains on SIGTERM (exit 0). */
static bool rec_repair(int slot, const char *tag, const rec_cut *t, char *why, size_t cap)
{
    cc_opts o;
    rec_opts(&o);
    if (!cc_coord_config(slot, tag, &o)) {
        snprintf(why, cap, "coordinator config");
        return false;
    }
    cc_coord_start(slot, NULL);
    bool ok = cc_wait_state(cc_client(WHO_COORD, REC_DB), t->src, NULL, t->tid, KEYLOAD__V1__TRANSFER_STATE__DELIVERED,
                            30000);
    int st = cc_coord_stop(slot);
    if (!ok)
        snprintf(why, cap, "not Delivered within 30 s after the restart (log %s)", cc_coords[slot].log);
    else if (!cc_exited_with(st, 0))
        snprintf(why, cap, "the coordinator's SIGTERM drain ended with wait status %d (want exit 0)", st);
    return ok && cc_exited_with(st, 0);
}

/* Kills partition p's leader -9 while coordinator slot is parked in a sleep failpoint with
 * the transfer half done, lets its next call meet the outage (replica_count 3: no write
 * commits on p until the member is back), restarts the member and waits for Delivered. */
static bool rec_kill_leader(int slot, int p, const rec_cut *t, char *why, size_t cap)
{
    int leader = cc_leader(p);
    if (leader < 0) {
        snprintf(why, cap, "partition %d has no serving leader", p);
        return false;
    }
    cc_kill(p, leader);
    int64_t t0 = now_ms();
    sleep_ms(2500);
    cc_spawn(p, leader);
    bool ok = cc_wait_state(cc_client(WHO_COORD, REC_DB), t->src, NULL, t->tid, KEYLOAD__V1__TRANSFER_STATE__DELIVERED,
                            40000);
    fprintf(stderr, "    p%dm%d (leader) killed -9, back after 2.5 s; Delivered %lld ms after the kill; "
                    "coordinator retries: %d\n",
            p, leader + 1, (long long)(now_ms() - t0), cc_log_count(slot, "msg=\"retry\"", t->tid));
    if (!ok)
        snprintf(why, cap, "not Delivered within 40 s after partition %d's leader came back (log %s)", p,
                 cc_coords[slot].log);
    return ok && cc_wait_all(20000);
}

void test_coord_recovery(void)
{
    CC_BEGIN("RemoteTransferRecoveryTests");
    CHECK(cc_database(REC_DB, why, sizeof why), "%s", why);
    kl_client *op = cc_client(WHO_COORD, REC_DB);
    CHECK(op, "client");
    rec_cut t;
    int64_t t0;

    /* 1. After Create, before any Accept: created while no coordinator runs; the first
     * coordinator is cut at coord.before_accept (the Accept built, never sent). */
    t0 = now_ms();
    CHECK(rec_prepare(&t, 1, why, sizeof why), "%s", why);
    CHECK(rec_exit_at(0, "r1a", "coord.before_accept", why, sizeof why), "cut 1: %s", why);
    kl_code rc = cc_receipt(op, t.dst, t.src, NULL, t.tid, &t.before, &err);
    CHECK(rc == KL_NOT_FOUND, "cut 1: a receipt exists though no Accept was sent: %s", kl_code_name(rc));
    CHECK(cc_state(op, t.src, NULL, t.tid, NULL) == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING, "cut 1: not pending");
    CHECK(cc_messages(cc_client(WHO_ROOT, REC_DB), t.dst) == 0, "cut 1: the destination has a message");
    CHECK(rec_repair(1, "r1b", &t, why, sizeof why), "cut 1: %s", why);
    CHECK(rec_verify(&t, why, sizeof why), "cut 1 (before Accept): %s", why);
    fprintf(stderr, "    cut 1, coordinator exit at coord.before_accept: ok (%lld ms)\n", (long long)(now_ms() - t0));

    /* 2. The Accept committed and answered, its answer not yet used (coord.after_accept_sent):
     * the restarted coordinator finds the receipt and completes with it. */
    t0 = now_ms();
    CHECK(rec_prepare(&t, 2, why, sizeof why), "%s", why);
    CHECK(rec_exit_at(0, "r2a", "coord.after_accept_sent", why, sizeof why), "cut 2: %s", why);
    CHECK(cc_receipt(op, t.dst, t.src, NULL, t.tid, &t.before, &err) == KL_OK, "cut 2: no receipt after the Accept: %s",
          err.message);
    CHECK(cc_state(op, t.src, NULL, t.tid, NULL) == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING, "cut 2: not pending");
    CHECK(rec_repair(1, "r2b", &t, why, sizeof why), "cut 2: %s", why);
    CHECK(rec_verify(&t, why, sizeof why), "cut 2 (after Accept): %s", why);
    json_t *st = cc_status_load(1);
    fprintf(stderr, "    cut 2, coordinator exit at coord.after_accept_sent: ok (%lld ms; the restarted one sent "
                    "%lld Accepts, %lld Completes)\n",
            (long long)(now_ms() - t0), cc_counter(st, "accept_sent"), cc_counter(st, "complete_sent"));
    json_decref(st);

    /* 3. Complete sent and answered (Delivered committed), the coordinator gone before it
     * counted it: the restarted coordinator has nothing left to do. */
    t0 = now_ms();
    CHECK(rec_prepare(&t, 3, why, sizeof why), "%s", why);
    CHECK(rec_exit_at(0, "r3a", "coord.after_complete_sent", why, sizeof why), "cut 3: %s", why);
    CHECK(cc_receipt(op, t.dst, t.src, NULL, t.tid, &t.before, &err) == KL_OK, "cut 3: no receipt: %s", err.message);
    CHECK(cc_state(op, t.src, NULL, t.tid, NULL) == KEYLOAD__V1__TRANSFER_STATE__DELIVERED,
          "cut 3: the answered Complete left the source undelivered");
    CHECK(rec_repair(1, "r3b", &t, why, sizeof why), "cut 3: %s", why);
    CHECK(rec_verify(&t, why, sizeof why), "cut 3 (after Complete): %s", why);
    fprintf(stderr, "    cut 3, coordinator exit at coord.after_complete_sent: ok (%lld ms)\n",
            (long long)(now_ms() - t0));

    /* 4. The SOURCE leader killed -9 between Accept and Complete: the coordinator is parked
     * (once) at coord.before_complete with the receipt read and rechecked, so its Complete
     * is the first call to meet the dead leader. */
    t0 = now_ms();
    CHECK(rec_prepare(&t, 4, why, sizeof why), "%s", why);
    /* A short call timeout: a call that meets the outage fails, and the coordinator's own
     * retry (not only the SDK's resend inside one call) must keep the command id. */
    cc_opts o;
    rec_opts(&o);
    o.call_timeout_ms = 500;
    CHECK(cc_coord_config(0, "r4a", &o), "config");
    cc_coord_start(0, "coord.before_complete=1*sleep(1000)");
    CHECK(cc_wait_log(0, "msg=\"receipt_read\"", t.tid, 20000) == 1, "cut 4: the coordinator did not read the receipt");
    CHECK(cc_receipt(op, t.dst, t.src, NULL, t.tid, &t.before, &err) == KL_OK, "cut 4: receipt: %s", err.message);
    /* Really mid-transfer: accepted, not completed (the parked coordinator holds it). */
    CHECK(cc_state(op, t.src, NULL, t.tid, NULL) == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING,
          "cut 4: already Delivered before the kill (did the sleep failpoint fire?)");
    CHECK(rec_kill_leader(0, CC_SRC, &t, why, sizeof why), "cut 4: %s", why);
    CHECK(cc_log_count(0, "msg=\"retry\"", t.tid) >= 1, "cut 4: the coordinator never met the outage");
    CHECK(cc_exited_with(cc_coord_stop(0), 0), "cut 4: the coordinator's drain did not exit 0");
    CHECK(rec_repair(1, "r4b", &t, why, sizeof why), "cut 4: %s", why);
    CHECK(rec_verify(&t, why, sizeof why), "cut 4 (source leader killed): %s", why);
    fprintf(stderr, "    cut 4, source leader kill -9 before Complete: ok (%lld ms)\n", (long long)(now_ms() - t0));

    /* 5. The DESTINATION leader killed -9 before the Accept: parked (once) at
     * coord.before_accept after it found no receipt; its Accept meets the dead leader, is
     * retried under the same command id and must enqueue once. */
    t0 = now_ms();
    CHECK(rec_prepare(&t, 5, why, sizeof why), "%s", why);
    CHECK(cc_coord_config(0, "r5a", &o), "config");
    cc_coord_start(0, "coord.before_accept=1*sleep(1000)");
    CHECK(cc_wait_log(0, "msg=\"dispatched\"", t.tid, 20000) == 1, "cut 5: the coordinator did not take the transfer");
    sleep_ms(300); /* its turn reads the source and the (absent) receipt, then parks */
    cc_tok none;
    kl_code rc5 = cc_receipt(op, t.dst, t.src, NULL, t.tid, &none, &err);
    CHECK(rc5 == KL_NOT_FOUND, "cut 5: the destination already answers %s before the kill (did the sleep "
          "failpoint fire?)", kl_code_name(rc5));
    CHECK(rec_kill_leader(0, CC_DST, &t, why, sizeof why), "cut 5: %s", why);
    CHECK(cc_log_count(0, "msg=\"retry\"", t.tid) >= 1, "cut 5: the coordinator never met the outage");
    CHECK(cc_exited_with(cc_coord_stop(0), 0), "cut 5: the coordinator's drain did not exit 0");
    CHECK(cc_receipt(op, t.dst, t.src, NULL, t.tid, &t.before, &err) == KL_OK, "cut 5: receipt: %s", err.message);
    CHECK(rec_repair(1, "r5b", &t, why, sizeof why), "cut 5: %s", why);
    CHECK(rec_verify(&t, why, sizeof why), "cut 5 (destination leader killed before Accept): %s", why);
    fprintf(stderr, "    cut 5, destination leader kill -9 before Accept: ok (%lld ms)\n", (long long)(now_ms() - t0));

    /* 5b. The DESTINATION leader killed -9 right after the Accept committed (parked once at
     * coord.after_accept_sent): the receipt reread from the new leader is the same bytes. */
    t0 = now_ms();
    CHECK(rec_prepare(&t, 6, why, sizeof why), "%s", why);
    CHECK(cc_coord_config(0, "r5c", &o), "config");
    cc_coord_start(0, "coord.after_accept_sent=1*sleep(1000)");
    CHECK(cc_wait_log(0, "msg=\"accepted\"", t.tid, 20000) == 1, "cut 5b: the coordinator's Accept was not answered");
    CHECK(cc_receipt(op, t.dst, t.src, NULL, t.tid, &t.before, &err) == KL_OK, "cut 5b: receipt: %s", err.message);
    CHECK(cc_state(op, t.src, NULL, t.tid, NULL) == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING,
          "cut 5b: already Delivered before the kill (did the sleep failpoint fire?)");
    CHECK(rec_kill_leader(0, CC_DST, &t, why, sizeof why), "cut 5b: %s", why);
    CHECK(cc_exited_with(cc_coord_stop(0), 0), "cut 5b: the coordinator's drain did not exit 0");
    CHECK(rec_repair(1, "r5d", &t, why, sizeof why), "cut 5b: %s", why);
    CHECK(rec_verify(&t, why, sizeof why), "cut 5b (destination leader killed after Accept): %s", why);
    fprintf(stderr, "    cut 5b, destination leader kill -9 after Accept: ok (%lld ms)\n", (long long)(now_ms() - t0));

    /* 6. A cold restart of the whole cluster between Accept and Complete: the coordinator
     * cut at coord.before_complete, all nine members killed -9 and started again. */
    t0 = now_ms();
    CHECK(rec_prepare(&t, 7, why, sizeof why), "%s", why);
    CHECK(rec_exit_at(0, "r6a", "coord.before_complete", why, sizeof why), "cut 6: %s", why);
    CHECK(cc_receipt(op, t.dst, t.src, NULL, t.tid, &t.before, &err) == KL_OK, "cut 6: receipt: %s", err.message);
    CHECK(cc_cold_restart(), "cut 6: the cluster did not serve again within 40 s");
    op = cc_client(WHO_COORD, REC_DB);
    CHECK(op, "client after the cold restart");
    cc_tok again;
    CHECK(cc_receipt(op, t.dst, t.src, NULL, t.tid, &again, &err) == KL_OK && cc_tok_eq(&t.before, again.b, again.n),
          "cut 6: the receipt after the cold restart: %s, %s", kl_code_name(err.code),
          cc_tok_eq(&t.before, again.b, again.n) ? "same" : "DIFFERENT");
    CHECK(cc_state(op, t.src, NULL, t.tid, NULL) == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING,
          "cut 6: not pending after the cold restart");
    CHECK(rec_repair(1, "r6b", &t, why, sizeof why), "cut 6: %s", why);
    CHECK(rec_verify(&t, why, sizeof why), "cut 6 (cold restart before Complete): %s", why);
    fprintf(stderr, "    cut 6, cold restart between Accept and Complete: ok (%lld ms)\n", (long long)(now_ms() - t0));

    /* 7. SIGTERM mid-turn, the drain: parked (once) at coord.after_accept_sent, the
     * coordinator is told to stop. It ends the turn at the next point between two calls
     * (before the receipt reread) without sending Complete, reports the turn cancelled
     * (never rolled back) and exits 0 long before a turn of calls could have run. A new
     * coordinator completes the transfer under the same command ids. */
    t0 = now_ms();
    CHECK(rec_prepare(&t, 8, why, sizeof why), "%s", why);
    rec_opts(&o);
    CHECK(cc_coord_config(0, "r7a", &o), "config");
    cc_coord_start(0, "coord.after_accept_sent=1*sleep(1500)");
    CHECK(cc_wait_log(0, "msg=\"accepted\"", t.tid, 20000) == 1, "cut 7: the coordinator's Accept was not answered");
    int64_t term_at = now_ms();
    int st7 = cc_coord_stop(0);
    int64_t drain_ms = now_ms() - term_at;
    CHECK(cc_exited_with(st7, 0), "cut 7: the drain ended with wait status %d (want exit 0; log %s)", st7,
          cc_coords[0].log);
    CHECK(cc_log_count(0, "msg=\"cancelled\"", t.tid) == 1 &&
              cc_log_count(0, "before=reread_receipt", t.tid) == 1,
          "cut 7: no cancelled line before reread_receipt for the transfer (log %s)", cc_coords[0].log);
    CHECK(cc_log_count(0, "msg=\"complete_sent\"", t.tid) == 0 && cc_log_count(0, "rolled", NULL) == 0,
          "cut 7: the stopping coordinator sent Complete or reported a rollback (log %s)", cc_coords[0].log);
    CHECK(drain_ms < 5000, "cut 7: the drain took %lld ms (the parked call is 1.5 s, one call at most 2 s)",
          (long long)drain_ms);
    CHECK(cc_receipt(op, t.dst, t.src, NULL, t.tid, &t.before, &err) == KL_OK, "cut 7: receipt: %s", err.message);
    CHECK(cc_state(op, t.src, NULL, t.tid, NULL) == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING,
          "cut 7: not pending after the drain");
    CHECK(rec_repair(1, "r7b", &t, why, sizeof why), "cut 7: %s", why);
    CHECK(rec_verify(&t, why, sizeof why), "cut 7 (SIGTERM mid-turn): %s", why);
    fprintf(stderr, "    cut 7, SIGTERM while parked after Accept: drained in %lld ms, ok (%lld ms)\n",
            (long long)drain_ms, (long long)(now_ms() - t0));
    cc_keep = true;
}

/* ---- many transfers, created fast ---- */

/* A set of transfers: `lanes` source lanes l00.. of src (each to the same-named lane of dst,
 * so that no lane retains more than per_lane records: every lane keeps its intents or
 * receipts forever within MaxScanRecords and MaxBatchBytes), per_lane each, created by
 * `who` in batches of per_batch Creates (one source lane per batch). Bodies
 * "<tag>-<lane>-<i>" are distinct. */
#define CC_BATCH_MAX 50
typedef struct cc_plan {
    const char *db, *src, *dst, *tag;
    int who, lanes, per_lane, per_batch; /* per_batch <= CC_BATCH_MAX */
} cc_plan;

typedef struct cc_maker {
    const cc_plan *plan;
    int first_lane, lane_step; /* this thread's lanes */
    long created;
    char error[1024];
} cc_maker;

static void *cc_make(void *arg)
{
    cc_maker *w = arg;
    const cc_plan *pl = w->plan;
    kl_client *c = NULL;
    kl_err err;
    /* One client per thread: its own sessions, so the threads do not queue on one lock. */
    if (kl_client_open_principal(cc_c.file, pl->db, CC_TIMEOUT_MS, cc_who_id[pl->who], cc_whos[pl->who].key_path, &c,
                                 &err) != KL_OK) {
        snprintf(w->error, sizeof w->error, "open: %s", err.message);
        return NULL;
    }
    for (int lane = w->first_lane; lane < pl->lanes && !w->error[0]; lane += w->lane_step)
        for (int i = 0; i < pl->per_lane && !w->error[0]; i += pl->per_batch) {
            char lane_name[16];
            snprintf(lane_name, sizeof lane_name, "l%02d", lane);
            cc_id cmd;
            kl_command_id_new(cmd);
            int n = pl->per_lane - i < pl->per_batch ? pl->per_lane - i : pl->per_batch;
            cc_id tids[CC_BATCH_MAX];
            for (int k = 0; k < n; k++)
                kl_command_id_new(tids[k]);
            /* A lost answer is retried with the same command id and the same batch (the
             * same transfer ids): never a second set of intents. */
            kl_code rc = KL_UNKNOWN_WRITE_OUTCOME;
            for (int attempt = 0; attempt < 4 && rc != KL_OK; attempt++) {
                kl_batch *b = NULL;
                rc = kl_batch_new(cmd, &b, &err);
                for (int k = 0; k < n && rc == KL_OK; k++) {
                    char body[64];
                    snprintf(body, sizeof body, "%s-%02d-%04d", pl->tag, lane, i + k);
                    kl_message *m = NULL;
                    rc = kl_message_new(body, strlen(body), &m, &err);
                    if (rc == KL_OK)
                        rc = kl_batch_create_transfer(b, pl->src, lane_name, tids[k], pl->dst, lane_name, m, &err);
                    kl_message_free(m);
                }
                kl_receipt *r = NULL;
                if (rc == KL_OK)
                    rc = cc_send(c, b, &r, &err);
                else
                    kl_batch_free(b);
                if (rc == KL_OK) {
                    for (size_t k = 0; k < r->decoded->n_results; k++)
                        w->created += r->decoded->results[k]->kind_case ==
                                      KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_CREATED;
                } else if (rc != KL_UNKNOWN_WRITE_OUTCOME && rc != KL_DEADLINE_EXCEEDED && rc != KL_UNAVAILABLE) {
                    attempt = 4;
                }
                kl_receipt_free(r);
            }
            if (rc != KL_OK)
                snprintf(w->error, sizeof w->error, "%s lane %s batch %d: %s %s (%s)", pl->src, lane_name, i,
                         kl_code_name(rc), err.detail, err.message);
        }
    kl_client_close(c);
    return NULL;
}

/* Runs plans[0..n) at once with threads_per_plan threads each; the Creates committed, or -1
 * (why filled) when a thread failed. */
static long cc_make_all(const cc_plan *plans, int n, int threads_per_plan, char *why, size_t cap)
{
    cc_maker w[32];
    pthread_t th[32];
    int k = 0;
    for (int p = 0; p < n; p++)
        for (int t = 0; t < threads_per_plan && k < 32; t++, k++) {
            w[k] = (cc_maker){.plan = &plans[p], .first_lane = t, .lane_step = threads_per_plan};
            pthread_create(&th[k], NULL, cc_make, &w[k]);
        }
    long total = 0;
    bool failed = false;
    for (int i = 0; i < k; i++) {
        pthread_join(th[i], NULL);
        total += w[i].created;
        if (w[i].error[0] && !failed) {
            snprintf(why, cap, "%s", w[i].error);
            failed = true;
        }
    }
    return failed ? -1 : total;
}

/* ---- TwoCoordinatorTests ---- */

#define TWO_DB "acme/two"
#define TWO_LANES 5
#define TWO_PER_LANE 100
#define TWO_TOTAL (TWO_LANES * TWO_PER_LANE)

void test_coord_two(void)
{
    CC_BEGIN("TwoCoordinatorTests");
    CHECK(cc_database(TWO_DB, why, sizeof why), "%s", why);
    CHECK(cc_queue(TWO_DB, "src.two", CC_SRC, &err) == KL_OK, "queue src.two: %s", err.message);
    CHECK(cc_queue(TWO_DB, "dst.two", CC_DST, &err) == KL_OK, "queue dst.two: %s", err.message);
    cc_plan plan = {.db = TWO_DB, .src = "src.two", .dst = "dst.two", .tag = "two", .who = WHO_COORD,
                    .lanes = TWO_LANES, .per_lane = TWO_PER_LANE, .per_batch = 25};
    int64_t t0 = now_ms();
    long made = cc_make_all(&plan, 1, TWO_LANES, why, sizeof why);
    CHECK(made == TWO_TOTAL, "created %ld of %d: %s", made, TWO_TOTAL, why);
    int64_t t1 = now_ms();

    /* The same principal and settings; only the status files (and logs) differ. */
    cc_opts o = {.db = TWO_DB, .who = WHO_COORD, .workers = 4, .flush_ms = 5, .discovery_ms = 100};
    CHECK(cc_coord_config(0, "two-a", &o) && cc_coord_config(1, "two-b", &o), "configs");
    cc_coord_start(0, NULL);
    cc_coord_start(1, NULL);
    kl_client *root = cc_client(WHO_ROOT, TWO_DB), *op = cc_client(WHO_COORD, TWO_DB);
    CHECK(root && op, "clients");
    int64_t deadline = now_ms() + 120000;
    long pending = -1;
    long long held = -1;
    while (now_ms() < deadline) {
        pending = cc_pending_on(op, CC_SRC, 1);
        held = cc_messages(root, "dst.two");
        if (pending == 0 && held >= TWO_TOTAL)
            break;
        sleep_ms(200);
    }
    int64_t t2 = now_ms();
    int sa = cc_coord_stop(0), sb = cc_coord_stop(1);
    CHECK(pending == 0 && held == TWO_TOTAL, "after %lld ms: %ld pending, %lld destination messages (want 0, %d)",
          (long long)(t2 - t1), pending, held, TWO_TOTAL);
    CHECK(cc_exited_with(sa, 0) && cc_exited_with(sb, 0), "drains: wait status %d and %d", sa, sb);
    /* Both raced for real: each sent Accepts and delivered some itself. */
    json_t *a = cc_status_load(0), *b = cc_status_load(1);
    CHECK(a && b, "status files");
    long long acc_a = cc_counter(a, "accept_sent"), acc_b = cc_counter(b, "accept_sent");
    long long del_a = cc_counter(a, "delivered"), del_b = cc_counter(b, "delivered");
    long long dd_a = cc_counter(a, "accept_deduplicated"), dd_b = cc_counter(b, "accept_deduplicated");
    long long fd_a = cc_counter(a, "found_delivered"), fd_b = cc_counter(b, "found_delivered");
    json_decref(a);
    json_decref(b);
    fprintf(stderr, "    %d transfers created in %lld ms; two coordinators delivered them in %lld ms: A sent %lld "
                    "Accepts (%lld deduplicated), delivered %lld, found %lld Delivered; B %lld (%lld), %lld, %lld\n",
            TWO_TOTAL, (long long)(t1 - t0), (long long)(t2 - t1), acc_a, dd_a, del_a, fd_a, acc_b, dd_b, del_b, fd_b);
    CHECK(acc_a > 0 && acc_b > 0 && del_a > 0 && del_b > 0, "one coordinator did nothing: Accepts %lld/%lld, "
          "delivered %lld/%lld", acc_a, acc_b, del_a, del_b);
    /* Exactly one effect each: 500 messages, 500 distinct bodies, every one expected. */
    static char bodies[TWO_PER_LANE + 1][64];
    static bool seen[TWO_TOTAL];
    memset(seen, 0, sizeof seen);
    int distinct = 0;
    for (int l = 0; l < TWO_LANES; l++) {
        char lane[16];
        snprintf(lane, sizeof lane, "l%02d", l);
        int n = cc_receive(root, "dst.two", lane, TWO_PER_LANE + 1, bodies);
        CHECK(n == TWO_PER_LANE, "lane %s of dst.two holds %d messages (want %d)", lane, n, TWO_PER_LANE);
        for (int i = 0; i < n; i++) {
            int bl, bi;
            CHECK(sscanf(bodies[i], "two-%d-%d", &bl, &bi) == 2 && bl == l && bi >= 0 && bi < TWO_PER_LANE,
                  "unexpected body %s in lane %s", bodies[i], lane);
            CHECK(!seen[bl * TWO_PER_LANE + bi], "body %s delivered twice", bodies[i]);
            seen[bl * TWO_PER_LANE + bi] = true;
            distinct++;
        }
    }
    CHECK(distinct == TWO_TOTAL, "%d distinct bodies (want %d)", distinct, TWO_TOTAL);
    /* Every source intent Delivered: none left on the partition's listing, checked on a
     * full page (not only the first item). */
    CHECK(cc_pending_on(op, CC_SRC, 1000) == 0, "pending intents left on partition %d", CC_SRC);
    cc_keep = true;
}

/* ---- CoordinatorInFlightTests ---- */

#define MANY_DB "acme/many"
#define MANY_LANES 12
#define MANY_PER_LANE 50
#define MANY_TOTAL (MANY_LANES * MANY_PER_LANE)
#define MANY_WORKERS 400

/* The number after `key=` on coordinator i's first log line holding msg, -1 without one. */
static long cc_log_number(int i, const char *msg, const char *key)
{
    FILE *f = fopen(cc_coords[i].log, "r");
    if (f == NULL)
        return -1;
    char line[2048];
    long v = -1;
    while (v < 0 && fgets(line, sizeof line, f)) {
        const char *k = strstr(line, msg) ? strstr(line, key) : NULL;
        if (k != NULL)
            v = strtol(k + strlen(key), NULL, 10);
    }
    fclose(f);
    return v;
}

/* Threads of a live process (/proc/PID/status), -1 when unreadable. */
static long cc_threads(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    long n = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "Threads:", 8) == 0)
            n = strtol(line + 8, NULL, 10);
    fclose(f);
    return n;
}

/* CPU time (user + system) of a live process in clock ticks, -1 when unreadable. */
static long long cc_cpu_ticks(pid_t pid)
{
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    unsigned long long ut = 0, st = 0;
    if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (long long)(ut + st);
}

/* Hundreds of turns in flight on one loop, a few call threads: a SIGTERM among them ends
 * every one through the cancellation path (exit 0, final status, nothing in flight), and a
 * second coordinator then delivers all of them exactly once, its peak of turns in flight
 * in the hundreds while its threads stay a handful. */
void test_coord_many(void)
{
    CC_BEGIN("CoordinatorInFlightTests");
    CHECK(cc_database(MANY_DB, why, sizeof why), "%s", why);
    CHECK(cc_queue(MANY_DB, "src.many", CC_SRC, &err) == KL_OK, "queue: %s", err.message);
    CHECK(cc_queue(MANY_DB, "dst.many", CC_DST, &err) == KL_OK, "queue: %s", err.message);
    cc_plan plan = {.db = MANY_DB, .src = "src.many", .dst = "dst.many", .tag = "many", .who = WHO_COORD,
                    .lanes = MANY_LANES, .per_lane = MANY_PER_LANE, .per_batch = 50};
    long made = cc_make_all(&plan, 1, 6, why, sizeof why);
    CHECK(made == MANY_TOTAL, "created %ld of %d: %s", made, MANY_TOTAL, why);
    kl_client *root = cc_client(WHO_ROOT, MANY_DB), *op = cc_client(WHO_COORD, MANY_DB);
    CHECK(root && op, "clients");

    /* 1. Four call threads for 400 workers: the turns pile up between their calls. */
    cc_opts o = {.db = MANY_DB, .who = WHO_COORD, .workers = MANY_WORKERS, .flush_ms = 1, .buffer = 2,
                 .discovery_ms = 50, .max_records = 256, .call_threads = 4};
    CHECK(cc_coord_config(0, "many-stop", &o), "config");
    cc_coord_start(0, NULL);
    int64_t deadline = now_ms() + 60000;
    while (cc_log_count(0, "msg=\"delivered\"", "by=self") < 20 && now_ms() < deadline)
        sleep_ms(20);
    CHECK(cc_log_count(0, "msg=\"delivered\"", "by=self") >= 20, "no 20 deliveries within 60 s (log %s)",
          cc_coords[0].log);
    int64_t t0 = now_ms();
    int st = cc_coord_stop(0);
    int64_t drain_ms = now_ms() - t0;
    long at_stop = cc_log_number(0, "msg=\"stopping\"", "turns_in_flight=");
    int cancelled = cc_log_count(0, "msg=\"cancelled\"", NULL);
    json_t *s1 = cc_status_load(0);
    fprintf(stderr, "    SIGTERM with %ld turns in flight (4 call threads): drained in %lld ms, %d cancelled\n",
            at_stop, (long long)drain_ms, cancelled);
    CHECK(cc_exited_with(st, 0), "drain: wait status %d", st);
    CHECK(at_stop >= 100, "only %ld turns in flight at the stop (want hundreds; log %s)", at_stop, cc_coords[0].log);
    CHECK(cancelled >= at_stop / 2 && cancelled <= at_stop, "%d cancelled of %ld in flight", cancelled, at_stop);
    CHECK(s1 != NULL && cc_counter(s1, "turns_in_flight") == 0 && cc_counter(s1, "cancelled") == cancelled &&
              json_is_true(json_object_get(s1, "final")),
          "final status: in flight %lld, cancelled %lld", s1 ? cc_counter(s1, "turns_in_flight") : -1,
          s1 ? cc_counter(s1, "cancelled") : -1);
    json_decref(s1);
    CHECK(cc_log_count(0, "msg=\"complete_sent\"", NULL) >= 20, "fewer Completes than deliveries");

    /* 2. Again, to the end: every transfer once, hundreds in flight, few threads. */
    o.call_threads = 16;
    CHECK(cc_coord_config(0, "many-run", &o), "config");
    cc_coord_start(0, NULL);
    pid_t pid = cc_coords[0].pid;
    long pending = -1, threads_max = 0;
    long long held = -1;
    deadline = now_ms() + 120000;
    while (now_ms() < deadline) {
        long th = cc_threads(pid);
        threads_max = th > threads_max ? th : threads_max;
        pending = cc_pending_on(op, CC_SRC, 1);
        held = cc_messages(root, "dst.many");
        if (pending == 0 && held >= MANY_TOTAL)
            break;
        sleep_ms(100);
    }
    st = cc_coord_stop(0);
    json_t *s2 = cc_status_load(0);
    long long peak = s2 ? cc_counter(s2, "turns_in_flight_peak") : -1;
    json_decref(s2);
    fprintf(stderr, "    %lld delivered; peak %lld turns in flight (%d workers, 16 call threads), at most %ld "
                    "threads\n", held, peak, MANY_WORKERS, threads_max);
    CHECK(pending == 0 && held == MANY_TOTAL, "%ld pending, %lld destination messages (want 0, %d)", pending, held,
          MANY_TOTAL);
    CHECK(cc_exited_with(st, 0), "drain: wait status %d", st);
    CHECK(peak >= 200, "peak %lld turns in flight (want hundreds)", peak);
    CHECK(threads_max > 0 && threads_max < MANY_WORKERS / 8, "%ld threads for %d workers", threads_max,
          MANY_WORKERS);
    /* Exactly once: each lane holds its 50 bodies, none twice. */
    static char bodies[MANY_PER_LANE + 1][64];
    for (int l = 0; l < MANY_LANES; l++) {
        char lane[16];
        snprintf(lane, sizeof lane, "l%02d", l);
        int n = cc_receive(root, "dst.many", lane, MANY_PER_LANE + 1, bodies);
        CHECK(n == MANY_PER_LANE, "lane %s holds %d messages (want %d)", lane, n, MANY_PER_LANE);
        bool seen[MANY_PER_LANE] = {false};
        for (int i = 0; i < n; i++) {
            int bl, bi;
            CHECK(sscanf(bodies[i], "many-%d-%d", &bl, &bi) == 2 && bl == l && bi >= 0 && bi < MANY_PER_LANE &&
                      !seen[bi],
                  "unexpected or repeated body %s in lane %s", bodies[i], lane);
            seen[bi] = true;
        }
    }

    /* 3. Idle with the default config (nothing pending): under 1% of a core over 10 s. */
    cc_opts d = {.db = MANY_DB, .who = WHO_COORD, .defaults = true};
    CHECK(cc_coord_config(0, "many-idle", &d), "config");
    cc_coord_start(0, NULL);
    pid = cc_coords[0].pid;
    CHECK(cc_wait_log(0, "msg=\"discovery_round\"", NULL, 10000) >= 1,
          "the default coordinator made no discovery round (log %s)", cc_coords[0].log);
    sleep_ms(2000); /* past start-up: sessions made, first rounds done */
    long hz = sysconf(_SC_CLK_TCK);
    long long c0 = cc_cpu_ticks(pid);
    int64_t w0 = now_ms();
    sleep_ms(10000);
    long long c1 = cc_cpu_ticks(pid);
    int64_t w1 = now_ms();
    long idle_threads = cc_threads(pid);
    st = cc_coord_stop(0);
    double pct = c0 >= 0 && c1 >= c0 ? 100.0 * (double)(c1 - c0) / (double)hz / ((double)(w1 - w0) / 1000.0) : -1;
    fprintf(stderr, "    idle default coordinator: %lld ticks of CPU in %lld ms = %.2f%% of a core (%ld threads)\n",
            c1 - c0, (long long)(w1 - w0), pct, idle_threads);
    CHECK(pct >= 0 && pct < 1.0, "idle default coordinator used %.2f%% of a core (want under 1%%)", pct);
    CHECK(cc_exited_with(st, 0), "idle drain: wait status %d", st);
    cc_keep = true;
}

/* ---- CoordinatorPrincipalTests ---- */

#define NP_DB "acme/np"

void test_coord_principal(void)
{
    CC_BEGIN("CoordinatorPrincipalTests");
    CHECK(cc_database(NP_DB, why, sizeof why), "%s", why);
    CHECK(cc_queue(NP_DB, "src.np", CC_SRC, &err) == KL_OK, "queue: %s", err.message);
    CHECK(cc_queue(NP_DB, "dst.np", CC_DST, &err) == KL_OK, "queue: %s", err.message);
    kl_client *mine = cc_client(WHO_COORD, NP_DB), *other = cc_client(WHO_OTHER, NP_DB),
              *root = cc_client(WHO_ROOT, NP_DB);
    CHECK(mine && other && root, "clients");
    cc_id own[3], foreign[3];
    for (int i = 0; i < 3; i++) {
        char body[32];
        kl_command_id_new(own[i]);
        kl_command_id_new(foreign[i]);
        snprintf(body, sizeof body, "own-%d", i);
        CHECK(cc_create(mine, "src.np", "own", own[i], "dst.np", NULL, body, &err) == KL_OK, "create own: %s",
              err.message);
        snprintf(body, sizeof body, "foreign-%d", i);
        CHECK(cc_create(other, "src.np", "foreign", foreign[i], "dst.np", NULL, body, &err) == KL_OK,
              "create foreign: %s", err.message);
    }

    /* Null principal: no discovery at all. A few flush intervals, and ten discovery
     * intervals as if it had discovered: everything still pending, nothing delivered, and
     * the log says once that it idles. */
    cc_opts o = {.db = NP_DB, .who = -1, .workers = 2, .flush_ms = 5, .discovery_ms = 50};
    CHECK(cc_coord_config(0, "np-null", &o), "config");
    cc_coord_start(0, NULL);
    sleep_ms(600);
    for (int i = 0; i < 3; i++) {
        CHECK(cc_state(mine, "src.np", "own", own[i], NULL) == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING,
              "own %d not pending under a null-principal coordinator", i);
        CHECK(cc_state(other, "src.np", "foreign", foreign[i], NULL) == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING,
              "foreign %d not pending under a null-principal coordinator", i);
    }
    CHECK(cc_messages(root, "dst.np") == 0, "a null-principal coordinator delivered something");
    json_t *st = cc_status_load(0);
    json_t *disc = json_object_get(st, "discovery");
    CHECK(json_is_string(disc) && strcmp(json_string_value(disc), "disabled: null principal") == 0 &&
              json_is_null(json_object_get(json_object_get(st, "config"), "principal_id")) &&
              cc_counter(st, "rounds") == 0,
          "status of the null-principal coordinator: discovery %s, rounds %lld",
          json_is_string(disc) ? json_string_value(disc) : "(none)", cc_counter(st, "rounds"));
    json_decref(st);
    int idle = cc_log_count(0, "msg=\"idle\"", NULL), rounds = cc_log_count(0, "msg=\"discovery_round\"", NULL);
    int sz = cc_exited_with(cc_coord_stop(0), 0);
    CHECK(idle == 1 && rounds == 0, "log of the null-principal coordinator: %d idle lines, %d discovery rounds "
          "(want 1, 0)", idle, rounds);
    CHECK(sz, "the idle coordinator did not exit 0 on SIGTERM");

    /* The coordinator's own principal: its three are delivered, the other principal's three
     * are never taken (and stay pending for many discovery rounds after). */
    o.who = WHO_COORD;
    CHECK(cc_coord_config(0, "np-own", &o), "config");
    cc_coord_start(0, NULL);
    for (int i = 0; i < 3; i++)
        CHECK(cc_wait_state(mine, "src.np", "own", own[i], KEYLOAD__V1__TRANSFER_STATE__DELIVERED, 20000),
              "own %d not Delivered within 20 s", i);
    sleep_ms(600); /* a dozen more discovery rounds */
    for (int i = 0; i < 3; i++)
        CHECK(cc_state(other, "src.np", "foreign", foreign[i], NULL) == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING,
              "another principal's transfer %d was driven", i);
    CHECK(cc_messages(root, "dst.np") == 3, "dst.np holds %lld (want 3)", cc_messages(root, "dst.np"));
    CHECK(cc_log_count(0, "msg=\"dispatched\"", "source=src.np/foreign") == 0,
          "another principal's transfer was dispatched");
    CHECK(cc_exited_with(cc_coord_stop(0), 0), "drain");
    st = cc_status_load(0);
    long long foreign_seen = cc_counter(st, "skipped_foreign");
    json_decref(st);
    CHECK(foreign_seen >= 3, "skipped_foreign %lld (want >= 3: it saw them and left them)", foreign_seen);
    cc_keep = true;
}

/* ---- KL-6: retained failures, recovered ---- */

/* The generation a token's claims carry, 0 when it does not decode. */
static uint64_t cc_token_generation(const uint8_t *p, size_t n)
{
    Keyload__V1__SignedToken *t = keyload__v1__signed_token__unpack(NULL, n, p);
    if (t == NULL)
        return 0;
    Keyload__V1__TransferClaims *c = keyload__v1__transfer_claims__unpack(NULL, t->claims.len, t->claims.data);
    uint64_t g = c ? c->generation : 0;
    if (c)
        keyload__v1__transfer_claims__free_unpacked(c, NULL);
    keyload__v1__signed_token__free_unpacked(t, NULL);
    return g;
}

/* What the source says of a transfer: generation, how many history entries of `event`,
 * the current token (into *cur when not NULL). false on error. */
static bool cc_history(kl_client *c, const char *src, const char *tid, uint64_t *gen, uint32_t event, int *events,
                       cc_tok *cur)
{
    Keyload__V1__InspectQueueTransferAnswer *a = NULL;
    kl_err err;
    if (kl_client_inspect_transfer(c, src, NULL, tid, &a, &err) != KL_OK)
        return false;
    *gen = a->generation;
    *events = 0;
    for (size_t i = 0; i < a->n_history; i++)
        *events += a->history[i]->event == event;
    bool ok = cur == NULL ||
              cc_tok_set(cur, a->current_token.len ? a->current_token.data : a->intent_token.data,
                         a->current_token.len ? a->current_token.len : a->intent_token.len);
    kl_transfer_answer_free(a);
    return ok;
}

/* Receives one message of queue and acks it (makes room in a full queue); its body (up to
 * 63 bytes) into body when not NULL. */
static bool cc_drain_one(kl_client *root, const char *queue, char body[64])
{
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    kl_err err;
    if (kl_batch_new(NULL, &b, &err) != KL_OK || kl_batch_receive(b, queue, NULL, 1, 60000, &err) != KL_OK) {
        kl_batch_free(b);
        return false;
    }
    if (cc_send(root, b, &r, &err) != KL_OK || r->decoded->n_results != 1 ||
        r->decoded->results[0]->received->n_messages != 1) {
        kl_receipt_free(r);
        return false;
    }
    const Keyload__V1__ReceivedMessage *got = r->decoded->results[0]->received->messages[0];
    if (body != NULL) {
        size_t l = got->message->body.len < 63 ? got->message->body.len : 63;
        memcpy(body, got->message->body.data, l);
        body[l] = '\0';
    }
    kl_bytes lease = {got->lease_token.data, got->lease_token.len};
    bool ok = kl_batch_new(NULL, &b, &err) == KL_OK && kl_batch_ack(b, queue, &lease, 1, &err) == KL_OK &&
              cc_send(root, b, NULL, &err) == KL_OK;
    kl_receipt_free(r);
    return ok;
}

static kl_code cc_enqueue(kl_client *root, const char *queue, const char *body, kl_err *err)
{
    kl_batch *b = NULL;
    kl_message *m = NULL;
    kl_code rc = kl_message_new(body, strlen(body), &m, err);
    if (rc == KL_OK)
        rc = kl_batch_new(NULL, &b, err);
    if (rc == KL_OK)
        rc = kl_batch_enqueue(b, queue, NULL, m, err);
    kl_message_free(m);
    if (rc != KL_OK) {
        kl_batch_free(b);
        return rc;
    }
    return cc_send(root, b, NULL, err);
}

/* The coordinator's deterministic Accept command id of the transfer's current generation. */
static bool cc_accept_id(kl_client *c, const char *db, const char *src, const char *tid, char out[KL_GUID_TEXT_LEN + 1],
                         cc_tok *token, char *dlane, size_t dlane_cap)
{
    Keyload__V1__InspectQueueTransferAnswer *ia = NULL;
    kl_err err;
    if (kl_client_inspect_transfer(c, src, NULL, tid, &ia, &err) != KL_OK)
        return false;
    bool ok = cc_command_id("accept", "coord", db, ia, tid, out) &&
              cc_tok_set(token, ia->current_token.len ? ia->current_token.data : ia->intent_token.data,
                         ia->current_token.len ? ia->current_token.len : ia->intent_token.len);
    snprintf(dlane, dlane_cap, "%s", ia->destination ? ia->destination->lane : "");
    kl_transfer_answer_free(ia);
    return ok;
}

/* ---- CoordinatorPolicyRepairTests ---- */

#define RV_DB "acme/rv"
#define RV_N 3

void test_coord_revoked(void)
{
    CC_BEGIN("CoordinatorPolicyRepairTests");
    CHECK(cc_database(RV_DB, why, sizeof why), "%s", why);
    CHECK(cc_queue(RV_DB, "src.rv", CC_SRC, &err) == KL_OK, "queue: %s", err.message);
    CHECK(cc_queue(RV_DB, "dst.rv", CC_DST, &err) == KL_OK, "queue: %s", err.message);
    kl_client *op = cc_client(WHO_COORD, RV_DB), *root = cc_client(WHO_ROOT, RV_DB);
    CHECK(op && root, "clients");
    cc_id tid[RV_N];
    for (int i = 0; i < RV_N; i++) {
        char body[32];
        snprintf(body, sizeof body, "revoked-%d", i);
        kl_command_id_new(tid[i]);
        CHECK(cc_create(op, "src.rv", NULL, tid[i], "dst.rv", NULL, body, &err) == KL_OK, "create: %s", err.message);
    }
    cc_id cmd;
    kl_command_id_new(cmd);
    kl_principal_result pres;
    CHECK(kl_client_revoke(root, cmd, "coord", KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "dst.*", &pres, NULL, &err) ==
              KL_OK,
          "revoke: %s", err.message);

    cc_opts o = {.db = RV_DB, .who = WHO_COORD, .workers = 1, .flush_ms = 5, .discovery_ms = 50};
    CHECK(cc_coord_config(0, "rv", &o), "config");
    cc_coord_start(0, NULL);
    /* Each denied Accept is retained, and the fresh read says the epoch has not changed. */
    for (int i = 0; i < RV_N; i++)
        CHECK(cc_wait_log(0, "still=policy_epoch", tid[i], 20000) >= 1,
              "transfer %d: no unchanged-epoch failure read in %s", i, cc_coords[0].log);
    /* The status file is rewritten every 2 s. */
    long long terminal = -1, retained = -1;
    for (int64_t deadline = now_ms() + 10000; now_ms() < deadline && retained < RV_N; sleep_ms(200)) {
        json_t *st = cc_status_load(0);
        terminal = cc_counter(st, "terminal_failures");
        retained = cc_counter(st, "failures_retained");
        json_decref(st);
    }
    CHECK(terminal == 0 && retained >= RV_N, "terminal_failures %lld (want 0), failures_retained %lld (want >= %d)",
          terminal, retained, RV_N);
    for (int i = 0; i < RV_N; i++)
        CHECK(cc_state(op, "src.rv", NULL, tid[i], NULL) == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING,
              "transfer %d is not pending", i);
    CHECK(cc_messages(root, "dst.rv") == 0, "the destination has messages");

    /* By hand, under the coordinator's deterministic id (derived here): the committed
     * denial answers the same, and with the epoch unchanged no witness is signed, so no
     * repair can be made. */
    char acc[KL_GUID_TEXT_LEN + 1], dlane[64];
    cc_tok intent;
    CHECK(cc_accept_id(op, RV_DB, "src.rv", tid[0], acc, &intent, dlane, sizeof dlane), "deriving the command id");
    char needle[80];
    snprintf(needle, sizeof needle, "cmd=%s", acc);
    CHECK(cc_log_count(0, "msg=\"accept_sent\"", needle) == 1,
          "the coordinator sent the refused Accept %s %d times (want once: a retained failure is not resent)", acc,
          cc_log_count(0, "msg=\"accept_sent\"", needle));
    kl_batch *b = NULL;
    CHECK(kl_batch_new(acc, &b, &err) == KL_OK &&
              kl_batch_accept_transfer(b, "dst.rv", dlane, intent.b, intent.n, &err) == KL_OK,
          "build: %s", err.message);
    kl_code rc = cc_send(op, b, NULL, &err);
    CHECK(rc == KL_PERMISSION_DENIED, "the deterministic Accept: %s %s", kl_code_name(rc), err.detail);
    Keyload__V1__ReadQueueTransferFailureAnswer *fa = NULL;
    CHECK(kl_client_read_transfer_failure(op, "dst.rv", dlane, intent.b, intent.n, acc, &fa, &err) == KL_OK,
          "failure read: %s %s", kl_code_name(err.code), err.message);
    bool unchanged = fa->verdict == KEYLOAD__V1__FAILURE_VERDICT__UNCHANGED && fa->witness_token.len == 0 &&
                     strcmp(fa->unchanged_detail, "policy_epoch") == 0 && fa->failure_code == KL_PERMISSION_DENIED;
    kl_transfer_failure_answer_free(fa);
    CHECK(unchanged, "with the epoch unchanged the failure read must answer Unchanged policy_epoch, no witness");

    /* Restoring the grant is a real persisted policy change: the coordinator's next read
     * gets a witness, repairs to generation 2, and delivers each exactly once. */
    int64_t t_fix = now_ms();
    CHECK(cc_grant(RV_DB, WHO_COORD, KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "dst.*", &err) == KL_OK,
          "restore the grant: %s", err.message);
    for (int i = 0; i < RV_N; i++)
        CHECK(cc_wait_state(op, "src.rv", NULL, tid[i], KEYLOAD__V1__TRANSFER_STATE__DELIVERED, 30000),
              "transfer %d not Delivered within 30 s of the restore (log %s)", i, cc_coords[0].log);
    fprintf(stderr, "    %d transfers repaired and delivered %lld ms after the grant came back\n", RV_N,
            (long long)(now_ms() - t_fix));
    CHECK(cc_exited_with(cc_coord_stop(0), 0), "drain");
    CHECK(cc_messages(root, "dst.rv") == RV_N, "dst.rv holds %lld (want %d)", cc_messages(root, "dst.rv"), RV_N);
    for (int i = 0; i < RV_N; i++) {
        uint64_t gen = 0;
        int repaired = 0;
        CHECK(cc_history(op, "src.rv", tid[i], &gen, KEYLOAD__V1__TRANSFER_EVENT__POLICY_REPAIRED, &repaired, NULL),
              "inspect %d", i);
        CHECK(gen == 2 && repaired == 1, "transfer %d: generation %llu, %d PolicyRepaired entries (want 2, 1)", i,
              (unsigned long long)gen, repaired);
        cc_tok rt;
        CHECK(cc_state(op, "src.rv", NULL, tid[i], &rt) == KEYLOAD__V1__TRANSFER_STATE__DELIVERED &&
                  cc_token_generation(rt.b, rt.n) == 2,
              "transfer %d: the receipt is not generation 2's", i);
        CHECK(cc_log_count(0, "kind=repair", tid[i]) == 1, "transfer %d: %d repairs logged (want 1)", i,
              cc_log_count(0, "kind=repair", tid[i]));
    }
    /* The historical denial still answers the same: restoring policy minted no new id. */
    CHECK(kl_batch_new(acc, &b, &err) == KL_OK &&
              kl_batch_accept_transfer(b, "dst.rv", dlane, intent.b, intent.n, &err) == KL_OK,
          "build: %s", err.message);
    rc = cc_send(op, b, NULL, &err);
    CHECK(rc == KL_PERMISSION_DENIED, "the generation-1 Accept after the repair: %s (want its committed denial)",
          kl_code_name(rc));
    CHECK(cc_messages(root, "dst.rv") == RV_N, "a resent Accept added a message");

    /* A denied Complete: the source publish grant revoked after the create, so the Accept
     * commits and the Complete is refused; retained, read on the source (unchanged while
     * revoked), repaired once the grant is back, then completed at generation 2 with the
     * generation-1 receipt. */
    cc_id tc;
    kl_command_id_new(tc);
    CHECK(cc_create(op, "src.rv", NULL, tc, "dst.rv", NULL, "denied-complete", &err) == KL_OK, "create: %s",
          err.message);
    kl_command_id_new(cmd);
    CHECK(kl_client_revoke(root, cmd, "coord", KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "src.*", &pres, NULL, &err) ==
              KL_OK,
          "revoke src.*: %s", err.message);
    CHECK(cc_coord_config(0, "rv2", &o), "config");
    cc_coord_start(0, NULL);
    CHECK(cc_wait_log(0, "still=policy_epoch", tc, 20000) >= 1, "the denied Complete was not retained (log %s)",
          cc_coords[0].log);
    CHECK(cc_messages(root, "dst.rv") == RV_N + 1, "the Accept before the denied Complete did not commit");
    CHECK(cc_state(op, "src.rv", NULL, tc, NULL) == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING, "not pending");
    CHECK(cc_grant(RV_DB, WHO_COORD, KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "src.*", &err) == KL_OK,
          "restore src.*: %s", err.message);
    CHECK(cc_wait_state(op, "src.rv", NULL, tc, KEYLOAD__V1__TRANSFER_STATE__DELIVERED, 30000),
          "the denied Complete was not repaired and delivered (log %s)", cc_coords[0].log);
    CHECK(cc_exited_with(cc_coord_stop(0), 0), "drain");
    uint64_t gen = 0;
    int repaired = 0;
    cc_tok rt;
    CHECK(cc_history(op, "src.rv", tc, &gen, KEYLOAD__V1__TRANSFER_EVENT__POLICY_REPAIRED, &repaired, NULL) &&
              gen == 2 && repaired == 1,
          "denied Complete: generation %llu, %d repairs (want 2, 1)", (unsigned long long)gen, repaired);
    CHECK(cc_state(op, "src.rv", NULL, tc, &rt) == KEYLOAD__V1__TRANSFER_STATE__DELIVERED &&
              cc_token_generation(rt.b, rt.n) == 1,
          "denied Complete: the receipt is not the generation-1 Accept's");
    CHECK(cc_log_count(0, "step=complete", tc) == 1 && cc_log_count(0, "kind=repair", tc) == 1,
          "denied Complete: the witness and the repair are not logged once each");
    CHECK(cc_messages(root, "dst.rv") == RV_N + 1, "dst.rv holds %lld (want %d)", cc_messages(root, "dst.rv"),
          RV_N + 1);
    cc_keep = true;
}

/* ---- CoordinatorCapacityRetryTests ---- */

#define CAP_DB "acme/cap"

/* kill -9 of the source partition's leader, and its restart (it rejoins as a follower). */
static bool cc_kill_source_leader(char *why, size_t cap)
{
    int l = cc_leader(CC_SRC);
    if (l < 0) {
        snprintf(why, cap, "partition %d has no leader", CC_SRC);
        return false;
    }
    cc_kill(CC_SRC, l);
    fprintf(stderr, "    kill -9 p%dm%d (source leader)\n", CC_SRC, l);
    cc_spawn(CC_SRC, l);
    if (!cc_wait_all(30000)) {
        snprintf(why, cap, "no leader on every partition 30 s after killing p%dm%d", CC_SRC, l);
        return false;
    }
    return true;
}

/* A KL-6 suite's database: MaxQueueTransferAcceptAttempts 3, src (partition CC_SRC) and a
 * one-message dst (partition CC_DST) queue. */
static bool cc_capacity_db(const char *db, const char *src, const char *dst, char *why, size_t cap)
{
    kl_err err;
    if (!cc_database(db, why, cap))
        return false;
    kl_database_limits lim = {.has_max_queue_transfer_accept_attempts = true, .max_queue_transfer_accept_attempts = 3};
    cc_id cmd;
    kl_command_id_new(cmd);
    kl_limits_result lres;
    kl_batch *b = NULL;
    kl_queue_options qo = {.pin_partition = true, .partition = CC_DST, .max_messages = 1};
    if (kl_client_set_database_limits(cc_client(WHO_ROOT, db), cmd, &lim, &lres, NULL, &err) != KL_OK ||
        cc_queue(db, src, CC_SRC, &err) != KL_OK || kl_batch_new(NULL, &b, &err) != KL_OK ||
        kl_batch_create_queue(b, dst, &qo, &err) != KL_OK || cc_send(cc_client(WHO_ROOT, db), b, NULL, &err) != KL_OK) {
        kl_batch_free(b);
        snprintf(why, cap, "%s: limits and queues: %s %s", db, kl_code_name(err.code), err.message);
        return false;
    }
    return true;
}

void test_coord_capacity(void)
{
    CC_BEGIN("CoordinatorCapacityRetryTests");
    CHECK(cc_capacity_db(CAP_DB, "src.cap", "dst.cap", why, sizeof why), "%s", why);
    kl_client *op = cc_client(WHO_COORD, CAP_DB), *root = cc_client(WHO_ROOT, CAP_DB);
    CHECK(op && root, "clients");
    kl_batch *b = NULL;
    CHECK(cc_enqueue(root, "dst.cap", "filler", &err) == KL_OK, "filler: %s", err.message);
    cc_id t1;
    kl_command_id_new(t1);
    CHECK(cc_create(op, "src.cap", NULL, t1, "dst.cap", NULL, "capacity-1", &err) == KL_OK, "create: %s", err.message);

    /* Cut 1, between witness and Advance: the quota refusal is retained; room is made; the
     * fresh read issues a witness and the coordinator exits before sending the Advance. */
    cc_opts o = {.db = CAP_DB, .who = WHO_COORD, .workers = 1, .flush_ms = 5, .discovery_ms = 50};
    CHECK(cc_coord_config(0, "cap", &o), "config");
    cc_coord_start(0, "coord.before_advance=exit");
    CHECK(cc_wait_log(0, "failure_retained", t1, 20000) >= 1, "no retained failure (log %s)", cc_coords[0].log);
    CHECK(cc_messages(root, "dst.cap") == 1, "dst.cap changed while full");
    CHECK(cc_drain_one(root, "dst.cap", NULL), "draining the filler");
    int st = cc_coord_wait(0, 30000);
    CHECK(cc_exited_with(st, CC_EXIT_FAILPOINT), "the coordinator did not exit at coord.before_advance (log %s)",
          cc_coords[0].log);
    CHECK(cc_log_count(0, "verdict=witness", t1) == 1, "no witness logged before the cut");
    uint64_t gen = 0;
    int adv = 0;
    CHECK(cc_history(op, "src.cap", t1, &gen, KEYLOAD__V1__TRANSFER_EVENT__ATTEMPT_ADVANCED, &adv, NULL) && gen == 1 &&
              adv == 0,
          "after the cut before Advance: generation %llu, %d advances (want 1, 0)", (unsigned long long)gen, adv);
    CHECK(cc_messages(root, "dst.cap") == 0, "a message appeared without an Accept");

    /* Cut 2, between Advance and the next Accept, with the source leader killed -9 first:
     * a restarted coordinator learns the failure again from the committed refusal (same
     * command id), reads a witness, advances and exits before any Accept of generation 2. */
    CHECK(cc_kill_source_leader(why, sizeof why), "%s", why);
    CHECK(cc_coord_config(0, "cap2", &o), "config");
    cc_coord_start(0, "coord.after_advance=exit");
    st = cc_coord_wait(0, 40000);
    CHECK(cc_exited_with(st, CC_EXIT_FAILPOINT), "the coordinator did not exit at coord.after_advance (log %s)",
          cc_coords[0].log);
    cc_tok g2;
    CHECK(cc_history(op, "src.cap", t1, &gen, KEYLOAD__V1__TRANSFER_EVENT__ATTEMPT_ADVANCED, &adv, &g2) && gen == 2 &&
              adv == 1,
          "after the cut after Advance: generation %llu, %d advances (want 2, 1)", (unsigned long long)gen, adv);
    CHECK(cc_token_generation(g2.b, g2.n) == 2, "the current token is not generation 2's");
    CHECK(cc_messages(root, "dst.cap") == 0, "the destination has a message before generation 2 was accepted");

    /* Then the source leader again, and a coordinator without cuts: exactly one message. */
    CHECK(cc_kill_source_leader(why, sizeof why), "%s", why);
    CHECK(cc_coord_config(0, "cap3", &o), "config");
    cc_coord_start(0, NULL);
    CHECK(cc_wait_state(op, "src.cap", NULL, t1, KEYLOAD__V1__TRANSFER_STATE__DELIVERED, 30000),
          "not Delivered after the cuts (log %s)", cc_coords[0].log);
    cc_tok rt;
    CHECK(cc_state(op, "src.cap", NULL, t1, &rt) == KEYLOAD__V1__TRANSFER_STATE__DELIVERED &&
              cc_token_generation(rt.b, rt.n) == 2,
          "the receipt is not generation 2's");
    char body[64] = "";
    CHECK(cc_messages(root, "dst.cap") == 1 && cc_drain_one(root, "dst.cap", body) &&
              strcmp(body, "capacity-1") == 0,
          "dst.cap does not hold exactly the one transferred message (got '%s')", body);

    /* A receipt that appears meanwhile wins over any witness: the queue is full again, a
     * second transfer's Accept is refused and retained; while the coordinator holds that
     * failure an operator, in ONE batch, acks the filler and accepts the transfer by hand
     * under a new id (so no read ever sees room without the receipt); the coordinator's
     * next fresh read finds that receipt and completes at generation 1, with no advance. */
    CHECK(cc_exited_with(cc_coord_stop(0), 0), "drain");
    CHECK(cc_enqueue(root, "dst.cap", "filler-2", &err) == KL_OK, "filler: %s", err.message);
    cc_id t2;
    kl_command_id_new(t2);
    CHECK(cc_create(op, "src.cap", NULL, t2, "dst.cap", NULL, "capacity-2", &err) == KL_OK, "create: %s", err.message);
    CHECK(cc_coord_config(0, "cap4", &o), "config");
    cc_coord_start(0, NULL);
    CHECK(cc_wait_log(0, "failure_retained", t2, 20000) >= 1, "no retained failure for the second transfer");
    char acc[KL_GUID_TEXT_LEN + 1], dlane[64];
    cc_tok intent;
    CHECK(cc_accept_id(op, CAP_DB, "src.cap", t2, acc, &intent, dlane, sizeof dlane), "command id");
    kl_receipt *r = NULL;
    CHECK(kl_batch_new(NULL, &b, &err) == KL_OK && kl_batch_receive(b, "dst.cap", NULL, 1, 60000, &err) == KL_OK &&
              cc_send(root, b, &r, &err) == KL_OK && r->decoded->results[0]->received->n_messages == 1,
          "leasing the filler: %s", err.message);
    kl_bytes lease = {r->decoded->results[0]->received->messages[0]->lease_token.data,
                      r->decoded->results[0]->received->messages[0]->lease_token.len};
    cc_id manual;
    kl_command_id_new(manual);
    /* The operator is "coord" (only the intent's principal may accept); it may not ack, so
     * root grants it QueueConsume/QueueAck on dst.cap first. */
    CHECK(cc_grant(CAP_DB, WHO_COORD, KEYLOAD__V1__PERMISSION__QUEUE_ACK, "dst.*", &err) == KL_OK, "grant: %s",
          err.message);
    CHECK(kl_batch_new(manual, &b, &err) == KL_OK && kl_batch_ack(b, "dst.cap", &lease, 1, &err) == KL_OK &&
              kl_batch_accept_transfer(b, "dst.cap", dlane, intent.b, intent.n, &err) == KL_OK &&
              cc_send(op, b, NULL, &err) == KL_OK,
          "operator ack + Accept: %s %s (%s)", kl_code_name(err.code), err.detail, err.message);
    kl_receipt_free(r);
    CHECK(cc_wait_state(op, "src.cap", NULL, t2, KEYLOAD__V1__TRANSFER_STATE__DELIVERED, 30000),
          "the second transfer not Delivered (log %s)", cc_coords[0].log);
    CHECK(cc_log_count(0, "verdict=receipt_exists", t2) == 1, "the fresh read did not find the receipt (log %s)",
          cc_coords[0].log);
    CHECK(cc_log_count(0, "verdict=witness", t2) == 0, "a witness was issued although the receipt existed");
    CHECK(cc_history(op, "src.cap", t2, &gen, KEYLOAD__V1__TRANSFER_EVENT__ATTEMPT_ADVANCED, &adv, NULL) && gen == 1 &&
              adv == 0,
          "second transfer: generation %llu, %d advances (want 1, 0)", (unsigned long long)gen, adv);
    CHECK(cc_state(op, "src.cap", NULL, t2, &rt) == KEYLOAD__V1__TRANSFER_STATE__DELIVERED &&
              cc_token_generation(rt.b, rt.n) == 1,
          "the second receipt is not generation 1's");
    CHECK(cc_messages(root, "dst.cap") == 1, "dst.cap holds %lld (want 1)", cc_messages(root, "dst.cap"));
    CHECK(cc_exited_with(cc_coord_stop(0), 0), "drain");
    cc_keep = true;
}

/* ---- RemoteTransferAdvanceTests (by hand through the SDK, no coordinator) ---- */

#define ADV_DB "acme/adv"

/* One capacity round by hand: fill dst.adv, Accept `token` under a fresh id (refused
 * RESOURCE_EXHAUSTED), make room, read the failure: a witness into *w. */
static bool adv_round(kl_client *op, kl_client *root, const cc_tok *token, cc_tok *w, char *why, size_t cap)
{
    kl_err err;
    cc_id acc;
    kl_command_id_new(acc);
    kl_batch *b = NULL;
    if (cc_enqueue(root, "dst.adv", "filler", &err) != KL_OK) {
        snprintf(why, cap, "filler: %s", err.message);
        return false;
    }
    if (kl_batch_new(acc, &b, &err) != KL_OK ||
        kl_batch_accept_transfer(b, "dst.adv", NULL, token->b, token->n, &err) != KL_OK) {
        kl_batch_free(b);
        snprintf(why, cap, "build: %s", err.message);
        return false;
    }
    kl_code rc = cc_send(op, b, NULL, &err);
    if (rc != KL_RESOURCE_EXHAUSTED) {
        snprintf(why, cap, "Accept into a full queue: %s (want RESOURCE_EXHAUSTED)", kl_code_name(rc));
        return false;
    }
    if (!cc_drain_one(root, "dst.adv", NULL)) {
        snprintf(why, cap, "making room");
        return false;
    }
    Keyload__V1__ReadQueueTransferFailureAnswer *fa = NULL;
    int64_t t0 = now_ms();
    kl_code frc = kl_client_read_transfer_failure(op, "dst.adv", NULL, token->b, token->n, acc, &fa, &err);
    fprintf(stderr, "    failure read (RF3, sealed, read barrier): %lld ms\n", (long long)(now_ms() - t0));
    if (frc != KL_OK) {
        snprintf(why, cap, "failure read: %s %s", kl_code_name(err.code), err.message);
        return false;
    }
    bool ok = fa->verdict == KEYLOAD__V1__FAILURE_VERDICT__WITNESS_ISSUED &&
              cc_tok_set(w, fa->witness_token.data, fa->witness_token.len);
    kl_transfer_failure_answer_free(fa);
    if (!ok)
        snprintf(why, cap, "the failure read issued no witness after room was made");
    return ok;
}

static kl_code adv_send(kl_client *op, const char *tid, const cc_tok *w, Keyload__V1__TransferAdvanced *out,
                        kl_err *err)
{
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    kl_code rc = kl_batch_new(NULL, &b, err);
    if (rc == KL_OK)
        rc = kl_batch_advance_transfer_attempt(b, "src.adv", NULL, tid, w->b, w->n, err);
    if (rc != KL_OK) {
        kl_batch_free(b);
        return rc;
    }
    if ((rc = cc_send(op, b, &r, err)) == KL_OK) {
        const Keyload__V1__TransferAdvanced *ta = r->decoded->results[0]->transfer_advanced;
        out->generation = ta->generation;
        out->charged_bytes = ta->charged_bytes;
    }
    kl_receipt_free(r);
    return rc;
}

/* Inspect's accounting of the intent. */
static bool adv_counts(kl_client *op, const char *tid, uint64_t *gen, uint64_t *recs, uint64_t *bytes,
                       uint64_t *reserved, cc_tok *cur)
{
    Keyload__V1__InspectQueueTransferAnswer *a = NULL;
    kl_err err;
    if (kl_client_inspect_transfer(op, "src.adv", NULL, tid, &a, &err) != KL_OK)
        return false;
    *gen = a->generation;
    *recs = a->retained_records;
    *bytes = a->retained_bytes - a->reserved_bytes; /* charged, the reservation aside */
    *reserved = a->reserved_records;
    bool ok = cc_tok_set(cur, a->current_token.data, a->current_token.len);
    kl_transfer_answer_free(a);
    return ok;
}

void test_coord_advance(void)
{
    CC_BEGIN("RemoteTransferAdvanceTests");
    CHECK(cc_capacity_db(ADV_DB, "src.adv", "dst.adv", why, sizeof why), "%s", why);
    kl_client *op = cc_client(WHO_COORD, ADV_DB), *root = cc_client(WHO_ROOT, ADV_DB);
    CHECK(op && root, "clients");
    kl_batch *b = NULL;
    cc_id cmd;
    cc_id tid;
    kl_command_id_new(tid);
    CHECK(cc_create(op, "src.adv", NULL, tid, "dst.adv", NULL, "advance-me", &err) == KL_OK, "create: %s",
          err.message);
    uint64_t gen, recs, charged, reserved;
    cc_tok cur, w;
    CHECK(adv_counts(op, tid, &gen, &recs, &charged, &reserved, &cur) && gen == 1 && recs == 3 && reserved == 2,
          "a new intent under a ceiling of 3: generation %llu, %llu records, %llu reserved (want 1, 3, 2)",
          (unsigned long long)gen, (unsigned long long)recs, (unsigned long long)reserved);
    CHECK(adv_round(op, root, &cur, &w, why, sizeof why), "round 1: %s", why);

    /* Forgeries on the wire: a flipped signature byte, and the genuine witness replayed as
     * a repair; each refused with the generation unchanged. */
    cc_tok bad = w;
    bad.b[bad.n - 1] ^= 1;
    Keyload__V1__TransferAdvanced res = KEYLOAD__V1__TRANSFER_ADVANCED__INIT;
    kl_code rc = adv_send(op, tid, &bad, &res, &err);
    CHECK(rc == KL_PERMISSION_DENIED && strcmp(err.detail, "witness_signature") == 0,
          "a tampered witness: %s %s (want PERMISSION_DENIED witness_signature)", kl_code_name(rc), err.detail);
    CHECK(kl_batch_new(NULL, &b, &err) == KL_OK &&
              kl_batch_advance_transfer_repair(b, "src.adv", NULL, tid, w.b, w.n, &err) == KL_OK,
          "build: %s", err.message);
    rc = cc_send(op, b, NULL, &err);
    CHECK(rc == KL_FAILED_PRECONDITION && strcmp(err.detail, "witness:failure_code") == 0,
          "a capacity witness as a repair: %s %s", kl_code_name(rc), err.detail);
    CHECK(adv_counts(op, tid, &gen, &recs, &charged, &reserved, &cur) && gen == 1, "generation moved to %llu",
          (unsigned long long)gen);

    /* Two advances, each exactly one record (out of the reservation) plus its bytes; the
     * third is refused exactly at the ceiling. */
    for (int k = 1; k <= 3; k++) {
        if (k > 1)
            CHECK(adv_round(op, root, &cur, &w, why, sizeof why), "round %d: %s", k, why);
        uint64_t before = charged, r0 = reserved;
        int64_t t0 = now_ms();
        rc = adv_send(op, tid, &w, &res, &err);
        fprintf(stderr, "    advance %d call: %lld ms (%s)\n", k, (long long)(now_ms() - t0), kl_code_name(rc));
        if (k == 3) {
            CHECK(rc == KL_RESOURCE_EXHAUSTED && strcmp(err.detail, "limit:MaxQueueTransferAcceptAttempts") == 0,
                  "advance past the ceiling: %s %s", kl_code_name(rc), err.detail);
            CHECK(adv_counts(op, tid, &gen, &recs, &charged, &reserved, &cur) && gen == 3 && charged == before,
                  "after the refusal: generation %llu (want 3), charged %llu (want %llu)", (unsigned long long)gen,
                  (unsigned long long)charged, (unsigned long long)before);
            break;
        }
        CHECK(rc == KL_OK && res.generation == (uint64_t)k + 1, "advance %d: %s %s", k, kl_code_name(rc), err.message);
        CHECK(adv_counts(op, tid, &gen, &recs, &charged, &reserved, &cur) && gen == (uint64_t)k + 1 && recs == 3 &&
                  reserved == r0 - 1 && charged == before + res.charged_bytes && res.charged_bytes > 0,
              "advance %d: generation %llu records %llu reserved %llu charged %llu -> %llu by %llu", k,
              (unsigned long long)gen, (unsigned long long)recs, (unsigned long long)reserved,
              (unsigned long long)before, (unsigned long long)charged, (unsigned long long)res.charged_bytes);
        fprintf(stderr, "    advance %d: generation %llu, charged one record and %llu bytes\n", k,
                (unsigned long long)gen, (unsigned long long)res.charged_bytes);
    }
    /* Generation 3's Accept still goes through once there is room: exactly one message. */
    kl_command_id_new(cmd);
    CHECK(kl_batch_new(cmd, &b, &err) == KL_OK &&
              kl_batch_accept_transfer(b, "dst.adv", NULL, cur.b, cur.n, &err) == KL_OK &&
              cc_send(op, b, NULL, &err) == KL_OK,
          "generation 3 Accept: %s %s", kl_code_name(err.code), err.message);
    cc_tok rt;
    CHECK(cc_receipt(op, "dst.adv", "src.adv", NULL, tid, &rt, &err) == KL_OK && cc_token_generation(rt.b, rt.n) == 3,
          "the receipt is not generation 3's");
    CHECK(cc_messages(root, "dst.adv") == 1, "dst.adv holds %lld (want 1)", cc_messages(root, "dst.adv"));
    cc_keep = true;
}

/* ---- CoordinatorBacklogTests ---- */

#define BIG_DB "acme/big"
#define BIG_LANES 50      /* per direction */
#define BIG_PER_LANE 100  /* 2 x 50 x 100 = 10,000 */
#define BIG_TOTAL (2 * BIG_LANES * BIG_PER_LANE)
#define BIG_WORKERS 32
#define BIG_BUFFER 64     /* 32 x 64 = 2,048 events at most: well under the backlog */
#define BIG_RSS_MAX_KIB (64L * 1024)

void test_coord_backlog(void)
{
    CC_BEGIN("CoordinatorBacklogTests");
    CHECK(cc_database(BIG_DB, why, sizeof why), "%s", why);
    /* Both directions, so both data partitions' leaders share the work. */
    CHECK(cc_queue(BIG_DB, "src.big1", 1, &err) == KL_OK && cc_queue(BIG_DB, "dst.big2", 2, &err) == KL_OK &&
              cc_queue(BIG_DB, "src.big2", 2, &err) == KL_OK && cc_queue(BIG_DB, "dst.big1", 1, &err) == KL_OK,
          "queues: %s", err.message);
    cc_plan plans[2] = {
        {.db = BIG_DB, .src = "src.big1", .dst = "dst.big2", .tag = "a", .who = WHO_COORD, .lanes = BIG_LANES,
         .per_lane = BIG_PER_LANE, .per_batch = 50},
        {.db = BIG_DB, .src = "src.big2", .dst = "dst.big1", .tag = "b", .who = WHO_COORD, .lanes = BIG_LANES,
         .per_lane = BIG_PER_LANE, .per_batch = 50},
    };
    int64_t t0 = now_ms();
    long made = cc_make_all(plans, 2, 6, why, sizeof why);
    CHECK(made == BIG_TOTAL, "created %ld of %d: %s", made, BIG_TOTAL, why);
    int64_t t1 = now_ms();
    fprintf(stderr, "    %d intents created in %lld ms (12 threads, 50 Creates a batch)\n", BIG_TOTAL,
            (long long)(t1 - t0));
    CHECK(cc_cold_restart(), "the cluster did not serve again within 40 s");
    kl_client *root = cc_client(WHO_ROOT, BIG_DB), *op = cc_client(WHO_COORD, BIG_DB);
    CHECK(root && op, "clients");
    CHECK(cc_pending_on(op, 1, 1000) == 1000 && cc_pending_on(op, 2, 1000) == 1000,
          "pending after the cold restart: not a full page on each partition");

    cc_opts o = {.db = BIG_DB, .who = WHO_COORD, .workers = BIG_WORKERS, .flush_ms = 1, .buffer = BIG_BUFFER,
                 .discovery_ms = 200, .max_records = 256, .call_timeout_ms = 5000};
    CHECK(cc_coord_config(0, "big", &o), "config");
    int64_t t2 = now_ms();
    cc_coord_start(0, NULL);
    pid_t pid = cc_coords[0].pid;
    int64_t deadline = now_ms() + 170000;
    long p1 = -1, p2 = -1;
    long long held = -1;
    long peak = -1;
    int64_t last_print = now_ms();
    while (now_ms() < deadline) {
        long hwm = cc_vmhwm_kib(pid);
        if (hwm > peak)
            peak = hwm;
        p1 = cc_pending_on(op, 1, 1);
        p2 = cc_pending_on(op, 2, 1);
        long long h1 = cc_messages(root, "dst.big1"), h2 = cc_messages(root, "dst.big2");
        held = h1 >= 0 && h2 >= 0 ? h1 + h2 : -1;
        if (p1 == 0 && p2 == 0 && held >= BIG_TOTAL)
            break;
        if (now_ms() - last_print >= 10000) {
            fprintf(stderr, "    ... %lld delivered after %lld ms, VmHWM %ld KiB\n", held, (long long)(now_ms() - t2),
                    peak);
            last_print = now_ms();
        }
        sleep_ms(250);
    }
    int64_t t3 = now_ms();
    long hwm = cc_vmhwm_kib(pid);
    if (hwm > peak)
        peak = hwm;
    int stop = cc_coord_stop(0);
    json_t *st = cc_status_load(0);
    fprintf(stderr, "    %lld of %d delivered in %lld ms (%.0f transfers/s; 32 workers, 1 ms flush, buffer %d); "
                    "coordinator VmHWM %ld KiB (%.1f MiB); retries %lld, buffer_full %lld, terminal %lld\n",
            held, BIG_TOTAL, (long long)(t3 - t2), held > 0 ? held * 1000.0 / (double)(t3 - t2) : 0.0, BIG_BUFFER,
            peak, peak / 1024.0, cc_counter(st, "retries"), cc_counter(st, "buffer_full"),
            cc_counter(st, "terminal_failures"));
    json_decref(st);
    CHECK(p1 == 0 && p2 == 0 && held == BIG_TOTAL, "after %lld ms: pending %ld + %ld, destination messages %lld "
          "(want 0, 0, %d; log %s)", (long long)(t3 - t2), p1, p2, held, BIG_TOTAL, cc_coords[0].log);
    CHECK(peak > 0 && peak < BIG_RSS_MAX_KIB, "coordinator VmHWM %ld KiB (want under %ld)", peak, BIG_RSS_MAX_KIB);
    CHECK(cc_exited_with(stop, 0), "drain: wait status %d", stop);
    /* Every partition's listing is empty, partition 0's too (the catalog partition holds
     * none of these queues; it must say so rather than fail). */
    long p0 = cc_pending_on(op, 0, 1000);
    CHECK(p0 == 0 && cc_pending_on(op, 1, 1000) == 0 && cc_pending_on(op, 2, 1000) == 0,
          "pending after delivery: partition 0 %ld, 1 %ld, 2 %ld", p0, cc_pending_on(op, 1, 1000),
          cc_pending_on(op, 2, 1000));
    /* The lanes hold exactly what was sent: 100 per destination lane. */
    char lane[16];
    snprintf(lane, sizeof lane, "l%02d", BIG_LANES - 1);
    CHECK(cc_receive(root, "dst.big1", lane, 1000, NULL) == BIG_PER_LANE &&
              cc_receive(root, "dst.big2", lane, 1000, NULL) == BIG_PER_LANE,
          "a destination lane does not hold %d messages", BIG_PER_LANE);
    cc_keep = true;
}
