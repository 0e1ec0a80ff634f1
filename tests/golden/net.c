/* The daemon fixture: a one-partition workload sent to a real keyloadd over its client port
 * (without a session: the cluster file sets insecure_local_admin), and its replay against
 * another keyloadd binary opening the same store (tests/golden/daemon-fixture.sh).
 *
 *   golden secret FILE          writes the fixed cluster secret (32 bytes, mode 0600)
 *   golden net-write URL DIR    runs the workload, writes DIR/requests.txt
 *   golden net-replay URL DIR   sends every request again, compares each answer */
#include "tests/golden/build.h"
#include "tests/golden/golden.h"

#include "common/canon.h"
#include "common/rpc.h"

#include <fcntl.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NET_METHOD "keyload.v1.Batch"
#define NET_TIMEOUT_MS 10000

typedef struct net_answer {
    kl_code code;
    kl_err err;
    uint8_t *bytes;
    size_t len;
} net_answer;

static net_answer net_call(const char *url, const char *method, const uint8_t *req, size_t len)
{
    net_answer a = {0};
    kl_rpc_client *c;
    a.code = kl_rpc_client_open(url, 2000, 0, &c, &a.err);
    if (a.code != KL_OK)
        return a;
    a.code = kl_rpc_invoke(c, method, req, len, NET_TIMEOUT_MS, &a.bytes, &a.len, NULL, 0, &a.err);
    kl_rpc_client_close(c);
    return a;
}

/* Waits (at most 30 s) until the member serves: a QueueStats of a queue that does not exist
 * is answered by the engine, not refused for want of a leader. */
