/* driver: the I/O half of replication (the contract is in driver.h; the core's in raft.h).
 *
 * State machine of one kl_repl, all on the loop thread:
 *   idle        no ready outstanding; pump() takes the next one;
 *   persisting  a ready is outstanding and its synced write runs on the log writer
 *               (persist_busy); ticks, steps, proposals and reads keep feeding the core,
 *               whose effects wait for the next ready, except heartbeats and their answers,
 *               which leave at once (send_urgent);
 *   finishing   finish_round() sends, applies, serves reads, reports the role and advances
 *               (pumping is set, so a callback that proposes does not start a nested round);
 *   failed      fatal was called: no more readies, no timer, no peer; waits for stop;
 *   stopped     kl_repl_stop was called: the memory goes once the timer handle closed and no
 *               persist is in flight (maybe_free).
 * Ownership: the ready's buffers belong to the core until kl_raft_advance; the persist job
 * points into them (normal entries) and into no-op encodings the driver owns (job.noops). */
#include "daemon/repl/driver.h"

#include "common/failpoint.h"
#include "common/log.h"
#include "common/pb_arena.h"
#include "common/proto_check.h"
#include "daemon/repl/confstore.h"
#include "daemon/repl/log_writer.h"
#include "daemon/repl/peer.h"
#include "daemon/repl/snapwire.h"
#include "daemon/repl/stages.h"
#include "daemon/repl/trace.h"
#include "keyload/v1/raft.pb-c.h"

#include <assert.h>
#include <sodium.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The receive arena keeps at most this much between frames (a larger frame's decode is
 * returned to malloc once handled). */
#define KL_REPL_RECV_ARENA_KEEP_BYTES (1u << 20)

#define NOOP_MAX 32 /* an encoded LogEntry{term, index, raft_type}: 3 tags + 2 varints + 1 */
#define FRAME_SLACK KL_REPL_FRAME_SLACK
/* Stage timings are logged every this many ticks when there were writes (about 2 s at the
 * default tick): short enough that each benchmark cell gets its own line. */
#define STAGES_REPORT_TICKS 40
/* A follower's log write runs on its loop while the last one ran at most this long
 * (write_start). A quick synced write here takes 0.1-0.3 ms; 2 ms is far above that, and far
 * below a heartbeat interval, so the loop is never held long enough for a timer to notice. */
#define WRITE_HERE_MAX_NS (2u * 1000u * 1000u)

enum { READ_WAITING = 0, READ_CONFIRMED = 1, READ_DONE = 2 };

typedef struct pending_read {
    uint64_t ctx;
    uint64_t term;  /* the term the core accepted it in */
    uint64_t index; /* READ_CONFIRMED: serve once applied >= index */
    uint8_t state;
} pending_read;

typedef struct persist_job {
    struct kl_repl *owner;
    bool has_hard;
    Keyload__V1__HardState hard;
    uint64_t truncate_from;
    kl_store_log_item *items;
    size_t n_items, cap_items;
    uint8_t *noops; /* NOOP_MAX bytes per entry slot, for no-op encodings */
    size_t cap_noops;
    uint8_t *confs[KL_RAFT_MAX_CONF_HISTORY]; /* stored records of CONF entries (confstore.h) */
    size_t n_confs;
    kl_code rc;
    kl_err err;
    uint64_t t_queued, t_run, t_ran; /* stages: loop queued it, worker began, worker ended */
    uint64_t sync_ns;                /* stages: the sync inside the worker's part */
} persist_job;

/* Log bytes through an index (log_bytes_note): ranges of about KL_SNAP_LOG_SAMPLE_BYTES,
 * enough of them to cover twice the byte threshold. */
typedef struct lb_sample {
    uint64_t index, cum; /* bytes logged through entry index */
} lb_sample;
#define LB_N (2 * KL_SNAP_LOG_BYTES / KL_SNAP_LOG_SAMPLE_BYTES)

struct kl_repl {
    uv_loop_t *loop;
    kl_store *store;
    uint64_t durable_term, durable_vote; /* as last synced: a change needs an fsync */
    kl_repl_callbacks cb;
    uint64_t self;
    size_t n_members;
    size_t max_frame;
    char cluster[KL_PEER_MAX_CLUSTER + 1];

    kl_raft *raft;
    kl_log_writer *writer; /* runs the persist jobs, one at a time; after a stop, until its
                            * thread ended (on_writer_closed) */
    kl_peer *peer; /* NULL when alone, after a failure or after stop */
    kl_snapwire *sw; /* snapshot streams (NULL when alone) */
    kl_confstore cs; /* stored and applied configurations (confstore.h) */
    uint64_t known_peers[3 * KL_RAFT_MAX_MEMBERS]; /* members the peer knows (conf_peers) */
    size_t n_known_peers;
    kl_raft_conf peers_conf; /* the configuration the peer transport follows */
    uint64_t peers_leader;   /* the leader it keeps a link to although peers_conf may not list it */
    uint64_t seed_peers[KL_RAFT_MAX_MEMBERS]; /* the members the cluster or join file named */
    size_t n_seed_peers;
    uint32_t snap_threshold, snap_trailing; /* compaction policy (driver.h) */
    uv_timer_t timer;
    uv_check_t flush; /* once per loop iteration, after I/O: see on_flush */
    uv_prepare_t reads_out; /* before every poll: a read round not sent yet leaves (on_reads_out) */
    bool reads_unsent;      /* a read was queued since the last send_urgent */
    int open_handles; /* timer, flush, reads_out and the writer, until all are closed after stop */

    /* The rounds: rd (= &rds[cur]) is the oldest ready taken, whose write runs while
     * persist_busy; with next_taken, rds[cur ^ 1] is the ready taken after it, whose write
     * (jobs[cur ^ 1], when next_write) starts the moment the oldest one's completes. */
    kl_raft_ready rds[2], *rd;
    persist_job jobs[2], *job;
    size_t cur;
    bool next_taken, next_write;
    bool compact_due; /* a compaction waits for a round to end with no ready outstanding */
    bool pumping;
    bool msgs_sent;     /* this round's messages went out before its write (a leader's) */
    struct { /* the compaction's flush on the thread pool (maybe_compact) */
        uv_work_t work;
        bool busy;
        uint64_t applied;  /* read on the loop before the flush started: durable once it ends */
        uint64_t t0, flush_ns, wait_ns;
        bool fresh; /* it ended and no compaction followed yet: compact before flushing again */
        kl_code rc;
        kl_err err;
    } cflush;
    struct { /* dropping compacted log files on the thread pool (kl_store_drop_compacted_log) */
        uv_work_t work;
        bool busy;
        bool again; /* a compaction came while it ran: drop once more when it ends */
        uint64_t ns; /* the last drop's duration, for the "log compacted" line */
        kl_code rc;
        kl_err err;
    } cdrop;
    struct { /* bytes this member logged, sampled by index (log_bytes_note) */
        lb_sample s[LB_N]; /* a ring: sample k is s[(head + k) % LB_N], increasing index */
        size_t head, len;
        uint64_t base; /* bytes logged up to the oldest sample's range */
        uint64_t cum;  /* bytes logged since the start or the last install */
    } lb;

    /* applied state as this driver handed it out */
    uint64_t applied, applied_term;
    /* the last commit index reported through cb.committed, and its term */
    uint64_t commit_reported, commit_reported_term;

    /* last role report */
    bool reported;
    kl_raft_role rep_role;
    uint64_t rep_term, rep_leader;
    bool rep_ready;

    /* read-index requests accepted by the core, oldest first: reads[rhead .. rhead + rlen) */
    pending_read *reads;
    size_t rhead, rlen, rcap;

    /* message conversion buffers */
    kl_raft_entry *in_ents; /* KL_RAFT_MAX_MSG_ENTRIES */
    /* A received frame's decode: the core and the snapshot streams copy what they keep,
     * so it is dropped (reset) before on_recv returns. recv_live: a decode is in it. */
    kl_pb_arena recv_arena;
    bool recv_live;
    Keyload__V1__RaftEntry *out_ents;
    Keyload__V1__RaftEntry **out_ptrs;
    uint8_t *frame;
    size_t frame_cap;

    kl_repl_counters counters;
    kl_stages *stages;   /* per-stage timing (stages.h); NULL if it could not be allocated */
    kl_trace *trace;     /* sampled cross-member stamps (trace.h); NULL when off */
    uint64_t seen_commit; /* highest commit index stamped in stages */
    uint32_t report_ticks;
    uint64_t last_run_ns; /* how long the last log write ran (persist_run): see write_start */
    bool failed, stopped;
};

/* ---------------------------------------------------------------- LogEntry header */

static bool get_varint(const uint8_t *p, size_t n, size_t *pos, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*pos >= n)
            return false;
        uint8_t b = p[(*pos)++];
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

/* Reads term (field 1), index (2) and raft_type (6) of an encoded keyload.v1.LogEntry without
 * decoding the rest. With term_only, stops at the term. False unless the bytes are a
 * well-formed field sequence (to the end, unless term_only) with each of the three fields at
 * most once, as varints: an entry passing this check reads back the same term whichever way
 * it is parsed. Absent fields are 0, as in proto3. */
static bool log_header(const uint8_t *p, size_t n, bool term_only, uint64_t *term,
                       uint64_t *index, uint32_t *type)
{
    uint64_t vals[7] = {0};
    bool seen[7] = {false};
    size_t pos = 0;
    while (pos < n) {
        uint64_t key, v;
        if (!get_varint(p, n, &pos, &key))
            return false;
        uint64_t field = key >> 3;
        unsigned wt = (unsigned)(key & 7);
        if (field == 0)
            return false;
        bool header = field == 1 || field == 2 || field == 6;
        if (header && (wt != 0 || seen[field]))
            return false;
        switch (wt) {
        case 0:
            if (!get_varint(p, n, &pos, &v))
                return false;
            if (header) {
                seen[field] = true;
                vals[field] = v;
            }
            break;
        case 1:
            if (n - pos < 8)
                return false;
            pos += 8;
            break;
        case 2:
            if (!get_varint(p, n, &pos, &v) || v > n - pos)
                return false;
            pos += (size_t)v;
            break;
        case 5:
            if (n - pos < 4)
                return false;
            pos += 4;
            break;
        default:
            return false;
        }
        if (term_only && field == 1)
            break;
    }
    if (vals[6] > UINT32_MAX)
        return false;
    *term = vals[1];
    if (index != NULL)
        *index = vals[2];
    if (type != NULL)
        *type = (uint32_t)vals[6];
    return true;
}

/* The stored record of a no-op: LogEntry{term, index, raft_type = 1}. */
static size_t encode_noop(uint64_t term, uint64_t index, uint8_t *buf)
{
    Keyload__V1__LogEntry e = KEYLOAD__V1__LOG_ENTRY__INIT;
    e.term = term;
    e.index = index;
    e.raft_type = KL_RAFT_ENTRY_NOOP;
    assert(keyload__v1__log_entry__get_packed_size(&e) <= NOOP_MAX);
    return keyload__v1__log_entry__pack(&e, buf);
}

/* ---------------------------------------------------------------- storage for the core */

static kl_code read_record(kl_repl *r, uint64_t index, uint8_t **buf, size_t *len)
{
    bool found;
    kl_err err;
    kl_code rc = kl_store_read_log(r->store, index, buf, len, &found, &err);
    if (rc != KL_OK) {
        KL_ERROR("raft log read failed", "index=%llu error=\"%s\"", (unsigned long long)index,
                 err.message);
        return KL_INTERNAL;
    }
    if (!found) {
        KL_ERROR("raft log entry missing", "index=%llu", (unsigned long long)index);
        return KL_INTERNAL;
    }
    return KL_OK;
}

static kl_code st_term(void *ctx, uint64_t index, uint64_t *term)
{
    kl_repl *r = ctx;
    uint8_t *buf;
    size_t len;
    kl_code rc = read_record(r, index, &buf, &len);
    if (rc != KL_OK)
        return rc;
    bool ok = log_header(buf, len, true, term, NULL, NULL) && *term > 0;
    free(buf);
    if (!ok) {
        KL_ERROR("raft log entry does not decode", "index=%llu", (unsigned long long)index);
        return KL_INTERNAL;
    }
    return KL_OK;
}

