/* proc_coord_retry: capacity refusals retained and retried by attempt advances, through the
 * coordinator cut at each step (CoordinatorCapacityRetryTests) and by hand
 * (RemoteTransferAdvanceTests) (proc_coord.h). */
#include "tests/cluster/proc_coord.h"

#include <stdlib.h>
#include <string.h>

/* ---- CoordinatorCapacityRetryTests ---- */

#define CAP_DB "acme/cap"

/* kill -9 of the source partition's leader, and its restart (it rejoins as a follower). */
static bool cc_kill_source_leader(char *why, size_t cap)
{
    int l = cc_leader(CC_SRC);
    if (l < 0) {
        snprintf(why, cap, "partition %d has no leader", CC_SRC);
        return false;
    }
    cc_kill(CC_SRC, l);
    fprintf(stderr, "    kill -9 p%dm%d (source leader)\n", CC_SRC, l);
    cc_spawn(CC_SRC, l);
    if (!cc_wait_all(30000)) {
        snprintf(why, cap, "no leader on every partition 30 s after killing p%dm%d", CC_SRC, l);
        return false;
    }
    return true;
}

/* A KL-6 suite's database: MaxQueueTransferAcceptAttempts 3, src (partition CC_SRC) and a
 * one-message dst (partition CC_DST) queue. */
static bool cc_capacity_db(const char *db, const char *src, const char *dst, char *why, size_t cap)
{
    kl_err err;
    if (!cc_database(db, why, cap))
        return false;
    kl_database_limits lim = {.has_max_queue_transfer_accept_attempts = true, .max_queue_transfer_accept_attempts = 3};
    cc_id cmd;
    kl_command_id_new(cmd);
    kl_limits_result lres;
    kl_batch *b = NULL;
    kl_queue_options qo = {.pin_partition = true, .partition = CC_DST, .max_messages = 1};
    if (kl_client_set_database_limits(cc_client(WHO_ROOT, db), cmd, &lim, &lres, NULL, &err) != KL_OK ||
        cc_queue(db, src, CC_SRC, &err) != KL_OK || kl_batch_new(NULL, &b, &err) != KL_OK ||
        kl_batch_create_queue(b, dst, &qo, &err) != KL_OK || cc_send(cc_client(WHO_ROOT, db), b, NULL, &err) != KL_OK) {
        kl_batch_free(b);
        snprintf(why, cap, "%s: limits and queues: %s %s", db, kl_code_name(err.code), err.message);
        return false;
    }
    return true;
}

