/* The node's reads over the state the golden workload left: each answer's bytes (or its
 * refusal), so that moving the reads out of the write path keeps every answer as it is. */
#include "tests/golden/build.h"
#include "tests/golden/golden.h"

#include "keyload/v1/catalog.pb-c.h"
#include "keyload/v1/transfer.pb-c.h"

#include <stdlib.h>
#include <string.h>

static void print_answer(golden_run *run, const char *name, int p, kl_code rc, const kl_err *err,
                         uint8_t *ans, size_t len)
{
    fprintf(run->tokens, "read %s p%d %s", name, p, kl_code_name(rc));
    if (rc == KL_OK) {
        fprintf(run->tokens, " answer ");
        golden_hex(run->tokens, ans, len);
        free(ans);
    } else {
        fprintf(run->tokens, " detail=%s message=%s", err->detail, err->message);
    }
    fputc('\n', run->tokens);
}

typedef kl_code (*read_fn)(kl_node *n, const char *principal, const uint8_t *req, size_t len, uint8_t **answer,
                           size_t *answer_len, kl_err *err);

static void read_one(golden_run *run, const char *name, int p, const char *principal, read_fn fn,
                     const uint8_t *req, size_t len)
{
    uint8_t *ans = NULL;
    size_t alen = 0;
    kl_err err = {0};
    kl_code rc = fn(run->nodes[p].node, principal, req, len, &ans, &alen, &err);
    print_answer(run, name, p, rc, &err, ans, alen);
}

static void transfer_read(golden_run *run, const char *name, int p, kl_node_read_kind kind,
                          const uint8_t *req, size_t len)
{
    uint8_t *ans = NULL;
    size_t alen = 0;
    kl_err err = {0};
    kl_code rc = kl_node_transfer_read(run->nodes[p].node, kind, "local", req, len, &ans, &alen, &err);
    print_answer(run, name, p, rc, &err, ans, alen);
}

static Keyload__V1__QueueLaneRef *dl(const char *q, const char *lane) { return gb_lane("default", "default", q, lane); }

static void queue_reads(golden_run *run)
{
    uint8_t buf[1024];
    Keyload__V1__QueueStatsRequest s = KEYLOAD__V1__QUEUE_STATS_REQUEST__INIT;
    s.queue = dl("src", NULL);
    size_t n = keyload__v1__queue_stats_request__pack(&s, buf);
    read_one(run, "queue_stats_src", 1, "local", kl_node_queue_stats, buf, n);
    read_one(run, "queue_stats_src_as_alice", 1, "alice", kl_node_queue_stats, buf, n);
    s.queue = dl("small", NULL);
    n = keyload__v1__queue_stats_request__pack(&s, buf);
    read_one(run, "queue_stats_small", 2, "local", kl_node_queue_stats, buf, n);
    s.queue = dl("nope", NULL);
    n = keyload__v1__queue_stats_request__pack(&s, buf);
    read_one(run, "queue_stats_unknown", 1, "local", kl_node_queue_stats, buf, n);

    Keyload__V1__LocateQueueRequest l = KEYLOAD__V1__LOCATE_QUEUE_REQUEST__INIT;
    l.queue = dl("dst", NULL);
    n = keyload__v1__locate_queue_request__pack(&l, buf);
    read_one(run, "locate_dst", 0, "local", kl_node_locate_queue, buf, n);
    read_one(run, "locate_dst_on_p1", 1, "alice", kl_node_locate_queue, buf, n);

    Keyload__V1__ShowPrincipalRequest sp = KEYLOAD__V1__SHOW_PRINCIPAL_REQUEST__INIT;
    sp.principal_id = "alice";
    n = keyload__v1__show_principal_request__pack(&sp, buf);
    read_one(run, "show_alice", 0, "local", kl_node_show_principal, buf, n);
    read_one(run, "show_alice_as_alice", 0, "alice", kl_node_show_principal, buf, n);
    sp.principal_id = "root";
    n = keyload__v1__show_principal_request__pack(&sp, buf);
    read_one(run, "show_root_as_alice", 0, "alice", kl_node_show_principal, buf, n);
}

static void transfer_reads(golden_run *run)
{
    static const uint8_t tids[2][16] = {{0x11, [15] = 0x5a}, {0x12, [15] = 0x5a}};
    uint8_t buf[1024];
    for (int i = 0; i < 2; i++) {
        Keyload__V1__InspectQueueTransferRequest q = KEYLOAD__V1__INSPECT_QUEUE_TRANSFER_REQUEST__INIT;
        q.source_queue = dl("src", NULL);
        q.transfer_id = golden_bin(tids[i], 16);
        size_t n = keyload__v1__inspect_queue_transfer_request__pack(&q, buf);
        transfer_read(run, i ? "inspect_transfer_advanced" : "inspect_transfer_delivered", 1,
                      KL_NODE_INSPECT_TRANSFER, buf, n);
    }
    Keyload__V1__ListPendingQueueTransfersRequest lp = KEYLOAD__V1__LIST_PENDING_QUEUE_TRANSFERS_REQUEST__INIT;
    lp.tenant = "default";
    lp.database = "default";
    size_t n = keyload__v1__list_pending_queue_transfers_request__pack(&lp, buf);
    transfer_read(run, "pending_transfers", 1, KL_NODE_PENDING_TRANSFERS, buf, n);
}

static void catalog_reads(golden_run *run)
{
    for (int p = 0; p < GOLDEN_PARTITIONS; p++) {
        uint64_t version, changes;
        kl_node_catalog_status(run->nodes[p].node, &version, &changes);
        fprintf(run->tokens, "read catalog_status p%d version=%llu changes=%llu applied=%llu\n", p,
                (unsigned long long)version, (unsigned long long)changes,
                (unsigned long long)kl_node_applied_index(run->nodes[p].node));
    }
    uint8_t *bytes;
    size_t len;
    bool found;
    kl_err err;
    if (kl_node_catalog_change(run->nodes[0].node, 1, &bytes, &len, &found, &err) == KL_OK && found) {
        fprintf(run->tokens, "read catalog_change_1 p0 ");
        golden_hex(run->tokens, bytes, len);
        fputc('\n', run->tokens);
        free(bytes);
    }
}

void golden_reads(golden_run *run)
{
    if (run->tokens == NULL)
        return;
    queue_reads(run);
    transfer_reads(run);
    catalog_reads(run);
    golden_arena_free();
}
