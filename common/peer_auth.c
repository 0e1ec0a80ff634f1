#include "common/peer_auth.h"

#include "common/canon.h"

#include <sodium.h>
#include <string.h>

_Static_assert(KL_PEER_AUTH_KX_LEN == crypto_kx_PUBLICKEYBYTES, "kx public key");
_Static_assert(KL_PEER_AUTH_KX_LEN == crypto_kx_SECRETKEYBYTES, "kx secret key");
_Static_assert(KL_PEER_AUTH_KEY_LEN == crypto_kx_SESSIONKEYBYTES, "session key");
_Static_assert(KL_PEER_AUTH_KEY_LEN == crypto_aead_xchacha20poly1305_ietf_KEYBYTES, "aead key");
_Static_assert(KL_PEER_AUTH_SIG_LEN == crypto_sign_BYTES, "signature");
_Static_assert(KL_PEER_AUTH_PUBLIC_LEN == crypto_sign_PUBLICKEYBYTES, "sign public key");
_Static_assert(KL_PEER_AUTH_SECRET_LEN == crypto_sign_SECRETKEYBYTES, "sign secret key");
_Static_assert(KL_PEER_AUTH_TAG_LEN == crypto_aead_xchacha20poly1305_ietf_ABYTES, "tag");
_Static_assert(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES == 24, "nonce");

#define PA_MAGIC 0x4b4c5052u /* "KLPR", as the unauthenticated hello of peer.c */

static const char HELLO_DOMAIN[] = "keyload.peer-hello.v1";
static const char ANSWER_DOMAIN[] = "keyload.peer-answer.v1";

/* ---- transcripts (common/canon.h's encoding, into a fixed buffer) ---- */

/* The answer transcript is the longer one: domain, cluster, two kx keys and a signature
 * (tag + 4-byte length each) and six integers (tag + 8 bytes). */
#define TRANSCRIPT_MAX                                                                   \
    (5 + sizeof ANSWER_DOMAIN + 5 + KL_PEER_AUTH_CLUSTER_MAX + 2 * (5 + KL_PEER_AUTH_KX_LEN) + \
     5 + KL_PEER_AUTH_SIG_LEN + 6 * 9)

typedef struct transcript {
    uint8_t b[TRANSCRIPT_MAX];
    kl_canon c;              /* writes into b */
} transcript;

static void hello_transcript(transcript *t, const kl_peer_auth_msg *h)
{
    kl_canon_init_fixed(&t->c, t->b, sizeof t->b);
    kl_canon_bytes(&t->c, 0x00, HELLO_DOMAIN, sizeof HELLO_DOMAIN - 1);
    kl_canon_bytes(&t->c, 0x01, h->cluster, h->cluster_len);
    kl_canon_u64(&t->c, 0x02, (uint64_t)(int64_t)h->partition);
    kl_canon_u64(&t->c, 0x03, h->from);
    kl_canon_u64(&t->c, 0x04, h->to);
    kl_canon_u64(&t->c, 0x05, (uint64_t)h->unix_ms);
    kl_canon_bytes(&t->c, 0x06, h->kx_pk, sizeof h->kx_pk);
}

static void answer_transcript(transcript *t, const kl_peer_auth_msg *h,
                              const kl_peer_auth_msg *a)
{
    kl_canon_init_fixed(&t->c, t->b, sizeof t->b);
    kl_canon_bytes(&t->c, 0x00, ANSWER_DOMAIN, sizeof ANSWER_DOMAIN - 1);
    kl_canon_bytes(&t->c, 0x01, h->cluster, h->cluster_len);
    kl_canon_u64(&t->c, 0x02, (uint64_t)(int64_t)h->partition);
    kl_canon_u64(&t->c, 0x03, h->from);
    kl_canon_u64(&t->c, 0x04, h->to);
    kl_canon_u64(&t->c, 0x05, (uint64_t)h->unix_ms);
    kl_canon_bytes(&t->c, 0x06, h->kx_pk, sizeof h->kx_pk);
    kl_canon_bytes(&t->c, 0x07, h->sig, sizeof h->sig);
    kl_canon_u64(&t->c, 0x08, (uint64_t)a->unix_ms);
    kl_canon_bytes(&t->c, 0x09, a->kx_pk, sizeof a->kx_pk);
}

