/* Process test of sessions (KL-3 item 3, DESIGN.md §5 "Sessions") on a real single-member
 * cluster with a member key pair and a cluster secret made by `keyloadd keygen`, on
 * loopback ports 24000..24999. A raw nng REQ client speaks Envelope/Answer itself, so the
 * test can send exactly the frames it means to (tampered, replayed, mislabelled).
 *
 * Bootstrap makes the administrator; then Hello -> HelloAnswer -> kl_session_finish with
 * the member's public key -> sealed Batches (create database and queue, enqueue) and a
 * sealed QueueStats, each answer sealed and opening. Refusals: a Hello signed by a wrong
 * key, for another member, stale, for an unknown principal; a tampered seal, a replayed
 * counter, an unknown session id, a sealed Batch sent as another method, a clear payload
 * beside a session. Each is UNAUTHENTICATED (or INVALID_ARGUMENT) with its detail and
 * executes nothing (the queue's message count says so). A restarted daemon knows no
 * session; with a short session_ttl_ms a session expires. The daemon is started by
 * fork/exec and killed by its pid. */
#include "tests/cluster/proc.h"

#include "common/canon.h"
#include "common/guid.h"
#include "common/keys.h"
#include "common/session.h"
#include "keyload/v1/catalog.pb-c.h"
#include "keyload/v1/rpc.pb-c.h"
#include "keyload/v1/session.pb-c.h"

#include <fcntl.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <signal.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SS_CLUSTER "sesstest"

static char ss_file[700], ss_secret[700], ss_member_key[700], ss_data[700];
static char ss_url[64];
static char ss_member_pub_b64[64];
static uint8_t ss_member_pub[32];
static pid_t ss_pid = -1;

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the raw client ---- */

typedef struct raw_answer {
    int rc;                        /* 0: an Answer arrived */
    Keyload__V1__Answer *a;        /* unpacked (raw_free) */
} raw_answer;

static void raw_free(raw_answer *r)
{
    if (r->a)
        keyload__v1__answer__free_unpacked(r->a, NULL);
    r->a = NULL;
}

/* One connection, kept while the daemon lives (ss_kill closes it), so a measured Hello
 * costs no TCP connect. */
static nng_socket ss_sock;
static bool ss_sock_open;

static void ss_sock_close(void)
{
    if (ss_sock_open)
        nng_close(ss_sock);
    ss_sock_open = false;
}

static raw_answer raw_call(const Keyload__V1__Envelope *env, int timeout_ms)
{
    raw_answer r = {.rc = -1};
    if (!ss_sock_open) {
        if (nng_req0_open(&ss_sock) != 0)
            return r;
        nng_socket_set_ms(ss_sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
        if (nng_dial(ss_sock, ss_url, NULL, 0) != 0) {
            nng_close(ss_sock);
            return r;
        }
        ss_sock_open = true;
    }
    nng_socket s = ss_sock;
    nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, timeout_ms);
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, timeout_ms);
    size_t n = keyload__v1__envelope__get_packed_size(env);
    uint8_t *buf = malloc(n ? n : 1);
    keyload__v1__envelope__pack(env, buf);
    int rv = nng_send(s, buf, n, 0);
    free(buf);
    if (rv == 0) {
        void *in;
        size_t in_len;
        if (nng_recv(s, &in, &in_len, NNG_FLAG_ALLOC) == 0) {
            r.a = keyload__v1__answer__unpack(NULL, in_len, in);
            r.rc = r.a ? 0 : -2;
            nng_free(in, in_len);
        }
    }
    if (r.rc != 0)
        ss_sock_close(); /* a fresh connection next time */
    return r;
}

static raw_answer clear_call(const char *method, const uint8_t *payload, size_t len)
{
    static uint64_t rid = 1;
    Keyload__V1__Envelope env = KEYLOAD__V1__ENVELOPE__INIT;
    env.version = 1;
    env.method = (char *)method;
    env.request_id = rid++;
    env.payload.data = (uint8_t *)payload;
    env.payload.len = len;
    return raw_call(&env, 5000);
}

