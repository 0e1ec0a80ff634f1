/* tail_auth: member signatures on keyload.v1.CatalogTail (ARCHITECTURE.md "Replication").
 *
 * Why: the tail's request reports a data partition's applied catalog version, and partition
 * 0 answers a catalog change (a revocation) once every partition reported it; its answer
 * carries the catalog every data partition authorizes with. A forged request could make a
 * revocation return before it holds; a forged answer could grant anything. So both are
 * signed with Ed25519 member keys (the cluster file lists the public halves):
 *
 *   request digest  = BLAKE2b-256("keyload.v1.CatalogTail request" 0x00 cluster 0x00
 *                     u32be partition, u64be applied_version, u32be wait_ms, u64be member,
 *                     i64be unix_ms), signed by the tailing member;
 *   answer digest   = BLAKE2b-256("keyload.v1.CatalogTail answer" 0x00 cluster 0x00
 *                     u64be member, request signature (64 bytes), answer bytes), signed by
 *                     the answering member of partition 0, so an answer is bound to the
 *                     one request it answers and cannot be replayed to another.
 *
 * Required when every member of partition 0 and of the tailing partition has a public key
 * in the cluster file (what deploy/keyload-cluster writes); otherwise unsigned tails are
 * accepted (hand-written test clusters without keys) and signatures are not checked. A
 * request signed more than KL_TAIL_AUTH_SKEW_MS away from the verifier's clock is refused.
 *
 * Which key a request's member has: partition 0's catalog record for (partition, member)
 * first (CatalogMemberKey, written by a cluster administrator with SetMemberKey; the caller
 * reads it and passes it as kl_tail_vouched), then partition 0's cluster file. An answer's
 * member of partition 0 the same way, from the data partition's applied copy of the catalog
 * (record (0, member)): every version in that copy came from an answer that verified, so a
 * key registered there is vouched for by a cluster administrator through a chain of
 * verified answers, and a partition 0 member replaced after the data partition's cluster
 * file was written is trusted once that copy holds its key. A removed
 * record refuses the member even when the cluster file names it, so a member taken out of a
 * partition stops getting catalog leases once its removal is applied on partition 0's
 * leader, and a member the file never named is trusted only once an administrator vouched
 * for its key (docs/MEMBERSHIP.md "Who vouches for a new member's key").
 *
 * Errors: UNAUTHENTICATED with detail "tail_signature" (no key known, or the signature does
 * not verify), "tail_member_removed" or "tail_stale"; nothing is recorded from a refused
 * request. Pure functions of their inputs (the clock and the record are passed). */
#ifndef KL_TAIL_AUTH_H
#define KL_TAIL_AUTH_H

#include "common/cluster.h"
#include "common/status.h"
#include "keyload/v1/catalog.pb-c.h"

#include <stdbool.h>

#define KL_TAIL_AUTH_SKEW_MS 60000
#define KL_TAIL_AUTH_SIG_LEN 64

/* Whether tails between partition 0 and `partition` must be signed (see above). */
bool kl_tail_auth_required(const kl_cluster *c, int partition);

/* Fills r->member, r->unix_ms and r->signature (pointing into sig, 64 bytes, owned by the
 * caller) from the member's secret key. */
void kl_tail_auth_sign_request(const kl_cluster *c, Keyload__V1__CatalogTailRequest *r, uint64_t member,
                               int64_t now_unix_ms, const uint8_t member_secret[64],
                               uint8_t sig[KL_TAIL_AUTH_SIG_LEN]);
/* What partition 0's catalog says about a member's key (see above). */
typedef enum kl_tail_vouch {
    KL_TAIL_VOUCH_NONE = 0,   /* no record: the cluster file decides */
    KL_TAIL_VOUCH_KEY,        /* public_key is the member's key */
    KL_TAIL_VOUCH_REMOVED,    /* the member's key is refused */
} kl_tail_vouch;

typedef struct kl_tail_vouched {
    kl_tail_vouch state;
    uint8_t public_key[32];
} kl_tail_vouched;

/* What a CatalogMemberKey record (NULL: none) says, as kl_tail_vouched. */
void kl_tail_auth_vouched_of(const Keyload__V1__CatalogMemberKey *rec, kl_tail_vouched *out);

/* Checks r's signature against the key of member r->member of partition r->partition
 * (vouched: partition 0's record for that member, NULL when there is none; then the cluster
 * file's key), and its age. */
kl_code kl_tail_auth_verify_request(const kl_cluster *c, const kl_tail_vouched *vouched,
                                    const Keyload__V1__CatalogTailRequest *r, int64_t now_unix_ms, kl_err *err);

/* Signs answer bytes for the request whose signature is req_sig (64 bytes, or NULL when the
 * request was unsigned: then the answer is bound to 64 zero bytes). */
void kl_tail_auth_sign_answer(const kl_cluster *c, uint64_t member, const uint8_t *req_sig,
                              const uint8_t *answer, size_t len, const uint8_t member_secret[64],
                              uint8_t sig[KL_TAIL_AUTH_SIG_LEN]);
/* Checks a signed answer from member a->member of partition 0 against req_sig, with the
 * key the data partition's applied catalog copy records for (0, a->member) (vouched; NULL
 * when none), else the cluster file's. */
kl_code kl_tail_auth_verify_answer(const kl_cluster *c, const kl_tail_vouched *vouched,
                                   const Keyload__V1__SignedCatalogTailAnswer *a, const uint8_t *req_sig, kl_err *err);

#endif
