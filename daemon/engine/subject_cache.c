#include "daemon/engine/subject_cache.h"

#include "daemon/engine/catalog.h"
#include "daemon/store/keys.h"

#include <stdlib.h>
#include <string.h>

/* Direct-mapped: a colliding name replaces the older entry, so a lookup costs one hash and
 * one compare, and the memory held is bounded by the slot counts. */
#define PRINCIPAL_SLOTS 256
#define DATABASE_SLOTS 64

typedef struct slot {
    char *name;        /* principal id, or "tenant\n database"; NULL = empty */
    bool found;
    ProtobufCMessage *record; /* NULL when !found */
} slot;

struct kl_subject_cache {
    uint64_t checked_applied;  /* store applied index at the last version check */
    bool checked;
    uint64_t version;          /* applied catalog version the slots hold */
    slot principals[PRINCIPAL_SLOTS];
    slot databases[DATABASE_SLOTS];
    /* What a bypassing lookup read, owned until the next lookup of its kind. */
    ProtobufCMessage *loose_principal, *loose_database;
    kl_subject_cache_stats stats;
};

kl_subject_cache *kl_subject_cache_new(void) { return calloc(1, sizeof(kl_subject_cache)); }

static void slot_clear(slot *s)
{
    free(s->name);
    if (s->record != NULL)
        protobuf_c_message_free_unpacked(s->record, NULL);
    memset(s, 0, sizeof *s);
}

static void loose_clear(ProtobufCMessage **m)
{
    if (*m != NULL)
        protobuf_c_message_free_unpacked(*m, NULL);
    *m = NULL;
}

static void flush(kl_subject_cache *c)
{
    for (size_t i = 0; i < PRINCIPAL_SLOTS; i++)
        slot_clear(&c->principals[i]);
    for (size_t i = 0; i < DATABASE_SLOTS; i++)
        slot_clear(&c->databases[i]);
}

void kl_subject_cache_free(kl_subject_cache *c)
{
    if (c == NULL)
        return;
    flush(c);
    loose_clear(&c->loose_principal);
    loose_clear(&c->loose_database);
    free(c);
}

void kl_subject_cache_stats_get(const kl_subject_cache *c, kl_subject_cache_stats *out)
{
    *out = c->stats;
}

static bool overlay_holds(const kl_overlay *o, const kl_key *k)
{
    return o != NULL && kl_overlay_find(o, k->b, k->len) != NULL;
}

bool kl_subject_cache_view_changes_catalog(const kl_view *v)
{
    kl_key k;
    kl_key_meta(&k, "catalog_version");
    return overlay_holds(v->pending, &k) || overlay_holds(v->scratch, &k);
}

/* Whether the slots may answer for view v; empties them when the applied catalog version
 * moved since they were filled. */
static kl_code usable(kl_subject_cache *c, kl_view *v, bool *ok, kl_err *err)
{
    *ok = false;
    if (kl_subject_cache_view_changes_catalog(v))
        return KL_OK;
    uint64_t applied = kl_store_applied_index(v->store);
    if (!c->checked || applied != c->checked_applied) {
        uint64_t version;
        kl_code rc = kl_store_meta_u64(v->store, "catalog_version", &version, err);
        if (rc != KL_OK)
            return rc;
        if (!c->checked || version != c->version)
            flush(c);
        c->version = version;
        c->checked_applied = applied;
        c->checked = true;
    }
    *ok = true;
    return KL_OK;
}

static uint32_t hash(const char *a, const char *b)
{
    uint32_t h = 2166136261u;
    for (const char *p = a; *p; p++)
        h = (h ^ (uint8_t)*p) * 16777619u;
    if (b != NULL) {
        h = (h ^ '\n') * 16777619u;
        for (const char *p = b; *p; p++)
            h = (h ^ (uint8_t)*p) * 16777619u;
    }
    return h;
}

