/* internal: what the SDK's own files share; not part of the public API (client/keyload.h).
 * Every symbol here is prefixed kl_sdk_ so it cannot collide with daemon or common code
 * linked into the same unit-test binary. */
#ifndef KL_SDK_INTERNAL_H
#define KL_SDK_INTERNAL_H

#include "client/keyload.h"
#include "common/cluster.h"
#include "common/guid.h"
#include "common/rpc.h"
#include "common/session.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kl_message {
    /* Built by hand with malloc'd members only (never pointing at static empty strings
     * we would not own), so keyload__v1__enqueue_message__free_unpacked frees it. */
    Keyload__V1__EnqueueMessage *pb;
};

struct kl_batch {
    uint8_t command_id[KL_GUID_LEN];
    char command_id_text[KL_GUID_TEXT_LEN + 1];
    /* When this command id was first used (Unix ms): set when the batch is made, kept by
     * every send and retry of it (kl_batch_set_first_sent_unix_ms carries it further). */
    int64_t first_sent_ms;
    size_t n, cap;
    /* Each mutation is owned (unpacked or malloc'd throughout) and freed with
     * keyload__v1__mutation__free_unpacked. Queue refs leave tenant/database empty: the
     * client fills them when encoding. */
    Keyload__V1__Mutation **muts;
};
/* The longest Receive.wait_ms of the batch (0: none waits). */
uint32_t kl_sdk_batch_wait_ms(const kl_batch *b);


/* Name rules: 1..KL_SDK_NAME_MAX bytes; identifiers hold only letters, digits and . _ - :
 * (the daemon's rule, daemon/engine/validate.c). `what` names the field in the error. */
typedef enum kl_sdk_name_rule {
    KL_SDK_NAME_QUEUE,    /* identifier: non-empty */
    KL_SDK_NAME_LANE,     /* identifier; may be empty ("default") */
    KL_SDK_NAME_KEY,      /* header/field key: non-empty UTF-8, any characters */
    KL_SDK_NAME_DB_PART,  /* tenant or database: identifier, non-empty */
} kl_sdk_name_rule;

kl_code kl_sdk_check_name(const char *what, const char *name, kl_sdk_name_rule rule,
                          kl_err *err);
/* UTF-8 check for free text (header values, string fields); error names `what`. */
kl_code kl_sdk_check_text(const char *what, const char *text, kl_err *err);

/* Splits and validates "TENANT/DB" into the two buffers (KL_SDK_NAME_MAX + 1 bytes). */
kl_code kl_sdk_split_database(const char *db, char *tenant, char *database, kl_err *err);

/* strdup that reports failure as KL_INTERNAL. */
kl_code kl_sdk_strdup(const char *s, char **out, kl_err *err);
kl_code kl_sdk_oom(kl_err *err);

/* The queue whose partition a mutation goes to (NULL when it names none: database
 * creation, principals, a database-wide transfer pause). For transfers: the source queue
 * (Create, Complete, AdvanceAttempt, AdvanceRepair, a lane's pause) or the destination
 * queue (Accept). */
const char *kl_sdk_mutation_queue(const Keyload__V1__Mutation *m);
/* True for the mutations that change the catalog on partition 0 (each alone in its batch):
 * database and queue creation, bootstrap, principals, database limits, a database-wide
 * transfer pause. */
bool kl_sdk_mutation_is_catalog(const Keyload__V1__Mutation *m);

/* Appends a deep, fully owned copy of tmp (built from borrowed parts) to b; on error b is
 * unchanged. */
kl_code kl_sdk_batch_add(kl_batch *b, const Keyload__V1__Mutation *tmp, kl_err *err);

/* kl_database_limits as the wire's DatabaseLimits, borrowing nothing: lim and its nullable
 * accept attempts (*n, pointed to by lim when present) are filled in place. INVALID_ARGUMENT
 * for a present MaxQueueTransferAcceptAttempts of 0 (detail
 * "max_queue_transfer_accept_attempts"). limits may be NULL (every limit the cluster's). */
kl_code kl_sdk_limits_to_pb(const kl_database_limits *limits, Keyload__V1__DatabaseLimits *lim,
                            Keyload__V1__NullableU64 *n, kl_err *err);

/* ---- client.c: a read on partition 0's leader (LocateQueue, ShowPrincipal): NOT_LEADER
 * redirects and retries as for a batch; a lost answer is DEADLINE_EXCEEDED "no_answer".
 * On KL_OK *ans (malloc'd) holds the answer payload. */
kl_code kl_sdk_catalog_read(kl_client *c, const char *method, const uint8_t *req, size_t req_len,
                            uint8_t **ans, size_t *ans_len, kl_err *err);

