/* tools: the machinery of keyload-mcp's tool table. It owns the JSON Schema of every tool
 * (built from the table, so schema and checks cannot drift apart), the argument checks
 * done before any SDK call (missing, wrong type, unknown property, out of range: JSON-RPC
 * invalid params), the SDK client (opened on first use from the environment, kept), and
 * the shape of a result: the SDK's canonical JSON as text and as structuredContent, or
 * isError with kl_error_to_json.
 *
 * Adding a tool: one entry in a table of tools_queue.c, tools_transfer.c or tools_status.c (name,
 * description, argument list, and a build function for a mutation or a read function for
 * anything else). A mutation gets the optional command_id argument and its receipt answer
 * from here. */
#include "client/mcp/mcp.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const mcp_arg command_id_arg = {
    "command_id", MCP_ARG_STRING, false,
    "GUID naming this command (default: a fresh one). Replaying the same command_id with "
    "the same arguments returns the original receipt; do so after UNKNOWN_WRITE_OUTCOME.",
    0, 0, NULL, 0};

bool mcp_rpc_fail(mcp_rpc_error *e, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    e->code = code;
    return false;
}

/* ---------------------------------------------------------------- the table */

static const mcp_tool *const groups[] = {mcp_queue_tools, mcp_transfer_tools, mcp_status_tools,
                                         mcp_query_tools};

static const mcp_tool *find_tool(const char *name)
{
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++)
        for (const mcp_tool *t = groups[g]; t->name != NULL; t++)
            if (strcmp(t->name, name) == 0)
                return t;
    return NULL;
}

/* Calls fn for each argument of t, command_id last for mutations. */
#define FOR_EACH_ARG(t, a, body)                                                              \
    do {                                                                                      \
        for (const mcp_arg *a = (t)->args; a->name != NULL; a++) {                            \
            body;                                                                             \
        }                                                                                     \
        if ((t)->build != NULL) {                                                             \
            const mcp_arg *a = &command_id_arg;                                               \
            body;                                                                             \
        }                                                                                     \
    } while (0)

static void integer_range(const mcp_arg *a, int64_t *min, int64_t *max)
{
    *min = a->min;
    *max = a->max;
    if (a->min == 0 && a->max == 0)
        *max = INT64_MAX;
}

/* One property's JSON Schema. */
static json_t *arg_schema(const mcp_arg *a)
{
    json_t *p = NULL;
    int64_t min, max;
    switch (a->type) {
    case MCP_ARG_STRING:
        p = json_pack("{s:s}", "type", "string");
        if (p != NULL && a->choices != NULL) {
            json_t *e = json_array();
            for (const char *const *c = a->choices; e != NULL && *c != NULL; c++)
                json_array_append_new(e, json_string(*c));
            json_object_set_new(p, "enum", e);
        }
        break;
    case MCP_ARG_INTEGER:
    case MCP_ARG_INTEGER_OR_NULL:
        integer_range(a, &min, &max);
        p = json_pack("{s:s,s:I,s:I}", "type", "integer", "minimum", (json_int_t)min, "maximum",
                      (json_int_t)max);
        if (p != NULL && a->type == MCP_ARG_INTEGER_OR_NULL)
            json_object_set_new(p, "type", json_pack("[s,s]", "integer", "null"));
        break;
    case MCP_ARG_BOOLEAN:
        p = json_pack("{s:s}", "type", "boolean");
        break;
    case MCP_ARG_STRING_ARRAY:
        p = json_pack("{s:s,s:{s:s},s:I,s:I}", "type", "array", "items", "type", "string",
                      "minItems", (json_int_t)a->min_items, "maxItems",
                      (json_int_t)MCP_MAX_ARRAY_ITEMS);
        break;
    case MCP_ARG_STRING_MAP:
        p = json_pack("{s:s,s:{s:s},s:I}", "type", "object", "additionalProperties", "type",
                      "string", "maxProperties", (json_int_t)MCP_MAX_MAP_ENTRIES);
        break;
    }
    if (p != NULL)
        json_object_set_new(p, "description", json_string(a->description));
    return p;
}

static json_t *tool_json(const mcp_tool *t)
{
    json_t *props = json_object(), *req = json_array();
    FOR_EACH_ARG(t, a, {
        json_object_set_new(props, a->name, arg_schema(a));
        if (a->required)
            json_array_append_new(req, json_string(a->name));
    });
    return json_pack("{s:s,s:s,s:{s:s,s:o,s:o,s:b},s:{s:b}}", "name", t->name, "description",
                     t->description, "inputSchema", "type", "object", "properties", props,
                     "required", req, "additionalProperties", 0, "annotations", "readOnlyHint",
                     t->read != NULL && !t->read_may_write);
}

json_t *mcp_tools_list(void)
{
    json_t *tools = json_array();
    if (tools == NULL)
        return NULL;
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++)
        for (const mcp_tool *t = groups[g]; t->name != NULL; t++) {
            json_t *j = tool_json(t);
            if (j == NULL || json_array_append_new(tools, j) != 0) {
                json_decref(tools);
                return NULL;
            }
        }
    return json_pack("{s:o}", "tools", tools);
}

