/* rpc_direct: the RPC client's transport for tcp:// URLs with a numeric address
 * (ARCHITECTURE.md "Sessions and RPC"; common/rpc.c uses it for those URLs and nng's REQ
 * socket for every other one).
 *
 * It speaks what nng's REQ socket speaks over TCP (the SP hello naming REQ, 64-bit
 * length-prefixed frames, each request starting with a 4-byte id whose high bit is set,
 * echoed at the start of its answer), so it talks to common/rpc_tcp.c and to nng's REP
 * socket alike. Why: with nng a call crossed several nng task threads each way (the caller
 * hands the request to a task thread, the poller hands the answer to another, which wakes
 * the caller); here the caller writes its request itself and one I/O thread reads every
 * answer and runs its callback, so a call costs one thread hand-off.
 *
 * What it owns: one TCP connection per kl_rpc_direct (requests are multiplexed on it by
 * their id, like an nng REQ socket's contexts on its pipe), the requests started on it
 * until they complete, and one process-wide I/O thread (epoll) that connects, reads
 * answers, finishes writes the caller could not finish, expires deadlines and runs every
 * request's `done`. One process-wide mutex guards all of it; no callback runs with it held.
 *
 * Invariants: a request completes exactly once per start, on the I/O thread, and its
 * outcome says whether any byte of it reached the socket (NOT_SENT_*) or not; a frame
 * whose first byte was written is always written whole (a cancelled request's remainder
 * stays queued), so the byte stream never breaks; at most KL_RPC_DIRECT_MAX_REQUESTS
 * requests are open on one connection. A dropped connection completes every request that
 * had reached it as LOST and keeps the unsent ones for the next connection, redialled with
 * a back-off of 50 ms doubling to 1 s while any request waits. */
#ifndef KL_RPC_DIRECT_H
#define KL_RPC_DIRECT_H

#include "common/limits.h"
#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kl_rpc_direct kl_rpc_direct;

enum kl_rpc_direct_outcome {
    KL_RPC_DIRECT_ANSWERED = 1,  /* reply holds the answer frame's body after the id */
    KL_RPC_DIRECT_NOT_SENT_TIMEOUT, /* no connection before send_timeout_ms */
    KL_RPC_DIRECT_NOT_SENT_CANCELLED,
    KL_RPC_DIRECT_NOT_SENT_CLOSED,  /* the client was closed first */
    KL_RPC_DIRECT_LOST,             /* sent (at least partly), then the connection dropped */
    KL_RPC_DIRECT_TIMEOUT,          /* sent, no answer by the deadline */
    KL_RPC_DIRECT_CANCELLED,        /* sent, then cancelled */
    KL_RPC_DIRECT_SLEPT,            /* a pause (kl_rpc_direct_sleep) ended or was cancelled */
};

/* One exchange, embedded in its owner's memory. The owner sets done and arg once; every
 * other field is the module's until done runs. */
typedef struct kl_rpc_direct_req {
    void (*done)(void *arg); /* on the I/O thread, once per successful start */
    void *arg;
    /* Results, valid in and after done until the next start. */
    int outcome;       /* enum kl_rpc_direct_outcome */
    int sys_err;       /* errno of a connection failure (LOST, NOT_SENT_TIMEOUT), else 0 */
    uint8_t *reply;    /* ANSWERED: malloc'd, the caller's to free; else NULL */
    size_t reply_len;
    /* Private. */
    struct kl_rpc_direct *conn;
    struct kl_rpc_direct_req *next, *prev;
    uint8_t *frame;    /* length prefix, id, body */
    size_t frame_len, written;
    uint32_t id;
    int state;
    int64_t send_by, answer_by; /* monotonic ms */
    bool stopped;
} kl_rpc_direct_req;

/* Opens a client for url (kl_rpc_direct_handles must be true for it). connect_timeout_ms
 * > 0: waits that long at most for the connection (UNAVAILABLE "connect" naming url and the
 * reason otherwise); 0: waits for the first attempt's end (an attempt is bounded at
 * 5 s: a host that drops SYNs is retried, not waited for); < 0: connects in the
 * background. recv_max bounds an answer frame; a longer one drops the connection.
 * INTERNAL when the I/O thread cannot start. Any thread. */
kl_code kl_rpc_direct_open(const char *url, int connect_timeout_ms, size_t recv_max,
                           kl_rpc_direct **out, kl_err *err);

/* True for tcp://IPv4:PORT and tcp://[IPv6]:PORT. */
bool kl_rpc_direct_handles(const char *url);

/* Completes every open request (NOT_SENT_CLOSED or LOST) and releases the client; the
 * connection and memory go once the I/O thread has let go of them. No start after it. */
void kl_rpc_direct_close(kl_rpc_direct *d);

/* Starts one exchange: body (len bytes, copied) is sent as one request; done(arg) runs
 * when it completes (outcome). send_timeout_ms bounds the wait for a connection,
 * answer_timeout_ms the whole exchange. RESOURCE_EXHAUSTED "client_requests" past the
 * bound, "memory" without memory; UNAVAILABLE "cancelled" on a stopped request; done is not
 * called then. The request must not be open already. Any thread, also inside a done. */
kl_code kl_rpc_direct_start(kl_rpc_direct *d, kl_rpc_direct_req *r, const uint8_t *body,
                            size_t len, int send_timeout_ms, int answer_timeout_ms, kl_err *err);

/* Holds back the writes of the requests this thread starts until the matching uncork, which
 * writes each connection's held requests with one sendmsg: a caller that starts many calls
 * in one pass (the coordinator handling a batch of finished calls) then costs one system
 * call per connection and the server one read, not one per call. Nests; per thread. Keep a
 * corked stretch short and free of waits: its requests are not on the wire until the
 * uncork (their send deadline still runs). uncork takes the module's lock: never call it
 * inside a done callback's caller that holds it (none does). The I/O thread corks itself
 * around each batch of done callbacks: a request a callback starts is written when that
 * batch ends, with the others started in it. The held connections are one process-wide
 * list, so any of these flushes (an uncork, the end of a callback batch) writes what other
 * threads' corks hold too: a held request may leave before its own uncork, never after. */
void kl_rpc_direct_cork(void);
void kl_rpc_direct_uncork(void);

/* A pause: done(arg) runs after ms (outcome SLEPT), or at once when cancelled or stopped;
 * it needs no client. INTERNAL when the I/O thread cannot start (done is not called). */
kl_code kl_rpc_direct_sleep(kl_rpc_direct_req *r, int ms, kl_err *err);

/* Ends an open request early (NOT_SENT_CANCELLED or CANCELLED); nothing when none is open.
 * Any thread; done runs on the I/O thread. */
void kl_rpc_direct_cancel(kl_rpc_direct_req *r);

/* Cancels, refuses later starts, and waits until done has returned. Never from inside
 * done. Afterwards the request's memory may be freed. */
void kl_rpc_direct_stop(kl_rpc_direct_req *r);

#endif
