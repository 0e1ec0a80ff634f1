/* Stateless shape checks of each mutation kind (validate.h); the batch-level checks that
 * call them are kl_engine_validate_batch's (daemon/engine/mutation.c).
 * Every message names the mutation index and field at fault, never their contents
 * beyond names, which are identifiers. */
#include "daemon/engine/validate.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/authz.h"

#include "common/guid.h"
#include "common/names.h"

#include <stdio.h>
#include <string.h>

static kl_code check_ref(const char *where, const Keyload__V1__QueueLaneRef *r, bool lane_allowed,
                         kl_err *err)
{
    char what[96];
    if (r == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, where, "%s is missing", where);
    kl_code rc;
    snprintf(what, sizeof what, "%s.tenant", where);
    if ((rc = kl_name_check(what, r->tenant, err)) != KL_OK)
        return rc;
    snprintf(what, sizeof what, "%s.database", where);
    if ((rc = kl_name_check(what, r->database, err)) != KL_OK)
        return rc;
    snprintf(what, sizeof what, "%s.queue", where);
    if ((rc = kl_name_check(what, r->queue, err)) != KL_OK)
        return rc;
    if (r->lane != NULL && r->lane[0] != '\0') {
        snprintf(what, sizeof what, "%s.lane", where);
        if (!lane_allowed)
            return kl_fail(err, KL_INVALID_ARGUMENT, what, "%s is not used here; leave it empty", what);
        if ((rc = kl_name_check(what, r->lane, err)) != KL_OK)
            return rc;
    }
    return KL_OK;
}

static kl_code check_message(const char *where, const Keyload__V1__EnqueueMessage *m, kl_err *err)
{
    if (m == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, where, "%s.message is missing", where);
    if (m->n_headers > KL_MAP_ENTRIES_MAX || m->n_fields > KL_MAP_ENTRIES_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "headers",
                       "%s.message: at most %d headers and %d fields", where, KL_MAP_ENTRIES_MAX,
                       KL_MAP_ENTRIES_MAX);
    for (size_t i = 0; i < m->n_headers; i++) {
        const char *k = m->headers[i]->key;
        size_t kn = strlen(k);
        if (kn == 0 || kn > KL_NAME_LEN_MAX)
            return kl_fail(err, KL_INVALID_ARGUMENT, "headers.key",
                           "%s.message.headers[%zu].key must be 1..%d bytes", where, i, KL_NAME_LEN_MAX);
        if (strlen(m->headers[i]->value) > KL_HEADER_VALUE_MAX)
            return kl_fail(err, KL_INVALID_ARGUMENT, "headers.value",
                           "%s.message.headers[%zu].value is over %d bytes", where, i, KL_HEADER_VALUE_MAX);
        for (size_t j = 0; j < i; j++)
            if (strcmp(m->headers[j]->key, k) == 0)
                return kl_fail(err, KL_INVALID_ARGUMENT, "headers.key",
                               "%s.message.headers[%zu].key repeats headers[%zu].key", where, i, j);
    }
    for (size_t i = 0; i < m->n_fields; i++) {
        const char *k = m->fields[i]->key;
        size_t kn = strlen(k);
        if (kn == 0 || kn > KL_NAME_LEN_MAX)
            return kl_fail(err, KL_INVALID_ARGUMENT, "fields.key",
                           "%s.message.fields[%zu].key must be 1..%d bytes", where, i, KL_NAME_LEN_MAX);
        if (m->fields[i]->value == NULL ||
            m->fields[i]->value->kind_case == KEYLOAD__V1__FIELD_VALUE__KIND__NOT_SET)
            return kl_fail(err, KL_INVALID_ARGUMENT, "fields.value",
                           "%s.message.fields[%zu].value has no type", where, i);
        for (size_t j = 0; j < i; j++)
            if (strcmp(m->fields[j]->key, k) == 0)
                return kl_fail(err, KL_INVALID_ARGUMENT, "fields.key",
                               "%s.message.fields[%zu].key repeats fields[%zu].key", where, i, j);
    }
    if (m->expires_at_unix_ms < 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "expires_at_unix_ms",
                       "%s.message.expires_at_unix_ms must not be negative", where);
    if (m->delay_ms < 0 || m->delay_ms > KL_DELAY_MS_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "delay_ms",
                       "%s.message.delay_ms must be 0..%lld", where, (long long)KL_DELAY_MS_MAX);
    return KL_OK;
}

