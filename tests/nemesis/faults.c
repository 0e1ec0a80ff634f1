/* The fault table (nemesis.h): each fault is injected on real processes, held a few seconds,
 * healed, and the time its partition takes to serve again is measured (MemberStatus: a
 * serving leader, with a valid catalog lease on a data partition). The seed picks the order,
 * the targets, the hold times, the pause lengths, the clock offsets and the cut directions. */
#include "tests/nemesis/nemesis.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const names[F_KINDS] = {"kill-leader", "kill-follower", "kill-coordinator", "cold-restart",
                                           "pause",       "partition",     "one-way-cut",      "clock-step",
                                           "disk-full",   "eio",           "power-loss",       "member-replace",
                                           "slow-disk"};

typedef struct fault_stats {
    int runs;
    int not_served; /* heals after which the partition did not serve within serve_wait_ms */
    int64_t heal_ms_sum, heal_ms_max;
    int extra; /* eio: members that exited on the failed write; slow-disk: members that stayed up */
} fault_stats;

static fault_stats stats[F_KINDS];
static uint64_t rng;
static int unexpected_exits;
/* How long a partition may take to serve again after a heal: longer is a counted finding
 * (a 60 s forward clock step of a leader, healed after 3 s, has left it unserving 58 s). */
static const int serve_wait_ms = 30000;

const char *nm_fault_name(nm_fault f) { return f < F_KINDS ? names[f] : "?"; }

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int pick(int n) { return (int)(next() % (uint64_t)n); }

/* Power loss needs a member whose store lives on lossyfs (tests/nemesis/lossyfs.c, which
 * can drop every write not yet fsynced): run.sh mounts it and names the member with
 * --lossy-node/--lossy-dir; tests/nemesis/lossyfs-drop.sh then cuts the power. */
static bool lossyfs_present(void) { return nm.lossy_dir[0] != 0 && nm.lossy_node[0] != 0; }

static nm_member *lossy_member(void)
{
    for (int p = 0; p < NM_PARTS; p++)
        for (int m = 0; m < NM_SLOTS; m++)
            if (strcmp(nm.mb[p][m].slot, nm.lossy_node) == 0)
                return &nm.mb[p][m];
    return &nm.mb[1][NM_MEMBERS - 1];
}

/* NEMESIS_FAULTS="kind,kind" (names as printed) runs only those kinds; "none" none. */
static bool selected(nm_fault f)
{
    const char *sel = getenv("NEMESIS_FAULTS");
    if (sel == NULL || sel[0] == 0)
        return true;
    size_t n = strlen(names[f]);
    for (const char *p = strstr(sel, names[f]); p != NULL; p = strstr(p + 1, names[f]))
        if ((p == sel || p[-1] == ',') && (p[n] == 0 || p[n] == ','))
            return true;
    return false;
}

static bool available(nm_fault f)
{
    if (!selected(f))
        return false;
    switch (f) {
    case F_CLOCK: return nm.faketime_lib[0] != 0;
    case F_DISK_FULL: return nm.disk_dir[0] != 0;
    case F_EIO: return nm.eio_available;
    case F_SLOW_DISK: return nm.eio_available; /* the same failpoint, another action */
    case F_POWER_LOSS: return lossyfs_present();
    default: return true;
    }
}

static nm_member *disk_member(void)
{
    for (int p = 0; p < NM_PARTS; p++)
        for (int m = 0; m < NM_SLOTS; m++)
            if (strcmp(nm.mb[p][m].slot, nm.disk_node) == 0)
                return &nm.mb[p][m];
    return &nm.mb[NM_PARTS - 1][NM_MEMBERS - 1];
}

uint64_t nm_fault_rng(void) { return next(); }

/* The leader of p when want_leader (else a member that is not), or any live member; only
 * members of the configuration (the active slots) are targets. */
static nm_member *target(int p, bool want_leader)
{
    int l = nm_leader(p, 500);
    if (want_leader && l >= 0)
        return &nm.mb[p][l];
    int act[NM_SLOTS], n = 0;
    for (int m = 0; m < NM_SLOTS; m++)
        if (nm.mb[p][m].active && m != l)
            act[n++] = m;
    return &nm.mb[p][act[pick(n)]];
}

