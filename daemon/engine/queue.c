/* Evaluation of queue mutations (engine.h). Records are protobuf messages; every write
 * goes to the view's scratch overlay. See daemon/store/keys.h for the layout and its
 * invariants, which every function here preserves. */
#include "daemon/engine/queue.h"
#include "daemon/engine/record.h"
#include "daemon/engine/catalog_read.h"
#include "daemon/engine/access.h"
#include "daemon/engine/kind.h"
#include "daemon/engine/validate.h"

#include "daemon/store/keys.h"
#include "keyload/v1/store.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROMOTE_BATCH 256

static const char *lane_name(const Keyload__V1__QueueLaneRef *r)
{
    return (r->lane && r->lane[0]) ? r->lane : "default";
}

static kl_code put_msg(kl_view *v, const kl_key *k, const ProtobufCMessage *m, kl_err *err)
{
    return kl_view_put_msg(v, k->b, k->len, m, err);
}

static kl_code put_empty(kl_view *v, const kl_key *k, const char *val, kl_err *err)
{
    return kl_view_put(v, k->b, k->len, (const uint8_t *)val, val ? strlen(val) : 0, err);
}

/* NOT_FOUND for a queue this partition does not hold: when the catalog copy places it on
 * another partition, detail "wrong_partition" tells the client to locate it again. */
static kl_code queue_missing(kl_view *v, const Keyload__V1__QueueLaneRef *r, kl_err *err)
{
    Keyload__V1__CatalogQueue *def;
    bool found;
    kl_err ignored;
    if (kl_catalog_get_queue(v, r->tenant, r->database, r->queue, &def, &found, &ignored) == KL_OK && found) {
        int p = def->partition;
        keyload__v1__catalog_queue__free_unpacked(def, NULL);
        return kl_fail(err, KL_NOT_FOUND, "wrong_partition",
                       "queue '%s' of %s/%s lives on partition %d, not here", r->queue, r->tenant,
                       r->database, p);
    }
    return kl_fail(err, KL_NOT_FOUND, "queue", "queue '%s' does not exist in %s/%s", r->queue,
                   r->tenant, r->database);
}

/* Looks a queue up by name, closed (deleted) ones included. NOT_FOUND names the queue.
 * *rec is unpacked (caller frees). */
static kl_code load_queue_any(kl_view *v, const Keyload__V1__QueueLaneRef *r, uint64_t *qid,
                              Keyload__V1__QueueRecord **rec, kl_err *err)
{
    kl_key k;
    kl_key_queue_name(&k, r->tenant, r->database, r->queue);
    uint8_t *val;
    size_t n;
    bool found;
    kl_code rc = kl_view_get(v, k.b, k.len, &val, &n, &found, err);
    if (rc != KL_OK)
        return rc;
    if (!found)
        return queue_missing(v, r, err);
    if (n != 8) {
        free(val);
        return kl_record_corrupt(err, "queue name");
    }
    *qid = kl_be64_get(val);
    free(val);
    kl_key_queue(&k, *qid);
    if ((rc = kl_view_get(v, k.b, k.len, &val, &n, &found, err)) != KL_OK)
        return rc;
    if (!found)
        return kl_record_corrupt(err, "queue");
    *rec = keyload__v1__queue_record__unpack(NULL, n, val);
    free(val);
    return *rec ? KL_OK : kl_record_corrupt(err, "queue");
}

/* Like load_queue_any, but a deleted queue is NOT_FOUND. */
static kl_code load_queue(kl_view *v, const Keyload__V1__QueueLaneRef *r, uint64_t *qid,
                          Keyload__V1__QueueRecord **rec, kl_err *err)
{
    kl_code rc = load_queue_any(v, r, qid, rec, err);
    if (rc == KL_OK && (*rec)->deleted) {
        keyload__v1__queue_record__free_unpacked(*rec, NULL);
        *rec = NULL;
        return kl_fail(err, KL_NOT_FOUND, "queue", "queue '%s' of %s/%s is deleted", r->queue,
                       r->tenant, r->database);
    }
    return rc;
}

static kl_code save_queue(kl_view *v, const Keyload__V1__QueueRecord *rec, kl_err *err)
{
    kl_key k;
    kl_key_queue(&k, rec->queue_id);
    return put_msg(v, &k, &rec->base, err);
}

static uint64_t queue_max_messages(const kl_eval_ctx *c, const Keyload__V1__QueueRecord *q)
{
    return (q->limits && q->limits->max_messages) ? q->limits->max_messages
                                                  : c->limits->default_queue_max_messages;
}

static uint64_t queue_max_bytes(const kl_eval_ctx *c, const Keyload__V1__QueueRecord *q)
{
    return (q->limits && q->limits->max_bytes) ? q->limits->max_bytes
                                               : c->limits->default_queue_max_bytes;
}

static kl_code load_message(kl_view *v, uint64_t qid, const char *lane, uint64_t seq,
                            Keyload__V1__MessageRecord **out, kl_err *err)
{
    kl_key k;
    kl_key_message(&k, qid, lane, seq);
    uint8_t *val;
    size_t n;
    bool found;
    kl_code rc = kl_view_get(v, k.b, k.len, &val, &n, &found, err);
    if (rc != KL_OK)
        return rc;
    if (!found)
        return kl_record_corrupt(err, "message index");
    *out = keyload__v1__message_record__unpack(NULL, n, val);
    free(val);
    return *out ? KL_OK : kl_record_corrupt(err, "message");
}