/* ---------------------------------------------------------------- argument checks */

static const mcp_arg *find_arg(const mcp_tool *t, const char *name)
{
    const mcp_arg *found = NULL;
    FOR_EACH_ARG(t, a, {
        if (found == NULL && strcmp(a->name, name) == 0)
            found = a;
    });
    return found;
}

static bool check_value(const mcp_tool *t, const mcp_arg *a, const json_t *v, mcp_rpc_error *e)
{
    int64_t min, max;
    size_t n;
    switch (a->type) {
    case MCP_ARG_STRING:
        if (!json_is_string(v))
            return mcp_rpc_fail(e, MCP_INVALID_PARAMS, "%s: argument %s must be a string",
                                t->name, a->name);
        if (a->choices != NULL) {
            for (const char *const *c = a->choices; *c != NULL; c++)
                if (strcmp(*c, json_string_value(v)) == 0)
                    return true;
            return mcp_rpc_fail(e, MCP_INVALID_PARAMS,
                                "%s: argument %s must be one of the schema's enum values",
                                t->name, a->name);
        }
        return true;
    case MCP_ARG_INTEGER_OR_NULL:
        if (json_is_null(v))
            return true;
        /* fall through */
    case MCP_ARG_INTEGER:
        integer_range(a, &min, &max);
        if (!json_is_integer(v))
            return mcp_rpc_fail(e, MCP_INVALID_PARAMS, "%s: argument %s must be an integer",
                                t->name, a->name);
        if (json_integer_value(v) < min || json_integer_value(v) > max)
            return mcp_rpc_fail(e, MCP_INVALID_PARAMS,
                                "%s: argument %s must be within %" PRId64 "..%" PRId64, t->name,
                                a->name, min, max);
        return true;
    case MCP_ARG_BOOLEAN:
        return json_is_boolean(v) ? true
                                  : mcp_rpc_fail(e, MCP_INVALID_PARAMS,
                                                 "%s: argument %s must be a boolean", t->name,
                                                 a->name);
    case MCP_ARG_STRING_ARRAY:
        if (!json_is_array(v))
            return mcp_rpc_fail(e, MCP_INVALID_PARAMS, "%s: argument %s must be an array",
                                t->name, a->name);
        n = json_array_size(v);
        if (n < a->min_items || n > MCP_MAX_ARRAY_ITEMS)
            return mcp_rpc_fail(e, MCP_INVALID_PARAMS,
                                "%s: argument %s must hold %zu..%d items", t->name, a->name,
                                a->min_items, MCP_MAX_ARRAY_ITEMS);
        for (size_t i = 0; i < n; i++)
            if (!json_is_string(json_array_get(v, i)))
                return mcp_rpc_fail(e, MCP_INVALID_PARAMS,
                                    "%s: argument %s[%zu] must be a string", t->name, a->name, i);
        return true;
    case MCP_ARG_STRING_MAP: {
        if (!json_is_object(v))
            return mcp_rpc_fail(e, MCP_INVALID_PARAMS, "%s: argument %s must be an object",
                                t->name, a->name);
        if (json_object_size(v) > MCP_MAX_MAP_ENTRIES)
            return mcp_rpc_fail(e, MCP_INVALID_PARAMS, "%s: argument %s holds more than %d keys",
                                t->name, a->name, MCP_MAX_MAP_ENTRIES);
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x)
            if (!json_is_string(x))
                return mcp_rpc_fail(e, MCP_INVALID_PARAMS,
                                    "%s: argument %s: every value must be a string", t->name,
                                    a->name);
        return true;
    }
    }
    return mcp_rpc_fail(e, MCP_INTERNAL_ERROR, "%s: argument %s has no type", t->name, a->name);
}

/* The arguments against the tool's schema: an object, no unknown property, every required
 * one present, each of its type. Messages name the property, never its value. */
static bool check_args(const mcp_tool *t, const json_t *args, mcp_rpc_error *e)
{
    if (!json_is_object(args))
        return mcp_rpc_fail(e, MCP_INVALID_PARAMS, "%s: arguments must be an object", t->name);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)args, k, v) {
        const mcp_arg *a = find_arg(t, k);
        if (a == NULL)
            return mcp_rpc_fail(e, MCP_INVALID_PARAMS, "%s: unknown argument '%.64s'", t->name, k);
        if (!check_value(t, a, v, e))
            return false;
    }
    bool ok = true;
    FOR_EACH_ARG(t, a, {
        if (ok && a->required && json_object_get(args, a->name) == NULL)
            ok = mcp_rpc_fail(e, MCP_INVALID_PARAMS, "%s: missing required argument %s",
                              t->name, a->name);
    });
    return ok;
}

/* ---------------------------------------------------------------- calls */

