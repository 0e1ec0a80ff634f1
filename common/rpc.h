/* rpc: gRPC-style request/answer over nng (ARCHITECTURE.md "Processes", "Sessions and RPC").
 *
 * Frames: a request is a packed keyload.v1.Envelope, an answer a packed keyload.v1.Answer.
 *
 * Server: at most `contexts` calls (at least 64) in flight at once; every handler runs on
 * the owner's libuv loop thread. A tcp:// URL with a numeric address (or * or none) is
 * served by the loop itself (common/rpc_tcp.h: it speaks nng's REQ/REP wire protocol, so
 * clients keep nng REQ sockets); any other URL by one nng REP socket with `contexts` nng
 * contexts, whose threads hand frames to the loop through one uv_async_t.
 * The server itself answers, without calling a handler: a frame that does not decode
 * (INVALID_ARGUMENT), a frame over max_frame bytes (RESOURCE_EXHAUSTED, detail
 * "limit:MaxFrameBytes"), an unknown method (NOT_FOUND, detail "method"), an expired
 * deadline (DEADLINE_EXCEEDED). The first two carry request_id 0 (the server did not
 * read the request's id); the client accepts request_id 0 only on such error answers.
 * Frames over 4 x max_frame never arrive: the connection is closed instead. A handler
 * must answer each call exactly once, through kl_rpc_reply / kl_rpc_reply_error, either
 * at once or later from the loop thread; the call is freed by that answer. Each held
 * call occupies one of the `contexts`, so at most `contexts` calls are in flight.
 *
 * Client: one connection per target URL, many calls in flight on it; calls are blocking
 * (kl_rpc_invoke) or driven by a callback (kl_rpc_op, below), thread-safe and bounded by a
 * timeout. A tcp:// URL with a numeric address uses common/rpc_direct.h (the caller writes
 * the request, one process-wide I/O thread reads answers and runs callbacks); any other URL
 * an nng REQ socket with a context per call. Both send a request once: a retry is always
 * the caller's decision (with a new request and the same command id). After the first
 * connection the client reconnects by itself when the connection drops; a call made while
 * disconnected waits for it up to its timeout and then fails UNAVAILABLE (not sent). The
 * client accepts answers of up to max_frame bytes of payload (plus a few KiB for the
 * Answer's own fields). Callbacks (done) run on the transport's thread (the I/O thread or
 * an nng thread): never block in one on another call's answer. */
#ifndef KL_RPC_H
#define KL_RPC_H

#include "common/limits.h"
#include "common/status.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>


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
    /* Connections: at most max_conns at once (0 = no cap): one more is closed as soon as
     * it is negotiated, before any request is read, and counted. idle_ms (0 = never): a
     * connection with no request in flight and none received for idle_ms is closed and
     * counted (a client's nng socket reconnects by itself when it sends again). */
    int max_conns;
    int idle_ms;
    /* Optional: called on the loop thread with every error answer's code and detail (the
     * detail is the program's fixed string, never client text), e.g. to count refusals. */
    void (*on_refusal)(void *ctx, int code, const char *detail);
    void *refusal_ctx;
} kl_rpc_server_config;

/* Connection counters of a server (any thread): open now, refused over the cap, closed
 * idle, since start. */
typedef struct kl_rpc_conn_stats {
    uint64_t open, refused, idle_closed;
} kl_rpc_conn_stats;
void kl_rpc_server_conn_stats(kl_rpc_server *srv, kl_rpc_conn_stats *out);

/* Binds and starts receiving. Must be called on the loop thread. */
kl_code kl_rpc_server_start(uv_loop_t *loop, const kl_rpc_server_config *cfg,
                            kl_rpc_server **out, kl_err *err);
/* Stops receiving, cancels in-flight nng operations, closes the socket and frees the
 * server after every call still held by a handler has been answered or dropped.
 * Calls not yet answered are dropped: their callers see a timeout. Loop thread only.
 * Call it once. Lifetime: the server is counted by the calls handlers still hold; those
 * stay valid, and answering one after stop frees it without sending anything (its
 * caller sees DEADLINE_EXCEEDED "no_answer"). The memory is released once the last held
 * call is answered and the loop has run the close callback of the server's uv_async
 * handle, so keep running the loop after stop. Safe to call from inside a handler. */
void kl_rpc_server_stop(kl_rpc_server *srv);

/* Writes the answers given so far on the TCP transport now (kl_rpc_tcp_flush), not at the
 * start of the loop's next turn; nng's REP socket sends each answer as it is given. Loop
 * thread. */
void kl_rpc_server_flush(kl_rpc_server *srv);

