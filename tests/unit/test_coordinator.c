/* Unit tests of keyload-coordinator's pure parts (coordinator/, ARCHITECTURE.md "Coordinator"): deterministic
 * command ids, the config, the bounded deduplicating buffers, the failed table, intent-token
 * decoding and discovery's per-item decision. No network. Runs under ASan+UBSan with leak
 * detection: every test frees what it builds. */
#include "common/guid.h"
#include "common/log.h"
#include "coordinator/buffer.h"
#include "coordinator/command_id.h"
#include "coordinator/config.h"
#include "coordinator/coord.h"
#include "coordinator/discovery.h"
#include "coordinator/event.h"
#include "coordinator/failed.h"
#include "coordinator/intent.h"
#include "coordinator/status.h"
#include "coordinator/turn.h"
#include "keyload/v1/claims.pb-c.h"

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ helpers */

/* The accept id of tuple_init's tuple, computed independently (Python hashlib.blake2b over
 * the canonical encoding documented in coordinator/command_id.h and common/canon.h). */
#define KNOWN_ACCEPT_ID "678ecfe8-92df-659d-8c5c-743ea8b60342"

static const uint8_t XID[16] = {0x7c, 0x9e, 0x66, 0x79, 0x74, 0x25, 0x40, 0xde,
                                0x94, 0x4b, 0xe0, 0x7f, 0xc1, 0xf9, 0x0a, 0xe7};

/* A SignedToken holding TransferClaims of `purpose` (signature bytes are not checked by the
 * coordinator). *len set; malloc'd. */
