/* Unit tests of common/keys.c (key files), daemon/keygen.c (writing them) and the cluster
 * file's per-member "public_key" (common/cluster.c). */
#include "common/cluster.h"
#include "common/keys.h"
#include "daemon/keygen.h"
#include "harness.h"

#include <check.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

typedef struct key_dir {
    char dir[256];
    char secret[300];   /* cluster.secret */
    char key_a[300];    /* p1m2.key */
    char key_b[300];    /* p0m1.key */
    char pub_a[KL_KEYGEN_PUBLIC_B64], pub_b[KL_KEYGEN_PUBLIC_B64];
    uint8_t pk_a[KL_MEMBER_PUBLIC_LEN], pk_b[KL_MEMBER_PUBLIC_LEN];
} key_dir;

static void decode_pub(const char *b64, uint8_t out[KL_MEMBER_PUBLIC_LEN])
{
    size_t n = 0;
    ck_assert_int_eq(sodium_base642bin(out, KL_MEMBER_PUBLIC_LEN, b64, strlen(b64), NULL, &n, NULL,
                                       sodium_base64_VARIANT_ORIGINAL), 0);
    ck_assert_uint_eq(n, KL_MEMBER_PUBLIC_LEN);
}

static void key_dir_make(key_dir *k)
{
    ck_assert_int_ge(sodium_init(), 0);
    th_tmpdir(k->dir, sizeof k->dir);
    snprintf(k->secret, sizeof k->secret, "%s/cluster.secret", k->dir);
    snprintf(k->key_a, sizeof k->key_a, "%s/p1m2.key", k->dir);
    snprintf(k->key_b, sizeof k->key_b, "%s/p0m1.key", k->dir);
    kl_err e;
    ck_assert_int_eq(kl_keygen_cluster_secret(k->secret, &e), KL_OK);
    ck_assert_int_eq(kl_keygen_member(k->key_a, k->pub_a, sizeof k->pub_a, &e), KL_OK);
    ck_assert_int_eq(kl_keygen_member(k->key_b, k->pub_b, sizeof k->pub_b, &e), KL_OK);
    decode_pub(k->pub_a, k->pk_a);
    decode_pub(k->pub_b, k->pk_b);
}

static mode_t mode_of(const char *path)
{
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    return st.st_mode & 07777;
}

/* Writes raw bytes as a key file would be (mode 0600). */
static void write_raw(const char *path, const uint8_t *data, size_t len)
{
    kl_err e;
    remove(path);
    ck_assert_int_eq(kl_keys_write_secret_file("test file", path, data, len, &e), KL_OK);
}

START_TEST(keys_good_files)
{
    key_dir k;
    key_dir_make(&k);
    ck_assert_uint_eq(mode_of(k.secret), 0600);
    ck_assert_uint_eq(mode_of(k.key_a), 0600);
    ck_assert_str_ne(k.pub_a, k.pub_b);
    kl_keys *keys;
    kl_err e;
    ck_assert_int_eq(kl_keys_new(&keys, &e), KL_OK);
    ck_assert_int_eq(kl_keys_load_cluster_secret(keys, k.secret, &e), KL_OK);
    ck_assert(keys->has_cluster_secret);
    ck_assert_int_eq(kl_keys_load_member_key(keys, k.key_a, "p1m2", k.pk_a, &e), KL_OK);
    ck_assert(keys->has_member_key);
    ck_assert_mem_eq(keys->member_public, k.pk_a, KL_MEMBER_PUBLIC_LEN);
    /* The loaded secret signs what the public key verifies. */
    uint8_t sig[crypto_sign_BYTES];
    ck_assert_int_eq(crypto_sign_detached(sig, NULL, (const uint8_t *)"m", 1, keys->member_secret), 0);
    ck_assert_int_eq(crypto_sign_verify_detached(sig, (const uint8_t *)"m", 1, k.pk_a), 0);
    /* Without an expected public key only the file's own halves are checked. */
    ck_assert_int_eq(kl_keys_load_member_key(keys, k.key_b, NULL, NULL, &e), KL_OK);
    ck_assert_mem_eq(keys->member_public, k.pk_b, KL_MEMBER_PUBLIC_LEN);
    kl_keys_free(keys);
    kl_keys_free(NULL);
    /* Never overwritten. */
    ck_assert_int_eq(kl_keygen_cluster_secret(k.secret, &e), KL_FAILED_PRECONDITION);
    ck_assert_ptr_nonnull(strstr(e.message, k.secret));
    ck_assert_int_eq(kl_keygen_member(k.key_a, k.pub_b, sizeof k.pub_b, &e), KL_FAILED_PRECONDITION);
    ck_assert_int_eq(kl_keys_new(&keys, &e), KL_OK);
    ck_assert_int_eq(kl_keys_load_member_key(keys, k.key_a, "p1m2", k.pk_a, &e), KL_OK);
    kl_keys_free(keys);
    th_rmrf(k.dir);
}
END_TEST

