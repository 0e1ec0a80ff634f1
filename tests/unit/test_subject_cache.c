/* The decoded principal and database cache (daemon/engine/subject_cache.h) as the node uses
 * it: a real store and node (tests/unit/harness.h) on a cluster that requires sessions.
 * Repeated requests are answered from the cache; a committed catalog change and a pending
 * one (proposed, not applied) both count for the very next request; what a request read
 * while a change was pending is never kept. */
#include "harness.h"

#include "common/canon.h"
#include "daemon/engine/catalog.h"
#include "daemon/engine/subject_cache.h"
#include "daemon/store/keys.h"

#include <check.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

static char dir[256];
static th_node T;

#define PUB KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH

static void setup(void)
{
    th_tmpdir(dir, sizeof dir);
    th_open(&T, dir, NULL); /* creates default/default as the local administrator */
    T.require_sessions = true;
    th_close(&T);
    th_reopen(&T);
    T.principal = NULL;
    T.reader = "root";
}

static void teardown(void)
{
    th_close(&T);
    th_rmrf(dir);
}

static void fresh_key(uint8_t pk[32])
{
    uint8_t sk[64];
    crypto_sign_keypair(pk, sk);
    sodium_memzero(sk, sizeof sk);
}

static void run_as(const char *who, th_batch *b, kl_code code, const char *detail)
{
    T.principal = who;
    if (code == KL_OK) {
        keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
        return;
    }
    kl_err err;
    th_run_err(&T, b, code, &err);
    if (detail)
        ck_assert_str_eq(err.detail, detail);
}

/* root (cluster administrator), queue q, and alice with QueuePublish on q. */
static void world(void)
{
    uint8_t pk[32], proof[32];
    fresh_key(pk);
    ck_assert_int_eq(kl_canon_bootstrap_proof(th_cluster_secret, "default", "boot", "root", pk, 32, proof), 0);
    th_batch *b = th_batch_new(0xB0);
    th_bootstrap(b, "default", "boot", "root", pk, proof);
    run_as(NULL, b, KL_OK, NULL);
    b = th_batch_new(0xB1);
    th_create(b, "q", 0, 0, 0, NULL);
    run_as("root", b, KL_OK, NULL);
    fresh_key(pk);
    b = th_batch_new(0xB2);
    th_create_principal(b, "alice", pk, false, NULL);
    run_as("root", b, KL_OK, NULL);
    b = th_batch_new(0xB3);
    th_grant(b, "alice", PUB, "q", NULL, NULL);
    run_as("root", b, KL_OK, NULL);
}

static void enqueue_as_alice(uint8_t cmd, kl_code code, const char *detail)
{
    th_batch *b = th_batch_new(cmd);
    th_enqueue(b, "q", NULL, "x");
    run_as("alice", b, code, detail);
}

static void costs(uint64_t *hits, uint64_t *misses)
{
    kl_node_subject_cache_costs(T.node, hits, misses);
}

/* A principal and its database decoded once serve the requests after it. */
START_TEST(repeated_requests_are_answered_from_the_cache)
{
    world();
    enqueue_as_alice(0x10, KL_OK, NULL); /* fills the cache at this catalog version */
    uint64_t h0, m0, h1, m1;
    costs(&h0, &m0);
    for (uint8_t i = 0; i < 3; i++)
        enqueue_as_alice(0x11 + i, KL_OK, NULL);
    costs(&h1, &m1);
    /* One principal and one database lookup per batch. */
    ck_assert_uint_eq(h1 - h0, 6);
    ck_assert_uint_eq(m1 - m0, 0);
    ck_assert_uint_eq(th_queue_messages(&T, "q", NULL), 4);
}
END_TEST

