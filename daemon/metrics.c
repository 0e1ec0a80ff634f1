/* metrics: a member's Prometheus series (the contract is in metrics.h). */
#include "daemon/metrics.h"

#include "common/status.h"
#include "daemon/engine/queue.h"
#include "daemon/repl/stages.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A detail is a program constant such as "limit:MaxScanRecords" or "queue.tenant"; this
 * charset check keeps anything else (which would be a bug) out of a label. */
static bool detail_ok(const char *d)
{
    size_t n = strlen(d);
    if (n >= sizeof(((kl_dmetrics_refusal *)0)->detail))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = d[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == ':' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

void kl_dmetrics_refusal_hook(void *ctx, int code, const char *detail)
{
    kl_dmetrics *m = ctx;
    if (detail == NULL)
        detail = "";
    if (!detail_ok(detail)) {
        m->refusals_other++;
        return;
    }
    for (size_t i = 0; i < m->nrefusals; i++)
        if (m->refusals[i].code == code && strcmp(m->refusals[i].detail, detail) == 0) {
            m->refusals[i].n++;
            return;
        }
    if (m->nrefusals == KL_METRICS_REFUSALS_MAX) {
        m->refusals_other++;
        return;
    }
    kl_dmetrics_refusal *r = &m->refusals[m->nrefusals++];
    r->code = code;
    snprintf(r->detail, sizeof r->detail, "%s", detail);
    r->n = 1;
}

void kl_dmetrics_applied(kl_dmetrics *m, size_t entry_bytes)
{
    m->committed_entries++;
    m->committed_bytes += entry_bytes;
}

void kl_dmetrics_role(kl_dmetrics *m, bool candidate, uint64_t leader)
{
    if (candidate)
        m->elections++;
    if (leader != 0 && leader != m->last_leader)
        m->leader_changes++;
    m->last_leader = leader;
}

uint64_t kl_dmetrics_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, rss = 0;
    if (f == NULL)
        return 0;
    int n = fscanf(f, "%llu %llu", &size, &rss);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return n == 2 && page > 0 ? (uint64_t)rss * (uint64_t)page : 0;
}

static void render_raft(const kl_dmetrics_src *s, kl_metrics_buf *b)
{
    static const char *const roles[] = {"follower", "pre_candidate", "candidate", "leader"};
    kl_raft_status st;
    kl_repl_status(s->repl, &st);
    kl_metrics_one(b, "keyload_raft_term", "gauge", "Current Raft term of this member.", st.term);
    kl_metrics_family(b, "keyload_raft_role", "gauge", "1 for this member's current Raft role.");
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++) {
        kl_metrics_label l = {"role", roles[i]};
        kl_metrics_u64(b, "keyload_raft_role", &l, 1, (size_t)st.role == i);
    }
    kl_metrics_one(b, "keyload_raft_leader_serving", "gauge",
                   "1 while this member is the leader and serves writes.", st.leader_ready && st.role == KL_RAFT_LEADER);
    kl_metrics_one(b, "keyload_raft_commit_index", "gauge", "Highest log index known committed.", st.commit);
    kl_metrics_one(b, "keyload_raft_last_index", "gauge", "Last index of this member's log.", st.last_index);
    kl_repl_counters c;
    kl_repl_counters_get(s->repl, &c);
    kl_metrics_one(b, "keyload_raft_appended_entries_total", "counter",
                   "Log entries this member synced to its log.", c.entries_appended);
    kl_metrics_one(b, "keyload_raft_appended_bytes_total", "counter",
                   "Bytes of the log entries this member synced to its log.", c.bytes_appended);
    kl_metrics_one(b, "keyload_raft_log_writes_total", "counter", "Synced log writes completed.", c.persists);
    kl_metrics_one(b, "keyload_raft_log_writes_chained_total", "counter",
                   "Synced log writes queued while the previous one ran and started as it completed.",
                   c.chained);
    kl_metrics_one(b, "keyload_raft_log_writes_on_loop_total", "counter",
                   "Synced log writes run on the member's loop instead of its log writer thread.",
                   c.on_loop);
    kl_metrics_one(b, "keyload_raft_snapshots_total", "counter", "Snapshots taken or installed.", c.snapshots);
    kl_metrics_one(b, "keyload_raft_compactions_total", "counter", "Log compactions.", c.compactions);
    kl_metrics_one(b, "keyload_raft_refused_frames_total", "counter",
                   "Replication frames dropped by the driver's checks.", c.refused);
    const kl_stages *stg = kl_repl_stages(s->repl);
    if (stg != NULL) {
        kl_metrics_hist_write(b, "keyload_raft_commit_latency_seconds",
                              "Leader: time from proposing an entry to its commit.", kl_stages_commit_hist(stg));
        kl_metrics_hist_write(b, "keyload_raft_log_fsync_seconds",
                              "Time of one synced log write (RocksDB write with fsync).", kl_stages_fsync_hist(stg));
    }
}

