/* rpc_tcp: the RPC server's TCP transport on the loop (see rpc_tcp.h).
 *
 * Wire (what nng 1.5's TCP transport and REQ protocol send): each side first sends 8 bytes
 * 0x00 'S' 'P' 0x00, its protocol number (u16 big-endian: REQ 0x30, REP 0x31) and two zero
 * bytes; then every message is a u64 big-endian length and that many bytes. A REQ message
 * starts with its backtrace: 4-byte words, the last one (the request id) with its high bit
 * set; a REP answer starts with the same words. */
#include "common/rpc_tcp.h"
#include "common/tcp_url.h"
#include "common/wire.h"

#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TCP_PROTO_REQ 0x30
#define TCP_PROTO_REP 0x31
#define TCP_HELLO_LEN 8
#define TCP_LEN_PREFIX 8
#define TCP_MAX_HOPS (KL_RPC_TCP_HDR_MAX / 4)
/* Read buffers grow to what a frame needs and start at this. */
#define TCP_READ_CHUNK 65536
/* A connection that has not sent its hello within this is closed (nng's negotiation
 * bound), so half-open connections cannot pile up uncounted. */
#define TCP_HELLO_TIMEOUT_MS 10000
/* Answers waiting to be written to one connection beyond this (plus one frame) mean its
 * client sends without reading: the connection is closed rather than buffered without
 * bound (nng's REP dropped such answers after its send timeout). */
#define TCP_WRITE_BACKLOG_MAX (64u << 20)
/* The housekeeping timer's period when no idle timeout sets a shorter one. */
#define TCP_TIMER_MS 1000
/* Answers one connection gathers for one write (one writev). The answers a loop turn
 * produces (a commit completes many batches at once) go out together at the start of the
 * next turn; more than this on one connection are written at once, in order. */
#define TCP_FLUSH_FRAMES 64

struct kl_rpc_tcp_conn {
    uv_tcp_t h;
    kl_rpc_tcp *t;
    kl_rpc_tcp_conn *prev, *next; /* in t->conns while the handle is open */
    int refs;                     /* the open handle + one per held call */
    int held;                     /* calls held (requests in flight) */
    bool hello_ok, counted, closing, reading;
    bool parsing; /* conn_parse is delivering its frames (a handler may resume the server) */
    int64_t last_ms;              /* loop time of the last request or answer */
    uint8_t *buf;
    size_t len, cap;
    /* Answers waiting for this turn's flush, in answer order; each holds the reference
     * its call held. While listed in t's flush list the list holds one more. */
    uint8_t *out_frame[TCP_FLUSH_FRAMES];
    size_t out_len[TCP_FLUSH_FRAMES];
    int out_n;
    size_t out_bytes;
    bool flush_listed;
    kl_rpc_tcp_conn *flush_next;
};

struct kl_rpc_tcp {
    uv_loop_t *loop;
    uv_tcp_t listener;
    uv_timer_t idle_timer;
    /* Runs while answers wait (flush_head): an active idle handle also keeps the loop's
     * next poll from blocking, so answers given in a timer or async callback are not held
     * until the next socket event. */
    uv_idle_t flush_idle;
    bool idle_on, paused, stopping, flush_on, flush_active;
    kl_rpc_tcp_conn *flush_head, *flush_tail;
    int handles_open; /* listener, timer, flush handle */
    kl_rpc_tcp_conn *conns;
    size_t nconns;    /* handshaken and counted */
    size_t recv_max;
    int max_conns, idle_ms;
    kl_rpc_tcp_stats stats;
    kl_rpc_tcp_frame_fn on_frame;
    void *owner;
    void (*done)(void *);
    void *done_arg;
};

/* One queued write of answers the socket did not take at once: the frames it owns, each
 * with one reference to conn. */
typedef struct tcp_write {
    uv_write_t req;
    kl_rpc_tcp_conn *conn;
    int nframes;
    uint8_t *frame[];
} tcp_write;

