/* Authorization as the node applies it (daemon/engine/access.h, node.c): a real store and
 * node (tests/unit/harness.h) on a cluster that requires sessions. Batches are submitted
 * as a named principal, as the session gate does after opening a sealed request. The
 * evaluator's own rules are tests/unit/test_authz.c; this is the wiring: each mutation
 * checked against the stored record, principal management, policy epochs and replay. */
#include "harness.h"

#include "common/canon.h"
#include "common/keys.h"
#include "daemon/engine/access.h"
#include "daemon/engine/catalog.h"
#include "daemon/engine/mutation.h"
#include "daemon/store/keys.h"

#include <check.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

static char dir[256];
static th_node T;

#define PUB KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH
#define CONSUME KEYLOAD__V1__PERMISSION__QUEUE_CONSUME

static void setup(void)
{
    th_tmpdir(dir, sizeof dir);
    th_open(&T, dir, NULL); /* creates default/default as the local administrator */
    T.require_sessions = true;
    th_close(&T);
    th_reopen(&T);
    T.principal = NULL;
    T.reader = "root"; /* bootstrapped by each test before it reads */
}

static void teardown(void)
{
    th_close(&T);
    th_rmrf(dir);
}

static void fresh_key(uint8_t pk[32])
{
    uint8_t sk[64];
    crypto_sign_keypair(pk, sk);
    sodium_memzero(sk, sizeof sk);
}

/* Bootstraps "root", cluster administrator of tenant "default" (database default/boot). */
static void bootstrap_root(void)
{
    uint8_t pk[32], proof[32];
    fresh_key(pk);
    ck_assert_int_eq(kl_canon_bootstrap_proof(th_cluster_secret, "default", "boot", "root", pk, 32, proof), 0);
    th_batch *b = th_batch_new(0xB0);
    th_bootstrap(b, "default", "boot", "root", pk, proof);
    T.principal = NULL; /* bootstrap needs no session */
    keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
}

/* Runs b as `who`, expecting `code` (and detail when not NULL). */
static void run_as(const char *who, th_batch *b, kl_code code, const char *detail)
{
    T.principal = who;
    if (code == KL_OK) {
        keyload__v1__batch_receipt__free_unpacked(th_run(&T, b, KL_OK), NULL);
        return;
    }
    kl_err err;
    th_run_err(&T, b, code, &err);
    if (detail)
        ck_assert_str_eq(err.detail, detail);
}

static uint64_t epoch_of(const char *id)
{
    kl_view v = {.store = T.store, .scan_limit = 16};
    Keyload__V1__CatalogPrincipal *p;
    bool found;
    kl_err err;
    ck_assert_int_eq(kl_catalog_find_principal(&v, id, &p, &found, &err), KL_OK);
    ck_assert(found);
    uint64_t e = p->policy_epoch;
    keyload__v1__catalog_principal__free_unpacked(p, NULL);
    return e;
}

static void make_queue(const char *name)
{
    static uint8_t cmd = 0xC0;
    th_batch *b = th_batch_new(cmd++);
    th_create(b, name, 0, 0, 0, NULL);
    run_as("root", b, KL_OK, NULL);
}

static void make_alice(uint8_t cmd)
{
    uint8_t pk[32];
    fresh_key(pk);
    th_batch *b = th_batch_new(cmd);
    th_create_principal(b, "alice", pk, false, NULL);
    run_as("root", b, KL_OK, NULL);
}

/* Without a session, only Bootstrap runs; nothing else, reads included. */
START_TEST(requests_without_a_session_are_refused)
{
    th_batch *b = th_batch_new(1);
    th_enqueue(b, "q", NULL, "x");
    run_as(NULL, b, KL_UNAUTHENTICATED, "session_required");
    b = th_batch_new(2);
    th_create(b, "q", 0, 0, 0, NULL);
    run_as(NULL, b, KL_UNAUTHENTICATED, "session_required");
    /* A principal the catalog does not know (its session would be refused at the gate). */
    b = th_batch_new(3);
    th_create(b, "q", 0, 0, 0, NULL);
    run_as("ghost", b, KL_UNAUTHENTICATED, "principal");
    bootstrap_root();
    make_queue("q");
    ck_assert_uint_eq(th_queue_messages(&T, "q", NULL), 0);
}
END_TEST