void test_coord_capacity(void)
{
    CC_BEGIN("CoordinatorCapacityRetryTests");
    CHECK(cc_capacity_db(CAP_DB, "src.cap", "dst.cap", why, sizeof why), "%s", why);
    kl_client *op = cc_client(WHO_COORD, CAP_DB), *root = cc_client(WHO_ROOT, CAP_DB);
    CHECK(op && root, "clients");
    kl_batch *b = NULL;
    CHECK(cc_enqueue(root, "dst.cap", "filler", &err) == KL_OK, "filler: %s", err.message);
    cc_id t1;
    kl_command_id_new(t1);
    CHECK(cc_create(op, "src.cap", NULL, t1, "dst.cap", NULL, "capacity-1", &err) == KL_OK, "create: %s", err.message);

    /* Cut 1, between witness and Advance: the quota refusal is retained; room is made; the
     * fresh read issues a witness and the coordinator exits before sending the Advance. */
    cc_opts o = {.db = CAP_DB, .who = WHO_COORD, .workers = 1, .flush_ms = 5, .discovery_ms = 50};
    CHECK(cc_coord_config(0, "cap", &o), "config");
    cc_coord_start(0, "coord.before_advance=exit");
    CHECK(cc_wait_log(0, "failure_retained", t1, 20000) >= 1, "no retained failure (log %s)", cc_fx.coords[0].log);
    CHECK(cc_messages(root, "dst.cap") == 1, "dst.cap changed while full");
    CHECK(cc_drain_one(root, "dst.cap", NULL), "draining the filler");
    int st = cc_coord_wait(0, 30000);
    CHECK(cc_exited_with(st, CC_EXIT_FAILPOINT), "the coordinator did not exit at coord.before_advance (log %s)",
          cc_fx.coords[0].log);
    CHECK(cc_log_count(0, "verdict=witness", t1) == 1, "no witness logged before the cut");
    uint64_t gen = 0;
    int adv = 0;
    CHECK(cc_history(op, "src.cap", t1, &gen, KEYLOAD__V1__TRANSFER_EVENT__ATTEMPT_ADVANCED, &adv, NULL) && gen == 1 &&
              adv == 0,
          "after the cut before Advance: generation %llu, %d advances (want 1, 0)", (unsigned long long)gen, adv);
    CHECK(cc_messages(root, "dst.cap") == 0, "a message appeared without an Accept");

    /* Cut 2, between Advance and the next Accept, with the source leader killed -9 first:
     * a restarted coordinator learns the failure again from the committed refusal (same
     * command id), reads a witness, advances and exits before any Accept of generation 2. */
    CHECK(cc_kill_source_leader(why, sizeof why), "%s", why);
    CHECK(cc_coord_config(0, "cap2", &o), "config");
    cc_coord_start(0, "coord.after_advance=exit");
    st = cc_coord_wait(0, 40000);
    CHECK(cc_exited_with(st, CC_EXIT_FAILPOINT), "the coordinator did not exit at coord.after_advance (log %s)",
          cc_fx.coords[0].log);
    cc_tok g2;
    CHECK(cc_history(op, "src.cap", t1, &gen, KEYLOAD__V1__TRANSFER_EVENT__ATTEMPT_ADVANCED, &adv, &g2) && gen == 2 &&
              adv == 1,
          "after the cut after Advance: generation %llu, %d advances (want 2, 1)", (unsigned long long)gen, adv);
    CHECK(cc_token_generation(g2.b, g2.n) == 2, "the current token is not generation 2's");
    CHECK(cc_messages(root, "dst.cap") == 0, "the destination has a message before generation 2 was accepted");

    /* Then the source leader again, and a coordinator without cuts: exactly one message. */
    CHECK(cc_kill_source_leader(why, sizeof why), "%s", why);
    CHECK(cc_coord_config(0, "cap3", &o), "config");
    cc_coord_start(0, NULL);
    CHECK(cc_wait_state(op, "src.cap", NULL, t1, KEYLOAD__V1__TRANSFER_STATE__DELIVERED, 30000),
          "not Delivered after the cuts (log %s)", cc_fx.coords[0].log);
    cc_tok rt;
    CHECK(cc_state(op, "src.cap", NULL, t1, &rt) == KEYLOAD__V1__TRANSFER_STATE__DELIVERED &&
              cc_token_generation(rt.b, rt.n) == 2,
          "the receipt is not generation 2's");
    char body[64] = "";
    CHECK(cc_messages(root, "dst.cap") == 1 && cc_drain_one(root, "dst.cap", body) &&
              strcmp(body, "capacity-1") == 0,
          "dst.cap does not hold exactly the one transferred message (got '%s')", body);

    /* A receipt that appears meanwhile wins over any witness: the queue is full again, a
     * second transfer's Accept is refused and retained; while the coordinator holds that
     * failure an operator, in ONE batch, acks the filler and accepts the transfer by hand
     * under a new id (so no read ever sees room without the receipt); the coordinator's
     * next fresh read finds that receipt and completes at generation 1, with no advance. */
    CHECK(cc_exited_with(cc_coord_stop(0), 0), "drain");
    CHECK(cc_enqueue(root, "dst.cap", "filler-2", &err) == KL_OK, "filler: %s", err.message);
    cc_id t2;
    kl_command_id_new(t2);
    CHECK(cc_create(op, "src.cap", NULL, t2, "dst.cap", NULL, "capacity-2", &err) == KL_OK, "create: %s", err.message);
    CHECK(cc_coord_config(0, "cap4", &o), "config");
    cc_coord_start(0, NULL);
    CHECK(cc_wait_log(0, "failure_retained", t2, 20000) >= 1, "no retained failure for the second transfer");
    char acc[KL_GUID_TEXT_LEN + 1], dlane[64];
    cc_tok intent;
    CHECK(cc_accept_id(op, CAP_DB, "src.cap", t2, acc, &intent, dlane, sizeof dlane), "command id");
    kl_receipt *r = NULL;
    CHECK(kl_batch_new(NULL, &b, &err) == KL_OK && kl_batch_receive(b, "dst.cap", NULL, 1, 60000, &err) == KL_OK &&
              cc_send(root, b, &r, &err) == KL_OK && r->decoded->results[0]->received->n_messages == 1,
          "leasing the filler: %s", err.message);
    kl_bytes lease = {r->decoded->results[0]->received->messages[0]->lease_token.data,
                      r->decoded->results[0]->received->messages[0]->lease_token.len};
    cc_id manual;
    kl_command_id_new(manual);
    /* The operator is "coord" (only the intent's principal may accept); it may not ack, so
     * root grants it QueueConsume/QueueAck on dst.cap first. */
    CHECK(cc_grant(CAP_DB, WHO_COORD, KEYLOAD__V1__PERMISSION__QUEUE_ACK, "dst.*", &err) == KL_OK, "grant: %s",
          err.message);
    CHECK(kl_batch_new(manual, &b, &err) == KL_OK && kl_batch_ack(b, "dst.cap", &lease, 1, &err) == KL_OK &&
              kl_batch_accept_transfer(b, "dst.cap", dlane, intent.b, intent.n, &err) == KL_OK &&
              cc_send(op, b, NULL, &err) == KL_OK,
          "operator ack + Accept: %s %s (%s)", kl_code_name(err.code), err.detail, err.message);
    kl_receipt_free(r);
    CHECK(cc_wait_state(op, "src.cap", NULL, t2, KEYLOAD__V1__TRANSFER_STATE__DELIVERED, 30000),
          "the second transfer not Delivered (log %s)", cc_fx.coords[0].log);
    CHECK(cc_log_count(0, "verdict=receipt_exists", t2) == 1, "the fresh read did not find the receipt (log %s)",
          cc_fx.coords[0].log);
    CHECK(cc_log_count(0, "verdict=witness", t2) == 0, "a witness was issued although the receipt existed");
    CHECK(cc_history(op, "src.cap", t2, &gen, KEYLOAD__V1__TRANSFER_EVENT__ATTEMPT_ADVANCED, &adv, NULL) && gen == 1 &&
              adv == 0,
          "second transfer: generation %llu, %d advances (want 1, 0)", (unsigned long long)gen, adv);
    CHECK(cc_state(op, "src.cap", NULL, t2, &rt) == KEYLOAD__V1__TRANSFER_STATE__DELIVERED &&
              cc_token_generation(rt.b, rt.n) == 1,
          "the second receipt is not generation 1's");
    CHECK(cc_messages(root, "dst.cap") == 1, "dst.cap holds %lld (want 1)", cc_messages(root, "dst.cap"));
    CHECK(cc_exited_with(cc_coord_stop(0), 0), "drain");
    cc_fx.keep = true;
}