static const uint8_t tcp_hello_rep[TCP_HELLO_LEN] = {0, 'S', 'P', 0, 0, TCP_PROTO_REP, 0, 0};

static int64_t tcp_now(const kl_rpc_tcp *t) { return (int64_t)uv_now(t->loop); }

bool kl_rpc_tcp_handles(const char *url)
{
    struct sockaddr_storage ss;
    socklen_t len;
    return kl_tcp_url_parse(url, true, &ss, &len);
}

static void tcp_maybe_done(kl_rpc_tcp *t)
{
    if (t->stopping && t->handles_open == 0 && t->conns == NULL) {
        void (*done)(void *) = t->done;
        void *arg = t->done_arg;
        free(t);
        if (done != NULL)
            done(arg);
    }
}

static void conn_unref(kl_rpc_tcp_conn *c)
{
    if (--c->refs > 0)
        return;
    free(c->buf);
    free(c);
}

static void conn_closed(uv_handle_t *h)
{
    kl_rpc_tcp_conn *c = h->data;
    kl_rpc_tcp *t = c->t;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        t->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    c->t = NULL; /* a held call answers into nothing from now on */
    conn_unref(c);
    tcp_maybe_done(t);
}

static void conn_close(kl_rpc_tcp_conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    if (c->counted) {
        c->counted = false;
        c->t->nconns--;
        c->t->stats.open = c->t->nconns;
    }
    uv_close((uv_handle_t *)&c->h, conn_closed);
}

static void conn_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    (void)hint;
    kl_rpc_tcp_conn *c = h->data;
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

static void conn_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);
static void conn_parse_frames(kl_rpc_tcp_conn *c);

/* The client's hello: its protocol must be REQ. Then the connection counts against the
 * cap (nng closes one over the cap as soon as it is negotiated). */
static bool conn_hello(kl_rpc_tcp_conn *c)
{
    const uint8_t *b = c->buf;
    if (b[0] != 0 || b[1] != 'S' || b[2] != 'P' || b[3] != 0 || b[6] != 0 || b[7] != 0 ||
        ((unsigned)b[4] << 8 | b[5]) != TCP_PROTO_REQ)
        return false;
    kl_rpc_tcp *t = c->t;
    if (t->max_conns > 0 && t->nconns >= (size_t)t->max_conns) {
        t->stats.refused++;
        return false;
    }
    c->hello_ok = true;
    c->counted = true;
    t->nconns++;
    t->stats.open = t->nconns;
    c->last_ms = tcp_now(t);
    return true;
}

/* Moves c to the end of t->conns. Resuming visits connections in list order and stops at
 * the next pause, so the connection whose frame filled the held calls goes last: each
 * answer then admits a frame from the next connection with one waiting, round robin, and
 * one busy client (hundreds of calls in flight) cannot starve the others, such as a data
 * partition's catalog tail on partition 0. O(connections), only when the server pauses. */
static void conn_to_tail(kl_rpc_tcp *t, kl_rpc_tcp_conn *c)
{
    if (c->next == NULL)
        return;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        t->conns = c->next;
    c->next->prev = c->prev;
    kl_rpc_tcp_conn *last = c->next;
    while (last->next != NULL)
        last = last->next;
    last->next = c;
    c->prev = last;
    c->next = NULL;
}

/* Delivers one frame (body of body_len bytes at b); a frame without a complete backtrace
 * is dropped, as nng's REP drops it. */
static void conn_frame(kl_rpc_tcp_conn *c, const uint8_t *b, size_t body_len)
{
    size_t hdr = 0;
    bool end = false;
    while (!end && hdr + 4 <= body_len && hdr < KL_RPC_TCP_HDR_MAX) {
        end = (b[hdr] & 0x80) != 0;
        hdr += 4;
    }
    if (!end)
        return;
    kl_rpc_tcp *t = c->t;
    c->refs++;
    c->held++;
    c->last_ms = tcp_now(t);
    t->on_frame(t->owner, c, b, hdr, b + hdr, body_len - hdr);
}

