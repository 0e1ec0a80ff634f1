/* rpc_direct: see rpc_direct.h. Everything below runs under g.mu except the epoll wait and
 * the done callbacks. */
#include "common/rpc_direct.h"
#include "common/clock.h"
#include "common/deadline.h"
#include "common/tcp_url.h"
#include "common/wire.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define DIRECT_HELLO_LEN 8
#define DIRECT_LEN_PREFIX 8
#define DIRECT_ID_LEN 4
#define DIRECT_PROTO_REQ 0x30
#define DIRECT_PROTO_REP 0x31
/* One connection attempt's bound: a peer that drops SYNs (a partitioned host) is retried. */
#define DIRECT_CONNECT_MS 5000
#define DIRECT_BACKOFF_MIN_MS 50
#define DIRECT_BACKOFF_MAX_MS 1000
#define DIRECT_EVENTS 64
#define DIRECT_NEVER INT64_MAX
#define DIRECT_FLUSH_IOV 32 /* frames per sendmsg at most */

enum { REQ_IDLE, REQ_PENDING, REQ_SENT, REQ_SLEEP, REQ_DONE };
enum { C_DOWN, C_CONNECTING, C_HELLO, C_READY };

struct kl_rpc_direct {
    struct sockaddr_storage addr;
    socklen_t addr_len;
    size_t recv_max;
    int fd;
    int state;
    uint32_t ep_mask;
    size_t hello_sent, hello_got;
    uint8_t hello_in[DIRECT_HELLO_LEN];
    int64_t connect_by, retry_at;
    int backoff_ms;
    int last_err;
    bool attempt_ended; /* the latest attempt connected or failed (what open waits for) */
    bool closed;
    uint8_t *rbuf;
    size_t rlen, rcap;
    uint8_t *tail; /* the unwritten rest of a frame whose request ended early */
    size_t tail_len, tail_off;
    kl_rpc_direct_req *pend_head, *pend_tail; /* write order; only the head may be partial */
    kl_rpc_direct_req *sent_head, *sent_tail;
    /* On g.owed: a corked start left its requests for kl_rpc_direct_uncork. */
    bool flush_owed;
    kl_rpc_direct *owed_next, *owed_prev;
    size_t open_reqs;
    uint32_t next_id;
    kl_rpc_direct *cnext, *cprev;
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC: a connection attempt ended, a callback returned */
    int ep, ev;
    int start_err;
    kl_rpc_direct *conns;
    kl_rpc_direct *owed; /* exactly the connections with flush_owed: what an uncork writes */
    kl_rpc_direct *graveyard; /* closed, freed by the I/O thread after its current events */
    kl_rpc_direct_req *done_head, *done_tail;
    kl_rpc_direct_req *sleep_head, *sleep_tail;
    kl_rpc_direct_req *in_cb;
    int64_t next_due; /* the earliest deadline, retry or connect bound; DIRECT_NEVER */
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .ep = -1, .ev = -1, .next_due = DIRECT_NEVER};
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Atomic bool g_used; /* io_start ran: before it no request can have started */

static int64_t mono_ms(void)
{
    return kl_clock_ms(CLOCK_MONOTONIC);
}

static void wake_io(void)
{
    uint64_t one = 1;
    ssize_t n = write(g.ev, &one, sizeof one);
    (void)n; /* a full counter already means "wake" */
}

static void due_at(int64_t t)
{
    if (t < g.next_due) {
        g.next_due = t;
        wake_io();
    }
}

/* ------------------------------------------------------------------ request lists */

static void list_push(kl_rpc_direct_req **head, kl_rpc_direct_req **tail, kl_rpc_direct_req *r)
{
    r->next = NULL;
    r->prev = *tail;
    if (*tail != NULL)
        (*tail)->next = r;
    else
        *head = r;
    *tail = r;
}

