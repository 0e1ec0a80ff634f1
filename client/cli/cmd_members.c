/* keyload cluster members|member: a partition's configuration in effect (Members) and the
 * membership changes its leader runs (MemberChange); membership.proto, docs/MEMBERSHIP.md.
 * A change waits (--wait-ms) until the configuration in effect is the target, committed.
 *
 * Catalog tails are signed, and a member is trusted only with a key the cluster file or
 * partition 0's catalog gives it (docs/MEMBERSHIP.md "Who vouches for a new member's key"):
 * partition 0 checks a data partition's members with it, data partitions check partition
 * 0's. So add and replace with --public-key first register the new member's key in partition
 * 0's catalog (SetMemberKey), and remove and replace, once the change committed, remove the
 * old member's key there; --keep-keys leaves the records alone. `member key` sets or removes
 * one record by hand. */
#include "client/cli/cli.h"
#include "common/clock.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MEMBERS_USAGE                                                                            \
    "keyload cluster members --partition P\n"                                                    \
    "       keyload cluster member add --partition P --id N --peer-url URL [--client-url URL]\n" \
    "                  [--public-key HEX] [--replica-count Q] [--wait-ms MS]\n"                  \
    "       keyload cluster member remove --partition P --id N [--replica-count Q] [--wait-ms MS]\n" \
    "       keyload cluster member replace --partition P --old N --id M --peer-url URL\n"       \
    "                  [--client-url URL] [--public-key HEX] [--replica-count Q] [--wait-ms MS]\n" \
    "       (add, remove, replace: [--keep-keys] leaves partition 0's member-key records alone)\n" \
    "       keyload cluster member key --partition P --id N (--public-key HEX | --remove)"

static json_t *ids_json(const uint64_t *ids, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer((json_int_t)ids[i]));
    return a;
}

static void print_ids(const char *label, const uint64_t *ids, size_t n)
{
    printf("%s", label);
    for (size_t i = 0; i < n; i++)
        printf("%s%llu", i ? "," : " ", (unsigned long long)ids[i]);
    printf("\n");
}

static int print_members(cli *c, const Keyload__V1__MembersAnswer *a)
{
    if (c->json) {
        json_t *o = json_pack("{s:I, s:I, s:o, s:i, s:o, s:b, s:I, s:b, s:s}", "member", (json_int_t)a->member,
                              "leader", (json_int_t)a->leader, "voters", ids_json(a->voters, a->n_voters),
                              "replica_count", (int)a->replica_count, "learners",
                              ids_json(a->learners, a->n_learners), "joint", (int)a->joint, "conf_index",
                              (json_int_t)a->conf_index, "committed", (int)a->committed, "change", a->change);
        if (o != NULL && a->joint) {
            json_object_set_new(o, "old_voters", ids_json(a->old_voters, a->n_old_voters));
            json_object_set_new(o, "old_replica_count", json_integer(a->old_replica_count));
        }
        json_t *dir = json_array();
        for (size_t i = 0; o != NULL && i < a->n_directory; i++)
            json_array_append_new(dir, json_pack("{s:I, s:s, s:s}", "id", (json_int_t)a->directory[i]->id,
                                                 "peer_url", a->directory[i]->peer_url, "client_url",
                                                 a->directory[i]->client_url));
        if (o != NULL)
            json_object_set_new(o, "directory", dir);
        char *txt = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        return cli_print_json(c, txt);
    }
    printf("leader %llu (answered by %llu), configuration index %llu%s%s\n", (unsigned long long)a->leader,
           (unsigned long long)a->member, (unsigned long long)a->conf_index,
           a->committed ? " committed" : " not committed", a->joint ? ", joint" : "");
    print_ids("voters", a->voters, a->n_voters);
    printf("replica_count %u\n", a->replica_count);
    print_ids("learners", a->learners, a->n_learners);
    if (a->joint) {
        print_ids("old voters", a->old_voters, a->n_old_voters);
        printf("old replica_count %u\n", a->old_replica_count);
    }
    for (size_t i = 0; i < a->n_directory; i++)
        printf("member %llu peer %s client %s\n", (unsigned long long)a->directory[i]->id,
               a->directory[i]->peer_url, a->directory[i]->client_url);
    if (a->change[0])
        printf("change in flight: %s\n", a->change);
    return CLI_EXIT_OK;
}

typedef struct member_args {
    int64_t partition;
    uint64_t id, old, replica_count;
    int64_t wait_ms;
    const char *peer_url, *client_url, *public_key;
    bool keep_keys, remove_key;
} member_args;

