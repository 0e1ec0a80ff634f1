/* node_retain: outcome retention (ARCHITECTURE.md "Store layout").
 *
 * An ordinary batch's outcome is indexed under 'E' by its expiry time: the later of its
 * entry time and its first_sent_unix_ms. The partition's low-water mark ('M'
 * "outcome_mark") only grows: with each entry the leader stamps max(mark, entry time -
 * retention) into the entry's first write-set, together with the deletes of at most
 * KL_OUTCOME_SWEEP_MAX indexed outcomes below it. The mark and the deletes are ordinary
 * writes of a replicated write-set, so every member applies the same ones whatever its own
 * cluster file says. Kept for ever (never indexed): committed refusals and every batch
 * holding a transfer mutation (the seeds' intents, receipts and both Advances live in their
 * own 'X'/'R' records and are never touched here).
 * The pure functions are separate so that unit tests can check the arithmetic alone. */
#ifndef KL_NODE_RETAIN_H
#define KL_NODE_RETAIN_H

#include "common/status.h"
#include "daemon/engine/view.h"
#include "keyload/v1/queue.pb-c.h"

#include <stdbool.h>
#include <stdint.h>

#define KL_RETAIN_MARK_META "outcome_mark"

/* Whether the outcome of b expires: not a committed refusal, no transfer mutation. */
bool kl_retain_batch_expires(const Keyload__V1__BatchRequest *b, bool refused);
/* The expiry index time of an outcome: the later of the entry time and the first-sent time,
 * so that an outcome is deleted only once the mark passed the first-sent time too. */
int64_t kl_retain_index_time(int64_t entry_ms, int64_t first_sent_ms);
/* The mark after an entry of time entry_ms: never lower than mark; retention_ms 0 = off. */
int64_t kl_retain_mark_next(int64_t mark, int64_t entry_ms, int64_t retention_ms);
/* first_sent_unix_ms against the leader's clocks: negative is INVALID_ARGUMENT naming the
 * field, and so is one past KL_FIRST_SENT_LATEST_MS (the year 9999: no clock's time); further
 * than KL_FIRST_SENT_AHEAD_MAX_MS ahead of both the partition time entry_ms
 * and the leader's wall clock wall_ms is UNAVAILABLE "first_sent_ahead" (retryable: clocks
 * that disagree come back into step). 0 (not given) passes. The bound keeps a client from
 * holding its outcomes past the retention by naming a far future; it is never lowered to
 * partition time alone, which lags the wall clock after a clock step or an outage. */
kl_code kl_retain_check_first_sent(int64_t first_sent_ms, int64_t entry_ms, int64_t wall_ms, kl_err *err);
/* A batch whose outcome is not stored: first-sent below the mark means its outcome may have
 * been deleted, so it must not run as new: FAILED_PRECONDITION outcome_expired. */
kl_code kl_retain_check_expired(int64_t first_sent_ms, int64_t mark, kl_err *err);

/* The stored mark and sweep cursor (0, 0 when never written), read through v. */
kl_code kl_retain_mark_read(kl_view *v, int64_t *mark, int64_t *cursor, kl_err *err);
/* Puts the 'E' index key of an expiring outcome into scratch. */
kl_code kl_retain_index(kl_overlay *scratch, int64_t time_ms, const char *principal,
                        const uint8_t command_id[16], kl_err *err);
/* Advances the mark for an entry at entry_ms and deletes, into v's scratch, at most
 * KL_OUTCOME_SWEEP_MAX outcomes (and their index keys) below it, oldest first. *full:
 * whether it stopped at that bound (more may wait below the mark). */
kl_code kl_retain_sweep(kl_view *v, int64_t entry_ms, int64_t retention_ms, bool *full, kl_err *err);

/* Receive outcomes hold no second copy of the leased bodies. kl_retain_strip_bodies: the
 * receipt without the received messages' `message`, when b holds a Receive, something was
 * removed and the receipt re-encodes byte for byte (else *out NULL: store it whole).
 * kl_retain_restore_bodies: the original receipt again, each body read back through its
 * lease ('K' then 'G', the lease token still the message's); a lease that is gone refuses
 * FAILED_PRECONDITION receive_outcome_released. *out is malloc'd. */
kl_code kl_retain_strip_bodies(const Keyload__V1__BatchRequest *b, const uint8_t *receipt, size_t len,
                               uint8_t **out, size_t *out_len, kl_err *err);
kl_code kl_retain_restore_bodies(kl_view *v, const uint8_t *stored, size_t len, uint8_t **out, size_t *out_len,
                                 kl_err *err);

#endif
