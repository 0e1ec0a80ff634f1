/* Unit tests of common/session.c (the per-session handshake, sealing and replay window of
 * docs/ARCHITECTURE.md "Sessions and RPC") and kl_keys_database_signing (common/keys.c). Time and randomness
 * are parameters: every test uses fixed clocks and a deterministic random source. */
#include "common/canon.h"
#include "common/keys.h"
#include "common/session.h"

#include <check.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NOW 1700000000000LL
#define TTL 600000LL
#define SKEW KL_SESSION_DEFAULT_SKEW_MS
#define CLUSTER "local-rf3"
#define PRINCIPAL "tenant-a.alice"

/* ---- fixtures ---- */

typedef struct det_random {
    uint64_t calls;
    uint8_t tag;
} det_random;

/* Deterministic randomness: each call is randombytes_buf_deterministic of a fresh seed. */
static void det_fill(void *ctx, uint8_t *out, size_t len)
{
    det_random *r = ctx;
    uint8_t seed[randombytes_SEEDBYTES] = {0};
    seed[0] = r->tag;
    memcpy(seed + 1, &r->calls, sizeof r->calls);
    r->calls++;
    randombytes_buf_deterministic(out, len, seed);
}

typedef struct keypair {
    uint8_t pk[crypto_sign_PUBLICKEYBYTES];
    uint8_t sk[crypto_sign_SECRETKEYBYTES];
} keypair;

static void keypair_from(keypair *k, uint8_t b)
{
    uint8_t seed[crypto_sign_SEEDBYTES];
    memset(seed, b, sizeof seed);
    seed[0] ^= 0x5a;
    ck_assert_int_eq(crypto_sign_seed_keypair(k->pk, k->sk, seed), 0);
}

typedef struct world {
    keypair principal, member, other;
    det_random client_rand, daemon_rand;
    kl_session_client client;
    kl_session_hello_answer answer;
    kl_session cs, ds;          /* client and daemon ends */
} world;

/* Secrets and keys of the current test that must never appear in an error. */
#define MAX_SECRETS 32
static const uint8_t *secret_ptr[MAX_SECRETS];
static size_t secret_len[MAX_SECRETS];
static size_t n_secrets;

static void secret_add(const void *p, size_t n)
{
    ck_assert_uint_lt(n_secrets, MAX_SECRETS);
    secret_ptr[n_secrets] = p;
    secret_len[n_secrets] = n;
    n_secrets++;
}

static bool text_has(const char *text, const char *needle)
{
    return strstr(text, needle) != NULL;
}

/* The error holds no 4-byte window of any registered secret: raw, as lower- or upper-case
 * hex, nor the start of its base64. */
static void assert_clean(const kl_err *e)
{
    const char *texts[2] = {e->message, e->detail};
    for (size_t s = 0; s < n_secrets; s++) {
        for (int t = 0; t < 2; t++) {
            const char *text = texts[t];
            size_t tl = strlen(text);
            for (size_t i = 0; i + 4 <= secret_len[s]; i++) {
                ck_assert_msg(memmem(text, tl, secret_ptr[s] + i, 4) == NULL,
                              "secret %zu bytes in error: %s", s, text);
                char hex[9];
                sodium_bin2hex(hex, sizeof hex, secret_ptr[s] + i, 4);
                ck_assert_msg(!text_has(text, hex), "secret %zu hex in error: %s", s, text);
                for (int k = 0; k < 8; k++)
                    if (hex[k] >= 'a' && hex[k] <= 'f')
                        hex[k] = (char)(hex[k] - 'a' + 'A');
                ck_assert_msg(!text_has(text, hex), "secret %zu HEX in error: %s", s, text);
            }
            char b64[sodium_base64_ENCODED_LEN(6, sodium_base64_VARIANT_ORIGINAL)];
            if (secret_len[s] >= 6) {
                sodium_bin2base64(b64, sizeof b64, secret_ptr[s], 6,
                                  sodium_base64_VARIANT_ORIGINAL);
                ck_assert_msg(!text_has(text, b64), "secret %zu base64 in error: %s", s, text);
            }
        }
    }
}

/* Checks code and detail of a failure, and that its text is clean. */
#define ASSERT_FAIL(call, e, want_code, want_detail)                                       \
    do {                                                                                   \
        kl_err_clear(&(e));                                                                \
        ck_assert_int_eq((call), (want_code));                                             \
        ck_assert_int_eq((e).code, (want_code));                                           \
        ck_assert_str_eq((e).detail, (want_detail));                                       \
        ck_assert((e).message[0] != '\0');                                                 \
        assert_clean(&(e));                                                                \
    } while (0)

static kl_session_accept_params params_for(world *w, int64_t now)
{
    kl_session_accept_params p = {
        .principal_public = w->principal.pk,
        .cluster = CLUSTER,
        .partition = 1,
        .member = 2,
        .member_secret = w->member.sk,
        .now_ms = now,
        .max_skew_ms = SKEW,
        .ttl_ms = TTL,
        .random = det_fill,
        .random_ctx = &w->daemon_rand,
    };
    return p;
}

static void world_init(world *w)
{
    ck_assert_int_ge(sodium_init(), 0);
    memset(w, 0, sizeof *w);
    n_secrets = 0;
    keypair_from(&w->principal, 1);
    keypair_from(&w->member, 2);
    keypair_from(&w->other, 3);
    w->client_rand.tag = 'c';
    w->daemon_rand.tag = 'd';
    secret_add(w->principal.sk, 32);   /* the seed half */
    secret_add(w->member.sk, 32);
    secret_add(w->other.sk, 32);
}

static void world_hello(world *w, int64_t client_now)
{
    kl_err e;
    ck_assert_int_eq(kl_session_hello_new(PRINCIPAL, w->principal.sk, CLUSTER, 1, 2, client_now,
                                          det_fill, &w->client_rand, &w->client, &e),
                     KL_OK);
    secret_add(w->client.kx_sk, sizeof w->client.kx_sk);
    secret_add(w->client.hello.signature, sizeof w->client.hello.signature);
}

/* A full handshake at NOW; both ends established. */
static void world_session(world *w)
{
    world_hello(w, NOW);
    kl_session_accept_params p = params_for(w, NOW);
    kl_err e;
    ck_assert_int_eq(kl_session_accept(&w->client.hello, &p, &w->answer, &w->ds, &e), KL_OK);
    ck_assert_int_eq(kl_session_finish(&w->client, &w->answer, w->member.pk, &w->cs, &e), KL_OK);
    secret_add(w->cs.rx, sizeof w->cs.rx);
    secret_add(w->cs.tx, sizeof w->cs.tx);
    secret_add(w->answer.member_signature, sizeof w->answer.member_signature);
    secret_add(w->answer.session_id, sizeof w->answer.session_id);
}

/* ---- handshake ---- */