static kl_code check_tokens(const char *where, size_t n, const ProtobufCBinaryData *t, kl_err *err)
{
    if (n == 0 || n > KL_RECEIVE_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "lease_tokens", "%s.lease_tokens must hold 1..%d tokens",
                       where, KL_RECEIVE_MAX);
    for (size_t i = 0; i < n; i++)
        if (t[i].len != 16)
            return kl_fail(err, KL_INVALID_ARGUMENT, "lease_tokens",
                           "%s.lease_tokens[%zu] is not a 16-byte lease token", where, i);
    return KL_OK;
}

static kl_code check_transfer_id(size_t idx, const char *what, const ProtobufCBinaryData *id, kl_err *err)
{
    if (!kl_guid_valid(id->data, id->len))
        return kl_fail(err, KL_INVALID_ARGUMENT, "transfer_id",
                       "mutations[%zu].%s.transfer_id must be a 16-byte GUID that is not all zero",
                       idx, what);
    return KL_OK;
}

kl_code kl_validate_create_queue(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    snprintf(where, sizeof where, "mutations[%zu].create_queue.queue", idx);
    if ((rc = check_ref(where, m->create_queue->queue, false, err)) != KL_OK)
        return rc;
    if (m->create_queue->partition < -1)
        return kl_fail(err, KL_INVALID_ARGUMENT, "partition",
                       "mutations[%zu].create_queue.partition must be -1 (choose) or a partition id",
                       idx);
    if (m->create_queue->limits && m->create_queue->limits->dead_letter_queue[0] != '\0') {
        snprintf(where, sizeof where, "mutations[%zu].create_queue.limits.dead_letter_queue", idx);
        return kl_name_check(where, m->create_queue->limits->dead_letter_queue, err);
    }
    return KL_OK;
}

kl_code kl_validate_create_database(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    snprintf(where, sizeof where, "mutations[%zu].create_database.tenant", idx);
    if ((rc = kl_name_check(where, m->create_database->tenant, err)) != KL_OK)
        return rc;
    snprintf(where, sizeof where, "mutations[%zu].create_database.database", idx);
    return kl_name_check(where, m->create_database->database, err);
}

kl_code kl_validate_bootstrap(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    const Keyload__V1__Bootstrap *b = m->bootstrap;
    snprintf(where, sizeof where, "mutations[%zu].bootstrap.tenant", idx);
    if ((rc = kl_name_check(where, b->tenant, err)) != KL_OK)
        return rc;
    snprintf(where, sizeof where, "mutations[%zu].bootstrap.database", idx);
    if ((rc = kl_name_check(where, b->database, err)) != KL_OK)
        return rc;
    snprintf(where, sizeof where, "mutations[%zu].bootstrap.admin_id", idx);
    if ((rc = kl_name_check(where, b->admin_id, err)) != KL_OK)
        return rc;
    if (b->admin_public_key.len != 32)
        return kl_fail(err, KL_INVALID_ARGUMENT, "admin_public_key",
                       "mutations[%zu].bootstrap.admin_public_key must be a 32-byte Ed25519 key", idx);
    if (b->proof.len != 32)
        return kl_fail(err, KL_INVALID_ARGUMENT, "proof", "mutations[%zu].bootstrap.proof must be 32 bytes",
                       idx);
    return KL_OK;
}

kl_code kl_validate_create_principal(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    const Keyload__V1__CreatePrincipal *p = m->create_principal;
    snprintf(where, sizeof where, "mutations[%zu].create_principal.tenant", idx);
    if ((rc = kl_name_check(where, p->tenant, err)) != KL_OK)
        return rc;
    snprintf(where, sizeof where, "mutations[%zu].create_principal.principal_id", idx);
    if ((rc = kl_name_check(where, p->principal_id, err)) != KL_OK)
        return rc;
    if (p->public_key.len != 32)
        return kl_fail(err, KL_INVALID_ARGUMENT, "public_key",
                       "mutations[%zu].create_principal.public_key must be a 32-byte Ed25519 key", idx);
    return KL_OK; /* roles: kl_authz_set_roles checks their shape */
}

