#include "common/session.h"

#include "common/canon.h"

#include <sodium.h>
#include <string.h>

_Static_assert(KL_SESSION_KX_PUBLIC_LEN == crypto_kx_PUBLICKEYBYTES, "kx public key");
_Static_assert(KL_SESSION_KX_SECRET_LEN == crypto_kx_SECRETKEYBYTES, "kx secret key");
_Static_assert(KL_SESSION_KX_SEED_LEN == crypto_kx_SEEDBYTES, "kx seed");
_Static_assert(KL_SESSION_KEY_LEN == crypto_kx_SESSIONKEYBYTES, "session key");
_Static_assert(KL_SESSION_KEY_LEN == crypto_aead_xchacha20poly1305_ietf_KEYBYTES, "aead key");
_Static_assert(KL_SESSION_SIGNATURE_LEN == crypto_sign_BYTES, "signature");
_Static_assert(KL_SESSION_SIGN_PUBLIC_LEN == crypto_sign_PUBLICKEYBYTES, "sign public key");
_Static_assert(KL_SESSION_SIGN_SECRET_LEN == crypto_sign_SECRETKEYBYTES, "sign secret key");
_Static_assert(KL_SESSION_SEAL_OVERHEAD == crypto_aead_xchacha20poly1305_ietf_ABYTES, "tag");
_Static_assert(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES == 24, "nonce");
_Static_assert(KL_SESSION_KEY_LEN == crypto_aead_aes256gcm_KEYBYTES, "aes-gcm key");
_Static_assert(KL_SESSION_SEAL_OVERHEAD == crypto_aead_aes256gcm_ABYTES, "aes-gcm tag");
_Static_assert(crypto_aead_aes256gcm_NPUBBYTES == 12, "aes-gcm nonce");
_Static_assert(KL_SESSION_WINDOW == 64, "the window is one uint64_t bitmap");

#define DIR_REQUEST 0x01
#define DIR_ANSWER 0x02

static const char HELLO_DOMAIN[] = "keyload.hello.v1";
static const char ANSWER_DOMAIN[] = "keyload.hello-answer.v1";

/* ---- transcripts (common/canon.h's encoding, into a fixed buffer) ---- */

/* Bound of the answer transcript, the longer of the two: domain, principal, two kx keys,
 * cluster, session id (tag + 4-byte length each) and five integers (tag + 8 bytes). */
#define TRANSCRIPT_MAX                                                                     \
    (5 + sizeof ANSWER_DOMAIN + 5 + KL_SESSION_PRINCIPAL_MAX +                             \
     2 * (5 + KL_SESSION_KX_PUBLIC_LEN) + 5 + KL_SESSION_CLUSTER_MAX + 5 + KL_SESSION_ID_LEN + \
     5 * 9)

typedef struct transcript {
    uint8_t b[TRANSCRIPT_MAX];
    kl_canon c;              /* writes into b */
} transcript;

static void hello_transcript(transcript *t, const kl_session_hello *h)
{
    kl_canon_init_fixed(&t->c, t->b, sizeof t->b);
    kl_canon_bytes(&t->c, 0x00, HELLO_DOMAIN, sizeof HELLO_DOMAIN - 1);
    kl_canon_str(&t->c, 0x01, h->principal_id);
    kl_canon_bytes(&t->c, 0x02, h->client_kx_pk, sizeof h->client_kx_pk);
    kl_canon_u64(&t->c, 0x03, (uint64_t)h->unix_ms);
    kl_canon_str(&t->c, 0x04, h->cluster);
    kl_canon_u64(&t->c, 0x05, (uint64_t)(int64_t)h->partition);
    kl_canon_u64(&t->c, 0x06, h->member);
}

