/* serve: the daemon's RPC layer as its files share it: the service state (kl_service) and the
 * functions each file of daemon/rpc offers the others. It has no .c of its own, so that every
 * file of the layer depends on it and none on another through it: service.c (the method
 * table) calls down into batch_serve.c, read_serve.c, query_serve.c, catalog_serve.c,
 * session_serve.c, which call down into lease.c and reply.c.
 * Each handler passes the payload to the node (daemon/node.h) and turns its answer into an
 * RPC answer; a member that does not lead answers NOT_LEADER with the leader's client address
 * when it knows it. keyload.v1.Query (Q1 statements, query_serve.c) runs each statement
 * through these same batch and read paths. Reads (QueueStats and the four transfer reads)
 * pass the read-index barrier first (ARCHITECTURE.md "Read path"): they are served from applied state only
 * once this member has confirmed it still leads and has applied up to the commit index.
 * Sessions (daemon/rpc/session_serve.c): keyload.v1.Hello establishes one; every other
 * method passes the session gate first, which opens a sealed request and makes its answer
 * sealed. A request without a session acts as the fixed local principal. */
#ifndef KL_RPC_SERVE_H
#define KL_RPC_SERVE_H

#include "common/clock.h"
#include "common/cluster.h"
#include "common/limits.h"
#include "common/rpc.h"
#include "daemon/engine/catalog.h"
#include "daemon/node.h"
#include "daemon/repl/driver.h"

#include <protobuf-c/protobuf-c.h>
#include <time.h>

#define KL_LOCAL_PRINCIPAL KL_CATALOG_RESERVED_PRINCIPAL
/* Fresh reads waiting for their read-index round: well below the client port's contexts
 * (main.c opens 128), so waiting reads never take the last ones and MemberStatus and Hello
 * always find one. Each answers by KL_SERVICE_READ_DEADLINE_MS at the latest (sooner when
 * the caller's deadline is nearer), below the SDK's default timeout. */
#define KL_SERVICE_READ_DEADLINE_MS 2000

struct kl_batch_call;
struct kl_service;
struct kl_tailer;
struct kl_sessions;
struct kl_keys;

/* What a waiting read keeps of its request, decoded once when it arrived, for the function
 * that serves it. Only the catalog tail keeps anything (catalog_serve.c). */
typedef struct kl_service_read_args {
    struct {
        int partition;
        uint64_t applied;        /* the catalog version the data partition has applied */
        uint32_t wait_ms;        /* how long an empty answer may be held */
        bool signed_request;     /* req_sig holds the request's signature (tail_auth.h) */
        uint8_t req_sig[64];
    } tail;
} kl_service_read_args;

/* Serves a read whose barrier passed (read_serve.c); args as the read was started with. */
typedef void (*kl_service_read_fn)(struct kl_service *s, kl_rpc_call *call, kl_node_read_kind kind,
                                   const kl_service_read_args *args);

typedef struct kl_service {
    kl_node *node;
    kl_repl *repl;
    const kl_cluster *cluster;
    const kl_partition *partition;  /* members' client URLs, for NOT_LEADER redirects */
    struct kl_tailer *tailer;       /* data partitions: the catalog tail and its lease */
    uint64_t member_id;             /* this member's number in its partition */
    uint32_t trace_every;           /* keyloadd --repl-trace: batch answers of every N-th index logged; 0 = off */
    const struct kl_keys *keys;     /* NULL, or the keys main loaded (borrowed) */
    struct kl_sessions *sessions;   /* NULL without a member key: Hello refuses */
    kl_rpc_server *client_rpc;      /* the client port, for its connection counters, or NULL */
    kl_store *store;                /* the member's store (backup streams read it) */
    struct kl_backup_streams *backups; /* backup_serve.c's streams, NULL until the first */
    struct kl_member_change *mchange; /* member_serve.c's change in flight, NULL until one */
    uint64_t leader;                /* last known leader id, 0 = unknown */
    uint64_t next_read;             /* read_ctx allocator */
    struct {
        uint64_t ctx;               /* 0 = free slot */
        kl_rpc_call *call;
        kl_node_read_kind kind;     /* which read */
        kl_service_read_fn serve;   /* serves it once the barrier passed */
        kl_service_read_args args;  /* what serve needs of the request */
        int64_t answer_by_ms;       /* monotonic: then UNAVAILABLE read_deadline */
        int64_t started_ms;         /* monotonic: when it was admitted */
    } reads[KL_SERVICE_MAX_READS];  /* reads waiting for their barrier */

    /* Partition 0 only: the catalog version each data partition reported applied in its
     * latest tail (learnt from the tails themselves; reset when leadership moves here). */
    uint64_t catalog_progress[KL_CLUSTER_MAX_PARTITIONS];
    /* CLOCK_BOOTTIME ms: arrival of its latest tail that reported every version applied here */
    int64_t tail_current_ms[KL_CLUSTER_MAX_PARTITIONS];
    int64_t leader_since_ms;         /* CLOCK_BOOTTIME ms: when this member last became leader */
    bool was_leader;
    struct {
        kl_rpc_call *call;           /* NULL = free slot */
        int partition;
        uint64_t applied;
        int64_t until_ms;            /* answer empty at this time */
        bool signed_request;         /* req_sig holds the request's signature (tail_auth.h) */
        uint8_t req_sig[64];
    } tails[KL_SERVICE_MAX_TAILS];
    struct {
        kl_rpc_call *call;           /* NULL = free slot */
        uint64_t version;            /* every data partition must apply this */
        int64_t until_ms;            /* then answer UNAVAILABLE naming the laggards */
        uint8_t *receipt;
        size_t len;
    } barriers[KL_SERVICE_MAX_BARRIERS];
    struct kl_batch_call *batches;   /* batches the node has not answered yet */
    struct {                         /* Hello's X25519 pair, reused for a bounded window */
        uint8_t pk[32], sk[32];
        int64_t made_ms;             /* monotonic ms; 0 = none */
        uint32_t uses;
    } hello_kx;
    struct {                         /* reported by MemberStatus, for make bench */
        uint64_t sealed_requests, session_ns, hellos, hello_ns;
        uint64_t not_leader_batches;  /* Batches refused before decoding: not serving */
    } costs;
    struct {                         /* Hello refusals by detail (session_serve.c) */
        uint64_t unknown_principal, catalog_behind, replayed;
    } hello_refusals;
    uv_timer_t timer;                /* expires parked tails, barriers and batch deadlines */
    bool timer_started;
    uv_timer_t park_timer;           /* serves parked Receives an apply woke, next loop turn */
    bool park_timer_started;
} kl_service;

