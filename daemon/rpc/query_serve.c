/* query_serve: keyload.v1.Query, Q1 statements (proto/keyload/v1/query.proto). It owns no
 * state: each statement is parsed (common/q1.h) and mapped to its native request
 * (common/q1_plan.h), the Query permission is checked on the statement's routing queue, and
 * the native request then runs through exactly the native path: a mutating alias is
 * submitted as a Batch (same validation, authorization, replay and committed refusals as
 * keyload.v1.Batch, under the statement's command id), a read alias passes the same
 * read-index barrier and node read as keyload.v1.InspectQueueTransfer(Receipt). The answer is
 * the native answer's bytes inside a QueryAnswer; errors keep their native codes. The gate
 * (sessions) ran before any of this, as for every gated method. */
#include "daemon/rpc/serve.h"

#include "common/guid.h"
#include "common/names.h"
#include "common/q1_plan.h"
#include "keyload/v1/query.pb-c.h"

#include <stdlib.h>
#include <string.h>

/* Decodes the request, parses and maps its statement. On KL_OK *plan, *tenant and *database
 * are filled (tenant/database: KL_NAME_LEN_MAX + 1 buffers). */
static kl_code prepare(kl_rpc_call *call, kl_q1_plan *plan, char *tenant, char *database, kl_err *err)
{
    size_t len;
    const uint8_t *p = kl_rpc_call_payload(call, &len);
    memset(plan, 0, sizeof *plan);
    Keyload__V1__QueryRequest *r = keyload__v1__query_request__unpack(NULL, len, p);
    if (r == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "payload", "the Query request does not decode");
    kl_q1_call q;
    memset(&q, 0, sizeof q);
    kl_code rc = kl_name_check("tenant", r->tenant, err);
    if (rc == KL_OK)
        rc = kl_name_check("database", r->database, err);
    if (rc == KL_OK && r->default_command_id.len != 0 &&
        !kl_guid_valid(r->default_command_id.data, r->default_command_id.len))
        rc = kl_fail(err, KL_INVALID_ARGUMENT, "default_command_id",
                     "default_command_id must be empty or a 16-byte GUID that is not all zero");
    if (rc == KL_OK)
        rc = kl_q1_parse(r->statement, strlen(r->statement), &q, err);
    if (rc == KL_OK)
        rc = kl_q1_plan_build(&q, r->tenant, r->database,
                              r->default_command_id.len ? r->default_command_id.data : NULL, plan, err);
    if (rc == KL_OK) {
        /* kl_name_check bounded both to KL_NAME_LEN_MAX bytes */
        strcpy(tenant, r->tenant);
        strcpy(database, r->database);
    }
    kl_q1_call_free(&q);
    keyload__v1__query_request__free_unpacked(r, NULL);
    return rc;
}

/* The read half of a Q1 read statement, once its barrier passed: the statement is parsed
 * again and served as the transfer read it maps to. */
static void serve_query_read(kl_service *s, kl_rpc_call *call, kl_node_read_kind query,
                             const kl_service_read_args *args)
{
    (void)query; /* KL_NODE_QUERY_READ: the statement names the read */
    (void)args;
    kl_q1_plan plan;
    char tenant[KL_NAME_LEN_MAX + 1], database[KL_NAME_LEN_MAX + 1];
    kl_err err;
    kl_err_clear(&err);
    uint8_t *answer = NULL;
    size_t alen = 0;
    const char *who = kl_service_principal(call);
    kl_code rc = prepare(call, &plan, tenant, database, &err);
    if (rc == KL_OK)
        rc = kl_node_query_access(s->node, who, tenant, database, plan.queue, plan.transfer, &err);
    if (rc == KL_OK) {
        kl_node_read_kind kind = plan.op == KL_Q1_OP_INSPECT_TRANSFER
                                              ? KL_NODE_INSPECT_TRANSFER
                                              : KL_NODE_TRANSFER_RECEIPT;
        rc = kl_node_transfer_read(s->node, kind, who, plan.request, plan.request_len, &answer,
                                   &alen, &err);
    }
    if (rc == KL_OK)
        kl_service_reply_query(call, plan.alias, (int)plan.op, answer, alen);
    else
        kl_rpc_reply_error(call, &err, NULL);
    free(answer);
    kl_q1_plan_free(&plan);
}

void kl_service_query(void *owner, kl_rpc_call *call)
{
    kl_service *s = owner;
    if (!kl_service_check_lease(s, call))
        return;
    kl_q1_plan plan;
    char tenant[KL_NAME_LEN_MAX + 1], database[KL_NAME_LEN_MAX + 1];
    kl_err err;
    kl_err_clear(&err);
    if (prepare(call, &plan, tenant, database, &err) != KL_OK) {
        kl_rpc_reply_error(call, &err, NULL);
        return;
    }
    if (plan.op != KL_Q1_OP_BATCH) {
        /* Authorized after the barrier, against the state the read will see. */
        kl_service_start_read(s, call, KL_NODE_QUERY_READ, serve_query_read, NULL);
        kl_q1_plan_free(&plan);
        return;
    }
    /* A member that does not lead says so before judging permissions on its catalog. */
    uint64_t next_index, next_term;
    bool serving;
    kl_repl_next(s->repl, &next_index, &next_term, &serving);
    if (!serving) {
        kl_fail(&err, KL_NOT_LEADER, "not_leader",
                "this member does not lead partition %d now; send the query to the leader",
                s->partition->id);
        kl_service_reply_not_leader(s, call, &err);
    } else if (kl_node_query_access(s->node, kl_service_principal(call), tenant, database, plan.queue,
                                    plan.transfer, &err) != KL_OK) {
        kl_rpc_reply_error(call, &err, NULL);
    } else {
        kl_service_submit_batch(s, call, plan.request, plan.request_len, plan.alias);
    }
    kl_q1_plan_free(&plan);
}
