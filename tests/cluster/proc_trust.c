/* proc_trust: see proc_trust.h. */
#include "tests/cluster/proc_trust.h"

#include "common/rpc.h"
#include "keyload/v1/catalog.pb-c.h"
#include "tests/cluster/proc.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

bool tr_set_key(kl_client *admin, int partition, uint64_t member, const uint8_t pub[32], char *why, size_t cap)
{
    char cid[KL_COMMAND_ID_TEXT_LEN + 1];
    kl_command_id_new(cid);
    int64_t end = now_ms() + 30000;
    kl_err err;
    kl_err_clear(&err);
    for (;;) {
        kl_code rc = kl_client_set_member_key(admin, cid, partition, member, pub, NULL, &err);
        if (rc == KL_OK)
            return true;
        bool again = rc == KL_UNAVAILABLE || rc == KL_UNKNOWN_WRITE_OUTCOME || rc == KL_DEADLINE_EXCEEDED;
        if (!again || now_ms() > end) {
            snprintf(why, cap, "SetMemberKey p%dm%llu %s: %s %s %s", partition, (unsigned long long)member,
                     pub ? "register" : "remove", kl_code_name(rc), err.detail, err.message);
            return false;
        }
        sleep_ms(200);
    }
}

static void put_be(crypto_generichash_state *h, uint64_t v, int bytes)
{
    uint8_t b[8];
    for (int i = 0; i < bytes; i++)
        b[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
    crypto_generichash_update(h, b, (size_t)bytes);
}

static void sign(const char *cluster, Keyload__V1__CatalogTailRequest *r, const uint8_t secret[64], uint8_t sig[64])
{
    static const char label[] = "keyload.v1.CatalogTail request";
    crypto_generichash_state h;
    crypto_generichash_init(&h, NULL, 0, 32);
    crypto_generichash_update(&h, (const uint8_t *)label, sizeof label);
    crypto_generichash_update(&h, (const uint8_t *)cluster, strlen(cluster) + 1);
    put_be(&h, (uint32_t)r->partition, 4);
    put_be(&h, r->applied_version, 8);
    put_be(&h, r->wait_ms, 4);
    put_be(&h, r->member, 8);
    put_be(&h, (uint64_t)r->unix_ms, 8);
    uint8_t d[32];
    crypto_generichash_final(&h, d, sizeof d);
    crypto_sign_detached(sig, NULL, d, sizeof d, secret);
    r->signature.data = sig;
    r->signature.len = 64;
}

kl_code tr_tail(const char *cluster, const char *const *urls, int n, int partition, uint64_t member,
                const uint8_t secret[64], kl_err *err)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    Keyload__V1__CatalogTailRequest r = KEYLOAD__V1__CATALOG_TAIL_REQUEST__INIT;
    r.partition = partition;
    r.member = member;
    r.unix_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    uint8_t sig[64], buf[256];
    sign(cluster, &r, secret, sig);
    size_t len = keyload__v1__catalog_tail_request__pack(&r, buf);
    kl_code rc = KL_UNAVAILABLE;
    kl_fail(err, KL_UNAVAILABLE, "leader", "no member of partition 0 answered as its leader");
    /* Partition 0 may be electing: a few rounds over its members. */
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < n; i++) {
            kl_rpc_client *c = NULL;
            if (kl_rpc_client_open(urls[i], 1000, 0, &c, err) != KL_OK)
                continue;
            uint8_t *ans = NULL;
            size_t alen = 0;
            rc = kl_rpc_invoke(c, "keyload.v1.CatalogTail", buf, len, 3000, &ans, &alen, NULL, 0, err);
            kl_rpc_client_close(c);
            free(ans);
            if (rc != KL_NOT_LEADER && rc != KL_UNAVAILABLE)
                return rc;
        }
        sleep_ms(250);
    }
    return rc;
}
