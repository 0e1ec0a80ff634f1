#include "daemon/store/last_write.h"

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

static void sift_down(kl_last_write_key *w, size_t root, size_t n)
{
    for (;;) {
        size_t child = 2 * root + 1;
        if (child >= n)
            return;
        if (child + 1 < n && write_cmp(&w[child], &w[child + 1]) < 0)
            child++;
        if (write_cmp(&w[root], &w[child]) >= 0)
            return;
        kl_last_write_key t = w[root];
        w[root] = w[child];
        w[child] = t;
        root = child;
    }
}

/* Heapsort: in place and allocation-free. glibc's qsort is a merge sort that mallocs a
 * copy of any array past 1 KiB, once per applied entry here. write_cmp is a total order
 * (pos is distinct), so the result is the one any sort gives. */
static void heap_sort(kl_last_write_key *w, size_t n)
{
    for (size_t i = n / 2; i-- > 0;)
        sift_down(w, i, n);
    for (size_t end = n - 1; end > 0; end--) {
        kl_last_write_key t = w[0];
        w[0] = w[end];
        w[end] = t;
        sift_down(w, 0, end);
    }
}

size_t kl_last_write_sort(kl_last_write_key *w, size_t n)
{
    if (n < 2)
        return n;
    heap_sort(w, n);
    /* Each run of one key ends with its last write. */
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        if (i + 1 == n || key_cmp(&w[i], &w[i + 1]) != 0)
            w[kept++] = w[i];
    return kept;
}
