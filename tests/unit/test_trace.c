/* The replication trace's bookkeeping (daemon/repl/trace.h): which indexes get a record,
 * which stamp counts, what the sink receives and when; pure, no loop. */
#include "daemon/repl/trace.h"

#include <check.h>
#include <string.h>

#define MAX_SEEN 64

typedef struct seen {
    kl_trace_record r[MAX_SEEN];
    int n;
} seen;

static void collect(void *ctx, const kl_trace_record *rec)
{
    seen *s = ctx;
    if (s->n < MAX_SEEN)
        s->r[s->n] = *rec;
    s->n++; /* counted past MAX_SEEN, kept up to it */
}

static kl_trace *start(uint32_t every, seen *s)
{
    memset(s, 0, sizeof *s);
    kl_trace *t = NULL;
    kl_err err;
    ck_assert_int_eq(kl_trace_new(every, collect, s, &t, &err), KL_OK);
    ck_assert_ptr_nonnull(t);
    return t;
}

#define US(x) ((uint64_t)(x) * 1000u)

START_TEST(off_and_refused)
{
    kl_trace *t = (kl_trace *)1;
    kl_err err;
    ck_assert_int_eq(kl_trace_new(0, collect, NULL, &t, &err), KL_OK);
    ck_assert_ptr_null(t);
    /* Off: every call takes the NULL tracer and does nothing. */
    kl_trace_begin(NULL, 1, 10, true, KL_TP_PROPOSE, 1);
    kl_trace_mark(NULL, 1, 10, KL_TP_COMMIT, 1);
    kl_trace_peer_mark(NULL, 1, 10, 2, KL_TPP_SENT, 1);
    kl_trace_emit(NULL, 1, 10, true);
    kl_trace_free(NULL);
    ck_assert_int_eq(kl_trace_new(KL_TRACE_EVERY_MAX + 1, collect, NULL, &t, &err), KL_INVALID_ARGUMENT);
    ck_assert_ptr_null(t);
    ck_assert_str_eq(err.detail, "repl_trace");
}
END_TEST

/* Only multiples of `every` get a record; the first stamp of a kind is the one kept; a
 * leader's record reaches the sink when emitted as a leader's, with every stamp it got. */
START_TEST(samples_and_first_stamp_wins)
{
    seen s;
    kl_trace *t = start(4, &s);
    kl_trace_begin(t, 1, 9, true, KL_TP_PROPOSE, US(100));
    kl_trace_mark(t, 1, 9, KL_TP_W_START, US(110));
    kl_trace_mark(t, 1, 9, KL_TP_W_START, US(999)); /* a second stamp changes nothing */
    kl_trace_peer_mark(t, 1, 9, 2, KL_TPP_SENT, US(120));
    kl_trace_peer_mark(t, 1, 9, 3, KL_TPP_SENT, US(121));
    kl_trace_peer_mark(t, 1, 9, 2, KL_TPP_SENT, US(500)); /* a retransmission */
    kl_trace_peer_mark(t, 1, 6, 2, KL_TPP_ACK_READ, US(300)); /* covers 4 only */
    kl_trace_mark(t, 1, 9, KL_TP_W_DONE, US(400));
    kl_trace_emit(t, 1, 9, false); /* not a follower's records: nothing */
    ck_assert_int_eq(s.n, 0);
    kl_trace_emit(t, 1, 9, true);
    ck_assert_int_eq(s.n, 2);
    ck_assert_uint_eq(s.r[0].index, 4);
    ck_assert_uint_eq(s.r[1].index, 8);
    ck_assert(s.r[0].leader);
    ck_assert_uint_eq(s.r[0].t[KL_TP_PROPOSE], 100);
    ck_assert_uint_eq(s.r[0].t[KL_TP_W_START], 110);
    ck_assert_uint_eq(s.r[0].t[KL_TP_W_DONE], 400);
    ck_assert_uint_eq(s.r[0].t[KL_TP_COMMIT], 0);
    ck_assert_uint_eq(s.r[0].peer[0], 2);
    ck_assert_uint_eq(s.r[0].peer[1], 3);
    ck_assert_uint_eq(s.r[0].p[0][KL_TPP_SENT], 120);
    ck_assert_uint_eq(s.r[0].p[1][KL_TPP_SENT], 121);
    ck_assert_uint_eq(s.r[0].p[0][KL_TPP_ACK_READ], 300);
    ck_assert_uint_eq(s.r[1].p[0][KL_TPP_ACK_READ], 0);
    /* Emitted records are gone: a second emit reports nothing. */
    kl_trace_emit(t, 1, 9, true);
    ck_assert_int_eq(s.n, 2);
    kl_trace_free(t);
}
END_TEST

