/* stages: per-stage timing of replicated writes (the contract is in stages.h). */
#include "daemon/repl/stages.h"

#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct stage_rec {
    uint64_t index; /* 0 = empty */
    uint64_t t[KL_STAGE_COUNT];
} stage_rec;

typedef struct span_samples {
    uint32_t us[KL_STAGES_SAMPLES];
    size_t n; /* total pushed since the last report; the ring keeps the last ones */
} span_samples;

struct kl_stages {
    stage_rec ring[KL_STAGES_RING];
    span_samples spans[KL_SPAN_COUNT];
    uint64_t last_report_ns;
    uint64_t write_start_ns; /* the running synced write's start, 0 = none */
    kl_metrics_hist commit_hist, fsync_hist;
};

static const char *const span_names[KL_SPAN_COUNT] = {
    "queue", "write", "quorum", "apply", "total", "f_queue", "f_write", "apply_call", "send",
    "replicate", "w_hop", "w_run", "w_back", "w_sync",
};

kl_stages *kl_stages_new(void)
{
    kl_stages *s = calloc(1, sizeof(kl_stages));
    if (s != NULL) {
        kl_metrics_hist_init(&s->commit_hist, kl_metrics_latency_bounds, kl_metrics_latency_nbounds);
        kl_metrics_hist_init(&s->fsync_hist, kl_metrics_latency_bounds, kl_metrics_latency_nbounds);
    }
    return s;
}

void kl_stages_write_begin(kl_stages *s, uint64_t now)
{
    if (s != NULL)
        s->write_start_ns = now;
}

void kl_stages_write_end(kl_stages *s, uint64_t now)
{
    if (s == NULL || s->write_start_ns == 0)
        return;
    uint64_t from = s->write_start_ns;
    kl_metrics_hist_observe(&s->fsync_hist, now > from ? (double)(now - from) / 1e9 : 0);
    s->write_start_ns = 0;
}

const kl_metrics_hist *kl_stages_commit_hist(const kl_stages *s) { return s ? &s->commit_hist : NULL; }

const kl_metrics_hist *kl_stages_fsync_hist(const kl_stages *s) { return s ? &s->fsync_hist : NULL; }

void kl_stages_free(kl_stages *s) { free(s); }

uint64_t kl_stages_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void kl_stages_mark(kl_stages *s, uint64_t index, kl_stage stage, uint64_t now)
{
    if (s == NULL || index == 0)
        return;
    stage_rec *r = &s->ring[index % KL_STAGES_RING];
    if (stage == KL_STAGE_PROPOSE) {
        memset(r, 0, sizeof *r);
        r->index = index;
    } else if (r->index != index || r->t[stage] != 0) {
        return;
    }
    r->t[stage] = now;
}

void kl_stages_mark_range(kl_stages *s, uint64_t lo, uint64_t hi, kl_stage stage, uint64_t now)
{
    if (s == NULL || lo > hi)
        return;
    if (hi - lo >= KL_STAGES_RING)
        lo = hi - KL_STAGES_RING + 1;
    for (uint64_t i = lo; i <= hi; i++)
        kl_stages_mark(s, i, stage, now);
}

static void push(kl_stages *s, kl_stage_span span, uint64_t from, uint64_t to)
{
    if (from == 0 || to == 0)
        return;
    span_samples *sp = &s->spans[span];
    uint64_t us = to > from ? (to - from) / 1000 : 0;
    sp->us[sp->n % KL_STAGES_SAMPLES] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
    sp->n++;
}

void kl_stages_span(kl_stages *s, kl_stage_span span, uint64_t from, uint64_t to)
{
    if (s != NULL)
        push(s, span, from, to);
}

