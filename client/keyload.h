/* keyload.h: libkeyload, the C client SDK for KeyLoad (ARCHITECTURE.md "Processes", "Sessions and RPC").
 *
 * Link with lib/libkeyload.a plus -lnng -luv -lsodium -lprotobuf-c -ljansson -lpthread
 * (common/rpc.c, which the client calls go through, uses libuv locks), e.g.
 *   cc -std=c11 -I. -Ibuild/gen app.c lib/libkeyload.a -lnng -luv -lsodium -lprotobuf-c \
 *      -ljansson -lpthread
 * Include paths: the repository root and build/gen (generated protobuf-c headers).
 *
 * Model. A kl_client talks to a cluster described by a cluster file. A kl_batch is a list
 * of typed mutations under one command id (a GUID); it is sent with kl_client_batch and
 * commits all or nothing on one partition. The partition stores the batch's receipt;
 * sending the same command id with the same content again returns byte-identical
 * receipt bytes, the same command id with other content is CONFLICT. So after any
 * uncertain outcome (KL_UNKNOWN_WRITE_OUTCOME) the caller resends the SAME batch (or a
 * batch rebuilt with the same command id and content) to learn what happened.
 *
 * Errors. Every function that can fail returns a kl_code and fills the caller's kl_err
 * (common/status.h; err may be NULL): code, a message naming the field or limit at fault,
 * and a machine-readable detail. Messages never contain tokens or message bodies.
 *
 * Ownership. An object returned through an out parameter belongs to the caller and is
 * freed with the matching *_free function (NULL is accepted by every *_free). Borrowed
 * inputs (strings, byte buffers) are copied before the call returns unless noted.
 *
 * Threads. A kl_client is thread-safe: any number of threads may call its kl_client_*
 * functions at once. A kl_batch and a kl_message are not: one thread at a time may modify
 * one; a batch that nobody modifies may be sent from several threads at once. Every other
 * function is reentrant. Answers and receipts are plain data: read them from any number of
 * threads, free them from one.
 *
 * Deadlines. There is no per-call deadline: timeout_ms, given once to kl_client_open, bounds
 * each request a kl_client_* call makes to a partition (connects, handshakes, redirects and
 * resends to other members included). Most calls make one such request; a batch whose
 * queue's placement is not cached yet first asks partition 0 (LocateQueue, one more
 * timeout_ms), and a queue deletion makes two (its partition, then partition 0). For
 * another bound open another client (clients are cheap until they dial). A batch whose
 * Receive waits for messages (kl_batch_receive_wait) adds its wait to that bound. When the time is
 * up: a write that may have reached a member is KL_UNKNOWN_WRITE_OUTCOME, a read
 * KL_DEADLINE_EXCEEDED (detail "no_answer"), anything that reached no member
 * KL_UNAVAILABLE (not executed). No call is cancelled from outside.
 *
 * Routing: catalog changes (databases, queue definitions, principals, limits) and catalog
 * reads (LocateQueue, ShowPrincipal) go to partition 0; queue data goes to the partition
 * holding the queue (kl_batch_kind). Members are tried in order; NOT_LEADER redirects are
 * followed up to 3 times, always with the same request bytes (same command id). */
#ifndef KL_KEYLOAD_H
#define KL_KEYLOAD_H

#include "common/limits.h"
#include "common/status.h"
#include "keyload/v1/backup.pb-c.h"
#include "keyload/v1/catalog.pb-c.h"
#include "keyload/v1/claims.pb-c.h"
#include "keyload/v1/membership.pb-c.h"
#include "keyload/v1/query.pb-c.h"
#include "keyload/v1/queue.pb-c.h"
#include "keyload/v1/transfer.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KL_DEFAULT_TIMEOUT_MS 5000
#define KL_DEFAULT_DATABASE "default/default"
/* KL_SDK_NAME_MAX (longest name), KL_MAX_REDIRECTS, KL_KEY_LIST_MAX, KL_RECEIVE_WAIT_MS_MAX: common/limits.h. */

/* ---------------------------------------------------------------- client */

typedef struct kl_client kl_client;

/* Opens a client for the cluster file at cluster_path. database is "TENANT/DB" (NULL:
 * "default/default"); it fills the tenant and database of every request this client
 * sends. timeout_ms bounds each request to a partition, redirects and connects included
 * (<= 0: KL_DEFAULT_TIMEOUT_MS; see "Deadlines" above). No connection is made here: members are dialed
 * on first use. On success *out belongs to the caller (kl_client_close).
 * Thread-safety: reentrant. */
kl_code kl_client_open(const char *cluster_path, const char *database, int timeout_ms,
                       kl_client **out, kl_err *err);

/* kl_client_open for a principal (ARCHITECTURE.md "Sessions and RPC"): key_path is the principal's
 * 64-byte Ed25519 secret key (a file of mode 0600 or stricter, as `keyload admin bootstrap
 * --key-out` writes it). Every call (Batch, QueueStats, LocateQueue) then goes sealed:
 * each member is greeted with keyload.v1.Hello on first use and its answer verified with
 * the member's "public_key" from the cluster file (every member must carry one: use the
 * var/<cluster>/cluster.json that deploy/keyload-cluster writes); requests and answers are
 * sealed under that member's session. When a member no longer knows the session (restart,
 * leader change, ttl, changed principal) the SDK shakes hands again by itself and resends
 * the same request (same command id) within the call's timeout. A Hello the member refuses
 * is UNAUTHENTICATED with its detail (bad_signature: the key is not the principal's;
 * principal: no such principal). The key never leaves the client and is wiped at
 * kl_client_close. Thread-safety: as kl_client_open (sessions are per member and locked). */
kl_code kl_client_open_principal(const char *cluster_path, const char *database,
                                 int timeout_ms, const char *principal_id, const char *key_path,
                                 kl_client **out, kl_err *err);

/* Closes every connection and frees the client and everything it owns. No call may be
 * running on it (the one call that is not thread-safe). NULL is accepted. */
void kl_client_close(kl_client *c);

/* The client's "TENANT/DB" text, valid until kl_client_close. Thread-safe. */
const char *kl_client_database(const kl_client *c);

/* ---------------------------------------------------------------- messages */

/* A message being built for kl_batch_enqueue: body, headers (string map), fields (typed
 * map). Keys are unique within headers and within fields.
 * Thread-safety (every kl_message_* function): one thread at a time per message; distinct
 * messages are independent. */
typedef struct kl_message kl_message;

/* New message with a copy of body (len may be 0; body may then be NULL).
 * *out belongs to the caller (kl_message_free, which also accepts NULL). */
kl_code kl_message_new(const void *body, size_t len, kl_message **out, kl_err *err);
/* Frees m and everything it holds; views from kl_message_view end. NULL is accepted. */
void kl_message_free(kl_message *m);

/* Adds header key=value (both copied). key: 1..128 bytes of UTF-8, not already present;
 * value: UTF-8. On error the message is unchanged. */
kl_code kl_message_add_header(kl_message *m, const char *key, const char *value, kl_err *err);

/* Typed fields; key as for headers, unique among fields. Values are copied. Strings must be
 * UTF-8; doubles must be finite (JSON cannot carry NaN or infinities). On error the
 * message is unchanged. */
kl_code kl_message_add_field_string(kl_message *m, const char *key, const char *value,
                                    kl_err *err);
kl_code kl_message_add_field_int(kl_message *m, const char *key, int64_t value, kl_err *err);
kl_code kl_message_add_field_double(kl_message *m, const char *key, double value, kl_err *err);
kl_code kl_message_add_field_bool(kl_message *m, const char *key, bool value, kl_err *err);
kl_code kl_message_add_field_bytes(kl_message *m, const char *key, const void *value,
                                   size_t len, kl_err *err);

