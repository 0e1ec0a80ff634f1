/* command_id: the coordinator's deterministic command ids (ARCHITECTURE.md "Coordinator"; seeds "Command IDs
 * are deterministic digests of the immutable transfer tuple").
 *
 * id = the first 16 bytes of BLAKE2b-256 over the canonical encoding (common/canon.h) of
 *   ("keyload.coordinator.command.v1", step, principal id, tenant, database,
 *    complete source lane ref, transfer id, complete destination lane ref,
 *    message fingerprint, generation)
 * with an empty lane spelled "default". An all-zero result (a GUID the daemon refuses) gets
 * its last byte set to 1.
 *
 * Invariant: the same inputs give the same id in every process and after every restart, so
 * a retry after a timeout, a restart or a second coordinator racing this one resends the
 * SAME command (the daemon answers its stored receipt or committed refusal), and never
 * mints a new effect identity. The step and generation separate domains: Accept and
 * Complete of one transfer, or two generations of it, never share an id. Pure module. */
#ifndef KL_COORD_COMMAND_ID_H
#define KL_COORD_COMMAND_ID_H

#include "common/status.h"
#include "keyload/v1/queue.pb-c.h"

#include <stddef.h>
#include <stdint.h>

#define KL_COORD_COMMAND_DOMAIN "keyload.coordinator.command.v1"

typedef enum kl_coord_step {
    KL_COORD_STEP_ACCEPT = 1,
    KL_COORD_STEP_COMPLETE = 2,
    KL_COORD_STEP_ADVANCE = 3, /* AdvanceQueueTransferAttempt from this generation */
    KL_COORD_STEP_REPAIR = 4,  /* AdvanceQueueTransferRepair from this generation */
} kl_coord_step;

/* "accept" / "complete" / "advance" / "repair" (what the encoding carries), "unknown"
 * otherwise. */
const char *kl_coord_step_name(kl_coord_step step);

/* The immutable tuple of one transfer generation, as the intent claims name it. */
typedef struct kl_coord_tuple {
    const char *principal_id;
    const char *tenant;
    const char *database;
    const Keyload__V1__QueueLaneRef *source;      /* complete (tenant, database, queue, lane) */
    const uint8_t *transfer_id;                   /* 16 bytes */
    const Keyload__V1__QueueLaneRef *destination; /* complete */
    const uint8_t *fingerprint;
    size_t fingerprint_len;
    uint64_t generation;
} kl_coord_tuple;

/* Writes the 16-byte id. INVALID_ARGUMENT for an unknown step or a missing field;
 * INTERNAL when out of memory. */
kl_code kl_coord_command_id(kl_coord_step step, const kl_coord_tuple *t, uint8_t out[16],
                            kl_err *err);

#endif
