/* peer: the member-to-member frame transport of replication (ARCHITECTURE.md "Replication").
 *
 * Moves opaque frames (Raft messages, encoded by the caller) between the members of one
 * partition. It never looks inside a frame and never logs one.
 *
 * What it owns: one repl/peer_tcp transport on the owner's loop (it speaks nng pair1's
 * wire over TCP), listening on the member's own peer URL and dialing every peer with a
 * LOWER id, so each pair of members has exactly one connection (the higher id dials); the
 * transport redials a dropped connection by itself (50 ms doubling to 1 s). It also owns
 * the bounded inbox (frames received, waiting for recv), one bounded outbound queue per
 * peer, one uv_idle_t (delivers the inbox at the next loop iteration) and one uv_timer_t
 * (watchdog).
 *
 * Two modes, fixed at start (ARCHITECTURE.md "Sessions and RPC"):
 *   authenticated  when this member has a member key (member_secret) AND every other member
 *                  of the partition has a public key (peers[].public_key; the cluster file's
 *                  "public_key", which deploy/keyload-cluster always writes). Hellos are the
 *                  signed handshake of common/peer_auth.h and every later frame, DATA and ACK,
 *                  is sealed (encrypted and authenticated). Nothing else is accepted: a plain
 *                  hello, a badly signed, stale or misaddressed one, a frame before the
 *                  handshake, a frame that does not open or carries any counter but the next
 *                  one closes the connection and counts in `refused`.
 *   plain          otherwise (hand-written cluster files without public keys, tests): the
 *                  unauthenticated hello below, frames in the clear. kl_peer_start logs once
 *                  (a warning naming the reason, never a key) that links are unauthenticated;
 *                  peer URLs must then be on a trusted network (loopback in the local cluster).
 * Every member of a partition must run in the same mode: a plain member and an authenticated
 * one refuse each other's hellos (logged with the reason).
 *
 * Handshake (plain): on every new connection both sides send a hello first (the dialer at
 * once, the listener after it accepted the dialer's hello) naming the cluster, the sender's id
 * and the id it believes it is talking to. A connection whose first frame is not such a hello, or
 * whose hello names another cluster, an unknown member, a member that should be dialing the
 * other way, or not us, is closed and counted in `refused`. A connection that completes no
 * handshake within ack_timeout_ms is closed too. A member is "connected" once both hellos
 * crossed. A second connection from the same member (it restarted before its old TCP
 * connection was noticed as dead) replaces the first, which is closed.
 *
 * Handshake (authenticated): the same two hellos, now the HELLO and ANSWER of
 * common/peer_auth.h: the dialer's HELLO is signed with its member key over a fresh X25519
 * key, cluster, partition, both ids and its clock; the listener checks it against the
 * claimed member's public key (and the clock, within max_skew_ms) and answers with its own
 * fresh key, signed over the whole transcript; the dialer checks that against the public key
 * of the member it dialed. Both derive the connection's two keys (the dialer is the
 * crypto_kx client). The dialer is connected once the ANSWER checks out and at once sends a
 * sealed frame (its data, or a bare ACK). The listener is connected only when that first
 * sealed frame opened (key confirmation): a HELLO replayed by someone else within the skew
 * bound gets an ANSWER but can never produce that frame, so it neither connects nor replaces
 * the member's live connection; the handshake watchdog closes it. The secrets of a connection
 * (ephemeral secret key, derived keys) live only in this module's memory and are wiped
 * (sodium_memzero) when the handshake ends or fails, when the connection ends and at stop;
 * the member key is copied at start and wiped at stop. Handshake crypto and frame sealing and
 * opening run outside the mutex.
 *
 * Wire format (integers big-endian). Every frame: u8 type, u64 ack (frames of any type the
 * sender has received on this connection so far), then by type: 1 HELLO: plain: u32 magic
 * "KLPR", u8 version 1, u64 from, u64 to, u8 cluster length, cluster bytes; authenticated:
 * the version-2 HELLO or ANSWER body of common/peer_auth.h; 2 DATA: plain: the payload;
 * authenticated: u64 counter, the payload encrypted, a 16-byte tag; 3 ACK: plain: nothing;
 * authenticated: u64 counter and a 16-byte tag (types 2-4 may carry the BUSY flag 0x80, see
 * "Flow control"; type 3 alone may carry the CLOSING flag 0x40, see "Stopping", on any other
 * type it is a protocol error); 4 BATCH: as DATA, the payload being two or
 * more frames each as (u32 length, bytes), at most KL_PEER_BATCH_MAX_FRAMES of them and at
 * most max_frame bytes in all (prefixes included); delivered one by one, in order, exactly
 * as if each had come in its own DATA frame; a malformed one is a protocol error. Sealed frames use the sender's key of the
 * connection with the 9-byte header (type and ack) as associated data, so neither can be
 * changed; counters count each direction's sealed frames from 1, which is also the frame's
 * index on the connection (the hello being frame 0). An ack above the number of frames sent,
 * a second hello or an unknown type is a protocol error: the connection is closed and counted in
 * `refused`.
 *
 * Flow control, and why. The transport never drops a frame it accepted, but it has no
 * backpressure of its own: a sender that outruns its peer would fill the peer's memory
 * (frames read but not yet delivered) and its own (writes the kernel has not taken). So each
 * connection runs a credit window: every frame carries the number of frames its sender has
 * received on the connection so far (a cumulative ack); a member sends a DATA or BATCH frame
 * only while fewer than PEER_DATA_WINDOW (8, peer.c) of its frames on that connection are
 * unacknowledged, and a bare ACK only while fewer than PEER_DATA_WINDOW + 1 are. The window
 * bounds what one connection holds in flight (at most a window of frames of up to max_frame
 * bytes each), and it is what makes a backlog coalesce: frames beyond it wait in the peer's
 * outbound queue, from where the next data frame takes as many as fit
 * (KL_PEER_BATCH_MAX_FRAMES, max_frame bytes) as one BATCH frame, so a busy peer gets
 * everything queued for it each round trip. A second bound keeps memory per connection near
 * two frames even when the window allows more: data also waits while the transport holds
 * over max_frame bytes for the connection that the kernel has not taken (a slow reader), and
 * goes when those writes drain. Acks: every frame carries one; a bare ACK goes at once when
 * half the window (4 received frames) is unreported, and a lone frame is acknowledged by our
 * next frame or at the next watchdog tick (<= 100 ms, a delayed ack, so replies usually
 * carry it). Acks are sent as frames are read, before recv has seen them. Backpressure: a
 * BATCH frame can bring many frames per window slot, so while a member's inbox is half full
 * (by frames or bytes) every frame it sends has the BUSY flag (0x80) set in its type byte
 * (the first one at once, as a bare ACK if need be), and a member told BUSY sends no data
 * (acks still go, so the window's accounting stays exact) until a frame without the flag
 * arrives; the busy member sends one (a bare ACK) as soon as recv drained the inbox. A
 * watchdog closes a connection whose data frames stay unacknowledged for ack_timeout_ms (a
 * peer that stopped answering, a half-dead TCP connection, a network partition that drops
 * every packet); the dialer then redials and the window starts afresh.
 *
 * Stopping. A stopping member tells every connected member with a closing notice (a bare ACK
 * with the CLOSING flag; every frame it sends from then on carries the flag and none carries
 * data) and keeps reading (acks count, data is dropped). A member that receives a notice
 * sends that peer no more data (kl_peer_send: KL_UNAVAILABLE, dropped_unavailable) and
 * answers at once (any frame acknowledging the notice; counted in peer_closings). The answer
 * means every frame the stopping member sent arrived and every frame the peer sent before it
 * has been read, so the close neither cuts a frame nor resets a socket that holds unread
 * bytes (a reset can discard the notice itself). The stopping member closes once every
 * connection answered and nothing arrived for 40 ms, or after 0.5 s (a peer that does not
 * answer; logged). Members of versions without the flag refuse a notice as an unknown type
 * (closing the connection: the stop then proceeds).
 *
 * Delivery guarantees: none beyond "in order, at most once, per connection". A frame is
 * lost when the connection drops (frames queued for it are dropped and counted), when the
 * peer's inbox is full, when it is too large for the receiver, or at stop. Raft retries.
 *
 * Threading. Every kl_peer_* function, every transport event and recv run on the loop
 * thread (the one whose loop was given to kl_peer_start); there is no thread of this
 * module's own. recv runs from the idle handle, never inside the transport's read, so it
 * may call kl_peer_send or kl_peer_stop.
 *
 * Invariants: for each peer, unacknowledged frames on its connection <= PEER_DATA_WINDOW + 1,
 * data (DATA or BATCH) <= PEER_DATA_WINDOW; the inbox holds <= max_queued_frames frames and
 * <= max_queued_bytes payload bytes; each outbound queue likewise (limits apply per peer);
 * frames are delivered in the order the peer sent them on one connection.
 *
 * Limits: at most KL_PEER_MAX_PEERS other members; ids are nonzero and distinct; the cluster
 * name is 1..KL_PEER_MAX_CLUSTER bytes; a frame is at most max_frame bytes (a received frame
 * up to 4 x max_frame is dropped and counted; the transport closes the connection on a
 * larger one, unread).
 * ack_timeout_ms is at least 200 (a lone frame's ack may wait up to 100 ms) and should be
 * the same on every member. At most 32 connections are tracked at once; past that new ones are
 * refused, so a flood of strangers that never say hello can keep members out for up to
 * ack_timeout_ms. Plain mode has no encryption or authentication beyond the hello (see the
 * modes above). Authenticated mode costs per connection two signatures, two verifications
 * and two X25519 operations, and per frame one XChaCha20-Poly1305 seal and open (24 bytes
 * more on the wire). */
