#include "tests/cluster/store_scan.h"

#include <rocksdb/c.h>
#include <sodium.h>

#include "daemon/store/keys.h"

void store_scan_digest(kl_store *st, store_scan_keep keep, store_scan_each each, void *arg, uint8_t digest[32])
{
    crypto_generichash_state h;
    crypto_generichash_init(&h, NULL, 0, 32);
    rocksdb_iterator_t *it = kl_store_iterator(st);
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
        if (kl == 0 || !keep(k, kl, arg))
            continue;
        const uint8_t *v = (const uint8_t *)rocksdb_iter_value(it, &vl);
        if (each != NULL)
            each(k, kl, v, vl, arg);
        uint8_t lens[16];
        kl_be64_put(lens, kl);
        kl_be64_put(lens + 8, vl);
        crypto_generichash_update(&h, lens, sizeof lens);
        crypto_generichash_update(&h, k, kl);
        crypto_generichash_update(&h, v, vl);
    }
    rocksdb_iter_destroy(it);
    crypto_generichash_final(&h, digest, 32);
}
