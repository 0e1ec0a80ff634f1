/* snapshot: a member's replicated state as a stream of bounded, digested chunks, and the
 * staged, resumable install of such a stream (ARCHITECTURE.md "Store layout").
 *
 * Production reads a RocksDB snapshot (a sequence-number pin) through an iterator, not a
 * checkpoint: it needs no flush, no disk space and no directory of hard links, its view is
 * exact at the applied index read through it, it skips the member's own keys while it
 * streams (a checkpoint would copy the log and the hard state and need filtering later),
 * and it costs nothing until read. What it pins (old SST files, memtable contents) is
 * released by kl_snap_reader_close, so a reader must not be kept open for long.
 *
 * Install stages the stream as SST files (rocksdb SstFileWriter) in "<store dir>/install"
 * and ingests them, rather than writing a staging RocksDB: the stream is already sorted,
 * so each record is written once into its final file format with O(block) memory, and
 * kl_store_install adds the files with one atomic ingestion (a sequential file copy)
 * instead of writing every record a second time through the WAL and the memtable. Nothing
 * live changes until every chunk is verified.
 *
 * Chunk (all integers big-endian):
 *   "KLSC" version(4) index(8) term(8) seq(8) flags(4) after_len(4) after body_len(4) body
 *   digest(32)
 * digest = BLAKE2b-256(previous chunk's digest, or 32 zero bytes for seq 0 || every byte of
 * this chunk before the digest): a running digest, so the last chunk's digest covers the
 * whole stream and each chunk is checked on arrival. after = the last key of the chunks
 * before (the resume position); flags bit 0 = the last chunk.
 *   seq 0 body: key_count(8) config_len(4) config     (the header; never the last chunk)
 *   seq >= 1 body: records key_len(4) key value_len(4) value, keys strictly increasing.
 * A snapshot never holds a local key (kl_store_key_is_local: the log, term, vote, identity,
 * format record, applied index or log start); the receiver refuses one that does.
 *
 * Errors of the install (what the caller does about each):
 *   UNAVAILABLE "snapshot_digest"     the chunk does not match its digest (damaged on the
 *                                     way); nothing of it was kept: resend from
 *                                     kl_snap_install_pos.
 *   FAILED_PRECONDITION "snapshot_resume"   not the chunk expected next (seq/after); resend
 *                                     from kl_snap_install_pos.
 *   FAILED_PRECONDITION "snapshot_mismatch" a chunk of another snapshot than the staged one;
 *                                     start again from seq 0.
 *   FAILED_PRECONDITION "snapshot_stale"    the snapshot is not past the applied index.
 *   FAILED_PRECONDITION "snapshot_corrupt"  a malformed chunk, or a digest-valid stream
 *                                     whose records break the format (order, local key,
 *                                     size, key count): the staging is discarded.
 * Thread-safety: one reader or one install per thread; the install and kl_store_install run
 * on the loop thread with applies and log writes stopped. */
#ifndef KL_SNAPSHOT_H
#define KL_SNAPSHOT_H

#include "common/limits.h"
#include "common/status.h"
#include "daemon/store/store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KL_SNAP_VERSION 1
#define KL_SNAP_DIGEST_BYTES 32
#define KL_SNAP_FLAG_LAST 1u

/* Where a stream stands: what the receiver asks the sender to resume from after a cut
 * (kl_snap_install_pos), and what kl_snap_reader_seek resumes at. */
typedef struct kl_snap_pos {
    uint64_t seq;                          /* the next chunk's number */
    uint8_t after[KL_KEY_MAX];             /* the last key received (after_len 0: none) */
    size_t after_len;
    uint8_t digest[KL_SNAP_DIGEST_BYTES];  /* running digest through chunk seq - 1 */
    uint64_t keys;                         /* records received so far */
} kl_snap_pos;

/* ---- Production. */
typedef struct kl_snap_reader kl_snap_reader;

