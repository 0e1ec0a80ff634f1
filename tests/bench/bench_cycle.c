/* bench_cycle: --cycle, the rest of one enqueue + receive + ack cycle: a Receive of one
 * message of the client's own lane, then an Ack of its lease token, each its own batch
 * under a fresh command id on the client's connection. */
#include "tests/bench/bench_fixture.h"

#include "common/guid.h"

#include <stdlib.h>
#include <string.h>

/* One batch of the single mutation m; its answer in *ans (malloc'd). */
static kl_code one_batch(kl_rpc_client *c, const bench_options *o, Keyload__V1__Mutation *m, uint8_t **ans,
                         size_t *alen, kl_err *err)
{
    uint8_t id[KL_GUID_LEN];
    kl_guid_random(id);
    Keyload__V1__Mutation *mp[1] = {m};
    Keyload__V1__BatchRequest b = KEYLOAD__V1__BATCH_REQUEST__INIT;
    b.command_id.data = id;
    b.command_id.len = sizeof id;
    b.mutations = mp;
    b.n_mutations = 1;
    uint8_t *buf = NULL;
    size_t cap = 0, len = bench_pack_batch(&b, &buf, &cap);
    if (len == 0)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    kl_code rc = kl_rpc_invoke(c, BATCH_METHOD, buf, len, o->timeout_ms, ans, alen, NULL, 0, err);
    free(buf);
    return rc;
}

kl_code bench_cycle_rest(kl_rpc_client *c, const bench_options *o, const char *queue, const char *lane,
                         kl_err *err)
{
    Keyload__V1__QueueLaneRef ref;
    bench_lane_ref(&ref, queue);
    ref.lane = (char *)lane;
    Keyload__V1__Receive rcv = KEYLOAD__V1__RECEIVE__INIT;
    rcv.lane = &ref;
    rcv.max_messages = 1;
    rcv.lease_ms = 30000;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_RECEIVE;
    m.receive = &rcv;
    uint8_t *ans = NULL;
    size_t alen = 0;
    kl_code rc = one_batch(c, o, &m, &ans, &alen, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__BatchReceipt *r = keyload__v1__batch_receipt__unpack(NULL, alen, ans);
    free(ans);
    if (r == NULL || r->n_results != 1 || r->results[0]->received == NULL ||
        r->results[0]->received->n_messages != 1) {
        if (r != NULL)
            keyload__v1__batch_receipt__free_unpacked(r, NULL);
        return kl_fail(err, KL_INTERNAL, "receipt", "the cycle's Receive got no message");
    }
    Keyload__V1__QueueLaneRef qref;
    bench_lane_ref(&qref, queue);
    Keyload__V1__Ack ack = KEYLOAD__V1__ACK__INIT;
    ack.queue = &qref;
    ack.n_lease_tokens = 1;
    ack.lease_tokens = &r->results[0]->received->messages[0]->lease_token;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_ACK;
    m.ack = &ack;
    rc = one_batch(c, o, &m, &ans, &alen, err);
    if (rc == KL_OK)
        free(ans);
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
    return rc;
}
