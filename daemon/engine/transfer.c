/* Remote queue transfers on one partition (transfer.h). Every write goes to the view's
 * scratch overlay, so a refusal anywhere leaves nothing behind. */
#include "daemon/engine/transfer.h"
#include "daemon/engine/transfer_internal.h"

#include "common/guid.h"
#include "common/keys.h"
#include "daemon/engine/access.h"
#include "daemon/engine/catalog.h"
#include "daemon/engine/claims.h"
#include "daemon/engine/hold.h"
#include "daemon/engine/kind.h"
#include "daemon/engine/validate.h"
#include "daemon/store/keys.h"
#include "keyload/v1/store.pb-c.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *kl_xfer_caller_id(const kl_eval_ctx *c)
{
    return (c->who && c->who->principal) ? c->who->principal->principal_id : KL_CATALOG_RESERVED_PRINCIPAL;
}

/* Catalog records are read outside the request's scan budget, like node.c's. */
kl_code kl_xfer_catalog_database(kl_view *v, const char *tenant, const char *db,
                                Keyload__V1__CatalogDatabase **out, kl_err *err)
{
    bool found;
    uint64_t limit = v->scan_limit, scanned = v->scanned;
    v->scan_limit = UINT64_MAX;
    kl_code rc = kl_catalog_get_database(v, tenant, db, out, &found, err);
    v->scan_limit = limit;
    v->scanned = scanned;
    if (rc == KL_OK && !found)
        rc = kl_fail(err, KL_NOT_FOUND, "database", "database %s/%s does not exist", tenant, db);
    if (rc == KL_OK && ((*out)->signing_public_key.len != 32 || (*out)->signing_key_id.len != 8 ||
                        (*out)->incarnation.len != 16)) {
        keyload__v1__catalog_database__free_unpacked(*out, NULL);
        *out = NULL;
        rc = kl_fail(err, KL_FAILED_PRECONDITION, "signing_key",
                     "database %s/%s has no signing key in this partition's catalog", tenant, db);
    }
    return rc;
}

kl_code kl_xfer_catalog_queue(kl_view *v, const Keyload__V1__QueueLaneRef *r, Keyload__V1__CatalogQueue **out,
                             kl_err *err)
{
    bool found;
    uint64_t limit = v->scan_limit, scanned = v->scanned;
    v->scan_limit = UINT64_MAX;
    kl_code rc = kl_catalog_get_queue(v, r->tenant, r->database, r->queue, out, &found, err);
    v->scan_limit = limit;
    v->scanned = scanned;
    if (rc == KL_OK && !found)
        rc = kl_fail(err, KL_NOT_FOUND, "destination", "destination queue '%s' does not exist in %s/%s",
                     r->queue, r->tenant, r->database);
    return rc;
}

/* The database's signing secret, derived from the cluster secret (never stored). */
kl_code kl_xfer_signing_key(const kl_eval_ctx *c, const Keyload__V1__CatalogDatabase *d, uint8_t sk[64],
                           kl_err *err)
{
    if (c->cluster_secret == NULL)
        return kl_fail(err, KL_FAILED_PRECONDITION, "cluster_secret",
                       "this member has no cluster secret, so it cannot sign transfer tokens "
                       "(start keyloadd with --cluster-secret)");
    kl_signing_cache *cache = c->signing;
    for (unsigned i = 0; cache && i < KL_SIGNING_CACHE_SLOTS; i++)
        if (cache->slot[i].used && cache->slot[i].database_id == d->database_id &&
            memcmp(cache->slot[i].pk, d->signing_public_key.data, 32) == 0 &&
            memcmp(cache->slot[i].key_id, d->signing_key_id.data, 8) == 0) {
            memcpy(sk, cache->slot[i].sk, 64);
            return KL_OK;
        }
    uint8_t pk[32], kid[8];
    kl_code rc = kl_keys_database_signing(c->cluster_secret, d->database_id, pk, sk, kid, err);
    if (rc == KL_OK && (memcmp(pk, d->signing_public_key.data, 32) != 0 || memcmp(kid, d->signing_key_id.data, 8) != 0)) {
        sodium_memzero(sk, 64);
        rc = kl_fail(err, KL_INTERNAL, "signing_key",
                     "the signing key this member derives for database %s/%s differs from the "
                     "catalog's: its cluster secret is not the cluster's", d->tenant, d->database);
    }
    if (rc == KL_OK && cache != NULL) {
        unsigned i = cache->next++ % KL_SIGNING_CACHE_SLOTS;
        cache->slot[i].used = true;
        cache->slot[i].database_id = d->database_id;
        memcpy(cache->slot[i].sk, sk, 64);
        memcpy(cache->slot[i].pk, pk, 32);
        memcpy(cache->slot[i].key_id, kid, 8);
    }
    return rc;
}

kl_code kl_xfer_verify_token(const kl_eval_ctx *c, const char *what, const Keyload__V1__SignedToken *tok,
                             const Keyload__V1__CatalogDatabase *d, kl_err *err)
{
    uint8_t sk[64];
    kl_err ignored = {0};
    bool have_sk = kl_xfer_signing_key(c, d, sk, &ignored) == KL_OK; /* none without a cluster secret */
    kl_code rc = kl_claims_verify(what, tok, d->signing_public_key.data, d->signing_key_id.data,
                                  have_sk ? sk : NULL, err);
    sodium_memzero(sk, sizeof sk);
    return rc;
}

/* Data, field and header checks run with every administrator flag off (ARCHITECTURE.md "Engine"). */
kl_code kl_xfer_data_check(const kl_eval_ctx *c, const Keyload__V1__QueueLaneRef *q, Keyload__V1__Permission perm,
                          const Keyload__V1__EnqueueMessage *msg, kl_err *err)
{
    uint64_t t0 = c->clock_ns ? c->clock_ns() : 0;
    kl_code rc = kl_access_transfer_data(c->who, q, perm, msg, err);
    if (c->clock_ns)
        ((kl_eval_ctx *)c)->authz_ns += c->clock_ns() - t0;
    return rc;
}

/* A point read of a protobuf record through the view (counted against its scan budget). */
kl_code kl_xfer_get_record(kl_view *v, const kl_key *k, const ProtobufCMessageDescriptor *d,
                          ProtobufCMessage **out, size_t *stored, kl_err *err)
{
    uint8_t *val;
    size_t n;
    bool found;
    *out = NULL;
    kl_code rc = kl_view_get(v, k->b, k->len, &val, &n, &found, err);
    if (rc != KL_OK || !found)
        return rc;
    *out = protobuf_c_message_unpack(d, NULL, n, val);
    free(val);
    if (stored)
        *stored = n;
    return *out ? KL_OK : kl_record_corrupt(err, d->short_name);
}

kl_code kl_xfer_lane_load(kl_view *v, uint64_t qid, const char *lane, Keyload__V1__LaneTransferRecord **out,
                         kl_err *err)
{
    kl_key k;
    kl_key_lane_transfers(&k, qid, lane);
    kl_code rc = kl_xfer_get_record(v, &k, &keyload__v1__lane_transfer_record__descriptor, (ProtobufCMessage **)out,
                            NULL, err);
    if (rc == KL_OK && *out == NULL && (*out = keyload__v1__lane_transfer_record__unpack(NULL, 0, NULL)) == NULL)
        rc = kl_record_oom(err);
    return rc;
}

kl_code kl_xfer_lane_save(kl_view *v, uint64_t qid, const char *lane, const Keyload__V1__LaneTransferRecord *l,
                         kl_err *err)
{
    kl_key k;
    kl_key_lane_transfers(&k, qid, lane);
    return kl_view_put_msg(v, k.b, k.len, &l->base, err);
}

/* Admission of `records` more retained records of `bytes` on a lane, before anything is
 * written. */
kl_code kl_xfer_admit(const kl_eval_ctx *c, const Keyload__V1__LaneTransferRecord *l, uint64_t records,
                      uint64_t bytes, const char *side, const Keyload__V1__QueueLaneRef *r, kl_err *err)
{
    if (l->records + records > c->limits->max_scan_records)
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "limit:MaxScanRecords",
                       "%s lane %s/%s retains %llu transfer records; %llu more would pass its "
                       "MaxScanRecords (%llu); transfer records are never collected",
                       side, r->queue, r->lane, (unsigned long long)l->records, (unsigned long long)records,
                       (unsigned long long)c->limits->max_scan_records);
    if (l->bytes + bytes > c->limits->max_batch_bytes)
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "limit:MaxBatchBytes",
                       "%s lane %s/%s retains %llu bytes of transfer records; %llu more would pass "
                       "its MaxBatchBytes (%llu)", side, r->queue, r->lane, (unsigned long long)l->bytes,
                       (unsigned long long)bytes, (unsigned long long)c->limits->max_batch_bytes);
    return KL_OK;
}

bool kl_xfer_bytes_eq(const ProtobufCBinaryData *a, const uint8_t *p, size_t n)
{
    return a->len == n && (n == 0 || memcmp(a->data, p, n) == 0);
}

