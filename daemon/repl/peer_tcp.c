/* peer_tcp: pair1-over-TCP connections on the loop (see peer_tcp.h).
 *
 * A connection is freed only in its close callback, and libuv runs a cancelled write's or
 * connect's callback before that, so every callback finds its connection's memory. Events
 * to the owner come only from libuv callbacks (reads, closes, finished writes), never from
 * a kl_peer_tcp_* call, and each one is followed by a check whether the owner closed the
 * connection or stopped the transport from inside it. */
#include "daemon/repl/peer_tcp.h"
#include "common/wire.h"

#include "common/log.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TCP_SP_LEN 8
#define TCP_LEN_PREFIX 8
#define TCP_PAIR1_HDR 4
#define TCP_PAIR1_TTL 8 /* nng pair1's default: a frame that travelled further is dropped */
#define TCP_READ_CHUNK 65536
#define TCP_RECONN_MIN_MS 50
#define TCP_RECONN_MAX_MS 1000
/* A dialed connection that lasted this long was healthy: its loss is redialed at once (the
 * backoff starts over), while one refused right after it came up keeps backing off. */
#define TCP_HEALTHY_MS 1000
/* A connect that has not completed by then is abandoned and retried: a dropped SYN (a
 * partitioned network) must not hold the dialer for the kernel's two minutes. */
#define TCP_CONNECT_MAX_MS 2000
#define TCP_TIMER_MS 50
/* Connections at once, handshaken or not; one more is closed as soon as it is accepted. */
#define TCP_MAX_CONNS 256

_Static_assert(KL_PEER_TCP_HEADROOM == TCP_LEN_PREFIX + TCP_PAIR1_HDR, "headroom");

static const uint8_t tcp_sp_pair1[TCP_SP_LEN] = {0, 'S', 'P', 0, 0, 0x11, 0, 0};

typedef struct tcp_dialer tcp_dialer;

typedef struct tcp_conn {
    uv_tcp_t h;
    kl_peer_tcp *t;
    struct tcp_conn *prev, *next; /* in t->conns until its close callback */
    uint32_t id;
    tcp_dialer *dialer;           /* NULL: accepted */
    bool connected;               /* TCP established: the SP header went out, reading */
    bool up, closing;
    uint64_t born_ms, up_ms;      /* loop time */
    uv_connect_t creq;
    uint8_t *buf;
    size_t len, cap;
} tcp_conn;

struct tcp_dialer {
    kl_peer_tcp *t;
    tcp_dialer *prev, *next; /* in t->dialers until freed */
    uint32_t id;
    char host[256];
    char port[8];
    uv_timer_t timer;   /* backoff, then the connect deadline */
    bool timer_open;
    uv_getaddrinfo_t gai;
    bool resolving;
    tcp_conn *conn;     /* connecting or connected */
    uint64_t backoff;
    bool closed;        /* undialed or stopping */
};

struct kl_peer_tcp {
    uv_loop_t *loop;
    uv_tcp_t listener;
    uv_timer_t timer;
    int handles_open;
    bool stopping;
    tcp_conn *conns;
    size_t n_conns;
    tcp_dialer *dialers;
    uint32_t next_conn, next_dialer;
    size_t recv_max, send_max;
    uint64_t hello_ms;
    kl_peer_tcp_events ev;
    void *owner;
    char *url;
    void (*done)(void *);
    void *done_arg;
};

typedef struct tcp_write {
    uv_write_t req;
    tcp_conn *c;
    void *block;
} tcp_write;

static uint64_t tcp_now(const kl_peer_tcp *t) { return uv_now(t->loop); }


