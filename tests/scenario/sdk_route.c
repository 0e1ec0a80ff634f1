/* sdk_route: the C SDK route of the staged RF3 transfer scenario (tests/mcp/staged.test.mjs,
 * README "Tests and their budgets"). One operation per invocation, built against nothing but
 * client/keyload.h and lib/libkeyload.a (plus jansson to read its own arguments):
 *
 *   build/scenario-sdk OP < ARGS.json          (KEYLOAD_CLUSTER, KEYLOAD_DATABASE,
 *                                                KEYLOAD_PRINCIPAL, KEYLOAD_KEY as the CLI)
 *
 * The arguments come as one JSON object on stdin, never on the command line, because they
 * carry tokens (credentials). Every mutating operation needs an explicit "command_id" (no
 * fresh id is ever drawn here, so a replay is always the caller's choice). Operations and
 * their arguments (lanes may be left out for "default"):
 *
 *   create    source_queue source_lane transfer_id dest_queue dest_lane body [headers {k: v}]
 *             [fields {k: integer|string}] command_id            -> kl_receipt_to_json
 *   accept    dest_queue dest_lane intent_token (base64) command_id   -> kl_receipt_to_json
 *   complete  source_queue source_lane transfer_id receipt_token (base64) command_id
 *                                                                -> kl_receipt_to_json
 *   inspect   source_queue source_lane transfer_id                -> kl_transfer_to_json
 *   receipt   dest_queue source_queue source_lane transfer_id      -> kl_transfer_receipt_to_json
 *   receive   queue lane max lease_ms command_id                  -> kl_receipt_to_json
 *   ack       queue lease_tokens [base64...] command_id           -> kl_receipt_to_json
 *   stats     queue                                              -> kl_queue_stats_to_json
 *
 * Output: exactly one line on stdout, the SDK's canonical JSON of the answer (tokens
 * included: the scenario compares them) and exit 0; or kl_error_to_json of the refusal and
 * exit 1 (the code is always the SDK's named code, never invented here); exit 2 for a usage
 * error (unknown operation, argument missing or of the wrong type; also printed as an error
 * object, code INVALID_ARGUMENT, detail "usage:NAME"). */
#include "client/keyload.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_USAGE 2

/* A usage error: the argument `name` is missing or has the wrong type. */
static kl_code usage(kl_err *err, const char *name)
{
    char detail[160];
    snprintf(detail, sizeof detail, "usage:%s", name);
    return kl_fail(err, KL_INVALID_ARGUMENT, detail, "argument %s is missing or has the wrong type", name);
}

/* A required string argument (NULL after a usage error). */
static const char *str(json_t *args, const char *name, kl_err *err)
{
    json_t *v = json_object_get(args, name);
    if (!json_is_string(v)) {
        usage(err, name);
        return NULL;
    }
    return json_string_value(v);
}