/* Parses the CLI forms and adds the result.
 *   header: "k=v"  (split at the first '=')
 *   field:  "k=v" (string), "k:string=v", "k:int=5", "k:double=1.5", "k:bool=true|false",
 *           "k:bytes=BASE64". The text before the first '=' is the key; when it holds a
 *           ':', what follows the last ':' must be one of those type names. */
kl_code kl_message_parse_header(kl_message *m, const char *spec, kl_err *err);
kl_code kl_message_parse_field(kl_message *m, const char *spec, kl_err *err);

/* Absolute expiry (unix ms, 0 = never) and visibility delay (ms, 0 = none); >= 0. */
kl_code kl_message_set_expiry(kl_message *m, int64_t expires_at_unix_ms, kl_err *err);
kl_code kl_message_set_delay(kl_message *m, int64_t delay_ms, kl_err *err);

/* The message as built (read-only view, owned by m, valid until m changes or is freed). */
const Keyload__V1__EnqueueMessage *kl_message_view(const kl_message *m);

/* ---------------------------------------------------------------- batches */

/* A batch: one command id and its mutations in order.
 * Thread-safety: functions that change a batch (kl_batch_create_queue ... kl_batch_release,
 * kl_batch_free) need it to themselves; functions taking a const kl_batch * (including
 * kl_client_batch) may run on one batch from several threads at once. */
typedef struct kl_batch kl_batch;

/* Options of kl_batch_create_queue; zero-initialize, then set what you need. */
typedef struct kl_queue_options {
    uint64_t max_messages;         /* 0 = daemon default */
    uint64_t max_bytes;            /* 0 = daemon default */
    uint32_t max_deliveries;       /* 0 = unlimited */
    const char *dead_letter_queue; /* NULL or "" = none; must be on the same partition */
    bool pin_partition;            /* false: partition 0 picks one (the DLQ's, if any) */
    int32_t partition;             /* with pin_partition: where the queue lives; >= 0 */
} kl_queue_options;

/* Per-database limits under the seeds' names; 0 = the cluster file's value. They may only
 * tighten the cluster's limits. MaxQueueTransferAcceptAttempts is nullable: absent
 * (has_... false, what zero-initialization gives) is null; when present it must be
 * positive and no larger than the database's MaxScanRecords (the daemon checks the latter). */
typedef struct kl_database_limits {
    uint64_t max_scan_records;     /* MaxScanRecords */
    uint64_t max_batch_bytes;      /* MaxBatchBytes */
    uint64_t max_query_read_bytes; /* MaxQueryReadBytes */
    bool has_max_queue_transfer_accept_attempts;
    uint64_t max_queue_transfer_accept_attempts; /* MaxQueueTransferAcceptAttempts */
} kl_database_limits;

/* New empty batch. command_id is a canonical GUID text (xxxxxxxx-xxxx-xxxx-xxxx-
 * xxxxxxxxxxxx, either case); NULL means a fresh time-ordered (version 7) GUID, as
 * kl_command_id_new makes. Empty, malformed and all-zero GUIDs are INVALID_ARGUMENT
 * (detail "command_id").
 * *out belongs to the caller (kl_batch_free). */
kl_code kl_batch_new(const char *command_id, kl_batch **out, kl_err *err);
/* Frees b and its copies of every input (a receipt it produced stays the caller's). NULL is
 * accepted. */
void kl_batch_free(kl_batch *b);

/* The command id in canonical lower-case text; owned by b, valid until kl_batch_free. */
const char *kl_batch_command_id(const kl_batch *b);
/* The 16 command id bytes; owned by b, valid until kl_batch_free. */
const uint8_t *kl_batch_command_id_bytes(const kl_batch *b);
/* The number of mutations in b. */
size_t kl_batch_count(const kl_batch *b);
/* When b's command id was first used (Unix ms, this machine's clock): set by kl_batch_new
 * and sent with every send and retry of b, so that once the partition has dropped the
 * command's outcome (timers.outcome_retention_ms) a retry is refused FAILED_PRECONDITION
 * "outcome_expired" instead of running again as new. A program that keeps a command id to
 * replay it later (another process, after a crash) keeps this value with it and sets it on
 * the new batch; a batch made without it gets a fresh time and, after the outcome expired,
 * runs as new. Batches holding a transfer mutation never send it: their outcomes never
 * expire. A value below 0 or past the year 9999 (KL_FIRST_SENT_LATEST_MS) is
 * INVALID_ARGUMENT "first_sent_unix_ms". */
int64_t kl_batch_first_sent_unix_ms(const kl_batch *b);
kl_code kl_batch_set_first_sent_unix_ms(kl_batch *b, int64_t unix_ms, kl_err *err);

/* Mutations. queue (and dead_letter_queue): 1..128 bytes of letters, digits and . _ - :
 * (the daemon's rule; it checks again). lane: NULL or "" means "default", else like a
 * queue name. Each call validates, copies its inputs and appends one mutation; on error
 * the batch is unchanged and err names the field. */
kl_code kl_batch_create_queue(kl_batch *b, const char *queue, const kl_queue_options *opts,
                              kl_err *err);
kl_code kl_batch_delete_queue(kl_batch *b, const char *queue, kl_err *err);
/* Copies msg (the caller keeps and may reuse it). */
kl_code kl_batch_enqueue(kl_batch *b, const char *queue, const char *lane,
                         const kl_message *msg, kl_err *err);
/* Leases up to max_messages messages for lease_ms milliseconds; 0 means the daemon's
 * default for either (the daemon also enforces their maximums). */
kl_code kl_batch_receive(kl_batch *b, const char *queue, const char *lane,
                         uint32_t max_messages, uint32_t lease_ms, kl_err *err);
/* kl_batch_receive that waits (long poll): when no message is available, the leader holds
 * the request up to wait_ms (0..KL_RECEIVE_WAIT_MS_MAX) and answers as soon as one is, or
 * with no message when the wait ends. A batch whose Receives lease nothing commits nothing
 * (its receipt's index is 0, no outcome is stored). The call's time grows by the batch's
 * longest wait: each request to the partition may take timeout_ms + wait_ms (and one
 * attempt at a member timeout_ms / 4 + wait_ms), so the wait ends before the call gives up.
 * A member that stops leading or shuts down while holding it answers NOT_LEADER or
 * UNAVAILABLE and the SDK sends the same request on; a member already holding
 * KL_PARK_MAX (48) waiting requests refuses RESOURCE_EXHAUSTED "parked_receives". */
kl_code kl_batch_receive_wait(kl_batch *b, const char *queue, const char *lane, uint32_t max_messages,
                              uint32_t lease_ms, uint32_t wait_ms, kl_err *err);

/* A borrowed byte string (lease tokens). */
typedef struct kl_bytes {
    const uint8_t *data;
    size_t len;
} kl_bytes;

/* Acks / releases the leases (tokens as returned in ReceivedMessage.lease_token; copied).
 * At least one token; none empty. */
kl_code kl_batch_ack(kl_batch *b, const char *queue, const kl_bytes *tokens, size_t n,
                     kl_err *err);
kl_code kl_batch_release(kl_batch *b, const char *queue, const kl_bytes *tokens, size_t n,
                         kl_err *err);

/* Creates database "TENANT/DB" (a catalog change; alone in its batch). limits may be NULL. */
kl_code kl_batch_create_database(kl_batch *b, const char *database,
                                 const kl_database_limits *limits, kl_err *err);

/* The first administrator of "TENANT/DB" (a catalog change; alone in its batch). proof is
 * kl_canon_bootstrap_proof (common/canon.h) over these names and the key, keyed with the
 * cluster secret; admin_public_key is the Ed25519 public key the administrator will use. */
kl_code kl_batch_bootstrap(kl_batch *b, const char *database, const char *admin_id,
                           const uint8_t admin_public_key[32], const uint8_t proof[32], kl_err *err);

