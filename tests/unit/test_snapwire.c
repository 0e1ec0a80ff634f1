/* Snapshot streams (daemon/repl/snapwire.h) between two real RocksDB stores, with the frames
 * carried by a test queue (packed and unpacked as RaftMessage, as the driver does): the
 * leader's reader, pieces smaller than a chunk, frames lost on the way (the receiver asks to
 * resume, the sender resyncs after its silence), exactly one report, the snapshot stepped
 * in at the reader's (index, term), and an install that leaves the receiver with the
 * sender's replicated state. */
#include "daemon/repl/snapwire.h"
#include "common/limits.h"
#include "daemon/store/snapshot.h"
#include "daemon/store/keys.h"
#include "daemon/store/store.h"
#include "harness.h"

#include <check.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Entry `index`: key "S<index>" with a 1 KiB value. */
static size_t sw_pack_entry(uint8_t *buf, uint64_t index, uint64_t term)
{
    char key[32];
    snprintf(key, sizeof key, "S%08llu", (unsigned long long)index);
    uint8_t val[1024];
    memset(val, (int)(index & 0xff), sizeof val);
    Keyload__V1__KvOp op = KEYLOAD__V1__KV_OP__INIT;
    op.key.data = (uint8_t *)key;
    op.key.len = strlen(key);
    op.value.data = val;
    op.value.len = sizeof val;
    Keyload__V1__KvOp *ops[1] = {&op};
    Keyload__V1__WriteSet ws = KEYLOAD__V1__WRITE_SET__INIT;
    ws.n_ops = 1;
    ws.ops = ops;
    Keyload__V1__WriteSet *wss[1] = {&ws};
    Keyload__V1__LogEntry e = KEYLOAD__V1__LOG_ENTRY__INIT;
    e.index = index;
    e.term = term;
    e.n_write_sets = 1;
    e.write_sets = wss;
    return keyload__v1__log_entry__pack(&e, buf);
}

/* Entries 1..n in synced log writes of 500, each applied after its write. */
static void sw_fill(kl_store *st, uint64_t n, uint64_t term)
{
    enum { PER = 500 };
    static uint8_t bufs[PER][2048];
    kl_store_log_item items[PER];
    kl_err err;
    for (uint64_t i = 1; i <= n;) {
        size_t k = 0;
        for (; k < PER && i <= n; k++, i++)
            items[k] = (kl_store_log_item){.index = i, .bytes = bufs[k], .len = sw_pack_entry(bufs[k], i, term)};
        ck_assert_int_eq(kl_store_log_write(st, NULL, 0, items, k, &err), KL_OK);
        for (size_t j = 0; j < k; j++) {
            Keyload__V1__LogEntry *e = keyload__v1__log_entry__unpack(NULL, items[j].len, items[j].bytes);
            ck_assert_ptr_nonnull(e);
            ck_assert_int_eq(kl_store_apply(st, e, &err), KL_OK);
            keyload__v1__log_entry__free_unpacked(e, NULL);
        }
    }
}

static void sw_digest(kl_store *st, uint8_t out[32])
{
    crypto_generichash_state h;
    crypto_generichash_init(&h, NULL, 0, 32);
    rocksdb_iterator_t *it = kl_store_iterator(st);
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const char *k = rocksdb_iter_key(it, &kl);
        const char *v = rocksdb_iter_value(it, &vl);
        if (kl_store_key_is_local((const uint8_t *)k, kl))
            continue;
        crypto_generichash_update(&h, (const uint8_t *)k, kl);
        crypto_generichash_update(&h, (const uint8_t *)v, vl);
    }
    rocksdb_iter_destroy(it);
    crypto_generichash_final(&h, out, 32);
}

/* The wire between member 1 (sender) and member 2 (receiver). */
#define SW_QMAX 4096
typedef struct sw_frame {
    uint64_t to;
    uint8_t *bytes;
    size_t len;
} sw_frame;

static struct {
    sw_frame q[SW_QMAX];
    size_t head, len;
    uint64_t sent_data;
    bool lossy; /* drop data frames 50, 300, 301 and 700 (a piece lost mid-chunk, two in a
                 * row, one after the resume) */
    int reports, reports_ok;
    int steps;
    kl_raft_msg stepped;
} wire;

