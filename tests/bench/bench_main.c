/* keyload-bench: closed-loop enqueue benchmark against one keyloadd, and a disk fsync probe.
 *
 *   keyload-bench --fsync-probe DIR [--samples N] [--fsync-copies K]
 *       Appends 4 KiB to a scratch file in DIR and fdatasync()s it, N times (default 200);
 *       prints median and p99 in microseconds. This is the floor of a durable write on
 *       that disk: a single-client enqueue cannot answer faster than one synced append.
 *       With --fsync-copies K (1..8, default 1) K threads, each with its own scratch file
 *       in DIR zero-filled first, start each of the N rounds together and write 4 KiB over
 *       those zeros and fdatasync() at once, as the store's journal writes; a round lasts
 *       until the last of the K is done, and the line adds copies=K. At 3 this is the
 *       floor of an RF3 commit whose three members share that disk.
 *
 *   keyload-bench --fsync-cost DIR [--samples N]
 *       What one synced log write costs on that disk, in two ways of writing: 1 KiB
 *       appended (the file grows, as RocksDB's WAL does) and 1 KiB written over a region of
 *       the file written and synced beforehand (the size stays), each fdatasync()ed, N times
 *       (default 200). Prints one "fsync_cost:" line per way: wall median and p99 and the
 *       calling thread's CPU (user + system) per sync.
 *
 *   keyload-bench --wake-probe [--samples N]
 *       What one thread waking another costs here (bench_wake.c): N rounds (default 200)
 *       of a condition-variable signal after a 600 us idle gap, with the two threads on
 *       different CPUs, on one CPU and unpinned. Prints one "wake:" line, medians and p99
 *       in microseconds.
 *
 *   keyload-bench [--url URL] [--clients N] [--batch-size B] [--seconds S | --ops N]
 *                 [--body-size BYTES] [--queue NAME] [--warmup S] [--timeout-ms MS] [--read]
 *       Creates queue NAME (default "bench") if missing, then runs N client threads, each
 *       with its own kl_rpc_client, each sending keyload.v1.Batch requests of B Enqueue
 *       mutations (body BYTES, default 100) with fresh random command ids, one request at
 *       a time (closed loop), for S seconds after a short warm-up (or until N requests in
 *       all have been answered). Prints one line of key=value results: clients, batch size,
 *       batches/s, messages/s, p50/p99/max latency in microseconds, errors.
 *       With --read the clients send keyload.v1.QueueStats reads instead (no log append,
 *       no fsync): the RPC and executor floor that every write pays on top of its fsync.
 *       With --cycle each request is a cycle: the enqueue (batch size 1), then a Receive of
 *       one message and its Ack, each its own batch, in the client's own lane ("c<N>"), so a
 *       run ends with an empty queue (tests/bench/retain_disk.sh measures disk per member).
 *       With --random-body every message gets its own body of new random bytes per batch
 *       (sealed: one body per batch, shared by its messages)
 *       (otherwise one repeating pattern, which RocksDB compresses to a few percent): the
 *       large-state benchmarks use it so that the state on disk is as large as its records.
 *
 *       --url may list several members of one partition (URL,URL,URL): the bench then asks
 *       each for keyload.v1.MemberStatus, waits (up to 60 s) until one leads and serves, and
 *       sends everything there; a client answered NOT_LEADER with a hint follows it.
 *
 *   keyload-bench --leader-of URL,URL,...
 *       Waits (up to 60 s) for a serving leader among the members; prints
 *       "leader: node=pPmM member=M url=URL term=T".
 *
 *   keyload-bench --wait-caught-up URL,URL,...
 *       Waits (up to 60 s) until every member answers MemberStatus, one of them leads and
 *       serves, and every member has applied the leader's commit index (a restarted member
 *       has caught up). Prints "caughtup: ms=... commit_index=...".
 *
 *   keyload-bench --cluster FILE --principal ID --key FILE [--database TENANT/DB] [--queue NAME]
 *                 [--clients N] [--in-flight K] [--batch-size B] [--seconds S] ...
 *       The enqueue benchmark as a principal through the SDK (KL-3): every request sealed
 *       under a session (kl_client_open_principal, one kl_client and so one session per
 *       member per client thread). With --in-flight K each client thread keeps K batches
 *       outstanding through kl_client_batch_start (a new one sent as each is answered), the
 *       way an asynchronous publisher works; each latency is one batch's start to its answer. The queue must exist and the principal must be allowed to
 *       publish to it (run.sh sets that up with the CLI); nothing is created here. The
 *       members come from the cluster file's partition 0. Each client sends one batch before
 *       the clock starts (Hello, LocateQueue); then the leader's keyload.v1.MemberStatus is
 *       read before and after the run and the line adds the deltas of its cost counters
 *       (sealed_requests, session_ns, authz_requests, authz_ns, hellos, hello_ns: loop-thread
 *       time) and the session + authorization time per sealed request, in microseconds and
 *       as a share of the median request time.
 *
 *   keyload-bench --handshake N --cluster FILE --principal ID --key FILE --pid PID [--node pPmM]
 *       Daemon CPU per keyload.v1.Hello (KL-3) against one member (default: the first of
 *       partition 0) whose process is PID. One connection, one call at a time: N
 *       MemberStatus calls, N Hellos (each a fresh handshake, its answer verified with the
 *       member's public key from the cluster file), N MemberStatus calls again. For each
 *       phase the daemon's CPU time is read before and after from /proc/PID/stat
 *       (utime+stime, clock ticks) and from each /proc/PID/task/TID/schedstat (nanoseconds); the
 *       CPU per Hello is the Hello phase's per call minus the MemberStatus phases' (the cost
 *       of any RPC on nng). Also reports hello_ns/hellos from MemberStatus (loop thread).
 *       Prints one "handshake:" line.
 *
 *   keyload-bench --serve-probe URL,URL,... [--since-ms EPOCH_MS] [--queue NAME]
 *       When a restarted member (the first URL) and its partition serve again: ms from
 *       EPOCH_MS (CLOCK_REALTIME, taken before the restart) to the member's first
 *       MemberStatus answer, to its having applied the serving leader's commit index, and to
 *       the first enqueue acknowledged and QueueStats read answered by the serving leader
 *       (the queue must exist). Prints "serve: answer_ms=... caught_up_ms=... write_ms=...
 *       read_ms=...". See bench_serve.c.
 *
 *   keyload-bench --failover --url URL,URL,URL --pid-dir DIR [--run N] [--attempt-ms MS]
 *       One failover measurement. A writer thread sends single-message Batch requests one
 *       after another; each is retried with the same command id (same bytes) until
 *       acknowledged: a NOT_LEADER hint is followed, UNKNOWN_WRITE_OUTCOME or no answer
 *       within MS (default 500) moves on to the next member, a member that cannot be
 *       reached is redialed (a dead one refuses at once). Once the writer has been acked
 *       for a second, the bench finds the leader (MemberStatus), reads its pid from
 *       DIR/pPmM.pid, notes the monotonic time and kill -9s it, then waits for the first
 *       write acknowledged by another member. Prints one "failover:" line: failover_ms
 *       (kill to that ack), elected_ms (kill to a survivor reporting itself a serving
 *       leader), the killed and the new leader's node names, and what the writer saw.
 *       The caller restarts the killed member.
 *
 *   keyload-bench --transfer --cluster FILE --principal ID --key FILE --database TENANT/DB
 *                 --queue SOURCE --dest-queue DEST [--clients N] [--in-flight K] [--seconds S]
 *                 [--lane-every N]
 *       Remote transfers end to end (KL-4) as a principal through the SDK, every request
 *       sealed: each client thread runs, one transfer at a time (with --in-flight K, K at
 *       once through the SDK's asynchronous calls, each on its own lanes, the calls started
 *       on one wake-up sent together by kl_calls_hold), CreateQueueTransfer on
 *       SOURCE's partition, AcceptQueueTransfer of its intent token on DEST's, the fresh
 *       InspectQueueTransferReceipt read of the receipt token, CompleteQueueTransfer on
 *       SOURCE's (which must answer Delivered). Latency is Create sent to Delivered
 *       answered. The principal must be a persisted administrator with QueuePublish and
 *       QueueInspect on both queues. Each lane retains at most MaxScanRecords transfer
 *       records and MaxBatchBytes bytes forever, so a client moves to a fresh lane (named
 *       after it, the same on both sides) every N transfers (default 200). Each client
 *       completes one transfer before the clock starts (Hello with every leader, LocateQueue).
 *       Prints one "transfer:" line: transfers/s, p50/p99/max latency in microseconds,
 *       errors (a transfer with any failed step counts once and is abandoned, pending).
 *
 *   keyload-bench --coord-create N --cluster FILE --principal ID --key FILE --database TENANT/DB
 *                 --queue SOURCE --dest-queue DEST [--clients C] [--lane-every L] [--lane-tag TAG]
 *                 [--drain-seconds S] [--rate R] [--no-wait]
 *       Coordinator-driven transfers (KL-5): C clients create N transfers while a separate
 *       keyload-coordinator drives them; the bench waits until SOURCE has nothing pending
 *       and derives rate and latency from each transfer's commit history (coord.h). Prints
 *       one "coord:" line.
 *
 *   --transfer --in-flight K also takes --trace-out FILE --trace-every N: for each batch
 *   (Create, Accept, Complete) committed at a log index that is a multiple of N, one line
 *   "client trace partition=P index=I step=S cmd=HEX sent=US answered=US" (monotonic
 *   microseconds: the call's start and its answer's arrival on the SDK's I/O thread), which
 *   tests/bench/repl_trace.sh joins to the members' traces of the same host.
 *
 *   Common to the bench and --transfer: --lat-out FILE writes every measured latency there
 *   (microseconds, ascending, one a line; what tests/bench/run.sh plots). The bench also takes
 *   --cpu-pids PID,PID,...: the user+sys CPU time of those processes (/proc/PID/stat) from
 *   the end of the warm-up to the end of the run, divided by the messages acknowledged in
 *   that window, is added as cpu_us_per_msg (the members' cost per message).
 *
 * Output lines start with "fsync:", "bench:", "leader:", "caughtup:", "serve:", "failover:", "transfer:" or "coord:" so
 * scripts can pick them out. Exit code 0 when the run completed (errors are counted and
 * reported, not fatal), 1 when it could not run at all (cannot connect, cannot create the
 * queue, no leader, no ack after a kill within 60 s), 2 on bad usage. */