static uint8_t *make_token(Keyload__V1__ClaimPurpose purpose, const char *principal,
                           const char *tenant, const char *db, const char *src_queue,
                           const uint8_t id[16], uint64_t generation, size_t *len)
{
    Keyload__V1__QueueLaneRef src = KEYLOAD__V1__QUEUE_LANE_REF__INIT;
    Keyload__V1__QueueLaneRef dst = KEYLOAD__V1__QUEUE_LANE_REF__INIT;
    src.tenant = dst.tenant = (char *)tenant;
    src.database = dst.database = (char *)db;
    src.queue = (char *)src_queue;
    src.lane = "default";
    dst.queue = "dest";
    dst.lane = "default";
    uint8_t fp[32];
    memset(fp, 0xab, sizeof fp);
    Keyload__V1__TransferClaims cl = KEYLOAD__V1__TRANSFER_CLAIMS__INIT;
    cl.version = 1;
    cl.purpose = purpose;
    cl.source = &src;
    cl.target = &dst;
    cl.transfer_id.data = (uint8_t *)id;
    cl.transfer_id.len = 16;
    cl.generation = generation;
    cl.principal_id = (char *)principal;
    cl.fingerprint.data = fp;
    cl.fingerprint.len = sizeof fp;
    size_t clen = keyload__v1__transfer_claims__get_packed_size(&cl);
    uint8_t *cbuf = malloc(clen);
    keyload__v1__transfer_claims__pack(&cl, cbuf);
    uint8_t sig[64] = {0}, kid[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    Keyload__V1__SignedToken st = KEYLOAD__V1__SIGNED_TOKEN__INIT;
    st.claims.data = cbuf;
    st.claims.len = clen;
    st.key_id.data = kid;
    st.key_id.len = sizeof kid;
    st.signature.data = sig;
    st.signature.len = sizeof sig;
    *len = keyload__v1__signed_token__get_packed_size(&st);
    uint8_t *out = malloc(*len);
    keyload__v1__signed_token__pack(&st, out);
    free(cbuf);
    return out;
}

/* A listed item (all its pointers into statics or `token`). */
typedef struct item_fixture {
    Keyload__V1__QueueLaneRef src, dst;
    Keyload__V1__PendingQueueTransfer item;
    uint8_t id[16];
    uint8_t *token;
} item_fixture;

static void item_init(item_fixture *f, const char *principal, const char *queue, uint8_t idbyte,
                      uint64_t generation)
{
    memset(f, 0, sizeof *f);
    memcpy(f->id, XID, 16);
    f->id[0] = idbyte;
    Keyload__V1__QueueLaneRef r = KEYLOAD__V1__QUEUE_LANE_REF__INIT;
    f->src = f->dst = r;
    f->src.tenant = f->dst.tenant = "t";
    f->src.database = f->dst.database = "d";
    f->src.queue = (char *)queue;
    f->src.lane = "default";
    f->dst.queue = "dest";
    f->dst.lane = "default";
    Keyload__V1__PendingQueueTransfer it = KEYLOAD__V1__PENDING_QUEUE_TRANSFER__INIT;
    f->item = it;
    f->item.source = &f->src;
    f->item.destination = &f->dst;
    f->item.transfer_id.data = f->id;
    f->item.transfer_id.len = 16;
    f->item.generation = generation;
    size_t len;
    f->token = make_token(KEYLOAD__V1__CLAIM_PURPOSE__TRANSFER_INTENT, principal, "t", "d", queue,
                          f->id, generation, &len);
    f->item.intent_token.data = f->token;
    f->item.intent_token.len = len;
}

static void item_clear(item_fixture *f) { free(f->token); }

static kl_coord_event *make_event(uint8_t idbyte, const char *queue)
{
    item_fixture f;
    item_init(&f, "ops", queue, idbyte, 1);
    kl_coord_intent in;
    ck_assert_int_eq(kl_coord_intent_decode(f.token, f.item.intent_token.len, &in, NULL), KL_OK);
    kl_coord_event *ev;
    ck_assert_int_eq(kl_coord_event_new(&f.item, &in, "t", "d", &ev, NULL), KL_OK);
    item_clear(&f);
    return ev;
}

/* ------------------------------------------------------------ command ids */

typedef struct tuple_fixture {
    Keyload__V1__QueueLaneRef src, dst;
    uint8_t id[16];
    uint8_t fp[32];
    kl_coord_tuple t;
} tuple_fixture;

static void tuple_init(tuple_fixture *f)
{
    memset(f, 0, sizeof *f);
    Keyload__V1__QueueLaneRef r = KEYLOAD__V1__QUEUE_LANE_REF__INIT;
    f->src = f->dst = r;
    f->src.tenant = f->dst.tenant = "t";
    f->src.database = f->dst.database = "d";
    f->src.queue = "orders";
    f->src.lane = "default";
    f->dst.queue = "billing";
    f->dst.lane = "east";
    memcpy(f->id, XID, 16);
    memset(f->fp, 0x11, sizeof f->fp);
    f->t.principal_id = "ops";
    f->t.tenant = "t";
    f->t.database = "d";
    f->t.source = &f->src;
    f->t.transfer_id = f->id;
    f->t.destination = &f->dst;
    f->t.fingerprint = f->fp;
    f->t.fingerprint_len = sizeof f->fp;
    f->t.generation = 1;
}

static void id_of(const tuple_fixture *f, kl_coord_step step, uint8_t out[16])
{
    ck_assert_int_eq(kl_coord_command_id(step, &f->t, out, NULL), KL_OK);
}

START_TEST(test_command_id_deterministic)
{
    tuple_fixture a, b;
    tuple_init(&a);
    tuple_init(&b);
    uint8_t x[16], y[16];
    id_of(&a, KL_COORD_STEP_ACCEPT, x);
    id_of(&b, KL_COORD_STEP_ACCEPT, y);
    ck_assert_mem_eq(x, y, 16);
    ck_assert(kl_guid_valid(x, 16));
    /* A known answer: the id must not change between builds or versions of the process
     * (a second coordinator, or this one after an upgrade, must resend the SAME command). */
    char text[KL_GUID_TEXT_LEN + 1];
    kl_guid_format(x, text);
    ck_assert_str_eq(text, KNOWN_ACCEPT_ID);
    /* An empty lane is "default". */
    b.src.lane = "";
    id_of(&b, KL_COORD_STEP_ACCEPT, y);
    ck_assert_mem_eq(x, y, 16);
    b.src.lane = NULL;
    id_of(&b, KL_COORD_STEP_ACCEPT, y);
    ck_assert_mem_eq(x, y, 16);
}
END_TEST

START_TEST(test_command_id_separation)
{
    tuple_fixture base;
    tuple_init(&base);
    uint8_t ref[16], other[16];
    id_of(&base, KL_COORD_STEP_ACCEPT, ref);
    id_of(&base, KL_COORD_STEP_COMPLETE, other);
    ck_assert_mem_ne(ref, other, 16); /* step */

    /* Every field of the tuple changes the id. */
    for (int field = 0; field < 13; field++) {
        tuple_fixture f;
        tuple_init(&f);
        switch (field) {
        case 0: f.t.principal_id = "ops2"; break;
        case 1: f.t.tenant = "t2"; break;
        case 2: f.t.database = "d2"; break;
        case 3: f.src.queue = "orders2"; break;
        case 4: f.src.lane = "west"; break;
        case 5: f.src.tenant = "t9"; break;
        case 6: f.id[15] ^= 1; break;
        case 7: f.dst.queue = "billing2"; break;
        case 8: f.dst.lane = "default"; break;
        case 9: f.dst.database = "d9"; break;
        case 10: f.fp[31] ^= 1; break;
        case 11: f.t.generation = 2; break;
        case 12: f.t.fingerprint_len = 31; break;
        }
        id_of(&f, KL_COORD_STEP_ACCEPT, other);
        ck_assert_msg(memcmp(ref, other, 16) != 0, "field %d does not change the id", field);
    }
    /* Moving bytes between neighbouring items is a different tuple. */
    tuple_fixture f;
    tuple_init(&f);
    f.t.tenant = "td";
    f.t.database = "";
    id_of(&f, KL_COORD_STEP_ACCEPT, other);
    ck_assert_mem_ne(ref, other, 16);
}
END_TEST

START_TEST(test_command_id_never_zero_and_refusals)
{
    tuple_fixture f;
    tuple_init(&f);
    uint8_t id[16];
    for (uint64_t g = 0; g < 2000; g++) {
        f.t.generation = g;
        id_of(&f, (g & 1) ? KL_COORD_STEP_COMPLETE : KL_COORD_STEP_ACCEPT, id);
        ck_assert(kl_guid_valid(id, 16));
    }
    kl_err err;
    ck_assert_int_eq(kl_coord_command_id((kl_coord_step)7, &f.t, id, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "step");
    f.t.source = NULL;
    ck_assert_int_eq(kl_coord_command_id(KL_COORD_STEP_ACCEPT, &f.t, id, &err),
                     KL_INVALID_ARGUMENT);
    ck_assert_str_eq(kl_coord_step_name(KL_COORD_STEP_ACCEPT), "accept");
    ck_assert_str_eq(kl_coord_step_name(KL_COORD_STEP_COMPLETE), "complete");
}
END_TEST

/* ------------------------------------------------------------ config */

#define MIN_CONFIG                                                                      \
    "{\"cluster_file\": \"var/c1/cluster.json\", \"database\": \"t/d\", "               \
    "\"transfer_coordinator_principal_id\": \"ops\", \"principal_key_file\": \"k.key\""

/* "metrics": HOST:PORT; a non-loopback one needs "metrics_token_file". */
START_TEST(test_config_metrics)
{
    kl_coord_config c;
    kl_err err;
    ck_assert_int_eq(kl_coord_config_parse(MIN_CONFIG "}", &c, NULL), KL_OK);
    ck_assert_str_eq(c.metrics_addr, "");
    ck_assert_int_eq(kl_coord_config_parse(MIN_CONFIG ", \"metrics\": \"127.0.0.1:9400\"}", &c, &err), KL_OK);
    ck_assert_str_eq(c.metrics_addr, "127.0.0.1:9400");
    ck_assert_int_eq(kl_coord_config_parse(MIN_CONFIG ", \"metrics\": \"127.0.0.1\"}", &c, &err),
                     KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "metrics");
    ck_assert_int_eq(kl_coord_config_parse(MIN_CONFIG ", \"metrics\": \"10.0.0.1:9400\"}", &c, &err),
                     KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "metrics_token_file");
    ck_assert_int_eq(kl_coord_config_parse(MIN_CONFIG ", \"metrics\": \"10.0.0.1:9400\", "
                                                      "\"metrics_token_file\": \"/etc/keyload/m.token\"}",
                                           &c, &err),
                     KL_OK);
    ck_assert_str_eq(c.metrics_token_file, "/etc/keyload/m.token");
}
END_TEST

START_TEST(test_config_defaults)
{
    kl_coord_config c;
    ck_assert_int_eq(kl_coord_config_parse(MIN_CONFIG "}", &c, NULL), KL_OK);
    ck_assert_str_eq(c.cluster_file, "var/c1/cluster.json");
    ck_assert_str_eq(c.tenant, "t");
    ck_assert_str_eq(c.db, "d");
    ck_assert(c.has_principal);
    ck_assert_str_eq(c.principal_id, "ops");
    ck_assert_str_eq(c.principal_key_file, "k.key");
    ck_assert_uint_eq(c.flush_interval_ms, 10);
    ck_assert_uint_eq(c.workers, 256);
    ck_assert_uint_eq(c.buffer_capacity, 32);
    ck_assert_uint_eq(c.call_threads, 64);
    ck_assert_uint_eq(c.discovery_interval_ms, 500);
    ck_assert_uint_eq(c.discovery_max_records, 64);
    ck_assert_uint_eq(c.discovery_max_bytes, 4u << 20);
    ck_assert_uint_eq(c.discovery_max_work, 16);
    ck_assert_uint_eq(c.call_timeout_ms, 5000);
    ck_assert_str_eq(c.status_file, "var/c1/coordinator-ops.status.json");
    ck_assert(!c.log_debug); /* per-step lines are off unless asked for */
    ck_assert_int_eq(kl_coord_config_parse(MIN_CONFIG ", \"log_level\": \"debug\"}", &c, NULL), KL_OK);
    ck_assert(c.log_debug);
    ck_assert_int_eq(kl_coord_config_parse(MIN_CONFIG ", \"log_level\": \"info\"}", &c, NULL), KL_OK);
    ck_assert(!c.log_debug);

    ck_assert_int_eq(kl_coord_config_parse(
                         MIN_CONFIG ", \"flush_interval_ms\": 1, \"workers\": 4096, "
                                    "\"call_threads\": 1024, "
                                    "\"buffer_capacity\": 100000, \"call_timeout_ms\": 250, "
                                    "\"status_file\": \"/tmp/s.json\", \"discovery\": "
                                    "{\"interval_ms\": 20, \"max_records\": 1000, "
                                    "\"max_bytes\": 2048, \"max_work\": 1}}",
                         &c, NULL),
                     KL_OK);
    ck_assert_uint_eq(c.flush_interval_ms, 1);
    ck_assert_uint_eq(c.workers, 4096);
    ck_assert_uint_eq(c.call_threads, 1024);
    ck_assert_uint_eq(c.buffer_capacity, 100000);
    ck_assert_uint_eq(c.call_timeout_ms, 250);
    ck_assert_str_eq(c.status_file, "/tmp/s.json");
    ck_assert_uint_eq(c.discovery_interval_ms, 20);
    ck_assert_uint_eq(c.discovery_max_records, 1000);
    ck_assert_uint_eq(c.discovery_max_bytes, 2048);
    ck_assert_uint_eq(c.discovery_max_work, 1);

    /* A cluster file without a folder: the status goes beside it, in ".". */
    ck_assert_int_eq(kl_coord_config_parse("{\"cluster_file\": \"c.json\", \"database\": \"t/d\", "
                                           "\"transfer_coordinator_principal_id\": null}",
                                           &c, NULL),
                     KL_OK);
    ck_assert_str_eq(c.status_file, "./coordinator.status.json");
}
END_TEST

START_TEST(test_config_null_principal)
{
    kl_coord_config c;
    ck_assert_int_eq(kl_coord_config_parse("{\"cluster_file\": \"x/c.json\", \"database\": \"t/d\","
                                           " \"transfer_coordinator_principal_id\": null}",
                                           &c, NULL),
                     KL_OK);
    ck_assert(!c.has_principal);
    ck_assert_str_eq(c.principal_id, "");
    ck_assert_str_eq(c.principal_key_file, "");
    ck_assert_str_eq(c.status_file, "x/coordinator.status.json");
    /* A key file next to a null principal is allowed (and unused). */
    ck_assert_int_eq(kl_coord_config_parse("{\"cluster_file\": \"x/c.json\", \"database\": \"t/d\","
                                           " \"transfer_coordinator_principal_id\": null,"
                                           " \"principal_key_file\": \"k\"}",
                                           &c, NULL),
                     KL_OK);
    ck_assert_str_eq(c.principal_key_file, "");
}
END_TEST

START_TEST(test_config_bad_fields_named)
{
    static const struct {
        const char *json;
        const char *detail;
    } cases[] = {
        {"[]", "config"},
        {"{", "config"},
        {"{\"database\": \"t/d\", \"transfer_coordinator_principal_id\": null}", "cluster_file"},
        {"{\"cluster_file\": 5, \"database\": \"t/d\", \"transfer_coordinator_principal_id\": null}",
         "cluster_file"},
        {"{\"cluster_file\": \"\", \"database\": \"t/d\", \"transfer_coordinator_principal_id\": "
         "null}", "cluster_file"},
        {"{\"cluster_file\": \"c\", \"transfer_coordinator_principal_id\": null}", "database"},
        {"{\"cluster_file\": \"c\", \"database\": \"td\", \"transfer_coordinator_principal_id\": "
         "null}", "database"},
        {"{\"cluster_file\": \"c\", \"database\": \"t/d/e\", \"transfer_coordinator_principal_id\": "
         "null}", "database"},
        {"{\"cluster_file\": \"c\", \"database\": \"t/\", \"transfer_coordinator_principal_id\": "
         "null}", "database"},
        {"{\"cluster_file\": \"c\", \"database\": \"t/d d\", \"transfer_coordinator_principal_id\": "
         "null}", "database"},
        {"{\"cluster_file\": \"c\", \"database\": \"t/d\"}", "transfer_coordinator_principal_id"},
        {"{\"cluster_file\": \"c\", \"database\": \"t/d\", \"transfer_coordinator_principal_id\": "
         "7}", "transfer_coordinator_principal_id"},
        {"{\"cluster_file\": \"c\", \"database\": \"t/d\", \"transfer_coordinator_principal_id\": "
         "\"a b\", \"principal_key_file\": \"k\"}", "transfer_coordinator_principal_id"},
        {"{\"cluster_file\": \"c\", \"database\": \"t/d\", \"transfer_coordinator_principal_id\": "
         "\"ops\"}", "principal_key_file"},
        {"{\"cluster_file\": \"c\", \"database\": \"t/d\", \"transfer_coordinator_principal_id\": "
         "\"ops\", \"principal_key_file\": true}", "principal_key_file"},
        {MIN_CONFIG ", \"flush_interval_ms\": 0}", "flush_interval_ms"},
        {MIN_CONFIG ", \"flush_interval_ms\": 60001}", "flush_interval_ms"},
        {MIN_CONFIG ", \"flush_interval_ms\": \"100\"}", "flush_interval_ms"},
        {MIN_CONFIG ", \"flush_interval_ms\": 1.5}", "flush_interval_ms"},
        {MIN_CONFIG ", \"workers\": 0}", "workers"},
        {MIN_CONFIG ", \"workers\": 4097}", "workers"},
        {MIN_CONFIG ", \"call_threads\": 0}", "call_threads"},
        {MIN_CONFIG ", \"call_threads\": 1025}", "call_threads"},
        {MIN_CONFIG ", \"workers\": -1}", "workers"},
        {MIN_CONFIG ", \"buffer_capacity\": 0}", "buffer_capacity"},
        {MIN_CONFIG ", \"buffer_capacity\": 100001}", "buffer_capacity"},
        {MIN_CONFIG ", \"call_timeout_ms\": 0}", "call_timeout_ms"},
        {MIN_CONFIG ", \"status_file\": \"\"}", "status_file"},
        {MIN_CONFIG ", \"status_file\": null}", "status_file"},
        {MIN_CONFIG ", \"discovery\": 5}", "discovery"},
        {MIN_CONFIG ", \"discovery\": {\"interval_ms\": 0}}", "discovery.interval_ms"},
        {MIN_CONFIG ", \"discovery\": {\"max_records\": 0}}", "discovery.max_records"},
        {MIN_CONFIG ", \"discovery\": {\"max_records\": 1001}}", "discovery.max_records"},
        {MIN_CONFIG ", \"discovery\": {\"max_bytes\": 10}}", "discovery.max_bytes"},
        {MIN_CONFIG ", \"discovery\": {\"max_work\": 0}}", "discovery.max_work"},
        {MIN_CONFIG ", \"discovery\": {\"max_work\": \"x\"}}", "discovery.max_work"},
        {MIN_CONFIG ", \"discovery\": {\"max_item\": 3}}", "discovery.max_item"},
        {MIN_CONFIG ", \"flush_interval\": 100}", "flush_interval"},
        {MIN_CONFIG ", \"workers\": 2, \"workers\": 3}", "config"},
        {MIN_CONFIG ", \"log_level\": \"trace\"}", "log_level"},
        {MIN_CONFIG ", \"log_level\": \"\"}", "log_level"},
        {MIN_CONFIG ", \"log_level\": 1}", "log_level"},
        {MIN_CONFIG ", \"log_level\": \"debugging\"}", "log_level"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kl_coord_config c;
        kl_err err;
        memset(&err, 0, sizeof err);
        ck_assert_msg(kl_coord_config_parse(cases[i].json, &c, &err) == KL_INVALID_ARGUMENT,
                      "case %zu accepted", i);
        ck_assert_msg(strcmp(err.detail, cases[i].detail) == 0, "case %zu: detail %s, want %s",
                      i, err.detail, cases[i].detail);
        if (strcmp(cases[i].detail, "config") != 0)
            ck_assert_msg(strstr(err.message, cases[i].detail) != NULL,
                          "case %zu: message '%s' does not name %s", i, err.message,
                          cases[i].detail);
    }
}
END_TEST

/* ------------------------------------------------------------ buffer */

START_TEST(test_buffer_bounded_dedup)
{
    kl_coord_buffer *b;
    ck_assert_int_eq(kl_coord_buffer_new(3, &b, NULL), KL_OK);
    kl_coord_event *e1 = make_event(1, "q"), *e2 = make_event(2, "q"), *e3 = make_event(3, "q");
    kl_coord_event *e4 = make_event(4, "q"), *dup = make_event(2, "q");
    ck_assert_int_eq(kl_coord_buffer_push(b, e1, 0), KL_COORD_PUSH_ADDED);
    ck_assert_int_eq(kl_coord_buffer_push(b, e2, 0), KL_COORD_PUSH_ADDED);
    ck_assert_int_eq(kl_coord_buffer_push(b, dup, 0), KL_COORD_PUSH_DUPLICATE);
    ck_assert_int_eq(kl_coord_buffer_push(b, e3, 0), KL_COORD_PUSH_ADDED);
    ck_assert_int_eq(kl_coord_buffer_push(b, e4, 0), KL_COORD_PUSH_FULL); /* refused, not taken */
    ck_assert(kl_coord_buffer_contains(b, e2->key));
    ck_assert(!kl_coord_buffer_contains(b, e4->key));

    /* FIFO among events due at once; an in-flight event still counts and still dedups. */
    kl_coord_event *p = kl_coord_buffer_pop_due(b, 10);
    ck_assert_ptr_eq(p, e1);
    size_t q, f, bytes;
    kl_coord_buffer_counts(b, &q, &f, &bytes);
    ck_assert_uint_eq(q, 2);
    ck_assert_uint_eq(f, 1);
    ck_assert_uint_gt(bytes, 3 * sizeof(kl_coord_event));
    kl_coord_event *dup1 = make_event(1, "q");
    ck_assert_int_eq(kl_coord_buffer_push(b, dup1, 0), KL_COORD_PUSH_DUPLICATE);
    ck_assert_int_eq(kl_coord_buffer_push(b, e4, 0), KL_COORD_PUSH_FULL);

    /* A retry goes behind: due later. */
    kl_coord_buffer_requeue(b, p, 100);
    ck_assert_ptr_eq(kl_coord_buffer_pop_due(b, 10), e2);
    ck_assert_ptr_eq(kl_coord_buffer_pop_due(b, 10), e3);
    ck_assert_ptr_null(kl_coord_buffer_pop_due(b, 10)); /* e1 not due yet */
    ck_assert_ptr_eq(kl_coord_buffer_pop_due(b, 100), e1);

    /* Done frees the slot: e4 fits now. */
    kl_coord_buffer_done(b, e2);
    ck_assert_int_eq(kl_coord_buffer_push(b, e4, 50), KL_COORD_PUSH_ADDED);
    kl_coord_buffer_counts(b, &q, &f, NULL);
    ck_assert_uint_eq(q, 1);
    ck_assert_uint_eq(f, 2);
    kl_coord_event_free(dup);
    kl_coord_event_free(dup1);
    kl_coord_buffer_free(b); /* frees e1, e3 (in flight) and e4 */
}
END_TEST

/* Many pushes, pops and removals against a simple model: the identity table and the heap
 * stay consistent (backward-shift deletion, heap positions). */
START_TEST(test_buffer_stress)
{
    enum { CAP = 64, N = 200 };
    kl_coord_buffer *b;
    ck_assert_int_eq(kl_coord_buffer_new(CAP, &b, NULL), KL_OK);
    bool held[N] = {false};
    kl_coord_event *flying[N] = {NULL};
    uint32_t seed = 12345;
    int64_t now = 0;
    for (int step = 0; step < 20000; step++) {
        seed = seed * 1103515245u + 12345u;
        int k = (int)((seed >> 8) % N);
        int op = (int)((seed >> 20) % 4);
        if (op <= 1) {
            kl_coord_event *ev = make_event((uint8_t)k, (k & 1) ? "q1" : "q2");
            size_t q, f;
            kl_coord_buffer_counts(b, &q, &f, NULL);
            kl_coord_push r = kl_coord_buffer_push(b, ev, now + (int64_t)(seed % 7));
            if (held[k])
                ck_assert_int_eq(r, KL_COORD_PUSH_DUPLICATE);
            else if (q + f == CAP)
                ck_assert_int_eq(r, KL_COORD_PUSH_FULL);
            else
                ck_assert_int_eq(r, KL_COORD_PUSH_ADDED);
            if (r == KL_COORD_PUSH_ADDED)
                held[k] = true;
            else
                kl_coord_event_free(ev);
        } else if (op == 2) {
            kl_coord_event *ev = kl_coord_buffer_pop_due(b, now);
            if (ev != NULL) {
                int idx = ev->transfer_id[0];
                ck_assert(held[idx]);
                ck_assert_int_le(ev->due_ms, now);
                if (seed & 1) {
                    kl_coord_buffer_done(b, ev);
                    held[idx] = false;
                } else {
                    flying[idx] = ev;
                }
            }
        } else {
            for (int i = 0; i < N; i++)
                if (flying[i] != NULL && ((seed >> 3) & 1)) {
                    kl_coord_buffer_requeue(b, flying[i], now + 3);
                    flying[i] = NULL;
                }
            now++;
        }
        for (int i = 0; i < N; i += 17) {
            uint8_t key[KL_COORD_KEY_LEN];
            uint8_t id[16];
            memcpy(id, XID, 16);
            id[0] = (uint8_t)i;
            kl_coord_identity("t", "d", (i & 1) ? "q1" : "q2", "default", id, key);
            ck_assert_int_eq(kl_coord_buffer_contains(b, key), held[i]);
        }
    }
    kl_coord_buffer_free(b);
}
END_TEST

START_TEST(test_buffer_refuses_zero_capacity)
{
    kl_coord_buffer *b;
    kl_err err;
    ck_assert_int_eq(kl_coord_buffer_new(0, &b, &err), KL_INVALID_ARGUMENT);
    ck_assert_ptr_null(b);
    ck_assert_uint_eq(kl_coord_buffer_new(5, &b, NULL), KL_OK);
    ck_assert_uint_eq(kl_coord_buffer_capacity(b), 5);
    kl_coord_buffer_free(b);
    kl_coord_buffer_free(NULL);
}
END_TEST

START_TEST(test_backoff)
{
    ck_assert_uint_eq(kl_coord_backoff_ms(1), 100);
    ck_assert_uint_eq(kl_coord_backoff_ms(2), 200);
    ck_assert_uint_eq(kl_coord_backoff_ms(3), 400);
    ck_assert_uint_eq(kl_coord_backoff_ms(7), 6400);
    ck_assert_uint_eq(kl_coord_backoff_ms(8), 10000);
    ck_assert_uint_eq(kl_coord_backoff_ms(4000000000u), 10000);
}
END_TEST

/* ------------------------------------------------------------ failed table */

START_TEST(test_failed_table_bound)
{
    kl_coord_failed *t;
    ck_assert_int_eq(kl_coord_failed_new(3, &t, NULL), KL_OK);
    kl_coord_event *ev[5];
    kl_err why;
    kl_fail(&why, KL_PERMISSION_DENIED, "grant:QueuePublish", "no QueuePublish on dest");
    for (int i = 0; i < 5; i++) {
        ev[i] = make_event((uint8_t)(10 + i), "q");
        kl_coord_failed_record(t, ev[i], "accept", &why, 1000 + i);
    }
    ck_assert_uint_eq(kl_coord_failed_count(t), 3);
    ck_assert(!kl_coord_failed_contains(t, ev[0]->key, 1)); /* the oldest were evicted */
    ck_assert(!kl_coord_failed_contains(t, ev[1]->key, 1));
    for (int i = 2; i < 5; i++)
        ck_assert(kl_coord_failed_contains(t, ev[i]->key, 1));
    ck_assert(!kl_coord_failed_contains(t, ev[4]->key, 2)); /* a new generation is new work */

    /* Refreshing an entry does not grow the table. */
    kl_coord_failed_record(t, ev[4], "complete", &why, 2000);
    ck_assert_uint_eq(kl_coord_failed_count(t), 3);

    kl_coord_failure out[10];
    size_t n = kl_coord_failed_latest(t, out, 10);
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(out[0].transfer_id, ev[4]->transfer_id_text); /* newest first */
    ck_assert_str_eq(out[0].step, "complete");
    ck_assert_int_eq(out[0].code, KL_PERMISSION_DENIED);
    ck_assert_str_eq(out[0].detail, "grant:QueuePublish");
    ck_assert_str_eq(out[0].source, "q/default");
    ck_assert_int_eq(out[2].unix_ms, 1002);
    ck_assert_uint_eq(kl_coord_failed_latest(t, out, 1), 1);
    for (int i = 0; i < 5; i++)
        kl_coord_event_free(ev[i]);
    kl_coord_failed_free(t);
}
END_TEST

/* ------------------------------------------------------------ intents */

START_TEST(test_intent_decode)
{
    size_t len;
    uint8_t *tok = make_token(KEYLOAD__V1__CLAIM_PURPOSE__TRANSFER_INTENT, "ops", "t", "d", "q",
                              XID, 3, &len);
    kl_coord_intent in;
    ck_assert_int_eq(kl_coord_intent_decode(tok, len, &in, NULL), KL_OK);
    ck_assert_str_eq(in.principal_id, "ops");
    ck_assert_str_eq(in.source_tenant, "t");
    ck_assert_str_eq(in.source_database, "d");
    ck_assert_uint_eq(in.generation, 3);
    ck_assert_mem_eq(in.transfer_id, XID, 16);
    ck_assert_uint_eq(in.fingerprint_len, 32);
    ck_assert(kl_coord_intent_is_ours(&in, "ops", "t", "d"));
    ck_assert(!kl_coord_intent_is_ours(&in, "other", "t", "d"));
    ck_assert(!kl_coord_intent_is_ours(&in, "ops", "t2", "d"));
    ck_assert(!kl_coord_intent_is_ours(&in, "ops", "t", "d2"));
    ck_assert(!kl_coord_intent_is_ours(&in, "", "t", "d"));
    free(tok);

    /* A receipt is no intent; garbage is refused; nothing is half-filled. */
    kl_err err;
    tok = make_token(KEYLOAD__V1__CLAIM_PURPOSE__TRANSFER_RECEIPT, "ops", "t", "d", "q", XID, 1,
                     &len);
    ck_assert_int_eq(kl_coord_intent_decode(tok, len, &in, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "intent_token");
    ck_assert_str_eq(in.principal_id, "");
    free(tok);
    static const uint8_t junk[] = {0xff, 0xff, 0xff, 0x01};
    ck_assert_int_eq(kl_coord_intent_decode(junk, sizeof junk, &in, &err), KL_INVALID_ARGUMENT);
    ck_assert_int_eq(kl_coord_intent_decode(NULL, 0, &in, &err), KL_INVALID_ARGUMENT);
    /* A SignedToken whose claims are not TransferClaims. */
    static const uint8_t not_claims[] = {0x0a, 0x02, 0xff, 0xff};
    ck_assert_int_eq(kl_coord_intent_decode(not_claims, sizeof not_claims, &in, &err),
                     KL_INVALID_ARGUMENT);
}
END_TEST

START_TEST(test_event_from_item)
{
    item_fixture f;
    item_init(&f, "ops", "orders", 9, 2);
    kl_coord_intent in;
    ck_assert_int_eq(kl_coord_intent_decode(f.token, f.item.intent_token.len, &in, NULL), KL_OK);
    kl_coord_event *ev;
    ck_assert_int_eq(kl_coord_event_new(&f.item, &in, "t", "d", &ev, NULL), KL_OK);
    ck_assert_str_eq(ev->source_queue, "orders");
    ck_assert_str_eq(ev->source_lane, "default");
    ck_assert_str_eq(ev->dest_queue, "dest");
    ck_assert_uint_eq(ev->generation, 2);
    ck_assert_uint_eq(ev->token_len, f.item.intent_token.len);
    ck_assert_mem_eq(ev->token, f.token, ev->token_len);
    uint8_t key[KL_COORD_KEY_LEN];
    kl_coord_identity("t", "d", "orders", "", ev->transfer_id, key); /* "" is "default" */
    ck_assert_mem_eq(key, ev->key, KL_COORD_KEY_LEN);
    kl_coord_event_free(ev);

    /* The item must agree with its token. */
    kl_err err;
    f.item.generation = 3;
    ck_assert_int_eq(kl_coord_event_new(&f.item, &in, "t", "d", &ev, &err), KL_INVALID_ARGUMENT);
    ck_assert_ptr_null(ev);
    f.item.generation = 2;
    f.item.destination = NULL;
    ck_assert_int_eq(kl_coord_event_new(&f.item, &in, "t", "d", &ev, &err), KL_INVALID_ARGUMENT);
    item_clear(&f);
}
END_TEST

/* ------------------------------------------------------------ discovery decisions */

/* A kl_coord with buffers and a failed table but no cluster or client (no network). */
static kl_coord *test_coord(uint32_t workers, uint32_t capacity)
{
    kl_coord *co = calloc(1, sizeof *co);
    ck_assert_ptr_nonnull(co);
    ck_assert_int_eq(kl_coord_config_parse(MIN_CONFIG "}", &co->cfg, NULL), KL_OK);
    co->cfg.workers = workers;
    co->cfg.buffer_capacity = capacity;
    co->buffers = calloc(workers, sizeof *co->buffers);
    for (uint32_t i = 0; i < workers; i++)
        ck_assert_int_eq(kl_coord_buffer_new(capacity, &co->buffers[i], NULL), KL_OK);
    ck_assert_int_eq(kl_coord_failed_new(8, &co->failed, NULL), KL_OK);
    ck_assert_int_eq(pthread_mutex_init(&co->lanes_mu, NULL), 0);
    kl_log_set_level(KL_LOG_WARN); /* one "dispatched" line per event is noise here */
    return co;
}

static void test_coord_free(kl_coord *co)
{
    for (uint32_t i = 0; i < co->cfg.workers; i++)
        kl_coord_buffer_free(co->buffers[i]);
    free(co->buffers);
    kl_coord_failed_free(co->failed);
    pthread_mutex_destroy(&co->lanes_mu);
    free(co);
    kl_log_set_level(KL_LOG_INFO);
}

START_TEST(test_discovery_take)
{
    kl_coord *co = test_coord(1, 2);
    item_fixture a, b, c, foreign;
    item_init(&a, "ops", "orders", 1, 1);
    item_init(&b, "ops", "orders", 2, 1);
    item_init(&c, "ops", "orders", 3, 1);
    item_init(&foreign, "someone", "orders", 4, 1);
    ck_assert_int_eq(kl_coord_discovery_take(co, &foreign.item), KL_COORD_TAKE_FOREIGN);
    ck_assert_int_eq(kl_coord_discovery_take(co, &a.item), KL_COORD_TAKE_DISPATCHED);
    ck_assert_int_eq(kl_coord_discovery_take(co, &a.item), KL_COORD_TAKE_DUPLICATE);
    ck_assert_int_eq(kl_coord_discovery_take(co, &b.item), KL_COORD_TAKE_DISPATCHED);
    ck_assert_int_eq(kl_coord_discovery_take(co, &c.item), KL_COORD_TAKE_FULL);

    /* A known terminal failure is skipped (at its generation only). */
    kl_coord_event *ev = kl_coord_buffer_pop_due(co->buffers[0], kl_coord_now_ms() + 1);
    ck_assert_ptr_nonnull(ev);
    kl_err why;
    kl_fail(&why, KL_RESOURCE_EXHAUSTED, "limit:MaxScanRecords", "destination full");
    kl_coord_failed_record(co->failed, ev, "accept", &why, 1);
    uint8_t first_id = ev->transfer_id[0];
    kl_coord_buffer_done(co->buffers[0], ev);
    item_fixture *failed = first_id == 1 ? &a : &b;
    ck_assert_int_eq(kl_coord_discovery_take(co, &failed->item), KL_COORD_TAKE_FAILED);
    ck_assert_int_eq(kl_coord_discovery_take(co, &c.item), KL_COORD_TAKE_DISPATCHED);

    /* Malformed token, and an item that disagrees with its token. */
    item_fixture bad;
    item_init(&bad, "ops", "orders", 5, 1);
    bad.item.generation = 9;
    ck_assert_int_eq(kl_coord_discovery_take(co, &bad.item), KL_COORD_TAKE_MALFORMED);
    bad.item.intent_token.len = 3;
    ck_assert_int_eq(kl_coord_discovery_take(co, &bad.item), KL_COORD_TAKE_MALFORMED);

    ck_assert_uint_eq(atomic_load(&co->stats.dispatched), 3);
    ck_assert_uint_eq(atomic_load(&co->stats.duplicates), 1);
    ck_assert_uint_eq(atomic_load(&co->stats.skipped_foreign), 1);
    ck_assert_uint_eq(atomic_load(&co->stats.skipped_failed), 1);
    ck_assert_uint_eq(atomic_load(&co->stats.skipped_malformed), 2);
    ck_assert_uint_eq(atomic_load(&co->stats.buffer_full), 1);
    item_clear(&a);
    item_clear(&b);
    item_clear(&c);
    item_clear(&foreign);
    item_clear(&bad);
    test_coord_free(co);
}
END_TEST

/* Dispatch spreads transfers over workers by identity, and always the same way. */
START_TEST(test_dispatch_by_identity)
{
    kl_coord *co = test_coord(4, 100);
    int per[4] = {0};
    for (int i = 0; i < 64; i++) {
        item_fixture f;
        item_init(&f, "ops", "orders", (uint8_t)i, 1);
        ck_assert_int_eq(kl_coord_discovery_take(co, &f.item), KL_COORD_TAKE_DISPATCHED);
        uint8_t key[KL_COORD_KEY_LEN];
        kl_coord_identity("t", "d", "orders", "default", f.id, key);
        uint32_t w = kl_coord_worker_of(co, key);
        ck_assert(kl_coord_buffer_contains(co->buffers[w], key));
        per[w]++;
        item_clear(&f);
    }
    for (int w = 0; w < 4; w++)
        ck_assert_int_gt(per[w], 0);
    test_coord_free(co);
}
END_TEST

/* The status snapshot: the documented keys, the buffers and failures, and no token. */
START_TEST(test_status_snapshot)
{
    kl_coord *co = test_coord(2, 4);
    item_fixture f;
    item_init(&f, "ops", "orders", 1, 1);
    ck_assert_int_eq(kl_coord_discovery_take(co, &f.item), KL_COORD_TAKE_DISPATCHED);
    kl_coord_event *failed = make_event(7, "orders");
    kl_err why;
    kl_fail(&why, KL_PERMISSION_DENIED, "grant:QueuePublish", "no grant");
    kl_coord_failed_record(co->failed, failed, "accept", &why, 42);
    kl_coord_lane_count lane = {.source = "orders/default", .partition = 1, .pending = 3};
    kl_coord_publish_lanes(co, &lane, 1, 0);

    char *text = kl_coord_status_json(co, true);
    ck_assert_ptr_nonnull(text);
    json_error_t je;
    json_t *o = json_loads(text, 0, &je);
    ck_assert_ptr_nonnull(o);
    ck_assert(json_is_true(json_object_get(o, "final")));
    ck_assert_str_eq(json_string_value(json_object_get(o, "discovery")), "enabled");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(o, "config"), "principal_id")),
                     "ops");
    ck_assert_int_eq(json_array_size(json_object_get(o, "buffers")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(o, "counters"),
                                                        "dispatched")), 1);
    json_t *lanes = json_object_get(json_object_get(o, "pending"), "lanes");
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(lanes, 0), "pending")), 3);
    json_t *latest = json_object_get(json_object_get(o, "failed"), "latest");
    ck_assert_int_eq(json_array_size(latest), 1);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(latest, 0), "code")),
                     "PERMISSION_DENIED");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(latest, 0), "transfer_id")),
                     failed->transfer_id_text);
    /* No token, in any encoding we print, and no key path. */
    ck_assert_ptr_null(strstr(text, "token"));
    ck_assert_ptr_null(strstr(text, "key_file"));
    json_decref(o);
    free(text);
    kl_coord_event_free(failed);
    item_clear(&f);
    test_coord_free(co);
}
END_TEST

