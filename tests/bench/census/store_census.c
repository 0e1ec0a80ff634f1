/* store-census DIR...: what a stopped member's store holds, by key tag ('L' log, 'O'
 * outcomes, 'E' their expiry index, 'G' messages, ...): records, key bytes and value bytes
 * (uncompressed), one line per tag, then the total. tests/bench/retain_disk.sh uses it to
 * split a member's disk growth into log and outcomes. Read only; the member must be stopped
 * (RocksDB's lock). */
#include "daemon/store/store.h"

#include <rocksdb/c.h>
#include <stdio.h>
#include <string.h>

static void census(const char *dir)
{
    kl_store *st;
    kl_err err;
    if (kl_store_open(dir, NULL, &st, &err) != KL_OK) {
        fprintf(stderr, "store-census: %s: %s\n", dir, err.message);
        return;
    }
    unsigned long long n[256] = {0}, kb[256] = {0}, vb[256] = {0};
    /* the state family, then the log family (store.h) */
    rocksdb_iterator_t *its[2] = {kl_store_iterator(st), kl_store_log_iterator(st)};
    for (int f = 0; f < 2; f++) {
        rocksdb_iterator_t *it = its[f];
        for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
            size_t kl, vl;
            const unsigned char *k = (const unsigned char *)rocksdb_iter_key(it, &kl);
            (void)rocksdb_iter_value(it, &vl);
            unsigned t = kl ? k[0] : 0;
            n[t]++;
            kb[t] += kl;
            vb[t] += vl;
        }
        rocksdb_iter_destroy(it);
    }
    kl_store_close(st);
    unsigned long long tn = 0, tb = 0;
    for (unsigned t = 0; t < 256; t++) {
        if (n[t] == 0)
            continue;
        printf("census %s tag=%c records=%llu key_bytes=%llu value_bytes=%llu\n", dir, t >= 32 && t < 127 ? t : '?',
               n[t], kb[t], vb[t]);
        tn += n[t];
        tb += kb[t] + vb[t];
    }
    printf("census %s total records=%llu bytes=%llu\n", dir, tn, tb);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: store-census DIR...\n");
        return 2;
    }
    for (int i = 1; i < argc; i++)
        census(argv[i]);
    return 0;
}
