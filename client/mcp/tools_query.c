/* tools_query: keyload-mcp's `query` tool, the MCP route of Q1 (`keyload sql --json` as a
 * tool): one CALL statement run by kl_client_query over the Query RPC, with the Query
 * permission and the underlying operation's own checks. Its result is {"rows": [...]}, the
 * object `keyload sql --json` prints (structuredContent must be an object). A mutating CALL
 * takes its command id from the statement (WITH COMMAND_ID 'guid'); without one the SDK
 * draws a fresh id per call, so a host that retries by itself must name one. The statement
 * may hold tokens: it is never logged. */
#include "client/mcp/mcp.h"

#include <stdlib.h>

static kl_code query(const mcp_call *call, const json_t *args, char **json, kl_err *err)
{
    char *rows = NULL;
    kl_code rc = kl_client_query(call->client, mcp_arg_str(args, "statement"), &rows, err);
    if (rc != KL_OK)
        return rc;
    json_error_t je;
    json_t *arr = json_loads(rows, 0, &je);
    free(rows);
    json_t *obj = arr != NULL && json_is_array(arr) ? json_pack("{s:o}", "rows", arr) : NULL;
    if (obj == NULL) {
        if (arr != NULL && !json_is_array(arr))
            json_decref(arr);
        return kl_fail(err, KL_INTERNAL, "rows", "the query's rows are not a JSON array");
    }
    *json = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(obj);
    return *json ? KL_OK : kl_fail(err, KL_INTERNAL, "oom", "out of memory");
}

static const mcp_arg query_args[] = {
    {"statement", MCP_ARG_STRING, true,
     "one Q1 statement: CALL alias(name => value, ...) [WITH COMMAND_ID 'guid'] (README, "
     "\"Q1 statements\")", 0, 0, NULL, 0},
    {NULL, 0, false, NULL, 0, 0, NULL, 0}};

const mcp_tool mcp_query_tools[] = {
    {"query",
     "Run one Q1 CALL statement (keyload.queue-transfer.*.v1, keyload.queue.*.v1) over the "
     "Query RPC; answers {\"rows\": [...]} in the CLI's canonical JSON.", query_args, NULL, query,
     true, true},
    {NULL, NULL, NULL, NULL, NULL, false, false},
};
