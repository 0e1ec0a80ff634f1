/* proc_coord_sdk: what the coordinator suites do and read through the SDK: transfers,
 * receipts and states, queue contents, pending listings, token generations and histories,
 * and the coordinator's command ids derived independently of its code. */
#include "tests/cluster/proc_coord.h"

#include "common/canon.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

bool cc_tok_set(cc_tok *t, const uint8_t *p, size_t n)
{
    if (n > sizeof t->b)
        return false;
    memcpy(t->b, p, n);
    t->n = n;
    return true;
}

bool cc_tok_eq(const cc_tok *t, const uint8_t *p, size_t n) { return t->n == n && memcmp(t->b, p, n) == 0; }

kl_code cc_create(kl_client *c, const char *src, const char *lane, const char *tid, const char *dst,
                  const char *dst_lane, const char *body, kl_err *err)
{
    kl_batch *b = NULL;
    kl_message *m = NULL;
    kl_code rc = kl_message_new(body, strlen(body), &m, err);
    if (rc == KL_OK)
        rc = kl_batch_new(NULL, &b, err);
    if (rc == KL_OK)
        rc = kl_batch_create_transfer(b, src, lane, tid, dst, dst_lane, m, err);
    kl_message_free(m);
    if (rc != KL_OK) {
        kl_batch_free(b);
        return rc;
    }
    return cc_send(c, b, NULL, err);
}

/* The destination's receipt token for (src lane, tid): KL_OK, KL_NOT_FOUND or an error. */
kl_code cc_receipt(kl_client *c, const char *dst, const char *src, const char *lane, const char *tid,
                   cc_tok *tok, kl_err *err)
{
    Keyload__V1__InspectQueueTransferReceiptAnswer *a = NULL;
    kl_code rc = kl_client_transfer_receipt(c, dst, src, lane, tid, &a, err);
    if (rc == KL_OK && !cc_tok_set(tok, a->receipt_token.data, a->receipt_token.len))
        rc = kl_fail(err, KL_INTERNAL, "answer", "the receipt token is huge");
    kl_transfer_receipt_answer_free(a);
    return rc;
}

/* The source's state (0 on error) and, once Delivered, its verified receipt into *receipt
 * (when not NULL). */
uint32_t cc_state(kl_client *c, const char *src, const char *lane, const char *tid, cc_tok *receipt)
{
    Keyload__V1__InspectQueueTransferAnswer *a = NULL;
    kl_err err;
    uint32_t state = 0;
    if (kl_client_inspect_transfer(c, src, lane, tid, &a, &err) == KL_OK) {
        state = a->state;
        if (receipt && !cc_tok_set(receipt, a->receipt_token.data, a->receipt_token.len))
            state = 0;
    }
    kl_transfer_answer_free(a);
    return state;
}

bool cc_wait_state(kl_client *c, const char *src, const char *lane, const char *tid, uint32_t want,
                   int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    while (cc_state(c, src, lane, tid, NULL) != want) {
        if (now_ms() > deadline)
            return false;
        sleep_ms(50);
    }
    return true;
}

long long cc_messages(kl_client *root, const char *queue)
{
    Keyload__V1__QueueStatsAnswer *s = NULL;
    kl_err err;
    if (kl_client_queue_stats(root, queue, &s, &err) != KL_OK) {
        fprintf(stderr, "  stats %s: %s %s\n", queue, kl_code_name(err.code), err.message);
        return -1;
    }
    long long n = (long long)s->messages;
    kl_queue_stats_free(s);
    return n;
}

/* Leases up to max messages of queue/lane for a minute (nothing acked) and copies their
 * bodies (up to 63 bytes each) into bodies; returns how many, -1 on error. */
