/* fuzz_batch: libFuzzer target for the daemon's whole write path on client input
 * (docs/ARCHITECTURE.md "Sessions and RPC", Errors: "the daemon never exits on client input").
 *
 * Each input is an encoded keyload.v1.BatchRequest, submitted as principal "local" to the
 * partition core (daemon/node.h) over a real RocksDB store (daemon/store/store.h), as
 * keyloadd does with a Batch frame's payload: validation, digest, outcome replay,
 * evaluation against applied + pending state, group commit, the synced append, apply and
 * the answer. The store is opened once per process in a fresh directory under
 * $KL_FUZZ_STORE_ROOT, else /dev/shm, else /tmp, and removed at exit; it is replaced by a
 * fresh one after REOPEN_INPUTS inputs or once it holds more than REOPEN_BYTES.
 *
 * The driver plays the replication driver's part by hand (as tests/unit/harness.c does):
 * proposals queue up and, once the submit returned, are made durable (kl_store_log_write)
 * and applied (kl_node_apply) in order, as a one-member Raft group does; the clock is a
 * variable advanced per input, randomness is a counter.
 *
 * Derived from a hash of the input (so that one input always runs the same way):
 *  - the clock advance: mostly under a second, sometimes past a lease (30 s default),
 *    rarely past 12 h (the longest lease) or 7 days (the longest delay);
 *  - for 7 inputs in 8, the command id is replaced by one derived from the hash, by
 *    appending a command_id field (the last occurrence of a protobuf field wins) and so
 *    without touching the input's bytes; otherwise every mutation of a seed would reuse
 *    the seed's id and be refused as CONFLICT before evaluation;
 *  - for 1 input in 8, "held" mode: a background enqueue's proposal is held uncommitted
 *    while the input is submitted twice (it is evaluated against the pending overlay and
 *    waits), then every held proposal commits in order.
 * The node serves partition 0 of a cluster of PARTITIONS partitions, so it holds the
 * catalog: before anything else, a create_database batch makes default/default (a batch
 * that creates a database or a queue holds only that mutation). The base queues below are
 * pinned to partition 0; a fuzz input's CreateQueue may pin another partition or let
 * partition 0 choose (partition -1: a data partition), which leaves only a catalog
 * definition here, so enqueues to it are NOT_FOUND "wrong_partition" and deleting it only
 * drops the definition. A base queue found placed elsewhere (an input deleted it and
 * another created it again there before a check brought it back: "burst" is not checked
 * after every input) is deleted and created again on partition 0.
 * Every 8th input, the lease driver takes one base queue in turn: "q"; "work"
 * (max_deliveries 1, dead letter queue "dlq"); "small" (max 3 messages, 64 bytes: the
 * quotas); "drop" (max_deliveries 1, no dead letter queue); "dlq" (max 4 messages, so it
 * fills up). It enqueues a plain message, one that expires within a minute and one
 * delayed by up to a minute (the clock is out of a fuzz input's reach, so the paths of
 * expired messages and ended delays need this), then a Receive of up to 10 acks a quarter
 * of the leases and releases another quarter at once (which must succeed), leaving the
 * rest to expire. Every BURST_EVERY inputs, "burst" gets a consumer that leases
 * BURST_MESSAGES messages for 1 ms and dies (see burst()). Queues a fuzz input deletes
 * are created again. Lease tokens handed out
 * are kept, and 16 input bytes starting "KLTOK" become one of them (see
 * substitute_tokens), so inputs can ack and release.
 *
 * Besides "no crash, no leak, no undefined behaviour", it aborts when one of these fails:
 *  - every submit is answered exactly once, with a code in range; an error carries a
 *    kl_err of that code with a message and no receipt; client input never earns
 *    INTERNAL, UNAVAILABLE (except first_sent_ahead for a first-sent time that far ahead)
 *    or UNKNOWN_WRITE_OUTCOME, nor PERMISSION_DENIED except for a
 *    transfer token that is not genuine, and the node never breaks;
 *  - an OK receipt decodes, names the request's command id, partition 0, term 1, a
 *    32-byte digest, and one result per mutation of the matching kind (received leases
 *    are 16 bytes, at most max_messages of them; acked/released counts are the tokens');
 *    a batch that created a database or a queue held that one mutation; its results and
 *    the receipt name the same catalog version (the applied one when the batch is the
 *    log's newest entry, an older one for a replay of an older batch), a created
 *    queue's partition is the pinned one or a data partition (1..PARTITIONS-1) when
 *    chosen; a batch without catalog change carries catalog version 0;
 *  - the same request submitted again while pending, and again once committed, gets the
 *    same code and the same receipt bytes;
 *  - after each input nothing is pending, applied index == log end, QueueStats answers for
 *    each queue with messages <= max_messages, bytes <= max_bytes, in_flight <= messages
 *    (QueueStats counts leased and delayed messages by scanning them, so for a queue with
 *    more of them than MaxScanRecords it answers RESOURCE_EXHAUSTED; such a queue is
 *    skipped);
 *  - a Receive of 10 (the lease driver's) is always served, whatever backlog of due
 *    leases, ended delays and expired messages its queue holds, and acking or releasing
 *    leases it just got succeeds;
 *  - the store layout invariants of daemon/store/keys.h hold, for the base queues every
 *    DEEP_EVERY inputs (when they hold at most DEEP_MAX_EACH messages) and for every queue,
 *    name, lease and orphan index entry every GLOBAL_EVERY inputs: a message has its 'G'
 *    record and exactly one of 'A' or 'T'; a 'K' record exists exactly while its
 *    message's lease_token equals it; QueueRecord.messages/bytes equal the count/sum of
 *    the queue's 'G' records; no 'G'/'A'/'T' entry outlives its queue; and the catalog's:
 *    "catalog_changes" == "catalog_version", every version up to it is stored as a
 *    CatalogChange of that version (checked once each), every catalog queue's database
 *    exists, and a queue has 'N'/'Q' records here exactly while the catalog places it on
 *    partition 0 (same queue id).
 * LocateQueue, like QueueStats, also gets each input's bytes as its request.
 * The node runs with MaxScanRecords scaled down (FUZZ_MAX_SCAN_RECORDS), and the store is
 * compacted every COMPACT_EVERY inputs (see there why).
 * Reproduce: build/fuzz/fuzz_batch ARTIFACT (runs the input once against a fresh store;
 * a failure that needed earlier state, or lease tokens, may not reproduce alone). KL_FUZZ_VERBOSE=1 prints
 * each input's answer. */
#include "common/canon.h"
#include "common/cluster.h"
#include "common/names.h"
#include "common/status.h"
#include "daemon/node.h"
#include "daemon/store/keys.h"
#include "daemon/store/store.h"
#include "keyload/v1/catalog.pb-c.h"
#include "keyload/v1/queue.pb-c.h"
#include "keyload/v1/store.pb-c.h"

#include <ftw.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PRINCIPAL "local"
#define T0 1700000000000LL
#define REOPEN_INPUTS 200000
#define REOPEN_BYTES (200ull << 20)
#define SIZE_CHECK_EVERY 1000
#define COMPACT_EVERY 1024
#define LEASE_EVERY 8
#define BURST_EVERY 512
#define BURST_MESSAGES 600   /* promoting them all at once costs over 1000 records */
#define BURST_BATCH 150
/* The deep checks iterate RocksDB ranges full of tombstones (every lease and release moves
 * entries), which costs more than the batch itself; so they run every few inputs. */
#define DEEP_EVERY 8
#define GLOBAL_EVERY 256
#define DEEP_MAX_EACH 64     /* deep check of the base queues up to this size */
#define DEEP_MAX_GLOBAL 1024 /* periodic deep check of every queue up to this size */
#define LEASE_SCAN_MAX 20000
#define TOKEN_RING 64
#define TOKEN_MARK "KLTOK"
/* MaxScanRecords of the node: the default (10000) scaled down tenfold, so that inputs reach
 * the scan budget's edges (big receives, many due leases) in thousands of inputs, not
 * hundreds of thousands. Every other limit is the default. */
#define FUZZ_MAX_SCAN_RECORDS 1000
/* The node is partition 0 of this many: queue placement can pick data partitions. */
#define PARTITIONS 3

typedef struct reply {
    int count;
    kl_code code;
    kl_err err;
    uint8_t *receipt;
    size_t len;
} reply;

static struct {
    char dir[512];
    kl_store *store;
    kl_node *node;
    int64_t now;
    uint64_t rand_counter;
    uint64_t cmd_counter;
    uint64_t inputs;         /* since the store was opened */
    bool verbose;            /* KL_FUZZ_VERBOSE=1: one line per input on stderr */
    bool hold;               /* hold the next append instead of completing it */
    uint8_t tokens[TOKEN_RING][16]; /* the latest lease tokens handed out */
    size_t n_tokens, next_token;
    uint64_t next_index;     /* where the next proposal lands */
    struct {
        uint64_t index;
        uint8_t *bytes;
        size_t len;
    } props[64];             /* proposed, not yet committed */
    size_t n_props;
    uint64_t catalog_checked; /* catalog versions up to this one were checked */
} G;