#include "tests/bench/bench.h"
#include "tests/bench/coord.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: keyload-bench [--url URL] [--clients N] [--batch-size B] [--seconds S | --ops N]\n"
            "                     [--body-size BYTES] [--queue NAME] [--warmup S] [--timeout-ms MS] [--read] [--cycle]\n"
            "                     [--random-body]\n"
            "       keyload-bench --fsync-probe DIR [--samples N] [--fsync-copies K]\n"
            "       keyload-bench --fsync-cost DIR [--samples N]\n"
            "       keyload-bench --wake-probe [--samples N]\n"
            "       keyload-bench --leader-of URL,URL,... | --wait-caught-up URL,URL,...\n"
            "       keyload-bench --serve-probe URL,URL,... [--since-ms EPOCH_MS] [--queue NAME] [--body-size B]\n"
            "       keyload-bench --failover --url URL,URL,... --pid-dir DIR [--run N] [--attempt-ms MS] [--queue NAME]\n"
            "       keyload-bench --cluster FILE --principal ID --key FILE [--database TENANT/DB] [--in-flight K] [bench options]\n"
            "       keyload-bench --handshake N --cluster FILE --principal ID --key FILE --pid PID [--node pPmM]\n"
            "       keyload-bench --transfer --cluster FILE --principal ID --key FILE --database TENANT/DB\n"
            "                     --queue SOURCE --dest-queue DEST [--clients N] [--in-flight K] [--seconds S] [--lane-every N]\n"
            "       keyload-bench --coord-create N --cluster FILE --principal ID --key FILE --database TENANT/DB\n"
            "                     --queue SOURCE --dest-queue DEST [--clients C] [--lane-every L] [--lane-tag TAG]\n"
            "                     [--drain-seconds S] [--rate R] [--no-wait]\n"
            "The bench and --transfer also take --lat-out FILE; the bench --cpu-pids PID,PID,...\n"
            "--transfer --in-flight K also takes --trace-out FILE --trace-every N.\n"
            "URL may be a comma-separated list of the members of one partition (at most %d).\n",
            MAX_URLS);
}

