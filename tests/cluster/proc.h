/* proc: what the process tests' files share (tests/cluster/proc_test.c owns the
 * definitions): the RPC and batch builders, the clock, and the check macro. A failed
 * CHECK counts a failure and returns from the test function. */
#ifndef KL_PROC_H
#define KL_PROC_H

#include "common/status.h"
#include "keyload/v1/catalog.pb-c.h"
#include "keyload/v1/queue.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

extern const char *daemon_bin;
extern char work[512];
extern char url[128];      /* where call() sends */
extern int failures_in_test;

#define CHECK(cond, ...)                                                                         \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                    \
            fprintf(stderr, __VA_ARGS__);                                                        \
            fprintf(stderr, "\n");                                                               \
            failures_in_test++;                                                                  \
            return;                                                                              \
        }                                                                                        \
    } while (0)

typedef struct answer {
    kl_code code;
    kl_err err;
    uint8_t *bytes;
    size_t len;
} answer;

int64_t now_ms(void);
void sleep_ms(int ms);
void answer_free(answer *a);
/* One request to `url` on a fresh connection. */
answer call(const char *method, const uint8_t *req, size_t len, int timeout_ms);

/* Batches owned through protobuf-c's free; refs name default/default. */
Keyload__V1__QueueLaneRef *mkref(const char *queue);
Keyload__V1__BatchRequest *batch_new(const uint8_t cmd[16]);
Keyload__V1__Mutation *add_mut(Keyload__V1__BatchRequest *b);
void add_create(Keyload__V1__BatchRequest *b, const char *queue, uint64_t max_messages);
void add_create_database(Keyload__V1__BatchRequest *b);
void add_enqueue(Keyload__V1__BatchRequest *b, const char *queue, const char *body);
void add_receive(Keyload__V1__BatchRequest *b, const char *queue, uint32_t max, uint32_t lease_ms);
/* Bootstraps admin_id (public key admin_pk) of database "TENANT/DB" through the SDK,
 * without a session, proving the cluster secret read from secret_file. command_id NULL: a
 * fresh one. On KL_OK *out (when not NULL) is the receipt (kl_receipt_free). */
struct kl_receipt;
kl_code sdk_bootstrap(const char *cluster_file, const char *secret_file, const char *database,
                      const char *admin_id, const uint8_t admin_pk[32], const char *command_id,
                      struct kl_receipt **out, kl_err *err);
/* keyload.v1.MemberStatus of the member at client_url (no session needed); NULL when it
 * does not answer within timeout_ms. Free with keyload__v1__member_status_answer__free_unpacked. */
Keyload__V1__MemberStatusAnswer *member_status(const char *client_url, int timeout_ms);
/* A QueueStatsRequest for default/default/queue, packed into buf; returns its length. */
size_t pack_stats_request(const char *queue, uint8_t buf[512]);
/* Packs and frees b. */
uint8_t *pack_free(Keyload__V1__BatchRequest *b, size_t *len);

/* How long a process started by a test may live at most: past the process suite's whole
 * budget (a cluster may serve several suites); normally each is killed long before. */
#define PROC_LIFETIME_S 900
/* fork/exec of argv (argv[0] the binary) with stdout and stderr appended to log,
 * KEYLOAD_FAILPOINTS set to failpoints (NULL: unset), ended by SIGALRM after lifetime_s
 * (neither keyloadd nor keyload-coordinator handles it: alarm(2) survives exec) or by
 * SIGKILL when the test process dies first (PR_SET_PDEATHSIG; call it from the main
 * thread, whose exit is the test's). */
pid_t proc_exec(char *const argv[], const char *log, const char *failpoints, unsigned lifetime_s);
/* Starts keyloadd as member pPmM of the cluster file (log in work/), without failpoints.
 * Every helper passes --init-store: tests create their directories, and the flag changes
 * nothing on a store that is already the member's (proc_test.c's store identity test
 * starts members without it). */
pid_t spawn_member(const char *cluster, int partition, int member);
/* Makes a cluster secret file and a member key file with `keyloadd keygen` (removing old
 * ones first); pub_b64 receives the member's public key (base64, 44 characters). */
bool keygen_files(const char *secret_path, const char *member_key_path, char *pub_b64, size_t cap);
/* One member key file at path (removed first) by `keyloadd keygen --secret-out`; its public
 * key (base64) into pub_b64. */
bool member_keygen(const char *path, char *pub_b64, size_t cap);
/* The same with a given cluster secret file and member key file (NULL: none). */
pid_t spawn_keyloadd(const char *cluster, int partition, int member, const char *secret, const char *member_key);

/* proc_retain.c */
void test_outcome_retention(void);
void rt_stop_all(void);
void test_snapshot_catchup(void);
void test_snapshot_kill_after_compact(void);
void test_snapshot_kill_during_flush(void);
void test_snapshot_open_off_loop(void);
void test_snapshot_log_bytes_bound(void);
void test_snapshot_cut_midstream(void);
void sn_stop_all(void);

/* proc_poll.c */
void test_long_poll(void);
void pl_stop_all(void);

/* proc_peer_auth.c */
void test_peer_auth_refuses_intruders(void);
void pa_stop_all(void);

/* proc_reads.c */
void test_reads_under_member_faults(void);
void test_catalog_barrier_bounded(void);
void test_receive_commits_after_lease(void);
void test_read_confirmed_after_lease(void);
void test_tail_needs_confirmed_leader(void);
void test_self_grant_with_lagging_partition(void);
void test_lagging_tail_grants_no_lease(void);
void rd_stop_sessions(void);
void rd_stop_all(void);

/* proc_catalog.c */
void test_catalog_reaches_every_partition(void);
void test_catalog_lease(void);
void mp_stop_all(void);

/* proc_session.c */
void test_sessions(void);
void ss_stop_all(void);

/* proc_sdk_session.c */
void test_sdk_sessions(void);
void sk_stop_all(void);

/* proc_authz.c */
void test_authz_matrix(void);
void test_authz_revocation(void);
void test_authz_cold_restart(void);
void az_stop_all(void);

/* proc_transfer.c (KL-4): the suites share one cluster; xf_after_test stops it after a
 * failed suite or one that does not leave it to the next, xf_stop_all always. */
void test_xfer_intent(void);
void test_xfer_destination(void);
void test_xfer_receipt(void);
void test_xfer_retention(void);
void test_xfer_coordination_read(void);
void xf_after_test(bool failed);
void xf_stop_all(void);

/* proc_coord_*.c (proc_coord.h): keyload-coordinator processes on their own RF3 cluster, shared
 * by the suites like proc_transfer.c's; cc_after_test always kills the suite's
 * coordinators and stops the cluster after a failed suite, cc_stop_all stops everything. */
void test_coord_recovery(void);
void test_coord_two(void);
void test_coord_pace(void);
void test_coord_many(void);
void test_coord_leader_kill(void);
void test_coord_principal(void);
void test_coord_revoked(void);
void test_coord_capacity(void);
void test_coord_advance(void);
void test_coord_backlog(void);
void cc_after_test(bool failed);
void cc_stop_all(void);

/* proc_learn.c: clients and the coordinator learn partition 1's members from Members while
 * it changes under them (on the coordinator suites' cluster, stopped afterwards). */
void test_learn_members(void);
void lr_stop_all(void);

/* proc_conn.c (KL-8): sessions, connections and peer configuration under faults. */
void test_conn_catalog_behind(void);
void test_conn_limits(void);
void test_conn_peer_config(void);
void cn_stop_all_peers(void);
void cn_stop_all(void);

#endif
