/* sealed: the SDK's side of ARCHITECTURE.md "Sessions and RPC" (common/session.h is the pure core,
 * daemon/rpc/session_serve.c the daemon's side).
 *
 * A client opened with a principal (kl_client_open_principal) holds the principal's id and
 * Ed25519 secret key, and one session slot per member table slot (client/sdk/member_table.h:
 * the cluster file's members, then those learned from Members). A slot is filled lazily:
 * the first call to that member sends keyload.v1.Hello on the member's connection and
 * verifies the HelloAnswer with the member's public key from the table (the cluster file's
 * "public_key", or the key an authenticated Members answer reported; kl_session_finish). Every request then goes sealed: the Envelope carries the
 * session id, a counter and the sealed request with the method name as associated data.
 * An OK answer's payload is opened with the request's counter and the AD
 *   method || 0x00 || code (1 byte) || detail
 * (code 0, detail "" for OK); an error answer that carries a seal (the daemon seals an
 * empty body for every error after it opened the request) is checked the same way, so a
 * forged or swapped status is refused (UNAUTHENTICATED "bad_answer_seal"). Refusals before
 * the daemon opened the request (session_unknown, session_expired, session_revoked,
 * replayed_counter, bad_seal, ...) are necessarily unsealed.
 *
 * Re-handshake: session_unknown, session_expired or session_revoked (a restart, a new
 * leader that never saw us, the ttl, a changed principal) and replayed_counter (more than
 * KL_SESSION_WINDOW requests overtook ours) ran nothing on the daemon, so the slot is
 * dropped (unknown/expired/revoked), a new Hello made and the same request bytes sealed
 * again under a new counter, within the attempt's time. A session the client knows to be
 * expired is replaced before use.
 *
 * Threads: each slot has its own mutex. It guards the counter (allocated and sealed under
 * it, so concurrent calls never share one) and the handshake flag (one Hello per slot at
 * a time; other requests for that member queue as the slot's waiters, holding no thread
 * and no lock, and are resumed when the Hello ends). Every request is one attempt machine
 * (kl_sdk_sealed_att) advanced by its call's rpc op (client.c), so the same code serves the
 * blocking and the asynchronous API. The answer is opened outside the lock
 * with a copy of the session as it was when the request was sealed, so answers may come
 * back in any order and a slot replaced meanwhile does not matter. Copies and the
 * principal's secret key are wiped (sodium_memzero). */
#include "client/sdk/internal.h"
#include "client/sdk/member_table.h"

#include "common/clock.h"
#include "common/keys.h"
#include "common/session.h"
#include "keyload/v1/session.pb-c.h"

#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define METHOD_HELLO "keyload.v1.Hello"
/* A session this close to its end is replaced before use rather than refused in flight. */
#define SESSION_EXPIRY_MARGIN_MS 250
/* Sends of one request per attempt (kl_sdk_sealed_att: first try + re-handshakes). */
#define SEALED_TRIES 3

typedef struct member_slot {
    pthread_mutex_t mu;
    bool ready;          /* s holds an established session */
    bool handshaking;    /* a Hello is in flight: other requests wait for it */
    kl_sdk_sealed_att *waiters; /* requests waiting for that Hello, resumed when it ends */
    uint64_t generation; /* incremented whenever s is replaced or dropped */
    kl_session s;
} member_slot;

struct kl_sdk_principal {
    char id[KL_SESSION_PRINCIPAL_MAX + 1];
    uint8_t secret[KL_SESSION_SIGN_SECRET_LEN];
    char cluster[KL_NAME_MAX];
    int slot_count;
    member_slot *slots; /* [partition index * KL_SDK_MEMBERS_MAX + member table slot] */
};

static int64_t wall_ms(void)
{
    return kl_clock_ms(CLOCK_REALTIME);
}

static int64_t mono_ms(void)
{
    return kl_clock_ms(CLOCK_MONOTONIC);
}

