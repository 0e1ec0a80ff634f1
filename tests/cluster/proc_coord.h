/* Process tests of keyload-coordinator (docs/ARCHITECTURE.md "Coordinator") against real processes:
 * nine keyloadd members (3 partitions x 3 members, replica_count 3, sessions REQUIRED: member
 * key pairs, public keys in the cluster file, one cluster secret) and bin/keyload-coordinator
 * processes started with a config file written here. Loopback ports 13000..13999 (other
 * suites own other ranges; all below Linux's ephemeral range).
 *
 * Principals (tenant acme): "root" bootstraps and counts; "coord" is the coordinator's
 * principal and "other" a second transfer creator, both persisted cluster administrators
 * (the coordinator reauthorizes its principal as an administrator on every turn) with
 * QueuePublish and QueueInspect on src.* and dst.* in each test's database. Each suite has
 * its own database: a coordinator discovers every pending intent of its database, so one
 * suite's leftovers (another principal's or a refused transfer stays pending forever) must
 * not become the next suite's first event, which an exact failpoint cut relies on.
 *
 * The suites:
 *   RemoteTransferRecoveryTests  one transfer per cut, "workers": 1 so the first hit of a
 *                                failpoint is that transfer: the coordinator cut before any
 *                                Accept, after the Accept committed, after Complete; the
 *                                source leader (before Complete) and the destination leader
 *                                (before, and right after, the Accept) kill -9'd while a
 *                                sleep failpoint parks the coordinator with the transfer half
 *                                done (checked at the kill; it must then meet the outage and
 *                                retry); the whole cluster cold-restarted between Accept and
 *                                Complete; SIGTERM while parked after the Accept (the drain
 *                                ends the turn between two calls, exit 0, no Complete sent).
 *                                Each ends with one destination message, the
 *                                receipt token byte-identical across the cut, the source
 *                                Delivered with that same receipt, and every Accept and
 *                                Complete its coordinators sent under the command ids
 *                                derived here (no retry or restart minted a new identity).
 *   TwoCoordinatorTests          two coordinators (same principal and config, own status
 *                                files) race over 500 transfers: all Delivered, 500 distinct
 *                                messages at the destination, both really worked.
 *   CoordinatorPrincipalTests    a null principal discovers nothing and says once that it
 *                                idles; another principal's transfers are not driven while
 *                                the coordinator's own are delivered.
 *   CoordinatorPolicyRepairTests the destination QueuePublish revoked: each denied Accept is
 *                                retained (no terminal failure), the fresh failure read
 *                                refuses a witness while the policy epoch is unchanged, the
 *                                deterministic Accept (id derived here) answers its committed
 *                                denial; the grant restored: each repaired to generation 2
 *                                and delivered once; the historical Accept still denied. Then
 *                                the source publish grant revoked: the Accept commits, the
 *                                Complete is denied and retained, and once the grant is back
 *                                it is repaired (generation 2) and completed with the
 *                                generation-1 receipt.
 *   CoordinatorCapacityRetryTests (KL-6) a full destination: the quota refusal retained, room
 *                                made, the coordinator cut (exit failpoints) between witness
 *                                and Advance and between Advance and the next Accept, the
 *                                source leader killed -9 before each restart: one message,
 *                                generation 2's receipt; then a receipt made by an operator
 *                                while the coordinator holds a failure wins over any witness.
 *   RemoteTransferAdvanceTests   the same by hand through the SDK: forged witnesses refused,
 *                                each advance one reserved record plus its exact bytes, the
 *                                ceiling refused exactly at MaxQueueTransferAcceptAttempts.
 *   CoordinatorBacklogTests      10,000 intents over 100 lanes in both directions, a cold
 *                                restart, then 32 workers at 1 ms deliver them all; peak RSS
 *                                (VmHWM) under 64 MiB with a buffer bound smaller than the
 *                                backlog.
 *
 * The suites share one cluster (cc_fx.keep, as proc_transfer.c does); coordinators never
 * outlive their suite. Every process is started by fork/exec with a bounded lifetime (alarm(2)
 * survives exec and ends it; PR_SET_PDEATHSIG kills it if this process dies) and is killed
 * by its pid, also after a failed check (cc_after_test).
 *
 * Files: proc_coord_fixture.c (the fixture cc_fx: cluster, principals, SDK clients,
 * coordinator processes, their logs and status files), proc_coord_sdk.c (transfers and
 * reads through the SDK, the command id derived independently), proc_coord_make.c (many
 * transfers created fast), then one file per concern: proc_coord_recovery.c
 * (RemoteTransferRecoveryTests), proc_coord_load.c (TwoCoordinatorTests,
 * CoordinatorInFlightTests, CoordinatorBacklogTests), proc_coord_policy.c
 * (CoordinatorPrincipalTests, CoordinatorPolicyRepairTests), proc_coord_retry.c
 * (CoordinatorCapacityRetryTests, RemoteTransferAdvanceTests). */
