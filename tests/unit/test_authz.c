/* The authorization evaluator and principal-record edits (daemon/engine/authz.c): the
 * permission x method matrix, queue patterns, field and header grants, tenants, roles,
 * admin_off, who may grant what, malformed grants, policy epochs, and that no error
 * message ever carries a value that was passed as data. Pure: no store, no I/O. */
#include "daemon/engine/authz.h"

#include "common/names.h"

#include "keyload/v1/catalog.pb-c.h"
#include "keyload/v1/queue.pb-c.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PUBLISH KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH
#define CONSUME KEYLOAD__V1__PERMISSION__QUEUE_CONSUME
#define ACK KEYLOAD__V1__PERMISSION__QUEUE_ACK
#define INSPECT KEYLOAD__V1__PERMISSION__QUEUE_INSPECT
#define QUERY KEYLOAD__V1__PERMISSION__QUERY

static const Keyload__V1__Permission all_perms[] = {PUBLISH, CONSUME, ACK, INSPECT, QUERY};
#define N_PERMS 5

/* ---- helpers ---- */

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    ck_assert_ptr_nonnull(d);
    return d;
}

/* A principal owning its memory as unpack leaves it. */
static Keyload__V1__CatalogPrincipal *principal(const char *tenant)
{
    Keyload__V1__CatalogPrincipal *p = malloc(sizeof *p);
    ck_assert_ptr_nonnull(p);
    keyload__v1__catalog_principal__init(p);
    p->principal_id = xstrdup("alice");
    p->tenant = xstrdup(tenant);
    return p;
}

static Keyload__V1__CatalogPrincipal *admin(const char *tenant, bool cluster, const char *db)
{
    Keyload__V1__CatalogPrincipal *p = principal(tenant);
    kl_authz_roles r = {.cluster_admin = cluster, .database_admin = !cluster, .database = cluster ? "" : db};
    kl_err err;
    ck_assert_int_eq(kl_authz_set_roles(p, &r, NULL, &err), KL_OK);
    return p;
}

static void pfree(Keyload__V1__CatalogPrincipal *p) { keyload__v1__catalog_principal__free_unpacked(p, NULL); }

static size_t count(const char *const *l)
{
    size_t n = 0;
    while (l && l[n])
        n++;
    return n;
}

/* A stack grant borrowing its strings (lists are NULL-terminated arrays or NULL). */
static Keyload__V1__Grant grant(const char *db, Keyload__V1__Permission perm, const char *pattern,
                                const char *const *fields, const char *const *headers)
{
    Keyload__V1__Grant g = KEYLOAD__V1__GRANT__INIT;
    g.database = (char *)db;
    g.permission = perm;
    g.queue_pattern = (char *)pattern;
    g.n_fields = count(fields);
    g.fields = (char **)fields;
    g.n_headers = count(headers);
    g.headers = (char **)headers;
    return g;
}

static void give(Keyload__V1__CatalogPrincipal *p, const char *db, Keyload__V1__Permission perm,
                 const char *pattern, const char *const *fields, const char *const *headers)
{
    Keyload__V1__Grant g = grant(db, perm, pattern, fields, headers);
    kl_err err;
    kl_code rc = kl_authz_apply_grant(p, &g, NULL, &err);
    ck_assert_msg(rc == KL_OK, "apply_grant: %s %s", kl_code_name(rc), err.message);
}

static kl_authz_request req(Keyload__V1__Permission perm, const char *queue)
{
    kl_authz_request r = {.tenant = "acme", .database = "shop", .permission = perm, .queue = queue};
    return r;
}

static kl_code check(const Keyload__V1__CatalogPrincipal *p, bool admin_off, const kl_authz_request *r,
                     kl_err *err)
{
    kl_authz_subject who = {.principal = p, .admin_off = admin_off};
    kl_err_clear(err);
    return kl_authz_check(&who, r, err);
}

static void allowed(const Keyload__V1__CatalogPrincipal *p, bool admin_off, const kl_authz_request *r)
{
    kl_err err;
    kl_code rc = check(p, admin_off, r, &err);
    ck_assert_msg(rc == KL_OK, "%s on %s/%s: expected OK, got %s %s (%s)", kl_authz_permission_name(r->permission),
                  r->database, r->queue, kl_code_name(rc), err.detail, err.message);
}

/* Denied with code and detail; returns the message for further checks. */
static const char *denied(const Keyload__V1__CatalogPrincipal *p, bool admin_off, const kl_authz_request *r,
                          kl_code code, const char *detail)
{
    static kl_err err;
    kl_code rc = check(p, admin_off, r, &err);
    ck_assert_msg(rc == code, "%s on %s/%s: expected %s, got %s (%s)", kl_authz_permission_name(r->permission),
                  r->database, r->queue, kl_code_name(code), kl_code_name(rc), err.message);
    ck_assert_str_eq(err.detail, detail);
    ck_assert_int_eq(err.code, code);
    return err.message;
}

#define assert_has(s, sub) ck_assert_msg(strstr((s), (sub)) != NULL, "\"%s\" lacks \"%s\"", (s), (sub))
#define assert_lacks(s, sub) ck_assert_msg(strstr((s), (sub)) == NULL, "\"%s\" holds \"%s\"", (s), (sub))

/* ---- permission names and the method mapping ---- */

START_TEST(permission_names_and_method_mapping)
{
    static const struct {
        kl_authz_method m;
        Keyload__V1__Permission p;
        const char *name;
    } map[] = {
        {KL_AUTHZ_ENQUEUE, PUBLISH, "QueuePublish"}, {KL_AUTHZ_RECEIVE, CONSUME, "QueueConsume"},
        {KL_AUTHZ_ACK, ACK, "QueueAck"},             {KL_AUTHZ_RELEASE, ACK, "QueueAck"},
        {KL_AUTHZ_STATS, INSPECT, "QueueInspect"},   {KL_AUTHZ_QUERY, QUERY, "Query"},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        ck_assert_int_eq(kl_authz_method_permission(map[i].m), map[i].p);
        ck_assert_str_eq(kl_authz_permission_name(map[i].p), map[i].name);
        ck_assert_int_eq(kl_authz_permission_parse(map[i].name), map[i].p);
    }
    ck_assert_int_eq(kl_authz_method_permission((kl_authz_method)99),
                     KEYLOAD__V1__PERMISSION__PERMISSION_UNSPECIFIED);
    ck_assert_str_eq(kl_authz_permission_name(KEYLOAD__V1__PERMISSION__PERMISSION_UNSPECIFIED), "unknown");
    ck_assert_str_eq(kl_authz_permission_name((Keyload__V1__Permission)6), "unknown");
    ck_assert_int_eq(kl_authz_permission_parse("queuepublish"), KEYLOAD__V1__PERMISSION__PERMISSION_UNSPECIFIED);
    ck_assert_int_eq(kl_authz_permission_parse(NULL), KEYLOAD__V1__PERMISSION__PERMISSION_UNSPECIFIED);
}
END_TEST

