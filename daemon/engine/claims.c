#include "daemon/engine/claims.h"

#include <sodium.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define DOMAIN_LEN (sizeof KL_CLAIMS_DOMAIN - 1)

/* domain || claims: the exact bytes signed and verified. */
static uint8_t *signed_bytes(const uint8_t *claims, size_t n, size_t *out_len)
{
    uint8_t *m = malloc(DOMAIN_LEN + n);
    if (m == NULL)
        return NULL;
    memcpy(m, KL_CLAIMS_DOMAIN, DOMAIN_LEN);
    if (n)
        memcpy(m + DOMAIN_LEN, claims, n);
    *out_len = DOMAIN_LEN + n;
    return m;
}

kl_code kl_claims_sign(const Keyload__V1__TransferClaims *claims, const uint8_t sk[64],
                       const uint8_t key_id[8], uint8_t **token, size_t *token_len, kl_err *err)
{
    size_t cn = keyload__v1__transfer_claims__get_packed_size(claims);
    uint8_t *cb = malloc(cn ? cn : 1);
    size_t mn = 0;
    uint8_t *m = NULL;
    uint8_t sig[crypto_sign_BYTES];
    if (cb == NULL)
        goto oom;
    keyload__v1__transfer_claims__pack(claims, cb);
    if ((m = signed_bytes(cb, cn, &mn)) == NULL)
        goto oom;
    crypto_sign_detached(sig, NULL, m, mn, sk);
    free(m);
    Keyload__V1__SignedToken t = KEYLOAD__V1__SIGNED_TOKEN__INIT;
    t.claims.data = cb;
    t.claims.len = cn;
    t.key_id.data = (uint8_t *)key_id;
    t.key_id.len = 8;
    t.signature.data = sig;
    t.signature.len = sizeof sig;
    *token_len = keyload__v1__signed_token__get_packed_size(&t);
    if ((*token = malloc(*token_len)) == NULL)
        goto oom;
    keyload__v1__signed_token__pack(&t, *token);
    free(cb);
    return KL_OK;
oom:
    free(cb);
    return kl_fail(err, KL_INTERNAL, "memory", "out of memory signing a transfer token");
}

kl_code kl_claims_decode(const char *what, const uint8_t *token, size_t len,
                         Keyload__V1__SignedToken **signed_tok, Keyload__V1__TransferClaims **out,
                         kl_err *err)
{
    *out = NULL;
    if (signed_tok)
        *signed_tok = NULL;
    if (len == 0 || len > KL_CLAIMS_TOKEN_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s is empty or over %u bytes", what,
                       KL_CLAIMS_TOKEN_MAX);
    Keyload__V1__SignedToken *t = keyload__v1__signed_token__unpack(NULL, len, token);
    if (t == NULL || t->signature.len != crypto_sign_BYTES || t->key_id.len != 8) {
        if (t)
            keyload__v1__signed_token__free_unpacked(t, NULL);
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s is not a signed transfer token", what);
    }
    *out = keyload__v1__transfer_claims__unpack(NULL, t->claims.len, t->claims.data);
    if (*out == NULL) {
        keyload__v1__signed_token__free_unpacked(t, NULL);
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s carries claims that do not decode", what);
    }
    if (signed_tok)
        *signed_tok = t;
    else
        keyload__v1__signed_token__free_unpacked(t, NULL);
    return KL_OK;
}

/* Ed25519 signing is deterministic: the signature sk makes over m is (R, S) with
 * r = SHA-512(prefix || m) mod L, R = r*B and
 * S = r + SHA-512(R || A || m) * a mod L, where a (clamped) and prefix are the two halves of
 * SHA-512(seed). This recomputes S from the token's own R and compares it with the token's
 * S, without the fixed-base scalar multiplication that R = r*B costs a signing (1.7 against
 * 13 us on this project's hosts). It accepts exactly the pair a re-signing would: the
 * token's R enters S through the hash, so another R' passes only if
 * SHA-512(R' || A || m) = SHA-512(R || A || m) mod L (a collision of a 252-bit value), and
 * with the honest R only the honest S passes. sk's last 32 bytes are A (the caller checked
 * that they are the expected public key). Constant time in the secret; the secret-derived
 * buffers are wiped. */
