/* Builders of the golden samples: one function per mutation kind. Everything they allocate
 * lives in one arena, freed at once by golden_arena_free. */
#ifndef KL_GOLDEN_BUILD_H
#define KL_GOLDEN_BUILD_H

#include "keyload/v1/queue.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

void *golden_alloc(size_t n);
void golden_arena_free(void);
ProtobufCBinaryData golden_bin(const uint8_t *p, size_t n);

Keyload__V1__QueueLaneRef *gb_lane(const char *tenant, const char *db, const char *queue, const char *lane);
/* Body only. */
Keyload__V1__EnqueueMessage *gb_msg(const char *body);
/* Every part of a message: headers and fields out of key order, each field value kind,
 * expiry and delay. */
Keyload__V1__EnqueueMessage *gb_msg_rich(void);
/* A message carrying one field and one header key (an authorization sample). */
Keyload__V1__EnqueueMessage *gb_msg_keys(const char *body, const char *field, const char *header);
Keyload__V1__DatabaseLimits *gb_db_limits(uint64_t scan, uint64_t batch_bytes, uint64_t read_bytes,
                                          bool attempts_set, uint64_t attempts);

Keyload__V1__Mutation *gb_create_queue(Keyload__V1__QueueLaneRef *q, uint64_t max_messages, uint64_t max_bytes,
                                       uint32_t max_deliveries, const char *dlq, int32_t partition);
Keyload__V1__Mutation *gb_delete_queue(Keyload__V1__QueueLaneRef *q);
Keyload__V1__Mutation *gb_enqueue(Keyload__V1__QueueLaneRef *lane, Keyload__V1__EnqueueMessage *m);
Keyload__V1__Mutation *gb_receive(Keyload__V1__QueueLaneRef *lane, uint32_t max, uint32_t lease_ms,
                                  uint32_t wait_ms);
Keyload__V1__Mutation *gb_ack(Keyload__V1__QueueLaneRef *q, const ProtobufCBinaryData *tokens, size_t n);
Keyload__V1__Mutation *gb_release(Keyload__V1__QueueLaneRef *q, const ProtobufCBinaryData *tokens, size_t n);
Keyload__V1__Mutation *gb_create_database(const char *tenant, const char *db, Keyload__V1__DatabaseLimits *l);
Keyload__V1__Mutation *gb_bootstrap(const char *tenant, const char *db, const char *admin,
                                    const uint8_t pk[32], const uint8_t proof[32]);
Keyload__V1__Mutation *gb_create_principal(const char *tenant, const char *id, const uint8_t pk[32],
                                           bool cluster_admin, bool db_admin, const char *db);
Keyload__V1__Mutation *gb_grant(const char *id, const char *db, Keyload__V1__Permission perm,
                                const char *pattern, const char *field, const char *header);
Keyload__V1__Mutation *gb_revoke(const char *id, const char *db, Keyload__V1__Permission perm,
                                 const char *pattern);
Keyload__V1__Mutation *gb_set_key(const char *id, const uint8_t pk[32]);
Keyload__V1__Mutation *gb_set_db_limits(const char *tenant, const char *db, Keyload__V1__DatabaseLimits *l);
Keyload__V1__Mutation *gb_create_transfer(Keyload__V1__QueueLaneRef *src, const uint8_t tid[16],
                                          Keyload__V1__QueueLaneRef *dst, Keyload__V1__EnqueueMessage *m);
Keyload__V1__Mutation *gb_accept(Keyload__V1__QueueLaneRef *dst, ProtobufCBinaryData intent);
Keyload__V1__Mutation *gb_complete(Keyload__V1__QueueLaneRef *src, const uint8_t tid[16],
                                   ProtobufCBinaryData receipt);
Keyload__V1__Mutation *gb_pause(const char *tenant, const char *db, Keyload__V1__QueueLaneRef *src, bool paused);
Keyload__V1__Mutation *gb_advance(Keyload__V1__QueueLaneRef *src, const uint8_t tid[16],
                                  ProtobufCBinaryData witness, bool repair);

/* A packed BatchRequest (malloc'd) of the mutations under command id cmd. */
uint8_t *gb_pack(const uint8_t cmd[16], Keyload__V1__Mutation **m, size_t n, size_t *len);

#endif
