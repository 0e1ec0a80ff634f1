/* args: the argument iterator every command uses, and number parsing. */
#include "client/cli/cli.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

void cli_args_init(cli_args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->argc = argc;
    a->argv = argv;
}

bool cli_opt_is(const cli_args *a, const char *name)
{
    return strlen(name) == a->opt_len && strncmp(a->opt, name, a->opt_len) == 0;
}

const char *cli_opt_value(cli *c, cli_args *a)
{
    if (a->inline_val != NULL)
        return a->inline_val;
    if (a->i >= a->argc) {
        cli_usage(c, "option %.*s needs a value", (int)a->opt_len, a->opt);
        return NULL;
    }
    return a->argv[a->i++];
}

int cli_unknown_option(cli *c, const cli_args *a)
{
    return cli_usage(c, "unknown option %.*s", (int)a->opt_len, a->opt);
}

/* Applies a global option; 1 handled, 0 not global, -1 usage error reported. */
static int global_option(cli *c, cli_args *a)
{
    if (cli_opt_is(a, "--json")) {
        if (a->inline_val != NULL) {
            cli_usage(c, "option --json takes no value");
            return -1;
        }
        c->json = true;
        return 1;
    }
    const char **target = NULL;
    if (cli_opt_is(a, "--cluster"))
        target = &c->cluster;
    else if (cli_opt_is(a, "--database"))
        target = &c->database;
    else if (cli_opt_is(a, "--principal"))
        target = &c->principal;
    else if (cli_opt_is(a, "--key"))
        target = &c->key;
    if (target != NULL) {
        const char *v = cli_opt_value(c, a);
        if (v == NULL)
            return -1;
        *target = v;
        return 1;
    }
    if (cli_opt_is(a, "--timeout")) {
        const char *v = cli_opt_value(c, a);
        int64_t ms;
        if (v == NULL || !cli_parse_i64(c, "--timeout", v, 1, INT_MAX, &ms))
            return -1;
        c->timeout_ms = (int)ms;
        return 1;
    }
    return 0;
}

cli_arg_kind cli_next(cli *c, cli_args *a, const char **positional)
{
    for (;;) {
        if (a->i >= a->argc)
            return CLI_END;
        const char *s = a->argv[a->i++];
        if (!a->opts_done && strcmp(s, "--") == 0) {
            a->opts_done = true;
            continue;
        }
        if (a->opts_done || s[0] != '-' || s[1] == '\0' || (s[1] != '-' && !isalpha((unsigned char)s[1]))) {
            /* "-" (stdin) and negative numbers are positional. */
            *positional = s;
            return CLI_POSITIONAL;
        }
        if (s[1] != '-') {
            a->opt = s;
            a->opt_len = strlen(s);
            a->inline_val = NULL;
            if (cli_opt_is(a, "-h"))
                return CLI_OPTION;
            cli_usage(c, "unknown option %s (options are spelled --name)", s);
            return CLI_FAILED;
        }
        const char *eq = strchr(s, '=');
        a->opt = s;
        a->opt_len = eq ? (size_t)(eq - s) : strlen(s);
        a->inline_val = eq ? eq + 1 : NULL;
        int g = global_option(c, a);
        if (g < 0)
            return CLI_FAILED;
        if (g == 0)
            return CLI_OPTION;
    }
}

bool cli_parse_u64(cli *c, const char *name, const char *text, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (!isdigit((unsigned char)text[0]) || *end != '\0' || errno == ERANGE || v > max) {
        cli_usage(c, "%s must be a whole number from 0 to %llu", name, (unsigned long long)max);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_i64(cli *c, const char *name, const char *text, int64_t min, int64_t max,
                   int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    bool digits = isdigit((unsigned char)text[0]) ||
                  (text[0] == '-' && isdigit((unsigned char)text[1]));
    if (!digits || *end != '\0' || errno == ERANGE || v < min || v > max) {
        cli_usage(c, "%s must be a whole number from %lld to %lld", name, (long long)min,
                  (long long)max);
        return false;
    }
    *out = v;
    return true;
}

bool cli_split_lane(cli *c, const char *spec, char **queue, const char **lane)
{
    const char *slash = strchr(spec, '/');
    if (slash == NULL) {
        *queue = strdup(spec);
        *lane = "";
    } else {
        *queue = strndup(spec, (size_t)(slash - spec));
        *lane = slash + 1;
        if (**lane == '\0') {
            free(*queue);
            *queue = NULL;
            cli_usage(c, "QUEUE/LANE has an empty lane; leave out the '/' for the default lane");
            return false;
        }
    }
    if (*queue == NULL) {
        cli_usage(c, "out of memory");
        return false;
    }
    return true;
}
