/* restore: `keyloadd --restore-from DIR` (ARCHITECTURE.md "Backup and restore"): installs one
 * partition's backup (the chunk files `keyload admin backup` wrote) into this member's fresh
 * store before it serves. */
#ifndef KL_RESTORE_H
#define KL_RESTORE_H

#include "common/status.h"
#include "daemon/store/store.h"

#include <stdint.h>

/* Installs DIR/chunk-NNNNNN (0, 1, ... up to the one flagged last) into st through the
 * staged snapshot install: every chunk is verified (running digest, order, key count)
 * while staged and nothing live changes before the last one verified. Refused:
 * FAILED_PRECONDITION "restore_not_fresh" when st holds any log or state (restore only
 * into a new member's store), "restore_truncated" when the files end before the last
 * chunk, "restore_partition" when the chunks are not partition `partition`'s (the
 * partition-P directory name), the snapshot errors of snapshot.h otherwise. On KL_OK the
 * store holds the state at *index with no vote; its Raft term is the snapshot's term (the
 * log's last term must not exceed it) and its log one empty entry at *index of that term,
 * where the replication driver reads the applied entry's term (see the section). */
kl_code kl_restore_install(kl_store *st, const char *dir, int partition, uint64_t *index, uint64_t *term,
                           kl_err *err);

#endif