/* Accessors, valid until the call is answered. */
const char *kl_rpc_call_method(const kl_rpc_call *call);
const uint8_t *kl_rpc_call_payload(const kl_rpc_call *call, size_t *len);
/* Absolute unix ms on this server's wall clock (from the request's relative budget when it
   carries one, so client and server clocks need not agree); 0 = none. */
int64_t kl_rpc_call_deadline_ms(const kl_rpc_call *call);
/* When the server began handling the call (uv_hrtime ns, CLOCK_MONOTONIC): the frame was read
 * then or, behind earlier frames of the same read, shortly before. */
uint64_t kl_rpc_call_arrived_ns(const kl_rpc_call *call);
uint64_t kl_rpc_call_request_id(const kl_rpc_call *call);

/* Session fields of the request (ARCHITECTURE.md "Sessions and RPC"; the Envelope's session_id,
 * counter and sealed): empty/0 when the request carries no session. rpc.c only carries
 * them: checking and opening a session is the owner's (daemon/rpc/service.c). */
const uint8_t *kl_rpc_call_session_id(const kl_rpc_call *call, size_t *len);
uint64_t kl_rpc_call_counter(const kl_rpc_call *call);
const uint8_t *kl_rpc_call_sealed(const kl_rpc_call *call, size_t *len);

/* Seals one answer of a call under its session: code is the answer's status (KL_OK or an
 * error whose detail is `detail`), payload the OK answer's payload (empty for an error).
 * On KL_OK *sealed is malloc'd (rpc.c frees it). A failure turns the answer into an
 * unsealed INTERNAL error. */
typedef kl_code (*kl_rpc_seal_fn)(void *ctx, kl_code code, const char *detail,
                                  const uint8_t *payload, size_t len, uint8_t **sealed,
                                  size_t *sealed_len, kl_err *err);
/* Called exactly once when the call is answered or dropped, after any seal. */
typedef void (*kl_rpc_release_fn)(void *ctx);

/* Puts a call under its session once the owner has opened it: kl_rpc_call_payload returns
 * plaintext from now on (taken: malloc'd, freed with the call; NULL when len is 0), and
 * every answer (OK or error) goes through seal: Answer.sealed holds what seal made,
 * Answer.session_id and Answer.counter repeat the request's, and an OK answer's clear
 * payload is empty. Error code, message and detail stay in clear (they name fields and
 * limits, never data); seal authenticates code and detail. Loop thread, at most once per
 * call. */
void kl_rpc_call_set_session(kl_rpc_call *call, uint8_t *plaintext, size_t len,
                             kl_rpc_seal_fn seal, kl_rpc_release_fn release, void *ctx);
/* The ctx given to kl_rpc_call_set_session, or NULL when the call has no session. */
void *kl_rpc_call_session_ctx(const kl_rpc_call *call);

/* Answers OK with payload (copied). Frees the call. Loop thread only. */
void kl_rpc_reply(kl_rpc_call *call, const uint8_t *payload, size_t len);
/* Answers err->code with its message and detail; leader_address only with NOT_LEADER. */
void kl_rpc_reply_error(kl_rpc_call *call, const kl_err *err, const char *leader_address);

typedef struct kl_rpc_client kl_rpc_client;

/* Dials url (synchronously, bounded by connect_timeout_ms). UNAVAILABLE if it cannot.
 * connect_timeout_ms 0 waits for the first attempt's end (the OS decides for a host name;
 * a numeric address bounds one attempt at 5 s); < 0 does not wait at all (the
 * connection is made in the background, and a call waits for it up to its own timeout:
 * UNAVAILABLE "no_connection", not sent); max_frame 0 means KL_RPC_DEFAULT_FRAME_LIMIT. */
kl_code kl_rpc_client_open(const char *url, int connect_timeout_ms, size_t max_frame,
                           kl_rpc_client **out, kl_err *err);
void kl_rpc_client_close(kl_rpc_client *c);

/* One request, one answer. On KL_OK *answer (malloc'd, caller frees) holds the payload;
 * it is never NULL on KL_OK, even for an empty payload (*answer_len 0).
 * A non-OK answer status is returned with err filled from the Answer; with NOT_LEADER
 * the leader's address is copied into leader_out (when not NULL, size leader_cap).
 * When no answer arrives within timeout_ms: KL_DEADLINE_EXCEEDED with detail "no_answer"
 * (the request may have been executed; a mutation caller reports UNKNOWN_WRITE_OUTCOME).
 * A connection lost after the request was sent is reported the same way, because the
 * outcome is just as unknown. KL_UNAVAILABLE means the request was not sent.
 * (Named kl_rpc_invoke, not kl_rpc_call: C forbids a function with the name of the
 * kl_rpc_call typedef above.) */
