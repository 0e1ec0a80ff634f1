/* grants: the names of permissions and the queue-pattern rule (ARCHITECTURE.md "Engine"), shared by
 * the daemon's evaluator (daemon/engine/authz.h) and the SDK so that both accept and name
 * exactly the same things. Pure, reentrant.
 *
 * Queue patterns: an exact queue name ("orders"), or a prefix of identifier bytes followed
 * by ONE trailing '*' ("orders.*", "orders*", "*"); 1..KL_NAME_LEN_MAX bytes. */
#ifndef KL_GRANTS_H
#define KL_GRANTS_H

#include "common/status.h"
#include "keyload/v1/queue.pb-c.h"

#include <stdbool.h>

/* "QueuePublish", "QueueConsume", "QueueAck", "QueueInspect", "Query"; "unknown" else. */
const char *kl_grants_permission_name(Keyload__V1__Permission p);
/* Parses those names; PERMISSION_UNSPECIFIED when unknown (or NULL). */
Keyload__V1__Permission kl_grants_permission_parse(const char *name);
bool kl_grants_permission_known(Keyload__V1__Permission p);

/* KL_OK or INVALID_ARGUMENT (detail = what) when pattern breaks the rule above. */
kl_code kl_grants_pattern_check(const char *what, const char *pattern, kl_err *err);

#endif
