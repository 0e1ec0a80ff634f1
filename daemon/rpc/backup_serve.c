/* backup_serve: keyload.v1.BackupOpen / BackupChunk / BackupClose (ARCHITECTURE.md "Backup
 * and restore"). A stream is a kl_snap_reader pinned on this member after the read-index
 * barrier (so its index is at or after every commit acknowledged before the open), read one
 * chunk per call. Opening (its one counting pass over the state) and every chunk run on
 * libuv's thread pool, never on the loop: a 1 GiB state counts for seconds, which on the
 * loop would stop heartbeats and depose the leader. A reader is used by one work item at a
 * time (snapshot.h), which the `busy` flag of its slot guarantees.
 *
 * Bounds, each refusal named: at most KL_BACKUP_MAX_STREAMS streams per member (UNAVAILABLE
 * "backup_streams_full", retryable once one closes); a stream idle for KL_BACKUP_IDLE_MS or
 * older than KL_BACKUP_STREAM_MAX_MS is closed by the service timer, and a later call for
 * it is NOT_FOUND "backup_stream" (start the backup again). Only a cluster administrator
 * may open or read one (PERMISSION_DENIED "role:cluster_admin"). Chunks after a leader
 * change are still served by the member holding the pin: its view was fixed at the open. */
#include "daemon/rpc/serve.h"

#include "common/log.h"
#include "daemon/store/snapshot.h"
#include "keyload/v1/backup.pb-c.h"
#include "keyload/v1/store.pb-c.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

typedef struct backup_stream {
    uint64_t id;                 /* 0 = free slot */
    kl_service *s;
    kl_snap_reader *reader;      /* NULL until the open's work finished */
    bool busy;                   /* a work item uses the reader now */
    bool closing;                /* close when the work item ends */
    kl_rpc_call *call;           /* the call the work item answers, or NULL */
    int64_t opened_ms, last_ms;  /* monotonic */
    uint64_t seq;                /* the chunk being read, or the last one answered */
    bool have_chunk, last;       /* chunk/len hold chunk `seq` (valid until the next read) */
    const uint8_t *chunk;
    size_t len;
    int64_t entry_ms;            /* partition time of the pinned index's entry (0: unknown) */
    kl_code rc;                  /* the work item's result */
    kl_err err;
    uv_work_t work;
} backup_stream;

struct kl_backup_streams {
    backup_stream slot[KL_BACKUP_MAX_STREAMS];
};

static kl_code require_cluster_admin(kl_service *s, kl_rpc_call *call, kl_err *err)
{
    const char *who = kl_service_principal(call);
    if (strcmp(who, KL_LOCAL_PRINCIPAL) == 0) {
        if (s->cluster->insecure_local_admin)
            return KL_OK;
        return kl_fail(err, KL_UNAUTHENTICATED, "session_required",
                       "a backup needs a session of a cluster administrator (keyload --principal ID --key FILE)");
    }
    const Keyload__V1__CatalogPrincipal *rec;
    bool found;
    kl_code rc = kl_node_find_principal_cached(s->node, who, &rec, &found, err);
    if (rc != KL_OK)
        return rc;
    if (!found || !rec->cluster_admin)
        return kl_fail(err, KL_PERMISSION_DENIED, "role:cluster_admin",
                       "only a cluster administrator may read a backup stream");
    return KL_OK;
}

static backup_stream *find_stream(kl_service *s, uint64_t id)
{
    if (s->backups == NULL || id == 0)
        return NULL;
    for (int i = 0; i < KL_BACKUP_MAX_STREAMS; i++)
        if (s->backups->slot[i].id == id)
            return &s->backups->slot[i];
    return NULL;
}

static void stream_free(backup_stream *b)
{
    if (b->reader != NULL)
        kl_snap_reader_close(b->reader);
    memset(b, 0, sizeof *b);
}

static void reply_error(backup_stream *b, const kl_err *err)
{
    if (b->call != NULL)
        kl_rpc_reply_error(b->call, err, NULL);
    b->call = NULL;
}

/* ---- open */

/* The partition time of log entry `index`, 0 when the log does not hold it (compacted, or
 * a restored store's first entry). A committed entry never changes, so reading it after the
 * pin reads the pinned one. */
static int64_t entry_time(kl_store *st, uint64_t index)
{
    uint8_t *v;
    size_t n;
    bool found;
    kl_err err;
    if (index == 0 || kl_store_read_log(st, index, &v, &n, &found, &err) != KL_OK || !found)
        return 0;
    Keyload__V1__LogEntry *e = keyload__v1__log_entry__unpack(NULL, n, v);
    free(v);
    int64_t t = e != NULL ? e->time_unix_ms : 0;
    if (e != NULL)
        keyload__v1__log_entry__free_unpacked(e, NULL);
    return t;
}