/* A sealed request: the plaintext sealed under counter with the method as AD. */
typedef struct sealed_req {
    uint8_t *sealed;
    size_t len;
    uint64_t counter;
} sealed_req;

static sealed_req seal_req(kl_session *cs, const char *method, const uint8_t *pt, size_t len)
{
    sealed_req q = {.counter = cs->next_counter};
    q.sealed = malloc(len + KL_SESSION_SEAL_OVERHEAD);
    kl_err err;
    if (kl_session_seal_request(cs, q.counter, pt, len, (const uint8_t *)method, strlen(method),
                                q.sealed, len + KL_SESSION_SEAL_OVERHEAD, &q.len, &err) != KL_OK)
        q.len = 0;
    return q;
}

static raw_answer send_sealed(const uint8_t sid[16], const char *method, const sealed_req *q)
{
    static uint64_t rid = 1000000;
    Keyload__V1__Envelope env = KEYLOAD__V1__ENVELOPE__INIT;
    env.version = 1;
    env.method = (char *)method;
    env.request_id = rid++;
    env.session_id.data = (uint8_t *)sid;
    env.session_id.len = 16;
    env.counter = q->counter;
    env.sealed.data = q->sealed;
    env.sealed.len = q->len;
    return raw_call(&env, 10000);
}

/* Opens a sealed answer (OK or error: the AD binds method, code and detail). */
static bool open_answer(const kl_session *cs, const char *method, const raw_answer *r,
                        uint64_t counter, uint8_t **pt, size_t *pt_len)
{
    const Keyload__V1__Answer *a = r->a;
    if (a->session_id.len != 16 || memcmp(a->session_id.data, cs->id, 16) != 0 || a->counter != counter)
        return false;
    uint8_t ad[KL_SESSION_AD_MAX];
    size_t m = strlen(method), d = strlen(a->detail);
    memcpy(ad, method, m);
    ad[m] = 0;
    ad[m + 1] = (uint8_t)a->code;
    memcpy(ad + m + 2, a->detail, d);
    size_t cap = a->sealed.len > 16 ? a->sealed.len - 16 : 1;
    *pt = malloc(cap);
    kl_err err;
    if (kl_session_open_answer(cs, counter, a->sealed.data, a->sealed.len, ad, m + 2 + d, *pt, cap,
                               pt_len, &err) != KL_OK) {
        free(*pt);
        *pt = NULL;
        return false;
    }
    return true;
}

/* ---- keys, cluster, daemon ---- */

static bool ss_keygen(void)
{
    snprintf(ss_secret, sizeof ss_secret, "%s/sess.secret", work);
    snprintf(ss_member_key, sizeof ss_member_key, "%s/sess-p0m1.key", work);
    if (!keygen_files(ss_secret, ss_member_key, ss_member_pub_b64, sizeof ss_member_pub_b64))
        return false;
    const char *line = ss_member_pub_b64;
    size_t n = 0;
    return sodium_base642bin(ss_member_pub, sizeof ss_member_pub, line, strlen(line), NULL, &n, NULL,
                             sodium_base64_VARIANT_ORIGINAL) == 0 && n == 32;
}

static void ss_write(int ttl_ms)
{
    static int seq;
    int port = 24000 + (getpid() % 90) * 10 + (seq++ % 10);
    snprintf(ss_url, sizeof ss_url, "tcp://127.0.0.1:%d", port);
    snprintf(ss_file, sizeof ss_file, "%s/" SS_CLUSTER ".json", work);
    snprintf(ss_data, sizeof ss_data, "%s/" SS_CLUSTER "-p0m1", work);
    FILE *f = fopen(ss_file, "w");
    /* insecure_local_admin: the test's own observer (ss_messages) reads without a session;
     * what it checks is the sealed path. Sessions required: tests/cluster/proc_authz.c. */
    fprintf(f, "{\"cluster\":\"" SS_CLUSTER "\",\"replica_count\":1,\"insecure_local_admin\":true,"
               "\"timers\":{\"session_ttl_ms\":%d},"
               "\"partitions\":[{\"id\":0,\"members\":[{\"id\":1,\"client\":\"%s\",\"data\":\"%s\","
               "\"public_key\":\"%s\"}]}]}\n",
            ttl_ms, ss_url, ss_data, ss_member_pub_b64);
    fclose(f);
}