/* ---------------------------------------------------------------- principals (batch side)
 *
 * Principal management and database limits are catalog mutations (ARCHITECTURE.md "Engine"): each goes
 * alone in its batch to partition 0's leader. Like queue refs, they name no tenant or
 * database here: kl_batch_encode (and so kl_client_batch) fills in the client's database
 * "TENANT/DB": the principal's tenant is TENANT, a grant's database and a database
 * administrator's database are DB, and the limits are DB's. Who may do what is the
 * daemon's business (PERMISSION_DENIED, detail e.g. "role:administrator",
 * "role:cluster_admin"); these builders check only the shape. */

/* A principal's role: none, administrator of the client's database, or cluster
 * administrator of the client's tenant (only a cluster administrator can make one). */
typedef enum kl_role {
    KL_ROLE_NONE = 0,
    KL_ROLE_DATABASE_ADMIN = 1,
    KL_ROLE_CLUSTER_ADMIN = 2,
} kl_role;

/* "none", "database-admin", "cluster-admin" (the CLI's --role values) and back. parse:
 * INVALID_ARGUMENT (detail "role") for anything else. name: "unknown" for a bad value. */
kl_code kl_role_parse(const char *text, kl_role *out, kl_err *err);
const char *kl_role_name(kl_role role);

/* Permission names as ARCHITECTURE.md "Engine" spells them: "QueuePublish", "QueueConsume", "QueueAck",
 * "QueueInspect", "Query" (exact case). parse: INVALID_ARGUMENT (detail "permission", the
 * message lists the names) for anything else. name: "unknown" for an unknown value. */
kl_code kl_permission_parse(const char *text, Keyload__V1__Permission *out, kl_err *err);
const char *kl_permission_name(Keyload__V1__Permission p);

/* A grant's field or header key list, owned (kl_key_list_clear). Each key is an identifier
 * (letters, digits, . _ - :) or the single entry "*" (every key; then the only entry); at
 * most KL_KEY_LIST_MAX keys, no duplicates; kept sorted bytewise (as the catalog stores
 * them). EMPTY MEANS NONE: a grant with no fields lets the principal use no field at all. */
typedef struct kl_key_list {
    char **keys;
    size_t n;
} kl_key_list;
/* Parses the CLI form "a,b,c" (no spaces; "" is the empty list, "*" every key) into *out
 * (zeroed first). INVALID_ARGUMENT with detail `what` (e.g. "fields") naming the entry at
 * fault; *out is then empty. */
kl_code kl_key_list_parse(const char *what, const char *text, kl_key_list *out, kl_err *err);
/* Frees the keys and empties the list. NULL is accepted. */
void kl_key_list_clear(kl_key_list *l);

/* Checks a queue pattern: an exact queue name, or an identifier prefix followed by ONE
 * trailing '*' ("orders.*", "orders*", "*"); 1..128 bytes. INVALID_ARGUMENT, detail `what`. */
kl_code kl_queue_pattern_check(const char *what, const char *pattern, kl_err *err);

/* Principal key files (client/sdk/keyfile.c): libsodium's 64-byte Ed25519 secret key (seed
 * || public key), mode 0600, the file kl_client_open_principal and `keyload --key` read.
 * kl_key_file_new makes a new key pair, writes its secret half to path (created with
 * O_EXCL: an existing file is FAILED_PRECONDITION, never overwritten; synced) and gives the
 * public half for kl_batch_create_principal, kl_batch_set_principal_key or
 * kl_bootstrap_proof. Write the file BEFORE sending the request that registers the key, so a
 * commit never loses it; remove it yourself after a definite refusal (not after
 * KL_UNKNOWN_WRITE_OUTCOME: the key may be registered). kl_key_file_public reads such a file
 * (same mode rule) and gives its public half. The secret bytes are wiped from memory before
 * returning and never leave the process. Errors name the file, never a key byte.
 * Reentrant. */
kl_code kl_key_file_new(const char *path, uint8_t public_key[32], kl_err *err);
kl_code kl_key_file_public(const char *path, uint8_t public_key[32], kl_err *err);

/* The proof a kl_batch_bootstrap carries (kl_canon_bootstrap_proof): reads the 32-byte
 * cluster secret from cluster_secret_path (mode 0600; the launcher's
 * var/<cluster>/cluster.secret) and computes the proof for database "TENANT/DB", admin_id
 * and admin_public_key into proof. The secret is wiped before returning. Reentrant. */
kl_code kl_bootstrap_proof(const char *cluster_secret_path, const char *database,
                           const char *admin_id, const uint8_t admin_public_key[32],
                           uint8_t proof[32], kl_err *err);

/* A grant on the client's database (ARCHITECTURE.md "Engine"): the permission, the queues it covers
 * and, except for QueueAck (which takes no lists), the field and header keys it allows
 * (borrowed arrays, validated like kl_key_list and sent sorted; n = 0 means none). */
typedef struct kl_grant {
    Keyload__V1__Permission permission;
    const char *queue_pattern;
    const char *const *fields;
    size_t n_fields;
    const char *const *headers;
    size_t n_headers;
} kl_grant;

/* keyload.v1.CreatePrincipal: principal_id (an identifier, unique cluster-wide; "local" is
 * reserved by the daemon) with its Ed25519 public key and role; no grants, policy epoch 1. */
kl_code kl_batch_create_principal(kl_batch *b, const char *principal_id,
                                  const uint8_t public_key[32], kl_role role, kl_err *err);
/* keyload.v1.GrantPermission: adds the grant, or replaces the lists of the principal's
 * grant with the same (database, permission, queue_pattern). */
kl_code kl_batch_grant(kl_batch *b, const char *principal_id, const kl_grant *grant,
                       kl_err *err);
/* keyload.v1.RevokePermission: removes the grant (database, permission, queue_pattern);
 * an absent one is a no-op (changed false). */
kl_code kl_batch_revoke(kl_batch *b, const char *principal_id, Keyload__V1__Permission permission,
                        const char *queue_pattern, kl_err *err);
/* keyload.v1.SetPrincipalKey: key rotation; every session of the old key ends. */
kl_code kl_batch_set_principal_key(kl_batch *b, const char *principal_id,
                                   const uint8_t public_key[32], kl_err *err);
/* keyload.v1.SetDatabaseLimits: REPLACES all of the database's limits (a limit left 0 goes
 * back to the cluster's, an absent accept-attempts limit to null). limits may be NULL. */
kl_code kl_batch_set_database_limits(kl_batch *b, const kl_database_limits *limits, kl_err *err);
/* The limits a change names (SetDatabaseLimits.fields in queue.proto). */
#define KL_DB_FIELD_SCAN_RECORDS 1u
#define KL_DB_FIELD_BATCH_BYTES 2u
#define KL_DB_FIELD_QUERY_READ_BYTES 4u
#define KL_DB_FIELD_ACCEPT_ATTEMPTS 8u
/* keyload.v1.SetDatabaseLimits changing ONLY the limits named in `fields` (a non-zero OR of
 * KL_DB_FIELD_*) to their values in limits; the others stay as stored. The daemon merges when
 * it evaluates the batch, so a concurrent change of another limit is kept. */
kl_code kl_batch_change_database_limits(kl_batch *b, const kl_database_limits *limits, uint32_t fields,
                                        kl_err *err);

/* Where a batch goes. Creating a database or a queue, and pausing the transfers of a whole
 * database, change the catalog on partition 0;
 * deleting a queue first closes it on its own partition, then removes its definition on
 * partition 0 (each step alone in its batch, same command id, both replayable); every
 * other batch goes to the one partition holding its queues, found through partition 0
 * (keyload.v1.LocateQueue) and cached by the client. */
typedef enum kl_batch_route {
    KL_ROUTE_QUEUE,        /* queue data: the queues' partition */
    KL_ROUTE_CATALOG,      /* partition 0 */
    KL_ROUTE_DELETE_QUEUE, /* the queue's partition, then partition 0 */
} kl_batch_route;
/* Where b goes (*route). INVALID_ARGUMENT when a catalog mutation or a queue deletion shares
 * its batch. Only reads b. */
