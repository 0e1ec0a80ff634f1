/* session_serve: the daemon's half of ARCHITECTURE.md "Sessions and RPC" (common/session.h is the pure
 * core): the keyload.v1.Hello method and the gate every other method passes.
 *
 * Hello: any member answers (each member has its own sessions). Its X25519 pair is reused
 * for at most HELLO_KX_REUSE_MS and HELLO_KX_REUSE_MAX Hellos, then wiped and replaced: a
 * fixed-base multiplication is a quarter of a Hello's CPU, and a leader change sends every
 * client's Hello at once. Each session still has its own keys (the client's pair is fresh,
 * the session id random); a memory compromise exposes at most one window's sessions. The principal is looked up
 * by id in this member's applied catalog; the session is stored in s->sessions
 * (daemon/rpc/sessions.h: bounded, evicting). Refusals: UNAVAILABLE "member_key" (started
 * without --member-key), UNAUTHENTICATED "principal" (no such principal, where the catalog
 * is known current) or UNAVAILABLE "catalog_behind" (elsewhere: it may not have arrived),
 * the detail of kl_session_accept, or UNAUTHENTICATED "hello_replayed" (this very Hello was
 * answered before: one Hello, one session); nothing is stored then.
 *
 * Gate: a request without session fields runs as today, as KL_LOCAL_PRINCIPAL. A request
 * whose Envelope carries a session_id must carry exactly 16 bytes of it, `sealed` and no
 * clear payload (INVALID_ARGUMENT otherwise). In this order it is refused UNAUTHENTICATED:
 * "session_unknown" (not in the table), "session_expired" (dropped), "session_revoked"
 * (the principal is gone from the applied catalog or its tenant or key changed: dropped),
 * then whatever kl_session_open_request refuses (bad_seal, replayed_counter, bad_counter).
 * A refused request runs nothing. The request's associated data is the method name, so a
 * sealed request opens only under the method it was sealed for.
 *
 * Answers under a session (rpc.h kl_rpc_call_set_session): OK answers carry the payload
 * sealed; error answers keep code, message and detail in clear (messages name fields,
 * limits and catalog names, never message data or keys) and carry in `sealed` the seal of
 * an empty plaintext, which authenticates the code and detail. Answer associated data:
 *   method || 0x00 || code (1 byte) || detail
 * (with the request's counter, as common/session.h binds every answer). So an on-path peer
 * can neither read an OK answer nor pass off a forged or swapped status as the daemon's;
 * the refusals above are necessarily unsealed (no session to seal with). */
#include "daemon/rpc/serve.h"

#include "common/clock.h"
#include "daemon/rpc/sessions.h"
#include "daemon/rpc/tailer.h"
#include "keyload/v1/catalog.pb-c.h"
#include "keyload/v1/session.pb-c.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define METHOD_MAX 64
#define HELLO_KX_REUSE_MS 1000
#define HELLO_KX_REUSE_MAX 256

static int64_t mono_ms(void)
{
    return kl_clock_ms(CLOCK_MONOTONIC);
}

/* The pair this Hello answers with: the current one, or a new one when it is too old or
 * too used. */
static kl_code hello_kx_pair(kl_service *s, kl_err *err)
{
    int64_t now = mono_ms();
    if (s->hello_kx.made_ms != 0 && now - s->hello_kx.made_ms < HELLO_KX_REUSE_MS &&
        s->hello_kx.uses < HELLO_KX_REUSE_MAX) {
        s->hello_kx.uses++;
        return KL_OK;
    }
    kl_service_hello_kx_wipe(s);
    kl_code rc = kl_session_kx_pair_new(s->hello_kx.pk, s->hello_kx.sk, NULL, NULL, err);
    if (rc == KL_OK) {
        s->hello_kx.made_ms = now > 0 ? now : 1;
        s->hello_kx.uses = 1;
    }
    return rc;
}

