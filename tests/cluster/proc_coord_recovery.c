/* proc_coord_recovery: RemoteTransferRecoveryTests, one transfer cut at each point of the
 * coordinator's turn (exit failpoints, leaders killed -9, a cold restart, SIGTERM), each
 * ending with one message and one receipt (proc_coord.h). */
#include "tests/cluster/proc_coord.h"

#include <stdlib.h>
#include <string.h>

/* ---- RemoteTransferRecoveryTests ---- */

#define REC_DB "acme/rec"

/* One recovery cut's transfer: src.rN (partition 1) -> dst.rN (partition 2), default lanes. */
typedef struct rec_cut {
    char src[32], dst[32], body[32];
    cc_id tid;
    cc_tok before; /* the receipt as read before the cut's repair (n 0: there was none) */
} rec_cut;

static bool rec_prepare(rec_cut *t, int n, char *why, size_t cap)
{
    kl_err err;
    snprintf(t->src, sizeof t->src, "src.r%d", n);
    snprintf(t->dst, sizeof t->dst, "dst.r%d", n);
    snprintf(t->body, sizeof t->body, "recovery-%d", n);
    t->before.n = 0;
    kl_command_id_new(t->tid);
    kl_code rc;
    const char *step = "queue src";
    if ((rc = cc_queue(REC_DB, t->src, CC_SRC, &err)) == KL_OK && (step = "queue dst", true) &&
        (rc = cc_queue(REC_DB, t->dst, CC_DST, &err)) == KL_OK && (step = "create", true))
        rc = cc_create(cc_client(WHO_COORD, REC_DB), t->src, NULL, t->tid, t->dst, NULL, t->body, &err);
    if (rc != KL_OK)
        snprintf(why, cap, "cut %d %s: %s %s (%s)", n, step, kl_code_name(rc), err.detail, err.message);
    return rc == KL_OK;
}

/* The Accepts and Completes coordinator i logged for tid: how many, and whether each was
 * sent under the command id derived here for its step (acc, cmp). -1 with why filled when
 * one was not: a retry or restart that minted a new effect identity. */
static int rec_logged_ids(int i, const char *tid, const char *acc, const char *cmp, char *why, size_t cap)
{
    FILE *f = fopen(cc_fx.coords[i].log, "r");
    if (f == NULL)
        return 0;
    char line[2048];
    int n = 0;
    while (n >= 0 && fgets(line, sizeof line, f)) {
        bool is_acc = strstr(line, "msg=\"accept_sent\"") != NULL;
        if ((!is_acc && strstr(line, "msg=\"complete_sent\"") == NULL) || strstr(line, tid) == NULL)
            continue;
        const char *c = strstr(line, " cmd=");
        if (c == NULL || strncmp(c + 5, is_acc ? acc : cmp, KL_GUID_TEXT_LEN) != 0) {
            snprintf(why, cap, "%s sent under %.41s, not the derived %s (log %s)", is_acc ? "an Accept" : "a Complete",
                     c ? c + 1 : "(no cmd)", is_acc ? acc : cmp, cc_fx.coords[i].log);
            n = -1;
        } else
            n++;
    }
    fclose(f);
    return n;
}

/* What every cut ends with: exactly one destination message, with the transfer's body; the
 * receipt byte-identical to the one read before the repair (when there was one) and to the
 * Delivered intent's; the source Delivered. */
