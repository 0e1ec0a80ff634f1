#include "common/grants.h"

#include "common/names.h"

#include <string.h>

static const char *const permission_names[] = {
    [KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH] = "QueuePublish",
    [KEYLOAD__V1__PERMISSION__QUEUE_CONSUME] = "QueueConsume",
    [KEYLOAD__V1__PERMISSION__QUEUE_ACK] = "QueueAck",
    [KEYLOAD__V1__PERMISSION__QUEUE_INSPECT] = "QueueInspect",
    [KEYLOAD__V1__PERMISSION__QUERY] = "Query",
};
#define PERMISSION_MAX ((int)(sizeof permission_names / sizeof permission_names[0]) - 1)

bool kl_grants_permission_known(Keyload__V1__Permission p)
{
    return (int)p >= 1 && (int)p <= PERMISSION_MAX;
}

const char *kl_grants_permission_name(Keyload__V1__Permission p)
{
    return kl_grants_permission_known(p) ? permission_names[p] : "unknown";
}

Keyload__V1__Permission kl_grants_permission_parse(const char *name)
{
    for (int i = 1; name != NULL && i <= PERMISSION_MAX; i++)
        if (strcmp(permission_names[i], name) == 0)
            return (Keyload__V1__Permission)i;
    return KEYLOAD__V1__PERMISSION__PERMISSION_UNSPECIFIED;
}

kl_code kl_grants_pattern_check(const char *what, const char *pattern, kl_err *err)
{
    size_t n = pattern ? strlen(pattern) : 0;
    if (n == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s must not be empty", what);
    if (n > KL_NAME_LEN_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s is %zu bytes; the limit is %d", what, n,
                       KL_NAME_LEN_MAX);
    const char *star = strchr(pattern, '*');
    if (star != NULL && (size_t)(star - pattern) != n - 1)
        return kl_fail(err, KL_INVALID_ARGUMENT, what,
                       "%s may hold '*' only once, as its last byte (byte %zu is '*')", what,
                       (size_t)(star - pattern));
    size_t prefix = star ? n - 1 : n;
    if (prefix == 0)
        return KL_OK; /* "*": every queue */
    char buf[KL_NAME_LEN_MAX + 1];
    memcpy(buf, pattern, prefix);
    buf[prefix] = '\0';
    return kl_name_check(what, buf, err);
}
