/* cluster_status: the canonical public JSON of a whole cluster's member status (keyload.h
 * kl_cluster_status_to_json), shared by `keyload cluster-status` and keyload-mcp's
 * cluster_status tool so both print the same object. It owns the choice of the member whose
 * numbers stand for a partition. Members are asked one at a time, each bounded by its own
 * short timeout, so that a member that is down costs little. */
#include "client/sdk/internal.h"
#include "client/sdk/json_util.h"
#include "common/cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define set kl_sdk_json_set
#define u64 kl_sdk_json_u64

typedef struct member_view {
    char node[32];
    const kl_member *m;
    Keyload__V1__MemberStatusAnswer *a; /* NULL: did not answer */
    kl_err err;
} member_view;

/* The member whose numbers stand for the partition: the answering leader with the highest
 * term, else the answering member with the highest (term, commit index); -1 when none. */
static int representative(const member_view *v, int n, bool *is_leader)
{
    int best = -1;
    *is_leader = false;
    for (int i = 0; i < n; i++) {
        const Keyload__V1__MemberStatusAnswer *a = v[i].a;
        if (a == NULL)
            continue;
        bool leader = a->role != NULL && strcmp(a->role, "leader") == 0;
        if (best < 0 || (leader && !*is_leader)) {
            best = i;
            *is_leader = leader;
            continue;
        }
        if (leader != *is_leader)
            continue;
        const Keyload__V1__MemberStatusAnswer *b = v[best].a;
        if (a->term > b->term || (a->term == b->term && a->commit_index > b->commit_index))
            best = i;
    }
    return best;
}

static json_t *u64_or_null(bool have, uint64_t v) { return have ? u64(v) : json_null(); }

static json_t *member_json(const member_view *v)
{
    const Keyload__V1__MemberStatusAnswer *a = v->a;
    json_t *o = json_object();
    char text[KL_ERR_MESSAGE_MAX + 32];
    if (a == NULL)
        snprintf(text, sizeof text, "%s: %s", kl_code_name(v->err.code), v->err.message);
    bool ok = o != NULL && set(o, "node", json_string(v->node)) &&
              set(o, "client", json_string(v->m->client_url)) && set(o, "up", json_boolean(a != NULL)) &&
              set(o, "role", a && a->role ? json_string(a->role) : json_null()) &&
              set(o, "term", u64_or_null(a != NULL, a ? a->term : 0)) &&
              set(o, "commit_index", u64_or_null(a != NULL, a ? a->commit_index : 0)) &&
              set(o, "applied_index", u64_or_null(a != NULL, a ? a->applied_index : 0)) &&
              set(o, "last_index", u64_or_null(a != NULL, a ? a->last_index : 0)) &&
              set(o, "serving", a ? json_boolean(a->serving) : json_null()) &&
              set(o, "catalog_version", u64_or_null(a != NULL, a ? a->catalog_version : 0)) &&
              set(o, "error", a == NULL ? json_string(text) : json_null());
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *partition_json(const kl_partition *p, const member_view *v, int n)
{
    bool is_leader;
    int r = representative(v, n, &is_leader);
    const Keyload__V1__MemberStatusAnswer *a = r >= 0 ? v[r].a : NULL;
    json_t *o = json_object(), *members = json_array();
    bool ok = o != NULL && members != NULL && set(o, "id", json_integer(p->id)) &&
              set(o, "leader", is_leader ? json_string(v[r].node) : json_null()) &&
              set(o, "term", u64_or_null(a != NULL, a ? a->term : 0)) &&
              set(o, "commit_index", u64_or_null(a != NULL, a ? a->commit_index : 0)) &&
              set(o, "applied_index", u64_or_null(a != NULL, a ? a->applied_index : 0)) &&
              set(o, "catalog_version", u64_or_null(a != NULL, a ? a->catalog_version : 0)) &&
              set(o, "serving", json_boolean(is_leader && a->serving));
    for (int i = 0; ok && i < n; i++)
        ok = json_array_append_new(members, member_json(&v[i])) == 0;
    if (ok && set(o, "members", members))
        return o;
    if (!ok)
        json_decref(members);
    json_decref(o);
    return NULL;
}

kl_code kl_cluster_status_to_json(const char *cluster_path, int member_timeout_ms, unsigned flags,
                                  char **out, kl_err *err)
{
    *out = NULL;
    if (member_timeout_ms <= 0)
        member_timeout_ms = KL_CLUSTER_STATUS_MEMBER_TIMEOUT_MS;
    kl_cluster *cluster = calloc(1, sizeof *cluster); /* large: 64 partitions x 9 members */
    if (cluster == NULL)
        return kl_fail(err, KL_INTERNAL, "oom", "out of memory");
    kl_code rc = kl_cluster_load(cluster_path, NULL, cluster, err);
    if (rc != KL_OK) {
        free(cluster);
        return rc;
    }
    json_t *root = json_object(), *parts = json_array();
    bool ok = root != NULL && parts != NULL && set(root, "cluster", json_string(cluster->name)) &&
              set(root, "partitions", json_incref(parts));
    for (int pi = 0; ok && pi < cluster->partition_count; pi++) {
        const kl_partition *p = &cluster->partitions[pi];
        member_view v[KL_CLUSTER_MAX_MEMBERS];
        memset(v, 0, sizeof v);
        for (int i = 0; i < p->member_count; i++) {
            v[i].m = &p->members[i];
            snprintf(v[i].node, sizeof v[i].node, "p%dm%d", p->id, p->members[i].id);
            kl_err_clear(&v[i].err);
            if (kl_member_status(v[i].m->client_url, member_timeout_ms, &v[i].a, &v[i].err) != KL_OK)
                v[i].a = NULL;
        }
        ok = json_array_append_new(parts, partition_json(p, v, p->member_count)) == 0;
        for (int i = 0; i < p->member_count; i++)
            kl_member_status_free(v[i].a);
    }
    json_decref(parts);
    free(cluster);
    *out = ok ? kl_sdk_json_dump(root, flags) : (json_decref(root), NULL);
    return *out != NULL ? KL_OK : kl_fail(err, KL_INTERNAL, "oom", "out of memory");
}
