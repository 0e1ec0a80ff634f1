/* Q1 statements (KL-7): the parser (common/q1.h) and the alias mapping (common/q1_plan.h).
 * Every literal kind and escape, keyword case, errors with line:column that never echo
 * values, the limits, duplicate and unknown arguments, unknown aliases, and that each alias
 * becomes exactly the native request (decoded back and compared field by field). */
#include "client/keyload.h"
#include "common/guid.h"
#include "common/q1.h"
#include "common/q1_plan.h"
#include "keyload/v1/queue.pb-c.h"
#include "keyload/v1/transfer.pb-c.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static kl_code parse(const char *text, kl_q1_call *c, kl_err *e)
{
    return kl_q1_parse(text, strlen(text), c, e);
}

START_TEST(q1_every_literal_kind)
{
    kl_q1_call c;
    kl_err e;
    ck_assert_int_eq(parse("CALL keyload.queue.enqueue.v1(s => 'it''s', i => -42, big => "
                           "9223372036854775807, t => TRUE, f => false, n => NULL, "
                           "j => {\"a\": [1, {\"b\": \"}\"}], \"c\": \"\\\"'\"}, e => '')",
                           &c, &e),
                     KL_OK);
    ck_assert_str_eq(c.alias, "keyload.queue.enqueue.v1");
    ck_assert_uint_eq(c.n_args, 8);
    const kl_q1_arg *a = kl_q1_find(&c, "s");
    ck_assert_int_eq(a->kind, KL_Q1_STRING);
    ck_assert_str_eq(a->str, "it's");
    ck_assert_int_eq(kl_q1_find(&c, "i")->i, -42);
    ck_assert_int_eq(kl_q1_find(&c, "big")->i, INT64_MAX);
    ck_assert(kl_q1_find(&c, "t")->kind == KL_Q1_BOOL && kl_q1_find(&c, "t")->b);
    ck_assert(kl_q1_find(&c, "f")->kind == KL_Q1_BOOL && !kl_q1_find(&c, "f")->b);
    ck_assert_int_eq(kl_q1_find(&c, "n")->kind, KL_Q1_NULL);
    const kl_q1_arg *j = kl_q1_find(&c, "j");
    ck_assert_int_eq(j->kind, KL_Q1_JSON);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(j->json, "a"), 1), "b")), "}");
    ck_assert_str_eq(json_string_value(json_object_get(j->json, "c")), "\"'");
    ck_assert_str_eq(kl_q1_find(&c, "e")->str, "");
    ck_assert(!c.has_command_id);
    kl_q1_call_free(&c);
    /* INT64_MIN is representable; one beyond either end is not */
    ck_assert_int_eq(parse("CALL a(x => -9223372036854775808)", &c, &e), KL_OK);
    ck_assert_int_eq(kl_q1_find(&c, "x")->i, INT64_MIN);
    kl_q1_call_free(&c);
    ck_assert_int_eq(parse("CALL a(x => 9223372036854775808)", &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(e.message, "64-bit"));
    ck_assert_int_eq(parse("CALL a(x => 1.5)", &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(e.message, "integers"));
    ck_assert_int_eq(parse("CALL a(x => 1e3)", &c, &e), KL_INVALID_ARGUMENT);
    /* no arguments at all, multi-line, UTF-8 in strings */
    ck_assert_int_eq(parse("call a()", &c, &e), KL_OK);
    ck_assert_uint_eq(c.n_args, 0);
    kl_q1_call_free(&c);
    ck_assert_int_eq(parse("\n  CALL a(\n x => 'h\xc3\xa9'\n)\n;\n", &c, &e), KL_OK);
    ck_assert_str_eq(kl_q1_find(&c, "x")->str, "h\xc3\xa9");
    kl_q1_call_free(&c);
    ck_assert_int_eq(parse("CALL a(x => 'bad \xc3')", &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(e.message, "UTF-8"));
}
END_TEST

START_TEST(q1_keywords_case_and_command_id)
{
    kl_q1_call c;
    kl_err e;
    ck_assert_int_eq(parse("cAlL KeyLoad.Queue.Enqueue.V1(Queue => 'q', BODY => 'b') wItH "
                           "command_ID '6F9619FF-8B86-D011-B42D-00C04FC964FF';",
                           &c, &e),
                     KL_OK);
    ck_assert_str_eq(c.alias, "keyload.queue.enqueue.v1");
    ck_assert_ptr_nonnull(kl_q1_find(&c, "queue"));
    ck_assert_ptr_nonnull(kl_q1_find(&c, "body"));
    ck_assert(c.has_command_id);
    char text[KL_GUID_TEXT_LEN + 1];
    kl_guid_format(c.command_id, text);
    ck_assert_str_eq(text, "6f9619ff-8b86-d011-b42d-00c04fc964ff");
    kl_q1_call_free(&c);
    /* a string value keeps its case */
    ck_assert_int_eq(parse("CALL a(x => 'MiXeD')", &c, &e), KL_OK);
    ck_assert_str_eq(kl_q1_find(&c, "x")->str, "MiXeD");
    kl_q1_call_free(&c);
    /* TRUEX is no keyword */
    ck_assert_int_eq(parse("CALL a(x => TRUEX)", &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(parse("CALL a() WITH COMMAND_ID '00000000-0000-0000-0000-000000000000'", &c, &e),
                     KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "command_id");
    ck_assert_int_eq(parse("CALL a() WITH COMMAND_ID 'nope'", &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "command_id");
    ck_assert_int_eq(parse("CALL a() WITH COMMAND_ID 5", &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(parse("CALL a() WITH", &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(e.message, "COMMAND_ID"));
}
END_TEST

START_TEST(q1_syntax_errors_name_position_not_values)
{
    kl_q1_call c;
    kl_err e;
    ck_assert_int_eq(parse("SELECT 1", &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "statement");
    ck_assert_ptr_nonnull(strstr(e.message, "line 1, column 1: expected CALL"));
    ck_assert_int_eq(parse("CALL a(\n  x => 'secret-token-AAAA'\n  y => 1)", &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(e.message, "line 3, column 3: expected ',' or ')'"));
    ck_assert_ptr_nonnull(strstr(e.message, "found a word"));
    ck_assert_int_eq(parse("CALL a(x = 'secret-body')", &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(e.message, "line 1, column 10: expected '=>'"));
    ck_assert_int_eq(parse("CALL a(x => 'secret-body' 'more-secret')", &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(e.message, "found a string literal"));
    ck_assert_ptr_null(strstr(e.message, "secret"));
    ck_assert_int_eq(parse("CALL a(x => 'never closed secret", &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(e.message, "line 1, column 13"));
    ck_assert_ptr_nonnull(strstr(e.message, "not terminated"));
    ck_assert_ptr_null(strstr(e.message, "secret"));
    ck_assert_int_eq(parse("CALL a(x => {\"k\": secretvalue})", &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(e.message, "not valid JSON"));
    ck_assert_ptr_null(strstr(e.message, "secretvalue"));
    ck_assert_int_eq(parse("CALL a(x => {\"k\": 1, \"k\": 2})", &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(parse("CALL a(x => {\"k\": 1)", &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(e.message, "not closed"));
    ck_assert_int_eq(parse("CALL a(x => 1", &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(e.message, "found the end of the statement"));
    ck_assert_int_eq(parse("CALL a(x => 1);;", &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(e.message, "line 1, column 16"));
    ck_assert_int_eq(parse("CALL (x => 1)", &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(e.message, "alias name"));
    ck_assert_int_eq(parse("CALL a(1 => 1)", &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(e.message, "argument name"));
    ck_assert_int_eq(parse("CALL a(x => -)", &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(parse("", &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_q1_parse("CALL a()\0x", 10, &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(e.message, "NUL"));
    ck_assert_int_eq(kl_q1_parse(NULL, 0, &c, &e), KL_INVALID_ARGUMENT);
}
END_TEST

START_TEST(q1_duplicates_and_limits)
{
    kl_q1_call c;
    kl_err e;
    ck_assert_int_eq(parse("CALL a(x => 1, X => 2)", &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "x");
    ck_assert_ptr_nonnull(strstr(e.message, "given twice"));
    /* statement length: exactly the maximum parses, one more byte does not */
    size_t n = KL_Q1_STATEMENT_MAX;
    char *big = malloc(n + 2);
    memset(big, ' ', n + 1);
    memcpy(big, "CALL a()", 8);
    ck_assert_int_eq(kl_q1_parse(big, n, &c, &e), KL_OK);
    kl_q1_call_free(&c);
    ck_assert_int_eq(kl_q1_parse(big, n + 1, &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "limit:KL_Q1_STATEMENT_MAX");
    free(big);
    /* arguments */
    char buf[2048] = "CALL a(";
    for (int i = 0; i < KL_Q1_ARGS_MAX; i++)
        sprintf(buf + strlen(buf), "%sa%d => %d", i ? ", " : "", i, i);
    strcat(buf, ")");
    ck_assert_int_eq(parse(buf, &c, &e), KL_OK);
    ck_assert_uint_eq(c.n_args, KL_Q1_ARGS_MAX);
    kl_q1_call_free(&c);
    buf[strlen(buf) - 1] = '\0';
    strcat(buf, ", extra => 1)");
    ck_assert_int_eq(parse(buf, &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "limit:KL_Q1_ARGS_MAX");
    /* JSON nesting: 16 levels parse, 17 do not */
    char json[256] = "CALL a(j => ";
    for (int i = 0; i < KL_Q1_JSON_DEPTH_MAX - 1; i++)
        strcat(json, "{\"k\":");
    strcat(json, "{}");
    for (int i = 0; i < KL_Q1_JSON_DEPTH_MAX - 1; i++)
        strcat(json, "}");
    strcat(json, ")");
    ck_assert_int_eq(parse(json, &c, &e), KL_OK);
    kl_q1_call_free(&c);
    char deeper[300] = "CALL a(j => {\"k\":";
    strcat(deeper, json + strlen("CALL a(j => "));
    deeper[strlen(deeper) - 1] = '\0';
    strcat(deeper, "})");
    ck_assert_int_eq(parse(deeper, &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "limit:KL_Q1_JSON_DEPTH_MAX");
    /* names */
    char name[400] = "CALL a(";
    memset(name + 7, 'n', KL_Q1_NAME_MAX + 1);
    strcpy(name + 7 + KL_Q1_NAME_MAX + 1, " => 1)");
    ck_assert_int_eq(parse(name, &c, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "limit:KL_Q1_NAME_MAX");
}
END_TEST

/* ---- the mapping ---- */

static const uint8_t DEFAULT_ID[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

static kl_code plan(const char *text, kl_q1_plan *p, kl_err *e)
{
    kl_q1_call c;
    kl_code rc = parse(text, &c, e);
    if (rc != KL_OK)
        return rc;
    rc = kl_q1_plan_build(&c, "acme", "shop", DEFAULT_ID, p, e);
    kl_q1_call_free(&c);
    return rc;
}

static Keyload__V1__BatchRequest *batch_of(const kl_q1_plan *p)
{
    ck_assert_int_eq(p->op, KL_Q1_OP_BATCH);
    Keyload__V1__BatchRequest *b = keyload__v1__batch_request__unpack(NULL, p->request_len, p->request);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(b->n_mutations, 1);
    ck_assert_uint_eq(b->command_id.len, 16);
    ck_assert_mem_eq(b->command_id.data, p->command_id, 16);
    return b;
}

START_TEST(q1_enqueue_maps_to_native_batch)
{
    kl_q1_plan p;
    kl_err e;
    ck_assert_int_eq(plan("CALL keyload.queue.enqueue.v1(queue => 'orders', lane => 'eu', body => "
                          "'order 17', headers => {\"source\": \"web\"}, fields => {\"total\": 9.5, "
                          "\"n\": 7, \"ok\": true, \"s\": \"x\", \"raw\": {\"type\": \"bytes\", "
                          "\"value\": \"AAE=\"}}, delay_ms => 5)",
                          &p, &e),
                     KL_OK);
    ck_assert_str_eq(p.queue, "orders");
    ck_assert(!p.transfer);
    ck_assert_mem_eq(p.command_id, DEFAULT_ID, 16); /* no WITH COMMAND_ID: the default */
    Keyload__V1__BatchRequest *b = batch_of(&p);
    const Keyload__V1__Enqueue *q = b->mutations[0]->enqueue;
    ck_assert_int_eq(b->mutations[0]->kind_case, KEYLOAD__V1__MUTATION__KIND_ENQUEUE);
    ck_assert_str_eq(q->lane->tenant, "acme");
    ck_assert_str_eq(q->lane->database, "shop");
    ck_assert_str_eq(q->lane->queue, "orders");
    ck_assert_str_eq(q->lane->lane, "eu");
    ck_assert_uint_eq(q->message->body.len, 8);
    ck_assert_mem_eq(q->message->body.data, "order 17", 8);
    ck_assert_uint_eq(q->message->n_headers, 1);
    ck_assert_str_eq(q->message->headers[0]->value, "web");
    ck_assert_uint_eq(q->message->n_fields, 5);
    ck_assert_int_eq(q->message->fields[0]->value->kind_case, KEYLOAD__V1__FIELD_VALUE__KIND_DOUBLE_VALUE);
    ck_assert_int_eq(q->message->fields[1]->value->int_value, 7);
    ck_assert(q->message->fields[2]->value->bool_value);
    ck_assert_str_eq(q->message->fields[3]->value->string_value, "x");
    ck_assert_uint_eq(q->message->fields[4]->value->bytes_value.len, 2);
    ck_assert_int_eq(q->message->delay_ms, 5);
    keyload__v1__batch_request__free_unpacked(b, NULL);
    kl_q1_plan_free(&p);
    /* body_base64; the statement's command id wins over the default */
    ck_assert_int_eq(plan("CALL keyload.queue.enqueue.v1(queue => 'q', body_base64 => 'AP8=') "
                          "WITH COMMAND_ID '6f9619ff-8b86-d011-b42d-00c04fc964ff'",
                          &p, &e),
                     KL_OK);
    b = batch_of(&p);
    ck_assert_uint_eq(b->mutations[0]->enqueue->message->body.len, 2);
    ck_assert_int_eq(b->mutations[0]->enqueue->message->body.data[1], 0xff);
    ck_assert_str_eq(b->mutations[0]->enqueue->lane->lane, "");
    ck_assert_int_eq(b->command_id.data[0], 0x6f);
    keyload__v1__batch_request__free_unpacked(b, NULL);
    kl_q1_plan_free(&p);
}
END_TEST

START_TEST(q1_receive_ack_and_transfers_map)
{
    kl_q1_plan p;
    kl_err e;
    ck_assert_int_eq(plan("CALL keyload.queue.receive.v1(queue => 'q', max => 10, lease_ms => 30000)", &p, &e), KL_OK);
    Keyload__V1__BatchRequest *b = batch_of(&p);
    ck_assert_uint_eq(b->mutations[0]->receive->max_messages, 10);
    ck_assert_uint_eq(b->mutations[0]->receive->lease_ms, 30000);
    keyload__v1__batch_request__free_unpacked(b, NULL);
    kl_q1_plan_free(&p);

    ck_assert_int_eq(plan("CALL keyload.queue.ack.v1(queue => 'q', lease_tokens => 'AAE=, AgM=')", &p, &e), KL_OK);
    b = batch_of(&p);
    ck_assert_uint_eq(b->mutations[0]->ack->n_lease_tokens, 2);
    ck_assert_int_eq(b->mutations[0]->ack->lease_tokens[1].data[0], 2);
    keyload__v1__batch_request__free_unpacked(b, NULL);
    kl_q1_plan_free(&p);

    const char *id = "6f9619ff-8b86-d011-b42d-00c04fc964ff";
    char s[512];
    snprintf(s, sizeof s, "CALL keyload.queue-transfer.create.v1(source_queue => 'src', transfer_id => '%s', "
             "destination_queue => 'dst', destination_lane => 'eu', body => 'moved')", id);
    ck_assert_int_eq(plan(s, &p, &e), KL_OK);
    ck_assert_str_eq(p.queue, "src");
    ck_assert(p.transfer);
    b = batch_of(&p);
    const Keyload__V1__CreateQueueTransfer *ct = b->mutations[0]->create_queue_transfer;
    ck_assert_str_eq(ct->destination->queue, "dst");
    ck_assert_str_eq(ct->destination->lane, "eu");
    ck_assert_uint_eq(ct->transfer_id.len, 16);
    keyload__v1__batch_request__free_unpacked(b, NULL);
    kl_q1_plan_free(&p);

    ck_assert_int_eq(plan("CALL keyload.queue-transfer.accept.v1(destination_queue => 'dst', intent_token => 'AQID')", &p, &e), KL_OK);
    ck_assert_str_eq(p.queue, "dst");
    b = batch_of(&p);
    ck_assert_uint_eq(b->mutations[0]->accept_queue_transfer->intent_token.len, 3);
    keyload__v1__batch_request__free_unpacked(b, NULL);
    kl_q1_plan_free(&p);

    snprintf(s, sizeof s, "CALL keyload.queue-transfer.complete.v1(source_queue => 'src', transfer_id => '%s', receipt_token => 'AQID')", id);
    ck_assert_int_eq(plan(s, &p, &e), KL_OK);
    ck_assert_str_eq(p.queue, "src");
    kl_q1_plan_free(&p);

    /* KL-6's advances: source-routed batches carrying the witness. */
    for (int repair = 0; repair < 2; repair++) {
        snprintf(s, sizeof s,
                 "CALL keyload.queue-transfer.advance-%s.v1(source_queue => 'src', source_lane => 'eu', "
                 "transfer_id => '%s', witness_token => 'AQID')",
                 repair ? "repair" : "attempt", id);
        ck_assert_int_eq(plan(s, &p, &e), KL_OK);
        ck_assert_int_eq(p.op, KL_Q1_OP_BATCH);
        ck_assert_str_eq(p.queue, "src");
        Keyload__V1__BatchRequest *ab = keyload__v1__batch_request__unpack(NULL, p.request_len, p.request);
        ck_assert_ptr_nonnull(ab);
        ck_assert_uint_eq(ab->n_mutations, 1);
        const Keyload__V1__Mutation *am = ab->mutations[0];
        ck_assert_int_eq(am->kind_case, repair ? KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_REPAIR
                                               : KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_ATTEMPT);
        const Keyload__V1__QueueLaneRef *src = repair ? am->advance_queue_transfer_repair->source_queue
                                                      : am->advance_queue_transfer_attempt->source_queue;
        const ProtobufCBinaryData *w = repair ? &am->advance_queue_transfer_repair->witness_token
                                              : &am->advance_queue_transfer_attempt->witness_token;
        ck_assert_str_eq(src->lane, "eu");
        ck_assert_uint_eq(w->len, 3);
        ck_assert_int_eq(w->data[2], 3);
        keyload__v1__batch_request__free_unpacked(ab, NULL);
        kl_q1_plan_free(&p);
        /* the witness is required */
        snprintf(s, sizeof s, "CALL keyload.queue-transfer.advance-%s.v1(source_queue => 'src', transfer_id => '%s')",
                 repair ? "repair" : "attempt", id);
        ck_assert_int_eq(plan(s, &p, &e), KL_INVALID_ARGUMENT);
        ck_assert_str_eq(e.detail, "witness_token");
    }

    snprintf(s, sizeof s, "CALL keyload.queue-transfer.inspect.v1(source_queue => 'src', source_lane => 'l', transfer_id => '%s')", id);
    ck_assert_int_eq(plan(s, &p, &e), KL_OK);
    ck_assert_int_eq(p.op, KL_Q1_OP_INSPECT_TRANSFER);
    Keyload__V1__InspectQueueTransferRequest *ir =
        keyload__v1__inspect_queue_transfer_request__unpack(NULL, p.request_len, p.request);
    ck_assert_ptr_nonnull(ir);
    ck_assert_str_eq(ir->source_queue->lane, "l");
    ck_assert_str_eq(ir->source_queue->tenant, "acme");
    keyload__v1__inspect_queue_transfer_request__free_unpacked(ir, NULL);
    kl_q1_plan_free(&p);

    snprintf(s, sizeof s, "CALL keyload.queue-transfer.inspect-receipt.v1(destination_queue => 'dst', source_queue => 'src', transfer_id => '%s')", id);
    ck_assert_int_eq(plan(s, &p, &e), KL_OK);
    ck_assert_int_eq(p.op, KL_Q1_OP_TRANSFER_RECEIPT);
    ck_assert_str_eq(p.queue, "dst");
    kl_q1_plan_free(&p);
    /* a read takes no command id */
    snprintf(s, sizeof s, "CALL keyload.queue-transfer.inspect.v1(source_queue => 'src', transfer_id => '%s') WITH COMMAND_ID '%s'", id, id);
    ck_assert_int_eq(plan(s, &p, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "command_id");
}
END_TEST

START_TEST(q1_argument_errors_name_the_argument)
{
    kl_q1_plan p;
    kl_err e;
    ck_assert_int_eq(plan("CALL keyload.queue.purge.v1(queue => 'q')", &p, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "alias");
    ck_assert_ptr_nonnull(strstr(e.message, "unknown alias keyload.queue.purge.v1"));
    ck_assert_int_eq(plan("CALL keyload.queue.enqueue.v1(body => 'b')", &p, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "queue");
    ck_assert_int_eq(plan("CALL keyload.queue.enqueue.v1(queue => NULL)", &p, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "queue");
    ck_assert_int_eq(plan("CALL keyload.queue.enqueue.v1(queue => 5)", &p, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "queue");
    ck_assert_ptr_nonnull(strstr(e.message, "must be a string, not an integer"));
    ck_assert_int_eq(plan("CALL keyload.queue.enqueue.v1(queue => 'q', colour => 'red')", &p, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "colour");
    ck_assert_ptr_nonnull(strstr(e.message, "takes no argument colour"));
    ck_assert_int_eq(plan("CALL keyload.queue.enqueue.v1(queue => 'bad/name')", &p, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "queue");
    ck_assert_int_eq(plan("CALL keyload.queue.enqueue.v1(queue => 'q', body => 'a', body_base64 => 'AA==')", &p, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "body_base64");
    ck_assert_int_eq(plan("CALL keyload.queue.enqueue.v1(queue => 'q', headers => {\"h\": 1})", &p, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "headers");
    ck_assert_int_eq(plan("CALL keyload.queue.enqueue.v1(queue => 'q', headers => 'h=1')", &p, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "headers");
    ck_assert_int_eq(plan("CALL keyload.queue.enqueue.v1(queue => 'q', fields => {\"f\": [1]})", &p, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "fields");
    ck_assert_int_eq(plan("CALL keyload.queue.enqueue.v1(queue => 'q', fields => {\"f\": {\"type\": \"int\", \"value\": \"x\"}})", &p, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "fields");
    ck_assert_int_eq(plan("CALL keyload.queue.receive.v1(queue => 'q', max => -1)", &p, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "max");
    ck_assert_int_eq(plan("CALL keyload.queue.receive.v1(queue => 'q', max => TRUE)", &p, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "max");
    /* a token that is not base64 is refused by name, never quoted */
    ck_assert_int_eq(plan("CALL keyload.queue-transfer.accept.v1(destination_queue => 'd', intent_token => 'secret!!')", &p, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "intent_token");
    ck_assert_ptr_null(strstr(e.message, "secret"));
    ck_assert_int_eq(plan("CALL keyload.queue.ack.v1(queue => 'q', lease_tokens => ' , ')", &p, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "lease_tokens");
    ck_assert_int_eq(plan("CALL keyload.queue-transfer.inspect.v1(source_queue => 'q', transfer_id => '00000000-0000-0000-0000-000000000000')", &p, &e), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(e.detail, "transfer_id");
    /* every alias in the table is reachable by its name */
    for (size_t i = 0; kl_q1_alias_name(i) != NULL; i++) {
        char s[128];
        snprintf(s, sizeof s, "CALL %s()", kl_q1_alias_name(i));
        ck_assert_int_eq(plan(s, &p, &e), KL_INVALID_ARGUMENT);
        ck_assert_str_ne(e.detail, "alias");
    }
}
END_TEST

/* The SDK renders a QueryAnswer's native bytes with the native serializer: the row is
 * byte for byte what kl_receipt_to_json / kl_transfer_to_json print. */
START_TEST(q1_rows_use_the_canonical_serializer)
{
    uint8_t cmd[16] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 1, 2, 3, 4, 5, 6, 7};
    Keyload__V1__Enqueued enq = KEYLOAD__V1__ENQUEUED__INIT;
    enq.message_id = 42;
    enq.lane = "eu";
    Keyload__V1__MutationResult res = KEYLOAD__V1__MUTATION_RESULT__INIT;
    res.kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_ENQUEUED;
    res.enqueued = &enq;
    Keyload__V1__MutationResult *results[1] = {&res};
    Keyload__V1__BatchReceipt r = KEYLOAD__V1__BATCH_RECEIPT__INIT;
    r.command_id.data = cmd;
    r.command_id.len = 16;
    r.partition = 1;
    r.term = 2;
    r.index = 3;
    r.results = results;
    r.n_results = 1;
    uint8_t rbuf[256], qbuf[512];
    size_t rlen = keyload__v1__batch_receipt__pack(&r, rbuf);
    Keyload__V1__QueryAnswer qa = KEYLOAD__V1__QUERY_ANSWER__INIT;
    qa.alias = "keyload.queue.enqueue.v1";
    qa.kind = KEYLOAD__V1__QUERY_RESULT_KIND__QUERY_RESULT_BATCH_RECEIPT;
    qa.answer.data = rbuf;
    qa.answer.len = rlen;
    size_t qlen = keyload__v1__query_answer__pack(&qa, qbuf);
    char *rows = NULL;
    kl_err e;
    ck_assert_int_eq(kl_query_answer_rows(qbuf, qlen, &rows, &e), KL_OK);
    char *row = kl_receipt_to_json(&r, 0);
    char want[1024];
    snprintf(want, sizeof want, "[%s]", row);
    ck_assert_str_eq(rows, want);
    ck_assert_ptr_nonnull(strstr(rows, "\"message_id\":42"));
    free(row);
    free(rows);
    /* an answer of no known kind, or whose native bytes do not decode, is INTERNAL */
    qa.kind = 77;
    qlen = keyload__v1__query_answer__pack(&qa, qbuf);
    ck_assert_int_eq(kl_query_answer_rows(qbuf, qlen, &rows, &e), KL_INTERNAL);
    ck_assert_ptr_null(rows);
    qa.kind = KEYLOAD__V1__QUERY_RESULT_KIND__QUERY_RESULT_INSPECT_TRANSFER;
    qa.answer.data = (uint8_t *)"\xff\xff\xff";
    qa.answer.len = 3;
    qlen = keyload__v1__query_answer__pack(&qa, qbuf);
    ck_assert_int_eq(kl_query_answer_rows(qbuf, qlen, &rows, &e), KL_INTERNAL);
}
END_TEST

Suite *suite_q1(void)
{
    Suite *s = suite_create("q1");
    TCase *t = tcase_create("parse");
    tcase_add_test(t, q1_every_literal_kind);
    tcase_add_test(t, q1_keywords_case_and_command_id);
    tcase_add_test(t, q1_syntax_errors_name_position_not_values);
    tcase_add_test(t, q1_duplicates_and_limits);
    suite_add_tcase(s, t);
    t = tcase_create("plan");
    tcase_add_test(t, q1_enqueue_maps_to_native_batch);
    tcase_add_test(t, q1_receive_ack_and_transfers_map);
    tcase_add_test(t, q1_argument_errors_name_the_argument);
    tcase_add_test(t, q1_rows_use_the_canonical_serializer);
    suite_add_tcase(s, t);
    return s;
}
