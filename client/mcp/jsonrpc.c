/* jsonrpc: keyload-mcp's JSON-RPC 2.0 framing and MCP methods. It owns what goes to stdout:
 * exactly one compact JSON object and a newline per answer, flushed at once, and nothing
 * else. Methods: initialize (protocol version negotiation), ping, tools/list, tools/call;
 * notifications (no id) are never answered; answers the client sends are ignored. Batches
 * (JSON arrays) were removed from MCP in 2025-06-18 and are refused as invalid requests.
 * Every refusal keeps the server serving: nothing a line holds can stop it. */
#include "client/mcp/mcp.h"

#include <stdlib.h>
#include <string.h>

/* Newest first: an unknown requested version is answered with the first. */
static const char *const versions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};

static const char INSTRUCTIONS[] =
    "KeyLoad, a replicated durable queue database. Tools act on the database of "
    "KEYLOAD_DATABASE as the principal KEYLOAD_PRINCIPAL. Every mutation takes an optional "
    "command_id (GUID): after UNKNOWN_WRITE_OUTCOME call again with the same command_id and "
    "arguments to learn the outcome. Results are KeyLoad's canonical JSON (as `keyload "
    "--json` prints it); tokens are base64 strings and are credentials.";

static bool write_msg(FILE *out, json_t *msg)
{
    char *s = msg != NULL ? json_dumps(msg, JSON_COMPACT) : NULL;
    json_decref(msg);
    if (s == NULL) { /* out of memory: still one protocol line */
        static const char oom[] =
            "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32603,\"message\":\"out of memory\"}}\n";
        return fputs(oom, out) >= 0 && fflush(out) == 0;
    }
    bool ok = fputs(s, out) >= 0 && fputc('\n', out) != EOF && fflush(out) == 0;
    free(s);
    return ok;
}

bool mcp_write_error(FILE *out, json_t *id, int code, const char *message)
{
    json_t *msg = json_pack("{s:s,s:O,s:{s:i,s:s}}", "jsonrpc", "2.0", "id",
                            id != NULL ? id : json_null(), "error", "code", code, "message",
                            message);
    return write_msg(out, msg);
}

static bool write_result(FILE *out, json_t *id, json_t *result)
{
    if (result == NULL)
        return mcp_write_error(out, id, MCP_INTERNAL_ERROR, "out of memory");
    return write_msg(out, json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", id, "result", result));
}

static json_t *initialize(mcp_server *s, const json_t *params, mcp_rpc_error *e)
{
    const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
    if (asked == NULL) {
        mcp_rpc_fail(e, MCP_INVALID_PARAMS, "initialize: params.protocolVersion must be a string");
        return NULL;
    }
    const char *v = versions[0];
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++)
        if (strcmp(asked, versions[i]) == 0)
            v = versions[i];
    snprintf(s->protocol, sizeof s->protocol, "%s", v);
    s->initialized = true;
    const json_t *ci = json_object_get(json_object_get(params, "clientInfo"), "name");
    fprintf(stderr, "keyload-mcp: initialize from %.64s: protocol %s (asked %.32s)\n",
            json_is_string(ci) ? json_string_value(ci) : "an unnamed client", v, asked);
    return json_pack("{s:s,s:{s:{}},s:{s:s,s:s},s:s}", "protocolVersion", v, "capabilities",
                     "tools", "serverInfo", "name", MCP_SERVER_NAME, "version", MCP_SERVER_VERSION,
                     "instructions", INSTRUCTIONS);
}

/* A request (it has an id): answers it. */
static bool request(mcp_server *s, FILE *out, json_t *id, const char *method, const json_t *params)
{
    mcp_rpc_error e = {MCP_INTERNAL_ERROR, "internal error"};
    json_t *result = NULL;
    bool ok;
    if (params != NULL && !json_is_object(params))
        return mcp_write_error(out, id, MCP_INVALID_PARAMS, "params must be an object");
    if (strcmp(method, "initialize") == 0) {
        /* NULL with e still internal is out of memory: write_result answers that */
        result = initialize(s, params, &e);
        ok = result != NULL || e.code == MCP_INTERNAL_ERROR;
    } else if (strcmp(method, "ping") == 0) {
        result = json_object();
        ok = true;
    } else if (strcmp(method, "tools/list") == 0) {
        result = mcp_tools_list();
        ok = true;
    } else if (strcmp(method, "tools/call") == 0) {
        ok = mcp_tools_call(s, params, &result, &e);
    } else {
        char m[160];
        snprintf(m, sizeof m, "method not found: %.64s", method);
        return mcp_write_error(out, id, MCP_METHOD_NOT_FOUND, m);
    }
    return ok ? write_result(out, id, result) : mcp_write_error(out, id, e.code, e.message);
}

bool mcp_handle_line(mcp_server *s, FILE *out, const char *line, size_t len)
{
    json_error_t jerr;
    json_t *msg = json_loadb(line, len, JSON_DECODE_ANY, &jerr);
    if (msg == NULL) {
        char m[200];
        snprintf(m, sizeof m, "parse error at byte %d: %.120s", jerr.position, jerr.text);
        return mcp_write_error(out, NULL, MCP_PARSE_ERROR, m);
    }
    bool ok = true;
    json_t *id = json_object_get(msg, "id");
    const json_t *method = json_object_get(msg, "method");
    if (!json_is_object(msg)) {
        ok = mcp_write_error(out, NULL, MCP_INVALID_REQUEST,
                             json_is_array(msg) ? "batches are not supported: send one message "
                                                  "per line"
                                                : "a message must be a JSON object");
    } else if (id != NULL && !json_is_string(id) && !json_is_integer(id)) {
        ok = mcp_write_error(out, NULL, MCP_INVALID_REQUEST, "id must be a string or an integer");
    } else if (!json_is_string(json_object_get(msg, "jsonrpc")) ||
               strcmp(json_string_value(json_object_get(msg, "jsonrpc")), "2.0") != 0) {
        ok = mcp_write_error(out, id, MCP_INVALID_REQUEST, "jsonrpc must be \"2.0\"");
    } else if (method == NULL && (json_object_get(msg, "result") || json_object_get(msg, "error"))) {
        /* an answer from the client: this server sends no requests, so nothing awaits it */
    } else if (!json_is_string(method)) {
        ok = mcp_write_error(out, id, MCP_INVALID_REQUEST, "method must be a string");
    } else if (id == NULL) {
        /* a notification: never answered; only initialized means anything here */
        if (strcmp(json_string_value(method), "notifications/initialized") == 0)
            fprintf(stderr, "keyload-mcp: client initialized\n");
    } else {
        ok = request(s, out, id, json_string_value(method), json_object_get(msg, "params"));
    }
    json_decref(msg);
    return ok;
}
