/* member_serve: the Members and MemberChange methods (membership.proto; docs/MEMBERSHIP.md;
 * ARCHITECTURE.md "Replication", "Membership in the driver").
 *
 * Members answers from the driver's configuration in effect and member directory.
 * MemberChange runs on the leader as a bounded state machine driven by the service timer:
 * the change's TARGET (a non-joint configuration) is fixed when it starts; every tick
 * proposes the next step towards it through kl_repl_propose_conf (a new member first as a
 * learner; the core then refuses the joint step with UNAVAILABLE "members" until it caught
 * up, and the leave step with UNAVAILABLE "conf" until the joint entry committed), until the
 * configuration in effect is the target and committed. One change at a time; it is
 * abandoned when this member stops leading (the entries already in the log stay: a new
 * leader finishes or truncates them, and a retried request starts again from there) or after
 * KL_MEMBER_CHANGE_MS. */
#include "daemon/rpc/serve.h"

#include "common/limits.h"
#include "common/log.h"
#include "keyload/v1/membership.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct kl_member_change {
    bool active;
    kl_raft_conf target;
    char op[8];               /* the request's op, new member and old member: a retry joins */
    uint64_t new_id;          /* add/replace: the member joining (0 = none) */
    uint64_t old_id;
    Keyload__V1__MemberInfo *info; /* its directory entry (owned, unpacked copy) */
    uint64_t deadline_ms;
    const char *step;
} kl_member_change;

static uint64_t mono_ms(void) { return uv_hrtime() / 1000000u; }

static bool has(const uint64_t *ids, uint32_t n, uint64_t id)
{
    for (uint32_t i = 0; i < n; i++)
        if (ids[i] == id)
            return true;
    return false;
}

static void reply_packed(kl_rpc_call *call, const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);
    if (buf == NULL) {
        kl_err e;
        kl_fail(&e, KL_UNAVAILABLE, "memory", "out of memory for the answer");
        kl_rpc_reply_error(call, &e, NULL);
        return;
    }
    protobuf_c_message_pack(m, buf);
    kl_rpc_reply(call, buf, n);
    free(buf);
}

/* ---- Members ---- */

/* This member's cluster file entry for member id of its partition, or NULL. */
static const kl_member *file_member(const kl_service *s, uint64_t id)
{
    for (int i = 0; s->partition != NULL && i < s->partition->member_count; i++)
        if ((uint64_t)s->partition->members[i].id == id)
            return &s->partition->members[i];
    return NULL;
}

/* The directory entries of every id of c this member knows. */
static size_t fill_directory(kl_service *s, const kl_raft_conf *c, Keyload__V1__MemberInfo *infos,
                             Keyload__V1__MemberInfo **ptrs)
{
    uint64_t ids[3 * KL_RAFT_MAX_MEMBERS];
    size_t n = 0, k = 0;
    for (uint32_t i = 0; i < c->n_members; i++)
        ids[n++] = c->members[i];
    for (uint32_t i = 0; i < c->n_learners; i++)
        ids[n++] = c->learners[i];
    for (uint32_t i = 0; i < c->n_old; i++)
        if (!has(c->members, c->n_members, c->old_members[i]) && !has(c->learners, c->n_learners, c->old_members[i]))
            ids[n++] = c->old_members[i];
    for (size_t i = 0; i < n; i++) {
        const kl_confstore_member *m = kl_repl_member(s->repl, ids[i]);
        const kl_member *f = file_member(s, ids[i]);
        keyload__v1__member_info__init(&infos[k]);
        infos[k].id = ids[i];
        if (m != NULL) {
            infos[k].peer_url = (char *)m->peer_url;
            infos[k].client_url = (char *)m->client_url;
            if (m->has_key) {
                infos[k].public_key.data = (uint8_t *)m->public_key;
                infos[k].public_key.len = sizeof m->public_key;
            }
        }
        /* A seed member's entry holds only what the replication seed carried (its peer
         * address): without its client address and key a client learning this directory
         * could not route to it, and would drop it from the members it tries. */
        if (f != NULL && (infos[k].client_url == NULL || infos[k].client_url[0] == '\0'))
            infos[k].client_url = (char *)f->client_url;
        if (f != NULL && infos[k].public_key.len == 0 && f->has_public_key) {
            infos[k].public_key.data = (uint8_t *)f->public_key;
            infos[k].public_key.len = sizeof f->public_key;
        }
        if (f != NULL && (infos[k].peer_url == NULL || infos[k].peer_url[0] == '\0'))
            infos[k].peer_url = (char *)f->peer_url;
        ptrs[k] = &infos[k];
        k++;
    }
    return k;
}