static bool rec_verify(const rec_cut *t, char *why, size_t cap)
{
    kl_client *op = cc_client(WHO_COORD, REC_DB), *root = cc_client(WHO_ROOT, REC_DB);
    kl_err err;
    cc_tok after, delivered;
    kl_code rc = cc_receipt(op, t->dst, t->src, NULL, t->tid, &after, &err);
    uint32_t state = cc_state(op, t->src, NULL, t->tid, &delivered);
    long long n = cc_messages(root, t->dst);
    char bodies[4][64];
    int got = cc_receive(root, t->dst, NULL, 4, bodies);
    if (rc != KL_OK)
        snprintf(why, cap, "receipt after the repair: %s %s", kl_code_name(rc), err.message);
    else if (t->before.n > 0 && !cc_tok_eq(&t->before, after.b, after.n))
        snprintf(why, cap, "the receipt token changed across the cut (%zu bytes before, %zu after)", t->before.n,
                 after.n);
    else if (state != KEYLOAD__V1__TRANSFER_STATE__DELIVERED)
        snprintf(why, cap, "source state %s (want Delivered)", kl_transfer_state_name(state));
    else if (!cc_tok_eq(&after, delivered.b, delivered.n))
        snprintf(why, cap, "the Delivered intent holds another receipt than the destination's");
    else if (n != 1 || got != 1 || strcmp(bodies[0], t->body) != 0)
        snprintf(why, cap, "destination holds %lld messages, received %d (want exactly 1, body %s)", n, got,
                 t->body);
    else {
        /* Every Accept and Complete of the cut's two coordinators (the one cut and the one
         * that repaired) went out under the transfer's deterministic ids. */
        Keyload__V1__InspectQueueTransferAnswer *a = NULL;
        char acc[KL_GUID_TEXT_LEN + 1], cmp[KL_GUID_TEXT_LEN + 1];
        bool derived = kl_client_inspect_transfer(op, t->src, NULL, t->tid, &a, &err) == KL_OK &&
                       cc_command_id("accept", "coord", REC_DB, a, t->tid, acc) &&
                       cc_command_id("complete", "coord", REC_DB, a, t->tid, cmp);
        kl_transfer_answer_free(a);
        if (!derived) {
            snprintf(why, cap, "deriving the command ids");
            return false;
        }
        int s0 = rec_logged_ids(0, t->tid, acc, cmp, why, cap);
        int s1 = s0 < 0 ? 0 : rec_logged_ids(1, t->tid, acc, cmp, why, cap);
        if (s0 < 0 || s1 < 0)
            return false;
        if (s0 + s1 < 1) {
            snprintf(why, cap, "no coordinator logged an Accept or Complete for %s", t->tid);
            return false;
        }
        return true;
    }
    return false;
}

static void rec_opts(cc_opts *o)
{
    *o = (cc_opts){.db = REC_DB, .who = WHO_COORD, .workers = 1, .flush_ms = 5, .discovery_ms = 50,
                   .call_timeout_ms = 2000};
}

/* Cut at an exit failpoint: the coordinator runs until `failpoint` ends it with _exit(77). */
static bool rec_exit_at(int slot, const char *tag, const char *failpoint, char *why, size_t cap)
{
    cc_opts o;
    rec_opts(&o);
    if (!cc_coord_config(slot, tag, &o)) {
        snprintf(why, cap, "coordinator config");
        return false;
    }
    char spec[128];
    snprintf(spec, sizeof spec, "%s=exit", failpoint);
    cc_coord_start(slot, spec);
    int st = cc_coord_wait(slot, 20000);
    if (!cc_exited_with(st, CC_EXIT_FAILPOINT)) {
        snprintf(why, cap, "the coordinator armed with %s ended with wait status %d (want exit %d; log %s)", spec, st,
                 CC_EXIT_FAILPOINT, cc_fx.coords[slot].log);
        return false;
    }
    return true;
}

/* The repair: a coordinator without failpoints drives the transfer to Delivered, then
 * drains on SIGTERM (exit 0). */
static bool rec_repair(int slot, const char *tag, const rec_cut *t, char *why, size_t cap)
{
    cc_opts o;
    rec_opts(&o);
    if (!cc_coord_config(slot, tag, &o)) {
        snprintf(why, cap, "coordinator config");
        return false;
    }
    cc_coord_start(slot, NULL);
    bool ok = cc_wait_state(cc_client(WHO_COORD, REC_DB), t->src, NULL, t->tid, KEYLOAD__V1__TRANSFER_STATE__DELIVERED,
                            30000);
    int st = cc_coord_stop(slot);
    if (!ok)
        snprintf(why, cap, "not Delivered within 30 s after the restart (log %s)", cc_fx.coords[slot].log);
    else if (!cc_exited_with(st, 0))
        snprintf(why, cap, "the coordinator's SIGTERM drain ended with wait status %d (want exit 0)", st);
    return ok && cc_exited_with(st, 0);
}

