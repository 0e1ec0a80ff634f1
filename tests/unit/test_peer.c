/* Unit tests for daemon/repl/peer: real members (repl/peer_tcp connections) on 127.0.0.1,
 * random free ports. Every member of a test shares one libuv loop run on the test thread
 * by run_until (a 1 ms tick timer makes each uv_run(UV_RUN_ONCE) return promptly). Raw
 * peers, plain TCP sockets speaking nng's pair1 SP framing by hand, stand in for members that
 * misbehave (bad hellos, no acks, oversized frames); they speak the wire format of peer.h,
 * built here byte by byte so the test also pins it. Every test stops its members and
 * closes the loop, so LeakSanitizer checks the shutdown paths.
 * Keyed members (authenticated mode, KL-3) use member keys made from fixed seeds; raw peers
 * then speak common/peer_auth.h, with a member's key (a member that misbehaves, or a replay
 * by someone who copied a member's hello) or without (a stranger). */
#include "daemon/repl/peer.h"

#include "common/peer_auth.h"

#include <arpa/inet.h>
#include <check.h>

#include "ports.h"
#include <netinet/in.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define TM_MAX 4
/* The member's data window (peer.c PEER_DATA_WINDOW), pinned here: a raw sender keeps to it,
 * and a member acknowledges at once when half of it is unreported. */
#define W_WINDOW 8
#define TM_FRAME_HDR 12 /* test payload: u64 from, u32 seq, then filler */

/* ---------------------------------------------------------------- fixture */

typedef struct tm_member {
    kl_peer *peer;
    uint64_t id;
    char url[64];
    /* recv bookkeeping (loop thread) */
    uint64_t got[TM_MAX + 1];      /* frames received per sender id */
    uint32_t next_seq[TM_MAX + 1]; /* expected seq per sender (strict mode) */
    int bad;                       /* frames with wrong content or order */
    bool lenient;                  /* after reconnects: seq may skip forward */
    bool stop_in_recv;             /* kl_peer_stop from inside the first recv */
    uint64_t raw_got;              /* frames from a raw socket (no test header) */
    size_t raw_last_len;
    bool keyed;                    /* started with member keys (kept across restarts) */
} tm_member;

static uv_loop_t loop;
static uv_timer_t tick;
static tm_member mem[TM_MAX + 1]; /* indexed by id */
static const char *cluster = "unit-cluster";

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}


static void put_u64(uint8_t *b, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        b[i] = (uint8_t)v;
}

static uint64_t get_u64(const uint8_t *b)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | b[i];
    return v;
}

static void on_recv(void *owner, uint64_t from, const uint8_t *frame, size_t len)
{
    tm_member *m = owner;
    if (m->stop_in_recv) {
        m->stop_in_recv = false;
        m->got[from]++;
        kl_peer_stop(m->peer);
        m->peer = NULL;
        return;
    }
    if (from < 1 || from > TM_MAX) {
        m->bad++;
        return;
    }
    m->raw_last_len = len;
    if (len < TM_FRAME_HDR || frame[0] == 0x5a) { /* from a raw socket: w_data's filler */
        m->raw_got++;
        m->got[from]++;
        return;
    }
    uint64_t claimed = get_u64(frame);
    uint32_t seq = (uint32_t)frame[8] << 24 | (uint32_t)frame[9] << 16 |
                   (uint32_t)frame[10] << 8 | frame[11];
    bool ok = claimed == from;
    for (size_t i = TM_FRAME_HDR; i < len && ok; i++)
        ok = frame[i] == (uint8_t)(seq + i);
    if (m->lenient ? seq < m->next_seq[from] : seq != m->next_seq[from])
        ok = false;
    if (!ok)
        m->bad++;
    m->next_seq[from] = seq + 1;
    m->got[from]++;
}

static void tick_cb(uv_timer_t *t) { (void)t; }

static void loop_open(void)
{
    memset(mem, 0, sizeof mem);
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    ck_assert_int_eq(uv_timer_init(&loop, &tick), 0);
}

/* Stops every member still running, runs the loop until their handles closed, closes it. */
static void loop_close(void)
{
    /* Dialers (higher ids) first, so listeners do not see them redial. */
    for (int i = TM_MAX; i >= 1; i--)
        if (mem[i].peer != NULL) {
            kl_peer_stop(mem[i].peer);
            mem[i].peer = NULL;
        }
    uv_timer_stop(&tick);
    uv_close((uv_handle_t *)&tick, NULL);
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}

typedef bool (*tm_cond)(void *arg);

/* Runs the loop until cond holds or timeout_ms passes; returns whether it held. */
static bool run_until(tm_cond cond, void *arg, uint64_t timeout_ms)
{
    uint64_t until = mono_ms() + timeout_ms;
    ck_assert_int_eq(uv_timer_start(&tick, tick_cb, 1, 1), 0);
    bool ok;
    while (!(ok = cond(arg)) && mono_ms() < until)
        uv_run(&loop, UV_RUN_ONCE);
    uv_timer_stop(&tick);
    return ok;
}

static bool never(void *arg)
{
    (void)arg;
    return false;
}

static void run_for(uint64_t ms) { (void)run_until(never, NULL, ms); }

static void url_for(uint64_t id)
{
    snprintf(mem[id].url, sizeof mem[id].url, "tcp://127.0.0.1:%d", th_free_port());
}

typedef struct tm_opts {
    size_t max_frame, max_frames, max_bytes;
    uint32_t ack_timeout_ms;
    bool keyed; /* member key and every peer's public key: authenticated mode */
    uint64_t config_index;  /* with replica_count != 0: hellos carry the configuration */
    uint32_t replica_count;
    uint32_t max_pipes, idle_ms;
} tm_opts;

/* Member keys from fixed seeds: tm_pk/tm_sk[id] for members 1..TM_MAX, [0] for a stranger. */
static uint8_t tm_pk[TM_MAX + 1][crypto_sign_PUBLICKEYBYTES];
static uint8_t tm_sk[TM_MAX + 1][crypto_sign_SECRETKEYBYTES];

static void keys_init(void)
{
    ck_assert_int_ge(sodium_init(), 0);
    for (int i = 0; i <= TM_MAX; i++) {
        uint8_t seed[crypto_sign_SEEDBYTES];
        memset(seed, 0x40 + i, sizeof seed);
        ck_assert_int_eq(crypto_sign_seed_keypair(tm_pk[i], tm_sk[i], seed), 0);
    }
}

/* Starts member `id` of the cluster {1..n}; URLs must be set for all of them. */
static void member_launch(uint64_t id, int n, const tm_opts *o, bool fresh)
{
    kl_peer_config cfg = {
        .cluster = cluster,
        .self = id,
        .listen_url = mem[id].url,
        .recv = on_recv,
        .owner = &mem[id],
    };
    if (o != NULL) {
        cfg.max_frame = o->max_frame;
        cfg.max_queued_frames = o->max_frames;
        cfg.max_queued_bytes = o->max_bytes;
        cfg.ack_timeout_ms = o->ack_timeout_ms;
        cfg.config_index = o->config_index;
        cfg.replica_count = o->replica_count;
        cfg.max_pipes = o->max_pipes;
        cfg.idle_ms = o->idle_ms;
        mem[id].keyed = o->keyed;
    }
    if (mem[id].keyed) {
        keys_init();
        cfg.member_secret = tm_sk[id];
    }
    for (int j = 1; j <= n; j++) {
        if ((uint64_t)j == id)
            continue;
        cfg.peers[cfg.n_peers].id = (uint64_t)j;
        cfg.peers[cfg.n_peers].url = mem[j].url;
        if (mem[id].keyed)
            cfg.peers[cfg.n_peers].public_key = tm_pk[j];
        cfg.n_peers++;
    }
    mem[id].id = id;
    kl_err err;
    kl_code rc = kl_peer_start(&loop, &cfg, &mem[id].peer, &err);
    /* A first start may find its "free" port taken meanwhile (tests run in parallel): pick
     * another. Safe because members start in ascending id order and only higher ids,
     * started later, dial it. A restart keeps its URL. */
    for (int attempt = 0; rc == KL_UNAVAILABLE && fresh && attempt < 20; attempt++) {
        url_for(id);
        rc = kl_peer_start(&loop, &cfg, &mem[id].peer, &err);
    }
    ck_assert_msg(rc == KL_OK, "member %d start: %s", (int)id, err.message);
}

static void member_start(uint64_t id, int n, const tm_opts *o) { member_launch(id, n, o, true); }

/* Restarts a stopped member on the URL it had. */
static void member_restart(uint64_t id, int n) { member_launch(id, n, NULL, false); }

typedef struct tm_pair {
    uint64_t a, b;
} tm_pair;

static bool pair_up(void *arg)
{
    tm_pair *pr = arg;
    return kl_peer_connected(mem[pr->a].peer, pr->b) && kl_peer_connected(mem[pr->b].peer, pr->a);
}

static bool all_up(void *arg)
{
    int n = *(int *)arg;
    for (int a = 1; a <= n; a++)
        for (int b = a + 1; b <= n; b++) {
            tm_pair pr = {(uint64_t)a, (uint64_t)b};
            if (mem[a].peer == NULL || mem[b].peer == NULL || !pair_up(&pr))
                return false;
        }
    return true;
}

static void wait_all_up(int n)
{
    ck_assert_msg(run_until(all_up, &n, 5000), "members did not all connect");
}

/* A test frame: from, seq, then a filler derived from seq (checked by on_recv). */
static size_t frame_build(uint8_t *buf, uint64_t from, uint32_t seq, size_t len)
{
    if (len < TM_FRAME_HDR)
        len = TM_FRAME_HDR;
    put_u64(buf, from);
    buf[8] = (uint8_t)(seq >> 24);
    buf[9] = (uint8_t)(seq >> 16);
    buf[10] = (uint8_t)(seq >> 8);
    buf[11] = (uint8_t)seq;
    for (size_t i = TM_FRAME_HDR; i < len; i++)
        buf[i] = (uint8_t)(seq + i);
    return len;
}

static uint32_t send_seq[TM_MAX + 1][TM_MAX + 1];

