/* cmd_database: `keyload database create [TENANT/DB]` and `keyload database limits`
 * (catalog changes on partition 0; both take the same limit options), `database list`
 * and `database limits` without options (reads, cmd_list.c). */
#include "client/cli/cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define LIMIT_OPTIONS                                                                          \
    "[--max-scan-records N] [--max-batch-bytes N]\n"                                           \
    "         [--max-query-read-bytes N] [--max-transfer-accept-attempts N|null]"
#define USAGE_CREATE                                                                           \
    "keyload [GLOBAL OPTIONS] database create [TENANT/DB] " LIMIT_OPTIONS "\n"                 \
    "         [--command-id GUID]\n"                                                           \
    "  TENANT/DB defaults to --database; limits default to the cluster file's"
#define USAGE_LIMITS                                                                           \
    "keyload [GLOBAL OPTIONS] database limits [TENANT/DB] " LIMIT_OPTIONS "\n"                 \
    "         [--command-id GUID]\n"                                                           \
    "  without a limit option prints the database's current limits; with some, changes\n"     \
    "  exactly those and leaves the others (merged by the daemon, so a concurrent change of\n" \
    "  another limit is kept). 0 means the cluster file's value, null no accept limit; each\n" \
    "  may only tighten the cluster's. TENANT/DB defaults to --database"
#define USAGE_LIST "keyload [GLOBAL OPTIONS] database list [--cursor B64] [--max N]"
#define USAGE_DATABASE USAGE_CREATE "\n       " USAGE_LIMITS "\n       " USAGE_LIST

/* One limit option: its KL_DB_FIELD_* bit when applied, 0 not a limit option, -1 usage
 * error reported. */
static int limit_option(cli *c, cli_args *a, kl_database_limits *lim)
{
    static const struct {
        const char *name;
        size_t offset;
        int bit;
    } plain[] = {
        {"--max-scan-records", offsetof(kl_database_limits, max_scan_records), KL_DB_FIELD_SCAN_RECORDS},
        {"--max-batch-bytes", offsetof(kl_database_limits, max_batch_bytes), KL_DB_FIELD_BATCH_BYTES},
        {"--max-query-read-bytes", offsetof(kl_database_limits, max_query_read_bytes),
         KL_DB_FIELD_QUERY_READ_BYTES},
    };
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        if (!cli_opt_is(a, plain[i].name))
            continue;
        const char *v = cli_opt_value(c, a);
        uint64_t *dst = (uint64_t *)((char *)lim + plain[i].offset);
        return v != NULL && cli_parse_u64(c, plain[i].name, v, UINT64_MAX, dst) ? plain[i].bit : -1;
    }
    if (!cli_opt_is(a, "--max-transfer-accept-attempts"))
        return 0;
    const char *v = cli_opt_value(c, a);
    if (v == NULL)
        return -1;
    if (strcmp(v, "null") == 0) {
        lim->has_max_queue_transfer_accept_attempts = false;
        lim->max_queue_transfer_accept_attempts = 0;
        return KL_DB_FIELD_ACCEPT_ATTEMPTS;
    }
    uint64_t n;
    if (!cli_parse_u64(c, "--max-transfer-accept-attempts", v, UINT64_MAX, &n))
        return -1;
    if (n == 0) {
        cli_usage(c, "--max-transfer-accept-attempts must be positive, or null");
        return -1;
    }
    lim->has_max_queue_transfer_accept_attempts = true;
    lim->max_queue_transfer_accept_attempts = n;
    return KL_DB_FIELD_ACCEPT_ATTEMPTS;
}

int cli_database_parse(cli *c, const char *sub, int argc, char **argv, cli_database_args *o)
{
    memset(o, 0, sizeof *o);
    cli_args a;
    cli_args_init(&a, argc, argv);
    const char *pos;
    cli_arg_kind k;
    while ((k = cli_next(c, &a, &pos)) != CLI_END) {
        if (k == CLI_FAILED)
            return CLI_EXIT_USAGE;
        if (k == CLI_POSITIONAL) {
            if (o->name != NULL)
                return cli_usage(c, "database %s takes one TENANT/DB; '%s' is one too many", sub, pos);
            o->name = pos;
            continue;
        }
        if (cli_opt_is(&a, "--help") || cli_opt_is(&a, "-h")) {
            o->help = true;
            return cli_help(c);
        }
        int l = limit_option(c, &a, &o->limits);
        if (l < 0)
            return CLI_EXIT_USAGE;
        if (l > 0) {
            o->any_limit = true;
            o->fields |= (uint32_t)l;
        } else if (cli_opt_is(&a, "--command-id")) {
            if ((o->command_id = cli_opt_value(c, &a)) == NULL)
                return CLI_EXIT_USAGE;
        } else {
            return cli_unknown_option(c, &a);
        }
    }
    return CLI_EXIT_OK;
}

