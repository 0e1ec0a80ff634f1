/* rpc: request/answer over nng REQ/REP (see rpc.h, ARCHITECTURE.md "Processes", "Sessions and RPC").
 *
 * Server threading. Each of the server's `contexts` slots owns one nng context and one
 * aio and cycles RECV -> QUEUED -> HELD -> SEND -> RECV. The aio callback runs on an nng
 * thread; it only moves a received frame into the inbox (a mutex-protected list) and
 * wakes the loop with uv_async_send. Decoding, method lookup and handlers run on the
 * loop thread. The inbox is bounded by construction: a slot is in it at most once, so it
 * never holds more than `contexts` frames, and a slot whose call is held by a handler
 * receives nothing new (nng's REP context must answer on the context that received).
 *
 * Transport. A tcp:// URL with a numeric address is served by common/rpc_tcp.c on the loop
 * itself (no slots, no nng socket): frames go straight from the socket to dispatch and
 * answers straight back, and `contexts` bounds the calls held at once by pausing its
 * reading. Other URLs (host names, ipc://, inproc://) use the nng REP socket and slots.
 *
 * Server shutdown. kl_rpc_server_stop sets `stopping`, waits out every nng callback
 * (nng_aio_stop), closes the socket, drops undecoded frames and closes the uv_async
 * handle. The server memory stays alive while calls are still held by handlers: it is
 * counted by outstanding calls and freed by the last of (the async close callback, the
 * last answer). An answer given after stop frees its call without sending anything, so
 * a handler that answers late never touches a closed socket. */
#include "common/rpc.h"

#include "common/clock.h"
#include "common/deadline.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/rpc_direct.h"
#include "common/rpc_tcp.h"
#include "keyload/v1/rpc.pb-c.h"

#include <errno.h>
#include <limits.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RPC_WIRE_VERSION 1
/* Frames up to this multiple of MaxFrameBytes still arrive whole, so their sender gets a
 * RESOURCE_EXHAUSTED answer naming the limit; beyond it nng drops the connection. */
#define RPC_OVERSIZE_FACTOR 4
/* Room for the Answer/Envelope fields around a payload of max_frame bytes. */
#define RPC_FRAME_SLACK 4096
/* A reply that cannot be written in this time (a peer that stopped reading) is dropped,
 * so the slot goes back to receiving instead of being stuck forever. */
#define RPC_SEND_TIMEOUT_MS 10000
/* At most this many characters of an unknown method name are echoed in NOT_FOUND. */
#define RPC_METHOD_ECHO_MAX 64

/* ------------------------------------------------------------------ shared helpers */

static int64_t rpc_now_unix_ms(void)
{
    return kl_clock_ms(CLOCK_REALTIME);
}

/* The nng receive limit for a frame limit, saturating instead of wrapping (nng reads a
 * limit of 0 as "unlimited", which a wrapped product could produce). */
static size_t rpc_scaled_limit(size_t max_frame, size_t factor)
{
    if (max_frame > (SIZE_MAX - RPC_FRAME_SLACK) / factor)
        return SIZE_MAX;
    return max_frame * factor + RPC_FRAME_SLACK;
}

/* An address the transport cannot parse or does not support is the caller's error;
 * anything else (in use, refused, unreachable) is the network's. */
static kl_code rpc_addr_code(int rv)
{
    switch (rv) {
    case NNG_EADDRINVAL:
    case NNG_EINVAL:
    case NNG_ENOTSUP:
        return KL_INVALID_ARGUMENT;
    default:
        return KL_UNAVAILABLE;
    }
}

/* Closing also closes the socket's contexts, dialers and listeners. ECLOSED means it
 * already was closed; anything else is only worth a log line, the socket is gone. */
static void rpc_close_socket(nng_socket sock, const char *url)
{
    int rv = nng_close(sock);
    if (rv != 0 && rv != NNG_ECLOSED)
        KL_WARN("rpc socket close failed", "op=nng_close url=%s error=\"%s\"", url,
                nng_strerror(rv));
}

/* Copies at most RPC_METHOD_ECHO_MAX printable ASCII characters of a peer-supplied name,
 * replacing anything else with '?', so an error message never carries raw bytes. */
static void rpc_printable_name(char *dst, size_t cap, const char *src)
{
    size_t n = 0;
    const char *p = src;
    for (; *p != '\0' && n < RPC_METHOD_ECHO_MAX && n + 1 < cap; p++) {
        unsigned char ch = (unsigned char)*p;
        dst[n++] = (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\') ? (char)ch : '?';
    }
    dst[n] = '\0';
    if (*p != '\0' && n + 4 <= cap)
        memcpy(dst + n, "...", 4);
}

/* ------------------------------------------------------------------ server */

typedef enum rpc_slot_state {
    SLOT_IDLE,   /* nothing pending (stopped) */
    SLOT_RECV,   /* nng_ctx_recv pending */
    SLOT_QUEUED, /* frame in the inbox, waiting for the loop */
    SLOT_HELD,   /* decoded; a handler owns the call */
    SLOT_SEND,   /* nng_ctx_send pending */
} rpc_slot_state;

typedef struct rpc_slot {
    kl_rpc_server *srv;
    nng_ctx ctx;
    nng_aio *aio;
    /* Owned by exactly one side at a time (nng callback or loop thread); handed over
     * through nng or the inbox mutex, which orders the accesses. */
    rpc_slot_state state;
    uint32_t pipe;         /* the connection of the request it holds (0 = none) */
    nng_msg *frame;        /* received frame while QUEUED */
    struct rpc_slot *next; /* inbox link, under srv->mu */
} rpc_slot;

struct kl_rpc_server {
    uv_loop_t *loop;
    uv_async_t wake;
    nng_socket sock;
    const kl_rpc_method *methods;
    size_t method_count;
    uint8_t by_name[KL_RPC_MAX_METHODS]; /* indexes into methods, sorted by name */
    void *owner;
    size_t max_frame;
    int nslots;
    rpc_slot *slots;

    uv_mutex_t mu;
    rpc_slot *inbox_head; /* under mu */
    rpc_slot *inbox_tail; /* under mu */
    bool stopping;        /* written under mu, only by the loop thread */

    size_t calls_out; /* loop thread only: calls held by handlers */
    kl_rpc_tcp *tcp;  /* the loop's own TCP transport, or NULL (nng) */
    bool tcp_closed;  /* loop thread only: the transport has freed itself after stop */
    bool resume_wanted; /* loop thread only: a resume is due at the wake handle's next turn */
    bool wake_closed; /* loop thread only */

    /* Connections (under mu): one entry per open pipe. */
    struct rpc_conn {
        uint32_t pipe;
        int inflight;     /* requests received and not yet answered */
        int64_t last_ms;  /* monotonic: last request or answer */
    } *conns;
    size_t nconns, conns_cap;
    int max_conns, idle_ms;
    kl_rpc_conn_stats stats;
    uv_timer_t idle_timer;
    bool idle_timer_on;     /* loop thread only: initialised (and to be closed) */
    bool idle_timer_closed; /* loop thread only */
    void (*on_refusal)(void *ctx, int code, const char *detail);
    void *refusal_ctx;
};

/* Where a call's answer goes: a slot (nng) or a connection of the TCP transport, with
 * the request's backtrace to echo. */
typedef struct rpc_target {
    rpc_slot *slot;
    kl_rpc_tcp_conn *conn;
    uint8_t hdr[KL_RPC_TCP_HDR_MAX];
    size_t hdr_len;
} rpc_target;

struct kl_rpc_call {
    kl_rpc_server *srv;
    rpc_target to;
    Keyload__V1__Envelope *env;
    /* Set by kl_rpc_call_set_session: the opened payload and the answer's sealer. */
    uint8_t *plaintext;
    size_t plaintext_len;
    kl_rpc_seal_fn seal;
    kl_rpc_release_fn release;
    void *session_ctx;
    int64_t deadline_ms; /* this server's wall clock, unix ms; 0 = none */
    uint64_t arrived_ns; /* uv_hrtime when the server began handling it */
};

static bool server_is_stopping(kl_rpc_server *srv)
{
    uv_mutex_lock(&srv->mu);
    bool stopping = srv->stopping;
    uv_mutex_unlock(&srv->mu);
    return stopping;
}

/* ---- connections ---- */

static int64_t rpc_mono_ms(void)
{
    return kl_clock_ms(CLOCK_MONOTONIC);
}

/* Under mu: the entry of pipe id, or NULL. */
static struct rpc_conn *conn_find(kl_rpc_server *srv, uint32_t id)
{
    for (size_t i = 0; i < srv->nconns; i++)
        if (srv->conns[i].pipe == id)
            return &srv->conns[i];
    return NULL;
}

/* nng thread: a pipe was negotiated (ADD_PRE: closing it now means the socket never
 * uses it) or removed. */
static void conn_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    kl_rpc_server *srv = arg;
    uint32_t id = nng_pipe_id(p);
    uv_mutex_lock(&srv->mu);
    if (ev == NNG_PIPE_EV_REM_POST) {
        struct rpc_conn *c = conn_find(srv, id);
        if (c != NULL) {
            *c = srv->conns[--srv->nconns];
            srv->stats.open = srv->nconns;
        }
        uv_mutex_unlock(&srv->mu);
        return;
    }
    bool refuse = srv->max_conns > 0 && srv->nconns >= (size_t)srv->max_conns;
    if (!refuse && srv->nconns == srv->conns_cap) {
        size_t cap = srv->conns_cap ? 2 * srv->conns_cap : 64;
        struct rpc_conn *grown = realloc(srv->conns, cap * sizeof *grown);
        if (grown != NULL) {
            srv->conns = grown;
            srv->conns_cap = cap;
        }
        refuse = grown == NULL; /* cannot track it: refuse rather than serve blind */
    }
    if (refuse)
        srv->stats.refused++;
    else {
        srv->conns[srv->nconns++] = (struct rpc_conn){.pipe = id, .last_ms = rpc_mono_ms()};
        srv->stats.open = srv->nconns;
    }
    uv_mutex_unlock(&srv->mu);
    if (refuse)
        nng_pipe_close(p);
}