static void answer_transcript(transcript *t, const kl_session_hello *h,
                              const kl_session_hello_answer *a)
{
    kl_canon_init_fixed(&t->c, t->b, sizeof t->b);
    kl_canon_bytes(&t->c, 0x00, ANSWER_DOMAIN, sizeof ANSWER_DOMAIN - 1);
    kl_canon_str(&t->c, 0x01, h->principal_id);
    kl_canon_bytes(&t->c, 0x02, h->client_kx_pk, sizeof h->client_kx_pk);
    kl_canon_bytes(&t->c, 0x03, a->server_kx_pk, sizeof a->server_kx_pk);
    kl_canon_u64(&t->c, 0x04, (uint64_t)h->unix_ms);
    kl_canon_str(&t->c, 0x05, h->cluster);
    kl_canon_u64(&t->c, 0x06, (uint64_t)(int64_t)h->partition);
    kl_canon_u64(&t->c, 0x07, h->member);
    kl_canon_bytes(&t->c, 0x08, a->session_id, sizeof a->session_id);
    kl_canon_u64(&t->c, 0x09, (uint64_t)a->expires_unix_ms);
    if (a->aead != KL_SESSION_AEAD_XCHACHA20POLY1305) /* absent for the default: older answers verify */
        kl_canon_u64(&t->c, 0x0a, a->aead);
}

/* Whether this CPU runs AES-256-GCM (libsodium's needs AES-NI and CLMUL). */
static bool aes_ok(void) { return crypto_aead_aes256gcm_is_available() == 1; }

/* ---- helpers ---- */

static void draw(kl_session_random_fn random, void *ctx, uint8_t *out, size_t n)
{
    if (random != NULL)
        random(ctx, out, n);
    else
        randombytes_buf(out, n);
}

/* A C string of 1..max bytes. */
static kl_code check_str(const char *what, const char *s, size_t max, kl_err *err)
{
    if (s == NULL || s[0] == '\0')
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "session: %s is empty", what);
    if (strnlen(s, max + 1) > max)
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "session: %s is longer than %zu bytes",
                       what, max);
    return KL_OK;
}

/* A fixed char array that must hold a NUL-terminated string of 1..cap-1 bytes. */
static kl_code check_array_str(const char *what, const char *s, size_t cap, kl_err *err)
{
    if (memchr(s, '\0', cap) == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "session: %s is not terminated", what);
    return check_str(what, s, cap - 1, err);
}

static bool all_zero(const uint8_t *p, size_t n)
{
    uint8_t acc = 0;
    for (size_t i = 0; i < n; i++)
        acc |= p[i];
    return acc == 0;
}

/* ---- handshake ---- */

kl_code kl_session_hello_new(const char *principal_id, const uint8_t *principal_secret,
                             const char *cluster, int32_t partition, uint64_t member,
                             int64_t now_ms, kl_session_random_fn random, void *random_ctx,
                             kl_session_client *out, kl_err *err)
{
    if (out == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "out", "session: no client state to fill");
    memset(out, 0, sizeof *out);
    kl_code rc = check_str("principal_id", principal_id, KL_SESSION_PRINCIPAL_MAX, err);
    if (rc == KL_OK)
        rc = check_str("cluster", cluster, KL_SESSION_CLUSTER_MAX, err);
    if (rc != KL_OK)
        return rc;
    if (principal_secret == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "principal_secret",
                       "session: no principal secret key");

    kl_session_hello *h = &out->hello;
    memcpy(h->principal_id, principal_id, strlen(principal_id) + 1);
    memcpy(h->cluster, cluster, strlen(cluster) + 1);
    h->unix_ms = now_ms;
    h->partition = partition;
    h->member = member;
    h->aead_offer = aes_ok() ? KL_SESSION_AEAD_OFFER_AES256GCM : 0;
    if (random != NULL) {
        uint8_t seed[KL_SESSION_KX_SEED_LEN];
        random(random_ctx, seed, sizeof seed);
        int bad = crypto_kx_seed_keypair(h->client_kx_pk, out->kx_sk, seed) != 0;
        sodium_memzero(seed, sizeof seed);
        if (bad)
            goto internal;
    } else if (crypto_kx_keypair(h->client_kx_pk, out->kx_sk) != 0) {
        goto internal;
    }
    transcript t;
    hello_transcript(&t, h);
    if (t.c.oom || crypto_sign_detached(h->signature, NULL, t.c.buf, t.c.len, principal_secret) != 0)
        goto internal;
    out->has_secret = true;
    return KL_OK;
internal:
    sodium_memzero(out, sizeof *out);
    return kl_fail(err, KL_INTERNAL, "hello", "session: could not make the Hello");
}

