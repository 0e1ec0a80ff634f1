#include "daemon/rpc/service.h"

#include "common/failpoint.h"

#include <stdlib.h>

static void batch_answered(void *cookie, kl_code code, const kl_err *err, const uint8_t *receipt,
                           size_t len)
{
    kl_rpc_call *call = cookie;
    kl_err fe;
    kl_err_clear(&fe);
    if (KL_FAILPOINT("daemon.before_reply", &fe) != KL_OK) {
        kl_rpc_reply_error(call, &fe, NULL);
        return;
    }
    if (code == KL_OK)
        kl_rpc_reply(call, receipt, len);
    else
        kl_rpc_reply_error(call, err, NULL);
}

static void handle_batch(void *owner, kl_rpc_call *call)
{
    kl_service *s = owner;
    size_t len;
    const uint8_t *p = kl_rpc_call_payload(call, &len);
    kl_node_submit_batch(s->node, KL_LOCAL_PRINCIPAL, p, len, batch_answered, call);
}

static void handle_queue_stats(void *owner, kl_rpc_call *call)
{
    kl_service *s = owner;
    size_t len, alen;
    const uint8_t *p = kl_rpc_call_payload(call, &len);
    uint8_t *answer;
    kl_err err;
    kl_err_clear(&err);
    if (kl_node_queue_stats(s->node, p, len, &answer, &alen, &err) != KL_OK) {
        kl_rpc_reply_error(call, &err, NULL);
        return;
    }
    kl_rpc_reply(call, answer, alen);
    free(answer);
}

static const kl_rpc_method methods[] = {
    {"keyload.v1.Batch", handle_batch},
    {"keyload.v1.QueueStats", handle_queue_stats},
};

const kl_rpc_method *kl_service_methods(size_t *count)
{
    *count = sizeof methods / sizeof methods[0];
    return methods;
}
