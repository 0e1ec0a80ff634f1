/* confstore: the driver's stored and applied configurations (contract in confstore.h). */
#include "daemon/repl/confstore.h"

#include "common/proto_check.h"
#include "keyload/v1/membership.pb-c.h"
#include "keyload/v1/store.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint8_t *kl_confstore_record(uint64_t term, uint64_t index, const uint8_t *blob, size_t len,
                             size_t *out_len)
{
    Keyload__V1__LogEntry e = KEYLOAD__V1__LOG_ENTRY__INIT;
    e.term = term;
    e.index = index;
    e.raft_type = KL_RAFT_ENTRY_CONF;
    e.raft_conf.data = (uint8_t *)blob;
    e.raft_conf.len = len;
    size_t n = keyload__v1__log_entry__get_packed_size(&e);
    uint8_t *b = malloc(n);
    if (b == NULL)
        return NULL;
    *out_len = keyload__v1__log_entry__pack(&e, b);
    return b;
}

bool kl_confstore_blob_ok(const uint8_t *blob, size_t len, kl_raft_conf *conf)
{
    kl_raft_conf c;
    size_t off;
    if (blob == NULL || len > KL_MEMBER_CONF_BLOB_MAX ||
        kl_raft_conf_decode(blob, len, &c, &off, NULL) != KL_OK)
        return false;
    Keyload__V1__MemberDirectory *d =
        keyload__v1__member_directory__unpack(NULL, len - off, blob + off);
    char path[64];
    bool ok = d != NULL && !kl_proto_has_unknown(&d->base, path, sizeof path);
    if (d != NULL)
        keyload__v1__member_directory__free_unpacked(d, NULL);
    if (ok && conf != NULL)
        *conf = c;
    return ok;
}

kl_code kl_confstore_blob_of(const uint8_t *rec, size_t rec_len, uint8_t **blob, size_t *len)
{
    Keyload__V1__LogEntry *e = keyload__v1__log_entry__unpack(NULL, rec_len, rec);
    if (e == NULL)
        return KL_INTERNAL;
    kl_code rc = KL_INTERNAL;
    if (e->raft_type == KL_RAFT_ENTRY_CONF && kl_confstore_blob_ok(e->raft_conf.data, e->raft_conf.len, NULL) &&
        (*blob = malloc(e->raft_conf.len)) != NULL) {
        memcpy(*blob, e->raft_conf.data, e->raft_conf.len);
        *len = e->raft_conf.len;
        rc = KL_OK;
    }
    keyload__v1__log_entry__free_unpacked(e, NULL);
    return rc;
}

static uint8_t *dup_bytes(const uint8_t *b, size_t n)
{
    uint8_t *d = malloc(n ? n : 1);
    if (d != NULL && n > 0)
        memcpy(d, b, n);
    return d;
}

/* One stored record: a CONF entry's blob when it is one (NULL otherwise). */
static kl_code scan_one(kl_store *st, uint64_t i, uint8_t **blob, size_t *blen, kl_err *err)
{
    uint8_t *rec;
    size_t len;
    bool found;
    *blob = NULL;
    kl_code rc = kl_store_read_log(st, i, &rec, &len, &found, err);
    if (rc != KL_OK)
        return rc;
    if (!found)
        return kl_fail(err, KL_INTERNAL, "log", "log entry %llu missing", (unsigned long long)i);
    Keyload__V1__LogEntry *e = keyload__v1__log_entry__unpack(NULL, len, rec);
    bool conf = e != NULL && e->raft_type == KL_RAFT_ENTRY_CONF;
    if (e != NULL)
        keyload__v1__log_entry__free_unpacked(e, NULL);
    if (conf && kl_confstore_blob_of(rec, len, blob, blen) != KL_OK)
        rc = kl_fail(err, KL_INTERNAL, "log", "configuration entry %llu does not decode",
                     (unsigned long long)i);
    free(rec);
    return rc;
}

