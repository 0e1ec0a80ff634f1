/* Process tests of authorization (KL-3's required tests, DESIGN.md §5, §9, §10) against
 * real keyloadd processes with sessions REQUIRED: the cluster files leave out
 * "insecure_local_admin" (default false), every member has a key pair made by `keyloadd
 * keygen` with its public key in the cluster file, and every daemon gets --cluster-secret
 * and --member-key. Loopback ports 16000..16999 (below Linux's ephemeral range, 32768 and up:
 * a member redialing a down peer's port there can connect to itself and hold that port).
 *
 *   matrix       one member. Bootstrap an administrator; principals holding one of
 *                QueuePublish, QueueConsume, QueueAck, QueueInspect (and one holding none)
 *                try enqueue, receive, ack, release and queue stats: allowed exactly with
 *                the matching grant, else PERMISSION_DENIED "grant:<Permission>" and nothing
 *                changed. Field and header grants on enqueue and receive; unsealed requests;
 *                other tenants; who may grant and make administrators; a malformed grant
 *                pattern (sent sealed but raw, past the SDK's own check); a second bootstrap.
 *   revocation   partition 0 and one data partition. After a revoke returns, the data
 *                partition refuses at once; a replay across the changed policy epoch is
 *                "stale_authority" and the original stays; with partition 0 gone the data
 *                partition stops serving within its catalog lease and serves again after.
 *   cold restart 2 partitions x 3 members, replica_count 3. Principals, grants, databases
 *                (incarnation, signing key) identical after kill -9 of all and restart; the
 *                principal says Hello again; no secret in any data file or log.
 *
 * The SDK (client/keyload.h) does the sealed work; a small raw sealed client (common/
 * session.h) is used where the test must send what the SDK would refuse to build, or must
 * make exactly one attempt. Every daemon is started by fork/exec and killed by its pid
 * (az_stop_all, called by proc_test.c after each test, also after a failed check). */
#include "tests/cluster/proc.h"

#include "client/keyload.h"
#include "common/canon.h"
#include "common/guid.h"
#include "common/keys.h"
#include "common/session.h"
#include "keyload/v1/catalog.pb-c.h"
#include "keyload/v1/rpc.pb-c.h"
#include "keyload/v1/session.pb-c.h"

#include <fcntl.h>
#include <ftw.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <signal.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define AZ_PARTS 2
#define AZ_MEMBERS 3
#define AZ_TENANT "acme"
#define AZ_DB "acme/shop"

/* ---- the cluster: files, keys, processes ---- */

static char az_name[64];
static char az_file[700], az_secret[700];
static char az_url[AZ_PARTS][AZ_MEMBERS][64];
static char az_data[AZ_PARTS][AZ_MEMBERS][700];
static char az_log[AZ_PARTS][AZ_MEMBERS][760];
static char az_mkey[AZ_PARTS][AZ_MEMBERS][700];
static uint8_t az_mpub[AZ_PARTS][AZ_MEMBERS][32];
static pid_t az_pid[AZ_PARTS][AZ_MEMBERS];
static int az_parts, az_members;
static bool az_written;

/* Every kl_client the tests open, closed by az_stop_all (also after a failed check). */
#define AZ_MAX_CLIENTS 32
static kl_client *az_clients[AZ_MAX_CLIENTS];

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void az_track(kl_client *c)
{
    for (int i = 0; i < AZ_MAX_CLIENTS; i++)
        if (az_clients[i] == NULL) {
            az_clients[i] = c;
            return;
        }
}

static void az_close_client(kl_client **c)
{
    for (int i = 0; i < AZ_MAX_CLIENTS; i++)
        if (az_clients[i] == *c && *c != NULL)
            az_clients[i] = NULL;
    kl_client_close(*c);
    *c = NULL;
}

static void az_kill(int p, int m)
{
    if (az_pid[p][m] <= 0)
        return;
    kill(az_pid[p][m], SIGKILL);
    waitpid(az_pid[p][m], NULL, 0);
    az_pid[p][m] = -1;
}

void az_stop_all(void)
{
    for (int i = 0; i < AZ_MAX_CLIENTS; i++) {
        kl_client_close(az_clients[i]);
        az_clients[i] = NULL;
    }
    if (!az_written)
        return;
    for (int p = 0; p < az_parts; p++)
        for (int m = 0; m < az_members; m++)
            az_kill(p, m);
}

static off_t az_log_off[AZ_PARTS][AZ_MEMBERS];
static int az_respawns;

static void az_start(int p, int m)
{
    struct stat sb;
    az_log_off[p][m] = stat(az_log[p][m], &sb) == 0 ? sb.st_size : 0;
    az_pid[p][m] = spawn_keyloadd(az_file, p, m + 1, az_secret, az_mkey[p][m]);
}

/* Whether member (p, m)'s last start failed to bind its port (another process's connection
 * may hold it for a while). */
static bool az_bind_failed(int p, int m)
{
    FILE *f = fopen(az_log[p][m], "rb");
    if (f == NULL)
        return false;
    char buf[8192];
    fseeko(f, az_log_off[p][m], SEEK_SET);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, "Address in use") != NULL || strstr(buf, "address in use") != NULL;
}

/* Reaps members that exited; one whose port was taken is started again (a few times). */
static void az_reap(void)
{
    for (int p = 0; p < az_parts; p++)
        for (int m = 0; m < az_members; m++) {
            if (az_pid[p][m] <= 0 || waitpid(az_pid[p][m], NULL, WNOHANG) != az_pid[p][m])
                continue;
            az_pid[p][m] = -1;
            if (az_bind_failed(p, m) && az_respawns < 10) {
                az_respawns++;
                fprintf(stderr, "  p%dm%d could not bind its port (held by another connection); starting it again\n",
                        p, m + 1);
                sleep_ms(300);
                az_start(p, m);
            } else {
                fprintf(stderr, "  p%dm%d exited (see %s)\n", p, m + 1, az_log[p][m]);
            }
        }
}

static void az_start_all(void)
{
    for (int p = 0; p < az_parts; p++)
        for (int m = 0; m < az_members; m++)
            az_start(p, m);
}

/* `keyloadd keygen --secret-out path`: the member's public key (base64) into b64. */
static bool az_member_keygen(const char *path, char *b64, size_t cap, uint8_t pub[32])
{
    unlink(path);
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "'%s' keygen --secret-out '%s'", daemon_bin, path);
    FILE *f = popen(cmd, "r");
    if (f == NULL)
        return false;
    char line[128] = "";
    bool got = fgets(line, sizeof line, f) != NULL;
    if (pclose(f) != 0 || !got)
        return false;
    line[strcspn(line, "\r\n")] = '\0';
    snprintf(b64, cap, "%s", line);
    size_t n = 0;
    return sodium_base642bin(pub, 32, line, strlen(line), NULL, &n, NULL, sodium_base64_VARIANT_ORIGINAL) == 0 &&
           n == 32;
}

/* Keys (one cluster secret, one key pair per member, all by `keyloadd keygen`) and the
 * cluster file, sessions required. Ports: client base+2k, peer base+2k+1 for member k. */
static bool az_setup(const char *name, int parts, int members, int replica, int lease_ms, int port_off,
                     char *why, size_t cap)
{
    int base = 16000 + (int)(getpid() % 45) * 20 + port_off;
    snprintf(az_name, sizeof az_name, "%s", name);
    az_parts = parts;
    az_members = members;
    az_respawns = 0;
    for (int p = 0; p < AZ_PARTS; p++)
        for (int m = 0; m < AZ_MEMBERS; m++)
            az_pid[p][m] = -1;
    az_written = true;
    snprintf(az_secret, sizeof az_secret, "%s/%s.secret", work, name);
    unlink(az_secret);
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "'%s' keygen --cluster-secret-out '%s' >/dev/null", daemon_bin, az_secret);
    if (system(cmd) != 0) {
        snprintf(why, cap, "keyloadd keygen --cluster-secret-out failed");
        return false;
    }
    snprintf(az_file, sizeof az_file, "%s/%s.json", work, name);
    FILE *f = fopen(az_file, "w");
    if (f == NULL) {
        snprintf(why, cap, "cannot write the cluster file");
        return false;
    }
    /* No "insecure_local_admin": it defaults to false, as deploy/keyload-cluster writes it. */
    fprintf(f, "{\"cluster\":\"%s\",\"replica_count\":%d,"
               "\"timers\":{\"tick_ms\":50,\"election_ms\":1000,\"heartbeat_ms\":150,\"catalog_lease_ms\":%d},"
               "\"partitions\":[",
            name, replica, lease_ms);
    for (int p = 0; p < parts; p++) {
        fprintf(f, "%s{\"id\":%d,\"members\":[", p ? "," : "", p);
        for (int m = 0; m < members; m++) {
            int k = p * members + m;
            char b64[128];
            snprintf(az_mkey[p][m], sizeof az_mkey[p][m], "%s/%s-p%dm%d.key", work, name, p, m + 1);
            if (!az_member_keygen(az_mkey[p][m], b64, sizeof b64, az_mpub[p][m])) {
                fclose(f);
                snprintf(why, cap, "keyloadd keygen --secret-out failed for p%dm%d", p, m + 1);
                return false;
            }
            snprintf(az_url[p][m], sizeof az_url[p][m], "tcp://127.0.0.1:%d", base + 2 * k);
            snprintf(az_data[p][m], sizeof az_data[p][m], "%s/%s-data-p%dm%d", work, name, p, m + 1);
            snprintf(az_log[p][m], sizeof az_log[p][m], "%s/%s.json-p%dm%d.log", work, name, p, m + 1);
            fprintf(f,
                    "%s{\"id\":%d,\"client\":\"%s\",\"peer\":\"tcp://127.0.0.1:%d\",\"data\":\"%s\","
                    "\"public_key\":\"%s\"}",
                    m ? "," : "", m + 1, az_url[p][m], base + 2 * k + 1, az_data[p][m], b64);
        }
        fprintf(f, "]}");
    }
    fprintf(f, "]}\n");
    fclose(f);
    return true;
}

static Keyload__V1__MemberStatusAnswer *az_status(int p, int m) { return member_status(az_url[p][m], 1000); }

/* The serving leader of partition p (with a valid catalog lease on a data partition), or
 * -1 after timeout_ms. MemberStatus needs no session. */
