/* bench_fixture: what keyload-bench's modes share: the monotonic clock, latency vectors
 * and percentiles, the client threads' state and the gate that starts and stops them, the
 * members of one partition (connections, MemberStatus, finding the leader), request
 * building, the queue setup of the unsealed modes, and the CPU time of a process. */
#ifndef KL_BENCH_FIXTURE_H
#define KL_BENCH_FIXTURE_H

#include "client/keyload.h"
#include "common/rpc.h"
#include "common/status.h"
#include "keyload/v1/catalog.pb-c.h"
#include "keyload/v1/queue.pb-c.h"
#include "tests/bench/bench.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct bench_lat {
    uint64_t *v;             /* nanoseconds */
    size_t n, cap;
} bench_lat;

typedef struct bench_client {
    pthread_t thread;
    int id;
    const bench_options *opt;
    char url[URL_MAX];       /* where this client sends; follows NOT_LEADER hints */
    bench_lat lat;
    bench_lat step_lat[4];   /* --in-flight transfers: each step's call start to answer (create,
                              * accept, receipt read, complete), for measured transfers that
                              * succeeded */
    uint64_t ok;             /* measured, answered OK */
    uint64_t errors;         /* measured, answered with an error */
    uint64_t total;          /* every request sent, warm-up included */
    kl_code first_err;
    char first_err_msg[KL_ERR_MESSAGE_MAX + KL_ERR_DETAIL_MAX + 8];
    int open_failed;
    kl_client *sdk;          /* sealed bench: this thread's client (its own sessions) */
} bench_client;

/* The gate between the SDK's done callbacks (an SDK thread) and the one client thread that
 * collects answered calls (--in-flight K): each slot has an `answered` flag under mu, and
 * `answered` counts the flags set and not yet taken. */
typedef struct bench_pipe {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int answered;
} bench_pipe;
void bench_pipe_init(bench_pipe *p);
void bench_pipe_destroy(bench_pipe *p);
/* From a done callback: the slot's answer time into *t1, its flag set, the collector woken. */
void bench_pipe_mark(bench_pipe *p, bool *flag, int64_t *t1);
/* The collector: waits until some slot is answered (every call ends within the SDK's timeout). */
void bench_pipe_wait(bench_pipe *p);
/* The collector: whether the slot (busy: it has a call) is answered; if so, taken. */
bool bench_pipe_take(bench_pipe *p, bool *flag, bool busy);

/* K zeroed slots of slot_size bytes for a pipelined loop; NULL (with the reason in
 * cs->first_err_msg) when memory is short. */
void *bench_slots_new(bench_client *cs, int k, size_t slot_size);

/* --transfer: the checks of a transfer step's receipt (one result of `kind`; Complete must
 * answer Delivered) and the client's first error with the step that failed in front, shared
 * by the blocking and the pipelined client (bench_transfer.c). */
kl_code bench_xfer_receipt_check(const kl_receipt *r, int kind, kl_err *err);
void bench_xfer_first_err(bench_client *cs, const char *step, kl_code rc, const kl_err *err);

/* --transfer --in-flight K: the measured loop of client cs with K transfers outstanding
 * (bench_transfer_pipe.c); returns once every started transfer has ended. */
void bench_transfer_pipelined(bench_client *cs, const kl_message *msg);

/* The gate of a run's client threads (bench_enqueue.c, bench_transfer.c): they wait for
 * bench_go, stop at bench_stop, and count a request only when it started at or after
 * bench_measure_from and ended by bench_measure_to. */
extern atomic_int bench_go;               /* start barrier */
extern atomic_int bench_stop;
extern _Atomic int64_t bench_measure_from; /* monotonic ns; requests started earlier are warm-up */
extern _Atomic int64_t bench_measure_to;   /* monotonic ns; 0 = open */
extern atomic_long bench_ops_left;
extern atomic_int bench_primed;           /* sealed bench: clients done with their first batch */

