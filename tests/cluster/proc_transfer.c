/* Process tests of remote queue transfers (docs/ARCHITECTURE.md "Engine", the transfer
 * rows; seeds ADR-088) against real keyloadd processes: one RF3 cluster, 3 partitions x 3
 * members, replica_count 3, sessions REQUIRED (member key pairs by `keyloadd keygen`,
 * public keys in the cluster file, one cluster secret, --member-key per member; no
 * "insecure_local_admin"). Loopback ports 15000..15999 (below Linux's ephemeral range;
 * other suites own other ranges).
 *
 * Sources live on partition 1, destinations on partition 2 (pinned at queue creation), so
 * every Accept really crosses partitions, carried only by the signed tokens. The transfer
 * operator "xfop" is a persisted cluster administrator whose data grants (QueuePublish and
 * QueueInspect on src.* and dst.*) are what the daemon checks with administrator flags
 * off; "root" (the bootstrap administrator) fills, drains and counts queues.
 *
 * The suites, named after the seeds' acceptance tests:
 *   RemoteTransferIntentTests       rollback creates no intent; same identity replays; changed
 *                                   destination or payload conflicts; pending survives a
 *                                   cold restart (kill -9 of all nine members).
 *   RemoteTransferDestinationTests  repeat Accept, an unknown ACK (the destination leader cut by
 *                                   a failpoint after apply, before any answer), a reopen: one
 *                                   enqueue and a byte-identical receipt; failed quota and
 *                                   failed authorization leave neither effect nor receipt;
 *                                   a full lane still answers a retry with the receipt.
 *   RemoteTransferReceiptTests      tampered, foreign and wrong-purpose receipts refused, the
 *                                   source stays pending; duplicate completion is stable;
 *                                   Delivered survives a cold restart.
 *   RemoteTransferRetentionTests    destination ACK then Accept again: deduplicated, nothing
 *                                   resurrected; source messages acked and queue deletion
 *                                   refused leave the intent; database and lane pause.
 *   CoordinationReadTests           ListPendingQueueTransfers charged exactly: the limit it
 *                                   needs passes, one less is RESOURCE_EXHAUSTED with nothing.
 *
 * The suites share one cluster (setting it up costs more than most checks): a passing suite
 * leaves it running for the next (xf_keep); a failed check or the last suite stops every
 * member by pid (xf_after_test, xf_stop_all from proc_test.c). Each suite uses its own
 * queues and transfer ids, so it does not depend on the one before; a suite that finds no
 * cluster sets one up. Every daemon is started by fork/exec with a bounded lifetime and the
 * parent-death signal (tests/cluster/rf3.c) and killed by its pid. */
#include "tests/cluster/proc.h"
#include "tests/cluster/rf3.h"

#include "client/keyload.h"
#include "common/keys.h"
#include "keyload/v1/catalog.pb-c.h"
#include "keyload/v1/claims.pb-c.h"
#include "keyload/v1/transfer.pb-c.h"

#include <signal.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define XF_PARTS RF3_PARTS
#define XF_MEMBERS RF3_MEMBERS
#define XF_SRC_PART 1
#define XF_DST_PART 2
#define XF_TIMEOUT_MS 15000
/* acme/fill's MaxScanRecords: how many receipts fill a destination lane there. */
#define XF_FILL 8

/* The databases (tenant acme): most suites share acme/xfer; the two that change database
 * limits get their own, so a tightened limit cannot leak into another suite. */
enum { DB_XFER, DB_COORD, DB_FILL, XF_DBS };
static const char *const xf_db_name[XF_DBS] = {"acme/xfer", "acme/coord", "acme/fill"};
enum { WHO_ROOT, WHO_OP, XF_WHOS };

/* ---- the cluster ---- */

static rf3 xf_c; /* the nine members (tests/cluster/rf3.h) */
static bool xf_up;   /* set up: keys, file, processes, principals, grants */
static bool xf_keep; /* the suite that just ran passed and leaves the cluster to the next */
static int xf_runs;  /* clusters set up by this process (fresh names, fresh data) */

typedef struct xf_who {
    char id[32];
    uint8_t pk[32], sk[64];
    char key_path[760];
} xf_who;
static xf_who xf_whos[XF_WHOS];
static kl_client *xf_clients[XF_WHOS][XF_DBS];

static void xf_clients_close(void)
{
    for (int w = 0; w < XF_WHOS; w++)
        for (int d = 0; d < XF_DBS; d++) {
            kl_client_close(xf_clients[w][d]);
            xf_clients[w][d] = NULL;
        }
}

static void xf_kill(int p, int m) { rf3_kill(&xf_c, p, m); }
/* Starts member (p, m) with KEYLOAD_FAILPOINTS = failpoints (NULL: none); log appended. */
static void xf_spawn(int p, int m, const char *failpoints) { rf3_spawn(&xf_c, p, m, failpoints); }
static bool xf_wait_all(int timeout_ms) { return rf3_wait_all(&xf_c, timeout_ms); }

void xf_stop_all(void)
{
    xf_clients_close();
    rf3_kill_all(&xf_c);
    xf_up = false;
    xf_keep = false;
}

void xf_after_test(bool failed)
{
    if (failed || !xf_keep)
        xf_stop_all();
    xf_keep = false;
}

/* kill -9 every member, then start them all again (none armed). Clients are closed first:
 * the suites open new ones, which say Hello to the new processes. */
static bool xf_cold_restart(void)
{
    xf_clients_close();
    return rf3_cold_restart(&xf_c);
}

static kl_client *xf_client(int who, int db)
{
    if (xf_clients[who][db] == NULL) {
        kl_err err;
        if (kl_client_open_principal(xf_c.file, xf_db_name[db], XF_TIMEOUT_MS, xf_whos[who].id, xf_whos[who].key_path,
                                     &xf_clients[who][db], &err) != KL_OK)
            fprintf(stderr, "  open client %s on %s: %s\n", xf_whos[who].id, xf_db_name[db], err.message);
    }
    return xf_clients[who][db];
}

static bool xf_who_new(xf_who *w, const char *id, const char *run)
{
    memset(w, 0, sizeof *w);
    snprintf(w->id, sizeof w->id, "%s", id);
    crypto_sign_keypair(w->pk, w->sk);
    snprintf(w->key_path, sizeof w->key_path, "%s/%s-%s.key", work, run, id);
    unlink(w->key_path);
    kl_err err;
    return kl_keys_write_secret_file("principal key file", w->key_path, w->sk, sizeof w->sk, &err) == KL_OK;
}

static kl_code xf_grant(int db, Keyload__V1__Permission perm, const char *pattern, kl_err *err)
{
    char cmd[KL_COMMAND_ID_TEXT_LEN + 1];
    kl_command_id_new(cmd);
    kl_grant g = {.permission = perm, .queue_pattern = pattern};
    kl_principal_result res;
    return kl_client_grant(xf_client(WHO_ROOT, db), cmd, "xfop", &g, &res, NULL, err);
}

/* Keys, cluster file, nine members, the administrator, databases, xfop and its grants. */
static bool xf_setup(char *why, size_t cap)
{
    char run[32];
    snprintf(run, sizeof run, "xf%d", xf_runs++);
    int base = 15000 + (int)(getpid() % 45) * 20;
    if (!rf3_write(&xf_c, run, base, PROC_LIFETIME_S, why, cap))
        return false;
    xf_up = true; /* from here on xf_stop_all has processes to stop */
    int64_t t0 = now_ms();
    if (!rf3_start_all(&xf_c, 40000)) {
        snprintf(why, cap, "the cluster did not serve within 40 s");
        return false;
    }
    if (!xf_who_new(&xf_whos[WHO_ROOT], "root", run) || !xf_who_new(&xf_whos[WHO_OP], "xfop", run)) {
        snprintf(why, cap, "principal key files");
        return false;
    }
    kl_err err;
    kl_err_clear(&err);
    if (sdk_bootstrap(xf_c.file, xf_c.secret, xf_db_name[DB_XFER], "root", xf_whos[WHO_ROOT].pk, NULL, NULL, &err) !=
        KL_OK) {
        snprintf(why, cap, "bootstrap: %s %s", kl_code_name(err.code), err.message);
        return false;
    }
    for (int d = 1; d < XF_DBS; d++) {
        kl_batch *b = NULL;
        kl_receipt *r = NULL;
        kl_code rc = kl_batch_new(NULL, &b, &err);
        if (rc == KL_OK)
            rc = kl_batch_create_database(b, xf_db_name[d], NULL, &err);
        if (rc == KL_OK)
            rc = kl_client_batch(xf_client(WHO_ROOT, DB_XFER), b, &r, &err);
        kl_batch_free(b);
        kl_receipt_free(r);
        if (rc != KL_OK) {
            snprintf(why, cap, "create database %s: %s %s", xf_db_name[d], kl_code_name(rc), err.message);
            return false;
        }
    }
    /* xfop: a persisted cluster administrator (so it may run transfers in every database of
     * acme), whose data grants are nonetheless checked with administrator flags off. */
    char cid[KL_COMMAND_ID_TEXT_LEN + 1];
    kl_command_id_new(cid);
    kl_principal_result res;
    if (kl_client_create_principal(xf_client(WHO_ROOT, DB_XFER), cid, "xfop", xf_whos[WHO_OP].pk,
                                   KL_ROLE_CLUSTER_ADMIN, &res, NULL, &err) != KL_OK) {
        snprintf(why, cap, "create xfop: %s %s", kl_code_name(err.code), err.message);
        return false;
    }
    static const char *const patterns[] = {"src.*", "dst.*"};
    for (int d = 0; d < XF_DBS; d++)
        for (int i = 0; i < 2; i++)
            if (xf_grant(d, KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, patterns[i], &err) != KL_OK ||
                xf_grant(d, KEYLOAD__V1__PERMISSION__QUEUE_INSPECT, patterns[i], &err) != KL_OK) {
                snprintf(why, cap, "grant %s on %s: %s", patterns[i], xf_db_name[d], err.message);
                return false;
            }
    /* The destination whose publish grant the destination suite revokes and restores. */
    if (xf_grant(DB_XFER, KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "auth.dst", &err) != KL_OK ||
        xf_grant(DB_XFER, KEYLOAD__V1__PERMISSION__QUEUE_INSPECT, "auth.dst", &err) != KL_OK) {
        snprintf(why, cap, "grant auth.dst: %s", err.message);
        return false;
    }
    fprintf(stderr, "  cluster %s: %d members (ports %d..%d), principals and grants ready in %lld ms\n", run,
            XF_PARTS * XF_MEMBERS, base, base + 2 * XF_PARTS * XF_MEMBERS - 1, (long long)(now_ms() - t0));
    return true;
}

