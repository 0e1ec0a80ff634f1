/* raft_log: the core's view of the log (see raft_log.h for what it owns and its invariants). */
#include "daemon/repl/raft_log.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static kl_raft_entry *at(const kl_rlog *l, uint64_t index)
{
    assert(index >= l->mem_first && index <= l->last);
    return &l->ents[l->head + (size_t)(index - l->mem_first)];
}

kl_code kl_rlog_init(kl_rlog *l, const kl_raft_storage *st, uint64_t snap_index,
                     uint64_t snap_term, uint64_t last_index, size_t cache_entries,
                     size_t cache_bytes)
{
    memset(l, 0, sizeof *l);
    l->st = *st;
    l->snap_index = snap_index;
    l->snap_term = snap_term;
    l->last_term = snap_term;
    l->last = last_index;
    l->mem_first = last_index + 1;
    l->persisted = last_index;
    l->written_hi = last_index;
    l->cache_entries = cache_entries;
    l->cache_bytes = cache_bytes;
    if (last_index > snap_index) {
        uint64_t t = 0;
        if (st->term(st->ctx, last_index, &t) != KL_OK || t == 0)
            return KL_INTERNAL;
        l->last_term = t;
    }
    return KL_OK;
}

void kl_rlog_free(kl_rlog *l)
{
    for (size_t i = 0; i < l->len; i++)
        free(l->ents[l->head + i].data);
    free(l->ents);
    memset(l, 0, sizeof *l);
}

static uint64_t stored_term(kl_rlog *l, uint64_t index)
{
    uint64_t t = 0;
    if (index == l->snap_index)
        return l->snap_term;
    if (l->fatal)
        return 0;
    if (l->st.term(l->st.ctx, index, &t) != KL_OK || t == 0) {
        l->fatal = true;
        return 0;
    }
    return t;
}

uint64_t kl_rlog_term(kl_rlog *l, uint64_t index)
{
    if (index == 0 || index > l->last || index < l->snap_index)
        return 0;
    if (index == l->last)
        return l->last_term;
    if (index >= l->mem_first)
        return at(l, index)->term;
    /* Below the window means persisted: mem_first <= persisted + 1. */
    return stored_term(l, index);
}

bool kl_rlog_match(kl_rlog *l, uint64_t index, uint64_t term)
{
    if (index == 0)
        return term == 0;
    if (index < l->snap_index)
        return false;
    return index <= l->last && kl_rlog_term(l, index) == term && !l->fatal;
}

uint64_t kl_rlog_conflict_by_term(kl_rlog *l, uint64_t index, uint64_t term)
{
    if (index > l->last)
        index = l->last;
    while (index > 0) {
        if (index <= l->snap_index)
            return index;
        uint64_t t = kl_rlog_term(l, index);
        if (l->fatal)
            return 0;
        if (t <= term)
            return index;
        index--;
    }
    return 0;
}

/* Room for one more entry at the end: slide the window to the front of its array before
 * growing it, so eviction from the front does not make the array grow forever. */
static bool reserve_one(kl_rlog *l)
{
    if (l->head + l->len < l->cap)
        return true;
    if (l->head > 0) {
        memmove(l->ents, l->ents + l->head, l->len * sizeof *l->ents);
        l->head = 0;
        if (l->len < l->cap)
            return true;
    }
    size_t ncap = l->cap ? l->cap * 2 : 64;
    kl_raft_entry *n = realloc(l->ents, ncap * sizeof *n);
    if (n == NULL)
        return false;
    l->ents = n;
    l->cap = ncap;
    return true;
}

bool kl_rlog_append(kl_rlog *l, uint64_t term, uint8_t type, uint8_t *data, size_t len)
{
    assert(term >= l->last_term);
    assert(l->last + 1 > l->persisted);
    if (!reserve_one(l))
        return false;
    if (l->len == 0)
        l->mem_first = l->last + 1;
    l->ents[l->head + l->len] =
        (kl_raft_entry){.term = term, .index = l->last + 1, .type = type, .data = data, .len = len};
    l->len++;
    l->last++;
    l->last_term = term;
    l->mem_bytes += len;
    l->unp_bytes += len;
    return true;
}

