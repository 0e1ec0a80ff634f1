/* Unit tests of daemon/entry_clock.c: the rule a leader stamps entry time by, with the wall
 * clock (Unix ms) and CLOCK_BOOTTIME (ns) injected. A lease of LEASE ms granted at partition
 * time t ends when partition time reaches t + LEASE; the tests check when that happens in
 * elapsed boot time around a wall-clock step of one hour either way; then the same through
 * a kl_node over a real store (tests/unit/harness.h) whose boot clock the test moves. */
#include "daemon/entry_clock.h"
#include "harness.h"

#include <check.h>
#include <stdint.h>

#define T0 1700000000000LL        /* wall clock before the step, Unix ms */
#define B0 (5LL * 86400 * 1000000000LL)  /* CLOCK_BOOTTIME then: five days up */
#define MS 1000000LL               /* ns per ms */
#define HOUR (3600LL * 1000)
#define LEASE 30000LL
#define R_PPM ((int64_t)KL_ENTRY_CLOCK_RATE_PPM)

/* A leader that writes one entry every `step_ms` of real time for `total_ms`, whose wall
 * clock reads real time + offset_ms; returns the partition time of its last entry. *hit is
 * set to the first real ms (since start) at which partition time reached `target` (-1:
 * never). */
static int64_t run(kl_entry_clock *c, int64_t start_real, int64_t offset_ms, int64_t step_ms,
                   int64_t total_ms, int64_t target, int64_t *hit)
{
    int64_t t = 0;
    if (hit)
        *hit = -1;
    for (int64_t real = step_ms; real <= total_ms; real += step_ms) {
        int64_t now = start_real + real;
        t = kl_entry_clock_stamp(c, T0 + now + offset_ms, B0 + now * MS);
        if (hit && *hit < 0 && t >= target)
            *hit = real;
    }
    return t;
}

/* A healthy clock is followed exactly, entry after entry. */
START_TEST(entry_clock_follows_wall)
{
    kl_entry_clock c = {0};
    ck_assert_int_eq(kl_entry_clock_stamp(&c, T0, B0), T0); /* no reference: wall as is */
    for (int64_t i = 1; i <= 1000; i++)
        ck_assert_int_eq(kl_entry_clock_stamp(&c, T0 + i * 7, B0 + i * 7 * MS), T0 + i * 7);
    /* a clock slewed by NTP (500 ppm) is inside the band: still exact */
    int64_t wall = T0 + 7000;
    for (int64_t i = 1; i <= 1000; i++) {
        wall += 10000 + 10000 * 500 / 1000000;
        ck_assert_int_eq(kl_entry_clock_stamp(&c, wall, B0 + (7000 + i * 10000) * MS), wall);
    }
}
END_TEST

/* Forward step of an hour right after a lease was granted: the lease does not end before
 * LEASE / (1 + r) of real time, and partition time keeps moving toward the wall clock at
 * rate r (without the rule, the next entry would jump the hour and end the lease at once). */
START_TEST(entry_clock_forward_hour_does_not_end_leases)
{
    kl_entry_clock c = {0};
    int64_t granted = kl_entry_clock_stamp(&c, T0, B0);
    int64_t hit;
    int64_t t = run(&c, 0, HOUR, 100, 60000, granted + LEASE, &hit);
    int64_t earliest = LEASE * 1000000 / (1000000 + R_PPM);
    ck_assert_int_ge(hit, earliest - 100);
    ck_assert_int_le(hit, LEASE); /* and not late either: it runs ahead at rate r */
    ck_assert_int_le(t, granted + 60000 + 60000 * R_PPM / 1000000 + 1);
    ck_assert_int_ge(t, granted + 60000 + 60000 * R_PPM / 1000000 - 1);
    /* one entry an hour of real time later does not skip: it advances by real time (1 + r) */
    int64_t late = kl_entry_clock_stamp(&c, T0 + 2 * HOUR + 60000, B0 + (HOUR + 60000) * MS);
    ck_assert_int_le(late - t, HOUR + HOUR * R_PPM / 1000000 + 1);
}
END_TEST

/* Back step of an hour: partition time never goes back and never stands still; it runs at
 * no less than (1 - r) of real time, so a lease ends within LEASE / (1 - r). */
START_TEST(entry_clock_back_hour_does_not_freeze)
{
    kl_entry_clock c = {0};
    int64_t granted = kl_entry_clock_stamp(&c, T0, B0);
    int64_t prev = granted, hit = -1;
    for (int64_t real = 100; real <= 60000; real += 100) {
        int64_t t = kl_entry_clock_stamp(&c, T0 + real - HOUR, B0 + real * MS);
        ck_assert_int_gt(t, prev);
        prev = t;
        if (hit < 0 && t >= granted + LEASE)
            hit = real;
    }
    ck_assert_int_ge(hit, LEASE);
    ck_assert_int_le(hit, LEASE * 1000000 / (1000000 - R_PPM) + 100);
}
END_TEST

/* The step is later corrected: partition time is back on the wall clock within
 * step / r of real time, and never went beyond the band in between. */
START_TEST(entry_clock_converges_after_correction)
{
    kl_entry_clock c = {0};
    (void)kl_entry_clock_stamp(&c, T0, B0);
    /* a wrong clock, an hour ahead, for ten minutes */
    int64_t t = run(&c, 0, HOUR, 1000, 600000, 0, NULL);
    ck_assert_int_le(t, T0 + 600000 + 600000 * R_PPM / 1000000 + 1);
    /* corrected: partition time is 6 s ahead of the wall; it falls back toward it at r */
    int64_t ahead = t - (T0 + 600000);
    ck_assert_int_gt(ahead, 0);
    int64_t back = run(&c, 600000, 0, 1000, 2 * ahead * 1000000 / R_PPM, 0, NULL);
    ck_assert_int_eq(back, T0 + 600000 + 2 * ahead * 1000000 / R_PPM);
    /* tiny intervals (one entry per microsecond) still converge: no rounding to zero */
    kl_entry_clock d = {0};
    (void)kl_entry_clock_stamp(&d, T0, B0);
    int64_t u = 0;
    for (int64_t i = 1; i <= 200000; i++)
        u = kl_entry_clock_stamp(&d, T0 + HOUR, B0 + i * 1000);
    ck_assert_int_eq(u, T0 + 200 + 2); /* 200 ms of real time at 1 + r */
}
END_TEST

