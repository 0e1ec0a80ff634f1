/* member_table: see member_table.h. */
#include "client/sdk/member_table.h"

#include "common/log.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kl_code kl_sdk_members_init(kl_sdk_members *t, int partition, kl_err *err)
{
    memset(t, 0, sizeof *t);
    t->partition = partition;
    atomic_init(&t->count, 0);
    atomic_init(&t->current, 0);
    atomic_init(&t->generation, 0);
    atomic_init(&t->next_learn_ms, 0);
    if (pthread_mutex_init(&t->mu, NULL) != 0)
        return kl_fail(err, KL_INTERNAL, "mutex", "cannot create a mutex");
    return KL_OK;
}

void kl_sdk_members_destroy(kl_sdk_members *t)
{
    pthread_mutex_destroy(&t->mu);
}

int kl_sdk_members_count(const kl_sdk_members *t)
{
    return atomic_load_explicit(&t->count, memory_order_acquire);
}

const kl_sdk_member *kl_sdk_members_at(const kl_sdk_members *t, int i)
{
    return &t->slots[i];
}

bool kl_sdk_members_is_current(const kl_sdk_members *t, int i)
{
    return (atomic_load_explicit(&t->current, memory_order_acquire) >> i) & 1u;
}

uint64_t kl_sdk_members_generation(const kl_sdk_members *t)
{
    return atomic_load_explicit(&t->generation, memory_order_acquire);
}

/* The best slot that `match` accepts: a current one first. */
static int find_slot(const kl_sdk_members *t, bool (*match)(const kl_sdk_member *, const void *),
                     const void *key)
{
    int n = kl_sdk_members_count(t), any = -1;
    for (int i = 0; i < n; i++) {
        if (!match(&t->slots[i], key))
            continue;
        if (kl_sdk_members_is_current(t, i))
            return i;
        if (any < 0)
            any = i;
    }
    return any;
}

static bool url_is(const kl_sdk_member *m, const void *url) { return strcmp(m->client_url, url) == 0; }
static bool id_is(const kl_sdk_member *m, const void *id) { return m->id == *(const uint64_t *)id; }

int kl_sdk_members_find_url(const kl_sdk_members *t, const char *url)
{
    return url == NULL || url[0] == '\0' ? -1 : find_slot(t, url_is, url);
}

int kl_sdk_members_find_id(const kl_sdk_members *t, uint64_t id)
{
    return id == 0 ? -1 : find_slot(t, id_is, &id);
}

/* Writes slot `count` and publishes it (caller holds mu and checked the cap). */
static int append(kl_sdk_members *t, const kl_sdk_member *m)
{
    int n = atomic_load_explicit(&t->count, memory_order_relaxed);
    t->slots[n] = *m;
    atomic_store_explicit(&t->count, n + 1, memory_order_release);
    return n;
}

kl_code kl_sdk_members_seed(kl_sdk_members *t, const kl_partition *p, kl_err *err)
{
    if (p->member_count > KL_SDK_MEMBERS_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "members",
                       "partition %d lists %d members; the SDK keeps at most %d", p->id,
                       p->member_count, KL_SDK_MEMBERS_MAX);
    pthread_mutex_lock(&t->mu);
    uint64_t cur = atomic_load(&t->current);
    for (int i = 0; i < p->member_count; i++) {
        kl_sdk_member m;
        memset(&m, 0, sizeof m);
        m.id = (uint64_t)p->members[i].id;
        snprintf(m.client_url, sizeof m.client_url, "%s", p->members[i].client_url);
        m.has_public_key = p->members[i].has_public_key;
        memcpy(m.public_key, p->members[i].public_key, sizeof m.public_key);
        cur |= 1ull << append(t, &m);
    }
    atomic_store_explicit(&t->current, cur, memory_order_release);
    atomic_fetch_add(&t->generation, 1);
    pthread_mutex_unlock(&t->mu);
    return KL_OK;
}

static bool listed(const uint64_t *ids, size_t n, uint64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id)
            return true;
    return false;
}

static bool in_configuration(const Keyload__V1__MembersAnswer *a, uint64_t id)
{
    return listed(a->voters, a->n_voters, id) || listed(a->learners, a->n_learners, id) ||
           listed(a->old_voters, a->n_old_voters, id);
}

/* The directory entry as a slot, or false when it cannot be routed to (no id, no or an
 * overlong client URL, a key of the wrong size, or no key where one is needed). */
static bool entry_usable(const Keyload__V1__MemberInfo *e, bool need_keys, kl_sdk_member *m)
{
    memset(m, 0, sizeof *m);
    if (e == NULL || e->id == 0 || e->client_url == NULL || e->client_url[0] == '\0' ||
        strlen(e->client_url) >= sizeof m->client_url)
        return false;
    if (e->public_key.len != 0 && e->public_key.len != sizeof m->public_key)
        return false;
    if (need_keys && e->public_key.len == 0)
        return false;
    m->id = e->id;
    snprintf(m->client_url, sizeof m->client_url, "%s", e->client_url);
    m->has_public_key = e->public_key.len != 0;
    if (m->has_public_key)
        memcpy(m->public_key, e->public_key.data, sizeof m->public_key);
    m->learned = true;
    return true;
}

