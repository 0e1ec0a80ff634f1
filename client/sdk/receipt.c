/* receipt: decoded batch receipts (raw bytes kept exactly as stored) and stats answers. */
#include "client/sdk/internal.h"

#include <stdlib.h>
#include <string.h>

kl_code kl_receipt_decode(const uint8_t *bytes, size_t len, kl_receipt **out, kl_err *err)
{
    *out = NULL;
    if (bytes == NULL && len != 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "receipt", "receipt bytes are NULL");
    kl_receipt *r = calloc(1, sizeof *r);
    if (r == NULL)
        return kl_sdk_oom(err);
    r->bytes = malloc(len ? len : 1);
    if (r->bytes == NULL) {
        free(r);
        return kl_sdk_oom(err);
    }
    if (len)
        memcpy(r->bytes, bytes, len);
    r->len = len;
    r->decoded = keyload__v1__batch_receipt__unpack(NULL, len, r->bytes);
    if (r->decoded == NULL) {
        kl_receipt_free(r);
        return kl_fail(err, KL_INTERNAL, "receipt", "the receipt does not decode as "
                       "keyload.v1.BatchReceipt");
    }
    *out = r;
    return KL_OK;
}

void kl_receipt_free(kl_receipt *r)
{
    if (r == NULL)
        return;
    if (r->decoded)
        keyload__v1__batch_receipt__free_unpacked(r->decoded, NULL);
    free(r->bytes);
    free(r);
}

void kl_queue_stats_free(Keyload__V1__QueueStatsAnswer *s)
{
    if (s)
        keyload__v1__queue_stats_answer__free_unpacked(s, NULL);
}