bool kl_claims_is_own_signature(const uint8_t sig[64], const uint8_t *m, size_t mn, const uint8_t sk[64])
{
    uint8_t az[crypto_hash_sha512_BYTES], wide[crypto_hash_sha512_BYTES];
    uint8_t r[crypto_core_ed25519_SCALARBYTES], k[crypto_core_ed25519_SCALARBYTES];
    uint8_t a[crypto_core_ed25519_SCALARBYTES], ka[crypto_core_ed25519_SCALARBYTES];
    uint8_t s[crypto_core_ed25519_SCALARBYTES];
    crypto_hash_sha512_state hs;
    crypto_hash_sha512(az, sk, crypto_sign_SEEDBYTES);
    az[0] &= 248;
    az[31] &= 127;
    az[31] |= 64;
    crypto_hash_sha512_init(&hs);
    crypto_hash_sha512_update(&hs, az + 32, 32);
    crypto_hash_sha512_update(&hs, m, mn);
    crypto_hash_sha512_final(&hs, wide);
    crypto_core_ed25519_scalar_reduce(r, wide);
    crypto_hash_sha512_init(&hs);
    crypto_hash_sha512_update(&hs, sig, 32);
    crypto_hash_sha512_update(&hs, sk + crypto_sign_SEEDBYTES, crypto_sign_PUBLICKEYBYTES);
    crypto_hash_sha512_update(&hs, m, mn);
    crypto_hash_sha512_final(&hs, wide);
    crypto_core_ed25519_scalar_reduce(k, wide);
    memset(wide, 0, sizeof wide);
    memcpy(wide, az, 32);
    crypto_core_ed25519_scalar_reduce(a, wide);
    crypto_core_ed25519_scalar_mul(ka, k, a);
    crypto_core_ed25519_scalar_add(s, r, ka);
    bool same = sodium_memcmp(s, sig + 32, sizeof s) == 0;
    sodium_memzero(az, sizeof az);
    sodium_memzero(wide, sizeof wide);
    sodium_memzero(r, sizeof r);
    sodium_memzero(k, sizeof k);
    sodium_memzero(a, sizeof a);
    sodium_memzero(ka, sizeof ka);
    sodium_memzero(s, sizeof s);
    sodium_memzero(&hs, sizeof hs);
    return same;
}

/* "intent_signature", "receipt_signature" or "witness_signature", after the token named. */
static const char *signature_detail(const char *what)
{
    return what[0] == 'i' ? "intent_signature" : what[0] == 'w' ? "witness_signature" : "receipt_signature";
}

kl_code kl_claims_verify(const char *what, const Keyload__V1__SignedToken *tok, const uint8_t pk[32],
                         const uint8_t key_id[8], const uint8_t *sk, kl_err *err)
{
    if (tok->key_id.len != 8 || memcmp(tok->key_id.data, key_id, 8) != 0)
        return kl_fail(err, KL_PERMISSION_DENIED, signature_detail(what),
                       "%s is not signed by this database's signing key (key id differs)", what);
    size_t mn;
    uint8_t *m = signed_bytes(tok->claims.data, tok->claims.len, &mn);
    if (m == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory verifying a transfer token");
    int bad = 1;
    /* libsodium's secret key ends with its public key: one that does not end with pk is
     * not pk's secret, and checking with it would accept tokens pk never signed. */
    if (sk != NULL && sodium_memcmp(sk + crypto_sign_SEEDBYTES, pk, crypto_sign_PUBLICKEYBYTES) == 0 &&
        tok->signature.len == crypto_sign_BYTES)
        bad = !kl_claims_is_own_signature(tok->signature.data, m, mn, sk);
    if (bad)
        bad = crypto_sign_verify_detached(tok->signature.data, m, mn, pk) != 0;
    free(m);
    if (bad)
        return kl_fail(err, KL_PERMISSION_DENIED, signature_detail(what),
                       "%s's signature does not verify under this database's signing key", what);
    return KL_OK;
}

static const char *lane_or_default(const char *l) { return (l && l[0]) ? l : "default"; }

void kl_claims_lane(Keyload__V1__QueueLaneRef *out, const Keyload__V1__QueueLaneRef *in)
{
    keyload__v1__queue_lane_ref__init(out);
    out->tenant = in->tenant;
    out->database = in->database;
    out->queue = in->queue;
    out->lane = (char *)lane_or_default(in->lane);
}

bool kl_claims_lane_eq(const Keyload__V1__QueueLaneRef *a, const Keyload__V1__QueueLaneRef *b)
{
    if (a == NULL || b == NULL)
        return false;
    return strcmp(a->tenant, b->tenant) == 0 && strcmp(a->database, b->database) == 0 &&
           strcmp(a->queue, b->queue) == 0 && strcmp(lane_or_default(a->lane), lane_or_default(b->lane)) == 0;
}

void kl_signing_cache_wipe(kl_signing_cache *c)
{
    sodium_memzero(c, sizeof *c);
}
