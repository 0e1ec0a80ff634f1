/* wire: big-endian integers as the network protocols carry them (nng's SP framing, the
 * peer protocol, the client port). Header only: every function is a few shifts, inlined
 * where a frame is built or parsed. Owns nothing. */
#ifndef KL_WIRE_H
#define KL_WIRE_H

#include <stdint.h>

static inline void kl_wire_put_u64(uint8_t *b, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        b[i] = (uint8_t)v;
}

static inline uint64_t kl_wire_get_u64(const uint8_t *b)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | b[i];
    return v;
}

#endif
