#include "tests/unit/sdk_xfer_fixture.h"

#include <stdarg.h>

kl_batch *xf_new_batch(void)
{
    kl_batch *b;
    ck_assert_int_eq(kl_batch_new(CMD_ID, &b, NULL), KL_OK);
    return b;
}

void xf_assert_ref(const Keyload__V1__QueueLaneRef *r, const char *queue, const char *lane)
{
    ck_assert_ptr_nonnull(r);
    ck_assert_str_eq(r->tenant, "acme");
    ck_assert_str_eq(r->database, "shop");
    ck_assert_str_eq(r->queue, queue);
    ck_assert_str_eq(r->lane, lane);
}

Keyload__V1__QueueLaneRef xf_lane(const char *queue, const char *name)
{
    Keyload__V1__QueueLaneRef r = KEYLOAD__V1__QUEUE_LANE_REF__INIT;
    r.tenant = "acme";
    r.database = "shop";
    r.queue = (char *)queue;
    r.lane = (char *)name;
    return r;
}

cli xf_test_cli(void)
{
    cli c = {.cluster = "deploy/local-1.json", .database = "acme/shop", .timeout_ms = 1000};
    return c;
}

int xf_tparse(cli *c, cli_transfer_args *o, const char *first, ...)
{
    char *argv[32];
    int argc = 0;
    va_list ap;
    va_start(ap, first);
    for (const char *s = first; s != NULL && argc < 31; s = va_arg(ap, const char *))
        argv[argc++] = (char *)s;
    va_end(ap);
    argv[argc] = NULL;
    c->last_usage[0] = '\0';
    return cli_transfer_parse(c, argc, argv, o);
}
