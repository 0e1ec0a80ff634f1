/* lease: the catalog lease checks of a data partition's serving leader (tailer.h has the
 * lease): at admission, and again where data leaves (a confirmed read, a committed
 * Receive's receipt). A refusal is UNAVAILABLE "catalog_lease": nothing was written, and
 * retrying helps once the lease holds again. */
#include "daemon/rpc/serve.h"

#include "daemon/rpc/tailer.h"
#include "keyload/v1/queue.pb-c.h"

bool kl_service_serving(kl_service *s)
{
    uint64_t index, term;
    bool ok;
    kl_repl_next(s->repl, &index, &term, &ok);
    return ok;
}

static void reply_lease_refused(kl_service *s, kl_rpc_call *call, int64_t age)
{
    kl_err err;
    if (age < 0)
        kl_fail(&err, KL_UNAVAILABLE, "catalog_lease",
                "partition %d's leader has not caught up with the catalog (partition 0) since it "
                "took over; retry shortly", s->partition->id);
    else
        kl_fail(&err, KL_UNAVAILABLE, "catalog_lease",
                "partition %d's catalog lease ran out: its last complete catalog tail began %lld ms "
                "ago (catalog_lease_ms %u); partition 0 is unreachable or slow; retry",
                s->partition->id, (long long)age, s->cluster->timers.catalog_lease_ms);
    kl_rpc_reply_error(call, &err, NULL);
}

bool kl_service_check_lease(kl_service *s, kl_rpc_call *call)
{
    int64_t age;
    if (s->tailer == NULL || !kl_service_serving(s) || kl_tailer_lease_valid(s->tailer, &age))
        return true;
    reply_lease_refused(s, call, age);
    return false;
}

/* Where data leaves: a grant revoked on partition 0 returns once this partition applied it
 * or its lease ran out, so an answer handed out after that under the older catalog could
 * reach a principal whose revoke already returned. Admission checked the lease, but a read
 * waits for its round and a Receive for its commit; here the lease is checked again,
 * whatever the role now (a member that stopped leading has no lease to rely on). */
bool kl_service_lease_holds(kl_service *s, kl_rpc_call *call)
{
    int64_t age;
    if (s->tailer == NULL || kl_tailer_lease_valid(s->tailer, &age))
        return true;
    reply_lease_refused(s, call, age);
    return false;
}

/* Whether a committed batch's receipt hands out message bodies (a Receive that leased some). */
static bool receipt_delivers(const uint8_t *receipt, size_t len)
{
    Keyload__V1__BatchReceipt *r = keyload__v1__batch_receipt__unpack(NULL, len, receipt);
    if (r == NULL)
        return true; /* cannot tell: treat it as data */
    bool delivers = false;
    for (size_t i = 0; i < r->n_results && !delivers; i++)
        delivers = r->results[i]->kind_case == KEYLOAD__V1__MUTATION_RESULT__KIND_RECEIVED &&
                   r->results[i]->received != NULL && r->results[i]->received->n_messages > 0;
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
    return delivers;
}

bool kl_service_lease_holds_for_receipt(kl_service *s, kl_rpc_call *call, const uint8_t *receipt, size_t len)
{
    int64_t age;
    if (s->tailer == NULL || kl_tailer_lease_valid(s->tailer, &age) || !receipt_delivers(receipt, len))
        return true;
    /* Committed, so the leased messages stay leased until their lease ends and then return
     * to the queue; a retry with the same command id replays this receipt once the lease
     * holds again, or answers stale_authority if the principal's grants changed. */
    reply_lease_refused(s, call, age);
    return false;
}
