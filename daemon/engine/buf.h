/* buf: a growable byte buffer for encoded protobuf fields built by concatenation (the
 * MutationResults of a batch receipt, the items of a catalog change). The engine, the node
 * and the RPC layer share it; it depends on nothing but libc. */
#ifndef KL_BUF_H
#define KL_BUF_H

#include <stddef.h>
#include <stdint.h>

/* Byte buffer of encoded MutationResult fields (each: field-6 tag, length, bytes). */
typedef struct kl_buf {
    uint8_t *p;
    size_t len, cap;
} kl_buf;
void kl_buf_free(kl_buf *b);
int kl_buf_append(kl_buf *b, const void *p, size_t n);
/* Appends one protobuf length-delimited field (tag byte, varint length, bytes), so that
 * encoded messages can be built by concatenation in field order. Returns -1 on OOM. */
int kl_buf_append_field(kl_buf *b, uint8_t tag, const uint8_t *p, size_t n);
/* Appends one varint field (tag byte, then v). Returns -1 on OOM. */
int kl_buf_append_varint_field(kl_buf *b, uint8_t tag, uint64_t v);

#endif