START_TEST(session_round_trip)
{
    world w;
    world_init(&w);
    world_hello(&w, NOW);

    /* Through the wire form and back, both ways. */
    Keyload__V1__Hello hm;
    kl_session_hello_to_pb(&w.client.hello, &hm);
    size_t n = keyload__v1__hello__get_packed_size(&hm);
    uint8_t *buf = malloc(n);
    keyload__v1__hello__pack(&hm, buf);
    Keyload__V1__Hello *hu = keyload__v1__hello__unpack(NULL, n, buf);
    ck_assert_ptr_nonnull(hu);
    kl_session_hello got;
    kl_err e;
    ck_assert_int_eq(kl_session_hello_from_pb(hu, &got, &e), KL_OK);
    keyload__v1__hello__free_unpacked(hu, NULL);
    free(buf);
    ck_assert_mem_eq(&got, &w.client.hello, sizeof got);

    kl_session_accept_params p = params_for(&w, NOW + 1234);
    ck_assert_int_eq(kl_session_accept(&got, &p, &w.answer, &w.ds, &e), KL_OK);
    ck_assert_int_eq(w.ds.role, KL_SESSION_DAEMON);
    ck_assert_int_eq(w.ds.expires_unix_ms, NOW + 1234 + TTL);
    ck_assert_str_eq(w.ds.principal_id, PRINCIPAL);
    ck_assert_uint_eq(w.answer.session_id[6] >> 4, 4);   /* a version-4 GUID */

    Keyload__V1__HelloAnswer am;
    kl_session_answer_to_pb(&w.answer, &am);
    n = keyload__v1__hello_answer__get_packed_size(&am);
    buf = malloc(n);
    keyload__v1__hello_answer__pack(&am, buf);
    Keyload__V1__HelloAnswer *au = keyload__v1__hello_answer__unpack(NULL, n, buf);
    ck_assert_ptr_nonnull(au);
    kl_session_hello_answer agot;
    ck_assert_int_eq(kl_session_answer_from_pb(au, &agot, &e), KL_OK);
    keyload__v1__hello_answer__free_unpacked(au, NULL);
    free(buf);
    ck_assert_mem_eq(&agot, &w.answer, sizeof agot);

    ck_assert(w.client.has_secret);
    ck_assert_int_eq(kl_session_finish(&w.client, &agot, w.member.pk, &w.cs, &e), KL_OK);
    /* The ephemeral secret is gone and cannot finish twice. */
    ck_assert(!w.client.has_secret);
    uint8_t zero[KL_SESSION_KX_SECRET_LEN] = {0};
    ck_assert_mem_eq(w.client.kx_sk, zero, sizeof zero);
    kl_session again;
    ASSERT_FAIL(kl_session_finish(&w.client, &agot, w.member.pk, &again, &e), e,
                KL_INVALID_ARGUMENT, "client");

    ck_assert_int_eq(w.cs.role, KL_SESSION_CLIENT);
    ck_assert_mem_eq(w.cs.id, w.ds.id, KL_SESSION_ID_LEN);
    ck_assert_mem_eq(w.cs.tx, w.ds.rx, KL_SESSION_KEY_LEN);
    ck_assert_mem_eq(w.cs.rx, w.ds.tx, KL_SESSION_KEY_LEN);
    ck_assert(memcmp(w.cs.rx, w.cs.tx, KL_SESSION_KEY_LEN) != 0);
    ck_assert_int_eq(w.cs.expires_unix_ms, w.ds.expires_unix_ms);
    ck_assert_str_eq(w.cs.principal_id, PRINCIPAL);
    ck_assert_uint_eq(w.cs.next_counter, 1);

    /* A request and its answer, with associated data. */
    const uint8_t ad[] = "keyload.v1.Batch";
    uint8_t pt[100], sealed[100 + KL_SESSION_SEAL_OVERHEAD], opened[100];
    for (size_t i = 0; i < sizeof pt; i++)
        pt[i] = (uint8_t)(i * 7 + 3);
    size_t sl, ol;
    ck_assert_int_eq(kl_session_seal_request(&w.cs, 1, pt, sizeof pt, ad, sizeof ad, sealed,
                                             sizeof sealed, &sl, &e), KL_OK);
    ck_assert_uint_eq(sl, sizeof sealed);
    ck_assert_uint_eq(w.cs.next_counter, 2);
    ck_assert(memmem(sealed, sl, pt, 16) == NULL);
    ck_assert_int_eq(kl_session_open_request(&w.ds, 1, sealed, sl, ad, sizeof ad, opened,
                                             sizeof opened, &ol, &e), KL_OK);
    ck_assert_uint_eq(ol, sizeof pt);
    ck_assert_mem_eq(opened, pt, sizeof pt);
    ck_assert_uint_eq(w.ds.highest, 1);

    ck_assert_int_eq(kl_session_seal_answer(&w.ds, 1, pt, 50, NULL, 0, sealed, sizeof sealed, &sl,
                                            &e), KL_OK);
    ck_assert_uint_eq(sl, 50 + KL_SESSION_SEAL_OVERHEAD);
    ck_assert_int_eq(kl_session_open_answer(&w.cs, 1, sealed, sl, NULL, 0, opened, sizeof opened,
                                            &ol, &e), KL_OK);
    ck_assert_uint_eq(ol, 50);
    ck_assert_mem_eq(opened, pt, 50);

    /* An empty request and answer. */
    ck_assert_int_eq(kl_session_seal_request(&w.cs, 2, NULL, 0, NULL, 0, sealed, sizeof sealed,
                                             &sl, &e), KL_OK);
    ck_assert_uint_eq(sl, KL_SESSION_SEAL_OVERHEAD);
    ck_assert_int_eq(kl_session_open_request(&w.ds, 2, sealed, sl, NULL, 0, opened, 0, &ol, &e),
                     KL_OK);
    ck_assert_uint_eq(ol, 0);

    /* The same inputs (clock and randomness) give the same handshake: nothing global. */
    world w2;
    world_init(&w2);
    world_hello(&w2, NOW);
    ck_assert_mem_eq(&w2.client.hello, &w.client.hello, sizeof w.client.hello);

    kl_session_wipe(&w.cs);
    uint8_t zs[sizeof w.cs];
    memset(zs, 0, sizeof zs);
    ck_assert_mem_eq(&w.cs, zs, sizeof zs);
}
END_TEST

START_TEST(session_random_source_default)
{
    /* NULL random uses libsodium's randombytes: two handshakes differ. */
    world w;
    world_init(&w);
    kl_session_client a, b;
    kl_err e;
    ck_assert_int_eq(kl_session_hello_new(PRINCIPAL, w.principal.sk, CLUSTER, 1, 2, NOW, NULL, NULL,
                                          &a, &e), KL_OK);
    ck_assert_int_eq(kl_session_hello_new(PRINCIPAL, w.principal.sk, CLUSTER, 1, 2, NOW, NULL, NULL,
                                          &b, &e), KL_OK);
    ck_assert(memcmp(a.hello.client_kx_pk, b.hello.client_kx_pk, KL_SESSION_KX_PUBLIC_LEN) != 0);
    kl_session_accept_params p = params_for(&w, NOW);
    p.random = NULL;
    kl_session_hello_answer aa, ab;
    kl_session da, db, ca;
    ck_assert_int_eq(kl_session_accept(&a.hello, &p, &aa, &da, &e), KL_OK);
    ck_assert_int_eq(kl_session_accept(&a.hello, &p, &ab, &db, &e), KL_OK);
    ck_assert(memcmp(aa.session_id, ab.session_id, KL_SESSION_ID_LEN) != 0);
    ck_assert_int_eq(kl_session_finish(&a, &aa, w.member.pk, &ca, &e), KL_OK);
    ck_assert_mem_eq(ca.tx, da.rx, KL_SESSION_KEY_LEN);
    kl_session_client_wipe(&b);
}
END_TEST

