/* store: one member's RocksDB instance holding both the replication log and the
 * partition state (ARCHITECTURE.md "Store layout"), and the journal that makes the log's
 * writes durable (store/journal.h). The log is in its
 * own column family (KL_STORE_LOG_FAMILY), the state and the member's meta records in the
 * default one; a store of the older one-family layout has its log moved at open.
 *
 *  - kl_store_log_write: the replication round's durable write (hard state, truncation,
 *    log entries) in one WriteBatch, synced in the store's journal (store/journal.h) before
 *    it returns and then written to RocksDB without its WAL; once it returns, the entries
 *    survive kill -9 and power loss, and kl_store_last_index moves. The open replays the
 *    journal after RocksDB's own recovery.
 *  - kl_store_apply: writes one committed entry's write-sets together with
 *    'M'"applied" in one WriteBatch that bypasses the WAL (so it is never synced); of several
 *    writes of one key in the entry only the last goes into the batch, in key order
 *    (store/last_write). A crash
 *    may lose it, state and applied index together; recovery re-applies every logged
 *    entry after `applied` (kl_store_applied_index).
 *  - The format record is checked at open: format_version must be known, unknown
 *    incompat bits refuse to open, unknown ro_compat bits refuse a writable open
 *    (keyloadd always writes), unknown compat bits are fine. Its identity (cluster,
 *    partition, member) must match the configured one (kl_store_options).
 * Thread-safety: RocksDB is thread-safe; by convention only kl_store_log_write (and the
 * test helper kl_store_append) runs off the loop thread, on the replication driver's
 * persistence worker; everything else runs on the loop thread. */
#ifndef KL_STORE_H
#define KL_STORE_H

#include "common/status.h"
#include "keyload/v1/store.pb-c.h"

#include <rocksdb/c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KL_FORMAT_VERSION 1
/* Feature flags known to this binary (ext4 style). */
#define KL_FEAT_INCOMPAT_WRITESET_LOG (1ull << 0) /* log entries are write-set lists */
/* The store may hold remote-transfer records ('X', 'Y', 'R', 'W' keys and the catalog's
 * transfers_paused switches). Compat: a binary that does not know them opens the store,
 * serves everything else and never touches them, which leaves every intent and receipt in
 * place and transfers paused (ARCHITECTURE.md "Store layout"). */
#define KL_FEAT_COMPAT_TRANSFERS (1ull << 0)
#define KL_FEAT_COMPAT_KNOWN KL_FEAT_COMPAT_TRANSFERS
#define KL_FEAT_RO_COMPAT_KNOWN 0ull
/* The log is in the column family KL_STORE_LOG_FAMILY, not under 'L' in the default one. A
 * binary without the family cannot open the store at all (RocksDB refuses a store whose
 * families it does not name), so the flag records the layout rather than guards it. */
#define KL_FEAT_INCOMPAT_LOG_FAMILY (1ull << 1)
/* The log's synced writes are in the journal (store/journal.h), and a crash leaves records
 * there that RocksDB does not hold: a binary that does not replay it would start from an
 * older log and hard state, so it must refuse the store. Set at the first open by a
 * binary with the journal, before its first journal record. */
#define KL_FEAT_INCOMPAT_JOURNAL (1ull << 2)
/* The journal writes segments whose frames are checked by CRC-32C (journal.h). A binary that
 * knows only the BLAKE2b segments would take such a segment for the remains of an
 * interrupted recycle and delete it, losing synced records, so it must refuse the store.
 * Set at the first open by a binary that writes them, before the journal opens. */
#define KL_FEAT_INCOMPAT_JOURNAL_CRC32C (1ull << 3)
#define KL_FEAT_INCOMPAT_KNOWN                                                                       \
    (KL_FEAT_INCOMPAT_WRITESET_LOG | KL_FEAT_INCOMPAT_LOG_FAMILY | KL_FEAT_INCOMPAT_JOURNAL |          \
     KL_FEAT_INCOMPAT_JOURNAL_CRC32C)
#define KL_STORE_LOG_FAMILY "log"

typedef struct kl_store kl_store;

/* The member a store belongs to (the FormatRecord's identity). */
typedef struct kl_store_identity {
    const char *cluster;
    const uint8_t *cluster_id; /* 16 bytes (kl_store_cluster_id), or NULL without a secret */
    uint32_t partition;
    uint64_t member;
} kl_store_identity;

