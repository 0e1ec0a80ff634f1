/* rpc_tcp: the RPC server's TCP transport on the owner's libuv loop (ARCHITECTURE.md
 * "Sessions and RPC"). It speaks what an nng REQ socket expects from a REP socket over
 * TCP (the SP handshake, 64-bit length-prefixed frames, the request's backtrace header
 * echoed on the answer), so clients keep their nng REQ sockets, while every read, write
 * and callback runs on the loop thread: no transport thread and no hand-off per request.
 * nng's REP socket moved each request through its poller and several task-thread
 * hand-offs and each answer through more, which at many requests in flight cost more CPU
 * than handling the request.
 *
 * What it owns: the listening socket, the accepted connections and their read buffers,
 * the answers being written, the idle timer. Invariants: a frame is delivered only after
 * the connection's handshake named the REQ protocol; a frame over recv_max closes its
 * connection unread (as nng does); at most max_conns handshaken connections are open
 * (one more is closed once its handshake is read, and counted); a delivered frame holds
 * a reference to its connection until kl_rpc_tcp_answer or kl_rpc_tcp_drop, so the
 * connection's memory outlives its socket while a call is held. Loop thread only. */
#ifndef KL_RPC_TCP_H
#define KL_RPC_TCP_H

#include "common/limits.h"
#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct kl_rpc_tcp kl_rpc_tcp;
typedef struct kl_rpc_tcp_conn kl_rpc_tcp_conn;

/* Longest backtrace header kept: KL_RPC_TCP_HDR_MAX (common/limits.h). */

/* A request frame: hdr is its backtrace (echoed on the answer), body the Envelope bytes
 * (borrowed for the call of this function only). The function owns one reference to
 * conn, released by kl_rpc_tcp_answer or kl_rpc_tcp_drop. */
typedef void (*kl_rpc_tcp_frame_fn)(void *owner, kl_rpc_tcp_conn *conn, const uint8_t *hdr,
                                    size_t hdr_len, const uint8_t *body, size_t len);

typedef struct kl_rpc_tcp_config {
    const char *url;     /* tcp://IPV4:PORT, tcp://[IPV6]:PORT, tcp://HOST:PORT, HOST numeric, "*" or empty */
    size_t recv_max;     /* longest frame read; a longer one closes its connection */
    int max_conns;       /* 0 = no cap */
    int idle_ms;         /* 0 = never close idle connections */
    kl_rpc_tcp_frame_fn on_frame;
    void *owner;
} kl_rpc_tcp_config;

typedef struct kl_rpc_tcp_stats {
    uint64_t open, refused, idle_closed;
    uint64_t answers;       /* answers queued for writing */
    uint64_t answer_writes; /* writev calls that carried them */
} kl_rpc_tcp_stats;

/* True when url is one this transport serves (a numeric address or none); other URLs
 * (host names, ipc://, inproc://, tls+tcp://) stay with nng. */
bool kl_rpc_tcp_handles(const char *url);

/* Binds, listens and starts accepting. KL_INVALID_ARGUMENT for an address it cannot
 * parse, KL_UNAVAILABLE when binding fails (in use). */
kl_code kl_rpc_tcp_start(uv_loop_t *loop, const kl_rpc_tcp_config *cfg, kl_rpc_tcp **out,
                         kl_err *err);

/* Writes an answer: frame holds 8 + hdr_len free bytes at its start, then the packed
 * answer; the transport fills the length prefix and the header, owns frame (malloc'd)
 * from here on and releases the call's reference. Nothing is written on a connection
 * that is closed or closing. The answers of one loop turn are written together at the
 * start of the next (one writev per connection for up to 64 of them), in answer order. */
void kl_rpc_tcp_answer(kl_rpc_tcp_conn *conn, const uint8_t *hdr, size_t hdr_len,
                       uint8_t *frame, size_t frame_len);
/* Writes every answer given so far now rather than at the start of the next loop turn: for
 * an owner whose turn goes on with work those answers need not wait for. Loop thread. */
void kl_rpc_tcp_flush(kl_rpc_tcp *t);
/* Releases a call's reference without answering. */
void kl_rpc_tcp_drop(kl_rpc_tcp_conn *conn);

/* No more frames are delivered while paused (the owner holds as many calls as it may);
 * resume delivers what was already read and reads again. */
void kl_rpc_tcp_pause(kl_rpc_tcp *t);
void kl_rpc_tcp_resume(kl_rpc_tcp *t);
/* Whether frames are held back by kl_rpc_tcp_pause (until kl_rpc_tcp_resume). */
bool kl_rpc_tcp_paused(const kl_rpc_tcp *t);

void kl_rpc_tcp_stats_get(const kl_rpc_tcp *t, kl_rpc_tcp_stats *out);

/* Closes the listener and every connection; frees the transport once every handle has
 * closed and every held reference is released, then calls done(arg) (on the loop).
 * Call once; keep running the loop. */
void kl_rpc_tcp_stop(kl_rpc_tcp *t, void (*done)(void *arg), void *arg);

#endif
