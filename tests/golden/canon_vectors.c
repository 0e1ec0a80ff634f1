/* Every mutation kind's fixed sample: its canonical encoding, the BatchRequest wire bytes
 * of a one-mutation batch, and that batch's request digest (what replays compare). */
#include "tests/golden/build.h"
#include "tests/golden/golden.h"

#include "common/canon.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

/* The method name node.c digests batches under; part of every stored request digest. */
#define GOLDEN_BATCH_METHOD "keyload.v1.Batch"
#define GOLDEN_PRINCIPAL "golden-admin"

static const uint8_t k_tid[16] = {0x7e, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0x5a};
static const uint8_t k_token[24] = "token-bytes-for-vectors";

static void sample_pk(uint8_t pk[32], uint8_t seed_byte)
{
    uint8_t seed[32], sk[64];
    memset(seed, seed_byte, sizeof seed);
    crypto_sign_seed_keypair(pk, sk, seed);
}

typedef struct sample {
    const char *name;
    Keyload__V1__Mutation *m;
} sample;

static Keyload__V1__QueueLaneRef *lane(const char *q, const char *l) { return gb_lane("acme", "main", q, l); }

/* Fills s with one sample per kind (in kind order, 19 kinds). */
static size_t samples(sample *s)
{
    uint8_t pk[32], proof[32];
    sample_pk(pk, 0x11);
    memset(proof, 0x22, sizeof proof);
    ProtobufCBinaryData tok = {sizeof k_token, (uint8_t *)k_token};
    ProtobufCBinaryData toks[2] = {tok, {4, (uint8_t *)"\x00\x01\x02\x03"}};
    size_t n = 0;
    s[n++] = (sample){"create_queue", gb_create_queue(lane("orders", ""), 100, 4096, 5, "orders.dlq", -1)};
    s[n++] = (sample){"delete_queue", gb_delete_queue(lane("orders", NULL))};
    s[n++] = (sample){"enqueue", gb_enqueue(lane("orders", "eu"), gb_msg_rich())};
    s[n++] = (sample){"receive", gb_receive(lane("orders", "default"), 10, 30000, 500)};
    s[n++] = (sample){"ack", gb_ack(lane("orders", ""), toks, 2)};
    s[n++] = (sample){"release", gb_release(lane("orders", "eu"), toks, 1)};
    s[n++] = (sample){"create_database", gb_create_database("acme", "main", gb_db_limits(1000, 65536, 0, true, 3))};
    s[n++] = (sample){"bootstrap", gb_bootstrap("acme", "main", "root", pk, proof)};
    s[n++] = (sample){"create_principal", gb_create_principal("acme", "alice", pk, false, true, "main")};
    s[n++] = (sample){"grant_permission",
                      gb_grant("alice", "main", KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "orders.*", "f1", "h1")};
    s[n++] = (sample){"revoke_permission", gb_revoke("alice", "main", KEYLOAD__V1__PERMISSION__QUEUE_CONSUME, "*")};
    s[n++] = (sample){"set_principal_key", gb_set_key("alice", pk)};
    s[n++] = (sample){"set_database_limits", gb_set_db_limits("acme", "main", gb_db_limits(500, 0, 1 << 20, false, 0))};
    s[n++] = (sample){"create_queue_transfer",
                      gb_create_transfer(lane("orders", "eu"), k_tid, lane("archive", ""), gb_msg_rich())};
    s[n++] = (sample){"accept_queue_transfer", gb_accept(lane("archive", ""), tok)};
    s[n++] = (sample){"complete_queue_transfer", gb_complete(lane("orders", "eu"), k_tid, tok)};
    s[n++] = (sample){"set_queue_transfers_paused", gb_pause("acme", "main", lane("orders", "eu"), true)};
    s[n++] = (sample){"advance_queue_transfer_attempt", gb_advance(lane("orders", "eu"), k_tid, tok, false)};
    s[n++] = (sample){"advance_queue_transfer_repair", gb_advance(lane("orders", ""), k_tid, tok, true)};
    return n;
}