#ifndef KL_TESTS_PROC_COORD_H
#define KL_TESTS_PROC_COORD_H

#include "tests/cluster/proc.h"
#include "tests/cluster/rf3.h"

#include "client/keyload.h"
#include "common/guid.h"
#include "keyload/v1/catalog.pb-c.h"
#include "keyload/v1/transfer.pb-c.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CC_PARTS RF3_PARTS
#define CC_MEMBERS RF3_MEMBERS
#define CC_SRC 1 /* the recovery cuts' source partition */
#define CC_DST 2 /* and destination partition */
#define CC_TIMEOUT_MS 15000
/* A coordinator's lifetime: a few minutes (members get PROC_LIFETIME_S); normally each is
 * killed long before. */
#define CC_COORD_LIFETIME_S 300
#define CC_COORDS 2
#define CC_EXIT_FAILPOINT 77 /* common/failpoint.h: `exit` is _exit(77) */

enum { WHO_ROOT, WHO_COORD, WHO_OTHER, CC_WHOS };
extern const char *const cc_who_id[CC_WHOS];

/* ---- the fixture: processes and clients the suites share ---- */

typedef struct cc_who {
    uint8_t pk[32], sk[64];
    char key_path[760];
} cc_who;

/* SDK clients per (principal, database), opened on first use and closed before a cold
 * restart (the suites then say Hello to the new processes). */
#define CC_CONNS 32
typedef struct cc_conn {
    int who;
    char db[64];
    kl_client *c;
} cc_conn;

typedef struct cc_coord {
    pid_t pid;
    char config[760], log[760], status[760];
} cc_coord;

typedef struct cc_fixture {
    rf3 cluster;        /* the nine members (tests/cluster/rf3.h) */
    bool up;            /* members were started: cc_stop_all has processes to stop */
    bool keep;          /* the suite that ends leaves the cluster to the next one */
    int runs;           /* clusters made so far (each is named after the count) */
    cc_who whos[CC_WHOS];
    cc_conn conns[CC_CONNS];
    int nconns;
    cc_coord coords[CC_COORDS]; /* pid -1: not running */
} cc_fixture;

/* The one fixture of the coordinator suites (proc_coord_fixture.c). */
extern cc_fixture cc_fx;

/* A coordinator's config (cc_coord_config): 0 in a field means its default here. */
typedef struct cc_opts {
    const char *db;
    int who; /* -1: "transfer_coordinator_principal_id": null */
    unsigned workers, flush_ms, buffer, discovery_ms, max_records, call_timeout_ms;
    unsigned max_work;     /* discovery.max_work; 0: 16 */
    unsigned call_threads; /* 0: the default */
    bool defaults;         /* write no tuning key at all: the shipped defaults */
} cc_opts;

kl_client *cc_client(int who, const char *db);
int cc_leader(int p);
bool cc_wait_all(int timeout_ms);
void cc_kill(int p, int m);
void cc_spawn(int p, int m);
bool cc_cold_restart(void);
kl_code cc_send(kl_client *c, kl_batch *b, kl_receipt **out, kl_err *err);
bool cc_ensure(char *why, size_t cap);
kl_code cc_grant(const char *db, int who, Keyload__V1__Permission perm, const char *pattern, kl_err *err);
bool cc_database(const char *db, char *why, size_t cap);
kl_code cc_queue(const char *db, const char *name, int partition, kl_err *err);
bool cc_coord_config(int i, const char *tag, const cc_opts *o);
void cc_coord_start(int i, const char *failpoints);
int cc_coord_wait(int i, int timeout_ms);
int cc_coord_stop(int i);
bool cc_exited_with(int st, int code);
int cc_log_count(int i, const char *a, const char *b);
int cc_wait_log(int i, const char *msg, const char *tid, int timeout_ms);
json_t *cc_status_load(int i);
long long cc_counter(const json_t *st, const char *name);
long cc_vmhwm_kib(pid_t pid);

