/* q1_args: argument access for the alias mapping functions of common/q1_plan.c (internal to
 * the Q1 code; callers outside use q1_plan.h). Each accessor marks the argument as read (an
 * argument no mapping function read is refused as unknown by kl_q1_plan_build), treats NULL
 * as absent, and refuses a missing required or wrongly typed argument INVALID_ARGUMENT with
 * the argument's name as detail, never quoting a value. Everything an accessor builds
 * (protobuf pieces, decoded bytes) lives in the args' arena until kl_q1_arena_free, which
 * wipes it: values may be tokens or bodies. Reentrant. */
#ifndef KL_Q1_ARGS_H
#define KL_Q1_ARGS_H

#include "common/q1.h"
#include "keyload/v1/queue.pb-c.h"

typedef struct kl_q1_arena_item {
    struct kl_q1_arena_item *next;
    size_t size;
} kl_q1_arena_item;

typedef struct kl_q1_arena {
    kl_q1_arena_item *head;
} kl_q1_arena;

typedef struct kl_q1_args {
    const kl_q1_call *call;
    const char *alias;       /* canonical alias name, for messages */
    const char *params;      /* the alias's argument names, for messages */
    uint64_t used;           /* bit i: call->args[i] was read (KL_Q1_ARGS_MAX <= 64) */
    const char *tenant, *database;  /* filled into every lane ref */
    kl_q1_arena ar;
} kl_q1_args;

/* size zeroed bytes plus one spare zero byte (room for a NUL); NULL when out of memory. */
void *kl_q1_arena_alloc(kl_q1_arena *ar, size_t size);
void kl_q1_arena_free(kl_q1_arena *ar);

/* A string argument (borrowed from the call); *out NULL when absent and not required. */
kl_code kl_q1_arg_str(kl_q1_args *a, const char *name, bool required, const char **out, kl_err *err);
/* An integer argument within [min, max]; 0 when absent. */
kl_code kl_q1_arg_int(kl_q1_args *a, const char *name, int64_t min, int64_t max, int64_t *out,
                      kl_err *err);
/* A base64 string argument decoded into the arena (required: present and not empty). */
kl_code kl_q1_arg_base64(kl_q1_args *a, const char *name, bool required, ProtobufCBinaryData *out,
                         kl_err *err);
/* Decodes canonical standard base64 text into the arena; `name` for the error. */
kl_code kl_q1_base64_bytes(kl_q1_args *a, const char *name, const char *text,
                           ProtobufCBinaryData *out, kl_err *err);
/* A complete lane ref in the args' tenant/database from the queue argument (required,
 * identifier rule) and the lane argument (lane_arg NULL: none; absent, NULL or '': default). */
kl_code kl_q1_lane_ref(kl_q1_args *a, const char *queue_arg, const char *lane_arg,
                       Keyload__V1__QueueLaneRef **out, kl_err *err);
/* A GUID argument (required, not all zero) as 16 bytes in the arena. */
kl_code kl_q1_arg_guid(kl_q1_args *a, const char *name, ProtobufCBinaryData *out, kl_err *err);
/* The message arguments: body (text) or body_base64, headers ({"k": "v"}), fields (JSON
 * scalars or {"type": string|int|double|bool|bytes, "value": ...}), expires_at_unix_ms,
 * delay_ms. */
kl_code kl_q1_arg_message(kl_q1_args *a, Keyload__V1__EnqueueMessage **out, kl_err *err);

#endif