/* Kills partition p's leader -9 while coordinator slot is parked in a sleep failpoint with
 * the transfer half done, lets its next call meet the outage (replica_count 3: no write
 * commits on p until the member is back), restarts the member and waits for Delivered. */
static bool rec_kill_leader(int slot, int p, const rec_cut *t, char *why, size_t cap)
{
    int leader = cc_leader(p);
    if (leader < 0) {
        snprintf(why, cap, "partition %d has no serving leader", p);
        return false;
    }
    cc_kill(p, leader);
    int64_t t0 = now_ms();
    sleep_ms(2500);
    cc_spawn(p, leader);
    bool ok = cc_wait_state(cc_client(WHO_COORD, REC_DB), t->src, NULL, t->tid, KEYLOAD__V1__TRANSFER_STATE__DELIVERED,
                            40000);
    fprintf(stderr, "    p%dm%d (leader) killed -9, back after 2.5 s; Delivered %lld ms after the kill; "
                    "coordinator retries: %d\n",
            p, leader + 1, (long long)(now_ms() - t0), cc_log_count(slot, "msg=\"retry\"", t->tid));
    if (!ok)
        snprintf(why, cap, "not Delivered within 40 s after partition %d's leader came back (log %s)", p,
                 cc_fx.coords[slot].log);
    return ok && cc_wait_all(20000);
}

/* Cuts 1-3: the coordinator ends itself at an exit failpoint before the Accept, after it,
 * and after the Complete. */
static void rec_cuts_exit(void)
{
    char why[1024] = "";
    kl_err err;
    kl_err_clear(&err);
    kl_client *op = cc_client(WHO_COORD, REC_DB);
    rec_cut t;
    int64_t t0;

    /* 1. After Create, before any Accept: created while no coordinator runs; the first
     * coordinator is cut at coord.before_accept (the Accept built, never sent). */
    t0 = now_ms();
    CHECK(rec_prepare(&t, 1, why, sizeof why), "%s", why);
    CHECK(rec_exit_at(0, "r1a", "coord.before_accept", why, sizeof why), "cut 1: %s", why);
    kl_code rc = cc_receipt(op, t.dst, t.src, NULL, t.tid, &t.before, &err);
    CHECK(rc == KL_NOT_FOUND, "cut 1: a receipt exists though no Accept was sent: %s", kl_code_name(rc));
    CHECK(cc_state(op, t.src, NULL, t.tid, NULL) == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING, "cut 1: not pending");
    CHECK(cc_messages(cc_client(WHO_ROOT, REC_DB), t.dst) == 0, "cut 1: the destination has a message");
    CHECK(rec_repair(1, "r1b", &t, why, sizeof why), "cut 1: %s", why);
    CHECK(rec_verify(&t, why, sizeof why), "cut 1 (before Accept): %s", why);
    fprintf(stderr, "    cut 1, coordinator exit at coord.before_accept: ok (%lld ms)\n", (long long)(now_ms() - t0));

    /* 2. The Accept committed and answered, its answer not yet used (coord.after_accept_sent):
     * the restarted coordinator finds the receipt and completes with it. */
    t0 = now_ms();
    CHECK(rec_prepare(&t, 2, why, sizeof why), "%s", why);
    CHECK(rec_exit_at(0, "r2a", "coord.after_accept_sent", why, sizeof why), "cut 2: %s", why);
    CHECK(cc_receipt(op, t.dst, t.src, NULL, t.tid, &t.before, &err) == KL_OK, "cut 2: no receipt after the Accept: %s",
          err.message);
    CHECK(cc_state(op, t.src, NULL, t.tid, NULL) == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING, "cut 2: not pending");
    CHECK(rec_repair(1, "r2b", &t, why, sizeof why), "cut 2: %s", why);
    CHECK(rec_verify(&t, why, sizeof why), "cut 2 (after Accept): %s", why);
    json_t *st = cc_status_load(1);
    fprintf(stderr, "    cut 2, coordinator exit at coord.after_accept_sent: ok (%lld ms; the restarted one sent "
                    "%lld Accepts, %lld Completes)\n",
            (long long)(now_ms() - t0), cc_counter(st, "accept_sent"), cc_counter(st, "complete_sent"));
    json_decref(st);

    /* 3. Complete sent and answered (Delivered committed), the coordinator gone before it
     * counted it: the restarted coordinator has nothing left to do. */
    t0 = now_ms();
    CHECK(rec_prepare(&t, 3, why, sizeof why), "%s", why);
    CHECK(rec_exit_at(0, "r3a", "coord.after_complete_sent", why, sizeof why), "cut 3: %s", why);
    CHECK(cc_receipt(op, t.dst, t.src, NULL, t.tid, &t.before, &err) == KL_OK, "cut 3: no receipt: %s", err.message);
    CHECK(cc_state(op, t.src, NULL, t.tid, NULL) == KEYLOAD__V1__TRANSFER_STATE__DELIVERED,
          "cut 3: the answered Complete left the source undelivered");
    CHECK(rec_repair(1, "r3b", &t, why, sizeof why), "cut 3: %s", why);
    CHECK(rec_verify(&t, why, sizeof why), "cut 3 (after Complete): %s", why);
    fprintf(stderr, "    cut 3, coordinator exit at coord.after_complete_sent: ok (%lld ms)\n",
            (long long)(now_ms() - t0));
}

