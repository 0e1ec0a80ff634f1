#include "coordinator/config.h"

#include "common/metrics.h"
#include "common/names.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

/* One numeric option: its key (path for errors), range and default. */
typedef struct num_opt {
    const char *key;
    const char *path;
    uint64_t min, max, def;
} num_opt;

static const num_opt TOP_NUMS[] = {
    {"flush_interval_ms", "flush_interval_ms", 1, 60000, KL_COORD_DEFAULT_FLUSH_MS},
    {"workers", "workers", 1, KL_COORD_WORKERS_MAX, KL_COORD_DEFAULT_WORKERS},
    {"buffer_capacity", "buffer_capacity", 1, 100000, KL_COORD_DEFAULT_BUFFER},
    {"call_timeout_ms", "call_timeout_ms", 100, 600000, KL_COORD_DEFAULT_CALL_TIMEOUT_MS},
    /* libuv's threadpool holds at most 1024 threads. */
    {"call_threads", "call_threads", 1, 1024, KL_COORD_DEFAULT_CALL_THREADS},
};
static const num_opt DISC_NUMS[] = {
    {"interval_ms", "discovery.interval_ms", 1, 600000, KL_COORD_DEFAULT_DISCOVERY_MS},
    {"max_records", "discovery.max_records", 1, 1000, KL_COORD_DEFAULT_MAX_RECORDS},
    /* At least 1 KiB so one ordinary intent token always fits a page. */
    {"max_bytes", "discovery.max_bytes", 1024, 1u << 30, KL_COORD_DEFAULT_MAX_BYTES},
    {"max_work", "discovery.max_work", 1, 100000, KL_COORD_DEFAULT_MAX_WORK},
};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const char *const TOP_STRS[] = {"cluster_file", "database",
                                       "transfer_coordinator_principal_id",
                                       "principal_key_file", "status_file", "discovery",
                                       "metrics", "metrics_token_file", "log_level"};

static kl_code bad(kl_err *err, const char *path, const char *what)
{
    return kl_fail(err, KL_INVALID_ARGUMENT, path, "coordinator config: %s %s", path, what);
}

static kl_code get_num(json_t *obj, const num_opt *o, uint64_t *out, kl_err *err)
{
    json_t *v = json_object_get(obj, o->key);
    if (v == NULL) {
        *out = o->def;
        return KL_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        (uint64_t)json_integer_value(v) < o->min || (uint64_t)json_integer_value(v) > o->max)
        return kl_fail(err, KL_INVALID_ARGUMENT, o->path,
                       "coordinator config: %s must be an integer in %llu..%llu", o->path,
                       (unsigned long long)o->min, (unsigned long long)o->max);
    *out = (uint64_t)json_integer_value(v);
    return KL_OK;
}

/* A string option; required or not, it must be a non-empty string that fits cap. */
static kl_code get_str(json_t *obj, const char *key, bool required, char *dst, size_t cap,
                       kl_err *err)
{
    json_t *v = json_object_get(obj, key);
    dst[0] = '\0';
    if (v == NULL)
        return required ? bad(err, key, "is required") : KL_OK;
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) >= cap ||
        strlen(json_string_value(v)) != json_string_length(v))
        return kl_fail(err, KL_INVALID_ARGUMENT, key,
                       "coordinator config: %s must be a non-empty string under %zu bytes", key,
                       cap);
    memcpy(dst, json_string_value(v), json_string_length(v) + 1);
    return KL_OK;
}

/* Refuses a key outside `known` (a typo must not silently fall back to a default). */
static kl_code only_known(json_t *obj, const char *where, const char *const *known, size_t nk,
                          const num_opt *nums, size_t nn, kl_err *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        bool ok = false;
        for (size_t i = 0; i < nk && !ok; i++)
            ok = strcmp(key, known[i]) == 0;
        for (size_t i = 0; i < nn && !ok; i++)
            ok = strcmp(key, nums[i].key) == 0;
        if (!ok) {
            char path[160];
            snprintf(path, sizeof path, "%s%s%.100s", where, where[0] ? "." : "", key);
            return bad(err, path, "is not a known key");
        }
    }
    return KL_OK;
}