/* ---- RemoteTransferAdvanceTests (by hand through the SDK, no coordinator) ---- */

#define ADV_DB "acme/adv"

/* One capacity round by hand: fill dst.adv, Accept `token` under a fresh id (refused
 * RESOURCE_EXHAUSTED), make room, read the failure: a witness into *w. */
static bool adv_round(kl_client *op, kl_client *root, const cc_tok *token, cc_tok *w, char *why, size_t cap)
{
    kl_err err;
    cc_id acc;
    kl_command_id_new(acc);
    kl_batch *b = NULL;
    if (cc_enqueue(root, "dst.adv", "filler", &err) != KL_OK) {
        snprintf(why, cap, "filler: %s", err.message);
        return false;
    }
    if (kl_batch_new(acc, &b, &err) != KL_OK ||
        kl_batch_accept_transfer(b, "dst.adv", NULL, token->b, token->n, &err) != KL_OK) {
        kl_batch_free(b);
        snprintf(why, cap, "build: %s", err.message);
        return false;
    }
    kl_code rc = cc_send(op, b, NULL, &err);
    if (rc != KL_RESOURCE_EXHAUSTED) {
        snprintf(why, cap, "Accept into a full queue: %s (want RESOURCE_EXHAUSTED)", kl_code_name(rc));
        return false;
    }
    if (!cc_drain_one(root, "dst.adv", NULL)) {
        snprintf(why, cap, "making room");
        return false;
    }
    Keyload__V1__ReadQueueTransferFailureAnswer *fa = NULL;
    int64_t t0 = now_ms();
    kl_code frc = kl_client_read_transfer_failure(op, "dst.adv", NULL, token->b, token->n, acc, &fa, &err);
    fprintf(stderr, "    failure read (RF3, sealed, read barrier): %lld ms\n", (long long)(now_ms() - t0));
    if (frc != KL_OK) {
        snprintf(why, cap, "failure read: %s %s", kl_code_name(err.code), err.message);
        return false;
    }
    bool ok = fa->verdict == KEYLOAD__V1__FAILURE_VERDICT__WITNESS_ISSUED &&
              cc_tok_set(w, fa->witness_token.data, fa->witness_token.len);
    kl_transfer_failure_answer_free(fa);
    if (!ok)
        snprintf(why, cap, "the failure read issued no witness after room was made");
    return ok;
}

