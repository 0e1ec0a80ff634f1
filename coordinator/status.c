#include "coordinator/status.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Adds value under key; false (and value freed) when anything failed. */
static bool set(json_t *o, const char *key, json_t *value)
{
    if (value == NULL)
        return false;
    if (o == NULL) {
        json_decref(value);
        return false;
    }
    return json_object_set_new(o, key, value) == 0; /* it frees value on failure */
}

static json_t *u64(uint64_t v) { return json_integer((json_int_t)v); }

static json_t *config_json(const kl_coord_config *c)
{
    json_t *o = json_object(), *d = json_object();
    /* d goes into o first, so that o owns it whatever fails next. */
    bool ok = set(o, "discovery", d) && set(d, "interval_ms", u64(c->discovery_interval_ms)) &&
              set(d, "max_records", u64(c->discovery_max_records)) &&
              set(d, "max_bytes", u64(c->discovery_max_bytes)) &&
              set(d, "max_work", u64(c->discovery_max_work));
    ok = ok && set(o, "cluster_file", json_string(c->cluster_file)) &&
         set(o, "database", json_string(c->database)) &&
         set(o, "principal_id", c->has_principal ? json_string(c->principal_id) : json_null()) &&
         set(o, "flush_interval_ms", u64(c->flush_interval_ms)) &&
         set(o, "workers", u64(c->workers)) && set(o, "buffer_capacity", u64(c->buffer_capacity)) &&
         set(o, "call_timeout_ms", u64(c->call_timeout_ms)) &&
         set(o, "log_level", json_string(c->log_debug ? "debug" : "info"));
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *pending_json(kl_coord *co)
{
    json_t *o = json_object(), *lanes = json_array();
    pthread_mutex_lock(&co->lanes_mu);
    bool ok = lanes != NULL;
    for (size_t i = 0; ok && i < co->n_lanes; i++) {
        json_t *l = json_object();
        ok = set(l, "source", json_string(co->lanes[i].source)) &&
             set(l, "partition", json_integer(co->lanes[i].partition)) &&
             set(l, "pending", u64(co->lanes[i].pending)) && json_array_append_new(lanes, l) == 0;
        if (!ok)
            json_decref(l);
    }
    uint64_t other = co->other_lanes_pending;
    int64_t when = co->lanes_unix_ms;
    pthread_mutex_unlock(&co->lanes_mu);
    if (!ok)
        json_decref(lanes);
    if (!ok || !set(o, "lanes", lanes) || !set(o, "other_lanes", u64(other)) ||
        !set(o, "round_unix_ms", json_integer(when))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *buffers_json(kl_coord *co, uint64_t *in_flight_total)
{
    json_t *arr = json_array();
    *in_flight_total = 0;
    for (uint32_t i = 0; arr != NULL && co->buffers != NULL && i < co->cfg.workers; i++) {
        size_t queued, in_flight, bytes;
        kl_coord_buffer_counts(co->buffers[i], &queued, &in_flight, &bytes);
        *in_flight_total += in_flight;
        json_t *b = json_object();
        if (!set(b, "worker", u64(i)) || !set(b, "queued", u64(queued)) ||
            !set(b, "in_flight", u64(in_flight)) || !set(b, "bytes", u64(bytes)) ||
            !set(b, "capacity", u64(co->cfg.buffer_capacity)) ||
            json_array_append_new(arr, b) != 0) {
            json_decref(b);
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

static json_t *counters_json(kl_coord_stats *s)
{
    struct {
        const char *name;
        atomic_uint_fast64_t *v;
    } c[] = {
        {"rounds", &s->rounds},
        {"listed", &s->listed},
        {"skipped_foreign", &s->skipped_foreign},
        {"skipped_failed", &s->skipped_failed},
        {"skipped_malformed", &s->skipped_malformed},
        {"dispatched", &s->dispatched},
        {"duplicates", &s->duplicates},
        {"buffer_full", &s->buffer_full},
        {"list_errors", &s->list_errors},
        {"turns", &s->turns},
        {"turns_in_flight", &s->turns_in_flight},
        {"turns_in_flight_peak", &s->turns_in_flight_peak},
        {"accept_sent", &s->accept_sent},
        {"accepted", &s->accepted},
        {"accept_deduplicated", &s->accept_deduplicated},
        {"complete_sent", &s->complete_sent},
        {"delivered", &s->delivered},
        {"found_delivered", &s->found_delivered},
        {"terminal_failures", &s->terminal_failures},
        {"retries", &s->retries},
        {"dropped", &s->dropped},
        {"proof_changed", &s->proof_changed},
        {"cancelled", &s->cancelled},
        {"failures_retained", &s->failures_retained},
        {"failure_reads", &s->failure_reads},
        {"witnesses", &s->witnesses},
        {"advanced", &s->advanced},
    };
    json_t *o = json_object();
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        if (!set(o, c[i].name, u64(atomic_load(c[i].v)))) {
            json_decref(o);
            return NULL;
        }
    return o;
}

static json_t *failed_json(kl_coord *co)
{
    kl_coord_failure *f = calloc(KL_COORD_STATUS_FAILED_MAX, sizeof *f);
    json_t *o = json_object(), *arr = json_array();
    if (f == NULL || o == NULL || arr == NULL)
        goto fail;
    size_t n = kl_coord_failed_latest(co->failed, f, KL_COORD_STATUS_FAILED_MAX);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_object();
        if (!set(e, "transfer_id", json_string(f[i].transfer_id)) ||
            !set(e, "source", json_string(f[i].source)) ||
            !set(e, "generation", u64(f[i].generation)) ||
            !set(e, "step", json_string(f[i].step)) ||
            !set(e, "code", json_string(kl_code_name(f[i].code))) ||
            !set(e, "detail", json_string(f[i].detail)) ||
            !set(e, "message", json_string(f[i].message)) ||
            !set(e, "unix_ms", json_integer(f[i].unix_ms)) || json_array_append_new(arr, e) != 0) {
            json_decref(e);
            goto fail;
        }
    }
    free(f);
    if (!set(o, "latest", arr) || !set(o, "count", u64(kl_coord_failed_count(co->failed)))) {
        json_decref(o);
        return NULL;
    }
    return o;

fail:
    json_decref(arr);
    json_decref(o);
    free(f);
    return NULL;
}

char *kl_coord_status_json(kl_coord *co, bool final)
{
    uint64_t in_flight = 0;
    json_t *o = json_object();
    bool ok = set(o, "version", json_integer(1)) &&
              set(o, "written_unix_ms", json_integer(kl_coord_unix_ms())) &&
              set(o, "started_unix_ms", json_integer(co->started_unix_ms)) &&
              set(o, "pid", json_integer(getpid())) && set(o, "final", json_boolean(final)) &&
              set(o, "discovery", json_string(co->cfg.has_principal ? "enabled"
                                                                    : "disabled: null principal")) &&
              set(o, "config", config_json(&co->cfg)) && set(o, "pending", pending_json(co)) &&
              set(o, "buffers", buffers_json(co, &in_flight)) &&
              set(o, "in_flight", u64(in_flight)) &&
              set(o, "counters", counters_json(&co->stats)) && set(o, "failed", failed_json(co));
    char *text = ok ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    return text;
}

static kl_code write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return KL_INTERNAL;
        p += w;
        n -= (size_t)w;
    }
    return KL_OK;
}

kl_code kl_coord_status_write(kl_coord *co, bool final, kl_err *err)
{
    char *text = kl_coord_status_json(co, final);
    if (text == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "status: out of memory");
    char tmp[KL_COORD_PATH_MAX + 32];
    int n = snprintf(tmp, sizeof tmp, "%s.tmp.%d", co->cfg.status_file, (int)getpid());
    kl_code rc = KL_OK;
    if (n < 0 || (size_t)n >= sizeof tmp) {
        rc = kl_fail(err, KL_INVALID_ARGUMENT, "status_file", "status: path too long");
        goto out;
    }
    unlink(tmp); /* a leftover of a crashed writer with our pid */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = kl_fail(err, KL_UNAVAILABLE, "status_file", "status: cannot create %.200s: %s", tmp,
                     strerror(errno));
        goto out;
    }
    size_t len = strlen(text);
    if (write_all(fd, text, len) != KL_OK || write_all(fd, "\n", 1) != KL_OK || fsync(fd) != 0) {
        rc = kl_fail(err, KL_UNAVAILABLE, "status_file", "status: cannot write %.200s: %s", tmp,
                     strerror(errno));
        close(fd);
        unlink(tmp);
        goto out;
    }
    close(fd);
    if (rename(tmp, co->cfg.status_file) != 0) {
        rc = kl_fail(err, KL_UNAVAILABLE, "status_file", "status: cannot rename to %.200s: %s",
                     co->cfg.status_file, strerror(errno));
        unlink(tmp);
    }
out:
    free(text);
    return rc;
}

kl_code kl_coord_status_print(const char *path, kl_err *err)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return kl_fail(err, errno == ENOENT ? KL_NOT_FOUND : KL_UNAVAILABLE, "status_file",
                       "no status at %.200s (%s): has the coordinator run?", path,
                       strerror(errno));
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        fwrite(buf, 1, n, stdout);
    fclose(f);
    return KL_OK;
}
