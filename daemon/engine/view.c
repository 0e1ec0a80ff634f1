#include "daemon/engine/view.h"

#include "daemon/store/keys.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static kl_code charge(kl_view *v, kl_err *err)
{
    if (++v->scanned > v->scan_limit)
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "limit:MaxScanRecords",
                       "the request examines more than MaxScanRecords (%llu) records",
                       (unsigned long long)v->scan_limit);
    return KL_OK;
}

static kl_code copy_out(const kl_ov_entry *e, uint8_t **val, size_t *vlen, bool *found, kl_err *err)
{
    if (e->del) {
        *found = false;
        *val = NULL;
        *vlen = 0;
        return KL_OK;
    }
    *val = malloc(e->vlen ? e->vlen : 1);
    if (*val == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "view: out of memory");
    memcpy(*val, e->val, e->vlen);
    *vlen = e->vlen;
    *found = true;
    return KL_OK;
}

static bool read_cacheable(const uint8_t *key, size_t klen)
{
    if (klen <= 1 || klen > KL_KEY_MAX)
        return false;
    if (key[0] == 'C') /* not the catalog's change records: each is read once per tail */
        return key[1] != 'V';
    return key[0] == 'N' || key[0] == 'Q' || (key[0] == 'M' && !kl_store_key_is_local(key, klen));
}

/* The table was not told of every change since it last held: another applied index, or a
 * state change that was not an apply. */
static bool read_cache_stale(const kl_read_cache *c, const kl_store *st)
{
    return c->applied != kl_store_applied_index(st) || c->gen != kl_store_state_gen(st);
}

static void read_cache_empty(kl_read_cache *c, const kl_store *st)
{
    for (size_t i = 0; i < KL_READ_CACHE_SLOTS; i++)
        c->s[i].klen = 0;
    c->applied = kl_store_applied_index(st);
    c->gen = kl_store_state_gen(st);
}

/* FNV-1a of the key, to a slot. */
static size_t read_cache_slot(const uint8_t *key, size_t klen)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < klen; i++)
        h = (h ^ key[i]) * 16777619u;
    return h % KL_READ_CACHE_SLOTS;
}

/* kl_store_get through the read cache (view.h). */
static kl_code cached_get(kl_read_cache *c, kl_store *st, const uint8_t *key, size_t klen, uint8_t **val,
                          size_t *vlen, bool *found, kl_err *err)
{
    if (read_cache_stale(c, st))
        read_cache_empty(c, st);
    uint64_t applied = c->applied;
    kl_read_cache_slot *s = &c->s[read_cache_slot(key, klen)];
    if (s->klen == klen && memcmp(s->key, key, klen) == 0) {
        c->hits++;
        *found = s->found;
        *vlen = s->found ? s->vlen : 0;
        *val = NULL;
        if (!s->found)
            return KL_OK;
        if ((*val = malloc(s->vlen ? s->vlen : 1)) == NULL)
            return kl_fail(err, KL_INTERNAL, "memory", "view: out of memory");
        memcpy(*val, s->val, s->vlen);
        return KL_OK;
    }
    c->misses++;
    kl_code rc = kl_store_get(st, key, klen, val, vlen, found, err);
    if (rc != KL_OK || (*found && *vlen > KL_READ_CACHE_VALUE_MAX))
        return rc;
    assert(kl_store_applied_index(st) == applied); /* a read never applies */
    memcpy(s->key, key, klen);
    s->klen = klen;
    s->found = *found;
    s->vlen = *found ? *vlen : 0;
    if (*found)
        memcpy(s->val, *val, *vlen);
    return KL_OK;
}

void kl_read_cache_begin_apply(kl_read_cache *c, const kl_store *st, uint64_t index)
{
    if (read_cache_stale(c, st)) {
        read_cache_empty(c, st);
    } else {
        for (size_t i = 0; i < KL_READ_CACHE_SLOTS; i++)
            if (c->s[i].klen > 0 && c->s[i].key[0] == 'M')
                c->s[i].klen = 0;
    }
    c->applied = index;
}

void kl_read_cache_reset(kl_read_cache *c)
{
    for (size_t i = 0; i < KL_READ_CACHE_SLOTS; i++)
        c->s[i].klen = 0;
    c->applied = UINT64_MAX; /* no store's applied index */
}

void kl_read_cache_note_write(kl_read_cache *c, const uint8_t *key, size_t klen)
{
    if (!read_cacheable(key, klen))
        return;
    kl_read_cache_slot *s = &c->s[read_cache_slot(key, klen)];
    if (s->klen == klen && memcmp(s->key, key, klen) == 0)
        s->klen = 0;
}