/* ---- wire ---- */

static void put_be(uint8_t *b, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--, v >>= 8)
        b[i] = (uint8_t)v;
}

static uint64_t get_be(const uint8_t *b, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v = v << 8 | b[i];
    return v;
}

size_t kl_peer_auth_encode(const kl_peer_auth_msg *m, uint8_t *out, size_t cap)
{
    if (m == NULL || out == NULL || m->cluster_len == 0 ||
        m->cluster_len > KL_PEER_AUTH_CLUSTER_MAX ||
        (m->kind != KL_PEER_AUTH_KIND_HELLO && m->kind != KL_PEER_AUTH_KIND_ANSWER))
        return 0;
    size_t n = KL_PEER_AUTH_FIXED + m->cluster_len;
    if (cap < n)
        return 0;
    uint8_t *b = out;
    put_be(b, PA_MAGIC, 4);
    b[4] = KL_PEER_AUTH_VERSION;
    b[5] = m->kind;
    put_be(b + 6, m->from, 8);
    put_be(b + 14, m->to, 8);
    put_be(b + 22, (uint32_t)m->partition, 4);
    put_be(b + 26, (uint64_t)m->unix_ms, 8);
    memcpy(b + 34, m->kx_pk, KL_PEER_AUTH_KX_LEN);
    b[66] = (uint8_t)m->cluster_len;
    memcpy(b + 67, m->cluster, m->cluster_len);
    memcpy(b + 67 + m->cluster_len, m->sig, KL_PEER_AUTH_SIG_LEN);
    return n;
}

kl_code kl_peer_auth_decode(const uint8_t *b, size_t len, kl_peer_auth_msg *out, kl_err *err)
{
    if (out == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "out", "peer auth: nothing to decode into");
    memset(out, 0, sizeof *out);
    if (b == NULL || len < 5 || get_be(b, 4) != PA_MAGIC)
        return kl_fail(err, KL_INVALID_ARGUMENT, "malformed", "peer hello: bad magic or length");
    if (b[4] != KL_PEER_AUTH_VERSION)
        return kl_fail(err, KL_INVALID_ARGUMENT, "version",
                       "peer hello: version %u, want %d (authenticated)", b[4],
                       KL_PEER_AUTH_VERSION);
    if (len < KL_PEER_AUTH_FIXED || b[66] == 0 || len != KL_PEER_AUTH_FIXED + (size_t)b[66])
        return kl_fail(err, KL_INVALID_ARGUMENT, "malformed",
                       "peer hello: %zu bytes do not match its cluster length", len);
    if (b[5] != KL_PEER_AUTH_KIND_HELLO && b[5] != KL_PEER_AUTH_KIND_ANSWER)
        return kl_fail(err, KL_INVALID_ARGUMENT, "malformed", "peer hello: unknown kind %u",
                       b[5]);
    out->kind = b[5];
    out->from = get_be(b + 6, 8);
    out->to = get_be(b + 14, 8);
    out->partition = (int32_t)(uint32_t)get_be(b + 22, 4);
    out->unix_ms = (int64_t)get_be(b + 26, 8);
    memcpy(out->kx_pk, b + 34, KL_PEER_AUTH_KX_LEN);
    out->cluster_len = b[66];
    memcpy(out->cluster, b + 67, out->cluster_len);
    memcpy(out->sig, b + 67 + out->cluster_len, KL_PEER_AUTH_SIG_LEN);
    return KL_OK;
}

/* ---- handshake ---- */

static kl_code check_self(const kl_peer_auth_self *me, size_t *clen, kl_err *err)
{
    if (me == NULL || me->secret == NULL || me->cluster == NULL || me->id == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "self",
                       "peer auth: needs this member's id, cluster and secret key");
    *clen = strnlen(me->cluster, KL_PEER_AUTH_CLUSTER_MAX + 1);
    if (*clen == 0 || *clen > KL_PEER_AUTH_CLUSTER_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "cluster",
                       "peer auth: cluster name must be 1..%d bytes", KL_PEER_AUTH_CLUSTER_MAX);
    return KL_OK;
}

