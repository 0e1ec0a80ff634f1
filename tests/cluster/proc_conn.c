/* Process tests of sessions, connections and peer configuration under faults, on a real
 * cluster of two partitions with one member each (replica_count 1), member keys and a
 * cluster secret, on loopback ports 27000..27999. Every process is started by fork/exec
 * and killed by its pid (cn_stop_all also after a failed check).
 *
 * Catalog behind: partition 1's member is killed, a principal is created meanwhile,
 * partition 0 is paused (SIGSTOP) and partition 1 restarted: it cannot have the principal
 * yet, so a Hello for it must be UNAVAILABLE "catalog_behind" (retryable), never
 * UNAUTHENTICATED; the SDK, retrying by the README's rule, gets its answer once partition
 * 0 continues. Where the catalog is current (partition 0's serving leader, partition 1
 * after catching up) an unknown principal is still UNAUTHENTICATED "principal".
 *
 * Limits (same layout, connections.client_max 4, client_idle_ms 1500, sessions_max 8,
 * sessions_per_tenant 3): a Hello sent again is refused "hello_replayed"; tenant acme's
 * many Hellos evict only its own sessions, never tenant beta's; a fifth connection to a
 * member is closed unserved; an idle one is closed after the timeout. Each is counted in
 * MemberStatus.sessions.
 *
 * Peer configuration (one partition of three members on ports 28000..28999, keys): member
 * 3's cluster file says replica_count 3, the others' 2; members 1 and 2 refuse its
 * handshakes (counted, logged with both digests) and still commit between them. */
#include "tests/cluster/proc.h"

#include "client/keyload.h"
#include "common/keys.h"
#include "common/rpc.h"
#include "common/session.h"
#include "keyload/v1/catalog.pb-c.h"
#include "keyload/v1/session.pb-c.h"

#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CN_PARTS 2
#define CN_DB "acme/conn"

static char cn_file[700], cn_secret[700], cn_mkey[CN_PARTS][700], cn_admin_key[700];
static char cn_url[CN_PARTS][64];
static char cn_name[64];
static pid_t cn_pid[CN_PARTS] = {-1, -1};
static bool cn_stopped[CN_PARTS];
static int cn_base;

static int64_t cn_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void cn_kill(int p)
{
    if (cn_pid[p] <= 0)
        return;
    kill(cn_pid[p], SIGKILL);
    if (cn_stopped[p])
        kill(cn_pid[p], SIGCONT);
    waitpid(cn_pid[p], NULL, 0);
    cn_pid[p] = -1;
    cn_stopped[p] = false;
}

void cn_stop_all(void)
{
    for (int p = 0; p < CN_PARTS; p++)
        cn_kill(p);
}

static void cn_pause(int p, bool stop)
{
    if (cn_pid[p] <= 0)
        return;
    kill(cn_pid[p], stop ? SIGSTOP : SIGCONT);
    cn_stopped[p] = stop;
}