/* Each method, with a principal holding exactly the permission it maps to (allowed) and
 * with one holding every other permission (denied, naming the one it needed). */
START_TEST(method_matrix)
{
    for (kl_authz_method m = KL_AUTHZ_ENQUEUE; m <= KL_AUTHZ_QUERY; m++) {
        Keyload__V1__Permission need = kl_authz_method_permission(m);
        Keyload__V1__CatalogPrincipal *yes = principal("acme"), *no = principal("acme");
        give(yes, "shop", need, "orders", NULL, NULL);
        for (int i = 0; i < N_PERMS; i++)
            if (all_perms[i] != need)
                give(no, "shop", all_perms[i], "*", NULL, NULL);
        kl_authz_request r = req(need, "orders");
        allowed(yes, false, &r);
        char detail[64];
        snprintf(detail, sizeof detail, "grant:%s", kl_authz_permission_name(need));
        const char *msg = denied(no, false, &r, KL_PERMISSION_DENIED, detail);
        assert_has(msg, kl_authz_permission_name(need));
        assert_has(msg, "orders");
        pfree(yes);
        pfree(no);
    }
}
END_TEST

/* Permission x permission: a grant of P allows P and nothing else, also in other databases. */
START_TEST(permission_matrix)
{
    for (int i = 0; i < N_PERMS; i++) {
        Keyload__V1__CatalogPrincipal *p = principal("acme");
        give(p, "shop", all_perms[i], "orders", NULL, NULL);
        for (int j = 0; j < N_PERMS; j++) {
            kl_authz_request r = req(all_perms[j], "orders");
            char detail[64];
            snprintf(detail, sizeof detail, "grant:%s", kl_authz_permission_name(all_perms[j]));
            if (i == j) {
                allowed(p, false, &r);
                r.database = "other"; /* the grant's database only */
            }
            denied(p, false, &r, KL_PERMISSION_DENIED, detail);
        }
        pfree(p);
    }
}
END_TEST

/* ---- queue patterns ---- */

START_TEST(pattern_syntax)
{
    static const char *const good[] = {"orders", "orders.*", "orders*", "*", "a", "a.b-c_d:e*"};
    static const char *const bad[] = {"", "**", "*orders", "ord*ers", "orders.**", "a b", "a/b*", "é*"};
    kl_err err;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        ck_assert_msg(kl_authz_pattern_check("p", good[i], &err) == KL_OK, "%s refused: %s", good[i], err.message);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kl_err_clear(&err);
        ck_assert_msg(kl_authz_pattern_check("grant.queue_pattern", bad[i], &err) == KL_INVALID_ARGUMENT,
                      "\"%s\" accepted", bad[i]);
        ck_assert_str_eq(err.detail, "grant.queue_pattern");
    }
    ck_assert_int_eq(kl_authz_pattern_check("p", NULL, &err), KL_INVALID_ARGUMENT);
    char longp[KL_NAME_LEN_MAX + 2];
    memset(longp, 'a', sizeof longp);
    longp[KL_NAME_LEN_MAX] = '\0';
    ck_assert_int_eq(kl_authz_pattern_check("p", longp, &err), KL_OK); /* 128 bytes */
    longp[KL_NAME_LEN_MAX - 1] = '*';
    ck_assert_int_eq(kl_authz_pattern_check("p", longp, &err), KL_OK); /* 127 + '*' */
    longp[KL_NAME_LEN_MAX] = 'a';
    longp[KL_NAME_LEN_MAX + 1] = '\0';
    ck_assert_int_eq(kl_authz_pattern_check("p", longp, &err), KL_INVALID_ARGUMENT); /* 129 */
}
END_TEST

