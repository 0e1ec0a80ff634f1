/* cmd_transfer: `keyload transfer create | accept | complete | inspect | receipt | pending |
 * pause | resume | advance | repair | failure` (ARCHITECTURE.md "Engine", "Processes"). The mutations are
 * batches under a command id (given or fresh) and print their receipt; inspect, receipt,
 * pending and failure are fresh reads.
 *
 * Tokens: read only from @FILE or stdin (tokenfile.c); printed only where the command's
 * purpose is to hand one out (create, advance, repair: the intent token of the new
 * generation; receipt: the receipt token; inspect: the intent and current tokens and the
 * receipt's; failure: the witness or the receipt token), as one base64 line with a label,
 * or written raw to --token-out / --witness-out / --receipt-out. pending lists transfers
 * without their tokens (inspect one to get its token). */
#include "client/cli/cli.h"
#include "common/guid.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKEN_NOTE                                                                              \
    "  A token file holds the raw token bytes (as --token-out writes them) or its base64 text\n" \
    "  on one line (as printed): content that is, after trimming whitespace, only base64\n"     \
    "  characters is decoded as base64, anything else is taken as raw bytes. Tokens are\n"      \
    "  never given on the command line."
#define USAGE_CREATE                                                                            \
    "keyload [GLOBAL OPTIONS] transfer create --source QUEUE[/LANE] --id GUID\n"                \
    "         --dest QUEUE[/LANE] [--header k=v]... [--field k=v]... [--token-out FILE]\n"      \
    "         [--command-id GUID] BODY\n"                                                       \
    "  commits an intent (OutputPending) on the source queue's partition and prints its\n"      \
    "  intent token (base64), or writes the raw token to --token-out FILE (mode 0600,\n"        \
    "  never overwritten). The destination must live on another partition."
#define USAGE_ACCEPT                                                                            \
    "keyload [GLOBAL OPTIONS] transfer accept --dest QUEUE[/LANE] --intent @FILE|-\n"           \
    "         [--command-id GUID]\n"                                                            \
    "  enqueues the intent's message once on the destination (retries enqueue nothing)\n"       \
    TOKEN_NOTE
#define USAGE_COMPLETE                                                                          \
    "keyload [GLOBAL OPTIONS] transfer complete --source QUEUE[/LANE] --id GUID\n"              \
    "         --receipt @FILE|- [--command-id GUID]\n"                                          \
    "  moves the intent to Delivered with the destination's receipt token\n" TOKEN_NOTE
#define USAGE_INSPECT                                                                           \
    "keyload [GLOBAL OPTIONS] transfer inspect --source QUEUE[/LANE] --id GUID\n"               \
    "  the intent's state, history and tokens (intent; receipt once Delivered)"
#define USAGE_RECEIPT                                                                           \
    "keyload [GLOBAL OPTIONS] transfer receipt --dest QUEUE[/LANE] --source QUEUE[/LANE]\n"     \
    "         --id GUID [--token-out FILE]\n"                                                   \
    "  the destination's receipt token (base64, or raw to --token-out FILE) and the commit\n"   \
    "  that enqueued the message; NOT_FOUND while the transfer is not accepted"
#define USAGE_PENDING                                                                           \
    "keyload [GLOBAL OPTIONS] transfer pending (--source QUEUE[/LANE] | --partition P)\n"       \
    "         [--cursor B64] [--max N]\n"                                                       \
    "  one page of OutputPending transfers (no tokens: inspect one for its token); pass the\n"  \
    "  printed next cursor to --cursor for the next page"
#define USAGE_PAUSE                                                                             \
    "keyload [GLOBAL OPTIONS] transfer pause|resume [--source QUEUE[/LANE]] [--command-id GUID]\n" \
    "  stops (or restarts) admission of new transfers from the lane, or without --source\n"     \
    "  from the whole --database; pending transfers go on"
#define USAGE_ADVANCE                                                                           \
    "keyload [GLOBAL OPTIONS] transfer advance --source QUEUE[/LANE] --id GUID\n"               \
    "         --witness @FILE|- [--token-out FILE] [--command-id GUID]\n"                       \
    "  after an Accept refused RESOURCE_EXHAUSTED and a fix (quota, space), moves the intent\n" \
    "  to its next generation with the failure witness from `transfer failure`, and prints\n"  \
    "  the new generation's intent token (or writes it raw to --token-out FILE): the next\n"   \
    "  Accept carries it under a new command id. Bounded by the database's\n"                  \
    "  MaxQueueTransferAcceptAttempts (null: no attempt advance)\n" TOKEN_NOTE
#define USAGE_REPAIR                                                                            \
    "keyload [GLOBAL OPTIONS] transfer repair --source QUEUE[/LANE] --id GUID\n"                \
    "         --witness @FILE|- [--token-out FILE] [--command-id GUID]\n"                       \
    "  the same after an Accept refused PERMISSION_DENIED, once the grants were fixed (not\n"  \
    "  bounded by the attempt ceiling)\n" TOKEN_NOTE