/* Keys and the cluster file; extra: more JSON members of the top object ("" or ",..."). */
static bool cn_write(const char *name, const char *extra)
{
    static int seq;
    snprintf(cn_name, sizeof cn_name, "%s", name);
    cn_base = 27000 + (getpid() % 45) * 20 + (seq++ % 2) * 10;
    char pub[CN_PARTS][128];
    snprintf(cn_secret, sizeof cn_secret, "%s/%s.secret", work, name);
    snprintf(cn_admin_key, sizeof cn_admin_key, "%s/%s-admin.key", work, name);
    unlink(cn_admin_key);
    for (int p = 0; p < CN_PARTS; p++) {
        snprintf(cn_mkey[p], sizeof cn_mkey[p], "%s/%s-p%dm1.key", work, name, p);
        bool ok = p == 0 ? keygen_files(cn_secret, cn_mkey[p], pub[p], sizeof pub[p])
                         : member_keygen(cn_mkey[p], pub[p], sizeof pub[p]);
        if (!ok)
            return false;
    }
    snprintf(cn_file, sizeof cn_file, "%s/%s.json", work, name);
    FILE *f = fopen(cn_file, "w");
    if (f == NULL)
        return false;
    fprintf(f, "{\"cluster\":\"%s\",\"replica_count\":1%s,"
               "\"timers\":{\"tick_ms\":50,\"election_ms\":600,\"heartbeat_ms\":100,"
               "\"catalog_lease_ms\":1500},\"partitions\":[", name, extra);
    for (int p = 0; p < CN_PARTS; p++) {
        snprintf(cn_url[p], sizeof cn_url[p], "tcp://127.0.0.1:%d", cn_base + p);
        fprintf(f, "%s{\"id\":%d,\"members\":[{\"id\":1,\"client\":\"%s\","
                   "\"peer\":\"tcp://127.0.0.1:%d\",\"data\":\"%s/%s-p%dm1\",\"public_key\":\"%s\"}]}",
                p ? "," : "", p, cn_url[p], cn_base + 5 + p, work, name, p, pub[p]);
    }
    fprintf(f, "]}\n");
    fclose(f);
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/%s-p0m1' '%s/%s-p1m1'", work, name, work, name);
    return system(cmd) == 0;
}

static void cn_spawn(int p) { cn_pid[p] = spawn_keyloadd(cn_file, p, 1, cn_secret, cn_mkey[p]); }

/* Member p's status; NULL when it does not answer. */
static Keyload__V1__MemberStatusAnswer *cn_status(int p) { return member_status(cn_url[p], 1000); }

/* Member p serves (with a valid catalog lease on partition 1) within timeout_ms. */
static bool cn_wait_serving(int p, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    while (now_ms() < deadline) {
        Keyload__V1__MemberStatusAnswer *st = cn_status(p);
        bool ok = st != NULL && st->serving && (p == 0 || st->catalog_lease_valid);
        if (st != NULL)
            keyload__v1__member_status_answer__free_unpacked(st, NULL);
        if (ok)
            return true;
        sleep_ms(50);
    }
    return false;
}

/* Member p answers MemberStatus within timeout_ms. */
static bool cn_wait_up(int p, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    while (now_ms() < deadline) {
        Keyload__V1__MemberStatusAnswer *st = cn_status(p);
        if (st != NULL) {
            keyload__v1__member_status_answer__free_unpacked(st, NULL);
            return true;
        }
        sleep_ms(50);
    }
    return false;
}

static bool cn_start_all(void)
{
    for (int p = 0; p < CN_PARTS; p++)
        cn_spawn(p);
    return cn_wait_serving(0, 20000) && cn_wait_serving(1, 20000);
}

static bool cn_bootstrap(char *why, size_t cap)
{
    uint8_t pk[32], sk[64];
    kl_err err;
    crypto_sign_keypair(pk, sk);
    kl_code rc = kl_keys_write_secret_file("admin key file", cn_admin_key, sk, sizeof sk, &err);
    sodium_memzero(sk, sizeof sk);
    if (rc == KL_OK)
        rc = sdk_bootstrap(cn_file, cn_secret, CN_DB, "admin", pk, NULL, NULL, &err);
    if (rc != KL_OK)
        snprintf(why, cap, "%s: %s", kl_code_name(rc), err.message);
    return rc == KL_OK;
}

/* Creates principal id (a database administrator, key written to key_path) through the
 * admin client, the same command id again while partition 0 waits for partition 1. */
static kl_code cn_create_principal(kl_client *admin, const char *id, const char *key_path, kl_err *err)
{
    uint8_t pk[32];
    unlink(key_path);
    kl_code rc = kl_key_file_new(key_path, pk, err);
    char cmd[KL_COMMAND_ID_TEXT_LEN + 1];
    kl_command_id_new(cmd);
    int64_t deadline = now_ms() + 20000;
    while (rc == KL_OK || rc == KL_UNAVAILABLE || rc == KL_UNKNOWN_WRITE_OUTCOME) {
        rc = kl_client_create_principal(admin, cmd, id, pk, KL_ROLE_DATABASE_ADMIN, NULL, NULL, err);
        if (rc == KL_OK || now_ms() > deadline)
            break;
    }
    return rc;
}