kl_code kl_sdk_principal_new(const char *principal_id, const char *key_path,
                             const kl_cluster *cluster, kl_sdk_principal **out, kl_err *err)
{
    *out = NULL;
    if (principal_id == NULL || principal_id[0] == '\0' ||
        strlen(principal_id) > KL_SESSION_PRINCIPAL_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "principal",
                       "the principal id must be 1..%d bytes", KL_SESSION_PRINCIPAL_MAX);
    if (key_path == NULL || key_path[0] == '\0')
        return kl_fail(err, KL_INVALID_ARGUMENT, "key", "the principal's key file path is empty");
    if (strlen(cluster->name) == 0 || strlen(cluster->name) > KL_SESSION_CLUSTER_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "cluster", "the cluster name must be 1..%d bytes",
                       KL_SESSION_CLUSTER_MAX);
    for (int pi = 0; pi < cluster->partition_count; pi++) {
        const kl_partition *p = &cluster->partitions[pi];
        for (int mi = 0; mi < p->member_count; mi++)
            if (!p->members[mi].has_public_key)
                return kl_fail(err, KL_INVALID_ARGUMENT, "public_key",
                               "member p%dm%d has no \"public_key\" in the cluster file, so its "
                               "answers cannot be verified; use the cluster file "
                               "deploy/keyload-cluster writes (var/%s/cluster.json)",
                               p->id, p->members[mi].id, cluster->name);
    }
    kl_sdk_principal *pr = calloc(1, sizeof *pr);
    if (pr == NULL)
        return kl_sdk_oom(err);
    pr->slot_count = cluster->partition_count * KL_SDK_MEMBERS_MAX;
    pr->slots = calloc((size_t)(pr->slot_count > 0 ? pr->slot_count : 1), sizeof *pr->slots);
    if (pr->slots == NULL) {
        free(pr);
        return kl_sdk_oom(err);
    }
    int inited = 0;
    for (; inited < pr->slot_count; inited++)
        if (pthread_mutex_init(&pr->slots[inited].mu, NULL) != 0)
            break;
    if (inited < pr->slot_count) {
        pr->slot_count = inited;
        kl_sdk_principal_free(pr);
        return kl_fail(err, KL_INTERNAL, "mutex", "cannot create a mutex");
    }
    snprintf(pr->id, sizeof pr->id, "%s", principal_id);
    snprintf(pr->cluster, sizeof pr->cluster, "%s", cluster->name);
    kl_code rc = kl_keys_read_secret_file("principal key file", key_path, pr->secret,
                                          sizeof pr->secret, err);
    if (rc != KL_OK) {
        kl_sdk_principal_free(pr);
        return rc;
    }
    *out = pr;
    return KL_OK;
}

void kl_sdk_principal_free(kl_sdk_principal *pr)
{
    if (pr == NULL)
        return;
    for (int i = 0; i < pr->slot_count; i++) {
        kl_session_wipe(&pr->slots[i].s);
        pthread_mutex_destroy(&pr->slots[i].mu);
    }
    free(pr->slots);
    sodium_memzero(pr, sizeof *pr);
    free(pr);
}

static member_slot *att_slot(const kl_sdk_sealed_att *att)
{
    return &att->pr->slots[att->pi * KL_SDK_MEMBERS_MAX + att->mi];
}

/* The attempt is over with rc (att->err says why). */
static bool att_end(kl_sdk_sealed_att *att, kl_code rc)
{
    att->rc = rc;
    return true;
}

/* Sends the Hello of att's slot (the caller set slot->handshaking). */
static kl_code hello_send(kl_sdk_sealed_att *att, int left, kl_err *err)
{
    const kl_sdk_member *m = att->m;
    kl_code rc = kl_session_hello_new(att->pr->id, att->pr->secret, att->pr->cluster, att->pid,
                                      m->id, wall_ms(), NULL, NULL, &att->hc, err);
    if (rc != KL_OK)
        return rc;
    att->hc_live = true;
    Keyload__V1__Hello hm = KEYLOAD__V1__HELLO__INIT;
    kl_session_hello_to_pb(&att->hc.hello, &hm);
    uint8_t buf[512];
    size_t n = keyload__v1__hello__get_packed_size(&hm);
    if (n > sizeof buf)
        return kl_fail(err, KL_INTERNAL, "hello", "the Hello does not fit %zu bytes", sizeof buf);
    keyload__v1__hello__pack(&hm, buf);
    att->in_hello = true;
    rc = kl_rpc_op_start(att->op, att->conn, METHOD_HELLO, buf, n, NULL, left, err);
    if (rc != KL_OK)
        att->in_hello = false;
    return rc;
}