/* A new leader has no stamp of its own: its reference is the moment it applied the latest
 * entry time, so an hour-fast wall clock gives it no more than that elapsed time (1 + r);
 * an older entry applied later does not move partition time back. */
START_TEST(entry_clock_new_leader_from_observed)
{
    kl_entry_clock c = {0};
    kl_entry_clock_observe(&c, 0, B0); /* untimed entries (no-ops) are ignored */
    kl_entry_clock_observe(&c, T0, B0);
    int64_t t = kl_entry_clock_stamp(&c, T0 + HOUR, B0 + 2000 * MS);
    ck_assert_int_eq(t, T0 + 2000 + 2000 * R_PPM / 1000000);
    kl_entry_clock_observe(&c, T0 - 5000, B0 + 3000 * MS);
    ck_assert_int_ge(kl_entry_clock_stamp(&c, T0 - HOUR, B0 + 3000 * MS), t);
    /* a slow wall on a member without any reference is taken only when it is ahead */
    kl_entry_clock fresh = {0};
    kl_entry_clock_observe(&fresh, T0, B0);
    ck_assert_int_eq(kl_entry_clock_stamp(&fresh, T0 - HOUR, B0), T0);
    /* the boot clock going back (cannot happen; a driver bug) counts as no time */
    ck_assert_int_eq(kl_entry_clock_stamp(&fresh, T0 + HOUR, B0 - 1000 * MS), T0);
}
END_TEST

/* ---- the rule as kl_node uses it: a real store, a wall clock that steps, a boot clock ---- */

static th_node N;
static char n_dir[256];

static void node_setup(void)
{
    th_tmpdir(n_dir, sizeof n_dir);
    th_open(&N, n_dir, NULL);
    th_batch *b = th_batch_new(0x10);
    th_create(b, "jobs", 0, 0, 0, NULL);
    keyload__v1__batch_receipt__free_unpacked(th_run(&N, b, KL_OK), NULL);
    b = th_batch_new(0x11);
    th_enqueue(b, "jobs", NULL, "A");
    keyload__v1__batch_receipt__free_unpacked(th_run(&N, b, KL_OK), NULL);
    N.boot_clock = true; /* from here the boot clock moves apart from the wall clock */
    N.boot_ms = N.now;
}

static void node_teardown(void)
{
    th_close(&N);
    th_rmrf(n_dir);
}

/* Messages a receive of up to 10 with lease_ms gets now. */
static size_t node_receive(uint8_t cmd, uint32_t lease_ms)
{
    th_batch *b = th_batch_new(cmd);
    th_receive(b, "jobs", NULL, 10, lease_ms);
    Keyload__V1__BatchReceipt *r = th_run(&N, b, KL_OK);
    size_t n = r->results[0]->received->n_messages;
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
    return n;
}

/* The leader's wall clock jumps an hour ahead 1 s after a 30 s lease: the lease holds until
 * 30 s of boot time have passed; then the wall clock jumps two hours back: a 5 s lease still
 * runs out after 5 s of boot time (no freeze). */
START_TEST(entry_clock_node_steps)
{
    ck_assert_uint_eq(node_receive(0x20, 30000), 1);
    N.now += HOUR;
    N.boot_ms += 1000;
    ck_assert_uint_eq(node_receive(0x21, 5000), 0); /* was: the lease ended with the jump */
    N.boot_ms += 29000;
    ck_assert_uint_eq(node_receive(0x22, 5000), 1); /* 30 s of real time later it ends */
    N.now -= 2 * HOUR;
    N.boot_ms += 5100;
    ck_assert_uint_eq(node_receive(0x23, 30000), 1); /* was: frozen for an hour */
}
END_TEST

/* A member restarted with its wall clock an hour ahead resumes partition time from its last
 * entry: a 30 s lease granted just before the restart holds. */
START_TEST(entry_clock_node_restart_resumes)
{
    ck_assert_uint_eq(node_receive(0x30, 30000), 1);
    th_close(&N);
    N.now += HOUR;
    N.boot_ms += 2000;
    th_reopen(&N);
    ck_assert_uint_eq(node_receive(0x31, 5000), 0); /* was: the restart took the wall clock */
    N.boot_ms += 30500; /* 30 s after the restart: its downtime is not counted */
    ck_assert_uint_eq(node_receive(0x32, 5000), 1);
}
END_TEST

Suite *suite_entry_clock(void)
{
    Suite *s = suite_create("entry_clock");
    TCase *t = tcase_create("rule");
    tcase_add_test(t, entry_clock_follows_wall);
    tcase_add_test(t, entry_clock_forward_hour_does_not_end_leases);
    tcase_add_test(t, entry_clock_back_hour_does_not_freeze);
    tcase_add_test(t, entry_clock_converges_after_correction);
    tcase_add_test(t, entry_clock_new_leader_from_observed);
    suite_add_tcase(s, t);
    t = tcase_create("node");
    tcase_add_checked_fixture(t, node_setup, node_teardown);
    tcase_add_test(t, entry_clock_node_steps);
    tcase_add_test(t, entry_clock_node_restart_resumes);
    suite_add_tcase(s, t);
    return s;
}
