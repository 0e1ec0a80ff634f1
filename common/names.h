/* names: the one rule for identifiers (tenant, database, queue, lane), shared by the
 * daemon's validation and the SDK so that both refuse exactly the same names.
 * An identifier is 1..KL_NAME_LEN_MAX bytes of [A-Za-z0-9._:-]: no '/', which separates
 * QUEUE/LANE and TENANT/DB on the command line, and no NUL, which separates key parts
 * in the store. */
#ifndef KL_NAMES_H
#define KL_NAMES_H

#include "common/limits.h"
#include "common/status.h"


/* KL_OK or INVALID_ARGUMENT naming `what` (detail = what) and the first bad byte's offset.
 * With err NULL it only answers: nothing is formatted and what may be NULL. */
kl_code kl_name_check(const char *what, const char *s, kl_err *err);

#endif
