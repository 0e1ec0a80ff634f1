/* The membership fault (nemesis.h): a member of a data partition is replaced by a new
 * identity while the workload runs, as deploy/keyload-cluster replace does it: the old
 * member is killed -9 (for good), a new member id with a new key pair starts on a wiped
 * directory with --join, and MemberChange replace (learner, catch-up, joint, leave) runs on
 * the partition's leader, retried until it answers done and Members reports the target
 * committed. The new identity runs in the partition's spare slot (its own namespace and
 * address): a client that still holds the old cluster file then never meets a new key at a
 * known address, which it would refuse as a forged member. The seed picks the partition,
 * whether the leader is the member replaced, and whether a member (the leader or another,
 * the new one included) is killed -9 in the middle of the change and restarted.
 *
 * Before the change, the cluster file names the new member (with its key) beside the old
 * one and is reloaded: clients and the coordinator reopen it, and partition 0 is told the
 * new key (SetMemberKey, as `keyload cluster member replace --public-key` does), since it
 * checks a data partition's catalog tail signatures against the keys of its cluster file and
 * of those records. The partition's own members keep starting from a file naming its
 * configuration in effect, as the launcher's cluster.json does, since a member whose log
 * holds no configuration entry yet takes its members from the file. The new member may lead
 * as soon as the joint step is in its log, so without its key registered it could not keep
 * its catalog lease (NEMESIS_MEMBER_VOUCH=0 leaves the registration out, to watch that).
 * Once the change committed the old member leaves the file. The configuration itself is in
 * each partition's log: the file only seeds members and tells clients where to go.
 *
 * Partition 0 is not a target here (tests/cluster/replace_trust.sh replaces its members
 * through the launcher). Neither is the member whose store is on the small disk image or on lossyfs (their faults
 * need that store). */
#include "tests/nemesis/nemesis.h"

#include "keyload/v1/membership.pb-c.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

nm_member_stats nm_mstats;

/* How long a replacement may take to reach its target: catch-up of a store written for
 * minutes, on two cores shared with nine daemons. */
#define MC_WAIT_MS 90000
/* Replacements per partition and run. Eight take 24 configuration entries, more than the
 * 16 the core keeps past its snapshot point, so a run exercises the driver's compaction
 * under configuration-history pressure (driver.c maybe_compact). */
#define MC_MAX_PER_PARTITION 8

static int replaced[NM_PARTS];

static int rpick(int n) { return (int)(nm_fault_rng() % (uint64_t)n); }

/* Partition p's configuration as its leader reports it (Members through the SDK). Any
 * member may answer Members, and a follower learns that the newest configuration committed
 * only with the leader's next append, so an answer from a member that names another as
 * leader is asked again (the SDK learned that leader from it); after timeout_ms the last
 * answer stands, whoever gave it. */
static Keyload__V1__MembersAnswer *members_answer(kl_client *c, int p, int timeout_ms)
{
    int64_t t0 = nm_now_ms();
    Keyload__V1__MembersAnswer *last = NULL;
    for (;;) {
        Keyload__V1__MembersAnswer *a = NULL;
        kl_err err = {0};
        if (kl_client_members(c, p, &a, &err) == KL_OK) {
            if (last != NULL)
                keyload__v1__members_answer__free_unpacked(last, NULL);
            last = a;
            if (a->leader == 0 || a->leader == a->member)
                return a;
        }
        if (nm_now_ms() - t0 > timeout_ms)
            return last;
        nm_sleep_ms(200);
    }
}

static bool has_id(const uint64_t *ids, size_t n, uint64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id)
            return true;
    return false;
}

/* Whether a is the committed, settled configuration whose voters are exactly the active
 * members of p; why (when not NULL) says how it differs. */
