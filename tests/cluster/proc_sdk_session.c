/* Process test of the SDK's sessions (KL-3 item 3, DESIGN.md §5 "Sessions", client side):
 * one long-lived kl_client opened with a principal (kl_client_open_principal) against a
 * real single-member cluster with a member key pair, on loopback ports 25000..25999.
 *
 * Bootstrap (unsealed, through the SDK) makes the administrator, whose key goes to a 0600
 * file. Then, sealed: create the database and a queue, enqueue; many threads enqueue on
 * the same client at once (counters unique per session, answers in any order); the member
 * is killed -9 and restarted, and the same client enqueues again without the caller doing
 * anything (the SDK gets session_unknown, shakes hands again and resends), and a replay of
 * the first command id returns the identical receipt bytes. The daemon is started by
 * fork/exec and killed by its pid. */
#include "tests/cluster/proc.h"

#include "client/keyload.h"
#include "common/canon.h"
#include "common/keys.h"
#include "common/rpc.h"
#include "keyload/v1/catalog.pb-c.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SK_CLUSTER "sdksess"

static char sk_file[700], sk_secret[700], sk_member_key[700], sk_data[700], sk_admin_key[700];
static char sk_url[64];
static pid_t sk_pid = -1;

static bool sk_keygen(char *pub_b64, size_t cap)
{
    snprintf(sk_secret, sizeof sk_secret, "%s/sdksess.secret", work);
    snprintf(sk_member_key, sizeof sk_member_key, "%s/sdksess-p0m1.key", work);
    snprintf(sk_admin_key, sizeof sk_admin_key, "%s/sdksess-admin.key", work);
    unlink(sk_admin_key);
    return keygen_files(sk_secret, sk_member_key, pub_b64, cap);
}

static void sk_write(const char *pub_b64)
{
    int port = 25000 + (getpid() % 900);
    snprintf(sk_url, sizeof sk_url, "tcp://127.0.0.1:%d", port);
    snprintf(sk_file, sizeof sk_file, "%s/" SK_CLUSTER ".json", work);
    snprintf(sk_data, sizeof sk_data, "%s/" SK_CLUSTER "-p0m1", work);
    FILE *f = fopen(sk_file, "w");
    fprintf(f, "{\"cluster\":\"" SK_CLUSTER "\",\"replica_count\":1,"
               "\"partitions\":[{\"id\":0,\"members\":[{\"id\":1,\"client\":\"%s\",\"data\":\"%s\","
               "\"public_key\":\"%s\"}]}]}\n",
            sk_url, sk_data, pub_b64);
    fclose(f);
}

static void sk_kill(void)
{
    if (sk_pid <= 0)
        return;
    kill(sk_pid, SIGKILL);
    waitpid(sk_pid, NULL, 0);
    sk_pid = -1;
}

void sk_stop_all(void) { sk_kill(); }

/* True once the member answers MemberStatus with serving. */
static bool sk_serving(void)
{
    kl_rpc_client *c;
    kl_err err;
    if (kl_rpc_client_open(sk_url, 500, 0, &c, &err) != KL_OK)
        return false;
    uint8_t *ans = NULL;
    size_t len = 0;
    bool serving = false;
    if (kl_rpc_invoke(c, "keyload.v1.MemberStatus", NULL, 0, 1000, &ans, &len, NULL, 0, &err) == KL_OK) {
        Keyload__V1__MemberStatusAnswer *st = keyload__v1__member_status_answer__unpack(NULL, len, ans);
        serving = st && st->serving;
        if (st)
            keyload__v1__member_status_answer__free_unpacked(st, NULL);
    }
    free(ans);
    kl_rpc_client_close(c);
    return serving;
}

static bool sk_start(void)
{
    pid_t pid = spawn_keyloadd(sk_file, 0, 1, sk_secret, sk_member_key);
    sk_pid = pid;
    int64_t deadline = now_ms() + 20000;
    while (now_ms() < deadline) {
        if (sk_serving())
            return true;
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            sk_pid = -1;
            return false;
        }
        sleep_ms(50);
    }
    return false;
}

/* The administrator "admin" of acme/boot, bootstrapped unsealed; its secret key goes to
 * sk_admin_key (0600). */
static bool sk_bootstrap(char *why, size_t cap)
{
    uint8_t pk[32], sk[64];
    kl_err err;
    crypto_sign_keypair(pk, sk);
    kl_code rc = kl_keys_write_secret_file("admin key file", sk_admin_key, sk, sizeof sk, &err);
    sodium_memzero(sk, sizeof sk);
    if (rc == KL_OK)
        rc = sdk_bootstrap(sk_file, sk_secret, "acme/boot", "admin", pk, NULL, NULL, &err);
    if (rc != KL_OK)
        snprintf(why, cap, "%s: %s", kl_code_name(rc), err.message);
    return rc == KL_OK;
}

/* One enqueue through c; on KL_OK *out is the receipt (when out is not NULL). */
static kl_code sk_enqueue(kl_client *c, const char *command_id, const char *body, kl_receipt **out,
                          kl_err *err)
{
    kl_batch *b = NULL;
    kl_message *m = NULL;
    kl_receipt *r = NULL;
    kl_code rc = kl_batch_new(command_id, &b, err);
    if (rc == KL_OK)
        rc = kl_message_new(body, strlen(body), &m, err);
    if (rc == KL_OK)
        rc = kl_batch_enqueue(b, "q", NULL, m, err);
    if (rc == KL_OK)
        rc = kl_client_batch(c, b, &r, err);
    kl_message_free(m);
    kl_batch_free(b);
    if (out != NULL)
        *out = r;
    else
        kl_receipt_free(r);
    return rc;
}