/* The cluster for a suite: the one left running by the suite before, or a fresh one. */
static bool xf_ensure(char *why, size_t cap)
{
    if (xf_up) {
        for (int p = 0; p < XF_PARTS; p++)
            for (int m = 0; m < XF_MEMBERS; m++)
                if (xf_c.pid[p][m] <= 0) {
                    xf_stop_all();
                    return xf_setup(why, cap);
                }
        return true;
    }
    return xf_setup(why, cap);
}

/* ---- SDK wrappers: transfers, queues, reads ---- */

/* A token or receipt copied out of an answer (they are small here: bodies are short). */
typedef struct xf_tok {
    uint8_t b[4096];
    size_t n;
} xf_tok;

static bool tok_set(xf_tok *t, const uint8_t *p, size_t n)
{
    if (n > sizeof t->b)
        return false;
    memcpy(t->b, p, n);
    t->n = n;
    return true;
}

static bool tok_eq(const xf_tok *t, const uint8_t *p, size_t n) { return t->n == n && memcmp(t->b, p, n) == 0; }

/* Transfer ids and command ids: fresh random GUID text. */
typedef char xf_id[KL_COMMAND_ID_TEXT_LEN + 1];

static const Keyload__V1__MutationResult *only_result(const kl_receipt *r, int kind)
{
    if (r == NULL || r->decoded->n_results < 1 || (int)r->decoded->results[0]->kind_case != kind)
        return NULL;
    return r->decoded->results[0];
}

static kl_code xf_send(kl_client *c, kl_batch *b, kl_receipt **out, kl_err *err)
{
    kl_receipt *r = NULL;
    kl_code rc = kl_client_batch(c, b, &r, err);
    kl_batch_free(b);
    if (out)
        *out = r;
    else
        kl_receipt_free(r);
    return rc;
}

static kl_code xf_queue(kl_client *root, const char *name, int partition, uint64_t max_messages, kl_err *err)
{
    kl_batch *b = NULL;
    kl_queue_options o = {.pin_partition = true, .partition = partition, .max_messages = max_messages};
    kl_code rc = kl_batch_new(NULL, &b, err);
    if (rc == KL_OK)
        rc = kl_batch_create_queue(b, name, &o, err);
    if (rc != KL_OK) {
        kl_batch_free(b);
        return rc;
    }
    return xf_send(root, b, NULL, err);
}

/* A message with body text (no fields or headers: the grants carry no key lists). */
static kl_message *xf_msg(const char *body)
{
    kl_message *m = NULL;
    kl_err err;
    kl_message_new(body, strlen(body), &m, &err);
    return m;
}

/* CreateQueueTransfer under cmd (NULL: fresh). On KL_OK the intent token into *intent (when
 * not NULL), the receipt into *out (when not NULL). */
static kl_code xf_create(kl_client *c, const char *cmd, const char *src, const char *lane, const char *tid,
                         const char *dst, const char *body, xf_tok *intent, kl_receipt **out, kl_err *err)
{
    kl_batch *b = NULL;
    kl_message *m = xf_msg(body);
    kl_code rc = kl_batch_new(cmd, &b, err);
    if (rc == KL_OK)
        rc = kl_batch_create_transfer(b, src, lane, tid, dst, NULL, m, err);
    kl_message_free(m);
    if (rc != KL_OK) {
        kl_batch_free(b);
        return rc;
    }
    kl_receipt *r = NULL;
    rc = xf_send(c, b, &r, err);
    const Keyload__V1__MutationResult *res = only_result(r, KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_CREATED);
    if (rc == KL_OK && (res == NULL || (intent && !tok_set(intent, res->transfer_created->intent_token.data,
                                                           res->transfer_created->intent_token.len))))
        rc = kl_fail(err, KL_INTERNAL, "receipt", "the receipt carries no usable TransferCreated");
    if (out)
        *out = r;
    else
        kl_receipt_free(r);
    return rc;
}

static const Keyload__V1__TransferCreated *created_of(const kl_receipt *r)
{
    const Keyload__V1__MutationResult *res = only_result(r, KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_CREATED);
    return res ? res->transfer_created : NULL;
}

/* AcceptQueueTransfer under cmd on the client c. */
static kl_code xf_accept(kl_client *c, const char *cmd, const char *dst, const xf_tok *intent, kl_receipt **out,
                         kl_err *err)
{
    kl_batch *b = NULL;
    kl_code rc = kl_batch_new(cmd, &b, err);
    if (rc == KL_OK)
        rc = kl_batch_accept_transfer(b, dst, NULL, intent->b, intent->n, err);
    if (rc != KL_OK) {
        kl_batch_free(b);
        return rc;
    }
    kl_receipt *r = NULL;
    rc = xf_send(c, b, &r, err);
    if (rc == KL_OK && only_result(r, KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ACCEPTED) == NULL)
        rc = kl_fail(err, KL_INTERNAL, "receipt", "the receipt carries no TransferAccepted");
    if (out)
        *out = r;
    else
        kl_receipt_free(r);
    return rc;
}

static const Keyload__V1__TransferAccepted *accepted_of(const kl_receipt *r)
{
    const Keyload__V1__MutationResult *res = only_result(r, KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ACCEPTED);
    return res ? res->transfer_accepted : NULL;
}

static kl_code xf_complete(kl_client *c, const char *cmd, const char *src, const char *lane, const char *tid,
                           const xf_tok *receipt, kl_receipt **out, kl_err *err)
{
    kl_batch *b = NULL;
    kl_code rc = kl_batch_new(cmd, &b, err);
    if (rc == KL_OK)
        rc = kl_batch_complete_transfer(b, src, lane, tid, receipt->b, receipt->n, err);
    if (rc != KL_OK) {
        kl_batch_free(b);
        return rc;
    }
    kl_receipt *r = NULL;
    rc = xf_send(c, b, &r, err);
    if (rc == KL_OK && only_result(r, KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_COMPLETED) == NULL)
        rc = kl_fail(err, KL_INTERNAL, "receipt", "the receipt carries no TransferCompleted");
    if (out)
        *out = r;
    else
        kl_receipt_free(r);
    return rc;
}

static const Keyload__V1__TransferCompleted *completed_of(const kl_receipt *r)
{
    const Keyload__V1__MutationResult *res = only_result(r, KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_COMPLETED);
    return res ? res->transfer_completed : NULL;
}

static kl_code xf_pause(kl_client *c, const char *queue, const char *lane, bool paused, kl_receipt **out,
                        kl_err *err)
{
    kl_batch *b = NULL;
    kl_code rc = kl_batch_new(NULL, &b, err);
    if (rc == KL_OK)
        rc = kl_batch_pause_transfers(b, queue, lane, paused, err);
    if (rc != KL_OK) {
        kl_batch_free(b);
        return rc;
    }
    return xf_send(c, b, out, err);
}

/* The receipt token of (dst, src lane, tid) into *tok; KL_NOT_FOUND when none. */
static kl_code xf_receipt_read(kl_client *c, const char *dst, const char *src, const char *lane, const char *tid,
                               xf_tok *tok, Keyload__V1__TargetEffect *effect, kl_err *err)
{
    Keyload__V1__InspectQueueTransferReceiptAnswer *a = NULL;
    kl_code rc = kl_client_transfer_receipt(c, dst, src, lane, tid, &a, err);
    if (rc == KL_OK && (a->target_commit == NULL || !tok_set(tok, a->receipt_token.data, a->receipt_token.len)))
        rc = kl_fail(err, KL_INTERNAL, "answer", "the receipt answer has no target commit or a huge token");
    if (rc == KL_OK && effect)
        *effect = *a->target_commit;
    kl_transfer_receipt_answer_free(a);
    return rc;
}

/* messages held by queue (root's stats; -1 on error). */
static long long xf_messages(kl_client *root, const char *queue)
{
    Keyload__V1__QueueStatsAnswer *s = NULL;
    kl_err err;
    if (kl_client_queue_stats(root, queue, &s, &err) != KL_OK) {
        fprintf(stderr, "  stats %s: %s %s\n", queue, kl_code_name(err.code), err.message);
        return -1;
    }
    long long n = (long long)s->messages;
    kl_queue_stats_free(s);
    return n;
}

static kl_code xf_enqueue(kl_client *c, const char *queue, const char *body, kl_err *err)
{
    kl_batch *b = NULL;
    kl_message *m = xf_msg(body);
    kl_code rc = kl_batch_new(NULL, &b, err);
    if (rc == KL_OK)
        rc = kl_batch_enqueue(b, queue, NULL, m, err);
    kl_message_free(m);
    if (rc != KL_OK) {
        kl_batch_free(b);
        return rc;
    }
    return xf_send(c, b, NULL, err);
}