START_TEST(session_hello_wrong_key)
{
    world w;
    world_init(&w);
    world_hello(&w, NOW);
    kl_session_accept_params p = params_for(&w, NOW);
    kl_session_hello_answer a;
    kl_session d;
    kl_err e;
    /* The catalog holds another key for this principal. */
    p.principal_public = w.other.pk;
    ASSERT_FAIL(kl_session_accept(&w.client.hello, &p, &a, &d, &e), e, KL_UNAUTHENTICATED,
                "bad_signature");
    uint8_t zero[sizeof d];
    memset(zero, 0, sizeof zero);
    ck_assert_mem_eq(&d, zero, sizeof d);   /* nothing left behind */
    /* Signed by another key, checked against the principal's. */
    kl_session_client forged;
    ck_assert_int_eq(kl_session_hello_new(PRINCIPAL, w.other.sk, CLUSTER, 1, 2, NOW, det_fill,
                                          &w.client_rand, &forged, &e), KL_OK);
    p.principal_public = w.principal.pk;
    ASSERT_FAIL(kl_session_accept(&forged.hello, &p, &a, &d, &e), e, KL_UNAUTHENTICATED,
                "bad_signature");
    /* Each signed field, changed after signing (target fields stay on target). */
    kl_session_hello h;
    h = w.client.hello; h.principal_id[0] = 'T';
    ASSERT_FAIL(kl_session_accept(&h, &p, &a, &d, &e), e, KL_UNAUTHENTICATED, "bad_signature");
    h = w.client.hello; h.client_kx_pk[5] ^= 1;
    ASSERT_FAIL(kl_session_accept(&h, &p, &a, &d, &e), e, KL_UNAUTHENTICATED, "bad_signature");
    h = w.client.hello; h.unix_ms += 1;
    ASSERT_FAIL(kl_session_accept(&h, &p, &a, &d, &e), e, KL_UNAUTHENTICATED, "bad_signature");
    h = w.client.hello; h.signature[63] ^= 0x80;
    ASSERT_FAIL(kl_session_accept(&h, &p, &a, &d, &e), e, KL_UNAUTHENTICATED, "bad_signature");
    /* The untouched Hello still passes. */
    ck_assert_int_eq(kl_session_accept(&w.client.hello, &p, &a, &d, &e), KL_OK);
}
END_TEST

START_TEST(session_hello_wrong_target)
{
    world w;
    world_init(&w);
    world_hello(&w, NOW);
    kl_session_accept_params p = params_for(&w, NOW);
    kl_session_hello_answer a;
    kl_session d;
    kl_err e;
    p.cluster = "other-cluster";
    ASSERT_FAIL(kl_session_accept(&w.client.hello, &p, &a, &d, &e), e, KL_UNAUTHENTICATED,
                "wrong_cluster");
    p = params_for(&w, NOW);
    p.partition = 2;
    ASSERT_FAIL(kl_session_accept(&w.client.hello, &p, &a, &d, &e), e, KL_UNAUTHENTICATED,
                "wrong_partition");
    p = params_for(&w, NOW);
    p.member = 3;
    ASSERT_FAIL(kl_session_accept(&w.client.hello, &p, &a, &d, &e), e, KL_UNAUTHENTICATED,
                "wrong_member");
    /* Retargeting the Hello breaks its signature. */
    p = params_for(&w, NOW);
    kl_session_hello h = w.client.hello;
    h.member = 3;
    p.member = 3;
    ASSERT_FAIL(kl_session_accept(&h, &p, &a, &d, &e), e, KL_UNAUTHENTICATED, "bad_signature");
    h = w.client.hello;
    h.partition = 2;
    p = params_for(&w, NOW);
    p.partition = 2;
    ASSERT_FAIL(kl_session_accept(&h, &p, &a, &d, &e), e, KL_UNAUTHENTICATED, "bad_signature");
    h = w.client.hello;
    snprintf(h.cluster, sizeof h.cluster, "other-cluster");
    p = params_for(&w, NOW);
    p.cluster = "other-cluster";
    ASSERT_FAIL(kl_session_accept(&h, &p, &a, &d, &e), e, KL_UNAUTHENTICATED, "bad_signature");
}
END_TEST

START_TEST(session_hello_freshness)
{
    world w;
    world_init(&w);
    world_hello(&w, NOW);
    kl_session_hello_answer a;
    kl_session d;
    kl_err e;
    /* Exactly at the skew limit on either side: accepted. */
    kl_session_accept_params p = params_for(&w, NOW + SKEW);
    ck_assert_int_eq(kl_session_accept(&w.client.hello, &p, &a, &d, &e), KL_OK);
    p = params_for(&w, NOW - SKEW);
    ck_assert_int_eq(kl_session_accept(&w.client.hello, &p, &a, &d, &e), KL_OK);
    /* One ms beyond: stale (the daemon's clock is ahead) or future (behind). */
    p = params_for(&w, NOW + SKEW + 1);
    ASSERT_FAIL(kl_session_accept(&w.client.hello, &p, &a, &d, &e), e, KL_UNAVAILABLE,
                "stale_hello");
    p = params_for(&w, NOW - SKEW - 1);
    ASSERT_FAIL(kl_session_accept(&w.client.hello, &p, &a, &d, &e), e, KL_UNAVAILABLE,
                "future_hello");
    /* Extreme clocks do not overflow. */
    p = params_for(&w, INT64_MAX - TTL);
    ASSERT_FAIL(kl_session_accept(&w.client.hello, &p, &a, &d, &e), e, KL_UNAVAILABLE,
                "stale_hello");
    p = params_for(&w, INT64_MIN);
    ASSERT_FAIL(kl_session_accept(&w.client.hello, &p, &a, &d, &e), e, KL_UNAVAILABLE,
                "future_hello");
    p = params_for(&w, INT64_MAX);
    ASSERT_FAIL(kl_session_accept(&w.client.hello, &p, &a, &d, &e), e, KL_INVALID_ARGUMENT,
                "ttl_ms");
    /* Bad parameters. */
    p = params_for(&w, NOW);
    p.ttl_ms = 0;
    ASSERT_FAIL(kl_session_accept(&w.client.hello, &p, &a, &d, &e), e, KL_INVALID_ARGUMENT,
                "ttl_ms");
    p = params_for(&w, NOW);
    p.max_skew_ms = -1;
    ASSERT_FAIL(kl_session_accept(&w.client.hello, &p, &a, &d, &e), e, KL_INVALID_ARGUMENT,
                "max_skew_ms");
}
END_TEST

/* A sealed request and its answer across an established pair of sessions. */
static void assert_sessions_talk(kl_session *cs, kl_session *ds, uint64_t counter)
{
    const uint8_t ad[] = "keyload.v1.Batch";
    uint8_t pt[300], sealed[300 + KL_SESSION_SEAL_OVERHEAD], opened[300];
    for (size_t i = 0; i < sizeof pt; i++)
        pt[i] = (uint8_t)(i * 13 + counter);
    size_t sl, ol;
    kl_err e;
    ck_assert_int_eq(kl_session_seal_request(cs, counter, pt, sizeof pt, ad, sizeof ad, sealed, sizeof sealed, &sl, &e),
                     KL_OK);
    ck_assert_int_eq(kl_session_open_request(ds, counter, sealed, sl, ad, sizeof ad, opened, sizeof opened, &ol, &e),
                     KL_OK);
    ck_assert_mem_eq(opened, pt, sizeof pt);
    ck_assert_int_eq(kl_session_seal_answer(ds, counter, pt, 100, ad, sizeof ad, sealed, sizeof sealed, &sl, &e), KL_OK);
    ck_assert_int_eq(kl_session_open_answer(cs, counter, sealed, sl, ad, sizeof ad, opened, sizeof opened, &ol, &e),
                     KL_OK);
    ck_assert_mem_eq(opened, pt, 100);
}

