#include "coordinator/event.h"

#include "common/canon.h"
#include "common/guid.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

static const char *lane_or_default(const char *lane)
{
    return (lane != NULL && lane[0] != '\0') ? lane : "default";
}

void kl_coord_identity(const char *tenant, const char *database, const char *queue,
                       const char *lane, const uint8_t transfer_id[16],
                       uint8_t out[KL_COORD_KEY_LEN])
{
    /* A fixed buffer: the encoding of four names of at most 128 bytes and an id always
     * fits, so hashing never needs an allocation. */
    uint8_t buf[1024];
    kl_canon c;
    kl_canon_init_fixed(&c, buf, sizeof buf);
    Keyload__V1__QueueLaneRef ref = KEYLOAD__V1__QUEUE_LANE_REF__INIT;
    ref.tenant = (char *)tenant;
    ref.database = (char *)database;
    ref.queue = (char *)queue;
    ref.lane = (char *)lane_or_default(lane);
    kl_canon_str(&c, 1, "keyload.coordinator.identity.v1");
    kl_canon_lane(&c, 2, &ref);
    kl_canon_bytes(&c, 3, transfer_id, 16);
    /* Names longer than the limit are refused earlier; hash what fits regardless. */
    crypto_generichash(out, KL_COORD_KEY_LEN, buf, c.len, NULL, 0);
}

kl_code kl_coord_event_new(const Keyload__V1__PendingQueueTransfer *item,
                           const kl_coord_intent *in, const char *tenant, const char *database,
                           kl_coord_event **out, kl_err *err)
{
    *out = NULL;
    const Keyload__V1__QueueLaneRef *s = item->source, *d = item->destination;
    if (s == NULL || d == NULL || s->queue == NULL || s->queue[0] == '\0' || d->queue == NULL ||
        d->queue[0] == '\0')
        return kl_fail(err, KL_INVALID_ARGUMENT, "item", "pending item without complete lanes");
    if (item->transfer_id.len != 16 || memcmp(item->transfer_id.data, in->transfer_id, 16) != 0 ||
        item->generation != in->generation)
        return kl_fail(err, KL_INVALID_ARGUMENT, "item",
                       "pending item disagrees with its intent token (transfer id, generation)");
    if (item->intent_token.len == 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "item", "pending item without intent token");
    const char *names[4] = {s->queue, lane_or_default(s->lane), d->queue,
                            lane_or_default(d->lane)};
    size_t lens[4], total = sizeof(kl_coord_event) + item->intent_token.len;
    for (int i = 0; i < 4; i++) {
        lens[i] = strlen(names[i]);
        total += lens[i] + 1;
    }
    kl_coord_event *ev = calloc(1, total);
    if (ev == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "event: out of memory");
    char *p = (char *)(ev + 1);
    char **dst[4] = {&ev->source_queue, &ev->source_lane, &ev->dest_queue, &ev->dest_lane};
    for (int i = 0; i < 4; i++) {
        memcpy(p, names[i], lens[i] + 1);
        *dst[i] = p;
        p += lens[i] + 1;
    }
    ev->token = (uint8_t *)p;
    ev->token_len = item->intent_token.len;
    memcpy(ev->token, item->intent_token.data, ev->token_len);
    memcpy(ev->transfer_id, in->transfer_id, 16);
    kl_guid_format(ev->transfer_id, ev->transfer_id_text);
    ev->generation = in->generation;
    memcpy(ev->fingerprint, in->fingerprint, in->fingerprint_len);
    ev->fingerprint_len = in->fingerprint_len;
    ev->slot = -1;
    ev->heap_pos = -1;
    kl_coord_identity(tenant, database, ev->source_queue, ev->source_lane, ev->transfer_id,
                      ev->key);
    *out = ev;
    return KL_OK;
}

void kl_coord_event_free(kl_coord_event *ev) { free(ev); }

size_t kl_coord_event_bytes(const kl_coord_event *ev)
{
    return sizeof *ev + strlen(ev->source_queue) + strlen(ev->source_lane) +
           strlen(ev->dest_queue) + strlen(ev->dest_lane) + 4 + ev->token_len;
}

uint32_t kl_coord_backoff_ms(uint32_t attempt)
{
    uint32_t ms = KL_COORD_BACKOFF_FIRST_MS;
    for (uint32_t i = 1; i < attempt && ms < KL_COORD_BACKOFF_MAX_MS; i++)
        ms *= 2;
    return ms < KL_COORD_BACKOFF_MAX_MS ? ms : KL_COORD_BACKOFF_MAX_MS;
}
