/* keyfile: principal key files and the bootstrap proof (client/keyload.h "principal keys"),
 * so that a program on the SDK can register a principal and act as it without reaching into
 * common/. One format for every principal key file: libsodium's 64-byte Ed25519 secret key
 * (seed || public key), mode 0600, created with O_EXCL (common/keys.h), the file
 * kl_client_open_principal reads. Secret bytes live only on this stack and are wiped. */
#include "client/keyload.h"
#include "common/canon.h"
#include "common/keys.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

#define KEY_WHAT "principal key file"

static kl_code sodium_ready(kl_err *err)
{
    if (sodium_init() < 0)
        return kl_fail(err, KL_INTERNAL, "sodium_init", "libsodium failed to initialize");
    return KL_OK;
}

kl_code kl_key_file_new(const char *path, uint8_t public_key[32], kl_err *err)
{
    if (path == NULL || path[0] == '\0')
        return kl_fail(err, KL_INVALID_ARGUMENT, "key_path", "a key file path is required");
    kl_code rc = sodium_ready(err);
    if (rc != KL_OK)
        return rc;
    uint8_t sk[KL_MEMBER_SECRET_LEN], pk[KL_MEMBER_PUBLIC_LEN];
    crypto_sign_keypair(pk, sk);
    rc = kl_keys_write_secret_file(KEY_WHAT, path, sk, sizeof sk, err);
    sodium_memzero(sk, sizeof sk);
    if (rc == KL_OK)
        memcpy(public_key, pk, sizeof pk);
    return rc;
}

kl_code kl_key_file_public(const char *path, uint8_t public_key[32], kl_err *err)
{
    if (path == NULL || path[0] == '\0')
        return kl_fail(err, KL_INVALID_ARGUMENT, "key_path", "a key file path is required");
    kl_code rc = sodium_ready(err);
    if (rc != KL_OK)
        return rc;
    uint8_t sk[KL_MEMBER_SECRET_LEN];
    rc = kl_keys_read_secret_file(KEY_WHAT, path, sk, sizeof sk, err);
    if (rc == KL_OK && crypto_sign_ed25519_sk_to_pk(public_key, sk) != 0)
        rc = kl_fail(err, KL_INVALID_ARGUMENT, "key_path", "%s does not hold an Ed25519 secret key",
                     path);
    sodium_memzero(sk, sizeof sk);
    return rc;
}

kl_code kl_bootstrap_proof(const char *cluster_secret_path, const char *database,
                           const char *admin_id, const uint8_t admin_public_key[32],
                           uint8_t proof[32], kl_err *err)
{
    const char *slash = database != NULL ? strchr(database, '/') : NULL;
    if (slash == NULL || slash == database || slash[1] == '\0' ||
        (size_t)(slash - database) > KL_SDK_NAME_MAX || strlen(slash + 1) > KL_SDK_NAME_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "database", "database must be TENANT/DB");
    if (admin_id == NULL || admin_id[0] == '\0')
        return kl_fail(err, KL_INVALID_ARGUMENT, "admin_id", "admin_id is required");
    if (cluster_secret_path == NULL || cluster_secret_path[0] == '\0')
        return kl_fail(err, KL_INVALID_ARGUMENT, "cluster_secret", "a cluster secret file is required");
    kl_code rc = sodium_ready(err);
    if (rc != KL_OK)
        return rc;
    char tenant[KL_SDK_NAME_MAX + 1];
    snprintf(tenant, sizeof tenant, "%.*s", (int)(slash - database), database);
    uint8_t secret[KL_CLUSTER_SECRET_LEN];
    rc = kl_keys_read_secret_file("cluster secret file", cluster_secret_path, secret, sizeof secret,
                                  err);
    if (rc != KL_OK)
        return rc;
    int made = kl_canon_bootstrap_proof(secret, tenant, slash + 1, admin_id, admin_public_key, 32,
                                        proof);
    sodium_memzero(secret, sizeof secret);
    return made != 0 ? kl_fail(err, KL_INTERNAL, "memory", "out of memory") : KL_OK;
}