static int az_leader(int p, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    do {
        for (int m = 0; m < az_members; m++) {
            if (az_pid[p][m] <= 0)
                continue;
            Keyload__V1__MemberStatusAnswer *s = az_status(p, m);
            bool ready = s && s->serving && (p == 0 || s->catalog_lease_valid);
            if (s)
                keyload__v1__member_status_answer__free_unpacked(s, NULL);
            if (ready)
                return m;
        }
        az_reap();
        sleep_ms(100);
    } while (now_ms() < deadline);
    return -1;
}

/* ---- principals and SDK helpers ---- */

typedef struct az_who {
    char id[48];
    uint8_t pk[32], sk[64];
    char key_path[760];
    kl_client *c;
} az_who;

/* A fresh Ed25519 key pair for principal id, its secret key in a 0600 file. */
static bool az_who_new(az_who *w, const char *id)
{
    memset(w, 0, sizeof *w);
    snprintf(w->id, sizeof w->id, "%s", id);
    crypto_sign_keypair(w->pk, w->sk);
    snprintf(w->key_path, sizeof w->key_path, "%s/%s-%s.key", work, az_name, id);
    unlink(w->key_path);
    kl_err err;
    return kl_keys_write_secret_file("principal key file", w->key_path, w->sk, sizeof w->sk, &err) == KL_OK;
}

static kl_code az_open(const az_who *w, const char *database, int timeout_ms, kl_client **out, kl_err *err)
{
    kl_code rc = kl_client_open_principal(az_file, database, timeout_ms, w->id, w->key_path, out, err);
    if (rc == KL_OK)
        az_track(*out);
    return rc;
}

static kl_code az_who_open(az_who *w, int timeout_ms, kl_err *err)
{
    return az_open(w, AZ_DB, timeout_ms, &w->c, err);
}

/* The bootstrap batch for admin of `database` (unsealed: its proof is its authentication).
 * command_id NULL: a fresh one. */
static kl_code az_bootstrap(const az_who *admin, const char *database, const char *command_id, kl_receipt **out,
                            kl_err *err)
{
    return sdk_bootstrap(az_file, az_secret, database, admin->id, admin->pk, command_id, out, err);
}