static kl_code send_one(uint64_t from, uint64_t to, size_t len)
{
    static uint8_t buf[1 << 16];
    ck_assert_uint_le(len, sizeof buf);
    size_t n = frame_build(buf, from, send_seq[from][to], len);
    kl_code rc = kl_peer_send(mem[from].peer, to, buf, n);
    if (rc == KL_OK)
        send_seq[from][to]++;
    return rc;
}

typedef struct tm_expect {
    uint64_t at, from, count;
} tm_expect;

static bool got_at_least(void *arg)
{
    tm_expect *e = arg;
    return mem[e->at].got[e->from] >= e->count;
}

static void expect_got(uint64_t at, uint64_t from, uint64_t count, uint64_t timeout_ms)
{
    tm_expect e = {at, from, count};
    ck_assert_msg(run_until(got_at_least, &e, timeout_ms),
                  "member %d got %d frames from %d, expected %d", (int)at,
                  (int)mem[at].got[from], (int)from, (int)count);
}

static kl_peer_counters stats_of(uint64_t id)
{
    kl_peer_counters st;
    kl_peer_stats(mem[id].peer, &st);
    return st;
}

/* ---------------------------------------------------------------- raw sockets */

#define W_HELLO 1
#define W_DATA 2
#define W_ACK 3

/* A raw peer is a plain TCP socket speaking nng's SP-over-TCP framing by hand (an 8-byte
 * protocol header each way, then u64 length + body; a pair1 body starts with a u32 hop
 * count), so the tests pin the wire that nng pair1 speakers (older members, intruders) use. */
typedef struct raw_sock {
    int fd;         /* the connection, -1 before accept */
    int lfd;        /* listening socket (raw_open with listen), else -1 */
    bool closed;    /* the member closed the connection */
    /* The peer protocol's counters, kept by hand. */
    uint64_t tx;    /* frames sent */
    uint64_t rx;    /* frames received (stamped as the ack of the next frame we send) */
    uint64_t acked; /* the highest ack the member sent us */
} raw_sock;

static int url_port(const char *url)
{
    const char *c = strrchr(url, ':');
    ck_assert_ptr_nonnull(c);
    return atoi(c + 1);
}

/* False when the member closed the connection meanwhile. */
static bool write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *b = buf;
    while (len > 0) {
        ssize_t n = send(fd, b, len, MSG_NOSIGNAL);
        if (n <= 0)
            return false;
        b += n;
        len -= (size_t)n;
    }
    return true;
}

/* Reads exactly len bytes (the socket has a 3 s receive timeout); false at EOF/error. */
static bool read_all(int fd, void *buf, size_t len)
{
    uint8_t *b = buf;
    while (len > 0) {
        ssize_t n = recv(fd, b, len, 0);
        if (n <= 0)
            return false;
        b += n;
        len -= (size_t)n;
    }
    return true;
}

static void raw_handshake(raw_sock *r)
{
    struct timeval tv = {.tv_sec = 3};
    ck_assert_int_eq(setsockopt(r->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    const uint8_t hdr[8] = {0, 'S', 'P', 0, 0, 0x11, 0, 0}; /* SP, protocol pair1 (0x11) */
    ck_assert(write_all(r->fd, hdr, sizeof hdr));
    uint64_t until = mono_ms() + 3000; /* the member answers from its loop: run it */
    for (;;) {
        struct pollfd pfd = {.fd = r->fd, .events = POLLIN};
        if (poll(&pfd, 1, 0) == 1)
            break;
        ck_assert_msg(mono_ms() < until, "no SP header from the member");
        run_for(1);
    }
    uint8_t got[8];
    ck_assert(read_all(r->fd, got, sizeof got));
    ck_assert_mem_eq(got, hdr, sizeof hdr);
}

/* Connects to url (or listens on it; the connection then comes from raw_accept). */
static void raw_open(raw_sock *r, const char *url, bool listen_on)
{
    memset(r, 0, sizeof *r);
    r->fd = r->lfd = -1;
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                             .sin_port = htons((uint16_t)url_port(url))};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    if (listen_on) {
        int one = 1;
        ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one), 0);
        ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
        ck_assert_int_eq(listen(fd, 4), 0);
        r->lfd = fd;
        return;
    }
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    r->fd = fd;
    raw_handshake(r);
}

/* Accepts the member's connection within timeout_ms, running the loop meanwhile. */
static void raw_accept(raw_sock *r, uint64_t timeout_ms)
{
    uint64_t until = mono_ms() + timeout_ms;
    for (;;) {
        struct pollfd pfd = {.fd = r->lfd, .events = POLLIN};
        if (poll(&pfd, 1, 0) == 1)
            break;
        ck_assert_msg(mono_ms() < until, "the member did not connect");
        run_for(2);
    }
    r->fd = accept(r->lfd, NULL, NULL);
    ck_assert_int_ge(r->fd, 0);
    raw_handshake(r);
}

static void raw_close(raw_sock *r)
{
    if (r->fd >= 0)
        close(r->fd);
    if (r->lfd >= 0)
        close(r->lfd);
    r->fd = r->lfd = -1;
}

/* Sends one message with the bytes as they are (the caller wrote the ack field); false
 * when the member closed the connection before taking all of it. */
static bool raw_try_send(raw_sock *r, const uint8_t *b, size_t len)
{
    uint8_t head[12];
    put_u64(head, len + 4);
    head[8] = head[9] = head[10] = 0;
    head[11] = 1; /* pair1 hop count */
    r->tx++;
    return write_all(r->fd, head, sizeof head) && (len == 0 || write_all(r->fd, b, len));
}

static void raw_send(raw_sock *r, const uint8_t *b, size_t len)
{
    ck_assert_msg(raw_try_send(r, b, len), "raw send failed");
}

/* Takes one frame the member sent, if one is waiting: counts it and notes its ack.
 * Returns its length, -1 if nothing is waiting, -2 once the member closed. */
static long raw_take(raw_sock *r, uint8_t *buf, size_t cap)
{
    if (r->closed)
        return -2;
    struct pollfd pfd = {.fd = r->fd, .events = POLLIN};
    if (poll(&pfd, 1, 0) != 1)
        return -1;
    uint8_t head[12];
    if (!read_all(r->fd, head, 8)) {
        r->closed = true;
        return -2;
    }
    uint64_t n = get_u64(head);
    ck_assert_uint_ge(n, 4);
    ck_assert_uint_le(n, 65536);
    static uint8_t body[65536];
    ck_assert(read_all(r->fd, body, (size_t)n));
    n -= 4; /* the hop count */
    r->rx++;
    if (n >= 9 && get_u64(body + 5) > r->acked)
        r->acked = get_u64(body + 5);
    if (buf != NULL) {
        ck_assert_uint_le(n, cap);
        memcpy(buf, body + 4, (size_t)n);
    }
    return (long)n;
}

/* Receives one frame within timeout_ms; returns its length or -1. Runs the loop meanwhile. */
static long raw_recv(raw_sock *r, uint8_t *buf, size_t cap, uint64_t timeout_ms)
{
    uint64_t until = mono_ms() + timeout_ms;
    for (;;) {
        long n = raw_take(r, buf, cap);
        if (n >= 0)
            return n;
        if (n == -2 || mono_ms() >= until)
            return -1;
        run_for(2);
    }
}

static size_t w_hello(uint8_t *b, uint64_t ack, uint64_t from, uint64_t to, const char *cl)
{
    size_t cl_len = strlen(cl);
    b[0] = W_HELLO;
    put_u64(b + 1, ack);
    b[9] = 'K';
    b[10] = 'L';
    b[11] = 'P';
    b[12] = 'R';
    b[13] = 1;
    put_u64(b + 14, from);
    put_u64(b + 22, to);
    b[30] = (uint8_t)cl_len;
    memcpy(b + 31, cl, cl_len);
    return 31 + cl_len;
}

static size_t w_data(uint8_t *b, uint64_t ack, size_t payload)
{
    b[0] = W_DATA;
    put_u64(b + 1, ack);
    memset(b + 9, 0x5a, payload);
    return 9 + payload;
}

/* Sends a data frame the way a member would: stamped with our receive count, and only
 * while fewer than W_WINDOW of our frames are unacknowledged (running the loop while it
 * waits: the member acknowledges from there). */
static void raw_send_data(raw_sock *r, size_t payload)
{
    static uint8_t b[16384];
    ck_assert_uint_le(payload + 9, sizeof b);
    uint64_t until = mono_ms() + 3000;
    while (r->tx - r->acked >= W_WINDOW) {
        if (raw_take(r, NULL, 0) < 0) {
            ck_assert_msg(mono_ms() < until, "no ack from the member (tx=%d acked=%d)",
                          (int)r->tx, (int)r->acked);
            run_for(1);
        }
    }
    raw_send(r, b, w_data(b, r->rx, payload));
}

/* The member closed the raw connection (what it sent before is drained and dropped). */
static bool raw_closed(void *arg)
{
    raw_sock *r = arg;
    while (raw_take(r, NULL, 0) >= 0)
        ;
    return r->closed;
}

typedef struct tm_refusal {
    raw_sock *r;
    uint64_t at;
    uint64_t refused;
} tm_refusal;

static bool refused_and_closed(void *arg)
{
    tm_refusal *t = arg;
    return raw_closed(t->r) && stats_of(t->at).refused >= t->refused;
}

/* Opens a raw socket to member `at`, sends frame (if any), expects the member to refuse the
 * pipe (closed on the raw side, counted as refused) and nothing to be delivered. */
static void expect_refused(uint64_t at, const uint8_t *frame, size_t len)
{
    raw_sock r;
    uint64_t before = stats_of(at).refused;
    raw_open(&r, mem[at].url, false);
    if (frame != NULL)
        raw_send(&r, frame, len);
    tm_refusal t = {&r, at, before + 1};
    ck_assert_msg(run_until(refused_and_closed, &t, 3000), "pipe not refused (refused=%d)",
                  (int)stats_of(at).refused);
    raw_close(&r);
    ck_assert_uint_eq(stats_of(at).connected, 0);
}

