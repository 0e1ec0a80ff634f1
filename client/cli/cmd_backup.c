/* cmd_backup: `keyload admin backup --out DIR` and `keyload admin restore --in DIR --check`
 * (ARCHITECTURE.md "Backup and restore", README "Backup and restore").
 *
 * Backup: every partition's stream (kl_client_backup_*), data partitions first and
 * partition 0 last, so the catalog in the backup is at or after every catalog version a
 * data partition applied. Each chunk is checked against its running digest as it arrives
 * and written to DIR.partial/partition-P/chunk-NNNNNN; the manifest (manifest.json) is
 * written last, then every file and directory is fsynced and DIR.partial renamed to DIR:
 * a DIR that exists is a complete backup, and a cut one stays under the .partial name.
 *
 * Restore check: the manifest's shape against the target cluster file (naming the first
 * field that differs) and every chunk file against its digest, its order and the
 * manifest's final digest and key count, before anything is installed; the launcher
 * (`deploy/keyload-cluster restore`) runs it first and then each new member's
 * `keyloadd --init-store --restore-from DIR/partition-P`. */
#include "client/cli/cli.h"
#include "common/clock.h"
#include "common/cluster.h"
#include "common/failpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BACKUP_FORMAT 1
#define DIGEST 32
#define CHUNK_FIXED 40 /* "KLSC" version index term seq flags after_len */
#define PATH_CAP 4096

#define USAGE_BACKUP                                                                            \
    "keyload [GLOBAL OPTIONS] admin backup --out DIR [--hold-ms MS]\n"                          \
    "  --hold-ms: how long Complete is held on every partition while the cut is taken\n"       \
    "             (default 15000, 1000..120000; released as soon as every partition is pinned;\n" \
    "             raise it for large states: each pin counts its partition, about 7 s per GiB)\n" \
    "  each call waits up to 600000 ms unless --timeout says otherwise\n"                     \
    "  every partition's replicated state, written to DIR.partial and renamed to DIR once\n"    \
    "  complete and synced (cluster administrator; DIR must not exist)\n"                       \
    "keyload [GLOBAL OPTIONS] admin restore --in DIR --check\n"                                 \
    "  verifies DIR against the cluster file of --cluster (the new cluster) before a restore;\n" \
    "  deploy/keyload-cluster restore --in DIR runs it, then installs every member"

/* What one partition's stream was, as the manifest records it. */
typedef struct part_result {
    int id;
    uint64_t index, term, key_count, chunks, bytes, member;
    uint8_t digest[DIGEST];
    int64_t entry_ms;     /* partition time of the entry at index (0: the member could not say) */
    int64_t hold_until;   /* the stream's 'M' "transfer_hold" (0: none in the stream) */
} part_result;

static uint64_t be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* Checks one chunk's running digest and its fields (snapshot.h's layout); *prev moves on. */
static kl_code chunk_check(const uint8_t *c, size_t n, uint64_t seq, uint8_t prev[DIGEST], bool *last,
                           uint64_t *index, uint64_t *term, kl_err *err)
{
    if (n < CHUNK_FIXED + 4 + DIGEST || memcmp(c, "KLSC", 4) != 0 || be64(c + 24) != seq)
        return kl_fail(err, KL_FAILED_PRECONDITION, "backup_chunk", "chunk %" PRIu64 " is malformed", seq);
    uint8_t d[DIGEST];
    crypto_generichash_state h;
    crypto_generichash_init(&h, NULL, 0, DIGEST);
    crypto_generichash_update(&h, prev, DIGEST);
    crypto_generichash_update(&h, c, n - DIGEST);
    crypto_generichash_final(&h, d, DIGEST);
    if (sodium_memcmp(d, c + n - DIGEST, DIGEST) != 0)
        return kl_fail(err, KL_FAILED_PRECONDITION, "backup_digest",
                       "chunk %" PRIu64 " does not match its digest: the backup is damaged", seq);
    memcpy(prev, d, DIGEST);
    *last = (be32(c + 32) & 1u) != 0;
    *index = be64(c + 8);
    *term = be64(c + 16);
    return KL_OK;
}

