/* The hand-driven one-member log under each golden node, and the store dump. */
#include "tests/golden/golden.h"

#include "daemon/store/keys.h"
#include "keyload/v1/store.pb-c.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int64_t golden_now = 1700000000000;

const uint8_t golden_cluster_secret[32] = {0x67, 0x6f, 0x6c, 0x64, 0x65, 0x6e, 0x2d, 0x73,
                                           0x65, 0x63, 0x72, 0x65, 0x74};

void golden_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "golden: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

void golden_hex(FILE *out, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%02x", p[i]);
}

static void next(void *ctx, uint64_t *index, uint64_t *term, bool *serving)
{
    golden_node *g = ctx;
    *index = g->next_index;
    *term = g->term;
    *serving = g->serving;
}

static kl_code propose(void *ctx, const uint8_t *entry, size_t len)
{
    golden_node *g = ctx;
    if (g->n_props == sizeof g->props / sizeof g->props[0])
        golden_die("p%d: too many proposals in one step", g->partition);
    golden_prop *p = &g->props[g->n_props++];
    p->index = g->next_index++;
    p->term = g->term;
    p->bytes = malloc(len ? len : 1);
    memcpy(p->bytes, entry, len);
    p->len = len;
    return KL_OK;
}

static int64_t clock_ms(void *ctx)
{
    (void)ctx;
    return golden_now;
}

/* Deterministic and distinct: a counter spread over the buffer (one counter for every node,
 * so the workload's order alone decides each value). */
static uint64_t rand_counter;
static void random_bytes(uint8_t *buf, size_t n)
{
    uint64_t c = ++rand_counter;
    memset(buf, 0xA5, n);
    memcpy(buf, &c, n < 8 ? n : 8);
}

/* Makes every queued proposal durable and applies it, oldest first. */
static void commit_all(golden_node *g)
{
    for (size_t i = 0; i < g->n_props; i++) {
        golden_prop *p = &g->props[i];
        kl_err err;
        kl_store_log_item it = {p->index, p->bytes, p->len};
        if (kl_store_log_write(g->store, NULL, 0, &it, 1, &err) != KL_OK)
            golden_die("p%d: log write %llu: %s", g->partition, (unsigned long long)p->index, err.message);
        if (kl_node_apply(g->node, p->index, p->term, p->bytes, p->len, &err) != KL_OK)
            golden_die("p%d: apply %llu: %s", g->partition, (unsigned long long)p->index, err.message);
        free(p->bytes);
    }
    g->n_props = 0;
}

/* Applies the entries a closed store logged but had not applied (a restarted member). */
static void reapply_log(golden_node *g)
{
    kl_err err;
    uint64_t last = kl_store_last_index(g->store);
    for (uint64_t i = kl_store_applied_index(g->store) + 1; i <= last; i++) {
        uint8_t *bytes;
        size_t len;
        bool found;
        if (kl_store_read_log(g->store, i, &bytes, &len, &found, &err) != KL_OK || !found)
            golden_die("p%d: log entry %llu missing", g->partition, (unsigned long long)i);
        Keyload__V1__LogEntry *e = keyload__v1__log_entry__unpack(NULL, len, bytes);
        if (e == NULL)
            golden_die("p%d: log entry %llu does not decode", g->partition, (unsigned long long)i);
        uint64_t term = e->term;
        keyload__v1__log_entry__free_unpacked(e, NULL);
        if (term > g->term)
            g->term = term;
        if (kl_node_apply(g->node, i, term, bytes, len, &err) != KL_OK)
            golden_die("p%d: re-apply %llu: %s", g->partition, (unsigned long long)i, err.message);
        free(bytes);
    }
    g->next_index = last + 1;
}

static void open_node(golden_node *g, const char *dir, int partition, bool serving);

void golden_open(golden_node *g, const char *dir, int partition)
{
    open_node(g, dir, partition, true);
}

/* A follower applies entries from their stored bytes (the leader applies its own from the
 * write-sets it kept): every log entry of leader, written and applied in order. */
void golden_follow(golden_node *leader, golden_node *g, const char *dir)
{
    open_node(g, dir, leader->partition, false);
    kl_err err;
    uint64_t last = kl_store_last_index(leader->store);
    for (uint64_t i = 1; i <= last; i++) {
        uint8_t *bytes;
        size_t len;
        bool found;
        if (kl_store_read_log(leader->store, i, &bytes, &len, &found, &err) != KL_OK || !found)
            golden_die("p%d: log entry %llu missing", g->partition, (unsigned long long)i);
        Keyload__V1__LogEntry *e = keyload__v1__log_entry__unpack(NULL, len, bytes);
        if (e == NULL)
            golden_die("p%d: log entry %llu does not decode", g->partition, (unsigned long long)i);
        uint64_t term = e->term;
        keyload__v1__log_entry__free_unpacked(e, NULL);
        kl_store_log_item it = {i, bytes, len};
        if (kl_store_log_write(g->store, NULL, 0, &it, 1, &err) != KL_OK ||
            kl_node_apply(g->node, i, term, bytes, len, &err) != KL_OK)
            golden_die("p%d: follower apply %llu: %s", g->partition, (unsigned long long)i, err.message);
        free(bytes);
    }
}