void kl_service_members(void *owner, kl_rpc_call *call)
{
    kl_service *s = owner;
    kl_raft_conf c;
    uint64_t index;
    bool committed;
    kl_repl_conf(s->repl, &c, &index, &committed);
    kl_raft_status st;
    kl_repl_status(s->repl, &st);
    Keyload__V1__MembersAnswer a = KEYLOAD__V1__MEMBERS_ANSWER__INIT;
    a.member = st.id;
    a.leader = st.leader;
    a.voters = c.members;
    a.n_voters = c.n_members;
    a.replica_count = c.replica_count;
    a.learners = c.learners;
    a.n_learners = c.n_learners;
    a.joint = c.n_old > 0;
    a.old_voters = c.old_members;
    a.n_old_voters = c.n_old;
    a.old_replica_count = c.old_replica_count;
    a.conf_index = index;
    a.committed = committed;
    Keyload__V1__MemberInfo infos[3 * KL_RAFT_MAX_MEMBERS], *ptrs[3 * KL_RAFT_MAX_MEMBERS];
    a.n_directory = fill_directory(s, &c, infos, ptrs);
    a.directory = ptrs;
    a.change = (char *)(s->mchange != NULL && s->mchange->active ? s->mchange->step : "");
    reply_packed(call, &a.base);
}

/* ---- MemberChange ---- */

static kl_code require_admin(kl_service *s, kl_rpc_call *call, kl_err *err)
{
    const char *who = kl_service_principal(call);
    if (strcmp(who, KL_LOCAL_PRINCIPAL) == 0)
        return s->cluster->insecure_local_admin
                   ? KL_OK
                   : kl_fail(err, KL_UNAUTHENTICATED, "session_required",
                             "a membership change needs a session of a cluster administrator");
    const Keyload__V1__CatalogPrincipal *rec;
    bool found;
    kl_code rc = kl_node_find_principal_cached(s->node, who, &rec, &found, err);
    if (rc == KL_OK && (!found || !rec->cluster_admin))
        rc = kl_fail(err, KL_PERMISSION_DENIED, "role:cluster_admin",
                     "only a cluster administrator may change a partition's members");
    return rc;
}

static kl_code check_new_member(const Keyload__V1__MemberInfo *m, const kl_raft_conf *cur, kl_err *err)
{
    if (m == NULL || m->id == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "member.id", "the new member needs a nonzero id");
    if (has(cur->members, cur->n_members, m->id) || has(cur->old_members, cur->n_old, m->id))
        return kl_fail(err, KL_FAILED_PRECONDITION, "member.id", "member %llu is a voter already",
                       (unsigned long long)m->id);
    if (m->peer_url[0] == '\0' || strlen(m->peer_url) > KL_MEMBER_URL_MAX ||
        strlen(m->client_url) > KL_MEMBER_URL_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "member.peer_url",
                       "the new member needs a peer URL (and URLs of at most %d bytes)", KL_MEMBER_URL_MAX);
    if (m->public_key.len != 0 && m->public_key.len != 32)
        return kl_fail(err, KL_INVALID_ARGUMENT, "member.public_key",
                       "a member public key is 32 bytes (Ed25519), got %zu", m->public_key.len);
    return KL_OK;
}

/* While a joint configuration is in effect, the one request taken is the change that
 * entered it, retried on a leader that did not start it or stopped running it (a new
 * leader, or one that lost its position meanwhile): applied to the old half it gives the new
 * half, which becomes the target, so the next step is the leave step. Nothing else would
 * ever propose that step. */