static kl_code add_result(kl_buf *out, Keyload__V1__MutationResult *res, kl_err *err)
{
    return kl_engine_add_result(out, res, err);
}

/* The most a receipt token for these claims' identity can take, plus the history entry
 * Complete appends: built with the largest value every number can have, so the true
 * receipt is never bigger. */
static uint64_t receipt_reserve(const Keyload__V1__TransferClaims *intent)
{
    Keyload__V1__TransferClaims r = *intent;
    Keyload__V1__TargetEffect e = KEYLOAD__V1__TARGET_EFFECT__INIT;
    e.message_id = UINT64_MAX;
    e.partition = -1; /* ten bytes, the longest int32 encoding */
    e.term = UINT64_MAX;
    e.index = UINT64_MAX;
    r.purpose = KEYLOAD__V1__CLAIM_PURPOSE__TRANSFER_RECEIPT;
    r.message = NULL;
    r.effect = &e;
    r.issued_unix_ms = -1;
    r.generation = UINT64_MAX;
    size_t claims = keyload__v1__transfer_claims__get_packed_size(&r);
    /* SignedToken: claims, key id and signature fields, each tag + length + bytes. */
    size_t token = (1 + 10 + claims) + (1 + 1 + 8) + (1 + 1 + 64);
    Keyload__V1__TransferHistoryEntry h = KEYLOAD__V1__TRANSFER_HISTORY_ENTRY__INIT;
    h.event = KEYLOAD__V1__TRANSFER_EVENT__RECEIPT_VERIFIED;
    h.generation = UINT64_MAX;
    h.unix_ms = -1;
    h.term = UINT64_MAX;
    h.index = UINT64_MAX;
    size_t hist = 1 + 10 + keyload__v1__transfer_history_entry__get_packed_size(&h);
    /* TransferRecord.receipt_token field, the history entry and DELIVERED's state byte. */
    return (1 + 10 + token) + hist + 2;
}

/* The most a later generation's intent token is longer than generation 1's: the
 * generation varint grows from 1 to at most 10 bytes, the claims' and token's length
 * prefixes by at most one byte each. */
#define KL_XFER_TOKEN_GROWTH 16

uint64_t kl_xfer_advance_reserve(const Keyload__V1__TransferClaims *intent)
{
    Keyload__V1__TransferClaims a = *intent;
    a.generation = UINT64_MAX;
    a.issued_unix_ms = -1;
    size_t claims = keyload__v1__transfer_claims__get_packed_size(&a);
    size_t token = (1 + 10 + claims) + (1 + 1 + 8) + (1 + 1 + 64);
    uint8_t cmd[16] = {0};
    Keyload__V1__TransferHistoryEntry h = KEYLOAD__V1__TRANSFER_HISTORY_ENTRY__INIT;
    h.event = KEYLOAD__V1__TRANSFER_EVENT__POLICY_REPAIRED;
    h.generation = UINT64_MAX;
    h.unix_ms = -1;
    h.term = UINT64_MAX;
    h.index = UINT64_MAX;
    h.failed_command_id.data = cmd;
    h.failed_command_id.len = sizeof cmd;
    h.failure_code = -1;
    size_t hist = 1 + 10 + keyload__v1__transfer_history_entry__get_packed_size(&h);
    /* The attempt_token field, the history entry, and the advance_records and
     * attempt_advances counters at their longest. */
    return (1 + 10 + token) + hist + 11 + 11;
}

/* The exact size of the Accept batch the coordinator will send for a token this long
 * (only the length of token matters). */
static size_t accept_batch_size(const Keyload__V1__QueueLaneRef *target, const uint8_t *token, size_t len)
{
    uint8_t cmd[16] = {0};
    Keyload__V1__AcceptQueueTransfer a = KEYLOAD__V1__ACCEPT_QUEUE_TRANSFER__INIT;
    a.destination_queue = (Keyload__V1__QueueLaneRef *)target;
    a.intent_token.data = (uint8_t *)token;
    a.intent_token.len = len;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_ACCEPT_QUEUE_TRANSFER;
    m.accept_queue_transfer = &a;
    Keyload__V1__Mutation *mp = &m;
    Keyload__V1__BatchRequest b = KEYLOAD__V1__BATCH_REQUEST__INIT;
    b.command_id.data = cmd;
    b.command_id.len = sizeof cmd;
    b.n_mutations = 1;
    b.mutations = &mp;
    return keyload__v1__batch_request__get_packed_size(&b);
}

/* Bytes a sealed frame adds around a batch (envelope, session id, counter, AEAD tag). */
#define FRAME_OVERHEAD 256

/* ---- Create (source) ---- */

/* CreateQueueTransfer under a transfer id already taken on the source lane: the same
 * destination and message answer the existing intent, anything else conflicts. The
 * stored token is returned as it is. */
static kl_code create_existing(const Keyload__V1__TransferRecord *prior, const Keyload__V1__QueueLaneRef *src,
                               const Keyload__V1__QueueLaneRef *dst, const uint8_t fp[KL_DIGEST_LEN], kl_buf *out,
                               kl_err *err)
{
    if (!kl_claims_lane_eq(prior->destination, dst) || !kl_xfer_bytes_eq(&prior->fingerprint, fp, KL_DIGEST_LEN))
        return kl_fail(err, KL_CONFLICT, "transfer_id",
                       "transfer_id is already used on source lane %s/%s with another %s; a "
                       "transfer's destination and message never change",
                       src->queue, src->lane,
                       kl_claims_lane_eq(prior->destination, dst) ? "message" : "destination");
    Keyload__V1__TransferCreated tc = KEYLOAD__V1__TRANSFER_CREATED__INIT;
    Keyload__V1__MutationResult res = KEYLOAD__V1__MUTATION_RESULT__INIT;
    res.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_CREATED;
    res.transfer_created = &tc;
    tc.intent_token = prior->intent_token;
    tc.state = prior->state;
    tc.generation = prior->generation;
    tc.existing = true;
    return add_result(out, &res, err);
}

/* Signs the intent token of a new transfer (claims filled into *cl, which the stored
 * record then shares), refusing one whose Accept batch could never be committed. */
static kl_code sign_intent(kl_eval_ctx *c, const Keyload__V1__CatalogDatabase *d,
                           const Keyload__V1__CreateQueueTransfer *m, Keyload__V1__QueueLaneRef *src,
                           Keyload__V1__QueueLaneRef *dst, const uint8_t fp[KL_DIGEST_LEN],
                           Keyload__V1__TransferClaims *cl, uint8_t **token, size_t *token_len, kl_err *err)
{
    uint8_t sk[64];
    kl_code rc;
    if ((rc = kl_xfer_signing_key(c, d, sk, err)) != KL_OK)
        return rc;
    cl->version = KL_CLAIMS_VERSION;
    cl->purpose = KEYLOAD__V1__CLAIM_PURPOSE__TRANSFER_INTENT;
    cl->database_incarnation = d->incarnation;
    cl->source = src;
    cl->target = dst;
    cl->transfer_id = m->transfer_id;
    cl->generation = 1;
    cl->principal_id = (char *)kl_xfer_caller_id(c);
    cl->message = m->message;
    cl->fingerprint.data = (uint8_t *)fp;
    cl->fingerprint.len = KL_DIGEST_LEN;
    cl->issued_unix_ms = c->now_ms;
    rc = kl_claims_sign(cl, sk, d->signing_key_id.data, token, token_len, err);
    sodium_memzero(sk, sizeof sk);
    if (rc != KL_OK)
        return rc;
    /* Never commit an intent the destination could not accept: the whole Accept batch
     * carrying this token must fit MaxBatchBytes (and a frame). */
    size_t accept = accept_batch_size(dst, *token, *token_len + KL_XFER_TOKEN_GROWTH);
    if (accept > c->limits->max_batch_bytes || accept + FRAME_OVERHEAD > c->limits->max_frame_bytes) {
        rc = kl_fail(err, KL_RESOURCE_EXHAUSTED, "limit:MaxBatchBytes",
                     "the Accept batch that would carry this transfer's intent token is %zu bytes, "
                     "over MaxBatchBytes (%llu) or the frame limit; send a smaller message",
                     accept, (unsigned long long)c->limits->max_batch_bytes);
        return rc;
    }
    return KL_OK;
}

/* Stores a new transfer's record under k (and its pending 'Y' key), charged with the
 * reservations its accept-attempt ceiling needs, and charges the source lane. */
