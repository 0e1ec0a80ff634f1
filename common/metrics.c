/* metrics: the Prometheus text exposition format (the contract is in metrics.h). */
#include "common/metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const double kl_metrics_latency_bounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                            0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5,
                                            5,      10};
const size_t kl_metrics_latency_nbounds =
    sizeof kl_metrics_latency_bounds / sizeof kl_metrics_latency_bounds[0];

void kl_metrics_buf_free(kl_metrics_buf *b)
{
    free(b->p);
    *b = (kl_metrics_buf){0};
}

char *kl_metrics_buf_take(kl_metrics_buf *b, size_t *len)
{
    char *p = NULL;
    *len = 0;
    if (!b->oom && b->p != NULL) {
        p = b->p;
        *len = b->len;
        b->p = NULL;
    }
    kl_metrics_buf_free(b);
    return p;
}

static bool reserve(kl_metrics_buf *b, size_t more)
{
    if (b->oom)
        return false;
    if (b->len + more + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (p == NULL) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

static void put(kl_metrics_buf *b, const char *s, size_t n)
{
    if (!reserve(b, n))
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void puts_(kl_metrics_buf *b, const char *s) { put(b, s, strlen(s)); }

static void putf(kl_metrics_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(kl_metrics_buf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* Escapes backslash and newline (HELP text), and double quote too in a label value. */
static void put_escaped(kl_metrics_buf *b, const char *s, bool quote)
{
    for (; *s; s++) {
        if (*s == '\\')
            put(b, "\\\\", 2);
        else if (*s == '\n')
            put(b, "\\n", 2);
        else if (quote && *s == '"')
            put(b, "\\\"", 2);
        else
            put(b, s, 1);
    }
}

void kl_metrics_family(kl_metrics_buf *b, const char *name, const char *type, const char *help)
{
    puts_(b, "# HELP ");
    puts_(b, name);
    put(b, " ", 1);
    put_escaped(b, help, false);
    puts_(b, "\n# TYPE ");
    puts_(b, name);
    put(b, " ", 1);
    puts_(b, type);
    put(b, "\n", 1);
}

static void put_series(kl_metrics_buf *b, const char *name, const kl_metrics_label *labels,
                       size_t nlabels)
{
    puts_(b, name);
    if (nlabels == 0)
        return;
    put(b, "{", 1);
    for (size_t i = 0; i < nlabels; i++) {
        if (i)
            put(b, ",", 1);
        puts_(b, labels[i].name);
        put(b, "=\"", 2);
        put_escaped(b, labels[i].value ? labels[i].value : "", true);
        put(b, "\"", 1);
    }
    put(b, "}", 1);
}

void kl_metrics_u64(kl_metrics_buf *b, const char *name, const kl_metrics_label *labels,
                    size_t nlabels, uint64_t value)
{
    put_series(b, name, labels, nlabels);
    putf(b, " %" PRIu64 "\n", value);
}

static void put_f64(kl_metrics_buf *b, double v)
{
    if (isinf(v))
        puts_(b, v > 0 ? "+Inf" : "-Inf");
    else if (isnan(v))
        puts_(b, "NaN");
    else
        putf(b, "%.15g", v);
}

void kl_metrics_f64(kl_metrics_buf *b, const char *name, const kl_metrics_label *labels,
                    size_t nlabels, double value)
{
    put_series(b, name, labels, nlabels);
    put(b, " ", 1);
    put_f64(b, value);
    put(b, "\n", 1);
}

void kl_metrics_one(kl_metrics_buf *b, const char *name, const char *type, const char *help,
                    uint64_t value)
{
    kl_metrics_family(b, name, type, help);
    kl_metrics_u64(b, name, NULL, 0, value);
}

void kl_metrics_hist_init(kl_metrics_hist *h, const double *bounds, size_t nbounds)
{
    *h = (kl_metrics_hist){.bounds = bounds,
                           .nbounds = nbounds < KL_METRICS_HIST_BUCKETS_MAX ? nbounds
                                                                           : KL_METRICS_HIST_BUCKETS_MAX};
}

void kl_metrics_hist_observe(kl_metrics_hist *h, double v)
{
    size_t i = 0;
    while (i < h->nbounds && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->count++;
    h->sum += v;
}

void kl_metrics_hist_write(kl_metrics_buf *b, const char *name, const char *help,
                           const kl_metrics_hist *h)
{
    char sname[160];
    kl_metrics_family(b, name, "histogram", help);
    snprintf(sname, sizeof sname, "%s_bucket", name);
    uint64_t cum = 0;
    for (size_t i = 0; i <= h->nbounds; i++) {
        cum += h->counts[i];
        char le[40];
        if (i == h->nbounds)
            snprintf(le, sizeof le, "+Inf");
        else
            snprintf(le, sizeof le, "%.15g", h->bounds[i]);
        kl_metrics_label l = {"le", le};
        kl_metrics_u64(b, sname, &l, 1, cum);
    }
    snprintf(sname, sizeof sname, "%s_sum", name);
    kl_metrics_f64(b, sname, NULL, 0, h->sum);
    snprintf(sname, sizeof sname, "%s_count", name);
    kl_metrics_u64(b, sname, NULL, 0, h->count);
}

void kl_metrics_cap_init(kl_metrics_cap *c, size_t max) { *c = (kl_metrics_cap){.max = max}; }

bool kl_metrics_cap_take(kl_metrics_cap *c, size_t series)
{
    if (c->used < c->max) {
        c->used++;
        return true;
    }
    c->dropped += series;
    return false;
}

/* host and port of `host:port` (host without brackets); false when malformed. */
static bool split_addr(const char *addr, char *host, size_t hcap, long *port)
{
    const char *colon = strrchr(addr, ':');
    if (colon == NULL || colon == addr)
        return false;
    const char *h = addr, *he = colon;
    if (*h == '[') {
        if (he[-1] != ']')
            return false;
        h++;
        he--;
    }
    size_t hl = (size_t)(he - h);
    if (hl == 0 || hl >= hcap)
        return false;
    memcpy(host, h, hl);
    host[hl] = '\0';
    char *end;
    errno = 0;
    *port = strtol(colon + 1, &end, 10);
    return errno == 0 && end != colon + 1 && *end == '\0' && *port >= 1 && *port <= 65535;
}

kl_code kl_metrics_addr_check(const char *addr, const char *field, kl_err *err)
{
    char host[64];
    long port;
    unsigned char bin[16];
    if (addr == NULL || !split_addr(addr, host, sizeof host, &port) ||
        (strcmp(host, "localhost") != 0 && inet_pton(addr[0] == '[' ? AF_INET6 : AF_INET, host, bin) != 1))
        return kl_fail(err, KL_INVALID_ARGUMENT, field,
                       "%s must be HOST:PORT with an IP address or localhost as host and a port "
                       "1..65535 (e.g. 127.0.0.1:9401)", field);
    return KL_OK;
}

bool kl_metrics_addr_is_loopback(const char *addr)
{
    char host[64];
    long port;
    unsigned char bin[16];
    if (addr == NULL || !split_addr(addr, host, sizeof host, &port))
        return false;
    if (strcmp(host, "localhost") == 0)
        return true;
    if (addr[0] == '[')
        return inet_pton(AF_INET6, host, bin) == 1 && memcmp(bin, in6addr_loopback.s6_addr, 16) == 0;
    return inet_pton(AF_INET, host, bin) == 1 && bin[0] == 127;
}

kl_code kl_metrics_endpoint_check(const char *addr, const char *token_file, const char *addr_name,
                                  const char *token_name, kl_err *err)
{
    if (addr == NULL || addr[0] == '\0')
        return KL_OK;
    if (kl_metrics_addr_check(addr, "metrics", err) != KL_OK)
        return kl_fail(err, KL_INVALID_ARGUMENT, "metrics",
                       "%s must be HOST:PORT with an IP address or localhost and a port 1..65535 "
                       "(e.g. 127.0.0.1:9401)", addr_name);
    if ((token_file == NULL || token_file[0] == '\0') && !kl_metrics_addr_is_loopback(addr))
        return kl_fail(err, KL_INVALID_ARGUMENT, "metrics_token_file",
                       "%s is not a loopback address: give %s (a bearer token scrapers must send)",
                       addr_name, token_name);
    return KL_OK;
}
