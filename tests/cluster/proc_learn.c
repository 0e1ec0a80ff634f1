/* proc_learn: clients and the coordinator learn a partition's members from Members
 * (client/sdk/member_table.h) on real processes: the coordinator suites' RF3 cluster
 * (proc_coord.h: 3 partitions x 3 members, sessions required, member keys), whose partition 1
 * changes members under an SDK client and a keyload-coordinator that both hold the ORIGINAL
 * cluster file, which never names the new members:
 *
 *   1. p1m4 joins (--join, a new client URL) and is added; p1m1 is removed (replica_count 3
 *      -> 2, so that {2, 3, 4} commits with one member down) and killed -9. p1m4 is then
 *      made the leader (deterministically: see lr_make_lead). The client enqueues and
 *      receives on a queue of partition 1: only the leader serves a batch, and p1m4's own
 *      MemberStatus counts the sealed requests it served. The coordinator delivers a transfer
 *      whose source lives on partition 1; then it is restarted (a new process that knows
 *      only the file, whose first member is dead and whose other two follow) and delivers
 *      another.
 *   2. p1m5 joins (a new client URL too) and is added, p1m2 is removed and killed -9, p1m5 is
 *      made the leader, then p1m3 is killed -9: only p1m4 and p1m5, both learned, serve
 *      ({3, 4, 5} at replica_count 2), and the leader is the member joined last. The client
 *      (and a second client opened now, sharing the process's member table) still enqueue
 *      and receive, and the coordinator delivers another transfer from partition 1.
 *
 * Partition 0 authenticates a data partition's catalog tails with the member keys of its
 * cluster file and, for members admitted later, with the keys its catalog vouches for
 * (SetMemberKey; docs/MEMBERSHIP.md "Who vouches for a new member's key"). Partition 0 runs
 * from the original file throughout and is never restarted: the administrator registers
 * p1m4's and p1m5's keys before adding them and removes p1m1's and p1m2's once they left,
 * as `keyload cluster member` does. Probed with CatalogTail requests signed here: a key
 * nobody vouched for (under an unknown id, and under p1m4's id once p1m4's real key is
 * registered) is refused "tail_signature", and removed p1m1's own key "tail_member_removed".
 * At the end partition 0 is told a forged key for p1m5, which leads: its tails are refused,
 * its catalog lease runs out and a write fails UNAVAILABLE "catalog_lease", until the real
 * key is registered again.
 *
 * Extra members use ports 12000..12899 (20 per pid slot, as the coordinator suites'
 * 13000..13899), are started by fork/exec with a bounded lifetime and killed by pid
 * (lr_stop_all), also after a failed check; the cluster is stopped after this test, since
 * its partition 1 no longer matches its cluster file. */
#include "tests/cluster/proc_coord.h"
#include "tests/cluster/proc_trust.h"

#include "common/keys.h"
#include "keyload/v1/membership.pb-c.h"

#include <jansson.h>
#include <signal.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define LR_DB "acme/lr"
#define LR_P 1      /* the partition whose members change */
#define LR_EXTRA 2  /* p1m4, p1m5 */
#define LR_CHANGE_MS 60000

typedef struct lr_member {
    int id;
    char client[64], peer[64], key[760], log[760], data[760], file[760];
    char pub_b64[64];
    uint8_t pub[32];
    pid_t pid;
} lr_member;

static lr_member lr[LR_EXTRA] = {{.pid = -1}, {.pid = -1}};

void lr_stop_all(void)
{
    for (int i = 0; i < LR_EXTRA; i++)
        if (lr[i].pid > 0) {
            kill(lr[i].pid, SIGKILL);
            waitpid(lr[i].pid, NULL, 0);
            lr[i].pid = -1;
        }
}

/* Keys, ports, names of the extra members; the joiners' cluster files (each member's --node
 * must be in the file it starts from): the original plus p1m4 (for p1m4), plus p1m4 and p1m5
 * (for p1m5). Partition 0 never reads them. */