kl_code kl_session_kx_pair_new(uint8_t pk[32], uint8_t sk[32], kl_session_random_fn random, void *random_ctx,
                               kl_err *err)
{
    uint8_t seed[KL_SESSION_KX_SEED_LEN];
    draw(random, random_ctx, seed, sizeof seed);
    int bad = crypto_kx_seed_keypair(pk, sk, seed);
    sodium_memzero(seed, sizeof seed);
    if (bad != 0) {
        sodium_memzero(sk, 32);
        return kl_fail(err, KL_INTERNAL, "kx", "session: could not make a key pair");
    }
    return KL_OK;
}

kl_code kl_session_accept(const kl_session_hello *hello, const kl_session_accept_params *p,
                          kl_session_hello_answer *answer, kl_session *out, kl_err *err)
{
    if (answer == NULL || out == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "out", "session: no answer or session to fill");
    memset(answer, 0, sizeof *answer);
    memset(out, 0, sizeof *out);
    if (hello == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "hello", "session: no Hello");
    if (p == NULL || p->principal_public == NULL || p->member_secret == NULL || p->cluster == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "params",
                       "session: accept needs the principal's public key, the member's secret "
                       "key and the cluster name");
    if (p->ttl_ms <= 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "ttl_ms", "session: ttl_ms %lld must be > 0",
                       (long long)p->ttl_ms);
    if (p->max_skew_ms < 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "max_skew_ms",
                       "session: max_skew_ms %lld must be >= 0", (long long)p->max_skew_ms);
    int64_t expires;
    if (__builtin_add_overflow(p->now_ms, p->ttl_ms, &expires))
        return kl_fail(err, KL_INVALID_ARGUMENT, "ttl_ms",
                       "session: now_ms + ttl_ms overflows");
    kl_code rc = check_array_str("principal_id", hello->principal_id,
                                 sizeof hello->principal_id, err);
    if (rc == KL_OK)
        rc = check_array_str("cluster", hello->cluster, sizeof hello->cluster, err);
    if (rc != KL_OK)
        return rc;

    /* Target: a Hello is good for one member of one partition of one cluster. */
    if (strcmp(hello->cluster, p->cluster) != 0)
        return kl_fail(err, KL_UNAUTHENTICATED, "wrong_cluster",
                       "Hello: cluster is not this member's cluster");
    if (hello->partition != p->partition)
        return kl_fail(err, KL_UNAUTHENTICATED, "wrong_partition",
                       "Hello: partition %d is not this member's partition %d",
                       (int)hello->partition, (int)p->partition);
    if (hello->member != p->member)
        return kl_fail(err, KL_UNAUTHENTICATED, "wrong_member",
                       "Hello: member %llu is not this member (%llu)",
                       (unsigned long long)hello->member, (unsigned long long)p->member);

    /* Freshness: |now - unix_ms| <= max_skew, computed without signed overflow (the true
     * difference of two int64 always fits in a uint64). Retryable: this member cannot tell
     * whose clock is wrong, and a stepped member clock is corrected without the client
     * doing anything (another member may also answer meanwhile). */
    if (hello->unix_ms < p->now_ms &&
        (uint64_t)p->now_ms - (uint64_t)hello->unix_ms > (uint64_t)p->max_skew_ms)
        return kl_fail(err, KL_UNAVAILABLE, "stale_hello",
                       "Hello: unix_ms is %llu ms behind this member's clock (max skew %lld ms)",
                       (unsigned long long)((uint64_t)p->now_ms - (uint64_t)hello->unix_ms),
                       (long long)p->max_skew_ms);
    if (hello->unix_ms > p->now_ms &&
        (uint64_t)hello->unix_ms - (uint64_t)p->now_ms > (uint64_t)p->max_skew_ms)
        return kl_fail(err, KL_UNAVAILABLE, "future_hello",
                       "Hello: unix_ms is %llu ms ahead of this member's clock (max skew %lld ms)",
                       (unsigned long long)((uint64_t)hello->unix_ms - (uint64_t)p->now_ms),
                       (long long)p->max_skew_ms);

    transcript t;
    hello_transcript(&t, hello);
    if (t.c.oom)
        return kl_fail(err, KL_INTERNAL, "hello", "session: Hello transcript too long");
    if (crypto_sign_verify_detached(hello->signature, t.c.buf, t.c.len, p->principal_public) != 0)
        return kl_fail(err, KL_UNAUTHENTICATED, "bad_signature",
                       "Hello: signature does not verify with the principal's public key");

    /* This end's ephemeral pair (given, or made now), session id and keys. */
    uint8_t sk[KL_SESSION_KX_SECRET_LEN];
    if ((p->server_kx_pk == NULL) != (p->server_kx_sk == NULL))
        return kl_fail(err, KL_INVALID_ARGUMENT, "server_kx", "session: give both halves of the pair or neither");
    if (p->server_kx_pk != NULL) {
        memcpy(answer->server_kx_pk, p->server_kx_pk, sizeof answer->server_kx_pk);
        memcpy(sk, p->server_kx_sk, sizeof sk);
        rc = KL_OK;
    } else {
        rc = kl_session_kx_pair_new(answer->server_kx_pk, sk, p->random, p->random_ctx, err);
    }
    if (rc != KL_OK)
        goto done;
    draw(p->random, p->random_ctx, answer->session_id, sizeof answer->session_id);
    /* A version-4 GUID, as common/guid.c makes them: never all zero. */
    answer->session_id[6] = (uint8_t)((answer->session_id[6] & 0x0f) | 0x40);
    answer->session_id[8] = (uint8_t)((answer->session_id[8] & 0x3f) | 0x80);
    answer->expires_unix_ms = expires;
    answer->aead = (hello->aead_offer & KL_SESSION_AEAD_OFFER_AES256GCM) && !p->xchacha_only && aes_ok()
                       ? KL_SESSION_AEAD_AES256GCM
                       : KL_SESSION_AEAD_XCHACHA20POLY1305;
    if (crypto_kx_server_session_keys(out->rx, out->tx, answer->server_kx_pk, sk,
                                      hello->client_kx_pk) != 0) {
        /* The principal signed a public key that yields no shared secret. */
        rc = kl_fail(err, KL_INVALID_ARGUMENT, "client_kx_pk",
                     "Hello: client_kx_pk is not a usable X25519 public key");
        goto done;
    }
    answer_transcript(&t, hello, answer);
    if (t.c.oom ||
        crypto_sign_detached(answer->member_signature, NULL, t.c.buf, t.c.len, p->member_secret) != 0) {
        rc = kl_fail(err, KL_INTERNAL, "member_signature", "session: could not sign the answer");
        goto done;
    }
    out->role = KL_SESSION_DAEMON;
    memcpy(out->id, answer->session_id, sizeof out->id);
    memcpy(out->principal_id, hello->principal_id, sizeof out->principal_id);
    out->expires_unix_ms = expires;
    out->highest = 0;
    out->window = 0;
    out->aead = answer->aead;
done:
    sodium_memzero(sk, sizeof sk);
    if (rc != KL_OK) {
        sodium_memzero(answer, sizeof *answer);
        sodium_memzero(out, sizeof *out);
    }
    return rc;
}

