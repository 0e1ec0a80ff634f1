/* backup: the SDK side of a partition's backup stream (ARCHITECTURE.md "Backup and
 * restore"): open a pin on a partition's leader, read its chunks one call at a time, close.
 * The calls go through the client's partition path (redirects, sessions); a chunk call that
 * lost its answer is sent again for the same seq, which the member answers once more. */
#include "client/sdk/internal.h"

#include <stdlib.h>

#define METHOD_BACKUP_OPEN "keyload.v1.BackupOpen"
#define METHOD_BACKUP_CHUNK "keyload.v1.BackupChunk"
#define METHOD_BACKUP_CLOSE "keyload.v1.BackupClose"
#define METHOD_BATCH "keyload.v1.Batch"

kl_code kl_client_backup_open(kl_client *c, int partition, Keyload__V1__BackupOpenAnswer **out, kl_err *err)
{
    *out = NULL;
    uint8_t *ans;
    size_t ans_len;
    kl_code rc = kl_sdk_partition_read(c, NULL, partition, METHOD_BACKUP_OPEN, (const uint8_t *)"", 0, &ans,
                                       &ans_len, err);
    if (rc != KL_OK)
        return rc;
    *out = keyload__v1__backup_open_answer__unpack(NULL, ans_len, ans);
    free(ans);
    if (*out == NULL)
        return kl_fail(err, KL_INTERNAL, "answer", "BackupOpenAnswer does not decode");
    return KL_OK;
}

kl_code kl_client_backup_chunk(kl_client *c, int partition, uint64_t stream, uint64_t seq,
                               Keyload__V1__BackupChunkAnswer **out, kl_err *err)
{
    *out = NULL;
    Keyload__V1__BackupChunkRequest r = KEYLOAD__V1__BACKUP_CHUNK_REQUEST__INIT;
    r.stream = stream;
    r.seq = seq;
    uint8_t req[32];
    size_t len = keyload__v1__backup_chunk_request__pack(&r, req);
    uint8_t *ans;
    size_t ans_len;
    kl_code rc = kl_sdk_partition_read(c, NULL, partition, METHOD_BACKUP_CHUNK, req, len, &ans, &ans_len, err);
    if (rc != KL_OK)
        return rc;
    *out = keyload__v1__backup_chunk_answer__unpack(NULL, ans_len, ans);
    free(ans);
    if (*out == NULL)
        return kl_fail(err, KL_INTERNAL, "answer", "BackupChunkAnswer does not decode");
    if ((*out)->seq != seq) {
        keyload__v1__backup_chunk_answer__free_unpacked(*out, NULL);
        *out = NULL;
        return kl_fail(err, KL_INTERNAL, "answer", "a backup chunk answer names another chunk");
    }
    return KL_OK;
}

kl_code kl_client_backup_close(kl_client *c, int partition, uint64_t stream, kl_err *err)
{
    Keyload__V1__BackupCloseRequest r = KEYLOAD__V1__BACKUP_CLOSE_REQUEST__INIT;
    r.stream = stream;
    uint8_t req[16];
    size_t len = keyload__v1__backup_close_request__pack(&r, req);
    uint8_t *ans;
    size_t ans_len;
    kl_code rc = kl_sdk_partition_read(c, NULL, partition, METHOD_BACKUP_CLOSE, req, len, &ans, &ans_len, err);
    if (rc == KL_OK)
        free(ans);
    return rc;
}

kl_code kl_client_transfer_hold(kl_client *c, int partition, uint32_t hold_ms, int64_t *until_unix_ms, kl_err *err)
{
    *until_unix_ms = 0;
    Keyload__V1__SetTransferHold h = KEYLOAD__V1__SET_TRANSFER_HOLD__INIT;
    h.hold_ms = hold_ms;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_SET_TRANSFER_HOLD;
    m.set_transfer_hold = &h;
    Keyload__V1__Mutation *muts[1] = {&m};
    uint8_t cmd[KL_GUID_LEN];
    kl_guid_time_ordered_now(cmd);
    Keyload__V1__BatchRequest b = KEYLOAD__V1__BATCH_REQUEST__INIT;
    b.command_id.data = cmd;
    b.command_id.len = sizeof cmd;
    b.n_mutations = 1;
    b.mutations = muts;
    uint8_t req[64];
    size_t len = keyload__v1__batch_request__pack(&b, req);
    uint8_t *ans;
    size_t ans_len;
    /* The same bytes go again after a lost answer: the command id makes that one hold. */
    kl_code rc = kl_sdk_partition_read(c, NULL, partition, METHOD_BATCH, req, len, &ans, &ans_len, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__BatchReceipt *r = keyload__v1__batch_receipt__unpack(NULL, ans_len, ans);
    free(ans);
    if (r == NULL || r->n_results != 1 ||
        r->results[0]->kind_case != KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_HOLD_SET) {
        if (r != NULL)
            keyload__v1__batch_receipt__free_unpacked(r, NULL);
        return kl_fail(err, KL_INTERNAL, "answer", "the hold's receipt does not decode");
    }
    *until_unix_ms = r->results[0]->transfer_hold_set->until_unix_ms;
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
    return KL_OK;
}