static kl_code load_base(kl_confstore *cs, kl_store *st, kl_raft_conf *base_conf, kl_err *err)
{
    uint64_t first, prev_term;
    uint8_t *b = NULL;
    size_t n = 0;
    kl_code rc = kl_store_log_start(st, &first, &prev_term, &b, &n, err);
    if (rc != KL_OK)
        return rc;
    memset(base_conf, 0, sizeof *base_conf);
    if (b != NULL && n > 0 && !kl_confstore_blob_ok(b, n, base_conf)) {
        free(b);
        return kl_fail(err, KL_INTERNAL, "log_start", "the stored configuration does not decode");
    }
    cs->base = (kl_confstore_item){.index = first - 1, .blob = n > 0 ? b : NULL, .len = n};
    if (n > 0)
        kl_confstore_learn(cs, b, n);
    if (n == 0)
        free(b);
    return KL_OK;
}

kl_code kl_confstore_load(kl_confstore *cs, kl_store *st, uint64_t applied, kl_raft_conf *base_conf,
                          kl_err *err)
{
    memset(cs, 0, sizeof *cs);
    kl_code rc = load_base(cs, st, base_conf, err);
    uint64_t last = kl_store_last_index(st);
    for (uint64_t i = kl_store_first_index(st); rc == KL_OK && i <= last; i++) {
        uint8_t *blob;
        size_t blen;
        if ((rc = scan_one(st, i, &blob, &blen, err)) != KL_OK || blob == NULL)
            continue;
        kl_confstore_learn(cs, blob, blen);
        if (cs->n_stored >= KL_RAFT_MAX_CONF_HISTORY) {
            free(blob);
            rc = kl_fail(err, KL_INTERNAL, "log", "more than %d configuration entries in the log",
                         KL_RAFT_MAX_CONF_HISTORY);
            break;
        }
        cs->stored[cs->n_stored++] = i;
        if (i <= applied)
            cs->applied[cs->n_applied++] = (kl_confstore_item){.index = i, .blob = blob, .len = blen};
        else
            free(blob);
    }
    if (rc != KL_OK)
        kl_confstore_free(cs);
    return rc;
}

void kl_confstore_free(kl_confstore *cs)
{
    free(cs->base.blob);
    for (size_t i = 0; i < cs->n_applied; i++)
        free(cs->applied[i].blob);
    memset(cs, 0, sizeof *cs);
}

void kl_confstore_stored(kl_confstore *cs, uint64_t index)
{
    kl_confstore_truncated(cs, index);
    /* The core never lets more than KL_RAFT_MAX_CONF_HISTORY past the snapshot point; a
     * stray one past that only loses the fast path of last_conf, never an entry. */
    if (cs->n_stored < KL_RAFT_MAX_CONF_HISTORY)
        cs->stored[cs->n_stored++] = index;
}

void kl_confstore_truncated(kl_confstore *cs, uint64_t from)
{
    while (cs->n_stored > 0 && cs->stored[cs->n_stored - 1] >= from)
        cs->n_stored--;
}

uint64_t kl_confstore_last(const kl_confstore *cs, uint64_t hi)
{
    for (size_t i = cs->n_stored; i > 0; i--)
        if (cs->stored[i - 1] <= hi)
            return cs->stored[i - 1];
    return 0;
}

bool kl_confstore_applied(kl_confstore *cs, uint64_t index, const uint8_t *blob, size_t len)
{
    uint8_t *b = dup_bytes(blob, len);
    if (b == NULL)
        return false;
    /* The core keeps at most KL_RAFT_MAX_CONF_HISTORY CONF entries past the snapshot point
     * and the driver rebases at every compaction, so this never fills; if it did, the
     * oldest goes: a later compaction point only ever needs the latest at or below it. */
    if (cs->n_applied == KL_RAFT_MAX_CONF_HISTORY) {
        free(cs->applied[0].blob);
        memmove(cs->applied, cs->applied + 1, (cs->n_applied - 1) * sizeof cs->applied[0]);
        cs->n_applied--;
    }
    cs->applied[cs->n_applied++] = (kl_confstore_item){.index = index, .blob = b, .len = len};
    return true;
}

