/* bench_members: the members of one partition as keyload-bench sees them: a connection per
 * member, dialed on demand and dropped when its peer is gone, keyload.v1.MemberStatus, and
 * finding the member that leads and serves. */
#include "tests/bench/bench_fixture.h"

#include <stdlib.h>
#include <string.h>

void bench_ms_init(bench_members *s, const bench_options *o)
{
    memset(s, 0, sizeof *s);
    s->n = o->n_urls;
    for (int i = 0; i < o->n_urls; i++)
        s->url[i] = o->urls[i];
}

/* The connection to member i, dialed when missing; NULL (err set) when it cannot be dialed.
 * A dead member refuses the dial at once, so a dropped connection costs nothing to retry. */
kl_rpc_client *bench_ms_conn(bench_members *s, int i, int connect_ms, kl_err *err)
{
    if (s->conn[i] == NULL && kl_rpc_client_open(s->url[i], connect_ms, 0, &s->conn[i], err) != KL_OK)
        s->conn[i] = NULL;
    return s->conn[i];
}

/* Forgets member i's connection: an nng REQ socket whose peer died would hold the next
 * request until its timeout waiting for a reconnect. */
void bench_ms_drop(bench_members *s, int i)
{
    if (s->conn[i] != NULL)
        kl_rpc_client_close(s->conn[i]);
    s->conn[i] = NULL;
}

void bench_ms_close(bench_members *s)
{
    for (int i = 0; i < s->n; i++)
        bench_ms_drop(s, i);
}

int bench_ms_index(const bench_members *s, const char *url)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->url[i], url) == 0)
            return i;
    return -1;
}

const char *bench_ms_node(const bench_members *s, int i, char *buf, size_t cap)
{
    if (i < 0 || s->member[i] == 0)
        snprintf(buf, cap, "?");
    else
        snprintf(buf, cap, "p%dm%llu", s->partition, (unsigned long long)s->member[i]);
    return buf;
}

/* keyload.v1.MemberStatus of member i; *out belongs to the caller. */
kl_code bench_ms_status(bench_members *s, int i, int timeout_ms, Keyload__V1__MemberStatusAnswer **out,
                        kl_err *err)
{
    *out = NULL;
    kl_rpc_client *c = bench_ms_conn(s, i, timeout_ms, err);
    if (c == NULL)
        return err->code;
    Keyload__V1__MemberStatusRequest req = KEYLOAD__V1__MEMBER_STATUS_REQUEST__INIT;
    uint8_t buf[16];
    size_t len = keyload__v1__member_status_request__pack(&req, buf);
    uint8_t *ans = NULL;
    size_t alen = 0;
    kl_code rc = kl_rpc_invoke(c, STATUS_METHOD, buf, len, timeout_ms, &ans, &alen, NULL, 0, err);
    if (rc == KL_OK) {
        *out = keyload__v1__member_status_answer__unpack(NULL, alen, ans);
        if (*out == NULL) {
            rc = kl_fail(err, KL_INTERNAL, "answer", "MemberStatus answer from %s does not decode",
                         s->url[i]);
        } else {
            s->member[i] = (*out)->member;
            s->partition = (*out)->partition;
        }
    } else if (rc == KL_UNAVAILABLE || rc == KL_DEADLINE_EXCEEDED) {
        bench_ms_drop(s, i);
    }
    free(ans);
    return rc;
}

bool bench_is_serving_leader(const Keyload__V1__MemberStatusAnswer *a)
{
    return a != NULL && strcmp(a->role, "leader") == 0 && a->serving;
}

/* Polls the members (skipping `skip`, -1 for none) until one says it leads and serves, or
 * until deadline (monotonic ns). Returns its index and, when out is not NULL, its status
 * (caller frees); -1 at the deadline. */
int bench_ms_find_leader(bench_members *s, int skip, int64_t deadline, Keyload__V1__MemberStatusAnswer **out)
{
    if (out != NULL)
        *out = NULL;
    for (;;) {
        for (int i = 0; i < s->n; i++) {
            if (i == skip)
                continue;
            kl_err err;
            kl_err_clear(&err);
            Keyload__V1__MemberStatusAnswer *a;
            if (bench_ms_status(s, i, 500, &a, &err) != KL_OK)
                continue;
            bool leads = bench_is_serving_leader(a);
            if (leads && out != NULL)
                *out = a;
            else
                keyload__v1__member_status_answer__free_unpacked(a, NULL);
            if (leads)
                return i;
        }
        if (bench_now_ns() > deadline)
            return -1;
        bench_sleep_ns(20000000LL);
    }
}

/* bench_ms_find_leader over every member for up to LEADER_WAIT_NS; on failure says so and
 * closes the set. */
int bench_ms_wait_leader(bench_members *s, Keyload__V1__MemberStatusAnswer **out)
{
    int li = bench_ms_find_leader(s, -1, bench_now_ns() + LEADER_WAIT_NS, out);
    if (li < 0) {
        fprintf(stderr, "keyload-bench: no member became a serving leader within 60 s\n");
        bench_ms_close(s);
    }
    return li;
}
