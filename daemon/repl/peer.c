/* peer: member-to-member frames over repl/peer_tcp connections (see peer.h).
 *
 * State. Everything runs on the loop thread: the transport's events (a connection up, a
 * frame, a connection down, writes drained), the watchdog, the flush of the inbox and every
 * kl_peer_* call. The mutex `mu` guards the shared state anyway: it is never contended,
 * and it marks every place that reads or changes that state. No transport call is made
 * with it held (the transport never calls back from inside a call, so that would be safe,
 * but the rule keeps the code simple to reason about). The configuration copied at start
 * is immutable afterwards.
 *
 * Sending ("pumping"). member_pump takes the next frame a member may send now (its hello,
 * then queued data while the data window has room, then a bare ack when one is due), stamps
 * the cumulative ack and the connection into it under `mu`, and hands it to the transport
 * with the lock released. `pumping` keeps one pump per member at a time (a pump is never
 * re-entered now, but the flag costs nothing and keeps frames in counter order regardless).
 *
 * Authenticated mode (peer.h). Handshake crypto and sealing run outside `mu`: the values
 * they need (a key, the expected counter, the dialer's handshake state) are copied out under
 * the lock into locals that are wiped afterwards, and the result is applied under the lock
 * again only if the connection is still the same live one. Secrets: the member key
 * (immutable, wiped in peer_free), a dialing connection's handshake state and a confirming
 * connection's keys (peer_pipe, wiped when the handshake ends, the connection is refused or
 * removed), a connection's keys (peer_member.keys, wiped by member_adopt and member_drop).
 *
 * Receiving. A frame's event copies it and handles it at once (handshake, acks, opening);
 * data frames go to the inbox, and an idle handle delivers the inbox to recv at the next
 * loop iteration, so recv never runs inside the transport's read (recv may send or stop) and
 * one iteration's frames from every connection are delivered together.
 *
 * Shutdown. kl_peer_stop sets `stopping` (from then on no data is sent or delivered:
 * received data is dropped, acks and closing notices still count) and drops every queued
 * frame; each connection gets a closing notice; the watchdog timer then waits until every
 * connection answered it and fell quiet (bounded), stops the transport, and once the
 * transport is gone closes the two libuv handles; the last close callback frees the memory. */
#include "daemon/repl/peer.h"
#include "common/clock.h"
#include "common/wire.h"

#include "common/failpoint.h"
#include "common/log.h"
#include "common/peer_auth.h"
#include "daemon/repl/peer_tcp.h"

#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Static_assert(KL_PEER_SECRET_LEN == KL_PEER_AUTH_SECRET_LEN, "member secret key");
_Static_assert(KL_PEER_PUBLIC_LEN == KL_PEER_AUTH_PUBLIC_LEN, "member public key");

#define PEER_HDR 9 /* u8 type + u64 ack */
#define PEER_T_HELLO 1
#define PEER_T_DATA 2
#define PEER_T_ACK 3
#define PEER_T_BATCH 4 /* several queued data frames in one: (u32 length, bytes) each */
#define PEER_BATCH_LEN 4 /* a batched frame's length prefix */
#define PEER_BUSY 0x80   /* type flag of DATA, ACK, BATCH: our inbox is half full, send no data */
#define PEER_CLOSING 0x40 /* type flag of ACK only: we are stopping, send no data, ack this */
#define PEER_MAGIC 0x4b4c5052u /* "KLPR" */
#define PEER_VERSION 1
#define PEER_HELLO_FIXED (4 + 1 + 8 + 8 + 1)
#define PEER_SEAL KL_PEER_AUTH_OVERHEAD   /* sealed frames: u64 counter + 16-byte tag */
#define PEER_CTR KL_PEER_AUTH_COUNTER_LEN /* where a sealed frame's payload starts after the header */

/* The credit window (peer.h "Flow control"): data frames unacknowledged on one connection
 * while another may go. It bounds what one connection holds in flight, hence the memory a
 * receiver must absorb per connection before its acks or BUSY flag can act, and it is what
 * turns a backlog into BATCH frames: frames beyond it wait in the member's queue and leave
 * together. 8 keeps a pipelined leader's appends flowing across a round trip. */
#define PEER_DATA_WINDOW 8
#define PEER_WINDOW (PEER_DATA_WINDOW + 1) /* unacknowledged frames of any type */
/* A bare ack goes at once when this many received frames are unreported (the sender's
 * window is half used), or when we must tell the sender we are busy. */
#define PEER_ACK_EVERY (PEER_DATA_WINDOW / 2)
/* Bytes queued on a connection in the transport (the kernel took no more): data waits in
 * the member's queue (where it coalesces) while more than one max_frame is queued there, so
 * a slow reader costs about two frames of memory per connection, not a window of them. The
 * transport's hard bound, never reached with this respected, is a window of frames. */
#define PEER_TCP_QUEUED_SOFT(max_frame) (max_frame)
#define PEER_TCP_QUEUED_HARD(max_frame) ((PEER_WINDOW + 2) * ((max_frame) + 64))
/* Pipes tracked at once: every peer's connection, a replaced one each, and strangers still
 * handshaking. A pipe beyond it is closed at once. */
#define PEER_MAX_PIPES (2 * KL_PEER_MAX_PEERS + 14)
/* A received frame of up to this multiple of max_frame arrives and is counted as oversized;
 * the transport closes the connection on a larger one. */
#define PEER_OVERSIZE_FACTOR 4
/* Refusal log lines: at most one per this interval (a misconfigured dialer retries every
 * second); the others are counted and reported with the next line. */
#define PEER_REFUSAL_LOG_MS 1000
/* Watchdog period: ack_timeout_ms / 4, between 10 ms and this. It is also the longest a
 * lone frame waits for its (delayed) ack, so it stays well under any sane ack timeout. */
#define PEER_TICK_MAX_MS 100
#define PEER_MIN_ACK_TIMEOUT_MS (2 * PEER_TICK_MAX_MS)
/* Stop: the transport is closed once every connection answered our closing notice and no
 * frame arrived for PEER_QUIET_MS, or after PEER_QUIESCE_MAX_MS at the latest (a peer that
 * does not answer; see kl_peer_stop). */
#define PEER_QUIET_MS 40
#define PEER_QUIESCE_MAX_MS 500 /* the daemon gives its whole stop 1.5 s (daemon/main.c) */

/* A frame being built or received: the transport's headroom, then the frame at data[off],
 * len bytes (trimming moves off; a frame to send keeps off == KL_PEER_TCP_HEADROOM). */
typedef struct peer_msg {
    uint32_t conn; /* the connection a frame to send goes on */
    size_t off, len;
    uint8_t data[];
} peer_msg;

static peer_msg *msg_alloc(size_t len)
{
    peer_msg *m = malloc(sizeof *m + KL_PEER_TCP_HEADROOM + len);
    if (m != NULL)
        *m = (peer_msg){.off = KL_PEER_TCP_HEADROOM, .len = len};
    return m;
}

static uint8_t *msg_body(const peer_msg *m) { return (uint8_t *)m->data + m->off; }
static size_t msg_len(const peer_msg *m) { return m->len; }
static void msg_trim(peer_msg *m, size_t n) { m->off += n, m->len -= n; }
static void msg_chop(peer_msg *m, size_t n) { m->len -= n; }
static void msg_free(peer_msg *m) { free(m); }

typedef struct peer_out {
    struct peer_out *next;
    peer_msg *msg; /* header + payload */
    size_t len;   /* payload bytes */
} peer_out;

typedef struct peer_member {
    /* Immutable after start. */
    uint64_t id;
    char *url;        /* dialed when id < self, else NULL */
    uint32_t dialer;  /* transport dialer id, 0 = we do not dial this member */
    uint8_t public_key[KL_PEER_PUBLIC_LEN]; /* authenticated mode */

    /* Under kl_peer.mu. Counters are per connection and restart at every new one. */
    uint32_t pipe;        /* current connection, 0 = none */
    bool connected;       /* both hellos crossed on `pipe` */
    bool hello_due;       /* our hello is not yet sent on `pipe` */
    bool pumping;         /* member_pump is sending this member's frames */
    bool ack_data;        /* a hello or data frame arrived since our last report */
    bool ack_now;         /* the watchdog tick found ack_data still set: ack it now */
    uint64_t tx;          /* frames sent on pipe */
    uint64_t tx_acked;    /* of which the peer reported receiving */
    uint64_t rx;          /* frames received on pipe */
    uint64_t rx_acked;    /* rx value last reported to the peer */
    uint64_t data_hi;     /* tx after our last hello or data frame */
    uint64_t wait_since;  /* ms since data_hi > tx_acked with no ack progress; 0 = none */
    bool peer_busy;       /* the peer's last frame said its inbox is half full: no data */
    bool tcp_full;        /* the transport holds over PEER_TCP_QUEUED_SOFT for pipe: no data */
    bool busy_told;       /* our last frame on pipe told the peer we are busy */
    bool peer_closing;    /* the peer said it is stopping: no data to it on pipe, ever */
    bool closing_owed;    /* ... and has not had our answer (a frame acknowledging that) */
    uint64_t closing_at;  /* we are stopping: tx after our closing notice, 0 = not sent */
    peer_out *head, *tail;
    size_t q_frames, q_bytes;
    kl_peer_auth_keys keys; /* authenticated mode: `pipe`'s keys once connected, else zero */
} peer_member;

typedef struct peer_pipe {
    uint32_t id;     /* 0 = free slot */
    int member;      /* index into members, -1 = not (yet) a member's connection; a confirming
                        pipe names the member it claims without being its connection */
    bool dialed;     /* we dialed it (the peer must answer our hello) */
    bool hello_rx;   /* the handshake completed (the peer's hello arrived and was accepted;
                        authenticated listener: and its first sealed frame opened) */
    bool dead;       /* refused or replaced: closing, its frames are dropped */
    uint64_t since;  /* ms when the pipe was added */
    uint64_t last_rx; /* ms of its last frame (0 = none yet) */
    /* Authenticated mode. */
    bool dial_ready;        /* dialed: `dial` holds our HELLO, until the ANSWER checked out */
    kl_peer_auth_dial dial; /* dialed: our HELLO and its ephemeral secret key */
    bool confirming;        /* listener: HELLO accepted and answered; waiting for the dialer's
                               first sealed frame */
    kl_peer_auth_keys keys; /* listener, while confirming: the connection's keys */
} peer_pipe;

typedef struct peer_inbound {
    uint64_t from;
    peer_msg *msg; /* payload only */
    uint64_t read_ns; /* uv_hrtime when the transport read it (kl_peer_delivering_read_ns) */
} peer_inbound;

struct kl_peer {
    /* Immutable after start. */
    uv_loop_t *loop;
    char *cluster;      /* what hellos carry: the name, and the configuration when known */
    size_t cluster_len;
    size_t name_len;    /* the cluster name's length: cluster's first name_len bytes */
    bool has_config;    /* cluster carries PEER_CFG_MARK, index and digest */
    uint64_t config_index;
    uint64_t self;
    char *listen_url;
    size_t n_members;
    peer_member members[KL_PEER_MAX_PEERS];
    size_t max_frame;
    size_t max_frames;
    size_t max_bytes;
    uint32_t ack_timeout_ms;
    size_t max_pipes;   /* connections at once, <= PEER_MAX_PIPES */
    uint64_t idle_ms;   /* close a connection silent this long; 0 = never */
    kl_peer_recv_fn recv;
    void *owner;
    bool auth;                                  /* authenticated mode (peer.h) */
    int32_t partition;
    int64_t max_skew_ms;
    uint8_t member_secret[KL_PEER_SECRET_LEN];  /* authenticated mode; wiped in peer_free */
    kl_peer_tcp *tcp;
    uv_idle_t flush;                  /* delivers the inbox (started while it holds frames) */
    uv_timer_t watchdog;

