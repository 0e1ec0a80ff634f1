/* cmd_message: `keyload enqueue` and `keyload receive`. */
#include "client/cli/cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USAGE_ENQUEUE                                                                         \
    "keyload [GLOBAL OPTIONS] enqueue QUEUE[/LANE] [--header k=v]... [--field k=v]...\n"     \
    "         [--delay-ms MS] [--expires-at-ms UNIX_MS] [--command-id GUID]\n"                \
    "         (BODY | --body-file FILE|-)\n"                                                  \
    "  --field types: k=v (string), k:string=v, k:int=5, k:double=1.5, k:bool=true,\n"        \
    "                 k:bytes=BASE64"
#define USAGE_RECEIVE                                                                         \
    "keyload [GLOBAL OPTIONS] receive QUEUE[/LANE] [--max N] [--lease-ms MS] [--wait-ms MS]\n"  \
    "         [--command-id GUID]\n"                                                         \
    "  --wait-ms: when no message is available, wait up to MS (0..30000) for one"

/* Reads a whole file ("-" = stdin) into *out (malloc'd). */
static int read_body_file(cli *c, const char *path, uint8_t **out, size_t *len)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    kl_err err;
    if (f == NULL) {
        kl_fail(&err, KL_INVALID_ARGUMENT, "body_file", "cannot open --body-file %s: %s", path,
                strerror(errno));
        return cli_error(c, &err);
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    while (buf != NULL) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        uint8_t *nb = realloc(buf, cap * 2);
        if (nb == NULL) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    bool failed = buf == NULL || ferror(f);
    if (f != stdin)
        fclose(f);
    if (failed) {
        free(buf);
        kl_fail(&err, KL_INVALID_ARGUMENT, "body_file", "cannot read --body-file %s", path);
        return cli_error(c, &err);
    }
    *out = buf;
    *len = n;
    return CLI_EXIT_OK;
}

typedef struct enqueue_args {
    const char *target, *body, *body_file, *command_id;
    int64_t delay_ms, expires_at_ms;
    const char **headers, **fields; /* argv pointers, in order */
    size_t n_headers, n_fields;
} enqueue_args;

static int parse_enqueue(cli *c, cli_args *a, enqueue_args *e)
{
    const char *pos;
    cli_arg_kind k;
    while ((k = cli_next(c, a, &pos)) != CLI_END) {
        if (k == CLI_FAILED)
            return CLI_EXIT_USAGE;
        if (k == CLI_POSITIONAL) {
            if (e->target == NULL)
                e->target = pos;
            else if (e->body == NULL)
                e->body = pos;
            else
                return cli_usage(c, "enqueue takes QUEUE[/LANE] and one BODY (quote the body)");
            continue;
        }
        if (cli_opt_is(a, "--help") || cli_opt_is(a, "-h"))
            return cli_help(c) == 0 ? -1 : CLI_EXIT_USAGE;
        const char *v = cli_opt_value(c, a);
        if (v == NULL)
            return CLI_EXIT_USAGE;
        if (cli_opt_is(a, "--header")) {
            e->headers[e->n_headers++] = v;
        } else if (cli_opt_is(a, "--field")) {
            e->fields[e->n_fields++] = v;
        } else if (cli_opt_is(a, "--body-file")) {
            e->body_file = v;
        } else if (cli_opt_is(a, "--command-id")) {
            e->command_id = v;
        } else if (cli_opt_is(a, "--delay-ms")) {
            if (!cli_parse_i64(c, "--delay-ms", v, 0, INT64_MAX, &e->delay_ms))
                return CLI_EXIT_USAGE;
        } else if (cli_opt_is(a, "--expires-at-ms")) {
            if (!cli_parse_i64(c, "--expires-at-ms", v, 0, INT64_MAX, &e->expires_at_ms))
                return CLI_EXIT_USAGE;
        } else {
            return cli_unknown_option(c, a);
        }
    }
    if (e->target == NULL)
        return cli_usage(c, "enqueue needs QUEUE[/LANE] and a BODY");
    if (e->body == NULL && e->body_file == NULL)
        return cli_usage(c, "enqueue needs a BODY (or --body-file FILE)");
    if (e->body != NULL && e->body_file != NULL)
        return cli_usage(c, "give either a BODY or --body-file, not both");
    return CLI_EXIT_OK;
}