START_TEST(test_terminal_codes)
{
    static const kl_code terminal[] = {KL_PERMISSION_DENIED, KL_RESOURCE_EXHAUSTED,
                                       KL_FAILED_PRECONDITION, KL_CONFLICT, KL_INVALID_ARGUMENT};
    static const kl_code transient[] = {KL_UNAVAILABLE, KL_NOT_LEADER, KL_DEADLINE_EXCEEDED,
                                        KL_UNKNOWN_WRITE_OUTCOME, KL_UNAUTHENTICATED, KL_INTERNAL,
                                        KL_NOT_FOUND};
    for (size_t i = 0; i < sizeof terminal / sizeof terminal[0]; i++)
        ck_assert(kl_coord_refusal_is_terminal(terminal[i]));
    for (size_t i = 0; i < sizeof transient / sizeof transient[0]; i++)
        ck_assert(!kl_coord_refusal_is_terminal(transient[i]));
}
END_TEST

/* ------------------------------------------------------------ the turn state machine */

/* Packs and unpacks m: an answer owned the way the SDK's are (freed by its _free). */
static void *owned(const ProtobufCMessage *m)
{
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(len ? len : 1);
    protobuf_c_message_pack(m, buf);
    void *out = protobuf_c_message_unpack(m->descriptor, NULL, len, buf);
    free(buf);
    ck_assert_ptr_nonnull(out);
    return out;
}

