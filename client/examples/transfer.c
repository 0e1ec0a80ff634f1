/* transfer: a remote transfer between two partitions with the KeyLoad C SDK.
 *
 * Creates a source queue on partition 1 and a destination queue on partition 2, then runs
 * the four steps by hand (what keyload-coordinator does by itself): Create on the source
 * (an intent token), Accept on the destination with that token, read the destination's
 * receipt token, Complete on the source with it; inspects the transfer (Delivered). Then it
 * replays the Create under the same command id and shows that the stored receipt comes
 * back byte for byte. Prints "LABEL {canonical json}" lines and "state Delivered".
 *
 *   transfer [CLUSTER_FILE DATABASE PRINCIPAL KEY_FILE]   (else KEYLOAD_* as the CLI)
 *
 * The principal must be an administrator of the database with QueuePublish, QueueConsume,
 * QueueInspect (fields and headers "*") and QueueAck on "ex-*": the daemon checks an
 * administrator's data grants too. Tokens are credentials: this example prints them only
 * because it runs against a throwaway cluster; real programs pass them on and log nothing
 * (KL_JSON_OMIT_TOKENS). Exit 0 on success, 1 on any error. */
#include "client/keyload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *arg(int argc, char **argv, int i, const char *env)
{
    const char *v = i < argc ? argv[i] : getenv(env);
    if (v == NULL || v[0] == '\0') {
        fprintf(stderr, "usage: %s [CLUSTER_FILE DATABASE PRINCIPAL KEY_FILE] (or %s)\n", argv[0], env);
        exit(2);
    }
    return v;
}