    uv_mutex_t mu;
    bool stopping;                    /* under mu */
    bool tcp_stopped;                 /* the transport is stopped (and maybe gone) */
    uint64_t stop_at;                 /* under mu: ms when kl_peer_stop was called */
    uint64_t last_rx;                 /* under mu: ms of the last frame received */
    peer_pipe pipes[PEER_MAX_PIPES];  /* under mu */
    peer_inbound *inbox;              /* ring of max_frames, under mu */
    uint64_t delivering_read_ns;      /* loop thread: the frame recv is given now, else 0 */
    size_t in_head, in_count, in_bytes;
    kl_peer_counters st;              /* under mu (pipes_open/connected computed on read) */
    uint64_t refusal_logged_at;       /* under mu */
    uint64_t refusals_unlogged;       /* under mu */
    char cfg_why[192];                /* under mu: a configuration refusal's reason */

    int handles_open; /* loop thread only */
};

/* What a callback decided under the lock and does after releasing it. */
typedef struct peer_act {
    uint32_t close[PEER_MAX_PIPES];
    size_t n_close;
    peer_member *pump;
    bool wake;
    const char *refused;      /* reason, when a pipe was refused */
    char refused_buf[192 + KL_ERR_DETAIL_MAX]; /* room for a reason composed on the spot */
    uint32_t refused_pipe;
    uint64_t refused_claim;   /* member id the hello claimed, 0 = none */
    uint64_t refused_more;    /* refusals not logged since the last line */
    bool log_refusal;
    uint64_t up, down;        /* member connected / lost */
    peer_msg *answer;          /* authenticated listener: the ANSWER to send on answer_pipe */
    uint32_t answer_pipe;
} peer_act;

/* ------------------------------------------------------------------ helpers */

static uint64_t peer_now_ms(void) { return uv_hrtime() / 1000000u; }

/* The wall clock hellos carry (unix ms): members compare each other's. */
static int64_t peer_wall_ms(void)
{
    return kl_clock_ms(CLOCK_REALTIME);
}

static kl_peer_auth_self peer_auth_self(const kl_peer *p)
{
    return (kl_peer_auth_self){.cluster = p->cluster, .partition = p->partition, .id = p->self,
                               .secret = p->member_secret};
}

/* A pipe slot's secrets, wiped (the slot itself stays). */
static void pipe_wipe_secrets(peer_pipe *pp)
{
    kl_peer_auth_dial_wipe(&pp->dial);
    kl_peer_auth_keys_wipe(&pp->keys);
    pp->dial_ready = false;
    pp->confirming = false;
}

/* A slot back to free, secrets wiped. */
static void pipe_clear(peer_pipe *pp) { sodium_memzero(pp, sizeof *pp); }


static void put_u32(uint8_t *b, uint32_t v)
{
    for (int i = 3; i >= 0; i--, v >>= 8)
        b[i] = (uint8_t)v;
}

static uint32_t get_u32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static void act_close(peer_act *act, uint32_t pipe)
{
    for (size_t i = 0; i < act->n_close; i++)
        if (act->close[i] == pipe)
            return;
    if (act->n_close < sizeof act->close / sizeof act->close[0])
        act->close[act->n_close++] = pipe;
}

static int member_index(const kl_peer *p, uint64_t id)
{
    for (size_t i = 0; i < p->n_members; i++)
        if (p->members[i].id == id)
            return (int)i;
    return -1;
}

static peer_pipe *pipe_find(kl_peer *p, uint32_t id)
{
    for (size_t i = 0; i < PEER_MAX_PIPES; i++)
        if (p->pipes[i].id == id && id != 0)
            return &p->pipes[i];
    return NULL;
}

/* The counters of a new connection. */
static void member_adopt(peer_member *m, uint32_t pipe)
{
    kl_peer_auth_keys_wipe(&m->keys);
    m->pipe = pipe;
    m->connected = false;
    m->hello_due = true;
    m->ack_data = false;
    m->ack_now = false;
    m->tx = m->tx_acked = m->rx = m->rx_acked = 0;
    m->data_hi = 0;
    m->wait_since = 0;
    m->peer_busy = m->busy_told = false;
    m->peer_closing = m->closing_owed = false;
    m->closing_at = 0;
}

/* Under mu: frees the frames queued for m, each counted as dropped. */
static void member_queue_drop(kl_peer *p, peer_member *m)
{
    for (peer_out *o = m->head, *next; o != NULL; o = next) {
        next = o->next;
        msg_free(o->msg);
        free(o);
        p->st.dropped_disconnect++;
    }
    m->head = m->tail = NULL;
    m->q_frames = m->q_bytes = 0;
}

/* Under mu: the member lost its connection; queued frames go with it. */
static void member_drop(kl_peer *p, peer_member *m, peer_act *act)
{
    if (m->connected && act != NULL)
        act->down = m->id;
    m->pipe = 0;
    m->connected = false;
    m->hello_due = false;
    m->wait_since = 0;
    kl_peer_auth_keys_wipe(&m->keys);
    member_queue_drop(p, m);
}

/* Under mu: counts a refused pipe and has it closed and (rate-limited) logged. */
static void refusal_note(kl_peer *p, uint32_t pipe, const char *why, uint64_t claim,
                         peer_act *act)
{
    p->st.refused++;
    act_close(act, pipe);
    if (why != act->refused_buf) /* a copy: why may be a buffer reused before act_run */
        snprintf(act->refused_buf, sizeof act->refused_buf, "%s", why);
    act->refused = act->refused_buf;
    act->refused_pipe = pipe;
    act->refused_claim = claim;
    uint64_t now = peer_now_ms();
    if (p->refusal_logged_at == 0 || now - p->refusal_logged_at >= PEER_REFUSAL_LOG_MS) {
        act->log_refusal = true;
        act->refused_more = p->refusals_unlogged;
        p->refusals_unlogged = 0;
        p->refusal_logged_at = now;
    } else {
        p->refusals_unlogged++;
    }
}

/* Under mu: marks a tracked pipe dead and forgets its keys; its member loses it. */
static void pipe_detach(kl_peer *p, peer_pipe *pp, peer_act *act)
{
    if (pp->member >= 0) {
        peer_member *m = &p->members[pp->member];
        if (m->pipe == pp->id)
            member_drop(p, m, act);
    }
    pp->member = -1;
    pp->dead = true;
    pipe_wipe_secrets(pp);
}

/* Under mu: closes a tracked pipe for a protocol reason. */
static void pipe_refuse(kl_peer *p, peer_pipe *pp, const char *why, uint64_t claim, peer_act *act)
{
    pipe_detach(p, pp, act);
    refusal_note(p, pp->id, why, claim, act);
}

/* Under mu: closes a connection that carried no frame for idle_ms (counted, not logged as
 * a refusal: nothing was wrong with it). */
static void pipe_close_idle(kl_peer *p, peer_pipe *pp, peer_act *act)
{
    pipe_detach(p, pp, act);
    p->st.idle_closed++;
    act_close(act, pp->id);
}

/* Under mu: refuses for a peer_auth failure, the reason naming its detail (never a key). */
static void pipe_refuse_auth(kl_peer *p, peer_pipe *pp, const char *what, const kl_err *e,
                             uint64_t claim, peer_act *act)
{
    snprintf(act->refused_buf, sizeof act->refused_buf, "%s: %s", what, e->detail);
    pipe_refuse(p, pp, act->refused_buf, claim, act);
}

/* Runs what a callback decided; the lock is not held. */
static void flush_cb(uv_idle_t *handle);

static void act_run(kl_peer *p, peer_act *act)
{
    if (act->log_refusal) {
        char addr[80] = "unknown";
        if (!p->tcp_stopped)
            (void)kl_peer_tcp_remote(p->tcp, act->refused_pipe, addr, sizeof addr);
        KL_WARN("peer connection refused",
                "listen=%s remote=%s reason=\"%s\" claimed_member=%" PRIu64
                " refusals_not_logged=%" PRIu64,
                p->listen_url, addr, act->refused, act->refused_claim, act->refused_more);
    }
    if (act->answer != NULL) {
        /* The first frame on a connection nobody else sends on yet: the window is empty. */
        peer_msg *a = act->answer;
        act->answer = NULL;
        if (p->tcp_stopped || kl_peer_tcp_send(p->tcp, a->conn, a, msg_body(a), msg_len(a)) != KL_OK)
            act_close(act, act->answer_pipe);
    }
    for (size_t i = 0; i < act->n_close && !p->tcp_stopped; i++)
        kl_peer_tcp_close(p->tcp, act->close[i]);
    if (act->up != 0)
        KL_INFO("peer connected", "listen=%s member=%" PRIu64, p->listen_url, act->up);
    if (act->down != 0)
        KL_INFO("peer disconnected", "listen=%s member=%" PRIu64, p->listen_url, act->down);
    if (act->wake && !uv_is_active((uv_handle_t *)&p->flush))
        (void)uv_idle_start(&p->flush, flush_cb);
}

/* ------------------------------------------------------------------ sending */

static peer_msg *frame_alloc(uint8_t type, size_t extra)
{
    peer_msg *msg;
    if ((msg = msg_alloc(PEER_HDR + extra)) == NULL)
        return NULL;
    uint8_t *b = msg_body(msg);
    b[0] = type;
    return msg;
}

/* Under mu: the dialer's authenticated HELLO, made by pipe_started. */
static peer_msg *hello_build_auth(kl_peer *p, const peer_member *m)
{
    peer_pipe *pp = pipe_find(p, m->pipe);
    if (pp == NULL || !pp->dial_ready)
        return NULL;
    uint8_t body[KL_PEER_AUTH_MAX];
    size_t n = kl_peer_auth_encode(&pp->dial.hello, body, sizeof body);
    peer_msg *msg = n != 0 ? frame_alloc(PEER_T_HELLO, n) : NULL;
    if (msg != NULL)
        memcpy((uint8_t *)msg_body(msg) + PEER_HDR, body, n);
    return msg;
}

static peer_msg *hello_build(kl_peer *p, const peer_member *m)
{
    if (p->auth)
        return hello_build_auth(p, m);
    peer_msg *msg = frame_alloc(PEER_T_HELLO, PEER_HELLO_FIXED + p->cluster_len);
    if (msg == NULL)
        return NULL;
    uint8_t *b = (uint8_t *)msg_body(msg) + PEER_HDR;
    put_u32(b, PEER_MAGIC);
    b[4] = PEER_VERSION;
    kl_wire_put_u64(b + 5, p->self);
    kl_wire_put_u64(b + 13, m->id);
    b[21] = (uint8_t)p->cluster_len;
    memcpy(b + 22, p->cluster, p->cluster_len);
    return msg;
}

/* Under mu: the inbox is half full. A BATCH frame can bring KL_PEER_BATCH_MAX_FRAMES
 * frames at once, and acks go as frames are read, before recv has seen them, so the window
 * alone does not keep a sender within what recv drains: every frame we send while
 * this holds carries PEER_BUSY, and a peer that saw it sends no data (its frames wait in its
 * own queue) until a frame without it; busy_release sends that frame once the loop drained
 * the inbox. Acks themselves are never held back: the window's accounting stays exact. */
static bool inbox_high(const kl_peer *p)
{
    return p->in_count >= p->max_frames / 2 || p->in_bytes >= p->max_bytes / 2;
}

/* A bare ack goes at once when PEER_ACK_EVERY frames are unreported (half the peer's data
 * window), or when the inbox just became half full (the peer must hear BUSY before it sends
 * more); fewer frames are acknowledged by our next frame or, at the latest, at the next
 * watchdog tick (a delayed ack, so that a reply usually carries it). */
