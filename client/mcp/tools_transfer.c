/* tools_transfer: keyload-mcp's remote transfer tools (ARCHITECTURE.md "Engine"), mirroring `keyload
 * transfer create|accept|complete|inspect|receipt|pending|pause|resume|failure|advance|repair`
 * (client/cli/cmd_transfer.c) and answering the same canonical JSON as its --json.
 *
 * Tokens travel as base64 strings: in the arguments of accept (intent_token) and complete
 * (receipt_token), and in the results of create (the receipt's intent_token), receipt and
 * inspect. They are credentials: never logged, never part of an error message. pending,
 * a listing, leaves them out as the CLI does (KL_JSON_OMIT_TOKENS); inspect one transfer
 * for its token. */
#include "client/mcp/mcp.h"

#include <stdlib.h>
#include <string.h>

#define END_ARG {NULL, 0, false, NULL, 0, 0, NULL, 0}
#define SOURCE_ARGS(req)                                                                          \
    {"source_queue", MCP_ARG_STRING, req, "the source queue", 0, 0, NULL, 0},                   \
    {"source_lane", MCP_ARG_STRING, false, "the source lane (default \"default\")", 0, 0, NULL, 0}
#define DEST_ARGS                                                                                 \
    {"dest_queue", MCP_ARG_STRING, true, "the destination queue (on another partition)", 0, 0,  \
     NULL, 0},                                                                                    \
    {"dest_lane", MCP_ARG_STRING, false, "the destination lane (default \"default\")", 0, 0,    \
     NULL, 0}
#define ID_ARG {"transfer_id", MCP_ARG_STRING, true, "the transfer id (GUID)", 0, 0, NULL, 0}

static const char *const encodings[] = {"utf8", "base64", NULL};

static kl_code transfer_create(kl_client *c, kl_batch *b, const json_t *args, kl_err *err)
{
    (void)c;
    kl_message *m;
    kl_code rc = mcp_message_from_args(args, &m, err);
    if (rc == KL_OK)
        rc = kl_batch_create_transfer(b, mcp_arg_str(args, "source_queue"),
                                      mcp_arg_str(args, "source_lane"),
                                      mcp_arg_str(args, "transfer_id"),
                                      mcp_arg_str(args, "dest_queue"),
                                      mcp_arg_str(args, "dest_lane"), m, err);
    kl_message_free(m);
    return rc;
}

static kl_code transfer_accept(kl_client *c, kl_batch *b, const json_t *args, kl_err *err)
{
    (void)c;
    uint8_t *tok;
    size_t len;
    kl_code rc = mcp_arg_b64(args, "intent_token", &tok, &len, err);
    if (rc == KL_OK)
        rc = kl_batch_accept_transfer(b, mcp_arg_str(args, "dest_queue"),
                                      mcp_arg_str(args, "dest_lane"), tok, len, err);
    free(tok);
    return rc;
}

static kl_code transfer_complete(kl_client *c, kl_batch *b, const json_t *args, kl_err *err)
{
    (void)c;
    uint8_t *tok;
    size_t len;
    kl_code rc = mcp_arg_b64(args, "receipt_token", &tok, &len, err);
    if (rc == KL_OK)
        rc = kl_batch_complete_transfer(b, mcp_arg_str(args, "source_queue"),
                                        mcp_arg_str(args, "source_lane"),
                                        mcp_arg_str(args, "transfer_id"), tok, len, err);
    free(tok);
    return rc;
}

/* advance and repair: the witness from transfer_failure moves the intent to its
 * next generation. */
static kl_code advance_or_repair(kl_batch *b, const json_t *args, bool repair, kl_err *err)
{
    uint8_t *tok;
    size_t len;
    kl_code rc = mcp_arg_b64(args, "witness_token", &tok, &len, err);
    if (rc == KL_OK)
        rc = (repair ? kl_batch_advance_transfer_repair : kl_batch_advance_transfer_attempt)(
            b, mcp_arg_str(args, "source_queue"), mcp_arg_str(args, "source_lane"),
            mcp_arg_str(args, "transfer_id"), tok, len, err);
    free(tok);
    return rc;
}

static kl_code transfer_advance(kl_client *c, kl_batch *b, const json_t *args, kl_err *err)
{
    (void)c;
    return advance_or_repair(b, args, false, err);
}