static void list_unlink(kl_rpc_direct_req **head, kl_rpc_direct_req **tail, kl_rpc_direct_req *r)
{
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        *head = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    else
        *tail = r->prev;
    r->next = r->prev = NULL;
}

/* Takes r off its connection and queues its done with this outcome. */
static void req_complete(kl_rpc_direct_req *r, int outcome, int sys_err)
{
    kl_rpc_direct *c = r->conn;
    if (r->state == REQ_PENDING)
        list_unlink(&c->pend_head, &c->pend_tail, r);
    else if (r->state == REQ_SENT)
        list_unlink(&c->sent_head, &c->sent_tail, r);
    else if (r->state == REQ_SLEEP)
        list_unlink(&g.sleep_head, &g.sleep_tail, r);
    if (c != NULL)
        c->open_reqs--;
    free(r->frame);
    r->frame = NULL;
    r->conn = NULL;
    r->outcome = outcome;
    r->sys_err = sys_err;
    r->state = REQ_DONE;
    r->next = NULL;
    if (g.done_tail != NULL)
        g.done_tail->next = r;
    else
        g.done_head = r;
    g.done_tail = r;
}

/* A partially written head ends early: its rest must still go out, or the stream breaks. */
static void req_keep_tail(kl_rpc_direct *c, kl_rpc_direct_req *r)
{
    /* Only the head is ever partial, and it starts only once an earlier tail is out: a
     * second tail would interleave two frames' bytes on the stream. */
    assert(c->tail == NULL && r == c->pend_head);
    size_t rest = r->frame_len - r->written;
    memmove(r->frame, r->frame + r->written, rest);
    c->tail = r->frame;
    c->tail_len = rest;
    c->tail_off = 0;
    r->frame = NULL;
}

/* ------------------------------------------------------------------ connection */

static void ep_set(kl_rpc_direct *c, uint32_t mask)
{
    if (c->fd < 0 || c->ep_mask == mask)
        return;
    struct epoll_event e = {.events = mask, .data.ptr = c};
    if (epoll_ctl(g.ep, EPOLL_CTL_MOD, c->fd, &e) == 0)
        c->ep_mask = mask;
}

static void conn_down(kl_rpc_direct *c, int why)
{
    if (c->fd >= 0)
        close(c->fd); /* also leaves the epoll set */
    c->fd = -1;
    c->ep_mask = 0;
    c->state = C_DOWN;
    c->last_err = why != 0 ? why : ECONNRESET;
    c->attempt_ended = true;
    free(c->tail);
    c->tail = NULL;
    c->tail_len = c->tail_off = 0;
    c->rlen = 0;
    while (c->sent_head != NULL)
        req_complete(c->sent_head, KL_RPC_DIRECT_LOST, c->last_err);
    if (c->pend_head != NULL && c->pend_head->written > 0)
        req_complete(c->pend_head, KL_RPC_DIRECT_LOST, c->last_err);
    c->retry_at = mono_ms() + c->backoff_ms;
    c->backoff_ms = c->backoff_ms * 2 > DIRECT_BACKOFF_MAX_MS ? DIRECT_BACKOFF_MAX_MS : c->backoff_ms * 2;
    if (c->pend_head != NULL)
        due_at(c->retry_at);
    pthread_cond_broadcast(&g.cv);
}

/* A pending request written whole: it waits for its answer now. */
static void req_written(kl_rpc_direct *c, kl_rpc_direct_req *r)
{
    list_unlink(&c->pend_head, &c->pend_tail, r);
    free(r->frame);
    r->frame = NULL;
    r->state = REQ_SENT;
    list_push(&c->sent_head, &c->sent_tail, r);
}

/* g.owed, under g.mu. */
static void owed_unlink(kl_rpc_direct *c)
{
    if (!c->flush_owed)
        return;
    if (c->owed_prev != NULL)
        c->owed_prev->owed_next = c->owed_next;
    else
        g.owed = c->owed_next;
    if (c->owed_next != NULL)
        c->owed_next->owed_prev = c->owed_prev;
    c->owed_next = c->owed_prev = NULL;
    c->flush_owed = false;
}

