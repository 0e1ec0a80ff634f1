/* proc_coord_load: coordinators under load: two racing over the same transfers
 * (TwoCoordinatorTests), hundreds of turns in flight and the idle cost
 * (CoordinatorInFlightTests), and a 10,000-transfer backlog after a cold restart within a
 * memory bound (CoordinatorBacklogTests) (proc_coord.h). */
#include "tests/cluster/proc_coord.h"

#include <stdlib.h>
#include <unistd.h>
#include <string.h>

/* ---- TwoCoordinatorTests ---- */

#define TWO_DB "acme/two"
#define TWO_LANES 5
#define TWO_PER_LANE 100
#define TWO_TOTAL (TWO_LANES * TWO_PER_LANE)

void test_coord_two(void)
{
    CC_BEGIN("TwoCoordinatorTests");
    CHECK(cc_database(TWO_DB, why, sizeof why), "%s", why);
    CHECK(cc_queue(TWO_DB, "src.two", CC_SRC, &err) == KL_OK, "queue src.two: %s", err.message);
    CHECK(cc_queue(TWO_DB, "dst.two", CC_DST, &err) == KL_OK, "queue dst.two: %s", err.message);
    cc_plan plan = {.db = TWO_DB, .src = "src.two", .dst = "dst.two", .tag = "two", .who = WHO_COORD,
                    .lanes = TWO_LANES, .per_lane = TWO_PER_LANE, .per_batch = 25};
    int64_t t0 = now_ms();
    long made = cc_make_all(&plan, 1, TWO_LANES, why, sizeof why);
    CHECK(made == TWO_TOTAL, "created %ld of %d: %s", made, TWO_TOTAL, why);
    int64_t t1 = now_ms();

    /* The same principal and settings; only the status files (and logs) differ. */
    cc_opts o = {.db = TWO_DB, .who = WHO_COORD, .workers = 4, .flush_ms = 5, .discovery_ms = 100};
    CHECK(cc_coord_config(0, "two-a", &o) && cc_coord_config(1, "two-b", &o), "configs");
    cc_coord_start(0, NULL);
    cc_coord_start(1, NULL);
    kl_client *root = cc_client(WHO_ROOT, TWO_DB), *op = cc_client(WHO_COORD, TWO_DB);
    CHECK(root && op, "clients");
    long pending;
    long long held;
    cc_wait_drained(op, root, "dst.two", TWO_TOTAL, 120000, &pending, &held);
    int64_t t2 = now_ms();
    int sa = cc_coord_stop(0), sb = cc_coord_stop(1);
    CHECK(pending == 0 && held == TWO_TOTAL, "after %lld ms: %ld pending, %lld destination messages (want 0, %d)",
          (long long)(t2 - t1), pending, held, TWO_TOTAL);
    CHECK(cc_exited_with(sa, 0) && cc_exited_with(sb, 0), "drains: wait status %d and %d", sa, sb);
    /* Both raced for real: each sent Accepts and delivered some itself. */
    json_t *a = cc_status_load(0), *b = cc_status_load(1);
    CHECK(a && b, "status files");
    long long acc_a = cc_counter(a, "accept_sent"), acc_b = cc_counter(b, "accept_sent");
    long long del_a = cc_counter(a, "delivered"), del_b = cc_counter(b, "delivered");
    long long dd_a = cc_counter(a, "accept_deduplicated"), dd_b = cc_counter(b, "accept_deduplicated");
    long long fd_a = cc_counter(a, "found_delivered"), fd_b = cc_counter(b, "found_delivered");
    json_decref(a);
    json_decref(b);
    fprintf(stderr, "    %d transfers created in %lld ms; two coordinators delivered them in %lld ms: A sent %lld "
                    "Accepts (%lld deduplicated), delivered %lld, found %lld Delivered; B %lld (%lld), %lld, %lld\n",
            TWO_TOTAL, (long long)(t1 - t0), (long long)(t2 - t1), acc_a, dd_a, del_a, fd_a, acc_b, dd_b, del_b, fd_b);
    CHECK(acc_a > 0 && acc_b > 0 && del_a > 0 && del_b > 0, "one coordinator did nothing: Accepts %lld/%lld, "
          "delivered %lld/%lld", acc_a, acc_b, del_a, del_b);
    /* Exactly one effect each: 500 messages, 500 distinct bodies, every one expected. */
    static char bodies[TWO_PER_LANE + 1][64];
    static bool seen[TWO_TOTAL];
    memset(seen, 0, sizeof seen);
    int distinct = 0;
    for (int l = 0; l < TWO_LANES; l++) {
        char lane[16];
        snprintf(lane, sizeof lane, "l%02d", l);
        int n = cc_receive(root, "dst.two", lane, TWO_PER_LANE + 1, bodies);
        CHECK(n == TWO_PER_LANE, "lane %s of dst.two holds %d messages (want %d)", lane, n, TWO_PER_LANE);
        for (int i = 0; i < n; i++) {
            int bl, bi;
            CHECK(sscanf(bodies[i], "two-%d-%d", &bl, &bi) == 2 && bl == l && bi >= 0 && bi < TWO_PER_LANE,
                  "unexpected body %s in lane %s", bodies[i], lane);
            CHECK(!seen[bl * TWO_PER_LANE + bi], "body %s delivered twice", bodies[i]);
            seen[bl * TWO_PER_LANE + bi] = true;
            distinct++;
        }
    }
    CHECK(distinct == TWO_TOTAL, "%d distinct bodies (want %d)", distinct, TWO_TOTAL);
    /* Every source intent Delivered: none left on the partition's listing, checked on a
     * full page (not only the first item). */
    CHECK(cc_pending_on(op, CC_SRC, 1000) == 0, "pending intents left on partition %d", CC_SRC);
    cc_fx.keep = true;
}

