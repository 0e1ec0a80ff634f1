/* tokenfile: transfer tokens read from @FILE or stdin and written to --token-out files.
 * Tokens are credentials (an intent token lets its holder's coordinator move a message), so
 * they never come from the command line, are written only to new files of mode 0600, and
 * never appear in error text. A token file may hold the raw bytes (what --token-out
 * writes) or base64 text (what the CLI prints), so both pipelines work without tooling. */
#include "client/cli/cli.h"
#include "common/keys.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool is_space(uint8_t ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
}

static bool is_base64(uint8_t ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '+' || ch == '/' || ch == '=';
}

kl_code cli_token_parse(const char *what, const uint8_t *data, size_t n, uint8_t **out,
                        size_t *out_len, kl_err *err)
{
    *out = NULL;
    *out_len = 0;
    size_t lo = 0, hi = n;
    while (lo < hi && is_space(data[lo]))
        lo++;
    while (hi > lo && is_space(data[hi - 1]))
        hi--;
    if (lo == hi)
        return kl_fail(err, KL_INVALID_ARGUMENT, "token", "%s is empty", what);
    bool text = true;
    for (size_t i = lo; i < hi && text; i++)
        text = is_base64(data[i]);
    if (!text) {
        /* Raw bytes, exactly as given: a raw token's edges may well be whitespace bytes. */
        *out = malloc(n);
        if (*out == NULL)
            return kl_fail(err, KL_INTERNAL, "oom", "out of memory");
        memcpy(*out, data, n);
        *out_len = n;
        return KL_OK;
    }
    char *copy = strndup((const char *)data + lo, hi - lo);
    if (copy == NULL)
        return kl_fail(err, KL_INTERNAL, "oom", "out of memory");
    kl_code rc = kl_base64_decode(what, copy, out, out_len, err);
    free(copy);
    if (rc != KL_OK)
        return kl_fail(err, KL_INVALID_ARGUMENT, "token",
                       "%s looks like base64 text but does not decode as canonical base64",
                       what);
    if (*out_len == 0) {
        free(*out);
        *out = NULL;
        return kl_fail(err, KL_INVALID_ARGUMENT, "token", "%s is empty", what);
    }
    return KL_OK;
}

/* Reads all of f, at most CLI_TOKEN_MAX_BYTES. */
static kl_code read_all(const char *what, FILE *f, uint8_t **out, size_t *len, kl_err *err)
{
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (buf == NULL)
            return kl_fail(err, KL_INTERNAL, "oom", "out of memory");
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        if (cap >= CLI_TOKEN_MAX_BYTES) {
            free(buf);
            return kl_fail(err, KL_INVALID_ARGUMENT, "token", "%s is larger than %u bytes", what,
                           CLI_TOKEN_MAX_BYTES);
        }
        uint8_t *nb = realloc(buf, cap * 2);
        if (nb == NULL)
            free(buf);
        buf = nb;
        cap *= 2;
    }
    if (ferror(f)) {
        free(buf);
        return kl_fail(err, KL_INVALID_ARGUMENT, "token", "cannot read %s", what);
    }
    *out = buf;
    *len = n;
    return KL_OK;
}

kl_code cli_token_read(const char *what, const char *spec, uint8_t **out, size_t *out_len,
                       kl_err *err)
{
    *out = NULL;
    *out_len = 0;
    FILE *f;
    if (strcmp(spec, "-") == 0) {
        f = stdin;
    } else if (spec[0] == '@' && spec[1] != '\0') {
        f = fopen(spec + 1, "rb");
        if (f == NULL)
            return kl_fail(err, KL_INVALID_ARGUMENT, "token", "cannot open %s file %s: %s", what,
                           spec + 1, strerror(errno));
    } else {
        /* Never echo spec: it may be a token pasted by mistake. */
        return kl_fail(err, KL_INVALID_ARGUMENT, "usage",
                       "%s takes @FILE or - (stdin): tokens are never read from the command line",
                       what);
    }
    uint8_t *raw = NULL;
    size_t n = 0;
    kl_code rc = read_all(what, f, &raw, &n, err);
    if (f != stdin)
        fclose(f);
    if (rc != KL_OK)
        return rc;
    rc = cli_token_parse(what, raw, n, out, out_len, err);
    free(raw);
    return rc;
}

kl_code cli_token_out_check(const char *what, const char *path, kl_err *err)
{
    /* The detail is the option's name as a field: "--witness-out" -> "witness_out". */
    char detail[KL_ERR_DETAIL_MAX];
    const char *name = strncmp(what, "--", 2) == 0 ? what + 2 : what;
    snprintf(detail, sizeof detail, "%s", name);
    for (char *p = detail; *p; p++)
        if (*p == '-')
            *p = '_';
    struct stat st;
    if (lstat(path, &st) == 0)
        return kl_fail(err, KL_FAILED_PRECONDITION, detail,
                       "%s %s already exists (it is never overwritten)", what, path);
    return KL_OK;
}

kl_code cli_token_write(const char *what, const char *path, const uint8_t *token, size_t len,
                        kl_err *err)
{
    return kl_keys_write_secret_file(what, path, token, len, err);
}