/* The slot holding the same identity as m (id, URL and key where both have one), or -1. */
static int same_identity(const kl_sdk_members *t, const kl_sdk_member *m)
{
    int n = atomic_load_explicit(&t->count, memory_order_relaxed);
    for (int i = 0; i < n; i++) {
        const kl_sdk_member *s = &t->slots[i];
        if (s->id == m->id && strcmp(s->client_url, m->client_url) == 0 &&
            (!s->has_public_key || !m->has_public_key ||
             memcmp(s->public_key, m->public_key, sizeof s->public_key) == 0))
            return i;
    }
    return -1;
}

/* The slots to keep current for members the answer's configuration names but whose
 * directory entry gave nothing usable (a seed member's entry may carry no client address):
 * the slots the table already holds for those ids (with a key where sessions need one), the
 * current ones, else the newest. A
 * member id names one identity in a partition for ever, so the slot is that member. */
static uint64_t unaddressed_voters(const kl_sdk_members *t, const Keyload__V1__MembersAnswer *a, bool need_keys,
                                   uint64_t cur)
{
    uint64_t keep = 0, now = atomic_load_explicit(&t->current, memory_order_relaxed);
    int n = atomic_load_explicit(&t->count, memory_order_relaxed);
    const uint64_t *lists[3] = {a->voters, a->learners, a->old_voters};
    size_t lens[3] = {a->n_voters, a->n_learners, a->n_old_voters};
    for (int l = 0; l < 3; l++)
        for (size_t k = 0; k < lens[l]; k++) {
            uint64_t id = lists[l][k], mine = 0;
            int newest = -1;
            for (int i = 0; i < n; i++)
                if (t->slots[i].id == id && (!need_keys || t->slots[i].has_public_key)) {
                    mine |= 1ull << i;
                    newest = i;
                }
            if (mine == 0 || (mine & cur) != 0)
                continue; /* unknown here, or addressed by the answer */
            keep |= (mine & now) != 0 ? (mine & now) : 1ull << newest;
        }
    return keep;
}

kl_code kl_sdk_members_learn(kl_sdk_members *t, const Keyload__V1__MembersAnswer *a, bool need_keys,
                             int *added, kl_err *err)
{
    *added = 0;
    if (a == NULL || a->n_voters == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "voters", "the Members answer names no voter");
    pthread_mutex_lock(&t->mu);
    /* A lagging member's view: older than a committed one we know, or than the view we
     * hold unless it is committed and ours is not (a deposed leader's uncommitted entry
     * may be truncated and another one committed at a lower index). */
    bool older = t->learned_any && (a->conf_index < t->conf_index ||
                                    (a->conf_index < t->view_index && !(a->committed && !t->view_committed)));
    if (older) {
        pthread_mutex_unlock(&t->mu);
        return KL_OK;
    }
    uint64_t cur = 0;
    uint64_t refused = 0, refused_id = 0;
    for (size_t i = 0; i < a->n_directory; i++) {
        kl_sdk_member m;
        if (!entry_usable(a->directory[i], need_keys, &m) || !in_configuration(a, m.id))
            continue;
        int s = same_identity(t, &m);
        if (s < 0 && atomic_load_explicit(&t->count, memory_order_relaxed) >= KL_SDK_MEMBERS_MAX) {
            refused++;
            refused_id = m.id;
            continue;
        }
        if (s < 0) {
            s = append(t, &m);
            (*added)++;
        }
        cur |= 1ull << s;
    }
    cur |= unaddressed_voters(t, a, need_keys, cur);
    if (cur == 0 && refused == 0) {
        pthread_mutex_unlock(&t->mu);
        return kl_fail(err, KL_INVALID_ARGUMENT, "directory",
                       "the Members answer of partition %d names no member of its configuration "
                       "with a usable client URL%s", t->partition,
                       need_keys ? " and public key" : "");
    }
    if (cur != 0) {
        uint64_t old = atomic_exchange(&t->current, cur);
        if (*added > 0 || old != cur)
            atomic_fetch_add(&t->generation, 1);
        /* Only a committed configuration holds older answers off: an uncommitted one (a
         * deposed leader's) may yet be truncated and replaced at a lower index. */
        if (a->committed && a->conf_index > t->conf_index)
            t->conf_index = a->conf_index;
        t->view_index = a->conf_index;
        t->view_committed = a->committed;
        t->learned_any = true;
    }
    bool first_refusal = refused > 0 && t->refused == 0;
    t->refused += refused;
    pthread_mutex_unlock(&t->mu);
    if (refused == 0)
        return KL_OK;
    if (first_refusal)
        KL_WARN("sdk member table full: members not learned",
                "partition=%d max=%d refused=%llu member=%llu", t->partition, KL_SDK_MEMBERS_MAX,
                (unsigned long long)refused, (unsigned long long)refused_id);
    return kl_fail(err, KL_RESOURCE_EXHAUSTED, "members_max",
                   "partition %d: %llu member(s) not learned (member %llu first): the SDK keeps at "
                   "most %d members per partition",
                   t->partition, (unsigned long long)refused, (unsigned long long)refused_id,
                   KL_SDK_MEMBERS_MAX);
}

