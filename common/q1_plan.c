/* q1_plan: the alias table and the mapping of each alias's arguments onto its native
 * request (common/q1_plan.h). Requests are built from borrowed pieces plus the args' arena
 * (common/q1_args.h), packed, and the arena wiped and freed: nothing here outlives the call
 * except the packed bytes the plan owns. */
#include "common/q1_plan.h"

#include "common/guid.h"
#include "common/q1_args.h"
#include "keyload/v1/queue.pb-c.h"
#include "keyload/v1/transfer.pb-c.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the mapping functions: one per alias ---- */

/* What a mapping function fills: one mutation (batch aliases) or a read request. */
typedef struct target {
    Keyload__V1__Mutation mutation;
    const ProtobufCMessage *read;   /* read aliases */
    const char *route;              /* the queue name that routes the call */
} target;

static kl_code map_transfer_create(kl_q1_args *a, target *t, kl_err *err)
{
    Keyload__V1__CreateQueueTransfer *m = kl_q1_arena_alloc(&a->ar, sizeof *m);
    if (m == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    keyload__v1__create_queue_transfer__init(m);
    kl_code rc;
    if ((rc = kl_q1_lane_ref(a, "source_queue", "source_lane", &m->source_queue, err)) != KL_OK ||
        (rc = kl_q1_arg_guid(a, "transfer_id", &m->transfer_id, err)) != KL_OK ||
        (rc = kl_q1_lane_ref(a, "destination_queue", "destination_lane", &m->destination, err)) != KL_OK ||
        (rc = kl_q1_arg_message(a, &m->message, err)) != KL_OK)
        return rc;
    t->mutation.kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE_TRANSFER;
    t->mutation.create_queue_transfer = m;
    t->route = m->source_queue->queue;
    return KL_OK;
}

static kl_code map_transfer_accept(kl_q1_args *a, target *t, kl_err *err)
{
    Keyload__V1__AcceptQueueTransfer *m = kl_q1_arena_alloc(&a->ar, sizeof *m);
    if (m == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    keyload__v1__accept_queue_transfer__init(m);
    kl_code rc;
    if ((rc = kl_q1_lane_ref(a, "destination_queue", "destination_lane", &m->destination_queue, err)) != KL_OK ||
        (rc = kl_q1_arg_base64(a, "intent_token", true, &m->intent_token, err)) != KL_OK)
        return rc;
    t->mutation.kind_case = KEYLOAD__V1__MUTATION__KIND_ACCEPT_QUEUE_TRANSFER;
    t->mutation.accept_queue_transfer = m;
    t->route = m->destination_queue->queue;
    return KL_OK;
}

static kl_code map_transfer_complete(kl_q1_args *a, target *t, kl_err *err)
{
    Keyload__V1__CompleteQueueTransfer *m = kl_q1_arena_alloc(&a->ar, sizeof *m);
    if (m == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    keyload__v1__complete_queue_transfer__init(m);
    kl_code rc;
    if ((rc = kl_q1_lane_ref(a, "source_queue", "source_lane", &m->source_queue, err)) != KL_OK ||
        (rc = kl_q1_arg_guid(a, "transfer_id", &m->transfer_id, err)) != KL_OK ||
        (rc = kl_q1_arg_base64(a, "receipt_token", true, &m->receipt_token, err)) != KL_OK)
        return rc;
    t->mutation.kind_case = KEYLOAD__V1__MUTATION__KIND_COMPLETE_QUEUE_TRANSFER;
    t->mutation.complete_queue_transfer = m;
    t->route = m->source_queue->queue;
    return KL_OK;
}

/* The two transfer advances: the same three arguments for both. */
static kl_code advance_args(kl_q1_args *a, Keyload__V1__QueueLaneRef **src, ProtobufCBinaryData *tid,
                            ProtobufCBinaryData *witness, kl_err *err)
{
    kl_code rc;
    if ((rc = kl_q1_lane_ref(a, "source_queue", "source_lane", src, err)) != KL_OK ||
        (rc = kl_q1_arg_guid(a, "transfer_id", tid, err)) != KL_OK)
        return rc;
    return kl_q1_arg_base64(a, "witness_token", true, witness, err);
}

static kl_code map_transfer_advance_attempt(kl_q1_args *a, target *t, kl_err *err)
{
    Keyload__V1__AdvanceQueueTransferAttempt *m = kl_q1_arena_alloc(&a->ar, sizeof *m);
    if (m == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    keyload__v1__advance_queue_transfer_attempt__init(m);
    kl_code rc = advance_args(a, &m->source_queue, &m->transfer_id, &m->witness_token, err);
    if (rc != KL_OK)
        return rc;
    t->mutation.kind_case = KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_ATTEMPT;
    t->mutation.advance_queue_transfer_attempt = m;
    t->route = m->source_queue->queue;
    return KL_OK;
}

static kl_code map_transfer_advance_repair(kl_q1_args *a, target *t, kl_err *err)
{
    Keyload__V1__AdvanceQueueTransferRepair *m = kl_q1_arena_alloc(&a->ar, sizeof *m);
    if (m == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    keyload__v1__advance_queue_transfer_repair__init(m);
    kl_code rc = advance_args(a, &m->source_queue, &m->transfer_id, &m->witness_token, err);
    if (rc != KL_OK)
        return rc;
    t->mutation.kind_case = KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_REPAIR;
    t->mutation.advance_queue_transfer_repair = m;
    t->route = m->source_queue->queue;
    return KL_OK;
}

static kl_code map_transfer_inspect(kl_q1_args *a, target *t, kl_err *err)
{
    Keyload__V1__InspectQueueTransferRequest *r = kl_q1_arena_alloc(&a->ar, sizeof *r);
    if (r == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    keyload__v1__inspect_queue_transfer_request__init(r);
    kl_code rc;
    if ((rc = kl_q1_lane_ref(a, "source_queue", "source_lane", &r->source_queue, err)) != KL_OK ||
        (rc = kl_q1_arg_guid(a, "transfer_id", &r->transfer_id, err)) != KL_OK)
        return rc;
    t->read = &r->base;
    t->route = r->source_queue->queue;
    return KL_OK;
}

static kl_code map_transfer_inspect_receipt(kl_q1_args *a, target *t, kl_err *err)
{
    Keyload__V1__InspectQueueTransferReceiptRequest *r = kl_q1_arena_alloc(&a->ar, sizeof *r);
    if (r == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    keyload__v1__inspect_queue_transfer_receipt_request__init(r);
    kl_code rc;
    /* The destination's lane is not an argument: the receipt names it. */
    if ((rc = kl_q1_lane_ref(a, "destination_queue", NULL, &r->destination_queue, err)) != KL_OK ||
        (rc = kl_q1_lane_ref(a, "source_queue", "source_lane", &r->source_queue, err)) != KL_OK ||
        (rc = kl_q1_arg_guid(a, "transfer_id", &r->transfer_id, err)) != KL_OK)
        return rc;
    t->read = &r->base;
    t->route = r->destination_queue->queue;
    return KL_OK;
}

static kl_code map_enqueue(kl_q1_args *a, target *t, kl_err *err)
{
    Keyload__V1__Enqueue *m = kl_q1_arena_alloc(&a->ar, sizeof *m);
    if (m == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    keyload__v1__enqueue__init(m);
    kl_code rc;
    if ((rc = kl_q1_lane_ref(a, "queue", "lane", &m->lane, err)) != KL_OK ||
        (rc = kl_q1_arg_message(a, &m->message, err)) != KL_OK)
        return rc;
    t->mutation.kind_case = KEYLOAD__V1__MUTATION__KIND_ENQUEUE;
    t->mutation.enqueue = m;
    t->route = m->lane->queue;
    return KL_OK;
}

static kl_code map_receive(kl_q1_args *a, target *t, kl_err *err)
{
    Keyload__V1__Receive *m = kl_q1_arena_alloc(&a->ar, sizeof *m);
    if (m == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    keyload__v1__receive__init(m);
    int64_t max, lease;
    kl_code rc;
    if ((rc = kl_q1_lane_ref(a, "queue", "lane", &m->lane, err)) != KL_OK ||
        (rc = kl_q1_arg_int(a, "max", 0, UINT32_MAX, &max, err)) != KL_OK ||
        (rc = kl_q1_arg_int(a, "lease_ms", 0, UINT32_MAX, &lease, err)) != KL_OK)
        return rc;
    m->max_messages = (uint32_t)max;
    m->lease_ms = (uint32_t)lease;
    t->mutation.kind_case = KEYLOAD__V1__MUTATION__KIND_RECEIVE;
    t->mutation.receive = m;
    t->route = m->lane->queue;
    return KL_OK;
}

#define LEASE_TOKENS_MAX 1000 /* per ack; the daemon's MaxBatchBytes bounds it further */

/* lease_tokens: one string of base64 tokens separated by commas (base64 has no comma). */
static kl_code map_ack(kl_q1_args *a, target *t, kl_err *err)
{
    Keyload__V1__Ack *m = kl_q1_arena_alloc(&a->ar, sizeof *m);
    if (m == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    keyload__v1__ack__init(m);
    const char *list;
    kl_code rc;
    if ((rc = kl_q1_lane_ref(a, "queue", NULL, &m->queue, err)) != KL_OK ||
        (rc = kl_q1_arg_str(a, "lease_tokens", true, &list, err)) != KL_OK)
        return rc;
    size_t n = 1;
    for (const char *p = list; *p; p++)
        n += *p == ',';
    if (n > LEASE_TOKENS_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "lease_tokens",
                       "argument lease_tokens of %s holds more than %d tokens", a->alias,
                       LEASE_TOKENS_MAX);
    m->lease_tokens = kl_q1_arena_alloc(&a->ar, n * sizeof *m->lease_tokens);
    char *copy = kl_q1_arena_alloc(&a->ar, strlen(list));
    if (m->lease_tokens == NULL || copy == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    memcpy(copy, list, strlen(list) + 1); /* arena items have one spare byte for the NUL */
    char *save = NULL;
    size_t i = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        size_t len = strlen(tok);
        while (len > 0 && tok[len - 1] == ' ')
            tok[--len] = '\0';
        if (len == 0)
            continue;
        if ((rc = kl_q1_base64_bytes(a, "lease_tokens", tok, &m->lease_tokens[i], err)) != KL_OK)
            return rc;
        if (m->lease_tokens[i].len == 0)
            return kl_fail(err, KL_INVALID_ARGUMENT, "lease_tokens",
                           "argument lease_tokens of %s holds an empty token", a->alias);
        i++;
    }
    if (i == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "lease_tokens",
                       "argument lease_tokens of %s names no token", a->alias);
    m->n_lease_tokens = i;
    t->mutation.kind_case = KEYLOAD__V1__MUTATION__KIND_ACK;
    t->mutation.ack = m;
    t->route = m->queue->queue;
    return KL_OK;
}

/* ---- the alias table ---- */

typedef kl_code (*map_fn)(kl_q1_args *a, target *t, kl_err *err);

static const struct alias {
    const char *name;
    kl_q1_op op;
    bool transfer;
    const char *params;   /* for "unknown argument" messages */
    map_fn map;
} aliases[] = {
    {"keyload.queue-transfer.create.v1", KL_Q1_OP_BATCH, true,
     "source_queue, source_lane, transfer_id, destination_queue, destination_lane, body | "
     "body_base64, headers, fields, expires_at_unix_ms, delay_ms",
     map_transfer_create},
    {"keyload.queue-transfer.accept.v1", KL_Q1_OP_BATCH, true,
     "destination_queue, destination_lane, intent_token", map_transfer_accept},
    {"keyload.queue-transfer.complete.v1", KL_Q1_OP_BATCH, true,
     "source_queue, source_lane, transfer_id, receipt_token", map_transfer_complete},
    {"keyload.queue-transfer.inspect.v1", KL_Q1_OP_INSPECT_TRANSFER, true,
     "source_queue, source_lane, transfer_id", map_transfer_inspect},
    {"keyload.queue-transfer.inspect-receipt.v1", KL_Q1_OP_TRANSFER_RECEIPT, true,
     "destination_queue, source_queue, source_lane, transfer_id", map_transfer_inspect_receipt},
    {"keyload.queue-transfer.advance-attempt.v1", KL_Q1_OP_BATCH, true,
     "source_queue, source_lane, transfer_id, witness_token", map_transfer_advance_attempt},
    {"keyload.queue-transfer.advance-repair.v1", KL_Q1_OP_BATCH, true,
     "source_queue, source_lane, transfer_id, witness_token", map_transfer_advance_repair},
    {"keyload.queue.enqueue.v1", KL_Q1_OP_BATCH, false,
     "queue, lane, body | body_base64, headers, fields, expires_at_unix_ms, delay_ms", map_enqueue},
    {"keyload.queue.receive.v1", KL_Q1_OP_BATCH, false, "queue, lane, max, lease_ms", map_receive},
    {"keyload.queue.ack.v1", KL_Q1_OP_BATCH, false, "queue, lease_tokens", map_ack},
};
#define N_ALIASES (sizeof aliases / sizeof aliases[0])

const char *kl_q1_alias_name(size_t i)
{
    return i < N_ALIASES ? aliases[i].name : NULL;
}

static kl_code pack(const ProtobufCMessage *m, kl_q1_plan *out, kl_err *err)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    out->request = malloc(n ? n : 1);
    if (out->request == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    out->request_len = protobuf_c_message_pack(m, out->request);
    return KL_OK;
}

kl_code kl_q1_plan_build(const kl_q1_call *call, const char *tenant, const char *database,
                         const uint8_t *default_command_id, kl_q1_plan *out, kl_err *err)
{
    memset(out, 0, sizeof *out);
    const struct alias *al = NULL;
    for (size_t i = 0; i < N_ALIASES && al == NULL; i++)
        if (strcmp(aliases[i].name, call->alias) == 0)
            al = &aliases[i];
    if (al == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "alias",
                       "unknown alias %s (known: keyload.queue.enqueue.v1, receive.v1, ack.v1 and "
                       "keyload.queue-transfer.create.v1, accept.v1, complete.v1, inspect.v1, "
                       "inspect-receipt.v1)",
                       call->alias);
    if (al->op != KL_Q1_OP_BATCH && call->has_command_id)
        return kl_fail(err, KL_INVALID_ARGUMENT, "command_id",
                       "%s is a read: it takes no WITH COMMAND_ID", al->name);
    kl_q1_args a = {.call = call, .alias = al->name, .params = al->params, .tenant = tenant,
              .database = database};
    target t;
    memset(&t, 0, sizeof t);
    keyload__v1__mutation__init(&t.mutation);
    kl_code rc = al->map(&a, &t, err);
    for (size_t i = 0; rc == KL_OK && i < call->n_args; i++)
        if (!(a.used & ((uint64_t)1 << i)))
            rc = kl_fail(err, KL_INVALID_ARGUMENT, call->args[i].name,
                         "%s takes no argument %s (it takes: %s)", al->name, call->args[i].name,
                         al->params);
    if (rc == KL_OK && strlen(t.route) >= sizeof out->queue)
        rc = kl_fail(err, KL_INTERNAL, "queue", "the routing queue name is too long");
    if (rc == KL_OK) {
        out->alias = al->name;
        out->op = al->op;
        out->transfer = al->transfer;
        strcpy(out->queue, t.route);
        if (al->op == KL_Q1_OP_BATCH) {
            if (call->has_command_id)
                memcpy(out->command_id, call->command_id, 16);
            else if (default_command_id != NULL && kl_guid_valid(default_command_id, 16))
                memcpy(out->command_id, default_command_id, 16);
            else
                kl_guid_time_ordered_now(out->command_id);
            Keyload__V1__BatchRequest b = KEYLOAD__V1__BATCH_REQUEST__INIT;
            Keyload__V1__Mutation *muts[1] = {&t.mutation};
            b.command_id.data = out->command_id;
            b.command_id.len = 16;
            b.mutations = muts;
            b.n_mutations = 1;
            rc = pack(&b.base, out, err);
        } else {
            rc = pack(t.read, out, err);
        }
    }
    kl_q1_arena_free(&a.ar);
    if (rc != KL_OK)
        kl_q1_plan_free(out);
    return rc;
}

void kl_q1_plan_free(kl_q1_plan *p)
{
    if (p == NULL)
        return;
    if (p->request != NULL) {
        sodium_memzero(p->request, p->request_len);
        free(p->request);
    }
    memset(p, 0, sizeof *p);
}
