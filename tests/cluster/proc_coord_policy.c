/* proc_coord_policy: who the coordinator drives and what policy does to it: a null principal
 * and another principal's transfers (CoordinatorPrincipalTests), revoked grants retained and
 * repaired (CoordinatorPolicyRepairTests) (proc_coord.h). */
#include "tests/cluster/proc_coord.h"

#include <stdlib.h>
#include <string.h>

/* ---- CoordinatorPrincipalTests ---- */

#define NP_DB "acme/np"

void test_coord_principal(void)
{
    CC_BEGIN("CoordinatorPrincipalTests");
    CHECK(cc_database(NP_DB, why, sizeof why), "%s", why);
    CHECK(cc_queue(NP_DB, "src.np", CC_SRC, &err) == KL_OK, "queue: %s", err.message);
    CHECK(cc_queue(NP_DB, "dst.np", CC_DST, &err) == KL_OK, "queue: %s", err.message);
    kl_client *mine = cc_client(WHO_COORD, NP_DB), *other = cc_client(WHO_OTHER, NP_DB),
              *root = cc_client(WHO_ROOT, NP_DB);
    CHECK(mine && other && root, "clients");
    cc_id own[3], foreign[3];
    for (int i = 0; i < 3; i++) {
        char body[32];
        kl_command_id_new(own[i]);
        kl_command_id_new(foreign[i]);
        snprintf(body, sizeof body, "own-%d", i);
        CHECK(cc_create(mine, "src.np", "own", own[i], "dst.np", NULL, body, &err) == KL_OK, "create own: %s",
              err.message);
        snprintf(body, sizeof body, "foreign-%d", i);
        CHECK(cc_create(other, "src.np", "foreign", foreign[i], "dst.np", NULL, body, &err) == KL_OK,
              "create foreign: %s", err.message);
    }

    /* Null principal: no discovery at all. A few flush intervals, and ten discovery
     * intervals as if it had discovered: everything still pending, nothing delivered, and
     * the log says once that it idles. */
    cc_opts o = {.db = NP_DB, .who = -1, .workers = 2, .flush_ms = 5, .discovery_ms = 50};
    CHECK(cc_coord_config(0, "np-null", &o), "config");
    cc_coord_start(0, NULL);
    sleep_ms(600);
    for (int i = 0; i < 3; i++) {
        CHECK(cc_state(mine, "src.np", "own", own[i], NULL) == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING,
              "own %d not pending under a null-principal coordinator", i);
        CHECK(cc_state(other, "src.np", "foreign", foreign[i], NULL) == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING,
              "foreign %d not pending under a null-principal coordinator", i);
    }
    CHECK(cc_messages(root, "dst.np") == 0, "a null-principal coordinator delivered something");
    json_t *st = cc_status_load(0);
    json_t *disc = json_object_get(st, "discovery");
    CHECK(json_is_string(disc) && strcmp(json_string_value(disc), "disabled: null principal") == 0 &&
              json_is_null(json_object_get(json_object_get(st, "config"), "principal_id")) &&
              cc_counter(st, "rounds") == 0,
          "status of the null-principal coordinator: discovery %s, rounds %lld",
          json_is_string(disc) ? json_string_value(disc) : "(none)", cc_counter(st, "rounds"));
    json_decref(st);
    int idle = cc_log_count(0, "msg=\"idle\"", NULL), rounds = cc_log_count(0, "msg=\"discovery_round\"", NULL);
    int sz = cc_exited_with(cc_coord_stop(0), 0);
    CHECK(idle == 1 && rounds == 0, "log of the null-principal coordinator: %d idle lines, %d discovery rounds "
          "(want 1, 0)", idle, rounds);
    CHECK(sz, "the idle coordinator did not exit 0 on SIGTERM");

    /* The coordinator's own principal: its three are delivered, the other principal's three
     * are never taken (and stay pending for many discovery rounds after). */
    o.who = WHO_COORD;
    CHECK(cc_coord_config(0, "np-own", &o), "config");
    cc_coord_start(0, NULL);
    for (int i = 0; i < 3; i++)
        CHECK(cc_wait_state(mine, "src.np", "own", own[i], KEYLOAD__V1__TRANSFER_STATE__DELIVERED, 20000),
              "own %d not Delivered within 20 s", i);
    sleep_ms(600); /* a dozen more discovery rounds */
    for (int i = 0; i < 3; i++)
        CHECK(cc_state(other, "src.np", "foreign", foreign[i], NULL) == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING,
              "another principal's transfer %d was driven", i);
    CHECK(cc_messages(root, "dst.np") == 3, "dst.np holds %lld (want 3)", cc_messages(root, "dst.np"));
    CHECK(cc_log_count(0, "msg=\"dispatched\"", "source=src.np/foreign") == 0,
          "another principal's transfer was dispatched");
    CHECK(cc_exited_with(cc_coord_stop(0), 0), "drain");
    st = cc_status_load(0);
    long long foreign_seen = cc_counter(st, "skipped_foreign");
    json_decref(st);
    CHECK(foreign_seen >= 3, "skipped_foreign %lld (want >= 3: it saw them and left them)", foreign_seen);
    cc_fx.keep = true;
}