/* One enqueue of body to queue; field and header are "k=v" specs or NULL. */
static kl_code az_enqueue(kl_client *c, const char *queue, const char *command_id, const char *body,
                          const char *field, const char *header, kl_receipt **out, kl_err *err)
{
    kl_batch *b = NULL;
    kl_message *m = NULL;
    kl_receipt *r = NULL;
    kl_code rc = kl_batch_new(command_id, &b, err);
    if (rc == KL_OK)
        rc = kl_message_new(body, strlen(body), &m, err);
    if (rc == KL_OK && field != NULL)
        rc = kl_message_parse_field(m, field, err);
    if (rc == KL_OK && header != NULL)
        rc = kl_message_parse_header(m, header, err);
    if (rc == KL_OK)
        rc = kl_batch_enqueue(b, queue, NULL, m, err);
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

/* Receives up to max; on KL_OK *out is the receipt (caller frees). */
static kl_code az_receive(kl_client *c, const char *queue, uint32_t max, kl_receipt **out, kl_err *err)
{
    kl_batch *b = NULL;
    *out = NULL;
    kl_code rc = kl_batch_new(NULL, &b, err);
    if (rc == KL_OK)
        rc = kl_batch_receive(b, queue, NULL, max, 60000, err);
    if (rc == KL_OK)
        rc = kl_client_batch(c, b, out, err);
    kl_batch_free(b);
    return rc;
}

static size_t az_received(const kl_receipt *r)
{
    if (r == NULL || r->decoded->n_results != 1 ||
        r->decoded->results[0]->kind_case != KEYLOAD__V1__MUTATION_RESULT__KIND_RECEIVED)
        return 0;
    return r->decoded->results[0]->received->n_messages;
}

/* Ack (ack true) or release one lease token. */
static kl_code az_settle(kl_client *c, const char *queue, const uint8_t *token, size_t len, bool ack,
                         kl_receipt **out, kl_err *err)
{
    kl_batch *b = NULL;
    *out = NULL;
    kl_bytes t = {token, len};
    kl_code rc = kl_batch_new(NULL, &b, err);
    if (rc == KL_OK)
        rc = ack ? kl_batch_ack(b, queue, &t, 1, err) : kl_batch_release(b, queue, &t, 1, err);
    if (rc == KL_OK)
        rc = kl_client_batch(c, b, out, err);
    kl_batch_free(b);
    return rc;
}

typedef struct az_counts {
    long long messages, available, in_flight;
} az_counts;

static kl_code az_counts_get(kl_client *c, const char *queue, az_counts *out, kl_err *err)
{
    Keyload__V1__QueueStatsAnswer *s = NULL;
    out->messages = out->available = out->in_flight = -1;
    kl_code rc = kl_client_queue_stats(c, queue, &s, err);
    if (rc != KL_OK)
        return rc;
    out->messages = (long long)s->messages;
    out->available = (long long)s->available;
    out->in_flight = (long long)s->in_flight;
    kl_queue_stats_free(s);
    return KL_OK;
}

static bool az_counts_eq(const az_counts *a, const az_counts *b)
{
    return a->messages == b->messages && a->available == b->available && a->in_flight == b->in_flight;
}

static kl_code az_create_queue(kl_client *c, const char *queue, int partition, kl_err *err)
{
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    kl_queue_options o = {.pin_partition = true, .partition = partition};
    kl_code rc = kl_batch_new(NULL, &b, err);
    if (rc == KL_OK)
        rc = kl_batch_create_queue(b, queue, &o, err);
    if (rc == KL_OK)
        rc = kl_client_batch(c, b, &r, err);
    kl_batch_free(b);
    kl_receipt_free(r);
    return rc;
}

static kl_code az_create_database(kl_client *c, const char *database, const char *command_id, kl_receipt **out,
                                  kl_err *err)
{
    kl_batch *b = NULL;
    *out = NULL;
    kl_code rc = kl_batch_new(command_id, &b, err);
    if (rc == KL_OK)
        rc = kl_batch_create_database(b, database, NULL, err);
    if (rc == KL_OK)
        rc = kl_client_batch(c, b, out, err);
    kl_batch_free(b);
    return rc;
}

static kl_code az_grant(kl_client *c, const char *principal, Keyload__V1__Permission perm, const char *pattern,
                        const char *const *fields, size_t nf, const char *const *headers, size_t nh,
                        kl_principal_result *res, kl_err *err)
{
    char cmd[KL_COMMAND_ID_TEXT_LEN + 1];
    kl_command_id_new(cmd);
    kl_grant g = {.permission = perm, .queue_pattern = pattern, .fields = fields, .n_fields = nf,
                  .headers = headers, .n_headers = nh};
    return kl_client_grant(c, cmd, principal, &g, res, NULL, err);
}

static kl_code az_create_principal(kl_client *c, const az_who *w, kl_role role, kl_principal_result *res,
                                   kl_err *err)
{
    char cmd[KL_COMMAND_ID_TEXT_LEN + 1];
    kl_command_id_new(cmd);
    return kl_client_create_principal(c, cmd, w->id, w->pk, role, res, NULL, err);
}

/* The principal's stored policy epoch as ShowPrincipal reads it (-1: not readable; the
 * code in *code). */
static long long az_epoch(kl_client *c, const char *principal, kl_code *code)
{
    Keyload__V1__ShowPrincipalAnswer *a = NULL;
    kl_err err;
    kl_code rc = kl_client_show_principal(c, principal, &a, &err);
    if (code)
        *code = rc;
    long long e = rc == KL_OK ? (long long)a->principal->policy_epoch : -1;
    kl_principal_answer_free(a);
    return e;
}

/* ---- a raw sealed client: Hello, then sealed requests exactly as built here ---- */

typedef struct az_raw {
    nng_socket sock;
    bool open;
    kl_session cs;
} az_raw;

static void az_raw_close(az_raw *r)
{
    if (r->open)
        nng_close(r->sock);
    r->open = false;
    kl_session_wipe(&r->cs);
}

static kl_code az_raw_exchange(az_raw *r, const Keyload__V1__Envelope *env, int timeout_ms,
                               Keyload__V1__Answer **out, kl_err *err)
{
    *out = NULL;
    nng_socket_set_ms(r->sock, NNG_OPT_SENDTIMEO, timeout_ms);
    nng_socket_set_ms(r->sock, NNG_OPT_RECVTIMEO, timeout_ms);
    size_t n = keyload__v1__envelope__get_packed_size(env);
    uint8_t *buf = malloc(n ? n : 1);
    keyload__v1__envelope__pack(env, buf);
    int rv = nng_send(r->sock, buf, n, 0);
    free(buf);
    if (rv != 0)
        return kl_fail(err, KL_UNAVAILABLE, "send", "send: %s", nng_strerror(rv));
    void *in;
    size_t in_len;
    if ((rv = nng_recv(r->sock, &in, &in_len, NNG_FLAG_ALLOC)) != 0)
        return kl_fail(err, KL_DEADLINE_EXCEEDED, "no_answer", "recv: %s", nng_strerror(rv));
    *out = keyload__v1__answer__unpack(NULL, in_len, in);
    nng_free(in, in_len);
    if (*out == NULL)
        return kl_fail(err, KL_INTERNAL, "answer", "the Answer does not decode");
    return KL_OK;
}

/* Connects to member (partition, member id) at member_url and shakes hands as principal. */
static kl_code az_raw_hello(az_raw *r, const char *member_url, int partition, int member_id,
                            const uint8_t member_pub[32], const char *principal, const uint8_t sk[64], kl_err *err)
{
    static uint64_t rid = 7000000;
    memset(r, 0, sizeof *r);
    if (nng_req0_open(&r->sock) != 0)
        return kl_fail(err, KL_INTERNAL, "socket", "nng_req0_open failed");
    r->open = true;
    nng_socket_set_ms(r->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    int rv = nng_dial(r->sock, member_url, NULL, 0);
    if (rv != 0)
        return kl_fail(err, KL_UNAVAILABLE, "connect", "dial %s: %s", member_url, nng_strerror(rv));
    kl_session_client c;
    kl_code rc = kl_session_hello_new(principal, sk, az_name, partition, (uint64_t)member_id, wall_ms(), NULL, NULL,
                                      &c, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__Hello m = KEYLOAD__V1__HELLO__INIT;
    kl_session_hello_to_pb(&c.hello, &m);
    uint8_t buf[512];
    size_t n = keyload__v1__hello__pack(&m, buf);
    Keyload__V1__Envelope env = KEYLOAD__V1__ENVELOPE__INIT;
    env.version = 1;
    env.method = "keyload.v1.Hello";
    env.request_id = rid++;
    env.payload.data = buf;
    env.payload.len = n;
    Keyload__V1__Answer *a = NULL;
    rc = az_raw_exchange(r, &env, 5000, &a, err);
    if (rc == KL_OK && a->code != 0)
        rc = kl_fail(err, (kl_code)a->code, a->detail, "Hello: %s", a->message);
    if (rc == KL_OK) {
        Keyload__V1__HelloAnswer *ha = keyload__v1__hello_answer__unpack(NULL, a->payload.len, a->payload.data);
        kl_session_hello_answer ans;
        if (ha == NULL)
            rc = kl_fail(err, KL_INTERNAL, "answer", "the HelloAnswer does not decode");
        if (rc == KL_OK)
            rc = kl_session_answer_from_pb(ha, &ans, err);
        if (rc == KL_OK)
            rc = kl_session_finish(&c, &ans, member_pub, &r->cs, err);
        if (ha)
            keyload__v1__hello_answer__free_unpacked(ha, NULL);
    }
    if (a)
        keyload__v1__answer__free_unpacked(a, NULL);
    kl_session_client_wipe(&c);
    return rc;
}

/* One sealed request, one attempt. KL_OK: *pt (malloc'd) is the opened answer. Otherwise
 * err holds the answer's code, detail and message; an error answer that carries a seal must
 * open (it authenticates code and detail), else INTERNAL. */
static kl_code az_raw_call(az_raw *r, const char *method, const uint8_t *req, size_t len, int timeout_ms,
                           uint8_t **pt, size_t *pt_len, kl_err *err)
{
    static uint64_t rid = 8000000;
    *pt = NULL;
    *pt_len = 0;
    uint64_t counter = r->cs.next_counter;
    size_t cap = len + KL_SESSION_SEAL_OVERHEAD, sealed_len = 0;
    uint8_t *sealed = malloc(cap);
    kl_code rc = kl_session_seal_request(&r->cs, counter, req, len, (const uint8_t *)method, strlen(method), sealed,
                                         cap, &sealed_len, err);
    if (rc != KL_OK) {
        free(sealed);
        return rc;
    }
    Keyload__V1__Envelope env = KEYLOAD__V1__ENVELOPE__INIT;
    env.version = 1;
    env.method = (char *)method;
    env.request_id = rid++;
    env.session_id.data = r->cs.id;
    env.session_id.len = KL_SESSION_ID_LEN;
    env.counter = counter;
    env.sealed.data = sealed;
    env.sealed.len = sealed_len;
    Keyload__V1__Answer *a = NULL;
    rc = az_raw_exchange(r, &env, timeout_ms, &a, err);
    free(sealed);
    if (rc != KL_OK)
        return rc;
    kl_code code = (kl_code)a->code;
    if (a->sealed.len > 0) {
        uint8_t ad[KL_SESSION_AD_MAX];
        size_t m = strlen(method), d = strlen(a->detail);
        bool fits = m + 2 + d <= sizeof ad && a->sealed.len >= KL_SESSION_SEAL_OVERHEAD;
        uint8_t *out = malloc(a->sealed.len);
        size_t out_len = 0;
        if (fits) {
            memcpy(ad, method, m);
            ad[m] = 0;
            ad[m + 1] = (uint8_t)a->code;
            memcpy(ad + m + 2, a->detail, d);
        }
        if (!fits || kl_session_open_answer(&r->cs, counter, a->sealed.data, a->sealed.len, ad, m + 2 + d, out,
                                            a->sealed.len, &out_len, err) != KL_OK) {
            free(out);
            keyload__v1__answer__free_unpacked(a, NULL);
            return kl_fail(err, KL_INTERNAL, "answer_seal", "the sealed answer (code %s) does not open",
                           kl_code_name(code));
        }
        if (code == KL_OK) {
            *pt = out;
            *pt_len = out_len;
        } else {
            free(out);
        }
    } else if (code == KL_OK) {
        keyload__v1__answer__free_unpacked(a, NULL);
        return kl_fail(err, KL_INTERNAL, "answer_seal", "an OK answer came unsealed");
    }
    if (code != KL_OK)
        kl_fail(err, code, a->detail, "%s", a->message);
    keyload__v1__answer__free_unpacked(a, NULL);
    return code;
}

static kl_code az_raw_batch(az_raw *r, Keyload__V1__BatchRequest *b, int timeout_ms, kl_err *err)
{
    size_t len;
    uint8_t *req = pack_free(b, &len);
    uint8_t *pt = NULL;
    size_t pt_len = 0;
    kl_code rc = az_raw_call(r, "keyload.v1.Batch", req, len, timeout_ms, &pt, &pt_len, err);
    free(req);
    free(pt);
    return rc;
}

/* A QueueLaneRef of AZ_DB (protobuf-c owned). */
static Keyload__V1__QueueLaneRef *az_ref(const char *queue)
{
    Keyload__V1__QueueLaneRef *r = mkref(queue);
    free(r->tenant);
    free(r->database);
    r->tenant = strdup(AZ_TENANT);
    r->database = strdup("shop");
    return r;
}

static void az_add_enqueue(Keyload__V1__BatchRequest *b, const char *queue, const char *body)
{
    add_enqueue(b, queue, body);
    Keyload__V1__Enqueue *e = b->mutations[b->n_mutations - 1]->enqueue;
    keyload__v1__queue_lane_ref__free_unpacked(e->lane, NULL);
    e->lane = az_ref(queue);
}

/* ---- 1. the authorization matrix ---- */

enum { M_ENQ, M_RECV, M_ACK, M_REL, M_STATS, M_COUNT };
static const char *const az_method_name[M_COUNT] = {"enqueue", "receive", "ack", "release", "queue stats"};
static const Keyload__V1__Permission az_method_perm[M_COUNT] = {
    KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, KEYLOAD__V1__PERMISSION__QUEUE_CONSUME,
    KEYLOAD__V1__PERMISSION__QUEUE_ACK, KEYLOAD__V1__PERMISSION__QUEUE_ACK,
    KEYLOAD__V1__PERMISSION__QUEUE_INSPECT};

/* Admin: one message into q, then lease one: its token into tok. */
static bool az_lease_one(kl_client *admin, const char *q, uint8_t tok[64], size_t *tok_len, kl_err *err)
{
    kl_receipt *r = NULL;
    if (az_enqueue(admin, q, NULL, "to-lease", NULL, NULL, NULL, err) != KL_OK)
        return false;
    if (az_receive(admin, q, 1, &r, err) != KL_OK)
        return false;
    bool ok = az_received(r) == 1 && r->decoded->results[0]->received->messages[0]->lease_token.len <= 64;
    if (ok) {
        const Keyload__V1__ReceivedMessage *m = r->decoded->results[0]->received->messages[0];
        memcpy(tok, m->lease_token.data, m->lease_token.len);
        *tok_len = m->lease_token.len;
    } else {
        kl_fail(err, KL_INTERNAL, "lease", "the administrator's receive leased %zu messages", az_received(r));
    }
    kl_receipt_free(r);
    return ok;
}

/* Admin: receives and acks the oldest available message of q (clears a blocking one). */
static bool az_drain_one(kl_client *admin, const char *q, kl_err *err)
{
    kl_receipt *r = NULL, *a = NULL;
    if (az_receive(admin, q, 1, &r, err) != KL_OK || az_received(r) != 1) {
        kl_receipt_free(r);
        return false;
    }
    const Keyload__V1__ReceivedMessage *m = r->decoded->results[0]->received->messages[0];
    kl_code rc = az_settle(admin, q, m->lease_token.data, m->lease_token.len, true, &a, err);
    kl_receipt_free(r);
    kl_receipt_free(a);
    return rc == KL_OK;
}

/* Runs method `method` as client c on queue q and checks the outcome against `allowed`;
 * returns false (with why) when it does not match. */
static bool az_matrix_cell(kl_client *admin, kl_client *c, const char *who, int method, bool allowed, const char *q,
                           char *why, size_t cap)
{
    kl_err err;
    kl_err_clear(&err);
    uint8_t tok[64];
    size_t tok_len = 0;
    az_counts before, after;
    if ((method == M_ACK || method == M_REL) && !az_lease_one(admin, q, tok, &tok_len, &err)) {
        snprintf(why, cap, "setup lease: %s", err.message);
        return false;
    }
    if (method == M_RECV && az_enqueue(admin, q, NULL, "to-receive", NULL, NULL, NULL, &err) != KL_OK) {
        snprintf(why, cap, "setup enqueue: %s", err.message);
        return false;
    }
    if (az_counts_get(admin, q, &before, &err) != KL_OK) {
        snprintf(why, cap, "admin stats: %s", err.message);
        return false;
    }
    kl_receipt *r = NULL;
    kl_code rc;
    long long got = -1;
    Keyload__V1__QueueStatsAnswer *st = NULL;
    switch (method) {
    case M_ENQ:
        rc = az_enqueue(c, q, NULL, "matrix", NULL, NULL, &r, &err);
        break;
    case M_RECV:
        rc = az_receive(c, q, 1, &r, &err);
        got = rc == KL_OK ? (long long)az_received(r) : -1;
        break;
    case M_ACK:
    case M_REL:
        rc = az_settle(c, q, tok, tok_len, method == M_ACK, &r, &err);
        if (rc == KL_OK && r->decoded->n_results == 1)
        {
            const Keyload__V1__MutationResult *mr = r->decoded->results[0];
            if (method == M_ACK && mr->kind_case == KEYLOAD__V1__MUTATION_RESULT__KIND_ACKED)
                got = (long long)mr->acked->count;
            if (method == M_REL && mr->kind_case == KEYLOAD__V1__MUTATION_RESULT__KIND_RELEASED)
                got = (long long)mr->released->count;
        }
        break;
    default:
        rc = kl_client_queue_stats(c, q, &st, &err);
        got = rc == KL_OK ? (long long)st->messages : -1;
        kl_queue_stats_free(st);
        break;
    }
    kl_receipt_free(r);
    if (az_counts_get(admin, q, &after, &err) != KL_OK) {
        snprintf(why, cap, "admin stats after: %s", err.message);
        return false;
    }
    const char *perm = kl_permission_name(az_method_perm[method]);
    if (!allowed) {
        char want[64];
        snprintf(want, sizeof want, "grant:%s", perm);
        if (rc != KL_PERMISSION_DENIED || strcmp(err.detail, want) != 0) {
            snprintf(why, cap, "%s by %s: %s %s (%s), want PERMISSION_DENIED %s", az_method_name[method], who,
                     kl_code_name(rc), err.detail, err.message, want);
            return false;
        }
        if (!az_counts_eq(&before, &after)) {
            snprintf(why, cap, "denied %s by %s changed the queue: messages %lld->%lld available %lld->%lld "
                               "in_flight %lld->%lld",
                     az_method_name[method], who, before.messages, after.messages, before.available,
                     after.available, before.in_flight, after.in_flight);
            return false;
        }
        return true;
    }
    if (rc != KL_OK) {
        snprintf(why, cap, "%s by %s (holding %s): %s %s (%s)", az_method_name[method], who, perm, kl_code_name(rc),
                 err.detail, err.message);
        return false;
    }
    az_counts want = before;
    long long want_got = 1;
    switch (method) {
    case M_ENQ:
        want.messages++, want.available++, want_got = -1;
        break;
    case M_RECV:
        want.available--, want.in_flight++;
        break;
    case M_ACK:
        want.messages--, want.in_flight--;
        break;
    case M_REL:
        want.available++, want.in_flight--;
        break;
    default:
        want_got = before.messages;
        break;
    }
    if (!az_counts_eq(&want, &after) || got != want_got) {
        snprintf(why, cap, "%s by %s: result %lld (want %lld); messages %lld available %lld in_flight %lld, "
                           "want %lld %lld %lld",
                 az_method_name[method], who, got, want_got, after.messages, after.available, after.in_flight,
                 want.messages, want.available, want.in_flight);
        return false;
    }
    return true;
}

void test_authz_matrix(void)
{
    char why[600] = "";
    kl_err err;
    kl_err_clear(&err);
    CHECK(az_setup("azmx", 1, 1, 1, 3000, 0, why, sizeof why), "%s", why);
    az_start_all();
    CHECK(az_leader(0, 20000) == 0, "the member did not start serving");

    az_who admin, pub, con, ack, ins, none, fpub, fcon, dba, boss, helper, admin2;
    CHECK(az_who_new(&admin, "admin") && az_who_new(&pub, "pub") && az_who_new(&con, "con") &&
              az_who_new(&ack, "acker") && az_who_new(&ins, "ins") && az_who_new(&none, "none") &&
              az_who_new(&fpub, "fpub") && az_who_new(&fcon, "fcon") && az_who_new(&dba, "dba") &&
              az_who_new(&boss, "boss") && az_who_new(&helper, "helper") && az_who_new(&admin2, "admin2"),
          "principal key files");

    /* Before any principal exists, a request without a session is refused, not run. */
    {
        Keyload__V1__BatchRequest *b = batch_new(NULL);
        az_add_enqueue(b, "m", "unsealed");
        size_t len;
        uint8_t *req = pack_free(b, &len);
        snprintf(url, sizeof url, "%.100s", az_url[0][0]);
        answer a = call("keyload.v1.Batch", req, len, 5000);
        free(req);
        kl_code code = a.code;
        char detail[128];
        snprintf(detail, sizeof detail, "%s", a.err.detail);
        answer_free(&a);
        CHECK(code == KL_UNAUTHENTICATED && strcmp(detail, "session_required") == 0,
              "unsealed Batch before bootstrap: %s %s", kl_code_name(code), detail);
    }

    kl_receipt *boot = NULL;
    CHECK(az_bootstrap(&admin, AZ_DB, NULL, &boot, &err) == KL_OK, "bootstrap: %s %s", kl_code_name(err.code),
          err.message);
    kl_receipt_free(boot);
    CHECK(az_who_open(&admin, 10000, &err) == KL_OK, "admin client: %s", err.message);
    for (int i = 0; i < 3; i++) {
        static const char *const qs[] = {"m", "f", "r"};
        CHECK(az_create_queue(admin.c, qs[i], 0, &err) == KL_OK, "create queue %s: %s %s", qs[i],
              kl_code_name(err.code), err.message);
    }

    /* Unsealed Batch and reads after bootstrap: refused, nothing run. */
    az_counts c0, c1;
    CHECK(az_counts_get(admin.c, "m", &c0, &err) == KL_OK, "admin stats: %s", err.message);
    {
        Keyload__V1__BatchRequest *b = batch_new(NULL);
        az_add_enqueue(b, "m", "unsealed");
        size_t len;
        uint8_t *req = pack_free(b, &len);
        snprintf(url, sizeof url, "%.100s", az_url[0][0]);
        answer a = call("keyload.v1.Batch", req, len, 5000);
        free(req);
        kl_code code = a.code;
        char detail[128];
        snprintf(detail, sizeof detail, "%s", a.err.detail);
        answer_free(&a);
        CHECK(code == KL_UNAUTHENTICATED && strcmp(detail, "session_required") == 0, "unsealed Batch: %s %s",
              kl_code_name(code), detail);
        Keyload__V1__QueueStatsRequest sq = KEYLOAD__V1__QUEUE_STATS_REQUEST__INIT;
        sq.queue = az_ref("m");
        uint8_t buf[512];
        len = keyload__v1__queue_stats_request__pack(&sq, buf);
        keyload__v1__queue_lane_ref__free_unpacked(sq.queue, NULL);
        a = call("keyload.v1.QueueStats", buf, len, 5000);
        code = a.code;
        snprintf(detail, sizeof detail, "%s", a.err.detail);
        answer_free(&a);
        CHECK(code == KL_UNAUTHENTICATED && strcmp(detail, "session_required") == 0, "unsealed QueueStats: %s %s",
              kl_code_name(code), detail);
        Keyload__V1__ShowPrincipalRequest sp = KEYLOAD__V1__SHOW_PRINCIPAL_REQUEST__INIT;
        sp.principal_id = "admin";
        len = keyload__v1__show_principal_request__pack(&sp, buf);
        a = call("keyload.v1.ShowPrincipal", buf, len, 5000);
        code = a.code;
        snprintf(detail, sizeof detail, "%s", a.err.detail);
        answer_free(&a);
        CHECK(code == KL_UNAUTHENTICATED && strcmp(detail, "session_required") == 0,
              "unsealed ShowPrincipal: %s %s", kl_code_name(code), detail);
    }
    CHECK(az_counts_get(admin.c, "m", &c1, &err) == KL_OK && az_counts_eq(&c0, &c1),
          "the unsealed batch changed the queue (%lld -> %lld messages)", c0.messages, c1.messages);

    /* A second bootstrap (valid proof, new names) is refused and creates nothing. */
    err.code = KL_OK;
    kl_code rc = az_bootstrap(&admin2, "acme/second", NULL, NULL, &err);
    CHECK(rc == KL_FAILED_PRECONDITION && strcmp(err.detail, "bootstrap_done") == 0, "second bootstrap: %s %s (%s)",
          kl_code_name(rc), err.detail, err.message);
    kl_code sc;
    CHECK(az_epoch(admin.c, "admin2", &sc) < 0 && sc == KL_NOT_FOUND, "the refused bootstrap's admin: %s",
          kl_code_name(sc));

    /* One principal per permission, each granted it on queue m only; one with nothing. */
    az_who *holders[5] = {&pub, &con, &ack, &ins, &none};
    const Keyload__V1__Permission held[5] = {
        KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, KEYLOAD__V1__PERMISSION__QUEUE_CONSUME,
        KEYLOAD__V1__PERMISSION__QUEUE_ACK, KEYLOAD__V1__PERMISSION__QUEUE_INSPECT,
        KEYLOAD__V1__PERMISSION__PERMISSION_UNSPECIFIED};
    for (int i = 0; i < 5; i++) {
        kl_principal_result res;
        CHECK(az_create_principal(admin.c, holders[i], KL_ROLE_NONE, &res, &err) == KL_OK,
              "create principal %s: %s %s", holders[i]->id, kl_code_name(err.code), err.message);
        CHECK(res.policy_epoch == 1 && res.changed, "new principal %s: epoch %llu", holders[i]->id,
              (unsigned long long)res.policy_epoch);
        if (held[i] != KEYLOAD__V1__PERMISSION__PERMISSION_UNSPECIFIED) {
            CHECK(az_grant(admin.c, holders[i]->id, held[i], "m", NULL, 0, NULL, 0, &res, &err) == KL_OK,
                  "grant %s to %s: %s %s", kl_permission_name(held[i]), holders[i]->id, kl_code_name(err.code),
                  err.message);
            CHECK(res.policy_epoch == 2 && res.changed, "grant to %s: epoch %llu", holders[i]->id,
                  (unsigned long long)res.policy_epoch);
        }
        CHECK(az_who_open(holders[i], 10000, &err) == KL_OK, "client of %s: %s", holders[i]->id, err.message);
    }

    /* The matrix: 5 principals x 5 methods. */
    int cells = 0;
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < M_COUNT; j++) {
            bool allowed = held[i] == az_method_perm[j];
            CHECK(az_matrix_cell(admin.c, holders[i]->c, holders[i]->id, j, allowed, "m", why, sizeof why), "%s",
                  why);
            cells++;
        }
    fprintf(stderr, "  %d matrix cells checked (allowed exactly with the matching grant)\n", cells);

    /* A batch mixing an allowed and a denied mutation is refused whole. */
    {
        CHECK(az_counts_get(admin.c, "m", &c0, &err) == KL_OK, "stats: %s", err.message);
        kl_batch *b = NULL;
        kl_message *msg = NULL;
        kl_receipt *r = NULL;
        rc = kl_batch_new(NULL, &b, &err);
        if (rc == KL_OK)
            rc = kl_message_new("mixed", 5, &msg, &err);
        if (rc == KL_OK)
            rc = kl_batch_enqueue(b, "m", NULL, msg, &err);
        if (rc == KL_OK)
            rc = kl_batch_receive(b, "m", NULL, 1, 60000, &err);
        if (rc == KL_OK)
            rc = kl_client_batch(pub.c, b, &r, &err);
        kl_message_free(msg);
        kl_batch_free(b);
        kl_receipt_free(r);
        CHECK(rc == KL_PERMISSION_DENIED && strcmp(err.detail, "grant:QueueConsume") == 0,
              "enqueue+receive by pub: %s %s", kl_code_name(rc), err.detail);
        CHECK(az_counts_get(admin.c, "m", &c1, &err) == KL_OK && az_counts_eq(&c0, &c1),
              "the refused mixed batch changed the queue: messages %lld -> %lld", c0.messages, c1.messages);
    }

    /* Field and header grants on enqueue. */
    static const char *const color[] = {"color"};
    static const char *const trace[] = {"trace"};
    kl_principal_result res;
    CHECK(az_create_principal(admin.c, &fpub, KL_ROLE_NONE, &res, &err) == KL_OK, "create fpub: %s", err.message);
    CHECK(az_grant(admin.c, "fpub", KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "f", color, 1, trace, 1, &res, &err) ==
              KL_OK,
          "grant fpub: %s %s", kl_code_name(err.code), err.message);
    CHECK(az_who_open(&fpub, 10000, &err) == KL_OK, "fpub client: %s", err.message);
    CHECK(az_enqueue(fpub.c, "f", NULL, "b", "color=red", NULL, NULL, &err) == KL_OK, "allowed field: %s %s",
          kl_code_name(err.code), err.message);
    CHECK(az_enqueue(fpub.c, "f", NULL, "b", NULL, "trace=t1", NULL, &err) == KL_OK, "allowed header: %s %s",
          kl_code_name(err.code), err.message);
    CHECK(az_enqueue(fpub.c, "f", NULL, "b", "color=blue", "trace=t2", NULL, &err) == KL_OK,
          "allowed field and header: %s %s", kl_code_name(err.code), err.message);
    CHECK(az_counts_get(admin.c, "f", &c0, &err) == KL_OK && c0.messages == 3, "f holds %lld", c0.messages);
    rc = az_enqueue(fpub.c, "f", NULL, "b", "size=v-secret-123", NULL, NULL, &err);
    CHECK(rc == KL_PERMISSION_DENIED && strcmp(err.detail, "field_grant:QueuePublish") == 0,
          "other field: %s %s (%s)", kl_code_name(rc), err.detail, err.message);
    CHECK(strstr(err.message, "v-secret-123") == NULL, "the refusal shows the field's value: %s", err.message);
    rc = az_enqueue(fpub.c, "f", NULL, "b", "color=red", "other=v-secret-456", NULL, &err);
    CHECK(rc == KL_PERMISSION_DENIED && strcmp(err.detail, "header_grant:QueuePublish") == 0,
          "other header: %s %s (%s)", kl_code_name(rc), err.detail, err.message);
    CHECK(strstr(err.message, "v-secret-456") == NULL, "the refusal shows the header's value: %s", err.message);
    rc = az_enqueue(fpub.c, "m", NULL, "b", "color=red", NULL, NULL, &err);
    CHECK(rc == KL_PERMISSION_DENIED && strcmp(err.detail, "grant:QueuePublish") == 0,
          "fpub on a queue its grant does not name: %s %s", kl_code_name(rc), err.detail);
    CHECK(az_counts_get(admin.c, "f", &c1, &err) == KL_OK && az_counts_eq(&c0, &c1),
          "refused enqueues changed f: %lld -> %lld messages", c0.messages, c1.messages);

    /* Field and header grants on receive: a message the consumer may not read refuses the
     * whole Receive and leases nothing. */
    CHECK(az_create_principal(admin.c, &fcon, KL_ROLE_NONE, &res, &err) == KL_OK, "create fcon: %s", err.message);
    CHECK(az_grant(admin.c, "fcon", KEYLOAD__V1__PERMISSION__QUEUE_CONSUME, "r", color, 1, NULL, 0, &res, &err) ==
              KL_OK,
          "grant fcon: %s %s", kl_code_name(err.code), err.message);
    CHECK(az_who_open(&fcon, 10000, &err) == KL_OK, "fcon client: %s", err.message);
    static const struct {
        const char *field, *header, *detail;
    } unreadable[] = {{"ssn=v-secret-789", NULL, "field_grant:QueueConsume"},
                      {NULL, "h=v-secret-790", "header_grant:QueueConsume"}};
    for (int i = 0; i < 2; i++) {
        CHECK(az_enqueue(admin.c, "r", NULL, "hidden", unreadable[i].field, unreadable[i].header, NULL, &err) ==
                  KL_OK,
              "admin enqueue to r: %s", err.message);
        CHECK(az_counts_get(admin.c, "r", &c0, &err) == KL_OK, "stats r: %s", err.message);
        kl_receipt *r = NULL;
        rc = az_receive(fcon.c, "r", 10, &r, &err);
        kl_receipt_free(r);
        CHECK(rc == KL_PERMISSION_DENIED && strcmp(err.detail, unreadable[i].detail) == 0,
              "receive of an unreadable message: %s %s (%s), want %s", kl_code_name(rc), err.detail, err.message,
              unreadable[i].detail);
        CHECK(strstr(err.message, "v-secret-") == NULL && strstr(err.message, "hidden") == NULL,
              "the refusal shows message data: %s", err.message);
        CHECK(az_counts_get(admin.c, "r", &c1, &err) == KL_OK && az_counts_eq(&c0, &c1) && c1.in_flight == 0,
              "refused receive leased something: in_flight %lld -> %lld, available %lld -> %lld", c0.in_flight,
              c1.in_flight, c0.available, c1.available);
        CHECK(az_drain_one(admin.c, "r", &err), "admin drains r: %s", err.message);
    }
    CHECK(az_enqueue(admin.c, "r", NULL, "readable", "color=blue", NULL, NULL, &err) == KL_OK, "admin enqueue: %s",
          err.message);
    {
        kl_receipt *r = NULL;
        rc = az_receive(fcon.c, "r", 10, &r, &err);
        size_t n = az_received(r);
        bool field_ok = n == 1 && r->decoded->results[0]->received->messages[0]->message->n_fields == 1 &&
                        strcmp(r->decoded->results[0]->received->messages[0]->message->fields[0]->key, "color") == 0;
        kl_receipt_free(r);
        CHECK(rc == KL_OK && field_ok, "receive of a readable message: %s %s, %zu messages", kl_code_name(rc),
              err.message, n);
        CHECK(az_counts_get(admin.c, "r", &c1, &err) == KL_OK && c1.in_flight == 1, "r in_flight %lld",
              c1.in_flight);
    }

    /* Other tenants: the same principals naming tenant globex are refused ("tenant"). */
    {
        kl_client *g = NULL;
        CHECK(az_open(&pub, "globex/shop", 10000, &g, &err) == KL_OK, "pub client for globex: %s", err.message);
        rc = az_enqueue(g, "m", NULL, "x", NULL, NULL, NULL, &err);
        CHECK(rc == KL_PERMISSION_DENIED && strcmp(err.detail, "tenant") == 0, "pub enqueue into globex: %s %s (%s)",
              kl_code_name(rc), err.detail, err.message);
        az_close_client(&g);
        CHECK(az_open(&admin, "globex/shop", 10000, &g, &err) == KL_OK, "admin client for globex: %s", err.message);
        az_who intruder;
        CHECK(az_who_new(&intruder, "intruder"), "key file");
        rc = az_create_principal(g, &intruder, KL_ROLE_NONE, &res, &err);
        CHECK(rc == KL_PERMISSION_DENIED && strcmp(err.detail, "tenant") == 0,
              "acme's administrator creates a principal of globex: %s %s (%s)", kl_code_name(rc), err.detail,
              err.message);
        az_close_client(&g);
        kl_receipt *r = NULL;
        rc = az_create_database(admin.c, "globex/other", NULL, &r, &err);
        kl_receipt_free(r);
        CHECK(rc == KL_PERMISSION_DENIED && strcmp(err.detail, "tenant") == 0,
              "acme's administrator creates a database of globex: %s %s (%s)", kl_code_name(rc), err.detail,
              err.message);
        CHECK(az_epoch(admin.c, "intruder", &sc) < 0 && sc == KL_NOT_FOUND, "intruder exists: %s", kl_code_name(sc));
        /* The same straight to the member (no LocateQueue first): a sealed Batch and a
         * sealed QueueStats naming globex, by principals holding the permission in acme. */
        az_raw raw;
        rc = az_raw_hello(&raw, az_url[0][0], 0, 1, az_mpub[0][0], "pub", pub.sk, &err);
        if (rc == KL_OK) {
            Keyload__V1__BatchRequest *b = batch_new(NULL);
            az_add_enqueue(b, "m", "x");
            Keyload__V1__QueueLaneRef *l = b->mutations[0]->enqueue->lane;
            free(l->tenant);
            l->tenant = strdup("globex");
            rc = az_raw_batch(&raw, b, 5000, &err);
        }
        az_raw_close(&raw);
        CHECK(rc == KL_PERMISSION_DENIED && strcmp(err.detail, "tenant") == 0,
              "sealed Batch by pub naming tenant globex: %s %s (%s)", kl_code_name(rc), err.detail, err.message);
        rc = az_raw_hello(&raw, az_url[0][0], 0, 1, az_mpub[0][0], "ins", ins.sk, &err);
        if (rc == KL_OK) {
            Keyload__V1__QueueStatsRequest sq = KEYLOAD__V1__QUEUE_STATS_REQUEST__INIT;
            sq.queue = az_ref("m");
            free(sq.queue->tenant);
            sq.queue->tenant = strdup("globex");
            uint8_t buf[512], *pt = NULL;
            size_t len = keyload__v1__queue_stats_request__pack(&sq, buf), pt_len = 0;
            keyload__v1__queue_lane_ref__free_unpacked(sq.queue, NULL);
            rc = az_raw_call(&raw, "keyload.v1.QueueStats", buf, len, 5000, &pt, &pt_len, &err);
            free(pt);
        }
        az_raw_close(&raw);
        CHECK(rc == KL_PERMISSION_DENIED && strcmp(err.detail, "tenant") == 0,
              "sealed QueueStats by ins naming tenant globex: %s %s (%s)", kl_code_name(rc), err.detail, err.message);
        CHECK(az_counts_get(admin.c, "m", &c1, &err) == KL_OK, "stats: %s", err.message);
    }

    /* A non-administrator cannot grant, not even to itself. */
    rc = az_grant(pub.c, "pub", KEYLOAD__V1__PERMISSION__QUEUE_CONSUME, "*", NULL, 0, NULL, 0, &res, &err);
    CHECK(rc == KL_PERMISSION_DENIED && strcmp(err.detail, "role:administrator") == 0, "pub grants itself: %s %s (%s)",
          kl_code_name(rc), err.detail, err.message);
    CHECK(az_epoch(admin.c, "pub", &sc) == 2, "pub's epoch after the refused grant: %s", kl_code_name(sc));
    rc = az_grant(pub.c, "none", KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "m", NULL, 0, NULL, 0, &res, &err);
    CHECK(rc == KL_PERMISSION_DENIED && strcmp(err.detail, "role:administrator") == 0, "pub grants to none: %s %s",
          kl_code_name(rc), err.detail);

    /* A database administrator cannot create a cluster administrator (but may create a
     * plain principal of its database's tenant). */
    CHECK(az_create_principal(admin.c, &dba, KL_ROLE_DATABASE_ADMIN, &res, &err) == KL_OK, "create dba: %s %s",
          kl_code_name(err.code), err.message);
    CHECK(az_who_open(&dba, 10000, &err) == KL_OK, "dba client: %s", err.message);
    rc = az_create_principal(dba.c, &boss, KL_ROLE_CLUSTER_ADMIN, &res, &err);
    CHECK(rc == KL_PERMISSION_DENIED && strcmp(err.detail, "role:cluster_admin") == 0,
          "database admin creates a cluster admin: %s %s (%s)", kl_code_name(rc), err.detail, err.message);
    CHECK(az_epoch(admin.c, "boss", &sc) < 0 && sc == KL_NOT_FOUND, "boss exists after the refusal: %s",
          kl_code_name(sc));
    CHECK(az_create_principal(dba.c, &helper, KL_ROLE_NONE, &res, &err) == KL_OK,
          "database admin creates a plain principal: %s %s (%s)", kl_code_name(err.code), err.detail, err.message);

    /* A malformed grant pattern reaches the daemon (sealed, built raw: the SDK would refuse
     * it itself) and is INVALID_ARGUMENT naming grant.queue_pattern; nothing changes. */
    {
        az_raw raw;
        rc = az_raw_hello(&raw, az_url[0][0], 0, 1, az_mpub[0][0], "admin", admin.sk, &err);
        if (rc != KL_OK)
            az_raw_close(&raw);
        CHECK(rc == KL_OK, "raw Hello as admin: %s %s (%s)", kl_code_name(rc), err.detail, err.message);
        static const char *const bad[] = {"or*ders", "**", "m*x*", "a b"};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            Keyload__V1__BatchRequest *b = batch_new(NULL);
            Keyload__V1__Mutation *m = add_mut(b);
            m->kind_case = KEYLOAD__V1__MUTATION__KIND_GRANT_PERMISSION;
            m->grant_permission = calloc(1, sizeof *m->grant_permission);
            keyload__v1__grant_permission__init(m->grant_permission);
            m->grant_permission->principal_id = strdup("none");
            Keyload__V1__Grant *g = calloc(1, sizeof *g);
            keyload__v1__grant__init(g);
            g->database = strdup("shop");
            g->permission = KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH;
            g->queue_pattern = strdup(bad[i]);
            m->grant_permission->grant = g;
            rc = az_raw_batch(&raw, b, 10000, &err);
            if (!(rc == KL_INVALID_ARGUMENT && strcmp(err.detail, "grant.queue_pattern") == 0))
                az_raw_close(&raw);
            CHECK(rc == KL_INVALID_ARGUMENT && strcmp(err.detail, "grant.queue_pattern") == 0,
                  "grant with pattern \"%s\": %s %s (%s)", bad[i], kl_code_name(rc), err.detail, err.message);
        }
        /* The same raw path with a valid pattern works (the refusals were about the pattern). */
        Keyload__V1__BatchRequest *b = batch_new(NULL);
        Keyload__V1__Mutation *m = add_mut(b);
        m->kind_case = KEYLOAD__V1__MUTATION__KIND_GRANT_PERMISSION;
        m->grant_permission = calloc(1, sizeof *m->grant_permission);
        keyload__v1__grant_permission__init(m->grant_permission);
        m->grant_permission->principal_id = strdup("helper");
        Keyload__V1__Grant *g = calloc(1, sizeof *g);
        keyload__v1__grant__init(g);
        g->database = strdup("shop");
        g->permission = KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH;
        g->queue_pattern = strdup("orders.*");
        m->grant_permission->grant = g;
        rc = az_raw_batch(&raw, b, 10000, &err);
        az_raw_close(&raw);
        CHECK(rc == KL_OK, "raw grant with a valid pattern: %s %s (%s)", kl_code_name(rc), err.detail, err.message);
    }
    CHECK(az_epoch(admin.c, "none", &sc) == 1, "none's epoch after the refused grants: %s", kl_code_name(sc));
    CHECK(az_epoch(admin.c, "helper", &sc) == 2, "helper's epoch after the raw grant: %s", kl_code_name(sc));
    az_stop_all();
}

/* ---- 2. revocation, stale authority, the catalog lease ---- */

void test_authz_revocation(void)
{
    enum { LEASE_MS = 1500, MARGIN_MS = 750 };
    char why[600] = "";
    kl_err err;
    kl_err_clear(&err);
    CHECK(az_setup("azrev", 2, 1, 1, LEASE_MS, 2, why, sizeof why), "%s", why);
    az_start_all();
    CHECK(az_leader(0, 20000) == 0, "partition 0 did not start serving");
    CHECK(az_leader(1, 20000) == 0, "partition 1 did not start serving with a catalog lease");

    az_who admin, pub;
    CHECK(az_who_new(&admin, "admin") && az_who_new(&pub, "pub"), "principal key files");
    CHECK(az_bootstrap(&admin, AZ_DB, NULL, NULL, &err) == KL_OK, "bootstrap: %s %s", kl_code_name(err.code),
          err.message);
    CHECK(az_who_open(&admin, 15000, &err) == KL_OK, "admin client: %s", err.message);
    CHECK(az_create_queue(admin.c, "orders", 1, &err) == KL_OK, "create orders on partition 1: %s %s",
          kl_code_name(err.code), err.message);
    kl_principal_result res;
    CHECK(az_create_principal(admin.c, &pub, KL_ROLE_NONE, &res, &err) == KL_OK, "create pub: %s", err.message);
    CHECK(az_grant(admin.c, "pub", KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "orders", NULL, 0, NULL, 0, &res, &err) ==
              KL_OK,
          "grant: %s %s", kl_code_name(err.code), err.message);
    uint64_t e1 = res.policy_epoch;
    CHECK(az_who_open(&pub, 10000, &err) == KL_OK, "pub client: %s", err.message);

    const char *cmd_c = "7c1e0b52-3d4f-4a8e-9b1c-2f6a5d0e4c31";
    kl_receipt *first = NULL;
    kl_code rc = az_enqueue(pub.c, "orders", cmd_c, "the original", NULL, NULL, &first, &err);
    CHECK(rc == KL_OK, "enqueue C: %s %s (%s)", kl_code_name(rc), err.detail, err.message);
    int partition = first->decoded->partition;
    kl_receipt_free(first);
    CHECK(partition == 1, "enqueue C committed on partition %d, not 1", partition);
    az_counts c0;
    CHECK(az_counts_get(admin.c, "orders", &c0, &err) == KL_OK && c0.messages == 1, "orders holds %lld (%s)",
          c0.messages, err.message);

    /* Partition 0 learns a data partition's progress from its tails: a tail that is not
     * partition 1's own (here: unsealed and unsigned, claiming a far-ahead version) must be
     * refused, or it could walk a revocation past the barrier. */
    {
        Keyload__V1__CatalogTailRequest tr = KEYLOAD__V1__CATALOG_TAIL_REQUEST__INIT;
        tr.partition = 1;
        tr.applied_version = 1000000;
        uint8_t buf[64];
        size_t n = keyload__v1__catalog_tail_request__pack(&tr, buf);
        snprintf(url, sizeof url, "%.100s", az_url[0][0]);
        answer a = call("keyload.v1.CatalogTail", buf, n, 3000);
        kl_code code = a.code;
        char detail[128];
        snprintf(detail, sizeof detail, "%s", a.err.detail);
        answer_free(&a);
        CHECK(code == KL_UNAUTHENTICATED, "a forged CatalogTail for partition 1 was answered %s %s",
              kl_code_name(code), detail);
    }

    /* Revoke; the moment the call returns, the data partition refuses. */
    char rcmd[KL_COMMAND_ID_TEXT_LEN + 1];
    kl_command_id_new(rcmd);
    rc = kl_client_revoke(admin.c, rcmd, "pub", KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "orders", &res, NULL, &err);
    CHECK(rc == KL_OK && res.changed && res.policy_epoch == e1 + 1, "revoke: %s %s, epoch %llu (was %llu)",
          kl_code_name(rc), err.message, (unsigned long long)res.policy_epoch, (unsigned long long)e1);
    rc = az_enqueue(pub.c, "orders", NULL, "after the revoke", NULL, NULL, NULL, &err);
    CHECK(rc == KL_PERMISSION_DENIED && strcmp(err.detail, "grant:QueuePublish") == 0,
          "enqueue right after the revoke returned: %s %s (%s)", kl_code_name(rc), err.detail, err.message);

    /* Grant again (epoch + 2): fresh command ids work, C's replay is stale authority. */
    CHECK(az_grant(admin.c, "pub", KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "orders", NULL, 0, NULL, 0, &res, &err) ==
              KL_OK,
          "grant again: %s %s", kl_code_name(err.code), err.message);
    CHECK(res.policy_epoch == e1 + 2, "epoch after revoke and grant: %llu, want %llu",
          (unsigned long long)res.policy_epoch, (unsigned long long)(e1 + 2));
    rc = az_enqueue(pub.c, "orders", NULL, "fresh", NULL, NULL, NULL, &err);
    CHECK(rc == KL_OK, "fresh enqueue after the new grant: %s %s (%s)", kl_code_name(rc), err.detail, err.message);
    rc = az_enqueue(pub.c, "orders", cmd_c, "the original", NULL, NULL, NULL, &err);
    CHECK(rc == KL_PERMISSION_DENIED && strcmp(err.detail, "stale_authority") == 0, "replay of C: %s %s (%s)",
          kl_code_name(rc), err.detail, err.message);
    CHECK(strstr(err.message, "committed") != NULL, "the stale_authority message does not say C committed: %s",
          err.message);
    CHECK(az_counts_get(admin.c, "orders", &c0, &err) == KL_OK && c0.messages == 2,
          "orders holds %lld, want 2 (the original and the fresh one)", c0.messages);

    /* The catalog lease: one raw sealed session on partition 1, one attempt per probe. */
    az_raw raw;
    rc = az_raw_hello(&raw, az_url[1][0], 1, 1, az_mpub[1][0], "pub", pub.sk, &err);
    if (rc != KL_OK)
        az_raw_close(&raw);
    CHECK(rc == KL_OK, "raw Hello to partition 1: %s %s (%s)", kl_code_name(rc), err.detail, err.message);
    Keyload__V1__BatchRequest *b = batch_new(NULL);
    az_add_enqueue(b, "orders", "probe");
    rc = az_raw_batch(&raw, b, 3000, &err);
    if (rc != KL_OK)
        az_raw_close(&raw);
    CHECK(rc == KL_OK, "raw sealed enqueue: %s %s (%s)", kl_code_name(rc), err.detail, err.message);
    long long served = 3;

    az_kill(0, 0);
    int64_t cut = now_ms();
    int64_t refused_at = -1;
    kl_code last = KL_OK;
    char last_detail[128] = "";
    while (now_ms() - cut < LEASE_MS + 3000) {
        b = batch_new(NULL);
        az_add_enqueue(b, "orders", "probe");
        rc = az_raw_batch(&raw, b, 1000, &err);
        last = rc;
        snprintf(last_detail, sizeof last_detail, "%s", err.detail);
        if (rc == KL_OK) {
            served++;
        } else {
            refused_at = now_ms();
            break;
        }
        sleep_ms(50);
    }
    if (refused_at < 0 || last != KL_UNAVAILABLE)
        az_raw_close(&raw);
    CHECK(refused_at >= 0, "partition 1 still served %lld ms after partition 0 was killed (lease %d ms)",
          (long long)(now_ms() - cut), LEASE_MS);
    CHECK(last == KL_UNAVAILABLE && strcmp(last_detail, "catalog_lease") == 0,
          "refusal without partition 0: %s %s (%s)", kl_code_name(last), last_detail, err.message);
    fprintf(stderr, "  partition 1 refused %lld ms after partition 0 was killed (catalog_lease_ms %d)\n",
            (long long)(refused_at - cut), LEASE_MS);
    if (refused_at - cut > LEASE_MS + MARGIN_MS)
        az_raw_close(&raw);
    CHECK(refused_at - cut <= LEASE_MS + MARGIN_MS, "partition 1 served for %lld ms after the cut (lease %d + %d)",
          (long long)(refused_at - cut), LEASE_MS, MARGIN_MS);
    /* It stays refused while partition 0 is away. */
    sleep_ms(300);
    b = batch_new(NULL);
    az_add_enqueue(b, "orders", "probe");
    rc = az_raw_batch(&raw, b, 1000, &err);
    if (rc != KL_UNAVAILABLE)
        az_raw_close(&raw);
    CHECK(rc == KL_UNAVAILABLE && strcmp(err.detail, "catalog_lease") == 0, "a later probe: %s %s",
          kl_code_name(rc), err.detail);
    Keyload__V1__MemberStatusAnswer *st = az_status(1, 0);
    bool valid = st == NULL || st->catalog_lease_valid;
    if (st)
        keyload__v1__member_status_answer__free_unpacked(st, NULL);
    if (valid)
        az_raw_close(&raw);
    CHECK(!valid, "MemberStatus of partition 1 still reports a valid lease (or does not answer)");

    /* Partition 0 back: partition 1 serves again (same session: partition 1 never restarted). */
    az_start(0, 0);
    int64_t back = now_ms();
    rc = KL_UNAVAILABLE;
    while (now_ms() - back < 20000) {
        b = batch_new(NULL);
        az_add_enqueue(b, "orders", "probe");
        rc = az_raw_batch(&raw, b, 1000, &err);
        if (rc == KL_OK) {
            served++;
            break;
        }
        if (rc != KL_UNAVAILABLE)
            break;
        az_reap();
        sleep_ms(100);
    }
    az_raw_close(&raw);
    CHECK(rc == KL_OK, "partition 1 after partition 0 restarted: %s %s (%s)", kl_code_name(rc), err.detail,
          err.message);
    fprintf(stderr, "  partition 1 served again %lld ms after partition 0 was restarted\n",
            (long long)(now_ms() - back));
    CHECK(az_counts_get(admin.c, "orders", &c0, &err) == KL_OK && c0.messages == served,
          "orders holds %lld, want %lld (every probe answered OK, none refused): %s", c0.messages, served,
          err.message);
    az_stop_all();
}

/* ---- 3. cold restart of an RF3 cluster; no secret at rest or in a log ---- */

typedef struct az_needle {
    char what[96];
    uint8_t bytes[96];
    size_t len;
} az_needle;

#define AZ_MAX_NEEDLES 48
static az_needle az_needles[AZ_MAX_NEEDLES];
static int az_n_needles;
static char az_found[4096];
static long long az_files_scanned, az_bytes_scanned;
static const uint8_t *az_control;   /* must be found somewhere (the search works) */
static size_t az_control_len;
static bool az_control_seen;

static void az_needle_add(const char *what, const uint8_t *p, size_t n)
{
    if (az_n_needles >= AZ_MAX_NEEDLES || n > sizeof az_needles[0].bytes)
        return;
    az_needle *d = &az_needles[az_n_needles++];
    snprintf(d->what, sizeof d->what, "%s", what);
    memcpy(d->bytes, p, n);
    d->len = n;
}

/* The secret itself, its base64 (standard, without the padding, so padded and unpadded and
 * a prefix of URL-safe texts match too) and its lower-case hex. */
static void az_needle_secret(const char *what, const uint8_t *p, size_t n)
{
    char name[96], b64[sodium_base64_ENCODED_LEN(64, sodium_base64_VARIANT_ORIGINAL_NO_PADDING)], hex[129];
    az_needle_add(what, p, n);
    sodium_bin2base64(b64, sizeof b64, p, n, sodium_base64_VARIANT_ORIGINAL_NO_PADDING);
    snprintf(name, sizeof name, "%s (base64)", what);
    az_needle_add(name, (const uint8_t *)b64, strlen(b64));
    sodium_bin2base64(b64, sizeof b64, p, n, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    snprintf(name, sizeof name, "%s (base64url)", what);
    az_needle_add(name, (const uint8_t *)b64, strlen(b64));
    sodium_bin2hex(hex, sizeof hex, p, n);
    snprintf(name, sizeof name, "%s (hex)", what);
    az_needle_add(name, (const uint8_t *)hex, strlen(hex));
}

static void az_scan_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return;
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        if (got == 0)
            break;
        n += got;
    }
    fclose(f);
    az_files_scanned++;
    az_bytes_scanned += (long long)n;
    for (int i = 0; i < az_n_needles; i++)
        if (memmem(buf, n, az_needles[i].bytes, az_needles[i].len) != NULL) {
            size_t used = strlen(az_found);
            if (used + strlen(az_needles[i].what) + strlen(path) + 8 < sizeof az_found)
                snprintf(az_found + used, sizeof az_found - used, "%s%.96s in %.700s", used ? "; " : "",
                         az_needles[i].what, path);
        }
    if (az_control && memmem(buf, n, az_control, az_control_len) != NULL)
        az_control_seen = true;
    free(buf);
}

