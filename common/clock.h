/* clock: a clock's reading in whole milliseconds. Header only; owns nothing.
 * Callers pick the clock: CLOCK_REALTIME for times other hosts compare or that are stored
 * (Unix milliseconds), CLOCK_MONOTONIC for bounds on waits in this process, CLOCK_BOOTTIME
 * for leases that must keep ageing while the host is suspended. */
#ifndef KL_CLOCK_H
#define KL_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t kl_clock_ms(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