static kl_code joint_target(const Keyload__V1__MemberChangeRequest *q, const kl_raft_conf *cur, bool add,
                            bool rem, bool rep, kl_raft_conf *t, kl_err *err)
{
    kl_raft_conf want;
    memset(&want, 0, sizeof want);
    for (uint32_t i = 0; i < cur->n_old; i++)
        if (!((rem || rep) && cur->old_members[i] == q->old_member_id))
            want.members[want.n_members++] = cur->old_members[i];
    if ((add || rep) && q->member != NULL && q->member->id != 0 &&
        !has(want.members, want.n_members, q->member->id) && want.n_members < KL_RAFT_MAX_MEMBERS)
        want.members[want.n_members++] = q->member->id;
    want.replica_count = q->replica_count ? q->replica_count : cur->old_replica_count;
    bool same = want.n_members == cur->n_members && want.replica_count == cur->replica_count;
    for (uint32_t i = 0; same && i < want.n_members; i++)
        same = has(cur->members, cur->n_members, want.members[i]);
    if (!same)
        return kl_fail(err, KL_UNAVAILABLE, "member_change_in_progress",
                       "a joint configuration is in effect: the change in flight finishes first");
    memcpy(t->members, cur->members, sizeof t->members);
    t->n_members = cur->n_members;
    t->replica_count = cur->replica_count;
    return KL_OK;
}

/* The target configuration of a request against the configuration in effect. */
static kl_code target_of(const Keyload__V1__MemberChangeRequest *q, const kl_raft_conf *cur,
                         kl_raft_conf *t, kl_err *err)
{
    memset(t, 0, sizeof *t);
    bool add = !strcmp(q->op, "add"), rem = !strcmp(q->op, "remove"), rep = !strcmp(q->op, "replace");
    if (!add && !rem && !rep)
        return kl_fail(err, KL_INVALID_ARGUMENT, "op", "op must be add, remove or replace");
    if (cur->n_old > 0)
        return joint_target(q, cur, add, rem, rep, t, err);
    kl_code rc;
    if ((add || rep) && (rc = check_new_member(q->member, cur, err)) != KL_OK)
        return rc;
    if ((rem || rep) && !has(cur->members, cur->n_members, q->old_member_id))
        return kl_fail(err, KL_INVALID_ARGUMENT, "old_member_id", "member %llu is not a voter",
                       (unsigned long long)q->old_member_id);
    for (uint32_t i = 0; i < cur->n_members; i++)
        if (!((rem || rep) && cur->members[i] == q->old_member_id))
            t->members[t->n_members++] = cur->members[i];
    if (add || rep)
        t->members[t->n_members++] = q->member->id;
    if (t->n_members > KL_RAFT_MAX_MEMBERS || t->n_members == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "member_id", "a partition has 1..%d voters",
                       KL_RAFT_MAX_MEMBERS);
    t->replica_count = q->replica_count ? q->replica_count : cur->replica_count;
    if (t->replica_count > t->n_members)
        return kl_fail(err, KL_INVALID_ARGUMENT, "replica_count",
                       "replica_count %u above the %u voters of the target", t->replica_count, t->n_members);
    return KL_OK;
}

static bool same_voters(const kl_raft_conf *a, const kl_raft_conf *b)
{
    if (a->n_members != b->n_members || a->replica_count != b->replica_count || a->n_old != b->n_old)
        return false;
    for (uint32_t i = 0; i < a->n_members; i++)
        if (!has(b->members, b->n_members, a->members[i]))
            return false;
    return true;
}

static void answer_change(kl_rpc_call *call, const kl_raft_conf *t, bool done, const char *step)
{
    Keyload__V1__MemberChangeAnswer a = KEYLOAD__V1__MEMBER_CHANGE_ANSWER__INIT;
    a.voters = (uint64_t *)t->members;
    a.n_voters = t->n_members;
    a.replica_count = t->replica_count;
    a.done = done;
    a.step = (char *)step;
    reply_packed(call, &a.base);
}

static void change_end(kl_member_change *mc, const char *why)
{
    if (mc->active)
        KL_INFO("member change ended", "result=%s voters=%u", why, mc->target.n_members);
    mc->active = false;
    mc->step = why;
    if (mc->info != NULL)
        keyload__v1__member_info__free_unpacked(mc->info, NULL);
    mc->info = NULL;
}

