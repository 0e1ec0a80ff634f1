/* The one authorization evaluator and the principal-record edits (authz.h). Messages name
 * permissions, tenants, databases, queues and key names (all identifiers, i.e. schema);
 * never a value, a body or anything that failed the identifier rule. */
#include "daemon/engine/authz.h"
#include "daemon/engine/record.h"

#include "common/grants.h"
#include "common/names.h"

#include <stdint.h>
#include <sys/types.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *str_or_empty(const char *s) { return s ? s : ""; }

static bool str_eq(const char *a, const char *b) { return strcmp(str_or_empty(a), str_or_empty(b)) == 0; }

static bool is_identifier(const char *s) { return kl_name_check("", s, NULL) == KL_OK; }

static bool is_star(const char *s) { return s != NULL && s[0] == '*' && s[1] == '\0'; }

/* ---- permissions and methods ---- */

static bool permission_known(Keyload__V1__Permission p) { return kl_grants_permission_known(p); }

const char *kl_authz_permission_name(Keyload__V1__Permission p) { return kl_grants_permission_name(p); }

Keyload__V1__Permission kl_authz_permission_parse(const char *name) { return kl_grants_permission_parse(name); }

Keyload__V1__Permission kl_authz_method_permission(kl_authz_method m)
{
    switch (m) {
    case KL_AUTHZ_ENQUEUE:
        return KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH;
    case KL_AUTHZ_RECEIVE:
        return KEYLOAD__V1__PERMISSION__QUEUE_CONSUME;
    case KL_AUTHZ_ACK:
    case KL_AUTHZ_RELEASE:
        return KEYLOAD__V1__PERMISSION__QUEUE_ACK;
    case KL_AUTHZ_STATS:
        return KEYLOAD__V1__PERMISSION__QUEUE_INSPECT;
    case KL_AUTHZ_QUERY:
        return KEYLOAD__V1__PERMISSION__QUERY;
    }
    return KEYLOAD__V1__PERMISSION__PERMISSION_UNSPECIFIED;
}

/* ---- queue patterns ---- */

kl_code kl_authz_pattern_check(const char *what, const char *pattern, kl_err *err)
{
    return kl_grants_pattern_check(what, pattern, err);
}

bool kl_authz_pattern_matches(const char *pattern, const char *queue)
{
    if (queue == NULL || kl_authz_pattern_check("", pattern, NULL) != KL_OK)
        return false;
    size_t n = strlen(pattern);
    if (pattern[n - 1] == '*')
        return strncmp(queue, pattern, n - 1) == 0;
    return strcmp(queue, pattern) == 0;
}

bool kl_authz_pattern_covers(const char *outer, const char *inner)
{
    if (kl_authz_pattern_check("", outer, NULL) != KL_OK || kl_authz_pattern_check("", inner, NULL) != KL_OK)
        return false;
    size_t n = strlen(outer);
    if (outer[n - 1] != '*')
        return strcmp(outer, inner) == 0;
    /* outer = P*: inner (a name, or Q*) must start with P. An inner whose '*' comes before
     * the end of P fails the comparison, since P holds no '*'. */
    return strncmp(inner, outer, n - 1) == 0;
}

/* ---- grants ---- */

static bool list_has(char *const *list, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (is_star(list[i]) || strcmp(list[i], key) == 0)
            return true;
    return false;
}

/* Every entry of `inner` is allowed by `outer`. */
static bool list_covers(char *const *outer, size_t n_outer, char *const *inner, size_t n_inner)
{
    for (size_t i = 0; i < n_inner; i++) {
        if (is_star(inner[i])) {
            bool all = false;
            for (size_t j = 0; j < n_outer; j++)
                all = all || is_star(outer[j]);
            if (!all)
                return false;
        } else if (!list_has(outer, n_outer, inner[i])) {
            return false;
        }
    }
    return true;
}