static void one_vector(FILE *out, const sample *s, uint8_t cmd_byte)
{
    kl_canon c;
    kl_canon_init(&c);
    kl_canon_mutation(&c, s->m);
    if (c.oom)
        golden_die("canon of %s: out of memory", s->name);
    fprintf(out, "kind %d %s\ncanon ", (int)s->m->kind_case, s->name);
    golden_hex(out, c.buf, c.len);
    kl_canon_free(&c);

    uint8_t cmd[16];
    memset(cmd, 0xC0, sizeof cmd);
    cmd[15] = cmd_byte;
    Keyload__V1__Mutation *one[1] = {s->m};
    size_t len;
    uint8_t *wire = gb_pack(cmd, one, 1, &len);
    fprintf(out, "\nwire ");
    golden_hex(out, wire, len);
    Keyload__V1__BatchRequest *b = keyload__v1__batch_request__unpack(NULL, len, wire);
    if (b == NULL)
        golden_die("wire of %s does not decode", s->name);
    uint8_t digest[KL_DIGEST_LEN];
    if (kl_canon_batch_digest(GOLDEN_BATCH_METHOD, GOLDEN_PRINCIPAL, b, digest) != 0)
        golden_die("digest of %s: out of memory", s->name);
    fprintf(out, "\ndigest ");
    golden_hex(out, digest, sizeof digest);
    fprintf(out, "\n\n");
    keyload__v1__batch_request__free_unpacked(b, NULL);
    free(wire);
}

/* A one-enqueue batch carrying first_sent_unix_ms: its wire bytes and digest (the field is
 * covered only when set; the vectors above have it unset and keep their old digests). */
static void first_sent_vector(FILE *out, Keyload__V1__Mutation *enq)
{
    uint8_t cmd[16], d[KL_DIGEST_LEN];
    memset(cmd, 0xC2, sizeof cmd);
    Keyload__V1__Mutation *one[1] = {enq};
    size_t len;
    uint8_t *wire = gb_pack(cmd, one, 1, &len);
    Keyload__V1__BatchRequest *b = keyload__v1__batch_request__unpack(NULL, len, wire);
    if (b == NULL)
        golden_die("first_sent batch");
    b->first_sent_unix_ms = 1767225600123;
    size_t n = keyload__v1__batch_request__get_packed_size(b);
    uint8_t *w2 = malloc(n);
    if (w2 == NULL || kl_canon_batch_digest(GOLDEN_BATCH_METHOD, GOLDEN_PRINCIPAL, b, d) != 0)
        golden_die("first_sent batch: out of memory");
    keyload__v1__batch_request__pack(b, w2);
    fprintf(out, "first_sent_batch wire ");
    golden_hex(out, w2, n);
    fprintf(out, "\nfirst_sent_batch digest ");
    golden_hex(out, d, sizeof d);
    fprintf(out, "\n");
    free(w2);
    keyload__v1__batch_request__free_unpacked(b, NULL);
    free(wire);
}

/* The other two canonical digests: a message fingerprint (transfers) and a bootstrap proof. */
static void other_digests(FILE *out, Keyload__V1__Mutation **all, size_t n)
{
    uint8_t d[KL_DIGEST_LEN], secret[32], pk[32];
    if (kl_canon_message_fingerprint(gb_msg_rich(), d) != 0)
        golden_die("fingerprint: out of memory");
    fprintf(out, "message_fingerprint rich ");
    golden_hex(out, d, sizeof d);
    memset(secret, 0x5e, sizeof secret);
    sample_pk(pk, 0x11);
    if (kl_canon_bootstrap_proof(secret, "acme", "main", "root", pk, sizeof pk, d) != 0)
        golden_die("bootstrap proof: out of memory");
    fprintf(out, "\nbootstrap_proof ");
    golden_hex(out, d, sizeof d);

    /* Every sample in one batch: the digest over a multi-mutation batch. */
    uint8_t cmd[16];
    memset(cmd, 0xC1, sizeof cmd);
    size_t len;
    uint8_t *wire = gb_pack(cmd, all, n, &len);
    Keyload__V1__BatchRequest *b = keyload__v1__batch_request__unpack(NULL, len, wire);
    if (b == NULL || kl_canon_batch_digest(GOLDEN_BATCH_METHOD, GOLDEN_PRINCIPAL, b, d) != 0)
        golden_die("all-kinds batch");
    fprintf(out, "\nall_kinds_batch digest ");
    golden_hex(out, d, sizeof d);
    fprintf(out, "\n");
    keyload__v1__batch_request__free_unpacked(b, NULL);
    free(wire);
    first_sent_vector(out, all[2]);
}

