/* Unit tests for daemon/repl/driver: real members in one process. Every member of a test has
 * its own RocksDB store in a temporary directory, its own kl_repl and its own peer URL on
 * 127.0.0.1 (random free ports); all share one libuv loop run on the test thread by run_until
 * (a 1 ms timer makes each uv_run(UV_RUN_ONCE) return promptly). The fake node applies every
 * entry to its store with kl_store_apply (so applied_index is real and restarts replay from
 * it) and records, per index, the term and the command number it saw; after each test every
 * pair of members must have applied the same (term, command) at every index both applied,
 * and every driver instance must have handed out indexes exactly once, in order, starting at
 * its store's applied_index + 1. Timers are short (tick 10 ms, election 500 ms) but still
 * generous for a loaded 2-core machine under ASan. */
#include "common/failpoint.h"
#include "daemon/repl/driver.h"
#include "daemon/repl/peer.h"
#include "daemon/repl/stages.h"
#include "keyload/v1/membership.pb-c.h"
#include "keyload/v1/raft.pb-c.h"
#include "keyload/v1/store.pb-c.h"
#include "tests/unit/harness.h"

#include <arpa/inet.h>
#include <check.h>
#include <sodium.h>

#include "ports.h"
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TD_MAX 5
#define TD_LOG 4096 /* highest index a test may apply */
#define TD_READS 64

typedef struct td_member {
    uint64_t id;
    char dir[160];
    char url[64];
    kl_store *store;
    kl_repl *repl;
    bool running;  /* repl started and not stopped */
    bool released; /* the last stopped repl called `stopped` */
    /* what the fake node applied (survives restarts of the repl) */
    uint64_t term_at[TD_LOG + 1];
    uint64_t cmd_at[TD_LOG + 1]; /* 0 for a no-op */
    uint64_t applied;            /* highest index applied by any instance */
    uint64_t next_expect;        /* this instance: the next index apply must see */
    bool lose_applies;           /* apply in memory only: a crash lost the unsynced applies */
    int bad;                     /* contract violations seen by the callbacks */
    /* role callback */
    int role_calls;
    kl_raft_role role;
    uint64_t term, leader;
    bool serving;
    /* reads */
    uint64_t ready[TD_READS], dropped[TD_READS];
    size_t n_ready, n_dropped;
    uint64_t applied_at_ready[TD_READS];
    int fatal;
    uint8_t public_key[32], secret_key[64]; /* links authenticated when td_auth */
    int snapshots; /* applies that went on past an installed snapshot */
    bool leaving;  /* being removed from the configuration: not waited for */
} td_member;

static uv_loop_t loop;
static uv_timer_t wake;
static td_member mem[TD_MAX + 1]; /* indexed by id */
static int n_mem;
static uint32_t replica_count;
static uint64_t next_cmd;

/* ---------------------------------------------------------------- helpers */

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void wake_cb(uv_timer_t *t) { (void)t; }

typedef bool (*td_cond)(void *arg);

static bool run_until(td_cond cond, void *arg, uint64_t timeout_ms)
{
    uint64_t until = mono_ms() + timeout_ms;
    ck_assert_int_eq(uv_timer_start(&wake, wake_cb, 1, 1), 0);
    bool ok;
    while (!(ok = cond(arg)) && mono_ms() < until)
        uv_run(&loop, UV_RUN_ONCE);
    uv_timer_stop(&wake);
    return ok;
}

static bool never(void *arg)
{
    (void)arg;
    return false;
}

static void run_for(uint64_t ms) { (void)run_until(never, NULL, ms); }

/* ---------------------------------------------------------------- the fake node */

/* Applies skip the WAL: the entry must already be in this member's synced log, with the
 * term being applied (the store's last index moves only after the synced write). */
static bool own_log_holds(td_member *m, const kl_raft_entry *e)
{
    if (kl_store_last_index(m->store) < e->index)
        return false;
    uint8_t *buf = NULL;
    size_t len = 0;
    bool found = false;
    kl_err err;
    if (kl_store_read_log(m->store, e->index, &buf, &len, &found, &err) != KL_OK || !found)
        return false;
    Keyload__V1__LogEntry *le = keyload__v1__log_entry__unpack(NULL, len, buf);
    bool ok = le != NULL && le->term == e->term && le->index == e->index;
    if (le != NULL)
        keyload__v1__log_entry__free_unpacked(le, NULL);
    free(buf);
    return ok;
}

static void cb_apply(void *ctx, const kl_raft_entry *e)
{
    td_member *m = ctx;
    /* An installed snapshot holds every index below it: the store says so (its applied index
     * is the snapshot's), and applies go on from the index after it. */
    if (e->index > m->next_expect && kl_store_applied_index(m->store) == e->index - 1) {
        m->snapshots++;
        m->next_expect = e->index;
    }
    if (e->index != m->next_expect || e->index > TD_LOG || e->term == 0) {
        fprintf(stderr, "member %llu: apply of %llu, expected %llu\n", (unsigned long long)m->id,
                (unsigned long long)e->index, (unsigned long long)m->next_expect);
        m->bad++;
        return;
    }
    m->next_expect++;
    if (!own_log_holds(m, e)) {
        fprintf(stderr, "member %llu: apply of %llu before its own log write of it completed\n",
                (unsigned long long)m->id, (unsigned long long)e->index);
        m->bad++;
    }
    Keyload__V1__LogEntry *le = NULL, noop = KEYLOAD__V1__LOG_ENTRY__INIT;
    uint64_t cmd = 0;
    if (e->type == KL_RAFT_ENTRY_NOOP || e->type == KL_RAFT_ENTRY_CONF) {
        if (e->data != NULL || e->len != 0)
            m->bad++;
        noop.term = e->term;
        noop.index = e->index;
        noop.raft_type = e->type;
    } else {
        le = keyload__v1__log_entry__unpack(NULL, e->len, e->data);
        if (le == NULL || le->term != e->term || le->index != e->index || le->n_write_sets != 1 ||
            le->write_sets[0]->command_id.len != 16) {
            m->bad++;
            if (le != NULL)
                keyload__v1__log_entry__free_unpacked(le, NULL);
            return;
        }
        for (int i = 0; i < 8; i++)
            cmd = cmd << 8 | le->write_sets[0]->command_id.data[i];
    }
    /* A re-application after a restart must see what the first one saw. */
    if (m->term_at[e->index] != 0 &&
        (m->term_at[e->index] != e->term || m->cmd_at[e->index] != cmd))
        m->bad++;
    m->term_at[e->index] = e->term;
    m->cmd_at[e->index] = cmd;
    if (e->index > m->applied)
        m->applied = e->index;
    if (!m->lose_applies) {
        kl_err err;
        if (kl_store_apply(m->store, le ? le : &noop, &err) != KL_OK) {
            fprintf(stderr, "member %llu: store apply: %s\n", (unsigned long long)m->id, err.message);
            m->bad++;
        }
    }
    if (le != NULL)
        keyload__v1__log_entry__free_unpacked(le, NULL);
}

static void cb_role(void *ctx, kl_raft_role role, uint64_t term, uint64_t leader, bool ready)
{
    td_member *m = ctx;
    m->role_calls++;
    /* serving only for a leader; terms never go back */
    if ((ready && role != KL_RAFT_LEADER) || term < m->term)
        m->bad++;
    m->role = role;
    m->term = term;
    m->leader = leader;
    m->serving = ready;
}

static void cb_read_ready(void *ctx, uint64_t read_ctx)
{
    td_member *m = ctx;
    if (m->n_ready < TD_READS) {
        m->applied_at_ready[m->n_ready] = m->applied;
        m->ready[m->n_ready++] = read_ctx;
    }
}

static void cb_read_dropped(void *ctx, uint64_t read_ctx)
{
    td_member *m = ctx;
    if (m->n_dropped < TD_READS)
        m->dropped[m->n_dropped++] = read_ctx;
}

static void cb_fatal(void *ctx, const kl_err *err)
{
    td_member *m = ctx;
    fprintf(stderr, "member %llu: fatal: %s\n", (unsigned long long)m->id, err->message);
    m->fatal++;
}

static void cb_stopped(void *ctx)
{
    td_member *m = ctx;
    m->released = true;
}

/* ---------------------------------------------------------------- fixture */

static int td_seed_n; /* members the cluster file lists (0: all n_mem) */
static bool td_join[TD_MAX + 1]; /* started as a joining member (kl_repl_config.join) */

static bool td_auth; /* members link authenticated (their keys in config and directories) */
static uint32_t td_snap_threshold; /* 0: the driver's default compaction policy */
static uint32_t td_trace_every;    /* kl_repl_config.trace_every: 0 = off */

static void cluster_open(int n, uint32_t rc)
{
    td_snap_threshold = 0;
    td_trace_every = 0;
    td_auth = false;
    td_seed_n = 0;
    memset(td_join, 0, sizeof td_join);
    memset(mem, 0, sizeof mem);
    n_mem = n;
    replica_count = rc;
    next_cmd = 1;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    ck_assert_int_eq(uv_timer_init(&loop, &wake), 0);
    for (int i = 1; i <= n; i++) {
        td_member *m = &mem[i];
        m->id = (uint64_t)i;
        th_tmpdir_named(m->dir, sizeof m->dir, "kl-driver");
        snprintf(m->url, sizeof m->url, "tcp://127.0.0.1:%d", th_free_port());
        kl_err err;
        ck_assert_int_eq(kl_store_open(m->dir, NULL, &m->store, &err), KL_OK);
        ck_assert_int_ge(sodium_init(), 0);
        ck_assert_int_eq(crypto_sign_keypair(m->public_key, m->secret_key), 0);
    }
}