static kl_code st_entries(void *ctx, uint64_t lo, uint64_t hi, size_t max_bytes,
                          kl_raft_entry *out, size_t cap, size_t *n)
{
    kl_repl *r = ctx;
    size_t got = 0, bytes = 0;
    for (uint64_t i = lo; i < hi && got < cap; i++) {
        uint8_t *buf;
        size_t len;
        kl_code rc = read_record(r, i, &buf, &len);
        uint64_t term = 0, index = 0;
        uint32_t type = 0;
        if (rc == KL_OK && (!log_header(buf, len, false, &term, &index, &type) || term == 0 ||
                            index != i || type > KL_RAFT_ENTRY_CONF)) {
            KL_ERROR("raft log entry does not decode", "index=%llu", (unsigned long long)i);
            free(buf);
            rc = KL_INTERNAL;
        }
        if (rc != KL_OK) {
            for (size_t j = 0; j < got; j++)
                free(out[j].data);
            *n = 0;
            return rc;
        }
        if (type == KL_RAFT_ENTRY_CONF) { /* the core's data is the blob inside */
            uint8_t *blob = NULL;
            size_t blen = 0;
            rc = kl_confstore_blob_of(buf, len, &blob, &blen);
            free(buf);
            if (rc != KL_OK) {
                KL_ERROR("raft configuration entry does not decode", "index=%llu", (unsigned long long)i);
                for (size_t j = 0; j < got; j++)
                    free(out[j].data);
                *n = 0;
                return rc;
            }
            buf = blob;
            len = blen;
        }
        size_t dlen = type == KL_RAFT_ENTRY_NOOP ? 0 : len;
        if (got > 0 && bytes + dlen > max_bytes) {
            free(buf);
            break;
        }
        out[got] = (kl_raft_entry){.term = term, .index = i, .type = (uint8_t)type};
        if (dlen > 0) {
            out[got].data = buf;
            out[got].len = dlen;
        } else {
            free(buf);
        }
        bytes += dlen;
        got++;
    }
    *n = got;
    return KL_OK;
}

static kl_code st_last_conf(void *ctx, uint64_t hi, uint64_t *index)
{
    *index = kl_confstore_last(&((kl_repl *)ctx)->cs, hi);
    return KL_OK;
}

/* ---------------------------------------------------------------- lifecycle helpers */

static void pump(kl_repl *r);
static bool write_start(kl_repl *r, size_t k);
static void take_next(kl_repl *r);
static void next_round(kl_repl *r, bool writing, uint64_t durable);
static void maybe_compact(kl_repl *r);
static void log_bytes_note(kl_repl *r, const persist_job *j);

static void free_all(kl_repl *r)
{
    kl_snapwire_free(r->sw);
    kl_raft_free(r->raft);
    kl_confstore_free(&r->cs);
    for (size_t k = 0; k < 2; k++) {
        for (size_t i = 0; i < r->jobs[k].n_confs; i++)
            free(r->jobs[k].confs[i]);
        free(r->jobs[k].items);
        free(r->jobs[k].noops);
    }
    kl_stages_free(r->stages);
    kl_trace_free(r->trace);
    free(r->reads);
    free(r->in_ents);
    kl_pb_arena_fini(&r->recv_arena);
    free(r->out_ents);
    free(r->out_ptrs);
    free(r->frame);
    free(r);
}

/* A persist job is with the log writer: submitted, and persist_after has not run for it.
 * After a stop that stays true until the thread has ended (the writer outlives the stop
 * until on_writer_closed), so a write still running keeps the driver's memory. */
static bool persist_busy(const kl_repl *r) { return r->writer != NULL && kl_log_writer_busy(r->writer); }

static void maybe_free(kl_repl *r)
{
    if (!r->stopped || r->open_handles > 0 || persist_busy(r) || r->cflush.busy || r->cdrop.busy)
        return;
    void (*stopped)(void *) = r->cb.stopped;
    void *ctx = r->cb.ctx;
    free_all(r);
    if (stopped != NULL)
        stopped(ctx);
}

/* The writer thread ended after any write it ran: that write finished, its round never will. */
static void on_writer_closed(void *ctx)
{
    kl_repl *r = ctx;
    r->writer = NULL;
    r->open_handles--;
    maybe_free(r);
}

static void on_handle_closed(uv_handle_t *h)
{
    kl_repl *r = h->data;
    r->open_handles--;
    maybe_free(r);
}

/* Storage failure: report once, then no more ticks, network or readies. */
static void fail(kl_repl *r, const kl_err *err)
{
    if (r->failed || r->stopped)
        return;
    r->failed = true;
    uv_timer_stop(&r->timer);
    uv_check_stop(&r->flush);
    uv_prepare_stop(&r->reads_out);
    if (r->peer != NULL) {
        kl_peer_stop(r->peer);
        r->peer = NULL;
    }
    KL_ERROR("replication stopped on a storage failure", "member=%llu error=\"%s\"",
             (unsigned long long)r->self, err->message);
    if (r->cb.fatal != NULL)
        r->cb.fatal(r->cb.ctx, err);
}

static void fail_core(kl_repl *r, const char *what)
{
    kl_err err;
    kl_fail(&err, KL_INTERNAL, "raft", "replication core failed in %s (storage read error)", what);
    fail(r, &err);
}

static bool live(const kl_repl *r) { return !r->failed && !r->stopped; }

/* Stamps the commit time of indexes that committed since the last call (stages.h). */
static void note_commit(kl_repl *r)
{
    kl_raft_status st;
    kl_raft_status_get(r->raft, &st);
    if (st.commit > r->seen_commit) {
        uint64_t now = kl_stages_now();
        kl_stages_mark_range(r->stages, r->seen_commit + 1, st.commit, KL_STAGE_COMMIT, now);
        kl_trace_mark(r->trace, r->seen_commit + 1, st.commit, KL_TP_COMMIT, now);
        r->seen_commit = st.commit;
    }
}

/* Stamps stage for the entries of persist job j (of a ready of this role). */
static void note_job(kl_repl *r, const persist_job *j, kl_raft_role role, kl_stage stage)
{
    uint64_t now = kl_stages_now();
    if (stage == KL_STAGE_PERSIST_START)
        kl_stages_write_begin(r->stages, now); /* the fsync histogram, one per write */
    else if (stage == KL_STAGE_PERSIST_DONE)
        kl_stages_write_end(r->stages, now);
    if (j->n_items == 0)
        return;
    uint64_t lo = j->items[0].index, hi = j->items[j->n_items - 1].index;
    kl_stages_mark_range(r->stages, lo, hi, stage, now);
    kl_trace_mark(r->trace, lo, hi, stage == KL_STAGE_PERSIST_START ? KL_TP_W_START : KL_TP_W_DONE, now);
    if (stage == KL_STAGE_PERSIST_DONE && role != KL_RAFT_LEADER)
        for (size_t i = 0; i < j->n_items; i++)
            kl_stages_follower_done(r->stages, j->items[i].index, now);
}

/* ---------------------------------------------------------------- sending */

static bool frame_reserve(kl_repl *r, size_t n)
{
    if (n <= r->frame_cap)
        return true;
    size_t cap = r->frame_cap ? r->frame_cap : 4096;
    while (cap < n)
        cap *= 2;
    uint8_t *f = realloc(r->frame, cap);
    if (f == NULL)
        return false;
    r->frame = f;
    r->frame_cap = cap;
    return true;
}

static void send_msg(kl_repl *r, const kl_raft_msg *m)
{
    if (m->type == KL_RAFT_MSG_SNAPSHOT) {
        /* Not a frame: the snapshot is streamed (snapwire.h), and reported when it ends. */
        if (r->sw != NULL && r->peer != NULL)
            kl_snapwire_start(r->sw, m, uv_now(r->loop));
        else
            (void)kl_raft_report_snapshot(r->raft, m->to, false);
        return;
    }
    if (r->peer == NULL || m->n_entries > KL_RAFT_MAX_MSG_ENTRIES) {
        r->counters.send_drops++;
        return;
    }
    Keyload__V1__RaftMessage pm = KEYLOAD__V1__RAFT_MESSAGE__INIT;
    pm.type = m->type;
    pm.reject = m->reject;
    pm.from = m->from;
    pm.to = m->to;
    pm.term = m->term;
    pm.index = m->index;
    pm.log_term = m->log_term;
    pm.commit = m->commit;
    pm.reject_hint = m->reject_hint;
    pm.ctx = m->ctx;
    for (size_t i = 0; i < m->n_entries; i++) {
        Keyload__V1__RaftEntry *pe = &r->out_ents[i];
        keyload__v1__raft_entry__init(pe);
        pe->term = m->entries[i].term;
        pe->index = m->entries[i].index;
        pe->type = m->entries[i].type;
        pe->data.data = m->entries[i].data;
        pe->data.len = m->entries[i].len;
        r->out_ptrs[i] = pe;
    }
    pm.n_entries = m->n_entries;
    pm.entries = r->out_ptrs;
    size_t n = keyload__v1__raft_message__get_packed_size(&pm);
    if (n > r->max_frame || !frame_reserve(r, n)) {
        r->counters.send_drops++;
        return;
    }
    keyload__v1__raft_message__pack(&pm, r->frame);
    if (m->type == KL_RAFT_MSG_APPEND && m->n_entries > 0) { /* only a leader sends appends */
        uint64_t now = kl_stages_now();
        kl_stages_mark_range(r->stages, m->entries[0].index, m->entries[m->n_entries - 1].index,
                             KL_STAGE_SENT, now);
        kl_trace_peer_mark(r->trace, m->entries[0].index, m->entries[m->n_entries - 1].index, m->to,
                           KL_TPP_SENT, now);
    }
    /* Stamped before the send, as an append's "sent" is: a stamp after it would count the
     * sender's own delay past its write(2) (a preemption there) against the transit. */
    bool trace_ack = r->trace != NULL && m->type == KL_RAFT_MSG_APPEND_RESP && !m->reject;
    uint64_t ack_at = trace_ack ? kl_stages_now() : 0;
    if (kl_peer_send(r->peer, m->to, r->frame, n) != KL_OK) {
        r->counters.send_drops++;
    } else if (trace_ack) {
        kl_trace_mark(r->trace, 1, m->index, KL_TP_ACK_SENT, ack_at);
        kl_trace_emit(r->trace, 1, m->index, false);
    }
}

/* ---------------------------------------------------------------- reads
 *
 * The queue holds every read the core accepted, in acceptance order. The core confirms reads
 * oldest first and, when it stops leading, drops every unconfirmed one at once (confirmed
 * ones stay valid: their index was confirmed while it led). Confirmed indexes never
 * decrease along the queue (each is the commit index when the read was accepted), so
 * serving from the front in order never holds a read longer than needed. */

static pending_read *read_at(kl_repl *r, size_t i) { return &r->reads[(r->rhead + i) % r->rcap]; }

static void read_dropped(kl_repl *r, pending_read *p)
{
    p->state = READ_DONE;
    if (r->cb.read_dropped != NULL)
        r->cb.read_dropped(r->cb.ctx, p->ctx);
}

/* A confirmation for rs->ctx: the first waiting read is it; a waiting read ahead of it with
 * another ctx was dropped by the core (it would have been confirmed first otherwise). */
static void reads_confirm(kl_repl *r, const kl_raft_read_state *rs)
{
    for (size_t i = 0; i < r->rlen && live(r); i++) {
        pending_read *p = read_at(r, i);
        if (p->state != READ_WAITING)
            continue;
        if (p->ctx == rs->ctx) {
            p->state = READ_CONFIRMED;
            p->index = rs->index;
            return;
        }
        read_dropped(r, p);
    }
}

/* After the round's applies (the ready's confirmations were taken when the ready was, in
 * pump): drops the waiting reads the core dropped (accepted in an earlier term than the
 * ready's, or in its term when the ready says this member no longer leads; a read accepted
 * after the ready was taken is of a later term and left alone), then serves confirmed reads
 * whose index is applied, oldest first. Stops if a callback stopped us. */
static void reads_serve(kl_repl *r);

static void reads_settle(kl_repl *r)
{
    const kl_raft_ready *rd = r->rd;
    for (size_t i = 0; i < r->rlen && live(r); i++) {
        pending_read *p = read_at(r, i);
        if (p->state == READ_WAITING &&
            (p->term < rd->term || (p->term == rd->term && rd->role != KL_RAFT_LEADER)))
            read_dropped(r, p);
    }
    reads_serve(r);
}

