/* subject_cache: the decoded principal records and database records a request is judged by,
 * kept per applied catalog version, so that a request does not read and decode them again
 * while the catalog stands still.
 *
 * Rules (why a cached record can never be staler than a fresh read through the same view):
 * - every change of a principal or database record is a catalog change, and every catalog
 *   change writes the meta record "catalog_version" in the same write-set; so while the
 *   applied catalog version is unchanged, the applied records are unchanged;
 * - a catalog change that is proposed but not applied sits in the view's pending overlay
 *   (and a batch's own in its scratch overlay); while either holds "catalog_version", every
 *   lookup bypasses the cache and reads through the view, so a pending grant, revoke or
 *   limits change counts for the very next request exactly as without a cache, and nothing
 *   read then is kept (a proposal that never commits leaves no trace here);
 * - the applied version is read from the store only when the store's applied index moved
 *   since the last check (applied state changes only by applying an entry); a new version
 *   empties the cache.
 * Records handed out are borrowed: valid until the next lookup of the same kind on this
 * cache (or its free). Loop thread only. */
#ifndef KL_SUBJECT_CACHE_H
#define KL_SUBJECT_CACHE_H

#include "daemon/engine/view.h"
#include "keyload/v1/catalog.pb-c.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct kl_subject_cache kl_subject_cache;

typedef struct kl_subject_cache_stats {
    uint64_t hits;       /* answered from the cache */
    uint64_t misses;     /* read through the view and kept */
    uint64_t bypasses;   /* read through the view and not kept: a catalog change was pending */
} kl_subject_cache_stats;

/* NULL when out of memory. */
kl_subject_cache *kl_subject_cache_new(void);
void kl_subject_cache_free(kl_subject_cache *c);

/* The principal's record as view v reads it (kl_catalog_find_principal); *out borrowed,
 * NULL when !*found. The view's scan budget is neither charged nor changed. */
kl_code kl_subject_cache_principal(kl_subject_cache *c, kl_view *v, const char *principal_id,
                                   const Keyload__V1__CatalogPrincipal **out, bool *found,
                                   kl_err *err);

/* Database tenant/db's record as view v reads it (kl_catalog_get_database); as above. */
kl_code kl_subject_cache_database(kl_subject_cache *c, kl_view *v, const char *tenant,
                                  const char *db, const Keyload__V1__CatalogDatabase **out,
                                  bool *found, kl_err *err);

void kl_subject_cache_stats_get(const kl_subject_cache *c, kl_subject_cache_stats *out);

/* Whether view v's overlays (pending or scratch) hold a catalog change: only then can a
 * principal or database record read through v differ from the applied one. */
bool kl_subject_cache_view_changes_catalog(const kl_view *v);

#endif