static kl_code split_database(kl_coord_config *c, kl_err *err)
{
    const char *slash = strchr(c->database, '/');
    if (slash == NULL || strchr(slash + 1, '/') != NULL)
        return bad(err, "database", "must be TENANT/DB (one '/')");
    size_t tl = (size_t)(slash - c->database);
    if (tl == 0 || tl > KL_COORD_NAME_MAX || strlen(slash + 1) > KL_COORD_NAME_MAX)
        return bad(err, "database", "must be TENANT/DB with both parts 1..128 bytes");
    memcpy(c->tenant, c->database, tl);
    c->tenant[tl] = '\0';
    strcpy(c->db, slash + 1);
    kl_err e;
    if (kl_name_check("tenant", c->tenant, &e) != KL_OK ||
        kl_name_check("database", c->db, &e) != KL_OK)
        return bad(err, "database", "must be TENANT/DB of identifiers ([A-Za-z0-9._:-])");
    return KL_OK;
}

/* "<dir of cluster_file>/coordinator-<principal>.status.json" ("coordinator.status.json"
 * without a principal), so two coordinators of different principals never share one. */
static kl_code default_status_file(kl_coord_config *c, kl_err *err)
{
    const char *slash = strrchr(c->cluster_file, '/');
    int dirlen = slash ? (int)(slash - c->cluster_file) : 1;
    const char *dir = slash ? c->cluster_file : ".";
    int n = c->has_principal
                ? snprintf(c->status_file, sizeof c->status_file,
                           "%.*s/coordinator-%s.status.json", dirlen, dir, c->principal_id)
                : snprintf(c->status_file, sizeof c->status_file,
                           "%.*s/coordinator.status.json", dirlen, dir);
    if (n < 0 || (size_t)n >= sizeof c->status_file)
        return bad(err, "status_file", "(the default one) would be too long: set it");
    return KL_OK;
}

/* "metrics" and "metrics_token_file": both optional; a non-loopback address needs the file. */
static kl_code get_metrics(json_t *root, kl_coord_config *c, kl_err *err)
{
    kl_code rc;
    if ((rc = get_str(root, "metrics", false, c->metrics_addr, sizeof c->metrics_addr, err)) != KL_OK ||
        (rc = get_str(root, "metrics_token_file", false, c->metrics_token_file,
                      sizeof c->metrics_token_file, err)) != KL_OK)
        return rc;
    if (c->metrics_addr[0] == '\0')
        return KL_OK;
    if (kl_metrics_addr_check(c->metrics_addr, "metrics", err) != KL_OK)
        return bad(err, "metrics", "must be HOST:PORT with an IP address or localhost and a port 1..65535");
    if (c->metrics_token_file[0] == '\0' && !kl_metrics_addr_is_loopback(c->metrics_addr))
        return bad(err, "metrics_token_file", "is required: metrics is not a loopback address");
    return KL_OK;
}

