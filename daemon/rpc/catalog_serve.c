/* The catalog's RPCs (ARCHITECTURE.md "Replication"): CatalogTail and the catalog barrier on partition 0,
 * LocateQueue on any member.
 *
 * Tail: a data partition's leader long-polls partition 0's leader with the version it has
 * applied; the answer carries the changes after it (at most KL_TAIL_MAX_CHANGES, within
 * half a frame). An empty answer is held until a new version applies here or the
 * caller's wait (at most KL_TAIL_WAIT_MAX_MS) runs out. The reported versions are this
 * leader's knowledge of every data partition's progress.
 *
 * Barrier: a catalog batch is answered only once every data partition has reported the
 * version it created, or can no longer serve under an older one: its latest tail that
 * reported every version applied here is older than its catalog lease (with drift and
 * margin). A tail that still lags extends nothing. Failing both by the caller's deadline:
 * UNAVAILABLE naming the partitions still behind; a retry with the same command id waits
 * again, because replays pass here too.
 * Everything parked is answered from the loop: on apply, on a tail, or on the timer. */
#include "daemon/rpc/serve.h"

#include "common/clock.h"
#include "common/log.h"
#include "daemon/engine/engine.h"
#include "common/keys.h"
#include "daemon/rpc/tail_auth.h"
#include "daemon/rpc/tailer.h"
#include "keyload/v1/catalog.pb-c.h"
#include "keyload/v1/queue.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BARRIER_DEFAULT_MS 5000   /* without a caller deadline */
#define BARRIER_MARGIN_MS 100     /* answer this long before the caller gives up */

/* Lease arithmetic runs on CLOCK_BOOTTIME: it keeps counting while the host is suspended,
 * as the data partitions' leases (tailer.c) do, so a suspend cannot stretch a bound. */
static int64_t boot_ms(void)
{
    return kl_clock_ms(CLOCK_BOOTTIME);
}

static int64_t wall_ms(void)
{
    return kl_clock_ms(CLOCK_REALTIME);
}

static uint64_t applied_version(kl_service *s)
{
    uint64_t v, changes;
    kl_node_catalog_status(s->node, &v, &changes);
    return v;
}

/* ---- tail ---- */

/* Answers a tail with the changes after `applied` that fit. */
/* Wraps the answer bytes in a SignedCatalogTailAnswer, signed with this member's key when
 * it has one (tail_auth.h), bound to the request's signature (NULL: unsigned request). */
static void reply_signed(kl_service *s, kl_rpc_call *call, const uint8_t *req_sig, const kl_buf *out)
{
    Keyload__V1__SignedCatalogTailAnswer a = KEYLOAD__V1__SIGNED_CATALOG_TAIL_ANSWER__INIT;
    uint8_t sig[KL_TAIL_AUTH_SIG_LEN];
    a.answer.data = out->p;
    a.answer.len = out->len;
    a.member = s->member_id;
    if (s->keys != NULL && s->keys->has_member_key) {
        kl_tail_auth_sign_answer(s->cluster, s->member_id, req_sig, out->p, out->len, s->keys->member_secret, sig);
        a.signature.data = sig;
        a.signature.len = sizeof sig;
    }
    size_t n = keyload__v1__signed_catalog_tail_answer__get_packed_size(&a);
    uint8_t *buf = malloc(n ? n : 1);
    if (buf == NULL) {
        kl_err err;
        kl_fail(&err, KL_UNAVAILABLE, "memory", "out of memory; retry");
        kl_rpc_reply_error(call, &err, NULL);
        return;
    }
    keyload__v1__signed_catalog_tail_answer__pack(&a, buf);
    kl_rpc_reply(call, buf, n);
    free(buf);
}

