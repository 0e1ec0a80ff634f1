#include "common/keys.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

kl_code kl_keys_new(kl_keys **out, kl_err *err)
{
    kl_keys *k = calloc(1, sizeof *k);
    if (k == NULL)
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory", "keys: out of memory");
    *out = k;
    return KL_OK;
}

void kl_keys_free(kl_keys *k)
{
    if (k == NULL)
        return;
    sodium_memzero(k, sizeof *k);
    free(k);
}

kl_code kl_keys_read_secret_file(const char *what, const char *path, uint8_t *out, size_t len,
                                 kl_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "key_file", "%s %s: cannot open: %s", what, path,
                       strerror(errno));
    kl_code rc = KL_OK;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = kl_fail(err, KL_INVALID_ARGUMENT, "key_file", "%s %s: cannot stat: %s", what, path,
                     strerror(errno));
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = kl_fail(err, KL_INVALID_ARGUMENT, "key_file", "%s %s: not a regular file", what, path);
        goto done;
    }
    if ((st.st_mode & 077) != 0) {
        rc = kl_fail(err, KL_FAILED_PRECONDITION, "key_file_mode",
                     "%s %s: mode %04o lets group or others access it; it must be 0600 "
                     "(chmod 600 %s)", what, path, (unsigned)(st.st_mode & 07777), path);
        goto done;
    }
    if (st.st_size < 0 || (uint64_t)st.st_size != len) {
        rc = kl_fail(err, KL_INVALID_ARGUMENT, "key_file_size", "%s %s: holds %lld bytes, expected %zu",
                     what, path, (long long)st.st_size, len);
        goto done;
    }
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, out + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = kl_fail(err, KL_INVALID_ARGUMENT, "key_file", "%s %s: read failed: %s", what, path,
                         strerror(errno));
            goto done;
        }
        if (n == 0) {
            rc = kl_fail(err, KL_INVALID_ARGUMENT, "key_file_size",
                         "%s %s: holds %zu bytes, expected %zu", what, path, got, len);
            goto done;
        }
        got += (size_t)n;
    }
    uint8_t extra;
    ssize_t more = read(fd, &extra, 1);
    if (more != 0) {
        rc = kl_fail(err, KL_INVALID_ARGUMENT, "key_file_size",
                     "%s %s: holds more than the expected %zu bytes", what, path, len);
        sodium_memzero(&extra, sizeof extra);
    }
done:
    close(fd);
    if (rc != KL_OK)
        sodium_memzero(out, len);
    return rc;
}

kl_code kl_keys_write_secret_file(const char *what, const char *path, const uint8_t *data,
                                  size_t len, kl_err *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0600);
    if (fd < 0) {
        if (errno == EEXIST)
            return kl_fail(err, KL_FAILED_PRECONDITION, "key_file_exists",
                           "%s %s already exists; refusing to overwrite it", what, path);
        return kl_fail(err, KL_INVALID_ARGUMENT, "key_file", "%s %s: cannot create: %s", what,
                       path, strerror(errno));
    }
    kl_code rc = KL_OK;
    /* The umask may only have removed bits; make sure of exactly 0600. */
    if (fchmod(fd, 0600) != 0) {
        rc = kl_fail(err, KL_INTERNAL, "key_file", "%s %s: chmod 600 failed: %s", what, path,
                     strerror(errno));
        goto fail;
    }
    size_t put = 0;
    while (put < len) {
        ssize_t n = write(fd, data + put, len - put);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = kl_fail(err, KL_INTERNAL, "key_file", "%s %s: write failed: %s", what, path,
                         n < 0 ? strerror(errno) : "no progress");
            goto fail;
        }
        put += (size_t)n;
    }
    if (fsync(fd) != 0) {
        rc = kl_fail(err, KL_INTERNAL, "key_file", "%s %s: fsync failed: %s", what, path,
                     strerror(errno));
        goto fail;
    }
    if (close(fd) != 0) {
        fd = -1;
        rc = kl_fail(err, KL_INTERNAL, "key_file", "%s %s: close failed: %s", what, path,
                     strerror(errno));
        goto fail;
    }
    return KL_OK;
fail:
    if (fd >= 0)
        close(fd);
    unlink(path);
    return rc;
}

