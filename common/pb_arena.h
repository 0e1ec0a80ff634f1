/* pb_arena: a bump allocator for protobuf-c messages that live for one call.
 *
 * protobuf-c unpacks every submessage, string and bytes field into its own malloc, and
 * free_unpacked walks the message to free them one by one; for a message decoded,
 * used and dropped within one function (a peer frame, a log entry being applied) that is
 * most of the decode's cost. Unpacking through kl_pb_arena_allocator takes that memory
 * from one kept block instead, and kl_pb_arena_reset drops all of it at once.
 *
 * What it owns: one kept block, reused by every unpack, and the overflow blocks of the
 * current round (malloc'd when a message does not fit the kept block).
 *
 * Invariants: every pointer it returns is aligned for any type and stays valid until the
 * next kl_pb_arena_reset or kl_pb_arena_fini; its free is a no-op, so a message unpacked
 * through it must never reach free_unpacked with another allocator (reset instead);
 * after a reset the kept block is at most keep_max bytes (a larger round's memory goes
 * back to malloc), so what it holds between rounds is bounded. Not thread-safe: one
 * owner, one thread. */
#ifndef KL_PB_ARENA_H
#define KL_PB_ARENA_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

typedef struct kl_pb_arena_block kl_pb_arena_block;

typedef struct kl_pb_arena {
    ProtobufCAllocator allocator; /* what unpack takes; allocator_data is this arena */
    unsigned char *kept;          /* the reused block, kept_cap bytes (NULL before first use) */
    size_t kept_cap;
    size_t used;                  /* bytes of `kept` handed out this round */
    kl_pb_arena_block *overflow;  /* this round's extra blocks, newest first */
    size_t round_bytes;           /* everything handed out this round, overflow included */
    size_t keep_max;              /* the kept block never grows past this */
} kl_pb_arena;

/* An empty arena whose kept block may grow to keep_max bytes. Allocates nothing. */
void kl_pb_arena_init(kl_pb_arena *ar, size_t keep_max);

/* The allocator to pass to *__unpack. Allocation fails (unpack returns NULL) only when
 * malloc does. */
ProtobufCAllocator *kl_pb_arena_allocator(kl_pb_arena *ar);

/* Ends a round: every pointer handed out since the last reset becomes invalid. When the
 * round needed overflow blocks, they are freed and the kept block is regrown to the
 * round's size (at most keep_max), so a steady stream of messages settles in one block.
 * O(overflow blocks). */
void kl_pb_arena_reset(kl_pb_arena *ar);

/* Frees everything; the arena may be initialised again. */
void kl_pb_arena_fini(kl_pb_arena *ar);

#endif
