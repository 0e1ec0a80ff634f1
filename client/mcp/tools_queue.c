/* tools_queue: keyload-mcp's tools for queues, messages, leases, databases and principals,
 * each mirroring a `keyload` command (client/cli/cmd_queue.c, cmd_message.c, cmd_lease.c,
 * cmd_database.c, cmd_principal.c) and answering the same canonical JSON as `--json`.
 * Differences from the CLI, because a tool call is not a command line: a lane is its own
 * argument (not QUEUE/LANE), headers are an object, and a new principal's key is given as
 * its public key (base64): the secret key never passes through the MCP server. */
#include "client/mcp/mcp.h"

#include <stdlib.h>
#include <string.h>

#define U32_MAX_ 4294967295LL

static const char *const roles[] = {"none", "database-admin", "cluster-admin", NULL};
static const char *const permissions[] = {"QueuePublish", "QueueConsume", "QueueAck",
                                          "QueueInspect", "Query", NULL};
static const char *const encodings[] = {"utf8", "base64", NULL};

#define QUEUE_ARG(req) {"queue", MCP_ARG_STRING, req, "queue name", 0, 0, NULL, 0}
#define LANE_ARG {"lane", MCP_ARG_STRING, false, "lane (default: \"default\")", 0, 0, NULL, 0}
#define END_ARG {NULL, 0, false, NULL, 0, 0, NULL, 0}
#define MESSAGE_ARGS                                                                              \
    {"body", MCP_ARG_STRING, true, "the message body (UTF-8 text, or base64 with body_encoding " \
                                   "\"base64\")", 0, 0, NULL, 0},                                \
    {"body_encoding", MCP_ARG_STRING, false, "how body is written (default utf8)", 0, 0,        \
     encodings, 0},                                                                               \
    {"headers", MCP_ARG_STRING_MAP, false, "string headers {key: value}", 0, 0, NULL, 0},       \
    {"fields", MCP_ARG_STRING_ARRAY, false,                                                       \
     "typed fields as the CLI writes them: \"k=v\" (string), \"k:int=5\", \"k:double=1.5\", "    \
     "\"k:bool=true\", \"k:bytes=BASE64\"", 0, 0, NULL, 0},                                       \
    {"delay_ms", MCP_ARG_INTEGER, false, "visibility delay in ms", 0, 0, NULL, 0},              \
    {"expires_at_unix_ms", MCP_ARG_INTEGER, false, "absolute expiry (unix ms; 0 = never)", 0,   \
     0, NULL, 0}
#define LIMIT_ARGS                                                                                \
    {"max_scan_records", MCP_ARG_INTEGER, false, "MaxScanRecords (0: the cluster's)", 0, 0,     \
     NULL, 0},                                                                                    \
    {"max_batch_bytes", MCP_ARG_INTEGER, false, "MaxBatchBytes (0: the cluster's)", 0, 0, NULL, \
     0},                                                                                          \
    {"max_query_read_bytes", MCP_ARG_INTEGER, false, "MaxQueryReadBytes (0: the cluster's)", 0, \
     0, NULL, 0},                                                                                 \
    {"max_transfer_accept_attempts", MCP_ARG_INTEGER_OR_NULL, false,                              \
     "MaxQueueTransferAcceptAttempts, null for none (database_create: absent is null; "         \
     "database_limits: absent keeps it, null removes it)", 1, INT64_MAX, NULL, 0}

/* ---------------------------------------------------------------- shared builders */

kl_code mcp_message_from_args(const json_t *args, kl_message **out, kl_err *err)
{
    *out = NULL;
    const char *body = mcp_arg_str(args, "body"), *enc = mcp_arg_str(args, "body_encoding");
    uint8_t *raw = NULL;
    size_t len = strlen(body);
    kl_code rc;
    if (enc != NULL && strcmp(enc, "base64") == 0) {
        if ((rc = mcp_arg_b64(args, "body", &raw, &len, err)) != KL_OK)
            return rc;
        rc = kl_message_new(raw, len, out, err);
        free(raw);
    } else {
        rc = kl_message_new(body, len, out, err);
    }
    const json_t *headers = json_object_get(args, "headers");
    const char *k;
    json_t *v;
    if (rc == KL_OK && headers != NULL)
        json_object_foreach((json_t *)headers, k, v)
            if (rc == KL_OK)
                rc = kl_message_add_header(*out, k, json_string_value(v), err);
    const json_t *fields = json_object_get(args, "fields");
    for (size_t i = 0; rc == KL_OK && i < json_array_size(fields); i++)
        rc = kl_message_parse_field(*out, json_string_value(json_array_get(fields, i)), err);
    int64_t n;
    if (rc == KL_OK && mcp_arg_int(args, "delay_ms", &n))
        rc = kl_message_set_delay(*out, n, err);
    if (rc == KL_OK && mcp_arg_int(args, "expires_at_unix_ms", &n))
        rc = kl_message_set_expiry(*out, n, err);
    if (rc != KL_OK) {
        kl_message_free(*out);
        *out = NULL;
    }
    return rc;
}