bool kl_authz_grant_covers(const Keyload__V1__Grant *held, const Keyload__V1__Grant *wanted)
{
    if (held == NULL || wanted == NULL || kl_authz_validate_grant(held, NULL) != KL_OK ||
        kl_authz_validate_grant(wanted, NULL) != KL_OK)
        return false;
    return strcmp(held->database, wanted->database) == 0 && held->permission == wanted->permission &&
           kl_authz_pattern_covers(held->queue_pattern, wanted->queue_pattern) &&
           list_covers(held->fields, held->n_fields, wanted->fields, wanted->n_fields) &&
           list_covers(held->headers, held->n_headers, wanted->headers, wanted->n_headers);
}

static kl_code check_list(const char *name, Keyload__V1__Permission perm, char *const *list, size_t n,
                          kl_err *err)
{
    char what[48];
    snprintf(what, sizeof what, "grant.%s", name);
    if (n > 0 && perm == KEYLOAD__V1__PERMISSION__QUEUE_ACK)
        return kl_fail(err, KL_INVALID_ARGUMENT, what,
                       "%s must be empty for QueueAck (ack and release neither write nor read %s)", what,
                       name);
    if (n > KL_AUTHZ_LIST_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s holds %zu entries; the limit is %d", what, n,
                       KL_AUTHZ_LIST_MAX);
    for (size_t i = 0; i < n; i++) {
        if (is_star(list[i])) {
            if (n != 1)
                return kl_fail(err, KL_INVALID_ARGUMENT, what,
                               "%s[%zu] is \"*\" (every key), which must be the only entry", what, i);
            continue;
        }
        char item[64];
        snprintf(item, sizeof item, "%s[%zu]", what, i);
        if (kl_name_check(item, list[i], err) != KL_OK) {
            if (err)
                snprintf(err->detail, sizeof err->detail, "%s", what);
            return KL_INVALID_ARGUMENT;
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(list[j], list[i]) == 0)
                return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s[%zu] repeats %s[%zu]", what, i, what, j);
    }
    return KL_OK;
}

kl_code kl_authz_validate_grant(const Keyload__V1__Grant *g, kl_err *err)
{
    if (g == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "grant", "grant is missing");
    kl_code rc = kl_name_check("grant.database", g->database, err);
    if (rc != KL_OK)
        return rc;
    if (!permission_known(g->permission))
        return kl_fail(err, KL_INVALID_ARGUMENT, "grant.permission",
                       "grant.permission must be one of QueuePublish, QueueConsume, QueueAck, "
                       "QueueInspect, Query");
    if ((rc = kl_authz_pattern_check("grant.queue_pattern", g->queue_pattern, err)) != KL_OK)
        return rc;
    if ((rc = check_list("fields", g->permission, g->fields, g->n_fields, err)) != KL_OK)
        return rc;
    return check_list("headers", g->permission, g->headers, g->n_headers, err);
}

/* ---- the evaluator ---- */

static bool is_cluster_admin(const kl_authz_subject *who)
{
    return !who->admin_off && who->principal->cluster_admin;
}

/* The database the subject administers, or NULL. */
static const char *admin_database(const kl_authz_subject *who)
{
    const Keyload__V1__CatalogPrincipal *p = who->principal;
    if (who->admin_off || !p->database_admin || p->database == NULL || p->database[0] == '\0')
        return NULL;
    return p->database;
}

static kl_code check_tenant(const kl_authz_subject *who, const char *tenant, kl_err *err)
{
    if (who == NULL || who->principal == NULL)
        return kl_fail(err, KL_UNAUTHENTICATED, "principal", "the request has no authenticated principal");
    const char *mine = who->principal->tenant;
    if (mine == NULL || mine[0] == '\0' || strcmp(mine, tenant) != 0)
        return kl_fail(err, KL_PERMISSION_DENIED, "tenant", "the principal is not a member of tenant %s",
                       tenant);
    return KL_OK;
}