static bool sw_send(void *ctx, uint64_t to, const Keyload__V1__RaftMessage *pm)
{
    (void)ctx;
    if (pm->type == KL_SNAPWIRE_MSG_DATA && wire.lossy) {
        uint64_t n = ++wire.sent_data;
        if (n == 50 || n == 300 || n == 301 || n == 700)
            return true; /* queued, then lost on the way */
    }
    ck_assert_uint_lt(wire.len, SW_QMAX);
    sw_frame *f = &wire.q[(wire.head + wire.len++) % SW_QMAX];
    f->to = to;
    f->len = keyload__v1__raft_message__get_packed_size(pm);
    f->bytes = malloc(f->len);
    keyload__v1__raft_message__pack(pm, f->bytes);
    return true;
}

static void sw_report(void *ctx, uint64_t to, bool ok)
{
    (void)ctx;
    ck_assert_uint_eq(to, 2);
    wire.reports++;
    wire.reports_ok += ok;
}

static bool sw_step(void *ctx, const kl_raft_msg *m)
{
    (void)ctx;
    wire.steps++;
    wire.stepped = *m;
    return true;
}

START_TEST(snapwire_streams_through_loss)
{
    memset(&wire, 0, sizeof wire);
    wire.lossy = true;
    char sdir[256], ddir[256];
    th_tmpdir(sdir, sizeof sdir);
    th_tmpdir(ddir, sizeof ddir);
    kl_store *src, *dst;
    kl_err err;
    ck_assert_int_eq(kl_store_open(sdir, NULL, &src, &err), KL_OK);
    ck_assert_int_eq(kl_store_open(ddir, NULL, &dst, &err), KL_OK);
    sw_fill(src, 3000, 4); /* about 3 MiB: several chunks */
    uint64_t durable;
    ck_assert_int_eq(kl_store_make_durable(src, &durable, &err), KL_OK);
    ck_assert_int_eq(kl_store_compact_log(src, 2001, NULL, 0, &err), KL_OK);
    kl_snapwire_io io = {.send = sw_send, .report = sw_report, .step = sw_step};
    kl_snapwire *l, *f;
    ck_assert_int_eq(kl_snapwire_new(src, 1, 8192, &io, &l, &err), KL_OK); /* pieces of 8 KiB */
    ck_assert_int_eq(kl_snapwire_new(dst, 2, 8192, &io, &f, &err), KL_OK);
    kl_raft_msg m = {.type = KL_RAFT_MSG_SNAPSHOT, .from = 1, .to = 2, .term = 5,
                     .snap = {.index = 2000, .term = 4,
                              .conf = {.members = {1, 2, 3}, .n_members = 3, .replica_count = 2}}};
    uint64_t now = 1000;
    kl_snapwire_start(l, &m, now);
    for (int round = 0; round < 200000 && wire.reports == 0; round++) {
        if (wire.len == 0) { /* silence: the sender's resync timer */
            now += KL_SNAPWIRE_RESYNC_MS + 1;
            kl_snapwire_tick(l, true, now);
            continue;
        }
        sw_frame fr = wire.q[wire.head];
        wire.head = (wire.head + 1) % SW_QMAX;
        wire.len--;
        Keyload__V1__RaftMessage *pm = keyload__v1__raft_message__unpack(NULL, fr.len, fr.bytes);
        ck_assert_ptr_nonnull(pm);
        kl_snapwire_recv(fr.to == 2 ? f : l, fr.to == 2 ? 1 : 2, pm, now);
        keyload__v1__raft_message__free_unpacked(pm, NULL);
        free(fr.bytes);
    }
    kl_snapwire_counters lc, fc;
    kl_snapwire_counters_get(l, &lc);
    kl_snapwire_counters_get(f, &fc);
    ck_assert_int_eq(wire.reports, 1);
    ck_assert_int_eq(wire.reports_ok, 1);
    ck_assert_uint_ge(lc.resumes, 2); /* the begin's answer, and at least one after a loss */
    ck_assert_int_eq(wire.steps, 1);
    /* The reader's own point (the applied index), not the one asked for. */
    ck_assert_uint_eq(wire.stepped.snap.index, 3000);
    ck_assert_uint_eq(wire.stepped.snap.term, 4);
    ck_assert_uint_eq(wire.stepped.term, 5);
    ck_assert(kl_snapwire_install_waiting(f));
    kl_raft_snapshot other = {.index = 2999, .term = 4};
    ck_assert_int_eq(kl_snapwire_install(f, &other, &err), KL_FAILED_PRECONDITION);
    ck_assert_str_eq(err.detail, "snapshot_not_staged");
    ck_assert_int_eq(kl_snapwire_install(f, &wire.stepped.snap, &err), KL_OK);
    ck_assert_uint_eq(kl_store_applied_index(dst), 3000);
    ck_assert_uint_eq(kl_store_first_index(dst), 3001);
    uint8_t a[32], b[32];
    sw_digest(src, a);
    sw_digest(dst, b);
    ck_assert_mem_eq(a, b, 32);
    while (wire.len > 0) {
        free(wire.q[wire.head].bytes);
        wire.head = (wire.head + 1) % SW_QMAX;
        wire.len--;
    }
    kl_snapwire_free(l);
    kl_snapwire_free(f);
    kl_store_close(src);
    kl_store_close(dst);
    th_rmrf(sdir);
    th_rmrf(ddir);
}
END_TEST