static int hold_ms(void) { return 2000 + pick(2000); }

static void set_clock(nm_member *mb, long offset_s)
{
    FILE *f = fopen(mb->clock_file, "w");
    if (f == NULL)
        return;
    fprintf(f, "%+ld\n", offset_s);
    fclose(f);
}

/* Drops mb's replication traffic to or from its partition's other members with nftables in
 * mb's namespace, on both the connections mb dialled (their peer port) and theirs (its own
 * peer port): outgoing drops what mb sends, incoming what it receives. TCP being two-way, a
 * one-way packet cut also stalls the other direction's data once unacknowledged. */
static void oneway_cut(nm_member *mb, bool outgoing, char *what, size_t cap)
{
    char set[128] = "";
    char names_txt[64] = "";
    for (int m = 0; m < NM_SLOTS; m++) {
        if (m == mb->m || !nm.mb[mb->p][m].active)
            continue;
        nm_member *o = &nm.mb[mb->p][m];
        snprintf(set + strlen(set), sizeof set - strlen(set), "%s%s", set[0] ? ", " : "", o->addr);
        snprintf(names_txt + strlen(names_txt), sizeof names_txt - strlen(names_txt), "%s%s", names_txt[0] ? "," : "",
                 o->node);
    }
    const char *hook = outgoing ? "output" : "input";
    const char *peer_dir = outgoing ? "daddr" : "saddr";
    nm_sh("ip netns exec %s nft 'add table inet nemesis; add chain inet nemesis cut { type filter hook %s priority 0; "
          "policy accept; }; add rule inet nemesis cut ip %s { %s } tcp dport %d drop; "
          "add rule inet nemesis cut ip %s { %s } tcp sport %d drop'",
          mb->ns, hook, peer_dir, set, NM_PEER_PORT, peer_dir, set, NM_PEER_PORT);
    mb->nft_rules = true;
    if (outgoing)
        snprintf(what, cap,
                 "%s -> {%s} cut: every packet %s sends on its replication links with them (to their peer port %d "
                 "and from its own) is dropped: its appends, votes and acks never arrive; theirs still arrive until "
                 "TCP stalls for want of its ACKs; client ports (catalog tail, clients) untouched",
                 mb->node, names_txt, mb->node, NM_PEER_PORT);
    else
        snprintf(what, cap,
                 "{%s} -> %s cut: every packet %s receives on its replication links with them (from their peer port "
                 "%d and to its own) is dropped: their appends, votes and acks never arrive; its own still leave until "
                 "TCP stalls for want of their ACKs; client ports untouched",
                 names_txt, mb->node, mb->node, NM_PEER_PORT);
}

static void heal_member(nm_member *mb)
{
    if (mb->paused && mb->pid > 0) {
        kill(mb->pid, SIGCONT);
        mb->paused = false;
    }
    if (mb->link_down) {
        nm_sh("ip link set kh%s%s up", nm.tag, mb->slot);
        mb->link_down = false;
    }
    if (mb->nft_rules) {
        nm_sh("ip netns exec %s nft delete table inet nemesis", mb->ns);
        mb->nft_rules = false;
    }
    set_clock(mb, 0);
}

/* Restarts whatever died without being asked to (a member that exited on a clock step or a
 * full disk), counting it. */
static void restart_dead(bool count)
{
    for (int p = 0; p < NM_PARTS; p++)
        for (int m = 0; m < NM_SLOTS; m++)
            if (nm.mb[p][m].active && !nm_member_alive(&nm.mb[p][m])) {
                if (count) {
                    unexpected_exits++;
                    printf("    %s was not running: restarted\n", nm.mb[p][m].node);
                }
                nm_member_start(&nm.mb[p][m]);
            }
    if (!nm_coord_alive()) {
        if (count) {
            unexpected_exits++;
            printf("    coordinator was not running: restarted\n");
        }
        nm_coord_start();
    }
}

void nm_heal_all(void)
{
    for (int p = 0; p < NM_PARTS; p++)
        for (int m = 0; m < NM_SLOTS; m++)
            if (nm.mb[p][m].active)
                heal_member(&nm.mb[p][m]);
    if (nm.disk_dir[0])
        nm_sh("rm -f '%s/filler'", nm.disk_dir);
    restart_dead(false);
}

