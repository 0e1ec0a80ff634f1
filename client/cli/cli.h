/* cli: what the keyload CLI's files share (DESIGN.md §10).
 *
 * Exit codes: 0 success, 1 an error status (from the SDK or a member), 2 a usage error.
 * With --json exactly one JSON object goes to stdout, success or failure; without it,
 * results go to stdout and errors to stderr as `error: CODE: message`. Tokens and bodies
 * never appear in error text. */
#ifndef KL_CLI_H
#define KL_CLI_H

#include "client/keyload.h"

#include <stdbool.h>
#include <stdint.h>

#define CLI_EXIT_OK 0
#define CLI_EXIT_ERROR 1
#define CLI_EXIT_USAGE 2

#define CLI_DEFAULT_CLUSTER "deploy/local-rf3.json"

typedef struct cli {
    const char *cluster;     /* --cluster, KEYLOAD_CLUSTER */
    const char *database;    /* --database, KEYLOAD_DATABASE */
    const char *principal;   /* --principal, KEYLOAD_PRINCIPAL (NULL: unsealed requests) */
    const char *key;         /* --key, KEYLOAD_KEY: the principal's secret key file */
    int timeout_ms;          /* --timeout */
    bool json;               /* --json */
    const char *usage;       /* the running command's usage line(s), for usage errors */
} cli;

/* ---- args.c: one argument iterator for every command. Global options (--cluster,
 * --database, --principal, --key, --json, --timeout) are accepted anywhere and applied to the cli; "--" ends
 * options; "--name=value" and "--name value" are both accepted. */
typedef struct cli_args {
    int argc;
    char **argv;
    int i;
    bool opts_done;
    const char *opt;         /* the current option, e.g. "--max" (without "=value") */
    size_t opt_len;
    const char *inline_val;  /* the text after '=', or NULL */
} cli_args;

typedef enum { CLI_END, CLI_POSITIONAL, CLI_OPTION, CLI_FAILED } cli_arg_kind;

void cli_args_init(cli_args *a, int argc, char **argv);
/* Next argument; CLI_FAILED means a usage error was already reported. */
cli_arg_kind cli_next(cli *c, cli_args *a, const char **positional);
bool cli_opt_is(const cli_args *a, const char *name);
/* The current option's value; NULL (usage error reported) when missing. */
const char *cli_opt_value(cli *c, cli_args *a);
/* Reports the current option as unknown; returns CLI_EXIT_USAGE. */
int cli_unknown_option(cli *c, const cli_args *a);

/* Parse numbers for option `name`; false after reporting a usage error. */
bool cli_parse_u64(cli *c, const char *name, const char *text, uint64_t max, uint64_t *out);
bool cli_parse_i64(cli *c, const char *name, const char *text, int64_t min, int64_t max,
                   int64_t *out);

/* ---- output.c */
/* Prints a usage error (stderr: message and c->usage; stdout too with --json). Returns 2. */
int cli_usage(cli *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints err (stderr, or the JSON error object on stdout). Returns 1. */
int cli_error(cli *c, const kl_err *err);
/* Prints a JSON text (malloc'd, freed here) plus a newline; NULL means out of memory. */
int cli_print_json(cli *c, char *json);
/* A string for humans: "quoted" with JSON escapes when valid UTF-8, else base64:... .
 * malloc'd; NULL when out of memory. */
char *cli_human_bytes(const uint8_t *p, size_t n);

/* ---- send.c */
/* Opens the SDK client from the cli's options: with --principal and --key (both or
 * neither) kl_client_open_principal, so every request goes sealed. Only one of them is
 * INVALID_ARGUMENT with detail "usage", which cli_error reports as a usage error (exit 2). */
kl_code cli_open(const cli *c, kl_client **out, kl_err *err);
/* Sends b and prints errors; on KL_OK *out is the receipt. Returns the exit code. */
int cli_send(cli *c, const kl_batch *b, kl_receipt **out);
/* Sends a one-mutation batch. With --json it prints the receipt and leaves *res NULL;
 * otherwise *res is the receipt's single result of `kind`, for the command's human line.
 * *r (freed by the caller with kl_receipt_free) is set whenever a receipt arrived.
 * Returns the exit code. */
int cli_send_result(cli *c, const kl_batch *b, int kind, kl_receipt **r,
                    const Keyload__V1__MutationResult **res);
/* kl_batch_new for --command-id (NULL: fresh random id), printing errors. */
int cli_new_batch(cli *c, const char *command_id, kl_batch **out);
/* Prints c->usage on stdout (for --help after a command); returns 0. */
int cli_help(cli *c);
/* "(command X, index I)" for human lines; writes into buf. */
const char *cli_receipt_tag(const kl_receipt *r, char *buf, size_t cap);
/* The single result of a one-mutation receipt when it has the expected kind; NULL (and an
 * INTERNAL error printed) otherwise. */
const Keyload__V1__MutationResult *cli_single_result(cli *c, const kl_receipt *r, int kind);

/* ---- commands */
int cli_cmd_admin(cli *c, int argc, char **argv);
int cli_cmd_database(cli *c, int argc, char **argv);
int cli_cmd_queue(cli *c, int argc, char **argv);
int cli_cmd_enqueue(cli *c, int argc, char **argv);
int cli_cmd_receive(cli *c, int argc, char **argv);
int cli_cmd_ack(cli *c, int argc, char **argv);
int cli_cmd_release(cli *c, int argc, char **argv);
int cli_cmd_cluster_status(cli *c, int argc, char **argv);

/* Splits QUEUE[/LANE] into queue (malloc'd) and lane (pointer into spec, or "" when
 * absent). false after reporting a usage error. */
bool cli_split_lane(cli *c, const char *spec, char **queue, const char **lane);

#endif