/* ---- transfers through the SDK (proc_coord_sdk.c) ---- */

typedef struct cc_tok {
    uint8_t b[4096];
    size_t n;
} cc_tok;

typedef char cc_id[KL_COMMAND_ID_TEXT_LEN + 1];

bool cc_tok_set(cc_tok *t, const uint8_t *p, size_t n);
bool cc_tok_eq(const cc_tok *t, const uint8_t *p, size_t n);
kl_code cc_create(kl_client *c, const char *src, const char *lane, const char *tid, const char *dst,
                  const char *dst_lane, const char *body, kl_err *err);
kl_code cc_receipt(kl_client *c, const char *dst, const char *src, const char *lane, const char *tid,
                   cc_tok *tok, kl_err *err);
uint32_t cc_state(kl_client *c, const char *src, const char *lane, const char *tid, cc_tok *receipt);
bool cc_wait_state(kl_client *c, const char *src, const char *lane, const char *tid, uint32_t want,
                   int timeout_ms);
long long cc_messages(kl_client *root, const char *queue);
int cc_receive(kl_client *root, const char *queue, const char *lane, int max, char (*bodies)[64]);
long cc_pending_on(kl_client *c, int p, uint32_t max);
bool cc_command_id(const char *step, const char *principal, const char *db,
                   const Keyload__V1__InspectQueueTransferAnswer *a, const char *tid, char out[KL_GUID_TEXT_LEN + 1]);
uint64_t cc_token_generation(const uint8_t *p, size_t n);
bool cc_history(kl_client *c, const char *src, const char *tid, uint64_t *gen, uint32_t event, int *events,
                cc_tok *cur);
bool cc_drain_one(kl_client *root, const char *queue, char body[64]);
kl_code cc_enqueue(kl_client *root, const char *queue, const char *body, kl_err *err);
bool cc_accept_id(kl_client *c, const char *db, const char *src, const char *tid, char out[KL_GUID_TEXT_LEN + 1],
                  cc_tok *token, char *dlane, size_t dlane_cap);

/* ---- many transfers, created fast (proc_coord_make.c) ---- */

/* A set of transfers: `lanes` source lanes l00.. of src (each to the same-named lane of dst,
 * so that no lane retains more than per_lane records: every lane keeps its intents or
 * receipts forever within MaxScanRecords and MaxBatchBytes), per_lane each, created by
 * `who` in batches of per_batch Creates (one source lane per batch). Bodies
 * "<tag>-<lane>-<i>" are distinct. */
#define CC_BATCH_MAX 50
typedef struct cc_plan {
    const char *db, *src, *dst, *tag;
    int who, lanes, per_lane, per_batch; /* per_batch <= CC_BATCH_MAX */
} cc_plan;

long cc_make_all(const cc_plan *plans, int n, int threads_per_plan, char *why, size_t cap);
/* The plan's database, its source queue on src_partition and destination queue on
 * dst_partition, then all its transfers (one thread per lane); false with why filled. */
bool cc_make_pair(const cc_plan *plan, int src_partition, int dst_partition, char *why, size_t cap);
/* Polls every 200 ms, up to timeout_ms, until partition CC_SRC lists no pending intent and
 * dst holds total messages; the last counts in *pending and *held either way. */
bool cc_wait_drained(kl_client *op, kl_client *root, const char *dst, long long total, int timeout_ms,
                     long *pending, long long *held);

/* Opens a suite: its name on stderr, `why` and `err` for its checks, the cluster up. */
#define CC_BEGIN(name)                                                                                             \
    fprintf(stderr, "  " name "\n");                                                                               \
    char why[1024] = "";                                                                                           \
    kl_err err;                                                                                                    \
    kl_err_clear(&err);                                                                                            \
    CHECK(cc_ensure(why, sizeof why), "cluster: %s", why)

/* Runs one step of a suite (a function whose CHECKs return from it) and returns from the
 * suite when the step failed. */
#define CC_STEP(call)                                                                                              \
    do {                                                                                                           \
        call;                                                                                                      \
        if (failures_in_test != 0)                                                                                 \
            return;                                                                                                \
    } while (0)

#endif