static bool answer_is(const Keyload__V1__MembersAnswer *a, int p, char *why, size_t cap)
{
    size_t n_act = 0;
    bool ok = a->committed && !a->joint && a->n_learners == 0 && a->replica_count == NM_MEMBERS;
    for (int m = 0; m < NM_SLOTS; m++)
        if (nm.mb[p][m].active) {
            n_act++;
            ok = ok && has_id(a->voters, a->n_voters, (uint64_t)nm.mb[p][m].id);
        }
    ok = ok && a->n_voters == n_act;
    if (!ok && why != NULL) {
        char v[64] = "", h[64] = "";
        for (size_t i = 0; i < a->n_voters; i++)
            snprintf(v + strlen(v), sizeof v - strlen(v), "%s%llu", i ? "," : "", (unsigned long long)a->voters[i]);
        for (int m = 0; m < NM_SLOTS; m++)
            if (nm.mb[p][m].active)
                snprintf(h + strlen(h), sizeof h - strlen(h), "%s%d", h[0] ? "," : "", nm.mb[p][m].id);
        snprintf(why, cap, "Members says voters {%s} replica_count %u%s%s, %zu learners; the harness runs {%s}", v,
                 a->replica_count, a->committed ? "" : " uncommitted", a->joint ? " joint" : "", a->n_learners, h);
    }
    return ok;
}

bool nm_members_agree(int p, char *why, size_t cap)
{
    kl_client *c = nm_admin_client();
    if (c == NULL) {
        snprintf(why, cap, "no administrator client could be opened");
        return false;
    }
    Keyload__V1__MembersAnswer *a = members_answer(c, p, 10000);
    kl_client_close(c);
    if (a == NULL) {
        snprintf(why, cap, "no member answered Members within 10 s");
        return false;
    }
    bool ok = answer_is(a, p, why, cap);
    keyload__v1__members_answer__free_unpacked(a, NULL);
    return ok;
}

/* Counts one comparison of Members with the harness's set (when tag is not NULL). */
static void count_agreement(int p, const char *tag)
{
    char why[200] = "";
    nm_hist.members_checked++;
    if (!nm_members_agree(p, why, sizeof why)) {
        nm_hist.members_disagree++;
        printf("    partition %d %s: %s\n", p, tag, why);
        if (!nm_hist.first_members_disagree[0])
            snprintf(nm_hist.first_members_disagree, sizeof nm_hist.first_members_disagree, "partition %d %s: %.150s",
                     p, tag, why);
    }
}

/* The last refusal of a MemberChange, for the report of a change that did not finish. */
static char mc_last_refusal[512];

/* One MemberChange replace of old by nw; KL_OK when it started or is done (*done). */
static kl_code change(kl_client *c, const nm_member *old, const nm_member *nw, bool *done)
{
    uint8_t pk[32];
    size_t pk_len = 0;
    if (sodium_base642bin(pk, sizeof pk, nw->pub, strlen(nw->pub), NULL, &pk_len, NULL,
                          sodium_base64_VARIANT_ORIGINAL) != 0 ||
        pk_len != sizeof pk)
        return KL_INTERNAL;
    char peer[64];
    snprintf(peer, sizeof peer, "tcp://%s:%d", nw->addr, NM_PEER_PORT);
    Keyload__V1__MemberInfo info = KEYLOAD__V1__MEMBER_INFO__INIT;
    info.id = (uint64_t)nw->id;
    info.client_url = (char *)nw->url;
    info.peer_url = peer;
    info.public_key = (ProtobufCBinaryData){sizeof pk, pk};
    Keyload__V1__MemberChangeRequest q = KEYLOAD__V1__MEMBER_CHANGE_REQUEST__INIT;
    q.op = "replace";
    q.member = &info;
    q.old_member_id = (uint64_t)old->id;
    Keyload__V1__MemberChangeAnswer *a = NULL;
    kl_err err = {0};
    kl_code rc = kl_client_member_change(c, old->p, &q, &a, &err);
    *done = rc == KL_OK && a != NULL && a->done;
    if (rc != KL_OK)
        snprintf(mc_last_refusal, sizeof mc_last_refusal, "%s %s: %.160s", kl_code_name(rc), err.detail,
                 err.message);
    if (a != NULL)
        keyload__v1__member_change_answer__free_unpacked(a, NULL);
    return rc;
}

/* kill -9 of a member of p in the middle of the change (the leader, or any other running
 * member, the new one included), restarted 1-2 s later; its name into who. */
static void kill_mid(int p, bool leader, char *who, size_t cap)
{
    int l = nm_leader(p, 500), act[NM_SLOTS], n = 0;
    for (int m = 0; m < NM_SLOTS; m++)
        if (nm.mb[p][m].active && nm.mb[p][m].pid > 0 && m != l)
            act[n++] = m;
    int v = leader && l >= 0 ? l : n > 0 ? act[rpick(n)] : l;
    if (v < 0) {
        snprintf(who, cap, "none running");
        return;
    }
    nm_member *mb = &nm.mb[p][v];
    snprintf(who, cap, "%s%s", mb->node, v == l ? " (the leader)" : "");
    nm_member_kill(mb);
    nm_sleep_ms(1000 + rpick(1000));
    nm_member_start(mb);
    nm_mstats.killed_mid++;
}

