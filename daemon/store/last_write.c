#include "daemon/store/last_write.h"

#include <stdlib.h>
#include <string.h>

/* FNV-1a: keys are short (under 64 bytes), and a collision costs only a memcmp. */
static uint64_t key_hash(const uint8_t *k, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) {
        h ^= k[i];
        h *= 1099511628211ull;
    }
    return h;
}

bool kl_last_write_mark(const kl_last_write_key *keys, size_t n, bool *superseded)
{
    for (size_t i = 0; i < n; i++)
        superseded[i] = false;
    if (n < 2)
        return true;
    size_t cap = 4;
    while (cap < 2 * n)
        cap <<= 1;
    /* slot holds write index + 1; 0 is empty. Load factor stays at most one half. */
    size_t *slot = calloc(cap, sizeof *slot);
    if (slot == NULL)
        return false;
    /* Walk from the end: the first sighting of a key is its last write. */
    for (size_t i = n; i-- > 0;) {
        size_t s = (size_t)key_hash(keys[i].key, keys[i].len) & (cap - 1);
        for (;;) {
            if (slot[s] == 0) {
                slot[s] = i + 1;
                break;
            }
            const kl_last_write_key *o = &keys[slot[s] - 1];
            if (o->len == keys[i].len && memcmp(o->key, keys[i].key, o->len) == 0) {
                superseded[i] = true;
                break;
            }
            s = (s + 1) & (cap - 1);
        }
    }
    free(slot);
    return true;
}
