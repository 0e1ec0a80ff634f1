/* record: the two failures every engine module reports the same way when reading or
 * building stored records: out of memory, and a stored record that does not decode. Both
 * are INTERNAL (never the client's fault) and name only the record kind, never its bytes. */
#ifndef KL_RECORD_H
#define KL_RECORD_H

#include "common/status.h"
#include "daemon/engine/buf.h"
#include "keyload/v1/queue.pb-c.h"

kl_code kl_record_oom(kl_err *err);
/* what: the record kind ("queue", "lease", ...), an identifier, never data. */
kl_code kl_record_corrupt(kl_err *err, const char *what);

/* Appends one encoded MutationResult (BatchReceipt field 6) to out. */
kl_code kl_engine_add_result(kl_buf *out, const Keyload__V1__MutationResult *r, kl_err *err);

#endif
