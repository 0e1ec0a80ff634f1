#include "daemon/rpc/tailer.h"

#include "common/clock.h"
#include "common/keys.h"
#include "common/deadline.h"
#include "common/log.h"
#include "common/rpc.h"
#include "daemon/rpc/tail_auth.h"
#include "keyload/v1/catalog.pb-c.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAIL_TIMEOUT_MS 2500     /* one RPC, held answer included */
#define CONNECT_TIMEOUT_MS 500
#define RETRY_PAUSE_MS 200       /* after a failed RPC */
#define APPLY_WAIT_MS 1000       /* longest wait for the loop to apply what it was given */
#define WARN_EVERY_MS 10000

struct kl_tailer {
    uv_async_t async;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const kl_cluster *cluster;
    const kl_partition *system;  /* partition 0 */
    int partition;
    kl_node *node;
    uint64_t member;             /* this member's id, for signing (tail_auth.h) */
    const struct kl_keys *keys;  /* NULL or without a member key: requests go unsigned */
    bool auth_required;          /* kl_tail_auth_required: answers must verify */
    /* Guarded by mu: */
    bool serving, stop;
    uint64_t epoch;              /* bumped on every change of `serving` */
    uint64_t applied;            /* catalog version applied on this member */
    /* The catalog lease: the start (CLOCK_BOOTTIME ms) of the latest tail that reported every
     * version partition 0 had when it answered; 0 = none this leadership. */
    int64_t lease_start_ms;
    uint32_t lease_ms;
    Keyload__V1__CatalogTailAnswer *answer; /* handed to the loop; NULL = slot free */
    /* Tail thread only: */
    kl_rpc_client *conns[KL_CLUSTER_MAX_MEMBERS];
    int target;                  /* member slot of partition 0 to ask first */
    int64_t last_warn_ms;
    int64_t last_refusal_warn_ms; /* loop thread */
};

static int64_t wall_ms(void)
{
    return kl_clock_ms(CLOCK_REALTIME);
}

/* CLOCK_BOOTTIME: the lease keeps ageing while the host is suspended, as partition 0's
 * bound on it (catalog_serve.c) assumes. */
static int64_t mono_ms(void)
{
    return kl_clock_ms(CLOCK_BOOTTIME);
}

/* Waits on cv for at most ms (mu held). The deadline is on CLOCK_MONOTONIC (cv is set up
 * so): on the wall clock, a step back while a pause runs (an operator's or NTP's correction
 * after the clock ran ahead) would stretch a 200 ms pause by the size of the step, and no
 * tail would renew the catalog lease meanwhile. */
static void wait_ms(kl_tailer *t, int64_t ms)
{
    struct timespec ts;
    kl_deadline_after_ms(&ts, ms);
    pthread_cond_timedwait(&t->cv, &t->mu, &ts);
}

static int member_slot(const kl_partition *p, const char *url)
{
    for (int i = 0; i < p->member_count; i++)
        if (strcmp(p->members[i].client_url, url) == 0)
            return i;
    return -1;
}

/* Verifies an answer of partition 0's member sa->member with the key this member's applied
 * catalog copy records for it, else the cluster file's (tail_auth.h). A store read from the
 * tail thread: the store is open for the tailer's whole life (kl_tailer_stop joins first). */
static kl_code verify_answer(kl_tailer *t, const Keyload__V1__SignedCatalogTailAnswer *sa, const uint8_t *req_sig,
                             kl_err *err)
{
    Keyload__V1__CatalogMemberKey *rec = NULL;
    bool found = false;
    kl_code rc = kl_node_find_member_key(t->node, 0, sa->member, &rec, &found, err);
    if (rc != KL_OK)
        return rc;
    kl_tail_vouched v;
    kl_tail_auth_vouched_of(found ? rec : NULL, &v);
    if (rec != NULL)
        keyload__v1__catalog_member_key__free_unpacked(rec, NULL);
    return kl_tail_auth_verify_answer(t->cluster, &v, sa, req_sig, err);
}

/* Unwraps (and, when required, verifies) a SignedCatalogTailAnswer; frees ans. */
static kl_code open_answer(kl_tailer *t, uint8_t *ans, size_t alen, const uint8_t *req_sig,
                           Keyload__V1__CatalogTailAnswer **out, kl_err *err)
{
    Keyload__V1__SignedCatalogTailAnswer *sa = keyload__v1__signed_catalog_tail_answer__unpack(NULL, alen, ans);
    free(ans);
    if (sa == NULL)
        return kl_fail(err, KL_INTERNAL, "catalog_tail", "a CatalogTail answer does not decode");
    kl_code rc = t->auth_required ? verify_answer(t, sa, req_sig, err) : KL_OK;
    if (rc == KL_OK) {
        *out = keyload__v1__catalog_tail_answer__unpack(NULL, sa->answer.len, sa->answer.data);
        if (*out == NULL)
            rc = kl_fail(err, KL_INTERNAL, "catalog_tail", "a CatalogTail answer does not decode");
    }
    keyload__v1__signed_catalog_tail_answer__free_unpacked(sa, NULL);
    return rc;
}

