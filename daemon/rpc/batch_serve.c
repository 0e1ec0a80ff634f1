/* batch_serve: keyload.v1.Batch and the batches of Q1 statements: each is handed to the node
 * with a deadline, answered when the node answers (through the catalog barrier on partition
 * 0) or UNKNOWN_WRITE_OUTCOME when its deadline comes first; and the parked Receives the
 * node holds, evaluated again on the timer or after an apply that woke them. */
#include "daemon/rpc/serve.h"

#include "common/failpoint.h"
#include "common/log.h"
#include "daemon/engine/engine.h"
#include "daemon/park.h"
#include "daemon/rpc/tailer.h"
#include "keyload/v1/query.pb-c.h"
#include "keyload/v1/queue.pb-c.h"

#include <assert.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A batch handed to the node. Linked into s->batches until the node answers; `call`
 * becomes NULL when the deadline answered it first. */
struct kl_batch_call {
    kl_service *s;
    kl_rpc_call *call;
    int64_t answer_by_ms;          /* 0 = no deadline */
    uint64_t arrived_ns;           /* kl_rpc_call_arrived_ns, for the batch trace */
    const char *query_alias;       /* a Q1 statement's (static): answer a QueryAnswer */
    struct kl_batch_call *prev, *next;
};
typedef struct kl_batch_call batch_call;

/* A parked Receive's wait ends this long before its answer-by time: its idle answer comes
 * at the next tick (TIMER_MS) at the latest, before the deadline would call it unknown. */
#define PARK_SLACK_MS 60
_Static_assert(KL_PARK_MAX + KL_SERVICE_MAX_READS < 128,
               "parked receives and waiting reads must leave client contexts (main.c: 128) free");

static void batch_unlink(kl_service *s, batch_call *bc)
{
    /* invariant I-RPC-1: a batch the node has not answered is linked in s->batches */
    assert(bc->prev != NULL ? bc->prev->next == bc : s->batches == bc);
    if (bc->prev)
        bc->prev->next = bc->next;
    else
        s->batches = bc->next;
    if (bc->next)
        bc->next->prev = bc->prev;
}

/* A batch still waiting for its commit when its deadline comes is answered
 * UNKNOWN_WRITE_OUTCOME: it was proposed and may still commit. Cost: one pass over the
 * batches in flight (at most the node's max_pending_batches). */
void kl_service_expire_batches(kl_service *s)
{
    int64_t now = kl_service_wall_ms();
    for (batch_call *bc = s->batches; bc != NULL; bc = bc->next) {
        if (bc->call == NULL || bc->answer_by_ms == 0 || now < bc->answer_by_ms)
            continue;
        kl_err e;
        kl_fail(&e, KL_UNKNOWN_WRITE_OUTCOME, "deadline",
                "the batch was proposed but has not committed by its deadline (some members may "
                "be down or slow); it may still commit: retry with the same command id to learn "
                "its outcome");
        kl_rpc_reply_error(bc->call, &e, NULL);
        bc->call = NULL;
    }
}

/* With the replication trace on (trace_every > 0), a committed batch whose index is sampled
 * logs when it arrived and when it was answered (monotonic microseconds), so
 * tests/bench/repl_trace.sh can put the server's own legs beside the replication's: arrival
 * to the leader's proposal, the commit to the answer (the answer is given inside the apply).
 * Decodes the receipt only then. */
static void batch_trace(const kl_service *s, const batch_call *bc, const uint8_t *receipt, size_t len)
{
    Keyload__V1__BatchReceipt *r = keyload__v1__batch_receipt__unpack(NULL, len, receipt);
    if (r == NULL)
        return;
    if (r->index != 0 && r->index % s->trace_every == 0) {
        /* The command id's first bytes: a client's own trace names its batch by them. */
        char cmd[17];
        sodium_bin2hex(cmd, sizeof cmd, r->command_id.data, r->command_id.len < 8 ? r->command_id.len : 8);
        KL_INFO("batch trace", "member=%llu index=%llu cmd=%s arrived=%llu answered=%llu",
                (unsigned long long)s->member_id, (unsigned long long)r->index, cmd,
                (unsigned long long)(bc->arrived_ns / 1000u), (unsigned long long)(uv_hrtime() / 1000u));
    }
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
}

