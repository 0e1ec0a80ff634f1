/* pb_arena: a message unpacked through the arena equals the one protobuf-c unpacks with
 * malloc, every allocation is aligned, a round larger than the kept block spills into
 * overflow blocks that the reset frees, the kept block then settles at the round's size but
 * never past its bound, and a failed unpack leaves the arena reusable. */
#include "common/pb_arena.h"
#include "keyload/v1/store.pb-c.h"

#include <check.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif
#include <stdalign.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An encoded LogEntry of `sets` write-sets with `ops` puts each (keys and values of a few
 * dozen bytes, as an enqueue's). *len is its size; the caller frees it. */
static uint8_t *encoded_entry(size_t sets, size_t ops, size_t *len)
{
    Keyload__V1__LogEntry e = KEYLOAD__V1__LOG_ENTRY__INIT;
    e.term = 3;
    e.index = 77;
    e.time_unix_ms = 1700000000000;
    e.n_write_sets = sets;
    e.write_sets = calloc(sets, sizeof *e.write_sets);
    ck_assert_ptr_nonnull(e.write_sets);
    static char principal[] = "benchpub";
    static uint8_t cmd[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    for (size_t i = 0; i < sets; i++) {
        Keyload__V1__WriteSet *w = calloc(1, sizeof *w);
        ck_assert_ptr_nonnull(w);
        keyload__v1__write_set__init(w);
        w->principal = principal;
        w->command_id = (ProtobufCBinaryData){.len = sizeof cmd, .data = cmd};
        w->n_ops = ops;
        w->ops = calloc(ops, sizeof *w->ops);
        ck_assert_ptr_nonnull(w->ops);
        for (size_t j = 0; j < ops; j++) {
            Keyload__V1__KvOp *op = calloc(1, sizeof *op);
            ck_assert_ptr_nonnull(op);
            keyload__v1__kv_op__init(op);
            char *k = malloc(32), *v = malloc(64);
            ck_assert(k != NULL && v != NULL);
            int kl = snprintf(k, 32, "G-key-%zu-%zu", i, j);
            memset(v, 'a' + (int)(j % 26), 64);
            op->key = (ProtobufCBinaryData){.len = (size_t)kl, .data = (uint8_t *)k};
            op->value = (ProtobufCBinaryData){.len = 40 + j % 24, .data = (uint8_t *)v};
            w->ops[j] = op;
        }
        e.write_sets[i] = w;
    }
    *len = keyload__v1__log_entry__get_packed_size(&e);
    uint8_t *buf = malloc(*len);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(keyload__v1__log_entry__pack(&e, buf), *len);
    for (size_t i = 0; i < sets; i++) {
        for (size_t j = 0; j < ops; j++) {
            free(e.write_sets[i]->ops[j]->key.data);
            free(e.write_sets[i]->ops[j]->value.data);
            free(e.write_sets[i]->ops[j]);
        }
        free(e.write_sets[i]->ops);
        free(e.write_sets[i]);
    }
    free(e.write_sets);
    return buf;
}

/* Repacks m and checks the bytes equal `want`. */
static void check_repacks_to(const Keyload__V1__LogEntry *m, const uint8_t *want, size_t len)
{
    ck_assert_uint_eq(keyload__v1__log_entry__get_packed_size(m), len);
    uint8_t *again = malloc(len);
    ck_assert_ptr_nonnull(again);
    keyload__v1__log_entry__pack(m, again);
    ck_assert_int_eq(memcmp(again, want, len), 0);
    free(again);
}

START_TEST(arena_decode_equals_malloc_decode)
{
    size_t len;
    uint8_t *bytes = encoded_entry(12, 5, &len);
    kl_pb_arena ar;
    kl_pb_arena_init(&ar, 1u << 20);
    for (int round = 0; round < 3; round++) {
        Keyload__V1__LogEntry *a = keyload__v1__log_entry__unpack(kl_pb_arena_allocator(&ar), len, bytes);
        Keyload__V1__LogEntry *m = keyload__v1__log_entry__unpack(NULL, len, bytes);
        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_nonnull(m);
        ck_assert_uint_eq(a->n_write_sets, 12);
        ck_assert_uint_eq(a->write_sets[11]->n_ops, 5);
        ck_assert_str_eq(a->write_sets[3]->principal, "benchpub");
        ck_assert_int_eq(memcmp(a->write_sets[4]->ops[2]->key.data, m->write_sets[4]->ops[2]->key.data,
                                m->write_sets[4]->ops[2]->key.len), 0);
        check_repacks_to(a, bytes, len);
        check_repacks_to(m, bytes, len);
        /* every pointer the decode holds came from the arena and is aligned for any type */
        ck_assert_uint_eq((uintptr_t)a % alignof(max_align_t), 0);
        ck_assert_uint_eq((uintptr_t)a->write_sets % alignof(max_align_t), 0);
        ck_assert_uint_eq((uintptr_t)a->write_sets[7]->ops[3] % alignof(max_align_t), 0);
        keyload__v1__log_entry__free_unpacked(m, NULL);
        kl_pb_arena_reset(&ar);
        ck_assert_uint_eq(ar.used, 0);
    }
    kl_pb_arena_fini(&ar);
    free(bytes);
}
END_TEST

START_TEST(overflow_is_freed_and_kept_block_settles)
{
    size_t len;
    uint8_t *bytes = encoded_entry(40, 8, &len); /* decodes to well over the first 4 KiB */
    kl_pb_arena ar;
    kl_pb_arena_init(&ar, 1u << 20);
    Keyload__V1__LogEntry *a = keyload__v1__log_entry__unpack(kl_pb_arena_allocator(&ar), len, bytes);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(ar.overflow); /* the first round did not fit the first block */
    size_t round = ar.round_bytes;
    ck_assert_uint_gt(round, ar.kept_cap);
    check_repacks_to(a, bytes, len);
    kl_pb_arena_reset(&ar);
    ck_assert_ptr_null(ar.overflow);
    ck_assert_uint_eq(ar.kept_cap, round); /* regrown to what the round needed */
    /* the same message again fits the kept block: no overflow, nothing more from malloc */
    a = keyload__v1__log_entry__unpack(kl_pb_arena_allocator(&ar), len, bytes);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_null(ar.overflow);
    check_repacks_to(a, bytes, len);
    kl_pb_arena_reset(&ar);
    kl_pb_arena_fini(&ar);
    ck_assert_ptr_null(ar.kept);
    free(bytes);
}
END_TEST

START_TEST(kept_block_never_passes_its_bound)
{
    size_t len;
    uint8_t *bytes = encoded_entry(40, 8, &len);
    kl_pb_arena ar;
    kl_pb_arena_init(&ar, 2048); /* smaller than the first block and than the round */
    for (int round = 0; round < 4; round++) {
        Keyload__V1__LogEntry *a = keyload__v1__log_entry__unpack(kl_pb_arena_allocator(&ar), len, bytes);
        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_nonnull(ar.overflow); /* the round can never fit 2 KiB */
        check_repacks_to(a, bytes, len);
        kl_pb_arena_reset(&ar);
        ck_assert_ptr_null(ar.overflow);
        ck_assert_uint_le(ar.kept_cap, 2048);
    }
    kl_pb_arena_fini(&ar);
    free(bytes);
}
END_TEST

START_TEST(failed_unpack_leaves_arena_reusable)
{
    size_t len;
    uint8_t *bytes = encoded_entry(6, 4, &len);
    kl_pb_arena ar;
    kl_pb_arena_init(&ar, 1u << 20);
    /* cut inside a nested message: the decode fails after allocating part of it */
    ck_assert_ptr_null(keyload__v1__log_entry__unpack(kl_pb_arena_allocator(&ar), len - 7, bytes));
    kl_pb_arena_reset(&ar);
    Keyload__V1__LogEntry *a = keyload__v1__log_entry__unpack(kl_pb_arena_allocator(&ar), len, bytes);
    ck_assert_ptr_nonnull(a);
    check_repacks_to(a, bytes, len);
    kl_pb_arena_reset(&ar);
    kl_pb_arena_fini(&ar);
    free(bytes);
}
END_TEST

#if defined(__SANITIZE_ADDRESS__)
/* A decode read after its reset is caught (the kept block is poisoned again). */
START_TEST(read_after_reset_is_caught)
{
    size_t len;
    uint8_t *bytes = encoded_entry(2, 2, &len);
    kl_pb_arena ar;
    kl_pb_arena_init(&ar, 1u << 20);
    Keyload__V1__LogEntry *a = keyload__v1__log_entry__unpack(kl_pb_arena_allocator(&ar), len, bytes);
    ck_assert_ptr_nonnull(a);
    kl_pb_arena_reset(&ar);
    ck_assert(__asan_address_is_poisoned(&a->index));
    ck_assert(__asan_address_is_poisoned(ar.kept));
    kl_pb_arena_fini(&ar);
    free(bytes);
}
END_TEST
#endif

Suite *suite_pb_arena(void)
{
    Suite *s = suite_create("pb_arena");
    TCase *t = tcase_create("pb_arena");
    tcase_add_test(t, arena_decode_equals_malloc_decode);
    tcase_add_test(t, overflow_is_freed_and_kept_block_settles);
    tcase_add_test(t, kept_block_never_passes_its_bound);
    tcase_add_test(t, failed_unpack_leaves_arena_reusable);
#if defined(__SANITIZE_ADDRESS__)
    tcase_add_test(t, read_after_reset_is_caught);
#endif
    suite_add_tcase(s, t);
    return s;
}
