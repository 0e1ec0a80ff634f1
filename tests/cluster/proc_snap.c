/* Log compaction and snapshots on real keyloadd processes (ARCHITECTURE.md "Replication";
 * daemon/repl/driver.h "Compaction and snapshots", snapwire.h): three members of one
 * partition, replica_count 2, a small compaction policy (snapshot.threshold_entries 200,
 * trailing 50), real RocksDB stores and real peer sockets.
 *   - a follower killed -9 while the leader writes past the threshold and compacts the
 *     entries it lacks catches up by snapshot once restarted (its log says it installed one,
 *     its store's log starts past what it had) and ends with the same replicated state as
 *     the others: every non-local key and value, compared over the stores read directly
 *     after SIGTERM. The leader never compacted without a snapshot to give: the follower
 *     got everything it needed;
 *   - every member killed -9 right after its first compaction (failpoint
 *     repl.after_compact=exit) restarts and serves with every acknowledged batch's outcome
 *     and every message in place;
 *   - a snapshot stream cut midway (the receiver exits after staging its 3rd chunk,
 *     failpoint repl.snapshot_chunk_staged) completes after the receiver restarts.
 * Members are started by proc_exec (bounded lifetime, killed with the test) and stopped by
 * pid, also on failure (sn_stop_all from the runner). */
#include "tests/cluster/proc.h"

#include "common/rpc.h"
#include "daemon/store/keys.h"
#include "daemon/store/store.h"
#include "tests/cluster/store_scan.h"

#include <rocksdb/c.h>
#include <signal.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SN_MEMBERS 3
#define SN_QUEUE "snap"
#define SN_THRESHOLD 200
#define SN_TRAILING 50
/* Three election timeouts: no batch waits that long on a loop that runs, even on a busy
 * machine (its slowest batch stays near a second), and a flush on the loop (10 s) holds one
 * far longer. */
#define SN_FLUSH_SLOW_MS 3000

static char sn_file[700];
static char sn_url[SN_MEMBERS][64];
static char sn_data[SN_MEMBERS][700];
static char sn_log[SN_MEMBERS][760];
static pid_t sn_pid[SN_MEMBERS] = {-1, -1, -1};
static int sn_status_at_exit[SN_MEMBERS]; /* wait status of the member's last reaped process */
static int sn_run;
static int sn_threshold = SN_THRESHOLD; /* the cluster file's threshold_entries (sn_write) */

/* Ports 26000..26899 (apart from the other tests' ranges): clients base..base+2, peers
 * base+5..base+7. */
static void sn_write(int attempt)
{
    int base = 26000 + (int)((getpid() + attempt * 37 + sn_run * 11) % 90) * 10;
    snprintf(sn_file, sizeof sn_file, "%s/snap%d.json", work, sn_run);
    FILE *f = fopen(sn_file, "w");
    fprintf(f, "{\"cluster\":\"snap\",\"replica_count\":2,\"insecure_local_admin\":true,"
               "\"timers\":{\"tick_ms\":50,\"election_ms\":1000,\"heartbeat_ms\":150},"
               "\"snapshot\":{\"threshold_entries\":%d,\"trailing_entries\":%d},"
               "\"partitions\":[{\"id\":0,\"members\":[",
            sn_threshold, SN_TRAILING);
    for (int i = 0; i < SN_MEMBERS; i++) {
        snprintf(sn_url[i], sizeof sn_url[i], "tcp://127.0.0.1:%d", base + i);
        snprintf(sn_data[i], sizeof sn_data[i], "%s/snap%d-%d-m%d", work, sn_run, attempt, i + 1);
        snprintf(sn_log[i], sizeof sn_log[i], "%s/snap%d-m%d.log", work, sn_run, i + 1);
        fprintf(f, "%s{\"id\":%d,\"client\":\"%s\",\"peer\":\"tcp://127.0.0.1:%d\",\"data\":\"%s\"}",
                i ? "," : "", i + 1, sn_url[i], base + 5 + i, sn_data[i]);
    }
    fprintf(f, "]}]}\n");
    fclose(f);
}