static void owed_link(kl_rpc_direct *c)
{
    if (c->flush_owed)
        return;
    c->flush_owed = true;
    c->owed_prev = NULL;
    c->owed_next = g.owed;
    if (g.owed != NULL)
        g.owed->owed_prev = c;
    g.owed = c;
}

/* Writes the tail, then pending frames in order, until the socket is full: up to
 * DIRECT_FLUSH_IOV of them per sendmsg, so requests started together (a corked pass, or
 * frames queued behind a full socket) cost one system call and, on loopback, one segment
 * for the server to read, not one each. */
static void conn_flush(kl_rpc_direct *c)
{
    if (c->state != C_READY)
        return;
    owed_unlink(c);
    for (;;) {
        struct iovec iov[DIRECT_FLUSH_IOV];
        kl_rpc_direct_req *rs[DIRECT_FLUSH_IOV];
        int n = 0;
        if (c->tail != NULL) {
            iov[n] = (struct iovec){c->tail + c->tail_off, c->tail_len - c->tail_off};
            rs[n++] = NULL;
        }
        for (kl_rpc_direct_req *r = c->pend_head; r != NULL && n < DIRECT_FLUSH_IOV; r = r->next) {
            iov[n] = (struct iovec){r->frame + r->written, r->frame_len - r->written};
            rs[n++] = r;
        }
        if (n == 0) {
            ep_set(c, EPOLLIN);
            return;
        }
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                ep_set(c, EPOLLIN | EPOLLOUT);
                return;
            }
            conn_down(c, errno);
            return;
        }
        /* Bytes went out in iov order: whole frames first, then at most one partly. */
        size_t left = (size_t)w;
        for (int i = 0; i < n && left > 0; i++) {
            size_t take = left < iov[i].iov_len ? left : iov[i].iov_len;
            left -= take;
            if (rs[i] == NULL) {
                c->tail_off += take;
                if (c->tail_off == c->tail_len) {
                    free(c->tail);
                    c->tail = NULL;
                    c->tail_len = c->tail_off = 0;
                }
            } else {
                rs[i]->written += take;
                if (rs[i]->written == rs[i]->frame_len)
                    req_written(c, rs[i]);
            }
        }
    }
}

/* Requests started by this thread while corked wait for kl_rpc_direct_uncork; their
 * connections go on g.owed, so an uncork costs the connections it writes, not every
 * connection of the process. */
static _Thread_local int cork_depth;

void kl_rpc_direct_cork(void)
{
    cork_depth++;
}

/* Writes every owed connection's held requests. Under g.mu. */
static void owed_flush(void)
{
    while (g.owed != NULL) {
        kl_rpc_direct *c = g.owed;
        owed_unlink(c);
        conn_flush(c); /* in order after whatever is still queued; nothing when not ready */
    }
}

void kl_rpc_direct_uncork(void)
{
    assert(cork_depth > 0);
    if (--cork_depth > 0)
        return;
    pthread_mutex_lock(&g.mu);
    owed_flush();
    pthread_mutex_unlock(&g.mu);
}

static void conn_connect(kl_rpc_direct *c)
{
    c->attempt_ended = false;
    int fd = socket(c->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        conn_down(c, errno);
        return;
    }
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->fd = fd;
    c->hello_sent = c->hello_got = 0;
    c->state = C_CONNECTING;
    c->connect_by = mono_ms() + DIRECT_CONNECT_MS;
    struct epoll_event e = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
    if (epoll_ctl(g.ep, EPOLL_CTL_ADD, fd, &e) != 0) {
        conn_down(c, errno);
        return;
    }
    c->ep_mask = e.events;
    if (connect(fd, (const struct sockaddr *)&c->addr, c->addr_len) != 0 && errno != EINPROGRESS) {
        conn_down(c, errno);
        return;
    }
    due_at(c->connect_by);
}