typedef struct kl_store_options {
    size_t write_buffer_bytes;  /* memtable size (two of them at most) */
    size_t block_cache_bytes;
    size_t journal_segment_bytes; /* the journal's segment size (store/journal.h) */
    /* May create a new store. False: a directory without a format record is refused
     * (FAILED_PRECONDITION, detail "init_store"): an emptied directory must not pass for a
     * new member, because the member it was cannot remember the terms it voted in. */
    bool init;
    /* Checked against the stored identity (FAILED_PRECONDITION, detail "store_identity",
     * naming both); recorded in a new store and in one made before identities existed.
     * NULL: not checked. */
    const kl_store_identity *identity;
} kl_store_options;

/* The 16-byte cluster id recorded in a store: a keyed hash of the cluster secret, so that a
 * store of another cluster with the same name is told apart without keeping the secret. */
void kl_store_cluster_id(const uint8_t *cluster_secret, size_t len, uint8_t out[16]);

void kl_store_options_default(kl_store_options *o);

/* Opens the store in dir, creating it when empty only if opt->init (NULL opt: defaults,
 * which may create and check no identity), then replays the journal. A corrupt synced WAL
 * or journal record refuses to open (FAILED_PRECONDITION, detail "wal_corrupt" or
 * "journal_corrupt"); a torn last record of a write that never finished syncing is
 * dropped, as it was never acknowledged. */
kl_code kl_store_open(const char *dir, const kl_store_options *opt, kl_store **out, kl_err *err);
void kl_store_close(kl_store *st);

const uint8_t *kl_store_incarnation(const kl_store *st); /* 16 bytes */
/* Whether a write of this store failed; then *out is the first failure's error. After one
 * failure every later write is refused (a failed write or fsync leaves nothing trusted):
 * the member must exit and recover from the durable log. Any thread. */
bool kl_store_first_failure(kl_store *st, kl_err *out);
uint64_t kl_store_applied_index(const kl_store *st);
/* Whether the journal writes its active segment with O_DIRECT (store/journal.h "Direct
 * appends"); false without a journal. Any thread. */
bool kl_store_journal_direct(kl_store *st);
/* Moves whenever state keys change other than by kl_store_apply (a snapshot install, at
 * its start and its end; kl_store_write_local): a cache of applied values that followed
 * every apply is still exact only while this stays (engine/view.h "Read cache"). */
uint64_t kl_store_state_gen(const kl_store *st);
uint64_t kl_store_last_index(const kl_store *st);
rocksdb_t *kl_store_db(kl_store *st);
/* The log's column family: 'L' keys (kl_key_log) live only there. */
rocksdb_column_family_handle_t *kl_store_log_family(kl_store *st);

/* Point read of applied state. On found, *val is malloc'd (caller frees). */
kl_code kl_store_get(kl_store *st, const uint8_t *key, size_t klen, uint8_t **val, size_t *vlen,
                     bool *found, kl_err *err);
/* A new iterator over applied state; caller destroys it with rocksdb_iter_destroy. */
rocksdb_iterator_t *kl_store_iterator(kl_store *st);
/* A new iterator over the log family ('L' keys only); caller destroys it likewise. */
rocksdb_iterator_t *kl_store_log_iterator(kl_store *st);
/* The u64 meta record `meta` ('M' key) of applied state; 0 when absent, INTERNAL when it is
 * not 8 bytes. "catalog_version" and "catalog_changes" come from a cache that applies and
 * installs keep current, so reading them costs no RocksDB read (loop thread only). */
kl_code kl_store_meta_u64(kl_store *st, const char *meta, uint64_t *out, kl_err *err);

/* Appends encoded entry `index` (must be last_index + 1), synced through the journal; unit tests write
 * logs with it, the daemon uses kl_store_log_write. Updates last_index on success. */
kl_code kl_store_append(kl_store *st, uint64_t index, const uint8_t *entry, size_t len, kl_err *err);
/* A synced write, through RocksDB's WAL, of this member's own records ("hard" and log
 * entries: a restore's bridge) outside kl_store_log_write. It flushes and cuts the journal
 * first, so no older journal record replays over it. Cost: a flush and a sync besides the
 * write: never per request. */