void nm_faults_cleanup(void)
{
    for (int p = 0; p < NM_PARTS; p++)
        for (int m = 0; m < NM_SLOTS; m++)
            if (nm.mb[p][m].nft_rules)
                heal_member(&nm.mb[p][m]);
    if (nm.disk_dir[0])
        nm_sh("rm -f '%s/filler'", nm.disk_dir);
}

static void member_restart_after(nm_member *mb, int ms)
{
    nm_sleep_ms(ms);
    nm_member_start(mb);
}

/* kill -9, held down, restarted. While a data partition's follower is down, fresh reads of
 * its queue are timed: its leader must still answer them. */
static int f_kill(bool leader, char *what, size_t cap)
{
    int p = pick(NM_PARTS);
    nm_member *mb = target(p, leader);
    snprintf(what, cap, "%s (pid %d)", mb->node, (int)mb->pid);
    nm_member_kill(mb);
    int ms = hold_ms();
    if (!leader && p > 0) {
        int64_t until = nm_now_ms() + ms;
        nm_sleep_ms(500);
        for (int reads = 0; reads < 2 || nm_now_ms() < until; reads++)
            nm_probe_read(p - 1);
        ms = 0;
    }
    member_restart_after(mb, ms);
    return p;
}

static int f_cold(char *what, size_t cap)
{
    nm_coord_kill();
    for (int p = 0; p < NM_PARTS; p++)
        for (int m = 0; m < NM_SLOTS; m++)
            nm_member_kill(&nm.mb[p][m]);
    snprintf(what, cap, "kill -9 of all nine members and the coordinator, then start all");
    nm_sleep_ms(500);
    for (int p = 0; p < NM_PARTS; p++)
        for (int m = 0; m < NM_SLOTS; m++)
            if (nm.mb[p][m].active)
                nm_member_start(&nm.mb[p][m]);
    nm_coord_start();
    return -1;
}

static int f_pause(char *what, size_t cap)
{
    int p = pick(NM_PARTS);
    nm_member *mb = target(p, pick(2) == 0);
    int ms = 2 * NM_ELECTION_MS + 500 + pick(1500); /* past the longest randomized election timeout */
    snprintf(what, cap, "SIGSTOP %s for %d ms (election timeout %d-%d ms)", mb->node, ms, NM_ELECTION_MS,
             2 * NM_ELECTION_MS);
    kill(mb->pid, SIGSTOP);
    mb->paused = true;
    nm_sleep_ms(ms);
    heal_member(mb);
    return p;
}

static int f_partition(char *what, size_t cap)
{
    int p = pick(NM_PARTS);
    nm_member *mb = target(p, pick(2) == 0);
    int ms = hold_ms();
    snprintf(what, cap, "%s isolated (link kh%s%s down) for %d ms", mb->node, nm.tag, mb->slot, ms);
    nm_sh("ip link set kh%s%s down", nm.tag, mb->slot);
    mb->link_down = true;
    nm_sleep_ms(ms);
    heal_member(mb);
    return p;
}

static int f_oneway(char *what, size_t cap)
{
    int p = pick(NM_PARTS);
    nm_member *mb = target(p, pick(2) == 0);
    oneway_cut(mb, pick(2) == 0, what, cap);
    nm_sleep_ms(hold_ms());
    heal_member(mb);
    return p;
}

static int f_clock(char *what, size_t cap)
{
    static const long offsets[] = {5, 60, 3600, -5, -60, -3600};
    int p = pick(NM_PARTS);
    nm_member *mb = target(p, pick(2) == 0);
    long off = offsets[pick(6)];
    int ms = hold_ms();
    snprintf(what, cap, "%s wall clock stepped %+ld s for %d ms, then back", mb->node, off, ms);
    set_clock(mb, off);
    nm_sleep_ms(ms);
    heal_member(mb);
    return p;
}

