#include "common/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const code_names[KL_CODE_COUNT] = {
    "OK", "INVALID_ARGUMENT", "UNAUTHENTICATED", "PERMISSION_DENIED", "NOT_FOUND",
    "CONFLICT", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "NOT_LEADER", "UNAVAILABLE",
    "DEADLINE_EXCEEDED", "UNKNOWN_WRITE_OUTCOME", "INTERNAL",
};

const char *kl_code_name(int code)
{
    if (code < 0 || code >= KL_CODE_COUNT)
        return "UNKNOWN";
    return code_names[code];
}

int kl_code_parse(const char *name)
{
    for (int i = 0; i < KL_CODE_COUNT; i++)
        if (strcmp(code_names[i], name) == 0)
            return i;
    return -1;
}

kl_code kl_fail(kl_err *err, kl_code code, const char *detail, const char *fmt, ...)
{
    if (err == NULL)
        return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    snprintf(err->detail, sizeof err->detail, "%s", detail ? detail : "");
    return code;
}

void kl_err_clear(kl_err *err)
{
    if (err == NULL)
        return;
    err->code = KL_OK;
    err->message[0] = '\0';
    err->detail[0] = '\0';
}
