/* clockshim: an LD_PRELOAD library that offsets a process's wall clock only, for the
 * nemesis clock-step fault. The offset (signed seconds, e.g. "+3600" or "-60") is read from
 * the file named by NEMESIS_CLOCK_FILE, at most every 50 ms, so a step takes effect while
 * the process runs. CLOCK_REALTIME (and its coarse variant), gettimeofday and time are
 * offset; CLOCK_MONOTONIC, CLOCK_BOOTTIME and every timed wait are left alone.
 *
 * Why not libfaketime: Debian's libfaketime 0.9.10 with FAKETIME_DONT_FAKE_MONOTONIC=1
 * wraps pthread_cond_timedwait and returns ETIMEDOUT at once on a condition variable that
 * uses CLOCK_MONOTONIC (a 2 s wait ends after 0 ms), which makes the daemon's bounded
 * connect fail every time: data partitions never reach partition 0 and never serve. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static _Atomic long offset_s;
static _Atomic long long next_read_ns;

static long long raw_mono_ns(void)
{
    struct timespec ts;
    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The current offset, reread from the file when the last read is 50 ms old. */
static long current_offset(void)
{
    long long now = raw_mono_ns();
    long long due = atomic_load(&next_read_ns);
    if (now < due || !atomic_compare_exchange_strong(&next_read_ns, &due, now + 50000000LL))
        return atomic_load(&offset_s);
    const char *path = getenv("NEMESIS_CLOCK_FILE");
    if (path == NULL)
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return atomic_load(&offset_s);
    char buf[32];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n > 0) {
        buf[n] = 0;
        atomic_store(&offset_s, strtol(buf, NULL, 10));
    }
    return atomic_load(&offset_s);
}

static clock_gettime_fn real_clock_gettime(void)
{
    static _Atomic(clock_gettime_fn) fn;
    clock_gettime_fn f = atomic_load(&fn);
    if (f == NULL) {
        f = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
        atomic_store(&fn, f);
    }
    return f;
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    clock_gettime_fn f = real_clock_gettime();
    int rc = f ? f(id, ts) : (int)syscall(SYS_clock_gettime, id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE))
        ts->tv_sec += current_offset();
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
    (void)tz;
    struct timespec ts;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    if (rc == 0) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return rc;
}

time_t time(time_t *out)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out != NULL)
        *out = ts.tv_sec;
    return ts.tv_sec;
}
