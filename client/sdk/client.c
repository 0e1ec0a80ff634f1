/* client: kl_client, the routing of one request to a partition's leader, and the calls
 * (Batch, QueueStats; reads on partition 0 for LocateQueue and principal.c's ShowPrincipal;
 * kl_sdk_partition_read for transfer.c's reads on a queue's or a named partition).
 *
 * Routing: the partition's last known leader is tried first (remembered per partition and
 * shared by every thread and every kl_client of the process that opened the same cluster
 * name: from the member that last answered, or a
 * NOT_LEADER answer naming one), then the members in cluster-file order; a member that
 * answers NOT_LEADER or UNAVAILABLE, or does not answer, is forgotten as leader. A NOT_LEADER
 * answer naming a member of that partition is followed (at most KL_MAX_REDIRECTS times);
 * an address that is not a member of the partition is not dialed. When a whole round ends
 * without an answer but some member was alive (NOT_LEADER without a leader, or
 * UNAVAILABLE: an election is probably running), the round is repeated after a short
 * pause while time remains. Every attempt sends the same request bytes, so a batch keeps
 * its command id and content: a retry can never execute it twice.
 *
 * Uncertainty: once a batch request may have reached a leader without an answer coming
 * back (no answer, a lost connection, or UNKNOWN_WRITE_OUTCOME after a leader change),
 * the same bytes are sent again while time remains; the final error of that call is
 * UNKNOWN_WRITE_OUTCOME unless a later attempt gets a definitive answer. Nothing here ever
 * claims a rollback. */
#include "client/sdk/internal.h"
#include "keyload/v1/catalog.pb-c.h"

#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define METHOD_BATCH "keyload.v1.Batch"
#define METHOD_QUEUE_STATS "keyload.v1.QueueStats"
#define METHOD_LOCATE "keyload.v1.LocateQueue"
#define PLACEMENT_CACHE 256
#define KL_MIN_ATTEMPT_MS 250 /* the least time one member is given within a call */ /* queue placements remembered per client (round robin) */

struct kl_client {
    kl_cluster cluster; /* immutable after open */
    char database_text[2 * KL_SDK_NAME_MAX + 2];
    char tenant[KL_SDK_NAME_MAX + 1];
    char database[KL_SDK_NAME_MAX + 1];
    int timeout_ms;
    pthread_mutex_t mu; /* guards conns and placements */
    kl_rpc_client *conns[KL_CLUSTER_MAX_PARTITIONS][KL_CLUSTER_MAX_MEMBERS];
    struct leader_cache *leaders; /* shared with every client of this cluster name */
    /* Queue placements (fixed at creation, so a cached one is wrong only after the queue
     * was deleted and created again elsewhere: the partition then answers NOT_FOUND
     * "wrong_partition" and the entry is dropped). Queues of this client's database. */
    struct {
        char queue[KL_SDK_NAME_MAX + 1]; /* "" = free */
        int partition;
    } placements[PLACEMENT_CACHE];
    size_t next_placement;
    kl_sdk_principal *principal; /* NULL: requests go unsealed (the local principal) */
};

/* ------------------------------------------------------------ the process's leader cache
 *
 * One cache per cluster name, shared by every kl_client of the process that opened that
 * cluster (refcounted, freed with the last), so a second client (another thread's, a
 * CLI's helper, the coordinator's discovery) does not pay the redirect the first already
 * paid. It remembers each partition's leader by the member's client URL: a client whose
 * cluster file lists other members for that partition simply finds no match and starts
 * from its first member. */
typedef struct leader_cache {
    struct leader_cache *next;
    char cluster[KL_NAME_MAX];
    int refs;                 /* guarded by leader_caches_mu */
    pthread_mutex_t mu;       /* guards leaders */
    struct {
        int partition;        /* partition id; -1 = free */
        char url[KL_URL_MAX];
    } leaders[KL_CLUSTER_MAX_PARTITIONS];
} leader_cache;