static void ss_kill(void)
{
    ss_sock_close();
    if (ss_pid <= 0)
        return;
    kill(ss_pid, SIGKILL);
    waitpid(ss_pid, NULL, 0);
    ss_pid = -1;
}

void ss_stop_all(void) { ss_kill(); }

/* Starts the member and waits until it serves writes (MemberStatus says so). */
static bool ss_start(void)
{
    pid_t pid = spawn_keyloadd(ss_file, 0, 1, ss_secret, ss_member_key);
    ss_pid = pid;
    int64_t deadline = now_ms() + 20000;
    while (now_ms() < deadline) {
        raw_answer r = clear_call("keyload.v1.MemberStatus", NULL, 0);
        bool serving = false;
        if (r.rc == 0 && r.a->code == 0) {
            Keyload__V1__MemberStatusAnswer *st =
                keyload__v1__member_status_answer__unpack(NULL, r.a->payload.len, r.a->payload.data);
            serving = st && st->serving;
            if (st)
                keyload__v1__member_status_answer__free_unpacked(st, NULL);
        }
        raw_free(&r);
        if (serving)
            return true;
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            ss_pid = -1;
            return false;
        }
        sleep_ms(50);
    }
    return false;
}

/* ---- the session steps ---- */

typedef struct principal {
    const char *id;
    uint8_t pk[32], sk[64];
} principal;

/* Hello with these parameters to this test's member; on success *cs is the client session.
 * Returns the answer's code and copies its detail. */
static kl_code hello_to(const principal *p, const uint8_t *sign_sk, const char *cluster, uint64_t member,
                        int64_t unix_ms, kl_session *cs, char *detail, size_t cap)
{
    kl_session_client c;
    kl_err err;
    detail[0] = '\0';
    if (kl_session_hello_new(p->id, sign_sk, cluster, 0, member, unix_ms, NULL, NULL, &c, &err) != KL_OK) {
        snprintf(detail, cap, "hello_new: %s", err.message);
        return KL_INTERNAL;
    }
    Keyload__V1__Hello m = KEYLOAD__V1__HELLO__INIT;
    kl_session_hello_to_pb(&c.hello, &m);
    uint8_t buf[512];
    size_t n = keyload__v1__hello__pack(&m, buf);
    raw_answer r = clear_call("keyload.v1.Hello", buf, n);
    kl_code code = KL_DEADLINE_EXCEEDED;
    if (r.rc == 0) {
        code = (kl_code)r.a->code;
        snprintf(detail, cap, "%s", r.a->detail);
        if (code == KL_OK) {
            Keyload__V1__HelloAnswer *ha =
                keyload__v1__hello_answer__unpack(NULL, r.a->payload.len, r.a->payload.data);
            kl_session_hello_answer ans;
            if (ha == NULL || kl_session_answer_from_pb(ha, &ans, &err) != KL_OK ||
                kl_session_finish(&c, &ans, ss_member_pub, cs, &err) != KL_OK) {
                snprintf(detail, cap, "finish failed");
                code = KL_INTERNAL;
            }
            if (ha)
                keyload__v1__hello_answer__free_unpacked(ha, NULL);
        }
    }
    raw_free(&r);
    kl_session_client_wipe(&c);
    return code;
}

static kl_code hello(const principal *p, const uint8_t *sign_sk, uint64_t member, int64_t unix_ms,
                     kl_session *cs, char *detail, size_t cap)
{
    return hello_to(p, sign_sk, SS_CLUSTER, member, unix_ms, cs, detail, cap);
}