static void limits_from_args(const json_t *args, kl_database_limits *l)
{
    int64_t n;
    memset(l, 0, sizeof *l);
    if (mcp_arg_int(args, "max_scan_records", &n))
        l->max_scan_records = (uint64_t)n;
    if (mcp_arg_int(args, "max_batch_bytes", &n))
        l->max_batch_bytes = (uint64_t)n;
    if (mcp_arg_int(args, "max_query_read_bytes", &n))
        l->max_query_read_bytes = (uint64_t)n;
    if (mcp_arg_int(args, "max_transfer_accept_attempts", &n)) {
        l->has_max_queue_transfer_accept_attempts = true;
        l->max_queue_transfer_accept_attempts = (uint64_t)n;
    }
}

/* A principal's Ed25519 public key: base64 of exactly 32 bytes. */
static kl_code public_key_arg(const json_t *args, uint8_t pk[32], kl_err *err)
{
    uint8_t *raw;
    size_t len;
    kl_code rc = mcp_arg_b64(args, "public_key", &raw, &len, err);
    if (rc != KL_OK)
        return rc;
    if (len != 32)
        rc = kl_fail(err, KL_INVALID_ARGUMENT, "usage",
                     "argument public_key must be the base64 of a 32-byte Ed25519 public key");
    else
        memcpy(pk, raw, 32);
    free(raw);
    return rc;
}

/* ---------------------------------------------------------------- queues and messages */

static kl_code queue_create(kl_client *c, kl_batch *b, const json_t *args, kl_err *err)
{
    (void)c;
    kl_queue_options o = {0};
    int64_t n;
    if (mcp_arg_int(args, "partition", &n)) {
        o.pin_partition = true;
        o.partition = (int32_t)n;
    }
    if (mcp_arg_int(args, "max_messages", &n))
        o.max_messages = (uint64_t)n;
    if (mcp_arg_int(args, "max_bytes", &n))
        o.max_bytes = (uint64_t)n;
    if (mcp_arg_int(args, "max_deliveries", &n))
        o.max_deliveries = (uint32_t)n;
    o.dead_letter_queue = mcp_arg_str(args, "dead_letter_queue");
    return kl_batch_create_queue(b, mcp_arg_str(args, "queue"), &o, err);
}

static kl_code queue_delete(kl_client *c, kl_batch *b, const json_t *args, kl_err *err)
{
    (void)c;
    return kl_batch_delete_queue(b, mcp_arg_str(args, "queue"), err);
}

static kl_code queue_stats(const mcp_call *call, const json_t *args, char **json, kl_err *err)
{
    kl_client *c = call->client;
    const char *queue = mcp_arg_str(args, "queue");
    Keyload__V1__QueueStatsAnswer *s;
    kl_code rc = kl_client_queue_stats(c, queue, &s, err);
    if (rc != KL_OK)
        return rc;
    *json = kl_queue_stats_to_json(queue, s, 0);
    kl_queue_stats_free(s);
    return *json ? KL_OK : kl_fail(err, KL_INTERNAL, "oom", "out of memory");
}

static kl_code enqueue(kl_client *c, kl_batch *b, const json_t *args, kl_err *err)
{
    (void)c;
    kl_message *m;
    kl_code rc = mcp_message_from_args(args, &m, err);
    if (rc == KL_OK)
        rc = kl_batch_enqueue(b, mcp_arg_str(args, "queue"), mcp_arg_str(args, "lane"), m, err);
    kl_message_free(m);
    return rc;
}

