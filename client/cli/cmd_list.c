/* cmd_list: `keyload database list`, `queue list [TENANT/DB]`, `principal list` (one
 * keyload.v1.ListCatalog page each) and `database limits [TENANT/DB]` without a limit
 * option (the database's current limits, read the same way). */
#include "client/cli/cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAGE_OPTIONS "[--cursor B64] [--max N]"
#define USAGE_DB_LIST "keyload [GLOBAL OPTIONS] database list " PAGE_OPTIONS
#define USAGE_QUEUE_LIST "keyload [GLOBAL OPTIONS] queue list [TENANT/DB] " PAGE_OPTIONS
#define USAGE_PRINCIPAL_LIST "keyload [GLOBAL OPTIONS] principal list " PAGE_OPTIONS
#define PAGE_HELP                                                                            \
    "  one page in name order (--max records, default 100, at most 1000); when more follow,\n" \
    "  the last line is the next cursor to pass to --cursor. Administrators only"

static void print_limit(const char *label, uint64_t v)
{
    if (v == 0)
        printf("%s the cluster's", label);
    else
        printf("%s %" PRIu64, label, v);
}

void cli_print_db_limits(const Keyload__V1__DatabaseLimits *l)
{
    static const Keyload__V1__DatabaseLimits none = KEYLOAD__V1__DATABASE_LIMITS__INIT;
    if (l == NULL)
        l = &none;
    print_limit("MaxScanRecords", l->max_scan_records);
    print_limit(", MaxBatchBytes", l->max_batch_bytes);
    print_limit(", MaxQueryReadBytes", l->max_query_read_bytes);
    if (l->max_queue_transfer_accept_attempts != NULL)
        printf(", MaxQueueTransferAcceptAttempts %" PRIu64, l->max_queue_transfer_accept_attempts->value);
    else
        printf(", MaxQueueTransferAcceptAttempts null");
}

static void print_page(const Keyload__V1__ListCatalogAnswer *a)
{
    for (size_t i = 0; i < a->n_databases; i++) {
        const Keyload__V1__CatalogDatabase *d = a->databases[i];
        printf("%s/%s  id %" PRIu64 "%s  ", d->tenant, d->database, d->database_id,
               d->transfers_paused ? "  transfers paused" : "");
        cli_print_db_limits(d->limits);
        printf("\n");
    }
    for (size_t i = 0; i < a->n_queues; i++) {
        const Keyload__V1__CatalogQueue *q = a->queues[i];
        printf("%s  partition %d  id %" PRIu64 "\n", q->queue, q->partition, q->queue_id);
    }
    for (size_t i = 0; i < a->n_principals; i++) {
        const Keyload__V1__CatalogPrincipal *p = a->principals[i];
        const char *role = p->cluster_admin ? "cluster-admin" : p->database_admin ? "database-admin" : "none";
        printf("%s  role %s%s%s  grants %zu\n", p->principal_id, role, p->database_admin ? " of " : "",
               p->database_admin ? p->database : "", p->n_grants);
    }
    if (a->next_cursor.len > 0) {
        char *cur = kl_base64_encode(a->next_cursor.data, a->next_cursor.len);
        printf("next cursor: %s\n", cur ? cur : "?");
        free(cur);
    }
}

/* Sends one ListCatalog and prints its page (JSON with --json). */
static int list_call(cli *c, Keyload__V1__CatalogListKind kind, const char *database, const char *cursor_b64,
                     uint32_t max)
{
    kl_err err;
    uint8_t *cursor = NULL;
    size_t cursor_len = 0;
    if (cursor_b64 != NULL && kl_base64_decode("--cursor", cursor_b64, &cursor, &cursor_len, &err) != KL_OK)
        return cli_usage(c, "--cursor must be the base64 next cursor a previous page printed");
    kl_client *client;
    if (cli_open(c, &client, &err) != KL_OK) {
        free(cursor);
        return cli_error(c, &err);
    }
    Keyload__V1__ListCatalogAnswer *a = NULL;
    kl_code code = kl_client_list_catalog(client, kind, database, cursor, cursor_len, max, &a, &err);
    free(cursor);
    kl_client_close(client);
    if (code != KL_OK)
        return cli_error(c, &err);
    int rc = CLI_EXIT_OK;
    if (c->json)
        rc = cli_print_json(c, kl_catalog_list_to_json(a, kind, 0));
    else
        print_page(a);
    kl_catalog_list_free(a);
    return rc;
}

int cli_list(cli *c, Keyload__V1__CatalogListKind kind, int argc, char **argv)
{
    bool queues = kind == KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_QUEUES;
    c->usage = queues ? USAGE_QUEUE_LIST "\n" PAGE_HELP
               : kind == KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_PRINCIPALS ? USAGE_PRINCIPAL_LIST "\n" PAGE_HELP
                                                                              : USAGE_DB_LIST "\n" PAGE_HELP;
    cli_args a;
    cli_args_init(&a, argc, argv);
    const char *pos, *name = NULL, *cursor = NULL;
    uint64_t max = 0;
    cli_arg_kind k;
    while ((k = cli_next(c, &a, &pos)) != CLI_END) {
        if (k == CLI_FAILED)
            return CLI_EXIT_USAGE;
        if (k == CLI_POSITIONAL) {
            if (!queues || name != NULL)
                return cli_usage(c, "'%s' is one argument too many", pos);
            name = pos;
        } else if (cli_opt_is(&a, "--help") || cli_opt_is(&a, "-h")) {
            return cli_help(c);
        } else if (cli_opt_is(&a, "--cursor")) {
            if ((cursor = cli_opt_value(c, &a)) == NULL)
                return CLI_EXIT_USAGE;
        } else if (cli_opt_is(&a, "--max")) {
            const char *v = cli_opt_value(c, &a);
            if (v == NULL || !cli_parse_u64(c, "--max", v, KL_CATALOG_LIST_MAX, &max))
                return CLI_EXIT_USAGE;
        } else {
            return cli_unknown_option(c, &a);
        }
    }
    return list_call(c, kind, name, cursor, (uint32_t)max);
}

int cli_show_db_limits(cli *c, const char *name)
{
    kl_err err;
    kl_client *client;
    if (cli_open(c, &client, &err) != KL_OK)
        return cli_error(c, &err);
    const char *db = name != NULL ? name : kl_client_database(client);
    Keyload__V1__ListCatalogAnswer *a = NULL;
    kl_code code = kl_client_list_catalog(client, KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_DATABASES, db,
                                          NULL, 0, 1, &a, &err);
    kl_client_close(client);
    if (code == KL_OK && a->n_databases != 1) {
        kl_catalog_list_free(a);
        code = kl_fail(&err, KL_INTERNAL, "answer", "the answer does not hold the one database asked for");
    }
    if (code != KL_OK)
        return cli_error(c, &err);
    int rc = CLI_EXIT_OK;
    const Keyload__V1__CatalogDatabase *d = a->databases[0];
    if (c->json) {
        rc = cli_print_json(c, kl_catalog_list_to_json(a, KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_DATABASES, 0));
    } else {
        printf("limits of %s/%s: ", d->tenant, d->database);
        cli_print_db_limits(d->limits);
        printf("; catalog version %" PRIu64 "\n", a->catalog_version);
    }
    kl_catalog_list_free(a);
    return rc;
}