static void sn_spawn(int i, const char *failpoints)
{
    char node[16];
    snprintf(node, sizeof node, "p0m%d", i + 1);
    char secret[700];
    snprintf(secret, sizeof secret, "%s/cluster.secret", work); /* proc_test.c writes it */
    char *argv[] = {(char *)daemon_bin, "--cluster", sn_file, "--node", node, "--cluster-secret", secret,
                    "--init-store", NULL};
    sn_pid[i] = proc_exec(argv, sn_log[i], failpoints, PROC_LIFETIME_S);
}

static void sn_kill(int i)
{
    if (sn_pid[i] <= 0)
        return;
    kill(sn_pid[i], SIGKILL);
    waitpid(sn_pid[i], &sn_status_at_exit[i], 0);
    sn_pid[i] = -1;
}

void sn_stop_all(void)
{
    for (int i = 0; i < SN_MEMBERS; i++)
        sn_kill(i);
}

/* Whether member i exited by itself (reaped then); its status in *status. */
static bool sn_exited(int i, int *status)
{
    if (sn_pid[i] <= 0) {
        *status = sn_status_at_exit[i];
        return true;
    }
    if (waitpid(sn_pid[i], status, WNOHANG) == sn_pid[i]) {
        sn_status_at_exit[i] = *status;
        sn_pid[i] = -1;
        return true;
    }
    return false;
}

/* SIGTERM (the store is closed cleanly), then kill -9 after 10 s. */
static bool sn_term(int i)
{
    if (sn_pid[i] <= 0)
        return false;
    kill(sn_pid[i], SIGTERM);
    for (int waited = 0; waited < 10000; waited += 50) {
        int st;
        if (sn_exited(i, &st))
            return true;
        sleep_ms(50);
    }
    sn_kill(i);
    return false;
}

static Keyload__V1__MemberStatusAnswer *sn_status(int i)
{
    return sn_pid[i] > 0 ? member_status(sn_url[i], 1000) : NULL;
}

static uint64_t sn_applied(int i)
{
    Keyload__V1__MemberStatusAnswer *s = sn_status(i);
    uint64_t a = s != NULL ? s->applied_index : 0;
    if (s)
        keyload__v1__member_status_answer__free_unpacked(s, NULL);
    return a;
}

static int sn_leader(int timeout_ms)
{
    int64_t end = now_ms() + timeout_ms;
    do {
        for (int i = 0; i < SN_MEMBERS; i++) {
            Keyload__V1__MemberStatusAnswer *s = sn_status(i);
            bool serving = s != NULL && s->serving;
            if (s)
                keyload__v1__member_status_answer__free_unpacked(s, NULL);
            if (serving)
                return i;
        }
        sleep_ms(100);
    } while (now_ms() < end);
    return -1;
}

/* Every running member applied at least `index`, within timeout_ms. */
static bool sn_applied_all(uint64_t index, int timeout_ms)
{
    int64_t end = now_ms() + timeout_ms;
    do {
        int ok = 0;
        for (int i = 0; i < SN_MEMBERS; i++)
            ok += sn_pid[i] > 0 && sn_applied(i) >= index;
        if (ok == SN_MEMBERS)
            return true;
        sleep_ms(100);
    } while (now_ms() < end);
    return false;
}

static bool sn_log_has(int i, const char *what)
{
    FILE *f = fopen(sn_log[i], "r");
    if (f == NULL)
        return false;
    char line[2048];
    bool found = false;
    while (!found && fgets(line, sizeof line, f) != NULL)
        found = strstr(line, what) != NULL;
    fclose(f);
    return found;
}

