/* nemesis: a fault-injection harness on real processes. tests/nemesis/run.sh builds the
 * network namespaces and the disk image, then runs build/nemesis in the hub namespace:
 * main.c starts the cluster (3 partitions x 3 members, replica_count 3, each member in its
 * own namespace) and the coordinator, workload.c drives a recorded client workload through
 * the C SDK, faults.c injects the faults a seed picks and heals them, check.c checks the
 * history. Every process is started by this program and stopped by its pid. */
#ifndef KL_NEMESIS_H
#define KL_NEMESIS_H

#include "client/keyload.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define NM_PARTS 3
#define NM_MEMBERS 3 /* voters of each partition */
/* Member slots of each partition: a slot is one network namespace with its own address and
 * data directory. Data partitions have one spare slot, where the membership fault starts a
 * new member identity before the member it replaces leaves (members.c). */
#define NM_SLOTS 4
#define NM_CLIENT_PORT 7000
#define NM_PEER_PORT 7100
#define NM_ELECTION_MS 1000
#define NM_DATABASE "nem/db"

typedef struct nm_member {
    int p, m;     /* partition and slot */
    int id;       /* member id (a replacement gets a new one, never reused) */
    bool active;  /* a member of its partition's configuration, run by this program */
    char slot[8]; /* the slot's name pPmS: its namespace, link and data directory */
    char node[8]; /* keyloadd --node: pPmID */
    char pub[64]; /* public member key (base64) */
    char join_file[600]; /* non-empty while joining: its cluster file, started with --join */
    char ns[64];
    char addr[32];
    char url[64];
    char key[600];
    char data[600];
    char log[600];
    char clock_file[600]; /* libfaketime's FAKETIME_TIMESTAMP_FILE: "+0" unless stepped */
    pid_t pid;            /* > 0 while this program started it and has not reaped it */
    bool started_once;
    bool paused;
    bool link_down;
    bool nft_rules;
    char failpoints[128]; /* armed at its next start only, then cleared */
} nm_member;

typedef struct nm_cluster {
    char root[512];
    char work[512];
    char tag[32];
    char file[600];
    char secret[600];
    char faketime_lib[600]; /* the wall clock preload; empty: clock faults unavailable */
    bool libfaketime;       /* it is libfaketime (else build/nemesis-clockshim.so) */
    bool init_store_flag;   /* keyloadd --help mentions --init-store */
    bool eio_available;     /* the daemon accepts the store.log_write failpoint */
    nm_member mb[NM_PARTS][NM_SLOTS];
    int last_id[NM_PARTS]; /* the highest member id each partition has known */
    /* While a replacement runs in p: the cluster file p's members start from, naming p's
     * configuration in effect ("" = file). A member whose log holds no configuration entry
     * yet takes its partition's members from it, and file names the new member already. */
    char member_file[NM_PARTS][600];
    char disk_node[8];
    char disk_dir[512];
    char lossy_node[8];   /* the member whose store is on lossyfs (power loss); "" = none */
    char lossy_dir[512];  /* its mount point; lossy.pid and lossy.state beside it */
    char coord_cfg[600];
    char coord_log[600];
    pid_t coord_pid;
    char root_key[600], consumer_key[600], coord_key[600];
} nm_cluster;

extern nm_cluster nm;

int64_t nm_now_ms(void);
void nm_sleep_ms(int ms);
/* Runs a shell command; its exit status (-1 if it could not run). Quiet unless it fails. */
int nm_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* main.c: processes */
/* Writes the cluster file at path from the active members (plus extra, when not NULL),
 * through a temporary file and rename: members and clients may read it at any time. */
bool nm_write_cluster_file(const char *path, const nm_member *extra);
/* A member key file for mb (keyloadd keygen), its public key into mb->pub. */
bool nm_member_keygen(nm_member *mb);
bool nm_member_start(nm_member *mb);
void nm_member_kill(nm_member *mb);
bool nm_member_alive(nm_member *mb);
bool nm_coord_start(void);
void nm_coord_kill(void);
bool nm_coord_alive(void);
/* The member of p that serves as leader (with a valid catalog lease on a data partition),
 * or -1; MemberStatus needs no session. */
int nm_leader(int p, int timeout_ms);
/* ms until partition p serves again (polled), or -1 after timeout_ms. */
int64_t nm_wait_serving(int p, int timeout_ms);

/* faults.c */
typedef enum nm_fault {
    F_KILL_LEADER,
    F_KILL_FOLLOWER,
    F_KILL_COORD,
    F_COLD_RESTART,
    F_PAUSE,
    F_PARTITION,
    F_ONEWAY,
    F_CLOCK,
    F_DISK_FULL,
    F_EIO,
    F_POWER_LOSS,
    F_MEMBER,
    F_SLOW_DISK,
    F_KINDS
} nm_fault;
const char *nm_fault_name(nm_fault f);
/* Runs the fault schedule until deadline_ms; test schedule: each available kind at least
 * min_each times. No fault starts after hard_deadline_ms (0: none); returns false when the
 * planned faults did not all run. */
bool nm_faults_run(uint64_t seed, int64_t deadline_ms, int min_each, int64_t hard_deadline_ms);
/* Heals everything: links up, rules gone, clocks back, processes continued and restarted. */
void nm_heal_all(void);
void nm_faults_report(void);
/* Removes a fault's leftovers on exit (nft tables live in namespaces run.sh deletes). */
void nm_faults_cleanup(void);
/* The next value of the fault schedule's generator (the seed's). */
uint64_t nm_fault_rng(void);

