/* client: kl_client, the routing of one request to a partition's leader, and the calls
 * (Batch, QueueStats; reads on partition 0 for LocateQueue and principal.c's ShowPrincipal;
 * kl_sdk_partition_read for transfer.c's reads on a queue's or a named partition).
 *
 * Routing: the partition's last known leader is tried first (remembered per partition and
 * shared by every thread and every kl_client of the process that opened the same cluster
 * name: from the member that last answered, or a
 * NOT_LEADER answer naming one), then the members of the partition's member table in slot
 * order (client/sdk/member_table.h: the cluster file's, then those learned from Members; a
 * round walks those of the newest configuration known); a member that answers NOT_LEADER
 * or UNAVAILABLE, or does not answer, is forgotten as leader. A NOT_LEADER answer naming a
 * member in the table is followed (at most KL_MAX_REDIRECTS times); an address the table
 * does not hold is not dialed before a Members answer vouched for it ("the Members
 * sub-step" below). When a whole round ends
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
#include "client/sdk/member_table.h"
#include "common/clock.h"
#include "keyload/v1/catalog.pb-c.h"
#include "keyload/v1/membership.pb-c.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define METHOD_BATCH "keyload.v1.Batch"
#define METHOD_QUEUE_STATS "keyload.v1.QueueStats"
#define METHOD_LOCATE "keyload.v1.LocateQueue"
#define METHOD_MEMBERS "keyload.v1.Members"
#define PLACEMENT_CACHE 256
#define KL_MIN_ATTEMPT_MS 250 /* the least time one member is given within a call */ /* queue placements remembered per client (round robin) */