kl_code kl_view_get(kl_view *v, const uint8_t *key, size_t klen, uint8_t **val, size_t *vlen,
                    bool *found, kl_err *err)
{
    kl_code rc = charge(v, err);
    if (rc != KL_OK)
        return rc;
    const kl_ov_entry *e = NULL;
    if (v->scratch && (e = kl_overlay_find(v->scratch, key, klen)) != NULL)
        return copy_out(e, val, vlen, found, err);
    if (v->pending && (e = kl_overlay_find(v->pending, key, klen)) != NULL)
        return copy_out(e, val, vlen, found, err);
    if (v->reads != NULL && read_cacheable(key, klen))
        return cached_get(v->reads, v->store, key, klen, val, vlen, found, err);
    return kl_store_get(v->store, key, klen, val, vlen, found, err);
}

kl_code kl_view_put(kl_view *v, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen,
                    kl_err *err)
{
    return kl_overlay_set(v->scratch, key, klen, val, vlen, false, 0, err);
}

kl_code kl_view_put_msg(kl_view *v, const uint8_t *key, size_t klen, const ProtobufCMessage *m,
                        kl_err *err)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);
    if (buf == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "view: out of memory");
    protobuf_c_message_pack(m, buf);
    kl_code rc = kl_view_put(v, key, klen, buf, n, err);
    free(buf);
    return rc;
}

kl_code kl_view_del(kl_view *v, const uint8_t *key, size_t klen, kl_err *err)
{
    return kl_overlay_set(v->scratch, key, klen, NULL, 0, true, 0, err);
}

static bool has_prefix(const uint8_t *k, size_t klen, const uint8_t *p, size_t plen)
{
    return klen >= plen && memcmp(k, p, plen) == 0;
}

/* A cursor over one overlay restricted to the prefix. */
typedef struct {
    const kl_overlay *o;
    size_t i;
} ov_cursor;

static const kl_ov_entry *ov_cur(ov_cursor *c, const uint8_t *p, size_t plen)
{
    if (c->o == NULL || c->i >= c->o->n)
        return NULL;
    const kl_ov_entry *e = &c->o->v[c->i];
    return has_prefix(e->key, e->klen, p, plen) ? e : NULL;
}

static void hints_reset(kl_scan_hints *h, uint64_t applied)
{
    for (size_t i = 0; i < KL_SCAN_HINTS_MAX; i++)
        h->h[i].state = 0;
    memset(h->tags, 0, sizeof h->tags);
    h->next = 0;
    h->applied = applied;
}

void kl_scan_hints_begin_apply(kl_scan_hints *h, uint64_t applied, uint64_t index)
{
    if (h->applied != applied)
        hints_reset(h, applied);
    h->applied = index;
}

void kl_scan_hints_note_put(kl_scan_hints *h, const uint8_t *key, size_t klen)
{
    if (klen == 0 || !(h->tags[key[0] >> 3] & (1u << (key[0] & 7))))
        return;
    for (size_t i = 0; i < KL_SCAN_HINTS_MAX; i++) {
        kl_scan_hint *e = &h->h[i];
        if (e->state < 2 || !has_prefix(key, klen, e->prefix, e->plen) ||
            (e->state == 2 && kl_key_compare(key, klen, e->key, e->klen) >= 0))
            continue;
        if (klen > KL_KEY_MAX) { /* not a key of ours: learn the prefix again */
            e->state = 1;
            continue;
        }
        memcpy(e->key, key, klen);
        e->klen = klen;
        e->state = 2;
    }
}

/* The prefix's hint for the store as it is now (a new, learning one if none). */
static kl_scan_hint *hint_for(kl_scan_hints *h, const kl_store *st, const uint8_t *prefix, size_t plen)
{
    if (plen == 0 || plen > KL_KEY_MAX)
        return NULL;
    if (h->applied != kl_store_applied_index(st))
        hints_reset(h, kl_store_applied_index(st));
    for (size_t i = 0; i < KL_SCAN_HINTS_MAX; i++)
        if (h->h[i].state != 0 && h->h[i].plen == plen && memcmp(h->h[i].prefix, prefix, plen) == 0)
            return &h->h[i];
    kl_scan_hint *e = &h->h[h->next];
    h->next = (h->next + 1) % KL_SCAN_HINTS_MAX;
    memcpy(e->prefix, prefix, plen);
    e->plen = plen;
    e->state = 1;
    h->tags[prefix[0] >> 3] |= (uint8_t)(1u << (prefix[0] & 7));
    return e;
}

/* Seeks the store iterator for a scan of prefix from start: at the prefix's hint when that
 * lies past start, and learns the hint when the seek began at the prefix or the hint. *none:
 * the store holds no live key of the prefix at or after where the scan starts. */
