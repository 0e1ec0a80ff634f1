/* batch: the kl_batch builder. Each mutation is validated and deep-copied when added, so
 * a batch encodes to the same bytes however often it is sent (replays need that). */
#include "client/sdk/internal.h"
#include "common/clock.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

kl_code kl_batch_new(const char *command_id, kl_batch **out, kl_err *err)
{
    *out = NULL;
    if (sodium_init() < 0)
        return kl_fail(err, KL_INTERNAL, "sodium_init", "libsodium failed to initialize");
    /* One clock read: the first-sent time, and a fresh id's millisecond. */
    int64_t now_ms = kl_clock_ms(CLOCK_REALTIME);
    uint8_t id[KL_GUID_LEN];
    if (command_id == NULL) {
        kl_guid_time_ordered((uint64_t)now_ms, id);
    } else if (command_id[0] == '\0') {
        return kl_fail(err, KL_INVALID_ARGUMENT, "command_id", "command_id must not be empty");
    } else if (!kl_guid_parse(command_id, id)) {
        return kl_fail(err, KL_INVALID_ARGUMENT, "command_id",
                       "command_id must be a GUID in canonical form "
                       "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx");
    } else if (!kl_guid_valid(id, sizeof id)) {
        return kl_fail(err, KL_INVALID_ARGUMENT, "command_id", "command_id must not be all zero");
    }
    kl_batch *b = calloc(1, sizeof *b);
    if (b == NULL)
        return kl_sdk_oom(err);
    memcpy(b->command_id, id, sizeof id);
    kl_guid_format(id, b->command_id_text);
    b->first_sent_ms = now_ms;
    *out = b;
    return KL_OK;
}

int64_t kl_batch_first_sent_unix_ms(const kl_batch *b) { return b->first_sent_ms; }

kl_code kl_batch_set_first_sent_unix_ms(kl_batch *b, int64_t unix_ms, kl_err *err)
{
    if (unix_ms < 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "first_sent_unix_ms",
                       "first_sent_unix_ms must not be negative");
    if (unix_ms > KL_FIRST_SENT_LATEST_MS)
        return kl_fail(err, KL_INVALID_ARGUMENT, "first_sent_unix_ms",
                       "first_sent_unix_ms is past the year 9999, which no clock gives: it is a "
                       "Unix time in milliseconds");
    b->first_sent_ms = unix_ms;
    return KL_OK;
}

void kl_batch_free(kl_batch *b)
{
    if (b == NULL)
        return;
    for (size_t i = 0; i < b->n; i++)
        keyload__v1__mutation__free_unpacked(b->muts[i], NULL);
    free(b->muts);
    free(b);
}

const char *kl_batch_command_id(const kl_batch *b) { return b->command_id_text; }
const uint8_t *kl_batch_command_id_bytes(const kl_batch *b) { return b->command_id; }
size_t kl_batch_count(const kl_batch *b) { return b->n; }

/* Takes ownership of m (a fully owned mutation): appends it, or frees it on failure. */
static kl_code append(kl_batch *b, Keyload__V1__Mutation *m, kl_err *err)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4;
        Keyload__V1__Mutation **arr = realloc(b->muts, cap * sizeof *arr);
        if (arr == NULL) {
            keyload__v1__mutation__free_unpacked(m, NULL);
            return kl_sdk_oom(err);
        }
        b->muts = arr;
        b->cap = cap;
    }
    b->muts[b->n++] = m;
    return KL_OK;
}

/* A deep, fully owned copy of a mutation built from borrowed parts (pack, then unpack:
 * protobuf-c then owns every byte, and free_unpacked releases it). */