/* Retries the change until it answered done and the leader reports the target committed. */
static bool change_to_target(kl_client *c, const nm_member *old, const nm_member *nw, int mid_kill, char *who,
                             size_t cap)
{
    int64_t t0 = nm_now_ms();
    bool done = false, started = false;
    while (!started && nm_now_ms() - t0 < MC_WAIT_MS) {
        started = change(c, old, nw, &done) == KL_OK;
        if (!started)
            nm_sleep_ms(300);
    }
    if (!started)
        return false;
    if (mid_kill < 2)
        kill_mid(old->p, mid_kill == 0, who, cap);
    while (nm_now_ms() - t0 < MC_WAIT_MS) {
        nm_sleep_ms(500);
        if (!done && change(c, old, nw, &done) != KL_OK)
            continue;
        Keyload__V1__MembersAnswer *a = done ? members_answer(c, old->p, 2000) : NULL;
        bool ok = a != NULL && answer_is(a, old->p, NULL, 0);
        if (a != NULL)
            keyload__v1__members_answer__free_unpacked(a, NULL);
        if (ok)
            return true;
    }
    return false;
}

/* Partition 0 vouches for a joining identity's key (SetMemberKey, as `keyload cluster
 * member replace` does), under one command id, retried while it answers UNAVAILABLE (a
 * catalog barrier waiting out a partition that cannot commit) for up to MC_WAIT_MS. */
static bool vouch(kl_client *c, const nm_member *mb)
{
    uint8_t pk[32];
    size_t n = 0;
    if (sodium_base642bin(pk, sizeof pk, mb->pub, strlen(mb->pub), NULL, &n, NULL, sodium_base64_VARIANT_ORIGINAL) != 0 ||
        n != sizeof pk)
        return false;
    char cid[KL_COMMAND_ID_TEXT_LEN + 1];
    kl_command_id_new(cid);
    int64_t t0 = nm_now_ms();
    for (;;) {
        kl_err err = {0};
        kl_code rc = kl_client_set_member_key(c, cid, mb->p, (uint64_t)mb->id, pk, NULL, &err);
        if (rc == KL_OK)
            return true;
        if ((rc != KL_UNAVAILABLE && rc != KL_UNKNOWN_WRITE_OUTCOME && rc != KL_DEADLINE_EXCEEDED) ||
            nm_now_ms() - t0 > MC_WAIT_MS) {
            printf("    SetMemberKey for %s: %s %s\n", mb->node, kl_code_name(rc), err.detail);
            return false;
        }
        nm_sleep_ms(300);
    }
}

/* The cluster file changed: (when p0) partition 0 is told the key of every joining identity
 * (NEMESIS_MEMBER_VOUCH=0 leaves that out, to watch a new leader without a catalog
 * lease), the coordinator restarted, the workload's clients reopened. */
static void reload(bool p0)
{
    const char *e = getenv("NEMESIS_MEMBER_VOUCH");
    if (p0 && (e == NULL || strcmp(e, "0") != 0)) {
        kl_client *c = nm_admin_client();
        for (int p = 1; p < NM_PARTS; p++)
            for (int m = 0; m < NM_SLOTS; m++) {
                nm_member *mb = &nm.mb[p][m];
                if (mb->join_file[0] && (c == NULL || !vouch(c, mb)))
                    printf("    partition 0 was not told the key of %s\n", mb->node);
            }
        kl_client_close(c);
    }
    nm_coord_kill();
    nm_coord_start();
    nm_workload_reopen();
}

/* A replacement that did not reach its target: a finding. The old member comes back on its
 * directory (it is wiped only after a committed change); the new one keeps running, since
 * the configuration may already count on it (a joint step needs its copies), so that the
 * change can still finish; the slots are then no longer reused. */
static void undo(nm_member *old, nm_member *nw, const char *what, bool keep_new)
{
    nm_mstats.failed++;
    nm_hist.member_changes_failed++;
    if (!nm_hist.first_member_failure[0])
        snprintf(nm_hist.first_member_failure, sizeof nm_hist.first_member_failure, "%.250s", what);
    if (!keep_new) {
        nw->active = false;
        nw->join_file[0] = 0;
    } else if (!nm_member_alive(nw)) {
        nm_member_start(nw);
    }
    old->active = true;
    nm_member_start(old);
}