static void batch_answered(void *cookie, kl_code code, const kl_err *err, const uint8_t *receipt,
                           size_t len)
{
    batch_call *bc = cookie;
    kl_rpc_call *call = bc->call;
    kl_service *s = bc->s;
    const char *query_alias = bc->query_alias;
    if (s->trace_every > 0 && code == KL_OK && receipt != NULL && call != NULL)
        batch_trace(s, bc, receipt, len);
    batch_unlink(s, bc);
    free(bc);
    if (call == NULL)
        return; /* its deadline answered it already */
    kl_err fe;
    kl_err_clear(&fe);
    if (KL_FAILPOINT("daemon.before_reply", &fe) != KL_OK) {
        kl_rpc_reply_error(call, &fe, NULL);
        return;
    }
    if (code == KL_OK && !kl_service_lease_holds_for_receipt(s, call, receipt, len))
        return;
    if (code == KL_OK && query_alias != NULL)
        kl_service_reply_query(call, query_alias, KEYLOAD__V1__QUERY_RESULT_KIND__QUERY_RESULT_BATCH_RECEIPT,
                               receipt, len);
    else if (code == KL_OK) {
        if (!kl_service_catalog_hold(s, call, receipt, len))
            kl_rpc_reply(call, receipt, len);
    }
    else if (code == KL_NOT_LEADER)
        kl_service_reply_not_leader(s, call, err);
    else
        kl_rpc_reply_error(call, err, NULL);
}

void kl_service_batch(void *owner, kl_rpc_call *call)
{
    kl_service *s = owner;
    if (!kl_service_check_lease(s, call))
        return;
    size_t len;
    const uint8_t *p = kl_rpc_call_payload(call, &len);
    kl_service_submit_batch(s, call, p, len, NULL);
}

/* Whether this member serves the partition now; if not, the call is answered NOT_LEADER
 * (or UNAVAILABLE while it leads but cannot commit) before its payload is decoded,
 * validated or anything is read: the node would refuse it anyway, after all that work. */
static bool serving_or_refuse(kl_service *s, kl_rpc_call *call)
{
    uint64_t index, term;
    bool serving;
    kl_repl_next(s->repl, &index, &term, &serving);
    if (serving)
        return true;
    s->costs.not_leader_batches++;
    kl_err e;
    kl_fail(&e, KL_NOT_LEADER, "not_leader",
            "this member does not lead partition %d now; send the batch to the leader",
            s->partition->id);
    kl_service_reply_not_leader(s, call, &e);
    return false;
}

void kl_service_submit_batch(kl_service *s, kl_rpc_call *call, const uint8_t *p, size_t len,
                             const char *query_alias)
{
    if (!serving_or_refuse(s, call))
        return;
    batch_call *bc = malloc(sizeof *bc);
    if (bc == NULL) {
        kl_err e;
        kl_fail(&e, KL_UNAVAILABLE, "memory", "out of memory; retry");
        kl_rpc_reply_error(call, &e, NULL);
        return;
    }
    bc->s = s;
    bc->call = call;
    bc->query_alias = query_alias;
    bc->arrived_ns = kl_rpc_call_arrived_ns(call);
    int64_t deadline = kl_rpc_call_deadline_ms(call);
    bc->answer_by_ms = 0;
    if (deadline > 0) {
        int64_t now = kl_service_wall_ms();
        int64_t margin = (deadline - now) / 4 < KL_SERVICE_DEADLINE_MARGIN_MS ? (deadline - now) / 4 : KL_SERVICE_DEADLINE_MARGIN_MS;
        bc->answer_by_ms = deadline - (margin > 0 ? margin : 0);
    }
    bc->prev = NULL;
    bc->next = s->batches;
    if (s->batches)
        s->batches->prev = bc;
    s->batches = bc;
    /* The outcome namespace is per principal: a session's batches never meet the local
     * principal's command ids, nor another principal's. */
    int64_t wait_cap = KL_RECEIVE_WAIT_MS_MAX;
    if (bc->answer_by_ms > 0)
        wait_cap = bc->answer_by_ms - kl_service_wall_ms() - PARK_SLACK_MS;
    kl_node_submit_batch_wait(s->node, kl_service_principal(call), p, len, wait_cap, batch_answered, bc);
}

/* Parked Receives due now are evaluated again, each under the catalog lease: one that ran
 * out answers them all UNAVAILABLE (nothing was written; retrying helps once it holds). */
void kl_service_park_tick(kl_service *s)
{
    int64_t age;
    if (kl_node_parked(s->node) == 0)
        return;
    if (s->tailer != NULL && !kl_tailer_lease_valid(s->tailer, &age)) {
        kl_err e;
        kl_fail(&e, KL_UNAVAILABLE, "catalog_lease",
                "partition %d's catalog lease ran out while the receive waited for messages "
                "(partition 0 is unreachable or behind); nothing was written, retry",
                s->partition->id);
        kl_node_park_drop(s->node, &e);
        return;
    }
    kl_node_park_tick(s->node);
}

static void on_park_timer(uv_timer_t *t) { kl_service_park_tick(t->data); }

/* After an apply: a Receive it woke is served on the next loop turn, outside the driver's
 * apply (which must not propose from inside). */
void kl_service_park_applied(kl_service *s)
{
    if (s->park_timer_started && kl_node_park_due(s->node))
        uv_timer_start(&s->park_timer, on_park_timer, 0, 0);
}