static kl_code own_copy(const Keyload__V1__Mutation *tmp, Keyload__V1__Mutation **out,
                        kl_err *err)
{
    size_t len = keyload__v1__mutation__get_packed_size(tmp);
    uint8_t *buf = malloc(len ? len : 1);
    if (buf == NULL)
        return kl_sdk_oom(err);
    keyload__v1__mutation__pack(tmp, buf);
    *out = keyload__v1__mutation__unpack(NULL, len, buf);
    free(buf);
    return *out ? KL_OK : kl_sdk_oom(err);
}

kl_code kl_sdk_batch_add(kl_batch *b, const Keyload__V1__Mutation *tmp, kl_err *err)
{
    Keyload__V1__Mutation *m;
    kl_code rc = own_copy(tmp, &m, err);
    return rc == KL_OK ? append(b, m, err) : rc;
}

/* A borrowed ref (tenant and database stay empty until encoding). */
static void init_ref(Keyload__V1__QueueLaneRef *r, const char *queue, const char *lane)
{
    keyload__v1__queue_lane_ref__init(r);
    r->queue = (char *)queue;
    r->lane = (char *)(lane ? lane : "");
}

kl_code kl_batch_create_queue(kl_batch *b, const char *queue, const kl_queue_options *opts,
                              kl_err *err)
{
    static const kl_queue_options none;
    if (opts == NULL)
        opts = &none;
    kl_code rc = kl_sdk_check_name("queue", queue, KL_SDK_NAME_QUEUE, err);
    if (rc != KL_OK)
        return rc;
    const char *dlq = opts->dead_letter_queue ? opts->dead_letter_queue : "";
    if (dlq[0] != '\0') {
        rc = kl_sdk_check_name("dead_letter_queue", dlq, KL_SDK_NAME_QUEUE, err);
        if (rc != KL_OK)
            return rc;
        if (strcmp(dlq, queue) == 0)
            return kl_fail(err, KL_INVALID_ARGUMENT, "dead_letter_queue",
                           "dead_letter_queue must be another queue than '%s'", queue);
    }
    if (opts->pin_partition && opts->partition < 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "partition", "partition must be >= 0");
    Keyload__V1__QueueLaneRef ref;
    init_ref(&ref, queue, NULL);
    /* Limits are always present, so that the same options always digest the same way. */
    Keyload__V1__QueueLimits limits = KEYLOAD__V1__QUEUE_LIMITS__INIT;
    limits.max_messages = opts->max_messages;
    limits.max_bytes = opts->max_bytes;
    limits.max_deliveries = opts->max_deliveries;
    limits.dead_letter_queue = (char *)dlq;
    Keyload__V1__CreateQueue cq = KEYLOAD__V1__CREATE_QUEUE__INIT;
    cq.queue = &ref;
    cq.limits = &limits;
    cq.partition = opts->pin_partition ? opts->partition : -1;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE;
    m.create_queue = &cq;
    return kl_sdk_batch_add(b, &m, err);
}