/* The AEAD: AES-256-GCM exactly when the Hello offers it, the daemon allows it and this CPU
 * runs it; both ends agree, and each choice seals and opens. A seal made under one AEAD
 * does not open under the other with the same keys. The choice is signed: an answer whose
 * aead was changed after signing, or that picks one the Hello did not offer, is refused,
 * and an answer choosing the default has the transcript it had before the field existed
 * (older clients verify it). */
START_TEST(session_aead_negotiation)
{
    ck_assert_int_ge(sodium_init(), 0); /* CPU features are known only after it */
    bool aes = crypto_aead_aes256gcm_is_available() == 1;
    for (int offer = 0; offer < 2; offer++) {
        for (int only = 0; only < 2; only++) {
            world w;
            world_init(&w);
            world_hello(&w, NOW);
            ck_assert_uint_eq(w.client.hello.aead_offer, (aes ? KL_SESSION_AEAD_OFFER_AES256GCM : 0u));
            if (!offer)
                w.client.hello.aead_offer = 0; /* a client from before the offer */
            kl_session_accept_params p = params_for(&w, NOW);
            p.xchacha_only = only;
            kl_err e;
            ck_assert_int_eq(kl_session_accept(&w.client.hello, &p, &w.answer, &w.ds, &e), KL_OK);
            uint32_t want = (offer && !only && aes) ? KL_SESSION_AEAD_AES256GCM : KL_SESSION_AEAD_XCHACHA20POLY1305;
            ck_assert_uint_eq(w.answer.aead, want);
            ck_assert_uint_eq(w.ds.aead, want);
            ck_assert_int_eq(kl_session_finish(&w.client, &w.answer, w.member.pk, &w.cs, &e), KL_OK);
            ck_assert_uint_eq(w.cs.aead, want);
            assert_sessions_talk(&w.cs, &w.ds, 1);
            assert_sessions_talk(&w.cs, &w.ds, 2);
            /* The same keys under the other AEAD: nothing opens. */
            kl_session other = w.ds;
            other.aead = want == KL_SESSION_AEAD_AES256GCM ? KL_SESSION_AEAD_XCHACHA20POLY1305 : KL_SESSION_AEAD_AES256GCM;
            if (aes) {
                uint8_t sealed[64 + KL_SESSION_SEAL_OVERHEAD], out[64];
                size_t sl, ol;
                ck_assert_int_eq(kl_session_seal_request(&w.cs, 3, out, 64, NULL, 0, sealed, sizeof sealed, &sl, &e),
                                 KL_OK);
                ASSERT_FAIL(kl_session_open_request(&other, 3, sealed, sl, NULL, 0, out, sizeof out, &ol, &e), e,
                            KL_UNAUTHENTICATED, "bad_seal");
            }
        }
    }
    if (!aes)
        return;
    world w;
    world_init(&w);
    world_hello(&w, NOW);
    kl_session_accept_params p = params_for(&w, NOW);
    kl_err e;
    kl_session_hello_answer good, t;
    kl_session d, c;
    ck_assert_int_eq(kl_session_accept(&w.client.hello, &p, &good, &d, &e), KL_OK);
    ck_assert_uint_eq(good.aead, KL_SESSION_AEAD_AES256GCM);
    t = good;
    t.aead = KL_SESSION_AEAD_XCHACHA20POLY1305; /* a downgrade on the way */
    ASSERT_FAIL(kl_session_finish(&w.client, &t, w.member.pk, &c, &e), e, KL_UNAUTHENTICATED, "bad_member_signature");
    t = good;
    t.aead = 7;
    ASSERT_FAIL(kl_session_finish(&w.client, &t, w.member.pk, &c, &e), e, KL_INVALID_ARGUMENT, "aead");
    kl_session_client no_offer = w.client;
    no_offer.hello.aead_offer = 0;
    ASSERT_FAIL(kl_session_finish(&no_offer, &good, w.member.pk, &c, &e), e, KL_INVALID_ARGUMENT, "aead");
    kl_session_client_wipe(&no_offer);
    ck_assert_int_eq(kl_session_finish(&w.client, &good, w.member.pk, &c, &e), KL_OK);

    /* An answer choosing the default verifies over the transcript without the aead item. */
    world_init(&w);
    world_hello(&w, NOW);
    p = params_for(&w, NOW);
    p.xchacha_only = true;
    ck_assert_int_eq(kl_session_accept(&w.client.hello, &p, &good, &d, &e), KL_OK);
    uint8_t tb[1024];
    kl_canon old;
    kl_canon_init_fixed(&old, tb, sizeof tb);
    kl_canon_bytes(&old, 0x00, "keyload.hello-answer.v1", 23);
    kl_canon_str(&old, 0x01, w.client.hello.principal_id);
    kl_canon_bytes(&old, 0x02, w.client.hello.client_kx_pk, 32);
    kl_canon_bytes(&old, 0x03, good.server_kx_pk, 32);
    kl_canon_u64(&old, 0x04, (uint64_t)w.client.hello.unix_ms);
    kl_canon_str(&old, 0x05, w.client.hello.cluster);
    kl_canon_u64(&old, 0x06, (uint64_t)(int64_t)w.client.hello.partition);
    kl_canon_u64(&old, 0x07, w.client.hello.member);
    kl_canon_bytes(&old, 0x08, good.session_id, 16);
    kl_canon_u64(&old, 0x09, (uint64_t)good.expires_unix_ms);
    ck_assert(!old.oom);
    ck_assert_int_eq(crypto_sign_verify_detached(good.member_signature, old.buf, old.len, w.member.pk), 0);
}
END_TEST

