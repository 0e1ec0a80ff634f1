/* bench_leader: --leader-of (wait for a serving leader, print it) and --wait-caught-up
 * (wait until every member has applied the leader's commit index). */
#include "tests/bench/bench_fixture.h"

int bench_run_leader_of(const bench_options *o)
{
    bench_members ms;
    bench_ms_init(&ms, o);
    Keyload__V1__MemberStatusAnswer *a;
    int li = bench_ms_wait_leader(&ms, &a);
    if (li < 0)
        return 1;
    char node[32];
    printf("leader: node=%s member=%llu url=%s term=%llu commit_index=%llu applied_index=%llu last_index=%llu\n",
           bench_ms_node(&ms, li, node, sizeof node), (unsigned long long)a->member, ms.url[li],
           (unsigned long long)a->term, (unsigned long long)a->commit_index, (unsigned long long)a->applied_index,
           (unsigned long long)a->last_index);
    keyload__v1__member_status_answer__free_unpacked(a, NULL);
    bench_ms_close(&ms);
    return 0;
}

int bench_run_wait_caught_up(const bench_options *o)
{
    bench_members ms;
    bench_ms_init(&ms, o);
    int64_t t0 = bench_now_ns(), deadline = t0 + LEADER_WAIT_NS;
    Keyload__V1__MemberStatusAnswer *st[MAX_URLS];
    char why[300] = "no status yet";
    for (;;) {
        int li = -1, answered = 0;
        for (int i = 0; i < ms.n; i++) {
            kl_err err;
            kl_err_clear(&err);
            if (bench_ms_status(&ms, i, 500, &st[i], &err) == KL_OK)
                answered++;
            else
                snprintf(why, sizeof why, "%s: %s", ms.url[i], err.message);
            if (st[i] != NULL && bench_is_serving_leader(st[i]))
                li = i;
        }
        bool done = false;
        if (answered == ms.n && li >= 0) {
            uint64_t commit = st[li]->commit_index;
            done = true;
            for (int i = 0; i < ms.n; i++)
                if (st[i]->applied_index < commit) {
                    done = false;
                    snprintf(why, sizeof why, "%s applied %llu < leader commit %llu", ms.url[i],
                             (unsigned long long)st[i]->applied_index, (unsigned long long)commit);
                }
            if (done) {
                char node[32];
                printf("caughtup: ms=%.0f leader=%s commit_index=%llu\n", (bench_now_ns() - t0) / 1e6,
                       bench_ms_node(&ms, li, node, sizeof node), (unsigned long long)commit);
            }
        } else if (answered == ms.n) {
            snprintf(why, sizeof why, "no serving leader");
        }
        for (int i = 0; i < ms.n; i++)
            if (st[i] != NULL)
                keyload__v1__member_status_answer__free_unpacked(st[i], NULL);
        if (done)
            break;
        if (bench_now_ns() > deadline) {
            fprintf(stderr, "keyload-bench: members not caught up within 60 s: %s\n", why);
            bench_ms_close(&ms);
            return 1;
        }
        bench_sleep_ns(50000000LL);
    }
    bench_ms_close(&ms);
    return 0;
}
