/* keyload-mcp: the stdio MCP server (ARCHITECTURE.md "Processes"). main owns the configuration
 * (the CLI's environment variables) and the read loop: one request per line on stdin, each
 * at most MCP_MAX_LINE_BYTES long (a longer one is answered with a JSON-RPC error and
 * skipped), until end of input. stdout carries only protocol lines (jsonrpc.c); every log
 * line goes to stderr. */
#include "client/mcp/mcp.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_CLUSTER "deploy/local-rf3.json" /* the CLI's default (client/cli/cli.h) */
#define MAX_TIMEOUT_MS 600000

static const char HELP[] =
    "usage: keyload-mcp\n"
    "  A Model Context Protocol server on stdin/stdout (JSON-RPC 2.0, one message per line)\n"
    "  whose tools are KeyLoad's operations. Configured by the environment, like keyload:\n"
    "    KEYLOAD_CLUSTER     cluster file with the members' public keys (default " DEFAULT_CLUSTER ")\n"
    "    KEYLOAD_DATABASE    TENANT/DB (default " KL_DEFAULT_DATABASE ")\n"
    "    KEYLOAD_PRINCIPAL   the principal the tools act as (with KEYLOAD_KEY)\n"
    "    KEYLOAD_KEY         its Ed25519 secret key file (mode 0600)\n"
    "    KEYLOAD_TIMEOUT_MS  bound on each tool call's network time (default 5000)\n"
    "  Logs go to stderr; stdout carries protocol messages only.\n";

static const char *env_or(const char *name, const char *fallback)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : fallback;
}

/* KEYLOAD_TIMEOUT_MS: 1..600000 ms; false (reported) when malformed. */
static bool timeout_from_env(int *out)
{
    const char *v = getenv("KEYLOAD_TIMEOUT_MS");
    *out = KL_DEFAULT_TIMEOUT_MS;
    if (v == NULL || v[0] == '\0')
        return true;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno != 0 || *end != '\0' || n < 1 || n > MAX_TIMEOUT_MS) {
        fprintf(stderr, "keyload-mcp: KEYLOAD_TIMEOUT_MS must be an integer in 1..%d\n",
                MAX_TIMEOUT_MS);
        return false;
    }
    *out = (int)n;
    return true;
}

typedef enum { LINE_OK, LINE_TOO_LONG, LINE_EOF } line_status;

/* Reads one line into *buf (grown up to MCP_MAX_LINE_BYTES + 1, owned by the caller),
 * without its newline or a trailing CR. A line over the bound is consumed to its end and
 * reported LINE_TOO_LONG with nothing kept. LINE_EOF only when no byte was read. */
static line_status read_line(FILE *in, char **buf, size_t *cap, size_t *len)
{
    *len = 0;
    bool any = false, too_long = false;
    int ch;
    while ((ch = getc(in)) != EOF) {
        any = true;
        if (ch == '\n')
            break;
        if (too_long)
            continue;
        if (*len == MCP_MAX_LINE_BYTES) {
            too_long = true;
            continue;
        }
        if (*len + 1 >= *cap) {
            size_t ncap = *cap ? *cap * 2 : 4096;
            if (ncap > MCP_MAX_LINE_BYTES + 1)
                ncap = MCP_MAX_LINE_BYTES + 1;
            char *n = realloc(*buf, ncap);
            if (n == NULL) { /* treat as too long: the line cannot be held */
                too_long = true;
                continue;
            }
            *buf = n;
            *cap = ncap;
        }
        (*buf)[(*len)++] = (char)ch;
    }
    if (!any)
        return LINE_EOF;
    if (too_long) {
        *len = 0;
        return LINE_TOO_LONG;
    }
    if (*len > 0 && (*buf)[*len - 1] == '\r')
        (*len)--;
    return LINE_OK;
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        bool help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
        fputs(HELP, help ? stdout : stderr);
        return help ? 0 : 2;
    }
    /* A host that goes away makes writes fail (EPIPE) instead of killing the process. */
    signal(SIGPIPE, SIG_IGN);
    mcp_server s = {
        .cfg = {
            .cluster = env_or("KEYLOAD_CLUSTER", DEFAULT_CLUSTER),
            .database = env_or("KEYLOAD_DATABASE", KL_DEFAULT_DATABASE),
            .principal = env_or("KEYLOAD_PRINCIPAL", NULL),
            .key = env_or("KEYLOAD_KEY", NULL),
        },
    };
    if (!timeout_from_env(&s.cfg.timeout_ms))
        return 2;
    fprintf(stderr, "keyload-mcp: serving on stdio (cluster %s, database %s, principal %s)\n",
            s.cfg.cluster, s.cfg.database, s.cfg.principal ? s.cfg.principal : "none");

    char *buf = NULL;
    size_t cap = 0, len;
    line_status st;
    bool ok = true;
    while (ok && (st = read_line(stdin, &buf, &cap, &len)) != LINE_EOF) {
        if (st == LINE_TOO_LONG) {
            fprintf(stderr, "keyload-mcp: refused a line over %u bytes\n", MCP_MAX_LINE_BYTES);
            char m[96];
            snprintf(m, sizeof m, "message larger than %u bytes", MCP_MAX_LINE_BYTES);
            ok = mcp_write_error(stdout, NULL, MCP_INVALID_REQUEST, m);
        } else if (len > 0) {
            ok = mcp_handle_line(&s, stdout, buf, len);
        }
    }
    if (!ok)
        fprintf(stderr, "keyload-mcp: stdout closed; exiting\n");
    free(buf);
    mcp_server_close(&s);
    fprintf(stderr, "keyload-mcp: end of input; exiting\n");
    return 0;
}
