/* daemon/rpc/tail_auth.h: member signatures on the catalog tail. */
#include "daemon/rpc/tail_auth.h"

#include <check.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

/* Partition 0 with member 1, partition 1 with member 1; keys[p] is member 1 of p. */
static kl_cluster C;
static uint8_t pk[2][32], sk[2][64];

static void setup(void)
{
    char b64[2][64], json[1024];
    for (int p = 0; p < 2; p++) {
        crypto_sign_keypair(pk[p], sk[p]);
        sodium_bin2base64(b64[p], sizeof b64[p], pk[p], 32, sodium_base64_VARIANT_ORIGINAL);
    }
    snprintf(json, sizeof json,
             "{\"cluster\":\"tail\",\"replica_count\":1,\"partitions\":["
             "{\"id\":0,\"members\":[{\"id\":1,\"client\":\"tcp://127.0.0.1:1\",\"peer\":\"tcp://127.0.0.1:2\","
             "\"public_key\":\"%s\"}]},"
             "{\"id\":1,\"members\":[{\"id\":1,\"client\":\"tcp://127.0.0.1:3\",\"peer\":\"tcp://127.0.0.1:4\","
             "\"public_key\":\"%s\"}]}]}",
             b64[0], b64[1]);
    kl_err err;
    ck_assert_int_eq(kl_cluster_parse(json, "/tmp", &C, &err), KL_OK);
}

static Keyload__V1__CatalogTailRequest signed_request(int64_t now, uint8_t sig[64])
{
    Keyload__V1__CatalogTailRequest r = KEYLOAD__V1__CATALOG_TAIL_REQUEST__INIT;
    r.partition = 1;
    r.applied_version = 7;
    r.wait_ms = 500;
    kl_tail_auth_sign_request(&C, &r, 1, now, sk[1], sig);
    return r;
}

START_TEST(request_signed_by_its_member_verifies)
{
    kl_err err;
    uint8_t sig[64];
    ck_assert(kl_tail_auth_required(&C, 1));
    Keyload__V1__CatalogTailRequest r = signed_request(1000000, sig);
    ck_assert_int_eq(kl_tail_auth_verify_request(&C, NULL, &r, 1000000 + 5000, &err), KL_OK);
    /* Inflated progress: the signature no longer covers it. */
    r.applied_version = 8;
    ck_assert_int_eq(kl_tail_auth_verify_request(&C, NULL, &r, 1000000, &err), KL_UNAUTHENTICATED);
    ck_assert_str_eq(err.detail, "tail_signature");
    r.applied_version = 7;
    /* Stale, or from the future. */
    ck_assert_int_eq(kl_tail_auth_verify_request(&C, NULL, &r, 1000000 + KL_TAIL_AUTH_SKEW_MS + 1, &err),
                     KL_UNAUTHENTICATED);
    ck_assert_str_eq(err.detail, "tail_stale");
    ck_assert_int_eq(kl_tail_auth_verify_request(&C, NULL, &r, 1000000 - KL_TAIL_AUTH_SKEW_MS - 1, &err),
                     KL_UNAUTHENTICATED);
    /* Signed by partition 0's member while claiming to be partition 1's. */
    Keyload__V1__CatalogTailRequest f = KEYLOAD__V1__CATALOG_TAIL_REQUEST__INIT;
    f.partition = 1;
    f.applied_version = 7;
    uint8_t fsig[64];
    kl_tail_auth_sign_request(&C, &f, 1, 1000000, sk[0], fsig);
    ck_assert_int_eq(kl_tail_auth_verify_request(&C, NULL, &f, 1000000, &err), KL_UNAUTHENTICATED);
    /* An unknown member, or no signature at all. */
    r.member = 9;
    ck_assert_int_eq(kl_tail_auth_verify_request(&C, NULL, &r, 1000000, &err), KL_UNAUTHENTICATED);
    r.member = 1;
    r.signature.len = 0;
    ck_assert_int_eq(kl_tail_auth_verify_request(&C, NULL, &r, 1000000, &err), KL_UNAUTHENTICATED);
}
END_TEST

/* A member the cluster file never named (member 4 of partition 1, admitted by a membership
 * change) is trusted only with the key partition 0's catalog vouches for; a removed record
 * refuses a member even when the file names it; a forged key (a record for another key) is
 * refused. */