static pthread_mutex_t leader_caches_mu = PTHREAD_MUTEX_INITIALIZER;
static leader_cache *leader_caches;

static leader_cache *leader_cache_acquire(const char *cluster)
{
    pthread_mutex_lock(&leader_caches_mu);
    leader_cache *lc = leader_caches;
    while (lc != NULL && strcmp(lc->cluster, cluster) != 0)
        lc = lc->next;
    if (lc == NULL && (lc = calloc(1, sizeof *lc)) != NULL) {
        snprintf(lc->cluster, sizeof lc->cluster, "%s", cluster);
        for (int i = 0; i < KL_CLUSTER_MAX_PARTITIONS; i++)
            lc->leaders[i].partition = -1;
        pthread_mutex_init(&lc->mu, NULL);
        lc->next = leader_caches;
        leader_caches = lc;
    }
    if (lc != NULL)
        lc->refs++;
    pthread_mutex_unlock(&leader_caches_mu);
    return lc;
}

static void leader_cache_release(leader_cache *lc)
{
    if (lc == NULL)
        return;
    pthread_mutex_lock(&leader_caches_mu);
    if (--lc->refs == 0) {
        leader_cache **pp = &leader_caches;
        while (*pp != lc)
            pp = &(*pp)->next;
        *pp = lc->next;
        pthread_mutex_destroy(&lc->mu);
        free(lc);
    }
    pthread_mutex_unlock(&leader_caches_mu);
}

kl_code kl_client_open_principal(const char *cluster_path, const char *database,
                                 int timeout_ms, const char *principal_id, const char *key_path,
                                 kl_client **out, kl_err *err)
{
    *out = NULL;
    kl_client *c;
    kl_code rc = kl_client_open(cluster_path, database, timeout_ms, &c, err);
    if (rc != KL_OK)
        return rc;
    rc = kl_sdk_principal_new(principal_id, key_path, &c->cluster, &c->principal, err);
    if (rc != KL_OK) {
        kl_client_close(c);
        return rc;
    }
    *out = c;
    return KL_OK;
}

kl_code kl_client_open(const char *cluster_path, const char *database, int timeout_ms,
                       kl_client **out, kl_err *err)
{
    *out = NULL;
    if (sodium_init() < 0)
        return kl_fail(err, KL_INTERNAL, "sodium_init", "libsodium failed to initialize");
    if (cluster_path == NULL || cluster_path[0] == '\0')
        return kl_fail(err, KL_INVALID_ARGUMENT, "cluster", "cluster file path is empty");
    if (database == NULL)
        database = KL_DEFAULT_DATABASE;
    kl_client *c = calloc(1, sizeof *c);
    if (c == NULL)
        return kl_sdk_oom(err);
    kl_code rc = kl_sdk_split_database(database, c->tenant, c->database, err);
    if (rc == KL_OK)
        rc = kl_cluster_load(cluster_path, NULL, &c->cluster, err);
    if (rc != KL_OK) {
        free(c);
        return rc;
    }
    snprintf(c->database_text, sizeof c->database_text, "%s/%s", c->tenant, c->database);
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : KL_DEFAULT_TIMEOUT_MS;
    c->leaders = leader_cache_acquire(c->cluster.name);
    if (c->leaders == NULL) {
        free(c);
        return kl_sdk_oom(err);
    }
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        leader_cache_release(c->leaders);
        free(c);
        return kl_fail(err, KL_INTERNAL, "mutex", "cannot create a mutex");
    }
    *out = c;
    return KL_OK;
}