/* Receives up to max messages of queue (lane NULL: default); with ack, acks them all.
 * Returns how many were received (-1 on error); bodies copied into bodies[i] (64 bytes). */
static int xf_drain(kl_client *root, const char *queue, int max, bool ack, char bodies[][64], kl_err *err)
{
    kl_batch *b = NULL;
    kl_receipt *r = NULL;
    if (kl_batch_new(NULL, &b, err) != KL_OK)
        return -1;
    if (kl_batch_receive(b, queue, NULL, (uint32_t)max, 60000, err) != KL_OK) {
        kl_batch_free(b);
        return -1;
    }
    if (xf_send(root, b, &r, err) != KL_OK)
        return -1;
    const Keyload__V1__MutationResult *res = only_result(r, KEYLOAD__V1__MUTATION_RESULT__KIND_RECEIVED);
    int n = res ? (int)res->received->n_messages : -1;
    kl_bytes toks[64];
    for (int i = 0; i < n && i < 64; i++) {
        const Keyload__V1__ReceivedMessage *m = res->received->messages[i];
        toks[i].data = m->lease_token.data;
        toks[i].len = m->lease_token.len;
        if (bodies) {
            size_t l = m->message->body.len < 63 ? m->message->body.len : 63;
            memcpy(bodies[i], m->message->body.data, l);
            bodies[i][l] = '\0';
        }
    }
    if (ack && n > 0) {
        kl_batch *a = NULL;
        kl_code rc = kl_batch_new(NULL, &a, err);
        if (rc == KL_OK)
            rc = kl_batch_ack(a, queue, toks, (size_t)(n < 64 ? n : 64), err);
        if (rc == KL_OK)
            rc = xf_send(root, a, NULL, err);
        else
            kl_batch_free(a);
        if (rc != KL_OK)
            n = -1;
    }
    kl_receipt_free(r);
    return n;
}

/* InspectQueueTransfer; *out owned by the caller (kl_transfer_answer_free). */
static kl_code xf_inspect(kl_client *c, const char *src, const char *lane, const char *tid,
                          Keyload__V1__InspectQueueTransferAnswer **out, kl_err *err)
{
    return kl_client_inspect_transfer(c, src, lane, tid, out, err);
}

/* Whether the intent is OutputPending with exactly this intent token and no receipt. */
static bool xf_is_pending(kl_client *c, const char *src, const char *lane, const char *tid, const xf_tok *intent,
                          char *why, size_t cap)
{
    Keyload__V1__InspectQueueTransferAnswer *a = NULL;
    kl_err err;
    kl_code rc = xf_inspect(c, src, lane, tid, &a, &err);
    bool ok = rc == KL_OK && a->state == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING &&
              tok_eq(intent, a->intent_token.data, a->intent_token.len) && a->receipt_token.len == 0;
    if (!ok)
        snprintf(why, cap, "inspect: %s %s, state %s, intent token %s, receipt token %zu bytes", kl_code_name(rc),
                 rc == KL_OK ? "" : err.message, rc == KL_OK ? kl_transfer_state_name(a->state) : "-",
                 rc == KL_OK && tok_eq(intent, a->intent_token.data, a->intent_token.len) ? "same" : "DIFFERENT",
                 rc == KL_OK ? a->receipt_token.len : 0);
    kl_transfer_answer_free(a);
    return ok;
}

static bool same_receipt(const kl_receipt *a, const kl_receipt *b)
{
    return a && b && a->len == b->len && memcmp(a->bytes, b->bytes, a->len) == 0;
}

#define XF_BEGIN()                                                                                                 \
    char why[1024] = "";                                                                                           \
    kl_err err;                                                                                                    \
    kl_err_clear(&err);                                                                                            \
    CHECK(xf_ensure(why, sizeof why), "cluster: %s", why)

/* ---- RemoteTransferIntentTests (REQ/AC-XFER-001) ---- */

void test_xfer_intent(void)
{
    fprintf(stderr, "  RemoteTransferIntentTests\n");
    XF_BEGIN();
    kl_client *root = xf_client(WHO_ROOT, DB_XFER), *op = xf_client(WHO_OP, DB_XFER);
    CHECK(root && op, "clients");
    CHECK(xf_queue(root, "src.i", XF_SRC_PART, 0, &err) == KL_OK, "queue src.i: %s", err.message);
    CHECK(xf_queue(root, "dst.i", XF_DST_PART, 0, &err) == KL_OK, "queue dst.i: %s", err.message);
    CHECK(xf_queue(root, "dst.i2", XF_DST_PART, 0, &err) == KL_OK, "queue dst.i2: %s", err.message);
    CHECK(xf_queue(root, "src.full", XF_SRC_PART, 1, &err) == KL_OK, "queue src.full: %s", err.message);
    CHECK(xf_enqueue(root, "src.full", "filler", &err) == KL_OK, "fill src.full: %s", err.message);

    /* Producer rollback: the Create is evaluated, then the batch's second mutation (an
     * enqueue into a full queue of the same partition) fails: nothing of it commits. */
    xf_id tid, cmd;
    kl_command_id_new(tid);
    kl_batch *b = NULL;
    kl_message *m = xf_msg("intent-one");
    CHECK(kl_batch_new(NULL, &b, &err) == KL_OK && kl_batch_create_transfer(b, "src.i", NULL, tid, "dst.i", NULL, m, &err) == KL_OK &&
              kl_batch_enqueue(b, "src.full", NULL, m, &err) == KL_OK,
          "build: %s", err.message);
    kl_message_free(m);
    kl_code rc = xf_send(op, b, NULL, &err);
    CHECK(rc == KL_RESOURCE_EXHAUSTED, "Create + enqueue into a full queue: %s %s (%s)", kl_code_name(rc), err.detail,
          err.message);
    Keyload__V1__InspectQueueTransferAnswer *ia = NULL;
    rc = xf_inspect(op, "src.i", NULL, tid, &ia, &err);
    kl_transfer_answer_free(ia);
    ia = NULL;
    CHECK(rc == KL_NOT_FOUND, "inspect after the rolled-back batch: %s (want NOT_FOUND)", kl_code_name(rc));
    Keyload__V1__ListPendingQueueTransfersAnswer *pa = NULL;
    CHECK(kl_client_pending_transfers(op, "src.i", NULL, -1, NULL, 0, 0, &pa, &err) == KL_OK && pa->n_items == 0,
          "pending after the rolled-back batch: %s, %zu items", err.message, pa ? pa->n_items : 0);
    kl_pending_transfers_free(pa);
    pa = NULL;

    /* The id is free: the same Create alone commits. */
    xf_tok intent, again;
    kl_receipt *first = NULL, *r = NULL;
    kl_command_id_new(cmd);
    CHECK(xf_create(op, cmd, "src.i", NULL, tid, "dst.i", "intent-one", &intent, &first, &err) == KL_OK,
          "create: %s %s (%s)", kl_code_name(err.code), err.detail, err.message);
    CHECK(!created_of(first)->existing && created_of(first)->state == KEYLOAD__V1__TRANSFER_STATE__OUTPUT_PENDING &&
              created_of(first)->generation == 1,
          "first create: existing %d state %u generation %llu", created_of(first)->existing, created_of(first)->state,
          (unsigned long long)created_of(first)->generation);
    /* The same command replays its stored receipt byte for byte. */
    CHECK(xf_create(op, cmd, "src.i", NULL, tid, "dst.i", "intent-one", NULL, &r, &err) == KL_OK && same_receipt(first, r),
          "replay of the create command: %s, receipt %s", kl_code_name(err.code),
          same_receipt(first, r) ? "same" : "DIFFERENT");
    kl_receipt_free(r);
    r = NULL;
    /* Same identity under a new command id: the existing intent, same token bytes. */
    CHECK(xf_create(op, NULL, "src.i", NULL, tid, "dst.i", "intent-one", &again, &r, &err) == KL_OK,
          "same identity, new command id: %s %s", kl_code_name(err.code), err.message);
    CHECK(created_of(r)->existing && tok_eq(&intent, again.b, again.n),
          "same identity: existing %d, token %s", created_of(r)->existing,
          tok_eq(&intent, again.b, again.n) ? "same" : "DIFFERENT");
    kl_receipt_free(r);
    r = NULL;
    /* Changed destination or payload under the same id: CONFLICT, the intent unchanged. */
    rc = xf_create(op, NULL, "src.i", NULL, tid, "dst.i2", "intent-one", NULL, NULL, &err);
    CHECK(rc == KL_CONFLICT && strcmp(err.detail, "transfer_id") == 0, "changed destination: %s %s (%s)",
          kl_code_name(rc), err.detail, err.message);
    rc = xf_create(op, NULL, "src.i", NULL, tid, "dst.i", "intent-two", NULL, NULL, &err);
    CHECK(rc == KL_CONFLICT && strcmp(err.detail, "transfer_id") == 0, "changed payload: %s %s (%s)",
          kl_code_name(rc), err.detail, err.message);
    CHECK(xf_is_pending(op, "src.i", NULL, tid, &intent, why, sizeof why), "after the conflicts: %s", why);
    /* The same id on another lane of the same queue is another transfer (ids are scoped by
     * the complete source lane). */
    xf_tok other;
    CHECK(xf_create(op, NULL, "src.i", "east", tid, "dst.i2", "intent-two", &other, NULL, &err) == KL_OK,
          "same id on lane east: %s %s (%s)", kl_code_name(err.code), err.detail, err.message);
    CHECK(!tok_eq(&intent, other.b, other.n), "two lanes' intents share a token");
    /* Source and destination on one partition: refused, with how to pin a placement. */
    xf_id t2;
    kl_command_id_new(t2);
    rc = xf_create(op, NULL, "src.i", NULL, t2, "src.full", "x", NULL, NULL, &err);
    CHECK(rc == KL_FAILED_PRECONDITION && strcmp(err.detail, "same_partition") == 0 &&
              strstr(err.message, "--partition") != NULL,
          "same partition: %s %s (%s)", kl_code_name(rc), err.detail, err.message);
    long long dst_before = xf_messages(root, "dst.i");
    CHECK(dst_before == 0, "dst.i holds %lld before any Accept", dst_before);

    /* Cold restart: kill -9 of all nine members; the pending intent is there, its token byte
     * for byte, and the original Create receipt replays. */
    CHECK(xf_cold_restart(), "cold restart");
    root = xf_client(WHO_ROOT, DB_XFER);
    op = xf_client(WHO_OP, DB_XFER);
    CHECK(xf_is_pending(op, "src.i", NULL, tid, &intent, why, sizeof why), "after the cold restart: %s", why);
    CHECK(xf_inspect(op, "src.i", NULL, tid, &ia, &err) == KL_OK, "inspect: %s", err.message);
    bool shape = ia->n_history == 1 && ia->history[0]->event == KEYLOAD__V1__TRANSFER_EVENT__INTENT_CREATED &&
                 ia->destination && strcmp(ia->destination->queue, "dst.i") == 0 &&
                 strcmp(ia->destination->lane, "default") == 0 && strcmp(ia->principal_id, "xfop") == 0 &&
                 ia->generation == 1;
    kl_transfer_answer_free(ia);
    ia = NULL;
    CHECK(shape, "the intent's history, destination, creator or generation changed across the restart");
    CHECK(xf_create(op, cmd, "src.i", NULL, tid, "dst.i", "intent-one", NULL, &r, &err) == KL_OK && same_receipt(first, r),
          "the create command's receipt across the cold restart: %s, %s", kl_code_name(err.code),
          same_receipt(first, r) ? "same" : "DIFFERENT");
    kl_receipt_free(r);
    r = NULL;
    CHECK(kl_client_pending_transfers(op, "src.i", NULL, -1, NULL, 0, 0, &pa, &err) == KL_OK && pa->n_items == 2,
          "pending after the restart: %s, %zu items (want 2: default and east)", err.message, pa ? pa->n_items : 0);
    bool listed = false;
    for (size_t i = 0; i < pa->n_items; i++)
        if (strcmp(pa->items[i]->source->lane, "default") == 0)
            listed = tok_eq(&intent, pa->items[i]->intent_token.data, pa->items[i]->intent_token.len);
    kl_pending_transfers_free(pa);
    pa = NULL;
    CHECK(listed, "the listed intent token differs from the stored one");
    CHECK(xf_messages(root, "dst.i") == 0, "a restart produced a destination message");
    /* The restarted intent still works: its token is accepted on the destination. */
    CHECK(xf_accept(op, NULL, "dst.i", &intent, &r, &err) == KL_OK && !accepted_of(r)->deduplicated,
          "accept after the restart: %s %s (%s)", kl_code_name(err.code), err.detail, err.message);
    kl_receipt_free(r);
    kl_receipt_free(first);
    CHECK(xf_messages(root, "dst.i") == 1, "dst.i after the accept");
    xf_keep = true;
}

