/* tools_status: keyload-mcp's cluster_status tool, `keyload cluster-status --json` as a
 * tool: every member of KEYLOAD_CLUSTER asked for its MemberStatus (role, term, indexes,
 * catalog version), answered as the SDK's canonical object (kl_cluster_status_to_json). It
 * needs no session: members answer MemberStatus to anyone, and it must work when the
 * principal's key does not (that is when one asks). */
#include "client/mcp/mcp.h"

#include <stdint.h>

static kl_code cluster_status(const mcp_call *call, const json_t *args, char **json, kl_err *err)
{
    int64_t ms = KL_CLUSTER_STATUS_MEMBER_TIMEOUT_MS;
    mcp_arg_int(args, "member_timeout_ms", &ms);
    if (ms > call->cfg->timeout_ms) /* as the CLI: never more than the call's bound */
        ms = call->cfg->timeout_ms;
    return kl_cluster_status_to_json(call->cfg->cluster, (int)ms, 0, json, err);
}

static const mcp_arg status_args[] = {
    {"member_timeout_ms", MCP_ARG_INTEGER, false,
     "bound on each member's answer (default 500, at most KEYLOAD_TIMEOUT_MS)", 1, 600000, NULL,
     0},
    {NULL, 0, false, NULL, 0, 0, NULL, 0}};

const mcp_tool mcp_status_tools[] = {
    {"cluster_status",
     "Every member's role, term, commit/applied index and catalog version, per partition, "
     "with each partition's leader (keyload cluster-status).", status_args, NULL,
     cluster_status, false, false},
    {NULL, NULL, NULL, NULL, NULL, false, false},
};