static bool lr_prepare(char *why, size_t cap)
{
    int base = 12000 + (int)(getpid() % 45) * 20;
    const char *run = cc_fx.cluster.run;
    for (int i = 0; i < LR_EXTRA; i++) {
        lr_member *m = &lr[i];
        m->id = 4 + i;
        snprintf(m->client, sizeof m->client, "tcp://127.0.0.1:%d", base + 2 * i);
        snprintf(m->peer, sizeof m->peer, "tcp://127.0.0.1:%d", base + 2 * i + 1);
        snprintf(m->key, sizeof m->key, "%s/%s-p%dm%d.key", work, run, LR_P, m->id);
        snprintf(m->log, sizeof m->log, "%s/%s-p%dm%d.log", work, run, LR_P, m->id);
        snprintf(m->data, sizeof m->data, "%s/%s-data-p%dm%d", work, run, LR_P, m->id);
        snprintf(m->file, sizeof m->file, "%s/%s-join-p%dm%d.json", work, run, LR_P, m->id);
        char cmd[900];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", m->data);
        if (system(cmd) != 0 || !member_keygen(m->key, m->pub_b64, sizeof m->pub_b64)) {
            snprintf(why, cap, "keys for p%dm%d", LR_P, m->id);
            return false;
        }
        size_t n = 0;
        if (sodium_base642bin(m->pub, sizeof m->pub, m->pub_b64, strlen(m->pub_b64), NULL, &n, NULL,
                              sodium_base64_VARIANT_ORIGINAL) != 0 || n != 32) {
            snprintf(why, cap, "public key of p%dm%d does not decode", LR_P, m->id);
            return false;
        }
    }
    for (int i = 0; i < LR_EXTRA; i++) {
        json_error_t je;
        json_t *root = json_load_file(cc_fx.cluster.file, 0, &je);
        json_t *members = json_object_get(json_array_get(json_object_get(root, "partitions"), LR_P), "members");
        if (!json_is_array(members)) {
            json_decref(root);
            snprintf(why, cap, "cannot read %s: %s", cc_fx.cluster.file, je.text);
            return false;
        }
        for (int k = 0; k <= i; k++)
            json_array_append_new(members, json_pack("{s:i, s:s, s:s, s:s, s:s}", "id", lr[k].id, "client",
                                                     lr[k].client, "peer", lr[k].peer, "data", lr[k].data,
                                                     "public_key", lr[k].pub_b64));
        int rc = json_dump_file(root, lr[i].file, JSON_INDENT(1));
        json_decref(root);
        if (rc != 0) {
            snprintf(why, cap, "cannot write %s", lr[i].file);
            return false;
        }
    }
    return true;
}

/* Starts an extra member: joining (empty store, --join) or again from its store. */
static void lr_start(lr_member *m, bool join)
{
    char node[16];
    snprintf(node, sizeof node, "p%dm%d", LR_P, m->id);
    char *argv[] = {(char *)daemon_bin, "--cluster", m->file, "--node", node, "--cluster-secret",
                    cc_fx.cluster.secret, "--member-key", m->key, "--init-store", join ? "--join" : NULL, NULL};
    m->pid = proc_exec(argv, m->log, NULL, PROC_LIFETIME_S);
}

static void lr_start_joiner(lr_member *m) { lr_start(m, true); }

/* kill -9 of member `id` of partition 1 (an original or an extra member); lr_restart_id
 * starts it again from its store. */
static void lr_kill_id(int id)
{
    if (id <= CC_MEMBERS) {
        cc_kill(LR_P, id - 1);
        return;
    }
    lr_member *m = &lr[id - CC_MEMBERS - 1];
    if (m->pid > 0) {
        kill(m->pid, SIGKILL);
        waitpid(m->pid, NULL, 0);
        m->pid = -1;
    }
}

static void lr_restart_id(int id)
{
    if (id <= CC_MEMBERS)
        cc_spawn(LR_P, id - 1);
    else
        lr_start(&lr[id - CC_MEMBERS - 1], false);
}

/* MemberStatus of a client URL: serving leader (with a valid catalog lease), its sealed
 * request count; false when it does not answer. */
static bool lr_status(const char *url, bool *leads, uint64_t *sealed)
{
    Keyload__V1__MemberStatusAnswer *s = member_status(url, 1000);
    if (s == NULL)
        return false;
    *leads = s->serving && s->catalog_lease_valid;
    if (sealed)
        *sealed = s->sealed_requests;
    keyload__v1__member_status_answer__free_unpacked(s, NULL);
    return true;
}

/* The member id (1..5) of partition 1 that serves as leader, or 0. */
static int lr_leader(void)
{
    for (int m = 0; m < CC_MEMBERS; m++) {
        bool leads;
        if (cc_fx.cluster.pid[LR_P][m] > 0 && lr_status(cc_fx.cluster.url[LR_P][m], &leads, NULL) && leads)
            return m + 1;
    }
    for (int i = 0; i < LR_EXTRA; i++) {
        bool leads;
        if (lr[i].pid > 0 && lr_status(lr[i].client, &leads, NULL) && leads)
            return lr[i].id;
    }
    return 0;
}