/* ---- RemoteTransferDestinationTests (REQ/AC-XFER-002) ---- */

/* Restarts partition p's members armed with failpoints (kill -9, then start). */
static bool xf_restart_partition(int p, const char *failpoints)
{
    xf_clients_close();
    for (int m = 0; m < XF_MEMBERS; m++)
        xf_kill(p, m);
    for (int m = 0; m < XF_MEMBERS; m++)
        xf_spawn(p, m, failpoints);
    return xf_wait_all(40000);
}

void test_xfer_destination(void)
{
    fprintf(stderr, "  RemoteTransferDestinationTests\n");
    XF_BEGIN();
    kl_client *root = xf_client(WHO_ROOT, DB_XFER), *op = xf_client(WHO_OP, DB_XFER);
    CHECK(root && op, "clients");
    CHECK(xf_queue(root, "src.d", XF_SRC_PART, 0, &err) == KL_OK, "queue src.d: %s", err.message);
    CHECK(xf_queue(root, "dst.d", XF_DST_PART, 0, &err) == KL_OK, "queue dst.d: %s", err.message);
    CHECK(xf_queue(root, "dst.full", XF_DST_PART, 1, &err) == KL_OK, "queue dst.full: %s", err.message);
    CHECK(xf_queue(root, "auth.dst", XF_DST_PART, 0, &err) == KL_OK, "queue auth.dst: %s", err.message);

    /* 1. Repeat Accept: the same command replays, a new command is deduplicated. */
    xf_id t1, a1;
    xf_tok i1, r1, r1b;
    kl_receipt *acc1 = NULL, *r = NULL;
    kl_command_id_new(t1);
    kl_command_id_new(a1);
    CHECK(xf_create(op, NULL, "src.d", NULL, t1, "dst.d", "dest-one", &i1, NULL, &err) == KL_OK, "create t1: %s",
          err.message);
    CHECK(xf_accept(op, a1, "dst.d", &i1, &acc1, &err) == KL_OK, "accept t1: %s %s (%s)", kl_code_name(err.code),
          err.detail, err.message);
    const Keyload__V1__TransferAccepted *ta1 = accepted_of(acc1);
    CHECK(!ta1->deduplicated && ta1->partition == XF_DST_PART && ta1->message_id > 0,
          "first accept: dedup %d partition %d message %llu", ta1->deduplicated, ta1->partition,
          (unsigned long long)ta1->message_id);
    CHECK(xf_accept(op, a1, "dst.d", &i1, &r, &err) == KL_OK && same_receipt(acc1, r),
          "accept command replay: %s, receipt %s", kl_code_name(err.code), same_receipt(acc1, r) ? "same" : "DIFFERENT");
    kl_receipt_free(r);
    r = NULL;
    CHECK(xf_accept(op, NULL, "dst.d", &i1, &r, &err) == KL_OK, "accept t1 again: %s", err.message);
    const Keyload__V1__TransferAccepted *d1 = accepted_of(r);
    CHECK(d1->deduplicated && d1->message_id == ta1->message_id && d1->term == ta1->term && d1->index == ta1->index,
          "second accept: dedup %d, effect %llu@%llu/%llu vs %llu@%llu/%llu", d1->deduplicated,
          (unsigned long long)d1->message_id, (unsigned long long)d1->term, (unsigned long long)d1->index,
          (unsigned long long)ta1->message_id, (unsigned long long)ta1->term, (unsigned long long)ta1->index);
    kl_receipt_free(r);
    r = NULL;
    Keyload__V1__TargetEffect e1;
    CHECK(xf_receipt_read(op, "dst.d", "src.d", NULL, t1, &r1, &e1, &err) == KL_OK, "receipt t1: %s", err.message);
    CHECK(e1.message_id == ta1->message_id && e1.index == ta1->index, "the receipt names another effect");
    CHECK(xf_messages(root, "dst.d") == 1, "dst.d after a repeated accept");
    /* Only the intent's creator may accept it. */
    kl_code rc = xf_accept(root, NULL, "dst.d", &i1, NULL, &err);
    CHECK(rc == KL_PERMISSION_DENIED && strcmp(err.detail, "intent_principal") == 0,
          "accept by another administrator: %s %s", kl_code_name(rc), err.detail);

    /* 2. Unknown ACK: every member of the destination partition armed to exit once the first
     * batch a caller waits on has committed, before answering it (its leader's cut). */
    xf_id t2, a2;
    xf_tok i2, r2;
    kl_command_id_new(t2);
    kl_command_id_new(a2);
    CHECK(xf_create(op, NULL, "src.d", NULL, t2, "dst.d", "dest-two", &i2, NULL, &err) == KL_OK, "create t2: %s",
          err.message);
    CHECK(xf_restart_partition(XF_DST_PART, "daemon.after_append_before_reply=1*exit"), "armed restart of partition %d",
          XF_DST_PART);
    kl_client *cut = NULL;
    CHECK(kl_client_open_principal(xf_c.file, xf_db_name[DB_XFER], 4000, "xfop", xf_whos[WHO_OP].key_path, &cut,
                                   &err) == KL_OK,
          "short-timeout client: %s", err.message);
    rc = xf_accept(cut, a2, "dst.d", &i2, NULL, &err);
    kl_client_close(cut);
    CHECK(rc != KL_OK, "the cut accept was answered OK");
    fprintf(stderr, "  the cut accept answered %s (%s)\n", kl_code_name(rc), err.detail);
    int cut_m = -1;
    int64_t deadline = now_ms() + 15000;
    while (cut_m < 0 && now_ms() < deadline) {
        for (int m = 0; m < XF_MEMBERS && cut_m < 0; m++) {
            int st;
            if (xf_c.pid[XF_DST_PART][m] > 0 && waitpid(xf_c.pid[XF_DST_PART][m], &st, WNOHANG) == xf_c.pid[XF_DST_PART][m]) {
                xf_c.pid[XF_DST_PART][m] = -1;
                CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 77, "p%dm%d ended with status %d, not the failpoint's exit",
                      XF_DST_PART, m + 1, st);
                cut_m = m;
            }
        }
        if (cut_m < 0)
            sleep_ms(50);
    }
    CHECK(cut_m >= 0, "no destination member stopped at daemon.after_append_before_reply");
    /* The cut member comes back unarmed; the others stay armed, so until the whole cluster
     * restarts this partition gets only reads and replays (neither applies a new entry). */
    xf_spawn(XF_DST_PART, cut_m, NULL);
    CHECK(xf_wait_all(40000), "partition %d after the cut member's restart", XF_DST_PART);
    root = xf_client(WHO_ROOT, DB_XFER);
    op = xf_client(WHO_OP, DB_XFER);
    /* The effect committed before any retry: the receipt is there and one message. */
    Keyload__V1__TargetEffect e2;
    CHECK(xf_receipt_read(op, "dst.d", "src.d", NULL, t2, &r2, &e2, &err) == KL_OK,
          "receipt t2 before any retry: %s %s", kl_code_name(err.code), err.message);
    CHECK(xf_messages(root, "dst.d") == 2, "dst.d after the cut accept (want 2)");
    /* The retry with the same command id learns the original outcome. */
    kl_receipt *acc2 = NULL;
    CHECK(xf_accept(op, a2, "dst.d", &i2, &acc2, &err) == KL_OK, "retry of the cut accept: %s %s (%s)",
          kl_code_name(err.code), err.detail, err.message);
    CHECK(!accepted_of(acc2)->deduplicated && accepted_of(acc2)->message_id == e2.message_id &&
              accepted_of(acc2)->index == e2.index,
          "the retried command's receipt is not the cut commit's");
    CHECK(xf_messages(root, "dst.d") == 2, "dst.d after the retry (want 2)");
    xf_tok r2b;
    CHECK(xf_receipt_read(op, "dst.d", "src.d", NULL, t2, &r2b, NULL, &err) == KL_OK && tok_eq(&r2, r2b.b, r2b.n),
          "receipt t2 after the retry: %s", kl_code_name(err.code));

    /* 3. Reopen: the whole cluster cold (the destination's armed members too). */
    CHECK(xf_cold_restart(), "cold restart");
    root = xf_client(WHO_ROOT, DB_XFER);
    op = xf_client(WHO_OP, DB_XFER);
    CHECK(xf_receipt_read(op, "dst.d", "src.d", NULL, t1, &r1b, NULL, &err) == KL_OK && tok_eq(&r1, r1b.b, r1b.n),
          "receipt t1 after the reopen: %s, %s", kl_code_name(err.code), tok_eq(&r1, r1b.b, r1b.n) ? "same" : "DIFFERENT");
    CHECK(xf_receipt_read(op, "dst.d", "src.d", NULL, t2, &r2b, NULL, &err) == KL_OK && tok_eq(&r2, r2b.b, r2b.n),
          "receipt t2 after the reopen: %s, %s", kl_code_name(err.code), tok_eq(&r2, r2b.b, r2b.n) ? "same" : "DIFFERENT");
    CHECK(xf_accept(op, a2, "dst.d", &i2, &r, &err) == KL_OK && same_receipt(acc2, r),
          "the cut command's receipt after the reopen: %s", kl_code_name(err.code));
    kl_receipt_free(r);
    r = NULL;
    CHECK(xf_accept(op, NULL, "dst.d", &i1, &r, &err) == KL_OK && accepted_of(r)->deduplicated, "accept t1 after the reopen: %s",
          err.message);
    kl_receipt_free(r);
    r = NULL;
    CHECK(xf_accept(op, NULL, "dst.d", &i2, &r, &err) == KL_OK && accepted_of(r)->deduplicated, "accept t2 after the reopen: %s",
          err.message);
    kl_receipt_free(r);
    r = NULL;
    char bodies[64][64];
    int got = xf_drain(root, "dst.d", 10, false, bodies, &err);
    CHECK(got == 2, "dst.d delivered %d messages (want exactly 2): %s", got, err.message);
    CHECK(strcmp(bodies[0], "dest-one") == 0 && strcmp(bodies[1], "dest-two") == 0, "bodies %s, %s", bodies[0],
          bodies[1]);
    kl_receipt_free(acc1);
    kl_receipt_free(acc2);

    /* 4. Failed quota: dst.full (max 1 message) is full. Neither effect nor receipt; the
     * source stays pending; the refusal is committed under its command id. */
    CHECK(xf_enqueue(root, "dst.full", "filler", &err) == KL_OK, "fill dst.full: %s", err.message);
    xf_id t3, a3;
    xf_tok i3, r3;
    kl_command_id_new(t3);
    kl_command_id_new(a3);
    CHECK(xf_create(op, NULL, "src.d", NULL, t3, "dst.full", "dest-quota", &i3, NULL, &err) == KL_OK, "create t3: %s",
          err.message);
    rc = xf_accept(op, a3, "dst.full", &i3, NULL, &err);
    CHECK(rc == KL_RESOURCE_EXHAUSTED, "accept into a full queue: %s %s (%s)", kl_code_name(rc), err.detail, err.message);
    rc = xf_receipt_read(op, "dst.full", "src.d", NULL, t3, &r3, NULL, &err);
    CHECK(rc == KL_NOT_FOUND, "receipt after the quota refusal: %s (want NOT_FOUND)", kl_code_name(rc));
    CHECK(xf_messages(root, "dst.full") == 1, "dst.full changed by the refused accept");
    CHECK(xf_is_pending(op, "src.d", NULL, t3, &i3, why, sizeof why), "source after the quota refusal: %s", why);
    /* Room again: the same command still answers its committed refusal; a new one succeeds. */
    CHECK(xf_drain(root, "dst.full", 1, true, NULL, &err) == 1, "drain dst.full: %s", err.message);
    rc = xf_accept(op, a3, "dst.full", &i3, NULL, &err);
    CHECK(rc == KL_RESOURCE_EXHAUSTED, "the refused command after the fix: %s (want its RESOURCE_EXHAUSTED again)",
          kl_code_name(rc));
    fprintf(stderr, "  the refused accept's command after the fix answers %s %s\n", kl_code_name(rc), err.detail);
    CHECK(xf_messages(root, "dst.full") == 0, "dst.full after the replayed refusal");
    CHECK(xf_accept(op, NULL, "dst.full", &i3, &r, &err) == KL_OK && !accepted_of(r)->deduplicated,
          "accept under a new command id after the fix: %s %s", kl_code_name(err.code), err.message);
    kl_receipt_free(r);
    r = NULL;
    CHECK(xf_messages(root, "dst.full") == 1, "dst.full after the accept");

    /* 5. Failed authorization: the creator's QueuePublish on the destination is revoked
     * after the Create. Neither effect nor receipt; the source stays pending. */
    xf_id t4, a4;
    xf_tok i4, r4;
    kl_command_id_new(t4);
    kl_command_id_new(a4);
    CHECK(xf_create(op, NULL, "src.d", NULL, t4, "auth.dst", "dest-auth", &i4, NULL, &err) == KL_OK, "create t4: %s",
          err.message);
    char rcmd[KL_COMMAND_ID_TEXT_LEN + 1];
    kl_command_id_new(rcmd);
    kl_principal_result pres;
    CHECK(kl_client_revoke(root, rcmd, "xfop", KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "auth.dst", &pres, NULL, &err) ==
                  KL_OK &&
              pres.changed,
          "revoke: %s", err.message);
    rc = xf_accept(op, a4, "auth.dst", &i4, NULL, &err);
    CHECK(rc == KL_PERMISSION_DENIED && strcmp(err.detail, "grant:QueuePublish") == 0,
          "accept without QueuePublish on the destination: %s %s (%s)", kl_code_name(rc), err.detail, err.message);
    rc = xf_receipt_read(op, "auth.dst", "src.d", NULL, t4, &r4, NULL, &err);
    CHECK(rc == KL_NOT_FOUND, "receipt after the denied accept: %s (want NOT_FOUND)", kl_code_name(rc));
    CHECK(xf_messages(root, "auth.dst") == 0, "auth.dst changed by the denied accept");
    CHECK(xf_is_pending(op, "src.d", NULL, t4, &i4, why, sizeof why), "source after the denied accept: %s", why);
    CHECK(xf_grant(DB_XFER, KEYLOAD__V1__PERMISSION__QUEUE_PUBLISH, "auth.dst", &err) == KL_OK, "grant again: %s",
          err.message);
    rc = xf_accept(op, a4, "auth.dst", &i4, NULL, &err);
    /* The committed refusal, word for word, although the grant changed the policy epoch
     * (a refusal had no effect: nothing to withhold as stale_authority). */
    CHECK(rc == KL_PERMISSION_DENIED && strcmp(err.detail, "grant:QueuePublish") == 0,
          "the denied command after the grant: %s %s (want its PERMISSION_DENIED grant:QueuePublish again)",
          kl_code_name(rc), err.detail);
    CHECK(xf_messages(root, "auth.dst") == 0, "auth.dst after the replayed refusal");
    CHECK(xf_accept(op, NULL, "auth.dst", &i4, &r, &err) == KL_OK && !accepted_of(r)->deduplicated,
          "accept under a new command id after the grant: %s %s", kl_code_name(err.code), err.message);
    kl_receipt_free(r);
    r = NULL;
    CHECK(xf_messages(root, "auth.dst") == 1, "auth.dst after the accept");

    /* 6. A full destination lane. acme/fill gets MaxScanRecords XF_FILL (every request there
     * may examine that many records, and each lane may retain that many transfer records):
     * XF_FILL receipts fill dst.f's lane, one more transfer is refused at admission, and a
     * retry of an accepted one still gets its receipt. */
    kl_client *froot = xf_client(WHO_ROOT, DB_FILL), *fop = xf_client(WHO_OP, DB_FILL);
    CHECK(froot && fop, "acme/fill clients");
    CHECK(xf_queue(froot, "src.f", XF_SRC_PART, 0, &err) == KL_OK, "queue src.f: %s", err.message);
    CHECK(xf_queue(froot, "dst.f", XF_DST_PART, 0, &err) == KL_OK, "queue dst.f: %s", err.message);
    xf_id ft[XF_FILL + 1];
    xf_tok fi[XF_FILL + 1], fr0, fr0b, frx;
    for (int i = 0; i <= XF_FILL; i++) {
        kl_command_id_new(ft[i]);
        CHECK(xf_create(fop, NULL, "src.f", NULL, ft[i], "dst.f", "fill", &fi[i], NULL, &err) == KL_OK,
              "create fill %d: %s", i, err.message);
    }
    char lcmd[KL_COMMAND_ID_TEXT_LEN + 1];
    kl_command_id_new(lcmd);
    kl_database_limits lim = {.max_scan_records = XF_FILL};
    kl_limits_result lres;
    CHECK(kl_client_set_database_limits(froot, lcmd, &lim, &lres, NULL, &err) == KL_OK, "limits: %s", err.message);
    kl_receipt *facc = NULL;
    CHECK(xf_accept(fop, NULL, "dst.f", &fi[0], &facc, &err) == KL_OK, "accept fill 0: %s %s", kl_code_name(err.code),
          err.message);
    for (int i = 1; i < XF_FILL; i++)
        CHECK(xf_accept(fop, NULL, "dst.f", &fi[i], NULL, &err) == KL_OK, "accept fill %d: %s", i, err.message);
    CHECK(xf_receipt_read(fop, "dst.f", "src.f", NULL, ft[0], &fr0, NULL, &err) == KL_OK, "receipt fill 0: %s",
          err.message);
    rc = xf_accept(fop, NULL, "dst.f", &fi[XF_FILL], NULL, &err);
    CHECK(rc == KL_RESOURCE_EXHAUSTED && strcmp(err.detail, "limit:MaxScanRecords") == 0 &&
              strstr(err.message, "retains") != NULL,
          "accept into a full lane: %s %s (%s)", kl_code_name(rc), err.detail, err.message);
    rc = xf_receipt_read(fop, "dst.f", "src.f", NULL, ft[XF_FILL], &frx, NULL, &err);
    CHECK(rc == KL_NOT_FOUND, "receipt of the refused transfer: %s", kl_code_name(rc));
    CHECK(xf_messages(froot, "dst.f") == XF_FILL, "dst.f after the refusal");
    CHECK(xf_is_pending(fop, "src.f", NULL, ft[XF_FILL], &fi[XF_FILL], why, sizeof why), "refused transfer: %s", why);
    CHECK(xf_accept(fop, NULL, "dst.f", &fi[0], &r, &err) == KL_OK, "retry into the full lane: %s %s (%s)",
          kl_code_name(err.code), err.detail, err.message);
    CHECK(accepted_of(r)->deduplicated && accepted_of(r)->message_id == accepted_of(facc)->message_id,
          "retry into the full lane: not the original receipt");
    kl_receipt_free(r);
    kl_receipt_free(facc);
    CHECK(xf_receipt_read(fop, "dst.f", "src.f", NULL, ft[0], &fr0b, NULL, &err) == KL_OK && tok_eq(&fr0, fr0b.b, fr0b.n),
          "receipt fill 0 after the retry");
    CHECK(xf_messages(froot, "dst.f") == XF_FILL, "dst.f after the retry");
    xf_keep = true;
}

