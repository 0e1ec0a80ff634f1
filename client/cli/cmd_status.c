/* cmd_status: `keyload cluster-status [--json] [--member-timeout MS]`. Reads the cluster
 * file (--cluster) and asks every member for its MemberStatus (kl_member_status), one at a
 * time, each bounded by a short timeout (default 500 ms, and never more than --timeout),
 * so that a member that is down costs little. Prints, per partition, the leader (the member
 * that answered as leader, the highest term winning; null when none did) with its term,
 * commit index, applied index and catalog version, then each member: answered or not
 * ("up"), role, term, indexes, catalog version. Without a leader the partition's numbers
 * come from the answering member with the highest term and commit index (null when none
 * answered). Exit status 0 whenever the report is printed, even with members down; 1 when
 * the cluster file cannot be read.
 *
 * --json prints one object:
 *   {"cluster":NAME,"partitions":[{"id":0,"leader":"p0m1"|null,"term":..,"commit_index":..,
 *     "applied_index":..,"catalog_version":..,"serving":bool,"members":[{"node":"p0m1",
 *     "client":URL,"up":true,"role":"leader","term":..,"commit_index":..,"applied_index":..,
 *     "last_index":..,"serving":bool,"catalog_version":..,"error":null}]}]}
 * A member that did not answer has "up":false, null numbers and role, and "error" holding
 * the status code and message. */
#include "client/cli/cli.h"
#include "common/cluster.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USAGE_STATUS "keyload [GLOBAL OPTIONS] cluster-status [--json] [--member-timeout MS]\n" \
                     "  asks every member of the cluster file for its role, term and indexes"
#define STATUS_MEMBER_TIMEOUT_MS 500

typedef struct member_view {
    char node[32];
    const kl_member *m;
    Keyload__V1__MemberStatusAnswer *a;   /* NULL: did not answer */
    kl_err err;
} member_view;

/* The member whose numbers stand for the partition: the answering leader with the highest
 * term, else the answering member with the highest (term, commit index); -1 when none. */
static int representative(const member_view *v, int n, bool *is_leader)
{
    int best = -1;
    *is_leader = false;
    for (int i = 0; i < n; i++) {
        const Keyload__V1__MemberStatusAnswer *a = v[i].a;
        if (a == NULL)
            continue;
        bool leader = a->role != NULL && strcmp(a->role, "leader") == 0;
        if (best < 0 || (leader && !*is_leader)) {
            best = i;
            *is_leader = leader;
            continue;
        }
        if (leader != *is_leader)
            continue;
        const Keyload__V1__MemberStatusAnswer *b = v[best].a;
        if (a->term > b->term || (a->term == b->term && a->commit_index > b->commit_index))
            best = i;
    }
    return best;
}

static json_t *u64_or_null(bool have, uint64_t v)
{
    return have ? json_integer((json_int_t)v) : json_null();
}

static json_t *member_json(const member_view *v)
{
    const Keyload__V1__MemberStatusAnswer *a = v->a;
    json_t *o = json_object();
    json_object_set_new(o, "node", json_string(v->node));
    json_object_set_new(o, "client", json_string(v->m->client_url));
    json_object_set_new(o, "up", json_boolean(a != NULL));
    json_object_set_new(o, "role", a && a->role ? json_string(a->role) : json_null());
    json_object_set_new(o, "term", u64_or_null(a != NULL, a ? a->term : 0));
    json_object_set_new(o, "commit_index", u64_or_null(a != NULL, a ? a->commit_index : 0));
    json_object_set_new(o, "applied_index", u64_or_null(a != NULL, a ? a->applied_index : 0));
    json_object_set_new(o, "last_index", u64_or_null(a != NULL, a ? a->last_index : 0));
    json_object_set_new(o, "serving", a ? json_boolean(a->serving) : json_null());
    json_object_set_new(o, "catalog_version", u64_or_null(a != NULL, a ? a->catalog_version : 0));
    if (a == NULL) {
        char text[KL_ERR_MESSAGE_MAX + 32];
        snprintf(text, sizeof text, "%s: %s", kl_code_name(v->err.code), v->err.message);
        json_object_set_new(o, "error", json_string(text));
    } else {
        json_object_set_new(o, "error", json_null());
    }
    return o;
}

