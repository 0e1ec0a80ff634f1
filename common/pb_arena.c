#include "common/pb_arena.h"

#include <assert.h>
#include <stdalign.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

/* Under AddressSanitizer the kept block is poisoned except for what the current round was
 * handed, so a read of a decode after its reset fails the test that made it. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define ARENA_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define ARENA_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define ARENA_POISON(p, n) ((void)(p), (void)(n))
#define ARENA_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define ARENA_ALIGN alignof(max_align_t)
/* The first kept block: a small log entry or raft message fits without an overflow. */
#define ARENA_FIRST_BYTES 4096u

struct kl_pb_arena_block {
    kl_pb_arena_block *next;
    alignas(max_align_t) unsigned char data[];
};

static size_t round_up(size_t n)
{
    return (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
}

/* A block of its own for one allocation that does not fit the kept block. */
static void *overflow_alloc(kl_pb_arena *ar, size_t size)
{
    if (size > SIZE_MAX - sizeof(kl_pb_arena_block))
        return NULL;
    kl_pb_arena_block *b = malloc(sizeof *b + size);
    if (b == NULL)
        return NULL;
    b->next = ar->overflow;
    ar->overflow = b;
    ar->round_bytes += size;
    return b->data;
}

static void *arena_alloc(void *data, size_t size)
{
    kl_pb_arena *ar = data;
    size_t need = round_up(size ? size : 1);
    if (need < size)
        return NULL; /* size was within ARENA_ALIGN of SIZE_MAX */
    if (ar->kept == NULL && ar->keep_max > 0) {
        size_t cap = ARENA_FIRST_BYTES < ar->keep_max ? ARENA_FIRST_BYTES : ar->keep_max;
        if ((ar->kept = malloc(cap)) != NULL) {
            ar->kept_cap = cap;
            ARENA_POISON(ar->kept, cap);
        }
    }
    if (ar->kept != NULL && need <= ar->kept_cap - ar->used) {
        void *p = ar->kept + ar->used;
        ARENA_UNPOISON(p, need);
        ar->used += need;
        ar->round_bytes += need;
        return p;
    }
    return overflow_alloc(ar, need);
}

static void arena_free(void *data, void *ptr)
{
    (void)data;
    (void)ptr;
}

void kl_pb_arena_init(kl_pb_arena *ar, size_t keep_max)
{
    *ar = (kl_pb_arena){
        .allocator = {.alloc = arena_alloc, .free = arena_free, .allocator_data = ar},
        .keep_max = keep_max,
    };
}

ProtobufCAllocator *kl_pb_arena_allocator(kl_pb_arena *ar)
{
    /* The arena may have moved since init (a struct copy): point the allocator at it. */
    ar->allocator.allocator_data = ar;
    return &ar->allocator;
}

void kl_pb_arena_reset(kl_pb_arena *ar)
{
    bool overflowed = ar->overflow != NULL;
    while (ar->overflow != NULL) {
        kl_pb_arena_block *b = ar->overflow;
        ar->overflow = b->next;
        free(b);
    }
    if (overflowed && ar->round_bytes > ar->kept_cap) {
        size_t want = ar->round_bytes < ar->keep_max ? ar->round_bytes : ar->keep_max;
        if (want > ar->kept_cap) {
            unsigned char *grown = malloc(want);
            if (grown != NULL) {
                ARENA_UNPOISON(ar->kept, ar->kept_cap);
                free(ar->kept);
                ar->kept = grown;
                ar->kept_cap = want;
            }
        }
    }
    assert(ar->kept_cap <= ar->keep_max);
    if (ar->kept != NULL)
        ARENA_POISON(ar->kept, ar->kept_cap);
    ar->used = 0;
    ar->round_bytes = 0;
}

void kl_pb_arena_fini(kl_pb_arena *ar)
{
    kl_pb_arena_reset(ar);
    if (ar->kept != NULL)
        ARENA_UNPOISON(ar->kept, ar->kept_cap);
    free(ar->kept);
    ar->kept = NULL;
    ar->kept_cap = 0;
}
