/* SDK and CLI unit tests for remote transfers (docs/ARCHITECTURE.md "Engine"; the CLI's
 * names as in README "Using the CLI"): the four batch builders,
 * their validation, encoding and routing; the receipt JSON of the four results; the JSON of
 * the three reads; the token description; the CLI's token files and argument parsing.
 * No network. Runs under ASan+UBSan with leak detection: every test frees what it builds. */
#include "client/cli/cli.h"
#include "client/keyload.h"
#include "tests/unit/harness.h"
#include "tests/unit/sdk_xfer_fixture.h"
#include "client/sdk/internal.h"

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


static const uint8_t INTENT[5] = {0x0a, 0x81, 0x02, 0x00, 0xff};
static const uint8_t RECEIPT[3] = {0x0a, 0x01, 0x7f};

static kl_message *new_message(const char *body)
{
    kl_message *m;
    ck_assert_int_eq(kl_message_new(body, strlen(body), &m, NULL), KL_OK);
    ck_assert_int_eq(kl_message_add_header(m, "trace", "t1", NULL), KL_OK);
    return m;
}

/* ------------------------------------------------------------ builders */

START_TEST(test_transfer_id_parse)
{
    uint8_t id[16];
    kl_err err;
    ck_assert_int_eq(kl_transfer_id_parse(XFER_ID, id, NULL), KL_OK);
    ck_assert_int_eq(id[0], 0x7c);
    ck_assert_int_eq(id[15], 0xe7);
    static const char *const bad[] = {"", "nope", ZERO_ID, "7c9e6679742540de944be07fc1f90ae7",
                                      "7c9e6679-7425-40de-944b-e07fc1f90ae"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(kl_transfer_id_parse(bad[i], id, &err), KL_INVALID_ARGUMENT);
        ck_assert_str_eq(err.detail, "transfer_id");
        ck_assert_ptr_nonnull(strstr(err.message, "transfer_id"));
    }
    ck_assert_int_eq(kl_transfer_id_parse(NULL, id, &err), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.message, "empty"));
    ck_assert_int_eq(kl_transfer_id_parse(ZERO_ID, id, &err), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.message, "all zero"));
    ck_assert_str_eq(kl_transfer_state_name(1), "OutputPending");
    ck_assert_str_eq(kl_transfer_state_name(2), "Delivered");
    ck_assert_str_eq(kl_transfer_state_name(0), "unknown");
    ck_assert_str_eq(kl_transfer_state_name(9), "unknown");
}
END_TEST

/* Each refusal names its field, never echoes a token, and leaves the batch unchanged. */
START_TEST(test_transfer_builders_validate)
{
    kl_batch *b = xf_new_batch();
    kl_message *m = new_message("hello");
    kl_err err;
#define REFUSED(call, field)                                                                   \
    do {                                                                                       \
        ck_assert_int_eq((call), KL_INVALID_ARGUMENT);                                         \
        ck_assert_str_eq(err.detail, field);                                                   \
        ck_assert_uint_eq(kl_batch_count(b), 0);                                               \
    } while (0)
    REFUSED(kl_batch_create_transfer(b, "", NULL, XFER_ID, "d", NULL, m, &err), "source_queue");
    REFUSED(kl_batch_create_transfer(b, "s", "bad lane", XFER_ID, "d", NULL, m, &err),
            "source_lane");
    REFUSED(kl_batch_create_transfer(b, "s", NULL, ZERO_ID, "d", NULL, m, &err), "transfer_id");
    REFUSED(kl_batch_create_transfer(b, "s", NULL, "", "d", NULL, m, &err), "transfer_id");
    REFUSED(kl_batch_create_transfer(b, "s", NULL, XFER_ID, "d/x", NULL, m, &err),
            "destination_queue");
    REFUSED(kl_batch_create_transfer(b, "s", NULL, XFER_ID, "d", "l/2", m, &err),
            "destination_lane");
    REFUSED(kl_batch_create_transfer(b, "s", NULL, XFER_ID, "d", NULL, NULL, &err), "message");
    REFUSED(kl_batch_accept_transfer(b, "d", NULL, NULL, 0, &err), "intent_token");
    REFUSED(kl_batch_accept_transfer(b, "d", NULL, INTENT, 0, &err), "intent_token");
    REFUSED(kl_batch_accept_transfer(b, NULL, NULL, INTENT, sizeof INTENT, &err),
            "destination_queue");
    REFUSED(kl_batch_complete_transfer(b, "s", NULL, XFER_ID, RECEIPT, 0, &err), "receipt_token");
    REFUSED(kl_batch_complete_transfer(b, "s", NULL, "x", RECEIPT, sizeof RECEIPT, &err),
            "transfer_id");
    REFUSED(kl_batch_pause_transfers(b, NULL, "fast", true, &err), "source_lane");
    REFUSED(kl_batch_pause_transfers(b, "bad queue", NULL, true, &err), "source_queue");
#undef REFUSED
    kl_message_free(m);
    kl_batch_free(b);
}
END_TEST

