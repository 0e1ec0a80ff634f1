#include "common/proto_check.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MAX_DEPTH 32

/* path NULL: only answers. Every frame and request is checked and almost none holds an
 * unknown field, so kl_proto_has_unknown formats the path only for one that does. */
static bool walk(const ProtobufCMessage *m, char *path, size_t cap, size_t used, int depth)
{
    if (m == NULL)
        return false;
    if (m->n_unknown_fields > 0 || depth > MAX_DEPTH)
        return true;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        const char *base = (const char *)m;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            uint32_t which = *(const uint32_t *)(base + f->quantifier_offset);
            if (which != f->id)
                continue;
        }
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            ProtobufCMessage *const *arr = *(ProtobufCMessage *const *const *)(base + f->offset);
            for (size_t j = 0; j < n; j++) {
                size_t next = used;
                if (path != NULL) {
                    int w = snprintf(path + used, cap > used ? cap - used : 0, "%s%s[%zu]",
                                     used ? "." : "", f->name, j);
                    next = w > 0 && used + (size_t)w < cap ? used + (size_t)w : used;
                }
                if (walk(arr[j], path, cap, next, depth + 1))
                    return true;
            }
        } else {
            const ProtobufCMessage *sub = *(ProtobufCMessage *const *)(base + f->offset);
            size_t next = used;
            if (path != NULL) {
                int w = snprintf(path + used, cap > used ? cap - used : 0, "%s%s", used ? "." : "", f->name);
                next = w > 0 && used + (size_t)w < cap ? used + (size_t)w : used;
            }
            if (walk(sub, path, cap, next, depth + 1))
                return true;
        }
        if (path != NULL && used < cap)
            path[used] = '\0';
    }
    return false;
}

bool kl_proto_has_unknown(const ProtobufCMessage *m, char *path, size_t cap)
{
    if (cap > 0)
        path[0] = '\0';
    return walk(m, NULL, 0, 0, 0) && walk(m, path, cap, 0, 0);
}
