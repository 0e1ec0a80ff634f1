/* journal: the store's own write-ahead log for the replication log's synced writes
 * (ARCHITECTURE.md "Store layout", "The journal").
 *
 * Why: an fdatasync that appends to a file also writes its inode (the size changed, an
 * unwritten extent was converted): two I/Os per sync. The journal writes into segments
 * that were filled with zeros (or used before) off the write path, so a sync only
 * overwrites data blocks. RocksDB's own WAL cannot do this under our recovery rule (a
 * torn last record is dropped, any other damage refuses to open): a torn record followed
 * by zeros or by an older file's records reads as damage in the middle of the log.
 *
 * Layout: <dir>/%016llx.seg, one file per segment, named by its sequence number. A segment
 * starts with a 64-byte header (magic, seq, a random nonce, a hash) and holds frames: a
 * 32-byte header (nonce, payload length, type, a check of the header's first 16 bytes and
 * the payload), the payload, zero padding to 8 bytes. The magic names the check: "KLJRNL02"
 * segments, the only ones written, carry the CRC-32C (crc32c.h) and 12 zero bytes;
 * "KLJRNL01" segments, written by binaries before it, carry BLAKE2b-128 and are still
 * replayed at open (the store's KL_FEAT_INCOMPAT_JOURNAL_CRC32C keeps those binaries away
 * from a journal with the newer segments). A frame with another segment's
 * nonce (a recycled segment's old contents) or zeros ends the segment's records. The first
 * frame of every segment but the first written after an open is a link naming the
 * previous segment and the offset its records ended at.
 *
 * Invariants (asserted or checked at open):
 *  - J1 a record is durable once kl_journal_append returned OK: it was written and
 *    fdatasynced, in one write with the link frame when it opens a segment;
 *  - J2 records replay in the order they were appended, across segments by sequence;
 *  - J3 only the last record of the last segment holding records may be damaged (a write
 *    whose sync never returned): it and nothing else is dropped. A damaged record followed
 *    by a valid one of the same segment, a link that does not match the segment before it,
 *    or records in a segment after an empty one refuse to open ("journal_corrupt");
 *  - J4 a segment leaves the directory (unlinked or recycled) only after the owner's flush
 *    callback returned OK having started after the segment's last record was appended, or
 *    by kl_journal_cut, whose caller has made everything durable itself.
 * Direct appends: where the filesystem allows O_DIRECT, the active segment is written
 * through a second descriptor opened with it, in whole 4 KiB blocks: the bytes of the
 * block that already hold records (kept in memory from the last append), the new frames,
 * zeros to the block's end. Why: on a virtual disk each fdatasync of a page-cache write
 * also goes through the filesystem's writeback; a direct write is one request, and the
 * sync then only flushes the device's cache. Measured with three writers syncing 8 KiB
 * each on this project's 2-core VM, rounds alternating: a direct write then fdatasync took
 * 158-210 us and 21-32 us of CPU per sync (4 rounds), a page-cache write then fdatasync
 * 193-345 us and 35-67 us (8 rounds). The rewrite of a block's earlier bytes writes the bytes it
 * already holds, so a torn write leaves each sector old or new and the records in it
 * intact, as the page cache's writeback of a partly written page does. Zeros after the
 * last frame end the segment's records as a fresh segment's zeros do. A filesystem that
 * refuses O_DIRECT (or no memory for a large record's blocks) keeps the segment on the
 * page cache; kl_journal_options.no_direct asks for that everywhere.
 * Threads: one appender at a time (the caller serialises append and cut); a keeper thread
 * prepares spare segments and retires sealed ones; open and close on the owner's thread.
 */
#ifndef KL_STORE_JOURNAL_H
#define KL_STORE_JOURNAL_H

#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kl_journal kl_journal;

/* Makes every record appended so far durable elsewhere (the store flushes its memtables and
 * waits). Called on the keeper thread with no journal lock held. */
typedef kl_code (*kl_journal_flush_fn)(void *arg, kl_err *err);
/* One record found at open, in append order. A failure stops the open with that error. */
typedef kl_code (*kl_journal_replay_fn)(void *arg, const uint8_t *rec, size_t len, kl_err *err);

typedef struct kl_journal_options {
    size_t segment_bytes; /* a segment's size (>= KL_JOURNAL_MIN_SEGMENT); a larger record gets one of its own */
    kl_journal_flush_fn flush;
    void *flush_arg;
    bool no_direct; /* append through the page cache only (tests; filesystems where O_DIRECT misbehaves) */
} kl_journal_options;

/* Opens the journal in dir (created if missing), replays every record through replay, then
 * starts a new segment (created and zero-filled here: up to segment_bytes of writes and a
 * sync) and the keeper thread. A torn last record is dropped (J3); damage anywhere else
 * refuses with FAILED_PRECONDITION "journal_corrupt", naming the segment and offset. */
kl_code kl_journal_open(const char *dir, const kl_journal_options *opt, kl_journal_replay_fn replay,
                        void *replay_arg, kl_journal **out, kl_err *err);
/* Appends one record and syncs it (J1). *sync_ns (may be NULL) gets the fdatasync's time.
 * Cost: one write and one fdatasync (a direct append also copies the record into its
 * blocks); at a segment's end, also the switch to a spare (or,
 * without one ready, the creation of a segment: segment_bytes of zeros written and synced).
 * After any failure every later append fails: nothing written after a failed sync is
 * trusted. */
kl_code kl_journal_append(kl_journal *j, const uint8_t *rec, size_t len, uint64_t *sync_ns, kl_err *err);
/* Retires every segment, the current one included, and starts a new one: for a caller that
 * made every appended record durable elsewhere and is about to write, outside the journal,
 * keys the journal's records also write (J4). Durable when it returns (directory synced). */
kl_code kl_journal_cut(kl_journal *j, kl_err *err);
/* Stops the keeper and closes the files; the segments stay for the next open. */
void kl_journal_close(kl_journal *j);

/* Whether the active segment's appends are direct (see "Direct appends"). Any thread: it
 * may lag a segment switch running on the appender's. */
bool kl_journal_direct(kl_journal *j);
/* For tests: segments in the directory now (live and spare). */
size_t kl_journal_segment_count(kl_journal *j);
/* For tests: waits (at most timeout_ms) until the keeper has nothing left to do. */
kl_code kl_journal_settle(kl_journal *j, int timeout_ms, kl_err *err);

#endif