/* A sealed Batch: OK and its receipt opens, or the refusal's code and detail. */
static kl_code sealed_batch(kl_session *cs, Keyload__V1__BatchRequest *b, char *detail, size_t cap)
{
    size_t len;
    uint8_t *req = pack_free(b, &len);
    sealed_req q = seal_req(cs, "keyload.v1.Batch", req, len);
    free(req);
    raw_answer r = send_sealed(cs->id, "keyload.v1.Batch", &q);
    free(q.sealed);
    detail[0] = '\0';
    if (r.rc != 0)
        return KL_DEADLINE_EXCEEDED;
    kl_code code = (kl_code)r.a->code;
    snprintf(detail, cap, "%s", r.a->detail);
    uint8_t *pt = NULL;
    size_t pt_len = 0;
    if (r.a->sealed.len == 0) {
        /* Refusals before the session opened the request cannot be sealed. */
        if (code == KL_OK) {
            snprintf(detail, cap, "an OK answer came unsealed");
            code = KL_INTERNAL;
        }
    } else if (!open_answer(cs, "keyload.v1.Batch", &r, q.counter, &pt, &pt_len)) {
        snprintf(detail, cap, "answer did not open (code %s)", kl_code_name(code));
        code = KL_INTERNAL;
    } else if (code == KL_OK) {
        Keyload__V1__BatchReceipt *rec = keyload__v1__batch_receipt__unpack(NULL, pt_len, pt);
        if (rec == NULL || r.a->payload.len != 0) {
            snprintf(detail, cap, "sealed receipt does not decode, or a clear payload came too");
            code = KL_INTERNAL;
        }
        if (rec)
            keyload__v1__batch_receipt__free_unpacked(rec, NULL);
    }
    free(pt);
    raw_free(&r);
    return code;
}

/* Messages in default/default/q, read in clear (as the local principal), or -1. */
static long long ss_messages(const char *queue)
{
    uint8_t buf[512];
    size_t n = pack_stats_request(queue, buf);
    raw_answer r = clear_call("keyload.v1.QueueStats", buf, n);
    long long m = -1;
    if (r.rc == 0 && r.a->code == 0) {
        Keyload__V1__QueueStatsAnswer *s =
            keyload__v1__queue_stats_answer__unpack(NULL, r.a->payload.len, r.a->payload.data);
        if (s) {
            m = (long long)s->messages;
            keyload__v1__queue_stats_answer__free_unpacked(s, NULL);
        }
    }
    raw_free(&r);
    return m;
}

/* CreatePrincipal in tenant default (no role) and SetPrincipalKey, for the rotation check. */
static void add_create_principal(Keyload__V1__BatchRequest *b, const char *id, const uint8_t pk[32])
{
    Keyload__V1__Mutation *m = add_mut(b);
    Keyload__V1__CreatePrincipal *c = calloc(1, sizeof *c);
    keyload__v1__create_principal__init(c);
    c->tenant = strdup("default");
    c->principal_id = strdup(id);
    c->public_key.data = malloc(32);
    memcpy(c->public_key.data, pk, 32);
    c->public_key.len = 32;
    c->database = strdup("");
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_PRINCIPAL;
    m->create_principal = c;
}

static void add_set_key(Keyload__V1__BatchRequest *b, const char *id, const uint8_t pk[32])
{
    Keyload__V1__Mutation *m = add_mut(b);
    Keyload__V1__SetPrincipalKey *k = calloc(1, sizeof *k);
    keyload__v1__set_principal_key__init(k);
    k->principal_id = strdup(id);
    k->public_key.data = malloc(32);
    memcpy(k->public_key.data, pk, 32);
    k->public_key.len = 32;
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_SET_PRINCIPAL_KEY;
    m->set_principal_key = k;
}