static kl_code adv_send(kl_client *op, const char *tid, const cc_tok *w, Keyload__V1__TransferAdvanced *out,
                        kl_err *err)
{
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    kl_code rc = kl_batch_new(NULL, &b, err);
    if (rc == KL_OK)
        rc = kl_batch_advance_transfer_attempt(b, "src.adv", NULL, tid, w->b, w->n, err);
    if (rc != KL_OK) {
        kl_batch_free(b);
        return rc;
    }
    if ((rc = cc_send(op, b, &r, err)) == KL_OK) {
        const Keyload__V1__TransferAdvanced *ta = r->decoded->results[0]->transfer_advanced;
        out->generation = ta->generation;
        out->charged_bytes = ta->charged_bytes;
    }
    kl_receipt_free(r);
    return rc;
}

/* Inspect's accounting of the intent. */
static bool adv_counts(kl_client *op, const char *tid, uint64_t *gen, uint64_t *recs, uint64_t *bytes,
                       uint64_t *reserved, cc_tok *cur)
{
    Keyload__V1__InspectQueueTransferAnswer *a = NULL;
    kl_err err;
    if (kl_client_inspect_transfer(op, "src.adv", NULL, tid, &a, &err) != KL_OK)
        return false;
    *gen = a->generation;
    *recs = a->retained_records;
    *bytes = a->retained_bytes - a->reserved_bytes; /* charged, the reservation aside */
    *reserved = a->reserved_records;
    bool ok = cc_tok_set(cur, a->current_token.data, a->current_token.len);
    kl_transfer_answer_free(a);
    return ok;
}