int nm_fault_member_replace(char *what, size_t cap)
{
    int p = 1 + rpick(NM_PARTS - 1);
    if (replaced[p] >= MC_MAX_PER_PARTITION)
        p = NM_PARTS - p; /* the other data partition */
    if (replaced[p] >= MC_MAX_PER_PARTITION) {
        snprintf(what, cap, "every data partition had its %d replacements: nothing done", MC_MAX_PER_PARTITION);
        return p;
    }
    int l = nm_leader(p, 500), cand[NM_SLOTS], n = 0, spare = -1;
    for (int m = 0; m < NM_SLOTS; m++) {
        nm_member *mb = &nm.mb[p][m];
        if (!mb->active)
            spare = m;
        else if (strcmp(mb->slot, nm.disk_node) != 0 && strcmp(mb->slot, nm.lossy_node) != 0)
            cand[n++] = m;
    }
    bool want_leader = rpick(2) == 0;
    int mid_kill = rpick(3); /* 0: the leader, 1: another member, 2: none */
    if (spare < 0 || n == 0) {
        snprintf(what, cap, "partition %d: no spare slot (an earlier replacement did not finish): nothing done", p);
        return p;
    }
    int o = cand[rpick(n)];
    for (int k = 0; want_leader && k < n; k++)
        if (cand[k] == l)
            o = l;
    nm_member *old = &nm.mb[p][o], *nw = &nm.mb[p][spare];
    nm_mstats.runs++;
    nm_hist.member_changes++;
    replaced[p]++;
    count_agreement(p, "before a replacement");
    /* The new identity: a member id never used in p, a new key pair, a wiped directory. */
    nw->id = ++nm.last_id[p];
    char node[8];
    snprintf(node, sizeof node, "p%um%u", (unsigned)p % 10u, (unsigned)nw->id % 1000u);
    memcpy(nw->node, node, sizeof node);
    snprintf(nw->key, sizeof nw->key, "%s/%s.key", nm.work, node);
    snprintf(nw->log, sizeof nw->log, "%s/%s.log", nm.work, node);
    nm_sh("rm -rf '%s'", nw->data);
    nw->started_once = false;
    snprintf(nm.member_file[p], sizeof nm.member_file[p], "%s/cluster-p%d.json", nm.work, p);
    if (!nm_write_cluster_file(nm.member_file[p], NULL) || !nm_member_keygen(nw) ||
        !nm_write_cluster_file(nm.file, nw)) {
        snprintf(what, cap, "%s: could not make the new identity's key or cluster file", old->node);
        nw->join_file[0] = 0;
        nm.member_file[p][0] = 0;
        nm_write_cluster_file(nm.file, NULL);
        undo(old, nw, what, false);
        return p;
    }
    snprintf(nw->join_file, sizeof nw->join_file, "%s", nm.file);
    reload(true);
    bool was_leader = o == l;
    nm_member_kill(old);
    old->active = false;
    nw->active = true;
    nm_member_start(nw);
    kl_client *c = nm_admin_client();
    char who[64] = "nobody";
    mc_last_refusal[0] = 0;
    bool ok = c != NULL && change_to_target(c, old, nw, mid_kill, who, sizeof who);
    kl_client_close(c);
    snprintf(what, cap, "%s%s replaced by %s (new key, wiped directory, slot %s; kill -9 mid-change: %s): %s",
             old->node, was_leader ? " (the leader)" : "", nw->node, nw->slot, who,
             ok ? "committed" : "NOT committed within the bound; last refusal: ");
    if (!ok)
        snprintf(what + strlen(what), cap - strlen(what), "%s", mc_last_refusal[0] ? mc_last_refusal : "none");
    if (!ok) {
        undo(old, nw, what, true);
        return p;
    }
    nm_mstats.done++;
    nm_mstats.leader_replaced += was_leader;
    nm_sh("rm -rf '%s'", old->data);
    old->join_file[0] = 0;
    nw->join_file[0] = 0;
    nw->started_once = true;
    nm_write_cluster_file(nm.file, NULL);
    nm.member_file[p][0] = 0; /* every member's log holds the configuration now */
    reload(false);
    count_agreement(p, "after a replacement");
    return p;
}
