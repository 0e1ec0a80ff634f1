/* cmd_sql: `keyload sql STATEMENT|@FILE|-` (ARCHITECTURE.md "Processes"): one Q1 statement through
 * kl_client_query. A statement that carries a token (accept.v1, complete.v1, ack.v1) should
 * come from @FILE or - (stdin): on the command line `ps` and shell history keep it. Output:
 * each row as one JSON line; with --json one object {"rows": [...]}. */
#include "client/cli/cli.h"

#include "common/q1.h"

#include <errno.h>
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char USAGE[] =
    "keyload sql STATEMENT|@FILE|-\n"
    "  STATEMENT: CALL alias(name => value, ...) [WITH COMMAND_ID 'guid'] [;]\n"
    "  (README \"Q1 statements\"); @FILE or - reads it from a file or stdin";

/* Reads at most KL_Q1_STATEMENT_MAX bytes from spec (@FILE or -) into a malloc'd string. */
static kl_code read_statement(const char *spec, char **out, kl_err *err)
{
    *out = NULL;
    FILE *f = strcmp(spec, "-") == 0 ? stdin : fopen(spec + 1, "rb");
    if (f == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "statement", "cannot open %s: %s", spec + 1,
                       strerror(errno));
    char *buf = malloc(KL_Q1_STATEMENT_MAX + 2);
    if (buf == NULL) {
        if (f != stdin)
            fclose(f);
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    }
    size_t n = fread(buf, 1, KL_Q1_STATEMENT_MAX + 1, f);
    bool failed = ferror(f) != 0;
    if (f != stdin)
        fclose(f);
    if (failed || n > KL_Q1_STATEMENT_MAX) {
        sodium_memzero(buf, n);
        free(buf);
        return failed ? kl_fail(err, KL_INVALID_ARGUMENT, "statement", "reading the statement failed")
                      : kl_fail(err, KL_INVALID_ARGUMENT, "limit:KL_Q1_STATEMENT_MAX",
                                "the statement is longer than %d bytes", KL_Q1_STATEMENT_MAX);
    }
    buf[n] = '\0';
    if (strlen(buf) != n) {
        free(buf);
        return kl_fail(err, KL_INVALID_ARGUMENT, "statement", "the statement contains a NUL byte");
    }
    *out = buf;
    return KL_OK;
}

/* Prints the rows (a JSON array) in the CLI's shape. */
static int print_rows(cli *c, const char *rows_json)
{
    json_error_t je;
    json_t *rows = json_loads(rows_json, 0, &je);
    if (!json_is_array(rows)) {
        json_decref(rows);
        kl_err err;
        kl_fail(&err, KL_INTERNAL, "answer", "the query's rows are not a JSON array");
        return cli_error(c, &err);
    }
    int rc = CLI_EXIT_OK;
    if (c->json) {
        json_t *obj = json_pack("{s:O}", "rows", rows);
        rc = cli_print_json(c, obj ? json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL);
        json_decref(obj);
    } else {
        size_t i;
        json_t *row;
        json_array_foreach(rows, i, row) {
            rc = cli_print_json(c, json_dumps(row, JSON_COMPACT | JSON_PRESERVE_ORDER));
            if (rc != CLI_EXIT_OK)
                break;
        }
    }
    json_decref(rows);
    return rc;
}

int cli_cmd_sql(cli *c, int argc, char **argv)
{
    c->usage = USAGE;
    cli_args a;
    cli_args_init(&a, argc, argv);
    const char *pos, *statement = NULL;
    cli_arg_kind k;
    while ((k = cli_next(c, &a, &pos)) != CLI_END) {
        if (k == CLI_FAILED)
            return CLI_EXIT_USAGE;
        if (k == CLI_OPTION) {
            if (cli_opt_is(&a, "--help"))
                return cli_help(c);
            return cli_unknown_option(c, &a);
        }
        if (statement != NULL)
            return cli_usage(c, "one STATEMENT only (quote it as one argument)");
        statement = pos;
    }
    if (statement == NULL)
        return cli_usage(c, "a STATEMENT is needed");
    kl_err err;
    char *text = NULL;
    if ((statement[0] == '@' || strcmp(statement, "-") == 0) &&
        read_statement(statement, &text, &err) != KL_OK)
        return cli_error(c, &err);
    kl_client *client;
    int rc;
    char *rows = NULL;
    if (cli_open(c, &client, &err) != KL_OK) {
        rc = cli_error(c, &err);
    } else {
        if (kl_client_query(client, text ? text : statement, &rows, &err) != KL_OK)
            rc = cli_error(c, &err);
        else
            rc = print_rows(c, rows);
        kl_client_close(client);
    }
    if (rows != NULL) {
        sodium_memzero(rows, strlen(rows));
        free(rows);
    }
    if (text != NULL) {
        sodium_memzero(text, strlen(text));
        free(text);
    }
    return rc;
}
