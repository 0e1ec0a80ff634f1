/* The history checks (nemesis.h). Run after healing, on the recorded history and the final
 * state (nm_fin). An operation whose outcome was unknown is settled from that final state:
 * an enqueue of unknown outcome committed exactly when its message was ever seen, an ack of
 * unknown outcome committed exactly when its message is no longer there. Each check prints
 * how many cases it looked at and how many violated it. */
#include "tests/nemesis/nemesis.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef char body_t[32];

static int cmp_body(const void *a, const void *b) { return strcmp(a, b); }

/* How many times key occurs in the sorted array. */
static size_t count_in(body_t *sorted, size_t n, const char *key)
{
    body_t *hit = bsearch(key, sorted, n, sizeof *sorted, cmp_body);
    if (hit == NULL)
        return 0;
    body_t *lo = hit, *hi = hit;
    while (lo > sorted && strcmp(lo[-1], key) == 0)
        lo--;
    while (hi + 1 < sorted + n && strcmp(hi[1], key) == 0)
        hi++;
    return (size_t)(hi - lo) + 1;
}

bool nm_check_quiet;

static int report(const char *name, size_t checked, int bad, const char *example)
{
    if (nm_check_quiet)
        return bad;
    printf("  check %-34s %8zu checked, %d violations%s%s\n", name, checked, bad, bad && example ? ": e.g. " : "",
           bad && example ? example : "");
    return bad;
}

/* Per body: acks answered OK and unknown, and the latest OK ack's answer time. */
typedef struct ack_sum {
    body_t body;
    int ok, unknown, refused;
    int64_t t_ok;
} ack_sum;

static int cmp_ack(const void *a, const void *b) { return strcmp(((const ack_sum *)a)->body, ((const ack_sum *)b)->body); }

static ack_sum *ack_table(size_t *n_out)
{
    ack_sum *t = calloc(nm_hist.n_ack + 1, sizeof *t);
    size_t n = 0;
    for (size_t i = 0; i < nm_hist.n_ack; i++) {
        snprintf(t[n].body, sizeof t[n].body, "%s", nm_hist.ack[i].body);
        t[n].ok = nm_hist.ack[i].out == OUT_OK;
        t[n].unknown = nm_hist.ack[i].out == OUT_UNKNOWN;
        t[n].refused = nm_hist.ack[i].out == OUT_REFUSED;
        t[n].t_ok = t[n].ok ? nm_hist.ack[i].t_end : INT64_MAX;
        n++;
    }
    qsort(t, n, sizeof *t, cmp_ack);
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (w > 0 && strcmp(t[w - 1].body, t[i].body) == 0) {
            t[w - 1].ok += t[i].ok;
            t[w - 1].unknown += t[i].unknown;
            t[w - 1].refused += t[i].refused;
            if (t[i].t_ok < t[w - 1].t_ok)
                t[w - 1].t_ok = t[i].t_ok;
        } else {
            t[w++] = t[i];
        }
    }
    *n_out = w;
    return t;
}

static const ack_sum *ack_of(const ack_sum *t, size_t n, const char *body)
{
    ack_sum key;
    snprintf(key.body, sizeof key.body, "%s", body);
    return bsearch(&key, t, n, sizeof *t, cmp_ack);
}

/* Every enqueue answered OK present exactly once among acked + remaining; none after its
 * ack; unknown ones at most once; refused ones never. */
