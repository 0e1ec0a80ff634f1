/* raft_conf: see raft_conf.h. The rules are docs/MEMBERSHIP.md's; the comments say which. */
#include "daemon/repl/raft_conf.h"

#include <assert.h>
#include <string.h>

/* ---------------------------------------------------------------- sets of ids */

static bool has_id(const uint64_t *ids, uint32_t n, uint64_t id)
{
    for (uint32_t i = 0; i < n; i++)
        if (ids[i] == id)
            return true;
    return false;
}

static bool same_set(const uint64_t *a, uint32_t na, const uint64_t *b, uint32_t nb)
{
    if (na != nb)
        return false;
    for (uint32_t i = 0; i < na; i++)
        if (!has_id(b, nb, a[i]))
            return false;
    return true;
}

bool kl_rconf_equal(const kl_raft_conf *a, const kl_raft_conf *b)
{
    return a->replica_count == b->replica_count && a->old_replica_count == b->old_replica_count &&
           same_set(a->members, a->n_members, b->members, b->n_members) &&
           same_set(a->learners, a->n_learners, b->learners, b->n_learners) &&
           same_set(a->old_members, a->n_old, b->old_members, b->n_old);
}

/* Appends the ids of src not yet in dst; false past KL_RAFT_MAX_MEMBERS. */
static bool union_into(uint64_t *dst, size_t *n, const uint64_t *src, uint32_t ns)
{
    for (uint32_t i = 0; i < ns; i++) {
        if (has_id(dst, (uint32_t)*n, src[i]))
            continue;
        if (*n >= KL_RAFT_MAX_MEMBERS)
            return false;
        dst[(*n)++] = src[i];
    }
    return true;
}

/* ---------------------------------------------------------------- validation and bytes */

static kl_code check_list(const uint64_t *ids, uint32_t n, const char *field, kl_err *err)
{
    if (n > KL_RAFT_MAX_MEMBERS)
        return kl_fail(err, KL_INVALID_ARGUMENT, field, "%s: %u ids, at most %d", field, n,
                       KL_RAFT_MAX_MEMBERS);
    for (uint32_t i = 0; i < n; i++) {
        if (ids[i] == 0)
            return kl_fail(err, KL_INVALID_ARGUMENT, field, "%s: member id 0 is reserved", field);
        if (has_id(ids, i, ids[i]))
            return kl_fail(err, KL_INVALID_ARGUMENT, field, "%s: member %llu listed twice", field,
                           (unsigned long long)ids[i]);
    }
    return KL_OK;
}

kl_code kl_raft_conf_check(const kl_raft_conf *c, kl_err *err)
{
    kl_code rc;
    if ((rc = check_list(c->members, c->n_members, "members", err)) != KL_OK ||
        (rc = check_list(c->learners, c->n_learners, "learners", err)) != KL_OK ||
        (rc = check_list(c->old_members, c->n_old, "old_members", err)) != KL_OK)
        return rc;
    if (c->n_members < 1)
        return kl_fail(err, KL_INVALID_ARGUMENT, "members", "members: no voter");
    /* MEMBERSHIP.md rule 6: Q2 <= |V| in every configuration, both halves of a joint one. */
    if (c->replica_count < 1 || c->replica_count > c->n_members)
        return kl_fail(err, KL_INVALID_ARGUMENT, "replica_count",
                       "replica_count %u outside 1..%u (the voters)", c->replica_count,
                       c->n_members);
    if (c->n_old > 0 && (c->old_replica_count < 1 || c->old_replica_count > c->n_old))
        return kl_fail(err, KL_INVALID_ARGUMENT, "old_replica_count",
                       "old_replica_count %u outside 1..%u (the outgoing voters)",
                       c->old_replica_count, c->n_old);
    if (c->n_old == 0 && c->old_replica_count != 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "old_replica_count",
                       "old_replica_count %u without outgoing voters", c->old_replica_count);
    for (uint32_t i = 0; i < c->n_learners; i++)
        if (has_id(c->members, c->n_members, c->learners[i]))
            return kl_fail(err, KL_INVALID_ARGUMENT, "learners", "member %llu is a voter and a learner",
                           (unsigned long long)c->learners[i]);
    uint64_t all[KL_RAFT_MAX_MEMBERS];
    size_t n = 0;
    if (!union_into(all, &n, c->members, c->n_members) ||
        !union_into(all, &n, c->old_members, c->n_old) ||
        !union_into(all, &n, c->learners, c->n_learners))
        return kl_fail(err, KL_INVALID_ARGUMENT, "members",
                       "more than %d distinct members (voters of both halves and learners)",
                       KL_RAFT_MAX_MEMBERS);
    return KL_OK;
}

