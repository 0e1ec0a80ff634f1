/* canon: canonical encodings and BLAKE2b digests that must not depend on wire bytes.
 *
 * Encoding (version 1), used for request digests and message fingerprints:
 *   - every item is a tag byte followed by its value;
 *   - integers are 8-byte big-endian (signed ones as two's complement);
 *   - byte strings and text are a 4-byte big-endian length, then the bytes;
 *   - fields of a message appear in field-number order; an absent optional message is
 *     the tag 0x00; repeated items are a 4-byte count, then the items;
 *   - header and field maps are emitted sorted by key (bytewise), so two requests that
 *     list the same map in different orders have the same encoding. Duplicate keys are
 *     refused earlier, by validation.
 * The first item of every encoding is a domain string, so encodings of different kinds
 * can never collide. */
#ifndef KL_CANON_H
#define KL_CANON_H

#include "keyload/v1/queue.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KL_DIGEST_LEN 32

typedef struct kl_canon {
    uint8_t *buf;
    size_t len, cap;
    int oom;                 /* set once an allocation failed (or a fixed buffer was too
                              * small); the result is then unusable */
    int fixed;               /* buf is the caller's, never grown or freed */
} kl_canon;

void kl_canon_init(kl_canon *c);
/* Encodes into the caller's buffer (no allocation, e.g. handshake transcripts); writing
 * past cap sets oom. kl_canon_free is then not needed. */
void kl_canon_init_fixed(kl_canon *c, uint8_t *buf, size_t cap);
void kl_canon_free(kl_canon *c);
void kl_canon_u64(kl_canon *c, uint8_t tag, uint64_t v);
void kl_canon_bytes(kl_canon *c, uint8_t tag, const void *p, size_t n);
void kl_canon_str(kl_canon *c, uint8_t tag, const char *s);
void kl_canon_lane(kl_canon *c, uint8_t tag, const Keyload__V1__QueueLaneRef *r);
void kl_canon_message(kl_canon *c, uint8_t tag, const Keyload__V1__EnqueueMessage *m);
void kl_canon_mutation(kl_canon *c, const Keyload__V1__Mutation *m);

/* One mutation kind's body (what follows its kind byte). Each is the canonical-encoding
 * column of that kind's row in the daemon's mutation table (daemon/engine/mutation.h). */
typedef void (*kl_canon_mutation_fn)(kl_canon *c, const Keyload__V1__Mutation *m);
/* The body encoder of a kind number, or NULL for a kind that has none. */
kl_canon_mutation_fn kl_canon_mutation_encoder(int kind);
void kl_canon_create_queue(kl_canon *c, const Keyload__V1__Mutation *m);
void kl_canon_delete_queue(kl_canon *c, const Keyload__V1__Mutation *m);
void kl_canon_bootstrap(kl_canon *c, const Keyload__V1__Mutation *m);
void kl_canon_create_database(kl_canon *c, const Keyload__V1__Mutation *m);
void kl_canon_enqueue(kl_canon *c, const Keyload__V1__Mutation *m);
void kl_canon_receive(kl_canon *c, const Keyload__V1__Mutation *m);
void kl_canon_ack(kl_canon *c, const Keyload__V1__Mutation *m);
void kl_canon_release(kl_canon *c, const Keyload__V1__Mutation *m);
void kl_canon_create_principal(kl_canon *c, const Keyload__V1__Mutation *m);
void kl_canon_grant_permission(kl_canon *c, const Keyload__V1__Mutation *m);
void kl_canon_revoke_permission(kl_canon *c, const Keyload__V1__Mutation *m);
void kl_canon_set_principal_key(kl_canon *c, const Keyload__V1__Mutation *m);
void kl_canon_set_database_limits(kl_canon *c, const Keyload__V1__Mutation *m);
void kl_canon_create_queue_transfer(kl_canon *c, const Keyload__V1__Mutation *m);
void kl_canon_accept_queue_transfer(kl_canon *c, const Keyload__V1__Mutation *m);
void kl_canon_complete_queue_transfer(kl_canon *c, const Keyload__V1__Mutation *m);
void kl_canon_set_queue_transfers_paused(kl_canon *c, const Keyload__V1__Mutation *m);
void kl_canon_advance_queue_transfer_attempt(kl_canon *c, const Keyload__V1__Mutation *m);
void kl_canon_advance_queue_transfer_repair(kl_canon *c, const Keyload__V1__Mutation *m);
void kl_canon_set_transfer_hold(kl_canon *c, const Keyload__V1__Mutation *m);
void kl_canon_set_member_key(kl_canon *c, const Keyload__V1__Mutation *m);

/* Whether a batch holding a mutation of this kind keeps its outcome for ever: the
 * transfer kinds and the transfers pause, whose command ids are deterministic and replay
 * across a coordinator's restarts (ARCHITECTURE.md "Outcome retention"). The SDK (which then
 * sends no first-sent time) and the daemon (which then writes no expiry) must agree. O(1). */
bool kl_canon_kind_keeps_outcome(Keyload__V1__Mutation__KindCase kind);

/* BLAKE2b-256 of the canonical encoding of (method, principal, batch). Returns -1 on OOM. */
int kl_canon_batch_digest(const char *method, const char *principal,
                          const Keyload__V1__BatchRequest *batch, uint8_t out[KL_DIGEST_LEN]);
/* BLAKE2b-256 fingerprint of one message (used by transfers). Returns -1 on OOM. */
int kl_canon_message_fingerprint(const Keyload__V1__EnqueueMessage *m, uint8_t out[KL_DIGEST_LEN]);

/* The proof of the cluster secret a Bootstrap carries: BLAKE2b-256 keyed with the 32-byte
 * secret over the canonical encoding of ("keyload.bootstrap.v1", tenant, database,
 * admin_id, admin public key). Returns -1 on OOM. */
int kl_canon_bootstrap_proof(const uint8_t secret[32], const char *tenant, const char *database,
                             const char *admin_id, const uint8_t *pk, size_t pk_len,
                             uint8_t out[KL_DIGEST_LEN]);

#endif
