/* keys: the RocksDB key layout of one member's store. All integers are big-endian so
 * that byte order equals numeric order; every key starts with a one-byte tag.
 *
 *   'M' name                         meta: "format" FormatRecord, "applied" u64,
 *                                    "hard" HardState, "pinc" partition incarnation (16 B),
 *                                    "next_queue" u64 (next queue id to allocate; partition
 *                                    0 allocates them for the whole cluster),
 *                                    "next_database" u64 (partition 0),
 *                                    "catalog_version" u64 (catalog version applied here),
 *                                    "catalog_changes" u64 (catalog changes applied here),
 *                                    "cluster_admins" u64 (partition 0: 0 until bootstrap),
 *                                    "member_keys" u64 (partition 0: 'C' 'M' records, bounded),
 *                                    "transfer_hold" u64 (partition time Complete is held
 *                                    until by a backup, engine/hold.h; absent: none),
 *                                    "outcome_mark" mark(8) cursor(8): the outcome low-water
 *                                    mark and the expiry time the sweep has reached
 *                                    "log_start", "install" (store.h: log compaction and
 *                                    snapshot install; local, like "format"/"hard"/"applied")
 *   'C' 'T' tenant                   CatalogTenant   } the catalog: authoritative on
 *   'C' 'D' tenant 0 database        CatalogDatabase } partition 0, a copy (as of this
 *   'C' 'Q' tenant 0 database 0 queue CatalogQueue   } log position) on data partitions
 *   'C' 'P' tenant 0 principal        CatalogPrincipal (same as the other 'C' records)
 *   'C' 'I' principal                tenant (raw bytes): principal ids are unique across the
 *                                    cluster, so a session's Hello (which names only the id)
 *                                    finds its record; written with every 'C' 'P' record
 *   'C' 'V' version(8)               CatalogChange (partition 0 only: what tails read)
 *   'C' 'M' partition(8) member(8)   CatalogMemberKey: the key partition 0 trusts for a
 *                                    member admitted after the cluster file (or its removal)
 *   'L' index(8)                     log entry (LogEntry); the synced write of a commit
 *   'N' tenant 0 database 0 queue    queue id (u64) by name
 *   'Q' qid(8)                       QueueRecord (limits, counters, next_seq)
 *   'G' qid(8) lane 0 seq(8)         MessageRecord
 *   'A' qid(8) lane 0 seq(8)         empty: the message is available (lane order = seq order)
 *   'T' qid(8) time(8) seq(8)        lane: the message is leased or delayed until `time`
 *   'K' token(16)                    LeaseRecord: which message a lease token names
 *   'O' principal 0 command_id(16)   OutcomeRecord of a committed batch (or committed refusal)
 *   'E' time(8) principal 0 command_id(16)  empty: the outcome of that batch expires once the
 *                                    low-water mark passes `time` (only expiring outcomes)
 *   'X' qid(8) lane 0 transfer(16)   TransferRecord: a source intent (never expired)
 *   'Y' db(8) qid(8) lane 0 transfer(16)  empty: the intent is OutputPending (db = database id)
 *   'R' qid(8) srcqueue 0 srclane 0 transfer(16)  DedupRecord on the destination queue qid
 *                                    (never expired; tenant/database are qid's own)
 *   'W' qid(8) lane                  LaneTransferRecord: retained transfer records/bytes and
 *                                    the lane's pause switch
 *
 * Invariants (checked by the engine's tests): a message has a 'G' record and exactly one
 * of 'A' or 'T'; a 'K' record exists exactly while its message's lease_token equals it;
 * QueueRecord.messages/bytes equal the count/sum of the queue's 'G' records; a queue has
 * 'N'/'Q' records on a partition only while that partition's catalog copy defines it there
 * (or it is deleted and awaiting the catalog's drop); "catalog_changes" equals
 * "catalog_version" (every version applied exactly once, in order); a 'C' 'I' record exists
 * exactly for each 'C' 'P' record and names its tenant; a 'Y' record exists exactly for
 * each 'X' record in state OutputPending; a lane's 'W' records/bytes equal the count and
 * charged bytes of its 'X' records (source) plus its 'R' records (destination); 'X' and
 * 'R' records are never deleted while their queue exists.
 * Names never contain NUL (validation refuses it), which keeps the 0 separators unique. */