/* Dials member `at` as member `as`, completes the handshake, returns the connected socket. */
static void raw_join(raw_sock *r, uint64_t at, uint64_t as)
{
    uint8_t b[512];
    raw_open(r, mem[at].url, false);
    raw_send(r, b, w_hello(b, 0, as, at, cluster));
    long n = raw_recv(r, b, sizeof b, 2000); /* the member's hello */
    ck_assert_int_ge(n, 31);
    ck_assert_int_eq(b[0], W_HELLO);
    ck_assert_uint_eq(get_u64(b + 1), 1); /* acknowledges our hello */
    ck_assert_uint_eq(get_u64(b + 14), at);
    ck_assert_uint_eq(get_u64(b + 22), as);
    ck_assert(kl_peer_connected(mem[at].peer, as));
}

/* ---------------------------------------------------------------- tests */

START_TEST(test_three_members_exchange)
{
    loop_open();
    memset(send_seq, 0, sizeof send_seq);
    for (int i = 1; i <= 3; i++)
        url_for((uint64_t)i);
    tm_opts o = {.max_frames = 4096};
    for (int i = 1; i <= 3; i++)
        member_start((uint64_t)i, 3, &o);
    wait_all_up(3);

    /* One connection per pair: each member tracks exactly two pipes and completed exactly
     * two handshakes (a duplicate connection would show in either). */
    run_for(100);
    for (int i = 1; i <= 3; i++) {
        kl_peer_counters st = stats_of((uint64_t)i);
        ck_assert_uint_eq(st.pipes_open, 2);
        ck_assert_uint_eq(st.connected, 2);
        ck_assert_uint_eq(st.connects, 2);
        ck_assert_uint_eq(st.refused, 0);
    }

    /* Every direction, sizes from empty-payload to 40 KB, all queued at once: the window
     * paces them and nothing is lost. */
    const int per = 300;
    for (int k = 0; k < per; k++)
        for (int a = 1; a <= 3; a++)
            for (int b = 1; b <= 3; b++)
                if (a != b)
                    ck_assert_int_eq(send_one((uint64_t)a, (uint64_t)b, (size_t)(k * 137) % 40000),
                                     KL_OK);
    for (int a = 1; a <= 3; a++)
        for (int b = 1; b <= 3; b++)
            if (a != b)
                expect_got((uint64_t)b, (uint64_t)a, (uint64_t)per, 15000);

    /* A burst of 3000 small frames one way, timed. */
    uint64_t t0 = mono_ms();
    for (int k = 0; k < 3000; k++)
        ck_assert_int_eq(send_one(3, 1, 100), KL_OK);
    expect_got(1, 3, (uint64_t)per + 3000, 15000);
    fprintf(stderr, "peer: 3000 x 100 B frames 3->1 in %llu ms\n",
            (unsigned long long)(mono_ms() - t0));

    for (int i = 1; i <= 3; i++) {
        ck_assert_int_eq(mem[i].bad, 0);
        kl_peer_counters st = stats_of((uint64_t)i);
        ck_assert_uint_eq(st.dropped, 0);
        ck_assert_uint_eq(st.stalls, 0);
        ck_assert_uint_eq(st.sent, (uint64_t)(2 * per + (i == 3 ? 3000 : 0)));
        ck_assert_uint_eq(st.received, (uint64_t)(2 * per + (i == 1 ? 3000 : 0)));
        ck_assert_uint_eq(st.pipes_open, 2);
        ck_assert_uint_eq(st.connects, 2);
    }
    loop_close();
}
END_TEST

static bool peer_down(void *arg)
{
    tm_pair *pr = arg;
    return !kl_peer_connected(mem[pr->a].peer, pr->b);
}

static void exchange_ok(uint64_t a, uint64_t b, int count)
{
    uint64_t ga = mem[a].got[b], gb = mem[b].got[a];
    for (int k = 0; k < count; k++) {
        ck_assert_int_eq(send_one(a, b, 64), KL_OK);
        ck_assert_int_eq(send_one(b, a, 64), KL_OK);
    }
    expect_got(b, a, gb + (uint64_t)count, 5000);
    expect_got(a, b, ga + (uint64_t)count, 5000);
}

START_TEST(test_restart_reconnects)
{
    loop_open();
    memset(send_seq, 0, sizeof send_seq);
    for (int i = 1; i <= 3; i++)
        url_for((uint64_t)i);
    for (int i = 1; i <= 3; i++)
        member_start((uint64_t)i, 3, NULL);
    wait_all_up(3);
    for (int i = 1; i <= 3; i++)
        mem[i].lenient = true;
    exchange_ok(1, 2, 10);

    /* Member 1 listens for both others: stop it, they notice, sends fail fast. */
    kl_peer_stop(mem[1].peer);
    mem[1].peer = NULL;
    tm_pair p21 = {2, 1}, p31 = {3, 1};
    ck_assert(run_until(peer_down, &p21, 3000));
    ck_assert(run_until(peer_down, &p31, 3000));
    ck_assert_int_eq(send_one(2, 1, 64), KL_UNAVAILABLE);

    /* Restarted on the same URL: the dialers reconnect by themselves. */
    memset(mem[1].got, 0, sizeof mem[1].got);
    memset(mem[1].next_seq, 0, sizeof mem[1].next_seq);
    member_restart(1, 3);
    mem[1].lenient = true;
    wait_all_up(3);
    exchange_ok(1, 2, 10);
    exchange_ok(1, 3, 10);

    /* Member 3 dials both others: stop and restart it. */
    kl_peer_stop(mem[3].peer);
    mem[3].peer = NULL;
    tm_pair p13 = {1, 3}, p23 = {2, 3};
    ck_assert(run_until(peer_down, &p13, 3000));
    ck_assert(run_until(peer_down, &p23, 3000));
    memset(mem[3].got, 0, sizeof mem[3].got);
    memset(mem[3].next_seq, 0, sizeof mem[3].next_seq);
    member_restart(3, 3);
    mem[3].lenient = true;
    wait_all_up(3);
    exchange_ok(3, 1, 10);
    exchange_ok(2, 3, 10);

    run_for(50);
    for (int i = 1; i <= 3; i++) {
        ck_assert_int_eq(mem[i].bad, 0);
        kl_peer_counters st = stats_of((uint64_t)i);
        ck_assert_uint_eq(st.pipes_open, 2);
        ck_assert_uint_eq(st.connected, 2);
        ck_assert_uint_eq(st.refused, 0);
    }
    /* Member 2 lived through both restarts: 2 first connections + 2 reconnections. */
    ck_assert_uint_eq(stats_of(2).connects, 4);
    loop_close();
}
END_TEST

START_TEST(test_send_to_down_member)
{
    loop_open();
    memset(send_seq, 0, sizeof send_seq);
    url_for(1);
    url_for(2);
    member_start(2, 2, &(tm_opts){.max_frame = 1000}); /* member 1 never runs */
    run_for(150);                                      /* the dialer retries meanwhile */
    ck_assert(!kl_peer_connected(mem[2].peer, 1));

    uint8_t buf[2000] = {0};
    uint64_t t0 = mono_ms();
    for (int i = 0; i < 1000; i++)
        ck_assert_int_eq(kl_peer_send(mem[2].peer, 1, buf, 100), KL_UNAVAILABLE);
    ck_assert_uint_lt(mono_ms() - t0, 500); /* never waits for the network */
    ck_assert_int_eq(kl_peer_send(mem[2].peer, 7, buf, 10), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_peer_send(mem[2].peer, 2, buf, 10), KL_INVALID_ARGUMENT); /* self */
    ck_assert_int_eq(kl_peer_send(mem[2].peer, 1, buf, 1001), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_peer_send(mem[2].peer, 1, NULL, 5), KL_INVALID_ARGUMENT);

    kl_peer_counters st = stats_of(2);
    ck_assert_uint_eq(st.dropped_unavailable, 1000);
    ck_assert_uint_eq(st.dropped, 1000);
    ck_assert_uint_eq(st.sent, 0);
    ck_assert_uint_eq(st.connected, 0);

    /* Bad configurations are refused with a reason. */
    kl_peer *bad = NULL;
    kl_err err;
    kl_peer_config cfg = {.cluster = cluster, .self = 3, .listen_url = "tcp://127.0.0.1:1",
                          .recv = on_recv, .n_peers = 1};
    cfg.peers[0].id = 1; /* lower id without a URL */
    ck_assert_int_eq(kl_peer_start(&loop, &cfg, &bad, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "peers");
    cfg.peers[0].url = "tcp://127.0.0.1:2";
    cfg.peers[0].id = 3;
    ck_assert_int_eq(kl_peer_start(&loop, &cfg, &bad, &err), KL_INVALID_ARGUMENT);
    cfg.peers[0].id = 1;
    cfg.cluster = "";
    ck_assert_int_eq(kl_peer_start(&loop, &cfg, &bad, &err), KL_INVALID_ARGUMENT);
    cfg.cluster = cluster;
    cfg.listen_url = "nope://x";
    ck_assert_int_eq(kl_peer_start(&loop, &cfg, &bad, &err), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.message, "nope://x"));
    cfg.listen_url = mem[2].url; /* taken by member 2 */
    ck_assert_int_eq(kl_peer_start(&loop, &cfg, &bad, &err), KL_UNAVAILABLE);
    ck_assert_ptr_nonnull(strstr(err.message, mem[2].url));
    char spare[64];
    snprintf(spare, sizeof spare, "tcp://127.0.0.1:%d", th_free_port());
    cfg.listen_url = spare;
    cfg.peers[0].url = "nope://y"; /* fails after the listener is up: unwinds it */
    ck_assert_int_eq(kl_peer_start(&loop, &cfg, &bad, &err), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.message, "nope://y"));
    cfg.peers[0].url = "tcp://127.0.0.1:2";
    cfg.ack_timeout_ms = 50;
    ck_assert_int_eq(kl_peer_start(&loop, &cfg, &bad, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "ack_timeout_ms");
    ck_assert_ptr_null(bad);
    loop_close();
}
END_TEST