static json_t *partition_json(const kl_partition *p, const member_view *v, int n)
{
    bool is_leader;
    int r = representative(v, n, &is_leader);
    const Keyload__V1__MemberStatusAnswer *a = r >= 0 ? v[r].a : NULL;
    json_t *o = json_object();
    json_object_set_new(o, "id", json_integer(p->id));
    json_object_set_new(o, "leader", is_leader ? json_string(v[r].node) : json_null());
    json_object_set_new(o, "term", u64_or_null(a != NULL, a ? a->term : 0));
    json_object_set_new(o, "commit_index", u64_or_null(a != NULL, a ? a->commit_index : 0));
    json_object_set_new(o, "applied_index", u64_or_null(a != NULL, a ? a->applied_index : 0));
    json_object_set_new(o, "catalog_version", u64_or_null(a != NULL, a ? a->catalog_version : 0));
    json_object_set_new(o, "serving", json_boolean(is_leader && a->serving));
    json_t *members = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(members, member_json(&v[i]));
    json_object_set_new(o, "members", members);
    return o;
}

static void num_or_dash(char *buf, size_t cap, bool have, uint64_t v)
{
    if (have)
        snprintf(buf, cap, "%llu", (unsigned long long)v);
    else
        snprintf(buf, cap, "-");
}

static void print_partition(const kl_partition *p, const member_view *v, int n)
{
    bool is_leader;
    int r = representative(v, n, &is_leader);
    const Keyload__V1__MemberStatusAnswer *a = r >= 0 ? v[r].a : NULL;
    char term[24], commit[24], applied[24], catalog[24];
    num_or_dash(term, sizeof term, a != NULL, a ? a->term : 0);
    num_or_dash(commit, sizeof commit, a != NULL, a ? a->commit_index : 0);
    num_or_dash(applied, sizeof applied, a != NULL, a ? a->applied_index : 0);
    num_or_dash(catalog, sizeof catalog, a != NULL, a ? a->catalog_version : 0);
    printf("partition %d: leader %s, term %s, commit %s, applied %s, catalog version %s\n", p->id,
           is_leader ? v[r].node : "none", term, commit, applied, catalog);
    printf("  %-8s %-4s %-13s %-6s %-8s %-8s %-8s %s\n", "NODE", "UP", "ROLE", "TERM", "COMMIT",
           "APPLIED", "CATALOG", "CLIENT");
    for (int i = 0; i < n; i++) {
        const Keyload__V1__MemberStatusAnswer *m = v[i].a;
        num_or_dash(term, sizeof term, m != NULL, m ? m->term : 0);
        num_or_dash(commit, sizeof commit, m != NULL, m ? m->commit_index : 0);
        num_or_dash(applied, sizeof applied, m != NULL, m ? m->applied_index : 0);
        num_or_dash(catalog, sizeof catalog, m != NULL, m ? m->catalog_version : 0);
        printf("  %-8s %-4s %-13s %-6s %-8s %-8s %-8s %s", v[i].node, m ? "yes" : "no",
               m && m->role ? m->role : "-", term, commit, applied, catalog, v[i].m->client_url);
        if (m == NULL)
            printf("  (%s)", kl_code_name(v[i].err.code));
        printf("\n");
    }
}

int cli_cmd_cluster_status(cli *c, int argc, char **argv)
{
    c->usage = USAGE_STATUS;
    int64_t member_timeout = STATUS_MEMBER_TIMEOUT_MS;
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

    static kl_cluster cluster;
    kl_err err;
    kl_err_clear(&err);
    if (kl_cluster_load(c->cluster, NULL, &cluster, &err) != KL_OK)
        return cli_error(c, &err);

    json_t *root = json_object();
    json_t *parts = json_array();
    json_object_set_new(root, "cluster", json_string(cluster.name));
    json_object_set_new(root, "partitions", parts);
    if (!c->json)
        printf("cluster %s\n", cluster.name);
    for (int pi = 0; pi < cluster.partition_count; pi++) {
        const kl_partition *p = &cluster.partitions[pi];
        member_view v[KL_CLUSTER_MAX_MEMBERS];
        memset(v, 0, sizeof v);
        for (int i = 0; i < p->member_count; i++) {
            v[i].m = &p->members[i];
            snprintf(v[i].node, sizeof v[i].node, "p%dm%d", p->id, p->members[i].id);
            kl_err_clear(&v[i].err);
            if (kl_member_status(v[i].m->client_url, (int)member_timeout, &v[i].a, &v[i].err) != KL_OK)
                v[i].a = NULL;
        }
        if (c->json)
            json_array_append_new(parts, partition_json(p, v, p->member_count));
        else
            print_partition(p, v, p->member_count);
        for (int i = 0; i < p->member_count; i++)
            kl_member_status_free(v[i].a);
    }
    int rc = CLI_EXIT_OK;
    if (c->json)
        rc = cli_print_json(c, json_dumps(root, JSON_COMPACT));
    json_decref(root);
    return rc;
}