static bool bootstrap_admin(const principal *admin, char *why, size_t cap)
{
    uint8_t secret[KL_CLUSTER_SECRET_LEN], proof[KL_DIGEST_LEN];
    kl_err err;
    if (kl_keys_read_secret_file("cluster secret file", ss_secret, secret, sizeof secret, &err) != KL_OK) {
        snprintf(why, cap, "%s", err.message);
        return false;
    }
    int bad = kl_canon_bootstrap_proof(secret, "default", "boot", admin->id, admin->pk, 32, proof);
    sodium_memzero(secret, sizeof secret);
    if (bad) {
        snprintf(why, cap, "proof");
        return false;
    }
    Keyload__V1__BatchRequest *b = batch_new(NULL);
    Keyload__V1__Mutation *m = add_mut(b);
    Keyload__V1__Bootstrap *bs = calloc(1, sizeof *bs);
    keyload__v1__bootstrap__init(bs);
    bs->tenant = strdup("default"); /* the tenant of the queues below */
    bs->database = strdup("boot");
    bs->admin_id = strdup(admin->id);
    bs->admin_public_key.data = malloc(32);
    memcpy(bs->admin_public_key.data, admin->pk, 32);
    bs->admin_public_key.len = 32;
    bs->proof.data = malloc(32);
    memcpy(bs->proof.data, proof, 32);
    bs->proof.len = 32;
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_BOOTSTRAP;
    m->bootstrap = bs;
    size_t len;
    uint8_t *req = pack_free(b, &len);
    raw_answer r = clear_call("keyload.v1.Batch", req, len);
    free(req);
    bool ok = r.rc == 0 && r.a->code == 0;
    if (!ok)
        snprintf(why, cap, "%s %s", r.rc == 0 ? kl_code_name((kl_code)r.a->code) : "no answer",
                 r.rc == 0 ? r.a->message : "");
    raw_free(&r);
    return ok;
}

/* Daemon CPU time (user + system) in ms, from /proc. */
static long long cpu_ms(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (long long)((ut + st) * 1000 / (unsigned long long)sysconf(_SC_CLK_TCK));
}

