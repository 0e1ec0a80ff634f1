/* internal: what the SDK's own files share; not part of the public API (client/keyload.h).
 * Every symbol here is prefixed kl_sdk_ so it cannot collide with daemon or common code
 * linked into the same unit-test binary. */
#ifndef KL_SDK_INTERNAL_H
#define KL_SDK_INTERNAL_H

#include "client/keyload.h"
#include "common/cluster.h"
#include "common/guid.h"
#include "common/rpc.h"

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

/* ---- sealed.c: requests under a session (ARCHITECTURE.md "Sessions and RPC"). */
typedef struct kl_sdk_principal kl_sdk_principal;

/* Reads the principal's 64-byte Ed25519 secret key from key_path (mode 0600, common/keys.h)
 * and makes one empty session slot per member of cluster. Every member must carry its
 * "public_key" in the cluster file (INVALID_ARGUMENT "public_key" naming the first that
 * does not). */
kl_code kl_sdk_principal_new(const char *principal_id, const char *key_path,
                             const kl_cluster *cluster, kl_sdk_principal **out, kl_err *err);
/* Wipes the key and every session. NULL is accepted. */
void kl_sdk_principal_free(kl_sdk_principal *pr);

/* kl_rpc_invoke under the session with member slot mi of partition index pi (p is that
 * partition), shaking hands first when the slot has no live session and again (at most
 * twice) when the member answers session_unknown / session_expired / session_revoked or
 * replayed_counter, all within timeout_ms. Same results as kl_rpc_invoke; *ans is the
 * opened answer. Thread-safe. */
kl_code kl_sdk_sealed_invoke(kl_sdk_principal *pr, const kl_partition *p, int pi, int mi,
                             kl_rpc_client *conn, const char *method, const uint8_t *req,
                             size_t req_len, int timeout_ms, uint8_t **ans, size_t *ans_len,
                             char *leader, size_t leader_cap, kl_err *err);

#endif
