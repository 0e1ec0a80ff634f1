/* proc_trust: partition 0's trust in the keys of data-partition members admitted after the
 * cluster file (SetMemberKey; docs/MEMBERSHIP.md "Who vouches for a new member's key"), as
 * the process tests drive and probe it: registering and removing a member's key through the
 * SDK, and raw CatalogTail requests signed here, as a forger would send them. */
#ifndef KL_TESTS_PROC_TRUST_H
#define KL_TESTS_PROC_TRUST_H

#include "client/keyload.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* SetMemberKey(partition, member, pub) through admin (pub NULL: remove), retried under one
 * command id while partition 0 answers UNAVAILABLE, for up to 30 s; why on failure. */
bool tr_set_key(kl_client *admin, int partition, uint64_t member, const uint8_t pub[32], char *why, size_t cap);

/* One CatalogTail to whichever of urls (n of them: partition 0's members) leads partition 0,
 * signed with secret (64 bytes) as `member` of `partition` in cluster `cluster`, over the
 * digest tail_auth.h documents (computed here, independently). KL_OK when partition 0
 * answered; otherwise its refusal in err. */
kl_code tr_tail(const char *cluster, const char *const *urls, int n, int partition, uint64_t member,
                const uint8_t secret[64], kl_err *err);

#endif