/* ---- RemoteTransferReceiptTests (REQ/AC-XFER-003) ---- */

void test_xfer_receipt(void)
{
    fprintf(stderr, "  RemoteTransferReceiptTests\n");
    XF_BEGIN();
    kl_client *root = xf_client(WHO_ROOT, DB_XFER), *op = xf_client(WHO_OP, DB_XFER);
    CHECK(root && op, "clients");
    CHECK(xf_queue(root, "src.r", XF_SRC_PART, 0, &err) == KL_OK, "queue src.r: %s", err.message);
    CHECK(xf_queue(root, "dst.r", XF_DST_PART, 0, &err) == KL_OK, "queue dst.r: %s", err.message);
    xf_id t5, t6, c5;
    xf_tok i5, i6, r5, r6, bad;
    kl_command_id_new(t5);
    kl_command_id_new(t6);
    kl_command_id_new(c5);
    CHECK(xf_create(op, NULL, "src.r", NULL, t5, "dst.r", "receipt-five", &i5, NULL, &err) == KL_OK, "create t5: %s",
          err.message);
    CHECK(xf_create(op, NULL, "src.r", NULL, t6, "dst.r", "receipt-six", &i6, NULL, &err) == KL_OK, "create t6: %s",
          err.message);
    CHECK(xf_accept(op, NULL, "dst.r", &i5, NULL, &err) == KL_OK, "accept t5: %s", err.message);
    CHECK(xf_accept(op, NULL, "dst.r", &i6, NULL, &err) == KL_OK, "accept t6: %s", err.message);
    CHECK(xf_receipt_read(op, "dst.r", "src.r", NULL, t5, &r5, NULL, &err) == KL_OK, "receipt t5: %s", err.message);
    CHECK(xf_receipt_read(op, "dst.r", "src.r", NULL, t6, &r6, NULL, &err) == KL_OK, "receipt t6: %s", err.message);

    /* Tampered: the signature's last byte, then a byte inside the claims. */
    bad = r5;
    bad.b[bad.n - 1] ^= 0x01;
    kl_code rc = xf_complete(op, NULL, "src.r", NULL, t5, &bad, NULL, &err);
    CHECK(rc == KL_PERMISSION_DENIED && strcmp(err.detail, "receipt_signature") == 0,
          "tampered signature: %s %s (%s)", kl_code_name(rc), err.detail, err.message);
    CHECK(xf_is_pending(op, "src.r", NULL, t5, &i5, why, sizeof why), "after a tampered signature: %s", why);
    bad = r5;
    bad.b[bad.n / 3] ^= 0x20;
    rc = xf_complete(op, NULL, "src.r", NULL, t5, &bad, NULL, &err);
    CHECK(rc == KL_PERMISSION_DENIED || rc == KL_INVALID_ARGUMENT, "tampered claims: %s %s (%s)", kl_code_name(rc),
          err.detail, err.message);
    CHECK(xf_is_pending(op, "src.r", NULL, t5, &i5, why, sizeof why), "after tampered claims: %s", why);
    /* Genuine tokens for something else: another transfer's receipt, an intent token. */
    rc = xf_complete(op, NULL, "src.r", NULL, t5, &r6, NULL, &err);
    CHECK(rc == KL_FAILED_PRECONDITION && strcmp(err.detail, "receipt:transfer_id") == 0,
          "another transfer's receipt: %s %s (%s)", kl_code_name(rc), err.detail, err.message);
    rc = xf_complete(op, NULL, "src.r", NULL, t5, &i5, NULL, &err);
    CHECK(rc == KL_FAILED_PRECONDITION && strcmp(err.detail, "receipt:purpose") == 0,
          "the intent token as a receipt: %s %s (%s)", kl_code_name(rc), err.detail, err.message);
    CHECK(xf_is_pending(op, "src.r", NULL, t5, &i5, why, sizeof why), "after foreign receipts: %s", why);

    /* The genuine receipt completes; the same command replays; a new one is `already`. */
    kl_receipt *done = NULL, *r = NULL;
    CHECK(xf_complete(op, c5, "src.r", NULL, t5, &r5, &done, &err) == KL_OK, "complete t5: %s %s (%s)",
          kl_code_name(err.code), err.detail, err.message);
    CHECK(completed_of(done)->state == KEYLOAD__V1__TRANSFER_STATE__DELIVERED && !completed_of(done)->already,
          "complete: state %u already %d", completed_of(done)->state, completed_of(done)->already);
    CHECK(xf_complete(op, c5, "src.r", NULL, t5, &r5, &r, &err) == KL_OK && same_receipt(done, r),
          "complete command replay: %s", kl_code_name(err.code));
    kl_receipt_free(r);
    r = NULL;
    CHECK(xf_complete(op, NULL, "src.r", NULL, t5, &r5, &r, &err) == KL_OK && completed_of(r)->already &&
              completed_of(r)->state == KEYLOAD__V1__TRANSFER_STATE__DELIVERED,
          "duplicate completion: %s %s", kl_code_name(err.code), err.message);
    kl_receipt_free(r);
    r = NULL;
    bad = r5;
    bad.b[bad.n - 1] ^= 0x01;
    rc = xf_complete(op, NULL, "src.r", NULL, t5, &bad, NULL, &err);
    CHECK(rc == KL_PERMISSION_DENIED, "a tampered receipt after Delivered: %s", kl_code_name(rc));
    Keyload__V1__InspectQueueTransferAnswer *ia = NULL;
    CHECK(xf_inspect(op, "src.r", NULL, t5, &ia, &err) == KL_OK && ia->state == KEYLOAD__V1__TRANSFER_STATE__DELIVERED &&
              tok_eq(&r5, ia->receipt_token.data, ia->receipt_token.len) && ia->n_history == 2 &&
              ia->history[1]->event == KEYLOAD__V1__TRANSFER_EVENT__RECEIPT_VERIFIED,
          "t5 after completion: %s", err.message);
    kl_transfer_answer_free(ia);
    ia = NULL;
    CHECK(xf_is_pending(op, "src.r", NULL, t6, &i6, why, sizeof why), "t6 (not completed): %s", why);
    Keyload__V1__ListPendingQueueTransfersAnswer *pa = NULL;
    CHECK(kl_client_pending_transfers(op, "src.r", NULL, -1, NULL, 0, 0, &pa, &err) == KL_OK && pa->n_items == 1 &&
              tok_eq(&i6, pa->items[0]->intent_token.data, pa->items[0]->intent_token.len),
          "pending of src.r: %s, %zu items (want t6 only)", err.message, pa ? pa->n_items : 0);
    kl_pending_transfers_free(pa);
    pa = NULL;

    /* Delivered survives a cold restart, byte for byte. */
    CHECK(xf_cold_restart(), "cold restart");
    root = xf_client(WHO_ROOT, DB_XFER);
    op = xf_client(WHO_OP, DB_XFER);
    CHECK(xf_inspect(op, "src.r", NULL, t5, &ia, &err) == KL_OK, "inspect t5 after the restart: %s", err.message);
    bool same = ia->state == KEYLOAD__V1__TRANSFER_STATE__DELIVERED &&
                tok_eq(&r5, ia->receipt_token.data, ia->receipt_token.len) &&
                tok_eq(&i5, ia->intent_token.data, ia->intent_token.len) && ia->n_history == 2;
    kl_transfer_answer_free(ia);
    CHECK(same, "t5 after the cold restart is not Delivered with the same tokens and history");
    CHECK(xf_complete(op, c5, "src.r", NULL, t5, &r5, &r, &err) == KL_OK && same_receipt(done, r),
          "complete command replay after the restart: %s", kl_code_name(err.code));
    kl_receipt_free(r);
    kl_receipt_free(done);
    CHECK(xf_is_pending(op, "src.r", NULL, t6, &i6, why, sizeof why), "t6 after the restart: %s", why);
    CHECK(kl_client_pending_transfers(op, "src.r", NULL, -1, NULL, 0, 0, &pa, &err) == KL_OK && pa->n_items == 1,
          "pending of src.r after the restart: %zu items", pa ? pa->n_items : 0);
    kl_pending_transfers_free(pa);
    CHECK(xf_messages(root, "dst.r") == 2, "dst.r after the restart");
    xf_keep = true;
}