static uint8_t *put_ids(uint8_t *p, const uint64_t *ids, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        for (int b = 0; b < 8; b++)
            *p++ = (uint8_t)(ids[i] >> (8 * b));
    return p;
}

static const uint8_t *get_ids(const uint8_t *p, uint64_t *ids, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        uint64_t v = 0;
        for (int b = 0; b < 8; b++)
            v |= (uint64_t)*p++ << (8 * b);
        ids[i] = v;
    }
    return p;
}

/* Version 1: version, n_members, replica_count, n_learners, n_old, old_replica_count, two
 * zero bytes, then the ids as u64 little endian: voters, learners, outgoing voters. */
size_t kl_raft_conf_encode(const kl_raft_conf *c, uint8_t *buf)
{
    uint8_t *p = buf;
    *p++ = 1;
    *p++ = (uint8_t)c->n_members;
    *p++ = (uint8_t)c->replica_count;
    *p++ = (uint8_t)c->n_learners;
    *p++ = (uint8_t)c->n_old;
    *p++ = (uint8_t)c->old_replica_count;
    *p++ = 0;
    *p++ = 0;
    p = put_ids(p, c->members, c->n_members);
    p = put_ids(p, c->learners, c->n_learners);
    p = put_ids(p, c->old_members, c->n_old);
    return (size_t)(p - buf);
}

kl_code kl_raft_conf_decode(const uint8_t *d, size_t len, kl_raft_conf *c, size_t *ctx_off,
                            kl_err *err)
{
    memset(c, 0, sizeof *c);
    if (d == NULL || len < 8 || d[0] != 1 || d[6] != 0 || d[7] != 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "conf", "configuration entry header (%zu bytes)",
                       len);
    if (d[1] > KL_RAFT_MAX_MEMBERS || d[3] > KL_RAFT_MAX_MEMBERS || d[4] > KL_RAFT_MAX_MEMBERS)
        return kl_fail(err, KL_INVALID_ARGUMENT, "conf", "configuration entry counts past %d",
                       KL_RAFT_MAX_MEMBERS);
    size_t need = 8 + 8 * ((size_t)d[1] + d[3] + d[4]);
    if (len < need)
        return kl_fail(err, KL_INVALID_ARGUMENT, "conf",
                       "configuration entry of %zu bytes, its counts need %zu", len, need);
    c->n_members = d[1];
    c->replica_count = d[2];
    c->n_learners = d[3];
    c->n_old = d[4];
    c->old_replica_count = d[5];
    const uint8_t *p = get_ids(d + 8, c->members, c->n_members);
    p = get_ids(p, c->learners, c->n_learners);
    get_ids(p, c->old_members, c->n_old);
    if (ctx_off)
        *ctx_off = need;
    return kl_raft_conf_check(c, err);
}

/* ---------------------------------------------------------------- member table, quorums */

static uint32_t q1_of(uint32_t n, uint32_t q2)
{
    uint32_t a = n - q2 + 1, b = n / 2 + 1;
    return a > b ? a : b;
}

int kl_rconf_slot(const kl_rconf *rc, uint64_t id)
{
    for (size_t i = 0; i < rc->n; i++)
        if (rc->ids[i] == id)
            return (int)i;
    return -1;
}

static uint32_t mask_of(const kl_rconf *rc, const uint64_t *ids, uint32_t n)
{
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++)
        m |= 1u << kl_rconf_slot(rc, ids[i]);
    return m;
}

