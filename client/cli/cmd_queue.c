/* cmd_queue: `keyload queue create | delete | stats | list` (list: cmd_list.c). */
#include "client/cli/cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USAGE_QUEUE "keyload [GLOBAL OPTIONS] queue create|delete|stats NAME [OPTIONS] | list [TENANT/DB]"
#define USAGE_CREATE                                                                          \
    "keyload [GLOBAL OPTIONS] queue create NAME [--partition P] [--max-messages N]\n"        \
    "         [--max-bytes N] [--max-deliveries N] [--dlq NAME] [--command-id GUID]"
#define USAGE_DELETE "keyload [GLOBAL OPTIONS] queue delete NAME [--command-id GUID]"
#define USAGE_STATS "keyload [GLOBAL OPTIONS] queue stats NAME"

static int queue_create(cli *c, cli_args *a)
{
    c->usage = USAGE_CREATE;
    const char *name = NULL, *command_id = NULL, *pos;
    kl_queue_options opts = {0};
    bool partition_given = false;
    cli_arg_kind k;
    while ((k = cli_next(c, a, &pos)) != CLI_END) {
        if (k == CLI_FAILED)
            return CLI_EXIT_USAGE;
        if (k == CLI_POSITIONAL) {
            if (name != NULL)
                return cli_usage(c, "queue create takes one NAME");
            name = pos;
            continue;
        }
        if (cli_opt_is(a, "--help") || cli_opt_is(a, "-h"))
            return cli_help(c);
        const char *v = cli_opt_value(c, a);
        if (v == NULL)
            return CLI_EXIT_USAGE;
        uint64_t n;
        if (cli_opt_is(a, "--partition")) {
            if (!cli_parse_u64(c, "--partition", v, INT32_MAX, &n))
                return CLI_EXIT_USAGE;
            opts.partition = (int32_t)n;
            opts.pin_partition = true;
            partition_given = true;
        } else if (cli_opt_is(a, "--max-messages")) {
            if (!cli_parse_u64(c, "--max-messages", v, UINT64_MAX, &opts.max_messages))
                return CLI_EXIT_USAGE;
        } else if (cli_opt_is(a, "--max-bytes")) {
            if (!cli_parse_u64(c, "--max-bytes", v, UINT64_MAX, &opts.max_bytes))
                return CLI_EXIT_USAGE;
        } else if (cli_opt_is(a, "--max-deliveries")) {
            if (!cli_parse_u64(c, "--max-deliveries", v, UINT32_MAX, &n))
                return CLI_EXIT_USAGE;
            opts.max_deliveries = (uint32_t)n;
        } else if (cli_opt_is(a, "--dlq")) {
            opts.dead_letter_queue = v;
        } else if (cli_opt_is(a, "--command-id")) {
            command_id = v;
        } else {
            return cli_unknown_option(c, a);
        }
    }
    if (name == NULL)
        return cli_usage(c, "queue create needs a NAME");

    kl_batch *b;
    int rc = cli_new_batch(c, command_id, &b);
    if (rc != CLI_EXIT_OK)
        return rc;
    kl_err err;
    if (kl_batch_create_queue(b, name, &opts, &err) != KL_OK) {
        kl_batch_free(b);
        return cli_error(c, &err);
    }
    kl_receipt *r = NULL;
    const Keyload__V1__MutationResult *res;
    rc = cli_send_result(c, b, KEYLOAD__V1__MUTATION_RESULT__KIND_QUEUE_CREATED, &r, &res);
    kl_batch_free(b);
    if (rc == CLI_EXIT_OK && res != NULL) {
        char tag[96];
        printf("created queue %s on partition %d%s, queue id %" PRIu64 " %s\n", name,
               res->queue_created->partition,
               partition_given ? "" : " (picked: no --partition given)",
               res->queue_created->queue_id, cli_receipt_tag(r, tag, sizeof tag));
    }
    kl_receipt_free(r);
    return rc;
}

static int queue_delete(cli *c, cli_args *a)
{
    c->usage = USAGE_DELETE;
    const char *name = NULL, *command_id = NULL, *pos;
    cli_arg_kind k;
    while ((k = cli_next(c, a, &pos)) != CLI_END) {
        if (k == CLI_FAILED)
            return CLI_EXIT_USAGE;
        if (k == CLI_POSITIONAL) {
            if (name != NULL)
                return cli_usage(c, "queue delete takes one NAME");
            name = pos;
            continue;
        }
        if (cli_opt_is(a, "--help") || cli_opt_is(a, "-h"))
            return cli_help(c);
        if (!cli_opt_is(a, "--command-id"))
            return cli_unknown_option(c, a);
        if ((command_id = cli_opt_value(c, a)) == NULL)
            return CLI_EXIT_USAGE;
    }
    if (name == NULL)
        return cli_usage(c, "queue delete needs a NAME");

    kl_batch *b;
    int rc = cli_new_batch(c, command_id, &b);
    if (rc != CLI_EXIT_OK)
        return rc;
    kl_err err;
    if (kl_batch_delete_queue(b, name, &err) != KL_OK) {
        kl_batch_free(b);
        return cli_error(c, &err);
    }
    kl_receipt *r = NULL;
    const Keyload__V1__MutationResult *res;
    rc = cli_send_result(c, b, KEYLOAD__V1__MUTATION_RESULT__KIND_QUEUE_DELETED, &r, &res);
    kl_batch_free(b);
    if (rc == CLI_EXIT_OK && res != NULL) {
        char tag[96];
        printf("deleted queue %s, queue id %" PRIu64 " %s\n", name, res->queue_deleted->queue_id,
               cli_receipt_tag(r, tag, sizeof tag));
    }
    kl_receipt_free(r);
    return rc;
}