static int parse_member_opt(cli *c, cli_args *a, member_args *m)
{
    if (cli_opt_is(a, "--keep-keys") || cli_opt_is(a, "--remove")) {
        *(cli_opt_is(a, "--remove") ? &m->remove_key : &m->keep_keys) = true;
        return -1;
    }
    const char *v = cli_opt_value(c, a);
    if (v == NULL)
        return CLI_EXIT_USAGE;
    bool ok = true;
    if (cli_opt_is(a, "--partition"))
        ok = cli_parse_i64(c, "--partition", v, 0, 1 << 20, &m->partition);
    else if (cli_opt_is(a, "--id"))
        ok = cli_parse_u64(c, "--id", v, UINT64_MAX, &m->id);
    else if (cli_opt_is(a, "--old"))
        ok = cli_parse_u64(c, "--old", v, UINT64_MAX, &m->old);
    else if (cli_opt_is(a, "--replica-count"))
        ok = cli_parse_u64(c, "--replica-count", v, 9, &m->replica_count);
    else if (cli_opt_is(a, "--wait-ms"))
        ok = cli_parse_i64(c, "--wait-ms", v, 0, 3600000, &m->wait_ms);
    else if (cli_opt_is(a, "--peer-url"))
        m->peer_url = v;
    else if (cli_opt_is(a, "--client-url"))
        m->client_url = v;
    else if (cli_opt_is(a, "--public-key"))
        m->public_key = v;
    else
        return cli_unknown_option(c, a);
    return ok ? -1 : CLI_EXIT_USAGE;
}

/* The options of `cluster members|member OP`: -1 to go on, else the exit code. */
static int parse_members(cli *c, int argc, char **argv, const char **op, member_args *m)
{
    *m = (member_args){.partition = -1, .wait_ms = 60000};
    cli_args a;
    cli_args_init(&a, argc, argv);
    const char *pos;
    cli_arg_kind k;
    while ((k = cli_next(c, &a, &pos)) != CLI_END) {
        if (k == CLI_FAILED)
            return CLI_EXIT_USAGE;
        if (k == CLI_POSITIONAL) {
            if (*op != NULL)
                return cli_usage(c, "unexpected argument '%s'", pos);
            *op = pos;
            continue;
        }
        if (cli_opt_is(&a, "--help") || cli_opt_is(&a, "-h"))
            return cli_help(c);
        int rc = parse_member_opt(c, &a, m);
        if (rc >= 0)
            return rc;
    }
    if (m->partition < 0)
        return cli_usage(c, "--partition is required");
    return -1;
}

static bool hex_key(const char *hex, uint8_t out[32])
{
    if (hex == NULL || strlen(hex) != 64)
        return false;
    for (int i = 0; i < 32; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return false;
        out[i] = (uint8_t)v;
    }
    return true;
}

/* Polls Members until the configuration is the target (voters, committed, not joint). */
static kl_code wait_target(kl_client *client, int partition, const Keyload__V1__MemberChangeAnswer *t,
                           int64_t wait_ms, kl_err *err)
{
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        Keyload__V1__MembersAnswer *m = NULL;
        kl_code rc = kl_client_members(client, partition, &m, err);
        bool done = false;
        if (rc == KL_OK) {
            done = m->committed && !m->joint && m->n_voters == t->n_voters && m->n_learners == 0 &&
                   m->replica_count == t->replica_count;
            for (size_t i = 0; done && i < t->n_voters; i++) {
                bool f = false;
                for (size_t j = 0; j < m->n_voters; j++)
                    f = f || m->voters[j] == t->voters[i];
                done = f;
            }
            keyload__v1__members_answer__free_unpacked(m, NULL);
        }
        if (done)
            return KL_OK;
        clock_gettime(CLOCK_MONOTONIC, &now);
        int64_t ms = (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
        if (ms >= wait_ms)
            return kl_fail(err, KL_DEADLINE_EXCEEDED, "wait_ms",
                           "the change has not finished within --wait-ms %lld ms (it may still finish: "
                           "see keyload cluster members)", (long long)wait_ms);
        usleep(100 * 1000);
    }
}

static int64_t mono_ms(void)
{
    return kl_clock_ms(CLOCK_MONOTONIC);
}

/* SetMemberKey of (partition, id) (key NULL: remove), under one command id, retried while
 * partition 0 answers UNAVAILABLE (a catalog barrier waiting for a partition that cannot
 * commit, as one whose member died at replica_count = voters) for up to wait_ms. */
static kl_code set_member_key(kl_client *client, int partition, uint64_t id, const uint8_t *key, int64_t wait_ms,
                              kl_err *err)
{
    char cid[KL_COMMAND_ID_TEXT_LEN + 1];
    kl_command_id_new(cid);
    int64_t end = mono_ms() + (wait_ms > 0 ? wait_ms : 60000);
    for (;;) {
        kl_code rc = kl_client_set_member_key(client, cid, partition, id, key, NULL, err);
        bool again = rc == KL_UNAVAILABLE || rc == KL_UNKNOWN_WRITE_OUTCOME || rc == KL_DEADLINE_EXCEEDED;
        if (!again || mono_ms() >= end)
            return rc;
        usleep(200 * 1000);
    }
}