struct kl_client {
    kl_cluster cluster; /* immutable after open */
    char database_text[2 * KL_SDK_NAME_MAX + 2];
    char tenant[KL_SDK_NAME_MAX + 1];
    char database[KL_SDK_NAME_MAX + 1];
    int timeout_ms;
    pthread_mutex_t mu; /* guards conns and placements */
    kl_rpc_client *conns[KL_CLUSTER_MAX_PARTITIONS][KL_SDK_MEMBERS_MAX]; /* by member table slot */
    struct leader_cache *leaders; /* shared with every client of this cluster name */
    kl_sdk_member_tables *members; /* shared with every client of this cluster file */
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
    /* A sealed client learns members only from authenticated answers: not from the tables
     * unsealed clients share (member_table.h). Nothing was called yet, so swap them. */
    kl_sdk_member_tables *sealed = rc == KL_OK ? kl_sdk_member_tables_acquire(&c->cluster, true) : NULL;
    if (rc == KL_OK && sealed == NULL)
        rc = kl_sdk_oom(err);
    if (rc != KL_OK) {
        kl_client_close(c);
        return rc;
    }
    kl_sdk_member_tables_release(c->members);
    c->members = sealed;
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
    c->members = c->leaders != NULL ? kl_sdk_member_tables_acquire(&c->cluster, false) : NULL;
    if (c->members == NULL) {
        leader_cache_release(c->leaders);
        free(c);
        return kl_sdk_oom(err);
    }
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        kl_sdk_member_tables_release(c->members);
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
        for (int m = 0; m < KL_SDK_MEMBERS_MAX; m++)
            if (c->conns[p][m] != NULL)
                kl_rpc_client_close(c->conns[p][m]);
    kl_sdk_principal_free(c->principal);
    kl_sdk_member_tables_release(c->members);
    leader_cache_release(c->leaders);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

const char *kl_client_database(const kl_client *c) { return c->database_text; }

static int64_t now_ms(void)
{
    return kl_clock_ms(CLOCK_MONOTONIC);
}

/* The connection to member table slot mi of partition index pi, dialed on first use. */
static kl_code conn_get(kl_client *c, int pi, const kl_sdk_members *t, int mi, int timeout_ms,
                        kl_rpc_client **out, kl_err *err)
{
    pthread_mutex_lock(&c->mu);
    *out = c->conns[pi][mi];
    pthread_mutex_unlock(&c->mu);
    if (*out != NULL)
        return KL_OK;
    kl_rpc_client *fresh;
    kl_code rc = kl_rpc_client_open(kl_sdk_members_at(t, mi)->client_url, timeout_ms,
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

/* The member table slot of partition index pi to try first, or -1. */
static int leader_get(kl_client *c, int pi)
{
    const kl_sdk_members *t = kl_sdk_member_tables_at(c->members, pi);
    char url[KL_URL_MAX] = "";
    leader_cache *lc = c->leaders;
    pthread_mutex_lock(&lc->mu);
    int i = leader_slot(lc, t->partition, false);
    if (i >= 0)
        snprintf(url, sizeof url, "%s", lc->leaders[i].url);
    pthread_mutex_unlock(&lc->mu);
    return kl_sdk_members_find_url(t, url);
}

static void leader_set(kl_client *c, int pi, int mi)
{
    const kl_sdk_members *t = kl_sdk_member_tables_at(c->members, pi);
    leader_cache *lc = c->leaders;
    pthread_mutex_lock(&lc->mu);
    int i = leader_slot(lc, t->partition, true);
    if (i >= 0)
        snprintf(lc->leaders[i].url, sizeof lc->leaders[i].url, "%s", kl_sdk_members_at(t, mi)->client_url);
    pthread_mutex_unlock(&lc->mu);
}

/* mi did not serve: forget it as leader, unless another caller learned of a leader since. */
static void leader_forget(kl_client *c, int pi, int mi)
{
    const kl_sdk_members *t = kl_sdk_member_tables_at(c->members, pi);
    leader_cache *lc = c->leaders;
    pthread_mutex_lock(&lc->mu);
    int i = leader_slot(lc, t->partition, false);
    if (i >= 0 && strcmp(lc->leaders[i].url, kl_sdk_members_at(t, mi)->client_url) == 0)
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

/* The answer of a call that did not succeed, from its last error and whether a request
 * may have executed unseen. */
static kl_code call_failed(const kl_client *c, int pid, const call_spec *s, const kl_err *last,
                           const kl_err *answered, bool maybe_sent, kl_err *err)
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
    /* A member's own refusal says more than failing to reach another one (a dead member
     * tried last would otherwise hide why the live ones refused). */
    if (last->code == KL_UNAVAILABLE && answered->code != KL_OK && local_failure(last))
        return kl_fail(err, KL_UNAVAILABLE, answered->code == KL_UNAVAILABLE ? answered->detail : last->detail,
                       "no member of partition %d took the request (it was not executed); "
                       "a member answered %s %s: %s; last: %s",
                       pid, kl_code_name(answered->code), answered->detail, answered->message, last->message);
    if (last->code == KL_UNAVAILABLE)
        return kl_fail(err, KL_UNAVAILABLE, last->detail,
                       "no member of partition %d took the request (it was not executed); "
                       "last: %s",
                       pid, last->message);
    if (err != NULL)
        *err = *last;
    return last->code;
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

/* A partition answered that the queue lives elsewhere: the cached placement is stale
 * (the queue was deleted and created again). */
static bool moved_elsewhere(kl_code rc, const kl_err *err, int pid)
{
    return rc == KL_NOT_FOUND && err != NULL && strcmp(err->detail, "wrong_partition") == 0 && pid != 0;
}

/* ------------------------------------------------------------ a call, as a machine
 *
 * Every call of this file runs as one kl_call: a partition call (pc_*: the routing loop
 * above, one attempt at a time) inside an upper step (locate the queue, then send; a
 * queue deletion's two steps; a stale placement's second try). Attempts run on the call's
 * own rpc op and end in its aio callback, so no thread waits for them; the blocking API
 * starts the same machine and waits for its end (call_wait), so there is one
 * implementation of routing, redirects, retries and sessions. */

typedef struct kl_call kl_call;
typedef void (*call_step_fn)(kl_call *call);


struct kl_call {
    kl_client *c;
    kl_rpc_op *op;
    atomic_bool cancelled;
    bool blocking_dial;        /* on the caller's thread: a first dial may wait, as ever */
    /* ---- the partition call in flight */
    call_spec s;
    int pid, pi;
    kl_sdk_members *mt;        /* the partition's member table (shared, append-only) */
    int n;                     /* slots this round walks (the table's count at its start) */
    uint64_t gen;              /* the table's generation at the round's start */
    int64_t deadline;
    int next, target, redirects, hinted, mi;
    int64_t pause;
    bool alive, maybe_sent, sealed, pausing;
    /* A member answered it is full: the next attempt goes to it again after busy_ms
     * (busy_due), and the pause in flight is that one (busy_pausing), not a round's. */
    bool busy_due, busy_pausing;
    int busy_ms;
    uint64_t lost;
    kl_err last;
    kl_err answered;           /* the last refusal a member answered (not a local failure); code KL_OK: none */
    kl_sdk_sealed_att att;
    /* ---- a Members sub-step (learning members) in the partition call */
    int learning;              /* LEARN_NONE, or why it runs */
    bool learned_round;        /* this round had its sub-step: the next one pauses or ends */
    int learn_first;           /* the member to ask first (-1: any) */
    uint64_t learn_tried;      /* slots asked in this sub-step */
    call_spec learn_saved;     /* the call's own request, sent again afterwards */
    kl_err learn_last;         /* the call's last error before the sub-step */
    kl_err learn_answered;     /* and its last refusal a member answered */
    uint8_t *held_ans;         /* LEARN_AFTER: the answer the call already has */
    size_t held_len;
    call_step_fn pc_done;      /* the upper step after the partition call */
    kl_code pc_rc;
    uint8_t *pc_ans;
    size_t pc_ans_len;
    /* ---- the upper steps */
    const kl_batch *batch;     /* borrowed until done */
    kl_batch_route route;
    const char *queue;         /* a read located by queue (borrowed copy below) */
    char queue_buf[KL_SDK_NAME_MAX + 1];
    const char *locating;      /* the queue whose placement is being asked */
    call_step_fn step_after_locate;
    uint8_t locate_req[512];
    int tries;                 /* stale-placement retries */
    int step;                  /* a queue deletion: 1 = close where it lives, 2 = drop */
    uint8_t *req;              /* owned */
    size_t req_len;
    const char *method;
    /* ---- the result */
    kl_sdk_decode_fn decode;
    void *out;                 /* decode's output (typed reads), or a kl_receipt ** */
    uint8_t **raw;             /* the raw answer (untyped reads) */
    size_t *raw_len;
    kl_code rc;
    kl_err err;
    kl_call_done_fn done;
    void *arg;
    /* ---- a blocking caller's wait */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool finished;
};

static void pc_advance(kl_call *call);

/* Why a partition call runs a Members sub-step (see "the Members sub-step" below). */
enum { LEARN_NONE, LEARN_ROUND, LEARN_HINT, LEARN_AFTER };

static void call_finish(kl_call *call, kl_code rc)
{
    call->rc = rc;
    free(call->req);
    call->req = NULL;
    call->done(call, call->arg);
}

/* The partition call ends (call->pc_rc; on KL_OK call->pc_ans holds the answer). */
static void pc_end(kl_call *call, kl_code rc)
{
    call->pc_rc = rc;
    if (call->sealed)
        kl_sdk_sealed_att_clear(&call->att);
    call->pc_done(call);
}

static bool learn_done(kl_call *call, int leader);
static void learn_restore(kl_call *call);

static void pc_fail(kl_call *call)
{
    if (call->learning == LEARN_AFTER) { /* the call has its answer: the sub-step only ends */
        learn_done(call, -1);
        return;
    }
    if (call->learning != LEARN_NONE)
        learn_restore(call);
    pc_end(call, call_failed(call->c, call->pid, &call->s, &call->last, &call->answered, call->maybe_sent,
                             &call->err));
}

/* Sends spec to partition pid; `then` runs when it is answered or given up. */
static void pc_start(kl_call *call, int pid, const call_spec *s, call_step_fn then)
{
    kl_client *c = call->c;
    call->s = *s;
    call->pid = pid;
    call->pc_done = then;
    call->pc_ans = NULL;
    call->pc_ans_len = 0;
    call->sealed = false;
    call->pausing = false;
    call->busy_due = false;
    call->busy_pausing = false;
    call->busy_ms = KL_BUSY_PAUSE_MIN_MS;
    call->learning = LEARN_NONE;
    call->learned_round = false;
    call->pi = partition_slot(c, pid);
    if (call->pi < 0) {
        pc_end(call, kl_fail(&call->err, KL_INVALID_ARGUMENT, "partition",
                             "partition %d is not in the cluster file", pid));
        return;
    }
    call->mt = kl_sdk_member_tables_at(c->members, call->pi);
    call->gen = kl_sdk_members_generation(call->mt);
    call->n = kl_sdk_members_count(call->mt);
    call->deadline = now_ms() + c->timeout_ms + s->wait_ms;
    call->next = 0;
    call->target = leader_get(c, call->pi);
    call->hinted = call->target; /* tried first, so skipped in the first pass */
    call->redirects = 0;
    call->pause = 50;
    call->alive = false;      /* some member answered this round without serving us */
    call->maybe_sent = false; /* a request may have been executed without our knowing */
    call->lost = 0;           /* members whose connection failed during this call */
    kl_fail(&call->last, KL_UNAVAILABLE, "no_member",
            "no member of partition %d could be reached", pid);
    kl_err_clear(&call->answered);
    pc_advance(call);
}

/* ---- the Members sub-step
 *
 * The call asks a member of the partition for its configuration (keyload.v1.Members, through
 * the same attempt machinery, so under the same session checks) and learns it into the
 * partition's member table (member_table.h says what is trusted), then goes on with its own
 * request. Three reasons, each rate-limited per partition for the whole process
 * (kl_sdk_members_learn_due) and inside the call's deadline:
 *   LEARN_ROUND  a whole round found no member that serves: ask any member, the ones that
 *                answered this call first, those whose connection failed last; then a new
 *                round on what was learned;
 *   LEARN_HINT   a NOT_LEADER named a leader address the table does not hold: ask the member
 *                that named it (it answered, so it is alive), then follow;
 *   LEARN_AFTER  the call succeeded after a member's connection failed (the partition may
 *                have changed members): ask the member that just answered, once, and
 *                return the answer the call already has whatever this gives. */
static void learn_begin(kl_call *call, int why, int first)
{
    call->learning = why;
    call->learn_first = first;
    call->learn_tried = 0;
    call->learn_saved = call->s;
    call->learn_last = call->last;
    call->learn_answered = call->answered;
    call->s = (call_spec){.method = METHOD_MEMBERS, .command_id = "", .req = (const uint8_t *)"",
                          .req_len = 0};
}

/* Puts the call's own request back. */
static void learn_restore(kl_call *call)
{
    call->s = call->learn_saved;
    call->last = call->learn_last;
    call->answered = call->learn_answered;
    call->learning = LEARN_NONE;
}

/* A new round on the table as it is now (after a sub-step: no pause). */
static void round_reset(kl_call *call, int target)
{
    call->n = kl_sdk_members_count(call->mt);
    call->gen = kl_sdk_members_generation(call->mt);
    call->next = 0;
    call->redirects = 0;
    call->alive = false;
    call->learned_round = false;
    call->target = target;
    call->hinted = target;
}

/* The sub-step is over: true when that ended the partition call (LEARN_AFTER). leader is the
 * slot the answer named as leader (-1: none). */
static bool learn_done(kl_call *call, int leader)
{
    int why = call->learning;
    learn_restore(call);
    if (why == LEARN_AFTER) {
        call->pc_ans = call->held_ans;
        call->pc_ans_len = call->held_len;
        call->held_ans = NULL;
        pc_end(call, KL_OK);
        return true;
    }
    if (leader >= 0 || kl_sdk_members_generation(call->mt) != call->gen) {
        round_reset(call, leader >= 0 ? leader : leader_get(call->c, call->pi));
        return false;
    }
    call->learned_round = true; /* nothing new: the round ends as it would have */
    return false;
}

/* The next member to ask in the sub-step, or -1. */
static int learn_pick(kl_call *call)
{
    uint64_t tried = call->learn_tried;
    int f = call->learn_first;
    if (f >= 0 && !(tried >> f & 1))
        return f;
    if (call->learning == LEARN_AFTER)
        return -1;
    int n = kl_sdk_members_count(call->mt);
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < n; i++) {
            bool lost = call->lost >> i & 1, cur = kl_sdk_members_is_current(call->mt, i);
            if (tried >> i & 1)
                continue;
            if ((pass == 0 && !lost && cur) || (pass == 1 && !lost && !cur) || (pass == 2 && lost))
                return i;
        }
    return -1;
}

/* Learns a Members answer into the table. Returns the leader slot it named (remembered as
 * the partition's leader), or -1. */
static int learn_apply(kl_call *call, const uint8_t *ans, size_t ans_len)
{
    Keyload__V1__MembersAnswer *a = keyload__v1__members_answer__unpack(NULL, ans_len, ans);
    if (a == NULL)
        return -1;
    int added = 0, leader = -1;
    kl_err e;
    kl_err_clear(&e);
    kl_code rc = kl_sdk_members_learn(call->mt, a, call->c->principal != NULL, &added, &e);
    if (rc == KL_OK || rc == KL_RESOURCE_EXHAUSTED) {
        leader = kl_sdk_members_find_id(call->mt, a->leader);
        if (leader >= 0 && !kl_sdk_members_is_current(call->mt, leader))
            leader = -1;
        if (leader >= 0)
            leader_set(call->c, call->pi, leader);
    }
    keyload__v1__members_answer__free_unpacked(a, NULL);
    return leader;
}

/* The Members answer of the sub-step (ans is the call's to free). */
static int learn_absorb(kl_call *call, uint8_t *ans, size_t ans_len)
{
    int leader = learn_apply(call, ans, ans_len);
    free(ans);
    return leader;
}

/* One attempt of the sub-step ended: true = the partition call is over. */
static bool learn_result(kl_call *call, kl_code rc, uint8_t *ans, size_t ans_len)
{
    call->learn_tried |= 1ull << (call->mi & 63);
    if (rc == KL_OK)
        return learn_done(call, learn_absorb(call, ans, ans_len));
    free(ans);
    return false; /* pc_advance asks the next member, or ends the sub-step */
}

/* At the end of a round that nothing served: true when the call goes on at once (a new round
 * on members another call learned meanwhile, or a sub-step). */
static bool learn_at_round_end(kl_call *call)
{
    if (call->learned_round)
        return false;
    if (kl_sdk_members_generation(call->mt) != call->gen) {
        round_reset(call, leader_get(call->c, call->pi));
        return true;
    }
    if (call->deadline - now_ms() <= 0 || !kl_sdk_members_learn_due(call->mt, now_ms()))
        return false;
    learn_begin(call, LEARN_ROUND, -1);
    return true;
}

/* NOT_LEADER from member mi: remember the leader it named (or forget mi) and go there
 * next, at most KL_MAX_REDIRECTS times per round. A leader the member table does not hold
 * is learned from mi first (LEARN_HINT). */
static void follow_redirect(kl_call *call, const char *leader)
{
    int li = leader[0] ? kl_sdk_members_find_url(call->mt, leader) : -1;
    if (li >= 0)
        leader_set(call->c, call->pi, li);
    else
        leader_forget(call->c, call->pi, call->mi);
    if (li < 0 && leader[0] && call->learning == LEARN_NONE && kl_sdk_members_learn_due(call->mt, now_ms())) {
        learn_begin(call, LEARN_HINT, call->mi);
        return;
    }
    if (li >= 0 && call->redirects < KL_MAX_REDIRECTS) {
        call->redirects++;
        call->target = li;
    }
}

/* The partition call succeeded with ans from member mi: true = it is over (pc_end ran);
 * false = a LEARN_AFTER sub-step holds the answer and goes on. */
static bool pc_succeeded(kl_call *call, uint8_t *ans, size_t ans_len)
{
    /* Any member answers Members (kl_client_members): its answer, not the fact that it
     * answered, says who leads; and what it says is learned like a sub-step's. */
    bool members = strcmp(call->s.method, METHOD_MEMBERS) == 0;
    if (members) {
        if (learn_apply(call, ans, ans_len) < 0)
            leader_forget(call->c, call->pi, call->mi);
    } else {
        leader_set(call->c, call->pi, call->mi);
    }
    if (!members && call->lost != 0 && call->deadline - now_ms() > KL_MIN_ATTEMPT_MS &&
        kl_sdk_members_learn_due(call->mt, now_ms())) {
        call->held_ans = ans;
        call->held_len = ans_len;
        learn_begin(call, LEARN_AFTER, call->mi);
        return false;
    }
    call->pc_ans = ans;
    call->pc_ans_len = ans_len;
    pc_end(call, KL_OK);
    return true;
}

/* A Hello refused because the member at that address is not the identity this slot names
 * (replaced under the same address) or does not sign with its key: the slot is stale. */
static bool stale_identity(kl_code rc, const kl_err *e)
{
    return rc == KL_UNAUTHENTICATED &&
           (strcmp(e->detail, "wrong_member") == 0 || strcmp(e->detail, "bad_member_signature") == 0);
}

/* The member answered that a bound of its own is full (it serves, and it leads: a follower
 * says NOT_LEADER first): the same member is asked again after a short pause. Forgetting it
 * as leader would send this call, and every other call of the client that shares the
 * leader cache, to a follower for a NOT_LEADER and back, adding load to a member that is
 * already full. */
static bool member_busy(kl_code rc, const kl_err *e)
{
    return rc == KL_UNAVAILABLE &&
           (strcmp(e->detail, "reads_full") == 0 || strcmp(e->detail, "write_pipeline_full") == 0 ||
            strcmp(e->detail, "max_unpersisted_entries") == 0);
}

/* The result of one attempt at call->mi: true = the partition call is over (pc_end ran). */
static bool pc_attempt_result(kl_call *call, kl_code rc, const kl_err *e, uint8_t *ans,
                              size_t ans_len, const char *leader)
{
    int mi = call->mi;
    if (call->learning != LEARN_NONE)
        return learn_result(call, rc, ans, ans_len);
    if (rc == KL_OK)
        return pc_succeeded(call, ans, ans_len);
    if (member_busy(rc, e)) {
        /* Refused before anything ran: the same bytes may go again. */
        call->last = *e;
        call->answered = *e;
        call->alive = true;
        call->target = mi;
        call->busy_due = true;
        return false;
    }
    if (rc == KL_UNAVAILABLE || rc == KL_DEADLINE_EXCEEDED || rc == KL_UNKNOWN_WRITE_OUTCOME ||
        stale_identity(rc, e))
        leader_forget(call->c, call->pi, mi); /* it may have stopped leading */
    call->last = *e;
    /* A redirect says less than a refusal: it does not replace one. */
    if (rc != KL_OK && !local_failure(e) && (rc != KL_NOT_LEADER || call->answered.code == KL_OK ||
                                             call->answered.code == KL_NOT_LEADER))
        call->answered = *e;
    if (stale_identity(rc, e)) {
        call->lost |= 1ull << (mi & 63); /* nothing was sent; another member may serve */
        return false;
    }
    switch (rc) {
    case KL_NOT_LEADER:
        call->alive = true;
        follow_redirect(call, leader);
        return false;
    case KL_UNAVAILABLE:
        /* Not sent, or refused before being proposed: the next member may serve it. */
        call->alive = call->alive || !local_failure(e);
        if (local_failure(e))
            call->lost |= 1ull << (mi & 63);
        return false;
    case KL_DEADLINE_EXCEEDED:
        if (strcmp(e->detail, "no_answer") == 0) {
            /* Lost answer or connection: it may have executed. Retrying elsewhere with
             * the same bytes is safe and may still learn the outcome. */
            call->maybe_sent = true;
            call->lost |= 1ull << (mi & 63);
            call->alive = true;
            return false;
        }
        break; /* the server's own deadline check: refused before execution */
    case KL_UNKNOWN_WRITE_OUTCOME:
        /* The leader changed (or the deadline came) after proposing it: the same bytes,
         * sent again while time remains, either find the committed outcome or commit it
         * once. Only when time runs out is the outcome unknown. */
        call->maybe_sent = true;
        call->alive = true;
        return false;
    default: /* a definitive answer (INVALID_ARGUMENT, CONFLICT, NOT_FOUND, ...) */
        break;
    }
    pc_fail(call);
    return true;
}

/* Starts one attempt at member mi: true = it already ended (pc_attempt_result ran, and
 * said whether the partition call is over in *over). */
static bool pc_attempt(kl_call *call, int64_t left, bool *over)
{
    kl_client *c = call->c;
    int mi = call->mi;
    /* One member gets at most a quarter of the call's time, so a dead member (whose
     * connection waits for a reconnect that never comes) cannot use it all up. A resend
     * carries the same bytes, so it is as safe as waiting. */
    int64_t per = c->timeout_ms / 4 > KL_MIN_ATTEMPT_MS ? c->timeout_ms / 4 : KL_MIN_ATTEMPT_MS;
    int attempt_ms = (int)(left < per ? left : per);
    kl_rpc_client *conn;
    kl_err e;
    kl_err_clear(&e);
    if (conn_get(c, call->pi, call->mt, mi, call->blocking_dial ? attempt_ms : -1, &conn, &e) !=
        KL_OK) {
        leader_forget(c, call->pi, mi);
        call->lost |= 1ull << (mi & 63);
        if (call->learning != LEARN_NONE) {
            *over = learn_result(call, e.code, NULL, 0);
            return true;
        }
        call->last = e;
        *over = false;
        return true;
    }
    /* A Receive may wait at the member: the attempt grows by its wait, except at a member
     * whose connection failed in this call (a send to a dead member waits the whole
     * attempt for a connection that never comes). */
    if (call->s.wait_ms > 0 && !(call->lost >> (mi & 63) & 1))
        attempt_ms = (int)(left < per + call->s.wait_ms ? left : per + call->s.wait_ms);
    kl_code rc;
    if (c->principal != NULL) {
        call->sealed = true;
        rc = kl_sdk_sealed_att_init(&call->att, c->principal, call->pid, call->pi, mi,
                                    kl_sdk_members_at(call->mt, mi), conn, call->op,
                                    call->s.method, call->s.req, call->s.req_len, attempt_ms, &e);
        if (rc == KL_OK && !kl_sdk_sealed_begin(&call->att))
            return false;
        if (rc == KL_OK) {
            rc = call->att.rc;
            e = call->att.err;
        }
        *over = pc_attempt_result(call, rc, &e, call->att.ans, call->att.ans_len,
                                  call->att.leader);
        return true;
    }
    rc = kl_rpc_op_start(call->op, conn, call->s.method, call->s.req, call->s.req_len, NULL,
                         attempt_ms, &e);
    if (rc == KL_OK)
        return false;
    *over = pc_attempt_result(call, rc, &e, NULL, 0, "");
    return true;
}

/* The member the routing loop tries next: the sub-step's, the target (cached leader or a
 * redirect), then the current members in table order. -1: the round (or sub-step) is over;
 * -2: a sub-step ended the partition call. */
static int pc_pick(kl_call *call)
{
    for (;;) {
        if (call->learning != LEARN_NONE) {
            int mi = learn_pick(call);
            if (mi >= 0 && call->deadline - now_ms() > 0)
                return mi;
            if (learn_done(call, -1))
                return -2;
            continue;
        }
        if (call->target >= 0) {
            int mi = call->target;
            call->target = -1;
            return mi;
        }
        if (call->next >= call->n)
            return -1;
        int mi = call->next++;
        if (mi != call->hinted && kl_sdk_members_is_current(call->mt, mi))
            return mi;
    }
}

/* The routing loop: the cached leader first, then the members in order, rounds repeated
 * after a growing pause while some member was alive and time remains; a Members sub-step
 * where a round (or a redirect) shows that the table may be behind the partition. Returns
 * when an attempt or a pause is in flight, or the partition call is over. */
static void pc_advance(kl_call *call)
{
    for (;;) {
        if (atomic_load(&call->cancelled)) {
            if (call->learning == LEARN_AFTER) {
                learn_done(call, -1);
                return;
            }
            if (call->learning != LEARN_NONE)
                learn_restore(call); /* the error names the call's own request */
            if (!call->maybe_sent)
                kl_fail(&call->last, KL_UNAVAILABLE, "cancelled",
                        "the call was cancelled; %s was not sent", call->s.method);
            pc_fail(call);
            return;
        }
        if (call->busy_due) {
            call->busy_due = false;
            if (call->deadline - now_ms() <= call->busy_ms) {
                pc_fail(call);
                return;
            }
            call->pausing = true;
            call->busy_pausing = true;
            kl_rpc_sleep_start(call->op, call->busy_ms);
            call->busy_ms = call->busy_ms * 2 > KL_BUSY_PAUSE_MAX_MS ? KL_BUSY_PAUSE_MAX_MS : call->busy_ms * 2;
            return;
        }
        int mi = pc_pick(call);
        if (mi == -2)
            return;
        if (mi < 0) {
            if (learn_at_round_end(call))
                continue;
            int64_t left = call->deadline - now_ms();
            if (!call->alive || left <= call->pause) {
                pc_fail(call);
                return;
            }
            call->pausing = true;
            kl_rpc_sleep_start(call->op, (int)call->pause);
            return;
        }
        call->mi = mi;
        int64_t left = call->deadline - now_ms();
        if (left <= 0) {
            pc_fail(call);
            return;
        }
        bool over = false;
        if (!pc_attempt(call, left, &over))
            return; /* in flight: call_op_done goes on */
        if (over)
            return;
    }
}

/* The pause between two rounds is over: a new round from the first member. */
static void pc_round(kl_call *call)
{
    call->pausing = false;
    call->pause = call->pause * 2 > 800 ? 800 : call->pause * 2;
    round_reset(call, -1);
    pc_advance(call);
}

/* The call's rpc op is done (an nng thread): an attempt's exchange, or a pause. */
static void call_op_done(void *arg)
{
    kl_call *call = arg;
    call->blocking_dial = false; /* an nng thread from now on: never wait for a dial */
    if (call->pausing) {
        if (call->busy_pausing) { /* call->target is the busy member */
            call->pausing = false;
            call->busy_pausing = false;
            pc_advance(call);
        } else {
            pc_round(call);
        }
        return;
    }
    bool over;
    if (call->sealed) {
        if (!kl_sdk_sealed_answered(&call->att))
            return;
        over = pc_attempt_result(call, call->att.rc, &call->att.err, call->att.ans,
                                 call->att.ans_len, call->att.leader);
    } else {
        uint8_t *ans = NULL;
        size_t ans_len = 0;
        char leader[KL_URL_MAX] = "";
        kl_err e;
        kl_err_clear(&e);
        kl_code rc = kl_rpc_op_result(call->op, &ans, &ans_len, NULL, leader, sizeof leader, &e);
        over = pc_attempt_result(call, rc, &e, ans, ans_len, leader);
    }
    if (!over)
        pc_advance(call);
}

/* A Hello this call's attempt waited for has ended: the attempt goes on. */
static void call_wake(void *arg)
{
    kl_call *call = arg;
    call->blocking_dial = false;
    if (!kl_sdk_sealed_begin(&call->att))
        return;
    if (!pc_attempt_result(call, call->att.rc, &call->att.err, call->att.ans,
                           call->att.ans_len, call->att.leader))
        pc_advance(call);
}

static kl_code call_new(kl_client *c, kl_call_done_fn done, void *arg, kl_call **out,
                        kl_err *err)
{
    kl_call *call = calloc(1, sizeof *call);
    if (call == NULL)
        return kl_sdk_oom(err);
    if (kl_rpc_op_new(call_op_done, call, &call->op, err) != KL_OK) {
        free(call);
        return err != NULL ? err->code : KL_RESOURCE_EXHAUSTED;
    }
    pthread_mutex_init(&call->mu, NULL);
    pthread_cond_init(&call->cv, NULL);
    call->c = c;
    call->att.wake = call_wake;
    call->att.arg = call;
    call->done = done;
    call->arg = arg;
    call->rc = KL_INTERNAL;
    *out = call;
    return KL_OK;
}

void kl_call_free(kl_call *call)
{
    if (call == NULL)
        return;
    kl_rpc_op_free(call->op); /* waits for its callback, if one still runs */
    kl_sdk_sealed_att_clear(&call->att);
    free(call->pc_ans);
    free(call->held_ans);
    free(call->req);
    pthread_cond_destroy(&call->cv);
    pthread_mutex_destroy(&call->mu);
    free(call);
}

void kl_call_cancel(kl_call *call)
{
    atomic_store(&call->cancelled, true);
    kl_rpc_op_cancel(call->op);
}

void kl_calls_hold(void) { kl_rpc_cork(); }
void kl_calls_release(void) { kl_rpc_uncork(); }

/* err is written only on failure, as every blocking call of the SDK does (callers reuse
 * one kl_err across calls). */
kl_code kl_call_result(const kl_call *call, kl_err *err)
{
    if (err != NULL && call->rc != KL_OK)
        *err = call->err;
    return call->rc;
}

/* ---- the blocking API: the same machine, waited for */

static void call_signal(kl_call *call, void *arg)
{
    (void)arg;
    pthread_mutex_lock(&call->mu);
    call->finished = true;
    pthread_cond_signal(&call->cv);
    pthread_mutex_unlock(&call->mu);
}

/* Waits for a call started with call_signal as its done, frees it, returns its result. */
static kl_code call_wait(kl_call *call, kl_err *err)
{
    pthread_mutex_lock(&call->mu);
    while (!call->finished)
        pthread_cond_wait(&call->cv, &call->mu);
    pthread_mutex_unlock(&call->mu);
    kl_code rc = kl_call_result(call, err);
    kl_call_free(call);
    return rc;
}

/* ---- reads */

/* The answer of a read: decoded into call->out, or handed over raw. */
static void read_answered(kl_call *call)
{
    kl_code rc = call->pc_rc;
    if (rc == KL_OK && call->decode != NULL)
        rc = call->decode(call->pc_ans, call->pc_ans_len, call->out, &call->err);
    if (rc == KL_OK && call->raw != NULL) {
        *call->raw = call->pc_ans;
        *call->raw_len = call->pc_ans_len;
        call->pc_ans = NULL;
    }
    free(call->pc_ans);
    call->pc_ans = NULL;
    call_finish(call, rc);
}

static void read_send(kl_call *call);
static void locate_start(kl_call *call, const char *queue, call_step_fn then);

/* A read located by queue: a stale cached placement (NOT_FOUND "wrong_partition") is
 * forgotten and the queue located again, once. */
static void read_by_queue_answered(kl_call *call)
{
    if (moved_elsewhere(call->pc_rc, &call->err, call->pid) && call->tries++ == 0) {
        free(call->pc_ans);
        call->pc_ans = NULL;
        placement_forget(call->c, call->queue);
        locate_start(call, call->queue, read_send);
        return;
    }
    read_answered(call);
}

static void read_send(kl_call *call)
{
    int pid;
    if (call->pc_rc != KL_OK) { /* locating failed */
        call_finish(call, call->pc_rc);
        return;
    }
    if (!placement_get(call->c, call->queue, &pid))
        pid = 0; /* a one-partition cluster */
    call_spec s = {.method = call->method, .command_id = "", .req = call->req,
                   .req_len = call->req_len};
    pc_start(call, pid, &s, read_by_queue_answered);
}

/* Starts a read of req on `partition`, or on the partition of `queue` (partition < 0). */
static void read_start(kl_call *call, const char *queue, int partition)
{
    call_spec s = {.method = call->method, .command_id = "", .req = call->req,
                   .req_len = call->req_len};
    if (partition >= 0) {
        pc_start(call, partition, &s, read_answered);
        return;
    }
    snprintf(call->queue_buf, sizeof call->queue_buf, "%s", queue);
    call->queue = call->queue_buf;
    locate_start(call, call->queue, read_send);
}

/* Copies req (the call outlives the caller's buffer). */
static kl_code call_take_req(kl_call *call, const char *method, const uint8_t *req,
                             size_t req_len, kl_err *err)
{
    call->method = method;
    call->req = malloc(req_len ? req_len : 1);
    if (call->req == NULL)
        return kl_sdk_oom(err);
    if (req_len > 0)
        memcpy(call->req, req, req_len);
    call->req_len = req_len;
    return KL_OK;
}

kl_code kl_sdk_read(kl_client *c, const char *queue, int partition, const char *method,
                    const uint8_t *req, size_t req_len, kl_sdk_decode_fn dec, void *out,
                    const kl_sdk_async *as, kl_err *err)
{
    kl_call *call;
    kl_code rc = call_new(c, as != NULL ? as->done : call_signal, as != NULL ? as->arg : NULL,
                          &call, err);
    if (rc == KL_OK && (rc = call_take_req(call, method, req, req_len, err)) != KL_OK)
        kl_call_free(call);
    if (rc != KL_OK)
        return rc;
    call->decode = dec;
    call->out = out;
    if (as == NULL) {
        call->blocking_dial = true;
        read_start(call, queue, partition);
        return call_wait(call, err);
    }
    *as->call = call;
    read_start(call, queue, partition);
    return KL_OK;
}

/* The blocking read: the machine, waited for; the raw answer is the caller's. */
static kl_code read_wait(kl_client *c, const char *queue, int partition, const char *method,
                         const uint8_t *req, size_t req_len, uint8_t **ans, size_t *ans_len,
                         kl_err *err)
{
    *ans = NULL;
    *ans_len = 0;
    kl_call *call;
    kl_code rc = call_new(c, call_signal, NULL, &call, err);
    if (rc == KL_OK && (rc = call_take_req(call, method, req, req_len, err)) != KL_OK)
        kl_call_free(call);
    if (rc != KL_OK)
        return rc;
    call->blocking_dial = true;
    call->raw = ans;
    call->raw_len = ans_len;
    read_start(call, queue, partition);
    return call_wait(call, err);
}

kl_code kl_sdk_catalog_read(kl_client *c, const char *method, const uint8_t *req, size_t req_len,
                            uint8_t **ans, size_t *ans_len, kl_err *err)
{
    return read_wait(c, NULL, 0, method, req, req_len, ans, ans_len, err);
}

kl_code kl_sdk_partition_read(kl_client *c, const char *queue, int partition,
                              const char *method, const uint8_t *req, size_t req_len,
                              uint8_t **ans, size_t *ans_len, kl_err *err)
{
    return read_wait(c, queue, partition, method, req, req_len, ans, ans_len, err);
}

/* ---- placements */

/* The LocateQueue answer: the placement is remembered, then the caller's step runs (with
 * call->pc_rc the locate's status). */
static void located(kl_call *call)
{
    call_step_fn then = call->step_after_locate;
    if (call->pc_rc == KL_OK) {
        Keyload__V1__LocateQueueAnswer *a =
            keyload__v1__locate_queue_answer__unpack(NULL, call->pc_ans_len, call->pc_ans);
        if (a == NULL || a->queue == NULL)
            call->pc_rc = kl_fail(&call->err, KL_INTERNAL, "answer",
                                  "the answer does not decode as keyload.v1.LocateQueueAnswer");
        else
            placement_put(call->c, call->locating, a->queue->partition);
        if (a != NULL)
            keyload__v1__locate_queue_answer__free_unpacked(a, NULL);
    }
    free(call->pc_ans);
    call->pc_ans = NULL;
    then(call);
}

/* The partition holding `queue` of the client's database: from the cache, or asked of
 * partition 0 (keyload.v1.LocateQueue); `then` runs with it placed (or call->pc_rc set).
 * A one-partition cluster holds everything on 0. */
static void locate_start(kl_call *call, const char *queue, call_step_fn then)
{
    kl_client *c = call->c;
    int pid;
    call->pc_rc = KL_OK;
    if (c->cluster.partition_count <= 1 || placement_get(c, queue, &pid)) {
        then(call);
        return;
    }
    Keyload__V1__QueueLaneRef ref = KEYLOAD__V1__QUEUE_LANE_REF__INIT;
    ref.tenant = c->tenant;
    ref.database = c->database;
    ref.queue = (char *)queue;
    Keyload__V1__LocateQueueRequest lr = KEYLOAD__V1__LOCATE_QUEUE_REQUEST__INIT;
    lr.queue = &ref;
    size_t len = keyload__v1__locate_queue_request__get_packed_size(&lr);
    if (len > sizeof call->locate_req) {
        call->pc_rc = kl_fail(&call->err, KL_INVALID_ARGUMENT, "queue", "queue reference too long");
        then(call);
        return;
    }
    keyload__v1__locate_queue_request__pack(&lr, call->locate_req);
    call->locating = queue;
    call->step_after_locate = then;
    call_spec s = {.method = METHOD_LOCATE, .command_id = "", .req = call->locate_req,
                   .req_len = len};
    pc_start(call, 0, &s, located);
}

/* ---- batches */

static void batch_send(kl_call *call);

/* The first queue of the batch whose placement is not known yet, or NULL. */
static const char *batch_unplaced(kl_call *call)
{
    int pid;
    if (call->c->cluster.partition_count <= 1)
        return NULL;
    for (size_t i = 0; i < call->batch->n; i++) {
        const char *q = kl_sdk_mutation_queue(call->batch->muts[i]);
        if (q != NULL && !placement_get(call->c, q, &pid))
            return q;
    }
    return NULL;
}

/* Locates the batch's queues one at a time, then sends it. */
static void batch_locate(kl_call *call)
{
    if (call->pc_rc != KL_OK) {
        call_finish(call, call->pc_rc);
        return;
    }
    const char *q = batch_unplaced(call);
    if (q != NULL)
        locate_start(call, q, batch_locate);
    else
        batch_send(call);
}

/* The one partition all of b's queues live on (every placement known). */
static kl_code batch_partition(kl_client *c, const kl_batch *b, int *partition, kl_err *err)
{
    const char *first = NULL;
    for (size_t i = 0; i < b->n; i++) {
        const char *q = kl_sdk_mutation_queue(b->muts[i]);
        int p = 0;
        if (q == NULL || (c->cluster.partition_count > 1 && !placement_get(c, q, &p)))
            continue;
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

/* The receipt of the batch from the answer: it must name the batch's command id. */
static kl_code batch_receipt(kl_call *call, kl_receipt **out)
{
    *out = NULL;
    kl_code rc = kl_receipt_decode(call->pc_ans, call->pc_ans_len, out, &call->err);
    free(call->pc_ans);
    call->pc_ans = NULL;
    if (rc != KL_OK)
        return rc;
    const ProtobufCBinaryData *id = &(*out)->decoded->command_id;
    if (id->len != KL_GUID_LEN ||
        memcmp(id->data, kl_batch_command_id_bytes(call->batch), KL_GUID_LEN) != 0) {
        kl_receipt_free(*out);
        *out = NULL;
        return kl_fail(&call->err, KL_INTERNAL, "command_id",
                       "the receipt names another command id than the batch (%s)",
                       kl_batch_command_id(call->batch));
    }
    return KL_OK;
}

static void batch_pc(kl_call *call, int pid, call_step_fn then)
{
    call_spec s = {.method = METHOD_BATCH, .mutation = true,
                   .command_id = kl_batch_command_id(call->batch), .req = call->req,
                   .req_len = call->req_len, .wait_ms = (int)kl_sdk_batch_wait_ms(call->batch)};
    pc_start(call, pid, &s, then);
}

static void batch_answered(kl_call *call)
{
    const kl_batch *b = call->batch;
    kl_receipt *r = NULL;
    kl_code rc = call->pc_rc;
    if (rc == KL_OK)
        rc = batch_receipt(call, &r);
    if (rc == KL_OK && call->step == 1) { /* closed where it lives: now drop the definition */
        kl_receipt_free(r);
        call->step = 2;
        batch_pc(call, 0, batch_answered);
        return;
    }
    if (rc == KL_OK && call->step == 2)
        placement_forget(call->c, kl_sdk_mutation_queue(b->muts[0]));
    if (moved_elsewhere(rc, &call->err, call->pid) && call->tries++ == 0) {
        forget_batch_placements(call->c, b);
        call->step = 0;
        call->pc_rc = KL_OK;
        batch_locate(call);
        return;
    }
    if (rc == KL_OK && call->route == KL_ROUTE_CATALOG && r->decoded->n_results == 1 &&
        r->decoded->results[0]->kind_case == KEYLOAD__V1__MUTATION_RESULT__KIND_QUEUE_CREATED &&
        call->c->cluster.partition_count > 1)
        placement_put(call->c, kl_sdk_mutation_queue(b->muts[0]),
                      r->decoded->results[0]->queue_created->partition);
    *(kl_receipt **)call->out = r;
    call_finish(call, rc);
}

static void batch_send(kl_call *call)
{
    int pid = 0;
    kl_code rc = batch_partition(call->c, call->batch, &pid, &call->err);
    if (rc != KL_OK) {
        call_finish(call, rc);
        return;
    }
    /* A queue's deletion: step 1 closes it where it lives (replays answer the same). */
    call->step = call->route == KL_ROUTE_DELETE_QUEUE && pid != 0 ? 1 : 0;
    batch_pc(call, pid, batch_answered);
}

/* Validates and encodes b into a new call (nothing sent yet). */
static kl_code batch_call(kl_client *c, const kl_batch *b, kl_receipt **out,
                          kl_call_done_fn done, void *arg, kl_call **callp, kl_err *err)
{
    *out = NULL;
    kl_batch_route route;
    kl_code rc = kl_batch_kind(b, &route, err);
    if (rc != KL_OK)
        return rc;
    uint8_t *req;
    size_t req_len;
    if ((rc = kl_batch_encode(b, c->database_text, &req, &req_len, err)) != KL_OK)
        return rc;
    if (req_len > c->cluster.limits.max_batch_bytes) {
        free(req);
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "limit:MaxBatchBytes",
                       "batch of %zu bytes exceeds MaxBatchBytes (%llu)", req_len,
                       (unsigned long long)c->cluster.limits.max_batch_bytes);
    }
    kl_call *call;
    if ((rc = call_new(c, done, arg, &call, err)) != KL_OK) {
        free(req);
        return rc;
    }
    call->method = METHOD_BATCH;
    call->req = req;
    call->req_len = req_len;
    call->batch = b;
    call->route = route;
    call->out = out;
    *callp = call;
    return KL_OK;
}

static void batch_go(kl_call *call)
{
    if (call->route == KL_ROUTE_CATALOG) {
        batch_pc(call, 0, batch_answered);
        return;
    }
    call->pc_rc = KL_OK;
    batch_locate(call);
}

kl_code kl_client_batch_start(kl_client *c, const kl_batch *b, kl_receipt **out,
                              kl_call_done_fn done, void *arg, kl_call **callp, kl_err *err)
{
    kl_code rc = batch_call(c, b, out, done, arg, callp, err);
    if (rc == KL_OK)
        batch_go(*callp);
    return rc;
}

kl_code kl_client_batch(kl_client *c, const kl_batch *b, kl_receipt **out, kl_err *err)
{
    kl_call *call;
    kl_code rc = batch_call(c, b, out, call_signal, NULL, &call, err);
    if (rc != KL_OK)
        return rc;
    call->blocking_dial = true;
    batch_go(call);
    return call_wait(call, err);
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