#ifndef KL_KEYS_H
#define KL_KEYS_H

#include "common/limits.h"

#include <stddef.h>
#include <stdint.h>


typedef struct kl_key {
    uint8_t b[KL_KEY_MAX];
    size_t len;
} kl_key;

void kl_be64_put(uint8_t *p, uint64_t v);
uint64_t kl_be64_get(const uint8_t *p);

void kl_key_meta(kl_key *k, const char *name);
void kl_key_log(kl_key *k, uint64_t index);
void kl_key_queue_name(kl_key *k, const char *tenant, const char *database, const char *queue);
void kl_key_queue(kl_key *k, uint64_t qid);
void kl_key_message(kl_key *k, uint64_t qid, const char *lane, uint64_t seq);
void kl_key_available(kl_key *k, uint64_t qid, const char *lane, uint64_t seq);
/* Prefix of every 'A' key of one lane (seq omitted). */
void kl_key_available_lane(kl_key *k, uint64_t qid, const char *lane);
void kl_key_timed(kl_key *k, uint64_t qid, int64_t time_ms, uint64_t seq);
/* Prefix of every 'T' key of one queue. */
void kl_key_timed_queue(kl_key *k, uint64_t qid);
void kl_key_lease(kl_key *k, const uint8_t token[16]);
void kl_key_outcome(kl_key *k, const char *principal, const uint8_t command_id[16]);
void kl_key_outcome_expiry(kl_key *k, int64_t time_ms, const char *principal, const uint8_t command_id[16]);
/* 'E' key -> its time and the 'O' key of the outcome it names; -1 when not an 'E' key. */
int kl_key_parse_outcome_expiry(const uint8_t *key, size_t len, int64_t *time_ms, kl_key *outcome);
void kl_key_catalog_tenant(kl_key *k, const char *tenant);
void kl_key_catalog_database(kl_key *k, const char *tenant, const char *database);
void kl_key_catalog_queue(kl_key *k, const char *tenant, const char *database, const char *queue);
void kl_key_catalog_change(kl_key *k, uint64_t version);
void kl_key_catalog_principal(kl_key *k, const char *tenant, const char *principal_id);
void kl_key_catalog_principal_index(kl_key *k, const char *principal_id);
void kl_key_catalog_member_key(kl_key *k, int partition, uint64_t member);

void kl_key_transfer(kl_key *k, uint64_t qid, const char *lane, const uint8_t transfer_id[16]);
void kl_key_transfer_pending(kl_key *k, uint64_t db, uint64_t qid, const char *lane,
                             const uint8_t transfer_id[16]);
/* Prefix of the 'Y' keys of one database (qid 0, lane NULL), one queue (lane NULL) or one lane. */
void kl_key_transfer_pending_prefix(kl_key *k, uint64_t db, uint64_t qid, const char *lane);
void kl_key_transfer_dedup(kl_key *k, uint64_t dest_qid, const char *src_queue, const char *src_lane,
                           const uint8_t transfer_id[16]);
void kl_key_lane_transfers(kl_key *k, uint64_t qid, const char *lane);
/* Prefix of a queue's 'W' keys (lane omitted). */
void kl_key_lane_transfers_queue(kl_key *k, uint64_t qid);
/* 'Y' key -> its qid, lane (pointer into key, lane_len bytes, no NUL) and transfer id. */
int kl_key_parse_transfer_pending(const uint8_t *key, size_t len, uint64_t *qid, const uint8_t **lane,
                                  size_t *lane_len, const uint8_t **transfer_id);

/* Decoders for the fixed-layout keys; return 0 on success, -1 when the key is not of that kind. */
int kl_key_parse_timed(const uint8_t *key, size_t len, uint64_t *qid, int64_t *time_ms, uint64_t *seq);
int kl_key_parse_available(const uint8_t *key, size_t len, uint64_t *qid, uint64_t *seq);

#endif