void kl_rconf_build(kl_rconf *rc, const kl_raft_conf *c, uint64_t self_id)
{
    memset(rc, 0, sizeof *rc);
    rc->c = *c;
    /* Voters first, in the order given: a static configuration keeps today's slots. */
    bool fits = union_into(rc->ids, &rc->n, c->members, c->n_members) &&
                union_into(rc->ids, &rc->n, c->old_members, c->n_old) &&
                union_into(rc->ids, &rc->n, c->learners, c->n_learners);
    /* invariant I-MEMB-1: a configuration in use passed kl_raft_conf_check */
    assert(fits && c->n_members >= 1 && c->replica_count >= 1 &&
           c->replica_count <= c->n_members);
    (void)fits;
    int s = kl_rconf_slot(rc, self_id);
    rc->self = s < 0 ? KL_RCONF_NO_SLOT : (size_t)s;
    rc->mask_new = mask_of(rc, c->members, c->n_members);
    rc->mask_old = mask_of(rc, c->old_members, c->n_old);
    rc->q2_new = c->replica_count;
    rc->q1_new = q1_of(c->n_members, c->replica_count);
    rc->r_new = c->n_members - rc->q1_new + 1;
    if (c->n_old > 0) {
        rc->q2_old = c->old_replica_count;
        rc->q1_old = q1_of(c->n_old, c->old_replica_count);
        rc->r_old = c->n_old - rc->q1_old + 1;
    }
}

bool kl_rconf_is_voter(const kl_rconf *rc, size_t slot)
{
    return slot < rc->n && ((rc->mask_new | rc->mask_old) >> slot & 1u);
}

static uint32_t pop(uint32_t v) { return (uint32_t)__builtin_popcount(v); }

/* MEMBERSHIP.md rule 1: Q1 of each half. */
bool kl_rconf_won(const kl_rconf *rc, uint32_t granted)
{
    if (pop(granted & rc->mask_new) < rc->q1_new)
        return false;
    return rc->c.n_old == 0 || pop(granted & rc->mask_old) >= rc->q1_old;
}

/* More than N - Q1 refusals in either half put its Q1 grants out of reach. */
bool kl_rconf_lost(const kl_rconf *rc, uint32_t rejected)
{
    if (pop(rejected & rc->mask_new) >= rc->c.n_members - rc->q1_new + 1)
        return true;
    return rc->c.n_old > 0 && pop(rejected & rc->mask_old) >= rc->c.n_old - rc->q1_old + 1;
}

/* MEMBERSHIP.md rule 5. */
bool kl_rconf_survives(const kl_rconf *rc, uint32_t bits)
{
    if (pop(bits & rc->mask_new) < rc->r_new)
        return false;
    return rc->c.n_old == 0 || pop(bits & rc->mask_old) >= rc->r_old;
}

uint32_t kl_rconf_voters_in(const kl_rconf *rc, uint32_t bits) { return pop(bits & rc->mask_new); }

