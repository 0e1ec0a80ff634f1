/* buffer: one worker's bounded, deduplicated, in-memory queue of events (ARCHITECTURE.md "Coordinator":
 * "bounded in-memory worker buffers"; seeds: the buffer is disposable, discovery rebuilds
 * it after a restart).
 *
 * It holds at most `capacity` events, counting the ones in flight (popped by the worker and
 * not yet finished): a transfer occupies its slot from dispatch until it is done, so an
 * event that is being retried can never be pushed a second time, and memory is bounded by
 * capacity events (event.h gives the per-event cost). Refusal when full: push answers
 * KL_COORD_PUSH_FULL and takes nothing; discovery then stops its page and keeps its
 * cursor, so the refused item is listed again later.
 *
 * Order: events are popped by (due time, arrival), a binary heap; an event retried after a
 * transient failure goes back with a later due time. Dedup: an open-addressing table of the
 * identity keys of all held events. Thread-safe: one mutex; discovery pushes from its
 * thread while the scheduler pops on the coordinator's loop. */
#ifndef KL_COORD_BUFFER_H
#define KL_COORD_BUFFER_H

#include "common/status.h"
#include "coordinator/event.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kl_coord_buffer kl_coord_buffer;

typedef enum kl_coord_push {
    KL_COORD_PUSH_ADDED,     /* the buffer owns the event now */
    KL_COORD_PUSH_DUPLICATE, /* the transfer is already held (queued or in flight) */
    KL_COORD_PUSH_FULL,      /* capacity events held: refused */
} kl_coord_push;

/* capacity >= 1. *out belongs to the caller (kl_coord_buffer_free). */
kl_code kl_coord_buffer_new(uint32_t capacity, kl_coord_buffer **out, kl_err *err);
/* Frees the buffer and every event it holds (in flight included: call it only after the
 * worker stopped). NULL is accepted. */
void kl_coord_buffer_free(kl_coord_buffer *b);

/* Adds ev, due at due_ms. On ADDED the buffer owns ev; otherwise the caller keeps it. */
kl_coord_push kl_coord_buffer_push(kl_coord_buffer *b, kl_coord_event *ev, int64_t due_ms);
/* The queued event due first if it is due at now_ms, marked in flight (it keeps its slot
 * and its key); NULL when none is due. */
kl_coord_event *kl_coord_buffer_pop_due(kl_coord_buffer *b, int64_t now_ms);
/* When the queued event due first is due (monotonic ms): false when nothing is queued. */
bool kl_coord_buffer_next_due(kl_coord_buffer *b, int64_t *due_ms);
/* Puts an in-flight event back, due at due_ms (a retry). */
void kl_coord_buffer_requeue(kl_coord_buffer *b, kl_coord_event *ev, int64_t due_ms);
/* Removes an in-flight event and frees it (done, dropped or terminally failed). */
void kl_coord_buffer_done(kl_coord_buffer *b, kl_coord_event *ev);

bool kl_coord_buffer_contains(kl_coord_buffer *b, const uint8_t key[KL_COORD_KEY_LEN]);
/* Events queued (not in flight), in flight, and the bytes all of them hold. */
void kl_coord_buffer_counts(kl_coord_buffer *b, size_t *queued, size_t *in_flight,
                            size_t *bytes);
uint32_t kl_coord_buffer_capacity(const kl_coord_buffer *b);

#endif