static kl_code receive(kl_client *c, kl_batch *b, const json_t *args, kl_err *err)
{
    (void)c;
    /* the CLI's defaults: one message, the daemon's lease, no wait */
    int64_t max = 1, lease_ms = 0, wait_ms = 0;
    mcp_arg_int(args, "max", &max);
    mcp_arg_int(args, "lease_ms", &lease_ms);
    mcp_arg_int(args, "wait_ms", &wait_ms);
    return kl_batch_receive_wait(b, mcp_arg_str(args, "queue"), mcp_arg_str(args, "lane"),
                                 (uint32_t)max, (uint32_t)lease_ms, (uint32_t)wait_ms, err);
}

/* ack and release: the lease tokens (base64) decoded, then one mutation. */
static kl_code leases(kl_batch *b, const json_t *args, bool ack, kl_err *err)
{
    const json_t *a = json_object_get(args, "lease_tokens");
    size_t n = json_array_size(a);
    kl_bytes *t = calloc(n ? n : 1, sizeof *t);
    if (t == NULL)
        return kl_fail(err, KL_INTERNAL, "oom", "out of memory");
    kl_code rc = KL_OK;
    for (size_t i = 0; rc == KL_OK && i < n; i++) {
        uint8_t *raw;
        size_t len;
        if (kl_base64_decode("lease_tokens", json_string_value(json_array_get(a, i)), &raw, &len,
                             err) != KL_OK)
            rc = kl_fail(err, KL_INVALID_ARGUMENT, "usage",
                         "argument lease_tokens[%zu] must be canonical base64", i);
        else
            t[i] = (kl_bytes){raw, len};
    }
    if (rc == KL_OK)
        rc = ack ? kl_batch_ack(b, mcp_arg_str(args, "queue"), t, n, err)
                 : kl_batch_release(b, mcp_arg_str(args, "queue"), t, n, err);
    for (size_t i = 0; i < n; i++)
        free((void *)t[i].data);
    free(t);
    return rc;
}

static kl_code ack(kl_client *c, kl_batch *b, const json_t *args, kl_err *err)
{
    (void)c;
    return leases(b, args, true, err);
}

static kl_code release(kl_client *c, kl_batch *b, const json_t *args, kl_err *err)
{
    (void)c;
    return leases(b, args, false, err);
}

/* ---------------------------------------------------------------- databases */

static kl_code database_create(kl_client *c, kl_batch *b, const json_t *args, kl_err *err)
{
    kl_database_limits l;
    limits_from_args(args, &l);
    const char *db = mcp_arg_str(args, "database");
    return kl_batch_create_database(b, db ? db : kl_client_database(c), &l, err);
}

/* Changes only the limits given (the daemon merges them into the stored ones). */
static kl_code database_limits(kl_client *c, kl_batch *b, const json_t *args, kl_err *err)
{
    (void)c;
    static const struct {
        const char *name;
        uint32_t bit;
    } named[] = {{"max_scan_records", KL_DB_FIELD_SCAN_RECORDS},
                 {"max_batch_bytes", KL_DB_FIELD_BATCH_BYTES},
                 {"max_query_read_bytes", KL_DB_FIELD_QUERY_READ_BYTES},
                 {"max_transfer_accept_attempts", KL_DB_FIELD_ACCEPT_ATTEMPTS}};
    kl_database_limits l;
    limits_from_args(args, &l);
    uint32_t fields = 0;
    int64_t n;
    /* null names the field with no value: limits_from_args left it unset, so the daemon
     * merges "none" into the stored limits (the CLI's --max-transfer-accept-attempts null). */
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        if (mcp_arg_int(args, named[i].name, &n) || mcp_arg_null(args, named[i].name))
            fields |= named[i].bit;
    if (fields == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "limits",
                       "name at least one limit to change (database_show reads the current ones)");
    return kl_batch_change_database_limits(b, &l, fields, err);
}

/* One ListCatalog page of `kind` as `keyload ... list --json` prints it. */
static kl_code list_page(const mcp_call *call, const json_t *args, Keyload__V1__CatalogListKind kind,
                         const char *database, char **json, kl_err *err)
{
    int64_t max = 0;
    mcp_arg_int(args, "max", &max);
    uint8_t *cursor = NULL;
    size_t cursor_len = 0;
    const char *ct = mcp_arg_str(args, "cursor");
    kl_code rc = ct != NULL && ct[0] != '\0' ? mcp_arg_b64(args, "cursor", &cursor, &cursor_len, err) : KL_OK;
    Keyload__V1__ListCatalogAnswer *a = NULL;
    if (rc == KL_OK)
        rc = kl_client_list_catalog(call->client, kind, database, cursor, cursor_len, (uint32_t)max, &a, err);
    free(cursor);
    if (rc != KL_OK)
        return rc;
    *json = kl_catalog_list_to_json(a, kind, 0);
    kl_catalog_list_free(a);
    return *json ? KL_OK : kl_fail(err, KL_INTERNAL, "oom", "out of memory");
}