START_TEST(session_member_signature_forged)
{
    world w;
    world_init(&w);
    world_hello(&w, NOW);
    kl_err e;
    /* A daemon holding another member key (an impostor) answers. */
    kl_session_accept_params p = params_for(&w, NOW);
    p.member_secret = w.other.sk;
    kl_session_hello_answer forged;
    kl_session d, c;
    ck_assert_int_eq(kl_session_accept(&w.client.hello, &p, &forged, &d, &e), KL_OK);
    secret_add(d.rx, sizeof d.rx);
    secret_add(d.tx, sizeof d.tx);
    kl_session_client before = w.client;
    ASSERT_FAIL(kl_session_finish(&w.client, &forged, w.member.pk, &c, &e), e, KL_UNAUTHENTICATED,
                "bad_member_signature");
    /* The client is left as it was (it may still take the genuine answer). */
    ck_assert_mem_eq(&before, &w.client, sizeof before);
    uint8_t zero[sizeof c];
    memset(zero, 0, sizeof zero);
    ck_assert_mem_eq(&c, zero, sizeof c);

    /* The genuine answer, each signed field changed after signing. */
    kl_session_hello_answer good, t;
    p = params_for(&w, NOW);
    ck_assert_int_eq(kl_session_accept(&w.client.hello, &p, &good, &d, &e), KL_OK);
    t = good; t.server_kx_pk[0] ^= 1;
    ASSERT_FAIL(kl_session_finish(&w.client, &t, w.member.pk, &c, &e), e, KL_UNAUTHENTICATED,
                "bad_member_signature");
    t = good; t.session_id[3] ^= 1;
    ASSERT_FAIL(kl_session_finish(&w.client, &t, w.member.pk, &c, &e), e, KL_UNAUTHENTICATED,
                "bad_member_signature");
    t = good; t.expires_unix_ms += 3600000;
    ASSERT_FAIL(kl_session_finish(&w.client, &t, w.member.pk, &c, &e), e, KL_UNAUTHENTICATED,
                "bad_member_signature");
    t = good; t.member_signature[0] ^= 1;
    ASSERT_FAIL(kl_session_finish(&w.client, &t, w.member.pk, &c, &e), e, KL_UNAUTHENTICATED,
                "bad_member_signature");
    /* An answer made for another Hello (another ephemeral key) does not verify either. */
    kl_session_client other_hello;
    ck_assert_int_eq(kl_session_hello_new(PRINCIPAL, w.principal.sk, CLUSTER, 1, 2, NOW, det_fill,
                                          &w.client_rand, &other_hello, &e), KL_OK);
    ASSERT_FAIL(kl_session_finish(&other_hello, &good, w.member.pk, &c, &e), e,
                KL_UNAUTHENTICATED, "bad_member_signature");
    /* The genuine answer, untouched, finishes. */
    ck_assert_int_eq(kl_session_finish(&w.client, &good, w.member.pk, &c, &e), KL_OK);
}
END_TEST

/* ---- sealing ---- */

START_TEST(session_tampered_seal)
{
    world w;
    world_init(&w);
    world_session(&w);
    const uint8_t ad[] = "keyload.v1.Batch";
    uint8_t pt[100], sealed[100 + KL_SESSION_SEAL_OVERHEAD], bad[sizeof sealed], out[100];
    memset(pt, 'p', sizeof pt);
    secret_add(pt, sizeof pt);
    size_t sl, ol;
    kl_err e;
    ck_assert_int_eq(kl_session_seal_request(&w.cs, 1, pt, sizeof pt, ad, sizeof ad, sealed,
                                             sizeof sealed, &sl, &e), KL_OK);
    kl_session before = w.ds;
    /* Every byte flipped (ciphertext and tag), one at a time. */
    for (size_t i = 0; i < sl; i++) {
        memcpy(bad, sealed, sl);
        bad[i] ^= 0x01;
        ASSERT_FAIL(kl_session_open_request(&w.ds, 1, bad, sl, ad, sizeof ad, out, sizeof out, &ol,
                                            &e), e, KL_UNAUTHENTICATED, "bad_seal");
        ck_assert_uint_eq(ol, 0);
    }
    /* Truncated, and shorter than the tag. */
    ASSERT_FAIL(kl_session_open_request(&w.ds, 1, sealed, sl - 1, ad, sizeof ad, out, sizeof out,
                                        &ol, &e), e, KL_UNAUTHENTICATED, "bad_seal");
    ASSERT_FAIL(kl_session_open_request(&w.ds, 1, sealed, 15, ad, sizeof ad, out, sizeof out, &ol,
                                        &e), e, KL_UNAUTHENTICATED, "bad_seal");
    /* Tampered associated data: the caller's AD, the counter, the session id. */
    const uint8_t ad2[] = "keyload.v1.Batcj";
    ASSERT_FAIL(kl_session_open_request(&w.ds, 1, sealed, sl, ad2, sizeof ad2, out, sizeof out,
                                        &ol, &e), e, KL_UNAUTHENTICATED, "bad_seal");
    ASSERT_FAIL(kl_session_open_request(&w.ds, 1, sealed, sl, NULL, 0, out, sizeof out, &ol, &e), e,
                KL_UNAUTHENTICATED, "bad_seal");
    ASSERT_FAIL(kl_session_open_request(&w.ds, 2, sealed, sl, ad, sizeof ad, out, sizeof out, &ol,
                                        &e), e, KL_UNAUTHENTICATED, "bad_seal");
    kl_session other_id = w.ds;
    other_id.id[0] ^= 1;
    ASSERT_FAIL(kl_session_open_request(&other_id, 1, sealed, sl, ad, sizeof ad, out, sizeof out,
                                        &ol, &e), e, KL_UNAUTHENTICATED, "bad_seal");
    /* A request is not an answer: the client cannot open its own request as an answer. */
    ASSERT_FAIL(kl_session_open_answer(&w.cs, 1, sealed, sl, ad, sizeof ad, out, sizeof out, &ol,
                                       &e), e, KL_UNAUTHENTICATED, "bad_seal");
    /* "Touches nothing": the daemon's session is exactly as before every failed open. */
    ck_assert_mem_eq(&before, &w.ds, sizeof before);
    /* And the genuine request still opens, once. */
    ck_assert_int_eq(kl_session_open_request(&w.ds, 1, sealed, sl, ad, sizeof ad, out, sizeof out,
                                             &ol, &e), KL_OK);
    ck_assert_mem_eq(out, pt, sizeof pt);
    ASSERT_FAIL(kl_session_open_request(&w.ds, 1, sealed, sl, ad, sizeof ad, out, sizeof out, &ol,
                                        &e), e, KL_UNAUTHENTICATED, "replayed_counter");
    /* A tampered answer. */
    ck_assert_int_eq(kl_session_seal_answer(&w.ds, 1, pt, sizeof pt, ad, sizeof ad, sealed,
                                            sizeof sealed, &sl, &e), KL_OK);
    kl_session cbefore = w.cs;
    for (size_t i = 0; i < sl; i += 7) {
        memcpy(bad, sealed, sl);
        bad[i] ^= 0x40;
        ASSERT_FAIL(kl_session_open_answer(&w.cs, 1, bad, sl, ad, sizeof ad, out, sizeof out, &ol,
                                           &e), e, KL_UNAUTHENTICATED, "bad_seal");
    }
    ASSERT_FAIL(kl_session_open_answer(&w.cs, 1, sealed, sl, ad2, sizeof ad2, out, sizeof out, &ol,
                                       &e), e, KL_UNAUTHENTICATED, "bad_seal");
    ck_assert_mem_eq(&cbefore, &w.cs, sizeof cbefore);
    ck_assert_int_eq(kl_session_open_answer(&w.cs, 1, sealed, sl, ad, sizeof ad, out, sizeof out,
                                            &ol, &e), KL_OK);
}
END_TEST