static const char *const QUEUES[] = {"q", "small", "dlq", "work", "drop", "burst"};
#define N_QUEUES (sizeof QUEUES / sizeof QUEUES[0])

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz_batch: property violated: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

/* ---- node I/O ---- */

/* Commits the oldest proposal: durable write, then apply (term 1: one member, one term). */
static void commit_one(void)
{
    kl_err err;
    kl_err_clear(&err);
    kl_store_log_item it = {G.props[0].index, G.props[0].bytes, G.props[0].len};
    if (kl_store_log_write(G.store, NULL, 0, &it, 1, &err) != KL_OK)
        die("kl_store_log_write(%llu) failed: %s", (unsigned long long)it.index, err.message);
    if (kl_node_apply(G.node, it.index, 1, it.bytes, it.len, &err) != KL_OK)
        die("kl_node_apply(%llu) failed: %s", (unsigned long long)it.index, err.message);
    free(G.props[0].bytes);
    memmove(&G.props[0], &G.props[1], (G.n_props - 1) * sizeof G.props[0]);
    G.n_props--;
}

static void commit_all(void)
{
    while (G.n_props > 0)
        commit_one();
}

static void io_next(void *ctx, uint64_t *index, uint64_t *term, bool *serving)
{
    (void)ctx;
    *index = G.next_index;
    *term = 1;
    *serving = true;
}

static kl_code io_propose(void *ctx, const uint8_t *entry, size_t len)
{
    (void)ctx;
    if (G.n_props == sizeof G.props / sizeof G.props[0])
        return KL_UNAVAILABLE;
    G.props[G.n_props].index = G.next_index++;
    G.props[G.n_props].bytes = malloc(len ? len : 1);
    if (G.props[G.n_props].bytes == NULL)
        die("out of memory");
    memcpy(G.props[G.n_props].bytes, entry, len);
    G.props[G.n_props].len = len;
    G.n_props++;
    return KL_OK;
}

static void release_held(void)
{
    G.hold = false;
    commit_all();
}

static int64_t io_clock(void *ctx)
{
    (void)ctx;
    return G.now;
}

static void io_random(uint8_t *buf, size_t n)
{
    /* Deterministic and distinct: a counter spread over the buffer. */
    uint64_t c = ++G.rand_counter;
    memset(buf, 0xA5, n);
    memcpy(buf, &c, n < 8 ? n : 8);
}

/* ---- replies ---- */

static void on_reply(void *cookie, kl_code code, const kl_err *err, const uint8_t *receipt, size_t len)
{
    reply *r = cookie;
    if (++r->count > 1)
        die("the reply callback ran %d times for one submit", r->count);
    if ((unsigned)code >= KL_CODE_COUNT)
        die("reply code %d is out of range", (int)code);
    r->code = code;
    if (code == KL_OK) {
        if (receipt == NULL || len == 0)
            die("OK reply without a receipt");
        r->receipt = malloc(len);
        if (r->receipt == NULL)
            die("out of memory");
        memcpy(r->receipt, receipt, len);
        r->len = len;
        kl_err_clear(&r->err);
    } else {
        if (err == NULL)
            die("%s reply without an error", kl_code_name(code));
        if (err->code != code)
            die("%s reply carries an error of code %s", kl_code_name(code), kl_code_name(err->code));
        if (err->message[0] == '\0')
            die("%s reply with an empty message", kl_code_name(code));
        if (receipt != NULL || len != 0)
            die("%s reply with a receipt", kl_code_name(code));
        r->err = *err;
    }
}

static void reply_free(reply *r)
{
    free(r->receipt);
    memset(r, 0, sizeof *r);
}

static void submit(const uint8_t *req, size_t len, reply *r)
{
    memset(r, 0, sizeof *r);
    kl_node_submit_batch(G.node, PRINCIPAL, req, len, on_reply, r);
    if (!G.hold)
        commit_all();
}

static void expect_answered(const reply *r, const char *what)
{
    if (r->count != 1)
        die("%s: the reply callback ran %d times", what, r->count);
}

/* ---- our own batches ---- */

static void own_command_id(uint8_t id[16])
{
    memset(id, 0, 16);
    id[0] = 0xf0;
    id[1] = 0x0d;
    uint64_t c = ++G.cmd_counter;
    memcpy(id + 8, &c, 8);
}

static void ref_init(Keyload__V1__QueueLaneRef *r, const char *queue)
{
    keyload__v1__queue_lane_ref__init(r);
    r->tenant = "default";
    r->database = "default";
    r->queue = (char *)queue;
}

/* Packs a batch of our own (fresh command id), submits it, returns the reply. */
static void submit_own(Keyload__V1__Mutation **muts, size_t n, reply *r)
{
    uint8_t id[16];
    own_command_id(id);
    Keyload__V1__BatchRequest b = KEYLOAD__V1__BATCH_REQUEST__INIT;
    b.command_id.data = id;
    b.command_id.len = 16;
    b.mutations = muts;
    b.n_mutations = n;
    size_t len = keyload__v1__batch_request__get_packed_size(&b);
    uint8_t *buf = malloc(len);
    if (buf == NULL)
        die("out of memory");
    keyload__v1__batch_request__pack(&b, buf);
    submit(buf, len, r);
    free(buf);
}

static void delete_queue(const char *name)
{
    Keyload__V1__QueueLaneRef ref;
    ref_init(&ref, name);
    Keyload__V1__DeleteQueue dq = KEYLOAD__V1__DELETE_QUEUE__INIT;
    dq.queue = &ref;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_DELETE_QUEUE;
    m.delete_queue = &dq;
    Keyload__V1__Mutation *mp = &m;
    reply r;
    submit_own(&mp, 1, &r);
    expect_answered(&r, "delete queue");
    if (r.code != KL_OK)
        die("deleting queue '%s' (placed elsewhere) failed: %s %s", name, kl_code_name(r.code), r.err.message);
    reply_free(&r);
}

static void create_database(const char *tenant, const char *database)
{
    Keyload__V1__CreateDatabase cd = KEYLOAD__V1__CREATE_DATABASE__INIT;
    cd.tenant = (char *)tenant;
    cd.database = (char *)database;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_DATABASE;
    m.create_database = &cd;
    Keyload__V1__Mutation *mp = &m;
    reply r;
    submit_own(&mp, 1, &r);
    expect_answered(&r, "create database");
    if (r.code != KL_OK)
        die("creating database %s/%s failed: %s %s", tenant, database, kl_code_name(r.code), r.err.message);
    reply_free(&r);
}

/* Creates a queue on partition 0 (pinned). A queue of that name placed on another
 * partition (a fuzz input deleted ours and created it again there) is deleted first:
 * on partition 0 that drops its definition. */
static void create_queue(const char *name, uint64_t max_messages, uint64_t max_bytes,
                         uint32_t max_deliveries, const char *dlq)
{
    Keyload__V1__QueueLaneRef ref;
    ref_init(&ref, name);
    Keyload__V1__QueueLimits lim = KEYLOAD__V1__QUEUE_LIMITS__INIT;
    lim.max_messages = max_messages;
    lim.max_bytes = max_bytes;
    lim.max_deliveries = max_deliveries;
    lim.dead_letter_queue = (char *)(dlq ? dlq : "");
    Keyload__V1__CreateQueue cq = KEYLOAD__V1__CREATE_QUEUE__INIT;
    cq.queue = &ref;
    cq.limits = &lim;
    cq.partition = 0;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE;
    m.create_queue = &cq;
    Keyload__V1__Mutation *mp = &m;
    reply r;
    submit_own(&mp, 1, &r);
    expect_answered(&r, "create queue");
    if (r.code == KL_CONFLICT) {
        reply_free(&r);
        delete_queue(name);
        submit_own(&mp, 1, &r);
        expect_answered(&r, "create queue again");
    }
    if (r.code != KL_OK)
        die("creating queue '%s' failed: %s %s", name, kl_code_name(r.code), r.err.message);
    reply_free(&r);
}

static void create_base_queue(const char *name)
{
    if (strcmp(name, "small") == 0)
        create_queue(name, 3, 64, 0, NULL);
    else if (strcmp(name, "work") == 0)
        create_queue(name, 0, 0, 1, "dlq");
    else if (strcmp(name, "drop") == 0)
        create_queue(name, 0, 0, 1, NULL);
    else if (strcmp(name, "dlq") == 0)
        create_queue(name, 4, 0, 0, NULL);
    else
        create_queue(name, 0, 0, 0, NULL);
}

/* ---- store inspection (applied state; nothing is pending when these run) ---- */

static bool db_get(const uint8_t *key, size_t klen, uint8_t **val, size_t *vlen)
{
    kl_err err;
    bool found;
    uint8_t *v = NULL;
    size_t n = 0;
    if (kl_store_get(G.store, key, klen, &v, &n, &found, &err) != KL_OK)
        die("kl_store_get failed: %s", err.message);
    if (val != NULL) {
        *val = v;
        *vlen = n;
    } else {
        free(v);
    }
    return found;
}

