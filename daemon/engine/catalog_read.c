/* catalog_read: lookups of this partition's copy of the catalog (catalog_read.h). */
#include "daemon/engine/catalog_read.h"
#include "daemon/engine/record.h"

#include "daemon/store/keys.h"

#include <stdlib.h>
#include <string.h>

/* Reads the record under k and unpacks it as `desc`; *found false when absent. */
static kl_code get_record(kl_view *v, const kl_key *k, const ProtobufCMessageDescriptor *desc,
                          const char *what, ProtobufCMessage **out, bool *found, kl_err *err)
{
    uint8_t *val;
    size_t n;
    *out = NULL;
    kl_code rc = kl_view_get(v, k->b, k->len, &val, &n, found, err);
    if (rc != KL_OK || !*found)
        return rc;
    *out = protobuf_c_message_unpack(desc, NULL, n, val);
    free(val);
    return *out ? KL_OK : kl_record_corrupt(err, what);
}

kl_code kl_catalog_get_database(kl_view *v, const char *tenant, const char *database,
                                Keyload__V1__CatalogDatabase **out, bool *found, kl_err *err)
{
    kl_key k;
    kl_key_catalog_database(&k, tenant, database);
    return get_record(v, &k, &keyload__v1__catalog_database__descriptor, "catalog database", (ProtobufCMessage **)out, found, err);
}

kl_code kl_catalog_get_queue(kl_view *v, const char *tenant, const char *database, const char *queue,
                             Keyload__V1__CatalogQueue **out, bool *found, kl_err *err)
{
    kl_key k;
    kl_key_catalog_queue(&k, tenant, database, queue);
    return get_record(v, &k, &keyload__v1__catalog_queue__descriptor, "catalog queue", (ProtobufCMessage **)out, found, err);
}

kl_code kl_catalog_get_principal(kl_view *v, const char *tenant, const char *principal_id,
                                 Keyload__V1__CatalogPrincipal **out, bool *found, kl_err *err)
{
    kl_key k;
    kl_key_catalog_principal(&k, tenant, principal_id);
    return get_record(v, &k, &keyload__v1__catalog_principal__descriptor, "catalog principal", (ProtobufCMessage **)out, found, err);
}

kl_code kl_catalog_find_principal(kl_view *v, const char *principal_id,
                                  Keyload__V1__CatalogPrincipal **out, bool *found, kl_err *err)
{
    *out = NULL;
    kl_key k;
    kl_key_catalog_principal_index(&k, principal_id);
    uint8_t *val;
    size_t n;
    kl_code rc = kl_view_get(v, k.b, k.len, &val, &n, found, err);
    if (rc != KL_OK || !*found)
        return rc;
    char tenant[KL_KEY_MAX];
    if (n == 0 || n >= sizeof tenant || memchr(val, 0, n) != NULL) {
        free(val);
        return kl_record_corrupt(err, "catalog principal index");
    }
    memcpy(tenant, val, n);
    tenant[n] = '\0';
    free(val);
    if ((rc = kl_catalog_get_principal(v, tenant, principal_id, out, found, err)) != KL_OK)
        return rc;
    if (!*found) /* the two records are written together */
        return kl_record_corrupt(err, "catalog principal index");
    return KL_OK;
}