/* ---- RemoteTransferRetentionTests (REQ/AC-XFER-004) ---- */

/* Create, accept, read the receipt and complete: one whole transfer. */
static bool xf_round(kl_client *op, const char *src, const char *lane, const char *tid, const char *dst,
                     const char *body, xf_tok *intent, xf_tok *receipt, char *why, size_t cap)
{
    kl_err err;
    kl_err_clear(&err);
    const char *step = "create";
    kl_code rc = xf_create(op, NULL, src, lane, tid, dst, body, intent, NULL, &err);
    if (rc == KL_OK && (step = "accept", rc = xf_accept(op, NULL, dst, intent, NULL, &err)) == KL_OK &&
        (step = "receipt", rc = xf_receipt_read(op, dst, src, lane, tid, receipt, NULL, &err)) == KL_OK)
        step = "complete", rc = xf_complete(op, NULL, src, lane, tid, receipt, NULL, &err);
    if (rc != KL_OK)
        snprintf(why, cap, "%s: %s %s (%s)", step, kl_code_name(rc), err.detail, err.message);
    return rc == KL_OK;
}

void test_xfer_retention(void)
{
    fprintf(stderr, "  RemoteTransferRetentionTests\n");
    XF_BEGIN();
    kl_client *root = xf_client(WHO_ROOT, DB_XFER), *op = xf_client(WHO_OP, DB_XFER);
    CHECK(root && op, "clients");
    CHECK(xf_queue(root, "src.t", XF_SRC_PART, 0, &err) == KL_OK, "queue src.t: %s", err.message);
    CHECK(xf_queue(root, "dst.t", XF_DST_PART, 0, &err) == KL_OK, "queue dst.t: %s", err.message);

    /* Destination ACK, then Accept again under a new command id: the dedup receipt stands and
     * no message comes back. */
    xf_id t7;
    xf_tok i7, r7, r7b;
    kl_command_id_new(t7);
    CHECK(xf_round(op, "src.t", NULL, t7, "dst.t", "keep-seven", &i7, &r7, why, sizeof why), "t7: %s", why);
    CHECK(xf_drain(root, "dst.t", 10, true, NULL, &err) == 1, "receive and ack dst.t: %s", err.message);
    CHECK(xf_messages(root, "dst.t") == 0, "dst.t after the ack");
    kl_receipt *r = NULL;
    CHECK(xf_accept(op, NULL, "dst.t", &i7, &r, &err) == KL_OK && accepted_of(r)->deduplicated,
          "accept after the destination ack: %s %s", kl_code_name(err.code), err.message);
    kl_receipt_free(r);
    r = NULL;
    CHECK(xf_messages(root, "dst.t") == 0, "the acked message came back");
    CHECK(xf_drain(root, "dst.t", 10, false, NULL, &err) == 0, "dst.t delivers a resurrected message");
    CHECK(xf_receipt_read(op, "dst.t", "src.t", NULL, t7, &r7b, NULL, &err) == KL_OK && tok_eq(&r7, r7b.b, r7b.n),
          "receipt after the ack: %s", kl_code_name(err.code));
    /* The destination retains the receipt: it cannot be deleted though it is empty. */
    kl_batch *b = NULL;
    CHECK(kl_batch_new(NULL, &b, &err) == KL_OK && kl_batch_delete_queue(b, "dst.t", &err) == KL_OK, "build");
    kl_code rc = xf_send(root, b, NULL, &err);
    CHECK(rc == KL_FAILED_PRECONDITION && strcmp(err.detail, "queue_has_transfers") == 0,
          "delete of a destination holding a receipt: %s %s (%s)", kl_code_name(rc), err.detail, err.message);

    /* The source's own messages come and go; the intent owns its payload and stays. */
    xf_id t8;
    xf_tok i8, r8;
    kl_command_id_new(t8);
    for (int i = 0; i < 3; i++)
        CHECK(xf_enqueue(root, "src.t", "source-own", &err) == KL_OK, "enqueue src.t: %s", err.message);
    CHECK(xf_create(op, NULL, "src.t", NULL, t8, "dst.t", "keep-eight", &i8, NULL, &err) == KL_OK, "create t8: %s",
          err.message);
    CHECK(xf_drain(root, "src.t", 10, true, NULL, &err) == 3, "receive and ack src.t: %s", err.message);
    CHECK(xf_messages(root, "src.t") == 0, "src.t after the ack");
    CHECK(xf_is_pending(op, "src.t", NULL, t8, &i8, why, sizeof why), "t8 after the source's messages left: %s", why);
    CHECK(kl_batch_new(NULL, &b, &err) == KL_OK && kl_batch_delete_queue(b, "src.t", &err) == KL_OK, "build");
    rc = xf_send(root, b, NULL, &err);
    CHECK(rc == KL_FAILED_PRECONDITION && strcmp(err.detail, "queue_has_transfers") == 0,
          "delete of a source holding intents: %s %s (%s)", kl_code_name(rc), err.detail, err.message);
    CHECK(xf_is_pending(op, "src.t", NULL, t8, &i8, why, sizeof why), "t8 after the refused delete: %s", why);

    /* Database pause: new Creates refused, the pending t8 still accepts and completes. */
    kl_receipt *pr = NULL;
    CHECK(xf_pause(op, NULL, NULL, true, &pr, &err) == KL_OK, "pause the database: %s %s", kl_code_name(err.code),
          err.message);
    const Keyload__V1__MutationResult *pres = only_result(pr, KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFERS_PAUSED);
    CHECK(pres && pres->transfers_paused->paused && pres->transfers_paused->changed, "pause result");
    kl_receipt_free(pr);
    pr = NULL;
    xf_id t9;
    xf_tok i9, r9;
    kl_command_id_new(t9);
    rc = xf_create(op, NULL, "src.t", NULL, t9, "dst.t", "keep-nine", &i9, NULL, &err);
    CHECK(rc == KL_FAILED_PRECONDITION && strcmp(err.detail, "transfers_paused") == 0,
          "create while the database is paused: %s %s (%s)", kl_code_name(rc), err.detail, err.message);
    Keyload__V1__InspectQueueTransferAnswer *ia = NULL;
    rc = xf_inspect(op, "src.t", NULL, t9, &ia, &err);
    kl_transfer_answer_free(ia);
    ia = NULL;
    CHECK(rc == KL_NOT_FOUND, "the refused create left an intent: %s", kl_code_name(rc));
    CHECK(xf_accept(op, NULL, "dst.t", &i8, NULL, &err) == KL_OK, "accept t8 while paused: %s %s",
          kl_code_name(err.code), err.message);
    CHECK(xf_receipt_read(op, "dst.t", "src.t", NULL, t8, &r8, NULL, &err) == KL_OK, "receipt t8: %s", err.message);
    CHECK(xf_complete(op, NULL, "src.t", NULL, t8, &r8, NULL, &err) == KL_OK, "complete t8 while paused: %s %s",
          kl_code_name(err.code), err.message);
    CHECK(xf_pause(op, NULL, NULL, false, NULL, &err) == KL_OK, "resume the database: %s", err.message);
    CHECK(xf_round(op, "src.t", NULL, t9, "dst.t", "keep-nine", &i9, &r9, why, sizeof why), "t9 after resume: %s",
          why);

    /* Lane pause: that lane refuses new Creates, another lane of the queue does not; an
     * intent already pending on the paused lane goes on. */
    xf_id t10, t11, t12;
    xf_tok i10, i11, i12, r10, r11, r12;
    kl_command_id_new(t10);
    kl_command_id_new(t11);
    kl_command_id_new(t12);
    CHECK(xf_create(op, NULL, "src.t", "lp", t12, "dst.t", "keep-twelve", &i12, NULL, &err) == KL_OK,
          "create t12: %s", err.message);
    CHECK(xf_pause(op, "src.t", "lp", true, &pr, &err) == KL_OK, "pause lane lp: %s %s", kl_code_name(err.code),
          err.message);
    pres = only_result(pr, KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFERS_PAUSED);
    CHECK(pres && pres->transfers_paused->paused && pres->transfers_paused->changed, "lane pause result");
    kl_receipt_free(pr);
    rc = xf_create(op, NULL, "src.t", "lp", t10, "dst.t", "keep-ten", &i10, NULL, &err);
    CHECK(rc == KL_FAILED_PRECONDITION && strcmp(err.detail, "transfers_paused") == 0,
          "create on the paused lane: %s %s (%s)", kl_code_name(rc), err.detail, err.message);
    CHECK(xf_round(op, "src.t", "other", t11, "dst.t", "keep-eleven", &i11, &r11, why, sizeof why),
          "t11 on another lane: %s", why);
    CHECK(xf_accept(op, NULL, "dst.t", &i12, NULL, &err) == KL_OK, "accept t12 on the paused lane: %s", err.message);
    CHECK(xf_receipt_read(op, "dst.t", "src.t", "lp", t12, &r12, NULL, &err) == KL_OK, "receipt t12: %s", err.message);
    CHECK(xf_complete(op, NULL, "src.t", "lp", t12, &r12, NULL, &err) == KL_OK, "complete t12 on the paused lane: %s",
          err.message);
    CHECK(xf_pause(op, "src.t", "lp", false, NULL, &err) == KL_OK, "resume lane lp: %s", err.message);
    CHECK(xf_round(op, "src.t", "lp", t10, "dst.t", "keep-ten", &i10, &r10, why, sizeof why), "t10 after resume: %s",
          why);
    /* Five transfers delivered to dst.t, one message each (t7's was acked). */
    CHECK(xf_messages(root, "dst.t") == 5, "dst.t holds %lld (want 5)", xf_messages(root, "dst.t"));
    xf_keep = true;
}