/* The HelloAnswer: verified with the member's public key, it becomes the slot's session. */
static kl_code hello_answer(kl_sdk_sealed_att *att, member_slot *slot, kl_err *err)
{
    const kl_sdk_member *m = att->m;
    uint8_t *ans = NULL;
    size_t ans_len = 0;
    kl_code rc = kl_rpc_op_result(att->op, &ans, &ans_len, NULL, NULL, 0, err);
    kl_session fresh;
    memset(&fresh, 0, sizeof fresh);
    if (rc == KL_OK) {
        Keyload__V1__HelloAnswer *ha = keyload__v1__hello_answer__unpack(NULL, ans_len, ans);
        kl_session_hello_answer a;
        memset(&a, 0, sizeof a);
        if (ha == NULL)
            rc = kl_fail(err, KL_INTERNAL, "hello_answer",
                         "member p%dm%llu's HelloAnswer does not decode", att->pid,
                         (unsigned long long)m->id);
        else
            rc = kl_session_answer_from_pb(ha, &a, err);
        if (ha != NULL)
            keyload__v1__hello_answer__free_unpacked(ha, NULL);
        if (rc == KL_OK)
            rc = kl_session_finish(&att->hc, &a, m->public_key, &fresh, err);
        if (rc != KL_OK && err != NULL && err->code == KL_UNAUTHENTICATED) {
            char detail[sizeof err->detail];
            snprintf(detail, sizeof detail, "%s", err->detail);
            kl_fail(err, KL_UNAUTHENTICATED, detail,
                    "member p%dm%llu's HelloAnswer does not verify with its public_key %s (%s)",
                    att->pid, (unsigned long long)m->id,
                    m->learned ? "learned from the partition's Members" : "in the cluster file",
                    detail);
        }
    }
    free(ans);
    pthread_mutex_lock(&slot->mu);
    if (rc == KL_OK) {
        kl_session_wipe(&slot->s);
        slot->s = fresh;
        slot->ready = true;
        slot->generation++;
    }
    slot->handshaking = false;
    pthread_mutex_unlock(&slot->mu);
    kl_session_wipe(&fresh);
    if (rc == KL_DEADLINE_EXCEEDED)
        /* The Hello went unanswered, so the request itself was never sent: not an unknown
         * outcome, and the member may be starting (the caller tries again). */
        rc = kl_fail(err, KL_UNAVAILABLE, "hello_no_answer",
                     "member p%dm%llu did not answer the Hello within %d ms; the request was not "
                     "sent", att->pid, (unsigned long long)m->id, (int)(att->deadline - att->hello_at));
    return rc;
}

/* Resumes every request that waited for this slot's Hello (outside the slot's lock: each
 * seals under it again, or shakes hands itself when this Hello failed). */
static void wake_waiters(member_slot *slot)
{
    pthread_mutex_lock(&slot->mu);
    kl_sdk_sealed_att *w = slot->waiters;
    slot->waiters = NULL;
    pthread_mutex_unlock(&slot->mu);
    while (w != NULL) {
        kl_sdk_sealed_att *next = w->next_waiter;
        w->next_waiter = NULL;
        w->wake(w->arg);
        w = next;
    }
}

/* method || 0x00 || code || detail: the daemon's answer AD (session_serve.c). */
static size_t answer_ad(const char *method, kl_code code, const char *detail, uint8_t *ad)
{
    size_t m = strlen(method), d = strlen(detail);
    if (m > KL_SESSION_AD_MAX - 2)
        m = KL_SESSION_AD_MAX - 2;
    if (d > KL_SESSION_AD_MAX - m - 2)
        d = KL_SESSION_AD_MAX - m - 2;
    memcpy(ad, method, m);
    ad[m] = 0;
    ad[m + 1] = (uint8_t)code;
    memcpy(ad + m + 2, detail, d);
    return m + 2 + d;
}

/* Refusals by the daemon's gate that ran nothing and that a new session (or a new
 * counter) cures. *drop: the session itself is gone. */
static bool retryable_refusal(kl_code rc, const kl_err *e, const kl_rpc_session_answer *sa,
                              bool *drop)
{
    *drop = false;
    if (rc != KL_UNAUTHENTICATED || sa->sealed_len > 0)
        return false;
    if (strcmp(e->detail, "session_unknown") == 0 || strcmp(e->detail, "session_expired") == 0 ||
        strcmp(e->detail, "session_revoked") == 0) {
        *drop = true;
        return true;
    }
    return strcmp(e->detail, "replayed_counter") == 0;
}