static void conn_send_hello(kl_rpc_direct *c)
{
    static const uint8_t hello[DIRECT_HELLO_LEN] = {0, 'S', 'P', 0, 0, DIRECT_PROTO_REQ, 0, 0};
    while (c->hello_sent < DIRECT_HELLO_LEN) {
        ssize_t n = send(c->fd, hello + c->hello_sent, DIRECT_HELLO_LEN - c->hello_sent,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            ep_set(c, EPOLLIN | EPOLLOUT);
            return;
        }
        if (n < 0) {
            conn_down(c, errno);
            return;
        }
        c->hello_sent += (size_t)n;
    }
    ep_set(c, EPOLLIN);
}

/* The socket became writable while connecting: the attempt's result. */
static void conn_connected(kl_rpc_direct *c)
{
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
        soerr = errno;
    if (soerr != 0) {
        conn_down(c, soerr);
        return;
    }
    c->state = C_HELLO;
    conn_send_hello(c);
}

/* One whole answer frame (body: id, Answer bytes). An unknown id is an answer to a request
 * that already ended (timed out, cancelled): dropped. */
static void conn_answer(kl_rpc_direct *c, const uint8_t *body, size_t len)
{
    if (len < DIRECT_ID_LEN)
        return;
    uint32_t id = (uint32_t)body[0] << 24 | (uint32_t)body[1] << 16 | (uint32_t)body[2] << 8 | body[3];
    for (kl_rpc_direct_req *r = c->sent_head; r != NULL; r = r->next) {
        if (r->id != id)
            continue;
        size_t n = len - DIRECT_ID_LEN;
        uint8_t *copy = malloc(n > 0 ? n : 1);
        if (copy == NULL) {
            req_complete(r, KL_RPC_DIRECT_LOST, ENOMEM);
            return;
        }
        memcpy(copy, body + DIRECT_ID_LEN, n);
        r->reply = copy;
        r->reply_len = n;
        req_complete(r, KL_RPC_DIRECT_ANSWERED, 0);
        return;
    }
}

/* Reads what the socket has, up to cap: > 0 bytes read, 0 nothing now, < 0 the connection
 * is down (handled: its requests are completed). */
static ssize_t conn_recv(kl_rpc_direct *c, uint8_t *buf, size_t cap)
{
    for (;;) {
        ssize_t n = recv(c->fd, buf, cap, MSG_DONTWAIT);
        if (n > 0)
            return n;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        conn_down(c, n == 0 ? ECONNRESET : errno);
        return -1;
    }
}

static void conn_readable(kl_rpc_direct *c)
{
    while (c->state == C_HELLO && c->hello_got < DIRECT_HELLO_LEN) {
        ssize_t n = conn_recv(c, c->hello_in + c->hello_got, DIRECT_HELLO_LEN - c->hello_got);
        if (n <= 0)
            return;
        c->hello_got += (size_t)n;
        if (c->hello_got < DIRECT_HELLO_LEN)
            continue;
        static const uint8_t want[DIRECT_HELLO_LEN] = {0, 'S', 'P', 0, 0, DIRECT_PROTO_REP, 0, 0};
        if (memcmp(c->hello_in, want, DIRECT_HELLO_LEN) != 0 || c->hello_sent < DIRECT_HELLO_LEN) {
            conn_down(c, EPROTO);
            return;
        }
        c->state = C_READY;
        c->backoff_ms = DIRECT_BACKOFF_MIN_MS;
        c->attempt_ended = true;
        pthread_cond_broadcast(&g.cv);
        conn_flush(c);
    }
    if (c->state != C_READY)
        return;
    for (;;) {
        if (c->rcap - c->rlen < 4096) {
            size_t cap = c->rcap ? c->rcap * 2 : 65536;
            uint8_t *nb = realloc(c->rbuf, cap);
            if (nb == NULL) {
                conn_down(c, ENOMEM);
                return;
            }
            c->rbuf = nb;
            c->rcap = cap;
        }
        ssize_t n = conn_recv(c, c->rbuf + c->rlen, c->rcap - c->rlen);
        if (n <= 0)
            return;
        c->rlen += (size_t)n;
        size_t off = 0;
        while (c->rlen - off >= DIRECT_LEN_PREFIX) {
            uint64_t flen = kl_wire_get_u64(c->rbuf + off);
            if (flen > c->recv_max) {
                conn_down(c, EMSGSIZE);
                return;
            }
            if (c->rlen - off - DIRECT_LEN_PREFIX < flen) {
                size_t need = DIRECT_LEN_PREFIX + (size_t)flen;
                if (need > c->rcap && off == 0) {
                    uint8_t *nb = realloc(c->rbuf, need);
                    if (nb == NULL) {
                        conn_down(c, ENOMEM);
                        return;
                    }
                    c->rbuf = nb;
                    c->rcap = need;
                }
                break;
            }
            conn_answer(c, c->rbuf + off + DIRECT_LEN_PREFIX, (size_t)flen);
            off += DIRECT_LEN_PREFIX + (size_t)flen;
        }
        if (off > 0) {
            memmove(c->rbuf, c->rbuf + off, c->rlen - off);
            c->rlen -= off;
        }
    }
}