/* Splits tcp://HOST:PORT; HOST may be [IPV6], empty or "*" (every IPv4 address). */
static bool tcp_split(const char *url, char *host, size_t hcap, char *port, size_t pcap)
{
    static const char scheme[] = "tcp://";
    if (url == NULL || strncmp(url, scheme, sizeof scheme - 1) != 0)
        return false;
    const char *hp = url + sizeof scheme - 1;
    const char *colon = strrchr(hp, ':');
    if (colon == NULL || colon[1] == '\0' || strlen(colon + 1) >= pcap)
        return false;
    char *end = NULL;
    long pn = strtol(colon + 1, &end, 10);
    if (*end != '\0' || pn < 0 || pn > 65535)
        return false;
    snprintf(port, pcap, "%ld", pn);
    size_t hl = (size_t)(colon - hp);
    if (hl >= hcap)
        return false;
    memcpy(host, hp, hl);
    host[hl] = '\0';
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    } else if (hl == 0 || strcmp(host, "*") == 0) {
        snprintf(host, hcap, "0.0.0.0");
    } else if (strchr(host, ':') != NULL) {
        return false; /* an IPv6 address needs its brackets */
    }
    return host[0] != '\0';
}

/* A numeric host into ss; false when it is a name. */
static bool tcp_numeric(const char *host, const char *port, struct sockaddr_storage *ss)
{
    int pn = atoi(port);
    memset(ss, 0, sizeof *ss);
    return uv_ip4_addr(host, pn, (struct sockaddr_in *)ss) == 0 ||
           uv_ip6_addr(host, pn, (struct sockaddr_in6 *)ss) == 0;
}

/* ------------------------------------------------------------------ lifetime */

static void tcp_maybe_done(kl_peer_tcp *t)
{
    if (!t->stopping || t->handles_open != 0 || t->conns != NULL || t->dialers != NULL)
        return;
    void (*done)(void *) = t->done;
    void *arg = t->done_arg;
    free(t->url);
    free(t);
    if (done != NULL)
        done(arg);
}