/* Hands every complete frame in the buffer to the owner, unless paused. Not re-entered for
 * the same connection: a handler that answers may resume the server, and the frames
 * still ahead in this buffer are this call's to deliver. */
static void conn_parse(kl_rpc_tcp_conn *c)
{
    if (c->parsing)
        return;
    c->parsing = true;
    conn_parse_frames(c);
    c->parsing = false;
}

static void conn_parse_frames(kl_rpc_tcp_conn *c)
{
    size_t off = 0;
    if (!c->hello_ok) {
        if (c->len < TCP_HELLO_LEN)
            return;
        if (!conn_hello(c)) {
            conn_close(c);
            return;
        }
        off = TCP_HELLO_LEN;
    }
    while (!c->closing && c->t != NULL && !c->t->paused && !c->t->stopping) {
        if (c->len - off < TCP_LEN_PREFIX)
            break;
        uint64_t flen = kl_wire_get_u64(c->buf + off);
        if (flen > c->t->recv_max) {
            conn_close(c);
            return;
        }
        if (c->len - off - TCP_LEN_PREFIX < flen)
            break;
        conn_frame(c, c->buf + off + TCP_LEN_PREFIX, (size_t)flen);
        off += TCP_LEN_PREFIX + (size_t)flen;
        if (c->t != NULL && c->t->paused && !c->closing)
            conn_to_tail(c->t, c);
    }
    if (off > 0) {
        memmove(c->buf, c->buf + off, c->len - off);
        c->len -= off;
    }
}

/* Whether c's buffer holds a whole frame it has not delivered (its hello done). */
static bool conn_has_frame(const kl_rpc_tcp_conn *c)
{
    if (!c->hello_ok || c->len < TCP_LEN_PREFIX)
        return false;
    uint64_t flen = kl_wire_get_u64(c->buf);
    return flen > c->t->recv_max || c->len - TCP_LEN_PREFIX >= flen;
}

/* While the server is paused a connection keeps reading until it holds one whole frame,
 * then stops: so every waiting client's next request is in memory when calls are answered
 * (round robin, conn_to_tail), and memory stays bounded by one frame per connection. */
static void conn_hold_if_full(kl_rpc_tcp_conn *c)
{
    if (c->reading && !c->closing && c->t != NULL && c->t->paused && conn_has_frame(c)) {
        uv_read_stop((uv_stream_t *)&c->h);
        c->reading = false;
    }
}

static void conn_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    (void)buf;
    kl_rpc_tcp_conn *c = s->data;
    if (n < 0) {
        conn_close(c);
        return;
    }
    c->len += (size_t)n;
    conn_parse(c);
    conn_hold_if_full(c);
}

static void conn_start_reading(kl_rpc_tcp_conn *c)
{
    if (c->reading || c->closing)
        return;
    if (uv_read_start((uv_stream_t *)&c->h, conn_alloc, conn_read) == 0)
        c->reading = true;
    else
        conn_close(c);
}

static void hello_written(uv_write_t *req, int status)
{
    kl_rpc_tcp_conn *c = req->data;
    free(req);
    if (status != 0 && c->t != NULL)
        conn_close(c);
    conn_unref(c);
}