static void conn_event(kl_rpc_direct *c, uint32_t ev)
{
    if (c->closed || c->fd < 0)
        return;
    if (c->state == C_CONNECTING) {
        if (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))
            conn_connected(c);
        return;
    }
    if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP))
        conn_readable(c);
    if (c->fd >= 0 && (ev & EPOLLOUT)) {
        if (c->state == C_HELLO)
            conn_send_hello(c);
        else
            conn_flush(c);
    }
}

/* Expires what is due and computes the next due time. O(open requests). */
static void scan(int64_t now)
{
    int64_t next = DIRECT_NEVER;
    kl_rpc_direct_req *s, *sn;
    for (s = g.sleep_head; s != NULL; s = sn) {
        sn = s->next;
        if (now >= s->answer_by)
            req_complete(s, KL_RPC_DIRECT_SLEPT, 0);
        else if (s->answer_by < next)
            next = s->answer_by;
    }
    for (kl_rpc_direct *c = g.conns; c != NULL; c = c->cnext) {
        if (c->state == C_CONNECTING || c->state == C_HELLO) {
            if (now >= c->connect_by)
                conn_down(c, ETIMEDOUT);
            else if (c->connect_by < next)
                next = c->connect_by;
        }
        kl_rpc_direct_req *r, *rn;
        for (r = c->sent_head; r != NULL; r = rn) {
            rn = r->next;
            if (now >= r->answer_by)
                req_complete(r, KL_RPC_DIRECT_TIMEOUT, 0);
            else if (r->answer_by < next)
                next = r->answer_by;
        }
        for (r = c->pend_head; r != NULL; r = rn) {
            rn = r->next;
            if (r->written == 0 && now >= r->send_by) {
                req_complete(r, KL_RPC_DIRECT_NOT_SENT_TIMEOUT, c->state == C_READY ? 0 : c->last_err);
            } else if (r->written > 0 && now >= r->answer_by) {
                req_keep_tail(c, r);
                req_complete(r, KL_RPC_DIRECT_TIMEOUT, 0);
            } else {
                int64_t t = r->written == 0 ? r->send_by : r->answer_by;
                if (t < next)
                    next = t;
            }
        }
        if (c->state == C_DOWN && c->pend_head != NULL) {
            if (now >= c->retry_at) {
                conn_connect(c);
                if (c->state != C_DOWN && c->connect_by < next)
                    next = c->connect_by;
            }
            if (c->state == C_DOWN && c->retry_at < next)
                next = c->retry_at;
        }
    }
    g.next_due = next;
}

