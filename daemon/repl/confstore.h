/* confstore: the driver's side of replicated configurations (raft.h "Membership" (a)-(d);
 * ARCHITECTURE.md "Replication").
 *
 * A configuration BLOB is a CONF entry's data as the core sees it: kl_raft_conf_encode bytes
 * followed by an encoded keyload.v1.MemberDirectory (membership.proto) naming every member
 * of both halves. The same bytes are what 'M'"log_start" stores as the configuration at the
 * snapshot point and what a snapshot carries (at most KL_MEMBER_CONF_BLOB_MAX bytes).
 *
 * Stored form of a CONF entry ('L' record): LogEntry{term, index, raft_type = 2,
 * raft_conf = blob}; on the wire a RaftEntry{type = 2, data = blob}.
 *
 * kl_confstore keeps, for one member:
 *   - the index of every CONF entry its stored log holds past the snapshot point (found by
 *     one scan of the log at start, then kept by the driver on every write and truncation),
 *     which answers the core's storage.last_conf;
 *   - the APPLIED configurations: the blob at the snapshot point and every CONF entry applied
 *     since (never truncated: applied entries are committed), so a compaction at any applied
 *     index stores the configuration as of that index with its directory, and a snapshot
 *     streamed at the applied index carries the configuration as of it.
 * Bounded: the core never lets more than KL_RAFT_MAX_CONF_HISTORY CONF entries sit past the
 * snapshot point; a log that holds more is refused at start (KL_INTERNAL). Loop thread only. */
#ifndef KL_REPL_CONFSTORE_H
#define KL_REPL_CONFSTORE_H

#include "common/limits.h"
#include "common/status.h"
#include "daemon/repl/raft_entry.h"
#include "daemon/store/store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kl_confstore_item {
    uint64_t index;
    uint8_t *blob; /* NULL for a stored (not yet applied) entry's index-only record */
    size_t len;
} kl_confstore_item;

/* What the member directories said about one member (the latest blob naming it wins). */
typedef struct kl_confstore_member {
    uint64_t id;
    char peer_url[KL_MEMBER_URL_MAX + 1];
    char client_url[KL_MEMBER_URL_MAX + 1];
    uint8_t public_key[32];
    bool has_key;
} kl_confstore_member;


typedef struct kl_confstore {
    /* indexes of the stored CONF entries past the snapshot point, ascending */
    uint64_t stored[KL_RAFT_MAX_CONF_HISTORY];
    size_t n_stored;
    /* the configuration at the snapshot point (base, len 0 = none: the static one) and the
     * applied CONF entries after it, ascending */
    kl_confstore_item base;
    kl_confstore_item applied[KL_RAFT_MAX_CONF_HISTORY];
    size_t n_applied;
    /* every member any directory (or the cluster file's seed) named, oldest dropped first */
    kl_confstore_member known[KL_MEMBER_MAX_KNOWN];
    size_t n_known;
} kl_confstore;

/* Encodes the stored record of a CONF entry into a malloc'd buffer (NULL when out of memory). */
uint8_t *kl_confstore_record(uint64_t term, uint64_t index, const uint8_t *blob, size_t len,
                             size_t *out_len);
/* The blob inside a stored CONF record (a malloc'd copy in *blob, *len): KL_INTERNAL when the
 * record is not a LogEntry of raft_type 2 with a decodable configuration. */
kl_code kl_confstore_blob_of(const uint8_t *rec, size_t rec_len, uint8_t **blob, size_t *len);
/* Checks a blob: a configuration kl_raft_conf_decode accepts (into *conf, may be NULL) followed
 * by a MemberDirectory without unknown fields, at most KL_MEMBER_CONF_BLOB_MAX bytes. */
bool kl_confstore_blob_ok(const uint8_t *blob, size_t len, kl_raft_conf *conf);

/* Loads the base blob from 'M'"log_start" and scans the stored log (first .. last) for CONF
 * entries, keeping those <= applied as applied. *base_conf gets the base configuration
 * (n_members 0 when none is stored). Cost: one read of every stored entry (the log is
 * bounded by the compaction threshold); only at start. */
kl_code kl_confstore_load(kl_confstore *cs, kl_store *st, uint64_t applied, kl_raft_conf *base_conf,
                          kl_err *err);
void kl_confstore_free(kl_confstore *cs);

/* The stored log gained a CONF entry at index (after its write) / lost entries >= from. */
void kl_confstore_stored(kl_confstore *cs, uint64_t index);
void kl_confstore_truncated(kl_confstore *cs, uint64_t from);
/* storage.last_conf: the last stored CONF index <= hi, 0 if none. */
uint64_t kl_confstore_last(const kl_confstore *cs, uint64_t hi);

/* A CONF entry was applied (blob copied). False when out of memory (the caller fails). */
bool kl_confstore_applied(kl_confstore *cs, uint64_t index, const uint8_t *blob, size_t len);
/* The applied configuration as of index (the latest applied CONF entry <= index, else the
 * base): its blob (NULL, 0 when none: the static configuration). */
void kl_confstore_at(const kl_confstore *cs, uint64_t index, const uint8_t **blob, size_t *len);
/* Entries <= index were compacted or replaced by a snapshot whose configuration is blob:
 * it becomes the base, and its directory is learnt (a snapshot may name members this member
 * never saw a CONF entry of); applied entries <= index and stored indexes <= index go. */
bool kl_confstore_rebase(kl_confstore *cs, uint64_t index, const uint8_t *blob, size_t len);

/* Remembers how to reach and authenticate the members a blob's directory names (a blob that
 * does not decode teaches nothing). */
void kl_confstore_learn(kl_confstore *cs, const uint8_t *blob, size_t len);
/* The same for one member (the cluster file's seed members); key may be NULL. */
void kl_confstore_learn_one(kl_confstore *cs, uint64_t id, const char *peer_url,
                            const char *client_url, const uint8_t *key);
/* What is known of member id, NULL when nothing. */
const kl_confstore_member *kl_confstore_member_of(const kl_confstore *cs, uint64_t id);

#endif
