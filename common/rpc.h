/* rpc: gRPC-style request/answer over nng (DESIGN.md §2, §9).
 *
 * Frames: a request is a packed keyload.v1.Envelope, an answer a packed keyload.v1.Answer.
 *
 * Server: one nng REP socket with `contexts` nng contexts (at least 64), so that many
 * requests are in flight at once. nng threads receive frames and hand them to the
 * owner's libuv loop through one uv_async_t; every handler runs on that loop thread.
 * The server itself answers, without calling a handler: a frame that does not decode
 * (INVALID_ARGUMENT), a frame over max_frame bytes (RESOURCE_EXHAUSTED, detail
 * "limit:MaxFrameBytes"), an unknown method (NOT_FOUND, detail "method"), an expired
 * deadline (DEADLINE_EXCEEDED). A handler must answer each call exactly once, through
 * kl_rpc_reply / kl_rpc_reply_error, either at once or later from the loop thread;
 * the call is freed by that answer.
 *
 * Client: one nng REQ socket per target URL; calls are blocking, thread-safe (each uses
 * its own nng context) and bounded by a timeout. nng's automatic resend is disabled,
 * so one call sends its request once: a retry is always the caller's decision (with a
 * new request and the same command id). */
#ifndef KL_RPC_H
#define KL_RPC_H

#include "common/status.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define KL_RPC_MIN_CONTEXTS 64
#define KL_RPC_DEFAULT_FRAME_LIMIT (4u << 20)

typedef struct kl_rpc_server kl_rpc_server;
typedef struct kl_rpc_call kl_rpc_call;

typedef void (*kl_rpc_handler)(void *owner, kl_rpc_call *call);

typedef struct kl_rpc_method {
    const char *name;              /* e.g. "keyload.v1.Batch" */
    kl_rpc_handler handler;
} kl_rpc_method;

typedef struct kl_rpc_server_config {
    const char *listen_url;        /* e.g. "tcp://127.0.0.1:7400" */
    const kl_rpc_method *methods;  /* borrowed; must outlive the server */
    size_t method_count;
    void *owner;                   /* passed to every handler */
    size_t max_frame;              /* frame limit in bytes (MaxFrameBytes) */
    int contexts;                  /* < KL_RPC_MIN_CONTEXTS is raised to it */
} kl_rpc_server_config;

/* Binds and starts receiving. Must be called on the loop thread. */
kl_code kl_rpc_server_start(uv_loop_t *loop, const kl_rpc_server_config *cfg,
                            kl_rpc_server **out, kl_err *err);
/* Stops receiving, cancels in-flight nng operations, closes the socket and frees the
 * server after every call still held by a handler has been answered or dropped.
 * Calls not yet answered are dropped: their callers see a timeout. Loop thread only. */
void kl_rpc_server_stop(kl_rpc_server *srv);

/* Accessors, valid until the call is answered. */
const char *kl_rpc_call_method(const kl_rpc_call *call);
const uint8_t *kl_rpc_call_payload(const kl_rpc_call *call, size_t *len);
int64_t kl_rpc_call_deadline_ms(const kl_rpc_call *call); /* absolute unix ms; 0 = none */
uint64_t kl_rpc_call_request_id(const kl_rpc_call *call);

/* Answers OK with payload (copied). Frees the call. Loop thread only. */
void kl_rpc_reply(kl_rpc_call *call, const uint8_t *payload, size_t len);
/* Answers err->code with its message and detail; leader_address only with NOT_LEADER. */
void kl_rpc_reply_error(kl_rpc_call *call, const kl_err *err, const char *leader_address);

typedef struct kl_rpc_client kl_rpc_client;

/* Dials url (synchronously, bounded by connect_timeout_ms). UNAVAILABLE if it cannot. */
kl_code kl_rpc_client_open(const char *url, int connect_timeout_ms, size_t max_frame,
                           kl_rpc_client **out, kl_err *err);
void kl_rpc_client_close(kl_rpc_client *c);

/* One request, one answer. On KL_OK *answer (malloc'd, caller frees) holds the payload.
 * A non-OK answer status is returned with err filled from the Answer; with NOT_LEADER
 * the leader's address is copied into leader_out (when not NULL, size leader_cap).
 * When no answer arrives within timeout_ms: KL_DEADLINE_EXCEEDED with detail "no_answer"
 * (the request may have been executed; a mutation caller reports UNKNOWN_WRITE_OUTCOME). */
kl_code kl_rpc_call(kl_rpc_client *c, const char *method, const uint8_t *req, size_t req_len,
                    int timeout_ms, uint8_t **answer, size_t *answer_len, char *leader_out,
                    size_t leader_cap, kl_err *err);

#endif