static void member_start(int id)
{
    td_member *m = &mem[id];
    ck_assert(!m->running);
    int seeds = td_seed_n ? td_seed_n : n_mem;
    kl_repl_config cfg = {.cluster = "unit-driver", .self = m->id, .n_members = (size_t)seeds,
                          .replica_count = replica_count, .tick_ms = 10, .election_ms = 500,
                          .heartbeat_ms = 50, .snapshot_threshold = td_snap_threshold,
                          .snapshot_trailing = td_snap_threshold ? 2 : 0};
    for (int i = 1; i <= seeds; i++) {
        cfg.members[i - 1] = (uint64_t)i;
        cfg.peer_urls[i - 1] = mem[i].url;
        if (td_auth)
            cfg.public_keys[i - 1] = mem[i].public_key;
    }
    if (td_auth)
        cfg.member_secret = m->secret_key;
    cfg.join = td_join[id];
    cfg.join_peer_url = m->url;
    cfg.trace_every = td_trace_every;
    kl_repl_callbacks cb = {.ctx = m, .apply = cb_apply, .role = cb_role,
                            .read_ready = cb_read_ready, .read_dropped = cb_read_dropped,
                            .fatal = cb_fatal, .stopped = cb_stopped};
    m->next_expect = kl_store_applied_index(m->store) + 1;
    m->released = false;
    m->role = KL_RAFT_FOLLOWER;
    m->serving = false;
    kl_err err;
    kl_code rc = kl_repl_start(&loop, m->store, &cfg, &cb, &m->repl, &err);
    /* A stopped member's peer socket closes once its connections went quiet (peer.h, the
     * nng 1.5.2 close workaround), which can be after the driver reported it stopped; a
     * restart on the same URL waits for the port, as a restarted process would not need to. */
    for (int tries = 0; rc == KL_UNAVAILABLE && strstr(err.message, "in use") && tries < 100; tries++) {
        run_for(100);
        rc = kl_repl_start(&loop, m->store, &cfg, &cb, &m->repl, &err);
    }
    ck_assert_msg(rc == KL_OK, "member %d start: %s", id, err.message);
    m->running = true;
}

static bool released(void *arg) { return ((td_member *)arg)->released; }

/* Stops the member's driver and waits until it released the store. */
static void member_stop(int id)
{
    td_member *m = &mem[id];
    ck_assert(m->running);
    kl_repl_stop(m->repl);
    m->repl = NULL;
    m->running = false;
    ck_assert(run_until(released, m, 5000));
}

/* A process restart: the store is closed and opened again (unsynced applies survive a clean
 * close; lose_applies is how a test loses them). */
static void member_reopen_store(int id)
{
    td_member *m = &mem[id];
    ck_assert(!m->running);
    kl_store_close(m->store);
    kl_err err;
    ck_assert_int_eq(kl_store_open(m->dir, NULL, &m->store, &err), KL_OK);
}

static void cluster_close(void)
{
    for (int i = 1; i <= n_mem; i++)
        if (mem[i].running)
            member_stop(i);
    uv_close((uv_handle_t *)&wake, NULL);
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    for (int i = 1; i <= n_mem; i++) {
        kl_store_close(mem[i].store);
        th_rmrf(mem[i].dir);
    }
    /* nng may free a closed socket's dialers on its reaper thread after nng_close returns;
     * give it time before the forked test exits, or LeakSanitizer can catch that teardown
     * half done (seen once under load: only indirect leaks, all nng dialer objects). A leak
     * of ours is still reported: it outlives any wait. */
    usleep(200 * 1000);
}

/* Every member applied the same (term, command) at every index both applied; no callback saw
 * a contract violation; no storage failure. */
static void check_consistent(void)
{
    for (int i = 1; i <= n_mem; i++) {
        ck_assert_msg(mem[i].bad == 0, "member %d saw %d violations", i, mem[i].bad);
        ck_assert_int_eq(mem[i].fatal, 0);
        for (int j = i + 1; j <= n_mem; j++)
            for (uint64_t x = 1; x <= TD_LOG; x++) {
                if (mem[i].term_at[x] == 0 || mem[j].term_at[x] == 0)
                    continue;
                ck_assert_msg(mem[i].term_at[x] == mem[j].term_at[x] &&
                                  mem[i].cmd_at[x] == mem[j].cmd_at[x],
                              "members %d and %d differ at index %llu", i, j,
                              (unsigned long long)x);
            }
    }
}

static int serving_leader(void)
{
    int found = 0;
    for (int i = 1; i <= n_mem; i++) {
        if (!mem[i].running)
            continue;
        kl_raft_status st;
        kl_repl_status(mem[i].repl, &st);
        if (st.role == KL_RAFT_LEADER && st.leader_ready && mem[i].serving)
            found = i;
    }
    return found;
}

static bool has_leader(void *arg)
{
    (void)arg;
    return serving_leader() != 0;
}

static int wait_leader(void)
{
    ck_assert_msg(run_until(has_leader, NULL, 10000), "no serving leader within 10 s");
    return serving_leader();
}

/* Encodes a LogEntry for command `cmd` where kl_repl_next says it will land, and proposes it. */
static kl_code propose_cmd(int id, uint64_t cmd, uint64_t *index_out)
{
    td_member *m = &mem[id];
    uint64_t index, term;
    bool serving;
    kl_repl_next(m->repl, &index, &term, &serving);
    uint8_t cid[16] = {0};
    for (int i = 0; i < 8; i++)
        cid[i] = (uint8_t)(cmd >> (56 - 8 * i));
    char key[32];
    snprintf(key, sizeof key, "test/k%llu", (unsigned long long)cmd);
    Keyload__V1__KvOp op = KEYLOAD__V1__KV_OP__INIT, *ops[1] = {&op};
    op.key.data = (uint8_t *)key;
    op.key.len = strlen(key);
    op.value.data = (uint8_t *)"v";
    op.value.len = 1;
    Keyload__V1__WriteSet ws = KEYLOAD__V1__WRITE_SET__INIT, *wss[1] = {&ws};
    ws.principal = "unit";
    ws.command_id.data = cid;
    ws.command_id.len = 16;
    ws.n_ops = 1;
    ws.ops = ops;
    Keyload__V1__LogEntry e = KEYLOAD__V1__LOG_ENTRY__INIT;
    e.term = term;
    e.index = index;
    e.time_unix_ms = 1700000000000 + (int64_t)cmd;
    e.n_write_sets = 1;
    e.write_sets = wss;
    uint8_t buf[256];
    size_t n = keyload__v1__log_entry__get_packed_size(&e);
    ck_assert_uint_le(n, sizeof buf);
    keyload__v1__log_entry__pack(&e, buf);
    uint64_t leader;
    kl_code rc = kl_repl_propose(m->repl, buf, n, &leader);
    if (rc == KL_OK && index_out != NULL)
        *index_out = index;
    return rc;
}

typedef struct td_applied {
    int id;
    uint64_t index;
} td_applied;

/* What the member holds applied: what the fake node applied, or an installed snapshot's
 * index (the store's applied index), whichever is higher. */
static uint64_t holds_applied(const td_member *m)
{
    uint64_t snap = m->lose_applies ? 0 : kl_store_applied_index(m->store);
    return snap > m->applied ? snap : m->applied;
}

static bool member_applied(void *arg)
{
    td_applied *a = arg;
    return holds_applied(&mem[a->id]) >= a->index;
}

/* Every running member applied index. */
static bool all_applied(void *arg)
{
    uint64_t index = *(uint64_t *)arg;
    for (int i = 1; i <= n_mem; i++)
        if (mem[i].running && !mem[i].leaving && holds_applied(&mem[i]) < index)
            return false;
    return true;
}

static void wait_all_applied(uint64_t index, uint64_t timeout_ms)
{
    ck_assert_msg(run_until(all_applied, &index, timeout_ms), "index %llu not applied everywhere",
                  (unsigned long long)index);
}

/* Proposes k commands on the leader back to back (pipelined, no loop run between) and
 * returns the index of the last. */
static uint64_t propose_many(int leader, int k)
{
    uint64_t last = 0;
    for (int i = 0; i < k; i++) {
        kl_code rc = propose_cmd(leader, next_cmd++, &last);
        ck_assert_msg(rc == KL_OK, "propose: %s", kl_code_name(rc));
    }
    return last;
}

/* ---------------------------------------------------------------- tests */

/* A 3-member, replica_count 3 cluster started, with a leader, and `warm` entries proposed
 * and applied everywhere (none when 0; *last, when not NULL, is the last one's index).
 * Returns the leader's id. */
static int three_with_leader(int warm, uint64_t *last)
{
    cluster_open(3, 3);
    for (int i = 1; i <= 3; i++)
        member_start(i);
    int l = wait_leader();
    uint64_t at = 0;
    if (warm > 0) {
        at = propose_many(l, warm);
        wait_all_applied(at, 10000);
    }
    if (last != NULL)
        *last = at;
    return l;
}

