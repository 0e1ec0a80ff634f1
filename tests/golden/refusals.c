/* Refused batches after the golden workload: each refusal's code, detail and message text
 * (which a code move must keep as they are), one or more per check of validation,
 * authorization and evaluation. Printed to the workload vectors, not replayed: a refusal
 * that commits nothing is evaluated again on a replay, against whatever state is then. */
#include "tests/golden/build.h"
#include "tests/golden/golden.h"

#include "common/canon.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#define P0 0
#define P1 1
#define P2 2

static void print_reply(golden_run *run, const char *name, int p, const golden_reply *r)
{
    if (run->tokens == NULL)
        return;
    fprintf(run->tokens, "refusal %s p%d %s detail=%s message=%s", name, p, kl_code_name(r->code), r->err.detail,
            r->code == KL_OK ? "" : r->err.message);
    if (r->code == KL_OK) {
        fprintf(run->tokens, " receipt=");
        golden_hex(run->tokens, r->receipt, r->len);
    }
    fputc('\n', run->tokens);
}

static void refuse_bytes(golden_run *run, const char *name, int p, const char *principal, const uint8_t *req,
                         size_t len)
{
    golden_now += 1000;
    golden_reply r;
    golden_submit(&run->nodes[p], principal, req, len, &r);
    print_reply(run, name, p, &r);
    golden_reply_free(&r);
}

static void refuse_n(golden_run *run, const char *name, int p, const char *principal, uint8_t cmd_byte,
                     Keyload__V1__Mutation **m, size_t n)
{
    uint8_t cmd[16];
    memset(cmd, 0x33, sizeof cmd);
    cmd[0] = cmd_byte;
    size_t len;
    uint8_t *req = gb_pack(cmd, m, n, &len);
    refuse_bytes(run, name, p, principal, req, len);
    free(req);
}

static void refuse(golden_run *run, const char *name, int p, uint8_t cmd_byte, Keyload__V1__Mutation *m)
{
    refuse_n(run, name, p, "local", cmd_byte, &m, 1);
}

static Keyload__V1__QueueLaneRef *dl(const char *q, const char *lane) { return gb_lane("default", "default", q, lane); }

/* The shape of a batch and of a message. */
static void batch_refusals(golden_run *run)
{
    refuse_n(run, "empty_batch", P1, "local", 0x90, NULL, 0);
    static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0x01};
    refuse_bytes(run, "garbage_request", P1, "local", garbage, sizeof garbage);
    uint8_t zero[16] = {0};
    Keyload__V1__Mutation *m = gb_enqueue(dl("src", NULL), gb_msg("x"));
    size_t len;
    uint8_t *req = gb_pack(zero, &m, 1, &len);
    refuse_bytes(run, "zero_command_id", P1, "local", req, len);
    free(req);
    Keyload__V1__Mutation **many = golden_alloc(1001 * sizeof *many);
    for (int i = 0; i < 1001; i++)
        many[i] = m;
    refuse_n(run, "too_many_mutations", P1, "local", 0x91, many, 1001);
    size_t big = 2u << 20;
    char *body = golden_alloc(big + 1);
    memset(body, 'b', big);
    refuse(run, "batch_too_big", P1, 0x92, gb_enqueue(dl("src", NULL), gb_msg(body)));
    Keyload__V1__Mutation *mixed[2] = {gb_create_database("default", "other", NULL), gb_enqueue(dl("src", NULL), gb_msg("x"))};
    refuse_n(run, "catalog_mixed_with_queue", P0, "local", 0x93, mixed, 2);
    refuse(run, "catalog_on_data_partition", P1, 0x94, gb_create_database("default", "other", NULL));
    refuse(run, "enqueue_missing_message", P1, 0x95, gb_enqueue(dl("src", NULL), NULL));
    Keyload__V1__EnqueueMessage *dup = gb_msg_rich();
    dup->headers[1]->key = dup->headers[0]->key;
    refuse(run, "enqueue_duplicate_header", P1, 0x96, gb_enqueue(dl("src", NULL), dup));
    Keyload__V1__EnqueueMessage *neg = gb_msg("x");
    neg->delay_ms = -1;
    refuse(run, "enqueue_negative_delay", P1, 0x97, gb_enqueue(dl("src", NULL), neg));
    refuse(run, "enqueue_bad_lane", P1, 0x98, gb_enqueue(dl("src", "bad lane!"), gb_msg("x")));
    refuse(run, "enqueue_unknown_queue", P1, 0x99, gb_enqueue(dl("nope", NULL), gb_msg("x")));
    m = gb_enqueue(dl("src", NULL), gb_msg("changed"));
    refuse_n(run, "command_id_reused", P1, "local", 0x20, &m, 1);
}