/* Cuts 4, 5 and 5b: a partition's leader killed -9 while a sleep failpoint parks the
 * coordinator with the transfer half done. */
static void rec_cuts_leader_killed(void)
{
    char why[1024] = "";
    kl_err err;
    kl_err_clear(&err);
    kl_client *op = cc_client(WHO_COORD, REC_DB);
    rec_cut t;
    int64_t t0;

    /* 4. The SOURCE leader killed -9 between Accept and Complete: the coordinator is parked
     * (once) at coord.before_complete with the receipt read and rechecked, so its Complete
     * is the first call to meet the dead leader. */
    t0 = now_ms();
    CHECK(rec_prepare(&t, 4, why, sizeof why), "%s", why);
    /* A short call timeout: a call that meets the outage fails, and the coordinator's own
     * retry (not only the SDK's resend inside one call) must keep the command id. */
    cc_opts o;
    rec_opts(&o);
    o.call_timeout_ms = 500;
    CHECK(cc_coord_config(0, "r4a", &o), "config");
    cc_coord_start(0, "coord.before_complete=1*sleep(1000)");
    CHECK(cc_wait_log(0, "msg=\"receipt_read\"", t.tid, 20000) == 1, "cut 4: the coordinator did not read the receipt");
    CHECK(cc_receipt(op, t.dst, t.src, NULL, t.tid, &t.before, &err) == KL_OK, "cut 4: receipt: %s", err.message);
    /* Really mid-transfer: accepted, not completed (the parked coordinator holds it). */
    CHECK(cc_state(op, t.src, NULL, t.tid, NULL) == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING,
          "cut 4: already Delivered before the kill (did the sleep failpoint fire?)");
    CHECK(rec_kill_leader(0, CC_SRC, &t, why, sizeof why), "cut 4: %s", why);
    CHECK(cc_log_count(0, "msg=\"retry\"", t.tid) >= 1, "cut 4: the coordinator never met the outage");
    CHECK(cc_exited_with(cc_coord_stop(0), 0), "cut 4: the coordinator's drain did not exit 0");
    CHECK(rec_repair(1, "r4b", &t, why, sizeof why), "cut 4: %s", why);
    CHECK(rec_verify(&t, why, sizeof why), "cut 4 (source leader killed): %s", why);
    fprintf(stderr, "    cut 4, source leader kill -9 before Complete: ok (%lld ms)\n", (long long)(now_ms() - t0));

    /* 5. The DESTINATION leader killed -9 before the Accept: parked (once) at
     * coord.before_accept after it found no receipt; its Accept meets the dead leader, is
     * retried under the same command id and must enqueue once. */
    t0 = now_ms();
    CHECK(rec_prepare(&t, 5, why, sizeof why), "%s", why);
    CHECK(cc_coord_config(0, "r5a", &o), "config");
    cc_coord_start(0, "coord.before_accept=1*sleep(1000)");
    CHECK(cc_wait_log(0, "msg=\"dispatched\"", t.tid, 20000) == 1, "cut 5: the coordinator did not take the transfer");
    sleep_ms(300); /* its turn reads the source and the (absent) receipt, then parks */
    cc_tok none;
    kl_code rc5 = cc_receipt(op, t.dst, t.src, NULL, t.tid, &none, &err);
    CHECK(rc5 == KL_NOT_FOUND, "cut 5: the destination already answers %s before the kill (did the sleep "
          "failpoint fire?)", kl_code_name(rc5));
    CHECK(rec_kill_leader(0, CC_DST, &t, why, sizeof why), "cut 5: %s", why);
    CHECK(cc_log_count(0, "msg=\"retry\"", t.tid) >= 1, "cut 5: the coordinator never met the outage");
    CHECK(cc_exited_with(cc_coord_stop(0), 0), "cut 5: the coordinator's drain did not exit 0");
    CHECK(cc_receipt(op, t.dst, t.src, NULL, t.tid, &t.before, &err) == KL_OK, "cut 5: receipt: %s", err.message);
    CHECK(rec_repair(1, "r5b", &t, why, sizeof why), "cut 5: %s", why);
    CHECK(rec_verify(&t, why, sizeof why), "cut 5 (destination leader killed before Accept): %s", why);
    fprintf(stderr, "    cut 5, destination leader kill -9 before Accept: ok (%lld ms)\n", (long long)(now_ms() - t0));

    /* 5b. The DESTINATION leader killed -9 right after the Accept committed (parked once at
     * coord.after_accept_sent): the receipt reread from the new leader is the same bytes. */
    t0 = now_ms();
    CHECK(rec_prepare(&t, 6, why, sizeof why), "%s", why);
    CHECK(cc_coord_config(0, "r5c", &o), "config");
    cc_coord_start(0, "coord.after_accept_sent=1*sleep(1000)");
    CHECK(cc_wait_log(0, "msg=\"accepted\"", t.tid, 20000) == 1, "cut 5b: the coordinator's Accept was not answered");
    CHECK(cc_receipt(op, t.dst, t.src, NULL, t.tid, &t.before, &err) == KL_OK, "cut 5b: receipt: %s", err.message);
    CHECK(cc_state(op, t.src, NULL, t.tid, NULL) == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING,
          "cut 5b: already Delivered before the kill (did the sleep failpoint fire?)");
    CHECK(rec_kill_leader(0, CC_DST, &t, why, sizeof why), "cut 5b: %s", why);
    CHECK(cc_exited_with(cc_coord_stop(0), 0), "cut 5b: the coordinator's drain did not exit 0");
    CHECK(rec_repair(1, "r5d", &t, why, sizeof why), "cut 5b: %s", why);
    CHECK(rec_verify(&t, why, sizeof why), "cut 5b (destination leader killed after Accept): %s", why);
    fprintf(stderr, "    cut 5b, destination leader kill -9 after Accept: ok (%lld ms)\n", (long long)(now_ms() - t0));
}

