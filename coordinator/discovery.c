#include "coordinator/discovery.h"

#include "common/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Counts of one round, for its log line (no padding-sensitive compare: fields compared one
 * by one). */
typedef struct round_counts {
    uint64_t pages, listed, dispatched, duplicates, foreign, failed, malformed, errors;
    bool full;
} round_counts;

typedef struct part_state {
    int32_t id;
    uint8_t *cursor; /* NULL: from the start */
    size_t cursor_len;
    uint32_t page_size;
} part_state;

struct kl_coord_discovery {
    kl_coord *co;
    part_state *parts;
    int n_parts;
    uint64_t round;
    /* This round's per-lane counts (published at its end). */
    kl_coord_lane_count lanes[KL_COORD_LANES_MAX];
    size_t n_lanes;
    uint64_t other;
    /* The last round logged, so that a steady state (e.g. the same foreign intents listed
     * every round) logs once, then every KL_COORD_ROUND_LOG_MS. */
    struct round_counts *last_logged;
    int64_t last_log_ms;
};

#define KL_COORD_ROUND_LOG_MS 30000


kl_code kl_coord_discovery_new(kl_coord *co, kl_coord_discovery **out, kl_err *err)
{
    *out = NULL;
    kl_coord_discovery *d = calloc(1, sizeof *d);
    if (d == NULL)
        goto fail_struct;
    d->n_parts = co->cluster->partition_count;
    d->parts = calloc((size_t)(d->n_parts > 0 ? d->n_parts : 1), sizeof *d->parts);
    if (d->parts == NULL)
        goto fail_parts;
    d->last_logged = calloc(1, sizeof *d->last_logged);
    if (d->last_logged == NULL)
        goto fail_last;
    for (int i = 0; i < d->n_parts; i++) {
        d->parts[i].id = co->cluster->partitions[i].id;
        d->parts[i].page_size = co->cfg.discovery_max_records;
    }
    d->co = co;
    *out = d;
    return KL_OK;

fail_last:
    free(d->parts);
fail_parts:
    free(d);
fail_struct:
    return kl_fail(err, KL_INTERNAL, "memory", "discovery: out of memory");
}

void kl_coord_discovery_free(kl_coord_discovery *d)
{
    if (d == NULL)
        return;
    for (int i = 0; i < d->n_parts; i++)
        free(d->parts[i].cursor);
    free(d->parts);
    free(d->last_logged);
    free(d);
}

static void count_lane(kl_coord_discovery *d, int32_t partition,
                       const Keyload__V1__PendingQueueTransfer *item)
{
    char name[sizeof d->lanes[0].source];
    const Keyload__V1__QueueLaneRef *s = item->source;
    snprintf(name, sizeof name, "%.128s/%.128s", s && s->queue ? s->queue : "",
             s && s->lane && s->lane[0] ? s->lane : "default");
    for (size_t i = 0; i < d->n_lanes; i++)
        if (d->lanes[i].partition == partition && strcmp(d->lanes[i].source, name) == 0) {
            d->lanes[i].pending++;
            return;
        }
    if (d->n_lanes == KL_COORD_LANES_MAX) {
        d->other++; /* bounded: the rest is summed */
        return;
    }
    kl_coord_lane_count *l = &d->lanes[d->n_lanes++];
    memcpy(l->source, name, sizeof name);
    l->partition = partition;
    l->pending = 1;
}