START_TEST(three_members_elect_and_replicate)
{
    cluster_open(3, 2);
    for (int i = 1; i <= 3; i++)
        member_start(i);
    int l = wait_leader();
    /* The no-op of the leader's term is applied on the leader before it serves. */
    ck_assert_uint_eq(mem[l].cmd_at[mem[l].applied], 0);
    ck_assert_uint_eq(mem[l].term_at[mem[l].applied], mem[l].term);
    uint64_t index, term;
    bool serving;
    kl_repl_next(mem[l].repl, &index, &term, &serving);
    ck_assert(serving);
    ck_assert_uint_eq(term, mem[l].term);
    /* Followers refuse proposals and name the leader. */
    int f = l % 3 + 1;
    uint64_t leader = 0;
    ck_assert_int_eq(kl_repl_propose(mem[f].repl, (const uint8_t *)"x", 1, &leader), KL_NOT_LEADER);
    ck_assert_uint_eq(leader, (uint64_t)l);
    /* Bytes that are not a LogEntry for (index, term) are refused before proposing. */
    uint8_t junk[] = {0x08, (uint8_t)term, 0x10, (uint8_t)(index + 5)};
    ck_assert_int_eq(kl_repl_propose(mem[l].repl, junk, sizeof junk, &leader), KL_INVALID_ARGUMENT);
    uint64_t last = propose_many(l, 50);
    ck_assert_uint_eq(last, index + 49);
    wait_all_applied(last, 10000);
    for (uint64_t x = index; x <= last; x++)
        ck_assert_uint_ne(mem[l].cmd_at[x], 0);
    /* More, proposed while rounds are in flight. */
    for (int round = 0; round < 10; round++) {
        last = propose_many(l, 5);
        run_for(3);
    }
    wait_all_applied(last, 10000);
    /* Read-index: confirmed, and served only once applied up to the read's index. */
    uint64_t commit_before = mem[l].applied;
    ck_assert_int_eq(kl_repl_read_index(mem[l].repl, 42, &leader), KL_OK);
    uint64_t deadline = mono_ms() + 5000;
    while (mem[l].n_ready == 0 && mono_ms() < deadline)
        run_for(5);
    ck_assert_uint_eq(mem[l].n_ready, 1);
    ck_assert_uint_eq(mem[l].ready[0], 42);
    ck_assert_uint_ge(mem[l].applied_at_ready[0], commit_before);
    ck_assert_int_eq(kl_repl_read_index(mem[f].repl, 43, &leader), KL_NOT_LEADER);
    ck_assert_uint_eq(leader, (uint64_t)l);
    kl_repl_counters c;
    kl_repl_counters_get(mem[l].repl, &c);
    ck_assert_uint_gt(c.persists, 0);
    ck_assert_uint_eq(c.refused, 0);
    check_consistent();
    cluster_close();
}
END_TEST

/* One at a time (a lone client): each entry costs the leader one synced write. A ready
 * that carries only a new commit index must not be taken for a term or vote change (which
 * would add an fsync per entry and hold the leader's appends behind its own write). */
START_TEST(one_synced_write_per_lone_entry)
{
    uint64_t last;
    int l = three_with_leader(3, &last);
    run_for(50);
    kl_repl_counters before, after;
    kl_repl_counters_get(mem[l].repl, &before);
    enum { N = 20 };
    for (int i = 0; i < N; i++) {
        last = propose_many(l, 1);
        uint64_t deadline = mono_ms() + 5000;
        while (mem[l].applied < last && mono_ms() < deadline)
            run_for(1);
        ck_assert_uint_ge(mem[l].applied, last);
    }
    kl_repl_counters_get(mem[l].repl, &after);
    uint64_t writes = after.persists - before.persists;
    ck_assert_msg(writes >= N && writes <= N + 2, "%llu synced writes for %d entries",
                  (unsigned long long)writes, N);
    check_consistent();
    cluster_close();
}
END_TEST

START_TEST(replica_count_three_blocks_then_catches_up)
{
    uint64_t last;
    int l = three_with_leader(10, &last);
    int down = l % 3 + 1;
    member_stop(down);
    /* Two of three persisted copies are not enough: nothing commits. */
    uint64_t blocked = propose_many(l, 5);
    run_for(1500);
    for (int i = 1; i <= 3; i++)
        ck_assert_uint_lt(mem[i].applied, blocked - 4);
    ck_assert_int_eq(serving_leader(), l); /* the leader keeps its place meanwhile */
    /* The member comes back over its store and catches up; the blocked entries commit. */
    member_start(down);
    wait_all_applied(blocked, 10000);
    last = propose_many(l, 5);
    wait_all_applied(last, 10000);
    check_consistent();
    cluster_close();
}
END_TEST

/* A member that led, wrote entries no other member has and crashed, comes back to find
 * those indexes taken by newer-term entries that already committed: one append both cuts
 * its suffix and commits the replacements. Applying a replacement before the write that
 * cuts the old entry leaves applied state ahead of the log; the store then refuses the cut
 * and the member stops (seen in make bench's failover runs). */
START_TEST(returning_leader_replaces_its_uncommitted_suffix)
{
    cluster_open(3, 2);
    for (int i = 1; i <= 3; i++)
        member_start(i);
    int l = wait_leader();
    uint64_t last = propose_many(l, 5);
    wait_all_applied(last, 10000);
    int a = l % 3 + 1, b = a % 3 + 1;
    member_stop(a);
    member_stop(b);
    uint64_t lost = propose_many(l, 3); /* durable on l only, never committed */
    run_for(300);
    member_stop(l);
    member_start(a);
    member_start(b);
    int l2 = wait_leader();
    ck_assert_int_ne(l2, l);
    last = propose_many(l2, 10);
    wait_all_applied(last, 10000);
    ck_assert_uint_gt(last, lost);
    member_start(l);
    wait_all_applied(last, 10000);
    ck_assert_int_eq(mem[l].fatal, 0);
    check_consistent();
    cluster_close();
}
END_TEST

static bool new_leader(void *arg)
{
    int old = *(int *)arg;
    int l = serving_leader();
    return l != 0 && l != old;
}

START_TEST(leader_failover)
{
    cluster_open(3, 2);
    for (int i = 1; i <= 3; i++)
        member_start(i);
    int l = wait_leader();
    uint64_t old_term = mem[l].term;
    uint64_t last = propose_many(l, 20);
    wait_all_applied(last, 10000);
    member_stop(l);
    ck_assert_msg(run_until(new_leader, &l, 10000), "no new leader");
    int l2 = serving_leader();
    ck_assert_uint_gt(mem[l2].term, old_term);
    last = propose_many(l2, 20);
    wait_all_applied(last, 10000);
    /* The old leader returns as a follower and catches up. */
    member_start(l);
    wait_all_applied(last, 10000);
    ck_assert_int_eq(serving_leader(), l2);
    last = propose_many(l2, 5);
    wait_all_applied(last, 10000);
    check_consistent();
    cluster_close();
}
END_TEST

START_TEST(restart_replays_from_applied)
{
    cluster_open(3, 2);
    for (int i = 1; i <= 3; i++)
        member_start(i);
    int l = wait_leader();
    uint64_t last = propose_many(l, 10);
    wait_all_applied(last, 10000);
    /* A follower loses its next applies (as a crash loses unsynced writes). */
    int f = l % 3 + 1;
    uint64_t lost_from = kl_store_applied_index(mem[f].store) + 1;
    mem[f].lose_applies = true;
    last = propose_many(l, 10);
    wait_all_applied(last, 10000);
    member_stop(f);
    mem[f].lose_applies = false;
    member_reopen_store(f);
    ck_assert_uint_eq(kl_store_applied_index(mem[f].store), lost_from - 1);
    ck_assert_uint_ge(kl_store_last_index(mem[f].store), last);
    /* The new instance applies from applied + 1 on: cb_apply checks next_expect. */
    mem[f].applied = lost_from - 1;
    member_start(f);
    wait_all_applied(last, 10000);
    ck_assert_uint_eq(kl_store_applied_index(mem[f].store), mem[f].applied);
    /* A cold restart of every member: nothing is applied twice, leaders are re-elected. */
    uint64_t applied_before[TD_MAX + 1];
    for (int i = 1; i <= 3; i++) {
        member_stop(i);
        member_reopen_store(i);
        applied_before[i] = kl_store_applied_index(mem[i].store);
        ck_assert_uint_eq(applied_before[i], mem[i].applied);
    }
    for (int i = 1; i <= 3; i++)
        member_start(i);
    l = wait_leader();
    last = propose_many(l, 10);
    wait_all_applied(last, 10000);
    for (int i = 1; i <= 3; i++)
        ck_assert_uint_eq(kl_store_applied_index(mem[i].store), mem[i].applied);
    check_consistent();
    cluster_close();
}
END_TEST

/* A commit learnt after the last synced write is not written anywhere (a commit-only ready
 * writes nothing): after a clean restart the stored commit lags the applied index, and the
 * member starts from the applied index, applies nothing twice and goes on. */
START_TEST(commit_only_readies_write_nothing)
{
    uint64_t last;
    int l = three_with_leader(10, &last);
    run_for(300); /* heartbeats: every member learns the last commit */
    for (int i = 1; i <= 3; i++) {
        kl_raft_status st;
        kl_repl_status(mem[i].repl, &st);
        ck_assert_uint_eq(st.commit, last);
    }
    int f = l % 3 + 1;
    member_stop(f);
    member_reopen_store(f);
    uint64_t term, vote, commit;
    kl_err err;
    ck_assert_int_eq(kl_store_load_hard(mem[f].store, &term, &vote, &commit, &err), KL_OK);
    uint64_t applied = kl_store_applied_index(mem[f].store);
    ck_assert_uint_eq(applied, last); /* a clean close keeps the applies */
    ck_assert_msg(commit < applied, "stored commit %llu, applied %llu: a commit-only ready was written",
                  (unsigned long long)commit, (unsigned long long)applied);
    member_start(f);
    kl_raft_status st;
    kl_repl_status(mem[f].repl, &st);
    ck_assert_uint_ge(st.commit, applied);
    last = propose_many(l, 5);
    wait_all_applied(last, 10000);
    check_consistent();
    cluster_close();
}
END_TEST

/* ---------------------------------------------------------------- membership */

