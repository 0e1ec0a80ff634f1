/* metrics: a member's Prometheus series (ARCHITECTURE.md "Metrics").
 *
 * Thread rule: everything here runs on the loop thread. The counters below are plain
 * integers bumped by the loop (main's driver callbacks, the RPC server's refusal hook);
 * kl_dmetrics_render reads them and the node, driver, stage and session state directly,
 * because common/metrics_http.h hands each scrape's render to the loop thread (bounded
 * wait there). No atomics are needed and the write path pays one increment per event.
 *
 * Labels carry only fixed strings of the daemon (role names, status code names, error
 * details, which are program constants) and numbers (queue ids, partition, member): never a
 * queue or principal name, a token, a body or any client text. Error details are checked
 * against a small charset and the table of (code, detail) pairs is capped at
 * KL_METRICS_REFUSALS_MAX; per-queue series at KL_METRICS_QUEUES_MAX queues, the rest
 * counted in keyload_metrics_series_dropped_total. */
#ifndef KL_DAEMON_METRICS_H
#define KL_DAEMON_METRICS_H

#include "common/limits.h"
#include "common/metrics.h"
#include "daemon/node.h"
#include "daemon/repl/driver.h"
#include "daemon/rpc/sessions.h"
#include "daemon/store/store.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kl_dmetrics_refusal {
    int code;
    char detail[48];
    uint64_t n;
} kl_dmetrics_refusal;

typedef struct kl_dmetrics {
    int partition;
    uint64_t member;
    uint64_t committed_entries; /* entries applied here (committed), since start */
    uint64_t committed_bytes;
    uint64_t elections;         /* campaigns this member started (became candidate) */
    uint64_t leader_changes;    /* the known leader changed */
    uint64_t last_leader;
    kl_dmetrics_refusal refusals[KL_METRICS_REFUSALS_MAX];
    size_t nrefusals;
    uint64_t refusals_other;    /* pairs past the cap, or details outside the charset */
    uint64_t series_dropped;    /* per-queue series left out by the cap, all scrapes */
    uint64_t scrape_errors;     /* per-queue reads that failed or ran out of budget */
} kl_dmetrics;

/* What a render reads; any pointer may be NULL (its series are left out). */
typedef struct kl_dmetrics_src {
    kl_dmetrics *m;
    kl_node *node;
    const kl_repl *repl;
    kl_store *store;
    const kl_sessions *sessions;
} kl_dmetrics_src;

/* The RPC server's refusal hook (common/rpc.h on_refusal): ctx is the kl_dmetrics. */
void kl_dmetrics_refusal_hook(void *ctx, int code, const char *detail);
/* Driver callbacks' bookkeeping. */
void kl_dmetrics_applied(kl_dmetrics *m, size_t entry_bytes);
void kl_dmetrics_role(kl_dmetrics *m, bool candidate, uint64_t leader);
/* The whole page. */
void kl_dmetrics_render(const kl_dmetrics_src *s, kl_metrics_buf *b);
/* Resident set size in bytes from /proc/self/statm (0 when unreadable). */
uint64_t kl_dmetrics_rss_bytes(void);

#endif