#define USAGE_FAILURE                                                                           \
    "keyload [GLOBAL OPTIONS] transfer failure --dest QUEUE[/LANE] --intent @FILE|-\n"         \
    "         --failed-command-id GUID [--witness-out FILE] [--receipt-out FILE]\n"             \
    "  a fresh read on the destination of what became of the Accept that carried this intent\n" \
    "  token under --failed-command-id: ReceiptExists (complete with its receipt token),\n"    \
    "  WitnessIssued (pass the witness token to `transfer advance` or `transfer repair`) or\n" \
    "  Unchanged (what still refuses). Tokens are printed in base64, or written raw to\n"      \
    "  --witness-out / --receipt-out FILE (mode 0600, never overwritten); nothing changes\n"   \
    TOKEN_NOTE
#define USAGE_COMPLETE_FAILURE                                                                  \
    "keyload [GLOBAL OPTIONS] transfer complete-failure --source QUEUE[/LANE] --id GUID\n"      \
    "         --receipt @FILE|- --failed-command-id GUID [--witness-out FILE]\n"               \
    "  the same read on the source for a Complete refused PERMISSION_DENIED: once the grants\n" \
    "  changed and the same Complete would pass, a witness for `transfer repair`; after the\n"  \
    "  repair, `transfer complete` with the same receipt and a new command id\n" TOKEN_NOTE
#define USAGE_TRANSFER                                                                          \
    USAGE_CREATE "\n       " USAGE_ACCEPT "\n       " USAGE_COMPLETE "\n       " USAGE_INSPECT  \
                 "\n       " USAGE_RECEIPT "\n       " USAGE_PENDING "\n       " USAGE_PAUSE    \
                 "\n       " USAGE_FAILURE "\n       " USAGE_COMPLETE_FAILURE "\n       "        \
                 USAGE_ADVANCE "\n       " USAGE_REPAIR

/* What each subcommand takes. */
enum {
    OPT_SOURCE = 1,
    OPT_DEST = 2,
    OPT_ID = 4,
    OPT_INTENT = 8,
    OPT_RECEIPT = 16,
    OPT_TOKEN_OUT = 32,
    OPT_MESSAGE = 64,   /* --header, --field and BODY */
    OPT_COMMAND = 128,
    OPT_PAGE = 256,     /* --partition, --cursor, --max */
    OPT_WITNESS = 512,
    OPT_FAILED_CMD = 1024,
    OPT_FAILURE_OUT = 2048, /* --witness-out, --receipt-out */
};

static const struct sub_spec {
    const char *name;
    cli_transfer_sub sub;
    int opts;
    int required;
    const char *usage;
} subs[] = {
    {"create", CLI_TRANSFER_CREATE,
     OPT_SOURCE | OPT_DEST | OPT_ID | OPT_MESSAGE | OPT_TOKEN_OUT | OPT_COMMAND,
     OPT_SOURCE | OPT_DEST | OPT_ID | OPT_MESSAGE, USAGE_CREATE},
    {"accept", CLI_TRANSFER_ACCEPT, OPT_DEST | OPT_INTENT | OPT_COMMAND, OPT_DEST | OPT_INTENT,
     USAGE_ACCEPT},
    {"complete", CLI_TRANSFER_COMPLETE, OPT_SOURCE | OPT_ID | OPT_RECEIPT | OPT_COMMAND,
     OPT_SOURCE | OPT_ID | OPT_RECEIPT, USAGE_COMPLETE},
    {"inspect", CLI_TRANSFER_INSPECT, OPT_SOURCE | OPT_ID, OPT_SOURCE | OPT_ID, USAGE_INSPECT},
    {"receipt", CLI_TRANSFER_RECEIPT, OPT_SOURCE | OPT_DEST | OPT_ID | OPT_TOKEN_OUT,
     OPT_SOURCE | OPT_DEST | OPT_ID, USAGE_RECEIPT},
    {"pending", CLI_TRANSFER_PENDING, OPT_SOURCE | OPT_PAGE, 0, USAGE_PENDING},
    {"pause", CLI_TRANSFER_PAUSE, OPT_SOURCE | OPT_COMMAND, 0, USAGE_PAUSE},
    {"resume", CLI_TRANSFER_RESUME, OPT_SOURCE | OPT_COMMAND, 0, USAGE_PAUSE},
    {"advance", CLI_TRANSFER_ADVANCE, OPT_SOURCE | OPT_ID | OPT_WITNESS | OPT_TOKEN_OUT | OPT_COMMAND,
     OPT_SOURCE | OPT_ID | OPT_WITNESS, USAGE_ADVANCE},
    {"repair", CLI_TRANSFER_REPAIR, OPT_SOURCE | OPT_ID | OPT_WITNESS | OPT_TOKEN_OUT | OPT_COMMAND,
     OPT_SOURCE | OPT_ID | OPT_WITNESS, USAGE_REPAIR},
    {"failure", CLI_TRANSFER_FAILURE, OPT_DEST | OPT_INTENT | OPT_FAILED_CMD | OPT_FAILURE_OUT,
     OPT_DEST | OPT_INTENT | OPT_FAILED_CMD, USAGE_FAILURE},
    {"complete-failure", CLI_TRANSFER_COMPLETE_FAILURE,
     OPT_SOURCE | OPT_ID | OPT_RECEIPT | OPT_FAILED_CMD | OPT_FAILURE_OUT,
     OPT_SOURCE | OPT_ID | OPT_RECEIPT | OPT_FAILED_CMD, USAGE_COMPLETE_FAILURE},
};
#define SUB_COUNT (sizeof subs / sizeof subs[0])