kl_code kl_batch_delete_queue(kl_batch *b, const char *queue, kl_err *err)
{
    kl_code rc = kl_sdk_check_name("queue", queue, KL_SDK_NAME_QUEUE, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__QueueLaneRef ref;
    init_ref(&ref, queue, NULL);
    Keyload__V1__DeleteQueue dq = KEYLOAD__V1__DELETE_QUEUE__INIT;
    dq.queue = &ref;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_DELETE_QUEUE;
    m.delete_queue = &dq;
    return kl_sdk_batch_add(b, &m, err);
}

static kl_code check_lane(const char *queue, const char *lane, kl_err *err)
{
    kl_code rc = kl_sdk_check_name("queue", queue, KL_SDK_NAME_QUEUE, err);
    if (rc == KL_OK)
        rc = kl_sdk_check_name("lane", lane, KL_SDK_NAME_LANE, err);
    return rc;
}

kl_code kl_batch_enqueue(kl_batch *b, const char *queue, const char *lane,
                         const kl_message *msg, kl_err *err)
{
    kl_code rc = check_lane(queue, lane, err);
    if (rc != KL_OK)
        return rc;
    if (msg == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "message", "message is missing");
    Keyload__V1__QueueLaneRef ref;
    init_ref(&ref, queue, lane);
    Keyload__V1__Enqueue eq = KEYLOAD__V1__ENQUEUE__INIT;
    eq.lane = &ref;
    eq.message = msg->pb;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_ENQUEUE;
    m.enqueue = &eq;
    return kl_sdk_batch_add(b, &m, err);
}

kl_code kl_batch_receive(kl_batch *b, const char *queue, const char *lane,
                         uint32_t max_messages, uint32_t lease_ms, kl_err *err)
{
    return kl_batch_receive_wait(b, queue, lane, max_messages, lease_ms, 0, err);
}

uint32_t kl_sdk_batch_wait_ms(const kl_batch *b)
{
    uint32_t w = 0;
    for (size_t i = 0; i < b->n; i++)
        if (b->muts[i]->kind_case == KEYLOAD__V1__MUTATION__KIND_RECEIVE && b->muts[i]->receive->wait_ms > w)
            w = b->muts[i]->receive->wait_ms;
    return w;
}

kl_code kl_batch_receive_wait(kl_batch *b, const char *queue, const char *lane, uint32_t max_messages,
                              uint32_t lease_ms, uint32_t wait_ms, kl_err *err)
{
    if (wait_ms > KL_RECEIVE_WAIT_MS_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "wait_ms", "wait_ms must be 0..%d", KL_RECEIVE_WAIT_MS_MAX);
    kl_code rc = check_lane(queue, lane, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__QueueLaneRef ref;
    init_ref(&ref, queue, lane);
    Keyload__V1__Receive rv = KEYLOAD__V1__RECEIVE__INIT;
    rv.lane = &ref;
    rv.max_messages = max_messages;
    rv.lease_ms = lease_ms;
    rv.wait_ms = wait_ms;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_RECEIVE;
    m.receive = &rv;
    return kl_sdk_batch_add(b, &m, err);
}

static kl_code lease_tokens(const kl_bytes *tokens, size_t n, ProtobufCBinaryData **out,
                            kl_err *err)
{
    *out = NULL;
    if (tokens == NULL || n == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "lease_tokens",
                       "at least one lease token is needed");
    for (size_t i = 0; i < n; i++)
        if (tokens[i].data == NULL || tokens[i].len == 0)
            return kl_fail(err, KL_INVALID_ARGUMENT, "lease_tokens",
                           "lease token %zu is empty", i + 1);
    *out = malloc(n * sizeof **out);
    if (*out == NULL)
        return kl_sdk_oom(err);
    for (size_t i = 0; i < n; i++) {
        (*out)[i].data = (uint8_t *)tokens[i].data; /* borrowed: own_copy copies */
        (*out)[i].len = tokens[i].len;
    }
    return KL_OK;
}

/* Ack and Release are the same mutation shape (a queue and its lease tokens) under two
 * message types: one builder serves both. */
static kl_code lease_mutation(kl_batch *b, const char *queue, const kl_bytes *tokens, size_t n,
                              bool ack, kl_err *err)
{
    ProtobufCBinaryData *arr;
    kl_code rc = kl_sdk_check_name("queue", queue, KL_SDK_NAME_QUEUE, err);
    if (rc == KL_OK)
        rc = lease_tokens(tokens, n, &arr, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__QueueLaneRef ref;
    init_ref(&ref, queue, NULL);
    Keyload__V1__Ack ak = KEYLOAD__V1__ACK__INIT;
    Keyload__V1__Release rl = KEYLOAD__V1__RELEASE__INIT;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    if (ack) {
        ak.queue = &ref;
        ak.n_lease_tokens = n;
        ak.lease_tokens = arr;
        m.kind_case = KEYLOAD__V1__MUTATION__KIND_ACK;
        m.ack = &ak;
    } else {
        rl.queue = &ref;
        rl.n_lease_tokens = n;
        rl.lease_tokens = arr;
        m.kind_case = KEYLOAD__V1__MUTATION__KIND_RELEASE;
        m.release = &rl;
    }
    rc = kl_sdk_batch_add(b, &m, err);
    free(arr);
    return rc;
}

kl_code kl_batch_ack(kl_batch *b, const char *queue, const kl_bytes *tokens, size_t n,
                     kl_err *err)
{
    return lease_mutation(b, queue, tokens, n, true, err);
}

kl_code kl_batch_release(kl_batch *b, const char *queue, const kl_bytes *tokens, size_t n,
                         kl_err *err)
{
    return lease_mutation(b, queue, tokens, n, false, err);
}

kl_code kl_batch_create_database(kl_batch *b, const char *database,
                                 const kl_database_limits *limits, kl_err *err)
{
    char tenant[KL_SDK_NAME_MAX + 1], db[KL_SDK_NAME_MAX + 1];
    kl_code rc = kl_sdk_split_database(database, tenant, db, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__DatabaseLimits lim;
    Keyload__V1__NullableU64 attempts;
    if ((rc = kl_sdk_limits_to_pb(limits, &lim, &attempts, err)) != KL_OK)
        return rc;
    Keyload__V1__CreateDatabase cd = KEYLOAD__V1__CREATE_DATABASE__INIT;
    cd.tenant = tenant;
    cd.database = db;
    cd.limits = &lim;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_DATABASE;
    m.create_database = &cd;
    return kl_sdk_batch_add(b, &m, err);
}

kl_code kl_batch_bootstrap(kl_batch *b, const char *database, const char *admin_id,
                           const uint8_t admin_public_key[32], const uint8_t proof[32], kl_err *err)
{
    char tenant[KL_SDK_NAME_MAX + 1], db[KL_SDK_NAME_MAX + 1];
    kl_code rc = kl_sdk_split_database(database, tenant, db, err);
    if (rc == KL_OK)
        rc = kl_sdk_check_name("admin", admin_id, KL_SDK_NAME_DB_PART, err);
    if (rc != KL_OK)
        return rc;
    Keyload__V1__Bootstrap bs = KEYLOAD__V1__BOOTSTRAP__INIT;
    bs.tenant = tenant;
    bs.database = db;
    bs.admin_id = (char *)admin_id;
    bs.admin_public_key.data = (uint8_t *)admin_public_key;
    bs.admin_public_key.len = 32;
    bs.proof.data = (uint8_t *)proof;
    bs.proof.len = 32;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_BOOTSTRAP;
    m.bootstrap = &bs;
    return kl_sdk_batch_add(b, &m, err);
}

const char *kl_sdk_mutation_queue(const Keyload__V1__Mutation *m)
{
    const Keyload__V1__QueueLaneRef *r = NULL;
    switch (m->kind_case) {
    case KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE: r = m->create_queue->queue; break;
    case KEYLOAD__V1__MUTATION__KIND_DELETE_QUEUE: r = m->delete_queue->queue; break;
    case KEYLOAD__V1__MUTATION__KIND_ENQUEUE: r = m->enqueue->lane; break;
    case KEYLOAD__V1__MUTATION__KIND_RECEIVE: r = m->receive->lane; break;
    case KEYLOAD__V1__MUTATION__KIND_ACK: r = m->ack->queue; break;
    case KEYLOAD__V1__MUTATION__KIND_RELEASE: r = m->release->queue; break;
    /* Transfers: the partition that owns the state being changed (ARCHITECTURE.md "Engine"): the
     * source's intent for Create, Complete and both advances, the destination's receipt
     * for Accept. */
    case KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE_TRANSFER:
        r = m->create_queue_transfer->source_queue;
        break;
    case KEYLOAD__V1__MUTATION__KIND_ACCEPT_QUEUE_TRANSFER:
        r = m->accept_queue_transfer->destination_queue;
        break;
    case KEYLOAD__V1__MUTATION__KIND_COMPLETE_QUEUE_TRANSFER:
        r = m->complete_queue_transfer->source_queue;
        break;
    case KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_ATTEMPT:
        r = m->advance_queue_transfer_attempt->source_queue;
        break;
    case KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_REPAIR:
        r = m->advance_queue_transfer_repair->source_queue;
        break;
    case KEYLOAD__V1__MUTATION__KIND_SET_QUEUE_TRANSFERS_PAUSED:
        r = m->set_queue_transfers_paused->source_queue; /* NULL: database-wide */
        break;
    default: break;
    }
    return r ? r->queue : NULL;
}

kl_code kl_sdk_limits_to_pb(const kl_database_limits *limits, Keyload__V1__DatabaseLimits *lim,
                            Keyload__V1__NullableU64 *n, kl_err *err)
{
    keyload__v1__database_limits__init(lim);
    keyload__v1__nullable_u64__init(n);
    if (limits == NULL)
        return KL_OK;
    lim->max_scan_records = limits->max_scan_records;
    lim->max_batch_bytes = limits->max_batch_bytes;
    lim->max_query_read_bytes = limits->max_query_read_bytes;
    if (limits->has_max_queue_transfer_accept_attempts) {
        if (limits->max_queue_transfer_accept_attempts == 0)
            return kl_fail(err, KL_INVALID_ARGUMENT, "max_queue_transfer_accept_attempts",
                           "MaxQueueTransferAcceptAttempts must be positive when present "
                           "(leave it out for null)");
        n->value = limits->max_queue_transfer_accept_attempts;
        lim->max_queue_transfer_accept_attempts = n;
    }
    return KL_OK;
}

bool kl_sdk_mutation_is_catalog(const Keyload__V1__Mutation *m)
{
    switch (m->kind_case) {
    case KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE:
    case KEYLOAD__V1__MUTATION__KIND_CREATE_DATABASE:
    case KEYLOAD__V1__MUTATION__KIND_BOOTSTRAP:
    case KEYLOAD__V1__MUTATION__KIND_CREATE_PRINCIPAL:
    case KEYLOAD__V1__MUTATION__KIND_GRANT_PERMISSION:
    case KEYLOAD__V1__MUTATION__KIND_REVOKE_PERMISSION:
    case KEYLOAD__V1__MUTATION__KIND_SET_PRINCIPAL_KEY:
    case KEYLOAD__V1__MUTATION__KIND_SET_DATABASE_LIMITS:
    case KEYLOAD__V1__MUTATION__KIND_SET_MEMBER_KEY:
        return true;
    case KEYLOAD__V1__MUTATION__KIND_SET_QUEUE_TRANSFERS_PAUSED:
        /* Database-wide admission is a catalog setting; one lane's lives with the lane. */
        return m->set_queue_transfers_paused->source_queue == NULL;
    default:
        return false;
    }
}

kl_code kl_batch_kind(const kl_batch *b, kl_batch_route *route, kl_err *err)
{
    size_t catalog = 0, deletes = 0;
    for (size_t i = 0; i < b->n; i++) {
        if (kl_sdk_mutation_is_catalog(b->muts[i]))
            catalog++;
        else if (b->muts[i]->kind_case == KEYLOAD__V1__MUTATION__KIND_DELETE_QUEUE)
            deletes++;
    }
    if ((catalog || deletes) && b->n != 1)
        return kl_fail(err, KL_INVALID_ARGUMENT, "mutations",
                       "a batch that changes the catalog (databases, queue definitions, "
                       "principals, limits) or deletes a queue holds only that one mutation (the "
                       "catalog changes on partition 0)");
    *route = catalog ? KL_ROUTE_CATALOG : deletes ? KL_ROUTE_DELETE_QUEUE : KL_ROUTE_QUEUE;
    return KL_OK;
}