/* ---- CoordinationReadTests (REQ/AC-XFER-COORDINATION-READ-001) ---- */

static kl_code xf_limits(kl_client *root, uint64_t records, uint64_t bytes, kl_err *err)
{
    char cmd[KL_COMMAND_ID_TEXT_LEN + 1];
    kl_command_id_new(cmd);
    kl_database_limits lim = {.max_scan_records = records, .max_query_read_bytes = bytes};
    kl_limits_result res;
    return kl_client_set_database_limits(root, cmd, &lim, &res, NULL, err);
}

void test_xfer_coordination_read(void)
{
    fprintf(stderr, "  CoordinationReadTests\n");
    XF_BEGIN();
    kl_client *root = xf_client(WHO_ROOT, DB_COORD), *op = xf_client(WHO_OP, DB_COORD);
    CHECK(root && op, "clients");
    CHECK(xf_queue(root, "src.c", XF_SRC_PART, 0, &err) == KL_OK, "queue src.c: %s", err.message);
    CHECK(xf_queue(root, "dst.c", XF_DST_PART, 0, &err) == KL_OK, "queue dst.c: %s", err.message);
    xf_id t[3];
    xf_tok in[3];
    for (int i = 0; i < 3; i++) {
        kl_command_id_new(t[i]);
        CHECK(xf_create(op, NULL, "src.c", NULL, t[i], "dst.c", "coord", &in[i], NULL, &err) == KL_OK, "create %d: %s",
              i, err.message);
    }
    /* Limits whose encodings keep the database record's size: MaxScanRecords below 128 (one
     * varint byte) and MaxQueryReadBytes between 128 and 16383 (two), so the database
     * record each read charges is the same size in every configuration below. */
    CHECK(xf_limits(root, 100, 16000, &err) == KL_OK, "limits: %s", err.message);
    Keyload__V1__ListPendingQueueTransfersAnswer *a = NULL;
    /* max 2 of 3: principal + database + queue + 2 x (index + intent) + 1 look-ahead = 8. */
    CHECK(kl_client_pending_transfers(op, "src.c", NULL, -1, NULL, 0, 2, &a, &err) == KL_OK, "list 2: %s %s",
          kl_code_name(err.code), err.message);
    CHECK(a->n_items == 2 && !a->done && a->next_cursor.len > 0 && a->records_charged == 8,
          "list 2: %zu items, done %d, records %llu (want 2, 0, 8)", a->n_items, a->done,
          (unsigned long long)a->records_charged);
    uint64_t bytes2 = a->bytes_charged;
    uint8_t cursor[512];
    size_t cursor_len = a->next_cursor.len < sizeof cursor ? a->next_cursor.len : 0;
    memcpy(cursor, a->next_cursor.data, cursor_len);
    kl_pending_transfers_free(a);
    a = NULL;
    /* The next page from the cursor: 3 + 1 x 2, no look-ahead entry exists. */
    CHECK(kl_client_pending_transfers(op, "src.c", NULL, -1, cursor, cursor_len, 2, &a, &err) == KL_OK &&
              a->n_items == 1 && a->done && a->records_charged == 5,
          "second page: %s, %zu items, done %d, records %llu (want 1, 1, 5)", err.message, a ? a->n_items : 0,
          a ? a->done : 0, a ? (unsigned long long)a->records_charged : 0);
    kl_pending_transfers_free(a);
    a = NULL;
    /* All three: 3 + 3 x 2 = 9, done. Without a queue (the partition): 2 + 3 x 2 = 8. */
    CHECK(kl_client_pending_transfers(op, "src.c", NULL, -1, NULL, 0, 3, &a, &err) == KL_OK && a->n_items == 3 &&
              a->done && a->records_charged == 9,
          "list 3: %zu items, records %llu (want 3, 9)", a ? a->n_items : 0, a ? (unsigned long long)a->records_charged : 0);
    kl_pending_transfers_free(a);
    a = NULL;
    CHECK(kl_client_pending_transfers(op, NULL, NULL, XF_SRC_PART, NULL, 0, 3, &a, &err) == KL_OK && a->n_items == 3 &&
              a->records_charged == 8,
          "list partition %d: %s, %zu items, records %llu (want 3, 8)", XF_SRC_PART, err.message, a ? a->n_items : 0,
          a ? (unsigned long long)a->records_charged : 0);
    kl_pending_transfers_free(a);
    a = NULL;

    /* Records: exactly 8 passes with the same charge, 7 is refused with nothing. */
    CHECK(xf_limits(root, 8, 16000, &err) == KL_OK, "limits 8: %s", err.message);
    CHECK(kl_client_pending_transfers(op, "src.c", NULL, -1, NULL, 0, 2, &a, &err) == KL_OK && a->n_items == 2 &&
              a->records_charged == 8 && a->bytes_charged == bytes2,
          "list 2 under MaxScanRecords 8: %s %s, records %llu bytes %llu (want 8, %llu)", kl_code_name(err.code),
          err.message, a ? (unsigned long long)a->records_charged : 0, a ? (unsigned long long)a->bytes_charged : 0,
          (unsigned long long)bytes2);
    kl_pending_transfers_free(a);
    a = NULL;
    CHECK(xf_limits(root, 7, 16000, &err) == KL_OK, "limits 7: %s", err.message);
    kl_code rc = kl_client_pending_transfers(op, "src.c", NULL, -1, NULL, 0, 2, &a, &err);
    CHECK(rc == KL_RESOURCE_EXHAUSTED && strcmp(err.detail, "limit:MaxScanRecords") == 0 && a == NULL,
          "list 2 under MaxScanRecords 7: %s %s (%s), answer %s", kl_code_name(rc), err.detail, err.message,
          a ? "returned" : "none");

    /* Bytes: exactly what it charges passes, one byte less is refused with nothing. */
    CHECK(bytes2 >= 128 && bytes2 < 16384, "charged %llu bytes: outside the two-byte varint range this test assumes",
          (unsigned long long)bytes2);
    CHECK(xf_limits(root, 100, bytes2, &err) == KL_OK, "limits bytes: %s", err.message);
    CHECK(kl_client_pending_transfers(op, "src.c", NULL, -1, NULL, 0, 2, &a, &err) == KL_OK && a->n_items == 2 &&
              a->bytes_charged == bytes2,
          "list 2 under MaxQueryReadBytes %llu: %s %s (%s)", (unsigned long long)bytes2, kl_code_name(err.code),
          err.detail, err.message);
    kl_pending_transfers_free(a);
    a = NULL;
    CHECK(xf_limits(root, 100, bytes2 - 1, &err) == KL_OK, "limits bytes-1: %s", err.message);
    rc = kl_client_pending_transfers(op, "src.c", NULL, -1, NULL, 0, 2, &a, &err);
    CHECK(rc == KL_RESOURCE_EXHAUSTED && strcmp(err.detail, "limit:MaxQueryReadBytes") == 0 && a == NULL,
          "list 2 under MaxQueryReadBytes %llu: %s %s (%s)", (unsigned long long)bytes2 - 1, kl_code_name(rc),
          err.detail, err.message);

    /* A completed intent leaves the listing: max 2 of the 2 left charges 3 + 2 x 2 = 7. */
    CHECK(xf_limits(root, 0, 0, &err) == KL_OK, "limits back: %s", err.message);
    xf_tok rc0;
    CHECK(xf_accept(op, NULL, "dst.c", &in[0], NULL, &err) == KL_OK, "accept 0: %s", err.message);
    CHECK(xf_receipt_read(op, "dst.c", "src.c", NULL, t[0], &rc0, NULL, &err) == KL_OK, "receipt 0: %s", err.message);
    CHECK(xf_complete(op, NULL, "src.c", NULL, t[0], &rc0, NULL, &err) == KL_OK, "complete 0: %s", err.message);
    CHECK(kl_client_pending_transfers(op, "src.c", NULL, -1, NULL, 0, 2, &a, &err) == KL_OK && a->n_items == 2 &&
              a->done && a->records_charged == 7,
          "after completing one: %zu items, records %llu (want 2, 7)", a ? a->n_items : 0,
          a ? (unsigned long long)a->records_charged : 0);
    for (size_t i = 0; i < a->n_items; i++)
        CHECK(!tok_eq(&in[0], a->items[i]->intent_token.data, a->items[i]->intent_token.len),
              "the delivered intent is still listed");
    kl_pending_transfers_free(a);
    (void)root;
}
