/* encode: a kl_batch as a keyload.v1.BatchRequest, with the database stamped into every
 * queue ref. The batch itself stays untouched (it may be shared between threads), so the
 * refs and their parents are shallow-copied for the duration of the pack. */
#include "client/sdk/internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct stamped {
    Keyload__V1__Mutation m;
    union {
        Keyload__V1__CreateQueue cq;
        Keyload__V1__DeleteQueue dq;
        Keyload__V1__Enqueue eq;
        Keyload__V1__Receive rv;
        Keyload__V1__Ack ak;
        Keyload__V1__Release rl;
    } sub;
    Keyload__V1__QueueLaneRef ref;
} stamped;

/* Copies src into s with the ref's tenant/database replaced; false for an unknown kind. */
static bool stamp(stamped *s, const Keyload__V1__Mutation *src, char *tenant, char *database)
{
    s->m = *src;
    const Keyload__V1__QueueLaneRef *ref;
    switch (src->kind_case) {
    case KEYLOAD__V1__MUTATION__KIND_CREATE_DATABASE:
    case KEYLOAD__V1__MUTATION__KIND_BOOTSTRAP:
        return true; /* names its own tenant and database */
    case KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE:
        s->sub.cq = *src->create_queue;
        s->sub.cq.queue = &s->ref;
        s->m.create_queue = &s->sub.cq;
        ref = src->create_queue->queue;
        break;
    case KEYLOAD__V1__MUTATION__KIND_DELETE_QUEUE:
        s->sub.dq = *src->delete_queue;
        s->sub.dq.queue = &s->ref;
        s->m.delete_queue = &s->sub.dq;
        ref = src->delete_queue->queue;
        break;
    case KEYLOAD__V1__MUTATION__KIND_ENQUEUE:
        s->sub.eq = *src->enqueue;
        s->sub.eq.lane = &s->ref;
        s->m.enqueue = &s->sub.eq;
        ref = src->enqueue->lane;
        break;
    case KEYLOAD__V1__MUTATION__KIND_RECEIVE:
        s->sub.rv = *src->receive;
        s->sub.rv.lane = &s->ref;
        s->m.receive = &s->sub.rv;
        ref = src->receive->lane;
        break;
    case KEYLOAD__V1__MUTATION__KIND_ACK:
        s->sub.ak = *src->ack;
        s->sub.ak.queue = &s->ref;
        s->m.ack = &s->sub.ak;
        ref = src->ack->queue;
        break;
    case KEYLOAD__V1__MUTATION__KIND_RELEASE:
        s->sub.rl = *src->release;
        s->sub.rl.queue = &s->ref;
        s->m.release = &s->sub.rl;
        ref = src->release->queue;
        break;
    default:
        return false;
    }
    if (ref == NULL)
        return false;
    s->ref = *ref;
    s->ref.tenant = tenant;
    s->ref.database = database;
    return true;
}

kl_code kl_batch_encode(const kl_batch *b, const char *database, uint8_t **out,
                        size_t *out_len, kl_err *err)
{
    *out = NULL;
    *out_len = 0;
    char tenant[KL_SDK_NAME_MAX + 1], db[KL_SDK_NAME_MAX + 1];
    kl_code rc = kl_sdk_split_database(database ? database : KL_DEFAULT_DATABASE, tenant, db,
                                       err);
    if (rc != KL_OK)
        return rc;
    if (b->n == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "mutations",
                       "a batch needs at least one mutation");
    stamped *s = calloc(b->n, sizeof *s);
    Keyload__V1__Mutation **ptrs = calloc(b->n, sizeof *ptrs);
    if (s == NULL || ptrs == NULL) {
        free(s);
        free(ptrs);
        return kl_sdk_oom(err);
    }
    for (size_t i = 0; i < b->n; i++) {
        if (!stamp(&s[i], b->muts[i], tenant, db)) {
            free(s);
            free(ptrs);
            return kl_fail(err, KL_INTERNAL, "mutations", "mutation %zu has no known kind",
                           i + 1);
        }
        ptrs[i] = &s[i].m;
    }
    Keyload__V1__BatchRequest req = KEYLOAD__V1__BATCH_REQUEST__INIT;
    req.command_id.data = (uint8_t *)b->command_id;
    req.command_id.len = KL_GUID_LEN;
    req.n_mutations = b->n;
    req.mutations = ptrs;
    size_t len = keyload__v1__batch_request__get_packed_size(&req);
    uint8_t *buf = malloc(len ? len : 1);
    if (buf == NULL) {
        rc = kl_sdk_oom(err);
    } else {
        keyload__v1__batch_request__pack(&req, buf);
        *out = buf;
        *out_len = len;
    }
    free(s);
    free(ptrs);
    return rc;
}