kl_code kl_session_finish(kl_session_client *c, const kl_session_hello_answer *answer,
                          const uint8_t *member_public, kl_session *out, kl_err *err)
{
    if (out == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "out", "session: no session to fill");
    memset(out, 0, sizeof *out);
    if (c == NULL || !c->has_secret)
        return kl_fail(err, KL_INVALID_ARGUMENT, "client",
                       "session: no Hello waiting for its answer (already finished or wiped)");
    if (answer == NULL || member_public == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, answer == NULL ? "answer" : "member_public",
                       "session: finish needs the HelloAnswer and the member's public key");
    if (all_zero(answer->session_id, sizeof answer->session_id))
        return kl_fail(err, KL_INVALID_ARGUMENT, "session_id",
                       "HelloAnswer: session_id is all zero");
    if (answer->aead != KL_SESSION_AEAD_XCHACHA20POLY1305 &&
        (answer->aead != KL_SESSION_AEAD_AES256GCM || !(c->hello.aead_offer & KL_SESSION_AEAD_OFFER_AES256GCM)))
        return kl_fail(err, KL_INVALID_ARGUMENT, "aead", "HelloAnswer: aead %u is not one the Hello offered",
                       (unsigned)answer->aead);
    transcript t;
    answer_transcript(&t, &c->hello, answer);
    if (t.c.oom)
        return kl_fail(err, KL_INTERNAL, "answer", "session: answer transcript too long");
    if (crypto_sign_verify_detached(answer->member_signature, t.c.buf, t.c.len, member_public) != 0)
        return kl_fail(err, KL_UNAUTHENTICATED, "bad_member_signature",
                       "HelloAnswer: member_signature does not verify with the member's "
                       "public key");
    if (crypto_kx_client_session_keys(out->rx, out->tx, c->hello.client_kx_pk, c->kx_sk,
                                      answer->server_kx_pk) != 0) {
        sodium_memzero(out, sizeof *out);
        return kl_fail(err, KL_UNAUTHENTICATED, "server_kx_pk",
                       "HelloAnswer: server_kx_pk is not a usable X25519 public key");
    }
    out->role = KL_SESSION_CLIENT;
    memcpy(out->id, answer->session_id, sizeof out->id);
    memcpy(out->principal_id, c->hello.principal_id, sizeof out->principal_id);
    out->expires_unix_ms = answer->expires_unix_ms;
    out->next_counter = 1;
    out->aead = answer->aead;
    sodium_memzero(c->kx_sk, sizeof c->kx_sk);
    c->has_secret = false;
    return KL_OK;
}

