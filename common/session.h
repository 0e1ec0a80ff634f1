/* session: per-session authentication and sealing (ARCHITECTURE.md "Sessions and RPC"), the pure core.
 * No sockets, no clock, no global state: time and randomness are parameters.
 *
 * Handshake (wire: proto/keyload/v1/session.proto):
 *   client  kl_session_hello_new: ephemeral X25519 pair (crypto_kx), Hello signed with the
 *           principal's Ed25519 key over the Hello transcript.
 *   daemon  kl_session_accept: checks target (cluster, partition, member), freshness
 *           (|now - unix_ms| <= max_skew_ms) and the signature (principal's public key, looked
 *           up by the caller in the catalog); makes its own ephemeral pair and a session id,
 *           signs the answer transcript with the member key, derives the keys
 *           (crypto_kx_server_session_keys).
 *   client  kl_session_finish: verifies the member signature (member public key from the
 *           cluster file), derives the keys (crypto_kx_client_session_keys).
 *
 * Transcripts (what is signed) follow common/canon.h's encoding: each item is a tag byte
 * and its value; integers are 8-byte big-endian (signed ones two's complement, partition
 * sign-extended); byte strings and text are a 4-byte big-endian length, then the bytes.
 *   Hello       "keyload.hello.v1", principal_id, client_kx_pk, unix_ms, cluster,
 *               partition, member
 *   HelloAnswer "keyload.hello-answer.v1", principal_id, client_kx_pk, server_kx_pk,
 *               unix_ms, cluster, partition, member, session_id, expires_unix_ms
 * The domain strings keep a Hello signature from ever verifying as an answer signature
 * (or as anything else a principal or member key signs).
 *
 * Sealing: the session's AEAD (below); a request is sealed with the client's tx key
 * (= the daemon's rx key), an answer with the daemon's tx key (= the client's rx key).
 *   nonce       direction (1: 0x01 request, 0x02 answer) || counter (8, big-endian) || zeros
 *               to the AEAD's nonce size (24 bytes: 15 zeros; 12 bytes: 3 zeros)
 *   AD          session_id (16) || direction (1) || counter (8, big-endian) || caller's AD
 * An answer uses its request's counter in both, so it opens only for that request: an
 * answer swapped between two in-flight requests fails. The caller's AD (may be empty) binds
 * whatever travels outside the seal (e.g. the Envelope's method); it is at most
 * KL_SESSION_AD_MAX bytes. Counters start at 1.
 *
 * AEAD: crypto_aead_xchacha20poly1305_ietf unless the daemon chose AES-256-GCM
 * (crypto_aead_aes256gcm, 2-3x cheaper for the few hundred bytes most requests hold, where the
 * CPU has AES-NI). The client offers it in Hello.aead_offer when its CPU can; the daemon
 * picks it when offered and its own CPU can, and says so in HelloAnswer.aead, which the
 * member signature covers (the answer transcript gains item 0x0a, the aead, when it is not
 * 0, so answers without it verify as before). The offer is not signed: removing it costs
 * speed, not safety, since both AEADs are trusted alike, and a client refuses an answer
 * that picks what it did not offer. Both nonces are used once per key: the counters never
 * repeat in a direction, and the daemon seals one answer per request.
 *
 * Errors: every refusal to authenticate is KL_UNAUTHENTICATED with a distinct detail
 * (bad_signature, stale_hello, future_hello, wrong_cluster, wrong_partition, wrong_member,
 * bad_member_signature, bad_seal, replayed_counter, bad_counter); malformed input is
 * KL_INVALID_ARGUMENT naming the field. Messages name fields and numbers only: never a key,
 * a signature, a payload or a principal/cluster string sent by the peer.
 * Every function needs sodium_init() to have succeeded. A kl_session is not thread-safe:
 * callers serialize operations on one session. */
#ifndef KL_SESSION_H
#define KL_SESSION_H

