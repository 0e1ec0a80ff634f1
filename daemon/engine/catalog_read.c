/* catalog_read: lookups of this partition's copy of the catalog (catalog_read.h). */
#include "daemon/engine/catalog_read.h"
#include "daemon/engine/record.h"
#include "common/names.h"

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

kl_code kl_catalog_get_member_key(kl_view *v, int partition, uint64_t member,
                                  Keyload__V1__CatalogMemberKey **out, bool *found, kl_err *err)
{
    kl_key k;
    kl_key_catalog_member_key(&k, partition, member);
    return get_record(v, &k, &keyload__v1__catalog_member_key__descriptor, "catalog member key",
                      (ProtobufCMessage **)out, found, err);
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

/* ---- ListCatalog pages ---- */

#define CURSOR_VERSION 1

size_t kl_catalog_cursor_encode(int kind, const char *last, uint8_t *out)
{
    size_t n = strlen(last);
    out[0] = CURSOR_VERSION;
    out[1] = (uint8_t)kind;
    memcpy(out + 2, last, n); /* names are at most KL_NAME_LEN_MAX bytes (checked at creation) */
    return 2 + n;
}

kl_code kl_catalog_cursor_decode(int kind, const uint8_t *cur, size_t len, char *name, kl_err *err)
{
    kl_err ignored;
    if (len < 3 || len > KL_CATALOG_CURSOR_MAX || cur[0] != CURSOR_VERSION || cur[1] != (uint8_t)kind ||
        memchr(cur + 2, 0, len - 2) != NULL)
        goto bad;
    memcpy(name, cur + 2, len - 2);
    name[len - 2] = '\0';
    if (kl_name_check("cursor", name, &ignored) == KL_OK)
        return KL_OK;
bad:
    return kl_fail(err, KL_INVALID_ARGUMENT, "cursor",
                   "cursor is not one a ListCatalog answer gave for this kind of list");
}

/* What a page scan gathers. */
typedef struct page_scan {
    int kind;
    size_t max, bytes_max, bytes;
    ProtobufCMessage **items;
    size_t n;
    bool more;
    kl_code rc;
    kl_err *err;
} page_scan;

static const ProtobufCMessageDescriptor *page_desc(int kind)
{
    switch (kind) {
    case KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_DATABASES:
        return &keyload__v1__catalog_database__descriptor;
    case KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_QUEUES:
        return &keyload__v1__catalog_queue__descriptor;
    default:
        return &keyload__v1__catalog_principal__descriptor;
    }
}

static const char *item_name(int kind, const ProtobufCMessage *m)
{
    switch (kind) {
    case KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_DATABASES:
        return ((const Keyload__V1__CatalogDatabase *)m)->database;
    case KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_QUEUES:
        return ((const Keyload__V1__CatalogQueue *)m)->queue;
    default:
        return ((const Keyload__V1__CatalogPrincipal *)m)->principal_id;
    }
}

static int page_visit(void *arg, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    (void)key;
    (void)klen;
    page_scan *p = arg;
    /* The record after a full page only says that another page follows. */
    if (p->n == p->max || (p->n > 0 && p->bytes + vlen > p->bytes_max)) {
        p->more = true;
        return 1;
    }
    ProtobufCMessage *m = protobuf_c_message_unpack(page_desc(p->kind), NULL, vlen, val);
    if (m == NULL) {
        p->rc = kl_record_corrupt(p->err, "catalog record");
        return 1;
    }
    p->items[p->n++] = m;
    p->bytes += vlen;
    return 0;
}

/* The key prefix of kind's records in tenant (and database), and the key to start after. */
static void page_keys(int kind, const char *tenant, const char *database, const char *after, kl_key *prefix,
                      kl_key *start)
{
    switch (kind) {
    case KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_DATABASES:
        kl_key_catalog_database(prefix, tenant, "");
        kl_key_catalog_database(start, tenant, after ? after : "");
        break;
    case KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_QUEUES:
        kl_key_catalog_queue(prefix, tenant, database, "");
        kl_key_catalog_queue(start, tenant, database, after ? after : "");
        break;
    default:
        kl_key_catalog_principal(prefix, tenant, "");
        kl_key_catalog_principal(start, tenant, after ? after : "");
        break;
    }
    if (after != NULL)
        start->b[start->len++] = 0; /* the first key after `after` (names hold no NUL) */
}

kl_code kl_catalog_list(kl_view *v, int kind, const char *tenant, const char *database, const char *after,
                        size_t max, size_t bytes_max, Keyload__V1__ListCatalogAnswer *out, kl_err *err)
{
    kl_key prefix, start;
    page_keys(kind, tenant, database, after, &prefix, &start);
    page_scan p = {.kind = kind, .max = max, .bytes_max = bytes_max, .rc = KL_OK, .err = err};
    if ((p.items = calloc(max ? max : 1, sizeof *p.items)) == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    kl_code rc = kl_view_scan_from(v, prefix.b, prefix.len, start.b, start.len, page_visit, &p, err);
    if (rc == KL_OK)
        rc = p.rc;
    if (rc == KL_OK && p.more && p.n > 0) {
        uint8_t *cur = malloc(KL_CATALOG_CURSOR_MAX);
        if (cur == NULL) {
            rc = kl_fail(err, KL_INTERNAL, "memory", "out of memory");
        } else {
            out->next_cursor.data = cur;
            out->next_cursor.len = kl_catalog_cursor_encode(kind, item_name(kind, p.items[p.n - 1]), cur);
        }
    }
    if (kind == KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_DATABASES) {
        out->databases = (Keyload__V1__CatalogDatabase **)p.items;
        out->n_databases = p.n;
    } else if (kind == KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_QUEUES) {
        out->queues = (Keyload__V1__CatalogQueue **)p.items;
        out->n_queues = p.n;
    } else {
        out->principals = (Keyload__V1__CatalogPrincipal **)p.items;
        out->n_principals = p.n;
    }
    if (rc != KL_OK)
        kl_catalog_page_free(out);
    return rc;
}

void kl_catalog_page_free(Keyload__V1__ListCatalogAnswer *a)
{
    for (size_t i = 0; i < a->n_databases; i++)
        keyload__v1__catalog_database__free_unpacked(a->databases[i], NULL);
    for (size_t i = 0; i < a->n_queues; i++)
        keyload__v1__catalog_queue__free_unpacked(a->queues[i], NULL);
    for (size_t i = 0; i < a->n_principals; i++)
        keyload__v1__catalog_principal__free_unpacked(a->principals[i], NULL);
    free(a->databases);
    free(a->queues);
    free(a->principals);
    free(a->next_cursor.data);
    a->databases = NULL;
    a->queues = NULL;
    a->principals = NULL;
    a->next_cursor.data = NULL;
    a->n_databases = a->n_queues = a->n_principals = a->next_cursor.len = 0;
}