static int check_enqueues(body_t *remain, size_t n_remain, const ack_sum *acks, size_t n_acks)
{
    int lost = 0, dup = 0, after_ack = 0, refused_seen = 0;
    char ex_lost[128] = "", ex_dup[128] = "", ex_after[128] = "", ex_ref[64] = "";
    for (size_t i = 0; i < nm_hist.n_enq; i++) {
        const nm_enq *e = &nm_hist.enq[i];
        size_t r = count_in(remain, n_remain, e->body);
        const ack_sum *a = ack_of(acks, n_acks, e->body);
        int ok = a ? a->ok : 0, unk = a ? a->unknown : 0;
        if (e->out == OUT_REFUSED && (r > 0 || ok > 0)) {
            refused_seen++;
            snprintf(ex_ref, sizeof ex_ref, "%s", e->body);
        }
        if (r + (ok > 0) > 1) {
            (ok > 0 ? after_ack++ : dup++);
            snprintf(ok > 0 ? ex_after : ex_dup, 128, "%s (remaining %zu, acked %d)", e->body, r, ok);
        } else if (e->out == OUT_OK && r == 0 && ok == 0 && unk == 0) {
            lost++;
            snprintf(ex_lost, sizeof ex_lost, "%s (acks refused: %d)", e->body, a ? a->refused : 0);
        }
    }
    int bad = report("enqueue OK present (none lost)", nm_hist.n_enq, lost, ex_lost);
    bad += report("present at most once", nm_hist.n_enq, dup, ex_dup);
    bad += report("not present after its ack", nm_hist.n_enq, after_ack, ex_after);
    bad += report("refused enqueue never committed", nm_hist.n_enq, refused_seen, ex_ref);
    return bad;
}

/* Nothing phantom: every delivered or remaining body is one the workload enqueued. */
static int check_phantoms(body_t *remain, size_t n_remain)
{
    body_t *enq = calloc(nm_hist.n_enq + 1, sizeof *enq);
    for (size_t i = 0; i < nm_hist.n_enq; i++)
        snprintf(enq[i], sizeof enq[i], "%s", nm_hist.enq[i].body);
    qsort(enq, nm_hist.n_enq, sizeof *enq, cmp_body);
    int bad = 0;
    char ex[64] = "";
    for (size_t i = 0; i < n_remain; i++)
        if (count_in(enq, nm_hist.n_enq, remain[i]) == 0) {
            bad++;
            snprintf(ex, sizeof ex, "%s", remain[i]);
        }
    for (size_t i = 0; i < nm_hist.n_dlv; i++)
        if (count_in(enq, nm_hist.n_enq, nm_hist.dlv[i].body) == 0) {
            bad++;
            snprintf(ex, sizeof ex, "%s", nm_hist.dlv[i].body);
        }
    free(enq);
    return report("nothing phantom", n_remain + nm_hist.n_dlv, bad, ex);
}

static int check_acks(const ack_sum *acks, size_t n_acks)
{
    int twice = 0, redelivered = 0;
    char ex1[64] = "", ex2[64] = "";
    for (size_t i = 0; i < n_acks; i++)
        if (acks[i].ok > 1) {
            twice++;
            snprintf(ex1, sizeof ex1, "%s acked OK %d times", acks[i].body, acks[i].ok);
        }
    for (size_t i = 0; i < nm_hist.n_dlv; i++) {
        const ack_sum *a = ack_of(acks, n_acks, nm_hist.dlv[i].body);
        if (a && a->ok && nm_hist.dlv[i].t_send > a->t_ok) {
            redelivered++;
            snprintf(ex2, sizeof ex2, "%s", nm_hist.dlv[i].body);
        }
    }
    int bad = report("no message acked OK twice", n_acks, twice, ex1);
    return bad + report("no delivery after its ack OK", nm_hist.n_dlv, redelivered, ex2);
}

static int check_transfers(void)
{
    body_t *dest = nm_fin.dest;
    qsort(dest, nm_fin.n_dest, sizeof *dest, cmp_body);
    int undelivered = 0, multi = 0, bad_count = 0;
    char ex1[96] = "", ex2[96] = "", ex3[96] = "";
    for (size_t i = 0; i < nm_hist.n_xf; i++) {
        const nm_xfer *x = &nm_hist.xf[i];
        size_t d = count_in(dest, nm_fin.n_dest, x->body);
        int st = nm_fin.xfer_state[i];
        if (x->out == OUT_OK && st != 2) {
            undelivered++;
            snprintf(ex1, sizeof ex1, "%s state %d", x->id, st);
        }
        if (d > 1) {
            multi++;
            snprintf(ex2, sizeof ex2, "%s: %zu destination messages", x->id, d);
        }
        if ((st == 2 && d != 1) || (st == 0 && d != 0)) {
            bad_count++;
            snprintf(ex3, sizeof ex3, "%s state %d with %zu destination messages", x->id, st, d);
        }
    }
    int bad = report("transfer Delivered after healing", nm_hist.n_xf, undelivered, ex1);
    bad += report("transfer at most one dest message", nm_hist.n_xf, multi, ex2);
    return bad + report("transfer dest matches its state", nm_hist.n_xf, bad_count, ex3);
}

