/* record: shared failures of stored-record handling (record.h). */
#include "daemon/engine/record.h"

#include <stdlib.h>

kl_code kl_record_oom(kl_err *err) { return kl_fail(err, KL_INTERNAL, "memory", "out of memory"); }

kl_code kl_record_corrupt(kl_err *err, const char *what)
{
    return kl_fail(err, KL_INTERNAL, "store", "stored %s record does not decode", what);
}

kl_code kl_engine_add_result(kl_buf *out, const Keyload__V1__MutationResult *r, kl_err *err)
{
    size_t n = keyload__v1__mutation_result__get_packed_size(r);
    uint8_t *buf = malloc(n ? n : 1);
    if (buf == NULL)
        return kl_record_oom(err);
    keyload__v1__mutation_result__pack(r, buf);
    /* BatchReceipt.results is field 6, length-delimited. */
    int bad = kl_buf_append_field(out, (6 << 3) | 2, buf, n);
    free(buf);
    return bad ? kl_record_oom(err) : KL_OK;
}
