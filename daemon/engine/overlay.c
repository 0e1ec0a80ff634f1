#include "daemon/engine/overlay.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

int kl_key_compare(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    size_t n = alen < blen ? alen : blen;
    int c = n ? memcmp(a, b, n) : 0;
    if (c != 0)
        return c;
    return alen < blen ? -1 : alen > blen ? 1 : 0;
}

/* Frees what an entry owns: its key's block, which holds the value too. */
static void entry_release(kl_ov_entry *e)
{
    assert(e->val == NULL || e->val == e->key + e->klen);
    free(e->key);
    e->key = e->val = NULL;
}

void kl_overlay_init(kl_overlay *o) { memset(o, 0, sizeof *o); }

void kl_overlay_clear(kl_overlay *o)
{
    for (size_t i = 0; i < o->n; i++) {
        entry_release(&o->v[i]);
    }
    o->n = 0;
    o->bytes = 0;
}

void kl_overlay_free(kl_overlay *o)
{
    kl_overlay_clear(o);
    free(o->v);
    free(o->spare);
    memset(o, 0, sizeof *o);
}

/* An empty overlay holding arrays past KL_OVERLAY_KEEP_CAP gives them back: after a burst
 * the pending overlay would otherwise keep its peak size for ever. */
static void release_if_large(kl_overlay *o)
{
    if (o->n != 0 || (o->cap <= KL_OVERLAY_KEEP_CAP && o->spare_cap <= KL_OVERLAY_KEEP_CAP))
        return;
    free(o->v);
    free(o->spare);
    o->v = o->spare = NULL;
    o->cap = o->spare_cap = 0;
}

size_t kl_overlay_lower_bound(const kl_overlay *o, const uint8_t *key, size_t klen)
{
    size_t lo = 0, hi = o->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (kl_key_compare(o->v[mid].key, o->v[mid].klen, key, klen) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const kl_ov_entry *kl_overlay_find(const kl_overlay *o, const uint8_t *key, size_t klen)
{
    size_t i = kl_overlay_lower_bound(o, key, klen);
    if (i < o->n && kl_key_compare(o->v[i].key, o->v[i].klen, key, klen) == 0)
        return &o->v[i];
    return NULL;
}

/* Stores an entry whose key/val buffers are already owned (moved in). */
static kl_code place(kl_overlay *o, kl_ov_entry e, kl_err *err)
{
    size_t i = kl_overlay_lower_bound(o, e.key, e.klen);
    if (i < o->n && kl_key_compare(o->v[i].key, o->v[i].klen, e.key, e.klen) == 0) {
        o->bytes -= o->v[i].klen + o->v[i].vlen;
        entry_release(&o->v[i]);
        o->v[i] = e;
        o->bytes += e.klen + e.vlen;
        return KL_OK;
    }
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : KL_OVERLAY_START_CAP;
        kl_ov_entry *nv = realloc(o->v, cap * sizeof *nv);
        if (nv == NULL) {
            entry_release(&e);
            return kl_fail(err, KL_INTERNAL, "memory", "overlay: out of memory");
        }
        o->v = nv;
        o->cap = cap;
    }
    memmove(&o->v[i + 1], &o->v[i], (o->n - i) * sizeof *o->v);
    o->v[i] = e;
    o->n++;
    o->bytes += e.klen + e.vlen;
    return KL_OK;
}

/* One allocation holds an entry's key and value (see kl_ov_entry): every write the leader
 * evaluates lands here, and two mallocs per write were a tenth of its allocations. */
kl_code kl_overlay_set(kl_overlay *o, const uint8_t *key, size_t klen, const uint8_t *val,
                       size_t vlen, bool del, uint64_t owner, kl_err *err)
{
    kl_ov_entry e = {.klen = klen, .vlen = del ? 0 : vlen, .del = del, .owner = owner};
    if (e.vlen > SIZE_MAX - klen - 1)
        return kl_fail(err, KL_INTERNAL, "memory", "overlay: out of memory");
    e.key = malloc(klen + e.vlen + 1);
    if (e.key == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "overlay: out of memory");
    memcpy(e.key, key, klen);
    if (!del) {
        e.val = e.key + klen;
        if (vlen)
            memcpy(e.val, val, vlen);
    }
    return place(o, e, err);
}

/* One merge pass of two sorted arrays, O(dst + src): inserting src's entries one by one
 * would memmove dst once per entry, which dominated the leader's CPU under load. On equal
 * keys src (the newer batch) wins and dst's entry is freed. */
kl_code kl_overlay_absorb(kl_overlay *dst, kl_overlay *src, uint64_t owner, kl_err *err)
{
    if (src->n == 0)
        return KL_OK;
    size_t need = dst->n + src->n;
    if (dst->spare_cap < need) {
        size_t cap = dst->spare_cap > dst->cap ? dst->spare_cap : dst->cap;
        if (cap < KL_OVERLAY_START_CAP)
            cap = KL_OVERLAY_START_CAP;
        while (cap < need)
            cap *= 2;
        /* The spare's contents are meaningless: free and allocate, never copy. */
        free(dst->spare);
        dst->spare = malloc(cap * sizeof *dst->spare);
        dst->spare_cap = dst->spare != NULL ? cap : 0;
        if (dst->spare == NULL) {
            kl_overlay_clear(src);
            return kl_fail(err, KL_INTERNAL, "memory", "overlay: out of memory");
        }
    }
    kl_ov_entry *out = dst->spare;
    size_t i = 0, j = 0, n = 0;
    size_t bytes = 0;
    while (i < dst->n || j < src->n) {
        int c;
        if (i == dst->n)
            c = 1;
        else if (j == src->n)
            c = -1;
        else
            c = kl_key_compare(dst->v[i].key, dst->v[i].klen, src->v[j].key, src->v[j].klen);
        if (c < 0) {
            out[n] = dst->v[i++];
        } else {
            if (c == 0) {
                entry_release(&dst->v[i]);
                i++;
            }
            out[n] = src->v[j++];
            out[n].owner = owner;
        }
        bytes += out[n].klen + out[n].vlen;
        n++;
    }
    assert(n <= dst->spare_cap);
    dst->spare = dst->v;
    size_t old_cap = dst->cap;
    dst->v = out;
    dst->cap = dst->spare_cap;
    dst->spare_cap = old_cap;
    dst->n = n;
    dst->bytes = bytes;
    src->n = 0;
    src->bytes = 0;
    return KL_OK;
}

static void drop_if(kl_overlay *o, uint64_t lo, uint64_t hi)
{
    size_t w = 0;
    for (size_t r = 0; r < o->n; r++) {
        if (o->v[r].owner >= lo && o->v[r].owner <= hi) {
            o->bytes -= o->v[r].klen + o->v[r].vlen;
            entry_release(&o->v[r]);
        } else {
            o->v[w++] = o->v[r];
        }
    }
    o->n = w;
    release_if_large(o);
}

void kl_overlay_drop_upto(kl_overlay *o, uint64_t index) { drop_if(o, 0, index); }

void kl_overlay_drop_owner(kl_overlay *o, uint64_t owner) { drop_if(o, owner, owner); }