/* Splits a comma-separated URL list (modified in place) into o->urls. */
static int parse_urls(char *list, bench_options *o)
{
    o->n_urls = 0;
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        if (o->n_urls == MAX_URLS || strlen(t) >= URL_MAX)
            return -1;
        o->urls[o->n_urls++] = t;
    }
    if (o->n_urls == 0)
        return -1;
    o->url = o->urls[0];
    return 0;
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* --cpu-pids: a comma-separated list of at most MAX_URLS pids (modified in place). */
static int parse_pids(char *list, bench_options *o)
{
    o->n_cpu_pids = 0;
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        long v;
        if (o->n_cpu_pids == MAX_URLS || parse_int(t, 2, 1L << 30, &v) != 0)
            return -1;
        o->cpu_pids[o->n_cpu_pids++] = v;
    }
    return o->n_cpu_pids > 0 ? 0 : -1;
}

static const struct option bench_longopts[] = {
    {"url", required_argument, NULL, 'u'},        {"clients", required_argument, NULL, 'c'},
    {"batch-size", required_argument, NULL, 'b'}, {"seconds", required_argument, NULL, 's'},
    {"ops", required_argument, NULL, 'o'},        {"fsync-probe", required_argument, NULL, 'f'},
    {"samples", required_argument, NULL, 'n'},    {"body-size", required_argument, NULL, 'B'},
    {"queue", required_argument, NULL, 'q'},      {"warmup", required_argument, NULL, 'w'},
    {"timeout-ms", required_argument, NULL, 't'}, {"help", no_argument, NULL, 'h'},
    {"read", no_argument, NULL, 'r'},             {"cycle", no_argument, NULL, 'y'},
    {"random-body", no_argument, NULL, 'j'},      {"leader-of", required_argument, NULL, 'L'},
    {"serve-probe", required_argument, NULL, 'Q'}, {"since-ms", required_argument, NULL, 'K'},
    {"wait-caught-up", required_argument, NULL, 'W'}, {"failover", no_argument, NULL, 'F'},
    {"pid-dir", required_argument, NULL, 'P'},    {"run", required_argument, NULL, 'R'},
    {"attempt-ms", required_argument, NULL, 'A'},
    {"cluster", required_argument, NULL, 'C'},    {"principal", required_argument, NULL, 'p'},
    {"key", required_argument, NULL, 'k'},        {"database", required_argument, NULL, 'd'},
    {"handshake", required_argument, NULL, 'H'},  {"pid", required_argument, NULL, 'i'},
    {"node", required_argument, NULL, 'N'},
    {"transfer", no_argument, NULL, 'X'},         {"dest-queue", required_argument, NULL, 'D'},
    {"lane-every", required_argument, NULL, 'E'},
    {"coord-create", required_argument, NULL, 'Z'}, {"lane-tag", required_argument, NULL, 'T'},
    {"drain-seconds", required_argument, NULL, 'G'}, {"no-wait", no_argument, NULL, 'Y'},
    {"rate", required_argument, NULL, 'V'},
    {"lat-out", required_argument, NULL, 'l'},    {"cpu-pids", required_argument, NULL, 'U'},
    {"in-flight", required_argument, NULL, 'I'},  {"fsync-cost", required_argument, NULL, 'g'},
    {"fsync-copies", required_argument, NULL, 'e'}, {"wake-probe", no_argument, NULL, 'x'},
    {"trace-out", required_argument, NULL, 'J'},  {"trace-every", required_argument, NULL, 'O'},
    {NULL, 0, NULL, 0}};