static kl_code sn_batch(int leader, Keyload__V1__BatchRequest *b, answer *out)
{
    size_t len;
    uint8_t *req = pack_free(b, &len);
    kl_rpc_client *c;
    *out = (answer){0};
    out->code = kl_rpc_client_open(sn_url[leader], 2000, 0, &c, &out->err);
    if (out->code == KL_OK) {
        out->code = kl_rpc_invoke(c, "keyload.v1.Batch", req, len, 10000, &out->bytes, &out->len, NULL, 0,
                                  &out->err);
        kl_rpc_client_close(c);
    }
    free(req);
    return out->code;
}

/* Starts the three members (other ports if one cannot bind) with `failpoints`, creates the
 * database and the queue; returns the leader or -1. */
static int sn_setup(const char *failpoints)
{
    sn_run++;
    bool running = false;
    for (int attempt = 0; attempt < 3 && !running; attempt++) {
        sn_stop_all();
        sn_write(attempt);
        for (int i = 0; i < SN_MEMBERS; i++)
            sn_spawn(i, failpoints);
        sleep_ms(1000);
        running = true;
        for (int i = 0; i < SN_MEMBERS; i++) {
            int st;
            running = running && !sn_exited(i, &st);
        }
        if (!running)
            fprintf(stderr, "  a member did not start (port in use?); trying other ports\n");
    }
    int leader = running ? sn_leader(30000) : -1;
    for (int step = 0; leader >= 0 && step < 2; step++) {
        Keyload__V1__BatchRequest *b = batch_new(NULL);
        if (step == 0)
            add_create_database(b);
        else
            add_create(b, SN_QUEUE, 0);
        answer a;
        kl_code rc = sn_batch(leader, b, &a);
        if (rc != KL_OK)
            fprintf(stderr, "  setup step %d: %s %s %s\n", step, kl_code_name(rc), a.err.detail, a.err.message);
        answer_free(&a);
        if (rc != KL_OK)
            return -1;
    }
    return leader;
}

/* `batches` batches of `per` messages of `body_len` bytes each; returns how many were
 * acknowledged OK and the leader's applied index after them in *applied. Command ids are
 * cmd_base + batch number (first 8 bytes), kept in acked[] when not NULL. */
static int sn_fill(int leader, int batches, int per, size_t body_len, uint64_t cmd_base, uint64_t *acked)
{
    char *body = malloc(body_len + 1);
    memset(body, 'b', body_len);
    body[body_len] = '\0';
    int ok = 0;
    for (int n = 0; n < batches; n++) {
        uint8_t cmd[16] = {0};
        kl_be64_put(cmd, cmd_base + (uint64_t)n);
        cmd[15] = 0x5a;
        Keyload__V1__BatchRequest *b = batch_new(cmd);
        for (int k = 0; k < per; k++)
            add_enqueue(b, SN_QUEUE, body);
        answer a;
        if (sn_batch(leader, b, &a) == KL_OK) {
            if (acked != NULL)
                acked[ok] = cmd_base + (uint64_t)n;
            ok++;
        }
        answer_free(&a);
    }
    free(body);
    return ok;
}

/* A member's store after it stopped: where its log starts, its applied index, the number
 * of messages ('G') and outcomes ('O'), and a digest of every replicated (non-local) key
 * and value in key order. */
typedef struct sn_store {
    uint64_t first, applied, messages, outcomes;
    uint8_t digest[32];
} sn_store;

static bool sn_keep(const uint8_t *k, size_t kl, void *arg)
{
    (void)arg;
    return !kl_store_key_is_local(k, kl);
}

static void sn_count(const uint8_t *k, size_t kl, const uint8_t *v, size_t vl, void *arg)
{
    (void)kl, (void)v, (void)vl;
    sn_store *o = arg;
    o->messages += k[0] == 'G';
    o->outcomes += k[0] == 'O';
}