/* The I/O thread's batch of done callbacks, under g.mu (released around each). The
 * requests they start (a call's next attempt, the next step of a chained call) are held as
 * a corked caller's are and written when the batch ends: one sendmsg per connection per
 * batch of answers, not one per request (the coordinator's I/O thread spent 18% of its
 * samples in sendmsg starting them one by one). Callbacks never wait, so holding them
 * delays those writes by the rest of the batch only. */
static void run_callbacks(void)
{
    if (g.done_head == NULL)
        return;
    cork_depth++;
    kl_rpc_direct_req *r;
    while ((r = g.done_head) != NULL) {
        g.done_head = r->next;
        if (g.done_head == NULL)
            g.done_tail = NULL;
        r->next = NULL;
        r->state = REQ_IDLE;
        g.in_cb = r;
        void (*done)(void *) = r->done;
        void *arg = r->arg;
        pthread_mutex_unlock(&g.mu);
        done(arg); /* may start r again or free it (not both: see kl_rpc_direct_stop) */
        pthread_mutex_lock(&g.mu);
        g.in_cb = NULL;
        pthread_cond_broadcast(&g.cv);
    }
    if (--cork_depth == 0)
        owed_flush();
}

static void *io_main(void *arg)
{
    (void)arg;
    struct epoll_event evs[DIRECT_EVENTS];
    pthread_mutex_lock(&g.mu);
    for (;;) {
        int64_t now = mono_ms();
        int timeout = -1;
        if (g.next_due != DIRECT_NEVER)
            timeout = g.next_due <= now ? 0 : g.next_due - now > 60000 ? 60000 : (int)(g.next_due - now);
        pthread_mutex_unlock(&g.mu);
        int n = epoll_wait(g.ep, evs, DIRECT_EVENTS, timeout);
        pthread_mutex_lock(&g.mu);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == NULL) {
                uint64_t v;
                ssize_t rn = read(g.ev, &v, sizeof v);
                (void)rn;
                continue;
            }
            conn_event(evs[i].data.ptr, evs[i].events);
        }
        /* Events of this round may name a connection closed meanwhile: free only now. */
        while (g.graveyard != NULL) {
            kl_rpc_direct *c = g.graveyard;
            g.graveyard = c->cnext;
            free(c->rbuf);
            free(c->tail);
            free(c);
        }
        if (mono_ms() >= g.next_due)
            scan(mono_ms());
        run_callbacks();
    }
    return NULL;
}

static void io_start(void)
{
    g_used = true;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&g.cv, &attr);
    pthread_condattr_destroy(&attr);
    g.ep = epoll_create1(EPOLL_CLOEXEC);
    g.ev = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (g.ep < 0 || g.ev < 0) {
        g.start_err = errno;
        return;
    }
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = NULL};
    pthread_attr_t ta;
    pthread_t th;
    if (epoll_ctl(g.ep, EPOLL_CTL_ADD, g.ev, &e) != 0) {
        g.start_err = errno;
        return;
    }
    pthread_attr_init(&ta);
    pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
    int rv = pthread_create(&th, &ta, io_main, NULL);
    pthread_attr_destroy(&ta);
    if (rv != 0) {
        g.start_err = rv;
        return;
    }
    pthread_setname_np(th, "kl:rpc-io");
}

/* ------------------------------------------------------------------ public */

bool kl_rpc_direct_handles(const char *url)
{
    struct sockaddr_storage ss;
    socklen_t len;
    return kl_tcp_url_parse(url, false, &ss, &len);
}