/* The value of the stream's 'M' "transfer_hold" record when this chunk (seq >= 1) holds it:
 * records are key_len(4) key value_len(4) value after the fixed fields and the resume key. */
static void find_hold(const uint8_t *c, size_t n, int64_t *until)
{
    static const char key[] = "Mtransfer_hold";
    size_t after = be32(c + 36);
    size_t at = CHUNK_FIXED + after + 4;
    if (be64(c + 24) == 0 || at > n - DIGEST)
        return;
    size_t end = at + be32(c + at - 4);
    while (end <= n - DIGEST && at + 4 <= end) {
        size_t kl = be32(c + at);
        if (at + 4 + kl + 4 > end)
            return;
        size_t vl = be32(c + at + 4 + kl);
        if (at + 8 + kl + vl > end)
            return;
        if (kl == sizeof key - 1 && memcmp(c + at + 4, key, kl) == 0 && vl == 8)
            *until = (int64_t)be64(c + at + 8 + kl);
        at += 8 + kl + vl;
    }
}

static void hex(const uint8_t *p, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", p[i]);
}

/* Writes a whole file and fsyncs it. */
static kl_code write_file(const char *path, const uint8_t *p, size_t n, kl_err *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return kl_fail(err, KL_FAILED_PRECONDITION, "out", "cannot create %s: %s", path, strerror(errno));
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(fd, p + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            close(fd);
            return kl_fail(err, KL_UNAVAILABLE, "out", "writing %s failed: %s", path, strerror(errno));
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0) {
        close(fd);
        return kl_fail(err, KL_UNAVAILABLE, "out", "fsync of %s failed: %s", path, strerror(errno));
    }
    close(fd);
    return KL_OK;
}

static kl_code sync_dir(const char *path, kl_err *err)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        if (fd >= 0)
            close(fd);
        return kl_fail(err, KL_UNAVAILABLE, "out", "fsync of directory %s failed: %s", path, strerror(errno));
    }
    close(fd);
    return KL_OK;
}

/* ---- backup */

/* A partition's stream while the backup reads it. */
typedef struct part_stream {
    uint64_t stream;
    bool open, done;
    uint64_t seq;           /* the next chunk to ask for */
    char dir[PATH_CAP + 64];
    part_result res;
} part_stream;

static int64_t wall_ms(void)
{
    return kl_clock_ms(CLOCK_REALTIME);
}

static int64_t mono_ms(void)
{
    return kl_clock_ms(CLOCK_MONOTONIC);
}

/* The order of the cut: data partitions first, partition 0 (the catalog) last. */
static int cut_order(const kl_cluster *cl, int k)
{
    int n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < cl->partition_count; i++)
            if ((cl->partitions[i].id == 0) == (pass == 1) && n++ == k)
                return i;
    return -1;
}

/* Pins partition slot i (BackupOpen: read barrier, then a pin on its leader). */
static kl_code open_stream(kl_client *client, const kl_cluster *cl, int i, const char *partial, part_stream *ps,
                           kl_err *err)
{
    int pid = cl->partitions[i].id;
    snprintf(ps->dir, sizeof ps->dir, "%s/partition-%d", partial, pid);
    if (mkdir(ps->dir, 0700) != 0)
        return kl_fail(err, KL_FAILED_PRECONDITION, "out", "cannot create %s: %s", ps->dir, strerror(errno));
    Keyload__V1__BackupOpenAnswer *a;
    kl_code rc = kl_client_backup_open(client, pid, &a, err);
    if (rc != KL_OK)
        return rc;
    ps->open = true;
    ps->stream = a->stream;
    ps->res.id = pid;
    ps->res.index = a->index;
    ps->res.term = a->term;
    ps->res.key_count = a->key_count;
    ps->res.member = a->member;
    ps->res.entry_ms = a->entry_unix_ms;
    keyload__v1__backup_open_answer__free_unpacked(a, NULL);
    return KL_OK;
}