/* ---- CoordinatorPolicyRepairTests ---- */

#define RV_DB "acme/rv"
#define RV_N 3

#define RV_DLANE_MAX 64

/* Each denied Accept retained (no terminal failure), every transfer still pending and
 * nothing at the destination. */
static void rv_retained(kl_client *op, kl_client *root, cc_id *tid)
{
    /* The status file is rewritten every 2 s. */
    long long terminal = -1, retained = -1;
    for (int64_t deadline = now_ms() + 10000; now_ms() < deadline && retained < RV_N; sleep_ms(200)) {
        json_t *st = cc_status_load(0);
        terminal = cc_counter(st, "terminal_failures");
        retained = cc_counter(st, "failures_retained");
        json_decref(st);
    }
    CHECK(terminal == 0 && retained >= RV_N, "terminal_failures %lld (want 0), failures_retained %lld (want >= %d)",
          terminal, retained, RV_N);
    for (int i = 0; i < RV_N; i++)
        CHECK(cc_state(op, "src.rv", NULL, tid[i], NULL) == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING,
              "transfer %d is not pending", i);
    CHECK(cc_messages(root, "dst.rv") == 0, "the destination has messages");

}

/* tid[0]'s Accept under the coordinator's id: its id, destination lane and intent token
 * into acc, dlane and intent. */
static void rv_by_hand(kl_client *op, cc_id *tid, char acc[KL_GUID_TEXT_LEN + 1], char dlane[RV_DLANE_MAX],
                       cc_tok *intent)
{
    kl_err err;
    kl_err_clear(&err);
    /* By hand, under the coordinator's deterministic id (derived here): the committed
     * denial answers the same, and with the epoch unchanged no witness is signed, so no
     * repair can be made. */
    CHECK(cc_accept_id(op, RV_DB, "src.rv", tid[0], acc, intent, dlane, RV_DLANE_MAX), "deriving the command id");
    char needle[80];
    snprintf(needle, sizeof needle, "cmd=%s", acc);
    CHECK(cc_log_count(0, "msg=\"accept_sent\"", needle) == 1,
          "the coordinator sent the refused Accept %s %d times (want once: a retained failure is not resent)", acc,
          cc_log_count(0, "msg=\"accept_sent\"", needle));
    kl_batch *b = NULL;
    CHECK(kl_batch_new(acc, &b, &err) == KL_OK &&
              kl_batch_accept_transfer(b, "dst.rv", dlane, intent->b, intent->n, &err) == KL_OK,
          "build: %s", err.message);
    kl_code rc = cc_send(op, b, NULL, &err);
    CHECK(rc == KL_PERMISSION_DENIED, "the deterministic Accept: %s %s", kl_code_name(rc), err.detail);
    Keyload__V1__ReadQueueTransferFailureAnswer *fa = NULL;
    CHECK(kl_client_read_transfer_failure(op, "dst.rv", dlane, intent->b, intent->n, acc, &fa, &err) == KL_OK,
          "failure read: %s %s", kl_code_name(err.code), err.message);
    bool unchanged = fa->verdict == KEYLOAD__V1__FAILURE_VERDICT__UNCHANGED && fa->witness_token.len == 0 &&
                     strcmp(fa->unchanged_detail, "policy_epoch") == 0 && fa->failure_code == KL_PERMISSION_DENIED;
    kl_transfer_failure_answer_free(fa);
    CHECK(unchanged, "with the epoch unchanged the failure read must answer Unchanged policy_epoch, no witness");

}