/* The packed Hello of principal id (secret key from key_path; NULL: a fresh random key)
 * for member (p, 1) into buf (512 bytes); its length, 0 on failure. */
static size_t cn_hello_bytes(int p, const char *id, const char *key_path, uint8_t *buf)
{
    uint8_t secret[64], pk[32];
    kl_err err;
    if (key_path == NULL)
        crypto_sign_keypair(pk, secret);
    else if (kl_keys_read_secret_file("key", key_path, secret, sizeof secret, &err) != KL_OK)
        return 0;
    kl_session_client hc;
    kl_code rc = kl_session_hello_new(id, secret, cn_name, p, 1, cn_wall_ms(), NULL, NULL, &hc, &err);
    sodium_memzero(secret, sizeof secret);
    if (rc != KL_OK)
        return 0;
    Keyload__V1__Hello hm = KEYLOAD__V1__HELLO__INIT;
    kl_session_hello_to_pb(&hc.hello, &hm);
    size_t n = keyload__v1__hello__get_packed_size(&hm);
    if (n <= 512)
        keyload__v1__hello__pack(&hm, buf);
    kl_session_client_wipe(&hc);
    return n <= 512 ? n : 0;
}

/* Sends Hello bytes to member (p, 1) on a fresh connection: the answer's code (detail in
 * err). */
static kl_code cn_send_hello(int p, const uint8_t *hello, size_t len, kl_err *err)
{
    kl_rpc_client *c;
    kl_code rc = kl_rpc_client_open(cn_url[p], 1000, 0, &c, err);
    if (rc != KL_OK)
        return rc;
    uint8_t *ans = NULL;
    size_t ans_len = 0;
    rc = kl_rpc_invoke(c, "keyload.v1.Hello", hello, len, 2000, &ans, &ans_len, NULL, 0, err);
    free(ans);
    kl_rpc_client_close(c);
    return rc;
}

static kl_code cn_hello(int p, const char *id, const char *key_path, kl_err *err)
{
    uint8_t buf[512];
    size_t n = cn_hello_bytes(p, id, key_path, buf);
    if (n == 0)
        return kl_fail(err, KL_INTERNAL, "hello", "could not build the Hello");
    return cn_send_hello(p, buf, n, err);
}

/* The member's session counters (all zero when it does not answer). */
static Keyload__V1__MemberSessionStatus cn_counters(int p)
{
    Keyload__V1__MemberSessionStatus out = KEYLOAD__V1__MEMBER_SESSION_STATUS__INIT;
    Keyload__V1__MemberStatusAnswer *st = cn_status(p);
    if (st != NULL && st->sessions != NULL) {
        out = *st->sessions;
        out.base.unknown_fields = NULL;
        out.base.n_unknown_fields = 0;
    }
    if (st != NULL)
        keyload__v1__member_status_answer__free_unpacked(st, NULL);
    return out;
}

typedef struct cn_stats_call {
    kl_client *c;
    kl_code rc;
    kl_err err;
    int64_t took_ms;
} cn_stats_call;

static void *cn_stats_thread(void *arg)
{
    cn_stats_call *sc = arg;
    Keyload__V1__QueueStatsAnswer *st = NULL;
    int64_t t0 = now_ms();
    sc->rc = kl_client_queue_stats(sc->c, "q1", &st, &sc->err);
    sc->took_ms = now_ms() - t0;
    kl_queue_stats_free(st);
    return NULL;
}

/* The part of the catalog-behind test after partition 1 restarted with partition 0
 * paused; late is the new principal's client (its placement of q1 cached). */