static kl_code store_intent(kl_eval_ctx *c, const Keyload__V1__CatalogDatabase *d, uint64_t qid,
                            Keyload__V1__QueueLaneRef *src, Keyload__V1__QueueLaneRef *dst,
                            Keyload__V1__LaneTransferRecord *lane, const ProtobufCBinaryData *transfer_id,
                            uint8_t *token, size_t token_len, const Keyload__V1__TransferClaims *cl,
                            const kl_key *k, kl_err *err)
{
    kl_code rc;
    Keyload__V1__TransferHistoryEntry h = KEYLOAD__V1__TRANSFER_HISTORY_ENTRY__INIT;
    h.event = KEYLOAD__V1__TRANSFER_EVENT__INTENT_CREATED;
    h.generation = 1;
    h.unix_ms = c->now_ms;
    h.term = c->term;
    h.index = c->index;
    Keyload__V1__TransferHistoryEntry *hp = &h;
    Keyload__V1__TransferRecord rec = KEYLOAD__V1__TRANSFER_RECORD__INIT;
    rec.state = KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING;
    rec.generation = 1;
    rec.intent_token.data = token;
    rec.intent_token.len = token_len;
    rec.destination = dst;
    rec.fingerprint = cl->fingerprint;
    rec.principal_id = cl->principal_id;
    rec.n_history = 1;
    rec.history = &hp;
    rec.max_accept_attempts = d->limits ? d->limits->max_queue_transfer_accept_attempts : NULL;
    rec.created_unix_ms = c->now_ms;
    rec.source = src;
    rec.database_id = d->database_id;
    /* Charged: the record as stored now, the most its receipt can add, and its 'X' and 'Y'
     * keys. The charged_bytes field itself is counted at its longest (10 bytes). */
    kl_key yk;
    kl_key_transfer_pending(&yk, d->database_id, qid, src->lane, transfer_id->data);
    /* A ceiling of N reserves N-1 attempt advances: one record and the widest advance's
     * bytes each, so an advance never needs room the lane may no longer have. */
    uint64_t reserve_records = 0, reserve_bytes = 0;
    if (rec.max_accept_attempts != NULL && rec.max_accept_attempts->value > 1) {
        reserve_records = rec.max_accept_attempts->value - 1;
        reserve_bytes = reserve_records * kl_xfer_advance_reserve(cl);
    }
    rec.reserved_records = reserve_records;
    rec.reserved_bytes = reserve_bytes;
    uint64_t charge = keyload__v1__transfer_record__get_packed_size(&rec) + 1 + 10 + receipt_reserve(cl) +
                      k->len + yk.len;
    rec.charged_bytes = charge;
    if ((rc = kl_xfer_admit(c, lane, 1 + reserve_records, charge + reserve_bytes, "source", src, err)) != KL_OK)
        return rc;
    if ((rc = kl_view_put_msg(c->view, k->b, k->len, &rec.base, err)) != KL_OK ||
        (rc = kl_view_put(c->view, yk.b, yk.len, NULL, 0, err)) != KL_OK)
        return rc;
    lane->records += 1 + reserve_records;
    lane->bytes += charge + reserve_bytes;
    return kl_xfer_lane_save(c->view, qid, src->lane, lane, err);
}

kl_code kl_transfer_eval_create(kl_eval_ctx *c, const Keyload__V1__CreateQueueTransfer *m, kl_buf *out,
                                kl_err *err)
{
    Keyload__V1__QueueLaneRef src, dst;
    kl_claims_lane(&src, m->source_queue);
    kl_claims_lane(&dst, m->destination);
    Keyload__V1__QueueRecord *q = NULL;
    Keyload__V1__CatalogQueue *ddef = NULL;
    Keyload__V1__CatalogDatabase *d = NULL;
    Keyload__V1__TransferRecord *prior = NULL;
    Keyload__V1__LaneTransferRecord *lane = NULL;
    uint8_t *token = NULL;
    size_t token_len = 0;
    uint8_t fp[KL_DIGEST_LEN];
    uint64_t qid;
    kl_key k;
    kl_code rc = kl_engine_load_queue(c->view, &src, &qid, &q, err);
    if (rc != KL_OK)
        goto done;
    if ((rc = kl_xfer_catalog_queue(c->view, &dst, &ddef, err)) != KL_OK)
        goto done;
    if (ddef->partition == c->partition) {
        rc = kl_fail(err, KL_FAILED_PRECONDITION, "same_partition",
                     "source queue '%s' and destination queue '%s' are both on partition %d; a "
                     "transfer joins two partitions. Placement is fixed when a queue is created: "
                     "create the destination on another partition (keyload queue create NAME "
                     "--partition P) and transfer to it",
                     src.queue, dst.queue, c->partition);
        goto done;
    }
    if ((rc = kl_xfer_catalog_database(c->view, src.tenant, src.database, &d, err)) != KL_OK)
        goto done;
    if (kl_canon_message_fingerprint(m->message, fp) != 0) {
        rc = kl_record_oom(err);
        goto done;
    }
    kl_key_transfer(&k, qid, src.lane, m->transfer_id.data);
    if ((rc = kl_xfer_get_record(c->view, &k, &keyload__v1__transfer_record__descriptor, (ProtobufCMessage **)&prior,
                         NULL, err)) != KL_OK)
        goto done;
    Keyload__V1__TransferCreated tc = KEYLOAD__V1__TRANSFER_CREATED__INIT;
    Keyload__V1__MutationResult res = KEYLOAD__V1__MUTATION_RESULT__INIT;
    res.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_CREATED;
    res.transfer_created = &tc;
    if (prior != NULL) {
        rc = create_existing(prior, &src, &dst, fp, out, err);
        goto done;
    }
    if (m->message->expires_at_unix_ms != 0 && m->message->expires_at_unix_ms <= c->now_ms) {
        rc = kl_fail(err, KL_FAILED_PRECONDITION, "expires_at_unix_ms",
                     "the message expired before the transfer could be created");
        goto done;
    }
    if ((rc = kl_xfer_lane_load(c->view, qid, src.lane, &lane, err)) != KL_OK)
        goto done;
    if (d->transfers_paused || lane->paused) {
        rc = kl_fail(err, KL_FAILED_PRECONDITION, "transfers_paused",
                     "new transfers from %s are paused (keyload transfer resume%s); transfers "
                     "already created go on",
                     d->transfers_paused ? "this database" : "this source lane",
                     d->transfers_paused ? "" : " --source QUEUE/LANE");
        goto done;
    }
    Keyload__V1__TransferClaims cl = KEYLOAD__V1__TRANSFER_CLAIMS__INIT;
    if ((rc = sign_intent(c, d, m, &src, &dst, fp, &cl, &token, &token_len, err)) != KL_OK)
        goto done;
    if ((rc = store_intent(c, d, qid, &src, &dst, lane, &m->transfer_id, token, token_len, &cl, &k, err)) != KL_OK)
        goto done;
    tc.intent_token.data = token;
    tc.intent_token.len = token_len;
    tc.state = KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING;
    tc.generation = 1;
    rc = add_result(out, &res, err);
done:
    free(token);
    if (q)
        keyload__v1__queue_record__free_unpacked(q, NULL);
    if (ddef)
        keyload__v1__catalog_queue__free_unpacked(ddef, NULL);
    if (d)
        keyload__v1__catalog_database__free_unpacked(d, NULL);
    if (prior)
        keyload__v1__transfer_record__free_unpacked(prior, NULL);
    if (lane)
        keyload__v1__lane_transfer_record__free_unpacked(lane, NULL);
    return rc;
}

/* ---- Accept (destination) ---- */

/* Claims of a verified intent that a correct source always sets; a mismatch means the
 * token was minted for something else. */
kl_code kl_xfer_intent_claims_ok(const Keyload__V1__TransferClaims *cl, const Keyload__V1__CatalogDatabase *d,
                                kl_err *err)
{
    const char *bad = NULL;
    uint8_t fp[KL_DIGEST_LEN];
    if (cl->version != KL_CLAIMS_VERSION)
        bad = "version";
    else if (cl->purpose != KEYLOAD__V1__CLAIM_PURPOSE__TRANSFER_INTENT)
        bad = "purpose";
    else if (!kl_xfer_bytes_eq(&cl->database_incarnation, d->incarnation.data, d->incarnation.len))
        bad = "incarnation";
    else if (cl->source == NULL || strcmp(cl->source->tenant, cl->target->tenant) != 0 ||
             strcmp(cl->source->database, cl->target->database) != 0 || cl->source->lane[0] == '\0')
        bad = "source";
    else if (!kl_guid_valid(cl->transfer_id.data, cl->transfer_id.len))
        bad = "transfer_id";
    else if (cl->generation == 0)
        bad = "generation";
    else if (cl->message == NULL)
        bad = "message";
    else if (kl_canon_message_fingerprint(cl->message, fp) != 0)
        return kl_record_oom(err);
    else if (!kl_xfer_bytes_eq(&cl->fingerprint, fp, sizeof fp))
        bad = "fingerprint";
    if (bad == NULL)
        return KL_OK;
    char detail[48];
    snprintf(detail, sizeof detail, "intent_claims:%s", bad);
    return kl_fail(err, KL_PERMISSION_DENIED, detail,
                   "intent_token is signed by this database but its %s claim is not an intent's "
                   "for this database", bad);
}