/* Grants decide publish, with field and header keys; revocation bumps the epoch and
 * refuses at once; only an administrator changes grants. */
START_TEST(grants_decide_publish)
{
    bootstrap_root();
    make_queue("orders.eu");
    make_queue("other");
    make_alice(0x10);
    ck_assert_uint_eq(epoch_of("alice"), 1);
    th_batch *b = th_batch_new(0x11);
    th_enqueue(b, "orders.eu", NULL, "x");
    run_as("alice", b, KL_PERMISSION_DENIED, "grant:QueuePublish");
    b = th_batch_new(0x12);
    th_grant(b, "alice", PUB, "orders.*", "amount", NULL);
    run_as("root", b, KL_OK, NULL);
    ck_assert_uint_eq(epoch_of("alice"), 2);
    b = th_batch_new(0x13);
    th_enqueue_keys(b, "orders.eu", "x", "amount", NULL);
    run_as("alice", b, KL_OK, NULL);
    b = th_batch_new(0x14);
    th_enqueue_keys(b, "orders.eu", "x", "secret", NULL);
    run_as("alice", b, KL_PERMISSION_DENIED, "field_grant:QueuePublish");
    b = th_batch_new(0x15);
    th_enqueue_keys(b, "orders.eu", "x", NULL, "trace");
    run_as("alice", b, KL_PERMISSION_DENIED, "header_grant:QueuePublish");
    b = th_batch_new(0x16);
    th_enqueue(b, "other", NULL, "x");
    run_as("alice", b, KL_PERMISSION_DENIED, "grant:QueuePublish");
    /* All or nothing: one refused mutation and the allowed one before it is not applied. */
    b = th_batch_new(0x17);
    th_enqueue(b, "orders.eu", NULL, "x");
    th_enqueue(b, "other", NULL, "x");
    run_as("alice", b, KL_PERMISSION_DENIED, "grant:QueuePublish");
    ck_assert_uint_eq(th_queue_messages(&T, "orders.eu", NULL), 1);
    ck_assert_uint_eq(th_queue_messages(&T, "other", NULL), 0);
    /* Alice is no administrator: she can neither grant nor create queues or principals. */
    b = th_batch_new(0x18);
    th_grant(b, "alice", PUB, "*", "*", "*");
    run_as("alice", b, KL_PERMISSION_DENIED, "role:administrator");
    b = th_batch_new(0x19);
    th_create(b, "mine", 0, 0, 0, NULL);
    run_as("alice", b, KL_PERMISSION_DENIED, "role:administrator");
    ck_assert_uint_eq(epoch_of("alice"), 2);
    /* An identical re-grant changes nothing; a revoke refuses at once. */
    b = th_batch_new(0x1a);
    th_grant(b, "alice", PUB, "orders.*", "amount", NULL);
    run_as("root", b, KL_OK, NULL);
    ck_assert_uint_eq(epoch_of("alice"), 2);
    b = th_batch_new(0x1b);
    th_revoke(b, "alice", PUB, "orders.*");
    run_as("root", b, KL_OK, NULL);
    ck_assert_uint_eq(epoch_of("alice"), 3);
    b = th_batch_new(0x1c);
    th_enqueue_keys(b, "orders.eu", "x", "amount", NULL);
    run_as("alice", b, KL_PERMISSION_DENIED, "grant:QueuePublish");
    ck_assert_uint_eq(th_queue_messages(&T, "orders.eu", NULL), 1);
}
END_TEST

/* A replay of a committed command after the epoch changed: stale_authority, the original
 * outcome stays; a fresh command id works under the current grants. */