/* Starts the service's timer on loop (call once before serving); kl_service_stop closes
 * it and answers whatever is parked. */
void kl_service_start(kl_service *s, uv_loop_t *loop);
void kl_service_stop(kl_service *s);

/* Called after every applied entry: wakes tails and barriers waiting for a new catalog
 * version. Cheap when nothing waits. */
void kl_service_applied(kl_service *s);
/* After every applied entry: schedules the parked Receives it woke. */
void kl_service_park_applied(kl_service *s);
/* Leadership moved: forget the progress learnt as leader. */
void kl_service_role(kl_service *s, bool leader);

/* Internal to daemon/rpc. Lease checks (lease.c): */
/* Data partitions: false (call answered UNAVAILABLE "catalog_lease") when this serving
 * leader's catalog lease has run out. */
bool kl_service_check_lease(kl_service *s, kl_rpc_call *call);
/* Data partitions, where an answer carries data out (a confirmed read, a committed Receive's
 * receipt): false (call answered UNAVAILABLE "catalog_lease") when the lease does not hold
 * now, whatever the role. The receipt form passes receipts that deliver no message. */
bool kl_service_lease_holds(kl_service *s, kl_rpc_call *call);
bool kl_service_lease_holds_for_receipt(kl_service *s, kl_rpc_call *call, const uint8_t *receipt, size_t len);
void kl_service_expire_batches(kl_service *s);  /* batch_serve.c */
void kl_service_expire_reads(kl_service *s);    /* read_serve.c */
/* NOT_LEADER with the leader's address, or UNAVAILABLE while leading without commit (reply.c). */
void kl_service_reply_not_leader(kl_service *s, kl_rpc_call *call, const kl_err *err);
/* The catalog's methods and its parked tails and barriers (catalog_serve.c). */
void kl_service_catalog_tick(kl_service *s);   /* expire parked tails and barriers */
void kl_service_catalog_stop(kl_service *s);   /* answer everything parked */
void kl_service_catalog_tail(void *owner, kl_rpc_call *call);
void kl_service_locate_queue(void *owner, kl_rpc_call *call);
void kl_service_show_principal(void *owner, kl_rpc_call *call);
void kl_service_list_catalog(void *owner, kl_rpc_call *call);
/* Backup streams (backup_serve.c): the three methods, the idle/age expiry run by the
 * service timer, and the stop that answers and releases every stream. */
void kl_service_backup_open(void *owner, kl_rpc_call *call);
void kl_service_backup_chunk(void *owner, kl_rpc_call *call);
void kl_service_backup_close(void *owner, kl_rpc_call *call);
void kl_service_backup_tick(kl_service *s);
/* Membership (member_serve.c): the Members and MemberChange methods, the change's steps run
 * by the service timer, and its release at stop. */
void kl_service_members(void *owner, kl_rpc_call *call);
void kl_service_member_change(void *owner, kl_rpc_call *call);
void kl_service_member_tick(kl_service *s);
void kl_service_member_stop(kl_service *s);
void kl_service_backup_stop(kl_service *s);
/* Wipes the Hello key pair (session_serve.c); at stop. */
void kl_service_hello_kx_wipe(kl_service *s);
/* Partition 0: holds a committed catalog batch's answer until every data partition has
 * applied its version; true when the call was taken (held or answered). */
