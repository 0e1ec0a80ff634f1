#include "common/cluster.h"

#include "common/metrics.h"

#include <jansson.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

void kl_limits_default(kl_limits *l)
{
    l->max_batch_bytes = KL_DEFAULT_MAX_BATCH_BYTES;
    l->max_scan_records = KL_DEFAULT_MAX_SCAN_RECORDS;
    l->max_query_read_bytes = KL_DEFAULT_MAX_QUERY_READ_BYTES;
    l->max_frame_bytes = KL_DEFAULT_MAX_FRAME_BYTES;
    l->default_queue_max_messages = KL_DEFAULT_QUEUE_MAX_MESSAGES;
    l->default_queue_max_bytes = KL_DEFAULT_QUEUE_MAX_BYTES;
}

static kl_code get_u64(json_t *obj, const char *key, uint64_t *out, kl_err *err)
{
    json_t *v = json_object_get(obj, key);
    if (v == NULL)
        return KL_OK; /* keep default */
    if (!json_is_integer(v) || json_integer_value(v) <= 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, key,
                       "cluster file: limits.%s must be a positive integer", key);
    *out = (uint64_t)json_integer_value(v);
    return KL_OK;
}

static kl_code copy_str(json_t *obj, const char *key, char *dst, size_t cap, bool required,
                        const char *where, kl_err *err)
{
    json_t *v = json_object_get(obj, key);
    if (v == NULL) {
        if (required)
            return kl_fail(err, KL_INVALID_ARGUMENT, key, "cluster file: %s.%s is missing",
                           where, key);
        dst[0] = '\0';
        return KL_OK;
    }
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) >= cap)
        return kl_fail(err, KL_INVALID_ARGUMENT, key,
                       "cluster file: %s.%s must be a non-empty string under %zu bytes",
                       where, key, cap);
    memcpy(dst, json_string_value(v), json_string_length(v) + 1);
    return KL_OK;
}

/* "public_key": standard base64 (with padding) of exactly 32 bytes; optional. Errors name
 * the field path, e.g. partitions[1].members[0].public_key. */
static kl_code get_public_key(json_t *mj, size_t pi, size_t mi, kl_member *m, kl_err *err)
{
    json_t *v = json_object_get(mj, "public_key");
    if (v == NULL)
        return KL_OK;
    const char *text = json_is_string(v) ? json_string_value(v) : NULL;
    size_t text_len = text ? json_string_length(v) : 0;
    size_t n = 0;
    const char *end = NULL;
    uint8_t buf[KL_CLUSTER_PUBLIC_KEY_LEN + 3];
    if (text == NULL || text_len == 0 ||
        sodium_base642bin(buf, sizeof buf, text, text_len, NULL, &n, &end,
                          sodium_base64_VARIANT_ORIGINAL) != 0 ||
        end != text + text_len || n != KL_CLUSTER_PUBLIC_KEY_LEN)
        return kl_fail(err, KL_INVALID_ARGUMENT, "public_key",
                       "cluster file: partitions[%zu].members[%zu].public_key must be standard "
                       "base64 of %d bytes (an Ed25519 public key)", pi, mi,
                       KL_CLUSTER_PUBLIC_KEY_LEN);
    memcpy(m->public_key, buf, KL_CLUSTER_PUBLIC_KEY_LEN);
    m->has_public_key = true;
    return KL_OK;
}


/* "connections": {"client_max", "client_idle_ms", "peer_max", "peer_idle_ms",
 * "sessions_per_tenant", "sessions_max"}, each optional; idle 0 means never. A tenant bound
 * above the table's size is the table's size. */