void kl_service_hello_kx_wipe(kl_service *s)
{
    sodium_memzero(&s->hello_kx, sizeof s->hello_kx);
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int64_t wall_ms(void)
{
    return kl_clock_ms(CLOCK_REALTIME);
}

static void reply_fail(kl_rpc_call *call, kl_code code, const char *detail, const char *message)
{
    kl_err e;
    kl_fail(&e, code, detail, "%s", message);
    kl_rpc_reply_error(call, &e, NULL);
}

static bool has_session_fields(const kl_rpc_call *call)
{
    size_t sid, sealed;
    kl_rpc_call_session_id(call, &sid);
    kl_rpc_call_sealed(call, &sealed);
    return sid > 0 || sealed > 0 || kl_rpc_call_counter(call) != 0;
}

/* ---- Hello ---- */

/* The Hello payload, decoded and checked for shape. */
static kl_code hello_decode(kl_rpc_call *call, kl_session_hello *out, kl_err *err)
{
    size_t len;
    const uint8_t *p = kl_rpc_call_payload(call, &len);
    Keyload__V1__Hello *m = keyload__v1__hello__unpack(NULL, len, p);
    if (m == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "payload", "the Hello request does not decode");
    kl_code rc = kl_session_hello_from_pb(m, out, err);
    keyload__v1__hello__free_unpacked(m, NULL);
    return rc;
}

/* Accepts the Hello against the principal record and stores the session. */
static kl_code hello_accept(kl_service *s, const kl_session_hello *h,
                            const Keyload__V1__CatalogPrincipal *p, kl_session_hello_answer *answer,
                            kl_err *err)
{
    if (p->public_key.len != KL_SESSION_SIGN_PUBLIC_LEN || p->key_id.len != KL_KEY_ID_LEN ||
        strlen(p->tenant) >= KL_NAME_MAX)
        return kl_fail(err, KL_INTERNAL, "store", "stored principal record is malformed");
    int64_t now = wall_ms();
    kl_session_accept_params ap = {.principal_public = p->public_key.data,
                                   .cluster = s->cluster->name,
                                   .partition = s->partition->id,
                                   .member = s->member_id,
                                   .member_secret = s->keys->member_secret,
                                   .now_ms = now,
                                   .max_skew_ms = KL_SESSION_DEFAULT_SKEW_MS,
                                   .ttl_ms = s->cluster->timers.session_ttl_ms};
    kl_code rc = hello_kx_pair(s, err);
    if (rc != KL_OK)
        return rc;
    ap.server_kx_pk = s->hello_kx.pk;
    ap.server_kx_sk = s->hello_kx.sk;
    kl_session_entry *e = calloc(1, sizeof *e);
    if (e == NULL)
        return kl_fail(err, KL_UNAVAILABLE, "memory", "out of memory; retry");
    rc = kl_session_accept(h, &ap, answer, &e->s, err);
    if (rc == KL_OK) { /* only a verified Hello is remembered: others cannot fill the set */
        rc = kl_sessions_hello_seen(s->sessions, h->signature, sizeof h->signature, mono_ms(), err);
        if (rc == KL_UNAUTHENTICATED)
            s->hello_refusals.replayed++;
    }
    if (rc == KL_OK) {
        memcpy(e->tenant, p->tenant, strlen(p->tenant) + 1);
        memcpy(e->key_id, p->key_id.data, KL_KEY_ID_LEN);
        memcpy(e->public_key, p->public_key.data, KL_SESSION_SIGN_PUBLIC_LEN);
        rc = kl_sessions_put(s->sessions, e, now, NULL, err);
        if (rc == KL_CONFLICT) /* a random 16-byte id taken: retrying draws another */
            rc = kl_fail(err, KL_UNAVAILABLE, "session_id", "session id collision; retry the Hello");
    }
    sodium_memzero(e, sizeof *e);
    free(e);
    return rc;
}

/* Whether this member's applied catalog holds every principal whose creation was
 * acknowledged: partition 0's serving leader (its own-term entry applied, so every
 * committed change is), or a data partition's serving leader within its catalog lease
 * (partition 0 answers a catalog change only once every partition still holding a lease
 * applied it). A follower, a leader still catching up, or one whose lease ran out may lag. */
static bool catalog_current(kl_service *s)
{
    uint64_t index, term;
    bool serving = false;
    if (s->repl == NULL)
        return false;
    kl_repl_next(s->repl, &index, &term, &serving);
    if (!serving)
        return false;
    return s->tailer == NULL || kl_tailer_lease_valid(s->tailer, NULL);
}

/* The refusal of a Hello whose principal this member does not know: final only where the
 * catalog is known current; elsewhere the principal may just not have arrived yet, and a
 * client retrying (here or at the leader) will be let in. */
static kl_code unknown_principal(kl_service *s, kl_err *err)
{
    if (catalog_current(s)) {
        s->hello_refusals.unknown_principal++;
        return kl_fail(err, KL_UNAUTHENTICATED, "principal",
                       "no principal with the Hello's principal_id exists in the catalog");
    }
    s->hello_refusals.catalog_behind++;
    return kl_fail(err, KL_UNAVAILABLE, "catalog_behind",
                   "partition %d member %llu has not caught up with the catalog (it is not its "
                   "partition's serving leader with a current catalog), so it cannot tell whether "
                   "the Hello's principal exists; retry, or shake hands with the leader",
                   s->partition->id, (unsigned long long)s->member_id);
}

static void hello(kl_service *s, kl_rpc_call *call);

void kl_service_hello(void *owner, kl_rpc_call *call)
{
    kl_service *s = owner;
    struct timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    hello(s, call);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    s->costs.hellos++;
    s->costs.hello_ns += (uint64_t)((b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec));
}

static void hello(kl_service *s, kl_rpc_call *call)
{
    if (has_session_fields(call)) {
        reply_fail(call, KL_INVALID_ARGUMENT, "session_id",
                   "Hello travels in clear: its Envelope carries no session_id, counter or sealed");
        return;
    }
    if (s->keys == NULL || !s->keys->has_member_key || s->sessions == NULL) {
        reply_fail(call, KL_UNAVAILABLE, "member_key",
                   "this member was started without --member-key and accepts no sessions");
        return;
    }
    kl_err err;
    kl_err_clear(&err);
    kl_session_hello h;
    kl_session_hello_answer answer;
    memset(&answer, 0, sizeof answer);
    Keyload__V1__CatalogPrincipal *p = NULL;
    bool found = false;
    kl_code rc = hello_decode(call, &h, &err);
    if (rc == KL_OK)
        rc = kl_node_find_principal(s->node, h.principal_id, &p, &found, &err);
    if (rc == KL_OK && !found)
        rc = unknown_principal(s, &err);
    if (rc == KL_OK)
        rc = hello_accept(s, &h, p, &answer, &err);
    if (p != NULL)
        keyload__v1__catalog_principal__free_unpacked(p, NULL);
    if (rc != KL_OK) {
        kl_rpc_reply_error(call, &err, NULL);
        return;
    }
    Keyload__V1__HelloAnswer m = KEYLOAD__V1__HELLO_ANSWER__INIT;
    kl_session_answer_to_pb(&answer, &m);
    uint8_t buf[256];
    size_t n = keyload__v1__hello_answer__get_packed_size(&m);
    if (n > sizeof buf) {
        reply_fail(call, KL_INTERNAL, "hello_answer", "HelloAnswer too large");
        return;
    }
    keyload__v1__hello_answer__pack(&m, buf);
    kl_rpc_reply(call, buf, n);
}

/* ---- the gate ---- */

/* What one sealed call needs to seal its answer: a copy of the session as it was right after
 * opening the request (the table's entry may be evicted or dropped before the answer). */
typedef struct sealed_call {
    kl_service *service;           /* its costs; the service outlives every call */
    kl_session s;
    uint64_t counter;
    char method[METHOD_MAX + 1];
} sealed_call;

/* method || 0x00 || code || detail (see the top of this file). */
static size_t answer_ad(const sealed_call *sc, kl_code code, const char *detail, uint8_t *ad)
{
    size_t m = strlen(sc->method), d = strlen(detail);
    if (d > KL_SESSION_AD_MAX - m - 2)
        d = KL_SESSION_AD_MAX - m - 2; /* details are short; never overrun */
    memcpy(ad, sc->method, m);
    ad[m] = 0;
    ad[m + 1] = (uint8_t)code;
    memcpy(ad + m + 2, detail, d);
    return m + 2 + d;
}

static kl_code seal_answer(void *ctx, kl_code code, const char *detail, const uint8_t *payload,
                           size_t len, uint8_t **sealed, size_t *sealed_len, kl_err *err)
{
    sealed_call *sc = ctx;
    uint64_t t0 = mono_ns();
    uint8_t ad[KL_SESSION_AD_MAX];
    size_t ad_len = answer_ad(sc, code, detail, ad);
    size_t cap = len + KL_SESSION_SEAL_OVERHEAD;
    uint8_t *out = malloc(cap);
    if (out == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory sealing an answer");
    kl_code rc = kl_session_seal_answer(&sc->s, sc->counter, payload, len, ad, ad_len, out, cap,
                                        sealed_len, err);
    sc->service->costs.session_ns += mono_ns() - t0;
    if (rc != KL_OK) {
        free(out);
        return rc;
    }
    *sealed = out;
    return KL_OK;
}

static void release_sealed(void *ctx)
{
    sealed_call *sc = ctx;
    sodium_memzero(sc, sizeof *sc);
    free(sc);
}

/* True when the principal the session was made for still has the same tenant and key. */
static kl_code session_current(kl_service *s, const kl_session_entry *e, bool *current,
                               kl_err *err)
{
    const Keyload__V1__CatalogPrincipal *p = NULL;
    bool found = false;
    kl_code rc = kl_node_find_principal_cached(s->node, e->s.principal_id, &p, &found, err);
    if (rc != KL_OK)
        return rc;
    *current = found && strcmp(p->tenant, e->tenant) == 0 &&
               p->key_id.len == KL_KEY_ID_LEN &&
               memcmp(p->key_id.data, e->key_id, KL_KEY_ID_LEN) == 0 &&
               p->public_key.len == KL_SESSION_SIGN_PUBLIC_LEN &&
               memcmp(p->public_key.data, e->public_key, KL_SESSION_SIGN_PUBLIC_LEN) == 0;
    return KL_OK;
}

/* Opens a sealed request (see the top of this file). True when the call may run: it has
 * no session, or its session opened it (the call then carries the plaintext and seals its
 * answer). False when the call has been answered. */
static bool open_session(kl_service *s, kl_rpc_call *call)
{
    size_t sid_len, sealed_len, payload_len;
    const uint8_t *sid = kl_rpc_call_session_id(call, &sid_len);
    const uint8_t *sealed = kl_rpc_call_sealed(call, &sealed_len);
    kl_rpc_call_payload(call, &payload_len);
    uint64_t counter = kl_rpc_call_counter(call);
    const char *method = kl_rpc_call_method(call);
    if (sid_len == 0) {
        if (sealed_len == 0 && counter == 0)
            return true; /* no session: the request acts as the local principal */
        reply_fail(call, KL_INVALID_ARGUMENT, "session_id",
                   "an Envelope with sealed or counter needs its session_id");
        return false;
    }
    if (sid_len != KL_SESSION_ID_LEN) {
        reply_fail(call, KL_INVALID_ARGUMENT, "session_id", "session_id must be 16 bytes");
        return false;
    }
    if (payload_len > 0) {
        reply_fail(call, KL_INVALID_ARGUMENT, "payload",
                   "a request under a session carries its payload sealed, never in clear");
        return false;
    }
    if (strlen(method) > METHOD_MAX) { /* our own names are short; the gate found it */
        reply_fail(call, KL_INVALID_ARGUMENT, "method", "method name too long");
        return false;
    }
    kl_err err;
    kl_err_clear(&err);
    if (s->sessions == NULL) {
        reply_fail(call, KL_UNAUTHENTICATED, "session_unknown",
                   "this member knows no such session (it accepts no sessions)");
        return false;
    }
    kl_session_entry *e;
    if (kl_sessions_find(s->sessions, sid, wall_ms(), &e, &err) != KL_OK) {
        kl_rpc_reply_error(call, &err, NULL);
        return false;
    }
    bool current = false;
    if (session_current(s, e, &current, &err) != KL_OK) {
        kl_rpc_reply_error(call, &err, NULL);
        return false;
    }
    if (!current) {
        kl_sessions_drop(s->sessions, sid);
        reply_fail(call, KL_UNAUTHENTICATED, "session_revoked",
                   "the session's principal or its key changed; shake hands again with Hello");
        return false;
    }
    size_t cap = sealed_len > KL_SESSION_SEAL_OVERHEAD ? sealed_len - KL_SESSION_SEAL_OVERHEAD : 1;
    uint8_t *pt = malloc(cap);
    sealed_call *sc = calloc(1, sizeof *sc);
    if (pt == NULL || sc == NULL) {
        free(pt);
        free(sc);
        reply_fail(call, KL_UNAVAILABLE, "memory", "out of memory; retry");
        return false;
    }
    size_t pt_len = 0;
    if (kl_session_open_request(&e->s, counter, sealed, sealed_len, (const uint8_t *)method,
                                strlen(method), pt, cap, &pt_len, &err) != KL_OK) {
        free(pt);
        free(sc);
        kl_rpc_reply_error(call, &err, NULL);
        return false;
    }
    sc->service = s;
    sc->s = e->s;
    sc->counter = counter;
    memcpy(sc->method, method, strlen(method) + 1);
    kl_rpc_call_set_session(call, pt, pt_len, seal_answer, release_sealed, sc);
    return true;
}

const char *kl_service_principal(const kl_rpc_call *call)
{
    const sealed_call *sc = kl_rpc_call_session_ctx(call);
    return sc != NULL ? sc->s.principal_id : KL_LOCAL_PRINCIPAL;
}

bool kl_service_gate(kl_service *s, kl_rpc_call *call)
{
    uint64_t t0 = mono_ns();
    bool run = open_session(s, call);
    if (kl_rpc_call_session_ctx(call) != NULL) {
        s->costs.sealed_requests++;
        s->costs.session_ns += mono_ns() - t0;
    }
    return run;
}

void kl_service_session_status(kl_service *s, Keyload__V1__MemberSessionStatus *st)
{
    st->hello_unknown_principal = s->hello_refusals.unknown_principal;
    st->hello_catalog_behind = s->hello_refusals.catalog_behind;
    st->hello_replayed = s->hello_refusals.replayed;
    st->session_tenant_evictions = s->sessions != NULL ? kl_sessions_tenant_evictions(s->sessions) : 0;
    st->sessions = s->sessions != NULL ? kl_sessions_count(s->sessions) : 0;
    if (s->repl != NULL) {
        kl_peer_counters pc;
        kl_repl_peer_stats(s->repl, &pc);
        st->peer_connections = pc.pipes_open;
        st->peer_refused = pc.refused_cap;
        st->peer_config_mismatch = pc.config_mismatch;
        st->peer_idle_closed = pc.idle_closed;
    }
    if (s->client_rpc != NULL) {
        kl_rpc_conn_stats cs;
        kl_rpc_server_conn_stats(s->client_rpc, &cs);
        st->client_connections = cs.open;
        st->client_refused = cs.refused;
        st->client_idle_closed = cs.idle_closed;
    }
}