static kl_code save_message(kl_view *v, uint64_t qid, const char *lane,
                            const Keyload__V1__MessageRecord *m, kl_err *err)
{
    kl_key k;
    kl_key_message(&k, qid, lane, m->seq);
    return put_msg(v, &k, &m->base, err);
}

/* Removes a message and its index entries, and uncharges the queue. */
static kl_code remove_message(kl_view *v, Keyload__V1__QueueRecord *q, const char *lane,
                              const Keyload__V1__MessageRecord *m, bool in_timed, kl_err *err)
{
    kl_key k;
    kl_code rc;
    kl_key_message(&k, q->queue_id, lane, m->seq);
    if ((rc = kl_view_del(v, k.b, k.len, err)) != KL_OK)
        return rc;
    if (in_timed)
        kl_key_timed(&k, q->queue_id, m->visible_at_unix_ms, m->seq);
    else
        kl_key_available(&k, q->queue_id, lane, m->seq);
    if ((rc = kl_view_del(v, k.b, k.len, err)) != KL_OK)
        return rc;
    if (m->lease_token.len == 16) {
        kl_key_lease(&k, m->lease_token.data);
        if ((rc = kl_view_del(v, k.b, k.len, err)) != KL_OK)
            return rc;
    }
    q->messages--;
    q->bytes -= m->charged_bytes;
    return KL_OK;
}

/* ---- create / delete ---- */

/* The queue's own records on the partition it is placed on. */
kl_code kl_queue_create_local(kl_view *v, const Keyload__V1__CatalogQueue *q, kl_err *err)
{
    kl_key nk, qk;
    kl_key_queue_name(&nk, q->tenant, q->database, q->queue);
    uint8_t idb[8];
    kl_be64_put(idb, q->queue_id);
    kl_code rc = kl_view_put(v, nk.b, nk.len, idb, 8, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__QueueLaneRef name = KEYLOAD__V1__QUEUE_LANE_REF__INIT;
    name.tenant = q->tenant;
    name.database = q->database;
    name.queue = q->queue;
    Keyload__V1__QueueLimits none = KEYLOAD__V1__QUEUE_LIMITS__INIT;
    Keyload__V1__QueueRecord rec = KEYLOAD__V1__QUEUE_RECORD__INIT;
    rec.queue_id = q->queue_id;
    rec.name = &name;
    rec.partition = q->partition;
    rec.limits = q->limits ? q->limits : &none;
    rec.created_unix_ms = q->created_unix_ms;
    kl_key_queue(&qk, q->queue_id);
    return kl_view_put_msg(v, qk.b, qk.len, &rec.base, err);
}

/* Removes the queue's records once it is closed and empty. A queue that still holds
 * messages (its partition never closed it: the drop did not come from the SDK's two-step
 * delete) keeps its records, so no message is lost; it stays reachable by name. */
kl_code kl_queue_drop_local(kl_view *v, const Keyload__V1__CatalogQueue *q, kl_err *err)
{
    kl_key nk, qk;
    kl_key_queue_name(&nk, q->tenant, q->database, q->queue);
    uint8_t *val;
    size_t n;
    bool found;
    kl_code rc = kl_view_get(v, nk.b, nk.len, &val, &n, &found, err);
    if (rc != KL_OK || !found)
        return rc;
    uint64_t qid = n == 8 ? kl_be64_get(val) : 0;
    free(val);
    if (qid != q->queue_id)
        return KL_OK; /* another incarnation of the name; not ours to remove */
    kl_key_queue(&qk, qid);
    if ((rc = kl_view_get(v, qk.b, qk.len, &val, &n, &found, err)) != KL_OK)
        return rc;
    if (found) {
        Keyload__V1__QueueRecord *rec = keyload__v1__queue_record__unpack(NULL, n, val);
        free(val);
        if (rec == NULL)
            return kl_record_corrupt(err, "queue");
        bool keep = rec->messages > 0;
        keyload__v1__queue_record__free_unpacked(rec, NULL);
        /* Transfer intents and dedup receipts are never discarded (ARCHITECTURE.md "Engine"): a queue
         * retaining any keeps its records here, like one holding messages. */
        if (!keep && (rc = kl_queue_retains_transfers(v, qid, &keep, err)) != KL_OK)
            return rc;
        if (keep)
            return KL_OK;
        if ((rc = kl_view_del(v, qk.b, qk.len, err)) != KL_OK)
            return rc;
    }
    return kl_view_del(v, nk.b, nk.len, err);
}

typedef struct {
    bool any;
} retains_scan;

static int find_retained(void *arg, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    (void)key;
    (void)klen;
    retains_scan *r = arg;
    Keyload__V1__LaneTransferRecord *l = keyload__v1__lane_transfer_record__unpack(NULL, vlen, val);
    if (l == NULL || l->records > 0)
        r->any = true; /* an unreadable counter is treated as retaining: never lose records */
    if (l)
        keyload__v1__lane_transfer_record__free_unpacked(l, NULL);
    return r->any;
}

kl_code kl_queue_retains_transfers(kl_view *v, uint64_t qid, bool *retains, kl_err *err)
{
    retains_scan r = {false};
    kl_key k;
    kl_key_lane_transfers_queue(&k, qid);
    kl_code rc = kl_view_scan(v, k.b, k.len, find_retained, &r, err);
    *retains = r.any;
    return rc;
}


/* Closes an empty queue on its own partition: it takes no more messages, and its records
 * go when the catalog's drop arrives. Deleting a closed queue again answers the same. */
kl_code kl_queue_close_local(kl_eval_ctx *c, const Keyload__V1__QueueLaneRef *ref, uint64_t *qid, kl_err *err)
{
    Keyload__V1__QueueRecord *q;
    kl_code rc = load_queue_any(c->view, ref, qid, &q, err);
    if (rc != KL_OK)
        return rc;
    bool retains = false;
    if (q->messages > 0)
        rc = kl_fail(err, KL_FAILED_PRECONDITION, "queue_not_empty",
                     "queue '%s' holds %llu messages; a queue holding messages cannot be deleted",
                     ref->queue, (unsigned long long)q->messages);
    else if ((rc = kl_queue_retains_transfers(c->view, *qid, &retains, err)) != KL_OK)
        ;
    else if (retains)
        rc = kl_fail(err, KL_FAILED_PRECONDITION, "queue_has_transfers",
                     "queue '%s' retains transfer intents or dedup receipts, which are never "
                     "discarded; a queue holding them cannot be deleted", ref->queue);
    else if (!q->deleted) {
        q->deleted = true;
        rc = save_queue(c->view, q, err);
    }
    keyload__v1__queue_record__free_unpacked(q, NULL);
    return rc;
}

/* ---- enqueue ---- */

/* Stores a new message in queue q (counters updated in q, not saved). */
static kl_code store_new_message(kl_eval_ctx *c, Keyload__V1__QueueRecord *q, const char *lane,
                                 Keyload__V1__EnqueueMessage *msg, uint32_t delivery_count,
                                 int64_t enqueued_ms, const char *qname, uint64_t *seq_out, kl_err *err)
{
    size_t size = keyload__v1__enqueue_message__get_packed_size(msg);
    if (q->messages + 1 > queue_max_messages(c, q))
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "limit:max_messages",
                       "queue '%s' is full: it holds its max_messages (%llu)", qname,
                       (unsigned long long)queue_max_messages(c, q));
    if (q->bytes + size > queue_max_bytes(c, q))
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "limit:max_bytes",
                       "queue '%s' is full: %zu more bytes would pass its max_bytes (%llu)", qname,
                       size, (unsigned long long)queue_max_bytes(c, q));
    Keyload__V1__MessageRecord m = KEYLOAD__V1__MESSAGE_RECORD__INIT;
    m.seq = ++q->next_seq;
    m.message = msg;
    m.enqueued_unix_ms = enqueued_ms;
    m.delivery_count = delivery_count;
    m.charged_bytes = size;
    kl_key k;
    kl_code rc;
    if (msg->delay_ms > 0 && delivery_count == 0) {
        m.visible_at_unix_ms = c->now_ms + msg->delay_ms;
        kl_key_timed(&k, q->queue_id, m.visible_at_unix_ms, m.seq);
        rc = put_empty(c->view, &k, lane, err);
    } else {
        kl_key_available(&k, q->queue_id, lane, m.seq);
        rc = put_empty(c->view, &k, NULL, err);
    }
    if (rc != KL_OK)
        return rc;
    if ((rc = save_message(c->view, q->queue_id, lane, &m, err)) != KL_OK)
        return rc;
    q->messages++;
    q->bytes += size;
    *seq_out = m.seq;
    return KL_OK;
}

