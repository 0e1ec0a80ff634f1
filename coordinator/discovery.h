/* discovery: finds the pending intents the coordinator drives and dispatches them to the
 * worker buffers (ARCHITECTURE.md "Coordinator"; seeds: "Silo-local discovery of pending intents is bounded
 * by the operation's native count, byte and work ceilings ... A failed dispatch retains
 * the discovered cursor so a known failed intent does not starve later work").
 *
 * A round visits every partition of the cluster file. Per partition it pages through
 * ListPendingQueueTransfers from its saved cursor, at most discovery.max_work pages, each
 * of at most the partition's page size (discovery.max_records, halved after a page that
 * held more than discovery.max_bytes of intent tokens or that the daemon refused
 * RESOURCE_EXHAUSTED, doubled back after pages that fit). The daemon binds cursors to the
 * partition incarnation and restarts a stale one from the beginning itself
 * (cursor_reset); the coordinator keeps the last next_cursor, and clears it when a page
 * says done, so the next round starts from the beginning.
 *
 * Per item: decode the intent token's claims; take it only when its creator is the
 * coordinator principal and both lanes are in its tenant/database; skip it when the failed
 * table knows its (transfer, generation) or its worker's buffer already holds it; else
 * dispatch it to worker key % workers. When that buffer is full the item is refused and
 * the page goes on: other workers' items are still dispatched and the cursor advances, so a
 * worker whose buffer stays full (say, every event in it waits out a backoff) never holds
 * back the partition's later intents; the refused item is listed again on the next sweep
 * (a page that says done sends the next round back to the beginning), where its buffer has
 * room again. A failed page keeps the cursor it had (seeds: "a failed dispatch retains the
 * discovered cursor"), and a page with more token bytes than discovery.max_bytes keeps it
 * at that page's start and shrinks the page.
 *
 * One log line per round (counts), one per dispatched event. Single-threaded: only the
 * discovery ticker calls kl_coord_discovery_round. */
#ifndef KL_COORD_DISCOVERY_H
#define KL_COORD_DISCOVERY_H

#include "coordinator/coord.h"

typedef struct kl_coord_discovery kl_coord_discovery;

/* What taking one listed item did (kl_coord_discovery_take). */
typedef enum kl_coord_take {
    KL_COORD_TAKE_DISPATCHED,
    KL_COORD_TAKE_DUPLICATE,
    KL_COORD_TAKE_FOREIGN,   /* another principal's or database's intent */
    KL_COORD_TAKE_FAILED,    /* known terminal failure */
    KL_COORD_TAKE_MALFORMED,
    KL_COORD_TAKE_FULL,      /* its worker's buffer is full: stop the page */
} kl_coord_take;

kl_code kl_coord_discovery_new(kl_coord *co, kl_coord_discovery **out, kl_err *err);
void kl_coord_discovery_free(kl_coord_discovery *d);

/* One round (see above); returns early when co->stopping is set. True when some
 * partition's paging stopped at its work ceiling (max_work pages) with more intents listed
 * behind it, having dispatched new ones into buffers that still take them: the caller runs the next round
 * now rather than after the interval, so the ceiling bounds each round's work, not the
 * rate intents are taken at (one round of 16 pages of 64 every ~0.6 s capped a default
 * coordinator at about 1,600 transfers/s, below what the members deliver). */
bool kl_coord_discovery_round(kl_coord_discovery *d);

/* Takes one listed item (exposed for tests: no network). */
kl_coord_take kl_coord_discovery_take(kl_coord *co, const Keyload__V1__PendingQueueTransfer *item);

#endif