/* Starts a change (the request already checked): false when memory ran out. */
static bool change_start(kl_service *s, const Keyload__V1__MemberChangeRequest *q, const kl_raft_conf *t)
{
    if (s->mchange == NULL && (s->mchange = calloc(1, sizeof *s->mchange)) == NULL)
        return false;
    kl_member_change *mc = s->mchange;
    change_end(mc, "replaced");
    mc->target = *t;
    mc->new_id = 0;
    mc->old_id = q->old_member_id;
    snprintf(mc->op, sizeof mc->op, "%s", q->op);
    if (q->member != NULL && strcmp(q->op, "remove") != 0) {
        size_t n = keyload__v1__member_info__get_packed_size(q->member);
        uint8_t *b = malloc(n ? n : 1);
        if (b == NULL)
            return false;
        keyload__v1__member_info__pack(q->member, b);
        mc->info = keyload__v1__member_info__unpack(NULL, n, b);
        free(b);
        if (mc->info == NULL)
            return false;
        mc->new_id = q->member->id;
    }
    mc->active = true;
    mc->step = "learner";
    mc->deadline_ms = mono_ms() + KL_MEMBER_CHANGE_MS;
    KL_INFO("member change started", "op=%s voters=%u replica_count=%u new=%llu old=%llu", q->op,
            t->n_members, t->replica_count, (unsigned long long)mc->new_id,
            (unsigned long long)q->old_member_id);
    return true;
}

/* A request whose change already happened (a retry after done): add/replace's new member is
 * a voter and remove/replace's old one is not, in a committed, non-joint configuration. */
static bool already_done(const Keyload__V1__MemberChangeRequest *q, const kl_raft_conf *cur, bool committed)
{
    if (!committed || cur->n_old > 0)
        return false;
    bool add = !strcmp(q->op, "add"), rem = !strcmp(q->op, "remove"), rep = !strcmp(q->op, "replace");
    if (!add && !rem && !rep)
        return false;
    if ((add || rep) && (q->member == NULL || !has(cur->members, cur->n_members, q->member->id)))
        return false;
    if ((rem || rep) && (q->old_member_id == 0 || has(cur->members, cur->n_members, q->old_member_id)))
        return false;
    return cur->n_learners == 0 && (q->replica_count == 0 || q->replica_count == cur->replica_count);
}

/* The same request as the change in flight (a retry joins it). */
static bool same_request(const kl_member_change *mc, const Keyload__V1__MemberChangeRequest *q)
{
    uint64_t new_id = q->member != NULL && strcmp(q->op, "remove") != 0 ? q->member->id : 0;
    return !strcmp(mc->op, q->op) && mc->new_id == new_id && mc->old_id == q->old_member_id;
}

/* Whether this member listens for peers: a joined member always does (its own peer URL came
 * with --join); a seed member does when its cluster file entry names a peer address. */
static bool has_peer_address(const kl_service *s)
{
    for (int i = 0; s->partition != NULL && i < s->partition->member_count; i++)
        if ((uint64_t)s->partition->members[i].id == s->member_id)
            return s->partition->members[i].peer_url[0] != '\0';
    return true;
}

/* Answers q (already decoded, from an administrator, on the leader); err on refusal. */
static kl_code change_answer(kl_service *s, kl_rpc_call *call, const Keyload__V1__MemberChangeRequest *q,
                             kl_err *err)
{
    kl_raft_conf cur, t;
    uint64_t index;
    bool committed;
    kl_repl_conf(s->repl, &cur, &index, &committed);
    kl_member_change *mc = s->mchange;
    if (mc != NULL && mc->active) {
        if (!same_request(mc, q))
            return kl_fail(err, KL_UNAVAILABLE, "member_change_in_progress",
                           "another membership change runs; retry once it finished (Members)");
        answer_change(call, &mc->target, false, mc->step);
        return KL_OK;
    }
    if (already_done(q, &cur, committed)) {
        answer_change(call, &cur, true, "done");
        return KL_OK;
    }
    kl_code rc = target_of(q, &cur, &t, err);
    if (rc != KL_OK)
        return rc;
    if (t.n_members > 1 && !has_peer_address(s))
        return kl_fail(err, KL_FAILED_PRECONDITION, "peer_url",
                       "member %llu has no peer address in its cluster file (partitions[].members[].peer), so "
                       "no other member could reach it: give it one and restart it before adding members",
                       (unsigned long long)s->member_id);
    if (!change_start(s, q, &t))
        return kl_fail(err, KL_UNAVAILABLE, "memory", "out of memory starting the change");
    answer_change(call, &t, false, s->mchange->step);
    return KL_OK;
}