/* ---- client.c: a fresh read on one partition's leader, with the same redirects, sessions
 * and retries: on the partition holding `queue` (located like a batch; a stale cached
 * placement answered NOT_FOUND "wrong_partition" is dropped and located again once) when
 * partition < 0, else on that partition. A lost answer is DEADLINE_EXCEEDED "no_answer".
 * On KL_OK *ans (malloc'd) holds the answer payload. */
kl_code kl_sdk_partition_read(kl_client *c, const char *queue, int partition,
                              const char *method, const uint8_t *req, size_t req_len,
                              uint8_t **ans, size_t *ans_len, kl_err *err);

/* ---- client.c: a typed read (kl_sdk_partition_read's routing) whose answer dec decodes
 * into out: waited for when as is NULL; else started as a kl_call (*as->call; done runs
 * once, on an SDK thread, after *out is filled) and KL_OK means started. req is copied. */
typedef kl_code (*kl_sdk_decode_fn)(const uint8_t *ans, size_t len, void *out, kl_err *err);
typedef struct kl_sdk_async {
    kl_call_done_fn done;
    void *arg;
    kl_call **call;
} kl_sdk_async;
kl_code kl_sdk_read(kl_client *c, const char *queue, int partition, const char *method,
                    const uint8_t *req, size_t req_len, kl_sdk_decode_fn dec, void *out,
                    const kl_sdk_async *as, kl_err *err);

/* ---- sealed.c: requests under a session (ARCHITECTURE.md "Sessions and RPC"). */
typedef struct kl_sdk_principal kl_sdk_principal;

/* Reads the principal's 64-byte Ed25519 secret key from key_path (mode 0600, common/keys.h)
 * and makes one empty session slot per member table slot of each partition of cluster
 * (client/sdk/member_table.h: a slot index names one member identity for good). Every member must carry its
 * "public_key" in the cluster file (INVALID_ARGUMENT "public_key" naming the first that
 * does not). */
kl_code kl_sdk_principal_new(const char *principal_id, const char *key_path,
                             const kl_cluster *cluster, kl_sdk_principal **out, kl_err *err);
/* Wipes the key and every session. NULL is accepted. */
void kl_sdk_principal_free(kl_sdk_principal *pr);

/* One request under the session with member slot mi (m, from the member table) of
 * partition index pi (partition id pid), as a machine driven by its caller's rpc op (client.c's call): a Hello first
 * when the slot has no live session (one Hello per slot at a time: other requests for that
 * member wait for it and are resumed through wake(arg)), the request sealed under a fresh
 * counter, and again (at most three sends in all) when the member answers session_unknown
 * / session_expired / session_revoked or replayed_counter, all within timeout_ms. The
 * result (att->rc, att->err, att->ans, att->leader) is what kl_rpc_invoke would return
 * for a clear request; att->ans is the opened answer. kl_sdk_sealed_begin and
 * kl_sdk_sealed_answered (called when att->op's exchange is done) return true when the
 * attempt is over, false when it started an exchange on att->op or waits for a Hello. */
typedef struct kl_sdk_sealed_att kl_sdk_sealed_att;
struct kl_sdk_member;
struct kl_sdk_sealed_att {
    kl_sdk_principal *pr;
    const struct kl_sdk_member *m; /* an immutable member table slot */
    int pid, pi, mi;
    kl_rpc_client *conn;
    kl_rpc_op *op;
    const char *method;
    const uint8_t *req;
    size_t req_len;
    int64_t deadline, hello_at; /* CLOCK_MONOTONIC ms */
    int tries;
    bool in_hello, hc_live;
    kl_session_client hc;       /* the Hello in flight */
    kl_session cs;              /* the session the request was sealed under */
    uint64_t counter, generation;
    uint8_t *sealed;
    size_t sealed_cap, cap, sealed_len;
    char who[32];
    kl_sdk_sealed_att *next_waiter;
    void (*wake)(void *arg);    /* a Hello this attempt waited for has ended */
    void *arg;
    kl_code rc;
    kl_err err;
    uint8_t *ans;
    size_t ans_len;
    char leader[KL_URL_MAX];
};
kl_code kl_sdk_sealed_att_init(kl_sdk_sealed_att *att, kl_sdk_principal *pr, int pid, int pi, int mi,
                               const struct kl_sdk_member *m, kl_rpc_client *conn, kl_rpc_op *op,
                               const char *method, const uint8_t *req, size_t req_len,
                               int timeout_ms, kl_err *err);
bool kl_sdk_sealed_begin(kl_sdk_sealed_att *att);
bool kl_sdk_sealed_answered(kl_sdk_sealed_att *att);
/* Wipes what the attempt holds (the sealed copy, the session copy, a Hello's keys). */
void kl_sdk_sealed_att_clear(kl_sdk_sealed_att *att);

#endif
