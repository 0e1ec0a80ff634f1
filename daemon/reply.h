/* reply: how the node answers one submitted batch. Its own header because the node and the
 * parked Receives (park) both hold such answers, and park must not include the node. */
#ifndef KL_REPLY_H
#define KL_REPLY_H

#include "common/status.h"

#include <stddef.h>
#include <stdint.h>

/* Answer to one submitted batch. On KL_OK, receipt holds the stored receipt bytes (valid
 * during the call only); otherwise err explains. */
typedef void (*kl_node_reply_fn)(void *cookie, kl_code code, const kl_err *err,
                                 const uint8_t *receipt, size_t len);

#endif
