/* cmd_lease: `keyload ack` and `keyload release`. A LEASE is the base64 lease token that
 * `receive` printed, or @FILE / - to read tokens (one per line) from a file or stdin, so
 * that they need not appear on a command line. Errors name a token by its position only. */
#include "client/cli/cli.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USAGE_ACK "keyload [GLOBAL OPTIONS] ack QUEUE LEASE... [--command-id GUID]\n" \
                  "  LEASE: a base64 lease token from receive, @FILE or - (one per line)"
#define USAGE_RELEASE "keyload [GLOBAL OPTIONS] release QUEUE LEASE... [--command-id GUID]\n" \
                      "  LEASE: a base64 lease token from receive, @FILE or - (one per line)"

typedef struct tokens {
    kl_bytes *items;
    size_t n, cap;
} tokens;

static void tokens_free(tokens *t)
{
    for (size_t i = 0; i < t->n; i++)
        free((void *)t->items[i].data);
    free(t->items);
}

/* Decodes one base64 token and appends it; prints errors. */
static int add_token(cli *c, tokens *t, const char *text)
{
    kl_err err;
    char what[48];
    snprintf(what, sizeof what, "lease token %zu", t->n + 1);
    uint8_t *bytes;
    size_t len;
    if (kl_base64_decode(what, text, &bytes, &len, &err) != KL_OK) {
        snprintf(err.detail, sizeof err.detail, "lease_tokens");
        return cli_error(c, &err);
    }
    if (len == 0) {
        free(bytes);
        kl_fail(&err, KL_INVALID_ARGUMENT, "lease_tokens", "%s is empty", what);
        return cli_error(c, &err);
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 8;
        kl_bytes *arr = realloc(t->items, cap * sizeof *arr);
        if (arr == NULL) {
            free(bytes);
            kl_fail(&err, KL_INTERNAL, "oom", "out of memory");
            return cli_error(c, &err);
        }
        t->items = arr;
        t->cap = cap;
    }
    t->items[t->n].data = bytes;
    t->items[t->n].len = len;
    t->n++;
    return CLI_EXIT_OK;
}

/* Reads tokens, one per line (blank lines skipped), from path ("-" = stdin). */
static int read_tokens(cli *c, tokens *t, const char *path)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (f == NULL) {
        kl_err err;
        kl_fail(&err, KL_INVALID_ARGUMENT, "lease_file", "cannot open lease file %s: %s", path,
                strerror(errno));
        return cli_error(c, &err);
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = CLI_EXIT_OK;
    while (rc == CLI_EXIT_OK && (n = getline(&line, &cap, f)) >= 0) {
        while (n > 0 && isspace((unsigned char)line[n - 1]))
            line[--n] = '\0';
        char *s = line;
        while (isspace((unsigned char)*s))
            s++;
        if (*s != '\0')
            rc = add_token(c, t, s);
    }
    if (line != NULL) /* may hold a token: wipe it */
        memset(line, 0, cap);
    free(line);
    if (f != stdin)
        fclose(f);
    return rc;
}

static int lease_command(cli *c, int argc, char **argv, bool ack)
{
    c->usage = ack ? USAGE_ACK : USAGE_RELEASE;
    const char *queue = NULL, *command_id = NULL, *pos;
    tokens t = {0};
    bool stdin_used = false;
    int rc = CLI_EXIT_OK;
    cli_args a;
    cli_args_init(&a, argc, argv);
    cli_arg_kind k;
    while (rc == CLI_EXIT_OK && (k = cli_next(c, &a, &pos)) != CLI_END) {
        if (k == CLI_FAILED) {
            rc = CLI_EXIT_USAGE;
        } else if (k == CLI_POSITIONAL) {
            if (queue == NULL) {
                queue = pos;
            } else if (strcmp(pos, "-") == 0) {
                if (stdin_used)
                    rc = cli_usage(c, "stdin (-) can be read only once");
                else
                    rc = read_tokens(c, &t, "-");
                stdin_used = true;
            } else if (pos[0] == '@') {
                rc = read_tokens(c, &t, pos + 1);
            } else {
                rc = add_token(c, &t, pos);
            }
        } else if (cli_opt_is(&a, "--help") || cli_opt_is(&a, "-h")) {
            tokens_free(&t);
            return cli_help(c);
        } else if (cli_opt_is(&a, "--command-id")) {
            if ((command_id = cli_opt_value(c, &a)) == NULL)
                rc = CLI_EXIT_USAGE;
        } else {
            rc = cli_unknown_option(c, &a);
        }
    }
    if (rc == CLI_EXIT_OK && queue == NULL)
        rc = cli_usage(c, "%s needs QUEUE and at least one LEASE", ack ? "ack" : "release");
    if (rc == CLI_EXIT_OK && t.n == 0)
        rc = cli_usage(c, "%s needs at least one LEASE", ack ? "ack" : "release");
    if (rc == CLI_EXIT_OK && strchr(queue, '/') != NULL)
        rc = cli_usage(c, "%s takes QUEUE without a lane (the lease names its lane)",
                       ack ? "ack" : "release");
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    const Keyload__V1__MutationResult *res = NULL;
    kl_err err;
    if (rc == CLI_EXIT_OK)
        rc = cli_new_batch(c, command_id, &b);
    if (rc == CLI_EXIT_OK) {
        kl_code code = ack ? kl_batch_ack(b, queue, t.items, t.n, &err)
                           : kl_batch_release(b, queue, t.items, t.n, &err);
        int kind = ack ? KEYLOAD__V1__MUTATION_RESULT__KIND_ACKED
                       : KEYLOAD__V1__MUTATION_RESULT__KIND_RELEASED;
        rc = code == KL_OK ? cli_send_result(c, b, kind, &r, &res) : cli_error(c, &err);
    }
    if (rc == CLI_EXIT_OK && res != NULL) {
        char tag[96];
        uint32_t count = ack ? res->acked->count : res->released->count;
        printf("%s %" PRIu32 " of %zu lease%s on %s %s\n", ack ? "acked" : "released", count, t.n,
               t.n == 1 ? "" : "s", queue, cli_receipt_tag(r, tag, sizeof tag));
    }
    kl_receipt_free(r);
    kl_batch_free(b);
    tokens_free(&t);
    return rc;
}

int cli_cmd_ack(cli *c, int argc, char **argv) { return lease_command(c, argc, argv, true); }
int cli_cmd_release(cli *c, int argc, char **argv) { return lease_command(c, argc, argv, false); }
