/* cmd_principal: `keyload principal create | show | grant | revoke | rotate-key` (ARCHITECTURE.md
 * "Engine", "Processes"). Every change is a catalog mutation on partition 0 under a command id (given or
 * fresh) and prints its receipt; show reads the stored record. The principal's tenant, a
 * grant's database and a database administrator's database are the client's --database.
 * Only public keys and key ids are ever printed (base64 in JSON); secret keys go to the
 * --key-out file only (keyfile.c). */
#include "client/cli/cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USAGE_CREATE                                                                           \
    "keyload [GLOBAL OPTIONS] principal create NAME (--key-out FILE | --key-in FILE)\n"        \
    "         [--role database-admin|cluster-admin] [--command-id GUID]\n"                     \
    "  NAME: the new principal, in the tenant of --database; database-admin administers\n"     \
    "  --database. --key-out: where its new secret key is written (mode 0600; must not\n"      \
    "  exist); only the public key is sent. --key-in: an existing key (to retry)"
#define USAGE_SHOW "keyload [GLOBAL OPTIONS] principal show ID"
#define USAGE_GRANT                                                                            \
    "keyload [GLOBAL OPTIONS] principal grant ID PERMISSION --queue PATTERN [--fields a,b]\n"  \
    "         [--headers h,k] [--command-id GUID]\n"                                           \
    "  PERMISSION: QueuePublish, QueueConsume, QueueAck, QueueInspect or Query, on the\n"      \
    "  --database; PATTERN: a queue name or a prefix ending in '*' (\"orders.*\", \"*\").\n"   \
    "  --fields/--headers: the keys the grant allows (\"*\": every key); left out: none.\n"   \
    "  Granting the same ID PERMISSION PATTERN again replaces the two lists"
#define USAGE_REVOKE                                                                           \
    "keyload [GLOBAL OPTIONS] principal revoke ID PERMISSION --queue PATTERN [--command-id GUID]"
#define USAGE_ROTATE                                                                           \
    "keyload [GLOBAL OPTIONS] principal rotate-key ID (--key-out FILE | --key-in FILE)\n"      \
    "         [--command-id GUID]\n"                                                           \
    "  a new key pair for ID (its sessions under the old key end); the old key file stops\n"   \
    "  working once this returns"
#define USAGE_PRINCIPAL                                                                        \
    USAGE_CREATE "\n       " USAGE_SHOW "\n       " USAGE_GRANT "\n       " USAGE_REVOKE       \
                 "\n       " USAGE_ROTATE "\n       keyload [GLOBAL OPTIONS] principal list [--cursor B64] [--max N]"

/* What each subcommand takes. */
enum {
    OPT_KEY = 1,        /* --key-out, --key-in */
    OPT_ROLE = 2,       /* --role */
    OPT_QUEUE = 4,      /* --queue */
    OPT_LISTS = 8,      /* --fields, --headers */
    OPT_COMMAND = 16,   /* --command-id */
};

static const struct sub_spec {
    const char *name;
    cli_principal_sub sub;
    int positionals;    /* ID, or ID PERMISSION */
    int opts;
    const char *usage;
} subs[] = {
    {"create", CLI_PRINCIPAL_CREATE, 1, OPT_KEY | OPT_ROLE | OPT_COMMAND, USAGE_CREATE},
    {"show", CLI_PRINCIPAL_SHOW, 1, 0, USAGE_SHOW},
    {"grant", CLI_PRINCIPAL_GRANT, 2, OPT_QUEUE | OPT_LISTS | OPT_COMMAND, USAGE_GRANT},
    {"revoke", CLI_PRINCIPAL_REVOKE, 2, OPT_QUEUE | OPT_COMMAND, USAGE_REVOKE},
    {"rotate-key", CLI_PRINCIPAL_ROTATE_KEY, 1, OPT_KEY | OPT_COMMAND, USAGE_ROTATE},
};
#define SUB_COUNT (sizeof subs / sizeof subs[0])

void cli_principal_args_clear(cli_principal_args *o)
{
    kl_key_list_clear(&o->fields);
    kl_key_list_clear(&o->headers);
}

/* Which option class the current option belongs to (0: not a principal option). */
static int option_class(const cli_args *a)
{
    if (cli_opt_is(a, "--key-out") || cli_opt_is(a, "--key-in"))
        return OPT_KEY;
    if (cli_opt_is(a, "--role"))
        return OPT_ROLE;
    if (cli_opt_is(a, "--queue"))
        return OPT_QUEUE;
    if (cli_opt_is(a, "--fields") || cli_opt_is(a, "--headers"))
        return OPT_LISTS;
    if (cli_opt_is(a, "--command-id"))
        return OPT_COMMAND;
    return 0;
}