/* "a" or "a\nb" (names never hold a newline), malloc'd; NULL when out of memory. */
static char *slot_name(const char *a, const char *b)
{
    size_t la = strlen(a), lb = b ? strlen(b) + 1 : 0;
    char *s = malloc(la + lb + 1);
    if (s == NULL)
        return NULL;
    memcpy(s, a, la);
    if (b != NULL) {
        s[la] = '\n';
        memcpy(s + la + 1, b, lb - 1);
    }
    s[la + lb] = '\0';
    return s;
}

static bool slot_is(const slot *s, const char *a, const char *b)
{
    if (s->name == NULL)
        return false;
    size_t la = strlen(a);
    if (strncmp(s->name, a, la) != 0)
        return false;
    if (b == NULL)
        return s->name[la] == '\0';
    return s->name[la] == '\n' && strcmp(s->name + la + 1, b) == 0;
}

typedef kl_code (*read_fn)(kl_view *v, const char *a, const char *b, ProtobufCMessage **out,
                           bool *found, kl_err *err);

/* The record named (a, b) from table[slots] or, when absent or unusable, read by fn through
 * v (catalog reads charge no scan budget, as the callers' own reads never did). */
static kl_code lookup(kl_subject_cache *c, slot *table, size_t slots, ProtobufCMessage **loose,
                      read_fn fn, kl_view *v, const char *a, const char *b,
                      const ProtobufCMessage **out, bool *found, kl_err *err)
{
    *out = NULL;
    *found = false;
    loose_clear(loose);
    bool ok;
    kl_code rc = usable(c, v, &ok, err);
    if (rc != KL_OK)
        return rc;
    slot *s = &table[hash(a, b) % slots];
    if (ok && slot_is(s, a, b)) {
        c->stats.hits++;
        *found = s->found;
        *out = s->record;
        return KL_OK;
    }
    uint64_t limit = v->scan_limit, scanned = v->scanned;
    v->scan_limit = UINT64_MAX;
    ProtobufCMessage *rec = NULL;
    rc = fn(v, a, b, &rec, found, err);
    v->scan_limit = limit;
    v->scanned = scanned;
    if (rc != KL_OK)
        return rc;
    char *name = ok ? slot_name(a, b) : NULL;
    if (name == NULL) { /* bypass (or no memory to keep it): owned until the next lookup */
        c->stats.bypasses++;
        *loose = rec;
        *out = rec;
        return KL_OK;
    }
    c->stats.misses++;
    slot_clear(s);
    s->name = name;
    s->found = *found;
    s->record = rec;
    *out = rec;
    return KL_OK;
}

static kl_code read_principal(kl_view *v, const char *id, const char *unused, ProtobufCMessage **out,
                              bool *found, kl_err *err)
{
    (void)unused;
    return kl_catalog_find_principal(v, id, (Keyload__V1__CatalogPrincipal **)out, found, err);
}

static kl_code read_database(kl_view *v, const char *tenant, const char *db, ProtobufCMessage **out,
                             bool *found, kl_err *err)
{
    return kl_catalog_get_database(v, tenant, db, (Keyload__V1__CatalogDatabase **)out, found, err);
}

kl_code kl_subject_cache_principal(kl_subject_cache *c, kl_view *v, const char *principal_id,
                                   const Keyload__V1__CatalogPrincipal **out, bool *found,
                                   kl_err *err)
{
    return lookup(c, c->principals, PRINCIPAL_SLOTS, &c->loose_principal, read_principal, v,
                  principal_id, NULL, (const ProtobufCMessage **)out, found, err);
}

kl_code kl_subject_cache_database(kl_subject_cache *c, kl_view *v, const char *tenant,
                                  const char *db, const Keyload__V1__CatalogDatabase **out,
                                  bool *found, kl_err *err)
{
    return lookup(c, c->databases, DATABASE_SLOTS, &c->loose_database, read_database, v, tenant,
                  db, (const ProtobufCMessage **)out, found, err);
}