START_TEST(session_answer_swapped)
{
    world w;
    world_init(&w);
    world_session(&w);
    uint8_t r1[40], r2[40], a1[40], a2[40], out[40];
    size_t l1, l2, la1, la2, ol;
    kl_err e;
    /* Two requests in flight. */
    ck_assert_int_eq(kl_session_seal_request(&w.cs, 1, (const uint8_t *)"one", 3, NULL, 0, r1,
                                             sizeof r1, &l1, &e), KL_OK);
    ck_assert_int_eq(kl_session_seal_request(&w.cs, 2, (const uint8_t *)"two", 3, NULL, 0, r2,
                                             sizeof r2, &l2, &e), KL_OK);
    ck_assert_int_eq(kl_session_open_request(&w.ds, 2, r2, l2, NULL, 0, out, sizeof out, &ol, &e),
                     KL_OK);
    ck_assert_int_eq(kl_session_open_request(&w.ds, 1, r1, l1, NULL, 0, out, sizeof out, &ol, &e),
                     KL_OK);
    /* Answers of the same length, so only the binding tells them apart. */
    ck_assert_int_eq(kl_session_seal_answer(&w.ds, 1, (const uint8_t *)"ok1", 3, NULL, 0, a1,
                                            sizeof a1, &la1, &e), KL_OK);
    ck_assert_int_eq(kl_session_seal_answer(&w.ds, 2, (const uint8_t *)"ok2", 3, NULL, 0, a2,
                                            sizeof a2, &la2, &e), KL_OK);
    ASSERT_FAIL(kl_session_open_answer(&w.cs, 1, a2, la2, NULL, 0, out, sizeof out, &ol, &e), e,
                KL_UNAUTHENTICATED, "bad_seal");
    ASSERT_FAIL(kl_session_open_answer(&w.cs, 2, a1, la1, NULL, 0, out, sizeof out, &ol, &e), e,
                KL_UNAUTHENTICATED, "bad_seal");
    ck_assert_int_eq(kl_session_open_answer(&w.cs, 1, a1, la1, NULL, 0, out, sizeof out, &ol, &e),
                     KL_OK);
    ck_assert_mem_eq(out, "ok1", 3);
    ck_assert_int_eq(kl_session_open_answer(&w.cs, 2, a2, la2, NULL, 0, out, sizeof out, &ol, &e),
                     KL_OK);
    ck_assert_mem_eq(out, "ok2", 3);
    /* An answer to a counter the client never sealed. */
    ASSERT_FAIL(kl_session_open_answer(&w.cs, 3, a2, la2, NULL, 0, out, sizeof out, &ol, &e), e,
                KL_UNAUTHENTICATED, "bad_counter");
    /* A request sealed as an answer does not open as a request (direction in nonce and AD). */
    ASSERT_FAIL(kl_session_open_request(&w.ds, 3, a2, la2, NULL, 0, out, sizeof out, &ol, &e), e,
                KL_UNAUTHENTICATED, "bad_seal");
    /* The daemon seals answers only to requests it opened. */
    ASSERT_FAIL(kl_session_seal_answer(&w.ds, 5, (const uint8_t *)"x", 1, NULL, 0, a1, sizeof a1,
                                       &la1, &e), e, KL_INVALID_ARGUMENT, "request_counter");
    ASSERT_FAIL(kl_session_seal_answer(&w.ds, 0, (const uint8_t *)"x", 1, NULL, 0, a1, sizeof a1,
                                       &la1, &e), e, KL_INVALID_ARGUMENT, "request_counter");
}
END_TEST

/* Seals request `counter` on the client (forcing the counter, as a test may) and opens it
 * on the daemon; returns the open's code. */
static kl_code req_round(world *w, uint64_t counter, kl_err *e)
{
    uint8_t sealed[8 + KL_SESSION_SEAL_OVERHEAD], out[8];
    size_t sl, ol;
    kl_session c = w->cs;
    c.next_counter = 1;   /* a test copy: replay an old counter as an attacker would resend */
    ck_assert_int_eq(kl_session_seal_request(&c, counter, (const uint8_t *)"request!", 8, NULL, 0,
                                             sealed, sizeof sealed, &sl, e), KL_OK);
    kl_session before = w->ds;
    kl_code rc = kl_session_open_request(&w->ds, counter, sealed, sl, NULL, 0, out, sizeof out,
                                         &ol, e);
    if (rc != KL_OK)
        ck_assert_mem_eq(&before, &w->ds, sizeof before);
    return rc;
}

START_TEST(session_replay_window)
{
    world w;
    world_init(&w);
    world_session(&w);
    kl_err e;
    /* Replayed counter. */
    ck_assert_int_eq(req_round(&w, 1, &e), KL_OK);
    ASSERT_FAIL(req_round(&w, 1, &e), e, KL_UNAUTHENTICATED, "replayed_counter");
    /* Counter 0 is never sealed. */
    uint8_t junk[KL_SESSION_SEAL_OVERHEAD] = {0}, out[1];
    size_t ol;
    ASSERT_FAIL(kl_session_open_request(&w.ds, 0, junk, sizeof junk, NULL, 0, out, sizeof out, &ol,
                                        &e), e, KL_UNAUTHENTICATED, "bad_counter");
    /* Out of order within the window: each accepted once. */
    const uint64_t order[] = {10, 5, 8, 3, 9, 2, 7, 4, 6};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        ck_assert_int_eq(req_round(&w, order[i], &e), KL_OK);
    for (uint64_t c = 1; c <= 10; c++)
        ASSERT_FAIL(req_round(&w, c, &e), e, KL_UNAUTHENTICATED, "replayed_counter");
    ck_assert_uint_eq(w.ds.highest, 10);
    /* Jump ahead: 100 is highest; the window is 37..100. 36 is too old even though it was
     * never used; 37 is the oldest still accepted; 99 and 50 too, once. */
    ck_assert_int_eq(req_round(&w, 100, &e), KL_OK);
    ASSERT_FAIL(req_round(&w, 36, &e), e, KL_UNAUTHENTICATED, "replayed_counter");
    ASSERT_FAIL(req_round(&w, 10, &e), e, KL_UNAUTHENTICATED, "replayed_counter");
    ck_assert_int_eq(req_round(&w, 100 - (KL_SESSION_WINDOW - 1), &e), KL_OK);
    ck_assert_int_eq(req_round(&w, 99, &e), KL_OK);
    ck_assert_int_eq(req_round(&w, 50, &e), KL_OK);
    ASSERT_FAIL(req_round(&w, 37, &e), e, KL_UNAUTHENTICATED, "replayed_counter");
    ASSERT_FAIL(req_round(&w, 50, &e), e, KL_UNAUTHENTICATED, "replayed_counter");
    /* Sliding by exactly the window, and by more than it. */
    ck_assert_int_eq(req_round(&w, 164, &e), KL_OK);
    ASSERT_FAIL(req_round(&w, 100, &e), e, KL_UNAUTHENTICATED, "replayed_counter");
    ck_assert_int_eq(req_round(&w, 101, &e), KL_OK);
    ck_assert_int_eq(req_round(&w, 1000000, &e), KL_OK);
    ASSERT_FAIL(req_round(&w, 164, &e), e, KL_UNAUTHENTICATED, "replayed_counter");
    ck_assert_int_eq(req_round(&w, 999999, &e), KL_OK);
    ck_assert_uint_eq(w.ds.window, 3);
}
END_TEST

