/* snapwire: snapshot streams (the contract is in snapwire.h). */
#include "daemon/repl/snapwire.h"

#include "common/failpoint.h"
#include "common/log.h"
#include "daemon/repl/stages.h"
#include "daemon/store/snapshot.h"

#include <assert.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#define NO_SEQ UINT64_MAX

typedef struct snap_out {
    bool active;
    bool opening;   /* the reader opens on the thread pool (open_work); the slot is taken */
    bool abandoned; /* ended (reported) while opening: close the reader when it comes */
    uint64_t asked; /* the index the core named */
    struct kl_snapwire *w;
    uv_work_t work;
    kl_snap_reader *opened; /* open_work's result, its code and error */
    kl_code open_rc;
    kl_err open_err;
    uint64_t open_ns;
    bool waiting_resume; /* begin sent (or a piece could not be queued): wait for a resume */
    bool produced_last;
    uint64_t to, stream, term;
    kl_raft_conf conf;
    kl_snap_reader *rd;
    uint64_t index, sterm;
    uint64_t next_seq, acked; /* chunks [acked, next_seq) are in flight */
    uint64_t inflight;        /* their bytes: lens[seq % KL_SNAPWIRE_WINDOW] each */
    uint32_t lens[KL_SNAPWIRE_WINDOW];
    uint64_t heard_ms, progress_ms;
} snap_out;

struct kl_snapwire {
    kl_store *st;
    uint64_t self;
    size_t piece_max;
    kl_snapwire_io io;
    uint64_t next_stream;
    snap_out out[KL_RAFT_MAX_MEMBERS];
    /* incoming */
    kl_snap_install *in;
    uint64_t in_stream, in_from, in_term, in_index, in_sterm;
    kl_raft_conf in_conf;
    bool waiting_install; /* staged completely and stepped into the core */
    uint8_t *asm_buf;     /* KL_SNAP_CHUNK_MAX: the chunk being reassembled */
    size_t asm_len, asm_total;
    uint64_t asm_seq, resume_sent;
    kl_snapwire_counters c;
    bool closing; /* kl_snapwire_free ran while a reader was opening: open_done frees */
};

