/* catalog_read: lookups of the catalog records in a partition's state (partition 0's
 * catalog or a data partition's copy), below every module that evaluates mutations. Reads
 * go through a kl_view; nothing here writes. */
#ifndef KL_CATALOG_READ_H
#define KL_CATALOG_READ_H

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
/* A principal by id alone, through the 'C' 'I' index (principal ids are unique across the
 * cluster; Bootstrap refuses a taken id with CONFLICT "principal_exists"). *found false
 * when absent; on found *out is unpacked (caller frees). INTERNAL when the index and the
 * record disagree (they are written together). */
kl_code kl_catalog_find_principal(kl_view *v, const char *principal_id,
                                  Keyload__V1__CatalogPrincipal **out, bool *found, kl_err *err);

#endif