kl_code kl_keys_load_cluster_secret(kl_keys *k, const char *path, kl_err *err)
{
    kl_code rc = kl_keys_read_secret_file("cluster secret file", path, k->cluster_secret,
                                          sizeof k->cluster_secret, err);
    k->has_cluster_secret = rc == KL_OK;
    return rc;
}

kl_code kl_keys_load_member_key(kl_keys *k, const char *path, const char *node,
                                const uint8_t expected_public[KL_MEMBER_PUBLIC_LEN], kl_err *err)
{
    k->has_member_key = false;
    char what[96];
    if (node != NULL)
        snprintf(what, sizeof what, "member key file of %s", node);
    else
        snprintf(what, sizeof what, "member key file");
    if (node == NULL)
        node = "its member";
    kl_code rc = kl_keys_read_secret_file(what, path, k->member_secret, sizeof k->member_secret, err);
    if (rc != KL_OK)
        return rc;
    /* The secret key is seed || public key: rebuild the pair from the seed, so that a file
     * whose halves do not belong together is caught here, not in a failed handshake. */
    uint8_t seed[crypto_sign_SEEDBYTES], pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
    crypto_sign_ed25519_sk_to_seed(seed, k->member_secret);
    int bad = crypto_sign_seed_keypair(pk, sk, seed) != 0 ||
              sodium_memcmp(sk, k->member_secret, sizeof sk) != 0;
    sodium_memzero(seed, sizeof seed);
    sodium_memzero(sk, sizeof sk);
    if (bad) {
        rc = kl_fail(err, KL_INVALID_ARGUMENT, "member_key",
                     "member key file %s of %s: not an Ed25519 secret key (its public half does "
                     "not belong to its seed)", path, node);
        goto fail;
    }
    if (expected_public != NULL && sodium_memcmp(pk, expected_public, sizeof pk) != 0) {
        rc = kl_fail(err, KL_PERMISSION_DENIED, "member_key_mismatch",
                     "member key file %s does not belong to %s: its public key differs from "
                     "%s's public_key in the cluster file", path, node, node);
        goto fail;
    }
    memcpy(k->member_public, pk, sizeof pk);
    k->has_member_key = true;
    return KL_OK;
fail:
    sodium_memzero(k->member_secret, sizeof k->member_secret);
    return rc;
}

kl_code kl_keys_database_signing(const uint8_t cluster_secret[KL_CLUSTER_SECRET_LEN],
                                 uint64_t database_id, uint8_t pk[KL_MEMBER_PUBLIC_LEN],
                                 uint8_t sk[KL_MEMBER_SECRET_LEN],
                                 uint8_t key_id[KL_DATABASE_KEY_ID_LEN], kl_err *err)
{
    _Static_assert(KL_CLUSTER_SECRET_LEN == crypto_kdf_KEYBYTES, "cluster secret is a kdf key");
    _Static_assert(crypto_sign_SEEDBYTES >= crypto_kdf_BYTES_MIN &&
                   crypto_sign_SEEDBYTES <= crypto_kdf_BYTES_MAX, "seed length");
    uint8_t seed[crypto_sign_SEEDBYTES];
    kl_code rc = KL_OK;
    if (crypto_kdf_derive_from_key(seed, sizeof seed, database_id, "KLdbsign",
                                   cluster_secret) != 0 ||
        crypto_sign_seed_keypair(pk, sk, seed) != 0 || kl_keys_key_id(pk, key_id) != 0) {
        sodium_memzero(pk, KL_MEMBER_PUBLIC_LEN);
        sodium_memzero(sk, KL_MEMBER_SECRET_LEN);
        rc = kl_fail(err, KL_INTERNAL, "database_key",
                     "database %llu: could not derive its signing key",
                     (unsigned long long)database_id);
    }
    sodium_memzero(seed, sizeof seed);
    return rc;
}

int kl_keys_key_id(const uint8_t pk[KL_MEMBER_PUBLIC_LEN], uint8_t key_id[KL_KEY_ID_LEN])
{
    uint8_t digest[crypto_generichash_BYTES];
    if (crypto_generichash(digest, sizeof digest, pk, KL_MEMBER_PUBLIC_LEN, NULL, 0) != 0)
        return -1;
    memcpy(key_id, digest, KL_KEY_ID_LEN);
    return 0;
}