START_TEST(replay_after_epoch_change_is_stale_authority)
{
    bootstrap_root();
    make_queue("q");
    make_alice(0x20);
    th_batch *b = th_batch_new(0x21);
    th_grant(b, "alice", PUB, "q", NULL, NULL);
    run_as("root", b, KL_OK, NULL);
    b = th_batch_new(0x22);
    th_enqueue(b, "q", NULL, "x");
    run_as("alice", b, KL_OK, NULL);
    b = th_batch_new(0x22); /* same command, same epoch: the stored receipt, no new effect */
    th_enqueue(b, "q", NULL, "x");
    run_as("alice", b, KL_OK, NULL);
    ck_assert_uint_eq(th_queue_messages(&T, "q", NULL), 1);
    /* Revoke then restore: the same grants as before, but a new epoch. */
    b = th_batch_new(0x23);
    th_revoke(b, "alice", PUB, "q");
    run_as("root", b, KL_OK, NULL);
    b = th_batch_new(0x24);
    th_grant(b, "alice", PUB, "q", NULL, NULL);
    run_as("root", b, KL_OK, NULL);
    ck_assert_uint_eq(epoch_of("alice"), 4);
    kl_err err;
    b = th_batch_new(0x22);
    th_enqueue(b, "q", NULL, "x");
    T.principal = "alice";
    th_run_err(&T, b, KL_PERMISSION_DENIED, &err);
    ck_assert_str_eq(err.detail, "stale_authority");
    ck_assert_ptr_nonnull(strstr(err.message, "committed"));
    ck_assert_uint_eq(th_queue_messages(&T, "q", NULL), 1);
    b = th_batch_new(0x25);
    th_enqueue(b, "q", NULL, "x");
    run_as("alice", b, KL_OK, NULL);
    ck_assert_uint_eq(th_queue_messages(&T, "q", NULL), 2);
    /* The outcome of the original is still stored (the evidence is kept). */
    kl_key k;
    uint8_t cmd[16];
    memset(cmd, 0x22, 16);
    kl_key_outcome(&k, "alice", cmd);
    uint8_t *val;
    size_t len;
    bool found;
    ck_assert_int_eq(kl_store_get(T.store, k.b, k.len, &val, &len, &found, &err), KL_OK);
    ck_assert(found);
    free(val);
}
END_TEST

/* A batch's own effect does not make its replay stale: an administrator granting itself
 * bumps its own epoch, and the replay of that very command answers the original receipt.
 * A later revoke then restore (same grants, new epoch) still makes that replay stale. */
START_TEST(own_effect_does_not_make_replay_stale)
{
    bootstrap_root();
    make_queue("q");
    uint64_t before = epoch_of("root");
    th_batch *b = th_batch_new(0x41);
    th_grant(b, "root", PUB, "q", NULL, NULL);
    T.principal = "root";
    Keyload__V1__BatchReceipt *r1 = th_run(&T, b, KL_OK);
    ck_assert_uint_eq(epoch_of("root"), before + 1);
    b = th_batch_new(0x41); /* the SDK's retry after UNAVAILABLE catalog_barrier */
    th_grant(b, "root", PUB, "q", NULL, NULL);
    Keyload__V1__BatchReceipt *r2 = th_run(&T, b, KL_OK);
    ck_assert_uint_eq(r2->index, r1->index); /* the stored receipt, no second effect */
    ck_assert_uint_eq(r2->term, r1->term);
    ck_assert_uint_eq(epoch_of("root"), before + 1);
    keyload__v1__batch_receipt__free_unpacked(r1, NULL);
    keyload__v1__batch_receipt__free_unpacked(r2, NULL);
    b = th_batch_new(0x42);
    th_revoke(b, "root", PUB, "q");
    run_as("root", b, KL_OK, NULL);
    b = th_batch_new(0x43);
    th_grant(b, "root", PUB, "q", NULL, NULL);
    run_as("root", b, KL_OK, NULL);
    ck_assert_uint_eq(epoch_of("root"), before + 3);
    kl_err err;
    b = th_batch_new(0x41);
    th_grant(b, "root", PUB, "q", NULL, NULL);
    T.principal = "root";
    th_run_err(&T, b, KL_PERMISSION_DENIED, &err);
    ck_assert_str_eq(err.detail, "stale_authority");
}
END_TEST