void kl_client_close(kl_client *c)
{
    if (c == NULL)
        return;
    for (int p = 0; p < KL_CLUSTER_MAX_PARTITIONS; p++)
        for (int m = 0; m < KL_CLUSTER_MAX_MEMBERS; m++)
            if (c->conns[p][m] != NULL)
                kl_rpc_client_close(c->conns[p][m]);
    kl_sdk_principal_free(c->principal);
    leader_cache_release(c->leaders);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

const char *kl_client_database(const kl_client *c) { return c->database_text; }

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* The connection to member slot (pi, mi) of partition p, dialed on first use. */
static kl_code conn_get(kl_client *c, int pi, const kl_partition *p, int mi, int timeout_ms,
                        kl_rpc_client **out, kl_err *err)
{
    pthread_mutex_lock(&c->mu);
    *out = c->conns[pi][mi];
    pthread_mutex_unlock(&c->mu);
    if (*out != NULL)
        return KL_OK;
    kl_rpc_client *fresh;
    kl_code rc = kl_rpc_client_open(p->members[mi].client_url, timeout_ms,
                                    (size_t)c->cluster.limits.max_frame_bytes, &fresh, err);
    if (rc != KL_OK)
        return rc;
    pthread_mutex_lock(&c->mu);
    if (c->conns[pi][mi] == NULL) {
        c->conns[pi][mi] = fresh;
        fresh = NULL;
    }
    *out = c->conns[pi][mi];
    pthread_mutex_unlock(&c->mu);
    if (fresh != NULL) /* another thread dialed the same member meanwhile */
        kl_rpc_client_close(fresh);
    return KL_OK;
}

static int member_index(const kl_partition *p, const char *url)
{
    for (int i = 0; i < p->member_count; i++)
        if (strcmp(p->members[i].client_url, url) == 0)
            return i;
    return -1;
}

/* The entry of partition id pid (created when `create`), or -1. Called under lc->mu. */
static int leader_slot(leader_cache *lc, int pid, bool create)
{
    int free_slot = -1;
    for (int i = 0; i < KL_CLUSTER_MAX_PARTITIONS; i++) {
        if (lc->leaders[i].partition == pid)
            return i;
        if (lc->leaders[i].partition < 0 && free_slot < 0)
            free_slot = i;
    }
    if (create && free_slot >= 0)
        lc->leaders[free_slot].partition = pid;
    return create ? free_slot : -1;
}

/* The member slot of partition slot pi to try first, or -1. */
static int leader_get(kl_client *c, int pi)
{
    const kl_partition *p = &c->cluster.partitions[pi];
    leader_cache *lc = c->leaders;
    pthread_mutex_lock(&lc->mu);
    int i = leader_slot(lc, p->id, false);
    int mi = i >= 0 && lc->leaders[i].url[0] ? member_index(p, lc->leaders[i].url) : -1;
    pthread_mutex_unlock(&lc->mu);
    return mi;
}

static void leader_set(kl_client *c, int pi, int mi)
{
    const kl_partition *p = &c->cluster.partitions[pi];
    leader_cache *lc = c->leaders;
    pthread_mutex_lock(&lc->mu);
    int i = leader_slot(lc, p->id, true);
    if (i >= 0)
        snprintf(lc->leaders[i].url, sizeof lc->leaders[i].url, "%s", p->members[mi].client_url);
    pthread_mutex_unlock(&lc->mu);
}

/* mi did not serve: forget it as leader, unless another caller learned of a leader since. */
static void leader_forget(kl_client *c, int pi, int mi)
{
    const kl_partition *p = &c->cluster.partitions[pi];
    leader_cache *lc = c->leaders;
    pthread_mutex_lock(&lc->mu);
    int i = leader_slot(lc, p->id, false);
    if (i >= 0 && strcmp(lc->leaders[i].url, p->members[mi].client_url) == 0)
        lc->leaders[i].url[0] = '\0';
    pthread_mutex_unlock(&lc->mu);
}

/* UNAVAILABLE raised by our side of the transport (common/rpc.c) rather than answered by a
 * member: that member is not known to be alive. */
static bool local_failure(const kl_err *e)
{
    static const char *const local[] = {"connect", "no_connection", "send", "context", "url"};
    for (size_t i = 0; i < sizeof local / sizeof local[0]; i++)
        if (strcmp(e->detail, local[i]) == 0)
            return true;
    return false;
}

typedef struct call_spec {
    const char *method;
    bool mutation;             /* a Batch: a lost answer is an unknown write outcome */
    const char *command_id;    /* text, for messages (mutations only) */
    const uint8_t *req;
    size_t req_len;
    int wait_ms;               /* a Receive may be held this long for messages (long poll) */
} call_spec;

static kl_code unknown_outcome(const call_spec *s, int timeout_ms, kl_err *err)
{
    return kl_fail(err, KL_UNKNOWN_WRITE_OUTCOME, "no_answer",
                   "no answer within %d ms (or the connection was lost): the batch may or may "
                   "not have committed (nothing was rolled back); retry with the same command "
                   "id %s to learn its outcome",
                   timeout_ms, s->command_id);
}

/* The index of partition pid in the cluster file, or -1. */
static int partition_slot(const kl_client *c, int pid)
{
    int pi = -1;
    for (int i = 0; i < c->cluster.partition_count; i++)
        if (c->cluster.partitions[i].id == pid)
            pi = i;
    return pi;
}

/* One attempt at member mi: sealed in the principal's session when the client has one. */
static kl_code invoke_member(kl_client *c, const kl_partition *p, int pi, int mi, kl_rpc_client *conn,
                             const call_spec *s, int attempt_ms, uint8_t **ans, size_t *ans_len,
                             char *leader, size_t leader_cap, kl_err *e)
{
    return c->principal != NULL
               ? kl_sdk_sealed_invoke(c->principal, p, pi, mi, conn, s->method, s->req,
                                      s->req_len, attempt_ms, ans, ans_len, leader,
                                      leader_cap, e)
               : kl_rpc_invoke(conn, s->method, s->req, s->req_len, attempt_ms, ans,
                               ans_len, leader, leader_cap, e);
}

/* NOT_LEADER from member mi: remember the leader it named (or forget mi) and go there
 * next, at most KL_MAX_REDIRECTS times per round. */
static void follow_redirect(kl_client *c, int pi, const kl_partition *p, int mi, const char *leader,
                            int *redirects, int *target)
{
    int li = leader[0] ? member_index(p, leader) : -1;
    if (li >= 0)
        leader_set(c, pi, li);
    else
        leader_forget(c, pi, mi);
    if (li >= 0 && *redirects < KL_MAX_REDIRECTS) {
        (*redirects)++;
        *target = li;
    }
}

/* The answer of a call that did not succeed, from its last error and whether a request
 * may have executed unseen. */
static kl_code call_failed(const kl_client *c, int pid, const call_spec *s, const kl_err *last,
                           bool maybe_sent, kl_err *err)
{
    if (last->code == KL_UNKNOWN_WRITE_OUTCOME && s->mutation)
        return kl_fail(err, KL_UNKNOWN_WRITE_OUTCOME, last->detail,
                       "%s; the batch may or may not have committed: retry with the same "
                       "command id %s", last->message, s->command_id);
    if (maybe_sent && (last->code == KL_UNAVAILABLE || last->code == KL_NOT_LEADER ||
                       last->code == KL_DEADLINE_EXCEEDED || last->code == KL_UNKNOWN_WRITE_OUTCOME)) {
        if (s->mutation)
            return unknown_outcome(s, c->timeout_ms, err);
        return kl_fail(err, KL_DEADLINE_EXCEEDED, "no_answer", "no answer within %d ms",
                       c->timeout_ms);
    }
    if (last->code == KL_UNAVAILABLE)
        return kl_fail(err, KL_UNAVAILABLE, last->detail,
                       "no member of partition %d took the request (it was not executed); "
                       "last: %s",
                       pid, last->message);
    if (err != NULL)
        *err = *last;
    return last->code;
}

/* Sends s to partition pid; on KL_OK *ans (malloc'd) holds the answer payload. */
static kl_code call_partition(kl_client *c, int pid, const call_spec *s, uint8_t **ans,
                              size_t *ans_len, kl_err *err)
{
    *ans = NULL;
    *ans_len = 0;
    int pi = partition_slot(c, pid);
    if (pi < 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "partition",
                       "partition %d is not in the cluster file", pid);
    const kl_partition *p = &c->cluster.partitions[pi];

    const int64_t deadline = now_ms() + c->timeout_ms + s->wait_ms;
    int next = 0, target = leader_get(c, pi), redirects = 0;
    int hinted = target; /* tried first, so skipped in the first pass over the members */
    int64_t pause = 50;
    bool alive = false;       /* some member answered this round without serving us */
    bool maybe_sent = false;  /* a request may have been executed without our knowing */
    uint64_t lost = 0;        /* members whose connection failed during this call */
    kl_err last;
    kl_fail(&last, KL_UNAVAILABLE, "no_member",
            "no member of partition %d could be reached", pid);

    for (;;) {
        int mi;
        if (target >= 0) {
            mi = target;
            target = -1;
        } else if (next < p->member_count) {
            mi = next++;
            if (mi == hinted)
                continue;
        } else {
            int64_t left = deadline - now_ms();
            if (!alive || left <= pause)
                break;
            sleep_ms(pause);
            pause = pause * 2 > 800 ? 800 : pause * 2;
            next = 0;
            redirects = 0;
            alive = false;
            hinted = -1;
            continue;
        }
        int64_t left = deadline - now_ms();
        if (left <= 0)
            break;
        /* One member gets at most a quarter of the call's time, so a dead member (whose
         * connection waits for a reconnect that never comes) cannot use it all up. A
         * resend carries the same bytes, so it is as safe as waiting. */
        int64_t per = c->timeout_ms / 4 > KL_MIN_ATTEMPT_MS ? c->timeout_ms / 4 : KL_MIN_ATTEMPT_MS;
        int attempt_ms = (int)(left < per ? left : per);
        kl_rpc_client *conn;
        kl_err e;
        kl_err_clear(&e);
        if (conn_get(c, pi, p, mi, attempt_ms, &conn, &e) != KL_OK) {
            leader_forget(c, pi, mi);
            lost |= 1ull << (mi & 63);
            last = e;
            continue;
        }
        /* A Receive may wait at the member: the attempt grows by its wait, except at a
         * member whose connection failed in this call (a send to a dead member waits the
         * whole attempt for a connection that never comes). */
        if (s->wait_ms > 0 && !(lost >> (mi & 63) & 1))
            attempt_ms = (int)(left < per + s->wait_ms ? left : per + s->wait_ms);
        char leader[KL_URL_MAX] = "";
        kl_code rc = invoke_member(c, p, pi, mi, conn, s, attempt_ms, ans, ans_len, leader,
                                   sizeof leader, &e);
        if (rc == KL_OK) {
            leader_set(c, pi, mi);
            return KL_OK;
        }
        if (rc == KL_UNAVAILABLE || rc == KL_DEADLINE_EXCEEDED || rc == KL_UNKNOWN_WRITE_OUTCOME)
            leader_forget(c, pi, mi); /* it may have stopped leading */
        switch (rc) {
        case KL_NOT_LEADER:
            alive = true;
            last = e;
            follow_redirect(c, pi, p, mi, leader, &redirects, &target);
            continue;
        case KL_UNAVAILABLE:
            /* Not sent, or refused before being proposed: the next member may serve it. */
            alive = alive || !local_failure(&e);
            if (local_failure(&e))
                lost |= 1ull << (mi & 63);
            last = e;
            continue;
        case KL_DEADLINE_EXCEEDED:
            if (strcmp(e.detail, "no_answer") == 0) {
                /* Lost answer or connection: it may have executed. Retrying elsewhere
                 * with the same bytes is safe and may still learn the outcome. */
                maybe_sent = true;
                lost |= 1ull << (mi & 63);
                alive = true;
                last = e;
                continue;
            }
            /* The server's own deadline check: refused before execution. */
            last = e;
            goto done;
        case KL_UNKNOWN_WRITE_OUTCOME:
            /* The leader changed (or the deadline came) after proposing it: the same
             * bytes, sent again while time remains, either find the committed outcome
             * or commit it once. Only when time runs out is the outcome unknown. */
            maybe_sent = true;
            alive = true;
            last = e;
            continue;
        default:
            /* A definitive answer (INVALID_ARGUMENT, CONFLICT, NOT_FOUND, ...). */
            last = e;
            goto done;
        }
    }
done:
    return call_failed(c, pid, s, &last, maybe_sent, err);
}

kl_code kl_sdk_catalog_read(kl_client *c, const char *method, const uint8_t *req, size_t req_len,
                            uint8_t **ans, size_t *ans_len, kl_err *err)
{
    call_spec s = {.method = method, .mutation = false, .command_id = "", .req = req,
                   .req_len = req_len};
    return call_partition(c, 0, &s, ans, ans_len, err);
}

static bool placement_get(kl_client *c, const char *queue, int *partition)
{
    bool found = false;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < PLACEMENT_CACHE && !found; i++)
        if (strcmp(c->placements[i].queue, queue) == 0) {
            *partition = c->placements[i].partition;
            found = true;
        }
    pthread_mutex_unlock(&c->mu);
    return found;
}