/* What an option function makes of its option: taken, a bad value, a bad value already
 * explained on stderr, or not one of its own. */
enum { OPT_TAKEN = 0, OPT_BAD = -1, OPT_BAD_SAID = -2, OPT_OTHER = 1 };

/* The options that choose a mode or name what a mode works on. */
static int apply_mode_option(int ch, char *arg, bench_options *o)
{
    long v;
    char *end;
    switch (ch) {
    case 'u':
    case 'L':
    case 'W':
    case 'Q':
        if (parse_urls(arg, o) != 0)
            return OPT_BAD;
        if (ch != 'u')
            o->mode = ch == 'L' ? MODE_LEADER : ch == 'W' ? MODE_CAUGHT_UP : MODE_SERVE;
        break;
    case 'K':
        if (parse_int(arg, 1, 1L << 50, &v) != 0)
            return OPT_BAD;
        o->since_ms = v;
        break;
    case 'F': o->mode = MODE_FAILOVER; break;
    case 'P': o->pid_dir = arg; break;
    case 'R':
        if (parse_int(arg, 0, 1000000, &v) != 0)
            return OPT_BAD;
        o->run = (int)v;
        break;
    case 'A':
        if (parse_int(arg, 1, 600000, &v) != 0)
            return OPT_BAD;
        o->attempt_ms = (int)v;
        break;
    case 'q': o->queue = arg; break;
    case 'C': o->cluster_file = arg; break;
    case 'p': o->principal = arg; break;
    case 'k': o->key_file = arg; break;
    case 'd': o->database = arg; break;
    case 'N': o->node = arg; break;
    case 'X': o->mode = MODE_TRANSFER; break;
    case 'Z':
        if (parse_int(arg, 1, 10000000, &v) != 0)
            return OPT_BAD;
        o->coord_transfers = v;
        o->mode = MODE_COORD;
        break;
    case 'T': o->lane_tag = arg; break;
    case 'Y': o->no_wait = 1; break;
    case 'G':
    case 'V': {
        double d = strtod(arg, &end);
        if (end == arg || *end != '\0' || !(d > 0) || d > 1000000)
            return OPT_BAD;
        if (ch == 'G')
            o->drain_s = d;
        else
            o->coord_rate = d;
        break;
    }
    case 'D': o->dest_queue = arg; break;
    default: return OPT_OTHER;
    }
    return OPT_TAKEN;
}

