/* event: one pending transfer the coordinator drives (ARCHITECTURE.md "Coordinator"), as discovery found it.
 *
 * An event owns copies of everything it names: the source and destination queue and lane
 * (tenant and database are the coordinator's own, checked at discovery), the transfer id,
 * generation, fingerprint and the intent token bytes. It is one allocation: the struct,
 * then the four names, then the token.
 *
 * Memory (the coordinator's RSS bound): an event costs sizeof(kl_coord_event) (about 200 bytes) plus
 * its four names (at most 4 x 129 bytes) plus its intent token plus malloc overhead; an
 * intent token is the signed claims with the whole message, so it is at most the cluster's
 * MaxBatchBytes and usually a few hundred bytes. Events live only in the worker buffers
 * (buffer.h), so the coordinator holds at most workers x buffer_capacity events: with the
 * defaults (256 x 32) and ~1 KiB tokens about 8192 x 1.8 KiB = 14.7 MiB, whatever the
 * number of pending transfers (10,000 or 10 million: discovery stops at a full buffer).
 *
 * Identity: key = BLAKE2b-128 over ("keyload.coordinator.identity.v1", complete source lane,
 * transfer id): the transfer, whatever its generation. Buffers deduplicate by it and
 * dispatch by it (key % workers), so one transfer is only ever driven by one worker. */
#ifndef KL_COORD_EVENT_H
#define KL_COORD_EVENT_H

#include "common/status.h"
#include "coordinator/intent.h"
#include "keyload/v1/transfer.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KL_COORD_KEY_LEN 16
#define KL_COORD_BACKOFF_FIRST_MS 100
#define KL_COORD_BACKOFF_MAX_MS 10000

typedef struct kl_coord_event {
    uint8_t key[KL_COORD_KEY_LEN];
    char *source_queue, *source_lane; /* lane never empty ("default") */
    char *dest_queue, *dest_lane;
    uint8_t transfer_id[16];
    char transfer_id_text[37];
    uint64_t generation;
    uint8_t fingerprint[32];
    size_t fingerprint_len;
    uint8_t *token; /* the intent token, byte for byte */
    size_t token_len;
    /* A retained failure: the Accept of this generation was refused RESOURCE_EXHAUSTED
     * or PERMISSION_DENIED, or its Complete PERMISSION_DENIED, without effect, under
     * failed_command_id. Later turns run the seeds' recovery flowchart instead of resending
     * it. */
    bool has_failure;
    bool failure_in_complete;  /* the denied command was the Complete (else the Accept) */
    kl_code failure_code;
    uint8_t failed_command_id[16];
    /* Scheduling, owned by the buffer holding the event. */
    uint32_t attempt;   /* transient failures so far */
    int64_t due_ms;     /* monotonic ms before which the event is not popped */
    uint64_t seq;       /* FIFO order among events due at once */
    int32_t slot;       /* index in the buffer's slot array */
    int32_t heap_pos;   /* -1 while in flight */
} kl_coord_event;

/* The identity key of (source lane, transfer id). lane NULL or "" means "default". */
void kl_coord_identity(const char *tenant, const char *database, const char *queue,
                       const char *lane, const uint8_t transfer_id[16],
                       uint8_t out[KL_COORD_KEY_LEN]);

/* Builds an event from a ListPendingQueueTransfers item and its decoded intent (which must
 * agree with the item on transfer id and generation: INVALID_ARGUMENT otherwise, as for a
 * missing lane). tenant/database are the coordinator's. *out belongs to the caller
 * (kl_coord_event_free) until a buffer takes it. */
kl_code kl_coord_event_new(const Keyload__V1__PendingQueueTransfer *item,
                           const kl_coord_intent *in, const char *tenant, const char *database,
                           kl_coord_event **out, kl_err *err);
void kl_coord_event_free(kl_coord_event *ev);

/* Bytes the event holds (for the status view's memory estimate). */
size_t kl_coord_event_bytes(const kl_coord_event *ev);

/* Wait before retry `attempt` (1-based): 100 ms doubling up to 10 s. */
uint32_t kl_coord_backoff_ms(uint32_t attempt);

#endif