static void placement_put(kl_client *c, const char *queue, int partition)
{
    pthread_mutex_lock(&c->mu);
    size_t slot = c->next_placement;
    for (size_t i = 0; i < PLACEMENT_CACHE; i++)
        if (strcmp(c->placements[i].queue, queue) == 0)
            slot = i;
    if (slot == c->next_placement)
        c->next_placement = (c->next_placement + 1) % PLACEMENT_CACHE;
    snprintf(c->placements[slot].queue, sizeof c->placements[slot].queue, "%s", queue);
    c->placements[slot].partition = partition;
    pthread_mutex_unlock(&c->mu);
}

static void placement_forget(kl_client *c, const char *queue)
{
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < PLACEMENT_CACHE; i++)
        if (strcmp(c->placements[i].queue, queue) == 0)
            c->placements[i].queue[0] = '\0';
    pthread_mutex_unlock(&c->mu);
}

/* The partition holding `queue` of the client's database: from the cache, or asked of
 * partition 0 (keyload.v1.LocateQueue). A one-partition cluster holds everything on 0. */
static kl_code locate(kl_client *c, const char *queue, int *partition, kl_err *err)
{
    if (c->cluster.partition_count <= 1) {
        *partition = 0;
        return KL_OK;
    }
    if (placement_get(c, queue, partition))
        return KL_OK;
    Keyload__V1__QueueLaneRef ref = KEYLOAD__V1__QUEUE_LANE_REF__INIT;
    ref.tenant = c->tenant;
    ref.database = c->database;
    ref.queue = (char *)queue;
    Keyload__V1__LocateQueueRequest lr = KEYLOAD__V1__LOCATE_QUEUE_REQUEST__INIT;
    lr.queue = &ref;
    uint8_t req[512];
    size_t len = keyload__v1__locate_queue_request__get_packed_size(&lr);
    if (len > sizeof req)
        return kl_fail(err, KL_INVALID_ARGUMENT, "queue", "queue reference too long");
    keyload__v1__locate_queue_request__pack(&lr, req);
    uint8_t *ans;
    size_t ans_len;
    kl_code rc = kl_sdk_catalog_read(c, METHOD_LOCATE, req, len, &ans, &ans_len, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__LocateQueueAnswer *a = keyload__v1__locate_queue_answer__unpack(NULL, ans_len, ans);
    free(ans);
    if (a == NULL || a->queue == NULL) {
        if (a)
            keyload__v1__locate_queue_answer__free_unpacked(a, NULL);
        return kl_fail(err, KL_INTERNAL, "answer", "the answer does not decode as keyload.v1.LocateQueueAnswer");
    }
    *partition = a->queue->partition;
    keyload__v1__locate_queue_answer__free_unpacked(a, NULL);
    placement_put(c, queue, *partition);
    return KL_OK;
}

/* A partition answered that the queue lives elsewhere: the cached placement is stale
 * (the queue was deleted and created again). */
static bool moved_elsewhere(kl_code rc, const kl_err *err, int pid)
{
    return rc == KL_NOT_FOUND && err != NULL && strcmp(err->detail, "wrong_partition") == 0 && pid != 0;
}

/* The one partition all of b's queues live on. */
static kl_code batch_partition(kl_client *c, const kl_batch *b, int *partition, kl_err *err)
{
    const char *first = NULL;
    for (size_t i = 0; i < b->n; i++) {
        const char *q = kl_sdk_mutation_queue(b->muts[i]);
        if (q == NULL)
            continue;
        int p;
        kl_code rc = locate(c, q, &p, err);
        if (rc != KL_OK)
            return rc;
        if (first != NULL && p != *partition)
            return kl_fail(err, KL_INVALID_ARGUMENT, "partition",
                           "queues '%s' (partition %d) and '%s' (partition %d) live on different "
                           "partitions; a batch commits on one partition",
                           first, *partition, q, p);
        if (first == NULL) {
            first = q;
            *partition = p;
        }
    }
    if (first == NULL)
        *partition = 0;
    return KL_OK;
}

static void forget_batch_placements(kl_client *c, const kl_batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        const char *q = kl_sdk_mutation_queue(b->muts[i]);
        if (q != NULL)
            placement_forget(c, q);
    }
}

