#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static const char *log_component = "keyload";
static kl_log_level log_min = KL_LOG_INFO;

void kl_log_set_component(const char *component) { log_component = component; }
void kl_log_set_level(kl_log_level level) { log_min = level; }

void kl_log(kl_log_level level, const char *msg, const char *fmt, ...)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    if (level < log_min)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char line[1024];
    int n = snprintf(line, sizeof line,
                     "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s comp=%s msg=\"%s\"",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, names[level], log_component, msg);
    if (n > 0 && (size_t)n < sizeof line && fmt != NULL && fmt[0] != '\0') {
        line[n++] = ' ';
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
        va_end(ap);
    }
    fprintf(stderr, "%s\n", line);
}