static kl_code database_list(const mcp_call *call, const json_t *args, char **json, kl_err *err)
{
    return list_page(call, args, KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_DATABASES, NULL, json, err);
}

static kl_code database_show(const mcp_call *call, const json_t *args, char **json, kl_err *err)
{
    const char *db = mcp_arg_str(args, "database");
    return list_page(call, args, KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_DATABASES,
                     db ? db : kl_client_database(call->client), json, err);
}

static kl_code queue_list(const mcp_call *call, const json_t *args, char **json, kl_err *err)
{
    return list_page(call, args, KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_QUEUES,
                     mcp_arg_str(args, "database"), json, err);
}

static kl_code principal_list(const mcp_call *call, const json_t *args, char **json, kl_err *err)
{
    return list_page(call, args, KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_PRINCIPALS, NULL, json, err);
}

/* ---------------------------------------------------------------- principals */

static kl_code principal_create(kl_client *c, kl_batch *b, const json_t *args, kl_err *err)
{
    (void)c;
    uint8_t pk[32];
    kl_role role = KL_ROLE_NONE;
    const char *r = mcp_arg_str(args, "role");
    kl_code rc = public_key_arg(args, pk, err);
    if (rc == KL_OK && r != NULL)
        rc = kl_role_parse(r, &role, err);
    return rc == KL_OK ? kl_batch_create_principal(b, mcp_arg_str(args, "principal_id"), pk, role, err)
                       : rc;
}

static kl_code principal_set_key(kl_client *c, kl_batch *b, const json_t *args, kl_err *err)
{
    (void)c;
    uint8_t pk[32];
    kl_code rc = public_key_arg(args, pk, err);
    return rc == KL_OK ? kl_batch_set_principal_key(b, mcp_arg_str(args, "principal_id"), pk, err)
                       : rc;
}

/* A key list argument ("fields", "headers") as kl_key_list checks it, so that the MCP and
 * the CLI refuse the same lists. */
static kl_code key_list_arg(const json_t *args, const char *name, kl_key_list *out, kl_err *err)
{
    memset(out, 0, sizeof *out);
    const json_t *a = json_object_get(args, name);
    size_t n = json_array_size(a), total = 1;
    for (size_t i = 0; i < n; i++) {
        const char *k = json_string_value(json_array_get(a, i));
        if (strchr(k, ',') != NULL || k[0] == '\0')
            return kl_fail(err, KL_INVALID_ARGUMENT, name, "%s[%zu] is not a key", name, i);
        total += strlen(k) + 1;
    }
    char *joined = malloc(total);
    if (joined == NULL)
        return kl_fail(err, KL_INTERNAL, "oom", "out of memory");
    joined[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            strcat(joined, ",");
        strcat(joined, json_string_value(json_array_get(a, i)));
    }
    kl_code rc = kl_key_list_parse(name, joined, out, err);
    free(joined);
    return rc;
}

static kl_code principal_grant(kl_client *c, kl_batch *b, const json_t *args, kl_err *err)
{
    (void)c;
    Keyload__V1__Permission p;
    kl_key_list fields, headers;
    kl_code rc = kl_permission_parse(mcp_arg_str(args, "permission"), &p, err);
    if (rc != KL_OK)
        return rc;
    if ((rc = key_list_arg(args, "fields", &fields, err)) != KL_OK)
        return rc;
    if ((rc = key_list_arg(args, "headers", &headers, err)) == KL_OK) {
        kl_grant g = {.permission = p,
                      .queue_pattern = mcp_arg_str(args, "queue_pattern"),
                      .fields = (const char *const *)fields.keys,
                      .n_fields = fields.n,
                      .headers = (const char *const *)headers.keys,
                      .n_headers = headers.n};
        rc = kl_batch_grant(b, mcp_arg_str(args, "principal_id"), &g, err);
    }
    kl_key_list_clear(&fields);
    kl_key_list_clear(&headers);
    return rc;
}

