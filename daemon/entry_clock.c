#include "daemon/entry_clock.h"

#define NS_PER_MS 1000000

/* e * r without overflow for any elapsed time a machine can have. */
static int64_t rate_of(int64_t e)
{
    return e / 1000000 * KL_ENTRY_CLOCK_RATE_PPM + e % 1000000 * KL_ENTRY_CLOCK_RATE_PPM / 1000000;
}

int64_t kl_entry_clock_stamp(kl_entry_clock *c, int64_t wall_ms, int64_t boot_ns)
{
    int64_t wall = wall_ms * NS_PER_MS;
    int64_t next;
    if (!c->has_ref) {
        next = wall > c->last_ns ? wall : c->last_ns;
    } else {
        int64_t e = boot_ns > c->ref_boot_ns ? boot_ns - c->ref_boot_ns : 0;
        int64_t lo = c->last_ns + e - rate_of(e);
        int64_t hi = c->last_ns + e + rate_of(e);
        next = wall < lo ? lo : wall > hi ? hi : wall;
    }
    c->last_ns = next;
    c->ref_boot_ns = boot_ns;
    c->has_ref = true;
    return next / NS_PER_MS;
}

void kl_entry_clock_observe(kl_entry_clock *c, int64_t entry_ms, int64_t boot_ns)
{
    int64_t t = entry_ms * NS_PER_MS;
    if (entry_ms <= 0 || (c->has_ref && t <= c->last_ns))
        return;
    c->last_ns = t;
    c->ref_boot_ns = boot_ns;
    c->has_ref = true;
}
