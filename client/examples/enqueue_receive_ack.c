/* enqueue_receive_ack: the life of a message with the KeyLoad C SDK.
 *
 * Opens a client as a principal, creates a queue, enqueues a message with headers and typed
 * fields, receives it under a lease, acks it, and prints the canonical JSON of every
 * receipt (one line each, "LABEL {json}"). Uses only client/keyload.h and lib/libkeyload.a.
 *
 *   enqueue_receive_ack [CLUSTER_FILE DATABASE PRINCIPAL KEY_FILE]
 *
 * Arguments left out come from KEYLOAD_CLUSTER, KEYLOAD_DATABASE, KEYLOAD_PRINCIPAL and
 * KEYLOAD_KEY, as for the `keyload` CLI. The principal needs QueuePublish, QueueConsume
 * (fields total, sku, qty; header source), QueueAck and QueueInspect on "ex-orders-*", and
 * may create queues (an administrator of the database). Exit 0 on success, 1 on any error. */
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

/* Prints "what: CODE: message (detail)" and the canonical error JSON on stderr. */
static void report(const char *what, const kl_err *err)
{
    char *json = kl_error_to_json(err, 0);
    fprintf(stderr, "%s: %s: %s (%s)\n%s\n", what, kl_code_name(err->code), err->message,
            err->detail, json != NULL ? json : "");
    free(json);
}

/* Sends b, prints its receipt as "label {json}", frees b. On KL_OK *out is the receipt. */
static kl_code send(kl_client *c, kl_batch *b, const char *label, kl_receipt **out, kl_err *err)
{
    kl_code rc = kl_client_batch(c, b, out, err);
    if (rc == KL_OK) {
        char *json = kl_receipt_to_json((*out)->decoded, 0);
        if (json == NULL) {
            kl_receipt_free(*out);
            *out = NULL;
            rc = kl_fail(err, KL_INTERNAL, "memory", "out of memory");
        } else {
            printf("%s %s\n", label, json);
            free(json);
        }
    }
    kl_batch_free(b);
    return rc;
}

/* Each step below frees what it made and answers KL_OK, or fails with err set; main
 * reports the failed step by name. */

/* Creating a queue changes the catalog: alone in its batch (partition 0 places it). */
static kl_code create_queue(kl_client *c, const char *queue, kl_err *err)
{
    kl_queue_options opts = {.max_messages = 10000, .max_deliveries = 5};
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    kl_code rc;
    if ((rc = kl_batch_new(NULL, &b, err)) != KL_OK ||
        (rc = kl_batch_create_queue(b, queue, &opts, err)) != KL_OK) {
        kl_batch_free(b);
        return rc;
    }
    rc = send(c, b, "created", &r, err);
    kl_receipt_free(r);
    return rc;
}

/* A message with a header and typed fields. The batch copies it. */
static kl_code enqueue_order(kl_client *c, const char *queue, kl_err *err)
{
    kl_message *m = NULL;
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    kl_code rc;
    if ((rc = kl_message_new("order 17", strlen("order 17"), &m, err)) != KL_OK ||
        (rc = kl_message_add_header(m, "source", "web", err)) != KL_OK ||
        (rc = kl_message_add_field_double(m, "total", 9.5, err)) != KL_OK ||
        (rc = kl_message_add_field_string(m, "sku", "KL-123", err)) != KL_OK ||
        (rc = kl_message_add_field_int(m, "qty", 2, err)) != KL_OK ||
        /* The command id (a fresh GUID here) is what makes a retry safe: see errors.c. */
        (rc = kl_batch_new(NULL, &b, err)) != KL_OK ||
        (rc = kl_batch_enqueue(b, queue, NULL, m, err)) != KL_OK) {
        kl_batch_free(b);
        kl_message_free(m);
        return rc;
    }
    kl_message_free(m);
    rc = send(c, b, "enqueued", &r, err);
    kl_receipt_free(r);
    return rc;
}

/* Receive leases up to 10 messages for 30 s; unacked ones come back after that. On KL_OK
 * *out is the receipt and *tokens (n of them) the lease tokens of its messages. */