/* ---- sealing ---- */

/* The 24-byte nonce; AES-256-GCM reads its first 12 (direction, counter, 3 zeros). */
static void make_nonce(uint8_t nonce[24], uint8_t dir, uint64_t counter)
{
    memset(nonce, 0, 24);
    nonce[0] = dir;
    for (int i = 0; i < 8; i++)
        nonce[1 + i] = (uint8_t)(counter >> (8 * (7 - i)));
}

#define AD_FIXED (KL_SESSION_ID_LEN + 1 + 8)

/* full = session_id || dir || counter || ad; returns its length. ad_len checked before. */
static size_t make_ad(uint8_t full[AD_FIXED + KL_SESSION_AD_MAX], const kl_session *s,
                      uint8_t dir, uint64_t counter, const uint8_t *ad, size_t ad_len)
{
    memcpy(full, s->id, KL_SESSION_ID_LEN);
    full[KL_SESSION_ID_LEN] = dir;
    for (int i = 0; i < 8; i++)
        full[KL_SESSION_ID_LEN + 1 + i] = (uint8_t)(counter >> (8 * (7 - i)));
    if (ad_len)
        memcpy(full + AD_FIXED, ad, ad_len);
    return AD_FIXED + ad_len;
}

static const uint8_t empty_byte;

static kl_code check_common(const kl_session *s, kl_session_role role, const char *op,
                            const uint8_t *in, size_t in_len, const uint8_t *ad, size_t ad_len,
                            const uint8_t *out, size_t *out_len, kl_err *err)
{
    if (s == NULL || out_len == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, s == NULL ? "session" : "out_len",
                       "session: %s needs a session and an output length", op);
    *out_len = 0;
    if (s->role != role)
        return kl_fail(err, KL_INVALID_ARGUMENT, "role", "session: %s on a %s session", op,
                       s->role == KL_SESSION_CLIENT   ? "client"
                       : s->role == KL_SESSION_DAEMON ? "daemon"
                                                      : "wiped");
    if (in == NULL && in_len != 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "input", "session: %s: no input bytes", op);
    if (ad_len > KL_SESSION_AD_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "ad_len",
                       "session: %s: associated data of %zu bytes exceeds %d", op, ad_len,
                       KL_SESSION_AD_MAX);
    if (ad == NULL && ad_len != 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "ad", "session: %s: no associated data bytes",
                       op);
    if (out == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "out", "session: %s: no output buffer", op);
    return KL_OK;
}