/* A request arrived on pipe id (delta +1) or its answer went (delta -1). Any thread. */
static void conn_activity(kl_rpc_server *srv, uint32_t id, int delta)
{
    if (id == 0)
        return;
    uv_mutex_lock(&srv->mu);
    struct rpc_conn *c = conn_find(srv, id);
    if (c != NULL) {
        c->inflight += delta;
        if (c->inflight < 0)
            c->inflight = 0;
        c->last_ms = rpc_mono_ms();
    }
    uv_mutex_unlock(&srv->mu);
}

/* Loop thread: closes the connections idle for idle_ms (outside the lock: closing runs
 * the REM_POST callback, which takes it). */
static void conn_idle_cb(uv_timer_t *t)
{
    kl_rpc_server *srv = t->data;
    enum { BATCH = 64 };
    uint32_t close_ids[BATCH];
    size_t n = 0;
    int64_t now = rpc_mono_ms();
    uv_mutex_lock(&srv->mu);
    for (size_t i = 0; i < srv->nconns && n < BATCH; i++)
        if (srv->conns[i].inflight == 0 && now - srv->conns[i].last_ms >= srv->idle_ms) {
            close_ids[n++] = srv->conns[i].pipe;
            srv->conns[i].last_ms = now; /* not picked again while its close is under way */
        }
    srv->stats.idle_closed += n;
    uv_mutex_unlock(&srv->mu);
    for (size_t i = 0; i < n; i++) {
        nng_pipe p = NNG_PIPE_INITIALIZER;
        memcpy(&p, &close_ids[i], sizeof close_ids[i]);
        nng_pipe_close(p);
    }
}

void kl_rpc_server_conn_stats(kl_rpc_server *srv, kl_rpc_conn_stats *out)
{
    if (srv->tcp != NULL) {
        kl_rpc_tcp_stats st;
        kl_rpc_tcp_stats_get(srv->tcp, &st);
        *out = (kl_rpc_conn_stats){.open = st.open, .refused = st.refused,
                                   .idle_closed = st.idle_closed};
        return;
    }
    uv_mutex_lock(&srv->mu);
    *out = srv->stats;
    uv_mutex_unlock(&srv->mu);
}

/* Arms the next receive on a slot, unless the server is stopping. Any thread. */
static void slot_arm_recv(rpc_slot *slot)
{
    if (server_is_stopping(slot->srv)) {
        slot->state = SLOT_IDLE;
        return;
    }
    slot->state = SLOT_RECV;
    nng_aio_set_timeout(slot->aio, NNG_DURATION_INFINITE);
    nng_ctx_recv(slot->ctx, slot->aio);
}

/* nng thread: hands a received frame to the loop. */
static void slot_deliver(rpc_slot *slot, nng_msg *frame)
{
    kl_rpc_server *srv = slot->srv;
    uv_mutex_lock(&srv->mu);
    if (srv->stopping) {
        uv_mutex_unlock(&srv->mu);
        nng_msg_free(frame);
        slot->state = SLOT_IDLE;
        return;
    }
    slot->frame = frame;
    slot->next = NULL;
    slot->state = SLOT_QUEUED;
    if (srv->inbox_tail != NULL)
        srv->inbox_tail->next = slot;
    else
        srv->inbox_head = slot;
    srv->inbox_tail = slot;
    uv_mutex_unlock(&srv->mu);
    /* Safe outside the lock: stop waits for this callback (nng_aio_stop) before it
     * closes the handle. */
    (void)uv_async_send(&srv->wake);
}

/* nng thread: completion of a slot's receive or send. */
static void slot_cb(void *arg)
{
    rpc_slot *slot = arg;
    int rv = nng_aio_result(slot->aio);

    switch (slot->state) {
    case SLOT_SEND:
        if (rv != 0) {
            /* A failed send leaves the message with us. */
            nng_msg_free(nng_aio_get_msg(slot->aio));
            nng_aio_set_msg(slot->aio, NULL);
            if (rv != NNG_ECLOSED && rv != NNG_ECANCELED)
                KL_WARN("rpc answer not sent", "op=nng_ctx_send error=\"%s\"", nng_strerror(rv));
        }
        conn_activity(slot->srv, slot->pipe, -1);
        slot->pipe = 0;
        slot_arm_recv(slot);
        return;
    case SLOT_RECV:
        if (rv == 0) {
            nng_msg *frame = nng_aio_get_msg(slot->aio);
            nng_aio_set_msg(slot->aio, NULL);
            slot->pipe = nng_pipe_id(nng_msg_get_pipe(frame));
            conn_activity(slot->srv, slot->pipe, +1);
            slot_deliver(slot, frame);
        } else if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) {
            slot->state = SLOT_IDLE; /* stopping */
        } else {
            /* Transient (e.g. out of memory): keep the slot serving. */
            KL_WARN("rpc receive failed", "op=nng_ctx_recv error=\"%s\"", nng_strerror(rv));
            slot_arm_recv(slot);
        }
        return;
    default:
        return; /* no operation is pending in the other states */
    }
}

/* Loop thread: encodes an answer and sends it on the slot's context. When the answer
 * cannot be built the request is dropped (its caller times out) and the slot keeps
 * receiving. */
static void slot_send_answer(rpc_slot *slot, const Keyload__V1__Answer *ans)
{
    size_t size = keyload__v1__answer__get_packed_size(ans);
    nng_msg *msg;
    int rv = nng_msg_alloc(&msg, size);
    if (rv != 0) {
        KL_WARN("rpc answer dropped", "op=nng_msg_alloc bytes=%zu error=\"%s\"", size,
                nng_strerror(rv));
        conn_activity(slot->srv, slot->pipe, -1);
        slot->pipe = 0;
        slot_arm_recv(slot);
        return;
    }
    keyload__v1__answer__pack(ans, nng_msg_body(msg));
    slot->state = SLOT_SEND;
    nng_aio_set_msg(slot->aio, msg);
    nng_aio_set_timeout(slot->aio, RPC_SEND_TIMEOUT_MS);
    nng_ctx_send(slot->ctx, slot->aio);
}

/* Loop thread: sends an answer to its target (the TCP transport takes the frame with
 * room for its length prefix and the backtrace). */
static void target_send(const rpc_target *to, const Keyload__V1__Answer *ans)
{
    if (to->slot != NULL) {
        slot_send_answer(to->slot, ans);
        return;
    }
    size_t size = keyload__v1__answer__get_packed_size(ans);
    size_t room = 8 + to->hdr_len;
    uint8_t *frame = malloc(room + size);
    if (frame == NULL) {
        KL_WARN("rpc answer dropped", "op=malloc bytes=%zu", room + size);
        kl_rpc_tcp_drop(to->conn);
        return;
    }
    keyload__v1__answer__pack(ans, frame + room);
    kl_rpc_tcp_answer(to->conn, to->hdr, to->hdr_len, frame, room + size);
}

/* Loop thread: lets go of a target without answering (the server stopped). */
static void target_drop(const rpc_target *to)
{
    if (to->conn != NULL)
        kl_rpc_tcp_drop(to->conn);
}

/* Loop thread: answers an error the server found itself (no handler involved). */
static void target_answer_err(const rpc_target *to, uint64_t request_id, const kl_err *err)
{
    Keyload__V1__Answer ans = KEYLOAD__V1__ANSWER__INIT;
    ans.request_id = request_id;
    ans.code = (Keyload__V1__StatusCode)err->code;
    ans.message = (char *)err->message;
    ans.detail = (char *)err->detail;
    target_send(to, &ans);
}

