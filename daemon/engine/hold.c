/* hold: SetTransferHold and the check CompleteQueueTransfer makes (ARCHITECTURE.md "Backup
 * and restore"). Every member evaluates nothing here: the leader's write-set carries the
 * record, and the check reads it at the entry's partition time, so all members agree. */
#include "daemon/engine/hold.h"

#include "daemon/engine/authz.h"
#include "daemon/engine/kind.h"
#include "daemon/engine/record.h"
#include "daemon/engine/view.h"
#include "daemon/store/keys.h"

#include <stdlib.h>

#define HOLD_META "transfer_hold"

kl_code kl_hold_check_complete(kl_eval_ctx *c, kl_err *err)
{
    uint64_t stored;
    kl_code rc = kl_view_get_meta_u64(c->view, HOLD_META, &stored, err);
    if (rc != KL_OK)
        return rc;
    int64_t until = (int64_t)stored;
    if (until > c->now_ms)
        return kl_fail(err, KL_UNAVAILABLE, "transfer_hold",
                       "partition %d holds Complete for a backup until partition time %lld (%lld ms more); "
                       "retry then", c->partition, (long long)until, (long long)(until - c->now_ms));
    return KL_OK;
}

static kl_code validate_set_transfer_hold(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    if (m->set_transfer_hold->hold_ms > KL_TRANSFER_HOLD_MAX_MS)
        return kl_fail(err, KL_INVALID_ARGUMENT, "hold_ms",
                       "mutations[%zu]: hold_ms %u exceeds KL_TRANSFER_HOLD_MAX_MS (%d)", idx,
                       m->set_transfer_hold->hold_ms, KL_TRANSFER_HOLD_MAX_MS);
    return KL_OK;
}

static kl_code access_set_transfer_hold(const kl_authz_subject *who, const Keyload__V1__Mutation *m, kl_err *err)
{
    (void)m;
    if (who == NULL || who->principal == NULL || who->admin_off || !who->principal->cluster_admin)
        return kl_fail(err, KL_PERMISSION_DENIED, "role:cluster_admin",
                       "only a cluster administrator may hold transfers (a backup does)");
    return KL_OK;
}

/* The record holds the partition time the hold ends at; releasing deletes it. */
static kl_code eval_set_transfer_hold(kl_eval_ctx *c, const Keyload__V1__Mutation *m, kl_buf *out, kl_err *err)
{
    uint32_t ms = m->set_transfer_hold->hold_ms;
    int64_t until = ms > 0 ? c->now_ms + ms : 0;
    kl_code rc;
    if (until > 0) {
        rc = kl_view_put_meta_u64(c->view, HOLD_META, (uint64_t)until, err);
    } else {
        kl_key k;
        kl_key_meta(&k, HOLD_META);
        rc = kl_view_del(c->view, k.b, k.len, err);
    }
    if (rc != KL_OK)
        return rc;
    Keyload__V1__TransferHoldSet hs = KEYLOAD__V1__TRANSFER_HOLD_SET__INIT;
    hs.until_unix_ms = until;
    hs.partition = c->partition;
    Keyload__V1__MutationResult res = KEYLOAD__V1__MUTATION_RESULT__INIT;
    res.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_HOLD_SET;
    res.transfer_hold_set = &hs;
    return kl_engine_add_result(out, &res, err);
}

const kl_mutation_kind kl_hold_kind_set_transfer_hold = {
    .validate = validate_set_transfer_hold,
    .access = access_set_transfer_hold,
    .canon = kl_canon_set_transfer_hold,
    .eval = eval_set_transfer_hold,
    .per_partition = true,
};
