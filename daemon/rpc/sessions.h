/* sessions: the bounded in-memory table of one member's established sessions (ARCHITECTURE.md
 * "Sessions and RPC"). Pure: no clock (now_ms is a parameter), no I/O, no global state; the daemon
 * keeps one table on its loop thread (not thread-safe).
 *
 * Bounds and refusals (every bound is fixed when the table is made):
 *   - at most `max` sessions (the daemon: KL_SESSIONS_MAX) and at most `per_principal`
 *     sessions of one principal (KL_SESSIONS_PER_PRINCIPAL).
 *   - A put that would pass a bound never fails: it first drops every expired session, then
 *     EVICTS the session closest to expiry (the principal's own one when the per-principal
 *     bound is reached, else the table's). Eviction rather than refusal because a refusal
 *     could lock a client out for a whole session lifetime (a client that restarted 64
 *     times, or 64 principals filling the table), while an evicted client only gets
 *     UNAUTHENTICATED "session_unknown" on its next request and shakes hands again. The
 *     per-principal bound keeps one principal from evicting more than its own sessions:
 *     filling the table takes max / per_principal principals.
 *   - at most `per_tenant` sessions of one tenant (kl_sessions_set_per_tenant): a tenant at
 *     it evicts its own; a full table evicts from the tenant holding the most, so one
 *     tenant's Hellos never push out a smaller tenant's sessions.
 *   - Expired sessions are dropped lazily: by a lookup that finds one (UNAUTHENTICATED
 *     "session_expired") and by every put.
 * Lookups by session id use an open-addressed hash index (ids are random, so their first
 * bytes are the hash): O(1). A put scans the table once (O(max)) to count the principal's
 * sessions and find what to evict; a put follows a Hello, whose signatures cost far more.
 * Removed sessions are wiped (kl_session_wipe). */
#ifndef KL_SESSIONS_H
#define KL_SESSIONS_H

#include "common/cluster.h"
#include "common/keys.h"
#include "common/limits.h"
#include "common/session.h"
#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Hellos remembered per window (two windows are kept), and the window: twice the skew a
 * Hello's time may have (KL_SESSION_DEFAULT_SKEW_MS), so a Hello is remembered as long as
 * it could be accepted. */
#define KL_HELLO_SEEN_MAX 16384
#define KL_HELLO_SEEN_WINDOW_MS (2 * KL_SESSION_DEFAULT_SKEW_MS)

/* One established session and what it was authenticated against. */
typedef struct kl_session_entry {
    kl_session s;                                  /* the daemon's end (role KL_SESSION_DAEMON) */
    char tenant[KL_NAME_MAX];                      /* the principal's tenant at Hello */
    uint8_t key_id[KL_KEY_ID_LEN];                 /* the principal's key id at Hello */
    uint8_t public_key[KL_SESSION_SIGN_PUBLIC_LEN];/* and its key: a change ends the session */
} kl_session_entry;

typedef struct kl_sessions kl_sessions;

/* What a put removed to stay within its bounds. */
typedef struct kl_sessions_evicted {
    size_t expired;            /* expired sessions dropped */
    size_t principal_evicted;  /* 0 or 1: the principal's own session closest to expiry */
    size_t tenant_evicted;     /* 0 or 1: the tenant's own session closest to expiry */
    size_t table_evicted;      /* 0 or 1: the largest tenant's session closest to expiry */
} kl_sessions_evicted;

/* A table of at most max (1..KL_SESSIONS_MAX) sessions, at most per_principal
 * (1..max) of one principal. INVALID_ARGUMENT names a bound out of range. */
kl_code kl_sessions_new(size_t max, size_t per_principal, kl_sessions **out, kl_err *err);
/* Wipes every session and frees. NULL is accepted. */
void kl_sessions_free(kl_sessions *t);

/* Adds a copy of e (the caller wipes its own copy), evicting as described above; *ev (may
 * be NULL) says what went. INVALID_ARGUMENT when e is not a daemon session, has an empty
 * principal, or expires at or before now_ms; CONFLICT "session_id" when the id is in the
 * table already (nothing changes then). */
kl_code kl_sessions_put(kl_sessions *t, const kl_session_entry *e, int64_t now_ms,
                        kl_sessions_evicted *ev, kl_err *err);

/* The session with this id: KL_OK with *out pointing into the table (valid until the next
 * put or drop). UNAUTHENTICATED "session_unknown" when absent; "session_expired" when it
 * has expired at now_ms (it is dropped). */
kl_code kl_sessions_find(kl_sessions *t, const uint8_t id[KL_SESSION_ID_LEN], int64_t now_ms,
                         kl_session_entry **out, kl_err *err);

/* Removes (and wipes) the session with this id; false when absent. */
bool kl_sessions_drop(kl_sessions *t, const uint8_t id[KL_SESSION_ID_LEN]);

size_t kl_sessions_count(const kl_sessions *t);
/* Sessions of principal_id in the table, expired ones included until dropped. */
size_t kl_sessions_count_principal(const kl_sessions *t, const char *principal_id);
size_t kl_sessions_count_tenant(const kl_sessions *t, const char *tenant);

/* The per-tenant bound (1..max; max until set): a tenant at it loses its own session closest
 * to expiry, never another tenant's. INVALID_ARGUMENT "sessions_per_tenant" outside. */
kl_code kl_sessions_set_per_tenant(kl_sessions *t, size_t per_tenant, kl_err *err);
/* Puts that evicted a session because its tenant was at its bound. */
size_t kl_sessions_tenant_evictions(const kl_sessions *t);

/* Replay refusal of Hellos: call with the signature of a Hello that verified, before its
 * session is stored. KL_OK the first time (it is remembered for at least
 * KL_HELLO_SEEN_WINDOW_MS of now_ms, a monotonic clock); UNAUTHENTICATED "hello_replayed"
 * for a repeat; UNAVAILABLE "hello_rate" when KL_HELLO_SEEN_MAX Hellos arrived this window
 * (refusing is the only safe answer once nothing more can be remembered). */
kl_code kl_sessions_hello_seen(kl_sessions *t, const uint8_t *signature, size_t len, int64_t now_ms,
                               kl_err *err);

#endif
