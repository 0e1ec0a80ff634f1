/* Outcome retention (daemon/node_retain.c, ARCHITECTURE.md "Outcome retention"): the mark
 * arithmetic alone, then a real store under a harness node: outcomes replay before the
 * horizon, are swept (bounded per entry) after it, a retry below the mark is refused
 * outcome_expired, and the kept-for-ever kinds are never indexed. */
#include "tests/unit/harness.h"

#include "keyload/v1/store.pb-c.h"

#include "common/limits.h"
#include "daemon/node_retain.h"
#include "daemon/store/keys.h"
#include "daemon/store/store.h"

#include <check.h>
#include <rocksdb/c.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define T0 1700000000000ll
#define RET 10000ll

START_TEST(retain_mark_arithmetic)
{
    /* The mark follows entry time minus retention, never goes back, and stays 0 while
     * retention is off or entry time is not past it. */
    ck_assert_int_eq(kl_retain_mark_next(0, T0, RET), T0 - RET);
    ck_assert_int_eq(kl_retain_mark_next(T0, T0 - 5000, RET), T0);
    ck_assert_int_eq(kl_retain_mark_next(T0 - RET, T0 + 1, RET), T0 - RET + 1);
    ck_assert_int_eq(kl_retain_mark_next(0, T0, 0), 0);
    ck_assert_int_eq(kl_retain_mark_next(7, RET, RET), 7);
    /* Index time: the later of entry time and first-sent time. */
    ck_assert_int_eq(kl_retain_index_time(T0, 0), T0);
    ck_assert_int_eq(kl_retain_index_time(T0, T0 - 100), T0);
    ck_assert_int_eq(kl_retain_index_time(T0, T0 + 100), T0 + 100);
    /* First-sent checks: not given passes; the future bound; negative refused. */
    kl_err e;
    ck_assert_int_eq(kl_retain_check_first_sent(0, T0, T0, &e), KL_OK);
    ck_assert_int_eq(kl_retain_check_first_sent(T0 + KL_FIRST_SENT_AHEAD_MAX_MS, T0, T0, &e), KL_OK);
    ck_assert_int_eq(kl_retain_check_first_sent(T0 + KL_FIRST_SENT_AHEAD_MAX_MS + 1, T0, T0, &e), KL_UNAVAILABLE);
    ck_assert_str_eq(e.detail, "first_sent_ahead");
    /* Partition time lagging the wall clock (after a clock step or an outage) refuses nothing
     * a correct client sends: the bound is taken from the later of the two. */
    ck_assert_int_eq(kl_retain_check_first_sent(T0 + 40000, T0, T0 + 40000, &e), KL_OK);
    ck_assert_int_eq(kl_retain_check_first_sent(T0 + 40000, T0 + 40000, T0, &e), KL_OK);
    ck_assert_int_eq(kl_retain_check_first_sent(-1, T0, T0, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "first_sent_unix_ms");
    /* Past the year 9999 no clock can be the cause, so no retry can help: malformed. The
     * last millisecond before it is only "ahead" (retryable), like any future time. */
    ck_assert_int_eq(kl_retain_check_first_sent(KL_FIRST_SENT_LATEST_MS, T0, T0, &e), KL_UNAVAILABLE);
    ck_assert_str_eq(e.detail, "first_sent_ahead");
    ck_assert_int_eq(kl_retain_check_first_sent(KL_FIRST_SENT_LATEST_MS + 1, T0, T0, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "first_sent_unix_ms");
    ck_assert_int_eq(kl_retain_check_first_sent(INT64_MAX, T0, T0, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "first_sent_unix_ms");
    ck_assert_int_eq(kl_retain_check_expired(0, T0, &e), KL_OK);
    ck_assert_int_eq(kl_retain_check_expired(T0, T0, &e), KL_OK);
    ck_assert_int_eq(kl_retain_check_expired(T0 - 1, T0, &e), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(e.detail, "outcome_expired");
    ck_assert_ptr_nonnull(strstr(e.message, "first_sent_unix_ms"));
}
END_TEST

START_TEST(retain_kept_for_ever_kinds)
{
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT, x = KEYLOAD__V1__MUTATION__INIT;
    Keyload__V1__Mutation *ms[2] = {&m, &x};
    Keyload__V1__BatchRequest b = KEYLOAD__V1__BATCH_REQUEST__INIT;
    b.mutations = ms;
    b.n_mutations = 1;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_ENQUEUE;
    ck_assert(kl_retain_batch_expires(&b, false));
    ck_assert(!kl_retain_batch_expires(&b, true)); /* a committed refusal */
    int kept[] = {KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE_TRANSFER, KEYLOAD__V1__MUTATION__KIND_ACCEPT_QUEUE_TRANSFER,
                  KEYLOAD__V1__MUTATION__KIND_COMPLETE_QUEUE_TRANSFER,
                  KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_ATTEMPT,
                  KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_REPAIR,
                  KEYLOAD__V1__MUTATION__KIND_SET_QUEUE_TRANSFERS_PAUSED};
    b.n_mutations = 2;
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        x.kind_case = kept[i];
        ck_assert(!kl_retain_batch_expires(&b, false)); /* any transfer mutation in the batch */
    }
}
END_TEST

/* Live keys with tag `tag` in the applied store. */
static size_t count_tag(th_node *t, char tag)
{
    rocksdb_iterator_t *it = kl_store_iterator(t->store);
    size_t n = 0;
    for (rocksdb_iter_seek(it, &tag, 1); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl;
        const char *k = rocksdb_iter_key(it, &kl);
        if (kl == 0 || k[0] != tag)
            break;
        n++;
    }
    rocksdb_iter_destroy(it);
    return n;
}

/* An enqueue batch with command id number `id`, packed with first_sent (0 = left out). */
static uint8_t *enqueue_req(unsigned id, int64_t first_sent, size_t *len)
{
    uint8_t cmd[16] = {0x5e, 0x7a};
    cmd[14] = (uint8_t)(id >> 8);
    cmd[15] = (uint8_t)id;
    th_batch *b = th_batch_new(1);
    th_batch_cmd(b, cmd);
    th_enqueue(b, "q", "", "body");
    size_t n;
    uint8_t *p = th_batch_pack(b, &n);
    Keyload__V1__BatchRequest *r = keyload__v1__batch_request__unpack(NULL, n, p);
    ck_assert_ptr_nonnull(r);
    free(p);
    r->first_sent_unix_ms = first_sent;
    *len = keyload__v1__batch_request__get_packed_size(r);
    p = malloc(*len);
    keyload__v1__batch_request__pack(r, p);
    keyload__v1__batch_request__free_unpacked(r, NULL);
    return p;
}

static kl_code submit_req(th_node *t, unsigned cmd, int64_t first_sent, th_reply *r)
{
    size_t len;
    uint8_t *req = enqueue_req(cmd, first_sent, &len);
    memset(r, 0, sizeof *r);
    th_submit(t, req, len, r);
    free(req);
    ck_assert_int_eq(r->count, 1);
    return r->code;
}

static void open_retaining(th_node *t, char *dir, size_t cap)
{
    th_tmpdir(dir, cap);
    th_open(t, dir, NULL);
    th_close(t);
    t->outcome_retention_ms = RET;
    th_reopen(t);
    th_batch *b = th_batch_new(1);
    th_create(b, "q", 0, 0, 0, NULL);
    Keyload__V1__BatchReceipt *rc = th_run(t, b, KL_OK);
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
}

START_TEST(retain_replay_then_expire)
{
    static th_node t;
    char dir[256];
    open_retaining(&t, dir, sizeof dir);
    int64_t sent = t.now;
    th_reply a, again;
    ck_assert_int_eq(submit_req(&t, 0xA1, sent, &a), KL_OK);
    /* Before the horizon: the same command (even with another first-sent time, as a
     * process that did not keep it sends) replays byte for byte. */
    t.now += RET - 1000;
    ck_assert_int_eq(submit_req(&t, 0xA1, sent, &again), KL_OK);
    ck_assert_uint_eq(again.len, a.len);
    ck_assert_mem_eq(again.receipt, a.receipt, a.len);
    th_reply_free(&again);
    ck_assert_int_eq(submit_req(&t, 0xA1, t.now, &again), KL_OK);
    ck_assert_mem_eq(again.receipt, a.receipt, a.len);
    th_reply_free(&again);
    size_t outcomes = count_tag(&t, 'O');
    /* Indexed: the queue's creation and A (the database was made with retention off). */
    ck_assert_uint_eq(count_tag(&t, 'E'), 2);
    /* Past the horizon: the next entry sweeps the outcome, then a retry carrying its
     * original first-sent time is refused, not run again. */
    t.now += 2000;
    th_reply other;
    ck_assert_int_eq(submit_req(&t, 0xB2, t.now, &other), KL_OK);
    th_reply_free(&other);
    /* The creation's and A's outcomes are gone, B's added. */
    ck_assert_uint_eq(count_tag(&t, 'O'), outcomes - 2 + 1);
    ck_assert_uint_eq(count_tag(&t, 'E'), 1);
    ck_assert_int_eq(submit_req(&t, 0xA1, sent, &again), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(again.err.detail, "outcome_expired");
    th_reply_free(&again);
    uint64_t in_flight;
    ck_assert_uint_eq(th_queue_messages(&t, "q", &in_flight), 2); /* A's and B's, once each */
    /* A first-sent time further ahead than the clock bound of both clocks is refused, retryably. */
    ck_assert_int_eq(submit_req(&t, 0xC3, t.now + KL_FIRST_SENT_AHEAD_MAX_MS + 1, &again), KL_UNAVAILABLE);
    ck_assert_str_eq(again.err.detail, "first_sent_ahead");
    th_reply_free(&again);
    th_reply_free(&a);
    th_close(&t);
    th_rmrf(dir);
}
END_TEST

/* A sweep deletes at most KL_OUTCOME_SWEEP_MAX outcomes per entry, oldest first, and the
 * rest on the entries after; a restart (re-apply from the log) agrees. */
START_TEST(retain_sweep_is_bounded)
{
    static th_node t;
    char dir[256];
    open_retaining(&t, dir, sizeof dir);
    size_t base = count_tag(&t, 'O'), e0 = count_tag(&t, 'E');
    const size_t many = KL_OUTCOME_SWEEP_MAX + 40;
    for (size_t i = 0; i < many; i++) {
        th_reply r;
        ck_assert_int_eq(submit_req(&t, (unsigned)i + 1, 0, &r), KL_OK);
        th_reply_free(&r);
    }
    ck_assert_uint_eq(count_tag(&t, 'E'), e0 + many);
    t.now += RET + 10;
    th_reply r;
    ck_assert_int_eq(submit_req(&t, 1000, 0, &r), KL_OK);
    th_reply_free(&r);
    ck_assert_uint_eq(count_tag(&t, 'E'), e0 + many - KL_OUTCOME_SWEEP_MAX + 1);
    ck_assert_int_eq(submit_req(&t, 1001, 0, &r), KL_OK);
    th_reply_free(&r);
    ck_assert_uint_eq(count_tag(&t, 'E'), 2);
    ck_assert_uint_eq(count_tag(&t, 'O'), base - e0 + 2);
    th_close(&t);
    th_reopen(&t);
    ck_assert_uint_eq(count_tag(&t, 'E'), 2);
    th_close(&t);
    th_rmrf(dir);
}
END_TEST

/* The stored OutcomeRecord of command id `id` (enqueue_req's numbering), or NULL. */
static Keyload__V1__OutcomeRecord *stored_outcome(th_node *t, unsigned id)
{
    uint8_t cmd[16] = {0x5e, 0x7a};
    cmd[14] = (uint8_t)(id >> 8);
    cmd[15] = (uint8_t)id;
    kl_key k;
    kl_key_outcome(&k, "local", cmd);
    uint8_t *v;
    size_t n;
    bool found;
    kl_err e;
    ck_assert_int_eq(kl_store_get(t->store, k.b, k.len, &v, &n, &found, &e), KL_OK);
    if (!found)
        return NULL;
    Keyload__V1__OutcomeRecord *o = keyload__v1__outcome_record__unpack(NULL, n, v);
    free(v);
    ck_assert_ptr_nonnull(o);
    return o;
}

/* Sweeps are paced: an entry within KL_OUTCOME_SWEEP_EVERY_MS of the last sweep (which was
 * not full) leaves an outcome that expired meanwhile for the next sweep; the entry after
 * the pause deletes it. */
START_TEST(retain_sweep_paced)
{
    static th_node t;
    char dir[256];
    open_retaining(&t, dir, sizeof dir);
    th_reply r;
    int64_t t0 = t.now;
    ck_assert_int_eq(submit_req(&t, 0xA1, 0, &r), KL_OK); /* A, indexed at t0 */
    th_reply_free(&r);
    t.now = t0 + 50;
    ck_assert_int_eq(submit_req(&t, 0xB2, 0, &r), KL_OK); /* B, indexed at t0 + 50 */
    th_reply_free(&r);
    /* Past A's horizon, not B's: this entry sweeps A. */
    t.now = t0 + RET + 10;
    ck_assert_int_eq(submit_req(&t, 0xC3, 0, &r), KL_OK);
    th_reply_free(&r);
    ck_assert_ptr_null(stored_outcome(&t, 0xA1));
    Keyload__V1__OutcomeRecord *o = stored_outcome(&t, 0xB2);
    ck_assert_ptr_nonnull(o);
    keyload__v1__outcome_record__free_unpacked(o, NULL);
    /* Past B's horizon but within the pause after that sweep: B stays. */
    _Static_assert(KL_OUTCOME_SWEEP_EVERY_MS > 70, "B's horizon falls inside the pause");
    t.now = t0 + RET + 80;
    ck_assert_int_eq(submit_req(&t, 0xD4, 0, &r), KL_OK);
    th_reply_free(&r);
    o = stored_outcome(&t, 0xB2);
    ck_assert_ptr_nonnull(o);
    keyload__v1__outcome_record__free_unpacked(o, NULL);
    /* After the pause the next entry sweeps it. */
    t.now = t0 + RET + 10 + KL_OUTCOME_SWEEP_EVERY_MS;
    ck_assert_int_eq(submit_req(&t, 0xE5, 0, &r), KL_OK);
    th_reply_free(&r);
    ck_assert_ptr_null(stored_outcome(&t, 0xB2));
    th_close(&t);
    th_rmrf(dir);
}
END_TEST

static kl_code receive_once(th_node *t, unsigned id, th_reply *r)
{
    uint8_t cmd[16] = {0x5e, 0x7a};
    cmd[14] = (uint8_t)(id >> 8);
    cmd[15] = (uint8_t)id;
    th_batch *b = th_batch_new(1);
    th_batch_cmd(b, cmd);
    th_receive(b, "q", NULL, 10, 30000);
    size_t len;
    uint8_t *req = th_batch_pack(b, &len);
    memset(r, 0, sizeof *r);
    th_submit(t, req, len, r);
    free(req);
    ck_assert_int_eq(r->count, 1);
    return r->code;
}

/* A Receive's outcome holds no body: the stored receipt is the answer without them, a
 * replay while the leases are held answers the original bytes, and once a lease is
 * acknowledged the replay is refused receive_outcome_released. */
START_TEST(retain_receive_outcome_without_bodies)
{
    static th_node t;
    char dir[256];
    open_retaining(&t, dir, sizeof dir);
    th_reply e1, e2, rcv, again;
    ck_assert_int_eq(submit_req(&t, 1, 0, &e1), KL_OK);
    ck_assert_int_eq(submit_req(&t, 2, 0, &e2), KL_OK);
    th_reply_free(&e1);
    th_reply_free(&e2);
    ck_assert_int_eq(receive_once(&t, 3, &rcv), KL_OK);
    Keyload__V1__BatchReceipt *full = keyload__v1__batch_receipt__unpack(NULL, rcv.len, rcv.receipt);
    ck_assert_ptr_nonnull(full);
    ck_assert_uint_eq(full->results[0]->received->n_messages, 2);
    ck_assert_ptr_nonnull(full->results[0]->received->messages[0]->message);
    Keyload__V1__OutcomeRecord *o = stored_outcome(&t, 3);
    ck_assert_ptr_nonnull(o);
    ck_assert(o->receipt_bodies_elided);
    ck_assert_uint_lt(o->receipt.len, rcv.len);
    ck_assert_ptr_null(memmem(o->receipt.data, o->receipt.len, "body", 4));
    keyload__v1__outcome_record__free_unpacked(o, NULL);
    ck_assert_int_eq(receive_once(&t, 3, &again), KL_OK);
    ck_assert_uint_eq(again.len, rcv.len);
    ck_assert_mem_eq(again.receipt, rcv.receipt, rcv.len);
    th_reply_free(&again);
    /* Restart: the replay reads the bodies back from the re-applied store. */
    th_close(&t);
    th_reopen(&t);
    ck_assert_int_eq(receive_once(&t, 3, &again), KL_OK);
    ck_assert_mem_eq(again.receipt, rcv.receipt, rcv.len);
    th_reply_free(&again);
    th_batch *ack = th_batch_new(9);
    th_ack(ack, "q", full->results[0]->received->messages[1]->lease_token.data, 1);
    Keyload__V1__BatchReceipt *ar = th_run(&t, ack, KL_OK);
    keyload__v1__batch_receipt__free_unpacked(ar, NULL);
    ck_assert_int_eq(receive_once(&t, 3, &again), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(again.err.detail, "receive_outcome_released");
    ck_assert_ptr_null(strstr(again.err.message, "body"));
    th_reply_free(&again);
    keyload__v1__batch_receipt__free_unpacked(full, NULL);
    th_reply_free(&rcv);
    th_close(&t);
    th_rmrf(dir);
}
END_TEST

Suite *suite_retain(void)
{
    Suite *s = suite_create("retain");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, retain_mark_arithmetic);
    tcase_add_test(t, retain_kept_for_ever_kinds);
    tcase_add_test(t, retain_replay_then_expire);
    tcase_add_test(t, retain_sweep_is_bounded);
    tcase_add_test(t, retain_sweep_paced);
    tcase_add_test(t, retain_receive_outcome_without_bodies);
    suite_add_tcase(s, t);
    return s;
}