kl_code kl_engine_enqueue_message(kl_eval_ctx *c, const Keyload__V1__QueueLaneRef *ref,
                                  Keyload__V1__EnqueueMessage *msg, uint64_t *qid, uint64_t *seq,
                                  kl_err *err)
{
    if (msg->expires_at_unix_ms != 0 && msg->expires_at_unix_ms <= c->now_ms)
        return kl_fail(err, KL_FAILED_PRECONDITION, "expires_at_unix_ms",
                       "the message expired before it could be enqueued");
    Keyload__V1__QueueRecord *q;
    kl_code rc = load_queue(c->view, ref, qid, &q, err);
    if (rc != KL_OK)
        return rc;
    rc = store_new_message(c, q, lane_name(ref), msg, 0, c->now_ms, ref->queue, seq, err);
    if (rc == KL_OK)
        rc = save_queue(c->view, q, err);
    keyload__v1__queue_record__free_unpacked(q, NULL);
    return rc;
}

kl_code kl_engine_load_queue(kl_view *v, const Keyload__V1__QueueLaneRef *ref, uint64_t *qid,
                             Keyload__V1__QueueRecord **rec, kl_err *err)
{
    return load_queue(v, ref, qid, rec, err);
}

kl_code kl_queue_eval_enqueue(kl_eval_ctx *c, const Keyload__V1__Enqueue *m, kl_buf *out, kl_err *err)
{
    uint64_t qid, seq;
    kl_code rc = kl_engine_enqueue_message(c, m->lane, m->message, &qid, &seq, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__Enqueued e = KEYLOAD__V1__ENQUEUED__INIT;
    e.message_id = seq;
    e.lane = (char *)lane_name(m->lane);
    Keyload__V1__MutationResult res = KEYLOAD__V1__MUTATION_RESULT__INIT;
    res.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_ENQUEUED;
    res.enqueued = &e;
    return kl_engine_add_result(out, &res, err);
}

/* ---- dead-lettering ---- */

/* A message past its queue's max_deliveries leaves the queue in the same commit: into the
 * dead-letter queue when one is configured and has room, else it is dropped if no DLQ is
 * configured. A configured DLQ that is missing or full keeps the message available, so
 * nothing is lost silently; the next delivery tries again. Returns *moved. */
static kl_code dead_letter(kl_eval_ctx *c, Keyload__V1__QueueRecord *q, const char *lane,
                           Keyload__V1__MessageRecord *m, bool *moved, kl_err *err)
{
    *moved = false;
    const char *dlq = q->limits ? q->limits->dead_letter_queue : "";
    kl_code rc;
    if (dlq[0] == '\0') {
        /* remove_message expects the index entry to exist; callers removed it already. */
        kl_key k;
        kl_key_message(&k, q->queue_id, lane, m->seq);
        if ((rc = kl_view_del(c->view, k.b, k.len, err)) != KL_OK)
            return rc;
        q->messages--;
        q->bytes -= m->charged_bytes;
        *moved = true;
        return KL_OK;
    }
    Keyload__V1__QueueLaneRef dref = *q->name;
    dref.queue = (char *)dlq;
    uint64_t dqid, seq;
    Keyload__V1__QueueRecord *d;
    rc = load_queue(c->view, &dref, &dqid, &d, err);
    if (rc == KL_NOT_FOUND)
        return KL_OK;
    if (rc != KL_OK)
        return rc;
    kl_err ignored;
    rc = store_new_message(c, d, lane, m->message, m->delivery_count, m->enqueued_unix_ms, dlq, &seq,
                           &ignored);
    if (rc == KL_RESOURCE_EXHAUSTED) {
        keyload__v1__queue_record__free_unpacked(d, NULL);
        return KL_OK;
    }
    if (rc == KL_OK)
        rc = save_queue(c->view, d, err);
    else
        *err = ignored;
    keyload__v1__queue_record__free_unpacked(d, NULL);
    if (rc != KL_OK)
        return rc;
    kl_key k;
    kl_key_message(&k, q->queue_id, lane, m->seq);
    if ((rc = kl_view_del(c->view, k.b, k.len, err)) != KL_OK)
        return rc;
    q->messages--;
    q->bytes -= m->charged_bytes;
    *moved = true;
    return KL_OK;
}

/* Makes a leased-or-delayed message available again (its 'T' entry already deleted). */
static kl_code make_available(kl_eval_ctx *c, Keyload__V1__QueueRecord *q, const char *lane,
                              Keyload__V1__MessageRecord *m, kl_err *err)
{
    kl_key k;
    kl_code rc;
    bool was_leased = m->lease_token.len == 16;
    if (was_leased) {
        kl_key_lease(&k, m->lease_token.data);
        if ((rc = kl_view_del(c->view, k.b, k.len, err)) != KL_OK)
            return rc;
        m->lease_token.len = 0;
    }
    m->visible_at_unix_ms = 0;
    uint32_t maxd = q->limits ? q->limits->max_deliveries : 0;
    if (was_leased && maxd > 0 && m->delivery_count >= maxd) {
        bool moved;
        if ((rc = dead_letter(c, q, lane, m, &moved, err)) != KL_OK)
            return rc;
        if (moved)
            return KL_OK;
    }
    kl_key_available(&k, q->queue_id, lane, m->seq);
    if ((rc = put_empty(c->view, &k, NULL, err)) != KL_OK)
        return rc;
    return save_message(c->view, q->queue_id, lane, m, err);
}

/* ---- receive ---- */

typedef struct {
    int64_t now;
    size_t n, max;
    struct { int64_t t; uint64_t seq; char lane[KL_NAME_LEN_MAX + 1]; } e[PROMOTE_BATCH];
} due_list;

static int collect_due(void *arg, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    due_list *d = arg;
    uint64_t qid, seq;
    int64_t t;
    if (kl_key_parse_timed(key, klen, &qid, &t, &seq) != 0 || t > d->now || vlen > KL_NAME_LEN_MAX)
        return 1;
    d->e[d->n].t = t;
    d->e[d->n].seq = seq;
    memcpy(d->e[d->n].lane, val, vlen);
    d->e[d->n].lane[vlen] = '\0';
    return ++d->n == d->max;
}

/* How much housekeeping one Receive does: due entries it promotes plus expired messages
 * it drops, each costing up to 4 reads of the scan budget. All of it must fit the batch's
 * MaxScanRecords, or a backlog larger than the budget (many leases running out together,
 * a burst of delays ending, a lane of expired messages) would make every Receive of the
 * queue fail RESOURCE_EXHAUSTED and never shrink: the queue would be wedged for good. So
 * a Receive takes on at most an eighth of the budget's worth (and PROMOTE_BATCH); the rest
 * waits for the next Receive, oldest first. */
static size_t housekeeping_cap(const kl_eval_ctx *c)
{
    uint64_t cap = c->view->scan_limit / 8;
    if (cap > PROMOTE_BATCH)
        cap = PROMOTE_BATCH;
    return cap ? (size_t)cap : 1;
}

/* Returns leases that expired and delays that ended (entries with time <= now) to their
 * lanes, in time order, at most *budget of them (decremented; see housekeeping_cap).
 * Lease expiry is evaluated lazily, at the next Receive, with the entry's time, so every
 * replica reaches the same state. */
static kl_code promote_due(kl_eval_ctx *c, Keyload__V1__QueueRecord *q, size_t *budget, kl_err *err)
{
    due_list *d = malloc(sizeof *d);
    if (d == NULL)
        return kl_record_oom(err);
    kl_code rc = KL_OK;
    while (*budget > 0) {
        d->now = c->now_ms;
        d->n = 0;
        d->max = *budget < PROMOTE_BATCH ? *budget : PROMOTE_BATCH;
        kl_key pk;
        kl_key_timed_queue(&pk, q->queue_id);
        if ((rc = kl_view_scan(c->view, pk.b, pk.len, collect_due, d, err)) != KL_OK)
            break;
        for (size_t i = 0; i < d->n && rc == KL_OK; i++) {
            kl_key k;
            kl_key_timed(&k, q->queue_id, d->e[i].t, d->e[i].seq);
            if ((rc = kl_view_del(c->view, k.b, k.len, err)) != KL_OK)
                break;
            Keyload__V1__MessageRecord *m;
            if ((rc = load_message(c->view, q->queue_id, d->e[i].lane, d->e[i].seq, &m, err)) != KL_OK)
                break;
            rc = make_available(c, q, d->e[i].lane, m, err);
            keyload__v1__message_record__free_unpacked(m, NULL);
        }
        *budget -= d->n;
        if (rc != KL_OK || d->n < d->max)
            break;
    }
    free(d);
    return rc;
}

typedef struct {
    size_t want, n;
    uint64_t seq[PROMOTE_BATCH];
} avail_list;

static int collect_avail(void *arg, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    (void)val;
    (void)vlen;
    avail_list *a = arg;
    uint64_t qid, seq;
    if (kl_key_parse_available(key, klen, &qid, &seq) != 0)
        return 1;
    a->seq[a->n++] = seq;
    return a->n == a->want;
}

/* Leases an available message under a fresh token: its 'A' entry becomes a 'T' entry at
 * the lease's end, and a lease record points from the token to the message. */
static kl_code lease_message(kl_eval_ctx *c, uint64_t qid, const char *lane, Keyload__V1__MessageRecord *msg,
                             uint8_t token[16], int64_t lease_ms, kl_err *err)
{
    kl_key k;
    kl_code rc;
    kl_key_available(&k, qid, lane, msg->seq);
    c->random(token, 16);
    msg->delivery_count++;
    msg->lease_token.data = token;
    msg->lease_token.len = 16;
    msg->visible_at_unix_ms = c->now_ms + lease_ms;
    if ((rc = kl_view_del(c->view, k.b, k.len, err)) != KL_OK ||
        (rc = save_message(c->view, qid, lane, msg, err)) != KL_OK)
        return rc;
    kl_key_timed(&k, qid, msg->visible_at_unix_ms, msg->seq);
    if ((rc = put_empty(c->view, &k, lane, err)) != KL_OK)
        return rc;
    Keyload__V1__LeaseRecord lr = KEYLOAD__V1__LEASE_RECORD__INIT;
    lr.queue_id = qid;
    lr.lane = (char *)lane;
    lr.seq = msg->seq;
    kl_key_lease(&k, token);
    return put_msg(c->view, &k, &lr.base, err);
}

kl_code kl_queue_eval_receive(kl_eval_ctx *c, const Keyload__V1__Receive *m, kl_buf *out, kl_err *err)
{
    uint64_t qid;
    Keyload__V1__QueueRecord *q;
    kl_code rc = load_queue(c->view, m->lane, &qid, &q, err);
    if (rc != KL_OK)
        return rc;
    const char *lane = lane_name(m->lane);
    uint32_t want = m->max_messages ? m->max_messages : 1;
    int64_t lease_ms = m->lease_ms ? m->lease_ms : KL_LEASE_MS_DEFAULT;
    Keyload__V1__MessageRecord **recs = calloc(want, sizeof *recs);
    Keyload__V1__ReceivedMessage *rm = calloc(want, sizeof *rm);
    Keyload__V1__ReceivedMessage **rmp = calloc(want, sizeof *rmp);
    uint8_t(*tokens)[16] = calloc(want, 16);
    avail_list *al = malloc(sizeof *al);
    size_t got = 0;
    uint64_t read_bytes = 0;
    if (!recs || !rm || !rmp || !tokens || !al) {
        rc = kl_record_oom(err);
        goto done;
    }
    size_t housekeeping = housekeeping_cap(c);
    if ((rc = promote_due(c, q, &housekeeping, err)) != KL_OK)
        goto done;
    bool full = false;
    while (got < want && !full) {
        al->n = 0;
        al->want = want - got < PROMOTE_BATCH ? want - got : PROMOTE_BATCH;
        kl_key pk;
        kl_key_available_lane(&pk, qid, lane);
        /* Leased messages leave the 'A' range, so a rescan starts at the next candidate. */
        if ((rc = kl_view_scan(c->view, pk.b, pk.len, collect_avail, al, err)) != KL_OK)
            goto done;
        if (al->n == 0)
            break;
        for (size_t i = 0; i < al->n && got < want; i++) {
            Keyload__V1__MessageRecord *msg;
            if ((rc = load_message(c->view, qid, lane, al->seq[i], &msg, err)) != KL_OK)
                goto done;
            if (msg->message->expires_at_unix_ms != 0 && msg->message->expires_at_unix_ms <= c->now_ms) {
                /* Expired while waiting: it is never delivered. Past the housekeeping cap the
                 * Receive stops here and answers with what it has. */
                if (housekeeping == 0) {
                    keyload__v1__message_record__free_unpacked(msg, NULL);
                    full = true;
                    break;
                }
                housekeeping--;
                rc = remove_message(c->view, q, lane, msg, false, err);
                keyload__v1__message_record__free_unpacked(msg, NULL);
                if (rc != KL_OK)
                    goto done;
                continue;
            }
            /* Every message handed out must be readable under the caller's field and header
             * grants; one that is not refuses the whole Receive (nothing is leased). */
            uint64_t t0 = c->clock_ns ? c->clock_ns() : 0;
            rc = kl_access_received(c->who, m->lane, msg->message, err);
            if (c->clock_ns)
                c->authz_ns += c->clock_ns() - t0;
            if (rc != KL_OK) {
                keyload__v1__message_record__free_unpacked(msg, NULL);
                goto done;
            }
            uint64_t body = msg->message->body.len;
            if (got > 0 && read_bytes + body > c->limits->max_query_read_bytes) {
                keyload__v1__message_record__free_unpacked(msg, NULL);
                full = true;
                break;
            }
            read_bytes += body;
            if ((rc = lease_message(c, qid, lane, msg, tokens[got], lease_ms, err)) != KL_OK) {
                keyload__v1__message_record__free_unpacked(msg, NULL);
                goto done;
            }
            recs[got] = msg;
            keyload__v1__received_message__init(&rm[got]);
            rm[got].message_id = msg->seq;
            rm[got].lane = (char *)lane;
            rm[got].lease_token = msg->lease_token;
            rm[got].delivery_count = msg->delivery_count;
            rm[got].message = msg->message;
            rm[got].lease_expires_unix_ms = msg->visible_at_unix_ms;
            rm[got].enqueued_unix_ms = msg->enqueued_unix_ms;
            rmp[got] = &rm[got];
            got++;
        }
    }
    if ((rc = save_queue(c->view, q, err)) != KL_OK)
        goto done;
    Keyload__V1__Received rcv = KEYLOAD__V1__RECEIVED__INIT;
    rcv.n_messages = got;
    rcv.messages = rmp;
    Keyload__V1__MutationResult res = KEYLOAD__V1__MUTATION_RESULT__INIT;
    res.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_RECEIVED;
    res.received = &rcv;
    rc = kl_engine_add_result(out, &res, err);
done:
    for (size_t i = 0; recs && i < got; i++) {
        /* The lease token points into `tokens`; detach it before protobuf-c frees. */
        recs[i]->lease_token.data = NULL;
        recs[i]->lease_token.len = 0;
        keyload__v1__message_record__free_unpacked(recs[i], NULL);
    }
    free(recs);
    free(rm);
    free(rmp);
    free(tokens);
    free(al);
    keyload__v1__queue_record__free_unpacked(q, NULL);
    return rc;
}

/* ---- ack / release ---- */

/* Resolves lease token i to its message, checking that the lease is the message's
 * current one and has not expired. */
static kl_code resolve_lease(kl_eval_ctx *c, const char *op, size_t i, uint64_t qid,
                             const uint8_t *token, Keyload__V1__MessageRecord **msg, char *lane_out,
                             kl_err *err)
{
    kl_key k;
    kl_key_lease(&k, token);
    uint8_t *val;
    size_t n;
    bool found;
    kl_code rc = kl_view_get(c->view, k.b, k.len, &val, &n, &found, err);
    if (rc != KL_OK)
        return rc;
    if (!found)
        return kl_fail(err, KL_FAILED_PRECONDITION, "lease_tokens",
                       "%s: lease_tokens[%zu] is not an active lease (it expired, was acknowledged "
                       "or released, or never existed)", op, i);
    Keyload__V1__LeaseRecord *lr = keyload__v1__lease_record__unpack(NULL, n, val);
    free(val);
    if (lr == NULL)
        return kl_record_corrupt(err, "lease");
    if (lr->queue_id != qid) {
        keyload__v1__lease_record__free_unpacked(lr, NULL);
        return kl_fail(err, KL_INVALID_ARGUMENT, "lease_tokens",
                       "%s: lease_tokens[%zu] belongs to another queue", op, i);
    }
    size_t lane_len = strnlen(lr->lane, KL_NAME_LEN_MAX);
    memcpy(lane_out, lr->lane, lane_len);
    lane_out[lane_len] = '\0';
    rc = load_message(c->view, qid, lr->lane, lr->seq, msg, err);
    keyload__v1__lease_record__free_unpacked(lr, NULL);
    if (rc != KL_OK)
        return rc;
    if ((*msg)->lease_token.len != 16 || memcmp((*msg)->lease_token.data, token, 16) != 0) {
        keyload__v1__message_record__free_unpacked(*msg, NULL);
        return kl_record_corrupt(err, "lease");
    }
    if ((*msg)->visible_at_unix_ms <= c->now_ms) {
        keyload__v1__message_record__free_unpacked(*msg, NULL);
        return kl_fail(err, KL_FAILED_PRECONDITION, "lease_expired",
                       "%s: lease_tokens[%zu] has expired; the message returns to its lane", op, i);
    }
    return KL_OK;
}

kl_code kl_queue_eval_ack_release(kl_eval_ctx *c, const Keyload__V1__QueueLaneRef *ref, size_t ntok,
                                  const ProtobufCBinaryData *toks, bool ack, kl_buf *out, kl_err *err)
{
    uint64_t qid;
    Keyload__V1__QueueRecord *q;
    kl_code rc = load_queue(c->view, ref, &qid, &q, err);
    if (rc != KL_OK)
        return rc;
    const char *op = ack ? "ack" : "release";
    char lane[KL_NAME_LEN_MAX + 1];
    for (size_t i = 0; i < ntok && rc == KL_OK; i++) {
        Keyload__V1__MessageRecord *m;
        if ((rc = resolve_lease(c, op, i, qid, toks[i].data, &m, lane, err)) != KL_OK)
            break;
        kl_key k;
        kl_key_timed(&k, qid, m->visible_at_unix_ms, m->seq);
        if (ack) {
            rc = remove_message(c->view, q, lane, m, true, err);
        } else if ((rc = kl_view_del(c->view, k.b, k.len, err)) == KL_OK) {
            rc = make_available(c, q, lane, m, err);
        }
        keyload__v1__message_record__free_unpacked(m, NULL);
    }
    if (rc == KL_OK)
        rc = save_queue(c->view, q, err);
    keyload__v1__queue_record__free_unpacked(q, NULL);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__MutationResult res = KEYLOAD__V1__MUTATION_RESULT__INIT;
    Keyload__V1__Acked a = KEYLOAD__V1__ACKED__INIT;
    Keyload__V1__Released r = KEYLOAD__V1__RELEASED__INIT;
    if (ack) {
        a.count = (uint32_t)ntok;
        res.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_ACKED;
        res.acked = &a;
    } else {
        r.count = (uint32_t)ntok;
        res.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_RELEASED;
        res.released = &r;
    }
    return kl_engine_add_result(out, &res, err);
}

typedef struct {
    int64_t now;
    uint64_t in_flight;
} timed_count;

static int count_timed(void *arg, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    (void)val;
    (void)vlen;
    timed_count *t = arg;
    uint64_t qid, seq;
    int64_t when;
    if (kl_key_parse_timed(key, klen, &qid, &when, &seq) == 0 && when > t->now)
        t->in_flight++;
    return 0;
}

kl_code kl_engine_queue_stats(kl_eval_ctx *c, const Keyload__V1__QueueLaneRef *ref,
                              Keyload__V1__QueueStatsAnswer *out, Keyload__V1__QueueLimits *limits_out,
                              char *dlq_out, kl_err *err)
{
    uint64_t qid;
    Keyload__V1__QueueRecord *q;
    kl_code rc = load_queue(c->view, ref, &qid, &q, err);
    if (rc != KL_OK)
        return rc;
    timed_count t = {c->now_ms, 0};
    kl_key pk;
    kl_key_timed_queue(&pk, qid);
    rc = kl_view_scan(c->view, pk.b, pk.len, count_timed, &t, err);
    if (rc == KL_OK) {
        out->queue_id = qid;
        out->partition = q->partition;
        out->messages = q->messages;
        out->bytes = q->bytes;
        out->in_flight = t.in_flight;
        out->available = q->messages - t.in_flight;
        keyload__v1__queue_limits__init(limits_out);
        limits_out->max_messages = queue_max_messages(c, q);
        limits_out->max_bytes = queue_max_bytes(c, q);
        dlq_out[0] = '\0';
        if (q->limits) {
            limits_out->max_deliveries = q->limits->max_deliveries;
            snprintf(dlq_out, KL_NAME_LEN_MAX + 1, "%s", q->limits->dead_letter_queue);
        }
        limits_out->dead_letter_queue = dlq_out;
        out->limits = limits_out;
    }
    keyload__v1__queue_record__free_unpacked(q, NULL);
    return rc;
}

/* ==== the rows of the queue kinds (daemon/engine/kind.h) ====
 * Each kind's shape checks, authorization, evaluation and database ref, and the
 * descriptor daemon/engine/mutation.c indexes by kind number. */

/* ---- Enqueue ---- */

static kl_code validate_enqueue(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    kl_code rc = kl_validate_ref(idx, "enqueue", "lane", m->enqueue->lane, true, err);
    return rc != KL_OK ? rc : kl_validate_message(idx, "enqueue", m->enqueue->message, err);
}

static kl_code access_enqueue(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    return kl_access_queue(who, m->enqueue->lane, KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH,
                           m->enqueue->message, err);
}

static kl_code eval_enqueue(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_queue_eval_enqueue(c, m->enqueue, out, err);
}

static const Keyload__V1__QueueLaneRef *ref_enqueue(const Keyload__V1__Mutation *m) { return m->enqueue->lane; }

const kl_mutation_kind kl_queue_kind_enqueue = {
    .validate = validate_enqueue,
    .access = access_enqueue,
    .canon = kl_canon_enqueue,
    .eval = eval_enqueue,
    .ref = ref_enqueue,
};

/* ---- Receive ---- */

static kl_code validate_receive(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    kl_code rc;
    if ((rc = kl_validate_ref(idx, "receive", "lane", m->receive->lane, true, err)) != KL_OK)
        return rc;
    if (m->receive->max_messages > KL_RECEIVE_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "max_messages",
                       "mutations[%zu].receive.max_messages must be 0..%d", idx, KL_RECEIVE_MAX);
    if (m->receive->lease_ms > KL_LEASE_MS_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "lease_ms",
                       "mutations[%zu].receive.lease_ms must be 0..%lld", idx,
                       (long long)KL_LEASE_MS_MAX);
    if (m->receive->wait_ms > KL_RECEIVE_WAIT_MS_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "wait_ms",
                       "mutations[%zu].receive.wait_ms must be 0..%d", idx, KL_RECEIVE_WAIT_MS_MAX);
    return KL_OK;
}

static kl_code access_receive(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    return kl_access_queue(who, m->receive->lane, KEYLOAD__V1__PERMISSION__QUEUE_CONSUME, NULL, err);
}

static kl_code eval_receive(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_queue_eval_receive(c, m->receive, out, err);
}

static const Keyload__V1__QueueLaneRef *ref_receive(const Keyload__V1__Mutation *m) { return m->receive->lane; }

const kl_mutation_kind kl_queue_kind_receive = {
    .validate = validate_receive,
    .access = access_receive,
    .canon = kl_canon_receive,
    .eval = eval_receive,
    .ref = ref_receive,
};

/* ---- Ack ---- */

/* Ack and Release carry the same fields: the queue (no lane) and its lease tokens. what
 * is the kind's field name ("ack", "release"), which the messages name. */
static kl_code validate_settle(size_t idx, const char *what, const Keyload__V1__QueueLaneRef *queue, size_t ntok,
                               const ProtobufCBinaryData *toks, kl_err *err)
{
    kl_code rc = kl_validate_ref(idx, what, "queue", queue, false, err);
    return rc != KL_OK ? rc : kl_validate_tokens(idx, what, ntok, toks, err);
}

static kl_code validate_ack(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    return validate_settle(idx, "ack", m->ack->queue, m->ack->n_lease_tokens, m->ack->lease_tokens, err);
}

static kl_code access_ack(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    return kl_access_queue(who, m->ack->queue, KEYLOAD__V1__PERMISSION__QUEUE_ACK, NULL, err);
}

static kl_code eval_ack(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_queue_eval_ack_release(c, m->ack->queue, m->ack->n_lease_tokens, m->ack->lease_tokens, true, out, err);
}

static const Keyload__V1__QueueLaneRef *ref_ack(const Keyload__V1__Mutation *m) { return m->ack->queue; }

const kl_mutation_kind kl_queue_kind_ack = {
    .validate = validate_ack,
    .access = access_ack,
    .canon = kl_canon_ack,
    .eval = eval_ack,
    .ref = ref_ack,
};

/* ---- Release ---- */

static kl_code validate_release(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    return validate_settle(idx, "release", m->release->queue, m->release->n_lease_tokens,
                           m->release->lease_tokens, err);
}

static kl_code access_release(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    return kl_access_queue(who, m->release->queue, KEYLOAD__V1__PERMISSION__QUEUE_ACK, NULL, err);
}

static kl_code eval_release(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    return kl_queue_eval_ack_release(c, m->release->queue, m->release->n_lease_tokens,
                                     m->release->lease_tokens, false, out, err);
}

static const Keyload__V1__QueueLaneRef *ref_release(const Keyload__V1__Mutation *m) { return m->release->queue; }

const kl_mutation_kind kl_queue_kind_release = {
    .validate = validate_release,
    .access = access_release,
    .canon = kl_canon_release,
    .eval = eval_release,
    .ref = ref_release,
};

typedef struct gauge_scan {
    kl_queue_gauge *out;
    size_t max, filled, total;
} gauge_scan;

static int gauge_queue(void *arg, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    gauge_scan *g = arg;
    if (klen != 9)
        return 0;
    Keyload__V1__QueueRecord *q = keyload__v1__queue_record__unpack(NULL, vlen, val);
    if (q == NULL || q->deleted) {
        if (q)
            keyload__v1__queue_record__free_unpacked(q, NULL);
        return 0;
    }
    if (g->filled < g->max)
        g->out[g->filled++] = (kl_queue_gauge){.qid = kl_be64_get(key + 1), .messages = q->messages,
                                               .bytes = q->bytes};
    g->total++;
    keyload__v1__queue_record__free_unpacked(q, NULL);
    return 0;
}

kl_code kl_queue_gauges(kl_view *v, int64_t now_ms, kl_queue_gauge *out, size_t max,
                        size_t *filled, size_t *total, kl_err *err)
{
    gauge_scan g = {.out = out, .max = max};
    kl_key k;
    kl_key_queue(&k, 0);
    kl_code rc = kl_view_scan(v, k.b, 1, gauge_queue, &g, err);
    *filled = g.filled;
    *total = g.total;
    for (size_t i = 0; rc == KL_OK && i < g.filled; i++) {
        timed_count t = {now_ms, 0};
        kl_key_timed_queue(&k, out[i].qid);
        rc = kl_view_scan(v, k.b, k.len, count_timed, &t, err);
        out[i].in_flight = t.in_flight;
    }
    return rc;
}