static tcp_conn *conn_find(const kl_peer_tcp *t, uint32_t id)
{
    for (tcp_conn *c = t->conns; c != NULL; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

static void dialer_schedule(tcp_dialer *d, uint64_t ms);
static void dialer_maybe_free(tcp_dialer *d);

static void conn_closed(uv_handle_t *h)
{
    tcp_conn *c = h->data;
    kl_peer_tcp *t = c->t;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        t->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    t->n_conns--;
    bool was_up = c->up;
    uint64_t lived = c->up ? tcp_now(t) - c->up_ms : 0;
    tcp_dialer *d = c->dialer != NULL && c->dialer->conn == c ? c->dialer : NULL;
    uint32_t id = c->id;
    free(c->buf);
    free(c);
    if (was_up && !t->stopping)
        t->ev.down(t->owner, id);
    if (d == NULL) {
        tcp_maybe_done(t);
        return;
    }
    d->conn = NULL;
    if (d->closed) {
        dialer_maybe_free(d); /* the last one frees t while stopping */
        return;
    }
    if (lived >= TCP_HEALTHY_MS)
        d->backoff = TCP_RECONN_MIN_MS / 2;
    dialer_schedule(d, lived >= TCP_HEALTHY_MS ? TCP_RECONN_MIN_MS : d->backoff);
}

static void conn_close(tcp_conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    uv_close((uv_handle_t *)&c->h, conn_closed);
}

/* A new connection's record, its handle initialized and listed; NULL when out of memory. */
static tcp_conn *conn_new(kl_peer_tcp *t, tcp_dialer *d)
{
    tcp_conn *c = calloc(1, sizeof *c);
    if (c == NULL || uv_tcp_init(t->loop, &c->h) != 0) {
        free(c);
        return NULL;
    }
    c->t = t;
    c->h.data = c;
    c->dialer = d;
    c->id = ++t->next_conn != 0 ? t->next_conn : ++t->next_conn;
    c->born_ms = tcp_now(t);
    c->next = t->conns;
    if (t->conns != NULL)
        t->conns->prev = c;
    t->conns = c;
    t->n_conns++;
    return c;
}

/* ------------------------------------------------------------------ reading */

static void conn_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    (void)hint;
    tcp_conn *c = h->data;
    if (c->cap - c->len < TCP_READ_CHUNK / 4) {
        size_t cap = c->cap ? c->cap * 2 : TCP_READ_CHUNK;
        uint8_t *grown = realloc(c->buf, cap);
        if (grown == NULL) {
            *buf = uv_buf_init(NULL, 0); /* libuv reports UV_ENOBUFS: the connection closes */
            return;
        }
        c->buf = grown;
        c->cap = cap;
    }
    *buf = uv_buf_init((char *)c->buf + c->len, (unsigned)(c->cap - c->len));
}

/* The peer's SP header: pair1, as ours. Then the connection is up. */
static bool conn_sp(tcp_conn *c)
{
    if (memcmp(c->buf, tcp_sp_pair1, TCP_SP_LEN) != 0)
        return false;
    kl_peer_tcp *t = c->t;
    c->up = true;
    c->up_ms = tcp_now(t);
    t->ev.up(t->owner, c->id, c->dialer != NULL ? c->dialer->id : 0);
    return true;
}

/* Hands every whole frame in the buffer to the owner. */
static void conn_parse(tcp_conn *c)
{
    kl_peer_tcp *t = c->t;
    size_t off = 0;
    if (!c->up) {
        if (c->len < TCP_SP_LEN)
            return;
        if (!conn_sp(c)) {
            conn_close(c);
            return;
        }
        off = TCP_SP_LEN;
    }
    while (!c->closing && !t->stopping && c->len - off >= TCP_LEN_PREFIX) {
        uint64_t flen = kl_wire_get_u64(c->buf + off);
        if (flen > t->recv_max || flen < TCP_PAIR1_HDR) {
            conn_close(c); /* unread, as nng does */
            return;
        }
        if (c->len - off - TCP_LEN_PREFIX < flen)
            break;
        const uint8_t *f = c->buf + off + TCP_LEN_PREFIX;
        off += TCP_LEN_PREFIX + (size_t)flen;
        if (f[0] != 0 || f[1] != 0 || f[2] != 0) {
            conn_close(c); /* not a pair1 header: nng closes the pipe too */
            return;
        }
        if (f[3] >= TCP_PAIR1_TTL)
            continue;
        t->ev.frame(t->owner, c->id, f + TCP_PAIR1_HDR, (size_t)flen - TCP_PAIR1_HDR);
    }
    if (c->closing)
        return;
    if (off > 0) {
        memmove(c->buf, c->buf + off, c->len - off);
        c->len -= off;
    }
    /* A large buffer left from one big frame goes back to the usual size once empty. */
    if (c->len == 0 && c->cap > 4 * TCP_READ_CHUNK) {
        free(c->buf);
        c->buf = NULL;
        c->cap = 0;
    }
}

static void conn_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    (void)buf;
    tcp_conn *c = s->data;
    if (n < 0) {
        conn_close(c);
        return;
    }
    c->len += (size_t)n;
    conn_parse(c);
}

static void sp_written(uv_write_t *req, int status)
{
    tcp_write *w = req->data;
    if (status != 0 && status != UV_ECANCELED)
        conn_close(w->c);
    free(w);
}

/* TCP is established: our SP header, TCP_NODELAY, reading. */
static void conn_begin(tcp_conn *c)
{
    c->connected = true;
    c->born_ms = tcp_now(c->t); /* the SP header's deadline counts from here */
    (void)uv_tcp_nodelay(&c->h, 1);
    uv_buf_t b = uv_buf_init((char *)tcp_sp_pair1, TCP_SP_LEN);
    int n = uv_try_write((uv_stream_t *)&c->h, &b, 1);
    if (n != TCP_SP_LEN) {
        tcp_write *w = malloc(sizeof *w);
        size_t done = n > 0 ? (size_t)n : 0;
        b = uv_buf_init((char *)tcp_sp_pair1 + done, (unsigned)(TCP_SP_LEN - done));
        if (w == NULL || (n < 0 && n != UV_EAGAIN)) {
            free(w);
            conn_close(c);
            return;
        }
        w->c = c;
        w->block = NULL;
        w->req.data = w;
        if (uv_write(&w->req, (uv_stream_t *)&c->h, &b, 1, sp_written) != 0) {
            free(w);
            conn_close(c);
            return;
        }
    }
    if (uv_read_start((uv_stream_t *)&c->h, conn_alloc, conn_read) != 0)
        conn_close(c);
}