#ifndef KL_REPL_PEER_H
#define KL_REPL_PEER_H

#include "common/limits.h"
#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define KL_PEER_DEFAULT_QUEUED_FRAMES 1024
#define KL_PEER_DEFAULT_QUEUED_BYTES (64u << 20)
#define KL_PEER_DEFAULT_ACK_TIMEOUT_MS 5000
#define KL_PEER_SECRET_LEN 64             /* Ed25519 member secret key (common/keys.h) */
#define KL_PEER_PUBLIC_LEN 32             /* Ed25519 member public key */

typedef struct kl_peer kl_peer;

/* Loop thread; `frame` is valid only during the call. */
typedef void (*kl_peer_recv_fn)(void *owner, uint64_t from, const uint8_t *frame, size_t len);

typedef struct kl_peer_config {
    const char *cluster;    /* cluster name, compared in every hello */
    int32_t partition;      /* the partition these members replicate (authenticated hellos) */
    uint64_t self;          /* this member's id, nonzero */
    const char *listen_url; /* this member's peer URL, e.g. "tcp://127.0.0.1:7500" */
    /* KL_PEER_SECRET_LEN bytes: this member's Ed25519 secret key (common/keys.h
     * member_secret), copied; NULL = none (plain mode). */
    const uint8_t *member_secret;
    struct {
        uint64_t id;
        const char *url; /* required for ids below self (dialed); unused otherwise */
        /* KL_PEER_PUBLIC_LEN bytes: the member's public key (cluster file), copied; NULL =
         * unknown, which makes this member run in plain mode. */
        const uint8_t *public_key;
    } peers[KL_PEER_MAX_PEERS];
    size_t n_peers;           /* the other members only */
    size_t max_frame;         /* 0 = KL_PEER_DEFAULT_MAX_FRAME */
    size_t max_queued_frames; /* inbox and each outbound queue; 0 = default */
    size_t max_queued_bytes;  /* inbox and each outbound queue; 0 = default */
    uint32_t ack_timeout_ms;  /* handshake and ack watchdog, >= 200; 0 = default */
    uint32_t max_skew_ms;     /* accepted |hello clock - our clock|; 0 = default */
    kl_peer_recv_fn recv;
    void *owner; /* passed to recv */
    /* Replication configuration (0 replica_count = none: hellos carry the bare cluster
     * name). Hellos then carry the cluster name with the configuration index and a digest
     * of (cluster, partition, index, every member's id, peer URL and public key,
     * replica_count): a hello whose index is ours but whose digest is not is refused and
     * counted in config_mismatch (logged with both sides' index and digest); another index
     * is accepted (membership changes move the index on purpose). */
    uint64_t config_index;
    uint32_t replica_count;
    /* Connections at once (0 or above the built-in bound of 32: that bound); one more is
     * closed at once and counted in refused_cap. idle_ms (0 = never): a connection that
     * completed its handshake and carried no frame for idle_ms is closed (its dialer redials
     * at once) and counted in idle_closed. */
    uint32_t max_pipes;
    uint32_t idle_ms;
} kl_peer_config;

