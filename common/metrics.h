/* metrics: the Prometheus text exposition format (version 0.0.4), pure (ARCHITECTURE.md
 * "Metrics").
 *
 * A scrape is rendered from scratch into a kl_metrics_buf: each family is written as its
 * HELP and TYPE lines followed by its samples. Nothing here is shared between threads: the
 * process keeps its own counters (on the thread that owns them) and renders them on that
 * thread (common/metrics_http.h hands the render to the loop thread).
 *
 * Labels: label values are escaped (backslash, double quote, newline) as the format
 * requires. Callers pass only fixed strings of the program or names the catalog validated,
 * never a token, a message body or a field value. Per-queue series go through a kl_metrics_cap:
 * past KL_METRICS_QUEUES_MAX queues their series are counted as dropped, never written.
 *
 * Histograms have fixed upper bounds (seconds or bytes), cumulative buckets, +Inf, _sum and
 * _count. Memory: the buffer grows by doubling; a failed allocation marks it (oom) and later
 * writes are ignored, so a scrape under memory pressure answers 500 instead of a truncated
 * page. */
#ifndef KL_COMMON_METRICS_H
#define KL_COMMON_METRICS_H

#include "common/limits.h"
#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kl_metrics_buf {
    char *p;
    size_t len, cap;
    bool oom;
} kl_metrics_buf;

void kl_metrics_buf_free(kl_metrics_buf *b);
/* Takes b's text (NUL-terminated, malloc'd; NULL after oom) and empties b. */
char *kl_metrics_buf_take(kl_metrics_buf *b, size_t *len);

typedef struct kl_metrics_label {
    const char *name;  /* [a-zA-Z_][a-zA-Z0-9_]*: a constant of the program */
    const char *value; /* escaped when written */
} kl_metrics_label;

/* "# HELP name help" and "# TYPE name type" (type: counter, gauge, histogram). */
void kl_metrics_family(kl_metrics_buf *b, const char *name, const char *type, const char *help);
/* One sample: name{labels} value. */
void kl_metrics_u64(kl_metrics_buf *b, const char *name, const kl_metrics_label *labels,
                    size_t nlabels, uint64_t value);
void kl_metrics_f64(kl_metrics_buf *b, const char *name, const kl_metrics_label *labels,
                    size_t nlabels, double value);
/* A family with a single unlabelled sample. */
void kl_metrics_one(kl_metrics_buf *b, const char *name, const char *type, const char *help,
                    uint64_t value);

/* A histogram with fixed upper bounds (ascending, at most KL_METRICS_HIST_BUCKETS_MAX). */
typedef struct kl_metrics_hist {
    const double *bounds;
    size_t nbounds;
    uint64_t counts[KL_METRICS_HIST_BUCKETS_MAX + 1]; /* per bucket, not cumulative; last = +Inf */
    uint64_t count;
    double sum;
} kl_metrics_hist;

void kl_metrics_hist_init(kl_metrics_hist *h, const double *bounds, size_t nbounds);
void kl_metrics_hist_observe(kl_metrics_hist *h, double v);
/* Family lines, then name_bucket{le=...} cumulative up to +Inf, name_sum and name_count. */
void kl_metrics_hist_write(kl_metrics_buf *b, const char *name, const char *help,
                           const kl_metrics_hist *h);

/* Latency bounds in seconds, 100 us .. 10 s, shared by the daemon's histograms. */
extern const double kl_metrics_latency_bounds[];
extern const size_t kl_metrics_latency_nbounds;

/* The per-queue series cap of one scrape. */
typedef struct kl_metrics_cap {
    size_t max, used;
    uint64_t dropped; /* series not written in this scrape */
} kl_metrics_cap;

void kl_metrics_cap_init(kl_metrics_cap *c, size_t max);
/* True when one more queue's series fit; else adds series to dropped and returns false. */
bool kl_metrics_cap_take(kl_metrics_cap *c, size_t series);

/* Metrics addresses (common/metrics_http.h serves them). */
/* Whether `host:port` names a loopback host (127.0.0.0/8, `localhost`, `::1`: reachable only from this machine). Pure. */
bool kl_metrics_addr_is_loopback(const char *addr);
/* Checks `host:port` (host an IPv4 address, `localhost` or `[v6]`; port 1..65535).
 * KL_INVALID_ARGUMENT naming `field` when malformed. Pure. */
kl_code kl_metrics_addr_check(const char *addr, const char *field, kl_err *err);
/* The rules every member metrics endpoint obeys, whether the cluster file or `keyloadd
 * --metrics-addr` gives it: "" = no endpoint (OK); else addr must pass kl_metrics_addr_check
 * (detail `metrics`), and a non-loopback addr needs a token file (detail
 * `metrics_token_file`). addr_name and token_name say where the user wrote them, for the
 * message; neither the token nor the file's content is read here. Pure. */
kl_code kl_metrics_endpoint_check(const char *addr, const char *token_file, const char *addr_name,
                                  const char *token_name, kl_err *err);

#endif
