/* fuzz_q1: libFuzzer target for Q1 statements (common/q1.h, common/q1_plan.h), the text
 * keyloadd parses from every keyload.v1.Query request before it touches any state.
 * Input bytes are a statement. Besides "no crash, no leak, no undefined behaviour" it checks,
 * aborting when one fails:
 *   1. a refusal is INVALID_ARGUMENT (or INTERNAL for memory) with a message and a detail,
 *      and leaves the call empty;
 *   2. a parsed call maps (kl_q1_plan_build) either to a refusal as in 1, or to a native
 *      request that decodes as the type its operation names (a BatchRequest of exactly one
 *      mutation under a valid 16-byte command id, or the transfer read request), routed by
 *      a valid queue name;
 *   3. parsing is deterministic: the same bytes parse to the same alias and argument count. */
#include "common/guid.h"
#include "common/names.h"
#include "common/q1.h"
#include "common/q1_plan.h"
#include "keyload/v1/queue.pb-c.h"
#include "keyload/v1/transfer.pb-c.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *what)
{
    fprintf(stderr, "fuzz_q1: property violated: %s\n", what);
    abort();
}

static void check_refusal(kl_code rc, const kl_err *e)
{
    if (rc != KL_INVALID_ARGUMENT && rc != KL_INTERNAL)
        die("a refusal is not INVALID_ARGUMENT");
    if (e->message[0] == '\0' || e->detail[0] == '\0')
        die("a refusal without message or detail");
}

static void check_plan(const kl_q1_plan *p)
{
    kl_err e;
    if (kl_name_check("queue", p->queue, &e) != KL_OK)
        die("a plan routed by an invalid queue name");
    if (p->op == KL_Q1_OP_BATCH) {
        Keyload__V1__BatchRequest *b = keyload__v1__batch_request__unpack(NULL, p->request_len, p->request);
        if (b == NULL || b->n_mutations != 1 || !kl_guid_valid(b->command_id.data, b->command_id.len))
            die("a batch plan does not decode as one mutation under a valid command id");
        keyload__v1__batch_request__free_unpacked(b, NULL);
    } else if (p->op == KL_Q1_OP_INSPECT_TRANSFER) {
        Keyload__V1__InspectQueueTransferRequest *r =
            keyload__v1__inspect_queue_transfer_request__unpack(NULL, p->request_len, p->request);
        if (r == NULL || r->source_queue == NULL)
            die("an inspect plan does not decode");
        keyload__v1__inspect_queue_transfer_request__free_unpacked(r, NULL);
    } else if (p->op == KL_Q1_OP_TRANSFER_RECEIPT) {
        Keyload__V1__InspectQueueTransferReceiptRequest *r =
            keyload__v1__inspect_queue_transfer_receipt_request__unpack(NULL, p->request_len, p->request);
        if (r == NULL || r->destination_queue == NULL || r->source_queue == NULL)
            die("an inspect-receipt plan does not decode");
        keyload__v1__inspect_queue_transfer_receipt_request__free_unpacked(r, NULL);
    } else {
        die("a plan of no known operation");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t default_id[16] = {0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,
                                           0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x01};
    kl_q1_call c;
    kl_err e;
    kl_err_clear(&e);
    kl_code rc = kl_q1_parse((const char *)data, size, &c, &e);
    if (rc != KL_OK) {
        check_refusal(rc, &e);
        if (c.alias != NULL || c.args != NULL || c.n_args != 0)
            die("a refused parse left a call behind");
        return 0;
    }
    kl_q1_call again;
    if (kl_q1_parse((const char *)data, size, &again, &e) != KL_OK ||
        strcmp(again.alias, c.alias) != 0 || again.n_args != c.n_args)
        die("parsing the same bytes twice differs");
    kl_q1_call_free(&again);
    kl_q1_plan p;
    kl_err_clear(&e);
    rc = kl_q1_plan_build(&c, "acme", "shop", default_id, &p, &e);
    if (rc != KL_OK)
        check_refusal(rc, &e);
    else
        check_plan(&p);
    kl_q1_plan_free(&p);
    kl_q1_call_free(&c);
    return 0;
}