static void open_work(uv_work_t *w)
{
    backup_stream *b = w->data;
    kl_err_clear(&b->err);
    b->rc = kl_snap_reader_open(b->s->store, NULL, 0, &b->reader, &b->err);
    if (b->rc == KL_OK) {
        uint64_t index, term, keys;
        kl_snap_reader_meta(b->reader, &index, &term, &keys);
        b->entry_ms = entry_time(b->s->store, index);
    }
}

static void open_done(uv_work_t *w, int status)
{
    backup_stream *b = w->data;
    b->busy = false;
    if (status != 0 && b->rc == KL_OK)
        b->rc = kl_fail(&b->err, KL_UNAVAILABLE, "backup_cancelled", "the backup stream was cancelled; retry");
    if (b->rc != KL_OK || b->closing) {
        if (b->rc == KL_OK)
            kl_fail(&b->err, KL_UNAVAILABLE, "backup_stopping", "this member is stopping; retry");
        reply_error(b, &b->err);
        stream_free(b);
        return;
    }
    Keyload__V1__BackupOpenAnswer a = KEYLOAD__V1__BACKUP_OPEN_ANSWER__INIT;
    a.stream = b->id;
    a.partition = b->s->partition->id;
    kl_snap_reader_meta(b->reader, &a.index, &a.term, &a.key_count);
    a.member = b->s->member_id;
    a.idle_ms = KL_BACKUP_IDLE_MS;
    a.entry_unix_ms = b->entry_ms;
    uint8_t buf[128];
    size_t n = keyload__v1__backup_open_answer__pack(&a, buf);
    b->last_ms = kl_service_mono_ms();
    KL_INFO("backup_open", "stream=%016llx index=%llu keys=%llu", (unsigned long long)b->id,
            (unsigned long long)a.index, (unsigned long long)a.key_count);
    kl_rpc_reply(b->call, buf, n);
    b->call = NULL;
}

/* After the read barrier: pin on the thread pool (ARCHITECTURE.md "Backup and restore"). */
static void serve_open(kl_service *s, kl_rpc_call *call, kl_node_read_kind kind, const kl_service_read_args *args)
{
    (void)kind;
    (void)args;
    kl_err err;
    if (s->backups == NULL && (s->backups = calloc(1, sizeof *s->backups)) == NULL) {
        kl_fail(&err, KL_UNAVAILABLE, "memory", "out of memory opening a backup stream; retry");
        kl_rpc_reply_error(call, &err, NULL);
        return;
    }
    backup_stream *b = NULL;
    for (int i = 0; i < KL_BACKUP_MAX_STREAMS && b == NULL; i++)
        if (s->backups->slot[i].id == 0)
            b = &s->backups->slot[i];
    if (b == NULL) {
        kl_fail(&err, KL_UNAVAILABLE, "backup_streams_full",
                "this member already holds KL_BACKUP_MAX_STREAMS (%d) backup streams; retry once one "
                "closes (idle ones close after %d ms)", KL_BACKUP_MAX_STREAMS, KL_BACKUP_IDLE_MS);
        kl_rpc_reply_error(call, &err, NULL);
        return;
    }
    memset(b, 0, sizeof *b);
    while (b->id == 0)
        randombytes_buf(&b->id, sizeof b->id);
    b->s = s;
    b->call = call;
    b->busy = true;
    b->opened_ms = b->last_ms = kl_service_mono_ms();
    b->work.data = b;
    if (uv_queue_work(s->timer.loop, &b->work, open_work, open_done) != 0) {
        kl_fail(&err, KL_UNAVAILABLE, "backup_queue", "the backup stream could not be started; retry");
        reply_error(b, &err);
        stream_free(b);
    }
}

void kl_service_backup_open(void *owner, kl_rpc_call *call)
{
    kl_service *s = owner;
    kl_err err;
    size_t len;
    const uint8_t *p = kl_rpc_call_payload(call, &len);
    Keyload__V1__BackupOpenRequest *req = keyload__v1__backup_open_request__unpack(NULL, len, p);
    if (req == NULL) {
        kl_fail(&err, KL_INVALID_ARGUMENT, "request", "BackupOpenRequest does not decode");
        kl_rpc_reply_error(call, &err, NULL);
        return;
    }
    keyload__v1__backup_open_request__free_unpacked(req, NULL);
    if (require_cluster_admin(s, call, &err) != KL_OK) {
        kl_rpc_reply_error(call, &err, NULL);
        return;
    }
    kl_service_start_read(s, call, KL_NODE_QUERY_READ, serve_open, NULL);
}