static kl_code transfer_repair(kl_client *c, kl_batch *b, const json_t *args, kl_err *err)
{
    (void)c;
    return advance_or_repair(b, args, true, err);
}

static kl_code pause_or_resume(kl_batch *b, const json_t *args, bool paused, kl_err *err)
{
    const char *queue = mcp_arg_str(args, "source_queue"), *lane = mcp_arg_str(args, "source_lane");
    if (queue == NULL && lane != NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "usage",
                       "argument source_lane needs source_queue (without both: the database)");
    return kl_batch_pause_transfers(b, queue, lane, paused, err);
}

static kl_code transfer_pause(kl_client *c, kl_batch *b, const json_t *args, kl_err *err)
{
    (void)c;
    return pause_or_resume(b, args, true, err);
}

static kl_code transfer_resume(kl_client *c, kl_batch *b, const json_t *args, kl_err *err)
{
    (void)c;
    return pause_or_resume(b, args, false, err);
}

/* Checks the GUID before any network call, as the CLI does for --id. */
static kl_code transfer_id_arg(const json_t *args, kl_err *err)
{
    uint8_t id[16];
    return kl_transfer_id_parse(mcp_arg_str(args, "transfer_id"), id, err);
}

static kl_code transfer_inspect(const mcp_call *call, const json_t *args, char **json, kl_err *err)
{
    kl_client *c = call->client;
    Keyload__V1__InspectQueueTransferAnswer *a;
    kl_code rc = transfer_id_arg(args, err);
    if (rc == KL_OK)
        rc = kl_client_inspect_transfer(c, mcp_arg_str(args, "source_queue"),
                                        mcp_arg_str(args, "source_lane"),
                                        mcp_arg_str(args, "transfer_id"), &a, err);
    if (rc != KL_OK)
        return rc;
    *json = kl_transfer_to_json(a, 0);
    kl_transfer_answer_free(a);
    return *json ? KL_OK : kl_fail(err, KL_INTERNAL, "oom", "out of memory");
}

static kl_code transfer_receipt(const mcp_call *call, const json_t *args, char **json, kl_err *err)
{
    kl_client *c = call->client;
    Keyload__V1__InspectQueueTransferReceiptAnswer *a;
    kl_code rc = transfer_id_arg(args, err);
    if (rc == KL_OK)
        rc = kl_client_transfer_receipt(c, mcp_arg_str(args, "dest_queue"),
                                        mcp_arg_str(args, "source_queue"),
                                        mcp_arg_str(args, "source_lane"),
                                        mcp_arg_str(args, "transfer_id"), &a, err);
    if (rc != KL_OK)
        return rc;
    *json = kl_transfer_receipt_to_json(a, 0);
    kl_transfer_receipt_answer_free(a);
    return *json ? KL_OK : kl_fail(err, KL_INTERNAL, "oom", "out of memory");
}

static kl_code transfer_pending(const mcp_call *call, const json_t *args, char **json, kl_err *err)
{
    kl_client *c = call->client;
    int64_t partition = -1, max = 0;
    mcp_arg_int(args, "partition", &partition);
    mcp_arg_int(args, "max_items", &max);
    const char *queue = mcp_arg_str(args, "source_queue");
    if (queue == NULL && partition < 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "usage",
                       "transfer_pending needs source_queue or partition");
    uint8_t *cursor = NULL;
    size_t cursor_len = 0;
    const char *ct = mcp_arg_str(args, "cursor");
    kl_code rc = ct != NULL && ct[0] != '\0' ? mcp_arg_b64(args, "cursor", &cursor, &cursor_len, err)
                                             : KL_OK;
    Keyload__V1__ListPendingQueueTransfersAnswer *a = NULL;
    if (rc == KL_OK)
        rc = kl_client_pending_transfers(c, queue, mcp_arg_str(args, "source_lane"), (int)partition,
                                         cursor, cursor_len, (uint32_t)max, &a, err);
    free(cursor);
    if (rc != KL_OK)
        return rc;
    *json = kl_pending_transfers_to_json(a, KL_JSON_OMIT_TOKENS);
    kl_pending_transfers_free(a);
    return *json ? KL_OK : kl_fail(err, KL_INTERNAL, "oom", "out of memory");
}

/* The fresh failure read after a refused Accept: its answer carries a witness or the
 * receipt (tokens, base64), as `keyload transfer failure --json` prints it. */