static bool db_has(const kl_key *k) { return db_get(k->b, k->len, NULL, NULL); }

static bool has_prefix(const uint8_t *k, size_t klen, const uint8_t *p, size_t plen)
{
    return klen >= plen && memcmp(k, p, plen) == 0;
}

static Keyload__V1__QueueRecord *load_queue_record(uint64_t qid)
{
    kl_key k;
    kl_key_queue(&k, qid);
    uint8_t *v;
    size_t n;
    if (!db_get(k.b, k.len, &v, &n))
        return NULL;
    Keyload__V1__QueueRecord *q = keyload__v1__queue_record__unpack(NULL, n, v);
    free(v);
    if (q == NULL)
        die("queue record %llu does not decode", (unsigned long long)qid);
    return q;
}

/* Counts the keys under a prefix, calling check on each (may be NULL). */
static uint64_t count_prefix(const uint8_t *p, size_t plen,
                             void (*check)(const uint8_t *k, size_t kl, const uint8_t *v, size_t vl, void *a),
                             void *arg)
{
    rocksdb_iterator_t *it = kl_store_iterator(G.store);
    uint64_t n = 0;
    for (rocksdb_iter_seek(it, (const char *)p, plen); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
        if (!has_prefix(k, kl, p, plen))
            break;
        const uint8_t *v = (const uint8_t *)rocksdb_iter_value(it, &vl);
        if (check)
            check(k, kl, v, vl, arg);
        n++;
    }
    rocksdb_iter_destroy(it);
    return n;
}

static void check_avail_key(const uint8_t *k, size_t kl, const uint8_t *v, size_t vl, void *a)
{
    (void)v;
    uint64_t qid, seq;
    if (kl_key_parse_available(k, kl, &qid, &seq) != 0 || qid != *(uint64_t *)a || vl != 0)
        die("malformed 'A' entry of queue %llu", (unsigned long long)*(uint64_t *)a);
}

static void check_timed_key(const uint8_t *k, size_t kl, const uint8_t *v, size_t vl, void *a)
{
    uint64_t qid, seq;
    int64_t t;
    if (kl_key_parse_timed(k, kl, &qid, &t, &seq) != 0 || qid != *(uint64_t *)a || vl == 0 ||
        vl > KL_NAME_LEN_MAX || memchr(v, 0, vl) != NULL)
        die("malformed 'T' entry of queue %llu", (unsigned long long)*(uint64_t *)a);
}

/* The keys.h invariants for one queue. Skipped above max_messages messages. */
static void deep_check_queue(uint64_t qid, uint64_t max_messages)
{
    Keyload__V1__QueueRecord *q = load_queue_record(qid);
    if (q == NULL)
        die("queue %llu has no record", (unsigned long long)qid);
    if (q->queue_id != qid)
        die("queue record %llu names id %llu", (unsigned long long)qid, (unsigned long long)q->queue_id);
    if (q->messages > max_messages) {
        keyload__v1__queue_record__free_unpacked(q, NULL);
        return;
    }
    uint8_t p[9];
    p[0] = 'G';
    kl_be64_put(p + 1, qid);
    uint64_t count = 0, bytes = 0, n_avail = 0, n_timed = 0;
    rocksdb_iterator_t *it = kl_store_iterator(G.store);
    for (rocksdb_iter_seek(it, (const char *)p, 9); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const uint8_t *key = (const uint8_t *)rocksdb_iter_key(it, &kl);
        if (!has_prefix(key, kl, p, 9))
            break;
        /* 'G' qid(8) lane 0 seq(8) */
        if (kl < 19 || kl - 18 > KL_NAME_LEN_MAX || key[kl - 9] != 0 || memchr(key + 9, 0, kl - 18) != NULL)
            die("malformed 'G' key in queue %llu", (unsigned long long)qid);
        char lane[KL_NAME_LEN_MAX + 1];
        memcpy(lane, key + 9, kl - 18);
        lane[kl - 18] = '\0';
        uint64_t seq = kl_be64_get(key + kl - 8);
        const uint8_t *val = (const uint8_t *)rocksdb_iter_value(it, &vl);
        Keyload__V1__MessageRecord *m = keyload__v1__message_record__unpack(NULL, vl, val);
        if (m == NULL)
            die("message %llu of queue %llu does not decode", (unsigned long long)seq, (unsigned long long)qid);
        if (m->seq != seq || m->message == NULL || seq == 0 || seq > q->next_seq)
            die("message %llu of queue %llu: bad seq/message (record seq %llu, next_seq %llu)",
                (unsigned long long)seq, (unsigned long long)qid, (unsigned long long)m->seq,
                (unsigned long long)q->next_seq);
        count++;
        bytes += m->charged_bytes;
        kl_key k;
        kl_key_available(&k, qid, lane, seq);
        bool in_a = db_has(&k);
        if (m->visible_at_unix_ms == 0) {
            if (!in_a)
                die("available message %llu of queue %llu lane %s has no 'A' entry",
                    (unsigned long long)seq, (unsigned long long)qid, lane);
            if (m->lease_token.len != 0)
                die("available message %llu of queue %llu holds a lease token", (unsigned long long)seq,
                    (unsigned long long)qid);
            n_avail++;
        } else {
            if (in_a)
                die("message %llu of queue %llu is both available and timed", (unsigned long long)seq,
                    (unsigned long long)qid);
            kl_key_timed(&k, qid, m->visible_at_unix_ms, seq);
            uint8_t *tv;
            size_t tn;
            if (!db_get(k.b, k.len, &tv, &tn))
                die("timed message %llu of queue %llu has no 'T' entry", (unsigned long long)seq,
                    (unsigned long long)qid);
            bool same = tn == strlen(lane) && memcmp(tv, lane, tn) == 0;
            free(tv);
            if (!same)
                die("'T' entry of message %llu of queue %llu names another lane", (unsigned long long)seq,
                    (unsigned long long)qid);
            n_timed++;
        }
        if (m->lease_token.len != 0) {
            if (m->lease_token.len != 16)
                die("message %llu of queue %llu holds a %zu-byte lease token", (unsigned long long)seq,
                    (unsigned long long)qid, m->lease_token.len);
            kl_key_lease(&k, m->lease_token.data);
            uint8_t *lv;
            size_t ln;
            if (!db_get(k.b, k.len, &lv, &ln))
                die("leased message %llu of queue %llu has no 'K' record", (unsigned long long)seq,
                    (unsigned long long)qid);
            Keyload__V1__LeaseRecord *lr = keyload__v1__lease_record__unpack(NULL, ln, lv);
            free(lv);
            if (lr == NULL || lr->queue_id != qid || lr->seq != seq || strcmp(lr->lane, lane) != 0)
                die("lease record of message %llu of queue %llu names another message",
                    (unsigned long long)seq, (unsigned long long)qid);
            keyload__v1__lease_record__free_unpacked(lr, NULL);
        }
        keyload__v1__message_record__free_unpacked(m, NULL);
    }
    rocksdb_iter_destroy(it);
    if (count != q->messages || bytes != q->bytes)
        die("queue %llu counts %llu messages / %llu bytes, its records hold %llu / %llu",
            (unsigned long long)qid, (unsigned long long)q->messages, (unsigned long long)q->bytes,
            (unsigned long long)count, (unsigned long long)bytes);
    p[0] = 'A';
    uint64_t a = count_prefix(p, 9, check_avail_key, &qid);
    p[0] = 'T';
    uint64_t t = count_prefix(p, 9, check_timed_key, &qid);
    if (a != n_avail || t != n_timed)
        die("queue %llu: %llu 'A' and %llu 'T' entries for %llu available and %llu timed messages",
            (unsigned long long)qid, (unsigned long long)a, (unsigned long long)t,
            (unsigned long long)n_avail, (unsigned long long)n_timed);
    keyload__v1__queue_record__free_unpacked(q, NULL);
}

/* Every 'G', 'A' or 'T' entry belongs to an existing queue (jumps from queue to queue). */
static void check_orphans(char tag)
{
    rocksdb_iterator_t *it = kl_store_iterator(G.store);
    uint8_t p[9] = {(uint8_t)tag};
    rocksdb_iter_seek(it, (const char *)p, 1);
    while (rocksdb_iter_valid(it)) {
        size_t kl;
        const uint8_t *key = (const uint8_t *)rocksdb_iter_key(it, &kl);
        if (kl < 1 || key[0] != (uint8_t)tag)
            break;
        if (kl < 9)
            die("short '%c' key", tag);
        uint64_t qid = kl_be64_get(key + 1);
        kl_key qk;
        kl_key_queue(&qk, qid);
        if (!db_has(&qk))
            die("a '%c' entry outlives its queue %llu", tag, (unsigned long long)qid);
        if (qid == UINT64_MAX)
            break;
        kl_be64_put(p + 1, qid + 1);
        rocksdb_iter_seek(it, (const char *)p, 9);
    }
    rocksdb_iter_destroy(it);
}

