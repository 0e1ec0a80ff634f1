/* reply: the answers every method shares: NOT_LEADER with the leader's client address (or
 * UNAVAILABLE while this member leads but cannot commit), and a Q1 statement's QueryAnswer. */
#include "daemon/rpc/serve.h"

#include "keyload/v1/query.pb-c.h"

#include <stdlib.h>

/* The leader's client URL, or NULL when unknown (or this member): from the replicated member
 * directory first, since a member that joined after the cluster file was written is only
 * there, then from the cluster file. */
const char *kl_service_leader_url(const kl_service *s, uint64_t *leader_out)
{
    kl_raft_status st;
    kl_repl_status(s->repl, &st);
    if (leader_out)
        *leader_out = st.leader;
    if (st.leader == 0 || st.leader == st.id)
        return NULL;
    const kl_confstore_member *m = kl_repl_member(s->repl, st.leader);
    if (m != NULL && m->client_url[0] != '\0')
        return m->client_url;
    for (int i = 0; i < s->partition->member_count; i++)
        if ((uint64_t)s->partition->members[i].id == st.leader)
            return s->partition->members[i].client_url;
    return NULL;
}

void kl_service_reply_not_leader(kl_service *s, kl_rpc_call *call, const kl_err *err)
{
    kl_raft_status st;
    kl_repl_status(s->repl, &st);
    const char *url = kl_service_leader_url(s, NULL);
    kl_err e = *err;
    if (st.role == KL_RAFT_LEADER && st.leader_ready && st.reachable < st.q2) {
        /* Refused before anything was proposed, so UNAVAILABLE (ARCHITECTURE.md "Sessions and RPC"). */
        kl_fail(&e, KL_UNAVAILABLE, "replicas_unavailable",
                "this member leads partition %d but cannot commit now: replica_count is %u and "
                "only %u members (itself included) answered within the last election timeout; "
                "nothing was written, retry when they are back",
                s->partition->id, st.q2, st.reachable);
        url = NULL;
    } else if (st.role == KL_RAFT_LEADER) {
        /* Elected, but its first entry has not committed: replica_count members must persist
         * it. Refused before anything was proposed, so UNAVAILABLE (ARCHITECTURE.md "Sessions and RPC"). */
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
