/* trace: sampled cross-member stamps of replicated writes (the contract is in trace.h). */
#include "daemon/repl/trace.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

struct kl_trace {
    uint32_t every;
    uint64_t newest; /* the highest index begun: later ones have no record yet */
    kl_trace_sink sink;
    void *ctx;
    kl_trace_record ring[KL_TRACE_RING];
};

kl_code kl_trace_new(uint32_t every, kl_trace_sink sink, void *ctx, kl_trace **out, kl_err *err)
{
    *out = NULL;
    if (every == 0)
        return KL_OK;
    if (every > KL_TRACE_EVERY_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "repl_trace", "the replication trace samples every N-th index, N in 0..%u (got %u)",
                       KL_TRACE_EVERY_MAX, every);
    kl_trace *t = calloc(1, sizeof *t);
    if (t == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory starting the replication trace");
    t->every = every;
    t->sink = sink;
    t->ctx = ctx;
    *out = t;
    return KL_OK;
}

void kl_trace_free(kl_trace *t) { free(t); }

static uint64_t to_us(uint64_t ns) { return ns / 1000u; }

/* The sampled indexes of [lo, hi] as [*first, *last] stepping by every, at most the newest
 * KL_TRACE_RING of them; false when there is none. */
static bool sampled(const kl_trace *t, uint64_t lo, uint64_t hi, uint64_t *first, uint64_t *last)
{
    if (lo == 0)
        lo = 1;
    if (hi < lo)
        return false;
    uint64_t e = t->every;
    uint64_t f = (lo + e - 1) / e * e;
    uint64_t l = hi / e * e;
    if (f < lo || f > l) /* f < lo: the rounding overflowed */
        return false;
    uint64_t span = (uint64_t)(KL_TRACE_RING - 1) * e;
    if (l - f > span)
        f = l - span;
    *first = f;
    *last = l;
    return true;
}

/* sampled() over indexes already begun: no record exists past the newest one. */
static bool begun(const kl_trace *t, uint64_t lo, uint64_t hi, uint64_t *first, uint64_t *last)
{
    return sampled(t, lo, hi < t->newest ? hi : t->newest, first, last);
}

static kl_trace_record *slot(kl_trace *t, uint64_t index) { return &t->ring[(index / t->every) % KL_TRACE_RING]; }

void kl_trace_begin(kl_trace *t, uint64_t lo, uint64_t hi, bool leader, kl_trace_point p, uint64_t now_ns)
{
    uint64_t f, l;
    if (t == NULL || !sampled(t, lo, hi, &f, &l))
        return;
    assert(p < KL_TP_COUNT);
    for (uint64_t i = f;; i += t->every) {
        kl_trace_record *r = slot(t, i);
        if (r->index != i || r->leader != leader) {
            memset(r, 0, sizeof *r);
            r->index = i;
            r->leader = leader;
        }
        if (r->t[p] == 0)
            r->t[p] = to_us(now_ns);
        if (i == l)
            break;
    }
    if (l > t->newest)
        t->newest = l;
}

void kl_trace_mark(kl_trace *t, uint64_t lo, uint64_t hi, kl_trace_point p, uint64_t now_ns)
{
    uint64_t f, l;
    if (t == NULL || !begun(t, lo, hi, &f, &l))
        return;
    assert(p < KL_TP_COUNT);
    for (uint64_t i = f;; i += t->every) {
        kl_trace_record *r = slot(t, i);
        if (r->index == i && r->t[p] == 0)
            r->t[p] = to_us(now_ns);
        if (i == l)
            break;
    }
}

/* The record's column for peer, a new one if it has none yet; -1 when all are taken. */
static int peer_column(kl_trace_record *r, uint64_t peer)
{
    for (int c = 0; c < KL_TRACE_MAX_PEERS; c++) {
        if (r->peer[c] == peer)
            return c;
        if (r->peer[c] == 0) {
            r->peer[c] = peer;
            return c;
        }
    }
    return -1;
}

void kl_trace_peer_mark(kl_trace *t, uint64_t lo, uint64_t hi, uint64_t peer, kl_trace_peer_point p,
                        uint64_t now_ns)
{
    uint64_t f, l;
    if (t == NULL || peer == 0 || !begun(t, lo, hi, &f, &l))
        return;
    assert(p < KL_TPP_COUNT);
    for (uint64_t i = f;; i += t->every) {
        kl_trace_record *r = slot(t, i);
        int c = r->index == i ? peer_column(r, peer) : -1;
        if (c >= 0 && r->p[c][p] == 0)
            r->p[c][p] = to_us(now_ns);
        if (i == l)
            break;
    }
}

void kl_trace_emit(kl_trace *t, uint64_t lo, uint64_t hi, bool leader)
{
    uint64_t f, l;
    if (t == NULL || !begun(t, lo, hi, &f, &l))
        return;
    for (uint64_t i = f;; i += t->every) {
        kl_trace_record *r = slot(t, i);
        if (r->index == i && r->leader == leader) {
            if (t->sink != NULL)
                t->sink(t->ctx, r);
            memset(r, 0, sizeof *r);
        }
        if (i == l)
            break;
    }
}
