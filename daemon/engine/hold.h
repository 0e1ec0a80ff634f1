/* hold: the transfer hold a backup sets on every partition (ARCHITECTURE.md "Backup and
 * restore"): while it lasts, CompleteQueueTransfer is refused on that partition, so no
 * transfer becomes Delivered between the hold and the backup's pin. The hold is replicated
 * state ('M' "transfer_hold": the partition time it ends at), so it survives a leader
 * change, and it ends by itself at that partition time, so a backup tool that dies never
 * wedges transfers. */
#ifndef KL_HOLD_H
#define KL_HOLD_H

#include "daemon/engine/engine.h"

/* KL_OK when no hold is in effect at the context's partition time; UNAVAILABLE
 * "transfer_hold" (retryable: the hold ends by itself) naming the partition and when it
 * ends, otherwise. */
kl_code kl_hold_check_complete(kl_eval_ctx *c, kl_err *err);

#endif