/* Receive hands out only what the consumer may read: a message with a field outside its
 * grant refuses the whole Receive and leases nothing. */
START_TEST(receive_checks_each_message_it_hands_out)
{
    bootstrap_root();
    make_queue("q");
    make_alice(0x30);
    th_batch *b = th_batch_new(0x31);
    th_enqueue_keys(b, "q", "x", "secret", NULL);
    run_as("root", b, KL_OK, NULL);
    b = th_batch_new(0x32);
    th_receive(b, "q", NULL, 10, 1000);
    run_as("alice", b, KL_PERMISSION_DENIED, "grant:QueueConsume");
    b = th_batch_new(0x33);
    th_grant(b, "alice", CONSUME, "q", "amount", NULL);
    run_as("root", b, KL_OK, NULL);
    b = th_batch_new(0x34);
    th_receive(b, "q", NULL, 10, 1000);
    run_as("alice", b, KL_PERMISSION_DENIED, "field_grant:QueueConsume");
    uint64_t in_flight = 99;
    ck_assert_uint_eq(th_queue_messages(&T, "q", &in_flight), 1);
    ck_assert_uint_eq(in_flight, 0);
    b = th_batch_new(0x35);
    th_grant(b, "alice", CONSUME, "q", "secret", NULL);
    run_as("root", b, KL_OK, NULL);
    b = th_batch_new(0x36);
    th_receive(b, "q", NULL, 10, 1000);
    run_as("alice", b, KL_OK, NULL);
    ck_assert_uint_eq(th_queue_messages(&T, "q", &in_flight), 1);
    ck_assert_uint_eq(in_flight, 1);
}
END_TEST

/* Roles: a database administrator cannot make a cluster administrator nor act outside its
 * database; key rotation keeps the epoch and changes the key id. */
START_TEST(roles_and_key_rotation)
{
    bootstrap_root();
    uint8_t pk[32];
    fresh_key(pk);
    th_batch *b = th_batch_new(0x40);
    th_create_principal(b, "dba", pk, false, "default");
    run_as("root", b, KL_OK, NULL);
    fresh_key(pk);
    b = th_batch_new(0x41);
    th_create_principal(b, "boss", pk, true, NULL);
    run_as("dba", b, KL_PERMISSION_DENIED, NULL);
    kl_view v = {.store = T.store, .scan_limit = 16};
    Keyload__V1__CatalogPrincipal *p;
    bool found;
    kl_err err;
    ck_assert_int_eq(kl_catalog_find_principal(&v, "boss", &p, &found, &err), KL_OK);
    ck_assert(!found);
    /* The database administrator manages its own database's queues... */
    b = th_batch_new(0x42);
    th_create(b, "q", 0, 0, 0, NULL);
    run_as("dba", b, KL_OK, NULL);
    /* ...but not another database's, nor databases. */
    b = th_batch_new(0x43);
    th_create(b, "q", 0, 0, 0, NULL);
    th_batch_set_database(b, "boot");
    run_as("dba", b, KL_PERMISSION_DENIED, "role:administrator");
    b = th_batch_new(0x44);
    th_create_database(b, "default", "more");
    run_as("dba", b, KL_PERMISSION_DENIED, "role:cluster_admin");
    /* A database administrator may create plain principals and grant on its database. */
    fresh_key(pk);
    b = th_batch_new(0x45);
    th_create_principal(b, "bob", pk, false, NULL);
    run_as("dba", b, KL_OK, NULL);
    b = th_batch_new(0x46);
    th_grant(b, "bob", PUB, "q", NULL, NULL);
    run_as("dba", b, KL_OK, NULL);
    ck_assert_uint_eq(epoch_of("bob"), 2);
    /* Key rotation by bob himself: new key id, same epoch. */
    ck_assert_int_eq(kl_catalog_find_principal(&v, "bob", &p, &found, &err), KL_OK);
    uint8_t old_id[KL_KEY_ID_LEN];
    memcpy(old_id, p->key_id.data, KL_KEY_ID_LEN);
    keyload__v1__catalog_principal__free_unpacked(p, NULL);
    fresh_key(pk);
    b = th_batch_new(0x47);
    th_set_key(b, "bob", pk);
    run_as("bob", b, KL_OK, NULL);
    ck_assert_int_eq(kl_catalog_find_principal(&v, "bob", &p, &found, &err), KL_OK);
    ck_assert(memcmp(p->key_id.data, old_id, KL_KEY_ID_LEN) != 0);
    ck_assert_mem_eq(p->public_key.data, pk, 32);
    ck_assert_uint_eq(p->policy_epoch, 2);
    keyload__v1__catalog_principal__free_unpacked(p, NULL);
    /* Bob cannot rotate the administrator's key. */
    b = th_batch_new(0x48);
    th_set_key(b, "dba", pk);
    run_as("bob", b, KL_PERMISSION_DENIED, NULL);
    /* A grant on a database that does not exist, a malformed pattern. */
    b = th_batch_new(0x49);
    th_grant(b, "bob", PUB, "q*x", NULL, NULL);
    run_as("root", b, KL_INVALID_ARGUMENT, "grant.queue_pattern");
}
END_TEST