kl_code kl_rpc_direct_open(const char *url, int connect_timeout_ms, size_t recv_max,
                           kl_rpc_direct **out, kl_err *err)
{
    *out = NULL;
    kl_rpc_direct *c = calloc(1, sizeof *c);
    if (c == NULL)
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory", "rpc client: out of memory");
    if (!kl_tcp_url_parse(url, false, &c->addr, &c->addr_len)) {
        free(c);
        return kl_fail(err, KL_INVALID_ARGUMENT, "url", "rpc: %s is not tcp://ADDRESS:PORT", url);
    }
    pthread_once(&g_once, io_start);
    if (g.start_err != 0) {
        free(c);
        return kl_fail(err, KL_INTERNAL, "thread", "rpc: the client I/O thread did not start: %s",
                       strerror(g.start_err));
    }
    c->fd = -1;
    c->recv_max = recv_max;
    c->backoff_ms = DIRECT_BACKOFF_MIN_MS;
    c->next_id = (uint32_t)mono_ms();
    pthread_mutex_lock(&g.mu);
    c->cnext = g.conns;
    if (g.conns != NULL)
        g.conns->cprev = c;
    g.conns = c;
    conn_connect(c);
    if (connect_timeout_ms >= 0) {
        struct timespec until;
        kl_deadline_after_ms(&until, connect_timeout_ms);
        while (c->state != C_READY && !(c->state == C_DOWN && c->attempt_ended)) {
            int rv = connect_timeout_ms > 0 ? pthread_cond_timedwait(&g.cv, &g.mu, &until)
                                            : pthread_cond_wait(&g.cv, &g.mu);
            if (rv == ETIMEDOUT)
                break;
        }
        if (c->state != C_READY) {
            bool timed_out = c->state != C_DOWN;
            int why = c->last_err;
            pthread_mutex_unlock(&g.mu);
            kl_rpc_direct_close(c);
            if (timed_out)
                return kl_fail(err, KL_UNAVAILABLE, "connect", "rpc: could not connect to %s within %d ms",
                               url, connect_timeout_ms);
            return kl_fail(err, KL_UNAVAILABLE, "connect", "rpc: connecting to %s failed: %s", url,
                           strerror(why));
        }
    }
    pthread_mutex_unlock(&g.mu);
    *out = c;
    return KL_OK;
}

void kl_rpc_direct_close(kl_rpc_direct *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&g.mu);
    c->closed = true;
    while (c->sent_head != NULL)
        req_complete(c->sent_head, KL_RPC_DIRECT_LOST, ECONNABORTED);
    while (c->pend_head != NULL)
        req_complete(c->pend_head, c->pend_head->written > 0 ? KL_RPC_DIRECT_LOST : KL_RPC_DIRECT_NOT_SENT_CLOSED,
                     ECONNABORTED);
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    owed_unlink(c); /* the graveyard's memory goes on the I/O thread: off every list first */
    if (c->cprev != NULL)
        c->cprev->cnext = c->cnext;
    else
        g.conns = c->cnext;
    if (c->cnext != NULL)
        c->cnext->cprev = c->cprev;
    c->cnext = g.graveyard;
    g.graveyard = c;
    wake_io();
    pthread_mutex_unlock(&g.mu);
}