/* Confirmations taken out of the core at once (kl_raft_take_reads) rather than with the
 * next ready, so a read whose round completed while a log write runs is served now when its
 * index is applied. Not from inside a round: the round serves them itself. */
static void reads_early(kl_repl *r)
{
    if (r->pumping || !live(r))
        return;
    kl_raft_read_state rs[16];
    size_t n;
    do {
        n = kl_raft_take_reads(r->raft, rs, sizeof rs / sizeof rs[0]);
        for (size_t i = 0; i < n && live(r); i++)
            reads_confirm(r, &rs[i]);
    } while (n == sizeof rs / sizeof rs[0] && live(r));
    reads_serve(r);
}

/* Serves, oldest first, the confirmed reads whose index is applied; stops at the first
 * read still waiting or not applied yet. */
static void reads_serve(kl_repl *r)
{
    while (r->rlen > 0 && live(r)) {
        pending_read *p = read_at(r, 0);
        if (p->state == READ_WAITING || (p->state == READ_CONFIRMED && p->index > r->applied))
            break;
        bool serve = p->state == READ_CONFIRMED;
        uint64_t ctx = p->ctx;
        r->rhead = (r->rhead + 1) % r->rcap;
        r->rlen--;
        if (serve && r->cb.read_ready != NULL)
            r->cb.read_ready(r->cb.ctx, ctx);
    }
}

/* ---------------------------------------------------------------- the round */

static bool role_changed(const kl_repl *r, kl_raft_role role, uint64_t term, uint64_t leader,
                         bool ready)
{
    return !r->reported || role != r->rep_role || term != r->rep_term ||
           leader != r->rep_leader || ready != r->rep_ready;
}

/* A leader reports its commit index as soon as it moved (cb.committed), so that callers are
 * answered before the applies that follow, which may wait for this member's own log write.
 * Cost: one status read of the core. */
static void report_commit(kl_repl *r)
{
    if (r->cb.committed == NULL || !live(r))
        return;
    kl_raft_status st;
    kl_raft_status_get(r->raft, &st);
    if (st.role != KL_RAFT_LEADER)
        return;
    if (st.term == r->commit_reported_term && st.commit <= r->commit_reported)
        return;
    r->commit_reported = st.commit;
    r->commit_reported_term = st.term;
    r->cb.committed(r->cb.ctx, st.term, st.commit);
}

static void apply_one(kl_repl *r, const kl_raft_entry *e)
{
    /* A leader's callers hear of a commit no later than its apply. */
    if (r->rep_role == KL_RAFT_LEADER && e->index > r->commit_reported)
        report_commit(r);
    assert(e->index == r->applied + 1);
    kl_raft_entry view = *e;
    if (view.type == KL_RAFT_ENTRY_CONF && !kl_confstore_applied(&r->cs, e->index, e->data, e->len)) {
        kl_err err;
        kl_fail(&err, KL_INTERNAL, "memory", "out of memory recording a configuration");
        fail(r, &err);
        return;
    }
    /* The state machine sees a configuration like a no-op: only the driver keeps it. */
    if (view.type == KL_RAFT_ENTRY_NOOP || view.type == KL_RAFT_ENTRY_CONF) {
        view.data = NULL;
        view.len = 0;
    }
    r->applied = e->index;
    r->applied_term = e->term;
    uint64_t t0 = kl_stages_now();
    if (r->cb.apply != NULL)
        r->cb.apply(r->cb.ctx, &view);
    uint64_t t1 = kl_stages_now();
    kl_stages_span(r->stages, KL_SPAN_APPLY_CALL, t0, t1);
    kl_stages_applied(r->stages, e->index, t1);
    kl_trace_mark(r->trace, e->index, e->index, KL_TP_APPLIED, t1);
    kl_trace_emit(r->trace, e->index, e->index, true);
}

/* Hands the ready's committed entries up to index `upto` to apply, in order, each index once
 * per process (an index already applied, e.g. early, is skipped). */
static void apply_committed(kl_repl *r, uint64_t upto)
{
    const kl_raft_ready *rd = r->rd;
    for (size_t i = 0; i < rd->n_committed && live(r); i++) {
        const kl_raft_entry *e = &rd->committed[i];
        if (e->index > upto)
            break;
        if (e->index <= r->applied)
            continue; /* exactly once per index: never hand out an index twice */
        apply_one(r, e);
    }
}

/* Step 3 of the round (driver.h): the ready is durable; send, apply, serve, report, advance. */
static void finish_round(kl_repl *r)
{
    const kl_raft_ready *rd = r->rd;
    r->counters.rounds++;
    for (size_t i = 0; i < rd->n_msgs && live(r) && !r->msgs_sent; i++)
        send_msg(r, &rd->msgs[i]);
    r->msgs_sent = false;
    apply_committed(r, UINT64_MAX);
    if (!live(r))
        return;
    reads_settle(r);
    if (!live(r))
        return;
    /* A leader's first entry of its term is its no-op, so an applied entry of the leader's
     * term means the no-op is committed and applied. */
    bool ready = rd->role == KL_RAFT_LEADER && r->applied_term == rd->term;
    if (role_changed(r, rd->role, rd->term, rd->leader, ready)) {
        if (!r->reported || rd->role != r->rep_role || rd->leader != r->rep_leader ||
            ready != r->rep_ready)
            KL_INFO("raft role", "member=%llu role=%s term=%llu leader=%llu serving=%d",
                    (unsigned long long)r->self, kl_raft_role_name(rd->role),
                    (unsigned long long)rd->term, (unsigned long long)rd->leader, (int)ready);
        r->reported = true;
        r->rep_role = rd->role;
        r->rep_term = rd->term;
        r->rep_leader = rd->leader;
        r->rep_ready = ready;
        if (r->cb.role != NULL)
            r->cb.role(r->cb.ctx, rd->role, rd->term, rd->leader, ready);
        if (!live(r))
            return;
    }
    if (kl_raft_advance(r->raft, rd) != KL_OK)
        fail_core(r, "advance");
    else
        note_commit(r);
}

/* The job's write completed: the stored log's CONF entries follow it (confstore.h). */
static void conf_job_done(kl_repl *r, persist_job *j)
{
    if (j->truncate_from > 0)
        kl_confstore_truncated(&r->cs, j->truncate_from);
    for (size_t i = 0; i < r->rd->n_entries; i++)
        if (r->rd->entries[i].type == KL_RAFT_ENTRY_CONF)
            kl_confstore_stored(&r->cs, r->rd->entries[i].index);
    for (size_t i = 0; i < j->n_confs; i++)
        free(j->confs[i]);
    j->n_confs = 0;
}

/* The stored record of a CONF entry (confstore.h), owned by the job until its write ends. */
static bool job_conf(persist_job *j, const kl_raft_entry *e, kl_store_log_item *it)
{
    if (j->n_confs >= KL_RAFT_MAX_CONF_HISTORY)
        return false; /* the core keeps fewer past its snapshot point: cannot happen */
    uint8_t *b = kl_confstore_record(e->term, e->index, e->data, e->len, &it->len);
    if (b == NULL)
        return false;
    j->confs[j->n_confs++] = b;
    it->bytes = b;
    return true;
}

static void persist_run(void *job)
{
    persist_job *j = job;
    kl_repl *r = j->owner;
    kl_err_clear(&j->err);
    j->t_run = kl_stages_now();
    j->rc = kl_store_log_write(r->store, j->has_hard ? &j->hard : NULL, j->truncate_from,
                               j->items, j->n_items, &j->err);
    j->t_ran = kl_stages_now();
    j->sync_ns = kl_store_last_log_sync_ns(r->store);
}

static void persist_after(void *job)
{
    persist_job *j = job;
    kl_repl *r = j->owner;
    if (r->failed)
        return;
    if (j->rc != KL_OK) {
        fail(r, &j->err);
        return;
    }
    r->counters.persists++;
    r->last_run_ns = j->t_ran - j->t_run;
    for (size_t i = 0; i < j->n_items; i++) /* metrics: what this member appended */
        r->counters.entries_appended++, r->counters.bytes_appended += j->items[i].len;
    conf_job_done(r, j);
    log_bytes_note(r, j);
    note_job(r, j, r->rd->role, KL_STAGE_PERSIST_DONE);
    uint64_t back = kl_stages_now();
    kl_stages_span(r->stages, KL_SPAN_W_HOP, j->t_queued, j->t_run);
    kl_stages_span(r->stages, KL_SPAN_W_RUN, j->t_run, j->t_ran);
    kl_stages_span(r->stages, KL_SPAN_W_BACK, j->t_ran, back);
    if (j->sync_ns > 0 && j->sync_ns < j->t_ran)
        kl_stages_span(r->stages, KL_SPAN_W_SYNC, j->t_ran - j->sync_ns, j->t_ran);
    /* The next ready is taken now, with everything that arrived while this write ran, and
     * its write starts before this round's sends and applies; the store's last index is read
     * first (that write moves it). */
    uint64_t durable = kl_store_last_index(r->store);
    if (!r->compact_due && kl_raft_has_ready(r->raft)) {
        take_next(r);
        if (!live(r))
            return;
    }
    bool chained = r->next_taken && r->next_write;
    bool here = false;
    if (chained) {
        here = write_start(r, r->cur ^ 1);
        r->counters.chained++;
    }
    r->pumping = true;
    finish_round(r);
    if (r->next_taken && live(r))
        next_round(r, chained, here ? 0 : durable);
    r->pumping = false;
    maybe_compact(r);
    pump(r);
}

/* Fills the job of slot k from its ready; false when memory ran out. */
static bool job_fill(kl_repl *r, size_t k)
{
    persist_job *j = &r->jobs[k];
    const kl_raft_ready *rd = &r->rds[k];
    j->has_hard = rd->has_hard_state;
    keyload__v1__hard_state__init(&j->hard);
    j->hard.term = rd->hard.term;
    j->hard.vote = rd->hard.vote;
    j->hard.commit = rd->hard.commit;
    j->truncate_from = rd->truncate_from;
    j->n_items = 0;
    if (rd->n_entries > j->cap_items) {
        kl_store_log_item *it = realloc(j->items, rd->n_entries * sizeof *it);
        if (it == NULL)
            return false;
        j->items = it;
        j->cap_items = rd->n_entries;
    }
    if (rd->n_entries > j->cap_noops) {
        uint8_t *nb = realloc(j->noops, rd->n_entries * NOOP_MAX);
        if (nb == NULL)
            return false;
        j->noops = nb;
        j->cap_noops = rd->n_entries;
    }
    for (size_t i = 0; i < rd->n_entries; i++) {
        const kl_raft_entry *e = &rd->entries[i];
        kl_store_log_item *it = &j->items[i];
        it->index = e->index;
        if (e->type == KL_RAFT_ENTRY_NOOP) {
            uint8_t *b = j->noops + i * NOOP_MAX;
            it->bytes = b;
            it->len = encode_noop(e->term, e->index, b);
        } else if (e->type == KL_RAFT_ENTRY_CONF) {
            if (!job_conf(j, e, it))
                return false;
        } else {
            /* Proposals and received entries were checked to be LogEntry bytes of this
             * term and index (kl_repl_propose, check_entry). */
            assert(e->len > 0);
            it->bytes = e->data;
            it->len = e->len;
        }
    }
    j->n_items = rd->n_entries;
    return true;
}

/* After an install the log is gone and the configuration is the snapshot's, as
 * kl_store_install stored it in 'M'"log_start" (raft.h "Membership" (c)). */
static bool install_conf(kl_repl *r, uint64_t index, kl_err *err)
{
    uint64_t first, prev_term;
    uint8_t *b = NULL;
    size_t n = 0;
    if (kl_store_log_start(r->store, &first, &prev_term, &b, &n, err) != KL_OK)
        return false;
    kl_confstore_truncated(&r->cs, index + 1);
    bool ok = kl_confstore_rebase(&r->cs, index, b, b != NULL ? n : 0);
    free(b);
    if (!ok)
        kl_fail(err, KL_INTERNAL, "memory", "out of memory recording a configuration");
    return ok;
}

/* A ready with has_snapshot (raft.h "Snapshots and compaction"), before anything else of
 * it: no write is in flight (pump takes a ready only then) and nothing is applied early
 * (apply_early needs a write in flight). The staged state becomes current, atomically and
 * synced, with the log replaced by the snapshot point (kl_store_install keeps term and vote
 * and sets commit); a term adopted from the sender is synced after it, still before any of
 * the ready's messages (the acknowledgement) leaves in finish_round. */