/* Stamps never start a record, and never reach indexes past the newest one begun. */
START_TEST(marks_need_a_begun_record)
{
    seen s;
    kl_trace *t = start(1, &s);
    kl_trace_mark(t, 1, 5, KL_TP_COMMIT, US(1));
    kl_trace_emit(t, 1, 5, true);
    kl_trace_emit(t, 1, 5, false);
    ck_assert_int_eq(s.n, 0);
    kl_trace_begin(t, 3, 3, false, KL_TP_READ, US(10));
    kl_trace_mark(t, 1, 1000000, KL_TP_ACK_SENT, US(20));
    kl_trace_emit(t, 1, 1000000, false);
    ck_assert_int_eq(s.n, 1);
    ck_assert_uint_eq(s.r[0].index, 3);
    ck_assert(!s.r[0].leader);
    ck_assert_uint_eq(s.r[0].t[KL_TP_READ], 10);
    ck_assert_uint_eq(s.r[0].t[KL_TP_ACK_SENT], 20);
    kl_trace_free(t);
}
END_TEST

/* A slot taken by a newer index drops the older record unreported; a record begun in the
 * other role starts afresh. */
START_TEST(ring_and_role_replace)
{
    seen s;
    kl_trace *t = start(1, &s);
    kl_trace_begin(t, 7, 7, true, KL_TP_PROPOSE, US(1));
    kl_trace_begin(t, 7 + KL_TRACE_RING, 7 + KL_TRACE_RING, true, KL_TP_PROPOSE, US(2));
    kl_trace_emit(t, 7, 7, true);
    ck_assert_int_eq(s.n, 0);
    kl_trace_emit(t, 7 + KL_TRACE_RING, 7 + KL_TRACE_RING, true);
    ck_assert_int_eq(s.n, 1);
    ck_assert_uint_eq(s.r[0].t[KL_TP_PROPOSE], 2);

    kl_trace_begin(t, 9, 9, true, KL_TP_PROPOSE, US(3));
    kl_trace_begin(t, 9, 9, false, KL_TP_READ, US(4)); /* it lost the lead; the entry came back */
    kl_trace_emit(t, 9, 9, true);
    ck_assert_int_eq(s.n, 1);
    kl_trace_emit(t, 9, 9, false);
    ck_assert_int_eq(s.n, 2);
    ck_assert_uint_eq(s.r[1].t[KL_TP_PROPOSE], 0);
    ck_assert_uint_eq(s.r[1].t[KL_TP_READ], 4);
    kl_trace_free(t);
}
END_TEST

/* A range is clamped to its newest KL_TRACE_RING sampled indexes, so a call's cost is
 * bounded whatever the range; peers past KL_TRACE_MAX_PEERS are ignored. */
START_TEST(ranges_clamped_and_peers_bounded)
{
    seen s;
    kl_trace *t = start(2, &s);
    uint64_t hi = 2u * (KL_TRACE_RING + 10);
    kl_trace_begin(t, 1, hi, true, KL_TP_PROPOSE, US(5));
    kl_trace_emit(t, 1, 2u * 10, true); /* the oldest ten were never begun: clamped away */
    ck_assert_int_eq(s.n, 0);
    for (uint64_t peer = 1; peer <= KL_TRACE_MAX_PEERS + 2; peer++)
        kl_trace_peer_mark(t, hi, hi, peer, KL_TPP_SENT, US(peer));
    kl_trace_emit(t, hi, hi, true);
    ck_assert_int_eq(s.n, 1);
    ck_assert_uint_eq(s.r[0].peer[KL_TRACE_MAX_PEERS - 1], KL_TRACE_MAX_PEERS);
    ck_assert_uint_eq(s.r[0].p[KL_TRACE_MAX_PEERS - 1][KL_TPP_SENT], KL_TRACE_MAX_PEERS);
    memset(&s, 0, sizeof s);
    kl_trace_emit(t, 1, hi, true); /* all the rest begun: exactly KL_TRACE_RING - 1 left */
    ck_assert_int_eq(s.n, KL_TRACE_RING - 1);
    kl_trace_free(t);
}
END_TEST

Suite *suite_trace(void)
{
    Suite *s = suite_create("trace");
    TCase *t = tcase_create("trace");
    tcase_add_test(t, off_and_refused);
    tcase_add_test(t, samples_and_first_stamp_wins);
    tcase_add_test(t, marks_need_a_begun_record);
    tcase_add_test(t, ring_and_role_replace);
    tcase_add_test(t, ranges_clamped_and_peers_bounded);
    suite_add_tcase(s, t);
    return s;
}
