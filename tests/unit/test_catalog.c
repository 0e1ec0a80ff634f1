/* The catalog (daemon/engine/catalog.c, kl_node_submit_catalog, store.c's current + 1
 * rule) with real stores: node A plays partition 0, node B a data partition (1 of 3), and
 * the test carries A's stored CatalogChanges to B as the tail would. */
#include "tests/unit/harness.h"

#include "common/canon.h"
#include "common/keys.h"
#include "daemon/engine/catalog.h"
#include "daemon/engine/member_key.h"
#include "keyload/v1/catalog.pb-c.h"
#include "keyload/v1/store.pb-c.h"

#include <check.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

static th_node A, B;
static char dir_a[256], dir_b[256];

static void setup(void)
{
    th_tmpdir(dir_a, sizeof dir_a);
    th_tmpdir(dir_b, sizeof dir_b);
    th_open_as(&A, dir_a, 0, 3);
    th_open_as(&B, dir_b, 1, 3);
}

static void teardown(void)
{
    th_close(&A);
    th_close(&B);
    th_rmrf(dir_a);
    th_rmrf(dir_b);
}

static void versions(th_node *t, uint64_t *v, uint64_t *changes)
{
    kl_node_catalog_status(t->node, v, changes);
}

/* Carries version v from A to B; returns what kl_node_submit_catalog said. */
static kl_code carry(uint64_t v, kl_err *err)
{
    uint8_t *bytes;
    size_t len;
    bool found;
    ck_assert_int_eq(kl_node_catalog_change(A.node, v, &bytes, &len, &found, err), KL_OK);
    ck_assert_msg(found, "partition 0 has no catalog change %llu", (unsigned long long)v);
    kl_code rc = kl_node_submit_catalog(B.node, bytes, len, err);
    free(bytes);
    if (B.auto_persist)
        th_drain(&B);
    return rc;
}

static void carry_ok(uint64_t v)
{
    kl_err err;
    kl_code rc = carry(v, &err);
    ck_assert_msg(rc == KL_OK, "carry %llu: %s %s", (unsigned long long)v, kl_code_name(rc), err.message);
}

static Keyload__V1__BatchReceipt *create_queue(th_node *t, uint8_t cmd, const char *q, int pin, kl_code expect)
{
    th_batch *b = th_batch_new(cmd);
    th_create(b, q, 0, 0, 0, NULL);
    th_batch_set_partition(b, pin);
    return th_run(t, b, expect);
}

static void enqueue(th_node *t, uint8_t cmd, const char *q, kl_code expect, const char *detail)
{
    th_batch *b = th_batch_new(cmd);
    th_enqueue(b, q, NULL, "body");
    if (expect == KL_OK) {
        keyload__v1__batch_receipt__free_unpacked(th_run(t, b, KL_OK), NULL);
        return;
    }
    kl_err err;
    th_run_err(t, b, expect, &err);
    if (detail)
        ck_assert_str_eq(err.detail, detail);
}

START_TEST(partition0_numbers_versions_and_places_queues)
{
    uint64_t v, n;
    versions(&A, &v, &n);
    ck_assert_uint_eq(v, 1); /* th_open_as created default/default */
    ck_assert_uint_eq(n, 1);
    Keyload__V1__BatchReceipt *r = create_queue(&A, 0x10, "a", -1, KL_OK);
    ck_assert_uint_eq(r->catalog_version, 2);
    ck_assert_uint_eq(r->results[0]->queue_created->catalog_version, 2);
    int pa = r->results[0]->queue_created->partition;
    ck_assert(pa == 1 || pa == 2); /* a data partition, never 0 unless pinned */
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
    r = create_queue(&A, 0x11, "b", -1, KL_OK);
    int pb = r->results[0]->queue_created->partition;
    ck_assert(pb == 1 || pb == 2);
    ck_assert_int_ne(pa, pb); /* spread over the data partitions */
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
    /* Pinned past the cluster: refused, and the version does not move. */
    create_queue(&A, 0x12, "c", 3, KL_INVALID_ARGUMENT);
    /* Same name again: CONFLICT. Missing database: NOT_FOUND. */
    create_queue(&A, 0x13, "a", 1, KL_CONFLICT);
    th_batch *b = th_batch_new(0x14);
    th_create(b, "q", 0, 0, 0, NULL);
    th_batch_set_database(b, "nope");
    th_run(&A, b, KL_NOT_FOUND);
    b = th_batch_new(0x15);
    th_create_database(b, "default", "default");
    th_run(&A, b, KL_CONFLICT);
    versions(&A, &v, &n);
    ck_assert_uint_eq(v, 3);
    ck_assert_uint_eq(n, 3);
    /* A catalog mutation never shares its batch. */
    b = th_batch_new(0x16);
    th_create(b, "d", 0, 0, 0, NULL);
    th_enqueue(b, "a", NULL, "x");
    th_run(&A, b, KL_INVALID_ARGUMENT);
}
END_TEST