static bool install_snapshot(kl_repl *r)
{
    const kl_raft_snapshot *sn = &r->rd->snapshot;
    kl_err err;
    uint64_t t0 = kl_stages_now();
    if (r->sw == NULL) {
        kl_fail(&err, KL_INTERNAL, "raft", "snapshot install asked of a member alone");
        fail(r, &err);
        return false;
    }
    if (kl_snapwire_install(r->sw, sn, &err) != KL_OK) {
        fail(r, &err);
        return false;
    }
    const kl_raft_ready *rd = r->rd;
    if (rd->has_hard_state && (rd->hard.term != r->durable_term || rd->hard.vote != r->durable_vote)) {
        Keyload__V1__HardState h = KEYLOAD__V1__HARD_STATE__INIT;
        h.term = rd->hard.term;
        h.vote = rd->hard.vote;
        h.commit = rd->hard.commit;
        if (kl_store_log_write(r->store, &h, 0, NULL, 0, &err) != KL_OK) {
            fail(r, &err);
            return false;
        }
        r->durable_term = h.term;
        r->durable_vote = h.vote;
    }
    if (!install_conf(r, sn->index, &err)) {
        fail(r, &err);
        return false;
    }
    r->applied = sn->index;
    r->applied_term = sn->term;
    r->lb.len = 0; /* the log was replaced: bytes count from here */
    r->lb.base = r->lb.cum;
    if (r->seen_commit < sn->index)
        r->seen_commit = sn->index;
    r->counters.snapshots++;
    KL_INFO("snapshot installed", "member=%llu index=%llu term=%llu from=%llu ms=%.1f",
            (unsigned long long)r->self, (unsigned long long)sn->index, (unsigned long long)sn->term,
            (unsigned long long)rd->snapshot_from, (double)(kl_stages_now() - t0) / 1e6);
    return true;
}

static bool ids_have(const uint64_t *ids, size_t n, uint64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id)
            return true;
    return false;
}

static bool conf_has(const kl_raft_conf *c, uint64_t id)
{
    return ids_have(c->members, c->n_members, id) || ids_have(c->learners, c->n_learners, id) ||
           ids_have(c->old_members, c->n_old, id);
}

/* The members of c other than self, each once (voters of either half, learners), into out,
 * which holds 3 * KL_RAFT_MAX_MEMBERS; returns how many. */
static size_t conf_others(const kl_repl *r, const kl_raft_conf *c, uint64_t *out)
{
    const uint64_t *lists[3] = {c->members, c->learners, c->old_members};
    uint32_t counts[3] = {c->n_members, c->n_learners, c->n_old};
    size_t n = 0;
    for (int l = 0; l < 3; l++)
        for (uint32_t i = 0; i < counts[l]; i++)
            if (lists[l][i] != r->self && !ids_have(out, n, lists[l][i]))
                out[n++] = lists[l][i];
    return n;
}

/* Adds one member of the configuration in effect to the peer transport; a member whose
 * address or key no directory gave is logged and left out (it dials us if its id is
 * higher; otherwise the change that added it carried no directory entry for it). */
static void conf_peer_add(kl_repl *r, uint64_t id)
{
    const kl_confstore_member *m = kl_confstore_member_of(&r->cs, id);
    kl_err err;
    if (kl_peer_add(r->peer, id, m ? m->peer_url : NULL, m && m->has_key ? m->public_key : NULL,
                    &err) != KL_OK)
        KL_WARN("member not reachable", "member=%llu peer=%llu error=\"%s\"",
                (unsigned long long)r->self, (unsigned long long)id, err.message);
}

static void conf_peers_sync(kl_repl *r, const kl_raft_conf *c, uint64_t index, uint64_t leader);
static void peers_prune(kl_repl *r);

/* raft.h "Membership" (b): the ready's entries may name new members (their directory is
 * learnt first); on conf_changed the peer transport follows the configuration in effect:
 * it connects to every member of either half and every learner, and drops the others
 * (peer_kept says which are kept although not listed). A new leader the transport kept
 * only as the leader may make the previous one droppable. */
static void conf_peers(kl_repl *r, const kl_raft_ready *rd)
{
    for (size_t i = 0; i < rd->n_entries; i++)
        if (rd->entries[i].type == KL_RAFT_ENTRY_CONF)
            kl_confstore_learn(&r->cs, rd->entries[i].data, rd->entries[i].len);
    if (rd->conf_changed) {
        conf_peers_sync(r, &rd->conf, rd->conf_index, rd->leader);
    } else if (rd->leader != 0 && rd->leader != r->peers_leader && r->peer != NULL) {
        r->peers_leader = rd->leader;
        peers_prune(r); /* the configuration's members are all added already */
    }
}

/* The peer transport follows configuration c (see conf_peers). */
static void conf_peers_sync(kl_repl *r, const kl_raft_conf *c, uint64_t index, uint64_t leader)
{
    if (r->peer == NULL)
        return;
    KL_INFO("configuration in effect", "member=%llu index=%llu voters=%u learners=%u old=%u "
            "replica_count=%u", (unsigned long long)r->self, (unsigned long long)index,
            c->n_members, c->n_learners, c->n_old, c->replica_count);
    r->peers_conf = *c;
    if (leader != 0)
        r->peers_leader = leader;
    uint64_t ids[3 * KL_RAFT_MAX_MEMBERS];
    size_t n = conf_others(r, c, ids);
    for (size_t i = 0; i < n; i++)
        conf_peer_add(r, ids[i]);
    peers_prune(r);
}

/* Whether the transport keeps member id, known to it, under the configuration it follows.
 * Besides the members of that configuration it keeps the seed members it started with (its
 * cluster or join file: the operator's list of the members now) and the leader this member
 * follows (the last one it knew, until it follows another). The configuration in effect on a
 * member that is catching up is a historical one: it may not name the members that lead the
 * partition now, and dropping their links would leave the member without the entries that
 * name them, for ever (a new learner replaying an old configuration; a member restarted
 * after it missed the change that added the leader). Keeping a link promises nothing: the
 * core decides what a message from a non-member means. */
static bool peer_kept(const kl_repl *r, uint64_t id)
{
    return conf_has(&r->peers_conf, id) || id == r->peers_leader ||
           ids_have(r->seed_peers, r->n_seed_peers, id);
}

/* Drops every member the transport knows that peer_kept refuses, and records what it knows
 * now: the kept ones and the members of the configuration it follows. */
static void peers_prune(kl_repl *r)
{
    uint64_t known[sizeof r->known_peers / sizeof r->known_peers[0]];
    size_t n = conf_others(r, &r->peers_conf, known), extra = 0;
    for (size_t i = 0; i < r->n_known_peers; i++) {
        uint64_t id = r->known_peers[i];
        if (!peer_kept(r, id)) {
            (void)kl_peer_remove(r->peer, id);
        } else if (!ids_have(known, n, id)) {
            assert(n < sizeof known / sizeof known[0]);
            known[n++] = id;
            extra++;
        }
    }
    /* invariant: a configuration names at most KL_RAFT_MAX_MEMBERS distinct members
       (kl_raft_conf_check), and beside them only the leader and the seed members stay */
    assert(extra <= KL_RAFT_MAX_MEMBERS + 1);
    memcpy(r->known_peers, known, n * sizeof known[0]);
    r->n_known_peers = n;
}

/* True when the ready's only durable change is the commit index. */
static bool commit_only(const kl_repl *r, const kl_raft_ready *rd)
{
    return rd->has_hard_state && rd->truncate_from == 0 && rd->n_entries == 0 &&
           rd->hard.term == r->durable_term && rd->hard.vote == r->durable_vote;
}

/* Hands the write of slot k to the log writer (log_writer.h). The two slots' writes never
 * overlap: the next one starts only when the running one has completed (persist_after), so
 * they reach the disk in the order their readies were taken (raft.h "Pipelined readies").
 *
 * A leader's write runs on the writer thread: its loop meanwhile answers clients, applies
 * and counts acknowledgements, and its own copy is rarely the one a commit waits for. A
 * follower's (or candidate's) write runs on the loop itself: its acknowledgement is what
 * the leader waits for, and the loop has nothing to do meanwhile that should overtake it,
 * so the two thread hand-offs (a wake-up each, 20-30 us on an idle CPU of a virtual
 * machine) would only delay it. Nothing is applied before such a write (true is returned,
 * and pump and next_round skip their early applies): the round applies after it, as it
 * would have applied the entries this write holds. Only while the disk answers quickly:
 * once a write ran longer than WRITE_HERE_MAX_NS the next one goes to the thread, so a
 * stalling disk blocks the loop (heartbeats, reads, snapshot streams) for one write, not
 * for every one; the first write that is quick again brings it back. Returns whether the
 * write runs on the loop. */
static bool write_start(kl_repl *r, size_t k)
{
    persist_job *j = &r->jobs[k];
    assert(!persist_busy(r));
    j->owner = r;
    j->t_queued = kl_stages_now();
    note_job(r, j, r->rds[k].role, KL_STAGE_PERSIST_START); /* before the writer may read j */
    if (r->rds[k].role != KL_RAFT_LEADER && r->last_run_ns <= WRITE_HERE_MAX_NS) {
        kl_log_writer_submit_here(r->writer, j);
        r->counters.on_loop++;
        return true;
    }
    kl_log_writer_submit(r->writer, j);
    return false;
}

/* When the oldest round's write has completed, before its sends and applies: takes the next
 * ready (everything that arrived while that write ran) and prepares its write, which
 * persist_after starts at once. Nothing of it leaves or is applied before its own write
 * completed: its messages may promise what that write makes durable, its committed entries
 * may lie in it, and a term or vote it carries is durable only then. The core never hands
 * out an install while a ready is outstanding. */
static void take_next(kl_repl *r)
{
    size_t k = r->cur ^ 1;
    kl_raft_ready *rd = &r->rds[k];
    kl_code rc = kl_raft_get_ready(r->raft, rd);
    if (rc == KL_UNAVAILABLE)
        return; /* out of memory for the ready; the next pump tries again */
    if (rc != KL_OK) {
        fail_core(r, "get_ready");
        return;
    }
    /* invariant I-SNAP-3: an install is handed out only with no ready outstanding */
    assert(!rd->has_snapshot);
    r->next_taken = true;
    conf_peers(r, rd);
    for (size_t i = 0; i < rd->n_reads && live(r); i++)
        reads_confirm(r, &rd->reads[i]);
    r->next_write = !commit_only(r, rd) &&
                    (rd->has_hard_state || rd->truncate_from != 0 || rd->n_entries > 0);
    if (!r->next_write)
        return;
    if (rd->has_hard_state) {
        r->durable_term = rd->hard.term;
        r->durable_vote = rd->hard.vote;
    }
    if (!job_fill(r, k)) {
        kl_err err;
        kl_fail(&err, KL_INTERNAL, "memory", "out of memory preparing a log write");
        fail(r, &err);
    }
}

/* The next round becomes the oldest once the oldest one finished (persist_after). `durable`
 * is the store's last index read before its write started, or 0 when nothing may be applied
 * before that write (one that runs on the loop: write_start). */
static void next_round(kl_repl *r, bool writing, uint64_t durable)
{
    r->cur ^= 1;
    r->rd = &r->rds[r->cur];
    r->job = &r->jobs[r->cur];
    r->next_taken = false;
    if (writing) {
        /* As pump does when it starts a write: what an earlier write made durable is
         * applied while this one runs (never past an index it cuts). */
        if (r->rd->truncate_from != 0 && r->rd->truncate_from - 1 < durable)
            durable = r->rd->truncate_from - 1;
        apply_committed(r, durable);
        return;
    }
    finish_round(r); /* a commit-only ready writes nothing (see pump) */
}

