/* authz: the one authorization evaluator (ARCHITECTURE.md "Engine") and the rules for changing what a
 * principal may do. Pure code: no I/O, no store access; callers pass the principal's
 * stored catalog record (Keyload__V1__CatalogPrincipal), never what a request claims.
 *
 * Queue patterns (Grant.queue_pattern): an exact queue name ("orders"), or a prefix of
 * identifier bytes followed by ONE trailing '*' ("orders.*", "orders*", "*"). '*' matches
 * any suffix, the empty one included. So "orders.*" matches "orders.eu" and "orders." but
 * not "orders"; "orders" matches only "orders" (not "orders2"). No other wildcard, no '*'
 * anywhere else, 1..KL_NAME_LEN_MAX bytes.
 *
 * Field and header lists of a grant: exact keys (identifier rule of common/names.h) or the
 * single entry "*" (every key). An EMPTY list allows NO key: a grant with no fields lets
 * the principal publish (or read) only messages that carry no field at all. When several
 * of a principal's grants for the request's permission match the queue, each key used
 * must be allowed by at least one of them (each key is its own permission).
 *
 * Errors: PERMISSION_DENIED with detail "tenant", "grant:<Permission>",
 * "field_grant:<Permission>" or "header_grant:<Permission>" (Permission as in ARCHITECTURE.md "Engine":
 * QueuePublish, QueueConsume, QueueAck, QueueInspect, Query) and a message naming the
 * permission, the queue (the pattern that would have to match it) and the key names
 * refused. Field and header VALUES and message bodies never appear; a key outside the
 * identifier rule is named by its position only. Thread-safety: every function is
 * reentrant; none keeps state. */
#ifndef KL_AUTHZ_H
#define KL_AUTHZ_H

#include "common/limits.h"
#include "common/status.h"
#include "keyload/v1/catalog.pb-c.h"

#include <stdbool.h>
#include <stddef.h>


/* Who asks: the stored record (borrowed) and, for the transfer paths, admin_off, which
 * evaluates the request as if both administrator flags were false (ARCHITECTURE.md "Engine": data,
 * field and header checks of transfers run with every administrator flag forced off). */
typedef struct kl_authz_subject {
    const Keyload__V1__CatalogPrincipal *principal;
    bool admin_off;
} kl_authz_subject;

/* What is asked, all borrowed. The keys checked are field_keys/header_keys plus, when
 * message is set, its fields' and headers' keys (publish: what it writes; consume and
 * inspect: what the caller will hand back). NULL arrays with count 0 are fine. */
typedef struct kl_authz_request {
    const char *tenant;
    const char *database;
    Keyload__V1__Permission permission;
    const char *queue;
    const char *const *field_keys;
    size_t n_field_keys;
    const char *const *header_keys;
    size_t n_header_keys;
    const Keyload__V1__EnqueueMessage *message;
} kl_authz_request;

/* Queue methods and the permission each needs. Methods absent here (database and queue
 * creation or deletion, principals, transfers) need an administrator role. */
typedef enum kl_authz_method {
    KL_AUTHZ_ENQUEUE,  /* Batch Enqueue   -> QueuePublish */
    KL_AUTHZ_RECEIVE,  /* Batch Receive   -> QueueConsume */
    KL_AUTHZ_ACK,      /* Batch Ack       -> QueueAck */
    KL_AUTHZ_RELEASE,  /* Batch Release   -> QueueAck */
    KL_AUTHZ_STATS,    /* QueueStats      -> QueueInspect */
    KL_AUTHZ_QUERY,    /* Query (Q1)      -> Query */
} kl_authz_method;

/* PERMISSION_UNSPECIFIED for a value outside kl_authz_method. */
Keyload__V1__Permission kl_authz_method_permission(kl_authz_method m);

/* "QueuePublish", "QueueConsume", "QueueAck", "QueueInspect", "Query"; "unknown" else. */
const char *kl_authz_permission_name(Keyload__V1__Permission p);
/* Parses those names; PERMISSION_UNSPECIFIED when unknown. */
Keyload__V1__Permission kl_authz_permission_parse(const char *name);

/* KL_OK or INVALID_ARGUMENT (detail = what) when pattern breaks the syntax above. */
kl_code kl_authz_pattern_check(const char *what, const char *pattern, kl_err *err);
/* True when the valid pattern matches the queue name. False for an invalid pattern. */
bool kl_authz_pattern_matches(const char *pattern, const char *queue);
/* True when every queue name `inner` matches is matched by `outer` too (both valid):
 * "orders.eu" and "orders.eu.*" are covered by "orders.*", which is covered by "*"; "orders*"
 * is not covered by "orders.*". False when either is invalid. */
bool kl_authz_pattern_covers(const char *outer, const char *inner);
/* True when `held` allows everything `wanted` does: same database and permission, the
 * pattern covered, each list a subset ("*" covers every list). Both must be valid. */
bool kl_authz_grant_covers(const Keyload__V1__Grant *held, const Keyload__V1__Grant *wanted);