static int az_scan_one(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)ftw;
    if (type == FTW_F && S_ISREG(sb->st_mode))
        az_scan_file(path);
    return 0;
}

/* ShowPrincipal's stored record, packed (what must be identical across the restart). */
static bool az_record(kl_client *c, const char *id, uint8_t **bytes, size_t *len, uint64_t *epoch, kl_err *err)
{
    Keyload__V1__ShowPrincipalAnswer *a = NULL;
    if (kl_client_show_principal(c, id, &a, err) != KL_OK)
        return false;
    *len = keyload__v1__catalog_principal__get_packed_size(a->principal);
    *bytes = malloc(*len ? *len : 1);
    keyload__v1__catalog_principal__pack(a->principal, *bytes);
    *epoch = a->principal->policy_epoch;
    kl_principal_answer_free(a);
    return true;
}

/* The receipt's DatabaseCreated (from CreateDatabase or Bootstrap), or NULL. */
static const Keyload__V1__DatabaseCreated *az_db_created(const kl_receipt *r)
{
    if (r == NULL || r->decoded->n_results != 1)
        return NULL;
    const Keyload__V1__MutationResult *m = r->decoded->results[0];
    if (m->kind_case == KEYLOAD__V1__MUTATION_RESULT__KIND_DATABASE_CREATED)
        return m->database_created;
    if (m->kind_case == KEYLOAD__V1__MUTATION_RESULT__KIND_BOOTSTRAPPED)
        return m->bootstrapped->database;
    return NULL;
}