/* An encoded MemberDirectory naming members 1..n with their peer URLs. */
static size_t td_directory(int n, uint8_t *buf, size_t cap)
{
    Keyload__V1__MemberInfo info[TD_MAX], *ptrs[TD_MAX];
    for (int i = 0; i < n; i++) {
        keyload__v1__member_info__init(&info[i]);
        info[i].id = (uint64_t)(i + 1);
        info[i].peer_url = mem[i + 1].url;
        info[i].client_url = "tcp://127.0.0.1:1";
        if (td_auth) {
            info[i].public_key.data = mem[i + 1].public_key;
            info[i].public_key.len = sizeof mem[i + 1].public_key;
        }
        ptrs[i] = &info[i];
    }
    Keyload__V1__MemberDirectory d = KEYLOAD__V1__MEMBER_DIRECTORY__INIT;
    d.n_members = (size_t)n;
    d.members = ptrs;
    size_t len = keyload__v1__member_directory__get_packed_size(&d);
    ck_assert_uint_le(len, cap);
    return keyload__v1__member_directory__pack(&d, buf);
}

typedef struct td_conf_wait {
    int id;
    uint32_t replica_count;
} td_conf_wait;

/* The member's configuration in effect is committed, not joint, with this replica_count. */
static bool conf_committed(void *arg)
{
    td_conf_wait *w = arg;
    kl_raft_conf c;
    uint64_t index;
    bool committed;
    kl_repl_conf(mem[w->id].repl, &c, &index, &committed);
    return committed && index > 0 && c.n_old == 0 && c.replica_count == w->replica_count;
}

/* Runs the change from {1,2,3} at 2-of-3 to 3-of-3 on the leader: joint, then leave. */
static void change_to_3of3(int l, const uint8_t *dir, size_t dir_len)
{
    uint64_t v[3] = {1, 2, 3};
    kl_raft_conf target = {.n_members = 3, .replica_count = 3};
    memcpy(target.members, v, sizeof v);
    uint64_t index, leader;
    kl_err err;
    for (int step = 0; step < 2; step++) {
        kl_code rc;
        for (int tries = 0; (rc = kl_repl_propose_conf(mem[l].repl, &target, dir, dir_len, &index,
                                                       &leader, &err)) == KL_UNAVAILABLE && tries < 200; tries++)
            run_for(20); /* the joint entry commits before its leave step may follow */
        ck_assert_msg(rc == KL_OK, "step %d: %s (%s)", step, kl_code_name(rc), err.message);
        ck_assert_uint_gt(index, 0);
        wait_all_applied(index, 10000);
    }
    td_conf_wait w = {.id = l, .replica_count = 3};
    ck_assert(run_until(conf_committed, &w, 10000));
}

static void restart_all(void)
{
    for (int i = 1; i <= n_mem; i++) {
        member_stop(i);
        member_reopen_store(i);
    }
    for (int i = 1; i <= n_mem; i++)
        member_start(i); /* with the cluster file's 2-of-3 (member_start) */
}

/* raft.h "Membership" (a), (c), (d): CONF entries are persisted, applied (as no-ops for the
 * state machine) and found again at restart, so the configuration they hold, not the cluster
 * file's, is the one in effect after a restart of every member. Fails when the driver
 * refuses CONF entries or restarts from the cluster file. */
START_TEST(configuration_survives_restart)
{
    cluster_open(3, 2);
    for (int i = 1; i <= 3; i++)
        member_start(i);
    int l = wait_leader();
    uint64_t last = propose_many(l, 5);
    wait_all_applied(last, 10000);
    uint8_t dir[1024];
    size_t dir_len = td_directory(3, dir, sizeof dir);
    change_to_3of3(l, dir, dir_len);
    for (int i = 1; i <= 3; i++) {
        kl_raft_status st;
        kl_repl_status(mem[i].repl, &st);
        ck_assert_uint_eq(st.q2, 3);
    }
    restart_all();
    l = wait_leader();
    for (int i = 1; i <= 3; i++) {
        kl_raft_status st;
        kl_repl_status(mem[i].repl, &st);
        ck_assert_uint_eq(st.q2, 3); /* the log's configuration, not the cluster file's 2 */
        ck_assert(!st.joint);
        ck_assert_uint_gt(st.conf_index, 0);
    }
    last = propose_many(l, 5);
    wait_all_applied(last, 10000);
    check_consistent();
    cluster_close();
}
END_TEST

/* raft.h "Membership" (c): a compaction past the CONF entries stores the configuration, with
 * its member directory, as 'M'"log_start"'s; a restart takes it from there (the log no
 * longer holds the entry). Fails when compaction stores no configuration (the restart would
 * fall back to the cluster file's 2-of-3). */
START_TEST(configuration_survives_compaction_and_restart)
{
    cluster_open(3, 2);
    td_snap_threshold = 8;
    for (int i = 1; i <= 3; i++)
        member_start(i);
    int l = wait_leader();
    uint8_t dir[1024];
    size_t dir_len = td_directory(3, dir, sizeof dir);
    change_to_3of3(l, dir, dir_len);
    uint64_t last = 0;
    for (int k = 0; k < 6; k++) { /* well past the threshold: every member compacts */
        last = propose_many(l, 10);
        wait_all_applied(last, 10000);
    }
    for (int i = 1; i <= 3; i++) {
        kl_raft_status st;
        kl_repl_status(mem[i].repl, &st);
        ck_assert_uint_gt(st.snap_index, st.conf_index); /* the CONF entries were compacted */
        uint64_t first, prev_term;
        uint8_t *blob = NULL;
        size_t len = 0;
        kl_err err;
        ck_assert_int_eq(kl_store_log_start(mem[i].store, &first, &prev_term, &blob, &len, &err), KL_OK);
        kl_raft_conf c;
        size_t off = 0;
        ck_assert_ptr_nonnull(blob);
        ck_assert_int_eq(kl_raft_conf_decode(blob, len, &c, &off, &err), KL_OK);
        ck_assert_uint_eq(c.replica_count, 3);
        ck_assert_uint_eq(len - off, dir_len); /* the directory travels with it */
        ck_assert_int_eq(memcmp(blob + off, dir, dir_len), 0);
        free(blob);
    }
    restart_all();
    l = wait_leader();
    for (int i = 1; i <= 3; i++) {
        kl_raft_status st;
        kl_repl_status(mem[i].repl, &st);
        ck_assert_uint_eq(st.q2, 3);
        ck_assert_uint_eq(st.conf_index, 0); /* from the stored base, not the log */
    }
    last = propose_many(l, 5);
    wait_all_applied(last, 10000);
    check_consistent();
    cluster_close();
}
END_TEST

typedef struct td_conf_is {
    int id;
    kl_raft_conf want;
} td_conf_is;

/* The member's configuration in effect is `want`, committed. */
static bool conf_is(void *arg)
{
    td_conf_is *w = arg;
    kl_raft_conf c;
    uint64_t index;
    bool committed;
    kl_repl_conf(mem[w->id].repl, &c, &index, &committed);
    c.n_old = w->want.n_old; /* compare the voters and learners the caller cares about */
    return committed && c.n_members == w->want.n_members && c.n_learners == w->want.n_learners &&
           c.replica_count == w->want.replica_count &&
           !memcmp(c.members, w->want.members, c.n_members * sizeof c.members[0]);
}

/* Proposes every step towards target on the leader until it is in effect everywhere. */
static void change_to(int l, const kl_raft_conf *target, const uint8_t *dir, size_t dir_len)
{
    for (int step = 0; step < 3; step++) {
        uint64_t index = 0, leader;
        kl_err err;
        kl_code rc;
        for (int tries = 0; (rc = kl_repl_propose_conf(mem[l].repl, target, dir, dir_len, &index,
                                                       &leader, &err)) == KL_UNAVAILABLE && tries < 500; tries++)
            run_for(20); /* the previous step commits, or a learner catches up */
        ck_assert_msg(rc == KL_OK, "step %d: %s (%s)", step, kl_code_name(rc), err.message);
        if (index == 0)
            return; /* target in effect */
        wait_all_applied(index, 15000);
    }
}

/* raft.h "Membership" (b), (e): a NEW member started with an empty store in join mode (not in
 * the cluster file's members) is added as a learner, takes the leader's log, is promoted
 * through the joint step and then counts in every commit; the peer transports connect to it
 * at run time from the directory the learner entry carried; a restart of all three keeps it
 * a voter. Fails without kl_peer_add on conf_changed (the leader never reaches member 3) or
 * without the join mode (member 3 refuses to start). */
START_TEST(new_member_joins_and_is_promoted)
{
    cluster_open(3, 2);
    td_seed_n = 2; /* the cluster file names members 1 and 2 */
    member_start(1);
    member_start(2);
    int l = wait_leader();
    uint64_t last = propose_many(l, 5);
    wait_all_applied(last, 10000);
    uint8_t dir[1024];
    size_t dir_len = td_directory(3, dir, sizeof dir);
    kl_raft_conf learner = {.n_members = 2, .replica_count = 2, .members = {1, 2},
                            .n_learners = 1, .learners = {3}};
    change_to(l, &learner, dir, dir_len);
    td_join[3] = true;
    member_start(3);
    last = propose_many(l, 5);
    wait_all_applied(last, 15000); /* member 3 applied everything: it holds the log */
    kl_raft_conf voters = {.n_members = 3, .replica_count = 2, .members = {1, 2, 3}};
    change_to(l, &voters, dir, dir_len);
    for (int i = 1; i <= 3; i++) {
        td_conf_is w = {.id = i, .want = voters};
        ck_assert_msg(run_until(conf_is, &w, 10000), "member %d: not 2-of-{1,2,3}", i);
    }
    /* 2-of-3 with member 3 counting: stop the other follower, writes still commit. */
    int other = l == 1 ? 2 : 1;
    member_stop(other);
    last = propose_many(l, 5);
    td_applied a = {.id = 3, .index = last};
    ck_assert_msg(run_until(member_applied, &a, 10000), "member 3 does not count in commits");
    member_reopen_store(other);
    member_start(other);
    wait_all_applied(last, 10000);
    restart_all();
    l = wait_leader();
    for (int i = 1; i <= 3; i++) {
        kl_raft_status st;
        kl_repl_status(mem[i].repl, &st);
        ck_assert_uint_gt(st.conf_index, 0);
        td_conf_is w = {.id = i, .want = voters};
        ck_assert(conf_is(&w));
    }
    last = propose_many(l, 5);
    wait_all_applied(last, 10000);
    check_consistent();
    cluster_close();
}
END_TEST

