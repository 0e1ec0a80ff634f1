/* Unit tests of daemon/rpc/sessions.c: the bounded session table (bounds, eviction,
 * expiry, per-principal cap, the hash index under churn). Sessions here are made by hand:
 * the table only reads role, id, principal and expiry. */
#include "daemon/rpc/sessions.h"

#include <check.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#define NOW 1700000000000LL

static void entry(kl_session_entry *e, uint32_t n, const char *principal, int64_t expires)
{
    memset(e, 0, sizeof *e);
    e->s.role = KL_SESSION_DAEMON;
    /* Distinct ids whose first bytes collide often (n >> 8 only), so probe runs are long. */
    e->s.id[0] = (uint8_t)(n >> 8);
    e->s.id[1] = 0x40;
    memcpy(e->s.id + 8, &n, sizeof n);
    e->s.id[15] |= 1;
    snprintf(e->s.principal_id, sizeof e->s.principal_id, "%s", principal);
    snprintf(e->tenant, sizeof e->tenant, "t");
    e->s.expires_unix_ms = expires;
}

static kl_sessions *table(size_t max, size_t per)
{
    kl_sessions *t;
    kl_err err;
    ck_assert_int_eq(kl_sessions_new(max, per, &t, &err), KL_OK);
    return t;
}

static bool present(kl_sessions *t, uint32_t n, int64_t now)
{
    kl_session_entry e, *got;
    kl_err err;
    entry(&e, n, "x", 0);
    kl_code rc = kl_sessions_find(t, e.s.id, now, &got, &err);
    if (rc == KL_OK)
        ck_assert_int_eq(memcmp(got->s.id, e.s.id, KL_SESSION_ID_LEN), 0);
    return rc == KL_OK;
}

