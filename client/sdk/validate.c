/* validate: client-side checks of names and text. The server validates again; these exist
 * so a user gets a clear error naming the field before anything is sent. */
#include "client/sdk/internal.h"
#include "common/names.h"

#include <stdlib.h>
#include <string.h>

bool kl_sdk_utf8_valid(const uint8_t *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        uint32_t cp, min;
        if ((c & 0xe0) == 0xc0) {
            need = 1, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            need = 2, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            need = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (n - i <= need)
            return false;
        for (size_t k = 1; k <= need; k++) {
            uint8_t cc = p[i + k];
            if ((cc & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (cc & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += need + 1;
    }
    return true;
}

kl_code kl_sdk_check_text(const char *what, const char *text, kl_err *err)
{
    if (text == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s is missing", what);
    if (!kl_sdk_utf8_valid((const uint8_t *)text, strlen(text)))
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s is not valid UTF-8", what);
    return KL_OK;
}

kl_code kl_sdk_check_name(const char *what, const char *name, kl_sdk_name_rule rule,
                          kl_err *err)
{
    if (name == NULL || name[0] == '\0') {
        if (rule == KL_SDK_NAME_LANE)
            return KL_OK;
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s must not be empty", what);
    }
    size_t len = strlen(name);
    if (len > KL_SDK_NAME_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s is %zu bytes long; the limit is %d",
                       what, len, KL_SDK_NAME_MAX);
    if (!kl_sdk_utf8_valid((const uint8_t *)name, len))
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s is not valid UTF-8", what);
    if (rule == KL_SDK_NAME_KEY)
        return KL_OK;
    /* Identifiers (tenant, database, queue, lane): the daemon's own rule. */
    return kl_name_check(what, name, err);
}

kl_code kl_sdk_split_database(const char *db, char *tenant, char *database, kl_err *err)
{
    if (db == NULL || db[0] == '\0')
        return kl_fail(err, KL_INVALID_ARGUMENT, "database",
                       "database must be TENANT/DB, got an empty value");
    const char *slash = strchr(db, '/');
    if (slash == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "database",
                       "database must be TENANT/DB (one '/')");
    size_t tl = (size_t)(slash - db);
    if (tl > KL_SDK_NAME_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "tenant",
                       "tenant is %zu bytes long; the limit is %d", tl, KL_SDK_NAME_MAX);
    char t[KL_SDK_NAME_MAX + 1];
    memcpy(t, db, tl);
    t[tl] = '\0';
    kl_code rc = kl_sdk_check_name("tenant", t, KL_SDK_NAME_DB_PART, err);
    if (rc != KL_OK)
        return rc;
    rc = kl_sdk_check_name("database", slash + 1, KL_SDK_NAME_DB_PART, err);
    if (rc != KL_OK)
        return rc;
    memcpy(tenant, t, tl + 1);
    memcpy(database, slash + 1, strlen(slash + 1) + 1);
    return KL_OK;
}

kl_code kl_sdk_oom(kl_err *err)
{
    return kl_fail(err, KL_INTERNAL, "oom", "out of memory");
}

kl_code kl_sdk_strdup(const char *s, char **out, kl_err *err)
{
    *out = strdup(s ? s : "");
    return *out ? KL_OK : kl_sdk_oom(err);
}
