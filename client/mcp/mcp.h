/* mcp: what the files of keyload-mcp share (ARCHITECTURE.md "Processes").
 *
 * keyload-mcp is a stdio MCP server: JSON-RPC 2.0, one message per line on stdin, one
 * answer per line on stdout (nothing else ever goes there), logs on stderr. Its tools are
 * the public operations of libkeyload; a tool's result is the SDK's canonical JSON (the
 * object `keyload --json` prints for the same operation), as text and as structuredContent.
 *
 * Files: main.c (environment, the bounded line loop), jsonrpc.c (framing, the MCP methods),
 * tools.c (the tool table machinery: schemas, argument checks, dispatch, the SDK client),
 * tools_queue.c (queues, messages, principals, databases), tools_transfer.c (transfers),
 * tools_status.c (the members' status), tools_query.c (Q1 statements).
 *
 * Errors, split by who is at fault: a malformed line, an unknown method, an unknown
 * tool and arguments that do not match the tool's inputSchema are JSON-RPC errors; anything
 * the SDK or a member refuses (any kl_code but KL_OK) is a tool result with isError true and
 * {"error":{"code","message","detail"}} (kl_error_to_json). Tokens, keys and message bodies
 * never reach a log line or an error message. */
#ifndef KL_MCP_H
#define KL_MCP_H

#include "client/keyload.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* The longest request line read (bytes, newline excluded); a longer one is refused with a
 * JSON-RPC error and skipped, and the server goes on reading. */
#define MCP_MAX_LINE_BYTES (4u << 20)
/* Bounds on tool arguments, checked before any SDK call. */
#define MCP_MAX_ARRAY_ITEMS 1000
#define MCP_MAX_MAP_ENTRIES 256

/* JSON-RPC 2.0 error codes. */
#define MCP_PARSE_ERROR (-32700)
#define MCP_INVALID_REQUEST (-32600)
#define MCP_METHOD_NOT_FOUND (-32601)
#define MCP_INVALID_PARAMS (-32602)
#define MCP_INTERNAL_ERROR (-32603)

#define MCP_SERVER_NAME "keyload-mcp"
#define MCP_SERVER_VERSION "0.7.0"

/* Where and as whom the tools act: the CLI's environment (client/cli/main.c). */
typedef struct mcp_config {
    const char *cluster;   /* KEYLOAD_CLUSTER (default deploy/local-rf3.json) */
    const char *database;  /* KEYLOAD_DATABASE (default default/default) */
    const char *principal; /* KEYLOAD_PRINCIPAL (NULL: unsealed requests) */
    const char *key;       /* KEYLOAD_KEY */
    int timeout_ms;        /* KEYLOAD_TIMEOUT_MS (default KL_DEFAULT_TIMEOUT_MS) */
} mcp_config;

/* The server's state. The SDK client is opened on the first tool call and kept (it holds
 * the sessions with the members), closed by mcp_server_close. */
typedef struct mcp_server {
    mcp_config cfg;
    kl_client *client;
    bool initialized;     /* an initialize was answered */
    char protocol[16];    /* the negotiated protocolVersion */
} mcp_server;

/* A JSON-RPC error to answer instead of a result: code and a message naming what is wrong
 * (never an argument's value). */
typedef struct mcp_rpc_error {
    int code;
    char message[256];
} mcp_rpc_error;

