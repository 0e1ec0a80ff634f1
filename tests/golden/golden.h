/* golden: byte-for-byte vectors of the write path, recorded from a fixed workload.
 *
 * Three in-process partitions (0 = catalog, 1 = source, 2 = destination), each a real
 * RocksDB store and a kl_node behind a one-member log driven by hand (every proposal is made
 * durable with kl_store_log_write and applied at once, as a one-member Raft group would).
 * Clocks, randomness, ids and keys are fixed, so every encoding, stored record, token and
 * receipt is the same on every run; the only random bytes (the store's FormatRecord:
 * incarnation and creation time, written by kl_store_open with libsodium and time()) are
 * masked in the dumps. */
#ifndef KL_GOLDEN_H
#define KL_GOLDEN_H

#include "daemon/node.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define GOLDEN_PARTITIONS 3

/* One proposal waiting in the hand-driven log. */
typedef struct golden_prop {
    uint64_t index, term;
    uint8_t *bytes;
    size_t len;
} golden_prop;

typedef struct golden_node {
    char dir[512];
    int partition;
    kl_store *store;
    kl_node *node;
    uint64_t term, next_index;
    bool serving;                 /* leads (golden_open) or follows (golden_follow) */
    golden_prop props[64];
    size_t n_props;
} golden_node;

/* The answer of one submitted batch. */
typedef struct golden_reply {
    int count;
    kl_code code;
    kl_err err;
    uint8_t *receipt;
    size_t len;
} golden_reply;

/* One submitted batch of the workload, kept for the vectors and for the replay. */
typedef struct golden_step {
    char name[64];
    int partition;
    char principal[64];
    uint8_t *req;
    size_t req_len;
    golden_reply reply;
} golden_step;

typedef struct golden_run {
    golden_node nodes[GOLDEN_PARTITIONS];
    golden_step steps[128];
    size_t n_steps;
    FILE *tokens;                 /* reads and tokens the workload prints (NULL: none) */
} golden_run;

/* The cluster secret every node has (database signing keys derive from it). */
extern const uint8_t golden_cluster_secret[32];
/* The fixed clock every node reads (Unix ms); the workload advances it. */
extern int64_t golden_now;

/* Opens (creating when empty) partition p's store under dir and its node; entries logged
 * but not yet applied are applied, as a restarted member does. Exits on failure. */
void golden_open(golden_node *g, const char *dir, int partition);
/* Opens a new store in dir as a follower of leader's partition and applies every entry of
 * leader's log from its stored bytes, as a follower does. */
void golden_follow(golden_node *leader, golden_node *g, const char *dir);
void golden_close(golden_node *g);
/* Submits one encoded BatchRequest as principal, commits whatever it proposed. */
void golden_submit(golden_node *g, const char *principal, const uint8_t *req, size_t len,
                   golden_reply *r);
/* Carries every catalog change partition 0 has and `to` lacks. */
void golden_carry_catalog(golden_node *from, golden_node *to);
void golden_reply_free(golden_reply *r);

/* The scripted workload over run->nodes (already open). */
void golden_workload(golden_run *run);
/* The node's reads over the workload's state: each answer, to run->tokens. */
void golden_reads(golden_run *run);
/* Refused batches after the workload: code, detail and message of each, to run->tokens. */
void golden_refusals(golden_run *run);
/* Every mutation kind's sample request: canonical encoding, wire bytes and digest. */
void golden_canon_vectors(FILE *out);
/* Every key and value of g's store, hex, in key order; 'L' (log) keys to log_out, the rest
 * (the state key space) to state_out. */
void golden_dump_store(golden_node *g, FILE *state_out, FILE *log_out);

/* One line of a fixture's requests.txt: "name partition principal code request answer
 * detail" (hex; "-" for an empty answer or detail). Pointers point into the line; req and
 * ans are malloc'd. */
typedef struct golden_request {
    const char *name, *principal, *code, *detail;
    int partition;
    uint8_t *req, *ans;
    size_t req_len, ans_len;
} golden_request;
void golden_parse_request(char *line, golden_request *q);
/* 0 when the reply is the recorded answer; else prints the first difference and returns 1. */
int golden_compare(const golden_request *q, const golden_reply *r);
/* The daemon fixture's commands (net.c); -1 when argv is none of them. */
int golden_net_main(int argc, char **argv);

void golden_hex(FILE *out, const uint8_t *p, size_t n);
void golden_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