/* The catalog on partition 0 (see the header): versions, stored changes, definitions. */
static void check_catalog(void)
{
    uint64_t version, changes;
    kl_node_catalog_status(G.node, &version, &changes);
    if (version != changes)
        die("catalog version %llu, but %llu catalog changes applied", (unsigned long long)version,
            (unsigned long long)changes);
    if (version < G.catalog_checked)
        die("the catalog version went back from %llu to %llu", (unsigned long long)G.catalog_checked,
            (unsigned long long)version);
    for (uint64_t v = G.catalog_checked + 1; v <= version; v++) {
        uint8_t *b;
        size_t n;
        bool found;
        kl_err err;
        if (kl_node_catalog_change(G.node, v, &b, &n, &found, &err) != KL_OK)
            die("reading catalog change %llu failed: %s", (unsigned long long)v, err.message);
        if (!found)
            die("catalog change %llu (of %llu) is not stored", (unsigned long long)v, (unsigned long long)version);
        Keyload__V1__CatalogChange *ch = keyload__v1__catalog_change__unpack(NULL, n, b);
        free(b);
        if (ch == NULL || ch->version != v || ch->n_items == 0)
            die("catalog change %llu does not decode, names another version or is empty", (unsigned long long)v);
        keyload__v1__catalog_change__free_unpacked(ch, NULL);
    }
    G.catalog_checked = version;
    /* Every catalog queue: its database exists; placed here, its 'N' record names it. */
    const uint8_t p[2] = {'C', 'Q'};
    rocksdb_iterator_t *it = kl_store_iterator(G.store);
    for (rocksdb_iter_seek(it, (const char *)p, 2); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const uint8_t *key = (const uint8_t *)rocksdb_iter_key(it, &kl);
        if (!has_prefix(key, kl, p, 2))
            break;
        const uint8_t *val = (const uint8_t *)rocksdb_iter_value(it, &vl);
        Keyload__V1__CatalogQueue *q = keyload__v1__catalog_queue__unpack(NULL, vl, val);
        if (q == NULL)
            die("a catalog queue record does not decode");
        kl_key k;
        kl_key_catalog_queue(&k, q->tenant, q->database, q->queue);
        if (k.len != kl || memcmp(k.b, key, kl) != 0)
            die("catalog queue %s/%s/%s is stored under another key", q->tenant, q->database, q->queue);
        if (q->partition < 0 || q->partition >= PARTITIONS || q->queue_id == 0 || q->version == 0 ||
            q->version > version)
            die("catalog queue %s/%s/%s: partition %d, id %llu, version %llu", q->tenant, q->database,
                q->queue, q->partition, (unsigned long long)q->queue_id, (unsigned long long)q->version);
        kl_key_catalog_database(&k, q->tenant, q->database);
        if (!db_has(&k))
            die("catalog queue %s/%s/%s has no database", q->tenant, q->database, q->queue);
        kl_key_queue_name(&k, q->tenant, q->database, q->queue);
        uint8_t *nv;
        size_t nn;
        bool named = db_get(k.b, k.len, &nv, &nn);
        if (named && (nn != 8 || kl_be64_get(nv) != q->queue_id))
            die("queue %s/%s/%s: its name record names another queue than the catalog's %llu", q->tenant,
                q->database, q->queue, (unsigned long long)q->queue_id);
        if (named)
            free(nv);
        if (named != (q->partition == 0))
            die("queue %s/%s/%s placed on partition %d %s records here", q->tenant, q->database, q->queue,
                q->partition, named ? "has" : "has no");
        keyload__v1__catalog_queue__free_unpacked(q, NULL);
    }
    rocksdb_iter_destroy(it);
}

static void check_store_global(void)
{
    /* Every queue: its name points back at it; small ones get the deep check. */
    uint8_t p = 'Q';
    rocksdb_iterator_t *it = kl_store_iterator(G.store);
    for (rocksdb_iter_seek(it, (const char *)&p, 1); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const uint8_t *key = (const uint8_t *)rocksdb_iter_key(it, &kl);
        if (kl < 1 || key[0] != 'Q')
            break;
        if (kl != 9)
            die("malformed 'Q' key");
        uint64_t qid = kl_be64_get(key + 1);
        const uint8_t *val = (const uint8_t *)rocksdb_iter_value(it, &vl);
        Keyload__V1__QueueRecord *q = keyload__v1__queue_record__unpack(NULL, vl, val);
        if (q == NULL || q->name == NULL)
            die("queue record %llu does not decode or has no name", (unsigned long long)qid);
        kl_key nk;
        kl_key_queue_name(&nk, q->name->tenant, q->name->database, q->name->queue);
        uint8_t *nv;
        size_t nn;
        if (!db_get(nk.b, nk.len, &nv, &nn) || nn != 8 || kl_be64_get(nv) != qid)
            die("queue %llu's name does not point at it", (unsigned long long)qid);
        free(nv);
        /* Partition 0 closes and drops a queue in one batch: no closed queue lingers. */
        kl_key_catalog_queue(&nk, q->name->tenant, q->name->database, q->name->queue);
        if (!db_get(nk.b, nk.len, &nv, &nn))
            die("queue %llu has records here but no catalog definition", (unsigned long long)qid);
        Keyload__V1__CatalogQueue *def = keyload__v1__catalog_queue__unpack(NULL, nn, nv);
        free(nv);
        if (def == NULL || def->queue_id != qid || def->partition != 0 || q->deleted)
            die("queue %llu: catalog definition of id %llu on partition %d, deleted %d", (unsigned long long)qid,
                def ? (unsigned long long)def->queue_id : 0ull, def ? def->partition : -1, (int)q->deleted);
        keyload__v1__catalog_queue__free_unpacked(def, NULL);
        keyload__v1__queue_record__free_unpacked(q, NULL);
        deep_check_queue(qid, DEEP_MAX_GLOBAL);
    }
    rocksdb_iter_destroy(it);
    /* Every name points at a queue. */
    p = 'N';
    it = kl_store_iterator(G.store);
    for (rocksdb_iter_seek(it, (const char *)&p, 1); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const uint8_t *key = (const uint8_t *)rocksdb_iter_key(it, &kl);
        if (kl < 1 || key[0] != 'N')
            break;
        const uint8_t *val = (const uint8_t *)rocksdb_iter_value(it, &vl);
        kl_key qk;
        if (vl != 8)
            die("malformed queue name record");
        kl_key_queue(&qk, kl_be64_get(val));
        if (!db_has(&qk))
            die("queue name points at a missing queue %llu", (unsigned long long)kl_be64_get(val));
    }
    rocksdb_iter_destroy(it);
    check_catalog();
    check_orphans('G');
    check_orphans('A');
    check_orphans('T');
    /* Every lease names a message that holds exactly that lease token. */
    p = 'K';
    it = kl_store_iterator(G.store);
    uint64_t n = 0;
    for (rocksdb_iter_seek(it, (const char *)&p, 1); rocksdb_iter_valid(it) && n < LEASE_SCAN_MAX;
         rocksdb_iter_next(it), n++) {
        size_t kl, vl;
        const uint8_t *key = (const uint8_t *)rocksdb_iter_key(it, &kl);
        if (kl < 1 || key[0] != 'K')
            break;
        if (kl != 17)
            die("malformed 'K' key");
        const uint8_t *val = (const uint8_t *)rocksdb_iter_value(it, &vl);
        Keyload__V1__LeaseRecord *lr = keyload__v1__lease_record__unpack(NULL, vl, val);
        if (lr == NULL || strlen(lr->lane) > KL_NAME_LEN_MAX)
            die("lease record does not decode");
        kl_key mk;
        kl_key_message(&mk, lr->queue_id, lr->lane, lr->seq);
        uint8_t *mv;
        size_t mn;
        if (!db_get(mk.b, mk.len, &mv, &mn))
            die("lease record names a missing message %llu of queue %llu", (unsigned long long)lr->seq,
                (unsigned long long)lr->queue_id);
        Keyload__V1__MessageRecord *m = keyload__v1__message_record__unpack(NULL, mn, mv);
        free(mv);
        if (m == NULL || m->lease_token.len != 16 || memcmp(m->lease_token.data, key + 1, 16) != 0)
            die("lease record of message %llu of queue %llu is not that message's current lease",
                (unsigned long long)lr->seq, (unsigned long long)lr->queue_id);
        keyload__v1__message_record__free_unpacked(m, NULL);
        keyload__v1__lease_record__free_unpacked(lr, NULL);
    }
    rocksdb_iter_destroy(it);
}

/* ---- QueueStats ---- */