/* Transfer mutations (access.h): a persisted administrator first, then the data grants
 * with every administrator flag off, so an administrator holding no grant is refused. */
static Keyload__V1__Mutation *transfer_create(Keyload__V1__Mutation *m, Keyload__V1__CreateQueueTransfer *c,
                                              Keyload__V1__QueueLaneRef *s, Keyload__V1__QueueLaneRef *d,
                                              Keyload__V1__EnqueueMessage *msg)
{
    keyload__v1__queue_lane_ref__init(s);
    s->tenant = "default";
    s->database = "default";
    s->queue = "src";
    *d = *s;
    d->queue = "dst";
    keyload__v1__enqueue_message__init(msg);
    keyload__v1__create_queue_transfer__init(c);
    c->source_queue = s;
    c->destination = d;
    c->message = msg;
    keyload__v1__mutation__init(m);
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_CREATE_QUEUE_TRANSFER;
    m->create_queue_transfer = c;
    return m;
}

START_TEST(transfers_need_admin_then_data_grants)
{
    Keyload__V1__Mutation m;
    Keyload__V1__CreateQueueTransfer c;
    Keyload__V1__QueueLaneRef s, d;
    Keyload__V1__EnqueueMessage msg;
    transfer_create(&m, &c, &s, &d, &msg);
    Keyload__V1__Grant g_src = KEYLOAD__V1__GRANT__INIT, g_dst = KEYLOAD__V1__GRANT__INIT;
    g_src.database = "default";
    g_src.permission = PUB;
    g_src.queue_pattern = "src";
    g_dst = g_src;
    g_dst.queue_pattern = "dst";
    Keyload__V1__Grant *both[2] = {&g_src, &g_dst};
    Keyload__V1__CatalogPrincipal p = KEYLOAD__V1__CATALOG_PRINCIPAL__INIT;
    p.principal_id = "coord";
    p.tenant = "default";
    kl_authz_subject who = {.principal = &p};
    kl_err err;
    /* A cluster administrator without data grants: refused on the data check. */
    p.cluster_admin = true;
    ck_assert_int_eq(kl_mutation_access(&who, &m, &err), KL_PERMISSION_DENIED);
    ck_assert_str_eq(err.detail, "grant:QueuePublish");
    /* Grants on the source only: the destination is checked too. */
    p.n_grants = 1;
    p.grants = both;
    ck_assert_int_eq(kl_mutation_access(&who, &m, &err), KL_PERMISSION_DENIED);
    ck_assert_ptr_nonnull(strstr(err.message, "dst"));
    p.n_grants = 2;
    ck_assert_int_eq(kl_mutation_access(&who, &m, &err), KL_OK);
    /* The same grants without an administrator role: refused first. */
    p.cluster_admin = false;
    ck_assert_int_eq(kl_mutation_access(&who, &m, &err), KL_PERMISSION_DENIED);
    ck_assert_str_eq(err.detail, "role:administrator");
    /* A database administrator of another database is none here. */
    p.database_admin = true;
    p.database = "other";
    ck_assert_int_eq(kl_mutation_access(&who, &m, &err), KL_PERMISSION_DENIED);
    p.database = "default";
    ck_assert_int_eq(kl_mutation_access(&who, &m, &err), KL_OK);
    /* A field the grants do not allow refuses, administrator or not. */
    Keyload__V1__FieldValue fv = KEYLOAD__V1__FIELD_VALUE__INIT;
    fv.kind_case = KEYLOAD__V1__FIELD_VALUE__KIND_BOOL_VALUE;
    Keyload__V1__Field f = KEYLOAD__V1__FIELD__INIT;
    f.key = "secret";
    f.value = &fv;
    Keyload__V1__Field *fp = &f;
    msg.n_fields = 1;
    msg.fields = &fp;
    ck_assert_int_eq(kl_mutation_access(&who, &m, &err), KL_PERMISSION_DENIED);
    ck_assert_str_eq(err.detail, "field_grant:QueuePublish");
    /* Another tenant's administrator: refused on the tenant. */
    msg.n_fields = 0;
    p.tenant = "elsewhere";
    ck_assert_int_eq(kl_mutation_access(&who, &m, &err), KL_PERMISSION_DENIED);
    ck_assert_str_eq(err.detail, "tenant");
}
END_TEST