void test_sessions(void)
{
    char d[KL_ERR_MESSAGE_MAX + 64], why[512];
    CHECK(ss_keygen(), "keyloadd keygen failed");
    ss_write(600000);
    CHECK(ss_start(), "keyloadd with --member-key did not start serving");
    principal admin = {.id = "admin"};
    crypto_sign_keypair(admin.pk, admin.sk);
    CHECK(bootstrap_admin(&admin, why, sizeof why), "bootstrap: %s", why);

    /* The handshake and sealed Batches. */
    kl_session cs;
    CHECK(hello(&admin, admin.sk, 1, wall_ms(), &cs, d, sizeof d) == KL_OK, "Hello: %s", d);
    Keyload__V1__BatchRequest *b = batch_new(NULL);
    add_create_database(b);
    CHECK(sealed_batch(&cs, b, d, sizeof d) == KL_OK, "sealed create database: %s", d);
    b = batch_new(NULL);
    add_create(b, "sq", 0);
    CHECK(sealed_batch(&cs, b, d, sizeof d) == KL_OK, "sealed create queue: %s", d);
    b = batch_new(NULL);
    add_enqueue(b, "sq", "one");
    CHECK(sealed_batch(&cs, b, d, sizeof d) == KL_OK, "sealed enqueue: %s", d);
    CHECK(ss_messages("sq") == 1, "after a sealed enqueue the queue holds %lld", ss_messages("sq"));

    /* A sealed read (answered after the read barrier) is sealed too. */
    {
        uint8_t buf[512];
        size_t n = pack_stats_request("sq", buf);
        sealed_req sq = seal_req(&cs, "keyload.v1.QueueStats", buf, n);
        raw_answer r = send_sealed(cs.id, "keyload.v1.QueueStats", &sq);
        free(sq.sealed);
        CHECK(r.rc == 0 && r.a->code == 0, "sealed QueueStats: %s", r.rc == 0 ? r.a->message : "no answer");
        uint8_t *pt;
        size_t pt_len;
        bool opened = open_answer(&cs, "keyload.v1.QueueStats", &r, sq.counter, &pt, &pt_len);
        raw_free(&r);
        CHECK(opened, "the sealed QueueStats answer does not open");
        Keyload__V1__QueueStatsAnswer *s = keyload__v1__queue_stats_answer__unpack(NULL, pt_len, pt);
        free(pt);
        CHECK(s != NULL && s->messages == 1, "sealed QueueStats says %lld",
              s ? (long long)s->messages : -1LL);
        keyload__v1__queue_stats_answer__free_unpacked(s, NULL);
    }

    /* Hello refusals: nothing stored, each with its detail. */
    principal wrong = {.id = "admin"};
    crypto_sign_keypair(wrong.pk, wrong.sk);
    kl_session junk;
    CHECK(hello(&admin, wrong.sk, 1, wall_ms(), &junk, d, sizeof d) == KL_UNAUTHENTICATED &&
              strcmp(d, "bad_signature") == 0, "Hello signed by a wrong key: %s", d);
    CHECK(hello(&admin, admin.sk, 2, wall_ms(), &junk, d, sizeof d) == KL_UNAUTHENTICATED &&
              strcmp(d, "wrong_member") == 0, "Hello for member 2: %s", d);
    CHECK(hello_to(&admin, admin.sk, "another-cluster", 1, wall_ms(), &junk, d, sizeof d) == KL_UNAUTHENTICATED &&
              strcmp(d, "wrong_cluster") == 0, "Hello for another cluster: %s", d);
    CHECK(hello(&admin, admin.sk, 1, wall_ms() - 5 * 60000, &junk, d, sizeof d) == KL_UNAVAILABLE &&
              strcmp(d, "stale_hello") == 0, "stale Hello: %s", d);
    principal ghost = {.id = "ghost"};
    crypto_sign_keypair(ghost.pk, ghost.sk);
    CHECK(hello(&ghost, ghost.sk, 1, wall_ms(), &junk, d, sizeof d) == KL_UNAUTHENTICATED &&
              strcmp(d, "principal") == 0, "Hello of an unknown principal: %s", d);

    /* A tampered seal. */
    uint8_t *req;
    size_t len;
    b = batch_new(NULL);
    add_enqueue(b, "sq", "tampered");
    req = pack_free(b, &len);
    sealed_req q = seal_req(&cs, "keyload.v1.Batch", req, len);
    free(req);
    q.sealed[q.len / 2] ^= 0x01;
    raw_answer r = send_sealed(cs.id, "keyload.v1.Batch", &q);
    free(q.sealed);
    CHECK(r.rc == 0 && (kl_code)r.a->code == KL_UNAUTHENTICATED && strcmp(r.a->detail, "bad_seal") == 0,
          "tampered seal: %s", r.rc == 0 ? r.a->detail : "no answer");
    raw_free(&r);

    /* A replayed counter: the first copy runs, the second is refused before running. */
    b = batch_new(NULL);
    add_enqueue(b, "sq", "two");
    req = pack_free(b, &len);
    q = seal_req(&cs, "keyload.v1.Batch", req, len);
    free(req);
    r = send_sealed(cs.id, "keyload.v1.Batch", &q);
    bool first_ok = r.rc == 0 && r.a->code == 0;
    raw_free(&r);
    r = send_sealed(cs.id, "keyload.v1.Batch", &q);
    free(q.sealed);
    CHECK(first_ok, "the first copy of a sealed enqueue failed");
    CHECK(r.rc == 0 && (kl_code)r.a->code == KL_UNAUTHENTICATED && strcmp(r.a->detail, "replayed_counter") == 0,
          "replayed counter: %s", r.rc == 0 ? r.a->detail : "no answer");
    raw_free(&r);
    CHECK(ss_messages("sq") == 2, "after tamper and replay the queue holds %lld, not 2", ss_messages("sq"));

    /* An unknown session id. */
    b = batch_new(NULL);
    add_enqueue(b, "sq", "nosession");
    req = pack_free(b, &len);
    q = seal_req(&cs, "keyload.v1.Batch", req, len);
    free(req);
    uint8_t other_sid[16];
    kl_guid_random(other_sid);
    r = send_sealed(other_sid, "keyload.v1.Batch", &q);
    CHECK(r.rc == 0 && (kl_code)r.a->code == KL_UNAUTHENTICATED && strcmp(r.a->detail, "session_unknown") == 0,
          "unknown session: %s", r.rc == 0 ? r.a->detail : "no answer");
    raw_free(&r);
    /* The same sealed Batch sent as another method: its AD names Batch, so it does not open. */
    r = send_sealed(cs.id, "keyload.v1.QueueStats", &q);
    free(q.sealed);
    CHECK(r.rc == 0 && (kl_code)r.a->code == KL_UNAUTHENTICATED && strcmp(r.a->detail, "bad_seal") == 0,
          "sealed Batch sent as QueueStats: %s", r.rc == 0 ? r.a->detail : "no answer");
    raw_free(&r);
    /* A clear payload beside a session. */
    {
        Keyload__V1__Envelope env = KEYLOAD__V1__ENVELOPE__INIT;
        uint8_t x = 1;
        env.version = 1;
        env.method = "keyload.v1.Batch";
        env.request_id = 7;
        env.session_id.data = cs.id;
        env.session_id.len = 16;
        env.counter = cs.next_counter++;
        env.sealed.data = &x;
        env.sealed.len = 1;
        env.payload.data = &x;
        env.payload.len = 1;
        r = raw_call(&env, 5000);
        CHECK(r.rc == 0 && (kl_code)r.a->code == KL_INVALID_ARGUMENT && strcmp(r.a->detail, "payload") == 0,
              "clear payload beside a session: %s", r.rc == 0 ? r.a->detail : "no answer");
        raw_free(&r);
    }
    CHECK(ss_messages("sq") == 2, "after the refusals the queue holds %lld, not 2", ss_messages("sq"));
    /* The session still works after all that. */
    b = batch_new(NULL);
    add_enqueue(b, "sq", "three");
    CHECK(sealed_batch(&cs, b, d, sizeof d) == KL_OK, "sealed enqueue after refusals: %s", d);
    CHECK(ss_messages("sq") == 3, "the queue holds %lld, not 3", ss_messages("sq"));

    /* Answers swapped between two requests in flight: each answer is bound to its own
     * request's counter (and method), so neither opens as the other's. */
    {
        uint8_t buf[512];
        size_t n = pack_stats_request("sq", buf);
        sealed_req q1 = seal_req(&cs, "keyload.v1.QueueStats", buf, n);
        sealed_req q2 = seal_req(&cs, "keyload.v1.QueueStats", buf, n);
        raw_answer r2 = send_sealed(cs.id, "keyload.v1.QueueStats", &q2);
        raw_answer r1 = send_sealed(cs.id, "keyload.v1.QueueStats", &q1);
        free(q1.sealed);
        free(q2.sealed);
        CHECK(r1.rc == 0 && r2.rc == 0 && r1.a->code == 0 && r2.a->code == 0, "two sealed reads failed");
        uint8_t *pt;
        size_t pt_len;
        bool swapped1 = open_answer(&cs, "keyload.v1.QueueStats", &r2, q1.counter, &pt, &pt_len);
        if (swapped1)
            free(pt);
        bool swapped2 = open_answer(&cs, "keyload.v1.QueueStats", &r1, q2.counter, &pt, &pt_len);
        if (swapped2)
            free(pt);
        bool own = open_answer(&cs, "keyload.v1.QueueStats", &r1, q1.counter, &pt, &pt_len);
        if (own)
            free(pt);
        bool other_method = open_answer(&cs, "keyload.v1.Batch", &r2, q2.counter, &pt, &pt_len);
        if (other_method)
            free(pt);
        raw_free(&r1);
        raw_free(&r2);
        CHECK(!swapped1 && !swapped2, "an answer opened as the other in-flight request's answer");
        CHECK(!other_method, "an answer opened under another method");
        CHECK(own, "an answer did not open as its own request's");
    }

    /* A rotated key ends the sessions made with the old key; Hello needs the new key. */
    {
        principal rot = {.id = "rotor"};
        crypto_sign_keypair(rot.pk, rot.sk);
        b = batch_new(NULL);
        add_create_principal(b, rot.id, rot.pk);
        CHECK(sealed_batch(&cs, b, d, sizeof d) == KL_OK, "create principal rotor: %s", d);
        kl_session rs;
        CHECK(hello(&rot, rot.sk, 1, wall_ms(), &rs, d, sizeof d) == KL_OK, "Hello of rotor: %s", d);
        uint8_t new_pk[32], new_sk[64];
        crypto_sign_keypair(new_pk, new_sk);
        b = batch_new(NULL);
        add_set_key(b, rot.id, new_pk);
        CHECK(sealed_batch(&rs, b, d, sizeof d) == KL_OK, "rotor rotates its own key: %s", d);
        b = batch_new(NULL);
        add_set_key(b, rot.id, new_pk);
        CHECK(sealed_batch(&rs, b, d, sizeof d) == KL_UNAUTHENTICATED && strcmp(d, "session_revoked") == 0,
              "a session of the old key after rotation: %s", d);
        CHECK(hello(&rot, rot.sk, 1, wall_ms(), &junk, d, sizeof d) == KL_UNAUTHENTICATED &&
                  strcmp(d, "bad_signature") == 0, "Hello with the old key: %s", d);
        memcpy(rot.pk, new_pk, 32);
        memcpy(rot.sk, new_sk, 64);
        CHECK(hello(&rot, rot.sk, 1, wall_ms(), &rs, d, sizeof d) == KL_OK, "Hello with the new key: %s", d);
        kl_session_wipe(&rs);
        sodium_memzero(new_sk, sizeof new_sk);
        sodium_memzero(rot.sk, sizeof rot.sk);
    }

    /* Handshake CPU: the daemon's CPU time over many Hellos (RPC included). */
    {
        enum { HELLOS = 1000 };
        long long c0 = cpu_ms(ss_pid);
        int64_t t0 = now_ms();
        for (int i = 0; i < HELLOS; i++) {
            kl_session tmp;
            CHECK(hello(&admin, admin.sk, 1, wall_ms(), &tmp, d, sizeof d) == KL_OK, "Hello %d: %s", i, d);
            kl_session_wipe(&tmp);
        }
        long long c1 = cpu_ms(ss_pid);
        printf("  %d Hellos: daemon CPU %.1f us per Hello, %.2f ms round trip each (per-principal cap "
               "evicts beyond %d)\n",
               HELLOS, c0 >= 0 && c1 >= 0 ? (double)(c1 - c0) * 1000.0 / HELLOS : -1.0,
               (double)(now_ms() - t0) / HELLOS, 64);
        /* The per-principal cap evicted the oldest of admin's sessions, cs among them. */
        b = batch_new(NULL);
        add_enqueue(b, "sq", "evicted");
        CHECK(sealed_batch(&cs, b, d, sizeof d) == KL_UNAUTHENTICATED && strcmp(d, "session_unknown") == 0,
              "a session evicted by the per-principal cap: %s", d);
    }

    /* A restarted daemon knows no session. */
    CHECK(hello(&admin, admin.sk, 1, wall_ms(), &cs, d, sizeof d) == KL_OK, "Hello: %s", d);
    ss_kill();
    CHECK(ss_start(), "keyloadd did not restart");
    b = batch_new(NULL);
    add_enqueue(b, "sq", "after restart");
    CHECK(sealed_batch(&cs, b, d, sizeof d) == KL_UNAUTHENTICATED && strcmp(d, "session_unknown") == 0,
          "a session from before the restart: %s", d);
    CHECK(ss_messages("sq") == 3, "the queue holds %lld, not 3", ss_messages("sq"));

    /* A session ends at session_ttl_ms. */
    ss_kill();
    ss_write(1000);
    CHECK(ss_start(), "keyloadd did not restart with session_ttl_ms 1000");
    CHECK(hello(&admin, admin.sk, 1, wall_ms(), &cs, d, sizeof d) == KL_OK, "Hello: %s", d);
    b = batch_new(NULL);
    add_enqueue(b, "sq", "in time");
    CHECK(sealed_batch(&cs, b, d, sizeof d) == KL_OK, "sealed enqueue within the ttl: %s", d);
    sleep_ms(1200);
    b = batch_new(NULL);
    add_enqueue(b, "sq", "too late");
    CHECK(sealed_batch(&cs, b, d, sizeof d) == KL_UNAUTHENTICATED && strcmp(d, "session_expired") == 0,
          "an expired session: %s", d);
    CHECK(ss_messages("sq") == 4, "the queue holds %lld, not 4", ss_messages("sq"));
    ss_kill();
}