START_TEST(keys_wrong_size)
{
    key_dir k;
    key_dir_make(&k);
    uint8_t bytes[65];
    randombytes_buf(bytes, sizeof bytes);
    kl_keys *keys;
    kl_err e;
    ck_assert_int_eq(kl_keys_new(&keys, &e), KL_OK);
    write_raw(k.secret, bytes, 31);
    ck_assert_int_eq(kl_keys_load_cluster_secret(keys, k.secret, &e), KL_INVALID_ARGUMENT);
    ck_assert(!keys->has_cluster_secret);
    ck_assert_str_eq(e.detail, "key_file_size");
    ck_assert_ptr_nonnull(strstr(e.message, k.secret));
    ck_assert_ptr_nonnull(strstr(e.message, "31 bytes, expected 32"));
    write_raw(k.secret, bytes, 33);
    ck_assert_int_eq(kl_keys_load_cluster_secret(keys, k.secret, &e), KL_INVALID_ARGUMENT);
    write_raw(k.secret, bytes, 0);
    ck_assert_int_eq(kl_keys_load_cluster_secret(keys, k.secret, &e), KL_INVALID_ARGUMENT);
    write_raw(k.key_a, bytes, 63);
    ck_assert_int_eq(kl_keys_load_member_key(keys, k.key_a, "p1m2", k.pk_a, &e), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(e.message, "p1m2"));
    ck_assert_ptr_nonnull(strstr(e.message, k.key_a));
    write_raw(k.key_a, bytes, 65);
    ck_assert_int_eq(kl_keys_load_member_key(keys, k.key_a, "p1m2", k.pk_a, &e), KL_INVALID_ARGUMENT);
    ck_assert(!keys->has_member_key);
    /* 64 random bytes: the public half does not belong to the seed. */
    write_raw(k.key_a, bytes, 64);
    ck_assert_int_eq(kl_keys_load_member_key(keys, k.key_a, "p1m2", NULL, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "member_key");
    /* Missing file. */
    remove(k.key_a);
    ck_assert_int_eq(kl_keys_load_member_key(keys, k.key_a, "p1m2", k.pk_a, &e), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(e.message, k.key_a));
    kl_keys_free(keys);
    th_rmrf(k.dir);
}
END_TEST

START_TEST(keys_mode_refused)
{
    key_dir k;
    key_dir_make(&k);
    kl_keys *keys;
    kl_err e;
    ck_assert_int_eq(kl_keys_new(&keys, &e), KL_OK);
    ck_assert_int_eq(chmod(k.secret, 0644), 0);
    ck_assert_int_eq(kl_keys_load_cluster_secret(keys, k.secret, &e), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(e.detail, "key_file_mode");
    ck_assert_ptr_nonnull(strstr(e.message, k.secret));
    ck_assert_ptr_nonnull(strstr(e.message, "0644"));
    ck_assert(!keys->has_cluster_secret);
    ck_assert_int_eq(chmod(k.key_a, 0640), 0);
    ck_assert_int_eq(kl_keys_load_member_key(keys, k.key_a, "p1m2", k.pk_a, &e), KL_FAILED_PRECONDITION);
    ck_assert_ptr_nonnull(strstr(e.message, "0640"));
    ck_assert_ptr_nonnull(strstr(e.message, "p1m2"));
    ck_assert_int_eq(chmod(k.key_a, 0604), 0);
    ck_assert_int_eq(kl_keys_load_member_key(keys, k.key_a, "p1m2", k.pk_a, &e), KL_FAILED_PRECONDITION);
    /* 0400 (stricter than 0600) is fine. */
    ck_assert_int_eq(chmod(k.key_a, 0400), 0);
    ck_assert_int_eq(kl_keys_load_member_key(keys, k.key_a, "p1m2", k.pk_a, &e), KL_OK);
    kl_keys_free(keys);
    th_rmrf(k.dir);
}
END_TEST

START_TEST(keys_public_key_mismatch)
{
    key_dir k;
    key_dir_make(&k);
    kl_keys *keys;
    kl_err e;
    ck_assert_int_eq(kl_keys_new(&keys, &e), KL_OK);
    /* p0m1's key file offered as p1m2's. */
    ck_assert_int_eq(kl_keys_load_member_key(keys, k.key_b, "p1m2", k.pk_a, &e), KL_PERMISSION_DENIED);
    ck_assert_str_eq(e.detail, "member_key_mismatch");
    ck_assert_ptr_nonnull(strstr(e.message, "p1m2"));
    ck_assert_ptr_nonnull(strstr(e.message, k.key_b));
    ck_assert_ptr_null(strstr(e.message, k.pub_a));
    ck_assert_ptr_null(strstr(e.message, k.pub_b));
    ck_assert(!keys->has_member_key);
    static const uint8_t zero[KL_MEMBER_SECRET_LEN];
    ck_assert_mem_eq(keys->member_secret, zero, sizeof zero); /* wiped after the refusal */
    kl_keys_free(keys);
    th_rmrf(k.dir);
}
END_TEST

static kl_code parse_with_key(const char *key_json, kl_cluster *c, kl_err *e)
{
    char json[1024];
    snprintf(json, sizeof json,
             "{\"cluster\":\"k\",\"replica_count\":1,\"partitions\":["
             "{\"id\":0,\"members\":[{\"id\":1,\"client\":\"tcp://127.0.0.1:1\"}]},"
             "{\"id\":1,\"members\":[{\"id\":2,\"client\":\"tcp://127.0.0.1:2\",\"public_key\":%s}]}]}",
             key_json);
    return kl_cluster_parse(json, NULL, c, e);
}

START_TEST(cluster_public_key)
{
    static kl_cluster c;
    kl_err e;
    uint8_t pk[32], sk[64];
    ck_assert_int_ge(sodium_init(), 0);
    crypto_sign_keypair(pk, sk);
    char b64[64], quoted[70];
    sodium_bin2base64(b64, sizeof b64, pk, sizeof pk, sodium_base64_VARIANT_ORIGINAL);
    snprintf(quoted, sizeof quoted, "\"%s\"", b64);
    ck_assert_int_eq(parse_with_key(quoted, &c, &e), KL_OK);
    int p;
    const kl_member *m = kl_cluster_find_node(&c, "p1m2", &p);
    ck_assert_ptr_nonnull(m);
    ck_assert(m->has_public_key);
    ck_assert_mem_eq(m->public_key, pk, sizeof pk);
    ck_assert(!kl_cluster_find_node(&c, "p0m1", NULL)->has_public_key);

    static const char *const bad[] = {
        "\"not base64!\"",
        "\"AAAA\"",                                          /* 3 bytes */
        "\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==\"",  /* 31 bytes */
        "\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"", /* 36 bytes */
        "\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"",   /* 32 bytes without padding */
        "\"\"", "17", "null", "{}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(parse_with_key(bad[i], &c, &e) == KL_INVALID_ARGUMENT, "accepted %s", bad[i]);
        ck_assert_str_eq(e.detail, "public_key");
        ck_assert_msg(strstr(e.message, "partitions[1].members[0].public_key") != NULL, "%s",
                      e.message);
    }
    /* Trailing garbage after a valid key. */
    snprintf(quoted, sizeof quoted, "\"%s\\n\"", b64);
    ck_assert_int_eq(parse_with_key(quoted, &c, &e), KL_INVALID_ARGUMENT);
}
END_TEST

Suite *suite_keys(void)
{
    Suite *s = suite_create("keys");
    TCase *t = tcase_create("files");
    tcase_add_test(t, keys_good_files);
    tcase_add_test(t, keys_wrong_size);
    tcase_add_test(t, keys_mode_refused);
    tcase_add_test(t, keys_public_key_mismatch);
    tcase_add_test(t, cluster_public_key);
    suite_add_tcase(s, t);
    return s;
}
