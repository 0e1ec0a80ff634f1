/* Test harness for the partition core: a real RocksDB store in a temporary directory and
 * a kl_node whose I/O the test drives by hand (append completion, clock, randomness). */
#ifndef KL_TEST_HARNESS_H
#define KL_TEST_HARNESS_H

#include "daemon/node.h"
#include "keyload/v1/queue.pb-c.h"

#include <stdbool.h>

typedef struct th_reply {
    int count;
    kl_code code;
    kl_err err;
    uint8_t *receipt;
    size_t len;
} th_reply;

/* A proposal the fake log holds until th_persist commits it. */
typedef struct th_prop {
    uint64_t index, term;
    uint8_t *bytes;
    size_t len;
} th_prop;

/* The node with a fake single-member log in place of the replication driver: proposals
 * queue up; th_persist makes the oldest durable (kl_store_log_write) and applies it, as a
 * one-member Raft group would. */
typedef struct th_node {
    char dir[256];
    kl_store *store;
    kl_node *node;
    int64_t now;
    bool boot_clock;              /* io.boot_ns reads boot_ms; false (default): now */
    int64_t boot_ms;
    uint64_t rand_counter;
    bool auto_persist;            /* commit every proposal as soon as the submit returns */
    bool serving;                 /* what io.next reports */
    uint64_t term;
    uint64_t next_index;
    th_prop props[4096];
    size_t n_props;
    kl_limits limits;
    int partition;                /* which partition this node serves (th_open: 0) */
    int partition_count;          /* partitions in the cluster (th_open: 1) */
    bool require_sessions;        /* false (default): insecure_local_admin, as "local" */
    const char *principal;        /* who th_submit acts as; NULL = "local" (no session) */
    const char *reader;           /* who th_queue_messages reads as; NULL = "local" */
    bool group;                   /* io.flush_soon set: batches wait in the group for kl_node_flush */
    int flush_asked;              /* io.flush_soon calls */
    kl_code propose_code;         /* non-OK: io.propose refuses with it */
    int64_t outcome_retention_ms; /* the node's (read at th_reopen); 0 (default): for ever */
} th_node;

/* The cluster secret every harness node has (database signing keys derive from it). */
extern const uint8_t th_cluster_secret[32];

/* Every file and directory a unit test creates lives under one root per run, made by
 * th_run_root_make before the first suite and removed by th_run_root_remove after the last,
 * so a test that fails between its own setup and cleanup (Check ends it in its forked child
 * at the failed assertion) leaves nothing behind. */
int th_run_root_make(void);
void th_run_root_remove(void);
/* A fresh directory under the run's root, named `prefix`-XXXXXX. */
void th_tmpdir_named(char *out, size_t cap, const char *prefix);
/* th_tmpdir_named with the prefix "kl-unit". */
void th_tmpdir(char *out, size_t cap);
void th_rmrf(const char *dir);
/* Just past the last nonzero byte of a file (0 for an empty or all-zero one): where the
 * records of a zero-filled journal segment end. */
long th_file_data_end(const char *path);
/* Overwrites n bytes of a file at off (a torn write's lost half, when they are zeros). */
void th_file_poke(const char *path, long off, const uint8_t *bytes, size_t n);
/* Flips one bit of the byte at off: synced data gone bad. */
void th_file_flip(const char *path, long off);

void th_open(th_node *t, const char *dir, const kl_limits *limits);
/* Like th_open, for partition `partition` of a cluster of `count`; partition 0 gets the
 * database default/default, other partitions start with an empty catalog copy. */
void th_open_as(th_node *t, const char *dir, int partition, int count);
void th_close(th_node *t);          /* node and store; keeps the directory */
void th_reopen(th_node *t);
/* Commits the oldest proposal: durable log write, then kl_node_apply. */
void th_persist(th_node *t);
/* Only the durable log write of the oldest proposal (a crash before apply follows). */
void th_persist_only(th_node *t);
/* Commits every queued proposal. */
void th_drain(th_node *t);

void th_reply_free(th_reply *r);
kl_node_reply_fn th_reply_fn(void);

/* Batch building. */
typedef struct th_batch th_batch;
th_batch *th_batch_new(uint8_t cmd_byte);
void th_batch_cmd(th_batch *b, const uint8_t cmd[16]);
/* A catalog batch: database default/default exists after th_open. */
void th_create_database(th_batch *b, const char *tenant, const char *database);
void th_bootstrap(th_batch *b, const char *tenant, const char *database, const char *admin,
                  const uint8_t pk[32], const uint8_t proof[32]);
void th_create(th_batch *b, const char *queue, uint64_t max_messages, uint64_t max_bytes,
               uint32_t max_deliveries, const char *dlq);
/* The last th_create's placement (-1: partition 0 chooses) and database. */
void th_batch_set_partition(th_batch *b, int partition);
void th_batch_set_database(th_batch *b, const char *database); /* last create or enqueue */
/* The last th_create_database's DatabaseLimits. */
/* The last th_create_database's MaxQueueTransferAcceptAttempts (present = not null). */
void th_batch_set_db_accept_attempts(th_batch *b, uint64_t attempts);
void th_batch_set_db_limits(th_batch *b, uint64_t scan, uint64_t batch_bytes, uint64_t read_bytes);
void th_delete(th_batch *b, const char *queue);
/* Principal management in tenant "default"; grants are on database "default". admin_of:
 * the database it administers, or NULL. field/header: one allowed key, or NULL for none. */
void th_create_principal(th_batch *b, const char *id, const uint8_t pk[32], bool cluster_admin,
                         const char *admin_of);
void th_grant(th_batch *b, const char *id, Keyload__V1__Permission perm, const char *pattern,
              const char *field, const char *header);
void th_revoke(th_batch *b, const char *id, Keyload__V1__Permission perm, const char *pattern);
void th_set_key(th_batch *b, const char *id, const uint8_t pk[32]);
/* An enqueue (default lane) whose message carries the field and/or header key (or none). */
void th_enqueue_keys(th_batch *b, const char *queue, const char *body, const char *field,
                     const char *header);
void th_enqueue(th_batch *b, const char *queue, const char *lane, const char *body);
void th_receive(th_batch *b, const char *queue, const char *lane, uint32_t max, uint32_t lease_ms);
/* A Receive (default lane) that waits up to wait_ms for messages. */
void th_receive_wait(th_batch *b, const char *queue, uint32_t max, uint32_t lease_ms, uint32_t wait_ms);
void th_ack(th_batch *b, const char *queue, const uint8_t *tokens, size_t n);
void th_release(th_batch *b, const char *queue, const uint8_t *tokens, size_t n);
/* Encodes and frees the batch. */
uint8_t *th_batch_pack(th_batch *b, size_t *len);

/* Submits and returns the reply (auto_persist decides whether it completes at once). */
void th_submit(th_node *t, const uint8_t *req, size_t len, th_reply *r);
/* One-shot: build, submit, expect code. Returns the decoded receipt (or NULL). */
Keyload__V1__BatchReceipt *th_run(th_node *t, th_batch *b, kl_code expect);
/* Like th_run for an expected error, which it copies into *err. */
void th_run_err(th_node *t, th_batch *b, kl_code expect, kl_err *err);

uint64_t th_queue_messages(th_node *t, const char *queue, uint64_t *in_flight);

#endif
