/* entry_clock: the partition time a leader stamps into each log entry (LogEntry.time_unix_ms).
 *
 * Partition time is what leases, message expiry, delays and record timestamps are measured
 * against. It is decided once, by the leader, and recorded in the entry: replicas apply the
 * recorded value and never read a clock. A leader's wall clock can step (NTP, an operator,
 * a VM resume), so it is followed only within a bounded rate of real elapsed time:
 *
 *   e    = CLOCK_BOOTTIME elapsed since this member last stamped or newly observed
 *          the previous partition time `last` (monotonic, counts suspend; 0 if negative)
 *   next = clamp(wall, last + e * (1 - r), last + e * (1 + r)),   r = KL_ENTRY_CLOCK_RATE_PPM
 *
 * Bounds, for any clock step of one member either way:
 *  - early: over any real interval D on one leader, partition time advances at most
 *    D * (1 + r), so a lease or TTL of length L can end no earlier than L / (1 + r) of real
 *    time after it started (30 s -> 29.7 s at r = 1%);
 *  - frozen: it advances at least D * (1 - r) (never stands still while entries are
 *    written), so a lease lasts at most L / (1 - r);
 *  - drift: while the wall clock stays inside that band, entries carry the wall clock
 *    exactly; outside it partition time moves toward the wall clock at r of elapsed time
 *    (an hour's step is absorbed in 100 hours), so drift between members never accumulates.
 * New leader: it has no stamp of its own, so its reference is the moment it applied (or, at
 * open, found in its store) the latest entry time. That moment is after the previous leader
 * stamped it, so the rule above never runs ahead of real time across a leader change; it
 * may lag by the apply delay plus the time the partition had no leader (a whole partition
 * stopped for an hour resumes an hour behind the wall clock and catches up at rate r).
 * Only a member that has neither stamped nor applied any timed entry (a new partition's
 * first entry) takes its wall clock as is. All times are in ns except the returned stamp. */
#ifndef KL_ENTRY_CLOCK_H
#define KL_ENTRY_CLOCK_H

#include <stdbool.h>
#include <stdint.h>

/* r: 1% = 10 ms per second, 20 times NTP's maximum slew (500 ppm), so a healthy clock is
 * always followed exactly, and small enough that a step shortens a lease by at most 1%. */
#define KL_ENTRY_CLOCK_RATE_PPM 10000

typedef struct kl_entry_clock {
    int64_t last_ns;       /* latest partition time stamped or applied here (Unix ns) */
    int64_t ref_boot_ns;   /* CLOCK_BOOTTIME when last_ns was stamped or first observed */
    bool has_ref;          /* false until the first stamp or timed entry */
} kl_entry_clock;

/* The partition time (Unix ms) of the next entry, given the leader's wall clock (Unix ms)
 * and CLOCK_BOOTTIME (ns), and records it as `last`. Never less than any earlier stamp or
 * observed entry time. */
int64_t kl_entry_clock_stamp(kl_entry_clock *c, int64_t wall_ms, int64_t boot_ns);

/* An entry of time entry_ms (Unix ms; 0 = untimed, ignored) was applied at CLOCK_BOOTTIME
 * boot_ns. A later time than `last` becomes `last`, referenced at boot_ns. */
void kl_entry_clock_observe(kl_entry_clock *c, int64_t entry_ms, int64_t boot_ns);

#endif