static int lr_wait_leader(int timeout_ms)
{
    int l = 0;
    for (int64_t end = now_ms() + timeout_ms; (l = lr_leader()) == 0 && now_ms() < end;)
        sleep_ms(100);
    return l;
}

/* Partition 1's configuration (through the SDK, so through its member table) is exactly
 * `want` (n voters), committed, not joint, at replica_count rc. */
static bool lr_conf_is(kl_client *c, const uint64_t *want, size_t n, uint32_t rc)
{
    Keyload__V1__MembersAnswer *a = NULL;
    kl_err err;
    if (kl_client_members(c, LR_P, &a, &err) != KL_OK)
        return false;
    bool ok = a->committed && !a->joint && a->n_learners == 0 && a->n_voters == n && a->replica_count == rc;
    for (size_t k = 0; ok && k < n; k++) {
        bool f = false;
        for (size_t j = 0; j < a->n_voters; j++)
            f = f || a->voters[j] == want[k];
        ok = f;
    }
    keyload__v1__members_answer__free_unpacked(a, NULL);
    return ok;
}

/* One MemberChange on partition 1 by a cluster administrator, then waits for the target. */
static bool lr_change(kl_client *admin, const char *op, lr_member *m, uint64_t old, uint32_t rc,
                      const uint64_t *want, size_t n)
{
    Keyload__V1__MemberInfo info = KEYLOAD__V1__MEMBER_INFO__INIT;
    Keyload__V1__MemberChangeRequest q = KEYLOAD__V1__MEMBER_CHANGE_REQUEST__INIT;
    q.op = (char *)op;
    q.old_member_id = old;
    q.replica_count = rc;
    if (m != NULL) {
        info.id = (uint64_t)m->id;
        info.client_url = m->client;
        info.peer_url = m->peer;
        info.public_key.data = m->pub;
        info.public_key.len = sizeof m->pub;
        q.member = &info;
    }
    int64_t t0 = now_ms();
    kl_code code = KL_INTERNAL;
    kl_err err;
    kl_err_clear(&err);
    while (now_ms() - t0 < LR_CHANGE_MS) {
        Keyload__V1__MemberChangeAnswer *a = NULL;
        code = kl_client_member_change(admin, LR_P, &q, &a, &err);
        if (a != NULL)
            keyload__v1__member_change_answer__free_unpacked(a, NULL);
        if (code == KL_OK)
            break;
        sleep_ms(200); /* e.g. UNAVAILABLE member_change_in_progress right after a leader change */
    }
    if (code != KL_OK) {
        fprintf(stderr, "  MemberChange %s: %s %s\n", op, kl_code_name(code), err.message);
        return false;
    }
    while (now_ms() - t0 < LR_CHANGE_MS) {
        if (lr_conf_is(admin, want, n, rc)) {
            fprintf(stderr, "  %s p%dm%llu: configuration reached in %lld ms\n", op, LR_P,
                    (unsigned long long)(m != NULL ? (uint64_t)m->id : old), (long long)(now_ms() - t0));
            return true;
        }
        sleep_ms(100);
    }
    return false;
}

/* Makes member `want` the leader of a three-voter configuration at replica_count 2, with no
 * luck involved: kill -9 the leader L1; if L2 (elected by the other two) is not `want`
 * either, L2's first entry of its term is on `want` (replica_count 2), so killing L2 and
 * starting L1 again leaves L1's log behind `want`'s: only `want` can win. The killed members
 * are started again from their stores. */
static bool lr_make_lead_once(int want)
{
    int l1 = lr_wait_leader(20000);
    if (l1 == want || l1 == 0)
        return l1 == want;
    lr_kill_id(l1);
    int l2 = 0;
    for (int64_t end = now_ms() + 20000; (l2 = lr_leader()) == 0 || l2 == l1; sleep_ms(100))
        if (now_ms() > end) {
            lr_restart_id(l1);
            return false;
        }
    if (l2 == want) {
        lr_restart_id(l1);
        return true;
    }
    lr_kill_id(l2);
    lr_restart_id(l1);
    int l = lr_wait_leader(30000);
    lr_restart_id(l2); /* only now: its log is as long as the winner's */
    fprintf(stderr, "  leader of partition %d after two kills: p%dm%d\n", LR_P, LR_P, l);
    return l == want;
}