/* One CatalogTail to partition 0, following one NOT_LEADER hint. On KL_OK *out is the
 * decoded answer. */
static kl_code tail_once(kl_tailer *t, uint64_t applied, uint32_t wait, Keyload__V1__CatalogTailAnswer **out,
                         kl_err *err)
{
    Keyload__V1__CatalogTailRequest req = KEYLOAD__V1__CATALOG_TAIL_REQUEST__INIT;
    req.partition = t->partition;
    req.applied_version = applied;
    req.wait_ms = wait;
    uint8_t sig[KL_TAIL_AUTH_SIG_LEN];
    bool signing = t->keys != NULL && t->keys->has_member_key;
    if (signing)
        kl_tail_auth_sign_request(t->cluster, &req, t->member, wall_ms(), t->keys->member_secret, sig);
    uint8_t buf[256];
    size_t n = keyload__v1__catalog_tail_request__pack(&req, buf);
    kl_code rc = KL_UNAVAILABLE;
    for (int hop = 0; hop < 2; hop++) {
        int slot = t->target;
        if (t->conns[slot] == NULL &&
            (rc = kl_rpc_client_open(t->system->members[slot].client_url, CONNECT_TIMEOUT_MS,
                                     (size_t)t->cluster->limits.max_frame_bytes, &t->conns[slot], err)) != KL_OK) {
            t->target = (slot + 1) % t->system->member_count;
            return rc;
        }
        uint8_t *ans;
        size_t alen;
        char leader[KL_URL_MAX];
        leader[0] = '\0';
        rc = kl_rpc_invoke(t->conns[slot], "keyload.v1.CatalogTail", buf, n, TAIL_TIMEOUT_MS, &ans, &alen,
                           leader, sizeof leader, err);
        if (rc == KL_OK)
            return open_answer(t, ans, alen, signing ? sig : NULL, out, err);
        int next = rc == KL_NOT_LEADER && leader[0] ? member_slot(t->system, leader) : -1;
        t->target = next >= 0 ? next : (slot + 1) % t->system->member_count;
        if (next < 0)
            return rc;
    }
    return rc;
}