static void cn_behind_checks(kl_client *late, const char *late_key)
{
    kl_err err;
    kl_err_clear(&err);
    kl_code rc = cn_hello(1, "late", late_key, &err);
    CHECK(rc == KL_UNAVAILABLE && strcmp(err.detail, "catalog_behind") == 0,
          "Hello of a principal created while partition 1 was down, to its restarted member that "
          "has not caught up: %s %s (%s), want UNAVAILABLE catalog_behind",
          kl_code_name(rc), err.detail, err.message);
    rc = cn_hello(1, "ghost", NULL, &err);
    CHECK(rc == KL_UNAVAILABLE && strcmp(err.detail, "catalog_behind") == 0,
          "Hello of an unknown principal to a member behind: %s %s", kl_code_name(rc), err.detail);
    Keyload__V1__MemberSessionStatus ss = cn_counters(1);
    CHECK(ss.hello_catalog_behind >= 2, "catalog_behind counted %llu times, want >= 2",
          (unsigned long long)ss.hello_catalog_behind);

    /* The SDK retries UNAVAILABLE: its call waits while partition 0 is paused and is
     * answered once partition 0 continues and partition 1 catches up. */
    cn_stats_call sc = {.c = late};
    kl_err_clear(&sc.err);
    pthread_t t;
    pthread_create(&t, NULL, cn_stats_thread, &sc);
    sleep_ms(1500);
    cn_pause(0, false);
    pthread_join(t, NULL);
    CHECK(sc.rc == KL_OK, "the late principal's queue stats on partition 1 through the SDK: %s %s (%s)",
          kl_code_name(sc.rc), sc.err.detail, sc.err.message);
    printf("  SDK queue stats answered %lld ms after it was sent (partition 0 paused for 1500 ms)\n",
           (long long)sc.took_ms);

    /* Where the catalog is current, an unknown principal is still refused for good. */
    CHECK(cn_wait_serving(1, 10000), "partition 1 did not catch up");
    rc = cn_hello(1, "ghost", NULL, &err);
    CHECK(rc == KL_UNAUTHENTICATED && strcmp(err.detail, "principal") == 0,
          "unknown principal at partition 1's current leader: %s %s", kl_code_name(rc), err.detail);
    rc = cn_hello(0, "ghost", NULL, &err);
    CHECK(rc == KL_UNAUTHENTICATED && strcmp(err.detail, "principal") == 0,
          "unknown principal at partition 0's leader: %s %s", kl_code_name(rc), err.detail);
    rc = cn_hello(1, "late", late_key, &err);
    CHECK(rc == KL_OK, "Hello of late after catching up: %s %s", kl_code_name(rc), err.detail);
    ss = cn_counters(1);
    CHECK(ss.hello_unknown_principal >= 1, "unknown principal not counted");
}

