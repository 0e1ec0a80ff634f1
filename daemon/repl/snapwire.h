/* snapwire: snapshot streams between the members of a partition, for the replication
 * driver (ARCHITECTURE.md "Replication"; the core's side is raft.h "Snapshots and
 * compaction", the bytes are daemon/store/snapshot.h's chunks).
 *
 * Sending (leader). When the core asks for a snapshot for follower F (a
 * KL_RAFT_MSG_SNAPSHOT in a ready), kl_snapwire_start opens a kl_snap_reader on the store
 * and streams it to F. The reader pins the CURRENT applied state, at an index A that is at
 * least the index I the core named (the core compacted only up to applied entries): every
 * point >= I is committed and as good a snapshot for F, so the stream names the reader's own
 * (A, term at A) and F's core installs and acknowledges A; the leader's progress takes the
 * acknowledgement (A <= the leader's last index) as it takes any. The core's request is
 * answered by kl_raft_report_snapshot exactly once per stream: ok when F reported the last
 * chunk staged (done), not ok when F refused it, the reader failed, the stream made no
 * progress for KL_SNAPWIRE_STALL_MS, or the member stopped leading (a no-op for the core
 * then). A second request for F while a stream runs replaces it without a report (the core
 * only asks again after a report, a lost leadership or a restart).
 *
 * Flow control: a chunk is read and sent only while the chunks past the last one F
 * acknowledged hold fewer than KL_SNAPWIRE_WINDOW_BYTES (common/limits.h) and number fewer
 * than KL_SNAPWIRE_WINDOW; each chunk (<= KL_SNAP_CHUNK_MAX) is cut into pieces that fit a
 * peer frame. The sender's memory is the reader's one chunk; the receiver's is one chunk
 * being reassembled; the peer queue holds the window: under KL_SNAPWIRE_WINDOW_BYTES plus
 * one chunk. Never the state.
 *
 * Resuming: a stream starts with a begin frame; F answers "resume" with its staged position
 * (kl_snap_install_pos: the chunk expected next, the last key and running digest) when it
 * already stages this very snapshot (same index and term, e.g. after a cut or a restart of
 * either side), or from chunk 0. The sender seeks its reader there. A piece that is not the
 * one expected (a frame lost on a dropped connection or a full queue) makes F drop the
 * chunk being reassembled and answer "resume" (once per position); a sender that heard
 * nothing for KL_SNAPWIRE_RESYNC_MS sends the begin frame again.
 *
 * Receiving (follower). Chunks are verified and staged by kl_snap_install_chunk. When the
 * last one is staged, the snapshot (the sender's term, its id and (A, term, configuration))
 * is stepped into the core as a KL_RAFT_MSG_SNAPSHOT; the core then installs it through a
 * ready with has_snapshot, which the driver hands to kl_snapwire_install before anything
 * else of that ready (kl_snap_install_commit: atomic and synced, the member's term, vote
 * and identity kept).
 *
 * Wire: RaftMessage (raft.proto) type 8 (sender to receiver: begin, or one piece) and 9
 * (receiver to sender: resume with a position, ack of every chunk below snap_seq, done,
 * refused), both tagged with the stream id. Frames of another stream are ignored.
 *
 * Threading: loop thread only, but for a reader's open on io.loop's thread pool (which
 * touches only the store and its own slot). Invariants: at most one outgoing stream per
 * follower and one
 * incoming reassembly; outgoing chunks in flight <= KL_SNAPWIRE_WINDOW per stream, their
 * bytes < KL_SNAPWIRE_WINDOW_BYTES + KL_SNAP_CHUNK_MAX. */
#ifndef KL_REPL_SNAPWIRE_H
#define KL_REPL_SNAPWIRE_H

#include "common/status.h"
#include "daemon/repl/raft.h"
#include "daemon/store/store.h"
#include "keyload/v1/raft.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define KL_SNAPWIRE_WINDOW 16          /* chunks in flight per stream (and their bytes: limits.h) */
#define KL_SNAPWIRE_RESYNC_MS 1000     /* silence before the begin frame is sent again */
#define KL_SNAPWIRE_STALL_MS 30000     /* no acknowledged chunk for this long: the stream failed */

