/* claims: signed transfer tokens (proto/keyload/v1/claims.proto; ARCHITECTURE.md "Engine").
 *
 * A token is an encoded SignedToken: the exact encoded TransferClaims, the signing key's
 * id and an Ed25519 signature by the database signing key over the domain string
 * KL_CLAIMS_DOMAIN followed by those claims bytes. Tokens are made once (by the partition
 * that commits the intent or receipt), stored, and returned byte for byte ever after; a
 * verifier decodes the claims from the very bytes the signature covers, so there is no
 * re-encoding to disagree about.
 *
 * Pure: no I/O, no clock, no store. Errors name the token ("intent_token",
 * "receipt_token") and the check that failed, never a token or message byte. */
#ifndef KL_CLAIMS_H
#define KL_CLAIMS_H

#include "common/limits.h"
#include "common/status.h"
#include "keyload/v1/claims.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KL_CLAIMS_DOMAIN "keyload.transfer-token.v1"
#define KL_CLAIMS_VERSION 1

/* Signs claims with sk (64-byte libsodium Ed25519 secret key) under key_id (8 bytes).
 * *token is malloc'd (caller frees). INTERNAL only on OOM. */
kl_code kl_claims_sign(const Keyload__V1__TransferClaims *claims, const uint8_t sk[64],
                       const uint8_t key_id[8], uint8_t **token, size_t *token_len, kl_err *err);

/* Decodes a token WITHOUT checking its signature (to compare the caller with the intent's
 * principal before spending a verification; the order in ARCHITECTURE.md "Engine"). *out is unpacked
 * (keyload__v1__transfer_claims__free_unpacked); *signed_tok too, when not NULL.
 * INVALID_ARGUMENT detail `what` when it does not decode. */
kl_code kl_claims_decode(const char *what, const uint8_t *token, size_t len,
                         Keyload__V1__SignedToken **signed_tok, Keyload__V1__TransferClaims **out,
                         kl_err *err);

/* Whether sig (64 bytes) is exactly the signature crypto_sign_detached makes with sk (a
 * libsodium Ed25519 secret key, whose last 32 bytes are its public key) over the mn bytes at
 * m, found without signing again (claims.c says how, and why it is exact). Pure; constant
 * time in sk. Cost: two SHA-512 passes over m and a few scalar operations. */
bool kl_claims_is_own_signature(const uint8_t sig[64], const uint8_t *m, size_t mn, const uint8_t sk[64]);

/* Verifies a decoded token's key id and signature against the database key (pk 32 bytes,
 * key_id 8 bytes). PERMISSION_DENIED detail "intent_signature", "receipt_signature" or
 * "witness_signature" (what: "intent_token", "receipt_token", "witness_token") otherwise.
 *
 * sk, when not NULL, is the secret half of pk. Ed25519 signing is deterministic, so a token
 * this database signed carries exactly the signature sk makes over its claims again: the
 * check then recomputes that signature's S from the token's R and compares it in constant
 * time, which costs two SHA-512 passes over the claims and a few scalar operations (about
 * 1.7 us, against 13 for a signing and 34 for a verification on this project's hosts;
 * claims.c says why it accepts exactly what re-signing would). Any other signature (a
 * different but valid one, or a forgery) falls through to the full verification, so the
 * tokens accepted are exactly those crypto_sign_verify_detached accepts, with or without sk.
 * Cost: the recomputation, plus one verification when the signatures differ. */
kl_code kl_claims_verify(const char *what, const Keyload__V1__SignedToken *tok, const uint8_t pk[32],
                         const uint8_t key_id[8], const uint8_t *sk, kl_err *err);

/* Derived database signing keys, kept so that a partition derives each database's key
 * once rather than per token (a derivation is one Ed25519 scalar multiplication). Owned by
 * the node, wiped at close; the keys are the ones kl_keys_database_signing derives, so
 * the cache never changes a result. Bounded: KL_SIGNING_CACHE_SLOTS databases, replaced
 * round robin. */
#define KL_SIGNING_CACHE_SLOTS 8
typedef struct kl_signing_cache {
    struct {
        bool used;
        uint64_t database_id;
        uint8_t sk[64], pk[32], key_id[8];
    } slot[KL_SIGNING_CACHE_SLOTS];
    unsigned next;
} kl_signing_cache;
void kl_signing_cache_wipe(kl_signing_cache *c);

/* A lane ref with its lane made explicit ("default" for empty), as claims carry them. */
void kl_claims_lane(Keyload__V1__QueueLaneRef *out, const Keyload__V1__QueueLaneRef *in);
/* Field-by-field equality of two complete lane refs (empty lane == "default"). */
bool kl_claims_lane_eq(const Keyload__V1__QueueLaneRef *a, const Keyload__V1__QueueLaneRef *b);

#endif