/* A turn over a fresh event of worker 0's buffer, popped as the scheduler pops it. */
typedef struct turn_fixture {
    kl_coord *co;
    kl_coord_event *ev;
    kl_coord_turn t;
} turn_fixture;

static void turn_init(turn_fixture *f, bool with_failure, bool failure_in_complete)
{
    f->co = test_coord(1, 4);
    kl_coord_event *ev = make_event(1, "orders");
    ev->has_failure = with_failure;
    ev->failure_in_complete = failure_in_complete;
    ev->failure_code = failure_in_complete ? KL_PERMISSION_DENIED : KL_RESOURCE_EXHAUSTED;
    ck_assert_int_eq(kl_coord_buffer_push(f->co->buffers[0], ev, 0), KL_COORD_PUSH_ADDED);
    f->ev = kl_coord_buffer_pop_due(f->co->buffers[0], kl_coord_now_ms());
    ck_assert_ptr_eq(f->ev, ev);
    kl_coord_turn_begin(&f->t, f->co, f->ev, 0);
}

static void turn_clear(turn_fixture *f) { test_coord_free(f->co); }

static void set_error(kl_coord_turn *t, kl_code code, const char *detail)
{
    t->rc = code;
    kl_fail(&t->err, code, detail, "test: %s", detail);
}