/* Applies one option of class cls with value v; CLI_EXIT_USAGE after reporting. */
static int apply_option(cli *c, const cli_args *a, int cls, const char *v, cli_principal_args *o,
                        bool *fields_given, bool *headers_given)
{
    kl_err err;
    switch (cls) {
    case OPT_KEY:
        if (o->key_out != NULL || o->key_in != NULL)
            return cli_usage(c, "give one of --key-out and --key-in, once");
        if (cli_opt_is(a, "--key-out"))
            o->key_out = v;
        else
            o->key_in = v;
        return CLI_EXIT_OK;
    case OPT_ROLE:
        if (kl_role_parse(v, &o->role, &err) != KL_OK)
            return cli_usage(c, "--role must be database-admin or cluster-admin (or none), not '%s'", v);
        return CLI_EXIT_OK;
    case OPT_QUEUE:
        if (o->queue != NULL)
            return cli_usage(c, "--queue is given twice (one PATTERN per grant)");
        if (kl_queue_pattern_check("--queue", v, &err) != KL_OK)
            return cli_usage(c, "%s", err.message);
        o->queue = v;
        return CLI_EXIT_OK;
    case OPT_LISTS: {
        bool fields = cli_opt_is(a, "--fields");
        bool *given = fields ? fields_given : headers_given;
        const char *name = fields ? "--fields" : "--headers";
        if (*given)
            return cli_usage(c, "%s is given twice (write the keys as one list: a,b,c)", name);
        *given = true;
        if (kl_key_list_parse(name, v, fields ? &o->fields : &o->headers, &err) != KL_OK)
            return cli_usage(c, "%s", err.message);
        return CLI_EXIT_OK;
    }
    default: /* OPT_COMMAND */
        o->command_id = v;
        return CLI_EXIT_OK;
    }
}

int cli_principal_parse(cli *c, int argc, char **argv, cli_principal_args *o)
{
    memset(o, 0, sizeof *o);
    c->usage = USAGE_PRINCIPAL;
    if (argc < 1)
        return cli_usage(c, "principal needs a subcommand: create, show, list, grant, revoke or rotate-key");
    const struct sub_spec *spec = NULL;
    for (size_t i = 0; i < SUB_COUNT; i++)
        if (strcmp(argv[0], subs[i].name) == 0)
            spec = &subs[i];
    if (spec == NULL) {
        if (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0) {
            o->help = true;
            return cli_help(c);
        }
        return cli_usage(c, "unknown principal subcommand '%s' (create, show, list, grant, revoke, "
                            "rotate-key)", argv[0]);
    }
    o->sub = spec->sub;
    c->usage = spec->usage;
    cli_args a;
    cli_args_init(&a, argc - 1, argv + 1);
    const char *pos, *permission = NULL;
    int npos = 0;
    bool fields_given = false, headers_given = false;
    cli_arg_kind k;
    int rc = CLI_EXIT_OK;
    while (rc == CLI_EXIT_OK && (k = cli_next(c, &a, &pos)) != CLI_END) {
        if (k == CLI_FAILED) {
            rc = CLI_EXIT_USAGE;
        } else if (k == CLI_POSITIONAL) {
            if (npos == spec->positionals)
                rc = cli_usage(c, "principal %s takes %s; '%s' is one argument too many", spec->name,
                               spec->positionals == 1 ? "one ID" : "ID and PERMISSION", pos);
            else if (npos++ == 0)
                o->id = pos;
            else
                permission = pos;
        } else if (cli_opt_is(&a, "--help") || cli_opt_is(&a, "-h")) {
            o->help = true;
            rc = cli_help(c);
            break;
        } else {
            int cls = option_class(&a);
            if (cls == 0) {
                rc = cli_unknown_option(c, &a);
            } else if (!(spec->opts & cls)) {
                rc = cls == OPT_COMMAND
                         ? cli_usage(c, "--command-id applies only to commands that change something")
                         : cli_usage(c, "principal %s takes no %.*s", spec->name, (int)a.opt_len, a.opt);
            } else {
                const char *v = cli_opt_value(c, &a);
                rc = v == NULL ? CLI_EXIT_USAGE
                               : apply_option(c, &a, cls, v, o, &fields_given, &headers_given);
            }
        }
    }
    if (rc != CLI_EXIT_OK || o->help) {
        cli_principal_args_clear(o);
        return rc;
    }
    kl_err err;
    if (npos < spec->positionals)
        rc = cli_usage(c, "principal %s needs %s", spec->name,
                       spec->positionals == 1 ? (spec->sub == CLI_PRINCIPAL_CREATE ? "a NAME" : "an ID")
                                              : "an ID and a PERMISSION");
    else if (permission != NULL && kl_permission_parse(permission, &o->permission, &err) != KL_OK)
        rc = cli_usage(c, "PERMISSION '%s' is not one of QueuePublish, QueueConsume, QueueAck, "
                          "QueueInspect, Query", permission);
    else if ((spec->opts & OPT_QUEUE) && o->queue == NULL)
        rc = cli_usage(c, "principal %s needs --queue PATTERN", spec->name);
    else if ((spec->opts & OPT_KEY) && o->key_out == NULL && o->key_in == NULL)
        rc = cli_usage(c, "principal %s needs --key-out FILE (or --key-in FILE to retry)", spec->name);
    else if (o->permission == KEYLOAD__V1__PERMISSION__QUEUE_ACK && (fields_given || headers_given))
        rc = cli_usage(c, "%s: a QueueAck grant takes no field or header list",
                       fields_given ? "--fields" : "--headers");
    if (rc != CLI_EXIT_OK)
        cli_principal_args_clear(o);
    return rc;
}

