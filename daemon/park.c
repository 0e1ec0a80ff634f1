#include "daemon/park.h"

#include "daemon/engine/engine.h"
#include "daemon/store/keys.h"

#include <stdlib.h>
#include <string.h>

kl_parked *kl_parked_new(const char *principal, const uint8_t command_id[16],
                         const uint8_t digest[KL_DIGEST_LEN], const uint8_t *req, size_t len)
{
    kl_parked *p = calloc(1, sizeof *p);
    if (p == NULL)
        return NULL;
    p->principal = strdup(principal);
    p->req = malloc(len ? len : 1);
    if (p->principal == NULL || p->req == NULL) {
        kl_parked_free(p);
        return NULL;
    }
    memcpy(p->command_id, command_id, 16);
    memcpy(p->digest, digest, KL_DIGEST_LEN);
    memcpy(p->req, req, len);
    p->len = len;
    return p;
}

int kl_parked_add_waiter(kl_parked *p, kl_node_reply_fn fn, void *cookie)
{
    if (p->n_waiters == p->cap_waiters) {
        size_t cap = p->cap_waiters ? p->cap_waiters * 2 : 2;
        kl_park_waiter *w = realloc(p->waiters, cap * sizeof *w);
        if (w == NULL)
            return -1;
        p->waiters = w;
        p->cap_waiters = cap;
    }
    p->waiters[p->n_waiters++] = (kl_park_waiter){fn, cookie};
    return 0;
}

void kl_parked_free(kl_parked *p)
{
    if (p == NULL)
        return;
    free(p->principal);
    free(p->req);
    free(p->waiters);
    free(p);
}

void kl_parked_answer(void *cookie, kl_code code, const kl_err *err, const uint8_t *receipt, size_t len)
{
    kl_parked *p = cookie;
    for (size_t i = 0; i < p->n_waiters; i++)
        p->waiters[i].fn(p->waiters[i].cookie, code, err, receipt, len);
    kl_parked_free(p);
}

kl_code kl_park_insert(kl_park *k, kl_parked *p, kl_err *err)
{
    if (k->n >= KL_PARK_MAX)
        return kl_fail(err, KL_RESOURCE_EXHAUSTED, "parked_receives",
                       "%d receives already wait for messages on this member (the parked_receives "
                       "limit); retry later or receive without wait_ms", KL_PARK_MAX);
    k->v[k->n++] = p;
    return KL_OK;
}

kl_parked *kl_park_find(const kl_park *k, const char *principal, const uint8_t command_id[16])
{
    for (size_t i = 0; i < k->n; i++)
        if (memcmp(k->v[i]->command_id, command_id, 16) == 0 && strcmp(k->v[i]->principal, principal) == 0)
            return k->v[i];
    return NULL;
}

void kl_park_note_key(kl_park *k, const uint8_t *key, size_t klen)
{
    uint64_t qid, seq;
    int64_t t;
    if (k->n == 0)
        return;
    if (kl_key_parse_available(key, klen, &qid, &seq) != 0 && kl_key_parse_timed(key, klen, &qid, &t, &seq) != 0)
        return;
    for (size_t i = 0; i < k->n; i++) {
        kl_parked *p = k->v[i];
        for (size_t j = 0; j < p->n_qids && !p->woken; j++)
            p->woken = p->qids[j] == qid;
        if (p->any_queue)
            p->woken = true;
    }
}

static bool due(const kl_parked *p, int64_t now)
{
    return p->woken || now >= p->due_ms || now >= p->until_ms;
}

bool kl_park_any_due(const kl_park *k, int64_t now)
{
    for (size_t i = 0; i < k->n; i++)
        if (due(k->v[i], now))
            return true;
    return false;
}

static kl_parked *take_at(kl_park *k, size_t i)
{
    kl_parked *p = k->v[i];
    memmove(&k->v[i], &k->v[i + 1], (k->n - i - 1) * sizeof k->v[0]);
    k->n--;
    return p;
}

kl_parked *kl_park_take_due(kl_park *k, int64_t now)
{
    for (size_t i = 0; i < k->n; i++)
        if (due(k->v[i], now))
            return take_at(k, i);
    return NULL;
}

kl_parked *kl_park_take_any(kl_park *k)
{
    return k->n ? take_at(k, k->n - 1) : NULL;
}

void kl_park_receive_only(const Keyload__V1__BatchRequest *b, bool *receive_only, uint32_t *wait_ms)
{
    *receive_only = b->n_mutations > 0;
    *wait_ms = 0;
    for (size_t i = 0; i < b->n_mutations; i++) {
        if (b->mutations[i]->kind_case != KEYLOAD__V1__MUTATION__KIND_RECEIVE) {
            *receive_only = false;
            *wait_ms = 0;
            return;
        }
        if (b->mutations[i]->receive->wait_ms > *wait_ms)
            *wait_ms = b->mutations[i]->receive->wait_ms;
    }
}

kl_code kl_park_idle(kl_view *base, const kl_overlay *scratch, bool *idle, kl_err *err)
{
    *idle = true;
    for (size_t i = 0; i < scratch->n && *idle; i++) {
        const kl_ov_entry *e = &scratch->v[i];
        uint8_t *val = NULL;
        size_t vlen = 0;
        bool found;
        kl_code rc = kl_view_get(base, e->key, e->klen, &val, &vlen, &found, err);
        if (rc != KL_OK)
            return rc;
        if (e->del)
            *idle = !found;
        else
            *idle = found && vlen == e->vlen && (vlen == 0 || memcmp(val, e->val, vlen) == 0);
        free(val);
    }
    return KL_OK;
}

static int first_timed(void *arg, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    (void)val;
    (void)vlen;
    uint64_t qid, seq;
    int64_t t;
    if (kl_key_parse_timed(key, klen, &qid, &t, &seq) == 0 && t < *(int64_t *)arg)
        *(int64_t *)arg = t;
    return 1; /* keys sort by time: the first one is the earliest */
}

kl_code kl_park_watch(kl_view *base, const Keyload__V1__BatchRequest *b, kl_parked *p, kl_err *err)
{
    p->n_qids = 0;
    p->any_queue = false;
    p->due_ms = INT64_MAX;
    for (size_t i = 0; i < b->n_mutations; i++) {
        const Keyload__V1__Receive *r = b->mutations[i]->receive;
        uint64_t qid;
        Keyload__V1__QueueRecord *rec;
        kl_code rc = kl_engine_load_queue(base, r->lane, &qid, &rec, err);
        if (rc != KL_OK)
            return rc;
        keyload__v1__queue_record__free_unpacked(rec, NULL);
        if (p->n_qids < KL_PARK_WATCH_MAX)
            p->qids[p->n_qids++] = qid;
        else
            p->any_queue = true;
        kl_key pk;
        kl_key_timed_queue(&pk, qid);
        if ((rc = kl_view_scan(base, pk.b, pk.len, first_timed, &p->due_ms, err)) != KL_OK)
            return rc;
    }
    return KL_OK;
}
