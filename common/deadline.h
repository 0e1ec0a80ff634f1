/* deadline: an absolute CLOCK_MONOTONIC time ms from now, as pthread_cond_timedwait takes
 * it from a condition variable set up on that clock. Header only; owns nothing. Monotonic,
 * because a wall clock stepped back would stretch every bounded wait by the step. */
#ifndef KL_DEADLINE_H
#define KL_DEADLINE_H

#include <stdint.h>
#include <time.h>

static inline void kl_deadline_after_ms(struct timespec *ts, int64_t ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

#endif