START_TEST(data_partition_applies_in_order_only)
{
    keyload__v1__batch_receipt__free_unpacked(create_queue(&A, 0x20, "a", 1, KL_OK), NULL);
    kl_err err;
    /* Version 2 before 1 is refused; nothing changes. */
    ck_assert_int_eq(carry(2, &err), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(err.detail, "catalog_version");
    uint64_t v, n;
    versions(&B, &v, &n);
    ck_assert_uint_eq(v, 0);
    carry_ok(1);
    carry_ok(1); /* already applied: nothing to do */
    carry_ok(2);
    versions(&B, &v, &n);
    ck_assert_uint_eq(v, 2);
    ck_assert_uint_eq(n, 2);
    /* The queue's records exist where it is placed, and only there. */
    enqueue(&B, 0x21, "a", KL_OK, NULL);
    enqueue(&A, 0x22, "a", KL_NOT_FOUND, "wrong_partition");
    /* A data partition makes no definitions. */
    create_queue(&B, 0x23, "z", -1, KL_FAILED_PRECONDITION);
}
END_TEST

/* Defence in depth (docs/ARCHITECTURE.md invariant I-STORE-3, "current + 1 only"): if a version's entry ever commits
 * twice (a leader re-proposing what an uncommitted entry already carries), the second
 * must not apply, or it would rewrite the queue record made by the first over the
 * messages enqueued in between. Raft's serving rule makes this unreachable in the
 * daemon; the harness forces it by changing terms without committing. */
START_TEST(reproposed_version_applies_once)
{
    kl_err err;
    keyload__v1__batch_receipt__free_unpacked(create_queue(&A, 0x50, "a", 1, KL_OK), NULL);
    carry_ok(1);
    B.auto_persist = false;
    carry_ok(2);                    /* index i: defines a, placed here */
    th_batch *b = th_batch_new(0x51);      /* i + 1: an enqueue, pending */
    th_enqueue(b, "a", NULL, "body");
    size_t len;
    uint8_t *req = th_batch_pack(b, &len);
    th_reply r = {0};
    th_submit(&B, req, len, &r);
    free(req);
    ck_assert_int_eq(r.count, 0);
    ck_assert_uint_eq(B.n_props, 2);
    kl_node_role(B.node, false);    /* the pending caller hears UNKNOWN_WRITE_OUTCOME */
    ck_assert_int_eq(r.count, 1);
    ck_assert_int_eq(r.code, KL_UNKNOWN_WRITE_OUTCOME);
    th_reply_free(&r);
    B.term++;
    kl_node_role(B.node, true);
    ck_assert_int_eq(carry(2, &err), KL_OK); /* i + 2: version 2 again */
    ck_assert_uint_eq(B.n_props, 3);
    th_drain(&B);                   /* all three commit */
    B.auto_persist = true;
    uint64_t v, n, in_flight;
    versions(&B, &v, &n);
    ck_assert_uint_eq(v, 2);
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(th_queue_messages(&B, "a", &in_flight), 1);
    /* And after a restart (re-applying the log from the applied index) still once. */
    th_close(&B);
    th_reopen(&B);
    versions(&B, &v, &n);
    ck_assert_uint_eq(v, 2);
    ck_assert_uint_eq(th_queue_messages(&B, "a", &in_flight), 1);
}
END_TEST

START_TEST(delete_closes_then_drops_and_name_can_return)
{
    keyload__v1__batch_receipt__free_unpacked(create_queue(&A, 0x30, "a", 1, KL_OK), NULL);
    carry_ok(1);
    carry_ok(2);
    enqueue(&B, 0x31, "a", KL_OK, NULL);
    /* Step 1 on the queue's partition: not while it holds a message. */
    th_batch *b = th_batch_new(0x32);
    th_delete(b, "a");
    th_run(&B, b, KL_FAILED_PRECONDITION);
    b = th_batch_new(0x33);
    th_receive(b, "a", NULL, 10, 1000);
    Keyload__V1__BatchReceipt *r = th_run(&B, b, KL_OK);
    ProtobufCBinaryData tok = r->results[0]->received->messages[0]->lease_token;
    b = th_batch_new(0x34);
    th_ack(b, "a", tok.data, 1);
    keyload__v1__batch_receipt__free_unpacked(th_run(&B, b, KL_OK), NULL);
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
    b = th_batch_new(0x35);
    th_delete(b, "a");
    keyload__v1__batch_receipt__free_unpacked(th_run(&B, b, KL_OK), NULL);
    enqueue(&B, 0x36, "a", KL_NOT_FOUND, "queue"); /* closed */
    b = th_batch_new(0x37); /* closing again answers the same way */
    th_delete(b, "a");
    keyload__v1__batch_receipt__free_unpacked(th_run(&B, b, KL_OK), NULL);
    /* Step 2 on partition 0 drops the definition; B applies it and forgets the queue. */
    b = th_batch_new(0x35);
    th_delete(b, "a");
    r = th_run(&A, b, KL_OK);
    ck_assert_uint_eq(r->catalog_version, 3);
    uint64_t old_qid = r->results[0]->queue_deleted->queue_id;
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
    carry_ok(3);
    enqueue(&B, 0x38, "a", KL_NOT_FOUND, "queue");
    /* The name returns with a new queue id. */
    r = create_queue(&A, 0x39, "a", 1, KL_OK);
    ck_assert_uint_ne(r->results[0]->queue_created->queue_id, old_qid);
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
    carry_ok(4);
    enqueue(&B, 0x3a, "a", KL_OK, NULL);
}
END_TEST

/* A drop that did not come through the two steps (the queue still holds messages) keeps
 * the queue's records: no message is lost to a catalog change. */
START_TEST(drop_of_a_non_empty_queue_loses_nothing)
{
    keyload__v1__batch_receipt__free_unpacked(create_queue(&A, 0x40, "a", 1, KL_OK), NULL);
    carry_ok(1);
    carry_ok(2);
    enqueue(&B, 0x41, "a", KL_OK, NULL);
    th_batch *b = th_batch_new(0x42);
    th_delete(b, "a");
    keyload__v1__batch_receipt__free_unpacked(th_run(&A, b, KL_OK), NULL);
    carry_ok(3);
    uint64_t in_flight;
    ck_assert_uint_eq(th_queue_messages(&B, "a", &in_flight), 1);
}
END_TEST

/* DatabaseLimits tighten the cluster's limits for that database only. */
START_TEST(database_limits_tighten_and_never_loosen)
{
    th_batch *b = th_batch_new(0x60);
    th_create_database(b, "default", "small");
    th_batch_set_db_limits(b, 0, 200, 0);
    keyload__v1__batch_receipt__free_unpacked(th_run(&A, b, KL_OK), NULL);
    b = th_batch_new(0x61);
    th_create_database(b, "default", "big");
    th_batch_set_db_limits(b, 0, A.limits.max_batch_bytes + 1, 0);
    kl_err err;
    th_run_err(&A, b, KL_INVALID_ARGUMENT, &err);
    ck_assert_str_eq(err.detail, "MaxBatchBytes");
    /* Queue "q" of default/small on partition 0 (pinned), and "q" of default/default. */
    b = th_batch_new(0x62);
    th_create(b, "q", 0, 0, 0, NULL);
    th_batch_set_partition(b, 0);
    th_batch_set_database(b, "small");
    keyload__v1__batch_receipt__free_unpacked(th_run(&A, b, KL_OK), NULL);
    keyload__v1__batch_receipt__free_unpacked(create_queue(&A, 0x63, "q", 0, KL_OK), NULL);
    char body[300];
    memset(body, 'x', sizeof body - 1);
    body[sizeof body - 1] = '\0';
    b = th_batch_new(0x64);
    th_enqueue(b, "q", NULL, body);
    th_batch_set_database(b, "small");
    th_run_err(&A, b, KL_RESOURCE_EXHAUSTED, &err);
    ck_assert_str_eq(err.detail, "limit:MaxBatchBytes");
    b = th_batch_new(0x65); /* the same batch in default/default is fine */
    th_enqueue(b, "q", NULL, body);
    keyload__v1__batch_receipt__free_unpacked(th_run(&A, b, KL_OK), NULL);
    /* One batch acts on one database. */
    b = th_batch_new(0x66);
    th_enqueue(b, "q", NULL, "a");
    th_enqueue(b, "q", NULL, "b");
    th_batch_set_database(b, "small");
    th_run_err(&A, b, KL_INVALID_ARGUMENT, &err);
    ck_assert_str_eq(err.detail, "database");
}
END_TEST

/* A database's signing key derives from the cluster secret and its id (docs/ARCHITECTURE.md "Keys"):
 * the catalog keeps the public half and key id only, and a member without the secret
 * cannot create databases. MaxQueueTransferAcceptAttempts is null by default, else
 * 1..MaxScanRecords. */
START_TEST(database_signing_key_and_accept_attempts)
{
    th_batch *b = th_batch_new(0x70);
    th_create_database(b, "default", "signed");
    Keyload__V1__BatchReceipt *r = th_run(&A, b, KL_OK);
    Keyload__V1__DatabaseCreated *dc = r->results[0]->database_created;
    uint8_t pk[32], sk[64], id[KL_DATABASE_KEY_ID_LEN];
    kl_err err;
    ck_assert_int_eq(kl_keys_database_signing(th_cluster_secret, dc->database_id, pk, sk, id, &err), KL_OK);
    ck_assert_uint_eq(dc->signing_public_key.len, 32);
    ck_assert_mem_eq(dc->signing_public_key.data, pk, 32);
    ck_assert_uint_eq(dc->signing_key_id.len, KL_DATABASE_KEY_ID_LEN);
    ck_assert_mem_eq(dc->signing_key_id.data, id, KL_DATABASE_KEY_ID_LEN);
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
    /* The stored record (what data partitions copy) holds the same public key, no secret. */
    kl_view v = {.store = A.store, .scan_limit = 16};
    Keyload__V1__CatalogDatabase *d;
    bool found;
    ck_assert_int_eq(kl_catalog_get_database(&v, "default", "signed", &d, &found, &err), KL_OK);
    ck_assert(found);
    ck_assert_mem_eq(d->signing_public_key.data, pk, 32);
    keyload__v1__catalog_database__free_unpacked(d, NULL);

    b = th_batch_new(0x71);
    th_create_database(b, "default", "attempts");
    th_batch_set_db_accept_attempts(b, 0);
    th_run_err(&A, b, KL_INVALID_ARGUMENT, &err);
    ck_assert_str_eq(err.detail, "MaxQueueTransferAcceptAttempts");
    b = th_batch_new(0x72);
    th_create_database(b, "default", "attempts");
    th_batch_set_db_accept_attempts(b, A.limits.max_scan_records + 1);
    th_run_err(&A, b, KL_INVALID_ARGUMENT, &err);
    b = th_batch_new(0x73);
    th_create_database(b, "default", "attempts");
    th_batch_set_db_accept_attempts(b, 5);
    keyload__v1__batch_receipt__free_unpacked(th_run(&A, b, KL_OK), NULL);
    ck_assert_int_eq(kl_catalog_get_database(&v, "default", "attempts", &d, &found, &err), KL_OK);
    ck_assert(found && d->limits && d->limits->max_queue_transfer_accept_attempts);
    ck_assert_uint_eq(d->limits->max_queue_transfer_accept_attempts->value, 5);
    keyload__v1__catalog_database__free_unpacked(d, NULL);
    ck_assert_int_eq(kl_catalog_get_database(&v, "default", "signed", &d, &found, &err), KL_OK);
    ck_assert_ptr_null(d->limits->max_queue_transfer_accept_attempts); /* null by default */
    keyload__v1__catalog_database__free_unpacked(d, NULL);

    /* A member without the cluster secret refuses, naming what it lacks. */
    kl_overlay scratch;
    kl_overlay_init(&scratch);
    kl_view sv = {.store = A.store, .scratch = &scratch, .scan_limit = 100};
    kl_catalog_batch cb = {0};
    kl_eval_ctx ctx = {.view = &sv, .limits = &A.limits, .partition = 0, .partition_count = 3,
                       .catalog = &cb, .cluster_secret = NULL};
    Keyload__V1__CreateDatabase cd = KEYLOAD__V1__CREATE_DATABASE__INIT;
    cd.tenant = "default";
    cd.database = "nosecret";
    kl_buf results = {0};
    ck_assert_int_eq(kl_catalog_eval_create_database(&ctx, &cd, &results, &err), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(err.detail, "cluster_secret");
    ck_assert_uint_eq(scratch.n, 0);
    kl_buf_free(&results);
    kl_buf_free(&cb.items);
    kl_overlay_free(&scratch);
}
END_TEST

static Keyload__V1__BatchReceipt *bootstrap(uint8_t cmd, const char *db, const char *admin,
                                            const uint8_t *secret, kl_code expect, kl_err *err)
{
    uint8_t pk[32], sk[64], proof[32];
    crypto_sign_keypair(pk, sk);
    sodium_memzero(sk, sizeof sk);
    ck_assert_int_eq(kl_canon_bootstrap_proof(secret, "acme", db, admin, pk, 32, proof), 0);
    th_batch *b = th_batch_new(cmd);
    th_bootstrap(b, "acme", db, admin, pk, proof);
    if (expect != KL_OK) {
        th_run_err(&A, b, expect, err);
        return NULL;
    }
    return th_run(&A, b, KL_OK);
}

/* KL-3 item 4: the first administrator, only with proof of the cluster secret and only once. */
START_TEST(bootstrap_once_with_proof)
{
    kl_err err;
    uint64_t v0, v, n;
    versions(&A, &v0, &n);
    uint8_t wrong[32] = {1};
    bootstrap(0x7f, "shop", "local", th_cluster_secret, KL_INVALID_ARGUMENT, &err);
    ck_assert_str_eq(err.detail, "admin_id"); /* reserved for requests without a session */
    bootstrap(0x80, "shop", "root", wrong, KL_UNAUTHENTICATED, &err);
    ck_assert_str_eq(err.detail, "bootstrap_proof");
    versions(&A, &v, &n);
    ck_assert_uint_eq(v, v0); /* nothing changed */
    Keyload__V1__BatchReceipt *r = bootstrap(0x81, "shop", "root", th_cluster_secret, KL_OK, &err);
    Keyload__V1__Bootstrapped *bs = r->results[0]->bootstrapped;
    ck_assert_str_eq(bs->admin_id, "root");
    ck_assert_uint_eq(bs->policy_epoch, 1);
    ck_assert_uint_eq(bs->admin_key_id.len, KL_KEY_ID_LEN);
    ck_assert_uint_eq(bs->database->signing_public_key.len, 32);
    ck_assert_uint_eq(bs->catalog_version, v0 + 1);
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
    kl_view view = {.store = A.store, .scan_limit = 16};
    Keyload__V1__CatalogPrincipal *p;
    bool found;
    ck_assert_int_eq(kl_catalog_get_principal(&view, "acme", "root", &p, &found, &err), KL_OK);
    ck_assert(found && p->cluster_admin && p->public_key.len == 32);
    keyload__v1__catalog_principal__free_unpacked(p, NULL);
    /* Never twice, even with a valid proof and other names. */
    bootstrap(0x82, "other", "root2", th_cluster_secret, KL_FAILED_PRECONDITION, &err);
    ck_assert_str_eq(err.detail, "bootstrap_done");
    /* The principal reaches the data partitions' catalog copies like any definition. */
    for (uint64_t i = 1; i <= v0 + 1; i++)
        carry_ok(i);
    kl_view bv = {.store = B.store, .scan_limit = 16};
    ck_assert_int_eq(kl_catalog_get_principal(&bv, "acme", "root", &p, &found, &err), KL_OK);
    ck_assert(found && p->cluster_admin);
    keyload__v1__catalog_principal__free_unpacked(p, NULL);
    /* By id alone (the 'C' 'I' index), on partition 0 and on the data partition's copy. */
    ck_assert_int_eq(kl_catalog_find_principal(&view, "root", &p, &found, &err), KL_OK);
    ck_assert(found);
    ck_assert_str_eq(p->tenant, "acme");
    keyload__v1__catalog_principal__free_unpacked(p, NULL);
    ck_assert_int_eq(kl_catalog_find_principal(&bv, "root", &p, &found, &err), KL_OK);
    ck_assert(found && p->public_key.len == 32);
    keyload__v1__catalog_principal__free_unpacked(p, NULL);
    ck_assert_int_eq(kl_catalog_find_principal(&bv, "nobody", &p, &found, &err), KL_OK);
    ck_assert(!found && p == NULL);
}
END_TEST

/* Principal ids are unique across tenants: a bootstrap naming an id another tenant uses is
 * refused (the state below, a principal without any cluster administrator, cannot arise
 * through Bootstrap today; the check guards every later way of making principals). */
START_TEST(bootstrap_refuses_a_taken_principal_id)
{
    kl_err err;
    kl_overlay scratch;
    kl_overlay_init(&scratch);
    kl_view sv = {.store = A.store, .scratch = &scratch, .scan_limit = 100};
    uint8_t pk[32], sk[64], proof[32];
    crypto_sign_keypair(pk, sk);
    sodium_memzero(sk, sizeof sk);
    Keyload__V1__CatalogPrincipal p = KEYLOAD__V1__CATALOG_PRINCIPAL__INIT;
    p.principal_id = "dup";
    p.tenant = "elsewhere";
    p.public_key.data = pk;
    p.public_key.len = 32;
    Keyload__V1__CatalogItem it = KEYLOAD__V1__CATALOG_ITEM__INIT;
    it.kind_case = KEYLOAD__V1__CATALOG_ITEM__KIND_PUT_PRINCIPAL;
    it.put_principal = &p;
    ck_assert_int_eq(kl_catalog_apply_item(&sv, 0, 0, &it, &err), KL_OK);
    Keyload__V1__CatalogPrincipal *got;
    bool found;
    ck_assert_int_eq(kl_catalog_find_principal(&sv, "dup", &got, &found, &err), KL_OK);
    ck_assert(found);
    ck_assert_str_eq(got->tenant, "elsewhere");
    keyload__v1__catalog_principal__free_unpacked(got, NULL);

    ck_assert_int_eq(kl_canon_bootstrap_proof(th_cluster_secret, "acme", "db", "dup", pk, 32, proof), 0);
    Keyload__V1__Bootstrap bs = KEYLOAD__V1__BOOTSTRAP__INIT;
    bs.tenant = "acme";
    bs.database = "db";
    bs.admin_id = "dup";
    bs.admin_public_key.data = pk;
    bs.admin_public_key.len = 32;
    bs.proof.data = proof;
    bs.proof.len = 32;
    kl_catalog_batch cb = {0};
    kl_eval_ctx ctx = {.view = &sv, .limits = &A.limits, .partition = 0, .partition_count = 3,
                       .catalog = &cb, .cluster_secret = th_cluster_secret, .now_ms = 1};
    kl_buf results = {0};
    size_t before = scratch.n;
    ck_assert_int_eq(kl_catalog_eval_bootstrap(&ctx, &bs, &results, &err), KL_CONFLICT);
    ck_assert_str_eq(err.detail, "principal_exists");
    ck_assert_uint_eq(scratch.n, before); /* nothing written */
    kl_buf_free(&results);
    kl_buf_free(&cb.items);
    kl_overlay_free(&scratch);
}
END_TEST

/* One SetMemberKey batch (command id from n) on t; the receipt when it committed (expect
 * KL_OK), else the refusal in *err. */
static Keyload__V1__BatchReceipt *member_key(th_node *t, uint32_t n, int partition, uint64_t member,
                                             const uint8_t *key, size_t key_len, kl_code expect, kl_err *err)
{
    uint8_t cmd[16] = {0x4b, 0x45, 0x59};
    for (int i = 0; i < 4; i++)
        cmd[12 + i] = (uint8_t)(n >> (8 * (3 - i)));
    Keyload__V1__SetMemberKey k = KEYLOAD__V1__SET_MEMBER_KEY__INIT;
    k.partition = partition;
    k.member = member;
    k.public_key.data = (uint8_t *)key;
    k.public_key.len = key_len;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT, *mp = &m;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_SET_MEMBER_KEY;
    m.set_member_key = &k;
    Keyload__V1__BatchRequest b = KEYLOAD__V1__BATCH_REQUEST__INIT;
    b.command_id.data = cmd;
    b.command_id.len = sizeof cmd;
    b.mutations = &mp;
    b.n_mutations = 1;
    size_t len = keyload__v1__batch_request__get_packed_size(&b);
    uint8_t *req = malloc(len);
    ck_assert_ptr_nonnull(req);
    keyload__v1__batch_request__pack(&b, req);
    th_reply r = {0};
    th_submit(t, req, len, &r);
    free(req);
    ck_assert_int_eq(r.count, 1);
    ck_assert_msg(r.code == expect, "SetMemberKey p%dm%llu: expected %s, got %s: %s", partition,
                  (unsigned long long)member, kl_code_name(expect), kl_code_name(r.code), r.err.message);
    Keyload__V1__BatchReceipt *rc = NULL;
    if (r.code == KL_OK) {
        rc = keyload__v1__batch_receipt__unpack(NULL, r.len, r.receipt);
        ck_assert_ptr_nonnull(rc);
        ck_assert_int_eq(rc->results[0]->kind_case, KEYLOAD__V1__MUTATION_RESULT__KIND_MEMBER_KEY_SET);
    } else if (err != NULL) {
        *err = r.err;
    }
    th_reply_free(&r);
    return rc;
}

/* The record found on t for (partition, member): key (32 bytes, NULL: expect removed). */
static void member_key_is(th_node *t, int partition, uint64_t member, const uint8_t *key)
{
    Keyload__V1__CatalogMemberKey *rec = NULL;
    bool found = false;
    kl_err err;
    ck_assert_int_eq(kl_node_find_member_key(t->node, partition, member, &rec, &found, &err), KL_OK);
    ck_assert_msg(found, "no member-key record for p%dm%llu", partition, (unsigned long long)member);
    ck_assert_int_eq(rec->partition, partition);
    ck_assert_uint_eq(rec->member, member);
    ck_assert_int_eq(rec->removed, key == NULL);
    ck_assert_uint_eq(rec->public_key.len, key ? 32 : 0);
    if (key)
        ck_assert_mem_eq(rec->public_key.data, key, 32);
    keyload__v1__catalog_member_key__free_unpacked(rec, NULL);
}

/* SetMemberKey (daemon/engine/member_key.h): partition 0 keeps the key it trusts for a data
 * partition's member as a catalog record (a version of its own, carried to the data
 * partitions like every change); rewriting the same record changes nothing; a removal
 * stays as a removed record; shapes are refused by field; the table is bounded. */
START_TEST(member_key_records_are_catalog_changes)
{
    uint8_t k1[32], k2[32];
    memset(k1, 0x11, sizeof k1);
    memset(k2, 0x22, sizeof k2);
    kl_err err;
    Keyload__V1__BatchReceipt *r = member_key(&A, 1, 1, 4, k1, 32, KL_OK, NULL);
    ck_assert(r->results[0]->member_key_set->changed);
    ck_assert_uint_eq(r->results[0]->member_key_set->catalog_version, 2);
    ck_assert_uint_eq(r->catalog_version, 2);
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
    member_key_is(&A, 1, 4, k1);
    Keyload__V1__CatalogMemberKey *none = NULL;
    bool found = true;
    ck_assert_int_eq(kl_node_find_member_key(A.node, 2, 4, &none, &found, &err), KL_OK);
    ck_assert(!found); /* partitions are apart */
    /* The same again: no new version. */
    r = member_key(&A, 2, 1, 4, k1, 32, KL_OK, NULL);
    ck_assert(!r->results[0]->member_key_set->changed);
    ck_assert_uint_eq(r->results[0]->member_key_set->catalog_version, 0);
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
    uint64_t v, n;
    versions(&A, &v, &n);
    ck_assert_uint_eq(v, 2);
    /* The data partition's copy holds it too once carried. */
    carry_ok(1);
    carry_ok(2);
    member_key_is(&B, 1, 4, k1);
    /* A new key replaces the record; a removal leaves a removed record. */
    keyload__v1__batch_receipt__free_unpacked(member_key(&A, 3, 1, 4, k2, 32, KL_OK, NULL), NULL);
    member_key_is(&A, 1, 4, k2);
    keyload__v1__batch_receipt__free_unpacked(member_key(&A, 4, 1, 4, NULL, 0, KL_OK, NULL), NULL);
    member_key_is(&A, 1, 4, NULL);
    versions(&A, &v, &n);
    ck_assert_uint_eq(v, 4);
    /* Partition 0's own members too (data partitions check tail answers with them). */
    keyload__v1__batch_receipt__free_unpacked(member_key(&A, 10, 0, 9, k1, 32, KL_OK, NULL), NULL);
    member_key_is(&A, 0, 9, k1);
    versions(&A, &v, &n);
    ck_assert_uint_eq(v, 5);
    /* Durable: a restart reads the records from the store, not from any file. */
    th_close(&A);
    th_reopen(&A);
    member_key_is(&A, 1, 4, NULL);
    /* Shapes, by field. */
    member_key(&A, 5, -1, 4, k1, 32, KL_INVALID_ARGUMENT, &err);
    ck_assert_str_eq(err.detail, "mutations[0].set_member_key.partition");
    member_key(&A, 6, 3, 4, k1, 32, KL_INVALID_ARGUMENT, &err);
    ck_assert_str_eq(err.detail, "set_member_key.partition");
    member_key(&A, 7, 1, 0, k1, 32, KL_INVALID_ARGUMENT, &err);
    ck_assert_str_eq(err.detail, "mutations[0].set_member_key.member");
    member_key(&A, 8, 1, 4, k1, 31, KL_INVALID_ARGUMENT, &err);
    ck_assert_str_eq(err.detail, "mutations[0].set_member_key.public_key");
    /* Only partition 0 holds the catalog. */
    member_key(&B, 9, 1, 5, k1, 32, KL_FAILED_PRECONDITION, &err);
    ck_assert_str_eq(err.detail, "catalog_partition");
    versions(&A, &v, &n);
    ck_assert_uint_eq(v, 5);
}
END_TEST

START_TEST(member_key_table_is_bounded)
{
    uint8_t k[32];
    memset(k, 0x33, sizeof k);
    kl_err err;
    for (uint32_t i = 0; i < KL_MEMBER_KEYS_MAX; i++)
        keyload__v1__batch_receipt__free_unpacked(member_key(&A, 100 + i, 1 + (int)(i % 2), 10 + i, k, 32, KL_OK, NULL),
                                                  NULL);
    member_key(&A, 50, 1, 5000, k, 32, KL_RESOURCE_EXHAUSTED, &err);
    ck_assert_str_eq(err.detail, "member_keys_full");
    /* Rewriting a record (a removal, a new key) takes no new room. */
    keyload__v1__batch_receipt__free_unpacked(member_key(&A, 51, 1, 10, NULL, 0, KL_OK, NULL), NULL);
    member_key_is(&A, 1, 10, NULL);
    k[0] ^= 1;
    keyload__v1__batch_receipt__free_unpacked(member_key(&A, 52, 2, 11, k, 32, KL_OK, NULL), NULL);
    member_key_is(&A, 2, 11, k);
}
END_TEST

Suite *suite_catalog(void)
{
    Suite *s = suite_create("catalog");
    TCase *t = tcase_create("catalog");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, partition0_numbers_versions_and_places_queues);
    tcase_add_test(t, data_partition_applies_in_order_only);
    tcase_add_test(t, reproposed_version_applies_once);
    tcase_add_test(t, delete_closes_then_drops_and_name_can_return);
    tcase_add_test(t, drop_of_a_non_empty_queue_loses_nothing);
    tcase_add_test(t, database_limits_tighten_and_never_loosen);
    tcase_add_test(t, database_signing_key_and_accept_attempts);
    tcase_add_test(t, bootstrap_once_with_proof);
    tcase_add_test(t, bootstrap_refuses_a_taken_principal_id);
    tcase_add_test(t, member_key_records_are_catalog_changes);
    tcase_add_test(t, member_key_table_is_bounded);
    suite_add_tcase(s, t);
    return s;
}