/* The argument above needs L2 to serve (its term's entry on `want`) before it is killed; on
 * a loaded machine a wait can run out instead, so an attempt that ends with another leader
 * (every member started again) is repeated, a bounded number of times. */
static bool lr_make_lead(int want)
{
    for (int attempt = 1; attempt <= 3; attempt++) {
        if (lr_make_lead_once(want))
            return true;
        fprintf(stderr, "  attempt %d to make p%dm%d the leader ended with p%dm%d leading\n", attempt,
                LR_P, want, LR_P, lr_leader());
    }
    return false;
}

/* n enqueues of "<tag>-<k>" to src.lr through c, then every one received and acked once. */
static void lr_traffic(kl_client *c, const char *tag, int n)
{
    kl_err err;
    for (int k = 0; k < n; k++) {
        char body[48];
        snprintf(body, sizeof body, "%s-%d", tag, k);
        CHECK(cc_enqueue(c, "work.lr", body, &err) == KL_OK, "enqueue %s: %s %s", body, kl_code_name(err.code),
              err.message);
    }
    bool seen[64] = {false};
    for (int k = 0; k < n; k++) {
        char body[64];
        CHECK(cc_drain_one(c, "work.lr", body), "receive %d of %d (%s)", k + 1, n, tag);
        int idx = -1;
        char want[48];
        snprintf(want, sizeof want, "%s-%%d", tag);
        CHECK(sscanf(body, want, &idx) == 1 && idx >= 0 && idx < n && !seen[idx], "unexpected body '%s'", body);
        seen[idx] = true;
    }
}

/* A transfer src.lr (partition 1) -> dst.lr (partition 2) created by the coordinator's
 * principal and delivered by the running coordinator. */
static void lr_transfer(const char *body)
{
    kl_err err;
    kl_client *mine = cc_client(WHO_COORD, LR_DB);
    CHECK(mine != NULL, "client");
    cc_id tid;
    kl_command_id_new(tid);
    int64_t t0 = now_ms();
    CHECK(cc_create(mine, "src.lr", "l", tid, "dst.lr", NULL, body, &err) == KL_OK, "create: %s %s",
          kl_code_name(err.code), err.message);
    CHECK(cc_wait_state(mine, "src.lr", "l", tid, KEYLOAD__V1__TRANSFER_STATE__DELIVERED, 30000),
          "transfer '%s' not Delivered within 30 s", body);
    fprintf(stderr, "  transfer '%s' from partition %d Delivered by the coordinator in %lld ms\n", body, LR_P,
            (long long)(now_ms() - t0));
}

/* A CatalogTail to partition 0 signed here as member `member` of partition 1: its refusal
 * must be UNAUTHENTICATED with detail `want`. */
static void lr_tail_refused(uint64_t member, const uint8_t secret[64], const char *want)
{
    const char *urls[CC_MEMBERS];
    for (int m = 0; m < CC_MEMBERS; m++)
        urls[m] = cc_fx.cluster.url[0][m];
    kl_err err;
    kl_err_clear(&err);
    kl_code rc = tr_tail(cc_fx.cluster.run, urls, CC_MEMBERS, LR_P, member, secret, &err);
    CHECK(rc == KL_UNAUTHENTICATED && strcmp(err.detail, want) == 0,
          "a CatalogTail as p%dm%llu: %s %s (want UNAUTHENTICATED %s)", LR_P, (unsigned long long)member,
          kl_code_name(rc), err.detail, want);
    fprintf(stderr, "  CatalogTail as p%dm%llu refused: %s\n", LR_P, (unsigned long long)member, err.detail);
}

/* Keys nobody vouched for: under an unknown member id, and under p1m4's id once p1m4's own
 * key is registered. */
static void lr_forged_tails(void)
{
    uint8_t pk[32], sk[64];
    crypto_sign_keypair(pk, sk);
    CC_STEP(lr_tail_refused(9, sk, "tail_signature"));
    CC_STEP(lr_tail_refused(4, sk, "tail_signature"));
    sodium_memzero(sk, sizeof sk);
}