static bool member_ack_wanted(const kl_peer *p, const peer_member *m)
{
    if (m->closing_owed)
        return true; /* the stopping peer closes once it has our answer */
    if (m->busy_told != inbox_high(p))
        return m->busy_told || m->rx > m->rx_acked; /* the peer must learn our state */
    return m->rx > m->rx_acked && (m->ack_now || m->rx - m->rx_acked >= PEER_ACK_EVERY);
}

/* A frame to seal before it goes (authenticated mode): counter and key are taken under mu,
 * the sealing is done by member_pump without it. */
typedef struct peer_seal {
    bool on;
    uint64_t counter;
    size_t pt_len;
    uint8_t key[KL_PEER_AUTH_KEY_LEN];
} peer_seal;

/* Under mu: takes the queue's first frame (its message, header room included). */
static peer_msg *queue_pop(peer_member *m, size_t *len)
{
    peer_out *o = m->head;
    m->head = o->next;
    if (m->head == NULL)
        m->tail = NULL;
    m->q_frames--;
    m->q_bytes -= o->len;
    peer_msg *msg = o->msg;
    *len = o->len;
    free(o);
    return msg;
}

/* Under mu: how many queued frames, from the first, the next data frame carries. The
 * window allows PEER_DATA_WINDOW data frames per round trip (peer.h "Flow control"), so
 * what waited behind a full window leaves as one BATCH frame: its payload,
 * every frame with a length prefix, stays within max_frame, so the receiver's size check is
 * the same for both types. A frame too large to share goes alone. */
static size_t batch_count(const kl_peer *p, const peer_member *m)
{
    size_t k = 0, bytes = 0;
    for (const peer_out *o = m->head; o != NULL && k < KL_PEER_BATCH_MAX_FRAMES; o = o->next) {
        if (bytes + PEER_BATCH_LEN + o->len > p->max_frame)
            break;
        bytes += PEER_BATCH_LEN + o->len;
        k++;
    }
    return k > 0 ? k : 1;
}

/* Under mu: the first k (>= 2) queued frames as one BATCH frame; NULL (nothing taken) when
 * out of memory. The copy is at most max_frame bytes. */
static peer_msg *batch_build(kl_peer *p, peer_member *m, size_t k, size_t *pt_len)
{
    size_t total = 0, i = 0;
    for (const peer_out *o = m->head; i < k; o = o->next, i++)
        total += PEER_BATCH_LEN + o->len;
    size_t at = PEER_HDR + (p->auth ? PEER_CTR : 0);
    peer_msg *msg = frame_alloc(PEER_T_BATCH, total + (p->auth ? PEER_SEAL : 0));
    if (msg == NULL)
        return NULL;
    uint8_t *b = msg_body(msg);
    for (i = 0; i < k; i++) {
        size_t len;
        peer_msg *one = queue_pop(m, &len);
        put_u32(b + at, (uint32_t)len);
        const uint8_t *src = (const uint8_t *)msg_body(one) + PEER_HDR + (p->auth ? PEER_CTR : 0);
        memcpy(b + at + PEER_BATCH_LEN, src, len);
        at += PEER_BATCH_LEN + len;
        msg_free(one);
    }
    *pt_len = total;
    return msg;
}

/* Under mu: stamps the frame about to go to m (its index, our cumulative ack, the type
 * flags) and addresses it. */
static void member_stamp(peer_member *m, peer_msg *msg, peer_seal *seal, uint8_t flags)
{
    if (seal->on) {
        /* The frame's index on the connection, the hello being frame 0. */
        seal->counter = m->tx;
        memcpy(seal->key, m->keys.tx, sizeof seal->key);
    }
    uint8_t *hdr = msg_body(msg);
    m->busy_told = (flags & PEER_BUSY) != 0 && hdr[0] != PEER_T_HELLO;
    if (hdr[0] != PEER_T_HELLO)
        hdr[0] |= flags; /* before sealing: the type byte is authenticated data */
    kl_wire_put_u64(hdr + 1, m->rx);
    m->rx_acked = m->rx;
    m->ack_data = false;
    m->ack_now = false;
    m->closing_owed = false; /* any frame acknowledges the peer's notice */
    m->tx++;
    msg->conn = m->pipe;
}

/* Under mu, while stopping: what the member may still be sent. First our closing notice (a
 * bare ack with PEER_CLOSING: send no more data, and answer); until the peer's answer
 * acknowledged it, the acks its window needs; and, always, the answer a closing notice of
 * the peer is owed. Everything carries PEER_CLOSING, nothing carries data. */
static peer_msg *member_next_closing(kl_peer *p, peer_member *m, peer_seal *seal)
{
    if (!m->connected || m->tx - m->tx_acked >= PEER_WINDOW)
        return NULL; /* handshaking (it gets no notice), or the peer's acks will pump us */
    bool notice = m->closing_at == 0;
    bool answered = !notice && m->tx_acked >= m->closing_at;
    if (!notice && !m->closing_owed && (answered || !member_ack_wanted(p, m)))
        return NULL;
    peer_msg *msg = frame_alloc(PEER_T_ACK, p->auth ? PEER_SEAL : 0);
    if (msg == NULL)
        return NULL; /* the quiesce bound closes the socket anyway */
    seal->on = p->auth;
    seal->pt_len = 0;
    member_stamp(m, msg, seal, PEER_CLOSING);
    if (notice)
        m->closing_at = m->tx;
    return msg;
}

/* Under mu: the next frame the member may send now, stamped and addressed, or NULL;
 * *n_data = the data frames it carries (0: a hello or a bare ack). */
static peer_msg *member_next(kl_peer *p, peer_member *m, size_t *n_data, peer_seal *seal)
{
    *n_data = 0;
    seal->on = false;
    if (m->pipe == 0)
        return NULL;
    if (p->stopping)
        return member_next_closing(p, m, seal);
    uint64_t out = m->tx - m->tx_acked;
    peer_msg *msg = NULL;
    bool counts = true; /* a hello or data frame must be acknowledged */
    if (m->hello_due) {
        if ((msg = hello_build(p, m)) == NULL)
            return NULL; /* out of memory: the handshake watchdog closes the pipe */
        m->hello_due = false;
    } else if (!m->connected) {
        return NULL;
    } else if (out < PEER_DATA_WINDOW && m->head != NULL && !m->peer_busy && !m->peer_closing &&
               !m->tcp_full) {
        size_t k = batch_count(p, m);
        if (k > 1) {
            if ((msg = batch_build(p, m, k, &seal->pt_len)) == NULL)
                return NULL; /* out of memory: the frames stay queued */
        } else {
            msg = queue_pop(m, &seal->pt_len);
        }
        seal->on = p->auth;
        *n_data = k;
        p->st.sent += k;
        p->st.coalesced += k - 1;
    } else if (out < PEER_WINDOW && member_ack_wanted(p, m)) {
        if ((msg = frame_alloc(PEER_T_ACK, p->auth ? PEER_SEAL : 0)) == NULL)
            return NULL; /* the next frame will carry the ack */
        seal->on = p->auth;
        seal->pt_len = 0;
        counts = false;
    } else {
        return NULL;
    }
    member_stamp(m, msg, seal, inbox_high(p) ? PEER_BUSY : 0);
    if (counts) {
        m->data_hi = m->tx;
        if (m->wait_since == 0)
            m->wait_since = peer_now_ms();
    }
    return msg;
}

/* Lock not held: sends what the member may send now. */
static void member_pump(kl_peer *p, peer_member *m)
{
    uv_mutex_lock(&p->mu);
    if (m->pumping || p->tcp_stopped) {
        uv_mutex_unlock(&p->mu);
        return;
    }
    m->pumping = true;
    for (;;) {
        size_t n_data;
        peer_seal seal;
        /* The transport holds more than a frame for this connection already: data waits
         * (and coalesces) in the member's queue until the writes drain (tcp_drained). */
        m->tcp_full = m->pipe != 0 &&
                      kl_peer_tcp_queued(p->tcp, m->pipe) > PEER_TCP_QUEUED_SOFT(p->max_frame);
        peer_msg *msg = member_next(p, m, &n_data, &seal);
        if (msg == NULL)
            break;
        uint32_t pipe = m->pipe;
        uv_mutex_unlock(&p->mu);
        if (seal.on) {
            (void)kl_peer_auth_seal(seal.key, seal.counter, msg_body(msg), PEER_HDR,
                                    seal.pt_len);
            sodium_memzero(seal.key, sizeof seal.key);
        }
        kl_code rc = kl_peer_tcp_send(p->tcp, pipe, msg, msg_body(msg), msg_len(msg));
        uv_mutex_lock(&p->mu);
        if (rc != KL_OK) {
            /* Only a connection already closing, or one past the transport's hard bound
             * (which the soft bound above keeps it from): the frame still counts as sent
             * in the window, so the connection would stall. Close it; the dialer redials. */
            p->st.sent -= n_data;
            p->st.dropped_nng += n_data;
            if (!p->stopping && rc == KL_RESOURCE_EXHAUSTED) {
                uv_mutex_unlock(&p->mu);
                KL_WARN("peer send refused; reconnecting",
                        "listen=%s member=%" PRIu64 " reason=\"send queue over its bound\"",
                        p->listen_url, m->id);
                kl_peer_tcp_close(p->tcp, pipe);
                uv_mutex_lock(&p->mu);
            }
            break;
        }
    }
    m->pumping = false;
    uv_mutex_unlock(&p->mu);
}

kl_code kl_peer_send(kl_peer *p, uint64_t to, const uint8_t *frame, size_t len)
{
    if (p == NULL || (frame == NULL && len > 0) || len > p->max_frame)
        return KL_INVALID_ARGUMENT;
    int idx = member_index(p, to);
    if (idx < 0)
        return KL_INVALID_ARGUMENT;
    peer_member *m = &p->members[idx];

    uv_mutex_lock(&p->mu);
    bool up = m->connected && !m->peer_closing && !p->stopping;
    bool room = m->q_frames < p->max_frames && len <= p->max_bytes - m->q_bytes;
    if (!up)
        p->st.dropped_unavailable++;
    else if (!room)
        p->st.dropped_queue_full++;
    uv_mutex_unlock(&p->mu);
    if (!up)
        return KL_UNAVAILABLE;
    if (!room)
        return KL_RESOURCE_EXHAUSTED;

    /* Copy outside the lock: frames can be megabytes. Authenticated mode leaves room for the
     * counter before and the tag after the payload; member_pump seals in place. */
    peer_out *o = malloc(sizeof *o);
    peer_msg *msg = frame_alloc(PEER_T_DATA, len + (p->auth ? PEER_SEAL : 0));
    if (o == NULL || msg == NULL) {
        free(o);
        if (msg != NULL)
            msg_free(msg);
        uv_mutex_lock(&p->mu);
        p->st.dropped_queue_full++;
        uv_mutex_unlock(&p->mu);
        return KL_RESOURCE_EXHAUSTED;
    }
    if (len > 0)
        memcpy((uint8_t *)msg_body(msg) + PEER_HDR + (p->auth ? PEER_CTR : 0), frame, len);
    o->next = NULL;
    o->msg = msg;
    o->len = len;

    /* The connection may have changed while we copied: check again. */
    uv_mutex_lock(&p->mu);
    kl_code rc = KL_OK;
    if (!m->connected || m->peer_closing || p->stopping) {
        p->st.dropped_unavailable++;
        rc = KL_UNAVAILABLE;
    } else if (m->q_frames >= p->max_frames || len > p->max_bytes - m->q_bytes) {
        p->st.dropped_queue_full++;
        rc = KL_RESOURCE_EXHAUSTED;
    } else {
        if (m->tail != NULL)
            m->tail->next = o;
        else
            m->head = o;
        m->tail = o;
        m->q_frames++;
        m->q_bytes += len;
    }
    uv_mutex_unlock(&p->mu);
    if (rc != KL_OK) {
        msg_free(msg);
        free(o);
        return rc;
    }
    member_pump(p, m);
    return KL_OK;
}