/* ---- CoordinatorDiscoveryPaceTests ---- */

#define PACE_DB "acme/pace"
#define PACE_LANES 4
#define PACE_PER_LANE 50
#define PACE_TOTAL (PACE_LANES * PACE_PER_LANE)
#define PACE_INTERVAL_MS 60000

/* A round's work ceiling (2 pages of 8 intents) bounds each round, not the rate: a round
 * cut at the ceiling is followed by the next at once, so 200 intents are all taken and
 * delivered long before a second 60 s interval would have come; once they are, rounds
 * wait for the interval again (no spinning on an empty or fully buffered listing). */
void test_coord_pace(void)
{
    CC_BEGIN("CoordinatorDiscoveryPaceTests");
    cc_plan plan = {.db = PACE_DB, .src = "src.pace", .dst = "dst.pace", .tag = "pace", .who = WHO_COORD,
                    .lanes = PACE_LANES, .per_lane = PACE_PER_LANE, .per_batch = 25};
    CHECK(cc_make_pair(&plan, CC_SRC, CC_DST, why, sizeof why), "%s", why);
    cc_opts o = {.db = PACE_DB, .who = WHO_COORD, .workers = 8, .flush_ms = 5,
                 .discovery_ms = PACE_INTERVAL_MS, .max_records = 8, .max_work = 2};
    CHECK(cc_coord_config(0, "pace", &o), "config");
    int64_t t0 = now_ms();
    cc_coord_start(0, NULL);
    kl_client *root = cc_client(WHO_ROOT, PACE_DB), *op = cc_client(WHO_COORD, PACE_DB);
    CHECK(root && op, "clients");
    long pending;
    long long held;
    cc_wait_drained(op, root, "dst.pace", PACE_TOTAL, PACE_INTERVAL_MS / 2 - (int)(now_ms() - t0), &pending, &held);
    int64_t t1 = now_ms();
    CHECK(pending == 0 && held == PACE_TOTAL, "after %lld ms (the interval is %d ms): %ld pending, %lld "
          "destination messages (want 0, %d)", (long long)(t1 - t0), PACE_INTERVAL_MS, pending, held, PACE_TOTAL);
    sleep_ms(1000); /* an idle second: no round may follow the one that found the listing done */
    int st = cc_coord_stop(0);
    CHECK(cc_exited_with(st, 0), "drains: wait status %d", st);
    json_t *s = cc_status_load(0);
    CHECK(s, "status file");
    long long rounds = cc_counter(s, "rounds"), listed = cc_counter(s, "listed");
    json_decref(s);
    fprintf(stderr, "    %d intents, 16 a round: delivered in %lld ms, %lld rounds, %lld listed\n", PACE_TOTAL,
            (long long)(t1 - t0), rounds, listed);
    /* 13 rounds cut at the ceiling, the one that found the rest and the end; a few more
     * when intents came back while their turns ran. */
    CHECK(rounds >= PACE_TOTAL / 16 && rounds <= 2 * (PACE_TOTAL / 16) + 4, "%lld discovery rounds", rounds);
    cc_fx.keep = true;
}