static bool sn_read_store(int i, sn_store *o, const uint64_t *acked, int n_acked, char *why, size_t cap)
{
    memset(o, 0, sizeof *o);
    kl_store *st;
    kl_err err;
    if (kl_store_open(sn_data[i], NULL, &st, &err) != KL_OK) {
        snprintf(why, cap, "open the store of member %d: %s", i + 1, err.message);
        return false;
    }
    o->first = kl_store_first_index(st);
    o->applied = kl_store_applied_index(st);
    store_scan_digest(st, sn_keep, sn_count, o, o->digest);
    bool all = true;
    for (int n = 0; n < n_acked && all; n++) {
        /* 'O' principal 0 command_id: the local administrator's outcomes end with the id. */
        uint8_t cmd[16] = {0};
        kl_be64_put(cmd, acked[n]);
        cmd[15] = 0x5a;
        bool found = false;
        rocksdb_iterator_t *it2 = kl_store_iterator(st);
        for (rocksdb_iter_seek(it2, "O", 1); rocksdb_iter_valid(it2) && !found; rocksdb_iter_next(it2)) {
            size_t kl;
            const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it2, &kl);
            if (kl == 0 || k[0] != 'O')
                break;
            found = kl >= 16 && memcmp(k + kl - 16, cmd, 16) == 0;
        }
        rocksdb_iter_destroy(it2);
        if (!found) {
            snprintf(why, cap, "member %d lost the outcome of acknowledged batch %llu", i + 1,
                     (unsigned long long)acked[n]);
            all = false;
        }
    }
    kl_store_close(st);
    return all;
}

/* Stops all three (SIGTERM) once they applied the same index and compares their stores. */
static void sn_compare(const uint64_t *acked, int n_acked, uint64_t messages, bool exact, sn_store *out)
{
    uint64_t target = 0;
    for (int i = 0; i < SN_MEMBERS; i++)
        if (sn_applied(i) > target)
            target = sn_applied(i);
    CHECK(sn_applied_all(target, 30000), "the members did not all apply index %llu", (unsigned long long)target);
    for (int i = 0; i < SN_MEMBERS; i++)
        CHECK(sn_term(i), "member %d did not stop on SIGTERM", i + 1);
    char why[600];
    for (int i = 0; i < SN_MEMBERS; i++) {
        CHECK(sn_read_store(i, &out[i], acked, n_acked, why, sizeof why), "%s", why);
        fprintf(stderr, "  member %d: log starts at %llu, applied %llu, %llu messages, %llu outcomes\n", i + 1,
                (unsigned long long)out[i].first, (unsigned long long)out[i].applied,
                (unsigned long long)out[i].messages, (unsigned long long)out[i].outcomes);
        CHECK(exact ? out[i].messages == messages : out[i].messages >= messages,
              "member %d holds %llu messages, %llu were acknowledged", i + 1,
              (unsigned long long)out[i].messages, (unsigned long long)messages);
        CHECK(memcmp(out[i].digest, out[0].digest, 32) == 0,
              "member %d's replicated state differs from member 1's", i + 1);
    }
}

