/* keyload-coordinator: drives remote queue transfers from OutputPending to Delivered
 * (ARCHITECTURE.md "Coordinator").
 *
 *   keyload-coordinator --config FILE            run until SIGTERM/SIGINT (exit 0)
 *   keyload-coordinator --check --config FILE    validate the config (and the cluster file
 *                                                it names); exit 0 or 1
 *   keyload-coordinator --status --config FILE   print the last status snapshot; exit 0,
 *                                                or 1 when there is none
 * Exit 2 for a usage error, 1 for a configuration or start-up error. Logs go to stderr. */
#include "common/cluster.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "coordinator/config.h"
#include "coordinator/coord.h"
#include "coordinator/run.h"
#include "coordinator/status.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define USAGE                                                                           \
    "usage: keyload-coordinator --config FILE\n"                                        \
    "       keyload-coordinator --check --config FILE\n"                                \
    "       keyload-coordinator --status --config FILE\n"

static int usage(const char *why)
{
    if (why != NULL)
        fprintf(stderr, "keyload-coordinator: %s\n", why);
    fputs(USAGE, stderr);
    return 2;
}

static int fail(const char *what, const kl_err *err)
{
    fprintf(stderr, "keyload-coordinator: %s: %s (%s, %s)\n", what, err->message,
            kl_code_name(err->code), err->detail);
    return 1;
}

/* --check: the config, the cluster file and the presence of the key file (never read). */
static int check(const kl_coord_config *cfg)
{
    kl_err err;
    kl_cluster *cl = malloc(sizeof *cl);
    if (cl == NULL)
        return 1;
    kl_code rc = kl_cluster_load(cfg->cluster_file, NULL, cl, &err);
    free(cl);
    if (rc != KL_OK)
        return fail("cluster_file", &err);
    struct stat st;
    if (cfg->has_principal && stat(cfg->principal_key_file, &st) != 0) {
        fprintf(stderr, "keyload-coordinator: principal_key_file: cannot stat %s\n",
                cfg->principal_key_file);
        return 1;
    }
    printf("config ok: database=%s principal=%s workers=%u status_file=%s\n", cfg->database,
           cfg->has_principal ? cfg->principal_id : "null (no discovery)", cfg->workers,
           cfg->status_file);
    return 0;
}

int main(int argc, char **argv)
{
    const char *config = NULL;
    bool do_check = false, do_status = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            config = argv[++i];
        else if (strcmp(argv[i], "--check") == 0)
            do_check = true;
        else if (strcmp(argv[i], "--status") == 0)
            do_status = true;
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(USAGE, stdout);
            return 0;
        } else
            return usage("unknown or incomplete argument");
    }
    if (config == NULL)
        return usage("--config FILE is required");
    if (do_check && do_status)
        return usage("--check and --status exclude each other");

    kl_log_set_component("coordinator");
    kl_err err;
    kl_coord_config cfg;
    if (kl_coord_config_load(config, &cfg, &err) != KL_OK)
        return fail("config", &err);
    if (do_check)
        return check(&cfg);
    if (do_status)
        return kl_coord_status_print(cfg.status_file, &err) == KL_OK ? 0 : fail("status", &err);
    if (cfg.log_debug)
        kl_log_set_level(KL_LOG_DEBUG);

    /* A malformed KEYLOAD_FAILPOINTS must not run a test with its cut silently disarmed. */
    if (kl_failpoint_init(&err) != KL_OK)
        return fail("failpoints", &err);
    signal(SIGPIPE, SIG_IGN);
    /* SIGTERM during start-up must not kill the process with the default action (exit 143
     * mid-open): blocked here, and inherited blocked by every thread opening starts, it stays
     * pending until kl_coord_run has its handler and unblocks it on the main thread. */
    sigset_t stop_sigs;
    sigemptyset(&stop_sigs);
    sigaddset(&stop_sigs, SIGTERM);
    sigaddset(&stop_sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_sigs, NULL);
    kl_coord *co;
    if (kl_coord_open(&cfg, &co, &err) != KL_OK) {
        KL_ERROR("start_failed", "code=%s detail=%s", kl_code_name(err.code), err.detail);
        return fail("start", &err);
    }
    kl_code rc = kl_coord_run(co, &err);
    kl_coord_close(co);
    if (rc != KL_OK)
        return fail("run", &err);
    return 0;
}