void test_coord_advance(void)
{
    CC_BEGIN("RemoteTransferAdvanceTests");
    CHECK(cc_capacity_db(ADV_DB, "src.adv", "dst.adv", why, sizeof why), "%s", why);
    kl_client *op = cc_client(WHO_COORD, ADV_DB), *root = cc_client(WHO_ROOT, ADV_DB);
    CHECK(op && root, "clients");
    kl_batch *b = NULL;
    cc_id cmd;
    cc_id tid;
    kl_command_id_new(tid);
    CHECK(cc_create(op, "src.adv", NULL, tid, "dst.adv", NULL, "advance-me", &err) == KL_OK, "create: %s",
          err.message);
    uint64_t gen, recs, charged, reserved;
    cc_tok cur, w;
    CHECK(adv_counts(op, tid, &gen, &recs, &charged, &reserved, &cur) && gen == 1 && recs == 3 && reserved == 2,
          "a new intent under a ceiling of 3: generation %llu, %llu records, %llu reserved (want 1, 3, 2)",
          (unsigned long long)gen, (unsigned long long)recs, (unsigned long long)reserved);
    CHECK(adv_round(op, root, &cur, &w, why, sizeof why), "round 1: %s", why);

    /* Forgeries on the wire: a flipped signature byte, and the genuine witness replayed as
     * a repair; each refused with the generation unchanged. */
    cc_tok bad = w;
    bad.b[bad.n - 1] ^= 1;
    Keyload__V1__TransferAdvanced res = KEYLOAD__V1__TRANSFER_ADVANCED__INIT;
    kl_code rc = adv_send(op, tid, &bad, &res, &err);
    CHECK(rc == KL_PERMISSION_DENIED && strcmp(err.detail, "witness_signature") == 0,
          "a tampered witness: %s %s (want PERMISSION_DENIED witness_signature)", kl_code_name(rc), err.detail);
    CHECK(kl_batch_new(NULL, &b, &err) == KL_OK &&
              kl_batch_advance_transfer_repair(b, "src.adv", NULL, tid, w.b, w.n, &err) == KL_OK,
          "build: %s", err.message);
    rc = cc_send(op, b, NULL, &err);
    CHECK(rc == KL_FAILED_PRECONDITION && strcmp(err.detail, "witness:failure_code") == 0,
          "a capacity witness as a repair: %s %s", kl_code_name(rc), err.detail);
    CHECK(adv_counts(op, tid, &gen, &recs, &charged, &reserved, &cur) && gen == 1, "generation moved to %llu",
          (unsigned long long)gen);

    /* Two advances, each exactly one record (out of the reservation) plus its bytes; the
     * third is refused exactly at the ceiling. */
    for (int k = 1; k <= 3; k++) {
        if (k > 1)
            CHECK(adv_round(op, root, &cur, &w, why, sizeof why), "round %d: %s", k, why);
        uint64_t before = charged, r0 = reserved;
        int64_t t0 = now_ms();
        rc = adv_send(op, tid, &w, &res, &err);
        fprintf(stderr, "    advance %d call: %lld ms (%s)\n", k, (long long)(now_ms() - t0), kl_code_name(rc));
        if (k == 3) {
            CHECK(rc == KL_RESOURCE_EXHAUSTED && strcmp(err.detail, "limit:MaxQueueTransferAcceptAttempts") == 0,
                  "advance past the ceiling: %s %s", kl_code_name(rc), err.detail);
            CHECK(adv_counts(op, tid, &gen, &recs, &charged, &reserved, &cur) && gen == 3 && charged == before,
                  "after the refusal: generation %llu (want 3), charged %llu (want %llu)", (unsigned long long)gen,
                  (unsigned long long)charged, (unsigned long long)before);
            break;
        }
        CHECK(rc == KL_OK && res.generation == (uint64_t)k + 1, "advance %d: %s %s", k, kl_code_name(rc), err.message);
        CHECK(adv_counts(op, tid, &gen, &recs, &charged, &reserved, &cur) && gen == (uint64_t)k + 1 && recs == 3 &&
                  reserved == r0 - 1 && charged == before + res.charged_bytes && res.charged_bytes > 0,
              "advance %d: generation %llu records %llu reserved %llu charged %llu -> %llu by %llu", k,
              (unsigned long long)gen, (unsigned long long)recs, (unsigned long long)reserved,
              (unsigned long long)before, (unsigned long long)charged, (unsigned long long)res.charged_bytes);
        fprintf(stderr, "    advance %d: generation %llu, charged one record and %llu bytes\n", k,
                (unsigned long long)gen, (unsigned long long)res.charged_bytes);
    }
    /* Generation 3's Accept still goes through once there is room: exactly one message. */
    kl_command_id_new(cmd);
    CHECK(kl_batch_new(cmd, &b, &err) == KL_OK &&
              kl_batch_accept_transfer(b, "dst.adv", NULL, cur.b, cur.n, &err) == KL_OK &&
              cc_send(op, b, NULL, &err) == KL_OK,
          "generation 3 Accept: %s %s", kl_code_name(err.code), err.message);
    cc_tok rt;
    CHECK(cc_receipt(op, "dst.adv", "src.adv", NULL, tid, &rt, &err) == KL_OK && cc_token_generation(rt.b, rt.n) == 3,
          "the receipt is not generation 3's");
    CHECK(cc_messages(root, "dst.adv") == 1, "dst.adv holds %lld (want 1)", cc_messages(root, "dst.adv"));
    cc_fx.keep = true;
}