/* A committed revoke refuses the very next request, a committed grant allows it. */
START_TEST(a_committed_revoke_counts_on_the_very_next_request)
{
    world();
    enqueue_as_alice(0x20, KL_OK, NULL);
    enqueue_as_alice(0x21, KL_OK, NULL); /* answered from the cache */
    th_batch *b = th_batch_new(0x22);
    th_revoke(b, "alice", PUB, "q");
    run_as("root", b, KL_OK, NULL);
    uint64_t h0, m0, h1, m1;
    costs(&h0, &m0);
    enqueue_as_alice(0x23, KL_PERMISSION_DENIED, "grant:QueuePublish");
    costs(&h1, &m1);
    ck_assert_uint_ge(m1 - m0, 1); /* the new version was read, not the cached record */
    b = th_batch_new(0x24);
    th_grant(b, "alice", PUB, "q", NULL, NULL);
    run_as("root", b, KL_OK, NULL);
    enqueue_as_alice(0x25, KL_OK, NULL);
    ck_assert_uint_eq(th_queue_messages(&T, "q", NULL), 3);
}
END_TEST

/* Submits b as who without committing it; returns the reply (count 0 while proposed). */
static void submit_pending(const char *who, th_batch *b, th_reply *r)
{
    size_t len;
    uint8_t *req = th_batch_pack(b, &len);
    T.principal = who;
    th_submit(&T, req, len, r);
    free(req);
}

/* A revoke proposed but not yet committed already refuses the next request (the view
 * reads pending writes), though the cache held alice's record with the grant. */
START_TEST(a_pending_revoke_counts_before_it_commits)
{
    world();
    enqueue_as_alice(0x30, KL_OK, NULL);
    enqueue_as_alice(0x31, KL_OK, NULL);
    T.auto_persist = false;
    th_reply rv = {0}, en = {0};
    th_batch *b = th_batch_new(0x32);
    th_revoke(b, "alice", PUB, "q");
    submit_pending("root", b, &rv);
    ck_assert_int_eq(rv.count, 0);
    b = th_batch_new(0x33);
    th_enqueue(b, "q", NULL, "x");
    submit_pending("alice", b, &en);
    ck_assert_int_eq(en.count, 1);
    ck_assert_msg(en.code == KL_PERMISSION_DENIED, "got %s", kl_code_name(en.code));
    ck_assert_str_eq(en.err.detail, "grant:QueuePublish");
    th_drain(&T);
    ck_assert_int_eq(rv.count, 1);
    ck_assert_int_eq(rv.code, KL_OK);
    th_reply_free(&rv);
    th_reply_free(&en);
    T.auto_persist = true;
    enqueue_as_alice(0x34, KL_PERMISSION_DENIED, "grant:QueuePublish");
    ck_assert_uint_eq(th_queue_messages(&T, "q", NULL), 2);
}
END_TEST

/* Database limits: a database that did not exist when first looked up, then created with
 * a tighter MaxBatchBytes, pending and then committed: both count at once. */
START_TEST(database_limits_follow_pending_and_committed_changes)
{
    world();
    char body[300];
    memset(body, 'x', sizeof body - 1);
    body[sizeof body - 1] = '\0';
    th_batch *b = th_batch_new(0x40); /* looks up default/small, which does not exist */
    th_enqueue(b, "q", NULL, body);
    th_batch_set_database(b, "small");
    T.principal = "root";
    kl_err err;
    th_run_err(&T, b, KL_NOT_FOUND, &err);
    T.auto_persist = false;
    th_reply cr = {0}, en = {0};
    b = th_batch_new(0x41);
    th_create_database(b, "default", "small");
    th_batch_set_db_limits(b, 0, 200, 0);
    submit_pending("root", b, &cr);
    ck_assert_int_eq(cr.count, 0);
    b = th_batch_new(0x42);
    th_enqueue(b, "q", NULL, body);
    th_batch_set_database(b, "small");
    submit_pending("root", b, &en);
    ck_assert_int_eq(en.count, 1);
    ck_assert_msg(en.code == KL_RESOURCE_EXHAUSTED, "got %s %s", kl_code_name(en.code), en.err.message);
    ck_assert_str_eq(en.err.detail, "limit:MaxBatchBytes");
    th_drain(&T);
    ck_assert_int_eq(cr.code, KL_OK);
    th_reply_free(&cr);
    th_reply_free(&en);
    T.auto_persist = true;
    b = th_batch_new(0x43);
    th_enqueue(b, "q", NULL, body);
    th_batch_set_database(b, "small");
    run_as("root", b, KL_RESOURCE_EXHAUSTED, "limit:MaxBatchBytes");
}
END_TEST