/* Builds the message from e; prints errors. */
static int build_message(cli *c, const enqueue_args *e, kl_message **out)
{
    uint8_t *body = NULL;
    size_t len = 0;
    if (e->body_file != NULL) {
        int rc = read_body_file(c, e->body_file, &body, &len);
        if (rc != CLI_EXIT_OK)
            return rc;
    }
    kl_err err;
    kl_code code = e->body_file ? kl_message_new(body, len, out, &err)
                                : kl_message_new(e->body, strlen(e->body), out, &err);
    free(body);
    for (size_t i = 0; code == KL_OK && i < e->n_headers; i++)
        code = kl_message_parse_header(*out, e->headers[i], &err);
    for (size_t i = 0; code == KL_OK && i < e->n_fields; i++)
        code = kl_message_parse_field(*out, e->fields[i], &err);
    if (code == KL_OK)
        code = kl_message_set_delay(*out, e->delay_ms, &err);
    if (code == KL_OK)
        code = kl_message_set_expiry(*out, e->expires_at_ms, &err);
    if (code != KL_OK) {
        kl_message_free(*out);
        *out = NULL;
        return cli_error(c, &err);
    }
    return CLI_EXIT_OK;
}

int cli_cmd_enqueue(cli *c, int argc, char **argv)
{
    c->usage = USAGE_ENQUEUE;
    enqueue_args e = {0};
    /* At most one header or field per argument: argc bounds both lists. */
    e.headers = calloc((size_t)argc + 1, sizeof *e.headers);
    e.fields = calloc((size_t)argc + 1, sizeof *e.fields);
    int rc = CLI_EXIT_ERROR;
    kl_message *msg = NULL;
    kl_batch *b = NULL;
    char *queue = NULL;
    const char *lane;
    kl_receipt *r = NULL;
    kl_err err;
    if (e.headers == NULL || e.fields == NULL) {
        kl_fail(&err, KL_INTERNAL, "oom", "out of memory");
        rc = cli_error(c, &err);
        goto out;
    }
    cli_args a;
    cli_args_init(&a, argc, argv);
    if ((rc = parse_enqueue(c, &a, &e)) != CLI_EXIT_OK) {
        if (rc < 0) /* --help */
            rc = CLI_EXIT_OK;
        goto out;
    }
    rc = CLI_EXIT_USAGE;
    if (!cli_split_lane(c, e.target, &queue, &lane))
        goto out;
    if ((rc = build_message(c, &e, &msg)) != CLI_EXIT_OK ||
        (rc = cli_new_batch(c, e.command_id, &b)) != CLI_EXIT_OK)
        goto out;
    if (kl_batch_enqueue(b, queue, lane, msg, &err) != KL_OK) {
        rc = cli_error(c, &err);
        goto out;
    }
    const Keyload__V1__MutationResult *res;
    rc = cli_send_result(c, b, KEYLOAD__V1__MUTATION_RESULT__KIND_ENQUEUED, &r, &res);
    if (rc == CLI_EXIT_OK && res != NULL) {
        char tag[96];
        const char *rl = res->enqueued->lane && res->enqueued->lane[0] ? res->enqueued->lane
                         : lane[0]                                     ? lane
                                                                       : "default";
        printf("enqueued message %" PRIu64 " to %s/%s %s\n", res->enqueued->message_id, queue, rl,
               cli_receipt_tag(r, tag, sizeof tag));
    }
out:
    kl_receipt_free(r);
    kl_batch_free(b);
    kl_message_free(msg);
    free(queue);
    free(e.headers);
    free(e.fields);
    return rc;
}

static void print_field(const Keyload__V1__Field *f)
{
    const Keyload__V1__FieldValue *v = f->value;
    char *s;
    switch (v ? v->kind_case : KEYLOAD__V1__FIELD_VALUE__KIND__NOT_SET) {
    case KEYLOAD__V1__FIELD_VALUE__KIND_STRING_VALUE:
        s = cli_human_bytes((const uint8_t *)v->string_value, strlen(v->string_value));
        printf(" field %s:string=%s", f->key, s ? s : "?");
        free(s);
        break;
    case KEYLOAD__V1__FIELD_VALUE__KIND_INT_VALUE:
        printf(" field %s:int=%" PRId64, f->key, v->int_value);
        break;
    case KEYLOAD__V1__FIELD_VALUE__KIND_DOUBLE_VALUE:
        printf(" field %s:double=%.17g", f->key, v->double_value);
        break;
    case KEYLOAD__V1__FIELD_VALUE__KIND_BOOL_VALUE:
        printf(" field %s:bool=%s", f->key, v->bool_value ? "true" : "false");
        break;
    case KEYLOAD__V1__FIELD_VALUE__KIND_BYTES_VALUE:
        s = kl_base64_encode(v->bytes_value.data, v->bytes_value.len);
        printf(" field %s:bytes=%s", f->key, s ? s : "?");
        free(s);
        break;
    default:
        printf(" field %s:unset", f->key);
        break;
    }
}