static int f_disk(char *what, size_t cap)
{
    nm_member *mb = disk_member();
    int ms = hold_ms();
    snprintf(what, cap, "%s's filesystem filled (filler file) for %d ms", mb->node, ms);
    nm_sh("dd if=/dev/zero of='%s/filler' bs=1M 2>/dev/null; sync -f '%s' 2>/dev/null; true", nm.disk_dir,
          nm.disk_dir);
    nm_sleep_ms(ms);
    nm_sh("rm -f '%s/filler'", nm.disk_dir);
    if (!nm_member_alive(mb)) {
        printf("    %s exited on the full disk; restarted\n", mb->node);
        nm_member_start(mb);
    }
    return mb->p;
}

/* The commit index partition p's serving leader reports, or 0 when none answers. */
static uint64_t partition_commit(int p)
{
    int m = nm_leader(p, 500);
    Keyload__V1__MemberStatusAnswer *a = NULL;
    if (m < 0 || kl_member_status(nm.mb[p][m].url, 500, &a, NULL) != KL_OK)
        return 0;
    uint64_t c = a->commit_index;
    kl_member_status_free(a);
    return c;
}

/* Entries the partition must commit after the restart before a member that is still running
 * counts as one that survived its failed write: at replica_count 3 of 3 every one of them
 * was written by the member, and 50 entries cannot fit in fewer than 5 log writes of a
 * follower that was caught up (its writes follow the leader's appends, a few entries each). */
#define EIO_MIN_COMMITS 50
#define EIO_WAIT_MS 15000
#define EIO_WAIT_MAX_MS 45000

/* A follower restarted with its log write failing from the 5th write on: it must exit
 * without acking (the history checks see any ack it gave); then it restarts clean. Since a
 * member only writes when entries reach it, a run whose partition committed fewer than
 * EIO_MIN_COMMITS entries meanwhile (the workload stalled behind other faults) proves
 * nothing either way: it is reported apart and not counted. */
static int f_eio(char *what, size_t cap)
{
    int p = 1 + pick(NM_PARTS - 1);
    nm_member *mb = target(p, false);
    nm_member_kill(mb);
    snprintf(mb->failpoints, sizeof mb->failpoints, "store.log_write=5*error(INTERNAL)");
    uint64_t c0 = partition_commit(p);
    nm_member_start(mb);
    int64_t t0 = nm_now_ms();
    uint64_t c1 = c0;
    for (;;) {
        if (!nm_member_alive(mb))
            break;
        int64_t waited = nm_now_ms() - t0;
        if (waited >= EIO_WAIT_MS) {
            uint64_t c = partition_commit(p);
            if (c > c1)
                c1 = c;
            if (c1 >= c0 + EIO_MIN_COMMITS || waited >= EIO_WAIT_MAX_MS)
                break;
        }
        nm_sleep_ms(100);
    }
    bool exited = !nm_member_alive(mb);
    uint64_t committed = c1 > c0 ? c1 - c0 : 0;
    if (exited) {
        nm_hist.eio_runs++;
        stats[F_EIO].extra++;
        snprintf(what, cap, "%s restarted with store.log_write failing on its 5th write: it exited", mb->node);
    } else if (c0 == 0 || committed < EIO_MIN_COMMITS) {
        nm_hist.eio_idle++;
        snprintf(what, cap,
                 "%s restarted with store.log_write failing on its 5th write: still running, but its partition "
                 "committed only %llu entries in %lld ms (not counted)",
                 mb->node, (unsigned long long)committed, (long long)(nm_now_ms() - t0));
    } else {
        nm_hist.eio_runs++;
        nm_hist.eio_no_exit++;
        snprintf(what, cap,
                 "%s restarted with store.log_write failing on its 5th write: it did NOT exit although its "
                 "partition committed %llu entries meanwhile",
                 mb->node, (unsigned long long)committed);
    }
    nm_member_kill(mb);
    nm_member_start(mb);
    return p;
}

/* A slow disk: a member of a data partition (a follower, or one time in three its leader)
 * restarted with every log write slowed by 20-80 ms (failpoint store.log_write=sleep(MS)),
 * held a few seconds under the workload, then restarted at full speed. A follower's writes
 * leave its loop for the log writer after the first slow one (the driver's 2 ms bound),
 * so it keeps answering heartbeats and reads; the partition commits at the pace of its
 * replica_count-th fastest copy. The member must stay up through it, and every history
 * check (no acknowledgement before its synced write among them) holds. */