static void on_accept(uv_stream_t *server, int status)
{
    kl_rpc_tcp *t = server->data;
    if (status != 0 || t->stopping)
        return;
    kl_rpc_tcp_conn *c = calloc(1, sizeof *c);
    if (c == NULL || uv_tcp_init(t->loop, &c->h) != 0) {
        free(c);
        KL_WARN("rpc connection not accepted", "reason=memory");
        return;
    }
    c->t = t;
    c->refs = 1;
    c->h.data = c;
    c->next = t->conns;
    if (t->conns != NULL)
        t->conns->prev = c;
    t->conns = c;
    if (uv_accept(server, (uv_stream_t *)&c->h) != 0) {
        conn_close(c);
        return;
    }
    (void)uv_tcp_nodelay(&c->h, 1);
    uv_write_t *req = malloc(sizeof *req);
    uv_buf_t b = uv_buf_init((char *)tcp_hello_rep, TCP_HELLO_LEN);
    if (req == NULL) {
        conn_close(c);
        return;
    }
    req->data = c;
    c->refs++;
    if (uv_write(req, (uv_stream_t *)&c->h, &b, 1, hello_written) != 0) {
        free(req);
        c->refs--;
        conn_close(c);
        return;
    }
    c->last_ms = tcp_now(t); /* the hello's deadline counts from here */
    conn_start_reading(c); /* also while paused: conn_hold_if_full stops it at a whole frame */
}

static void answer_written(uv_write_t *req, int status)
{
    tcp_write *w = req->data;
    kl_rpc_tcp_conn *c = w->conn;
    int n = w->nframes;
    for (int i = 0; i < n; i++)
        free(w->frame[i]);
    free(w);
    if (status != 0 && c->t != NULL && status != UV_ECANCELED)
        conn_close(c);
    for (int i = 0; i < n; i++)
        conn_unref(c);
}

static void conn_release_call(kl_rpc_tcp_conn *c)
{
    if (c->held > 0)
        c->held--;
    if (c->t != NULL)
        c->last_ms = tcp_now(c->t);
}

/* Writes c's waiting answers with one writev: what the socket takes at once is done, the
 * rest goes into one queued write. A connection closed meanwhile drops them. Each frame's
 * reference is released last, so c may be freed when this returns. */
static void conn_flush(kl_rpc_tcp_conn *c)
{
    int n = c->out_n;
    if (n == 0)
        return;
    uint8_t *frame[TCP_FLUSH_FRAMES];
    uv_buf_t bufs[TCP_FLUSH_FRAMES];
    for (int i = 0; i < n; i++) {
        frame[i] = c->out_frame[i];
        bufs[i] = uv_buf_init((char *)frame[i], (unsigned)c->out_len[i]);
    }
    c->out_n = 0;
    c->out_bytes = 0;
    int released = n; /* frames whose reference is released here */
    if (c->closing || c->t == NULL)
        goto drop;
    c->t->stats.answer_writes++;
    int wrote = uv_try_write((uv_stream_t *)&c->h, bufs, (unsigned)n);
    if (wrote < 0 && wrote != UV_EAGAIN) {
        conn_close(c);
        goto drop;
    }
    size_t done = wrote > 0 ? (size_t)wrote : 0;
    int i = 0;
    while (i < n && done >= bufs[i].len) {
        done -= bufs[i].len;
        free(frame[i]);
        frame[i] = NULL;
        i++;
    }
    if (i < n) {
        tcp_write *w = malloc(sizeof *w + (size_t)(n - i) * sizeof w->frame[0]);
        if (w == NULL) {
            conn_close(c); /* a half-written frame cannot be left behind */
            goto drop;
        }
        w->conn = c;
        w->nframes = n - i;
        memcpy(w->frame, frame + i, (size_t)(n - i) * sizeof frame[0]);
        w->req.data = w;
        bufs[i].base += done;
        bufs[i].len -= done;
        if (uv_write(&w->req, (uv_stream_t *)&c->h, bufs + i, (unsigned)(n - i), answer_written) != 0) {
            free(w);
            conn_close(c);
            goto drop;
        }
        released = i; /* the rest pass to the write; answer_written releases them */
    }
    for (int k = 0; k < released; k++)
        conn_unref(c);
    return;
drop:
    for (int k = 0; k < n; k++)
        free(frame[k]);
    for (int k = 0; k < n; k++)
        conn_unref(c);
}