/* An optional string argument (lanes): NULL when absent or null. */
static const char *opt_str(json_t *args, const char *name)
{
    json_t *v = json_object_get(args, name);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* A base64 argument decoded into *out (malloc'd). */
static kl_code b64(json_t *args, const char *name, uint8_t **out, size_t *len, kl_err *err)
{
    const char *text = str(args, name, err);
    if (text == NULL)
        return KL_INVALID_ARGUMENT;
    return kl_base64_decode(name, text, out, len, err);
}

/* The message of a create: body (UTF-8 text), headers {k: "v"}, fields {k: int|string}. */
static kl_code message(json_t *args, kl_message **out, kl_err *err)
{
    const char *body = str(args, "body", err);
    if (body == NULL)
        return KL_INVALID_ARGUMENT;
    kl_code rc = kl_message_new(body, strlen(body), out, err);
    const char *k;
    json_t *v;
    json_t *headers = json_object_get(args, "headers");
    json_object_foreach(headers, k, v) {
        if (rc != KL_OK)
            break;
        rc = json_is_string(v) ? kl_message_add_header(*out, k, json_string_value(v), err) : usage(err, "headers");
    }
    json_t *fields = json_object_get(args, "fields");
    json_object_foreach(fields, k, v) {
        if (rc != KL_OK)
            break;
        if (json_is_integer(v))
            rc = kl_message_add_field_int(*out, k, (int64_t)json_integer_value(v), err);
        else if (json_is_string(v))
            rc = kl_message_add_field_string(*out, k, json_string_value(v), err);
        else
            rc = usage(err, "fields");
    }
    if (rc != KL_OK) {
        kl_message_free(*out);
        *out = NULL;
    }
    return rc;
}

/* Sends b and prints its receipt's canonical JSON into *json. */
static kl_code send(kl_client *c, const kl_batch *b, char **json, kl_err *err)
{
    kl_receipt *r = NULL;
    kl_code rc = kl_client_batch(c, b, &r, err);
    if (rc == KL_OK && (*json = kl_receipt_to_json(r->decoded, 0)) == NULL)
        rc = kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    kl_receipt_free(r);
    return rc;
}

/* One mutating operation: a batch under the caller's command id with one mutation. */
static kl_code mutate(kl_client *c, const char *op, json_t *args, char **json, kl_err *err)
{
    const char *cmd = str(args, "command_id", err);
    if (cmd == NULL)
        return KL_INVALID_ARGUMENT;
    kl_batch *b = NULL;
    kl_message *m = NULL;
    uint8_t *token = NULL;
    size_t token_len = 0;
    kl_bytes *leases = NULL;
    uint8_t **lease_bytes = NULL;
    size_t n_leases = 0;
    kl_code rc = kl_batch_new(cmd, &b, err);
    if (rc != KL_OK)
        return rc;

    if (strcmp(op, "create") == 0) {
        const char *src = str(args, "source_queue", err), *id = src ? str(args, "transfer_id", err) : NULL,
                   *dst = id ? str(args, "dest_queue", err) : NULL;
        rc = dst == NULL ? KL_INVALID_ARGUMENT : message(args, &m, err);
        if (rc == KL_OK)
            rc = kl_batch_create_transfer(b, src, opt_str(args, "source_lane"), id, dst,
                                          opt_str(args, "dest_lane"), m, err);
    } else if (strcmp(op, "accept") == 0) {
        const char *dst = str(args, "dest_queue", err);
        rc = dst == NULL ? KL_INVALID_ARGUMENT : b64(args, "intent_token", &token, &token_len, err);
        if (rc == KL_OK)
            rc = kl_batch_accept_transfer(b, dst, opt_str(args, "dest_lane"), token, token_len, err);
    } else if (strcmp(op, "complete") == 0) {
        const char *src = str(args, "source_queue", err), *id = src ? str(args, "transfer_id", err) : NULL;
        rc = id == NULL ? KL_INVALID_ARGUMENT : b64(args, "receipt_token", &token, &token_len, err);
        if (rc == KL_OK)
            rc = kl_batch_complete_transfer(b, src, opt_str(args, "source_lane"), id, token, token_len, err);
    } else if (strcmp(op, "receive") == 0) {
        const char *q = str(args, "queue", err);
        json_t *max = json_object_get(args, "max"), *lease = json_object_get(args, "lease_ms");
        rc = q == NULL ? KL_INVALID_ARGUMENT
             : !json_is_integer(max) ? usage(err, "max")
             : !json_is_integer(lease) ? usage(err, "lease_ms")
                                       : kl_batch_receive(b, q, opt_str(args, "lane"), (uint32_t)json_integer_value(max),
                                                          (uint32_t)json_integer_value(lease), err);
    } else if (strcmp(op, "ack") == 0) {
        const char *q = str(args, "queue", err);
        json_t *list = json_object_get(args, "lease_tokens");
        rc = q == NULL ? KL_INVALID_ARGUMENT : !json_is_array(list) ? usage(err, "lease_tokens") : KL_OK;
        if (rc == KL_OK) {
            n_leases = json_array_size(list);
            leases = calloc(n_leases + 1, sizeof *leases);
            lease_bytes = calloc(n_leases + 1, sizeof *lease_bytes);
            if (leases == NULL || lease_bytes == NULL)
                rc = kl_fail(err, KL_INTERNAL, "memory", "out of memory");
        }
        for (size_t i = 0; rc == KL_OK && i < n_leases; i++) {
            json_t *t = json_array_get(list, i);
            rc = json_is_string(t) ? kl_base64_decode("lease_tokens", json_string_value(t), &lease_bytes[i],
                                                      &leases[i].len, err)
                                   : usage(err, "lease_tokens");
            leases[i].data = lease_bytes[i];
        }
        if (rc == KL_OK)
            rc = kl_batch_ack(b, q, leases, n_leases, err);
    } else {
        rc = usage(err, "op");
    }
    if (rc == KL_OK)
        rc = send(c, b, json, err);

    for (size_t i = 0; lease_bytes != NULL && i < n_leases; i++)
        free(lease_bytes[i]);
    free(lease_bytes);
    free(leases);
    free(token);
    kl_message_free(m);
    kl_batch_free(b);
    return rc;
}

/* One read operation. */
static kl_code read_op(kl_client *c, const char *op, json_t *args, char **json, kl_err *err)
{
    kl_code rc;
    if (strcmp(op, "inspect") == 0) {
        const char *src = str(args, "source_queue", err), *id = src ? str(args, "transfer_id", err) : NULL;
        if (id == NULL)
            return KL_INVALID_ARGUMENT;
        Keyload__V1__InspectQueueTransferAnswer *a = NULL;
        rc = kl_client_inspect_transfer(c, src, opt_str(args, "source_lane"), id, &a, err);
        if (rc == KL_OK)
            *json = kl_transfer_to_json(a, 0);
        kl_transfer_answer_free(a);
    } else if (strcmp(op, "receipt") == 0) {
        const char *dst = str(args, "dest_queue", err), *src = dst ? str(args, "source_queue", err) : NULL,
                   *id = src ? str(args, "transfer_id", err) : NULL;
        if (id == NULL)
            return KL_INVALID_ARGUMENT;
        Keyload__V1__InspectQueueTransferReceiptAnswer *a = NULL;
        rc = kl_client_transfer_receipt(c, dst, src, opt_str(args, "source_lane"), id, &a, err);
        if (rc == KL_OK)
            *json = kl_transfer_receipt_to_json(a, 0);
        kl_transfer_receipt_answer_free(a);
    } else {
        const char *q = str(args, "queue", err);
        if (q == NULL)
            return KL_INVALID_ARGUMENT;
        Keyload__V1__QueueStatsAnswer *s = NULL;
        rc = kl_client_queue_stats(c, q, &s, err);
        if (rc == KL_OK)
            *json = kl_queue_stats_to_json(q, s, 0);
        kl_queue_stats_free(s);
    }
    if (rc == KL_OK && *json == NULL)
        rc = kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    return rc;
}

int main(int argc, char **argv)
{
    static const char *const mutations[] = {"create", "accept", "complete", "receive", "ack"};
    static const char *const reads[] = {"inspect", "receipt", "stats"};
    kl_err err = {0};
    kl_client *c = NULL;
    json_t *args = NULL;
    char *json = NULL;
    kl_code rc = KL_OK;
    bool mutation = false, known = false;
    const char *op = argc == 2 ? argv[1] : "";
    for (size_t i = 0; i < sizeof mutations / sizeof *mutations; i++)
        if (strcmp(op, mutations[i]) == 0)
            mutation = known = true;
    for (size_t i = 0; i < sizeof reads / sizeof *reads; i++)
        if (strcmp(op, reads[i]) == 0)
            known = true;

    const char *cluster = getenv("KEYLOAD_CLUSTER"), *database = getenv("KEYLOAD_DATABASE"),
               *principal = getenv("KEYLOAD_PRINCIPAL"), *key = getenv("KEYLOAD_KEY");
    const char *timeout = getenv("KEYLOAD_TIMEOUT_MS");
    json_error_t je;
    /* The arguments first, whatever follows (json_is_object evaluates its argument twice). */
    args = json_loadf(stdin, JSON_REJECT_DUPLICATES, &je);
    if (!known)
        rc = usage(&err, "op");
    else if (cluster == NULL || principal == NULL || key == NULL)
        rc = usage(&err, "KEYLOAD_CLUSTER/KEYLOAD_PRINCIPAL/KEYLOAD_KEY");
    else if (!json_is_object(args))
        rc = usage(&err, "stdin");
    if (rc != KL_OK) {
        char *e = kl_error_to_json(&err, 0);
        printf("%s\n", e != NULL ? e : "{\"error\":{\"code\":\"INTERNAL\"}}");
        free(e);
        json_decref(args);
        return EXIT_USAGE;
    }

    rc = kl_client_open_principal(cluster, database, timeout != NULL ? atoi(timeout) : 0, principal, key, &c, &err);
    if (rc == KL_OK)
        rc = mutation ? mutate(c, op, args, &json, &err) : read_op(c, op, args, &json, &err);
    if (rc != KL_OK) {
        free(json);
        json = kl_error_to_json(&err, 0);
    }
    printf("%s\n", json != NULL ? json : "{\"error\":{\"code\":\"INTERNAL\",\"message\":\"out of memory\",\"detail\":\"memory\"}}");
    free(json);
    json_decref(args);
    kl_client_close(c);
    return rc == KL_OK ? 0 : 1;
}
