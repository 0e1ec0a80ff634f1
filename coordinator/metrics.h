/* metrics: the coordinator's Prometheus series (ARCHITECTURE.md "Metrics"), served by
 * common/metrics_http.h on the address of its config's "metrics" key.
 *
 * Thread rule: the render runs on the coordinator's loop thread (the endpoint hands it
 * over); it reads kl_coord_stats, which are atomics written by the loop, discovery's thread
 * and (armed test failpoints only) libuv's pool, and the published lane counts under lanes_mu. Labels: status code
 * names only; never a lane, queue or principal name. */
#ifndef KL_COORD_METRICS_H
#define KL_COORD_METRICS_H

#include "common/metrics.h"
#include "coordinator/coord.h"

/* kl_metrics_render_fn with ctx = the kl_coord. */
void kl_coord_metrics_render(void *ctx, kl_metrics_buf *out);

#endif