/* The destination grant restored: repaired and delivered, and tid[0]'s historical Accept
 * (acc, dlane, intent) still denied. */
static void rv_restored(kl_client *op, kl_client *root, cc_id *tid, const char *acc, const char *dlane,
                        const cc_tok *intent)
{
    kl_err err;
    kl_err_clear(&err);
    kl_batch *b = NULL;
    kl_code rc;
    /* Restoring the grant is a real persisted policy change: the coordinator's next read
     * gets a witness, repairs to generation 2, and delivers each exactly once. */
    int64_t t_fix = now_ms();
    CHECK(cc_grant(RV_DB, WHO_COORD, KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "dst.*", &err) == KL_OK,
          "restore the grant: %s", err.message);
    for (int i = 0; i < RV_N; i++)
        CHECK(cc_wait_state(op, "src.rv", NULL, tid[i], KEYLOAD__V1__TRANSFER_STATE__DELIVERED, 30000),
              "transfer %d not Delivered within 30 s of the restore (log %s)", i, cc_fx.coords[0].log);
    fprintf(stderr, "    %d transfers repaired and delivered %lld ms after the grant came back\n", RV_N,
            (long long)(now_ms() - t_fix));
    CHECK(cc_exited_with(cc_coord_stop(0), 0), "drain");
    CHECK(cc_messages(root, "dst.rv") == RV_N, "dst.rv holds %lld (want %d)", cc_messages(root, "dst.rv"), RV_N);
    for (int i = 0; i < RV_N; i++) {
        uint64_t gen = 0;
        int repaired = 0;
        CHECK(cc_history(op, "src.rv", tid[i], &gen, KEYLOAD__V1__TRANSFER_EVENT__POLICY_REPAIRED, &repaired, NULL),
              "inspect %d", i);
        CHECK(gen == 2 && repaired == 1, "transfer %d: generation %llu, %d PolicyRepaired entries (want 2, 1)", i,
              (unsigned long long)gen, repaired);
        cc_tok rt;
        CHECK(cc_state(op, "src.rv", NULL, tid[i], &rt) == KEYLOAD__V1__TRANSFER_STATE__DELIVERED &&
                  cc_token_generation(rt.b, rt.n) == 2,
              "transfer %d: the receipt is not generation 2's", i);
        CHECK(cc_log_count(0, "kind=repair", tid[i]) == 1, "transfer %d: %d repairs logged (want 1)", i,
              cc_log_count(0, "kind=repair", tid[i]));
    }
    /* The historical denial still answers the same: restoring policy minted no new id. */
    CHECK(kl_batch_new(acc, &b, &err) == KL_OK &&
              kl_batch_accept_transfer(b, "dst.rv", dlane, intent->b, intent->n, &err) == KL_OK,
          "build: %s", err.message);
    rc = cc_send(op, b, NULL, &err);
    CHECK(rc == KL_PERMISSION_DENIED, "the generation-1 Accept after the repair: %s (want its committed denial)",
          kl_code_name(rc));
    CHECK(cc_messages(root, "dst.rv") == RV_N, "a resent Accept added a message");

}