START_TEST(session_client_counters)
{
    world w;
    world_init(&w);
    world_session(&w);
    uint8_t sealed[64], out[64];
    size_t sl, ol;
    kl_err e;
    /* The client never seals two requests under one counter. */
    ck_assert_int_eq(kl_session_seal_request(&w.cs, 5, (const uint8_t *)"a", 1, NULL, 0, sealed,
                                             sizeof sealed, &sl, &e), KL_OK);
    ck_assert_uint_eq(w.cs.next_counter, 6);
    ASSERT_FAIL(kl_session_seal_request(&w.cs, 5, (const uint8_t *)"b", 1, NULL, 0, sealed,
                                        sizeof sealed, &sl, &e), e, KL_INVALID_ARGUMENT, "counter");
    ASSERT_FAIL(kl_session_seal_request(&w.cs, 1, (const uint8_t *)"b", 1, NULL, 0, sealed,
                                        sizeof sealed, &sl, &e), e, KL_INVALID_ARGUMENT, "counter");
    ASSERT_FAIL(kl_session_seal_request(&w.cs, UINT64_MAX, (const uint8_t *)"b", 1, NULL, 0,
                                        sealed, sizeof sealed, &sl, &e), e, KL_INVALID_ARGUMENT,
                "counter");
    ck_assert_uint_eq(w.cs.next_counter, 6);
    /* Buffers and roles. */
    ASSERT_FAIL(kl_session_seal_request(&w.cs, 6, (const uint8_t *)"abc", 3, NULL, 0, sealed,
                                        3 + KL_SESSION_SEAL_OVERHEAD - 1, &sl, &e), e,
                KL_INVALID_ARGUMENT, "out_cap");
    ck_assert_uint_eq(w.cs.next_counter, 6);
    uint8_t big_ad[KL_SESSION_AD_MAX + 1] = {0};
    ASSERT_FAIL(kl_session_seal_request(&w.cs, 6, (const uint8_t *)"abc", 3, big_ad, sizeof big_ad,
                                        sealed, sizeof sealed, &sl, &e), e, KL_INVALID_ARGUMENT,
                "ad_len");
    ck_assert_int_eq(kl_session_seal_request(&w.cs, 6, (const uint8_t *)"abc", 3, big_ad,
                                             KL_SESSION_AD_MAX, sealed, sizeof sealed, &sl, &e),
                     KL_OK);
    ASSERT_FAIL(kl_session_open_request(&w.ds, 6, sealed, sl, big_ad, KL_SESSION_AD_MAX, out, 2,
                                        &ol, &e), e, KL_INVALID_ARGUMENT, "out_cap");
    ck_assert_uint_eq(w.ds.highest, 0);
    ck_assert_int_eq(kl_session_open_request(&w.ds, 6, sealed, sl, big_ad, KL_SESSION_AD_MAX, out,
                                             3, &ol, &e), KL_OK);
    ASSERT_FAIL(kl_session_seal_request(&w.ds, 7, (const uint8_t *)"a", 1, NULL, 0, sealed,
                                        sizeof sealed, &sl, &e), e, KL_INVALID_ARGUMENT, "role");
    ASSERT_FAIL(kl_session_open_request(&w.cs, 6, sealed, sl, NULL, 0, out, sizeof out, &ol, &e),
                e, KL_INVALID_ARGUMENT, "role");
    ASSERT_FAIL(kl_session_seal_answer(&w.cs, 6, (const uint8_t *)"a", 1, NULL, 0, sealed,
                                       sizeof sealed, &sl, &e), e, KL_INVALID_ARGUMENT, "role");
    ASSERT_FAIL(kl_session_open_answer(&w.ds, 6, sealed, sl, NULL, 0, out, sizeof out, &ol, &e), e,
                KL_INVALID_ARGUMENT, "role");
    kl_session wiped = w.cs;
    kl_session_wipe(&wiped);
    ASSERT_FAIL(kl_session_seal_request(&wiped, 7, (const uint8_t *)"a", 1, NULL, 0, sealed,
                                        sizeof sealed, &sl, &e), e, KL_INVALID_ARGUMENT, "role");
}
END_TEST

START_TEST(session_expiry)
{
    world w;
    world_init(&w);
    world_session(&w);
    ck_assert_int_eq(w.ds.expires_unix_ms, NOW + TTL);
    ck_assert(!kl_session_expired(&w.ds, NOW));
    ck_assert(!kl_session_expired(&w.ds, NOW + TTL - 1));
    ck_assert(kl_session_expired(&w.ds, NOW + TTL));
    ck_assert(kl_session_expired(&w.ds, INT64_MAX));
    ck_assert(!kl_session_expired(&w.cs, NOW + TTL - 1));
    ck_assert(kl_session_expired(&w.cs, NOW + TTL));
}
END_TEST

START_TEST(session_wire_checks)
{
    world w;
    world_init(&w);
    world_hello(&w, NOW);
    Keyload__V1__Hello m;
    kl_session_hello h;
    kl_err e;
    uint8_t b31[31] = {0}, b65[65] = {0};
    kl_session_hello_to_pb(&w.client.hello, &m);
    m.client_kx_pk.data = b31;
    m.client_kx_pk.len = sizeof b31;
    ASSERT_FAIL(kl_session_hello_from_pb(&m, &h, &e), e, KL_INVALID_ARGUMENT, "client_kx_pk");
    kl_session_hello_to_pb(&w.client.hello, &m);
    m.signature.data = b65;
    m.signature.len = sizeof b65;
    ASSERT_FAIL(kl_session_hello_from_pb(&m, &h, &e), e, KL_INVALID_ARGUMENT, "signature");
    kl_session_hello_to_pb(&w.client.hello, &m);
    m.principal_id = "";
    ASSERT_FAIL(kl_session_hello_from_pb(&m, &h, &e), e, KL_INVALID_ARGUMENT, "principal_id");
    char long_name[KL_SESSION_PRINCIPAL_MAX + 2];
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    m.principal_id = long_name;
    ASSERT_FAIL(kl_session_hello_from_pb(&m, &h, &e), e, KL_INVALID_ARGUMENT, "principal_id");
    long_name[KL_SESSION_PRINCIPAL_MAX] = '\0';
    m.principal_id = long_name;
    ck_assert_int_eq(kl_session_hello_from_pb(&m, &h, &e), KL_OK);
    kl_session_hello_to_pb(&w.client.hello, &m);
    m.cluster = long_name;
    ASSERT_FAIL(kl_session_hello_from_pb(&m, &h, &e), e, KL_INVALID_ARGUMENT, "cluster");
    /* A Hello struct whose strings are not terminated is refused, not read past. */
    h = w.client.hello;
    memset(h.principal_id, 'x', sizeof h.principal_id);
    kl_session_accept_params p = params_for(&w, NOW);
    kl_session_hello_answer a;
    kl_session d;
    ASSERT_FAIL(kl_session_accept(&h, &p, &a, &d, &e), e, KL_INVALID_ARGUMENT, "principal_id");
    /* The client refuses to make a Hello with bad names. */
    kl_session_client c;
    ASSERT_FAIL(kl_session_hello_new("", w.principal.sk, CLUSTER, 1, 2, NOW, NULL, NULL, &c, &e), e,
                KL_INVALID_ARGUMENT, "principal_id");
    ASSERT_FAIL(kl_session_hello_new(PRINCIPAL, w.principal.sk, long_name, 1, 2, NOW, NULL, NULL,
                                     &c, &e), e, KL_INVALID_ARGUMENT, "cluster");

    kl_session_accept_params ap = params_for(&w, NOW);
    kl_session_hello_answer ans;
    ck_assert_int_eq(kl_session_accept(&w.client.hello, &ap, &ans, &d, &e), KL_OK);
    Keyload__V1__HelloAnswer am;
    kl_session_hello_answer got;
    kl_session_answer_to_pb(&ans, &am);
    am.session_id.len = 15;
    ASSERT_FAIL(kl_session_answer_from_pb(&am, &got, &e), e, KL_INVALID_ARGUMENT, "session_id");
    uint8_t z16[16] = {0};
    am.session_id.data = z16;
    am.session_id.len = 16;
    ASSERT_FAIL(kl_session_answer_from_pb(&am, &got, &e), e, KL_INVALID_ARGUMENT, "session_id");
    kl_session_answer_to_pb(&ans, &am);
    am.server_kx_pk.len = 0;
    am.server_kx_pk.data = NULL;
    ASSERT_FAIL(kl_session_answer_from_pb(&am, &got, &e), e, KL_INVALID_ARGUMENT, "server_kx_pk");
    kl_session_answer_to_pb(&ans, &am);
    am.member_signature.len = 63;
    ASSERT_FAIL(kl_session_answer_from_pb(&am, &got, &e), e, KL_INVALID_ARGUMENT,
                "member_signature");
}
END_TEST

