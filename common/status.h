/* status: the status codes every RPC answers (ARCHITECTURE.md "Sessions and RPC") and the error value
 * functions fill in. Codes equal keyload.v1.StatusCode on the wire.
 * Invariant: a kl_err's message names the field or limit at fault and never holds
 * tokens, keys or message bodies; callers format only names and numbers into it. */
#ifndef KL_STATUS_H
#define KL_STATUS_H

#include "common/limits.h"

#include <stddef.h>

typedef enum kl_code {
    KL_OK = 0,
    KL_INVALID_ARGUMENT = 1,
    KL_UNAUTHENTICATED = 2,
    KL_PERMISSION_DENIED = 3,
    KL_NOT_FOUND = 4,
    KL_CONFLICT = 5,
    KL_RESOURCE_EXHAUSTED = 6,
    KL_FAILED_PRECONDITION = 7,
    KL_NOT_LEADER = 8,
    KL_UNAVAILABLE = 9,
    KL_DEADLINE_EXCEEDED = 10,
    KL_UNKNOWN_WRITE_OUTCOME = 11,
    KL_INTERNAL = 12,
    KL_CODE_COUNT = 13
} kl_code;

typedef struct kl_err {
    kl_code code;
    char message[KL_ERR_MESSAGE_MAX];
    char detail[KL_ERR_DETAIL_MAX];
} kl_err;

/* "OK", "INVALID_ARGUMENT", ...; "UNKNOWN" for out-of-range values. */
const char *kl_code_name(int code);
/* Parses a code name; returns -1 when unknown. */
int kl_code_parse(const char *name);

/* Sets err (when not NULL) and returns code, so callers can `return kl_fail(...)`. */
kl_code kl_fail(kl_err *err, kl_code code, const char *detail, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void kl_err_clear(kl_err *err);

#endif
