/* intent: what the coordinator reads from an intent token (ARCHITECTURE.md "Engine") without verifying
 * it. The daemon verifies every token it is handed; the coordinator only needs the claims
 * to decide whether an intent is its own (created by its principal, in its tenant and
 * database) and to derive command ids (fingerprint, generation). A forged token gains
 * nothing: Accept refuses it.
 *
 * kl_coord_intent holds copies of what it names (no pointer into the token), so it lives
 * independently of the answer it came from. Pure module. */
#ifndef KL_COORD_INTENT_H
#define KL_COORD_INTENT_H

#include "common/status.h"
#include "coordinator/config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kl_coord_intent {
    char principal_id[KL_COORD_NAME_MAX + 1];
    char source_tenant[KL_COORD_NAME_MAX + 1];
    char source_database[KL_COORD_NAME_MAX + 1];
    char target_tenant[KL_COORD_NAME_MAX + 1];
    char target_database[KL_COORD_NAME_MAX + 1];
    uint8_t transfer_id[16];
    uint64_t generation;
    uint8_t fingerprint[32];
    size_t fingerprint_len;
} kl_coord_intent;

/* Decodes SignedToken then TransferClaims (purpose TRANSFER_INTENT). INVALID_ARGUMENT
 * (detail "intent_token") when the bytes are no such token, its purpose is not an intent,
 * or a name or the fingerprint does not fit. */
kl_code kl_coord_intent_decode(const uint8_t *token, size_t len, kl_coord_intent *out,
                               kl_err *err);

/* Whether the coordinator may take the intent: created by principal_id, and both lanes in
 * tenant/database (the seeds: "that subject must equal the retained source creator and
 * tenant"). */
bool kl_coord_intent_is_ours(const kl_coord_intent *in, const char *principal_id,
                             const char *tenant, const char *database);

#endif