static long long sk_messages(kl_client *c, kl_err *err)
{
    Keyload__V1__QueueStatsAnswer *s = NULL;
    if (kl_client_queue_stats(c, "q", &s, err) != KL_OK)
        return -1;
    long long n = (long long)s->messages;
    kl_queue_stats_free(s);
    return n;
}

enum { SK_THREADS = 8, SK_PER_THREAD = 25 };

typedef struct sk_worker {
    kl_client *c;
    int ok;
    kl_err err;
} sk_worker;

static void *sk_work(void *arg)
{
    sk_worker *w = arg;
    for (int i = 0; i < SK_PER_THREAD; i++) {
        if (sk_enqueue(w->c, NULL, "concurrent", NULL, &w->err) != KL_OK)
            return NULL;
        w->ok++;
    }
    return NULL;
}

void test_sdk_sessions(void)
{
    char pub[128], why[512];
    kl_err err;
    kl_err_clear(&err);
    CHECK(sk_keygen(pub, sizeof pub), "keyloadd keygen failed");
    sk_write(pub);
    CHECK(sk_start(), "keyloadd with --member-key did not start serving");
    CHECK(sk_bootstrap(why, sizeof why), "bootstrap: %s", why);

    kl_client *c = NULL;
    CHECK(kl_client_open_principal(sk_file, "acme/boot", 10000, "admin", sk_admin_key, &c, &err) == KL_OK,
          "kl_client_open_principal: %s", err.message);
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    kl_code rc = kl_batch_new(NULL, &b, &err);
    if (rc == KL_OK)
        rc = kl_batch_create_database(b, "acme/extra", NULL, &err);
    if (rc == KL_OK)
        rc = kl_client_batch(c, b, &r, &err);
    kl_batch_free(b);
    kl_receipt_free(r);
    r = NULL;
    if (rc != KL_OK)
        kl_client_close(c);
    CHECK(rc == KL_OK, "sealed database create: %s: %s", kl_code_name(rc), err.message);
    kl_queue_options qo = {.pin_partition = true, .partition = 0};
    rc = kl_batch_new(NULL, &b, &err);
    if (rc == KL_OK)
        rc = kl_batch_create_queue(b, "q", &qo, &err);
    if (rc == KL_OK)
        rc = kl_client_batch(c, b, &r, &err);
    kl_batch_free(b);
    kl_receipt_free(r);
    r = NULL;
    if (rc != KL_OK)
        kl_client_close(c);
    CHECK(rc == KL_OK, "sealed queue create: %s: %s", kl_code_name(rc), err.message);

    const char *first_id = "5d0a3b1e-6f0c-4b7a-9a61-0c2f4e8d1a77";
    kl_receipt *first = NULL;
    rc = sk_enqueue(c, first_id, "before the restart", &first, &err);
    if (rc != KL_OK)
        kl_client_close(c);
    CHECK(rc == KL_OK, "sealed enqueue: %s: %s", kl_code_name(rc), err.message);

    /* Many threads on one client: every counter unique, answers in any order. */
    sk_worker w[SK_THREADS];
    pthread_t t[SK_THREADS];
    for (int i = 0; i < SK_THREADS; i++) {
        w[i] = (sk_worker){.c = c};
        kl_err_clear(&w[i].err);
        pthread_create(&t[i], NULL, sk_work, &w[i]);
    }
    int total = 0;
    const char *werr = NULL;
    for (int i = 0; i < SK_THREADS; i++) {
        pthread_join(t[i], NULL);
        total += w[i].ok;
        if (w[i].ok != SK_PER_THREAD && werr == NULL)
            werr = w[i].err.message;
    }
    long long n = sk_messages(c, &err);
    bool conc_ok = total == SK_THREADS * SK_PER_THREAD && n == 1 + total;
    if (!conc_ok)
        kl_client_close(c);
    CHECK(conc_ok, "concurrent sealed enqueues: %d of %d OK (%s), queue holds %lld", total,
          SK_THREADS * SK_PER_THREAD, werr ? werr : "", n);

    /* kill -9 and restart: the member forgets every session; the client does not know. */
    sk_kill();
    bool up = sk_start();
    if (!up)
        kl_client_close(c);
    CHECK(up, "keyloadd did not restart");
    rc = sk_enqueue(c, NULL, "after the restart", NULL, &err);
    if (rc != KL_OK)
        kl_client_close(c);
    CHECK(rc == KL_OK, "sealed enqueue after kill -9 and restart (SDK re-handshake): %s: %s (%s)",
          kl_code_name(rc), err.message, err.detail);
    kl_receipt *again = NULL;
    rc = sk_enqueue(c, first_id, "before the restart", &again, &err);
    bool same = rc == KL_OK && again->len == first->len && memcmp(again->bytes, first->bytes, first->len) == 0;
    kl_receipt_free(again);
    kl_receipt_free(first);
    n = sk_messages(c, &err);
    kl_client_close(c);
    CHECK(rc == KL_OK, "replay of the first command id: %s: %s", kl_code_name(rc), err.message);
    CHECK(same, "the replayed receipt differs from the first");
    CHECK(n == 2 + SK_THREADS * SK_PER_THREAD, "the queue holds %lld, not %d", n, 2 + SK_THREADS * SK_PER_THREAD);
    sk_kill();
}
