/* The scripted golden workload: every mutation kind but the repair advance committed at
 * least once (a repair witness needs a denied Accept and a later policy change; its
 * encoding and digest are in the canonical vectors), across partition 0 (catalog), 1 (source
 * queues) and 2 (destination queues). Each step's request and answer is kept in
 * run->steps. Every step's outcome is committed, so a replay answers it from the store. */
#include "tests/golden/build.h"
#include "tests/golden/golden.h"

#include "common/canon.h"
#include "keyload/v1/transfer.pb-c.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#define P0 0
#define P1 1
#define P2 2

static const uint8_t tid_done[16] = {0x11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x5a};
static const uint8_t tid_retry[16] = {0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x5a};

/* Submits the mutations as one batch under command id (cmd_byte, 0x33...), records the step
 * and returns its reply (owned by the run). The clock moves one second per step. */
static golden_reply *step(golden_run *run, const char *name, int p, const char *principal,
                          uint8_t cmd_byte, Keyload__V1__Mutation **m, size_t n, kl_code want)
{
    if (run->n_steps == sizeof run->steps / sizeof run->steps[0])
        golden_die("too many steps");
    golden_step *s = &run->steps[run->n_steps++];
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->principal, sizeof s->principal, "%s", principal);
    s->partition = p;
    uint8_t cmd[16];
    memset(cmd, 0x33, sizeof cmd);
    cmd[0] = cmd_byte;
    s->req = gb_pack(cmd, m, n, &s->req_len);
    golden_now += 1000;
    golden_submit(&run->nodes[p], principal, s->req, s->req_len, &s->reply);
    if (s->reply.code != want)
        golden_die("step %s: want %s, got %s (%s: %s)", name, kl_code_name(want), kl_code_name(s->reply.code),
                   s->reply.err.detail, s->reply.err.message);
    return &s->reply;
}

static golden_reply *step1(golden_run *run, const char *name, int p, uint8_t cmd_byte, Keyload__V1__Mutation *m,
                           kl_code want)
{
    return step(run, name, p, "local", cmd_byte, &m, 1, want);
}

/* The first result of an OK reply, decoded into *rc (caller frees). */
static Keyload__V1__MutationResult *result(golden_reply *r, Keyload__V1__BatchReceipt **rc)
{
    *rc = keyload__v1__batch_receipt__unpack(NULL, r->len, r->receipt);
    if (*rc == NULL || (*rc)->n_results < 1)
        golden_die("receipt does not decode");
    return (*rc)->results[0];
}

static Keyload__V1__QueueLaneRef *dl(const char *q, const char *lane) { return gb_lane("default", "default", q, lane); }

static void pk_of(uint8_t pk[32], uint8_t seed_byte)
{
    uint8_t seed[32], sk[64];
    memset(seed, seed_byte, sizeof seed);
    crypto_sign_seed_keypair(pk, sk, seed);
}

static void sync_catalog(golden_run *run)
{
    golden_carry_catalog(&run->nodes[P0], &run->nodes[P1]);
    golden_carry_catalog(&run->nodes[P0], &run->nodes[P2]);
}

/* Catalog: bootstrap, databases, principals, grants, limits, the database pause switch and
 * queue definitions, on partition 0. */
static void catalog_steps(golden_run *run)
{
    uint8_t root[32], alice[32], alice2[32], proof[32];
    pk_of(root, 0x01);
    pk_of(alice, 0x02);
    pk_of(alice2, 0x03);
    if (kl_canon_bootstrap_proof(golden_cluster_secret, "acme", "main", "root", root, 32, proof) != 0)
        golden_die("bootstrap proof");
    step1(run, "bootstrap", P0, 0x01, gb_bootstrap("acme", "main", "root", root, proof), KL_OK);
    step1(run, "create_database", P0, 0x02,
          gb_create_database("default", "default", gb_db_limits(0, 0, 0, true, 3)), KL_OK);
    step1(run, "create_principal", P0, 0x03, gb_create_principal("default", "alice", alice, false, false, NULL),
          KL_OK);
    step1(run, "grant_publish", P0, 0x04,
          gb_grant("alice", "default", KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "src*", "f1", "h1"), KL_OK);
    step1(run, "grant_consume", P0, 0x05,
          gb_grant("alice", "default", KEYLOAD__V1__PERMISSION__QUEUE_CONSUME, "*", "f1", NULL), KL_OK);
    step1(run, "revoke_consume", P0, 0x06,
          gb_revoke("alice", "default", KEYLOAD__V1__PERMISSION__QUEUE_CONSUME, "*"), KL_OK);
    step1(run, "set_principal_key", P0, 0x07, gb_set_key("alice", alice2), KL_OK);
    step1(run, "set_database_limits", P0, 0x08,
          gb_set_db_limits("default", "default", gb_db_limits(5000, 0, 0, true, 3)), KL_OK);
    step1(run, "pause_database", P0, 0x09, gb_pause("default", "default", NULL, true), KL_OK);
    step1(run, "resume_database", P0, 0x0a, gb_pause("default", "default", NULL, false), KL_OK);
    step1(run, "create_queue_src", P0, 0x0b, gb_create_queue(dl("src", NULL), 100, 0, 5, NULL, P1), KL_OK);
    step1(run, "create_queue_tmp", P0, 0x0c, gb_create_queue(dl("tmp", NULL), 0, 0, 0, NULL, P1), KL_OK);
    step1(run, "create_queue_dst", P0, 0x0d, gb_create_queue(dl("dst", NULL), 0, 0, 0, NULL, P2), KL_OK);
    step1(run, "create_queue_small", P0, 0x0e, gb_create_queue(dl("small", NULL), 1, 0, 0, NULL, P2), KL_OK);
    sync_catalog(run);
}