static void render_counters(const kl_dmetrics_src *s, kl_metrics_buf *b)
{
    const kl_dmetrics *m = s->m;
    kl_metrics_one(b, "keyload_raft_committed_entries_total", "counter",
                   "Committed log entries applied by this member since it started.", m->committed_entries);
    kl_metrics_one(b, "keyload_raft_committed_bytes_total", "counter",
                   "Bytes of the committed log entries applied by this member since it started.",
                   m->committed_bytes);
    kl_metrics_one(b, "keyload_raft_elections_total", "counter",
                   "Elections this member started (it became a candidate).", m->elections);
    kl_metrics_one(b, "keyload_raft_leader_changes_total", "counter",
                   "Times this member saw a new leader.", m->leader_changes);
    kl_metrics_family(b, "keyload_refusals_total", "counter",
                      "Requests answered with an error, by status code and detail.");
    for (size_t i = 0; i < m->nrefusals; i++) {
        kl_metrics_label l[2] = {{"code", kl_code_name(m->refusals[i].code)}, {"detail", m->refusals[i].detail}};
        kl_metrics_u64(b, "keyload_refusals_total", l, 2, m->refusals[i].n);
    }
    kl_metrics_label other[2] = {{"code", "other"}, {"detail", "other"}};
    kl_metrics_u64(b, "keyload_refusals_total", other, 2, m->refusals_other);
    kl_metrics_one(b, "keyload_process_resident_memory_bytes", "gauge",
                   "Resident set size of this process (/proc/self/statm).", kl_dmetrics_rss_bytes());
}

/* Per-queue depth and in flight, capped; dropped series counted. */
static void render_queues(const kl_dmetrics_src *s, kl_metrics_buf *b)
{
    static kl_queue_gauge g[KL_METRICS_QUEUES_MAX]; /* loop thread only */
    size_t filled = 0, total = 0;
    kl_err err;
    kl_code rc = kl_node_queue_gauges(s->node, g, KL_METRICS_QUEUES_MAX, KL_METRICS_SCAN_RECORDS_MAX,
                                      &filled, &total, &err);
    if (rc != KL_OK)
        s->m->scrape_errors++;
    kl_metrics_one(b, "keyload_queues", "gauge", "Live queues on this partition (as this member applied).", total);
    kl_metrics_family(b, "keyload_queue_depth_messages", "gauge",
                      "Messages a queue retains (available, delayed or leased), by queue id.");
    char id[24];
    for (size_t i = 0; i < filled; i++) {
        snprintf(id, sizeof id, "%" PRIu64, g[i].qid);
        kl_metrics_label l = {"queue_id", id};
        kl_metrics_u64(b, "keyload_queue_depth_messages", &l, 1, g[i].messages);
    }
    kl_metrics_family(b, "keyload_queue_in_flight_messages", "gauge",
                      "Messages of a queue leased or delayed now, by queue id.");
    for (size_t i = 0; rc == KL_OK && i < filled; i++) {
        snprintf(id, sizeof id, "%" PRIu64, g[i].qid);
        kl_metrics_label l = {"queue_id", id};
        kl_metrics_u64(b, "keyload_queue_in_flight_messages", &l, 1, g[i].in_flight);
    }
    s->m->series_dropped += 2 * (total - filled) + (rc == KL_OK ? 0 : filled);
    kl_metrics_one(b, "keyload_metrics_series_dropped_total", "counter",
                   "Per-queue series left out of scrapes by the per-queue cap (KL_METRICS_QUEUES_MAX) "
                   "or the scan budget.", s->m->series_dropped);
    kl_metrics_one(b, "keyload_metrics_queue_series_cap", "gauge",
                   "Queues per scrape that get per-queue series.", KL_METRICS_QUEUES_MAX);
}

