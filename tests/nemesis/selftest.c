/* `build/nemesis --self-test`: the history checks (check.c) on made-up histories, each with
 * a known number of violations, so that a check that cannot fail is caught. Pure logic: no
 * cluster runs. run.sh runs it before every harness run. */
#include "tests/nemesis/nemesis.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void reset(void)
{
    free(nm_hist.enq);
    free(nm_hist.dlv);
    free(nm_hist.ack);
    free(nm_hist.rd);
    free(nm_hist.xf);
    free(nm_fin.remain);
    free(nm_fin.dest);
    free(nm_fin.xfer_state);
    pthread_mutex_t mu = nm_hist.mu;
    memset(&nm_hist, 0, sizeof nm_hist);
    nm_hist.mu = mu;
    memset(&nm_fin, 0, sizeof nm_fin);
    nm_fin.drained = true;
    nm_fin.remain = calloc(16, sizeof *nm_fin.remain);
    nm_fin.dest = calloc(16, sizeof *nm_fin.dest);
    nm_fin.xfer_state = calloc(16, sizeof *nm_fin.xfer_state);
    nm_hist.enq = calloc(16, sizeof *nm_hist.enq);
    nm_hist.dlv = calloc(16, sizeof *nm_hist.dlv);
    nm_hist.ack = calloc(16, sizeof *nm_hist.ack);
    nm_hist.rd = calloc(16, sizeof *nm_hist.rd);
    nm_hist.xf = calloc(16, sizeof *nm_hist.xf);
}

static void enq(const char *body, nm_outcome o)
{
    nm_enq *e = &nm_hist.enq[nm_hist.n_enq++];
    snprintf(e->body, sizeof e->body, "%s", body);
    e->out = o;
}

static void remain(const char *body) { snprintf(nm_fin.remain[nm_fin.n_remain++], 32, "%s", body); }

static void delivered(const char *body, int64_t t_send, int64_t t_end)
{
    nm_delivery *d = &nm_hist.dlv[nm_hist.n_dlv++];
    snprintf(d->body, sizeof d->body, "%s", body);
    d->t_send = t_send;
    d->t_end = t_end;
    d->consumer = true;
}

static void acked(const char *body, nm_outcome o, int64_t t_end)
{
    nm_ack *a = &nm_hist.ack[nm_hist.n_ack++];
    snprintf(a->body, sizeof a->body, "%s", body);
    a->out = o;
    a->t_end = t_end;
}

static void xfer(const char *body, nm_outcome o, int state, int dest_msgs)
{
    nm_xfer *x = &nm_hist.xf[nm_hist.n_xf];
    snprintf(x->id, sizeof x->id, "id-%s", body);
    snprintf(x->body, sizeof x->body, "%s", body);
    x->out = o;
    nm_fin.xfer_state[nm_hist.n_xf++] = state;
    for (int i = 0; i < dest_msgs; i++)
        snprintf(nm_fin.dest[nm_fin.n_dest++], 32, "%s", body);
}

static int expect(const char *name, int want)
{
    int got = nm_check_offline();
    printf("  self-test %-40s want %d violations, got %d%s\n", name, want, got, got == want ? "" : ": FAILED");
    return got != want;
}

static int histories_of_messages(void)
{
    int failed = 0;
    reset();
    enq("a", OUT_OK), delivered("a", 10, 20), acked("a", OUT_OK, 30);
    enq("b", OUT_OK), remain("b");
    enq("c", OUT_UNKNOWN);                                        /* never seen: not committed */
    enq("d", OUT_OK), delivered("d", 10, 20), acked("d", OUT_UNKNOWN, 30); /* gone: the ack committed */
    enq("e", OUT_OK), delivered("e", 10, 20), acked("e", OUT_UNKNOWN, 30), remain("e"); /* it did not */
    xfer("x", OUT_OK, 2, 1);
    failed += expect("clean history, unknowns settled", 0);
    reset();
    enq("a", OUT_OK);
    failed += expect("enqueue OK lost", 1);
    reset();
    enq("a", OUT_OK), remain("a"), remain("a");
    failed += expect("enqueue OK present twice", 1);
    reset();
    enq("a", OUT_OK), delivered("a", 10, 20), acked("a", OUT_OK, 30), remain("a");
    failed += expect("present after its ack", 1);
    reset();
    enq("a", OUT_OK), remain("a"), remain("ghost");
    failed += expect("phantom message", 1);
    reset();
    enq("a", OUT_REFUSED), remain("a");
    failed += expect("refused enqueue committed", 1);
    reset();
    enq("a", OUT_OK), delivered("a", 10, 20), acked("a", OUT_OK, 30), delivered("a", 40, 50), acked("a", OUT_OK, 60);
    failed += expect("acked twice, delivered after its ack", 2);
    return failed;
}

static int histories_of_the_rest(void)
{
    int failed = 0;
    reset();
    xfer("x", OUT_OK, 1, 0);
    failed += expect("transfer not Delivered", 1);
    reset();
    xfer("x", OUT_OK, 2, 2);
    failed += expect("transfer with two destination messages", 2);
    reset();
    enq("a", OUT_OK), delivered("a", 150, 160), acked("a", OUT_OK, 170);
    nm_hist.rv[nm_hist.n_rv++] = (nm_revoke){100, 200};
    failed += expect("delivered after its revoke returned", 1);
    reset();
    nm_hist.rd[nm_hist.n_rd++] = (nm_read){.queue = 0, .messages = 3, .enq_ok_before_send = 5, .acks_sent_before_end = 1};
    failed += expect("fresh read misses an acknowledged write", 1);
    reset();
    nm_hist.replays = 3, nm_hist.replay_mismatch = 1;
    failed += expect("replay answered otherwise", 1);
    reset();
    nm_hist.codes[OP_ENQUEUE][KL_UNAUTHENTICATED] = 1, nm_hist.bad_codes = 1;
    failed += expect("undocumented answer", 1);
    reset();
    nm_hist.heals = 4, nm_hist.serve_timeouts = 1;
    failed += expect("partition not serving after a heal", 1);
    reset();
    nm_hist.probe_reads = 3, nm_hist.probe_no_answer = 1;
    failed += expect("read unanswered with a follower down", 1);
    reset();
    nm_hist.eio_no_exit = 1;
    failed += expect("member running after a failed log write", 1);
    reset();
    nm_hist.power_loss_failed = 1;
    failed += expect("power loss not confirmed", 1);
    reset();
    nm_hist.slow_runs = 2, nm_hist.slow_down = 1;
    failed += expect("member down on a slow disk", 1);
    reset();
    nm_hist.member_changes = 3, nm_hist.member_changes_failed = 1;
    failed += expect("member replacement short of its target", 1);
    reset();
    nm_hist.members_checked = 5, nm_hist.members_disagree = 2;
    failed += expect("Members disagree with the harness", 2);
    return failed;
}

int nm_selftest(void)
{
    printf("nemesis self-test of the history checks:\n");
    nm_check_quiet = true;
    int failed = histories_of_messages() + histories_of_the_rest();
    nm_check_quiet = false;
    printf("nemesis self-test: %s\n", failed ? "FAILED" : "every check caught its violations");
    return failed;
}
