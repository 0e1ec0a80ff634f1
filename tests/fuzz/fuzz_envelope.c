/* fuzz_envelope: libFuzzer target for what keyloadd does with a client frame before it
 * touches any state (DESIGN.md §9: "a malformed frame ... is refused without touching
 * state; the daemon never crashes or exits on client input").
 *
 * Input bytes are decoded as keyload.v1.Envelope (as common/rpc.c does with every request
 * frame) and as keyload.v1.Answer (what a client decodes). When the envelope decodes, its
 * payload is decoded as
 *   - BatchRequest: then kl_engine_validate_batch (stateless checks, default limits) and
 *     kl_canon_batch_digest(method, "local", ...), as daemon/node.c does;
 *   - BatchReceipt (the stored, replayed answer) and QueueStatsRequest (with the name
 *     checks daemon/node.c applies to it).
 * Besides "no crash, no leak, no undefined behaviour" it checks two properties of the
 * canonical digest (common/canon.h), aborting when either fails:
 *   1. it does not depend on wire bytes: unpack -> pack -> unpack gives the same digest,
 *      and a batch that passed validation still decodes after re-encoding (the engine
 *      stores parts of it re-encoded);
 *   2. for a batch that passed validation, header and field order does not matter:
 *      reversing every message's headers and fields gives the same digest. */
#include "common/canon.h"
#include "common/cluster.h"
#include "common/status.h"
#include "daemon/engine/engine.h"
#include "keyload/v1/queue.pb-c.h"
#include "keyload/v1/rpc.pb-c.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PRINCIPAL "local"

static kl_limits g_limits;
static int g_init;

static void die(const char *what)
{
    fprintf(stderr, "fuzz_envelope: property violated: %s\n", what);
    abort();
}

static void reverse_ptrs(void **a, size_t n)
{
    for (size_t i = 0; i < n / 2; i++) {
        void *t = a[i];
        a[i] = a[n - 1 - i];
        a[n - 1 - i] = t;
    }
}

/* Reverses headers and fields of every enqueued message in place (twice restores). */
static void reverse_maps(Keyload__V1__BatchRequest *b)
{
    for (size_t i = 0; i < b->n_mutations; i++) {
        const Keyload__V1__Mutation *m = b->mutations[i];
        if (m->kind_case != KEYLOAD__V1__MUTATION__KIND_ENQUEUE || m->enqueue->message == NULL)
            continue;
        Keyload__V1__EnqueueMessage *msg = m->enqueue->message;
        reverse_ptrs((void **)msg->headers, msg->n_headers);
        reverse_ptrs((void **)msg->fields, msg->n_fields);
    }
}

static void check_batch(const char *method, const uint8_t *p, size_t len)
{
    Keyload__V1__BatchRequest *b = keyload__v1__batch_request__unpack(NULL, len, p);
    if (b == NULL)
        return;
    kl_err err;
    kl_err_clear(&err);
    kl_code rc = kl_engine_validate_batch(b, len, &g_limits, &err);
    if (rc != KL_OK && (err.code != rc || err.message[0] == '\0'))
        die("validation failed without naming the fault");

    uint8_t d1[KL_DIGEST_LEN], d2[KL_DIGEST_LEN];
    /* The daemon digests only validated batches; the digest must cope with any decoded one. */
    int dr = kl_canon_batch_digest(method, PRINCIPAL, b, d1);

    /* Property 1: re-encoding does not change the digest. */
    size_t n = keyload__v1__batch_request__get_packed_size(b);
    uint8_t *buf = malloc(n ? n : 1);
    if (buf != NULL) {
        size_t w = keyload__v1__batch_request__pack(b, buf);
        if (w != n)
            die("pack wrote a different size than get_packed_size");
        Keyload__V1__BatchRequest *b2 = keyload__v1__batch_request__unpack(NULL, n, buf);
        /* The engine stores parts of an accepted request re-encoded (EnqueueMessage inside
         * MessageRecord, QueueLimits inside QueueRecord), unknown fields included; such a
         * record must decode again, or one enqueue poisons its queue. */
        if (b2 == NULL && rc == KL_OK)
            die("a validated BatchRequest does not decode after re-encoding "
                "(what the engine stores from it would be unreadable)");
        if (b2 != NULL && dr == 0 && kl_canon_batch_digest(method, PRINCIPAL, b2, d2) == 0 &&
            memcmp(d1, d2, KL_DIGEST_LEN) != 0)
            die("digest changed after re-encoding");
        if (b2 != NULL)
            keyload__v1__batch_request__free_unpacked(b2, NULL);
        free(buf);
    }

    /* Property 2: on valid batches, map order does not matter (validation refused duplicate
     * keys, so the canonical sort is total). */
    if (rc == KL_OK && dr == 0) {
        reverse_maps(b);
        if (kl_canon_batch_digest(method, PRINCIPAL, b, d2) == 0 && memcmp(d1, d2, KL_DIGEST_LEN) != 0)
            die("digest depends on header/field order of a valid batch");
        reverse_maps(b);
        for (size_t i = 0; i < b->n_mutations; i++) {
            const Keyload__V1__Mutation *m = b->mutations[i];
            if (m->kind_case == KEYLOAD__V1__MUTATION__KIND_ENQUEUE)
                (void)kl_canon_message_fingerprint(m->enqueue->message, d2);
        }
    }
    keyload__v1__batch_request__free_unpacked(b, NULL);
}

static void check_receipt(const uint8_t *p, size_t len)
{
    Keyload__V1__BatchReceipt *r = keyload__v1__batch_receipt__unpack(NULL, len, p);
    if (r == NULL)
        return;
    size_t n = keyload__v1__batch_receipt__get_packed_size(r);
    uint8_t *buf = malloc(n ? n : 1);
    if (buf != NULL) {
        if (keyload__v1__batch_receipt__pack(r, buf) != n)
            die("receipt pack size mismatch");
        free(buf);
    }
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
}

static void check_stats(const uint8_t *p, size_t len)
{
    Keyload__V1__QueueStatsRequest *r = keyload__v1__queue_stats_request__unpack(NULL, len, p);
    if (r == NULL)
        return;
    kl_err err;
    kl_err_clear(&err);
    if (r->queue != NULL) {
        (void)(kl_name_check("queue.tenant", r->queue->tenant, &err) == KL_OK &&
               kl_name_check("queue.database", r->queue->database, &err) == KL_OK &&
               kl_name_check("queue.queue", r->queue->queue, &err) == KL_OK);
    }
    keyload__v1__queue_stats_request__free_unpacked(r, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_init) {
        kl_limits_default(&g_limits);
        g_init = 1;
    }
    Keyload__V1__Answer *a = keyload__v1__answer__unpack(NULL, size, data);
    if (a != NULL)
        keyload__v1__answer__free_unpacked(a, NULL);

    Keyload__V1__Envelope *env = keyload__v1__envelope__unpack(NULL, size, data);
    if (env == NULL)
        return 0;
    const char *method = env->method ? env->method : "";
    const uint8_t *p = env->payload.data;
    size_t len = env->payload.len;
    if (p == NULL && len != 0)
        die("envelope payload has a length but no data");
    check_batch(method, p, len);
    check_receipt(p, len);
    check_stats(p, len);
    keyload__v1__envelope__free_unpacked(env, NULL);
    return 0;
}