static void pump(kl_repl *r)
{
    if (r->pumping)
        return; /* the running round loops back here when it is done */
    r->pumping = true;
    while (live(r) && !persist_busy(r) && kl_raft_has_ready(r->raft)) {
        kl_code rc = kl_raft_get_ready(r->raft, r->rd);
        if (rc == KL_UNAVAILABLE)
            break; /* out of memory for the ready; the next tick tries again */
        if (rc != KL_OK) {
            fail_core(r, "get_ready");
            break;
        }
        if (r->rd->has_snapshot && !install_snapshot(r))
            break; /* failed: never advance past an install that did not happen */
        conf_peers(r, r->rd);
        /* Confirmations count from now, before any taken later by reads_early. */
        for (size_t i = 0; i < r->rd->n_reads && live(r); i++)
            reads_confirm(r, &r->rd->reads[i]);
        if (!live(r))
            break;
        if (commit_only(r, r->rd)) {
            /* Only the commit index moved: nothing is written. Raft never needs the commit
             * index durable; the next synced write carries it in its hard state, and a
             * restart takes max(stored commit, applied index) (kl_raft_new), since only
             * committed entries are ever applied. A write here would put a RocksDB write
             * on the loop between learning a commit and applying it. */
            finish_round(r);
            continue;
        }
        if (r->rd->has_hard_state || r->rd->truncate_from != 0 || r->rd->n_entries > 0) {
            /* Committed entries already in this member's durable log are applied (and their
             * callers answered) while this round's write runs, not after its fsync: they
             * are durable on a commit quorum, and waiting would make every reply under load
             * cost two fsyncs. Entries this very write makes durable (a follower's) wait for
             * it. The bound is taken before the write starts (the store's last index moves
             * when it completes), and the write starts first: its fsync does not hold the
             * applies up (kl_store_log_write syncs outside RocksDB's write queue), while an
             * apply before it would delay every follower's acknowledgement.
             * An index this write truncates is not "already durable": the stored entry
             * there is the one being replaced, and applying its successor first would
             * leave applied state ahead of the log the write then refuses to cut. */
            uint64_t durable = kl_store_last_index(r->store);
            if (r->rd->truncate_from != 0 && r->rd->truncate_from - 1 < durable)
                durable = r->rd->truncate_from - 1;
            /* A leader's messages (appends, heartbeats) promise nothing about its own
             * disk: they go out now, so followers persist while the leader does (Raft
             * thesis §10.2.1). Its own copy counts toward a commit only once this write
             * is reported (kl_raft_advance). Votes and acknowledgements, which do promise
             * durability, still wait for the write; so does anything from a round that
             * changes term or vote. They leave before the write is handed over: the
             * hand-off (a thread wake-up) put about 10 us before every append, on the
             * path of every commit, while the leader's own copy is rarely the one a
             * commit waits for. */
            bool early = r->rd->role == KL_RAFT_LEADER &&
                         (!r->rd->has_hard_state ||
                          (r->rd->hard.term == r->durable_term && r->rd->hard.vote == r->durable_vote));
            if (r->rd->has_hard_state) {
                /* A ready without a hard state carries none (its fields are zero): the
                 * durable term and vote stay what the last write synced, or every later
                 * commit-only ready would look like a term change and cost an fsync. */
                r->durable_term = r->rd->hard.term;
                r->durable_vote = r->rd->hard.vote;
            }
            if (!job_fill(r, r->cur)) {
                kl_err err;
                kl_fail(&err, KL_INTERNAL, "memory", "out of memory preparing a log write");
                fail(r, &err);
                break;
            }
            if (early) {
                for (size_t i = 0; i < r->rd->n_msgs && live(r); i++)
                    send_msg(r, &r->rd->msgs[i]);
                r->msgs_sent = true;
            }
            bool here = write_start(r, r->cur);
            if (!here)
                apply_committed(r, durable);
            break;
        }
        finish_round(r);
    }
    r->pumping = false;
}

/* Heartbeats and their answers leave now, not with the next ready (kl_raft_take_urgent):
 * a read-index round and its acknowledgements are never queued behind a log write that runs
 * on the log writer, nor behind the write of the ready they would otherwise ride in. */
static void send_urgent(kl_repl *r)
{
    kl_raft_msg m[2 * KL_RAFT_MAX_MEMBERS];
    size_t n;
    r->reads_unsent = false;
    do {
        n = kl_raft_take_urgent(r->raft, m, sizeof m / sizeof m[0]);
        for (size_t i = 0; i < n && live(r); i++)
            send_msg(r, &m[i]);
    } while (n == sizeof m / sizeof m[0] && live(r));
}

/* While a log write runs, entries that committed meanwhile and that an earlier write already
 * made durable here are applied now (kl_raft_take_committed), and their callers answered,
 * instead of after the unrelated write. Never inside a round, and only once every committed
 * entry of the outstanding ready was applied (the rest of them belong to the running write,
 * and nothing may be applied past them). */
static void apply_early(kl_repl *r)
{
    if (r->pumping || !live(r) || !persist_busy(r))
        return;
    const kl_raft_ready *rd = r->rd;
    if (rd->n_committed > 0 && rd->committed[rd->n_committed - 1].index > r->applied)
        return;
    const kl_raft_ready *nx = &r->rds[r->cur ^ 1];
    if (r->next_taken && nx->n_committed > 0 && nx->committed[nx->n_committed - 1].index > r->applied)
        return; /* the next round's committed entries come first (raft.h take_committed) */
    r->pumping = true;
    const kl_raft_entry *e;
    size_t n;
    while (live(r) && (n = kl_raft_take_committed(r->raft, &e)) > 0) {
        for (size_t i = 0; i < n && live(r); i++) {
            apply_one(r, &e[i]);
            r->counters.early_applies++;
        }
    }
    r->pumping = false;
    reads_serve(r);
}

/* Once per loop iteration, after the poll phase: everything that arrived in this iteration
 * (proposals, acknowledgements) is turned into at most one append per follower and into
 * applies, while a write may still run. */
static void on_flush(uv_check_t *h)
{
    kl_repl *r = h->data;
    if (!live(r))
        return;
    send_urgent(r);
    pump(r);
    /* After the sends and the next write started: answering costs the loop time (sealing,
     * socket writes) that the replication pipeline should not wait for. */
    report_commit(r);
    apply_early(r);
    pump(r);
}

/* A read queued by a callback that ran after this iteration's on_flush (or before the poll,
 * in a timer or prepare callback) would otherwise wait for the poll, which may block until
 * the next tick: its round leaves here, just before the loop polls. */
static void on_reads_out(uv_prepare_t *h)
{
    kl_repl *r = h->data;
    if (!live(r) || !r->reads_unsent)
        return;
    send_urgent(r);
    pump(r);
}

/* ---------------------------------------------------------------- receiving */

/* A received entry must be what this member would store: a no-op without data, or a normal
 * entry whose bytes are a LogEntry of the same term and index (so that the log reads back
 * the terms the core agreed to, and the apply sees the index it expects). */
static bool check_entry(const Keyload__V1__RaftEntry *e)
{
    if (e == NULL || e->term == 0 || e->index == 0)
        return false;
    if (e->type == KL_RAFT_ENTRY_NOOP)
        return e->data.len == 0;
    if (e->type == KL_RAFT_ENTRY_CONF) /* a configuration and its member directory */
        return kl_confstore_blob_ok(e->data.data, e->data.len, NULL);
    if (e->type != KL_RAFT_ENTRY_NORMAL || e->data.len == 0)
        return false;
    uint64_t term, index;
    uint32_t type;
    return log_header(e->data.data, e->data.len, false, &term, &index, &type) &&
           term == e->term && index == e->index && type == KL_RAFT_ENTRY_NORMAL;
}

static void after_recv(kl_repl *r);

/* Drops the received frame's decode (everything in recv_arena). */
static void recv_drop(kl_repl *r)
{
    assert(r->recv_live);
    r->recv_live = false;
    kl_pb_arena_reset(&r->recv_arena);
}

/* A snapshot stream frame (snapwire.h): checked like any frame (from the hello's member, to
 * us, no unknown field, no entries), then handed to the streams; a staged snapshot it
 * completes is stepped into the core from there. */
static void on_recv_snapshot(kl_repl *r, uint64_t from, Keyload__V1__RaftMessage *pm, char *path,
                             size_t cap)
{
    bool ok = r->sw != NULL && !kl_proto_has_unknown(&pm->base, path, cap) && pm->from == from &&
              pm->to == r->self && pm->n_entries == 0;
    if (!ok)
        r->counters.refused++;
    /* A staged snapshot's install ready comes after the running write: hold new streams off
     * until then (the sender resyncs). */
    if (!ok || (pm->type == KL_SNAPWIRE_MSG_DATA && kl_snapwire_install_waiting(r->sw) && persist_busy(r))) {
        recv_drop(r);
        return;
    }
    kl_snapwire_recv(r->sw, from, pm, uv_now(r->loop));
    recv_drop(r);
    if (live(r))
        after_recv(r);
}

static void on_recv(void *owner, uint64_t from, const uint8_t *frame, size_t len)
{
    kl_repl *r = owner;
    if (!live(r))
        return;
    /* A frame is never delivered from inside a call made while one is decoded here. */
    assert(!r->recv_live);
    r->recv_live = true;
    Keyload__V1__RaftMessage *pm =
        keyload__v1__raft_message__unpack(kl_pb_arena_allocator(&r->recv_arena), len, frame);
    char path[64];
    if (pm != NULL && (pm->type == KL_SNAPWIRE_MSG_DATA || pm->type == KL_SNAPWIRE_MSG_ANSWER)) {
        on_recv_snapshot(r, from, pm, path, sizeof path);
        return;
    }
    bool ok = pm != NULL && !kl_proto_has_unknown(&pm->base, path, sizeof path) &&
              pm->from == from && pm->to == r->self && pm->type < KL_RAFT_MSG_TYPE_COUNT &&
              pm->type != KL_RAFT_MSG_SNAPSHOT && /* only a staged stream steps one in */
              pm->n_entries <= KL_RAFT_MAX_MSG_ENTRIES;
    for (size_t i = 0; ok && i < pm->n_entries; i++)
        ok = check_entry(pm->entries[i]);
    if (!ok) {
        r->counters.refused++;
        recv_drop(r);
        return;
    }
    kl_raft_msg m = {
        .type = (uint8_t)pm->type, .reject = pm->reject, .from = pm->from, .to = pm->to,
        .term = pm->term, .index = pm->index, .log_term = pm->log_term, .commit = pm->commit,
        .reject_hint = pm->reject_hint, .ctx = pm->ctx,
        .entries = pm->n_entries ? r->in_ents : NULL, .n_entries = pm->n_entries,
    };
    for (size_t i = 0; i < pm->n_entries; i++) {
        const Keyload__V1__RaftEntry *e = pm->entries[i];
        r->in_ents[i] = (kl_raft_entry){.term = e->term, .index = e->index,
                                        .type = (uint8_t)e->type,
                                        .data = e->data.len ? e->data.data : NULL,
                                        .len = e->data.len};
    }
    uint64_t read_ns = kl_peer_delivering_read_ns(r->peer);
    if (m.type == KL_RAFT_MSG_APPEND && m.n_entries > 0) {
        uint64_t now = kl_stages_now(), lo = m.entries[0].index, hi = m.entries[m.n_entries - 1].index;
        for (size_t i = 0; i < m.n_entries; i++)
            kl_stages_mark(r->stages, m.entries[i].index, KL_STAGE_PROPOSE, now);
        kl_trace_begin(r->trace, lo, hi, false, KL_TP_READ, read_ns ? read_ns : now);
        kl_trace_mark(r->trace, lo, hi, KL_TP_STEP, now);
    }
    kl_code rc = kl_raft_step(r->raft, &m);
    if (rc == KL_OK && m.type == KL_RAFT_MSG_APPEND_RESP && !m.reject) {
        /* An acknowledgement is cumulative: it covers every index up to m.index. */
        uint64_t now = kl_stages_now();
        kl_trace_peer_mark(r->trace, 1, m.index, m.from, KL_TPP_ACK_READ, read_ns ? read_ns : now);
        kl_trace_peer_mark(r->trace, 1, m.index, m.from, KL_TPP_ACK_STEP, now);
    }
    recv_drop(r);
    if (rc == KL_INVALID_ARGUMENT) {
        r->counters.refused++;
        return;
    }
    if (rc != KL_OK) {
        fail_core(r, "step");
        return;
    }
    after_recv(r);
}

/* What every accepted frame is followed by. */
static void after_recv(kl_repl *r)
{
    note_commit(r);
    send_urgent(r);
    pump(r); /* a received append's write starts before anything is applied */
    apply_early(r);
    reads_early(r);
    pump(r);
}

/* ---------------------------------------------------------------- snapshots and compaction */