kl_code kl_batch_kind(const kl_batch *b, kl_batch_route *route, kl_err *err);
/* Encodes the keyload.v1.BatchRequest the client would send, with every queue ref's tenant
 * and database taken from database ("TENANT/DB"). The same batch always encodes to the
 * same bytes. *out is malloc'd; the caller frees it with free(). An empty batch is
 * INVALID_ARGUMENT. */
kl_code kl_batch_encode(const kl_batch *b, const char *database, uint8_t **out,
                        size_t *out_len, kl_err *err);

/* ---------------------------------------------------------------- receipts */

/* A committed batch's receipt: the exact bytes the partition stored (and returns byte for
 * byte on every replay) and their decoded view. Both are owned by the receipt and freed by
 * kl_receipt_free; treat them as read-only. `decoded` is the protobuf-c struct of
 * build/gen/keyload/v1/queue.pb-c.h (results[i]->kind_case tells which result it is; the
 * i-th result answers the i-th mutation of the batch). Exposing the protobuf-c struct is
 * provisional: a later version may replace it with SDK-owned types. */
typedef struct kl_receipt {
    uint8_t *bytes;
    size_t len;
    Keyload__V1__BatchReceipt *decoded;
} kl_receipt;

/* Decodes receipt bytes (copied). *out belongs to the caller (kl_receipt_free, which also
 * accepts NULL). Reentrant; a receipt may be read from several threads at once. */
kl_code kl_receipt_decode(const uint8_t *bytes, size_t len, kl_receipt **out, kl_err *err);
/* Frees r, its bytes and its decoded view (pointers into them end). NULL is accepted. */
void kl_receipt_free(kl_receipt *r);

/* ---------------------------------------------------------------- calls */

/* Sends the batch (kl_batch_kind decides where) and waits for its committed receipt.
 * On KL_OK *out belongs to the caller (kl_receipt_free); its command id is the batch's.
 * Outcomes worth knowing:
 *   KL_UNKNOWN_WRITE_OUTCOME: a request reached a member but no answer came back within
 *     the timeout (lost answer, lost connection; detail "no_answer"), or the leader lost
 *     leadership after proposing it. Within the timeout the SDK already resends the same
 *     bytes to the members; after it, the batch may or may not have committed, and it has
 *     NOT been rolled back. Resend the same batch (same command id) to learn the outcome.
 *   KL_CONFLICT: this command id was already used with other content.
 *   KL_RESOURCE_EXHAUSTED, detail "limit:MaxBatchBytes": the encoded batch is too large
 *     (checked before sending, and again by the server).
 *   KL_UNAVAILABLE: no member accepted the request; it was not executed.
 * Thread-safe. b is only read. */
kl_code kl_client_batch(kl_client *c, const kl_batch *b, kl_receipt **out, kl_err *err);

/* ---- The asynchronous API: the same calls without a waiting thread.
 *
 * kl_client_batch_start and the *_start reads below make exactly the call their blocking
 * twin makes (same routing, leader cache, redirects, retries within the client's timeout,
 * sealed sessions and outcomes: the blocking forms are these calls, waited for). KL_OK
 * means started: done(call, arg) then runs exactly once, on an SDK thread (or on the
 * caller's own thread before the start returns, when the call ends at once), after the
 * outputs were written; kl_call_result gives its status (err as the blocking form's).
 * done must not block for long and must not free the call; free it afterwards with
 * kl_call_free (which waits for done to return). Any other status: nothing was started,
 * done never runs and no kl_call exists. The inputs (b, names, tokens) are copied or only
 * read before start returns, except b of kl_client_batch_start, which must live until
 * done. kl_call_cancel ends a call early: not yet sent, it fails UNAVAILABLE "cancelled";
 * a batch that may have been sent ends UNKNOWN_WRITE_OUTCOME (resend it under the same
 * command id), a read DEADLINE_EXCEEDED "no_answer". A call waiting for another call's
 * session handshake ends when that handshake does (bounded by the timeout). */
typedef struct kl_call kl_call;
typedef void (*kl_call_done_fn)(kl_call *call, void *arg);
/* The call's status once done ran; err (may be NULL) is written only when it is not KL_OK. */
kl_code kl_call_result(const kl_call *call, kl_err *err);
void kl_call_cancel(kl_call *call);
void kl_call_free(kl_call *call);
/* Between kl_calls_hold and kl_calls_release, the calls this thread starts are written to
 * their connections together at the release, one system call per connection, instead of
 * one each: for a caller that starts many calls in one pass (an event loop handling a batch
 * of finished calls). Nests; per thread. Keep the stretch short and never wait inside it:
 * its calls are not sent until the release, though their timeouts run. */
void kl_calls_hold(void);
void kl_calls_release(void);

kl_code kl_client_batch_start(kl_client *c, const kl_batch *b, kl_receipt **out,
                              kl_call_done_fn done, void *arg, kl_call **call, kl_err *err);

/* Fresh statistics of one queue: a read behind the read barrier of the queue's partition,
 * located like a batch; it never changes anything. A lost answer is KL_DEADLINE_EXCEEDED
 * (detail "no_answer"). On KL_OK *out belongs to the caller (kl_queue_stats_free).
 * Thread-safe. */
kl_code kl_client_queue_stats(kl_client *c, const char *queue,
                              Keyload__V1__QueueStatsAnswer **out, kl_err *err);
/* Frees a stats answer; NULL is accepted. */
void kl_queue_stats_free(Keyload__V1__QueueStatsAnswer *s);

/* ---------------------------------------------------------------- principals (calls)
 *
 * One call per catalog mutation above: builds the one-mutation batch under command_id,
 * sends it to partition 0's leader (NOT_LEADER redirects, and UNKNOWN_WRITE_OUTCOME or a
 * lost answer resent with the same bytes within the timeout, as kl_client_batch does) and
 * returns the receipt's fields. command_id is REQUIRED (canonical GUID text, e.g. from
 * kl_command_id_new): after KL_UNKNOWN_WRITE_OUTCOME, call again with the same command id
 * and arguments to learn the outcome; a replay answers the stored receipt byte for byte.
 * A replay whose authority changed since (the caller's policy epoch) is PERMISSION_DENIED
 * "stale_authority" and means the original did commit.
 * out (may be NULL): the caller's struct, filled on KL_OK. receipt (may be NULL): on KL_OK
 * the whole receipt, the caller's (kl_receipt_free). Thread-safe, as kl_client_batch. */

/* A fresh command id in canonical lower-case text (36 chars + NUL) into the caller's
 * buffer; also a good transfer id. Thread-safe. It is a version 7 GUID (RFC 9562): the
 * wall clock's millisecond in its first 48 bits, then 74 random bits. Ids that grow with
 * time make the store's outcome and transfer records cheaper to write than random ones
 * (ARCHITECTURE.md "Store layout"); any other GUID is accepted as well. The id shows the
 * millisecond it was made in to whoever sees it. */
#define KL_COMMAND_ID_TEXT_LEN 36
void kl_command_id_new(char out[KL_COMMAND_ID_TEXT_LEN + 1]);

/* The receipt fields of a principal change (keyload.v1.PrincipalChanged). */
typedef struct kl_principal_result {
    char principal_id[KL_SDK_NAME_MAX + 1];
    uint8_t key_id[8];          /* of the principal's current key */
    size_t key_id_len;          /* 8 (0 if the daemon sent none) */
    uint64_t policy_epoch;      /* after the change */
    bool changed;               /* false: an identical re-grant or an absent revoke */
    uint64_t catalog_version;   /* 0 when nothing changed */
} kl_principal_result;

kl_code kl_client_create_principal(kl_client *c, const char *command_id, const char *principal_id,
                                   const uint8_t public_key[32], kl_role role,
                                   kl_principal_result *out, kl_receipt **receipt, kl_err *err);
kl_code kl_client_grant(kl_client *c, const char *command_id, const char *principal_id,
                        const kl_grant *grant, kl_principal_result *out, kl_receipt **receipt,
                        kl_err *err);
