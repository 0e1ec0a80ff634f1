/* Replays the requests of a store fixture written by an older binary under this one: each
 * request is sent again with its command id, and its answer must be the stored one, byte
 * for byte (a changed request digest turns a replay into CONFLICT). Also the fixed workload
 * for instruction counts (golden bench). */
#include "tests/golden/build.h"
#include "tests/golden/golden.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static uint8_t *unhex(const char *h, size_t *n)
{
    size_t len = strlen(h);
    if (len % 2 != 0)
        golden_die("odd hex length");
    *n = len / 2;
    uint8_t *out = malloc(*n ? *n : 1);
    for (size_t i = 0; i < *n; i++) {
        unsigned v;
        if (sscanf(h + 2 * i, "%2x", &v) != 1)
            golden_die("bad hex");
        out[i] = (uint8_t)v;
    }
    return out;
}

static void print_diff(const char *name, const uint8_t *want, size_t wn, const uint8_t *got, size_t gn)
{
    size_t i = 0;
    while (i < wn && i < gn && want[i] == got[i])
        i++;
    printf("FAIL replay %s: answer differs at byte %zu (stored %zu bytes, now %zu)\n  stored ", name, i, wn, gn);
    golden_hex(stdout, want, wn);
    printf("\n  now    ");
    golden_hex(stdout, got, gn);
    printf("\n");
}

void golden_parse_request(char *line, golden_request *q)
{
    char *save = NULL;
    memset(q, 0, sizeof *q);
    q->name = strtok_r(line, " \n", &save);
    const char *part = strtok_r(NULL, " \n", &save);
    q->principal = strtok_r(NULL, " \n", &save);
    q->code = strtok_r(NULL, " \n", &save);
    const char *req_hex = strtok_r(NULL, " \n", &save), *ans_hex = strtok_r(NULL, " \n", &save);
    q->detail = strtok_r(NULL, " \n", &save);
    if (q->detail == NULL)
        golden_die("malformed requests.txt line");
    q->partition = atoi(part);
    if (q->partition < 0 || q->partition >= GOLDEN_PARTITIONS)
        golden_die("partition %d", q->partition);
    q->req = unhex(req_hex, &q->req_len);
    q->ans = unhex(strcmp(ans_hex, "-") == 0 ? "" : ans_hex, &q->ans_len);
}

int golden_compare(const golden_request *q, const golden_reply *r)
{
    const char *now_detail = r->code != KL_OK && r->err.detail[0] ? r->err.detail : "-";
    if (strcmp(kl_code_name(r->code), q->code) != 0 || strcmp(now_detail, q->detail) != 0) {
        printf("FAIL replay %s: stored %s %s, now %s %s: %s\n", q->name, q->code, q->detail, kl_code_name(r->code),
               now_detail, r->err.message);
        return 1;
    }
    if (r->len != q->ans_len || (q->ans_len && memcmp(r->receipt, q->ans, q->ans_len) != 0)) {
        print_diff(q->name, q->ans, q->ans_len, r->receipt, r->len);
        return 1;
    }
    return 0;
}

/* Replays one recorded request on its partition; 0 when answered the same. */
static int replay_line(golden_run *run, char *line)
{
    golden_request q;
    golden_parse_request(line, &q);
    golden_reply r;
    golden_submit(&run->nodes[q.partition], q.principal, q.req, q.req_len, &r);
    int bad = golden_compare(&q, &r);
    golden_reply_free(&r);
    free(q.req);
    free(q.ans);
    return bad;
}

int golden_replay(const char *dir)
{
    static golden_run run;
    for (int p = 0; p < GOLDEN_PARTITIONS; p++) {
        char d[768];
        snprintf(d, sizeof d, "%s/p%d", dir, p);
        golden_open(&run.nodes[p], d, p);
    }
    char path[768];
    snprintf(path, sizeof path, "%s/requests.txt", dir);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        golden_die("cannot read %s", path);
    char *line = NULL;
    size_t cap = 0;
    int n = 0, failed = 0;
    while (getline(&line, &cap, f) > 0) {
        n++;
        failed += replay_line(&run, line);
    }
    free(line);
    fclose(f);
    for (int p = 0; p < GOLDEN_PARTITIONS; p++)
        golden_close(&run.nodes[p]);
    printf("replay: %d command ids replayed, %d answered differently\n", n, failed);
    return n == 0 || failed ? 1 : 0;
}

/* One round on partition 2's "dst": enqueue 4, receive 4, ack them. */
static void bench_round(golden_node *g, uint32_t round)
{
    uint8_t cmd[16];
    memset(cmd, 0x77, sizeof cmd);
    memcpy(cmd, &round, sizeof round);
    Keyload__V1__Mutation *enq[4];
    for (int i = 0; i < 4; i++)
        enq[i] = gb_enqueue(gb_lane("default", "default", "dst", NULL), gb_msg("bench message body"));
    size_t len;
    golden_reply r;
    uint8_t *req = gb_pack(cmd, enq, 4, &len);
    golden_submit(g, "local", req, len, &r);
    free(req);
    golden_reply_free(&r);
    cmd[15] = 1;
    Keyload__V1__Mutation *rcv = gb_receive(gb_lane("default", "default", "dst", NULL), 4, 30000, 0);
    req = gb_pack(cmd, &rcv, 1, &len);
    golden_submit(g, "local", req, len, &r);
    free(req);
    Keyload__V1__BatchReceipt *rc = keyload__v1__batch_receipt__unpack(NULL, r.len, r.receipt);
    golden_reply_free(&r);
    if (rc == NULL || rc->n_results != 1 || rc->results[0]->received == NULL)
        golden_die("bench receive");
    Keyload__V1__Received *got = rc->results[0]->received;
    ProtobufCBinaryData toks[4];
    for (size_t i = 0; i < got->n_messages && i < 4; i++)
        toks[i] = got->messages[i]->lease_token;
    cmd[15] = 2;
    Keyload__V1__Mutation *ack = gb_ack(gb_lane("default", "default", "dst", NULL), toks, got->n_messages);
    req = gb_pack(cmd, &ack, 1, &len);
    keyload__v1__batch_receipt__free_unpacked(rc, NULL);
    golden_submit(g, "local", req, len, &r);
    free(req);
    golden_reply_free(&r);
    golden_arena_free();
    golden_now += 1000;
}

int golden_bench(long rounds)
{
    char tmp[] = "/tmp/kl-golden-bench-XXXXXX";
    if (mkdtemp(tmp) == NULL)
        golden_die("mkdtemp");
    static golden_run run;
    for (int p = 0; p < GOLDEN_PARTITIONS; p++) {
        char d[768];
        snprintf(d, sizeof d, "%s/p%d", tmp, p);
        if (mkdir(d, 0700) != 0)
            golden_die("mkdir %s", d);
        golden_open(&run.nodes[p], d, p);
    }
    golden_workload(&run);
    for (long i = 0; i < rounds; i++)
        bench_round(&run.nodes[2], (uint32_t)i);
    for (int p = 0; p < GOLDEN_PARTITIONS; p++)
        golden_close(&run.nodes[p]);
    for (size_t i = 0; i < run.n_steps; i++) {
        free(run.steps[i].req);
        golden_reply_free(&run.steps[i].reply);
    }
    char rm[256];
    snprintf(rm, sizeof rm, "rm -rf '%s'", tmp);
    return system(rm) == 0 ? 0 : 1;
}
