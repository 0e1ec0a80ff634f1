/* rf3: the sessions-required RF3 cluster the transfer and coordinator process tests run on
 * (tests/cluster/proc_transfer.c, proc_coord_*.c): 3 partitions x 3 members,
 * replica_count 3, a cluster secret and a key pair per member with the public keys in the
 * cluster file, generous timers (nine daemons and a coordinator share two cores).
 *
 * An rf3 owns its file names and the pids of its members. Members are started by
 * proc_exec (proc.h: log appended, KEYLOAD_FAILPOINTS as asked, a bounded lifetime, killed
 * with the test process) and stopped by pid (kill -9), never by name. Invariant: pid[p][m] > 0
 * exactly while this process started member (p, m) and has not reaped it. */
#ifndef KL_TESTS_RF3_H
#define KL_TESTS_RF3_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define RF3_PARTS 3
#define RF3_MEMBERS 3

typedef struct rf3 {
    char run[32];      /* the cluster's name: file, key and data names start with it */
    int base;          /* client port of p0m1; peer ports follow each client port */
    char file[700];    /* the cluster file */
    char secret[700];  /* the cluster secret file */
    char url[RF3_PARTS][RF3_MEMBERS][64];
    char log[RF3_PARTS][RF3_MEMBERS][760];
    char mkey[RF3_PARTS][RF3_MEMBERS][700];
    pid_t pid[RF3_PARTS][RF3_MEMBERS];
    unsigned lifetime_s; /* each member's alarm */
} rf3;

/* Fresh keys and cluster file for run `run` under work/, client ports base, base + 2, ...
 * (peer ports odd); old stores of that run name are removed first. No member runs yet. */
bool rf3_write(rf3 *c, const char *run, int base, unsigned lifetime_s, char *why, size_t cap);

void rf3_spawn(rf3 *c, int p, int m, const char *failpoints);
/* kill -9 and reap; nothing when it does not run. */
void rf3_kill(rf3 *c, int p, int m);
void rf3_kill_all(rf3 *c);
/* Whether member (p, m) still runs (reaps it and says so on stderr when it exited). */
bool rf3_alive(rf3 *c, int p, int m);
/* The member of p that serves as leader (with a valid catalog lease on a data partition),
 * or -1. MemberStatus needs no session. */
int rf3_leader(rf3 *c, int p);
/* Every partition has a serving leader within timeout_ms. */
bool rf3_wait_all(rf3 *c, int timeout_ms);
/* Starts all nine (none armed) and waits up to timeout_ms for every partition to serve. */
bool rf3_start_all(rf3 *c, int timeout_ms);
/* kill -9 of all nine, then rf3_start_all(40 s); prints how long serving again took. The
 * caller closes its SDK clients first (they said Hello to the old processes). */
bool rf3_cold_restart(rf3 *c);

#endif