void kl_rlog_truncate(kl_rlog *l, uint64_t from)
{
    /* invariant I-REPL-4: no entry <= commit is ever truncated (commit >= snap_index) */
    assert(from > l->snap_index && from <= l->last);
    for (uint64_t i = from > l->mem_first ? from : l->mem_first; i <= l->last; i++) {
        kl_raft_entry *e = at(l, i);
        l->mem_bytes -= e->len;
        if (i > l->persisted)
            l->unp_bytes -= e->len;
        free(e->data);
    }
    if (from >= l->mem_first) {
        l->len = (size_t)(from - l->mem_first);
    } else {
        /* The cut reaches below the window: everything cached goes, the window restarts. */
        l->len = 0;
        l->head = 0;
        l->mem_first = from;
    }
    /* Entries the driver may hold from `from` on are stale now; it must delete them before
     * writing the replacements (reported once, in the next ready). */
    if (from <= l->written_hi) {
        if (l->pending_trunc == 0 || from < l->pending_trunc)
            l->pending_trunc = from;
        l->written_hi = from - 1;
    }
    if (l->persisted >= from)
        l->persisted = from - 1;
    for (size_t k = 0; k < l->n_handed; k++) {
        uint64_t *hi = &l->handed_hi[(l->handed_head + k) % KL_RAFT_MAX_READIES];
        if (*hi >= from)
            *hi = from - 1;
    }
    l->last = from - 1;
    if (l->last == l->snap_index)
        l->last_term = l->snap_term;
    else if (l->last >= l->mem_first)
        l->last_term = at(l, l->last)->term;
    else
        l->last_term = stored_term(l, l->last);
    if (l->len == 0)
        l->mem_first = l->last + 1;
}

void kl_rlog_compact(kl_rlog *l, uint64_t index)
{
    /* invariant I-SNAP-1: only durable (applied) entries are compacted */
    assert(index >= l->snap_index && index <= l->persisted);
    uint64_t t = kl_rlog_term(l, index);
    if (l->fatal)
        return;
    while (l->len > 0 && l->mem_first <= index) {
        kl_raft_entry *e = &l->ents[l->head];
        l->mem_bytes -= e->len; /* durable: never counted in unp_bytes */
        free(e->data);
        l->head++;
        l->len--;
        l->mem_first++;
    }
    if (l->len == 0) {
        l->head = 0;
        l->mem_first = l->last + 1;
    }
    l->snap_index = index;
    l->snap_term = t;
}

void kl_rlog_restore(kl_rlog *l, uint64_t index, uint64_t term)
{
    /* invariant I-SNAP-3: an install replaces the log only with no ready outstanding */
    assert(l->n_handed == 0 && term > 0);
    for (size_t i = 0; i < l->len; i++)
        free(l->ents[l->head + i].data);
    l->head = l->len = 0;
    l->snap_index = l->last = l->persisted = l->written_hi = index;
    l->snap_term = l->last_term = term;
    l->mem_first = index + 1;
    l->pending_trunc = 0;
    l->unp_bytes = l->mem_bytes = 0;
}

uint64_t kl_rlog_unpersisted(const kl_rlog *l) { return l->last - l->persisted; }

