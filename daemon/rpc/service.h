/* service: the daemon's RPC method table. Each handler passes the payload to the node
 * (daemon/node.h) and turns its answer into an RPC answer; a member that does not lead
 * answers NOT_LEADER with the leader's client address when it knows it. Reads (QueueStats)
 * pass the read-index barrier first (DESIGN.md §3): they are served from applied state only
 * once this member has confirmed it still leads and has applied up to the commit index.
 * Until KL-3 every caller acts as the fixed local principal. */
#ifndef KL_SERVICE_H
#define KL_SERVICE_H

#include "common/cluster.h"
#include "common/rpc.h"
#include "daemon/node.h"
#include "daemon/repl/driver.h"

#define KL_LOCAL_PRINCIPAL "local"
#define KL_SERVICE_MAX_READS 256

typedef struct kl_service {
    kl_node *node;
    kl_repl *repl;
    const kl_partition *partition;  /* members' client URLs, for NOT_LEADER redirects */
    uint64_t leader;                /* last known leader id, 0 = unknown */
    uint64_t next_read;             /* read_ctx allocator */
    struct {
        uint64_t ctx;               /* 0 = free slot */
        kl_rpc_call *call;
    } reads[KL_SERVICE_MAX_READS];  /* reads waiting for their barrier */
} kl_service;

/* The method table, for kl_rpc_server_config. */
const kl_rpc_method *kl_service_methods(size_t *count);

/* Driver callbacks for reads: serve, or answer UNAVAILABLE when dropped. */
void kl_service_read_ready(kl_service *s, uint64_t read_ctx);
void kl_service_read_dropped(kl_service *s, uint64_t read_ctx);
/* Answers every waiting read UNAVAILABLE (shutdown). */
void kl_service_drop_reads(kl_service *s);

#endif