/* Sends the encoded batch to partition pid and decodes its receipt. */
static kl_code send_batch(kl_client *c, const kl_batch *b, int pid, const uint8_t *req, size_t req_len,
                          kl_receipt **out, kl_err *err)
{
    call_spec s = {.method = METHOD_BATCH, .mutation = true,
                   .command_id = kl_batch_command_id(b), .req = req, .req_len = req_len,
                   .wait_ms = (int)kl_sdk_batch_wait_ms(b)};
    uint8_t *ans;
    size_t ans_len;
    kl_code rc = call_partition(c, pid, &s, &ans, &ans_len, err);
    if (rc != KL_OK)
        return rc;
    rc = kl_receipt_decode(ans, ans_len, out, err);
    free(ans);
    if (rc != KL_OK)
        return rc;
    const ProtobufCBinaryData *id = &(*out)->decoded->command_id;
    if (id->len != KL_GUID_LEN || memcmp(id->data, kl_batch_command_id_bytes(b), KL_GUID_LEN)) {
        kl_receipt_free(*out);
        *out = NULL;
        return kl_fail(err, KL_INTERNAL, "command_id",
                       "the receipt names another command id than the batch (%s)",
                       kl_batch_command_id(b));
    }
    return KL_OK;
}

kl_code kl_client_batch(kl_client *c, const kl_batch *b, kl_receipt **out, kl_err *err)
{
    *out = NULL;
    kl_batch_route route;
    kl_code rc = kl_batch_kind(b, &route, err);
    if (rc != KL_OK)
        return rc;
    uint8_t *req;
    size_t req_len;
    rc = kl_batch_encode(b, c->database_text, &req, &req_len, err);
    if (rc != KL_OK)
        return rc;
    if (req_len > c->cluster.limits.max_batch_bytes) {
        free(req);
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "limit:MaxBatchBytes",
                       "batch of %zu bytes exceeds MaxBatchBytes (%llu)", req_len,
                       (unsigned long long)c->cluster.limits.max_batch_bytes);
    }
    int pid = 0;
    if (route == KL_ROUTE_CATALOG) {
        rc = send_batch(c, b, 0, req, req_len, out, err);
        if (rc == KL_OK && (*out)->decoded->n_results == 1 &&
            (*out)->decoded->results[0]->kind_case == KEYLOAD__V1__MUTATION_RESULT__KIND_QUEUE_CREATED &&
            c->cluster.partition_count > 1)
            placement_put(c, kl_sdk_mutation_queue(b->muts[0]),
                          (*out)->decoded->results[0]->queue_created->partition);
        free(req);
        return rc;
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        if ((rc = batch_partition(c, b, &pid, err)) != KL_OK)
            break;
        if (route == KL_ROUTE_DELETE_QUEUE && pid != 0) {
            /* Step 1: close the queue where it lives (replays answer the same). */
            kl_receipt *closed = NULL;
            rc = send_batch(c, b, pid, req, req_len, &closed, err);
            kl_receipt_free(closed);
            if (rc == KL_OK) {
                pid = 0; /* step 2: drop the definition */
                rc = send_batch(c, b, 0, req, req_len, out, err);
                if (rc == KL_OK)
                    placement_forget(c, kl_sdk_mutation_queue(b->muts[0]));
            }
        } else {
            rc = send_batch(c, b, pid, req, req_len, out, err);
        }
        if (moved_elsewhere(rc, err, pid)) {
            forget_batch_placements(c, b);
            continue;
        }
        break;
    }
    free(req);
    return rc;
}