static bool grant_applies(const Keyload__V1__Grant *g, const kl_authz_request *r)
{
    return g != NULL && g->permission == r->permission && str_eq(g->database, r->database) &&
           kl_authz_pattern_matches(g->queue_pattern, r->queue);
}

static bool key_allowed(const Keyload__V1__CatalogPrincipal *p, const kl_authz_request *r, bool header,
                        const char *key)
{
    for (size_t i = 0; i < p->n_grants; i++) {
        const Keyload__V1__Grant *g = p->grants[i];
        if (!grant_applies(g, r))
            continue;
        if (header ? list_has(g->headers, g->n_headers, key) : list_has(g->fields, g->n_fields, key))
            return true;
    }
    return false;
}

/* The keys of one kind (fields or headers) the request uses, by position: the explicit
 * array first, then the message's. */
static size_t key_count(const kl_authz_request *r, bool header)
{
    size_t n = header ? r->n_header_keys : r->n_field_keys;
    if (r->message)
        n += header ? r->message->n_headers : r->message->n_fields;
    return n;
}

static const char *key_at(const kl_authz_request *r, bool header, size_t i)
{
    size_t n = header ? r->n_header_keys : r->n_field_keys;
    const char *k;
    if (i < n)
        k = header ? r->header_keys[i] : r->field_keys[i];
    else if (header)
        k = r->message->headers[i - n] ? r->message->headers[i - n]->key : NULL;
    else
        k = r->message->fields[i - n] ? r->message->fields[i - n]->key : NULL;
    return str_or_empty(k);
}

static kl_code check_keys(const Keyload__V1__CatalogPrincipal *p, const kl_authz_request *r, bool header,
                          kl_err *err)
{
    size_t n = key_count(r, header);
    size_t denied = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (!key_allowed(p, r, header, key_at(r, header, i)) && denied++ == 0)
            first = i;
    if (denied == 0)
        return KL_OK;
    const char *perm = kl_authz_permission_name(r->permission);
    const char *kind = header ? "header" : "field";
    char detail[48], key[KL_NAME_LEN_MAX + 48], more[48] = "";
    snprintf(detail, sizeof detail, "%s_grant:%s", kind, perm);
    const char *k = key_at(r, header, first);
    if (is_identifier(k))
        snprintf(key, sizeof key, "%s key %s", kind, k);
    else /* not schema-shaped: name it by position only */
        snprintf(key, sizeof key, "%s #%zu (a key outside the identifier rule)", kind, first);
    if (denied > 1)
        snprintf(more, sizeof more, " (and %zu more)", denied - 1);
    return kl_fail(err, KL_PERMISSION_DENIED, detail,
                   "%s on queue %s in database %s: %s%s is not in the %ss list of any %s grant whose "
                   "queue pattern matches it",
                   perm, r->queue, r->database, key, more, kind, perm);
}

kl_code kl_authz_check(const kl_authz_subject *who, const kl_authz_request *r, kl_err *err)
{
    if (r == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "request", "authorization request is missing");
    kl_code rc;
    if ((rc = kl_name_check("request.tenant", r->tenant, err)) != KL_OK ||
        (rc = kl_name_check("request.database", r->database, err)) != KL_OK ||
        (rc = kl_name_check("request.queue", r->queue, err)) != KL_OK)
        return rc;
    if (!permission_known(r->permission))
        return kl_fail(err, KL_INVALID_ARGUMENT, "request.permission",
                       "request.permission is not a known permission");
    if ((r->n_field_keys > 0 && r->field_keys == NULL) || (r->n_header_keys > 0 && r->header_keys == NULL))
        return kl_fail(err, KL_INVALID_ARGUMENT, "request.keys", "request key counts without key arrays");
    if ((rc = check_tenant(who, r->tenant, err)) != KL_OK)
        return rc;
    if (is_cluster_admin(who))
        return KL_OK;
    const char *adb = admin_database(who);
    if (adb != NULL && strcmp(adb, r->database) == 0)
        return KL_OK;
    const Keyload__V1__CatalogPrincipal *p = who->principal;
    bool any = false;
    for (size_t i = 0; i < p->n_grants && !any; i++)
        any = grant_applies(p->grants[i], r);
    const char *perm = kl_authz_permission_name(r->permission);
    if (!any) {
        char detail[48];
        snprintf(detail, sizeof detail, "grant:%s", perm);
        return kl_fail(err, KL_PERMISSION_DENIED, detail,
                       "%s on queue %s in database %s needs a %s grant whose queue pattern matches %s "
                       "(exactly, or a prefix followed by '*')",
                       perm, r->queue, r->database, perm, r->queue);
    }
    if ((rc = check_keys(p, r, false, err)) != KL_OK)
        return rc;
    return check_keys(p, r, true, err);
}

