/* metrics_http: `GET /metrics` over nng's HTTP server (ARCHITECTURE.md "Metrics").
 *
 * nng's HTTP server (nng/supplemental/http/http.h, part of libnng which every process
 * already links) serves the page, so no second HTTP stack or thread model comes in.
 *
 * Thread rule: the page is rendered ON THE LOOP THREAD. A request arrives on an nng worker
 * thread, which posts a uv_async to the loop and waits at most KL_METRICS_RENDER_WAIT_MS
 * for the loop's render callback to hand back the text; past it the scrape gets 503 (a
 * busy loop: retry) and a late render is thrown away. Rendering on the loop means the
 * render callback reads node and replication state like any other loop code, without
 * locks or atomics on the hot paths: the write path only bumps plain counters. Scrapes are
 * served one at a time (a second waits for the first), so a scraper storm queues on nng
 * threads and costs the loop one render per scrape, never more.
 *
 * Address and token: `host:port`. A host in 127.0.0.0/8, `localhost` or `::1` is loopback
 * (reachable only from this machine: 127.0.0.2 counts too); any other host, the wildcard
 * included, requires a bearer token file, and then every request without
 * `Authorization: Bearer <token>` gets 401. The token is compared in constant time
 * (keyed hashes of both, sodium_memcmp), is never logged and never appears in an answer.
 * A token file also protects a loopback address when given.
 *
 * Answers: 200 text/plain; version=0.0.4 with the page; 401 (no or wrong token); 404 for
 * any other path; 405 for any other method (nng); 503 when the loop did not render in time
 * or the endpoint is stopping; 500 when the page could not be allocated. */
#ifndef KL_COMMON_METRICS_HTTP_H
#define KL_COMMON_METRICS_HTTP_H

#include "common/limits.h"
#include "common/metrics.h"
#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

typedef struct kl_metrics_http kl_metrics_http;

/* Runs on the loop thread: writes the whole page into out. */
typedef void (*kl_metrics_render_fn)(void *ctx, kl_metrics_buf *out);

/* Reads a token file: at most KL_METRICS_TOKEN_MAX bytes, trailing whitespace trimmed, at
 * least KL_METRICS_TOKEN_MIN left, no group or other permission bits. Errors name
 * `metrics_token_file` and never echo the contents. */
kl_code kl_metrics_token_load(const char *path, char *token, size_t cap, kl_err *err);

/* Serves `http://addr/metrics`. token_file NULL: none (refused with KL_INVALID_ARGUMENT
 * "metrics_token_file" when addr is not loopback). KL_UNAVAILABLE when the address cannot
 * be bound. render and ctx must stay valid until kl_metrics_http_stop. */
kl_code kl_metrics_http_start(uv_loop_t *loop, const char *addr, const char *token_file,
                              kl_metrics_render_fn render, void *ctx, kl_metrics_http **out,
                              kl_err *err);
/* On the loop thread: answers a waiting scrape 503, stops the server, frees once the loop
 * has closed its handle (keep running the loop). NULL is a no-op. */
void kl_metrics_http_stop(kl_metrics_http *m);
/* Scrapes answered 200 so far (any thread). */
uint64_t kl_metrics_http_served(kl_metrics_http *m);

#endif
