/* buf: growable byte buffer (buf.h). */
#include "daemon/engine/buf.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

void kl_buf_free(kl_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

int kl_buf_append(kl_buf *b, const void *p, size_t n)
{
    /* invariant I-ENG-11: a buffer's contents fit its allocation */
    assert(b->len <= b->cap && (b->cap == 0 || b->p != NULL));
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *np = realloc(b->p, cap);
        if (np == NULL)
            return -1;
        b->p = np;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

/* Writes tag then v as a varint into hdr (at least 11 bytes); returns the length. */
static size_t tag_varint(uint8_t *hdr, uint8_t tag, uint64_t v)
{
    size_t h = 0;
    hdr[h++] = tag;
    do {
        uint8_t byte = v & 0x7f;
        v >>= 7;
        hdr[h++] = (uint8_t)(byte | (v ? 0x80 : 0));
    } while (v);
    return h;
}

int kl_buf_append_field(kl_buf *b, uint8_t tag, const uint8_t *p, size_t n)
{
    uint8_t hdr[11];
    size_t h = tag_varint(hdr, tag, n);
    return kl_buf_append(b, hdr, h) || kl_buf_append(b, p, n) ? -1 : 0;
}

int kl_buf_append_varint_field(kl_buf *b, uint8_t tag, uint64_t v)
{
    uint8_t hdr[11];
    return kl_buf_append(b, hdr, tag_varint(hdr, tag, v));
}