static void on_accept(uv_stream_t *server, int status)
{
    kl_peer_tcp *t = server->data;
    if (status != 0 || t->stopping)
        return;
    tcp_conn *c = conn_new(t, NULL);
    if (c == NULL) {
        KL_WARN("peer connection not accepted", "listen=%s reason=memory", t->url);
        return;
    }
    if (uv_accept(server, (uv_stream_t *)&c->h) != 0 || t->n_conns > TCP_MAX_CONNS) {
        conn_close(c);
        return;
    }
    conn_begin(c);
}

/* ------------------------------------------------------------------ dialing */

static void dialer_timer_closed(uv_handle_t *h)
{
    tcp_dialer *d = h->data;
    d->timer_open = false;
    dialer_maybe_free(d);
}

static void dialer_maybe_free(tcp_dialer *d)
{
    if (!d->closed || d->timer_open || d->resolving || d->conn != NULL)
        return;
    kl_peer_tcp *t = d->t;
    if (d->prev != NULL)
        d->prev->next = d->next;
    else
        t->dialers = d->next;
    if (d->next != NULL)
        d->next->prev = d->prev;
    free(d);
    tcp_maybe_done(t);
}

static void dialer_close(tcp_dialer *d)
{
    if (d->closed)
        return;
    d->closed = true;
    if (d->resolving)
        (void)uv_cancel((uv_req_t *)&d->gai); /* its callback still runs */
    if (d->conn != NULL)
        conn_close(d->conn);
    uv_close((uv_handle_t *)&d->timer, dialer_timer_closed);
    dialer_maybe_free(d);
}

static void connect_cb(uv_connect_t *req, int status)
{
    tcp_conn *c = req->data;
    if (c->closing)
        return;
    if (status != 0) {
        conn_close(c); /* the dialer retries from the close callback */
        return;
    }
    if (c->dialer != NULL)
        uv_timer_stop(&c->dialer->timer);
    conn_begin(c);
}

static void dialer_connect(tcp_dialer *d, const struct sockaddr *sa)
{
    kl_peer_tcp *t = d->t;
    tcp_conn *c = conn_new(t, d);
    if (c == NULL) {
        d->backoff = d->backoff * 2 > TCP_RECONN_MAX_MS ? TCP_RECONN_MAX_MS : d->backoff * 2;
        dialer_schedule(d, d->backoff);
        return;
    }
    d->conn = c;
    c->creq.data = c;
    if (uv_tcp_connect(&c->creq, &c->h, sa, connect_cb) != 0) {
        conn_close(c);
        return;
    }
}

static void dialer_deadline_cb(uv_timer_t *timer)
{
    tcp_dialer *d = timer->data;
    if (d->conn != NULL && !d->conn->connected)
        conn_close(d->conn);
}

static void gai_cb(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    tcp_dialer *d = req->data;
    d->resolving = false;
    if (d->closed || status != 0 || res == NULL) {
        if (res != NULL)
            uv_freeaddrinfo(res);
        if (d->closed) {
            dialer_maybe_free(d);
            return;
        }
        uint64_t wait = d->backoff;
        d->backoff = d->backoff * 2 > TCP_RECONN_MAX_MS ? TCP_RECONN_MAX_MS : d->backoff * 2;
        dialer_schedule(d, wait);
        return;
    }
    dialer_connect(d, res->ai_addr);
    uv_freeaddrinfo(res);
    if (d->conn != NULL && !d->closed)
        (void)uv_timer_start(&d->timer, dialer_deadline_cb, TCP_CONNECT_MAX_MS, 0);
}

