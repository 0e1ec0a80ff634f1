/* cmd_database: `keyload database create [TENANT/DB]` (a catalog change on partition 0). */
#include "client/cli/cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define USAGE_DATABASE                                                                         \
    "keyload [GLOBAL OPTIONS] database create [TENANT/DB] [--max-scan-records N]\n"           \
    "         [--max-batch-bytes N] [--max-query-read-bytes N] [--command-id GUID]\n"          \
    "  TENANT/DB defaults to --database; limits default to the cluster file's"

static int database_create(cli *c, cli_args *a)
{
    const char *name = NULL, *command_id = NULL, *pos;
    kl_database_limits lim = {0};
    cli_arg_kind k;
    while ((k = cli_next(c, a, &pos)) != CLI_END) {
        if (k == CLI_FAILED)
            return CLI_EXIT_USAGE;
        if (k == CLI_POSITIONAL) {
            if (name != NULL)
                return cli_usage(c, "database create takes one TENANT/DB");
            name = pos;
            continue;
        }
        if (cli_opt_is(a, "--help") || cli_opt_is(a, "-h"))
            return cli_help(c);
        const char *v = cli_opt_value(c, a);
        if (v == NULL)
            return CLI_EXIT_USAGE;
        if (cli_opt_is(a, "--max-scan-records")) {
            if (!cli_parse_u64(c, "--max-scan-records", v, UINT64_MAX, &lim.max_scan_records))
                return CLI_EXIT_USAGE;
        } else if (cli_opt_is(a, "--max-batch-bytes")) {
            if (!cli_parse_u64(c, "--max-batch-bytes", v, UINT64_MAX, &lim.max_batch_bytes))
                return CLI_EXIT_USAGE;
        } else if (cli_opt_is(a, "--max-query-read-bytes")) {
            if (!cli_parse_u64(c, "--max-query-read-bytes", v, UINT64_MAX, &lim.max_query_read_bytes))
                return CLI_EXIT_USAGE;
        } else if (cli_opt_is(a, "--command-id")) {
            command_id = v;
        } else {
            return cli_unknown_option(c, a);
        }
    }
    if (name == NULL)
        name = c->database;
    kl_batch *b;
    int rc = cli_new_batch(c, command_id, &b);
    if (rc != CLI_EXIT_OK)
        return rc;
    kl_err err;
    if (kl_batch_create_database(b, name, &lim, &err) != KL_OK) {
        kl_batch_free(b);
        return cli_error(c, &err);
    }
    kl_receipt *r = NULL;
    const Keyload__V1__MutationResult *res;
    rc = cli_send_result(c, b, KEYLOAD__V1__MUTATION_RESULT__KIND_DATABASE_CREATED, &r, &res);
    kl_batch_free(b);
    if (rc == CLI_EXIT_OK && res != NULL) {
        char tag[96];
        printf("created database %s, database id %" PRIu64 ", catalog version %" PRIu64 " %s\n", name,
               res->database_created->database_id, res->database_created->catalog_version,
               cli_receipt_tag(r, tag, sizeof tag));
    }
    kl_receipt_free(r);
    return rc;
}

int cli_cmd_database(cli *c, int argc, char **argv)
{
    c->usage = USAGE_DATABASE;
    if (argc < 1)
        return cli_usage(c, "database needs a subcommand: create");
    cli_args a;
    cli_args_init(&a, argc - 1, argv + 1);
    if (strcmp(argv[0], "create") == 0)
        return database_create(c, &a);
    if (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)
        return cli_help(c);
    return cli_usage(c, "unknown database subcommand (create)");
}