static const struct opt_name {
    const char *name;
    int cls;
} opt_names[] = {
    {"--source", OPT_SOURCE},       {"--dest", OPT_DEST},         {"--id", OPT_ID},
    {"--intent", OPT_INTENT},       {"--receipt", OPT_RECEIPT},   {"--token-out", OPT_TOKEN_OUT},
    {"--header", OPT_MESSAGE},      {"--field", OPT_MESSAGE},     {"--command-id", OPT_COMMAND},
    {"--partition", OPT_PAGE},      {"--cursor", OPT_PAGE},       {"--max", OPT_PAGE},
    {"--witness", OPT_WITNESS},     {"--failed-command-id", OPT_FAILED_CMD},
    {"--witness-out", OPT_FAILURE_OUT}, {"--receipt-out", OPT_FAILURE_OUT},
};

void cli_transfer_args_clear(cli_transfer_args *o)
{
    free(o->source_queue);
    free(o->dest_queue);
    free(o->headers);
    free(o->fields);
    o->source_queue = o->dest_queue = NULL;
    o->headers = o->fields = NULL;
}

/* Sets a once-only option; a second one is a usage error. */
static int once(cli *c, const char *name, const char **slot, const char *v)
{
    if (*slot != NULL)
        return cli_usage(c, "%s is given twice", name);
    *slot = v;
    return CLI_EXIT_OK;
}

static int lane_option(cli *c, const char *name, const char *v, char **queue, const char **lane)
{
    if (*queue != NULL)
        return cli_usage(c, "%s is given twice", name);
    return cli_split_lane(c, v, queue, lane) ? CLI_EXIT_OK : CLI_EXIT_USAGE;
}

/* Applies option `name` (of a class the subcommand takes) with value v. */
static int apply_option(cli *c, const char *name, const char *v, cli_transfer_args *o)
{
    kl_err err;
    uint8_t id[16];
    if (strcmp(name, "--source") == 0)
        return lane_option(c, name, v, &o->source_queue, &o->source_lane);
    if (strcmp(name, "--dest") == 0)
        return lane_option(c, name, v, &o->dest_queue, &o->dest_lane);
    if (strcmp(name, "--id") == 0) {
        if (kl_transfer_id_parse(v, id, &err) != KL_OK)
            return cli_usage(c, "--id: %s", err.message);
        return once(c, name, &o->id, v);
    }
    if (strcmp(name, "--intent") == 0 || strcmp(name, "--receipt") == 0 ||
        strcmp(name, "--witness") == 0) {
        if (strcmp(v, "-") != 0 && (v[0] != '@' || v[1] == '\0'))
            return cli_usage(c, "%s takes @FILE or - (stdin): tokens are never given on the "
                                "command line", name);
        return once(c, name, &o->token, v);
    }
    if (strcmp(name, "--token-out") == 0)
        return once(c, name, &o->token_out, v);
    if (strcmp(name, "--witness-out") == 0)
        return once(c, name, &o->witness_out, v);
    if (strcmp(name, "--receipt-out") == 0)
        return once(c, name, &o->receipt_out, v);
    if (strcmp(name, "--failed-command-id") == 0) {
        /* The same GUID rules as --command-id (the Accept's own command id). */
        if (v[0] == '\0' || !kl_guid_parse(v, id))
            return cli_usage(c, "--failed-command-id must be a GUID in canonical form "
                                "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx");
        if (!kl_guid_valid(id, sizeof id))
            return cli_usage(c, "--failed-command-id must not be all zero");
        return once(c, name, &o->failed_command_id, v);
    }
    if (strcmp(name, "--header") == 0) {
        o->headers[o->n_headers++] = v;
        return CLI_EXIT_OK;
    }
    if (strcmp(name, "--field") == 0) {
        o->fields[o->n_fields++] = v;
        return CLI_EXIT_OK;
    }
    if (strcmp(name, "--command-id") == 0)
        return once(c, name, &o->command_id, v);
    if (strcmp(name, "--cursor") == 0)
        return once(c, name, &o->cursor, v);
    if (strcmp(name, "--partition") == 0) {
        int64_t p;
        if (o->partition >= 0)
            return cli_usage(c, "--partition is given twice");
        if (!cli_parse_i64(c, name, v, 0, INT_MAX, &p))
            return CLI_EXIT_USAGE;
        o->partition = (int)p;
        return CLI_EXIT_OK;
    }
    /* --max */
    uint64_t n;
    if (!cli_parse_u64(c, name, v, 1000, &n))
        return CLI_EXIT_USAGE;
    o->max_items = (uint32_t)n;
    return CLI_EXIT_OK;
}

static const char *missing_text(int cls)
{
    switch (cls) {
    case OPT_SOURCE: return "--source QUEUE[/LANE]";
    case OPT_DEST: return "--dest QUEUE[/LANE]";
    case OPT_ID: return "--id GUID";
    case OPT_INTENT: return "--intent @FILE|-";
    case OPT_RECEIPT: return "--receipt @FILE|-";
    case OPT_WITNESS: return "--witness @FILE|-";
    case OPT_FAILED_CMD: return "--failed-command-id GUID";
    default: return "a BODY";
    }
}