START_TEST(test_refuses_bad_hellos)
{
    loop_open();
    for (int i = 1; i <= 3; i++)
        url_for((uint64_t)i);
    /* Member 2 listens for 3 and dials 1 (absent). */
    member_start(2, 3, &(tm_opts){.ack_timeout_ms = 400});
    uint8_t b[512];

    expect_refused(2, b, w_hello(b, 0, 3, 2, "other-cluster"));
    expect_refused(2, b, w_hello(b, 0, 9, 2, cluster));  /* unknown member */
    expect_refused(2, b, w_hello(b, 0, 1, 2, cluster));  /* lower id: member 2 dials it */
    expect_refused(2, b, w_hello(b, 0, 3, 4, cluster));  /* addressed to another member */
    expect_refused(2, b, w_hello(b, 5, 3, 2, cluster));  /* acknowledges frames never sent */
    expect_refused(2, b, w_data(b, 0, 10));              /* data before hello */
    b[0] = W_HELLO;
    expect_refused(2, b, 5);                             /* truncated */
    size_t n = w_hello(b, 0, 3, 2, cluster);
    b[13] = 2;
    expect_refused(2, b, n); /* unknown version */
    expect_refused(2, NULL, 0); /* says nothing: the handshake watchdog closes it */
    ck_assert_uint_eq(stats_of(2).refused, 9);
    ck_assert_uint_eq(stats_of(2).received, 0);

    /* A proper hello is accepted and answered; its data arrives; a second hello is a
     * protocol error that closes the connection. */
    raw_sock r;
    raw_join(&r, 2, 3);
    raw_send_data(&r, 20);
    expect_got(2, 3, 1, 2000);
    ck_assert_uint_eq(mem[2].raw_last_len, 20);
    raw_send(&r, b, w_hello(b, r.rx, 3, 2, cluster));
    ck_assert(run_until(raw_closed, &r, 2000));
    tm_pair p23 = {2, 3};
    ck_assert(run_until(peer_down, &p23, 2000));
    ck_assert_uint_eq(stats_of(2).refused, 10);
    raw_close(&r);
    loop_close();
}
END_TEST

START_TEST(test_oversize_dropped)
{
    loop_open();
    for (int i = 1; i <= 3; i++)
        url_for((uint64_t)i);
    member_start(2, 3, &(tm_opts){.max_frame = 1024});
    raw_sock r;
    raw_join(&r, 2, 3);

    raw_send_data(&r, 1025); /* one byte over: dropped, counted */
    raw_send_data(&r, 1024); /* exactly the limit: delivered */
    raw_send_data(&r, 7);
    expect_got(2, 3, 2, 2000);
    ck_assert_uint_eq(mem[2].raw_last_len, 7);
    kl_peer_counters st = stats_of(2);
    ck_assert_uint_eq(st.dropped_oversize, 1);
    ck_assert_uint_eq(st.received, 2);
    ck_assert(kl_peer_connected(mem[2].peer, 3));

    /* Far over the limit (past 4 x max_frame): the transport closes the connection unread,
     * as nng did. */
    static uint8_t big[6100];
    (void)raw_try_send(&r, big, w_data(big, r.rx, 6000)); /* it may close before all is sent */
    ck_assert(run_until(raw_closed, &r, 2000));
    tm_pair p23 = {2, 3};
    ck_assert(run_until(peer_down, &p23, 2000));
    ck_assert_uint_eq(stats_of(2).received, 2);
    raw_close(&r);
    loop_close();
}
END_TEST

typedef struct tm_stat_wait {
    uint64_t at;
    uint64_t inbox_full;
} tm_stat_wait;

static bool inbox_full_at_least(void *arg)
{
    tm_stat_wait *w = arg;
    return stats_of(w->at).dropped_inbox_full >= w->inbox_full;
}

START_TEST(test_inbox_bounded)
{
    /* Frames read in one loop iteration, before the inbox is delivered at the next: the
     * inbox keeps max_queued_frames (then max_queued_bytes) and counts the rest. */
    for (int round = 0; round < 2; round++) {
        loop_open();
        for (int i = 1; i <= 3; i++)
            url_for((uint64_t)i);
        tm_opts o = round == 0 ? (tm_opts){.max_frames = 4} : (tm_opts){.max_bytes = 350};
        member_start(2, 3, &o);
        raw_sock r;
        raw_join(&r, 2, 3);
        /* A sender that ignores the window (a member says busy once its inbox is half full,
         * test_busy_flag_while_inbox_half_full): the bound still holds. All 20 are in the
         * socket before the loop runs again, so one read takes them. */
        static uint8_t b[256];
        for (int k = 0; k < 20; k++)
            raw_send(&r, b, w_data(b, r.rx, 100));
        uint64_t kept = round == 0 ? 4 : 3;
        tm_stat_wait w = {2, 20 - kept};
        ck_assert_msg(run_until(inbox_full_at_least, &w, 3000), "dropped_inbox_full=%d",
                      (int)stats_of(2).dropped_inbox_full);
        expect_got(2, 3, kept, 2000);
        run_for(50);
        kl_peer_counters st = stats_of(2);
        ck_assert_uint_eq(st.dropped_inbox_full, 20 - kept);
        ck_assert_uint_eq(st.received, kept);
        ck_assert_uint_eq(mem[2].got[3], kept);
        raw_close(&r);
        loop_close();
    }
}
END_TEST

/* Backpressure: while the inbox is half full every frame the member sends carries the busy
 * flag (type | 0x80), acknowledgements stay exact, and once the loop drained the inbox a
 * frame without the flag says so at once. A member told "busy" sends no data, and resumes
 * when told otherwise. */
START_TEST(test_busy_flag_while_inbox_half_full)
{
    loop_open();
    memset(send_seq, 0, sizeof send_seq);
    for (int i = 1; i <= 3; i++)
        url_for((uint64_t)i);
    member_start(2, 3, &(tm_opts){.max_frames = 4});
    raw_sock r;
    raw_join(&r, 2, 3);
    uint8_t b[512];
    raw_send_data(&r, 100);
    raw_send_data(&r, 100); /* one read: the inbox then holds 2 of 4, half full */
    long n = raw_recv(&r, b, sizeof b, 1000);
    ck_assert_int_eq(n, 9);             /* a bare ack, sent as the frames were read */
    ck_assert_int_eq(b[0], W_ACK | 0x80); /* busy */
    ck_assert_uint_eq(get_u64(b + 1), 3); /* exact: the hello and both frames */
    expect_got(2, 3, 2, 2000);          /* the next iteration drains the inbox... */
    n = raw_recv(&r, b, sizeof b, 50);  /* ...and says so well before the 100 ms tick */
    ck_assert_int_eq(n, 9);
    ck_assert_int_eq(b[0], W_ACK);
    ck_assert_uint_eq(stats_of(2).dropped_inbox_full, 0);

    /* Told busy (on a data frame: once it is delivered the flag was seen), the member holds
     * its data; told otherwise, it sends it. */
    size_t len = w_data(b, r.rx, 0);
    b[0] = W_DATA | 0x80;
    raw_send(&r, b, len);
    expect_got(2, 3, 3, 2000);
    ck_assert_int_eq(send_one(2, 3, 40), KL_OK);
    run_for(100);
    while ((n = raw_take(&r, b, sizeof b)) >= 0)
        ck_assert_int_ne(b[0] & 0x7f, W_DATA); /* acks only */
    b[0] = W_ACK;
    put_u64(b + 1, r.rx);
    raw_send(&r, b, 9);
    n = raw_recv(&r, b, sizeof b, 1000);
    while (n == 9 && (b[0] & 0x7f) == W_ACK)
        n = raw_recv(&r, b, sizeof b, 1000);
    ck_assert_int_eq(n, 9 + 40);
    ck_assert_int_eq(b[0], W_DATA);
    raw_close(&r);
    loop_close();
}
END_TEST

START_TEST(test_window_queue_and_watchdog)
{
    /* A member 1 (raw, listening) that completes the handshake but never acknowledges:
     * member 2 sends exactly the data window (W_WINDOW frames), queues the next 8, refuses
     * the rest without blocking, and the watchdog closes the silent connection. The ack
     * timeout is long enough that a slow sanitizer build finishes the 100 sends before the
     * watchdog can fire in the middle of them. */
    loop_open();
    url_for(1);
    url_for(2);
    raw_sock r;
    raw_open(&r, mem[1].url, true);
    member_start(2, 2, &(tm_opts){.max_frames = 8, .ack_timeout_ms = 1500});
    raw_accept(&r, 3000);
    uint8_t b[512];
    long n = raw_recv(&r, b, sizeof b, 3000);
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(b[0], W_HELLO);
    ck_assert_uint_eq(get_u64(b + 1), 0);
    ck_assert_uint_eq(get_u64(b + 14), 2);
    ck_assert_uint_eq(get_u64(b + 22), 1);
    raw_send(&r, b, w_hello(b, r.rx, 1, 2, cluster));
    uint64_t until = mono_ms() + 2000;
    while (!kl_peer_connected(mem[2].peer, 1) && mono_ms() < until)
        run_for(2);
    ck_assert(kl_peer_connected(mem[2].peer, 1));

    int ok = 0, full = 0;
    for (int k = 0; k < 100; k++) {
        kl_code rc = send_one(2, 1, 50);
        if (rc == KL_OK)
            ok++;
        else if (rc == KL_RESOURCE_EXHAUSTED)
            full++;
        else
            ck_abort_msg("send: %d", rc);
    }
    ck_assert_int_eq(ok, W_WINDOW + 8);
    ck_assert_int_eq(full, 100 - (W_WINDOW + 8));
    for (int k = 0; k < W_WINDOW; k++) {
        n = raw_recv(&r, b, sizeof b, 1000);
        ck_assert_int_eq(n, 9 + 50);
        ck_assert_int_eq(b[0], W_DATA);
        ck_assert_uint_eq(get_u64(b + 1), 1); /* acknowledges our hello */
    }
    ck_assert_int_eq(raw_recv(&r, b, sizeof b, 100), -1); /* window full: nothing more */
    kl_peer_counters st = stats_of(2);
    ck_assert_uint_eq(st.sent, W_WINDOW);
    ck_assert_uint_eq(st.dropped_queue_full, 100 - (W_WINDOW + 8));

    /* The watchdog gives up on the silent peer; the queued frames go with the connection. */
    ck_assert(run_until(raw_closed, &r, 5000));
    tm_pair p21 = {2, 1};
    ck_assert(run_until(peer_down, &p21, 5000)); /* member 2 sees the close on its own time */
    st = stats_of(2);
    ck_assert_uint_eq(st.stalls, 1);
    ck_assert_uint_eq(st.dropped_disconnect, 8);
    kl_peer_stop(mem[2].peer); /* the dialer first, then the raw listener */
    mem[2].peer = NULL;
    raw_close(&r);
    loop_close();
}
END_TEST