static void open_node(golden_node *g, const char *dir, int partition, bool serving)
{
    memset(g, 0, sizeof *g);
    snprintf(g->dir, sizeof g->dir, "%s", dir);
    g->partition = partition;
    g->serving = serving;
    kl_err err;
    if (kl_store_open(dir, NULL, &g->store, &err) != KL_OK)
        golden_die("p%d: store open %s: %s", partition, dir, err.message);
    kl_node_config cfg = {.partition = partition, .partition_count = GOLDEN_PARTITIONS,
                          .cluster_secret = golden_cluster_secret, .insecure_local_admin = true,
                          .max_pending_bytes = 1u << 26, .max_pending_batches = 1024};
    kl_limits_default(&cfg.limits);
    kl_node_io io = {.ctx = g, .next = next, .propose = propose, .clock_ms = clock_ms,
                     .random = random_bytes};
    if (kl_node_open(g->store, &cfg, &io, &g->node, &err) != KL_OK)
        golden_die("p%d: node open: %s", partition, err.message);
    reapply_log(g);
    if (!serving)
        return;
    g->term++; /* a (re)started member leads a new term */
    kl_node_role(g->node, true);
    commit_all(g); /* the partition incarnation entry of a new store */
}

void golden_close(golden_node *g)
{
    kl_node_close(g->node);
    kl_store_close(g->store);
    for (size_t i = 0; i < g->n_props; i++)
        free(g->props[i].bytes);
    g->n_props = 0;
    g->node = NULL;
    g->store = NULL;
}

static void on_reply(void *cookie, kl_code code, const kl_err *err, const uint8_t *receipt, size_t len)
{
    golden_reply *r = cookie;
    r->count++;
    r->code = code;
    if (err)
        r->err = *err;
    free(r->receipt);
    r->receipt = NULL;
    r->len = 0;
    if (receipt) {
        r->receipt = malloc(len ? len : 1);
        memcpy(r->receipt, receipt, len);
        r->len = len;
    }
}

void golden_submit(golden_node *g, const char *principal, const uint8_t *req, size_t len,
                   golden_reply *r)
{
    memset(r, 0, sizeof *r);
    kl_node_submit_batch(g->node, principal, req, len, on_reply, r);
    commit_all(g);
    if (r->count != 1)
        golden_die("p%d: a batch was answered %d times", g->partition, r->count);
}

void golden_reply_free(golden_reply *r)
{
    free(r->receipt);
    r->receipt = NULL;
}

void golden_carry_catalog(golden_node *from, golden_node *to)
{
    uint64_t have, want, changes;
    kl_node_catalog_status(to->node, &have, &changes);
    kl_node_catalog_status(from->node, &want, &changes);
    for (uint64_t v = have + 1; v <= want; v++) {
        uint8_t *bytes;
        size_t len;
        bool found;
        kl_err err;
        if (kl_node_catalog_change(from->node, v, &bytes, &len, &found, &err) != KL_OK || !found)
            golden_die("catalog change %llu missing", (unsigned long long)v);
        if (kl_node_submit_catalog(to->node, bytes, len, &err) != KL_OK)
            golden_die("p%d: catalog change %llu: %s", to->partition, (unsigned long long)v, err.message);
        free(bytes);
        commit_all(to);
    }
}

/* The FormatRecord holds the store's random incarnation and its creation time: masked. */
static bool masked_key(const uint8_t *k, size_t n)
{
    static const char fmt[] = "Mformat";
    return n == sizeof fmt - 1 && memcmp(k, fmt, n) == 0;
}

/* Every key and value `it` reaches, hex, one a line; an 'L' key in the state family (none
 * is left there once the store opened) would go to the log file. */
static void dump_family(rocksdb_iterator_t *it, FILE *state_out, FILE *log_out)
{
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kn, vn;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kn);
        const uint8_t *v = (const uint8_t *)rocksdb_iter_value(it, &vn);
        FILE *out = (kn > 0 && k[0] == 'L') ? log_out : state_out;
        golden_hex(out, k, kn);
        fputc(' ', out);
        if (masked_key(k, kn))
            fprintf(out, "MASKED(random incarnation, creation time)");
        else
            golden_hex(out, v, vn);
        fputc('\n', out);
    }
    rocksdb_iter_destroy(it);
}

void golden_dump_store(golden_node *g, FILE *state_out, FILE *log_out)
{
    dump_family(kl_store_iterator(g->store), state_out, log_out);
    dump_family(kl_store_log_iterator(g->store), log_out, log_out);
}