/* The checks after parsing: required options, and what pending and failure need. */
static int check_complete(cli *c, const struct sub_spec *spec, const cli_transfer_args *o)
{
    /* A subcommand takes at most one token option, so o->token is that one. */
    const int token_cls = spec->opts & (OPT_INTENT | OPT_RECEIPT | OPT_WITNESS);
    const int present = (o->source_queue ? OPT_SOURCE : 0) | (o->dest_queue ? OPT_DEST : 0) |
                        (o->id ? OPT_ID : 0) | (o->token ? token_cls : 0) |
                        (o->failed_command_id ? OPT_FAILED_CMD : 0) |
                        (o->body ? OPT_MESSAGE : 0);
    static const int order[] = {OPT_SOURCE,  OPT_DEST,    OPT_ID,         OPT_INTENT,
                                OPT_RECEIPT, OPT_WITNESS, OPT_FAILED_CMD, OPT_MESSAGE};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if ((spec->required & order[i]) && !(present & order[i]))
            return cli_usage(c, "transfer %s needs %s", spec->name, missing_text(order[i]));
    if (spec->sub == CLI_TRANSFER_PENDING && o->source_queue == NULL && o->partition < 0)
        return cli_usage(c, "transfer pending needs --source QUEUE[/LANE] or --partition P");
    if (o->witness_out != NULL && o->receipt_out != NULL &&
        strcmp(o->witness_out, o->receipt_out) == 0)
        return cli_usage(c, "--witness-out and --receipt-out must name different files");
    return CLI_EXIT_OK;
}

static int parse_args(cli *c, const struct sub_spec *spec, int argc, char **argv,
                      cli_transfer_args *o)
{
    cli_args a;
    cli_args_init(&a, argc, argv);
    const char *pos;
    cli_arg_kind k;
    while ((k = cli_next(c, &a, &pos)) != CLI_END) {
        if (k == CLI_FAILED)
            return CLI_EXIT_USAGE;
        if (k == CLI_POSITIONAL) {
            if (!(spec->opts & OPT_MESSAGE))
                return cli_usage(c, "transfer %s takes no argument '%s' (options only)",
                                 spec->name, pos);
            if (o->body != NULL)
                return cli_usage(c, "transfer create takes one BODY (quote the body)");
            o->body = pos;
            continue;
        }
        if (cli_opt_is(&a, "--help") || cli_opt_is(&a, "-h")) {
            o->help = true;
            return cli_help(c);
        }
        const struct opt_name *on = NULL;
        for (size_t i = 0; i < sizeof opt_names / sizeof opt_names[0]; i++)
            if (cli_opt_is(&a, opt_names[i].name))
                on = &opt_names[i];
        if (on == NULL)
            return cli_unknown_option(c, &a);
        if (!(spec->opts & on->cls))
            return on->cls == OPT_COMMAND
                       ? cli_usage(c, "--command-id applies only to commands that change something")
                       : cli_usage(c, "transfer %s takes no %s", spec->name, on->name);
        const char *v = cli_opt_value(c, &a);
        int rc = v == NULL ? CLI_EXIT_USAGE : apply_option(c, on->name, v, o);
        if (rc != CLI_EXIT_OK)
            return rc;
    }
    return check_complete(c, spec, o);
}

int cli_transfer_parse(cli *c, int argc, char **argv, cli_transfer_args *o)
{
    memset(o, 0, sizeof *o);
    o->partition = -1;
    c->usage = USAGE_TRANSFER;
    if (argc < 1)
        return cli_usage(c, "transfer needs a subcommand: create, accept, complete, inspect, "
                            "receipt, pending, pause, resume, failure, complete-failure, advance or "
                            "repair");
    const struct sub_spec *spec = NULL;
    for (size_t i = 0; i < SUB_COUNT; i++)
        if (strcmp(argv[0], subs[i].name) == 0)
            spec = &subs[i];
    if (spec == NULL) {
        if (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0) {
            o->help = true;
            return cli_help(c);
        }
        return cli_usage(c, "unknown transfer subcommand '%s' (create, accept, complete, "
                            "inspect, receipt, pending, pause, resume, failure, complete-failure, "
                            "advance, repair)", argv[0]);
    }
    o->sub = spec->sub;
    c->usage = spec->usage;
    /* At most one header or field per argument: argc bounds both lists. */
    o->headers = calloc((size_t)argc + 1, sizeof *o->headers);
    o->fields = calloc((size_t)argc + 1, sizeof *o->fields);
    int rc = o->headers && o->fields ? parse_args(c, spec, argc - 1, argv + 1, o)
                                     : cli_usage(c, "out of memory");
    if (rc != CLI_EXIT_OK)
        cli_transfer_args_clear(o);
    return rc;
}

/* ---------------------------------------------------------------- output */

static const char *lane_text(const char *lane) { return lane && lane[0] ? lane : "default"; }

/* Prints one labelled base64 line. */
static void print_token(const char *label, const ProtobufCBinaryData *t)
{
    char *s = kl_base64_encode(t->data, t->len);
    printf("%s (base64): %s\n", label, s ? s : "?");
    free(s);
}

static void print_ref(const Keyload__V1__QueueLaneRef *r)
{
    if (r == NULL)
        printf("?");
    else
        printf("%s/%s", r->queue, lane_text(r->lane));
}

