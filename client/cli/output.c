/* output: usage errors, error statuses and JSON printing, the same way for every command. */
#include "client/cli/cli.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_json_error(const kl_err *err)
{
    char *s = kl_error_to_json(err, 0);
    if (s == NULL) { /* out of memory: still one JSON object, built by hand */
        printf("{\"error\":{\"code\":\"%s\",\"message\":\"out of memory\",\"detail\":\"oom\"}}\n",
               kl_code_name(err->code));
    } else {
        printf("%s\n", s);
        free(s);
    }
    fflush(stdout);
}

int cli_usage(cli *c, const char *fmt, ...)
{
    kl_err err;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err.message, sizeof err.message, fmt, ap);
    va_end(ap);
    err.code = KL_INVALID_ARGUMENT;
    snprintf(err.detail, sizeof err.detail, "usage");
    snprintf(c->last_usage, sizeof c->last_usage, "%s", err.message);
    fprintf(stderr, "error: usage: %s\n", err.message);
    if (c->usage != NULL)
        fprintf(stderr, "usage: %s\n", c->usage);
    fprintf(stderr, "(keyload --help lists every command)\n");
    if (c->json)
        print_json_error(&err);
    return CLI_EXIT_USAGE;
}

int cli_error(cli *c, const kl_err *err)
{
    if (err->code == KL_INVALID_ARGUMENT && strcmp(err->detail, "usage") == 0)
        return cli_usage(c, "%s", err->message); /* raised by the CLI itself (cli_open) */
    if (c->json) {
        print_json_error(err);
    } else {
        if (err->detail[0] != '\0')
            fprintf(stderr, "error: %s: %s (detail: %s)\n", kl_code_name(err->code),
                    err->message, err->detail);
        else
            fprintf(stderr, "error: %s: %s\n", kl_code_name(err->code), err->message);
    }
    return CLI_EXIT_ERROR;
}

int cli_print_json(cli *c, char *json)
{
    if (json == NULL) {
        kl_err err;
        kl_fail(&err, KL_INTERNAL, "oom", "out of memory while printing the result");
        return cli_error(c, &err);
    }
    printf("%s\n", json);
    free(json);
    return CLI_EXIT_OK;
}

char *cli_human_bytes(const uint8_t *p, size_t n)
{
    if (n == 0)
        return strdup("\"\"");
    if (kl_sdk_utf8_valid(p, n)) {
        json_t *s = json_stringn((const char *)p, n);
        char *out = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
        json_decref(s);
        return out;
    }
    char *b = kl_base64_encode(p, n);
    if (b == NULL)
        return NULL;
    char *out = malloc(strlen(b) + 8);
    if (out != NULL)
        sprintf(out, "base64:%s", b);
    free(b);
    return out;
}
