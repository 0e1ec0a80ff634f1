/* peer_tcp: the TCP connections under repl/peer, on the owner's libuv loop (ARCHITECTURE.md
 * "Replication", peer transport).
 *
 * It speaks the wire of an nng pair1 socket over TCP, so any pair1 speaker (a raw test
 * socket, an nng intruder, an older member) sees what it expects: each side first sends the
 * 8 bytes 0x00 'S' 'P' 0x00, protocol 0x0011 (pair1, u16 big-endian) and two zero bytes;
 * then every frame is a u64 big-endian length, a 4-byte pair1 header (the hop count: 1 on
 * what we send) and the body. Every read, write and callback runs on the loop thread: no
 * transport thread and no hand-off per frame.
 *
 * What it owns: the listening socket, every connection (accepted or dialed) with its read
 * buffer and queued writes, the dialers (one per URL the owner dials: resolve, connect with
 * a bounded time, redial with backoff after a failure or a lost connection) and one
 * housekeeping timer.
 *
 * Invariants: an event names a connection by a nonzero id never reused while the transport
 * lives; `up` comes once per connection, after the peer's SP header named pair1, and only
 * then `frame` events, in wire order; `down` comes once for every connection that was up,
 * after its socket closed; no event is ever delivered from inside a kl_peer_tcp_* call (so
 * the owner may hold its own lock around them) and none after kl_peer_tcp_stop. A frame
 * whose length is over recv_max closes its connection unread; a connection without a valid
 * SP header within hello_ms is closed. Bytes queued on a connection never exceed
 * send_max_bytes (a send past it is refused). Loop thread only. */
#ifndef KL_REPL_PEER_TCP_H
#define KL_REPL_PEER_TCP_H

#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* Bytes a sent frame must have free and writable before it: the length and the pair1
 * header are written there, so a frame goes out as one buffer without a copy. */
#define KL_PEER_TCP_HEADROOM 12

typedef struct kl_peer_tcp kl_peer_tcp;

typedef struct kl_peer_tcp_events {
    /* dialer: the dialer that made the connection, 0 for one the listener accepted. */
    void (*up)(void *owner, uint32_t conn, uint32_t dialer);
    /* body: the frame after the pair1 header, valid during the call only. */
    void (*frame)(void *owner, uint32_t conn, const uint8_t *body, size_t len);
    void (*down)(void *owner, uint32_t conn);
    /* Everything queued on conn was handed to the kernel (after a send had to queue). */
    void (*drained)(void *owner, uint32_t conn);
} kl_peer_tcp_events;

typedef struct kl_peer_tcp_config {
    const char *url;       /* listen on tcp://IPV4:PORT, tcp://[IPV6]:PORT or tcp://HOST:PORT */
    size_t recv_max;       /* longest frame read (its pair1 header included) */
    size_t send_max_bytes; /* bytes queued on one connection at most */
    uint32_t hello_ms;     /* the SP header's deadline on a new connection */
    kl_peer_tcp_events ev;
    void *owner;
} kl_peer_tcp_config;

/* Resolves (getaddrinfo, once), binds and listens. KL_INVALID_ARGUMENT for a URL it cannot
 * parse or resolve, KL_UNAVAILABLE when binding fails; the message names the URL. On failure
 * nothing is left on the loop. */
kl_code kl_peer_tcp_start(uv_loop_t *loop, const kl_peer_tcp_config *cfg, kl_peer_tcp **out,
                          kl_err *err);

/* True when url has the form kl_peer_tcp_dial accepts (its host is not resolved). */
bool kl_peer_tcp_url_ok(const char *url);

/* Starts dialing url (resolved at every attempt) and keeps a connection to it: after a
 * failed attempt or a lost connection it dials again after a backoff (50 ms doubling to 1 s;
 * back to 50 ms once a connection lasted a second). KL_INVALID_ARGUMENT naming peer_url for
 * a URL it cannot parse. *dialer is the id `up` reports. */
kl_code kl_peer_tcp_dial(kl_peer_tcp *t, const char *url, uint32_t *dialer, kl_err *err);

/* Stops dialing and closes the dialer's connection (its `down` follows). */
void kl_peer_tcp_undial(kl_peer_tcp *t, uint32_t dialer);

/* Sends one frame: frame[0..len) with KL_PEER_TCP_HEADROOM writable bytes before it, inside
 * `block`, which the transport owns from now on (free()d once written or refused). KL_OK:
 * written or queued in order. KL_UNAVAILABLE: no such open connection. KL_RESOURCE_EXHAUSTED:
 * send_max_bytes would be passed (nothing queued; the connection stays). */
kl_code kl_peer_tcp_send(kl_peer_tcp *t, uint32_t conn, void *block, uint8_t *frame, size_t len);

/* Bytes queued on conn that the kernel has not taken yet (0 for an unknown one). */
size_t kl_peer_tcp_queued(const kl_peer_tcp *t, uint32_t conn);

/* Closes conn (its `down` follows if it was up). Unknown or closing ids are ignored. */
void kl_peer_tcp_close(kl_peer_tcp *t, uint32_t conn);

/* "ADDR:PORT" of conn's remote end into buf; false (buf "unknown") when not known. */
bool kl_peer_tcp_remote(const kl_peer_tcp *t, uint32_t conn, char *buf, size_t cap);

/* Closes the listener, every connection and dialer; no event after this call. done(arg)
 * runs on the loop once every handle closed and the transport's memory is freed. Call once;
 * keep running the loop. */
void kl_peer_tcp_stop(kl_peer_tcp *t, void (*done)(void *arg), void *arg);

#endif