static void print_inspect(const cli_transfer_args *o, const Keyload__V1__InspectQueueTransferAnswer *a)
{
    printf("transfer %s from ", o->id);
    print_ref(a->source);
    printf(" to ");
    print_ref(a->destination);
    printf(": %s, generation %" PRIu64 "\n", kl_transfer_state_name(a->state), a->generation);
    char fp[2 * 32 + 1] = "";
    for (size_t i = 0; i < a->fingerprint.len && i < 32; i++)
        snprintf(fp + 2 * i, 3, "%02x", a->fingerprint.data[i]);
    printf("  created by principal %s; message fingerprint %s; max accept attempts ",
           a->principal_id, fp[0] ? fp : "none");
    if (a->max_accept_attempts != NULL)
        printf("%" PRIu64 "\n", a->max_accept_attempts->value);
    else
        printf("null (no attempt advance)\n");
    printf("  attempt advances %" PRIu64 "; retains %" PRIu64 " records, %" PRIu64
           " bytes of its lane, of which reserved for advances %" PRIu64 " records, %" PRIu64
           " bytes\n",
           a->attempt_advances, a->retained_records, a->retained_bytes, a->reserved_records,
           a->reserved_bytes);
    printf("  history:%s\n", a->n_history ? "" : " none");
    for (size_t i = 0; i < a->n_history; i++) {
        const Keyload__V1__TransferHistoryEntry *h = a->history[i];
        printf("    %s generation %" PRIu64 " at %" PRId64 " (unix ms), term %" PRIu64
               ", index %" PRIu64,
               kl_transfer_event_name(h->event), h->generation, h->unix_ms, h->term, h->index);
        if (h->event == KEYLOAD__V1__TRANSFER_EVENT__ATTEMPT_ADVANCED ||
            h->event == KEYLOAD__V1__TRANSFER_EVENT__POLICY_REPAIRED) {
            char id[KL_COMMAND_ID_TEXT_LEN + 1] = "?";
            if (h->failed_command_id.len == 16)
                kl_guid_format(h->failed_command_id.data, id);
            printf("; after accept %s refused %s", id, kl_code_name(h->failure_code));
        }
        printf("\n");
    }
    print_token("intent token", &a->intent_token);
    if (a->current_token.len > 0)
        print_token("current token (the next accept's input)", &a->current_token);
    if (a->receipt_token.len > 0)
        print_token("receipt token", &a->receipt_token);
    printf("read at applied index %" PRIu64 "\n", a->applied_index);
}

static void print_pending(const Keyload__V1__ListPendingQueueTransfersAnswer *a)
{
    printf("%zu pending transfer%s%s\n", a->n_items, a->n_items == 1 ? "" : "s",
           a->cursor_reset ? " (the cursor named an earlier incarnation: listed from the start)"
                           : "");
    for (size_t i = 0; i < a->n_items; i++) {
        const Keyload__V1__PendingQueueTransfer *p = a->items[i];
        char id[KL_COMMAND_ID_TEXT_LEN + 1] = "?";
        if (p->transfer_id.len == 16)
            kl_guid_format(p->transfer_id.data, id);
        printf("  %s generation %" PRIu64 ": ", id, p->generation);
        print_ref(p->source);
        printf(" -> ");
        print_ref(p->destination);
        printf("\n");
    }
    if (a->done || a->next_cursor.len == 0) {
        printf("done\n");
    } else {
        char *cur = kl_base64_encode(a->next_cursor.data, a->next_cursor.len);
        printf("next cursor: %s\n", cur ? cur : "?");
        free(cur);
    }
    printf("charged %" PRIu64 " records, %" PRIu64 " bytes; applied index %" PRIu64 "\n",
           a->records_charged, a->bytes_charged, a->applied_index);
}

/* ---------------------------------------------------------------- running */

/* Writes the token to path (option `what`) when asked; on failure says how to get it
 * again. */
static int write_token_out(cli *c, const char *what, const char *path,
                           const ProtobufCBinaryData *t, const char *again)
{
    if (path == NULL)
        return CLI_EXIT_OK;
    kl_err err;
    if (cli_token_write(what, path, t->data, t->len, &err) != KL_OK) {
        size_t used = strlen(err.message); /* appended; a long tail is cut, never overrun */
        if (used + 3 < sizeof err.message)
            snprintf(err.message + used, sizeof err.message - used, "; %s", again);
        return cli_error(c, &err);
    }
    return CLI_EXIT_OK;
}

/* Builds the create message from BODY, --header and --field. */
static kl_code build_message(const cli_transfer_args *o, kl_message **out, kl_err *err)
{
    kl_code rc = kl_message_new(o->body, strlen(o->body), out, err);
    for (size_t i = 0; rc == KL_OK && i < o->n_headers; i++)
        rc = kl_message_parse_header(*out, o->headers[i], err);
    for (size_t i = 0; rc == KL_OK && i < o->n_fields; i++)
        rc = kl_message_parse_field(*out, o->fields[i], err);
    if (rc != KL_OK) {
        kl_message_free(*out);
        *out = NULL;
    }
    return rc;
}