kl_code kl_authz_require_admin(const kl_authz_subject *who, const char *tenant, const char *database,
                               kl_err *err)
{
    kl_code rc;
    if ((rc = kl_name_check("request.tenant", tenant, err)) != KL_OK ||
        (rc = kl_name_check("request.database", database, err)) != KL_OK)
        return rc;
    if ((rc = check_tenant(who, tenant, err)) != KL_OK)
        return rc;
    const char *adb = admin_database(who);
    if (is_cluster_admin(who) || (adb != NULL && strcmp(adb, database) == 0))
        return KL_OK;
    return kl_fail(err, KL_PERMISSION_DENIED, "role:administrator",
                   "this needs a persisted administrator of database %s (cluster or database administrator)",
                   database);
}

/* ---- who may change a principal ---- */

/* The granter's standing over target: KL_OK when it is a cluster administrator of the
 * target's tenant or a database administrator who may touch target (not a cluster
 * administrator, not another database's administrator). *db_admin_of gets the granter's
 * database when it acts as a database administrator, NULL as a cluster administrator. */
static kl_code standing(const kl_authz_subject *granter, const Keyload__V1__CatalogPrincipal *target,
                        const char **db_admin_of, kl_err *err)
{
    if (target == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "target", "the principal to change is missing");
    kl_code rc = kl_name_check("target.tenant", target->tenant, err);
    if (rc != KL_OK)
        return rc;
    if ((rc = check_tenant(granter, target->tenant, err)) != KL_OK)
        return rc;
    *db_admin_of = NULL;
    if (is_cluster_admin(granter))
        return KL_OK;
    const char *adb = admin_database(granter);
    if (adb == NULL)
        return kl_fail(err, KL_PERMISSION_DENIED, "role:administrator",
                       "only an administrator may change a principal's grants or roles");
    if (target->cluster_admin)
        return kl_fail(err, KL_PERMISSION_DENIED, "role:cluster_admin",
                       "only a cluster administrator may change a cluster administrator");
    if (target->database_admin && !str_eq(target->database, adb))
        return kl_fail(err, KL_PERMISSION_DENIED, "role:database_admin",
                       "a database administrator of %s may not change an administrator of another database",
                       adb);
    *db_admin_of = adb;
    return KL_OK;
}

kl_code kl_authz_can_grant(const kl_authz_subject *granter, const Keyload__V1__CatalogPrincipal *target,
                           const Keyload__V1__Grant *grant, kl_err *err)
{
    kl_code rc = kl_authz_validate_grant(grant, err);
    if (rc != KL_OK)
        return rc;
    const char *adb;
    if ((rc = standing(granter, target, &adb, err)) != KL_OK)
        return rc;
    if (adb != NULL && strcmp(adb, grant->database) != 0)
        return kl_fail(err, KL_PERMISSION_DENIED, "role:database_admin",
                       "a database administrator of %s may grant only in database %s, not in %s", adb, adb,
                       grant->database);
    return KL_OK;
}

