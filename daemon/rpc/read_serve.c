/* read_serve: the fresh reads. A read passes the read-index barrier first: it is served
 * from applied state only once this member has confirmed it still leads and has applied up
 * to the commit index, and answered UNAVAILABLE when the round does not confirm by its
 * deadline. Each waiting read holds one slot (KL_SERVICE_MAX_READS) with its kind and the
 * function that serves it: kl_service_serve_read for the native reads, query_serve.c's for
 * a Q1 read statement. */
#include "daemon/rpc/serve.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* Serves a read of `kind` that passed its barrier: the node's read of that kind. */
void kl_service_serve_read(kl_service *s, kl_rpc_call *call, kl_node_read_kind kind,
                           const kl_service_read_args *args)
{
    (void)args; /* the node decodes its reads itself */
    size_t len, alen;
    const uint8_t *p = kl_rpc_call_payload(call, &len);
    uint8_t *answer;
    kl_err err;
    kl_err_clear(&err);
    const char *who = kl_service_principal(call);
    kl_code rc = kl_node_read(s->node, kind, who, p, len, &answer, &alen, &err);
    if (rc != KL_OK) {
        kl_rpc_reply_error(call, &err, NULL);
        return;
    }
    kl_rpc_reply(call, answer, alen);
    free(answer);
}

/* When a read admitted now must be answered (monotonic ms): KL_SERVICE_READ_DEADLINE_MS,
 * or sooner so the answer reaches a caller whose own deadline is nearer before it gives up. */
static int64_t read_answer_by(kl_rpc_call *call, int64_t now)
{
    int64_t budget = KL_SERVICE_READ_DEADLINE_MS;
    int64_t deadline = kl_rpc_call_deadline_ms(call);
    if (deadline > 0) {
        int64_t left = deadline - kl_service_wall_ms();
        int64_t margin = left / 4 < KL_SERVICE_DEADLINE_MARGIN_MS ? left / 4 : KL_SERVICE_DEADLINE_MARGIN_MS;
        left -= margin > 0 ? margin : 0;
        if (left < budget)
            budget = left > 0 ? left : 0;
    }
    return now + budget;
}

void kl_service_start_read(kl_service *s, kl_rpc_call *call, kl_node_read_kind kind,
                           kl_service_read_fn serve, const kl_service_read_args *args)
{
    if (!kl_service_check_lease(s, call))
        return;
    kl_err err;
    int slot = -1;
    for (int i = 0; i < KL_SERVICE_MAX_READS && slot < 0; i++)
        if (s->reads[i].ctx == 0)
            slot = i;
    if (slot < 0) {
        kl_fail(&err, KL_UNAVAILABLE, "reads_full",
                "%d reads are already waiting for their barrier; retry shortly", KL_SERVICE_MAX_READS);
        kl_rpc_reply_error(call, &err, NULL);
        return;
    }
    uint64_t ctx = ++s->next_read;
    uint64_t leader = 0;
    int64_t now = kl_service_mono_ms();
    /* invariant I-RPC-3: every waiting read has the function that serves it */
    assert(serve != NULL);
    /* Registered first: the barrier confirms on the loop after kl_repl_read_index returned. */
    s->reads[slot].ctx = ctx;
    s->reads[slot].call = call;
    s->reads[slot].kind = kind;
    s->reads[slot].serve = serve;
    if (args != NULL)
        s->reads[slot].args = *args;
    else
        memset(&s->reads[slot].args, 0, sizeof s->reads[slot].args);
    s->reads[slot].started_ms = now;
    s->reads[slot].answer_by_ms = read_answer_by(call, now);
    kl_code rc = kl_repl_read_index(s->repl, ctx, &leader);
    if (rc == KL_OK)
        return;
    if (s->reads[slot].ctx != ctx)
        return; /* already answered */
    s->reads[slot].ctx = 0;
    if (rc == KL_NOT_LEADER) {
        kl_fail(&err, KL_NOT_LEADER, "not_leader",
                "this member does not lead partition %d now; read from the leader", s->partition->id);
        kl_service_reply_not_leader(s, call, &err);
        return;
    }
    kl_fail(&err, KL_UNAVAILABLE, "read_barrier", "the read barrier is unavailable (%s); retry",
            kl_code_name(rc));
    kl_rpc_reply_error(call, &err, NULL);
}

static int find_read(kl_service *s, uint64_t ctx)
{
    for (int i = 0; i < KL_SERVICE_MAX_READS; i++)
        if (s->reads[i].ctx == ctx)
            return i;
    return -1;
}

void kl_service_read_ready(kl_service *s, uint64_t read_ctx)
{
    int i = find_read(s, read_ctx);
    if (i < 0)
        return;
    kl_rpc_call *call = s->reads[i].call;
    kl_service_read_args args = s->reads[i].args; /* the slot is free from here on */
    s->reads[i].ctx = 0;
    if (!kl_service_lease_holds(s, call))
        return;
    s->reads[i].serve(s, call, s->reads[i].kind, &args);
}

void kl_service_read_dropped(kl_service *s, uint64_t read_ctx)
{
    int i = find_read(s, read_ctx);
    if (i < 0)
        return;
    kl_rpc_call *call = s->reads[i].call;
    s->reads[i].ctx = 0;
    kl_err err;
    kl_fail(&err, KL_UNAVAILABLE, "leader_changed", "leadership changed during the read; retry");
    kl_rpc_reply_error(call, &err, NULL);
}

/* A read whose round was not confirmed by its deadline: this leader did not hear from
 * enough members (or they answer slowly). Nothing was read, so retrying is safe; the slot
 * and the caller's context are freed now, and a confirmation arriving later finds no read. */
void kl_service_expire_reads(kl_service *s)
{
    int64_t now = kl_service_mono_ms();
    for (int i = 0; i < KL_SERVICE_MAX_READS; i++) {
        if (s->reads[i].ctx == 0 || now < s->reads[i].answer_by_ms)
            continue;
        kl_rpc_call *call = s->reads[i].call;
        s->reads[i].ctx = 0;
        kl_raft_status st;
        kl_repl_status(s->repl, &st);
        kl_err err;
        kl_fail(&err, KL_UNAVAILABLE, "read_deadline",
                "partition %d's leader could not confirm this read within %lld ms: %d of its %d "
                "members (itself included) must answer a heartbeat round and fewer did; nothing "
                "was read, retry", s->partition->id, (long long)(now - s->reads[i].started_ms),
                s->partition->member_count - (int)st.q1 + 1, s->partition->member_count);
        kl_rpc_reply_error(call, &err, NULL);
    }
}

void kl_service_drop_reads(kl_service *s)
{
    for (int i = 0; i < KL_SERVICE_MAX_READS; i++)
        if (s->reads[i].ctx != 0)
            kl_service_read_dropped(s, s->reads[i].ctx);
}
