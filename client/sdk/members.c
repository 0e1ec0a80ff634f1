/* members: the SDK side of a partition's membership (membership.proto; docs/MEMBERSHIP.md):
 * Members reads the configuration in effect, MemberChange asks the leader to run a change.
 * Both go through the client's partition path (leader redirects, sessions). */
#include "client/sdk/internal.h"

#include <stdlib.h>

#define METHOD_MEMBERS "keyload.v1.Members"
#define METHOD_MEMBER_CHANGE "keyload.v1.MemberChange"

kl_code kl_client_members(kl_client *c, int partition, Keyload__V1__MembersAnswer **out, kl_err *err)
{
    *out = NULL;
    uint8_t *ans;
    size_t ans_len;
    kl_code rc = kl_sdk_partition_read(c, NULL, partition, METHOD_MEMBERS, (const uint8_t *)"", 0, &ans,
                                       &ans_len, err);
    if (rc != KL_OK)
        return rc;
    *out = keyload__v1__members_answer__unpack(NULL, ans_len, ans);
    free(ans);
    return *out != NULL ? KL_OK : kl_fail(err, KL_INTERNAL, "answer", "MembersAnswer does not decode");
}

kl_code kl_client_member_change(kl_client *c, int partition, const Keyload__V1__MemberChangeRequest *req,
                                Keyload__V1__MemberChangeAnswer **out, kl_err *err)
{
    *out = NULL;
    size_t len = keyload__v1__member_change_request__get_packed_size(req);
    uint8_t *b = malloc(len ? len : 1);
    if (b == NULL)
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory", "out of memory");
    keyload__v1__member_change_request__pack(req, b);
    uint8_t *ans;
    size_t ans_len;
    kl_code rc = kl_sdk_partition_read(c, NULL, partition, METHOD_MEMBER_CHANGE, b, len, &ans, &ans_len, err);
    free(b);
    if (rc != KL_OK)
        return rc;
    *out = keyload__v1__member_change_answer__unpack(NULL, ans_len, ans);
    free(ans);
    return *out != NULL ? KL_OK : kl_fail(err, KL_INTERNAL, "answer", "MemberChangeAnswer does not decode");
}