kl_code kl_sdk_partition_read(kl_client *c, const char *queue, int partition,
                              const char *method, const uint8_t *req, size_t req_len,
                              uint8_t **ans, size_t *ans_len, kl_err *err)
{
    call_spec s = {.method = method, .mutation = false, .command_id = "", .req = req,
                   .req_len = req_len};
    if (partition >= 0)
        return call_partition(c, partition, &s, ans, ans_len, err);
    kl_code rc = KL_OK;
    for (int attempt = 0; attempt < 2; attempt++) {
        int pid;
        if ((rc = locate(c, queue, &pid, err)) != KL_OK)
            break;
        rc = call_partition(c, pid, &s, ans, ans_len, err);
        if (moved_elsewhere(rc, err, pid)) {
            placement_forget(c, queue);
            continue;
        }
        break;
    }
    return rc;
}

kl_code kl_client_queue_stats(kl_client *c, const char *queue,
                              Keyload__V1__QueueStatsAnswer **out, kl_err *err)
{
    *out = NULL;
    kl_code rc = kl_sdk_check_name("queue", queue, KL_SDK_NAME_QUEUE, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__QueueLaneRef ref = KEYLOAD__V1__QUEUE_LANE_REF__INIT;
    ref.tenant = c->tenant;
    ref.database = c->database;
    ref.queue = (char *)queue;
    Keyload__V1__QueueStatsRequest sr = KEYLOAD__V1__QUEUE_STATS_REQUEST__INIT;
    sr.queue = &ref;
    size_t len = keyload__v1__queue_stats_request__get_packed_size(&sr);
    uint8_t *req = malloc(len ? len : 1);
    if (req == NULL)
        return kl_sdk_oom(err);
    keyload__v1__queue_stats_request__pack(&sr, req);
    uint8_t *ans = NULL;
    size_t ans_len;
    rc = kl_sdk_partition_read(c, queue, -1, METHOD_QUEUE_STATS, req, len, &ans, &ans_len, err);
    free(req);
    if (rc != KL_OK)
        return rc;
    *out = keyload__v1__queue_stats_answer__unpack(NULL, ans_len, ans);
    free(ans);
    if (*out == NULL)
        return kl_fail(err, KL_INTERNAL, "answer",
                       "the answer does not decode as keyload.v1.QueueStatsAnswer");
    return KL_OK;
}