kl_code kl_client_revoke(kl_client *c, const char *command_id, const char *principal_id,
                         Keyload__V1__Permission permission, const char *queue_pattern,
                         kl_principal_result *out, kl_receipt **receipt, kl_err *err);
kl_code kl_client_set_principal_key(kl_client *c, const char *command_id,
                                    const char *principal_id, const uint8_t public_key[32],
                                    kl_principal_result *out, kl_receipt **receipt, kl_err *err);

/* The receipt fields of keyload.v1.DatabaseLimitsSet: the limits now in force as stored. */
typedef struct kl_limits_result {
    kl_database_limits limits;
    uint64_t catalog_version;
} kl_limits_result;
kl_code kl_client_set_database_limits(kl_client *c, const char *command_id,
                                      const kl_database_limits *limits, kl_limits_result *out,
                                      kl_receipt **receipt, kl_err *err);
/* The same for kl_batch_change_database_limits: only the limits in `fields` change. */
kl_code kl_client_change_database_limits(kl_client *c, const char *command_id,
                                         const kl_database_limits *limits, uint32_t fields,
                                         kl_limits_result *out, kl_receipt **receipt, kl_err *err);

/* keyload.v1.ShowPrincipal on partition 0's leader: the principal's stored record (public
 * key, key id, roles, grants, policy epoch; never a secret). Only the principal itself or
 * an administrator of its tenant may read it (PERMISSION_DENIED otherwise); NOT_FOUND when
 * there is no such principal. A lost answer is KL_DEADLINE_EXCEEDED ("no_answer").
 * On KL_OK *out belongs to the caller (kl_principal_answer_free). Thread-safe. */
kl_code kl_client_show_principal(kl_client *c, const char *principal_id,
                                 Keyload__V1__ShowPrincipalAnswer **out, kl_err *err);
/* kl_client_show_principal as a kl_call (see kl_client_batch_start). */
kl_code kl_client_show_principal_start(kl_client *c, const char *principal_id,
                                       Keyload__V1__ShowPrincipalAnswer **out,
                                       kl_call_done_fn done, void *arg, kl_call **call,
                                       kl_err *err);
/* Frees a ShowPrincipal answer; NULL is accepted. */
void kl_principal_answer_free(Keyload__V1__ShowPrincipalAnswer *a);

/* keyload.v1.ListCatalog on partition 0's leader: one page, in name order, of the tenant's
 * databases (kind CATALOG_LIST_DATABASES; with database "TENANT/DB" just that one, which is
 * how its current limits are read), a database's queues (CATALOG_LIST_QUEUES; database
 * NULL: the client's) or the tenant's principals (CATALOG_LIST_PRINCIPALS). The tenant is
 * database's, else the client's. cursor (cursor_len bytes; NULL/0 from the start) is a
 * previous answer's next_cursor, opaque; max 0 is the daemon's default page. Only
 * administrators may list (PERMISSION_DENIED "role:administrator"); a malformed cursor is
 * INVALID_ARGUMENT "cursor". On KL_OK *out belongs to the caller (kl_catalog_list_free). */
kl_code kl_client_list_catalog(kl_client *c, Keyload__V1__CatalogListKind kind, const char *database,
                               const uint8_t *cursor, size_t cursor_len, uint32_t max,
                               Keyload__V1__ListCatalogAnswer **out, kl_err *err);
void kl_catalog_list_free(Keyload__V1__ListCatalogAnswer *a);

/* ---------------------------------------------------------------- backups */
/* A partition's backup stream (ARCHITECTURE.md "Backup and restore"), cluster administrators
 * only (PERMISSION_DENIED "role:cluster_admin"). Open pins the leader's state after a read
 * barrier; chunk reads chunk `seq` (0, 1, ... in order; the same seq again after a lost
 * answer) as daemon/store/snapshot.h lays it out; close releases the pin (an idle stream is
 * closed by the member after BackupOpenAnswer.idle_ms). A stream closed or held by another
 * member is NOT_FOUND "backup_stream": start again. Answers are the caller's to free
 * (keyload__v1__backup_*_answer__free_unpacked). */
kl_code kl_client_backup_open(kl_client *c, int partition, Keyload__V1__BackupOpenAnswer **out, kl_err *err);
kl_code kl_client_backup_chunk(kl_client *c, int partition, uint64_t stream, uint64_t seq,
                               Keyload__V1__BackupChunkAnswer **out, kl_err *err);
kl_code kl_client_backup_close(kl_client *c, int partition, uint64_t stream, kl_err *err);

/* ---------------------------------------------------------------- membership */
/* A partition's configuration in effect as the member that answers knows it (Members: any
 * member answers, so it works without a leader; `member` and `leader` say who answered and
 * whom it follows, and a follower learns that the newest configuration committed only with
 * the leader's next append), and a membership change run by the leader (MemberChange:
 * cluster administrators only; see
 * membership.proto for the ops, the refusals and the retry rule). Answers are the caller's to
 * free (keyload__v1__member*_answer__free_unpacked). */
kl_code kl_client_members(kl_client *c, int partition, Keyload__V1__MembersAnswer **out, kl_err *err);
kl_code kl_client_member_change(kl_client *c, int partition, const Keyload__V1__MemberChangeRequest *req,
                                Keyload__V1__MemberChangeAnswer **out, kl_err *err);
/* SetMemberKey (cluster administrators; a catalog change on partition 0): public_key (32
 * bytes) is trusted as the key of member `member` of partition `partition` when it signs a
 * catalog tail (a data partition's member: by partition 0; a member of partition 0: its
 * answers, by the data partitions once their catalog copies hold the record), or, with
 * public_key NULL, that member's tails are refused from now on, even when a cluster file
 * names it. Register a new member's key
 * before the MemberChange that admits it (or the member, once leader, gets no catalog lease:
 * UNAVAILABLE catalog_lease), and remove a member's key once a change removed it. *changed
 * (may be NULL): false when the record already said this. RESOURCE_EXHAUSTED
 * "member_keys_full" past the catalog's bound (docs/MEMBERSHIP.md). */
kl_code kl_batch_set_member_key(kl_batch *b, int partition, uint64_t member, const uint8_t public_key[32],
                                kl_err *err);
kl_code kl_client_set_member_key(kl_client *c, const char *command_id, int partition, uint64_t member,
                                 const uint8_t public_key[32], bool *changed, kl_err *err);
/* SetTransferHold on one partition (cluster administrators): CompleteQueueTransfer is
 * refused there (UNAVAILABLE "transfer_hold") until hold_ms of partition time after the
 * hold's entry; 0 releases it. *until_unix_ms: the partition time it ends at (0 released). */
kl_code kl_client_transfer_hold(kl_client *c, int partition, uint32_t hold_ms, int64_t *until_unix_ms, kl_err *err);