static int f_slow(char *what, size_t cap)
{
    int p = 1 + pick(NM_PARTS - 1);
    bool leader = pick(3) == 0;
    nm_member *mb = target(p, leader);
    int ms = 20 + pick(61);
    nm_member_kill(mb);
    snprintf(mb->failpoints, sizeof mb->failpoints, "store.log_write=sleep(%d)", ms);
    nm_member_start(mb);
    int hold = hold_ms();
    nm_sleep_ms(hold);
    bool up = nm_member_alive(mb);
    nm_hist.slow_runs++;
    if (up)
        stats[F_SLOW_DISK].extra++;
    else
        nm_hist.slow_down++;
    snprintf(what, cap, "%s%s restarted with every log write %d ms slower, for %d ms: %s", mb->node,
             leader ? " (the leader)" : "", ms, hold, up ? "it stayed up" : "it was NOT running at the end");
    nm_member_kill(mb);
    nm_member_start(mb);
    return p;
}

/* Power loss: kill -9, then lossyfs drops every write not yet fsynced, then restart. */
static int f_power(char *what, size_t cap)
{
    nm_member *mb = lossy_member();
    nm_member_kill(mb);
    int rc = nm_sh("bash '%s/tests/nemesis/lossyfs-drop.sh' '%s'", nm.root, nm.lossy_dir);
    nm_hist.power_loss_runs++;
    if (rc != 0)
        nm_hist.power_loss_failed++;
    snprintf(what, cap, "%s killed, unsynced writes dropped: %s", mb->node, rc == 0 ? "yes" : "NO (lossyfs did not confirm)");
    nm_member_start(mb);
    return mb->p;
}

static int inject(nm_fault f, char *what, size_t cap)
{
    switch (f) {
    case F_KILL_LEADER: return f_kill(true, what, cap);
    case F_KILL_FOLLOWER: return f_kill(false, what, cap);
    case F_KILL_COORD:
        snprintf(what, cap, "coordinator (pid %d)", (int)nm.coord_pid);
        nm_coord_kill();
        nm_sleep_ms(hold_ms());
        nm_coord_start();
        return 1 + pick(NM_PARTS - 1);
    case F_COLD_RESTART: return f_cold(what, cap);
    case F_PAUSE: return f_pause(what, cap);
    case F_PARTITION: return f_partition(what, cap);
    case F_ONEWAY: return f_oneway(what, cap);
    case F_CLOCK: return f_clock(what, cap);
    case F_DISK_FULL: return f_disk(what, cap);
    case F_EIO: return f_eio(what, cap);
    case F_POWER_LOSS: return f_power(what, cap);
    case F_MEMBER: return nm_fault_member_replace(what, cap);
    case F_SLOW_DISK: return f_slow(what, cap);
    default: return 0;
    }
}

/* A partition that does not serve again in time after a heal is a finding (counted by
 * check.c); its members are then restarted (kill -9 + start) so that the rest of the run
 * still tests something. */
static void revive(int p)
{
    printf("            partition %d: restarting its members so the run goes on\n", p);
    for (int m = 0; m < NM_SLOTS; m++) {
        if (!nm.mb[p][m].active)
            continue;
        nm_member_kill(&nm.mb[p][m]);
        nm_member_start(&nm.mb[p][m]);
    }
    int64_t ms = nm_wait_serving(p, serve_wait_ms);
    printf("            partition %d %s\n", p, ms < 0 ? "still does not serve" : "serves again");
}