static int member_key(cli *c, kl_client *client, const member_args *m)
{
    if (m->id == 0 || (m->public_key == NULL) == !m->remove_key)
        return cli_usage(c, "member key needs --id N and either --public-key HEX or --remove");
    uint8_t key[32];
    if (m->public_key != NULL && !hex_key(m->public_key, key))
        return cli_usage(c, "--public-key takes 64 hex digits (an Ed25519 public key)");
    kl_err err;
    kl_err_clear(&err);
    if (set_member_key(client, (int)m->partition, m->id, m->remove_key ? NULL : key, m->wait_ms, &err) != KL_OK)
        return cli_error(c, &err);
    if (c->json) {
        json_t *o = json_pack("{s:I, s:I, s:b}", "partition", (json_int_t)m->partition, "member",
                              (json_int_t)m->id, "removed", (int)m->remove_key);
        char *txt = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        return cli_print_json(c, txt);
    }
    printf("partition 0 %s member %llu of partition %lld\n", m->remove_key ? "refuses" : "trusts the key of",
           (unsigned long long)m->id, (long long)m->partition);
    return CLI_EXIT_OK;
}

static int member_change(cli *c, kl_client *client, const char *op, const member_args *m)
{
    if (!strcmp(op, "key"))
        return member_key(c, client, m);
    bool rem = !strcmp(op, "remove"), rep = !strcmp(op, "replace");
    if (strcmp(op, "add") && !rem && !rep)
        return cli_usage(c, "member takes add, remove, replace or key, not '%s'", op);
    if (m->id == 0 || (rep && m->old == 0))
        return cli_usage(c, rep ? "replace needs --old N and --id M" : "%s needs --id N", op);
    if (!rem && (m->peer_url == NULL || m->peer_url[0] == '\0'))
        return cli_usage(c, "%s needs --peer-url URL for the new member", op);
    uint8_t key[32];
    if (!rem && m->public_key != NULL && !hex_key(m->public_key, key))
        return cli_usage(c, "--public-key takes 64 hex digits (an Ed25519 public key)");
    Keyload__V1__MemberInfo info = KEYLOAD__V1__MEMBER_INFO__INIT;
    Keyload__V1__MemberChangeRequest q = KEYLOAD__V1__MEMBER_CHANGE_REQUEST__INIT;
    q.op = (char *)op;
    q.replica_count = (uint32_t)m->replica_count;
    if (rem) {
        q.old_member_id = m->id;
    } else {
        info.id = m->id;
        info.peer_url = (char *)m->peer_url;
        info.client_url = (char *)(m->client_url ? m->client_url : "");
        if (m->public_key != NULL) {
            info.public_key.data = key;
            info.public_key.len = sizeof key;
        }
        q.member = &info;
        q.old_member_id = m->old;
    }
    kl_err err;
    kl_err_clear(&err);
    /* Partition 0's catalog vouches for a data partition's new member before it can lead. */
    bool keys = !m->keep_keys;
    if (keys && !rem && m->public_key != NULL &&
        set_member_key(client, (int)m->partition, m->id, key, m->wait_ms, &err) != KL_OK)
        return cli_error(c, &err);
    Keyload__V1__MemberChangeAnswer *ans = NULL;
    if (kl_client_member_change(client, (int)m->partition, &q, &ans, &err) != KL_OK)
        return cli_error(c, &err);
    bool waited = ans->done || m->wait_ms > 0;
    kl_code rc = ans->done || m->wait_ms == 0 ? KL_OK : wait_target(client, (int)m->partition, ans, m->wait_ms, &err);
    keyload__v1__member_change_answer__free_unpacked(ans, NULL);
    if (rc != KL_OK)
        return cli_error(c, &err);
    /* Only once the change committed: before, the old member may still lead and need its lease. */
    uint64_t gone = rem ? m->id : rep ? m->old : 0;
    if (keys && gone != 0 && waited &&
        set_member_key(client, (int)m->partition, gone, NULL, m->wait_ms, &err) != KL_OK)
        return cli_error(c, &err);
    Keyload__V1__MembersAnswer *now = NULL;
    if (kl_client_members(client, (int)m->partition, &now, &err) != KL_OK)
        return cli_error(c, &err);
    int out = print_members(c, now);
    keyload__v1__members_answer__free_unpacked(now, NULL);
    return out;
}

int cli_cmd_cluster(cli *c, int argc, char **argv)
{
    c->usage = MEMBERS_USAGE;
    if (argc < 1)
        return cli_usage(c, "cluster takes members or member");
    bool members = !strcmp(argv[0], "members");
    if (!members && strcmp(argv[0], "member"))
        return cli_usage(c, "cluster takes members or member, not '%s'", argv[0]);
    const char *op = NULL;
    member_args m;
    int prc = parse_members(c, argc - 1, argv + 1, &op, &m);
    if (prc >= 0)
        return prc;
    if (members && op != NULL)
        return cli_usage(c, "members takes no argument");
    if (!members && op == NULL)
        return cli_usage(c, "member takes add, remove, replace or key");
    kl_client *client;
    kl_err err;
    kl_err_clear(&err);
    if (cli_open(c, &client, &err) != KL_OK)
        return cli_error(c, &err);
    int rc;
    if (members) {
        Keyload__V1__MembersAnswer *a = NULL;
        rc = kl_client_members(client, (int)m.partition, &a, &err) != KL_OK ? cli_error(c, &err) : print_members(c, a);
        if (a != NULL)
            keyload__v1__members_answer__free_unpacked(a, NULL);
    } else {
        rc = member_change(c, client, op, &m);
    }
    kl_client_close(client);
    return rc;
}