static kl_code parse_connections(json_t *root, kl_conn_limits *c, kl_err *err)
{
    *c = (kl_conn_limits){KL_CONN_CLIENT_MAX_DEFAULT, KL_CONN_CLIENT_IDLE_DEFAULT_MS,
                          KL_CONN_PEER_MAX_DEFAULT, KL_CONN_PEER_IDLE_DEFAULT_MS,
                          KL_CONN_SESSIONS_PER_TENANT_DEFAULT, KL_CONN_SESSIONS_MAX_DEFAULT};
    json_t *o = json_object_get(root, "connections");
    if (o == NULL)
        return KL_OK;
    if (!json_is_object(o))
        return kl_fail(err, KL_INVALID_ARGUMENT, "connections", "cluster file: connections must be an object");
    static const char *const names[] = {"client_max", "client_idle_ms", "peer_max", "peer_idle_ms",
                                        "sessions_per_tenant", "sessions_max"};
    uint32_t *slots[] = {&c->client_max, &c->client_idle_ms, &c->peer_max, &c->peer_idle_ms,
                         &c->sessions_per_tenant, &c->sessions_max};
    static const json_int_t lo[] = {1, 0, 1, 0, 1, 1};
    static const json_int_t hi[] = {65536, 86400000, 32, 86400000, 4096, 4096};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        json_t *v = json_object_get(o, names[i]);
        if (v == NULL)
            continue;
        if (!json_is_integer(v) || json_integer_value(v) < lo[i] || json_integer_value(v) > hi[i])
            return kl_fail(err, KL_INVALID_ARGUMENT, names[i],
                           "cluster file: connections.%s must be an integer %lld..%lld", names[i],
                           (long long)lo[i], (long long)hi[i]);
        *slots[i] = (uint32_t)json_integer_value(v);
    }
    if (c->sessions_per_tenant > c->sessions_max)
        c->sessions_per_tenant = c->sessions_max;
    return KL_OK;
}

static kl_code parse_limits(json_t *root, kl_cluster *c, kl_err *err)
{
    kl_code rc;
    json_t *limits = json_object_get(root, "limits");
    if (limits != NULL) {
        if (!json_is_object(limits))
            return kl_fail(err, KL_INVALID_ARGUMENT, "limits", "cluster file: limits must be an object");
        if ((rc = get_u64(limits, "MaxBatchBytes", &c->limits.max_batch_bytes, err)) ||
            (rc = get_u64(limits, "MaxScanRecords", &c->limits.max_scan_records, err)) ||
            (rc = get_u64(limits, "MaxQueryReadBytes", &c->limits.max_query_read_bytes, err)) ||
            (rc = get_u64(limits, "MaxFrameBytes", &c->limits.max_frame_bytes, err)) ||
            (rc = get_u64(limits, "DefaultQueueMaxMessages", &c->limits.default_queue_max_messages, err)) ||
            (rc = get_u64(limits, "DefaultQueueMaxBytes", &c->limits.default_queue_max_bytes, err)))
            return rc;
    }
    return KL_OK;
}