/* Cut 6: the whole cluster cold-restarted between Accept and Complete. */
static void rec_cut_cold_restart(void)
{
    char why[1024] = "";
    kl_err err;
    kl_err_clear(&err);
    kl_client *op = cc_client(WHO_COORD, REC_DB);
    rec_cut t;
    int64_t t0;

    /* 6. A cold restart of the whole cluster between Accept and Complete: the coordinator
     * cut at coord.before_complete, all nine members killed -9 and started again. */
    t0 = now_ms();
    CHECK(rec_prepare(&t, 7, why, sizeof why), "%s", why);
    CHECK(rec_exit_at(0, "r6a", "coord.before_complete", why, sizeof why), "cut 6: %s", why);
    CHECK(cc_receipt(op, t.dst, t.src, NULL, t.tid, &t.before, &err) == KL_OK, "cut 6: receipt: %s", err.message);
    CHECK(cc_cold_restart(), "cut 6: the cluster did not serve again within 40 s");
    op = cc_client(WHO_COORD, REC_DB);
    CHECK(op, "client after the cold restart");
    cc_tok again;
    CHECK(cc_receipt(op, t.dst, t.src, NULL, t.tid, &again, &err) == KL_OK && cc_tok_eq(&t.before, again.b, again.n),
          "cut 6: the receipt after the cold restart: %s, %s", kl_code_name(err.code),
          cc_tok_eq(&t.before, again.b, again.n) ? "same" : "DIFFERENT");
    CHECK(cc_state(op, t.src, NULL, t.tid, NULL) == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING,
          "cut 6: not pending after the cold restart");
    CHECK(rec_repair(1, "r6b", &t, why, sizeof why), "cut 6: %s", why);
    CHECK(rec_verify(&t, why, sizeof why), "cut 6 (cold restart before Complete): %s", why);
    fprintf(stderr, "    cut 6, cold restart between Accept and Complete: ok (%lld ms)\n", (long long)(now_ms() - t0));
}