/* Some running member leads (serving or not: its no-op may wait for the stopped one). */
static bool has_any_leader(void *arg)
{
    (void)arg;
    for (int i = 1; i <= n_mem; i++) {
        kl_raft_status st;
        if (mem[i].running && (kl_repl_status(mem[i].repl, &st), st.role == KL_RAFT_LEADER))
            return true;
    }
    return false;
}

/* Stops whoever else leads (and starts it again) until an election picks member id; the
 * running members must still form an election quorum without the stopped one. */
static int lead_with(int id)
{
    int l;
    for (int round = 0; round < 30 && (l = wait_leader()) != id; round++) {
        member_stop(l);
        ck_assert_msg(run_until(has_any_leader, NULL, 10000), "round %d: no leader without %d", round, l);
        member_reopen_store(l);
        member_start(l);
    }
    l = wait_leader();
    ck_assert_msg(l == id, "member %d did not win an election in 30 rounds", id);
    return l;
}

/* Five member slots at replica_count 2, of which the cluster file names 1, 2 and 3: those
 * are started; returns the serving leader. */
static int start_seed_three(void)
{
    cluster_open(5, 2);
    td_seed_n = 3;
    for (int i = 1; i <= 3; i++)
        member_start(i);
    return wait_leader();
}

/* driver.c peer_kept: a new learner replays the log from its start, so for a while the
 * configuration in effect on it is an old one that does not name the member leading now. Its
 * transport keeps the link to its seed members and to the leader it follows, so the entries
 * that name that leader still arrive. Here member 4 joined after the two configuration entries
 * of {1,2,3} and leads; learner 5's first append (1024 entries, the most one message holds)
 * ends past those entries and before the one that added 4. Fails when the transport follows
 * the configuration in effect alone: member 5 drops member 4's link and never applies more. */
START_TEST(learner_replaying_old_configuration_keeps_its_leader)
{
    int l = start_seed_three();
    uint8_t dir[1024];
    size_t dir_len = td_directory(5, dir, sizeof dir);
    /* Six configuration entries in all: the driver compacts at eight (conf pressure), and a
       snapshot would spare learner 5 the old configuration this test is about. */
    kl_raft_conf three = {.n_members = 3, .replica_count = 3, .members = {1, 2, 3}};
    change_to(l, &three, dir, dir_len);
    uint64_t last = propose_many(l, KL_RAFT_MAX_MSG_ENTRIES + 100);
    wait_all_applied(last, 20000);
    kl_raft_conf learner4 = three;
    learner4.n_learners = 1;
    learner4.learners[0] = 4;
    change_to(l, &learner4, dir, dir_len);
    td_join[4] = true;
    member_start(4);
    last = propose_many(l, 5);
    wait_all_applied(last, 15000);
    kl_raft_conf four = {.n_members = 4, .replica_count = 3, .members = {1, 2, 3, 4}};
    change_to(l, &four, dir, dir_len);
    l = lead_with(4);
    kl_raft_conf learner5 = four;
    learner5.n_learners = 1;
    learner5.learners[0] = 5;
    change_to(l, &learner5, dir, dir_len);
    td_seed_n = 4; /* member 5's join file names the four voters */
    td_join[5] = true;
    member_start(5);
    last = propose_many(l, 5);
    td_applied a = {.id = 5, .index = last};
    ck_assert_msg(run_until(member_applied, &a, 15000), "learner 5 stalled at %llu of %llu",
                  (unsigned long long)mem[5].applied, (unsigned long long)last);
    check_consistent();
    cluster_close();
}
END_TEST

/* driver.c peer_kept: member 3 is down while members 4 and 5 join and member 4 comes to
 * lead. Restarted, member 3 finds in its store the configuration {1,2,3}, which does
 * not name the leader; its cluster file does (as an operator updates it after a change).
 * Member 4 has the higher id, so it dials member 3, which must know it to let it in. Fails
 * when the transport follows the stored configuration alone: member 3 refuses the leader's
 * link and lags for ever while the others commit without it. */
START_TEST(restarted_member_that_missed_a_change_reaches_the_new_leader)
{
    int l = start_seed_three();
    if (l == 3)
        l = lead_with(1);
    uint8_t dir[1024];
    size_t dir_len = td_directory(5, dir, sizeof dir);
    /* Member 3's store holds a replicated configuration (so the cluster file no longer says
       who the members are for it): replica_count 3, then 2 again. Seven configuration
       entries in all, below the eight at which the driver compacts. */
    kl_raft_conf three = {.n_members = 3, .replica_count = 3, .members = {1, 2, 3}};
    change_to(l, &three, dir, dir_len);
    three.replica_count = 2;
    change_to(l, &three, dir, dir_len);
    uint64_t last = propose_many(l, 5);
    wait_all_applied(last, 10000);
    member_stop(3);
    member_reopen_store(3);
    kl_raft_conf learners = {.n_members = 3, .replica_count = 2, .members = {1, 2, 3},
                             .n_learners = 2, .learners = {4, 5}};
    change_to(l, &learners, dir, dir_len);
    td_join[4] = td_join[5] = true;
    member_start(4);
    member_start(5);
    last = propose_many(l, 5);
    wait_all_applied(last, 15000);
    /* 3 of 5 voters elect and commit, so the leader can be stopped while member 3 is down. */
    kl_raft_conf five = {.n_members = 5, .replica_count = 3, .members = {1, 2, 3, 4, 5}};
    change_to(l, &five, dir, dir_len);
    l = lead_with(4);
    last = propose_many(l, 5);
    wait_all_applied(last, 15000);
    td_seed_n = 5; /* the updated cluster file names all five */
    member_start(3);
    last = propose_many(l, 5);
    td_applied a = {.id = 3, .index = last};
    ck_assert_msg(run_until(member_applied, &a, 15000), "member 3 stalled at %llu of %llu",
                  (unsigned long long)mem[3].applied, (unsigned long long)last);
    td_conf_is w = {.id = 3, .want = five};
    ck_assert_msg(run_until(conf_is, &w, 5000), "member 3 does not hold {1,2,3,4,5}");
    check_consistent();
    cluster_close();
}
END_TEST

static bool snapshot_installed(void *arg)
{
    td_member *m = arg;
    kl_raft_status st;
    kl_repl_status(m->repl, &st);
    return st.snap_index > m->applied;
}

/* confstore.h kl_confstore_rebase: member 3 is down while member 4 replaces member 2, and
 * the log that did it is compacted, so member 3, restarted with a cluster file that names 1,
 * 2 and 3 only, learns of member 4 from the snapshot it installs alone. Links are
 * authenticated: member 4 (the higher id) dials member 3, which lets it in only with its
 * key. With member 1 then stopped, 3 and 4 are an election quorum of {1,3,4} and must elect
 * one of them. Fails when an installed snapshot's configuration is made current without its
 * directory being learnt: member 3 knows no key for member 4 ("member 4 has no public key")
 * and neither can win. */
START_TEST(snapshot_install_teaches_new_members_keys)
{
    cluster_open(4, 2);
    td_auth = true;
    td_snap_threshold = KL_SNAP_THRESHOLD_MIN;
    td_seed_n = 3;
    for (int i = 1; i <= 3; i++)
        member_start(i);
    int l = lead_with(1);
    uint8_t dir[1024];
    size_t dir_len = td_directory(4, dir, sizeof dir);
    member_stop(3);
    member_reopen_store(3);
    kl_raft_conf learner = {.n_members = 3, .replica_count = 2, .members = {1, 2, 3},
                            .n_learners = 1, .learners = {4}};
    change_to(l, &learner, dir, dir_len);
    td_join[4] = true;
    member_start(4);
    uint64_t last = propose_many(l, 5);
    wait_all_applied(last, 15000);
    kl_raft_conf target = {.n_members = 3, .replica_count = 2, .members = {1, 3, 4}};
    mem[2].leaving = true;
    change_to(l, &target, dir, dir_len);
    member_stop(2);
    for (int k = 0; k < 4; k++) { /* well past the threshold: the CONF entries are compacted */
        last = propose_many(l, 10);
        wait_all_applied(last, 10000);
    }
    kl_raft_status st;
    kl_repl_status(mem[l].repl, &st);
    ck_assert_uint_gt(st.snap_index, mem[3].applied); /* its log no longer reaches member 3 */
    member_start(3); /* the cluster file still names 1, 2 and 3 */
    ck_assert_msg(run_until(snapshot_installed, &mem[3], 15000), "member 3 installed no snapshot");
    last = propose_many(l, 5); /* applied past the snapshot, so the fake node sees it */
    td_applied a = {.id = 3, .index = last};
    ck_assert_msg(run_until(member_applied, &a, 15000), "member 3 stalled at %llu of %llu",
                  (unsigned long long)mem[3].applied, (unsigned long long)last);
    ck_assert_int_ge(mem[3].snapshots, 1);
    td_conf_is w = {.id = 3, .want = target};
    ck_assert_msg(conf_is(&w), "member 3 does not hold {1,3,4}");
    const kl_confstore_member *four = kl_repl_member(mem[3].repl, 4);
    ck_assert_ptr_nonnull(four);
    ck_assert(four->has_key);
    ck_assert_int_eq(memcmp(four->public_key, mem[4].public_key, 32), 0);
    member_stop(1);
    ck_assert_msg(run_until(has_any_leader, NULL, 15000), "members 3 and 4 elect no leader");
    l = wait_leader();
    last = propose_many(l, 5);
    wait_all_applied(last, 10000);
    check_consistent();
    cluster_close();
}
END_TEST