kl_code kl_rpc_direct_start(kl_rpc_direct *c, kl_rpc_direct_req *r, const uint8_t *body,
                            size_t len, int send_timeout_ms, int answer_timeout_ms, kl_err *err)
{
    size_t flen = DIRECT_LEN_PREFIX + DIRECT_ID_LEN + len;
    uint8_t *frame = malloc(flen);
    if (frame == NULL)
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory", "rpc: out of memory for a %zu-byte request", len);
    kl_wire_put_u64(frame, DIRECT_ID_LEN + len);
    memcpy(frame + DIRECT_LEN_PREFIX + DIRECT_ID_LEN, body, len);
    pthread_mutex_lock(&g.mu);
    if (r->stopped || c->closed) {
        pthread_mutex_unlock(&g.mu);
        free(frame);
        return kl_fail(err, KL_UNAVAILABLE, "cancelled", "rpc: the call was stopped before it was sent");
    }
    if (c->open_reqs >= KL_RPC_DIRECT_MAX_REQUESTS) {
        pthread_mutex_unlock(&g.mu);
        free(frame);
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "client_requests",
                       "rpc: %d requests are already open on this connection (the limit); retry later",
                       KL_RPC_DIRECT_MAX_REQUESTS);
    }
    uint32_t id = (c->next_id++ & 0x7fffffffu) | 0x80000000u;
    frame[8] = (uint8_t)(id >> 24);
    frame[9] = (uint8_t)(id >> 16);
    frame[10] = (uint8_t)(id >> 8);
    frame[11] = (uint8_t)id;
    int64_t now = mono_ms();
    r->conn = c;
    r->frame = frame;
    r->frame_len = flen;
    r->written = 0;
    r->id = id;
    r->outcome = 0;
    r->sys_err = 0;
    r->reply = NULL;
    r->reply_len = 0;
    r->send_by = now + send_timeout_ms;
    r->answer_by = now + answer_timeout_ms;
    r->state = REQ_PENDING;
    list_push(&c->pend_head, &c->pend_tail, r);
    c->open_reqs++;
    if (c->state == C_READY && c->tail == NULL && c->pend_head == r) {
        if (cork_depth > 0)
            owed_link(c); /* written with the others at kl_rpc_direct_uncork */
        else
            conn_flush(c); /* the caller writes: no hand-off to another thread */
    } else if (c->state == C_DOWN && now >= c->retry_at)
        conn_connect(c);
    else if (c->state == C_DOWN)
        due_at(c->retry_at);
    due_at(r->state == REQ_PENDING && r->written == 0 ? r->send_by : r->answer_by);
    if (g.done_head != NULL)
        wake_io();
    pthread_mutex_unlock(&g.mu);
    return KL_OK;
}

static void cancel_locked(kl_rpc_direct_req *r)
{
    if (r->state == REQ_PENDING && r->written == 0) {
        req_complete(r, KL_RPC_DIRECT_NOT_SENT_CANCELLED, 0);
    } else if (r->state == REQ_PENDING) {
        req_keep_tail(r->conn, r);
        req_complete(r, KL_RPC_DIRECT_CANCELLED, 0);
    } else if (r->state == REQ_SENT) {
        req_complete(r, KL_RPC_DIRECT_CANCELLED, 0);
    } else if (r->state == REQ_SLEEP) {
        req_complete(r, KL_RPC_DIRECT_SLEPT, 0);
    } else {
        return;
    }
    wake_io();
}

void kl_rpc_direct_cancel(kl_rpc_direct_req *r)
{
    pthread_mutex_lock(&g.mu);
    cancel_locked(r);
    pthread_mutex_unlock(&g.mu);
}

void kl_rpc_direct_stop(kl_rpc_direct_req *r)
{
    if (!g_used) { /* no client ever opened: nothing can be in flight */
        r->stopped = true;
        return;
    }
    pthread_mutex_lock(&g.mu);
    r->stopped = true;
    cancel_locked(r);
    while (r->state != REQ_IDLE || g.in_cb == r)
        pthread_cond_wait(&g.cv, &g.mu);
    pthread_mutex_unlock(&g.mu);
}

kl_code kl_rpc_direct_sleep(kl_rpc_direct_req *r, int ms, kl_err *err)
{
    pthread_once(&g_once, io_start);
    if (g.start_err != 0)
        return kl_fail(err, KL_INTERNAL, "thread", "rpc: the client I/O thread did not start: %s",
                       strerror(g.start_err));
    pthread_mutex_lock(&g.mu);
    r->conn = NULL;
    r->outcome = 0;
    r->sys_err = 0;
    r->reply = NULL;
    r->reply_len = 0;
    r->answer_by = mono_ms() + (ms > 0 ? ms : 0);
    r->state = REQ_SLEEP;
    list_push(&g.sleep_head, &g.sleep_tail, r);
    if (r->stopped)
        req_complete(r, KL_RPC_DIRECT_SLEPT, 0);
    due_at(r->answer_by);
    if (g.done_head != NULL)
        wake_io();
    pthread_mutex_unlock(&g.mu);
    return KL_OK;
}