static kl_code principal_revoke(kl_client *c, kl_batch *b, const json_t *args, kl_err *err)
{
    (void)c;
    Keyload__V1__Permission p;
    kl_code rc = kl_permission_parse(mcp_arg_str(args, "permission"), &p, err);
    return rc == KL_OK ? kl_batch_revoke(b, mcp_arg_str(args, "principal_id"), p,
                                         mcp_arg_str(args, "queue_pattern"), err)
                       : rc;
}

static kl_code principal_show(const mcp_call *call, const json_t *args, char **json, kl_err *err)
{
    kl_client *c = call->client;
    Keyload__V1__ShowPrincipalAnswer *a;
    kl_code rc = kl_client_show_principal(c, mcp_arg_str(args, "principal_id"), &a, err);
    if (rc != KL_OK)
        return rc;
    *json = kl_principal_to_json(a, 0);
    kl_principal_answer_free(a);
    return *json ? KL_OK : kl_fail(err, KL_INTERNAL, "oom", "out of memory");
}

/* ---------------------------------------------------------------- the table */

static const mcp_arg queue_create_args[] = {
    QUEUE_ARG(true),
    {"partition", MCP_ARG_INTEGER, false,
     "pin the queue to this partition (default: partition 0 picks one); the placement never "
     "changes", 0, INT32_MAX, NULL, 0},
    {"max_messages", MCP_ARG_INTEGER, false, "quota (0: the daemon's default)", 0, 0, NULL, 0},
    {"max_bytes", MCP_ARG_INTEGER, false, "quota (0: the daemon's default)", 0, 0, NULL, 0},
    {"max_deliveries", MCP_ARG_INTEGER, false, "deliveries before dead-lettering (0: unlimited)",
     0, U32_MAX_, NULL, 0},
    {"dead_letter_queue", MCP_ARG_STRING, false, "dead-letter queue (same partition)", 0, 0, NULL,
     0},
    END_ARG};
static const mcp_arg queue_args[] = {QUEUE_ARG(true), END_ARG};
static const mcp_arg enqueue_args[] = {QUEUE_ARG(true), LANE_ARG, MESSAGE_ARGS, END_ARG};
static const mcp_arg receive_args[] = {
    QUEUE_ARG(true), LANE_ARG,
    {"max", MCP_ARG_INTEGER, false, "messages to lease at most (default 1)", 1, U32_MAX_, NULL, 0},
    {"lease_ms", MCP_ARG_INTEGER, false, "visibility timeout in ms (0: the daemon's default)", 0,
     U32_MAX_, NULL, 0},
    {"wait_ms", MCP_ARG_INTEGER, false,
     "when no message is available, wait up to this long for one (long poll; 0: answer at once)",
     0, KL_RECEIVE_WAIT_MS_MAX, NULL, 0},
    END_ARG};
static const mcp_arg lease_args[] = {
    QUEUE_ARG(true),
    {"lease_tokens", MCP_ARG_STRING_ARRAY, true, "lease tokens (base64) as receive returned them",
     0, 0, NULL, 1},
    END_ARG};
static const mcp_arg database_create_args[] = {
    {"database", MCP_ARG_STRING, false, "TENANT/DB (default: the server's KEYLOAD_DATABASE)", 0, 0,
     NULL, 0},
    LIMIT_ARGS, END_ARG};
static const mcp_arg database_limits_args[] = {LIMIT_ARGS, END_ARG};
#define DATABASE_ARG                                                                             \
    {"database", MCP_ARG_STRING, false, "TENANT/DB (default: the server's KEYLOAD_DATABASE)", 0, 0, \
     NULL, 0}
#define PAGE_ARGS                                                                                 \
    {"cursor", MCP_ARG_STRING, false, "next_cursor of the previous page (base64)", 0, 0, NULL, 0}, \
    {"max", MCP_ARG_INTEGER, false, "page size (default 100)", 1, KL_CATALOG_LIST_MAX, NULL, 0}
static const mcp_arg database_show_args[] = {DATABASE_ARG, END_ARG};
static const mcp_arg page_args[] = {PAGE_ARGS, END_ARG};
static const mcp_arg queue_list_args[] = {DATABASE_ARG, PAGE_ARGS, END_ARG};
static const mcp_arg principal_create_args[] = {
    {"principal_id", MCP_ARG_STRING, true, "the new principal's id", 0, 0, NULL, 0},
    {"public_key", MCP_ARG_STRING, true,
     "its Ed25519 public key, base64 of 32 bytes (the secret key stays with its owner)", 0, 0,
     NULL, 0},
    {"role", MCP_ARG_STRING, false, "role (default none)", 0, 0, roles, 0},
    END_ARG};
