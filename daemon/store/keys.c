#include "daemon/store/keys.h"

#include <assert.h>
#include <string.h>

void kl_be64_put(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

uint64_t kl_be64_get(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static void k_tag(kl_key *k, char tag)
{
    k->b[0] = (uint8_t)tag;
    k->len = 1;
}

static void k_u64(kl_key *k, uint64_t v)
{
    assert(k->len + 8 <= KL_KEY_MAX);
    kl_be64_put(k->b + k->len, v);
    k->len += 8;
}

/* Names are validated to at most 128 bytes before any key is built, so a key never
 * overflows; the assert guards that invariant. */
static void k_str0(kl_key *k, const char *s)
{
    size_t n = strlen(s);
    assert(k->len + n + 1 <= KL_KEY_MAX);
    memcpy(k->b + k->len, s, n);
    k->len += n;
    k->b[k->len++] = 0;
}

static void k_raw(kl_key *k, const uint8_t *p, size_t n)
{
    assert(k->len + n <= KL_KEY_MAX);
    memcpy(k->b + k->len, p, n);
    k->len += n;
}

void kl_key_meta(kl_key *k, const char *name)
{
    k_tag(k, 'M');
    k_raw(k, (const uint8_t *)name, strlen(name));
}

void kl_key_log(kl_key *k, uint64_t index) { k_tag(k, 'L'); k_u64(k, index); }

void kl_key_queue_name(kl_key *k, const char *tenant, const char *database, const char *queue)
{
    k_tag(k, 'N');
    k_str0(k, tenant);
    k_str0(k, database);
    k_raw(k, (const uint8_t *)queue, strlen(queue));
}

void kl_key_catalog_tenant(kl_key *k, const char *tenant)
{
    k_tag(k, 'C');
    k_raw(k, (const uint8_t *)"T", 1);
    k_raw(k, (const uint8_t *)tenant, strlen(tenant));
}

void kl_key_catalog_database(kl_key *k, const char *tenant, const char *database)
{
    k_tag(k, 'C');
    k_raw(k, (const uint8_t *)"D", 1);
    k_str0(k, tenant);
    k_raw(k, (const uint8_t *)database, strlen(database));
}

void kl_key_catalog_queue(kl_key *k, const char *tenant, const char *database, const char *queue)
{
    k_tag(k, 'C');
    k_raw(k, (const uint8_t *)"Q", 1);
    k_str0(k, tenant);
    k_str0(k, database);
    k_raw(k, (const uint8_t *)queue, strlen(queue));
}

void kl_key_catalog_principal(kl_key *k, const char *tenant, const char *principal_id)
{
    k_tag(k, 'C');
    k_raw(k, (const uint8_t *)"P", 1);
    k_str0(k, tenant);
    k_raw(k, (const uint8_t *)principal_id, strlen(principal_id));
}

void kl_key_catalog_principal_index(kl_key *k, const char *principal_id)
{
    k_tag(k, 'C');
    k_raw(k, (const uint8_t *)"I", 1);
    k_raw(k, (const uint8_t *)principal_id, strlen(principal_id));
}

void kl_key_catalog_change(kl_key *k, uint64_t version)
{
    k_tag(k, 'C');
    k_raw(k, (const uint8_t *)"V", 1);
    k_u64(k, version);
}

void kl_key_catalog_member_key(kl_key *k, int partition, uint64_t member)
{
    k_tag(k, 'C');
    k_raw(k, (const uint8_t *)"M", 1);
    k_u64(k, (uint64_t)(uint32_t)partition);
    k_u64(k, member);
}

void kl_key_queue(kl_key *k, uint64_t qid) { k_tag(k, 'Q'); k_u64(k, qid); }

void kl_key_message(kl_key *k, uint64_t qid, const char *lane, uint64_t seq)
{
    k_tag(k, 'G');
    k_u64(k, qid);
    k_str0(k, lane);
    k_u64(k, seq);
}

void kl_key_available_lane(kl_key *k, uint64_t qid, const char *lane)
{
    k_tag(k, 'A');
    k_u64(k, qid);
    k_str0(k, lane);
}

void kl_key_available(kl_key *k, uint64_t qid, const char *lane, uint64_t seq)
{
    kl_key_available_lane(k, qid, lane);
    k_u64(k, seq);
}

void kl_key_timed_queue(kl_key *k, uint64_t qid) { k_tag(k, 'T'); k_u64(k, qid); }

void kl_key_timed(kl_key *k, uint64_t qid, int64_t time_ms, uint64_t seq)
{
    kl_key_timed_queue(k, qid);
    /* Times before 1970 never occur (entry times are clamped >= 0), so the unsigned
     * big-endian order is the time order. */
    k_u64(k, (uint64_t)(time_ms < 0 ? 0 : time_ms));
    k_u64(k, seq);
}

void kl_key_lease(kl_key *k, const uint8_t token[16]) { k_tag(k, 'K'); k_raw(k, token, 16); }

void kl_key_outcome(kl_key *k, const char *principal, const uint8_t command_id[16])
{
    k_tag(k, 'O');
    k_str0(k, principal);
    k_raw(k, command_id, 16);
}

void kl_key_outcome_expiry(kl_key *k, int64_t time_ms, const char *principal, const uint8_t command_id[16])
{
    k_tag(k, 'E');
    k_u64(k, (uint64_t)time_ms);
    k_str0(k, principal);
    k_raw(k, command_id, 16);
}

int kl_key_parse_outcome_expiry(const uint8_t *key, size_t len, int64_t *time_ms, kl_key *outcome)
{
    /* tag, time, at least the NUL after the principal, the command id */
    if (len < 1 + 8 + 1 + 16 || key[0] != 'E' || key[len - 17] != 0 || len - 8 > sizeof outcome->b)
        return -1;
    *time_ms = (int64_t)kl_be64_get(key + 1);
    outcome->b[0] = 'O';
    memcpy(outcome->b + 1, key + 9, len - 9);
    outcome->len = len - 8;
    return 0;
}

int kl_key_parse_timed(const uint8_t *key, size_t len, uint64_t *qid, int64_t *time_ms, uint64_t *seq)
{
    if (len != 25 || key[0] != 'T')
        return -1;
    *qid = kl_be64_get(key + 1);
    *time_ms = (int64_t)kl_be64_get(key + 9);
    *seq = kl_be64_get(key + 17);
    return 0;
}

int kl_key_parse_available(const uint8_t *key, size_t len, uint64_t *qid, uint64_t *seq)
{
    if (len < 18 || key[0] != 'A' || key[len - 9] != 0)
        return -1;
    *qid = kl_be64_get(key + 1);
    *seq = kl_be64_get(key + len - 8);
    return 0;
}

void kl_key_transfer(kl_key *k, uint64_t qid, const char *lane, const uint8_t transfer_id[16])
{
    k_tag(k, 'X');
    k_u64(k, qid);
    k_str0(k, lane);
    k_raw(k, transfer_id, 16);
}

void kl_key_transfer_pending_prefix(kl_key *k, uint64_t db, uint64_t qid, const char *lane)
{
    k_tag(k, 'Y');
    k_u64(k, db);
    if (qid == 0)
        return;
    k_u64(k, qid);
    if (lane != NULL)
        k_str0(k, lane);
}

void kl_key_transfer_pending(kl_key *k, uint64_t db, uint64_t qid, const char *lane,
                             const uint8_t transfer_id[16])
{
    kl_key_transfer_pending_prefix(k, db, qid, lane);
    k_raw(k, transfer_id, 16);
}

int kl_key_parse_transfer_pending(const uint8_t *key, size_t len, uint64_t *qid, const uint8_t **lane,
                                  size_t *lane_len, const uint8_t **transfer_id)
{
    /* 'Y' db(8) qid(8) lane 0 id(16): the lane is what lies between. */
    if (len < 1 + 8 + 8 + 1 + 16 || key[0] != 'Y' || key[len - 17] != 0)
        return -1;
    *qid = kl_be64_get(key + 9);
    *lane = key + 17;
    *lane_len = len - 17 - 17;
    if (memchr(*lane, 0, *lane_len) != NULL)
        return -1;
    *transfer_id = key + len - 16;
    return 0;
}

void kl_key_transfer_dedup(kl_key *k, uint64_t dest_qid, const char *src_queue, const char *src_lane,
                           const uint8_t transfer_id[16])
{
    k_tag(k, 'R');
    k_u64(k, dest_qid);
    k_str0(k, src_queue);
    k_str0(k, src_lane);
    k_raw(k, transfer_id, 16);
}

void kl_key_lane_transfers(kl_key *k, uint64_t qid, const char *lane)
{
    k_tag(k, 'W');
    k_u64(k, qid);
    k_raw(k, (const uint8_t *)lane, strlen(lane));
}

void kl_key_lane_transfers_queue(kl_key *k, uint64_t qid)
{
    k_tag(k, 'W');
    k_u64(k, qid);
}