/* QueueStats of one of our queues; NULL when it does not exist. */
static Keyload__V1__QueueStatsAnswer *queue_stats(const char *queue, bool *too_big)
{
    *too_big = false;
    Keyload__V1__QueueLaneRef ref;
    ref_init(&ref, queue);
    Keyload__V1__QueueStatsRequest q = KEYLOAD__V1__QUEUE_STATS_REQUEST__INIT;
    q.queue = &ref;
    uint8_t buf[512];
    size_t n = keyload__v1__queue_stats_request__pack(&q, buf);
    uint8_t *ans = NULL;
    size_t alen = 0;
    kl_err err;
    kl_err_clear(&err);
    kl_code rc = kl_node_queue_stats(G.node, PRINCIPAL, buf, n, &ans, &alen, &err);
    if (rc == KL_NOT_FOUND)
        return NULL;
    if (rc == KL_RESOURCE_EXHAUSTED) {
        /* It counts in-flight messages by scanning them, within MaxScanRecords. */
        *too_big = true;
        return NULL;
    }
    if (rc != KL_OK)
        die("QueueStats of '%s' failed: %s %s", queue, kl_code_name(rc), err.message);
    Keyload__V1__QueueStatsAnswer *a = keyload__v1__queue_stats_answer__unpack(NULL, alen, ans);
    free(ans);
    if (a == NULL || a->limits == NULL)
        die("QueueStats answer of '%s' does not decode", queue);
    return a;
}

typedef enum { CHECK_STATS, CHECK_DEEP, CHECK_GLOBAL } check_level;

static void check_queues(check_level level)
{
    if (kl_node_broken(G.node))
        die("the node broke on client input");
    if (kl_node_pending_batches(G.node) != 0)
        die("%zu batches still pending after every append completed", kl_node_pending_batches(G.node));
    if (kl_store_applied_index(G.store) != kl_store_last_index(G.store))
        die("applied index %llu != log end %llu", (unsigned long long)kl_store_applied_index(G.store),
            (unsigned long long)kl_store_last_index(G.store));
    for (size_t i = 0; i < N_QUEUES; i++) {
        /* QueueStats of "burst" scans its hundreds of leases: not after every input. */
        if (level == CHECK_STATS && strcmp(QUEUES[i], "burst") == 0)
            continue;
        bool too_big;
        Keyload__V1__QueueStatsAnswer *a = queue_stats(QUEUES[i], &too_big);
        if (too_big)
            continue;
        if (a == NULL) {
            /* A fuzz input deleted it (it was empty): bring it back for the lease driver
             * ("dlq" comes before "work", which names it). */
            create_base_queue(QUEUES[i]);
            if ((a = queue_stats(QUEUES[i], &too_big)) == NULL)
                die("queue '%s' is missing right after its creation", QUEUES[i]);
        }
        if (a->messages > a->limits->max_messages || a->bytes > a->limits->max_bytes)
            die("queue '%s' holds %llu messages / %llu bytes over its limits %llu / %llu", QUEUES[i],
                (unsigned long long)a->messages, (unsigned long long)a->bytes,
                (unsigned long long)a->limits->max_messages, (unsigned long long)a->limits->max_bytes);
        if (a->in_flight > a->messages || a->available + a->in_flight != a->messages)
            die("queue '%s': %llu in flight + %llu available != %llu messages", QUEUES[i],
                (unsigned long long)a->in_flight, (unsigned long long)a->available,
                (unsigned long long)a->messages);
        if (a->applied_index != kl_store_applied_index(G.store))
            die("QueueStats reports applied index %llu, the store %llu",
                (unsigned long long)a->applied_index, (unsigned long long)kl_store_applied_index(G.store));
        if (level == CHECK_DEEP)
            deep_check_queue(a->queue_id, DEEP_MAX_EACH);
        keyload__v1__queue_stats_answer__free_unpacked(a, NULL);
    }
    if (level == CHECK_GLOBAL)
        check_store_global();
}

/* ---- receipts ---- */

static bool client_code_ok(kl_code c)
{
    return c == KL_OK || c == KL_INVALID_ARGUMENT || c == KL_NOT_FOUND || c == KL_CONFLICT ||
           c == KL_RESOURCE_EXHAUSTED || c == KL_FAILED_PRECONDITION;
}

/* The one UNAVAILABLE client input may earn: first_sent_ahead, for a first-sent time more
 * than KL_FIRST_SENT_AHEAD_MAX_MS past the leader's clock (G.now here). The node cannot tell
 * that from a client clock running ahead of its own, which a retry cures once the clocks
 * agree (node_retain.h), so it is retryable by design; any other UNAVAILABLE, and this one
 * for a first-sent time that is not that far ahead, still fails. */
static bool first_sent_ahead_ok(kl_code code, const kl_err *err, const uint8_t *req, size_t len)
{
    if (code != KL_UNAVAILABLE || strcmp(err->detail, "first_sent_ahead") != 0)
        return false;
    Keyload__V1__BatchRequest *b = keyload__v1__batch_request__unpack(NULL, len, req);
    bool ahead = b != NULL && b->first_sent_unix_ms > G.now + KL_FIRST_SENT_AHEAD_MAX_MS;
    if (b != NULL)
        keyload__v1__batch_request__free_unpacked(b, NULL);
    return ahead;
}

/* ---- lease tokens for fuzz inputs ---- */

/* Lease tokens are 16 random bytes a fuzzer cannot guess, so without help inputs would
 * only ever ack or release unknown tokens. Every token handed out goes into a ring; in
 * an input, any 16 bytes starting with TOKEN_MARK are overwritten, in place (the rest of
 * the bytes untouched), with a recent token: byte 5 picks which (0 = the latest). */
static void remember_tokens(const Keyload__V1__BatchReceipt *rc)
{
    for (size_t i = 0; i < rc->n_results; i++) {
        const Keyload__V1__MutationResult *res = rc->results[i];
        if (res->kind_case != KEYLOAD__V1__MUTATION_RESULT__KIND_RECEIVED)
            continue;
        for (size_t j = 0; j < res->received->n_messages; j++) {
            const ProtobufCBinaryData *t = &res->received->messages[j]->lease_token;
            if (t->len != 16)
                continue;
            memcpy(G.tokens[G.next_token], t->data, 16);
            G.next_token = (G.next_token + 1) % TOKEN_RING;
            if (G.n_tokens < TOKEN_RING)
                G.n_tokens++;
        }
    }
}

static void substitute_tokens(uint8_t *p, size_t len)
{
    const size_t ml = sizeof TOKEN_MARK - 1;
    if (G.n_tokens == 0)
        return;
    for (size_t i = 0; i + 16 <= len; i++) {
        if (memcmp(p + i, TOKEN_MARK, ml) != 0)
            continue;
        size_t k = p[i + ml] % G.n_tokens;
        memcpy(p + i, G.tokens[(G.next_token + TOKEN_RING - 1 - k) % TOKEN_RING], 16);
        i += 15;
    }
}

/* The result kind each mutation kind answers with. */
static int result_kind_of(int mutation_kind)
{
    switch (mutation_kind) {
    case KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE: return KEYLOAD__V1__MUTATION_RESULT__KIND_QUEUE_CREATED;
    case KEYLOAD__V1__MUTATION__KIND_DELETE_QUEUE: return KEYLOAD__V1__MUTATION_RESULT__KIND_QUEUE_DELETED;
    case KEYLOAD__V1__MUTATION__KIND_ENQUEUE: return KEYLOAD__V1__MUTATION_RESULT__KIND_ENQUEUED;
    case KEYLOAD__V1__MUTATION__KIND_RECEIVE: return KEYLOAD__V1__MUTATION_RESULT__KIND_RECEIVED;
    case KEYLOAD__V1__MUTATION__KIND_ACK: return KEYLOAD__V1__MUTATION_RESULT__KIND_ACKED;
    case KEYLOAD__V1__MUTATION__KIND_RELEASE: return KEYLOAD__V1__MUTATION_RESULT__KIND_RELEASED;
    case KEYLOAD__V1__MUTATION__KIND_CREATE_DATABASE: return KEYLOAD__V1__MUTATION_RESULT__KIND_DATABASE_CREATED;
    case KEYLOAD__V1__MUTATION__KIND_BOOTSTRAP: return KEYLOAD__V1__MUTATION_RESULT__KIND_BOOTSTRAPPED;
    case KEYLOAD__V1__MUTATION__KIND_CREATE_PRINCIPAL:
    case KEYLOAD__V1__MUTATION__KIND_GRANT_PERMISSION:
    case KEYLOAD__V1__MUTATION__KIND_REVOKE_PERMISSION:
    case KEYLOAD__V1__MUTATION__KIND_SET_PRINCIPAL_KEY: return KEYLOAD__V1__MUTATION_RESULT__KIND_PRINCIPAL_CHANGED;
    case KEYLOAD__V1__MUTATION__KIND_SET_DATABASE_LIMITS: return KEYLOAD__V1__MUTATION_RESULT__KIND_DATABASE_LIMITS_SET;
    case KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE_TRANSFER: return KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_CREATED;
    case KEYLOAD__V1__MUTATION__KIND_ACCEPT_QUEUE_TRANSFER: return KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ACCEPTED;
    case KEYLOAD__V1__MUTATION__KIND_COMPLETE_QUEUE_TRANSFER: return KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_COMPLETED;
    case KEYLOAD__V1__MUTATION__KIND_SET_QUEUE_TRANSFERS_PAUSED: return KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFERS_PAUSED;
    case KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_ATTEMPT:
    case KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_REPAIR: return KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ADVANCED;
    default: return -1;
    }
}