/* Writes every listed connection's answers. */
void kl_rpc_tcp_flush(kl_rpc_tcp *t)
{
    while (t->flush_head != NULL) {
        kl_rpc_tcp_conn *c = t->flush_head;
        t->flush_head = c->flush_next;
        if (t->flush_head == NULL)
            t->flush_tail = NULL;
        c->flush_next = NULL;
        c->flush_listed = false;
        conn_flush(c);
        conn_unref(c); /* the list's reference */
    }
}

static void flush_cb(uv_idle_t *h)
{
    kl_rpc_tcp *t = h->data;
    kl_rpc_tcp_flush(t);
    uv_idle_stop(&t->flush_idle);
    t->flush_active = false;
}

void kl_rpc_tcp_answer(kl_rpc_tcp_conn *conn, const uint8_t *hdr, size_t hdr_len,
                       uint8_t *frame, size_t frame_len)
{
    conn_release_call(conn);
    kl_rpc_tcp *t = conn->t;
    if (t == NULL || conn->closing || t->stopping) {
        free(frame);
        conn_unref(conn);
        return;
    }
    kl_wire_put_u64(frame, frame_len - TCP_LEN_PREFIX);
    memcpy(frame + TCP_LEN_PREFIX, hdr, hdr_len);
    t->stats.answers++;
    if (conn->h.write_queue_size + conn->out_bytes > TCP_WRITE_BACKLOG_MAX + t->recv_max) {
        free(frame);
        conn_close(conn);
        conn_unref(conn);
        return;
    }
    if (conn->out_n == TCP_FLUSH_FRAMES)
        conn_flush(conn); /* the open handle's reference keeps conn */
    if (conn->closing) {
        free(frame);
        conn_unref(conn);
        return;
    }
    /* The call's reference passes to the waiting frame. */
    conn->out_frame[conn->out_n] = frame;
    conn->out_len[conn->out_n] = frame_len;
    conn->out_n++;
    conn->out_bytes += frame_len;
    if (!conn->flush_listed) {
        conn->flush_listed = true;
        conn->refs++;
        if (t->flush_tail != NULL)
            t->flush_tail->flush_next = conn;
        else
            t->flush_head = conn;
        t->flush_tail = conn;
    }
    if (!t->flush_active && t->flush_on) {
        t->flush_active = true;
        uv_idle_start(&t->flush_idle, flush_cb);
    } else if (!t->flush_on) {
        kl_rpc_tcp_flush(t); /* no flush handle: every answer goes out at once */
    }
}

void kl_rpc_tcp_drop(kl_rpc_tcp_conn *conn)
{
    conn_release_call(conn);
    conn_unref(conn);
}

void kl_rpc_tcp_pause(kl_rpc_tcp *t)
{
    if (t->paused)
        return;
    t->paused = true;
    for (kl_rpc_tcp_conn *c = t->conns; c != NULL; c = c->next)
        conn_hold_if_full(c);
}

void kl_rpc_tcp_resume(kl_rpc_tcp *t)
{
    if (!t->paused || t->stopping)
        return;
    t->paused = false;
    kl_rpc_tcp_conn *c = t->conns;
    while (c != NULL && !t->paused) {
        kl_rpc_tcp_conn *next = c->next; /* parsing may close c (it stays listed until closed) */
        if (!c->closing) {
            conn_parse(c);
            if (!t->paused || !conn_has_frame(c))
                conn_start_reading(c);
        }
        c = next;
    }
}

bool kl_rpc_tcp_paused(const kl_rpc_tcp *t) { return t->paused; }

void kl_rpc_tcp_stats_get(const kl_rpc_tcp *t, kl_rpc_tcp_stats *out) { *out = t->stats; }