/* ---- CoordinatorInFlightTests ---- */

#define MANY_DB "acme/many"
#define MANY_LANES 12
#define MANY_PER_LANE 50
#define MANY_TOTAL (MANY_LANES * MANY_PER_LANE)
#define MANY_WORKERS 400

/* The number after `key=` on coordinator i's first log line holding msg, -1 without one. */
static long cc_log_number(int i, const char *msg, const char *key)
{
    FILE *f = fopen(cc_fx.coords[i].log, "r");
    if (f == NULL)
        return -1;
    char line[2048];
    long v = -1;
    while (v < 0 && fgets(line, sizeof line, f)) {
        const char *k = strstr(line, msg) ? strstr(line, key) : NULL;
        if (k != NULL)
            v = strtol(k + strlen(key), NULL, 10);
    }
    fclose(f);
    return v;
}

/* Threads of a live process (/proc/PID/status), -1 when unreadable. */
static long cc_threads(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    long n = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "Threads:", 8) == 0)
            n = strtol(line + 8, NULL, 10);
    fclose(f);
    return n;
}

/* CPU time (user + system) of a live process in clock ticks, -1 when unreadable. */
static long long cc_cpu_ticks(pid_t pid)
{
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    unsigned long long ut = 0, st = 0;
    if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (long long)(ut + st);
}

/* Hundreds of turns in flight on one loop, no thread per call: a SIGTERM among them ends
 * every one through the cancellation path (exit 0, final status, nothing in flight), and a
 * second coordinator then delivers all of them exactly once, its peak of turns in flight
 * in the hundreds while its threads stay a handful. */