/* O(log n) name comparisons over the table sorted once at start (server_sort_methods). */
static const kl_rpc_method *server_find_method(const kl_rpc_server *srv, const char *name)
{
    size_t lo = 0, hi = srv->method_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const kl_rpc_method *m = &srv->methods[srv->by_name[mid]];
        int c = strcmp(name, m->name);
        if (c == 0)
            return m;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* The checks the server makes before any handler sees a request. */
static kl_code server_check(const kl_rpc_server *srv, const Keyload__V1__Envelope *env,
                            const kl_rpc_method **method, kl_err *err)
{
    /* Version 0 is what an encoder that leaves the field unset sends. */
    if (env->version != 0 && env->version != RPC_WIRE_VERSION)
        return kl_fail(err, KL_INVALID_ARGUMENT, "version",
                       "envelope version %u is not supported (this server speaks %d)",
                       env->version, RPC_WIRE_VERSION);
    *method = server_find_method(srv, env->method);
    if (*method == NULL) {
        char name[RPC_METHOD_ECHO_MAX + 4];
        rpc_printable_name(name, sizeof name, env->method);
        return kl_fail(err, KL_NOT_FOUND, "method", "unknown method \"%s\"", name);
    }
    /* A relative budget cannot have run out on arrival as far as this server can tell;
       only an absolute deadline from an older client is compared with our clock. */
    int64_t now = rpc_now_unix_ms();
    if (env->timeout_ms == 0 && env->deadline_unix_ms != 0 && now >= env->deadline_unix_ms)
        return kl_fail(err, KL_DEADLINE_EXCEEDED, "deadline",
                       "request deadline passed %lld ms before the server read the request",
                       (long long)(now - env->deadline_unix_ms));
    return KL_OK;
}

/* Loop thread: decodes one request and either answers it or hands it to its handler. */
static void server_dispatch(kl_rpc_server *srv, const rpc_target *to, const uint8_t *body,
                            size_t len)
{
    kl_err err;
    if (len > srv->max_frame) {
        kl_fail(&err, KL_RESOURCE_EXHAUSTED, "limit:MaxFrameBytes",
                "request frame of %zu bytes exceeds MaxFrameBytes (%zu bytes)", len,
                srv->max_frame);
        target_answer_err(to, 0, &err); /* request_id unread: decoding is what we refuse */
        return;
    }
    Keyload__V1__Envelope *env = keyload__v1__envelope__unpack(NULL, len, body);
    if (env == NULL) {
        kl_fail(&err, KL_INVALID_ARGUMENT, "frame", "malformed request frame");
        target_answer_err(to, 0, &err);
        return;
    }
    const kl_rpc_method *method = NULL;
    if (server_check(srv, env, &method, &err) != KL_OK) {
        target_answer_err(to, env->request_id, &err);
        keyload__v1__envelope__free_unpacked(env, NULL);
        return;
    }
    uint64_t arrived_ns = uv_hrtime();
    kl_rpc_call *call = calloc(1, sizeof *call);
    if (call == NULL) {
        kl_fail(&err, KL_RESOURCE_EXHAUSTED, "memory", "server out of memory for a call");
        target_answer_err(to, env->request_id, &err);
        keyload__v1__envelope__free_unpacked(env, NULL);
        return;
    }
    call->srv = srv;
    call->to = *to;
    call->env = env;
    call->arrived_ns = arrived_ns;
    call->deadline_ms = env->timeout_ms != 0 ? rpc_now_unix_ms() + (int64_t)env->timeout_ms
                                             : env->deadline_unix_ms;
    if (to->slot != NULL)
        to->slot->state = SLOT_HELD;
    srv->calls_out++;
    if (srv->tcp != NULL && srv->calls_out >= (size_t)srv->nslots)
        kl_rpc_tcp_pause(srv->tcp); /* at most `contexts` calls held, as with nng */
    method->handler(srv->owner, call);
}

/* Loop thread: a frame of the nng transport. */
static void server_dispatch_slot(kl_rpc_server *srv, rpc_slot *slot, nng_msg *frame)
{
    rpc_target to = {.slot = slot};
    server_dispatch(srv, &to, nng_msg_body(frame), nng_msg_len(frame));
    nng_msg_free(frame);
}

/* Loop thread: a frame of the TCP transport (the handler owns a reference to conn). */
static void server_tcp_frame(void *owner, kl_rpc_tcp_conn *conn, const uint8_t *hdr,
                             size_t hdr_len, const uint8_t *body, size_t len)
{
    kl_rpc_server *srv = owner;
    rpc_target to = {.conn = conn, .hdr_len = hdr_len};
    memcpy(to.hdr, hdr, hdr_len);
    if (srv->stopping) {
        target_drop(&to);
        return;
    }
    server_dispatch(srv, &to, body, len);
}

/* Takes the whole inbox at once, so the lock is held only for two stores. */
static rpc_slot *server_take_inbox(kl_rpc_server *srv)
{
    uv_mutex_lock(&srv->mu);
    rpc_slot *list = srv->inbox_head;
    srv->inbox_head = NULL;
    srv->inbox_tail = NULL;
    uv_mutex_unlock(&srv->mu);
    return list;
}

/* Frees the frames of a taken inbox list without decoding them. */
static void server_drop_frames(rpc_slot *list)
{
    while (list != NULL) {
        rpc_slot *slot = list;
        list = slot->next;
        slot->next = NULL;
        nng_msg_free(slot->frame);
        slot->frame = NULL;
        slot->state = SLOT_IDLE;
    }
}

/* Loop thread: the uv_async callback. */
static void server_wake_cb(uv_async_t *handle)
{
    kl_rpc_server *srv = handle->data;
    if (srv->resume_wanted) {
        srv->resume_wanted = false;
        if (srv->tcp != NULL && !srv->stopping && srv->calls_out < (size_t)srv->nslots)
            kl_rpc_tcp_resume(srv->tcp);
    }
    rpc_slot *list = server_take_inbox(srv);
    while (list != NULL) {
        /* A handler may stop the server; the rest of the batch is then dropped. The
         * server memory outlives this callback (freed after the handle's close). */
        if (srv->stopping) {
            server_drop_frames(list);
            return;
        }
        rpc_slot *slot = list;
        list = slot->next;
        slot->next = NULL;
        nng_msg *frame = slot->frame;
        slot->frame = NULL;
        server_dispatch_slot(srv, slot, frame);
    }
}

static void server_free(kl_rpc_server *srv)
{
    free(srv->conns);
    free(srv->slots);
    uv_mutex_destroy(&srv->mu);
    free(srv);
}

/* Loop thread: frees a stopped server once nothing refers to it any more. */
static void server_maybe_free(kl_rpc_server *srv)
{
    if (srv->stopping && srv->wake_closed && srv->calls_out == 0 &&
        (srv->tcp == NULL || srv->tcp_closed) &&
        (!srv->idle_timer_on || srv->idle_timer_closed))
        server_free(srv);
}

static void server_idle_timer_closed(uv_handle_t *handle)
{
    kl_rpc_server *srv = handle->data;
    srv->idle_timer_closed = true;
    server_maybe_free(srv);
}

static void server_wake_closed(uv_handle_t *handle)
{
    kl_rpc_server *srv = handle->data;
    srv->wake_closed = true;
    server_maybe_free(srv);
}

/* Frees the first n slots' aios (the contexts close with the socket). */
static void server_free_aios(kl_rpc_server *srv, int n)
{
    for (int i = 0; i < n; i++) {
        nng_aio_free(srv->slots[i].aio);
        srv->slots[i].aio = NULL;
    }
}

static kl_code server_open_slots(kl_rpc_server *srv, kl_err *err)
{
    int rv = 0;
    int i;
    for (i = 0; i < srv->nslots; i++) {
        rpc_slot *slot = &srv->slots[i];
        slot->srv = srv;
        slot->state = SLOT_IDLE;
        if ((rv = nng_ctx_open(&slot->ctx, srv->sock)) != 0)
            goto fail_aios;
        if ((rv = nng_aio_alloc(&slot->aio, slot_cb, slot)) != 0)
            goto fail_aios;
    }
    return KL_OK;

fail_aios:
    server_free_aios(srv, i);
    return kl_fail(err, KL_RESOURCE_EXHAUSTED, "contexts",
                   "rpc server: opening context %d of %d failed: %s", i, srv->nslots,
                   nng_strerror(rv));
}

static kl_code server_check_config(uv_loop_t *loop, const kl_rpc_server_config *cfg,
                                   kl_rpc_server **out, kl_err *err)
{
    if (loop == NULL || cfg == NULL || out == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "config", "rpc server: missing loop or config");
    if (cfg->listen_url == NULL || cfg->listen_url[0] == '\0')
        return kl_fail(err, KL_INVALID_ARGUMENT, "listen_url", "rpc server: listen_url is empty");
    if (cfg->method_count > 0 && cfg->methods == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "methods",
                       "rpc server: method_count is %zu but methods is NULL", cfg->method_count);
    if (cfg->method_count > KL_RPC_MAX_METHODS)
        return kl_fail(err, KL_INVALID_ARGUMENT, "methods",
                       "rpc server: %zu methods, at most KL_RPC_MAX_METHODS (%d)", cfg->method_count,
                       KL_RPC_MAX_METHODS);
    for (size_t i = 0; i < cfg->method_count; i++) {
        if (cfg->methods[i].name == NULL || cfg->methods[i].handler == NULL)
            return kl_fail(err, KL_INVALID_ARGUMENT, "methods",
                           "rpc server: method %zu has no name or no handler", i);
        for (size_t j = 0; j < i; j++)
            if (strcmp(cfg->methods[i].name, cfg->methods[j].name) == 0)
                return kl_fail(err, KL_INVALID_ARGUMENT, "methods",
                               "rpc server: method \"%s\" is listed twice", cfg->methods[i].name);
    }
    return KL_OK;
}

/* Fills srv->by_name: the methods' indexes sorted by name (an insertion sort of at most
 * KL_RPC_MAX_METHODS entries, once per server). */
static void server_sort_methods(kl_rpc_server *srv)
{
    _Static_assert(KL_RPC_MAX_METHODS <= 256, "method indexes fit a byte");
    for (size_t i = 0; i < srv->method_count; i++) {
        size_t j = i;
        while (j > 0 && strcmp(srv->methods[srv->by_name[j - 1]].name, srv->methods[i].name) > 0) {
            srv->by_name[j] = srv->by_name[j - 1];
            j--;
        }
        srv->by_name[j] = (uint8_t)i;
    }
}

static void server_tcp_done(void *arg)
{
    kl_rpc_server *srv = arg;
    srv->tcp_closed = true;
    server_maybe_free(srv);
}

/* The rest of kl_rpc_server_start for a URL the loop's TCP transport serves: no nng
 * socket, no slots; the wake handle is still made so that stop and free run one path. */
static kl_code server_start_tcp(uv_loop_t *loop, const kl_rpc_server_config *cfg,
                                kl_rpc_server *srv, kl_rpc_server **out, kl_err *err)
{
    kl_rpc_tcp_config tc = {.url = cfg->listen_url,
                            .recv_max = rpc_scaled_limit(srv->max_frame, RPC_OVERSIZE_FACTOR),
                            .max_conns = cfg->max_conns,
                            .idle_ms = cfg->idle_ms,
                            .on_frame = server_tcp_frame,
                            .owner = srv};
    int rv;
    if ((rv = uv_async_init(loop, &srv->wake, server_wake_cb)) != 0) {
        kl_code rc = kl_fail(err, KL_INTERNAL, "loop", "rpc server: uv_async_init for %s failed: %s",
                             cfg->listen_url, uv_strerror(rv));
        free(srv->slots);
        uv_mutex_destroy(&srv->mu);
        free(srv);
        return rc;
    }
    srv->wake.data = srv;
    kl_code rc = kl_rpc_tcp_start(loop, &tc, &srv->tcp, err);
    if (rc != KL_OK) {
        /* Freed by the wake handle's close callback (no calls, no transport). */
        srv->stopping = true;
        srv->tcp = NULL;
        srv->nslots = 0;
        uv_close((uv_handle_t *)&srv->wake, server_wake_closed);
        return rc;
    }
    *out = srv;
    return KL_OK;
}

kl_code kl_rpc_server_start(uv_loop_t *loop, const kl_rpc_server_config *cfg,
                            kl_rpc_server **out, kl_err *err)
{
    kl_code rc = server_check_config(loop, cfg, out, err);
    if (rc != KL_OK)
        return rc;
    *out = NULL;

    kl_rpc_server *srv = calloc(1, sizeof *srv);
    if (srv == NULL)
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory", "rpc server: out of memory");
    srv->loop = loop;
    srv->methods = cfg->methods;
    srv->method_count = cfg->method_count;
    server_sort_methods(srv);
    srv->owner = cfg->owner;
    srv->on_refusal = cfg->on_refusal;
    srv->refusal_ctx = cfg->refusal_ctx;
    srv->max_frame = cfg->max_frame != 0 ? cfg->max_frame : KL_RPC_DEFAULT_FRAME_LIMIT;
    srv->nslots = cfg->contexts < KL_RPC_MIN_CONTEXTS ? KL_RPC_MIN_CONTEXTS : cfg->contexts;

    int rv;
    if (uv_mutex_init(&srv->mu) != 0) {
        rc = kl_fail(err, KL_INTERNAL, "mutex", "rpc server: mutex init failed");
        goto fail_free;
    }
    srv->slots = calloc((size_t)srv->nslots, sizeof *srv->slots);
    if (srv->slots == NULL) {
        rc = kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory",
                     "rpc server: out of memory for %d contexts", srv->nslots);
        goto fail_mutex;
    }
    if (kl_rpc_tcp_handles(cfg->listen_url))
        return server_start_tcp(loop, cfg, srv, out, err);
    if ((rv = nng_rep0_open(&srv->sock)) != 0) {
        rc = kl_fail(err, KL_INTERNAL, "socket", "rpc server: opening REP socket for %s failed: %s",
                     cfg->listen_url, nng_strerror(rv));
        goto fail_slots;
    }
    size_t recv_max = rpc_scaled_limit(srv->max_frame, RPC_OVERSIZE_FACTOR);
    if ((rv = nng_socket_set_size(srv->sock, NNG_OPT_RECVMAXSZ, recv_max)) != 0) {
        rc = kl_fail(err, KL_INTERNAL, "socket", "rpc server: setting %s on %s failed: %s",
                     NNG_OPT_RECVMAXSZ, cfg->listen_url, nng_strerror(rv));
        goto fail_sock;
    }
    if ((rc = server_open_slots(srv, err)) != KL_OK)
        goto fail_sock;
    srv->max_conns = cfg->max_conns > 0 ? cfg->max_conns : 0;
    srv->idle_ms = cfg->idle_ms > 0 ? cfg->idle_ms : 0;
    if ((rv = nng_pipe_notify(srv->sock, NNG_PIPE_EV_ADD_PRE, conn_event, srv)) != 0 ||
        (rv = nng_pipe_notify(srv->sock, NNG_PIPE_EV_REM_POST, conn_event, srv)) != 0) {
        rc = kl_fail(err, KL_INTERNAL, "socket", "rpc server: pipe notifications on %s failed: %s",
                     cfg->listen_url, nng_strerror(rv));
        goto fail_aios;
    }
    if ((rv = nng_listen(srv->sock, cfg->listen_url, NULL, 0)) != 0) {
        rc = kl_fail(err, rpc_addr_code(rv), "listen_url", "rpc server: listen on %s failed: %s",
                     cfg->listen_url, nng_strerror(rv));
        goto fail_aios;
    }
    /* Last fallible step, so no unwinding path has to uv_close a live handle. Receives
     * are armed only after it, so no callback can wake an uninitialised handle. */
    if ((rv = uv_async_init(loop, &srv->wake, server_wake_cb)) != 0) {
        rc = kl_fail(err, KL_INTERNAL, "loop", "rpc server: uv_async_init for %s failed: %s",
                     cfg->listen_url, uv_strerror(rv));
        goto fail_aios;
    }
    srv->wake.data = srv;
    if (srv->idle_ms > 0 && uv_timer_init(loop, &srv->idle_timer) == 0) {
        uint64_t every = (uint64_t)(srv->idle_ms / 4 > 20 ? srv->idle_ms / 4 : 20);
        srv->idle_timer.data = srv;
        srv->idle_timer_on = true;
        uv_timer_start(&srv->idle_timer, conn_idle_cb, every, every);
    }
    for (int i = 0; i < srv->nslots; i++)
        slot_arm_recv(&srv->slots[i]);
    *out = srv;
    return KL_OK;

fail_aios:
    server_free_aios(srv, srv->nslots);
fail_sock:
    rpc_close_socket(srv->sock, cfg->listen_url);
fail_slots:
    free(srv->slots);
fail_mutex:
    uv_mutex_destroy(&srv->mu);
fail_free:
    free(srv);
    return rc;
}