/* ------------------------------------------------------------------ receiving */

/* ---- replication configuration in the hello ---- */

#define PEER_CFG_MARK "/cfg"
#define PEER_CFG_DIGEST_HEX 24 /* 12 digest bytes: enough to tell configurations apart */

typedef struct peer_cfg_member {
    uint64_t id;
    const char *url;
    const uint8_t *pk; /* NULL = none */
} peer_cfg_member;

static int cfg_member_cmp(const void *a, const void *b)
{
    uint64_t x = ((const peer_cfg_member *)a)->id, y = ((const peer_cfg_member *)b)->id;
    return x < y ? -1 : x > y;
}

static void cfg_hash_str(crypto_generichash_state *h, const char *s)
{
    uint8_t n[8];
    kl_wire_put_u64(n, s != NULL ? strlen(s) : 0);
    crypto_generichash_update(h, n, sizeof n);
    if (s != NULL)
        crypto_generichash_update(h, (const uint8_t *)s, strlen(s));
}

/* The digest of what every member of the partition must agree on (peer.h). */
static void cfg_digest(const kl_peer_config *cfg, uint8_t out[PEER_CFG_DIGEST_HEX / 2])
{
    peer_cfg_member ms[KL_PEER_MAX_PEERS + 1];
    size_t n = 0;
    ms[n++] = (peer_cfg_member){cfg->self, cfg->listen_url,
                                cfg->member_secret != NULL ? cfg->member_secret + 32 : NULL};
    for (size_t i = 0; i < cfg->n_peers && n < KL_PEER_MAX_PEERS + 1; i++)
        ms[n++] = (peer_cfg_member){cfg->peers[i].id, cfg->peers[i].url, cfg->peers[i].public_key};
    qsort(ms, n, sizeof ms[0], cfg_member_cmp);
    crypto_generichash_state h;
    uint8_t u[8];
    crypto_generichash_init(&h, NULL, 0, PEER_CFG_DIGEST_HEX / 2);
    cfg_hash_str(&h, "keyload.peer.config.v1");
    cfg_hash_str(&h, cfg->cluster);
    kl_wire_put_u64(u, (uint64_t)(uint32_t)cfg->partition);
    crypto_generichash_update(&h, u, sizeof u);
    kl_wire_put_u64(u, cfg->config_index);
    crypto_generichash_update(&h, u, sizeof u);
    kl_wire_put_u64(u, cfg->replica_count);
    crypto_generichash_update(&h, u, sizeof u);
    for (size_t i = 0; i < n; i++) {
        kl_wire_put_u64(u, ms[i].id);
        crypto_generichash_update(&h, u, sizeof u);
        cfg_hash_str(&h, ms[i].url); /* as the cluster file writes it; NULL hashes as "" */
        uint8_t has = ms[i].pk != NULL;
        crypto_generichash_update(&h, &has, 1);
        if (has)
            crypto_generichash_update(&h, ms[i].pk, KL_PEER_PUBLIC_LEN);
    }
    crypto_generichash_final(&h, out, PEER_CFG_DIGEST_HEX / 2);
}

/* What hellos carry as the cluster: "NAME/cfgINDEX-DIGESTHEX" (printable, so it also fits
 * peer_auth's NUL-terminated cluster string), or the bare name without a configuration. */
static char *cfg_identity(const kl_peer_config *cfg)
{
    size_t cap = strlen(cfg->cluster) + sizeof PEER_CFG_MARK + 21 + 1 + PEER_CFG_DIGEST_HEX + 1;
    char *out = malloc(cap);
    if (out == NULL || cfg->replica_count == 0) {
        free(out);
        return strdup(cfg->cluster);
    }
    uint8_t d[PEER_CFG_DIGEST_HEX / 2];
    char hex[PEER_CFG_DIGEST_HEX + 1];
    cfg_digest(cfg, d);
    sodium_bin2hex(hex, sizeof hex, d, sizeof d);
    snprintf(out, cap, "%s" PEER_CFG_MARK "%" PRIu64 "-%s", cfg->cluster, cfg->config_index, hex);
    return out;
}

typedef enum { CFG_SAME, CFG_OTHER_INDEX, CFG_OTHER_CLUSTER, CFG_MISMATCH } cfg_verdict;

/* Compares a hello's cluster bytes with ours; on CFG_MISMATCH why names both sides. */
static cfg_verdict cfg_compare(const kl_peer *p, const uint8_t *c, size_t len, char *why, size_t cap)
{
    if (len == p->cluster_len && memcmp(c, p->cluster, len) == 0)
        return CFG_SAME;
    if (!p->has_config || len < p->name_len || memcmp(c, p->cluster, p->name_len) != 0)
        return CFG_OTHER_CLUSTER;
    const char *ours = p->cluster + p->name_len;
    char theirs[96];
    size_t tl = len - p->name_len < sizeof theirs - 1 ? len - p->name_len : sizeof theirs - 1;
    memcpy(theirs, c + p->name_len, tl);
    theirs[tl] = '\0';
    size_t mark = strlen(PEER_CFG_MARK);
    if (tl == 0 || strncmp(theirs, PEER_CFG_MARK, mark) != 0) {
        if (tl != 0)
            return CFG_OTHER_CLUSTER; /* a longer name that merely starts like ours */
        snprintf(why, cap, "replication configuration: ours %s, theirs none", ours + mark);
        return CFG_MISMATCH;
    }
    char *end = NULL;
    unsigned long long idx = strtoull(theirs + mark, &end, 10);
    if (end == NULL || *end != '-')
        return CFG_OTHER_CLUSTER;
    if (idx != p->config_index || idx == 0)
        return CFG_OTHER_INDEX; /* index 0: a member with no seed to compare (peer.h kl_peer_add) */
    snprintf(why, cap,
             "replication configuration differs at index %llu (members, peer URLs, keys, "
             "replica_count or partition): digest ours %s, theirs %s",
             idx, strchr(ours, '-') + 1, end + 1);
    return CFG_MISMATCH;
}

/* Under mu: checks a plain hello; returns the member index it names or -1 with *why set. */
static int hello_check(const kl_peer *p, const peer_pipe *pp, const uint8_t *b, size_t len,
                       uint64_t *claim, const char **why)
{
    *claim = 0;
    if (len < PEER_HDR + PEER_HELLO_FIXED || get_u32(b + PEER_HDR) != PEER_MAGIC) {
        *why = "malformed hello";
        return -1;
    }
    const uint8_t *h = b + PEER_HDR;
    if (h[4] != PEER_VERSION) {
        *why = h[4] == KL_PEER_AUTH_VERSION
                   ? "authenticated hello, but this member runs without member keys"
                   : "unsupported protocol version";
        return -1;
    }
    uint64_t from = kl_wire_get_u64(h + 5);
    uint64_t to = kl_wire_get_u64(h + 13);
    size_t clen = h[21];
    *claim = from;
    if (len != PEER_HDR + PEER_HELLO_FIXED + clen) {
        *why = "malformed hello";
        return -1;
    }
    cfg_verdict v = cfg_compare(p, h + 22, clen, ((kl_peer *)p)->cfg_why, sizeof p->cfg_why);
    if (v == CFG_OTHER_CLUSTER) {
        *why = "another cluster";
        return -1;
    }
    if (v == CFG_MISMATCH) {
        ((kl_peer *)p)->st.config_mismatch++;
        *why = p->cfg_why;
        return -1;
    }
    if (to != p->self) {
        *why = "hello addressed to another member";
        return -1;
    }
    int idx = member_index(p, from);
    if (idx < 0) {
        *why = "unknown member";
        return -1;
    }
    if (pp->dialed ? idx != pp->member : from < p->self) {
        /* We dial lower ids; higher ids dial us. Anything else is a misconfiguration (or a
         * member answering on a URL that belongs to another). */
        *why = pp->dialed ? "dialed URL answered as another member" : "member should be dialed";
        return -1;
    }
    return idx;
}

/* Under mu: pipe pp becomes member m's connection; an older one of the member (it
 * restarted before its old TCP connection was seen to die) is closed. */
static void member_take_pipe(kl_peer *p, peer_member *m, peer_pipe *pp, int idx, peer_act *act)
{
    if (m->pipe != 0 && m->pipe != pp->id) {
        peer_pipe *old = pipe_find(p, m->pipe);
        if (old != NULL) {
            old->member = -1;
            old->dead = true;
            pipe_wipe_secrets(old);
        }
        act_close(act, m->pipe);
        member_drop(p, m, NULL);
    }
    pp->member = idx;
    member_adopt(m, pp->id);
}

/* Under mu: the handshake completed on pp (both hellos crossed; authenticated listener: the
 * first sealed frame opened), whose peer acknowledged `ack` of our frames. */
static void member_connected(kl_peer *p, peer_member *m, peer_pipe *pp, uint64_t ack,
                             peer_act *act)
{
    pp->hello_rx = true;
    m->connected = true;
    m->tx_acked = ack;
    if (m->tx_acked >= m->data_hi)
        m->wait_since = 0;
    m->rx = 1;
    m->ack_data = true;
    p->st.connects++;
    act->up = m->id;
    act->pump = m;
}

/* Under mu: the first frame on a pipe (plain mode). */
static void pipe_handshake(kl_peer *p, peer_pipe *pp, const uint8_t *b, size_t len, peer_act *act)
{
    uint64_t claim = 0;
    const char *why = NULL;
    if (b[0] != PEER_T_HELLO) {
        pipe_refuse(p, pp, "frame before hello", 0, act);
        return;
    }
    int idx = hello_check(p, pp, b, len, &claim, &why);
    if (idx < 0) {
        pipe_refuse(p, pp, why, claim, act);
        return;
    }
    peer_member *m = &p->members[idx];
    uint64_t ack = kl_wire_get_u64(b + 1);
    if (!pp->dialed) {
        /* The dialer speaks first, so its hello acknowledges nothing. */
        if (ack != 0) {
            pipe_refuse(p, pp, "hello acknowledges frames never sent", claim, act);
            return;
        }
        member_take_pipe(p, m, pp, idx, act);
    } else if (m->pipe != pp->id || ack != m->tx) {
        /* We sent our hello (tx 1) before anything else; the answer must acknowledge it. */
        pipe_refuse(p, pp, "hello does not acknowledge ours", claim, act);
        return;
    }
    member_connected(p, m, pp, ack, act);
}

/* Under mu: one received data frame (payload only) into the inbox, or counted as dropped.
 * Takes msg. */
static void inbox_put(kl_peer *p, uint64_t from, peer_msg *msg, peer_act *act)
{
    size_t plen = msg_len(msg);
    if (p->in_count >= p->max_frames || plen > p->max_bytes - p->in_bytes) {
        p->st.dropped_inbox_full++;
        msg_free(msg);
        return;
    }
    size_t slot = (p->in_head + p->in_count) % p->max_frames;
    p->inbox[slot].from = from;
    p->inbox[slot].msg = msg;
    p->inbox[slot].read_ns = uv_hrtime();
    p->in_count++;
    p->in_bytes += plen;
    act->wake = true;
}

/* Under mu: a BATCH frame's payload, every frame in it delivered in order as if it had come
 * alone. The whole payload is checked first: a malformed one (a length past the end, fewer
 * than two frames, more than the batch bound) is a protocol error and nothing of it is
 * delivered. Takes msg. */