static kl_coord_turn_out feed_principal(kl_coord_turn *t, kl_code rc, const char *tenant)
{
    ck_assert(t->at == KL_COORD_AT_PRINCIPAL || t->at == KL_COORD_AT_RECOVER_PRINCIPAL);
    if (rc != KL_OK) {
        set_error(t, rc, "principal_read");
        return kl_coord_turn_next(t);
    }
    Keyload__V1__CatalogPrincipal p = KEYLOAD__V1__CATALOG_PRINCIPAL__INIT;
    p.tenant = (char *)tenant;
    p.database_admin = true;
    p.database = "d";
    Keyload__V1__ShowPrincipalAnswer a = KEYLOAD__V1__SHOW_PRINCIPAL_ANSWER__INIT;
    a.principal = &p;
    t->rc = KL_OK;
    t->ans.principal = owned(&a.base);
    return kl_coord_turn_next(t);
}

/* The source intent: `state`, this event's token unless `other_token`. */
static kl_coord_turn_out feed_source(kl_coord_turn *t, kl_code rc, Keyload__V1__TransferState state,
                                     bool other_token)
{
    if (rc != KL_OK) {
        set_error(t, rc, "source_read");
        return kl_coord_turn_next(t);
    }
    uint8_t other[4] = {1, 2, 3, 4};
    Keyload__V1__InspectQueueTransferAnswer a = KEYLOAD__V1__INSPECT_QUEUE_TRANSFER_ANSWER__INIT;
    a.state = state;
    a.generation = t->ev->generation;
    a.intent_token.data = other_token ? other : t->ev->token;
    a.intent_token.len = other_token ? sizeof other : t->ev->token_len;
    t->rc = KL_OK;
    t->ans.source = owned(&a.base);
    return kl_coord_turn_next(t);
}