START_TEST(pattern_matching)
{
    static const struct {
        const char *pattern, *queue;
        bool match;
    } t[] = {
        {"orders", "orders", true},      {"orders", "orders2", false},    {"orders", "order", false},
        {"orders", "orders.eu", false},  {"orders.*", "orders.eu", true}, {"orders.*", "orders.", true},
        {"orders.*", "orders", false},   {"orders.*", "orders2", false},  {"orders.*", "ordersX.eu", false},
        {"orders*", "orders", true},     {"orders*", "orders2", true},    {"orders*", "orders.eu", true},
        {"orders*", "order", false},     {"*", "anything", true},         {"*", "a", true},
        {"Orders", "orders", false},     {"ord*ers", "ordXers", false}, /* invalid pattern: never */
        {"", "orders", false},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        ck_assert_msg(kl_authz_pattern_matches(t[i].pattern, t[i].queue) == t[i].match, "%s vs %s", t[i].pattern,
                      t[i].queue);
    ck_assert(!kl_authz_pattern_matches("*", NULL));

    /* Through the evaluator: near misses are denied, naming the queue. */
    Keyload__V1__CatalogPrincipal *p = principal("acme");
    give(p, "shop", PUBLISH, "orders", NULL, NULL);
    give(p, "shop", CONSUME, "orders.*", NULL, NULL);
    give(p, "shop", INSPECT, "*", NULL, NULL);
    kl_authz_request r = req(PUBLISH, "orders");
    allowed(p, false, &r);
    r.queue = "orders2";
    assert_has(denied(p, false, &r, KL_PERMISSION_DENIED, "grant:QueuePublish"), "orders2");
    r = req(CONSUME, "orders.eu");
    allowed(p, false, &r);
    r.queue = "orders";
    denied(p, false, &r, KL_PERMISSION_DENIED, "grant:QueueConsume");
    r = req(INSPECT, "zzz");
    allowed(p, false, &r);
    pfree(p);
}
END_TEST

START_TEST(pattern_covering)
{
    static const struct {
        const char *outer, *inner;
        bool covers;
    } t[] = {
        {"*", "*", true},               {"*", "orders.*", true},          {"*", "orders", true},
        {"orders.*", "orders.eu", true}, {"orders.*", "orders.eu.*", true}, {"orders.*", "orders.*", true},
        {"orders.*", "orders*", false}, {"orders.*", "orders", false},    {"orders.*", "*", false},
        {"orders*", "orders.*", true},  {"orders*", "orders", true},      {"orders", "orders", true},
        {"orders", "orders*", false},   {"orders", "orders2", false},     {"orders.eu", "orders.*", false},
        {"ord*ers", "ord", false},      {"*", "", false},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        ck_assert_msg(kl_authz_pattern_covers(t[i].outer, t[i].inner) == t[i].covers, "%s covers %s", t[i].outer,
                      t[i].inner);

    static const char *const ab[] = {"a", "b", NULL}, *const a[] = {"a", NULL}, *const star[] = {"*", NULL};
    Keyload__V1__Grant held = grant("shop", PUBLISH, "orders.*", ab, star);
    Keyload__V1__Grant want = grant("shop", PUBLISH, "orders.eu", a, a);
    ck_assert(kl_authz_grant_covers(&held, &want));
    want = grant("shop", PUBLISH, "orders.eu", star, NULL); /* "*" is more than {a, b} */
    ck_assert(!kl_authz_grant_covers(&held, &want));
    want = grant("shop", CONSUME, "orders.eu", a, NULL);
    ck_assert(!kl_authz_grant_covers(&held, &want));
    want = grant("other", PUBLISH, "orders.eu", a, NULL);
    ck_assert(!kl_authz_grant_covers(&held, &want));
    want = grant("shop", PUBLISH, "orders", a, NULL);
    ck_assert(!kl_authz_grant_covers(&held, &want));
    held = grant("shop", PUBLISH, "orders.*", a, NULL);
    want = grant("shop", PUBLISH, "orders.eu", ab, NULL);
    ck_assert(!kl_authz_grant_covers(&held, &want));
    want = grant("shop", PUBLISH, "orders.eu", NULL, a); /* headers: none held */
    ck_assert(!kl_authz_grant_covers(&held, &want));
    ck_assert(!kl_authz_grant_covers(NULL, &want));
}
END_TEST

/* ---- field and header grants ---- */

static Keyload__V1__Header hdr[4];
static Keyload__V1__Field fld[4];
static Keyload__V1__FieldValue fval;
static Keyload__V1__Header *hp[4];
static Keyload__V1__Field *fp[4];

/* A message with the given keys; every value, and the body, is a secret that must never
 * appear in an error. */
static Keyload__V1__EnqueueMessage message(const char *const *fields, const char *const *headers)
{
    Keyload__V1__EnqueueMessage m = KEYLOAD__V1__ENQUEUE_MESSAGE__INIT;
    keyload__v1__field_value__init(&fval);
    fval.kind_case = KEYLOAD__V1__FIELD_VALUE__KIND_STRING_VALUE;
    fval.string_value = "SECRET-FIELD-VALUE";
    m.n_fields = count(fields);
    for (size_t i = 0; i < m.n_fields; i++) {
        keyload__v1__field__init(&fld[i]);
        fld[i].key = (char *)fields[i];
        fld[i].value = &fval;
        fp[i] = &fld[i];
    }
    m.fields = fp;
    m.n_headers = count(headers);
    for (size_t i = 0; i < m.n_headers; i++) {
        keyload__v1__header__init(&hdr[i]);
        hdr[i].key = (char *)headers[i];
        hdr[i].value = "SECRET-HEADER-VALUE";
        hp[i] = &hdr[i];
    }
    m.headers = hp;
    m.body.data = (uint8_t *)"SECRET-BODY";
    m.body.len = 11;
    return m;
}

static void assert_no_values(const char *msg)
{
    assert_lacks(msg, "SECRET");
}

START_TEST(field_and_header_grants_on_publish)
{
    static const char *const gf[] = {"total", "currency", NULL}, *const gh[] = {"source", NULL};
    Keyload__V1__CatalogPrincipal *p = principal("acme");
    give(p, "shop", PUBLISH, "orders.*", gf, gh);
    kl_authz_request r = req(PUBLISH, "orders.eu");

    static const char *const f_ok[] = {"total", NULL}, *const h_ok[] = {"source", NULL};
    Keyload__V1__EnqueueMessage m = message(f_ok, h_ok);
    r.message = &m;
    allowed(p, false, &r);
    static const char *const f_all[] = {"currency", "total", NULL};
    m = message(f_all, NULL);
    allowed(p, false, &r);
    m = message(NULL, NULL); /* no field at all: always fine */
    allowed(p, false, &r);

    static const char *const f_extra[] = {"total", "ssn", NULL};
    m = message(f_extra, h_ok);
    const char *msg = denied(p, false, &r, KL_PERMISSION_DENIED, "field_grant:QueuePublish");
    assert_has(msg, "field key ssn");
    assert_has(msg, "QueuePublish");
    assert_has(msg, "orders.eu");
    assert_lacks(msg, "total");
    assert_no_values(msg);

    /* Keys match exactly: no prefixes, no case folding. */
    static const char *const near[][2] = {{"totals", NULL}, {"tot", NULL}, {"Total", NULL}, {"currency2", NULL}};
    for (size_t i = 0; i < sizeof near / sizeof near[0]; i++) {
        m = message(near[i], NULL);
        assert_has(denied(p, false, &r, KL_PERMISSION_DENIED, "field_grant:QueuePublish"), near[i][0]);
    }

    static const char *const f_two[] = {"ssn", "dob", "total", NULL};
    m = message(f_two, NULL);
    msg = denied(p, false, &r, KL_PERMISSION_DENIED, "field_grant:QueuePublish");
    assert_has(msg, "field key ssn (and 1 more)");
    assert_no_values(msg);

    static const char *const h_extra[] = {"source", "trace", NULL};
    m = message(f_ok, h_extra);
    msg = denied(p, false, &r, KL_PERMISSION_DENIED, "header_grant:QueuePublish");
    assert_has(msg, "header key trace");
    assert_no_values(msg);

    /* Explicit key arrays count too. */
    r.message = NULL;
    static const char *const keys[] = {"total", "weight"};
    r.field_keys = keys;
    r.n_field_keys = 2;
    assert_has(denied(p, false, &r, KL_PERMISSION_DENIED, "field_grant:QueuePublish"), "field key weight");
    r.n_field_keys = 1;
    allowed(p, false, &r);

    /* A key outside the identifier rule is named by position only. */
    static const char *const f_odd[] = {"total", "SECRET key\x01", NULL};
    m = message(f_odd, NULL);
    r.message = &m;
    r.n_field_keys = 0;
    msg = denied(p, false, &r, KL_PERMISSION_DENIED, "field_grant:QueuePublish");
    assert_has(msg, "field #1");
    assert_no_values(msg);
    pfree(p);
}
END_TEST

START_TEST(field_lists_empty_means_none_star_means_all)
{
    static const char *const star[] = {"*", NULL}, *const one[] = {"x", NULL};
    Keyload__V1__CatalogPrincipal *p = principal("acme");
    give(p, "shop", PUBLISH, "bare", NULL, NULL);
    give(p, "shop", PUBLISH, "open", star, star);
    kl_authz_request r = req(PUBLISH, "bare");
    Keyload__V1__EnqueueMessage m = message(one, NULL);
    r.message = &m;
    assert_has(denied(p, false, &r, KL_PERMISSION_DENIED, "field_grant:QueuePublish"), "field key x");
    m = message(NULL, one);
    assert_has(denied(p, false, &r, KL_PERMISSION_DENIED, "header_grant:QueuePublish"), "header key x");
    m = message(NULL, NULL);
    allowed(p, false, &r);
    static const char *const many[] = {"a", "b", "c", NULL}, *const odd[] = {"we ird", NULL};
    r.queue = "open";
    m = message(many, many);
    allowed(p, false, &r);
    m = message(odd, odd); /* "*" allows even a key outside the identifier rule */
    allowed(p, false, &r);
    pfree(p);
}
END_TEST

START_TEST(field_and_header_grants_on_consume)
{
    static const char *const gf[] = {"total", NULL}, *const gh[] = {"source", NULL};
    static const char *const pii[] = {"ssn", NULL};
    Keyload__V1__CatalogPrincipal *p = principal("acme");
    give(p, "shop", CONSUME, "orders.*", gf, gh);
    kl_authz_request r = req(CONSUME, "orders.eu");
    Keyload__V1__EnqueueMessage m = message(gf, gh);
    r.message = &m;
    allowed(p, false, &r);
    static const char *const f2[] = {"total", "ssn", NULL};
    m = message(f2, gh);
    const char *msg = denied(p, false, &r, KL_PERMISSION_DENIED, "field_grant:QueueConsume");
    assert_has(msg, "field key ssn");
    assert_no_values(msg);
    static const char *const h2[] = {"source", "auth", NULL};
    m = message(gf, h2);
    msg = denied(p, false, &r, KL_PERMISSION_DENIED, "header_grant:QueueConsume");
    assert_has(msg, "header key auth");
    assert_no_values(msg);

    /* A second matching grant adds its keys (each key is its own permission)... */
    give(p, "shop", CONSUME, "orders.eu", pii, NULL);
    m = message(f2, gh);
    allowed(p, false, &r);
    /* ...but only for the queues it matches, */
    r.queue = "orders.us";
    denied(p, false, &r, KL_PERMISSION_DENIED, "field_grant:QueueConsume");
    /* and grants for another permission or another database add nothing. */
    Keyload__V1__CatalogPrincipal *q = principal("acme");
    give(q, "shop", CONSUME, "orders.*", gf, gh);
    give(q, "shop", PUBLISH, "orders.*", pii, NULL);
    give(q, "other", CONSUME, "orders.*", pii, NULL);
    r.queue = "orders.eu";
    denied(q, false, &r, KL_PERMISSION_DENIED, "field_grant:QueueConsume");
    pfree(q);
    pfree(p);
}
END_TEST

/* ---- tenants and roles ---- */

START_TEST(wrong_tenant)
{
    Keyload__V1__CatalogPrincipal *p = principal("acme"), *ca = admin("acme", true, NULL);
    give(p, "shop", PUBLISH, "*", NULL, NULL);
    kl_authz_request r = req(PUBLISH, "orders");
    r.tenant = "globex";
    assert_has(denied(p, false, &r, KL_PERMISSION_DENIED, "tenant"), "globex");
    denied(ca, false, &r, KL_PERMISSION_DENIED, "tenant"); /* a cluster admin too */
    kl_authz_subject who = {.principal = ca};
    kl_err err;
    ck_assert_int_eq(kl_authz_require_admin(&who, "globex", "shop", &err), KL_PERMISSION_DENIED);
    ck_assert_str_eq(err.detail, "tenant");
    /* A record without a tenant belongs to none. */
    Keyload__V1__CatalogPrincipal *none = principal("");
    give(none, "shop", PUBLISH, "*", NULL, NULL);
    r.tenant = "acme";
    denied(none, false, &r, KL_PERMISSION_DENIED, "tenant");
    /* No principal at all. */
    ck_assert_int_eq(kl_authz_check(NULL, &r, &err), KL_UNAUTHENTICATED);
    ck_assert_str_eq(err.detail, "principal");
    pfree(none);
    pfree(ca);
    pfree(p);
}
END_TEST

START_TEST(admin_roles)
{
    Keyload__V1__CatalogPrincipal *ca = admin("acme", true, NULL), *da = admin("acme", false, "shop");
    for (int i = 0; i < N_PERMS; i++) {
        static const char *const keys[] = {"anything"};
        kl_authz_request r = req(all_perms[i], "orders");
        r.field_keys = keys;
        r.n_field_keys = 1;
        r.header_keys = keys;
        r.n_header_keys = 1;
        allowed(ca, false, &r);
        allowed(da, false, &r);
        r.database = "other"; /* cluster admin: every database of its tenant */
        allowed(ca, false, &r);
        char detail[64];
        snprintf(detail, sizeof detail, "grant:%s", kl_authz_permission_name(all_perms[i]));
        denied(da, false, &r, KL_PERMISSION_DENIED, detail);
    }
    kl_authz_subject who = {.principal = ca};
    kl_err err;
    ck_assert_int_eq(kl_authz_require_admin(&who, "acme", "other", &err), KL_OK);
    who.principal = da;
    ck_assert_int_eq(kl_authz_require_admin(&who, "acme", "shop", &err), KL_OK);
    ck_assert_int_eq(kl_authz_require_admin(&who, "acme", "other", &err), KL_PERMISSION_DENIED);
    ck_assert_str_eq(err.detail, "role:administrator");
    who.admin_off = true;
    ck_assert_int_eq(kl_authz_require_admin(&who, "acme", "shop", &err), KL_PERMISSION_DENIED);
    Keyload__V1__CatalogPrincipal *plain = principal("acme");
    give(plain, "shop", PUBLISH, "*", NULL, NULL);
    who.principal = plain;
    who.admin_off = false;
    ck_assert_int_eq(kl_authz_require_admin(&who, "acme", "shop", &err), KL_PERMISSION_DENIED);
    ck_assert_str_eq(err.detail, "role:administrator");
    /* A database admin flag without a database administers nothing. */
    da->database[0] = '\0';
    kl_authz_request r = req(PUBLISH, "orders");
    denied(da, false, &r, KL_PERMISSION_DENIED, "grant:QueuePublish");
    pfree(plain);
    pfree(da);
    pfree(ca);
}
END_TEST

START_TEST(admin_off_forces_the_grant_path)
{
    static const char *const gf[] = {"total", NULL}, *const f2[] = {"total", "ssn", NULL};
    Keyload__V1__CatalogPrincipal *ca = admin("acme", true, NULL), *da = admin("acme", false, "shop");
    kl_authz_request r = req(PUBLISH, "orders");
    denied(ca, true, &r, KL_PERMISSION_DENIED, "grant:QueuePublish");
    denied(da, true, &r, KL_PERMISSION_DENIED, "grant:QueuePublish");
    give(ca, "shop", PUBLISH, "orders", gf, NULL);
    give(da, "shop", PUBLISH, "orders", gf, NULL);
    Keyload__V1__EnqueueMessage m = message(gf, NULL);
    r.message = &m;
    allowed(ca, true, &r);
    allowed(da, true, &r);
    m = message(f2, NULL);
    assert_has(denied(ca, true, &r, KL_PERMISSION_DENIED, "field_grant:QueuePublish"), "ssn");
    assert_has(denied(da, true, &r, KL_PERMISSION_DENIED, "field_grant:QueuePublish"), "ssn");
    allowed(ca, false, &r); /* the same request as an administrator */
    allowed(da, false, &r);
    r.tenant = "globex";
    denied(ca, true, &r, KL_PERMISSION_DENIED, "tenant");
    pfree(ca);
    pfree(da);
}
END_TEST

START_TEST(malformed_requests)
{
    Keyload__V1__CatalogPrincipal *ca = admin("acme", true, NULL);
    kl_authz_request r = req(PUBLISH, "orders");
    r.permission = KEYLOAD__V1__PERMISSION__PERMISSION_UNSPECIFIED;
    denied(ca, false, &r, KL_INVALID_ARGUMENT, "request.permission");
    r.permission = (Keyload__V1__Permission)42;
    denied(ca, false, &r, KL_INVALID_ARGUMENT, "request.permission");
    r = req(PUBLISH, "orders.*"); /* a pattern is not a queue */
    denied(ca, false, &r, KL_INVALID_ARGUMENT, "request.queue");
    r = req(PUBLISH, NULL);
    denied(ca, false, &r, KL_INVALID_ARGUMENT, "request.queue");
    r = req(PUBLISH, "orders");
    r.database = "";
    denied(ca, false, &r, KL_INVALID_ARGUMENT, "request.database");
    r = req(PUBLISH, "orders");
    r.n_field_keys = 3;
    denied(ca, false, &r, KL_INVALID_ARGUMENT, "request.keys");
    kl_err err;
    kl_authz_subject who = {.principal = ca};
    ck_assert_int_eq(kl_authz_check(&who, NULL, &err), KL_INVALID_ARGUMENT);
    pfree(ca);
}
END_TEST

/* ---- who may grant ---- */

static kl_code can_grant(const Keyload__V1__CatalogPrincipal *granter, bool admin_off,
                         const Keyload__V1__CatalogPrincipal *target, const Keyload__V1__Grant *g, kl_err *err)
{
    kl_authz_subject who = {.principal = granter, .admin_off = admin_off};
    kl_err_clear(err);
    return kl_authz_can_grant(&who, target, g, err);
}

static kl_code can_roles(const Keyload__V1__CatalogPrincipal *granter, const Keyload__V1__CatalogPrincipal *target,
                         bool cluster, bool db_admin, const char *db, kl_err *err)
{
    kl_authz_subject who = {.principal = granter};
    kl_authz_roles to = {.cluster_admin = cluster, .database_admin = db_admin, .database = db};
    kl_err_clear(err);
    return kl_authz_can_set_roles(&who, target, &to, err);
}

START_TEST(can_grant_rules)
{
    Keyload__V1__CatalogPrincipal *ca = admin("acme", true, NULL), *da = admin("acme", false, "shop");
    Keyload__V1__CatalogPrincipal *plain = principal("acme"), *other_ca = admin("acme", true, NULL);
    Keyload__V1__CatalogPrincipal *other_da = admin("acme", false, "other");
    Keyload__V1__CatalogPrincipal *peer_da = admin("acme", false, "shop");
    Keyload__V1__CatalogPrincipal *foreign = principal("globex");
    Keyload__V1__Grant in_shop = grant("shop", PUBLISH, "orders.*", NULL, NULL);
    Keyload__V1__Grant in_other = grant("other", PUBLISH, "orders.*", NULL, NULL);
    kl_err err;

    /* Cluster admin: anything inside its tenant. */
    ck_assert_int_eq(can_grant(ca, false, plain, &in_shop, &err), KL_OK);
    ck_assert_int_eq(can_grant(ca, false, plain, &in_other, &err), KL_OK);
    ck_assert_int_eq(can_grant(ca, false, other_ca, &in_other, &err), KL_OK);
    ck_assert_int_eq(can_grant(ca, false, foreign, &in_shop, &err), KL_PERMISSION_DENIED);
    ck_assert_str_eq(err.detail, "tenant");
    ck_assert_int_eq(can_grant(ca, true, plain, &in_shop, &err), KL_PERMISSION_DENIED); /* admin_off */
    ck_assert_str_eq(err.detail, "role:administrator");

    /* Database admin: only its database, never a cluster admin, never another db's admin. */
    ck_assert_int_eq(can_grant(da, false, plain, &in_shop, &err), KL_OK);
    ck_assert_int_eq(can_grant(da, false, peer_da, &in_shop, &err), KL_OK);
    ck_assert_int_eq(can_grant(da, false, plain, &in_other, &err), KL_PERMISSION_DENIED);
    ck_assert_str_eq(err.detail, "role:database_admin");
    ck_assert_int_eq(can_grant(da, false, other_ca, &in_shop, &err), KL_PERMISSION_DENIED);
    ck_assert_str_eq(err.detail, "role:cluster_admin");
    ck_assert_int_eq(can_grant(da, false, other_da, &in_shop, &err), KL_PERMISSION_DENIED);
    ck_assert_str_eq(err.detail, "role:database_admin");
    ck_assert_int_eq(can_grant(da, false, foreign, &in_shop, &err), KL_PERMISSION_DENIED);
    ck_assert_str_eq(err.detail, "tenant");

    /* A non-admin may grant nothing, not even what it holds. */
    Keyload__V1__CatalogPrincipal *holder = principal("acme");
    give(holder, "shop", PUBLISH, "*", NULL, NULL);
    ck_assert_int_eq(can_grant(holder, false, plain, &in_shop, &err), KL_PERMISSION_DENIED);
    ck_assert_str_eq(err.detail, "role:administrator");

    /* A malformed grant is refused as such, before any role question. */
    Keyload__V1__Grant bad = grant("shop", PUBLISH, "or*ders", NULL, NULL);
    ck_assert_int_eq(can_grant(ca, false, plain, &bad, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "grant.queue_pattern");
    ck_assert_int_eq(can_grant(ca, false, NULL, &in_shop, &err), KL_INVALID_ARGUMENT);

    /* Roles. A database admin can never create (or keep, or remove) a cluster admin. */
    ck_assert_int_eq(can_roles(da, plain, true, false, "", &err), KL_PERMISSION_DENIED);
    ck_assert_str_eq(err.detail, "role:cluster_admin");
    ck_assert_int_eq(can_roles(da, other_ca, false, false, "", &err), KL_PERMISSION_DENIED);
    ck_assert_str_eq(err.detail, "role:cluster_admin");
    ck_assert_int_eq(can_roles(da, plain, false, true, "shop", &err), KL_OK);
    ck_assert_int_eq(can_roles(da, peer_da, false, false, "", &err), KL_OK);
    ck_assert_int_eq(can_roles(da, plain, false, true, "other", &err), KL_PERMISSION_DENIED);
    ck_assert_str_eq(err.detail, "role:database_admin");
    ck_assert_int_eq(can_roles(da, other_da, false, false, "", &err), KL_PERMISSION_DENIED);
    ck_assert_str_eq(err.detail, "role:database_admin");
    ck_assert_int_eq(can_roles(ca, plain, true, false, "", &err), KL_OK);
    ck_assert_int_eq(can_roles(ca, other_ca, false, false, "", &err), KL_OK);
    ck_assert_int_eq(can_roles(ca, plain, false, true, "other", &err), KL_OK);
    ck_assert_int_eq(can_roles(ca, foreign, false, true, "shop", &err), KL_PERMISSION_DENIED);
    ck_assert_str_eq(err.detail, "tenant");
    ck_assert_int_eq(can_roles(holder, plain, false, true, "shop", &err), KL_PERMISSION_DENIED);
    ck_assert_str_eq(err.detail, "role:administrator");
    ck_assert_int_eq(can_roles(ca, plain, true, true, "shop", &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "roles");
    ck_assert_int_eq(can_roles(ca, plain, false, true, "", &err), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(can_roles(ca, plain, false, false, "shop", &err), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(can_roles(ca, plain, true, false, "shop", &err), KL_INVALID_ARGUMENT);

    pfree(holder);
    pfree(foreign);
    pfree(peer_da);
    pfree(other_da);
    pfree(other_ca);
    pfree(plain);
    pfree(da);
    pfree(ca);
}
END_TEST

/* ---- malformed grants ---- */

START_TEST(malformed_grants)
{
    static const char *const dup[] = {"a", "b", "a", NULL}, *const star_and[] = {"a", "*", NULL};
    static const char *const bad_key[] = {"ok", "secret/value", NULL}, *const empty_key[] = {"", NULL};
    static const char *const one[] = {"a", NULL};
    static const char *big[KL_AUTHZ_LIST_MAX + 2];
    static char names[KL_AUTHZ_LIST_MAX + 1][16];
    for (int i = 0; i <= KL_AUTHZ_LIST_MAX; i++) {
        snprintf(names[i], sizeof names[i], "k%d", i);
        big[i] = names[i];
    }
    big[KL_AUTHZ_LIST_MAX + 1] = NULL; /* 65 entries */
    char longp[KL_NAME_LEN_MAX + 2];
    memset(longp, 'q', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';

    const struct {
        Keyload__V1__Grant g;
        const char *detail;
    } t[] = {
        {grant("shop", KEYLOAD__V1__PERMISSION__PERMISSION_UNSPECIFIED, "q", NULL, NULL), "grant.permission"},
        {grant("shop", (Keyload__V1__Permission)99, "q", NULL, NULL), "grant.permission"},
        {grant("", PUBLISH, "q", NULL, NULL), "grant.database"},
        {grant("sh/op", PUBLISH, "q", NULL, NULL), "grant.database"},
        {grant("shop", PUBLISH, "", NULL, NULL), "grant.queue_pattern"},
        {grant("shop", PUBLISH, "o*x", NULL, NULL), "grant.queue_pattern"},
        {grant("shop", PUBLISH, "**", NULL, NULL), "grant.queue_pattern"},
        {grant("shop", PUBLISH, "a b", NULL, NULL), "grant.queue_pattern"},
        {grant("shop", PUBLISH, longp, NULL, NULL), "grant.queue_pattern"},
        {grant("shop", PUBLISH, "q", dup, NULL), "grant.fields"},
        {grant("shop", PUBLISH, "q", star_and, NULL), "grant.fields"},
        {grant("shop", PUBLISH, "q", bad_key, NULL), "grant.fields"},
        {grant("shop", PUBLISH, "q", empty_key, NULL), "grant.fields"},
        {grant("shop", PUBLISH, "q", big, NULL), "grant.fields"},
        {grant("shop", CONSUME, "q", NULL, dup), "grant.headers"},
        {grant("shop", CONSUME, "q", NULL, star_and), "grant.headers"},
        {grant("shop", CONSUME, "q", NULL, bad_key), "grant.headers"},
        {grant("shop", CONSUME, "q", NULL, big), "grant.headers"},
        {grant("shop", ACK, "q", one, NULL), "grant.fields"},
        {grant("shop", ACK, "q", NULL, one), "grant.headers"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        kl_err err;
        kl_err_clear(&err);
        ck_assert_msg(kl_authz_validate_grant(&t[i].g, &err) == KL_INVALID_ARGUMENT, "case %zu accepted", i);
        ck_assert_msg(strcmp(err.detail, t[i].detail) == 0, "case %zu: detail %s, want %s", i, err.detail,
                      t[i].detail);
        assert_lacks(err.message, "secret/value");
        /* And apply_grant refuses it without touching the record. */
        Keyload__V1__CatalogPrincipal *p = principal("acme");
        bool changed = true;
        ck_assert_int_eq(kl_authz_apply_grant(p, &t[i].g, &changed, &err), KL_INVALID_ARGUMENT);
        ck_assert(!changed);
        ck_assert_uint_eq(p->policy_epoch, 0);
        ck_assert_uint_eq(p->n_grants, 0);
        pfree(p);
    }
    kl_err err;
    ck_assert_int_eq(kl_authz_validate_grant(NULL, &err), KL_INVALID_ARGUMENT);
    /* At the limits: fine. */
    big[KL_AUTHZ_LIST_MAX] = NULL; /* 64 entries */
    static const char *const star[] = {"*", NULL};
    Keyload__V1__Grant ok = grant("shop", QUERY, "*", big, star);
    ck_assert_int_eq(kl_authz_validate_grant(&ok, &err), KL_OK);
    ok = grant("shop", ACK, "orders.*", NULL, NULL);
    ck_assert_int_eq(kl_authz_validate_grant(&ok, &err), KL_OK);
}
END_TEST

/* ---- policy epochs ---- */

static Keyload__V1__CatalogPrincipal *roundtrip(Keyload__V1__CatalogPrincipal *p)
{
    size_t n = keyload__v1__catalog_principal__get_packed_size(p);
    uint8_t *buf = malloc(n ? n : 1);
    keyload__v1__catalog_principal__pack(p, buf);
    Keyload__V1__CatalogPrincipal *q = keyload__v1__catalog_principal__unpack(NULL, n, buf);
    free(buf);
    ck_assert_ptr_nonnull(q);
    pfree(p);
    return q;
}

START_TEST(policy_epoch_bumps)
{
    static const char *const ab[] = {"b", "a", NULL}, *const ba[] = {"a", "b", NULL}, *const c[] = {"c", NULL};
    Keyload__V1__CatalogPrincipal *p = principal("acme");
    Keyload__V1__Grant g = grant("shop", PUBLISH, "orders.*", ab, NULL);
    bool changed;
    kl_err err;
    uint64_t e = 0;
#define EXPECT(call, want_changed)                                                                          \
    do {                                                                                                    \
        kl_code rc_ = (call);                                                                               \
        ck_assert_msg(rc_ == KL_OK, "%s: %s", #call, err.message);                                         \
        ck_assert_int_eq(changed, want_changed);                                                            \
        e += (want_changed) ? 1 : 0;                                                                        \
        ck_assert_uint_eq(p->policy_epoch, e);                                                              \
    } while (0)

    EXPECT(kl_authz_apply_grant(p, &g, &changed, &err), true);
    ck_assert_str_eq(p->grants[0]->fields[0], "a"); /* stored sorted */
    EXPECT(kl_authz_apply_grant(p, &g, &changed, &err), false); /* identical */
    g = grant("shop", PUBLISH, "orders.*", ba, NULL);
    EXPECT(kl_authz_apply_grant(p, &g, &changed, &err), false); /* same set, other order */
    g = grant("shop", PUBLISH, "orders.*", c, NULL);
    EXPECT(kl_authz_apply_grant(p, &g, &changed, &err), true); /* lists replaced */
    ck_assert_uint_eq(p->n_grants, 1);
    ck_assert_uint_eq(p->grants[0]->n_fields, 1);
    g = grant("shop", PUBLISH, "orders.*", c, c);
    EXPECT(kl_authz_apply_grant(p, &g, &changed, &err), true); /* headers too */
    g = grant("shop", CONSUME, "orders.*", NULL, NULL);
    EXPECT(kl_authz_apply_grant(p, &g, &changed, &err), true); /* a second grant */
    g = grant("other", CONSUME, "orders.*", NULL, NULL);
    EXPECT(kl_authz_apply_grant(p, &g, &changed, &err), true); /* a third */
    ck_assert_uint_eq(p->n_grants, 3);
    p = roundtrip(p); /* the record is a well-formed message after edits */
    EXPECT(kl_authz_revoke(p, "shop", QUERY, "orders.*", &changed, &err), false);    /* absent */
    EXPECT(kl_authz_revoke(p, "shop", CONSUME, "orders", &changed, &err), false);    /* other pattern */
    EXPECT(kl_authz_revoke(p, "shop", CONSUME, "orders.*", &changed, &err), true);
    ck_assert_uint_eq(p->n_grants, 2);
    ck_assert_str_eq(p->grants[1]->database, "other"); /* order of the rest kept */
    EXPECT(kl_authz_revoke(p, "shop", CONSUME, "orders.*", &changed, &err), false); /* again: no-op */
    ck_assert_int_eq(kl_authz_revoke(p, "shop", CONSUME, "bad*pattern", &changed, &err), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_authz_revoke(p, "shop", 0, "orders.*", &changed, &err), KL_INVALID_ARGUMENT);
    ck_assert_uint_eq(p->policy_epoch, e);

    /* Roles. */
    kl_authz_roles none = {0}, cluster = {.cluster_admin = true};
    kl_authz_roles dba = {.database_admin = true, .database = "shop"};
    kl_authz_roles dbb = {.database_admin = true, .database = "other"};
    EXPECT(kl_authz_set_roles(p, &none, &changed, &err), false);
    EXPECT(kl_authz_set_roles(p, &cluster, &changed, &err), true);
    EXPECT(kl_authz_set_roles(p, &cluster, &changed, &err), false);
    EXPECT(kl_authz_set_roles(p, &dba, &changed, &err), true);
    ck_assert_str_eq(p->database, "shop");
    EXPECT(kl_authz_set_roles(p, &dba, &changed, &err), false);
    EXPECT(kl_authz_set_roles(p, &dbb, &changed, &err), true); /* another database */
    p = roundtrip(p);
    EXPECT(kl_authz_set_roles(p, &none, &changed, &err), true);
    ck_assert_str_eq(p->database, "");
    kl_authz_roles both = {.cluster_admin = true, .database_admin = true, .database = "shop"};
    ck_assert_int_eq(kl_authz_set_roles(p, &both, &changed, &err), KL_INVALID_ARGUMENT);
    ck_assert(!changed);
    ck_assert_uint_eq(p->policy_epoch, e);

    /* An epoch that cannot grow refuses the change and leaves the record alone. */
    p->policy_epoch = UINT64_MAX;
    g = grant("shop", QUERY, "*", NULL, NULL);
    ck_assert_int_eq(kl_authz_apply_grant(p, &g, &changed, &err), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(err.detail, "policy_epoch");
    ck_assert_uint_eq(p->n_grants, 2);
    /* Revoke, then grant again: the epoch moved twice (a replay under the old one is stale). */
    p->policy_epoch = 10;
    g = grant("other", CONSUME, "orders.*", NULL, NULL);
    ck_assert_int_eq(kl_authz_revoke(p, "other", CONSUME, "orders.*", &changed, &err), KL_OK);
    ck_assert_int_eq(kl_authz_apply_grant(p, &g, &changed, &err), KL_OK);
    ck_assert_uint_eq(p->policy_epoch, 12);
#undef EXPECT
    pfree(p);

    /* A record built with INIT (static empty strings) can be edited and freed too. */
    Keyload__V1__CatalogPrincipal *q = malloc(sizeof *q);
    keyload__v1__catalog_principal__init(q);
    ck_assert_int_eq(kl_authz_set_roles(q, &dba, &changed, &err), KL_OK);
    ck_assert_int_eq(kl_authz_set_roles(q, &none, &changed, &err), KL_OK);
    g = grant("shop", QUERY, "*", c, NULL);
    ck_assert_int_eq(kl_authz_apply_grant(q, &g, &changed, &err), KL_OK);
    ck_assert_uint_eq(q->policy_epoch, 3);
    pfree(q);
}
END_TEST

/* Every refusal above, gathered: none carries a value, header value or body passed as
 * data, only names. */
START_TEST(errors_never_carry_values)
{
    static const char *const gf[] = {"total", NULL};
    static const char *const f_bad[] = {"total", "pan", NULL}, *const h_bad[] = {"cookie", NULL};
    Keyload__V1__CatalogPrincipal *p = principal("acme");
    give(p, "shop", PUBLISH, "orders", gf, NULL);
    give(p, "shop", CONSUME, "orders", gf, NULL);
    for (int i = 0; i < 2; i++) {
        Keyload__V1__Permission perm = i ? CONSUME : PUBLISH;
        const char *name = kl_authz_permission_name(perm);
        char d_field[64], d_header[64], d_grant[64];
        snprintf(d_field, sizeof d_field, "field_grant:%s", name);
        snprintf(d_header, sizeof d_header, "header_grant:%s", name);
        snprintf(d_grant, sizeof d_grant, "grant:%s", name);
        kl_authz_request r = req(perm, "orders");
        Keyload__V1__EnqueueMessage m = message(f_bad, NULL);
        r.message = &m;
        assert_no_values(denied(p, false, &r, KL_PERMISSION_DENIED, d_field));
        m = message(gf, h_bad);
        assert_no_values(denied(p, false, &r, KL_PERMISSION_DENIED, d_header));
        r.queue = "elsewhere";
        assert_no_values(denied(p, false, &r, KL_PERMISSION_DENIED, d_grant));
        r.tenant = "globex";
        assert_no_values(denied(p, false, &r, KL_PERMISSION_DENIED, "tenant"));
    }
    /* Malformed grant lists: the offending entry is not echoed. */
    static const char *const bad[] = {"SECRET=hunter2", NULL};
    Keyload__V1__Grant g = grant("shop", PUBLISH, "orders", bad, NULL);
    kl_err err;
    ck_assert_int_eq(kl_authz_validate_grant(&g, &err), KL_INVALID_ARGUMENT);
    assert_no_values(err.message);
    assert_lacks(err.message, "hunter2");
    pfree(p);
}
END_TEST

Suite *suite_authz(void)
{
    Suite *s = suite_create("authz");
    TCase *t = tcase_create("authz");
    tcase_add_test(t, permission_names_and_method_mapping);
    tcase_add_test(t, method_matrix);
    tcase_add_test(t, permission_matrix);
    tcase_add_test(t, pattern_syntax);
    tcase_add_test(t, pattern_matching);
    tcase_add_test(t, pattern_covering);
    tcase_add_test(t, field_and_header_grants_on_publish);
    tcase_add_test(t, field_lists_empty_means_none_star_means_all);
    tcase_add_test(t, field_and_header_grants_on_consume);
    tcase_add_test(t, wrong_tenant);
    tcase_add_test(t, admin_roles);
    tcase_add_test(t, admin_off_forces_the_grant_path);
    tcase_add_test(t, malformed_requests);
    tcase_add_test(t, can_grant_rules);
    tcase_add_test(t, malformed_grants);
    tcase_add_test(t, policy_epoch_bumps);
    tcase_add_test(t, errors_never_carry_values);
    suite_add_tcase(s, t);
    return s;
}