void kl_stages_applied(kl_stages *s, uint64_t index, uint64_t now)
{
    if (s == NULL)
        return;
    stage_rec *r = &s->ring[index % KL_STAGES_RING];
    if (r->index != index || r->t[KL_STAGE_PROPOSE] == 0)
        return;
    const uint64_t *t = r->t;
    /* A commit seen before the own write completed (not possible while the leader counts
     * itself, but a quorum without it is) reports a zero quorum span. */
    uint64_t commit = t[KL_STAGE_COMMIT] ? t[KL_STAGE_COMMIT] : now;
    push(s, KL_SPAN_QUEUE, t[KL_STAGE_PROPOSE], t[KL_STAGE_PERSIST_START]);
    push(s, KL_SPAN_WRITE, t[KL_STAGE_PERSIST_START], t[KL_STAGE_PERSIST_DONE]);
    push(s, KL_SPAN_QUORUM, t[KL_STAGE_PERSIST_DONE], commit);
    push(s, KL_SPAN_APPLY, commit, now);
    push(s, KL_SPAN_TOTAL, t[KL_STAGE_PROPOSE], now);
    push(s, KL_SPAN_SEND, t[KL_STAGE_PROPOSE], t[KL_STAGE_SENT]);
    if (t[KL_STAGE_SENT] != 0)
        push(s, KL_SPAN_REPLICATE, t[KL_STAGE_SENT], commit);
    if (commit > t[KL_STAGE_PROPOSE])
        kl_metrics_hist_observe(&s->commit_hist, (double)(commit - t[KL_STAGE_PROPOSE]) / 1e9);
    r->index = 0;
}

void kl_stages_follower_done(kl_stages *s, uint64_t index, uint64_t now)
{
    if (s == NULL)
        return;
    stage_rec *r = &s->ring[index % KL_STAGES_RING];
    if (r->index != index || r->t[KL_STAGE_PROPOSE] == 0)
        return;
    push(s, KL_SPAN_F_QUEUE, r->t[KL_STAGE_PROPOSE], r->t[KL_STAGE_PERSIST_START]);
    push(s, KL_SPAN_F_WRITE, r->t[KL_STAGE_PERSIST_START], now);
    r->index = 0;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* p50 and p99 of the span's kept samples (us); false when there are none. */
static bool span_pcts(const kl_stages *s, kl_stage_span span, uint32_t *p50, uint32_t *p99,
                      size_t *n)
{
    const span_samples *sp = &s->spans[span];
    *n = sp->n < KL_STAGES_SAMPLES ? sp->n : KL_STAGES_SAMPLES;
    if (*n == 0)
        return false;
    static uint32_t tmp[KL_STAGES_SAMPLES]; /* loop thread only */
    memcpy(tmp, sp->us, *n * sizeof tmp[0]);
    qsort(tmp, *n, sizeof tmp[0], cmp_u32);
    *p50 = tmp[*n / 2];
    *p99 = tmp[(*n * 99) / 100 < *n ? (*n * 99) / 100 : *n - 1];
    return true;
}

size_t kl_stages_count(const kl_stages *s, kl_stage_span span) { return s->spans[span].n; }

uint64_t kl_stages_median(const kl_stages *s, kl_stage_span span)
{
    uint32_t p50, p99;
    size_t n;
    return span_pcts(s, span, &p50, &p99, &n) ? p50 : 0;
}

void kl_stages_report(kl_stages *s, uint64_t member, bool force)
{
    if (s == NULL)
        return;
    size_t total = s->spans[KL_SPAN_TOTAL].n + s->spans[KL_SPAN_F_WRITE].n;
    if (total == 0 || (!force && total < 64))
        return;
    char line[1024];
    size_t off = 0;
    for (int i = 0; i < KL_SPAN_COUNT; i++) {
        uint32_t p50, p99;
        size_t n;
        if (!span_pcts(s, (kl_stage_span)i, &p50, &p99, &n))
            continue;
        int w = snprintf(line + off, sizeof line - off, "%s%s_n=%zu %s_p50_us=%u %s_p99_us=%u",
                         off ? " " : "", span_names[i], s->spans[i].n, span_names[i], p50,
                         span_names[i], p99);
        if (w < 0 || (size_t)w >= sizeof line - off)
            break;
        off += (size_t)w;
    }
    KL_INFO("replication stages", "member=%llu %s", (unsigned long long)member, line);
    for (int i = 0; i < KL_SPAN_COUNT; i++)
        s->spans[i].n = 0;
}
