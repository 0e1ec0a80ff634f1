/* transfer: remote queue transfers (ARCHITECTURE.md "Engine"), the batch builders and the four reads
 * (client/keyload.h "remote transfers").
 *
 * The builders check only the shape (names, GUIDs, non-empty tokens) so that a caller gets
 * an error naming the field before anything goes out; tokens are opaque here and are
 * checked by the daemon, which alone holds the keys. Tenant and database are stamped from
 * the client's database at encoding (encode.c), as for every queue ref. */
#include "client/sdk/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define METHOD_INSPECT "keyload.v1.InspectQueueTransfer"
#define METHOD_RECEIPT "keyload.v1.InspectQueueTransferReceipt"
#define METHOD_PENDING "keyload.v1.ListPendingQueueTransfers"
#define METHOD_FAILURE "keyload.v1.ReadQueueTransferFailure"
/* ListPendingQueueTransfersRequest.max_items ceiling (transfer.proto). */
#define PENDING_MAX_ITEMS 1000u

kl_code kl_transfer_id_parse(const char *text, uint8_t out[16], kl_err *err)
{
    if (text == NULL || text[0] == '\0')
        return kl_fail(err, KL_INVALID_ARGUMENT, "transfer_id", "transfer_id must not be empty");
    if (!kl_guid_parse(text, out))
        return kl_fail(err, KL_INVALID_ARGUMENT, "transfer_id",
                       "transfer_id must be a GUID in canonical form "
                       "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx");
    if (!kl_guid_valid(out, KL_GUID_LEN))
        return kl_fail(err, KL_INVALID_ARGUMENT, "transfer_id", "transfer_id must not be all zero");
    return KL_OK;
}

const char *kl_transfer_state_name(uint32_t state)
{
    switch (state) {
    case KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING: return "OutputPending";
    case KEYLOAD__V1__TRANSFER_STATE__DELIVERED: return "Delivered";
    default: return "unknown";
    }
}

const char *kl_transfer_event_name(uint32_t event)
{
    switch (event) {
    case KEYLOAD__V1__TRANSFER_EVENT__INTENT_CREATED: return "IntentCreated";
    case KEYLOAD__V1__TRANSFER_EVENT__RECEIPT_VERIFIED: return "ReceiptVerified";
    case KEYLOAD__V1__TRANSFER_EVENT__ATTEMPT_ADVANCED: return "AttemptAdvanced";
    case KEYLOAD__V1__TRANSFER_EVENT__POLICY_REPAIRED: return "PolicyRepaired";
    default: return "unknown";
    }
}

const char *kl_failure_verdict_name(uint32_t verdict)
{
    switch (verdict) {
    case KEYLOAD__V1__FAILURE_VERDICT__RECEIPT_EXISTS: return "ReceiptExists";
    case KEYLOAD__V1__FAILURE_VERDICT__WITNESS_ISSUED: return "WitnessIssued";
    case KEYLOAD__V1__FAILURE_VERDICT__UNCHANGED: return "Unchanged";
    default: return "unknown";
    }
}

/* A borrowed lane ref after checking the names; `what` prefixes the field names
 * ("source_queue", "source_lane"), so an error says which of a transfer's lanes is wrong. */
static kl_code lane_ref(const char *what, const char *queue, const char *lane,
                        Keyload__V1__QueueLaneRef *r, kl_err *err)
{
    char qf[48], lf[48];
    snprintf(qf, sizeof qf, "%s_queue", what);
    snprintf(lf, sizeof lf, "%s_lane", what);
    kl_code rc = kl_sdk_check_name(qf, queue, KL_SDK_NAME_QUEUE, err);
    if (rc == KL_OK)
        rc = kl_sdk_check_name(lf, lane ? lane : "", KL_SDK_NAME_LANE, err);
    keyload__v1__queue_lane_ref__init(r);
    r->queue = (char *)queue;
    r->lane = (char *)(lane ? lane : "");
    return rc;
}