void kl_confstore_at(const kl_confstore *cs, uint64_t index, const uint8_t **blob, size_t *len)
{
    for (size_t i = cs->n_applied; i > 0; i--) {
        if (cs->applied[i - 1].index <= index) {
            *blob = cs->applied[i - 1].blob;
            *len = cs->applied[i - 1].len;
            return;
        }
    }
    *blob = cs->base.blob;
    *len = cs->base.len;
}

bool kl_confstore_rebase(kl_confstore *cs, uint64_t index, const uint8_t *blob, size_t len)
{
    uint8_t *b = NULL;
    if (len > 0 && (b = dup_bytes(blob, len)) == NULL)
        return false;
    free(cs->base.blob);
    cs->base = (kl_confstore_item){.index = index, .blob = b, .len = b ? len : 0};
    if (b != NULL)
        kl_confstore_learn(cs, b, len);
    size_t k = 0;
    while (k < cs->n_applied && cs->applied[k].index <= index)
        free(cs->applied[k++].blob);
    memmove(cs->applied, cs->applied + k, (cs->n_applied - k) * sizeof cs->applied[0]);
    cs->n_applied -= k;
    k = 0;
    while (k < cs->n_stored && cs->stored[k] <= index)
        k++;
    memmove(cs->stored, cs->stored + k, (cs->n_stored - k) * sizeof cs->stored[0]);
    cs->n_stored -= k;
    return true;
}

void kl_confstore_learn_one(kl_confstore *cs, uint64_t id, const char *peer_url,
                            const char *client_url, const uint8_t *key)
{
    if (id == 0)
        return;
    kl_confstore_member *m = (kl_confstore_member *)kl_confstore_member_of(cs, id);
    if (m == NULL) {
        if (cs->n_known == KL_MEMBER_MAX_KNOWN) { /* forget the oldest */
            memmove(cs->known, cs->known + 1, (cs->n_known - 1) * sizeof cs->known[0]);
            cs->n_known--;
        }
        m = &cs->known[cs->n_known++];
    }
    memset(m, 0, sizeof *m);
    m->id = id;
    if (peer_url != NULL)
        snprintf(m->peer_url, sizeof m->peer_url, "%s", peer_url);
    if (client_url != NULL)
        snprintf(m->client_url, sizeof m->client_url, "%s", client_url);
    if (key != NULL) {
        memcpy(m->public_key, key, sizeof m->public_key);
        m->has_key = true;
    }
}

void kl_confstore_learn(kl_confstore *cs, const uint8_t *blob, size_t len)
{
    kl_raft_conf c;
    size_t off;
    if (blob == NULL || kl_raft_conf_decode(blob, len, &c, &off, NULL) != KL_OK)
        return;
    Keyload__V1__MemberDirectory *d = keyload__v1__member_directory__unpack(NULL, len - off, blob + off);
    if (d == NULL)
        return;
    for (size_t i = 0; i < d->n_members; i++) {
        const Keyload__V1__MemberInfo *mi = d->members[i];
        bool key = mi->public_key.len == 32;
        if (strlen(mi->peer_url) > KL_MEMBER_URL_MAX || strlen(mi->client_url) > KL_MEMBER_URL_MAX)
            continue; /* the proposer checked the limits; never truncate an address */
        kl_confstore_learn_one(cs, mi->id, mi->peer_url, mi->client_url, key ? mi->public_key.data : NULL);
    }
    keyload__v1__member_directory__free_unpacked(d, NULL);
}

const kl_confstore_member *kl_confstore_member_of(const kl_confstore *cs, uint64_t id)
{
    for (size_t i = 0; i < cs->n_known; i++)
        if (cs->known[i].id == id)
            return &cs->known[i];
    return NULL;
}