/* Adds the subcommand's one mutation to b (reading a token where it takes one). */
static kl_code add_mutation(const cli_transfer_args *o, kl_batch *b, kl_err *err)
{
    kl_code rc;
    uint8_t *tok = NULL;
    size_t len = 0;
    kl_message *m = NULL;
    switch (o->sub) {
    case CLI_TRANSFER_CREATE:
        if ((rc = build_message(o, &m, err)) == KL_OK)
            rc = kl_batch_create_transfer(b, o->source_queue, o->source_lane, o->id, o->dest_queue,
                                          o->dest_lane, m, err);
        kl_message_free(m);
        return rc;
    case CLI_TRANSFER_ACCEPT:
        if ((rc = cli_token_read("--intent", o->token, &tok, &len, err)) == KL_OK)
            rc = kl_batch_accept_transfer(b, o->dest_queue, o->dest_lane, tok, len, err);
        break;
    case CLI_TRANSFER_COMPLETE:
        if ((rc = cli_token_read("--receipt", o->token, &tok, &len, err)) == KL_OK)
            rc = kl_batch_complete_transfer(b, o->source_queue, o->source_lane, o->id, tok, len,
                                            err);
        break;
    case CLI_TRANSFER_ADVANCE:
        if ((rc = cli_token_read("--witness", o->token, &tok, &len, err)) == KL_OK)
            rc = kl_batch_advance_transfer_attempt(b, o->source_queue, o->source_lane, o->id,
                                                   tok, len, err);
        break;
    case CLI_TRANSFER_REPAIR:
        if ((rc = cli_token_read("--witness", o->token, &tok, &len, err)) == KL_OK)
            rc = kl_batch_advance_transfer_repair(b, o->source_queue, o->source_lane, o->id,
                                                  tok, len, err);
        break;
    default: /* pause, resume */
        rc = kl_batch_pause_transfers(b, o->source_queue, o->source_lane,
                                      o->sub == CLI_TRANSFER_PAUSE, err);
        break;
    }
    free(tok);
    return rc;
}

static const int result_kind[] = {
    [CLI_TRANSFER_CREATE] = KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_CREATED,
    [CLI_TRANSFER_ACCEPT] = KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ACCEPTED,
    [CLI_TRANSFER_COMPLETE] = KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_COMPLETED,
    [CLI_TRANSFER_PAUSE] = KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFERS_PAUSED,
    [CLI_TRANSFER_RESUME] = KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFERS_PAUSED,
    [CLI_TRANSFER_ADVANCE] = KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ADVANCED,
    [CLI_TRANSFER_REPAIR] = KEYLOAD__V1__MUTATION_RESULT__KIND_TRANSFER_ADVANCED,
};

/* The human line(s) of a committed mutation. */
static void print_change(const cli_transfer_args *o, const char *database,
                         const Keyload__V1__MutationResult *res, const kl_receipt *r)
{
    char tag[96];
    cli_receipt_tag(r, tag, sizeof tag);
    switch (o->sub) {
    case CLI_TRANSFER_CREATE: {
        const Keyload__V1__TransferCreated *t = res->transfer_created;
        printf("%s transfer %s from %s/%s to %s/%s: %s, generation %" PRIu64 " %s\n",
               t->existing ? "existing" : "created", o->id, o->source_queue,
               lane_text(o->source_lane), o->dest_queue, lane_text(o->dest_lane),
               kl_transfer_state_name(t->state), t->generation, tag);
        if (o->token_out != NULL)
            printf("intent token (%zu bytes) written to %s\n", t->intent_token.len, o->token_out);
        else
            print_token("intent token", &t->intent_token);
        break;
    }
    case CLI_TRANSFER_ACCEPT: {
        const Keyload__V1__TransferAccepted *t = res->transfer_accepted;
        printf("accepted transfer into %s/%s: message %" PRIu64 " committed on partition %" PRId32
               " (term %" PRIu64 ", index %" PRIu64 ")%s %s\n",
               o->dest_queue, lane_text(t->lane && t->lane[0] ? t->lane : o->dest_lane),
               t->message_id, t->partition, t->term, t->index,
               t->deduplicated ? "; deduplicated: an earlier accept enqueued it" : "", tag);
        break;
    }
    case CLI_TRANSFER_ADVANCE:
    case CLI_TRANSFER_REPAIR: {
        const Keyload__V1__TransferAdvanced *t = res->transfer_advanced;
        printf("%s transfer %s on %s/%s to generation %" PRIu64 "%s; charged %" PRIu64
               " bytes %s\n",
               o->sub == CLI_TRANSFER_ADVANCE ? "advanced (capacity retry)"
                                              : "advanced (policy repair)",
               o->id, o->source_queue, lane_text(o->source_lane), t->generation,
               t->already ? " (already, with this witness)" : "", t->charged_bytes, tag);
        if (o->token_out != NULL)
            printf("intent token of generation %" PRIu64 " (%zu bytes) written to %s\n",
                   t->generation, t->intent_token.len, o->token_out);
        else
            print_token("intent token", &t->intent_token);
        printf("the next accept carries this token under a new --command-id\n");
        break;
    }
    case CLI_TRANSFER_COMPLETE:
        printf("completed transfer %s on %s/%s: %s%s %s\n", o->id, o->source_queue,
               lane_text(o->source_lane), kl_transfer_state_name(res->transfer_completed->state),
               res->transfer_completed->already ? " (already, with this receipt)" : "", tag);
        break;
    default: {
        const Keyload__V1__TransfersPaused *t = res->transfers_paused;
        printf("%s admission of new transfers from ", t->paused ? "paused" : "resumed");
        if (o->source_queue != NULL)
            printf("%s/%s", o->source_queue, lane_text(o->source_lane));
        else
            printf("database %s", database);
        printf("%s", t->changed ? "" : " (unchanged: it already was)");
        if (t->catalog_version != 0)
            printf("; catalog version %" PRIu64, t->catalog_version);
        printf(" %s\n", tag);
        break;
    }
    }
}

