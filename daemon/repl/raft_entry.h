/* raft_entry: the log entry and the driver's storage that reads entries back, shared by the
 * core (raft) and its log window (raft_log) so that neither header includes the other. */
#ifndef KL_REPL_RAFT_ENTRY_H
#define KL_REPL_RAFT_ENTRY_H

#include "common/limits.h"
#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum kl_raft_entry_type {
    KL_RAFT_ENTRY_NORMAL = 0, /* opaque bytes from kl_raft_propose */
    KL_RAFT_ENTRY_NOOP = 1,   /* the entry a new leader appends at the start of its term */
    KL_RAFT_ENTRY_CONF = 2,   /* a configuration (raft.h "Membership"): kl_raft_conf_encode
                               * bytes, then the proposer's opaque context */
} kl_raft_entry_type;

typedef struct kl_raft_entry {
    uint64_t term;  /* >= 1 */
    uint64_t index; /* >= 1 */
    uint8_t type;   /* kl_raft_entry_type */
    uint8_t *data;  /* owned by whoever holds the struct (raft.h: Ownership); NULL if len 0 */
    size_t len;
} kl_raft_entry;

/* The driver's durable log, read back by the core for entries it no longer keeps in memory.
 * The core only asks for indexes it knows are persisted and not compacted: first <= index <=
 * the persisted last, where first = snapshot index + 1. The core knows the snapshot point
 * itself (kl_raft_config at start, then kl_raft_compact and snapshot installs), so the
 * storage never answers for the snapshot index. */
typedef struct kl_raft_storage {
    void *ctx;
    /* Term of the stored entry at index. */
    kl_code (*term)(void *ctx, uint64_t index, uint64_t *term);
    /* Stored entries lo .. hi-1 in order into out[0 .. *n): at least one when lo < hi, then
     * stopping at hi, at cap entries, or before the total data length would pass max_bytes.
     * Each out[i].data is a malloc'd copy (NULL when len is 0) that the core takes over. */
    kl_code (*entries)(void *ctx, uint64_t lo, uint64_t hi, size_t max_bytes, kl_raft_entry *out,
                       size_t cap, size_t *n);
    /* Optional (NULL: the stored log holds no KL_RAFT_ENTRY_CONF entry, as in every store
     * written before membership changes existed). Index of the last stored CONF entry <= hi
     * past the snapshot point, 0 if none; the core calls it only in kl_raft_new, to find the
     * configuration entries of the log it restarts from. */
    kl_code (*last_conf)(void *ctx, uint64_t hi, uint64_t *index);
} kl_raft_storage;

/* A configuration ("Membership" in raft.h): the voters with their replica_count, the learners,
 * and, in a joint configuration, the outgoing voters with theirs. What a snapshot says the
 * configuration is at its index. A driver that knows nothing of membership changes fills
 * members, n_members and replica_count and leaves the rest zero. */
typedef struct kl_raft_conf {
    uint64_t members[KL_RAFT_MAX_MEMBERS]; /* voters (the incoming half of a joint one) */
    uint32_t n_members;
    uint32_t replica_count;
    uint64_t learners[KL_RAFT_MAX_MEMBERS]; /* non-voters, disjoint from members (a voter being
                                              * demoted may also be in old_members) */
    uint32_t n_learners;
    uint64_t old_members[KL_RAFT_MAX_MEMBERS]; /* joint only: the outgoing voters */
    uint32_t n_old;                            /* 0: not joint */
    uint32_t old_replica_count;                /* joint only */
} kl_raft_conf;

/* A KL_RAFT_ENTRY_CONF entry's data: encode writes the configuration's bytes (at most
 * KL_RAFT_CONF_MAX_BYTES, common/limits.h) into buf and returns their length; decode
 * validates data and fills conf, with *ctx_off = where the proposer's context starts
 * (KL_INVALID_ARGUMENT, err naming the field, for anything malformed). */
size_t kl_raft_conf_encode(const kl_raft_conf *conf, uint8_t *buf);
kl_code kl_raft_conf_decode(const uint8_t *data, size_t len, kl_raft_conf *conf,
                            size_t *ctx_off, kl_err *err);
/* Validates a configuration (joint or not); err names the field at fault. */
kl_code kl_raft_conf_check(const kl_raft_conf *conf, kl_err *err);

#endif