/* ---- chunks */

static void reply_chunk(backup_stream *b)
{
    if (b->len + KL_BACKUP_ANSWER_OVERHEAD > KL_RPC_DEFAULT_FRAME_LIMIT) {
        kl_err err;
        kl_fail(&err, KL_INTERNAL, "backup_chunk_frame",
                "chunk %llu is %zu bytes: a record too large for the client frame (KL_RPC_DEFAULT_FRAME_LIMIT "
                "%u bytes); this state cannot be backed up over the client port", (unsigned long long)b->seq,
                b->len, (unsigned)KL_RPC_DEFAULT_FRAME_LIMIT);
        reply_error(b, &err);
        return;
    }
    Keyload__V1__BackupChunkAnswer a = KEYLOAD__V1__BACKUP_CHUNK_ANSWER__INIT;
    a.seq = b->seq;
    a.chunk.data = (uint8_t *)b->chunk;
    a.chunk.len = b->len;
    a.last = b->last;
    size_t n = keyload__v1__backup_chunk_answer__get_packed_size(&a);
    uint8_t *buf = malloc(n ? n : 1);
    if (buf == NULL) {
        kl_err err;
        kl_fail(&err, KL_UNAVAILABLE, "memory", "out of memory answering a backup chunk; ask again");
        reply_error(b, &err);
        return;
    }
    keyload__v1__backup_chunk_answer__pack(&a, buf);
    kl_rpc_reply(b->call, buf, n);
    b->call = NULL;
    free(buf);
}

static void chunk_work(uv_work_t *w)
{
    backup_stream *b = w->data;
    kl_err_clear(&b->err);
    bool last = false;
    b->rc = kl_snap_reader_next(b->reader, &b->chunk, &b->len, &last, &b->err);
    b->last = last;
}

static void chunk_done(uv_work_t *w, int status)
{
    backup_stream *b = w->data;
    b->busy = false;
    if (b->closing) {
        kl_err err;
        kl_fail(&err, KL_UNAVAILABLE, "backup_stopping", "the backup stream closed; start the backup again");
        reply_error(b, &err);
        stream_free(b);
        return;
    }
    if (status != 0 || b->rc != KL_OK) {
        if (b->rc == KL_OK)
            kl_fail(&b->err, KL_UNAVAILABLE, "backup_cancelled", "the chunk read was cancelled");
        KL_WARN("backup_read", "stream=%016llx seq=%llu: %s", (unsigned long long)b->id,
                (unsigned long long)b->seq, b->err.message);
        reply_error(b, &b->err);
        stream_free(b); /* a reader that failed is not resumed: the stream ends */
        return;
    }
    b->have_chunk = true;
    b->last_ms = kl_service_mono_ms();
    reply_chunk(b);
}

/* seq: the chunk last answered again (its answer was lost), or the next one. */
static void chunk_request(kl_service *s, backup_stream *b, kl_rpc_call *call, uint64_t seq)
{
    kl_err err;
    if (b->busy) {
        if (seq != b->seq) {
            kl_fail(&err, KL_FAILED_PRECONDITION, "backup_seq",
                    "chunk %llu asked while chunk %llu is being read; ask for that one",
                    (unsigned long long)seq, (unsigned long long)b->seq);
            kl_rpc_reply_error(call, &err, NULL);
            return;
        }
        /* The caller gave up on the first ask and asked again: answer this call instead. */
        kl_fail(&err, KL_UNAVAILABLE, "backup_superseded", "asked again by a newer call");
        reply_error(b, &err);
        b->call = call;
        return;
    }
    b->last_ms = kl_service_mono_ms();
    if (b->have_chunk && seq == b->seq) {
        b->call = call;
        reply_chunk(b);
        return;
    }
    uint64_t want = b->have_chunk ? b->seq + 1 : 0;
    if (seq != want || (b->have_chunk && b->last)) {
        kl_fail(&err, KL_FAILED_PRECONDITION, "backup_seq",
                "chunk %llu cannot be read now: the stream %s; a stream is read in order once",
                (unsigned long long)seq, b->have_chunk && b->last ? "has ended" : "is elsewhere");
        kl_rpc_reply_error(call, &err, NULL);
        return;
    }
    b->seq = seq;
    b->have_chunk = false;
    b->busy = true;
    b->call = call;
    b->work.data = b;
    if (uv_queue_work(s->timer.loop, &b->work, chunk_work, chunk_done) != 0) {
        b->busy = false;
        kl_fail(&err, KL_UNAVAILABLE, "backup_queue", "the chunk read could not be started; start the backup again");
        reply_error(b, &err);
        stream_free(b);
    }
}