/* driver.c maybe_compact: the configuration history past the snapshot point is bounded
 * (KL_RAFT_MAX_CONF_HISTORY) and the default thresholds never compact a log this short, so
 * without the driver compacting under that pressure the ninth replica_count change (two
 * entries each) is refused for good ("compact first"). */
START_TEST(many_configuration_changes_compact_their_history)
{
    cluster_open(3, 2);
    for (int i = 1; i <= 3; i++)
        member_start(i);
    int l = wait_leader();
    uint64_t last = propose_many(l, 3);
    wait_all_applied(last, 10000);
    uint8_t dir[1024];
    size_t dir_len = td_directory(3, dir, sizeof dir);
    for (int k = 0; k < KL_RAFT_MAX_CONF_HISTORY; k++) {
        kl_raft_conf t = {.n_members = 3, .replica_count = k % 2 == 0 ? 3 : 2, .members = {1, 2, 3}};
        change_to(l, &t, dir, dir_len);
        for (int i = 1; i <= 3; i++) {
            td_conf_is w = {.id = i, .want = t};
            ck_assert_msg(run_until(conf_is, &w, 10000), "change %d: member %d not there", k, i);
        }
    }
    kl_raft_status st;
    kl_repl_status(mem[l].repl, &st);
    ck_assert_uint_gt(st.snap_index, 0);
    ck_assert_uint_lt(st.conf_entries, KL_RAFT_MAX_CONF_HISTORY / 2 + 3);
    last = propose_many(l, 3);
    wait_all_applied(last, 10000);
    check_consistent();
    cluster_close();
}
END_TEST

START_TEST(read_dropped_when_leadership_lost)
{
    int l = three_with_leader(3, NULL);
    for (int i = 1; i <= 3; i++)
        if (i != l)
            member_stop(i);
    uint64_t leader;
    ck_assert_int_eq(kl_repl_read_index(mem[l].repl, 7, &leader), KL_OK);
    ck_assert_int_eq(kl_repl_read_index(mem[l].repl, 8, &leader), KL_OK);
    /* Alone, the leader steps down after an election timeout (check-quorum): both reads drop. */
    uint64_t deadline = mono_ms() + 5000;
    while (mem[l].n_dropped < 2 && mono_ms() < deadline)
        run_for(10);
    ck_assert_uint_eq(mem[l].n_dropped, 2);
    ck_assert_uint_eq(mem[l].dropped[0], 7);
    ck_assert_uint_eq(mem[l].dropped[1], 8);
    ck_assert_uint_eq(mem[l].n_ready, 0);
    ck_assert_int_ne(mem[l].role, KL_RAFT_LEADER);
    ck_assert(!mem[l].serving);
    check_consistent();
    cluster_close();
}
END_TEST

enum { TD_SHARED_READS = 10 };

static bool shared_reads_ready(void *arg)
{
    const td_member *m = arg;
    return m->n_ready >= TD_SHARED_READS;
}

/* Reads queued in one loop iteration share one confirmation round: none is answered from
 * inside kl_repl_read_index, all are served in order, and the leader sends one heartbeat
 * per follower for them (plus the periodic ones of the time the round took), not a round
 * each. */
START_TEST(reads_of_one_iteration_share_a_round)
{
    int l = three_with_leader(3, NULL);
    run_for(20);
    kl_peer_counters before, after;
    kl_repl_peer_stats(mem[l].repl, &before);
    uint64_t t0 = mono_ms(), leader;
    for (uint64_t ctx = 100; ctx < 100 + TD_SHARED_READS; ctx++)
        ck_assert_int_eq(kl_repl_read_index(mem[l].repl, ctx, &leader), KL_OK);
    ck_assert_uint_eq(mem[l].n_ready, 0);
    ck_assert(run_until(shared_reads_ready, &mem[l], 5000));
    uint64_t took_ms = mono_ms() - t0;
    kl_repl_peer_stats(mem[l].repl, &after);
    for (uint64_t i = 0; i < TD_SHARED_READS; i++)
        ck_assert_uint_eq(mem[l].ready[i], 100 + i);
    ck_assert_uint_eq(mem[l].n_dropped, 0);
    /* heartbeat_ms is 50: a round each would have sent 20 frames in a few milliseconds. */
    uint64_t periodic = 2 * (took_ms / 50 + 1);
    ck_assert_uint_le(after.sent - before.sent, 2 + periodic);
    check_consistent();
    cluster_close();
}
END_TEST

START_TEST(single_member)
{
    cluster_open(1, 1);
    member_start(1);
    int l = wait_leader();
    ck_assert_int_eq(l, 1);
    uint64_t last = propose_many(1, 30);
    wait_all_applied(last, 5000);
    uint64_t leader;
    ck_assert_int_eq(kl_repl_read_index(mem[1].repl, 9, &leader), KL_OK);
    uint64_t deadline = mono_ms() + 5000;
    while (mem[1].n_ready == 0 && mono_ms() < deadline)
        run_for(5);
    ck_assert_uint_eq(mem[1].n_ready, 1);
    ck_assert_uint_eq(mem[1].ready[0], 9);
    /* Restart after losing some applies: the log replays them, then the member leads again. */
    uint64_t lost_from = kl_store_applied_index(mem[1].store) + 1;
    mem[1].lose_applies = true;
    last = propose_many(1, 5);
    wait_all_applied(last, 5000);
    member_stop(1);
    mem[1].lose_applies = false;
    member_reopen_store(1);
    ck_assert_uint_eq(kl_store_applied_index(mem[1].store), lost_from - 1);
    mem[1].applied = lost_from - 1;
    member_start(1);
    td_applied a = {1, last};
    ck_assert(run_until(member_applied, &a, 5000));
    l = wait_leader();
    last = propose_many(1, 5);
    wait_all_applied(last, 5000);
    ck_assert_uint_eq(kl_store_applied_index(mem[1].store), last);
    kl_raft_status st;
    kl_repl_status(mem[1].repl, &st);
    ck_assert_uint_eq(st.commit, last);
    ck_assert_uint_eq(st.q1, 1);
    ck_assert_uint_eq(st.q2, 1);
    check_consistent();
    cluster_close();
}
END_TEST

/* ---------------------------------------------------------------- refusals
 *
 * Member 1 is a driver; member 2 is a bare kl_peer the test speaks through, so the frames
 * reach the driver over a real, handshaken connection from member 2. */

typedef struct td_raw {
    uint64_t got;
    uint64_t last_type, last_to, last_from;
} td_raw;

static void raw_recv(void *owner, uint64_t from, const uint8_t *frame, size_t len)
{
    td_raw *w = owner;
    Keyload__V1__RaftMessage *m = keyload__v1__raft_message__unpack(NULL, len, frame);
    if (m == NULL)
        return;
    w->got++;
    w->last_type = m->type;
    w->last_to = m->to;
    w->last_from = m->from == from ? m->from : 0;
    keyload__v1__raft_message__free_unpacked(m, NULL);
}

static bool raw_connected(void *arg) { return kl_peer_connected((kl_peer *)arg, 1); }

static void raw_send(kl_peer *p, const Keyload__V1__RaftMessage *m)
{
    size_t n = keyload__v1__raft_message__get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);
    keyload__v1__raft_message__pack(m, buf);
    ck_assert_int_eq(kl_peer_send(p, 1, buf, n), KL_OK);
    free(buf);
}

static bool refused_at_least(void *arg)
{
    kl_repl_counters c;
    kl_repl_counters_get(mem[1].repl, &c);
    return c.refused >= *(uint64_t *)arg;
}

static bool follows_two(void *arg)
{
    (void)arg;
    return mem[1].leader == 2 && mem[1].role == KL_RAFT_FOLLOWER;
}

