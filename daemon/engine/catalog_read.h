/* catalog_read: lookups of the catalog records in a partition's state (partition 0's
 * catalog or a data partition's copy), below every module that evaluates mutations. Reads
 * go through a kl_view; nothing here writes. */
#ifndef KL_CATALOG_READ_H
#define KL_CATALOG_READ_H

#include "common/limits.h"
#include "daemon/engine/view.h"
#include "keyload/v1/catalog.pb-c.h"

#include <stdbool.h>

/* Definition lookups; *found false when absent. On found, *out is unpacked (caller frees
 * with the protobuf-c free function). */
kl_code kl_catalog_get_database(kl_view *v, const char *tenant, const char *database,
                                Keyload__V1__CatalogDatabase **out, bool *found, kl_err *err);
kl_code kl_catalog_get_queue(kl_view *v, const char *tenant, const char *database, const char *queue,
                             Keyload__V1__CatalogQueue **out, bool *found, kl_err *err);
kl_code kl_catalog_get_principal(kl_view *v, const char *tenant, const char *principal_id,
                                 Keyload__V1__CatalogPrincipal **out, bool *found, kl_err *err);
/* The member-key record of (partition, member) (catalog.proto CatalogMemberKey). */
kl_code kl_catalog_get_member_key(kl_view *v, int partition, uint64_t member,
                                  Keyload__V1__CatalogMemberKey **out, bool *found, kl_err *err);
/* A principal by id alone, through the 'C' 'I' index (principal ids are unique across the
 * cluster; Bootstrap refuses a taken id with CONFLICT "principal_exists"). *found false
 * when absent; on found *out is unpacked (caller frees). INTERNAL when the index and the
 * record disagree (they are written together). */
kl_code kl_catalog_find_principal(kl_view *v, const char *principal_id,
                                  Keyload__V1__CatalogPrincipal **out, bool *found, kl_err *err);

/* ---- ListCatalog pages (catalog.proto ListCatalogRequest) ----
 * A cursor names the last record of the page before: version byte 1, the list kind, then
 * that record's name (database, queue or principal id). The next page starts at the first
 * key after it, so every record present throughout is listed exactly once across pages,
 * whatever is added or removed in between. The client never looks inside. */
/* Writes the cursor after `last` into out (KL_CATALOG_CURSOR_MAX bytes, common/limits.h);
 * its length. */
size_t kl_catalog_cursor_encode(int kind, const char *last, uint8_t *out);
/* The name a cursor resumes after, into name (KL_NAME_LEN_MAX + 1 bytes). INVALID_ARGUMENT
 * "cursor" when it is not one kl_catalog_cursor_encode wrote for this kind. */
kl_code kl_catalog_cursor_decode(int kind, const uint8_t *cur, size_t len, char *name, kl_err *err);
/* One page of `kind` (CATALOG_LIST_DATABASES: tenant's databases; QUEUES: tenant/database's
 * queues; PRINCIPALS: tenant's principals) in key order, after `after` (NULL: from the
 * first), at most max records and, past the first, bytes_max bytes of records. Fills the
 * answer's repeated field and next_cursor (empty when nothing follows); the caller frees
 * them with kl_catalog_page_free. Only the tenant's own keys are scanned. */
kl_code kl_catalog_list(kl_view *v, int kind, const char *tenant, const char *database, const char *after,
                        size_t max, size_t bytes_max, Keyload__V1__ListCatalogAnswer *out, kl_err *err);
void kl_catalog_page_free(Keyload__V1__ListCatalogAnswer *a);

#endif