START_TEST(vouched_key_decides_before_the_cluster_file)
{
    kl_err err;
    uint8_t npk[32], nsk[64], fpk[32], fsk[64], sig[64];
    crypto_sign_keypair(npk, nsk);
    crypto_sign_keypair(fpk, fsk);
    Keyload__V1__CatalogTailRequest r = KEYLOAD__V1__CATALOG_TAIL_REQUEST__INIT;
    r.partition = 1;
    r.applied_version = 3;
    kl_tail_auth_sign_request(&C, &r, 4, 1000000, nsk, sig);
    /* Not in the file, no record: refused. */
    ck_assert_int_eq(kl_tail_auth_verify_request(&C, NULL, &r, 1000000, &err), KL_UNAUTHENTICATED);
    ck_assert_str_eq(err.detail, "tail_signature");
    kl_tail_vouched none = {.state = KL_TAIL_VOUCH_NONE};
    ck_assert_int_eq(kl_tail_auth_verify_request(&C, &none, &r, 1000000, &err), KL_UNAUTHENTICATED);
    /* Vouched for: accepted. */
    kl_tail_vouched v = {.state = KL_TAIL_VOUCH_KEY};
    memcpy(v.public_key, npk, 32);
    ck_assert_int_eq(kl_tail_auth_verify_request(&C, &v, &r, 1000000, &err), KL_OK);
    /* A request signed by another key under the same member id: refused. */
    Keyload__V1__CatalogTailRequest f = r;
    uint8_t fsig[64];
    kl_tail_auth_sign_request(&C, &f, 4, 1000000, fsk, fsig);
    ck_assert_int_eq(kl_tail_auth_verify_request(&C, &v, &f, 1000000, &err), KL_UNAUTHENTICATED);
    ck_assert_str_eq(err.detail, "tail_signature");
    /* Removed: refused, whatever key signed it. */
    kl_tail_vouched gone = {.state = KL_TAIL_VOUCH_REMOVED};
    ck_assert_int_eq(kl_tail_auth_verify_request(&C, &gone, &r, 1000000, &err), KL_UNAUTHENTICATED);
    ck_assert_str_eq(err.detail, "tail_member_removed");
    /* Member 1 of partition 1 is in the cluster file; removed, its key no longer counts. */
    uint8_t osig[64];
    Keyload__V1__CatalogTailRequest o = KEYLOAD__V1__CATALOG_TAIL_REQUEST__INIT;
    o.partition = 1;
    kl_tail_auth_sign_request(&C, &o, 1, 1000000, sk[1], osig);
    ck_assert_int_eq(kl_tail_auth_verify_request(&C, NULL, &o, 1000000, &err), KL_OK);
    ck_assert_int_eq(kl_tail_auth_verify_request(&C, &gone, &o, 1000000, &err), KL_UNAUTHENTICATED);
    ck_assert_str_eq(err.detail, "tail_member_removed");
    /* A record with a new key for a file member replaces the file's key. */
    ck_assert_int_eq(kl_tail_auth_verify_request(&C, &v, &o, 1000000, &err), KL_UNAUTHENTICATED);
    /* Nothing secret or forged in the message: it names the member and partition only. */
    ck_assert_ptr_null(strstr(err.message, "key="));
}
END_TEST

START_TEST(answer_is_bound_to_its_request)
{
    kl_err err;
    uint8_t req1[64], req2[64], asig[64];
    signed_request(1000000, req1);
    signed_request(1000001, req2);
    const uint8_t body[] = {0x08, 0x07};
    kl_tail_auth_sign_answer(&C, 1, req1, body, sizeof body, sk[0], asig);
    Keyload__V1__SignedCatalogTailAnswer a = KEYLOAD__V1__SIGNED_CATALOG_TAIL_ANSWER__INIT;
    a.answer.data = (uint8_t *)body;
    a.answer.len = sizeof body;
    a.member = 1;
    a.signature.data = asig;
    a.signature.len = sizeof asig;
    ck_assert_int_eq(kl_tail_auth_verify_answer(&C, NULL, &a, req1, &err), KL_OK);
    /* Replayed to another request, tampered, or signed by a data partition's member. */
    ck_assert_int_eq(kl_tail_auth_verify_answer(&C, NULL, &a, req2, &err), KL_UNAUTHENTICATED);
    const uint8_t other[] = {0x08, 0x08};
    a.answer.data = (uint8_t *)other;
    ck_assert_int_eq(kl_tail_auth_verify_answer(&C, NULL, &a, req1, &err), KL_UNAUTHENTICATED);
    a.answer.data = (uint8_t *)body;
    kl_tail_auth_sign_answer(&C, 1, req1, body, sizeof body, sk[1], asig);
    ck_assert_int_eq(kl_tail_auth_verify_answer(&C, NULL, &a, req1, &err), KL_UNAUTHENTICATED);
    ck_assert_str_eq(err.detail, "tail_signature");
}
END_TEST