/* ---- database signing keys ---- */

START_TEST(keys_database_signing)
{
    ck_assert_int_ge(sodium_init(), 0);
    n_secrets = 0;
    uint8_t s1[KL_CLUSTER_SECRET_LEN], s2[KL_CLUSTER_SECRET_LEN];
    memset(s1, 0x11, sizeof s1);
    memset(s2, 0x11, sizeof s2);
    s2[31] ^= 1;
    uint8_t pk[4][32], sk[4][64], id[4][KL_DATABASE_KEY_ID_LEN];
    kl_err e;
    ck_assert_int_eq(kl_keys_database_signing(s1, 7, pk[0], sk[0], id[0], &e), KL_OK);
    ck_assert_int_eq(kl_keys_database_signing(s1, 7, pk[1], sk[1], id[1], &e), KL_OK);
    ck_assert_int_eq(kl_keys_database_signing(s1, 8, pk[2], sk[2], id[2], &e), KL_OK);
    ck_assert_int_eq(kl_keys_database_signing(s2, 7, pk[3], sk[3], id[3], &e), KL_OK);
    /* Deterministic per (secret, id). */
    ck_assert_mem_eq(pk[0], pk[1], 32);
    ck_assert_mem_eq(sk[0], sk[1], 64);
    ck_assert_mem_eq(id[0], id[1], KL_DATABASE_KEY_ID_LEN);
    /* Different across ids and across secrets. */
    ck_assert(memcmp(pk[0], pk[2], 32) != 0);
    ck_assert(memcmp(pk[0], pk[3], 32) != 0);
    ck_assert(memcmp(id[0], id[2], KL_DATABASE_KEY_ID_LEN) != 0);
    ck_assert(memcmp(id[0], id[3], KL_DATABASE_KEY_ID_LEN) != 0);
    /* key_id = first 8 bytes of BLAKE2b-256(pk); the pair signs and verifies. */
    uint8_t h[32];
    crypto_generichash(h, sizeof h, pk[2], 32, NULL, 0);
    ck_assert_mem_eq(id[2], h, KL_DATABASE_KEY_ID_LEN);
    uint8_t sig[64];
    crypto_sign_detached(sig, NULL, (const uint8_t *)"m", 1, sk[2]);
    ck_assert_int_eq(crypto_sign_verify_detached(sig, (const uint8_t *)"m", 1, pk[2]), 0);
    /* The seed is the documented KDF output (a cross-check of the derivation). */
    uint8_t seed[32], pk2[32], sk2[64];
    ck_assert_int_eq(crypto_kdf_derive_from_key(seed, 32, 8, "KLdbsign", s1), 0);
    crypto_sign_seed_keypair(pk2, sk2, seed);
    ck_assert_mem_eq(pk2, pk[2], 32);
    /* Database 0 and the largest id work too. */
    ck_assert_int_eq(kl_keys_database_signing(s1, 0, pk[1], sk[1], id[1], &e), KL_OK);
    ck_assert_int_eq(kl_keys_database_signing(s1, UINT64_MAX, pk[1], sk[1], id[1], &e), KL_OK);
    ck_assert(memcmp(pk[1], pk[0], 32) != 0);
    sodium_memzero(sk, sizeof sk);
    sodium_memzero(sk2, sizeof sk2);
    sodium_memzero(seed, sizeof seed);
}
END_TEST

/* ---- a printed figure (not an assertion): daemon-side handshake and seal+open CPU time ---- */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

START_TEST(session_timing)
{
    enum { N = 2000 };
    world w;
    world_init(&w);
    world_hello(&w, NOW);
    static int64_t t_accept[N], t_seal[N], t_open[N];
    kl_session_accept_params p = params_for(&w, NOW);
    p.random = NULL;
    kl_err e;
    for (int i = 0; i < N; i++) {
        kl_session_hello_answer a;
        int64_t t0 = cpu_ns();
        kl_code rc = kl_session_accept(&w.client.hello, &p, &a, &w.ds, &e);
        t_accept[i] = cpu_ns() - t0;
        ck_assert_int_eq(rc, KL_OK);
        if (i == N - 1)
            w.answer = a;
    }
    ck_assert_int_eq(kl_session_finish(&w.client, &w.answer, w.member.pk, &w.cs, &e), KL_OK);
    uint8_t pt[100], sealed[100 + KL_SESSION_SEAL_OVERHEAD], out[100];
    memset(pt, 'q', sizeof pt);
    const uint8_t ad[] = "keyload.v1.Batch";
    for (int i = 0; i < N; i++) {
        size_t sl, ol;
        int64_t t0 = cpu_ns();
        kl_code rc = kl_session_seal_request(&w.cs, (uint64_t)i + 1, pt, sizeof pt, ad, sizeof ad,
                                             sealed, sizeof sealed, &sl, &e);
        int64_t t1 = cpu_ns();
        kl_code rc2 = kl_session_open_request(&w.ds, (uint64_t)i + 1, sealed, sl, ad, sizeof ad,
                                              out, sizeof out, &ol, &e);
        int64_t t2 = cpu_ns();
        ck_assert_int_eq(rc, KL_OK);
        ck_assert_int_eq(rc2, KL_OK);
        t_seal[i] = t1 - t0;
        t_open[i] = t2 - t1;
    }
    qsort(t_accept, N, sizeof t_accept[0], cmp_i64);
    qsort(t_seal, N, sizeof t_seal[0], cmp_i64);
    qsort(t_open, N, sizeof t_open[0], cmp_i64);
    printf("session timing (this build; median of %d, thread CPU): accept %.1f us, "
           "seal 100 B %.2f us, open 100 B %.2f us\n",
           N, t_accept[N / 2] / 1000.0, t_seal[N / 2] / 1000.0, t_open[N / 2] / 1000.0);
}
END_TEST

Suite *suite_session(void)
{
    Suite *s = suite_create("session");
    TCase *t = tcase_create("handshake");
    tcase_add_test(t, session_round_trip);
    tcase_add_test(t, session_random_source_default);
    tcase_add_test(t, session_hello_wrong_key);
    tcase_add_test(t, session_hello_wrong_target);
    tcase_add_test(t, session_hello_freshness);
    tcase_add_test(t, session_member_signature_forged);
    tcase_add_test(t, session_aead_negotiation);
    tcase_add_test(t, session_wire_checks);
    suite_add_tcase(s, t);
    t = tcase_create("sealing");
    tcase_add_test(t, session_tampered_seal);
    tcase_add_test(t, session_answer_swapped);
    tcase_add_test(t, session_replay_window);
    tcase_add_test(t, session_client_counters);
    tcase_add_test(t, session_expiry);
    suite_add_tcase(s, t);
    t = tcase_create("keys");
    tcase_add_test(t, keys_database_signing);
    suite_add_tcase(s, t);
    t = tcase_create("timing");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, session_timing);
    suite_add_tcase(s, t);
    return s;
}