/* Checks an answer's session fields and opens (OK) or verifies (error) its seal. */
static kl_code open_answer(const kl_session *cs, uint64_t counter, const char *method,
                           kl_code rc, const kl_err *e, const kl_rpc_session_answer *sa,
                           const char *who, uint8_t **ans, size_t *ans_len, kl_err *err)
{
    if (rc != KL_OK && sa->sealed_len == 0)
        return rc; /* refused before the daemon opened the request: unsealed by necessity */
    if (sa->sealed_len == 0)
        return kl_fail(err, KL_UNAUTHENTICATED, "unsealed_answer",
                       "%s answered %s OK without a seal under a session", who, method);
    if (sa->session_id_len != KL_SESSION_ID_LEN || memcmp(sa->session_id, cs->id, KL_SESSION_ID_LEN) != 0 ||
        sa->counter != counter)
        return kl_fail(err, KL_UNAUTHENTICATED, "bad_answer_seal",
                       "%s's answer to %s names another session or counter", who, method);
    uint8_t ad[KL_SESSION_AD_MAX];
    size_t ad_len = answer_ad(method, rc, rc == KL_OK ? "" : e->detail, ad);
    size_t cap = sa->sealed_len > KL_SESSION_SEAL_OVERHEAD ? sa->sealed_len - KL_SESSION_SEAL_OVERHEAD : 0;
    uint8_t *pt = malloc(cap > 0 ? cap : 1);
    if (pt == NULL)
        return kl_sdk_oom(err);
    size_t pt_len = 0;
    kl_err oe;
    kl_err_clear(&oe);
    if (kl_session_open_answer(cs, counter, sa->sealed, sa->sealed_len, ad, ad_len, pt,
                               cap > 0 ? cap : 1, &pt_len, &oe) != KL_OK) {
        free(pt);
        return kl_fail(err, KL_UNAUTHENTICATED, "bad_answer_seal",
                       "%s's answer to %s (%s) does not open under the session (%s)", who,
                       method, kl_code_name(rc), oe.detail);
    }
    if (rc != KL_OK) {
        sodium_memzero(pt, cap > 0 ? cap : 1);
        free(pt);
        if (pt_len != 0)
            return kl_fail(err, KL_UNAUTHENTICATED, "bad_answer_seal",
                           "%s's error answer to %s seals a body", who, method);
        return rc; /* err already holds the authenticated status */
    }
    *ans = pt;
    *ans_len = pt_len;
    return KL_OK;
}

/* One send of the request under the slot's session (sealed with a fresh counter), a Hello
 * first when the slot has no live session, or a wait for another request's Hello. */
bool kl_sdk_sealed_begin(kl_sdk_sealed_att *att)
{
    member_slot *slot = att_slot(att);
    kl_err *err = &att->err;
    int64_t left = att->deadline - mono_ms();
    if (left <= 0) {
        kl_fail(err, KL_UNAVAILABLE, "no_connection", "%s: no time left to shake hands again; %s not sent",
                att->who, att->method);
        return att_end(att, KL_UNAVAILABLE);
    }
    kl_code rc = KL_OK;
    pthread_mutex_lock(&slot->mu);
    if (!slot->ready || kl_session_expired(&slot->s, wall_ms() + SESSION_EXPIRY_MARGIN_MS)) {
        if (slot->handshaking) { /* resumed by wake_waiters */
            att->next_waiter = slot->waiters;
            slot->waiters = att;
            pthread_mutex_unlock(&slot->mu);
            return false;
        }
        slot->handshaking = true;
        pthread_mutex_unlock(&slot->mu);
        att->hello_at = mono_ms();
        rc = hello_send(att, (int)left, err);
        if (rc == KL_OK)
            return false;
        pthread_mutex_lock(&slot->mu);
        slot->handshaking = false;
        pthread_mutex_unlock(&slot->mu);
        wake_waiters(slot);
        return att_end(att, rc);
    }
    att->counter = slot->s.next_counter;
    rc = kl_session_seal_request(&slot->s, att->counter, att->req, att->req_len,
                                 (const uint8_t *)att->method, strlen(att->method), att->sealed,
                                 att->cap, &att->sealed_len, err);
    kl_session_wipe(&att->cs);
    att->cs = slot->s; /* the session as it was when this request was sealed */
    att->generation = slot->generation;
    pthread_mutex_unlock(&slot->mu);
    if (rc != KL_OK)
        return att_end(att, rc);
    kl_rpc_session_request sr = {.session_id = att->cs.id, .session_id_len = KL_SESSION_ID_LEN,
                                 .counter = att->counter, .sealed = att->sealed,
                                 .sealed_len = att->sealed_len};
    rc = kl_rpc_op_start(att->op, att->conn, att->method, NULL, 0, &sr, (int)left, err);
    return rc == KL_OK ? false : att_end(att, rc);
}

