/* The SDK's member table (client/sdk/member_table.h), pure logic: seeded from a partition of
 * the cluster file, grown from Members answers (deduplicated by identity, bounded, refused
 * by name when full), never rolled back by an older configuration, rate-limited sub-steps,
 * shared per cluster file, and append-only under concurrent learners. Then the call path
 * against scripted members (real kl_rpc_servers on loopback) that the cluster file does not
 * all name: a NOT_LEADER naming an unknown leader, and a round where no known member
 * serves, each reach the leader through a Members sub-step; a success after a dead member
 * refreshes the members once. */
#include "client/keyload.h"
#include "client/sdk/member_table.h"
#include "common/rpc.h"
#include "tests/unit/harness.h"
#include "tests/unit/ports.h"

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

/* A partition of n members p<pid>m1.. at tcp://127.0.0.1:<base + i>, each with a key. */
static kl_partition *partition_new(int pid, int n, int base)
{
    kl_partition *p = calloc(1, sizeof *p);
    ck_assert_ptr_nonnull(p);
    p->id = pid;
    p->member_count = n;
    for (int i = 0; i < n; i++) {
        p->members[i].id = i + 1;
        snprintf(p->members[i].client_url, sizeof p->members[i].client_url, "tcp://127.0.0.1:%d", base + i);
        p->members[i].has_public_key = true;
        memset(p->members[i].public_key, i + 1, sizeof p->members[i].public_key);
    }
    return p;
}

/* A Members answer under construction: voters and directory entries with keys k. */
typedef struct answer_fx {
    Keyload__V1__MembersAnswer a;
    uint64_t voters[64];
    Keyload__V1__MemberInfo infos[64];
    Keyload__V1__MemberInfo *ptrs[64];
    char urls[64][64];
    uint8_t keys[64][32];
} answer_fx;

static void fx_init(answer_fx *f, uint64_t conf_index)
{
    memset(f, 0, sizeof *f);
    keyload__v1__members_answer__init(&f->a);
    f->a.conf_index = conf_index;
    f->a.committed = true;
    f->a.voters = f->voters;
    f->a.directory = f->ptrs;
}

/* Adds member id at port, a voter (in the configuration) or only in the directory. key_byte
 * 0: no key; key_len other than 32 (with key_byte) makes a malformed key. */
static void fx_add(answer_fx *f, uint64_t id, int port, int key_byte, size_t key_len, bool voter)
{
    size_t k = f->a.n_directory++;
    keyload__v1__member_info__init(&f->infos[k]);
    f->infos[k].id = id;
    snprintf(f->urls[k], sizeof f->urls[k], "tcp://127.0.0.1:%d", port);
    f->infos[k].client_url = f->urls[k];
    f->infos[k].peer_url = f->urls[k];
    if (key_byte != 0) {
        memset(f->keys[k], key_byte, sizeof f->keys[k]);
        f->infos[k].public_key.data = f->keys[k];
        f->infos[k].public_key.len = key_len;
    }
    f->ptrs[k] = &f->infos[k];
    if (voter)
        f->voters[f->a.n_voters++] = id;
}

static int current_count(const kl_sdk_members *t)
{
    int n = 0;
    for (int i = 0; i < kl_sdk_members_count(t); i++)
        n += kl_sdk_members_is_current(t, i);
    return n;
}

START_TEST(seeded_from_the_cluster_file)
{
    kl_sdk_members t;
    kl_err err;
    ck_assert_int_eq(kl_sdk_members_init(&t, 1, &err), KL_OK);
    kl_partition *p = partition_new(1, 3, 7000);
    ck_assert_int_eq(kl_sdk_members_seed(&t, p, &err), KL_OK);
    ck_assert_int_eq(kl_sdk_members_count(&t), 3);
    ck_assert_int_eq(current_count(&t), 3);
    ck_assert_int_eq(kl_sdk_members_find_url(&t, "tcp://127.0.0.1:7001"), 1);
    ck_assert_int_eq(kl_sdk_members_find_url(&t, "tcp://127.0.0.1:7009"), -1);
    ck_assert_int_eq(kl_sdk_members_find_url(&t, ""), -1);
    ck_assert_int_eq(kl_sdk_members_find_id(&t, 3), 2);
    ck_assert(!kl_sdk_members_at(&t, 0)->learned);
    ck_assert(kl_sdk_members_at(&t, 0)->has_public_key);
    free(p);
    kl_sdk_members_destroy(&t);
}
END_TEST