typedef struct kl_peer_counters {
    uint64_t sent;     /* data frames handed to the transport (each frame of a batch counts) */
    uint64_t coalesced; /* of which rode in a batch behind an earlier one (not its first) */
    uint64_t received; /* data frames delivered to recv */
    uint64_t dropped;  /* the sum of the dropped_* below */
    uint64_t dropped_unavailable; /* kl_peer_send without a connection */
    uint64_t dropped_queue_full;  /* kl_peer_send with a full outbound queue (or no memory) */
    uint64_t dropped_disconnect;  /* queued for a connection that dropped, or at stop */
    uint64_t dropped_oversize;    /* received frames over max_frame */
    uint64_t dropped_inbox_full;  /* received while the inbox was full */
    uint64_t dropped_nng;         /* the transport refused a send (its connection was closing,
                                     or over its queue bound); the connection is reset */
    uint64_t refused;       /* connections closed for a bad or missing hello, a frame that did not
                               open (authenticated mode) or a protocol error */
    uint64_t stalls;        /* connections closed by the ack watchdog */
    uint64_t connects;      /* handshakes completed, in total */
    uint64_t config_mismatch; /* hellos refused: same configuration index, another digest
                                 (also counted in refused) */
    uint64_t refused_cap;   /* connections closed at once: max_pipes open (also in refused) */
    uint64_t idle_closed;   /* connections closed after idle_ms without a frame */
    uint64_t peer_closings; /* closing notices received: a peer stopping (see kl_peer_stop) */
    uint32_t pipes_open;    /* connections tracked now (handshaking or connected) */
    uint32_t connected;     /* peers connected now */
    bool authenticated;     /* this member runs in authenticated mode (see the top) */
} kl_peer_counters;