static void answer_tail(kl_service *s, kl_rpc_call *call, uint64_t applied, const uint8_t *req_sig)
{
    uint64_t latest = applied_version(s);
    kl_buf out = {0};
    kl_err err;
    kl_err_clear(&err);
    size_t budget = (size_t)s->cluster->limits.max_frame_bytes / 2;
    bool bad = kl_buf_append_varint_field(&out, (1 << 3) | 0, latest) != 0;
    for (uint64_t v = applied + 1; !bad && v <= latest && v <= applied + KL_TAIL_MAX_CHANGES; v++) {
        uint8_t *bytes;
        size_t len;
        bool found;
        if (kl_node_catalog_change(s->node, v, &bytes, &len, &found, &err) != KL_OK)
            break;
        if (!found) {
            kl_fail(&err, KL_INTERNAL, "catalog", "catalog change %llu is missing", (unsigned long long)v);
            break;
        }
        /* The first change always goes, whatever its size: a tail must make progress. */
        if (v > applied + 1 && out.len + len > budget) {
            free(bytes);
            break;
        }
        bad = kl_buf_append_field(&out, (2 << 3) | 2, bytes, len) != 0;
        free(bytes);
    }
    if (err.code != KL_OK)
        kl_rpc_reply_error(call, &err, NULL);
    else if (bad) {
        kl_fail(&err, KL_UNAVAILABLE, "memory", "out of memory; retry");
        kl_rpc_reply_error(call, &err, NULL);
    } else
        reply_signed(s, call, req_sig, &out);
    kl_buf_free(&out);
}

static void wake_tails(kl_service *s, bool all)
{
    uint64_t latest = applied_version(s);
    int64_t now = wall_ms();
    for (int i = 0; i < KL_SERVICE_MAX_TAILS; i++) {
        if (s->tails[i].call == NULL)
            continue;
        if (all || latest > s->tails[i].applied || now >= s->tails[i].until_ms) {
            kl_rpc_call *call = s->tails[i].call;
            s->tails[i].call = NULL;
            answer_tail(s, call, s->tails[i].applied, s->tails[i].signed_request ? s->tails[i].req_sig : NULL);
        }
    }
}

static void check_barriers(kl_service *s, bool expire);
static void tail_confirmed(kl_service *s, kl_rpc_call *call, kl_node_read_kind kind,
                           const kl_service_read_args *args);

_Static_assert(sizeof ((kl_service_read_args *)0)->tail.req_sig == KL_TAIL_AUTH_SIG_LEN &&
                   sizeof ((kl_service *)0)->tails[0].req_sig == KL_TAIL_AUTH_SIG_LEN,
               "a kept tail signature is a whole tail_auth signature");

/* What the tail keeps of its request for tail_confirmed: decoded here, once. */
static void tail_args(const Keyload__V1__CatalogTailRequest *r, kl_service_read_args *a)
{
    memset(a, 0, sizeof *a);
    a->tail.partition = r->partition;
    a->tail.applied = r->applied_version;
    a->tail.wait_ms = r->wait_ms;
    a->tail.signed_request = r->signature.len == KL_TAIL_AUTH_SIG_LEN;
    if (a->tail.signed_request)
        memcpy(a->tail.req_sig, r->signature.data, sizeof a->tail.req_sig);
}

/* Verifies a tail request with the key partition 0's applied catalog vouches for (a member
 * admitted after the cluster file, or a removed one), else the cluster file's (tail_auth.h). */
static kl_code verify_tail(kl_service *s, const Keyload__V1__CatalogTailRequest *r, kl_err *err)
{
    Keyload__V1__CatalogMemberKey *rec = NULL;
    bool found = false;
    kl_code rc = kl_node_find_member_key(s->node, r->partition, r->member, &rec, &found, err);
    if (rc != KL_OK)
        return rc;
    kl_tail_vouched v;
    kl_tail_auth_vouched_of(found ? rec : NULL, &v);
    if (rec != NULL)
        keyload__v1__catalog_member_key__free_unpacked(rec, NULL);
    return kl_tail_auth_verify_request(s->cluster, &v, r, wall_ms(), err);
}