kl_code kl_store_write_local(kl_store *st, rocksdb_writebatch_t *wb, kl_err *err);
/* One log record for kl_store_log_write: the encoded LogEntry stored under 'L' index. */
typedef struct kl_store_log_item {
    uint64_t index;
    const uint8_t *bytes;
    size_t len;
} kl_store_log_item;

/* The durable half of a replication round, in one synced WriteBatch: the hard state (when
 * not NULL), removal of every log entry >= truncate_from (when nonzero), and the items
 * (consecutive indexes, starting at truncate_from when truncating, else at last_index + 1).
 * Safe to call from the persistence worker while the loop thread reads and applies. */
kl_code kl_store_log_write(kl_store *st, const Keyload__V1__HardState *hard, uint64_t truncate_from,
                           const kl_store_log_item *items, size_t n, kl_err *err);
/* How long the sync of the last successful kl_store_log_write took (ns, CLOCK_MONOTONIC):
 * the part of a log write the disk decides, beside RocksDB's own work. Read it after that
 * write returned and before the next one starts; 0 before the first one. */
uint64_t kl_store_last_log_sync_ns(const kl_store *st);
/* The persisted hard state (all zero for a new store). Its commit index is the one the last
 * synced write carried: applied state may be ahead of it, which is why the replication core
 * starts from max(commit, applied index). */
kl_code kl_store_load_hard(kl_store *st, uint64_t *term, uint64_t *vote, uint64_t *commit, kl_err *err);

/* Reads an encoded log entry; *found false past the end and below kl_store_first_index. */
kl_code kl_store_read_log(kl_store *st, uint64_t index, uint8_t **entry, size_t *len, bool *found,
                          kl_err *err);
/* Applies one committed entry (index must be applied_index + 1): every write-set whose
 * outcome key is not yet present, plus the partition incarnation of the first entry,
 * plus 'M'"applied", in one unsynced WriteBatch. */
kl_code kl_store_apply(kl_store *st, const Keyload__V1__LogEntry *entry, kl_err *err);

/* ---- Log compaction and snapshot install (ARCHITECTURE.md "Store layout").
 * The log starts at first_index; 'M'"log_start" records (first_index, prev_term, config):
 * the term of entry first_index - 1 and the membership configuration as of it, both opaque
 * to the store except prev_term. A store without the record starts at 1 (prev_term 0, no
 * configuration). Local keys (the log, and the meta records "format", "hard", "applied",
 * "log_start", "install") belong to this member; every other key is replicated state,
 * which a snapshot carries and an install replaces. */

/* True for a key that is this member's own (see above), never part of a snapshot. O(1). */
bool kl_store_key_is_local(const uint8_t *key, size_t len);

/* Makes the applied state durable: applies skip the WAL, so this flushes the memtables to
 * SST files and waits for the flush (RocksDB syncs the files and the MANIFEST). Returns in
 * *durable the applied index that a crash can no longer roll back below. Cost: one flush of
 * up to two memtables (kl_store_options.write_buffer_bytes each), written and fsynced on
 * RocksDB's flush thread while the caller blocks (tens of ms for 8 MiB); the persistence
 * worker's log writes go on meanwhile. Loop thread only (it reads the applied index). */
kl_code kl_store_make_durable(kl_store *st, uint64_t *durable, kl_err *err);
/* kl_store_make_durable in two halves, for a caller that must not block its loop on the
 * flush (the replication driver's compaction, ARCHITECTURE.md "Snapshots and log
 * compaction"): read applied = kl_store_applied_index on the loop thread, then run
 * kl_store_flush on any thread (a flush covers every write made before it starts, applies
 * racing it included), then, back on the loop thread, kl_store_note_durable(applied).
 * Only an index read before the flush started may be noted: that is what makes it durable. */
kl_code kl_store_flush(kl_store *st, kl_err *err);
void kl_store_note_durable(kl_store *st, uint64_t applied);
/* The applied index last made durable (kl_store_make_durable, an install, or the open). */
uint64_t kl_store_durable_applied(const kl_store *st);
/* First index the log holds (1 until a compaction or install); the log is empty when it
 * exceeds kl_store_last_index. Any thread. */
uint64_t kl_store_first_index(const kl_store *st);
/* The 'M'"log_start" record: first index, term of the entry before it, and the
 * configuration bytes given to the compaction or install that wrote it (*config malloc'd,
 * NULL when none; caller frees). One point read. */