/* The timers, each within its range, then the defaults of those left out. */
static kl_code parse_timers(json_t *root, kl_cluster *c, kl_err *err)
{
    json_t *timers = json_object_get(root, "timers");
    if (timers != NULL) {
        static const char *const names[] = {"tick_ms", "election_ms", "heartbeat_ms", "catalog_lease_ms"};
        uint32_t *slots[] = {&c->timers.tick_ms, &c->timers.election_ms, &c->timers.heartbeat_ms,
                             &c->timers.catalog_lease_ms};
        if (!json_is_object(timers))
            return kl_fail(err, KL_INVALID_ARGUMENT, "timers", "cluster file: timers must be an object");
        for (int i = 0; i < 4; i++) {
            json_t *v = json_object_get(timers, names[i]);
            if (v == NULL)
                continue;
            if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > 600000)
                return kl_fail(err, KL_INVALID_ARGUMENT, names[i],
                               "cluster file: timers.%s must be 1..600000 milliseconds", names[i]);
            *slots[i] = (uint32_t)json_integer_value(v);
        }
        /* Sessions live much longer than the replication timers, so their own range. */
        json_t *ttl = json_object_get(timers, "session_ttl_ms");
        if (ttl != NULL) {
            if (!json_is_integer(ttl) || json_integer_value(ttl) < KL_SESSION_TTL_MIN_MS ||
                json_integer_value(ttl) > KL_SESSION_TTL_MAX_MS)
                return kl_fail(err, KL_INVALID_ARGUMENT, "session_ttl_ms",
                               "cluster file: timers.session_ttl_ms must be %d..%d milliseconds",
                               KL_SESSION_TTL_MIN_MS, KL_SESSION_TTL_MAX_MS);
            c->timers.session_ttl_ms = (uint32_t)json_integer_value(ttl);
        }
        json_t *ret = json_object_get(timers, "outcome_retention_ms");
        if (ret != NULL) {
            if (!json_is_integer(ret) || json_integer_value(ret) < KL_OUTCOME_RETENTION_MIN_MS ||
                json_integer_value(ret) > KL_OUTCOME_RETENTION_MAX_MS)
                return kl_fail(err, KL_INVALID_ARGUMENT, "outcome_retention_ms",
                               "cluster file: timers.outcome_retention_ms must be %lld..%lld milliseconds",
                               KL_OUTCOME_RETENTION_MIN_MS, KL_OUTCOME_RETENTION_MAX_MS);
            c->timers.outcome_retention_ms = (int64_t)json_integer_value(ret);
        }
        if (c->timers.catalog_lease_ms != 0 && c->timers.catalog_lease_ms < KL_CATALOG_LEASE_MIN_MS)
            return kl_fail(err, KL_INVALID_ARGUMENT, "catalog_lease_ms",
                           "cluster file: timers.catalog_lease_ms must be at least %d (a catalog tail "
                           "is held up to %d ms)", KL_CATALOG_LEASE_MIN_MS, KL_CATALOG_TAIL_WAIT_MS);
    }
    if (c->timers.catalog_lease_ms == 0)
        c->timers.catalog_lease_ms = KL_CATALOG_LEASE_DEFAULT_MS;
    if (c->timers.session_ttl_ms == 0)
        c->timers.session_ttl_ms = KL_SESSION_TTL_DEFAULT_MS;
    if (c->timers.outcome_retention_ms == 0)
        c->timers.outcome_retention_ms = KL_OUTCOME_RETENTION_DEFAULT_MS;
    return KL_OK;
}

/* "snapshot": the compaction policy, each setting in range, then the defaults. */
static kl_code parse_snapshot(json_t *root, kl_snapshot_policy *p, kl_err *err)
{
    p->threshold_entries = KL_SNAP_THRESHOLD_DEFAULT;
    p->trailing_entries = KL_SNAP_TRAILING_DEFAULT;
    json_t *snap = json_object_get(root, "snapshot");
    if (snap == NULL)
        return KL_OK;
    if (!json_is_object(snap))
        return kl_fail(err, KL_INVALID_ARGUMENT, "snapshot", "cluster file: snapshot must be an object");
    json_t *th = json_object_get(snap, "threshold_entries");
    if (th != NULL) {
        if (!json_is_integer(th) || json_integer_value(th) < KL_SNAP_THRESHOLD_MIN ||
            json_integer_value(th) > KL_SNAP_THRESHOLD_MAX)
            return kl_fail(err, KL_INVALID_ARGUMENT, "threshold_entries",
                           "cluster file: snapshot.threshold_entries must be %u..%u entries",
                           KL_SNAP_THRESHOLD_MIN, KL_SNAP_THRESHOLD_MAX);
        p->threshold_entries = (uint32_t)json_integer_value(th);
    }
    json_t *tr = json_object_get(snap, "trailing_entries");
    if (tr == NULL && p->trailing_entries >= p->threshold_entries)
        p->trailing_entries = p->threshold_entries / 2; /* a small threshold, default window */
    if (tr != NULL) {
        if (!json_is_integer(tr) || json_integer_value(tr) < 0 ||
            json_integer_value(tr) >= (json_int_t)p->threshold_entries)
            return kl_fail(err, KL_INVALID_ARGUMENT, "trailing_entries",
                           "cluster file: snapshot.trailing_entries must be 0..%u (below "
                           "snapshot.threshold_entries)", p->threshold_entries - 1);
        p->trailing_entries = (uint32_t)json_integer_value(tr);
    }
    return KL_OK;
}