static void batch_deliver(kl_peer *p, peer_pipe *pp, peer_msg *msg, peer_act *act)
{
    peer_member *m = &p->members[pp->member];
    const uint8_t *b = msg_body(msg);
    size_t len = msg_len(msg), n = 0;
    if (len > p->max_frame) {
        p->st.dropped_oversize++; /* as a DATA frame of that size would be */
        msg_free(msg);
        return;
    }
    size_t at = 0;
    while (at < len && n <= KL_PEER_BATCH_MAX_FRAMES) {
        if (len - at < PEER_BATCH_LEN || get_u32(b + at) > len - at - PEER_BATCH_LEN)
            break;
        at += PEER_BATCH_LEN + get_u32(b + at);
        n++;
    }
    if (at != len || n < 2 || n > KL_PEER_BATCH_MAX_FRAMES) {
        pipe_refuse(p, pp, "malformed batch frame", m->id, act);
        msg_free(msg);
        return;
    }
    for (at = 0; at < len;) {
        uint32_t one = get_u32(b + at);
        peer_msg *sub;
        if ((sub = msg_alloc(one)) == NULL) {
            p->st.dropped_inbox_full++; /* no memory: lost like a frame with no room */
        } else {
            memcpy(msg_body(sub), b + at + PEER_BATCH_LEN, one);
            inbox_put(p, m->id, sub, act);
        }
        at += PEER_BATCH_LEN + one;
    }
    msg_free(msg);
}

/* Under mu: a frame on a connected pipe, already checked (and opened): its type and ack,
 * and msg holding the payload only. Takes msg. */
static void pipe_frame(kl_peer *p, peer_pipe *pp, uint8_t type, uint64_t ack, peer_msg *msg,
                       peer_act *act)
{
    peer_member *m = &p->members[pp->member];
    bool closing = (type & PEER_CLOSING) != 0;
    m->peer_busy = (type & PEER_BUSY) != 0 && type != PEER_T_HELLO;
    type = (uint8_t)(type & ~(PEER_BUSY | PEER_CLOSING));
    if (closing && type != PEER_T_ACK) {
        pipe_refuse(p, pp, "closing flag on a frame other than an ack", m->id, act);
        msg_free(msg);
        return;
    }
    if (closing && !m->peer_closing) {
        /* It waits for our answer before it closes, so that no frame is cut in half. */
        m->peer_closing = true;
        m->closing_owed = true;
        p->st.peer_closings++;
    }
    if (ack > m->tx) {
        pipe_refuse(p, pp, "ack of frames never sent", m->id, act);
        msg_free(msg);
        return;
    }
    if (ack > m->tx_acked) {
        m->tx_acked = ack;
        m->wait_since = m->tx_acked >= m->data_hi ? 0 : peer_now_ms();
    }
    m->rx++;
    act->pump = m;
    switch (type) {
    case PEER_T_ACK:
        msg_free(msg);
        return;
    case PEER_T_DATA:
        break;
    case PEER_T_BATCH:
        m->ack_data = true;
        if (p->stopping) {
            msg_free(msg); /* nothing is delivered after stop */
            return;
        }
        batch_deliver(p, pp, msg, act);
        return;
    default:
        pipe_refuse(p, pp, type == PEER_T_HELLO ? "second hello" : "unknown frame type", m->id,
                    act);
        msg_free(msg);
        return;
    }
    m->ack_data = true;
    if (p->stopping) {
        msg_free(msg);
        return;
    }
    if (msg_len(msg) > p->max_frame) {
        p->st.dropped_oversize++;
        msg_free(msg);
        return;
    }
    inbox_put(p, m->id, msg, act);
}

/* Under mu, which it releases and takes again: re-finds pipe after the unlocked part. NULL
 * when it went away, was refused or replaced meanwhile, or (handshakes only: a stopping
 * member completes none, but it still reads its connections' frames) the peer is
 * stopping. */
static peer_pipe *pipe_again_if(kl_peer *p, uint32_t pipe, bool handshake)
{
    peer_pipe *pp = handshake && p->stopping ? NULL : pipe_find(p, pipe);
    return pp == NULL || pp->dead ? NULL : pp;
}

static peer_pipe *pipe_again(kl_peer *p, uint32_t pipe) { return pipe_again_if(p, pipe, true); }

/* Under mu (released meanwhile): the ANSWER to our HELLO on a pipe we dialed. Takes msg. */
static void auth_dialer_answer(kl_peer *p, peer_pipe *pp, peer_msg *msg, peer_act *act)
{
    const uint8_t *b = msg_body(msg);
    size_t len = msg_len(msg);
    uint32_t pipe = pp->id;
    peer_member *m = &p->members[pp->member];
    uint64_t ack = kl_wire_get_u64(b + 1);
    if (m->pipe != pipe || ack != m->tx || !pp->dial_ready) {
        pipe_refuse(p, pp, pp->dial_ready ? "hello does not acknowledge ours"
                                          : "answer without a hello of ours", m->id, act);
        msg_free(msg);
        return;
    }
    kl_peer_auth_dial dial = pp->dial; /* a copy: the slot may be wiped meanwhile */
    uv_mutex_unlock(&p->mu);

    kl_err e;
    kl_peer_auth_msg answer;
    kl_peer_auth_keys keys;
    memset(&keys, 0, sizeof keys);
    kl_code rc = kl_peer_auth_decode(b + PEER_HDR, len - PEER_HDR, &answer, &e);
    if (rc == KL_OK)
        rc = kl_peer_auth_finish(&dial, &answer, m->public_key, peer_wall_ms(), p->max_skew_ms,
                                 &keys, &e);
    kl_peer_auth_dial_wipe(&dial);
    msg_free(msg);

    uv_mutex_lock(&p->mu);
    if ((pp = pipe_again(p, pipe)) == NULL || m->pipe != pipe) {
        kl_peer_auth_keys_wipe(&keys);
        return;
    }
    if (rc != KL_OK) {
        pipe_refuse_auth(p, pp,
                         strcmp(e.detail, "version") == 0 ? "unauthenticated hello refused"
                                                          : "peer answer refused",
                         &e, m->id, act);
        return;
    }
    pipe_wipe_secrets(pp);
    m->keys = keys;
    kl_peer_auth_keys_wipe(&keys);
    member_connected(p, m, pp, ack, act);
    /* Key confirmation: the listener connects only once our first sealed frame opened, so
     * one goes at once (data if any is queued, else a bare ack). */
    m->ack_now = true;
}

/* Under mu (released meanwhile): a dialer's HELLO on a pipe our listener accepted. Takes
 * msg. */
static void auth_listener_hello(kl_peer *p, peer_pipe *pp, peer_msg *msg, peer_act *act)
{
    const uint8_t *b = msg_body(msg);
    size_t len = msg_len(msg);
    uint32_t pipe = pp->id;
    if (kl_wire_get_u64(b + 1) != 0) {
        /* The dialer speaks first, so its hello acknowledges nothing. */
        pipe_refuse(p, pp, "hello acknowledges frames never sent", 0, act);
        msg_free(msg);
        return;
    }
    uv_mutex_unlock(&p->mu);

    kl_err e;
    kl_peer_auth_msg hello, answer;
    kl_peer_auth_keys keys;
    memset(&keys, 0, sizeof keys);
    const char *why = NULL;
    char cfg_why[sizeof p->cfg_why];
    cfg_verdict cfg = CFG_SAME;
    int idx = -1;
    kl_code rc = kl_peer_auth_decode(b + PEER_HDR, len - PEER_HDR, &hello, &e);
    if (rc != KL_OK) {
        why = strcmp(e.detail, "version") == 0 ? "unauthenticated hello refused"
                                                : "malformed hello";
        if (len >= PEER_HDR + PEER_HELLO_FIXED && b[PEER_HDR + 4] == PEER_VERSION)
            hello.from = kl_wire_get_u64(b + PEER_HDR + 5); /* for the log: whom a plain hello claims */
    } else if ((idx = member_index(p, hello.from)) < 0) {
        why = "unknown member";
    } else if (hello.from < p->self) {
        why = "member should be dialed";
    } else {
        kl_peer_auth_self me = peer_auth_self(p);
        char theirs[KL_PEER_AUTH_CLUSTER_MAX + 1];
        cfg = cfg_compare(p, hello.cluster, hello.cluster_len, cfg_why, sizeof cfg_why);
        if (cfg == CFG_MISMATCH || cfg == CFG_OTHER_INDEX) {
            /* Checked under the dialer's identity, so that only a member that proves its
             * key is told (and counted) as differing; another index is answered so. */
            memcpy(theirs, hello.cluster, hello.cluster_len);
            theirs[hello.cluster_len] = '\0';
            me.cluster = theirs;
        }
        rc = kl_peer_auth_accept(&me, &hello, p->members[idx].public_key, peer_wall_ms(),
                                 p->max_skew_ms, &answer, &keys, &e);
        if (rc == KL_OK && cfg == CFG_MISMATCH) {
            kl_peer_auth_keys_wipe(&keys);
            why = cfg_why;
        }
    }
    msg_free(msg);
    peer_msg *out = NULL;
    if (why == NULL && rc == KL_OK) {
        uint8_t body[KL_PEER_AUTH_MAX];
        size_t n = kl_peer_auth_encode(&answer, body, sizeof body);
        if (n != 0 && (out = frame_alloc(PEER_T_HELLO, n)) != NULL) {
            memcpy((uint8_t *)msg_body(out) + PEER_HDR, body, n);
            kl_wire_put_u64((uint8_t *)msg_body(out) + 1, 1); /* acknowledges the HELLO */
            out->conn = pipe;
        }
    }

    uv_mutex_lock(&p->mu);
    if ((pp = pipe_again(p, pipe)) == NULL) {
        kl_peer_auth_keys_wipe(&keys);
        if (out != NULL)
            msg_free(out);
        return;
    }
    if (why != NULL) {
        if (cfg == CFG_MISMATCH) {
            p->st.config_mismatch++;
            snprintf(p->cfg_why, sizeof p->cfg_why, "%s", cfg_why);
            why = p->cfg_why;
        }
        pipe_refuse(p, pp, why, hello.from, act);
    } else if (rc != KL_OK) {
        pipe_refuse_auth(p, pp, "peer hello refused", &e, hello.from, act);
    } else if (out == NULL) {
        pipe_refuse(p, pp, "out of memory for the answer", hello.from, act);
    } else {
        /* Not the member's connection yet: that waits for the first sealed frame. */
        pp->member = idx;
        pp->confirming = true;
        pp->keys = keys;
        act->answer = out;
        act->answer_pipe = pipe;
        out = NULL;
    }
    kl_peer_auth_keys_wipe(&keys);
    if (out != NULL)
        msg_free(out);
}

/* Under mu (released meanwhile): a DATA or ACK frame on a pipe in authenticated mode,
 * connected or confirming. Opens it with the expected counter, adopts a confirming pipe and
 * passes the payload on. Takes msg. */