void test_snapshot_catchup(void)
{
    int64_t t0 = now_ms();
    int leader = sn_setup(NULL);
    CHECK(leader >= 0, "the group did not start");
    static uint64_t acked[2000];
    int n = sn_fill(leader, 20, 1, 100, 1000, acked);
    CHECK(n == 20, "only %d of 20 batches acknowledged", n);
    CHECK(sn_applied_all(sn_applied(leader), 10000), "the members did not catch up before the cut");
    int f = (leader + 1) % SN_MEMBERS;
    uint64_t f_had = sn_applied(f);
    sn_kill(f);
    /* Well past the threshold, so the leader compacts beyond everything f has. */
    int more = sn_fill(leader, 3 * SN_THRESHOLD, 1, 100, 2000, acked + n);
    CHECK(more == 3 * SN_THRESHOLD, "only %d of %d batches acknowledged with a follower down", more,
          3 * SN_THRESHOLD);
    n += more;
    CHECK(sn_log_has(leader, "log compacted"), "the leader never compacted its log");
    CHECK(!sn_log_has(f, "snapshot installed"), "member %d installed a snapshot before it was cut", f + 1);
    int64_t t_restart = now_ms();
    sn_spawn(f, NULL);
    uint64_t target = sn_applied(leader);
    CHECK(sn_applied_all(target, 30000), "the restarted member %d did not apply index %llu", f + 1,
          (unsigned long long)target);
    fprintf(stderr, "  member %d caught up to %llu in %lld ms after its restart\n", f + 1,
            (unsigned long long)target, (long long)(now_ms() - t_restart));
    CHECK(sn_log_has(f, "snapshot installed"), "member %d caught up without a snapshot", f + 1);
    CHECK(sn_log_has(leader, "snapshot stream ended") && sn_log_has(leader, "ok=1"),
          "the leader never reported a completed stream");
    sn_store s[SN_MEMBERS];
    sn_compare(acked, n, (uint64_t)n, true, s);
    if (failures_in_test)
        return;
    CHECK(s[f].first - 1 > f_had, "member %d's log starts at %llu, not past the %llu it had", f + 1,
          (unsigned long long)s[f].first, (unsigned long long)f_had);
    CHECK(s[leader].first > 1, "the leader's log was never compacted");
    fprintf(stderr, "  snapshot catch-up test: %lld ms\n", (long long)(now_ms() - t0));
    sn_stop_all();
}

void test_snapshot_kill_after_compact(void)
{
    int leader = sn_setup("repl.after_compact=1*exit");
    CHECK(leader >= 0, "the group did not start");
    static uint64_t acked[2000];
    int n = 0;
    /* Write until the members die at their first compaction. */
    for (int round = 0; round < 20 && n < 1500; round++) {
        int alive = 0;
        for (int i = 0; i < SN_MEMBERS; i++) {
            int st;
            alive += !sn_exited(i, &st);
        }
        if (alive < 2)
            break;
        int l = sn_leader(5000);
        if (l < 0)
            break;
        n += sn_fill(l, 50, 2, 100, 10000 + (uint64_t)round * 100, acked + n);
    }
    int exited = 0;
    for (int i = 0; i < SN_MEMBERS; i++) {
        int st = 0;
        if (sn_exited(i, &st) && WIFEXITED(st) && WEXITSTATUS(st) == 77)
            exited++;
    }
    CHECK(exited >= 2, "only %d members died at the compaction failpoint", exited);
    CHECK(n > SN_THRESHOLD / 2, "only %d batches acknowledged before the compaction", n);
    sn_stop_all();
    for (int i = 0; i < SN_MEMBERS; i++)
        sn_spawn(i, NULL);
    int64_t t0 = now_ms();
    leader = sn_leader(30000);
    CHECK(leader >= 0, "no leader after the restart");
    fprintf(stderr, "  %d batches acknowledged; serving again %lld ms after the restart\n", n,
            (long long)(now_ms() - t0));
    answer a;
    Keyload__V1__BatchRequest *b = batch_new(NULL);
    add_enqueue(b, SN_QUEUE, "after");
    CHECK(sn_batch(leader, b, &a) == KL_OK, "a write after the restart: %s %s", kl_code_name(a.code), a.err.message);
    answer_free(&a);
    sn_store s[SN_MEMBERS];
    sn_compare(acked, n, 2 * (uint64_t)n + 1, false, s);
    for (int i = 0; i < SN_MEMBERS && !failures_in_test; i++)
        CHECK(s[i].first > 1, "member %d's compaction before its death did not last", i + 1);
    sn_stop_all();
}

/* The term member i reports (0 when it does not answer). */
static uint64_t sn_term_of(int i)
{
    Keyload__V1__MemberStatusAnswer *s = sn_status(i);
    uint64_t t = s != NULL ? s->term : 0;
    if (s)
        keyload__v1__member_status_answer__free_unpacked(s, NULL);
    return t;
}