/* Receive, ack and release arguments and tokens. */
static void lease_refusals(golden_run *run)
{
    refuse(run, "receive_zero_max", P1, 0xa0, gb_receive(dl("src", NULL), 0, 30000, 0));
    refuse(run, "receive_lease_too_long", P1, 0xa1, gb_receive(dl("src", NULL), 1, 0xffffffffu, 0));
    refuse(run, "receive_wait_too_long", P1, 0xa2, gb_receive(dl("src", NULL), 1, 30000, 999999));
    refuse(run, "ack_no_tokens", P1, 0xa3, gb_ack(dl("src", NULL), NULL, 0));
    uint8_t t[16];
    memset(t, 0x99, sizeof t);
    ProtobufCBinaryData unknown = {sizeof t, t}, shorter = {3, t};
    refuse(run, "ack_unknown_token", P1, 0xa4, gb_ack(dl("src", NULL), &unknown, 1));
    refuse(run, "release_short_token", P1, 0xa5, gb_release(dl("src", NULL), &shorter, 1));
}

/* Catalog checks on partition 0. */
static void catalog_refusals(golden_run *run)
{
    uint8_t pk[32], sk[64], seed[32], proof[32];
    memset(seed, 0x09, sizeof seed);
    crypto_sign_seed_keypair(pk, sk, seed);
    if (kl_canon_bootstrap_proof(golden_cluster_secret, "acme", "two", "root2", pk, 32, proof) != 0)
        golden_die("bootstrap proof");
    refuse(run, "bootstrap_again", P0, 0xb0, gb_bootstrap("acme", "two", "root2", pk, proof));
    Keyload__V1__Mutation *b = gb_bootstrap("acme", "two", "root2", pk, proof);
    b->bootstrap->proof.len = 31;
    refuse(run, "bootstrap_short_proof", P0, 0xb1, b);
    refuse(run, "create_queue_exists", P0, 0xb2, gb_create_queue(dl("src", NULL), 0, 0, 0, NULL, P1));
    refuse(run, "create_queue_bad_name", P0, 0xb3, gb_create_queue(dl("bad name!", NULL), 0, 0, 0, NULL, P1));
    refuse(run, "create_queue_bad_partition", P0, 0xb4, gb_create_queue(dl("other", NULL), 0, 0, 0, NULL, 7));
    refuse(run, "create_queue_unknown_dlq", P0, 0xb5, gb_create_queue(dl("other", NULL), 0, 0, 0, "nope", P1));
    refuse(run, "create_database_exists", P0, 0xb6, gb_create_database("default", "default", NULL));
    Keyload__V1__Mutation *cp = gb_create_principal("default", "bob", pk, false, false, NULL);
    cp->create_principal->public_key.len = 31;
    refuse(run, "create_principal_short_key", P0, 0xb7, cp);
    refuse(run, "create_principal_exists", P0, 0xb8, gb_create_principal("default", "alice", pk, false, false, NULL));
    Keyload__V1__Mutation *g = gb_grant("alice", "default", KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "src", NULL, NULL);
    g->grant_permission->grant = NULL;
    refuse(run, "grant_missing", P0, 0xb9, g);
    refuse(run, "grant_bad_pattern", P0, 0xba,
           gb_grant("alice", "default", KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "a*b*", NULL, NULL));
    refuse(run, "grant_unspecified_permission", P0, 0xbb,
           gb_grant("alice", "default", KEYLOAD__V1__PERMISSION__PERMISSION_UNSPECIFIED, "src", NULL, NULL));
    refuse(run, "revoke_unknown_principal", P0, 0xbc,
           gb_revoke("bob", "default", KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "src"));
    refuse(run, "set_key_unknown_principal", P0, 0xbd, gb_set_key("bob", pk));
    refuse(run, "set_limits_loosen", P0, 0xbe,
           gb_set_db_limits("default", "default", gb_db_limits(0, 1ull << 40, 0, false, 0)));
    refuse(run, "delete_queue_not_empty", P1, 0xbf, gb_delete_queue(dl("src", NULL)));
}