static kl_code seal(const kl_session *s, const uint8_t key[KL_SESSION_KEY_LEN], uint8_t dir,
                    uint64_t counter, const uint8_t *pt, size_t pt_len, const uint8_t *ad,
                    size_t ad_len, uint8_t *out, size_t out_cap, size_t *out_len, kl_err *err)
{
    if (pt_len > SIZE_MAX - KL_SESSION_SEAL_OVERHEAD ||
        out_cap < pt_len + KL_SESSION_SEAL_OVERHEAD ||
        pt_len > crypto_aead_xchacha20poly1305_ietf_MESSAGEBYTES_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "out_cap",
                       "session: seal of %zu bytes needs %zu bytes of output, has %zu", pt_len,
                       pt_len + KL_SESSION_SEAL_OVERHEAD, out_cap);
    /* About 64 GiB: far above any message limit, but the AEAD's own bound. */
    if (s->aead == KL_SESSION_AEAD_AES256GCM && pt_len > crypto_aead_aes256gcm_MESSAGEBYTES_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "pt_len", "session: seal of %zu bytes exceeds AES-256-GCM's %llu",
                       pt_len, (unsigned long long)crypto_aead_aes256gcm_MESSAGEBYTES_MAX);
    uint8_t nonce[24], full[AD_FIXED + KL_SESSION_AD_MAX];
    make_nonce(nonce, dir, counter);
    size_t full_len = make_ad(full, s, dir, counter, ad, ad_len);
    unsigned long long clen = 0;
    int bad = s->aead == KL_SESSION_AEAD_AES256GCM
                  ? crypto_aead_aes256gcm_encrypt(out, &clen, pt ? pt : &empty_byte, pt_len, full, full_len, NULL,
                                                  nonce, key)
                  : crypto_aead_xchacha20poly1305_ietf_encrypt(out, &clen, pt ? pt : &empty_byte, pt_len, full,
                                                               full_len, NULL, nonce, key);
    if (bad != 0)
        return kl_fail(err, KL_INTERNAL, "seal", "session: seal failed");
    *out_len = (size_t)clen;
    return KL_OK;
}

static kl_code open_sealed(const kl_session *s, const uint8_t key[KL_SESSION_KEY_LEN],
                           uint8_t dir, uint64_t counter, const uint8_t *sealed,
                           size_t sealed_len, const uint8_t *ad, size_t ad_len, uint8_t *out,
                           size_t out_cap, size_t *out_len, kl_err *err)
{
    if (sealed_len < KL_SESSION_SEAL_OVERHEAD)
        return kl_fail(err, KL_UNAUTHENTICATED, "bad_seal",
                       "session: sealed %s of %zu bytes is shorter than its tag",
                       dir == DIR_REQUEST ? "request" : "answer", sealed_len);
    size_t pt_len = sealed_len - KL_SESSION_SEAL_OVERHEAD;
    if (out_cap < pt_len)
        return kl_fail(err, KL_INVALID_ARGUMENT, "out_cap",
                       "session: open of %zu sealed bytes needs %zu bytes of output, has %zu",
                       sealed_len, pt_len, out_cap);
    uint8_t nonce[24], full[AD_FIXED + KL_SESSION_AD_MAX];
    make_nonce(nonce, dir, counter);
    size_t full_len = make_ad(full, s, dir, counter, ad, ad_len);
    unsigned long long mlen = 0;
    uint8_t scratch;
    int bad = s->aead == KL_SESSION_AEAD_AES256GCM
                  ? crypto_aead_aes256gcm_decrypt(pt_len ? out : &scratch, &mlen, NULL, sealed, sealed_len, full,
                                                  full_len, nonce, key)
                  : crypto_aead_xchacha20poly1305_ietf_decrypt(pt_len ? out : &scratch, &mlen, NULL, sealed,
                                                               sealed_len, full, full_len, nonce, key);
    if (bad != 0) {
        if (pt_len)
            sodium_memzero(out, pt_len);
        return kl_fail(err, KL_UNAUTHENTICATED, "bad_seal",
                       "session: sealed %s %llu does not verify",
                       dir == DIR_REQUEST ? "request" : "answer to request",
                       (unsigned long long)counter);
    }
    *out_len = (size_t)mlen;
    return KL_OK;
}

kl_code kl_session_seal_request(kl_session *s, uint64_t counter, const uint8_t *pt,
                                size_t pt_len, const uint8_t *ad, size_t ad_len, uint8_t *out,
                                size_t out_cap, size_t *out_len, kl_err *err)
{
    kl_code rc = check_common(s, KL_SESSION_CLIENT, "seal_request", pt, pt_len, ad, ad_len,
                              out, out_len, err);
    if (rc != KL_OK)
        return rc;
    if (counter == 0 || counter < s->next_counter || counter == UINT64_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "counter",
                       "session: request counter %llu is not >= the next unused counter %llu "
                       "(or the session's counters are exhausted)",
                       (unsigned long long)counter, (unsigned long long)s->next_counter);
    rc = seal(s, s->tx, DIR_REQUEST, counter, pt, pt_len, ad, ad_len, out, out_cap, out_len,
              err);
    if (rc == KL_OK)
        s->next_counter = counter + 1;
    return rc;
}