/* Checks an OK receipt against the request it answers. Returns the decoded receipt. */
static Keyload__V1__BatchReceipt *check_receipt(const reply *r, const uint8_t *req, size_t len)
{
    Keyload__V1__BatchReceipt *rc = keyload__v1__batch_receipt__unpack(NULL, r->len, r->receipt);
    if (rc == NULL)
        die("an OK receipt does not decode");
    Keyload__V1__BatchRequest *b = keyload__v1__batch_request__unpack(NULL, len, req);
    if (b == NULL)
        die("a request that was answered OK does not decode");
    if (rc->command_id.len != b->command_id.len ||
        memcmp(rc->command_id.data, b->command_id.data, b->command_id.len) != 0)
        die("the receipt names another command id");
    if (rc->index == 0) {
        /* Nothing committed: allowed only for Receives that leased nothing. */
        if (rc->term != 0 || rc->n_results != b->n_mutations)
            die("an uncommitted receipt: term %llu, %zu results for %zu mutations",
                (unsigned long long)rc->term, rc->n_results, b->n_mutations);
        for (size_t i = 0; i < b->n_mutations; i++)
            if (b->mutations[i]->kind_case != KEYLOAD__V1__MUTATION__KIND_RECEIVE ||
                rc->results[i]->kind_case != KEYLOAD__V1__MUTATION_RESULT__KIND_RECEIVED ||
                rc->results[i]->received->n_messages != 0)
                die("an uncommitted receipt for a batch that is not only Receives leasing nothing");
        keyload__v1__batch_request__free_unpacked(b, NULL);
        return rc;
    }
    if (rc->partition != 0 || rc->term != 1 || rc->index < 2 || rc->request_digest.len != KL_DIGEST_LEN)
        die("receipt header: partition %d term %llu index %llu digest %zu bytes", rc->partition,
            (unsigned long long)rc->term, (unsigned long long)rc->index, rc->request_digest.len);
    if (rc->n_results != b->n_mutations)
        die("%zu results for %zu mutations", rc->n_results, b->n_mutations);
    /* Catalog changes (partition 0): a create is alone in its batch; every committed create
     * or delete made one new catalog version, the one now applied (nothing else is pending). */
    bool creates = false, catalog = false;
    for (size_t i = 0; i < b->n_mutations; i++) {
        int k = b->mutations[i]->kind_case;
        creates |= k == KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE || k == KEYLOAD__V1__MUTATION__KIND_CREATE_DATABASE;
        catalog |= creates || k == KEYLOAD__V1__MUTATION__KIND_DELETE_QUEUE;
        /* The database's transfer switch is a catalog change only when it changes. */
        if (k == KEYLOAD__V1__MUTATION__KIND_SET_QUEUE_TRANSFERS_PAUSED &&
            b->mutations[i]->set_queue_transfers_paused->source_queue == NULL && rc->n_results == 1 &&
            rc->results[0]->kind_case == KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFERS_PAUSED)
            catalog |= rc->results[0]->transfers_paused->changed;
    }
    if (creates && b->n_mutations != 1)
        die("a batch of %zu mutations that creates a database or a queue committed", b->n_mutations);
    /* A replay returns the stored receipt: its version is older when the batch is (it is
     * the newest entry exactly when it committed just now, or nothing committed since). */
    uint64_t applied_version, changes;
    kl_node_catalog_status(G.node, &applied_version, &changes);
    bool newest = rc->index == kl_store_last_index(G.store);
    if (catalog ? rc->catalog_version == 0 || rc->catalog_version > applied_version ||
                      (newest && rc->catalog_version != applied_version)
                : rc->catalog_version != 0)
        die("receipt (index %llu, log end %llu) names catalog version %llu for a batch %s catalog "
            "change (applied version %llu)", (unsigned long long)rc->index,
            (unsigned long long)kl_store_last_index(G.store), (unsigned long long)rc->catalog_version,
            catalog ? "with a" : "without", (unsigned long long)applied_version);
    for (size_t i = 0; i < b->n_mutations; i++) {
        const Keyload__V1__Mutation *m = b->mutations[i];
        const Keyload__V1__MutationResult *res = rc->results[i];
        if ((int)res->kind_case != result_kind_of((int)m->kind_case))
            die("result %zu is of kind %d for a mutation of kind %d", i, (int)res->kind_case,
                (int)m->kind_case);
        switch (m->kind_case) {
        case KEYLOAD__V1__MUTATION__KIND_ENQUEUE:
            if (res->enqueued->message_id == 0 || res->enqueued->lane[0] == '\0')
                die("result %zu: enqueued without a message id or lane", i);
            break;
        case KEYLOAD__V1__MUTATION__KIND_RECEIVE: {
            uint32_t want = m->receive->max_messages ? m->receive->max_messages : 1;
            if (res->received->n_messages > want)
                die("result %zu: %zu messages received for max_messages %u", i,
                    res->received->n_messages, want);
            for (size_t j = 0; j < res->received->n_messages; j++) {
                const Keyload__V1__ReceivedMessage *rm = res->received->messages[j];
                if (rm->lease_token.len != 16 || rm->message == NULL || rm->delivery_count == 0 ||
                    rm->lease_expires_unix_ms <= rc->committed_unix_ms)
                    die("result %zu: received message %zu is malformed", i, j);
            }
            break;
        }
        case KEYLOAD__V1__MUTATION__KIND_ACK:
            if (res->acked->count != m->ack->n_lease_tokens)
                die("result %zu: acked %u of %zu tokens", i, res->acked->count, m->ack->n_lease_tokens);
            break;
        case KEYLOAD__V1__MUTATION__KIND_RELEASE:
            if (res->released->count != m->release->n_lease_tokens)
                die("result %zu: released %u of %zu tokens", i, res->released->count,
                    m->release->n_lease_tokens);
            break;
        case KEYLOAD__V1__MUTATION__KIND_CREATE_DATABASE:
            if (res->database_created->database_id == 0 || res->database_created->incarnation.len != 16 ||
                res->database_created->catalog_version != rc->catalog_version)
                die("result %zu: database created with id %llu, a %zu-byte incarnation, version %llu", i,
                    (unsigned long long)res->database_created->database_id,
                    res->database_created->incarnation.len,
                    (unsigned long long)res->database_created->catalog_version);
            break;
        case KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE: {
            const Keyload__V1__QueueCreated *qc = res->queue_created;
            int pinned = m->create_queue->partition;
            bool dlq = m->create_queue->limits && m->create_queue->limits->dead_letter_queue[0] != '\0';
            bool placed = pinned >= 0 ? qc->partition == pinned
                          : dlq       ? qc->partition >= 0 && qc->partition < PARTITIONS
                                      : qc->partition >= 1 && qc->partition < PARTITIONS;
            if (!placed || qc->queue_id == 0 || qc->catalog_version != rc->catalog_version)
                die("result %zu: queue created with id %llu on partition %d (asked %d), version %llu", i,
                    (unsigned long long)qc->queue_id, qc->partition, pinned,
                    (unsigned long long)qc->catalog_version);
            break;
        }
        case KEYLOAD__V1__MUTATION__KIND_DELETE_QUEUE:
            if (res->queue_deleted->catalog_version != rc->catalog_version)
                die("result %zu: queue deleted at catalog version %llu, the receipt says %llu", i,
                    (unsigned long long)res->queue_deleted->catalog_version,
                    (unsigned long long)rc->catalog_version);
            break;
        default:
            break;
        }
    }
    keyload__v1__batch_request__free_unpacked(b, NULL);
    return rc;
}

/* Whether an OK reply is the receipt of a batch that committed nothing (index 0). */
static bool receipt_uncommitted(const reply *r)
{
    Keyload__V1__BatchReceipt *rc = keyload__v1__batch_receipt__unpack(NULL, r->len, r->receipt);
    bool idle = rc != NULL && rc->index == 0;
    if (rc != NULL)
        keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    return idle;
}

/* The replay promise is per committed command id: a batch that committed nothing is
 * evaluated again, so only its being uncommitted again is compared, not its bytes. */
static void expect_same(const reply *a, const reply *b, const char *what)
{
    if (a->code != b->code)
        die("%s: %s, first time %s", what, kl_code_name(b->code), kl_code_name(a->code));
    if (a->code == KL_OK && receipt_uncommitted(a)) {
        if (!receipt_uncommitted(b))
            die("%s: committed, first time nothing committed", what);
        return;
    }
    if (a->code == KL_OK && (a->len != b->len || memcmp(a->receipt, b->receipt, a->len) != 0))
        die("%s: a different receipt", what);
}

/* ---- the lease driver ---- */

