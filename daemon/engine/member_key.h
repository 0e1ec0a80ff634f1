/* member_key: SetMemberKey, partition 0's record of the key it trusts for a member of a data
 * partition admitted after the cluster file was written (docs/MEMBERSHIP.md "Who vouches for
 * a new member's key"; catalog.proto CatalogMemberKey under 'C' 'M').
 *
 * A catalog mutation, cluster administrators only: the same principal that may run the
 * MemberChange vouches for the key. A 32-byte key registers (or replaces) the key of
 * (partition, member); an empty key leaves a removed record, which refuses the member's
 * tails even when partition 0's cluster file names it. A record never disappears (a removal
 * must outlive every restart of partition 0 from an older cluster file), so the table is
 * bounded: at most KL_MEMBER_KEYS_MAX records in the catalog, then RESOURCE_EXHAUSTED
 * "member_keys_full". Writing what the record already says changes nothing (no version). */
#ifndef KL_MEMBER_KEY_H
#define KL_MEMBER_KEY_H

#include "common/limits.h"
#include "daemon/engine/engine.h"

#endif