void test_conn_catalog_behind(void)
{
    char why[512], late_key[700];
    kl_err err;
    kl_err_clear(&err);
    CHECK(cn_write("conncat", ""), "keys or cluster file");
    CHECK(cn_start_all(), "the two partitions did not serve");
    CHECK(cn_bootstrap(why, sizeof why), "bootstrap: %s", why);
    kl_client *admin = NULL;
    CHECK(kl_client_open_principal(cn_file, CN_DB, 10000, "admin", cn_admin_key, &admin, &err) == KL_OK,
          "admin client: %s", err.message);
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    kl_queue_options qo = {.pin_partition = true, .partition = 1};
    kl_code rc = kl_batch_new(NULL, &b, &err);
    if (rc == KL_OK)
        rc = kl_batch_create_queue(b, "q1", &qo, &err);
    if (rc == KL_OK)
        rc = kl_client_batch(admin, b, &r, &err);
    kl_batch_free(b);
    kl_receipt_free(r);
    if (rc != KL_OK)
        kl_client_close(admin);
    CHECK(rc == KL_OK, "queue create: %s %s", kl_code_name(rc), err.message);

    cn_kill(1);
    snprintf(late_key, sizeof late_key, "%s/conncat-late.key", work);
    rc = cn_create_principal(admin, "late", late_key, &err);
    kl_client_close(admin);
    CHECK(rc == KL_OK, "create principal late with partition 1 down: %s %s", kl_code_name(rc), err.message);

    /* The new principal's client learns where q1 lives (partition 1 is down: no answer). */
    kl_client *late = NULL;
    CHECK(kl_client_open_principal(cn_file, CN_DB, 8000, "late", late_key, &late, &err) == KL_OK,
          "late client: %s", err.message);
    Keyload__V1__QueueStatsAnswer *st = NULL;
    rc = kl_client_queue_stats(late, "q1", &st, &err);
    kl_queue_stats_free(st);
    if (rc == KL_OK)
        kl_client_close(late);
    CHECK(rc != KL_OK, "queue stats answered with partition 1 down");

    cn_pause(0, true);
    cn_spawn(1);
    bool up = cn_wait_up(1, 15000);
    if (up)
        cn_behind_checks(late, late_key);
    else
        CHECK(up, "partition 1 did not restart");
    kl_client_close(late);
    cn_stop_all();
}

/* ---- limits: Hello replay, per-tenant sessions, connection cap and idle timeout ---- */

/* Creates database db and principal id (role none, key written to key_path) without a
 * session, as the trusted local administrator (insecure_local_admin). */
static kl_code cn_local_principal(const char *db, const char *id, const char *key_path, kl_err *err)
{
    kl_client *c = NULL;
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    uint8_t pk[32];
    unlink(key_path);
    kl_code rc = kl_key_file_new(key_path, pk, err);
    if (rc == KL_OK)
        rc = kl_client_open(cn_file, db, 10000, &c, err);
    if (rc == KL_OK)
        rc = kl_batch_new(NULL, &b, err);
    if (rc == KL_OK)
        rc = kl_batch_create_database(b, db, NULL, err);
    if (rc == KL_OK)
        rc = kl_client_batch(c, b, &r, err);
    kl_batch_free(b);
    kl_receipt_free(r);
    char cmd[KL_COMMAND_ID_TEXT_LEN + 1];
    kl_command_id_new(cmd);
    if (rc == KL_OK)
        rc = kl_client_create_principal(c, cmd, id, pk, KL_ROLE_NONE, NULL, NULL, err);
    kl_client_close(c);
    return rc;
}

static uint64_t cn_hellos(int p)
{
    uint64_t n = UINT64_MAX;
    Keyload__V1__MemberStatusAnswer *st = cn_status(p);
    if (st != NULL) {
        n = st->hellos;
        keyload__v1__member_status_answer__free_unpacked(st, NULL);
    }
    return n;
}

static void cn_replay_checks(const char *a_key)
{
    uint8_t hello[512];
    kl_err err;
    size_t n = cn_hello_bytes(0, "a1", a_key, hello);
    CHECK(n > 0, "Hello bytes");
    kl_code rc = cn_send_hello(0, hello, n, &err);
    CHECK(rc == KL_OK, "first Hello: %s %s", kl_code_name(rc), err.detail);
    for (int i = 0; i < 3; i++) {
        rc = cn_send_hello(0, hello, n, &err);
        CHECK(rc == KL_UNAUTHENTICATED && strcmp(err.detail, "hello_replayed") == 0,
              "replay %d of a captured Hello: %s %s, want UNAUTHENTICATED hello_replayed", i + 1,
              kl_code_name(rc), err.detail);
    }
    Keyload__V1__MemberSessionStatus ss = cn_counters(0);
    CHECK(ss.hello_replayed == 3, "hello_replayed counted %llu, want 3",
          (unsigned long long)ss.hello_replayed);
}

/* Tenant beta's SDK client holds a session; tenant acme's principal then makes many more
 * Hellos than the table holds: beta's session must survive (its next request needs no new
 * Hello). */