/* One batch of one 100-byte message with command id cmd on the open client c; true when
 * acknowledged (cmd is then kept in acked[*n]). */
static bool sn_one(kl_rpc_client *c, uint64_t cmd, uint64_t *acked, int *n)
{
    static char body[101];
    memset(body, 'b', 100);
    uint8_t id[16] = {0};
    kl_be64_put(id, cmd);
    id[15] = 0x5a;
    Keyload__V1__BatchRequest *b = batch_new(id);
    add_enqueue(b, SN_QUEUE, body);
    size_t len;
    uint8_t *req = pack_free(b, &len);
    answer a = {0};
    a.code = kl_rpc_invoke(c, "keyload.v1.Batch", req, len, 10000, &a.bytes, &a.len, NULL, 0, &a.err);
    free(req);
    bool ok = a.code == KL_OK;
    answer_free(&a);
    if (ok)
        acked[(*n)++] = cmd;
    return ok;
}

/* A compaction's flush runs off the loop: while every member's first flush takes 10 s
 * (failpoint repl.compact_flush=1*sleep(10000), on the thread pool), batches are still
 * acknowledged, none held for SN_FLUSH_SLOW_MS (on the loop, the flush would hold every
 * member's loop, and so the batch in flight, for the 10 s); then every member is killed -9
 * during that flush, before it compacted anything, and after the restart every acknowledged
 * batch is there.
 * The batches go over one connection, so what is timed is the leader's answer, not a
 * connection's setup (a new connection each can take most of a second on a busy machine).
 * The flush's window starts with the batch after which its log line is first seen: that
 * batch was in flight when the flush started, or started after it (a flush on the loop would
 * hold exactly that one). Batches before it wait for nothing the flush does; they are bounded
 * too, and reported apart. */
void test_snapshot_kill_during_flush(void)
{
    int leader = sn_setup("repl.compact_flush=1*sleep(10000)");
    CHECK(leader >= 0, "the group did not start");
    uint64_t term0 = sn_term_of(leader);
    static uint64_t acked[2000];
    int n = 0, during = 0;
    kl_rpc_client *c;
    kl_err err;
    CHECK(kl_rpc_client_open(sn_url[leader], 2000, 0, &c, &err) == KL_OK, "connect to the leader: %s",
          err.message);
    /* The slowest batch before the window and in it. */
    int64_t before_ms = 0, during_ms = 0, flush_seen = -1, window_t0 = -1;
    /* Write until the leader's flush has been running for 2.5 s, or acked[] is full but for
     * the batches after the restart. */
    int max_k = (int)(sizeof acked / sizeof acked[0]) - (SN_THRESHOLD + 100);
    for (int k = 0; k < max_k && (flush_seen < 0 || now_ms() - flush_seen < 2500); k++) {
        int64_t t = now_ms();
        bool ok = sn_one(c, 20000 + (uint64_t)k, acked, &n);
        int64_t took = now_ms() - t; /* a stalled loop holds the batch in flight */
        if (flush_seen < 0 && sn_log_has(leader, "compaction flush started")) {
            flush_seen = now_ms();
            window_t0 = t;
        }
        if (flush_seen >= 0) {
            during += ok;
            during_ms = took > during_ms ? took : during_ms;
        } else {
            before_ms = took > before_ms ? took : before_ms;
        }
    }
    kl_rpc_client_close(c);
    CHECK(flush_seen >= 0, "the leader never started a compaction flush (%d batches)", n);
    int64_t window_ms = now_ms() - window_t0;
    fprintf(stderr, "  %d batches acknowledged, %d in the flush's %lld ms: slowest %lld ms there, %lld ms before it\n",
            n, during, (long long)window_ms, (long long)during_ms, (long long)before_ms);
    CHECK(during >= 5 && during_ms < SN_FLUSH_SLOW_MS,
          "the loop stalled during the flush: %d batches in %lld ms, slowest %lld ms", during, (long long)window_ms,
          (long long)during_ms);
    CHECK(before_ms < SN_FLUSH_SLOW_MS, "a batch took %lld ms before the flush started", (long long)before_ms);
    for (int i = 0; i < SN_MEMBERS; i++)
        sn_kill(i);
    for (int i = 0; i < SN_MEMBERS; i++)
        CHECK(!sn_log_has(i, "log compacted"), "member %d compacted before the kill (flush not cut)", i + 1);
    CHECK(sn_term_of(leader) == 0 && term0 > 0, "the leader still answers after the kill");
    for (int i = 0; i < SN_MEMBERS; i++)
        sn_spawn(i, NULL);
    leader = sn_leader(30000);
    CHECK(leader >= 0, "no leader after the restart");
    /* Past the threshold again: the restarted members compact (and so flush) for real. */
    int more = sn_fill(leader, SN_THRESHOLD + 100, 1, 100, 30000, acked + n);
    CHECK(more == SN_THRESHOLD + 100, "only %d of %d batches acknowledged after the restart", more,
          SN_THRESHOLD + 100);
    n += more;
    CHECK(sn_log_has(leader, "log compacted"), "the leader never compacted after the restart");
    sn_store s[SN_MEMBERS];
    sn_compare(acked, n, (uint64_t)n, false, s);
    sn_stop_all();
}