void kl_rpc_server_flush(kl_rpc_server *srv)
{
    if (srv != NULL && srv->tcp != NULL && !server_is_stopping(srv))
        kl_rpc_tcp_flush(srv->tcp);
}

void kl_rpc_server_stop(kl_rpc_server *srv)
{
    if (srv == NULL)
        return;
    uv_mutex_lock(&srv->mu);
    bool already = srv->stopping;
    srv->stopping = true;
    uv_mutex_unlock(&srv->mu);
    if (already)
        return;
    if (srv->tcp != NULL) {
        kl_rpc_tcp_stop(srv->tcp, server_tcp_done, srv);
        uv_close((uv_handle_t *)&srv->wake, server_wake_closed);
        return;
    }

    /* Cancel pending receives and sends and wait until no callback runs; a callback that
     * completes now sees `stopping` and arms nothing new. After this no nng thread
     * touches srv->wake or the inbox. */
    for (int i = 0; i < srv->nslots; i++)
        nng_aio_stop(srv->slots[i].aio);
    rpc_close_socket(srv->sock, "server");
    server_free_aios(srv, srv->nslots);
    server_drop_frames(server_take_inbox(srv));
    if (srv->idle_timer_on)
        uv_close((uv_handle_t *)&srv->idle_timer, server_idle_timer_closed);
    uv_close((uv_handle_t *)&srv->wake, server_wake_closed);
}

const char *kl_rpc_call_method(const kl_rpc_call *call) { return call->env->method; }

static const uint8_t rpc_empty[1];

const uint8_t *kl_rpc_call_payload(const kl_rpc_call *call, size_t *len)
{
    if (call->seal != NULL) {
        if (len != NULL)
            *len = call->plaintext_len;
        return call->plaintext != NULL ? call->plaintext : rpc_empty;
    }
    if (len != NULL)
        *len = call->env->payload.len;
    return call->env->payload.data != NULL ? call->env->payload.data : rpc_empty;
}

const uint8_t *kl_rpc_call_session_id(const kl_rpc_call *call, size_t *len)
{
    if (len != NULL)
        *len = call->env->session_id.len;
    return call->env->session_id.data != NULL ? call->env->session_id.data : rpc_empty;
}

uint64_t kl_rpc_call_counter(const kl_rpc_call *call) { return call->env->counter; }

const uint8_t *kl_rpc_call_sealed(const kl_rpc_call *call, size_t *len)
{
    if (len != NULL)
        *len = call->env->sealed.len;
    return call->env->sealed.data != NULL ? call->env->sealed.data : rpc_empty;
}

void kl_rpc_call_set_session(kl_rpc_call *call, uint8_t *plaintext, size_t len,
                             kl_rpc_seal_fn seal, kl_rpc_release_fn release, void *ctx)
{
    call->plaintext = plaintext;
    call->plaintext_len = plaintext != NULL ? len : 0;
    call->seal = seal;
    call->release = release;
    call->session_ctx = ctx;
}

void *kl_rpc_call_session_ctx(const kl_rpc_call *call)
{
    return call->seal != NULL ? call->session_ctx : NULL;
}

int64_t kl_rpc_call_deadline_ms(const kl_rpc_call *call) { return call->deadline_ms; }
uint64_t kl_rpc_call_arrived_ns(const kl_rpc_call *call) { return call->arrived_ns; }

uint64_t kl_rpc_call_request_id(const kl_rpc_call *call) { return call->env->request_id; }

/* Sends the answer (unless the server stopped) and frees the call. The answer is encoded
 * before the request is freed because its payload may point into the request. */
static void call_finish(kl_rpc_call *call, Keyload__V1__Answer *ans)
{
    kl_rpc_server *srv = call->srv;
    ans->request_id = call->env->request_id;
    uint8_t *sealed = NULL;
    if (call->seal != NULL && !srv->stopping) {
        size_t sealed_len = 0;
        kl_err se;
        kl_err_clear(&se);
        kl_code code = (kl_code)ans->code;
        const uint8_t *pt = code == KL_OK ? ans->payload.data : NULL;
        size_t pt_len = code == KL_OK ? ans->payload.len : 0;
        if (call->seal(call->session_ctx, code, ans->detail != NULL ? ans->detail : "", pt, pt_len,
                       &sealed, &sealed_len, &se) == KL_OK) {
            ans->payload.data = NULL;
            ans->payload.len = 0;
            ans->sealed.data = sealed;
            ans->sealed.len = sealed_len;
            ans->session_id = call->env->session_id;
            ans->counter = call->env->counter;
        } else {
            KL_WARN("rpc answer not sealed", "method=%s detail=%s", call->env->method, se.detail);
            sealed = NULL;
            ans->code = KEYLOAD__V1__STATUS_CODE__INTERNAL;
            ans->message = "the answer could not be sealed";
            ans->detail = "seal";
            ans->payload.data = NULL;
            ans->payload.len = 0;
            ans->leader_address = (char *)"";
        }
    }
    if (!srv->stopping)
        target_send(&call->to, ans);
    else
        target_drop(&call->to);
    free(sealed);
    if (call->release != NULL)
        call->release(call->session_ctx);
    free(call->plaintext);
    keyload__v1__envelope__free_unpacked(call->env, NULL);
    free(call);
    srv->calls_out--;
    /* Resuming delivers waiting frames to their handlers, so it never runs here, inside
     * whatever answered this call (a node callback walking its pending table, another
     * handler): the loop's next turn does it, with nothing of ours on the stack. Only a
     * paused transport needs it: waking the loop for every answer cost an eventfd write
     * and read and a loop turn per call. */
    if (srv->tcp != NULL && !srv->stopping && !srv->resume_wanted && kl_rpc_tcp_paused(srv->tcp) &&
        srv->calls_out < (size_t)srv->nslots) {
        srv->resume_wanted = true;
        uv_async_send(&srv->wake);
    }
    server_maybe_free(srv);
}