kl_code kl_store_log_start(kl_store *st, uint64_t *first, uint64_t *prev_term, uint8_t **config,
                           size_t *config_len, kl_err *err);
/* Deletes every log entry with index < first: the new 'M'"log_start" record, synced, is
 * what deletes them (every read of the log starts there); kl_store_drop_compacted_log
 * frees their disk later. config: the configuration as of entry first - 1
 * (at most KL_SNAP_CONFIG_MAX bytes; stored, not interpreted). Refused with
 * FAILED_PRECONDITION "compact_not_durable" when entry first - 1 is not durably applied
 * (first - 1 > kl_store_durable_applied): a crash would roll the state back below the log
 * and the entries to re-apply would be gone. first <= kl_store_first_index is a no-op.
 * Cost: one synced write of O(1) bytes and one point read of entry first - 1 for its
 * term. Loop thread only. */
kl_code kl_store_compact_log(kl_store *st, uint64_t first, const uint8_t *config, size_t config_len,
                             kl_err *err);
/* Drops the log family's files that hold only entries below kl_store_first_index (RocksDB
 * DeleteFilesInRange): how compacted entries leave the disk. A file that also holds later
 * entries stays until a later call covers it, so the disk holds at most about one flushed
 * log memtable of compacted entries once this ran. Nothing reads what it drops, so it may
 * run at any time after kl_store_compact_log, or never (a crash in between leaves the files
 * to the next call). A failure is a failed write (kl_store_first_failure). Cost: one
 * MANIFEST write and sync and the unlinks, when a file goes: milliseconds (about 10 ms in a
 * 64-in-flight cell), so not on the loop thread. Any thread; one call at a time. */
kl_code kl_store_drop_compacted_log(kl_store *st, kl_err *err);
/* Where staged snapshot files live: "<store dir>/install" (kl_snap_install). */
const char *kl_store_dir(const kl_store *st);
/* A staged file "<store dir>/install/%06u.sst" with a file of this suffix in place of
 * ".sst" beside it is ingested by copy; every other one by a hard link (kl_store_install). */
#define KL_STORE_INSTALL_COPY_SUFFIX ".copy"
/* Replaces the replicated state with the nfiles SST files <store dir>/install/%06u.sst
 * (0 .. nfiles-1, sorted, non-overlapping, no local key; written by kl_snap_install) as the
 * state at snapshot (index, term). Atomic as seen by any later open: a synced 'M'"install"
 * marker is written together with the deletion of the old state and log; the files are
 * then ingested, and a final synced batch sets "applied" = index, "log_start"
 * = (index + 1, term, config), the hard state's commit = index (term and vote kept), and
 * removes the marker. kl_store_open finds a marker left by a crash and finishes the same
 * steps from the staged files, so a crash leaves the old state (before the marker) or the
 * new one (after), never a mix. The staged files are removed at the end. Refused with
 * FAILED_PRECONDITION "snapshot_stale" when index <= the applied index. Any other error
 * once the marker is written leaves the store refusing every write: the member must close
 * it and exit, and the next open finishes the install. The caller must
 * have stopped applies and log writes (no persistence-worker write in flight).
 * Ingestion never changes a staged original, so the open can ingest it again: the old
 * state is first compacted away (tombstones included), then the files of keys below or
 * above the local range ('L', 'M') are hard-linked in, which RocksDB does without writing
 * into them because they overlap nothing, and the few files marked
 * KL_STORE_INSTALL_COPY_SUFFIX (replicated 'M' records, which lie between local ones) are
 * copied. While a RocksDB snapshot is held every file is copied. Cost: two synced writes,
 * a compaction of the old state, a copy of the marked files, memory O(nfiles); the state is
 * on disk once (the staged files become the store's). */
kl_code kl_store_install(kl_store *st, uint32_t nfiles, uint64_t index, uint64_t term,
                         const uint8_t *config, size_t config_len, kl_err *err);

/* Test hook: rewrites the format record's flags (to prove refusal of unknown ones). */
kl_code kl_store_debug_set_flags(const char *dir, uint64_t compat, uint64_t ro_compat,
                                 uint64_t incompat, uint32_t version, kl_err *err);

#endif