START_TEST(learns_new_members_once_and_retires_removed_ones)
{
    kl_sdk_members t;
    kl_err err;
    kl_sdk_members_init(&t, 1, &err);
    kl_partition *p = partition_new(1, 3, 7000);
    kl_sdk_members_seed(&t, p, &err);
    /* {2, 3, 4}: member 1 removed, member 4 joined on a new URL. */
    answer_fx f;
    fx_init(&f, 12);
    fx_add(&f, 2, 7001, 2, 32, true);
    fx_add(&f, 3, 7002, 3, 32, true);
    fx_add(&f, 4, 7100, 4, 32, true);
    int added = -1;
    uint64_t g0 = kl_sdk_members_generation(&t);
    ck_assert_int_eq(kl_sdk_members_learn(&t, &f.a, true, &added, &err), KL_OK);
    ck_assert_int_eq(added, 1);
    ck_assert_int_eq(kl_sdk_members_count(&t), 4);
    ck_assert(kl_sdk_members_generation(&t) != g0);
    ck_assert(!kl_sdk_members_is_current(&t, 0)); /* member 1 */
    ck_assert(kl_sdk_members_is_current(&t, 1) && kl_sdk_members_is_current(&t, 2));
    ck_assert(kl_sdk_members_is_current(&t, 3));
    const kl_sdk_member *m4 = kl_sdk_members_at(&t, 3);
    ck_assert_uint_eq(m4->id, 4);
    ck_assert_str_eq(m4->client_url, "tcp://127.0.0.1:7100");
    ck_assert(m4->learned && m4->has_public_key && m4->public_key[0] == 4);
    ck_assert_int_eq(kl_sdk_members_find_url(&t, "tcp://127.0.0.1:7100"), 3);
    /* The same answer again: nothing new, the generation stays. */
    uint64_t g1 = kl_sdk_members_generation(&t);
    ck_assert_int_eq(kl_sdk_members_learn(&t, &f.a, true, &added, &err), KL_OK);
    ck_assert_int_eq(added, 0);
    ck_assert_int_eq(kl_sdk_members_count(&t), 4);
    ck_assert_uint_eq(kl_sdk_members_generation(&t), g1);
    free(p);
    kl_sdk_members_destroy(&t);
}
END_TEST

/* {1, 2, 4} where members 1 and 2 (seed members) come without a client address or key:
 * their slots from the cluster file stay current beside the new member 4, so the client
 * still reaches them when 4 dies (it used to route to 4 alone). Member 3 is retired. */
START_TEST(voters_without_a_usable_entry_keep_their_slots)
{
    kl_sdk_members t;
    kl_err err;
    kl_sdk_members_init(&t, 1, &err);
    kl_partition *p = partition_new(1, 3, 7000);
    kl_sdk_members_seed(&t, p, &err);
    answer_fx f;
    fx_init(&f, 12);
    fx_add(&f, 1, 7000, 0, 0, true);
    fx_add(&f, 2, 7001, 0, 0, true);
    fx_add(&f, 4, 7100, 4, 32, true);
    f.infos[0].client_url = "";
    f.infos[1].client_url = "";
    int added = -1;
    ck_assert_int_eq(kl_sdk_members_learn(&t, &f.a, true, &added, &err), KL_OK);
    ck_assert_int_eq(added, 1);
    ck_assert_int_eq(kl_sdk_members_count(&t), 4);
    ck_assert(kl_sdk_members_is_current(&t, 0) && kl_sdk_members_is_current(&t, 1));
    ck_assert(!kl_sdk_members_is_current(&t, 2)); /* member 3 left */
    ck_assert(kl_sdk_members_is_current(&t, 3));
    ck_assert_int_eq(current_count(&t), 3);
    /* Later, {1, 2, 5}: 4 replaced by 5, the seed members still without addresses. */
    fx_init(&f, 20);
    fx_add(&f, 1, 7000, 0, 0, true);
    fx_add(&f, 2, 7001, 0, 0, true);
    fx_add(&f, 5, 7101, 5, 32, true);
    f.infos[0].client_url = "";
    f.infos[1].client_url = "";
    ck_assert_int_eq(kl_sdk_members_learn(&t, &f.a, true, &added, &err), KL_OK);
    ck_assert(kl_sdk_members_is_current(&t, 0) && kl_sdk_members_is_current(&t, 1));
    ck_assert(!kl_sdk_members_is_current(&t, 3));
    ck_assert(kl_sdk_members_is_current(&t, 4));
    ck_assert_int_eq(current_count(&t), 3);
    free(p);
    kl_sdk_members_destroy(&t);
}
END_TEST

START_TEST(an_older_configuration_changes_nothing)
{
    kl_sdk_members t;
    kl_err err;
    kl_sdk_members_init(&t, 1, &err);
    kl_partition *p = partition_new(1, 3, 7000);
    kl_sdk_members_seed(&t, p, &err);
    answer_fx f;
    fx_init(&f, 20);
    fx_add(&f, 2, 7001, 2, 32, true);
    fx_add(&f, 4, 7100, 4, 32, true);
    int added;
    ck_assert_int_eq(kl_sdk_members_learn(&t, &f.a, true, &added, &err), KL_OK);
    uint64_t g = kl_sdk_members_generation(&t);
    answer_fx old;
    fx_init(&old, 19); /* a lagging member still on {1, 2, 3, 9} */
    fx_add(&old, 1, 7000, 1, 32, true);
    fx_add(&old, 9, 7200, 9, 32, true);
    ck_assert_int_eq(kl_sdk_members_learn(&t, &old.a, true, &added, &err), KL_OK);
    ck_assert_int_eq(added, 0);
    ck_assert_int_eq(kl_sdk_members_count(&t), 4);
    ck_assert_uint_eq(kl_sdk_members_generation(&t), g);
    ck_assert(!kl_sdk_members_is_current(&t, 0));
    ck_assert_int_eq(kl_sdk_members_find_id(&t, 9), -1);
    free(p);
    kl_sdk_members_destroy(&t);
}
END_TEST