void test_coord_many(void)
{
    CC_BEGIN("CoordinatorInFlightTests");
    CHECK(cc_database(MANY_DB, why, sizeof why), "%s", why);
    CHECK(cc_queue(MANY_DB, "src.many", CC_SRC, &err) == KL_OK, "queue: %s", err.message);
    CHECK(cc_queue(MANY_DB, "dst.many", CC_DST, &err) == KL_OK, "queue: %s", err.message);
    cc_plan plan = {.db = MANY_DB, .src = "src.many", .dst = "dst.many", .tag = "many", .who = WHO_COORD,
                    .lanes = MANY_LANES, .per_lane = MANY_PER_LANE, .per_batch = 50};
    long made = cc_make_all(&plan, 1, 6, why, sizeof why);
    CHECK(made == MANY_TOTAL, "created %ld of %d: %s", made, MANY_TOTAL, why);
    kl_client *root = cc_client(WHO_ROOT, MANY_DB), *op = cc_client(WHO_COORD, MANY_DB);
    CHECK(root && op, "clients");

    /* 1. Four call threads for 400 workers: the turns pile up between their calls. */
    cc_opts o = {.db = MANY_DB, .who = WHO_COORD, .workers = MANY_WORKERS, .flush_ms = 1, .buffer = 2,
                 .discovery_ms = 50, .max_records = 256, .call_threads = 4};
    CHECK(cc_coord_config(0, "many-stop", &o), "config");
    cc_coord_start(0, NULL);
    int64_t deadline = now_ms() + 60000;
    while (cc_log_count(0, "msg=\"delivered\"", "by=self") < 20 && now_ms() < deadline)
        sleep_ms(20);
    CHECK(cc_log_count(0, "msg=\"delivered\"", "by=self") >= 20, "no 20 deliveries within 60 s (log %s)",
          cc_fx.coords[0].log);
    int64_t t0 = now_ms();
    int st = cc_coord_stop(0);
    int64_t drain_ms = now_ms() - t0;
    long at_stop = cc_log_number(0, "msg=\"stopping\"", "turns_in_flight=");
    int cancelled = cc_log_count(0, "msg=\"cancelled\"", NULL);
    json_t *s1 = cc_status_load(0);
    fprintf(stderr, "    SIGTERM with %ld turns in flight (calls hold no thread): drained in %lld ms, %d cancelled\n",
            at_stop, (long long)drain_ms, cancelled);
    CHECK(cc_exited_with(st, 0), "drain: wait status %d", st);
    CHECK(at_stop >= 100, "only %ld turns in flight at the stop (want hundreds; log %s)", at_stop, cc_fx.coords[0].log);
    CHECK(cancelled >= at_stop / 2 && cancelled <= at_stop, "%d cancelled of %ld in flight", cancelled, at_stop);
    CHECK(s1 != NULL && cc_counter(s1, "turns_in_flight") == 0 && cc_counter(s1, "cancelled") == cancelled &&
              json_is_true(json_object_get(s1, "final")),
          "final status: in flight %lld, cancelled %lld", s1 ? cc_counter(s1, "turns_in_flight") : -1,
          s1 ? cc_counter(s1, "cancelled") : -1);
    json_decref(s1);
    CHECK(cc_log_count(0, "msg=\"complete_sent\"", NULL) >= 20, "fewer Completes than deliveries");

    /* 2. Again, to the end: every transfer once, hundreds in flight, few threads. A
     * dispatched transfer goes to a worker by its id, so the turns in flight are the distinct
     * workers the first rounds reach. How many step 1 left pending depends on how fast the
     * cluster ran before the stop; a second set of MANY_TOTAL, made now, puts the first
     * rounds' listings past the workers' buffers however far step 1 got. */
    cc_plan more = plan;
    more.src = "src.more";
    more.dst = "dst.more";
    more.tag = "more";
    CHECK(cc_queue(MANY_DB, "src.more", CC_SRC, &err) == KL_OK, "queue: %s", err.message);
    CHECK(cc_queue(MANY_DB, "dst.more", CC_DST, &err) == KL_OK, "queue: %s", err.message);
    made = cc_make_all(&more, 1, 6, why, sizeof why);
    CHECK(made == MANY_TOTAL, "created %ld of %d more: %s", made, MANY_TOTAL, why);
    long left = cc_pending_on(op, CC_SRC, 1000);
    o.call_threads = 16;
    CHECK(cc_coord_config(0, "many-run", &o), "config");
    cc_coord_start(0, NULL);
    pid_t pid = cc_fx.coords[0].pid;
    long pending = -1, threads_max = 0;
    long long held = -1;
    deadline = now_ms() + 120000;
    while (now_ms() < deadline) {
        long th = cc_threads(pid);
        threads_max = th > threads_max ? th : threads_max;
        pending = cc_pending_on(op, CC_SRC, 1);
        held = cc_messages(root, "dst.many") + cc_messages(root, "dst.more");
        if (pending == 0 && held >= 2 * MANY_TOTAL)
            break;
        sleep_ms(100);
    }
    st = cc_coord_stop(0);
    json_t *s2 = cc_status_load(0);
    long long peak = s2 ? cc_counter(s2, "turns_in_flight_peak") : -1;
    json_decref(s2);
    fprintf(stderr, "    %ld pending at the start (one listing, at most 1000); %lld delivered; peak %lld turns in flight (%d workers), at most "
                    "%ld threads\n", left, held, peak, MANY_WORKERS, threads_max);
    CHECK(pending == 0 && held == 2 * MANY_TOTAL, "%ld pending, %lld destination messages (want 0, %d)", pending,
          held, 2 * MANY_TOTAL);
    CHECK(cc_exited_with(st, 0), "drain: wait status %d", st);
    CHECK(peak >= 200, "peak %lld turns in flight (want hundreds)", peak);
    CHECK(threads_max > 0 && threads_max < MANY_WORKERS / 8, "%ld threads for %d workers", threads_max,
          MANY_WORKERS);
    /* Exactly once: each lane of both sets holds its 50 bodies, none twice. */
    static char bodies[MANY_PER_LANE + 1][64];
    for (int set = 0; set < 2; set++) {
        const char *dst = set ? "dst.more" : "dst.many", *pat = set ? "more-%d-%d" : "many-%d-%d";
        for (int l = 0; l < MANY_LANES; l++) {
            char lane[16];
            snprintf(lane, sizeof lane, "l%02d", l);
            int n = cc_receive(root, dst, lane, MANY_PER_LANE + 1, bodies);
            CHECK(n == MANY_PER_LANE, "lane %s of %s holds %d messages (want %d)", lane, dst, n, MANY_PER_LANE);
            bool seen[MANY_PER_LANE] = {false};
            for (int i = 0; i < n; i++) {
                int bl, bi;
                CHECK(sscanf(bodies[i], pat, &bl, &bi) == 2 && bl == l && bi >= 0 && bi < MANY_PER_LANE && !seen[bi],
                      "unexpected or repeated body %s in lane %s of %s", bodies[i], lane, dst);
                seen[bi] = true;
            }
        }
    }

    /* 3. Idle with the default config (nothing pending): under 1% of a core over 10 s. */
    cc_opts d = {.db = MANY_DB, .who = WHO_COORD, .defaults = true};
    CHECK(cc_coord_config(0, "many-idle", &d), "config");
    cc_coord_start(0, NULL);
    pid = cc_fx.coords[0].pid;
    CHECK(cc_wait_log(0, "msg=\"discovery_round\"", NULL, 10000) >= 1,
          "the default coordinator made no discovery round (log %s)", cc_fx.coords[0].log);
    sleep_ms(2000); /* past start-up: sessions made, first rounds done */
    long hz = sysconf(_SC_CLK_TCK);
    long long c0 = cc_cpu_ticks(pid);
    int64_t w0 = now_ms();
    sleep_ms(10000);
    long long c1 = cc_cpu_ticks(pid);
    int64_t w1 = now_ms();
    long idle_threads = cc_threads(pid);
    st = cc_coord_stop(0);
    double pct = c0 >= 0 && c1 >= c0 ? 100.0 * (double)(c1 - c0) / (double)hz / ((double)(w1 - w0) / 1000.0) : -1;
    fprintf(stderr, "    idle default coordinator: %lld ticks of CPU in %lld ms = %.2f%% of a core (%ld threads)\n",
            c1 - c0, (long long)(w1 - w0), pct, idle_threads);
    CHECK(pct >= 0 && pct < 1.0, "idle default coordinator used %.2f%% of a core (want under 1%%)", pct);
    CHECK(cc_exited_with(st, 0), "idle drain: wait status %d", st);
    cc_fx.keep = true;
}