static void run_one(int n, nm_fault f)
{
    char what[400] = "";
    int64_t t0 = nm_now_ms();
    int p = inject(f, what, sizeof what);
    int64_t healed = nm_now_ms();
    int64_t worst = 0;
    int stuck = -1;
    for (int q = (p < 0 ? 0 : p); q < (p < 0 ? NM_PARTS : p + 1); q++) {
        int64_t ms = nm_wait_serving(q, serve_wait_ms);
        if (ms < 0)
            stuck = q;
        else if (ms > worst)
            worst = ms;
    }
    stats[f].runs++;
    nm_hist.heals++;
    if (stuck < 0) {
        stats[f].heal_ms_sum += worst;
        if (worst > stats[f].heal_ms_max)
            stats[f].heal_ms_max = worst;
    } else {
        stats[f].not_served++;
        nm_hist.serve_timeouts++;
        if (!nm_hist.first_serve_timeout[0])
            snprintf(nm_hist.first_serve_timeout, sizeof nm_hist.first_serve_timeout, "fault %d %s: %.200s", n,
                     names[f], what);
    }
    printf("  fault %3d %-16s %s; %s after heal: %s (%lld ms in all)\n", n, names[f], what,
           p < 0 ? "all partitions" : "partition", stuck < 0 ? "serving" : "NOT serving in time",
           (long long)(nm_now_ms() - t0));
    if (stuck < 0)
        printf("            serving again %lld ms after the heal\n", (long long)(nm_now_ms() - healed));
    restart_dead(true);
    for (int q = 0; q < NM_PARTS; q++)
        if (nm_leader(q, 500) < 0 && nm_wait_serving(q, serve_wait_ms) < 0)
            revive(q);
}

bool nm_faults_run(uint64_t seed, int64_t deadline_ms, int min_each, int64_t hard_deadline_ms)
{
    rng = seed * 2654435761u + 88172645463325252ull;
    nm_fault plan[F_KINDS * 8];
    int n_plan = 0;
    for (int k = 0; k < F_KINDS; k++) {
        if (!available((nm_fault)k)) {
            printf("nemesis: fault %s not run (%s)\n", names[k],
                   !selected((nm_fault)k) ? "not selected by NEMESIS_FAULTS"
                   : k == F_EIO || k == F_SLOW_DISK ? "unavailable in this daemon build"
                   : k == F_POWER_LOSS ? "no member store on lossyfs (run.sh mounts one)"
                                       : "unavailable here");
            continue;
        }
        for (int i = 0; i < min_each; i++)
            plan[n_plan++] = (nm_fault)k;
    }
    for (int i = n_plan - 1; i > 0; i--) {
        int j = pick(i + 1);
        nm_fault t = plan[i];
        plan[i] = plan[j];
        plan[j] = t;
    }
    printf("faults:\n");
    int n = 0;
    bool any = false;
    for (int k = 0; k < F_KINDS; k++)
        any = any || available((nm_fault)k);
    if (!any) {
        printf("  none: the workload runs without faults\n");
        while (nm_now_ms() < deadline_ms)
            nm_sleep_ms(200);
        return true;
    }
    /* The planned faults all run (the make-test budget covers them); then random ones until
     * the deadline. */
    while (n < n_plan || nm_now_ms() < deadline_ms) {
        if (hard_deadline_ms > 0 && nm_now_ms() > hard_deadline_ms) {
            printf("  fault plan cut short after %d of %d faults: the run's budget is nearly spent\n", n, n_plan);
            return n >= n_plan;
        }
        nm_fault f = n < n_plan ? plan[n] : (nm_fault)pick(F_KINDS);
        if (!available(f))
            continue;
        run_one(++n, f);
        nm_sleep_ms(1000 + pick(1000));
    }
    return true;
}

void nm_faults_report(void)
{
    printf("faults injected by kind (time to serve again after the heal: mean / max):\n");
    for (int k = 0; k < F_KINDS; k++) {
        if (stats[k].runs == 0) {
            printf("  %-16s not run\n", names[k]);
            continue;
        }
        int ok = stats[k].runs - stats[k].not_served;
        printf("  %-16s %3d runs, serving again %lld / %lld ms%s", names[k], stats[k].runs,
               ok ? (long long)(stats[k].heal_ms_sum / ok) : -1LL, (long long)stats[k].heal_ms_max,
               stats[k].not_served ? " (some did NOT serve again in time)" : "");
        if (k == F_EIO)
            printf(", %d of them exited on the failed write", stats[k].extra);
        if (k == F_SLOW_DISK)
            printf(", %d of them stayed up through it", stats[k].extra);
        if (k == F_MEMBER)
            printf(", %d finished (%d with a kill -9 mid-change, %d replacing the leader), %d did NOT finish",
                   nm_mstats.done, nm_mstats.killed_mid, nm_mstats.leader_replaced, nm_mstats.failed);
        printf("\n");
    }
    printf("  processes found dead after a fault and restarted: %d\n", unexpected_exits);
}
