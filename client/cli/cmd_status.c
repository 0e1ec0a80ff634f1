/* cmd_status: `keyload cluster-status [--json] [--member-timeout MS]`. Asks every member of
 * the cluster file (--cluster) for its MemberStatus through kl_cluster_status_to_json, each
 * member bounded by a short timeout (default 500 ms, and never more than --timeout), so that
 * a member that is down costs little. --json prints that canonical object as is (keyload.h
 * documents its keys; keyload-mcp's cluster_status answers the same); the human report is
 * printed from the same object: per partition, the leader (null when none answered as
 * leader) with its term, commit index, applied index and catalog version, then each member:
 * answered or not ("up"), role, term, indexes, catalog version. Exit status 0 whenever the
 * report is printed, even with members down; 1 when the cluster file cannot be read.
 *
 * `--wait-ready NODE [--wait-ms MS]` is the readiness check a rolling restart awaits between
 * members: it polls the same report until NODE answers, follows (or is) its partition's
 * answering leader in the leader's term, and has applied at least the commit index that
 * leader reported at the first poll after NODE answered, i.e. NODE caught up with where its
 * partition was when it came back. Exit 0 then; 1 with UNAVAILABLE (detail "wait_ready",
 * retryable: run it again) when MS (default 60000) passed first. Only a leader knows what
 * "caught up" means, which is why a member cannot signal it to its service manager itself. */
#include "client/cli/cli.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define USAGE_STATUS "keyload [GLOBAL OPTIONS] cluster-status [--json] [--member-timeout MS]\n" \
                     "                 [--wait-ready NODE [--wait-ms MS]]\n" \
                     "  asks every member of the cluster file for its role, term and indexes;\n" \
                     "  --wait-ready: wait until NODE answers, follows its partition's leader and\n" \
                     "  has applied what that leader had committed when NODE came back (exit 0),\n" \
                     "  or MS (default 60000) passed (exit 1, UNAVAILABLE wait_ready)"

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
        const char *place = str_or(m, "configuration", "voter");
        if (strcmp(place, "voter") != 0) /* a learner, leaving, or no longer in the configuration */
            printf("  [%s]", strcmp(place, "none") == 0 ? "not in the configuration" : place);
        if (!up) { /* "error" is "CODE: message": the code is enough in the table */
            const char *e = str_or(m, "error", "?");
            printf("  (%.*s)", (int)strcspn(e, ":"), e);
        }
        printf("\n");
    }
}

/* A report number (integer, or text above 2^63-1) as *out; false for null or absent. */
static bool u64_of(const json_t *o, const char *key, uint64_t *out)
{
    const json_t *v = json_object_get(o, key);
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = (uint64_t)json_integer_value(v);
        return true;
    }
    if (json_is_string(v)) {
        char *end;
        unsigned long long x = strtoull(json_string_value(v), &end, 10);
        if (*end == '\0') {
            *out = x;
            return true;
        }
    }
    return false;
}

/* NODE's member object and its partition in a report, or NULL. */
static const json_t *find_member(const json_t *root, const char *node, const json_t **part)
{
    size_t i, j;
    const json_t *p, *m;
    json_array_foreach(json_object_get(root, "partitions"), i, p) {
        json_array_foreach(json_object_get(p, "members"), j, m) {
            if (strcmp(str_or(m, "node", ""), node) == 0) {
                *part = p;
                return m;
            }
        }
    }
    return NULL;
}

typedef struct wait_state {
    bool have_target;   /* NODE answered once: target is its leader's commit index then */
    uint64_t target;
    uint64_t applied;   /* NODE's applied index at the last poll that answered */
} wait_state;