/* A denied Complete retained, repaired and completed (coordinators configured as o). */
static void rv_denied_complete(kl_client *op, kl_client *root, const cc_opts *oc)
{
    kl_err err;
    kl_err_clear(&err);
    cc_id cmd;
    kl_principal_result pres;
    cc_opts o = *oc;
    /* A denied Complete: the source publish grant revoked after the create, so the Accept
     * commits and the Complete is refused; retained, read on the source (unchanged while
     * revoked), repaired once the grant is back, then completed at generation 2 with the
     * generation-1 receipt. */
    cc_id tc;
    kl_command_id_new(tc);
    CHECK(cc_create(op, "src.rv", NULL, tc, "dst.rv", NULL, "denied-complete", &err) == KL_OK, "create: %s",
          err.message);
    kl_command_id_new(cmd);
    CHECK(kl_client_revoke(root, cmd, "coord", KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "src.*", &pres, NULL, &err) ==
              KL_OK,
          "revoke src.*: %s", err.message);
    CHECK(cc_coord_config(0, "rv2", &o), "config");
    cc_coord_start(0, NULL);
    CHECK(cc_wait_log(0, "still=policy_epoch", tc, 20000) >= 1, "the denied Complete was not retained (log %s)",
          cc_fx.coords[0].log);
    CHECK(cc_messages(root, "dst.rv") == RV_N + 1, "the Accept before the denied Complete did not commit");
    CHECK(cc_state(op, "src.rv", NULL, tc, NULL) == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING, "not pending");
    CHECK(cc_grant(RV_DB, WHO_COORD, KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "src.*", &err) == KL_OK,
          "restore src.*: %s", err.message);
    CHECK(cc_wait_state(op, "src.rv", NULL, tc, KEYLOAD__V1__TRANSFER_STATE__DELIVERED, 30000),
          "the denied Complete was not repaired and delivered (log %s)", cc_fx.coords[0].log);
    CHECK(cc_exited_with(cc_coord_stop(0), 0), "drain");
    uint64_t gen = 0;
    int repaired = 0;
    cc_tok rt;
    CHECK(cc_history(op, "src.rv", tc, &gen, KEYLOAD__V1__TRANSFER_EVENT__POLICY_REPAIRED, &repaired, NULL) &&
              gen == 2 && repaired == 1,
          "denied Complete: generation %llu, %d repairs (want 2, 1)", (unsigned long long)gen, repaired);
    CHECK(cc_state(op, "src.rv", NULL, tc, &rt) == KEYLOAD__V1__TRANSFER_STATE__DELIVERED &&
              cc_token_generation(rt.b, rt.n) == 1,
          "denied Complete: the receipt is not the generation-1 Accept's");
    CHECK(cc_log_count(0, "step=complete", tc) == 1 && cc_log_count(0, "kind=repair", tc) == 1,
          "denied Complete: the witness and the repair are not logged once each");
    CHECK(cc_messages(root, "dst.rv") == RV_N + 1, "dst.rv holds %lld (want %d)", cc_messages(root, "dst.rv"),
          RV_N + 1);
}

void test_coord_revoked(void)
{
    CC_BEGIN("CoordinatorPolicyRepairTests");
    CHECK(cc_database(RV_DB, why, sizeof why), "%s", why);
    CHECK(cc_queue(RV_DB, "src.rv", CC_SRC, &err) == KL_OK, "queue: %s", err.message);
    CHECK(cc_queue(RV_DB, "dst.rv", CC_DST, &err) == KL_OK, "queue: %s", err.message);
    kl_client *op = cc_client(WHO_COORD, RV_DB), *root = cc_client(WHO_ROOT, RV_DB);
    CHECK(op && root, "clients");
    cc_id tid[RV_N];
    for (int i = 0; i < RV_N; i++) {
        char body[32];
        snprintf(body, sizeof body, "revoked-%d", i);
        kl_command_id_new(tid[i]);
        CHECK(cc_create(op, "src.rv", NULL, tid[i], "dst.rv", NULL, body, &err) == KL_OK, "create: %s", err.message);
    }
    cc_id cmd;
    kl_command_id_new(cmd);
    kl_principal_result pres;
    CHECK(kl_client_revoke(root, cmd, "coord", KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "dst.*", &pres, NULL, &err) ==
              KL_OK,
          "revoke: %s", err.message);

    cc_opts o = {.db = RV_DB, .who = WHO_COORD, .workers = 1, .flush_ms = 5, .discovery_ms = 50};
    CHECK(cc_coord_config(0, "rv", &o), "config");
    cc_coord_start(0, NULL);
    /* Each denied Accept is retained, and the fresh read says the epoch has not changed. */
    for (int i = 0; i < RV_N; i++)
        CHECK(cc_wait_log(0, "still=policy_epoch", tid[i], 20000) >= 1,
              "transfer %d: no unchanged-epoch failure read in %s", i, cc_fx.coords[0].log);
    CC_STEP(rv_retained(op, root, tid));
    char acc[KL_GUID_TEXT_LEN + 1], dlane[RV_DLANE_MAX];
    cc_tok intent;
    CC_STEP(rv_by_hand(op, tid, acc, dlane, &intent));
    CC_STEP(rv_restored(op, root, tid, acc, dlane, &intent));
    CC_STEP(rv_denied_complete(op, root, &o));
    cc_fx.keep = true;
}