/* SetMemberKey vouches for a member's key to partition 0: a cluster administrator of any
 * tenant (membership is the cluster's, as MemberChange's check), nobody else. */
START_TEST(member_key_needs_a_cluster_administrator)
{
    Keyload__V1__SetMemberKey k = KEYLOAD__V1__SET_MEMBER_KEY__INIT;
    k.partition = 1;
    k.member = 4;
    Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
    m.kind_case = KEYLOAD__V1__MUTATION__KIND_SET_MEMBER_KEY;
    m.set_member_key = &k;
    Keyload__V1__CatalogPrincipal p = KEYLOAD__V1__CATALOG_PRINCIPAL__INIT;
    p.principal_id = "ops";
    p.tenant = "elsewhere";
    kl_authz_subject who = {.principal = &p};
    kl_err err;
    ck_assert_int_eq(kl_mutation_access(&who, &m, &err), KL_PERMISSION_DENIED);
    ck_assert_str_eq(err.detail, "role:cluster_admin");
    p.database_admin = true;
    p.database = "default";
    ck_assert_int_eq(kl_mutation_access(&who, &m, &err), KL_PERMISSION_DENIED);
    p.cluster_admin = true;
    ck_assert_int_eq(kl_mutation_access(&who, &m, &err), KL_OK);
    who.admin_off = true;
    ck_assert_int_eq(kl_mutation_access(&who, &m, &err), KL_PERMISSION_DENIED);
}
END_TEST

/* Checks a descriptor's ref column against the kind's message (sd): a kind whose message
 * holds a single QueueLaneRef field must name its batch's database through one of them,
 * and a kind whose message holds none must have no ref. Each such field of the message is
 * set to a distinct ref, so the row's answer is one of the message's own refs. */