static kl_code receive_some(kl_client *c, const char *queue, kl_receipt **out, kl_bytes **tokens,
                            size_t *n, kl_err *err)
{
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    kl_code rc;
    if ((rc = kl_batch_new(NULL, &b, err)) != KL_OK ||
        (rc = kl_batch_receive(b, queue, NULL, 10, 30000, err)) != KL_OK) {
        kl_batch_free(b);
        return rc;
    }
    if ((rc = send(c, b, "received", &r, err)) != KL_OK)
        return rc;
    /* results[i] answers the batch's i-th mutation; the messages belong to the receipt. */
    const Keyload__V1__Received *got = r->decoded->results[0]->received;
    if (r->decoded->n_results != 1 || got == NULL || got->n_messages == 0) {
        kl_receipt_free(r);
        return kl_fail(err, KL_INTERNAL, "received", "the receive returned no message");
    }
    *tokens = calloc(got->n_messages, sizeof **tokens);
    if (*tokens == NULL) {
        kl_receipt_free(r);
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    }
    for (size_t i = 0; i < got->n_messages; i++) {
        const Keyload__V1__ReceivedMessage *rm = got->messages[i];
        fprintf(stderr, "message %llu: %.*s (delivery %u)\n", (unsigned long long)rm->message_id,
                (int)rm->message->body.len, (const char *)rm->message->body.data, rm->delivery_count);
        (*tokens)[i] = (kl_bytes){rm->lease_token.data, rm->lease_token.len};
    }
    *n = got->n_messages;
    *out = r;
    return KL_OK;
}

/* Ack with the lease tokens (the batch copies them, so the receipt may go right after).
 * Frees the receipt and the tokens. */
static kl_code ack_all(kl_client *c, const char *queue, kl_receipt *received, kl_bytes *tokens,
                       size_t n, kl_err *err)
{
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    kl_code rc;
    if ((rc = kl_batch_new(NULL, &b, err)) == KL_OK)
        rc = kl_batch_ack(b, queue, tokens, n, err);
    kl_receipt_free(received);
    free(tokens);
    if (rc != KL_OK) {
        kl_batch_free(b);
        return rc;
    }
    rc = send(c, b, "acked", &r, err);
    kl_receipt_free(r);
    return rc;
}

/* A fresh read (behind the partition's read barrier): the queue is empty again. */
static kl_code print_stats(kl_client *c, const char *queue, kl_err *err)
{
    Keyload__V1__QueueStatsAnswer *stats = NULL;
    kl_code rc = kl_client_queue_stats(c, queue, &stats, err);
    if (rc != KL_OK)
        return rc;
    char *json = kl_queue_stats_to_json(queue, stats, 0);
    kl_queue_stats_free(stats);
    if (json == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    printf("stats %s\n", json);
    free(json);
    return KL_OK;
}

/* Deleting runs two steps (the queue's partition, then partition 0) under one id. */
static kl_code delete_queue(kl_client *c, const char *queue, kl_err *err)
{
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    kl_code rc;
    if ((rc = kl_batch_new(NULL, &b, err)) != KL_OK ||
        (rc = kl_batch_delete_queue(b, queue, err)) != KL_OK) {
        kl_batch_free(b);
        return rc;
    }
    rc = send(c, b, "deleted", &r, err);
    kl_receipt_free(r);
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
    const char *step = "open";

    /* One client per process is enough: it is thread-safe, dials members on first use,
     * shakes hands with each, and follows leader changes by itself. */
    if (kl_client_open_principal(cluster, database, 0, principal, key, &c, &err) != KL_OK) {
        report(step, &err);
        return 1;
    }

    /* A queue name of our own, so that the example can run again on the same cluster: the
     * id's last group, which is random (its first digits are the time it was made). */
    char cmd[KL_COMMAND_ID_TEXT_LEN + 1], queue[64];
    kl_command_id_new(cmd);
    snprintf(queue, sizeof queue, "ex-orders-%s", cmd + 24);

    kl_receipt *received = NULL;
    kl_bytes *tokens = NULL;
    size_t n = 0;
    kl_code rc;
    if ((rc = create_queue(c, queue, &err)) != KL_OK)
        step = "create queue";
    else if ((rc = enqueue_order(c, queue, &err)) != KL_OK)
        step = "enqueue";
    else if ((rc = receive_some(c, queue, &received, &tokens, &n, &err)) != KL_OK)
        step = "receive";
    else if ((rc = ack_all(c, queue, received, tokens, n, &err)) != KL_OK)
        step = "ack";
    else if ((rc = print_stats(c, queue, &err)) != KL_OK)
        step = "queue stats";
    else if ((rc = delete_queue(c, queue, &err)) != KL_OK)
        step = "delete queue";
    if (rc != KL_OK)
        report(step, &err);
    kl_client_close(c);
    return rc == KL_OK ? 0 : 1;
}