static kl_code check_roles(const kl_authz_roles *to, kl_err *err)
{
    if (to == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "roles", "roles are missing");
    if (to->cluster_admin && to->database_admin)
        return kl_fail(err, KL_INVALID_ARGUMENT, "roles",
                       "a principal is a cluster administrator or a database administrator, not both");
    if (to->database_admin) {
        if (kl_name_check("roles.database", to->database, err) != KL_OK) {
            if (err)
                snprintf(err->detail, sizeof err->detail, "roles");
            return KL_INVALID_ARGUMENT;
        }
    } else if (to->database != NULL && to->database[0] != '\0') {
        return kl_fail(err, KL_INVALID_ARGUMENT, "roles",
                       "roles.database names the administered database; only a database administrator has one");
    }
    return KL_OK;
}

kl_code kl_authz_can_set_roles(const kl_authz_subject *granter, const Keyload__V1__CatalogPrincipal *target,
                               const kl_authz_roles *to, kl_err *err)
{
    kl_code rc = check_roles(to, err);
    if (rc != KL_OK)
        return rc;
    const char *adb;
    if ((rc = standing(granter, target, &adb, err)) != KL_OK)
        return rc;
    if (adb == NULL)
        return KL_OK;
    if (to->cluster_admin)
        return kl_fail(err, KL_PERMISSION_DENIED, "role:cluster_admin",
                       "only a cluster administrator may create a cluster administrator");
    if (to->database_admin && strcmp(to->database, adb) != 0)
        return kl_fail(err, KL_PERMISSION_DENIED, "role:database_admin",
                       "a database administrator of %s may make administrators of %s only", adb, adb);
    return KL_OK;
}

/* ---- record edits ---- */

