/* Process test of authenticated replication links (KL-3: "a forged replication message from a
 * process that is not a member is refused, group state unchanged").
 *
 * Three keyloadd members of partition 0 (replica_count 3), each started with its member key
 * from `keyloadd keygen`, every public key in the cluster file: their peer links run in
 * authenticated mode (daemon/repl/peer.h), which each member's log confirms. After a few
 * committed batches, this process (not a member, holding no member key) dials member 1's
 * peer URL with its own nng pair1 socket and tries, each on a fresh connection:
 *   (a) a version-2 hello claiming to be member 2, signed by a key that is not member 2's,
 *       followed at once by a Raft vote request of a much higher term;
 *   (b) the old plain hello of version 1 claiming member 2, then the same vote request;
 *   (c) Raft frames (an append and a vote request of a higher term) without any hello;
 * and (c) again at the leader's peer URL. Each connection must be closed by the member and
 * logged with its reason; afterwards every member reports the same term, leader and commit
 * index as before (keyload.v1.MemberStatus) and the group still commits a new batch. Ports
 * 17000..17999 (below the ephemeral range); the members are started by fork/exec and killed by their pids (also when a
 * check fails: pa_stop_all). */
#include "tests/cluster/proc.h"

#include "common/peer_auth.h"
#include "keyload/v1/catalog.pb-c.h"
#include "keyload/v1/raft.pb-c.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>
#include <signal.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PA_N 3
#define PA_CLUSTER "peerauth"

static pid_t pa_pid[PA_N] = {-1, -1, -1};
static char pa_client[PA_N][64], pa_peer[PA_N][64];
static char pa_file[700], pa_secret[700], pa_key[PA_N][700], pa_log[PA_N][800];
static char pa_pub[PA_N][64];

void pa_stop_all(void)
{
    for (int i = 0; i < PA_N; i++) {
        if (pa_pid[i] <= 0)
            continue;
        kill(pa_pid[i], SIGKILL);
        waitpid(pa_pid[i], NULL, 0);
        pa_pid[i] = -1;
    }
}

/* ---- setup ---- */

static bool port_free(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool ok = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return ok;
}

/* Six ports (three client, three peer) in 17000..17999 that could be bound just now. */
static bool pa_ports(void)
{
    for (int attempt = 0; attempt < 160; attempt++) {
        int base = 17000 + ((getpid() + attempt) % 160) * 6;
        bool ok = true;
        for (int k = 0; k < 2 * PA_N && ok; k++)
            ok = port_free(base + k);
        if (!ok)
            continue;
        for (int i = 0; i < PA_N; i++) {
            snprintf(pa_client[i], sizeof pa_client[i], "tcp://127.0.0.1:%d", base + i);
            snprintf(pa_peer[i], sizeof pa_peer[i], "tcp://127.0.0.1:%d", base + PA_N + i);
        }
        return true;
    }
    return false;
}

static bool pa_write_cluster(void)
{
    snprintf(pa_secret, sizeof pa_secret, "%s/peerauth.secret", work);
    for (int i = 0; i < PA_N; i++)
        snprintf(pa_key[i], sizeof pa_key[i], "%s/peerauth-p0m%d.key", work, i + 1);
    /* keygen_files makes the cluster secret and member 1's key; the others by hand. */
    if (!keygen_files(pa_secret, pa_key[0], pa_pub[0], sizeof pa_pub[0]))
        return false;
    for (int i = 1; i < PA_N; i++)
        if (!member_keygen(pa_key[i], pa_pub[i], sizeof pa_pub[i]))
            return false;
    snprintf(pa_file, sizeof pa_file, "%s/" PA_CLUSTER ".json", work);
    FILE *f = fopen(pa_file, "w");
    if (f == NULL)
        return false;
    /* insecure_local_admin: this test is about replication links, not client sessions. */
    fprintf(f, "{\"cluster\":\"" PA_CLUSTER "\",\"replica_count\":3,\"insecure_local_admin\":true,"
               "\"timers\":{\"tick_ms\":50,\"election_ms\":1000,\"heartbeat_ms\":150},"
               "\"partitions\":[{\"id\":0,\"members\":[");
    for (int i = 0; i < PA_N; i++) {
        fprintf(f, "%s{\"id\":%d,\"client\":\"%s\",\"peer\":\"%s\",\"data\":\"%s/peerauth-m%d\","
                   "\"public_key\":\"%s\"}",
                i ? "," : "", i + 1, pa_client[i], pa_peer[i], work, i + 1, pa_pub[i]);
        /* spawn_keyloadd's log file for this member */
        snprintf(pa_log[i], sizeof pa_log[i], "%s/" PA_CLUSTER ".json-p0m%d.log", work, i + 1);
        unlink(pa_log[i]);
    }
    fprintf(f, "]}]}\n");
    fclose(f);
    return true;
}