void kl_rpc_reply(kl_rpc_call *call, const uint8_t *payload, size_t len)
{
    Keyload__V1__Answer ans = KEYLOAD__V1__ANSWER__INIT;
    ans.code = KEYLOAD__V1__STATUS_CODE__OK;
    ans.payload.data = (uint8_t *)payload; /* only read by pack */
    ans.payload.len = payload != NULL ? len : 0;
    call_finish(call, &ans);
}

void kl_rpc_reply_error(kl_rpc_call *call, const kl_err *err, const char *leader_address)
{
    kl_err e;
    if (err == NULL || err->code <= KL_OK || err->code >= KL_CODE_COUNT) {
        /* An "error" answer without an error code would read as success. */
        kl_fail(&e, KL_INTERNAL, "status", "handler for %s failed without a status code",
                kl_rpc_call_method(call));
    } else {
        e = *err;
        e.message[sizeof e.message - 1] = '\0';
        e.detail[sizeof e.detail - 1] = '\0';
    }
    if (call->srv->on_refusal != NULL)
        call->srv->on_refusal(call->srv->refusal_ctx, (int)e.code, e.detail);
    Keyload__V1__Answer ans = KEYLOAD__V1__ANSWER__INIT;
    ans.code = (Keyload__V1__StatusCode)e.code;
    ans.message = e.message;
    ans.detail = e.detail;
    if (e.code == KL_NOT_LEADER && leader_address != NULL)
        ans.leader_address = (char *)leader_address;
    call_finish(call, &ans);
}

/* ------------------------------------------------------------------ client */

struct kl_rpc_client {
    nng_socket sock;         /* unused when direct is set */
    kl_rpc_direct *direct;   /* tcp:// with a numeric address: common/rpc_direct.h */
    bool dial_abandoned; /* a dial thread never returned: the socket is left open (see below) */
    char url[]; /* for error messages */
};

/* 0 is never issued: a server answers request_id 0 when it could not read the id. */
static _Atomic uint64_t rpc_next_request_id = 1;

static uint64_t rpc_request_id(void)
{
    uint64_t id;
    do
        id = atomic_fetch_add(&rpc_next_request_id, 1);
    while (id == 0);
    return id;
}

typedef struct rpc_dial_job {
    nng_dialer dialer;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done; /* under mu */
    int rv;    /* under mu */
    int refs;  /* under mu: the waiting caller and the dial thread; the last one frees */
} rpc_dial_job;

static void rpc_dial_job_release(rpc_dial_job *job)
{
    pthread_mutex_lock(&job->mu);
    bool last = --job->refs == 0;
    pthread_mutex_unlock(&job->mu);
    if (!last)
        return;
    pthread_cond_destroy(&job->cv);
    pthread_mutex_destroy(&job->mu);
    free(job);
}

static void *rpc_dial_thread(void *arg)
{
    rpc_dial_job *job = arg;
    int rv = nng_dialer_start(job->dialer, 0);
    kl_err fe;
    (void)KL_FAILPOINT("rpc.dial_returned", &fe);
    pthread_mutex_lock(&job->mu);
    job->rv = rv;
    job->done = true;
    pthread_cond_signal(&job->cv);
    pthread_mutex_unlock(&job->mu);
    rpc_dial_job_release(job);
    return NULL;
}

/* Waits on job->cv until the dial is done or `until`; returns whether it is done. */
static bool rpc_dial_wait(rpc_dial_job *job, const struct timespec *until)
{
    pthread_mutex_lock(&job->mu);
    while (!job->done && pthread_cond_timedwait(&job->cv, &job->mu, until) != ETIMEDOUT)
        ;
    bool done = job->done;
    pthread_mutex_unlock(&job->mu);
    return done;
}

/* How long the dial thread gets to return after its dialer was closed before the caller
 * stops waiting for it. */
#define RPC_DIAL_CLOSE_WAIT_MS 1000

/* nng 1.5.2 has no connect timeout: a synchronous dial to an address that never answers
 * waits for the kernel's SYN retries (minutes) or nng's handshake timeout. So the
 * synchronous dial runs on a helper thread while we wait at most timeout_ms; on timeout,
 * closing the dialer cancels the attempt and the helper usually returns promptly. Not
 * always: nng 1.5.2 can leave a synchronous dial waiting for ever after its dialer was
 * closed, so the caller waits RPC_DIAL_CLOSE_WAIT_MS more at most and then leaves the
 * thread detached (it frees the job if it ever returns); a wait that must be bounded never
 * depends on nng. A refused connection still fails fast, with nng's reason. */
static int rpc_dial_bounded(nng_dialer dialer, int timeout_ms, bool *timed_out, bool *abandoned)
{
    *timed_out = false;
    *abandoned = false;
    rpc_dial_job *job = calloc(1, sizeof *job);
    if (job == NULL)
        return NNG_ENOMEM;
    job->dialer = dialer;
    job->refs = 2;
    pthread_condattr_t attr;
    int rv = NNG_ENOMEM;
    if (pthread_condattr_init(&attr) != 0)
        goto fail_job;
    if (pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) != 0)
        goto fail_attr;
    if (pthread_mutex_init(&job->mu, NULL) != 0)
        goto fail_attr;
    if (pthread_cond_init(&job->cv, &attr) != 0)
        goto fail_mutex;
    pthread_condattr_destroy(&attr);
    pthread_t thread;
    if (pthread_create(&thread, NULL, rpc_dial_thread, job) != 0) {
        pthread_cond_destroy(&job->cv);
        pthread_mutex_destroy(&job->mu);
        free(job);
        return NNG_ENOMEM;
    }

    struct timespec until;
    kl_deadline_after_ms(&until, timeout_ms);
    bool done = rpc_dial_wait(job, &until);
    if (!done) {
        *timed_out = true;
        int crv = nng_dialer_close(dialer);
        if (crv != 0 && crv != NNG_ECLOSED)
            KL_WARN("rpc dialer close failed", "op=nng_dialer_close error=\"%s\"",
                    nng_strerror(crv));
        kl_deadline_after_ms(&until, RPC_DIAL_CLOSE_WAIT_MS);
        done = rpc_dial_wait(job, &until);
    }
    if (done) {
        pthread_join(thread, NULL);
        rv = job->rv; /* the thread has exited: no lock needed */
    } else {
        KL_WARN("rpc dial did not end after its dialer was closed; leaving it",
                "op=nng_dialer_start waited_ms=%d", timeout_ms + RPC_DIAL_CLOSE_WAIT_MS);
        pthread_detach(thread);
        *abandoned = true;
        rv = NNG_ETIMEDOUT;
    }
    rpc_dial_job_release(job);
    return rv;

fail_mutex:
    pthread_mutex_destroy(&job->mu);
fail_attr:
    pthread_condattr_destroy(&attr);
fail_job:
    free(job);
    return rv;
}

static kl_code client_dial(kl_rpc_client *c, int connect_timeout_ms, kl_err *err)
{
    nng_dialer dialer;
    int rv = nng_dialer_create(&dialer, c->sock, c->url);
    if (rv != 0)
        return kl_fail(err, rpc_addr_code(rv), "url", "rpc: cannot dial %s: %s", c->url,
                       nng_strerror(rv));
    bool timed_out = false;
    if (connect_timeout_ms > 0)
        rv = rpc_dial_bounded(dialer, connect_timeout_ms, &timed_out, &c->dial_abandoned);
    else /* < 0: connect in the background; a send waits for it up to its own timeout */
        rv = nng_dialer_start(dialer, connect_timeout_ms < 0 ? NNG_FLAG_NONBLOCK : 0);
    if (timed_out)
        return kl_fail(err, KL_UNAVAILABLE, "connect", "rpc: could not connect to %s within %d ms",
                       c->url, connect_timeout_ms);
    if (rv != 0)
        return kl_fail(err, KL_UNAVAILABLE, "connect", "rpc: connecting to %s failed: %s", c->url,
                       nng_strerror(rv));
    return KL_OK;
}

kl_code kl_rpc_client_open(const char *url, int connect_timeout_ms, size_t max_frame,
                           kl_rpc_client **out, kl_err *err)
{
    if (out == NULL || url == NULL || url[0] == '\0')
        return kl_fail(err, KL_INVALID_ARGUMENT, "url", "rpc client: url is empty");
    *out = NULL;
    size_t url_len = strlen(url);
    kl_rpc_client *c = malloc(sizeof *c + url_len + 1);
    if (c == NULL)
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory", "rpc client: out of memory");
    c->dial_abandoned = false;
    c->direct = NULL;
    memcpy(c->url, url, url_len + 1);

    kl_code rc;
    int rv;
    if (kl_rpc_direct_handles(url)) {
        size_t limit = rpc_scaled_limit(max_frame != 0 ? max_frame : KL_RPC_DEFAULT_FRAME_LIMIT, 1);
        if ((rc = kl_rpc_direct_open(url, connect_timeout_ms, limit, &c->direct, err)) != KL_OK) {
            free(c);
            return rc;
        }
        *out = c;
        return KL_OK;
    }
    if ((rv = nng_req0_open(&c->sock)) != 0) {
        rc = kl_fail(err, KL_INTERNAL, "socket", "rpc client: opening REQ socket for %s failed: %s",
                     url, nng_strerror(rv));
        goto fail_free;
    }
    /* No automatic resend: a resent mutation could execute twice; retrying is the
     * caller's decision (same command id). Set before any context exists, since
     * contexts copy the socket's value when opened. */
    if ((rv = nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE)) != 0) {
        rc = kl_fail(err, KL_INTERNAL, "socket", "rpc client: setting %s for %s failed: %s",
                     NNG_OPT_REQ_RESENDTIME, url, nng_strerror(rv));
        goto fail_sock;
    }
    /* An answer wraps up to max_frame payload bytes in a few small fields. */
    size_t limit = rpc_scaled_limit(max_frame != 0 ? max_frame : KL_RPC_DEFAULT_FRAME_LIMIT, 1);
    if ((rv = nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, limit)) != 0) {
        rc = kl_fail(err, KL_INTERNAL, "socket", "rpc client: setting %s for %s failed: %s",
                     NNG_OPT_RECVMAXSZ, url, nng_strerror(rv));
        goto fail_sock;
    }
    if ((rc = client_dial(c, connect_timeout_ms, err)) != KL_OK)
        goto fail_sock;
    *out = c;
    return KL_OK;