static void auth_frame(kl_peer *p, peer_pipe *pp, peer_msg *msg, peer_act *act)
{
    uint8_t *b = msg_body(msg);
    size_t len = msg_len(msg);
    uint32_t pipe = pp->id;
    uint8_t type = b[0];
    uint64_t ack = kl_wire_get_u64(b + 1);
    peer_member *m = &p->members[pp->member];
    uint64_t claim = m->id;
    uint8_t base = (uint8_t)(type & ~(PEER_BUSY | PEER_CLOSING));
    if (base != PEER_T_DATA && base != PEER_T_ACK && base != PEER_T_BATCH) {
        pipe_refuse(p, pp, type == PEER_T_HELLO ? "second hello" : "unknown frame type", claim,
                    act);
        msg_free(msg);
        return;
    }
    bool confirming = pp->confirming;
    uint8_t key[KL_PEER_AUTH_KEY_LEN];
    memcpy(key, confirming ? pp->keys.rx : m->keys.rx, sizeof key);
    /* The frame's index on the connection, the hello being frame 0; nothing else advances
     * m->rx while this frame is being opened (frames of a connection are handled in turn). */
    uint64_t expected = confirming ? 1 : m->rx;
    uv_mutex_unlock(&p->mu);

    kl_err e;
    size_t plen = 0;
    kl_code rc = kl_peer_auth_open(key, expected, b, len, PEER_HDR, &plen, &e);
    sodium_memzero(key, sizeof key);
    if (rc == KL_OK) {
        msg_trim(msg, PEER_HDR + PEER_CTR);
        msg_chop(msg, KL_PEER_AUTH_TAG_LEN);
    }

    uv_mutex_lock(&p->mu);
    if ((pp = pipe_again_if(p, pipe, confirming)) == NULL || pp->confirming != confirming ||
        (!confirming && m->pipe != pipe)) {
        msg_free(msg);
        return;
    }
    if (rc != KL_OK) {
        pipe_refuse_auth(p, pp, "peer frame refused", &e, claim, act);
        msg_free(msg);
        return;
    }
    if (confirming) {
        /* Key confirmation: the dialer holds the secret of the HELLO it signed. Now the
         * pipe becomes the member's connection (replacing an older one), with our ANSWER
         * as its frame 0. */
        int idx = pp->member;
        member_take_pipe(p, m, pp, idx, act);
        m->keys = pp->keys;
        pipe_wipe_secrets(pp);
        m->hello_due = false;
        m->tx = 1;
        m->data_hi = 1;
        m->wait_since = peer_now_ms();
        member_connected(p, m, pp, 0, act);
        m->rx_acked = 1; /* our ANSWER acknowledged the HELLO */
        m->ack_data = false;
    }
    pipe_frame(p, pp, type, ack, msg, act);
}

/* Under mu (released meanwhile): a frame on a pipe in authenticated mode. Takes msg. */
static void auth_recv(kl_peer *p, peer_pipe *pp, peer_msg *msg, peer_act *act)
{
    const uint8_t *b = msg_body(msg);
    if (pp->hello_rx || pp->confirming) {
        auth_frame(p, pp, msg, act);
        return;
    }
    if (b[0] != PEER_T_HELLO) {
        pipe_refuse(p, pp, "frame before hello", 0, act);
        msg_free(msg);
        return;
    }
    if (pp->dialed)
        auth_dialer_answer(p, pp, msg, act);
    else
        auth_listener_hello(p, pp, msg, act);
}

/* Transport event: one received frame on connection `pipe`. */
static void tcp_frame(void *owner, uint32_t pipe, const uint8_t *body, size_t len)
{
    kl_peer *p = owner;
    peer_act act = {0};
    peer_msg *msg = msg_alloc(len);
    if (msg == NULL) {
        uv_mutex_lock(&p->mu);
        p->st.dropped_inbox_full++; /* no memory: lost like a frame with no room; Raft retries */
        uv_mutex_unlock(&p->mu);
        return;
    }
    memcpy(msg_body(msg), body, len);

    uv_mutex_lock(&p->mu);
    p->last_rx = peer_now_ms();
    peer_pipe *pp = pipe_find(p, pipe);
    if (pp != NULL)
        pp->last_rx = p->last_rx;
    if (pp != NULL && p->stopping &&
        (!pp->hello_rx || pp->member < 0 || p->members[pp->member].pipe != pipe))
        pp = NULL; /* stopping: only connections still count (their acks and notices) */
    if (pp == NULL || pp->dead) {
        /* A pipe already removed, one refused or replaced, or a handshake while stopping:
         * its frames are stale. */
        msg_free(msg);
    } else if (msg_len(msg) < PEER_HDR) {
        pipe_refuse(p, pp, "short frame", 0, &act);
        msg_free(msg);
    } else if (p->auth) {
        auth_recv(p, pp, msg, &act);
    } else if (!pp->hello_rx) {
        pipe_handshake(p, pp, msg_body(msg), msg_len(msg), &act);
        msg_free(msg);
    } else {
        const uint8_t *b = msg_body(msg);
        uint8_t type = b[0];
        uint64_t ack = kl_wire_get_u64(b + 1);
        msg_trim(msg, PEER_HDR);
        pipe_frame(p, pp, type, ack, msg, &act);
    }
    uv_mutex_unlock(&p->mu);

    act_run(p, &act);
    if (act.pump != NULL)
        member_pump(p, act.pump);
}

/* ------------------------------------------------------------------ pipe events */

static void pipe_added(kl_peer *p, uint32_t id, uint32_t dialer, peer_act *act)
{
    uv_mutex_lock(&p->mu);
    if (p->stopping) {
        uv_mutex_unlock(&p->mu);
        return; /* the socket is closing and takes the pipe with it */
    }
    int member = -1;
    if (dialer != 0)
        for (size_t i = 0; i < p->n_members; i++)
            if (p->members[i].dialer == dialer)
                member = (int)i;
    peer_pipe *slot = NULL;
    size_t open = 0;
    for (size_t i = 0; i < PEER_MAX_PIPES; i++) {
        if (p->pipes[i].id != 0)
            open++;
        else if (slot == NULL)
            slot = &p->pipes[i];
    }
    if (open >= p->max_pipes)
        slot = NULL;
    if (slot == NULL || (dialer != 0 && member < 0)) {
        if (slot == NULL)
            p->st.refused_cap++;
        refusal_note(p, id, slot == NULL ? "too many connections (peer_max)" : "pipe from an unknown dialer",
                     0, act);
        uv_mutex_unlock(&p->mu);
        return;
    }
    *slot = (peer_pipe){.id = id, .member = member, .dialed = member >= 0,
                        .since = peer_now_ms()};
    uv_mutex_unlock(&p->mu);
}

static void pipe_started(kl_peer *p, uint32_t id, peer_act *act)
{
    /* Authenticated mode: our HELLO (a key pair and a signature) is made without the lock,
     * for the member this dialed pipe belongs to. */
    kl_peer_auth_dial dial;
    memset(&dial, 0, sizeof dial);
    bool have_dial = false;
    if (p->auth) {
        uv_mutex_lock(&p->mu);
        peer_pipe *pp = p->stopping ? NULL : pipe_find(p, id);
        uint64_t to = pp != NULL && pp->dialed && !pp->dead ? p->members[pp->member].id : 0;
        uv_mutex_unlock(&p->mu);
        if (to == 0)
            return;
        kl_peer_auth_self me = peer_auth_self(p);
        kl_err e;
        have_dial = kl_peer_auth_hello(&me, to, peer_wall_ms(), &dial, &e) == KL_OK;
    }
    uv_mutex_lock(&p->mu);
    peer_pipe *pp = p->stopping ? NULL : pipe_find(p, id);
    if (pp != NULL && pp->dialed && !pp->dead && p->auth && !have_dial) {
        pipe_refuse(p, pp, "could not make our authenticated hello", 0, act);
    } else if (pp != NULL && pp->dialed && !pp->dead) {
        /* Our connection to a lower id: say hello first. One dialer per member means one
         * pipe at a time; a leftover one would be a stale connection. */
        peer_member *m = &p->members[pp->member];
        if (m->pipe != 0 && m->pipe != id) {
            peer_pipe *old = pipe_find(p, m->pipe);
            if (old != NULL) {
                old->member = -1;
                old->dead = true;
                pipe_wipe_secrets(old);
            }
            act_close(act, m->pipe);
            member_drop(p, m, act);
        }
        member_adopt(m, id);
        if (p->auth) {
            pp->dial = dial;
            pp->dial_ready = true;
        }
        act->pump = m;
    }
    uv_mutex_unlock(&p->mu);
    kl_peer_auth_dial_wipe(&dial);
}

static void pipe_removed(kl_peer *p, uint32_t id, peer_act *act)
{
    uv_mutex_lock(&p->mu);
    peer_pipe *pp = pipe_find(p, id);
    if (pp != NULL) {
        if (pp->member >= 0 && p->members[pp->member].pipe == id)
            member_drop(p, &p->members[pp->member], act);
        pipe_clear(pp);
    }
    uv_mutex_unlock(&p->mu);
}

/* Transport event: a connection is up (dialer: the member's dialer, 0 = accepted). */
static void tcp_up(void *owner, uint32_t pipe, uint32_t dialer)
{
    kl_peer *p = owner;
    peer_act act = {0};
    pipe_added(p, pipe, dialer, &act);
    pipe_started(p, pipe, &act);
    act_run(p, &act);
    if (act.pump != NULL)
        member_pump(p, act.pump);
}

static void tcp_down(void *owner, uint32_t pipe)
{
    kl_peer *p = owner;
    peer_act act = {0};
    pipe_removed(p, pipe, &act);
    act_run(p, &act);
}

/* Transport event: the connection's queued writes drained; data held back may go. */
static void tcp_drained(void *owner, uint32_t pipe)
{
    kl_peer *p = owner;
    peer_member *due = NULL;
    uv_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->n_members; i++)
        if (p->members[i].pipe == pipe && p->members[i].tcp_full)
            due = &p->members[i];
    uv_mutex_unlock(&p->mu);
    if (due != NULL)
        member_pump(p, due);
}

/* ------------------------------------------------------------------ loop side */

/* Loop thread, after draining the inbox: peers told we are busy hear that we are not. */
static void busy_release(kl_peer *p)
{
    peer_member *due[KL_PEER_MAX_PEERS];
    size_t n = 0;
    uv_mutex_lock(&p->mu);
    if (!p->stopping && !inbox_high(p))
        for (size_t i = 0; i < p->n_members; i++) {
            peer_member *m = &p->members[i];
            if (m->connected && m->pipe != 0 && m->busy_told)
                due[n++] = m;
        }
    uv_mutex_unlock(&p->mu);
    for (size_t i = 0; i < n; i++)
        member_pump(p, due[i]);
}

/* The idle handle, one loop iteration after frames arrived: delivers the inbox to recv.
 * recv cannot add to it (nothing is read meanwhile), so one pass empties it. */
static void flush_cb(uv_idle_t *handle)
{
    kl_peer *p = handle->data;
    uv_idle_stop(handle);
    for (;;) {
        uv_mutex_lock(&p->mu);
        if (p->stopping || p->in_count == 0) {
            uv_mutex_unlock(&p->mu);
            break; /* recv stopped us (stop dropped the rest), or all delivered */
        }
        peer_inbound in = p->inbox[p->in_head];
        p->in_head = (p->in_head + 1) % p->max_frames;
        p->in_count--;
        p->in_bytes -= msg_len(in.msg);
        p->st.received++;
        uv_mutex_unlock(&p->mu);
        p->delivering_read_ns = in.read_ns;
        p->recv(p->owner, in.from, msg_body(in.msg), msg_len(in.msg));
        p->delivering_read_ns = 0;
        msg_free(in.msg);
    }
    busy_release(p);
}

/* Loop thread: sends delayed acks, closes connections that stopped acknowledging and pipes
 * that never completed their handshake. */
