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
    uint64_t tenant_hash;
} slot_meta;

/* One generation of remembered Hellos: an open-addressed set of 16-byte digests, never
 * deleted from, emptied whole when it becomes the older generation's replacement. */
typedef struct hello_gen {
    uint8_t (*keys)[16];       /* buckets; all-zero = empty */
    size_t n;
} hello_gen;

struct kl_sessions {
    size_t max, per_principal, per_tenant;
    size_t tenant_evictions;
    hello_gen hello[2];        /* [0] current, [1] previous */
    int64_t hello_rotated_ms;  /* when [0] became current */
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
    for (int g = 0; t != NULL && g < 2; g++)
        t->hello[g].keys = calloc(2 * KL_HELLO_SEEN_MAX, sizeof *t->hello[g].keys);
    if (t == NULL || t->slots == NULL || t->meta == NULL || t->free_stack == NULL || t->index == NULL ||
        t->hello[0].keys == NULL || t->hello[1].keys == NULL) {
        kl_sessions_free(t);
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "memory",
                       "session table: out of memory for %zu sessions", max);
    }
    t->max = max;
    t->per_principal = per_principal;
    t->per_tenant = max;
    t->hello_rotated_ms = INT64_MIN;
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
    free(t->hello[0].keys);
    free(t->hello[1].keys);
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
    t->meta[n].tenant_hash = 0;
    t->free_stack[t->free_n++] = (uint32_t)n;
    t->count--;
}

/* The slot to evict when the table is full: the oldest session of the tenant holding the
 * most sessions, so that a tenant below the largest never loses one to another's Hellos.
 * Counts tenants by hash in a scratch table (only when full); NULL scratch falls back to
 * the table's oldest. */
static size_t victim_of_largest_tenant(const kl_sessions *t, size_t oldest)
{
    size_t cap = 2 * t->max;
    struct { uint64_t h; size_t n; } *cnt = calloc(cap, sizeof *cnt);
    if (cnt == NULL)
        return oldest;
    size_t best_n = 0, victim = oldest;
    for (size_t i = 0; i < t->max; i++) {
        if (t->meta[i].expires == 0)
            continue;
        uint64_t h = t->meta[i].tenant_hash;
        size_t b = (size_t)(h % cap);
        while (cnt[b].n != 0 && cnt[b].h != h)
            b = (b + 1) % cap;
        cnt[b].h = h;
        cnt[b].n++;
    }
    uint64_t best_h = 0;
    for (size_t b = 0; b < cap; b++)
        if (cnt[b].n > best_n) {
            best_n = cnt[b].n;
            best_h = cnt[b].h;
        }
    free(cnt);
    victim = SIZE_MAX;
    for (size_t i = 0; i < t->max; i++)
        if (t->meta[i].expires != 0 && t->meta[i].tenant_hash == best_h &&
            (victim == SIZE_MAX || t->meta[i].expires < t->meta[victim].expires))
            victim = i;
    return victim != SIZE_MAX ? victim : oldest;
}

/* One pass over the table for a put of a session of (h, th): drops the expired and finds
 * the principal's and the tenant's counts and oldest sessions, and the table's oldest. */
typedef struct put_scan {
    size_t mine, oldest_mine, tenant, oldest_tenant, oldest;
} put_scan;

