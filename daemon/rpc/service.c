/* service: the daemon's RPC method table, and the service's status and lifecycle. One row per
 * method names its request type, its handler, whether the session gate runs first and what
 * it does with partition state; the rpc server calls each row's own entry, so a call finds
 * its row without a lookup. The methods' paths live in their files, each calling only
 * downward: reply.c and lease.c (shared answers and checks) under batch_serve.c, read_serve.c
 * and catalog_serve.c, under query_serve.c, under this file; session_serve.c (the gate) and
 * tailer.c under them all. */
#include "daemon/rpc/serve.h"

#include "daemon/rpc/tailer.h"
#include "keyload/v1/backup.pb-c.h"
#include "keyload/v1/catalog.pb-c.h"
#include "keyload/v1/membership.pb-c.h"
#include "keyload/v1/query.pb-c.h"
#include "keyload/v1/queue.pb-c.h"
#include "keyload/v1/session.pb-c.h"
#include "keyload/v1/transfer.pb-c.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

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
    const char *url = kl_service_leader_url(s, NULL);
    const kl_confstore_member *self = st.leader != 0 && st.leader == st.id ? kl_repl_member(s->repl, st.id) : NULL;
    if (self != NULL && self->client_url[0] != '\0')
        url = self->client_url;
    else if (st.leader != 0 && st.leader == st.id)
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
    kl_service_park_tick(s); /* first: a wait that ended answers empty, not unknown by its deadline */
    kl_service_expire_batches(s);
    kl_service_expire_reads(s);
    kl_service_backup_tick(s);
    kl_service_member_tick(s);
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
    kl_service_backup_stop(s);
    kl_service_member_stop(s);
    kl_service_hello_kx_wipe(s);
}

void kl_service_applied(kl_service *s)
{
    kl_service_catalog_applied(s);
    kl_service_park_applied(s);
}

/* ---- the method table ---- */

/* Every method: X(id, name, request message, handler, gated, access, read kind). A READ row
 * has no handler of its own: it passes the read barrier and the node serves its kind. */
#define SERVICE_METHODS(X)                                                                              \
    X(HELLO, "keyload.v1.Hello", hello, kl_service_hello, false, LOCAL, KL_NODE_QUERY_READ)            \
    X(MEMBER_STATUS, "keyload.v1.MemberStatus", member_status_request, handle_member_status, true,      \
      LOCAL, KL_NODE_QUERY_READ)                                                                        \
    X(CATALOG_TAIL, "keyload.v1.CatalogTail", catalog_tail_request, kl_service_catalog_tail, true,      \
      LOCAL, KL_NODE_QUERY_READ)                                                                        \
    X(LOCATE_QUEUE, "keyload.v1.LocateQueue", locate_queue_request, kl_service_locate_queue, true,      \
      LOCAL, KL_NODE_QUERY_READ)                                                                        \
    X(BATCH, "keyload.v1.Batch", batch_request, kl_service_batch, true, WRITE, KL_NODE_QUERY_READ)      \
    X(QUEUE_STATS, "keyload.v1.QueueStats", queue_stats_request, NULL, true, READ, KL_NODE_QUEUE_STATS) \
    X(SHOW_PRINCIPAL, "keyload.v1.ShowPrincipal", show_principal_request, kl_service_show_principal,   \
      true, LOCAL, KL_NODE_QUERY_READ)                                                                  \
    X(LIST_CATALOG, "keyload.v1.ListCatalog", list_catalog_request, kl_service_list_catalog, true,      \
      LOCAL, KL_NODE_QUERY_READ)                                                                        \
    X(INSPECT_TRANSFER, "keyload.v1.InspectQueueTransfer", inspect_queue_transfer_request, NULL, true,  \
      READ, KL_NODE_INSPECT_TRANSFER)                                                                   \
    X(TRANSFER_RECEIPT, "keyload.v1.InspectQueueTransferReceipt",                                      \
      inspect_queue_transfer_receipt_request, NULL, true, READ, KL_NODE_TRANSFER_RECEIPT)               \
    X(PENDING_TRANSFERS, "keyload.v1.ListPendingQueueTransfers", list_pending_queue_transfers_request,  \
      NULL, true, READ, KL_NODE_PENDING_TRANSFERS)                                                      \
    X(TRANSFER_FAILURE, "keyload.v1.ReadQueueTransferFailure", read_queue_transfer_failure_request,    \
      NULL, true, READ, KL_NODE_TRANSFER_FAILURE)                                                       \
    X(QUERY, "keyload.v1.Query", query_request, kl_service_query, true, QUERY, KL_NODE_QUERY_READ)      \
    X(BACKUP_OPEN, "keyload.v1.BackupOpen", backup_open_request, kl_service_backup_open, true, LOCAL,   \
      KL_NODE_QUERY_READ)                                                                               \
    X(BACKUP_CHUNK, "keyload.v1.BackupChunk", backup_chunk_request, kl_service_backup_chunk, true,      \
      LOCAL, KL_NODE_QUERY_READ)                                                                        \
    X(BACKUP_CLOSE, "keyload.v1.BackupClose", backup_close_request, kl_service_backup_close, true,      \
      LOCAL, KL_NODE_QUERY_READ)                                                                        \
    X(MEMBERS, "keyload.v1.Members", members_request, kl_service_members, true, LOCAL,                   \
      KL_NODE_QUERY_READ)                                                                               \
    X(MEMBER_CHANGE, "keyload.v1.MemberChange", member_change_request, kl_service_member_change, true,  \
      LOCAL, KL_NODE_QUERY_READ)