#include "common/limits.h"
#include "common/status.h"
#include "keyload/v1/session.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KL_SESSION_ID_LEN 16           /* a version-4 GUID (common/guid.h), never all zero */
#define KL_SESSION_KX_PUBLIC_LEN 32    /* crypto_kx_PUBLICKEYBYTES */
#define KL_SESSION_KX_SECRET_LEN 32    /* crypto_kx_SECRETKEYBYTES */
#define KL_SESSION_KX_SEED_LEN 32      /* crypto_kx_SEEDBYTES */
#define KL_SESSION_KEY_LEN 32          /* crypto_kx_SESSIONKEYBYTES */
#define KL_SESSION_SIGNATURE_LEN 64    /* crypto_sign_BYTES */
#define KL_SESSION_SIGN_PUBLIC_LEN 32  /* crypto_sign_PUBLICKEYBYTES */
#define KL_SESSION_SIGN_SECRET_LEN 64  /* crypto_sign_SECRETKEYBYTES */
#define KL_SESSION_SEAL_OVERHEAD 16    /* crypto_aead_xchacha20poly1305_ietf_ABYTES */
#define KL_SESSION_WINDOW 64           /* request counters the replay window remembers */
#define KL_SESSION_DEFAULT_SKEW_MS 30000
/* The AEADs a session seals with (kl_session.aead, HelloAnswer.aead); an offer names the
 * ones besides the default by bit 1 << id. */
#define KL_SESSION_AEAD_XCHACHA20POLY1305 0u
#define KL_SESSION_AEAD_AES256GCM 1u
#define KL_SESSION_AEAD_OFFER_AES256GCM (1u << KL_SESSION_AEAD_AES256GCM)

/* Fills out with len random bytes. NULL where one is asked for means libsodium's
 * randombytes_buf; tests pass a deterministic one. */
typedef void (*kl_session_random_fn)(void *ctx, uint8_t *out, size_t len);

typedef struct kl_session_hello {
    char principal_id[KL_SESSION_PRINCIPAL_MAX + 1];   /* 1..128 bytes, NUL-terminated */
    uint8_t client_kx_pk[KL_SESSION_KX_PUBLIC_LEN];
    int64_t unix_ms;
    char cluster[KL_SESSION_CLUSTER_MAX + 1];          /* 1..127 bytes, NUL-terminated */
    int32_t partition;
    uint64_t member;
    uint8_t signature[KL_SESSION_SIGNATURE_LEN];
    uint32_t aead_offer;                               /* not signed (see "AEAD") */
} kl_session_hello;

typedef struct kl_session_hello_answer {
    uint8_t server_kx_pk[KL_SESSION_KX_PUBLIC_LEN];
    uint8_t session_id[KL_SESSION_ID_LEN];
    int64_t expires_unix_ms;
    uint8_t member_signature[KL_SESSION_SIGNATURE_LEN];
    uint32_t aead;                     /* KL_SESSION_AEAD_*; signed when not 0 */
} kl_session_hello_answer;

/* The client between Hello and HelloAnswer: the Hello it sent and its ephemeral secret.
 * Wipe it with kl_session_client_wipe once done (kl_session_finish does on success). */
typedef struct kl_session_client {
    kl_session_hello hello;
    uint8_t kx_sk[KL_SESSION_KX_SECRET_LEN];
    bool has_secret;                   /* false once wiped or finished */
} kl_session_client;

typedef enum kl_session_role {
    KL_SESSION_CLIENT = 1,             /* seals requests, opens answers */
    KL_SESSION_DAEMON = 2              /* opens requests, seals answers */
} kl_session_role;

/* One end of an established session.
 * Invariants:
 *   - id is never all zero; rx and tx are the crypto_kx session keys of this end, so the
 *     client's tx equals the daemon's rx (requests) and the daemon's tx equals the client's
 *     rx (answers); rx != tx.
 *   - role decides which of seal/open request/answer the session allows; the others
 *     refuse with KL_INVALID_ARGUMENT (detail "role").
 *   - client: next_counter is the lowest request counter not yet used for sealing (>= 1);
 *     kl_session_seal_request refuses a lower one, so no (key, nonce) pair is used twice.
 *   - daemon: highest is the highest request counter opened (0: none yet); bit i of
 *     window is set iff counter highest - i was opened (i < KL_SESSION_WINDOW; bit 0 is set
 *     whenever highest > 0). A counter is accepted iff it is > highest, or within the window
 *     and its bit is clear. Only a successful open changes highest/window.
 *   - expires_unix_ms is the daemon's clock at which the session ends (both ends hold the
 *     value the daemon signed).
 *   - The daemon must seal exactly one answer per opened request (the answer's nonce is
 *     the request's counter).
 * Wipe it with kl_session_wipe (sodium_memzero) when done. */
