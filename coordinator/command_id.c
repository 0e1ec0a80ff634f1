#include "coordinator/command_id.h"

#include "common/canon.h"

#include <sodium.h>
#include <string.h>

const char *kl_coord_step_name(kl_coord_step step)
{
    switch (step) {
    case KL_COORD_STEP_ACCEPT: return "accept";
    case KL_COORD_STEP_COMPLETE: return "complete";
    case KL_COORD_STEP_ADVANCE: return "advance";
    case KL_COORD_STEP_REPAIR: return "repair";
    default: return "unknown";
    }
}

kl_code kl_coord_command_id(kl_coord_step step, const kl_coord_tuple *t, uint8_t out[16],
                            kl_err *err)
{
    if (step != KL_COORD_STEP_ACCEPT && step != KL_COORD_STEP_COMPLETE && step != KL_COORD_STEP_ADVANCE &&
        step != KL_COORD_STEP_REPAIR)
        return kl_fail(err, KL_INVALID_ARGUMENT, "step", "command id: unknown step %d",
                       (int)step);
    if (t == NULL || t->principal_id == NULL || t->tenant == NULL || t->database == NULL ||
        t->source == NULL || t->destination == NULL || t->transfer_id == NULL ||
        (t->fingerprint == NULL && t->fingerprint_len != 0))
        return kl_fail(err, KL_INVALID_ARGUMENT, "tuple",
                       "command id: the transfer tuple is incomplete");
    kl_canon c;
    kl_canon_init(&c);
    /* Tags follow the order of the items so that moving bytes from one item to its
     * neighbour always changes the encoding (every item is also length-prefixed). */
    kl_canon_str(&c, 1, KL_COORD_COMMAND_DOMAIN);
    kl_canon_str(&c, 2, kl_coord_step_name(step));
    kl_canon_str(&c, 3, t->principal_id);
    kl_canon_str(&c, 4, t->tenant);
    kl_canon_str(&c, 5, t->database);
    kl_canon_lane(&c, 6, t->source);
    kl_canon_bytes(&c, 7, t->transfer_id, 16);
    kl_canon_lane(&c, 8, t->destination);
    kl_canon_bytes(&c, 9, t->fingerprint, t->fingerprint_len);
    kl_canon_u64(&c, 10, t->generation);
    if (c.oom) {
        kl_canon_free(&c);
        return kl_fail(err, KL_INTERNAL, "memory", "command id: out of memory");
    }
    uint8_t digest[32];
    crypto_generichash(digest, sizeof digest, c.buf, c.len, NULL, 0);
    kl_canon_free(&c);
    memcpy(out, digest, 16);
    uint8_t any = 0;
    for (int i = 0; i < 16; i++)
        any |= out[i];
    if (any == 0)
        out[15] = 1; /* a zero GUID is invalid (ARCHITECTURE.md "Sessions and RPC"); still deterministic */
    return KL_OK;
}