START_TEST(bounds_are_checked)
{
    kl_sessions *t;
    kl_err err;
    ck_assert_int_eq(kl_sessions_new(0, 1, &t, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "max");
    ck_assert_int_eq(kl_sessions_new(KL_SESSIONS_MAX + 1, 1, &t, &err), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_sessions_new(8, 9, &t, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "per_principal");
    ck_assert_int_eq(kl_sessions_new(8, 0, &t, &err), KL_INVALID_ARGUMENT);
    t = table(KL_SESSIONS_MAX, KL_SESSIONS_PER_PRINCIPAL);
    kl_session_entry e;
    entry(&e, 1, "alice", NOW + 10);
    e.s.role = KL_SESSION_CLIENT;
    ck_assert_int_eq(kl_sessions_put(t, &e, NOW, NULL, &err), KL_INVALID_ARGUMENT);
    entry(&e, 1, "", NOW + 10);
    ck_assert_int_eq(kl_sessions_put(t, &e, NOW, NULL, &err), KL_INVALID_ARGUMENT);
    entry(&e, 1, "alice", NOW);
    ck_assert_int_eq(kl_sessions_put(t, &e, NOW, NULL, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "expires_unix_ms");
    entry(&e, 1, "alice", NOW + 10);
    ck_assert_int_eq(kl_sessions_put(t, &e, NOW, NULL, &err), KL_OK);
    ck_assert_int_eq(kl_sessions_put(t, &e, NOW, NULL, &err), KL_CONFLICT);
    ck_assert_str_eq(err.detail, "session_id");
    ck_assert_uint_eq(kl_sessions_count(t), 1);
    kl_sessions_free(t);
    kl_sessions_free(NULL);
}
END_TEST

START_TEST(find_unknown_and_expired)
{
    kl_sessions *t = table(16, 4);
    kl_session_entry e, *got;
    kl_err err;
    entry(&e, 7, "alice", NOW + 100);
    ck_assert_int_eq(kl_sessions_find(t, e.s.id, NOW, &got, &err), KL_UNAUTHENTICATED);
    ck_assert_str_eq(err.detail, "session_unknown");
    ck_assert_int_eq(kl_sessions_put(t, &e, NOW, NULL, &err), KL_OK);
    ck_assert_int_eq(kl_sessions_find(t, e.s.id, NOW + 99, &got, &err), KL_OK);
    ck_assert_str_eq(got->s.principal_id, "alice");
    ck_assert_str_eq(got->tenant, "t");
    /* At its expiry it is refused once as expired, and dropped. */
    ck_assert_int_eq(kl_sessions_find(t, e.s.id, NOW + 100, &got, &err), KL_UNAUTHENTICATED);
    ck_assert_str_eq(err.detail, "session_expired");
    ck_assert_ptr_null(got);
    ck_assert_uint_eq(kl_sessions_count(t), 0);
    ck_assert_int_eq(kl_sessions_find(t, e.s.id, NOW, &got, &err), KL_UNAUTHENTICATED);
    ck_assert_str_eq(err.detail, "session_unknown");
    /* Drop. */
    ck_assert_int_eq(kl_sessions_put(t, &e, NOW, NULL, &err), KL_OK);
    ck_assert(kl_sessions_drop(t, e.s.id));
    ck_assert(!kl_sessions_drop(t, e.s.id));
    ck_assert_uint_eq(kl_sessions_count(t), 0);
    kl_sessions_free(t);
}
END_TEST

START_TEST(per_principal_cap_evicts_own_oldest)
{
    kl_sessions *t = table(32, 3);
    kl_session_entry e;
    kl_sessions_evicted ev;
    kl_err err;
    entry(&e, 100, "bob", NOW + 5000);
    ck_assert_int_eq(kl_sessions_put(t, &e, NOW, &ev, &err), KL_OK);
    /* alice: expiries 3000, 1000, 2000: the one at 1000 goes first, then 2000. */
    int64_t exp[] = {3000, 1000, 2000, 4000, 5000};
    for (uint32_t i = 0; i < 5; i++) {
        entry(&e, 1 + i, "alice", NOW + exp[i]);
        ck_assert_int_eq(kl_sessions_put(t, &e, NOW, &ev, &err), KL_OK);
        ck_assert_uint_eq(ev.principal_evicted, i >= 3 ? 1 : 0);
        ck_assert_uint_eq(ev.table_evicted, 0);
        ck_assert_uint_le(kl_sessions_count_principal(t, "alice"), 3);
    }
    ck_assert(!present(t, 2, NOW)); /* expiry 1000 */
    ck_assert(!present(t, 3, NOW)); /* expiry 2000 */
    ck_assert(present(t, 1, NOW) && present(t, 4, NOW) && present(t, 5, NOW));
    ck_assert(present(t, 100, NOW)); /* another principal is untouched */
    ck_assert_uint_eq(kl_sessions_count_principal(t, "bob"), 1);
    ck_assert_uint_eq(kl_sessions_count(t), 4);
    kl_sessions_free(t);
}
END_TEST

START_TEST(full_table_evicts_closest_to_expiry)
{
    kl_sessions *t = table(8, 8);
    kl_session_entry e;
    kl_sessions_evicted ev;
    kl_err err;
    char who[16];
    for (uint32_t i = 0; i < 8; i++) {
        snprintf(who, sizeof who, "p%u", i);
        /* p5 expires first. */
        entry(&e, 10 + i, who, NOW + (i == 5 ? 500 : 1000 + i));
        ck_assert_int_eq(kl_sessions_put(t, &e, NOW, &ev, &err), KL_OK);
        ck_assert_uint_eq(ev.table_evicted, 0);
    }
    ck_assert_uint_eq(kl_sessions_count(t), 8);
    entry(&e, 99, "newcomer", NOW + 9000);
    ck_assert_int_eq(kl_sessions_put(t, &e, NOW, &ev, &err), KL_OK);
    ck_assert_uint_eq(ev.table_evicted, 1);
    ck_assert_uint_eq(ev.expired, 0);
    ck_assert_uint_eq(kl_sessions_count(t), 8);
    ck_assert(!present(t, 15, NOW));
    ck_assert(present(t, 99, NOW));
    /* Once some have expired, a put drops them all and evicts nothing live. */
    entry(&e, 98, "late", NOW + 9000);
    ck_assert_int_eq(kl_sessions_put(t, &e, NOW + 1003, &ev, &err), KL_OK);
    ck_assert_uint_eq(ev.expired, 4); /* p0..p3 expire at 1000..1003 */
    ck_assert_uint_eq(ev.table_evicted, 0);
    ck_assert_uint_eq(kl_sessions_count(t), 5);
    kl_sessions_free(t);
}
END_TEST

/* Many puts and drops through a full table: every present session is found, every removed
 * one is not (backward-shift deletion keeps probe runs whole). */
START_TEST(index_survives_churn)
{
    enum { MAX = 256 };
    kl_sessions *t = table(MAX, MAX);
    static bool live[4096];
    memset(live, 0, sizeof live);
    kl_session_entry e;
    kl_sessions_evicted ev;
    kl_err err;
    uint32_t rnd = 12345;
    for (int step = 0; step < 20000; step++) {
        rnd = rnd * 1103515245u + 12345u;
        uint32_t n = (rnd >> 8) % 4096;
        if (live[n]) {
            entry(&e, n, "x", 0);
            ck_assert(kl_sessions_drop(t, e.s.id));
            live[n] = false;
        } else if (kl_sessions_count(t) < MAX) {
            entry(&e, n, "x", NOW + 1000000);
            ck_assert_int_eq(kl_sessions_put(t, &e, NOW, &ev, &err), KL_OK);
            ck_assert_uint_eq(ev.table_evicted + ev.principal_evicted + ev.expired, 0);
            live[n] = true;
        }
        if (step % 997 == 0) {
            size_t count = 0;
            for (uint32_t i = 0; i < 4096; i++) {
                ck_assert(present(t, i, NOW) == live[i]);
                count += live[i];
            }
            ck_assert_uint_eq(kl_sessions_count(t), count);
        }
    }
    kl_sessions_free(t);
}
END_TEST

/* The daemon's real bounds: the table holds KL_SESSIONS_MAX sessions and never more. */
/* Tenant A at its bound loses its own oldest session, never tenant B's; a full table
 * evicts from the tenant holding the most. */
START_TEST(tenant_at_its_bound_evicts_only_its_own)
{
    kl_sessions *t = table(16, 16);
    kl_err err;
    ck_assert_int_eq(kl_sessions_set_per_tenant(t, 0, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "sessions_per_tenant");
    ck_assert_int_eq(kl_sessions_set_per_tenant(t, 8, &err), KL_OK);
    kl_session_entry e;
    kl_sessions_evicted ev;
    for (uint32_t i = 0; i < 4; i++) { /* tenant B's four, closest to expiry of all */
        entry(&e, 100 + i, "b1", NOW + 10 + i);
        snprintf(e.tenant, sizeof e.tenant, "B");
        ck_assert_int_eq(kl_sessions_put(t, &e, NOW, &ev, &err), KL_OK);
    }
    for (uint32_t i = 0; i < 40; i++) { /* tenant A: many principals, many Hellos */
        char pr[16];
        snprintf(pr, sizeof pr, "a%u", i % 5);
        entry(&e, 200 + i, pr, NOW + 1000 + i);
        snprintf(e.tenant, sizeof e.tenant, "A");
        ck_assert_int_eq(kl_sessions_put(t, &e, NOW, &ev, &err), KL_OK);
        ck_assert_uint_le(kl_sessions_count_tenant(t, "A"), 8);
        ck_assert_uint_eq(kl_sessions_count_tenant(t, "B"), 4);
    }
    ck_assert_uint_eq(kl_sessions_tenant_evictions(t), 32);
    for (uint32_t i = 0; i < 4; i++)
        ck_assert(present(t, 100 + i, NOW));
    ck_assert(present(t, 239, NOW));  /* A's newest */
    ck_assert(!present(t, 200, NOW)); /* A's oldest went */
    /* Table full (4 tenants C..F fill it): the largest tenant (A, 8) pays, not B. */
    for (uint32_t i = 0; i < 8; i++) {
        entry(&e, 300 + i, "c", NOW + 5000 + i);
        snprintf(e.tenant, sizeof e.tenant, "C%u", i);
        ck_assert_int_eq(kl_sessions_put(t, &e, NOW, &ev, &err), KL_OK);
    }
    ck_assert_uint_eq(kl_sessions_count_tenant(t, "B"), 4);
    ck_assert_uint_eq(kl_sessions_count_tenant(t, "A"), 4);
    kl_sessions_free(t);
}
END_TEST

/* One Hello, one session: a repeat of the same signature is refused for at least a whole
 * window; other Hellos pass; a generation that is full refuses (retryably). */
START_TEST(hello_replay_is_refused_within_the_window)
{
    kl_sessions *t = table(8, 8);
    kl_err err;
    uint8_t sig[64], other[64];
    randombytes_buf(sig, sizeof sig);
    randombytes_buf(other, sizeof other);
    int64_t now = 5000;
    ck_assert_int_eq(kl_sessions_hello_seen(t, sig, sizeof sig, now, &err), KL_OK);
    ck_assert_int_eq(kl_sessions_hello_seen(t, sig, sizeof sig, now, &err), KL_UNAUTHENTICATED);
    ck_assert_str_eq(err.detail, "hello_replayed");
    ck_assert_int_eq(kl_sessions_hello_seen(t, other, sizeof other, now + 1, &err), KL_OK);
    /* Just under two windows later the first is still remembered (one rotation happened). */
    ck_assert_int_eq(kl_sessions_hello_seen(t, sig, sizeof sig, now + KL_HELLO_SEEN_WINDOW_MS, &err),
                     KL_UNAUTHENTICATED);
    ck_assert_int_eq(kl_sessions_hello_seen(t, sig, sizeof sig, now + 2 * KL_HELLO_SEEN_WINDOW_MS - 1, &err),
                     KL_UNAUTHENTICATED);
    /* Long after every window (no Hello is fresh that long) it is forgotten. */
    ck_assert_int_eq(kl_sessions_hello_seen(t, sig, sizeof sig, now + 5 * KL_HELLO_SEEN_WINDOW_MS, &err),
                     KL_OK);
    /* Fill the current generation: the next new Hello is UNAVAILABLE hello_rate. */
    int64_t later = now + 10 * KL_HELLO_SEEN_WINDOW_MS;
    kl_code rc = KL_OK;
    int accepted = 0;
    for (int i = 0; i < KL_HELLO_SEEN_MAX + 1 && rc == KL_OK; i++) {
        uint8_t s2[64];
        randombytes_buf(s2, sizeof s2);
        rc = kl_sessions_hello_seen(t, s2, sizeof s2, later, &err);
        if (rc == KL_OK)
            accepted++;
    }
    ck_assert_int_eq(rc, KL_UNAVAILABLE);
    ck_assert_str_eq(err.detail, "hello_rate");
    ck_assert_int_eq(accepted, KL_HELLO_SEEN_MAX);
    kl_sessions_free(t);
}
END_TEST

START_TEST(daemon_bounds_hold)
{
    kl_sessions *t = table(KL_SESSIONS_MAX, KL_SESSIONS_PER_PRINCIPAL);
    kl_session_entry e;
    kl_sessions_evicted ev;
    kl_err err;
    char who[16];
    size_t evicted = 0;
    for (uint32_t i = 0; i < KL_SESSIONS_MAX + 100; i++) {
        snprintf(who, sizeof who, "p%u", i / KL_SESSIONS_PER_PRINCIPAL);
        entry(&e, i, who, NOW + 1000 + i);
        ck_assert_int_eq(kl_sessions_put(t, &e, NOW, &ev, &err), KL_OK);
        evicted += ev.table_evicted;
        ck_assert_uint_le(kl_sessions_count(t), KL_SESSIONS_MAX);
    }
    ck_assert_uint_eq(evicted, 100);
    ck_assert(!present(t, 99, NOW) && present(t, 100, NOW)); /* the oldest 100 went */
    kl_sessions_free(t);
}
END_TEST

Suite *suite_sessions(void)
{
    Suite *s = suite_create("sessions");
    TCase *t = tcase_create("table");
    tcase_add_test(t, bounds_are_checked);
    tcase_add_test(t, find_unknown_and_expired);
    tcase_add_test(t, per_principal_cap_evicts_own_oldest);
    tcase_add_test(t, full_table_evicts_closest_to_expiry);
    tcase_add_test(t, index_survives_churn);
    tcase_add_test(t, daemon_bounds_hold);
    tcase_add_test(t, tenant_at_its_bound_evicts_only_its_own);
    tcase_add_test(t, hello_replay_is_refused_within_the_window);
    suite_add_tcase(s, t);
    return s;
}