/* Whether the daemon has opened request counter c (window invariant in session.h). 1: yes,
 * 0: no, -1: older than the window (unknown, treated as seen). */
static int window_seen(const kl_session *s, uint64_t c)
{
    if (c > s->highest)
        return 0;
    uint64_t back = s->highest - c;
    if (back >= KL_SESSION_WINDOW)
        return -1;
    return (s->window >> back) & 1 ? 1 : 0;
}

kl_code kl_session_open_request(kl_session *s, uint64_t counter, const uint8_t *sealed,
                                size_t sealed_len, const uint8_t *ad, size_t ad_len,
                                uint8_t *out, size_t out_cap, size_t *out_len, kl_err *err)
{
    kl_code rc = check_common(s, KL_SESSION_DAEMON, "open_request", sealed, sealed_len, ad,
                              ad_len, out, out_len, err);
    if (rc != KL_OK)
        return rc;
    if (counter == 0)
        return kl_fail(err, KL_UNAUTHENTICATED, "bad_counter",
                       "session: request counter 0 is never sealed");
    int seen = window_seen(s, counter);
    if (seen != 0)
        return kl_fail(err, KL_UNAUTHENTICATED, "replayed_counter",
                       seen > 0 ? "session: request counter %llu was already used"
                                : "session: request counter %llu is older than the replay "
                                  "window (%d below the highest)",
                       (unsigned long long)counter, KL_SESSION_WINDOW);
    rc = open_sealed(s, s->rx, DIR_REQUEST, counter, sealed, sealed_len, ad, ad_len, out,
                     out_cap, out_len, err);
    if (rc != KL_OK)
        return rc;
    if (counter > s->highest) {
        uint64_t shift = counter - s->highest;
        s->window = shift >= KL_SESSION_WINDOW ? 0 : s->window << shift;
        s->window |= 1;
        s->highest = counter;
    } else {
        s->window |= (uint64_t)1 << (s->highest - counter);
    }
    return KL_OK;
}

kl_code kl_session_seal_answer(const kl_session *s, uint64_t request_counter, const uint8_t *pt,
                               size_t pt_len, const uint8_t *ad, size_t ad_len, uint8_t *out,
                               size_t out_cap, size_t *out_len, kl_err *err)
{
    kl_code rc = check_common(s, KL_SESSION_DAEMON, "seal_answer", pt, pt_len, ad, ad_len, out,
                              out_len, err);
    if (rc != KL_OK)
        return rc;
    if (request_counter == 0 || window_seen(s, request_counter) == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "request_counter",
                       "session: request counter %llu was never opened; no answer to seal",
                       (unsigned long long)request_counter);
    return seal(s, s->tx, DIR_ANSWER, request_counter, pt, pt_len, ad, ad_len, out, out_cap,
                out_len, err);
}

kl_code kl_session_open_answer(const kl_session *s, uint64_t request_counter,
                               const uint8_t *sealed, size_t sealed_len, const uint8_t *ad,
                               size_t ad_len, uint8_t *out, size_t out_cap, size_t *out_len,
                               kl_err *err)
{
    kl_code rc = check_common(s, KL_SESSION_CLIENT, "open_answer", sealed, sealed_len, ad,
                              ad_len, out, out_len, err);
    if (rc != KL_OK)
        return rc;
    if (request_counter == 0 || request_counter >= s->next_counter)
        return kl_fail(err, KL_UNAUTHENTICATED, "bad_counter",
                       "session: answer to request counter %llu, which this client never sealed",
                       (unsigned long long)request_counter);
    return open_sealed(s, s->rx, DIR_ANSWER, request_counter, sealed, sealed_len, ad, ad_len,
                       out, out_cap, out_len, err);
}

bool kl_session_expired(const kl_session *s, int64_t now_ms)
{
    return now_ms >= s->expires_unix_ms;
}

void kl_session_wipe(kl_session *s)
{
    if (s != NULL)
        sodium_memzero(s, sizeof *s);
}