void kl_service_catalog_tail(void *owner, kl_rpc_call *call)
{
    kl_service *s = owner;
    kl_err err;
    size_t len;
    const uint8_t *p = kl_rpc_call_payload(call, &len);
    Keyload__V1__CatalogTailRequest *r = keyload__v1__catalog_tail_request__unpack(NULL, len, p);
    if (r == NULL) {
        kl_fail(&err, KL_INVALID_ARGUMENT, "payload", "the CatalogTail request does not decode");
        kl_rpc_reply_error(call, &err, NULL);
        return;
    }
    kl_service_read_args args;
    tail_args(r, &args);
    int part = args.tail.partition;
    uint64_t applied = args.tail.applied;
    kl_code rc = KL_OK;
    if (s->partition->id != 0)
        rc = kl_fail(&err, KL_FAILED_PRECONDITION, "catalog_partition",
                     "the catalog lives on partition 0; this is partition %d", s->partition->id);
    else if (part <= 0 || part >= s->cluster->partition_count)
        rc = kl_fail(&err, KL_INVALID_ARGUMENT, "partition", "partition must be a data partition (1..%d)",
                     s->cluster->partition_count - 1);
    else if (kl_tail_auth_required(s->cluster, part))
        /* Nothing of a request that does not verify is recorded: not its progress, not its
         * arrival (which may count the partition as current). */
        rc = verify_tail(s, r, &err);
    keyload__v1__catalog_tail_request__free_unpacked(r, NULL);
    if (rc != KL_OK) {
        kl_rpc_reply_error(call, &err, NULL);
        return;
    }
    if (!kl_service_serving(s)) {
        kl_fail(&err, KL_NOT_LEADER, "not_leader", "this member does not serve partition 0 now");
        kl_service_reply_not_leader(s, call, &err);
        return;
    }
    /* Only a tail that already has every version applied here restarts the partition's
     * lease clock: one that lags (its leader cannot commit the change it was given, say)
     * shows the partition alive, not current, and must not keep a barrier waiting. */
    if (applied >= applied_version(s))
        s->tail_current_ms[part] = boot_ms();
    if (applied > s->catalog_progress[part]) {
        s->catalog_progress[part] = applied;
        check_barriers(s, false);
    }
    /* The answer waits for a read-index round started after the tail arrived: the data
     * partition renews its catalog lease from this answer (from the tail's send), so it must
     * come from a member that still led partition 0 after the send. A leader deposed before
     * the tail arrived could otherwise answer an older catalog, and the data partition would
     * serve a revoked grant after the new leader's barrier let the revoke return. */
    kl_service_start_read(s, call, KL_NODE_QUEUE_STATS, tail_confirmed, &args);
}

/* The tail's read-index round confirmed this member's leadership: answers now, or holds an
 * empty answer until a newer version is applied or the requested wait ends. */
static void tail_confirmed(kl_service *s, kl_rpc_call *call, kl_node_read_kind kind,
                           const kl_service_read_args *args)
{
    (void)kind; /* a tail is not a node read: the barrier is all it borrows */
    int part = args->tail.partition;
    uint64_t applied = args->tail.applied;
    uint32_t wait_ms = args->tail.wait_ms;
    bool signed_request = args->tail.signed_request;
    const uint8_t *req_sig = args->tail.req_sig;
    if (applied_version(s) > applied || wait_ms == 0) {
        answer_tail(s, call, applied, signed_request ? req_sig : NULL);
        return;
    }
    for (int i = 0; i < KL_SERVICE_MAX_TAILS; i++) {
        if (s->tails[i].call != NULL)
            continue;
        s->tails[i].call = call;
        s->tails[i].partition = part;
        s->tails[i].applied = applied;
        s->tails[i].signed_request = signed_request;
        memcpy(s->tails[i].req_sig, req_sig, sizeof s->tails[i].req_sig);
        int64_t until = wall_ms() + (wait_ms < KL_TAIL_WAIT_MAX_MS ? wait_ms : KL_TAIL_WAIT_MAX_MS);
        /* The barrier took part of the caller's budget: the empty answer still arrives
         * before the caller gives up on it. */
        int64_t deadline = kl_rpc_call_deadline_ms(call);
        if (deadline > 0 && deadline - BARRIER_MARGIN_MS < until)
            until = deadline - BARRIER_MARGIN_MS;
        s->tails[i].until_ms = until;
        return;
    }
    answer_tail(s, call, applied, signed_request ? req_sig : NULL); /* every slot taken: answer empty now */
}

/* ---- barrier ---- */

#define LEASE_MARGIN_MS 200 /* covers the time between a tail's send and its arrival here */
#define LEASE_DRIFT_PCT 10  /* the data partition's clock may run this much slower than ours */