static void stream_unknown(kl_rpc_call *call, uint64_t id)
{
    kl_err err;
    kl_fail(&err, KL_NOT_FOUND, "backup_stream",
            "no backup stream %016llx on this member: it was closed (idle for %d ms, older than %d ms, "
            "or ended) or is held by another member; start the backup again",
            (unsigned long long)id, KL_BACKUP_IDLE_MS, KL_BACKUP_STREAM_MAX_MS);
    kl_rpc_reply_error(call, &err, NULL);
}

void kl_service_backup_chunk(void *owner, kl_rpc_call *call)
{
    kl_service *s = owner;
    kl_err err;
    size_t len;
    const uint8_t *p = kl_rpc_call_payload(call, &len);
    Keyload__V1__BackupChunkRequest *req = keyload__v1__backup_chunk_request__unpack(NULL, len, p);
    if (req == NULL) {
        kl_fail(&err, KL_INVALID_ARGUMENT, "request", "BackupChunkRequest does not decode");
        kl_rpc_reply_error(call, &err, NULL);
        return;
    }
    uint64_t id = req->stream, seq = req->seq;
    keyload__v1__backup_chunk_request__free_unpacked(req, NULL);
    if (require_cluster_admin(s, call, &err) != KL_OK) {
        kl_rpc_reply_error(call, &err, NULL);
        return;
    }
    backup_stream *b = find_stream(s, id);
    if (b == NULL || b->closing || b->reader == NULL) {
        stream_unknown(call, id);
        return;
    }
    chunk_request(s, b, call, seq);
}

/* ---- close, expiry, stop */

static void stream_close(backup_stream *b, const char *why)
{
    KL_INFO("backup_close", "stream=%016llx why=%s", (unsigned long long)b->id, why);
    if (b->busy) {
        b->closing = true; /* the work item's callback frees it */
        return;
    }
    stream_free(b);
}

void kl_service_backup_close(void *owner, kl_rpc_call *call)
{
    kl_service *s = owner;
    kl_err err;
    size_t len;
    const uint8_t *p = kl_rpc_call_payload(call, &len);
    Keyload__V1__BackupCloseRequest *req = keyload__v1__backup_close_request__unpack(NULL, len, p);
    if (req == NULL) {
        kl_fail(&err, KL_INVALID_ARGUMENT, "request", "BackupCloseRequest does not decode");
        kl_rpc_reply_error(call, &err, NULL);
        return;
    }
    uint64_t id = req->stream;
    keyload__v1__backup_close_request__free_unpacked(req, NULL);
    if (require_cluster_admin(s, call, &err) != KL_OK) {
        kl_rpc_reply_error(call, &err, NULL);
        return;
    }
    backup_stream *b = find_stream(s, id);
    if (b != NULL && !b->closing)
        stream_close(b, "closed by the caller");
    uint8_t none[1];
    kl_rpc_reply(call, none, 0); /* closing a stream that is gone already is done too */
}

void kl_service_backup_tick(kl_service *s)
{
    if (s->backups == NULL)
        return;
    int64_t now = kl_service_mono_ms();
    for (int i = 0; i < KL_BACKUP_MAX_STREAMS; i++) {
        backup_stream *b = &s->backups->slot[i];
        if (b->id == 0 || b->closing)
            continue;
        if (now - b->opened_ms >= KL_BACKUP_STREAM_MAX_MS)
            stream_close(b, "KL_BACKUP_STREAM_MAX_MS");
        else if (!b->busy && now - b->last_ms >= KL_BACKUP_IDLE_MS)
            stream_close(b, "KL_BACKUP_IDLE_MS");
    }
}

void kl_service_backup_stop(kl_service *s)
{
    if (s->backups == NULL)
        return;
    kl_err err;
    kl_fail(&err, KL_UNAVAILABLE, "backup_stopping", "this member is stopping; start the backup again");
    for (int i = 0; i < KL_BACKUP_MAX_STREAMS; i++) {
        backup_stream *b = &s->backups->slot[i];
        if (b->id == 0)
            continue;
        reply_error(b, &err);
        b->closing = true;
        if (!b->busy)
            stream_free(b);
    }
    /* Busy slots are freed by their work callbacks, which the loop runs before the store
     * closes (main runs the loop to the end first); the array then stays until exit. */
    for (int i = 0; i < KL_BACKUP_MAX_STREAMS; i++)
        if (s->backups->slot[i].id != 0)
            return;
    free(s->backups);
    s->backups = NULL;
}
