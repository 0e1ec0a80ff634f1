/* turn: one worker flush turn (DESIGN.md §8; seeds "at most one transfer per flush turn").
 *
 * A turn pops at most ONE due event from the worker's buffer and drives it as far as it
 * can go now:
 *   1. reload and freshly authorize the persisted principal (ShowPrincipal: same tenant,
 *      an administrator of the database);
 *   2. fresh-read the source intent: Delivered -> done; NOT_FOUND -> dropped; a stored
 *      intent token other than the event's -> proof_changed, dropped (discovery brings the
 *      current one);
 *   3. fresh-read the destination receipt; present -> 5;
 *   4. absent: submit ONE canonical Accept under the deterministic accept command id, then
 *      reread the receipt; still absent -> UNKNOWN_WRITE_OUTCOME (retry, same id);
 *   5. reread the source (OutputPending, same intent token) and the receipt (byte-identical
 *      to the one read before; a changed proof refuses and is retried);
 *   6. submit Complete under the deterministic complete command id: OK (or `already`) ->
 *      done.
 * Terminal refusals (PERMISSION_DENIED, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, CONFLICT,
 * INVALID_ARGUMENT: the daemon commits them as no-effect outcomes of Accept and Complete)
 * leave the transfer pending, are recorded in the failed table and are not retried under a
 * new id. Everything else is transient: the event goes back to the buffer with exponential
 * backoff (event.h), same command ids. Nothing is ever reported as rolled back.
 *
 * Cancellation: once the coordinator is stopping (SIGTERM), a turn ends at its next point
 * between two calls (log "cancelled", before=<the call it did not make>); the call in
 * flight is never abandoned midway, so a drain waits for at most one call. The transfer
 * stays as the cluster has it, and the next run rediscovers it under the same ids.
 *
 * Every decision is one log line (component "coordinator"): transfer id as GUID text,
 * lanes, generation, codes and details; never a token or a message body.
 *
 * Failpoints (common/failpoint.h): coord.before_accept, coord.after_accept_sent,
 * coord.before_complete, coord.after_complete_sent. An error(CODE) action makes that stage
 * fail with CODE (and is handled like a real failure of it). */
#ifndef KL_COORD_TURN_H
#define KL_COORD_TURN_H

#include "coordinator/coord.h"

#include <stdbool.h>

/* Whether an Accept or Complete refusal is terminal (the daemon's
 * kl_transfer_refusal_is_terminal: it committed the refusal under the command id). */
bool kl_coord_refusal_is_terminal(kl_code code);

/* Runs one turn of worker `worker`. Returns true when it handled an event (false: nothing
 * was due). Blocking: each SDK call is bounded by the client's call timeout. */
bool kl_coord_turn(kl_coord *co, uint32_t worker);

#endif