static kl_code transfer_failure(const mcp_call *call, const json_t *args, char **json, kl_err *err)
{
    uint8_t *tok;
    size_t len;
    kl_code rc = mcp_arg_b64(args, "intent_token", &tok, &len, err);
    Keyload__V1__ReadQueueTransferFailureAnswer *a = NULL;
    if (rc == KL_OK)
        rc = kl_client_read_transfer_failure(call->client, mcp_arg_str(args, "dest_queue"),
                                             mcp_arg_str(args, "dest_lane"), tok, len,
                                             mcp_arg_str(args, "failed_command_id"), &a, err);
    free(tok);
    if (rc != KL_OK)
        return rc;
    *json = kl_transfer_failure_to_json(a, 0);
    kl_transfer_failure_answer_free(a);
    return *json ? KL_OK : kl_fail(err, KL_INTERNAL, "oom", "out of memory");
}

/* The same read on the source for a denied Complete. */
static kl_code transfer_complete_failure(const mcp_call *call, const json_t *args, char **json, kl_err *err)
{
    uint8_t *tok;
    size_t len;
    kl_code rc = mcp_arg_b64(args, "receipt_token", &tok, &len, err);
    Keyload__V1__ReadQueueTransferFailureAnswer *a = NULL;
    if (rc == KL_OK)
        rc = kl_client_read_complete_failure(call->client, mcp_arg_str(args, "source_queue"),
                                             mcp_arg_str(args, "source_lane"), mcp_arg_str(args, "transfer_id"),
                                             tok, len, mcp_arg_str(args, "failed_command_id"), &a, err);
    free(tok);
    if (rc != KL_OK)
        return rc;
    *json = kl_transfer_failure_to_json(a, 0);
    kl_transfer_failure_answer_free(a);
    return *json ? KL_OK : kl_fail(err, KL_INTERNAL, "oom", "out of memory");
}

/* A token's claims for display (signature NOT verified); needs no cluster. */
static kl_code transfer_token_describe(const mcp_call *call, const json_t *args, char **json, kl_err *err)
{
    kl_client *c = call->client;
    (void)c;
    uint8_t *tok;
    size_t len;
    kl_code rc = mcp_arg_b64(args, "token", &tok, &len, err);
    if (rc == KL_OK)
        rc = kl_transfer_token_describe(tok, len, 0, json, err);
    free(tok);
    return rc;
}

static const mcp_arg create_args[] = {
    SOURCE_ARGS(true), ID_ARG, DEST_ARGS,
    {"body", MCP_ARG_STRING, true,
     "the message body (UTF-8 text, or base64 with body_encoding \"base64\")", 0, 0, NULL, 0},
    {"body_encoding", MCP_ARG_STRING, false, "how body is written (default utf8)", 0, 0,
     encodings, 0},
    {"headers", MCP_ARG_STRING_MAP, false, "string headers {key: value}", 0, 0, NULL, 0},
    {"fields", MCP_ARG_STRING_ARRAY, false,
     "typed fields as the CLI writes them: \"k=v\", \"k:int=5\", \"k:double=1.5\", "
     "\"k:bool=true\", \"k:bytes=BASE64\"", 0, 0, NULL, 0},
    {"delay_ms", MCP_ARG_INTEGER, false, "visibility delay in ms at the destination", 0, 0, NULL,
     0},
    {"expires_at_unix_ms", MCP_ARG_INTEGER, false, "absolute expiry (unix ms; 0 = never)", 0, 0,
     NULL, 0},
    END_ARG};
static const mcp_arg accept_args[] = {
    DEST_ARGS,
    {"intent_token", MCP_ARG_STRING, true,
     "the intent token (base64) from transfer_create's result or transfer_inspect", 0, 0, NULL,
     0},
    END_ARG};
static const mcp_arg complete_args[] = {
    SOURCE_ARGS(true), ID_ARG,
    {"receipt_token", MCP_ARG_STRING, true, "the receipt token (base64) from transfer_receipt",
     0, 0, NULL, 0},
    END_ARG};
static const mcp_arg inspect_args[] = {SOURCE_ARGS(true), ID_ARG, END_ARG};
static const mcp_arg receipt_args[] = {
    {"dest_queue", MCP_ARG_STRING, true, "the destination queue", 0, 0, NULL, 0},
    SOURCE_ARGS(true), ID_ARG, END_ARG};