/* The k-th largest (1-based) match among the slots of mask. */
static uint64_t kth(const kl_rconf *rc, const uint64_t *match, uint32_t mask, uint32_t k)
{
    uint64_t v[KL_RAFT_MAX_MEMBERS];
    size_t n = 0;
    for (size_t s = 0; s < rc->n; s++)
        if (mask >> s & 1u)
            v[n++] = match[s];
    for (size_t i = 1; i < n; i++) /* insertion sort, descending; n <= 9 */
        for (size_t j = i; j > 0 && v[j] > v[j - 1]; j--) {
            uint64_t t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    /* invariant I-MEMB-2: 1 <= quorum counts <= voters of the half they count */
    assert(k >= 1 && k <= n);
    return v[k - 1];
}

/* MEMBERSHIP.md rules 2 to 4. */
uint64_t kl_rconf_commit_candidate(const kl_rconf *rc, const uint64_t *match,
                                   const kl_rconf_hist *h)
{
    uint64_t c_d = kth(rc, match, rc->mask_new, rc->q2_new);
    if (rc->c.n_old == 0 && h->n == 0)
        return c_d; /* one configuration, no CONF entry to extend over: R <= Q2, so c_D */
    uint64_t c_r = kth(rc, match, rc->mask_new, rc->r_new);
    if (rc->c.n_old > 0) {
        uint64_t o = kth(rc, match, rc->mask_old, rc->r_old);
        c_r = o < c_r ? o : c_r;
    }
    /* Data entries need both counts; in a joint configuration Q2 of the new half can run
     * ahead of R of the old one. */
    uint64_t i = c_d < c_r ? c_d : c_r;
    while (i < c_r && kl_rconf_hist_has(h, i + 1))
        i++;
    return i;
}

/* ---------------------------------------------------------------- history */

const kl_raft_conf *kl_rconf_hist_latest(const kl_rconf_hist *h, uint64_t *index)
{
    if (h->n == 0) {
        *index = h->base_index;
        return &h->base;
    }
    *index = h->index[h->n - 1];
    return &h->conf[h->n - 1];
}

bool kl_rconf_hist_full(const kl_rconf_hist *h) { return h->n >= KL_RAFT_MAX_CONF_HISTORY; }

void kl_rconf_hist_push(kl_rconf_hist *h, uint64_t index, const kl_raft_conf *c)
{
    /* invariant I-MEMB-3: configuration entries are recorded in log order, with room */
    assert(h->n < KL_RAFT_MAX_CONF_HISTORY && (h->n == 0 || h->index[h->n - 1] < index));
    h->index[h->n] = index;
    h->conf[h->n] = *c;
    h->n++;
}

bool kl_rconf_hist_truncate(kl_rconf_hist *h, uint64_t from)
{
    size_t n0 = h->n;
    while (h->n > 0 && h->index[h->n - 1] >= from)
        h->n--;
    return h->n != n0;
}

void kl_rconf_hist_compact(kl_rconf_hist *h, uint64_t index)
{
    size_t k = 0;
    while (k < h->n && h->index[k] <= index)
        k++;
    if (k == 0)
        return;
    h->base = h->conf[k - 1];
    h->base_index = h->index[k - 1];
    memmove(h->index, h->index + k, (h->n - k) * sizeof h->index[0]);
    memmove(h->conf, h->conf + k, (h->n - k) * sizeof h->conf[0]);
    h->n -= k;
}

bool kl_rconf_hist_has(const kl_rconf_hist *h, uint64_t index)
{
    for (size_t i = 0; i < h->n; i++)
        if (h->index[i] == index)
            return true;
    return false;
}

/* ---------------------------------------------------------------- the next step */

kl_code kl_rconf_next(const kl_raft_conf *cur, const kl_raft_conf *target, kl_raft_conf *next,
                      bool *same, uint64_t *promote, size_t *n_promote, kl_err *err)
{
    *same = false;
    *n_promote = 0;
    if (target->n_old != 0 || target->old_replica_count != 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "conf",
                       "the target is a plain configuration; the core makes the joint step");
    kl_code rc = kl_raft_conf_check(target, err);
    if (rc != KL_OK)
        return rc;
    if (cur->n_old > 0) {
        kl_raft_conf half = *cur;
        half.n_old = 0;
        half.old_replica_count = 0;
        if (!kl_rconf_equal(&half, target))
            return kl_fail(err, KL_FAILED_PRECONDITION, "conf",
                           "a joint configuration is in effect: its leave step (to its new "
                           "half) comes first");
        *next = half;
        return KL_OK;
    }
    if (kl_rconf_equal(cur, target)) {
        *same = true;
        return KL_OK;
    }
    if (cur->replica_count == target->replica_count &&
        same_set(cur->members, cur->n_members, target->members, target->n_members)) {
        *next = *target; /* learners only: no voting set changes, no joint step (rule 6) */
        return KL_OK;
    }
    for (uint32_t i = 0; i < target->n_members; i++) {
        uint64_t id = target->members[i];
        if (has_id(cur->members, cur->n_members, id))
            continue;
        if (!has_id(cur->learners, cur->n_learners, id))
            return kl_fail(err, KL_FAILED_PRECONDITION, "members",
                           "member %llu is not a learner of the configuration: add it as a "
                           "learner first", (unsigned long long)id);
        promote[(*n_promote)++] = id;
    }
    *next = *target;
    memcpy(next->old_members, cur->members, sizeof next->old_members);
    next->n_old = cur->n_members;
    next->old_replica_count = cur->replica_count;
    return kl_raft_conf_check(next, err);
}