#define KL_SNAPWIRE_MSG_DATA 8
#define KL_SNAPWIRE_MSG_ANSWER 9
#define KL_SNAPWIRE_BEGIN 1u
#define KL_SNAPWIRE_RESUME 1u
#define KL_SNAPWIRE_ACK 2u
#define KL_SNAPWIRE_DONE 4u
#define KL_SNAPWIRE_REFUSED 8u

typedef struct kl_snapwire kl_snapwire;

typedef struct kl_snapwire_io {
    /* The loop whose thread pool opens readers (kl_snap_reader_open counts every key of the
     * state: seconds per GiB, which must not hold the leader's loop and its heartbeats).
     * NULL: the reader opens on the caller's thread, inside kl_snapwire_start (tests). */
    uv_loop_t *loop;
    void *ctx;
    /* Packs and sends one frame; false when it was not queued. */
    bool (*send)(void *ctx, uint64_t to, const Keyload__V1__RaftMessage *pm);
    /* kl_raft_report_snapshot. */
    void (*report)(void *ctx, uint64_t to, bool ok);
    /* Steps a staged snapshot into the core; false when the core refused it as malformed. */
    bool (*step)(void *ctx, const kl_raft_msg *m);
    /* Optional: the configuration blob (confstore.h) as of applied index `index` (the point
     * a reader pinned), NULL/0 for the static one; streamed in the snapshot and stored by the
     * install. False when it can no longer tell (a compaction moved past index meanwhile):
     * the stream then fails and the core asks again. */
    bool (*config)(void *ctx, uint64_t index, const uint8_t **blob, size_t *len);
} kl_snapwire_io;

/* piece_max: the bytes of chunk one frame carries (the frame limit minus the framing). */
kl_code kl_snapwire_new(kl_store *st, uint64_t self, size_t piece_max, const kl_snapwire_io *io,
                        kl_snapwire **out, kl_err *err);
/* Closes every reader and the staging (staged files stay for a later resume). A reader
 * still opening on the thread pool is closed, and the rest freed, when its open ends: keep
 * running the loop (the store must stay open until then; uv_run returns only after it). */
void kl_snapwire_free(kl_snapwire *w);

/* Leader: the core's KL_RAFT_MSG_SNAPSHOT m; starts (or replaces) the stream to m->to.
 * With io.loop, the reader opens on its thread pool and the stream's begin frame leaves
 * once it is open; a stream ended (reported) or replaced meanwhile takes the open's result
 * as it comes: closed, or used for the newest request. */
void kl_snapwire_start(kl_snapwire *w, const kl_raft_msg *m, uint64_t now_ms);
/* A type 8 or 9 frame from `from` (already checked to come from and be addressed to the
 * right members). */
void kl_snapwire_recv(kl_snapwire *w, uint64_t from, const Keyload__V1__RaftMessage *pm, uint64_t now_ms);
/* Timers: resync and stall of outgoing streams; every stream ends (reported not ok) when
 * leading is false. */
void kl_snapwire_tick(kl_snapwire *w, bool leading, uint64_t now_ms);
/* True while a complete staged snapshot waits for the core's install ready. */
bool kl_snapwire_install_waiting(const kl_snapwire *w);
/* The driver has no ready outstanding and none to take: a staged snapshot still waiting
 * was answered by the core without an install (its commit covers it, its term is past
 * the sender's, it campaigns): the staged files are dropped. */
void kl_snapwire_settle(kl_snapwire *w);
/* The ready's has_snapshot: commits the staged snapshot, which must be sn's (index, term);
 * FAILED_PRECONDITION "snapshot_not_staged" otherwise. Any other error leaves the store
 * refusing writes (kl_store_install): the member must exit. */
kl_code kl_snapwire_install(kl_snapwire *w, const kl_raft_snapshot *sn, kl_err *err);

typedef struct kl_snapwire_counters {
    uint64_t sent_ok, sent_failed; /* outgoing streams reported ok / not ok */
    uint64_t installed;            /* snapshots installed here */
    uint64_t chunks_sent, chunks_staged, resumes;
} kl_snapwire_counters;
void kl_snapwire_counters_get(const kl_snapwire *w, kl_snapwire_counters *out);

#endif