/* Member j of partition i (p), appended to p's members. */
static kl_code parse_member(json_t *mj, size_t i, size_t j, kl_partition *p, const kl_cluster *c,
                            const char *var_root, kl_err *err)
{
    kl_member *m = &p->members[p->member_count];
    kl_code rc;
    json_t *mid = json_object_get(mj, "id");
    if (!json_is_integer(mid) || json_integer_value(mid) <= 0 ||
        json_integer_value(mid) > 1000)
        return kl_fail(err, KL_INVALID_ARGUMENT, "members.id",
                       "cluster file: partitions[%zu].members[%zu].id must be 1..1000", i, j);
    m->id = (int)json_integer_value(mid);
    for (int k = 0; k < p->member_count; k++)
        if (p->members[k].id == m->id)
            return kl_fail(err, KL_INVALID_ARGUMENT, "members.id",
                           "cluster file: member id %d appears twice in partition %d",
                           m->id, p->id);
    if ((rc = copy_str(mj, "client", m->client_url, sizeof m->client_url, true, "member", err)) ||
        (rc = copy_str(mj, "peer", m->peer_url, sizeof m->peer_url, false, "member", err)) ||
        (rc = copy_str(mj, "data", m->data_dir, sizeof m->data_dir, false, "member", err)) ||
        (rc = copy_str(mj, "metrics", m->metrics_addr, sizeof m->metrics_addr, false, "member", err)) ||
        (rc = copy_str(mj, "metrics_token_file", m->metrics_token_file, sizeof m->metrics_token_file,
                       false, "member", err)) ||
        (rc = get_public_key(mj, i, j, m, err)))
        return rc;
    char where[80];
    snprintf(where, sizeof where, "cluster file: partitions[%zu].members[%zu].metrics", i, j);
    if ((rc = kl_metrics_endpoint_check(m->metrics_addr, m->metrics_token_file, where, "metrics_token_file",
                                        err)) != KL_OK)
        return rc;
    if (m->data_dir[0] == '\0') {
        char path[KL_PATH_MAX];
        int n = snprintf(path, sizeof path, "%s/%s/p%dm%d", var_root ? var_root : "var",
                         c->name, p->id, m->id);
        if (n < 0 || (size_t)n >= sizeof path)
            return kl_fail(err, KL_INVALID_ARGUMENT, "data",
                           "cluster file: data directory path is too long");
        memcpy(m->data_dir, path, (size_t)n + 1);
    }
    p->member_count++;
    return KL_OK;
}

/* Partition i of the cluster file, appended to c's partitions. */
static kl_code parse_partition(json_t *pj, size_t i, kl_cluster *c, const char *var_root, kl_err *err)
{
    kl_partition *p = &c->partitions[c->partition_count];
    json_t *id = json_object_get(pj, "id");
    if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) > 1000000)
        return kl_fail(err, KL_INVALID_ARGUMENT, "partitions.id",
                       "cluster file: partitions[%zu].id must be a non-negative integer", i);
    p->id = (int)json_integer_value(id);
    if (kl_cluster_find_partition(c, p->id) != NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "partitions.id",
                       "cluster file: partition id %d appears twice", p->id);
    json_t *mem = json_object_get(pj, "members");
    if (!json_is_array(mem) || json_array_size(mem) == 0 ||
        json_array_size(mem) > KL_CLUSTER_MAX_MEMBERS)
        return kl_fail(err, KL_INVALID_ARGUMENT, "partitions.members",
                       "cluster file: partitions[%zu].members must hold 1..%d members", i,
                       KL_CLUSTER_MAX_MEMBERS);
    size_t j;
    json_t *mj;
    json_array_foreach(mem, j, mj) {
        kl_code rc = parse_member(mj, i, j, p, c, var_root, err);
        if (rc != KL_OK)
            return rc;
    }
    if (c->replica_count < 1 || c->replica_count > p->member_count)
        return kl_fail(err, KL_INVALID_ARGUMENT, "replica_count",
                       "cluster file: replica_count %d is outside 1..%d (members of partition %d)",
                       c->replica_count, p->member_count, p->id);
    c->partition_count++;
    return KL_OK;
}

