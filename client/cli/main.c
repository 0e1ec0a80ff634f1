/* keyload: the command-line client (ARCHITECTURE.md "Processes"). main reads the global options and
 * the environment, then hands the rest of the command line to one command. */
#include "client/cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char HELP[] =
    "usage: keyload [GLOBAL OPTIONS] COMMAND [ARGS]\n"
    "\n"
    "Commands:\n"
    "  admin bootstrap --tenant T --database D --admin NAME --key-out FILE [--cluster-secret FILE]\n"
    "                  the first cluster administrator (only once; needs the cluster secret)\n"
    "  admin backup --out DIR   every partition's state, as a transfer-consistent backup\n"
    "  admin restore --in DIR --check   verify a backup against the cluster file\n"
    "  database create [TENANT/DB] [--max-scan-records N] [--max-batch-bytes N]\n"
    "                  [--max-query-read-bytes N] [--max-transfer-accept-attempts N|null]\n"
    "                  (default TENANT/DB: --database)\n"
    "  database limits [TENANT/DB] [same limit options]   replaces ALL the database's limits\n"
    "                  (a limit left out: the cluster's value; accept attempts: null)\n"
    "  principal create NAME --key-out FILE [--role database-admin|cluster-admin]\n"
    "                  a principal of --database's tenant with a new Ed25519 key pair (the\n"
    "                  secret key goes to FILE, mode 0600; only the public key is sent)\n"
    "  principal show ID\n"
    "  principal grant ID PERMISSION --queue PATTERN [--fields a,b] [--headers h,k]\n"
    "                  PERMISSION: QueuePublish|QueueConsume|QueueAck|QueueInspect|Query\n"
    "  principal revoke ID PERMISSION --queue PATTERN\n"
    "  principal rotate-key ID --key-out FILE    a new key pair (the old key stops working)\n"
    "  queue create NAME [--partition P] [--max-messages N] [--max-bytes N]\n"
    "                    [--max-deliveries N] [--dlq NAME]\n"
    "  queue delete NAME\n"
    "  queue stats NAME\n"
    "  enqueue QUEUE[/LANE] [--header k=v]... [--field k=v]... BODY\n"
    "          field types: k=v (string), k:int=5, k:double=1.5, k:bool=true, k:bytes=B64\n"
    "          also: --body-file FILE|-, --delay-ms MS, --expires-at-ms UNIX_MS\n"
    "  receive QUEUE[/LANE] [--max N] [--lease-ms MS]\n"
    "  ack QUEUE LEASE...        LEASE: base64 token from receive, @FILE or - (stdin)\n"
    "  release QUEUE LEASE...\n"
    "  transfer create --source QUEUE[/LANE] --id GUID --dest QUEUE[/LANE]\n"
    "                  [--header k=v]... [--field k=v]... [--token-out FILE] BODY\n"
    "                  commits an intent on the source; prints its intent token (base64)\n"
    "  transfer accept --dest QUEUE[/LANE] --intent @FILE|-\n"
    "  transfer complete --source QUEUE[/LANE] --id GUID --receipt @FILE|-\n"
    "  transfer inspect --source QUEUE[/LANE] --id GUID\n"
    "  transfer receipt --dest QUEUE[/LANE] --source QUEUE[/LANE] --id GUID [--token-out FILE]\n"
    "  transfer pending (--source QUEUE[/LANE] | --partition P) [--cursor B64] [--max N]\n"
    "  transfer pause|resume [--source QUEUE[/LANE]]   new transfers of a lane or the database\n"
    "  transfer failure --dest QUEUE[/LANE] --intent @FILE|- --failed-command-id GUID\n"
    "                  [--witness-out FILE] [--receipt-out FILE]\n"
    "                  fresh read: did a refused accept leave a receipt, or would it now pass\n"
    "                  (then a failure witness is issued)?\n"
    "  transfer advance --source QUEUE[/LANE] --id GUID --witness @FILE|- [--token-out FILE]\n"
    "                  next generation after a RESOURCE_EXHAUSTED accept (capacity retry)\n"
    "  transfer repair --source QUEUE[/LANE] --id GUID --witness @FILE|- [--token-out FILE]\n"
    "                  next generation after a PERMISSION_DENIED accept (policy repair)\n"
    "                  tokens are read from @FILE or - (stdin) only, as raw bytes or base64\n"
    "                  text; --token-out FILE writes the raw token (mode 0600, no overwrite)\n"
    "  sql STATEMENT|@FILE|-   one Q1 statement: CALL alias(name => value, ...)\n"
    "                  [WITH COMMAND_ID 'guid'] (README \"Q1 statements\"); prints its rows;\n"
    "                  statements holding tokens belong in @FILE or - (stdin)\n"
    "  cluster-status [--json]   every member's role, term and indexes, per partition\n"
    "  cluster-status --wait-ready NODE [--wait-ms MS]\n"
    "                  wait until NODE follows its leader and caught up (rolling restarts)\n"    "  cluster members --partition P   the configuration in effect: voters, learners,\n"
    "                  replica_count, joint or not, the member directory (any member's view)\n"
    "  cluster member add|remove|replace --partition P ...   a membership change run by\n"
    "                  the leader (cluster administrators); waits until it finished; on a\n"
    "                  data partition also registers the new member's key with partition 0\n"
    "                  and removes the old one's\n"
    "  cluster member key --partition P --id N (--public-key HEX | --remove)\n"
    "                  what partition 0 trusts as that member's key (cluster administrators)\n"
    "\n"
    "Every command that changes something takes --command-id GUID (default: a fresh random\n"
    "id) and prints it with its receipt. Replaying the same command id with the same\n"
    "arguments returns the same receipt; after an UNKNOWN_WRITE_OUTCOME error, replay it to\n"
    "learn whether the command committed.\n"
    "\n"
    "Global options (also accepted after the command):\n"
    "  --cluster FILE        cluster file (env KEYLOAD_CLUSTER; default " CLI_DEFAULT_CLUSTER ")\n"
    "  --database TENANT/DB  (env KEYLOAD_DATABASE; default " KL_DEFAULT_DATABASE ")\n"
    "  --principal ID        act as this principal (env KEYLOAD_PRINCIPAL); needs --key\n"
    "  --key FILE            the principal's Ed25519 secret key, mode 0600, e.g. from\n"
    "                        admin bootstrap --key-out (env KEYLOAD_KEY); needs --principal.\n"
    "                        With both, every request goes sealed under a session per\n"
    "                        member, verified with the members' public keys: --cluster must\n"
    "                        name a file with them, such as var/<cluster>/cluster.json from\n"
    "                        deploy/keyload-cluster. Without them requests go unsealed.\n"
    "  --json                print exactly one JSON object on stdout\n"
    "  --timeout MS          bound on each command's network time (default 5000)\n"
    "  --help                this text; COMMAND --help shows one command's usage\n"
    "  --                    ends options (for a BODY that starts with '-')\n"
    "\n"
    "Exit status: 0 success, 1 an error status (error: CODE: message), 2 a usage error.\n";