static kl_code accept_result(kl_buf *out, const Keyload__V1__TargetEffect *e, const char *lane, bool dedup,
                             kl_err *err)
{
    Keyload__V1__TransferAccepted ta = KEYLOAD__V1__TRANSFER_ACCEPTED__INIT;
    ta.message_id = e->message_id;
    ta.lane = (char *)lane;
    ta.partition = e->partition;
    ta.term = e->term;
    ta.index = e->index;
    ta.deduplicated = dedup;
    Keyload__V1__MutationResult res = KEYLOAD__V1__MUTATION_RESULT__INIT;
    res.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ACCEPTED;
    res.transfer_accepted = &ta;
    return add_result(out, &res, err);
}

/* Signs the receipt of an Accept: the intent's claims, naming the effect e it has here. */
static kl_code sign_receipt(const kl_eval_ctx *c, const Keyload__V1__CatalogDatabase *d,
                            const Keyload__V1__TransferClaims *cl, Keyload__V1__QueueLaneRef *dst,
                            Keyload__V1__TargetEffect *e, uint8_t **token, size_t *token_len, kl_err *err)
{
    uint8_t sk[64];
    kl_code rc = kl_xfer_signing_key(c, d, sk, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__TransferClaims rcl = KEYLOAD__V1__TRANSFER_CLAIMS__INIT;
    rcl.version = KL_CLAIMS_VERSION;
    rcl.purpose = KEYLOAD__V1__CLAIM_PURPOSE__TRANSFER_RECEIPT;
    rcl.database_incarnation = d->incarnation;
    rcl.source = cl->source;
    rcl.target = dst;
    rcl.transfer_id = cl->transfer_id;
    rcl.generation = cl->generation;
    rcl.principal_id = cl->principal_id;
    rcl.fingerprint = cl->fingerprint;
    rcl.effect = e;
    rcl.issued_unix_ms = c->now_ms;
    rc = kl_claims_sign(&rcl, sk, d->signing_key_id.data, token, token_len, err);
    sodium_memzero(sk, sizeof sk);
    return rc;
}

kl_code kl_transfer_eval_accept(kl_eval_ctx *c, const Keyload__V1__AcceptQueueTransfer *m, kl_buf *out,
                                kl_err *err)
{
    Keyload__V1__QueueLaneRef dst;
    kl_claims_lane(&dst, m->destination_queue);
    Keyload__V1__SignedToken *tok = NULL;
    Keyload__V1__TransferClaims *cl = NULL;
    Keyload__V1__CatalogDatabase *d = NULL;
    Keyload__V1__QueueRecord *q = NULL;
    Keyload__V1__DedupRecord *prior = NULL;
    Keyload__V1__LaneTransferRecord *lane = NULL;
    uint8_t *token = NULL;
    size_t token_len = 0;
    uint64_t qid;
    kl_key k;
    /* the order in ARCHITECTURE.md "Engine": caller, destination, signature and claims, authorization,
     * dedup, then quota and expiry, then the effect. */
    kl_code rc = kl_claims_decode("intent_token", m->intent_token.data, m->intent_token.len, &tok, &cl, err);
    if (rc != KL_OK)
        goto done;
    if (strcmp(cl->principal_id, kl_xfer_caller_id(c)) != 0) {
        rc = kl_fail(err, KL_PERMISSION_DENIED, "intent_principal",
                     "the intent was created by another principal; only the principal that "
                     "created a transfer may accept it");
        goto done;
    }
    if (cl->target == NULL || !kl_claims_lane_eq(cl->target, &dst) || cl->target->lane[0] == '\0') {
        rc = kl_fail(err, KL_INVALID_ARGUMENT, "destination_queue",
                     "destination_queue (%s/%s) is not the intent's target", dst.queue, dst.lane);
        goto done;
    }
    if ((rc = kl_xfer_catalog_database(c->view, dst.tenant, dst.database, &d, err)) != KL_OK)
        goto done;
    if ((rc = kl_xfer_verify_token(c, "intent_token", tok, d, err)) != KL_OK ||
        (rc = kl_xfer_intent_claims_ok(cl, d, err)) != KL_OK)
        goto done;
    if ((rc = kl_xfer_data_check(c, &dst, KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, cl->message, err)) != KL_OK)
        goto done;
    if ((rc = kl_engine_load_queue(c->view, &dst, &qid, &q, err)) != KL_OK)
        goto done;
    kl_key_transfer_dedup(&k, qid, cl->source->queue, cl->source->lane, cl->transfer_id.data);
    if ((rc = kl_xfer_get_record(c->view, &k, &keyload__v1__dedup_record__descriptor, (ProtobufCMessage **)&prior, NULL,
                         err)) != KL_OK)
        goto done;
    if (prior != NULL) {
        /* Accepted before: the stored receipt stands, whatever happened to the message
         * since and however full the lane is now. */
        if (!kl_xfer_bytes_eq(&prior->fingerprint, cl->fingerprint.data, cl->fingerprint.len) || prior->effect == NULL) {
            rc = kl_fail(err, KL_CONFLICT, "transfer_id",
                         "a different message was already accepted for this source lane and transfer_id");
            goto done;
        }
        rc = accept_result(out, prior->effect, prior->lane, true, err);
        goto done;
    }
    if (cl->message->expires_at_unix_ms != 0 && cl->message->expires_at_unix_ms <= c->now_ms) {
        rc = kl_fail(err, KL_FAILED_PRECONDITION, "expires_at_unix_ms",
                     "the transferred message expired before the destination accepted it");
        goto done;
    }
    if ((rc = kl_xfer_lane_load(c->view, qid, dst.lane, &lane, err)) != KL_OK)
        goto done;
    /* The receipt names the message before it is stored: its id is the queue's next. */
    Keyload__V1__TargetEffect e = KEYLOAD__V1__TARGET_EFFECT__INIT;
    e.message_id = q->next_seq + 1;
    e.partition = c->partition;
    e.term = c->term;
    e.index = c->index;
    if ((rc = sign_receipt(c, d, cl, &dst, &e, &token, &token_len, err)) != KL_OK)
        goto done;
    Keyload__V1__DedupRecord dr = KEYLOAD__V1__DEDUP_RECORD__INIT;
    dr.fingerprint = cl->fingerprint;
    dr.receipt_token.data = token;
    dr.receipt_token.len = token_len;
    dr.effect = &e;
    dr.lane = dst.lane;
    uint64_t charge = keyload__v1__dedup_record__get_packed_size(&dr) + 1 + 10 + k.len;
    dr.charged_bytes = charge;
    if ((rc = kl_xfer_admit(c, lane, 1, charge, "destination", &dst, err)) != KL_OK)
        goto done;
    uint64_t qid2, seq;
    if ((rc = kl_engine_enqueue_message(c, &dst, cl->message, &qid2, &seq, err)) != KL_OK)
        goto done;
    if (seq != e.message_id) {
        rc = kl_fail(err, KL_INTERNAL, "message_id", "the enqueued message id is not the one the receipt names");
        goto done;
    }
    if ((rc = kl_view_put_msg(c->view, k.b, k.len, &dr.base, err)) != KL_OK)
        goto done;
    lane->records++;
    lane->bytes += charge;
    if ((rc = kl_xfer_lane_save(c->view, qid, dst.lane, lane, err)) != KL_OK)
        goto done;
    rc = accept_result(out, &e, dst.lane, false, err);
done:
    free(token);
    if (tok)
        keyload__v1__signed_token__free_unpacked(tok, NULL);
    if (cl)
        keyload__v1__transfer_claims__free_unpacked(cl, NULL);
    if (d)
        keyload__v1__catalog_database__free_unpacked(d, NULL);
    if (q)
        keyload__v1__queue_record__free_unpacked(q, NULL);
    if (prior)
        keyload__v1__dedup_record__free_unpacked(prior, NULL);
    if (lane)
        keyload__v1__lane_transfer_record__free_unpacked(lane, NULL);
    return rc;
}

/* ---- Complete (source) ---- */

kl_code kl_xfer_history_append(const kl_eval_ctx *c, const Keyload__V1__TransferRecord *rec,
                               Keyload__V1__TransferEvent event, uint64_t generation,
                               Keyload__V1__TransferHistoryEntry *h, Keyload__V1__TransferHistoryEntry ***out,
                               kl_err *err)
{
    if ((*out = calloc(rec->n_history + 1, sizeof **out)) == NULL)
        return kl_record_oom(err);
    keyload__v1__transfer_history_entry__init(h);
    h->event = event;
    h->generation = generation;
    h->unix_ms = c->now_ms;
    h->term = c->term;
    h->index = c->index;
    memcpy(*out, rec->history, rec->n_history * sizeof **out);
    (*out)[rec->n_history] = h;
    return KL_OK;
}

const char *kl_xfer_claims_mismatch(const Keyload__V1__TransferClaims *c, Keyload__V1__ClaimPurpose purpose,
                                    const Keyload__V1__TransferRecord *rec, const Keyload__V1__CatalogDatabase *d,
                                    const ProtobufCBinaryData *tid)
{
    if (c->version != KL_CLAIMS_VERSION)
        return "version";
    if (c->purpose != purpose)
        return "purpose";
    if (!kl_xfer_bytes_eq(&c->database_incarnation, d->incarnation.data, d->incarnation.len))
        return "incarnation";
    if (strcmp(c->principal_id, rec->principal_id) != 0)
        return "principal";
    if (!kl_claims_lane_eq(c->source, rec->source))
        return "source";
    if (!kl_claims_lane_eq(c->target, rec->destination))
        return "target";
    if (!kl_xfer_bytes_eq(&c->transfer_id, tid->data, tid->len))
        return "transfer_id";
    if (!kl_xfer_bytes_eq(&c->fingerprint, rec->fingerprint.data, rec->fingerprint.len))
        return "fingerprint";
    return NULL;
}

/* Which claim of a verified receipt does not match the stored intent, or NULL. */
static const char *receipt_mismatch(const Keyload__V1__TransferClaims *r, const Keyload__V1__TransferRecord *rec,
                                    const Keyload__V1__CatalogDatabase *d, const ProtobufCBinaryData *tid)
{
    const char *bad = kl_xfer_claims_mismatch(r, KEYLOAD__V1__CLAIM_PURPOSE__TRANSFER_RECEIPT, rec, d, tid);
    if (bad != NULL)
        return bad;
    /* A receipt of any generation the intent reached stands: Accepts of all generations
     * share one dedup key, so at most one of them ever enqueued. */
    if (r->generation == 0 || r->generation > rec->generation)
        return "generation";
    if (r->effect == NULL)
        return "effect";
    return NULL;
}

kl_code kl_transfer_eval_complete(kl_eval_ctx *c, const Keyload__V1__CompleteQueueTransfer *m,
                                  kl_buf *out, kl_err *err)
{
    Keyload__V1__QueueLaneRef src;
    kl_claims_lane(&src, m->source_queue);
    Keyload__V1__QueueRecord *q = NULL;
    Keyload__V1__TransferRecord *rec = NULL;
    Keyload__V1__SignedToken *tok = NULL;
    Keyload__V1__TransferClaims *cl = NULL;
    Keyload__V1__CatalogDatabase *d = NULL;
    Keyload__V1__TransferHistoryEntry **hist = NULL;
    Keyload__V1__LaneTransferRecord *lane = NULL;
    uint64_t qid;
    kl_key k;
    kl_code rc = kl_engine_load_queue(c->view, &src, &qid, &q, err);
    if (rc != KL_OK)
        goto done;
    kl_key_transfer(&k, qid, src.lane, m->transfer_id.data);
    if ((rc = kl_xfer_get_record(c->view, &k, &keyload__v1__transfer_record__descriptor, (ProtobufCMessage **)&rec, NULL,
                         err)) != KL_OK)
        goto done;
    if (rec == NULL) {
        rc = kl_fail(err, KL_NOT_FOUND, "transfer", "source lane %s/%s has no transfer with this transfer_id",
                     src.queue, src.lane);
        goto done;
    }
    if ((rc = kl_claims_decode("receipt_token", m->receipt_token.data, m->receipt_token.len, &tok, &cl, err)) != KL_OK ||
        (rc = kl_xfer_catalog_database(c->view, src.tenant, src.database, &d, err)) != KL_OK ||
        (rc = kl_xfer_verify_token(c, "receipt_token", tok, d, err)) != KL_OK)
        goto done;
    const char *bad = receipt_mismatch(cl, rec, d, &m->transfer_id);
    if (bad != NULL) {
        char detail[40];
        snprintf(detail, sizeof detail, "receipt:%s", bad);
        rc = kl_fail(err, KL_FAILED_PRECONDITION, detail,
                     "receipt_token's %s does not match the stored intent; the transfer stays %s",
                     bad, rec->state == KEYLOAD__V1__TRANSFER_STATE__DELIVERED ? "Delivered" : "OutputPending");
        goto done;
    }
    Keyload__V1__TransferCompleted done_res = KEYLOAD__V1__TRANSFER_COMPLETED__INIT;
    done_res.state = KEYLOAD__V1__TRANSFER_STATE__DELIVERED;
    Keyload__V1__MutationResult res = KEYLOAD__V1__MUTATION_RESULT__INIT;
    res.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_COMPLETED;
    res.transfer_completed = &done_res;
    if (rec->state == KEYLOAD__V1__TRANSFER_STATE__DELIVERED) {
        if (!kl_xfer_bytes_eq(&rec->receipt_token, m->receipt_token.data, m->receipt_token.len)) {
            rc = kl_fail(err, KL_CONFLICT, "receipt_token",
                         "the transfer was completed with another receipt token");
            goto done;
        }
        done_res.already = true;
        rc = add_result(out, &res, err);
        goto done;
    }
    Keyload__V1__TransferHistoryEntry h;
    if ((rc = kl_xfer_history_append(c, rec, KEYLOAD__V1__TRANSFER_EVENT__RECEIPT_VERIFIED, rec->generation, &h,
                                     &hist, err)) != KL_OK)
        goto done;
    Keyload__V1__TransferHistoryEntry **old_hist = rec->history;
    size_t old_n = rec->n_history;
    ProtobufCBinaryData old_receipt = rec->receipt_token;
    rec->history = hist;
    rec->n_history = old_n + 1;
    rec->receipt_token = m->receipt_token;
    rec->state = KEYLOAD__V1__TRANSFER_STATE__DELIVERED;
    /* The receipt's bytes were reserved at Create. Attempt advances not made never will
     * be now: their reservation goes back to the lane. */
    if (rec->reserved_records > 0 || rec->reserved_bytes > 0) {
        if ((rc = kl_xfer_lane_load(c->view, qid, src.lane, &lane, err)) != KL_OK)
            goto restore;
        if (lane->records < rec->reserved_records || lane->bytes < rec->reserved_bytes) {
            rc = kl_record_corrupt(err, "lane transfer counters (below an intent's reservation)");
            goto restore;
        }
        lane->records -= rec->reserved_records;
        lane->bytes -= rec->reserved_bytes;
        rec->reserved_records = 0;
        rec->reserved_bytes = 0;
        if ((rc = kl_xfer_lane_save(c->view, qid, src.lane, lane, err)) != KL_OK)
            goto restore;
    }
    rc = kl_view_put_msg(c->view, k.b, k.len, &rec->base, err);
restore:
    rec->history = old_hist;
    rec->n_history = old_n;
    rec->receipt_token = old_receipt;
    if (rc != KL_OK)
        goto done;
    kl_key yk;
    kl_key_transfer_pending(&yk, rec->database_id, qid, src.lane, m->transfer_id.data);
    if ((rc = kl_view_del(c->view, yk.b, yk.len, err)) != KL_OK)
        goto done;
    rc = add_result(out, &res, err);
done:
    free(hist);
    if (lane)
        keyload__v1__lane_transfer_record__free_unpacked(lane, NULL);
    if (q)
        keyload__v1__queue_record__free_unpacked(q, NULL);
    if (rec)
        keyload__v1__transfer_record__free_unpacked(rec, NULL);
    if (tok)
        keyload__v1__signed_token__free_unpacked(tok, NULL);
    if (cl)
        keyload__v1__transfer_claims__free_unpacked(cl, NULL);
    if (d)
        keyload__v1__catalog_database__free_unpacked(d, NULL);
    return rc;
}

/* ---- pause ---- */

kl_code kl_transfer_eval_pause_lane(kl_eval_ctx *c, const Keyload__V1__SetQueueTransfersPaused *m,
                                    kl_buf *out, kl_err *err)
{
    Keyload__V1__QueueLaneRef src;
    kl_claims_lane(&src, m->source_queue);
    Keyload__V1__QueueRecord *q = NULL;
    Keyload__V1__LaneTransferRecord *lane = NULL;
    uint64_t qid;
    kl_code rc = kl_engine_load_queue(c->view, &src, &qid, &q, err);
    if (rc == KL_OK)
        rc = kl_xfer_lane_load(c->view, qid, src.lane, &lane, err);
    if (rc != KL_OK)
        goto done;
    Keyload__V1__TransfersPaused tp = KEYLOAD__V1__TRANSFERS_PAUSED__INIT;
    tp.paused = m->paused;
    tp.changed = lane->paused != m->paused;
    lane->paused = m->paused;
    if (tp.changed && (rc = kl_xfer_lane_save(c->view, qid, src.lane, lane, err)) != KL_OK)
        goto done;
    Keyload__V1__MutationResult res = KEYLOAD__V1__MUTATION_RESULT__INIT;
    res.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFERS_PAUSED;
    res.transfers_paused = &tp;
    rc = add_result(out, &res, err);
done:
    if (q)
        keyload__v1__queue_record__free_unpacked(q, NULL);
    if (lane)
        keyload__v1__lane_transfer_record__free_unpacked(lane, NULL);
    return rc;
}

/* ---- node helpers ---- */

bool kl_transfer_batch_records_refusals(const Keyload__V1__BatchRequest *b)
{
    for (size_t i = 0; i < b->n_mutations; i++) {
        int k = b->mutations[i]->kind_case;
        if (k == KEYLOAD__V1__MUTATION__KIND_ACCEPT_QUEUE_TRANSFER ||
            k == KEYLOAD__V1__MUTATION__KIND_COMPLETE_QUEUE_TRANSFER ||
            k == KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_ATTEMPT ||
            k == KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_REPAIR)
            return true;
    }
    return false;
}

bool kl_transfer_refusal_is_terminal(kl_code code)
{
    /* NOT_FOUND is left out: it may mean "not here" (wrong_partition) or "not yet". */
    return code == KL_PERMISSION_DENIED || code == KL_RESOURCE_EXHAUSTED || code == KL_FAILED_PRECONDITION ||
           code == KL_CONFLICT || code == KL_INVALID_ARGUMENT;
}

/* ---- reads ---- */

kl_code kl_xfer_pack_answer(const ProtobufCMessage *m, uint8_t **answer, size_t *len, kl_err *err)
{
    *len = protobuf_c_message_get_packed_size(m);
    if ((*answer = malloc(*len ? *len : 1)) == NULL)
        return kl_record_oom(err);
    protobuf_c_message_pack(m, *answer);
    return KL_OK;
}

kl_code kl_transfer_inspect(kl_eval_ctx *c, const Keyload__V1__InspectQueueTransferRequest *r,
                            uint8_t **answer, size_t *len, kl_err *err)
{
    Keyload__V1__QueueLaneRef src;
    kl_claims_lane(&src, r->source_queue);
    Keyload__V1__QueueRecord *q = NULL;
    Keyload__V1__TransferRecord *rec = NULL;
    Keyload__V1__TransferClaims *cl = NULL;
    uint64_t qid;
    kl_key k;
    kl_code rc = kl_access_transfer_admin(c->who, src.tenant, src.database, err);
    if (rc == KL_OK)
        rc = kl_engine_load_queue(c->view, &src, &qid, &q, err);
    if (rc != KL_OK)
        goto done;
    kl_key_transfer(&k, qid, src.lane, r->transfer_id.data);
    if ((rc = kl_xfer_get_record(c->view, &k, &keyload__v1__transfer_record__descriptor, (ProtobufCMessage **)&rec, NULL,
                         err)) != KL_OK)
        goto done;
    if (rec == NULL) {
        rc = kl_fail(err, KL_NOT_FOUND, "transfer", "source lane %s/%s has no transfer with this transfer_id",
                     src.queue, src.lane);
        goto done;
    }
    /* The answer discloses the message (inside the intent token): QueueInspect with its
     * field and header keys. */
    if ((rc = kl_claims_decode("intent_token", rec->intent_token.data, rec->intent_token.len, NULL, &cl, err)) != KL_OK) {
        rc = kl_record_corrupt(err, "transfer intent");
        goto done;
    }
    if ((rc = kl_xfer_data_check(c, &src, KEYLOAD__V1__PERMISSION__QUEUE_INSPECT, cl->message, err)) != KL_OK)
        goto done;
    Keyload__V1__InspectQueueTransferAnswer a = KEYLOAD__V1__INSPECT_QUEUE_TRANSFER_ANSWER__INIT;
    a.state = rec->state;
    a.generation = rec->generation;
    a.n_history = rec->n_history;
    a.history = rec->history;
    a.intent_token = rec->intent_token;
    a.receipt_token = rec->receipt_token;
    a.source = rec->source;
    a.destination = rec->destination;
    a.fingerprint = rec->fingerprint;
    a.principal_id = rec->principal_id;
    a.max_accept_attempts = rec->max_accept_attempts;
    a.current_token = rec->attempt_token.len ? rec->attempt_token : rec->intent_token;
    a.retained_records = 1 + rec->advance_records + rec->reserved_records;
    a.retained_bytes = rec->charged_bytes + rec->reserved_bytes;
    a.reserved_records = rec->reserved_records;
    a.reserved_bytes = rec->reserved_bytes;
    a.attempt_advances = rec->attempt_advances;
    a.applied_index = kl_store_applied_index(c->view->store);
    rc = kl_xfer_pack_answer(&a.base, answer, len, err);
done:
    if (q)
        keyload__v1__queue_record__free_unpacked(q, NULL);
    if (rec)
        keyload__v1__transfer_record__free_unpacked(rec, NULL);
    if (cl)
        keyload__v1__transfer_claims__free_unpacked(cl, NULL);
    return rc;
}

kl_code kl_transfer_receipt(kl_eval_ctx *c, const Keyload__V1__InspectQueueTransferReceiptRequest *r,
                            uint8_t **answer, size_t *len, kl_err *err)
{
    Keyload__V1__QueueLaneRef dst, src;
    kl_claims_lane(&dst, r->destination_queue);
    kl_claims_lane(&src, r->source_queue);
    Keyload__V1__QueueRecord *q = NULL;
    Keyload__V1__DedupRecord *dr = NULL;
    uint64_t qid;
    kl_key k;
    if (strcmp(src.tenant, dst.tenant) != 0 || strcmp(src.database, dst.database) != 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "source_queue",
                       "source_queue and destination_queue must be in the same tenant/database");
    kl_code rc = kl_access_transfer_admin(c->who, dst.tenant, dst.database, err);
    if (rc == KL_OK)
        rc = kl_xfer_data_check(c, &dst, KEYLOAD__V1__PERMISSION__QUEUE_INSPECT, NULL, err);
    if (rc == KL_OK)
        rc = kl_xfer_data_check(c, &src, KEYLOAD__V1__PERMISSION__QUEUE_INSPECT, NULL, err);
    if (rc == KL_OK)
        rc = kl_engine_load_queue(c->view, &dst, &qid, &q, err);
    if (rc != KL_OK)
        goto done;
    kl_key_transfer_dedup(&k, qid, src.queue, src.lane, r->transfer_id.data);
    if ((rc = kl_xfer_get_record(c->view, &k, &keyload__v1__dedup_record__descriptor, (ProtobufCMessage **)&dr, NULL,
                         err)) != KL_OK)
        goto done;
    if (dr == NULL) {
        rc = kl_fail(err, KL_NOT_FOUND, "receipt",
                     "destination queue '%s' holds no receipt for this source lane and transfer_id",
                     dst.queue);
        goto done;
    }
    Keyload__V1__QueueLaneRef where = dst;
    where.lane = dr->lane;
    Keyload__V1__InspectQueueTransferReceiptAnswer a = KEYLOAD__V1__INSPECT_QUEUE_TRANSFER_RECEIPT_ANSWER__INIT;
    a.receipt_token = dr->receipt_token;
    a.target_commit = dr->effect;
    a.destination = &where;
    a.applied_index = kl_store_applied_index(c->view->store);
    rc = kl_xfer_pack_answer(&a.base, answer, len, err);
done:
    if (q)
        keyload__v1__queue_record__free_unpacked(q, NULL);
    if (dr)
        keyload__v1__dedup_record__free_unpacked(dr, NULL);
    return rc;
}

kl_code kl_xfer_charge(kl_xfer_charge_t *ch, uint64_t bytes, const char *what, kl_err *err)
{
    ch->records++;
    ch->bytes += bytes;
    if (ch->records > ch->c->limits->max_scan_records)
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "limit:MaxScanRecords",
                       "%s would examine more than MaxScanRecords (%llu) records (at a %s record); "
                       "nothing is returned", ch->read,
                       (unsigned long long)ch->c->limits->max_scan_records, what);
    if (ch->bytes > ch->c->limits->max_query_read_bytes)
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "limit:MaxQueryReadBytes",
                       "%s would read more than MaxQueryReadBytes (%llu) bytes (at a %s record); "
                       "nothing is returned", ch->read,
                       (unsigned long long)ch->c->limits->max_query_read_bytes, what);
    return KL_OK;
}