static void lr_phase_one(kl_client *root, kl_client *admin)
{
    char why[400];
    /* Partition 0 vouches for p1m4's key before it is added, as `keyload cluster member add` does. */
    CHECK(tr_set_key(admin, LR_P, 4, lr[0].pub, why, sizeof why), "%s", why);
    CC_STEP(lr_forged_tails());
    lr_start_joiner(&lr[0]);
    uint64_t four[4] = {1, 2, 3, 4}, three[3] = {2, 3, 4};
    CHECK(lr_change(admin, "add", &lr[0], 0, 3, four, 4), "p1m4 was not added");
    CHECK(lr_change(admin, "remove", NULL, 1, 2, three, 3), "p1m1 was not removed");
    /* Removed: partition 0 stops trusting p1m1's key, which its cluster file names. */
    CHECK(tr_set_key(admin, LR_P, 1, NULL, why, sizeof why), "%s", why);
    uint8_t sk1[64];
    kl_err err;
    CHECK(kl_keys_read_secret_file("member key", cc_fx.cluster.mkey[LR_P][0], sk1, sizeof sk1, &err) == KL_OK,
          "p%dm1's key: %s", LR_P, err.message);
    lr_tail_refused(1, sk1, "tail_member_removed");
    sodium_memzero(sk1, sizeof sk1);
    if (failures_in_test)
        return;
    cc_kill(LR_P, 0);
    CHECK(lr_make_lead(4), "p1m4 did not become the leader");
    bool leads;
    uint64_t before = 0, after = 0;
    CHECK(lr_status(lr[0].client, &leads, &before), "p1m4 does not answer");
    CC_STEP(lr_traffic(root, "one", 10));
    CHECK(lr_status(lr[0].client, &leads, &after) && leads, "p1m4 no longer leads");
    /* 10 enqueues + 10 receives + 10 acks, sealed, all at the leader. */
    CHECK(after >= before + 30, "p1m4 served %llu sealed requests during the traffic (want >= 30)",
          (unsigned long long)(after - before));
    fprintf(stderr, "  phase 1: 10 messages through p1m4 (not in the client's cluster file): %llu sealed "
            "requests there\n", (unsigned long long)(after - before));
    CC_STEP(lr_transfer("after-phase-1"));
}

static void lr_phase_two(kl_client *root, kl_client *admin)
{
    char why[400];
    CHECK(tr_set_key(admin, LR_P, 5, lr[1].pub, why, sizeof why), "%s", why);
    lr_start_joiner(&lr[1]);
    uint64_t four[4] = {2, 3, 4, 5}, three[3] = {3, 4, 5};
    CHECK(lr_change(admin, "add", &lr[1], 0, 2, four, 4), "p1m5 was not added");
    CHECK(lr_change(admin, "remove", NULL, 2, 2, three, 3), "p1m2 was not removed");
    CHECK(tr_set_key(admin, LR_P, 2, NULL, why, sizeof why), "%s", why);
    cc_kill(LR_P, 1);
    CHECK(lr_make_lead(5), "p1m5 did not become the leader");
    cc_kill(LR_P, 2);
    int l = lr_wait_leader(30000);
    CHECK(l == 5, "p1m5 does not lead partition %d (leader %d)", LR_P, l);
    fprintf(stderr, "  phase 2: every member of the cluster file for partition %d is dead; p%dm%d leads\n", LR_P,
            LR_P, l);
    bool leads;
    uint64_t before = 0, after = 0;
    CHECK(lr_status(lr[1].client, &leads, &before), "p1m5 does not answer");
    CC_STEP(lr_traffic(root, "two", 10));
    CHECK(lr_status(lr[1].client, &leads, &after) && leads, "p1m5 no longer leads");
    CHECK(after >= before + 30, "p1m5 served %llu sealed requests during the traffic (want >= 30)",
          (unsigned long long)(after - before));
    /* A client opened now with the same cluster file shares the process's member table. */
    kl_client *fresh = NULL;
    kl_err err;
    CHECK(kl_client_open_principal(cc_fx.cluster.file, LR_DB, CC_TIMEOUT_MS, cc_who_id[WHO_ROOT],
                                   cc_fx.whos[WHO_ROOT].key_path, &fresh, &err) == KL_OK,
          "open: %s", err.message);
    lr_traffic(fresh, "fresh", 5);
    kl_client_close(fresh);
    if (failures_in_test)
        return;
    CC_STEP(lr_transfer("after-phase-2"));
}

/* p1m5's MemberStatus: Raft-serving leader, and whether its catalog lease holds. */
static bool lr_lease(bool *serving, bool *lease)
{
    Keyload__V1__MemberStatusAnswer *st = member_status(lr[1].client, 1000);
    if (st == NULL)
        return false;
    *serving = st->serving;
    *lease = st->catalog_lease_valid;
    keyload__v1__member_status_answer__free_unpacked(st, NULL);
    return true;
}