static void print_limit(const char *label, uint64_t v, const char *zero)
{
    if (v == 0)
        printf("%s %s", label, zero);
    else
        printf("%s %" PRIu64, label, v);
}

static int queue_stats(cli *c, cli_args *a)
{
    c->usage = USAGE_STATS;
    const char *name = NULL, *pos;
    cli_arg_kind k;
    while ((k = cli_next(c, a, &pos)) != CLI_END) {
        if (k == CLI_FAILED)
            return CLI_EXIT_USAGE;
        if (k == CLI_POSITIONAL) {
            if (name != NULL)
                return cli_usage(c, "queue stats takes one NAME");
            name = pos;
            continue;
        }
        if (cli_opt_is(a, "--help") || cli_opt_is(a, "-h"))
            return cli_help(c);
        if (cli_opt_is(a, "--command-id"))
            return cli_usage(c, "--command-id applies only to commands that change something");
        return cli_unknown_option(c, a);
    }
    if (name == NULL)
        return cli_usage(c, "queue stats needs a NAME");

    kl_err err;
    kl_client *client;
    if (cli_open(c, &client, &err) != KL_OK)
        return cli_error(c, &err);
    Keyload__V1__QueueStatsAnswer *s;
    kl_code code = kl_client_queue_stats(client, name, &s, &err);
    kl_client_close(client);
    if (code != KL_OK)
        return cli_error(c, &err);
    int rc = CLI_EXIT_OK;
    if (c->json) {
        rc = cli_print_json(c, kl_queue_stats_to_json(name, s, 0));
    } else {
        const Keyload__V1__QueueLimits *l = s->limits;
        printf("queue %s (queue id %" PRIu64 ") on partition %d: %" PRIu64 " messages, %" PRIu64
               " bytes, %" PRIu64 " available, %" PRIu64 " in flight; limits: ",
               name, s->queue_id, s->partition, s->messages, s->bytes, s->available,
               s->in_flight);
        print_limit("max messages", l ? l->max_messages : 0, "default");
        print_limit(", max bytes", l ? l->max_bytes : 0, "default");
        print_limit(", max deliveries", l ? l->max_deliveries : 0, "unlimited");
        const char *dlq = l && l->dead_letter_queue && l->dead_letter_queue[0]
                              ? l->dead_letter_queue
                              : NULL;
        printf(", dead-letter queue %s; applied index %" PRIu64 "\n", dlq ? dlq : "none",
               s->applied_index);
    }
    kl_queue_stats_free(s);
    return rc;
}

int cli_cmd_queue(cli *c, int argc, char **argv)
{
    c->usage = USAGE_QUEUE;
    cli_args a;
    cli_args_init(&a, argc, argv);
    const char *sub = NULL;
    cli_arg_kind k = cli_next(c, &a, &sub);
    if (k == CLI_FAILED)
        return CLI_EXIT_USAGE;
    if (k == CLI_OPTION) {
        if (cli_opt_is(&a, "--help") || cli_opt_is(&a, "-h")) {
            printf("usage: %s\n       %s\n       %s\n       %s\n", USAGE_CREATE, USAGE_DELETE, USAGE_STATS,
                   "keyload [GLOBAL OPTIONS] queue list [TENANT/DB] [--cursor B64] [--max N]");
            return CLI_EXIT_OK;
        }
        return cli_usage(c, "queue: put options after the subcommand (create, delete, stats)");
    }
    if (k == CLI_END)
        return cli_usage(c, "queue needs a subcommand: create, delete, stats or list");
    if (strcmp(sub, "create") == 0)
        return queue_create(c, &a);
    if (strcmp(sub, "delete") == 0)
        return queue_delete(c, &a);
    if (strcmp(sub, "stats") == 0)
        return queue_stats(c, &a);
    if (strcmp(sub, "list") == 0)
        return cli_list(c, KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_QUEUES, argc - 1, argv + 1);
    return cli_usage(c, "unknown queue subcommand '%s' (create, delete, stats, list)", sub);
}
