/* park: Receives waiting for messages (long poll), on the leader.
 *
 * A batch holding only Receives that would lease nothing commits nothing (kl_park_idle). When
 * one of its Receives asks to wait (Receive.wait_ms), the node parks it here instead of
 * answering: it sits among the pending outcomes under its (principal, command id), so a
 * retry of the same request joins it and another request under that id is refused. A parked
 * request is evaluated again, from the start (grants and catalog included), when
 *  - an applied entry writes the available or timed range of a queue it reads (an enqueue,
 *    a release, a lease or delay taken or ended: kl_park_note_key),
 *  - the earliest lease or delay of such a queue ends (due_ms: lease expiry is evaluated
 *    lazily by the next Receive, so no entry announces it),
 *  - or its wait ends (until_ms), when an idle answer is final.
 * Nothing here proposes or answers on its own: the node drives it (kl_node_park_tick).
 * Pure apart from kl_park_watch's reads. Threading: the executor only. */
#ifndef KL_PARK_H
#define KL_PARK_H

#include "common/canon.h"
#include "common/limits.h"
#include "daemon/engine/view.h"
#include "daemon/reply.h"
#include "keyload/v1/queue.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kl_park_waiter {
    kl_node_reply_fn fn;
    void *cookie;
} kl_park_waiter;

typedef struct kl_parked {
    char *principal;
    uint8_t command_id[16];
    uint8_t digest[KL_DIGEST_LEN];
    uint8_t *req;                 /* the encoded BatchRequest, evaluated again on waking */
    size_t len;
    int64_t until_ms;             /* clock_ms: the wait ends, an idle answer is final */
    int64_t due_ms;               /* clock_ms: a lease or delay of a watched queue ends */
    uint64_t qids[KL_PARK_WATCH_MAX];
    size_t n_qids;
    bool any_queue;               /* more queues than qids holds: any queue's change wakes */
    bool woken;                   /* a watched queue changed since it parked */
    kl_park_waiter *waiters;
    size_t n_waiters, cap_waiters;
} kl_parked;

typedef struct kl_park {
    kl_parked *v[KL_PARK_MAX];
    size_t n;
} kl_park;

/* A request to park, with no waiter yet; NULL when out of memory. */
kl_parked *kl_parked_new(const char *principal, const uint8_t command_id[16],
                         const uint8_t digest[KL_DIGEST_LEN], const uint8_t *req, size_t len);
int kl_parked_add_waiter(kl_parked *p, kl_node_reply_fn fn, void *cookie);
/* Answers every waiter (a kl_node_reply_fn: cookie is the kl_parked) and frees p. */
void kl_parked_answer(void *cookie, kl_code code, const kl_err *err, const uint8_t *receipt, size_t len);
void kl_parked_free(kl_parked *p);

/* Adds p (not in the table). RESOURCE_EXHAUSTED "parked_receives" when KL_PARK_MAX
 * requests wait already; p is left to the caller. */
kl_code kl_park_insert(kl_park *k, kl_parked *p, kl_err *err);
kl_parked *kl_park_find(const kl_park *k, const char *principal, const uint8_t command_id[16]);
/* An applied write to key: wakes every request watching the queue whose available ('A') or
 * timed ('T') range it is in. */
void kl_park_note_key(kl_park *k, const uint8_t *key, size_t klen);
/* Whether a request is due at now (woken, due_ms or until_ms reached). */
bool kl_park_any_due(const kl_park *k, int64_t now);
/* Removes and returns one request due at now (oldest first), or NULL. */
kl_parked *kl_park_take_due(kl_park *k, int64_t now);
/* Removes and returns any request, or NULL when none is left. */
kl_parked *kl_park_take_any(kl_park *k);

/* The largest wait_ms of a batch holding only Receives (*receive_only false otherwise). */
void kl_park_receive_only(const Keyload__V1__BatchRequest *b, bool *receive_only, uint32_t *wait_ms);
/* Whether every write in scratch leaves `base` (applied plus pending state, no scratch) as it
 * is: a Receive that leased nothing and found no housekeeping to do. */
kl_code kl_park_idle(kl_view *base, const kl_overlay *scratch, bool *idle, kl_err *err);
/* Fills p's watch (queue ids, due_ms) from the queues b's Receives read, over base. */
kl_code kl_park_watch(kl_view *base, const Keyload__V1__BatchRequest *b, kl_parked *p, kl_err *err);

#endif