/* ---------------------------------------------------------------- output */

static char *b64(const uint8_t *p, size_t n)
{
    char *s = kl_base64_encode(p, n);
    return s ? s : strdup("?");
}

static void print_list(const char *label, char *const *keys, size_t n)
{
    printf("%s ", label);
    if (n == 0)
        printf("none");
    for (size_t i = 0; i < n; i++)
        printf("%s%s", i ? "," : "", keys[i]);
}

static const char *role_text(kl_role role)
{
    return role == KL_ROLE_CLUSTER_ADMIN    ? "cluster administrator"
           : role == KL_ROLE_DATABASE_ADMIN ? "database administrator"
                                            : "no role";
}

/* The human line of a principal change. */
static void print_change(const cli_principal_args *o, const char *database,
                         const kl_principal_result *res, const kl_receipt *r)
{
    char tag[96], *kid = b64(res->key_id, res->key_id_len);
    const char *perm = kl_permission_name(o->permission);
    switch (o->sub) {
    case CLI_PRINCIPAL_CREATE:
        printf("created principal %s in %s (%s%s%s): key id %s, policy epoch %" PRIu64
               "; secret key in %s",
               res->principal_id, database, role_text(o->role),
               o->role == KL_ROLE_DATABASE_ADMIN ? " of " : "",
               o->role == KL_ROLE_DATABASE_ADMIN ? database : "", kid ? kid : "?",
               res->policy_epoch, o->key_out ? o->key_out : o->key_in);
        break;
    case CLI_PRINCIPAL_GRANT:
        printf("granted %s on %s queue %s to %s (", perm, database, o->queue, res->principal_id);
        print_list("fields", o->fields.keys, o->fields.n);
        print_list("; headers", o->headers.keys, o->headers.n);
        printf("): policy epoch %" PRIu64 "%s", res->policy_epoch,
               res->changed ? "" : " (unchanged: the same grant was already there)");
        break;
    case CLI_PRINCIPAL_REVOKE:
        printf("revoked %s on %s queue %s from %s: policy epoch %" PRIu64 "%s", perm, database,
               o->queue, res->principal_id, res->policy_epoch,
               res->changed ? "" : " (unchanged: it held no such grant)");
        break;
    default: /* rotate-key */
        printf("new key for principal %s: key id %s, policy epoch %" PRIu64 "; secret key in %s",
               res->principal_id, kid ? kid : "?", res->policy_epoch,
               o->key_out ? o->key_out : o->key_in);
        break;
    }
    if (res->catalog_version != 0)
        printf("; catalog version %" PRIu64, res->catalog_version);
    printf(" %s\n", cli_receipt_tag(r, tag, sizeof tag));
    free(kid);
}