/* ---------------------------------------------------------------- remote transfers
 *
 * ARCHITECTURE.md "Engine" (client/sdk/transfer.c). A transfer moves one message from a source lane to
 * a destination lane on another partition of the same database, exactly once:
 *   1. CreateQueueTransfer on the SOURCE queue's partition commits an intent
 *      (OutputPending) and returns a signed intent token (TransferCreated.intent_token);
 *   2. AcceptQueueTransfer with that token on the DESTINATION queue's partition enqueues
 *      the message once and stores a dedup receipt (retries enqueue nothing);
 *   3. kl_client_transfer_receipt reads the destination's signed receipt token;
 *   4. CompleteQueueTransfer with it on the SOURCE partition moves the intent to Delivered.
 * Tokens are opaque bytes, returned byte for byte; pass them on unchanged. They are
 * credentials: never log them. Every transfer mutation needs an administrator (the daemon
 * decides). Transfer ids are canonical GUID text like command ids; empty, malformed and
 * all-zero ids are INVALID_ARGUMENT (detail "transfer_id"). Queue and lane names follow
 * the batch rules above (lane NULL or "": "default"); tenant and database are the client's.
 *
 * When an Accept of generation G was refused without effect (RESOURCE_EXHAUSTED: capacity;
 * PERMISSION_DENIED: policy) and the cause was fixed (quota raised, grant restored), the
 * transfer moves on through a new generation:
 *   5. kl_client_read_transfer_failure (the intent token of G and the failed Accept's
 *      command id) on the DESTINATION queue's partition: a fresh read that signs a failure
 *      witness when the same Accept would now pass (or hands back the receipt if one exists);
 *   6. AdvanceQueueTransferAttempt (capacity) or AdvanceQueueTransferRepair (policy) with
 *      that witness on the SOURCE partition moves the intent to G+1 and returns the token of
 *      G+1 (TransferAdvanced.intent_token; InspectQueueTransfer's current_token), which the
 *      next Accept carries under a NEW command id. Attempt advances are bounded by the
 *      database's MaxQueueTransferAcceptAttempts reserved at Create (null: none allowed).
 *
 * Routing (kl_batch_kind, kl_client_batch): Create, Complete and both advances go to the
 * source queue's partition, Accept to the destination queue's, a per-lane pause to its
 * queue's; they may share a batch with other queue data of that same partition. A
 * database-wide pause is a catalog mutation (partition 0, alone in its batch). */

/* Parses a transfer id (canonical GUID text) into 16 bytes; INVALID_ARGUMENT "transfer_id"
 * when empty, malformed or all zero. */
kl_code kl_transfer_id_parse(const char *text, uint8_t out[16], kl_err *err);

/* keyload.v1.CreateQueueTransfer: the intent to move a copy of msg (copied; the caller keeps
 * it) from source_queue/source_lane to dest_queue/dest_lane under transfer_id. The same id
 * with the same destination and message answers the existing intent (existing true);
 * anything else under that id is CONFLICT. */
kl_code kl_batch_create_transfer(kl_batch *b, const char *source_queue, const char *source_lane,
                                 const char *transfer_id, const char *dest_queue,
                                 const char *dest_lane, const kl_message *msg, kl_err *err);
/* keyload.v1.AcceptQueueTransfer: dest_queue/dest_lane must be the intent's target (the
 * daemon checks it against the token). intent_token: the bytes CreateQueueTransfer
 * returned (copied; not empty). */
kl_code kl_batch_accept_transfer(kl_batch *b, const char *dest_queue, const char *dest_lane,
                                 const uint8_t *intent_token, size_t len, kl_err *err);
/* keyload.v1.CompleteQueueTransfer: receipt_token from kl_client_transfer_receipt (copied;
 * not empty). */
kl_code kl_batch_complete_transfer(kl_batch *b, const char *source_queue,
                                   const char *source_lane, const char *transfer_id,
                                   const uint8_t *receipt_token, size_t len, kl_err *err);
/* keyload.v1.AdvanceQueueTransferAttempt: after a RESOURCE_EXHAUSTED Accept of the
 * intent's current generation, moves it to the next generation with the failure witness
 * that kl_client_read_transfer_failure issued (witness: its witness_token, copied; not
 * empty). The receipt's TransferAdvanced carries the new generation's intent token.
 * Errors name the field: source_queue, source_lane, transfer_id, witness_token. */
kl_code kl_batch_advance_transfer_attempt(kl_batch *b, const char *source_queue,
                                          const char *source_lane, const char *transfer_id,
                                          const uint8_t *witness, size_t len, kl_err *err);
/* keyload.v1.AdvanceQueueTransferRepair: the same after a PERMISSION_DENIED Accept, once
 * the caller's policy changed so that the Accept would now pass (the witness says so). Not
 * bounded by MaxQueueTransferAcceptAttempts. Same arguments and errors. */
kl_code kl_batch_advance_transfer_repair(kl_batch *b, const char *source_queue,
                                         const char *source_lane, const char *transfer_id,
                                         const uint8_t *witness, size_t len, kl_err *err);
/* keyload.v1.SetQueueTransfersPaused: pauses (paused true) or resumes admission of NEW
 * transfers. queue NULL: the whole client database (catalog mutation; lane must then be
 * NULL or ""); else that queue's lane. Pending transfers go on either way. */
kl_code kl_batch_pause_transfers(kl_batch *b, const char *queue, const char *lane, bool paused,
                                 kl_err *err);

/* "OutputPending" (1), "Delivered" (2), else "unknown": the seeds' state names. */
const char *kl_transfer_state_name(uint32_t state);
/* History events: "IntentCreated", "ReceiptVerified", "AttemptAdvanced", "PolicyRepaired",
 * else "unknown". Reentrant; the string is static. */
const char *kl_transfer_event_name(uint32_t event);
/* keyload.v1.FailureVerdict: "ReceiptExists", "WitnessIssued", "Unchanged", else
 * "unknown". Reentrant; the string is static. */
const char *kl_failure_verdict_name(uint32_t verdict);

/* Fresh transfer reads, served by the leader of the partition named below after its read
 * barrier (redirects, sessions and retries as for kl_client_queue_stats; a lost answer is
 * KL_DEADLINE_EXCEEDED "no_answer"). On KL_OK *out belongs to the caller (the matching
 * *_free, which accepts NULL). Thread-safe. The answers carry tokens: treat them as
 * credentials. */

/* keyload.v1.InspectQueueTransfer on the source queue's partition: state, generation,
 * history, the stored intent token and, once Delivered, the verified receipt token. */
kl_code kl_client_inspect_transfer(kl_client *c, const char *source_queue,
                                   const char *source_lane, const char *transfer_id,
                                   Keyload__V1__InspectQueueTransferAnswer **out, kl_err *err);
/* The reads a transfer coordinator makes, as kl_calls (see kl_client_batch_start). */
kl_code kl_client_inspect_transfer_start(kl_client *c, const char *source_queue,
                                         const char *source_lane, const char *transfer_id,
                                         Keyload__V1__InspectQueueTransferAnswer **out,
                                         kl_call_done_fn done, void *arg, kl_call **call,
                                         kl_err *err);
kl_code kl_client_transfer_receipt_start(kl_client *c, const char *dest_queue,
                                         const char *source_queue, const char *source_lane,
                                         const char *transfer_id,
                                         Keyload__V1__InspectQueueTransferReceiptAnswer **out,
                                         kl_call_done_fn done, void *arg, kl_call **call,
                                         kl_err *err);
kl_code kl_client_read_transfer_failure_start(kl_client *c, const char *dest_queue,
                                              const char *dest_lane, const uint8_t *intent_token,
                                              size_t len, const char *failed_command_id,
                                              Keyload__V1__ReadQueueTransferFailureAnswer **out,
                                              kl_call_done_fn done, void *arg, kl_call **call,
                                              kl_err *err);
kl_code kl_client_read_complete_failure_start(
    kl_client *c, const char *source_queue, const char *source_lane, const char *transfer_id,
    const uint8_t *receipt_token, size_t len, const char *failed_command_id,
    Keyload__V1__ReadQueueTransferFailureAnswer **out, kl_call_done_fn done, void *arg,
    kl_call **call, kl_err *err);
void kl_transfer_answer_free(Keyload__V1__InspectQueueTransferAnswer *a);

/* keyload.v1.InspectQueueTransferReceipt on the destination queue's partition: the dedup
 * receipt token and the commit that enqueued the message (NOT_FOUND while not accepted). */
kl_code kl_client_transfer_receipt(kl_client *c, const char *dest_queue,
                                   const char *source_queue, const char *source_lane,
                                   const char *transfer_id,
                                   Keyload__V1__InspectQueueTransferReceiptAnswer **out,
                                   kl_err *err);
void kl_transfer_receipt_answer_free(Keyload__V1__InspectQueueTransferReceiptAnswer *a);