/* ---- CoordinatorLeaderKillTests ---- */

#define LK_DB "acme/lk"
#define LK_LANES 6
#define LK_PER_LANE 50
#define LK_TOTAL (LK_LANES * LK_PER_LANE)

/* A default coordinator drives 300 transfers; mid-run the destination partition's leader
 * is killed -9 (and restarted 1.5 s later: with replica_count 3 nothing commits there
 * without it). Its calls in flight there end (no answer, or the connection lost) and are
 * retried under the same ids, later calls find the partition's next leader through
 * NOT_LEADER redirects and the shared leader cache, and every transfer is delivered
 * exactly once, with no thread per call. */
void test_coord_leader_kill(void)
{
    CC_BEGIN("CoordinatorLeaderKillTests");
    cc_plan plan = {.db = LK_DB, .src = "src.lk", .dst = "dst.lk", .tag = "lk", .who = WHO_COORD,
                    .lanes = LK_LANES, .per_lane = LK_PER_LANE, .per_batch = 50};
    CHECK(cc_make_pair(&plan, CC_SRC, CC_DST, why, sizeof why), "%s", why);
    kl_client *root = cc_client(WHO_ROOT, LK_DB), *op = cc_client(WHO_COORD, LK_DB);
    CHECK(root && op, "clients");
    cc_opts o = {.db = LK_DB, .who = WHO_COORD, .defaults = true};
    CHECK(cc_coord_config(0, "lk", &o), "config");
    cc_coord_start(0, NULL);
    pid_t pid = cc_fx.coords[0].pid;
    int64_t deadline = now_ms() + 60000;
    while (cc_log_count(0, "msg=\"delivered\"", "by=self") < 30 && now_ms() < deadline)
        sleep_ms(10);
    int before = cc_log_count(0, "msg=\"delivered\"", "by=self");
    CHECK(before >= 30 && before < LK_TOTAL, "%d delivered before the kill (log %s)", before,
          cc_fx.coords[0].log);
    int old = cc_leader(CC_DST);
    CHECK(old >= 0, "partition %d has no leader", CC_DST);
    cc_kill(CC_DST, old);
    int64_t t_kill = now_ms();
    /* replica_count 3: nothing commits there until it is back (as a restarted member). */
    sleep_ms(1500);
    cc_spawn(CC_DST, old);
    long pending = -1, threads_max = 0;
    long long held = -1;
    deadline = now_ms() + 120000;
    while (now_ms() < deadline) {
        long th = cc_threads(pid);
        threads_max = th > threads_max ? th : threads_max;
        pending = cc_pending_on(op, CC_SRC, 1);
        held = cc_messages(root, "dst.lk");
        if (pending == 0 && held >= LK_TOTAL)
            break;
        sleep_ms(100);
    }
    int64_t t_done = now_ms();
    int nl = cc_leader(CC_DST);
    int retries = cc_log_count(0, "msg=\"retry\"", NULL);
    int st = cc_coord_stop(0);
    fprintf(stderr, "    leader %d of partition %d killed -9 after %d deliveries and restarted 1.5 s later; all "
                    "%d delivered %lld ms after the kill, leader now %d (%d retries logged, at most %ld "
                    "threads)\n",
            old, CC_DST, before, LK_TOTAL, (long long)(t_done - t_kill), nl, retries, threads_max);
    CHECK(pending == 0 && held == LK_TOTAL, "%ld pending, %lld destination messages (want 0, %d)", pending,
          held, LK_TOTAL);
    CHECK(nl >= 0, "partition %d has no leader after the kill of %d", CC_DST, old);
    CHECK(cc_exited_with(st, 0), "drain: wait status %d", st);
    CHECK(threads_max > 0 && threads_max < 16, "%ld threads for the default workers", threads_max);
    static char bodies[LK_PER_LANE + 1][64];
    for (int l = 0; l < LK_LANES; l++) {
        char lane[16];
        snprintf(lane, sizeof lane, "l%02d", l);
        int n = cc_receive(root, "dst.lk", lane, LK_PER_LANE + 1, bodies);
        CHECK(n == LK_PER_LANE, "lane %s holds %d messages (want %d)", lane, n, LK_PER_LANE);
        bool seen[LK_PER_LANE] = {false};
        for (int i = 0; i < n; i++) {
            int bl, bi;
            CHECK(sscanf(bodies[i], "lk-%d-%d", &bl, &bi) == 2 && bl == l && bi >= 0 && bi < LK_PER_LANE &&
                      !seen[bi],
                  "unexpected or repeated body %s in lane %s", bodies[i], lane);
            seen[bi] = true;
        }
    }
    CHECK(cc_wait_all(30000), "the killed member did not come back");
    cc_fx.keep = true;
}


