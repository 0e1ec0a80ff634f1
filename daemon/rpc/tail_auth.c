#include "daemon/rpc/tail_auth.h"

#include <sodium.h>
#include <string.h>

static const kl_member *find_member(const kl_cluster *c, int partition, uint64_t member)
{
    const kl_partition *p = kl_cluster_find_partition(c, partition);
    for (int i = 0; p != NULL && i < p->member_count; i++)
        if ((uint64_t)p->members[i].id == member)
            return &p->members[i];
    return NULL;
}

static bool all_keyed(const kl_partition *p)
{
    if (p == NULL)
        return false;
    for (int i = 0; i < p->member_count; i++)
        if (!p->members[i].has_public_key)
            return false;
    return true;
}

bool kl_tail_auth_required(const kl_cluster *c, int partition)
{
    return all_keyed(kl_cluster_find_partition(c, 0)) && all_keyed(kl_cluster_find_partition(c, partition));
}

static void put_be(crypto_generichash_state *h, uint64_t v, int bytes)
{
    uint8_t b[8];
    for (int i = 0; i < bytes; i++)
        b[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
    crypto_generichash_update(h, b, (size_t)bytes);
}

static void start(crypto_generichash_state *h, const char *label, const kl_cluster *c)
{
    crypto_generichash_init(h, NULL, 0, 32);
    crypto_generichash_update(h, (const uint8_t *)label, strlen(label) + 1);
    crypto_generichash_update(h, (const uint8_t *)c->name, strlen(c->name) + 1);
}

static void request_digest(const kl_cluster *c, const Keyload__V1__CatalogTailRequest *r, uint8_t out[32])
{
    crypto_generichash_state h;
    start(&h, "keyload.v1.CatalogTail request", c);
    put_be(&h, (uint32_t)r->partition, 4);
    put_be(&h, r->applied_version, 8);
    put_be(&h, r->wait_ms, 4);
    put_be(&h, r->member, 8);
    put_be(&h, (uint64_t)r->unix_ms, 8);
    crypto_generichash_final(&h, out, 32);
}

static void answer_digest(const kl_cluster *c, uint64_t member, const uint8_t *req_sig, const uint8_t *answer,
                          size_t len, uint8_t out[32])
{
    static const uint8_t zero[KL_TAIL_AUTH_SIG_LEN];
    crypto_generichash_state h;
    start(&h, "keyload.v1.CatalogTail answer", c);
    put_be(&h, member, 8);
    crypto_generichash_update(&h, req_sig ? req_sig : zero, KL_TAIL_AUTH_SIG_LEN);
    crypto_generichash_update(&h, answer, len);
    crypto_generichash_final(&h, out, 32);
}

void kl_tail_auth_sign_request(const kl_cluster *c, Keyload__V1__CatalogTailRequest *r, uint64_t member,
                               int64_t now_unix_ms, const uint8_t member_secret[64],
                               uint8_t sig[KL_TAIL_AUTH_SIG_LEN])
{
    r->member = member;
    r->unix_ms = now_unix_ms;
    uint8_t d[32];
    request_digest(c, r, d);
    crypto_sign_detached(sig, NULL, d, sizeof d, member_secret);
    r->signature.data = sig;
    r->signature.len = KL_TAIL_AUTH_SIG_LEN;
}

/* The key that verifies `member` of `partition`: the catalog's record first (see the
 * header), then the cluster file's. */
static kl_code member_key(const kl_cluster *c, const kl_tail_vouched *vouched, int partition, uint64_t member,
                          const char *what, const uint8_t **key, kl_err *err)
{
    if (vouched != NULL && vouched->state == KL_TAIL_VOUCH_REMOVED)
        return kl_fail(err, KL_UNAUTHENTICATED, "tail_member_removed",
                       "member %llu of partition %d was removed; its CatalogTail %s is refused",
                       (unsigned long long)member, partition, what);
    if (vouched != NULL && vouched->state == KL_TAIL_VOUCH_KEY) {
        *key = vouched->public_key;
        return KL_OK;
    }
    const kl_member *m = find_member(c, partition, member);
    if (m == NULL || !m->has_public_key)
        return kl_fail(err, KL_UNAUTHENTICATED, "tail_signature",
                       "a CatalogTail %s must be signed by a member of partition %d whose key is known (the "
                       "cluster file, or a SetMemberKey record); member %llu has none",
                       what, partition, (unsigned long long)member);
    *key = m->public_key;
    return KL_OK;
}

void kl_tail_auth_vouched_of(const Keyload__V1__CatalogMemberKey *rec, kl_tail_vouched *out)
{
    memset(out, 0, sizeof *out);
    if (rec == NULL)
        return;
    if (rec->removed) {
        out->state = KL_TAIL_VOUCH_REMOVED;
    } else if (rec->public_key.len == sizeof out->public_key) {
        out->state = KL_TAIL_VOUCH_KEY;
        memcpy(out->public_key, rec->public_key.data, sizeof out->public_key);
    }
}

kl_code kl_tail_auth_verify_request(const kl_cluster *c, const kl_tail_vouched *vouched,
                                    const Keyload__V1__CatalogTailRequest *r, int64_t now_unix_ms, kl_err *err)
{
    const uint8_t *key = NULL;
    kl_code rc = member_key(c, vouched, r->partition, r->member, "request", &key, err);
    if (rc != KL_OK)
        return rc;
    if (r->signature.len != KL_TAIL_AUTH_SIG_LEN)
        return kl_fail(err, KL_UNAUTHENTICATED, "tail_signature",
                       "a CatalogTail request must be signed by a member of the partition it names");
    uint8_t d[32];
    request_digest(c, r, d);
    if (crypto_sign_verify_detached(r->signature.data, d, sizeof d, key) != 0)
        return kl_fail(err, KL_UNAUTHENTICATED, "tail_signature",
                       "the CatalogTail request's signature does not verify with member %llu's key",
                       (unsigned long long)r->member);
    int64_t skew = now_unix_ms - r->unix_ms;
    if (skew > KL_TAIL_AUTH_SKEW_MS || skew < -KL_TAIL_AUTH_SKEW_MS)
        return kl_fail(err, KL_UNAUTHENTICATED, "tail_stale",
                       "the CatalogTail request was signed %lld ms away from this member's clock (at most %d)",
                       (long long)skew, KL_TAIL_AUTH_SKEW_MS);
    return KL_OK;
}

void kl_tail_auth_sign_answer(const kl_cluster *c, uint64_t member, const uint8_t *req_sig,
                              const uint8_t *answer, size_t len, const uint8_t member_secret[64],
                              uint8_t sig[KL_TAIL_AUTH_SIG_LEN])
{
    uint8_t d[32];
    answer_digest(c, member, req_sig, answer, len, d);
    crypto_sign_detached(sig, NULL, d, sizeof d, member_secret);
}

kl_code kl_tail_auth_verify_answer(const kl_cluster *c, const kl_tail_vouched *vouched,
                                   const Keyload__V1__SignedCatalogTailAnswer *a, const uint8_t *req_sig, kl_err *err)
{
    const uint8_t *key = NULL;
    kl_code rc = member_key(c, vouched, 0, a->member, "answer", &key, err);
    if (rc != KL_OK)
        return rc;
    if (a->signature.len != KL_TAIL_AUTH_SIG_LEN)
        return kl_fail(err, KL_UNAUTHENTICATED, "tail_signature",
                       "a CatalogTail answer must be signed by a member of partition 0");
    uint8_t d[32];
    answer_digest(c, a->member, req_sig, a->answer.data, a->answer.len, d);
    if (crypto_sign_verify_detached(a->signature.data, d, sizeof d, key) != 0)
        return kl_fail(err, KL_UNAUTHENTICATED, "tail_signature",
                       "the CatalogTail answer's signature does not verify with member %llu's key",
                       (unsigned long long)a->member);
    return KL_OK;
}