START_TEST(refuses_bad_frames)
{
    cluster_open(2, 2);
    member_start(1);
    td_raw w = {0};
    /* The members' own replication configuration, so that its hello is accepted. */
    kl_peer_config pc = {.cluster = "unit-driver", .self = 2, .listen_url = mem[2].url,
                         .n_peers = 1, .recv = raw_recv, .owner = &w,
                         .config_index = KL_REPL_CONFIG_INDEX, .replica_count = 2};
    pc.peers[0].id = 1;
    pc.peers[0].url = mem[1].url;
    kl_peer *p;
    kl_err err;
    ck_assert_int_eq(kl_peer_start(&loop, &pc, &p, &err), KL_OK);
    ck_assert(run_until(raw_connected, p, 5000));

    uint64_t want = 0;
    /* 1. not a RaftMessage */
    uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0xff};
    ck_assert_int_eq(kl_peer_send(p, 1, junk, sizeof junk), KL_OK);
    want++;
    /* 2. from a member other than the connection's */
    Keyload__V1__RaftMessage m = KEYLOAD__V1__RAFT_MESSAGE__INIT;
    m.type = KL_RAFT_MSG_HEARTBEAT;
    m.from = 3;
    m.to = 1;
    m.term = 5;
    raw_send(p, &m);
    want++;
    /* 3. to another member */
    m.from = 2;
    m.to = 7;
    raw_send(p, &m);
    want++;
    /* 4. unknown type */
    m.to = 1;
    m.type = 99;
    raw_send(p, &m);
    want++;
    /* 5. too many entries */
    m.type = KL_RAFT_MSG_APPEND;
    size_t many = KL_RAFT_MAX_MSG_ENTRIES + 1;
    Keyload__V1__RaftEntry *ents = calloc(many, sizeof *ents);
    Keyload__V1__RaftEntry **ptrs = calloc(many, sizeof *ptrs);
    for (size_t i = 0; i < many; i++) {
        keyload__v1__raft_entry__init(&ents[i]);
        ents[i].term = 5;
        ents[i].index = i + 1;
        ents[i].type = KL_RAFT_ENTRY_NOOP;
        ptrs[i] = &ents[i];
    }
    m.entries = ptrs;
    m.n_entries = many;
    raw_send(p, &m);
    want++;
    /* 6. a normal entry whose bytes are not a LogEntry of its term and index */
    uint8_t bad_entry[] = {0x08, 0x05, 0x10, 0x09}; /* term 5, index 9 */
    ents[0].type = KL_RAFT_ENTRY_NORMAL;
    ents[0].data.data = bad_entry;
    ents[0].data.len = sizeof bad_entry;
    m.n_entries = 1;
    raw_send(p, &m);
    want++;
    /* 7. a no-op carrying data */
    ents[0].type = KL_RAFT_ENTRY_NOOP;
    raw_send(p, &m);
    want++;
    /* 8. the core refuses it (entry index does not follow the message's index) */
    ents[0].data.len = 0;
    ents[0].data.data = NULL;
    m.index = 3;
    m.log_term = 1;
    raw_send(p, &m);
    want++;
    free(ents);
    free(ptrs);
    ck_assert_msg(run_until(refused_at_least, &want, 5000), "not every bad frame was refused");
    run_for(50);
    kl_repl_counters c;
    kl_repl_counters_get(mem[1].repl, &c);
    ck_assert_uint_eq(c.refused, want);
    ck_assert_int_eq(mem[1].fatal, 0);
    ck_assert_uint_eq(mem[1].term, 0);

    /* A well-formed heartbeat from member 2 in term 5 makes member 1 follow it, and the
     * answer comes back encoded as a RaftMessage from 1 to 2. */
    Keyload__V1__RaftMessage hb = KEYLOAD__V1__RAFT_MESSAGE__INIT;
    hb.type = KL_RAFT_MSG_HEARTBEAT;
    hb.from = 2;
    hb.to = 1;
    hb.term = 5;
    raw_send(p, &hb);
    ck_assert(run_until(follows_two, NULL, 5000));
    ck_assert_uint_eq(mem[1].term, 5);
    uint64_t deadline = mono_ms() + 2000;
    while (w.last_type != KL_RAFT_MSG_HEARTBEAT_RESP && mono_ms() < deadline)
        run_for(5);
    ck_assert_uint_eq(w.last_type, KL_RAFT_MSG_HEARTBEAT_RESP);
    ck_assert_uint_eq(w.last_from, 1);
    ck_assert_uint_eq(w.last_to, 2);
    kl_peer_stop(p);
    check_consistent();
    cluster_close();
}
END_TEST

/* With every synced log write slow (the store.log_write failpoint sleeps), entries that
 * committed on an earlier write are applied while the next write runs (early_applies), and
 * still never before this member's own write of them completed (cb_apply checks the store's
 * log at every apply, on every member). */
START_TEST(applies_while_a_slow_write_runs)
{
    int l = three_with_leader(0, NULL);
    kl_err err;
    ck_assert_int_eq(kl_failpoint_configure("store.log_write=sleep(40)", &err), KL_OK);
    uint64_t last = 0;
    for (int round = 0; round < 20; round++) {
        last = propose_many(l, 3);
        run_for(7);
    }
    wait_all_applied(last, 20000);
    ck_assert_int_eq(kl_failpoint_configure(NULL, &err), KL_OK);
    kl_repl_counters c;
    kl_repl_counters_get(mem[l].repl, &c);
    ck_assert_uint_gt(c.early_applies, 0);
    check_consistent();
    cluster_close();
}
END_TEST

/* With every log write slowed to 20 ms and three entries proposed every 5 ms, a ready with
 * new entries is waiting whenever a write completes: the next write is queued and starts as
 * that one completes (counters.chained), on the leader and on the followers. Every member
 * must also compact its log while that load lasts, not only once it stops: under chained
 * writes the driver never leaves a round without a ready outstanding, and a compaction
 * waits for such a moment, so one that only asked to run when the driver was idle would
 * never run here (maybe_compact's compact_due holds the next ready back for it). */
START_TEST(writes_chain_while_one_runs)
{
    cluster_open(3, 3);
    td_snap_threshold = 8;
    for (int i = 1; i <= 3; i++)
        member_start(i);
    int l = wait_leader();
    kl_err err;
    ck_assert_int_eq(kl_failpoint_configure("store.log_write=sleep(20)", &err), KL_OK);
    uint64_t last = 0;
    for (int round = 0; round < 160; round++) {
        last = propose_many(l, 3);
        run_for(5);
    }
    /* Counted before the load stops: nothing idle has happened yet. */
    kl_repl_counters under_load[4];
    for (int i = 1; i <= 3; i++)
        kl_repl_counters_get(mem[i].repl, &under_load[i]);
    wait_all_applied(last, 30000);
    ck_assert_int_eq(kl_failpoint_configure(NULL, &err), KL_OK);
    for (int i = 1; i <= 3; i++) {
        const kl_repl_counters *c = &under_load[i];
        ck_assert_msg(c->chained > 0, "member %d: no write was chained (%llu writes)", i,
                      (unsigned long long)c->persists);
        ck_assert_uint_le(c->chained, c->persists);
        ck_assert_msg(c->compactions > 0, "member %d: never compacted while writes chained (%llu chained of %llu)",
                      i, (unsigned long long)c->chained, (unsigned long long)c->persists);
    }
    check_consistent();
    cluster_close();
}
END_TEST

/* A synced write's time is split where it goes (stages.h w_hop, w_run with its w_sync, w_back): with every
 * log write sleeping 30 ms inside the store (the store.log_write failpoint, on the worker),
 * the worker's part holds the sleep and the two hand-offs do not. */
START_TEST(write_parts_timed)
{
    int l = three_with_leader(0, NULL);
    kl_err err;
    ck_assert_int_eq(kl_failpoint_configure("store.log_write=sleep(30)", &err), KL_OK);
    for (int i = 0; i < 6; i++) /* one at a time: each is its own slow write on every member */
        wait_all_applied(propose_many(l, 1), 20000);
    ck_assert_int_eq(kl_failpoint_configure(NULL, &err), KL_OK);
    const kl_stages *s = kl_repl_stages(mem[l].repl);
    ck_assert_uint_ge(kl_stages_count(s, KL_SPAN_W_RUN), 6);
    ck_assert_uint_eq(kl_stages_count(s, KL_SPAN_W_HOP), kl_stages_count(s, KL_SPAN_W_RUN));
    ck_assert_uint_eq(kl_stages_count(s, KL_SPAN_W_BACK), kl_stages_count(s, KL_SPAN_W_RUN));
    ck_assert_uint_eq(kl_stages_count(s, KL_SPAN_W_SYNC), kl_stages_count(s, KL_SPAN_W_RUN));
    ck_assert_uint_ge(kl_stages_median(s, KL_SPAN_W_RUN), 30000);
    /* The sleep comes before RocksDB's write, so it is in w_run and not in its sync. */
    ck_assert_uint_lt(kl_stages_median(s, KL_SPAN_W_SYNC), 30000);
    ck_assert_uint_lt(kl_stages_median(s, KL_SPAN_W_HOP), 30000);
    ck_assert_uint_lt(kl_stages_median(s, KL_SPAN_W_BACK), 30000);
    check_consistent();
    cluster_close();
}
END_TEST

/* The stage timer (stages.h): spans per index from the stamps given, an index stamped out of
 * order or overwritten by a newer one in the ring is not measured, report resets. */
START_TEST(stage_spans)
{
    kl_stages *s = kl_stages_new();
    ck_assert_ptr_nonnull(s);
    const uint64_t us = 1000;
    for (uint64_t i = 1; i <= 100; i++) {
        uint64_t t0 = i * 1000000;
        kl_stages_mark(s, i, KL_STAGE_PROPOSE, t0);
        kl_stages_mark(s, i, KL_STAGE_PERSIST_START, t0 + 10 * us);
        kl_stages_mark(s, i, KL_STAGE_PERSIST_DONE, t0 + 110 * us);
        if (i % 2 == 0) /* odd indexes never left: no send or replicate span */
            kl_stages_mark(s, i, KL_STAGE_SENT, t0 + 20 * us);
    }
    kl_stages_mark_range(s, 1, 100, KL_STAGE_COMMIT, 100 * 1000000 + 500 * us);
    kl_stages_mark(s, 100, KL_STAGE_COMMIT, 1); /* already stamped: ignored */
    for (uint64_t i = 1; i <= 100; i++)
        kl_stages_applied(s, i, 100 * 1000000 + 600 * us);
    kl_stages_applied(s, 100, 200 * 1000000); /* applied once only */
    kl_stages_applied(s, 5000, 1);            /* never proposed: nothing */
    ck_assert_uint_eq(kl_stages_count(s, KL_SPAN_TOTAL), 100);
    ck_assert_uint_eq(kl_stages_median(s, KL_SPAN_QUEUE), 10);
    ck_assert_uint_eq(kl_stages_median(s, KL_SPAN_WRITE), 100);
    ck_assert_uint_eq(kl_stages_median(s, KL_SPAN_APPLY), 100);
    ck_assert_uint_eq(kl_stages_count(s, KL_SPAN_SEND), 50);
    ck_assert_uint_eq(kl_stages_median(s, KL_SPAN_SEND), 20);
    ck_assert_uint_eq(kl_stages_count(s, KL_SPAN_REPLICATE), 50);
    /* every index commits at 100 ms + 500 us; index i was sent at i ms + 20 us, so its span
     * is (100 - i) ms + 480 us, and the median of the 50 even indexes is index 50's */
    ck_assert_uint_eq(kl_stages_median(s, KL_SPAN_REPLICATE), (100 - 50) * 1000 + 480);
    /* A follower's entry: received, written, acknowledged. */
    kl_stages_mark(s, 7 + KL_STAGES_RING, KL_STAGE_PROPOSE, 1000 * us);
    kl_stages_mark(s, 7 + KL_STAGES_RING, KL_STAGE_PERSIST_START, 1300 * us);
    kl_stages_follower_done(s, 7 + KL_STAGES_RING, 2300 * us);
    ck_assert_uint_eq(kl_stages_median(s, KL_SPAN_F_QUEUE), 300);
    ck_assert_uint_eq(kl_stages_median(s, KL_SPAN_F_WRITE), 1000);
    kl_stages_report(s, 1, true);
    ck_assert_uint_eq(kl_stages_count(s, KL_SPAN_TOTAL), 0);
    kl_stages_free(s);
}
END_TEST

