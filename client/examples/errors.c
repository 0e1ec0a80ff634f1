/* errors: error handling with the KeyLoad C SDK.
 *
 * Every SDK call that can fail returns a kl_code and fills a kl_err (common/status.h):
 * code, a message naming the field or limit at fault, and a machine-readable detail (e.g.
 * "command_id", "grant:QueuePublish"). Messages never hold tokens, keys or bodies, so a
 * kl_err may be logged as it is; kl_error_to_json gives the canonical
 * {"error":{"code","message","detail"}} that `keyload --json` and keyload-mcp print.
 *
 * This program provokes, and expects, INVALID_ARGUMENT (a malformed command id, refused
 * before anything is sent), NOT_FOUND (stats of a queue that does not exist),
 * PERMISSION_DENIED (a principal without QueuePublish enqueues) and CONFLICT (a command id
 * reused with other content), printing "expected CODE {json}" for each. It also shows the
 * retry pattern for KL_UNKNOWN_WRITE_OUTCOME (send_until_known below).
 *
 *   errors [CLUSTER_FILE DATABASE PRINCIPAL KEY_FILE]   (else KEYLOAD_* as the CLI)
 *
 * The principal must be an administrator of the database with QueuePublish on "ex-*" (it
 * creates a queue, a second principal "ex-reader-..." and grants it QueueInspect only). An
 * outcome other than the expected one is an error: exit 1. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include "client/keyload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *arg(int argc, char **argv, int i, const char *env)
{
    const char *v = i < argc ? argv[i] : getenv(env);
    if (v == NULL || v[0] == '\0') {
        fprintf(stderr, "usage: %s [CLUSTER_FILE DATABASE PRINCIPAL KEY_FILE] (or %s)\n", argv[0], env);
        exit(2);
    }
    return v;
}

static void print_error(FILE *f, const char *label, const kl_err *err)
{
    char *json = kl_error_to_json(err, 0);
    fprintf(f, "%s %s\n", label, json != NULL ? json : "(out of memory)");
    free(json);
}

/* A refusal we provoked on purpose: it must have the code we expect. */
static bool expect(kl_code got, kl_code want, const kl_err *err)
{
    if (got == want) {
        char label[64];
        snprintf(label, sizeof label, "expected %s", kl_code_name(want));
        print_error(stdout, label, err);
        return true;
    }
    fprintf(stderr, "wanted %s, got %s\n", kl_code_name(want), kl_code_name(got));
    if (got != KL_OK)
        print_error(stderr, "unexpected", err);
    return false;
}

/* The retry pattern for writes. KL_UNKNOWN_WRITE_OUTCOME means the request may or may not
 * have committed (the answer was lost, or the leader lost its position after proposing
 * it): nothing was rolled back. The SDK already resent the same bytes to the members within
 * the client's timeout; when even that ends without an answer, send the SAME batch again
 * (same command id, same content; a kl_batch may be sent any number of times). If the first
 * attempt committed, the partition answers its stored receipt byte for byte; if not, it
 * commits now, once. Never build a new batch with a fresh command id for a retry: that
 * could do the work twice. KL_UNAVAILABLE (refused before proposing: not executed) and
 * KL_DEADLINE_EXCEEDED are safe to resend the same way. Other codes are final answers:
 * resending the same command id gives the same refusal (committed refusals are stored too). */
static kl_code send_until_known(kl_client *c, const kl_batch *b, kl_receipt **out, kl_err *err)
{
    kl_code rc = KL_OK;
    for (int attempt = 1; attempt <= 5; attempt++) {
        rc = kl_client_batch(c, b, out, err);
        if (rc != KL_UNKNOWN_WRITE_OUTCOME && rc != KL_UNAVAILABLE && rc != KL_DEADLINE_EXCEEDED)
            return rc;
        fprintf(stderr, "attempt %d: %s (%s); resending command %s\n", attempt,
                kl_code_name(rc), err->detail, kl_batch_command_id(b));
        sleep((unsigned)attempt); /* back off: a leader election takes about a second */
    }
    return rc; /* still unknown: keep the command id and try again later */
}