/* How long after its latest current tail (see kl_service_catalog_tail) a data partition can
 * still serve under an older catalog: its lease starts no later than that tail's send. */
static int64_t lease_bound_ms(const kl_service *s)
{
    int64_t lease = (int64_t)s->cluster->timers.catalog_lease_ms;
    return lease + lease * LEASE_DRIFT_PCT / 100 + LEASE_MARGIN_MS;
}

/* Writes the data partitions that have not reported `version` into buf; returns how many.
 * A partition whose latest current tail (counted from this leadership's start at the
 * earliest) is older than lease_bound_ms serves nothing under an older catalog any more,
 * so it no longer holds the barrier. */
static int laggards(kl_service *s, uint64_t version, char *buf, size_t cap)
{
    int n = 0;
    size_t used = 0;
    buf[0] = '\0';
    int64_t now = boot_ms(), bound = lease_bound_ms(s);
    for (int p = 1; p < s->cluster->partition_count; p++) {
        if (s->catalog_progress[p] >= version)
            continue;
        int64_t current = s->tail_current_ms[p] > s->leader_since_ms ? s->tail_current_ms[p] : s->leader_since_ms;
        if (now - current > bound)
            continue;
        int w = snprintf(buf + used, cap - used, "%s%d", n ? ", " : "", p);
        if (w > 0 && (size_t)w < cap - used)
            used += (size_t)w;
        n++;
    }
    return n;
}

static void barrier_free(kl_service *s, int i)
{
    free(s->barriers[i].receipt);
    s->barriers[i].receipt = NULL;
    s->barriers[i].call = NULL;
}

static void check_barriers(kl_service *s, bool expire)
{
    int64_t now = wall_ms();
    char lag[256];
    for (int i = 0; i < KL_SERVICE_MAX_BARRIERS; i++) {
        if (s->barriers[i].call == NULL)
            continue;
        kl_rpc_call *call = s->barriers[i].call;
        if (laggards(s, s->barriers[i].version, lag, sizeof lag) == 0) {
            kl_rpc_reply(call, s->barriers[i].receipt, s->barriers[i].len);
            barrier_free(s, i);
        } else if (expire || now >= s->barriers[i].until_ms) {
            kl_err err;
            kl_fail(&err, KL_UNAVAILABLE, "catalog_barrier",
                    "catalog version %llu is committed but partitions %s have not applied it yet "
                    "(each stops serving under the older catalog at most %lld ms after its last "
                    "current tail); retry with the same command id to wait again",
                    (unsigned long long)s->barriers[i].version, lag, (long long)lease_bound_ms(s));
            kl_rpc_reply_error(call, &err, NULL);
            barrier_free(s, i);
        }
    }
}

bool kl_service_catalog_hold(kl_service *s, kl_rpc_call *call, const uint8_t *receipt, size_t len)
{
    if (s->partition->id != 0 || s->cluster->partition_count <= 1)
        return false;
    Keyload__V1__BatchReceipt *r = keyload__v1__batch_receipt__unpack(NULL, len, receipt);
    if (r == NULL)
        return false;
    uint64_t version = r->catalog_version;
    keyload__v1__batch_receipt__free_unpacked(r, NULL);
    char lag[256];
    if (version == 0 || laggards(s, version, lag, sizeof lag) == 0)
        return false;
    int64_t deadline = kl_rpc_call_deadline_ms(call);
    int64_t now = wall_ms();
    int64_t until = deadline > 0 ? deadline - BARRIER_MARGIN_MS : now + BARRIER_DEFAULT_MS;
    kl_err err;
    for (int i = 0; i < KL_SERVICE_MAX_BARRIERS; i++) {
        if (s->barriers[i].call != NULL)
            continue;
        uint8_t *copy = malloc(len ? len : 1);
        if (copy == NULL)
            break;
        memcpy(copy, receipt, len);
        s->barriers[i].call = call;
        s->barriers[i].version = version;
        s->barriers[i].until_ms = until;
        s->barriers[i].receipt = copy;
        s->barriers[i].len = len;
        return true;
    }
    kl_fail(&err, KL_UNAVAILABLE, "catalog_barrier",
            "catalog version %llu is committed; too many catalog changes are waiting for partitions "
            "%s; retry with the same command id", (unsigned long long)version, lag);
    kl_rpc_reply_error(call, &err, NULL);
    return true;
}

