/* restore: a backup's chunk files into a fresh store (ARCHITECTURE.md "Backup and restore").
 * The store is this member's own (its identity and incarnation were made by --init-store),
 * so a restored cluster has new member identities and no vote; only the replicated state,
 * which holds the catalog, the database incarnations and every queue, comes from the
 * backup. */
#include "daemon/restore.h"

#include "common/log.h"
#include "daemon/store/keys.h"
#include "daemon/store/snapshot.h"
#include "keyload/v1/store.pb-c.h"

#include <errno.h>
#include <rocksdb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads DIR/chunk-<seq> whole; *found false when it does not exist. */
static kl_code read_chunk(const char *dir, uint64_t seq, uint8_t **buf, size_t *len, bool *found, kl_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/chunk-%06llu", dir, (unsigned long long)seq);
    *found = false;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        if (errno == ENOENT)
            return KL_OK;
        return kl_fail(err, KL_FAILED_PRECONDITION, "restore_read", "cannot open %s: %s", path, strerror(errno));
    }
    *buf = malloc(KL_SNAP_CHUNK_MAX + 1);
    if (*buf == NULL) {
        fclose(f);
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    }
    *len = fread(*buf, 1, KL_SNAP_CHUNK_MAX + 1, f);
    bool bad = ferror(f) || *len > KL_SNAP_CHUNK_MAX;
    fclose(f);
    if (bad) {
        free(*buf);
        return kl_fail(err, KL_FAILED_PRECONDITION, "restore_read",
                       "%s cannot be read or is over KL_SNAP_CHUNK_MAX (%u bytes)", path, (unsigned)KL_SNAP_CHUNK_MAX);
    }
    *found = true;
    return KL_OK;
}

/* Stages every chunk file; *done once the last one verified. */
static kl_code stage_all(kl_snap_install *in, const char *dir, kl_err *err)
{
    bool done = false;
    for (uint64_t seq = 0; !done; seq++) {
        uint8_t *buf;
        size_t len;
        bool found;
        kl_code rc = read_chunk(dir, seq, &buf, &len, &found, err);
        if (rc != KL_OK)
            return rc;
        if (!found)
            return kl_fail(err, KL_FAILED_PRECONDITION, "restore_truncated",
                           "%s ends at chunk %llu before the stream's last chunk: the backup is incomplete",
                           dir, (unsigned long long)seq);
        rc = kl_snap_install_chunk(in, buf, len, &done, err);
        free(buf);
        if (rc != KL_OK)
            return rc;
    }
    return KL_OK;
}

/* The hard state {term, no vote, commit index} and an empty entry at index of `term`: the
 * replication driver reads the term of the applied entry from the log at start, and an
 * installed store's log is empty (it starts at index + 1). One synced write of the store's
 * own records, before anything reads them; a leader's first entry goes at index + 1. */
static kl_code write_bridge(kl_store *st, uint64_t index, uint64_t term, kl_err *err)
{
    Keyload__V1__LogEntry e = KEYLOAD__V1__LOG_ENTRY__INIT;
    e.index = index;
    e.term = term;
    e.raft_type = 1; /* the no-op a new leader appends (repl/raft.h): carries no write */
    uint8_t eb[64];
    size_t en = keyload__v1__log_entry__pack(&e, eb);
    Keyload__V1__HardState h = KEYLOAD__V1__HARD_STATE__INIT;
    h.term = term;
    h.commit = index;
    uint8_t hb[64];
    size_t hn = keyload__v1__hard_state__pack(&h, hb);
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    kl_key k;
    kl_key_log(&k, index);
    rocksdb_writebatch_put_cf(wb, kl_store_log_family(st), (const char *)k.b, k.len, (const char *)eb, en);
    kl_key_meta(&k, "hard");
    rocksdb_writebatch_put(wb, (const char *)k.b, k.len, (const char *)hb, hn);
    kl_code rc = kl_store_write_local(st, wb, err);
    rocksdb_writebatch_destroy(wb);
    if (rc != KL_OK)
        return kl_fail(err, KL_UNAVAILABLE, "restore_write", "writing the restored hard state failed: %.200s",
                       err->message);
    return KL_OK;
}

kl_code kl_restore_install(kl_store *st, const char *dir, int partition, uint64_t *index, uint64_t *term,
                           kl_err *err)
{
    if (kl_store_applied_index(st) != 0 || kl_store_last_index(st) != 0)
        return kl_fail(err, KL_FAILED_PRECONDITION, "restore_not_fresh",
                       "the store already holds log or state (applied %llu, last %llu): restore only into a "
                       "new member's empty data directory (--init-store)",
                       (unsigned long long)kl_store_applied_index(st), (unsigned long long)kl_store_last_index(st));
    const char *base = strrchr(dir, '/');
    base = base != NULL && base[1] != '\0' ? base + 1 : dir;
    char want[32];
    snprintf(want, sizeof want, "partition-%d", partition);
    if (strcmp(base, want) != 0)
        return kl_fail(err, KL_FAILED_PRECONDITION, "restore_partition",
                       "%s is not this member's partition: its backup is in %s", dir, want);
    kl_snap_install *in;
    kl_code rc = kl_snap_install_open(st, &in, err);
    if (rc != KL_OK)
        return rc;
    rc = stage_all(in, dir, err);
    if (rc == KL_OK) {
        bool staged;
        kl_snap_pos pos;
        kl_snap_install_pos(in, &staged, index, term, &pos);
        rc = kl_snap_install_commit(in, err);
    }
    if (rc != KL_OK)
        kl_snap_install_discard(in);
    kl_snap_install_close(in);
    if (rc == KL_OK)
        rc = write_bridge(st, *index, *term, err);
    if (rc == KL_OK) {
        char inc[33];
        const uint8_t *id = kl_store_incarnation(st);
        for (int i = 0; i < 16; i++)
            snprintf(inc + 2 * i, 3, "%02x", id[i]);
        KL_INFO("restored", "from=%s index=%llu term=%llu store_incarnation=%s", dir, (unsigned long long)*index,
                (unsigned long long)*term, inc);
    }
    return rc;
}
