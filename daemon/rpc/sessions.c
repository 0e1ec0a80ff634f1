/* sessions: see sessions.h.
 *
 * Layout: `slots` holds up to max entries (used or free; free ones are on a stack of
 * indices); `index` is an open-addressed hash table of 2^k >= 2 * max buckets, each 0
 * (empty) or 1 + a slot number, probed linearly from the bucket of the id's first 8
 * bytes. Deletion shifts later members of the probe run back (no tombstones), so a
 * lookup stops at the first empty bucket.
 * `meta` mirrors each slot's expiry and principal hash in 16 bytes, so that the pass of
 * kl_sessions_put reads 64 KB instead of every whole entry (a few MB at the maximum, which
 * would flush the caches the handshake's crypto runs from).
 * Invariants: a slot is used iff exactly one bucket names it iff its meta.expires != 0;
 * count = used slots = max - free_n; every used slot's principal_hash (and meta's) is the
 * hash of its principal id. */
#include "daemon/rpc/sessions.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
    kl_session_entry e;
    uint64_t principal_hash;   /* FNV-1a of e.s.principal_id: a cheap first comparison */
    bool used;
} slot;

typedef struct slot_meta {
    int64_t expires;           /* the entry's expires_unix_ms; 0 = free slot */
    uint64_t principal_hash;
} slot_meta;

struct kl_sessions {
    size_t max, per_principal;
    size_t count;
    slot *slots;               /* max */
    slot_meta *meta;           /* max */
    uint32_t *free_stack;      /* free slot numbers, free_n of them */
    size_t free_n;
    uint32_t *index;           /* mask + 1 buckets */
    size_t mask;
};

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static size_t bucket_of(const kl_sessions *t, const uint8_t id[KL_SESSION_ID_LEN])
{
    uint64_t h;
    memcpy(&h, id, sizeof h); /* random bytes (a v4 GUID): already a hash */
    return (size_t)(h ^ (h >> 29)) & t->mask;
}

kl_code kl_sessions_new(size_t max, size_t per_principal, kl_sessions **out, kl_err *err)
{
    *out = NULL;
    if (max < 1 || max > KL_SESSIONS_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "max", "session table: max must be 1..%d, got %zu",
                       KL_SESSIONS_MAX, max);
    if (per_principal < 1 || per_principal > max)
        return kl_fail(err, KL_INVALID_ARGUMENT, "per_principal",
                       "session table: per_principal must be 1..%zu, got %zu", max, per_principal);
    size_t buckets = 1;
    while (buckets < 2 * max)
        buckets <<= 1;
    kl_sessions *t = calloc(1, sizeof *t);
    if (t != NULL) {
        t->slots = calloc(max, sizeof *t->slots);
        t->meta = calloc(max, sizeof *t->meta);
        t->free_stack = calloc(max, sizeof *t->free_stack);
        t->index = calloc(buckets, sizeof *t->index);
    }
    if (t == NULL || t->slots == NULL || t->meta == NULL || t->free_stack == NULL || t->index == NULL) {
        kl_sessions_free(t);
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory",
                       "session table: out of memory for %zu sessions", max);
    }
    t->max = max;
    t->per_principal = per_principal;
    t->mask = buckets - 1;
    for (size_t i = 0; i < max; i++)
        t->free_stack[i] = (uint32_t)(max - 1 - i); /* slot 0 is taken first */
    t->free_n = max;
    *out = t;
    return KL_OK;
}

void kl_sessions_free(kl_sessions *t)
{
    if (t == NULL)
        return;
    if (t->slots != NULL) {
        sodium_memzero(t->slots, t->max * sizeof *t->slots);
        free(t->slots);
    }
    free(t->meta);
    free(t->free_stack);
    free(t->index);
    free(t);
}

/* The bucket naming id, or SIZE_MAX. */
static size_t index_find(const kl_sessions *t, const uint8_t id[KL_SESSION_ID_LEN])
{
    for (size_t b = bucket_of(t, id);; b = (b + 1) & t->mask) {
        uint32_t v = t->index[b];
        if (v == 0)
            return SIZE_MAX;
        if (sodium_memcmp(t->slots[v - 1].e.s.id, id, KL_SESSION_ID_LEN) == 0)
            return b;
    }
}

/* Empties bucket b and shifts back the members of its probe run that may move. */
static void index_delete(kl_sessions *t, size_t b)
{
    size_t hole = b;
    t->index[hole] = 0;
    for (size_t i = (hole + 1) & t->mask; t->index[i] != 0; i = (i + 1) & t->mask) {
        size_t home = bucket_of(t, t->slots[t->index[i] - 1].e.s.id);
        /* i's entry may fill the hole iff its home is not cyclically within (hole, i]. */
        bool stays = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
        if (stays)
            continue;
        t->index[hole] = t->index[i];
        t->index[i] = 0;
        hole = i;
    }
}

