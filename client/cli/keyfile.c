/* keyfile: a principal's new Ed25519 key pair for the commands that register a public key
 * (admin bootstrap, principal create, principal rotate-key). One format for every key file:
 * libsodium's 64-byte secret key (seed || public key), mode 0600, written with O_EXCL so an
 * existing file is never overwritten (common/keys.h), the same file --key reads. The secret
 * half is written before the request goes out, so a command that commits never loses its
 * key; it never leaves this process otherwise and is wiped from memory at once. */
#include "client/cli/cli.h"
#include "common/keys.h"

#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

kl_code cli_key_pair(const char *what, const char *key_out, const char *key_in, uint8_t pk[32],
                     kl_err *err)
{
    if (sodium_init() < 0)
        return kl_fail(err, KL_INTERNAL, "sodium_init", "libsodium failed to initialize");
    uint8_t sk[64];
    kl_code rc;
    if (key_in != NULL) {
        rc = kl_keys_read_secret_file(what, key_in, sk, sizeof sk, err);
        if (rc == KL_OK && crypto_sign_ed25519_sk_to_pk(pk, sk) != 0)
            rc = kl_fail(err, KL_INVALID_ARGUMENT, "key_in",
                         "%s does not hold an Ed25519 secret key", key_in);
    } else {
        crypto_sign_keypair(pk, sk);
        rc = kl_keys_write_secret_file(what, key_out, sk, sizeof sk, err);
    }
    sodium_memzero(sk, sizeof sk);
    return rc;
}

void cli_key_settle(kl_code code, const char *key_out, const char *retry_fmt, ...)
{
    if (key_out == NULL || code == KL_OK)
        return;
    if (code != KL_UNKNOWN_WRITE_OUTCOME) {
        unlink(key_out); /* refused for certain: the key belongs to no principal */
        return;
    }
    fprintf(stderr, "keyload: the outcome is unknown; %s is kept (its public key may now be "
                    "registered). Retry with: ", key_out);
    va_list ap;
    va_start(ap, retry_fmt);
    vfprintf(stderr, retry_fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}
