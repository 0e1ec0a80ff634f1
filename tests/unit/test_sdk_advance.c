/* SDK and CLI unit tests for the capacity retry and policy repair of remote transfers
 * (docs/ARCHITECTURE.md "Engine"; the CLI's names as in README "Using the CLI"): the two
 * advance builders (validation, encoding, routing to the source queue's partition), the
 * failure-witness read (argument checks, and one round trip
 * against two scripted members that shows it is located on the destination queue's
 * partition and carries a complete lane ref), the JSON of the new result and answers, the
 * witness token description, and the CLI's `transfer failure|advance|repair` arguments.
 * Runs under ASan+UBSan with leak detection: every test frees what it builds. */
#include "client/cli/cli.h"
#include "client/keyload.h"
#include "tests/unit/sdk_xfer_fixture.h"
#include "client/sdk/internal.h"
#include "common/rpc.h"
#include "tests/unit/harness.h"
#include "tests/unit/ports.h"

#include <check.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#define FAILED_ID "1b4e28ba-2fa1-41d2-883f-0016d3cca427"

static const uint8_t WITNESS[4] = {0x0a, 0x82, 0x01, 0x33};
static const uint8_t INTENT[3] = {0x0a, 0x01, 0x44};

typedef kl_code (*advance_fn)(kl_batch *, const char *, const char *, const char *,
                              const uint8_t *, size_t, kl_err *);
static const advance_fn advances[2] = {kl_batch_advance_transfer_attempt,
                                       kl_batch_advance_transfer_repair};

/* ------------------------------------------------------------ builders */

/* Each refusal names its field and leaves the batch unchanged; the witness never shows. */
START_TEST(test_advance_builders_validate)
{
    advance_fn fn = advances[_i];
    kl_batch *b = xf_new_batch();
    kl_err err;
#define REFUSED(call, field)                                                                   \
    do {                                                                                       \
        ck_assert_int_eq((call), KL_INVALID_ARGUMENT);                                         \
        ck_assert_str_eq(err.detail, field);                                                   \
        ck_assert_ptr_nonnull(strstr(err.message, field));                                     \
        ck_assert_uint_eq(kl_batch_count(b), 0);                                               \
    } while (0)
    REFUSED(fn(b, "", NULL, XFER_ID, WITNESS, sizeof WITNESS, &err), "source_queue");
    REFUSED(fn(b, NULL, NULL, XFER_ID, WITNESS, sizeof WITNESS, &err), "source_queue");
    REFUSED(fn(b, "bad queue", NULL, XFER_ID, WITNESS, sizeof WITNESS, &err), "source_queue");
    REFUSED(fn(b, "s", "l/2", XFER_ID, WITNESS, sizeof WITNESS, &err), "source_lane");
    REFUSED(fn(b, "s", NULL, "", WITNESS, sizeof WITNESS, &err), "transfer_id");
    REFUSED(fn(b, "s", NULL, NULL, WITNESS, sizeof WITNESS, &err), "transfer_id");
    REFUSED(fn(b, "s", NULL, "not-a-guid", WITNESS, sizeof WITNESS, &err), "transfer_id");
    REFUSED(fn(b, "s", NULL, ZERO_ID, WITNESS, sizeof WITNESS, &err), "transfer_id");
    ck_assert_ptr_nonnull(strstr(err.message, "all zero"));
    REFUSED(fn(b, "s", NULL, XFER_ID, NULL, 0, &err), "witness_token");
    REFUSED(fn(b, "s", NULL, XFER_ID, WITNESS, 0, &err), "witness_token");
    REFUSED(fn(b, "s", NULL, XFER_ID, NULL, 4, &err), "witness_token");
    ck_assert_ptr_nonnull(strstr(err.message, "empty"));
#undef REFUSED
    ck_assert_int_eq(fn(b, "s", NULL, XFER_ID, WITNESS, sizeof WITNESS, &err), KL_OK);
    ck_assert_uint_eq(kl_batch_count(b), 1);
    kl_batch_free(b);
}
END_TEST