static const mcp_arg principal_key_args[] = {
    {"principal_id", MCP_ARG_STRING, true, "the principal", 0, 0, NULL, 0},
    {"public_key", MCP_ARG_STRING, true,
     "its new Ed25519 public key, base64 of 32 bytes; sessions of the old key end", 0, 0, NULL, 0},
    END_ARG};
static const mcp_arg principal_id_args[] = {
    {"principal_id", MCP_ARG_STRING, true, "the principal", 0, 0, NULL, 0}, END_ARG};
static const mcp_arg grant_args[] = {
    {"principal_id", MCP_ARG_STRING, true, "the principal", 0, 0, NULL, 0},
    {"permission", MCP_ARG_STRING, true, "the permission", 0, 0, permissions, 0},
    {"queue_pattern", MCP_ARG_STRING, true, "a queue name, or a prefix ending in *", 0, 0, NULL, 0},
    {"fields", MCP_ARG_STRING_ARRAY, false,
     "field keys it may write/read (absent or []: none; [\"*\"]: all)", 0, 0, NULL, 0},
    {"headers", MCP_ARG_STRING_ARRAY, false,
     "header keys it may write/read (absent or []: none; [\"*\"]: all)", 0, 0, NULL, 0},
    END_ARG};
static const mcp_arg revoke_args[] = {
    {"principal_id", MCP_ARG_STRING, true, "the principal", 0, 0, NULL, 0},
    {"permission", MCP_ARG_STRING, true, "the permission", 0, 0, permissions, 0},
    {"queue_pattern", MCP_ARG_STRING, true, "the grant's queue pattern", 0, 0, NULL, 0},
    END_ARG};

const mcp_tool mcp_queue_tools[] = {
    {"queue_create", "Create a queue in the database (keyload queue create); answers the receipt.",
     queue_create_args, queue_create, NULL, true, false},
    {"queue_delete", "Delete an empty queue (keyload queue delete); answers the receipt.",
     queue_args, queue_delete, NULL, true, false},
    {"queue_stats", "Fresh statistics of a queue (keyload queue stats).", queue_args, NULL,
     queue_stats, true, false},
    {"enqueue", "Enqueue one message (keyload enqueue); answers the receipt with its message id.",
     enqueue_args, enqueue, NULL, true, false},
    {"receive",
     "Lease up to max messages (keyload receive); answers the receipt with each message, its "
     "body and its lease token. With wait_ms it waits for messages when none are available; a "
     "receive that leases nothing commits nothing (receipt index 0).", receive_args, receive, NULL, true, false},
    {"ack", "Acknowledge leased messages by lease token (keyload ack).", lease_args, ack, NULL,
     true, false},
    {"release", "Give leased messages back now (keyload release).", lease_args, release, NULL,
     true, false},
    {"database_create", "Create a database (keyload database create; a cluster administrator's "
     "right).", database_create_args, database_create, NULL, true, false},
    {"database_limits", "Change the named limits of the database and keep the others (keyload "
     "database limits); 0 puts a limit back to the cluster's.", database_limits_args, database_limits,
     NULL, true, false},
    {"database_show", "A database's stored record with its current limits (keyload database "
     "limits without options).", database_show_args, NULL, database_show, true, false},
    {"database_list", "One page of the tenant's databases (keyload database list; administrators).",
     page_args, NULL, database_list, true, false},
    {"queue_list", "One page of a database's queues (keyload queue list; administrators).",
     queue_list_args, NULL, queue_list, true, false},
    {"principal_list", "One page of the tenant's principals (keyload principal list; administrators).",
     page_args, NULL, principal_list, true, false},
    {"principal_create", "Create a principal with its public key (keyload principal create).",
     principal_create_args, principal_create, NULL, true, false},
    {"principal_show", "A principal's stored record: roles, grants, policy epoch (keyload "
     "principal show).", principal_id_args, NULL, principal_show, true, false},
    {"principal_grant", "Grant a permission on a queue pattern (keyload principal grant).",
     grant_args, principal_grant, NULL, true, false},
    {"principal_revoke", "Revoke a grant (keyload principal revoke).", revoke_args,
     principal_revoke, NULL, true, false},
    {"principal_set_key", "Replace a principal's public key (keyload principal rotate-key).",
     principal_key_args, principal_set_key, NULL, true, false},
    {NULL, NULL, NULL, NULL, NULL, false, false},
};