static void print_principal(const Keyload__V1__ShowPrincipalAnswer *a)
{
    const Keyload__V1__CatalogPrincipal *p = a->principal;
    char *pk = b64(p->public_key.data, p->public_key.len);
    char *kid = b64(p->key_id.data, p->key_id.len);
    char role[2 * KL_SDK_NAME_MAX + 48];
    if (p->cluster_admin)
        snprintf(role, sizeof role, "cluster administrator of tenant %s", p->tenant);
    else if (p->database_admin)
        snprintf(role, sizeof role, "database administrator of %s/%s", p->tenant, p->database);
    else
        snprintf(role, sizeof role, "no role");
    printf("principal %s of tenant %s: %s; policy epoch %" PRIu64 "\n", p->principal_id, p->tenant,
           role, p->policy_epoch);
    printf("  public key %s (key id %s)\n", pk ? pk : "?", kid ? kid : "?");
    printf("  created %" PRId64 " (unix ms), record version %" PRIu64 ", catalog version %" PRIu64
           "\n", p->created_unix_ms, p->version, a->catalog_version);
    printf("  grants: %s\n", p->n_grants ? "" : "none");
    for (size_t i = 0; i < p->n_grants; i++) {
        const Keyload__V1__Grant *g = p->grants[i];
        printf("    %s on %s/%s queue %s (", kl_permission_name(g->permission), p->tenant,
               g->database, g->queue_pattern);
        print_list("fields", g->fields, g->n_fields);
        print_list("; headers", g->headers, g->n_headers);
        printf(")\n");
    }
    free(pk);
    free(kid);
}

/* ---------------------------------------------------------------- running */

static int show(cli *c, kl_client *client, const cli_principal_args *o)
{
    kl_err err;
    Keyload__V1__ShowPrincipalAnswer *a;
    if (kl_client_show_principal(client, o->id, &a, &err) != KL_OK)
        return cli_error(c, &err);
    int rc = CLI_EXIT_OK;
    if (c->json)
        rc = cli_print_json(c, kl_principal_to_json(a, 0));
    else
        print_principal(a);
    kl_principal_answer_free(a);
    return rc;
}

static int change(cli *c, kl_client *client, const cli_principal_args *o)
{
    char fresh[KL_COMMAND_ID_TEXT_LEN + 1];
    const char *cmd = o->command_id;
    if (cmd == NULL) {
        kl_command_id_new(fresh);
        cmd = fresh;
    }
    kl_err err;
    kl_code code;
    uint8_t pk[32];
    if (o->sub == CLI_PRINCIPAL_CREATE || o->sub == CLI_PRINCIPAL_ROTATE_KEY) {
        if (cli_key_pair(o->key_out, o->key_in, pk, &err) != KL_OK)
            return cli_error(c, &err);
    }
    kl_principal_result res;
    kl_receipt *r = NULL;
    switch (o->sub) {
    case CLI_PRINCIPAL_CREATE:
        code = kl_client_create_principal(client, cmd, o->id, pk, o->role, &res, &r, &err);
        cli_key_settle(code, o->key_out, "keyload --database %s principal create %s --role %s "
                       "--key-in %s --command-id %s", kl_client_database(client), o->id,
                       kl_role_name(o->role), o->key_out, cmd);
        break;
    case CLI_PRINCIPAL_ROTATE_KEY:
        code = kl_client_set_principal_key(client, cmd, o->id, pk, &res, &r, &err);
        cli_key_settle(code, o->key_out, "keyload --database %s principal rotate-key %s "
                       "--key-in %s --command-id %s", kl_client_database(client), o->id,
                       o->key_out, cmd);
        break;
    case CLI_PRINCIPAL_GRANT: {
        kl_grant g = {.permission = o->permission, .queue_pattern = o->queue,
                      .fields = (const char *const *)o->fields.keys, .n_fields = o->fields.n,
                      .headers = (const char *const *)o->headers.keys, .n_headers = o->headers.n};
        code = kl_client_grant(client, cmd, o->id, &g, &res, &r, &err);
        break;
    }
    default: /* revoke */
        code = kl_client_revoke(client, cmd, o->id, o->permission, o->queue, &res, &r, &err);
        break;
    }
    if (code != KL_OK)
        return cli_error(c, &err);
    int rc = CLI_EXIT_OK;
    if (c->json)
        rc = cli_print_json(c, kl_receipt_to_json(r->decoded, 0));
    else
        print_change(o, kl_client_database(client), &res, r);
    kl_receipt_free(r);
    return rc;
}

int cli_cmd_principal(cli *c, int argc, char **argv)
{
    if (argc >= 1 && strcmp(argv[0], "list") == 0)
        return cli_list(c, KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_PRINCIPALS, argc - 1, argv + 1);
    cli_principal_args o;
    int rc = cli_principal_parse(c, argc, argv, &o);
    if (rc != CLI_EXIT_OK || o.help)
        return rc;
    kl_err err;
    kl_client *client;
    if (cli_open(c, &client, &err) != KL_OK) {
        cli_principal_args_clear(&o);
        return cli_error(c, &err);
    }
    rc = o.sub == CLI_PRINCIPAL_SHOW ? show(c, client, &o) : change(c, client, &o);
    kl_client_close(client);
    cli_principal_args_clear(&o);
    return rc;
}