/* ---- locate ---- */

void kl_service_locate_queue(void *owner, kl_rpc_call *call)
{
    kl_service *s = owner;
    kl_err err;
    kl_err_clear(&err);
    size_t len, alen;
    const uint8_t *p = kl_rpc_call_payload(call, &len);
    Keyload__V1__LocateQueueRequest *r = keyload__v1__locate_queue_request__unpack(NULL, len, p);
    if (r == NULL) {
        kl_fail(&err, KL_INVALID_ARGUMENT, "payload", "the LocateQueue request does not decode");
        kl_rpc_reply_error(call, &err, NULL);
        return;
    }
    bool local = r->local;
    keyload__v1__locate_queue_request__free_unpacked(r, NULL);
    if (!local && s->partition->id != 0) {
        kl_fail(&err, KL_FAILED_PRECONDITION, "catalog_partition",
                "queues are located on partition 0; this is partition %d", s->partition->id);
        kl_rpc_reply_error(call, &err, NULL);
        return;
    }
    if (!local && !kl_service_serving(s)) {
        kl_fail(&err, KL_NOT_LEADER, "not_leader", "this member does not serve partition 0 now");
        kl_service_reply_not_leader(s, call, &err);
        return;
    }
    uint8_t *answer;
    if (kl_node_locate_queue(s->node, kl_service_principal(call), p, len, &answer, &alen, &err) != KL_OK) {
        kl_rpc_reply_error(call, &err, NULL);
        return;
    }
    kl_rpc_reply(call, answer, alen);
    free(answer);
}

typedef kl_code (*catalog_read_fn)(kl_node *n, const char *principal, const uint8_t *req, size_t len,
                                   uint8_t **answer, size_t *answer_len, kl_err *err);

/* A read of partition 0's leader's applied catalog (like LocateQueue): refused elsewhere. */
static void serve_catalog_read(kl_service *s, kl_rpc_call *call, catalog_read_fn read, const char *what)
{
    kl_err err;
    kl_err_clear(&err);
    if (s->partition->id != 0) {
        kl_fail(&err, KL_FAILED_PRECONDITION, "catalog_partition",
                "%s are read on partition 0; this is partition %d", what, s->partition->id);
        kl_rpc_reply_error(call, &err, NULL);
        return;
    }
    if (!kl_service_serving(s)) {
        kl_fail(&err, KL_NOT_LEADER, "not_leader", "this member does not serve partition 0 now");
        kl_service_reply_not_leader(s, call, &err);
        return;
    }
    size_t len, alen;
    const uint8_t *p = kl_rpc_call_payload(call, &len);
    uint8_t *answer;
    if (read(s->node, kl_service_principal(call), p, len, &answer, &alen, &err) != KL_OK) {
        kl_rpc_reply_error(call, &err, NULL);
        return;
    }
    kl_rpc_reply(call, answer, alen);
    free(answer);
}

void kl_service_show_principal(void *owner, kl_rpc_call *call)
{
    serve_catalog_read(owner, call, kl_node_show_principal, "principals");
}

void kl_service_list_catalog(void *owner, kl_rpc_call *call)
{
    serve_catalog_read(owner, call, kl_node_list_catalog, "catalog lists");
}

/* ---- lifecycle ---- */

void kl_service_catalog_tick(kl_service *s)
{
    wake_tails(s, false);
    check_barriers(s, false);
}

void kl_service_catalog_stop(kl_service *s)
{
    wake_tails(s, true);
    check_barriers(s, true);
}

void kl_service_catalog_applied(kl_service *s)
{
    bool waiting = false;
    for (int i = 0; i < KL_SERVICE_MAX_TAILS && !waiting; i++)
        waiting = s->tails[i].call != NULL;
    if (waiting)
        wake_tails(s, false);
}

void kl_service_role(kl_service *s, bool leader)
{
    if (leader && !s->was_leader)
        s->leader_since_ms = boot_ms();
    s->was_leader = leader;
    if (leader)
        return;
    memset(s->catalog_progress, 0, sizeof s->catalog_progress);
    wake_tails(s, true);
}