/* ---- CoordinatorBacklogTests ---- */

#define BIG_DB "acme/big"
#define BIG_LANES 50      /* per direction */
#define BIG_PER_LANE 100  /* 2 x 50 x 100 = 10,000 */
#define BIG_TOTAL (2 * BIG_LANES * BIG_PER_LANE)
#define BIG_WORKERS 32
#define BIG_BUFFER 64     /* 32 x 64 = 2,048 events at most: well under the backlog */
#define BIG_RSS_MAX_KIB (64L * 1024)

void test_coord_backlog(void)
{
    CC_BEGIN("CoordinatorBacklogTests");
    CHECK(cc_database(BIG_DB, why, sizeof why), "%s", why);
    /* Both directions, so both data partitions' leaders share the work. */
    CHECK(cc_queue(BIG_DB, "src.big1", 1, &err) == KL_OK && cc_queue(BIG_DB, "dst.big2", 2, &err) == KL_OK &&
              cc_queue(BIG_DB, "src.big2", 2, &err) == KL_OK && cc_queue(BIG_DB, "dst.big1", 1, &err) == KL_OK,
          "queues: %s", err.message);
    cc_plan plans[2] = {
        {.db = BIG_DB, .src = "src.big1", .dst = "dst.big2", .tag = "a", .who = WHO_COORD, .lanes = BIG_LANES,
         .per_lane = BIG_PER_LANE, .per_batch = 50},
        {.db = BIG_DB, .src = "src.big2", .dst = "dst.big1", .tag = "b", .who = WHO_COORD, .lanes = BIG_LANES,
         .per_lane = BIG_PER_LANE, .per_batch = 50},
    };
    int64_t t0 = now_ms();
    long made = cc_make_all(plans, 2, 6, why, sizeof why);
    CHECK(made == BIG_TOTAL, "created %ld of %d: %s", made, BIG_TOTAL, why);
    int64_t t1 = now_ms();
    fprintf(stderr, "    %d intents created in %lld ms (12 threads, 50 Creates a batch)\n", BIG_TOTAL,
            (long long)(t1 - t0));
    CHECK(cc_cold_restart(), "the cluster did not serve again within 40 s");
    kl_client *root = cc_client(WHO_ROOT, BIG_DB), *op = cc_client(WHO_COORD, BIG_DB);
    CHECK(root && op, "clients");
    CHECK(cc_pending_on(op, 1, 1000) == 1000 && cc_pending_on(op, 2, 1000) == 1000,
          "pending after the cold restart: not a full page on each partition");

    cc_opts o = {.db = BIG_DB, .who = WHO_COORD, .workers = BIG_WORKERS, .flush_ms = 1, .buffer = BIG_BUFFER,
                 .discovery_ms = 200, .max_records = 256, .call_timeout_ms = 5000};
    CHECK(cc_coord_config(0, "big", &o), "config");
    int64_t t2 = now_ms();
    cc_coord_start(0, NULL);
    pid_t pid = cc_fx.coords[0].pid;
    int64_t deadline = now_ms() + 170000;
    long p1 = -1, p2 = -1;
    long long held = -1;
    long peak = -1;
    int64_t last_print = now_ms();
    while (now_ms() < deadline) {
        long hwm = cc_vmhwm_kib(pid);
        if (hwm > peak)
            peak = hwm;
        p1 = cc_pending_on(op, 1, 1);
        p2 = cc_pending_on(op, 2, 1);
        long long h1 = cc_messages(root, "dst.big1"), h2 = cc_messages(root, "dst.big2");
        held = h1 >= 0 && h2 >= 0 ? h1 + h2 : -1;
        if (p1 == 0 && p2 == 0 && held >= BIG_TOTAL)
            break;
        if (now_ms() - last_print >= 10000) {
            fprintf(stderr, "    ... %lld delivered after %lld ms, VmHWM %ld KiB\n", held, (long long)(now_ms() - t2),
                    peak);
            last_print = now_ms();
        }
        sleep_ms(250);
    }
    int64_t t3 = now_ms();
    long hwm = cc_vmhwm_kib(pid);
    if (hwm > peak)
        peak = hwm;
    int stop = cc_coord_stop(0);
    json_t *st = cc_status_load(0);
    fprintf(stderr, "    %lld of %d delivered in %lld ms (%.0f transfers/s; 32 workers, 1 ms flush, buffer %d); "
                    "coordinator VmHWM %ld KiB (%.1f MiB); retries %lld, buffer_full %lld, terminal %lld\n",
            held, BIG_TOTAL, (long long)(t3 - t2), held > 0 ? held * 1000.0 / (double)(t3 - t2) : 0.0, BIG_BUFFER,
            peak, peak / 1024.0, cc_counter(st, "retries"), cc_counter(st, "buffer_full"),
            cc_counter(st, "terminal_failures"));
    json_decref(st);
    CHECK(p1 == 0 && p2 == 0 && held == BIG_TOTAL, "after %lld ms: pending %ld + %ld, destination messages %lld "
          "(want 0, 0, %d; log %s)", (long long)(t3 - t2), p1, p2, held, BIG_TOTAL, cc_fx.coords[0].log);
    CHECK(peak > 0 && peak < BIG_RSS_MAX_KIB, "coordinator VmHWM %ld KiB (want under %ld)", peak, BIG_RSS_MAX_KIB);
    CHECK(cc_exited_with(stop, 0), "drain: wait status %d", stop);
    /* Every partition's listing is empty, partition 0's too (the catalog partition holds
     * none of these queues; it must say so rather than fail). */
    long p0 = cc_pending_on(op, 0, 1000);
    CHECK(p0 == 0 && cc_pending_on(op, 1, 1000) == 0 && cc_pending_on(op, 2, 1000) == 0,
          "pending after delivery: partition 0 %ld, 1 %ld, 2 %ld", p0, cc_pending_on(op, 1, 1000),
          cc_pending_on(op, 2, 1000));
    /* The lanes hold exactly what was sent: 100 per destination lane. */
    char lane[16];
    snprintf(lane, sizeof lane, "l%02d", BIG_LANES - 1);
    CHECK(cc_receive(root, "dst.big1", lane, 1000, NULL) == BIG_PER_LANE &&
              cc_receive(root, "dst.big2", lane, 1000, NULL) == BIG_PER_LANE,
          "a destination lane does not hold %d messages", BIG_PER_LANE);
    cc_fx.keep = true;
}