/* Transfers: counters of the events this member applied (node.c note_transfers), failures
 * by status code (a closed set: every code's series is written, zeros included), and the
 * partition's OutputPending intents read from applied state within the scan budget. */
static void render_transfers(const kl_dmetrics_src *s, kl_metrics_buf *b)
{
    kl_node_transfer_counts t;
    kl_node_transfer_counts_get(s->node, &t);
    kl_metrics_one(b, "keyload_transfers_created_total", "counter",
                   "Transfer intents this member applied on their source partition since it started.", t.created);
    kl_metrics_one(b, "keyload_transfers_delivered_total", "counter",
                   "Transfer intents this member applied as Delivered (Complete) since it started.", t.delivered);
    kl_metrics_family(b, "keyload_transfers_failed_total", "counter",
                      "Committed terminal refusals of transfer steps (Accept, Complete, advance) this member "
                      "applied since it started, by status code.");
    for (int c = 1; c < KL_CODE_COUNT; c++) {
        kl_metrics_label l = {"code", kl_code_name(c)};
        kl_metrics_u64(b, "keyload_transfers_failed_total", &l, 1, t.failed[c]);
    }
    uint64_t pending = 0;
    kl_err err;
    if (kl_node_transfers_pending(s->node, KL_METRICS_SCAN_RECORDS_MAX, &pending, &err) != KL_OK) {
        s->m->scrape_errors++; /* past the budget: no sample rather than a wrong one */
        return;
    }
    kl_metrics_one(b, "keyload_transfers_pending", "gauge",
                   "Transfer intents of this partition in state OutputPending (as this member applied).", pending);
}

void kl_dmetrics_render(const kl_dmetrics_src *s, kl_metrics_buf *b)
{
    char part[16], mem[24];
    snprintf(part, sizeof part, "%d", s->m->partition);
    snprintf(mem, sizeof mem, "%" PRIu64, s->m->member);
    kl_metrics_family(b, "keyload_member_info", "gauge", "This member's partition and member id.");
    kl_metrics_label info[2] = {{"partition", part}, {"member", mem}};
    kl_metrics_u64(b, "keyload_member_info", info, 2, 1);
    if (s->store != NULL) {
        kl_metrics_one(b, "keyload_raft_applied_index", "gauge", "Last log index applied to the store.",
                       kl_store_applied_index(s->store));
        kl_metrics_one(b, "keyload_journal_direct", "gauge",
                       "1 while the log journal writes with O_DIRECT; 0 when it writes through the page cache.",
                       kl_store_journal_direct(s->store));
    }
    if (s->repl != NULL)
        render_raft(s, b);
    render_counters(s, b);
    if (s->node != NULL) {
        kl_node_costs nc;
        kl_node_costs_get(s->node, &nc);
        kl_metrics_one(b, "keyload_batches_total", "counter", "Batches this member evaluated as leader.", nc.batches);
        kl_metrics_one(b, "keyload_parked_receives", "gauge", "Receives waiting for messages.", kl_node_parked(s->node));
        render_queues(s, b);
        render_transfers(s, b);
    }
    kl_metrics_one(b, "keyload_sessions", "gauge", "Open client sessions on this member.",
                   s->sessions ? kl_sessions_count(s->sessions) : 0);
}
