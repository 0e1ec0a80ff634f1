/* query: kl_client_query, Q1 statements over keyload.v1.Query (client/keyload.h). The
 * statement is parsed and mapped here with the daemon's own code (common/q1.h,
 * common/q1_plan.h) only to refuse a bad statement before any I/O and to learn which queue's
 * partition serves it; the daemon parses it again and executes it. Rows are rendered with
 * the canonical serializers (json.c, transfer_json.c) from the native answer bytes the
 * daemon returns, so a CALL prints exactly what the native call prints. */
#include "client/sdk/internal.h"

#include "common/q1_plan.h"
#include "keyload/v1/query.pb-c.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#define METHOD_QUERY "keyload.v1.Query"

/* One row's JSON from the native answer of `kind`; NULL with err set when it does not
 * decode or memory runs out. */
static char *render_row(Keyload__V1__QueryResultKind kind, const ProtobufCBinaryData *a, kl_err *err)
{
    char *row = NULL;
    switch (kind) {
    case KEYLOAD__V1__QUERY_RESULT_KIND__QUERY_RESULT_BATCH_RECEIPT: {
        Keyload__V1__BatchReceipt *r = keyload__v1__batch_receipt__unpack(NULL, a->len, a->data);
        if (r == NULL)
            break;
        row = kl_receipt_to_json(r, 0);
        keyload__v1__batch_receipt__free_unpacked(r, NULL);
        if (row == NULL)
            kl_sdk_oom(err);
        return row;
    }
    case KEYLOAD__V1__QUERY_RESULT_KIND__QUERY_RESULT_INSPECT_TRANSFER: {
        Keyload__V1__InspectQueueTransferAnswer *r =
            keyload__v1__inspect_queue_transfer_answer__unpack(NULL, a->len, a->data);
        if (r == NULL)
            break;
        row = kl_transfer_to_json(r, 0);
        keyload__v1__inspect_queue_transfer_answer__free_unpacked(r, NULL);
        if (row == NULL)
            kl_sdk_oom(err);
        return row;
    }
    case KEYLOAD__V1__QUERY_RESULT_KIND__QUERY_RESULT_TRANSFER_RECEIPT: {
        Keyload__V1__InspectQueueTransferReceiptAnswer *r =
            keyload__v1__inspect_queue_transfer_receipt_answer__unpack(NULL, a->len, a->data);
        if (r == NULL)
            break;
        row = kl_transfer_receipt_to_json(r, 0);
        keyload__v1__inspect_queue_transfer_receipt_answer__free_unpacked(r, NULL);
        if (row == NULL)
            kl_sdk_oom(err);
        return row;
    }
    default:
        kl_fail(err, KL_INTERNAL, "answer", "the Query answer has an unknown result kind %d",
                (int)kind);
        return NULL;
    }
    kl_fail(err, KL_INTERNAL, "answer", "the Query answer's native result does not decode");
    return NULL;
}

kl_code kl_query_answer_rows(const uint8_t *answer, size_t len, char **rows_json, kl_err *err)
{
    *rows_json = NULL;
    Keyload__V1__QueryAnswer *qa = keyload__v1__query_answer__unpack(NULL, len, answer);
    if (qa == NULL)
        return kl_fail(err, KL_INTERNAL, "answer", "the answer does not decode as keyload.v1.QueryAnswer");
    char *row = render_row(qa->kind, &qa->answer, err);
    keyload__v1__query_answer__free_unpacked(qa, NULL);
    if (row == NULL)
        return err ? err->code : KL_INTERNAL;
    /* Every alias answers one row today; the array leaves room for aliases that list. */
    size_t n = strlen(row);
    char *out = malloc(n + 3);
    if (out == NULL) {
        free(row);
        return kl_sdk_oom(err);
    }
    out[0] = '[';
    memcpy(out + 1, row, n);
    out[n + 1] = ']';
    out[n + 2] = '\0';
    free(row);
    *rows_json = out;
    return KL_OK;
}

kl_code kl_client_query(kl_client *c, const char *statement, char **rows_json, kl_err *err)
{
    *rows_json = NULL;
    if (statement == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "statement", "the statement is missing");
    char tenant[KL_SDK_NAME_MAX + 1], db[KL_SDK_NAME_MAX + 1];
    kl_code rc = kl_sdk_split_database(kl_client_database(c), tenant, db, err);
    if (rc != KL_OK)
        return rc;
    kl_q1_call call;
    kl_q1_plan plan;
    memset(&plan, 0, sizeof plan);
    /* One command id per call, sent along, so that every resend of this call (redirects,
     * new sessions) names the same command: a statement without WITH COMMAND_ID still
     * commits at most once per kl_client_query. */
    uint8_t default_id[KL_GUID_LEN];
    kl_guid_time_ordered_now(default_id);
    if ((rc = kl_q1_parse(statement, strlen(statement), &call, err)) != KL_OK)
        return rc;
    rc = kl_q1_plan_build(&call, tenant, db, default_id, &plan, err);
    kl_q1_call_free(&call);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__QueryRequest r = KEYLOAD__V1__QUERY_REQUEST__INIT;
    r.tenant = tenant;
    r.database = db;
    r.statement = (char *)statement;
    r.default_command_id.data = default_id;
    r.default_command_id.len = sizeof default_id;
    size_t len = keyload__v1__query_request__get_packed_size(&r), ans_len = 0;
    uint8_t *req = malloc(len ? len : 1), *ans = NULL;
    if (req == NULL) {
        kl_q1_plan_free(&plan);
        return kl_sdk_oom(err);
    }
    keyload__v1__query_request__pack(&r, req);
    rc = kl_sdk_partition_read(c, plan.queue, -1, METHOD_QUERY, req, len, &ans, &ans_len, err);
    sodium_memzero(req, len); /* the statement may hold tokens and bodies */
    free(req);
    kl_q1_plan_free(&plan);
    if (rc != KL_OK)
        return rc;
    rc = kl_query_answer_rows(ans, ans_len, rows_json, err);
    sodium_memzero(ans, ans_len);
    free(ans);
    return rc;
}