/* The target and freshness checks both ends make of the other's message. */
static kl_code check_target(const kl_peer_auth_self *me, size_t clen, const kl_peer_auth_msg *m,
                            uint8_t kind, int64_t now_ms, int64_t max_skew_ms, kl_err *err)
{
    const char *what = kind == KL_PEER_AUTH_KIND_HELLO ? "peer hello" : "peer answer";
    if (m->kind != kind)
        return kl_fail(err, KL_UNAUTHENTICATED, "wrong_kind", "%s: kind %u, want %u", what,
                       m->kind, kind);
    if (m->cluster_len != clen || memcmp(m->cluster, me->cluster, clen) != 0)
        return kl_fail(err, KL_UNAUTHENTICATED, "wrong_cluster",
                       "%s: cluster is not this member's cluster", what);
    if (m->partition != me->partition)
        return kl_fail(err, KL_UNAUTHENTICATED, "wrong_partition",
                       "%s: partition %d is not this member's partition %d", what,
                       (int)m->partition, (int)me->partition);
    if (m->to != me->id)
        return kl_fail(err, KL_UNAUTHENTICATED, "wrong_member",
                       "%s: addressed to member %llu, this is member %llu", what,
                       (unsigned long long)m->to, (unsigned long long)me->id);
    /* |now - unix_ms| <= max_skew without signed overflow (the true difference of two
     * int64 always fits a uint64). */
    if (m->unix_ms < now_ms && (uint64_t)now_ms - (uint64_t)m->unix_ms > (uint64_t)max_skew_ms)
        return kl_fail(err, KL_UNAUTHENTICATED, "stale_hello",
                       "%s: unix_ms is %llu ms behind this member's clock (max skew %lld ms)",
                       what, (unsigned long long)((uint64_t)now_ms - (uint64_t)m->unix_ms),
                       (long long)max_skew_ms);
    if (m->unix_ms > now_ms && (uint64_t)m->unix_ms - (uint64_t)now_ms > (uint64_t)max_skew_ms)
        return kl_fail(err, KL_UNAUTHENTICATED, "future_hello",
                       "%s: unix_ms is %llu ms ahead of this member's clock (max skew %lld ms)",
                       what, (unsigned long long)((uint64_t)m->unix_ms - (uint64_t)now_ms),
                       (long long)max_skew_ms);
    return KL_OK;
}

kl_code kl_peer_auth_hello(const kl_peer_auth_self *me, uint64_t to, int64_t now_ms,
                           kl_peer_auth_dial *out, kl_err *err)
{
    if (out == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "out", "peer auth: no dial state to fill");
    memset(out, 0, sizeof *out);
    size_t clen;
    kl_code rc = check_self(me, &clen, err);
    if (rc != KL_OK)
        return rc;
    if (to == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "to", "peer auth: member id 0 is reserved");
    kl_peer_auth_msg *h = &out->hello;
    h->kind = KL_PEER_AUTH_KIND_HELLO;
    h->from = me->id;
    h->to = to;
    h->partition = me->partition;
    h->unix_ms = now_ms;
    h->cluster_len = clen;
    memcpy(h->cluster, me->cluster, clen);
    if (crypto_kx_keypair(h->kx_pk, out->kx_sk) != 0)
        goto internal;
    transcript t;
    hello_transcript(&t, h);
    if (t.c.oom || crypto_sign_detached(h->sig, NULL, t.c.buf, t.c.len, me->secret) != 0)
        goto internal;
    out->has_secret = true;
    return KL_OK;
internal:
    sodium_memzero(out, sizeof *out);
    return kl_fail(err, KL_INTERNAL, "hello", "peer auth: could not make the hello");
}