static void check_ref_column(int kind, const ProtobufCFieldDescriptor *kf, const kl_mutation_kind *k)
{
    const ProtobufCMessageDescriptor *sd = kf->descriptor;
    void *sub = calloc(1, sd->sizeof_message);
    ck_assert_ptr_nonnull(sub);
    protobuf_c_message_init(sd, sub);
    Keyload__V1__QueueLaneRef refs[8];
    size_t nrefs = 0;
    for (unsigned j = 0; j < sd->n_fields; j++) {
        const ProtobufCFieldDescriptor *g = &sd->fields[j];
        if (g->type != PROTOBUF_C_TYPE_MESSAGE || g->label == PROTOBUF_C_LABEL_REPEATED ||
            g->descriptor != &keyload__v1__queue_lane_ref__descriptor)
            continue;
        ck_assert_uint_lt(nrefs, sizeof refs / sizeof refs[0]);
        keyload__v1__queue_lane_ref__init(&refs[nrefs]);
        *(Keyload__V1__QueueLaneRef **)((char *)sub + g->offset) = &refs[nrefs++];
    }
    if (nrefs == 0) {
        ck_assert_msg(k->ref == NULL, "kind %d (%s) names no queue but its row has a ref", kind, kf->name);
        /* Nothing routes it but partition 0: it must be a catalog change, alone in its batch,
         * or a kind its caller addresses to each partition itself. */
        ck_assert_msg(k->changes_catalog != NULL || k->per_partition,
                      "kind %d (%s) names no queue, changes no catalog and is not per partition", kind, kf->name);
        ck_assert_msg(k->changes_catalog == NULL || !k->per_partition, "kind %d (%s) is both", kind, kf->name);
    } else {
        ck_assert_msg(k->ref != NULL, "kind %d (%s) holds a queue ref but its row has none", kind, kf->name);
        Keyload__V1__Mutation m = KEYLOAD__V1__MUTATION__INIT;
        m.kind_case = (Keyload__V1__Mutation__KindCase)kind;
        *(void **)((char *)&m + kf->offset) = sub;
        const Keyload__V1__QueueLaneRef *r = k->ref(&m);
        ck_assert_msg(r >= refs && r < refs + nrefs, "kind %d (%s): the row's ref is not one of its message's",
                      kind, kf->name);
    }
    free(sub);
}

/* The mutation table has one complete row for every kind the protocol defines: validate,
 * access, canonical encoding and evaluate set, a ref exactly when the kind's message holds
 * a queue ref, and its canonical-encoding column is the encoder the request digest uses
 * for that kind. A half-added kind fails here. */
START_TEST(mutation_table_has_a_full_row_per_kind)
{
    ck_assert_ptr_null(kl_mutation_kind_of(KEYLOAD__V1__MUTATION__KIND__NOT_SET));
    const ProtobufCFieldDescriptor *f = keyload__v1__mutation__descriptor.fields;
    size_t n = keyload__v1__mutation__descriptor.n_fields;
    int max = 0;
    for (size_t i = 0; i < n; i++) {
        if (f[i].quantifier_offset == 0)
            continue; /* not a member of the kind oneof */
        int kind = (int)f[i].id;
        max = kind > max ? kind : max;
        const kl_mutation_kind *k = kl_mutation_kind_of(kind);
        ck_assert_msg(k != NULL, "kind %d (%s) has no row", kind, f[i].name);
        ck_assert_ptr_nonnull(k->validate);
        ck_assert_ptr_nonnull(k->access);
        ck_assert_ptr_nonnull(k->eval);
        ck_assert_msg(k->canon != NULL && k->canon == kl_canon_mutation_encoder(kind),
                      "kind %d (%s): the row's canonical encoder is not the digest's", kind, f[i].name);
        check_ref_column(kind, &f[i], k);
    }
    ck_assert_int_eq(max, KEYLOAD__V1__MUTATION__KIND_SET_MEMBER_KEY);
    ck_assert_ptr_null(kl_mutation_kind_of(max + 1));
    ck_assert_ptr_null(kl_canon_mutation_encoder(max + 1));
    ck_assert_ptr_null(kl_mutation_kind_of(-1));
}
END_TEST

Suite *suite_access(void)
{
    Suite *s = suite_create("access");
    TCase *t = tcase_create("access");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 30);
    tcase_add_test(t, requests_without_a_session_are_refused);
    tcase_add_test(t, grants_decide_publish);
    tcase_add_test(t, replay_after_epoch_change_is_stale_authority);
    tcase_add_test(t, own_effect_does_not_make_replay_stale);
    tcase_add_test(t, receive_checks_each_message_it_hands_out);
    tcase_add_test(t, roles_and_key_rotation);
    tcase_add_test(t, transfers_need_admin_then_data_grants);
    tcase_add_test(t, member_key_needs_a_cluster_administrator);
    tcase_add_test(t, mutation_table_has_a_full_row_per_kind);
    suite_add_tcase(s, t);
    return s;
}
