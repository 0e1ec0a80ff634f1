/* Principal management on the client side (KL-3 item 7): permission and role names, key
 * lists, queue patterns, the catalog mutation builders and how encoding stamps the client's
 * tenant and database into them, their JSON, and the CLI's argument parsing of `principal`
 * and `database create|limits` (client/cli, linked into this binary without main.c).
 * No network. Runs under ASan+UBSan with leak detection. */
#include "client/cli/cli.h"
#include "client/keyload.h"

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUID_A "0f8fad5b-d9cb-469f-a165-70867728950e"

static const uint8_t PK[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                               17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};

/* The one mutation of b encoded for database `db`, decoded (free with
 * keyload__v1__batch_request__free_unpacked). */
static Keyload__V1__BatchRequest *encode_one(const kl_batch *b, const char *db)
{
    uint8_t *buf;
    size_t len;
    kl_err err;
    ck_assert_int_eq(kl_batch_encode(b, db, &buf, &len, &err), KL_OK);
    Keyload__V1__BatchRequest *req = keyload__v1__batch_request__unpack(NULL, len, buf);
    free(buf);
    ck_assert_ptr_nonnull(req);
    ck_assert_uint_eq(req->n_mutations, 1);
    return req;
}

/* ------------------------------------------------------------ names */

START_TEST(test_permission_names)
{
    static const char *const names[] = {"QueuePublish", "QueueConsume", "QueueAck",
                                        "QueueInspect", "Query"};
    static const Keyload__V1__Permission want[] = {
        KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, KEYLOAD__V1__PERMISSION__QUEUE_CONSUME,
        KEYLOAD__V1__PERMISSION__QUEUE_ACK, KEYLOAD__V1__PERMISSION__QUEUE_INSPECT,
        KEYLOAD__V1__PERMISSION__QUERY};
    for (size_t i = 0; i < 5; i++) {
        Keyload__V1__Permission p = 0;
        ck_assert_int_eq(kl_permission_parse(names[i], &p, NULL), KL_OK);
        ck_assert_int_eq(p, want[i]);
        ck_assert_str_eq(kl_permission_name(p), names[i]);
    }
    static const char *const bad[] = {"", "queuepublish", "QUEUE_PUBLISH", "QueuePublish ",
                                      "Publish", "PERMISSION_UNSPECIFIED", "1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        Keyload__V1__Permission p = KEYLOAD__V1__PERMISSION__QUERY;
        kl_err err;
        ck_assert_int_eq(kl_permission_parse(bad[i], &p, &err), KL_INVALID_ARGUMENT);
        ck_assert_str_eq(err.detail, "permission");
        ck_assert_ptr_nonnull(strstr(err.message, "QueueInspect"));
        ck_assert_int_eq(p, KEYLOAD__V1__PERMISSION__QUERY); /* untouched */
    }
    Keyload__V1__Permission p;
    ck_assert_int_eq(kl_permission_parse(NULL, &p, NULL), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(kl_permission_name(KEYLOAD__V1__PERMISSION__PERMISSION_UNSPECIFIED), "unknown");
    ck_assert_str_eq(kl_permission_name((Keyload__V1__Permission)99), "unknown");
}
END_TEST

START_TEST(test_role_names)
{
    kl_role r = KL_ROLE_NONE;
    ck_assert_int_eq(kl_role_parse("database-admin", &r, NULL), KL_OK);
    ck_assert_int_eq(r, KL_ROLE_DATABASE_ADMIN);
    ck_assert_int_eq(kl_role_parse("cluster-admin", &r, NULL), KL_OK);
    ck_assert_int_eq(r, KL_ROLE_CLUSTER_ADMIN);
    ck_assert_int_eq(kl_role_parse("none", &r, NULL), KL_OK);
    ck_assert_int_eq(r, KL_ROLE_NONE);
    kl_err err;
    ck_assert_int_eq(kl_role_parse("admin", &r, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "role");
    ck_assert_int_eq(kl_role_parse("cluster_admin", &r, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(kl_role_name(KL_ROLE_CLUSTER_ADMIN), "cluster-admin");
    ck_assert_str_eq(kl_role_name((kl_role)7), "unknown");
}
END_TEST

/* ------------------------------------------------------------ key lists and patterns */

START_TEST(test_key_list_parse)
{
    kl_key_list l;
    ck_assert_int_eq(kl_key_list_parse("fields", "b,a,c.d", &l, NULL), KL_OK);
    ck_assert_uint_eq(l.n, 3);
    ck_assert_str_eq(l.keys[0], "a"); /* sorted bytewise, as the catalog keeps them */
    ck_assert_str_eq(l.keys[1], "b");
    ck_assert_str_eq(l.keys[2], "c.d");
    kl_key_list_clear(&l);
    ck_assert_uint_eq(l.n, 0);
    ck_assert_ptr_null(l.keys);
    ck_assert_int_eq(kl_key_list_parse("fields", "", &l, NULL), KL_OK); /* explicitly none */
    ck_assert_uint_eq(l.n, 0);
    ck_assert_int_eq(kl_key_list_parse("headers", "*", &l, NULL), KL_OK);
    ck_assert_uint_eq(l.n, 1);
    ck_assert_str_eq(l.keys[0], "*");
    kl_key_list_clear(&l);
    ck_assert_int_eq(kl_key_list_parse("fields", "tenant:id,x-y_z", &l, NULL), KL_OK);
    ck_assert_uint_eq(l.n, 2);
    kl_key_list_clear(&l);
    kl_key_list_clear(NULL);

    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"a,,b", "entry 2 is empty"}, {",a", "entry 1 is empty"}, {"a,", "entry 2 is empty"},
        {",", "entry 1 is empty"},    {"a,a", "'a' twice"},       {"b,a,b", "'b' twice"},
        {"*,a", "only entry"},        {"a,*", "only entry"},      {"*,*", "only entry"},
        {"a b", "entry 1"},           {"a/b", "entry 1"},         {"a,\xff", "entry 2"},
        {"a*", "entry 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kl_err err;
        l.n = 99;
        ck_assert_msg(kl_key_list_parse("fields", bad[i].text, &l, &err) == KL_INVALID_ARGUMENT,
                      "accepted %s", bad[i].text);
        ck_assert_str_eq(err.detail, "fields");
        ck_assert_msg(strstr(err.message, bad[i].needle) != NULL, "%s: %s", bad[i].text,
                      err.message);
        ck_assert_ptr_nonnull(strstr(err.message, "fields"));
        ck_assert_uint_eq(l.n, 0);
        ck_assert_ptr_null(l.keys);
    }
    /* At most 64 keys; 129-byte keys are refused. */
    char text[65 * 4 + 1] = "";
    for (int i = 0; i < 65; i++)
        sprintf(text + strlen(text), "%sk%02d", i ? "," : "", i);
    kl_err err;
    ck_assert_int_eq(kl_key_list_parse("fields", text, &l, &err), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.message, "64"));
    text[strlen(text) - 4] = '\0'; /* 64 keys */
    ck_assert_int_eq(kl_key_list_parse("fields", text, &l, NULL), KL_OK);
    ck_assert_uint_eq(l.n, 64);
    kl_key_list_clear(&l);
    char longkey[130];
    memset(longkey, 'k', 129);
    longkey[129] = '\0';
    ck_assert_int_eq(kl_key_list_parse("fields", longkey, &l, &err), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_key_list_parse("fields", NULL, &l, &err), KL_INVALID_ARGUMENT);
}
END_TEST

START_TEST(test_queue_patterns)
{
    static const char *const good[] = {"orders", "orders.*", "orders*", "*", "a:b-c_d.e*"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        ck_assert_msg(kl_queue_pattern_check("queue_pattern", good[i], NULL) == KL_OK, "%s",
                      good[i]);
    char long_pattern[131];
    memset(long_pattern, 'q', 129);
    long_pattern[129] = '\0';
    const char *bad[] = {"", "**", "a*b", "*a", "a/b", "a b", "a**", long_pattern, NULL};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kl_err err;
        ck_assert_msg(kl_queue_pattern_check("queue_pattern", bad[i], &err) == KL_INVALID_ARGUMENT,
                      "accepted %s", bad[i] ? bad[i] : "NULL");
        ck_assert_str_eq(err.detail, "queue_pattern");
    }
    memset(long_pattern, 'q', 127);
    strcpy(long_pattern + 127, "*"); /* 128 bytes with the star */
    ck_assert_int_eq(kl_queue_pattern_check("queue_pattern", long_pattern, NULL), KL_OK);
}
END_TEST

/* ------------------------------------------------------------ builders and encoding */

START_TEST(test_create_principal_stamps_tenant)
{
    static const kl_role roles[] = {KL_ROLE_NONE, KL_ROLE_DATABASE_ADMIN, KL_ROLE_CLUSTER_ADMIN};
    for (size_t i = 0; i < 3; i++) {
        kl_batch *b;
        ck_assert_int_eq(kl_batch_new(GUID_A, &b, NULL), KL_OK);
        ck_assert_int_eq(kl_batch_create_principal(b, "alice", PK, roles[i], NULL), KL_OK);
        kl_batch_route route;
        ck_assert_int_eq(kl_batch_kind(b, &route, NULL), KL_OK);
        ck_assert_int_eq(route, KL_ROUTE_CATALOG);
        Keyload__V1__BatchRequest *req = encode_one(b, "acme/shop");
        const Keyload__V1__CreatePrincipal *cp = req->mutations[0]->create_principal;
        ck_assert_int_eq(req->mutations[0]->kind_case, KEYLOAD__V1__MUTATION__KIND_CREATE_PRINCIPAL);
        ck_assert_str_eq(cp->tenant, "acme");
        ck_assert_str_eq(cp->principal_id, "alice");
        ck_assert_uint_eq(cp->public_key.len, 32);
        ck_assert_mem_eq(cp->public_key.data, PK, 32);
        ck_assert_int_eq(cp->cluster_admin, roles[i] == KL_ROLE_CLUSTER_ADMIN);
        ck_assert_int_eq(cp->database_admin, roles[i] == KL_ROLE_DATABASE_ADMIN);
        ck_assert_str_eq(cp->database, roles[i] == KL_ROLE_DATABASE_ADMIN ? "shop" : "");
        keyload__v1__batch_request__free_unpacked(req, NULL);
        kl_batch_free(b);
    }
    kl_batch *b;
    kl_err err;
    ck_assert_int_eq(kl_batch_new(GUID_A, &b, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_create_principal(b, "", PK, KL_ROLE_NONE, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "principal_id");
    ck_assert_int_eq(kl_batch_create_principal(b, "a/b", PK, KL_ROLE_NONE, &err), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_batch_create_principal(b, "alice", NULL, KL_ROLE_NONE, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "public_key");
    ck_assert_int_eq(kl_batch_create_principal(b, "alice", PK, (kl_role)5, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "role");
    ck_assert_uint_eq(kl_batch_count(b), 0); /* refused calls leave the batch unchanged */
    /* A catalog change never shares its batch. */
    ck_assert_int_eq(kl_batch_create_principal(b, "alice", PK, KL_ROLE_NONE, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_set_principal_key(b, "alice", PK, NULL), KL_OK);
    kl_batch_route route;
    ck_assert_int_eq(kl_batch_kind(b, &route, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "mutations");
    kl_batch_free(b);
}
END_TEST

START_TEST(test_grant_sorted_and_stamped)
{
    const char *fields[] = {"region", "amount"};
    const char *headers[] = {"trace"};
    kl_grant g = {.permission = KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, .queue_pattern = "orders.*",
                  .fields = fields, .n_fields = 2, .headers = headers, .n_headers = 1};
    kl_batch *b;
    ck_assert_int_eq(kl_batch_new(GUID_A, &b, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_grant(b, "bob", &g, NULL), KL_OK);
    Keyload__V1__BatchRequest *req = encode_one(b, "acme/shop");
    ck_assert_int_eq(req->mutations[0]->kind_case, KEYLOAD__V1__MUTATION__KIND_GRANT_PERMISSION);
    const Keyload__V1__GrantPermission *gp = req->mutations[0]->grant_permission;
    ck_assert_str_eq(gp->principal_id, "bob");
    ck_assert_str_eq(gp->grant->database, "shop");
    ck_assert_int_eq(gp->grant->permission, KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH);
    ck_assert_str_eq(gp->grant->queue_pattern, "orders.*");
    ck_assert_uint_eq(gp->grant->n_fields, 2);
    ck_assert_str_eq(gp->grant->fields[0], "amount");
    ck_assert_str_eq(gp->grant->fields[1], "region");
    ck_assert_uint_eq(gp->grant->n_headers, 1);
    ck_assert_str_eq(gp->grant->headers[0], "trace");
    keyload__v1__batch_request__free_unpacked(req, NULL);

    /* The same grant in another order encodes to the same bytes (replays match). */
    const char *swapped[] = {"amount", "region"};
    kl_grant g2 = g;
    g2.fields = swapped;
    kl_batch *b2;
    ck_assert_int_eq(kl_batch_new(GUID_A, &b2, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_grant(b2, "bob", &g2, NULL), KL_OK);
    /* A rebuilt batch carries its own first-sent time unless given the original's. */
    ck_assert_int_eq(kl_batch_set_first_sent_unix_ms(b2, kl_batch_first_sent_unix_ms(b), NULL), KL_OK);
    uint8_t *x, *y;
    size_t xl, yl;
    ck_assert_int_eq(kl_batch_encode(b, "acme/shop", &x, &xl, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_encode(b2, "acme/shop", &y, &yl, NULL), KL_OK);
    ck_assert_uint_eq(xl, yl);
    ck_assert_mem_eq(x, y, xl);
    free(x);
    free(y);
    kl_batch_free(b2);
    kl_batch_free(b);

    /* Refusals name the field; the batch stays unchanged. */
    ck_assert_int_eq(kl_batch_new(GUID_A, &b, NULL), KL_OK);
    kl_err err;
    kl_grant bad = g;
    bad.permission = KEYLOAD__V1__PERMISSION__PERMISSION_UNSPECIFIED;
    ck_assert_int_eq(kl_batch_grant(b, "bob", &bad, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "permission");
    bad = g;
    bad.queue_pattern = "a*b";
    ck_assert_int_eq(kl_batch_grant(b, "bob", &bad, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "queue_pattern");
    bad = g;
    bad.permission = KEYLOAD__V1__PERMISSION__QUEUE_ACK;
    ck_assert_int_eq(kl_batch_grant(b, "bob", &bad, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "fields");
    bad.n_fields = 0;
    ck_assert_int_eq(kl_batch_grant(b, "bob", &bad, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "headers");
    const char *dup[] = {"a", "a"};
    bad = g;
    bad.headers = dup;
    bad.n_headers = 2;
    ck_assert_int_eq(kl_batch_grant(b, "bob", &bad, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "headers");
    ck_assert_int_eq(kl_batch_grant(b, "bob", NULL, &err), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_batch_grant(b, "", &g, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "principal_id");
    ck_assert_uint_eq(kl_batch_count(b), 0);
    /* QueueAck without lists, and a grant with no lists at all, are fine. */
    kl_grant ack = {.permission = KEYLOAD__V1__PERMISSION__QUEUE_ACK, .queue_pattern = "*"};
    ck_assert_int_eq(kl_batch_grant(b, "bob", &ack, NULL), KL_OK);
    kl_batch_free(b);
}
END_TEST

START_TEST(test_revoke_key_and_limits_stamped)
{
    kl_batch *b;
    ck_assert_int_eq(kl_batch_new(GUID_A, &b, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_revoke(b, "bob", KEYLOAD__V1__PERMISSION__QUERY, "q", NULL), KL_OK);
    Keyload__V1__BatchRequest *req = encode_one(b, "acme/shop");
    const Keyload__V1__RevokePermission *rp = req->mutations[0]->revoke_permission;
    ck_assert_str_eq(rp->principal_id, "bob");
    ck_assert_str_eq(rp->database, "shop");
    ck_assert_int_eq(rp->permission, KEYLOAD__V1__PERMISSION__QUERY);
    ck_assert_str_eq(rp->queue_pattern, "q");
    keyload__v1__batch_request__free_unpacked(req, NULL);
    kl_batch_free(b);

    kl_err err;
    ck_assert_int_eq(kl_batch_new(GUID_A, &b, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_revoke(b, "bob", (Keyload__V1__Permission)9, "q", &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "permission");
    ck_assert_int_eq(kl_batch_revoke(b, "bob", KEYLOAD__V1__PERMISSION__QUERY, "", &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "queue_pattern");
    ck_assert_int_eq(kl_batch_set_principal_key(b, "bob", PK, NULL), KL_OK);
    kl_batch_route route;
    ck_assert_int_eq(kl_batch_kind(b, &route, NULL), KL_OK);
    ck_assert_int_eq(route, KL_ROUTE_CATALOG);
    req = encode_one(b, "acme/shop");
    ck_assert_str_eq(req->mutations[0]->set_principal_key->principal_id, "bob");
    ck_assert_mem_eq(req->mutations[0]->set_principal_key->public_key.data, PK, 32);
    keyload__v1__batch_request__free_unpacked(req, NULL);
    kl_batch_free(b);

    /* Limits: all four, the nullable one absent (null) or present. */
    kl_database_limits lim = {.max_scan_records = 100, .max_batch_bytes = 2000};
    ck_assert_int_eq(kl_batch_new(GUID_A, &b, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_set_database_limits(b, &lim, NULL), KL_OK);
    req = encode_one(b, "acme/shop");
    const Keyload__V1__SetDatabaseLimits *sl = req->mutations[0]->set_database_limits;
    ck_assert_str_eq(sl->tenant, "acme");
    ck_assert_str_eq(sl->database, "shop");
    ck_assert_uint_eq(sl->limits->max_scan_records, 100);
    ck_assert_uint_eq(sl->limits->max_batch_bytes, 2000);
    ck_assert_uint_eq(sl->limits->max_query_read_bytes, 0);
    ck_assert_ptr_null(sl->limits->max_queue_transfer_accept_attempts);
    keyload__v1__batch_request__free_unpacked(req, NULL);
    kl_batch_free(b);
    lim.has_max_queue_transfer_accept_attempts = true;
    lim.max_queue_transfer_accept_attempts = 7;
    ck_assert_int_eq(kl_batch_new(GUID_A, &b, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_set_database_limits(b, &lim, NULL), KL_OK);
    req = encode_one(b, NULL); /* default/default */
    sl = req->mutations[0]->set_database_limits;
    ck_assert_str_eq(sl->tenant, "default");
    ck_assert_ptr_nonnull(sl->limits->max_queue_transfer_accept_attempts);
    ck_assert_uint_eq(sl->limits->max_queue_transfer_accept_attempts->value, 7);
    keyload__v1__batch_request__free_unpacked(req, NULL);
    lim.max_queue_transfer_accept_attempts = 0;
    ck_assert_int_eq(kl_batch_set_database_limits(b, &lim, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "max_queue_transfer_accept_attempts");
    ck_assert_int_eq(kl_batch_create_database(b, "t/d", &lim, &err), KL_INVALID_ARGUMENT);
    ck_assert_uint_eq(kl_batch_count(b), 1);
    kl_batch_free(b);
    /* database create carries the nullable limit too. */
    lim.max_queue_transfer_accept_attempts = 3;
    ck_assert_int_eq(kl_batch_new(GUID_A, &b, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_create_database(b, "t/d", &lim, NULL), KL_OK);
    req = encode_one(b, NULL);
    ck_assert_uint_eq(req->mutations[0]->create_database->limits->max_queue_transfer_accept_attempts->value, 3);
    keyload__v1__batch_request__free_unpacked(req, NULL);
    kl_batch_free(b);
}
END_TEST

START_TEST(test_client_calls_need_command_id)
{
    kl_client *c;
    ck_assert_int_eq(kl_client_open("deploy/local-1.json", "acme/shop", 1000, &c, NULL), KL_OK);
    kl_err err;
    kl_principal_result res;
    kl_receipt *r = (kl_receipt *)1;
    ck_assert_int_eq(kl_client_create_principal(c, NULL, "alice", PK, KL_ROLE_NONE, &res, &r, &err),
                     KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "command_id");
    ck_assert_int_eq(kl_client_set_principal_key(c, "", "alice", PK, &res, NULL, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "command_id");
    /* Bad arguments are refused before anything is sent. */
    ck_assert_int_eq(kl_client_revoke(c, GUID_A, "alice", KEYLOAD__V1__PERMISSION__QUERY, "a*b",
                                      &res, NULL, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "queue_pattern");
    kl_limits_result lr;
    kl_database_limits lim = {.has_max_queue_transfer_accept_attempts = true};
    ck_assert_int_eq(kl_client_set_database_limits(c, GUID_A, &lim, &lr, NULL, &err), KL_INVALID_ARGUMENT);
    Keyload__V1__ShowPrincipalAnswer *a = (Keyload__V1__ShowPrincipalAnswer *)1;
    ck_assert_int_eq(kl_client_show_principal(c, "", &a, &err), KL_INVALID_ARGUMENT);
    ck_assert_ptr_null(a);
    kl_client_close(c);
    char id1[KL_COMMAND_ID_TEXT_LEN + 1], id2[KL_COMMAND_ID_TEXT_LEN + 1];
    kl_command_id_new(id1);
    kl_command_id_new(id2);
    ck_assert_uint_eq(strlen(id1), 36);
    ck_assert_str_ne(id1, id2);
    kl_batch *b;
    ck_assert_int_eq(kl_batch_new(id1, &b, NULL), KL_OK);
    ck_assert_str_eq(kl_batch_command_id(b), id1);
    kl_batch_free(b);
}
END_TEST

/* ------------------------------------------------------------ JSON */

START_TEST(test_json_principal_results)
{
    uint8_t kid[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    Keyload__V1__PrincipalChanged pc = KEYLOAD__V1__PRINCIPAL_CHANGED__INIT;
    pc.principal_id = "bob";
    pc.key_id.data = kid;
    pc.key_id.len = 8;
    pc.policy_epoch = 3;
    pc.changed = true;
    pc.catalog_version = 12;
    Keyload__V1__NullableU64 n = KEYLOAD__V1__NULLABLE_U64__INIT;
    n.value = 5;
    Keyload__V1__DatabaseLimits l = KEYLOAD__V1__DATABASE_LIMITS__INIT;
    l.max_batch_bytes = 4096;
    Keyload__V1__DatabaseLimitsSet ls = KEYLOAD__V1__DATABASE_LIMITS_SET__INIT;
    ls.limits = &l;
    ls.catalog_version = 13;
    Keyload__V1__MutationResult r1 = KEYLOAD__V1__MUTATION_RESULT__INIT, r2 = r1;
    r1.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_PRINCIPAL_CHANGED;
    r1.principal_changed = &pc;
    r2.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_DATABASE_LIMITS_SET;
    r2.database_limits_set = &ls;
    Keyload__V1__MutationResult *results[] = {&r1, &r2};
    uint8_t cmd[16] = {0x0f, 0x8f, 0xad, 0x5b, 0xd9, 0xcb, 0x46, 0x9f,
                       0xa1, 0x65, 0x70, 0x86, 0x77, 0x28, 0x95, 0x0e};
    Keyload__V1__BatchReceipt rc = KEYLOAD__V1__BATCH_RECEIPT__INIT;
    rc.command_id.data = cmd;
    rc.command_id.len = 16;
    rc.n_results = 2;
    rc.results = results;
    char *json = kl_receipt_to_json(&rc, 0);
    ck_assert_ptr_nonnull(json);
    ck_assert_ptr_nonnull(strstr(json, "{\"kind\":\"principal_changed\",\"principal_id\":\"bob\","
                                       "\"key_id\":\"AQIDBAUGBwg=\",\"policy_epoch\":3,"
                                       "\"changed\":true,\"catalog_version\":12}"));
    ck_assert_ptr_nonnull(strstr(json, "{\"kind\":\"database_limits_set\",\"limits\":{"
                                       "\"max_scan_records\":0,\"max_batch_bytes\":4096,"
                                       "\"max_query_read_bytes\":0,"
                                       "\"max_queue_transfer_accept_attempts\":null},"
                                       "\"catalog_version\":13}"));
    free(json);
    l.max_queue_transfer_accept_attempts = &n;
    json = kl_receipt_to_json(&rc, 0);
    ck_assert_ptr_nonnull(strstr(json, "\"max_queue_transfer_accept_attempts\":5}"));
    free(json);
}
END_TEST

START_TEST(test_json_show_principal)
{
    uint8_t kid[8] = {0};
    char *fields[] = {"amount", "region"};
    Keyload__V1__Grant g = KEYLOAD__V1__GRANT__INIT;
    g.database = "shop";
    g.permission = KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH;
    g.queue_pattern = "orders.*";
    g.n_fields = 2;
    g.fields = fields;
    Keyload__V1__Grant *grants[] = {&g};
    Keyload__V1__CatalogPrincipal p = KEYLOAD__V1__CATALOG_PRINCIPAL__INIT;
    p.principal_id = "bob";
    p.tenant = "acme";
    p.public_key.data = (uint8_t *)PK;
    p.public_key.len = 32;
    p.key_id.data = kid;
    p.key_id.len = 8;
    p.policy_epoch = 2;
    p.n_grants = 1;
    p.grants = grants;
    p.created_unix_ms = 1700000000000;
    p.version = 9;
    Keyload__V1__ShowPrincipalAnswer a = KEYLOAD__V1__SHOW_PRINCIPAL_ANSWER__INIT;
    a.principal = &p;
    a.catalog_version = 10;
    char *json = kl_principal_to_json(&a, 0);
    ck_assert_str_eq(json,
                     "{\"principal_id\":\"bob\",\"tenant\":\"acme\",\"role\":\"none\",\"database\":\"\","
                     "\"public_key\":\"AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=\","
                     "\"key_id\":\"AAAAAAAAAAA=\",\"policy_epoch\":2,\"grants\":[{\"database\":\"shop\","
                     "\"permission\":\"QueuePublish\",\"queue_pattern\":\"orders.*\","
                     "\"fields\":[\"amount\",\"region\"],\"headers\":[]}],"
                     "\"created_unix_ms\":1700000000000,\"version\":9,\"catalog_version\":10}");
    free(json);
    p.database_admin = true;
    p.database = "shop";
    json = kl_principal_to_json(&a, 0);
    ck_assert_ptr_nonnull(strstr(json, "\"role\":\"database-admin\",\"database\":\"shop\""));
    free(json);
}
END_TEST

/* ------------------------------------------------------------ CLI argument parsing */

static cli test_cli(void)
{
    cli c = {.cluster = "deploy/local-1.json", .database = "acme/shop", .timeout_ms = 1000};
    return c;
}

/* Parses `principal ARGS...` (a NULL-terminated list); returns the exit code. */
static int pparse(cli *c, cli_principal_args *o, const char *first, ...)
{
    char *argv[32];
    int argc = 0;
    va_list ap;
    va_start(ap, first);
    for (const char *s = first; s != NULL && argc < 31; s = va_arg(ap, const char *))
        argv[argc++] = (char *)s;
    va_end(ap);
    argv[argc] = NULL;
    c->last_usage[0] = '\0';
    return cli_principal_parse(c, argc, argv, o);
}

/* Expects a usage error whose message holds needle. */
#define USAGE_ERR(needle, ...)                                                                 \
    do {                                                                                       \
        cli c_ = test_cli();                                                                   \
        cli_principal_args o_;                                                                 \
        ck_assert_int_eq(pparse(&c_, &o_, __VA_ARGS__, (const char *)NULL), CLI_EXIT_USAGE);   \
        ck_assert_msg(strstr(c_.last_usage, needle) != NULL, "want '%s' in '%s'", needle,      \
                      c_.last_usage);                                                          \
    } while (0)

START_TEST(test_cli_principal_parse_ok)
{
    cli c = test_cli();
    cli_principal_args o;
    ck_assert_int_eq(pparse(&c, &o, "create", "alice", "--key-out", "/tmp/k", "--role",
                            "database-admin", NULL), CLI_EXIT_OK);
    ck_assert_int_eq(o.sub, CLI_PRINCIPAL_CREATE);
    ck_assert_str_eq(o.id, "alice");
    ck_assert_str_eq(o.key_out, "/tmp/k");
    ck_assert_ptr_null(o.key_in);
    ck_assert_int_eq(o.role, KL_ROLE_DATABASE_ADMIN);
    ck_assert_ptr_null(o.command_id);
    cli_principal_args_clear(&o);

    ck_assert_int_eq(pparse(&c, &o, "create", "--role=cluster-admin", "--key-in=/k", "root2",
                            "--command-id", GUID_A, NULL), CLI_EXIT_OK);
    ck_assert_int_eq(o.role, KL_ROLE_CLUSTER_ADMIN);
    ck_assert_str_eq(o.key_in, "/k");
    ck_assert_str_eq(o.id, "root2");
    ck_assert_str_eq(o.command_id, GUID_A);
    cli_principal_args_clear(&o);

    ck_assert_int_eq(pparse(&c, &o, "grant", "bob", "QueuePublish", "--queue", "orders.*",
                            "--fields", "region,amount", "--headers=trace", "--json", NULL),
                     CLI_EXIT_OK);
    ck_assert_int_eq(o.sub, CLI_PRINCIPAL_GRANT);
    ck_assert_str_eq(o.id, "bob");
    ck_assert_int_eq(o.permission, KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH);
    ck_assert_str_eq(o.queue, "orders.*");
    ck_assert_uint_eq(o.fields.n, 2);
    ck_assert_str_eq(o.fields.keys[0], "amount");
    ck_assert_str_eq(o.fields.keys[1], "region");
    ck_assert_uint_eq(o.headers.n, 1);
    ck_assert(c.json); /* global options are accepted after the subcommand */
    cli_principal_args_clear(&o);

    ck_assert_int_eq(pparse(&c, &o, "grant", "bob", "QueueAck", "--queue", "*", NULL), CLI_EXIT_OK);
    ck_assert_int_eq(o.permission, KEYLOAD__V1__PERMISSION__QUEUE_ACK);
    ck_assert_uint_eq(o.fields.n, 0);
    cli_principal_args_clear(&o);

    ck_assert_int_eq(pparse(&c, &o, "revoke", "bob", "Query", "--queue", "q", "--database",
                            "t/d", NULL), CLI_EXIT_OK);
    ck_assert_int_eq(o.sub, CLI_PRINCIPAL_REVOKE);
    ck_assert_int_eq(o.permission, KEYLOAD__V1__PERMISSION__QUERY);
    ck_assert_str_eq(c.database, "t/d");
    cli_principal_args_clear(&o);

    ck_assert_int_eq(pparse(&c, &o, "show", "bob", NULL), CLI_EXIT_OK);
    ck_assert_int_eq(o.sub, CLI_PRINCIPAL_SHOW);
    ck_assert_str_eq(o.id, "bob");
    cli_principal_args_clear(&o);

    ck_assert_int_eq(pparse(&c, &o, "rotate-key", "bob", "--key-out", "/tmp/n", NULL), CLI_EXIT_OK);
    ck_assert_int_eq(o.sub, CLI_PRINCIPAL_ROTATE_KEY);
    ck_assert_str_eq(o.key_out, "/tmp/n");
    cli_principal_args_clear(&o);

    ck_assert_int_eq(pparse(&c, &o, "show", "--", "-odd", NULL), CLI_EXIT_OK);
    ck_assert_str_eq(o.id, "-odd");
    cli_principal_args_clear(&o);
}
END_TEST

START_TEST(test_cli_principal_parse_usage_errors)
{
    USAGE_ERR("needs a subcommand", (const char *)NULL);
    USAGE_ERR("unknown principal subcommand 'delete'", "delete", "bob");
    USAGE_ERR("needs a NAME", "create", "--key-out", "/k");
    USAGE_ERR("needs --key-out", "create", "alice");
    USAGE_ERR("--key-out and --key-in", "create", "alice", "--key-out", "/a", "--key-in", "/b");
    USAGE_ERR("--role must be", "create", "alice", "--key-out", "/a", "--role", "admin");
    USAGE_ERR("--role needs a value", "create", "alice", "--key-out", "/a", "--role");
    USAGE_ERR("principal create takes no --queue", "create", "alice", "--key-out", "/a", "--queue", "q");
    USAGE_ERR("one argument too many", "create", "alice", "bob", "--key-out", "/a");
    USAGE_ERR("needs an ID and a PERMISSION", "grant", "bob", "--queue", "q");
    USAGE_ERR("PERMISSION 'publish'", "grant", "bob", "publish", "--queue", "q");
    USAGE_ERR("needs --queue", "grant", "bob", "QueuePublish");
    USAGE_ERR("--queue may hold '*' only once", "grant", "bob", "QueuePublish", "--queue", "a*b");
    USAGE_ERR("--queue is given twice", "grant", "bob", "QueuePublish", "--queue", "a", "--queue", "b");
    USAGE_ERR("--fields entry 2 is empty", "grant", "bob", "QueuePublish", "--queue", "q", "--fields", "a,,b");
    USAGE_ERR("--headers names 'h' twice", "grant", "bob", "QueuePublish", "--queue", "q", "--headers", "h,h");
    USAGE_ERR("--fields is given twice", "grant", "bob", "QueuePublish", "--queue", "q", "--fields", "a",
              "--fields", "b");
    USAGE_ERR("--fields: a QueueAck grant", "grant", "bob", "QueueAck", "--queue", "q", "--fields", "a");
    USAGE_ERR("--headers: a QueueAck grant", "grant", "bob", "QueueAck", "--queue", "q", "--headers", "");
    USAGE_ERR("principal revoke takes no --fields", "revoke", "bob", "Query", "--queue", "q", "--fields", "a");
    USAGE_ERR("unknown option --frob", "revoke", "bob", "Query", "--queue", "q", "--frob");
    USAGE_ERR("--command-id applies only", "show", "bob", "--command-id", GUID_A);
    USAGE_ERR("principal show takes no --key-out", "show", "bob", "--key-out", "/k");
    USAGE_ERR("needs an ID", "show");
    USAGE_ERR("needs --key-out", "rotate-key", "bob");
    USAGE_ERR("principal rotate-key takes no --role", "rotate-key", "bob", "--key-out", "/k", "--role",
              "cluster-admin");
}
END_TEST

/* Parses `database SUB ARGS...` after SUB; returns the exit code. */
static int dparse(cli *c, cli_database_args *o, const char *sub, const char *first, ...)
{
    char *argv[32];
    int argc = 0;
    va_list ap;
    va_start(ap, first);
    for (const char *s = first; s != NULL && argc < 31; s = va_arg(ap, const char *))
        argv[argc++] = (char *)s;
    va_end(ap);
    argv[argc] = NULL;
    c->last_usage[0] = '\0';
    return cli_database_parse(c, sub, argc, argv, o);
}

START_TEST(test_cli_database_parse)
{
    cli c = test_cli();
    cli_database_args o;
    ck_assert_int_eq(dparse(&c, &o, "limits", "--max-scan-records", "10", "--max-batch-bytes=2048",
                            "--max-query-read-bytes", "0", "--max-transfer-accept-attempts", "4",
                            "--command-id", GUID_A, NULL), CLI_EXIT_OK);
    ck_assert(o.any_limit);
    ck_assert_ptr_null(o.name);
    ck_assert_uint_eq(o.limits.max_scan_records, 10);
    ck_assert_uint_eq(o.limits.max_batch_bytes, 2048);
    ck_assert_uint_eq(o.limits.max_query_read_bytes, 0);
    ck_assert(o.limits.has_max_queue_transfer_accept_attempts);
    ck_assert_uint_eq(o.limits.max_queue_transfer_accept_attempts, 4);
    ck_assert_str_eq(o.command_id, GUID_A);

    ck_assert_int_eq(dparse(&c, &o, "limits", "acme/other", "--max-transfer-accept-attempts",
                            "null", NULL), CLI_EXIT_OK);
    ck_assert(o.any_limit);
    ck_assert_str_eq(o.name, "acme/other");
    ck_assert(!o.limits.has_max_queue_transfer_accept_attempts);

    ck_assert_int_eq(dparse(&c, &o, "limits", NULL), CLI_EXIT_OK);
    ck_assert(!o.any_limit); /* the command itself then refuses */

    ck_assert_int_eq(dparse(&c, &o, "limits", "--max-transfer-accept-attempts", "0", NULL), CLI_EXIT_USAGE);
    ck_assert_ptr_nonnull(strstr(c.last_usage, "--max-transfer-accept-attempts must be positive"));
    ck_assert_int_eq(dparse(&c, &o, "limits", "--max-transfer-accept-attempts", "many", NULL), CLI_EXIT_USAGE);
    ck_assert_ptr_nonnull(strstr(c.last_usage, "--max-transfer-accept-attempts"));
    ck_assert_int_eq(dparse(&c, &o, "limits", "--max-scan-records", "-1", NULL), CLI_EXIT_USAGE);
    ck_assert_ptr_nonnull(strstr(c.last_usage, "--max-scan-records"));
    ck_assert_int_eq(dparse(&c, &o, "limits", "--max-batch-bytes", NULL), CLI_EXIT_USAGE);
    ck_assert_ptr_nonnull(strstr(c.last_usage, "--max-batch-bytes needs a value"));
    ck_assert_int_eq(dparse(&c, &o, "limits", "a/b", "c/d", NULL), CLI_EXIT_USAGE);
    ck_assert_ptr_nonnull(strstr(c.last_usage, "'c/d' is one too many"));
    ck_assert_int_eq(dparse(&c, &o, "create", "--max-messages", "3", NULL), CLI_EXIT_USAGE);
    ck_assert_ptr_nonnull(strstr(c.last_usage, "unknown option --max-messages"));
    ck_assert_int_eq(dparse(&c, &o, "create", "t/d", "--max-query-read-bytes", "99", NULL), CLI_EXIT_OK);
    ck_assert_str_eq(o.name, "t/d");
    ck_assert_uint_eq(o.limits.max_query_read_bytes, 99);
}
END_TEST

Suite *suite_principal(void)
{
    Suite *s = suite_create("principal");
    TCase *t = tcase_create("names");
    tcase_add_test(t, test_permission_names);
    tcase_add_test(t, test_role_names);
    tcase_add_test(t, test_key_list_parse);
    tcase_add_test(t, test_queue_patterns);
    suite_add_tcase(s, t);

    t = tcase_create("builders");
    tcase_add_test(t, test_create_principal_stamps_tenant);
    tcase_add_test(t, test_grant_sorted_and_stamped);
    tcase_add_test(t, test_revoke_key_and_limits_stamped);
    tcase_add_test(t, test_client_calls_need_command_id);
    suite_add_tcase(s, t);

    t = tcase_create("json");
    tcase_add_test(t, test_json_principal_results);
    tcase_add_test(t, test_json_show_principal);
    suite_add_tcase(s, t);

    t = tcase_create("cli");
    tcase_add_test(t, test_cli_principal_parse_ok);
    tcase_add_test(t, test_cli_principal_parse_usage_errors);
    tcase_add_test(t, test_cli_database_parse);
    suite_add_tcase(s, t);
    return s;
}