/* The database's signing key pair derived here from the cluster secret; true when the
 * daemon's public key and key id (in dc) are those. sk (64) is kept for the search. */
static bool az_db_key_matches(const uint8_t secret[32], const Keyload__V1__DatabaseCreated *dc, uint8_t sk[64])
{
    uint8_t pk[32], kid[KL_DATABASE_KEY_ID_LEN];
    kl_err err;
    if (kl_keys_database_signing(secret, dc->database_id, pk, sk, kid, &err) != KL_OK)
        return false;
    return dc->signing_public_key.len == 32 && memcmp(dc->signing_public_key.data, pk, 32) == 0 &&
           dc->signing_key_id.len == sizeof kid && memcmp(dc->signing_key_id.data, kid, sizeof kid) == 0 &&
           dc->incarnation.len == 16;
}

static bool az_same_receipt(const kl_receipt *a, const kl_receipt *b)
{
    return a && b && a->len == b->len && memcmp(a->bytes, b->bytes, a->len) == 0;
}

void test_authz_cold_restart(void)
{
    char why[600] = "";
    kl_err err;
    kl_err_clear(&err);
    CHECK(az_setup("azrf3", 2, 3, 3, 3000, 6, why, sizeof why), "%s", why);
    az_start_all();
    CHECK(az_leader(0, 30000) >= 0, "partition 0 elected no serving leader");
    CHECK(az_leader(1, 30000) >= 0, "partition 1 elected no serving leader with a catalog lease");

    uint8_t secret[KL_CLUSTER_SECRET_LEN];
    CHECK(kl_keys_read_secret_file("cluster secret file", az_secret, secret, sizeof secret, &err) == KL_OK, "%s",
          err.message);

    az_who admin, alice, dba;
    CHECK(az_who_new(&admin, "admin") && az_who_new(&alice, "alice") && az_who_new(&dba, "dba"), "key files");
    const char *boot_cmd = "0b8f7e21-5c3a-4d9e-8f10-6a2b3c4d5e6f";
    const char *db_cmd = "4e9d2c17-8a6b-4f3e-a1d0-9c8b7a6f5e4d";
    kl_receipt *boot = NULL, *db = NULL, *boot2 = NULL, *db2 = NULL, *db3 = NULL;
    CHECK(az_bootstrap(&admin, AZ_DB, boot_cmd, &boot, &err) == KL_OK, "bootstrap: %s %s", kl_code_name(err.code),
          err.message);
    CHECK(az_who_open(&admin, 20000, &err) == KL_OK, "admin client: %s", err.message);
    CHECK(az_create_database(admin.c, "acme/extra", db_cmd, &db, &err) == KL_OK, "create acme/extra: %s %s",
          kl_code_name(err.code), err.message);
    const Keyload__V1__DatabaseCreated *shop = az_db_created(boot), *extra = az_db_created(db);
    CHECK(shop != NULL && extra != NULL, "the receipts carry no DatabaseCreated");
    uint8_t shop_sk[64], extra_sk[64], extra2_sk[64];
    CHECK(az_db_key_matches(secret, shop, shop_sk), "acme/shop's signing key is not the one derived from the "
                                                    "cluster secret and database id %llu",
          (unsigned long long)shop->database_id);
    CHECK(az_db_key_matches(secret, extra, extra_sk), "acme/extra's signing key is not the one derived from the "
                                                      "cluster secret and database id %llu",
          (unsigned long long)extra->database_id);
    CHECK(shop->database_id != extra->database_id &&
              memcmp(shop->signing_public_key.data, extra->signing_public_key.data, 32) != 0,
          "two databases share an id or a signing key");

    kl_principal_result res;
    static const char *const color[] = {"color"};
    CHECK(az_create_principal(admin.c, &alice, KL_ROLE_NONE, &res, &err) == KL_OK, "create alice: %s", err.message);
    CHECK(az_create_principal(admin.c, &dba, KL_ROLE_DATABASE_ADMIN, &res, &err) == KL_OK, "create dba: %s",
          err.message);
    CHECK(az_create_queue(admin.c, "jobs", 1, &err) == KL_OK, "create jobs on partition 1: %s %s",
          kl_code_name(err.code), err.message);
    CHECK(az_grant(admin.c, "alice", KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "jobs", color, 1, NULL, 0, &res, &err) ==
              KL_OK,
          "grant publish: %s", err.message);
    CHECK(az_grant(admin.c, "alice", KEYLOAD__V1__PERMISSION__QUEUE_INSPECT, "jobs", NULL, 0, NULL, 0, &res, &err) ==
              KL_OK,
          "grant inspect: %s", err.message);
    CHECK(res.policy_epoch == 3, "alice's epoch after two grants: %llu", (unsigned long long)res.policy_epoch);
    CHECK(az_who_open(&alice, 20000, &err) == KL_OK, "alice client: %s", err.message);
    CHECK(az_enqueue(alice.c, "jobs", NULL, "before", "color=red", NULL, NULL, &err) == KL_OK,
          "alice enqueue: %s %s (%s)", kl_code_name(err.code), err.detail, err.message);

    const char *ids[3] = {"admin", "alice", "dba"};
    const az_who *whos[3] = {&admin, &alice, &dba};
    uint8_t *rec[3] = {NULL, NULL, NULL};
    size_t rec_len[3];
    uint64_t epoch[3];
    for (int i = 0; i < 3; i++) {
        CHECK(az_record(admin.c, ids[i], &rec[i], &rec_len[i], &epoch[i], &err), "show %s: %s", ids[i], err.message);
        Keyload__V1__CatalogPrincipal *p = keyload__v1__catalog_principal__unpack(NULL, rec_len[i], rec[i]);
        uint8_t kid[KL_KEY_ID_LEN];
        kl_keys_key_id(whos[i]->pk, kid);
        bool ok = p && p->public_key.len == 32 && memcmp(p->public_key.data, whos[i]->pk, 32) == 0 &&
                  p->key_id.len == KL_KEY_ID_LEN && memcmp(p->key_id.data, kid, KL_KEY_ID_LEN) == 0;
        if (p)
            keyload__v1__catalog_principal__free_unpacked(p, NULL);
        CHECK(ok, "%s's stored public key or key id is not its own", ids[i]);
    }
    CHECK(epoch[0] == 1 && epoch[1] == 3 && epoch[2] == 1, "epochs admin %llu alice %llu dba %llu",
          (unsigned long long)epoch[0], (unsigned long long)epoch[1], (unsigned long long)epoch[2]);

    /* kill -9 every member, then start them all again. */
    az_stop_all();
    admin.c = alice.c = NULL;
    int64_t t0 = now_ms();
    az_start_all();
    CHECK(az_leader(0, 30000) >= 0, "partition 0 elected no leader after the cold restart");
    CHECK(az_leader(1, 30000) >= 0, "partition 1 has no serving leader with a lease after the cold restart");
    fprintf(stderr, "  cold restart of 6 members: serving again after %lld ms\n", (long long)(now_ms() - t0));

    /* New clients: each principal says Hello again. */
    CHECK(az_who_open(&admin, 20000, &err) == KL_OK, "admin client: %s", err.message);
    for (int i = 0; i < 3; i++) {
        uint8_t *now = NULL;
        size_t len = 0;
        uint64_t e = 0;
        CHECK(az_record(admin.c, ids[i], &now, &len, &e, &err), "show %s after the restart: %s %s", ids[i],
              kl_code_name(err.code), err.message);
        bool same = len == rec_len[i] && memcmp(now, rec[i], len) == 0;
        free(now);
        CHECK(same && e == epoch[i], "%s's record differs after the restart (epoch %llu, was %llu)", ids[i],
              (unsigned long long)e, (unsigned long long)epoch[i]);
    }
    for (int i = 0; i < 3; i++)
        free(rec[i]);
    /* The databases: the same receipts replay (incarnation, id, signing key), and a database
     * made after the restart gets the key derived from the same cluster secret. */
    CHECK(az_bootstrap(&admin, AZ_DB, boot_cmd, &boot2, &err) == KL_OK, "bootstrap replay: %s %s (%s)",
          kl_code_name(err.code), err.detail, err.message);
    CHECK(az_same_receipt(boot, boot2), "the bootstrap's receipt (acme/shop's incarnation and key) changed");
    CHECK(az_create_database(admin.c, "acme/extra", db_cmd, &db2, &err) == KL_OK, "create acme/extra replay: %s %s",
          kl_code_name(err.code), err.message);
    CHECK(az_same_receipt(db, db2), "acme/extra's receipt (incarnation and key) changed");
    CHECK(az_create_database(admin.c, "acme/extra2", NULL, &db3, &err) == KL_OK, "create acme/extra2: %s %s",
          kl_code_name(err.code), err.message);
    const Keyload__V1__DatabaseCreated *extra2 = az_db_created(db3);
    CHECK(extra2 != NULL && az_db_key_matches(secret, extra2, extra2_sk),
          "acme/extra2 (made after the restart) has a signing key not derived from the cluster secret");
    CHECK(extra2->database_id != shop->database_id && extra2->database_id != extra->database_id &&
              memcmp(extra2->incarnation.data, extra->incarnation.data, 16) != 0,
          "acme/extra2 reuses an id or an incarnation");
    CHECK(az_who_open(&alice, 20000, &err) == KL_OK, "alice client: %s", err.message);
    CHECK(az_enqueue(alice.c, "jobs", NULL, "after", "color=blue", NULL, NULL, &err) == KL_OK,
          "alice enqueue after the restart: %s %s (%s)", kl_code_name(err.code), err.detail, err.message);
    az_counts c;
    CHECK(az_counts_get(alice.c, "jobs", &c, &err) == KL_OK && c.messages == 2, "jobs holds %lld (%s)", c.messages,
          err.message);
    kl_code rc = az_enqueue(alice.c, "jobs", NULL, "x", "size=1", NULL, NULL, &err);
    CHECK(rc == KL_PERMISSION_DENIED && strcmp(err.detail, "field_grant:QueuePublish") == 0,
          "alice's field grant after the restart: %s %s", kl_code_name(rc), err.detail);
    az_stop_all();

    /* No secret in any data file or log: the cluster secret, the databases' signing secret
     * keys (their 32-byte seeds: the public half is stored, legitimately), the principals'
     * and the members' secret keys. */
    az_n_needles = 0;
    az_found[0] = '\0';
    az_files_scanned = az_bytes_scanned = 0;
    az_needle_secret("the cluster secret", secret, sizeof secret);
    az_needle_secret("acme/shop's signing secret key", shop_sk, 32);
    az_needle_secret("acme/extra's signing secret key", extra_sk, 32);
    az_needle_secret("acme/extra2's signing secret key", extra2_sk, 32);
    az_needle_add("acme/shop's signing secret key (64 bytes)", shop_sk, 64);
    az_needle_secret("admin's secret key", admin.sk, 32);
    az_needle_secret("alice's secret key", alice.sk, 32);
    az_needle_secret("dba's secret key", dba.sk, 32);
    for (int p = 0; p < az_parts; p++)
        for (int m = 0; m < az_members; m++) {
            uint8_t msk[KL_MEMBER_SECRET_LEN];
            char what[64];
            if (kl_keys_read_secret_file("member key file", az_mkey[p][m], msk, sizeof msk, &err) == KL_OK) {
                snprintf(what, sizeof what, "p%dm%d's member secret key", p, m + 1);
                az_needle_add(what, msk, 32);
            }
            sodium_memzero(msk, sizeof msk);
        }
    az_control = alice.pk; /* stored in the catalog: the search must find it */
    az_control_len = 32;
    az_control_seen = false;
    for (int p = 0; p < az_parts; p++)
        for (int m = 0; m < az_members; m++) {
            nftw(az_data[p][m], az_scan_one, 16, FTW_PHYS);
            az_scan_file(az_log[p][m]);
        }
    sodium_memzero(secret, sizeof secret);
    sodium_memzero(shop_sk, sizeof shop_sk);
    sodium_memzero(extra_sk, sizeof extra_sk);
    sodium_memzero(extra2_sk, sizeof extra2_sk);
    kl_receipt_free(boot);
    kl_receipt_free(boot2);
    kl_receipt_free(db);
    kl_receipt_free(db2);
    kl_receipt_free(db3);
    fprintf(stderr, "  searched %lld files (%lld bytes) for %d secret texts\n", az_files_scanned, az_bytes_scanned,
            az_n_needles);
    CHECK(az_files_scanned > 12 && az_control_seen,
          "the search is blind: %lld files, a stored public key %sfound", az_files_scanned,
          az_control_seen ? "" : "not ");
    CHECK(az_found[0] == '\0', "secrets at rest: %s", az_found);
}
