/* raft_entry: the log entry and the driver's storage that reads entries back, shared by the
 * core (raft) and its log window (raft_log) so that neither header includes the other. */
#ifndef KL_REPL_RAFT_ENTRY_H
#define KL_REPL_RAFT_ENTRY_H

#include "common/status.h"

#include <stddef.h>
#include <stdint.h>

typedef enum kl_raft_entry_type {
    KL_RAFT_ENTRY_NORMAL = 0, /* opaque bytes from kl_raft_propose */
    KL_RAFT_ENTRY_NOOP = 1,   /* the entry a new leader appends at the start of its term */
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
} kl_raft_storage;

#endif
