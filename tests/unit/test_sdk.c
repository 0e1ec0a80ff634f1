/* SDK unit tests (client/keyload.h): the batch builder and its validation, field and
 * header parsing, encoding, base64, UTF-8 checks and the canonical public JSON. No
 * network: the only client test fails before anything is dialed. Runs under ASan+UBSan
 * with leak detection, so every test frees what it builds. */
#include "client/keyload.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#define GUID_A "0f8fad5b-d9cb-469f-a165-70867728950e"

/* ------------------------------------------------------------ command ids */

START_TEST(test_batch_new_time_ordered)
{
    kl_batch *a, *b;
    ck_assert_int_eq(kl_batch_new(NULL, &a, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_new(NULL, &b, NULL), KL_OK);
    ck_assert_uint_eq(strlen(kl_batch_command_id(a)), 36);
    ck_assert_str_ne(kl_batch_command_id(a), kl_batch_command_id(b));
    ck_assert_int_eq(kl_batch_command_id(a)[14], '7'); /* version 7: time-ordered */
    /* b was made no earlier than a: its 48-bit millisecond (the first 12 hex digits,
     * hyphen at 8) is not smaller. */
    ck_assert_int_le(strncmp(kl_batch_command_id(a), kl_batch_command_id(b), 13), 0);
    char tid[KL_COMMAND_ID_TEXT_LEN + 1];
    kl_command_id_new(tid);
    ck_assert_int_eq(tid[14], '7');
    ck_assert_int_le(strncmp(kl_batch_command_id(b), tid, 13), 0);
    ck_assert_uint_eq(kl_batch_count(a), 0);
    kl_batch_free(a);
    kl_batch_free(b);
}
END_TEST

/* The first-sent setter refuses what the daemon refuses as malformed (node_retain.h). */
START_TEST(test_batch_first_sent_bounds)
{
    kl_batch *b;
    kl_err err;
    ck_assert_int_eq(kl_batch_new(NULL, &b, NULL), KL_OK);
    ck_assert_int_gt(kl_batch_first_sent_unix_ms(b), 0);
    ck_assert_int_eq(kl_batch_set_first_sent_unix_ms(b, 0, &err), KL_OK);
    ck_assert_int_eq(kl_batch_set_first_sent_unix_ms(b, KL_FIRST_SENT_LATEST_MS, &err), KL_OK);
    ck_assert_int_eq(kl_batch_first_sent_unix_ms(b), KL_FIRST_SENT_LATEST_MS);
    ck_assert_int_eq(kl_batch_set_first_sent_unix_ms(b, KL_FIRST_SENT_LATEST_MS + 1, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "first_sent_unix_ms");
    ck_assert_int_eq(kl_batch_set_first_sent_unix_ms(b, -1, &err), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_batch_first_sent_unix_ms(b), KL_FIRST_SENT_LATEST_MS); /* refusals change nothing */
    kl_batch_free(b);
}
END_TEST

START_TEST(test_batch_new_given_guid)
{
    kl_batch *b;
    ck_assert_int_eq(kl_batch_new("0F8FAD5B-D9CB-469F-A165-70867728950E", &b, NULL), KL_OK);
    ck_assert_str_eq(kl_batch_command_id(b), GUID_A); /* canonical lower case */
    ck_assert_int_eq(kl_batch_command_id_bytes(b)[0], 0x0f);
    ck_assert_int_eq(kl_batch_command_id_bytes(b)[15], 0x0e);
    kl_batch_free(b);
}
END_TEST

START_TEST(test_batch_new_refuses_bad_guids)
{
    static const char *const bad[] = {
        "",
        "not-a-guid",
        "0f8fad5bd9cb469fa16570867728950e",          /* no hyphens */
        "0f8fad5b-d9cb-469f-a165-70867728950",       /* short */
        "0f8fad5b-d9cb-469f-a165-70867728950e0",     /* long */
        "0f8fad5b-d9cb-469f-a165-70867728950g",      /* not hex */
        "{0f8fad5b-d9cb-469f-a165-70867728950e}",    /* braces */
        " 0f8fad5b-d9cb-469f-a165-70867728950e",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kl_batch *b = (kl_batch *)1;
        kl_err err;
        ck_assert_int_eq(kl_batch_new(bad[i], &b, &err), KL_INVALID_ARGUMENT);
        ck_assert_ptr_null(b);
        ck_assert_str_eq(err.detail, "command_id");
        ck_assert_ptr_nonnull(strstr(err.message, "command_id"));
    }
}
END_TEST

START_TEST(test_batch_new_refuses_zero_guid)
{
    kl_batch *b;
    kl_err err;
    ck_assert_int_eq(kl_batch_new("00000000-0000-0000-0000-000000000000", &b, &err),
                     KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "command_id");
    ck_assert_ptr_nonnull(strstr(err.message, "all zero"));
}
END_TEST

/* ------------------------------------------------------------ names */

START_TEST(test_names_validated)
{
    kl_batch *b;
    kl_err err;
    ck_assert_int_eq(kl_batch_new(GUID_A, &b, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_delete_queue(b, "", &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "queue");
    ck_assert_ptr_nonnull(strstr(err.message, "queue must not be empty"));
    ck_assert_int_eq(kl_batch_delete_queue(b, NULL, &err), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_batch_create_queue(b, "", NULL, &err), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_batch_receive(b, "", "x", 1, 0, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "queue");

    char name[200];
    memset(name, 'q', sizeof name);
    name[129] = '\0';
    ck_assert_int_eq(kl_batch_delete_queue(b, name, &err), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.message, "129 bytes"));
    ck_assert_int_eq(kl_batch_receive(b, "orders", name, 1, 0, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "lane");
    name[128] = '\0';
    ck_assert_int_eq(kl_batch_delete_queue(b, name, &err), KL_OK);

    ck_assert_int_eq(kl_batch_delete_queue(b, "a/b", &err), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_batch_delete_queue(b, "a b", &err), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_batch_delete_queue(b, "\xff", &err), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_batch_delete_queue(b, "Orders.v1_x-y:z", &err), KL_OK);
    ck_assert_int_eq(kl_batch_receive(b, "orders", NULL, 1, 0, &err), KL_OK); /* default */
    ck_assert_int_eq(kl_batch_receive(b, "orders", "", 1, 0, &err), KL_OK);
    ck_assert_uint_eq(kl_batch_count(b), 4); /* failures left the batch unchanged */
    kl_batch_free(b);
}
END_TEST

START_TEST(test_create_queue_options_validated)
{
    kl_batch *b;
    kl_err err;
    ck_assert_int_eq(kl_batch_new(GUID_A, &b, NULL), KL_OK);
    kl_queue_options o = {.dead_letter_queue = "orders"};
    ck_assert_int_eq(kl_batch_create_queue(b, "orders", &o, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "dead_letter_queue");
    o.dead_letter_queue = "bad name";
    ck_assert_int_eq(kl_batch_create_queue(b, "orders", &o, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "dead_letter_queue");
    o.dead_letter_queue = NULL;
    o.pin_partition = true;
    o.partition = -1;
    ck_assert_int_eq(kl_batch_create_queue(b, "orders", &o, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "partition");
    ck_assert_uint_eq(kl_batch_count(b), 0);
    kl_batch_free(b);
}
END_TEST

START_TEST(test_ack_release_tokens_validated)
{
    kl_batch *b;
    kl_err err;
    ck_assert_int_eq(kl_batch_new(GUID_A, &b, NULL), KL_OK);
    static const uint8_t tok[16] = {1};
    kl_bytes t[2] = {{tok, sizeof tok}, {tok, 0}};
    ck_assert_int_eq(kl_batch_ack(b, "orders", t, 0, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "lease_tokens");
    ck_assert_int_eq(kl_batch_release(b, "orders", t, 2, &err), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.message, "lease token 2 is empty"));
    ck_assert_int_eq(kl_batch_ack(b, "orders", t, 1, &err), KL_OK);
    ck_assert_int_eq(kl_batch_release(b, "orders", t, 1, &err), KL_OK);
    ck_assert_uint_eq(kl_batch_count(b), 2);
    kl_batch_free(b);
}
END_TEST

/* ------------------------------------------------------------ messages and fields */

static const Keyload__V1__Field *field_at(const kl_message *m, size_t i)
{
    ck_assert_uint_gt(kl_message_view(m)->n_fields, i);
    return kl_message_view(m)->fields[i];
}

START_TEST(test_field_parsing_types)
{
    kl_message *m;
    kl_err err;
    ck_assert_int_eq(kl_message_new("x", 1, &m, NULL), KL_OK);
    ck_assert_int_eq(kl_message_parse_field(m, "k=v", &err), KL_OK);
    ck_assert_int_eq(kl_message_parse_field(m, "n:int=5", &err), KL_OK);
    ck_assert_int_eq(kl_message_parse_field(m, "neg:int=-9223372036854775808", &err), KL_OK);
    ck_assert_int_eq(kl_message_parse_field(m, "d:double=1.5", &err), KL_OK);
    ck_assert_int_eq(kl_message_parse_field(m, "t:bool=true", &err), KL_OK);
    ck_assert_int_eq(kl_message_parse_field(m, "f:bool=false", &err), KL_OK);
    ck_assert_int_eq(kl_message_parse_field(m, "s:string=a=b", &err), KL_OK);
    ck_assert_int_eq(kl_message_parse_field(m, "url=http://h:80/x", &err), KL_OK);
    ck_assert_int_eq(kl_message_parse_field(m, "a:b:int=7", &err), KL_OK);
    ck_assert_int_eq(kl_message_parse_field(m, "raw:bytes=/w==", &err), KL_OK);
    ck_assert_int_eq(kl_message_parse_field(m, "empty=", &err), KL_OK);

    const Keyload__V1__Field *f = field_at(m, 0);
    ck_assert_str_eq(f->key, "k");
    ck_assert_int_eq(f->value->kind_case, KEYLOAD__V1__FIELD_VALUE__KIND_STRING_VALUE);
    ck_assert_str_eq(f->value->string_value, "v");
    f = field_at(m, 1);
    ck_assert_str_eq(f->key, "n");
    ck_assert_int_eq(f->value->kind_case, KEYLOAD__V1__FIELD_VALUE__KIND_INT_VALUE);
    ck_assert_int_eq(f->value->int_value, 5);
    ck_assert(field_at(m, 2)->value->int_value == INT64_MIN);
    f = field_at(m, 3);
    ck_assert_int_eq(f->value->kind_case, KEYLOAD__V1__FIELD_VALUE__KIND_DOUBLE_VALUE);
    ck_assert(f->value->double_value == 1.5);
    f = field_at(m, 4);
    ck_assert_int_eq(f->value->kind_case, KEYLOAD__V1__FIELD_VALUE__KIND_BOOL_VALUE);
    ck_assert(f->value->bool_value);
    ck_assert(!field_at(m, 5)->value->bool_value);
    ck_assert_str_eq(field_at(m, 6)->value->string_value, "a=b");
    ck_assert_str_eq(field_at(m, 7)->key, "url");
    ck_assert_str_eq(field_at(m, 7)->value->string_value, "http://h:80/x");
    ck_assert_str_eq(field_at(m, 8)->key, "a:b");
    ck_assert_int_eq(field_at(m, 8)->value->int_value, 7);
    f = field_at(m, 9);
    ck_assert_int_eq(f->value->kind_case, KEYLOAD__V1__FIELD_VALUE__KIND_BYTES_VALUE);
    ck_assert_uint_eq(f->value->bytes_value.len, 1);
    ck_assert_int_eq(f->value->bytes_value.data[0], 0xff);
    ck_assert_str_eq(field_at(m, 10)->value->string_value, "");
    ck_assert_uint_eq(kl_message_view(m)->n_fields, 11);
    kl_message_free(m);
}
END_TEST

START_TEST(test_field_parsing_refusals)
{
    static const struct {
        const char *spec, *detail;
    } bad[] = {
        {"novalue", "field"},
        {"=v", "field key"},
        {":int=5", "field key"},
        {"n:int=", "field value"},
        {"n:int=5x", "field value"},
        {"n:int= 5", "field value"},
        {"n:int=+5", "field value"},
        {"n:int=9223372036854775808", "field value"},
        {"d:double=abc", "field value"},
        {"d:double=nan", "field value"},
        {"d:double=inf", "field value"},
        {"d:double=1e999", "field value"},
        {"b:bool=yes", "field value"},
        {"b:bool=TRUE", "field value"},
        {"x:bytes=not base64", "field value"},
        {"n:integer=5", "field type"},
        {"s:string=\xff", "field value"},
    };
    kl_message *m;
    ck_assert_int_eq(kl_message_new(NULL, 0, &m, NULL), KL_OK);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kl_err err;
        kl_err_clear(&err);
        ck_assert_msg(kl_message_parse_field(m, bad[i].spec, &err) == KL_INVALID_ARGUMENT,
                      "accepted %s", bad[i].spec);
        ck_assert_msg(strcmp(err.detail, bad[i].detail) == 0, "%s: detail %s, want %s",
                      bad[i].spec, err.detail, bad[i].detail);
    }
    ck_assert_uint_eq(kl_message_view(m)->n_fields, 0);
    /* Duplicates, and keys over the limit. */
    kl_err err;
    ck_assert_int_eq(kl_message_parse_field(m, "k:int=1", &err), KL_OK);
    ck_assert_int_eq(kl_message_parse_field(m, "k=other", &err), KL_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.message, "given twice"));
    char spec[160];
    memset(spec, 'k', 129);
    strcpy(spec + 129, "=v");
    ck_assert_int_eq(kl_message_parse_field(m, spec, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "field key");
    ck_assert_int_eq(kl_message_add_field_double(m, "inf", 1.0 / 0.0, &err), KL_INVALID_ARGUMENT);
    kl_message_free(m);
}
END_TEST

START_TEST(test_header_parsing)
{
    kl_message *m;
    kl_err err;
    ck_assert_int_eq(kl_message_new("b", 1, &m, NULL), KL_OK);
    ck_assert_int_eq(kl_message_parse_header(m, "k=v=w", &err), KL_OK);
    ck_assert_int_eq(kl_message_parse_header(m, "empty=", &err), KL_OK);
    ck_assert_int_eq(kl_message_parse_header(m, "k=again", &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "header key");
    ck_assert_int_eq(kl_message_parse_header(m, "novalue", &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "header");
    ck_assert_int_eq(kl_message_parse_header(m, "=v", &err), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_message_parse_header(m, "x=\xc0\xaf", &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "header value");
    const Keyload__V1__EnqueueMessage *v = kl_message_view(m);
    ck_assert_uint_eq(v->n_headers, 2);
    ck_assert_str_eq(v->headers[0]->key, "k");
    ck_assert_str_eq(v->headers[0]->value, "v=w");
    ck_assert_str_eq(v->headers[1]->value, "");
    ck_assert_int_eq(kl_message_set_delay(m, -1, &err), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_message_set_expiry(m, -5, &err), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_message_set_delay(m, 100, &err), KL_OK);
    kl_message_free(m);
}
END_TEST

/* ------------------------------------------------------------ encoding */

static kl_batch *full_batch(void)
{
    kl_batch *b;
    ck_assert_int_eq(kl_batch_new(GUID_A, &b, NULL), KL_OK);
    kl_queue_options o = {.max_messages = 10, .max_deliveries = 3, .dead_letter_queue = "dlq"};
    ck_assert_int_eq(kl_batch_create_queue(b, "orders", &o, NULL), KL_OK);
    kl_message *m;
    ck_assert_int_eq(kl_message_new("hello", 5, &m, NULL), KL_OK);
    ck_assert_int_eq(kl_message_parse_header(m, "h=1", NULL), KL_OK);
    ck_assert_int_eq(kl_message_parse_field(m, "n:int=5", NULL), KL_OK);
    ck_assert_int_eq(kl_batch_enqueue(b, "orders", "fast", m, NULL), KL_OK);
    kl_message_free(m); /* the batch holds its own copy */
    ck_assert_int_eq(kl_batch_receive(b, "orders", NULL, 10, 30000, NULL), KL_OK);
    static const uint8_t tok[16] = {9, 9, 9};
    kl_bytes t = {tok, sizeof tok};
    ck_assert_int_eq(kl_batch_ack(b, "orders", &t, 1, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_release(b, "orders", &t, 1, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_delete_queue(b, "dlq", NULL), KL_OK);
    return b;
}

static void assert_ref(const Keyload__V1__QueueLaneRef *r, const char *queue, const char *lane)
{
    ck_assert_ptr_nonnull(r);
    ck_assert_str_eq(r->tenant, "acme");
    ck_assert_str_eq(r->database, "shop");
    ck_assert_str_eq(r->queue, queue);
    ck_assert_str_eq(r->lane, lane);
}

START_TEST(test_encode_stamps_database)
{
    kl_batch *b = full_batch();
    uint8_t *buf, *buf2;
    size_t len, len2;
    ck_assert_int_eq(kl_batch_encode(b, "acme/shop", &buf, &len, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_encode(b, "acme/shop", &buf2, &len2, NULL), KL_OK);
    ck_assert_uint_eq(len, len2); /* same batch, same bytes: replays stay identical */
    ck_assert_int_eq(memcmp(buf, buf2, len), 0);
    free(buf2);

    Keyload__V1__BatchRequest *req = keyload__v1__batch_request__unpack(NULL, len, buf);
    ck_assert_ptr_nonnull(req);
    ck_assert_uint_eq(req->command_id.len, 16);
    ck_assert_int_eq(memcmp(req->command_id.data, kl_batch_command_id_bytes(b), 16), 0);
    ck_assert_uint_eq(req->n_mutations, 6);
    Keyload__V1__Mutation **m = req->mutations;
    ck_assert_int_eq(m[0]->kind_case, KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE);
    assert_ref(m[0]->create_queue->queue, "orders", "");
    ck_assert_ptr_nonnull(m[0]->create_queue->limits);
    ck_assert_uint_eq(m[0]->create_queue->limits->max_messages, 10);
    ck_assert_uint_eq(m[0]->create_queue->limits->max_deliveries, 3);
    ck_assert_str_eq(m[0]->create_queue->limits->dead_letter_queue, "dlq");
    ck_assert_int_eq(m[1]->kind_case, KEYLOAD__V1__MUTATION__KIND_ENQUEUE);
    assert_ref(m[1]->enqueue->lane, "orders", "fast");
    ck_assert_uint_eq(m[1]->enqueue->message->body.len, 5);
    ck_assert_int_eq(memcmp(m[1]->enqueue->message->body.data, "hello", 5), 0);
    ck_assert_uint_eq(m[1]->enqueue->message->n_headers, 1);
    ck_assert_uint_eq(m[1]->enqueue->message->n_fields, 1);
    ck_assert_int_eq(m[2]->kind_case, KEYLOAD__V1__MUTATION__KIND_RECEIVE);
    assert_ref(m[2]->receive->lane, "orders", "");
    ck_assert_uint_eq(m[2]->receive->max_messages, 10);
    ck_assert_uint_eq(m[2]->receive->lease_ms, 30000);
    ck_assert_int_eq(m[3]->kind_case, KEYLOAD__V1__MUTATION__KIND_ACK);
    assert_ref(m[3]->ack->queue, "orders", "");
    ck_assert_uint_eq(m[3]->ack->n_lease_tokens, 1);
    ck_assert_uint_eq(m[3]->ack->lease_tokens[0].len, 16);
    ck_assert_int_eq(m[4]->kind_case, KEYLOAD__V1__MUTATION__KIND_RELEASE);
    assert_ref(m[4]->release->queue, "orders", "");
    ck_assert_int_eq(m[5]->kind_case, KEYLOAD__V1__MUTATION__KIND_DELETE_QUEUE);
    assert_ref(m[5]->delete_queue->queue, "dlq", "");
    keyload__v1__batch_request__free_unpacked(req, NULL);
    free(buf);

    /* Another database encodes other refs; the batch itself is unchanged. */
    ck_assert_int_eq(kl_batch_encode(b, "t/d", &buf, &len, NULL), KL_OK);
    req = keyload__v1__batch_request__unpack(NULL, len, buf);
    ck_assert_str_eq(req->mutations[0]->create_queue->queue->tenant, "t");
    keyload__v1__batch_request__free_unpacked(req, NULL);
    free(buf);
    kl_batch_free(b);
}
END_TEST

START_TEST(test_encode_refusals)
{
    kl_batch *b;
    kl_err err;
    uint8_t *buf = (uint8_t *)1;
    size_t len;
    ck_assert_int_eq(kl_batch_new(NULL, &b, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_encode(b, "a/b", &buf, &len, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "mutations");
    ck_assert_ptr_null(buf);
    ck_assert_int_eq(kl_batch_delete_queue(b, "q", NULL), KL_OK);
    static const char *const bad_db[] = {"nodb", "/db", "t/", "a/b/c", "t t/d", ""};
    for (size_t i = 0; i < sizeof bad_db / sizeof bad_db[0]; i++)
        ck_assert_msg(kl_batch_encode(b, bad_db[i], &buf, &len, &err) == KL_INVALID_ARGUMENT,
                      "accepted database %s", bad_db[i]);
    ck_assert_int_eq(kl_batch_encode(b, NULL, &buf, &len, &err), KL_OK); /* default/default */
    free(buf);
    kl_batch_free(b);
}
END_TEST

START_TEST(test_batch_partition)
{
    kl_batch *b;
    kl_batch_route r;
    kl_err err;
    kl_message *m;
    ck_assert_int_eq(kl_message_new("x", 1, &m, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_new(NULL, &b, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_enqueue(b, "a", NULL, m, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_enqueue(b, "b", "l1", m, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_kind(b, &r, NULL), KL_OK);
    ck_assert_int_eq(r, KL_ROUTE_QUEUE);
    /* A catalog change or a deletion never shares its batch. */
    kl_queue_options o = {.pin_partition = true, .partition = 2};
    ck_assert_int_eq(kl_batch_create_queue(b, "c", &o, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_kind(b, &r, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "mutations");
    kl_batch_free(b);
    ck_assert_int_eq(kl_batch_new(NULL, &b, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_create_database(b, "t/d", NULL, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_kind(b, &r, NULL), KL_OK);
    ck_assert_int_eq(r, KL_ROUTE_CATALOG);
    kl_batch_free(b);
    ck_assert_int_eq(kl_batch_new(NULL, &b, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_delete_queue(b, "a", NULL), KL_OK);
    ck_assert_int_eq(kl_batch_kind(b, &r, NULL), KL_OK);
    ck_assert_int_eq(r, KL_ROUTE_DELETE_QUEUE);
    ck_assert_int_eq(kl_batch_create_database(b, "bad", NULL, &err), KL_INVALID_ARGUMENT);
    kl_batch_free(b);
    kl_message_free(m);
}
END_TEST

START_TEST(test_client_refuses_before_network)
{
    kl_client *c;
    kl_err err;
    ck_assert_int_eq(kl_client_open("deploy/local-1.json", "no-slash", 1000, &c, &err),
                     KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "database");
    ck_assert_int_eq(kl_client_open("/nonexistent/cluster.json", NULL, 1000, &c, &err) != KL_OK,
                     1);
    ck_assert_int_eq(kl_client_open("deploy/local-1.json", NULL, 0, &c, &err), KL_OK);
    ck_assert_str_eq(kl_client_database(c), "default/default");
    kl_batch *b;
    kl_receipt *r = (kl_receipt *)1;
    ck_assert_int_eq(kl_batch_new(NULL, &b, NULL), KL_OK);
    ck_assert_int_eq(kl_client_batch(c, b, &r, &err), KL_INVALID_ARGUMENT); /* empty */
    ck_assert_ptr_null(r);
    /* Over MaxBatchBytes (1 MiB in deploy/local-1.json): refused before sending. */
    size_t big = (1u << 20) + 1;
    char *body = calloc(1, big);
    kl_message *m;
    ck_assert_int_eq(kl_message_new(body, big, &m, NULL), KL_OK);
    ck_assert_int_eq(kl_batch_enqueue(b, "q", NULL, m, NULL), KL_OK);
    ck_assert_int_eq(kl_client_batch(c, b, &r, &err), KL_RESOURCE_EXHAUSTED);
    ck_assert_str_eq(err.detail, "limit:MaxBatchBytes");
    Keyload__V1__QueueStatsAnswer *s;
    ck_assert_int_eq(kl_client_queue_stats(c, "", &s, &err), KL_INVALID_ARGUMENT);
    kl_message_free(m);
    free(body);
    kl_batch_free(b);
    kl_client_close(c);
}
END_TEST

/* ------------------------------------------------------------ base64 and UTF-8 */

START_TEST(test_base64)
{
    char *s = kl_base64_encode((const uint8_t *)"\xde\xad\xbe\xef", 4);
    ck_assert_str_eq(s, "3q2+7w==");
    free(s);
    s = kl_base64_encode(NULL, 0);
    ck_assert_str_eq(s, "");
    free(s);
    uint8_t *out;
    size_t len;
    kl_err err;
    ck_assert_int_eq(kl_base64_decode("token", "3q2+7w==", &out, &len, &err), KL_OK);
    ck_assert_uint_eq(len, 4);
    ck_assert_int_eq(memcmp(out, "\xde\xad\xbe\xef", 4), 0);
    free(out);
    ck_assert_int_eq(kl_base64_decode("token", "", &out, &len, &err), KL_OK);
    ck_assert_uint_eq(len, 0);
    free(out);
    static const char *const bad[] = {"3q2+7w", "3q2-7w==", "3q2+7w=", "AAB=", "A", "3q2+ 7w=="};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(kl_base64_decode("lease token 3", bad[i], &out, &len, &err) ==
                          KL_INVALID_ARGUMENT,
                      "accepted %s", bad[i]);
        ck_assert_ptr_null(out);
        ck_assert_ptr_nonnull(strstr(err.message, "lease token 3"));
        ck_assert_ptr_null(strstr(err.message, bad[i])); /* never echoes the token */
    }
}
END_TEST

START_TEST(test_utf8)
{
#define U(s) kl_sdk_utf8_valid((const uint8_t *)(s), sizeof(s) - 1)
    ck_assert(U(""));
    ck_assert(U("plain"));
    ck_assert(U("h\xc3\xa9llo"));         /* é */
    ck_assert(U("\xe2\x82\xac"));         /* € */
    ck_assert(U("\xf0\x9f\x98\x80"));     /* 😀 */
    ck_assert(U("a\0b"));                 /* NUL is a valid code point */
    ck_assert(!U("\xff"));
    ck_assert(!U("\xc0\xaf"));            /* overlong '/' */
    ck_assert(!U("\xe0\x80\xaf"));        /* overlong */
    ck_assert(!U("\xed\xa0\x80"));        /* surrogate */
    ck_assert(!U("\xf4\x90\x80\x80"));    /* > U+10FFFF */
    ck_assert(!U("\xc3"));                /* truncated */
    ck_assert(!U("\xe2\x82"));
    ck_assert(!U("\x80"));                /* lone continuation */
#undef U
}
END_TEST

/* ------------------------------------------------------------ JSON */

/* A receipt with every kind of result, built by hand. */
typedef struct sample {
    Keyload__V1__BatchReceipt r;
    Keyload__V1__MutationResult res[6], *resp[6];
    Keyload__V1__QueueCreated qc;
    Keyload__V1__QueueDeleted qd;
    Keyload__V1__Enqueued enq;
    Keyload__V1__Received rcv;
    Keyload__V1__Acked ack;
    Keyload__V1__Released rel;
    Keyload__V1__ReceivedMessage rm[2], *rmp[2];
    Keyload__V1__EnqueueMessage em[2];
    Keyload__V1__Header h[2], *hp[2];
    Keyload__V1__Field f[5], *fp[5];
    Keyload__V1__FieldValue fv[5];
    uint8_t id[16], digest[4], lease[2][16], raw[1], bin[2];
} sample;

static void build_sample(sample *s)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < 16; i++) {
        s->id[i] = (uint8_t)(i + 1);
        s->lease[0][i] = (uint8_t)i;
        s->lease[1][i] = 0xff;
    }
    memcpy(s->digest, "\xde\xad\xbe\xef", 4);
    s->raw[0] = 0xff;
    memcpy(s->bin, "\xff\xfe", 2);

    keyload__v1__batch_receipt__init(&s->r);
    s->r.command_id = (ProtobufCBinaryData){16, s->id};
    s->r.partition = 0;
    s->r.term = 2;
    s->r.index = 7;
    s->r.committed_unix_ms = 1700000000000;
    s->r.request_digest = (ProtobufCBinaryData){4, s->digest};

    keyload__v1__header__init(&s->h[0]);
    s->h[0].key = "b";
    s->h[0].value = "2";
    keyload__v1__header__init(&s->h[1]);
    s->h[1].key = "a";
    s->h[1].value = "1 \"quoted\"";
    s->hp[0] = &s->h[0];
    s->hp[1] = &s->h[1];

    static const char *const keys[5] = {"z", "d", "s", "t", "y"};
    for (int i = 0; i < 5; i++) {
        keyload__v1__field_value__init(&s->fv[i]);
        keyload__v1__field__init(&s->f[i]);
        s->f[i].key = (char *)keys[i];
        s->f[i].value = &s->fv[i];
        s->fp[i] = &s->f[i];
    }
    s->fv[0].kind_case = KEYLOAD__V1__FIELD_VALUE__KIND_INT_VALUE;
    s->fv[0].int_value = -5;
    s->fv[1].kind_case = KEYLOAD__V1__FIELD_VALUE__KIND_DOUBLE_VALUE;
    s->fv[1].double_value = 1.5;
    s->fv[2].kind_case = KEYLOAD__V1__FIELD_VALUE__KIND_STRING_VALUE;
    s->fv[2].string_value = "x";
    s->fv[3].kind_case = KEYLOAD__V1__FIELD_VALUE__KIND_BOOL_VALUE;
    s->fv[3].bool_value = 1;
    s->fv[4].kind_case = KEYLOAD__V1__FIELD_VALUE__KIND_BYTES_VALUE;
    s->fv[4].bytes_value = (ProtobufCBinaryData){1, s->raw};

    keyload__v1__enqueue_message__init(&s->em[0]);
    s->em[0].body = (ProtobufCBinaryData){6, (uint8_t *)"h\xc3\xa9llo"};
    s->em[0].n_headers = 2;
    s->em[0].headers = s->hp;
    s->em[0].n_fields = 5;
    s->em[0].fields = s->fp;
    keyload__v1__enqueue_message__init(&s->em[1]);
    s->em[1].body = (ProtobufCBinaryData){2, s->bin};
    s->em[1].delay_ms = 10;
    s->em[1].expires_at_unix_ms = 1800000000000;

    for (int i = 0; i < 2; i++) {
        keyload__v1__received_message__init(&s->rm[i]);
        s->rm[i].message_id = 12 + (uint64_t)i;
        s->rm[i].lane = "default";
        s->rm[i].lease_token = (ProtobufCBinaryData){16, s->lease[i]};
        s->rm[i].delivery_count = 1 + (uint32_t)i;
        s->rm[i].message = &s->em[i];
        s->rm[i].lease_expires_unix_ms = 1700000030000;
        s->rm[i].enqueued_unix_ms = 1699999999000;
        s->rmp[i] = &s->rm[i];
    }
    s->rm[1].message_id = UINT64_MAX; /* beyond JSON's safe integers: a string */

    keyload__v1__queue_created__init(&s->qc);
    s->qc.queue_id = 3;
    keyload__v1__queue_deleted__init(&s->qd);
    s->qd.queue_id = 3;
    keyload__v1__enqueued__init(&s->enq);
    s->enq.message_id = 12;
    s->enq.lane = "default";
    keyload__v1__received__init(&s->rcv);
    s->rcv.n_messages = 2;
    s->rcv.messages = s->rmp;
    keyload__v1__acked__init(&s->ack);
    s->ack.count = 2;
    keyload__v1__released__init(&s->rel);
    s->rel.count = 1;

    for (int i = 0; i < 6; i++) {
        keyload__v1__mutation_result__init(&s->res[i]);
        s->resp[i] = &s->res[i];
    }
    s->res[0].kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_QUEUE_CREATED;
    s->res[0].queue_created = &s->qc;
    s->res[1].kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_ENQUEUED;
    s->res[1].enqueued = &s->enq;
    s->res[2].kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_RECEIVED;
    s->res[2].received = &s->rcv;
    s->res[3].kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_ACKED;
    s->res[3].acked = &s->ack;
    s->res[4].kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_RELEASED;
    s->res[4].released = &s->rel;
    s->res[5].kind_case = KEYLOAD__V1__MUTATION_RESULT__KIND_QUEUE_DELETED;
    s->res[5].queue_deleted = &s->qd;
    s->r.n_results = 6;
    s->r.results = s->resp;
}

static const char SAMPLE_JSON[] =
    "{\"command_id\":\"01020304-0506-0708-090a-0b0c0d0e0f10\",\"partition\":0,\"term\":2,"
    "\"index\":7,\"committed_unix_ms\":1700000000000,\"request_digest\":\"3q2+7w==\","
    "\"results\":["
    "{\"kind\":\"queue_created\",\"queue_id\":3,\"partition\":0},"
    "{\"kind\":\"enqueued\",\"message_id\":12,\"lane\":\"default\"},"
    "{\"kind\":\"received\",\"messages\":["
    "{\"message_id\":12,\"lane\":\"default\",\"delivery_count\":1,"
    "\"lease_token\":\"AAECAwQFBgcICQoLDA0ODw==\",\"lease_expires_unix_ms\":1700000030000,"
    "\"enqueued_unix_ms\":1699999999000,\"expires_at_unix_ms\":0,\"delay_ms\":0,"
    "\"headers\":{\"a\":\"1 \\\"quoted\\\"\",\"b\":\"2\"},"
    "\"fields\":{\"d\":{\"type\":\"double\",\"value\":1.5},"
    "\"s\":{\"type\":\"string\",\"value\":\"x\"},"
    "\"t\":{\"type\":\"bool\",\"value\":true},"
    "\"y\":{\"type\":\"bytes\",\"value\":\"/w==\"},"
    "\"z\":{\"type\":\"int\",\"value\":-5}},"
    "\"body\":\"aMOpbGxv\",\"body_utf8\":\"h\xc3\xa9llo\"},"
    "{\"message_id\":\"18446744073709551615\",\"lane\":\"default\",\"delivery_count\":2,"
    "\"lease_token\":\"/////////////////////w==\",\"lease_expires_unix_ms\":1700000030000,"
    "\"enqueued_unix_ms\":1699999999000,\"expires_at_unix_ms\":1800000000000,"
    "\"delay_ms\":10,\"headers\":{},\"fields\":{},\"body\":\"//4=\"}]},"
    "{\"kind\":\"acked\",\"count\":2},"
    "{\"kind\":\"released\",\"count\":1},"
    "{\"kind\":\"queue_deleted\",\"queue_id\":3}]}";

START_TEST(test_json_receipt_exact)
{
    sample *s = malloc(sizeof *s);
    build_sample(s);
    char *json = kl_receipt_to_json(&s->r, 0);
    ck_assert_ptr_nonnull(json);
    ck_assert_str_eq(json, SAMPLE_JSON);
    free(json);
    free(s);
}
END_TEST

START_TEST(test_json_receipt_roundtrip)
{
    /* Pack the sample, decode it as a client would, and print it again: same text. */
    sample *s = malloc(sizeof *s);
    build_sample(s);
    size_t len = keyload__v1__batch_receipt__get_packed_size(&s->r);
    uint8_t *buf = malloc(len);
    keyload__v1__batch_receipt__pack(&s->r, buf);
    kl_receipt *r;
    ck_assert_int_eq(kl_receipt_decode(buf, len, &r, NULL), KL_OK);
    ck_assert_uint_eq(r->len, len);
    ck_assert_int_eq(memcmp(r->bytes, buf, len), 0);
    char *json = kl_receipt_to_json(r->decoded, 0);
    ck_assert_str_eq(json, SAMPLE_JSON);
    free(json);
    /* Pretty printing changes only white space. */
    json = kl_receipt_to_json(r->decoded, KL_JSON_PRETTY);
    ck_assert_ptr_nonnull(strchr(json, '\n'));
    free(json);
    kl_receipt_free(r);
    kl_err err;
    ck_assert_int_eq(kl_receipt_decode((const uint8_t *)"\xff\xff", 2, &r, &err), KL_INTERNAL);
    ck_assert_ptr_null(r);
    free(buf);
    free(s);
}
END_TEST

START_TEST(test_json_body_utf8_only_when_valid)
{
    sample *s = malloc(sizeof *s);
    build_sample(s);
    s->rcv.n_messages = 1;
    s->r.n_results = 3;
    /* Invalid UTF-8: body only. */
    s->em[0].body = (ProtobufCBinaryData){3, (uint8_t *)"a\xc0\xaf"};
    char *json = kl_receipt_to_json(&s->r, 0);
    ck_assert_ptr_nonnull(strstr(json, "\"body\":\"YcCv\"}"));
    ck_assert_ptr_null(strstr(json, "body_utf8"));
    free(json);
    /* Empty body: valid UTF-8. */
    s->em[0].body = (ProtobufCBinaryData){0, NULL};
    json = kl_receipt_to_json(&s->r, 0);
    ck_assert_ptr_nonnull(strstr(json, "\"body\":\"\",\"body_utf8\":\"\"}"));
    free(json);
    /* NUL and control bytes are valid UTF-8 and are escaped. */
    s->em[0].body = (ProtobufCBinaryData){3, (uint8_t *)"a\0\n"};
    json = kl_receipt_to_json(&s->r, 0);
    ck_assert_ptr_nonnull(strstr(json, "\"body_utf8\":\"a\\u0000\\n\"}"));
    free(json);
    /* Header values that are not UTF-8 (the wire does not enforce it) stay valid JSON. */
    s->h[0].value = "\xff";
    json = kl_receipt_to_json(&s->r, 0);
    ck_assert_ptr_nonnull(strstr(json, "\"b\":\"\xef\xbf\xbd\""));
    free(json);
    free(s);
}
END_TEST

START_TEST(test_json_stats_and_error)
{
    Keyload__V1__QueueLimits l = KEYLOAD__V1__QUEUE_LIMITS__INIT;
    l.max_messages = 100;
    l.max_deliveries = 5;
    l.dead_letter_queue = "dlq";
    Keyload__V1__QueueStatsAnswer s = KEYLOAD__V1__QUEUE_STATS_ANSWER__INIT;
    s.queue_id = 3;
    s.partition = 1;
    s.messages = 4;
    s.bytes = 400;
    s.available = 3;
    s.in_flight = 1;
    s.limits = &l;
    s.applied_index = 9;
    char *json = kl_queue_stats_to_json("orders", &s, 0);
    ck_assert_str_eq(json,
                     "{\"queue\":\"orders\",\"queue_id\":3,\"partition\":1,\"messages\":4,"
                     "\"bytes\":400,\"available\":3,\"in_flight\":1,\"limits\":{"
                     "\"max_messages\":100,\"max_bytes\":0,\"max_deliveries\":5,"
                     "\"dead_letter_queue\":\"dlq\"},\"applied_index\":9}");
    free(json);
    s.limits = NULL;
    json = kl_queue_stats_to_json(NULL, &s, 0);
    ck_assert_str_eq(json,
                     "{\"queue_id\":3,\"partition\":1,\"messages\":4,\"bytes\":400,"
                     "\"available\":3,\"in_flight\":1,\"limits\":{\"max_messages\":0,"
                     "\"max_bytes\":0,\"max_deliveries\":0,\"dead_letter_queue\":\"\"},"
                     "\"applied_index\":9}");
    free(json);

    kl_err err;
    kl_fail(&err, KL_PERMISSION_DENIED, "stale_authority", "policy \"epoch\" changed");
    json = kl_error_to_json(&err, 0);
    ck_assert_str_eq(json, "{\"error\":{\"code\":\"PERMISSION_DENIED\",\"message\":"
                           "\"policy \\\"epoch\\\" changed\",\"detail\":\"stale_authority\"}}");
    free(json);
}
END_TEST

Suite *suite_sdk(void)
{
    Suite *s = suite_create("sdk");
    TCase *t = tcase_create("batch");
    tcase_add_test(t, test_batch_new_time_ordered);
    tcase_add_test(t, test_batch_first_sent_bounds);
    tcase_add_test(t, test_batch_new_given_guid);
    tcase_add_test(t, test_batch_new_refuses_bad_guids);
    tcase_add_test(t, test_batch_new_refuses_zero_guid);
    tcase_add_test(t, test_names_validated);
    tcase_add_test(t, test_create_queue_options_validated);
    tcase_add_test(t, test_ack_release_tokens_validated);
    tcase_add_test(t, test_encode_stamps_database);
    tcase_add_test(t, test_encode_refusals);
    tcase_add_test(t, test_batch_partition);
    tcase_add_test(t, test_client_refuses_before_network);
    suite_add_tcase(s, t);

    t = tcase_create("message");
    tcase_add_test(t, test_field_parsing_types);
    tcase_add_test(t, test_field_parsing_refusals);
    tcase_add_test(t, test_header_parsing);
    suite_add_tcase(s, t);

    t = tcase_create("encoding");
    tcase_add_test(t, test_base64);
    tcase_add_test(t, test_utf8);
    tcase_add_test(t, test_json_receipt_exact);
    tcase_add_test(t, test_json_receipt_roundtrip);
    tcase_add_test(t, test_json_body_utf8_only_when_valid);
    tcase_add_test(t, test_json_stats_and_error);
    suite_add_tcase(s, t);
    return s;
}