/* One attempt: a numeric address is connected at once, a name is resolved first. */
static void dialer_attempt(tcp_dialer *d)
{
    if (d->closed || d->conn != NULL || d->resolving || d->t->stopping)
        return;
    d->backoff = d->backoff * 2 > TCP_RECONN_MAX_MS ? TCP_RECONN_MAX_MS : d->backoff * 2;
    struct sockaddr_storage ss;
    if (tcp_numeric(d->host, d->port, &ss)) {
        dialer_connect(d, (const struct sockaddr *)&ss);
        if (d->conn != NULL)
            (void)uv_timer_start(&d->timer, dialer_deadline_cb, TCP_CONNECT_MAX_MS, 0);
        return;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    d->gai.data = d;
    if (uv_getaddrinfo(d->t->loop, &d->gai, gai_cb, d->host, d->port, &hints) == 0)
        d->resolving = true;
    else
        dialer_schedule(d, d->backoff);
}

static void dialer_backoff_cb(uv_timer_t *timer) { dialer_attempt(timer->data); }

/* The next attempt in ms (the backoff of the attempt that failed or connection that ended). */
static void dialer_schedule(tcp_dialer *d, uint64_t ms)
{
    if (d->closed || d->t->stopping)
        return;
    (void)uv_timer_start(&d->timer, dialer_backoff_cb, ms, 0);
}

bool kl_peer_tcp_url_ok(const char *url)
{
    char host[256], port[8];
    return tcp_split(url, host, sizeof host, port, sizeof port);
}

kl_code kl_peer_tcp_dial(kl_peer_tcp *t, const char *url, uint32_t *dialer, kl_err *err)
{
    tcp_dialer *d = calloc(1, sizeof *d);
    if (d == NULL)
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory", "peer: out of memory");
    if (!tcp_split(url, d->host, sizeof d->host, d->port, sizeof d->port)) {
        free(d);
        return kl_fail(err, KL_INVALID_ARGUMENT, "peer_url",
                       "peer: %s is not tcp://HOST:PORT", url != NULL ? url : "(none)");
    }
    d->t = t;
    d->id = ++t->next_dialer != 0 ? t->next_dialer : ++t->next_dialer;
    d->backoff = TCP_RECONN_MIN_MS / 2; /* the first attempt doubles it to the minimum */
    (void)uv_timer_init(t->loop, &d->timer); /* cannot fail */
    d->timer.data = d;
    d->timer_open = true;
    d->next = t->dialers;
    if (t->dialers != NULL)
        t->dialers->prev = d;
    t->dialers = d;
    *dialer = d->id;
    (void)uv_timer_start(&d->timer, dialer_backoff_cb, 0, 0); /* from the loop, not from here */
    return KL_OK;
}

void kl_peer_tcp_undial(kl_peer_tcp *t, uint32_t dialer)
{
    for (tcp_dialer *d = t->dialers; d != NULL; d = d->next)
        if (d->id == dialer) {
            dialer_close(d);
            return;
        }
}

/* ------------------------------------------------------------------ writing */

static void frame_written(uv_write_t *req, int status)
{
    tcp_write *w = req->data;
    tcp_conn *c = w->c;
    free(w->block);
    free(w);
    if (status != 0) {
        if (status != UV_ECANCELED)
            conn_close(c);
        return;
    }
    kl_peer_tcp *t = c->t;
    if (!c->closing && !t->stopping && c->up && c->h.write_queue_size == 0 && t->ev.drained)
        t->ev.drained(t->owner, c->id);
}

kl_code kl_peer_tcp_send(kl_peer_tcp *t, uint32_t conn, void *block, uint8_t *frame, size_t len)
{
    tcp_conn *c = conn_find(t, conn);
    if (c == NULL || !c->up || c->closing || t->stopping) {
        free(block);
        return KL_UNAVAILABLE;
    }
    size_t total = KL_PEER_TCP_HEADROOM + len;
    if (c->h.write_queue_size + total > t->send_max) {
        free(block);
        return KL_RESOURCE_EXHAUSTED;
    }
    uint8_t *head = frame - KL_PEER_TCP_HEADROOM;
    kl_wire_put_u64(head, len + TCP_PAIR1_HDR);
    head[8] = head[9] = head[10] = 0;
    head[11] = 1; /* hop count */
    uv_buf_t b = uv_buf_init((char *)head, (unsigned)total);
    int n = uv_try_write((uv_stream_t *)&c->h, &b, 1);
    if (n >= 0 && (size_t)n == total) {
        free(block);
        return KL_OK;
    }
    tcp_write *w = n >= 0 || n == UV_EAGAIN ? malloc(sizeof *w) : NULL;
    if (w == NULL) {
        free(block);
        conn_close(c); /* a half-written frame cannot be left behind */
        return KL_UNAVAILABLE;
    }
    size_t done = n > 0 ? (size_t)n : 0;
    w->c = c;
    w->block = block;
    w->req.data = w;
    b = uv_buf_init((char *)head + done, (unsigned)(total - done));
    if (uv_write(&w->req, (uv_stream_t *)&c->h, &b, 1, frame_written) != 0) {
        free(block);
        free(w);
        conn_close(c);
        return KL_UNAVAILABLE;
    }
    return KL_OK;
}

size_t kl_peer_tcp_queued(const kl_peer_tcp *t, uint32_t conn)
{
    const tcp_conn *c = conn_find(t, conn);
    return c != NULL ? c->h.write_queue_size : 0;
}

void kl_peer_tcp_close(kl_peer_tcp *t, uint32_t conn)
{
    tcp_conn *c = conn_find(t, conn);
    if (c != NULL)
        conn_close(c);
}

bool kl_peer_tcp_remote(const kl_peer_tcp *t, uint32_t conn, char *buf, size_t cap)
{
    snprintf(buf, cap, "unknown");
    tcp_conn *c = conn_find(t, conn);
    struct sockaddr_storage ss;
    int sl = sizeof ss;
    if (c == NULL || c->closing || uv_tcp_getpeername(&c->h, (struct sockaddr *)&ss, &sl) != 0)
        return false;
    char ip[64];
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
        (void)uv_ip4_name(a, ip, sizeof ip);
        snprintf(buf, cap, "%s:%u", ip, (unsigned)ntohs(a->sin_port));
    } else if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
        (void)uv_ip6_name(a, ip, sizeof ip);
        snprintf(buf, cap, "[%s]:%u", ip, (unsigned)ntohs(a->sin6_port));
    } else {
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------ start / stop */

/* Closes connections that sent no SP header in time. */
static void timer_cb(uv_timer_t *timer)
{
    kl_peer_tcp *t = timer->data;
    uint64_t now = tcp_now(t);
    for (tcp_conn *c = t->conns; c != NULL; c = c->next)
        if (c->connected && !c->up && !c->closing && now - c->born_ms >= t->hello_ms)
            conn_close(c);
}

static void handle_closed(uv_handle_t *h)
{
    kl_peer_tcp *t = h->data;
    t->handles_open--;
    tcp_maybe_done(t);
}

/* The listen address: numeric, or the first getaddrinfo gives. */
static kl_code tcp_listen_addr(const char *url, struct sockaddr_storage *ss, kl_err *err)
{
    char host[256], port[8];
    if (!tcp_split(url, host, sizeof host, port, sizeof port))
        return kl_fail(err, KL_INVALID_ARGUMENT, "listen_url",
                       "peer: %s is not tcp://HOST:PORT", url != NULL ? url : "(none)");
    if (tcp_numeric(host, port, ss))
        return KL_OK;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    int rv = getaddrinfo(host, port, &hints, &res);
    if (rv != 0 || res == NULL || res->ai_addrlen > sizeof *ss) {
        if (res != NULL)
            freeaddrinfo(res);
        return kl_fail(err, KL_INVALID_ARGUMENT, "listen_url", "peer: cannot resolve %s: %s",
                       url, rv != 0 ? gai_strerror(rv) : "no address");
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return KL_OK;
}

kl_code kl_peer_tcp_start(uv_loop_t *loop, const kl_peer_tcp_config *cfg, kl_peer_tcp **out,
                          kl_err *err)
{
    struct sockaddr_storage ss;
    kl_code rc = tcp_listen_addr(cfg->url, &ss, err);
    if (rc != KL_OK)
        return rc;
    kl_peer_tcp *t = calloc(1, sizeof *t);
    if (t == NULL || (t->url = strdup(cfg->url)) == NULL) {
        free(t);
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory", "peer: out of memory");
    }
    t->loop = loop;
    t->recv_max = cfg->recv_max;
    t->send_max = cfg->send_max_bytes;
    t->hello_ms = cfg->hello_ms;
    t->ev = cfg->ev;
    t->owner = cfg->owner;
    /* Bound and listening before any handle exists, so that a failure (a port in use)
     * returns with nothing left to close on the loop. */
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    socklen_t sl = ss.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    int rv = fd < 0 ? -errno : 0;
    if (rv == 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
                    bind(fd, (const struct sockaddr *)&ss, sl) != 0 || listen(fd, 128) != 0))
        rv = -errno;
    if (rv == 0 && (rv = uv_tcp_init(loop, &t->listener)) == 0 &&
        (rv = uv_tcp_open(&t->listener, fd)) != 0)
        uv_close((uv_handle_t *)&t->listener, NULL); /* not run yet: nothing was started */
    if (rv != 0) {
        if (fd >= 0)
            close(fd);
        free(t->url);
        free(t);
        rc = rv == UV_EINVAL || rv == UV_EAFNOSUPPORT ? KL_INVALID_ARGUMENT : KL_UNAVAILABLE;
        return kl_fail(err, rc, "listen_url", "peer: listen on %s failed: %s", cfg->url,
                       uv_strerror(rv));
    }
    t->listener.data = t;
    t->handles_open = 1;
    if ((rv = uv_listen((uv_stream_t *)&t->listener, 128, on_accept)) != 0) {
        kl_fail(err, KL_UNAVAILABLE, "listen_url", "peer: listen on %s failed: %s", cfg->url,
                uv_strerror(rv));
        t->stopping = true;
        uv_close((uv_handle_t *)&t->listener, handle_closed); /* frees t once closed */
        return KL_UNAVAILABLE;
    }
    (void)uv_timer_init(loop, &t->timer); /* cannot fail */
    t->timer.data = t;
    t->handles_open++;
    (void)uv_timer_start(&t->timer, timer_cb, TCP_TIMER_MS, TCP_TIMER_MS);
    *out = t;
    return KL_OK;
}

void kl_peer_tcp_stop(kl_peer_tcp *t, void (*done)(void *arg), void *arg)
{
    if (t == NULL || t->stopping)
        return;
    t->stopping = true;
    t->done = done;
    t->done_arg = arg;
    for (tcp_dialer *d = t->dialers, *next; d != NULL; d = next) {
        next = d->next; /* dialer_close may free d */
        dialer_close(d);
    }
    for (tcp_conn *c = t->conns; c != NULL; c = c->next)
        conn_close(c);
    uv_close((uv_handle_t *)&t->timer, handle_closed);
    uv_close((uv_handle_t *)&t->listener, handle_closed);
}