/* A deposed leader's uncommitted configuration is learned but holds nothing off: the new
 * leader may truncate it and commit another one at a lower index. */
START_TEST(an_uncommitted_configuration_does_not_block_a_committed_one)
{
    kl_sdk_members t;
    kl_err err;
    kl_sdk_members_init(&t, 1, &err);
    kl_partition *p = partition_new(1, 3, 7000);
    kl_sdk_members_seed(&t, p, &err);
    answer_fx dep;
    fx_init(&dep, 25);
    dep.a.committed = false;
    fx_add(&dep, 1, 7000, 1, 32, true);
    fx_add(&dep, 6, 7400, 6, 32, true);
    int added;
    ck_assert_int_eq(kl_sdk_members_learn(&t, &dep.a, true, &added, &err), KL_OK);
    ck_assert_int_eq(added, 1);
    answer_fx real;
    fx_init(&real, 24);
    fx_add(&real, 2, 7001, 2, 32, true);
    fx_add(&real, 3, 7002, 3, 32, true);
    fx_add(&real, 7, 7500, 7, 32, true);
    ck_assert_int_eq(kl_sdk_members_learn(&t, &real.a, true, &added, &err), KL_OK);
    ck_assert_int_eq(added, 1);
    ck_assert(kl_sdk_members_is_current(&t, kl_sdk_members_find_id(&t, 7)));
    ck_assert(!kl_sdk_members_is_current(&t, kl_sdk_members_find_id(&t, 6)));
    ck_assert(!kl_sdk_members_is_current(&t, 0));
    /* Committed at 24: the deposed view at 23 is too old, and a lagging member's committed
     * view at 22 too. */
    dep.a.conf_index = 23;
    ck_assert_int_eq(kl_sdk_members_learn(&t, &dep.a, true, &added, &err), KL_OK);
    ck_assert(kl_sdk_members_is_current(&t, kl_sdk_members_find_id(&t, 7)));
    answer_fx lag;
    fx_init(&lag, 22);
    fx_add(&lag, 1, 7000, 1, 32, true);
    fx_add(&lag, 2, 7001, 2, 32, true);
    ck_assert_int_eq(kl_sdk_members_learn(&t, &lag.a, true, &added, &err), KL_OK);
    ck_assert(kl_sdk_members_is_current(&t, kl_sdk_members_find_id(&t, 7)));
    ck_assert(!kl_sdk_members_is_current(&t, 0));
    free(p);
    kl_sdk_members_destroy(&t);
}
END_TEST

