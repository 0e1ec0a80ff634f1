/* proc_coord_make: many transfers created fast, by several threads with their own
 * clients (cc_plan, proc_coord.h). */
#include "tests/cluster/proc_coord.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* One creating thread of a plan. */
typedef struct cc_maker {
    const cc_plan *plan;
    int first_lane, lane_step; /* this thread's lanes */
    long created;
    char error[1024];
} cc_maker;

static void *cc_make(void *arg)
{
    cc_maker *w = arg;
    const cc_plan *pl = w->plan;
    kl_client *c = NULL;
    kl_err err;
    /* One client per thread: its own sessions, so the threads do not queue on one lock. */
    if (kl_client_open_principal(cc_fx.cluster.file, pl->db, CC_TIMEOUT_MS, cc_who_id[pl->who], cc_fx.whos[pl->who].key_path, &c,
                                 &err) != KL_OK) {
        snprintf(w->error, sizeof w->error, "open: %s", err.message);
        return NULL;
    }
    for (int lane = w->first_lane; lane < pl->lanes && !w->error[0]; lane += w->lane_step)
        for (int i = 0; i < pl->per_lane && !w->error[0]; i += pl->per_batch) {
            char lane_name[16];
            snprintf(lane_name, sizeof lane_name, "l%02d", lane);
            cc_id cmd;
            kl_command_id_new(cmd);
            int n = pl->per_lane - i < pl->per_batch ? pl->per_lane - i : pl->per_batch;
            cc_id tids[CC_BATCH_MAX];
            for (int k = 0; k < n; k++)
                kl_command_id_new(tids[k]);
            /* A lost answer is retried with the same command id and the same batch (the
             * same transfer ids): never a second set of intents. */
            kl_code rc = KL_UNKNOWN_WRITE_OUTCOME;
            for (int attempt = 0; attempt < 4 && rc != KL_OK; attempt++) {
                kl_batch *b = NULL;
                rc = kl_batch_new(cmd, &b, &err);
                for (int k = 0; k < n && rc == KL_OK; k++) {
                    char body[64];
                    snprintf(body, sizeof body, "%s-%02d-%04d", pl->tag, lane, i + k);
                    kl_message *m = NULL;
                    rc = kl_message_new(body, strlen(body), &m, &err);
                    if (rc == KL_OK)
                        rc = kl_batch_create_transfer(b, pl->src, lane_name, tids[k], pl->dst, lane_name, m, &err);
                    kl_message_free(m);
                }
                kl_receipt *r = NULL;
                if (rc == KL_OK)
                    rc = cc_send(c, b, &r, &err);
                else
                    kl_batch_free(b);
                if (rc == KL_OK) {
                    for (size_t k = 0; k < r->decoded->n_results; k++)
                        w->created += r->decoded->results[k]->kind_case ==
                                      KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_CREATED;
                } else if (rc != KL_UNKNOWN_WRITE_OUTCOME && rc != KL_DEADLINE_EXCEEDED && rc != KL_UNAVAILABLE) {
                    attempt = 4;
                }
                kl_receipt_free(r);
            }
            if (rc != KL_OK)
                snprintf(w->error, sizeof w->error, "%s lane %s batch %d: %s %s (%s)", pl->src, lane_name, i,
                         kl_code_name(rc), err.detail, err.message);
        }
    kl_client_close(c);
    return NULL;
}

/* Runs plans[0..n) at once with threads_per_plan threads each; the Creates committed, or -1
 * (why filled) when a thread failed. */
long cc_make_all(const cc_plan *plans, int n, int threads_per_plan, char *why, size_t cap)
{
    cc_maker w[32];
    pthread_t th[32];
    int k = 0;
    for (int p = 0; p < n; p++)
        for (int t = 0; t < threads_per_plan && k < 32; t++, k++) {
            w[k] = (cc_maker){.plan = &plans[p], .first_lane = t, .lane_step = threads_per_plan};
            pthread_create(&th[k], NULL, cc_make, &w[k]);
        }
    long total = 0;
    bool failed = false;
    for (int i = 0; i < k; i++) {
        pthread_join(th[i], NULL);
        total += w[i].created;
        if (w[i].error[0] && !failed) {
            snprintf(why, cap, "%s", w[i].error);
            failed = true;
        }
    }
    return failed ? -1 : total;
}

bool cc_make_pair(const cc_plan *plan, int src_partition, int dst_partition, char *why, size_t cap)
{
    kl_err err;
    if (!cc_database(plan->db, why, cap))
        return false;
    if (cc_queue(plan->db, plan->src, src_partition, &err) != KL_OK ||
        cc_queue(plan->db, plan->dst, dst_partition, &err) != KL_OK) {
        snprintf(why, cap, "queue %s or %s: %s", plan->src, plan->dst, err.message);
        return false;
    }
    char made_why[512] = "";
    long made = cc_make_all(plan, 1, plan->lanes, made_why, sizeof made_why);
    long want = (long)plan->lanes * plan->per_lane;
    if (made != want) {
        snprintf(why, cap, "created %ld of %ld: %s", made, want, made_why);
        return false;
    }
    return true;
}

bool cc_wait_drained(kl_client *op, kl_client *root, const char *dst, long long total, int timeout_ms,
                     long *pending, long long *held)
{
    int64_t deadline = now_ms() + timeout_ms;
    *pending = -1;
    *held = -1;
    while (now_ms() < deadline) {
        *pending = cc_pending_on(op, CC_SRC, 1);
        *held = cc_messages(root, dst);
        if (*pending == 0 && *held >= total)
            return true;
        sleep_ms(200);
    }
    return false;
}