static kl_code parse_root(json_t *root, const char *var_root, kl_cluster *c, kl_err *err)
{
    memset(c, 0, sizeof *c);
    kl_limits_default(&c->limits);
    if (!json_is_object(root))
        return kl_fail(err, KL_INVALID_ARGUMENT, "cluster", "cluster file: not a JSON object");
    kl_code rc = copy_str(root, "cluster", c->name, sizeof c->name, true, "", err);
    if (rc != KL_OK)
        return rc;
    for (const char *p = c->name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'))
            return kl_fail(err, KL_INVALID_ARGUMENT, "cluster",
                           "cluster file: cluster name may hold only a-z, 0-9, '-' and '_'");
    json_t *rcnt = json_object_get(root, "replica_count");
    if (!json_is_integer(rcnt))
        return kl_fail(err, KL_INVALID_ARGUMENT, "replica_count",
                       "cluster file: replica_count must be an integer");
    c->replica_count = (int)json_integer_value(rcnt);
    if ((rc = parse_limits(root, c, err)) != KL_OK)
        return rc;
    if ((rc = parse_connections(root, &c->conn, err)) != KL_OK)
        return rc;
    json_t *insecure = json_object_get(root, "insecure_local_admin");
    if (insecure != NULL && !json_is_boolean(insecure))
        return kl_fail(err, KL_INVALID_ARGUMENT, "insecure_local_admin",
                       "cluster file: insecure_local_admin must be true or false");
    c->insecure_local_admin = json_is_true(insecure);
    if ((rc = parse_timers(root, c, err)) != KL_OK)
        return rc;
    if ((rc = parse_snapshot(root, &c->snapshot, err)) != KL_OK)
        return rc;
    if (c->limits.max_frame_bytes <= c->limits.max_batch_bytes)
        return kl_fail(err, KL_INVALID_ARGUMENT, "MaxFrameBytes",
                       "cluster file: limits.MaxFrameBytes must exceed limits.MaxBatchBytes");
    json_t *parts = json_object_get(root, "partitions");
    if (!json_is_array(parts) || json_array_size(parts) == 0 ||
        json_array_size(parts) > KL_CLUSTER_MAX_PARTITIONS)
        return kl_fail(err, KL_INVALID_ARGUMENT, "partitions",
                       "cluster file: partitions must be an array of 1..%d entries",
                       KL_CLUSTER_MAX_PARTITIONS);
    size_t i;
    json_t *pj;
    json_array_foreach(parts, i, pj) {
        if ((rc = parse_partition(pj, i, c, var_root, err)) != KL_OK)
            return rc;
    }
    return KL_OK;
}

kl_code kl_cluster_parse(const char *json, const char *var_root, kl_cluster *out, kl_err *err)
{
    json_error_t jerr;
    json_t *root = json_loads(json, 0, &jerr);
    if (root == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "json", "cluster file: JSON error at line %d: %s",
                       jerr.line, jerr.text);
    kl_code rc = parse_root(root, var_root, out, err);
    json_decref(root);
    return rc;
}

kl_code kl_cluster_load(const char *path, const char *var_root, kl_cluster *out, kl_err *err)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (root == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "cluster_file",
                       "cluster file %s: %s (line %d)", path, jerr.text, jerr.line);
    kl_code rc = parse_root(root, var_root, out, err);
    json_decref(root);
    return rc;
}

const kl_partition *kl_cluster_find_partition(const kl_cluster *c, int partition_id)
{
    for (int i = 0; i < c->partition_count; i++)
        if (c->partitions[i].id == partition_id)
            return &c->partitions[i];
    return NULL;
}

const kl_member *kl_cluster_find_node(const kl_cluster *c, const char *node, int *partition_id)
{
    int p, m, n = 0;
    if (sscanf(node, "p%dm%d%n", &p, &m, &n) != 2 || node[n] != '\0')
        return NULL;
    const kl_partition *part = kl_cluster_find_partition(c, p);
    if (part == NULL)
        return NULL;
    for (int i = 0; i < part->member_count; i++)
        if (part->members[i].id == m) {
            if (partition_id)
                *partition_id = p;
            return &part->members[i];
        }
    return NULL;
}