START_TEST(test_stop_with_frames_in_flight)
{
    loop_open();
    memset(send_seq, 0, sizeof send_seq);
    for (int i = 1; i <= 3; i++)
        url_for((uint64_t)i);
    for (int i = 1; i <= 3; i++)
        member_start((uint64_t)i, 3, &(tm_opts){.max_frames = 512});
    wait_all_up(3);
    for (int k = 0; k < 300; k++)
        for (int a = 1; a <= 3; a++)
            for (int b = 1; b <= 3; b++)
                if (a != b)
                    ck_assert_int_eq(send_one((uint64_t)a, (uint64_t)b, 20000), KL_OK);
    run_for(20); /* some delivered, most still queued, in sockets, or in inboxes */
    kl_peer_stop(mem[2].peer); /* one first, while the others still send to it */
    mem[2].peer = NULL;
    run_for(5);
    loop_close(); /* stops 1 and 3; LeakSanitizer checks the rest at exit */
}
END_TEST

START_TEST(test_stop_inside_recv)
{
    loop_open();
    memset(send_seq, 0, sizeof send_seq);
    url_for(1);
    url_for(2);
    member_start(1, 2, NULL);
    member_start(2, 2, NULL);
    wait_all_up(2);
    mem[1].stop_in_recv = true;
    for (int k = 0; k < 50; k++)
        ck_assert_int_eq(send_one(2, 1, 1000), KL_OK);
    expect_got(1, 2, 1, 3000);
    run_for(50);
    ck_assert_ptr_null(mem[1].peer);
    ck_assert_uint_eq(mem[1].got[2], 1); /* nothing delivered after stop */
    loop_close();
}
END_TEST

/* Stopping two connected members completes promptly: each answers the other's closing
 * notice at once, so the transports stop after the quiet period, well within the bound, and
 * every handle closes (no thread, nothing left behind for LeakSanitizer). */
