/* peer_auth: the authenticated handshake and frame sealing of replication links between the
 * members of one partition (ARCHITECTURE.md "Sessions and RPC" "Replication links between members use the same
 * handshake with member keys"), the pure core. No sockets, no clock, no global state: time
 * is a parameter; randomness is libsodium's. daemon/repl/peer.c wraps it in its frames.
 *
 * Handshake (two messages; the dialer is the member with the higher id, see peer.h):
 *   dialer    kl_peer_auth_hello: an ephemeral X25519 pair (crypto_kx) and a HELLO naming
 *             cluster, partition, from (itself), to (the member it dials) and its clock,
 *             signed with its Ed25519 member key.
 *   listener  kl_peer_auth_accept: checks the target (cluster, partition, to = itself), the
 *             freshness (|now - unix_ms| <= max_skew_ms) and the signature (the public key of
 *             the member the HELLO names, from the cluster file, looked up by the caller);
 *             makes its own ephemeral pair and an ANSWER signed with its member key over the
 *             whole transcript, and derives the keys (crypto_kx_server_session_keys).
 *   dialer    kl_peer_auth_finish: checks the ANSWER the same way (it must come from the
 *             member dialed, to us, fresh) and its signature, derives the keys
 *             (crypto_kx_client_session_keys).
 * The ANSWER proves the listener is fresh and who it claims (its signature covers the
 * dialer's new ephemeral key). A replayed HELLO (within the skew bound) gets an ANSWER, but
 * the replayer lacks the dialer's ephemeral secret and cannot seal a single frame: the
 * listener must therefore treat a connection as the member's only once the first sealed
 * frame from the dialer opened (key confirmation; peer.c does).
 *
 * Wire (integers big-endian), the body that follows peer.c's 9-byte frame header:
 *   u32 magic "KLPR", u8 version 2, u8 kind (1 HELLO, 2 ANSWER), u64 from, u64 to,
 *   u32 partition (two's complement), u64 unix_ms (two's complement), 32 bytes kx public
 *   key, u8 cluster length (1..255), the cluster bytes, 64 bytes Ed25519 signature.
 * Transcripts (what is signed; common/canon.h's encoding: each item a tag byte, integers as
 * 8 bytes big-endian, byte strings as a 4-byte length then the bytes):
 *   HELLO   "keyload.peer-hello.v1", cluster, partition, from, to, unix_ms, kx_pk
 *   ANSWER  "keyload.peer-answer.v1", cluster, partition, dialer id, listener id,
 *           HELLO unix_ms, HELLO kx_pk, HELLO signature, ANSWER unix_ms, ANSWER kx_pk
 * The domain strings differ from those of client sessions (common/session.h), which the
 * same member key signs, so no signature verifies as another kind.
 *
 * Sealed frames: every frame after the handshake, in each direction, is
 *   header (hdr_len bytes, the associated data) || u64 counter || ciphertext || 16-byte tag
 * with crypto_aead_xchacha20poly1305_ietf under the direction's key (the dialer's tx = the
 * listener's rx); nonce = counter (8 bytes big-endian) || 16 zero bytes. Counters start at 1
 * and go up by one per frame in each direction; a connection carries frames in order, so
 * the receiver accepts exactly the next counter: a replayed, reordered or dropped frame is
 * refused ("bad_counter"), a modified one too ("bad_seal").
 *
 * Errors: refusals are KL_UNAUTHENTICATED with a distinct detail (wrong_kind, wrong_cluster,
 * wrong_partition, wrong_member, stale_hello, future_hello, bad_signature, bad_kx,
 * bad_counter, bad_seal); malformed input is KL_INVALID_ARGUMENT ("malformed", "version").
 * Messages hold names and numbers only, never a key, a signature or a cluster string sent
 * by the peer. Secrets (ephemeral secret keys, derived keys) are wiped with sodium_memzero
 * on every failure path and by the *_wipe functions. Every function needs sodium_init(). */
#ifndef KL_PEER_AUTH_H
#define KL_PEER_AUTH_H

#include "common/limits.h"
#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KL_PEER_AUTH_VERSION 2
#define KL_PEER_AUTH_KIND_HELLO 1
#define KL_PEER_AUTH_KIND_ANSWER 2
#define KL_PEER_AUTH_KX_LEN 32        /* crypto_kx_PUBLICKEYBYTES */
#define KL_PEER_AUTH_KEY_LEN 32       /* crypto_kx_SESSIONKEYBYTES */
#define KL_PEER_AUTH_SIG_LEN 64       /* crypto_sign_BYTES */
#define KL_PEER_AUTH_PUBLIC_LEN 32    /* member public key, crypto_sign_PUBLICKEYBYTES */
#define KL_PEER_AUTH_SECRET_LEN 64    /* member secret key, crypto_sign_SECRETKEYBYTES */
#define KL_PEER_AUTH_FIXED (4 + 1 + 1 + 8 + 8 + 4 + 8 + KL_PEER_AUTH_KX_LEN + 1 + KL_PEER_AUTH_SIG_LEN)
#define KL_PEER_AUTH_MAX (KL_PEER_AUTH_FIXED + KL_PEER_AUTH_CLUSTER_MAX)
#define KL_PEER_AUTH_COUNTER_LEN 8
#define KL_PEER_AUTH_TAG_LEN 16       /* crypto_aead_xchacha20poly1305_ietf_ABYTES */
#define KL_PEER_AUTH_OVERHEAD (KL_PEER_AUTH_COUNTER_LEN + KL_PEER_AUTH_TAG_LEN)
#define KL_PEER_AUTH_DEFAULT_SKEW_MS 30000

