/* metrics: the coordinator's Prometheus series (the contract is in metrics.h). */
#include "coordinator/metrics.h"

#include "common/status.h"

#include <pthread.h>

static uint64_t ld(atomic_uint_fast64_t *a) { return (uint64_t)atomic_load(a); }

void kl_coord_metrics_render(void *ctx, kl_metrics_buf *b)
{
    kl_coord *co = ctx;
    kl_coord_stats *s = &co->stats;
    kl_metrics_one(b, "keyload_coordinator_dispatched_total", "counter",
                   "Pending transfers discovery added to a worker's buffer.", ld(&s->dispatched));
    kl_metrics_one(b, "keyload_coordinator_accepted_total", "counter",
                   "Accepts the destination answered OK.", ld(&s->accepted));
    kl_metrics_one(b, "keyload_coordinator_delivered_total", "counter",
                   "Completes this coordinator saw answered OK.", ld(&s->delivered));
    kl_metrics_one(b, "keyload_coordinator_retries_total", "counter",
                   "Turns that ended in a retry.", ld(&s->retries));
    kl_metrics_family(b, "keyload_coordinator_terminal_failures_total", "counter",
                      "Transfers left pending after a terminal failure, by status code.");
    for (int c = KL_OK + 1; c < KL_CODE_COUNT; c++) {
        kl_metrics_label l = {"code", kl_code_name(c)};
        kl_metrics_u64(b, "keyload_coordinator_terminal_failures_total", &l, 1, ld(&s->terminal_by_code[c]));
    }
    kl_metrics_one(b, "keyload_coordinator_turns_in_flight", "gauge", "Worker turns running now.",
                   ld(&s->turns_in_flight));
    kl_metrics_one(b, "keyload_coordinator_discovery_rounds_total", "counter",
                   "Discovery rounds finished.", ld(&s->rounds));
    kl_metrics_one(b, "keyload_coordinator_listed_total", "counter",
                   "Pending transfers discovery has seen, all rounds.", ld(&s->listed));
    uint64_t pending = 0;
    pthread_mutex_lock(&co->lanes_mu);
    for (size_t i = 0; i < co->n_lanes; i++)
        pending += co->lanes[i].pending;
    pending += co->other_lanes_pending;
    pthread_mutex_unlock(&co->lanes_mu);
    kl_metrics_one(b, "keyload_coordinator_pending_seen", "gauge",
                   "Pending transfers the last discovery round saw.", pending);
}