int cc_receive(kl_client *root, const char *queue, const char *lane, int max, char (*bodies)[64])
{
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    kl_err err;
    if (kl_batch_new(NULL, &b, &err) != KL_OK || kl_batch_receive(b, queue, lane, (uint32_t)max, 60000, &err) != KL_OK) {
        kl_batch_free(b);
        return -1;
    }
    if (cc_send(root, b, &r, &err) != KL_OK || r->decoded->n_results != 1 ||
        r->decoded->results[0]->kind_case != KEYLOAD__V1__MUTATION_RESULT__KIND_RECEIVED) {
        kl_receipt_free(r);
        return -1;
    }
    const Keyload__V1__Received *got = r->decoded->results[0]->received;
    int n = (int)got->n_messages;
    for (int i = 0; i < n && bodies; i++) {
        size_t l = got->messages[i]->message->body.len < 63 ? got->messages[i]->message->body.len : 63;
        memcpy(bodies[i], got->messages[i]->message->body.data, l);
        bodies[i][l] = '\0';
    }
    kl_receipt_free(r);
    return n;
}

/* OutputPending items listed on partition p (one page of up to max), -1 on error. */
long cc_pending_on(kl_client *c, int p, uint32_t max)
{
    Keyload__V1__ListPendingQueueTransfersAnswer *a = NULL;
    kl_err err;
    long n = -1;
    if (kl_client_pending_transfers(c, NULL, NULL, p, NULL, 0, max, &a, &err) == KL_OK)
        n = (long)a->n_items;
    kl_pending_transfers_free(a);
    return n;
}

/* The coordinator's command id of `step` for the transfer as InspectQueueTransfer shows it,
 * computed here from DESIGN.md §8 and coordinator/command_id.h's documented encoding (not
 * by calling the coordinator's code): first 16 bytes of BLAKE2b-256 over the canonical
 * (domain, step, principal, tenant, database, complete source lane, transfer id, complete
 * destination lane, fingerprint, generation). An independent derivation, so a test that
 * finds this id in the coordinator's log and gets the coordinator's committed outcome under
 * it proves the documented formula, not merely the code agreeing with itself. */
bool cc_command_id(const char *step, const char *principal, const char *db,
                   const Keyload__V1__InspectQueueTransferAnswer *a, const char *tid, char out[KL_GUID_TEXT_LEN + 1])
{
    char tenant[64];
    const char *slash = strchr(db, '/');
    uint8_t id[16], digest[32];
    if (slash == NULL || a->source == NULL || a->destination == NULL || !kl_guid_parse(tid, id))
        return false;
    snprintf(tenant, sizeof tenant, "%.*s", (int)(slash - db), db);
    kl_canon c;
    kl_canon_init(&c);
    kl_canon_str(&c, 1, "keyload.coordinator.command.v1");
    kl_canon_str(&c, 2, step);
    kl_canon_str(&c, 3, principal);
    kl_canon_str(&c, 4, tenant);
    kl_canon_str(&c, 5, slash + 1);
    kl_canon_lane(&c, 6, a->source);
    kl_canon_bytes(&c, 7, id, 16);
    kl_canon_lane(&c, 8, a->destination);
    kl_canon_bytes(&c, 9, a->fingerprint.data, a->fingerprint.len);
    kl_canon_u64(&c, 10, a->generation);
    bool ok = !c.oom;
    if (ok)
        crypto_generichash(digest, sizeof digest, c.buf, c.len, NULL, 0);
    kl_canon_free(&c);
    if (!ok)
        return false;
    uint8_t any = 0;
    for (int i = 0; i < 16; i++)
        any |= digest[i];
    if (any == 0)
        digest[15] = 1;
    kl_guid_format(digest, out);
    return true;
}


/* ---- retained failures, recovered ---- */

/* The generation a token's claims carry, 0 when it does not decode. */
uint64_t cc_token_generation(const uint8_t *p, size_t n)
{
    Keyload__V1__SignedToken *t = keyload__v1__signed_token__unpack(NULL, n, p);
    if (t == NULL)
        return 0;
    Keyload__V1__TransferClaims *c = keyload__v1__transfer_claims__unpack(NULL, t->claims.len, t->claims.data);
    uint64_t g = c ? c->generation : 0;
    if (c)
        keyload__v1__transfer_claims__free_unpacked(c, NULL);
    keyload__v1__signed_token__free_unpacked(t, NULL);
    return g;
}