/* One line per received message: id, lane, delivery count, lease token, headers, fields,
 * body. */
static void print_received(const char *queue, const Keyload__V1__ReceivedMessage *rm)
{
    char *lease = kl_base64_encode(rm->lease_token.data, rm->lease_token.len);
    printf("message %" PRIu64 " %s/%s delivery %" PRIu32 " lease %s", rm->message_id, queue,
           rm->lane && rm->lane[0] ? rm->lane : "default", rm->delivery_count,
           lease ? lease : "?");
    free(lease);
    const Keyload__V1__EnqueueMessage *m = rm->message;
    if (m != NULL) {
        for (size_t i = 0; i < m->n_headers; i++) {
            const char *v = m->headers[i]->value;
            char *s = cli_human_bytes((const uint8_t *)v, strlen(v));
            printf(" header %s=%s", m->headers[i]->key, s ? s : "?");
            free(s);
        }
        for (size_t i = 0; i < m->n_fields; i++)
            print_field(m->fields[i]);
    }
    char *body = m ? cli_human_bytes(m->body.data, m->body.len) : NULL;
    printf(" body %s\n", body ? body : "\"\"");
    free(body);
}

int cli_cmd_receive(cli *c, int argc, char **argv)
{
    c->usage = USAGE_RECEIVE;
    const char *target = NULL, *command_id = NULL, *pos;
    uint64_t max = 1, lease_ms = 0, wait_ms = 0;
    cli_args a;
    cli_args_init(&a, argc, argv);
    cli_arg_kind k;
    while ((k = cli_next(c, &a, &pos)) != CLI_END) {
        if (k == CLI_FAILED)
            return CLI_EXIT_USAGE;
        if (k == CLI_POSITIONAL) {
            if (target != NULL)
                return cli_usage(c, "receive takes one QUEUE[/LANE]");
            target = pos;
            continue;
        }
        if (cli_opt_is(&a, "--help") || cli_opt_is(&a, "-h"))
            return cli_help(c);
        const char *v = cli_opt_value(c, &a);
        if (v == NULL)
            return CLI_EXIT_USAGE;
        if (cli_opt_is(&a, "--max")) {
            int64_t n;
            if (!cli_parse_i64(c, "--max", v, 1, UINT32_MAX, &n))
                return CLI_EXIT_USAGE;
            max = (uint64_t)n;
        } else if (cli_opt_is(&a, "--lease-ms")) {
            if (!cli_parse_u64(c, "--lease-ms", v, UINT32_MAX, &lease_ms))
                return CLI_EXIT_USAGE;
        } else if (cli_opt_is(&a, "--wait-ms")) {
            if (!cli_parse_u64(c, "--wait-ms", v, KL_RECEIVE_WAIT_MS_MAX, &wait_ms))
                return CLI_EXIT_USAGE;
        } else if (cli_opt_is(&a, "--command-id")) {
            command_id = v;
        } else {
            return cli_unknown_option(c, &a);
        }
    }
    if (target == NULL)
        return cli_usage(c, "receive needs QUEUE[/LANE]");
    char *queue;
    const char *lane;
    if (!cli_split_lane(c, target, &queue, &lane))
        return CLI_EXIT_USAGE;
    kl_batch *b;
    int rc = cli_new_batch(c, command_id, &b);
    if (rc != CLI_EXIT_OK) {
        free(queue);
        return rc;
    }
    kl_err err;
    kl_receipt *r = NULL;
    const Keyload__V1__MutationResult *res = NULL;
    if (kl_batch_receive_wait(b, queue, lane, (uint32_t)max, (uint32_t)lease_ms, (uint32_t)wait_ms, &err) != KL_OK)
        rc = cli_error(c, &err);
    else
        rc = cli_send_result(c, b, KEYLOAD__V1__MUTATION_RESULT__KIND_RECEIVED, &r, &res);
    kl_batch_free(b);
    if (rc == CLI_EXIT_OK && res != NULL) {
        char tag[96];
        size_t n = res->received->n_messages;
        printf("received %zu message%s from %s/%s %s\n", n, n == 1 ? "" : "s", queue,
               lane[0] ? lane : "default", cli_receipt_tag(r, tag, sizeof tag));
        for (size_t i = 0; i < n; i++)
            print_received(queue, res->received->messages[i]);
    }
    kl_receipt_free(r);
    free(queue);
    return rc;
}
