#include "coordinator/buffer.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct kl_coord_buffer {
    pthread_mutex_t mu;
    uint32_t capacity;
    kl_coord_event **slots; /* capacity entries; NULL = free */
    int32_t *free_stack;    /* free slot indexes */
    uint32_t n_free;
    int32_t *heap;          /* slot indexes of queued events, a min-heap by (due, seq) */
    uint32_t n_heap;
    int32_t *table;         /* identity -> slot, open addressing; -1 = empty */
    uint32_t table_mask;
    uint64_t next_seq;
    size_t bytes;
};

/* ------------------------------------------------------------ identity table */

static uint32_t key_hash(const uint8_t *key)
{
    uint32_t h; /* the key is a BLAKE2b digest: any 4 bytes are uniform */
    memcpy(&h, key, sizeof h);
    return h;
}

static int32_t table_find(const kl_coord_buffer *b, const uint8_t *key, uint32_t *pos)
{
    uint32_t i = key_hash(key) & b->table_mask;
    for (;;) {
        int32_t s = b->table[i];
        if (s < 0 || memcmp(b->slots[s]->key, key, KL_COORD_KEY_LEN) == 0) {
            *pos = i;
            return s;
        }
        i = (i + 1) & b->table_mask;
    }
}

/* Backward-shift deletion keeps every probe chain unbroken without tombstones. */
static void table_remove(kl_coord_buffer *b, uint32_t i)
{
    uint32_t j = i;
    b->table[i] = -1;
    for (;;) {
        j = (j + 1) & b->table_mask;
        int32_t s = b->table[j];
        if (s < 0)
            return;
        uint32_t home = key_hash(b->slots[s]->key) & b->table_mask;
        /* Move s into the hole at i unless its home lies cyclically in (i, j]. */
        bool stays = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            b->table[i] = s;
            b->table[j] = -1;
            i = j;
        }
    }
}

/* ------------------------------------------------------------ heap */

static bool before(const kl_coord_event *x, const kl_coord_event *y)
{
    return x->due_ms < y->due_ms || (x->due_ms == y->due_ms && x->seq < y->seq);
}

static void heap_set(kl_coord_buffer *b, uint32_t pos, int32_t slot)
{
    b->heap[pos] = slot;
    b->slots[slot]->heap_pos = (int32_t)pos;
}

static void heap_up(kl_coord_buffer *b, uint32_t pos)
{
    int32_t s = b->heap[pos];
    while (pos > 0) {
        uint32_t parent = (pos - 1) / 2;
        if (!before(b->slots[s], b->slots[b->heap[parent]]))
            break;
        heap_set(b, pos, b->heap[parent]);
        pos = parent;
    }
    heap_set(b, pos, s);
}

static void heap_down(kl_coord_buffer *b, uint32_t pos)
{
    int32_t s = b->heap[pos];
    for (;;) {
        uint32_t l = 2 * pos + 1, r = l + 1, m = pos;
        const kl_coord_event *best = b->slots[s];
        if (l < b->n_heap && before(b->slots[b->heap[l]], best)) {
            m = l;
            best = b->slots[b->heap[l]];
        }
        if (r < b->n_heap && before(b->slots[b->heap[r]], best))
            m = r;
        if (m == pos)
            break;
        heap_set(b, pos, b->heap[m]);
        pos = m;
    }
    heap_set(b, pos, s);
}

static void heap_push(kl_coord_buffer *b, kl_coord_event *ev, int64_t due_ms)
{
    ev->due_ms = due_ms;
    ev->seq = b->next_seq++;
    b->heap[b->n_heap] = ev->slot;
    heap_up(b, b->n_heap++);
}

/* ------------------------------------------------------------ API */

kl_code kl_coord_buffer_new(uint32_t capacity, kl_coord_buffer **out, kl_err *err)
{
    *out = NULL;
    if (capacity == 0 || capacity > (1u << 24))
        return kl_fail(err, KL_INVALID_ARGUMENT, "buffer_capacity",
                       "buffer capacity must be 1..16777216");
    uint32_t tsize = 2;
    while (tsize < 2 * capacity)
        tsize *= 2; /* load factor <= 1/2: short probe chains, and always an empty entry */
    kl_coord_buffer *b = calloc(1, sizeof *b);
    if (b == NULL)
        goto fail_struct;
    b->slots = calloc(capacity, sizeof *b->slots);
    if (b->slots == NULL)
        goto fail_slots;
    b->free_stack = malloc(capacity * sizeof *b->free_stack);
    if (b->free_stack == NULL)
        goto fail_free;
    b->heap = malloc(capacity * sizeof *b->heap);
    if (b->heap == NULL)
        goto fail_heap;
    b->table = malloc(tsize * sizeof *b->table);
    if (b->table == NULL)
        goto fail_table;
    if (pthread_mutex_init(&b->mu, NULL) != 0)
        goto fail_mutex;
    memset(b->table, 0xff, tsize * sizeof *b->table); /* every entry -1 */
    b->table_mask = tsize - 1;
    b->capacity = capacity;
    for (uint32_t i = 0; i < capacity; i++)
        b->free_stack[i] = (int32_t)(capacity - 1 - i); /* pop slot 0 first */
    b->n_free = capacity;
    *out = b;
    return KL_OK;

fail_mutex:
    free(b->table);
fail_table:
    free(b->heap);
fail_heap:
    free(b->free_stack);
fail_free:
    free(b->slots);
fail_slots:
    free(b);
fail_struct:
    return kl_fail(err, KL_INTERNAL, "memory", "buffer: out of memory");
}

