#include "coordinator/failed.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A ring: entries [head, head + n) modulo capacity, oldest first. Lookups scan it; terminal
 * failures are rare and the table small, and discovery asks once per listed item. */
struct kl_coord_failed {
    pthread_mutex_t mu;
    kl_coord_failure *ring;
    uint32_t capacity, head, n;
};

kl_code kl_coord_failed_new(uint32_t capacity, kl_coord_failed **out, kl_err *err)
{
    *out = NULL;
    if (capacity == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "capacity", "failed table: capacity is 0");
    kl_coord_failed *f = calloc(1, sizeof *f);
    if (f == NULL)
        goto fail_struct;
    f->ring = calloc(capacity, sizeof *f->ring);
    if (f->ring == NULL)
        goto fail_ring;
    if (pthread_mutex_init(&f->mu, NULL) != 0)
        goto fail_mutex;
    f->capacity = capacity;
    *out = f;
    return KL_OK;

fail_mutex:
    free(f->ring);
fail_ring:
    free(f);
fail_struct:
    return kl_fail(err, KL_INTERNAL, "memory", "failed table: out of memory");
}

void kl_coord_failed_free(kl_coord_failed *f)
{
    if (f == NULL)
        return;
    pthread_mutex_destroy(&f->mu);
    free(f->ring);
    free(f);
}

static kl_coord_failure *find(kl_coord_failed *f, const uint8_t *key, uint64_t generation)
{
    for (uint32_t i = 0; i < f->n; i++) {
        kl_coord_failure *e = &f->ring[(f->head + i) % f->capacity];
        if (e->generation == generation && memcmp(e->key, key, KL_COORD_KEY_LEN) == 0)
            return e;
    }
    return NULL;
}

void kl_coord_failed_record(kl_coord_failed *f, const kl_coord_event *ev, const char *step,
                            const kl_err *why, int64_t unix_ms)
{
    pthread_mutex_lock(&f->mu);
    kl_coord_failure *e = find(f, ev->key, ev->generation);
    if (e == NULL) {
        if (f->n == f->capacity) { /* evict the oldest */
            f->head = (f->head + 1) % f->capacity;
            f->n--;
        }
        e = &f->ring[(f->head + f->n) % f->capacity];
        f->n++;
    }
    memset(e, 0, sizeof *e);
    memcpy(e->key, ev->key, KL_COORD_KEY_LEN);
    e->generation = ev->generation;
    memcpy(e->transfer_id, ev->transfer_id_text, sizeof e->transfer_id);
    snprintf(e->source, sizeof e->source, "%.128s/%.128s", ev->source_queue, ev->source_lane);
    snprintf(e->step, sizeof e->step, "%s", step);
    e->code = why ? why->code : KL_INTERNAL;
    if (why) {
        snprintf(e->detail, sizeof e->detail, "%s", why->detail);
        snprintf(e->message, sizeof e->message, "%s", why->message);
    }
    e->unix_ms = unix_ms;
    pthread_mutex_unlock(&f->mu);
}

bool kl_coord_failed_contains(kl_coord_failed *f, const uint8_t key[KL_COORD_KEY_LEN],
                              uint64_t generation)
{
    pthread_mutex_lock(&f->mu);
    bool found = find(f, key, generation) != NULL;
    pthread_mutex_unlock(&f->mu);
    return found;
}

size_t kl_coord_failed_latest(kl_coord_failed *f, kl_coord_failure *out, size_t max)
{
    pthread_mutex_lock(&f->mu);
    size_t k = 0;
    for (uint32_t i = f->n; i > 0 && k < max; i--)
        out[k++] = f->ring[(f->head + i - 1) % f->capacity];
    pthread_mutex_unlock(&f->mu);
    return k;
}

size_t kl_coord_failed_count(kl_coord_failed *f)
{
    pthread_mutex_lock(&f->mu);
    size_t n = f->n;
    pthread_mutex_unlock(&f->mu);
    return n;
}