kl_code kl_snapwire_new(kl_store *st, uint64_t self, size_t piece_max, const kl_snapwire_io *io,
                        kl_snapwire **out, kl_err *err)
{
    *out = NULL;
    if (piece_max < 1024)
        return kl_fail(err, KL_INVALID_ARGUMENT, "max_frame",
                       "snapshot pieces of %zu bytes are too small (frame limit too low)", piece_max);
    kl_snapwire *w = calloc(1, sizeof *w);
    if (w == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    w->st = st;
    w->self = self;
    w->piece_max = piece_max < KL_SNAP_CHUNK_MAX ? piece_max : KL_SNAP_CHUNK_MAX;
    w->io = *io;
    randombytes_buf(&w->next_stream, sizeof w->next_stream); /* a restarted sender's ids are new */
    w->resume_sent = NO_SEQ;
    *out = w;
    return KL_OK;
}

static bool any_opening(const kl_snapwire *w)
{
    for (size_t i = 0; i < KL_RAFT_MAX_MEMBERS; i++)
        if (w->out[i].opening)
            return true;
    return false;
}

void kl_snapwire_free(kl_snapwire *w)
{
    if (w == NULL)
        return;
    for (size_t i = 0; i < KL_RAFT_MAX_MEMBERS; i++) {
        kl_snap_reader_close(w->out[i].rd);
        w->out[i].rd = NULL;
        w->out[i].active = false;
    }
    if (w->in != NULL)
        kl_snap_install_close(w->in);
    w->in = NULL;
    free(w->asm_buf);
    w->asm_buf = NULL;
    if (any_opening(w)) {
        w->closing = true; /* open_done frees: its work still points into w */
        return;
    }
    free(w);
}

/* ---------------------------------------------------------------- frames */

static void frame_init(Keyload__V1__RaftMessage *pm, uint32_t type, uint64_t from, uint64_t to,
                       uint64_t term, uint64_t stream, uint64_t index, uint64_t sterm)
{
    keyload__v1__raft_message__init(pm);
    pm->type = type;
    pm->from = from;
    pm->to = to;
    pm->term = term;
    pm->snap_stream = stream;
    pm->snap_index = index;
    pm->snap_term = sterm;
}

static bool out_send(kl_snapwire *w, snap_out *o, uint32_t flags, uint64_t seq, uint64_t off,
                     size_t chunk_len, const uint8_t *piece, size_t n)
{
    Keyload__V1__RaftMessage pm;
    frame_init(&pm, KL_SNAPWIRE_MSG_DATA, w->self, o->to, o->term, o->stream, o->index, o->sterm);
    pm.snap_members = o->conf.members;
    pm.n_snap_members = o->conf.n_members;
    pm.snap_replica_count = o->conf.replica_count;
    uint8_t conf[KL_RAFT_CONF_MAX_BYTES];
    pm.snap_conf.data = conf;
    pm.snap_conf.len = kl_raft_conf_encode(&o->conf, conf);
    pm.snap_flags = flags;
    pm.snap_seq = seq;
    pm.snap_offset = off;
    pm.snap_chunk_len = chunk_len;
    pm.snap_piece.data = (uint8_t *)piece;
    pm.snap_piece.len = n;
    return w->io.send(w->io.ctx, o->to, &pm);
}

static void in_answer(kl_snapwire *w, uint32_t flags, const kl_snap_pos *pos)
{
    Keyload__V1__RaftMessage pm;
    frame_init(&pm, KL_SNAPWIRE_MSG_ANSWER, w->self, w->in_from, w->in_term, w->in_stream,
               w->in_index, w->in_sterm);
    pm.snap_flags = flags;
    if (pos != NULL) {
        pm.snap_seq = pos->seq;
        pm.snap_after.data = (uint8_t *)pos->after;
        pm.snap_after.len = pos->after_len;
        pm.snap_digest.data = (uint8_t *)pos->digest;
        pm.snap_digest.len = KL_SNAP_DIGEST_BYTES;
        pm.snap_keys = pos->keys;
    }
    (void)w->io.send(w->io.ctx, w->in_from, &pm);
}

/* ---------------------------------------------------------------- sending */

static snap_out *out_find(kl_snapwire *w, uint64_t to, bool make)
{
    snap_out *free_slot = NULL;
    for (size_t i = 0; i < KL_RAFT_MAX_MEMBERS; i++) {
        if (w->out[i].to == to && (w->out[i].active || make))
            return &w->out[i];
        if (free_slot == NULL && !w->out[i].active && !w->out[i].opening)
            free_slot = &w->out[i];
    }
    return make ? free_slot : NULL;
}

static void out_finish(kl_snapwire *w, snap_out *o, bool ok, const char *why)
{
    kl_snap_reader_close(o->rd);
    o->rd = NULL;
    o->active = false;
    if (ok)
        w->c.sent_ok++;
    else
        w->c.sent_failed++;
    KL_INFO("snapshot stream ended", "member=%llu to=%llu index=%llu chunks=%llu ok=%d why=%s",
            (unsigned long long)w->self, (unsigned long long)o->to, (unsigned long long)o->index,
            (unsigned long long)o->next_seq, (int)ok, why);
    w->io.report(w->io.ctx, o->to, ok);
}

/* Fills the window: reads chunks and queues their pieces. */
static void out_pump(kl_snapwire *w, snap_out *o)
{
    while (o->active && !o->waiting_resume && !o->produced_last &&
           o->next_seq < o->acked + KL_SNAPWIRE_WINDOW && o->inflight < KL_SNAPWIRE_WINDOW_BYTES) {
        const uint8_t *chunk;
        size_t len;
        bool last;
        kl_err err;
        if (kl_snap_reader_next(o->rd, &chunk, &len, &last, &err) != KL_OK) {
            KL_ERROR("snapshot read failed", "member=%llu to=%llu error=\"%s\"",
                     (unsigned long long)w->self, (unsigned long long)o->to, err.message);
            out_finish(w, o, false, "read");
            return;
        }
        if (len == 0) {
            o->produced_last = true;
            return;
        }
        for (size_t off = 0; off < len; off += w->piece_max) {
            size_t n = len - off < w->piece_max ? len - off : w->piece_max;
            if (!out_send(w, o, 0, o->next_seq, off, len, chunk + off, n)) {
                /* Queue full or no connection: the receiver will miss this chunk; wait
                 * for its resume (or resync after the silence). */
                o->waiting_resume = true;
                return;
            }
        }
        w->c.chunks_sent++;
        o->lens[o->next_seq % KL_SNAPWIRE_WINDOW] = (uint32_t)len;
        o->inflight += len;
        o->next_seq++;
        o->produced_last = last;
    }
}

/* The reader is open (or failed to): the stream's begin frame leaves. */
/* The configuration as of the index the reader pinned goes into its header chunk and is the
 * point's configuration in the stream (raft.h "Snapshots": a later index carries its own). */
static bool out_config(kl_snapwire *w, snap_out *o)
{
    if (w->io.config == NULL)
        return true;
    const uint8_t *blob = NULL;
    size_t blen = 0;
    kl_err err;
    if (!w->io.config(w->io.ctx, o->index, &blob, &blen)) {
        out_finish(w, o, false, "config");
        return false;
    }
    kl_raft_conf bconf;
    if (blen > 0 && kl_raft_conf_decode(blob, blen, &bconf, &(size_t){0}, NULL) == KL_OK)
        o->conf = bconf;
    if (kl_snap_reader_set_config(o->rd, blob, blen, &err) != KL_OK) {
        KL_ERROR("snapshot open failed", "member=%llu to=%llu error=\"%s\"", (unsigned long long)w->self,
                 (unsigned long long)o->to, err.message);
        out_finish(w, o, false, "config");
        return false;
    }
    return true;
}

static void out_opened(kl_snapwire *w, snap_out *o, uint64_t now_ms)
{
    if (o->open_rc != KL_OK) {
        KL_ERROR("snapshot open failed", "member=%llu to=%llu error=\"%s\"",
                 (unsigned long long)w->self, (unsigned long long)o->to, o->open_err.message);
        out_finish(w, o, false, "open");
        return;
    }
    o->rd = o->opened;
    o->opened = NULL;
    uint64_t keys;
    kl_snap_reader_meta(o->rd, &o->index, &o->sterm, &keys);
    if (o->index < o->asked) {
        out_finish(w, o, false, "behind"); /* applied below the compaction: never the case */
        return;
    }
    if (!out_config(w, o))
        return;
    o->stream = ++w->next_stream;
    o->heard_ms = o->progress_ms = now_ms;
    o->waiting_resume = true;
    /* open_ms: the reader's key count pass, on the thread pool (snapshot.h). */
    KL_INFO("snapshot stream started", "member=%llu to=%llu asked=%llu index=%llu term=%llu keys=%llu "
            "open_ms=%.1f", (unsigned long long)w->self, (unsigned long long)o->to,
            (unsigned long long)o->asked, (unsigned long long)o->index,
            (unsigned long long)o->sterm, (unsigned long long)keys, (double)o->open_ns / 1e6);
    (void)out_send(w, o, KL_SNAPWIRE_BEGIN, 0, 0, 0, NULL, 0);
}

static void open_work(uv_work_t *wk)
{
    snap_out *o = wk->data;
    kl_err_clear(&o->open_err);
    uint64_t t0 = kl_stages_now();
    o->open_rc = KL_FAILPOINT("repl.snapshot_open", &o->open_err);
    if (o->open_rc == KL_OK)
        o->open_rc = kl_snap_reader_open(o->w->st, NULL, 0, &o->opened, &o->open_err);
    o->open_ns = kl_stages_now() - t0;
}

static void open_done(uv_work_t *wk, int status)
{
    snap_out *o = wk->data;
    kl_snapwire *w = o->w;
    o->opening = false;
    if (status != 0 && o->open_rc == KL_OK) {
        kl_snap_reader_close(o->opened);
        o->opened = NULL;
        o->open_rc = kl_fail(&o->open_err, KL_INTERNAL, "snapshot", "the reader's open was cancelled");
    }
    if (w->closing || o->abandoned || !o->active) {
        kl_snap_reader_close(o->opened);
        o->opened = NULL;
        o->abandoned = false;
        if (w->closing && !any_opening(w))
            free(w);
        return;
    }
    out_opened(w, o, uv_now(w->io.loop));
}

void kl_snapwire_start(kl_snapwire *w, const kl_raft_msg *m, uint64_t now_ms)
{
    snap_out *o = out_find(w, m->to, true);
    if (o == NULL) { /* more streams than members: cannot happen; answer the core anyway */
        w->io.report(w->io.ctx, m->to, false);
        return;
    }
    if (o->opening) { /* replaced before its reader opened: that open serves this request */
        o->term = m->term;
        o->conf = m->snap.conf;
        o->asked = m->snap.index;
        o->abandoned = false;
        o->active = true;
        return;
    }
    kl_snap_reader_close(o->rd); /* a replaced stream: the core asked again, no report */
    *o = (snap_out){.to = m->to, .term = m->term, .conf = m->snap.conf, .asked = m->snap.index,
                    .w = w, .active = true};
    if (w->io.loop == NULL) {
        open_work(&(uv_work_t){.data = o});
        out_opened(w, o, now_ms);
        return;
    }
    o->work.data = o;
    o->opening = true;
    if (uv_queue_work(w->io.loop, &o->work, open_work, open_done) != 0) {
        o->opening = false;
        o->open_rc = kl_fail(&o->open_err, KL_INTERNAL, "snapshot", "cannot queue the reader's open");
        out_opened(w, o, now_ms);
    }
}

static void out_answer(kl_snapwire *w, snap_out *o, const Keyload__V1__RaftMessage *pm, uint64_t now_ms)
{
    o->heard_ms = now_ms;
    if (pm->snap_flags & KL_SNAPWIRE_REFUSED) {
        out_finish(w, o, false, "refused");
        return;
    }
    if (pm->snap_flags & KL_SNAPWIRE_DONE) {
        out_finish(w, o, true, "done");
        return;
    }
    if (pm->snap_flags & KL_SNAPWIRE_RESUME) {
        kl_snap_pos pos = {.seq = pm->snap_seq, .keys = pm->snap_keys};
        if (pm->snap_after.len > KL_KEY_MAX ||
            (pm->snap_digest.len != KL_SNAP_DIGEST_BYTES && pm->snap_digest.len != 0))
            return; /* malformed: the resync timer asks again */
        if (pm->snap_after.len) /* an empty bytes field has no data pointer */
            memcpy(pos.after, pm->snap_after.data, pm->snap_after.len);
        pos.after_len = pm->snap_after.len;
        if (pm->snap_digest.len)
            memcpy(pos.digest, pm->snap_digest.data, KL_SNAP_DIGEST_BYTES);
        kl_snap_reader_seek(o->rd, &pos);
        o->next_seq = o->acked = pos.seq;
        o->inflight = 0;
        o->produced_last = false;
        o->waiting_resume = false;
        o->progress_ms = now_ms;
        w->c.resumes++;
    } else if (pm->snap_flags & KL_SNAPWIRE_ACK) {
        if (pm->snap_seq <= o->acked || pm->snap_seq > o->next_seq)
            return; /* stale, or for chunks of before a resume */
        for (; o->acked < pm->snap_seq; o->acked++)
            o->inflight -= o->lens[o->acked % KL_SNAPWIRE_WINDOW];
        o->progress_ms = now_ms;
    }
    out_pump(w, o);
}

void kl_snapwire_tick(kl_snapwire *w, bool leading, uint64_t now_ms)
{
    for (size_t i = 0; i < KL_RAFT_MAX_MEMBERS; i++) {
        snap_out *o = &w->out[i];
        if (!o->active)
            continue;
        if (o->opening) { /* no frame out yet: nothing to resync or stall */
            if (!leading) {
                out_finish(w, o, false, "not_leader");
                o->abandoned = true;
            }
            continue;
        }
        if (!leading)
            out_finish(w, o, false, "not_leader");
        else if (now_ms - o->progress_ms > KL_SNAPWIRE_STALL_MS)
            out_finish(w, o, false, "stalled");
        else if (now_ms - o->heard_ms > KL_SNAPWIRE_RESYNC_MS) {
            o->heard_ms = now_ms;
            o->waiting_resume = true;
            (void)out_send(w, o, KL_SNAPWIRE_BEGIN, 0, 0, 0, NULL, 0);
        }
    }
}

/* ---------------------------------------------------------------- receiving */

static void in_pos(const kl_snapwire *w, bool *staged, uint64_t *index, uint64_t *term, kl_snap_pos *pos)
{
    kl_snap_install_pos(w->in, staged, index, term, pos);
}

/* Answers "resume from where the staging stands", once per position. */
static void in_resume(kl_snapwire *w, bool force)
{
    bool staged;
    uint64_t index, term;
    kl_snap_pos pos;
    in_pos(w, &staged, &index, &term, &pos);
    if (!staged || index != w->in_index || term != w->in_sterm)
        memset(&pos, 0, sizeof pos);
    if (!force && w->resume_sent == pos.seq)
        return;
    w->resume_sent = pos.seq;
    w->asm_len = 0;
    in_answer(w, KL_SNAPWIRE_RESUME, &pos);
}

/* Steps the staged snapshot into the core; one the core refuses as malformed (e.g. another
 * configuration) is not kept. */
static void in_step(kl_snapwire *w)
{
    kl_raft_msg m = {.type = KL_RAFT_MSG_SNAPSHOT, .from = w->in_from, .to = w->self,
                     .term = w->in_term,
                     .snap = {.index = w->in_index, .term = w->in_sterm, .conf = w->in_conf}};
    if (!w->io.step(w->io.ctx, &m) && w->waiting_install) {
        kl_snap_install_discard(w->in);
        w->waiting_install = false;
    }
}

static void in_begin(kl_snapwire *w, uint64_t from, const Keyload__V1__RaftMessage *pm)
{
    if (w->waiting_install) {
        if (pm->snap_index == w->in_index && pm->snap_term == w->in_sterm) {
            w->in_stream = pm->snap_stream;
            w->in_from = from;
            in_answer(w, KL_SNAPWIRE_DONE, NULL);
            in_step(w);
        }
        return; /* another snapshot waits until the core took this one */
    }
    kl_err err;
    if (w->in == NULL && kl_snap_install_open(w->st, &w->in, &err) != KL_OK) {
        KL_ERROR("snapshot staging cannot open", "member=%llu error=\"%s\"",
                 (unsigned long long)w->self, err.message);
        w->in = NULL;
        return; /* the sender's stall timer gives up */
    }
    if (w->asm_buf == NULL && (w->asm_buf = malloc(KL_SNAP_CHUNK_MAX)) == NULL)
        return;
    w->in_stream = pm->snap_stream;
    w->in_from = from;
    w->in_term = pm->term;
    w->in_index = pm->snap_index;
    w->in_sterm = pm->snap_term;
    w->in_conf = (kl_raft_conf){.n_members = (uint32_t)pm->n_snap_members,
                                .replica_count = pm->snap_replica_count};
    memcpy(w->in_conf.members, pm->snap_members, pm->n_snap_members * sizeof(uint64_t));
    kl_raft_conf full; /* the core checks it again when the snapshot is stepped in */
    if (pm->snap_conf.len > 0 &&
        kl_raft_conf_decode(pm->snap_conf.data, pm->snap_conf.len, &full, &(size_t){0}, NULL) == KL_OK)
        w->in_conf = full;
    in_resume(w, true);
}

/* A whole chunk reassembled: verify and stage it. */
static void in_chunk(kl_snapwire *w)
{
    bool done = false;
    kl_err err;
    kl_code rc = kl_snap_install_chunk(w->in, w->asm_buf, w->asm_total, &done, &err);
    w->asm_len = 0;
    if (rc != KL_OK) {
        KL_WARN("snapshot chunk refused", "member=%llu from=%llu seq=%llu detail=%s error=\"%s\"",
                (unsigned long long)w->self, (unsigned long long)w->in_from,
                (unsigned long long)w->asm_seq, err.detail, err.message);
        if (strcmp(err.detail, "snapshot_stale") == 0) {
            in_answer(w, KL_SNAPWIRE_REFUSED, NULL);
            in_step(w); /* the core answers with how far it is */
        } else {
            in_resume(w, true);
        }
        return;
    }
    w->c.chunks_staged++;
    (void)KL_FAILPOINT("repl.snapshot_chunk_staged", &err);
    w->resume_sent = NO_SEQ;
    bool staged;
    uint64_t index, term;
    kl_snap_pos pos;
    in_pos(w, &staged, &index, &term, &pos);
    if (!done) {
        in_answer(w, KL_SNAPWIRE_ACK, &pos);
        return;
    }
    if (index != w->in_index || term != w->in_sterm) {
        /* The stream staged another point than its frames name: never step it in. */
        kl_snap_install_discard(w->in);
        in_answer(w, KL_SNAPWIRE_REFUSED, NULL);
        return;
    }
    KL_INFO("snapshot staged", "member=%llu from=%llu index=%llu term=%llu keys=%llu",
            (unsigned long long)w->self, (unsigned long long)w->in_from, (unsigned long long)index,
            (unsigned long long)term, (unsigned long long)pos.keys);
    w->waiting_install = true;
    in_answer(w, KL_SNAPWIRE_DONE, NULL);
    in_step(w);
}

static void in_piece(kl_snapwire *w, uint64_t from, const Keyload__V1__RaftMessage *pm)
{
    if (w->in == NULL || w->waiting_install || pm->snap_stream != w->in_stream || from != w->in_from)
        return;
    bool staged;
    uint64_t index, term;
    kl_snap_pos pos;
    in_pos(w, &staged, &index, &term, &pos);
    uint64_t expect = staged && index == w->in_index && term == w->in_sterm ? pos.seq : 0;
    size_t n = pm->snap_piece.len;
    bool fits = pm->snap_chunk_len <= KL_SNAP_CHUNK_MAX && n > 0 &&
                pm->snap_offset <= pm->snap_chunk_len && n <= pm->snap_chunk_len - pm->snap_offset;
    if (!fits || pm->snap_seq != expect || pm->snap_offset != w->asm_len ||
        (w->asm_len > 0 && (w->asm_seq != pm->snap_seq || w->asm_total != pm->snap_chunk_len))) {
        if (pm->snap_seq >= expect) /* a gap, not a duplicate of what is staged */
            in_resume(w, false);
        w->asm_len = 0;
        return;
    }
    memcpy(w->asm_buf + w->asm_len, pm->snap_piece.data, n);
    w->asm_seq = pm->snap_seq;
    w->asm_total = (size_t)pm->snap_chunk_len;
    w->asm_len += n;
    if (w->asm_len == w->asm_total)
        in_chunk(w);
}

void kl_snapwire_recv(kl_snapwire *w, uint64_t from, const Keyload__V1__RaftMessage *pm, uint64_t now_ms)
{
    if (pm->type == KL_SNAPWIRE_MSG_ANSWER) {
        snap_out *o = out_find(w, from, false);
        if (o != NULL && o->rd != NULL && o->stream == pm->snap_stream)
            out_answer(w, o, pm, now_ms);
        return;
    }
    if (pm->n_snap_members == 0 || pm->n_snap_members > KL_RAFT_MAX_MEMBERS || pm->term == 0)
        return;
    if (pm->snap_flags & KL_SNAPWIRE_BEGIN)
        in_begin(w, from, pm);
    else
        in_piece(w, from, pm);
}

bool kl_snapwire_install_waiting(const kl_snapwire *w) { return w->waiting_install; }

kl_code kl_snapwire_install(kl_snapwire *w, const kl_raft_snapshot *sn, kl_err *err)
{
    if (!w->waiting_install || sn->index != w->in_index || sn->term != w->in_sterm)
        return kl_fail(err, KL_FAILED_PRECONDITION, "snapshot_not_staged",
                       "the core asked to install snapshot %llu/%llu, which is not the one staged",
                       (unsigned long long)sn->index, (unsigned long long)sn->term);
    kl_code rc = kl_snap_install_commit(w->in, err);
    if (rc != KL_OK)
        return rc;
    w->waiting_install = false;
    w->c.installed++;
    return KL_OK;
}

void kl_snapwire_settle(kl_snapwire *w)
{
    if (w->waiting_install) {
        kl_snap_install_discard(w->in);
        w->waiting_install = false;
    }
}

void kl_snapwire_counters_get(const kl_snapwire *w, kl_snapwire_counters *out) { *out = w->c; }