/* A leader opening a snapshot for a follower keeps leading: the open (the reader's key
 * count, seconds per GiB) runs on the thread pool. The failpoint repl.snapshot_open=
 * 1*sleep(3000) makes the open take 3 s, three election timeouts: on the loop, the other
 * follower would stop hearing heartbeats and elect a new leader. Here every member keeps
 * the term, batches are acknowledged within a second meanwhile, and the follower installs
 * the snapshot. */
void test_snapshot_open_off_loop(void)
{
    int leader = sn_setup("repl.snapshot_open=1*sleep(3000)");
    CHECK(leader >= 0, "the group did not start");
    static uint64_t acked[2000];
    int f = (leader + 1) % SN_MEMBERS;
    sn_kill(f);
    int n = sn_fill(leader, 3 * SN_THRESHOLD, 1, 100, 40000, acked);
    CHECK(n == 3 * SN_THRESHOLD, "only %d batches acknowledged with a follower down", n);
    CHECK(sn_log_has(leader, "log compacted"), "the leader never compacted its log");
    uint64_t term = sn_term_of(leader);
    sn_spawn(f, NULL);
    int64_t t0 = now_ms(), worst_ms = 0;
    int during = 0;
    for (int k = 0; k < 1000 && now_ms() - t0 < 20000 && !sn_log_has(f, "snapshot installed"); k++) {
        int64_t t = now_ms();
        if (sn_fill(leader, 1, 1, 100, 41000 + (uint64_t)k, acked + n) == 1)
            n++, during++;
        worst_ms = now_ms() - t > worst_ms ? now_ms() - t : worst_ms;
    }
    fprintf(stderr, "  %d batches acknowledged while the snapshot opened and streamed; slowest %lld ms\n",
            during, (long long)worst_ms);
    /* 1000 batches (what acked[] holds) can be acknowledged before the 3 s open ends: then
     * the install is waited for without more writes, within the same 20 s. */
    while (now_ms() - t0 < 20000 && !sn_log_has(f, "snapshot installed"))
        sleep_ms(50);
    CHECK(sn_log_has(f, "snapshot installed"), "member %d never installed the snapshot", f + 1);
    CHECK(sn_log_has(leader, "snapshot stream started"), "the leader never opened a snapshot");
    for (int i = 0; i < SN_MEMBERS; i++)
        CHECK(sn_term_of(i) == term, "member %d is in term %llu, not %llu: an election while the leader "
              "opened the snapshot", i + 1, (unsigned long long)sn_term_of(i), (unsigned long long)term);
    CHECK(during >= 10 && worst_ms < 1000, "the leader stalled: %d batches, slowest %lld ms", during,
          (long long)worst_ms);
    sn_store st[SN_MEMBERS];
    sn_compare(acked, n, (uint64_t)n, false, st);
    sn_stop_all();
}