START_TEST(test_stop_closes_promptly)
{
    loop_open();
    memset(send_seq, 0, sizeof send_seq);
    url_for(1);
    url_for(2);
    member_start(1, 2, NULL);
    member_start(2, 2, NULL);
    wait_all_up(2);
    exchange_ok(1, 2, 5);
    uint64_t t0 = mono_ms();
    kl_peer_stop(mem[1].peer);
    mem[1].peer = NULL;
    kl_peer_stop(mem[2].peer);
    mem[2].peer = NULL;
    uv_timer_stop(&tick);
    uv_close((uv_handle_t *)&tick, NULL);
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    uint64_t took = mono_ms() - t0;
    ck_assert_uint_lt(took, 400); /* the quiet period (40 ms) and a tick, not the 0.5 s bound */
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

#define W_CLOSING 0x40

/* A stopping member closes its connections only once the peer has its closing notice (a
 * bare ack flagged 0x40) and answered it, so no frame is cut off and the notice is not lost
 * to a reset of a socket closed with unread bytes. Here the raw peer keeps the member waiting well past the 40 ms quiet
 * period, then answers, and only then does the member close. */
START_TEST(test_stop_waits_for_the_closing_answer)
{
    loop_open();
    url_for(1);
    url_for(2);
    member_start(1, 2, NULL);
    raw_sock r;
    raw_join(&r, 1, 2);
    uint8_t b[512];
    raw_send_data(&r, 20); /* a lone frame: its ack is delayed, the notice carries it */
    expect_got(1, 2, 1, 2000);
    kl_peer_stop(mem[1].peer);
    mem[1].peer = NULL;
    long n = raw_recv(&r, b, sizeof b, 1000);
    while (n == 9 && b[0] == W_ACK) /* the delayed ack, if a tick sent it before the stop */
        n = raw_recv(&r, b, sizeof b, 1000);
    ck_assert_int_eq(n, 9);
    ck_assert_int_eq(b[0], W_ACK | W_CLOSING);
    ck_assert_uint_eq(get_u64(b + 1), 2); /* our hello and the data frame */
    run_for(200); /* unanswered: the socket stays open (past the 40 ms quiet period) */
    ck_assert_int_eq(raw_take(&r, b, sizeof b), -1);
    b[0] = W_ACK;
    put_u64(b + 1, r.rx);
    raw_send(&r, b, 9);
    uint64_t t0 = mono_ms();
    ck_assert_msg(run_until(raw_closed, &r, 2000), "the member did not close after the answer");
    /* The quiet period after the answer, not the 0.5 s bound counted from the stop. */
    ck_assert_uint_lt(mono_ms() - t0, 200);
    raw_close(&r);
    loop_close();
}
END_TEST

/* The other side: a closing notice is answered at once (as it is read, not at the next
 * tick), and the member sends the stopping peer no more data (kl_peer_send: unavailable).
 * The flag is only valid on an ack. */
START_TEST(test_closing_notice_answered_and_honoured)
{
    loop_open();
    url_for(1);
    url_for(2);
    member_start(1, 2, NULL);
    raw_sock r;
    raw_join(&r, 1, 2);
    uint8_t b[512];
    ck_assert_int_eq(send_one(1, 2, 40), KL_OK);
    long n = raw_recv(&r, b, sizeof b, 1000);
    ck_assert_int_eq(n, 9 + 40);
    b[0] = W_ACK | W_CLOSING;
    put_u64(b + 1, r.rx);
    raw_send(&r, b, 9); /* frame 2 of ours: the hello, the notice */
    n = raw_recv(&r, b, sizeof b, 50); /* well before the 100 ms tick */
    ck_assert_int_eq(n, 9);
    ck_assert_int_eq(b[0], W_ACK);
    ck_assert_uint_eq(get_u64(b + 1), 2);
    ck_assert_int_eq(send_one(1, 2, 40), KL_UNAVAILABLE);
    kl_peer_counters st = stats_of(1);
    ck_assert_uint_eq(st.peer_closings, 1);
    ck_assert_uint_eq(st.dropped_unavailable, 1);
    ck_assert_uint_eq(st.refused, 0);
    raw_close(&r);

    /* On a data frame the flag is a protocol error. */
    run_until(never, NULL, 50);
    raw_join(&r, 1, 2);
    size_t len = w_data(b, r.rx, 10);
    b[0] = W_DATA | W_CLOSING;
    raw_send(&r, b, len);
    tm_refusal t = {&r, 1, 1};
    ck_assert(run_until(refused_and_closed, &t, 3000));
    ck_assert_uint_eq(mem[1].got[2], 0);
    raw_close(&r);
    loop_close();
}
END_TEST

/* ---------------------------------------------------------------- keyed (authenticated) */

static bool one_up(void *arg)
{
    tm_pair *pr = arg;
    return kl_peer_connected(mem[pr->a].peer, pr->b);
}

/* A raw peer's side of one authenticated connection. */
typedef struct raw_auth {
    kl_peer_auth_dial dial;
    kl_peer_auth_keys keys;
} raw_auth;

/* A version-2 HELLO from `as` to `to`, signed with sk, at clock now_ms (+ skew_ms). */
static size_t w_auth_hello(uint8_t *b, raw_auth *a, uint64_t as, uint64_t to, const uint8_t *sk,
                           const char *cl, int32_t partition, int64_t skew_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + skew_ms;
    kl_peer_auth_self me = {.cluster = cl, .partition = partition, .id = as, .secret = sk};
    kl_err e;
    ck_assert_int_eq(kl_peer_auth_hello(&me, to, now, &a->dial, &e), KL_OK);
    b[0] = W_HELLO;
    put_u64(b + 1, 0);
    size_t n = kl_peer_auth_encode(&a->dial.hello, b + 9, KL_PEER_AUTH_MAX);
    ck_assert_uint_gt(n, 0);
    return 9 + n;
}

/* A sealed frame of `type` with payload bytes of 0x5a (what on_recv counts as raw), as
 * frame number r->tx of the connection. */
static size_t w_sealed(uint8_t *b, const raw_sock *r, const raw_auth *a, uint8_t type,
                       size_t payload)
{
    b[0] = type;
    put_u64(b + 1, r->rx);
    memset(b + 9 + KL_PEER_AUTH_COUNTER_LEN, 0x5a, payload);
    return kl_peer_auth_seal(a->keys.tx, r->tx, b, 9, payload);
}

/* Dials member `at` as member `as` with the right key and completes the member-key
 * handshake; with confirm, also sends the first sealed frame (an ACK), after which the
 * member counts us connected. */
static void raw_auth_join(raw_sock *r, raw_auth *a, uint64_t at, uint64_t as, bool confirm)
{
    uint8_t b[1024];
    memset(a, 0, sizeof *a);
    raw_open(r, mem[at].url, false);
    raw_send(r, b, w_auth_hello(b, a, as, at, tm_sk[as], cluster, 0, 0));
    long n = raw_recv(r, b, sizeof b, 2000); /* the member's ANSWER */
    ck_assert_int_gt(n, 9);
    ck_assert_int_eq(b[0], W_HELLO);
    ck_assert_uint_eq(get_u64(b + 1), 1); /* acknowledges our hello */
    kl_peer_auth_msg ans;
    kl_err e;
    ck_assert_int_eq(kl_peer_auth_decode(b + 9, (size_t)n - 9, &ans, &e), KL_OK);
    ck_assert_int_eq(kl_peer_auth_finish(&a->dial, &ans, tm_pk[at], ans.unix_ms,
                                         KL_PEER_AUTH_DEFAULT_SKEW_MS, &a->keys, &e),
                     KL_OK);
    if (confirm) {
        raw_send(r, b, w_sealed(b, r, a, W_ACK, 0));
        tm_pair pr = {at, as};
        ck_assert(run_until(one_up, &pr, 2000));
    }
}

/* raw_send_data, sealed. */
static void raw_send_sealed(raw_sock *r, const raw_auth *a, size_t payload)
{
    static uint8_t b[16384];
    ck_assert_uint_le(payload + 9 + KL_PEER_AUTH_OVERHEAD, sizeof b);
    uint64_t until = mono_ms() + 3000;
    while (r->tx - r->acked >= W_WINDOW) {
        if (raw_take(r, NULL, 0) < 0) {
            ck_assert_msg(mono_ms() < until, "no ack from the member (tx=%d acked=%d)",
                          (int)r->tx, (int)r->acked);
            run_for(1);
        }
    }
    raw_send(r, b, w_sealed(b, r, a, W_DATA, payload));
}

#define W_BATCH 4

/* A BATCH frame (peer.h "Flow control"): each of lens[] a 0x5a filler with a u32 length
 * before it; bad_tail adds a length that runs past the end. */
static size_t w_batch(uint8_t *b, uint64_t ack, const size_t *lens, size_t n, bool bad_tail)
{
    b[0] = W_BATCH;
    put_u64(b + 1, ack);
    size_t at = 9;
    for (size_t i = 0; i < n; i++) {
        b[at] = (uint8_t)(lens[i] >> 24);
        b[at + 1] = (uint8_t)(lens[i] >> 16);
        b[at + 2] = (uint8_t)(lens[i] >> 8);
        b[at + 3] = (uint8_t)lens[i];
        memset(b + at + 4, 0x5a, lens[i]);
        at += 4 + lens[i];
    }
    if (bad_tail) {
        memset(b + at, 0, 4);
        b[at + 3] = 9; /* 9 bytes announced, 2 follow */
        b[at + 4] = b[at + 5] = 0x5a;
        at += 6;
    }
    return at;
}

static uint32_t get_u32_be(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* What waited behind the full window leaves as ONE frame once the window opens: the
 * window bounds frames, not messages, so Raft messages to a busy peer no longer wait a round
 * trip per pair. Each carried frame arrives intact and in order. */
START_TEST(test_queued_frames_leave_in_one_batch)
{
    loop_open();
    memset(send_seq, 0, sizeof send_seq);
    url_for(1);
    url_for(2);
    raw_sock r;
    raw_open(&r, mem[1].url, true);
    member_start(2, 2, &(tm_opts){.max_frames = 64});
    raw_accept(&r, 3000);
    uint8_t b[4096];
    ck_assert_int_gt(raw_recv(&r, b, sizeof b, 3000), 0); /* the member's hello */
    raw_send(&r, b, w_hello(b, r.rx, 1, 2, cluster));
    uint64_t until = mono_ms() + 2000;
    while (!kl_peer_connected(mem[2].peer, 1) && mono_ms() < until)
        run_for(2);
    ck_assert(kl_peer_connected(mem[2].peer, 1));
    for (int k = 0; k < W_WINDOW + 8; k++)
        ck_assert_int_eq(send_one(2, 1, 50), KL_OK);
    for (int k = 0; k < W_WINDOW; k++) {
        long got = raw_recv(&r, b, sizeof b, 1000);
        while (got == 9 && b[0] == W_ACK) /* a delayed ack of our hello (watchdog tick) */
            got = raw_recv(&r, b, sizeof b, 1000);
        ck_assert_int_eq(got, 9 + 50);
        ck_assert_int_eq(b[0], W_DATA);
    }
    long more = raw_recv(&r, b, sizeof b, 100);
    ck_assert(more == -1 || (more == 9 && b[0] == W_ACK)); /* window full: no data */
    b[0] = W_ACK;
    put_u64(b + 1, r.rx); /* the hello and every data frame */
    raw_send(&r, b, 9);
    long n = raw_recv(&r, b, sizeof b, 1000);
    ck_assert_int_eq(n, 9 + 8 * (4 + 50)); /* the other 8, in one frame */
    ck_assert_int_eq(b[0], W_BATCH);
    for (int k = 0; k < 8; k++) {
        const uint8_t *f = b + 9 + (size_t)k * (4 + 50);
        ck_assert_uint_eq(get_u32_be(f), 50);
        ck_assert_uint_eq(get_u64(f + 4), 2); /* frame_build: from, then seq */
        ck_assert_uint_eq(get_u32_be(f + 12), (uint32_t)(W_WINDOW + k));
    }
    kl_peer_counters st = stats_of(2);
    ck_assert_uint_eq(st.sent, W_WINDOW + 8);
    ck_assert_uint_eq(st.coalesced, 7);
    kl_peer_stop(mem[2].peer);
    mem[2].peer = NULL;
    raw_close(&r);
    loop_close();
}
END_TEST

/* A received BATCH is delivered frame by frame, in order; a malformed one delivers nothing
 * and closes the connection as a protocol error. */
START_TEST(test_batch_received_in_order_and_checked)
{
    loop_open();
    for (int i = 1; i <= 3; i++)
        url_for((uint64_t)i);
    member_start(2, 3, NULL);
    raw_sock r;
    raw_join(&r, 2, 3);
    static uint8_t b[2048];
    size_t lens[] = {5, 0, 300, 7};
    raw_send(&r, b, w_batch(b, r.rx, lens, 4, false));
    expect_got(2, 3, 4, 2000);
    ck_assert_uint_eq(mem[2].raw_last_len, 7);
    ck_assert_uint_eq(stats_of(2).received, 4);
    uint64_t refused = stats_of(2).refused;
    raw_send(&r, b, w_batch(b, r.rx, lens, 2, true));
    ck_assert(run_until(raw_closed, &r, 2000));
    ck_assert_uint_eq(stats_of(2).refused, refused + 1);
    run_for(50);
    ck_assert_uint_eq(stats_of(2).received, 4);
    ck_assert_uint_eq(mem[2].got[3], 4);
    raw_close(&r);
    loop_close();
}
END_TEST

START_TEST(test_keyed_exchange_and_restart)
{
    loop_open();
    memset(send_seq, 0, sizeof send_seq);
    for (int i = 1; i <= 3; i++)
        url_for((uint64_t)i);
    for (int i = 1; i <= 3; i++)
        /* Queues for the whole burst below: with every frame sealed and opened (ASan build)
         * the window drains a little slower than the loop fills it. */
        member_start((uint64_t)i, 3, &(tm_opts){.keyed = true, .max_frames = 4096});
    wait_all_up(3);
    for (int i = 1; i <= 3; i++)
        ck_assert(stats_of((uint64_t)i).authenticated);
    /* Every pair both ways, sizes up to 40000 bytes, through the sealed path. */
    const int per = 200;
    for (int k = 0; k < per; k++)
        for (int a = 1; a <= 3; a++)
            for (int b = 1; b <= 3; b++)
                if (a != b)
                    ck_assert_int_eq(send_one((uint64_t)a, (uint64_t)b, (size_t)(k * 211) % 40000),
                                     KL_OK);
    for (int a = 1; a <= 3; a++)
        for (int b = 1; b <= 3; b++)
            if (a != b)
                expect_got((uint64_t)b, (uint64_t)a, (uint64_t)per, 15000);
    uint64_t t0 = mono_ms();
    for (int k = 0; k < 3000; k++)
        ck_assert_int_eq(send_one(3, 1, 100), KL_OK);
    expect_got(1, 3, (uint64_t)per + 3000, 15000);
    fprintf(stderr, "peer (keyed): 3000 x 100 B frames 3->1 in %llu ms\n",
            (unsigned long long)(mono_ms() - t0));
    for (int i = 1; i <= 3; i++) {
        ck_assert_int_eq(mem[i].bad, 0);
        kl_peer_counters st = stats_of((uint64_t)i);
        ck_assert_uint_eq(st.dropped, 0);
        ck_assert_uint_eq(st.refused, 0);
        ck_assert_uint_eq(st.stalls, 0);
        ck_assert_uint_eq(st.connects, 2);
    }

    /* Restarts: the listener (1) and a dialer (3); new handshakes, new keys. */
    for (int i = 1; i <= 3; i++)
        mem[i].lenient = true;
    kl_peer_stop(mem[1].peer);
    mem[1].peer = NULL;
    tm_pair p21 = {2, 1};
    ck_assert(run_until(peer_down, &p21, 3000));
    memset(mem[1].got, 0, sizeof mem[1].got);
    memset(mem[1].next_seq, 0, sizeof mem[1].next_seq);
    member_restart(1, 3);
    mem[1].lenient = true;
    wait_all_up(3);
    exchange_ok(1, 2, 10);
    exchange_ok(1, 3, 10);
    kl_peer_stop(mem[3].peer);
    mem[3].peer = NULL;
    tm_pair p13 = {1, 3};
    ck_assert(run_until(peer_down, &p13, 3000));
    memset(mem[3].got, 0, sizeof mem[3].got);
    memset(mem[3].next_seq, 0, sizeof mem[3].next_seq);
    member_restart(3, 3);
    mem[3].lenient = true;
    wait_all_up(3);
    exchange_ok(3, 1, 10);
    exchange_ok(2, 3, 10);
    for (int i = 1; i <= 3; i++) {
        ck_assert_int_eq(mem[i].bad, 0);
        ck_assert_uint_eq(stats_of((uint64_t)i).refused, 0);
    }
    loop_close();
}
END_TEST

START_TEST(test_keyed_refuses_strangers)
{
    loop_open();
    keys_init();
    for (int i = 1; i <= 3; i++)
        url_for((uint64_t)i);
    /* Member 2 listens for 3 and dials 1 (absent). */
    member_start(2, 3, &(tm_opts){.keyed = true, .ack_timeout_ms = 400});
    uint8_t b[1024];
    raw_auth a;

    /* Member 3 claimed with another key; the plain hello; wrong cluster, partition, target;
     * stale and future clocks; a data frame before any hello; a lower id that 2 dials. */
    expect_refused(2, b, w_auth_hello(b, &a, 3, 2, tm_sk[0], cluster, 0, 0));
    expect_refused(2, b, w_auth_hello(b, &a, 3, 2, tm_sk[1], cluster, 0, 0));
    expect_refused(2, b, w_hello(b, 0, 3, 2, cluster));
    expect_refused(2, b, w_auth_hello(b, &a, 3, 2, tm_sk[3], "other-cluster", 0, 0));
    expect_refused(2, b, w_auth_hello(b, &a, 3, 2, tm_sk[3], cluster, 1, 0));
    expect_refused(2, b, w_auth_hello(b, &a, 3, 4, tm_sk[3], cluster, 0, 0));
    expect_refused(2, b, w_auth_hello(b, &a, 3, 2, tm_sk[3], cluster, 0, -31000));
    expect_refused(2, b, w_auth_hello(b, &a, 3, 2, tm_sk[3], cluster, 0, 31000));
    expect_refused(2, b, w_data(b, 0, 10));
    expect_refused(2, b, w_auth_hello(b, &a, 1, 2, tm_sk[1], cluster, 0, 0));
    /* A good hello with its ack field forged. */
    size_t n = w_auth_hello(b, &a, 3, 2, tm_sk[3], cluster, 0, 0);
    put_u64(b + 1, 5);
    expect_refused(2, b, n);
    /* A good hello bit-flipped in its signature. */
    n = w_auth_hello(b, &a, 3, 2, tm_sk[3], cluster, 0, 0);
    b[n - 1] ^= 1;
    expect_refused(2, b, n);
    ck_assert_uint_eq(stats_of(2).refused, 12);
    ck_assert_uint_eq(stats_of(2).connects, 0);
    kl_peer_auth_dial_wipe(&a.dial);

    /* A good handshake, data arrives; then each kind of bad frame closes the connection. */
    enum { REPLAY, REORDER, TAMPER, PLAIN, HELLO2, KINDS };
    for (int kind = 0; kind < KINDS; kind++) {
        raw_sock r;
        raw_auth ra;
        uint64_t refused = stats_of(2).refused;
        uint64_t got = mem[2].got[3];
        raw_auth_join(&r, &ra, 2, 3, true);
        raw_send_sealed(&r, &ra, 20);
        expect_got(2, 3, got + 1, 2000);
        ck_assert_uint_eq(mem[2].raw_last_len, 20);
        uint8_t f[256];
        size_t fl = w_sealed(f, &r, &ra, W_DATA, 30);
        switch (kind) {
        case REPLAY: /* the same frame twice */
            raw_send(&r, f, fl);
            expect_got(2, 3, got + 2, 2000);
            raw_send(&r, f, fl);
            break;
        case REORDER: /* frame 3 where 2 is expected */
            r.tx++;
            fl = w_sealed(f, &r, &ra, W_DATA, 30);
            raw_send(&r, f, fl);
            break;
        case TAMPER:
            f[9 + KL_PEER_AUTH_COUNTER_LEN + 3] ^= 0x20;
            raw_send(&r, f, fl);
            break;
        case PLAIN: /* an unsealed data frame after the handshake */
            raw_send(&r, f, w_data(f, r.rx, 30));
            break;
        case HELLO2:
            raw_send(&r, f, w_auth_hello(f, &ra, 3, 2, tm_sk[3], cluster, 0, 0));
            break;
        }
        ck_assert(run_until(raw_closed, &r, 2000));
        tm_pair p23 = {2, 3};
        ck_assert(run_until(peer_down, &p23, 2000));
        ck_assert_uint_eq(stats_of(2).refused, refused + 1);
        ck_assert_uint_eq(mem[2].got[3], got + (kind == REPLAY ? 2 : 1));
        raw_close(&r);
        kl_peer_auth_dial_wipe(&ra.dial);
        kl_peer_auth_keys_wipe(&ra.keys);
    }
    ck_assert_int_eq(mem[2].bad, 0);
    loop_close();
}
END_TEST

START_TEST(test_keyed_replayed_hello_replaces_nothing)
{
    /* Someone with a copy of member 3's HELLO (here: a raw peer that has the key but never
     * proves it holds the ephemeral secret) gets an ANSWER, but is never connected, does not
     * replace member 3's live connection and is closed by the handshake watchdog. */
    loop_open();
    memset(send_seq, 0, sizeof send_seq);
    for (int i = 1; i <= 3; i++)
        url_for((uint64_t)i);
    for (int i = 2; i <= 3; i++)
        member_start((uint64_t)i, 3, &(tm_opts){.keyed = true, .ack_timeout_ms = 400});
    tm_pair p23 = {2, 3};
    ck_assert(run_until(pair_up, &p23, 5000));
    raw_sock r;
    raw_auth ra;
    raw_auth_join(&r, &ra, 2, 3, false);
    exchange_ok(2, 3, 20); /* the real member 3 is still the one connected */
    ck_assert(run_until(raw_closed, &r, 2000));
    ck_assert(kl_peer_connected(mem[2].peer, 3));
    exchange_ok(3, 2, 20);
    kl_peer_counters st = stats_of(2);
    ck_assert_uint_eq(st.refused, 1); /* "no hello in time" */
    ck_assert_uint_eq(st.connects, 1);
    ck_assert_int_eq(mem[2].bad, 0);
    ck_assert_int_eq(mem[3].bad, 0);
    raw_close(&r);
    kl_peer_auth_dial_wipe(&ra.dial);
    kl_peer_auth_keys_wipe(&ra.keys);
    loop_close();
}
END_TEST

START_TEST(test_keyed_dialer_checks_answer)
{
    /* Member 2 dials a raw "member 1". An ANSWER signed by the wrong key, or a plain
     * hello, is refused and member 2 redials; a good ANSWER connects it, and its first
     * frame is a sealed ACK (key confirmation) that opens with our keys. */
    loop_open();
    keys_init();
    url_for(1);
    url_for(2);
    raw_sock lr;
    raw_open(&lr, mem[1].url, true);
    member_start(2, 2, &(tm_opts){.keyed = true, .ack_timeout_ms = 400});
    for (int attempt = 0; attempt < 3; attempt++) {
        raw_sock r = lr; /* each attempt is a new connection on the one listener */
        raw_accept(&r, 3000);
        uint8_t b[1024];
        long n = raw_recv(&r, b, sizeof b, 3000);
        ck_assert_int_gt(n, 9);
        ck_assert_int_eq(b[0], W_HELLO);
        ck_assert_uint_eq(get_u64(b + 1), 0);
        kl_peer_auth_msg hello;
        kl_err e;
        ck_assert_int_eq(kl_peer_auth_decode(b + 9, (size_t)n - 9, &hello, &e), KL_OK);
        ck_assert_uint_eq(hello.from, 2);
        ck_assert_uint_eq(hello.to, 1);
        kl_peer_auth_self me = {.cluster = cluster, .partition = 0, .id = 1,
                                .secret = attempt == 0 ? tm_sk[0] : tm_sk[1]};
        kl_peer_auth_msg answer;
        kl_peer_auth_keys keys;
        ck_assert_int_eq(kl_peer_auth_accept(&me, &hello, tm_pk[2], hello.unix_ms,
                                             KL_PEER_AUTH_DEFAULT_SKEW_MS, &answer, &keys, &e),
                         KL_OK);
        uint64_t refused = stats_of(2).refused;
        if (attempt == 1) {
            raw_send(&r, b, w_hello(b, r.rx, 1, 2, cluster));
        } else {
            b[0] = W_HELLO;
            put_u64(b + 1, r.rx);
            size_t al = kl_peer_auth_encode(&answer, b + 9, KL_PEER_AUTH_MAX);
            raw_send(&r, b, 9 + al);
        }
        if (attempt < 2) {
            ck_assert(run_until(raw_closed, &r, 2000));
            ck_assert_uint_eq(stats_of(2).refused, refused + 1);
            ck_assert(!kl_peer_connected(mem[2].peer, 1));
            close(r.fd);
            kl_peer_auth_keys_wipe(&keys);
            continue;
        }
        tm_pair p21 = {2, 1};
        ck_assert(run_until(one_up, &p21, 2000));
        n = raw_recv(&r, b, sizeof b, 2000); /* the confirming ACK, at once */
        ck_assert_int_eq(n, 9 + KL_PEER_AUTH_OVERHEAD);
        ck_assert_int_eq(b[0], W_ACK);
        size_t pl;
        ck_assert_int_eq(kl_peer_auth_open(keys.rx, 1, b, (size_t)n, 9, &pl, &e), KL_OK);
        ck_assert_uint_eq(pl, 0);
        /* Data from member 2 arrives sealed, counter 2, and opens. */
        ck_assert_int_eq(send_one(2, 1, 64), KL_OK);
        n = raw_recv(&r, b, sizeof b, 2000);
        ck_assert_int_eq(n, 9 + KL_PEER_AUTH_OVERHEAD + 64);
        ck_assert_int_eq(b[0], W_DATA);
        ck_assert_uint_eq(get_u64(b + 9), 2); /* the counter */
        ck_assert_int_eq(kl_peer_auth_open(keys.rx, 2, b, (size_t)n, 9, &pl, &e), KL_OK);
        ck_assert_uint_eq(pl, 64);
        ck_assert_uint_eq(get_u64(b + 9 + KL_PEER_AUTH_COUNTER_LEN), 2); /* test header: from */
        kl_peer_auth_keys_wipe(&keys);
        close(r.fd);
    }
    kl_peer_stop(mem[2].peer); /* the dialer first, then the raw listener */
    mem[2].peer = NULL;
    close(lr.lfd);
    loop_close();
}
END_TEST

START_TEST(test_keyed_and_plain_do_not_mix)
{
    /* Member 1 has keys, member 2 has none: each refuses the other's hello; no frame
     * passes either way. */
    loop_open();
    memset(send_seq, 0, sizeof send_seq);
    url_for(1);
    url_for(2);
    member_start(1, 2, &(tm_opts){.keyed = true});
    member_start(2, 2, NULL);
    ck_assert(!stats_of(2).authenticated);
    uint64_t until = mono_ms() + 3000;
    while (stats_of(1).refused < 2 && mono_ms() < until)
        run_for(5);
    ck_assert_uint_ge(stats_of(1).refused, 2); /* it redials; each try is refused */
    ck_assert(!kl_peer_connected(mem[1].peer, 2));
    ck_assert(!kl_peer_connected(mem[2].peer, 1));
    ck_assert_int_eq(send_one(2, 1, 10), KL_UNAVAILABLE);
    ck_assert_uint_eq(stats_of(1).received, 0);
    loop_close();
}
END_TEST

/* Member 1 at (index 1, replica_count 2), member 2 at (index idx2, replica_count 3). */
static void config_pair(bool keyed, uint64_t idx2)
{
    loop_open();
    memset(send_seq, 0, sizeof send_seq);
    url_for(1);
    url_for(2);
    member_start(1, 2, &(tm_opts){.keyed = keyed, .config_index = 1, .replica_count = 2});
    member_start(2, 2, &(tm_opts){.keyed = keyed, .config_index = idx2, .replica_count = 3});
}

START_TEST(test_config_mismatch_at_same_index_refused)
{
    for (int keyed = 0; keyed < 2; keyed++) {
        config_pair(keyed, 1);
        uint64_t until = mono_ms() + 3000;
        while (stats_of(1).config_mismatch < 2 && mono_ms() < until)
            run_for(5);
        ck_assert_uint_ge(stats_of(1).config_mismatch, 2); /* each redial refused again */
        ck_assert_uint_ge(stats_of(1).refused, stats_of(1).config_mismatch);
        ck_assert(!kl_peer_connected(mem[1].peer, 2));
        ck_assert(!kl_peer_connected(mem[2].peer, 1));
        loop_close();
    }
}
END_TEST

START_TEST(test_config_other_index_accepted)
{
    for (int keyed = 0; keyed < 2; keyed++) {
        config_pair(keyed, 2);
        wait_all_up(2);
        ck_assert_uint_eq(stats_of(1).config_mismatch, 0);
        ck_assert_int_eq(send_one(2, 1, 10), KL_OK);
        expect_got(1, 2, 1, 3000);
        loop_close();
    }
}
END_TEST

START_TEST(test_peer_port_cap_refuses_and_counts)
{
    /* Member 1 takes one connection at a time: of members 2 and 3 only one gets in. */
    loop_open();
    memset(send_seq, 0, sizeof send_seq);
    for (uint64_t i = 1; i <= 3; i++)
        url_for(i);
    member_start(1, 3, &(tm_opts){.max_pipes = 1});
    member_start(2, 3, NULL);
    member_start(3, 3, NULL);
    uint64_t until = mono_ms() + 3000;
    while (stats_of(1).refused_cap < 2 && mono_ms() < until)
        run_for(5);
    ck_assert_uint_ge(stats_of(1).refused_cap, 2);
    ck_assert_uint_le(stats_of(1).pipes_open, 1);
    ck_assert(!(kl_peer_connected(mem[1].peer, 2) && kl_peer_connected(mem[1].peer, 3)));
    loop_close();
}
END_TEST

START_TEST(test_peer_idle_connection_closed)
{
    /* Connected, then silent for longer than idle_ms: closed (and redialled). */
    loop_open();
    memset(send_seq, 0, sizeof send_seq);
    url_for(1);
    url_for(2);
    member_start(1, 2, &(tm_opts){.idle_ms = 300});
    member_start(2, 2, NULL);
    wait_all_up(2);
    uint64_t until = mono_ms() + 3000;
    while (stats_of(1).idle_closed < 1 && mono_ms() < until)
        run_for(5);
    ck_assert_uint_ge(stats_of(1).idle_closed, 1);
    ck_assert_uint_eq(stats_of(1).config_mismatch, 0);
    wait_all_up(2); /* the dialer comes back by itself */
    ck_assert_int_eq(send_one(2, 1, 10), KL_OK);
    expect_got(1, 2, 1, 3000);
    loop_close();
}
END_TEST

/* A dialer whose peer's listener went away redials with backoff (50 ms doubling to 1 s) and
 * connects again as soon as a listener is back on the URL. */
START_TEST(test_redial_after_listener_restart)
{
    loop_open();
    url_for(1);
    url_for(2);
    tm_pair p21 = {2, 1};
    member_start(2, 2, NULL);
    for (int round = 0; round < 2; round++) {
        raw_sock r;
        raw_open(&r, mem[1].url, true);
        uint64_t t0 = mono_ms();
        raw_accept(&r, 3000);
        /* First round: the dial started at once. Second: the listener was away for 600 ms,
         * so the backoff stood at most at 1 s. */
        ck_assert_uint_lt(mono_ms() - t0, 1500);
        uint8_t b[512];
        ck_assert_int_gt(raw_recv(&r, b, sizeof b, 3000), 0); /* the member's hello */
        ck_assert_int_eq(b[0], W_HELLO);
        raw_send(&r, b, w_hello(b, r.rx, 1, 2, cluster));
        uint64_t until = mono_ms() + 2000;
        while (!kl_peer_connected(mem[2].peer, 1) && mono_ms() < until)
            run_for(2);
        ck_assert(kl_peer_connected(mem[2].peer, 1));
        ck_assert_uint_eq(stats_of(2).connects, (uint64_t)round + 1);
        raw_close(&r); /* the connection and the listener */
        ck_assert(run_until(peer_down, &p21, 2000));
        run_for(600); /* refused dials meanwhile */
    }
    loop_close();
}
END_TEST

/* A connection that sends no SP header is closed after the handshake bound (ack_timeout_ms);
 * one whose header names another protocol (nng REQ) is closed as soon as it is read. */
START_TEST(test_no_sp_header_closed)
{
    loop_open();
    url_for(1);
    member_start(1, 1, &(tm_opts){.ack_timeout_ms = 300});
    for (int round = 0; round < 2; round++) {
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                                 .sin_port = htons((uint16_t)url_port(mem[1].url))};
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
        if (round == 1) {
            const uint8_t req[8] = {0, 'S', 'P', 0, 0, 0x30, 0, 0};
            ck_assert(write_all(fd, req, sizeof req));
        }
        uint64_t t0 = mono_ms(), until = t0 + 3000;
        uint8_t b[64];
        ssize_t n;
        size_t got = 0;
        while ((n = recv(fd, b, sizeof b, MSG_DONTWAIT)) != 0 && mono_ms() < until) {
            if (n > 0)
                got += (size_t)n;
            run_for(5);
        }
        ck_assert_int_eq(n, 0); /* closed */
        ck_assert_uint_eq(got, 8); /* the member's own SP header, nothing else */
        uint64_t took = mono_ms() - t0;
        if (round == 0)
            ck_assert_uint_ge(took, 250);
        else
            ck_assert_uint_lt(took, 250);
        close(fd);
    }
    ck_assert_uint_eq(stats_of(1).pipes_open, 0);
    loop_close();
}
END_TEST

/* Addresses beyond numeric IPv4: member 1 listens on an IPv6 literal, member 2 on a host
 * name (resolved with getaddrinfo at start), and the dialers reach them through the same
 * URLs (the name resolved again at every attempt). Frames flow every way. */
START_TEST(test_ipv6_and_host_name_urls)
{
    loop_open();
    memset(send_seq, 0, sizeof send_seq);
    snprintf(mem[1].url, sizeof mem[1].url, "tcp://[::1]:%d", th_free_port());
    snprintf(mem[2].url, sizeof mem[2].url, "tcp://localhost:%d", th_free_port());
    url_for(3);
    for (int i = 1; i <= 3; i++)
        member_launch((uint64_t)i, 3, NULL, false);
    wait_all_up(3);
    exchange_ok(1, 2, 5);
    exchange_ok(1, 3, 5);
    exchange_ok(2, 3, 5);
    loop_close();
}
END_TEST

Suite *suite_peer(void)
{
    Suite *s = suite_create("peer");
    TCase *t = tcase_create("transport");
    tcase_set_timeout(t, 30);
    tcase_add_test(t, test_three_members_exchange);
    tcase_add_test(t, test_restart_reconnects);
    tcase_add_test(t, test_send_to_down_member);
    tcase_add_test(t, test_refuses_bad_hellos);
    tcase_add_test(t, test_oversize_dropped);
    tcase_add_test(t, test_inbox_bounded);
    tcase_add_test(t, test_window_queue_and_watchdog);
    tcase_add_test(t, test_queued_frames_leave_in_one_batch);
    tcase_add_test(t, test_busy_flag_while_inbox_half_full);
    tcase_add_test(t, test_batch_received_in_order_and_checked);
    tcase_add_test(t, test_stop_with_frames_in_flight);
    tcase_add_test(t, test_stop_inside_recv);
    tcase_add_test(t, test_stop_closes_promptly);
    tcase_add_test(t, test_redial_after_listener_restart);
    tcase_add_test(t, test_no_sp_header_closed);
    tcase_add_test(t, test_ipv6_and_host_name_urls);
    tcase_add_test(t, test_stop_waits_for_the_closing_answer);
    tcase_add_test(t, test_closing_notice_answered_and_honoured);
    suite_add_tcase(s, t);
    t = tcase_create("keyed");
    tcase_set_timeout(t, 30);
    tcase_add_test(t, test_keyed_exchange_and_restart);
    tcase_add_test(t, test_keyed_refuses_strangers);
    tcase_add_test(t, test_keyed_replayed_hello_replaces_nothing);
    tcase_add_test(t, test_keyed_dialer_checks_answer);
    tcase_add_test(t, test_keyed_and_plain_do_not_mix);
    tcase_add_test(t, test_config_mismatch_at_same_index_refused);
    tcase_add_test(t, test_config_other_index_accepted);
    tcase_add_test(t, test_peer_port_cap_refuses_and_counts);
    tcase_add_test(t, test_peer_idle_connection_closed);
    suite_add_tcase(s, t);
    return s;
}
