#include "coordinator/intent.h"

#include "keyload/v1/claims.pb-c.h"

#include <string.h>

static bool copy_name(char *dst, size_t cap, const char *src)
{
    size_t n = src ? strlen(src) : 0;
    if (n >= cap)
        return false;
    memcpy(dst, src ? src : "", n + 1);
    return true;
}

kl_code kl_coord_intent_decode(const uint8_t *token, size_t len, kl_coord_intent *out,
                               kl_err *err)
{
    memset(out, 0, sizeof *out);
    if (token == NULL || len == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "intent_token", "intent token is empty");
    Keyload__V1__SignedToken *st = keyload__v1__signed_token__unpack(NULL, len, token);
    if (st == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "intent_token",
                       "intent token is not a SignedToken");
    Keyload__V1__TransferClaims *cl =
        keyload__v1__transfer_claims__unpack(NULL, st->claims.len, st->claims.data);
    keyload__v1__signed_token__free_unpacked(st, NULL);
    if (cl == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "intent_token",
                       "intent token carries no TransferClaims");
    const char *why = NULL;
    if (cl->purpose != KEYLOAD__V1__CLAIM_PURPOSE__TRANSFER_INTENT)
        why = "its purpose is not TransferIntent";
    else if (cl->source == NULL || cl->target == NULL)
        why = "its source or target lane is missing";
    else if (cl->transfer_id.len != 16)
        why = "its transfer id is not 16 bytes";
    else if (cl->fingerprint.len > sizeof out->fingerprint)
        why = "its fingerprint is too long";
    else if (!copy_name(out->principal_id, sizeof out->principal_id, cl->principal_id) ||
             !copy_name(out->source_tenant, sizeof out->source_tenant, cl->source->tenant) ||
             !copy_name(out->source_database, sizeof out->source_database,
                        cl->source->database) ||
             !copy_name(out->target_tenant, sizeof out->target_tenant, cl->target->tenant) ||
             !copy_name(out->target_database, sizeof out->target_database,
                        cl->target->database))
        why = "a name in it is too long";
    if (why == NULL) {
        memcpy(out->transfer_id, cl->transfer_id.data, 16);
        out->generation = cl->generation;
        memcpy(out->fingerprint, cl->fingerprint.data, cl->fingerprint.len);
        out->fingerprint_len = cl->fingerprint.len;
    }
    keyload__v1__transfer_claims__free_unpacked(cl, NULL);
    if (why != NULL) {
        memset(out, 0, sizeof *out);
        return kl_fail(err, KL_INVALID_ARGUMENT, "intent_token", "intent token: %s", why);
    }
    return KL_OK;
}

bool kl_coord_intent_is_ours(const kl_coord_intent *in, const char *principal_id,
                             const char *tenant, const char *database)
{
    return principal_id != NULL && principal_id[0] != '\0' &&
           strcmp(in->principal_id, principal_id) == 0 && strcmp(in->source_tenant, tenant) == 0 &&
           strcmp(in->source_database, database) == 0 && strcmp(in->target_tenant, tenant) == 0 &&
           strcmp(in->target_database, database) == 0;
}