typedef struct {
    uint8_t (*keys)[KL_KEY_MAX];
    size_t *lens;
    size_t n, want;
} pending_keys;

static int collect_pending(void *arg, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    (void)val;
    (void)vlen;
    pending_keys *p = arg;
    if (klen > KL_KEY_MAX)
        return 0;
    memcpy(p->keys[p->n], key, klen);
    p->lens[p->n] = klen;
    p->n++;
    return p->n == p->want;
}

/* One listed pending transfer: its intent record (charged, *rec unpacked for the caller
 * to free) behind the pending index key, checked readable under the caller's QueueInspect
 * grants, described in *item (which borrows from *rec and key). */
static kl_code pending_item(kl_eval_ctx *c, kl_xfer_charge_t *ch, const uint8_t *key, size_t klen, uint64_t limit,
                            Keyload__V1__TransferRecord **rec, Keyload__V1__PendingQueueTransfer *item,
                            kl_err *err)
{
    kl_code rc;
    uint64_t eqid;
    const uint8_t *lane, *tid;
    size_t lane_len;
    if (kl_key_parse_transfer_pending(key, klen, &eqid, &lane, &lane_len, &tid) != 0)
        return kl_record_corrupt(err, "pending transfer index");
    char lane_s[KL_NAME_LEN_MAX + 1];
    if (lane_len > KL_NAME_LEN_MAX)
        return kl_record_corrupt(err, "pending transfer index");
    memcpy(lane_s, lane, lane_len);
    lane_s[lane_len] = 0;
    kl_key xk;
    kl_key_transfer(&xk, eqid, lane_s, tid);
    size_t stored = 0;
    c->view->scan_limit = UINT64_MAX;
    rc = kl_xfer_get_record(c->view, &xk, &keyload__v1__transfer_record__descriptor, (ProtobufCMessage **)rec, &stored,
                            err);
    c->view->scan_limit = limit;
    if (rc == KL_OK && *rec == NULL)
        rc = kl_record_corrupt(err, "transfer (pending index without intent)");
    if (rc == KL_OK)
        rc = kl_xfer_charge(ch, stored, "intent", err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__TransferClaims *cl = NULL;
    if (kl_claims_decode("intent_token", (*rec)->intent_token.data, (*rec)->intent_token.len, NULL, &cl,
                         err) != KL_OK)
        return kl_record_corrupt(err, "transfer intent");
    rc = kl_xfer_data_check(c, (*rec)->source, KEYLOAD__V1__PERMISSION__QUEUE_INSPECT, cl->message, err);
    keyload__v1__transfer_claims__free_unpacked(cl, NULL);
    if (rc != KL_OK)
        return rc;
    keyload__v1__pending_queue_transfer__init(item);
    item->source = (*rec)->source;
    item->transfer_id.data = (uint8_t *)tid;
    item->transfer_id.len = 16;
    item->generation = (*rec)->generation;
    item->destination = (*rec)->destination;
    item->intent_token = (*rec)->attempt_token.len ? (*rec)->attempt_token : (*rec)->intent_token;
    return KL_OK;
}

/* Where a listing resumes from its request's cursor: strictly after the last key listed
 * (start, *slen), or from the beginning with *reset set when the cursor comes from another
 * incarnation of the partition, whose positions mean nothing here. *cur is unpacked for
 * the caller to free. */
static kl_code pending_resume(const Keyload__V1__ListPendingQueueTransfersRequest *r, const kl_key *prefix,
                              const uint8_t partition_incarnation[16], Keyload__V1__PendingCursor **cur,
                              uint8_t start[KL_KEY_MAX + 1], size_t *slen, protobuf_c_boolean *reset, kl_err *err)
{
    *cur = keyload__v1__pending_cursor__unpack(NULL, r->cursor.len, r->cursor.data);
    const Keyload__V1__PendingCursor *c = *cur;
    if (c == NULL || c->partition_incarnation.len != 16 || c->after_key.len > KL_KEY_MAX ||
        c->after_key.len < prefix->len || memcmp(c->after_key.data, prefix->b, prefix->len) != 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "cursor",
                       "cursor is not a next_cursor of this listing (same database and queue)");
    if (memcmp(c->partition_incarnation.data, partition_incarnation, 16) != 0) {
        *reset = true;
    } else {
        /* Resume strictly after the last key listed: append a zero byte. */
        memcpy(start, c->after_key.data, c->after_key.len);
        start[c->after_key.len] = 0;
        *slen = c->after_key.len + 1;
    }
    return KL_OK;
}

kl_code kl_transfer_pending(kl_eval_ctx *c, const Keyload__V1__ListPendingQueueTransfersRequest *r,
                            const uint8_t partition_incarnation[16], uint64_t principal_bytes,
                            uint8_t **answer, size_t *len, kl_err *err)
{
    kl_xfer_charge_t ch = {c, "listing pending transfers (ask for fewer items)", 0, 0};
    Keyload__V1__CatalogDatabase *d = NULL;
    Keyload__V1__QueueRecord *q = NULL;
    Keyload__V1__PendingCursor *cur = NULL;
    Keyload__V1__TransferRecord **recs = NULL;
    Keyload__V1__PendingQueueTransfer *items = NULL, **itemp = NULL;
    pending_keys pk = {0};
    size_t n_items = 0;
    uint32_t max = r->max_items ? r->max_items : KL_TRANSFER_PENDING_PAGE_DEFAULT;
    if (max > KL_TRANSFER_PENDING_PAGE_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "max_items", "max_items must be 0..%d",
                       KL_TRANSFER_PENDING_PAGE_MAX);
    kl_code rc = kl_access_transfer_admin(c->who, r->tenant, r->database, err);
    /* The caller's principal record and the database record are examined too. */
    if (rc == KL_OK)
        rc = kl_xfer_charge(&ch, principal_bytes, "principal", err);
    if (rc == KL_OK)
        rc = kl_xfer_catalog_database(c->view, r->tenant, r->database, &d, err);
    if (rc == KL_OK)
        rc = kl_xfer_charge(&ch, keyload__v1__catalog_database__get_packed_size(d), "database", err);
    if (rc != KL_OK)
        goto done;
    kl_key prefix;
    uint64_t qid = 0;
    Keyload__V1__QueueLaneRef src;
    if (r->source_queue != NULL) {
        kl_claims_lane(&src, r->source_queue);
        if ((rc = kl_engine_load_queue(c->view, &src, &qid, &q, err)) != KL_OK ||
            (rc = kl_xfer_charge(&ch, keyload__v1__queue_record__get_packed_size(q), "queue", err)) != KL_OK)
            goto done;
        /* An explicit lane narrows to it; an empty one lists every lane of the queue. */
        kl_key_transfer_pending_prefix(&prefix, d->database_id, qid,
                                       (r->source_queue->lane && r->source_queue->lane[0]) ? src.lane : NULL);
    } else {
        kl_key_transfer_pending_prefix(&prefix, d->database_id, 0, NULL);
    }
    Keyload__V1__ListPendingQueueTransfersAnswer a = KEYLOAD__V1__LIST_PENDING_QUEUE_TRANSFERS_ANSWER__INIT;
    a.partition_incarnation.data = (uint8_t *)partition_incarnation;
    a.partition_incarnation.len = 16;
    uint8_t start[KL_KEY_MAX + 1];
    size_t slen = 0;
    if (r->cursor.len > 0 &&
        (rc = pending_resume(r, &prefix, partition_incarnation, &cur, start, &slen, &a.cursor_reset, err)) != KL_OK)
        goto done;
    /* One key more than the page, to learn whether the listing is done. */
    pk.want = (size_t)max + 1;
    pk.keys = malloc(pk.want * sizeof *pk.keys);
    pk.lens = malloc(pk.want * sizeof *pk.lens);
    recs = calloc(pk.want, sizeof *recs);
    items = calloc(pk.want, sizeof *items);
    itemp = calloc(pk.want, sizeof *itemp);
    if (!pk.keys || !pk.lens || !recs || !items || !itemp) {
        rc = kl_record_oom(err);
        goto done;
    }
    uint64_t limit = c->view->scan_limit;
    c->view->scan_limit = UINT64_MAX; /* charged here instead, records and bytes alike */
    rc = kl_view_scan_from(c->view, prefix.b, prefix.len, slen ? start : NULL, slen, collect_pending, &pk, err);
    c->view->scan_limit = limit;
    if (rc != KL_OK)
        goto done;
    for (size_t i = 0; i < pk.n; i++) {
        if ((rc = kl_xfer_charge(&ch, pk.lens[i], "pending index", err)) != KL_OK)
            goto done;
        if (i == max)
            break; /* the look-ahead entry: examined, not listed */
        if ((rc = pending_item(c, &ch, pk.keys[i], pk.lens[i], limit, &recs[i], &items[i], err)) != KL_OK)
            goto done;
        itemp[i] = &items[i];
        n_items++;
    }
    a.n_items = n_items;
    a.items = itemp;
    a.done = pk.n <= max;
    uint8_t *cbuf = NULL;
    if (!a.done && n_items > 0) {
        Keyload__V1__PendingCursor nc = KEYLOAD__V1__PENDING_CURSOR__INIT;
        nc.partition_incarnation = a.partition_incarnation;
        nc.after_key.data = pk.keys[n_items - 1];
        nc.after_key.len = pk.lens[n_items - 1];
        size_t cn = keyload__v1__pending_cursor__get_packed_size(&nc);
        if ((cbuf = malloc(cn)) == NULL) {
            rc = kl_record_oom(err);
            goto done;
        }
        keyload__v1__pending_cursor__pack(&nc, cbuf);
        a.next_cursor.data = cbuf;
        a.next_cursor.len = cn;
    }
    a.records_charged = ch.records;
    a.bytes_charged = ch.bytes;
    a.applied_index = kl_store_applied_index(c->view->store);
    rc = kl_xfer_pack_answer(&a.base, answer, len, err);
    free(cbuf);
done:
    for (size_t i = 0; recs && i < pk.want; i++)
        if (recs[i])
            keyload__v1__transfer_record__free_unpacked(recs[i], NULL);
    free(recs);
    free(items);
    free(itemp);
    free(pk.keys);
    free(pk.lens);
    if (cur)
        keyload__v1__pending_cursor__free_unpacked(cur, NULL);
    if (q)
        keyload__v1__queue_record__free_unpacked(q, NULL);
    if (d)
        keyload__v1__catalog_database__free_unpacked(d, NULL);
    return rc;
}

/* ==== the rows of the transfer kinds (daemon/engine/kind.h) ====
 * Each kind's shape checks, authorization, evaluation and database ref, and the
 * descriptor daemon/engine/mutation.c indexes by kind number. */

/* SetQueueTransfersPaused changes the catalog only as the database's switch. */
static bool catalog_pause_switch(const Keyload__V1__Mutation *m)
{
    return m->set_queue_transfers_paused->source_queue == NULL;
}

/* ---- CreateQueueTransfer ---- */

static kl_code validate_create_queue_transfer(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    kl_code rc;
    const Keyload__V1__CreateQueueTransfer *t = m->create_queue_transfer;
    if ((rc = kl_validate_ref(idx, "create_queue_transfer", "source_queue", t->source_queue, true, err)) != KL_OK ||
        (rc = kl_validate_ref(idx, "create_queue_transfer", "destination", t->destination, true, err)) != KL_OK)
        return rc;
    if ((rc = kl_validate_transfer_id(idx, "create_queue_transfer", &t->transfer_id, err)) != KL_OK)
        return rc;
    if (strcmp(t->source_queue->tenant, t->destination->tenant) != 0 ||
        strcmp(t->source_queue->database, t->destination->database) != 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "destination",
                       "mutations[%zu].create_queue_transfer.destination must be in the source's "
                       "tenant/database (%s/%s): transfers stay inside one database",
                       idx, t->source_queue->tenant, t->source_queue->database);
    return kl_validate_message(idx, "create_queue_transfer", t->message, err);
}

static kl_code access_create_queue_transfer(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    const Keyload__V1__CreateQueueTransfer *t = m->create_queue_transfer;
    kl_code rc = kl_access_transfer_admin(who, t->source_queue->tenant, t->source_queue->database, err);
    if (rc == KL_OK)
        rc = kl_access_transfer_data(who, t->source_queue, KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH,
                                     t->message, err);
    if (rc == KL_OK)
        rc = kl_access_transfer_data(who, t->destination, KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH,
                                     t->message, err);
    return rc;
}

static kl_code eval_create_queue_transfer(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_transfer_eval_create(c, m->create_queue_transfer, out, err);
}

static const Keyload__V1__QueueLaneRef *ref_create_queue_transfer(const Keyload__V1__Mutation *m) { return m->create_queue_transfer->source_queue; }

const kl_mutation_kind kl_transfer_kind_create_queue_transfer = {
    .validate = validate_create_queue_transfer,
    .access = access_create_queue_transfer,
    .canon = kl_canon_create_queue_transfer,
    .eval = eval_create_queue_transfer,
    .ref = ref_create_queue_transfer,
};

/* ---- AcceptQueueTransfer ---- */

static kl_code validate_accept_queue_transfer(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    kl_code rc;
    if ((rc = kl_validate_ref(idx, "accept_queue_transfer", "destination_queue",
                              m->accept_queue_transfer->destination_queue, true, err)) != KL_OK)
        return rc;
    if (m->accept_queue_transfer->intent_token.len == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "intent_token",
                       "mutations[%zu].accept_queue_transfer.intent_token is missing", idx);
    return KL_OK;
}

static kl_code access_accept_queue_transfer(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    /* The data check needs the intent's message: transfer.c runs it after the token. */
    return kl_access_transfer_admin(who, m->accept_queue_transfer->destination_queue->tenant,
                                    m->accept_queue_transfer->destination_queue->database, err);
}

static kl_code eval_accept_queue_transfer(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_transfer_eval_accept(c, m->accept_queue_transfer, out, err);
}

static const Keyload__V1__QueueLaneRef *ref_accept_queue_transfer(const Keyload__V1__Mutation *m) { return m->accept_queue_transfer->destination_queue; }

const kl_mutation_kind kl_transfer_kind_accept_queue_transfer = {
    .validate = validate_accept_queue_transfer,
    .access = access_accept_queue_transfer,
    .canon = kl_canon_accept_queue_transfer,
    .eval = eval_accept_queue_transfer,
    .ref = ref_accept_queue_transfer,
};

/* ---- CompleteQueueTransfer ---- */

static kl_code validate_complete_queue_transfer(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    kl_code rc;
    if ((rc = kl_validate_ref(idx, "complete_queue_transfer", "source_queue",
                              m->complete_queue_transfer->source_queue, true, err)) != KL_OK)
        return rc;
    if ((rc = kl_validate_transfer_id(idx, "complete_queue_transfer", &m->complete_queue_transfer->transfer_id,
                                      err)) != KL_OK)
        return rc;
    if (m->complete_queue_transfer->receipt_token.len == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "receipt_token",
                       "mutations[%zu].complete_queue_transfer.receipt_token is missing", idx);
    return KL_OK;
}

static kl_code access_complete_queue_transfer(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    const Keyload__V1__CompleteQueueTransfer *t = m->complete_queue_transfer;
    kl_code rc = kl_access_transfer_admin(who, t->source_queue->tenant, t->source_queue->database, err);
    if (rc == KL_OK)
        rc = kl_access_transfer_data(who, t->source_queue, KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, NULL, err);
    return rc;
}

/* A backup's hold refuses it first (ARCHITECTURE.md "Backup and restore"); the failure
 * path's dry run of Complete (transfer_failure.c) asks what Complete would do, not when. */
static kl_code eval_complete_queue_transfer(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    kl_code rc = kl_hold_check_complete(c, err);
    if (rc != KL_OK)
        return rc;
    return kl_transfer_eval_complete(c, m->complete_queue_transfer, out, err);
}

static const Keyload__V1__QueueLaneRef *ref_complete_queue_transfer(const Keyload__V1__Mutation *m) { return m->complete_queue_transfer->source_queue; }

const kl_mutation_kind kl_transfer_kind_complete_queue_transfer = {
    .validate = validate_complete_queue_transfer,
    .access = access_complete_queue_transfer,
    .canon = kl_canon_complete_queue_transfer,
    .eval = eval_complete_queue_transfer,
    .ref = ref_complete_queue_transfer,
};

/* ---- SetQueueTransfersPaused ---- */

static kl_code validate_set_queue_transfers_paused(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    const Keyload__V1__SetQueueTransfersPaused *p = m->set_queue_transfers_paused;
    if (p->source_queue != NULL) {
        if ((rc = kl_validate_ref(idx, "set_queue_transfers_paused", "source_queue", p->source_queue, true,
                                  err)) != KL_OK)
            return rc;
        if (strcmp(p->source_queue->tenant, p->tenant) != 0 || strcmp(p->source_queue->database, p->database) != 0)
            return kl_fail(err, KL_INVALID_ARGUMENT, "source_queue",
                           "mutations[%zu].set_queue_transfers_paused.source_queue must be in "
                           "its tenant/database", idx);
    }
    snprintf(where, sizeof where, "mutations[%zu].set_queue_transfers_paused.tenant", idx);
    if ((rc = kl_name_check(where, p->tenant, err)) != KL_OK)
        return rc;
    snprintf(where, sizeof where, "mutations[%zu].set_queue_transfers_paused.database", idx);
    return kl_name_check(where, p->database, err);
}

static kl_code access_set_queue_transfers_paused(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    return kl_access_transfer_admin(who, m->set_queue_transfers_paused->tenant,
                                    m->set_queue_transfers_paused->database, err);
}

static kl_code eval_set_queue_transfers_paused(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out,
                                               kl_err *err)
{
    /* Without a source queue it is the database's switch, kept in the catalog. */
    return m->set_queue_transfers_paused->source_queue == NULL
               ? kl_catalog_eval_set_transfers_paused(c, m->set_queue_transfers_paused, out, err)
               : kl_transfer_eval_pause_lane(c, m->set_queue_transfers_paused, out, err);
}

static const Keyload__V1__QueueLaneRef *ref_set_queue_transfers_paused(const Keyload__V1__Mutation *m) { return m->set_queue_transfers_paused->source_queue; }

const kl_mutation_kind kl_transfer_kind_set_queue_transfers_paused = {
    .validate = validate_set_queue_transfers_paused,
    .access = access_set_queue_transfers_paused,
    .canon = kl_canon_set_queue_transfers_paused,
    .eval = eval_set_queue_transfers_paused,
    .ref = ref_set_queue_transfers_paused,
    .changes_catalog = catalog_pause_switch,
};

static int count_pending(void *arg, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    (void)key, (void)klen, (void)val, (void)vlen;
    ++*(uint64_t *)arg;
    return 0;
}

kl_code kl_transfer_pending_count(kl_view *v, uint64_t *count, kl_err *err)
{
    kl_key prefix;
    kl_key_transfer_pending_prefix(&prefix, 0, 0, NULL);
    *count = 0;
    /* the tag byte alone: the 'Y' keys of every database */
    return kl_view_scan(v, prefix.b, 1, count_pending, count, err);
}