/* Prints "label {json}" and frees json; INTERNAL when it is NULL (out of memory). */
static kl_code print_json(const char *label, char *json, kl_err *err)
{
    if (json == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    printf("%s %s\n", label, json);
    free(json);
    return KL_OK;
}

/* Sends b (the caller still owns and frees it) and prints its receipt. */
static kl_code send(kl_client *c, const kl_batch *b, const char *label, kl_receipt **out,
                    kl_err *err)
{
    kl_code rc = kl_client_batch(c, b, out, err);
    if (rc == KL_OK && (rc = print_json(label, kl_receipt_to_json((*out)->decoded, 0), err)) != KL_OK) {
        kl_receipt_free(*out);
        *out = NULL;
    }
    return rc;
}

/* Creates queue on the given partition (a catalog change, alone in its batch). */
static kl_code create_queue(kl_client *c, const char *queue, int32_t partition, kl_err *err)
{
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    kl_queue_options opts = {.pin_partition = true, .partition = partition};
    kl_code rc = kl_batch_new(NULL, &b, err);
    if (rc == KL_OK)
        rc = kl_batch_create_queue(b, queue, &opts, err);
    if (rc == KL_OK)
        rc = send(c, b, "created", &r, err);
    kl_receipt_free(r);
    kl_batch_free(b);
    return rc;
}

/* The Create batch. Rebuilt from the same inputs (command id, queues, transfer id,
 * message) it is the same request, which is what a retry must send. */
static kl_code build_create(const char *command_id, const char *src, const char *transfer_id,
                            const char *dst, kl_batch **out, kl_err *err)
{
    kl_message *m = NULL;
    kl_code rc = kl_message_new("order 17 for the archive", 24, &m, err);
    if (rc == KL_OK)
        rc = kl_message_add_header(m, "source", "example", err);
    if (rc == KL_OK)
        rc = kl_message_add_field_int(m, "order", 17, err);
    if (rc == KL_OK)
        rc = kl_batch_new(command_id, out, err);
    if (rc == KL_OK && (rc = kl_batch_create_transfer(*out, src, NULL, transfer_id, dst, NULL, m, err)) != KL_OK) {
        kl_batch_free(*out);
        *out = NULL;
    }
    kl_message_free(m);
    return rc;
}

int main(int argc, char **argv)
{
    const char *cluster = arg(argc, argv, 1, "KEYLOAD_CLUSTER");
    const char *database = arg(argc, argv, 2, "KEYLOAD_DATABASE");
    const char *principal = arg(argc, argv, 3, "KEYLOAD_PRINCIPAL");
    const char *key = arg(argc, argv, 4, "KEYLOAD_KEY");

    kl_err err;
    kl_client *c = NULL;
    kl_batch *b = NULL;
    kl_receipt *created = NULL, *r = NULL, *replayed = NULL;
    Keyload__V1__InspectQueueTransferReceiptAnswer *receipt = NULL;
    Keyload__V1__InspectQueueTransferAnswer *inspected = NULL;
    const char *step = "open";
    int status = 1;

    if (kl_client_open_principal(cluster, database, 0, principal, key, &c, &err) != KL_OK)
        goto fail;

    /* Fresh names and ids. Transfer ids are GUIDs like command ids. The names take the
     * id's last group, which is random (its first digits are the time it was made). */
    char create_cmd[KL_COMMAND_ID_TEXT_LEN + 1], transfer_id[KL_COMMAND_ID_TEXT_LEN + 1];
    char src[64], dst[64];
    kl_command_id_new(create_cmd);
    kl_command_id_new(transfer_id);
    snprintf(src, sizeof src, "ex-src-%s", transfer_id + 24);
    snprintf(dst, sizeof dst, "ex-dst-%s", transfer_id + 24);
    printf("transfer_id %s\n", transfer_id);

    step = "create queues";
    if (create_queue(c, src, 1, &err) != KL_OK || create_queue(c, dst, 2, &err) != KL_OK)
        goto fail;

    /* 1. Create on the source partition: an OutputPending intent and its signed token. */
    step = "transfer create";
    if (build_create(create_cmd, src, transfer_id, dst, &b, &err) != KL_OK ||
        send(c, b, "transfer_created", &created, &err) != KL_OK)
        goto fail;
    kl_batch_free(b);
    b = NULL;
    const Keyload__V1__TransferCreated *tc = created->decoded->results[0]->transfer_created;
    if (tc == NULL || tc->intent_token.len == 0) {
        kl_fail(&err, KL_INTERNAL, "transfer_created", "the receipt holds no intent token");
        goto fail;
    }

    /* 2. Accept on the destination with the intent token, byte for byte. Enqueues once;
     *    an Accept sent again (any command id) is deduplicated. */
    step = "transfer accept";
    if (kl_batch_new(NULL, &b, &err) != KL_OK ||
        kl_batch_accept_transfer(b, dst, NULL, tc->intent_token.data, tc->intent_token.len, &err) != KL_OK ||
        send(c, b, "transfer_accepted", &r, &err) != KL_OK)
        goto fail;
    kl_batch_free(b);
    b = NULL;
    kl_receipt_free(r);
    r = NULL;

    /* 3. The destination's signed receipt token (a fresh read). */
    step = "transfer receipt";
    if (kl_client_transfer_receipt(c, dst, src, NULL, transfer_id, &receipt, &err) != KL_OK ||
        print_json("transfer_receipt", kl_transfer_receipt_to_json(receipt, KL_JSON_OMIT_TOKENS), &err) != KL_OK)
        goto fail;

    /* 4. Complete on the source with that receipt token: the intent becomes Delivered. */
    step = "transfer complete";
    if (kl_batch_new(NULL, &b, &err) != KL_OK ||
        kl_batch_complete_transfer(b, src, NULL, transfer_id, receipt->receipt_token.data,
                                   receipt->receipt_token.len, &err) != KL_OK ||
        send(c, b, "transfer_completed", &r, &err) != KL_OK)
        goto fail;
    kl_batch_free(b);
    b = NULL;
    kl_receipt_free(r);
    r = NULL;

    step = "transfer inspect";
    if (kl_client_inspect_transfer(c, src, NULL, transfer_id, &inspected, &err) != KL_OK ||
        print_json("transfer_inspect", kl_transfer_to_json(inspected, KL_JSON_OMIT_TOKENS), &err) != KL_OK)
        goto fail;
    printf("state %s\n", kl_transfer_state_name(inspected->state));

    /* Replay: the Create rebuilt under the same command id (as after a lost answer) is
     * answered with the stored receipt, byte for byte; nothing new is written. */
    step = "transfer create (replay)";
    if (build_create(create_cmd, src, transfer_id, dst, &b, &err) != KL_OK ||
        send(c, b, "transfer_created_replay", &replayed, &err) != KL_OK)
        goto fail;
    if (replayed->len != created->len || memcmp(replayed->bytes, created->bytes, created->len) != 0) {
        kl_fail(&err, KL_INTERNAL, "replay", "the replayed receipt differs from the original");
        goto fail;
    }
    printf("replay identical (%zu receipt bytes)\n", created->len);
    status = 0;
    goto done;

fail:
    {
        char *json = kl_error_to_json(&err, 0);
        fprintf(stderr, "%s: %s: %s (%s)\n%s\n", step, kl_code_name(err.code), err.message,
                err.detail, json != NULL ? json : "");
        free(json);
    }
done:
    kl_transfer_answer_free(inspected);
    kl_transfer_receipt_answer_free(receipt);
    kl_receipt_free(replayed);
    kl_receipt_free(r);
    kl_receipt_free(created);
    kl_batch_free(b);
    kl_client_close(c);
    return status;
}