static void watchdog_cb(uv_timer_t *timer)
{
    kl_peer *p = timer->data;
    peer_act act = {0};
    uint32_t stalled[KL_PEER_MAX_PEERS];
    uint64_t who[KL_PEER_MAX_PEERS];
    bool ack[KL_PEER_MAX_PEERS] = {false};
    size_t n = 0;

    uv_mutex_lock(&p->mu);
    /* Read after every stamp of wait_since, last_rx and since (all made on this thread), so
     * `now - stamp` cannot wrap to a huge age. */
    uint64_t now = peer_now_ms();
    for (size_t i = 0; i < p->n_members; i++) {
        peer_member *m = &p->members[i];
        if (m->pipe != 0 && m->connected && m->ack_data && !m->ack_now) {
            m->ack_now = true;
            ack[i] = true;
        }
        if (m->pipe != 0 && m->connected && m->wait_since != 0 &&
            now - m->wait_since >= p->ack_timeout_ms) {
            p->st.stalls++;
            who[n] = m->id;
            stalled[n++] = m->pipe;
            m->wait_since = 0; /* once; the close follows */
        }
    }
    for (size_t i = 0; i < PEER_MAX_PIPES; i++) {
        peer_pipe *pp = &p->pipes[i];
        uint64_t heard = pp->last_rx > pp->since ? pp->last_rx : pp->since;
        if (pp->id != 0 && pp->hello_rx && !pp->dead && p->idle_ms != 0 && now - heard >= p->idle_ms)
            pipe_close_idle(p, pp, &act);
        if (pp->id != 0 && !pp->hello_rx && !pp->dead && now - pp->since >= p->ack_timeout_ms)
            pipe_refuse(p, pp,
                        pp->confirming ? "no sealed frame after the handshake in time"
                                       : "no hello in time",
                        pp->confirming ? p->members[pp->member].id : 0,
                        &act); /* tcp_down frees the slot */
    }
    uv_mutex_unlock(&p->mu);

    for (size_t i = 0; i < n; i++) {
        KL_WARN("peer connection stalled; reconnecting",
                "listen=%s member=%" PRIu64 " ack_timeout_ms=%" PRIu32, p->listen_url, who[i],
                p->ack_timeout_ms);
        kl_peer_tcp_close(p->tcp, stalled[i]);
    }
    act_run(p, &act);
    for (size_t i = 0; i < p->n_members; i++)
        if (ack[i])
            member_pump(p, &p->members[i]);
}

/* ------------------------------------------------------------------ start / stop */

static void peer_free(kl_peer *p)
{
    for (size_t i = 0; i < p->n_members; i++)
        free(p->members[i].url);
    free(p->cluster);
    free(p->listen_url);
    free(p->inbox);
    /* The member key, every connection's keys and every handshake's secrets. */
    sodium_memzero(p, sizeof *p);
    free(p);
}

static void handle_closed(uv_handle_t *handle)
{
    kl_peer *p = handle->data;
    if (--p->handles_open == 0) {
        uv_mutex_destroy(&p->mu);
        peer_free(p);
    }
}

/* Under mu: drops the frames waiting in either direction; the connections stay. */
static void peer_drop_pending(kl_peer *p)
{
    for (size_t i = 0; i < p->n_members; i++)
        member_queue_drop(p, &p->members[i]);
    for (; p->in_count > 0; p->in_count--) {
        msg_free(p->inbox[p->in_head].msg);
        p->in_head = (p->in_head + 1) % p->max_frames;
        p->st.dropped_disconnect++;
    }
    p->in_bytes = 0;
}

/* Under mu: drops everything queued in either direction, and the connections' state. */
static void peer_drop_queued(kl_peer *p)
{
    peer_drop_pending(p);
    for (size_t i = 0; i < p->n_members; i++)
        member_drop(p, &p->members[i], NULL);
}

/* Under mu, while stopping: every connection answered our closing notice (so every frame
 * we sent arrived whole, and the peer sends no more data) and is owed no answer. */
static bool peer_all_answered(const kl_peer *p)
{
    for (size_t i = 0; i < p->n_members; i++) {
        const peer_member *m = &p->members[i];
        if (m->pipe == 0 || !m->connected)
            continue;
        if (m->closing_at == 0 || m->tx_acked < m->closing_at || m->closing_owed)
            return false;
    }
    return true;
}

/* Loop thread: the transport is gone; drop what is queued, close the handles (the last
 * one frees p). */
static void tcp_gone(void *arg)
{
    kl_peer *p = arg;
    p->tcp = NULL;
    uv_timer_stop(&p->watchdog);
    uv_mutex_lock(&p->mu);
    peer_drop_queued(p);
    uv_mutex_unlock(&p->mu);
    uv_close((uv_handle_t *)&p->watchdog, handle_closed);
    uv_close((uv_handle_t *)&p->flush, handle_closed);
}

/* Loop thread, on the watchdog timer while stopping: once the connections are quiet (or
 * after PEER_QUIESCE_MAX_MS), stops the transport, then closes the handles. */
static void quiesce_cb(uv_timer_t *timer)
{
    kl_peer *p = timer->data;
    uint64_t now = peer_now_ms();
    uv_mutex_lock(&p->mu);
    bool quiet = now - p->stop_at >= PEER_QUIET_MS && now - p->last_rx >= PEER_QUIET_MS &&
                 peer_all_answered(p);
    bool close = quiet || now - p->stop_at >= PEER_QUIESCE_MAX_MS;
    size_t unanswered = 0;
    for (size_t i = 0; close && i < p->n_members; i++) {
        const peer_member *m = &p->members[i];
        unanswered += m->pipe != 0 && m->connected &&
                      (m->closing_at == 0 || m->tx_acked < m->closing_at || m->closing_owed);
    }
    if (close)
        p->tcp_stopped = true; /* nothing is sent from now on */
    uv_mutex_unlock(&p->mu);
    if (!close)
        return;
    if (unanswered != 0)
        KL_INFO("peer links closing without every answer", "listen=%s waited_ms=%" PRIu64
                " unanswered=%zu", p->listen_url, now - p->stop_at, unanswered);
    uv_timer_stop(timer);
    kl_err fe;
    /* sleep(MS): a stop of the links that takes long (it holds the loop), so that the
     * daemon's bound on its own stop is exercised (tests/cluster proc_test). */
    (void)KL_FAILPOINT("peer.before_close", &fe);
    kl_peer_tcp_stop(p->tcp, tcp_gone, p);
}

void kl_peer_stop(kl_peer *p)
{
    if (p == NULL)
        return;
    uv_mutex_lock(&p->mu);
    bool already = p->stopping;
    p->stopping = true;
    p->stop_at = peer_now_ms();
    if (!already)
        peer_drop_pending(p);
    uv_mutex_unlock(&p->mu);
    if (already)
        return;
    /* Every connection gets a closing notice (member_next_closing): its peer sends no more
     * data and answers at once, and the answer acknowledges the notice, so every frame we
     * sent arrived and nothing the peer sent is left unread when we close (closing a socket
     * with unread bytes resets it, which can cut off the notice itself). Reading goes on
     * meanwhile (acks and notices count, data is dropped), and the transport stops once
     * every connection answered and nothing arrived for PEER_QUIET_MS, or after
     * PEER_QUIESCE_MAX_MS (a peer that does not answer: dead, or its window full). */
    for (size_t i = 0; i < p->n_members; i++)
        member_pump(p, &p->members[i]);
    uv_timer_stop(&p->watchdog);
    (void)uv_timer_start(&p->watchdog, quiesce_cb, PEER_QUIET_MS / 4, PEER_QUIET_MS / 4);
}

uint64_t kl_peer_delivering_read_ns(const kl_peer *p) { return p != NULL ? p->delivering_read_ns : 0; }

bool kl_peer_connected(const kl_peer *p, uint64_t id)
{
    if (p == NULL)
        return false;
    int idx = member_index(p, id);
    if (idx < 0)
        return false;
    kl_peer *mp = (kl_peer *)p; /* the mutex is not part of the observable state */
    uv_mutex_lock(&mp->mu);
    bool up = mp->members[idx].connected && mp->members[idx].pipe != 0;
    uv_mutex_unlock(&mp->mu);
    return up;
}

void kl_peer_stats(const kl_peer *p, kl_peer_counters *out)
{
    if (out == NULL)
        return;
    memset(out, 0, sizeof *out);
    if (p == NULL)
        return;
    kl_peer *mp = (kl_peer *)p;
    uv_mutex_lock(&mp->mu);
    *out = mp->st;
    out->authenticated = mp->auth;
    for (size_t i = 0; i < PEER_MAX_PIPES; i++)
        if (mp->pipes[i].id != 0)
            out->pipes_open++;
    for (size_t i = 0; i < mp->n_members; i++)
        if (mp->members[i].connected && mp->members[i].pipe != 0)
            out->connected++;
    uv_mutex_unlock(&mp->mu);
    out->dropped = out->dropped_unavailable + out->dropped_queue_full + out->dropped_disconnect +
                   out->dropped_oversize + out->dropped_inbox_full + out->dropped_nng;
}

static kl_code peer_check_config(uv_loop_t *loop, const kl_peer_config *cfg, kl_peer **out,
                                 kl_err *err)
{
    if (loop == NULL || cfg == NULL || out == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "config", "peer: missing loop, config or out");
    if (cfg->recv == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "recv", "peer: no recv callback");
    size_t clen = cfg->cluster != NULL ? strlen(cfg->cluster) : 0;
    if (clen == 0 || clen > KL_PEER_MAX_CLUSTER)
        return kl_fail(err, KL_INVALID_ARGUMENT, "cluster",
                       "peer: cluster name must be 1..%d bytes, got %zu", KL_PEER_MAX_CLUSTER,
                       clen);
    if (cfg->self == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "self", "peer: member id 0 is reserved");
    if (cfg->listen_url == NULL || cfg->listen_url[0] == '\0')
        return kl_fail(err, KL_INVALID_ARGUMENT, "listen_url",
                       "peer %" PRIu64 ": listen_url is empty", cfg->self);
    if (cfg->n_peers > KL_PEER_MAX_PEERS)
        return kl_fail(err, KL_INVALID_ARGUMENT, "n_peers", "peer: %zu peers, at most %d",
                       cfg->n_peers, KL_PEER_MAX_PEERS);
    for (size_t i = 0; i < cfg->n_peers; i++) {
        uint64_t id = cfg->peers[i].id;
        if (id == 0 || id == cfg->self)
            return kl_fail(err, KL_INVALID_ARGUMENT, "peers",
                           "peer %" PRIu64 ": peer %zu has id %" PRIu64
                           " (0 or this member's own)",
                           cfg->self, i, id);
        for (size_t j = 0; j < i; j++)
            if (cfg->peers[j].id == id)
                return kl_fail(err, KL_INVALID_ARGUMENT, "peers",
                               "peer %" PRIu64 ": member %" PRIu64 " is listed twice", cfg->self,
                               id);
        if (id < cfg->self && (cfg->peers[i].url == NULL || cfg->peers[i].url[0] == '\0'))
            return kl_fail(err, KL_INVALID_ARGUMENT, "peers",
                           "peer %" PRIu64 ": member %" PRIu64 " has no URL to dial", cfg->self,
                           id);
    }
    if (cfg->ack_timeout_ms != 0 && cfg->ack_timeout_ms < PEER_MIN_ACK_TIMEOUT_MS)
        return kl_fail(err, KL_INVALID_ARGUMENT, "ack_timeout_ms",
                       "peer: ack_timeout_ms %" PRIu32 " is under %d (acks may be delayed by "
                       "%d ms)",
                       cfg->ack_timeout_ms, PEER_MIN_ACK_TIMEOUT_MS, PEER_TICK_MAX_MS);
    size_t frames = cfg->max_queued_frames != 0 ? cfg->max_queued_frames
                                                : KL_PEER_DEFAULT_QUEUED_FRAMES;
    if (frames > (1u << 20))
        return kl_fail(err, KL_INVALID_ARGUMENT, "max_queued_frames",
                       "peer: max_queued_frames %zu is over %u", frames, 1u << 20);
    return KL_OK;
}

