#include "daemon/keygen.h"

#include "common/keys.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

_Static_assert(KL_MEMBER_SECRET_LEN == crypto_sign_SECRETKEYBYTES, "member secret key size");
_Static_assert(KL_MEMBER_PUBLIC_LEN == crypto_sign_PUBLICKEYBYTES, "member public key size");
_Static_assert(KL_KEYGEN_PUBLIC_B64 >= 45, "base64 of 32 bytes needs 44 characters and a NUL");

static const char USAGE[] =
    "usage: keyloadd keygen --secret-out FILE            member key pair: secret key to FILE\n"
    "                                                    (0600), public key (base64) on stdout\n"
    "       keyloadd keygen --cluster-secret-out FILE    cluster secret: 32 random bytes (0600)\n"
    "       keyloadd keygen --public-of FILE             public key (base64) of a member key file\n"
    "FILE must not exist: key files are never overwritten.\n";

static kl_code public_b64_of(const uint8_t pk[crypto_sign_PUBLICKEYBYTES], char *out, size_t cap,
                             kl_err *err)
{
    if (cap < sodium_base64_ENCODED_LEN(crypto_sign_PUBLICKEYBYTES, sodium_base64_VARIANT_ORIGINAL))
        return kl_fail(err, KL_INTERNAL, "public_b64", "keygen: public key buffer too small");
    sodium_bin2base64(out, cap, pk, crypto_sign_PUBLICKEYBYTES, sodium_base64_VARIANT_ORIGINAL);
    return KL_OK;
}

kl_code kl_keygen_member(const char *secret_path, char *public_b64, size_t cap, kl_err *err)
{
    uint8_t pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
    if (crypto_sign_keypair(pk, sk) != 0)
        return kl_fail(err, KL_INTERNAL, "keypair", "keygen: crypto_sign_keypair failed");
    kl_code rc = public_b64_of(pk, public_b64, cap, err);
    if (rc == KL_OK)
        rc = kl_keys_write_secret_file("member key file", secret_path, sk, sizeof sk, err);
    sodium_memzero(sk, sizeof sk);
    return rc;
}

kl_code kl_keygen_cluster_secret(const char *path, kl_err *err)
{
    uint8_t secret[KL_CLUSTER_SECRET_LEN];
    randombytes_buf(secret, sizeof secret);
    kl_code rc = kl_keys_write_secret_file("cluster secret file", path, secret, sizeof secret, err);
    sodium_memzero(secret, sizeof secret);
    return rc;
}

/* --public-of: reads a member key file (mode and size checked, halves checked against
 * each other) and prints its public half. */
static kl_code public_of(const char *path, char *out, size_t cap, kl_err *err)
{
    kl_keys *k;
    kl_code rc = kl_keys_new(&k, err);
    if (rc != KL_OK)
        return rc;
    rc = kl_keys_load_member_key(k, path, NULL, NULL, err);
    if (rc == KL_OK)
        rc = public_b64_of(k->member_public, out, cap, err);
    kl_keys_free(k);
    return rc;
}

int kl_keygen_main(int argc, char **argv)
{
    const char *secret_out = NULL, *cluster_out = NULL, *public_of_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char **slot = NULL;
        const char *names[] = {"--secret-out", "--cluster-secret-out", "--public-of"};
        const char **slots[] = {&secret_out, &cluster_out, &public_of_path};
        const char *val = NULL;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            fputs(USAGE, stdout);
            return 0;
        }
        for (int n = 0; n < 3; n++) {
            size_t len = strlen(names[n]);
            if (strncmp(arg, names[n], len) == 0 && (arg[len] == '\0' || arg[len] == '=')) {
                slot = slots[n];
                val = arg[len] == '=' ? arg + len + 1 : (i + 1 < argc ? argv[++i] : NULL);
            }
        }
        if (slot == NULL) {
            fprintf(stderr, "keyloadd keygen: unknown argument '%s'\n%s", arg, USAGE);
            return 2;
        }
        if (val == NULL || val[0] == '\0') {
            fprintf(stderr, "keyloadd keygen: %s needs a FILE\n%s", arg, USAGE);
            return 2;
        }
        *slot = val;
    }
    if ((secret_out != NULL) + (cluster_out != NULL) + (public_of_path != NULL) != 1) {
        fprintf(stderr, "keyloadd keygen: give exactly one of --secret-out, --cluster-secret-out, "
                        "--public-of\n%s", USAGE);
        return 2;
    }
    if (sodium_init() < 0) {
        fprintf(stderr, "keyloadd keygen: libsodium failed to initialise\n");
        return 1;
    }
    kl_err err;
    kl_err_clear(&err);
    char pub[KL_KEYGEN_PUBLIC_B64];
    kl_code rc;
    if (secret_out != NULL)
        rc = kl_keygen_member(secret_out, pub, sizeof pub, &err);
    else if (public_of_path != NULL)
        rc = public_of(public_of_path, pub, sizeof pub, &err);
    else
        rc = kl_keygen_cluster_secret(cluster_out, &err);
    if (rc != KL_OK) {
        fprintf(stderr, "keyloadd keygen: %s\n", err.message);
        return 1;
    }
    if (cluster_out == NULL && (printf("%s\n", pub) < 0 || fflush(stdout) != 0)) {
        fprintf(stderr, "keyloadd keygen: writing the public key to stdout failed\n");
        return 1;
    }
    return 0;
}