kl_code kl_validate_grant_permission(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    snprintf(where, sizeof where, "mutations[%zu].grant_permission.principal_id", idx);
    if ((rc = kl_name_check(where, m->grant_permission->principal_id, err)) != KL_OK)
        return rc;
    if (m->grant_permission->grant == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "grant", "mutations[%zu].grant_permission.grant is missing", idx);
    return kl_authz_validate_grant(m->grant_permission->grant, err);
}

kl_code kl_validate_revoke_permission(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    snprintf(where, sizeof where, "mutations[%zu].revoke_permission.principal_id", idx);
    if ((rc = kl_name_check(where, m->revoke_permission->principal_id, err)) != KL_OK)
        return rc;
    snprintf(where, sizeof where, "mutations[%zu].revoke_permission.database", idx);
    return kl_name_check(where, m->revoke_permission->database, err);
}

kl_code kl_validate_set_principal_key(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    snprintf(where, sizeof where, "mutations[%zu].set_principal_key.principal_id", idx);
    if ((rc = kl_name_check(where, m->set_principal_key->principal_id, err)) != KL_OK)
        return rc;
    if (m->set_principal_key->public_key.len != 32)
        return kl_fail(err, KL_INVALID_ARGUMENT, "public_key",
                       "mutations[%zu].set_principal_key.public_key must be a 32-byte Ed25519 key", idx);
    return KL_OK;
}

kl_code kl_validate_set_database_limits(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    snprintf(where, sizeof where, "mutations[%zu].set_database_limits.tenant", idx);
    if ((rc = kl_name_check(where, m->set_database_limits->tenant, err)) != KL_OK)
        return rc;
    snprintf(where, sizeof where, "mutations[%zu].set_database_limits.database", idx);
    return kl_name_check(where, m->set_database_limits->database, err);
}

kl_code kl_validate_delete_queue(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    snprintf(where, sizeof where, "mutations[%zu].delete_queue.queue", idx);
    return check_ref(where, m->delete_queue->queue, false, err);
}

kl_code kl_validate_enqueue(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    snprintf(where, sizeof where, "mutations[%zu].enqueue.lane", idx);
    if ((rc = check_ref(where, m->enqueue->lane, true, err)) != KL_OK)
        return rc;
    snprintf(where, sizeof where, "mutations[%zu].enqueue", idx);
    return check_message(where, m->enqueue->message, err);
}

kl_code kl_validate_receive(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    snprintf(where, sizeof where, "mutations[%zu].receive.lane", idx);
    if ((rc = check_ref(where, m->receive->lane, true, err)) != KL_OK)
        return rc;
    if (m->receive->max_messages > KL_RECEIVE_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "max_messages",
                       "mutations[%zu].receive.max_messages must be 0..%d", idx, KL_RECEIVE_MAX);
    if (m->receive->lease_ms > KL_LEASE_MS_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "lease_ms",
                       "mutations[%zu].receive.lease_ms must be 0..%lld", idx,
                       (long long)KL_LEASE_MS_MAX);
    if (m->receive->wait_ms > KL_RECEIVE_WAIT_MS_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "wait_ms",
                       "mutations[%zu].receive.wait_ms must be 0..%d", idx, KL_RECEIVE_WAIT_MS_MAX);
    return KL_OK;
}

kl_code kl_validate_ack(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    snprintf(where, sizeof where, "mutations[%zu].ack.queue", idx);
    if ((rc = check_ref(where, m->ack->queue, false, err)) != KL_OK)
        return rc;
    snprintf(where, sizeof where, "mutations[%zu].ack", idx);
    return check_tokens(where, m->ack->n_lease_tokens, m->ack->lease_tokens, err);
}

kl_code kl_validate_release(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    snprintf(where, sizeof where, "mutations[%zu].release.queue", idx);
    if ((rc = check_ref(where, m->release->queue, false, err)) != KL_OK)
        return rc;
    snprintf(where, sizeof where, "mutations[%zu].release", idx);
    return check_tokens(where, m->release->n_lease_tokens, m->release->lease_tokens, err);
}