static bool sw_send(void *ctx, uint64_t to, const Keyload__V1__RaftMessage *pm)
{
    kl_repl *r = ctx;
    size_t n = keyload__v1__raft_message__get_packed_size(pm);
    if (r->peer == NULL || n > r->max_frame || !frame_reserve(r, n)) {
        r->counters.send_drops++;
        return false;
    }
    keyload__v1__raft_message__pack(pm, r->frame);
    if (kl_peer_send(r->peer, to, r->frame, n) != KL_OK) {
        r->counters.send_drops++;
        return false;
    }
    return true;
}

static void sw_report(void *ctx, uint64_t to, bool ok)
{
    kl_repl *r = ctx;
    if (ok)
        r->counters.snapshots++; /* taken and delivered */
    if (kl_raft_report_snapshot(r->raft, to, ok) == KL_INTERNAL)
        fail_core(r, "report_snapshot");
}

/* A stream reads the applied state: it carries the configuration as of the applied index
 * (raft.h "Snapshots and compaction": a later index than the core asked for carries the
 * latest CONF entry at or below it). */
static bool sw_config(void *ctx, uint64_t index, const uint8_t **blob, size_t *len)
{
    kl_repl *r = ctx;
    if (index < r->cs.base.index)
        return false; /* compacted past the reader's pin meanwhile: history below is gone */
    kl_confstore_at(&r->cs, index, blob, len);
    return true;
}

static bool sw_step(void *ctx, const kl_raft_msg *m)
{
    kl_repl *r = ctx;
    kl_code rc = kl_raft_step(r->raft, m);
    if (rc == KL_INVALID_ARGUMENT)
        r->counters.refused++;
    else if (rc != KL_OK)
        fail_core(r, "step");
    return rc == KL_OK;
}

/* The compaction's jobs on libuv's thread pool (the flush, the file drop): one of each at a
 * time, each with a busy flag the stop waits for (maybe_free). Queues one; a refusal is a
 * storage failure. `what` names the job in the error. */
static bool pool_job_start(kl_repl *r, uv_work_t *work, bool *busy, uv_work_cb run, uv_after_work_cb after,
                           const char *detail, const char *what)
{
    work->data = r;
    int urc = uv_queue_work(r->loop, work, run, after);
    if (urc != 0) {
        kl_err err;
        kl_fail(&err, KL_INTERNAL, detail, "cannot queue %s: %s", what, uv_strerror(urc));
        fail(r, &err);
        return false;
    }
    *busy = true;
    return true;
}

/* A pool job's end on the loop: true when it succeeded and the member goes on; otherwise
 * the driver is stopping (freed here once nothing else is pending) or has failed, or the
 * job's failure (or cancellation) fails it now. */
static bool pool_job_ended(kl_repl *r, bool *busy, int status, kl_code *rc, kl_err *err, const char *detail,
                           const char *what)
{
    *busy = false;
    if (r->stopped) {
        maybe_free(r);
        return false;
    }
    if (r->failed)
        return false;
    if (status != 0)
        *rc = kl_fail(err, KL_INTERNAL, detail, "%s was cancelled", what);
    if (*rc != KL_OK) {
        fail(r, err);
        return false;
    }
    return true;
}

/* The compaction's flush, on the thread pool (maybe_compact). */
static void cflush_run(uv_work_t *w)
{
    kl_repl *r = w->data;
    kl_err_clear(&r->cflush.err);
    (void)KL_FAILPOINT("repl.compact_flush", &r->cflush.err);
    uint64_t t0 = kl_stages_now();
    r->cflush.rc = kl_store_flush(r->store, &r->cflush.err);
    r->cflush.flush_ns = kl_stages_now() - t0;
}

static void cflush_after(uv_work_t *w, int status)
{
    kl_repl *r = w->data;
    if (!pool_job_ended(r, &r->cflush.busy, status, &r->cflush.rc, &r->cflush.err, "flush",
                        "the compaction flush"))
        return;
    /* An install while the flush ran made its own, higher, index durable (a snapshot is
     * installed only past the commit index): noting the older one then changes nothing. */
    kl_store_note_durable(r->store, r->cflush.applied);
    r->cflush.wait_ns = kl_stages_now() - r->cflush.t0;
    r->cflush.fresh = true;
    maybe_compact(r);
}

/* Starts the flush that makes the applied state durable, off the loop: applies go on
 * meanwhile (the flush covers every write made before it starts, and only the index read
 * now, before it starts, is noted durable when it ends). */
static void cflush_start(kl_repl *r, uint64_t applied)
{
    r->cflush.applied = applied;
    r->cflush.t0 = kl_stages_now();
    if (!pool_job_start(r, &r->cflush.work, &r->cflush.busy, cflush_run, cflush_after, "flush",
                        "the compaction flush"))
        return;
    KL_INFO("compaction flush started", "member=%llu applied=%llu", (unsigned long long)r->self,
            (unsigned long long)applied);
}

static void cdrop_run(uv_work_t *w)
{
    kl_repl *r = w->data;
    kl_err_clear(&r->cdrop.err);
    uint64_t t0 = kl_stages_now();
    r->cdrop.rc = kl_store_drop_compacted_log(r->store, &r->cdrop.err);
    r->cdrop.ns = kl_stages_now() - t0;
}

static void cdrop_start(kl_repl *r);

static void cdrop_after(uv_work_t *w, int status)
{
    kl_repl *r = w->data;
    if (!pool_job_ended(r, &r->cdrop.busy, status, &r->cdrop.rc, &r->cdrop.err, "log",
                        "the compacted log's file drop"))
        return;
    if (r->cdrop.again) {
        r->cdrop.again = false;
        cdrop_start(r);
    }
}

/* Frees the disk of the log just compacted, off the loop: the drop syncs RocksDB's
 * MANIFEST, about 10 ms that the loop spent stalled when it ran there. One at a time; a
 * compaction meanwhile asks for one more, which covers both. */
static void cdrop_start(kl_repl *r)
{
    if (r->cdrop.busy) {
        r->cdrop.again = true;
        return;
    }
    (void)pool_job_start(r, &r->cdrop.work, &r->cdrop.busy, cdrop_run, cdrop_after, "log",
                         "the compacted log's file drop");
}

static lb_sample *lb_at(kl_repl *r, size_t k) { return &r->lb.s[(r->lb.head + k) % LB_N]; }

/* After a synced write: the samples its truncation replaced go (a sample straddling the cut
 * goes whole: the count errs by at most one sample), its entries are counted, extending the
 * last sample while it holds less than KL_SNAP_LOG_SAMPLE_BYTES; the oldest falls out of
 * a full ring (into base). */
static void log_bytes_note(kl_repl *r, const persist_job *j)
{
    if (j->truncate_from != 0) {
        while (r->lb.len > 0 && lb_at(r, r->lb.len - 1)->index >= j->truncate_from)
            r->lb.len--;
        r->lb.cum = r->lb.len ? lb_at(r, r->lb.len - 1)->cum : r->lb.base;
    }
    for (size_t i = 0; i < j->n_items; i++) {
        r->lb.cum += j->items[i].len;
        uint64_t prev = r->lb.len > 1 ? lb_at(r, r->lb.len - 2)->cum : r->lb.base;
        if (r->lb.len > 0 && lb_at(r, r->lb.len - 1)->cum - prev < KL_SNAP_LOG_SAMPLE_BYTES) {
            *lb_at(r, r->lb.len - 1) = (lb_sample){j->items[i].index, r->lb.cum};
            continue;
        }
        if (r->lb.len == LB_N) {
            r->lb.base = lb_at(r, 0)->cum;
            r->lb.head = (r->lb.head + 1) % LB_N;
            r->lb.len--;
        }
        *lb_at(r, r->lb.len++) = (lb_sample){j->items[i].index, r->lb.cum};
    }
}

