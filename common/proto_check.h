/* proto_check: refuses decoded protobuf messages that carry unknown fields.
 *
 * protobuf-c keeps unknown fields and writes them back when a message is re-encoded, and
 * it accepts some encodings on input (e.g. field number 0 in a long tag form) that it
 * then refuses to decode after re-encoding. The daemon stores parts of client requests
 * (messages, queue limits) as records, so an unknown field could make a stored record
 * undecodable. Requests are therefore checked, whole tree, before anything is evaluated. */
#ifndef KL_PROTO_CHECK_H
#define KL_PROTO_CHECK_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>

/* True when m or any message inside it holds unknown fields; path (cap bytes) then names
 * where, e.g. "mutations[2].enqueue.message". Cost: one visit per nested message, and a
 * second pass that formats the path only when one is found. */
bool kl_proto_has_unknown(const ProtobufCMessage *m, char *path, size_t cap);

#endif