typedef struct kl_session {
    kl_session_role role;
    uint8_t id[KL_SESSION_ID_LEN];
    uint8_t rx[KL_SESSION_KEY_LEN];    /* opens what the peer seals */
    uint8_t tx[KL_SESSION_KEY_LEN];    /* seals what this end sends */
    char principal_id[KL_SESSION_PRINCIPAL_MAX + 1];
    int64_t expires_unix_ms;
    uint64_t next_counter;             /* client only */
    uint64_t highest;                  /* daemon only */
    uint64_t window;                   /* daemon only */
    uint32_t aead;                     /* KL_SESSION_AEAD_*, the same at both ends */
} kl_session;

/* What the daemon needs to accept a Hello. All pointers are borrowed for the call. */
typedef struct kl_session_accept_params {
    const uint8_t *principal_public;   /* 32 bytes: the Hello principal's key (catalog) */
    const char *cluster;               /* this member's cluster name */
    int32_t partition;                 /* this member's partition */
    uint64_t member;                   /* this member's number */
    const uint8_t *member_secret;      /* 64 bytes: this member's Ed25519 secret key */
    int64_t now_ms;                    /* the daemon's clock, unix ms */
    int64_t max_skew_ms;               /* >= 0; e.g. KL_SESSION_DEFAULT_SKEW_MS */
    int64_t ttl_ms;                    /* > 0: session lifetime (session_ttl_ms) */
    kl_session_random_fn random;       /* NULL: randombytes_buf */
    void *random_ctx;
    /* This end's X25519 pair, or both NULL to make a fresh one for this Hello. A driver may
     * reuse one pair for a short, bounded window (kl_session_kx_pair_new) to spend one
     * fixed-base multiplication per window instead of per Hello in a reconnect storm; each
     * session's keys still differ (the client's ephemeral and the session id do). */
    const uint8_t *server_kx_pk;       /* 32 bytes */
    const uint8_t *server_kx_sk;       /* 32 bytes */
    bool xchacha_only;                 /* never pick AES-256-GCM, even when offered (tests) */
} kl_session_accept_params;

/* A fresh X25519 pair for kl_session_accept_params (random: as there). */
kl_code kl_session_kx_pair_new(uint8_t pk[32], uint8_t sk[32], kl_session_random_fn random, void *random_ctx,
                               kl_err *err);

/* Client: makes an ephemeral X25519 pair (32 bytes from random: crypto_kx_seed_keypair; NULL
 * random: crypto_kx_keypair) and a Hello for (principal_id, cluster, partition, member) at
 * now_ms, signed with principal_secret (64 bytes), offering AES-256-GCM when this CPU
 * runs it (crypto_aead_aes256gcm_is_available). *out holds the Hello to send and the
 * ephemeral secret. INVALID_ARGUMENT names principal_id or cluster when empty or too long. */
kl_code kl_session_hello_new(const char *principal_id, const uint8_t *principal_secret,
                             const char *cluster, int32_t partition, uint64_t member,
                             int64_t now_ms, kl_session_random_fn random, void *random_ctx,
                             kl_session_client *out, kl_err *err);

/* Daemon: checks the Hello (in this order: well-formed, target cluster/partition/member,
 * freshness, signature) and on success fills *answer (to send back) and *out (a daemon
 * session, expiring at now_ms + ttl_ms). UNAUTHENTICATED details: wrong_cluster,
 * wrong_partition, wrong_member, stale_hello (older than now - max_skew), future_hello
 * (newer than now + max_skew), bad_signature. The session seals with AES-256-GCM when the
 * Hello offered it, this CPU runs it and p->xchacha_only is false; else XChaCha20-Poly1305.
 * On failure *answer and *out are wiped. */
kl_code kl_session_accept(const kl_session_hello *hello, const kl_session_accept_params *p,
                          kl_session_hello_answer *answer, kl_session *out, kl_err *err);