fail_sock:
    /* Closing a socket whose dial never returned could wait for that dial too: it is left
     * open, one socket and one thread kept for the life of the process. */
    if (!c->dial_abandoned)
        rpc_close_socket(c->sock, url);
fail_free:
    free(c);
    return rc;
}

void kl_rpc_client_close(kl_rpc_client *c)
{
    if (c == NULL)
        return;
    if (c->direct != NULL)
        kl_rpc_direct_close(c->direct);
    else
        rpc_close_socket(c->sock, c->url);
    free(c);
}

static void client_envelope(Keyload__V1__Envelope *out, const char *method, const uint8_t *req,
                            size_t req_len, const kl_rpc_session_request *sess,
                            uint64_t request_id, int64_t deadline_ms)
{
    Keyload__V1__Envelope env = KEYLOAD__V1__ENVELOPE__INIT;
    env.version = RPC_WIRE_VERSION;
    env.method = (char *)method; /* only read by pack */
    env.request_id = request_id;
    env.deadline_unix_ms = deadline_ms;
    if (deadline_ms != 0) {
        int64_t left = deadline_ms - rpc_now_unix_ms();
        env.timeout_ms = left < 1 ? 1 : left > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)left;
    }
    env.payload.data = (uint8_t *)req;
    env.payload.len = req_len;
    if (sess != NULL) { /* only read by pack */
        env.session_id.data = (uint8_t *)sess->session_id;
        env.session_id.len = sess->session_id_len;
        env.counter = sess->counter;
        env.sealed.data = (uint8_t *)sess->sealed;
        env.sealed.len = sess->sealed_len;
    }
    *out = env;
}

static kl_code client_encode(const kl_rpc_client *c, const char *method, const uint8_t *req,
                             size_t req_len, const kl_rpc_session_request *sess,
                             uint64_t request_id, int64_t deadline_ms, nng_msg **out, kl_err *err)
{
    Keyload__V1__Envelope env;
    client_envelope(&env, method, req, req_len, sess, request_id, deadline_ms);
    size_t size = keyload__v1__envelope__get_packed_size(&env);
    int rv = nng_msg_alloc(out, size);
    if (rv != 0)
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory",
                       "rpc: allocating a %zu-byte %s request to %s failed: %s", size, method,
                       c->url, nng_strerror(rv));
    keyload__v1__envelope__pack(&env, nng_msg_body(*out));
    return KL_OK;
}

/* Sends the request; takes ownership of msg. A REQ context completes the send once the
 * request is handed to a connection, so a failure here means it was never sent. */
static kl_code client_send(const kl_rpc_client *c, nng_ctx ctx, nng_aio *aio, nng_msg *msg,
                           const char *method, int timeout_ms, kl_err *err)
{
    nng_aio_set_msg(aio, msg);
    nng_aio_set_timeout(aio, timeout_ms);
    nng_ctx_send(ctx, aio);
    nng_aio_wait(aio);
    int rv = nng_aio_result(aio);
    if (rv == 0)
        return KL_OK;
    nng_msg_free(nng_aio_get_msg(aio)); /* a failed send leaves the message with us */
    nng_aio_set_msg(aio, NULL);
    if (rv == NNG_ETIMEDOUT)
        return kl_fail(err, KL_UNAVAILABLE, "no_connection",
                       "rpc: %s not sent: no connection to %s within %d ms", method, c->url,
                       timeout_ms);
    return kl_fail(err, KL_UNAVAILABLE, "send", "rpc: sending %s to %s failed: %s", method, c->url,
                   nng_strerror(rv));
}

/* Waits for the answer until the call's deadline. Once the request has been sent every
 * failure means the outcome is unknown, so all of them are DEADLINE_EXCEEDED "no_answer"
 * (never UNAVAILABLE, which would tell a caller the request was not executed). */
static kl_code client_recv(const kl_rpc_client *c, nng_ctx ctx, nng_aio *aio, const char *method,
                           int64_t deadline_ms, int timeout_ms, nng_msg **reply, kl_err *err)
{
    int64_t left = deadline_ms - rpc_now_unix_ms();
    if (left < 1)
        left = 1; /* still collect an answer that is already here */
    nng_aio_set_timeout(aio, (nng_duration)(left > INT_MAX ? INT_MAX : left));
    nng_ctx_recv(ctx, aio);
    nng_aio_wait(aio);
    int rv = nng_aio_result(aio);
    if (rv == 0) {
        *reply = nng_aio_get_msg(aio);
        nng_aio_set_msg(aio, NULL);
        return KL_OK;
    }
    if (rv == NNG_ETIMEDOUT)
        return kl_fail(err, KL_DEADLINE_EXCEEDED, "no_answer",
                       "rpc: no answer to %s from %s arrived within %d ms; the request may have "
                       "been executed",
                       method, c->url, timeout_ms);
    return kl_fail(err, KL_DEADLINE_EXCEEDED, "no_answer",
                   "rpc: connection to %s was lost before %s was answered (%s); the request may "
                   "have been executed",
                   c->url, method, nng_strerror(rv));
}

/* Turns a non-OK Answer into err (and the leader address). */
static kl_code client_answer_error(const Keyload__V1__Answer *ans, const kl_rpc_client *c,
                                   const char *method, char *leader_out, size_t leader_cap,
                                   kl_err *err)
{
    kl_code code = (kl_code)ans->code;
    if (code == KL_NOT_LEADER && leader_out != NULL && leader_cap > 0)
        snprintf(leader_out, leader_cap, "%s", ans->leader_address ? ans->leader_address : "");
    if (ans->message == NULL || ans->message[0] == '\0')
        return kl_fail(err, code, ans->detail, "%s answered %s to %s", c->url, kl_code_name(code),
                       method);
    return kl_fail(err, code, ans->detail, "%s", ans->message);
}

/* Copies the Answer's session fields into *out (sealed malloc'd; NULL when empty). */
static kl_code client_copy_session(const Keyload__V1__Answer *ans, const char *method,
                                   kl_rpc_session_answer *out, kl_err *err)
{
    if (ans->session_id.len == KL_RPC_SESSION_ID_LEN)
        memcpy(out->session_id, ans->session_id.data, KL_RPC_SESSION_ID_LEN);
    out->session_id_len = ans->session_id.len;
    out->counter = ans->counter;
    if (ans->sealed.len > 0) {
        out->sealed = malloc(ans->sealed.len);
        if (out->sealed == NULL)
            return kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory",
                           "rpc: out of memory for a %zu-byte sealed answer to %s",
                           ans->sealed.len, method);
        memcpy(out->sealed, ans->sealed.data, ans->sealed.len);
        out->sealed_len = ans->sealed.len;
    }
    return KL_OK;
}

static kl_code client_decode(const kl_rpc_client *c, const uint8_t *reply, size_t reply_len,
                             uint64_t request_id, const char *method, uint8_t **answer,
                             size_t *answer_len, kl_rpc_session_answer *sess_out,
                             char *leader_out, size_t leader_cap, kl_err *err)
{
    Keyload__V1__Answer *ans = keyload__v1__answer__unpack(NULL, reply_len, reply);
    if (ans == NULL)
        return kl_fail(err, KL_INTERNAL, "answer", "rpc: malformed answer to %s from %s", method,
                       c->url);
    kl_code rc = KL_OK;
    int code = (int)ans->code;
    if (code < 0 || code >= KL_CODE_COUNT) {
        rc = kl_fail(err, KL_INTERNAL, "answer", "rpc: answer to %s from %s has unknown status %d",
                     method, c->url, code);
    } else if (ans->request_id != request_id && !(ans->request_id == 0 && code != KL_OK)) {
        /* request_id 0 with an error: the server could not read our request's id. */
        rc = kl_fail(err, KL_INTERNAL, "request_id",
                     "rpc: answer from %s is for request %llu, not %llu (%s)", c->url,
                     (unsigned long long)ans->request_id, (unsigned long long)request_id, method);
    } else if (sess_out != NULL && client_copy_session(ans, method, sess_out, err) != KL_OK) {
        rc = err->code;
    } else if (code != KL_OK) {
        rc = client_answer_error(ans, c, method, leader_out, leader_cap, err);
    } else {
        /* Never NULL, so callers can always free it. */
        uint8_t *copy = malloc(ans->payload.len > 0 ? ans->payload.len : 1);
        if (copy == NULL) {
            rc = kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory",
                         "rpc: out of memory for a %zu-byte answer to %s", ans->payload.len,
                         method);
        } else {
            if (ans->payload.len > 0)
                memcpy(copy, ans->payload.data, ans->payload.len);
            *answer = copy;
            *answer_len = ans->payload.len;
            kl_err_clear(err);
        }
    }
    keyload__v1__answer__free_unpacked(ans, NULL);
    return rc;
}