/* Bytes logged through entry x, as far as the samples tell (base below the oldest). */
static uint64_t lb_through(kl_repl *r, uint64_t x)
{
    size_t lo = 0, hi = r->lb.len; /* the number of samples with index <= x */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (lb_at(r, mid)->index <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo ? lb_at(r, lo - 1)->cum : r->lb.base;
}

/* The lowest sampled index i <= durable whose later entries through durable hold at most
 * KL_SNAP_TRAILING_BYTES: the compaction point the byte window asks for (0: none). */
static uint64_t log_bytes_point(kl_repl *r, uint64_t durable)
{
    uint64_t end = lb_through(r, durable);
    if (end - r->lb.base <= KL_SNAP_TRAILING_BYTES)
        return 0;
    uint64_t want = end - KL_SNAP_TRAILING_BYTES;
    size_t lo = 0, hi = r->lb.len; /* the first sample with cum >= want */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (lb_at(r, mid)->cum < want)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < r->lb.len && lb_at(r, lo)->index <= durable ? lb_at(r, lo)->index : 0;
}

/* Where a compaction with this durable index may cut: the trailing count and the trailing
 * bytes both respected (the higher point), never past durable. */
static uint64_t compact_point(kl_repl *r, uint64_t durable)
{
    uint64_t upto = durable > r->snap_trailing ? durable - r->snap_trailing : 0;
    uint64_t by_bytes = log_bytes_point(r, durable);
    return by_bytes > upto ? by_bytes : upto;
}

/* Log compaction (driver.h "Compaction"; ARCHITECTURE.md "Snapshots and log compaction"):
 * once the log holds more than snap_threshold applied entries or KL_SNAP_LOG_BYTES since
 * the snapshot point, drop every entry up to the durable applied index minus the trailing
 * window (snap_trailing entries, at most KL_SNAP_TRAILING_BYTES), telling the core first
 * (raft.h). Applies skip the WAL, so the applied state is made durable first (a crash must
 * not roll it back below the first kept entry), by a flush on the thread pool
 * (cflush_start): the loop never waits for it. A durable index far enough along (the
 * compaction brings the log under both thresholds), or the first chance after a flush, is
 * compacted at once; otherwise a flush starts and its completion calls here again. The
 * compaction itself only with no ready outstanding (the core may free entries a ready's
 * messages still point to): one small synced write on the loop, logged as stall_ms.
 * The core keeps at most KL_RAFT_MAX_CONF_HISTORY configuration entries past the snapshot
 * point and refuses changes beyond them; a membership change takes up to three. So once
 * half of them are used, the log is compacted up to the durable applied index whatever the
 * thresholds and the trailing window say: otherwise a partition whose writes stopped (a dead
 * member at N-of-N) could never compact, and its replacement would wait for ever. */
static void maybe_compact(kl_repl *r)
{
    r->compact_due = false;
    if (!live(r) || r->cflush.busy)
        return;
    kl_raft_status st;
    kl_raft_status_get(r->raft, &st);
    bool conf_pressure = st.conf_entries >= KL_RAFT_MAX_CONF_HISTORY / 2;
    if (!conf_pressure && st.applied - st.snap_index <= r->snap_threshold &&
        r->lb.cum - lb_through(r, st.snap_index) <= KL_SNAP_LOG_BYTES)
        return;
    uint64_t durable = kl_store_durable_applied(r->store);
    if (durable > st.applied)
        durable = st.applied; /* applied state as the core knows it */
    uint64_t upto = conf_pressure ? durable : compact_point(r, durable);
    bool enough = conf_pressure ? upto > st.snap_index && upto == st.applied
                                : upto > st.snap_index && st.applied - upto <= r->snap_threshold &&
                                      r->lb.cum - lb_through(r, upto) <= KL_SNAP_LOG_BYTES;
    if (!enough && !r->cflush.fresh && kl_store_applied_index(r->store) > kl_store_durable_applied(r->store)) {
        cflush_start(r, kl_store_applied_index(r->store));
        return;
    }
    if (upto <= st.snap_index) {
        r->cflush.fresh = false; /* nothing to cut even so: the next call may flush again */
        return;
    }
    if (persist_busy(r) || r->pumping || r->next_taken) {
        /* persist_after calls again; take_next holds the next ready back meanwhile, or
         * chained writes under steady load would never leave a round without one. */
        r->compact_due = true;
        return;
    }
    uint64_t t0 = kl_stages_now();
    kl_err err;
    if (kl_raft_compact(r->raft, upto) != KL_OK) {
        fail_core(r, "compact");
        return;
    }
    const uint8_t *blob;
    size_t blen;
    kl_confstore_at(&r->cs, upto, &blob, &blen); /* raft.h "Membership" (c) */
    if (kl_store_compact_log(r->store, upto + 1, blob, blen, &err) != KL_OK ||
        !kl_confstore_rebase(&r->cs, upto, blob, blen)) {
        fail(r, &err);
        return;
    }
    r->cflush.fresh = false;
    r->counters.compactions++;
    (void)KL_FAILPOINT("repl.after_compact", &err);
    KL_INFO("log compacted", "member=%llu upto=%llu applied=%llu durable=%llu log_bytes_kept=%llu flush_ms=%.2f "
            "wait_ms=%.2f stall_ms=%.2f last_drop_ms=%.2f", (unsigned long long)r->self, (unsigned long long)upto,
            (unsigned long long)st.applied, (unsigned long long)durable,
            (unsigned long long)(r->lb.cum - lb_through(r, upto)), (double)r->cflush.flush_ns / 1e6,
            (double)r->cflush.wait_ns / 1e6, (double)(kl_stages_now() - t0) / 1e6, (double)r->cdrop.ns / 1e6);
    cdrop_start(r);
}

static void on_tick(uv_timer_t *t)
{
    kl_repl *r = t->data;
    if (!live(r))
        return;
    if (kl_raft_tick(r->raft) != KL_OK) {
        fail_core(r, "tick");
        return;
    }
    if (++r->report_ticks >= STAGES_REPORT_TICKS) {
        r->report_ticks = 0;
        kl_stages_report(r->stages, r->self, false);
    }
    send_urgent(r);
    pump(r);
    if (r->sw != NULL && live(r)) {
        kl_raft_status st;
        kl_raft_status_get(r->raft, &st);
        kl_snapwire_tick(r->sw, st.role == KL_RAFT_LEADER, uv_now(r->loop));
        if (!persist_busy(r) && !r->pumping)
            kl_snapwire_settle(r->sw);
    }
    maybe_compact(r);
}

/* ---------------------------------------------------------------- public API */

static uint32_t or_default(uint32_t v, uint32_t d) { return v ? v : d; }

static kl_code check_config(const kl_repl_config *c, size_t *self_slot, kl_err *err)
{
    if (c->cluster == NULL || c->cluster[0] == '\0' || strlen(c->cluster) > KL_PEER_MAX_CLUSTER)
        return kl_fail(err, KL_INVALID_ARGUMENT, "cluster", "cluster name must be 1..%d bytes",
                       KL_PEER_MAX_CLUSTER);
    if (c->n_members < 1 || c->n_members > KL_RAFT_MAX_MEMBERS)
        return kl_fail(err, KL_INVALID_ARGUMENT, "n_members", "n_members %zu outside 1..%d",
                       c->n_members, KL_RAFT_MAX_MEMBERS);
    bool found = false;
    for (size_t i = 0; i < c->n_members; i++) {
        if (c->members[i] == c->self) {
            found = true;
            *self_slot = i;
        }
        if ((c->n_members > 1 || c->join) && (c->peer_urls[i] == NULL || c->peer_urls[i][0] == '\0'))
            return kl_fail(err, KL_INVALID_ARGUMENT, "peer_urls", "member %llu has no peer URL",
                           (unsigned long long)c->members[i]);
    }
    if (c->join && (found || c->join_peer_url == NULL || c->join_peer_url[0] == '\0'))
        return kl_fail(err, KL_INVALID_ARGUMENT, found ? "self" : "join_peer_url",
                       found ? "a joining member %llu must not be one of the seed members"
                             : "a joining member %llu needs its own peer URL",
                       (unsigned long long)c->self);
    if (c->self == 0 || (!found && !c->join))
        return kl_fail(err, KL_INVALID_ARGUMENT, "self", "member %llu is not in members",
                       (unsigned long long)c->self);
    if (c->join)
        *self_slot = SIZE_MAX;
    uint32_t tick = or_default(c->tick_ms, KL_REPL_DEFAULT_TICK_MS);
    uint32_t election = or_default(c->election_ms, KL_REPL_DEFAULT_ELECTION_MS);
    uint32_t heartbeat = or_default(c->heartbeat_ms, KL_REPL_DEFAULT_HEARTBEAT_MS);
    if (election / tick < 2)
        return kl_fail(err, KL_INVALID_ARGUMENT, "election_ms",
                       "election_ms %u must be at least two ticks of %u ms", election, tick);
    if (heartbeat / tick < 1 || heartbeat / tick >= election / tick)
        return kl_fail(err, KL_INVALID_ARGUMENT, "heartbeat_ms",
                       "heartbeat_ms %u must be at least one tick (%u ms) and below election_ms %u",
                       heartbeat, tick, election);
    if (c->snapshot_threshold != 0 &&
        (c->snapshot_threshold < KL_SNAP_THRESHOLD_MIN || c->snapshot_trailing >= c->snapshot_threshold))
        return kl_fail(err, KL_INVALID_ARGUMENT, "snapshot_threshold",
                       "snapshot threshold %u must be at least %u and above the trailing %u",
                       c->snapshot_threshold, KL_SNAP_THRESHOLD_MIN, c->snapshot_trailing);
    if (c->trace_every > KL_TRACE_EVERY_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "repl_trace", "trace_every %u is over %u log indexes",
                       c->trace_every, KL_TRACE_EVERY_MAX);
    size_t frame = c->max_frame ? c->max_frame : KL_PEER_DEFAULT_MAX_FRAME;
    if (frame < 4 * FRAME_SLACK)
        return kl_fail(err, KL_INVALID_ARGUMENT, "max_frame", "max_frame %zu below %d bytes",
                       frame, 4 * FRAME_SLACK);
    return KL_OK;
}

/* One log line per finished trace record (trace.h): the stamps, in microseconds of
 * CLOCK_MONOTONIC, named as tests/bench/repl_trace.sh reads them; per peer columns are
 * suffixed with the peer's member id. */
static void trace_report(void *ctx, const kl_trace_record *rec)
{
    static const char *const names[KL_TP_COUNT] = {"propose", "read", "step", "w_start",
                                                   "w_done", "ack_sent", "commit", "applied"};
    static const char *const peer_names[KL_TPP_COUNT] = {"sent", "ack_read", "ack_step"};
    const kl_repl *r = ctx;
    char buf[1024];
    size_t n = 0;
    for (int i = 0; i < KL_TP_COUNT && n < sizeof buf; i++)
        if (rec->t[i] != 0)
            n += (size_t)snprintf(buf + n, sizeof buf - n, " %s=%llu", names[i], (unsigned long long)rec->t[i]);
    for (int c = 0; c < KL_TRACE_MAX_PEERS && rec->peer[c] != 0; c++)
        for (int i = 0; i < KL_TPP_COUNT && n < sizeof buf; i++)
            if (rec->p[c][i] != 0)
                n += (size_t)snprintf(buf + n, sizeof buf - n, " %s_%llu=%llu", peer_names[i],
                                      (unsigned long long)rec->peer[c], (unsigned long long)rec->p[c][i]);
    KL_INFO("repl trace", "member=%llu role=%s index=%llu%s", (unsigned long long)r->self,
            rec->leader ? "leader" : "follower", (unsigned long long)rec->index, n < sizeof buf ? buf : "");
}

/* What the core starts from: the hard state, the last and applied index, and the snapshot
 * point (entries up to the store's first index - 1 were compacted or installed; the term
 * there is log_start's). */
static kl_code load_persisted(kl_repl *r, kl_raft_config *c, kl_err *err)
{
    uint64_t term, vote, commit, first, prev_term;
    kl_code rc = kl_store_load_hard(r->store, &term, &vote, &commit, err);
    if (rc != KL_OK)
        return rc;
    r->durable_term = term;
    r->durable_vote = vote;
    c->hard = (kl_raft_hard_state){.term = term, .vote = vote, .commit = commit};
    c->last_index = kl_store_last_index(r->store);
    c->applied = kl_store_applied_index(r->store);
    r->applied = c->applied;
    r->seen_commit = commit;
    uint8_t *conf_bytes = NULL;
    size_t conf_len;
    if ((rc = kl_store_log_start(r->store, &first, &prev_term, &conf_bytes, &conf_len, err)) != KL_OK)
        return rc;
    free(conf_bytes);
    /* Once a configuration is stored (at the snapshot point or in the log), it, not the
     * cluster file, is the member set: the core takes the base and finds the log's CONF
     * entries through storage.last_conf (raft.h "Membership" (c), (d)). */
    if ((rc = kl_confstore_load(&r->cs, r->store, c->applied, &c->conf, err)) != KL_OK)
        return rc;
    c->storage.last_conf = st_last_conf;
    c->snap_index = first - 1;
    c->snap_term = prev_term;
    if (r->applied > 0 && r->applied == c->snap_index)
        r->applied_term = prev_term;
    else if (r->applied > 0 && st_term(r, r->applied, &r->applied_term) != KL_OK)
        return kl_fail(err, KL_INTERNAL, "log", "cannot read the term of applied entry %llu",
                       (unsigned long long)r->applied);
    return KL_OK;
}

/* The peer transport (seed members, then the configuration in effect) and the snapshot
 * streams of a member that is not alone. */
static kl_code start_links(kl_repl *r, uv_loop_t *loop, const kl_repl_config *cfg, size_t self_slot,
                           kl_err *err)
{
    /* A joining member, and one whose store holds a replicated configuration, announces
     * configuration index 0: the cluster file is not what says who the members are any
     * more, so its seed is not compared (peer.h kl_peer_add). */
    bool replicated = cfg->join || r->cs.n_stored > 0 || r->cs.base.len > 0;
    kl_peer_config pc = {.cluster = r->cluster, .partition = cfg->partition,
                         .self = cfg->self,
                         .listen_url = cfg->join ? cfg->join_peer_url : cfg->peer_urls[self_slot],
                         .member_secret = cfg->member_secret,
                         .max_frame = r->max_frame, .recv = on_recv, .owner = r,
                         .config_index = replicated ? 0 : KL_REPL_CONFIG_INDEX,
                         .replica_count = cfg->replica_count,
                         .max_pipes = cfg->peer_max, .idle_ms = cfg->peer_idle_ms};
    for (size_t i = 0; i < cfg->n_members; i++) {
        if (i == self_slot)
            continue;
        pc.peers[pc.n_peers].id = cfg->members[i];
        pc.peers[pc.n_peers].url = cfg->peer_urls[i];
        pc.peers[pc.n_peers].public_key = cfg->public_keys[i];
        pc.n_peers++;
        r->known_peers[r->n_known_peers++] = cfg->members[i];
        r->seed_peers[r->n_seed_peers++] = cfg->members[i];
    }
    kl_code rc = kl_peer_start(loop, &pc, &r->peer, err);
    if (rc != KL_OK)
        return rc;
    kl_raft_conf latest; /* a stored configuration, not the cluster file, says who */
    uint64_t latest_index;
    kl_raft_conf_get(r->raft, &latest, &latest_index, NULL);
    conf_peers_sync(r, &latest, latest_index, 0);
    kl_snapwire_io sio = {.loop = loop, .ctx = r, .send = sw_send, .report = sw_report, .step = sw_step,
                          .config = sw_config};
    if ((rc = kl_snapwire_new(r->store, cfg->self, r->max_frame - FRAME_SLACK, &sio, &r->sw, err)) != KL_OK)
        return rc;
    return KL_OK;
}

kl_code kl_repl_start(uv_loop_t *loop, kl_store *store, const kl_repl_config *cfg,
                      const kl_repl_callbacks *cb, kl_repl **out, kl_err *err)
{
    *out = NULL;
    size_t self_slot = 0;
    kl_code rc = check_config(cfg, &self_slot, err);
    if (rc != KL_OK)
        return rc;
    if (sodium_init() < 0)
        return kl_fail(err, KL_INTERNAL, "random", "libsodium failed to initialise");
    kl_repl *r = calloc(1, sizeof *r);
    if (r == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    r->loop = loop;
    r->store = store;
    r->rd = &r->rds[0];
    r->job = &r->jobs[0];
    r->cb = *cb;
    r->self = cfg->self;
    r->n_members = cfg->n_members;
    r->max_frame = cfg->max_frame ? cfg->max_frame : KL_PEER_DEFAULT_MAX_FRAME;
    r->snap_threshold = or_default(cfg->snapshot_threshold, KL_SNAP_THRESHOLD_DEFAULT);
    r->snap_trailing = cfg->snapshot_threshold ? cfg->snapshot_trailing : KL_SNAP_TRAILING_DEFAULT;
    snprintf(r->cluster, sizeof r->cluster, "%s", cfg->cluster);

    kl_raft_config rc_;
    kl_raft_config_default(&rc_);
    rc_.id = cfg->self;
    for (size_t i = 0; i < cfg->n_members; i++)
        rc_.members[i] = cfg->members[i];
    rc_.n_members = cfg->n_members;
    rc_.replica_count = cfg->replica_count;
    uint32_t tick = or_default(cfg->tick_ms, KL_REPL_DEFAULT_TICK_MS);
    rc_.election_ticks = or_default(cfg->election_ms, KL_REPL_DEFAULT_ELECTION_MS) / tick;
    rc_.heartbeat_ticks = or_default(cfg->heartbeat_ms, KL_REPL_DEFAULT_HEARTBEAT_MS) / tick;
    randombytes_buf(&rc_.rand_seed, sizeof rc_.rand_seed);
    rc_.max_readies = 2; /* the running write and the next one (take_next) */
    /* Entry data per append message: what fits one frame with room for the framing of
     * KL_RAFT_MAX_MSG_ENTRIES entries (a single larger entry still goes alone). */
    size_t overhead = (size_t)KL_RAFT_MAX_MSG_ENTRIES * 32 + FRAME_SLACK;
    size_t budget = r->max_frame > 2 * overhead ? r->max_frame - overhead : r->max_frame / 2;
    if (budget < rc_.max_msg_bytes)
        rc_.max_msg_bytes = budget;
    rc_.storage = (kl_raft_storage){.ctx = r, .term = st_term, .entries = st_entries};
    if ((rc = load_persisted(r, &rc_, err)) != KL_OK)
        goto fail;
    if (rc_.conf.n_members == 0 && (cfg->join || r->cs.n_stored > 0)) {
        /* The seed configuration as the base, passed as a replicated one: a joining member
         * is not in it, and once the log holds configuration entries this member's vote
         * may have gone to a member the seed does not name (the core refuses such a vote
         * against a static member list). A joining member takes the leader's log (a learner
         * entry naming it) or snapshot. */
        memcpy(rc_.conf.members, cfg->members, cfg->n_members * sizeof cfg->members[0]);
        rc_.conf.n_members = (uint32_t)cfg->n_members;
        rc_.conf.replica_count = cfg->replica_count;
    }
    for (size_t i = 0; i < cfg->n_members; i++) /* the seed; directories override it */
        if (kl_confstore_member_of(&r->cs, cfg->members[i]) == NULL)
            kl_confstore_learn_one(&r->cs, cfg->members[i], cfg->peer_urls[i], NULL,
                                   cfg->public_keys[i]);
    r->stages = kl_stages_new(); /* timing only: runs without it if memory is short */
    if ((rc = kl_trace_new(cfg->trace_every, trace_report, r, &r->trace, err)) != KL_OK)
        goto fail;

    r->rcap = 2 * rc_.max_pending_reads;
    r->reads = calloc(r->rcap, sizeof *r->reads);
    r->in_ents = calloc(KL_RAFT_MAX_MSG_ENTRIES, sizeof *r->in_ents);
    kl_pb_arena_init(&r->recv_arena, KL_REPL_RECV_ARENA_KEEP_BYTES);
    r->out_ents = calloc(KL_RAFT_MAX_MSG_ENTRIES, sizeof *r->out_ents);
    r->out_ptrs = calloc(KL_RAFT_MAX_MSG_ENTRIES, sizeof *r->out_ptrs);
    if (r->reads == NULL || r->in_ents == NULL || r->out_ents == NULL || r->out_ptrs == NULL) {
        rc = kl_fail(err, KL_INTERNAL, "memory", "out of memory");
        goto fail;
    }
    if ((rc = kl_raft_new(&rc_, &r->raft, err)) != KL_OK)
        goto fail;

    /* A member with a peer address listens even alone, so that a partition started with one
     * member can grow (MemberChange add); one without it can never be reached by a peer. */
    bool own_url = cfg->join || (cfg->peer_urls[self_slot] != NULL && cfg->peer_urls[self_slot][0] != '\0');
    if ((rc = kl_log_writer_start(loop, persist_run, persist_after, &r->writer, err)) != KL_OK)
        goto fail;
    if ((cfg->n_members > 1 || own_url) && (rc = start_links(r, loop, cfg, self_slot, err)) != KL_OK)
        goto fail;
    uv_timer_init(loop, &r->timer);
    r->timer.data = r;
    uv_timer_start(&r->timer, on_tick, tick, tick);
    uv_check_init(loop, &r->flush);
    r->flush.data = r;
    uv_check_start(&r->flush, on_flush);
    uv_prepare_init(loop, &r->reads_out);
    r->reads_out.data = r;
    uv_prepare_start(&r->reads_out, on_reads_out);
    r->open_handles = 4;
    kl_raft_conf in_effect;
    kl_raft_conf_get(r->raft, &in_effect, NULL, NULL);
    if (cfg->n_members == 1 && !cfg->join && in_effect.n_members == 1 && in_effect.n_old == 0) {
        /* Alone, no other member can lead: let the election timeout pass at once instead of
         * leaving every restart unavailable for one to two election timeouts. */
        for (uint32_t i = 0; i < 2 * rc_.election_ticks + 1; i++)
            (void)kl_raft_tick(r->raft);
        pump(r);
    }
    KL_INFO("replication started", "member=%llu members=%zu replica_count=%u term=%llu "
            "last_index=%llu applied=%llu commit=%llu snap_index=%llu", (unsigned long long)r->self,
            cfg->n_members, cfg->replica_count, (unsigned long long)rc_.hard.term,
            (unsigned long long)rc_.last_index, (unsigned long long)rc_.applied,
            (unsigned long long)rc_.hard.commit, (unsigned long long)rc_.snap_index);
    *out = r;
    return KL_OK;

fail:
    kl_log_writer_stop(r->writer, NULL, NULL);
    free_all(r);
    return rc;
}

void kl_repl_next(const kl_repl *r, uint64_t *index, uint64_t *term, bool *serving)
{
    kl_raft_status st;
    kl_raft_status_get(r->raft, &st);
    *index = st.last_index + 1;
    *term = st.term;
    /* A leader that heard from fewer than replica_count members in the last election
     * timeout refuses new writes before proposing them (UNAVAILABLE) rather than holding
     * them until their deadline. */
    *serving = live(r) && st.role == KL_RAFT_LEADER && r->applied_term == st.term && st.reachable >= st.q2;
}

kl_code kl_repl_propose(kl_repl *r, const uint8_t *data, size_t len, uint64_t *leader)
{
    *leader = 0;
    if (!live(r))
        return KL_UNAVAILABLE;
    kl_raft_status st;
    kl_raft_status_get(r->raft, &st);
    *leader = st.leader;
    if (st.role != KL_RAFT_LEADER)
        return KL_NOT_LEADER;
    uint64_t index = st.last_index + 1, term = st.term, eterm, eindex;
    uint32_t etype;
    if (data == NULL || len == 0 || len > r->max_frame - FRAME_SLACK ||
        !log_header(data, len, false, &eterm, &eindex, &etype) || eterm != term ||
        eindex != index || etype != KL_RAFT_ENTRY_NORMAL)
        return KL_INVALID_ARGUMENT;
    kl_raft_proposal p;
    kl_code rc = kl_raft_propose(r->raft, data, len, &p);
    if (rc == KL_INTERNAL) {
        fail_core(r, "propose");
        return KL_UNAVAILABLE;
    }
    if (rc == KL_NOT_LEADER)
        *leader = p.leader;
    if (rc != KL_OK)
        return rc;
    assert(p.index == index && p.term == term);
    uint64_t now = kl_stages_now();
    kl_stages_mark(r->stages, p.index, KL_STAGE_PROPOSE, now);
    kl_trace_begin(r->trace, p.index, p.index, true, KL_TP_PROPOSE, now);
    pump(r);
    /* With the leader's own write running, pump takes no ready: the append leaves now
     * rather than in on_flush, which runs only after the loop's next poll, and the node
     * proposes in the prepare phase, just before that poll may wait milliseconds for I/O
     * while every follower's write of the entry (and so its commit) waits for it. */
    send_urgent(r);
    return KL_OK;
}

kl_code kl_repl_read_index(kl_repl *r, uint64_t read_ctx, uint64_t *leader)
{
    *leader = 0;
    if (!live(r))
        return KL_UNAVAILABLE;
    if (r->rlen >= r->rcap)
        return KL_UNAVAILABLE;
    kl_code rc = kl_raft_read_index(r->raft, read_ctx, leader);
    if (rc == KL_INTERNAL) {
        fail_core(r, "read_index");
        return KL_UNAVAILABLE;
    }
    if (rc != KL_OK)
        return rc;
    kl_raft_status st;
    kl_raft_status_get(r->raft, &st);
    *read_at(r, r->rlen) = (pending_read){.ctx = read_ctx, .term = st.term, .state = READ_WAITING};
    r->rlen++;
    /* The round leaves at the end of this loop iteration (on_flush, or on_reads_out before
     * the next poll), not now: every read queued in the iteration shares it, and appends
     * proposed meanwhile carry it to their followers (raft.h "read"). Sent at once, each
     * read cost a round of its own: two heartbeats and two answers per fresh read under load. */
    r->reads_unsent = true;
    return KL_OK;
}

void kl_repl_status(const kl_repl *r, kl_raft_status *st)
{
    kl_raft_status_get(r->raft, st);
    st->leader_ready = live(r) && st->role == KL_RAFT_LEADER && r->applied_term == st->term;
}

kl_code kl_repl_propose_conf(kl_repl *r, const kl_raft_conf *target, const uint8_t *directory,
                             size_t directory_len, uint64_t *index, uint64_t *leader, kl_err *err)
{
    *index = 0;
    *leader = 0;
    if (!live(r))
        return kl_fail(err, KL_UNAVAILABLE, "replication", "replication stopped");
    if (directory_len > KL_MEMBER_CONF_BLOB_MAX - KL_RAFT_CONF_MAX_BYTES)
        return kl_fail(err, KL_INVALID_ARGUMENT, "directory", "member directory of %zu bytes "
                       "(at most %d)", directory_len, KL_MEMBER_CONF_BLOB_MAX - KL_RAFT_CONF_MAX_BYTES);
    kl_raft_proposal p;
    kl_code rc = kl_raft_propose_conf_change(r->raft, target, directory, directory_len, &p, err);
    if (rc == KL_INTERNAL) {
        fail_core(r, "propose_conf_change");
        return rc;
    }
    *leader = p.leader;
    if (rc == KL_OK) {
        *index = p.index;
        pump(r);
    }
    return rc;
}

void kl_repl_conf(const kl_repl *r, kl_raft_conf *conf, uint64_t *index, bool *committed)
{
    kl_raft_conf_get(r->raft, conf, index, NULL);
    kl_raft_status st;
    kl_raft_status_get(r->raft, &st);
    *committed = *index <= st.commit;
}

const kl_confstore_member *kl_repl_member(const kl_repl *r, uint64_t id)
{
    return kl_confstore_member_of(&r->cs, id);
}

void kl_repl_counters_get(const kl_repl *r, kl_repl_counters *out) { *out = r->counters; }

const kl_stages *kl_repl_stages(const kl_repl *r) { return r->stages; }

void kl_repl_stop(kl_repl *r)
{
    if (r == NULL || r->stopped)
        return;
    r->stopped = true;
    kl_stages_report(r->stages, r->self, true);
    if (r->peer != NULL) {
        kl_peer_stop(r->peer);
        r->peer = NULL;
    }
    uv_timer_stop(&r->timer);
    uv_check_stop(&r->flush);
    uv_prepare_stop(&r->reads_out);
    uv_close((uv_handle_t *)&r->timer, on_handle_closed);
    uv_close((uv_handle_t *)&r->flush, on_handle_closed);
    uv_close((uv_handle_t *)&r->reads_out, on_handle_closed);
    kl_log_writer_stop(r->writer, on_writer_closed, r);
}

void kl_repl_peer_stats(kl_repl *r, kl_peer_counters *out)
{
    kl_peer_stats(r != NULL ? r->peer : NULL, out);
}