/* A decoded HELLO or ANSWER. */
typedef struct kl_peer_auth_msg {
    uint8_t kind;                             /* KL_PEER_AUTH_KIND_* */
    uint64_t from, to;
    int32_t partition;
    int64_t unix_ms;
    uint8_t kx_pk[KL_PEER_AUTH_KX_LEN];
    size_t cluster_len;                       /* 1..KL_PEER_AUTH_CLUSTER_MAX */
    uint8_t cluster[KL_PEER_AUTH_CLUSTER_MAX];
    uint8_t sig[KL_PEER_AUTH_SIG_LEN];
} kl_peer_auth_msg;

/* Who this end is. Pointers are borrowed for the call. */
typedef struct kl_peer_auth_self {
    const char *cluster;          /* 1..KL_PEER_AUTH_CLUSTER_MAX bytes, NUL-terminated */
    int32_t partition;
    uint64_t id;                  /* this member, nonzero */
    const uint8_t *secret;        /* KL_PEER_AUTH_SECRET_LEN: this member's Ed25519 key */
} kl_peer_auth_self;

/* The dialer between its HELLO and the ANSWER: the HELLO it sent and its ephemeral secret.
 * Wiped by kl_peer_auth_finish on success, else by kl_peer_auth_dial_wipe. */
typedef struct kl_peer_auth_dial {
    kl_peer_auth_msg hello;
    uint8_t kx_sk[KL_PEER_AUTH_KX_LEN];
    bool has_secret;
} kl_peer_auth_dial;

/* One end's keys of one connection: rx opens what the other end seals, tx seals what this
 * end sends; the dialer's tx is the listener's rx and the other way round. */
typedef struct kl_peer_auth_keys {
    uint8_t rx[KL_PEER_AUTH_KEY_LEN];
    uint8_t tx[KL_PEER_AUTH_KEY_LEN];
} kl_peer_auth_keys;

/* Dialer: a fresh ephemeral pair and a HELLO from me->id to `to` at now_ms, signed.
 * INVALID_ARGUMENT for a bad `me` (cluster empty or too long, no secret, id 0) or to == 0. */
kl_code kl_peer_auth_hello(const kl_peer_auth_self *me, uint64_t to, int64_t now_ms,
                           kl_peer_auth_dial *out, kl_err *err);

/* The body of m as on the wire; returns its length, or 0 when cap is too small or m is
 * not encodable (cluster_len 0 or too long, kind unknown). */
size_t kl_peer_auth_encode(const kl_peer_auth_msg *m, uint8_t *out, size_t cap);

/* Parses a body (exactly len bytes). INVALID_ARGUMENT "malformed" (bad magic, length,
 * cluster length or kind) or "version" (not 2: e.g. the unauthenticated hello of version 1,
 * which has the same magic). */
kl_code kl_peer_auth_decode(const uint8_t *b, size_t len, kl_peer_auth_msg *out, kl_err *err);

/* Listener: checks hello (kind HELLO, cluster, partition, to == me->id, freshness within
 * max_skew_ms >= 0, signature with from_public = the public key of member hello->from) and
 * on success fills *answer (to send) and *keys. The caller has checked that hello->from is
 * a member that may dial it and passes that member's key. On failure both are wiped. */
kl_code kl_peer_auth_accept(const kl_peer_auth_self *me, const kl_peer_auth_msg *hello,
                            const uint8_t *from_public, int64_t now_ms, int64_t max_skew_ms,
                            kl_peer_auth_msg *answer, kl_peer_auth_keys *keys, kl_err *err);

/* Dialer: checks answer (kind ANSWER, cluster, partition, from == the member dialed, to ==
 * us, freshness, signature with to_public = the dialed member's public key over the
 * transcript of d->hello and answer), derives *keys and wipes d's secret. On failure *keys
 * is wiped and d is left as it was (the caller wipes it). */
kl_code kl_peer_auth_finish(kl_peer_auth_dial *d, const kl_peer_auth_msg *answer,
                            const uint8_t *to_public, int64_t now_ms, int64_t max_skew_ms,
                            kl_peer_auth_keys *keys, kl_err *err);

/* Seals in place. frame holds hdr_len header bytes (authenticated, not encrypted), then
 * KL_PEER_AUTH_COUNTER_LEN bytes of room (the counter is written there), then pt_len bytes of
 * plaintext (encrypted in place), then KL_PEER_AUTH_TAG_LEN bytes of room for the tag.
 * Returns the sealed frame's length, hdr_len + KL_PEER_AUTH_OVERHEAD + pt_len. counter >= 1. */
size_t kl_peer_auth_seal(const uint8_t key[KL_PEER_AUTH_KEY_LEN], uint64_t counter,
                         uint8_t *frame, size_t hdr_len, size_t pt_len);

/* Opens a sealed frame of len bytes in place: refuses (UNAUTHENTICATED) a frame too short to
 * hold counter and tag or whose tag does not verify ("bad_seal"), and a counter other than
 * `expected` ("bad_counter"). On success the plaintext is at frame + hdr_len +
 * KL_PEER_AUTH_COUNTER_LEN, *pt_len bytes. On failure *pt_len is 0 and the frame must be
 * dropped (libsodium clears the would-be plaintext of a bad seal). */
kl_code kl_peer_auth_open(const uint8_t key[KL_PEER_AUTH_KEY_LEN], uint64_t expected,
                          uint8_t *frame, size_t len, size_t hdr_len, size_t *pt_len,
                          kl_err *err);

/* sodium_memzero of the whole struct. NULL is accepted. */
void kl_peer_auth_dial_wipe(kl_peer_auth_dial *d);
void kl_peer_auth_keys_wipe(kl_peer_auth_keys *k);

#endif