/* ---- the group, seen through the client port ---- */

typedef struct pa_status {
    bool ok;
    uint64_t term, leader, commit;
    char role[24];
} pa_status;

static pa_status pa_member_status(int i)
{
    pa_status s = {0};
    Keyload__V1__MemberStatusAnswer *m = member_status(pa_client[i], 2000);
    if (m != NULL) {
        s.ok = true;
        s.term = m->term;
        s.leader = m->leader;
        s.commit = m->commit_index;
        snprintf(s.role, sizeof s.role, "%s", m->role ? m->role : "");
        keyload__v1__member_status_answer__free_unpacked(m, NULL);
    }
    return s;
}

/* A batch to whichever member serves (others answer NOT_LEADER/UNAVAILABLE), within total_ms. */
static answer pa_batch(Keyload__V1__BatchRequest *b, int total_ms)
{
    size_t len;
    uint8_t *req = pack_free(b, &len);
    int64_t deadline = now_ms() + total_ms;
    answer a = {0};
    for (;;) {
        for (int i = 0; i < PA_N; i++) {
            snprintf(url, sizeof url, "%.100s", pa_client[i]);
            answer_free(&a);
            a = call("keyload.v1.Batch", req, len, 3000);
            if (a.code != KL_NOT_LEADER && a.code != KL_UNAVAILABLE)
                goto done;
        }
        if (now_ms() > deadline)
            break;
        sleep_ms(100);
    }
done:
    free(req);
    return a;
}

/* Every member answers and agrees on one leader; *st gets each one's status. */
static bool pa_settled(pa_status st[PA_N])
{
    for (int i = 0; i < PA_N; i++) {
        st[i] = pa_member_status(i);
        if (!st[i].ok || st[i].leader == 0 || st[i].leader != st[0].leader ||
            st[i].term != st[0].term || st[i].commit != st[0].commit)
            return false;
    }
    return true;
}

static bool log_has(int i, const char *text)
{
    FILE *f = fopen(pa_log[i], "r");
    if (f == NULL)
        return false;
    char line[2048];
    bool found = false;
    while (!found && fgets(line, sizeof line, f) != NULL)
        found = strstr(line, text) != NULL;
    fclose(f);
    return found;
}

/* ---- the intruder: an nng pair1 socket of its own ---- */

static atomic_int pa_removed;

static void pa_pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    (void)p;
    (void)arg;
    if (ev == NNG_PIPE_EV_REM_POST)
        atomic_fetch_add(&pa_removed, 1);
}

static void put_u64(uint8_t *b, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        b[i] = (uint8_t)v;
}

/* A peer frame: u8 type, u64 ack, then body (peer.h's wire format). */
static size_t frame(uint8_t *out, uint8_t type, const uint8_t *body, size_t len)
{
    out[0] = type;
    put_u64(out + 1, 0);
    memcpy(out + 9, body, len);
    return 9 + len;
}

/* A RaftMessage as member `from` would send it to member `to`. */
static size_t raft_msg(uint8_t *out, size_t cap, uint32_t type, uint64_t from, uint64_t to,
                       uint64_t term, uint64_t index, uint64_t commit)
{
    Keyload__V1__RaftMessage m = KEYLOAD__V1__RAFT_MESSAGE__INIT;
    m.type = type;
    m.from = from;
    m.to = to;
    m.term = term;
    m.index = index;
    m.log_term = term;
    m.commit = commit;
    size_t n = keyload__v1__raft_message__get_packed_size(&m);
    if (n > cap)
        return 0;
    return keyload__v1__raft_message__pack(&m, out);
}

/* Dials peer_url, sends the frames in order and reports whether the member closed the
 * connection within 3 s (and the frames that went out before it did). */