/* Feeds the queue: a plain message, one expiring and one delayed within a minute. */
static void feed(const char *queue, uint32_t expire_ms, uint32_t delay_ms)
{
    Keyload__V1__QueueLaneRef ref;
    ref_init(&ref, queue);
    Keyload__V1__EnqueueMessage msg[3];
    Keyload__V1__Enqueue e[3];
    Keyload__V1__Mutation m[3];
    Keyload__V1__Mutation *mp[3];
    for (int i = 0; i < 3; i++) {
        keyload__v1__enqueue_message__init(&msg[i]);
        msg[i].body.data = (uint8_t *)"fed";
        msg[i].body.len = 3;
        keyload__v1__enqueue__init(&e[i]);
        e[i].lane = &ref;
        e[i].message = &msg[i];
        keyload__v1__mutation__init(&m[i]);
        m[i].kind_case = KEYLOAD__V1__MUTATION__KIND_ENQUEUE;
        m[i].enqueue = &e[i];
        mp[i] = &m[i];
    }
    msg[1].expires_at_unix_ms = G.now + 1 + expire_ms;
    msg[2].delay_ms = 1 + delay_ms;
    reply r;
    submit_own(mp, 3, &r);
    expect_answered(&r, "feed");
    /* "small" and "dlq" are often full. */
    if (r.code != KL_OK && r.code != KL_RESOURCE_EXHAUSTED)
        die("feeding '%s' failed: %s %s", queue, kl_code_name(r.code), r.err.message);
    reply_free(&r);
}

/* A Receive of ours, which must be served: however many leases ran out, delays ended or
 * messages expired meanwhile, a queue must not wedge on its own housekeeping (and our
 * receives stay well inside MaxScanRecords). Returns the decoded receipt. */
static Keyload__V1__BatchReceipt *receive_own(const char *queue, uint32_t max, uint32_t lease_ms)
{
    Keyload__V1__QueueLaneRef ref;
    ref_init(&ref, queue);
    Keyload__V1__Receive rcv = KEYLOAD__V1__RECEIVE__INIT;
    rcv.lane = &ref;
    rcv.max_messages = max;
    rcv.lease_ms = lease_ms;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_RECEIVE;
    m.receive = &rcv;
    Keyload__V1__Mutation *mp = &m;
    reply r;
    submit_own(&mp, 1, &r);
    expect_answered(&r, "receive");
    if (r.code != KL_OK)
        die("receive of %u from '%s' failed: %s %s", max, queue, kl_code_name(r.code), r.err.message);
    Keyload__V1__BatchReceipt *rc = keyload__v1__batch_receipt__unpack(NULL, r.len, r.receipt);
    if (rc == NULL || rc->n_results != 1 || rc->results[0]->received == NULL)
        die("receive receipt does not decode");
    reply_free(&r);
    remember_tokens(rc);
    return rc;
}

/* Every BURST_EVERY inputs: a consumer that took BURST_MESSAGES messages with a 1 ms lease
 * and died. The next burst first checks that a Receive is served although all of those
 * leases ran out together (more than one batch's MaxScanRecords can promote at once),
 * then tops the queue up and takes the messages again. */
static void burst(void)
{
    bool too_big;
    Keyload__V1__QueueStatsAnswer *a = queue_stats("burst", &too_big);
    uint64_t have = a ? a->messages : 0;
    if (a)
        keyload__v1__queue_stats_answer__free_unpacked(a, NULL);
    if (a == NULL && !too_big)
        create_base_queue("burst");
    keyload__v1__batch_receipt__free_unpacked(receive_own("burst", 10, 0), NULL);
    if (!too_big && have < BURST_MESSAGES) {
        size_t n = BURST_MESSAGES - have;
        Keyload__V1__QueueLaneRef ref;
        ref_init(&ref, "burst");
        Keyload__V1__EnqueueMessage msg = KEYLOAD__V1__ENQUEUE_MESSAGE__INIT;
        msg.body.data = (uint8_t *)"burst";
        msg.body.len = 5;
        Keyload__V1__Enqueue e = KEYLOAD__V1__ENQUEUE__INIT;
        e.lane = &ref;
        e.message = &msg;
        Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
        m.kind_case = KEYLOAD__V1__MUTATION__KIND_ENQUEUE;
        m.enqueue = &e;
        Keyload__V1__Mutation *mp[BURST_BATCH];
        for (size_t i = 0; i < BURST_BATCH; i++)
            mp[i] = &m;
        for (size_t done = 0; done < n; done += BURST_BATCH) {
            reply r;
            submit_own(mp, n - done < BURST_BATCH ? n - done : BURST_BATCH, &r);
            expect_answered(&r, "burst enqueue");
            if (r.code != KL_OK)
                die("burst enqueue failed: %s %s", kl_code_name(r.code), r.err.message);
            reply_free(&r);
        }
    }
    for (size_t i = 0; i < BURST_MESSAGES / BURST_BATCH; i++)
        keyload__v1__batch_receipt__free_unpacked(receive_own("burst", BURST_BATCH, 1), NULL);
}

static void drive_leases(const char *queue, uint32_t lease_ms)
{
    Keyload__V1__QueueLaneRef ref;
    ref_init(&ref, queue);
    Keyload__V1__BatchReceipt *rc = receive_own(queue, 10, lease_ms);
    const Keyload__V1__Received *got = rc->results[0]->received;
    size_t n = got->n_messages;
    size_t half = (n + 1) / 2, n_ack = (half + 1) / 2, n_rel = half - n_ack;
    ProtobufCBinaryData toks[10];
    for (size_t i = 0; i < n && i < 10; i++)
        toks[i] = got->messages[i]->lease_token;
    Keyload__V1__Ack ack = KEYLOAD__V1__ACK__INIT;
    ack.queue = &ref;
    ack.lease_tokens = toks;
    ack.n_lease_tokens = n_ack;
    Keyload__V1__Release rel = KEYLOAD__V1__RELEASE__INIT;
    rel.queue = &ref;
    rel.lease_tokens = toks + n_ack;
    rel.n_lease_tokens = n_rel;
    Keyload__V1__Mutation ma = KEYLOAD__V1__MUTATION__INIT, mr = KEYLOAD__V1__MUTATION__INIT;
    ma.kind_case = KEYLOAD__V1__MUTATION__KIND_ACK;
    ma.ack = &ack;
    mr.kind_case = KEYLOAD__V1__MUTATION__KIND_RELEASE;
    mr.release = &rel;
    Keyload__V1__Mutation *muts[2];
    size_t nm = 0;
    if (n_ack)
        muts[nm++] = &ma;
    if (n_rel)
        muts[nm++] = &mr;
    if (nm > 0) {
        reply r2;
        submit_own(muts, nm, &r2);
        expect_answered(&r2, "ack/release");
        /* The leases are a moment old (same clock): settling them must succeed. */
        if (r2.code != KL_OK)
            die("ack/release of fresh leases from '%s' failed: %s %s", queue, kl_code_name(r2.code),
                r2.err.message);
        reply_free(&r2);
    }
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
}

/* ---- store lifetime ---- */

static uint64_t g_du;
static int du_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)p; (void)ftw;
    if (flag == FTW_F)
        g_du += (uint64_t)sb->st_size;
    return 0;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

static void store_open(void)
{
    const char *root = getenv("KL_FUZZ_STORE_ROOT");
    struct stat st;
    if (root == NULL || root[0] == '\0')
        root = (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0)
                   ? "/dev/shm" : "/tmp";
    snprintf(G.dir, sizeof G.dir, "%s/keyload-fuzz-batch.XXXXXX", root);
    if (mkdtemp(G.dir) == NULL) {
        perror(G.dir);
        abort();
    }
    kl_err err;
    kl_err_clear(&err);
    if (kl_store_open(G.dir, NULL, &G.store, &err) != KL_OK)
        die("kl_store_open(%s): %s", G.dir, err.message);
    G.now = T0;
    G.inputs = 0;
    G.catalog_checked = 0;
    /* A fixed cluster secret: database signing keys derive from it. */
    static const uint8_t fuzz_cluster_secret[32] = {0x6b, 0x6c, 0x66, 0x75, 0x7a, 0x7a};
    kl_node_config cfg = {.partition = 0, .partition_count = PARTITIONS, .max_pending_bytes = 1u << 26,
                          .max_pending_batches = 1024, .cluster_secret = fuzz_cluster_secret,
                          .insecure_local_admin = true};
    kl_limits_default(&cfg.limits);
    cfg.limits.max_scan_records = FUZZ_MAX_SCAN_RECORDS;
    kl_node_io io = {.ctx = NULL, .next = io_next, .propose = io_propose, .clock_ms = io_clock,
                     .random = io_random};
    G.next_index = kl_store_last_index(G.store) + 1;
    if (kl_node_open(G.store, &cfg, &io, &G.node, &err) != KL_OK)
        die("kl_node_open: %s", err.message);
    kl_node_role(G.node, true); /* proposes the partition incarnation */
    commit_all();
    /* The catalog first: no queue can be created before its database exists. */
    create_database("default", "default");
    for (size_t i = 0; i < N_QUEUES; i++)
        create_base_queue(QUEUES[i]);
}