void kl_rlog_free_entries(kl_raft_entry *e, size_t n)
{
    if (e == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        free(e[i].data);
    free(e);
}

static bool copy_entry(kl_raft_entry *dst, const kl_raft_entry *src)
{
    *dst = *src;
    dst->data = NULL;
    if (src->len > 0) {
        dst->data = malloc(src->len);
        if (dst->data == NULL)
            return false;
        memcpy(dst->data, src->data, src->len);
    }
    return true;
}

/* Entries lo .. hi-1 that are below the window come from storage. The callback's contract is
 * checked, because a driver bug here would silently corrupt what followers receive. */
static bool copy_stored(kl_rlog *l, uint64_t lo, uint64_t hi, size_t max_bytes,
                        kl_raft_entry *out, size_t cap, size_t *n, size_t *bytes)
{
    size_t got = 0;
    if (l->st.entries(l->st.ctx, lo, hi, max_bytes, out, cap, &got) != KL_OK || got > cap ||
        (got == 0 && lo < hi && cap > 0)) {
        l->fatal = true;
        return false;
    }
    for (size_t i = 0; i < got; i++) {
        if (out[i].index != lo + i || out[i].term == 0 || (out[i].len > 0 && !out[i].data)) {
            for (size_t j = 0; j < got; j++)
                free(out[j].data);
            l->fatal = true;
            return false;
        }
        *bytes += out[i].len;
    }
    *n = got;
    return true;
}

bool kl_rlog_copy(kl_rlog *l, uint64_t lo, uint64_t hi, size_t max_bytes, size_t max_n,
                  kl_raft_entry **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (hi > l->last + 1)
        hi = l->last + 1;
    if (lo >= hi || max_n == 0)
        return true;
    /* invariant I-SNAP-2: nothing at or below the snapshot index is read */
    assert(lo > l->snap_index);
    size_t want = (size_t)(hi - lo) < max_n ? (size_t)(hi - lo) : max_n;
    kl_raft_entry *e = calloc(want, sizeof *e);
    if (e == NULL)
        return false;
    size_t k = 0, bytes = 0;
    if (lo < l->mem_first) {
        uint64_t shi = hi < l->mem_first ? hi : l->mem_first;
        if (!copy_stored(l, lo, shi, max_bytes, e, want, &k, &bytes)) {
            free(e);
            return false;
        }
        /* Storage stopped early (bytes or count): so do we. */
        if (lo + k < shi) {
            *out = e;
            *n = k;
            return true;
        }
    }
    for (uint64_t i = lo + k; i < hi && k < want; i++) {
        const kl_raft_entry *src = at(l, i);
        if (k > 0 && bytes + src->len > max_bytes)
            break;
        if (!copy_entry(&e[k], src)) {
            kl_rlog_free_entries(e, k);
            return false;
        }
        bytes += src->len;
        k++;
    }
    *out = e;
    *n = k;
    return true;
}

uint64_t kl_rlog_handed_through(const kl_rlog *l)
{
    if (l->n_handed == 0)
        return l->persisted;
    return l->handed_hi[(l->handed_head + l->n_handed - 1) % KL_RAFT_MAX_READIES];
}

uint64_t kl_rlog_hand_out(kl_rlog *l)
{
    assert(l->n_handed < KL_RAFT_MAX_READIES);
    /* The cut starts right after what the outstanding readies write: they run first. */
    assert(l->pending_trunc == 0 || l->pending_trunc == kl_rlog_handed_through(l) + 1);
    uint64_t t = l->pending_trunc;
    l->pending_trunc = 0;
    l->handed_hi[(l->handed_head + l->n_handed) % KL_RAFT_MAX_READIES] = l->last;
    l->n_handed++;
    if (l->last > l->written_hi)
        l->written_hi = l->last;
    return t;
}

void kl_rlog_stable(kl_rlog *l)
{
    assert(l->n_handed > 0);
    uint64_t hi = l->handed_hi[l->handed_head];
    assert(hi >= l->persisted && hi <= l->last);
    for (uint64_t i = l->persisted + 1; i <= hi; i++)
        l->unp_bytes -= at(l, i)->len;
    l->persisted = hi;
    l->handed_head = (l->handed_head + 1) % KL_RAFT_MAX_READIES;
    l->n_handed--;
}

void kl_rlog_evict(kl_rlog *l)
{
    while (l->len > 0 && l->mem_first <= l->persisted) {
        uint64_t cached = l->persisted - l->mem_first + 1;
        size_t cached_bytes = l->mem_bytes - l->unp_bytes;
        if (cached <= l->cache_entries && cached_bytes <= l->cache_bytes)
            break;
        kl_raft_entry *e = &l->ents[l->head];
        l->mem_bytes -= e->len;
        free(e->data);
        l->head++;
        l->len--;
        l->mem_first++;
    }
    if (l->len == 0) {
        l->head = 0;
        l->mem_first = l->last + 1;
    }
}

#ifndef NDEBUG
void kl_rlog_check(const kl_rlog *l)
{
    /* invariant I-SNAP-1: the compacted prefix is durable and below the window */
    assert(l->snap_index <= l->persisted && l->persisted <= l->last);
    assert(l->mem_first <= l->persisted + 1 && l->snap_index < l->mem_first);
    assert(l->mem_first + l->len == l->last + 1);
    assert(l->head + l->len <= l->cap || l->len == 0);
    assert(l->n_handed <= KL_RAFT_MAX_READIES);
    for (size_t k = 0; k < l->n_handed; k++) {
        uint64_t hi = l->handed_hi[(l->handed_head + k) % KL_RAFT_MAX_READIES];
        assert(l->persisted <= hi && hi <= l->last);
        assert(k == 0 || l->handed_hi[(l->handed_head + k - 1) % KL_RAFT_MAX_READIES] <= hi);
    }
    assert(l->unp_bytes <= l->mem_bytes);
#ifdef KL_RAFT_DEEP_CHECK /* O(window): for debugging sessions, too slow for the simulator */
    size_t mem = 0, unp = 0;
    for (size_t i = 0; i < l->len; i++) {
        const kl_raft_entry *e = &l->ents[l->head + i];
        assert(e->index == l->mem_first + i);
        assert(i == 0 || e->term >= l->ents[l->head + i - 1].term);
        mem += e->len;
        if (e->index > l->persisted)
            unp += e->len;
    }
    assert(mem == l->mem_bytes);
    assert(unp == l->unp_bytes);
    assert(l->len == 0 || l->ents[l->head + l->len - 1].term == l->last_term);
#endif
}
#endif