static int change(cli *c, kl_client *client, const cli_transfer_args *o)
{
    kl_err err;
    if (o->token_out != NULL && cli_token_out_check("--token-out", o->token_out, &err) != KL_OK)
        return cli_error(c, &err);
    kl_batch *b;
    int rc = cli_new_batch(c, o->command_id, &b);
    if (rc != CLI_EXIT_OK)
        return rc;
    kl_receipt *r = NULL;
    if (add_mutation(o, b, &err) != KL_OK) {
        kl_batch_free(b);
        return cli_error(c, &err);
    }
    kl_code code = kl_client_batch(client, b, &r, &err);
    if (code != KL_OK) {
        kl_batch_free(b);
        return cli_error(c, &err);
    }
    const Keyload__V1__MutationResult *res = cli_single_result(c, r, result_kind[o->sub]);
    if (res == NULL) {
        rc = CLI_EXIT_ERROR;
    } else {
        char again[200];
        if (o->sub == CLI_TRANSFER_CREATE) {
            snprintf(again, sizeof again,
                     "the transfer was created: run the same command with --command-id %s and "
                     "another --token-out to get its token again", kl_batch_command_id(b));
            rc = write_token_out(c, "--token-out", o->token_out,
                                 &res->transfer_created->intent_token, again);
        } else if (o->sub == CLI_TRANSFER_ADVANCE || o->sub == CLI_TRANSFER_REPAIR) {
            snprintf(again, sizeof again,
                     "the transfer was advanced: `transfer inspect` shows its current_token, or "
                     "run the same command with --command-id %s and another --token-out",
                     kl_batch_command_id(b));
            rc = write_token_out(c, "--token-out", o->token_out,
                                 &res->transfer_advanced->intent_token, again);
        }
        if (rc == CLI_EXIT_OK && c->json)
            rc = cli_print_json(c, kl_receipt_to_json(r->decoded, 0));
        else if (rc == CLI_EXIT_OK)
            print_change(o, kl_client_database(client), res, r);
    }
    kl_receipt_free(r);
    kl_batch_free(b);
    return rc;
}

static int inspect(cli *c, kl_client *client, const cli_transfer_args *o)
{
    kl_err err;
    Keyload__V1__InspectQueueTransferAnswer *a;
    if (kl_client_inspect_transfer(client, o->source_queue, o->source_lane, o->id, &a, &err) !=
        KL_OK)
        return cli_error(c, &err);
    int rc = CLI_EXIT_OK;
    if (c->json)
        rc = cli_print_json(c, kl_transfer_to_json(a, 0));
    else
        print_inspect(o, a);
    kl_transfer_answer_free(a);
    return rc;
}

static int receipt(cli *c, kl_client *client, const cli_transfer_args *o)
{
    kl_err err;
    if (o->token_out != NULL && cli_token_out_check("--token-out", o->token_out, &err) != KL_OK)
        return cli_error(c, &err);
    Keyload__V1__InspectQueueTransferReceiptAnswer *a;
    if (kl_client_transfer_receipt(client, o->dest_queue, o->source_queue, o->source_lane, o->id,
                                   &a, &err) != KL_OK)
        return cli_error(c, &err);
    int rc = write_token_out(c, "--token-out", o->token_out, &a->receipt_token,
                             "nothing was changed: run it again");
    if (rc == CLI_EXIT_OK && c->json) {
        rc = cli_print_json(c, kl_transfer_receipt_to_json(a, 0));
    } else if (rc == CLI_EXIT_OK) {
        const Keyload__V1__TargetEffect *e = a->target_commit;
        printf("receipt of transfer %s from %s/%s into ", o->id, o->source_queue,
               lane_text(o->source_lane));
        print_ref(a->destination);
        if (e != NULL)
            printf(": message %" PRIu64 " committed on partition %" PRId32 " (term %" PRIu64
                   ", index %" PRIu64 ")",
                   e->message_id, e->partition, e->term, e->index);
        printf("; read at applied index %" PRIu64 "\n", a->applied_index);
        if (o->token_out != NULL)
            printf("receipt token (%zu bytes) written to %s\n", a->receipt_token.len, o->token_out);
        else
            print_token("receipt token", &a->receipt_token);
    }
    kl_transfer_receipt_answer_free(a);
    return rc;
}

static int pending(cli *c, kl_client *client, const cli_transfer_args *o)
{
    kl_err err;
    uint8_t *cursor = NULL;
    size_t cursor_len = 0;
    if (o->cursor != NULL && o->cursor[0] != '\0' &&
        kl_base64_decode("--cursor", o->cursor, &cursor, &cursor_len, &err) != KL_OK)
        return cli_usage(c, "--cursor must be the base64 next cursor a previous page printed");
    Keyload__V1__ListPendingQueueTransfersAnswer *a;
    kl_code code = kl_client_pending_transfers(client, o->source_queue, o->source_lane,
                                               o->partition, cursor, cursor_len, o->max_items,
                                               &a, &err);
    free(cursor);
    if (code != KL_OK)
        return cli_error(c, &err);
    int rc = CLI_EXIT_OK;
    if (c->json) /* a listing is not where tokens are handed out */
        rc = cli_print_json(c, kl_pending_transfers_to_json(a, KL_JSON_OMIT_TOKENS));
    else
        print_pending(a);
    kl_pending_transfers_free(a);
    return rc;
}