static kl_code parse_root(json_t *root, kl_coord_config *c, kl_err *err)
{
    memset(c, 0, sizeof *c);
    if (!json_is_object(root))
        return kl_fail(err, KL_INVALID_ARGUMENT, "config",
                       "coordinator config: not a JSON object");
    kl_code rc = only_known(root, "", TOP_STRS, COUNT(TOP_STRS), TOP_NUMS, COUNT(TOP_NUMS), err);
    if (rc != KL_OK)
        return rc;
    if ((rc = get_str(root, "cluster_file", true, c->cluster_file, sizeof c->cluster_file,
                      err)) != KL_OK ||
        (rc = get_str(root, "database", true, c->database, sizeof c->database, err)) != KL_OK ||
        (rc = split_database(c, err)) != KL_OK)
        return rc;

    /* The principal key must be present, null or a string: silence is not "no discovery". */
    json_t *p = json_object_get(root, "transfer_coordinator_principal_id");
    if (p == NULL)
        return bad(err, "transfer_coordinator_principal_id",
                   "is required (a principal id, or null for no discovery)");
    if (json_is_null(p)) {
        c->has_principal = false;
        if (json_object_get(root, "principal_key_file") != NULL &&
            !json_is_null(json_object_get(root, "principal_key_file")))
            rc = get_str(root, "principal_key_file", false, c->principal_key_file,
                         sizeof c->principal_key_file, err);
        c->principal_key_file[0] = '\0'; /* unused without a principal */
        if (rc != KL_OK)
            return rc;
    } else {
        if (!json_is_string(p))
            return bad(err, "transfer_coordinator_principal_id", "must be a string or null");
        if ((rc = get_str(root, "transfer_coordinator_principal_id", true, c->principal_id,
                          sizeof c->principal_id, err)) != KL_OK)
            return rc;
        kl_err e;
        if (kl_name_check("principal", c->principal_id, &e) != KL_OK)
            return bad(err, "transfer_coordinator_principal_id",
                       "must be an identifier ([A-Za-z0-9._:-], 1..128 bytes)");
        c->has_principal = true;
        if ((rc = get_str(root, "principal_key_file", true, c->principal_key_file,
                          sizeof c->principal_key_file, err)) != KL_OK)
            return rc;
    }

    uint64_t v[COUNT(TOP_NUMS)];
    for (size_t i = 0; i < COUNT(TOP_NUMS); i++)
        if ((rc = get_num(root, &TOP_NUMS[i], &v[i], err)) != KL_OK)
            return rc;
    c->flush_interval_ms = (uint32_t)v[0];
    c->workers = (uint32_t)v[1];
    c->buffer_capacity = (uint32_t)v[2];
    c->call_timeout_ms = (uint32_t)v[3];
    c->call_threads = (uint32_t)v[4];

    json_t *d = json_object_get(root, "discovery");
    if (d != NULL && !json_is_object(d))
        return bad(err, "discovery", "must be an object");
    json_t *empty = json_object();
    if (empty == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "coordinator config: out of memory");
    if (d == NULL)
        d = empty;
    uint64_t dv[COUNT(DISC_NUMS)];
    rc = only_known(d, "discovery", NULL, 0, DISC_NUMS, COUNT(DISC_NUMS), err);
    for (size_t i = 0; rc == KL_OK && i < COUNT(DISC_NUMS); i++)
        rc = get_num(d, &DISC_NUMS[i], &dv[i], err);
    json_decref(empty);
    if (rc != KL_OK)
        return rc;
    c->discovery_interval_ms = (uint32_t)dv[0];
    c->discovery_max_records = (uint32_t)dv[1];
    c->discovery_max_bytes = dv[2];
    c->discovery_max_work = (uint32_t)dv[3];

    if ((rc = get_metrics(root, c, err)) != KL_OK)
        return rc;
    char level[8] = "info";
    if (json_object_get(root, "log_level") != NULL &&
        get_str(root, "log_level", false, level, sizeof level, err) != KL_OK)
        return bad(err, "log_level", "must be \"info\" or \"debug\"");
    if (strcmp(level, "info") != 0 && strcmp(level, "debug") != 0)
        return bad(err, "log_level", "must be \"info\" or \"debug\"");
    c->log_debug = strcmp(level, "debug") == 0;
    if (json_object_get(root, "status_file") != NULL)
        return get_str(root, "status_file", false, c->status_file, sizeof c->status_file, err);
    return default_status_file(c, err);
}

kl_code kl_coord_config_parse(const char *json_text, kl_coord_config *out, kl_err *err)
{
    json_error_t je;
    json_t *root = json_loads(json_text, JSON_REJECT_DUPLICATES, &je);
    if (root == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "config",
                       "coordinator config: not valid JSON (line %d: %.120s)", je.line, je.text);
    kl_code rc = parse_root(root, out, err);
    json_decref(root);
    return rc;
}

kl_code kl_coord_config_load(const char *path, kl_coord_config *out, kl_err *err)
{
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (root == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "config",
                       "coordinator config %.200s: cannot read or parse (line %d: %.100s)",
                       path, je.line, je.text);
    kl_code rc = parse_root(root, out, err);
    json_decref(root);
    return rc;
}