/* Messages on partition 1: enqueue (a local administrator and a granted principal),
 * receive, ack, release, the lane pause switch; then the two-step delete of "tmp". */
static void queue_steps(golden_run *run)
{
    step1(run, "enqueue_rich", P1, 0x20, gb_enqueue(dl("src", NULL), gb_msg_rich()), KL_OK);
    Keyload__V1__Mutation *m = gb_enqueue(dl("src", NULL), gb_msg_keys("from alice", "f1", "h1"));
    step(run, "enqueue_as_alice", P1, "alice", 0x21, &m, 1, KL_OK);
    Keyload__V1__Mutation *two[2] = {gb_enqueue(dl("src", "eu"), gb_msg("eu one")),
                                     gb_enqueue(dl("src", NULL), gb_msg("plain"))};
    step(run, "enqueue_two", P1, "local", 0x22, two, 2, KL_OK);
    golden_reply *r = step1(run, "receive", P1, 0x23, gb_receive(dl("src", NULL), 2, 30000, 0), KL_OK);
    Keyload__V1__BatchReceipt *rc;
    Keyload__V1__MutationResult *res = result(r, &rc);
    if (res->kind_case != KEYLOAD__V1__MUTATION_RESULT__KIND_RECEIVED || res->received->n_messages != 2)
        golden_die("receive leased %zu messages", res->received ? res->received->n_messages : 0);
    ProtobufCBinaryData t0 = golden_bin(res->received->messages[0]->lease_token.data,
                                        res->received->messages[0]->lease_token.len);
    ProtobufCBinaryData t1 = golden_bin(res->received->messages[1]->lease_token.data,
                                        res->received->messages[1]->lease_token.len);
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    step1(run, "ack", P1, 0x24, gb_ack(dl("src", NULL), &t0, 1), KL_OK);
    step1(run, "release", P1, 0x25, gb_release(dl("src", NULL), &t1, 1), KL_OK);
    step1(run, "pause_lane", P1, 0x26, gb_pause("default", "default", dl("src", "eu"), true), KL_OK);
    step1(run, "resume_lane", P1, 0x27, gb_pause("default", "default", dl("src", "eu"), false), KL_OK);
    step1(run, "delete_queue_close", P1, 0x28, gb_delete_queue(dl("tmp", NULL)), KL_OK);
    step1(run, "delete_queue_drop", P0, 0x28, gb_delete_queue(dl("tmp", NULL)), KL_OK);
    sync_catalog(run);
}

/* A transfer read on node p; the answer is printed to the tokens file and returned. */
static uint8_t *xfer_read(golden_run *run, int p, kl_node_read_kind kind, const char *what,
                          const uint8_t *req, size_t len, size_t *alen)
{
    uint8_t *ans;
    kl_err err;
    kl_code rc = kl_node_transfer_read(run->nodes[p].node, kind, "local", req, len, &ans, alen, &err);
    if (rc != KL_OK)
        golden_die("%s: %s (%s: %s)", what, kl_code_name(rc), err.detail, err.message);
    if (run->tokens) {
        fprintf(run->tokens, "read %s p%d answer ", what, p);
        golden_hex(run->tokens, ans, *alen);
        fputc('\n', run->tokens);
    }
    return ans;
}

static ProtobufCBinaryData intent_of(golden_reply *r)
{
    Keyload__V1__BatchReceipt *rc;
    Keyload__V1__MutationResult *res = result(r, &rc);
    if (res->kind_case != KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_CREATED &&
        res->kind_case != KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ADVANCED)
        golden_die("not a transfer intent");
    ProtobufCBinaryData t = res->kind_case == KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_CREATED
        ? golden_bin(res->transfer_created->intent_token.data, res->transfer_created->intent_token.len)
        : golden_bin(res->transfer_advanced->intent_token.data, res->transfer_advanced->intent_token.len);
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    return t;
}