/* Client: verifies answer's member signature with member_public (32 bytes, the target
 * member's "public_key" in the cluster file) over the transcript of c->hello and answer,
 * then derives the keys into *out (a client session; next_counter 1). On success c's
 * ephemeral secret is wiped; on failure (UNAUTHENTICATED bad_member_signature, or
 * INVALID_ARGUMENT, "aead" for an AEAD the Hello did not offer) c is left as it was and
 * *out is wiped. */
kl_code kl_session_finish(kl_session_client *c, const kl_session_hello_answer *answer,
                          const uint8_t *member_public, kl_session *out, kl_err *err);

/* Client: seals plaintext (pt_len bytes; pt may be NULL when 0) as request `counter`, with
 * extra associated data ad (ad_len bytes; NULL when 0), into out (out_cap >=
 * pt_len + KL_SESSION_SEAL_OVERHEAD); *out_len = pt_len + KL_SESSION_SEAL_OVERHEAD. counter
 * must be >= s->next_counter and < UINT64_MAX (INVALID_ARGUMENT "counter" otherwise); on
 * success s->next_counter = counter + 1. ad_len > KL_SESSION_AD_MAX is INVALID_ARGUMENT. */
kl_code kl_session_seal_request(kl_session *s, uint64_t counter, const uint8_t *pt,
                                size_t pt_len, const uint8_t *ad, size_t ad_len, uint8_t *out,
                                size_t out_cap, size_t *out_len, kl_err *err);

/* Daemon: opens request `counter`. Refuses (UNAUTHENTICATED) counter 0 ("bad_counter"), a
 * counter already opened or older than the window ("replayed_counter") and a seal that does
 * not verify ("bad_seal"). out_cap >= sealed_len - KL_SESSION_SEAL_OVERHEAD. Only success
 * changes s (it records counter in the window); on failure out holds nothing. */
kl_code kl_session_open_request(kl_session *s, uint64_t counter, const uint8_t *sealed,
                                size_t sealed_len, const uint8_t *ad, size_t ad_len,
                                uint8_t *out, size_t out_cap, size_t *out_len, kl_err *err);

/* Daemon: seals the answer to request `request_counter`, which it must have opened:
 * INVALID_ARGUMENT "request_counter" when it is 0, above highest, or inside the window
 * without its bit set. Does not change s. Sizes as kl_session_seal_request. */
kl_code kl_session_seal_answer(const kl_session *s, uint64_t request_counter, const uint8_t *pt,
                               size_t pt_len, const uint8_t *ad, size_t ad_len, uint8_t *out,
                               size_t out_cap, size_t *out_len, kl_err *err);

/* Client: opens the answer to its request `request_counter`; UNAUTHENTICATED "bad_counter"
 * when it never sealed that counter, "bad_seal" when the seal does not verify (including
 * an answer to another request). Does not change s. */
kl_code kl_session_open_answer(const kl_session *s, uint64_t request_counter,
                               const uint8_t *sealed, size_t sealed_len, const uint8_t *ad,
                               size_t ad_len, uint8_t *out, size_t out_cap, size_t *out_len,
                               kl_err *err);

/* True when now_ms >= s->expires_unix_ms. */
bool kl_session_expired(const kl_session *s, int64_t now_ms);

/* sodium_memzero of the whole struct. NULL is accepted. */
void kl_session_wipe(kl_session *s);
void kl_session_client_wipe(kl_session_client *c);

/* Wire conversion (session.proto). *_to_pb fill m with pointers into the source struct (no
 * allocation; m is valid while the source is). *_from_pb check every length and refuse
 * (INVALID_ARGUMENT, detail = the field name) a field of the wrong size or an empty or
 * too-long string; they copy into *out. */
void kl_session_hello_to_pb(const kl_session_hello *h, Keyload__V1__Hello *m);
kl_code kl_session_hello_from_pb(const Keyload__V1__Hello *m, kl_session_hello *out,
                                 kl_err *err);
void kl_session_answer_to_pb(const kl_session_hello_answer *a, Keyload__V1__HelloAnswer *m);
kl_code kl_session_answer_from_pb(const Keyload__V1__HelloAnswer *m,
                                  kl_session_hello_answer *out, kl_err *err);

#endif