/* The options that shape the load and what is measured. */
static int apply_load_option(int ch, char *arg, bench_options *o)
{
    long v;
    char *end;
    switch (ch) {
    case 'l': o->lat_out = arg; break;
    case 'J': o->trace_out = arg; break;
    case 'O':
        if (parse_int(arg, 1, 1000000, &v) != 0)
            return OPT_BAD;
        o->trace_every = (int)v;
        break;
    case 'U':
        if (parse_pids(arg, o) != 0)
            return OPT_BAD;
        break;
    case 'E':
        if (parse_int(arg, 1, 1000000, &v) != 0)
            return OPT_BAD;
        o->lane_every = v;
        break;
    case 'H':
        if (parse_int(arg, 1, 1000000, &v) != 0)
            return OPT_BAD;
        o->handshakes = v;
        o->mode = MODE_HANDSHAKE;
        break;
    case 'i':
        if (parse_int(arg, 2, 1L << 30, &v) != 0)
            return OPT_BAD;
        o->pid = v;
        break;
    case 'f': o->fsync_dir = arg; o->mode = MODE_FSYNC; break;
    case 'g': o->fsync_dir = arg; o->mode = MODE_FSYNC_COST; break;
    case 'x': o->mode = MODE_WAKE; break;
    case 'e':
        if (parse_int(arg, 1, FSYNC_COPIES_MAX, &v) != 0) {
            fprintf(stderr, "keyload-bench: --fsync-copies takes a whole number from 1 to %d, not \"%s\"\n",
                    FSYNC_COPIES_MAX, arg);
            return OPT_BAD_SAID;
        }
        o->fsync_copies = (int)v;
        break;
    case 'c':
        if (parse_int(arg, 1, 4096, &v) != 0)
            return OPT_BAD;
        o->clients = (int)v;
        break;
    case 'I':
        if (parse_int(arg, 1, 1024, &v) != 0)
            return OPT_BAD;
        o->in_flight = (int)v;
        break;
    case 'b':
        if (parse_int(arg, 1, 1000, &v) != 0)
            return OPT_BAD;
        o->batch_size = (int)v;
        break;
    case 'o':
        if (parse_int(arg, 1, 1L << 40, &v) != 0)
            return OPT_BAD;
        o->ops = v;
        break;
    case 'n':
        if (parse_int(arg, 1, 1000000, &v) != 0)
            return OPT_BAD;
        o->samples = (int)v;
        break;
    case 'B':
        if (parse_int(arg, 0, 1 << 20, &v) != 0)
            return OPT_BAD;
        o->body_size = (int)v;
        break;
    case 't':
        if (parse_int(arg, 1, 3600000, &v) != 0)
            return OPT_BAD;
        o->timeout_ms = (int)v;
        break;
    case 's':
    case 'w': {
        double d = strtod(arg, &end);
        if (end == arg || *end != '\0' || !(d >= 0) || d > 86400 || (ch == 's' && d <= 0))
            return OPT_BAD;
        if (ch == 's')
            o->seconds = d;
        else
            o->warmup = d;
        break;
    }
    case 'r': o->read = 1; break;
    case 'y': o->cycle = 1; break;
    case 'j': o->random_body = 1; break;
    default: return OPT_OTHER;
    }
    return OPT_TAKEN;
}