/* members.c: the membership fault, and the member set as the partitions report it */
typedef struct nm_member_stats {
    int runs, done, failed, killed_mid, leader_replaced;
} nm_member_stats;
extern nm_member_stats nm_mstats;
/* Replaces a member of a data partition by a new identity in the spare slot (the seed picks
 * the partition, the member, and whether a member is killed -9 in the middle); returns the
 * partition. */
int nm_fault_member_replace(char *what, size_t cap);
/* Whether partition p's committed configuration (Members, asked through its leader) is
 * exactly the active members' ids; *why says how it differs. */
bool nm_members_agree(int p, char *why, size_t cap);

/* workload.c */
typedef enum nm_op {
    OP_ENQUEUE,
    OP_RECEIVE,
    OP_ACK,
    OP_RELEASE,
    OP_STATS,
    OP_TRANSFER,
    OP_INSPECT,
    OP_REVOKE,
    OP_RESTORE,
    OP_REPLAY,
    OP_KINDS
} nm_op;
bool nm_setup(void);
bool nm_workload_start(uint64_t seed);
/* The cluster file changed (a member replaced): every workload client is reopened from it
 * before its next call. */
void nm_workload_reopen(void);
/* A client of the bootstrapped administrator (a cluster administrator), or NULL. */
kl_client *nm_admin_client(void);
void nm_workload_stop(void);
void nm_workload_report(void);
/* A timed fresh read of workload queue q (0: nq-a on partition 1, 1: nq-b on partition 2). */
void nm_probe_read(int q);

/* check.c: every check counts; returns the number of violations. nm_check_offline runs the
 * checks that need no running cluster (nm_check_history adds "every process answers"). */
int nm_check_history(void);
int nm_check_offline(void);
extern bool nm_check_quiet; /* no per-check lines (the self-test) */
/* selftest.c: each check fed a made-up history with known violations; failures. */
int nm_selftest(void);

/* The recorded history (workload.c owns it; check.c reads it after the workload stopped). */
typedef enum nm_outcome { OUT_OK, OUT_REFUSED, OUT_UNKNOWN } nm_outcome;

typedef struct nm_enq {
    char body[32];
    int queue;
    nm_outcome out;
    uint64_t message_id;
} nm_enq;

typedef struct nm_delivery {
    char body[32];
    int queue;
    int64_t t_send; /* first attempt of its receive */
    int64_t t_end;
    bool consumer;  /* received by the consumer principal (the one revoked) */
} nm_delivery;

typedef struct nm_ack {
    char body[32];
    int queue;
    nm_outcome out;
    int64_t t_end;
} nm_ack;

typedef struct nm_read {
    int queue;
    uint64_t messages;
    uint64_t enq_ok_before_send;
    uint64_t acks_sent_before_end;
} nm_read;

typedef struct nm_xfer {
    char id[40];
    char body[32];
    nm_outcome out;
} nm_xfer;

typedef struct nm_revoke {
    int64_t t_ok;        /* revoke answered OK */
    int64_t t_restore;   /* restore sent (INT64_MAX while none) */
} nm_revoke;

typedef struct nm_history {
    pthread_mutex_t mu;
    nm_enq *enq;
    size_t n_enq, cap_enq;
    nm_delivery *dlv;
    size_t n_dlv, cap_dlv;
    nm_ack *ack;
    size_t n_ack, cap_ack;
    nm_read *rd;
    size_t n_rd, cap_rd;
    nm_xfer *xf;
    size_t n_xf, cap_xf;
    nm_revoke rv[4096];
    size_t n_rv;
    uint64_t codes[OP_KINDS][KL_CODE_COUNT + 1];
    uint64_t replay_mismatch;   /* replays of an OK command id that answered otherwise */
    uint64_t replays;
    uint64_t unknown_principal; /* UNAUTHENTICATED for a principal that exists */
    uint64_t fresh_inspect_missing;
    uint64_t bad_codes;          /* answers outside an operation's documented codes */
    uint64_t heals;              /* faults healed (and the final heal) */
    uint64_t serve_timeouts;     /* heals after which a partition did not serve in time */
    char first_serve_timeout[256];
    char first_bad[256];
    char bad_kinds[16][160];     /* each distinct (operation, code, detail) outside the codes */
    size_t n_bad_kinds;
    uint64_t eio_no_exit;        /* members that kept running after their log write failed */
    uint64_t eio_idle;           /* eio runs whose partition committed too little to make
                                  * the member write 5 times: not counted in eio_runs */
    uint64_t power_loss_failed;  /* power losses lossyfs did not confirm */
    uint64_t eio_runs, power_loss_runs; /* those faults injected */
    uint64_t slow_runs;          /* slow-disk faults injected */
    uint64_t slow_down;          /* members not running at the end of their slow-disk hold */
    uint64_t probe_reads, probe_no_answer; /* reads with one follower down (nm_probe_read) */
    uint64_t member_changes, member_changes_failed; /* membership faults run, not finished */
    char first_member_failure[256];
    uint64_t members_checked, members_disagree;      /* Members against the harness's set */
    char first_members_disagree[256];
    int64_t probe_max_ms, probe_sum_ms;
} nm_history;

extern nm_history nm_hist;
extern const char *const nm_queues[2];

/* After healing: every remaining message of the workload queues (bodies) and of the
 * transfer destination, and each transfer's state. */
typedef struct nm_final {
    char (*remain)[32];
    size_t n_remain;
    char (*dest)[32];
    size_t n_dest;
    int *xfer_state; /* per nm_hist.xf: 2 Delivered, 1 pending, 0 not found, -1 unreadable */
    bool drained;
} nm_final;
extern nm_final nm_fin;
bool nm_final_state(void);

#endif