static int database_create(cli *c, int argc, char **argv)
{
    c->usage = USAGE_CREATE;
    cli_database_args o;
    int rc = cli_database_parse(c, "create", argc, argv, &o);
    if (rc != CLI_EXIT_OK || o.help)
        return rc;
    const char *name = o.name ? o.name : c->database;
    kl_batch *b;
    if ((rc = cli_new_batch(c, o.command_id, &b)) != CLI_EXIT_OK)
        return rc;
    kl_err err;
    if (kl_batch_create_database(b, name, &o.limits, &err) != KL_OK) {
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

static void print_limit(const char *label, uint64_t v)
{
    if (v == 0)
        printf("%s the cluster's", label);
    else
        printf("%s %" PRIu64, label, v);
}

static int database_limits(cli *c, int argc, char **argv)
{
    c->usage = USAGE_LIMITS;
    cli_database_args o;
    int rc = cli_database_parse(c, "limits", argc, argv, &o);
    if (rc != CLI_EXIT_OK || o.help)
        return rc;
    if (!o.any_limit) {
        if (o.command_id != NULL)
            return cli_usage(c, "--command-id needs a limit option to change (without one, the "
                                "current limits are printed)");
        return cli_show_db_limits(c, o.name);
    }
    if (o.name != NULL)
        c->database = o.name; /* the client opens on the database whose limits change */
    char fresh[KL_COMMAND_ID_TEXT_LEN + 1];
    const char *cmd = o.command_id;
    if (cmd == NULL) {
        kl_command_id_new(fresh);
        cmd = fresh;
    }
    kl_err err;
    kl_client *client;
    if (cli_open(c, &client, &err) != KL_OK)
        return cli_error(c, &err);
    kl_limits_result res;
    kl_receipt *r = NULL;
    kl_code code = kl_client_change_database_limits(client, cmd, &o.limits, o.fields, &res, &r, &err);
    if (code != KL_OK) {
        kl_client_close(client);
        return cli_error(c, &err);
    }
    if (c->json) {
        rc = cli_print_json(c, kl_receipt_to_json(r->decoded, 0));
    } else {
        char tag[96];
        printf("limits of %s: ", kl_client_database(client));
        print_limit("MaxScanRecords", res.limits.max_scan_records);
        print_limit(", MaxBatchBytes", res.limits.max_batch_bytes);
        print_limit(", MaxQueryReadBytes", res.limits.max_query_read_bytes);
        if (res.limits.has_max_queue_transfer_accept_attempts)
            printf(", MaxQueueTransferAcceptAttempts %" PRIu64,
                   res.limits.max_queue_transfer_accept_attempts);
        else
            printf(", MaxQueueTransferAcceptAttempts null");
        printf("; catalog version %" PRIu64 " %s\n", res.catalog_version,
               cli_receipt_tag(r, tag, sizeof tag));
    }
    kl_receipt_free(r);
    kl_client_close(client);
    return rc;
}

int cli_cmd_database(cli *c, int argc, char **argv)
{
    c->usage = USAGE_DATABASE;
    if (argc < 1)
        return cli_usage(c, "database needs a subcommand: create, limits or list");
    if (strcmp(argv[0], "create") == 0)
        return database_create(c, argc - 1, argv + 1);
    if (strcmp(argv[0], "limits") == 0)
        return database_limits(c, argc - 1, argv + 1);
    if (strcmp(argv[0], "list") == 0)
        return cli_list(c, KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_DATABASES, argc - 1, argv + 1);
    if (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)
        return cli_help(c);
    return cli_usage(c, "unknown database subcommand '%s' (create, limits, list)", argv[0]);
}