/* The next chunk of one stream: checked against its running digest, written and synced. */
static kl_code read_chunk(kl_client *client, part_stream *ps, kl_err *err)
{
    Keyload__V1__BackupChunkAnswer *ca;
    kl_code rc = kl_client_backup_chunk(client, ps->res.id, ps->stream, ps->seq, &ca, err);
    if (rc != KL_OK)
        return rc;
    uint64_t index, term;
    bool last;
    rc = chunk_check(ca->chunk.data, ca->chunk.len, ps->seq, ps->res.digest, &last, &index, &term, err);
    if (rc == KL_OK && (index != ps->res.index || term != ps->res.term || last != ca->last))
        rc = kl_fail(err, KL_INTERNAL, "backup_chunk", "partition %d: chunk %" PRIu64 " names another snapshot",
                     ps->res.id, ps->seq);
    if (rc == KL_OK) {
        find_hold(ca->chunk.data, ca->chunk.len, &ps->res.hold_until);
        char path[PATH_CAP + 128];
        snprintf(path, sizeof path, "%s/chunk-%06" PRIu64, ps->dir, ps->seq);
        rc = write_file(path, ca->chunk.data, ca->chunk.len, err);
        ps->res.chunks++;
        ps->res.bytes += ca->chunk.len;
        ps->seq++;
        ps->done = last;
    }
    keyload__v1__backup_chunk_answer__free_unpacked(ca, NULL);
    if (rc == KL_OK && ps->done)
        rc = sync_dir(ps->dir, err);
    return rc;
}

/* Holds Complete on every partition (SetTransferHold), pins every partition in cut order,
 * and checks that the last pin came while every hold was still in effect: partition time
 * runs at most 1% faster than real time (daemon/entry_clock.h), so a hold of H ms lasts at
 * least H / 1.01 ms of real time after its entry, which came after we sent it. */
static kl_code take_cut(kl_client *client, const kl_cluster *cl, const char *partial, uint32_t hold_ms,
                        part_stream *ps, int *held, int64_t *cut_ms, kl_err *err)
{
    int64_t t0 = mono_ms();
    for (int i = 0; i < cl->partition_count; i++) {
        int64_t until;
        kl_code rc = kl_client_transfer_hold(client, cl->partitions[i].id, hold_ms, &until, err);
        if (rc != KL_OK)
            return rc;
        (*held)++;
    }
    kl_code rc = KL_FAILPOINT("cli.backup.after_hold", err);
    for (int k = 0; rc == KL_OK && k < cl->partition_count; k++)
        rc = open_stream(client, cl, cut_order(cl, k), partial, &ps[cut_order(cl, k)], err);
    *cut_ms = mono_ms() - t0;
    return rc;
}

/* Releases the first `held` holds (streams == NULL) or closes every stream (a finished one
 * still pins its member's files until closed); best effort (holds and idle streams end by
 * themselves). */
static void release(kl_client *client, const kl_cluster *cl, part_stream *streams, int held)
{
    kl_err ignored;
    int64_t until;
    for (int i = 0; i < (streams == NULL ? held : cl->partition_count); i++) {
        if (streams == NULL && kl_client_transfer_hold(client, cl->partitions[i].id, 0, &until, &ignored) != KL_OK)
            fprintf(stderr, "warning: partition %d's transfer hold was not released (%s); it ends by itself\n",
                    cl->partitions[i].id, ignored.message);
        if (streams != NULL && streams[i].open)
            (void)kl_client_backup_close(client, streams[i].res.id, streams[i].stream, &ignored);
    }
}

/* Whether the hold covered partition r's pin. The member's own evidence first: the pinned
 * state holds the hold, and the pinned entry's partition time is before its end; entry
 * times never go back, so no entry between the hold and the pin (no Complete) passed it.
 * A member that could not read that entry's time (0: compacted, or a restored store's
 * first entry) leaves the timing bound: every open answered within hold_ms / 1.02 of the
 * first hold being sent. */
