/* keyfile: a principal's new Ed25519 key pair for the commands that register a public key
 * (admin bootstrap, principal create, principal rotate-key). One format for every key file:
 * libsodium's 64-byte secret key (seed || public key), mode 0600, written with O_EXCL so an
 * existing file is never overwritten (common/keys.h), the same file --key reads. The secret
 * half is written before the request goes out, so a command that commits never loses its
 * key; it never leaves this process otherwise and is wiped from memory at once. The key
 * files themselves are the SDK's (kl_key_file_new, kl_key_file_public). */
#include "client/cli/cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

kl_code cli_key_pair(const char *key_out, const char *key_in, uint8_t pk[32], kl_err *err)
{
    return key_in != NULL ? kl_key_file_public(key_in, pk, err) : kl_key_file_new(key_out, pk, err);
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