/* Validates cfg (copied: nothing in it is borrowed after the call), picks the mode (see the
 * top; logged once), listens and starts dialing. Fails INVALID_ARGUMENT for a bad configuration or URL, UNAVAILABLE when the
 * listen URL cannot be bound; the message names the URL and the operation. */
kl_code kl_peer_start(uv_loop_t *loop, const kl_peer_config *cfg, kl_peer **out, kl_err *err);

/* Copies the frame and queues it for member `to`; never blocks. KL_OK: queued (it may still
 * be lost, see above). KL_UNAVAILABLE: no connection to `to` (dropped). KL_RESOURCE_EXHAUSTED:
 * `to`'s outbound queue is full (dropped). KL_INVALID_ARGUMENT: `to` is not another member,
 * or len > max_frame. Every drop is counted. Safe to call from inside recv. */
kl_code kl_peer_send(kl_peer *p, uint64_t to, const uint8_t *frame, size_t len);

/* Inside recv: when the transport read the frame being delivered (uv_hrtime, ns: the
 * same clock as CLOCK_MONOTONIC), for the replication trace (trace.h); 0 outside recv. */
uint64_t kl_peer_delivering_read_ns(const kl_peer *p);

/* True when both hellos crossed on a live connection to member `id` (authenticated mode,
 * listener side: and the member's first sealed frame opened). */
bool kl_peer_connected(const kl_peer *p, uint64_t id);

/* A snapshot of the counters (the type is not named kl_peer_stats because C forbids a
 * function and a typedef of one name). */
void kl_peer_stats(const kl_peer *p, kl_peer_counters *out);

/* Membership changes (ARCHITECTURE.md "Replication", "Membership in the driver"): a member
 * added at run time is known from now on, dialed when its id is below ours (url required)
 * and, in authenticated mode, checked against public_key (required then). Adding a known id
 * does nothing. KL_INVALID_ARGUMENT naming member_id, peer_url or public_key;
 * KL_RESOURCE_EXHAUSTED "members" past KL_PEER_MAX_PEERS others; the dial error otherwise (the
 * member stays known). Removing closes its connection, drops its queued frames and stops
 * dialing it; its hellos are refused from then on (an unknown member). The handshake's
 * configuration check is unchanged: it compares the SEED configuration (the cluster file's, at
 * config_index 1) between members started from the same cluster file; a member started to
 * join, or whose store holds a replicated configuration (the driver decides), announces
 * config_index 0 and is not compared (another index), so the check still catches two members
 * of a never-changed partition started from different cluster files. Loop thread. */
kl_code kl_peer_add(kl_peer *p, uint64_t id, const char *url, const uint8_t *public_key, kl_err *err);
kl_code kl_peer_remove(kl_peer *p, uint64_t id);

/* Returns at once: from now on no data is sent or delivered, queued frames are dropped
 * (counted in dropped_disconnect). The connections are closed from the loop once every one
 * answered the closing notice and fell quiet (see "Stopping" above; at most 0.5 s later),
 * then the handles; the memory is freed after their close callbacks, so keep running the
 * loop after stop. Call once; no other kl_peer_* call after it. Safe to call
 * from inside recv (later frames are dropped). */
void kl_peer_stop(kl_peer *p);

#endif