bool kl_sdk_members_learn_due(kl_sdk_members *t, int64_t now_ms)
{
    int_least64_t next = atomic_load(&t->next_learn_ms);
    if (now_ms < next)
        return false;
    return atomic_compare_exchange_strong(&t->next_learn_ms, &next, now_ms + KL_SDK_LEARN_INTERVAL_MS);
}

/* ------------------------------------------------------------ the process's tables */

struct kl_sdk_member_tables {
    kl_sdk_member_tables *next;
    char cluster[KL_NAME_MAX];
    uint8_t seeds[crypto_generichash_BYTES]; /* digest of the partitions and members seeded */
    bool sealed;                             /* for clients with a principal */
    int refs;                                /* guarded by tables_mu */
    int count;
    kl_sdk_members *parts;                   /* [count], in cluster-file order */
};

static pthread_mutex_t tables_mu = PTHREAD_MUTEX_INITIALIZER;
static kl_sdk_member_tables *tables;

/* Two cluster files of one name but other members (tests reuse names across clusters)
 * must not share: the digest covers every partition and member identity. */
static void seeds_digest(const kl_cluster *c, uint8_t out[crypto_generichash_BYTES])
{
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, crypto_generichash_BYTES);
    for (int pi = 0; pi < c->partition_count; pi++) {
        const kl_partition *p = &c->partitions[pi];
        int32_t head[2] = {p->id, p->member_count};
        crypto_generichash_update(&st, (const uint8_t *)head, sizeof head);
        for (int mi = 0; mi < p->member_count; mi++) {
            const kl_member *m = &p->members[mi];
            int32_t id = m->id;
            crypto_generichash_update(&st, (const uint8_t *)&id, sizeof id);
            crypto_generichash_update(&st, (const uint8_t *)m->client_url, strlen(m->client_url) + 1);
            if (m->has_public_key)
                crypto_generichash_update(&st, m->public_key, sizeof m->public_key);
        }
    }
    crypto_generichash_final(&st, out, crypto_generichash_BYTES);
}

static void tables_free(kl_sdk_member_tables *ts)
{
    for (int i = 0; i < ts->count; i++)
        kl_sdk_members_destroy(&ts->parts[i]);
    free(ts->parts);
    free(ts);
}

static kl_sdk_member_tables *tables_new(const kl_cluster *c, const uint8_t *digest, bool sealed)
{
    kl_sdk_member_tables *ts = calloc(1, sizeof *ts);
    if (ts == NULL)
        return NULL;
    ts->parts = calloc((size_t)(c->partition_count > 0 ? c->partition_count : 1), sizeof *ts->parts);
    if (ts->parts == NULL) {
        free(ts);
        return NULL;
    }
    kl_err e;
    for (; ts->count < c->partition_count; ts->count++) {
        kl_sdk_members *t = &ts->parts[ts->count];
        if (kl_sdk_members_init(t, c->partitions[ts->count].id, &e) != KL_OK)
            break;
        if (kl_sdk_members_seed(t, &c->partitions[ts->count], &e) != KL_OK) {
            kl_sdk_members_destroy(t);
            break;
        }
    }
    if (ts->count < c->partition_count) {
        tables_free(ts);
        return NULL;
    }
    snprintf(ts->cluster, sizeof ts->cluster, "%s", c->name);
    memcpy(ts->seeds, digest, sizeof ts->seeds);
    ts->sealed = sealed;
    return ts;
}

kl_sdk_member_tables *kl_sdk_member_tables_acquire(const kl_cluster *cluster, bool sealed)
{
    uint8_t digest[crypto_generichash_BYTES];
    seeds_digest(cluster, digest);
    pthread_mutex_lock(&tables_mu);
    kl_sdk_member_tables *ts = tables;
    while (ts != NULL && (strcmp(ts->cluster, cluster->name) != 0 || memcmp(ts->seeds, digest, sizeof digest) != 0 ||
                          ts->sealed != sealed))
        ts = ts->next;
    if (ts == NULL && (ts = tables_new(cluster, digest, sealed)) != NULL) {
        ts->next = tables;
        tables = ts;
    }
    if (ts != NULL)
        ts->refs++;
    pthread_mutex_unlock(&tables_mu);
    return ts;
}

void kl_sdk_member_tables_release(kl_sdk_member_tables *ts)
{
    if (ts == NULL)
        return;
    pthread_mutex_lock(&tables_mu);
    bool last = --ts->refs == 0;
    if (last) {
        kl_sdk_member_tables **pp = &tables;
        while (*pp != ts)
            pp = &(*pp)->next;
        *pp = ts->next;
    }
    pthread_mutex_unlock(&tables_mu);
    if (last)
        tables_free(ts);
}

kl_sdk_members *kl_sdk_member_tables_at(kl_sdk_member_tables *ts, int pi)
{
    return &ts->parts[pi];
}