/* The options of argv into *o: -1 when they are all taken, else the exit code (0 after
 * --help, 2 on bad usage, which is explained on stderr). */
static int parse_args(int argc, char **argv, bench_options *o)
{
    int ch, li = -1;
    while ((li = -1, ch = getopt_long(argc, argv, "", bench_longopts, &li)) != -1) {
        if (ch == 'h') {
            usage(stdout);
            return 0;
        }
        int r = apply_mode_option(ch, optarg, o);
        if (r == OPT_OTHER)
            r = apply_load_option(ch, optarg, o);
        if (r == OPT_OTHER) {
            usage(stderr);
            return 2;
        }
        if (r == OPT_BAD)
            goto bad;
        if (r == OPT_BAD_SAID) {
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc)
        goto bad;
    return -1;
bad:
    if (li >= 0)
        fprintf(stderr, "keyload-bench: bad value for --%s: %s\n", bench_longopts[li].name, optarg);
    else
        fprintf(stderr, "keyload-bench: unexpected argument %s\n", argv[optind]);
    usage(stderr);
    return 2;
}

/* Whether the options make a whole command for their mode; 2 (explained) when not, else 0. */
static int check_mode(const bench_options *o)
{
    if (o->mode == MODE_FAILOVER && (o->pid_dir == NULL || o->n_urls < 2)) {
        fprintf(stderr, "keyload-bench: --failover needs --url with the members and --pid-dir\n");
        usage(stderr);
        return 2;
    }
    if (o->mode == MODE_TRANSFER && (o->cluster_file == NULL || o->principal == NULL || o->key_file == NULL ||
                                     o->database == NULL || o->dest_queue == NULL || o->read)) {
        fprintf(stderr, "keyload-bench: --transfer needs --cluster, --principal, --key, --database, --queue "
                        "(the source) and --dest-queue\n");
        usage(stderr);
        return 2;
    }
    if (o->mode == MODE_COORD && (o->cluster_file == NULL || o->principal == NULL || o->key_file == NULL ||
                                  o->database == NULL || o->dest_queue == NULL || o->read)) {
        fprintf(stderr, "keyload-bench: --coord-create needs --cluster, --principal, --key, --database, --queue "
                        "(the source) and --dest-queue\n");
        usage(stderr);
        return 2;
    }
    if (o->mode != MODE_TRANSFER && o->mode != MODE_COORD && (o->principal != NULL || o->mode == MODE_HANDSHAKE) &&
        (o->cluster_file == NULL || o->principal == NULL || o->key_file == NULL ||
         (o->mode == MODE_HANDSHAKE && o->pid == 0) || (o->mode != MODE_BENCH && o->mode != MODE_HANDSHAKE) ||
         o->read)) {
        fprintf(stderr, "keyload-bench: --principal and --handshake need --cluster, --principal and --key "
                        "(--handshake also --pid); --read is unsealed only\n");
        usage(stderr);
        return 2;
    }
    if (o->fsync_copies > 1 && o->mode != MODE_FSYNC) {
        fprintf(stderr, "keyload-bench: --fsync-copies is for --fsync-probe\n");
        usage(stderr);
        return 2;
    }
    if (o->in_flight > 1 && o->mode != MODE_TRANSFER &&
        (o->mode != MODE_BENCH || o->principal == NULL || o->cycle || o->random_body)) {
        fprintf(stderr, "keyload-bench: --in-flight is for --transfer and the sealed enqueue bench (--principal), "
                        "without --cycle or --random-body\n");
        usage(stderr);
        return 2;
    }
    return 0;
}

/* --cluster: loads the file into bench_cluster; the bench sends to partition 0's members.
 * 0, or 2 (explained) when it cannot be used. */
static int load_cluster(bench_options *o)
{
    kl_err err;
    if (kl_cluster_load(o->cluster_file, NULL, &bench_cluster, &err) != KL_OK) {
        fprintf(stderr, "keyload-bench: %s\n", err.message);
        return 2;
    }
    /* The sealed bench talks to partition 0's members (every bench cluster's only one). */
    const kl_partition *p0 = kl_cluster_find_partition(&bench_cluster, 0);
    if (p0 == NULL || p0->member_count < 1 || p0->member_count > MAX_URLS) {
        fprintf(stderr, "keyload-bench: %s: partition 0 needs 1..%d members\n", o->cluster_file, MAX_URLS);
        return 2;
    }
    if (o->mode == MODE_BENCH) {
        o->n_urls = p0->member_count;
        for (int i = 0; i < p0->member_count; i++)
            o->urls[i] = p0->members[i].client_url;
        o->url = o->urls[0];
    }
    return 0;
}

static int run_mode(const bench_options *o)
{
    switch (o->mode) {
    case MODE_FSYNC: return bench_run_fsync(o);
    case MODE_FSYNC_COST: return bench_run_fsync_cost(o);
    case MODE_WAKE: return bench_run_wake(o);
    case MODE_LEADER: return bench_run_leader_of(o);
    case MODE_CAUGHT_UP: return bench_run_wait_caught_up(o);
    case MODE_SERVE: return bench_run_serve_probe(o);
    case MODE_FAILOVER: return bench_run_failover(o);
    case MODE_HANDSHAKE: return bench_run_handshake(o);
    case MODE_TRANSFER: return bench_run_transfer(o);
    case MODE_COORD: {
        bench_coord_opts co = {.cluster_file = o->cluster_file, .principal = o->principal, .key_file = o->key_file,
                               .database = o->database, .queue = o->queue, .dest_queue = o->dest_queue,
                               .lane_tag = o->lane_tag, .transfers = o->coord_transfers, .clients = o->clients,
                               .lane_every = o->lane_every, .body_size = o->body_size, .timeout_ms = o->timeout_ms,
                               .drain_s = o->drain_s, .rate = o->coord_rate, .no_wait = o->no_wait != 0};
        return bench_coord_run(&co);
    }
    default: return bench_run_enqueue(o);
    }
}

int main(int argc, char **argv)
{
    bench_options o = {.url = "tcp://127.0.0.1:7401", .queue = "bench", .clients = 1, .in_flight = 1, .batch_size = 1,
                       .seconds = 5, .warmup = 0.5, .body_size = 100, .timeout_ms = 10000, .samples = 200,
                       .fsync_copies = 1, .attempt_ms = 500, .lane_every = 200, .drain_s = 120};
    o.urls[0] = o.url;
    o.n_urls = 1;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0)
        return rc;
    if (sodium_init() < 0) {
        fprintf(stderr, "keyload-bench: libsodium failed to initialise\n");
        return 1;
    }
    if ((rc = check_mode(&o)) != 0)
        return rc;
    if (o.cluster_file != NULL && (rc = load_cluster(&o)) != 0)
        return rc;
    signal(SIGPIPE, SIG_IGN);
    return run_mode(&o);
}
