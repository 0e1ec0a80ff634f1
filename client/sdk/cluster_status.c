/* cluster_status: the canonical public JSON of a whole cluster's member status (keyload.h
 * kl_cluster_status_to_json), shared by `keyload cluster-status` and keyload-mcp's
 * cluster_status tool so both print the same object. It owns the choice of the member whose
 * numbers stand for a partition. Members are asked one at a time, each bounded by its own
 * short timeout, so that a member that is down costs little.
 *
 * The cluster file only seeds a partition's members: after the file's members, the members
 * a partition's configuration names (a `Members` answer of its representative member) that
 * the file does not are asked too, and every member is marked with its place in that
 * configuration. That answer is not authenticated (neither is MemberStatus): this is a
 * status report, and nothing it learns is kept or trusted for data calls. */
#include "client/sdk/internal.h"
#include "client/sdk/json_util.h"
#include "common/cluster.h"
#include "common/rpc.h"
#include "keyload/v1/membership.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define set kl_sdk_json_set
#define u64 kl_sdk_json_u64

typedef struct member_view {
    char node[32];
    uint64_t id;
    char client[KL_URL_MAX];
    const char *place;                   /* in the configuration: voter, learner, leaving, none; NULL: unknown */
    Keyload__V1__MemberStatusAnswer *a; /* NULL: did not answer */
    kl_err err;
} member_view;

/* Members of one partition a report covers: the file's, then those only its configuration names. */
#define VIEW_MAX (2 * KL_CLUSTER_MAX_MEMBERS)

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
              set(o, "client", json_string(v->client)) && set(o, "up", json_boolean(a != NULL)) &&
              set(o, "configuration", v->place != NULL ? json_string(v->place) : json_null()) &&
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

/* Asks member id of partition pid at url for its status into *v. */
static void ask(member_view *v, int pid, uint64_t id, const char *url, int timeout_ms)
{
    v->id = id;
    snprintf(v->node, sizeof v->node, "p%dm%llu", pid, (unsigned long long)id);
    snprintf(v->client, sizeof v->client, "%s", url);
    kl_err_clear(&v->err);
    if (url[0] == '\0')
        kl_fail(&v->err, KL_UNAVAILABLE, "client_url", "the configuration names no client address for it");
    else if (kl_member_status(url, timeout_ms, &v->a, &v->err) != KL_OK)
        v->a = NULL;
}

/* The partition's configuration as member url reports it (Members), or NULL. */
static Keyload__V1__MembersAnswer *members_of(const char *url, int timeout_ms)
{
    kl_rpc_client *c;
    kl_err err;
    kl_err_clear(&err);
    if (kl_rpc_client_open(url, timeout_ms, 0, &c, &err) != KL_OK)
        return NULL;
    uint8_t *ans = NULL;
    size_t len = 0;
    kl_code rc = kl_rpc_invoke(c, "keyload.v1.Members", (const uint8_t *)"", 0, timeout_ms, &ans, &len, NULL, 0, &err);
    kl_rpc_client_close(c);
    Keyload__V1__MembersAnswer *a = rc == KL_OK ? keyload__v1__members_answer__unpack(NULL, len, ans) : NULL;
    free(ans);
    return a;
}

static bool has_id(const uint64_t *ids, size_t n, uint64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id)
            return true;
    return false;
}

/* Marks v[0..n) with their place in the configuration the representative member reports and
 * asks the members it names that v does not hold (at most VIEW_MAX in all). Returns the new n. */
static int add_configured(member_view *v, int n, int pid, int timeout_ms)
{
    bool is_leader;
    int r = representative(v, n, &is_leader);
    Keyload__V1__MembersAnswer *a = r >= 0 ? members_of(v[r].client, timeout_ms) : NULL;
    if (a == NULL)
        return n;
    for (size_t d = 0; d < a->n_directory; d++) {
        const Keyload__V1__MemberInfo *m = a->directory[d];
        bool known = false;
        for (int i = 0; i < n && !known; i++)
            known = v[i].id == m->id;
        if (!known && n < VIEW_MAX && m->id != 0)
            ask(&v[n++], pid, m->id, m->client_url != NULL ? m->client_url : "", timeout_ms);
    }
    for (int i = 0; i < n; i++)
        v[i].place = has_id(a->voters, a->n_voters, v[i].id)       ? "voter"
                     : has_id(a->learners, a->n_learners, v[i].id) ? "learner"
                     : has_id(a->old_voters, a->n_old_voters, v[i].id) ? "leaving"
                                                                       : "none";
    keyload__v1__members_answer__free_unpacked(a, NULL);
    return n;
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
        member_view v[VIEW_MAX];
        memset(v, 0, sizeof v);
        int n = 0;
        for (int i = 0; i < p->member_count; i++)
            ask(&v[n++], p->id, (uint64_t)p->members[i].id, p->members[i].client_url, member_timeout_ms);
        n = add_configured(v, n, p->id, member_timeout_ms);
        ok = json_array_append_new(parts, partition_json(p, v, n)) == 0;
        for (int i = 0; i < n; i++)
            kl_member_status_free(v[i].a);
    }
    json_decref(parts);
    free(cluster);
    *out = ok ? kl_sdk_json_dump(root, flags) : (json_decref(root), NULL);
    return *out != NULL ? KL_OK : kl_fail(err, KL_INTERNAL, "oom", "out of memory");
}