/* Send, wait, decode; takes ownership of msg. */
static kl_code client_exchange(const kl_rpc_client *c, nng_ctx ctx, nng_aio *aio, nng_msg *msg,
                               const char *method, uint64_t request_id, int64_t deadline_ms,
                               int timeout_ms, uint8_t **answer, size_t *answer_len,
                               kl_rpc_session_answer *sess_out, char *leader_out,
                               size_t leader_cap, kl_err *err)
{
    nng_msg *reply = NULL;
    kl_code rc = client_send(c, ctx, aio, msg, method, timeout_ms, err);
    if (rc != KL_OK)
        return rc;
    rc = client_recv(c, ctx, aio, method, deadline_ms, timeout_ms, &reply, err);
    if (rc != KL_OK)
        return rc;
    rc = client_decode(c, nng_msg_body(reply), nng_msg_len(reply), request_id, method, answer,
                       answer_len, sess_out, leader_out, leader_cap, err);
    nng_msg_free(reply);
    return rc;
}

/* ECLOSED only means the client socket closed under us; the call's result stands. */
static void client_ctx_close(const kl_rpc_client *c, nng_ctx ctx)
{
    int rv = nng_ctx_close(ctx);
    if (rv != 0 && rv != NNG_ECLOSED)
        KL_WARN("rpc context close failed", "op=nng_ctx_close url=%s error=\"%s\"", c->url,
                nng_strerror(rv));
}

static kl_code rpc_invoke_direct(kl_rpc_client *c, const char *method, const uint8_t *req,
                                 size_t req_len, const kl_rpc_session_request *sess,
                                 int timeout_ms, uint8_t **answer, size_t *answer_len,
                                 kl_rpc_session_answer *sess_out, char *leader_out,
                                 size_t leader_cap, kl_err *err);

static kl_code rpc_invoke(kl_rpc_client *c, const char *method, const uint8_t *req,
                          size_t req_len, const kl_rpc_session_request *sess, int timeout_ms,
                          uint8_t **answer, size_t *answer_len, kl_rpc_session_answer *sess_out,
                          char *leader_out, size_t leader_cap, kl_err *err)
{
    if (answer != NULL)
        *answer = NULL;
    if (answer_len != NULL)
        *answer_len = 0;
    if (leader_out != NULL && leader_cap > 0)
        leader_out[0] = '\0';
    if (c == NULL || method == NULL || answer == NULL || answer_len == NULL ||
        (req == NULL && req_len > 0))
        return kl_fail(err, KL_INVALID_ARGUMENT, "call",
                       "rpc call: missing client, method or output");
    if (timeout_ms <= 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "timeout_ms",
                       "rpc call: timeout_ms must be positive, got %d", timeout_ms);

    if (c->direct != NULL)
        return rpc_invoke_direct(c, method, req, req_len, sess, timeout_ms, answer, answer_len,
                                 sess_out, leader_out, leader_cap, err);
    int64_t deadline_ms = rpc_now_unix_ms() + timeout_ms;
    uint64_t request_id = rpc_request_id();
    nng_msg *msg;
    kl_code rc = client_encode(c, method, req, req_len, sess, request_id, deadline_ms, &msg, err);
    if (rc != KL_OK)
        return rc;

    /* A context per call keeps concurrent calls on one socket apart. */
    nng_ctx ctx;
    nng_aio *aio;
    int rv;
    if ((rv = nng_ctx_open(&ctx, c->sock)) != 0) {
        rc = kl_fail(err, KL_UNAVAILABLE, "context",
                     "rpc: opening a context on %s for %s failed: %s", c->url, method,
                     nng_strerror(rv));
        goto fail_msg;
    }
    if ((rv = nng_aio_alloc(&aio, NULL, NULL)) != 0) {
        rc = kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory", "rpc: aio for %s to %s: %s", method,
                     c->url, nng_strerror(rv));
        goto fail_ctx;
    }
    rc = client_exchange(c, ctx, aio, msg, method, request_id, deadline_ms, timeout_ms, answer,
                         answer_len, sess_out, leader_out, leader_cap, err);
    nng_aio_free(aio);
    client_ctx_close(c, ctx);
    return rc;

fail_ctx:
    client_ctx_close(c, ctx);
fail_msg:
    nng_msg_free(msg);
    return rc;
}

kl_code kl_rpc_invoke(kl_rpc_client *c, const char *method, const uint8_t *req, size_t req_len,
                      int timeout_ms, uint8_t **answer, size_t *answer_len, char *leader_out,
                      size_t leader_cap, kl_err *err)
{
    return rpc_invoke(c, method, req, req_len, NULL, timeout_ms, answer, answer_len, NULL,
                      leader_out, leader_cap, err);
}

void kl_rpc_session_answer_free(kl_rpc_session_answer *a)
{
    if (a == NULL)
        return;
    free(a->sealed);
    memset(a, 0, sizeof *a);
}

kl_code kl_rpc_invoke_session(kl_rpc_client *c, const char *method,
                              const kl_rpc_session_request *req, int timeout_ms,
                              kl_rpc_session_answer *out, char *leader_out, size_t leader_cap,
                              kl_err *err)
{
    if (out != NULL)
        memset(out, 0, sizeof *out);
    if (req == NULL || out == NULL || req->session_id == NULL ||
        req->session_id_len != KL_RPC_SESSION_ID_LEN || (req->sealed == NULL && req->sealed_len > 0))
        return kl_fail(err, KL_INVALID_ARGUMENT, "session_id",
                       "rpc call: a session request needs a 16-byte session id and an output");
    uint8_t *clear = NULL;
    size_t clear_len = 0;
    kl_code rc = rpc_invoke(c, method, NULL, 0, req, timeout_ms, &clear, &clear_len, out,
                            leader_out, leader_cap, err);
    free(clear); /* an answer under a session carries its payload sealed */
    if (rc == KL_OK && clear_len > 0) {
        kl_rpc_session_answer_free(out);
        return kl_fail(err, KL_UNAUTHENTICATED, "clear_payload",
                       "rpc: %s answered %s with a clear payload beside its session", c->url,
                       method);
    }
    return rc;
}

/* ------------------------------------------------------------------ client, asynchronous
 *
 * The same exchange as rpc_invoke, driven by nng's aio callback instead of a waiting
 * thread: send, then receive until the deadline, then `done`. The answer is decoded by
 * kl_rpc_op_result on the caller's side with the same client_decode as a blocking call, so
 * both forms report exactly the same statuses. */

enum { RPC_OP_IDLE, RPC_OP_SEND, RPC_OP_RECV };

struct kl_rpc_op {
    /* NULL until the op first runs on an nng client. Pauses use dreq (rpc_direct.h), not
     * nng_sleep_aio: in nng 1.5.2 an aio once used by it reports a later timeout as
     * success (its sleep flag outlives the sleep). */
    nng_aio *aio;
    nng_ctx ctx;
    bool ctx_open;
    int state;
    pthread_mutex_t mu;       /* guards cancelled against the send -> receive switch */
    bool cancelled;
    kl_rpc_client *c;         /* the exchange in flight (borrowed) */
    const char *method;       /* borrowed: a literal of the caller */
    uint64_t request_id;
    int64_t deadline_ms;
    int timeout_ms;
    nng_msg *reply;           /* the answer, once received */
    kl_rpc_direct_req dreq;   /* the exchange on a direct client (rpc_direct.h) */
    /* The client's URL, for its messages: a direct exchange can end after kl_rpc_client_close
     * freed the client (the close completes it, its callback runs later). */
    char url[KL_URL_MAX];
    uint8_t *dreply;          /* its answer (Answer bytes), malloc'd */
    size_t dreply_len;
    kl_err err;               /* why there is no answer (send or receive failure) */
    kl_code rc;               /* KL_OK once reply holds an answer */
    kl_rpc_op_done done;
    void *arg;
};

/* A cancel that came while an operation was being started (its nng_aio_cancel found
 * nothing to cancel yet) is applied now. A cancel is for good: the op's owner ends. */
static void rpc_op_recheck_cancel(kl_rpc_op *op)
{
    pthread_mutex_lock(&op->mu);
    if (op->cancelled && op->aio != NULL)
        nng_aio_cancel(op->aio);
    pthread_mutex_unlock(&op->mu);
}

static void rpc_op_finish(kl_rpc_op *op)
{
    if (op->ctx_open)
        client_ctx_close(op->c, op->ctx);
    op->ctx_open = false;
    op->state = RPC_OP_IDLE;
    op->done(op->arg);
}

/* The receive half: started unless a cancel came first; a cancel racing with the start
 * is applied right after it. */
static void rpc_op_recv(kl_rpc_op *op)
{
    pthread_mutex_lock(&op->mu);
    bool cancelled = op->cancelled;
    pthread_mutex_unlock(&op->mu);
    if (cancelled) {
        op->rc = kl_fail(&op->err, KL_DEADLINE_EXCEEDED, "no_answer",
                         "rpc: %s to %s was cancelled after it was sent; the request may have "
                         "been executed", op->method, op->c->url);
        rpc_op_finish(op);
        return;
    }
    int64_t left = op->deadline_ms - rpc_now_unix_ms();
    if (left < 1)
        left = 1;
    op->state = RPC_OP_RECV;
    nng_aio_set_timeout(op->aio, (nng_duration)(left > INT_MAX ? INT_MAX : left));
    nng_ctx_recv(op->ctx, op->aio);
    rpc_op_recheck_cancel(op);
}

static void rpc_op_cb(void *arg)
{
    kl_rpc_op *op = arg;
    int rv = nng_aio_result(op->aio);
    if (op->state == RPC_OP_SEND) {
        if (rv == 0) {
            rpc_op_recv(op);
            return;
        }
        nng_msg_free(nng_aio_get_msg(op->aio)); /* a failed send leaves the message with us */
        nng_aio_set_msg(op->aio, NULL);
        if (rv == NNG_ETIMEDOUT)
            op->rc = kl_fail(&op->err, KL_UNAVAILABLE, "no_connection",
                             "rpc: %s not sent: no connection to %s within %d ms", op->method,
                             op->c->url, op->timeout_ms);
        else
            op->rc = kl_fail(&op->err, KL_UNAVAILABLE, rv == NNG_ECANCELED ? "cancelled" : "send",
                             "rpc: sending %s to %s failed: %s", op->method, op->c->url,
                             nng_strerror(rv));
    } else if (rv == 0) {
        op->reply = nng_aio_get_msg(op->aio);
        nng_aio_set_msg(op->aio, NULL);
        op->rc = KL_OK;
    } else {
        op->rc = kl_fail(&op->err, KL_DEADLINE_EXCEEDED, "no_answer",
                         "rpc: no answer to %s from %s within %d ms (%s); the request may have "
                         "been executed", op->method, op->c->url, op->timeout_ms,
                         nng_strerror(rv));
    }
    rpc_op_finish(op);
}