/* Create on 1, accept on 2, read the receipt on 2, complete on 1. */
static void transfer_steps(golden_run *run)
{
    golden_reply *r = step1(run, "create_transfer", P1, 0x40,
                            gb_create_transfer(dl("src", NULL), tid_done, dl("dst", NULL), gb_msg_rich()), KL_OK);
    ProtobufCBinaryData intent = intent_of(r);
    step1(run, "accept_transfer", P2, 0x41, gb_accept(dl("dst", NULL), intent), KL_OK);
    Keyload__V1__InspectQueueTransferReceiptRequest q = KEYLOAD__V1__INSPECT_QUEUE_TRANSFER_RECEIPT_REQUEST__INIT;
    q.destination_queue = dl("dst", NULL);
    q.source_queue = dl("src", NULL);
    q.transfer_id = golden_bin(tid_done, 16);
    uint8_t buf[1024];
    size_t n = keyload__v1__inspect_queue_transfer_receipt_request__pack(&q, buf), alen;
    uint8_t *ans = xfer_read(run, P2, KL_NODE_TRANSFER_RECEIPT, "transfer_receipt", buf, n, &alen);
    Keyload__V1__InspectQueueTransferReceiptAnswer *a =
        keyload__v1__inspect_queue_transfer_receipt_answer__unpack(NULL, alen, ans);
    free(ans);
    if (a == NULL)
        golden_die("receipt answer does not decode");
    ProtobufCBinaryData receipt = golden_bin(a->receipt_token.data, a->receipt_token.len);
    keyload__v1__inspect_queue_transfer_receipt_answer__free_unpacked(a, NULL);
    step1(run, "complete_transfer", P1, 0x42, gb_complete(dl("src", NULL), tid_done, receipt), KL_OK);
}

/* The failure witness of the refused Accept (command 0x52) of intent on partition 2. */
static ProtobufCBinaryData witness_of(golden_run *run, ProtobufCBinaryData intent)
{
    uint8_t cmd[16];
    memset(cmd, 0x33, sizeof cmd);
    cmd[0] = 0x52;
    Keyload__V1__ReadQueueTransferFailureRequest q = KEYLOAD__V1__READ_QUEUE_TRANSFER_FAILURE_REQUEST__INIT;
    q.destination_queue = dl("small", "default");
    q.intent_token = intent;
    q.failed_command_id = golden_bin(cmd, 16);
    uint8_t buf[2048];
    size_t n = keyload__v1__read_queue_transfer_failure_request__pack(&q, buf), alen;
    uint8_t *ans = xfer_read(run, P2, KL_NODE_TRANSFER_FAILURE, "transfer_failure", buf, n, &alen);
    Keyload__V1__ReadQueueTransferFailureAnswer *a =
        keyload__v1__read_queue_transfer_failure_answer__unpack(NULL, alen, ans);
    free(ans);
    if (a == NULL || a->verdict != KEYLOAD__V1__FAILURE_VERDICT__WITNESS_ISSUED)
        golden_die("no failure witness");
    ProtobufCBinaryData w = golden_bin(a->witness_token.data, a->witness_token.len);
    keyload__v1__read_queue_transfer_failure_answer__free_unpacked(a, NULL);
    return w;
}

/* A transfer into the full "small": Accept refused RESOURCE_EXHAUSTED (a committed
 * no-effect outcome), room made, the witness read, the attempt advanced, accepted. */
static void advance_steps(golden_run *run)
{
    golden_reply *r = step1(run, "create_transfer_small", P1, 0x50,
                            gb_create_transfer(dl("src", NULL), tid_retry, dl("small", NULL), gb_msg("retry")), KL_OK);
    ProtobufCBinaryData intent = intent_of(r);
    step1(run, "fill_small", P2, 0x51, gb_enqueue(dl("small", NULL), gb_msg("filler")), KL_OK);
    step1(run, "accept_refused_full", P2, 0x52, gb_accept(dl("small", NULL), intent), KL_RESOURCE_EXHAUSTED);
    r = step1(run, "receive_small", P2, 0x53, gb_receive(dl("small", NULL), 1, 30000, 0), KL_OK);
    Keyload__V1__BatchReceipt *rc;
    Keyload__V1__MutationResult *res = result(r, &rc);
    if (res->received == NULL || res->received->n_messages != 1)
        golden_die("receive_small leased nothing");
    ProtobufCBinaryData tok = golden_bin(res->received->messages[0]->lease_token.data,
                                         res->received->messages[0]->lease_token.len);
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    step1(run, "ack_small", P2, 0x54, gb_ack(dl("small", NULL), &tok, 1), KL_OK);
    ProtobufCBinaryData w = witness_of(run, intent);
    r = step1(run, "advance_attempt", P1, 0x56, gb_advance(dl("src", NULL), tid_retry, w, false), KL_OK);
    ProtobufCBinaryData next = intent_of(r);
    step1(run, "accept_generation_2", P2, 0x57, gb_accept(dl("small", NULL), next), KL_OK);
}

void golden_workload(golden_run *run)
{
    catalog_steps(run);
    queue_steps(run);
    transfer_steps(run);
    advance_steps(run);
    golden_arena_free();
}