void kl_coord_buffer_free(kl_coord_buffer *b)
{
    if (b == NULL)
        return;
    for (uint32_t i = 0; i < b->capacity; i++)
        kl_coord_event_free(b->slots[i]);
    pthread_mutex_destroy(&b->mu);
    free(b->table);
    free(b->heap);
    free(b->free_stack);
    free(b->slots);
    free(b);
}

kl_coord_push kl_coord_buffer_push(kl_coord_buffer *b, kl_coord_event *ev, int64_t due_ms)
{
    pthread_mutex_lock(&b->mu);
    uint32_t pos;
    kl_coord_push r;
    if (table_find(b, ev->key, &pos) >= 0) {
        r = KL_COORD_PUSH_DUPLICATE;
    } else if (b->n_free == 0) {
        r = KL_COORD_PUSH_FULL;
    } else {
        int32_t s = b->free_stack[--b->n_free];
        b->slots[s] = ev;
        ev->slot = s;
        b->table[pos] = s;
        b->bytes += kl_coord_event_bytes(ev);
        heap_push(b, ev, due_ms);
        r = KL_COORD_PUSH_ADDED;
    }
    pthread_mutex_unlock(&b->mu);
    return r;
}

kl_coord_event *kl_coord_buffer_pop_due(kl_coord_buffer *b, int64_t now_ms)
{
    pthread_mutex_lock(&b->mu);
    kl_coord_event *ev = NULL;
    if (b->n_heap > 0 && b->slots[b->heap[0]]->due_ms <= now_ms) {
        ev = b->slots[b->heap[0]];
        if (--b->n_heap > 0) {
            heap_set(b, 0, b->heap[b->n_heap]);
            heap_down(b, 0);
        }
        ev->heap_pos = -1; /* in flight: keeps its slot and its key */
    }
    pthread_mutex_unlock(&b->mu);
    return ev;
}

bool kl_coord_buffer_next_due(kl_coord_buffer *b, int64_t *due_ms)
{
    pthread_mutex_lock(&b->mu);
    bool any = b->n_heap > 0;
    if (any)
        *due_ms = b->slots[b->heap[0]]->due_ms;
    pthread_mutex_unlock(&b->mu);
    return any;
}

void kl_coord_buffer_requeue(kl_coord_buffer *b, kl_coord_event *ev, int64_t due_ms)
{
    pthread_mutex_lock(&b->mu);
    if (ev->heap_pos < 0)
        heap_push(b, ev, due_ms);
    pthread_mutex_unlock(&b->mu);
}

void kl_coord_buffer_done(kl_coord_buffer *b, kl_coord_event *ev)
{
    pthread_mutex_lock(&b->mu);
    uint32_t pos;
    if (ev->heap_pos < 0 && ev->slot >= 0 && table_find(b, ev->key, &pos) == ev->slot) {
        table_remove(b, pos);
        b->slots[ev->slot] = NULL;
        b->free_stack[b->n_free++] = ev->slot;
        b->bytes -= kl_coord_event_bytes(ev);
        kl_coord_event_free(ev);
    }
    pthread_mutex_unlock(&b->mu);
}

bool kl_coord_buffer_contains(kl_coord_buffer *b, const uint8_t key[KL_COORD_KEY_LEN])
{
    pthread_mutex_lock(&b->mu);
    uint32_t pos;
    bool found = table_find(b, key, &pos) >= 0;
    pthread_mutex_unlock(&b->mu);
    return found;
}

void kl_coord_buffer_counts(kl_coord_buffer *b, size_t *queued, size_t *in_flight,
                            size_t *bytes)
{
    pthread_mutex_lock(&b->mu);
    size_t held = b->capacity - b->n_free;
    if (queued)
        *queued = b->n_heap;
    if (in_flight)
        *in_flight = held - b->n_heap;
    if (bytes)
        *bytes = b->bytes;
    pthread_mutex_unlock(&b->mu);
}

uint32_t kl_coord_buffer_capacity(const kl_coord_buffer *b) { return b->capacity; }