/* The SDK client, opened on first use as the CLI opens it (client/cli/send.c). */
static kl_code client_of(mcp_server *s, kl_client **out, kl_err *err)
{
    if (s->client == NULL) {
        const mcp_config *c = &s->cfg;
        kl_code rc;
        if ((c->principal == NULL) != (c->key == NULL))
            return kl_fail(err, KL_INVALID_ARGUMENT, "principal",
                           "KEYLOAD_PRINCIPAL and KEYLOAD_KEY go together: set both or neither");
        if (c->principal != NULL)
            rc = kl_client_open_principal(c->cluster, c->database, c->timeout_ms, c->principal,
                                          c->key, &s->client, err);
        else
            rc = kl_client_open(c->cluster, c->database, c->timeout_ms, &s->client, err);
        if (rc != KL_OK) {
            s->client = NULL;
            return rc;
        }
    }
    *out = s->client;
    return KL_OK;
}

void mcp_server_close(mcp_server *s)
{
    kl_client_close(s->client);
    s->client = NULL;
}

/* A mutation: one batch under command_id, sent; its receipt's canonical JSON. */
static kl_code run_mutation(const mcp_tool *t, kl_client *c, const json_t *args, char **json,
                            kl_err *err)
{
    kl_batch *b;
    kl_code rc = kl_batch_new(mcp_arg_str(args, "command_id"), &b, err);
    if (rc != KL_OK)
        return rc;
    kl_receipt *r = NULL;
    if ((rc = t->build(c, b, args, err)) == KL_OK && (rc = kl_client_batch(c, b, &r, err)) == KL_OK) {
        *json = kl_receipt_to_json(r->decoded, 0);
        if (*json == NULL)
            rc = kl_fail(err, KL_INTERNAL, "oom", "out of memory while writing the receipt");
    }
    kl_receipt_free(r);
    kl_batch_free(b);
    return rc;
}

/* {"content":[{"type":"text","text":T}],"structuredContent":O[,"isError":true]} */
static json_t *tool_result(char *text, bool is_error)
{
    json_t *obj = json_loads(text, 0, NULL);
    json_t *r = obj != NULL ? json_pack("{s:[{s:s,s:s}],s:o}", "content", "type", "text", "text",
                                        text, "structuredContent", obj)
                            : NULL;
    if (r != NULL && is_error)
        json_object_set_new(r, "isError", json_true());
    return r;
}

static json_t *error_result(const kl_err *err)
{
    char *text = kl_error_to_json(err, 0);
    json_t *r = text != NULL ? tool_result(text, true) : NULL;
    free(text);
    return r;
}

bool mcp_tools_call(mcp_server *s, const json_t *params, json_t **result, mcp_rpc_error *e)
{
    *result = NULL;
    if (!json_is_object(params))
        return mcp_rpc_fail(e, MCP_INVALID_PARAMS, "tools/call: params must be an object");
    const char *name = json_string_value(json_object_get(params, "name"));
    if (name == NULL)
        return mcp_rpc_fail(e, MCP_INVALID_PARAMS, "tools/call: params.name must be a string");
    const mcp_tool *t = find_tool(name);
    if (t == NULL)
        return mcp_rpc_fail(e, MCP_INVALID_PARAMS, "unknown tool '%.64s' (tools/list names them)",
                            name);
    json_t *empty = json_object();
    const json_t *args = json_object_get(params, "arguments");
    if (args == NULL || json_is_null(args))
        args = empty;
    bool ok = check_args(t, args, e);
    if (!ok) {
        json_decref(empty);
        fprintf(stderr, "keyload-mcp: tools/call %s: invalid params\n", t->name);
        return false;
    }
    kl_err err;
    kl_err_clear(&err);
    kl_client *c = NULL;
    char *json = NULL;
    kl_code rc = t->needs_client ? client_of(s, &c, &err) : KL_OK;
    if (rc == KL_OK)
        rc = t->build != NULL ? run_mutation(t, c, args, &json, &err)
                              : t->read(&(mcp_call){c, &s->cfg}, args, &json, &err);
    json_decref(empty);
    /* A malformed argument the schema cannot express (base64, a missing alternative) is
     * the handler's INVALID_ARGUMENT with detail "usage", as in the CLI (output.c). */
    if (rc == KL_INVALID_ARGUMENT && strcmp(err.detail, "usage") == 0) {
        free(json);
        fprintf(stderr, "keyload-mcp: tools/call %s: invalid params\n", t->name);
        return mcp_rpc_fail(e, MCP_INVALID_PARAMS, "%s: %s", t->name, err.message);
    }
    fprintf(stderr, "keyload-mcp: tools/call %s: %s%s%s\n", t->name, kl_code_name(rc),
            rc == KL_OK || err.detail[0] == '\0' ? "" : " detail ", rc == KL_OK ? "" : err.detail);
    *result = rc == KL_OK ? tool_result(json, false) : error_result(&err);
    free(json);
    if (*result == NULL)
        return mcp_rpc_fail(e, MCP_INTERNAL_ERROR, "%s: out of memory writing the result", t->name);
    return true;
}