static void remove_slot(kl_sessions *t, size_t n)
{
    slot *s = &t->slots[n];
    size_t b = index_find(t, s->e.s.id);
    if (b != SIZE_MAX)
        index_delete(t, b);
    sodium_memzero(s, sizeof *s);
    t->meta[n].expires = 0;
    t->meta[n].principal_hash = 0;
    t->free_stack[t->free_n++] = (uint32_t)n;
    t->count--;
}

kl_code kl_sessions_put(kl_sessions *t, const kl_session_entry *e, int64_t now_ms,
                        kl_sessions_evicted *ev, kl_err *err)
{
    kl_sessions_evicted none;
    if (ev == NULL)
        ev = &none;
    memset(ev, 0, sizeof *ev);
    if (e->s.role != KL_SESSION_DAEMON || e->s.principal_id[0] == '\0')
        return kl_fail(err, KL_INVALID_ARGUMENT, "session",
                       "session table: only a daemon session with a principal is stored");
    if (e->s.expires_unix_ms <= now_ms)
        return kl_fail(err, KL_INVALID_ARGUMENT, "expires_unix_ms",
                       "session table: the session has expired already");
    if (index_find(t, e->s.id) != SIZE_MAX)
        return kl_fail(err, KL_CONFLICT, "session_id", "session table: the session id is taken");

    /* One pass: drop the expired, count the principal's, find the eviction candidates. */
    uint64_t h = fnv1a(e->s.principal_id);
    size_t mine = 0, oldest_mine = SIZE_MAX, oldest = SIZE_MAX;
    for (size_t i = 0; i < t->max; i++) {
        const slot_meta *m = &t->meta[i];
        if (m->expires == 0)
            continue;
        if (now_ms >= m->expires) { /* kl_session_expired */
            remove_slot(t, i);
            ev->expired++;
            continue;
        }
        if (oldest == SIZE_MAX || m->expires < t->meta[oldest].expires)
            oldest = i;
        if (m->principal_hash == h && strcmp(t->slots[i].e.s.principal_id, e->s.principal_id) == 0) {
            mine++;
            if (oldest_mine == SIZE_MAX || m->expires < t->meta[oldest_mine].expires)
                oldest_mine = i;
        }
    }
    if (mine >= t->per_principal) {
        remove_slot(t, oldest_mine);
        ev->principal_evicted = 1;
    } else if (t->count >= t->max) {
        remove_slot(t, oldest);
        ev->table_evicted = 1;
    }

    size_t n = t->free_stack[--t->free_n];
    slot *s = &t->slots[n];
    s->e = *e;
    s->principal_hash = h;
    s->used = true;
    t->meta[n].expires = e->s.expires_unix_ms;
    t->meta[n].principal_hash = h;
    size_t b = bucket_of(t, e->s.id);
    while (t->index[b] != 0)
        b = (b + 1) & t->mask;
    t->index[b] = (uint32_t)(n + 1);
    t->count++;
    return KL_OK;
}

kl_code kl_sessions_find(kl_sessions *t, const uint8_t id[KL_SESSION_ID_LEN], int64_t now_ms,
                         kl_session_entry **out, kl_err *err)
{
    *out = NULL;
    size_t b = index_find(t, id);
    if (b == SIZE_MAX)
        return kl_fail(err, KL_UNAUTHENTICATED, "session_unknown",
                       "this member knows no such session (it may have restarted, or the session "
                       "was evicted); shake hands again with Hello");
    size_t n = t->index[b] - 1;
    if (kl_session_expired(&t->slots[n].e.s, now_ms)) {
        remove_slot(t, n);
        return kl_fail(err, KL_UNAUTHENTICATED, "session_expired",
                       "the session has expired; shake hands again with Hello");
    }
    *out = &t->slots[n].e;
    return KL_OK;
}

bool kl_sessions_drop(kl_sessions *t, const uint8_t id[KL_SESSION_ID_LEN])
{
    size_t b = index_find(t, id);
    if (b == SIZE_MAX)
        return false;
    remove_slot(t, t->index[b] - 1);
    return true;
}

size_t kl_sessions_count(const kl_sessions *t) { return t->count; }

size_t kl_sessions_count_principal(const kl_sessions *t, const char *principal_id)
{
    uint64_t h = fnv1a(principal_id);
    size_t n = 0;
    for (size_t i = 0; i < t->max; i++)
        if (t->slots[i].used && t->slots[i].principal_hash == h &&
            strcmp(t->slots[i].e.s.principal_id, principal_id) == 0)
            n++;
    return n;
}