static void cn_tenant_checks(const char *a_key, const char *b_key)
{
    kl_err err;
    kl_client *b = NULL;
    CHECK(kl_client_open_principal(cn_file, "beta/db", 5000, "b1", b_key, &b, &err) == KL_OK,
          "b1 client: %s", err.message);
    Keyload__V1__ShowPrincipalAnswer *sp = NULL;
    kl_code rc = kl_client_show_principal(b, "b1", &sp, &err);
    kl_principal_answer_free(sp);
    sp = NULL;
    if (rc != KL_OK)
        kl_client_close(b);
    CHECK(rc == KL_OK, "b1 shows itself: %s %s", kl_code_name(rc), err.message);
    int ok = 0;
    for (int i = 0; i < 12; i++)
        ok += cn_hello(0, "a1", a_key, &err) == KL_OK;
    uint64_t before = cn_hellos(0);
    rc = kl_client_show_principal(b, "b1", &sp, &err);
    kl_principal_answer_free(sp);
    kl_client_close(b);
    uint64_t after = cn_hellos(0);
    Keyload__V1__MemberSessionStatus ss = cn_counters(0);
    CHECK(ok == 12, "only %d of 12 Hellos of a1 were accepted", ok);
    CHECK(rc == KL_OK, "b1 again: %s %s", kl_code_name(rc), err.message);
    CHECK(after == before, "b1 had to shake hands again (%llu Hellos): tenant acme's Hellos evicted "
          "tenant beta's session", (unsigned long long)(after - before));
    CHECK(ss.session_tenant_evictions >= 9, "tenant evictions counted %llu, want >= 9",
          (unsigned long long)ss.session_tenant_evictions);
    printf("  12 Hellos of tenant acme at its limit of 3: %llu of its own sessions evicted, beta's kept\n",
           (unsigned long long)ss.session_tenant_evictions);
}

/* Partition 1's client port holds at most 4 connections and closes one idle for 1500 ms. */
static void cn_conn_checks(void)
{
    kl_rpc_client *held[4] = {0};
    kl_err err;
    int opened = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t *ans = NULL;
        size_t len = 0;
        if (kl_rpc_client_open(cn_url[1], 1000, 0, &held[i], &err) == KL_OK &&
            kl_rpc_invoke(held[i], "keyload.v1.MemberStatus", NULL, 0, 1000, &ans, &len, NULL, 0, &err) == KL_OK)
            opened++;
        free(ans);
    }
    kl_rpc_client *extra = NULL;
    uint8_t *ans = NULL;
    size_t len = 0;
    kl_code rc = kl_rpc_client_open(cn_url[1], 300, 0, &extra, &err);
    if (rc == KL_OK)
        rc = kl_rpc_invoke(extra, "keyload.v1.MemberStatus", NULL, 0, 500, &ans, &len, NULL, 0, &err);
    free(ans);
    kl_rpc_client_close(extra);
    kl_rpc_client_close(held[3]);
    held[3] = NULL;
    sleep_ms(100);
    Keyload__V1__MemberSessionStatus ss = cn_counters(1);
    for (int i = 0; i < 3; i++)
        kl_rpc_client_close(held[i]);
    CHECK(opened == 4, "only %d of 4 connections answered", opened);
    CHECK(rc != KL_OK, "a fifth connection was served past client_max 4");
    CHECK(ss.client_refused >= 1, "refusals counted %llu", (unsigned long long)ss.client_refused);

    /* Idle: one connection answered once, then silent. */
    kl_rpc_client *idle = NULL;
    CHECK(kl_rpc_client_open(cn_url[1], 1000, 0, &idle, &err) == KL_OK, "connect: %s", err.message);
    rc = kl_rpc_invoke(idle, "keyload.v1.MemberStatus", NULL, 0, 1000, &ans, &len, NULL, 0, &err);
    free(ans);
    uint64_t closed_before = cn_counters(1).client_idle_closed;
    sleep_ms(2500);
    ss = cn_counters(1);
    kl_rpc_client_close(idle);
    CHECK(rc == KL_OK, "the idle connection's first call: %s", err.message);
    CHECK(ss.client_idle_closed > closed_before, "no connection closed after 2500 ms idle "
          "(client_idle_ms 1500): %llu", (unsigned long long)ss.client_idle_closed);
    printf("  cap 4: %llu refused; idle 1500 ms: %llu closed; %llu open now\n",
           (unsigned long long)ss.client_refused, (unsigned long long)ss.client_idle_closed,
           (unsigned long long)ss.client_connections);
}