static kl_code check_token(const char *what, const uint8_t *token, size_t len, kl_err *err)
{
    if (token == NULL || len == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s is empty", what);
    return KL_OK;
}

kl_code kl_batch_create_transfer(kl_batch *b, const char *source_queue, const char *source_lane,
                                 const char *transfer_id, const char *dest_queue,
                                 const char *dest_lane, const kl_message *msg, kl_err *err)
{
    Keyload__V1__QueueLaneRef src, dst;
    uint8_t id[KL_GUID_LEN];
    kl_code rc = lane_ref("source", source_queue, source_lane, &src, err);
    if (rc == KL_OK)
        rc = kl_transfer_id_parse(transfer_id, id, err);
    if (rc == KL_OK)
        rc = lane_ref("destination", dest_queue, dest_lane, &dst, err);
    if (rc != KL_OK)
        return rc;
    if (msg == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "message", "message is missing");
    Keyload__V1__CreateQueueTransfer ct = KEYLOAD__V1__CREATE_QUEUE_TRANSFER__INIT;
    ct.source_queue = &src;
    ct.transfer_id.data = id;
    ct.transfer_id.len = sizeof id;
    ct.destination = &dst;
    ct.message = msg->pb;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE_TRANSFER;
    m.create_queue_transfer = &ct;
    return kl_sdk_batch_add(b, &m, err);
}

kl_code kl_batch_accept_transfer(kl_batch *b, const char *dest_queue, const char *dest_lane,
                                 const uint8_t *intent_token, size_t len, kl_err *err)
{
    Keyload__V1__QueueLaneRef dst;
    kl_code rc = lane_ref("destination", dest_queue, dest_lane, &dst, err);
    if (rc == KL_OK)
        rc = check_token("intent_token", intent_token, len, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__AcceptQueueTransfer at = KEYLOAD__V1__ACCEPT_QUEUE_TRANSFER__INIT;
    at.destination_queue = &dst;
    at.intent_token.data = (uint8_t *)intent_token; /* borrowed: the batch copies it */
    at.intent_token.len = len;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_ACCEPT_QUEUE_TRANSFER;
    m.accept_queue_transfer = &at;
    return kl_sdk_batch_add(b, &m, err);
}

kl_code kl_batch_complete_transfer(kl_batch *b, const char *source_queue,
                                   const char *source_lane, const char *transfer_id,
                                   const uint8_t *receipt_token, size_t len, kl_err *err)
{
    Keyload__V1__QueueLaneRef src;
    uint8_t id[KL_GUID_LEN];
    kl_code rc = lane_ref("source", source_queue, source_lane, &src, err);
    if (rc == KL_OK)
        rc = kl_transfer_id_parse(transfer_id, id, err);
    if (rc == KL_OK)
        rc = check_token("receipt_token", receipt_token, len, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__CompleteQueueTransfer co = KEYLOAD__V1__COMPLETE_QUEUE_TRANSFER__INIT;
    co.source_queue = &src;
    co.transfer_id.data = id;
    co.transfer_id.len = sizeof id;
    co.receipt_token.data = (uint8_t *)receipt_token;
    co.receipt_token.len = len;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_COMPLETE_QUEUE_TRANSFER;
    m.complete_queue_transfer = &co;
    return kl_sdk_batch_add(b, &m, err);
}

/* AdvanceQueueTransferAttempt and AdvanceQueueTransferRepair have one shape (source lane,
 * transfer id, witness) under two message types: one builder serves both. */
static kl_code advance(kl_batch *b, const char *source_queue, const char *source_lane,
                       const char *transfer_id, const uint8_t *witness, size_t len, bool repair,
                       kl_err *err)
{
    Keyload__V1__QueueLaneRef src;
    uint8_t id[KL_GUID_LEN];
    kl_code rc = lane_ref("source", source_queue, source_lane, &src, err);
    if (rc == KL_OK)
        rc = kl_transfer_id_parse(transfer_id, id, err);
    if (rc == KL_OK)
        rc = check_token("witness_token", witness, len, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__AdvanceQueueTransferAttempt at = KEYLOAD__V1__ADVANCE_QUEUE_TRANSFER_ATTEMPT__INIT;
    Keyload__V1__AdvanceQueueTransferRepair rp = KEYLOAD__V1__ADVANCE_QUEUE_TRANSFER_REPAIR__INIT;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    if (repair) {
        rp.source_queue = &src;
        rp.transfer_id.data = id;
        rp.transfer_id.len = sizeof id;
        rp.witness_token.data = (uint8_t *)witness; /* borrowed: the batch copies it */
        rp.witness_token.len = len;
        m.kind_case = KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_REPAIR;
        m.advance_queue_transfer_repair = &rp;
    } else {
        at.source_queue = &src;
        at.transfer_id.data = id;
        at.transfer_id.len = sizeof id;
        at.witness_token.data = (uint8_t *)witness;
        at.witness_token.len = len;
        m.kind_case = KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_ATTEMPT;
        m.advance_queue_transfer_attempt = &at;
    }
    return kl_sdk_batch_add(b, &m, err);
}

kl_code kl_batch_advance_transfer_attempt(kl_batch *b, const char *source_queue,
                                          const char *source_lane, const char *transfer_id,
                                          const uint8_t *witness, size_t len, kl_err *err)
{
    return advance(b, source_queue, source_lane, transfer_id, witness, len, false, err);
}

kl_code kl_batch_advance_transfer_repair(kl_batch *b, const char *source_queue,
                                         const char *source_lane, const char *transfer_id,
                                         const uint8_t *witness, size_t len, kl_err *err)
{
    return advance(b, source_queue, source_lane, transfer_id, witness, len, true, err);
}

kl_code kl_batch_pause_transfers(kl_batch *b, const char *queue, const char *lane, bool paused,
                                 kl_err *err)
{
    Keyload__V1__QueueLaneRef src;
    Keyload__V1__SetQueueTransfersPaused tp = KEYLOAD__V1__SET_QUEUE_TRANSFERS_PAUSED__INIT;
    if (queue == NULL) {
        /* A lane without its queue would silently widen to the whole database. */
        if (lane != NULL && lane[0] != '\0')
            return kl_fail(err, KL_INVALID_ARGUMENT, "source_lane",
                           "source_lane needs its source_queue (without a queue the pause "
                           "covers the whole database)");
    } else {
        kl_code rc = lane_ref("source", queue, lane, &src, err);
        if (rc != KL_OK)
            return rc;
        tp.source_queue = &src;
    }
    tp.paused = paused;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_SET_QUEUE_TRANSFERS_PAUSED;
    m.set_queue_transfers_paused = &tp;
    return kl_sdk_batch_add(b, &m, err);
}

/* ---------------------------------------------------------------- reads */

/* The client's tenant and database, for the refs of a read request. */
static kl_code client_names(const kl_client *c, char *tenant, char *database, kl_err *err)
{
    return kl_sdk_split_database(kl_client_database(c), tenant, database, err);
}

/* Packs any request message into a malloc'd buffer (protobuf-c's generic packer, so one
 * helper serves every request type). */
static kl_code pack(const ProtobufCMessage *msg, uint8_t **out, size_t *len, kl_err *err)
{
    *len = protobuf_c_message_get_packed_size(msg);
    *out = malloc(*len ? *len : 1);
    if (*out == NULL)
        return kl_sdk_oom(err);
    protobuf_c_message_pack(msg, *out);
    return KL_OK;
}

/* Sends req to the partition (queue's when partition < 0) and returns the raw answer. */
static kl_code read_call(kl_client *c, const char *queue, int partition, const char *method,
                         uint8_t *req, size_t len, uint8_t **ans, size_t *ans_len, kl_err *err)
{
    kl_code rc = kl_sdk_partition_read(c, queue, partition, method, req, len, ans, ans_len, err);
    free(req);
    return rc;
}

static kl_code undecodable(const char *type, kl_err *err)
{
    return kl_fail(err, KL_INTERNAL, "answer", "the answer does not decode as keyload.v1.%s",
                   type);
}

/* The typed reads the asynchronous API offers: one decoder each, used by both forms. */
static kl_code dec_inspect(const uint8_t *ans, size_t len, void *out, kl_err *err)
{
    Keyload__V1__InspectQueueTransferAnswer **o = out;
    *o = keyload__v1__inspect_queue_transfer_answer__unpack(NULL, len, ans);
    return *o ? KL_OK : undecodable("InspectQueueTransferAnswer", err);
}

static kl_code dec_receipt(const uint8_t *ans, size_t len, void *out, kl_err *err)
{
    Keyload__V1__InspectQueueTransferReceiptAnswer **o = out;
    *o = keyload__v1__inspect_queue_transfer_receipt_answer__unpack(NULL, len, ans);
    return *o ? KL_OK : undecodable("InspectQueueTransferReceiptAnswer", err);
}

static kl_code dec_failure(const uint8_t *ans, size_t len, void *out, kl_err *err)
{
    Keyload__V1__ReadQueueTransferFailureAnswer **o = out;
    *o = keyload__v1__read_queue_transfer_failure_answer__unpack(NULL, len, ans);
    return *o ? KL_OK : undecodable("ReadQueueTransferFailureAnswer", err);
}

/* Sends req (freed here) on the queue's partition and decodes the answer into out: waited
 * for when as is NULL, else started as a kl_call (kl_sdk_read). */
static kl_code typed_read(kl_client *c, const char *queue, const char *method, uint8_t *req,
                          size_t len, kl_sdk_decode_fn dec, void *out, const kl_sdk_async *as,
                          kl_err *err)
{
    kl_code rc = kl_sdk_read(c, queue, -1, method, req, len, dec, out, as, err);
    free(req);
    return rc;
}

static kl_code inspect_transfer(kl_client *c, const char *source_queue, const char *source_lane,
                                const char *transfer_id,
                                Keyload__V1__InspectQueueTransferAnswer **out,
                                const kl_sdk_async *as, kl_err *err)
{
    *out = NULL;
    char tenant[KL_SDK_NAME_MAX + 1], db[KL_SDK_NAME_MAX + 1];
    uint8_t id[KL_GUID_LEN];
    Keyload__V1__QueueLaneRef src;
    kl_code rc = lane_ref("source", source_queue, source_lane, &src, err);
    if (rc == KL_OK)
        rc = kl_transfer_id_parse(transfer_id, id, err);
    if (rc == KL_OK)
        rc = client_names(c, tenant, db, err);
    if (rc != KL_OK)
        return rc;
    src.tenant = tenant;
    src.database = db;
    Keyload__V1__InspectQueueTransferRequest r = KEYLOAD__V1__INSPECT_QUEUE_TRANSFER_REQUEST__INIT;
    r.source_queue = &src;
    r.transfer_id.data = id;
    r.transfer_id.len = sizeof id;
    uint8_t *req;
    size_t len;
    if ((rc = pack(&r.base, &req, &len, err)) != KL_OK)
        return rc;
    return typed_read(c, source_queue, METHOD_INSPECT, req, len, dec_inspect, out, as, err);
}

kl_code kl_client_inspect_transfer(kl_client *c, const char *source_queue,
                                   const char *source_lane, const char *transfer_id,
                                   Keyload__V1__InspectQueueTransferAnswer **out, kl_err *err)
{
    return inspect_transfer(c, source_queue, source_lane, transfer_id, out, NULL, err);
}

kl_code kl_client_inspect_transfer_start(kl_client *c, const char *source_queue,
                                         const char *source_lane, const char *transfer_id,
                                         Keyload__V1__InspectQueueTransferAnswer **out,
                                         kl_call_done_fn done, void *arg, kl_call **call,
                                         kl_err *err)
{
    kl_sdk_async as = {.done = done, .arg = arg, .call = call};
    return inspect_transfer(c, source_queue, source_lane, transfer_id, out, &as, err);
}

void kl_transfer_answer_free(Keyload__V1__InspectQueueTransferAnswer *a)
{
    if (a != NULL)
        keyload__v1__inspect_queue_transfer_answer__free_unpacked(a, NULL);
}

static kl_code transfer_receipt(kl_client *c, const char *dest_queue, const char *source_queue,
                                const char *source_lane, const char *transfer_id,
                                Keyload__V1__InspectQueueTransferReceiptAnswer **out,
                                const kl_sdk_async *as, kl_err *err)
{
    *out = NULL;
    char tenant[KL_SDK_NAME_MAX + 1], db[KL_SDK_NAME_MAX + 1];
    uint8_t id[KL_GUID_LEN];
    Keyload__V1__QueueLaneRef src, dst;
    kl_code rc = lane_ref("destination", dest_queue, NULL, &dst, err);
    if (rc == KL_OK)
        rc = lane_ref("source", source_queue, source_lane, &src, err);
    if (rc == KL_OK)
        rc = kl_transfer_id_parse(transfer_id, id, err);
    if (rc == KL_OK)
        rc = client_names(c, tenant, db, err);
    if (rc != KL_OK)
        return rc;
    src.tenant = dst.tenant = tenant;
    src.database = dst.database = db;
    Keyload__V1__InspectQueueTransferReceiptRequest r =
        KEYLOAD__V1__INSPECT_QUEUE_TRANSFER_RECEIPT_REQUEST__INIT;
    r.destination_queue = &dst; /* its lane is ignored: the receipt names it */
    r.source_queue = &src;
    r.transfer_id.data = id;
    r.transfer_id.len = sizeof id;
    uint8_t *req;
    size_t len;
    if ((rc = pack(&r.base, &req, &len, err)) != KL_OK)
        return rc;
    return typed_read(c, dest_queue, METHOD_RECEIPT, req, len, dec_receipt, out, as, err);
}

kl_code kl_client_transfer_receipt(kl_client *c, const char *dest_queue,
                                   const char *source_queue, const char *source_lane,
                                   const char *transfer_id,
                                   Keyload__V1__InspectQueueTransferReceiptAnswer **out,
                                   kl_err *err)
{
    return transfer_receipt(c, dest_queue, source_queue, source_lane, transfer_id, out, NULL, err);
}

kl_code kl_client_transfer_receipt_start(kl_client *c, const char *dest_queue,
                                         const char *source_queue, const char *source_lane,
                                         const char *transfer_id,
                                         Keyload__V1__InspectQueueTransferReceiptAnswer **out,
                                         kl_call_done_fn done, void *arg, kl_call **call,
                                         kl_err *err)
{
    kl_sdk_async as = {.done = done, .arg = arg, .call = call};
    return transfer_receipt(c, dest_queue, source_queue, source_lane, transfer_id, out, &as, err);
}

void kl_transfer_receipt_answer_free(Keyload__V1__InspectQueueTransferReceiptAnswer *a)
{
    if (a != NULL)
        keyload__v1__inspect_queue_transfer_receipt_answer__free_unpacked(a, NULL);
}

kl_code kl_client_pending_transfers(kl_client *c, const char *source_queue,
                                    const char *source_lane, int partition,
                                    const uint8_t *cursor, size_t cursor_len, uint32_t max_items,
                                    Keyload__V1__ListPendingQueueTransfersAnswer **out,
                                    kl_err *err)
{
    *out = NULL;
    char tenant[KL_SDK_NAME_MAX + 1], db[KL_SDK_NAME_MAX + 1];
    Keyload__V1__QueueLaneRef src;
    kl_code rc = client_names(c, tenant, db, err);
    if (rc != KL_OK)
        return rc;
    if (partition < -1)
        return kl_fail(err, KL_INVALID_ARGUMENT, "partition",
                       "partition must be >= 0 (or -1: the source queue's)");
    if (source_queue == NULL && partition < 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "partition",
                       "name a partition or a source_queue (whose partition is then read)");
    if (source_queue == NULL && source_lane != NULL && source_lane[0] != '\0')
        return kl_fail(err, KL_INVALID_ARGUMENT, "source_lane", "source_lane needs its source_queue");
    if (max_items > PENDING_MAX_ITEMS)
        return kl_fail(err, KL_INVALID_ARGUMENT, "max_items", "max_items must be at most %u",
                       PENDING_MAX_ITEMS);
    if (cursor == NULL && cursor_len != 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "cursor", "cursor is NULL with a length");
    Keyload__V1__ListPendingQueueTransfersRequest r =
        KEYLOAD__V1__LIST_PENDING_QUEUE_TRANSFERS_REQUEST__INIT;
    r.tenant = tenant;
    r.database = db;
    if (source_queue != NULL) {
        if ((rc = lane_ref("source", source_queue, source_lane, &src, err)) != KL_OK)
            return rc;
        src.tenant = tenant;
        src.database = db;
        r.source_queue = &src;
    }
    r.cursor.data = (uint8_t *)cursor;
    r.cursor.len = cursor_len;
    r.max_items = max_items;
    uint8_t *req, *ans;
    size_t len, ans_len;
    if ((rc = pack(&r.base, &req, &len, err)) != KL_OK ||
        (rc = read_call(c, source_queue, partition, METHOD_PENDING, req, len, &ans, &ans_len,
                        err)) != KL_OK)
        return rc;
    *out = keyload__v1__list_pending_queue_transfers_answer__unpack(NULL, ans_len, ans);
    free(ans);
    return *out ? KL_OK : undecodable("ListPendingQueueTransfersAnswer", err);
}

void kl_pending_transfers_free(Keyload__V1__ListPendingQueueTransfersAnswer *a)
{
    if (a != NULL)
        keyload__v1__list_pending_queue_transfers_answer__free_unpacked(a, NULL);
}

static kl_code failed_id_parse(const char *failed_command_id, uint8_t cmd[KL_GUID_LEN], kl_err *err)
{
    if (failed_command_id == NULL || failed_command_id[0] == '\0')
        return kl_fail(err, KL_INVALID_ARGUMENT, "failed_command_id", "failed_command_id must not be empty");
    if (!kl_guid_parse(failed_command_id, cmd))
        return kl_fail(err, KL_INVALID_ARGUMENT, "failed_command_id",
                       "failed_command_id must be a GUID in canonical form "
                       "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx");
    if (!kl_guid_valid(cmd, KL_GUID_LEN))
        return kl_fail(err, KL_INVALID_ARGUMENT, "failed_command_id", "failed_command_id must not be all zero");
    return KL_OK;
}

/* Sends a ReadQueueTransferFailure routed by `queue` (the lane refs in r are complete). */
static kl_code failure_call(kl_client *c, const char *queue, Keyload__V1__ReadQueueTransferFailureRequest *r,
                            Keyload__V1__ReadQueueTransferFailureAnswer **out,
                            const kl_sdk_async *as, kl_err *err)
{
    uint8_t *req;
    size_t req_len;
    kl_code rc = pack(&r->base, &req, &req_len, err);
    if (rc != KL_OK)
        return rc;
    return typed_read(c, queue, METHOD_FAILURE, req, req_len, dec_failure, out, as, err);
}

static kl_code read_transfer_failure(kl_client *c, const char *dest_queue, const char *dest_lane,
                                     const uint8_t *intent_token, size_t len,
                                     const char *failed_command_id,
                                     Keyload__V1__ReadQueueTransferFailureAnswer **out,
                                     const kl_sdk_async *as, kl_err *err)
{
    *out = NULL;
    char tenant[KL_SDK_NAME_MAX + 1], db[KL_SDK_NAME_MAX + 1];
    uint8_t cmd[KL_GUID_LEN];
    Keyload__V1__QueueLaneRef dst;
    kl_code rc = lane_ref("destination", dest_queue, dest_lane, &dst, err);
    if (rc == KL_OK)
        rc = check_token("intent_token", intent_token, len, err);
    if (rc == KL_OK)
        rc = failed_id_parse(failed_command_id, cmd, err);
    if (rc == KL_OK)
        rc = client_names(c, tenant, db, err);
    if (rc != KL_OK)
        return rc;
    dst.tenant = tenant;
    dst.database = db;
    Keyload__V1__ReadQueueTransferFailureRequest r =
        KEYLOAD__V1__READ_QUEUE_TRANSFER_FAILURE_REQUEST__INIT;
    r.destination_queue = &dst; /* complete: the intent's target lane */
    r.intent_token.data = (uint8_t *)intent_token;
    r.intent_token.len = len;
    r.failed_command_id.data = cmd;
    r.failed_command_id.len = sizeof cmd;
    return failure_call(c, dest_queue, &r, out, as, err);
}

kl_code kl_client_read_transfer_failure(kl_client *c, const char *dest_queue,
                                        const char *dest_lane, const uint8_t *intent_token,
                                        size_t len, const char *failed_command_id,
                                        Keyload__V1__ReadQueueTransferFailureAnswer **out,
                                        kl_err *err)
{
    return read_transfer_failure(c, dest_queue, dest_lane, intent_token, len, failed_command_id,
                                 out, NULL, err);
}

kl_code kl_client_read_transfer_failure_start(kl_client *c, const char *dest_queue,
                                              const char *dest_lane, const uint8_t *intent_token,
                                              size_t len, const char *failed_command_id,
                                              Keyload__V1__ReadQueueTransferFailureAnswer **out,
                                              kl_call_done_fn done, void *arg, kl_call **call,
                                              kl_err *err)
{
    kl_sdk_async as = {.done = done, .arg = arg, .call = call};
    return read_transfer_failure(c, dest_queue, dest_lane, intent_token, len, failed_command_id,
                                 out, &as, err);
}

static kl_code read_complete_failure(kl_client *c, const char *source_queue,
                                     const char *source_lane, const char *transfer_id,
                                     const uint8_t *receipt_token, size_t len,
                                     const char *failed_command_id,
                                     Keyload__V1__ReadQueueTransferFailureAnswer **out,
                                     const kl_sdk_async *as, kl_err *err)
{
    *out = NULL;
    char tenant[KL_SDK_NAME_MAX + 1], db[KL_SDK_NAME_MAX + 1];
    uint8_t cmd[KL_GUID_LEN], id[16];
    Keyload__V1__QueueLaneRef src;
    kl_code rc = lane_ref("source", source_queue, source_lane, &src, err);
    if (rc == KL_OK)
        rc = kl_transfer_id_parse(transfer_id, id, err);
    if (rc == KL_OK)
        rc = check_token("receipt_token", receipt_token, len, err);
    if (rc == KL_OK)
        rc = failed_id_parse(failed_command_id, cmd, err);
    if (rc == KL_OK)
        rc = client_names(c, tenant, db, err);
    if (rc != KL_OK)
        return rc;
    src.tenant = tenant;
    src.database = db;
    Keyload__V1__ReadQueueTransferFailureRequest r =
        KEYLOAD__V1__READ_QUEUE_TRANSFER_FAILURE_REQUEST__INIT;
    r.source_queue = &src; /* complete: the intent's source lane */
    r.transfer_id.data = id;
    r.transfer_id.len = sizeof id;
    r.receipt_token.data = (uint8_t *)receipt_token;
    r.receipt_token.len = len;
    r.failed_command_id.data = cmd;
    r.failed_command_id.len = sizeof cmd;
    return failure_call(c, source_queue, &r, out, as, err);
}

kl_code kl_client_read_complete_failure(kl_client *c, const char *source_queue, const char *source_lane,
                                        const char *transfer_id, const uint8_t *receipt_token, size_t len,
                                        const char *failed_command_id,
                                        Keyload__V1__ReadQueueTransferFailureAnswer **out, kl_err *err)
{
    return read_complete_failure(c, source_queue, source_lane, transfer_id, receipt_token, len,
                                 failed_command_id, out, NULL, err);
}

kl_code kl_client_read_complete_failure_start(
    kl_client *c, const char *source_queue, const char *source_lane, const char *transfer_id,
    const uint8_t *receipt_token, size_t len, const char *failed_command_id,
    Keyload__V1__ReadQueueTransferFailureAnswer **out, kl_call_done_fn done, void *arg,
    kl_call **call, kl_err *err)
{
    kl_sdk_async as = {.done = done, .arg = arg, .call = call};
    return read_complete_failure(c, source_queue, source_lane, transfer_id, receipt_token, len,
                                 failed_command_id, out, &as, err);
}

void kl_transfer_failure_answer_free(Keyload__V1__ReadQueueTransferFailureAnswer *a)
{
    if (a != NULL)
        keyload__v1__read_queue_transfer_failure_answer__free_unpacked(a, NULL);
}
