/* member_key: SetMemberKey from the SDK (queue.proto; docs/MEMBERSHIP.md "Who vouches for a
 * new member's key"): a cluster administrator makes partition 0 trust, or stop trusting, the
 * key of a data partition's member. A catalog batch, so it goes to partition 0 and answers
 * once every data partition applied it (or can no longer serve under the older catalog). */
#include "client/sdk/internal.h"

#include <string.h>

kl_code kl_batch_set_member_key(kl_batch *b, int partition, uint64_t member, const uint8_t public_key[32],
                                kl_err *err)
{
    if (partition < 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "partition", "partition must name a partition (0 or above)");
    if (member == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "member", "member must be a nonzero member id");
    Keyload__V1__SetMemberKey k = KEYLOAD__V1__SET_MEMBER_KEY__INIT;
    k.partition = partition;
    k.member = member;
    if (public_key != NULL) {
        k.public_key.data = (uint8_t *)public_key;
        k.public_key.len = 32;
    }
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_SET_MEMBER_KEY;
    m.set_member_key = &k;
    return kl_sdk_batch_add(b, &m, err);
}

kl_code kl_client_set_member_key(kl_client *c, const char *command_id, int partition, uint64_t member,
                                 const uint8_t public_key[32], bool *changed, kl_err *err)
{
    if (changed != NULL)
        *changed = false;
    if (command_id == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "command_id",
                       "command_id is required (keep it to replay the call; kl_command_id_new makes one)");
    kl_batch *b = NULL;
    kl_code rc = kl_batch_new(command_id, &b, err);
    if (rc == KL_OK)
        rc = kl_batch_set_member_key(b, partition, member, public_key, err);
    kl_receipt *r = NULL;
    if (rc == KL_OK)
        rc = kl_client_batch(c, b, &r, err);
    kl_batch_free(b);
    if (rc != KL_OK)
        return rc;
    const Keyload__V1__BatchReceipt *d = r->decoded;
    if (d->n_results != 1 || d->results[0]->kind_case != KEYLOAD__V1__MUTATION_RESULT__KIND_MEMBER_KEY_SET)
        rc = kl_fail(err, KL_INTERNAL, "receipt", "the receipt holds %zu results, not one MemberKeySet",
                     d->n_results);
    else if (changed != NULL)
        *changed = d->results[0]->member_key_set->changed;
    kl_receipt_free(r);
    return rc;
}