static void wait_serving(const char *url)
{
    Keyload__V1__QueueStatsRequest q = KEYLOAD__V1__QUEUE_STATS_REQUEST__INIT;
    q.queue = gb_lane("default", "default", "__probe", NULL);
    uint8_t buf[256];
    size_t n = keyload__v1__queue_stats_request__pack(&q, buf);
    for (int i = 0; i < 300; i++) {
        net_answer a = net_call(url, "keyload.v1.QueueStats", buf, n);
        free(a.bytes);
        if (a.code != KL_UNAVAILABLE && a.code != KL_NOT_LEADER && a.code != KL_DEADLINE_EXCEEDED)
            return;
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    golden_die("%s does not serve after 30 s", url);
}

static void write_line(FILE *f, const char *name, const uint8_t *req, size_t len, const net_answer *a)
{
    fprintf(f, "%s 0 local %s ", name, kl_code_name(a->code));
    golden_hex(f, req, len);
    fputc(' ', f);
    if (a->code == KL_OK && a->len)
        golden_hex(f, a->bytes, a->len);
    else
        fputc('-', f);
    fprintf(f, " %s\n", a->code != KL_OK && a->err.detail[0] ? a->err.detail : "-");
}

typedef struct net_run {
    const char *url;
    FILE *out;
} net_run;

/* Sends one batch under command id (cmd_byte, 0x44...), records it, returns the answer
 * (caller frees bytes). Any other code than want ends the run. */
static net_answer net_step(net_run *r, const char *name, uint8_t cmd_byte, Keyload__V1__Mutation *m, kl_code want)
{
    uint8_t cmd[16];
    memset(cmd, 0x44, sizeof cmd);
    cmd[0] = cmd_byte;
    size_t len;
    uint8_t *req = gb_pack(cmd, &m, 1, &len);
    net_answer a = net_call(r->url, NET_METHOD, req, len);
    if (a.code != want)
        golden_die("step %s: want %s, got %s (%s: %s)", name, kl_code_name(want), kl_code_name(a.code),
                   a.err.detail, a.err.message);
    write_line(r->out, name, req, len, &a);
    free(req);
    return a;
}

static void net_ok(net_run *r, const char *name, uint8_t cmd_byte, Keyload__V1__Mutation *m)
{
    net_answer a = net_step(r, name, cmd_byte, m, KL_OK);
    free(a.bytes);
}

static Keyload__V1__QueueLaneRef *dl(const char *q) { return gb_lane("default", "default", q, NULL); }

static void catalog_part(net_run *r)
{
    uint8_t root[32], alice[32], alice2[32], proof[32], seed[32], sk[64];
    memset(seed, 0x01, sizeof seed);
    crypto_sign_seed_keypair(root, sk, seed);
    memset(seed, 0x02, sizeof seed);
    crypto_sign_seed_keypair(alice, sk, seed);
    memset(seed, 0x03, sizeof seed);
    crypto_sign_seed_keypair(alice2, sk, seed);
    if (kl_canon_bootstrap_proof(golden_cluster_secret, "acme", "main", "root", root, 32, proof) != 0)
        golden_die("bootstrap proof");
    net_ok(r, "bootstrap", 0x01, gb_bootstrap("acme", "main", "root", root, proof));
    net_ok(r, "create_database", 0x02, gb_create_database("default", "default", gb_db_limits(0, 0, 0, true, 3)));
    net_ok(r, "create_principal", 0x03, gb_create_principal("default", "alice", alice, false, false, NULL));
    net_ok(r, "grant_publish", 0x04,
           gb_grant("alice", "default", KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "q*", "f1", "h1"));
    net_ok(r, "revoke_publish", 0x05, gb_revoke("alice", "default", KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "q*"));
    net_ok(r, "set_principal_key", 0x06, gb_set_key("alice", alice2));
    net_ok(r, "set_database_limits", 0x07, gb_set_db_limits("default", "default", gb_db_limits(5000, 0, 0, true, 3)));
    net_ok(r, "pause_database", 0x08, gb_pause("default", "default", NULL, true));
    net_ok(r, "resume_database", 0x09, gb_pause("default", "default", NULL, false));
    net_ok(r, "create_queue", 0x0a, gb_create_queue(dl("q"), 100, 0, 5, NULL, -1));
    net_ok(r, "create_queue_tmp", 0x0b, gb_create_queue(dl("tmp"), 0, 0, 0, NULL, -1));
}

static ProtobufCBinaryData token_of(const net_answer *a, size_t i)
{
    Keyload__V1__BatchReceipt *rc = keyload__v1__batch_receipt__unpack(NULL, a->len, a->bytes);
    if (rc == NULL || rc->n_results != 1 || rc->results[0]->kind_case != KEYLOAD__V1__MUTATION_RESULT__KIND_RECEIVED ||
        rc->results[0]->received->n_messages <= i)
        golden_die("receive answered no message %zu", i);
    ProtobufCBinaryData t = golden_bin(rc->results[0]->received->messages[i]->lease_token.data,
                                       rc->results[0]->received->messages[i]->lease_token.len);
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    return t;
}

static void queue_part(net_run *r)
{
    net_ok(r, "enqueue_rich", 0x20, gb_enqueue(dl("q"), gb_msg_rich()));
    net_ok(r, "enqueue_plain", 0x21, gb_enqueue(dl("q"), gb_msg("plain")));
    net_answer a = net_step(r, "receive", 0x22, gb_receive(dl("q"), 2, 30000, 0), KL_OK);
    ProtobufCBinaryData t0 = token_of(&a, 0), t1 = token_of(&a, 1);
    free(a.bytes);
    net_ok(r, "ack", 0x23, gb_ack(dl("q"), &t0, 1));
    net_ok(r, "release", 0x24, gb_release(dl("q"), &t1, 1));
    net_ok(r, "pause_lane", 0x25, gb_pause("default", "default", gb_lane("default", "default", "q", "default"), true));
    net_ok(r, "resume_lane", 0x26, gb_pause("default", "default", gb_lane("default", "default", "q", "default"), false));
    net_ok(r, "delete_queue", 0x27, gb_delete_queue(dl("tmp")));
    /* A refusal ("q" holds messages): evaluated again on replay, it must refuse the same way. */
    net_answer d = net_step(r, "delete_queue_refused", 0x28, gb_delete_queue(dl("q")), KL_FAILED_PRECONDITION);
    free(d.bytes);
}

static int net_write(const char *url, const char *dir)
{
    char path[768];
    snprintf(path, sizeof path, "%s/requests.txt", dir);
    net_run r = {.url = url, .out = fopen(path, "w")};
    if (r.out == NULL)
        golden_die("cannot write %s", path);
    wait_serving(url);
    catalog_part(&r);
    queue_part(&r);
    fclose(r.out);
    golden_arena_free();
    return 0;
}

static int net_replay(const char *url, const char *dir)
{
    char path[768];
    snprintf(path, sizeof path, "%s/requests.txt", dir);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        golden_die("cannot read %s", path);
    wait_serving(url);
    char *line = NULL;
    size_t cap = 0;
    int n = 0, failed = 0;
    while (getline(&line, &cap, f) > 0) {
        golden_request q;
        golden_parse_request(line, &q);
        net_answer a = net_call(url, NET_METHOD, q.req, q.req_len);
        golden_reply r = {.count = 1, .code = a.code, .err = a.err, .receipt = a.bytes,
                          .len = a.code == KL_OK ? a.len : 0};
        failed += golden_compare(&q, &r);
        n++;
        free(a.bytes);
        free(q.req);
        free(q.ans);
    }
    free(line);
    fclose(f);
    printf("daemon replay: %d command ids replayed, %d answered differently\n", n, failed);
    return n == 0 || failed ? 1 : 0;
}

static int write_secret(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, golden_cluster_secret, 32) != 32 || close(fd) != 0)
        golden_die("cannot write %s", path);
    return 0;
}

int golden_net_main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "secret") == 0)
        return write_secret(argv[2]);
    if (argc == 4 && strcmp(argv[1], "net-write") == 0)
        return net_write(argv[2], argv[3]);
    if (argc == 4 && strcmp(argv[1], "net-replay") == 0)
        return net_replay(argv[2], argv[3]);
    return -1;
}
