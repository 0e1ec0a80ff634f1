/* build/golden: writes the golden vectors, writes the old-store fixture, replays it, or runs
 * the fixed instruction-count workload (tests/golden/README.md says which script runs what).
 *
 *   golden vectors OUT      canon.txt, workload.txt and pN.state / pN.log into OUT
 *   golden fixture DIR      the workload's stores in DIR/p0..p2 and DIR/requests.txt
 *   golden replay DIR       opens DIR's stores, replays every request of requests.txt and
 *                           compares each answer byte for byte
 *   golden bench N          the workload, then N enqueue/receive/ack rounds (callgrind)
 *   golden secret | net-write | net-replay   the daemon fixture (net.c) */
#include "tests/golden/build.h"
#include "tests/golden/golden.h"

#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

static FILE *open_out(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        golden_die("cannot write %s", path);
    return f;
}

static void open_all(golden_run *run, const char *root)
{
    for (int p = 0; p < GOLDEN_PARTITIONS; p++) {
        char dir[768];
        snprintf(dir, sizeof dir, "%s/p%d", root, p);
        if (mkdir(dir, 0700) != 0)
            golden_die("mkdir %s", dir);
        golden_open(&run->nodes[p], dir, p);
    }
}

static void close_all(golden_run *run)
{
    for (int p = 0; p < GOLDEN_PARTITIONS; p++)
        golden_close(&run->nodes[p]);
    for (size_t i = 0; i < run->n_steps; i++) {
        free(run->steps[i].req);
        golden_reply_free(&run->steps[i].reply);
    }
    run->n_steps = 0;
}

static void write_steps(golden_run *run, FILE *out)
{
    for (size_t i = 0; i < run->n_steps; i++) {
        golden_step *s = &run->steps[i];
        fprintf(out, "step %02zu %s p%d principal=%s\nrequest ", i + 1, s->name, s->partition, s->principal);
        golden_hex(out, s->req, s->req_len);
        fprintf(out, "\nreply %s", kl_code_name(s->reply.code));
        if (s->reply.code != KL_OK)
            fprintf(out, " detail=%s message=%s", s->reply.err.detail, s->reply.err.message);
        fprintf(out, "\nreceipt ");
        golden_hex(out, s->reply.receipt, s->reply.len);
        fprintf(out, "\n\n");
    }
}

/* pN.follower.state: the state a follower builds from partition N's stored log entries
 * (the decode-and-apply path, which the leader's own applies skip). */
static void write_follower_dumps(golden_run *run, const char *tmp, const char *out)
{
    for (int p = 0; p < GOLDEN_PARTITIONS; p++) {
        char dir[768], name[32];
        snprintf(dir, sizeof dir, "%s/f%d", tmp, p);
        if (mkdir(dir, 0700) != 0)
            golden_die("mkdir %s", dir);
        golden_node f;
        golden_follow(&run->nodes[p], &f, dir);
        snprintf(name, sizeof name, "p%d.follower.state", p);
        FILE *s = open_out(out, name), *l = fopen("/dev/null", "w");
        golden_dump_store(&f, s, l);
        fclose(s);
        fclose(l);
        golden_close(&f);
    }
}

static int cmd_vectors(const char *out)
{
    FILE *f = open_out(out, "canon.txt");
    golden_canon_vectors(f);
    fclose(f);

    char tmp[] = "/tmp/kl-golden-XXXXXX";
    if (mkdtemp(tmp) == NULL)
        golden_die("mkdtemp");
    static golden_run run;
    open_all(&run, tmp);
    FILE *w = open_out(out, "workload.txt");
    run.tokens = w;
    fprintf(w, "# reads (tokens) in workload order, reads and refusals after it, then every step's request, reply and receipt\n");
    golden_workload(&run);
    golden_reads(&run);
    golden_refusals(&run);
    fputc('\n', w);
    write_steps(&run, w);
    fclose(w);
    for (int p = 0; p < GOLDEN_PARTITIONS; p++) {
        char sn[16], ln[16];
        snprintf(sn, sizeof sn, "p%d.state", p);
        snprintf(ln, sizeof ln, "p%d.log", p);
        FILE *s = open_out(out, sn), *l = open_out(out, ln);
        golden_dump_store(&run.nodes[p], s, l);
        fclose(s);
        fclose(l);
    }
    write_follower_dumps(&run, tmp, out);
    close_all(&run);
    nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

static int cmd_fixture(const char *dir)
{
    static golden_run run;
    open_all(&run, dir);
    golden_workload(&run);
    FILE *f = open_out(dir, "requests.txt");
    for (size_t i = 0; i < run.n_steps; i++) {
        golden_step *s = &run.steps[i];
        fprintf(f, "%s %d %s %s ", s->name, s->partition, s->principal, kl_code_name(s->reply.code));
        golden_hex(f, s->req, s->req_len);
        fputc(' ', f);
        if (s->reply.len)
            golden_hex(f, s->reply.receipt, s->reply.len);
        else
            fputc('-', f);
        fprintf(f, " %s\n", s->reply.code != KL_OK && s->reply.err.detail[0] ? s->reply.err.detail : "-");
    }
    fclose(f);
    close_all(&run);
    return 0;
}

int golden_replay(const char *dir);
int golden_bench(long rounds);

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "vectors") == 0)
        return cmd_vectors(argv[2]);
    if (argc == 3 && strcmp(argv[1], "fixture") == 0)
        return cmd_fixture(argv[2]);
    if (argc == 3 && strcmp(argv[1], "replay") == 0)
        return golden_replay(argv[2]);
    if (argc == 3 && strcmp(argv[1], "bench") == 0)
        return golden_bench(strtol(argv[2], NULL, 10));
    int rc = golden_net_main(argc, argv);
    if (rc >= 0)
        return rc;
    fprintf(stderr, "usage: golden vectors OUT | fixture DIR | replay DIR | bench N | secret FILE |\n"
                    "              net-write URL DIR | net-replay URL DIR\n");
    return 2;
}