/* Entries 1..n, each one record "B<index>" of `vlen` bytes, logged and applied. */
static void sw_fill_big(kl_store *st, uint64_t n, size_t vlen)
{
    uint8_t *val = malloc(vlen), *buf = malloc(vlen + 256);
    kl_err err;
    for (uint64_t i = 1; i <= n; i++) {
        char key[32];
        snprintf(key, sizeof key, "B%08llu", (unsigned long long)i);
        memset(val, (int)i, vlen);
        Keyload__V1__KvOp op = KEYLOAD__V1__KV_OP__INIT;
        op.key.data = (uint8_t *)key;
        op.key.len = strlen(key);
        op.value.data = val;
        op.value.len = vlen;
        Keyload__V1__KvOp *ops[1] = {&op};
        Keyload__V1__WriteSet ws = KEYLOAD__V1__WRITE_SET__INIT;
        ws.n_ops = 1;
        ws.ops = ops;
        Keyload__V1__WriteSet *wss[1] = {&ws};
        Keyload__V1__LogEntry e = KEYLOAD__V1__LOG_ENTRY__INIT;
        e.index = i;
        e.term = 4;
        e.n_write_sets = 1;
        e.write_sets = wss;
        kl_store_log_item it = {.index = i, .bytes = buf, .len = keyload__v1__log_entry__pack(&e, buf)};
        ck_assert_int_eq(kl_store_log_write(st, NULL, 0, &it, 1, &err), KL_OK);
        ck_assert_int_eq(kl_store_apply(st, &e, &err), KL_OK);
    }
    free(val);
    free(buf);
}

/* Chunk bytes the queued frames carry (the pieces of type 8 data frames), freeing them. */
static uint64_t sw_drain_data_bytes(uint64_t *stream)
{
    uint64_t bytes = 0;
    while (wire.len > 0) {
        sw_frame fr = wire.q[wire.head];
        wire.head = (wire.head + 1) % SW_QMAX;
        wire.len--;
        Keyload__V1__RaftMessage *pm = keyload__v1__raft_message__unpack(NULL, fr.len, fr.bytes);
        ck_assert_ptr_nonnull(pm);
        if (pm->type == KL_SNAPWIRE_MSG_DATA && (pm->snap_flags & KL_SNAPWIRE_BEGIN))
            *stream = pm->snap_stream;
        else if (pm->type == KL_SNAPWIRE_MSG_DATA)
            bytes += pm->snap_piece.len;
        keyload__v1__raft_message__free_unpacked(pm, NULL);
        free(fr.bytes);
    }
    return bytes;
}

/* The window is bounded in bytes: with records of 3 MiB (one per chunk), a receiver that
 * acknowledges nothing has less than KL_SNAPWIRE_WINDOW_BYTES plus one chunk sent to it
 * (a window of 4 chunks held 9 MiB and more), and an acknowledgement lets the next go. */