static kl_code epoch_room(const Keyload__V1__CatalogPrincipal *p, kl_err *err)
{
    if (p->policy_epoch == UINT64_MAX)
        return kl_fail(err, KL_FAILED_PRECONDITION, "policy_epoch", "the principal's policy epoch cannot grow");
    return KL_OK;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_list(char **list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

/* A sorted malloc'd copy (NULL for an empty list); false when out of memory. */
static bool copy_list(char *const *src, size_t n, char ***out)
{
    *out = NULL;
    if (n == 0)
        return true;
    char **l = calloc(n, sizeof *l);
    if (l == NULL)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((l[i] = strdup(src[i])) == NULL) {
            free_list(l, i);
            return false;
        }
    qsort(l, n, sizeof *l, cmp_str);
    *out = l;
    return true;
}

static bool same_set(char *const *a, size_t na, char *const *b, size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < nb; i++) {
        bool found = false;
        for (size_t j = 0; j < na && !found; j++)
            found = strcmp(a[j], b[i]) == 0;
        if (!found)
            return false;
    }
    return true;
}

static ssize_t find_grant(const Keyload__V1__CatalogPrincipal *p, const char *database,
                          Keyload__V1__Permission perm, const char *pattern)
{
    for (size_t i = 0; i < p->n_grants; i++) {
        const Keyload__V1__Grant *g = p->grants[i];
        if (g && g->permission == perm && str_eq(g->database, database) && str_eq(g->queue_pattern, pattern))
            return (ssize_t)i;
    }
    return -1;
}

static void set_changed(bool *changed, bool v)
{
    if (changed)
        *changed = v;
}

kl_code kl_authz_apply_grant(Keyload__V1__CatalogPrincipal *p, const Keyload__V1__Grant *grant,
                             bool *changed, kl_err *err)
{
    set_changed(changed, false);
    if (p == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "principal", "the principal record is missing");
    kl_code rc = kl_authz_validate_grant(grant, err);
    if (rc != KL_OK)
        return rc;
    ssize_t at = find_grant(p, grant->database, grant->permission, grant->queue_pattern);
    if (at >= 0) {
        Keyload__V1__Grant *g = p->grants[at];
        if (same_set(g->fields, g->n_fields, grant->fields, grant->n_fields) &&
            same_set(g->headers, g->n_headers, grant->headers, grant->n_headers))
            return KL_OK;
    }
    if ((rc = epoch_room(p, err)) != KL_OK)
        return rc;
    char **fields, **headers;
    if (!copy_list(grant->fields, grant->n_fields, &fields))
        return kl_record_oom(err);
    if (!copy_list(grant->headers, grant->n_headers, &headers)) {
        free_list(fields, grant->n_fields);
        return kl_record_oom(err);
    }
    if (at >= 0) {
        Keyload__V1__Grant *g = p->grants[at];
        free_list(g->fields, g->n_fields);
        free_list(g->headers, g->n_headers);
        g->fields = fields;
        g->n_fields = grant->n_fields;
        g->headers = headers;
        g->n_headers = grant->n_headers;
    } else {
        Keyload__V1__Grant *g = malloc(sizeof *g);
        char *db = strdup(grant->database), *pat = strdup(grant->queue_pattern);
        Keyload__V1__Grant **arr = NULL;
        if (g && db && pat)
            arr = realloc(p->grants, (p->n_grants + 1) * sizeof *arr);
        if (arr == NULL) {
            free(g);
            free(db);
            free(pat);
            free_list(fields, grant->n_fields);
            free_list(headers, grant->n_headers);
            return kl_record_oom(err);
        }
        keyload__v1__grant__init(g);
        g->database = db;
        g->permission = grant->permission;
        g->queue_pattern = pat;
        g->fields = fields;
        g->n_fields = grant->n_fields;
        g->headers = headers;
        g->n_headers = grant->n_headers;
        arr[p->n_grants++] = g;
        p->grants = arr;
    }
    p->policy_epoch++;
    set_changed(changed, true);
    return KL_OK;
}

kl_code kl_authz_revoke(Keyload__V1__CatalogPrincipal *p, const char *database,
                        Keyload__V1__Permission permission, const char *queue_pattern, bool *changed,
                        kl_err *err)
{
    set_changed(changed, false);
    if (p == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "principal", "the principal record is missing");
    kl_code rc = kl_name_check("grant.database", database, err);
    if (rc != KL_OK)
        return rc;
    if (!permission_known(permission))
        return kl_fail(err, KL_INVALID_ARGUMENT, "grant.permission",
                       "grant.permission must be one of QueuePublish, QueueConsume, QueueAck, "
                       "QueueInspect, Query");
    if ((rc = kl_authz_pattern_check("grant.queue_pattern", queue_pattern, err)) != KL_OK)
        return rc;
    ssize_t at = find_grant(p, database, permission, queue_pattern);
    if (at < 0)
        return KL_OK;
    if ((rc = epoch_room(p, err)) != KL_OK)
        return rc;
    keyload__v1__grant__free_unpacked(p->grants[at], NULL);
    memmove(&p->grants[at], &p->grants[at + 1], (p->n_grants - (size_t)at - 1) * sizeof p->grants[0]);
    p->n_grants--;
    p->policy_epoch++;
    set_changed(changed, true);
    return KL_OK;
}

kl_code kl_authz_set_roles(Keyload__V1__CatalogPrincipal *p, const kl_authz_roles *to, bool *changed,
                           kl_err *err)
{
    set_changed(changed, false);
    if (p == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "principal", "the principal record is missing");
    kl_code rc = check_roles(to, err);
    if (rc != KL_OK)
        return rc;
    const char *db = to->database_admin ? to->database : "";
    if ((bool)p->cluster_admin == to->cluster_admin && (bool)p->database_admin == to->database_admin &&
        str_eq(p->database, db))
        return KL_OK;
    if ((rc = epoch_room(p, err)) != KL_OK)
        return rc;
    char *copy = strdup(db);
    if (copy == NULL)
        return kl_record_oom(err);
    if (p->database != NULL && p->database != protobuf_c_empty_string)
        free(p->database);
    p->database = copy;
    p->cluster_admin = to->cluster_admin;
    p->database_admin = to->database_admin;
    p->policy_epoch++;
    set_changed(changed, true);
    return KL_OK;
}
