/* overlay: the pending set's merge (absorb) keeps order and the newest value, reuses its two
 * arrays across batches, gives large arrays back once empty, and keeps a write's key and
 * value in one block. */
#include "daemon/engine/overlay.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

static void set_key(kl_overlay *o, unsigned k, unsigned v)
{
    char key[16], val[16];
    snprintf(key, sizeof key, "k%06u", k);
    snprintf(val, sizeof val, "v%u", v);
    kl_err err;
    ck_assert_int_eq(kl_overlay_set(o, (const uint8_t *)key, strlen(key), (const uint8_t *)val,
                                    strlen(val), false, 0, &err), KL_OK);
}

static void check_sorted(const kl_overlay *o)
{
    for (size_t i = 1; i < o->n; i++)
        ck_assert_int_lt(kl_key_compare(o->v[i - 1].key, o->v[i - 1].klen, o->v[i].key, o->v[i].klen), 0);
}

START_TEST(absorb_keeps_order_and_newest_value)
{
    kl_overlay pending, scratch;
    kl_overlay_init(&pending);
    kl_overlay_init(&scratch);
    kl_err err;
    for (unsigned batch = 1; batch <= 200; batch++) {
        /* each batch writes two new keys and rewrites one an earlier batch wrote */
        set_key(&scratch, 1000 + 2 * batch, batch);
        set_key(&scratch, 1001 + 2 * batch, batch);
        set_key(&scratch, batch / 2, batch);
        ck_assert_int_eq(kl_overlay_absorb(&pending, &scratch, batch, &err), KL_OK);
        ck_assert_uint_eq(scratch.n, 0);
        check_sorted(&pending);
    }
    const char *k = "k000050";
    const kl_ov_entry *e = kl_overlay_find(&pending, (const uint8_t *)k, strlen(k));
    ck_assert_ptr_nonnull(e);
    ck_assert_uint_eq(e->owner, 101); /* batches 100 and 101 both wrote key 50; 101 is newer */
    ck_assert_int_eq(memcmp(e->val, "v101", 4), 0);
    ck_assert_uint_eq(pending.n, 400 + 101);
    kl_overlay_drop_upto(&pending, 150);
    check_sorted(&pending);
    for (size_t i = 0; i < pending.n; i++)
        ck_assert_uint_gt(pending.v[i].owner, 150);
    kl_overlay_free(&pending);
    kl_overlay_free(&scratch);
}
END_TEST

/* In steady state (the pending set neither grows nor shrinks) absorb allocates nothing: the
 * merge target is the array the previous absorb left, so only two arrays ever take turns. */
START_TEST(absorb_reuses_its_two_arrays)
{
    kl_overlay pending, scratch;
    kl_overlay_init(&pending);
    kl_overlay_init(&scratch);
    kl_err err;
    unsigned next = 0;
    for (unsigned batch = 1; batch <= 64; batch++) {
        set_key(&scratch, next++, batch);
        ck_assert_int_eq(kl_overlay_absorb(&pending, &scratch, batch, &err), KL_OK);
    }
    void *a = pending.v, *b = pending.spare;
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    for (unsigned batch = 65; batch <= 1000; batch++) {
        kl_overlay_drop_upto(&pending, batch - 64); /* the oldest batch applied */
        set_key(&scratch, next++, batch);
        ck_assert_int_eq(kl_overlay_absorb(&pending, &scratch, batch, &err), KL_OK);
        ck_assert_msg((pending.v == a && pending.spare == b) || (pending.v == b && pending.spare == a),
                      "batch %u: absorb allocated a new array", batch);
        ck_assert_uint_eq(pending.n, 64);
    }
    kl_overlay_free(&pending);
    kl_overlay_free(&scratch);
}
END_TEST

START_TEST(large_arrays_released_when_empty)
{
    kl_overlay pending, scratch;
    kl_overlay_init(&pending);
    kl_overlay_init(&scratch);
    kl_err err;
    for (unsigned i = 0; i < 2 * KL_OVERLAY_KEEP_CAP; i++)
        set_key(&scratch, i, 1);
    ck_assert_int_eq(kl_overlay_absorb(&pending, &scratch, 1, &err), KL_OK);
    ck_assert_uint_gt(pending.cap, KL_OVERLAY_KEEP_CAP);
    kl_overlay_drop_upto(&pending, 1);
    ck_assert_uint_eq(pending.n, 0);
    ck_assert_ptr_null(pending.v);
    ck_assert_uint_eq(pending.cap, 0);
    ck_assert_uint_eq(pending.spare_cap, 0);
    /* usable again afterwards */
    set_key(&scratch, 7, 2);
    ck_assert_int_eq(kl_overlay_absorb(&pending, &scratch, 2, &err), KL_OK);
    ck_assert_uint_eq(pending.n, 1);
    /* a small one keeps its arrays */
    kl_overlay_drop_upto(&pending, 2);
    ck_assert_ptr_nonnull(pending.v);
    kl_overlay_free(&pending);
    kl_overlay_free(&scratch);
}
END_TEST

/* A write's key and value share one block, the value right after the key; a tombstone has
 * none, and replacing a key keeps the layout (the old block is freed whole). */
START_TEST(key_and_value_share_one_block)
{
    kl_overlay o;
    kl_overlay_init(&o);
    kl_err err;
    set_key(&o, 7, 1);
    set_key(&o, 7, 22);
    ck_assert_int_eq(kl_overlay_set(&o, (const uint8_t *)"gone", 4, NULL, 0, true, 0, &err), KL_OK);
    const kl_ov_entry *e = kl_overlay_find(&o, (const uint8_t *)"k000007", 7);
    ck_assert_ptr_nonnull(e);
    ck_assert_ptr_eq(e->val, e->key + e->klen);
    ck_assert_uint_eq(e->vlen, 3);
    ck_assert_int_eq(memcmp(e->val, "v22", 3), 0);
    const kl_ov_entry *t = kl_overlay_find(&o, (const uint8_t *)"gone", 4);
    ck_assert_ptr_nonnull(t);
    ck_assert(t->del);
    ck_assert_ptr_null(t->val);
    ck_assert_uint_eq(o.bytes, 7 + 3 + 4);
    kl_overlay_free(&o);
}
END_TEST

Suite *suite_overlay(void)
{
    Suite *s = suite_create("overlay");
    TCase *t = tcase_create("overlay");
    tcase_add_test(t, absorb_keeps_order_and_newest_value);
    tcase_add_test(t, absorb_reuses_its_two_arrays);
    tcase_add_test(t, large_arrays_released_when_empty);
    tcase_add_test(t, key_and_value_share_one_block);
    suite_add_tcase(s, t);
    return s;
}
