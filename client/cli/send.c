/* send: opening the SDK client from the CLI's options and sending one batch. */
#include "client/cli/cli.h"
#include "common/guid.h"

#include <stdio.h>
#include <string.h>

kl_code cli_open(const cli *c, kl_client **out, kl_err *err)
{
    *out = NULL;
    if ((c->principal == NULL) != (c->key == NULL))
        return kl_fail(err, KL_INVALID_ARGUMENT, "usage",
                       "--principal and --key (env KEYLOAD_PRINCIPAL, KEYLOAD_KEY) go together: "
                       "give both or neither");
    if (c->principal != NULL)
        return kl_client_open_principal(c->cluster, c->database, c->timeout_ms, c->principal,
                                        c->key, out, err);
    return kl_client_open(c->cluster, c->database, c->timeout_ms, out, err);
}

int cli_send(cli *c, const kl_batch *b, kl_receipt **out)
{
    *out = NULL;
    kl_err err;
    kl_err_clear(&err);
    kl_client *client;
    if (cli_open(c, &client, &err) != KL_OK)
        return cli_error(c, &err);
    kl_code rc = kl_client_batch(client, b, out, &err);
    kl_client_close(client);
    if (rc != KL_OK)
        return cli_error(c, &err);
    return CLI_EXIT_OK;
}

int cli_send_result(cli *c, const kl_batch *b, int kind, kl_receipt **r,
                    const Keyload__V1__MutationResult **res)
{
    *res = NULL;
    int rc = cli_send(c, b, r);
    if (rc != CLI_EXIT_OK)
        return rc;
    if (c->json)
        return cli_print_json(c, kl_receipt_to_json((*r)->decoded, 0));
    *res = cli_single_result(c, *r, kind);
    return *res ? CLI_EXIT_OK : CLI_EXIT_ERROR;
}

const char *cli_receipt_tag(const kl_receipt *r, char *buf, size_t cap)
{
    const Keyload__V1__BatchReceipt *d = r->decoded;
    char id[KL_GUID_TEXT_LEN + 1] = "?";
    if (d->command_id.len == KL_GUID_LEN)
        kl_guid_format(d->command_id.data, id);
    if (d->index == 0) /* a Receive that leased nothing: nothing was committed */
        snprintf(buf, cap, "(command %s, nothing committed)", id);
    else
        snprintf(buf, cap, "(command %s, index %llu)", id, (unsigned long long)d->index);
    return buf;
}

const Keyload__V1__MutationResult *cli_single_result(cli *c, const kl_receipt *r, int kind)
{
    const Keyload__V1__BatchReceipt *d = r->decoded;
    if (d->n_results == 1 && (int)d->results[0]->kind_case == kind)
        return d->results[0];
    kl_err err;
    kl_fail(&err, KL_INTERNAL, "receipt",
            "the receipt holds %zu results, not the one expected for this command",
            d->n_results);
    cli_error(c, &err);
    return NULL;
}

int cli_new_batch(cli *c, const char *command_id, kl_batch **out)
{
    kl_err err;
    if (kl_batch_new(command_id, out, &err) != KL_OK)
        return cli_error(c, &err);
    return CLI_EXIT_OK;
}

int cli_help(cli *c)
{
    printf("usage: %s\n", c->usage);
    return CLI_EXIT_OK;
}