/* keyload.v1.ListPendingQueueTransfers: one page of the OutputPending intents of the
 * client's database on one partition. partition >= 0 names it (what the coordinator does
 * for each partition); -1 means source_queue's partition (source_queue then required).
 * source_queue (NULL: every queue) and source_lane (NULL: every lane of it) filter.
 * cursor: NULL/0 from the start, else a previous answer's next_cursor from the same
 * partition. max_items: 0 = the daemon's default (64), at most 1000. */
kl_code kl_client_pending_transfers(kl_client *c, const char *source_queue,
                                    const char *source_lane, int partition,
                                    const uint8_t *cursor, size_t cursor_len, uint32_t max_items,
                                    Keyload__V1__ListPendingQueueTransfersAnswer **out,
                                    kl_err *err);
void kl_pending_transfers_free(Keyload__V1__ListPendingQueueTransfersAnswer *a);

/* keyload.v1.ReadQueueTransferFailure on the destination queue's partition (a fresh read,
 * sealed like the others when the client has a principal): what became of the Accept that
 * carried intent_token (the token of the generation whose Accept failed; copied, not
 * empty) under failed_command_id (canonical GUID text; detail "failed_command_id"). The
 * caller must be the intent's principal. dest_queue/dest_lane: the intent's target lane
 * (lane NULL or "": "default"). Verdicts: RECEIPT_EXISTS (receipt_token and target_commit:
 * complete the transfer with it), WITNESS_ISSUED (witness_token: pass it to
 * kl_batch_advance_transfer_attempt or _repair), UNCHANGED (unchanged_detail names the
 * check that still refuses; nothing to do until it is fixed). NOT_FOUND or
 * FAILED_PRECONDITION "failure_authority" when no such refused Accept is on record.
 * Nothing is written. On KL_OK *out belongs to the caller
 * (kl_transfer_failure_answer_free). Thread-safe. The answer carries tokens. */
kl_code kl_client_read_transfer_failure(kl_client *c, const char *dest_queue,
                                        const char *dest_lane, const uint8_t *intent_token,
                                        size_t len, const char *failed_command_id,
                                        Keyload__V1__ReadQueueTransferFailureAnswer **out,
                                        kl_err *err);
/* The same read for a denied Complete, on the SOURCE queue's partition: what became of the
 * Complete that carried receipt_token for (source lane, transfer_id) under
 * failed_command_id. Only a PERMISSION_DENIED Complete is witnessed, once the caller's
 * policy epoch changed and the same Complete would now pass (WITNESS_ISSUED: pass the
 * witness to kl_batch_advance_transfer_repair; the intent moves to its next generation and
 * a Complete under a new command id then verifies the same receipt); UNCHANGED otherwise;
 * FAILED_PRECONDITION "state" when the transfer is Delivered. Arguments are copied;
 * errors name the field. On KL_OK *out belongs to the caller
 * (kl_transfer_failure_answer_free). Thread-safe. The answer carries tokens. */
kl_code kl_client_read_complete_failure(kl_client *c, const char *source_queue, const char *source_lane,
                                        const char *transfer_id, const uint8_t *receipt_token, size_t len,
                                        const char *failed_command_id,
                                        Keyload__V1__ReadQueueTransferFailureAnswer **out, kl_err *err);
/* Frees an answer of kl_client_read_transfer_failure; NULL is accepted. */
void kl_transfer_failure_answer_free(Keyload__V1__ReadQueueTransferFailureAnswer *a);

/* A token's claims as one JSON object, for display only (client/sdk/transfer_json.c): the
 * signature is NOT verified and the message is never shown (only its body's length).
 * Keys: purpose ("TransferIntent"|"TransferReceipt"|"TransferFailureWitness"|"unknown"),
 * version, database_incarnation, source {tenant, database, queue, lane}, target {...},
 * transfer_id, generation, principal_id, fingerprint_hex, body_bytes (intents), effect
 * {message_id, partition, term, index} (receipts), failed_command_id (GUID text) and
 * failure_code (a code name, e.g. "RESOURCE_EXHAUSTED") (failure witnesses),
 * issued_unix_ms, key_id. flags: KL_JSON_PRETTY or 0 (below). *out is malloc'd
 * (free()). INVALID_ARGUMENT (detail "token") when the bytes are no SignedToken with
 * TransferClaims. Reentrant. */
kl_code kl_transfer_token_describe(const uint8_t *token, size_t len, unsigned flags, char **out,
                                   kl_err *err);

/* ---------------------------------------------------------------- Q1 statements
 *
 * keyload.v1.Query (README "Q1 statements"; grammar and aliases there and in common/q1.h,
 * common/q1_plan.h): `CALL alias(name => value, ...) [WITH COMMAND_ID 'guid'] [;]`.
 * statement: NUL-terminated UTF-8, at most 65536 bytes. It is parsed and its arguments
 * checked here first (INVALID_ARGUMENT naming the argument, or "statement" with line and
 * column for a syntax error; never quoting values), then sent to the leader of the
 * partition holding its routing queue (create/complete/inspect: source_queue;
 * accept/inspect-receipt: destination_queue; enqueue/receive/ack: queue), in the client's
 * database, sealed under the client's session like every call, following NOT_LEADER
 * redirects; a lost answer is KL_DEADLINE_EXCEEDED "no_answer". The daemon re-parses it and
 * runs it as the native call: mutating aliases as a Batch under the statement's COMMAND_ID
 * or, without one, under a fresh id drawn once per kl_client_query call (so its internal
 * resends cannot commit twice; a caller that retries by itself after
 * KL_UNKNOWN_WRITE_OUTCOME must name the command id in the statement). It needs the Query
 * permission on the routing queue plus what the native call needs; errors are the native
 * ones (PERMISSION_DENIED "grant:Query", CONFLICT, RESOURCE_EXHAUSTED, ...).
 * On KL_OK *rows_json (malloc'd, free(); the caller owns it) is a JSON array of rows, one
 * line: mutating aliases give one row, the batch receipt as kl_receipt_to_json prints it
 * (results[0] holds the alias's result); inspect.v1 one kl_transfer_to_json row;
 * inspect-receipt.v1 one kl_transfer_receipt_to_json row. Rows hold tokens where the
 * native answers do: treat them as credentials. Thread-safe. */
kl_code kl_client_query(kl_client *c, const char *statement, char **rows_json, kl_err *err);

/* The rows of an encoded keyload.v1.QueryAnswer, as kl_client_query returns them (for
 * callers that send the Query RPC themselves). *rows_json malloc'd (free()). Reentrant. */
kl_code kl_query_answer_rows(const uint8_t *answer, size_t len, char **rows_json, kl_err *err);

/* ---------------------------------------------------------------- JSON and base64 */