/* What alice (QueuePublish on "src*" with field f1 and header h1) may not do. */
static void access_refusals(golden_run *run)
{
    Keyload__V1__Mutation *m = gb_enqueue(dl("dst", NULL), gb_msg("x"));
    refuse_n(run, "alice_publish_ungranted_queue", P2, "alice", 0xc0, &m, 1);
    m = gb_enqueue(dl("src", NULL), gb_msg_keys("x", "f2", "h1"));
    refuse_n(run, "alice_field_ungranted", P1, "alice", 0xc1, &m, 1);
    m = gb_enqueue(dl("src", NULL), gb_msg_keys("x", "f1", "h2"));
    refuse_n(run, "alice_header_ungranted", P1, "alice", 0xc2, &m, 1);
    m = gb_receive(dl("src", NULL), 1, 1000, 0);
    refuse_n(run, "alice_consume_revoked", P1, "alice", 0xc3, &m, 1);
    m = gb_create_queue(dl("mine", NULL), 0, 0, 0, NULL, P1);
    refuse_n(run, "alice_not_admin", P0, "alice", 0xc4, &m, 1);
    m = gb_enqueue(dl("src", NULL), gb_msg("x"));
    refuse_n(run, "unknown_principal", P1, "mallory", 0xc5, &m, 1);
}

/* Transfer arguments and tokens. */
static void transfer_refusals(golden_run *run)
{
    uint8_t zero[16] = {0}, tid[16] = {0x13, [15] = 0x5a};
    ProtobufCBinaryData junk = {2, (uint8_t *)"xx"}, none = {0, NULL};
    refuse(run, "transfer_zero_id", P1, 0xd0, gb_create_transfer(dl("src", NULL), zero, dl("dst", NULL), gb_msg("x")));
    refuse(run, "transfer_same_partition", P1, 0xd1,
           gb_create_transfer(dl("src", NULL), tid, dl("src", "eu"), gb_msg("x")));
    refuse(run, "transfer_missing_destination", P1, 0xd2, gb_create_transfer(dl("src", NULL), tid, NULL, gb_msg("x")));
    refuse(run, "accept_junk_token", P2, 0xd3, gb_accept(dl("dst", NULL), junk));
    refuse(run, "accept_missing_token", P2, 0xd4, gb_accept(dl("dst", NULL), none));
    refuse(run, "complete_unknown_transfer", P1, 0xd5, gb_complete(dl("src", NULL), tid, junk));
    refuse(run, "advance_missing_witness", P1, 0xd6, gb_advance(dl("src", NULL), tid, none, false));
    refuse(run, "repair_junk_witness", P1, 0xd7, gb_advance(dl("src", NULL), tid, junk, true));
    refuse(run, "pause_unknown_lane_queue", P1, 0xd8, gb_pause("default", "default", dl("nope", NULL), true));
}

void golden_refusals(golden_run *run)
{
    batch_refusals(run);
    lease_refusals(run);
    catalog_refusals(run);
    access_refusals(run);
    transfer_refusals(run);
    golden_arena_free();
}