/* Pins the store's current state and describes it: index = the applied index seen through
 * the pin, term = that entry's term (from the log, or log_start when it was compacted),
 * key_count = the state records. config (at most KL_SNAP_CONFIG_MAX bytes, copied) is the
 * membership configuration as of index, opaque here. Cost: one pass over the whole state
 * to count its keys (reads every block once, bypassing the block cache), cut into up to
 * four key ranges counted on threads of their own, which the call joins; memory O(1).
 * Refused: INVALID_ARGUMENT "config" when config is too long. Any thread (the applied index
 * it reads is atomic): the repl driver opens on libuv's thread pool, where the configuration
 * as of the pinned index is not known yet, and sets it with kl_snap_reader_set_config. */
kl_code kl_snap_reader_open(kl_store *st, const uint8_t *config, size_t config_len, kl_snap_reader **out,
                            kl_err *err);
/* Replaces the configuration the header chunk carries (copied); only before the first
 * kl_snap_reader_next. Refused as kl_snap_reader_open refuses it. */
kl_code kl_snap_reader_set_config(kl_snap_reader *r, const uint8_t *config, size_t config_len, kl_err *err);
void kl_snap_reader_meta(const kl_snap_reader *r, uint64_t *index, uint64_t *term, uint64_t *key_count);
/* Resumes at pos (as the receiver reported it) instead of where the reader stands. O(log n)
 * seek on the next kl_snap_reader_next. */
void kl_snap_reader_seek(kl_snap_reader *r, const kl_snap_pos *pos);
/* The next chunk: *chunk points into the reader (valid until the next call or close), at
 * most KL_SNAP_CHUNK_MAX bytes; *last is set with the last one. After the last, returns a
 * zero-length chunk. Cost: reads about KL_SNAP_CHUNK_BYTES of state. Errors: INTERNAL
 * "snapshot_value" for a value over KL_SNAP_VALUE_MAX, INTERNAL "store" for a read error.
 * Any thread, one at a time per reader. */
kl_code kl_snap_reader_next(kl_snap_reader *r, const uint8_t **chunk, size_t *len, bool *last, kl_err *err);
void kl_snap_reader_close(kl_snap_reader *r);

/* ---- Install. */
typedef struct kl_snap_install kl_snap_install;

/* Opens the staging area "<store dir>/install", resuming a staged snapshot left by a
 * previous process at the last staged file it finished (a partial file is dropped), and
 * discarding one that is not past the applied index. Cost: a few file operations. */
kl_code kl_snap_install_open(kl_store *st, kl_snap_install **out, kl_err *err);
/* What is staged: *staged false when nothing (ask for seq 0); else the snapshot's index and
 * term and the position to resume from. */
void kl_snap_install_pos(const kl_snap_install *in, bool *staged, uint64_t *index, uint64_t *term,
                         kl_snap_pos *pos);
/* Verifies one chunk against its running digest, then stages its records (seq 0 starts a
 * new staging, replacing any other). *done is set when the last chunk was staged and the
 * key count matches: then call kl_snap_install_commit. Every KL_SNAP_STAGE_FILE_BYTES the
 * staged file is finished and synced and the resume point saved (what a restart keeps).
 * Memory: O(chunk) (the caller's buffer) plus the SST writer's block; never the state.
 * Errors: see the header comment. */
kl_code kl_snap_install_chunk(kl_snap_install *in, const uint8_t *chunk, size_t len, bool *done,
                              kl_err *err);
/* Replaces the live state with the complete staged snapshot (kl_store_install: atomic,
 * synced; the member's term, vote and identity kept; applied = commit = index; the log
 * starts at index + 1). FAILED_PRECONDITION "snapshot_incomplete" before the last chunk. */
kl_code kl_snap_install_commit(kl_snap_install *in, kl_err *err);
/* Drops whatever is staged (files and resume point). */
void kl_snap_install_discard(kl_snap_install *in);
/* Test hook: finish a staged file (and save the resume point) once it holds `bytes`
 * instead of KL_SNAP_STAGE_FILE_BYTES, so that tests resume mid-stream with little data. */
void kl_snap_install_debug_file_bytes(kl_snap_install *in, uint64_t bytes);
/* Closes without dropping: the staged files up to the last resume point stay. */
void kl_snap_install_close(kl_snap_install *in);

#endif