static kl_code hold_covered(const part_result *r, uint32_t hold_ms, int64_t cut_ms, kl_err *err)
{
    if (r->entry_ms != 0 && r->hold_until > 0 && r->entry_ms < r->hold_until)
        return KL_OK;
    if (r->entry_ms == 0 && cut_ms * 102 / 100 < hold_ms)
        return KL_OK;
    return kl_fail(err, KL_UNAVAILABLE, "hold_expired",
                   "partition %d was pinned %s (the pins took %lld ms): the cut may not be transfer-consistent; "
                   "retry, with a longer --hold-ms (at most %d; each pin counts its partition's records, about "
                   "7 s per GiB)", r->id, r->entry_ms == 0 ? "later than the hold allows"
                   : r->hold_until == 0 ? "without a hold" : "after its hold ended",
                   (long long)cut_ms, KL_TRANSFER_HOLD_MAX_MS);
}

/* The cut, then every stream read one chunk per partition in turn (so none idles out). */
static kl_code backup_all(kl_client *client, const kl_cluster *cl, const char *partial, uint32_t hold_ms,
                          part_stream *ps, int64_t *cut_ms, kl_err *err)
{
    int held = 0;
    kl_code rc = take_cut(client, cl, partial, hold_ms, ps, &held, cut_ms, err);
    release(client, cl, NULL, held);
    for (bool left = rc == KL_OK; left && rc == KL_OK;) {
        left = false;
        for (int i = 0; i < cl->partition_count && rc == KL_OK; i++)
            if (!ps[i].done) {
                rc = read_chunk(client, &ps[i], err);
                left = true;
            }
    }
    release(client, cl, ps, 0);
    for (int i = 0; rc == KL_OK && i < cl->partition_count; i++)
        rc = hold_covered(&ps[i].res, hold_ms, *cut_ms, err);
    return rc;
}

static json_t *shape_json(const kl_cluster *cl)
{
    json_t *parts = json_array();
    for (int i = 0; i < cl->partition_count; i++)
        json_array_append_new(parts, json_pack("{s:i, s:i}", "id", cl->partitions[i].id, "members",
                                               cl->partitions[i].member_count));
    return json_pack("{s:i, s:i, s:o}", "partition_count", cl->partition_count, "replica_count",
                     cl->replica_count, "partitions", parts);
}

static json_t *databases_json(kl_client *client)
{
    json_t *dbs = json_array();
    Keyload__V1__ListCatalogAnswer *ans = NULL;
    kl_err err;
    const uint8_t *cursor = NULL;
    size_t cursor_len = 0;
    uint8_t keep[512];
    for (int page = 0; page < 1000; page++) {
        if (kl_client_list_catalog(client, KEYLOAD__V1__CATALOG_LIST_KIND__CATALOG_LIST_DATABASES, NULL, cursor,
                                   cursor_len, 0, &ans, &err) != KL_OK)
            break;
        for (size_t i = 0; i < ans->n_databases; i++) {
            const Keyload__V1__CatalogDatabase *d = ans->databases[i];
            char inc[2 * 16 + 1] = "";
            if (d->incarnation.len == 16)
                hex(d->incarnation.data, 16, inc);
            json_array_append_new(dbs, json_pack("{s:s, s:s, s:I, s:s}", "tenant", d->tenant, "database",
                                                 d->database, "database_id", (json_int_t)d->database_id,
                                                 "incarnation", inc));
        }
        bool more = ans->next_cursor.len > 0 && ans->next_cursor.len <= sizeof keep;
        if (more) {
            memcpy(keep, ans->next_cursor.data, ans->next_cursor.len);
            cursor = keep;
            cursor_len = ans->next_cursor.len;
        }
        kl_catalog_list_free(ans);
        if (!more)
            break;
    }
    return dbs;
}