static void print_failure(const cli_transfer_args *o,
                          const Keyload__V1__ReadQueueTransferFailureAnswer *a)
{
    if (o->sub == CLI_TRANSFER_COMPLETE_FAILURE)
        printf("complete %s of %s/%s: %s\n", o->failed_command_id, o->source_queue,
               lane_text(o->source_lane), kl_failure_verdict_name(a->verdict));
    else
        printf("accept %s into %s/%s: %s\n", o->failed_command_id, o->dest_queue,
               lane_text(o->dest_lane), kl_failure_verdict_name(a->verdict));
    printf("  it was refused %s%s%s (policy epoch then %" PRIu64 ", now %" PRIu64 ")\n",
           kl_code_name(a->failure_code), a->failure_detail[0] ? ": " : "", a->failure_detail,
           a->failure_policy_epoch, a->policy_epoch);
    const Keyload__V1__TargetEffect *e = a->target_commit;
    switch (a->verdict) {
    case KEYLOAD__V1__FAILURE_VERDICT__RECEIPT_EXISTS:
        if (e != NULL)
            printf("  a receipt exists: message %" PRIu64 " committed on partition %" PRId32
                   " (term %" PRIu64 ", index %" PRIu64 "); complete the transfer with it\n",
                   e->message_id, e->partition, e->term, e->index);
        else
            printf("  a receipt exists; complete the transfer with it\n");
        if (o->receipt_out != NULL)
            printf("receipt token (%zu bytes) written to %s\n", a->receipt_token.len,
                   o->receipt_out);
        else
            print_token("receipt token", &a->receipt_token);
        break;
    case KEYLOAD__V1__FAILURE_VERDICT__WITNESS_ISSUED:
        printf("  the same %s would now pass: pass the witness to `transfer %s`\n",
               o->sub == CLI_TRANSFER_COMPLETE_FAILURE ? "complete" : "accept",
               a->failure_code == KL_PERMISSION_DENIED ? "repair" : "advance");
        if (o->witness_out != NULL)
            printf("witness token (%zu bytes) written to %s\n", a->witness_token.len,
                   o->witness_out);
        else
            print_token("witness token", &a->witness_token);
        break;
    default:
        printf("  still refused%s%s; fix it and read again\n",
               a->unchanged_detail[0] ? ": " : "", a->unchanged_detail);
        break;
    }
    printf("charged %" PRIu64 " records, %" PRIu64 " bytes; applied index %" PRIu64 "\n",
           a->records_charged, a->bytes_charged, a->applied_index);
}

static int failure(cli *c, kl_client *client, const cli_transfer_args *o)
{
    kl_err err;
    /* Both files are checked before the read, so that a token never has nowhere to go. */
    if ((o->witness_out != NULL &&
         cli_token_out_check("--witness-out", o->witness_out, &err) != KL_OK) ||
        (o->receipt_out != NULL &&
         cli_token_out_check("--receipt-out", o->receipt_out, &err) != KL_OK))
        return cli_error(c, &err);
    uint8_t *tok = NULL;
    size_t len = 0;
    bool of_complete = o->sub == CLI_TRANSFER_COMPLETE_FAILURE;
    if (cli_token_read(of_complete ? "--receipt" : "--intent", o->token, &tok, &len, &err) != KL_OK)
        return cli_error(c, &err);
    Keyload__V1__ReadQueueTransferFailureAnswer *a;
    kl_code code = of_complete ? kl_client_read_complete_failure(client, o->source_queue, o->source_lane, o->id,
                                                                 tok, len, o->failed_command_id, &a, &err)
                               : kl_client_read_transfer_failure(client, o->dest_queue, o->dest_lane, tok, len,
                                                                 o->failed_command_id, &a, &err);
    free(tok);
    if (code != KL_OK)
        return cli_error(c, &err);
    static const char again[] = "nothing was changed: run it again";
    int rc = CLI_EXIT_OK;
    if (a->witness_token.len > 0)
        rc = write_token_out(c, "--witness-out", o->witness_out, &a->witness_token, again);
    if (rc == CLI_EXIT_OK && a->receipt_token.len > 0)
        rc = write_token_out(c, "--receipt-out", o->receipt_out, &a->receipt_token, again);
    if (rc == CLI_EXIT_OK && c->json)
        rc = cli_print_json(c, kl_transfer_failure_to_json(a, 0));
    else if (rc == CLI_EXIT_OK)
        print_failure(o, a);
    kl_transfer_failure_answer_free(a);
    return rc;
}

int cli_cmd_transfer(cli *c, int argc, char **argv)
{
    cli_transfer_args o;
    int rc = cli_transfer_parse(c, argc, argv, &o);
    if (rc != CLI_EXIT_OK || o.help)
        return rc;
    kl_err err;
    kl_client *client;
    if (cli_open(c, &client, &err) != KL_OK) {
        cli_transfer_args_clear(&o);
        return cli_error(c, &err);
    }
    switch (o.sub) {
    case CLI_TRANSFER_INSPECT: rc = inspect(c, client, &o); break;
    case CLI_TRANSFER_RECEIPT: rc = receipt(c, client, &o); break;
    case CLI_TRANSFER_PENDING: rc = pending(c, client, &o); break;
    case CLI_TRANSFER_FAILURE:
    case CLI_TRANSFER_COMPLETE_FAILURE: rc = failure(c, client, &o); break;
    default: rc = change(c, client, &o); break;
    }
    kl_client_close(client);
    cli_transfer_args_clear(&o);
    return rc;
}
