#include "daemon/rpc/service.h"

#include "common/failpoint.h"
#include "daemon/engine/engine.h"
#include "daemon/park.h"
#include "daemon/rpc/tailer.h"
#include "keyload/v1/catalog.pb-c.h"
#include "keyload/v1/query.pb-c.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The leader's client URL, or NULL when unknown (or this member). */
static const char *leader_url(const kl_service *s, uint64_t *leader_out)
{
    kl_raft_status st;
    kl_repl_status(s->repl, &st);
    if (leader_out)
        *leader_out = st.leader;
    if (st.leader == 0 || st.leader == st.id)
        return NULL;
    for (int i = 0; i < s->partition->member_count; i++)
        if ((uint64_t)s->partition->members[i].id == st.leader)
            return s->partition->members[i].client_url;
    return NULL;
}

void kl_service_reply_not_leader(kl_service *s, kl_rpc_call *call, const kl_err *err)
{
    kl_raft_status st;
    kl_repl_status(s->repl, &st);
    const char *url = leader_url(s, NULL);
    kl_err e = *err;
    if (st.role == KL_RAFT_LEADER && st.leader_ready && st.reachable < st.q2) {
        /* Refused before anything was proposed, so UNAVAILABLE (DESIGN.md §9). */
        kl_fail(&e, KL_UNAVAILABLE, "replicas_unavailable",
                "this member leads partition %d but cannot commit now: replica_count is %u and "
                "only %u members (itself included) answered within the last election timeout; "
                "nothing was written, retry when they are back",
                s->partition->id, st.q2, st.reachable);
        url = NULL;
    } else if (st.role == KL_RAFT_LEADER) {
        /* Elected, but its first entry has not committed: replica_count members must persist
         * it. Refused before anything was proposed, so UNAVAILABLE (DESIGN.md §9). */
        kl_fail(&e, KL_UNAVAILABLE, "leader_not_ready",
                "this member leads partition %d but cannot commit yet: %u members must persist "
                "its first entry (some are down or behind); retry shortly",
                s->partition->id, st.q2);
        url = NULL;
    } else if (url == NULL) {
        kl_fail(&e, KL_NOT_LEADER, "leader_unknown",
                "this member does not lead partition %d and knows no leader yet; retry shortly",
                s->partition->id);
    }
    kl_rpc_reply_error(call, &e, url);
}

/* A batch handed to the node. Linked into s->batches until the node answers; `call`
 * becomes NULL when the deadline answered it first. */
struct kl_batch_call {
    kl_service *s;
    kl_rpc_call *call;
    int64_t answer_by_ms;          /* 0 = no deadline */
    const char *query_alias;       /* a Q1 statement's (static): answer a QueryAnswer */
    struct kl_batch_call *prev, *next;
};
typedef struct kl_batch_call batch_call;

#define DEADLINE_MARGIN_MS 100     /* answer this long before the caller's deadline */
/* A parked Receive's wait ends this long before its answer-by time: its idle answer comes
 * at the next tick (TIMER_MS) at the latest, before the deadline would call it unknown. */
#define PARK_SLACK_MS 60
_Static_assert(KL_PARK_MAX + KL_SERVICE_MAX_READS < 128,
               "parked receives and waiting reads must leave client contexts (main.c: 128) free");

