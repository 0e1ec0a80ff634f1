/* cmd_status: `keyload cluster-status [--json] [--member-timeout MS]`. Asks every member of
 * the cluster file (--cluster) for its MemberStatus through kl_cluster_status_to_json, each
 * member bounded by a short timeout (default 500 ms, and never more than --timeout), so that
 * a member that is down costs little. --json prints that canonical object as is (keyload.h
 * documents its keys; keyload-mcp's cluster_status answers the same); the human report is
 * printed from the same object: per partition, the leader (null when none answered as
 * leader) with its term, commit index, applied index and catalog version, then each member:
 * answered or not ("up"), role, term, indexes, catalog version. Exit status 0 whenever the
 * report is printed, even with members down; 1 when the cluster file cannot be read. */
#include "client/cli/cli.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USAGE_STATUS "keyload [GLOBAL OPTIONS] cluster-status [--json] [--member-timeout MS]\n" \
                     "  asks every member of the cluster file for its role, term and indexes"

/* A number of the report, or "-" for null. */
static const char *num(char *buf, size_t cap, const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    if (json_is_integer(v))
        snprintf(buf, cap, "%lld", (long long)json_integer_value(v));
    else if (json_is_string(v)) /* a uint64 above 2^63-1 (canonical JSON writes it as text) */
        snprintf(buf, cap, "%s", json_string_value(v));
    else
        snprintf(buf, cap, "-");
    return buf;
}

static const char *str_or(const json_t *o, const char *key, const char *dflt)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s != NULL ? s : dflt;
}

static void print_partition(const json_t *p)
{
    char term[24], commit[24], applied[24], catalog[24];
    printf("partition %lld: leader %s, term %s, commit %s, applied %s, catalog version %s\n",
           (long long)json_integer_value(json_object_get(p, "id")), str_or(p, "leader", "none"),
           num(term, sizeof term, p, "term"), num(commit, sizeof commit, p, "commit_index"),
           num(applied, sizeof applied, p, "applied_index"),
           num(catalog, sizeof catalog, p, "catalog_version"));
    printf("  %-8s %-4s %-13s %-6s %-8s %-8s %-8s %s\n", "NODE", "UP", "ROLE", "TERM", "COMMIT",
           "APPLIED", "CATALOG", "CLIENT");
    size_t i;
    const json_t *m;
    json_array_foreach(json_object_get(p, "members"), i, m) {
        bool up = json_is_true(json_object_get(m, "up"));
        printf("  %-8s %-4s %-13s %-6s %-8s %-8s %-8s %s", str_or(m, "node", "?"), up ? "yes" : "no",
               str_or(m, "role", "-"), num(term, sizeof term, m, "term"),
               num(commit, sizeof commit, m, "commit_index"),
               num(applied, sizeof applied, m, "applied_index"),
               num(catalog, sizeof catalog, m, "catalog_version"), str_or(m, "client", "?"));
        if (!up) { /* "error" is "CODE: message": the code is enough in the table */
            const char *e = str_or(m, "error", "?");
            printf("  (%.*s)", (int)strcspn(e, ":"), e);
        }
        printf("\n");
    }
}

int cli_cmd_cluster_status(cli *c, int argc, char **argv)
{
    c->usage = USAGE_STATUS;
    int64_t member_timeout = KL_CLUSTER_STATUS_MEMBER_TIMEOUT_MS;
    const char *pos;
    cli_args a;
    cli_args_init(&a, argc, argv);
    cli_arg_kind k;
    while ((k = cli_next(c, &a, &pos)) != CLI_END) {
        if (k == CLI_FAILED)
            return CLI_EXIT_USAGE;
        if (k == CLI_POSITIONAL)
            return cli_usage(c, "cluster-status takes no arguments");
        if (cli_opt_is(&a, "--help") || cli_opt_is(&a, "-h"))
            return cli_help(c);
        if (!cli_opt_is(&a, "--member-timeout"))
            return cli_unknown_option(c, &a);
        const char *v = cli_opt_value(c, &a);
        if (v == NULL || !cli_parse_i64(c, "--member-timeout", v, 1, 600000, &member_timeout))
            return CLI_EXIT_USAGE;
    }
    if (c->timeout_ms > 0 && member_timeout > c->timeout_ms)
        member_timeout = c->timeout_ms;

    kl_err err;
    kl_err_clear(&err);
    char *report;
    if (kl_cluster_status_to_json(c->cluster, (int)member_timeout, 0, &report, &err) != KL_OK)
        return cli_error(c, &err);
    if (c->json)
        return cli_print_json(c, report);
    json_t *root = json_loads(report, 0, NULL);
    free(report);
    if (root == NULL) {
        kl_fail(&err, KL_INTERNAL, "oom", "out of memory while printing the report");
        return cli_error(c, &err);
    }
    printf("cluster %s\n", str_or(root, "cluster", "?"));
    size_t i;
    const json_t *p;
    json_array_foreach(json_object_get(root, "partitions"), i, p)
        print_partition(p);
    json_decref(root);
    return CLI_EXIT_OK;
}
