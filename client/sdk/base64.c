/* base64: standard base64 with padding, through libsodium (the one encoding the public
 * JSON and the CLI use for lease tokens, digests and bodies). */
#include "client/sdk/internal.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

char *kl_base64_encode(const uint8_t *data, size_t len)
{
    size_t cap = sodium_base64_ENCODED_LEN(len, sodium_base64_VARIANT_ORIGINAL);
    char *out = malloc(cap);
    if (out == NULL)
        return NULL;
    sodium_bin2base64(out, cap, len ? data : (const uint8_t *)"", len,
                      sodium_base64_VARIANT_ORIGINAL);
    return out;
}

kl_code kl_base64_decode(const char *what, const char *text, uint8_t **out, size_t *out_len,
                         kl_err *err)
{
    *out = NULL;
    *out_len = 0;
    if (what == NULL)
        what = "value";
    if (text == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s is missing", what);
    size_t tl = strlen(text);
    size_t cap = tl / 4 * 3 + 3;
    uint8_t *buf = malloc(cap);
    if (buf == NULL)
        return kl_sdk_oom(err);
    size_t n = 0;
    if (sodium_base642bin(buf, cap, text, tl, NULL, &n, NULL,
                          sodium_base64_VARIANT_ORIGINAL) != 0) {
        free(buf);
        /* Never echo the text: it may be a token. */
        return kl_fail(err, KL_INVALID_ARGUMENT, what,
                       "%s is not valid base64 (standard alphabet, with padding)", what);
    }
    *out = buf;
    *out_len = n;
    return KL_OK;
}