/* Closes connections that never said hello, and idle ones when idle_ms is set. */
static void idle_cb(uv_timer_t *timer)
{
    kl_rpc_tcp *t = timer->data;
    int64_t now = tcp_now(t);
    for (kl_rpc_tcp_conn *c = t->conns; c != NULL; c = c->next) {
        if (c->closing)
            continue;
        if (!c->hello_ok) {
            if (now - c->last_ms >= TCP_HELLO_TIMEOUT_MS)
                conn_close(c);
        } else if (t->idle_ms > 0 && c->held == 0 && now - c->last_ms >= t->idle_ms) {
            t->stats.idle_closed++;
            conn_close(c);
        }
    }
}

static void handle_closed(uv_handle_t *h)
{
    kl_rpc_tcp *t = h->data;
    t->handles_open--;
    tcp_maybe_done(t);
}

kl_code kl_rpc_tcp_start(uv_loop_t *loop, const kl_rpc_tcp_config *cfg, kl_rpc_tcp **out,
                         kl_err *err)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t ss_len;
    if (!kl_tcp_url_parse(cfg->url, true, &ss, &ss_len))
        return kl_fail(err, KL_INVALID_ARGUMENT, "listen_url",
                       "rpc server: %s is not a numeric tcp address", cfg->url);
    kl_rpc_tcp *t = calloc(1, sizeof *t);
    if (t == NULL)
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory", "rpc server: out of memory");
    t->loop = loop;
    t->recv_max = cfg->recv_max;
    t->max_conns = cfg->max_conns > 0 ? cfg->max_conns : 0;
    t->idle_ms = cfg->idle_ms > 0 ? cfg->idle_ms : 0;
    t->on_frame = cfg->on_frame;
    t->owner = cfg->owner;
    int rv = uv_tcp_init(loop, &t->listener);
    if (rv != 0) {
        free(t);
        return kl_fail(err, KL_INTERNAL, "loop", "rpc server: uv_tcp_init failed: %s",
                       uv_strerror(rv));
    }
    t->listener.data = t;
    t->handles_open = 1;
    if ((rv = uv_tcp_bind(&t->listener, (const struct sockaddr *)&ss, 0)) != 0 ||
        (rv = uv_listen((uv_stream_t *)&t->listener, 1024, on_accept)) != 0) {
        kl_code code = rv == UV_EINVAL || rv == UV_EAFNOSUPPORT ? KL_INVALID_ARGUMENT
                                                                 : KL_UNAVAILABLE;
        kl_fail(err, code, "listen_url", "rpc server: listen on %s failed: %s", cfg->url,
                uv_strerror(rv));
        t->stopping = true;
        uv_close((uv_handle_t *)&t->listener, handle_closed); /* frees t once closed */
        return code;
    }
    if (uv_idle_init(loop, &t->flush_idle) == 0) {
        t->flush_idle.data = t;
        t->flush_on = true;
        t->handles_open++;
    }
    if (uv_timer_init(loop, &t->idle_timer) == 0) {
        uint64_t every = TCP_TIMER_MS;
        if (t->idle_ms > 0 && t->idle_ms / 4 < (int)every)
            every = (uint64_t)(t->idle_ms / 4 > 20 ? t->idle_ms / 4 : 20);
        t->idle_timer.data = t;
        t->idle_on = true;
        t->handles_open++;
        uv_timer_start(&t->idle_timer, idle_cb, every, every);
    }
    *out = t;
    return KL_OK;
}

void kl_rpc_tcp_stop(kl_rpc_tcp *t, void (*done)(void *arg), void *arg)
{
    if (t == NULL || t->stopping)
        return;
    t->stopping = true;
    t->done = done;
    t->done_arg = arg;
    kl_rpc_tcp_flush(t); /* answers given before the stop still go out if the socket takes them */
    if (t->flush_on)
        uv_close((uv_handle_t *)&t->flush_idle, handle_closed);
    for (kl_rpc_tcp_conn *c = t->conns; c != NULL; c = c->next)
        conn_close(c);
    if (t->idle_on)
        uv_close((uv_handle_t *)&t->idle_timer, handle_closed);
    uv_close((uv_handle_t *)&t->listener, handle_closed);
}