kl_code kl_rpc_invoke(kl_rpc_client *c, const char *method, const uint8_t *req, size_t req_len,
                      int timeout_ms, uint8_t **answer, size_t *answer_len, char *leader_out,
                      size_t leader_cap, kl_err *err);

/* The asynchronous form of kl_rpc_invoke / kl_rpc_invoke_session: one exchange at a time
 * per op, completed by the transport's callback instead of a waiting thread. done(arg) runs
 * once per successful kl_rpc_op_start (or kl_rpc_sleep_start), on the transport's thread
 * (rpc_direct's I/O thread, which also runs every pause, or an nng thread); it may start
 * the op again. kl_rpc_op_result then gives exactly what the blocking call would have
 * returned (same codes and details: UNAVAILABLE = not sent, DEADLINE_EXCEEDED "no_answer"
 * = the outcome is unknown). kl_rpc_op_cancel ends the exchange in flight early: before
 * the send it is UNAVAILABLE "cancelled" (not sent), after it DEADLINE_EXCEEDED
 * "no_answer". kl_rpc_op_free waits for a callback still running: never call it from
 * done. */
typedef struct kl_rpc_op kl_rpc_op;
typedef void (*kl_rpc_op_done)(void *arg);
typedef struct kl_rpc_session_request kl_rpc_session_request;
typedef struct kl_rpc_session_answer kl_rpc_session_answer;
kl_code kl_rpc_op_new(kl_rpc_op_done done, void *arg, kl_rpc_op **out, kl_err *err);
void kl_rpc_op_free(kl_rpc_op *op);
/* sess NULL: a clear request (req, req_len); else a request under a session (req unused).
 * Errors before anything was sent are returned here, and done is not called. */
kl_code kl_rpc_op_start(kl_rpc_op *op, kl_rpc_client *c, const char *method, const uint8_t *req,
                        size_t req_len, const kl_rpc_session_request *sess, int timeout_ms,
                        kl_err *err);
void kl_rpc_op_cancel(kl_rpc_op *op);
/* The calling thread's ops started until the matching uncork are written together at it
 * (kl_rpc_direct_cork: the direct transport only; nng's sends are not held). Nests. */
void kl_rpc_cork(void);
void kl_rpc_uncork(void);
/* The answer of the exchange just done (as kl_rpc_invoke; sess_out as
 * kl_rpc_invoke_session, NULL for a clear request). */
kl_code kl_rpc_op_result(kl_rpc_op *op, uint8_t **answer, size_t *answer_len,
                         kl_rpc_session_answer *sess_out, char *leader_out, size_t leader_cap,
                         kl_err *err);
/* done(arg) after ms (or at once when cancelled): an op's pause between two exchanges. */
void kl_rpc_sleep_start(kl_rpc_op *op, int ms);

/* The session fields of a request (ARCHITECTURE.md "Sessions and RPC"): the Envelope carries them
 * and `sealed` instead of a clear payload. Pointers are borrowed for the call. */
#define KL_RPC_SESSION_ID_LEN 16
struct kl_rpc_session_request {
    const uint8_t *session_id;       /* KL_RPC_SESSION_ID_LEN bytes */
    size_t session_id_len;
    uint64_t counter;
    const uint8_t *sealed;
    size_t sealed_len;
};

/* The session fields of an Answer. sealed is malloc'd (NULL when the Answer carried none);
 * release with kl_rpc_session_answer_free. */
struct kl_rpc_session_answer {
    uint8_t session_id[KL_RPC_SESSION_ID_LEN]; /* valid when session_id_len is 16 */
    size_t session_id_len;
    uint64_t counter;
    uint8_t *sealed;
    size_t sealed_len;
};

void kl_rpc_session_answer_free(kl_rpc_session_answer *a);

/* kl_rpc_invoke for a request under a session: sends an Envelope with req's session_id,
 * counter and sealed and no clear payload. Statuses as kl_rpc_invoke. Whenever an Answer
 * arrived and decoded (KL_OK or its error status), *out holds its session fields, so the
 * caller can open an OK answer's seal or check an error's; otherwise *out is empty. rpc.c
 * opens nothing: the seal is the caller's (common/session.h). An OK Answer with a clear
 * payload is refused (UNAUTHENTICATED "clear_payload"). *out needs
 * kl_rpc_session_answer_free in every case. */
kl_code kl_rpc_invoke_session(kl_rpc_client *c, const char *method,
                              const kl_rpc_session_request *req, int timeout_ms,
                              kl_rpc_session_answer *out, char *leader_out, size_t leader_cap,
                              kl_err *err);

#endif