/* A member of partition 0 the data partition's cluster file never named (member 4,
 * admitted later) is trusted for answers once the data partition's catalog copy vouches for
 * its key; a removed record refuses even partition 0's member 1 from the file. */
START_TEST(answer_of_a_vouched_partition0_member)
{
    kl_err err;
    uint8_t rsig[64], asig[64], npk[32], nsk[64];
    crypto_sign_keypair(npk, nsk);
    signed_request(1000000, rsig);
    const uint8_t body[] = {0x08, 0x09};
    Keyload__V1__SignedCatalogTailAnswer a = KEYLOAD__V1__SIGNED_CATALOG_TAIL_ANSWER__INIT;
    a.answer.data = (uint8_t *)body;
    a.answer.len = sizeof body;
    a.member = 4;
    a.signature.data = asig;
    a.signature.len = sizeof asig;
    kl_tail_auth_sign_answer(&C, 4, rsig, body, sizeof body, nsk, asig);
    ck_assert_int_eq(kl_tail_auth_verify_answer(&C, NULL, &a, rsig, &err), KL_UNAUTHENTICATED);
    ck_assert_str_eq(err.detail, "tail_signature");
    Keyload__V1__CatalogMemberKey rec = KEYLOAD__V1__CATALOG_MEMBER_KEY__INIT;
    rec.member = 4;
    rec.public_key.data = npk;
    rec.public_key.len = 32;
    kl_tail_vouched v;
    kl_tail_auth_vouched_of(&rec, &v);
    ck_assert_int_eq(v.state, KL_TAIL_VOUCH_KEY);
    ck_assert_int_eq(kl_tail_auth_verify_answer(&C, &v, &a, rsig, &err), KL_OK);
    /* The file's member 1, removed by a record: refused. */
    a.member = 1;
    kl_tail_auth_sign_answer(&C, 1, rsig, body, sizeof body, sk[0], asig);
    ck_assert_int_eq(kl_tail_auth_verify_answer(&C, NULL, &a, rsig, &err), KL_OK);
    rec.removed = true;
    rec.public_key.len = 0;
    kl_tail_auth_vouched_of(&rec, &v);
    ck_assert_int_eq(v.state, KL_TAIL_VOUCH_REMOVED);
    ck_assert_int_eq(kl_tail_auth_verify_answer(&C, &v, &a, rsig, &err), KL_UNAUTHENTICATED);
    ck_assert_str_eq(err.detail, "tail_member_removed");
    kl_tail_auth_vouched_of(NULL, &v);
    ck_assert_int_eq(v.state, KL_TAIL_VOUCH_NONE);
}
END_TEST

START_TEST(unkeyed_clusters_do_not_require_signatures)
{
    kl_cluster c;
    kl_err err;
    ck_assert_int_eq(kl_cluster_parse("{\"cluster\":\"plain\",\"replica_count\":1,\"partitions\":["
                                      "{\"id\":0,\"members\":[{\"id\":1,\"client\":\"tcp://127.0.0.1:1\","
                                      "\"peer\":\"tcp://127.0.0.1:2\"}]},"
                                      "{\"id\":1,\"members\":[{\"id\":1,\"client\":\"tcp://127.0.0.1:3\","
                                      "\"peer\":\"tcp://127.0.0.1:4\"}]}]}",
                                      "/tmp", &c, &err),
                     KL_OK);
    ck_assert(!kl_tail_auth_required(&c, 1));
}
END_TEST

Suite *suite_tail_auth(void)
{
    Suite *s = suite_create("tail_auth");
    TCase *t = tcase_create("tail_auth");
    tcase_add_checked_fixture(t, setup, NULL);
    tcase_add_test(t, request_signed_by_its_member_verifies);
    tcase_add_test(t, vouched_key_decides_before_the_cluster_file);
    tcase_add_test(t, answer_is_bound_to_its_request);
    tcase_add_test(t, answer_of_a_vouched_partition0_member);
    tcase_add_test(t, unkeyed_clusters_do_not_require_signatures);
    suite_add_tcase(s, t);
    return s;
}