static int64_t wall_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void batch_unlink(kl_service *s, batch_call *bc)
{
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
    int64_t now = wall_now_ms();
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

static void batch_answered(void *cookie, kl_code code, const kl_err *err, const uint8_t *receipt,
                           size_t len)
{
    batch_call *bc = cookie;
    kl_rpc_call *call = bc->call;
    kl_service *s = bc->s;
    const char *query_alias = bc->query_alias;
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

static void handle_batch(void *owner, kl_rpc_call *call)
{
    kl_service *s = owner;
    if (!kl_service_check_lease(s, call))
        return;
    size_t len;
    const uint8_t *p = kl_rpc_call_payload(call, &len);
    kl_service_submit_batch(s, call, p, len, NULL);
}

void kl_service_reply_query(kl_rpc_call *call, const char *alias, int kind, const uint8_t *answer,
                            size_t len)
{
    Keyload__V1__QueryAnswer a = KEYLOAD__V1__QUERY_ANSWER__INIT;
    a.alias = (char *)alias;
    a.kind = (Keyload__V1__QueryResultKind)kind;
    a.answer.data = (uint8_t *)answer;
    a.answer.len = len;
    size_t n = keyload__v1__query_answer__get_packed_size(&a);
    uint8_t *buf = malloc(n ? n : 1);
    if (buf == NULL) {
        kl_err e;
        kl_fail(&e, KL_INTERNAL, "memory", "out of memory while answering the query");
        kl_rpc_reply_error(call, &e, NULL);
        return;
    }
    keyload__v1__query_answer__pack(&a, buf);
    kl_rpc_reply(call, buf, n);
    free(buf);
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
    int64_t deadline = kl_rpc_call_deadline_ms(call);
    bc->answer_by_ms = 0;
    if (deadline > 0) {
        int64_t now = wall_now_ms();
        int64_t margin = (deadline - now) / 4 < DEADLINE_MARGIN_MS ? (deadline - now) / 4 : DEADLINE_MARGIN_MS;
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
        wait_cap = bc->answer_by_ms - wall_now_ms() - PARK_SLACK_MS;
    kl_node_submit_batch_wait(s->node, kl_service_principal(call), p, len, wait_cap, batch_answered, bc);
}

/* Parked Receives due now are evaluated again, each under the catalog lease: one that ran
 * out answers them all UNAVAILABLE (nothing was written; retrying helps once it holds). */
static void park_tick(kl_service *s)
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

static void on_park_timer(uv_timer_t *t) { park_tick(t->data); }

/* After an apply: a Receive it woke is served on the next loop turn, outside the driver's
 * apply (which must not propose from inside). */
void kl_service_park_applied(kl_service *s)
{
    if (s->park_timer_started && kl_node_park_due(s->node))
        uv_timer_start(&s->park_timer, on_park_timer, 0, 0);
}

/* Fresh reads, served once the barrier confirmed this member leads and has applied. */
enum read_kind {
    READ_QUEUE_STATS,
    READ_INSPECT_TRANSFER,
    READ_TRANSFER_RECEIPT,
    READ_PENDING_TRANSFERS,
    READ_TRANSFER_FAILURE,
    READ_QUERY = KL_SERVICE_READ_QUERY,  /* a Q1 read statement: query_serve.c serves it */
};

static void serve_read(kl_service *s, kl_rpc_call *call, int kind)
{
    size_t len, alen;
    const uint8_t *p = kl_rpc_call_payload(call, &len);
    uint8_t *answer;
    kl_err err;
    kl_err_clear(&err);
    const char *who = kl_service_principal(call);
    kl_code rc;
    if (kind == READ_QUERY) {
        kl_service_serve_query_read(s, call);
        return;
    }
    switch (kind) {
    case READ_INSPECT_TRANSFER:
        rc = kl_node_transfer_read(s->node, KL_NODE_INSPECT_TRANSFER, who, p, len, &answer, &alen, &err);
        break;
    case READ_TRANSFER_RECEIPT:
        rc = kl_node_transfer_read(s->node, KL_NODE_TRANSFER_RECEIPT, who, p, len, &answer, &alen, &err);
        break;
    case READ_PENDING_TRANSFERS:
        rc = kl_node_transfer_read(s->node, KL_NODE_PENDING_TRANSFERS, who, p, len, &answer, &alen, &err);
        break;
    case READ_TRANSFER_FAILURE:
        rc = kl_node_transfer_read(s->node, KL_NODE_TRANSFER_FAILURE, who, p, len, &answer, &alen, &err);
        break;
    default:
        rc = kl_node_queue_stats(s->node, who, p, len, &answer, &alen, &err);
    }
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
        int64_t left = deadline - wall_now_ms();
        int64_t margin = left / 4 < DEADLINE_MARGIN_MS ? left / 4 : DEADLINE_MARGIN_MS;
        left -= margin > 0 ? margin : 0;
        if (left < budget)
            budget = left > 0 ? left : 0;
    }
    return now + budget;
}

void kl_service_start_read(kl_service *s, kl_rpc_call *call, int kind)
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
    int64_t now = mono_now_ms();
    /* Registered first: the barrier may confirm inside kl_repl_read_index (one member). */
    s->reads[slot].ctx = ctx;
    s->reads[slot].call = call;
    s->reads[slot].kind = kind;
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

static void handle_queue_stats(void *owner, kl_rpc_call *call) { kl_service_start_read(owner, call, READ_QUEUE_STATS); }
static void handle_inspect_transfer(void *owner, kl_rpc_call *call)
{
    kl_service_start_read(owner, call, READ_INSPECT_TRANSFER);
}
static void handle_transfer_receipt(void *owner, kl_rpc_call *call)
{
    kl_service_start_read(owner, call, READ_TRANSFER_RECEIPT);
}
static void handle_pending_transfers(void *owner, kl_rpc_call *call)
{
    kl_service_start_read(owner, call, READ_PENDING_TRANSFERS);
}

static void handle_transfer_failure(void *owner, kl_rpc_call *call)
{
    kl_service_start_read(owner, call, READ_TRANSFER_FAILURE);
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
    s->reads[i].ctx = 0;
    if (!kl_service_lease_holds(s, call))
        return;
    serve_read(s, call, s->reads[i].kind);
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
    int64_t now = mono_now_ms();
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

/* MemberStatus: any member answers at once from what it knows; no barrier (a status read
 * may be slightly stale, and says so through term and indexes). */
static void handle_member_status(void *owner, kl_rpc_call *call)
{
    kl_service *s = owner;
    kl_raft_status st;
    kl_repl_status(s->repl, &st);
    Keyload__V1__MemberStatusAnswer a = KEYLOAD__V1__MEMBER_STATUS_ANSWER__INIT;
    a.partition = s->partition->id;
    a.member = st.id;
    a.role = (char *)kl_raft_role_name(st.role);
    a.leader = st.leader;
    a.term = st.term;
    a.commit_index = st.commit;
    a.applied_index = kl_node_applied_index(s->node);
    a.last_index = st.last_index;
    uint64_t next_index, next_term;
    bool serving;
    kl_repl_next(s->repl, &next_index, &next_term, &serving);
    a.serving = serving;
    kl_node_catalog_status(s->node, &a.catalog_version, &a.catalog_changes_applied);
    a.sealed_requests = s->costs.sealed_requests;
    a.session_ns = s->costs.session_ns;
    a.hellos = s->costs.hellos;
    a.hello_ns = s->costs.hello_ns;
    kl_node_authz_costs(s->node, &a.authz_requests, &a.authz_ns);
    a.not_leader_batches = s->costs.not_leader_batches;
    kl_node_subject_cache_costs(s->node, &a.subject_cache_hits, &a.subject_cache_misses);
    Keyload__V1__MemberSessionStatus ss = KEYLOAD__V1__MEMBER_SESSION_STATUS__INIT;
    kl_service_session_status(s, &ss);
    a.sessions = &ss;
    if (s->tailer != NULL && serving)
        a.catalog_lease_valid = kl_tailer_lease_valid(s->tailer, &a.catalog_lease_age_ms);
    const char *url = leader_url(s, NULL);
    if (st.leader != 0 && st.leader == st.id)
        for (int i = 0; i < s->partition->member_count; i++)
            if ((uint64_t)s->partition->members[i].id == st.id)
                url = s->partition->members[i].client_url;
    a.leader_address = (char *)(url ? url : "");
    size_t n = keyload__v1__member_status_answer__get_packed_size(&a);
    uint8_t buf[512];
    if (n > sizeof buf) {
        kl_err e;
        kl_fail(&e, KL_INTERNAL, "status", "status answer too large");
        kl_rpc_reply_error(call, &e, NULL);
        return;
    }
    keyload__v1__member_status_answer__pack(&a, buf);
    kl_rpc_reply(call, buf, n);
}

/* ---- lifecycle ---- */

#define TIMER_MS 25

static void on_timer(uv_timer_t *t)
{
    kl_service *s = t->data;
    kl_service_catalog_tick(s);
    park_tick(s); /* first: a wait that ended answers empty, not unknown by its deadline */
    kl_service_expire_batches(s);
    kl_service_expire_reads(s);
}

void kl_service_start(kl_service *s, uv_loop_t *loop)
{
    uv_timer_init(loop, &s->timer);
    s->timer.data = s;
    uv_timer_start(&s->timer, on_timer, TIMER_MS, TIMER_MS);
    s->timer_started = true;
    uv_timer_init(loop, &s->park_timer);
    s->park_timer.data = s;
    s->park_timer_started = true;
}

void kl_service_stop(kl_service *s)
{
    if (s->timer_started) {
        uv_timer_stop(&s->timer);
        uv_close((uv_handle_t *)&s->timer, NULL);
        s->timer_started = false;
    }
    if (s->park_timer_started) {
        uv_timer_stop(&s->park_timer);
        uv_close((uv_handle_t *)&s->park_timer, NULL);
        s->park_timer_started = false;
    }
    kl_service_catalog_stop(s);
    kl_service_hello_kx_wipe(s);
}

/* The handlers behind the session gate. */
static const kl_rpc_method gated[] = {
    {"keyload.v1.MemberStatus", handle_member_status},
    {"keyload.v1.CatalogTail", kl_service_catalog_tail},
    {"keyload.v1.LocateQueue", kl_service_locate_queue},
    {"keyload.v1.Batch", handle_batch},
    {"keyload.v1.QueueStats", handle_queue_stats},
    {"keyload.v1.ShowPrincipal", kl_service_show_principal},
    {"keyload.v1.InspectQueueTransfer", handle_inspect_transfer},
    {"keyload.v1.InspectQueueTransferReceipt", handle_transfer_receipt},
    {"keyload.v1.ListPendingQueueTransfers", handle_pending_transfers},
    {"keyload.v1.ReadQueueTransferFailure", handle_transfer_failure},
    {"keyload.v1.Query", kl_service_query},
};

/* Every gated method's entry: the gate, then its handler. */
static void gate_then_handle(void *owner, kl_rpc_call *call)
{
    const char *name = kl_rpc_call_method(call);
    for (size_t i = 0; i < sizeof gated / sizeof gated[0]; i++) {
        if (strcmp(gated[i].name, name) != 0)
            continue;
        if (kl_service_gate(owner, call))
            gated[i].handler(owner, call);
        return;
    }
    kl_err e; /* unreachable: the server only dispatches names of the table below */
    kl_fail(&e, KL_INTERNAL, "method", "no handler for a dispatched method");
    kl_rpc_reply_error(call, &e, NULL);
}

static const kl_rpc_method methods[] = {
    {"keyload.v1.Hello", kl_service_hello},
    {"keyload.v1.MemberStatus", gate_then_handle},
    {"keyload.v1.CatalogTail", gate_then_handle},
    {"keyload.v1.LocateQueue", gate_then_handle},
    {"keyload.v1.Batch", gate_then_handle},
    {"keyload.v1.QueueStats", gate_then_handle},
    {"keyload.v1.ShowPrincipal", gate_then_handle},
    {"keyload.v1.InspectQueueTransfer", gate_then_handle},
    {"keyload.v1.InspectQueueTransferReceipt", gate_then_handle},
    {"keyload.v1.ListPendingQueueTransfers", gate_then_handle},
    {"keyload.v1.ReadQueueTransferFailure", gate_then_handle},
    {"keyload.v1.Query", gate_then_handle},
};

const kl_rpc_method *kl_service_methods(size_t *count)
{
    *count = sizeof methods / sizeof methods[0];
    return methods;
}