/* The log is bounded in bytes too: with threshold_entries 100000 (never reached here),
 * 100 entries of 320 KB (32 MB) still make every member compact (KL_SNAP_LOG_BYTES, 16 MiB)
 * and keep at most about KL_SNAP_TRAILING_BYTES of trailing entries: its log then holds at
 * most the byte threshold's worth (52 such entries) instead of all 100. */
void test_snapshot_log_bytes_bound(void)
{
    sn_threshold = 100000;
    int leader = sn_setup(NULL);
    sn_threshold = SN_THRESHOLD;
    CHECK(leader >= 0, "the group did not start");
    static uint64_t acked[200];
    int n = sn_fill(leader, 100, 80, 4000, 70000, acked);
    CHECK(n == 100, "only %d of 100 large batches acknowledged", n);
    CHECK(sn_log_has(leader, "log compacted"), "the leader never compacted its 32 MB log");
    sn_store s[SN_MEMBERS];
    sn_compare(acked, n, 80 * (uint64_t)n, false, s);
    for (int i = 0; i < SN_MEMBERS && !failures_in_test; i++) {
        uint64_t kept = s[i].applied + 1 - s[i].first;
        CHECK(s[i].first > 1 && kept <= (16u << 20) / (80 * 4000) + 2,
              "member %d keeps %llu entries of 320 KB (log starts at %llu)", i + 1, (unsigned long long)kept,
              (unsigned long long)s[i].first);
    }
    sn_stop_all();
}

void test_snapshot_cut_midstream(void)
{
    int leader = sn_setup(NULL);
    CHECK(leader >= 0, "the group did not start");
    int f = (leader + 2) % SN_MEMBERS;
    sn_kill(f);
    /* About 10 MiB of state (10 chunks or so), in more entries than the threshold. */
    int n = sn_fill(leader, 60, 40, 4000, 50000, NULL);
    CHECK(n == 60, "only %d of 60 large batches acknowledged", n);
    static uint64_t acked[2000];
    int small = sn_fill(leader, SN_THRESHOLD + 100, 1, 100, 60000, acked);
    CHECK(small == SN_THRESHOLD + 100, "only %d small batches acknowledged", small);
    CHECK(sn_log_has(leader, "log compacted"), "the leader never compacted its log");
    sn_spawn(f, "repl.snapshot_chunk_staged=3*exit");
    int st = 0;
    int64_t end = now_ms() + 30000;
    while (!sn_exited(f, &st) && now_ms() < end)
        sleep_ms(50);
    CHECK(sn_pid[f] <= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 77,
          "member %d did not die mid-install at its 3rd staged chunk", f + 1);
    CHECK(!sn_log_has(f, "snapshot staged"), "member %d staged the whole snapshot before the cut", f + 1);
    int64_t t0 = now_ms();
    sn_spawn(f, NULL);
    uint64_t target = sn_applied(leader);
    CHECK(sn_applied_all(target, 60000), "member %d did not catch up after the cut", f + 1);
    fprintf(stderr, "  member %d completed the snapshot %lld ms after its restart\n", f + 1,
            (long long)(now_ms() - t0));
    CHECK(sn_log_has(f, "snapshot installed"), "member %d caught up without a snapshot", f + 1);
    sn_store s[SN_MEMBERS];
    sn_compare(acked, small, 60 * 40 + (uint64_t)small, true, s);
    sn_stop_all();
}