bool kl_service_catalog_hold(kl_service *s, kl_rpc_call *call, const uint8_t *receipt, size_t len);

/* Sessions (session_serve.c). kl_service_hello is the keyload.v1.Hello handler.
 * kl_service_gate: true when the call may run (no session, or its sealed request opened;
 * then its payload is the plaintext and its answer will be sealed); false when it has been
 * answered (refused). kl_service_principal: the call's principal (the session's, else
 * KL_LOCAL_PRINCIPAL). */
void kl_service_hello(void *owner, kl_rpc_call *call);
bool kl_service_gate(kl_service *s, kl_rpc_call *call);
const char *kl_service_principal(const kl_rpc_call *call);
/* Fills st (MemberStatusAnswer.sessions) with the session and connection counters. */
struct Keyload__V1__MemberSessionStatus;
void kl_service_session_status(kl_service *s, struct Keyload__V1__MemberSessionStatus *st);

/* Batches and reads as the native handlers run them, also for Q1 statements (query_serve.c).
 * submit_batch (batch_serve.c): req is copied by the node before it returns; query_alias
 * NULL answers the stored receipt as is (keyload.v1.Batch), else a QueryAnswer carrying it.
 * start_read (read_serve.c): the read-index barrier, then serve(s, call, kind, args), args a
 * copy of what the caller passed (NULL: zeroes); kl_service_serve_read serves the node's
 * read of that kind. */
void kl_service_submit_batch(kl_service *s, kl_rpc_call *call, const uint8_t *req, size_t len,
                             const char *query_alias);
void kl_service_start_read(kl_service *s, kl_rpc_call *call, kl_node_read_kind kind,
                           kl_service_read_fn serve, const kl_service_read_args *args);
void kl_service_serve_read(kl_service *s, kl_rpc_call *call, kl_node_read_kind kind,
                           const kl_service_read_args *args);
/* Answers a QueryAnswer{alias, kind (keyload.v1.QueryResultKind), answer bytes} (reply.c). */
void kl_service_reply_query(kl_rpc_call *call, const char *alias, int kind, const uint8_t *answer,
                            size_t len);
/* keyload.v1.Query (query_serve.c). */
void kl_service_query(void *owner, kl_rpc_call *call);
/* keyload.v1.Batch (batch_serve.c). */
void kl_service_batch(void *owner, kl_rpc_call *call);
/* Evaluates again the parked Receives that are due, under the catalog lease (batch_serve.c). */
void kl_service_park_tick(kl_service *s);
/* The leader's client URL, or NULL when unknown or this member; *leader_out (may be NULL)
 * the leader's id (reply.c). */
const char *kl_service_leader_url(const kl_service *s, uint64_t *leader_out);
/* Whether this member serves its partition now (lease.c). */
bool kl_service_serving(kl_service *s);
/* After every applied entry: wakes the tails waiting for a new catalog version. */
void kl_service_catalog_applied(kl_service *s);

#define KL_SERVICE_DEADLINE_MARGIN_MS 100  /* answer this long before the caller's deadline */

static inline int64_t kl_service_wall_ms(void)
{
    return kl_clock_ms(CLOCK_REALTIME);
}

static inline int64_t kl_service_mono_ms(void)
{
    return kl_clock_ms(CLOCK_MONOTONIC);
}

/* What a method does with partition state; it decides the method's path. */
typedef enum kl_service_access {
    KL_SERVICE_LOCAL,    /* answered from this member's own state (status, session, catalog) */
    KL_SERVICE_READ,     /* the read barrier, then the node's read of the row's kind */
    KL_SERVICE_WRITE,    /* submitted to the node, answered at commit */
    KL_SERVICE_QUERY,    /* a Q1 statement: a read or a write, as the statement says */
} kl_service_access;

/* One row of the method table (service.c). */
typedef struct kl_service_method {
    const char *name;                            /* e.g. "keyload.v1.Batch" */
    const ProtobufCMessageDescriptor *request;   /* the payload's message type */
    kl_rpc_handler handler;                      /* NULL for a READ row */
    bool gated;                                  /* the session gate first (all but Hello) */
    kl_service_access access;
    kl_node_read_kind read;                      /* a READ row's read */
} kl_service_method;
const kl_service_method *kl_service_method_table(size_t *count);

/* The method table, for kl_rpc_server_config. */
const kl_rpc_method *kl_service_methods(size_t *count);

/* Driver callbacks for reads: serve, or answer UNAVAILABLE when dropped. */
void kl_service_read_ready(kl_service *s, uint64_t read_ctx);
void kl_service_read_dropped(kl_service *s, uint64_t read_ctx);
/* Answers every waiting read UNAVAILABLE (shutdown). */
void kl_service_drop_reads(kl_service *s);

#endif