#define PENDING KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING

/* The destination receipt: `bytes` as its token, NULL for NOT_FOUND. */
static kl_coord_turn_out feed_receipt(kl_coord_turn *t, const char *bytes)
{
    if (bytes == NULL) {
        set_error(t, KL_NOT_FOUND, "receipt");
        return kl_coord_turn_next(t);
    }
    Keyload__V1__InspectQueueTransferReceiptAnswer a =
        KEYLOAD__V1__INSPECT_QUEUE_TRANSFER_RECEIPT_ANSWER__INIT;
    a.receipt_token.data = (uint8_t *)bytes;
    a.receipt_token.len = strlen(bytes);
    t->rc = KL_OK;
    t->ans.receipt = owned(&a.base);
    return kl_coord_turn_next(t);
}

/* A batch answered OK (no receipt body needed by the machine) or refused with code/detail. */
static kl_coord_turn_out feed_batch(kl_coord_turn *t, kl_code rc, const char *detail)
{
    ck_assert_ptr_nonnull(t->batch);
    if (rc != KL_OK) {
        set_error(t, rc, detail);
        return kl_coord_turn_next(t);
    }
    t->rc = KL_OK;
    t->ans.batch = NULL;
    return kl_coord_turn_next(t);
}

static kl_coord_turn_out feed_failure(kl_coord_turn *t, Keyload__V1__FailureVerdict v)
{
    ck_assert(t->at == KL_COORD_AT_FAILURE_READ);
    uint8_t witness[3] = {9, 9, 9};
    Keyload__V1__ReadQueueTransferFailureAnswer a = KEYLOAD__V1__READ_QUEUE_TRANSFER_FAILURE_ANSWER__INIT;
    a.verdict = v;
    if (v == KEYLOAD__V1__FAILURE_VERDICT__WITNESS_ISSUED) {
        a.witness_token.data = witness;
        a.witness_token.len = sizeof witness;
    }
    t->rc = KL_OK;
    t->ans.failure = owned(&a.base);
    return kl_coord_turn_next(t);
}

