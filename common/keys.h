/* keys: the cluster secret and a member's Ed25519 key pair, read from files (ARCHITECTURE.md
 * "Processes").
 *
 * Files are raw bytes, written by `keyloadd keygen` (daemon/keygen.c):
 *   cluster secret   exactly 32 bytes (random)
 *   member key       exactly 64 bytes: libsodium's Ed25519 secret key (seed || public key)
 * A key file must be a regular file that neither its group nor others may access
 * (mode 0600 or stricter, as ssh asks of private keys); anything else is refused.
 *
 * Keys live in memory only, in a kl_keys allocated here and wiped (sodium_memzero) by
 * kl_keys_free. Errors name the file, its mode or size and the member; never a key byte.
 * Every function needs sodium_init() to have succeeded. */
#ifndef KL_COMMON_KEYS_H
#define KL_COMMON_KEYS_H

#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KL_CLUSTER_SECRET_LEN 32
#define KL_MEMBER_SECRET_LEN 64     /* crypto_sign_SECRETKEYBYTES */
#define KL_MEMBER_PUBLIC_LEN 32     /* crypto_sign_PUBLICKEYBYTES */

typedef struct kl_keys {
    bool has_cluster_secret;
    bool has_member_key;
    uint8_t cluster_secret[KL_CLUSTER_SECRET_LEN];
    uint8_t member_secret[KL_MEMBER_SECRET_LEN];
    uint8_t member_public[KL_MEMBER_PUBLIC_LEN];
} kl_keys;

/* A new, empty key set (*out: kl_keys_free). */
kl_code kl_keys_new(kl_keys **out, kl_err *err);
/* Wipes every key byte and frees. NULL is accepted. */
void kl_keys_free(kl_keys *k);

/* Reads the cluster secret file (32 bytes, mode rule above) into k. */
kl_code kl_keys_load_cluster_secret(kl_keys *k, const char *path, kl_err *err);

/* Reads member `node`'s secret key file (64 bytes, mode rule above) into k and checks it:
 * its public half must be the public key of its seed, and, when expected_public is not
 * NULL, equal expected_public (the member's "public_key" in the cluster file). node (e.g.
 * "p1m2") names the member in errors; NULL when unknown. */
kl_code kl_keys_load_member_key(kl_keys *k, const char *path, const char *node,
                                const uint8_t expected_public[KL_MEMBER_PUBLIC_LEN], kl_err *err);

/* Reads exactly len secret bytes from path into out (mode rule above); `what` names the
 * file's role in errors ("cluster secret file"). On failure out is wiped. */
kl_code kl_keys_read_secret_file(const char *what, const char *path, uint8_t *out, size_t len,
                                 kl_err *err);

/* Creates path with O_CREAT|O_EXCL and mode 0600 (never overwrites), writes len bytes and
 * syncs it. A file that exists is refused (FAILED_PRECONDITION); a partly written file is
 * removed. */
kl_code kl_keys_write_secret_file(const char *what, const char *path, const uint8_t *data,
                                  size_t len, kl_err *err);

/* A database's signing key pair (ARCHITECTURE.md "Processes"), derived the same on every member:
 * seed = crypto_kdf_derive_from_key(32 bytes, subkey id database_id, context "KLdbsign",
 * cluster_secret), then crypto_sign_seed_keypair(seed). key_id is the first 8 bytes of
 * BLAKE2b-256(pk) (crypto_generichash, no key), what the catalog records next to pk. The
 * seed is wiped; sk is the caller's to wipe (sodium_memzero).
 * Deterministic per (cluster_secret, database_id). INTERNAL only if libsodium refuses. */
#define KL_KEY_ID_LEN 8
#define KL_DATABASE_KEY_ID_LEN KL_KEY_ID_LEN
kl_code kl_keys_database_signing(const uint8_t cluster_secret[KL_CLUSTER_SECRET_LEN],
                                 uint64_t database_id, uint8_t pk[KL_MEMBER_PUBLIC_LEN],
                                 uint8_t sk[KL_MEMBER_SECRET_LEN],
                                 uint8_t key_id[KL_DATABASE_KEY_ID_LEN], kl_err *err);

/* The id of an Ed25519 public key (database or principal): the first 8 bytes of
 * BLAKE2b-256(pk). -1 only if libsodium refuses. */
int kl_keys_key_id(const uint8_t pk[KL_MEMBER_PUBLIC_LEN], uint8_t key_id[KL_KEY_ID_LEN]);

#endif