/* Partition 0 is told a forged key for p1m5, the leader: the tails p1m5 signs with its own
 * key are refused, its lease runs out (catalog_lease_ms 3 s) and a write fails while it
 * still leads; with its real key registered again it serves again. */
static void lr_forged_lease(kl_client *root, kl_client *admin)
{
    char why[400];
    uint8_t fpk[32], fsk[64];
    crypto_sign_keypair(fpk, fsk);
    sodium_memzero(fsk, sizeof fsk);
    /* The SetMemberKey itself answers only once partition 1's lease has run out: p1m5 can no
     * longer report the version that holds it (a catalog barrier), so count from before it. */
    int64_t t0 = now_ms();
    CHECK(tr_set_key(admin, LR_P, 5, fpk, why, sizeof why), "%s", why);
    bool serving = false, lease = true;
    while (now_ms() - t0 < 15000 && (!lr_lease(&serving, &lease) || lease))
        sleep_ms(100);
    CHECK(serving && !lease, "p%dm5 under a forged key: serving %d, lease %d after %lld ms (want a serving "
          "leader without a lease)", LR_P, serving, lease, (long long)(now_ms() - t0));
    fprintf(stderr, "  p%dm5's lease ran out %lld ms after partition 0 was sent a forged key\n", LR_P,
            (long long)(now_ms() - t0));
    kl_err err;
    kl_err_clear(&err);
    kl_code rc = cc_enqueue(root, "lease.lr", "forged", &err);
    CHECK(rc != KL_OK, "an enqueue through p%dm5 without a catalog lease was acknowledged", LR_P);
    fprintf(stderr, "  an enqueue meanwhile: %s %s\n", kl_code_name(rc), err.detail);
    CHECK(lr_lease(&serving, &lease) && serving && !lease, "p%dm5 stopped leading during the write", LR_P);
    CHECK(tr_set_key(admin, LR_P, 5, lr[1].pub, why, sizeof why), "%s", why);
    t0 = now_ms();
    while (now_ms() - t0 < 20000 && (!lr_lease(&serving, &lease) || !lease))
        sleep_ms(100);
    CHECK(serving && lease, "p%dm5 has no catalog lease 20 s after its real key was registered again", LR_P);
    fprintf(stderr, "  p%dm5's lease is back %lld ms after its real key was registered again\n", LR_P,
            (long long)(now_ms() - t0));
    CC_STEP(lr_traffic(root, "restored", 3));
}

void test_learn_members(void)
{
    CC_BEGIN("learn");
    CHECK(lr_prepare(why, sizeof why), "%s", why);
    CHECK(cc_database(LR_DB, why, sizeof why), "%s", why);
    CHECK(cc_queue(LR_DB, "work.lr", LR_P, &err) == KL_OK, "queue: %s", err.message);
    CHECK(cc_queue(LR_DB, "src.lr", LR_P, &err) == KL_OK, "queue: %s", err.message);
    CHECK(cc_queue(LR_DB, "dst.lr", 2, &err) == KL_OK, "queue: %s", err.message);
    CHECK(cc_queue(LR_DB, "lease.lr", LR_P, &err) == KL_OK, "queue: %s", err.message);
    kl_client *root = cc_client(WHO_ROOT, LR_DB), *admin = cc_client(WHO_OTHER, LR_DB);
    CHECK(root && admin, "clients");
    /* The coordinator holds the original cluster file from before the first change. */
    cc_opts o = {.db = LR_DB, .who = WHO_COORD, .workers = 2, .flush_ms = 5, .discovery_ms = 100,
                 .call_timeout_ms = 5000};
    CHECK(cc_coord_config(0, "lr", &o), "config");
    cc_coord_start(0, NULL);
    CC_STEP(lr_transfer("before"));
    CC_STEP(lr_phase_one(root, admin));
    /* A coordinator process started now knows only the file: p1m1 is gone and p1m4, which
     * the file does not name, leads. It must learn that by itself, then follow phase 2. */
    CHECK(cc_exited_with(cc_coord_stop(0), 0), "the coordinator did not exit 0 on SIGTERM");
    cc_coord_start(0, NULL);
    CC_STEP(lr_transfer("restarted-coordinator"));
    CC_STEP(lr_phase_two(root, admin));
    CHECK(cc_exited_with(cc_coord_stop(0), 0), "the coordinator did not exit 0 on SIGTERM");
    CHECK(cc_messages(root, "dst.lr") == 4, "dst.lr holds %lld (want 4)", cc_messages(root, "dst.lr"));
    CC_STEP(lr_forged_lease(root, admin));
    lr_stop_all();
}
