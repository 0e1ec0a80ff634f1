#include "common/failpoint.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FP_MAX 32
#define FP_NAME_MAX 64

typedef enum { FP_EXIT, FP_ABORT, FP_SLEEP, FP_ERROR } fp_action;

typedef struct {
    char name[FP_NAME_MAX];
    fp_action action;
    long arg;          /* sleep ms or error code */
    unsigned on_hit;   /* 0 = every hit */
    _Atomic unsigned hits;  /* sites run on several threads (coordinator workers) */
} fp_entry;

bool kl_failpoints_armed = false;
static fp_entry fp_table[FP_MAX];
static int fp_count = 0;

/* Every site compiled into a binary (failpoint.h lists what each means). A name outside
 * this list is refused at configure time: a misspelt cut point would otherwise never fire
 * and the test arming it would pass without cutting anything. */
static const char *const fp_known[] = {
    "daemon.before_append",          "daemon.after_append_before_apply",
    "daemon.after_append_before_reply", "daemon.after_reply_before_apply",
    "daemon.before_reply",           "peer.before_close",
    "store.log_write",               "rpc.dial_returned",
    "coord.before_accept",           "coord.after_accept_sent",
    "coord.before_complete",         "coord.after_complete_sent",
    "coord.before_advance",          "coord.after_advance",
    "store.install_begun",           "store.install_ingested",
    "store.install_finished",        "cli.backup.after_hold",
    "repl.after_compact",            "repl.snapshot_chunk_staged",
    "repl.compact_flush",            "repl.snapshot_open",
};

static bool fp_name_known(const char *name)
{
    for (size_t i = 0; i < sizeof fp_known / sizeof fp_known[0]; i++)
        if (strcmp(fp_known[i], name) == 0)
            return true;
    return false;
}

static kl_code parse_one(char *item, fp_entry *e, kl_err *err)
{
    char *eq = strchr(item, '=');
    if (eq == NULL || eq == item || (size_t)(eq - item) >= FP_NAME_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "KEYLOAD_FAILPOINTS",
                       "KEYLOAD_FAILPOINTS: item '%.64s' is not name=action", item);
    memset(e, 0, sizeof *e);
    memcpy(e->name, item, (size_t)(eq - item));
    if (!fp_name_known(e->name))
        return kl_fail(err, KL_INVALID_ARGUMENT, "KEYLOAD_FAILPOINTS",
                       "KEYLOAD_FAILPOINTS: '%s' is not a failpoint of this build (see common/failpoint.h)",
                       e->name);
    char *act = eq + 1;
    char *star = strchr(act, '*');
    if (star != NULL) {
        char *end;
        long n = strtol(act, &end, 10);
        if (end != star || n <= 0)
            return kl_fail(err, KL_INVALID_ARGUMENT, "KEYLOAD_FAILPOINTS",
                           "KEYLOAD_FAILPOINTS: bad hit count for '%s'", e->name);
        e->on_hit = (unsigned)n;
        act = star + 1;
    }
    if (strcmp(act, "exit") == 0) {
        e->action = FP_EXIT;
    } else if (strcmp(act, "abort") == 0) {
        e->action = FP_ABORT;
    } else if (strncmp(act, "sleep(", 6) == 0) {
        char *end;
        long ms = strtol(act + 6, &end, 10);
        if (ms < 0 || strcmp(end, ")") != 0)
            return kl_fail(err, KL_INVALID_ARGUMENT, "KEYLOAD_FAILPOINTS",
                           "KEYLOAD_FAILPOINTS: bad sleep for '%s'", e->name);
        e->action = FP_SLEEP;
        e->arg = ms;
    } else if (strncmp(act, "error(", 6) == 0) {
        char code[32];
        size_t len = strlen(act + 6);
        if (len < 2 || len - 1 >= sizeof code || act[6 + len - 1] != ')')
            return kl_fail(err, KL_INVALID_ARGUMENT, "KEYLOAD_FAILPOINTS",
                           "KEYLOAD_FAILPOINTS: bad error for '%s'", e->name);
        memcpy(code, act + 6, len - 1);
        code[len - 1] = '\0';
        int c = kl_code_parse(code);
        if (c <= 0)
            return kl_fail(err, KL_INVALID_ARGUMENT, "KEYLOAD_FAILPOINTS",
                           "KEYLOAD_FAILPOINTS: unknown status code for '%s'", e->name);
        e->action = FP_ERROR;
        e->arg = c;
    } else {
        return kl_fail(err, KL_INVALID_ARGUMENT, "KEYLOAD_FAILPOINTS",
                       "KEYLOAD_FAILPOINTS: unknown action for '%s'", e->name);
    }
    return KL_OK;
}

kl_code kl_failpoint_configure(const char *spec, kl_err *err)
{
    fp_count = 0;
    kl_failpoints_armed = false;
    if (spec == NULL || spec[0] == '\0')
        return KL_OK;
    char buf[2048];
    if (strlen(spec) >= sizeof buf)
        return kl_fail(err, KL_INVALID_ARGUMENT, "KEYLOAD_FAILPOINTS",
                       "KEYLOAD_FAILPOINTS is longer than %zu bytes", sizeof buf - 1);
    strcpy(buf, spec);
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        if (fp_count == FP_MAX)
            return kl_fail(err, KL_INVALID_ARGUMENT, "KEYLOAD_FAILPOINTS",
                           "KEYLOAD_FAILPOINTS names more than %d failpoints", FP_MAX);
        kl_code c = parse_one(item, &fp_table[fp_count], err);
        if (c != KL_OK) {
            fp_count = 0;
            return c;
        }
        fp_count++;
    }
    kl_failpoints_armed = fp_count > 0;
    return KL_OK;
}

kl_code kl_failpoint_init(kl_err *err)
{
    return kl_failpoint_configure(getenv("KEYLOAD_FAILPOINTS"), err);
}

kl_code kl_failpoint_eval(const char *name, kl_err *err)
{
    for (int i = 0; i < fp_count; i++) {
        fp_entry *e = &fp_table[i];
        if (strcmp(e->name, name) != 0)
            continue;
        /* One atomic increment: exactly one thread sees the N-th hit. */
        unsigned hit = atomic_fetch_add(&e->hits, 1) + 1;
        if (e->on_hit != 0 && hit != e->on_hit)
            return KL_OK;
        switch (e->action) {
        case FP_EXIT:
            fprintf(stderr, "failpoint %s: exit\n", name);
            _exit(77);
        case FP_ABORT:
            fprintf(stderr, "failpoint %s: abort\n", name);
            abort();
        case FP_SLEEP: {
            struct timespec ts = {e->arg / 1000, (e->arg % 1000) * 1000000L};
            nanosleep(&ts, NULL);
            return KL_OK;
        }
        case FP_ERROR:
            return kl_fail(err, (kl_code)e->arg, "failpoint", "failpoint %s fired", name);
        }
    }
    return KL_OK;
}