START_TEST(snapwire_window_bounded_in_bytes)
{
    memset(&wire, 0, sizeof wire);
    char sdir[256];
    th_tmpdir(sdir, sizeof sdir);
    kl_store *src;
    kl_err err;
    ck_assert_int_eq(kl_store_open(sdir, NULL, &src, &err), KL_OK);
    enum { VLEN = 3 << 20 };
    sw_fill_big(src, 8, VLEN);
    kl_snapwire_io io = {.send = sw_send, .report = sw_report, .step = sw_step};
    kl_snapwire *l;
    ck_assert_int_eq(kl_snapwire_new(src, 1, 1u << 20, &io, &l, &err), KL_OK);
    kl_raft_msg m = {.type = KL_RAFT_MSG_SNAPSHOT, .from = 1, .to = 2, .term = 5,
                     .snap = {.index = 8, .term = 4,
                              .conf = {.members = {1, 2, 3}, .n_members = 3, .replica_count = 2}}};
    kl_snapwire_start(l, &m, 1000);
    uint64_t stream = 0;
    ck_assert_uint_eq(sw_drain_data_bytes(&stream), 0); /* the begin frame alone */
    ck_assert_uint_ne(stream, 0);
    Keyload__V1__RaftMessage a = KEYLOAD__V1__RAFT_MESSAGE__INIT;
    uint8_t digest[KL_SNAP_DIGEST_BYTES] = {0};
    a.type = KL_SNAPWIRE_MSG_ANSWER;
    a.from = 2;
    a.to = 1;
    a.term = 5;
    a.snap_stream = stream;
    a.snap_index = 8;
    a.snap_term = 4;
    a.snap_flags = KL_SNAPWIRE_RESUME; /* from chunk 0 */
    a.snap_digest.data = digest;
    a.snap_digest.len = sizeof digest;
    kl_snapwire_recv(l, 2, &a, 1001);
    uint64_t sent = sw_drain_data_bytes(&stream);
    ck_assert_uint_ge(sent, VLEN);
    ck_assert_uint_lt(sent, KL_SNAPWIRE_WINDOW_BYTES + VLEN + 4096);
    a.snap_flags = KL_SNAPWIRE_ACK; /* chunks 0 (the header) and 1 staged */
    a.snap_seq = 2;
    a.snap_digest.len = 0;
    kl_snapwire_recv(l, 2, &a, 1002);
    ck_assert_uint_ge(sw_drain_data_bytes(&stream), VLEN);
    ck_assert_int_eq(wire.reports, 0);
    kl_snapwire_free(l);
    kl_store_close(src);
    th_rmrf(sdir);
}
END_TEST

/* A stream that stops making progress is reported failed once, after the stall bound, and
 * one whose sender stops leading is reported at the next tick. */
START_TEST(snapwire_reports_stall_and_lost_leadership)
{
    memset(&wire, 0, sizeof wire);
    char sdir[256];
    th_tmpdir(sdir, sizeof sdir);
    kl_store *src;
    kl_err err;
    ck_assert_int_eq(kl_store_open(sdir, NULL, &src, &err), KL_OK);
    sw_fill(src, 10, 4);
    kl_snapwire_io io = {.send = sw_send, .report = sw_report, .step = sw_step};
    kl_snapwire *l;
    ck_assert_int_eq(kl_snapwire_new(src, 1, 8192, &io, &l, &err), KL_OK);
    kl_raft_msg m = {.type = KL_RAFT_MSG_SNAPSHOT, .from = 1, .to = 2, .term = 5,
                     .snap = {.index = 5, .term = 4,
                              .conf = {.members = {1, 2, 3}, .n_members = 3, .replica_count = 2}}};
    kl_snapwire_start(l, &m, 0);
    for (uint64_t t = 0; t <= KL_SNAPWIRE_STALL_MS; t += 500)
        kl_snapwire_tick(l, true, t); /* nobody answers: begin frames again and again */
    ck_assert_int_eq(wire.reports, 0);
    kl_snapwire_tick(l, true, KL_SNAPWIRE_STALL_MS + 501);
    ck_assert_int_eq(wire.reports, 1);
    ck_assert_int_eq(wire.reports_ok, 0);
    kl_snapwire_tick(l, true, KL_SNAPWIRE_STALL_MS + 2000);
    ck_assert_int_eq(wire.reports, 1); /* exactly once */
    kl_snapwire_start(l, &m, 100000);
    kl_snapwire_tick(l, false, 100050);
    ck_assert_int_eq(wire.reports, 2);
    while (wire.len > 0) {
        free(wire.q[wire.head].bytes);
        wire.head = (wire.head + 1) % SW_QMAX;
        wire.len--;
    }
    kl_snapwire_free(l);
    kl_store_close(src);
    th_rmrf(sdir);
}
END_TEST

Suite *suite_snapwire(void)
{
    Suite *s = suite_create("snapwire");
    TCase *t = tcase_create("snapwire");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, snapwire_streams_through_loss);
    tcase_add_test(t, snapwire_reports_stall_and_lost_leadership);
    tcase_add_test(t, snapwire_window_bounded_in_bytes);
    suite_add_tcase(s, t);
    return s;
}