START_TEST(config_refused)
{
    cluster_open(3, 2);
    kl_repl_config cfg = {.cluster = "unit-driver", .self = 4, .n_members = 3, .replica_count = 2};
    for (int i = 1; i <= 3; i++) {
        cfg.members[i - 1] = (uint64_t)i;
        cfg.peer_urls[i - 1] = mem[i].url;
    }
    kl_repl_callbacks cb = {.ctx = &mem[1], .apply = cb_apply};
    kl_repl *r;
    kl_err err;
    ck_assert_int_eq(kl_repl_start(&loop, mem[1].store, &cfg, &cb, &r, &err), KL_INVALID_ARGUMENT);
    cfg.self = 1;
    cfg.replica_count = 4;
    ck_assert_int_eq(kl_repl_start(&loop, mem[1].store, &cfg, &cb, &r, &err), KL_INVALID_ARGUMENT);
    cfg.replica_count = 2;
    cfg.tick_ms = 100;
    cfg.election_ms = 1000;
    cfg.heartbeat_ms = 1000;
    ck_assert_int_eq(kl_repl_start(&loop, mem[1].store, &cfg, &cb, &r, &err), KL_INVALID_ARGUMENT);
    cfg.heartbeat_ms = 0;
    cfg.trace_every = KL_TRACE_EVERY_MAX + 1;
    ck_assert_int_eq(kl_repl_start(&loop, mem[1].store, &cfg, &cb, &r, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "repl_trace");
    cfg.trace_every = 0;
    cfg.peer_urls[2] = NULL;
    ck_assert_int_eq(kl_repl_start(&loop, mem[1].store, &cfg, &cb, &r, &err), KL_INVALID_ARGUMENT);
    cluster_close();
}
END_TEST

/* One "repl trace" line's stamps, by name (0 = absent). */
typedef struct td_trace_line {
    uint64_t member, index;
    bool leader;
    char names[24][16];
    uint64_t values[24];
    int n;
} td_trace_line;

static uint64_t tl_get(const td_trace_line *t, const char *name)
{
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->names[i], name) == 0)
            return t->values[i];
    return 0;
}

static bool tl_parse(const char *line, td_trace_line *t)
{
    const char *p = strstr(line, "msg=\"repl trace\"");
    if (p == NULL)
        return false;
    memset(t, 0, sizeof *t);
    t->leader = strstr(p, "role=leader") != NULL;
    for (p += strlen("msg=\"repl trace\""); *p != '\0' && t->n < 24;) {
        char name[16];
        unsigned long long v;
        int used = 0;
        if (sscanf(p, " %15[a-z_0-9]=%llu%n", name, &v, &used) == 2) {
            snprintf(t->names[t->n], sizeof t->names[t->n], "%s", name);
            t->values[t->n++] = v;
            p += used;
        } else if (sscanf(p, " %15[a-z_]=%*[a-z]%n", name, &used) >= 1 && used > 0) {
            p += used; /* role=leader|follower */
        } else {
            break;
        }
    }
    t->member = tl_get(t, "member");
    t->index = tl_get(t, "index");
    return t->index != 0;
}

/* The replication trace (trace.h) on three members of one process, so one clock: every
 * sampled index the test proposed gets a leader line and a line from each follower, and the
 * stamps follow cause and effect across the members: the leader's send comes before the
 * follower's read, the follower's acknowledgement leaves before the leader reads it, and
 * with replica_count 3 the commit comes after every follower's acknowledgement. */
START_TEST(trace_follows_cause_across_members)
{
    char path[] = "/tmp/kl-trace-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    fflush(stderr);
    int saved = dup(2);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_eq(dup2(fd, 2), 2);
    cluster_open(3, 3);
    td_trace_every = 2;
    for (int i = 1; i <= 3; i++)
        member_start(i);
    int l = wait_leader();
    uint64_t first = 0, last = 0;
    for (int i = 0; i < 12; i++) { /* one at a time: each its own round on every member */
        last = propose_many(l, 1);
        if (first == 0)
            first = last;
        wait_all_applied(last, 10000);
    }
    run_for(100);
    fflush(stderr);
    ck_assert_int_eq(dup2(saved, 2), 2);
    close(saved);
    FILE *f = fdopen(fd, "r");
    ck_assert_ptr_nonnull(f);
    rewind(f);
    static td_trace_line lines[256];
    int n = 0;
    char buf[2048];
    while (n < 256 && fgets(buf, sizeof buf, f) != NULL)
        if (tl_parse(buf, &lines[n]))
            n++;
    fclose(f);
    int checked = 0;
    for (int i = 0; i < n; i++) {
        const td_trace_line *L = &lines[i];
        if (!L->leader || L->index < first || L->index > last)
            continue;
        ck_assert_uint_eq(L->member, (uint64_t)l);
        ck_assert_uint_eq(L->index % 2, 0);
        uint64_t propose = tl_get(L, "propose"), commit = tl_get(L, "commit"), applied = tl_get(L, "applied");
        ck_assert(propose != 0 && commit != 0 && applied != 0);
        ck_assert_uint_le(propose, tl_get(L, "w_start"));
        ck_assert_uint_le(tl_get(L, "w_start"), tl_get(L, "w_done"));
        ck_assert_uint_le(tl_get(L, "w_done"), commit); /* the leader counts itself once durable */
        ck_assert_uint_le(commit, applied);
        for (int fm = 1; fm <= 3; fm++) {
            if (fm == l)
                continue;
            const td_trace_line *F = NULL;
            for (int j = 0; j < n && F == NULL; j++)
                if (!lines[j].leader && lines[j].member == (uint64_t)fm && lines[j].index == L->index)
                    F = &lines[j];
            ck_assert_msg(F != NULL, "no trace line of follower %d for index %llu", fm,
                          (unsigned long long)L->index);
            char k[32];
            snprintf(k, sizeof k, "sent_%d", fm);
            uint64_t sent = tl_get(L, k);
            snprintf(k, sizeof k, "ack_read_%d", fm);
            uint64_t ack_read = tl_get(L, k);
            snprintf(k, sizeof k, "ack_step_%d", fm);
            uint64_t ack_step = tl_get(L, k);
            uint64_t chain[] = {propose, sent, tl_get(F, "read"), tl_get(F, "step"), tl_get(F, "w_start"),
                                tl_get(F, "w_done"), tl_get(F, "ack_sent"), ack_read, ack_step, commit};
            for (size_t c = 0; c < sizeof chain / sizeof chain[0]; c++)
                ck_assert_msg(chain[c] != 0, "index %llu follower %d: stamp %zu missing",
                              (unsigned long long)L->index, fm, c);
            for (size_t c = 1; c < sizeof chain / sizeof chain[0]; c++)
                ck_assert_msg(chain[c - 1] <= chain[c], "index %llu follower %d: stamp %zu (%llu) after %zu (%llu)",
                              (unsigned long long)L->index, fm, c - 1, (unsigned long long)chain[c - 1], c,
                              (unsigned long long)chain[c]);
        }
        checked++;
    }
    ck_assert_int_ge(checked, 5);
    check_consistent();
    cluster_close();
}
END_TEST

Suite *suite_driver(void)
{
    Suite *s = suite_create("driver");
    TCase *t = tcase_create("driver");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, config_refused);
    tcase_add_test(t, stage_spans);
    tcase_add_test(t, single_member);
    tcase_add_test(t, three_members_elect_and_replicate);
    tcase_add_test(t, replica_count_three_blocks_then_catches_up);
    tcase_add_test(t, one_synced_write_per_lone_entry);
    tcase_add_test(t, leader_failover);
    tcase_add_test(t, restart_replays_from_applied);
    tcase_add_test(t, configuration_survives_restart);
    tcase_add_test(t, configuration_survives_compaction_and_restart);
    tcase_add_test(t, new_member_joins_and_is_promoted);
    tcase_add_test(t, learner_replaying_old_configuration_keeps_its_leader);
    tcase_add_test(t, restarted_member_that_missed_a_change_reaches_the_new_leader);
    tcase_add_test(t, many_configuration_changes_compact_their_history);
    tcase_add_test(t, returning_leader_replaces_its_uncommitted_suffix);
    tcase_add_test(t, read_dropped_when_leadership_lost);
    tcase_add_test(t, reads_of_one_iteration_share_a_round);
    tcase_add_test(t, refuses_bad_frames);
    tcase_add_test(t, applies_while_a_slow_write_runs);
    tcase_add_test(t, writes_chain_while_one_runs);
    tcase_add_test(t, commit_only_readies_write_nothing);
    tcase_add_test(t, write_parts_timed);
    tcase_add_test(t, trace_follows_cause_across_members);
    suite_add_tcase(s, t);
    TCase *snap = tcase_create("snapshot");
    tcase_set_timeout(snap, 60);
    tcase_add_test(snap, snapshot_install_teaches_new_members_keys);
    suite_add_tcase(s, snap);
    return s;
}