static kl_code write_manifest(const char *dir, const kl_cluster *cl, const part_stream *ps, json_t *dbs,
                              int64_t started_ms, uint32_t hold_ms, int64_t cut_ms, kl_err *err)
{
    json_t *parts = json_array();
    for (int k = 0; k < cl->partition_count; k++) {
        const part_result *res = &ps[cut_order(cl, k)].res;
        char d[2 * DIGEST + 1];
        hex(res->digest, DIGEST, d);
        json_array_append_new(parts, json_pack("{s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:I, s:I}", "id", res->id,
                                               "index", (json_int_t)res->index, "term", (json_int_t)res->term,
                                               "key_count", (json_int_t)res->key_count, "chunks",
                                               (json_int_t)res->chunks, "bytes", (json_int_t)res->bytes,
                                               "member", (json_int_t)res->member, "digest", d,
                                               "pin_entry_unix_ms", (json_int_t)res->entry_ms,
                                               "hold_until_unix_ms", (json_int_t)res->hold_until));
    }
    json_t *m = json_pack("{s:i, s:s, s:I, s:o, s:o, s:o, s:{s:i, s:I}}", "format", BACKUP_FORMAT, "cluster",
                          cl->name, "started_unix_ms", (json_int_t)started_ms, "shape", shape_json(cl), "partitions",
                          parts, "databases", dbs, "cut", "hold_ms", (int)hold_ms, "pinned_within_ms",
                          (json_int_t)cut_ms);
    char *text = m != NULL ? json_dumps(m, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(m);
    if (text == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory writing the manifest");
    char path[PATH_CAP + 64];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    kl_code rc = write_file(path, (const uint8_t *)text, strlen(text), err);
    free(text);
    return rc;
}


/* The manifest, then every sync, then the rename that makes DIR a backup. */
static kl_code finish(const char *partial, const char *out, const kl_cluster *cl, const part_stream *ps, json_t *dbs,
                      int64_t t0, uint32_t hold_ms, int64_t cut_ms, kl_err *err)
{
    kl_code rc = write_manifest(partial, cl, ps, dbs, t0, hold_ms, cut_ms, err);
    if (rc == KL_OK)
        rc = sync_dir(partial, err);
    if (rc == KL_OK && rename(partial, out) != 0)
        rc = kl_fail(err, KL_UNAVAILABLE, "out", "renaming %s to %s failed: %s", partial, out, strerror(errno));
    if (rc == KL_OK) {
        char parent[PATH_CAP];
        snprintf(parent, sizeof parent, "%s", out);
        char *slash = strrchr(parent, '/');
        rc = sync_dir(slash == NULL ? "." : (slash == parent ? "/" : (*slash = '\0', parent)), err);
    }
    return rc;
}

static int parse_backup(cli *c, cli_args *a, const char **out, uint32_t *hold_ms)
{
    const char *pos;
    cli_arg_kind k;
    while ((k = cli_next(c, a, &pos)) != CLI_END) {
        if (k == CLI_FAILED)
            return CLI_EXIT_USAGE;
        if (k == CLI_POSITIONAL)
            return cli_usage(c, "admin backup takes no positional argument");
        if (cli_opt_is(a, "--help") || cli_opt_is(a, "-h"))
            return cli_help(c);
        const char *v = cli_opt_value(c, a);
        if (v == NULL)
            return CLI_EXIT_USAGE;
        uint64_t ms;
        if (cli_opt_is(a, "--out"))
            *out = v;
        else if (!cli_opt_is(a, "--hold-ms"))
            return cli_unknown_option(c, a);
        else if (!cli_parse_u64(c, "--hold-ms", v, KL_TRANSFER_HOLD_MAX_MS, &ms))
            return CLI_EXIT_USAGE;
        else if (ms < 1000)
            return cli_usage(c, "--hold-ms must be at least 1000 (the hold must outlast the cut)");
        else
            *hold_ms = (uint32_t)ms;
    }
    if (*out == NULL)
        return cli_usage(c, "admin backup needs --out DIR");
    return CLI_EXIT_OK;
}

static int backup(cli *c, cli_args *a)
{
    const char *out = NULL;
    uint32_t hold_ms = KL_TRANSFER_HOLD_DEFAULT_MS;
    int urc = parse_backup(c, a, &out, &hold_ms);
    if (urc != CLI_EXIT_OK || out == NULL)
        return urc;
    kl_err err;
    static kl_cluster cl;
    if (kl_failpoint_init(&err) != KL_OK || kl_cluster_load(c->cluster, NULL, &cl, &err) != KL_OK)
        return cli_error(c, &err);
    char partial[PATH_CAP];
    snprintf(partial, sizeof partial, "%s.partial", out);
    struct stat st;
    if (stat(out, &st) == 0)
        return cli_usage(c, "--out %s exists already; a backup is never written over another", out);
    if (stat(partial, &st) == 0)
        return cli_usage(c, "%s exists: an earlier backup was cut there; remove it first", partial);
    if (mkdir(partial, 0700) != 0) {
        kl_fail(&err, KL_FAILED_PRECONDITION, "out", "cannot create %s: %s", partial, strerror(errno));
        return cli_error(c, &err);
    }
    /* A pin counts its partition's records before it answers (about 7 s per GiB): the
     * default per-call bound would cut every backup of a large state. */
    if (c->timeout_ms == KL_DEFAULT_TIMEOUT_MS)
        c->timeout_ms = KL_BACKUP_CALL_TIMEOUT_MS;
    kl_client *client = NULL;
    int64_t t0 = wall_ms(), cut_ms = 0;
    static part_stream ps[KL_CLUSTER_MAX_PARTITIONS];
    kl_code rc = cli_open(c, &client, &err);
    if (rc == KL_OK)
        rc = backup_all(client, &cl, partial, hold_ms, ps, &cut_ms, &err);
    json_t *dbs = rc == KL_OK ? databases_json(client) : NULL;
    kl_client_close(client);
    if (rc == KL_OK)
        rc = finish(partial, out, &cl, ps, dbs, t0, hold_ms, cut_ms, &err);
    else
        json_decref(dbs);
    if (rc != KL_OK)
        return cli_error(c, &err); /* the .partial directory stays, never taken for a backup */
    uint64_t bytes = 0;
    for (int i = 0; i < cl.partition_count; i++)
        bytes += ps[i].res.bytes;
    long long ms = (long long)(wall_ms() - t0);
    if (c->json)
        printf("{\"out\":\"%s\",\"partitions\":%d,\"bytes\":%" PRIu64 ",\"ms\":%lld,\"cut_ms\":%lld}\n", out,
               cl.partition_count, bytes, ms, (long long)cut_ms);
    else
        printf("backup of %d partitions in %s: %" PRIu64 " bytes in %lld ms (cut in %lld ms)\n", cl.partition_count,
               out, bytes, ms, (long long)cut_ms);
    return CLI_EXIT_OK;
}

/* ---- restore check */

/* The first shape field of the manifest that differs from cl, or NULL. */
static const char *shape_differs(json_t *m, const kl_cluster *cl, char *why, size_t cap)
{
    json_t *shape = json_object_get(m, "shape");
    json_t *parts = json_object_get(shape, "partitions");
    if (json_integer_value(json_object_get(shape, "partition_count")) != cl->partition_count) {
        snprintf(why, cap, "shape.partition_count: the backup has %lld partitions, the cluster file %d",
                 (long long)json_integer_value(json_object_get(shape, "partition_count")), cl->partition_count);
        return why;
    }
    for (int i = 0; i < cl->partition_count; i++)
        if (json_integer_value(json_object_get(json_array_get(parts, (size_t)i), "id")) != cl->partitions[i].id) {
            snprintf(why, cap, "shape.partitions[%d].id: the backup's differs from the cluster file's (%d)", i,
                     cl->partitions[i].id);
            return why;
        }
    return NULL;
}

/* Every chunk file of one partition against its digests and the manifest's entry. */
static kl_code check_partition(const char *dir, json_t *p, kl_err *err)
{
    int pid = (int)json_integer_value(json_object_get(p, "id"));
    char path[PATH_CAP + 128];
    uint8_t prev[DIGEST] = {0};
    uint8_t *buf = malloc(KL_SNAP_CHUNK_MAX + 1);
    if (buf == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    bool last = false;
    uint64_t seq = 0, index = 0, term = 0;
    kl_code rc = KL_OK;
    for (; !last && rc == KL_OK; seq++) {
        snprintf(path, sizeof path, "%s/partition-%d/chunk-%06" PRIu64, dir, pid, seq);
        FILE *f = fopen(path, "rb");
        if (f == NULL) {
            rc = kl_fail(err, KL_FAILED_PRECONDITION, "backup_truncated",
                         "%s is missing: partition %d's backup ends before its last chunk", path, pid);
            break;
        }
        size_t n = fread(buf, 1, KL_SNAP_CHUNK_MAX + 1, f);
        fclose(f);
        rc = chunk_check(buf, n, seq, prev, &last, &index, &term, err);
        if (rc != KL_OK) {
            kl_err e = *err;
            kl_fail(err, e.code, e.detail, "partition %d: %s (%s)", pid, e.message, path);
        }
    }
    free(buf);
    if (rc != KL_OK)
        return rc;
    char d[2 * DIGEST + 1];
    hex(prev, DIGEST, d);
    const char *want = json_string_value(json_object_get(p, "digest"));
    if (want == NULL || strcmp(want, d) != 0 || (json_int_t)index != json_integer_value(json_object_get(p, "index")) ||
        (json_int_t)seq != json_integer_value(json_object_get(p, "chunks")))
        return kl_fail(err, KL_FAILED_PRECONDITION, "backup_digest",
                       "partition %d: the chunks do not end at the manifest's digest, index and chunk count", pid);
    return KL_OK;
}

static int restore_check(cli *c, cli_args *a)
{
    const char *in = NULL, *pos;
    bool check = false;
    cli_arg_kind k;
    while ((k = cli_next(c, a, &pos)) != CLI_END) {
        if (k == CLI_FAILED)
            return CLI_EXIT_USAGE;
        if (k == CLI_POSITIONAL)
            return cli_usage(c, "admin restore takes no positional argument");
        if (cli_opt_is(a, "--help") || cli_opt_is(a, "-h"))
            return cli_help(c);
        if (cli_opt_is(a, "--check")) {
            check = true;
            continue;
        }
        if (!cli_opt_is(a, "--in"))
            return cli_unknown_option(c, a);
        if ((in = cli_opt_value(c, a)) == NULL)
            return CLI_EXIT_USAGE;
    }
    if (in == NULL || !check)
        return cli_usage(c, "admin restore needs --in DIR --check (deploy/keyload-cluster restore installs)");
    kl_err err;
    static kl_cluster cl;
    if (kl_cluster_load(c->cluster, NULL, &cl, &err) != KL_OK)
        return cli_error(c, &err);
    char path[PATH_CAP + 64], why[256];
    snprintf(path, sizeof path, "%s/manifest.json", in);
    json_error_t je;
    json_t *m = json_load_file(path, 0, &je);
    if (m == NULL || json_integer_value(json_object_get(m, "format")) != BACKUP_FORMAT) {
        json_decref(m);
        kl_fail(&err, KL_FAILED_PRECONDITION, "manifest",
                "%s is missing or not a format %d manifest: not a complete backup", path, BACKUP_FORMAT);
        return cli_error(c, &err);
    }
    kl_code rc = KL_OK;
    if (shape_differs(m, &cl, why, sizeof why) != NULL)
        rc = kl_fail(&err, KL_FAILED_PRECONDITION, "shape", "the backup does not fit %s: %s", c->cluster, why);
    json_t *parts = json_object_get(m, "partitions");
    size_t n = json_array_size(parts);
    for (size_t i = 0; rc == KL_OK && i < n; i++)
        rc = check_partition(in, json_array_get(parts, i), &err);
    json_decref(m);
    if (rc != KL_OK)
        return cli_error(c, &err);
    printf("backup %s verified: %zu partitions fit %s\n", in, n, c->cluster);
    return CLI_EXIT_OK;
}

int cli_cmd_backup(cli *c, bool restore, int argc, char **argv)
{
    c->usage = USAGE_BACKUP;
    cli_args a;
    cli_args_init(&a, argc, argv);
    return restore ? restore_check(c, &a) : backup(c, &a);
}