kl_code kl_peer_auth_accept(const kl_peer_auth_self *me, const kl_peer_auth_msg *hello,
                            const uint8_t *from_public, int64_t now_ms, int64_t max_skew_ms,
                            kl_peer_auth_msg *answer, kl_peer_auth_keys *keys, kl_err *err)
{
    if (answer == NULL || keys == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "out", "peer auth: no answer or keys to fill");
    memset(answer, 0, sizeof *answer);
    memset(keys, 0, sizeof *keys);
    size_t clen;
    kl_code rc = check_self(me, &clen, err);
    if (rc != KL_OK)
        return rc;
    if (hello == NULL || from_public == NULL || max_skew_ms < 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "params",
                       "peer auth: accept needs the hello, the sender's public key and a "
                       "max_skew_ms >= 0");
    if ((rc = check_target(me, clen, hello, KL_PEER_AUTH_KIND_HELLO, now_ms, max_skew_ms,
                           err)) != KL_OK)
        return rc;
    transcript t;
    hello_transcript(&t, hello);
    if (t.c.oom)
        return kl_fail(err, KL_INTERNAL, "hello", "peer auth: hello transcript too long");
    if (crypto_sign_verify_detached(hello->sig, t.c.buf, t.c.len, from_public) != 0)
        return kl_fail(err, KL_UNAUTHENTICATED, "bad_signature",
                       "peer hello: signature does not verify with member %llu's public key",
                       (unsigned long long)hello->from);

    uint8_t sk[KL_PEER_AUTH_KX_LEN];
    answer->kind = KL_PEER_AUTH_KIND_ANSWER;
    answer->from = me->id;
    answer->to = hello->from;
    answer->partition = me->partition;
    answer->unix_ms = now_ms;
    answer->cluster_len = clen;
    memcpy(answer->cluster, me->cluster, clen);
    rc = KL_OK;
    if (crypto_kx_keypair(answer->kx_pk, sk) != 0) {
        rc = kl_fail(err, KL_INTERNAL, "kx", "peer auth: could not make a key pair");
        goto done;
    }
    if (crypto_kx_server_session_keys(keys->rx, keys->tx, answer->kx_pk, sk, hello->kx_pk) != 0) {
        /* The member signed a public key that yields no shared secret. */
        rc = kl_fail(err, KL_UNAUTHENTICATED, "bad_kx",
                     "peer hello: its kx key is not a usable X25519 public key");
        goto done;
    }
    answer_transcript(&t, hello, answer);
    if (t.c.oom || crypto_sign_detached(answer->sig, NULL, t.c.buf, t.c.len, me->secret) != 0)
        rc = kl_fail(err, KL_INTERNAL, "answer", "peer auth: could not sign the answer");
done:
    sodium_memzero(sk, sizeof sk);
    if (rc != KL_OK) {
        sodium_memzero(answer, sizeof *answer);
        sodium_memzero(keys, sizeof *keys);
    }
    return rc;
}

kl_code kl_peer_auth_finish(kl_peer_auth_dial *d, const kl_peer_auth_msg *answer,
                            const uint8_t *to_public, int64_t now_ms, int64_t max_skew_ms,
                            kl_peer_auth_keys *keys, kl_err *err)
{
    if (keys == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "out", "peer auth: no keys to fill");
    memset(keys, 0, sizeof *keys);
    if (d == NULL || !d->has_secret)
        return kl_fail(err, KL_INVALID_ARGUMENT, "dial",
                       "peer auth: no hello waiting for its answer (finished or wiped)");
    if (answer == NULL || to_public == NULL || max_skew_ms < 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "params",
                       "peer auth: finish needs the answer, the member's public key and a "
                       "max_skew_ms >= 0");
    /* The answer must come from the member dialed, to us, for our cluster and partition. */
    char cluster[KL_PEER_AUTH_CLUSTER_MAX + 1];
    memcpy(cluster, d->hello.cluster, d->hello.cluster_len);
    cluster[d->hello.cluster_len] = '\0';
    kl_peer_auth_self me = {.cluster = cluster, .partition = d->hello.partition,
                            .id = d->hello.from};
    kl_code rc = check_target(&me, d->hello.cluster_len, answer, KL_PEER_AUTH_KIND_ANSWER,
                              now_ms, max_skew_ms, err);
    if (rc != KL_OK)
        return rc;
    if (answer->from != d->hello.to)
        return kl_fail(err, KL_UNAUTHENTICATED, "wrong_member",
                       "peer answer: from member %llu, dialed member %llu",
                       (unsigned long long)answer->from, (unsigned long long)d->hello.to);
    transcript t;
    answer_transcript(&t, &d->hello, answer);
    if (t.c.oom)
        return kl_fail(err, KL_INTERNAL, "answer", "peer auth: answer transcript too long");
    if (crypto_sign_verify_detached(answer->sig, t.c.buf, t.c.len, to_public) != 0)
        return kl_fail(err, KL_UNAUTHENTICATED, "bad_signature",
                       "peer answer: signature does not verify with member %llu's public key",
                       (unsigned long long)d->hello.to);
    if (crypto_kx_client_session_keys(keys->rx, keys->tx, d->hello.kx_pk, d->kx_sk,
                                      answer->kx_pk) != 0) {
        sodium_memzero(keys, sizeof *keys);
        return kl_fail(err, KL_UNAUTHENTICATED, "bad_kx",
                       "peer answer: its kx key is not a usable X25519 public key");
    }
    sodium_memzero(d->kx_sk, sizeof d->kx_sk);
    d->has_secret = false;
    return KL_OK;
}