/* The transport's receive limit: oversized frames up to a multiple still arrive (and are
 * counted), saturating instead of wrapping. */
static size_t peer_recv_limit(size_t max_frame)
{
    size_t base = max_frame < 512 ? 512 : max_frame; /* room for a hello */
    if (base > (SIZE_MAX - PEER_HDR) / PEER_OVERSIZE_FACTOR)
        return SIZE_MAX;
    return base * PEER_OVERSIZE_FACTOR + PEER_HDR;
}

/* Authenticated mode needs our member key and every other member's public key; otherwise
 * *why says what is missing (for the one log line at start). */
static bool peer_pick_mode(const kl_peer_config *cfg, char *why, size_t cap)
{
    if (cfg->member_secret == NULL) {
        snprintf(why, cap, "this member has no member key");
        return false;
    }
    for (size_t i = 0; i < cfg->n_peers; i++)
        if (cfg->peers[i].public_key == NULL) {
            snprintf(why, cap, "member %" PRIu64 " has no public_key in the cluster file",
                     cfg->peers[i].id);
            return false;
        }
    why[0] = '\0';
    return true;
}

static kl_code peer_copy_config(kl_peer *p, const kl_peer_config *cfg, kl_err *err)
{
    char why[96];
    p->auth = peer_pick_mode(cfg, why, sizeof why);
    p->partition = cfg->partition;
    p->max_skew_ms = cfg->max_skew_ms != 0 ? cfg->max_skew_ms : KL_PEER_DEFAULT_MAX_SKEW_MS;
    if (p->auth) {
        memcpy(p->member_secret, cfg->member_secret, sizeof p->member_secret);
        for (size_t i = 0; i < cfg->n_peers; i++)
            memcpy(p->members[i].public_key, cfg->peers[i].public_key, KL_PEER_PUBLIC_LEN);
    }
    p->name_len = strlen(cfg->cluster);
    p->has_config = cfg->replica_count != 0;
    p->config_index = cfg->config_index;
    p->cluster = cfg_identity(cfg);
    p->cluster_len = p->cluster != NULL ? strlen(p->cluster) : 0;
    if (p->cluster_len > KL_PEER_MAX_CLUSTER)
        return kl_fail(err, KL_INVALID_ARGUMENT, "cluster",
                       "peer: cluster name and configuration must fit %d bytes", KL_PEER_MAX_CLUSTER);
    p->listen_url = strdup(cfg->listen_url);
    if (p->cluster == NULL || p->listen_url == NULL)
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory", "peer: out of memory");
    p->self = cfg->self;
    p->n_members = cfg->n_peers;
    for (size_t i = 0; i < cfg->n_peers; i++) {
        peer_member *m = &p->members[i];
        m->id = cfg->peers[i].id;
        if (m->id < cfg->self && (m->url = strdup(cfg->peers[i].url)) == NULL)
            return kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory", "peer: out of memory");
    }
    p->max_frame = cfg->max_frame != 0 ? cfg->max_frame : KL_PEER_DEFAULT_MAX_FRAME;
    p->max_frames = cfg->max_queued_frames != 0 ? cfg->max_queued_frames
                                                : KL_PEER_DEFAULT_QUEUED_FRAMES;
    p->max_bytes = cfg->max_queued_bytes != 0 ? cfg->max_queued_bytes
                                              : KL_PEER_DEFAULT_QUEUED_BYTES;
    p->ack_timeout_ms = cfg->ack_timeout_ms != 0 ? cfg->ack_timeout_ms
                                                 : KL_PEER_DEFAULT_ACK_TIMEOUT_MS;
    p->max_pipes = cfg->max_pipes != 0 && cfg->max_pipes < PEER_MAX_PIPES ? cfg->max_pipes : PEER_MAX_PIPES;
    p->idle_ms = cfg->idle_ms;
    p->recv = cfg->recv;
    p->owner = cfg->owner;
    p->inbox = calloc(p->max_frames, sizeof *p->inbox);
    if (p->inbox == NULL)
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory",
                       "peer: out of memory for an inbox of %zu frames", p->max_frames);
    return KL_OK;
}

/* Dials every lower id; the transport keeps redialing in the background. */
static kl_code peer_dial(kl_peer *p, kl_err *err)
{
    for (size_t i = 0; i < p->n_members; i++) {
        peer_member *m = &p->members[i];
        if (m->url == NULL)
            continue;
        kl_code rc = kl_peer_tcp_dial(p->tcp, m->url, &m->dialer, err);
        if (rc != KL_OK)
            return rc;
    }
    return KL_OK;
}

kl_code kl_peer_start(uv_loop_t *loop, const kl_peer_config *cfg, kl_peer **out, kl_err *err)
{
    kl_code rc = peer_check_config(loop, cfg, out, err);
    if (rc != KL_OK)
        return rc;
    for (size_t i = 0; i < cfg->n_peers; i++)
        if (cfg->peers[i].id < cfg->self && !kl_peer_tcp_url_ok(cfg->peers[i].url))
            return kl_fail(err, KL_INVALID_ARGUMENT, "peers",
                           "peer: member %" PRIu64 " has URL %s, not tcp://HOST:PORT",
                           cfg->peers[i].id, cfg->peers[i].url);
    *out = NULL;
    kl_peer *p = calloc(1, sizeof *p);
    if (p == NULL)
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory", "peer: out of memory");
    p->loop = loop;
    if ((rc = peer_copy_config(p, cfg, err)) != KL_OK)
        goto fail_free;
    if (uv_mutex_init(&p->mu) != 0) {
        rc = kl_fail(err, KL_INTERNAL, "mutex", "peer: mutex init failed");
        goto fail_free;
    }
    kl_peer_tcp_config tc = {
        .url = p->listen_url,
        .recv_max = peer_recv_limit(p->max_frame),
        .send_max_bytes = PEER_TCP_QUEUED_HARD(p->max_frame),
        .hello_ms = p->ack_timeout_ms,
        .ev = {.up = tcp_up, .frame = tcp_frame, .down = tcp_down, .drained = tcp_drained},
        .owner = p,
    };
    if ((rc = kl_peer_tcp_start(loop, &tc, &p->tcp, err)) != KL_OK)
        goto fail_mutex;
    (void)uv_idle_init(loop, &p->flush); /* neither can fail */
    p->flush.data = p;
    (void)uv_timer_init(loop, &p->watchdog);
    p->watchdog.data = p;
    p->handles_open = 2;
    /* Also the delayed-ack clock: a lone frame is acknowledged within one period. */
    uint64_t period = p->ack_timeout_ms / 4;
    period = period < 10 ? 10 : period > PEER_TICK_MAX_MS ? PEER_TICK_MAX_MS : period;
    (void)uv_timer_start(&p->watchdog, watchdog_cb, period, period);
    if ((rc = peer_dial(p, err)) != KL_OK) {
        /* Out of memory only (the URLs were checked): unwind on the loop. */
        p->stopping = p->tcp_stopped = true;
        uv_timer_stop(&p->watchdog);
        kl_peer_tcp_stop(p->tcp, tcp_gone, p);
        return rc;
    }
    char why[96];
    if (peer_pick_mode(cfg, why, sizeof why))
        KL_INFO("replication links authenticated",
                "listen=%s partition=%" PRId32 " member=%" PRIu64 " peers=%zu max_skew_ms=%" PRId64,
                p->listen_url, p->partition, p->self, p->n_members, p->max_skew_ms);
    else
        KL_WARN("replication links are unauthenticated",
                "listen=%s partition=%" PRId32 " member=%" PRIu64 " reason=\"%s\"", p->listen_url,
                p->partition, p->self, why);
    *out = p;
    return KL_OK;

fail_mutex:
    uv_mutex_destroy(&p->mu);
fail_free:
    peer_free(p);
    return rc;
}

/* ------------------------------------------------------------------ membership at run time */

/* Under mu: a free member slot (never used, or removed and not being pumped). */
static peer_member *member_slot_free(kl_peer *p)
{
    for (size_t i = 0; i < p->n_members; i++)
        if (p->members[i].id == 0 && !p->members[i].pumping && p->members[i].pipe == 0)
            return &p->members[i];
    return p->n_members < KL_PEER_MAX_PEERS ? &p->members[p->n_members] : NULL;
}

kl_code kl_peer_add(kl_peer *p, uint64_t id, const char *url, const uint8_t *public_key, kl_err *err)
{
    if (p == NULL || id == 0 || id == p->self)
        return kl_fail(err, KL_INVALID_ARGUMENT, "member_id", "peer: cannot add member %" PRIu64, id);
    if (member_index(p, id) >= 0)
        return KL_OK;
    if (id < p->self && (url == NULL || url[0] == '\0'))
        return kl_fail(err, KL_INVALID_ARGUMENT, "peer_url", "peer: member %" PRIu64 " has no peer URL", id);
    if (p->auth && public_key == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "public_key",
                       "peer: member %" PRIu64 " has no public key (links are authenticated)", id);
    char *u = id < p->self ? strdup(url) : NULL;
    if (id < p->self && u == NULL)
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory", "peer: out of memory");
    uv_mutex_lock(&p->mu);
    peer_member *m = member_slot_free(p);
    if (m == NULL) {
        uv_mutex_unlock(&p->mu);
        free(u);
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "members", "peer: at most %d other members",
                       KL_PEER_MAX_PEERS);
    }
    free(m->url);
    memset(m, 0, sizeof *m);
    m->url = u;
    if (p->auth)
        memcpy(m->public_key, public_key, KL_PEER_PUBLIC_LEN);
    m->id = id; /* last: hello checks find the member only once it is complete */
    if (m == &p->members[p->n_members])
        p->n_members++;
    uv_mutex_unlock(&p->mu);
    if (u == NULL)
        return KL_OK; /* a higher id dials us */
    uint32_t dialer = 0;
    kl_code rc = p->tcp_stopped ? KL_OK : kl_peer_tcp_dial(p->tcp, u, &dialer, err);
    if (rc != KL_OK) /* the member stays known: it may still dial us after a restart of ours */
        return rc;
    uv_mutex_lock(&p->mu);
    m->dialer = dialer;
    uv_mutex_unlock(&p->mu);
    KL_INFO("peer member added", "listen=%s member=%" PRIu64, p->listen_url, id);
    return KL_OK;
}

kl_code kl_peer_remove(kl_peer *p, uint64_t id)
{
    if (p == NULL)
        return KL_OK;
    peer_act act = {0};
    uv_mutex_lock(&p->mu);
    int idx = member_index(p, id);
    if (idx < 0) {
        uv_mutex_unlock(&p->mu);
        return KL_OK;
    }
    peer_member *m = &p->members[idx];
    if (m->pipe != 0)
        act_close(&act, m->pipe);
    for (size_t i = 0; i < PEER_MAX_PIPES; i++) /* no pipe may name the slot any more */
        if (p->pipes[i].id != 0 && p->pipes[i].member == idx) {
            act_close(&act, p->pipes[i].id);
            pipe_detach(p, &p->pipes[i], &act);
        }
    member_drop(p, m, &act);
    uint32_t dialer = m->dialer;
    m->dialer = 0;
    m->id = 0; /* unknown from now on: its hellos are refused */
    uv_mutex_unlock(&p->mu);
    if (dialer != 0 && !p->tcp_stopped)
        kl_peer_tcp_undial(p->tcp, dialer);
    act_run(p, &act);
    KL_INFO("peer member removed", "listen=%s member=%" PRIu64, p->listen_url, id);
    return KL_OK;
}