static void scan_seek(kl_view *v, rocksdb_iterator_t *it, const uint8_t *prefix, size_t plen,
                      const uint8_t *start, size_t slen, bool *none)
{
    kl_scan_hint *e = v->hints ? hint_for(v->hints, v->store, prefix, plen) : NULL;
    bool from_known = slen == plen; /* start is the prefix itself */
    if (e != NULL && e->state == 3) {
        *none = true;
        return;
    }
    if (e != NULL && e->state == 2 && kl_key_compare(e->key, e->klen, start, slen) > 0) {
        start = e->key;
        slen = e->klen;
        from_known = true;
    }
    rocksdb_iter_seek(it, (const char *)start, slen);
    if (e == NULL || !from_known)
        return;
    size_t rklen = 0;
    const uint8_t *rk = rocksdb_iter_valid(it) ? (const uint8_t *)rocksdb_iter_key(it, &rklen) : NULL;
    if (rk != NULL && has_prefix(rk, rklen, prefix, plen) && rklen <= KL_KEY_MAX) {
        memcpy(e->key, rk, rklen);
        e->klen = rklen;
        e->state = 2;
    } else {
        e->state = 3;
    }
}

kl_code kl_view_scan(kl_view *v, const uint8_t *prefix, size_t plen, kl_view_scan_fn fn,
                     void *arg, kl_err *err)
{
    return kl_view_scan_from(v, prefix, plen, NULL, 0, fn, arg, err);
}

kl_code kl_view_scan_from(kl_view *v, const uint8_t *prefix, size_t plen, const uint8_t *start,
                          size_t slen, kl_view_scan_fn fn, void *arg, kl_err *err)
{
    if (start == NULL || !has_prefix(start, slen, prefix, plen)) {
        start = prefix;
        slen = plen;
    }
    ov_cursor sc = {v->scratch, v->scratch ? kl_overlay_lower_bound(v->scratch, start, slen) : 0};
    ov_cursor pc = {v->pending, v->pending ? kl_overlay_lower_bound(v->pending, start, slen) : 0};
    rocksdb_iterator_t *it = kl_store_iterator(v->store);
    bool store_none = false;
    scan_seek(v, it, prefix, plen, start, slen, &store_none);
    kl_code rc = KL_OK;
    for (;;) {
        const uint8_t *rk = NULL;
        size_t rklen = 0;
        if (!store_none && rocksdb_iter_valid(it)) {
            rk = (const uint8_t *)rocksdb_iter_key(it, &rklen);
            if (!has_prefix(rk, rklen, prefix, plen))
                rk = NULL;
        }
        const kl_ov_entry *se = ov_cur(&sc, prefix, plen);
        const kl_ov_entry *pe = ov_cur(&pc, prefix, plen);
        /* The smallest key among the three sources; ties go to the highest layer. */
        const uint8_t *mk = NULL;
        size_t mklen = 0;
        if (rk) { mk = rk; mklen = rklen; }
        if (pe && (!mk || kl_key_compare(pe->key, pe->klen, mk, mklen) < 0)) { mk = pe->key; mklen = pe->klen; }
        if (se && (!mk || kl_key_compare(se->key, se->klen, mk, mklen) < 0)) { mk = se->key; mklen = se->klen; }
        if (mk == NULL)
            break;
        const uint8_t *val = NULL;
        size_t vlen = 0;
        bool live;
        bool s_eq = se && kl_key_compare(se->key, se->klen, mk, mklen) == 0;
        bool p_eq = pe && kl_key_compare(pe->key, pe->klen, mk, mklen) == 0;
        bool r_eq = rk && kl_key_compare(rk, rklen, mk, mklen) == 0;
        if (s_eq) {
            live = !se->del;
            val = se->val;
            vlen = se->vlen;
        } else if (p_eq) {
            live = !pe->del;
            val = pe->val;
            vlen = pe->vlen;
        } else {
            live = true;
            val = (const uint8_t *)rocksdb_iter_value(it, &vlen);
        }
        /* Copy the key: advancing the RocksDB iterator invalidates rk. */
        uint8_t kbuf[600];
        size_t kcopy = mklen < sizeof kbuf ? mklen : sizeof kbuf;
        memcpy(kbuf, mk, kcopy);
        int stop = 0;
        if (live) {
            if ((rc = charge(v, err)) != KL_OK)
                break;
            stop = fn(arg, kbuf, kcopy, val, vlen);
        }
        /* Stopping first: advancing the store iterator past the last key wanted would walk
         * whatever tombstones follow it up to the next live key. */
        if (stop)
            break;
        if (s_eq) sc.i++;
        if (p_eq) pc.i++;
        if (r_eq) rocksdb_iter_next(it);
    }
    rocksdb_iter_destroy(it);
    return rc;
}

kl_code kl_view_get_meta_u64(kl_view *v, const char *name, uint64_t *out, kl_err *err)
{
    kl_key k;
    kl_key_meta(&k, name);
    uint8_t *val;
    size_t n;
    bool found;
    kl_code rc = kl_view_get(v, k.b, k.len, &val, &n, &found, err);
    if (rc != KL_OK)
        return rc;
    *out = (found && n == 8) ? kl_be64_get(val) : 0;
    free(val);
    return KL_OK;
}

kl_code kl_view_put_meta_u64(kl_view *v, const char *name, uint64_t value, kl_err *err)
{
    kl_key k;
    kl_key_meta(&k, name);
    uint8_t b[8];
    kl_be64_put(b, value);
    return kl_view_put(v, k.b, k.len, b, 8, err);
}
