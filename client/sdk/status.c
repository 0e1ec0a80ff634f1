/* status: kl_member_status, one MemberStatus call to one member (client/keyload.h). */
#include "client/keyload.h"
#include "common/clock.h"
#include "common/rpc.h"

#include <stdlib.h>
#include <time.h>

static int64_t now_ms(void)
{
    return kl_clock_ms(CLOCK_MONOTONIC);
}

kl_code kl_member_status(const char *url, int timeout_ms, Keyload__V1__MemberStatusAnswer **out,
                         kl_err *err)
{
    if (out == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "out", "member status: out is NULL");
    *out = NULL;
    if (url == NULL || url[0] == '\0')
        return kl_fail(err, KL_INVALID_ARGUMENT, "url", "member status: url is empty");
    if (timeout_ms <= 0)
        timeout_ms = KL_DEFAULT_TIMEOUT_MS;
    int64_t deadline = now_ms() + timeout_ms;
    kl_rpc_client *c;
    kl_code rc = kl_rpc_client_open(url, timeout_ms, 0, &c, err);
    if (rc != KL_OK)
        return rc;
    int64_t left = deadline - now_ms();
    if (left <= 0) {
        kl_rpc_client_close(c);
        return kl_fail(err, KL_DEADLINE_EXCEEDED, "timeout",
                       "member status: %s: connecting used the whole %d ms", url, timeout_ms);
    }
    Keyload__V1__MemberStatusRequest req = KEYLOAD__V1__MEMBER_STATUS_REQUEST__INIT;
    uint8_t req_buf[16];
    size_t req_len = keyload__v1__member_status_request__pack(&req, req_buf);
    uint8_t *ans = NULL;
    size_t ans_len = 0;
    rc = kl_rpc_invoke(c, "keyload.v1.MemberStatus", req_buf, req_len, (int)left, &ans, &ans_len,
                       NULL, 0, err);
    kl_rpc_client_close(c);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__MemberStatusAnswer *a = keyload__v1__member_status_answer__unpack(NULL, ans_len, ans);
    free(ans);
    if (a == NULL)
        return kl_fail(err, KL_INTERNAL, "answer", "member status: %s: the answer does not decode",
                       url);
    *out = a;
    return KL_OK;
}

void kl_member_status_free(Keyload__V1__MemberStatusAnswer *a)
{
    if (a != NULL)
        keyload__v1__member_status_answer__free_unpacked(a, NULL);
}