/* The request's answer: a refusal a new session cures is sent again (at most
 * SEALED_TRIES sends), anything else is opened or verified under the session. */
static bool sealed_answered(kl_sdk_sealed_att *att)
{
    kl_rpc_session_answer sa;
    kl_err e;
    kl_err_clear(&e);
    uint8_t *clear = NULL;
    size_t clear_len = 0;
    kl_code rc = kl_rpc_op_result(att->op, &clear, &clear_len, &sa, att->leader,
                                  sizeof att->leader, &e);
    free(clear); /* an answer under a session carries its payload sealed */
    if (rc == KL_OK && clear_len > 0) {
        kl_rpc_session_answer_free(&sa);
        rc = kl_fail(&e, KL_UNAUTHENTICATED, "clear_payload",
                     "%s answered %s with a clear payload beside its session", att->who,
                     att->method);
    }
    bool drop = false;
    if (retryable_refusal(rc, &e, &sa, &drop)) {
        member_slot *slot = att_slot(att);
        if (drop) {
            pthread_mutex_lock(&slot->mu);
            if (slot->generation == att->generation) { /* nobody replaced it meanwhile */
                kl_session_wipe(&slot->s);
                slot->ready = false;
                slot->generation++;
            }
            pthread_mutex_unlock(&slot->mu);
        }
        kl_rpc_session_answer_free(&sa);
        att->err = e;
        att->rc = rc;
        if (++att->tries < SEALED_TRIES)
            return kl_sdk_sealed_begin(att); /* the same request bytes, sealed again */
        return true;
    }
    bool answered = rc == KL_OK || sa.session_id_len > 0 || sa.sealed_len > 0;
    if (answered)
        rc = open_answer(&att->cs, att->counter, att->method, rc, &e, &sa, att->who, &att->ans,
                         &att->ans_len, &e);
    kl_rpc_session_answer_free(&sa);
    att->err = e;
    att->rc = rc;
    return true;
}

bool kl_sdk_sealed_answered(kl_sdk_sealed_att *att)
{
    if (!att->in_hello)
        return sealed_answered(att);
    att->in_hello = false;
    member_slot *slot = att_slot(att);
    kl_code rc = hello_answer(att, slot, &att->err);
    kl_session_client_wipe(&att->hc);
    att->hc_live = false;
    wake_waiters(slot);
    if (rc != KL_OK)
        return att_end(att, rc);
    return kl_sdk_sealed_begin(att);
}

kl_code kl_sdk_sealed_att_init(kl_sdk_sealed_att *att, kl_sdk_principal *pr, int pid, int pi, int mi,
                               const kl_sdk_member *m, kl_rpc_client *conn, kl_rpc_op *op,
                               const char *method, const uint8_t *req, size_t req_len,
                               int timeout_ms, kl_err *err)
{
    int idx = pi * KL_SDK_MEMBERS_MAX + mi;
    if (idx < 0 || idx >= pr->slot_count || mi < 0 || mi >= KL_SDK_MEMBERS_MAX)
        return kl_fail(err, KL_INTERNAL, "member", "no session slot for member %d of partition %d",
                       mi, pid);
    size_t cap = req_len + KL_SESSION_SEAL_OVERHEAD;
    if (att->sealed_cap < cap) {
        uint8_t *grown = realloc(att->sealed, cap);
        if (grown == NULL)
            return kl_sdk_oom(err);
        att->sealed = grown;
        att->sealed_cap = cap;
    }
    att->cap = cap;
    att->pr = pr;
    att->m = m;
    att->pid = pid;
    att->pi = pi;
    att->mi = mi;
    att->conn = conn;
    att->op = op;
    att->method = method;
    att->req = req;
    att->req_len = req_len;
    att->deadline = mono_ms() + timeout_ms;
    att->tries = 0;
    att->in_hello = false;
    att->ans = NULL;
    att->ans_len = 0;
    att->leader[0] = '\0';
    att->rc = KL_INTERNAL;
    kl_err_clear(&att->err);
    snprintf(att->who, sizeof att->who, "member p%dm%llu", pid, (unsigned long long)m->id);
    return KL_OK;
}

void kl_sdk_sealed_att_clear(kl_sdk_sealed_att *att)
{
    if (att->hc_live)
        kl_session_client_wipe(&att->hc);
    att->hc_live = false;
    kl_session_wipe(&att->cs);
    if (att->sealed != NULL)
        sodium_memzero(att->sealed, att->sealed_cap);
    free(att->sealed);
    att->sealed = NULL;
    att->sealed_cap = 0;
}