int64_t bench_now_ns(void);
void bench_sleep_ns(int64_t ns);
int bench_lat_push(bench_lat *l, uint64_t ns);
int bench_cmp_u64(const void *a, const void *b);
/* Nearest-rank percentile of a sorted array. */
uint64_t bench_pct(const uint64_t *v, size_t n, double p);
/* The first `clients` clients' latencies of one kind, merged and sorted: step < 0 their
 * requests' (lat), 0..3 one transfer step's (step_lat[step]). *n is how many. Malloc'd
 * (the caller frees); NULL, with *n 0, only when memory is short. */
uint64_t *bench_lat_sorted(const bench_client *cs, int clients, int step, size_t *n);
/* --lat-out: the sorted latencies (ns) as microseconds, one a line. */
int bench_lat_write(const char *path, const uint64_t *v, size_t n);
/* The CPU time pid has used: utime+stime of /proc/PID/stat (clock ticks, in ns) and the sum
 * of its threads' /proc/PID/task/TID/schedstat run times (ns; -1 when unreadable). */
int bench_proc_cpu(long pid, double *stat_ns, double *sched_ns);

/* ---- requests ---- */

void bench_lane_ref(Keyload__V1__QueueLaneRef *r, const char *queue);
/* Packs b into *buf (grown as needed); returns the length or 0 on OOM. */
size_t bench_pack_batch(const Keyload__V1__BatchRequest *b, uint8_t **buf, size_t *cap);
/* The database default/default, then queue o->queue pinned to partition 0 (existing ones
 * are fine), through the member at url. 0 or -1 (reason on stderr). */
int bench_setup_queue(const bench_options *o, const char *url);

/* ---- members of one partition: connections and MemberStatus (bench_members.c) ---- */

typedef struct bench_members {
    int n;
    const char *url[MAX_URLS];
    kl_rpc_client *conn[MAX_URLS];
    uint64_t member[MAX_URLS];   /* member id learned from MemberStatus; 0 = not yet */
    int partition;
} bench_members;

void bench_ms_init(bench_members *s, const bench_options *o);
/* The connection to member i, dialed when missing; NULL (err set) when it cannot be dialed. */
kl_rpc_client *bench_ms_conn(bench_members *s, int i, int connect_ms, kl_err *err);
/* Forgets member i's connection. */
void bench_ms_drop(bench_members *s, int i);
void bench_ms_close(bench_members *s);
int bench_ms_index(const bench_members *s, const char *url);
/* "pPmM" of member i, "?" while its id is not known. */
const char *bench_ms_node(const bench_members *s, int i, char *buf, size_t cap);
/* keyload.v1.MemberStatus of member i; *out belongs to the caller. */
kl_code bench_ms_status(bench_members *s, int i, int timeout_ms, Keyload__V1__MemberStatusAnswer **out,
                        kl_err *err);
bool bench_is_serving_leader(const Keyload__V1__MemberStatusAnswer *a);
/* The index of a member that leads and serves (skipping `skip`), polled until deadline
 * (monotonic ns); -1 then. With out, its status (caller frees). */
int bench_ms_find_leader(bench_members *s, int skip, int64_t deadline, Keyload__V1__MemberStatusAnswer **out);
/* bench_ms_find_leader over every member for up to LEADER_WAIT_NS; on failure says so and
 * closes the set. */
int bench_ms_wait_leader(bench_members *s, Keyload__V1__MemberStatusAnswer **out);

/* ---- the sealed bench (bench_sealed.c) ---- */

/* The sealed enqueue client thread (arg: its bench_client). */
void *bench_sealed_client_main(void *arg);

/* The leader's cost counters (MemberStatus fields 15-20) and who it was. */
typedef struct bench_cost_snap {
    bool ok;
    uint64_t member, term;
    uint64_t sealed_requests, session_ns, authz_requests, authz_ns, hellos, hello_ns;
    uint64_t applied_index;
} bench_cost_snap;

void bench_cost_read(bench_members *ms, int li, bench_cost_snap *out);
/* Appends the cost figures to the bench line (no newline). */
void bench_cost_print(const bench_cost_snap *x, const bench_cost_snap *y, double p50_us);

#endif