void kl_session_client_wipe(kl_session_client *c)
{
    if (c != NULL)
        sodium_memzero(c, sizeof *c);
}

/* ---- wire conversion ---- */

void kl_session_hello_to_pb(const kl_session_hello *h, Keyload__V1__Hello *m)
{
    keyload__v1__hello__init(m);
    m->principal_id = (char *)h->principal_id;
    m->client_kx_pk.data = (uint8_t *)h->client_kx_pk;
    m->client_kx_pk.len = sizeof h->client_kx_pk;
    m->unix_ms = h->unix_ms;
    m->cluster = (char *)h->cluster;
    m->partition = h->partition;
    m->member = h->member;
    m->signature.data = (uint8_t *)h->signature;
    m->signature.len = sizeof h->signature;
    m->aead_offer = h->aead_offer;
}

static kl_code check_len(const char *what, const ProtobufCBinaryData *b, size_t want, kl_err *err)
{
    if (b->len != want || (want && b->data == NULL))
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s holds %zu bytes, expected %zu", what,
                       b->len, want);
    return KL_OK;
}

kl_code kl_session_hello_from_pb(const Keyload__V1__Hello *m, kl_session_hello *out,
                                 kl_err *err)
{
    memset(out, 0, sizeof *out);
    kl_code rc = check_str("principal_id", m->principal_id, KL_SESSION_PRINCIPAL_MAX, err);
    if (rc == KL_OK)
        rc = check_len("client_kx_pk", &m->client_kx_pk, KL_SESSION_KX_PUBLIC_LEN, err);
    if (rc == KL_OK)
        rc = check_str("cluster", m->cluster, KL_SESSION_CLUSTER_MAX, err);
    if (rc == KL_OK)
        rc = check_len("signature", &m->signature, KL_SESSION_SIGNATURE_LEN, err);
    if (rc != KL_OK)
        return rc;
    memcpy(out->principal_id, m->principal_id, strlen(m->principal_id) + 1);
    memcpy(out->client_kx_pk, m->client_kx_pk.data, sizeof out->client_kx_pk);
    out->unix_ms = m->unix_ms;
    memcpy(out->cluster, m->cluster, strlen(m->cluster) + 1);
    out->partition = m->partition;
    out->member = m->member;
    memcpy(out->signature, m->signature.data, sizeof out->signature);
    out->aead_offer = m->aead_offer;
    return KL_OK;
}

void kl_session_answer_to_pb(const kl_session_hello_answer *a, Keyload__V1__HelloAnswer *m)
{
    keyload__v1__hello_answer__init(m);
    m->server_kx_pk.data = (uint8_t *)a->server_kx_pk;
    m->server_kx_pk.len = sizeof a->server_kx_pk;
    m->session_id.data = (uint8_t *)a->session_id;
    m->session_id.len = sizeof a->session_id;
    m->expires_unix_ms = a->expires_unix_ms;
    m->member_signature.data = (uint8_t *)a->member_signature;
    m->member_signature.len = sizeof a->member_signature;
    m->aead = a->aead;
}

kl_code kl_session_answer_from_pb(const Keyload__V1__HelloAnswer *m,
                                  kl_session_hello_answer *out, kl_err *err)
{
    memset(out, 0, sizeof *out);
    kl_code rc = check_len("server_kx_pk", &m->server_kx_pk, KL_SESSION_KX_PUBLIC_LEN, err);
    if (rc == KL_OK)
        rc = check_len("session_id", &m->session_id, KL_SESSION_ID_LEN, err);
    if (rc == KL_OK)
        rc = check_len("member_signature", &m->member_signature, KL_SESSION_SIGNATURE_LEN, err);
    if (rc != KL_OK)
        return rc;
    if (all_zero(m->session_id.data, KL_SESSION_ID_LEN))
        return kl_fail(err, KL_INVALID_ARGUMENT, "session_id", "session_id is all zero");
    memcpy(out->server_kx_pk, m->server_kx_pk.data, sizeof out->server_kx_pk);
    memcpy(out->session_id, m->session_id.data, sizeof out->session_id);
    out->expires_unix_ms = m->expires_unix_ms;
    memcpy(out->member_signature, m->member_signature.data, sizeof out->member_signature);
    out->aead = m->aead;
    return KL_OK;
}