enum {
#define SERVICE_ID(id, name, req, handler, gated, access, kind) SERVICE_##id,
    SERVICE_METHODS(SERVICE_ID)
#undef SERVICE_ID
    SERVICE_METHOD_COUNT
};

static const kl_service_method table[SERVICE_METHOD_COUNT] = {
#define SERVICE_ROW(id, name, req, handler, gated, access, kind)                                        \
    [SERVICE_##id] = {name, &keyload__v1__##req##__descriptor, handler, gated, KL_SERVICE_##access, kind},
    SERVICE_METHODS(SERVICE_ROW)
#undef SERVICE_ROW
};

/* A call of method m: the session gate unless m is open, then m's path. */
static void dispatch(kl_service *s, kl_rpc_call *call, const kl_service_method *m)
{
    /* invariant I-RPC-2: a READ row is served by its kind, every other row by its handler */
    assert((m->access == KL_SERVICE_READ) == (m->handler == NULL));
    if (m->gated && !kl_service_gate(s, call))
        return; /* refused and answered by the gate */
    if (m->access == KL_SERVICE_READ) {
        kl_service_start_read(s, call, m->read, kl_service_serve_read, NULL);
        return;
    }
    m->handler(s, call);
}

/* Each row's entry, the handler the rpc server calls for its name. */
#define SERVICE_ENTRY(id, name, req, handler, gated, access, kind)                                      \
    static void entry_##id(void *owner, kl_rpc_call *call) { dispatch(owner, call, &table[SERVICE_##id]); }
SERVICE_METHODS(SERVICE_ENTRY)
#undef SERVICE_ENTRY

static const kl_rpc_method methods[SERVICE_METHOD_COUNT] = {
#define SERVICE_RPC(id, name, req, handler, gated, access, kind) [SERVICE_##id] = {name, entry_##id},
    SERVICE_METHODS(SERVICE_RPC)
#undef SERVICE_RPC
};

const kl_service_method *kl_service_method_table(size_t *count)
{
    *count = SERVICE_METHOD_COUNT;
    return table;
}

const kl_rpc_method *kl_service_methods(size_t *count)
{
    *count = SERVICE_METHOD_COUNT;
    return methods;
}

