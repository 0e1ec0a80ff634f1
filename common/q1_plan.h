/* q1_plan: what a parsed Q1 call (common/q1.h) means. It owns the alias table: for each
 * alias its canonical name, the native operation it becomes, the queue that routes it (and
 * on which the Query permission is checked) and a mapping function that turns the call's
 * arguments into exactly the native request (a BatchRequest of one mutation, or a transfer
 * read request). Pure: no I/O; shared by the daemon (which executes the native request
 * through its native path) and the SDK (which routes by plan.queue and checks arguments
 * before sending).
 *
 * Adding an alias = one row in the table of q1_plan.c + one mapping function filling the
 * native request from the arguments (the kl_q1_arg_* helpers of common/q1_args.h check
 * presence and types and name the argument at fault; any argument the function did not read
 * is refused).
 *
 * Errors: INVALID_ARGUMENT with the argument's name as detail ("unknown alias" has detail
 * "alias"); values never appear in messages. Thread-safety: reentrant. */
#ifndef KL_Q1_PLAN_H
#define KL_Q1_PLAN_H

#include "common/names.h"
#include "common/q1.h"

/* Values equal keyload.v1.QueryResultKind (query.proto). */
typedef enum kl_q1_op {
    KL_Q1_OP_BATCH = 1,             /* keyload.v1.Batch; answer: BatchReceipt */
    KL_Q1_OP_INSPECT_TRANSFER = 2,  /* keyload.v1.InspectQueueTransfer */
    KL_Q1_OP_TRANSFER_RECEIPT = 3,  /* keyload.v1.InspectQueueTransferReceipt */
} kl_q1_op;

typedef struct kl_q1_plan {
    const char *alias;              /* canonical alias name (static) */
    kl_q1_op op;
    bool transfer;                  /* a transfer alias: Query is checked with admin flags off */
    char queue[KL_NAME_LEN_MAX + 1]; /* routes the call; Query is checked on it */
    uint8_t *request;               /* the packed native request, malloc'd */
    size_t request_len;
    uint8_t command_id[16];         /* KL_Q1_OP_BATCH: the batch's command id */
} kl_q1_plan;

/* Maps call to its native request in tenant/database. A mutating alias becomes a
 * BatchRequest with the call's COMMAND_ID, else default_command_id (16 bytes; NULL: a fresh
 * random GUID). On KL_OK *out is filled (kl_q1_plan_free); on error it is empty. */
kl_code kl_q1_plan_build(const kl_q1_call *call, const char *tenant, const char *database,
                         const uint8_t *default_command_id, kl_q1_plan *out, kl_err *err);
/* Wipes (the request may hold tokens and bodies) and frees; accepts an empty plan. */
void kl_q1_plan_free(kl_q1_plan *p);

/* The i-th alias of the table (canonical name), NULL past the end: for tests and help. */
const char *kl_q1_alias_name(size_t i);

#endif