static kl_code enqueue_batch(const char *command_id, const char *queue, const char *body,
                             kl_batch **out, kl_err *err)
{
    kl_message *m = NULL;
    kl_code rc = kl_message_new(body, strlen(body), &m, err);
    if (rc == KL_OK)
        rc = kl_batch_new(command_id, out, err);
    if (rc == KL_OK && (rc = kl_batch_enqueue(*out, queue, NULL, m, err)) != KL_OK) {
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
    kl_code rc;
    kl_client *admin = NULL, *reader = NULL;
    kl_batch *b = NULL;
    kl_receipt *r1 = NULL, *r2 = NULL;
    Keyload__V1__QueueStatsAnswer *stats = NULL;
    char dir[] = "/tmp/kl-errors-XXXXXX", reader_key[64] = "";
    bool have_dir = false;
    int status = 1;

    if ((rc = kl_client_open_principal(cluster, database, 0, principal, key, &admin, &err)) != KL_OK)
        goto unexpected;

    /* INVALID_ARGUMENT, found by the SDK before anything is sent: detail "command_id". */
    if (!expect(kl_batch_new("not-a-guid", &b, &err), KL_INVALID_ARGUMENT, &err))
        goto done;

    char id[KL_COMMAND_ID_TEXT_LEN + 1], queue[64], missing[64], reader_id[64];
    kl_command_id_new(id);
    /* Names of our own from the id's last group, which is random (its first digits are
     * the time it was made), so that the example can run again on the same cluster. */
    snprintf(queue, sizeof queue, "ex-errors-%s", id + 24);
    snprintf(missing, sizeof missing, "ex-missing-%s", id + 24);
    snprintf(reader_id, sizeof reader_id, "ex-reader-%s", id + 24);

    /* NOT_FOUND from the cluster: the queue's name is in the message, never data. */
    if (!expect(kl_client_queue_stats(admin, missing, &stats, &err), KL_NOT_FOUND, &err))
        goto done;

    kl_queue_options opts = {0};
    if ((rc = kl_batch_new(NULL, &b, &err)) != KL_OK ||
        (rc = kl_batch_create_queue(b, queue, &opts, &err)) != KL_OK ||
        (rc = send_until_known(admin, b, &r1, &err)) != KL_OK)
        goto unexpected;
    kl_batch_free(b);
    b = NULL;
    kl_receipt_free(r1);
    r1 = NULL;

    /* PERMISSION_DENIED: a second principal that may only inspect the queue. Its key file is
     * written before the principal is registered (a commit never loses its key). */
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        goto done;
    }
    have_dir = true;
    snprintf(reader_key, sizeof reader_key, "%s/reader.key", dir);
    uint8_t pk[32];
    char cmd[KL_COMMAND_ID_TEXT_LEN + 1];
    kl_principal_result res;
    kl_grant inspect = {.permission = KEYLOAD__V1__PERMISSION__QUEUE_INSPECT, .queue_pattern = queue};
    if ((rc = kl_key_file_new(reader_key, pk, &err)) != KL_OK)
        goto unexpected;
    kl_command_id_new(cmd);
    if ((rc = kl_client_create_principal(admin, cmd, reader_id, pk, KL_ROLE_NONE, &res, NULL, &err)) != KL_OK)
        goto unexpected;
    kl_command_id_new(cmd);
    if ((rc = kl_client_grant(admin, cmd, reader_id, &inspect, &res, NULL, &err)) != KL_OK)
        goto unexpected;
    if ((rc = kl_client_open_principal(cluster, database, 0, reader_id, reader_key, &reader, &err)) != KL_OK)
        goto unexpected;
    if ((rc = enqueue_batch(NULL, queue, "not allowed", &b, &err)) != KL_OK)
        goto unexpected;
    /* The detail names the missing grant: "grant:QueuePublish". */
    if (!expect(kl_client_batch(reader, b, &r1, &err), KL_PERMISSION_DENIED, &err))
        goto done;
    kl_batch_free(b);
    b = NULL;

    /* The retry pattern, and CONFLICT. The same batch sent twice (as after an
     * UNKNOWN_WRITE_OUTCOME) is answered with the identical receipt. */
    kl_command_id_new(cmd);
    if ((rc = enqueue_batch(cmd, queue, "exactly once", &b, &err)) != KL_OK ||
        (rc = send_until_known(admin, b, &r1, &err)) != KL_OK ||
        (rc = send_until_known(admin, b, &r2, &err)) != KL_OK)
        goto unexpected;
    if (r1->len != r2->len || memcmp(r1->bytes, r2->bytes, r1->len) != 0) {
        fprintf(stderr, "the resent batch got another receipt\n");
        goto done;
    }
    printf("resent %s: identical receipt (%zu bytes)\n", kl_batch_command_id(b), r1->len);
    kl_batch_free(b);
    b = NULL;
    /* The same command id with other content is refused whole: CONFLICT. */
    if ((rc = enqueue_batch(cmd, queue, "other content", &b, &err)) != KL_OK)
        goto unexpected;
    kl_receipt_free(r2);
    r2 = NULL;
    if (!expect(kl_client_batch(admin, b, &r2, &err), KL_CONFLICT, &err))
        goto done;
    status = 0;
    goto done;

unexpected:
    print_error(stderr, "unexpected", &err);
done:
    kl_receipt_free(r1);
    kl_receipt_free(r2);
    kl_queue_stats_free(stats);
    kl_batch_free(b);
    kl_client_close(reader);
    kl_client_close(admin);
    if (reader_key[0] != '\0')
        unlink(reader_key);
    if (have_dir)
        rmdir(dir);
    return status;
}
