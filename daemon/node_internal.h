/* node_internal: the node's state and the helpers its files share. The node is one module
 * in four files: node.c (entries, apply, flush, leadership, the catalog tail, open and
 * close), node_ctx.c (who a request acts as, its limits, and the one evaluation context),
 * node_submit.c (the write path: kl_node_submit_batch as a pipeline of named steps) and
 * node_read.c (the reads over applied state). Only daemon/node*.c include this header.
 * Threading: the executor (the libuv loop thread), as node.h. */
#ifndef KL_NODE_INTERNAL_H
#define KL_NODE_INTERNAL_H

#include "daemon/node.h"

#include "common/canon.h"
#include "common/pb_arena.h"
#include "daemon/engine/access.h"
#include "daemon/engine/claims.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/subject_cache.h"
#include "daemon/entry_clock.h"
#include "daemon/park.h"
#include "keyload/v1/store.pb-c.h"

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* kl_node_flush keeps its entry buffer between entries up to this size. */
#define KL_NODE_ENTRY_KEEP_BYTES (1u << 20)
/* The apply arena keeps at most this much between entries. */
#define KL_NODE_APPLY_ARENA_KEEP_BYTES (1u << 20)

typedef struct waiter {
    kl_node_reply_fn fn;
    void *cookie;
} waiter;

/* A proposed, not yet applied batch. */
typedef struct pending {
    char *principal;
    uint8_t command_id[16];
    uint8_t digest[KL_DIGEST_LEN];
    int64_t first_sent_ms;       /* the batch's first_sent_unix_ms (0 = not given) */
    uint64_t index, term;
    uint8_t *receipt;
    size_t receipt_len;
    bool refused;                /* a committed refusal: callers get `refusal` */
    kl_err refusal;
    bool answered;               /* committed and its callers answered (kl_node_committed);
                                  * kept until the apply so that a retry is answered the same */
    bool at_apply;               /* changes the catalog: answered only at its apply, since
                                  * catalog lookups (LocateQueue, ShowPrincipal, ListCatalog)
                                  * read applied state without a read barrier */
    waiter *waiters;
    size_t n_waiters, cap_waiters;
} pending;

/* One batch's write-set as the leader built it, owning its bytes: the leader applies its own
 * entries from these rather than decoding what it proposed. `ws` is first, so a
 * Keyload__V1__WriteSet * taken from it is also the node_ws *. */
typedef struct node_ws {
    Keyload__V1__WriteSet ws;
    Keyload__V1__KvOp *ops;
    Keyload__V1__KvOp **opp;
    uint8_t *blob;               /* principal, ids, receipt, keys and values */
} node_ws;

/* A LogEntry of the leader's own: the group being filled, or one proposed and not applied. */
typedef struct node_entry {
    uint64_t index, term;
    int64_t time_ms;
    Keyload__V1__WriteSet **sets;  /* each a node_ws */
    size_t n, cap;
} node_entry;

struct kl_node {
    kl_store *store;
    kl_node_config cfg;
    kl_node_io io;
    kl_overlay overlay;          /* writes of every pending batch, owner = entry index */
    pending *pend;
    size_t n_pend, cap_pend;
    /* Invariant I-NODE-14: while a waiter of the pending table is being answered, nothing
     * adds to the table (the loops answering it compact it in place). Callers get their
     * answer through the RPC server, which never runs a handler on that stack. */
    bool answering;
    kl_entry_clock clock;        /* partition time: the latest entry time and its reference */
    bool serving;                /* leader whose own-term entry is committed and applied */
    uint64_t pinc_proposed;      /* index of our incarnation proposal, 0 = none pending */
    bool broken;
    uint64_t authz_requests, authz_ns;  /* for MemberStatus (make bench) */
    kl_signing_cache signing;    /* derived database signing keys (wiped at close) */
    kl_subject_cache *subjects;  /* decoded principals and databases per catalog version */
    /* The group: batches evaluated since the last proposal, one entry at group.index. Its
     * writes are in `overlay` (owner group.index) so later batches see them; group_undo
     * keeps the overlay entries they replaced, restored if the proposal fails. */
    node_entry group;            /* open while group.n > 0 */
    kl_buf group_bytes;          /* its write-sets encoded, each as LogEntry field 5 */
    kl_buf entry_bytes;          /* kl_node_flush's encoded entry, reused (the proposal copies it) */
    kl_pb_arena apply_arena;     /* a received entry's decode, dropped after its apply */
    kl_overlay group_undo;
    node_entry *proposed;        /* own entries proposed, not applied yet, in index order */
    size_t n_proposed, cap_proposed;
    kl_node_costs costs;
    kl_node_transfer_counts xfer; /* bumped on apply (node.c note_transfers) */
    kl_scan_hints hints;         /* where evaluation scans seek (engine/view.h), kept on apply */
    kl_park park;                /* Receives waiting for messages (park.h) */
    kl_read_cache reads;         /* applied queue names and meta records (engine/view.h) */
    /* Outcome sweep pacing (node_submit.c batch_retention), partition time. */
    int64_t retain_sweep_next_ms;
    bool retain_sweep_full;
};

/* Who a request acts as (ARCHITECTURE.md "Engine"): the principal's record in this partition's catalog
 * as applied (and proposed) here, never anything the request claims. */
typedef struct node_subject {
    kl_authz_subject subject;
    /* Borrowed from n->subjects until the next principal lookup; NULL for the local
     * administrator. */
    const Keyload__V1__CatalogPrincipal *record;
    const kl_authz_subject *who;            /* &subject, or NULL: the trusted local administrator */
    uint64_t policy_epoch;                  /* 0 for the local administrator */
} node_subject;

static inline uint64_t node_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* node.c */
int64_t node_entry_time(kl_node *n);
void node_pending_free(pending *p);
/* Gives one caller pending batch p's committed result: its refusal, or OK with its receipt. */
void node_pending_reply(const pending *p, kl_node_reply_fn fn, void *cookie);
pending *node_pending_find(kl_node *n, const char *principal, const uint8_t cmd[16]);
int node_pending_add_waiter(pending *p, kl_node_reply_fn fn, void *cookie);
node_ws *node_ws_build(const char *principal, const uint8_t *cmd, const uint8_t *digest,
                       uint64_t policy_epoch, const kl_buf *receipt, const kl_overlay *scratch,
                       uint64_t catalog_version);
void node_ws_free(Keyload__V1__WriteSet *w);
kl_code node_ws_pack(const Keyload__V1__WriteSet *w, kl_buf *out, kl_err *err);

/* node_ctx.c */
kl_code node_database_limits(kl_node *n, kl_view *v, const char *tenant, const char *db,
                             kl_limits *out, kl_err *err);
kl_code node_subject_load(kl_node *n, kl_view *v, const char *principal,
                          const Keyload__V1__BatchRequest *b, node_subject *out, kl_err *err);
void node_subject_free(node_subject *s);
kl_eval_ctx node_eval_ctx(kl_node *n, kl_view *view, const kl_limits *limits,
                          const node_subject *subj, int64_t now_ms);

#endif
