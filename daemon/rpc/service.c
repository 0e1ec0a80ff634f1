#include "daemon/rpc/service.h"

#include "common/failpoint.h"
#include "keyload/v1/catalog.pb-c.h"

#include <stdlib.h>
#include <string.h>

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
    if (st.role == KL_RAFT_LEADER) {
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

typedef struct batch_call {
    kl_service *s;
    kl_rpc_call *call;
} batch_call;

static void batch_answered(void *cookie, kl_code code, const kl_err *err, const uint8_t *receipt,
                           size_t len)
{
    batch_call *bc = cookie;
    kl_rpc_call *call = bc->call;
    kl_service *s = bc->s;
    free(bc);
    kl_err fe;
    kl_err_clear(&fe);
    if (KL_FAILPOINT("daemon.before_reply", &fe) != KL_OK) {
        kl_rpc_reply_error(call, &fe, NULL);
        return;
    }
    if (code == KL_OK) {
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
    size_t len;
    const uint8_t *p = kl_rpc_call_payload(call, &len);
    batch_call *bc = malloc(sizeof *bc);
    if (bc == NULL) {
        kl_err e;
        kl_fail(&e, KL_UNAVAILABLE, "memory", "out of memory; retry");
        kl_rpc_reply_error(call, &e, NULL);
        return;
    }
    bc->s = s;
    bc->call = call;
    kl_node_submit_batch(s->node, KL_LOCAL_PRINCIPAL, p, len, batch_answered, bc);
}

static void serve_stats(kl_service *s, kl_rpc_call *call)
{
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

static void handle_queue_stats(void *owner, kl_rpc_call *call)
{
    kl_service *s = owner;
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
    /* Registered first: the barrier may confirm inside kl_repl_read_index (one member). */
    s->reads[slot].ctx = ctx;
    s->reads[slot].call = call;
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
    s->reads[i].ctx = 0;
    serve_stats(s, call);
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

static const kl_rpc_method methods[] = {
    {"keyload.v1.MemberStatus", handle_member_status},
    {"keyload.v1.CatalogTail", kl_service_catalog_tail},
    {"keyload.v1.LocateQueue", kl_service_locate_queue},
    {"keyload.v1.Batch", handle_batch},
    {"keyload.v1.QueueStats", handle_queue_stats},
};

const kl_rpc_method *kl_service_methods(size_t *count)
{
    *count = sizeof methods / sizeof methods[0];
    return methods;
}