static const char *env_or(const char *name, const char *fallback)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : fallback;
}

int main(int argc, char **argv)
{
    cli c = {
        .cluster = env_or("KEYLOAD_CLUSTER", CLI_DEFAULT_CLUSTER),
        .database = env_or("KEYLOAD_DATABASE", KL_DEFAULT_DATABASE),
        .principal = env_or("KEYLOAD_PRINCIPAL", NULL),
        .key = env_or("KEYLOAD_KEY", NULL),
        .timeout_ms = KL_DEFAULT_TIMEOUT_MS,
        .usage = "keyload [GLOBAL OPTIONS] COMMAND [ARGS]",
    };
    /* --json anywhere before "--" decides the shape of every output, usage errors included. */
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--json") == 0)
            c.json = true;

    cli_args a;
    cli_args_init(&a, argc - 1, argv + 1);
    const char *cmd = NULL;
    cli_arg_kind k;
    while ((k = cli_next(&c, &a, &cmd)) == CLI_OPTION) {
        if (cli_opt_is(&a, "--help") || cli_opt_is(&a, "-h")) {
            fputs(HELP, stdout);
            return CLI_EXIT_OK;
        }
        return cli_unknown_option(&c, &a);
    }
    if (k == CLI_FAILED)
        return CLI_EXIT_USAGE;
    if (k == CLI_END)
        return cli_usage(&c, "a COMMAND is needed");
    int rest_argc = a.argc - a.i;
    char **rest = a.argv + a.i;
    if (strcmp(cmd, "help") == 0) {
        fputs(HELP, stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(cmd, "admin") == 0)
        return cli_cmd_admin(&c, rest_argc, rest);
    if (strcmp(cmd, "database") == 0)
        return cli_cmd_database(&c, rest_argc, rest);
    if (strcmp(cmd, "principal") == 0)
        return cli_cmd_principal(&c, rest_argc, rest);
    if (strcmp(cmd, "queue") == 0)
        return cli_cmd_queue(&c, rest_argc, rest);
    if (strcmp(cmd, "enqueue") == 0)
        return cli_cmd_enqueue(&c, rest_argc, rest);
    if (strcmp(cmd, "receive") == 0)
        return cli_cmd_receive(&c, rest_argc, rest);
    if (strcmp(cmd, "ack") == 0)
        return cli_cmd_ack(&c, rest_argc, rest);
    if (strcmp(cmd, "release") == 0)
        return cli_cmd_release(&c, rest_argc, rest);
    if (strcmp(cmd, "transfer") == 0)
        return cli_cmd_transfer(&c, rest_argc, rest);
    if (strcmp(cmd, "sql") == 0)
        return cli_cmd_sql(&c, rest_argc, rest);
    if (strcmp(cmd, "cluster-status") == 0)
        return cli_cmd_cluster_status(&c, rest_argc, rest);
    if (strcmp(cmd, "cluster") == 0)
        return cli_cmd_cluster(&c, rest_argc, rest);
    return cli_usage(&c, "unknown command '%s'", cmd);
}
