#include "common/names.h"

#include <string.h>

kl_code kl_name_check(const char *what, const char *s, kl_err *err)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s must not be empty", what);
    if (n > KL_NAME_LEN_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s is %zu bytes; the limit is %d", what, n,
                       KL_NAME_LEN_MAX);
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-' || ch == ':'))
            return kl_fail(err, KL_INVALID_ARGUMENT, what,
                           "%s may hold only letters, digits and . _ - : (byte %zu is not allowed)",
                           what, i);
    }
    return KL_OK;
}