/* One poll of --wait-ready: 1 ready, 0 not yet, -1 NODE is not in the cluster file. */
static int ready_once(const json_t *root, const char *node, wait_state *w)
{
    const json_t *part = NULL;
    const json_t *m = find_member(root, node, &part);
    if (m == NULL)
        return -1;
    uint64_t leader_term, leader_commit, term, applied;
    if (!json_is_true(json_object_get(m, "up")) || json_is_null(json_object_get(part, "leader")) ||
        !u64_of(part, "term", &leader_term) || !u64_of(part, "commit_index", &leader_commit) ||
        !u64_of(m, "term", &term) || !u64_of(m, "applied_index", &applied))
        return 0;
    w->applied = applied;
    if (!w->have_target) {
        w->have_target = true;
        w->target = leader_commit;
    }
    const char *role = str_or(m, "role", "");
    bool in_term = term == leader_term && (strcmp(role, "follower") == 0 || strcmp(role, "leader") == 0);
    return in_term && applied >= w->target ? 1 : 0;
}

static int wait_ready(cli *c, const char *node, int64_t wait_ms, int member_timeout)
{
    kl_err err;
    kl_err_clear(&err);
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    wait_state w = {0};
    for (;;) {
        char *report;
        if (kl_cluster_status_to_json(c->cluster, member_timeout, 0, &report, &err) != KL_OK)
            return cli_error(c, &err);
        json_t *root = json_loads(report, 0, NULL);
        free(report);
        if (root == NULL) {
            kl_fail(&err, KL_INTERNAL, "oom", "out of memory while reading the report");
            return cli_error(c, &err);
        }
        int r = ready_once(root, node, &w);
        json_decref(root);
        if (r < 0)
            return cli_usage(c, "--wait-ready: no node %s in the cluster file or its partition's configuration", node);
        if (r > 0) {
            if (c->json) {
                char buf[160];
                snprintf(buf, sizeof buf, "{\"node\":\"%s\",\"ready\":true,\"applied_index\":%llu,\"target\":%llu}",
                         node, (unsigned long long)w.applied, (unsigned long long)w.target);
                return cli_print_json(c, strdup(buf));
            }
            printf("%s ready: applied index %llu >= %llu, its leader's commit index when it came back\n", node,
                   (unsigned long long)w.applied, (unsigned long long)w.target);
            return CLI_EXIT_OK;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        int64_t spent = (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
        if (spent >= wait_ms) {
            if (w.have_target)
                kl_fail(&err, KL_UNAVAILABLE, "wait_ready",
                        "%s is not ready after %lld ms (--wait-ms): applied index %llu, target %llu", node,
                        (long long)wait_ms, (unsigned long long)w.applied, (unsigned long long)w.target);
            else
                kl_fail(&err, KL_UNAVAILABLE, "wait_ready",
                        "%s is not ready after %lld ms (--wait-ms): it or its partition's leader did not answer",
                        node, (long long)wait_ms);
            return cli_error(c, &err);
        }
        struct timespec nap = {.tv_nsec = 200 * 1000000L};
        nanosleep(&nap, NULL);
    }
}

int cli_cmd_cluster_status(cli *c, int argc, char **argv)
{
    c->usage = USAGE_STATUS;
    int64_t member_timeout = KL_CLUSTER_STATUS_MEMBER_TIMEOUT_MS;
    int64_t wait_ms = 60000;
    const char *wait_node = NULL;
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
        if (cli_opt_is(&a, "--wait-ready")) {
            if ((wait_node = cli_opt_value(c, &a)) == NULL)
                return CLI_EXIT_USAGE;
            continue;
        }
        bool is_wait = cli_opt_is(&a, "--wait-ms");
        if (!is_wait && !cli_opt_is(&a, "--member-timeout"))
            return cli_unknown_option(c, &a);
        const char *v = cli_opt_value(c, &a);
        if (v == NULL || !cli_parse_i64(c, is_wait ? "--wait-ms" : "--member-timeout", v, 1,
                                        is_wait ? 3600000 : 600000, is_wait ? &wait_ms : &member_timeout))
            return CLI_EXIT_USAGE;
    }
    if (c->timeout_ms > 0 && member_timeout > c->timeout_ms)
        member_timeout = c->timeout_ms;
    if (wait_node != NULL)
        return wait_ready(c, wait_node, wait_ms, (int)member_timeout);

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