void test_conn_limits(void)
{
    char a_key[700], b_key[700];
    kl_err err;
    CHECK(cn_write("connlim", ",\"insecure_local_admin\":true,\"connections\":{\"client_max\":4,"
                              "\"client_idle_ms\":1500,\"sessions_max\":8,\"sessions_per_tenant\":3}"),
          "keys or cluster file");
    CHECK(cn_start_all(), "the two partitions did not serve");
    snprintf(a_key, sizeof a_key, "%s/connlim-a1.key", work);
    snprintf(b_key, sizeof b_key, "%s/connlim-b1.key", work);
    kl_code rc = cn_local_principal("acme/db", "a1", a_key, &err);
    CHECK(rc == KL_OK, "acme/db and a1: %s %s", kl_code_name(rc), err.message);
    rc = cn_local_principal("beta/db", "b1", b_key, &err);
    CHECK(rc == KL_OK, "beta/db and b1: %s %s", kl_code_name(rc), err.message);
    /* Independent checks: each reports its own failure. */
    cn_replay_checks(a_key);
    cn_tenant_checks(a_key, b_key);
    cn_conn_checks();
    cn_stop_all();
}

/* ---- peer configuration: a member whose cluster file differs is refused ---- */

#define CG_N 3
static pid_t cg_pid[CG_N] = {-1, -1, -1};
static char cg_url[CG_N][64];

static void cg_stop_all(void)
{
    for (int i = 0; i < CG_N; i++)
        if (cg_pid[i] > 0) {
            kill(cg_pid[i], SIGKILL);
            waitpid(cg_pid[i], NULL, 0);
            cg_pid[i] = -1;
        }
}

/* One partition of three members with their public keys; replica_count rc. */
static bool cg_write(const char *path, int base, int rc, char pub[CG_N][128], const char *name)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return false;
    fprintf(f, "{\"cluster\":\"%s\",\"replica_count\":%d,\"insecure_local_admin\":true,"
               "\"timers\":{\"tick_ms\":50,\"election_ms\":800,\"heartbeat_ms\":150},"
               "\"partitions\":[{\"id\":0,\"members\":[", name, rc);
    for (int i = 0; i < CG_N; i++) {
        snprintf(cg_url[i], sizeof cg_url[i], "tcp://127.0.0.1:%d", base + i);
        fprintf(f, "%s{\"id\":%d,\"client\":\"%s\",\"peer\":\"tcp://127.0.0.1:%d\",\"data\":\"%s/%s-m%d\","
                   "\"public_key\":\"%s\"}", i ? "," : "", i + 1, cg_url[i], base + 10 + i, work, name, i + 1,
                pub[i]);
    }
    fprintf(f, "]}]}\n");
    fclose(f);
    return true;
}

static Keyload__V1__MemberStatusAnswer *cg_status(int i) { return member_status(cg_url[i], 1000); }