START_TEST(unusable_entries_are_refused)
{
    kl_sdk_members t;
    kl_err err;
    kl_sdk_members_init(&t, 1, &err);
    answer_fx f;
    fx_init(&f, 3);
    fx_add(&f, 5, 7300, 0, 0, true);   /* no key */
    fx_add(&f, 6, 7301, 6, 31, true);  /* a key of 31 bytes */
    fx_add(&f, 7, 7302, 7, 32, false); /* not in the configuration */
    fx_add(&f, 8, 7303, 8, 32, true);
    int added;
    ck_assert_int_eq(kl_sdk_members_learn(&t, &f.a, true, &added, &err), KL_OK);
    ck_assert_int_eq(added, 1);
    ck_assert_uint_eq(kl_sdk_members_at(&t, 0)->id, 8);
    /* Without sessions a member without a key is usable; the malformed key never is. */
    ck_assert_int_eq(kl_sdk_members_learn(&t, &f.a, false, &added, &err), KL_OK);
    ck_assert_int_eq(added, 1);
    ck_assert_int_eq(kl_sdk_members_find_id(&t, 5), 1);
    ck_assert(!kl_sdk_members_at(&t, 1)->has_public_key);
    ck_assert_int_eq(kl_sdk_members_find_id(&t, 6), -1);
    ck_assert_int_eq(kl_sdk_members_find_id(&t, 7), -1);
    /* No voter, or no usable member of the configuration: refused by name, nothing changes. */
    answer_fx none;
    fx_init(&none, 4);
    ck_assert_int_eq(kl_sdk_members_learn(&t, &none.a, true, &added, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "voters");
    fx_add(&none, 5, 7300, 0, 0, true);
    ck_assert_int_eq(kl_sdk_members_learn(&t, &none.a, true, &added, &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "directory");
    ck_assert_int_eq(current_count(&t), 2);
    kl_sdk_members_destroy(&t);
}
END_TEST

START_TEST(a_new_identity_at_an_old_address_gets_its_own_slot)
{
    kl_sdk_members t;
    kl_err err;
    kl_sdk_members_init(&t, 1, &err);
    kl_partition *p = partition_new(1, 3, 7000);
    kl_sdk_members_seed(&t, p, &err);
    answer_fx f; /* member 3 replaced by member 5 (new key) on member 3's address */
    fx_init(&f, 30);
    fx_add(&f, 1, 7000, 1, 32, true);
    fx_add(&f, 2, 7001, 2, 32, true);
    fx_add(&f, 5, 7002, 5, 32, true);
    int added;
    ck_assert_int_eq(kl_sdk_members_learn(&t, &f.a, true, &added, &err), KL_OK);
    ck_assert_int_eq(added, 1);
    ck_assert_int_eq(kl_sdk_members_count(&t), 4);
    ck_assert_int_eq(kl_sdk_members_find_url(&t, "tcp://127.0.0.1:7002"), 3); /* the current one */
    ck_assert_uint_eq(kl_sdk_members_at(&t, 2)->id, 3);                       /* untouched */
    ck_assert(!kl_sdk_members_is_current(&t, 2));
    /* The same id and URL with another key is another identity too. */
    answer_fx g;
    fx_init(&g, 31);
    fx_add(&g, 5, 7002, 6, 32, true);
    ck_assert_int_eq(kl_sdk_members_learn(&t, &g.a, true, &added, &err), KL_OK);
    ck_assert_int_eq(added, 1);
    ck_assert_int_eq(kl_sdk_members_find_id(&t, 5), 4);
    free(p);
    kl_sdk_members_destroy(&t);
}
END_TEST

START_TEST(a_full_table_refuses_by_name_and_keeps_its_slots)
{
    kl_sdk_members t;
    kl_err err;
    kl_sdk_members_init(&t, 2, &err);
    kl_partition *p = partition_new(2, 3, 7000);
    kl_sdk_members_seed(&t, p, &err);
    int added, total = 3;
    uint64_t id = 10;
    for (uint64_t conf = 1; total < KL_SDK_MEMBERS_MAX; conf++) {
        answer_fx f;
        fx_init(&f, conf);
        for (int k = 0; k < 3 && total < KL_SDK_MEMBERS_MAX; k++, total++, id++)
            fx_add(&f, id, 8000 + (int)id, (int)(id & 0x7f) + 1, 32, true);
        ck_assert_int_eq(kl_sdk_members_learn(&t, &f.a, true, &added, &err), KL_OK);
    }
    ck_assert_int_eq(kl_sdk_members_count(&t), KL_SDK_MEMBERS_MAX);
    kl_sdk_member before = *kl_sdk_members_at(&t, 5);
    answer_fx f;
    fx_init(&f, 1000);
    fx_add(&f, id - 1, 8000 + (int)(id - 1), (int)((id - 1) & 0x7f) + 1, 32, true); /* known */
    fx_add(&f, 500, 9500, 9, 32, true);                                             /* no room */
    kl_code rc = kl_sdk_members_learn(&t, &f.a, true, &added, &err);
    ck_assert_int_eq(rc, KL_RESOURCE_EXHAUSTED);
    ck_assert_str_eq(err.detail, "members_max");
    ck_assert_int_eq(added, 0);
    ck_assert_int_eq(kl_sdk_members_count(&t), KL_SDK_MEMBERS_MAX);
    ck_assert_int_eq(kl_sdk_members_find_id(&t, 500), -1);
    ck_assert_int_eq(memcmp(&before, kl_sdk_members_at(&t, 5), sizeof before), 0);
    /* What did fit is still learned: the known member is the one current slot. */
    ck_assert_int_eq(current_count(&t), 1);
    ck_assert(kl_sdk_members_is_current(&t, KL_SDK_MEMBERS_MAX - 1));
    free(p);
    kl_sdk_members_destroy(&t);
}
END_TEST

START_TEST(sub_steps_are_rate_limited)
{
    kl_sdk_members t;
    kl_err err;
    kl_sdk_members_init(&t, 0, &err);
    ck_assert(kl_sdk_members_learn_due(&t, 100000));
    ck_assert(!kl_sdk_members_learn_due(&t, 100000));
    ck_assert(!kl_sdk_members_learn_due(&t, 100000 + KL_SDK_LEARN_INTERVAL_MS - 1));
    ck_assert(kl_sdk_members_learn_due(&t, 100000 + KL_SDK_LEARN_INTERVAL_MS));
    kl_sdk_members_destroy(&t);
}
END_TEST

START_TEST(tables_are_shared_per_cluster_file_and_kind_of_client)
{
    kl_cluster *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    ck_assert(a != NULL && b != NULL);
    snprintf(a->name, sizeof a->name, "shared-fx");
    a->partition_count = 1;
    kl_partition *p = partition_new(0, 3, 7000);
    a->partitions[0] = *p;
    *b = *a;
    kl_sdk_member_tables *t1 = kl_sdk_member_tables_acquire(a, true);
    kl_sdk_member_tables *t2 = kl_sdk_member_tables_acquire(a, true);
    ck_assert_ptr_nonnull(t1);
    ck_assert_ptr_eq(t1, t2);
    kl_sdk_member_tables *open = kl_sdk_member_tables_acquire(a, false); /* unauthenticated learners */
    ck_assert_ptr_nonnull(open);
    ck_assert_ptr_ne(open, t1);
    kl_sdk_member_tables_release(open);
    snprintf(b->partitions[0].members[2].client_url, KL_URL_MAX, "tcp://127.0.0.1:7777");
    kl_sdk_member_tables *t3 = kl_sdk_member_tables_acquire(b, true); /* same name, other members */
    ck_assert_ptr_nonnull(t3);
    ck_assert_ptr_ne(t1, t3);
    ck_assert_int_eq(kl_sdk_members_count(kl_sdk_member_tables_at(t1, 0)), 3);
    ck_assert_int_eq(kl_sdk_members_find_url(kl_sdk_member_tables_at(t3, 0), "tcp://127.0.0.1:7777"), 2);
    kl_sdk_member_tables_release(t3);
    kl_sdk_member_tables_release(t2);
    kl_sdk_member_tables_release(t1);
    free(p);
    free(a);
    free(b);
}
END_TEST

/* Learners race to add distinct members while readers walk the published slots: every
 * member lands once, slots never change under a reader, and the count never passes the cap. */
typedef struct race {
    kl_sdk_members *t;
    int who;
    _Atomic bool stop;
    _Atomic int bad;
} race;

static race races[4];

static void *learner(void *arg)
{
    race *r = arg;
    for (int k = 0; k < 12; k++) {
        answer_fx f;
        fx_init(&f, 1);
        uint64_t id = 100 + (uint64_t)r->who * 100 + (uint64_t)k;
        fx_add(&f, id, 10000 + (int)id, r->who + 1, 32, true);
        int added;
        kl_err err;
        kl_code rc = kl_sdk_members_learn(r->t, &f.a, true, &added, &err);
        if (rc != KL_OK && rc != KL_RESOURCE_EXHAUSTED)
            atomic_fetch_add(&r->bad, 1);
    }
    return NULL;
}

static void *reader(void *arg)
{
    race *r = arg;
    while (!atomic_load(&r->stop)) {
        int n = kl_sdk_members_count(r->t);
        if (n > KL_SDK_MEMBERS_MAX)
            atomic_fetch_add(&r->bad, 1);
        for (int i = 0; i < n; i++) {
            const kl_sdk_member *m = kl_sdk_members_at(r->t, i);
            char want[64];
            snprintf(want, sizeof want, "tcp://127.0.0.1:%d", 10000 + (int)m->id);
            if (m->id < 100 || strcmp(m->client_url, want) != 0)
                atomic_fetch_add(&r->bad, 1);
        }
    }
    return NULL;
}

START_TEST(concurrent_learners_append_each_member_once)
{
    kl_sdk_members t;
    kl_err err;
    kl_sdk_members_init(&t, 3, &err);
    pthread_t th[5];
    for (int i = 0; i < 4; i++) {
        races[i].t = &t;
        races[i].who = i;
        atomic_store(&races[i].stop, false);
        atomic_store(&races[i].bad, 0);
    }
    pthread_create(&th[4], NULL, reader, &races[0]);
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, learner, &races[i]);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    atomic_store(&races[0].stop, true);
    pthread_join(th[4], NULL);
    int bad = 0;
    for (int i = 0; i < 4; i++)
        bad += atomic_load(&races[i].bad);
    ck_assert_int_eq(bad, 0);
    /* 48 distinct members offered, 32 fit; each id at most once. */
    ck_assert_int_eq(kl_sdk_members_count(&t), KL_SDK_MEMBERS_MAX);
    for (int i = 0; i < KL_SDK_MEMBERS_MAX; i++)
        for (int j = i + 1; j < KL_SDK_MEMBERS_MAX; j++)
            ck_assert_uint_ne(kl_sdk_members_at(&t, i)->id, kl_sdk_members_at(&t, j)->id);
    kl_sdk_members_destroy(&t);
}
END_TEST

/* ---- the call path against scripted members ---- */

enum { SM_LEADS, SM_FOLLOWS, SM_UNAVAILABLE };

typedef struct smember {
    uv_loop_t loop;
    uv_async_t ctl;
    pthread_t thread;
    kl_rpc_server *srv;
    char url[64];
    uint64_t id;
    int mode;
    const char *hint;      /* SM_FOLLOWS: the leader URL it names */
    /* What it answers Members: voters and directory (ids and URLs), the leader's id. */
    int n_dir;
    uint64_t dir_id[4];
    const char *dir_url[4];
    uint64_t leader;
    atomic_int batches, members;
} smember;

static smember sm[3];

static void sm_batch(void *owner, kl_rpc_call *call)
{
    smember *m = owner;
    atomic_fetch_add(&m->batches, 1);
    kl_err e;
    if (m->mode == SM_FOLLOWS) {
        kl_fail(&e, KL_NOT_LEADER, "not_leader", "this member does not lead partition 0 now");
        kl_rpc_reply_error(call, &e, m->hint);
        return;
    }
    if (m->mode == SM_UNAVAILABLE) {
        kl_fail(&e, KL_UNAVAILABLE, "leader_not_ready", "this member cannot commit yet; retry");
        kl_rpc_reply_error(call, &e, NULL);
        return;
    }
    size_t len;
    const uint8_t *p = kl_rpc_call_payload(call, &len);
    Keyload__V1__BatchRequest *b = keyload__v1__batch_request__unpack(NULL, len, p);
    Keyload__V1__BatchReceipt r = KEYLOAD__V1__BATCH_RECEIPT__INIT;
    r.command_id = b->command_id;
    r.index = 9;
    uint8_t buf[256];
    size_t n = keyload__v1__batch_receipt__pack(&r, buf);
    keyload__v1__batch_request__free_unpacked(b, NULL);
    kl_rpc_reply(call, buf, n);
}

static void sm_members(void *owner, kl_rpc_call *call)
{
    smember *m = owner;
    atomic_fetch_add(&m->members, 1);
    Keyload__V1__MembersAnswer a = KEYLOAD__V1__MEMBERS_ANSWER__INIT;
    Keyload__V1__MemberInfo infos[4], *ptrs[4];
    uint64_t voters[4];
    for (int i = 0; i < m->n_dir; i++) {
        keyload__v1__member_info__init(&infos[i]);
        infos[i].id = m->dir_id[i];
        infos[i].client_url = (char *)m->dir_url[i];
        infos[i].peer_url = (char *)m->dir_url[i];
        ptrs[i] = &infos[i];
        voters[i] = m->dir_id[i];
    }
    a.member = m->id;
    a.leader = m->leader;
    a.voters = voters;
    a.n_voters = (size_t)m->n_dir;
    a.replica_count = 1;
    a.conf_index = 40;
    a.committed = true;
    a.directory = ptrs;
    a.n_directory = (size_t)m->n_dir;
    uint8_t buf[1024];
    size_t n = keyload__v1__members_answer__pack(&a, buf);
    kl_rpc_reply(call, buf, n);
}

static const kl_rpc_method sm_methods[] = {{"keyload.v1.Batch", sm_batch}, {"keyload.v1.Members", sm_members}};

static void sm_ctl(uv_async_t *h)
{
    smember *m = h->data;
    kl_rpc_server_stop(m->srv);
    uv_close((uv_handle_t *)&m->ctl, NULL);
}

static void *sm_loop(void *arg)
{
    uv_run(&((smember *)arg)->loop, UV_RUN_DEFAULT);
    return NULL;
}

/* A member with its URL; its Members answer and hint are set by the test before any call. */
static void sm_start(smember *m, uint64_t id, int mode)
{
    memset(m, 0, sizeof *m);
    m->id = id;
    m->mode = mode;
    ck_assert_int_eq(uv_loop_init(&m->loop), 0);
    ck_assert_int_eq(uv_async_init(&m->loop, &m->ctl, sm_ctl), 0);
    m->ctl.data = m;
    snprintf(m->url, sizeof m->url, "tcp://127.0.0.1:%d", th_free_port());
    kl_rpc_server_config cfg = {.listen_url = m->url, .methods = sm_methods, .method_count = 2,
                                .owner = m, .max_frame = 1 << 20};
    kl_err err;
    ck_assert_msg(kl_rpc_server_start(&m->loop, &cfg, &m->srv, &err) == KL_OK, "%s", err.message);
    ck_assert_int_eq(pthread_create(&m->thread, NULL, sm_loop, m), 0);
}

static void sm_stop(smember *m)
{
    ck_assert_int_eq(uv_async_send(&m->ctl), 0);
    ck_assert_int_eq(pthread_join(m->thread, NULL), 0);
    ck_assert_int_eq(uv_loop_close(&m->loop), 0);
}

/* The configuration {m[0..n)} as every scripted member answers it, leader `leader`. */
static void sm_directory(smember **ms, int n, uint64_t leader)
{
    for (int k = 0; k < 3; k++) {
        sm[k].n_dir = n;
        sm[k].leader = leader;
        for (int i = 0; i < n; i++) {
            sm[k].dir_id[i] = ms[i]->id;
            sm[k].dir_url[i] = ms[i]->url;
        }
    }
}

static char sm_dir[256], sm_path[512];

/* A one-partition cluster file named `name` listing (id, url) pairs. */
static kl_client *sm_client(const char *name, int n, const uint64_t *ids, const char *const *urls)
{
    th_tmpdir(sm_dir, sizeof sm_dir);
    snprintf(sm_path, sizeof sm_path, "%s/cluster.json", sm_dir);
    FILE *f = fopen(sm_path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "{\"cluster\":\"%s\",\"replica_count\":1,\"insecure_local_admin\":true,\"partitions\":[{\"id\":0,"
               "\"members\":[", name);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s{\"id\":%llu,\"client\":\"%s\"}", i ? "," : "", (unsigned long long)ids[i], urls[i]);
    fprintf(f, "]}]}\n");
    fclose(f);
    kl_client *c;
    kl_err err;
    ck_assert_int_eq(kl_client_open(sm_path, "t/d", 3000, &c, &err), KL_OK);
    return c;
}

static kl_code sm_send(kl_client *c, kl_err *err)
{
    kl_batch *b;
    kl_message *m;
    ck_assert_int_eq(kl_batch_new(NULL, &b, err), KL_OK);
    ck_assert_int_eq(kl_message_new("x", 1, &m, err), KL_OK);
    ck_assert_int_eq(kl_batch_enqueue(b, "q", NULL, m, err), KL_OK);
    kl_receipt *r = NULL;
    kl_code rc = kl_client_batch(c, b, &r, err);
    if (rc == KL_OK)
        ck_assert_uint_eq(r->decoded->index, 9);
    kl_receipt_free(r);
    kl_message_free(m);
    kl_batch_free(b);
    return rc;
}

/* The file names only A, which follows and names B (not in the file) as leader: the call
 * asks A for Members, learns B and follows; the next call goes to B at once. */
START_TEST(a_redirect_to_an_unknown_leader_is_learned_and_followed)
{
    sm_start(&sm[0], 1, SM_FOLLOWS);
    sm_start(&sm[1], 2, SM_LEADS);
    sm_start(&sm[2], 3, SM_FOLLOWS); /* unused */
    sm[0].hint = sm[1].url;
    smember *conf[2] = {&sm[0], &sm[1]};
    sm_directory(conf, 2, 2);
    uint64_t ids[1] = {1};
    const char *urls[1] = {sm[0].url};
    kl_client *c = sm_client("learn-hint", 1, ids, urls);
    kl_err err;
    kl_code rc = sm_send(c, &err);
    ck_assert_msg(rc == KL_OK, "%s %s", kl_code_name(rc), err.message);
    ck_assert_int_eq(atomic_load(&sm[0].batches), 1);
    ck_assert_int_eq(atomic_load(&sm[0].members), 1);
    ck_assert_int_eq(atomic_load(&sm[1].batches), 1);
    ck_assert_int_eq(sm_send(c, &err), KL_OK);
    ck_assert_int_eq(atomic_load(&sm[0].batches), 1); /* B is the cached leader now */
    ck_assert_int_eq(atomic_load(&sm[1].batches), 2);
    kl_client_close(c);
    for (int k = 0; k < 3; k++)
        sm_stop(&sm[k]);
    th_rmrf(sm_dir);
}
END_TEST

/* The file names A (nothing listens there) and C (answers every batch UNAVAILABLE): no
 * member it knows serves, so the call asks C for Members, learns B, and B serves. */
START_TEST(a_round_where_no_known_member_serves_learns_the_leader)
{
    sm_start(&sm[0], 3, SM_UNAVAILABLE);
    sm_start(&sm[1], 2, SM_LEADS);
    sm_start(&sm[2], 4, SM_FOLLOWS); /* unused */
    smember *conf[2] = {&sm[1], &sm[0]};
    sm_directory(conf, 2, 2);
    char dead[64];
    snprintf(dead, sizeof dead, "tcp://127.0.0.1:%d", th_free_port());
    uint64_t ids[2] = {1, 3};
    const char *urls[2] = {dead, sm[0].url};
    kl_client *c = sm_client("learn-round", 2, ids, urls);
    kl_err err;
    kl_code rc = sm_send(c, &err);
    ck_assert_msg(rc == KL_OK, "%s %s", kl_code_name(rc), err.message);
    ck_assert_int_ge(atomic_load(&sm[0].members), 1);
    ck_assert_int_eq(atomic_load(&sm[1].batches), 1);
    /* The dead member left the configuration: later calls neither wait for it nor ask. */
    int before = atomic_load(&sm[0].batches);
    ck_assert_int_eq(sm_send(c, &err), KL_OK);
    ck_assert_int_eq(atomic_load(&sm[0].batches), before);
    ck_assert_int_eq(atomic_load(&sm[1].batches), 2);
    kl_client_close(c);
    for (int k = 0; k < 3; k++)
        sm_stop(&sm[k]);
    th_rmrf(sm_dir);
}
END_TEST

/* The file names A (nothing listens there) then B, which leads: the call meets A's dead
 * address, B serves it, and the call then asks B for Members once before returning B's
 * answer (the partition may have changed members); A, not in B's configuration, is never
 * tried again. */
START_TEST(a_success_after_a_dead_member_refreshes_the_members)
{
    sm_start(&sm[0], 2, SM_LEADS);
    sm_start(&sm[1], 3, SM_FOLLOWS);
    sm_start(&sm[2], 4, SM_FOLLOWS); /* unused */
    sm[1].hint = sm[0].url;
    smember *conf[2] = {&sm[0], &sm[1]};
    sm_directory(conf, 2, 2);
    char dead[64];
    snprintf(dead, sizeof dead, "tcp://127.0.0.1:%d", th_free_port());
    uint64_t ids[2] = {1, 2};
    const char *urls[2] = {dead, sm[0].url};
    kl_client *c = sm_client("learn-after", 2, ids, urls);
    kl_err err;
    kl_code rc = sm_send(c, &err);
    ck_assert_msg(rc == KL_OK, "%s %s", kl_code_name(rc), err.message);
    ck_assert_int_eq(atomic_load(&sm[0].batches), 1);
    ck_assert_int_eq(atomic_load(&sm[0].members), 1);
    ck_assert_int_eq(sm_send(c, &err), KL_OK);
    ck_assert_int_eq(atomic_load(&sm[0].members), 1); /* nothing met a dead member this time */
    ck_assert_int_eq(atomic_load(&sm[0].batches), 2);
    kl_client_close(c);
    for (int k = 0; k < 3; k++)
        sm_stop(&sm[k]);
    th_rmrf(sm_dir);
}
END_TEST

/* The file names C (answers every batch UNAVAILABLE leader_not_ready) then A (nothing
 * listens there), and C's configuration is the same two: no member serves, and the call's
 * error names C's refusal, not only the failure to reach A that came last. */
START_TEST(a_failed_call_names_what_a_live_member_answered)
{
    sm_start(&sm[0], 3, SM_UNAVAILABLE);
    sm_start(&sm[1], 5, SM_FOLLOWS); /* unused */
    sm_start(&sm[2], 6, SM_FOLLOWS); /* unused */
    char dead[64];
    snprintf(dead, sizeof dead, "tcp://127.0.0.1:%d", th_free_port());
    for (int k = 0; k < 3; k++) {
        sm[k].n_dir = 2;
        sm[k].leader = 0;
        sm[k].dir_id[0] = 3;
        sm[k].dir_url[0] = sm[0].url;
        sm[k].dir_id[1] = 1;
        sm[k].dir_url[1] = dead;
    }
    uint64_t ids[2] = {3, 1};
    const char *urls[2] = {sm[0].url, dead};
    kl_client *c = sm_client("answered", 2, ids, urls);
    kl_err err;
    kl_code rc = sm_send(c, &err);
    ck_assert_msg(rc == KL_UNAVAILABLE, "%s %s", kl_code_name(rc), err.message);
    ck_assert_msg(strcmp(err.detail, "leader_not_ready") == 0, "detail %s: %s", err.detail, err.message);
    ck_assert_msg(strstr(err.message, "cannot commit yet") != NULL, "%s", err.message);
    ck_assert_int_ge(atomic_load(&sm[0].batches), 2);
    kl_client_close(c);
    for (int k = 0; k < 3; k++)
        sm_stop(&sm[k]);
    th_rmrf(sm_dir);
}
END_TEST

Suite *suite_sdk_members(void)
{
    Suite *s = suite_create("sdk_members");
    TCase *t = tcase_create("sdk_members");
    tcase_set_timeout(t, 30);
    tcase_add_test(t, seeded_from_the_cluster_file);
    tcase_add_test(t, learns_new_members_once_and_retires_removed_ones);
    tcase_add_test(t, voters_without_a_usable_entry_keep_their_slots);
    tcase_add_test(t, an_older_configuration_changes_nothing);
    tcase_add_test(t, an_uncommitted_configuration_does_not_block_a_committed_one);
    tcase_add_test(t, unusable_entries_are_refused);
    tcase_add_test(t, a_new_identity_at_an_old_address_gets_its_own_slot);
    tcase_add_test(t, a_full_table_refuses_by_name_and_keeps_its_slots);
    tcase_add_test(t, sub_steps_are_rate_limited);
    tcase_add_test(t, tables_are_shared_per_cluster_file_and_kind_of_client);
    tcase_add_test(t, concurrent_learners_append_each_member_once);
    suite_add_tcase(s, t);
    TCase *r = tcase_create("sdk_members_routing");
    tcase_set_timeout(r, 30);
    tcase_add_test(r, a_redirect_to_an_unknown_leader_is_learned_and_followed);
    tcase_add_test(r, a_round_where_no_known_member_serves_learns_the_leader);
    tcase_add_test(r, a_success_after_a_dead_member_refreshes_the_members);
    tcase_add_test(r, a_failed_call_names_what_a_live_member_answered);
    suite_add_tcase(s, r);
    return s;
}