static bool pa_intrude(const char *peer_url, uint8_t *const frames[], const size_t lens[], int n,
                       int *sent)
{
    nng_socket s;
    *sent = 0;
    if (nng_pair1_open(&s) != 0)
        return false;
    /* No redial while we watch: one connection per attempt. */
    nng_socket_set_ms(s, NNG_OPT_RECONNMINT, 60000);
    nng_socket_set_ms(s, NNG_OPT_RECONNMAXT, 60000);
    nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, 1000);
    atomic_store(&pa_removed, 0);
    nng_pipe_notify(s, NNG_PIPE_EV_REM_POST, pa_pipe_cb, NULL);
    bool closed = false;
    if (nng_dial(s, peer_url, NULL, 0) == 0) {
        for (int i = 0; i < n && atomic_load(&pa_removed) == 0; i++)
            if (nng_send(s, frames[i], lens[i], 0) == 0)
                (*sent)++;
        int64_t deadline = now_ms() + 3000;
        while (atomic_load(&pa_removed) == 0 && now_ms() < deadline)
            sleep_ms(10);
        closed = atomic_load(&pa_removed) > 0;
    }
    nng_close(s);
    return closed;
}

void test_peer_auth_refuses_intruders(void)
{
    CHECK(pa_ports(), "no six free ports in 17000..17999");
    CHECK(pa_write_cluster(), "could not make the key files and cluster file in %s", work);
    for (int i = 0; i < PA_N; i++)
        pa_pid[i] = spawn_keyloadd(pa_file, 0, i + 1, pa_secret, pa_key[i]);

    /* The group serves: a database, a queue and a few committed batches. */
    Keyload__V1__BatchRequest *b = batch_new(NULL);
    add_create_database(b);
    answer a = pa_batch(b, 30000);
    CHECK(a.code == KL_OK, "create database: %s %s", kl_code_name(a.code), a.err.message);
    answer_free(&a);
    b = batch_new(NULL);
    add_create(b, "pa", 0);
    a = pa_batch(b, 10000);
    CHECK(a.code == KL_OK, "create queue: %s %s", kl_code_name(a.code), a.err.message);
    answer_free(&a);
    for (int k = 0; k < 3; k++) {
        b = batch_new(NULL);
        for (int j = 0; j < 10; j++)
            add_enqueue(b, "pa", "before");
        a = pa_batch(b, 10000);
        CHECK(a.code == KL_OK, "batch %d: %s %s", k, kl_code_name(a.code), a.err.message);
        answer_free(&a);
    }
    for (int i = 0; i < PA_N; i++)
        CHECK(log_has(i, "msg=\"replication links authenticated\""),
              "member %d does not log authenticated replication links", i + 1);

    pa_status before[PA_N];
    int64_t deadline = now_ms() + 10000;
    while (!pa_settled(before) && now_ms() < deadline)
        sleep_ms(100);
    CHECK(pa_settled(before), "the members do not agree on leader, term and commit index");
    uint64_t leader = before[0].leader;
    CHECK(leader >= 1 && leader <= PA_N, "leader %llu", (unsigned long long)leader);
    uint64_t term = before[0].term, commit = before[0].commit;

    /* The forged frames. A vote request and an append from "member 2" to member 1, of a
     * term far above the group's, would depose the leader if member 1 ever saw them. */
    uint8_t vote[256], append[256], f_hello[1024], f_plain[256], f_vote[300], f_append[300];
    size_t vote_n = raft_msg(vote, sizeof vote, 2 /* vote */, 2, 1, term + 100, commit + 50,
                             commit);
    size_t append_n = raft_msg(append, sizeof append, 4 /* append */, 2, 1, term + 100,
                               commit, commit + 50);
    CHECK(vote_n > 0 && append_n > 0, "could not encode the Raft messages");
    size_t fv = frame(f_vote, 2 /* DATA */, vote, vote_n);
    size_t fa = frame(f_append, 2, append, append_n);

    /* (a) a hello for member 2 signed by a key that is not member 2's (ours, fresh). */
    uint8_t pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
    crypto_sign_keypair(pk, sk);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    kl_peer_auth_self forger = {.cluster = PA_CLUSTER, .partition = 0, .id = 2, .secret = sk};
    kl_peer_auth_dial dial;
    kl_err err;
    CHECK(kl_peer_auth_hello(&forger, 1, (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, &dial,
                             &err) == KL_OK,
          "hello: %s", err.message);
    uint8_t body[KL_PEER_AUTH_MAX];
    size_t body_n = kl_peer_auth_encode(&dial.hello, body, sizeof body);
    size_t fh = frame(f_hello, 1 /* HELLO */, body, body_n);
    kl_peer_auth_dial_wipe(&dial);
    sodium_memzero(sk, sizeof sk);

    /* (b) the unauthenticated hello of version 1: "KLPR", 1, from 2, to 1, the cluster. */
    uint8_t plain[64];
    memcpy(plain, "KLPR", 4);
    plain[4] = 1;
    put_u64(plain + 5, 2);
    put_u64(plain + 13, 1);
    plain[21] = (uint8_t)strlen(PA_CLUSTER);
    memcpy(plain + 22, PA_CLUSTER, strlen(PA_CLUSTER));
    size_t fp = frame(f_plain, 1, plain, 22 + strlen(PA_CLUSTER));

    typedef struct attempt {
        const char *what;
        int target;               /* member index whose peer URL is dialed */
        uint8_t *frames[3];
        size_t lens[3];
        int n;
        const char *reason;       /* in the target's log */
    } attempt;
    int li = (int)leader - 1;
    attempt at[] = {
        {"(a) hello signed by a key that is not member 2's, then a vote", 0,
         {f_hello, f_vote}, {fh, fv}, 2, "reason=\"peer hello refused: bad_signature\""},
        {"(b) the plain hello of version 1, then a vote", 0, {f_plain, f_vote}, {fp, fv}, 2,
         "reason=\"unauthenticated hello refused\""},
        {"(c) raw Raft append and vote without a handshake", 0, {f_append, f_vote},
         {fa, fv}, 2, "reason=\"frame before hello\""},
        {"(c) the same at the leader", li, {f_vote, f_append}, {fv, fa}, 2,
         "reason=\"frame before hello\""},
    };
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
        int sent;
        bool closed = pa_intrude(pa_peer[at[k].target], at[k].frames, at[k].lens, at[k].n, &sent);
        CHECK(sent >= 1, "%s: nothing could be sent to %s", at[k].what, pa_peer[at[k].target]);
        CHECK(closed, "%s: member %d did not close the connection", at[k].what,
              at[k].target + 1);
        /* Refusal lines are rate-limited to one a second: wait for this one. */
        int64_t until = now_ms() + 3000;
        while (!log_has(at[k].target, at[k].reason) && now_ms() < until)
            sleep_ms(50);
        CHECK(log_has(at[k].target, at[k].reason), "%s: member %d's log lacks %s", at[k].what,
              at[k].target + 1, at[k].reason);
        sleep_ms(1100);
    }

    /* Nothing changed: same term, same leader, same commit index on every member. */
    pa_status after[PA_N];
    for (int i = 0; i < PA_N; i++) {
        after[i] = pa_member_status(i);
        CHECK(after[i].ok, "member %d does not answer MemberStatus", i + 1);
        CHECK(after[i].term == term && after[i].leader == leader && after[i].commit == commit,
              "member %d: term %llu leader %llu commit %llu, before %llu %llu %llu", i + 1,
              (unsigned long long)after[i].term, (unsigned long long)after[i].leader,
              (unsigned long long)after[i].commit, (unsigned long long)term,
              (unsigned long long)leader, (unsigned long long)commit);
        CHECK(waitpid(pa_pid[i], NULL, WNOHANG) == 0, "member %d exited", i + 1);
    }
    /* And the group still commits (on all three copies: replica_count 3). */
    b = batch_new(NULL);
    add_enqueue(b, "pa", "after");
    a = pa_batch(b, 10000);
    CHECK(a.code == KL_OK, "batch after the intrusions: %s %s", kl_code_name(a.code),
          a.err.message);
    answer_free(&a);
    pa_status last = pa_member_status(li);
    CHECK(last.ok && last.commit > commit && last.term == term,
          "the leader's commit index %llu (was %llu), term %llu", (unsigned long long)last.commit,
          (unsigned long long)commit, (unsigned long long)last.term);
    pa_stop_all();
}
