/* cmd_admin: `keyload admin bootstrap` (ARCHITECTURE.md "Engine", "Processes"): the first cluster
 * administrator, proven by the cluster secret (kl_bootstrap_proof). The new key pair is made
 * by keyfile.c; its secret half is written (mode 0600, never over an existing file) before
 * the request is sent, so a bootstrap that commits never loses its key. A definite refusal removes the file
 * again; an unknown outcome keeps it, and the printed retry line reuses it (--key-in). */
#include "client/cli/cli.h"
#include "common/cluster.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define USAGE_ADMIN                                                                            \
    "keyload [GLOBAL OPTIONS] admin bootstrap --tenant T --database D --admin NAME\n"          \
    "         (--key-out FILE | --key-in FILE) [--cluster-secret FILE] [--command-id GUID]\n"  \
    "  --key-out: where the new administrator's secret key is written (mode 0600; must not exist)\n" \
    "  --key-in: an existing secret key file (to retry a bootstrap with the same key)\n"       \
    "  --cluster-secret: default var/<cluster name>/cluster.secret (the launcher's)"

typedef struct bootstrap_args {
    const char *tenant, *database, *admin, *key_out, *key_in, *secret_file, *command_id;
} bootstrap_args;

/* Returns the exit code; *helped when --help was printed (nothing else to do). */
static int parse(cli *c, cli_args *a, bootstrap_args *o, bool *helped)
{
    *helped = false;
    const char *pos;
    cli_arg_kind k;
    while ((k = cli_next(c, a, &pos)) != CLI_END) {
        if (k == CLI_FAILED)
            return CLI_EXIT_USAGE;
        if (k == CLI_POSITIONAL)
            return cli_usage(c, "admin bootstrap takes no positional argument");
        if (cli_opt_is(a, "--help") || cli_opt_is(a, "-h")) {
            *helped = true;
            return cli_help(c);
        }
        const char *v = cli_opt_value(c, a);
        if (v == NULL)
            return CLI_EXIT_USAGE;
        if (cli_opt_is(a, "--tenant"))
            o->tenant = v;
        else if (cli_opt_is(a, "--admin"))
            o->admin = v;
        else if (cli_opt_is(a, "--key-out"))
            o->key_out = v;
        else if (cli_opt_is(a, "--key-in"))
            o->key_in = v;
        else if (cli_opt_is(a, "--cluster-secret"))
            o->secret_file = v;
        else if (cli_opt_is(a, "--command-id"))
            o->command_id = v;
        else
            return cli_unknown_option(c, a);
    }
    /* --database is also the global option (TENANT/DB); here it may be just the name. */
    const char *slash = strchr(c->database, '/');
    if (slash == NULL) {
        o->database = c->database;
    } else if (o->tenant == NULL || (strncmp(c->database, o->tenant, (size_t)(slash - c->database)) == 0 &&
                                     o->tenant[slash - c->database] == '\0')) {
        static char tenant[KL_NAME_MAX];
        snprintf(tenant, sizeof tenant, "%.*s", (int)(slash - c->database), c->database);
        o->tenant = tenant;
        o->database = slash + 1;
    } else {
        return cli_usage(c, "--database %s names another tenant than --tenant %s", c->database, o->tenant);
    }
    if (o->tenant == NULL || o->admin == NULL)
        return cli_usage(c, "admin bootstrap needs --tenant, --database and --admin");
    if ((o->key_out == NULL) == (o->key_in == NULL))
        return cli_usage(c, "admin bootstrap needs exactly one of --key-out and --key-in");
    return CLI_EXIT_OK;
}

static int bootstrap(cli *c, cli_args *a)
{
    bootstrap_args o = {0};
    bool helped;
    int rc = parse(c, a, &o, &helped);
    if (rc != CLI_EXIT_OK || helped)
        return rc;
    kl_err err;
    static char database[2 * KL_NAME_MAX + 2];
    char default_secret[KL_PATH_MAX];
    snprintf(database, sizeof database, "%s/%s", o.tenant, o.database);
    c->database = database; /* the client opens on the database being made */
    if (o.secret_file == NULL) {
        static kl_cluster cluster;
        if (kl_cluster_load(c->cluster, NULL, &cluster, &err) != KL_OK)
            return cli_error(c, &err);
        snprintf(default_secret, sizeof default_secret, "var/%s/cluster.secret", cluster.name);
        o.secret_file = default_secret;
    }
    uint8_t pk[32], proof[32];
    if (cli_key_pair(o.key_out, o.key_in, pk, &err) != KL_OK)
        return cli_error(c, &err);
    /* The proof reads the cluster secret (SDK: kl_bootstrap_proof); a refusal here removes
     * the key file just written, as any definite refusal does. */
    kl_code code = kl_bootstrap_proof(o.secret_file, database, o.admin, pk, proof, &err);
    if (code != KL_OK) {
        cli_key_settle(code, o.key_out, "%s", ""); /* removes it */
        return cli_error(c, &err);
    }
    kl_batch *b;
    if ((rc = cli_new_batch(c, o.command_id, &b)) != CLI_EXIT_OK) {
        cli_key_settle(KL_INVALID_ARGUMENT, o.key_out, "%s", ""); /* removes it */
        return rc;
    }
    kl_client *client = NULL;
    kl_receipt *r = NULL;
    code = kl_batch_bootstrap(b, database, o.admin, pk, proof, &err);
    if (code == KL_OK)
        code = cli_open(c, &client, &err);
    if (code == KL_OK)
        code = kl_client_batch(client, b, &r, &err);
    kl_client_close(client);
    cli_key_settle(code, o.key_out,
                   "keyload admin bootstrap --tenant %s --database %s --admin %s --key-in %s "
                   "--command-id %s", o.tenant, o.database, o.admin, o.key_out,
                   kl_batch_command_id(b));
    if (code != KL_OK) {
        rc = cli_error(c, &err);
        kl_batch_free(b);
        return rc;
    }
    const Keyload__V1__MutationResult *res = cli_single_result(c, r, KEYLOAD__V1__MUTATION_RESULT__KIND_BOOTSTRAPPED);
    if (res == NULL) {
        rc = CLI_EXIT_ERROR;
    } else if (c->json) {
        rc = cli_print_json(c, kl_receipt_to_json(r->decoded, 0));
    } else {
        char tag[96];
        const Keyload__V1__Bootstrapped *bs = res->bootstrapped;
        printf("bootstrapped %s: cluster administrator %s (policy epoch %" PRIu64 ")%s%s %s\n", database,
               bs->admin_id, bs->policy_epoch, o.key_out ? ", secret key in " : "",
               o.key_out ? o.key_out : "", cli_receipt_tag(r, tag, sizeof tag));
    }
    kl_receipt_free(r);
    kl_batch_free(b);
    return rc;
}

int cli_cmd_admin(cli *c, int argc, char **argv)
{
    c->usage = USAGE_ADMIN;
    if (argc < 1)
        return cli_usage(c, "admin needs a subcommand: bootstrap, backup, restore");
    cli_args a;
    cli_args_init(&a, argc - 1, argv + 1);
    if (strcmp(argv[0], "bootstrap") == 0)
        return bootstrap(c, &a);
    if (strcmp(argv[0], "backup") == 0 || strcmp(argv[0], "restore") == 0)
        return cli_cmd_backup(c, argv[0][0] == 'r', argc - 1, argv + 1);
    if (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)
        return cli_help(c);
    return cli_usage(c, "unknown admin subcommand (bootstrap, backup, restore)");
}