#define CONT KL_COORD_TURN_CONTINUE
#define AT(x) ck_assert_str_eq(kl_coord_turn_at_name(f.t.at), kl_coord_turn_at_name(KL_COORD_AT_##x)); \
    ck_assert_int_eq(f.t.at, KL_COORD_AT_##x)

/* The accept id of the fixture's event, derived independently of the machine. */
static void expected_cmd(turn_fixture *f, kl_coord_step step, char out[KL_GUID_TEXT_LEN + 1])
{
    kl_coord_tuple tu = {.principal_id = "ops", .tenant = "t", .database = "d", .source = &f->t.src,
                         .transfer_id = f->ev->transfer_id, .destination = &f->t.dst,
                         .fingerprint = f->ev->fingerprint, .fingerprint_len = f->ev->fingerprint_len,
                         .generation = f->ev->generation};
    uint8_t id[16];
    ck_assert_int_eq(kl_coord_command_id(step, &tu, id, NULL), KL_OK);
    kl_guid_format(id, out);
}

/* The seeds' order without a receipt: principal, source, receipt, Accept, reread, source,
 * receipt, Complete; the batches under the deterministic ids. */
START_TEST(test_turn_order_with_accept)
{
    turn_fixture f;
    turn_init(&f, false, false);
    char want[KL_GUID_TEXT_LEN + 1];
    AT(PRINCIPAL);
    ck_assert_int_eq(feed_principal(&f.t, KL_OK, "t"), CONT);
    AT(SOURCE);
    ck_assert_int_eq(feed_source(&f.t, KL_OK, PENDING, false), CONT);
    AT(RECEIPT);
    ck_assert_int_eq(feed_receipt(&f.t, NULL), CONT);
    AT(ACCEPT);
    expected_cmd(&f, KL_COORD_STEP_ACCEPT, want);
    ck_assert_str_eq(f.t.cmd, want);
    ck_assert_int_eq(feed_batch(&f.t, KL_OK, NULL), CONT);
    AT(REREAD);
    ck_assert_int_eq(feed_receipt(&f.t, "R1"), CONT);
    AT(RECHECK_SOURCE);
    ck_assert_int_eq(feed_source(&f.t, KL_OK, PENDING, false), CONT);
    AT(RECHECK_RECEIPT);
    ck_assert_int_eq(feed_receipt(&f.t, "R1"), CONT);
    AT(COMPLETE);
    expected_cmd(&f, KL_COORD_STEP_COMPLETE, want);
    ck_assert_str_eq(f.t.cmd, want);
    ck_assert_int_eq(feed_batch(&f.t, KL_OK, NULL), KL_COORD_TURN_DONE);
    ck_assert_uint_eq(atomic_load(&f.co->stats.accepted), 1);
    ck_assert_uint_eq(atomic_load(&f.co->stats.delivered), 1);
    kl_coord_turn_finish(&f.t, KL_COORD_TURN_DONE);
    size_t q, fl, b;
    kl_coord_buffer_counts(f.co->buffers[0], &q, &fl, &b);
    ck_assert_uint_eq(q + fl, 0); /* done: the slot is free */
    turn_clear(&f);
}
END_TEST

/* A receipt already there: no Accept; the proof read first is the one Complete carries. */
START_TEST(test_turn_order_receipt_present)
{
    turn_fixture f;
    turn_init(&f, false, false);
    ck_assert_int_eq(feed_principal(&f.t, KL_OK, "t"), CONT);
    ck_assert_int_eq(feed_source(&f.t, KL_OK, PENDING, false), CONT);
    ck_assert_int_eq(feed_receipt(&f.t, "R1"), CONT);
    AT(RECHECK_SOURCE);
    ck_assert_int_eq(feed_source(&f.t, KL_OK, PENDING, false), CONT);
    AT(RECHECK_RECEIPT);
    ck_assert_int_eq(feed_receipt(&f.t, "R1"), CONT);
    AT(COMPLETE);
    ck_assert_uint_eq(atomic_load(&f.co->stats.accept_sent), 0);
    ck_assert_int_eq(feed_batch(&f.t, KL_OK, NULL), KL_COORD_TURN_DONE);
    kl_coord_turn_finish(&f.t, KL_COORD_TURN_DONE);
    turn_clear(&f);
}
END_TEST

/* A retry goes back to the buffer with backoff and the same event (same ids later). */
static void finish_retry(turn_fixture *f, const char *stage)
{
    ck_assert_str_eq(f->t.stage, stage);
    kl_coord_turn_finish(&f->t, KL_COORD_TURN_RETRY);
    ck_assert_uint_eq(f->ev->attempt, 1);
    int64_t due;
    ck_assert(kl_coord_buffer_next_due(f->co->buffers[0], &due));
    ck_assert_int_ge(due, kl_coord_now_ms() + KL_COORD_BACKOFF_FIRST_MS - 5);
    ck_assert_uint_eq(atomic_load(&f->co->stats.retries), 1);
}

START_TEST(test_turn_principal_and_source_failures)
{
    turn_fixture f;
    /* The principal read fails: transient. */
    turn_init(&f, false, false);
    ck_assert_int_eq(feed_principal(&f.t, KL_UNAVAILABLE, NULL), KL_COORD_TURN_RETRY);
    finish_retry(&f, "principal");
    turn_clear(&f);
    /* The principal moved to another tenant: nothing is sent, retried. */
    turn_init(&f, false, false);
    ck_assert_int_eq(feed_principal(&f.t, KL_OK, "elsewhere"), KL_COORD_TURN_RETRY);
    ck_assert_str_eq(f.t.err.detail, "principal_tenant");
    finish_retry(&f, "principal");
    turn_clear(&f);
    /* The intent is gone: dropped. */
    turn_init(&f, false, false);
    ck_assert_int_eq(feed_principal(&f.t, KL_OK, "t"), CONT);
    ck_assert_int_eq(feed_source(&f.t, KL_NOT_FOUND, PENDING, false), KL_COORD_TURN_DROP);
    kl_coord_turn_finish(&f.t, KL_COORD_TURN_DROP);
    ck_assert_uint_eq(atomic_load(&f.co->stats.dropped), 1);
    turn_clear(&f);
    /* Delivered by someone else: done. */
    turn_init(&f, false, false);
    ck_assert_int_eq(feed_principal(&f.t, KL_OK, "t"), CONT);
    ck_assert_int_eq(feed_source(&f.t, KL_OK, KEYLOAD__V1__TRANSFER_STATE__DELIVERED, false),
                     KL_COORD_TURN_DONE);
    kl_coord_turn_finish(&f.t, KL_COORD_TURN_DONE);
    ck_assert_uint_eq(atomic_load(&f.co->stats.found_delivered), 1);
    turn_clear(&f);
    /* Another intent token stored: dropped (discovery brings the current one). */
    turn_init(&f, false, false);
    ck_assert_int_eq(feed_principal(&f.t, KL_OK, "t"), CONT);
    ck_assert_int_eq(feed_source(&f.t, KL_OK, PENDING, true), KL_COORD_TURN_DROP);
    kl_coord_turn_finish(&f.t, KL_COORD_TURN_DROP);
    ck_assert_uint_eq(atomic_load(&f.co->stats.proof_changed), 1);
    turn_clear(&f);
    /* The source read fails: transient. */
    turn_init(&f, false, false);
    ck_assert_int_eq(feed_principal(&f.t, KL_OK, "t"), CONT);
    ck_assert_int_eq(feed_source(&f.t, KL_UNAVAILABLE, PENDING, false), KL_COORD_TURN_RETRY);
    finish_retry(&f, "inspect_source");
    turn_clear(&f);
}
END_TEST

/* Up to the Accept (receipt absent). */
static void to_accept(turn_fixture *f)
{
    turn_init(f, false, false);
    ck_assert_int_eq(feed_principal(&f->t, KL_OK, "t"), CONT);
    ck_assert_int_eq(feed_source(&f->t, KL_OK, PENDING, false), CONT);
    ck_assert_int_eq(feed_receipt(&f->t, NULL), CONT);
    ck_assert_int_eq(f->t.at, KL_COORD_AT_ACCEPT);
}

START_TEST(test_turn_accept_failures)
{
    turn_fixture f;
    /* A terminal refusal: recorded, left pending, not retried. */
    to_accept(&f);
    ck_assert_int_eq(feed_batch(&f.t, KL_FAILED_PRECONDITION, "state"), KL_COORD_TURN_FAILED);
    ck_assert_str_eq(f.t.step, "accept");
    kl_coord_turn_finish(&f.t, KL_COORD_TURN_FAILED);
    ck_assert_uint_eq(kl_coord_failed_count(f.co->failed), 1);
    turn_clear(&f);
    /* A quota refusal: the failure is retained with the event under the Accept's id. */
    to_accept(&f);
    char cmd[KL_GUID_TEXT_LEN + 1];
    strcpy(cmd, f.t.cmd);
    ck_assert_int_eq(feed_batch(&f.t, KL_RESOURCE_EXHAUSTED, "limit:MaxScanRecords"),
                     KL_COORD_TURN_RECOVER);
    ck_assert(f.ev->has_failure && !f.ev->failure_in_complete);
    char failed[KL_GUID_TEXT_LEN + 1];
    kl_guid_format(f.ev->failed_command_id, failed);
    ck_assert_str_eq(failed, cmd);
    kl_coord_turn_finish(&f.t, KL_COORD_TURN_RECOVER);
    turn_clear(&f);
    /* The same code injected at coord.before_accept: nothing committed, so nothing to
     * retain: a terminal failure of the step. */
    to_accept(&f);
    f.t.stage = "before_accept";
    ck_assert_int_eq(feed_batch(&f.t, KL_RESOURCE_EXHAUSTED, "failpoint"), KL_COORD_TURN_FAILED);
    ck_assert(!f.ev->has_failure);
    kl_coord_turn_finish(&f.t, KL_COORD_TURN_FAILED);
    turn_clear(&f);
    /* An injected transient code is retried under the failpoint's name. */
    to_accept(&f);
    f.t.stage = "before_accept";
    ck_assert_int_eq(feed_batch(&f.t, KL_UNAVAILABLE, "failpoint"), KL_COORD_TURN_RETRY);
    finish_retry(&f, "before_accept");
    turn_clear(&f);
    /* A transient failure: retried (same ids). */
    to_accept(&f);
    ck_assert_int_eq(feed_batch(&f.t, KL_UNAVAILABLE, "no_answer"), KL_COORD_TURN_RETRY);
    finish_retry(&f, "accept");
    turn_clear(&f);
    /* Answered OK but the after_accept_sent failpoint fired: the answer is set aside. */
    to_accept(&f);
    f.t.after_failed = true;
    ck_assert_int_eq(feed_batch(&f.t, KL_OK, NULL), KL_COORD_TURN_RETRY);
    finish_retry(&f, "after_accept_sent");
    turn_clear(&f);
    /* Still no receipt after an Accept that answered OK: the outcome is unknown. */
    to_accept(&f);
    ck_assert_int_eq(feed_batch(&f.t, KL_OK, NULL), CONT);
    ck_assert_int_eq(feed_receipt(&f.t, NULL), KL_COORD_TURN_RETRY);
    ck_assert_int_eq(f.t.err.code, KL_UNKNOWN_WRITE_OUTCOME);
    finish_retry(&f, "reread_receipt");
    turn_clear(&f);
    /* A replay answered stale_authority: it did commit; the reread says what it did (a
     * refusal when there is still no receipt). */
    to_accept(&f);
    ck_assert_int_eq(feed_batch(&f.t, KL_PERMISSION_DENIED, "stale_authority"), CONT);
    AT(REREAD);
    ck_assert_int_eq(feed_receipt(&f.t, NULL), KL_COORD_TURN_FAILED);
    ck_assert_str_eq(f.t.step, "accept");
    kl_coord_turn_finish(&f.t, KL_COORD_TURN_FAILED);
    turn_clear(&f);
}
END_TEST

/* Up to the Complete (receipt "R1" present). */
static void to_complete(turn_fixture *f)
{
    turn_init(f, false, false);
    ck_assert_int_eq(feed_principal(&f->t, KL_OK, "t"), CONT);
    ck_assert_int_eq(feed_source(&f->t, KL_OK, PENDING, false), CONT);
    ck_assert_int_eq(feed_receipt(&f->t, "R1"), CONT);
    ck_assert_int_eq(feed_source(&f->t, KL_OK, PENDING, false), CONT);
    ck_assert_int_eq(feed_receipt(&f->t, "R1"), CONT);
    ck_assert_int_eq(f->t.at, KL_COORD_AT_COMPLETE);
}

START_TEST(test_turn_recheck_and_complete_failures)
{
    turn_fixture f;
    /* The receipt changed between the two reads: refused, retried. */
    turn_init(&f, false, false);
    ck_assert_int_eq(feed_principal(&f.t, KL_OK, "t"), CONT);
    ck_assert_int_eq(feed_source(&f.t, KL_OK, PENDING, false), CONT);
    ck_assert_int_eq(feed_receipt(&f.t, "R1"), CONT);
    ck_assert_int_eq(feed_source(&f.t, KL_OK, PENDING, false), CONT);
    ck_assert_int_eq(feed_receipt(&f.t, "R2"), KL_COORD_TURN_RETRY);
    ck_assert_str_eq(f.t.err.detail, "proof_changed");
    finish_retry(&f, "recheck_receipt");
    turn_clear(&f);
    /* ... or vanished. */
    turn_init(&f, false, false);
    ck_assert_int_eq(feed_principal(&f.t, KL_OK, "t"), CONT);
    ck_assert_int_eq(feed_source(&f.t, KL_OK, PENDING, false), CONT);
    ck_assert_int_eq(feed_receipt(&f.t, "R1"), CONT);
    ck_assert_int_eq(feed_source(&f.t, KL_OK, PENDING, false), CONT);
    ck_assert_int_eq(feed_receipt(&f.t, NULL), KL_COORD_TURN_RETRY);
    finish_retry(&f, "recheck_receipt");
    turn_clear(&f);
    /* A denied Complete waits for a repair, its failure retained. */
    to_complete(&f);
    ck_assert_int_eq(feed_batch(&f.t, KL_PERMISSION_DENIED, "grant:QueuePublish"),
                     KL_COORD_TURN_RECOVER);
    ck_assert(f.ev->has_failure && f.ev->failure_in_complete);
    kl_coord_turn_finish(&f.t, KL_COORD_TURN_RECOVER);
    turn_clear(&f);
    /* A terminal Complete refusal. */
    to_complete(&f);
    ck_assert_int_eq(feed_batch(&f.t, KL_CONFLICT, "receipt"), KL_COORD_TURN_FAILED);
    ck_assert_str_eq(f.t.step, "complete");
    kl_coord_turn_finish(&f.t, KL_COORD_TURN_FAILED);
    turn_clear(&f);
    /* A stale Complete replay: the source says whether it moved the intent. */
    to_complete(&f);
    ck_assert_int_eq(feed_batch(&f.t, KL_PERMISSION_DENIED, "stale_authority"), CONT);
    AT(COMPLETE_STALE);
    ck_assert_int_eq(feed_source(&f.t, KL_OK, KEYLOAD__V1__TRANSFER_STATE__DELIVERED, false),
                     KL_COORD_TURN_DONE);
    kl_coord_turn_finish(&f.t, KL_COORD_TURN_DONE);
    turn_clear(&f);
    to_complete(&f);
    ck_assert_int_eq(feed_batch(&f.t, KL_PERMISSION_DENIED, "stale_authority"), CONT);
    ck_assert_int_eq(feed_source(&f.t, KL_OK, PENDING, false), KL_COORD_TURN_FAILED);
    kl_coord_turn_finish(&f.t, KL_COORD_TURN_FAILED);
    turn_clear(&f);
    /* A transient Complete failure. */
    to_complete(&f);
    ck_assert_int_eq(feed_batch(&f.t, KL_DEADLINE_EXCEEDED, "no_answer"), KL_COORD_TURN_RETRY);
    finish_retry(&f, "complete");
    turn_clear(&f);
}
END_TEST

/* A stop ends the turn before the call it would have made, at every point. */
START_TEST(test_turn_cancelled_between_calls)
{
    turn_fixture f;
    turn_init(&f, false, false);
    ck_assert_int_eq(feed_principal(&f.t, KL_OK, "t"), CONT);
    ck_assert_int_eq(feed_source(&f.t, KL_OK, PENDING, false), CONT);
    ck_assert_int_eq(feed_receipt(&f.t, NULL), CONT);
    ck_assert_int_eq(feed_batch(&f.t, KL_OK, NULL), CONT);
    atomic_store(&f.co->stopping, true);
    ck_assert_int_eq(feed_receipt(&f.t, "R1"), KL_COORD_TURN_CANCELLED);
    ck_assert_str_eq(f.t.stage, "recheck_source");
    kl_coord_turn_finish(&f.t, KL_COORD_TURN_CANCELLED);
    ck_assert_uint_eq(atomic_load(&f.co->stats.cancelled), 1);
    size_t q, fl, b;
    kl_coord_buffer_counts(f.co->buffers[0], &q, &fl, &b);
    ck_assert_uint_eq(q + fl, 0);
    turn_clear(&f);
    /* A call the pool never started is cancelled through the same path. */
    turn_init(&f, false, false);
    ck_assert_int_eq(kl_coord_turn_cancel(&f.t), KL_COORD_TURN_CANCELLED);
    ck_assert_str_eq(f.t.stage, "principal");
    kl_coord_turn_finish(&f.t, KL_COORD_TURN_CANCELLED);
    turn_clear(&f);
}
END_TEST

/* A retained failure: principal, source, one failure read, then Advance / Complete path /
 * wait; a denied Complete rereads its receipt before the failure read. */
START_TEST(test_turn_recovery_paths)
{
    turn_fixture f;
    turn_init(&f, true, false);
    AT(RECOVER_PRINCIPAL);
    ck_assert_int_eq(feed_principal(&f.t, KL_OK, "t"), CONT);
    AT(RECOVER_SOURCE);
    ck_assert_int_eq(feed_source(&f.t, KL_OK, PENDING, false), CONT);
    AT(FAILURE_READ);
    ck_assert_int_eq(feed_failure(&f.t, KEYLOAD__V1__FAILURE_VERDICT__WITNESS_ISSUED), CONT);
    AT(ADVANCE);
    char want[KL_GUID_TEXT_LEN + 1];
    expected_cmd(&f, KL_COORD_STEP_ADVANCE, want);
    ck_assert_str_eq(f.t.cmd, want);
    ck_assert_int_eq(feed_batch(&f.t, KL_OK, NULL), KL_COORD_TURN_DROP);
    ck_assert_uint_eq(atomic_load(&f.co->stats.advanced), 1);
    kl_coord_turn_finish(&f.t, KL_COORD_TURN_DROP);
    turn_clear(&f);
    /* RECEIPT_EXISTS: the ordinary path from its first step. */
    turn_init(&f, true, false);
    ck_assert_int_eq(feed_principal(&f.t, KL_OK, "t"), CONT);
    ck_assert_int_eq(feed_source(&f.t, KL_OK, PENDING, false), CONT);
    ck_assert_int_eq(feed_failure(&f.t, KEYLOAD__V1__FAILURE_VERDICT__RECEIPT_EXISTS), CONT);
    AT(PRINCIPAL);
    ck_assert(!f.ev->has_failure);
    kl_coord_turn_finish(&f.t, kl_coord_turn_cancel(&f.t));
    turn_clear(&f);
    /* Unchanged: the failure is kept, the event waits. */
    turn_init(&f, true, false);
    ck_assert_int_eq(feed_principal(&f.t, KL_OK, "t"), CONT);
    ck_assert_int_eq(feed_source(&f.t, KL_OK, PENDING, false), CONT);
    ck_assert_int_eq(feed_failure(&f.t, KEYLOAD__V1__FAILURE_VERDICT__UNCHANGED), KL_COORD_TURN_RECOVER);
    kl_coord_turn_finish(&f.t, KL_COORD_TURN_RECOVER);
    turn_clear(&f);
    /* A denied Complete: its receipt first, a repair after the witness. */
    turn_init(&f, true, true);
    ck_assert_int_eq(feed_principal(&f.t, KL_OK, "t"), CONT);
    ck_assert_int_eq(feed_source(&f.t, KL_OK, PENDING, false), CONT);
    AT(FAILURE_RECEIPT);
    ck_assert_int_eq(feed_receipt(&f.t, "R1"), CONT);
    ck_assert_int_eq(feed_failure(&f.t, KEYLOAD__V1__FAILURE_VERDICT__WITNESS_ISSUED), CONT);
    expected_cmd(&f, KL_COORD_STEP_REPAIR, want);
    ck_assert_str_eq(f.t.cmd, want);
    ck_assert_int_eq(feed_batch(&f.t, KL_FAILED_PRECONDITION, "witness"), KL_COORD_TURN_FAILED);
    ck_assert_str_eq(f.t.step, "repair");
    kl_coord_turn_finish(&f.t, KL_COORD_TURN_FAILED);
    turn_clear(&f);
    /* ... whose receipt is gone: retried. */
    turn_init(&f, true, true);
    ck_assert_int_eq(feed_principal(&f.t, KL_OK, "t"), CONT);
    ck_assert_int_eq(feed_source(&f.t, KL_OK, PENDING, false), CONT);
    ck_assert_int_eq(feed_receipt(&f.t, NULL), KL_COORD_TURN_RETRY);
    finish_retry(&f, "failure_read");
    turn_clear(&f);
}
END_TEST

Suite *suite_coordinator(void)
{
    Suite *s = suite_create("coordinator");
    TCase *tc = tcase_create("coordinator");
    /* The buffer stress builds 20,000 events under ASan: seconds of CPU, several times that
     * on a loaded machine (Check's default is 4 s). */
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_command_id_deterministic);
    tcase_add_test(tc, test_command_id_separation);
    tcase_add_test(tc, test_command_id_never_zero_and_refusals);
    tcase_add_test(tc, test_config_defaults);
    tcase_add_test(tc, test_config_metrics);
    tcase_add_test(tc, test_config_null_principal);
    tcase_add_test(tc, test_config_bad_fields_named);
    tcase_add_test(tc, test_buffer_bounded_dedup);
    tcase_add_test(tc, test_buffer_stress);
    tcase_add_test(tc, test_buffer_refuses_zero_capacity);
    tcase_add_test(tc, test_backoff);
    tcase_add_test(tc, test_failed_table_bound);
    tcase_add_test(tc, test_intent_decode);
    tcase_add_test(tc, test_event_from_item);
    tcase_add_test(tc, test_discovery_take);
    tcase_add_test(tc, test_dispatch_by_identity);
    tcase_add_test(tc, test_status_snapshot);
    tcase_add_test(tc, test_terminal_codes);
    tcase_add_test(tc, test_turn_order_with_accept);
    tcase_add_test(tc, test_turn_order_receipt_present);
    tcase_add_test(tc, test_turn_principal_and_source_failures);
    tcase_add_test(tc, test_turn_accept_failures);
    tcase_add_test(tc, test_turn_recheck_and_complete_failures);
    tcase_add_test(tc, test_turn_cancelled_between_calls);
    tcase_add_test(tc, test_turn_recovery_paths);
    suite_add_tcase(s, tc);
    return s;
}