static void store_close(void)
{
    if (G.node == NULL)
        return;
    kl_node_close(G.node);
    kl_store_close(G.store);
    while (G.n_props > 0) {
        free(G.props[G.n_props - 1].bytes);
        G.n_props--;
    }
    G.node = NULL;
    G.store = NULL;
    nftw(G.dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void maybe_reopen(void)
{
    /* Leases, releases and acks delete 'A'/'T' entries at the front of their ranges, and
     * every scan of a range steps over its tombstones until compaction drops them;
     * compacting the ranges that churn ('A' to 'K', 'Q' to 'T') now and then keeps the
     * target's speed from decaying with its age. The log ('L') and the outcomes ('O') only
     * grow, and compacting them too would cost more the older the store gets. */
    if (G.inputs > 0 && G.inputs % COMPACT_EVERY == 0) {
        rocksdb_compact_range(kl_store_db(G.store), "A", 1, "K\xff", 2);
        rocksdb_compact_range(kl_store_db(G.store), "Q", 1, "T\xff", 2);
    }
    bool big = false;
    if (G.inputs > 0 && G.inputs % SIZE_CHECK_EVERY == 0) {
        g_du = 0;
        nftw(G.dir, du_one, 16, FTW_PHYS);
        big = g_du > REOPEN_BYTES;
    }
    if (big || G.inputs >= REOPEN_INPUTS) {
        store_close();
        store_open();
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (sodium_init() < 0)
        die("sodium_init failed");
    const char *v = getenv("KL_FUZZ_VERBOSE");
    G.verbose = v != NULL && strcmp(v, "1") == 0;
    store_open();
    atexit(store_close);
    return 0;
}

/* ---- one input ---- */

/* Clock advance from a hash byte pair: mostly under a second, sometimes past the default
 * lease (30 s), rarely past the longest lease (12 h) or the longest delay (7 days). */
static int64_t clock_step(const uint8_t h[16])
{
    uint32_t x;
    memcpy(&x, h + 4, 4);
    uint8_t bucket = h[1];
    if (bucket < 160)
        return x % 1000;
    if (bucket < 224)
        return x % 65000;
    if (bucket < 248)
        return x % 3600000;
    if (bucket < 254)
        return x % (13 * 3600000);
    return x % (8LL * 24 * 3600000);
}

static void background_enqueue(reply *r)
{
    Keyload__V1__QueueLaneRef ref;
    ref_init(&ref, "q");
    Keyload__V1__EnqueueMessage msg = KEYLOAD__V1__ENQUEUE_MESSAGE__INIT;
    msg.body.data = (uint8_t *)"background";
    msg.body.len = 10;
    Keyload__V1__Enqueue e = KEYLOAD__V1__ENQUEUE__INIT;
    e.lane = &ref;
    e.message = &msg;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_ENQUEUE;
    m.enqueue = &e;
    Keyload__V1__Mutation *mp = &m;
    submit_own(&mp, 1, r);
}

/* The read path on the same bytes: QueueStats must cope with any request too. */
static void stats_on_input(const uint8_t *data, size_t size)
{
    uint8_t *ans = NULL;
    size_t alen = 0;
    kl_err err;
    kl_err_clear(&err);
    kl_code rc = kl_node_queue_stats(G.node, PRINCIPAL, data, size, &ans, &alen, &err);
    if (rc == KL_OK) {
        Keyload__V1__QueueStatsAnswer *a = keyload__v1__queue_stats_answer__unpack(NULL, alen, ans);
        if (a == NULL)
            die("a QueueStats answer does not decode");
        keyload__v1__queue_stats_answer__free_unpacked(a, NULL);
        free(ans);
    } else if (rc != KL_INVALID_ARGUMENT && rc != KL_NOT_FOUND && rc != KL_RESOURCE_EXHAUSTED) {
        die("QueueStats on client input answered %s: %s", kl_code_name(rc), err.message);
    } else if (err.code != rc || err.message[0] == '\0') {
        die("QueueStats failed without naming the fault");
    }
}

/* And LocateQueue (partition 0's catalog read) on the same bytes. */
static void locate_on_input(const uint8_t *data, size_t size)
{
    uint8_t *ans = NULL;
    size_t alen = 0;
    kl_err err;
    kl_err_clear(&err);
    kl_code rc = kl_node_locate_queue(G.node, PRINCIPAL, data, size, &ans, &alen, &err);
    if (rc == KL_OK) {
        Keyload__V1__LocateQueueAnswer *a = keyload__v1__locate_queue_answer__unpack(NULL, alen, ans);
        if (a == NULL || a->queue == NULL || a->queue->partition < 0 || a->queue->partition >= PARTITIONS)
            die("a LocateQueue answer does not decode or places the queue on no partition");
        keyload__v1__locate_queue_answer__free_unpacked(a, NULL);
        free(ans);
    } else if (rc != KL_INVALID_ARGUMENT && rc != KL_NOT_FOUND) {
        die("LocateQueue on client input answered %s: %s", kl_code_name(rc), err.message);
    } else if (err.code != rc || err.message[0] == '\0') {
        die("LocateQueue failed without naming the fault");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    maybe_reopen();
    G.inputs++;
    uint8_t h[16];
    crypto_generichash(h, sizeof h, data, size, NULL, 0);
    G.now += clock_step(h);
    /* The lease driver runs first: the previous input's checks made sure its queues exist. */
    if (G.inputs % LEASE_EVERY == 0) {
        uint32_t lease_ms = (h[10] & 1) ? 0 : 1 + h[11] * 100u;
        static const char *const leased[] = {"q", "work", "small", "q", "drop", "dlq"};
        const char *queue = leased[(G.inputs / LEASE_EVERY) % 6];
        uint16_t x, y;
        memcpy(&x, h + 12, 2);
        memcpy(&y, h + 14, 2);
        feed(queue, x % 60000u, y % 60000u);
        drive_leases(queue, lease_ms);
    }
    if (G.inputs % BURST_EVERY == 0) {
        burst();
    }

    /* The request: the input, plus (7 times in 8) a command_id field that overrides its own. */
    bool override = (h[9] & 7) != 0;
    size_t len = size + (override ? 18 : 0);
    uint8_t *req = malloc(len ? len : 1);
    if (req == NULL)
        die("out of memory");
    if (size)
        memcpy(req, data, size);
    substitute_tokens(req, size);
    if (override) {
        req[size] = (1 << 3) | 2; /* field 1 (command_id), length-delimited */
        req[size + 1] = 16;
        memcpy(req + size + 2, h, 16);
        if (req[size + 2] == 0)
            req[size + 2] = 1; /* never all zero */
    }

    bool held = h[8] % 8 == 0;
    reply bg, r1, r2;
    memset(&r2, 0, sizeof r2);
    if (held) {
        G.hold = true;
        background_enqueue(&bg);
    }
    submit(req, len, &r1);
    if (held) {
        submit(req, len, &r2);
        if (G.n_props == 0 && bg.count == 0)
            die("the background batch was neither answered nor appended");
        release_held();
        expect_answered(&bg, "background enqueue");
        /* A fuzz input may have made "q" again with small limits. */
        if (bg.code != KL_OK && bg.code != KL_RESOURCE_EXHAUSTED)
            die("background enqueue failed: %s %s", kl_code_name(bg.code), bg.err.message);
        reply_free(&bg);
    }
    expect_answered(&r1, "fuzz input");
    if (G.verbose)
        fprintf(stderr, "fuzz_batch: input %llu (%zu bytes%s%s): %s %s\n", (unsigned long long)G.inputs,
                size, override ? ", new command id" : "", held ? ", held" : "", kl_code_name(r1.code),
                r1.err.message);
    /* The local administrator is refused nothing, except a transfer token that is not
     * genuine (or not its own): detail intent_* / receipt_*. */
    bool forged_token = r1.code == KL_PERMISSION_DENIED &&
                        (strncmp(r1.err.detail, "intent_", 7) == 0 || strncmp(r1.err.detail, "receipt_", 8) == 0);
    if (!client_code_ok(r1.code) && !forged_token && !first_sent_ahead_ok(r1.code, &r1.err, req, len))
        die("client input answered %s (%s): %s", kl_code_name(r1.code), r1.err.detail, r1.err.message);
    if (held) {
        expect_answered(&r2, "fuzz input, again while pending");
        expect_same(&r1, &r2, "the same request submitted again while pending");
    }
    if (r1.code == KL_OK) {
        Keyload__V1__BatchReceipt *rc = check_receipt(&r1, req, len);
        remember_tokens(rc);
        keyload__v1__batch_receipt__free_unpacked(rc, NULL);
        reply r3;
        submit(req, len, &r3);
        expect_answered(&r3, "fuzz input, again after commit");
        expect_same(&r1, &r3, "the same request submitted again after commit");
        reply_free(&r3);
    }
    reply_free(&r1);
    reply_free(&r2);
    free(req);

    stats_on_input(data, size);
    locate_on_input(data, size);
    check_queues(G.inputs % GLOBAL_EVERY == 0  ? CHECK_GLOBAL
                 : G.inputs % DEEP_EVERY == 0 ? CHECK_DEEP
                                              : CHECK_STATS);
    return 0;
}