/* What the source says of a transfer: generation, how many history entries of `event`,
 * the current token (into *cur when not NULL). false on error. */
bool cc_history(kl_client *c, const char *src, const char *tid, uint64_t *gen, uint32_t event, int *events,
                cc_tok *cur)
{
    Keyload__V1__InspectQueueTransferAnswer *a = NULL;
    kl_err err;
    if (kl_client_inspect_transfer(c, src, NULL, tid, &a, &err) != KL_OK)
        return false;
    *gen = a->generation;
    *events = 0;
    for (size_t i = 0; i < a->n_history; i++)
        *events += a->history[i]->event == event;
    bool ok = cur == NULL ||
              cc_tok_set(cur, a->current_token.len ? a->current_token.data : a->intent_token.data,
                         a->current_token.len ? a->current_token.len : a->intent_token.len);
    kl_transfer_answer_free(a);
    return ok;
}

/* Receives one message of queue and acks it (makes room in a full queue); its body (up to
 * 63 bytes) into body when not NULL. */
bool cc_drain_one(kl_client *root, const char *queue, char body[64])
{
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    kl_err err;
    if (kl_batch_new(NULL, &b, &err) != KL_OK || kl_batch_receive(b, queue, NULL, 1, 60000, &err) != KL_OK) {
        kl_batch_free(b);
        return false;
    }
    if (cc_send(root, b, &r, &err) != KL_OK || r->decoded->n_results != 1 ||
        r->decoded->results[0]->received->n_messages != 1) {
        kl_receipt_free(r);
        return false;
    }
    const Keyload__V1__ReceivedMessage *got = r->decoded->results[0]->received->messages[0];
    if (body != NULL) {
        size_t l = got->message->body.len < 63 ? got->message->body.len : 63;
        memcpy(body, got->message->body.data, l);
        body[l] = '\0';
    }
    kl_bytes lease = {got->lease_token.data, got->lease_token.len};
    bool ok = kl_batch_new(NULL, &b, &err) == KL_OK && kl_batch_ack(b, queue, &lease, 1, &err) == KL_OK &&
              cc_send(root, b, NULL, &err) == KL_OK;
    kl_receipt_free(r);
    return ok;
}

kl_code cc_enqueue(kl_client *root, const char *queue, const char *body, kl_err *err)
{
    kl_batch *b = NULL;
    kl_message *m = NULL;
    kl_code rc = kl_message_new(body, strlen(body), &m, err);
    if (rc == KL_OK)
        rc = kl_batch_new(NULL, &b, err);
    if (rc == KL_OK)
        rc = kl_batch_enqueue(b, queue, NULL, m, err);
    kl_message_free(m);
    if (rc != KL_OK) {
        kl_batch_free(b);
        return rc;
    }
    return cc_send(root, b, NULL, err);
}

/* The coordinator's deterministic Accept command id of the transfer's current generation. */
bool cc_accept_id(kl_client *c, const char *db, const char *src, const char *tid, char out[KL_GUID_TEXT_LEN + 1],
                  cc_tok *token, char *dlane, size_t dlane_cap)
{
    Keyload__V1__InspectQueueTransferAnswer *ia = NULL;
    kl_err err;
    if (kl_client_inspect_transfer(c, src, NULL, tid, &ia, &err) != KL_OK)
        return false;
    bool ok = cc_command_id("accept", "coord", db, ia, tid, out) &&
              cc_tok_set(token, ia->current_token.len ? ia->current_token.data : ia->intent_token.data,
                         ia->current_token.len ? ia->current_token.len : ia->intent_token.len);
    snprintf(dlane, dlane_cap, "%s", ia->destination ? ia->destination->lane : "");
    kl_transfer_answer_free(ia);
    return ok;
}