/* The cache alone over a view whose pending overlay holds a catalog change that never
 * commits: the pending record is what that view reads, and it is not kept. */
START_TEST(a_pending_read_is_never_kept)
{
    world();
    kl_subject_cache *c = kl_subject_cache_new();
    ck_assert_ptr_nonnull(c);
    kl_view applied = {.store = T.store, .scan_limit = 1};
    const Keyload__V1__CatalogPrincipal *p;
    bool found;
    kl_err err;
    ck_assert_int_eq(kl_subject_cache_principal(c, &applied, "alice", &p, &found, &err), KL_OK);
    ck_assert(found);
    uint64_t epoch = p->policy_epoch;
    ck_assert_uint_eq(applied.scanned, 0); /* no scan budget charged */

    /* A proposed change: alice's record at another epoch, and the catalog version bump. */
    kl_overlay ov;
    kl_overlay_init(&ov);
    Keyload__V1__CatalogPrincipal *changed;
    kl_view raw = {.store = T.store, .scan_limit = 16};
    ck_assert_int_eq(kl_catalog_find_principal(&raw, "alice", &changed, &found, &err), KL_OK);
    changed->policy_epoch = epoch + 41;
    size_t n = keyload__v1__catalog_principal__get_packed_size(changed);
    uint8_t *buf = malloc(n);
    keyload__v1__catalog_principal__pack(changed, buf);
    kl_key k;
    kl_key_catalog_principal(&k, changed->tenant, "alice");
    ck_assert_int_eq(kl_overlay_set(&ov, k.b, k.len, buf, n, false, 99, &err), KL_OK);
    uint8_t version[8] = {0, 0, 0, 0, 0, 0, 0x7f, 0};
    kl_key_meta(&k, "catalog_version");
    ck_assert_int_eq(kl_overlay_set(&ov, k.b, k.len, version, 8, false, 99, &err), KL_OK);
    free(buf);
    keyload__v1__catalog_principal__free_unpacked(changed, NULL);

    kl_view pending = {.store = T.store, .pending = &ov, .scan_limit = 1};
    ck_assert_int_eq(kl_subject_cache_principal(c, &pending, "alice", &p, &found, &err), KL_OK);
    ck_assert_uint_eq(p->policy_epoch, epoch + 41);
    kl_subject_cache_stats st;
    kl_subject_cache_stats_get(c, &st);
    ck_assert_uint_eq(st.bypasses, 1);

    /* The proposal is dropped (a leader change): applied state again, from the cache. */
    kl_overlay_free(&ov);
    ck_assert_int_eq(kl_subject_cache_principal(c, &applied, "alice", &p, &found, &err), KL_OK);
    ck_assert_uint_eq(p->policy_epoch, epoch);
    kl_subject_cache_stats_get(c, &st);
    ck_assert_uint_eq(st.hits, 1);
    ck_assert_uint_eq(st.misses, 1);
    ck_assert_int_eq(kl_subject_cache_principal(c, &applied, "nobody", &p, &found, &err), KL_OK);
    ck_assert(!found);
    ck_assert_ptr_null(p);
    kl_subject_cache_free(c);
}
END_TEST

Suite *suite_subject_cache(void)
{
    Suite *s = suite_create("subject_cache");
    TCase *t = tcase_create("subject_cache");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 60);
    tcase_add_test(t, repeated_requests_are_answered_from_the_cache);
    tcase_add_test(t, a_committed_revoke_counts_on_the_very_next_request);
    tcase_add_test(t, a_pending_revoke_counts_before_it_commits);
    tcase_add_test(t, database_limits_follow_pending_and_committed_changes);
    tcase_add_test(t, a_pending_read_is_never_kept);
    suite_add_tcase(s, t);
    return s;
}