static void *tail_main(void *arg)
{
    kl_tailer *t = arg;
    pthread_mutex_lock(&t->mu);
    while (!t->stop) {
        if (!t->serving || t->answer != NULL) {
            wait_ms(t, APPLY_WAIT_MS);
            continue;
        }
        uint64_t applied = t->applied, epoch = t->epoch;
        int64_t sent = mono_ms();
        /* Without a lease (caught up just now, or a new leadership) partition 0 answers a
         * current tail at once instead of holding it, so the lease starts without a wait. */
        bool leased = t->lease_start_ms != 0 && sent - t->lease_start_ms < (int64_t)t->lease_ms;
        pthread_mutex_unlock(&t->mu);
        Keyload__V1__CatalogTailAnswer *a = NULL;
        kl_err err;
        kl_err_clear(&err);
        kl_code rc = tail_once(t, applied, leased ? KL_CATALOG_TAIL_WAIT_MS : 0, &a, &err);
        pthread_mutex_lock(&t->mu);
        /* Only a tail that reported every version partition 0 had starts a lease: partition 0
         * counts only such tails when it decides that this partition's lease has run out
         * (catalog_serve.c, laggards). A tail that lagged brings the changes, but a lease
         * started from it once they are applied would let this partition serve under a
         * catalog older than one whose change partition 0 already answered. */
        if (rc == KL_OK && epoch == t->epoch && a->latest_version <= applied && sent > t->lease_start_ms)
            t->lease_start_ms = sent;
        if (rc != KL_OK) {
            int64_t now = mono_ms();
            if (now - t->last_warn_ms >= WARN_EVERY_MS) {
                t->last_warn_ms = now;
                KL_WARN("catalog tail failed; retrying", "partition=%d code=%s detail=%s", t->partition,
                        kl_code_name(rc), err.detail);
            }
            if (!t->stop)
                wait_ms(t, RETRY_PAUSE_MS);
            continue;
        }
        if (a->n_changes == 0 || t->stop || !t->serving) {
            /* Behind with nothing to take (no change fitted): not again at once. */
            bool behind = a->latest_version > applied;
            keyload__v1__catalog_tail_answer__free_unpacked(a, NULL);
            if (behind && !t->stop)
                wait_ms(t, RETRY_PAUSE_MS);
            continue;
        }
        t->answer = a;
        uv_async_send(&t->async);
        /* Ask again once the loop has applied something new (or after a pause). */
        int64_t until = mono_ms() + APPLY_WAIT_MS;
        while (!t->stop && t->applied <= applied && mono_ms() < until)
            wait_ms(t, until - mono_ms());
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* Loop side: propose the changes handed over, in order. */
static void on_answer(uv_async_t *h)
{
    kl_tailer *t = h->data;
    pthread_mutex_lock(&t->mu);
    Keyload__V1__CatalogTailAnswer *a = t->answer;
    pthread_mutex_unlock(&t->mu);
    if (a == NULL)
        return;
    for (size_t i = 0; i < a->n_changes; i++) {
        size_t n = keyload__v1__catalog_change__get_packed_size(a->changes[i]);
        uint8_t *b = malloc(n ? n : 1);
        if (b == NULL)
            break;
        keyload__v1__catalog_change__pack(a->changes[i], b);
        kl_err err;
        kl_err_clear(&err);
        kl_code rc = kl_node_submit_catalog(t->node, b, n, &err);
        free(b);
        if (rc != KL_OK) {
            /* Typically this member cannot commit now (members down): the tail asks again
             * in a second; say so once in a while, not every time. */
            int64_t now = mono_ms();
            if (now - t->last_refusal_warn_ms >= WARN_EVERY_MS) {
                t->last_refusal_warn_ms = now;
                KL_WARN("catalog change not proposed; will retry", "partition=%d version=%llu code=%s detail=%s",
                        t->partition, (unsigned long long)a->changes[i]->version, kl_code_name(rc), err.detail);
            }
            break;
        }
    }
    keyload__v1__catalog_tail_answer__free_unpacked(a, NULL);
    pthread_mutex_lock(&t->mu);
    t->answer = NULL;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static void on_closed(uv_handle_t *h)
{
    kl_tailer *t = h->data;
    if (t->answer)
        keyload__v1__catalog_tail_answer__free_unpacked(t->answer, NULL);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

kl_code kl_tailer_start(uv_loop_t *loop, const kl_cluster *cluster, int partition, uint64_t member,
                        const kl_keys *keys, kl_node *node, kl_tailer **out, kl_err *err)
{
    const kl_partition *system = kl_cluster_find_partition(cluster, 0);
    if (system == NULL || system->member_count == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "partitions", "the cluster file has no partition 0");
    kl_tailer *t = calloc(1, sizeof *t);
    if (t == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    t->cluster = cluster;
    t->system = system;
    t->lease_ms = cluster->timers.catalog_lease_ms;
    t->partition = partition;
    t->node = node;
    t->member = member;
    t->keys = keys;
    t->auth_required = kl_tail_auth_required(cluster, partition);
    uint64_t changes;
    kl_node_catalog_status(node, &t->applied, &changes);
    if (pthread_mutex_init(&t->mu, NULL) != 0)
        goto fail_mutex;
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0)
        goto fail_cond;
    int crv = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (crv == 0)
        crv = pthread_cond_init(&t->cv, &attr);
    pthread_condattr_destroy(&attr);
    if (crv != 0)
        goto fail_cond;
    if (uv_async_init(loop, &t->async, on_answer) != 0)
        goto fail_async;
    t->async.data = t;
    if (pthread_create(&t->thread, NULL, tail_main, t) != 0)
        goto fail_thread;
    *out = t;
    return KL_OK;
fail_thread:
    uv_close((uv_handle_t *)&t->async, on_closed); /* frees t once the loop runs */
    return kl_fail(err, KL_INTERNAL, "thread", "cannot start the catalog tail thread");
fail_async:
    pthread_cond_destroy(&t->cv);
fail_cond:
    pthread_mutex_destroy(&t->mu);
fail_mutex:
    free(t);
    return kl_fail(err, KL_INTERNAL, "tailer", "cannot set up the catalog tail");
}

void kl_tailer_set_serving(kl_tailer *t, bool serving)
{
    pthread_mutex_lock(&t->mu);
    if (serving != t->serving) {
        /* A new leadership earns its own lease: tails sent before it do not count. */
        t->epoch++;
        t->lease_start_ms = 0;
    }
    t->serving = serving;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

void kl_tailer_applied(kl_tailer *t, uint64_t version)
{
    pthread_mutex_lock(&t->mu);
    if (version != t->applied) {
        t->applied = version;
        pthread_cond_broadcast(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
}

bool kl_tailer_lease_valid(kl_tailer *t, int64_t *age_ms)
{
    pthread_mutex_lock(&t->mu);
    int64_t start = t->lease_start_ms;
    pthread_mutex_unlock(&t->mu);
    int64_t age = start ? mono_ms() - start : -1;
    if (age_ms)
        *age_ms = age;
    return start != 0 && age < (int64_t)t->lease_ms;
}

void kl_tailer_stop(kl_tailer *t)
{
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    for (int i = 0; i < KL_CLUSTER_MAX_MEMBERS; i++)
        if (t->conns[i])
            kl_rpc_client_close(t->conns[i]);
    uv_close((uv_handle_t *)&t->async, on_closed);
}