/* Kinds added after the vectors were first written: their samples are appended at the end
 * (and left out of the all-kinds batch), so every vector above stays as it was. */
static size_t later_samples(sample *s)
{
    size_t n = 0;
    Keyload__V1__SetTransferHold *h = calloc(1, sizeof *h);
    Keyload__V1__Mutation *m = calloc(1, sizeof *m);
    if (h == NULL || m == NULL)
        golden_die("later samples: out of memory");
    keyload__v1__set_transfer_hold__init(h);
    h->hold_ms = 15000;
    keyload__v1__mutation__init(m);
    m->kind_case = KEYLOAD__V1__MUTATION__KIND_SET_TRANSFER_HOLD;
    m->set_transfer_hold = h;
    s[n++] = (sample){"set_transfer_hold", m};
    uint8_t *member_pk = malloc(32); /* freed with the sample (free_unpacked) */
    Keyload__V1__SetMemberKey *k = calloc(1, sizeof *k);
    Keyload__V1__Mutation *mk = calloc(1, sizeof *mk);
    if (k == NULL || mk == NULL || member_pk == NULL)
        golden_die("later samples: out of memory");
    for (size_t i = 0; i < 32; i++)
        member_pk[i] = (uint8_t)(0xa0 + i);
    keyload__v1__set_member_key__init(k);
    k->partition = 2;
    k->member = 7;
    k->public_key.data = member_pk;
    k->public_key.len = 32;
    keyload__v1__mutation__init(mk);
    mk->kind_case = KEYLOAD__V1__MUTATION__KIND_SET_MEMBER_KEY;
    mk->set_member_key = k;
    s[n++] = (sample){"set_member_key", mk};
    return n;
}

void golden_canon_vectors(FILE *out)
{
    sample s[32], later[8];
    size_t n = samples(s), nl = later_samples(later);
    /* A new mutation kind needs its sample (in later_samples) before the vectors can be written. */
    if (n + nl != keyload__v1__mutation__descriptor.n_fields)
        golden_die("%zu samples for %u mutation kinds", n + nl, keyload__v1__mutation__descriptor.n_fields);
    for (size_t i = 0; i < nl; i++)
        if ((unsigned)later[i].m->kind_case != keyload__v1__mutation__descriptor.fields[n + i].id)
            golden_die("later sample %zu is not kind %u", i, keyload__v1__mutation__descriptor.fields[n + i].id);
    for (size_t i = 0; i < n; i++)
        if ((unsigned)s[i].m->kind_case != keyload__v1__mutation__descriptor.fields[i].id)
            golden_die("sample %zu is not kind %u", i, keyload__v1__mutation__descriptor.fields[i].id);
    fprintf(out, "# method %s principal %s; one sample per mutation kind\n\n", GOLDEN_BATCH_METHOD,
            GOLDEN_PRINCIPAL);
    Keyload__V1__Mutation *all[32];
    for (size_t i = 0; i < n; i++) {
        one_vector(out, &s[i], (uint8_t)i);
        all[i] = s[i].m;
    }
    other_digests(out, all, n);
    /* Later additions to a kind, appended so the vectors above stay as they were: a
     * SetDatabaseLimits that changes only the limits its `fields` names (bits 1 and 8). */
    Keyload__V1__Mutation *partial = gb_set_db_limits("acme", "main", gb_db_limits(250, 0, 0, true, 7));
    partial->set_database_limits->fields = 1u | 8u;
    fprintf(out, "\n");
    one_vector(out, &(sample){"set_database_limits_fields", partial}, 0x80);
    for (size_t i = 0; i < nl; i++)
        one_vector(out, &later[i], (uint8_t)(0x81 + i));
    golden_arena_free();
    for (size_t i = 0; i < nl; i++)
        keyload__v1__mutation__free_unpacked(later[i].m, NULL);
}