/* Sets e and returns false, so callers can `return mcp_rpc_fail(...)`. */
bool mcp_rpc_fail(mcp_rpc_error *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- jsonrpc.c */
/* Handles one request line (len bytes, no newline): writes at most one answer line to out
 * (none for notifications and for answers the client sends). Returns false only when out
 * can no longer be written (the host went away). */
bool mcp_handle_line(mcp_server *s, FILE *out, const char *line, size_t len);
/* Writes the JSON-RPC error answer {id: null} for a line that could not be read (too long).
 * Returns false when out can no longer be written. */
bool mcp_write_error(FILE *out, json_t *id, int code, const char *message);

/* ---- tools.c */
/* The tools/list result: {"tools":[{name, description, inputSchema, annotations}...]}.
 * NULL when out of memory. */
json_t *mcp_tools_list(void);
/* Runs tools/call with its params ({name, arguments}). On true *result is the
 * CallToolResult (a tool failure included, with isError true); on false e is the JSON-RPC
 * error (unknown tool, arguments not matching the schema). */
bool mcp_tools_call(mcp_server *s, const json_t *params, json_t **result, mcp_rpc_error *e);
void mcp_server_close(mcp_server *s);

/* ---- the tool table (tools.c runs it; tools_*.c fill it) */

typedef enum mcp_arg_type {
    MCP_ARG_STRING,
    MCP_ARG_INTEGER,      /* a JSON integer within [min, max] */
    MCP_ARG_INTEGER_OR_NULL, /* the same or JSON null (schema type ["integer", "null"]): null
                              * says "set to none", which leaving the argument out cannot */
    MCP_ARG_BOOLEAN,
    MCP_ARG_STRING_ARRAY, /* at most MCP_MAX_ARRAY_ITEMS strings */
    MCP_ARG_STRING_MAP,   /* an object of at most MCP_MAX_MAP_ENTRIES string values */
} mcp_arg_type;

typedef struct mcp_arg {
    const char *name;
    mcp_arg_type type;
    bool required;
    const char *description;
    int64_t min, max;             /* MCP_ARG_INTEGER(_OR_NULL) only; both 0: [0, INT64_MAX] */
    const char *const *choices;   /* MCP_ARG_STRING: NULL-terminated enum, or NULL */
    size_t min_items;             /* MCP_ARG_STRING_ARRAY */
} mcp_arg;

/* A mutation tool adds its mutation(s) to b; tools.c creates b under the optional argument
 * command_id, sends it and answers its receipt (kl_receipt_to_json). */
typedef kl_code (*mcp_build_fn)(kl_client *c, kl_batch *b, const json_t *args, kl_err *err);
/* What a read tool gets besides its arguments: the SDK client (NULL for a tool that does
 * not need one) and the server's configuration. */
typedef struct mcp_call {
    kl_client *client;
    const mcp_config *cfg;
} mcp_call;
/* A read tool answers one canonical JSON object (*json, malloc'd, the caller frees it). */
typedef kl_code (*mcp_read_fn)(const mcp_call *call, const json_t *args, char **json, kl_err *err);

typedef struct mcp_tool {
    const char *name;
    const char *description;
    const mcp_arg *args;  /* terminated by an entry with name NULL */
    mcp_build_fn build;   /* exactly one of build and read */
    mcp_read_fn read;
    bool needs_client;    /* false: runs without an SDK client (token describe, status) */
    bool read_may_write;  /* a read tool whose call can still write (query: a mutating
                           * CALL), so it is not announced read-only */
} mcp_tool;

/* The tool groups, each a table terminated by an entry with name NULL. */
extern const mcp_tool mcp_queue_tools[];
extern const mcp_tool mcp_transfer_tools[];
extern const mcp_tool mcp_status_tools[];
extern const mcp_tool mcp_query_tools[];

/* Argument accessors for handlers; the arguments were checked against the schema first, so
 * a present argument has its declared type. */
const char *mcp_arg_str(const json_t *args, const char *name);   /* NULL when absent */
bool mcp_arg_int(const json_t *args, const char *name, int64_t *out); /* false when absent */
bool mcp_arg_bool(const json_t *args, const char *name, bool dflt);
bool mcp_arg_null(const json_t *args, const char *name); /* present and JSON null */
/* A base64 argument decoded; INVALID_ARGUMENT "usage" (a JSON-RPC invalid params error)
 * naming the argument, never its text, when it is not canonical base64. *out malloc'd. */
kl_code mcp_arg_b64(const json_t *args, const char *name, uint8_t **out, size_t *len,
                    kl_err *err);
/* The message of enqueue and transfer_create: body (+ body_encoding), headers, fields,
 * delay_ms, expires_at_unix_ms. *out belongs to the caller (kl_message_free). */
kl_code mcp_message_from_args(const json_t *args, kl_message **out, kl_err *err);

#endif