void kl_service_member_change(void *owner, kl_rpc_call *call)
{
    kl_service *s = owner;
    kl_err err;
    size_t len;
    const uint8_t *p = kl_rpc_call_payload(call, &len);
    Keyload__V1__MemberChangeRequest *q = keyload__v1__member_change_request__unpack(NULL, len, p);
    kl_code rc = q == NULL ? kl_fail(&err, KL_INVALID_ARGUMENT, "request", "MemberChangeRequest does not decode")
                           : require_admin(s, call, &err);
    kl_raft_status st;
    kl_repl_status(s->repl, &st);
    if (rc == KL_OK && st.role != KL_RAFT_LEADER) {
        kl_fail(&err, KL_NOT_LEADER, "not_leader", "membership changes run on the partition's leader");
        kl_service_reply_not_leader(s, call, &err);
    } else if (rc != KL_OK || (rc = change_answer(s, call, q, &err)) != KL_OK) {
        kl_rpc_reply_error(call, &err, NULL);
    }
    if (q != NULL)
        keyload__v1__member_change_request__free_unpacked(q, NULL);
}

/* The directory a step's entry carries: every member of the target and of the configuration
 * in effect that this member knows, and the new member from the request. */
static size_t step_directory(kl_service *s, const kl_member_change *mc, const kl_raft_conf *cur,
                             uint8_t *buf, size_t cap)
{
    kl_raft_conf both = *cur;
    for (uint32_t i = 0; i < mc->target.n_members; i++)
        if (!has(both.members, both.n_members, mc->target.members[i]) &&
            !has(both.learners, both.n_learners, mc->target.members[i]))
            both.learners[both.n_learners++] = mc->target.members[i];
    Keyload__V1__MemberInfo infos[3 * KL_RAFT_MAX_MEMBERS], *ptrs[3 * KL_RAFT_MAX_MEMBERS];
    size_t n = fill_directory(s, &both, infos, ptrs);
    for (size_t i = 0; i < n && mc->info != NULL; i++)
        if (infos[i].id == mc->new_id)
            ptrs[i] = mc->info;
    Keyload__V1__MemberDirectory d = KEYLOAD__V1__MEMBER_DIRECTORY__INIT;
    d.members = ptrs;
    d.n_members = n;
    if (keyload__v1__member_directory__get_packed_size(&d) > cap)
        return 0;
    return keyload__v1__member_directory__pack(&d, buf);
}

void kl_service_member_tick(kl_service *s)
{
    kl_member_change *mc = s->mchange;
    if (mc == NULL || !mc->active)
        return;
    kl_raft_status st;
    kl_repl_status(s->repl, &st);
    if (st.role != KL_RAFT_LEADER) {
        change_end(mc, "abandoned: not the leader");
        return;
    }
    if (mono_ms() > mc->deadline_ms) {
        change_end(mc, "abandoned: deadline");
        return;
    }
    kl_raft_conf cur, step;
    uint64_t index, leader;
    bool committed;
    kl_repl_conf(s->repl, &cur, &index, &committed);
    if (same_voters(&cur, &mc->target) && cur.n_learners == 0) {
        if (committed)
            change_end(mc, "done");
        return;
    }
    step = mc->target;
    if (mc->new_id != 0 && !has(cur.members, cur.n_members, mc->new_id) &&
        !has(cur.learners, cur.n_learners, mc->new_id) && cur.n_old == 0) {
        step = cur; /* a new voter is a learner first (MEMBERSHIP.md rule 8) */
        step.learners[step.n_learners++] = mc->new_id;
    }
    uint8_t dir[KL_MEMBER_CONF_BLOB_MAX];
    size_t dlen = step_directory(s, mc, &cur, dir, sizeof dir);
    /* The node's open group was evaluated for the next index: proposed after this entry it
       would no longer match its slot and be refused (the catalog proposals flush too). */
    kl_node_flush(s->node);
    kl_err err;
    kl_code rc = kl_repl_propose_conf(s->repl, &step, dir, dlen, &index, &leader, &err);
    if (rc == KL_OK && index > 0)
        mc->step = step.n_learners > cur.n_learners ? "learner" : cur.n_old > 0 ? "leave" : "joint";
    else if (rc != KL_OK && rc != KL_UNAVAILABLE)
        change_end(mc, "abandoned: refused");
    if (rc != KL_OK && rc != KL_UNAVAILABLE)
        KL_WARN("member change refused", "error=\"%s\"", err.message);
}

void kl_service_member_stop(kl_service *s)
{
    if (s->mchange == NULL)
        return;
    change_end(s->mchange, "stopped");
    free(s->mchange);
    s->mchange = NULL;
}