/* A direct exchange ended (I/O thread): the same statuses as the nng path's. */
static void rpc_op_direct_cb(void *arg)
{
    kl_rpc_op *op = arg;
    kl_rpc_direct_req *r = &op->dreq;
    const char *why = r->sys_err != 0 ? strerror(r->sys_err) : "closed by the server";
    switch (r->outcome) {
    case KL_RPC_DIRECT_SLEPT: /* a pause: no exchange, no result */
        break;
    case KL_RPC_DIRECT_ANSWERED:
        op->dreply = r->reply;
        op->dreply_len = r->reply_len;
        r->reply = NULL;
        op->rc = KL_OK;
        break;
    case KL_RPC_DIRECT_NOT_SENT_TIMEOUT:
        op->rc = kl_fail(&op->err, KL_UNAVAILABLE, "no_connection",
                         "rpc: %s not sent: no connection to %s within %d ms%s%s", op->method,
                         op->url, op->timeout_ms, r->sys_err != 0 ? ": " : "",
                         r->sys_err != 0 ? strerror(r->sys_err) : "");
        break;
    case KL_RPC_DIRECT_NOT_SENT_CANCELLED:
        op->rc = kl_fail(&op->err, KL_UNAVAILABLE, "cancelled", "rpc: %s to %s was cancelled before it was sent",
                         op->method, op->url);
        break;
    case KL_RPC_DIRECT_NOT_SENT_CLOSED:
        op->rc = kl_fail(&op->err, KL_UNAVAILABLE, "send", "rpc: %s to %s not sent: the client was closed",
                         op->method, op->url);
        break;
    case KL_RPC_DIRECT_LOST:
        op->rc = kl_fail(&op->err, KL_DEADLINE_EXCEEDED, "no_answer",
                         "rpc: connection to %s was lost before %s was answered (%s); the request may "
                         "have been executed", op->url, op->method, why);
        break;
    case KL_RPC_DIRECT_CANCELLED:
        op->rc = kl_fail(&op->err, KL_DEADLINE_EXCEEDED, "no_answer",
                         "rpc: %s to %s was cancelled after it was sent; the request may have "
                         "been executed", op->method, op->url);
        break;
    default:
        op->rc = kl_fail(&op->err, KL_DEADLINE_EXCEEDED, "no_answer",
                         "rpc: no answer to %s from %s within %d ms; the request may have "
                         "been executed", op->method, op->url, op->timeout_ms);
        break;
    }
    op->done(op->arg);
}


kl_code kl_rpc_op_new(kl_rpc_op_done done, void *arg, kl_rpc_op **out, kl_err *err)
{
    kl_rpc_op *op = calloc(1, sizeof *op);
    if (op == NULL || pthread_mutex_init(&op->mu, NULL) != 0) {
        free(op);
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory", "rpc: out of memory for a call");
    }
    op->done = done;
    op->arg = arg;
    op->dreq.done = rpc_op_direct_cb;
    op->dreq.arg = op;
    *out = op;
    return KL_OK;
}

void kl_rpc_op_free(kl_rpc_op *op)
{
    if (op == NULL)
        return;
    kl_rpc_direct_stop(&op->dreq); /* waits for a callback still running */
    if (op->aio != NULL)
        nng_aio_free(op->aio);     /* likewise */
    nng_msg_free(op->reply);
    free(op->dreply);
    pthread_mutex_destroy(&op->mu);
    free(op);
}

void kl_rpc_cork(void) { kl_rpc_direct_cork(); }
void kl_rpc_uncork(void) { kl_rpc_direct_uncork(); }

kl_code kl_rpc_op_start(kl_rpc_op *op, kl_rpc_client *c, const char *method, const uint8_t *req,
                        size_t req_len, const kl_rpc_session_request *sess, int timeout_ms,
                        kl_err *err)
{
    if (timeout_ms <= 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "timeout_ms",
                       "rpc call: timeout_ms must be positive, got %d", timeout_ms);
    nng_msg_free(op->reply);
    op->reply = NULL;
    free(op->dreply);
    op->dreply = NULL;
    op->c = c;
    op->method = method;
    op->timeout_ms = timeout_ms;
    op->deadline_ms = rpc_now_unix_ms() + timeout_ms;
    op->request_id = rpc_request_id();
    op->rc = KL_INTERNAL;
    kl_err_clear(&op->err);
    if (c->direct != NULL) {
        snprintf(op->url, sizeof op->url, "%s", c->url);
        Keyload__V1__Envelope env;
        client_envelope(&env, method, req, req_len, sess, op->request_id, op->deadline_ms);
        size_t size = keyload__v1__envelope__get_packed_size(&env);
        uint8_t *buf = malloc(size > 0 ? size : 1);
        if (buf == NULL)
            return kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory",
                           "rpc: allocating a %zu-byte %s request to %s failed", size, method, c->url);
        keyload__v1__envelope__pack(&env, buf);
        kl_code drc = kl_rpc_direct_start(c->direct, &op->dreq, buf, size, timeout_ms, timeout_ms, err);
        free(buf);
        pthread_mutex_lock(&op->mu);
        bool cancelled = op->cancelled;
        pthread_mutex_unlock(&op->mu);
        if (drc == KL_OK && cancelled) /* a cancel is for good, as on the nng path */
            kl_rpc_direct_cancel(&op->dreq);
        return drc;
    }
    if (op->aio == NULL && nng_aio_alloc(&op->aio, rpc_op_cb, op) != 0)
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory", "rpc: out of memory for a call");
    nng_msg *msg;
    kl_code rc = client_encode(c, method, req, req_len, sess, op->request_id, op->deadline_ms,
                               &msg, err);
    if (rc != KL_OK)
        return rc;
    int rv = nng_ctx_open(&op->ctx, c->sock);
    if (rv != 0) {
        nng_msg_free(msg);
        return kl_fail(err, KL_UNAVAILABLE, "context",
                       "rpc: opening a context on %s for %s failed: %s", c->url, method,
                       nng_strerror(rv));
    }
    op->ctx_open = true;
    op->state = RPC_OP_SEND;
    nng_aio_set_msg(op->aio, msg);
    nng_aio_set_timeout(op->aio, timeout_ms);
    nng_ctx_send(op->ctx, op->aio);
    rpc_op_recheck_cancel(op);
    return KL_OK;
}

void kl_rpc_op_cancel(kl_rpc_op *op)
{
    pthread_mutex_lock(&op->mu);
    op->cancelled = true;
    pthread_mutex_unlock(&op->mu);
    kl_rpc_direct_cancel(&op->dreq);
    if (op->aio != NULL)
        nng_aio_cancel(op->aio);
}

kl_code kl_rpc_op_result(kl_rpc_op *op, uint8_t **answer, size_t *answer_len,
                         kl_rpc_session_answer *sess_out, char *leader_out, size_t leader_cap,
                         kl_err *err)
{
    *answer = NULL;
    *answer_len = 0;
    if (sess_out != NULL)
        memset(sess_out, 0, sizeof *sess_out);
    if (leader_out != NULL && leader_cap > 0)
        leader_out[0] = '\0';
    if (op->rc != KL_OK) {
        if (err != NULL)
            *err = op->err;
        return op->rc;
    }
    kl_code rc;
    if (op->dreply != NULL) {
        rc = client_decode(op->c, op->dreply, op->dreply_len, op->request_id, op->method, answer,
                           answer_len, sess_out, leader_out, leader_cap, err);
        free(op->dreply);
        op->dreply = NULL;
        return rc;
    }
    rc = client_decode(op->c, nng_msg_body(op->reply), nng_msg_len(op->reply), op->request_id,
                       op->method, answer, answer_len, sess_out, leader_out, leader_cap, err);
    nng_msg_free(op->reply);
    op->reply = NULL;
    return rc;
}

void kl_rpc_sleep_start(kl_rpc_op *op, int ms)
{
    kl_err err;
    if (kl_rpc_direct_sleep(&op->dreq, ms, &err) != KL_OK) {
        KL_WARN("rpc pause not started; going on at once", "error=\"%s\"", err.message);
        op->done(op->arg);
        return;
    }
    pthread_mutex_lock(&op->mu);
    bool cancelled = op->cancelled;
    pthread_mutex_unlock(&op->mu);
    if (cancelled)
        kl_rpc_direct_cancel(&op->dreq);
}


/* ------------------------------------------------------------------ client, direct, blocking */

typedef struct rpc_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
} rpc_wait;

static void rpc_wait_done(void *arg)
{
    rpc_wait *w = arg;
    pthread_mutex_lock(&w->mu);
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* A blocking call on a direct client is an op whose callback wakes the caller: the
 * exchange itself needs no thread of the caller's. */
static kl_code rpc_invoke_direct(kl_rpc_client *c, const char *method, const uint8_t *req,
                                 size_t req_len, const kl_rpc_session_request *sess,
                                 int timeout_ms, uint8_t **answer, size_t *answer_len,
                                 kl_rpc_session_answer *sess_out, char *leader_out,
                                 size_t leader_cap, kl_err *err)
{
    rpc_wait w = {.done = false};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    kl_rpc_op *op = NULL;
    kl_code rc = kl_rpc_op_new(rpc_wait_done, &w, &op, err);
    if (rc == KL_OK)
        rc = kl_rpc_op_start(op, c, method, req, req_len, sess, timeout_ms, err);
    if (rc == KL_OK) {
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        rc = kl_rpc_op_result(op, answer, answer_len, sess_out, leader_out, leader_cap, err);
    }
    kl_rpc_op_free(op);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    return rc;
}