void test_conn_peer_config(void)
{
    static const char *name = "conncfg";
    char pub[CG_N][128], key[CG_N][700], file_a[700], file_b[700], secret[700], cmd[2400];
    int base = 28000 + (getpid() % 45) * 20;
    snprintf(secret, sizeof secret, "%s/%s.secret", work, name);
    for (int i = 0; i < CG_N; i++) {
        snprintf(key[i], sizeof key[i], "%s/%s-m%d.key", work, name, i + 1);
        bool ok = i == 0 ? keygen_files(secret, key[i], pub[i], sizeof pub[i])
                         : member_keygen(key[i], pub[i], sizeof pub[i]);
        CHECK(ok, "keygen");
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s/%s-m1' '%s/%s-m2' '%s/%s-m3'", work, name, work, name, work, name);
    CHECK(system(cmd) == 0, "clean data directories");
    snprintf(file_a, sizeof file_a, "%s/%s-a.json", work, name);
    snprintf(file_b, sizeof file_b, "%s/%s-b.json", work, name);
    /* Members 1 and 2: 2 of 3; member 3's file says 3 of 3. 1 and 2 commit alone. */
    CHECK(cg_write(file_a, base, 2, pub, name) && cg_write(file_b, base, 3, pub, name), "cluster files");
    for (int i = 0; i < CG_N; i++)
        cg_pid[i] = spawn_keyloadd(i < 2 ? file_a : file_b, 0, i + 1, secret, key[i]);

    bool serving = false;
    for (int64_t deadline = now_ms() + 20000; !serving && now_ms() < deadline; sleep_ms(100))
        for (int i = 0; i < 2 && !serving; i++) {
            Keyload__V1__MemberStatusAnswer *st = cg_status(i);
            serving = st != NULL && st->serving;
            if (st != NULL)
                keyload__v1__member_status_answer__free_unpacked(st, NULL);
        }
    CHECK(serving, "neither member 1 nor 2 serves");
    kl_client *c = NULL;
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    kl_err err;
    kl_code rc = kl_client_open(file_a, "acme/db", 20000, &c, &err);
    if (rc == KL_OK)
        rc = kl_batch_new(NULL, &b, &err);
    if (rc == KL_OK)
        rc = kl_batch_create_database(b, "acme/db", NULL, &err);
    if (rc == KL_OK)
        rc = kl_client_batch(c, b, &r, &err);
    kl_batch_free(b);
    kl_receipt_free(r);
    kl_client_close(c);
    CHECK(rc == KL_OK, "members 1 and 2 (replica_count 2) did not commit: %s %s", kl_code_name(rc),
          err.message);
    sleep_ms(1500);
    uint64_t mismatch = 0, commit = 0, odd_last = UINT64_MAX;
    bool odd_leads = true;
    for (int i = 0; i < CG_N; i++) {
        Keyload__V1__MemberStatusAnswer *st = cg_status(i);
        CHECK(st != NULL, "member %d does not answer", i + 1);
        if (st->sessions != NULL)
            mismatch += st->sessions->peer_config_mismatch;
        if (i < 2 && st->commit_index > commit)
            commit = st->commit_index;
        if (i == 2) {
            odd_last = st->last_index;
            odd_leads = strcmp(st->role, "leader") == 0;
        }
        keyload__v1__member_status_answer__free_unpacked(st, NULL);
    }
    snprintf(cmd, sizeof cmd, "grep -q 'replication configuration differs at index 1' '%s/%s-a.json-p0m1.log' "
                              "'%s/%s-a.json-p0m2.log'", work, name, work, name);
    int logged = system(cmd);
    cg_stop_all();
    CHECK(mismatch >= 1, "no configuration mismatch counted by members 1 and 2");
    CHECK(!odd_leads && odd_last < commit, "member 3 (other replica_count) replicated: last index %llu, "
          "commit %llu", (unsigned long long)odd_last, (unsigned long long)commit);
    CHECK(logged == 0, "the refusal was not logged naming the configuration");
    printf("  member 3 (replica_count 3 vs 2): %llu handshakes refused as configuration mismatch; "
           "members 1-2 committed to %llu, member 3 holds %llu entries\n",
           (unsigned long long)mismatch, (unsigned long long)commit, (unsigned long long)odd_last);
}

void cn_stop_all_peers(void) { cg_stop_all(); }