/* Canonical public JSON (client/sdk/json.c). Keys always appear in one fixed order; byte
 * strings (command digests, lease tokens, bodies) are standard base64 with padding;
 * GUIDs are canonical lower-case text; ids, counts, indexes and times are JSON integers
 * (a uint64 above 2^63-1 is written as a decimal string); headers and fields are objects
 * sorted by key; a field is {"type":"string|int|double|bool|bytes","value":...} (a
 * non-finite double's value is the string "NaN", "Infinity" or "-Infinity"); a body
 * is "body" (base64) plus "body_utf8" only when the body is valid UTF-8. The result is one
 * line unless KL_JSON_PRETTY. Returns a malloc'd NUL-terminated string (free()), NULL only
 * when out of memory. Reentrant.
 *
 * Receipt keys: command_id, partition, term, index, committed_unix_ms, request_digest,
 * [catalog_version,] results[] (each {"kind": "queue_created"|"queue_deleted"|"enqueued"|
 * "received"|"acked"|"released"|"database_created"|"bootstrapped"|"principal_changed"|
 * "database_limits_set"|"transfer_created"|"transfer_accepted"|"transfer_completed"|
 * "transfers_paused"|"transfer_advanced"|"unknown", ...}; received messages: message_id, lane,
 * delivery_count, lease_token, lease_expires_unix_ms, enqueued_unix_ms, expires_at_unix_ms,
 * delay_ms, headers, fields, body[, body_utf8]; principal_changed: principal_id, key_id,
 * policy_epoch, changed, catalog_version; database_limits_set: limits {max_scan_records,
 * max_batch_bytes, max_query_read_bytes, max_queue_transfer_accept_attempts (null when
 * null)}, catalog_version; transfer_created: intent_token, state ("OutputPending"|
 * "Delivered"), generation, existing; transfer_accepted: message_id, lane, partition, term,
 * index, deduplicated; transfer_completed: state, already; transfers_paused: paused,
 * changed, catalog_version; transfer_advanced: generation, intent_token (the new
 * generation's; left out with KL_JSON_OMIT_TOKENS), charged_bytes, already).
 * Stats keys: [queue,] queue_id, partition, messages, bytes, available, in_flight,
 * limits {max_messages, max_bytes, max_deliveries, dead_letter_queue}, applied_index.
 * Principal keys (kl_principal_to_json): principal_id, tenant, role ("none"|
 * "database-admin"|"cluster-admin"), database (the administered one, else ""), public_key,
 * key_id, policy_epoch, grants[] ({database, permission (ARCHITECTURE.md "Engine" name), queue_pattern,
 * fields[], headers[]}), created_unix_ms, version, catalog_version.
 * Transfer keys (kl_transfer_to_json): state, generation, source and destination (each
 * {tenant, database, queue, lane}), principal_id, fingerprint, max_accept_attempts (null
 * when none), attempt_advances, retained_records, retained_bytes, reserved_records,
 * reserved_bytes, history[] ({event: "IntentCreated"|"ReceiptVerified"|"AttemptAdvanced"|
 * "PolicyRepaired"|"unknown", generation, unix_ms, term, index, and for AttemptAdvanced and
 * PolicyRepaired also failed_command_id (GUID text) and failure_code (code name)}),
 * intent_token, current_token (the token of `generation`, the next Accept's input; null
 * when the daemon sent none), receipt_token (null until Delivered), applied_index.
 * Transfer failure keys (kl_transfer_failure_to_json): verdict ("ReceiptExists"|
 * "WitnessIssued"|"Unchanged"|"unknown"), receipt_token (null unless ReceiptExists),
 * target_commit ({message_id, partition, term, index}, null when absent), witness_token
 * (null unless WitnessIssued), failure_code (code name), failure_detail, unchanged_detail,
 * failure_policy_epoch, policy_epoch, records_charged, bytes_charged, applied_index.
 * Transfer receipt keys (kl_transfer_receipt_to_json): destination, target_commit
 * {message_id, partition, term, index}, receipt_token, applied_index.
 * Pending keys (kl_pending_transfers_to_json): items[] ({source, transfer_id, generation,
 * destination, intent_token}), next_cursor ("" when done), done, partition_incarnation,
 * cursor_reset, records_charged, bytes_charged, applied_index.
 * Error: {"error":{"code","message","detail"}}.
 * KL_JSON_OMIT_TOKENS leaves every token key out of the transfer objects, the transfer
 * failure answer and a receipt's transfer_advanced results (for listings and logs that must
 * not disclose credentials, such as `keyload transfer pending`). A receipt's
 * transfer_created result keeps its intent_token either way (unchanged behaviour). */
#define KL_JSON_PRETTY 1u
#define KL_JSON_OMIT_TOKENS 2u
char *kl_receipt_to_json(const Keyload__V1__BatchReceipt *r, unsigned flags);
/* queue may be NULL (the key is then left out). */
char *kl_queue_stats_to_json(const char *queue, const Keyload__V1__QueueStatsAnswer *s,
                             unsigned flags);
char *kl_error_to_json(const kl_err *err, unsigned flags);
char *kl_principal_to_json(const Keyload__V1__ShowPrincipalAnswer *a, unsigned flags);
/* A ListCatalog page: {"databases"|"queues"|"principals": [...], "next_cursor": base64 or
 * null, "catalog_version"}, the key named by kind. Principals as above. */
char *kl_catalog_list_to_json(const Keyload__V1__ListCatalogAnswer *a, Keyload__V1__CatalogListKind kind,
                              unsigned flags);
char *kl_transfer_to_json(const Keyload__V1__InspectQueueTransferAnswer *a, unsigned flags);
char *kl_transfer_receipt_to_json(const Keyload__V1__InspectQueueTransferReceiptAnswer *a,
                                  unsigned flags);
char *kl_pending_transfers_to_json(const Keyload__V1__ListPendingQueueTransfersAnswer *a,
                                   unsigned flags);
char *kl_transfer_failure_to_json(const Keyload__V1__ReadQueueTransferFailureAnswer *a,
                                  unsigned flags);

/* Standard base64 with padding (sodium_base64_VARIANT_ORIGINAL). encode returns a
 * malloc'd string (free()), NULL when out of memory. decode refuses anything else than
 * canonical base64 (INVALID_ARGUMENT; the message names `what`, never the text) and on
 * success *out (malloc'd, free(); non-NULL even when *out_len is 0) holds the bytes. */
char *kl_base64_encode(const uint8_t *data, size_t len);
kl_code kl_base64_decode(const char *what, const char *text, uint8_t **out, size_t *out_len,
                         kl_err *err);

/* True when p[0..n) is well-formed UTF-8 (no overlongs, surrogates or values > U+10FFFF).
 * Reentrant. */
bool kl_sdk_utf8_valid(const uint8_t *p, size_t n);

/* ---------------------------------------------------------------- member status */

/* Asks the one member at client URL url what it knows about itself and its partition
 * (keyload.v1.MemberStatus: role, leader, term, commit/applied/last index, serving,
 * catalog version, leader address). Any member answers at once, leader or not, without a
 * read barrier, so the answer may be slightly stale. timeout_ms bounds connect and call
 * together (<= 0: KL_DEFAULT_TIMEOUT_MS). A member that is down or does not answer in
 * time gives UNAVAILABLE or DEADLINE_EXCEEDED. On KL_OK *out belongs to the caller
 * (kl_member_status_free). Reentrant: one connection per call, closed before returning. */
kl_code kl_member_status(const char *url, int timeout_ms, Keyload__V1__MemberStatusAnswer **out,
                         kl_err *err);
/* Frees an answer of kl_member_status. NULL is accepted. */
void kl_member_status_free(Keyload__V1__MemberStatusAnswer *a);

/* Every member of the cluster file at cluster_path asked with kl_member_status, one at a
 * time, each within member_timeout_ms (<= 0: KL_CLUSTER_STATUS_MEMBER_TIMEOUT_MS), then the
 * members the partition's configuration names that the file does not (from a `Members`
 * answer of the partition's representative member; joined members, node "p<P>m<ID>"), as
 * one canonical JSON object (client/sdk/cluster_status.c; what `keyload cluster-status
 * --json` and keyload-mcp's cluster_status print):
 *   {"cluster":NAME,"partitions":[{"id","leader" (node name or null),"term","commit_index",
 *    "applied_index","catalog_version","serving","members":[{"node","client","up",
 *    "configuration" ("voter", "learner", "leaving" (old half of a joint configuration),
 *    "none" (no longer in it), or null when no member answered Members),"role",
 *    "term","commit_index","applied_index","last_index","serving","catalog_version",
 *    "error"}]}]}
 * A partition's numbers are its answering leader's (highest term), else those of the
 * answering member with the highest (term, commit index), else null. A member that did not
 * answer has "up" false, null numbers and role, and "error" "CODE: message". Members being
 * down is no error: KL_OK whenever the report was made; an unreadable cluster file is its
 * kl_cluster_load error. *out is malloc'd (free()). Reentrant. */
#define KL_CLUSTER_STATUS_MEMBER_TIMEOUT_MS 500
kl_code kl_cluster_status_to_json(const char *cluster_path, int member_timeout_ms, unsigned flags,
                                  char **out, kl_err *err);

#endif