/* Shape of a grant: database an identifier; a known permission; a valid pattern; each list
 * at most KL_AUTHZ_LIST_MAX entries, each "*" (then alone) or an identifier, no duplicates;
 * no lists on a QueueAck grant. INVALID_ARGUMENT with detail "grant.database",
 * "grant.permission", "grant.queue_pattern", "grant.fields" or "grant.headers". */
kl_code kl_authz_validate_grant(const Keyload__V1__Grant *grant, kl_err *err);

/* The evaluator. KL_OK when allowed. Order: the request must be well formed (tenant,
 * database, queue names, a known permission: INVALID_ARGUMENT otherwise); no principal is
 * UNAUTHENTICATED ("principal"); the tenants must be equal (PERMISSION_DENIED "tenant");
 * then, unless who->admin_off, a cluster administrator may do everything in its tenant and
 * a database administrator everything in its database; otherwise some grant for
 * (request database, permission) must have a pattern matching the queue ("grant:P"), and
 * every field key ("field_grant:P") and header key ("header_grant:P") must be allowed by
 * one of those grants. */
kl_code kl_authz_check(const kl_authz_subject *who, const kl_authz_request *what, kl_err *err);

/* Whether the subject is a persisted administrator of tenant/database (a cluster admin of
 * the tenant or that database's admin), read from the stored record; admin_off makes it
 * false. PERMISSION_DENIED detail "tenant" or "role:administrator" otherwise. Transfer
 * mutations and inspection call this first, then kl_authz_check with admin_off set. */
kl_code kl_authz_require_admin(const kl_authz_subject *who, const char *tenant, const char *database,
                               kl_err *err);

/* Whether `granter` may grant (or revoke) `grant` on `target` (the target's stored record).
 * Only administrators change principals: a non-administrator may grant nothing, not even
 * what it holds itself ("role:administrator"). Both must be of the same tenant ("tenant").
 * A cluster administrator may grant anything inside its tenant. A database administrator
 * may grant only grants of its own database ("role:database_admin"), and never touch a
 * cluster administrator's record or another database's administrator ("role:..."). The
 * grant itself is validated first (kl_authz_validate_grant). admin_off denies all. */
kl_code kl_authz_can_grant(const kl_authz_subject *granter, const Keyload__V1__CatalogPrincipal *target,
                           const Keyload__V1__Grant *grant, kl_err *err);

/* Roles as CatalogPrincipal holds them: at most one of the two flags; database non-empty
 * exactly when database_admin. */
typedef struct kl_authz_roles {
    bool cluster_admin;
    bool database_admin;
    const char *database;
} kl_authz_roles;

/* Whether `granter` may change `target`'s roles to `to` (target is the stored record, or a
 * record with only tenant set for a principal being created). Same tenant; only a cluster
 * administrator makes, keeps or removes a cluster administrator ("role:cluster_admin"): a
 * database administrator can never create one; a database administrator may make or unmake
 * administrators of its own database only ("role:database_admin"); non-administrators may
 * change nothing ("role:administrator"). INVALID_ARGUMENT ("roles") for a bad `to`. */
kl_code kl_authz_can_set_roles(const kl_authz_subject *granter, const Keyload__V1__CatalogPrincipal *target,
                               const kl_authz_roles *to, kl_err *err);

/* Record edits. p must own its memory as protobuf-c's unpack with the default allocator
 * leaves it (every string, array and sub-message malloc'd separately), so that
 * keyload__v1__catalog_principal__free_unpacked(p, NULL) still frees everything; a record
 * built with KEYLOAD__V1__CATALOG_PRINCIPAL__INIT and no grants qualifies too. Each call
 * increments p->policy_epoch exactly when it changes the roles or grants, and sets *changed
 * (may be NULL) accordingly. On error p is unchanged. None checks who asks: call
 * kl_authz_can_grant / kl_authz_can_set_roles first. FAILED_PRECONDITION ("policy_epoch")
 * if the epoch cannot grow any more. */

/* Adds a copy of grant (validated first; lists stored sorted), or, when p already holds a
 * grant for the same (database, permission, queue_pattern), replaces that grant's field and
 * header lists. Re-granting identical lists changes nothing. */
kl_code kl_authz_apply_grant(Keyload__V1__CatalogPrincipal *p, const Keyload__V1__Grant *grant,
                             bool *changed, kl_err *err);
/* Removes the grant for (database, permission, queue_pattern); an absent one is a no-op
 * (*changed false, epoch unchanged). INVALID_ARGUMENT for a malformed triple. */
kl_code kl_authz_revoke(Keyload__V1__CatalogPrincipal *p, const char *database,
                        Keyload__V1__Permission permission, const char *queue_pattern, bool *changed,
                        kl_err *err);
/* Sets the roles (validated as above); identical roles change nothing. */
kl_code kl_authz_set_roles(Keyload__V1__CatalogPrincipal *p, const kl_authz_roles *to, bool *changed,
                           kl_err *err);

#endif