kl_coord_take kl_coord_discovery_take(kl_coord *co, const Keyload__V1__PendingQueueTransfer *item)
{
    const kl_coord_config *cfg = &co->cfg;
    kl_coord_intent in;
    kl_err err;
    if (kl_coord_intent_decode(item->intent_token.data, item->intent_token.len, &in, &err) !=
            KL_OK ||
        item->source == NULL || item->source->queue == NULL) {
        atomic_fetch_add(&co->stats.skipped_malformed, 1);
        return KL_COORD_TAKE_MALFORMED;
    }
    if (!kl_coord_intent_is_ours(&in, cfg->principal_id, cfg->tenant, cfg->db)) {
        atomic_fetch_add(&co->stats.skipped_foreign, 1);
        return KL_COORD_TAKE_FOREIGN;
    }
    uint8_t key[KL_COORD_KEY_LEN];
    kl_coord_identity(cfg->tenant, cfg->db, item->source->queue, item->source->lane,
                      in.transfer_id, key);
    if (kl_coord_failed_contains(co->failed, key, in.generation)) {
        atomic_fetch_add(&co->stats.skipped_failed, 1);
        return KL_COORD_TAKE_FAILED;
    }
    kl_coord_buffer *buf = co->buffers[kl_coord_worker_of(co, key)];
    if (kl_coord_buffer_contains(buf, key)) { /* spares the copy of the token */
        atomic_fetch_add(&co->stats.duplicates, 1);
        return KL_COORD_TAKE_DUPLICATE;
    }
    kl_coord_event *ev;
    if (kl_coord_event_new(item, &in, cfg->tenant, cfg->db, &ev, &err) != KL_OK) {
        atomic_fetch_add(&co->stats.skipped_malformed, 1);
        return KL_COORD_TAKE_MALFORMED;
    }
    switch (kl_coord_buffer_push(buf, ev, kl_coord_now_ms())) {
    case KL_COORD_PUSH_ADDED:
        atomic_fetch_add(&co->stats.dispatched, 1);
        KL_DEBUG("dispatched", "id=%s source=%s/%s dest=%s/%s gen=%" PRIu64 " worker=%u",
                ev->transfer_id_text, ev->source_queue, ev->source_lane, ev->dest_queue,
                ev->dest_lane, ev->generation, kl_coord_worker_of(co, key));
        return KL_COORD_TAKE_DISPATCHED;
    case KL_COORD_PUSH_DUPLICATE:
        kl_coord_event_free(ev);
        atomic_fetch_add(&co->stats.duplicates, 1);
        return KL_COORD_TAKE_DUPLICATE;
    default:
        kl_coord_event_free(ev);
        atomic_fetch_add(&co->stats.buffer_full, 1);
        return KL_COORD_TAKE_FULL;
    }
}

static void set_cursor(part_state *p, const ProtobufCBinaryData *next)
{
    free(p->cursor);
    p->cursor = NULL;
    p->cursor_len = 0;
    if (next == NULL || next->len == 0)
        return;
    p->cursor = malloc(next->len);
    if (p->cursor == NULL)
        return; /* out of memory: restart from the beginning, which only re-lists */
    memcpy(p->cursor, next->data, next->len);
    p->cursor_len = next->len;
}

/* Pages one partition (at most max_work pages). True when it stopped at that ceiling with
 * more pages behind the cursor and dispatched something new: a sweep that only met intents
 * the buffers already hold waits for the interval, as before. */
