/* failed: the transfers the coordinator knows failed terminally (ARCHITECTURE.md "Engine": permission,
 * schema, quota, expiry, mismatch refusals of Accept or Complete, which the daemon commits
 * as no-effect outcomes under the command id).
 *
 * Such a transfer stays pending on its source; retrying it under the same deterministic
 * command id would only get the same committed refusal again, and a new id is for an
 * operator (seeds: "restoring policy or quota does not mint a new command ID"). So
 * discovery skips what is recorded here, which also keeps a known-failed intent from
 * occupying a buffer slot ahead of later work.
 *
 * Bounded: at most `capacity` entries; a new entry evicts the oldest. The table is
 * disposable: after a restart (or an eviction) the transfer is tried once more with the
 * same command id and simply gets the same committed refusal. Keyed by (identity key,
 * generation): a new generation is new work. Thread-safe (one mutex). */
#ifndef KL_COORD_FAILED_H
#define KL_COORD_FAILED_H

#include "common/status.h"
#include "coordinator/event.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KL_COORD_FAILED_DEFAULT_CAPACITY 1024

typedef struct kl_coord_failure {
    uint8_t key[KL_COORD_KEY_LEN];
    uint64_t generation;
    char transfer_id[37];
    char source[2 * 129 + 1]; /* "queue/lane" */
    char step[16];            /* "accept" or "complete" */
    kl_code code;
    char detail[KL_ERR_DETAIL_MAX];
    char message[KL_ERR_MESSAGE_MAX];
    int64_t unix_ms;
} kl_coord_failure;

typedef struct kl_coord_failed kl_coord_failed;

kl_code kl_coord_failed_new(uint32_t capacity, kl_coord_failed **out, kl_err *err);
void kl_coord_failed_free(kl_coord_failed *f);

/* Records (or refreshes) the failure of ev's transfer at its generation. */
void kl_coord_failed_record(kl_coord_failed *f, const kl_coord_event *ev, const char *step,
                            const kl_err *why, int64_t unix_ms);
bool kl_coord_failed_contains(kl_coord_failed *f, const uint8_t key[KL_COORD_KEY_LEN],
                              uint64_t generation);
/* Copies up to max entries, newest first, into out; returns how many. */
size_t kl_coord_failed_latest(kl_coord_failed *f, kl_coord_failure *out, size_t max);
size_t kl_coord_failed_count(kl_coord_failed *f);

#endif