/* Cut 7: SIGTERM while the coordinator is parked after the Accept. */
static void rec_cut_sigterm(void)
{
    char why[1024] = "";
    kl_err err;
    kl_err_clear(&err);
    kl_client *op = cc_client(WHO_COORD, REC_DB);
    rec_cut t;
    int64_t t0;
    cc_opts o;

    /* 7. SIGTERM mid-turn, the drain: parked (once) at coord.after_accept_sent, the
     * coordinator is told to stop. It ends the turn at the next point between two calls
     * (before the receipt reread) without sending Complete, reports the turn cancelled
     * (never rolled back) and exits 0 long before a turn of calls could have run. A new
     * coordinator completes the transfer under the same command ids. */
    t0 = now_ms();
    CHECK(rec_prepare(&t, 8, why, sizeof why), "%s", why);
    rec_opts(&o);
    CHECK(cc_coord_config(0, "r7a", &o), "config");
    cc_coord_start(0, "coord.after_accept_sent=1*sleep(1500)");
    CHECK(cc_wait_log(0, "msg=\"accepted\"", t.tid, 20000) == 1, "cut 7: the coordinator's Accept was not answered");
    int64_t term_at = now_ms();
    int st7 = cc_coord_stop(0);
    int64_t drain_ms = now_ms() - term_at;
    CHECK(cc_exited_with(st7, 0), "cut 7: the drain ended with wait status %d (want exit 0; log %s)", st7,
          cc_fx.coords[0].log);
    CHECK(cc_log_count(0, "msg=\"cancelled\"", t.tid) == 1 &&
              cc_log_count(0, "before=reread_receipt", t.tid) == 1,
          "cut 7: no cancelled line before reread_receipt for the transfer (log %s)", cc_fx.coords[0].log);
    CHECK(cc_log_count(0, "msg=\"complete_sent\"", t.tid) == 0 && cc_log_count(0, "rolled", NULL) == 0,
          "cut 7: the stopping coordinator sent Complete or reported a rollback (log %s)", cc_fx.coords[0].log);
    CHECK(drain_ms < 5000, "cut 7: the drain took %lld ms (the parked call is 1.5 s, one call at most 2 s)",
          (long long)drain_ms);
    CHECK(cc_receipt(op, t.dst, t.src, NULL, t.tid, &t.before, &err) == KL_OK, "cut 7: receipt: %s", err.message);
    CHECK(cc_state(op, t.src, NULL, t.tid, NULL) == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING,
          "cut 7: not pending after the drain");
    CHECK(rec_repair(1, "r7b", &t, why, sizeof why), "cut 7: %s", why);
    CHECK(rec_verify(&t, why, sizeof why), "cut 7 (SIGTERM mid-turn): %s", why);
    fprintf(stderr, "    cut 7, SIGTERM while parked after Accept: drained in %lld ms, ok (%lld ms)\n",
            (long long)drain_ms, (long long)(now_ms() - t0));
}

void test_coord_recovery(void)
{
    CC_BEGIN("RemoteTransferRecoveryTests");
    CHECK(cc_database(REC_DB, why, sizeof why), "%s", why);
    kl_client *op = cc_client(WHO_COORD, REC_DB);
    CHECK(op, "client");
    CC_STEP(rec_cuts_exit());
    CC_STEP(rec_cuts_leader_killed());
    CC_STEP(rec_cut_cold_restart());
    CC_STEP(rec_cut_sigterm());
    cc_fx.keep = true;
}
