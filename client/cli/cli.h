/* cli: what the keyload CLI's files share (ARCHITECTURE.md "Processes").
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
    char last_usage[KL_ERR_MESSAGE_MAX]; /* the last usage error's message (tests read it) */
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

/* ---- keyfile.c: key pairs of principals (admin bootstrap, principal create/rotate-key) */
/* The public half of a principal's key pair: a new pair whose secret half is written to
 * key_out (mode 0600, refusing an existing file: the format --key reads), or the pair held
 * in key_in (to retry a command with the same key). Exactly one of them is non-NULL. The
 * SDK's kl_key_file_new / kl_key_file_public do the work (and wipe the secret half). */
kl_code cli_key_pair(const char *key_out, const char *key_in, uint8_t pk[32], kl_err *err);
/* After the request registering that key: on KL_OK nothing; on an unknown outcome key_out is
 * kept and stderr says how to retry (retry_fmt: the command line, with --key-in and
 * --command-id); on any other error key_out is removed (it belongs to no principal).
 * key_out NULL (the key came from --key-in): nothing. */
void cli_key_settle(kl_code code, const char *key_out, const char *retry_fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- cmd_principal.c: `principal create|show|grant|revoke|rotate-key` */
typedef enum cli_principal_sub {
    CLI_PRINCIPAL_CREATE,
    CLI_PRINCIPAL_SHOW,
    CLI_PRINCIPAL_GRANT,
    CLI_PRINCIPAL_REVOKE,
    CLI_PRINCIPAL_ROTATE_KEY,
} cli_principal_sub;

typedef struct cli_principal_args {
    cli_principal_sub sub;
    const char *id;                      /* NAME (create) or ID */
    Keyload__V1__Permission permission;  /* grant, revoke */
    const char *queue;                   /* --queue PATTERN (grant, revoke) */
    kl_key_list fields, headers;         /* --fields, --headers (grant; owned) */
    const char *key_out, *key_in;        /* create, rotate-key: exactly one */
    kl_role role;                        /* create --role (default none) */
    const char *command_id;              /* NULL: a fresh one */
    bool help;                           /* --help was printed: nothing else to do */
} cli_principal_args;

/* Parses `principal SUB ARGS...` (argv[0] is SUB) into *o (zeroed first; free with
 * cli_principal_args_clear). Returns CLI_EXIT_OK or CLI_EXIT_USAGE after reporting the
 * usage error, which names the option or argument at fault. */
int cli_principal_parse(cli *c, int argc, char **argv, cli_principal_args *o);
void cli_principal_args_clear(cli_principal_args *o);

/* ---- cmd_database.c: limit options shared by `database create` and `database limits` */
typedef struct cli_database_args {
    const char *name;            /* TENANT/DB, NULL: --database */
    kl_database_limits limits;
    bool any_limit;              /* at least one limit option was given */
    uint32_t fields;             /* the KL_DB_FIELD_* bits of the limit options given */
    const char *command_id;
    bool help;
} cli_database_args;
/* Parses the arguments after `database create` / `database limits` (argv[0] is the first
 * argument after the subcommand). Returns CLI_EXIT_OK or CLI_EXIT_USAGE (reported). */
int cli_database_parse(cli *c, const char *sub, int argc, char **argv, cli_database_args *o);

/* ---- tokenfile.c: transfer tokens on disk or stdin, never on the command line (ARCHITECTURE.md
 * "Sessions and RPC": `ps` and shell history would keep them). */
/* The largest token file read (an intent token carries its message). */
#define CLI_TOKEN_MAX_BYTES (64u << 20)
/* Decodes a token file's content: when, after trimming ASCII whitespace, every byte is in
 * the base64 alphabet (A-Z a-z 0-9 + / =), the text is base64 and must decode (canonical,
 * padded); otherwise the content is the raw token, byte for byte, untrimmed. Empty content
 * is refused. `what` (e.g. "--intent") names the option in errors (detail "token"); the
 * content never appears in them. *out is malloc'd (free()). */
kl_code cli_token_parse(const char *what, const uint8_t *data, size_t n, uint8_t **out,
                        size_t *out_len, kl_err *err);
/* Reads spec "@FILE" or "-" (stdin) and parses it with cli_token_parse. Any other spec is
 * INVALID_ARGUMENT "usage" (reported by cli_error as a usage error). */
kl_code cli_token_read(const char *what, const char *spec, uint8_t **out, size_t *out_len,
                       kl_err *err);
/* Refuses an output path (option `what`: "--token-out", "--witness-out", "--receipt-out")
 * that already exists (FAILED_PRECONDITION, detail the option as a field name, e.g.
 * "token_out"), checked before a command is sent so that nothing commits whose token then
 * has nowhere to go. */
kl_code cli_token_out_check(const char *what, const char *path, kl_err *err);
/* Writes the raw token to path: created with mode 0600, never overwriting (common/keys.h);
 * `what` names the option in errors. */
kl_code cli_token_write(const char *what, const char *path, const uint8_t *token, size_t len,
                        kl_err *err);

/* ---- cmd_transfer.c: `transfer create|accept|complete|inspect|receipt|pending|pause|resume|
 * advance|repair|failure` */
typedef enum cli_transfer_sub {
    CLI_TRANSFER_CREATE,
    CLI_TRANSFER_ACCEPT,
    CLI_TRANSFER_COMPLETE,
    CLI_TRANSFER_INSPECT,
    CLI_TRANSFER_RECEIPT,
    CLI_TRANSFER_PENDING,
    CLI_TRANSFER_PAUSE,
    CLI_TRANSFER_RESUME,
    CLI_TRANSFER_ADVANCE,        /* AdvanceQueueTransferAttempt */
    CLI_TRANSFER_REPAIR,         /* AdvanceQueueTransferRepair */
    CLI_TRANSFER_FAILURE,        /* ReadQueueTransferFailure */
    CLI_TRANSFER_COMPLETE_FAILURE, /* ReadQueueTransferFailure of a denied Complete */
} cli_transfer_sub;

typedef struct cli_transfer_args {
    cli_transfer_sub sub;
    char *source_queue;          /* --source QUEUE[/LANE] (malloc'd), NULL when absent */
    const char *source_lane;     /* "" = default */
    char *dest_queue;            /* --dest QUEUE[/LANE] (malloc'd) */
    const char *dest_lane;
    const char *id;              /* --id GUID (checked) */
    const char *token;           /* --intent / --receipt / --witness: "@FILE" or "-" */
    const char *token_out;       /* --token-out FILE (create, receipt, advance, repair) */
    const char *failed_command_id; /* failure --failed-command-id GUID (checked) */
    const char *witness_out;     /* failure --witness-out FILE */
    const char *receipt_out;     /* failure --receipt-out FILE */
    const char *command_id;      /* NULL: a fresh one */
    const char *body;            /* create: BODY */
    const char **headers, **fields; /* create: --header, --field specs in order (owned array) */
    size_t n_headers, n_fields;
    int partition;               /* pending --partition; -1 = the source queue's */
    const char *cursor;          /* pending --cursor (base64), NULL = from the start */
    uint32_t max_items;          /* pending --max; 0 = the daemon's default */
    bool help;                   /* --help was printed: nothing else to do */
} cli_transfer_args;

/* Parses `transfer SUB ARGS...` (argv[0] is SUB) into *o (zeroed first; free with
 * cli_transfer_args_clear). Returns CLI_EXIT_OK or CLI_EXIT_USAGE after reporting the
 * usage error, which names the option or argument at fault. */
int cli_transfer_parse(cli *c, int argc, char **argv, cli_transfer_args *o);
void cli_transfer_args_clear(cli_transfer_args *o);

/* ---- cmd_list.c: ListCatalog pages (database/queue/principal list) and a database's
 * current limits (`database limits` without a limit option). */
int cli_list(cli *c, Keyload__V1__CatalogListKind kind, int argc, char **argv);
int cli_show_db_limits(cli *c, const char *name);
/* "MaxScanRecords N, MaxBatchBytes the cluster's, ..." without a newline. */
void cli_print_db_limits(const Keyload__V1__DatabaseLimits *l);

/* ---- commands */
int cli_cmd_admin(cli *c, int argc, char **argv);
/* admin backup / admin restore (cmd_backup.c); argv after the subcommand. */
int cli_cmd_backup(cli *c, bool restore, int argc, char **argv);
int cli_cmd_database(cli *c, int argc, char **argv);
int cli_cmd_principal(cli *c, int argc, char **argv);
int cli_cmd_queue(cli *c, int argc, char **argv);
int cli_cmd_enqueue(cli *c, int argc, char **argv);
int cli_cmd_receive(cli *c, int argc, char **argv);
int cli_cmd_ack(cli *c, int argc, char **argv);
int cli_cmd_release(cli *c, int argc, char **argv);
int cli_cmd_cluster_status(cli *c, int argc, char **argv);
int cli_cmd_cluster(cli *c, int argc, char **argv);
int cli_cmd_transfer(cli *c, int argc, char **argv);
int cli_cmd_sql(cli *c, int argc, char **argv);

/* Splits QUEUE[/LANE] into queue (malloc'd) and lane (pointer into spec, or "" when
 * absent). false after reporting a usage error. */
bool cli_split_lane(cli *c, const char *spec, char **queue, const char **lane);

#endif