/* UTC time of day (HH:MM:SS.mmm) of harness time t (nm_now_ms), for matching a finding
 * against the members' logs and the entry times in their stores, which use the wall clock. */
static void wall_of(int64_t t, char *out, size_t cap)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t wall = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 - (nm_now_ms() - t);
    time_t sec = (time_t)(wall / 1000);
    struct tm tm;
    if (gmtime_r(&sec, &tm) == NULL) {
        snprintf(out, cap, "?");
        return;
    }
    snprintf(out, cap, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(wall % 1000));
}

/* A receive sent after a revoke returned OK and answered before the restore was sent must
 * hand the consumer nothing. */
static int check_revokes(void)
{
    int bad = 0;
    char ex[200] = "";
    for (size_t i = 0; i < nm_hist.n_dlv; i++) {
        const nm_delivery *d = &nm_hist.dlv[i];
        if (!d->consumer)
            continue;
        for (size_t r = 0; r < nm_hist.n_rv; r++)
            if (d->t_send > nm_hist.rv[r].t_ok && d->t_end < nm_hist.rv[r].t_restore) {
                bad++;
                char sent[16], ok[16];
                wall_of(d->t_send, sent, sizeof sent);
                wall_of(nm_hist.rv[r].t_ok, ok, sizeof ok);
                snprintf(ex, sizeof ex, "%s (%s) delivered %lld ms after the revoke returned (receive sent %s UTC, "
                         "revoke returned %s UTC)", d->body, nm_queues[d->queue],
                         (long long)(d->t_send - nm_hist.rv[r].t_ok), sent, ok);
                break;
            }
    }
    return report("nothing delivered after a revoke", nm_hist.n_dlv, bad, ex);
}

static int check_reads(void)
{
    int bad = 0;
    char ex[128] = "";
    for (size_t i = 0; i < nm_hist.n_rd; i++) {
        const nm_read *r = &nm_hist.rd[i];
        if (r->messages + r->acks_sent_before_end < r->enq_ok_before_send) {
            bad++;
            snprintf(ex, sizeof ex, "%s: %llu messages, %llu acked OK enqueues before, %llu acks sent", nm_queues[r->queue],
                     (unsigned long long)r->messages, (unsigned long long)r->enq_ok_before_send,
                     (unsigned long long)r->acks_sent_before_end);
        }
    }
    int n = report("fresh stats see acknowledged writes", nm_hist.n_rd, bad, ex);
    return n + report("fresh inspect sees a created transfer", nm_hist.n_xf, (int)nm_hist.fresh_inspect_missing,
                      "a transfer created OK was NOT_FOUND");
}

static int check_liveness(void)
{
    int bad = 0;
    char ex[64] = "";
    for (int p = 0; p < NM_PARTS; p++)
        for (int m = 0; m < NM_SLOTS; m++) {
            if (!nm.mb[p][m].active)
                continue;
            Keyload__V1__MemberStatusAnswer *a = NULL;
            if (!nm_member_alive(&nm.mb[p][m]) || kl_member_status(nm.mb[p][m].url, 3000, &a, NULL) != KL_OK) {
                bad++;
                snprintf(ex, sizeof ex, "%s", nm.mb[p][m].node);
            }
            kl_member_status_free(a);
        }
    if (!nm_coord_alive()) {
        bad++;
        snprintf(ex, sizeof ex, "coordinator");
    }
    return report("every process answers after healing", NM_PARTS * NM_MEMBERS + 1, bad, ex);
}