static void scan_for_put(kl_sessions *t, const kl_session_entry *e, uint64_t h, uint64_t th,
                         int64_t now_ms, put_scan *sc, kl_sessions_evicted *ev)
{
    *sc = (put_scan){0, SIZE_MAX, 0, SIZE_MAX, SIZE_MAX};
    for (size_t i = 0; i < t->max; i++) {
        const slot_meta *m = &t->meta[i];
        if (m->expires == 0)
            continue;
        if (now_ms >= m->expires) { /* kl_session_expired */
            remove_slot(t, i);
            ev->expired++;
            continue;
        }
        if (sc->oldest == SIZE_MAX || m->expires < t->meta[sc->oldest].expires)
            sc->oldest = i;
        if (m->tenant_hash == th && strcmp(t->slots[i].e.tenant, e->tenant) == 0) {
            sc->tenant++;
            if (sc->oldest_tenant == SIZE_MAX || m->expires < t->meta[sc->oldest_tenant].expires)
                sc->oldest_tenant = i;
        }
        if (m->principal_hash == h && strcmp(t->slots[i].e.s.principal_id, e->s.principal_id) == 0) {
            sc->mine++;
            if (sc->oldest_mine == SIZE_MAX || m->expires < t->meta[sc->oldest_mine].expires)
                sc->oldest_mine = i;
        }
    }
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

    uint64_t h = fnv1a(e->s.principal_id), th = fnv1a(e->tenant);
    put_scan sc;
    scan_for_put(t, e, h, th, now_ms, &sc, ev);
    /* Each bound evicts within itself: a principal its own, a tenant its own. */
    if (sc.mine >= t->per_principal) {
        remove_slot(t, sc.oldest_mine);
        ev->principal_evicted = 1;
    } else if (sc.tenant >= t->per_tenant && t->per_tenant < t->max) {
        remove_slot(t, sc.oldest_tenant);
        ev->tenant_evicted = 1;
        t->tenant_evictions++;
    } else if (t->count >= t->max) {
        remove_slot(t, victim_of_largest_tenant(t, sc.oldest));
        ev->table_evicted = 1;
    }

    size_t n = t->free_stack[--t->free_n];
    slot *s = &t->slots[n];
    s->e = *e;
    s->principal_hash = h;
    s->used = true;
    t->meta[n].expires = e->s.expires_unix_ms;
    t->meta[n].principal_hash = h;
    t->meta[n].tenant_hash = th;
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

size_t kl_sessions_count_tenant(const kl_sessions *t, const char *tenant)
{
    uint64_t h = fnv1a(tenant);
    size_t n = 0;
    for (size_t i = 0; i < t->max; i++)
        if (t->slots[i].used && t->meta[i].tenant_hash == h && strcmp(t->slots[i].e.tenant, tenant) == 0)
            n++;
    return n;
}

kl_code kl_sessions_set_per_tenant(kl_sessions *t, size_t per_tenant, kl_err *err)
{
    if (per_tenant < 1 || per_tenant > t->max)
        return kl_fail(err, KL_INVALID_ARGUMENT, "sessions_per_tenant",
                       "session table: sessions_per_tenant must be 1..%zu, got %zu", t->max, per_tenant);
    t->per_tenant = per_tenant;
    return KL_OK;
}

size_t kl_sessions_tenant_evictions(const kl_sessions *t) { return t->tenant_evictions; }

/* ---- Hellos seen ---- */

/* Two generations, each current for KL_HELLO_SEEN_WINDOW_MS: a digest stays remembered for
 * at least one whole window after it was added, which covers every time its Hello is still
 * fresh (at most twice the accepted skew after the first acceptance). */
static void hello_rotate(kl_sessions *t, int64_t now_ms)
{
    if (t->hello_rotated_ms != INT64_MIN && now_ms - t->hello_rotated_ms < KL_HELLO_SEEN_WINDOW_MS)
        return;
    bool long_idle = t->hello_rotated_ms == INT64_MIN ||
                     now_ms - t->hello_rotated_ms >= 2 * (int64_t)KL_HELLO_SEEN_WINDOW_MS;
    hello_gen old = t->hello[1];
    memset(old.keys, 0, 2 * KL_HELLO_SEEN_MAX * sizeof *old.keys);
    old.n = 0;
    t->hello[1] = t->hello[0];
    t->hello[0] = old;
    if (long_idle) { /* both generations are older than a window: forget both */
        memset(t->hello[1].keys, 0, 2 * KL_HELLO_SEEN_MAX * sizeof *t->hello[1].keys);
        t->hello[1].n = 0;
    }
    t->hello_rotated_ms = now_ms;
}

/* The bucket of key in g: where it is, or the empty one where it would go. */
static size_t hello_bucket(const hello_gen *g, const uint8_t key[16], bool *found)
{
    static const uint8_t zero[16];
    uint64_t h;
    memcpy(&h, key, sizeof h);
    size_t cap = 2 * KL_HELLO_SEEN_MAX;
    for (size_t b = (size_t)(h % cap);; b = (b + 1) % cap) {
        if (memcmp(g->keys[b], key, 16) == 0) {
            *found = true;
            return b;
        }
        if (memcmp(g->keys[b], zero, 16) == 0) {
            *found = false;
            return b;
        }
    }
}

kl_code kl_sessions_hello_seen(kl_sessions *t, const uint8_t *signature, size_t len, int64_t now_ms,
                               kl_err *err)
{
    uint8_t key[16];
    crypto_generichash(key, sizeof key, signature, len, NULL, 0);
    key[0] |= 1; /* never the all-zero empty bucket */
    hello_rotate(t, now_ms);
    bool found;
    for (int g = 0; g < 2; g++) {
        hello_bucket(&t->hello[g], key, &found);
        if (found)
            return kl_fail(err, KL_UNAUTHENTICATED, "hello_replayed",
                           "this Hello was already answered (a Hello is good for one session); "
                           "make a new one");
    }
    if (t->hello[0].n >= KL_HELLO_SEEN_MAX)
        return kl_fail(err, KL_UNAVAILABLE, "hello_rate",
                       "more than %d Hellos within %d ms; retry shortly", KL_HELLO_SEEN_MAX,
                       KL_HELLO_SEEN_WINDOW_MS);
    size_t b = hello_bucket(&t->hello[0], key, &found);
    memcpy(t->hello[0].keys[b], key, 16);
    t->hello[0].n++;
    return KL_OK;
}