static const mcp_arg pending_args[] = {
    SOURCE_ARGS(false),
    {"partition", MCP_ARG_INTEGER, false, "list this partition (instead of source_queue's)", 0,
     INT32_MAX, NULL, 0},
    {"cursor", MCP_ARG_STRING, false, "next_cursor of the previous page (base64)", 0, 0, NULL, 0},
    {"max_items", MCP_ARG_INTEGER, false, "page size (default: the daemon's, 64)", 1, 1000, NULL,
     0},
    END_ARG};
static const mcp_arg pause_args[] = {SOURCE_ARGS(false), END_ARG};
static const mcp_arg failure_args[] = {
    DEST_ARGS,
    {"intent_token", MCP_ARG_STRING, true,
     "the token (base64) of the generation whose Accept was refused (transfer_inspect's "
     "current_token)", 0, 0, NULL, 0},
    {"failed_command_id", MCP_ARG_STRING, true, "the refused Accept's command id (GUID)", 0, 0,
     NULL, 0},
    END_ARG};
static const mcp_arg complete_failure_args[] = {
    SOURCE_ARGS(true), ID_ARG,
    {"receipt_token", MCP_ARG_STRING, true, "the receipt token (base64) the denied Complete carried",
     0, 0, NULL, 0},
    {"failed_command_id", MCP_ARG_STRING, true, "the denied Complete's command id (GUID)", 0, 0,
     NULL, 0},
    END_ARG};
static const mcp_arg advance_args[] = {
    SOURCE_ARGS(true), ID_ARG,
    {"witness_token", MCP_ARG_STRING, true, "the witness (base64) from transfer_failure", 0, 0,
     NULL, 0},
    END_ARG};
static const mcp_arg describe_args[] = {
    {"token", MCP_ARG_STRING, true, "an intent or receipt token (base64)", 0, 0, NULL, 0},
    END_ARG};

const mcp_tool mcp_transfer_tools[] = {
    {"transfer_create",
     "Commit a transfer intent (OutputPending) on the source queue's partition; the receipt's "
     "result carries the intent token (base64) for transfer_accept.",
     create_args, transfer_create, NULL, true, false},
    {"transfer_accept",
     "Enqueue the intent's message once on the destination (retries enqueue nothing).",
     accept_args, transfer_accept, NULL, true, false},
    {"transfer_complete",
     "Move the intent to Delivered with the destination's receipt token.", complete_args,
     transfer_complete, NULL, true, false},
    {"transfer_inspect", "A transfer's state, history and tokens (fresh read on the source).",
     inspect_args, NULL, transfer_inspect, true, false},
    {"transfer_receipt",
     "The destination's receipt token (base64) and the commit that enqueued the message; "
     "NOT_FOUND until accepted.", receipt_args, NULL, transfer_receipt, true, false},
    {"transfer_pending",
     "One page of OutputPending transfers of a source queue or a partition (without tokens).",
     pending_args, NULL, transfer_pending, true, false},
    {"transfer_pause",
     "Stop admission of new transfers from a source lane, or (without source_queue) the whole "
     "database; pending transfers go on.", pause_args, transfer_pause, NULL, true, false},
    {"transfer_resume", "Resume admission of new transfers (the reverse of transfer_pause).",
     pause_args, transfer_resume, NULL, true, false},
    {"transfer_failure",
     "After an Accept refused RESOURCE_EXHAUSTED or PERMISSION_DENIED: a fresh destination read "
     "answering ReceiptExists (complete with it), WitnessIssued (advance or repair with it) or "
     "Unchanged.", failure_args, NULL, transfer_failure, true, false},
    {"transfer_complete_failure",
     "After a Complete refused PERMISSION_DENIED: a fresh source read answering WitnessIssued "
     "(repair with it, then complete with a new command id) or Unchanged.",
     complete_failure_args, NULL, transfer_complete_failure, true, false},
    {"transfer_advance",
     "Move an intent to its next generation after a capacity failure, with transfer_failure's "
     "witness (bounded by MaxQueueTransferAcceptAttempts).", advance_args, transfer_advance,
     NULL, true, false},
    {"transfer_repair",
     "Move an intent to its next generation after a denied Accept, once policy changed, with "
     "transfer_failure's witness.", advance_args, transfer_repair, NULL, true, false},
    {"transfer_token_describe",
     "A token's claims for display (signature NOT verified; the message is not shown).",
     describe_args, NULL, transfer_token_describe, false, false},
    {NULL, NULL, NULL, NULL, NULL, false, false},
};