/* The members the harness runs are the partitions' committed configurations (counted with
 * the comparisons members.c made around each replacement). */
static void compare_members(void)
{
    for (int p = 0; p < NM_PARTS; p++) {
        char why[200] = "";
        nm_hist.members_checked++;
        if (!nm_members_agree(p, why, sizeof why)) {
            nm_hist.members_disagree++;
            if (!nm_hist.first_members_disagree[0])
                snprintf(nm_hist.first_members_disagree, sizeof nm_hist.first_members_disagree,
                         "after healing, partition %d: %.150s", p, why);
        }
    }
}

int nm_check_offline(void)
{
    int bad = 0;
    size_t n_acks = 0;
    ack_sum *acks = ack_table(&n_acks);
    if (nm_fin.drained) {
        qsort(nm_fin.remain, nm_fin.n_remain, sizeof *nm_fin.remain, cmp_body);
        bad += check_enqueues(nm_fin.remain, nm_fin.n_remain, acks, n_acks);
        bad += check_phantoms(nm_fin.remain, nm_fin.n_remain);
        bad += check_transfers();
    } else {
        bad += report("final state readable (queues drained)", 1, 1,
                      "the final state could not be read: enqueue, phantom and transfer checks not run");
    }
    bad += check_acks(acks, n_acks);
    bad += report("retried command id, original answer", nm_hist.replays, (int)nm_hist.replay_mismatch,
                  "a replay answered differently");
    bad += check_revokes();
    bad += check_reads();
    size_t answers = 0;
    for (int k = 0; k < OP_KINDS; k++)
        for (int c = 0; c <= KL_CODE_COUNT; c++)
            answers += nm_hist.codes[k][c];
    bad += report("answers among documented codes", answers, (int)nm_hist.bad_codes, nm_hist.first_bad);
    for (size_t i = 0; i < nm_hist.n_bad_kinds && !nm_check_quiet; i++)
        printf("    outside the documented codes: %s\n", nm_hist.bad_kinds[i]);
    bad += report("read answers with a follower down", nm_hist.probe_reads, (int)nm_hist.probe_no_answer,
                  "a queue stats got no answer within the client's 2 s deadline");
    if (nm_hist.probe_reads && !nm_check_quiet)
        printf("    (read latency with one follower down: mean %lld ms, max %lld ms over %llu reads)\n",
               (long long)(nm_hist.probe_sum_ms / (int64_t)nm_hist.probe_reads), (long long)nm_hist.probe_max_ms,
               (unsigned long long)nm_hist.probe_reads);
    bad += report("member exits after a failed log write", nm_hist.eio_runs, (int)nm_hist.eio_no_exit,
                  "a member kept running after store.log_write failed");
    if (nm_hist.eio_idle && !nm_check_quiet)
        printf("    (%llu more runs not counted: their partition committed too little to make the member write)\n",
               (unsigned long long)nm_hist.eio_idle);
    bad += report("power losses confirmed by lossyfs", nm_hist.power_loss_runs, (int)nm_hist.power_loss_failed,
                  "lossyfs did not confirm a power loss within 10 s");
    bad += report("member stays up on a slow disk", nm_hist.slow_runs, (int)nm_hist.slow_down,
                  "a member whose every log write was slowed was not running at the end of the hold");
    if (!nm_check_quiet)
        printf("    (UNAUTHENTICATED answers to principals that exist: %llu)\n",
           (unsigned long long)nm_hist.unknown_principal);
    bad += report("partition serves again after each heal", nm_hist.heals + 1, (int)nm_hist.serve_timeouts,
                  nm_hist.first_serve_timeout);
    bad += report("member replacement reaches its target", nm_hist.member_changes,
                  (int)nm_hist.member_changes_failed, nm_hist.first_member_failure);
    bad += report("Members agree with the member set", nm_hist.members_checked, (int)nm_hist.members_disagree,
                  nm_hist.first_members_disagree);
    free(acks);
    return bad;
}

int nm_check_history(void)
{
    printf("checks:\n");
    compare_members();
    int bad = nm_check_offline();
    return bad + check_liveness();
}