static bool page_partition(kl_coord_discovery *d, part_state *p, round_counts *rc)
{
    kl_coord *co = d->co;
    const kl_coord_config *cfg = &co->cfg;
    uint64_t dispatched_before = rc->dispatched;
    for (uint32_t page = 0; page < cfg->discovery_max_work; page++) {
        if (atomic_load(&co->stopping))
            return false;
        Keyload__V1__ListPendingQueueTransfersAnswer *a = NULL;
        kl_err err;
        kl_code code = kl_client_pending_transfers(co->client, NULL, NULL, p->id, p->cursor,
                                                   p->cursor_len, p->page_size, &a, &err);
        if (code != KL_OK) {
            rc->errors++;
            atomic_fetch_add(&co->stats.list_errors, 1);
            if (code == KL_RESOURCE_EXHAUSTED && p->page_size > 1)
                p->page_size /= 2; /* the daemon's read limits: ask for less */
            KL_WARN("list_failed", "partition=%d code=%s detail=%s page_size=%" PRIu32
                    " action=keep_cursor", p->id, kl_code_name(code), err.detail, p->page_size);
            return false;
        }
        rc->pages++;
        if (a->cursor_reset)
            KL_INFO("cursor_reset", "partition=%d note=partition_incarnation_changed", p->id);
        size_t j = 0;
        uint64_t bytes = 0;
        bool over = false, full = false;
        uint64_t page_dispatched = 0;
        for (; j < a->n_items; j++) {
            const Keyload__V1__PendingQueueTransfer *item = a->items[j];
            bytes += item->intent_token.len;
            if (bytes > cfg->discovery_max_bytes && j > 0) {
                over = true; /* one item always passes, so a huge token cannot block */
                break;
            }
            rc->listed++;
            atomic_fetch_add(&co->stats.listed, 1);
            count_lane(d, p->id, item);
            kl_coord_take t = kl_coord_discovery_take(co, item);
            /* A full buffer refuses only its own worker's items: the others' still go, and
             * the cursor moves on (below), so one stuck worker cannot hold the whole
             * partition's later intents back. The refused one comes again next sweep. */
            full |= t == KL_COORD_TAKE_FULL;
            page_dispatched += t == KL_COORD_TAKE_DISPATCHED;
            rc->dispatched += t == KL_COORD_TAKE_DISPATCHED;
            rc->duplicates += t == KL_COORD_TAKE_DUPLICATE;
            rc->foreign += t == KL_COORD_TAKE_FOREIGN;
            rc->failed += t == KL_COORD_TAKE_FAILED;
            rc->malformed += t == KL_COORD_TAKE_MALFORMED;
        }
        rc->full |= full;
        if (page_dispatched > 0 && co->wake != NULL)
            co->wake(co->wake_arg); /* idle workers start now, not at a poll */
        if (over) {
            /* The page held more token bytes than a page may: the items after j were not
             * looked at, so the cursor stays at this page's start and the page shrinks. */
            p->page_size = j > 0 ? (uint32_t)j : 1;
            KL_INFO("page_over_bytes", "partition=%d items=%zu max_bytes=%" PRIu64
                    " page_size=%" PRIu32 " action=keep_cursor", p->id, j,
                    cfg->discovery_max_bytes, p->page_size);
            keyload__v1__list_pending_queue_transfers_answer__free_unpacked(a, NULL);
            return false;
        }
        if (p->page_size < cfg->discovery_max_records) {
            uint64_t grown = (uint64_t)p->page_size * 2;
            p->page_size = grown < cfg->discovery_max_records ? (uint32_t)grown
                                                               : cfg->discovery_max_records;
        }
        bool done = a->done || a->next_cursor.len == 0;
        set_cursor(p, done ? NULL : &a->next_cursor);
        kl_pending_transfers_free(a);
        if (done)
            return false; /* the next round starts from the beginning */
        if (full && page_dispatched == 0)
            return false; /* the buffers are saturated: more pages now would only be refused */
    }
    return rc->dispatched > dispatched_before;
}

bool kl_coord_discovery_round(kl_coord_discovery *d)
{
    kl_coord *co = d->co;
    round_counts rc;
    memset(&rc, 0, sizeof rc);
    d->n_lanes = 0;
    d->other = 0;
    d->round++;
    bool more = false;
    for (int i = 0; i < d->n_parts && !atomic_load(&co->stopping); i++)
        more |= page_partition(d, &d->parts[i], &rc);
    kl_coord_publish_lanes(co, d->lanes, d->n_lanes, d->other);
    atomic_fetch_add(&co->stats.rounds, 1);
    /* A round that dispatched or failed something, or whose counts differ from the last
     * logged one, is logged; a steady or idle state every KL_COORD_ROUND_LOG_MS. */
    const round_counts *l = d->last_logged;
    bool changed = rc.listed != l->listed || rc.duplicates != l->duplicates ||
                   rc.foreign != l->foreign || rc.failed != l->failed ||
                   rc.malformed != l->malformed || rc.full != l->full;
    int64_t now = kl_coord_now_ms();
    if (d->round == 1 || rc.dispatched > 0 || rc.errors > 0 || changed ||
        now - d->last_log_ms >= KL_COORD_ROUND_LOG_MS) {
        *d->last_logged = rc;
        d->last_log_ms = now;
        KL_INFO("discovery_round",
                "round=%" PRIu64 " pages=%" PRIu64 " listed=%" PRIu64 " dispatched=%" PRIu64
                " duplicates=%" PRIu64 " skipped_foreign=%" PRIu64 " skipped_failed=%" PRIu64
                " skipped_malformed=%" PRIu64 " buffer_full=%s errors=%" PRIu64,
                d->round, rc.pages, rc.listed, rc.dispatched, rc.duplicates, rc.foreign,
                rc.failed, rc.malformed, rc.full ? "true" : "false", rc.errors);
    }
    return more && !atomic_load(&co->stopping);
}