static Keyload__V1__BatchRequest *encode(const kl_batch *b)
{
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(kl_batch_encode(b, "acme/shop", &buf, &len, NULL), KL_OK);
    Keyload__V1__BatchRequest *req = keyload__v1__batch_request__unpack(NULL, len, buf);
    free(buf);
    ck_assert_ptr_nonnull(req);
    return req;
}

START_TEST(test_transfer_encode)
{
    kl_batch *b = xf_new_batch();
    kl_message *m = new_message("payload");
    ck_assert_int_eq(kl_batch_create_transfer(b, "orders", "eu", XFER_ID, "archive", NULL, m,
                                              NULL), KL_OK);
    kl_message_free(m); /* the batch holds its own copy */
    ck_assert_int_eq(kl_batch_accept_transfer(b, "archive", "", INTENT, sizeof INTENT, NULL),
                     KL_OK);
    ck_assert_int_eq(kl_batch_complete_transfer(b, "orders", "eu", XFER_ID, RECEIPT,
                                                sizeof RECEIPT, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_pause_transfers(b, "orders", NULL, true, NULL), KL_OK);
    ck_assert_uint_eq(kl_batch_count(b), 4);

    Keyload__V1__BatchRequest *req = encode(b);
    ck_assert_uint_eq(req->n_mutations, 4);
    Keyload__V1__Mutation **mu = req->mutations;
    uint8_t id[16];
    ck_assert_int_eq(kl_transfer_id_parse(XFER_ID, id, NULL), KL_OK);

    ck_assert_int_eq(mu[0]->kind_case, KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE_TRANSFER);
    const Keyload__V1__CreateQueueTransfer *ct = mu[0]->create_queue_transfer;
    xf_assert_ref(ct->source_queue, "orders", "eu");
    xf_assert_ref(ct->destination, "archive", "");
    ck_assert_uint_eq(ct->transfer_id.len, 16);
    ck_assert_int_eq(memcmp(ct->transfer_id.data, id, 16), 0);
    ck_assert_ptr_nonnull(ct->message);
    ck_assert_uint_eq(ct->message->body.len, 7);
    ck_assert_int_eq(memcmp(ct->message->body.data, "payload", 7), 0);
    ck_assert_uint_eq(ct->message->n_headers, 1);

    ck_assert_int_eq(mu[1]->kind_case, KEYLOAD__V1__MUTATION__KIND_ACCEPT_QUEUE_TRANSFER);
    xf_assert_ref(mu[1]->accept_queue_transfer->destination_queue, "archive", "");
    ck_assert_uint_eq(mu[1]->accept_queue_transfer->intent_token.len, sizeof INTENT);
    ck_assert_int_eq(memcmp(mu[1]->accept_queue_transfer->intent_token.data, INTENT,
                            sizeof INTENT), 0);

    ck_assert_int_eq(mu[2]->kind_case, KEYLOAD__V1__MUTATION__KIND_COMPLETE_QUEUE_TRANSFER);
    xf_assert_ref(mu[2]->complete_queue_transfer->source_queue, "orders", "eu");
    ck_assert_int_eq(memcmp(mu[2]->complete_queue_transfer->transfer_id.data, id, 16), 0);
    ck_assert_uint_eq(mu[2]->complete_queue_transfer->receipt_token.len, sizeof RECEIPT);
    ck_assert_int_eq(memcmp(mu[2]->complete_queue_transfer->receipt_token.data, RECEIPT,
                            sizeof RECEIPT), 0);

    ck_assert_int_eq(mu[3]->kind_case, KEYLOAD__V1__MUTATION__KIND_SET_QUEUE_TRANSFERS_PAUSED);
    const Keyload__V1__SetQueueTransfersPaused *tp = mu[3]->set_queue_transfers_paused;
    ck_assert_str_eq(tp->tenant, "acme");
    ck_assert_str_eq(tp->database, "shop");
    xf_assert_ref(tp->source_queue, "orders", "");
    ck_assert(tp->paused);
    keyload__v1__batch_request__free_unpacked(req, NULL);

    /* The same batch encodes to the same bytes every time (replays). */
    uint8_t *b1, *b2;
    size_t l1, l2;
    ck_assert_int_eq(kl_batch_encode(b, "acme/shop", &b1, &l1, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_encode(b, "acme/shop", &b2, &l2, NULL), KL_OK);
    ck_assert_uint_eq(l1, l2);
    ck_assert_int_eq(memcmp(b1, b2, l1), 0);
    free(b1);
    free(b2);
    kl_batch_free(b);

    /* A database-wide resume: no source queue, tenant and database stamped. */
    b = xf_new_batch();
    ck_assert_int_eq(kl_batch_pause_transfers(b, NULL, NULL, false, NULL), KL_OK);
    req = encode(b);
    tp = req->mutations[0]->set_queue_transfers_paused;
    ck_assert_ptr_null(tp->source_queue);
    ck_assert_str_eq(tp->tenant, "acme");
    ck_assert_str_eq(tp->database, "shop");
    ck_assert(!tp->paused);
    keyload__v1__batch_request__free_unpacked(req, NULL);
    kl_batch_free(b);
}
END_TEST

/* Create and Complete go to the source queue, Accept to the destination, a lane's pause to
 * its queue, a database-wide pause to the catalog (alone in its batch). */
START_TEST(test_transfer_routing)
{
    kl_batch *b = xf_new_batch();
    kl_message *m = new_message("x");
    kl_batch_route route;
    kl_err err;
    ck_assert_int_eq(kl_batch_create_transfer(b, "src", NULL, XFER_ID, "dst", "l", m, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_accept_transfer(b, "dst", "l", INTENT, sizeof INTENT, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_complete_transfer(b, "src2", NULL, XFER_ID, RECEIPT,
                                                sizeof RECEIPT, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_pause_transfers(b, "src3", "fast", true, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_pause_transfers(b, NULL, NULL, true, NULL), KL_OK);
    Keyload__V1__Mutation **mu = b->muts;
    ck_assert_str_eq(kl_sdk_mutation_queue(mu[0]), "src");
    ck_assert_str_eq(kl_sdk_mutation_queue(mu[1]), "dst");
    ck_assert_str_eq(kl_sdk_mutation_queue(mu[2]), "src2");
    ck_assert_str_eq(kl_sdk_mutation_queue(mu[3]), "src3");
    ck_assert_ptr_null(kl_sdk_mutation_queue(mu[4]));
    for (int i = 0; i < 4; i++)
        ck_assert(!kl_sdk_mutation_is_catalog(mu[i]));
    ck_assert(kl_sdk_mutation_is_catalog(mu[4]));
    /* The database-wide pause shares the batch: refused. */
    ck_assert_int_eq(kl_batch_kind(b, &route, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "mutations");
    kl_batch_free(b);

    b = xf_new_batch();
    ck_assert_int_eq(kl_batch_create_transfer(b, "src", NULL, XFER_ID, "dst", NULL, m, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_enqueue(b, "src", NULL, m, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_pause_transfers(b, "src", NULL, false, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_kind(b, &route, NULL), KL_OK);
    ck_assert_int_eq(route, KL_ROUTE_QUEUE);
    kl_batch_free(b);

    b = xf_new_batch();
    ck_assert_int_eq(kl_batch_pause_transfers(b, NULL, "", true, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_kind(b, &route, NULL), KL_OK);
    ck_assert_int_eq(route, KL_ROUTE_CATALOG);
    kl_batch_free(b);
    kl_message_free(m);
}
END_TEST

/* The reads check their arguments before anything is dialed. */
START_TEST(test_transfer_reads_refuse_before_network)
{
    kl_client *c;
    kl_err err;
    ck_assert_int_eq(kl_client_open("deploy/local-1.json", "acme/shop", 1000, &c, NULL), KL_OK);
    Keyload__V1__InspectQueueTransferAnswer *ia = (void *)1;
    ck_assert_int_eq(kl_client_inspect_transfer(c, "q", NULL, ZERO_ID, &ia, &err),
                     KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "transfer_id");
    ck_assert_ptr_null(ia);
    Keyload__V1__InspectQueueTransferReceiptAnswer *ra = (void *)1;
    ck_assert_int_eq(kl_client_transfer_receipt(c, "", "q", NULL, XFER_ID, &ra, &err),
                     KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "destination_queue");
    ck_assert_ptr_null(ra);
    Keyload__V1__ListPendingQueueTransfersAnswer *pa = (void *)1;
    ck_assert_int_eq(kl_client_pending_transfers(c, NULL, NULL, -1, NULL, 0, 0, &pa, &err),
                     KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "partition");
    ck_assert_ptr_null(pa);
    ck_assert_int_eq(kl_client_pending_transfers(c, "q", NULL, -1, NULL, 0, 1001, &pa, &err),
                     KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "max_items");
    ck_assert_int_eq(kl_client_pending_transfers(c, NULL, "l", 0, NULL, 0, 0, &pa, &err),
                     KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "source_lane");
    ck_assert_int_eq(kl_client_pending_transfers(c, NULL, NULL, 7, NULL, 0, 0, &pa, &err),
                     KL_INVALID_ARGUMENT); /* not in the cluster file */
    ck_assert_str_eq(err.detail, "partition");
    kl_transfer_answer_free(NULL);
    kl_transfer_receipt_answer_free(NULL);
    kl_pending_transfers_free(NULL);
    kl_client_close(c);
}
END_TEST

/* ------------------------------------------------------------ JSON */

START_TEST(test_transfer_receipt_json)
{
    static uint8_t cmd[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    static uint8_t tok[3] = {0xde, 0xad, 0x01};
    Keyload__V1__BatchReceipt r = KEYLOAD__V1__BATCH_RECEIPT__INIT;
    r.command_id = (ProtobufCBinaryData){16, cmd};
    r.partition = 2;
    r.term = 3;
    r.index = 9;
    r.committed_unix_ms = 1700000000000;
    Keyload__V1__TransferCreated tc = KEYLOAD__V1__TRANSFER_CREATED__INIT;
    tc.intent_token = (ProtobufCBinaryData){3, tok};
    tc.state = 1;
    tc.generation = 1;
    tc.existing = true;
    Keyload__V1__TransferAccepted ta = KEYLOAD__V1__TRANSFER_ACCEPTED__INIT;
    ta.message_id = 42;
    ta.lane = "fast";
    ta.partition = 1;
    ta.term = 5;
    ta.index = 77;
    ta.deduplicated = true;
    Keyload__V1__TransferCompleted co = KEYLOAD__V1__TRANSFER_COMPLETED__INIT;
    co.state = 2;
    Keyload__V1__TransfersPaused tp = KEYLOAD__V1__TRANSFERS_PAUSED__INIT;
    tp.paused = true;
    tp.changed = true;
    tp.catalog_version = 12;
    Keyload__V1__MutationResult res[4], *resp[4];
    for (int i = 0; i < 4; i++) {
        keyload__v1__mutation_result__init(&res[i]);
        resp[i] = &res[i];
    }
    res[0].kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_CREATED;
    res[0].transfer_created = &tc;
    res[1].kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ACCEPTED;
    res[1].transfer_accepted = &ta;
    res[2].kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_COMPLETED;
    res[2].transfer_completed = &co;
    res[3].kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFERS_PAUSED;
    res[3].transfers_paused = &tp;
    r.n_results = 4;
    r.results = resp;
    char *s = kl_receipt_to_json(&r, 0);
    ck_assert_ptr_nonnull(s);
    ck_assert_str_eq(
        s, "{\"command_id\":\"01020304-0506-0708-090a-0b0c0d0e0f10\",\"partition\":2,"
           "\"term\":3,\"index\":9,\"committed_unix_ms\":1700000000000,\"request_digest\":\"\","
           "\"results\":["
           "{\"kind\":\"transfer_created\",\"intent_token\":\"3q0B\",\"state\":\"OutputPending\","
           "\"generation\":1,\"existing\":true},"
           "{\"kind\":\"transfer_accepted\",\"message_id\":42,\"lane\":\"fast\",\"partition\":1,"
           "\"term\":5,\"index\":77,\"deduplicated\":true},"
           "{\"kind\":\"transfer_completed\",\"state\":\"Delivered\",\"already\":false},"
           "{\"kind\":\"transfers_paused\",\"paused\":true,\"changed\":true,"
           "\"catalog_version\":12}]}");
    free(s);
}
END_TEST

START_TEST(test_transfer_inspect_json)
{
    static uint8_t itok[2] = {0xfb, 0xff}, rtok[1] = {0x01}, fp[2] = {0xab, 0xcd};
    Keyload__V1__QueueLaneRef src = xf_lane("orders", "eu"), dst = xf_lane("archive", "default");
    Keyload__V1__TransferHistoryEntry h[2], *hp[2] = {&h[0], &h[1]};
    keyload__v1__transfer_history_entry__init(&h[0]);
    h[0].event = KEYLOAD__V1__TRANSFER_EVENT__INTENT_CREATED;
    h[0].generation = 1;
    h[0].unix_ms = 1000;
    h[0].term = 2;
    h[0].index = 10;
    keyload__v1__transfer_history_entry__init(&h[1]);
    h[1].event = KEYLOAD__V1__TRANSFER_EVENT__RECEIPT_VERIFIED;
    h[1].generation = 1;
    h[1].unix_ms = 2000;
    h[1].term = 2;
    h[1].index = 14;
    Keyload__V1__InspectQueueTransferAnswer a = KEYLOAD__V1__INSPECT_QUEUE_TRANSFER_ANSWER__INIT;
    a.state = KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING;
    a.generation = 1;
    a.n_history = 1;
    a.history = hp;
    a.intent_token = (ProtobufCBinaryData){2, itok};
    a.source = &src;
    a.destination = &dst;
    a.fingerprint = (ProtobufCBinaryData){2, fp};
    a.principal_id = "admin";
    a.applied_index = 33;

    char *s = kl_transfer_to_json(&a, 0);
    ck_assert_str_eq(s, "{\"state\":\"OutputPending\",\"generation\":1,\"source\":" SRC_JSON
                        ",\"destination\":" DST_JSON ",\"principal_id\":\"admin\","
                        "\"fingerprint\":\"q80=\",\"max_accept_attempts\":null,"
                        "\"attempt_advances\":0,\"retained_records\":0,\"retained_bytes\":0,"
                        "\"reserved_records\":0,\"reserved_bytes\":0,"
                        "\"history\":[{\"event\":\"IntentCreated\",\"generation\":1,"
                        "\"unix_ms\":1000,\"term\":2,\"index\":10}],"
                        "\"intent_token\":\"+/8=\",\"current_token\":null,"
                        "\"receipt_token\":null,\"applied_index\":33}");
    free(s);

    /* Delivered: both tokens and the verification event; a ceiling on attempts. */
    Keyload__V1__NullableU64 max = KEYLOAD__V1__NULLABLE_U64__INIT;
    max.value = 5;
    a.max_accept_attempts = &max;
    a.state = KEYLOAD__V1__TRANSFER_STATE__DELIVERED;
    a.n_history = 2;
    a.receipt_token = (ProtobufCBinaryData){1, rtok};
    s = kl_transfer_to_json(&a, 0);
    ck_assert_ptr_nonnull(strstr(s, "\"state\":\"Delivered\""));
    ck_assert_ptr_nonnull(strstr(s, "\"max_accept_attempts\":5"));
    ck_assert_ptr_nonnull(strstr(s, "{\"event\":\"ReceiptVerified\",\"generation\":1,"
                                    "\"unix_ms\":2000,\"term\":2,\"index\":14}"));
    ck_assert_ptr_nonnull(strstr(s, "\"receipt_token\":\"AQ==\""));
    free(s);

    s = kl_transfer_to_json(&a, KL_JSON_OMIT_TOKENS);
    ck_assert_ptr_null(strstr(s, "token"));
    free(s);
}
END_TEST

START_TEST(test_transfer_receipt_answer_json)
{
    static uint8_t rtok[3] = {'a', 'b', 'c'};
    Keyload__V1__QueueLaneRef dst = xf_lane("archive", "default");
    Keyload__V1__TargetEffect e = KEYLOAD__V1__TARGET_EFFECT__INIT;
    e.message_id = 8;
    e.partition = 1;
    e.term = 4;
    e.index = 99;
    Keyload__V1__InspectQueueTransferReceiptAnswer a =
        KEYLOAD__V1__INSPECT_QUEUE_TRANSFER_RECEIPT_ANSWER__INIT;
    a.receipt_token = (ProtobufCBinaryData){3, rtok};
    a.target_commit = &e;
    a.destination = &dst;
    a.applied_index = 100;
    char *s = kl_transfer_receipt_to_json(&a, 0);
    ck_assert_str_eq(s, "{\"destination\":" DST_JSON ",\"target_commit\":{\"message_id\":8,"
                        "\"partition\":1,\"term\":4,\"index\":99},\"receipt_token\":\"YWJj\","
                        "\"applied_index\":100}");
    free(s);
    /* A missing effect still prints every key. */
    a.target_commit = NULL;
    a.destination = NULL;
    s = kl_transfer_receipt_to_json(&a, KL_JSON_OMIT_TOKENS);
    ck_assert_str_eq(s, "{\"destination\":{\"tenant\":\"\",\"database\":\"\",\"queue\":\"\","
                        "\"lane\":\"\"},\"target_commit\":{\"message_id\":0,\"partition\":0,"
                        "\"term\":0,\"index\":0},\"applied_index\":100}");
    free(s);
}
END_TEST

START_TEST(test_transfer_pending_json)
{
    static uint8_t itok[1] = {0x7f}, cur[2] = {1, 2}, inc[1] = {9};
    Keyload__V1__QueueLaneRef src = xf_lane("orders", "eu"), dst = xf_lane("archive", "default");
    uint8_t id[16];
    ck_assert_int_eq(kl_transfer_id_parse(XFER_ID, id, NULL), KL_OK);
    Keyload__V1__PendingQueueTransfer p = KEYLOAD__V1__PENDING_QUEUE_TRANSFER__INIT, *pp = &p;
    p.source = &src;
    p.transfer_id = (ProtobufCBinaryData){16, id};
    p.generation = 3;
    p.destination = &dst;
    p.intent_token = (ProtobufCBinaryData){1, itok};
    Keyload__V1__ListPendingQueueTransfersAnswer a =
        KEYLOAD__V1__LIST_PENDING_QUEUE_TRANSFERS_ANSWER__INIT;
    a.n_items = 1;
    a.items = &pp;
    a.next_cursor = (ProtobufCBinaryData){2, cur};
    a.partition_incarnation = (ProtobufCBinaryData){1, inc};
    a.records_charged = 4;
    a.bytes_charged = 512;
    a.applied_index = 20;
    char *s = kl_pending_transfers_to_json(&a, 0);
    ck_assert_str_eq(s, "{\"items\":[{\"source\":" SRC_JSON ",\"transfer_id\":\"" XFER_ID "\","
                        "\"generation\":3,\"destination\":" DST_JSON ",\"intent_token\":\"fw==\"}],"
                        "\"next_cursor\":\"AQI=\",\"done\":false,\"partition_incarnation\":\"CQ==\","
                        "\"cursor_reset\":false,\"records_charged\":4,\"bytes_charged\":512,"
                        "\"applied_index\":20}");
    free(s);
    s = kl_pending_transfers_to_json(&a, KL_JSON_OMIT_TOKENS);
    ck_assert_ptr_null(strstr(s, "intent_token"));
    ck_assert_ptr_nonnull(strstr(s, "\"next_cursor\":\"AQI=\""));
    free(s);
    /* An empty last page. */
    Keyload__V1__ListPendingQueueTransfersAnswer e =
        KEYLOAD__V1__LIST_PENDING_QUEUE_TRANSFERS_ANSWER__INIT;
    e.done = true;
    s = kl_pending_transfers_to_json(&e, 0);
    ck_assert_str_eq(s, "{\"items\":[],\"next_cursor\":\"\",\"done\":true,"
                        "\"partition_incarnation\":\"\",\"cursor_reset\":false,"
                        "\"records_charged\":0,\"bytes_charged\":0,\"applied_index\":0}");
    free(s);
}
END_TEST

/* Encodes a SignedToken over intent claims whose message body is secret. */
static uint8_t *sample_token(size_t *len)
{
    static uint8_t incarnation[16] = {1}, fp[4] = {0x00, 0x11, 0xfe, 0xff}, kid[8] = {7};
    static uint8_t sig[64];
    Keyload__V1__QueueLaneRef src = xf_lane("orders", "eu"), dst = xf_lane("archive", "default");
    uint8_t id[16];
    ck_assert_int_eq(kl_transfer_id_parse(XFER_ID, id, NULL), KL_OK);
    Keyload__V1__EnqueueMessage m = KEYLOAD__V1__ENQUEUE_MESSAGE__INIT;
    m.body = (ProtobufCBinaryData){11, (uint8_t *)"TOPSECRET42"};
    Keyload__V1__TransferClaims c = KEYLOAD__V1__TRANSFER_CLAIMS__INIT;
    c.version = 1;
    c.purpose = KEYLOAD__V1__CLAIM_PURPOSE__TRANSFER_INTENT;
    c.database_incarnation = (ProtobufCBinaryData){16, incarnation};
    c.source = &src;
    c.target = &dst;
    c.transfer_id = (ProtobufCBinaryData){16, id};
    c.generation = 1;
    c.principal_id = "admin";
    c.message = &m;
    c.fingerprint = (ProtobufCBinaryData){4, fp};
    c.issued_unix_ms = 1234;
    size_t clen = keyload__v1__transfer_claims__get_packed_size(&c);
    uint8_t *claims = malloc(clen);
    keyload__v1__transfer_claims__pack(&c, claims);
    Keyload__V1__SignedToken t = KEYLOAD__V1__SIGNED_TOKEN__INIT;
    t.claims = (ProtobufCBinaryData){clen, claims};
    t.key_id = (ProtobufCBinaryData){8, kid};
    t.signature = (ProtobufCBinaryData){64, sig};
    *len = keyload__v1__signed_token__get_packed_size(&t);
    uint8_t *out = malloc(*len);
    keyload__v1__signed_token__pack(&t, out);
    free(claims);
    return out;
}

START_TEST(test_transfer_token_describe)
{
    size_t len;
    uint8_t *tok = sample_token(&len);
    char *s = NULL;
    ck_assert_int_eq(kl_transfer_token_describe(tok, len, 0, &s, NULL), KL_OK);
    ck_assert_str_eq(s, "{\"purpose\":\"TransferIntent\",\"version\":1,"
                        "\"database_incarnation\":\"AQAAAAAAAAAAAAAAAAAAAA==\",\"source\":" SRC_JSON
                        ",\"target\":" DST_JSON ",\"transfer_id\":\"" XFER_ID "\","
                        "\"generation\":1,\"principal_id\":\"admin\",\"fingerprint_hex\":"
                        "\"0011feff\",\"body_bytes\":11,\"issued_unix_ms\":1234,"
                        "\"key_id\":\"BwAAAAAAAAA=\"}");
    /* The message body never shows, in clear or in base64. */
    ck_assert_ptr_null(strstr(s, "TOPSECRET"));
    char *b = kl_base64_encode((const uint8_t *)"TOPSECRET42", 11);
    ck_assert_ptr_null(strstr(s, b));
    free(b);
    free(s);
    kl_err err;
    s = (char *)1;
    ck_assert_int_eq(kl_transfer_token_describe((const uint8_t *)"\xff\xff\xff", 3, 0, &s, &err),
                     KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "token");
    ck_assert_ptr_null(s);
    ck_assert_int_eq(kl_transfer_token_describe(NULL, 0, 0, &s, &err), KL_INVALID_ARGUMENT);
    free(tok);
}
END_TEST

/* ------------------------------------------------------------ CLI token files */

START_TEST(test_cli_token_parse)
{
    uint8_t *out;
    size_t n;
    kl_err err;
    /* Raw bytes (a real token starts with 0x0a and a multi-byte length): kept exactly,
     * surrounding whitespace bytes included. */
    static const uint8_t raw[] = {0x0a, 0x81, 0x02, 'A', '\n'};
    ck_assert_int_eq(cli_token_parse("--intent", raw, sizeof raw, &out, &n, NULL), KL_OK);
    ck_assert_uint_eq(n, sizeof raw);
    ck_assert_int_eq(memcmp(out, raw, n), 0);
    free(out);
    /* Base64 text with a trailing newline and spaces: decoded. */
    static const char b64[] = "  3q2+7w==\r\n";
    ck_assert_int_eq(cli_token_parse("--intent", (const uint8_t *)b64, strlen(b64), &out, &n,
                                     NULL), KL_OK);
    ck_assert_uint_eq(n, 4);
    ck_assert_int_eq(memcmp(out, "\xde\xad\xbe\xef", 4), 0);
    free(out);
    /* Alphabet only but not canonical base64: refused, without echoing the content. */
    static const char bad[] = "SECRETX";
    ck_assert_int_eq(cli_token_parse("--receipt", (const uint8_t *)bad, strlen(bad), &out, &n,
                                     &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "token");
    ck_assert_ptr_nonnull(strstr(err.message, "--receipt"));
    ck_assert_ptr_null(strstr(err.message, "SECRET"));
    ck_assert_ptr_null(out);
    /* Empty and blank content. */
    ck_assert_int_eq(cli_token_parse("--intent", (const uint8_t *)"", 0, &out, &n, &err),
                     KL_INVALID_ARGUMENT);
    ck_assert_int_eq(cli_token_parse("--intent", (const uint8_t *)" \n\t", 3, &out, &n, &err),
                     KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.message, "empty"));
    ck_assert_int_eq(cli_token_parse("--intent", (const uint8_t *)"====", 4, &out, &n, &err),
                     KL_INVALID_ARGUMENT);
}
END_TEST

START_TEST(test_cli_token_files)
{
    char dir[160];
    th_tmpdir_named(dir, sizeof dir, "kl-token");
    char path[256], spec[264];
    snprintf(path, sizeof path, "%s/tok", dir);
    snprintf(spec, sizeof spec, "@%s", path);
    kl_err err;
    static const uint8_t tok[] = {0x0a, 0x90, 0x01, 0x00, 0x20};
    ck_assert_int_eq(cli_token_out_check("--token-out", path, NULL), KL_OK);
    ck_assert_int_eq(cli_token_write("--token-out", path, tok, sizeof tok, NULL), KL_OK);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    /* Never overwritten: refused up front and at the write. */
    ck_assert_int_eq(cli_token_out_check("--token-out", path, &err), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(err.detail, "token_out");
    ck_assert_int_ne(cli_token_write("--token-out", path, tok, 1, &err), KL_OK);
    /* Read back raw, byte for byte. */
    uint8_t *out;
    size_t n;
    ck_assert_int_eq(cli_token_read("--intent", spec, &out, &n, NULL), KL_OK);
    ck_assert_uint_eq(n, sizeof tok);
    ck_assert_int_eq(memcmp(out, tok, n), 0);
    free(out);
    /* A token on the command line is a usage error that does not echo it. */
    ck_assert_int_eq(cli_token_read("--intent", "CgGQAQAg", &out, &n, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "usage");
    ck_assert_ptr_null(strstr(err.message, "CgGQAQAg"));
    ck_assert_int_eq(cli_token_read("--intent", "@", &out, &n, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "usage");
    snprintf(spec, sizeof spec, "@%s/missing", dir);
    ck_assert_int_eq(cli_token_read("--intent", spec, &out, &n, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "token");
    unlink(path);
    rmdir(dir);
}
END_TEST

/* ------------------------------------------------------------ CLI arguments */

START_TEST(test_cli_transfer_parse_ok)
{
    cli c = xf_test_cli();
    cli_transfer_args o;
    ck_assert_int_eq(xf_tparse(&c, &o, "create", "--source", "orders/eu", "--id", XFER_ID,
                            "--dest=archive", "--header", "a=1", "--field", "n:int=2",
                            "--field", "s=x", "--token-out", "/tmp/t", "--command-id", CMD_ID,
                            "the body", NULL), CLI_EXIT_OK);
    ck_assert_int_eq(o.sub, CLI_TRANSFER_CREATE);
    ck_assert_str_eq(o.source_queue, "orders");
    ck_assert_str_eq(o.source_lane, "eu");
    ck_assert_str_eq(o.dest_queue, "archive");
    ck_assert_str_eq(o.dest_lane, "");
    ck_assert_str_eq(o.id, XFER_ID);
    ck_assert_str_eq(o.body, "the body");
    ck_assert_uint_eq(o.n_headers, 1);
    ck_assert_uint_eq(o.n_fields, 2);
    ck_assert_str_eq(o.fields[1], "s=x");
    ck_assert_str_eq(o.token_out, "/tmp/t");
    ck_assert_str_eq(o.command_id, CMD_ID);
    cli_transfer_args_clear(&o);

    ck_assert_int_eq(xf_tparse(&c, &o, "accept", "--dest", "archive/slow", "--intent", "-", "--json",
                            NULL), CLI_EXIT_OK);
    ck_assert_int_eq(o.sub, CLI_TRANSFER_ACCEPT);
    ck_assert_str_eq(o.dest_lane, "slow");
    ck_assert_str_eq(o.token, "-");
    ck_assert(c.json);
    cli_transfer_args_clear(&o);

    ck_assert_int_eq(xf_tparse(&c, &o, "complete", "--source", "orders", "--id", XFER_ID,
                            "--receipt", "@/tmp/r", NULL), CLI_EXIT_OK);
    ck_assert_int_eq(o.sub, CLI_TRANSFER_COMPLETE);
    ck_assert_str_eq(o.token, "@/tmp/r");
    cli_transfer_args_clear(&o);

    ck_assert_int_eq(xf_tparse(&c, &o, "inspect", "--source", "orders", "--id", XFER_ID, NULL),
                     CLI_EXIT_OK);
    ck_assert_int_eq(o.sub, CLI_TRANSFER_INSPECT);
    cli_transfer_args_clear(&o);

    ck_assert_int_eq(xf_tparse(&c, &o, "receipt", "--dest", "archive", "--source", "orders/eu",
                            "--id", XFER_ID, NULL), CLI_EXIT_OK);
    ck_assert_int_eq(o.sub, CLI_TRANSFER_RECEIPT);
    cli_transfer_args_clear(&o);

    ck_assert_int_eq(xf_tparse(&c, &o, "pending", "--source", "orders", NULL), CLI_EXIT_OK);
    ck_assert_int_eq(o.partition, -1);
    ck_assert_uint_eq(o.max_items, 0);
    ck_assert_ptr_null(o.cursor);
    cli_transfer_args_clear(&o);
    ck_assert_int_eq(xf_tparse(&c, &o, "pending", "--partition", "2", "--cursor", "AQI=", "--max",
                            "50", NULL), CLI_EXIT_OK);
    ck_assert_ptr_null(o.source_queue);
    ck_assert_int_eq(o.partition, 2);
    ck_assert_str_eq(o.cursor, "AQI=");
    ck_assert_uint_eq(o.max_items, 50);
    cli_transfer_args_clear(&o);

    ck_assert_int_eq(xf_tparse(&c, &o, "pause", NULL), CLI_EXIT_OK);
    ck_assert_int_eq(o.sub, CLI_TRANSFER_PAUSE);
    ck_assert_ptr_null(o.source_queue);
    cli_transfer_args_clear(&o);
    ck_assert_int_eq(xf_tparse(&c, &o, "resume", "--source", "orders/eu", NULL), CLI_EXIT_OK);
    ck_assert_int_eq(o.sub, CLI_TRANSFER_RESUME);
    ck_assert_str_eq(o.source_lane, "eu");
    cli_transfer_args_clear(&o);
}
END_TEST

START_TEST(test_cli_transfer_parse_usage_errors)
{
    cli c = xf_test_cli();
    cli_transfer_args o;
    ck_assert_int_eq(xf_tparse(&c, &o, NULL), CLI_EXIT_USAGE);
    USAGE_ERR("unknown transfer subcommand", "move");
    USAGE_ERR("needs --id", "create", "--source", "a", "--dest", "b", "body");
    USAGE_ERR("needs --dest", "create", "--source", "a", "--id", XFER_ID, "body");
    USAGE_ERR("needs a BODY", "create", "--source", "a", "--dest", "b", "--id", XFER_ID);
    USAGE_ERR("one BODY", "create", "--source", "a", "--dest", "b", "--id", XFER_ID, "x", "y");
    USAGE_ERR("all zero", "create", "--source", "a", "--dest", "b", "--id", ZERO_ID, "x");
    USAGE_ERR("GUID", "inspect", "--source", "a", "--id", "123");
    USAGE_ERR("@FILE or -", "accept", "--dest", "b", "--intent", "CgGQAQAg");
    USAGE_ERR("needs --intent", "accept", "--dest", "b");
    USAGE_ERR("needs --receipt", "complete", "--source", "a", "--id", XFER_ID);
    USAGE_ERR("takes no --intent", "complete", "--source", "a", "--id", XFER_ID, "--intent", "-");
    USAGE_ERR("only to commands that change", "inspect", "--source", "a", "--id", XFER_ID,
              "--command-id", CMD_ID);
    USAGE_ERR("takes no --token-out", "accept", "--dest", "b", "--intent", "-", "--token-out", "f");
    USAGE_ERR("takes no argument", "pause", "orders");
    USAGE_ERR("needs --source QUEUE[/LANE] or --partition", "pending");
    USAGE_ERR("--max", "pending", "--source", "a", "--max", "1001");
    USAGE_ERR("--partition", "pending", "--partition", "-1");
    USAGE_ERR("given twice", "inspect", "--source", "a", "--source", "b", "--id", XFER_ID);
    USAGE_ERR("given twice", "accept", "--dest", "b", "--intent", "-", "--intent", "@f");
    USAGE_ERR("empty lane", "inspect", "--source", "a/", "--id", XFER_ID);
    USAGE_ERR("unknown option --lane", "pause", "--lane", "x");
    /* --help prints and stops. */
    ck_assert_int_eq(xf_tparse(&c, &o, "create", "--help", NULL), CLI_EXIT_OK);
    ck_assert(o.help);
    cli_transfer_args_clear(&o);
}
END_TEST

Suite *suite_sdk_transfer(void)
{
    Suite *s = suite_create("sdk_transfer");
    TCase *t = tcase_create("builders");
    tcase_add_test(t, test_transfer_id_parse);
    tcase_add_test(t, test_transfer_builders_validate);
    tcase_add_test(t, test_transfer_encode);
    tcase_add_test(t, test_transfer_routing);
    tcase_add_test(t, test_transfer_reads_refuse_before_network);
    suite_add_tcase(s, t);
    t = tcase_create("json");
    tcase_add_test(t, test_transfer_receipt_json);
    tcase_add_test(t, test_transfer_inspect_json);
    tcase_add_test(t, test_transfer_receipt_answer_json);
    tcase_add_test(t, test_transfer_pending_json);
    tcase_add_test(t, test_transfer_token_describe);
    suite_add_tcase(s, t);
    t = tcase_create("cli");
    tcase_add_test(t, test_cli_token_parse);
    tcase_add_test(t, test_cli_token_files);
    tcase_add_test(t, test_cli_transfer_parse_ok);
    tcase_add_test(t, test_cli_transfer_parse_usage_errors);
    suite_add_tcase(s, t);
    return s;
}
