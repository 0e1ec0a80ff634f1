#include "daemon/store/last_write.h"

#include <stdlib.h>
#include <string.h>

static int key_cmp(const kl_last_write_key *x, const kl_last_write_key *y)
{
    size_t n = x->len < y->len ? x->len : y->len;
    int c = n ? memcmp(x->key, y->key, n) : 0;
    return c != 0 ? c : (x->len > y->len) - (x->len < y->len);
}

/* Key order, and within one key the sequence's order. */
static int write_cmp(const void *a, const void *b)
{
    const kl_last_write_key *x = a, *y = b;
    int c = key_cmp(x, y);
    return c != 0 ? c : (x->pos > y->pos) - (x->pos < y->pos);
}

size_t kl_last_write_sort(kl_last_write_key *w, size_t n)
{
    if (n < 2)
        return n;
    qsort(w, n, sizeof *w, write_cmp);
    /* Each run of one key ends with its last write. */
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        if (i + 1 == n || key_cmp(&w[i], &w[i + 1]) != 0)
            w[kept++] = w[i];
    return kept;
}