kl_code kl_validate_create_queue_transfer(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    const Keyload__V1__CreateQueueTransfer *t = m->create_queue_transfer;
    snprintf(where, sizeof where, "mutations[%zu].create_queue_transfer.source_queue", idx);
    if ((rc = check_ref(where, t->source_queue, true, err)) != KL_OK)
        return rc;
    snprintf(where, sizeof where, "mutations[%zu].create_queue_transfer.destination", idx);
    if ((rc = check_ref(where, t->destination, true, err)) != KL_OK)
        return rc;
    if ((rc = check_transfer_id(idx, "create_queue_transfer", &t->transfer_id, err)) != KL_OK)
        return rc;
    if (strcmp(t->source_queue->tenant, t->destination->tenant) != 0 ||
        strcmp(t->source_queue->database, t->destination->database) != 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "destination",
                       "mutations[%zu].create_queue_transfer.destination must be in the source's "
                       "tenant/database (%s/%s): transfers stay inside one database",
                       idx, t->source_queue->tenant, t->source_queue->database);
    snprintf(where, sizeof where, "mutations[%zu].create_queue_transfer", idx);
    return check_message(where, t->message, err);
}

kl_code kl_validate_accept_queue_transfer(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    snprintf(where, sizeof where, "mutations[%zu].accept_queue_transfer.destination_queue", idx);
    if ((rc = check_ref(where, m->accept_queue_transfer->destination_queue, true, err)) != KL_OK)
        return rc;
    if (m->accept_queue_transfer->intent_token.len == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "intent_token",
                       "mutations[%zu].accept_queue_transfer.intent_token is missing", idx);
    return KL_OK;
}

kl_code kl_validate_complete_queue_transfer(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    snprintf(where, sizeof where, "mutations[%zu].complete_queue_transfer.source_queue", idx);
    if ((rc = check_ref(where, m->complete_queue_transfer->source_queue, true, err)) != KL_OK)
        return rc;
    if ((rc = check_transfer_id(idx, "complete_queue_transfer", &m->complete_queue_transfer->transfer_id,
                                err)) != KL_OK)
        return rc;
    if (m->complete_queue_transfer->receipt_token.len == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "receipt_token",
                       "mutations[%zu].complete_queue_transfer.receipt_token is missing", idx);
    return KL_OK;
}

kl_code kl_validate_advance_queue_transfer(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    bool attempt = m->kind_case == KEYLOAD__V1__MUTATION__KIND_ADVANCE_QUEUE_TRANSFER_ATTEMPT;
    const char *name = attempt ? "advance_queue_transfer_attempt" : "advance_queue_transfer_repair";
    const Keyload__V1__QueueLaneRef *src = attempt ? m->advance_queue_transfer_attempt->source_queue
                                                   : m->advance_queue_transfer_repair->source_queue;
    const ProtobufCBinaryData *tid = attempt ? &m->advance_queue_transfer_attempt->transfer_id
                                             : &m->advance_queue_transfer_repair->transfer_id;
    const ProtobufCBinaryData *wit = attempt ? &m->advance_queue_transfer_attempt->witness_token
                                             : &m->advance_queue_transfer_repair->witness_token;
    snprintf(where, sizeof where, "mutations[%zu].%s.source_queue", idx, name);
    if ((rc = check_ref(where, src, true, err)) != KL_OK)
        return rc;
    if ((rc = check_transfer_id(idx, name, tid, err)) != KL_OK)
        return rc;
    if (wit->len == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "witness_token", "mutations[%zu].%s.witness_token is missing",
                       idx, name);
    return KL_OK;
}

kl_code kl_validate_set_queue_transfers_paused(size_t idx, const Keyload__V1__Mutation *m, kl_err *err)
{
    char where[96];
    kl_code rc;
    const Keyload__V1__SetQueueTransfersPaused *p = m->set_queue_transfers_paused;
    if (p->source_queue != NULL) {
        snprintf(where, sizeof where, "mutations[%zu].set_queue_transfers_paused.source_queue", idx);
        if ((rc = check_ref(where, p->source_queue, true, err)) != KL_OK)
            return rc;
        if (strcmp(p->source_queue->tenant, p->tenant) != 0 || strcmp(p->source_queue->database, p->database) != 0)
            return kl_fail(err, KL_INVALID_ARGUMENT, "source_queue",
                           "mutations[%zu].set_queue_transfers_paused.source_queue must be in "
                           "its tenant/database", idx);
    }
    snprintf(where, sizeof where, "mutations[%zu].set_queue_transfers_paused.tenant", idx);
    if ((rc = kl_name_check(where, p->tenant, err)) != KL_OK)
        return rc;
    snprintf(where, sizeof where, "mutations[%zu].set_queue_transfers_paused.database", idx);
    return kl_name_check(where, p->database, err);
}
