/* service: the daemon's RPC method table. Decodes nothing itself beyond routing: each
 * handler passes the payload to the node (daemon/node.h) and turns its answer into an
 * RPC answer. Until KL-3 every caller acts as the fixed local principal. */
#ifndef KL_SERVICE_H
#define KL_SERVICE_H

#include "common/rpc.h"
#include "daemon/node.h"

#define KL_LOCAL_PRINCIPAL "local"

typedef struct kl_service {
    kl_node *node;
    uint64_t calls_in_flight;
} kl_service;

/* The method table, for kl_rpc_server_config. */
const kl_rpc_method *kl_service_methods(size_t *count);

#endif
