/* The node's reads by kind (daemon/node.h kl_node_read): every kind is served exactly as
 * its own read function serves it, answer bytes and refusals alike. */
#include "harness.h"
#include "keyload/v1/queue.pb-c.h"
#include "keyload/v1/transfer.pb-c.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static th_node T;
static char dir[256];

static void setup(void)
{
    th_tmpdir(dir, sizeof dir);
    th_open(&T, dir, NULL);
    th_batch *b = th_batch_new(0x01);
    th_create(b, "orders", 0, 0, 0, NULL);
    Keyload__V1__BatchReceipt *r = th_run(&T, b, KL_OK);
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
    b = th_batch_new(0x02);
    th_enqueue(b, "orders", NULL, "one");
    r = th_run(&T, b, KL_OK);
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
}

static void teardown(void)
{
    th_close(&T);
    th_rmrf(dir);
}

/* kl_node_read of kind k answers what the kind's own read answers, bytes and errors. */
static void same_answer(kl_node_read_kind kind, const uint8_t *req, size_t len, kl_code want)
{
    uint8_t *a = NULL, *b = NULL;
    size_t an = 0, bn = 0;
    kl_err ea, eb;
    kl_code ra = kl_node_read(T.node, kind, "local", req, len, &a, &an, &ea);
    kl_code rb = kind == KL_NODE_QUEUE_STATS
                     ? kl_node_queue_stats(T.node, "local", req, len, &b, &bn, &eb)
                     : kl_node_transfer_read(T.node, kind, "local", req, len, &b, &bn, &eb);
    ck_assert_int_eq(ra, want);
    ck_assert_int_eq(rb, want);
    if (want == KL_OK) {
        ck_assert_uint_eq(an, bn);
        ck_assert_mem_eq(a, b, an);
    } else {
        ck_assert_str_eq(ea.detail, eb.detail);
        ck_assert_str_eq(ea.message, eb.message);
    }
    free(a);
    free(b);
}

START_TEST(test_node_read_by_kind)
{
    Keyload__V1__QueueLaneRef r = KEYLOAD__V1__QUEUE_LANE_REF__INIT;
    r.tenant = "default";
    r.database = "default";
    r.queue = "orders";
    Keyload__V1__QueueStatsRequest qs = KEYLOAD__V1__QUEUE_STATS_REQUEST__INIT;
    qs.queue = &r;
    uint8_t buf[512];
    size_t n = keyload__v1__queue_stats_request__pack(&qs, buf);
    same_answer(KL_NODE_QUEUE_STATS, buf, n, KL_OK);
    Keyload__V1__ListPendingQueueTransfersRequest lp = KEYLOAD__V1__LIST_PENDING_QUEUE_TRANSFERS_REQUEST__INIT;
    lp.tenant = "default";
    lp.database = "default";
    n = keyload__v1__list_pending_queue_transfers_request__pack(&lp, buf);
    same_answer(KL_NODE_PENDING_TRANSFERS, buf, n, KL_OK);
    /* a transfer id that is not a GUID: the same refusal whichever way it is asked */
    Keyload__V1__InspectQueueTransferRequest it = KEYLOAD__V1__INSPECT_QUEUE_TRANSFER_REQUEST__INIT;
    it.source_queue = &r;
    n = keyload__v1__inspect_queue_transfer_request__pack(&it, buf);
    same_answer(KL_NODE_INSPECT_TRANSFER, buf, n, KL_INVALID_ARGUMENT);
    /* a payload that does not decode */
    static const uint8_t junk[] = {0xff, 0xff, 0xff};
    same_answer(KL_NODE_TRANSFER_RECEIPT, junk, sizeof junk, KL_INVALID_ARGUMENT);
    same_answer(KL_NODE_TRANSFER_FAILURE, junk, sizeof junk, KL_INVALID_ARGUMENT);
}
END_TEST

Suite *suite_node_read(void)
{
    Suite *s = suite_create("node_read");
    TCase *tc = tcase_create("node_read");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_node_read_by_kind);
    suite_add_tcase(s, tc);
    return s;
}