START_TEST(test_advance_encode)
{
    kl_batch *b = xf_new_batch();
    uint8_t witness[sizeof WITNESS];
    memcpy(witness, WITNESS, sizeof witness);
    ck_assert_int_eq(kl_batch_advance_transfer_attempt(b, "orders", "eu", XFER_ID, witness,
                                                       sizeof witness, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_advance_transfer_repair(b, "orders", NULL, XFER_ID, witness,
                                                      sizeof witness, NULL), KL_OK);
    memset(witness, 0, sizeof witness); /* the batch holds its own copy */

    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(kl_batch_encode(b, "acme/shop", &buf, &len, NULL), KL_OK);
    Keyload__V1__BatchRequest *req = keyload__v1__batch_request__unpack(NULL, len, buf);
    ck_assert_ptr_nonnull(req);
    ck_assert_uint_eq(req->n_mutations, 2);
    uint8_t id[16];
    ck_assert_int_eq(kl_transfer_id_parse(XFER_ID, id, NULL), KL_OK);

    const Keyload__V1__Mutation *m0 = req->mutations[0], *m1 = req->mutations[1];
    ck_assert_int_eq(m0->kind_case, KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_ATTEMPT);
    const Keyload__V1__AdvanceQueueTransferAttempt *at = m0->advance_queue_transfer_attempt;
    xf_assert_ref(at->source_queue, "orders", "eu");
    ck_assert_uint_eq(at->transfer_id.len, 16);
    ck_assert_int_eq(memcmp(at->transfer_id.data, id, 16), 0);
    ck_assert_uint_eq(at->witness_token.len, sizeof WITNESS);
    ck_assert_int_eq(memcmp(at->witness_token.data, WITNESS, sizeof WITNESS), 0);

    ck_assert_int_eq(m1->kind_case, KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_REPAIR);
    const Keyload__V1__AdvanceQueueTransferRepair *rp = m1->advance_queue_transfer_repair;
    xf_assert_ref(rp->source_queue, "orders", "");
    ck_assert_int_eq(memcmp(rp->transfer_id.data, id, 16), 0);
    ck_assert_uint_eq(rp->witness_token.len, sizeof WITNESS);
    ck_assert_int_eq(memcmp(rp->witness_token.data, WITNESS, sizeof WITNESS), 0);
    keyload__v1__batch_request__free_unpacked(req, NULL);

    /* Stable bytes (a replay resends the same request) and the batch left as it was. */
    uint8_t *buf2;
    size_t len2;
    ck_assert_int_eq(kl_batch_encode(b, "acme/shop", &buf2, &len2, NULL), KL_OK);
    ck_assert_uint_eq(len, len2);
    ck_assert_int_eq(memcmp(buf, buf2, len), 0);
    ck_assert_str_eq(b->muts[0]->advance_queue_transfer_attempt->source_queue->tenant, "");
    free(buf);
    free(buf2);
    kl_batch_free(b);
}
END_TEST

/* Both advances change the source's intent: they go to the source queue's partition, like
 * Complete, and may share a batch with that partition's other queue data. */
START_TEST(test_advance_routing)
{
    kl_batch *b = xf_new_batch();
    kl_message *m;
    ck_assert_int_eq(kl_message_new("x", 1, &m, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_advance_transfer_attempt(b, "src", "l", XFER_ID, WITNESS,
                                                       sizeof WITNESS, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_advance_transfer_repair(b, "src", NULL, XFER_ID, WITNESS,
                                                      sizeof WITNESS, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_enqueue(b, "src", NULL, m, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_complete_transfer(b, "src", NULL, XFER_ID, WITNESS,
                                                sizeof WITNESS, NULL), KL_OK);
    for (size_t i = 0; i < 4; i++) {
        ck_assert_str_eq(kl_sdk_mutation_queue(b->muts[i]), "src");
        ck_assert(!kl_sdk_mutation_is_catalog(b->muts[i]));
    }
    kl_batch_route route = KL_ROUTE_CATALOG;
    ck_assert_int_eq(kl_batch_kind(b, &route, NULL), KL_OK);
    ck_assert_int_eq(route, KL_ROUTE_QUEUE);
    kl_batch_free(b);
    kl_message_free(m);
}
END_TEST

/* The read checks its arguments before anything is dialed. */
START_TEST(test_failure_read_refuses_before_network)
{
    kl_client *c;
    kl_err err;
    ck_assert_int_eq(kl_client_open("deploy/local-1.json", "acme/shop", 1000, &c, NULL), KL_OK);
    Keyload__V1__ReadQueueTransferFailureAnswer *a = (void *)1;
#define REFUSED(call, field)                                                                   \
    do {                                                                                       \
        a = (void *)1;                                                                         \
        ck_assert_int_eq((call), KL_INVALID_ARGUMENT);                                         \
        ck_assert_str_eq(err.detail, field);                                                   \
        ck_assert_ptr_null(a);                                                                 \
    } while (0)
    REFUSED(kl_client_read_transfer_failure(c, "", NULL, INTENT, sizeof INTENT, FAILED_ID, &a,
                                            &err), "destination_queue");
    REFUSED(kl_client_read_transfer_failure(c, "d", "a b", INTENT, sizeof INTENT, FAILED_ID, &a,
                                            &err), "destination_lane");
    REFUSED(kl_client_read_transfer_failure(c, "d", NULL, INTENT, 0, FAILED_ID, &a, &err),
            "intent_token");
    REFUSED(kl_client_read_transfer_failure(c, "d", NULL, NULL, 0, FAILED_ID, &a, &err),
            "intent_token");
    REFUSED(kl_client_read_transfer_failure(c, "d", NULL, INTENT, sizeof INTENT, NULL, &a, &err),
            "failed_command_id");
    REFUSED(kl_client_read_transfer_failure(c, "d", NULL, INTENT, sizeof INTENT, "", &a, &err),
            "failed_command_id");
    REFUSED(kl_client_read_transfer_failure(c, "d", NULL, INTENT, sizeof INTENT, "123", &a, &err),
            "failed_command_id");
    ck_assert_ptr_nonnull(strstr(err.message, "GUID"));
    REFUSED(kl_client_read_transfer_failure(c, "d", NULL, INTENT, sizeof INTENT, ZERO_ID, &a,
                                            &err), "failed_command_id");
    ck_assert_ptr_nonnull(strstr(err.message, "all zero"));
    /* The denied-Complete read, on the source: its own arguments, each named. */
    REFUSED(kl_client_read_complete_failure(c, "", NULL, XFER_ID, INTENT, sizeof INTENT, FAILED_ID, &a, &err),
            "source_queue");
    REFUSED(kl_client_read_complete_failure(c, "s", "a b", XFER_ID, INTENT, sizeof INTENT, FAILED_ID, &a, &err),
            "source_lane");
    REFUSED(kl_client_read_complete_failure(c, "s", NULL, ZERO_ID, INTENT, sizeof INTENT, FAILED_ID, &a, &err),
            "transfer_id");
    REFUSED(kl_client_read_complete_failure(c, "s", NULL, XFER_ID, INTENT, 0, FAILED_ID, &a, &err),
            "receipt_token");
    REFUSED(kl_client_read_complete_failure(c, "s", NULL, XFER_ID, INTENT, sizeof INTENT, "x", &a, &err),
            "failed_command_id");
#undef REFUSED
    kl_transfer_failure_answer_free(NULL);
    kl_client_close(c);
}
END_TEST

/* ------------------------------------------------------------ one round trip
 * Two scripted members, one per partition, on one loop: partition 0 answers LocateQueue
 * (the destination queue lives on partition 1), partition 1 answers the failure read. */

typedef struct member {
    kl_rpc_server *srv;
    char url[64];
    int partition;
} member;

static struct {
    uv_loop_t loop;
    uv_async_t ctl;
    pthread_t thread;
    member m[2];
    /* written on the loop thread, read after the call returned (the reply orders them) */
    char located[64];
    int failure_partition;
    Keyload__V1__ReadQueueTransferFailureRequest *seen;
} rt;

static void on_locate(void *owner, kl_rpc_call *call)
{
    member *m = owner;
    size_t len;
    const uint8_t *p = kl_rpc_call_payload(call, &len);
    Keyload__V1__LocateQueueRequest *q = keyload__v1__locate_queue_request__unpack(NULL, len, p);
    kl_err e;
    if (m->partition != 0 || q == NULL || q->queue == NULL) {
        kl_fail(&e, KL_INTERNAL, "test", "LocateQueue off partition 0 or undecodable");
        kl_rpc_reply_error(call, &e, NULL);
    } else {
        snprintf(rt.located, sizeof rt.located, "%s", q->queue->queue);
        Keyload__V1__CatalogQueue cq = KEYLOAD__V1__CATALOG_QUEUE__INIT;
        cq.tenant = q->queue->tenant;
        cq.database = q->queue->database;
        cq.queue = q->queue->queue;
        cq.queue_id = 5;
        cq.partition = 1;
        Keyload__V1__LocateQueueAnswer a = KEYLOAD__V1__LOCATE_QUEUE_ANSWER__INIT;
        a.queue = &cq;
        uint8_t buf[512];
        kl_rpc_reply(call, buf, keyload__v1__locate_queue_answer__pack(&a, buf));
    }
    if (q != NULL)
        keyload__v1__locate_queue_request__free_unpacked(q, NULL);
}

static void on_failure(void *owner, kl_rpc_call *call)
{
    member *m = owner;
    size_t len;
    const uint8_t *p = kl_rpc_call_payload(call, &len);
    rt.failure_partition = m->partition;
    if (rt.seen == NULL)
        rt.seen = keyload__v1__read_queue_transfer_failure_request__unpack(NULL, len, p);
    static uint8_t wit[2] = {0x77, 0x88};
    Keyload__V1__ReadQueueTransferFailureAnswer a =
        KEYLOAD__V1__READ_QUEUE_TRANSFER_FAILURE_ANSWER__INIT;
    a.verdict = KEYLOAD__V1__FAILURE_VERDICT__WITNESS_ISSUED;
    a.witness_token = (ProtobufCBinaryData){sizeof wit, wit};
    a.failure_code = KL_RESOURCE_EXHAUSTED;
    a.failure_detail = "limit:max_messages";
    a.applied_index = 41;
    uint8_t buf[256];
    kl_rpc_reply(call, buf, keyload__v1__read_queue_transfer_failure_answer__pack(&a, buf));
}

static const kl_rpc_method methods[] = {
    {"keyload.v1.LocateQueue", on_locate},
    {"keyload.v1.ReadQueueTransferFailure", on_failure},
};

static void on_ctl(uv_async_t *h)
{
    (void)h;
    kl_rpc_server_stop(rt.m[0].srv);
    kl_rpc_server_stop(rt.m[1].srv);
    uv_close((uv_handle_t *)&rt.ctl, NULL);
}

static void *loop_main(void *arg)
{
    (void)arg;
    uv_run(&rt.loop, UV_RUN_DEFAULT);
    return NULL;
}

static void members_start(void)
{
    memset(&rt, 0, sizeof rt);
    rt.failure_partition = -1;
    ck_assert_int_eq(uv_loop_init(&rt.loop), 0);
    ck_assert_int_eq(uv_async_init(&rt.loop, &rt.ctl, on_ctl), 0);
    for (int i = 0; i < 2; i++) {
        rt.m[i].partition = i;
        snprintf(rt.m[i].url, sizeof rt.m[i].url, "tcp://127.0.0.1:%d", th_free_port());
        kl_rpc_server_config cfg = {.listen_url = rt.m[i].url, .methods = methods,
                                    .method_count = 2, .owner = &rt.m[i], .max_frame = 1 << 20};
        kl_err err;
        ck_assert_msg(kl_rpc_server_start(&rt.loop, &cfg, &rt.m[i].srv, &err) == KL_OK, "%s",
                      err.message);
    }
    ck_assert_int_eq(pthread_create(&rt.thread, NULL, loop_main, NULL), 0);
}

static void members_stop(void)
{
    ck_assert_int_eq(uv_async_send(&rt.ctl), 0);
    ck_assert_int_eq(pthread_join(rt.thread, NULL), 0);
    ck_assert_int_eq(uv_loop_close(&rt.loop), 0);
    if (rt.seen != NULL)
        keyload__v1__read_queue_transfer_failure_request__free_unpacked(rt.seen, NULL);
}

static void cluster_file(char *path, size_t cap, char *dir)
{
    th_tmpdir(dir, 256);
    snprintf(path, cap, "%s/cluster.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "{\"cluster\":\"sdk\",\"replica_count\":1,\"insecure_local_admin\":true,"
            "\"partitions\":[{\"id\":0,\"members\":[{\"id\":1,\"client\":\"%s\"}]},"
            "{\"id\":1,\"members\":[{\"id\":2,\"client\":\"%s\"}]}]}\n",
            rt.m[0].url, rt.m[1].url);
    fclose(f);
}

START_TEST(test_failure_read_goes_to_the_destination_partition)
{
    members_start();
    char dir[256], path[512];
    cluster_file(path, sizeof path, dir);
    kl_client *c;
    kl_err err;
    ck_assert_int_eq(kl_client_open(path, "acme/shop", 3000, &c, &err), KL_OK);
    Keyload__V1__ReadQueueTransferFailureAnswer *a = NULL;
    kl_code rc = kl_client_read_transfer_failure(c, "archive", "slow", INTENT, sizeof INTENT,
                                                 FAILED_ID, &a, &err);
    ck_assert_msg(rc == KL_OK, "%s: %s", kl_code_name(rc), err.message);
    ck_assert_str_eq(rt.located, "archive");
    ck_assert_int_eq(rt.failure_partition, 1);
    ck_assert_ptr_nonnull(rt.seen);
    xf_assert_ref(rt.seen->destination_queue, "archive", "slow");
    ck_assert_uint_eq(rt.seen->intent_token.len, sizeof INTENT);
    ck_assert_int_eq(memcmp(rt.seen->intent_token.data, INTENT, sizeof INTENT), 0);
    uint8_t fid[16];
    ck_assert(kl_guid_parse(FAILED_ID, fid));
    ck_assert_uint_eq(rt.seen->failed_command_id.len, 16);
    ck_assert_int_eq(memcmp(rt.seen->failed_command_id.data, fid, 16), 0);
    ck_assert_int_eq(a->verdict, KEYLOAD__V1__FAILURE_VERDICT__WITNESS_ISSUED);
    ck_assert_uint_eq(a->witness_token.len, 2);
    ck_assert_uint_eq(a->applied_index, 41);
    kl_transfer_failure_answer_free(a);
    kl_client_close(c);

    /* The CLI end to end: the witness goes raw to a new 0600 file, JSON on stdout. */
    char wpath[600], ipath[600];
    snprintf(wpath, sizeof wpath, "%s/w.tok", dir);
    snprintf(ipath, sizeof ipath, "@%s/i.tok", dir);
    ck_assert_int_eq(cli_token_write("--token-out", ipath + 1, INTENT, sizeof INTENT, NULL), KL_OK);
    cli cl = {.cluster = path, .database = "acme/shop", .timeout_ms = 3000};
    char *argv[] = {"failure", "--dest", "archive/slow", "--intent", ipath, "--failed-command-id",
                    FAILED_ID, "--witness-out", wpath, NULL};
    ck_assert_int_eq(cli_cmd_transfer(&cl, 9, argv), CLI_EXIT_OK);
    struct stat st;
    ck_assert_int_eq(stat(wpath, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    ck_assert_int_eq(st.st_size, 2);
    /* Again: the witness file exists, so the command refuses before reading (exit 1). */
    ck_assert_int_eq(cli_cmd_transfer(&cl, 9, argv), CLI_EXIT_ERROR);
    th_rmrf(dir);
    members_stop();
}
END_TEST

/* ------------------------------------------------------------ JSON */

START_TEST(test_names)
{
    ck_assert_str_eq(kl_transfer_event_name(1), "IntentCreated");
    ck_assert_str_eq(kl_transfer_event_name(2), "ReceiptVerified");
    ck_assert_str_eq(kl_transfer_event_name(3), "AttemptAdvanced");
    ck_assert_str_eq(kl_transfer_event_name(4), "PolicyRepaired");
    ck_assert_str_eq(kl_transfer_event_name(0), "unknown");
    ck_assert_str_eq(kl_transfer_event_name(99), "unknown");
    ck_assert_str_eq(kl_failure_verdict_name(1), "ReceiptExists");
    ck_assert_str_eq(kl_failure_verdict_name(2), "WitnessIssued");
    ck_assert_str_eq(kl_failure_verdict_name(3), "Unchanged");
    ck_assert_str_eq(kl_failure_verdict_name(0), "unknown");
    ck_assert_str_eq(kl_failure_verdict_name(4), "unknown");
}
END_TEST

#define RECEIPT_HEAD                                                                           \
    "{\"command_id\":\"01020304-0506-0708-090a-0b0c0d0e0f10\",\"partition\":1,\"term\":3,"       \
    "\"index\":9,\"committed_unix_ms\":1700000000000,\"request_digest\":\"\",\"results\":["

START_TEST(test_advanced_receipt_json)
{
    static uint8_t cmd[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    static uint8_t tok[3] = {0xde, 0xad, 0x01};
    Keyload__V1__BatchReceipt r = KEYLOAD__V1__BATCH_RECEIPT__INIT;
    r.command_id = (ProtobufCBinaryData){16, cmd};
    r.partition = 1;
    r.term = 3;
    r.index = 9;
    r.committed_unix_ms = 1700000000000;
    Keyload__V1__TransferAdvanced ta = KEYLOAD__V1__TRANSFER_ADVANCED__INIT;
    ta.generation = 2;
    ta.intent_token = (ProtobufCBinaryData){3, tok};
    ta.charged_bytes = 412;
    Keyload__V1__MutationResult res = KEYLOAD__V1__MUTATION_RESULT__INIT, *resp = &res;
    res.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ADVANCED;
    res.transfer_advanced = &ta;
    r.n_results = 1;
    r.results = &resp;
    char *s = kl_receipt_to_json(&r, 0);
    ck_assert_str_eq(s, RECEIPT_HEAD "{\"kind\":\"transfer_advanced\",\"generation\":2,"
                                     "\"intent_token\":\"3q0B\",\"charged_bytes\":412,"
                                     "\"already\":false}]}");
    free(s);
    ta.already = true;
    s = kl_receipt_to_json(&r, KL_JSON_OMIT_TOKENS);
    ck_assert_str_eq(s, RECEIPT_HEAD "{\"kind\":\"transfer_advanced\",\"generation\":2,"
                                     "\"charged_bytes\":412,\"already\":true}]}");
    free(s);
    ta.intent_token = (ProtobufCBinaryData){0, NULL};
    s = kl_receipt_to_json(&r, 0);
    ck_assert_str_eq(s, RECEIPT_HEAD "{\"kind\":\"transfer_advanced\",\"generation\":2,"
                                     "\"intent_token\":null,\"charged_bytes\":412,"
                                     "\"already\":true}]}");
    free(s);
    /* A decoded receipt (the bytes a member stores) prints the same. */
    ta.intent_token = (ProtobufCBinaryData){3, tok};
    ta.already = false;
    uint8_t buf[256];
    size_t n = keyload__v1__batch_receipt__pack(&r, buf);
    kl_receipt *kr;
    ck_assert_int_eq(kl_receipt_decode(buf, n, &kr, NULL), KL_OK);
    ck_assert_int_eq(kr->decoded->results[0]->kind_case,
                     KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ADVANCED);
    s = kl_receipt_to_json(kr->decoded, 0);
    ck_assert_ptr_nonnull(strstr(s, "\"intent_token\":\"3q0B\",\"charged_bytes\":412"));
    free(s);
    kl_receipt_free(kr);
}
END_TEST

START_TEST(test_inspect_json_after_advances)
{
    static uint8_t itok[2] = {0xfb, 0xff}, ctok[1] = {0x02}, fp[2] = {0xab, 0xcd};
    uint8_t fid[16];
    ck_assert(kl_guid_parse(FAILED_ID, fid));
    Keyload__V1__QueueLaneRef src = xf_lane("orders", "eu"), dst = xf_lane("archive", "default");
    Keyload__V1__TransferHistoryEntry h[3], *hp[3] = {&h[0], &h[1], &h[2]};
    for (int i = 0; i < 3; i++) {
        keyload__v1__transfer_history_entry__init(&h[i]);
        h[i].generation = (uint64_t)i + 1;
        h[i].unix_ms = 1000 * (i + 1);
        h[i].term = 2;
        h[i].index = 10 + (uint64_t)i;
    }
    h[0].event = KEYLOAD__V1__TRANSFER_EVENT__INTENT_CREATED;
    h[0].generation = 1;
    h[1].event = KEYLOAD__V1__TRANSFER_EVENT__ATTEMPT_ADVANCED;
    h[1].failed_command_id = (ProtobufCBinaryData){16, fid};
    h[1].failure_code = KL_RESOURCE_EXHAUSTED;
    h[2].event = KEYLOAD__V1__TRANSFER_EVENT__POLICY_REPAIRED;
    h[2].failed_command_id = (ProtobufCBinaryData){16, fid};
    h[2].failure_code = KL_PERMISSION_DENIED;
    Keyload__V1__NullableU64 max = KEYLOAD__V1__NULLABLE_U64__INIT;
    max.value = 4;
    Keyload__V1__InspectQueueTransferAnswer a = KEYLOAD__V1__INSPECT_QUEUE_TRANSFER_ANSWER__INIT;
    a.state = KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING;
    a.generation = 3;
    a.n_history = 3;
    a.history = hp;
    a.intent_token = (ProtobufCBinaryData){2, itok};
    a.current_token = (ProtobufCBinaryData){1, ctok};
    a.source = &src;
    a.destination = &dst;
    a.fingerprint = (ProtobufCBinaryData){2, fp};
    a.principal_id = "admin";
    a.max_accept_attempts = &max;
    a.applied_index = 33;
    a.retained_records = 5;
    a.retained_bytes = 2048;
    a.reserved_records = 2;
    a.reserved_bytes = 800;
    a.attempt_advances = 1;
    char *s = kl_transfer_to_json(&a, 0);
    ck_assert_str_eq(
        s, "{\"state\":\"OutputPending\",\"generation\":3,\"source\":" SRC_JSON
           ",\"destination\":" DST_JSON ",\"principal_id\":\"admin\",\"fingerprint\":\"q80=\","
           "\"max_accept_attempts\":4,\"attempt_advances\":1,\"retained_records\":5,"
           "\"retained_bytes\":2048,\"reserved_records\":2,\"reserved_bytes\":800,"
           "\"history\":[{\"event\":\"IntentCreated\",\"generation\":1,\"unix_ms\":1000,"
           "\"term\":2,\"index\":10},"
           "{\"event\":\"AttemptAdvanced\",\"generation\":2,\"unix_ms\":2000,\"term\":2,"
           "\"index\":11,\"failed_command_id\":\"" FAILED_ID "\","
           "\"failure_code\":\"RESOURCE_EXHAUSTED\"},"
           "{\"event\":\"PolicyRepaired\",\"generation\":3,\"unix_ms\":3000,\"term\":2,"
           "\"index\":12,\"failed_command_id\":\"" FAILED_ID "\","
           "\"failure_code\":\"PERMISSION_DENIED\"}],"
           "\"intent_token\":\"+/8=\",\"current_token\":\"Ag==\",\"receipt_token\":null,"
           "\"applied_index\":33}");
    free(s);
    s = kl_transfer_to_json(&a, KL_JSON_OMIT_TOKENS);
    ck_assert_ptr_null(strstr(s, "token"));
    ck_assert_ptr_nonnull(strstr(s, "\"attempt_advances\":1"));
    free(s);
}
END_TEST

START_TEST(test_failure_answer_json)
{
    static uint8_t rtok[3] = {'a', 'b', 'c'}, wtok[2] = {0xfb, 0xff};
    Keyload__V1__ReadQueueTransferFailureAnswer a =
        KEYLOAD__V1__READ_QUEUE_TRANSFER_FAILURE_ANSWER__INIT;
    a.verdict = KEYLOAD__V1__FAILURE_VERDICT__WITNESS_ISSUED;
    a.witness_token = (ProtobufCBinaryData){2, wtok};
    a.failure_code = KL_RESOURCE_EXHAUSTED;
    a.failure_detail = "limit:max_messages";
    a.failure_policy_epoch = 3;
    a.policy_epoch = 3;
    a.records_charged = 4;
    a.bytes_charged = 900;
    a.applied_index = 70;
    char *s = kl_transfer_failure_to_json(&a, 0);
    ck_assert_str_eq(s, "{\"verdict\":\"WitnessIssued\",\"receipt_token\":null,"
                        "\"target_commit\":null,\"witness_token\":\"+/8=\","
                        "\"failure_code\":\"RESOURCE_EXHAUSTED\","
                        "\"failure_detail\":\"limit:max_messages\",\"unchanged_detail\":\"\","
                        "\"failure_policy_epoch\":3,\"policy_epoch\":3,\"records_charged\":4,"
                        "\"bytes_charged\":900,\"applied_index\":70}");
    free(s);

    Keyload__V1__TargetEffect e = KEYLOAD__V1__TARGET_EFFECT__INIT;
    e.message_id = 8;
    e.partition = 2;
    e.term = 4;
    e.index = 99;
    Keyload__V1__ReadQueueTransferFailureAnswer r =
        KEYLOAD__V1__READ_QUEUE_TRANSFER_FAILURE_ANSWER__INIT;
    r.verdict = KEYLOAD__V1__FAILURE_VERDICT__RECEIPT_EXISTS;
    r.receipt_token = (ProtobufCBinaryData){3, rtok};
    r.target_commit = &e;
    r.failure_code = KL_PERMISSION_DENIED;
    r.failure_detail = "grant:QueuePublish";
    r.failure_policy_epoch = 5;
    r.policy_epoch = 6;
    r.applied_index = 100;
    s = kl_transfer_failure_to_json(&r, 0);
    ck_assert_str_eq(s, "{\"verdict\":\"ReceiptExists\",\"receipt_token\":\"YWJj\","
                        "\"target_commit\":{\"message_id\":8,\"partition\":2,\"term\":4,"
                        "\"index\":99},\"witness_token\":null,"
                        "\"failure_code\":\"PERMISSION_DENIED\","
                        "\"failure_detail\":\"grant:QueuePublish\",\"unchanged_detail\":\"\","
                        "\"failure_policy_epoch\":5,\"policy_epoch\":6,\"records_charged\":0,"
                        "\"bytes_charged\":0,\"applied_index\":100}");
    free(s);
    s = kl_transfer_failure_to_json(&r, KL_JSON_OMIT_TOKENS);
    ck_assert_ptr_null(strstr(s, "token"));
    ck_assert_ptr_null(strstr(s, "YWJj"));
    ck_assert_ptr_nonnull(strstr(s, "\"target_commit\":{\"message_id\":8"));
    free(s);

    Keyload__V1__ReadQueueTransferFailureAnswer u =
        KEYLOAD__V1__READ_QUEUE_TRANSFER_FAILURE_ANSWER__INIT;
    u.verdict = KEYLOAD__V1__FAILURE_VERDICT__UNCHANGED;
    u.failure_code = KL_RESOURCE_EXHAUSTED;
    u.failure_detail = "limit:max_messages";
    u.unchanged_detail = "limit:max_messages";
    u.applied_index = 7;
    s = kl_transfer_failure_to_json(&u, 0);
    ck_assert_str_eq(s, "{\"verdict\":\"Unchanged\",\"receipt_token\":null,\"target_commit\":null,"
                        "\"witness_token\":null,\"failure_code\":\"RESOURCE_EXHAUSTED\","
                        "\"failure_detail\":\"limit:max_messages\","
                        "\"unchanged_detail\":\"limit:max_messages\",\"failure_policy_epoch\":0,"
                        "\"policy_epoch\":0,\"records_charged\":0,\"bytes_charged\":0,"
                        "\"applied_index\":7}");
    free(s);
}
END_TEST

/* A witness's claims: which Accept failed and how, with no message. */
START_TEST(test_witness_token_describe)
{
    static uint8_t incarnation[16] = {1}, fp[2] = {0x00, 0xff}, kid[8] = {7}, sig[64];
    uint8_t id[16], fid[16];
    ck_assert_int_eq(kl_transfer_id_parse(XFER_ID, id, NULL), KL_OK);
    ck_assert(kl_guid_parse(FAILED_ID, fid));
    Keyload__V1__QueueLaneRef src = xf_lane("orders", "eu"), dst = xf_lane("archive", "default");
    Keyload__V1__TransferClaims c = KEYLOAD__V1__TRANSFER_CLAIMS__INIT;
    c.version = 1;
    c.purpose = KEYLOAD__V1__CLAIM_PURPOSE__TRANSFER_FAILURE_WITNESS;
    c.database_incarnation = (ProtobufCBinaryData){16, incarnation};
    c.source = &src;
    c.target = &dst;
    c.transfer_id = (ProtobufCBinaryData){16, id};
    c.generation = 2;
    c.principal_id = "admin";
    c.fingerprint = (ProtobufCBinaryData){2, fp};
    c.issued_unix_ms = 1234;
    c.failed_command_id = (ProtobufCBinaryData){16, fid};
    c.failure_code = KL_RESOURCE_EXHAUSTED;
    uint8_t claims[512];
    size_t clen = keyload__v1__transfer_claims__pack(&c, claims);
    Keyload__V1__SignedToken t = KEYLOAD__V1__SIGNED_TOKEN__INIT;
    t.claims = (ProtobufCBinaryData){clen, claims};
    t.key_id = (ProtobufCBinaryData){8, kid};
    t.signature = (ProtobufCBinaryData){64, sig};
    uint8_t tok[1024];
    size_t len = keyload__v1__signed_token__pack(&t, tok);
    char *s = NULL;
    ck_assert_int_eq(kl_transfer_token_describe(tok, len, 0, &s, NULL), KL_OK);
    ck_assert_str_eq(s, "{\"purpose\":\"TransferFailureWitness\",\"version\":1,"
                        "\"database_incarnation\":\"AQAAAAAAAAAAAAAAAAAAAA==\",\"source\":" SRC_JSON
                        ",\"target\":" DST_JSON ",\"transfer_id\":\"" XFER_ID "\","
                        "\"generation\":2,\"principal_id\":\"admin\",\"fingerprint_hex\":\"00ff\","
                        "\"failed_command_id\":\"" FAILED_ID "\","
                        "\"failure_code\":\"RESOURCE_EXHAUSTED\",\"issued_unix_ms\":1234,"
                        "\"key_id\":\"BwAAAAAAAAA=\"}");
    free(s);
}
END_TEST

/* ------------------------------------------------------------ CLI arguments */

START_TEST(test_cli_advance_parse_ok)
{
    cli c = xf_test_cli();
    cli_transfer_args o;
    ck_assert_int_eq(xf_tparse(&c, &o, "advance", "--source", "orders/eu", "--id", XFER_ID,
                            "--witness", "@/tmp/w", "--token-out", "/tmp/i2",
                            "--command-id", CMD_ID, NULL), CLI_EXIT_OK);
    ck_assert_int_eq(o.sub, CLI_TRANSFER_ADVANCE);
    ck_assert_str_eq(o.source_queue, "orders");
    ck_assert_str_eq(o.source_lane, "eu");
    ck_assert_str_eq(o.id, XFER_ID);
    ck_assert_str_eq(o.token, "@/tmp/w");
    ck_assert_str_eq(o.token_out, "/tmp/i2");
    ck_assert_str_eq(o.command_id, CMD_ID);
    cli_transfer_args_clear(&o);

    ck_assert_int_eq(xf_tparse(&c, &o, "repair", "--source", "orders", "--id", XFER_ID,
                            "--witness=-", NULL), CLI_EXIT_OK);
    ck_assert_int_eq(o.sub, CLI_TRANSFER_REPAIR);
    ck_assert_str_eq(o.source_lane, "");
    ck_assert_str_eq(o.token, "-");
    ck_assert_ptr_null(o.command_id);
    cli_transfer_args_clear(&o);

    ck_assert_int_eq(xf_tparse(&c, &o, "failure", "--dest", "archive/slow", "--intent", "@/tmp/i",
                            "--failed-command-id", FAILED_ID, "--witness-out", "/tmp/w",
                            "--receipt-out", "/tmp/r", "--json", NULL), CLI_EXIT_OK);
    ck_assert_int_eq(o.sub, CLI_TRANSFER_FAILURE);
    ck_assert_str_eq(o.dest_queue, "archive");
    ck_assert_str_eq(o.dest_lane, "slow");
    ck_assert_str_eq(o.token, "@/tmp/i");
    ck_assert_str_eq(o.failed_command_id, FAILED_ID);
    ck_assert_str_eq(o.witness_out, "/tmp/w");
    ck_assert_str_eq(o.receipt_out, "/tmp/r");
    ck_assert(c.json);
    cli_transfer_args_clear(&o);
}
END_TEST

START_TEST(test_cli_advance_parse_usage_errors)
{
    /* Tokens on the command line are refused without echoing them. */
    USAGE_ERR("@FILE or -", "advance", "--source", "a", "--id", XFER_ID, "--witness", "CgGQAQAg");
    USAGE_ERR("@FILE or -", "repair", "--source", "a", "--id", XFER_ID, "--witness", "@");
    USAGE_ERR("@FILE or -", "failure", "--dest", "b", "--intent", "CgGQAQAg",
              "--failed-command-id", FAILED_ID);
    {
        cli c = xf_test_cli();
        cli_transfer_args o;
        ck_assert_int_eq(xf_tparse(&c, &o, "advance", "--source", "a", "--id", XFER_ID, "--witness",
                                "CgGQAQAg", NULL), CLI_EXIT_USAGE);
        ck_assert_ptr_null(strstr(c.last_usage, "CgGQAQAg"));
    }
    USAGE_ERR("needs --witness", "advance", "--source", "a", "--id", XFER_ID);
    USAGE_ERR("needs --witness", "repair", "--source", "a", "--id", XFER_ID);
    USAGE_ERR("needs --id", "repair", "--source", "a", "--witness", "-");
    USAGE_ERR("needs --source", "advance", "--id", XFER_ID, "--witness", "-");
    USAGE_ERR("all zero", "advance", "--source", "a", "--id", ZERO_ID, "--witness", "-");
    USAGE_ERR("takes no --intent", "advance", "--source", "a", "--id", XFER_ID, "--intent", "-");
    USAGE_ERR("takes no --dest", "repair", "--source", "a", "--dest", "b", "--id", XFER_ID,
              "--witness", "-");
    USAGE_ERR("takes no --witness-out", "advance", "--source", "a", "--id", XFER_ID, "--witness",
              "-", "--witness-out", "f");
    USAGE_ERR("takes no --failed-command-id", "advance", "--source", "a", "--id", XFER_ID,
              "--witness", "-", "--failed-command-id", FAILED_ID);
    USAGE_ERR("given twice", "advance", "--source", "a", "--id", XFER_ID, "--witness", "-",
              "--witness", "@f");
    USAGE_ERR("takes no argument", "repair", "--source", "a", "--id", XFER_ID, "--witness", "-",
              "extra");

    USAGE_ERR("needs --dest", "failure", "--intent", "-", "--failed-command-id", FAILED_ID);
    USAGE_ERR("needs --intent", "failure", "--dest", "b", "--failed-command-id", FAILED_ID);
    USAGE_ERR("needs --failed-command-id", "failure", "--dest", "b", "--intent", "-");
    USAGE_ERR("--failed-command-id must be a GUID", "failure", "--dest", "b", "--intent", "-",
              "--failed-command-id", "123");
    USAGE_ERR("--failed-command-id must be a GUID", "failure", "--dest", "b", "--intent", "-",
              "--failed-command-id", "");
    USAGE_ERR("--failed-command-id must not be all zero", "failure", "--dest", "b", "--intent",
              "-", "--failed-command-id", ZERO_ID);
    USAGE_ERR("only to commands that change", "failure", "--dest", "b", "--intent", "-",
              "--failed-command-id", FAILED_ID, "--command-id", CMD_ID);
    USAGE_ERR("takes no --token-out", "failure", "--dest", "b", "--intent", "-",
              "--failed-command-id", FAILED_ID, "--token-out", "f");
    USAGE_ERR("takes no --witness", "failure", "--dest", "b", "--witness", "-",
              "--failed-command-id", FAILED_ID);
    USAGE_ERR("different files", "failure", "--dest", "b", "--intent", "-",
              "--failed-command-id", FAILED_ID, "--witness-out", "f", "--receipt-out", "f");
    USAGE_ERR("given twice", "failure", "--dest", "b", "--intent", "-", "--failed-command-id",
              FAILED_ID, "--witness-out", "f", "--witness-out", "g");
    USAGE_ERR("unknown transfer subcommand", "retry");
}
END_TEST

/* The whole command: a token given as an argument is a usage error (exit 2) before any
 * connection; an existing --witness-out or --receipt-out is refused (exit 1) before the
 * read, naming the option. */
START_TEST(test_cli_failure_command_refusals)
{
    cli c = xf_test_cli();
    char *tok_arg[] = {"advance", "--source", "a", "--id", XFER_ID, "--witness", "CgGQAQAg", NULL};
    ck_assert_int_eq(cli_cmd_transfer(&c, 7, tok_arg), CLI_EXIT_USAGE);
    char *tok_arg2[] = {"failure", "--dest", "b", "--intent", "CgGQAQAg", "--failed-command-id",
                        FAILED_ID, NULL};
    ck_assert_int_eq(cli_cmd_transfer(&c, 7, tok_arg2), CLI_EXIT_USAGE);

    char dir[160];
    th_tmpdir_named(dir, sizeof dir, "kl-adv");
    char exists[256];
    snprintf(exists, sizeof exists, "%s/exists", dir);
    ck_assert_int_eq(cli_token_write("--witness-out", exists, WITNESS, sizeof WITNESS, NULL),
                     KL_OK);
    kl_err err;
    ck_assert_int_eq(cli_token_out_check("--witness-out", exists, &err), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(err.detail, "witness_out");
    ck_assert_ptr_nonnull(strstr(err.message, "--witness-out"));
    ck_assert_int_eq(cli_token_out_check("--receipt-out", exists, &err), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(err.detail, "receipt_out");
    char *argv[] = {"failure", "--dest", "b", "--intent", "-", "--failed-command-id", FAILED_ID,
                    "--receipt-out", exists, NULL};
    ck_assert_int_eq(cli_cmd_transfer(&c, 9, argv), CLI_EXIT_ERROR);
    unlink(exists);
    rmdir(dir);
}
END_TEST

Suite *suite_sdk_advance(void)
{
    Suite *s = suite_create("sdk_advance");
    TCase *t = tcase_create("builders");
    tcase_add_loop_test(t, test_advance_builders_validate, 0, 2);
    tcase_add_test(t, test_advance_encode);
    tcase_add_test(t, test_advance_routing);
    tcase_add_test(t, test_failure_read_refuses_before_network);
    suite_add_tcase(s, t);
    t = tcase_create("round_trip");
    tcase_set_timeout(t, 30);
    tcase_add_test(t, test_failure_read_goes_to_the_destination_partition);
    suite_add_tcase(s, t);
    t = tcase_create("json");
    tcase_add_test(t, test_names);
    tcase_add_test(t, test_advanced_receipt_json);
    tcase_add_test(t, test_inspect_json_after_advances);
    tcase_add_test(t, test_failure_answer_json);
    tcase_add_test(t, test_witness_token_describe);
    suite_add_tcase(s, t);
    t = tcase_create("cli");
    tcase_add_test(t, test_cli_advance_parse_ok);
    tcase_add_test(t, test_cli_advance_parse_usage_errors);
    tcase_add_test(t, test_cli_failure_command_refusals);
    suite_add_tcase(s, t);
    return s;
}