/* ---- sealing ---- */

static void make_nonce(uint8_t nonce[24], uint64_t counter)
{
    memset(nonce, 0, 24);
    put_be(nonce, counter, 8);
}

size_t kl_peer_auth_seal(const uint8_t key[KL_PEER_AUTH_KEY_LEN], uint64_t counter,
                         uint8_t *frame, size_t hdr_len, size_t pt_len)
{
    uint8_t nonce[24];
    make_nonce(nonce, counter);
    uint8_t *ctr = frame + hdr_len;
    uint8_t *body = ctr + KL_PEER_AUTH_COUNTER_LEN;
    put_be(ctr, counter, 8);
    /* Never fails for lengths below crypto_aead_xchacha20poly1305_ietf_MESSAGEBYTES_MAX
     * (about 2^64 bytes). */
    (void)crypto_aead_xchacha20poly1305_ietf_encrypt_detached(
        body, body + pt_len, NULL, body, pt_len, frame, hdr_len, NULL, nonce, key);
    return hdr_len + KL_PEER_AUTH_OVERHEAD + pt_len;
}

kl_code kl_peer_auth_open(const uint8_t key[KL_PEER_AUTH_KEY_LEN], uint64_t expected,
                          uint8_t *frame, size_t len, size_t hdr_len, size_t *pt_len,
                          kl_err *err)
{
    *pt_len = 0;
    if (frame == NULL || len < hdr_len || len - hdr_len < KL_PEER_AUTH_OVERHEAD)
        return kl_fail(err, KL_UNAUTHENTICATED, "bad_seal",
                       "peer frame: %zu bytes cannot hold a counter and a tag", len);
    uint64_t counter = get_be(frame + hdr_len, 8);
    if (counter != expected)
        return kl_fail(err, KL_UNAUTHENTICATED, "bad_counter",
                       "peer frame: counter %llu, expected %llu (replayed, reordered or lost)",
                       (unsigned long long)counter, (unsigned long long)expected);
    size_t n = len - hdr_len - KL_PEER_AUTH_OVERHEAD;
    uint8_t nonce[24];
    make_nonce(nonce, counter);
    uint8_t *body = frame + hdr_len + KL_PEER_AUTH_COUNTER_LEN;
    /* libsodium verifies the tag before it decrypts (and clears the output on failure). */
    if (crypto_aead_xchacha20poly1305_ietf_decrypt_detached(body, NULL, body, n, body + n, frame,
                                                            hdr_len, nonce, key) != 0)
        return kl_fail(err, KL_UNAUTHENTICATED, "bad_seal",
                       "peer frame: seal does not verify (frame %llu)",
                       (unsigned long long)counter);
    *pt_len = n;
    return KL_OK;
}

void kl_peer_auth_dial_wipe(kl_peer_auth_dial *d)
{
    if (d != NULL)
        sodium_memzero(d, sizeof *d);
}

void kl_peer_auth_keys_wipe(kl_peer_auth_keys *k)
{
    if (k != NULL)
        sodium_memzero(k, sizeof *k);
}
