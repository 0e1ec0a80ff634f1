/* sdk_xfer_fixture: what the SDK/CLI transfer unit tests share (test_sdk_transfer.c,
 * test_sdk_advance.c): fixed ids, a batch, lane refs and their JSON in the client database
 * acme/shop, and parsing of `keyload transfer ...` arguments. Every helper asserts (Check)
 * instead of returning errors. */
#ifndef KL_TESTS_SDK_XFER_FIXTURE_H
#define KL_TESTS_SDK_XFER_FIXTURE_H

#include "client/cli/cli.h"
#include "client/keyload.h"

#include <check.h>
#include <string.h>

#define CMD_ID "0f8fad5b-d9cb-469f-a165-70867728950e"
#define XFER_ID "7c9e6679-7425-40de-944b-e07fc1f90ae7"
#define ZERO_ID "00000000-0000-0000-0000-000000000000"
#define SRC_JSON "{\"tenant\":\"acme\",\"database\":\"shop\",\"queue\":\"orders\",\"lane\":\"eu\"}"
#define DST_JSON \
    "{\"tenant\":\"acme\",\"database\":\"shop\",\"queue\":\"archive\",\"lane\":\"default\"}"

/* A new empty batch under CMD_ID (the caller frees it). */
kl_batch *xf_new_batch(void);
/* r is complete and in acme/shop. */
void xf_assert_ref(const Keyload__V1__QueueLaneRef *r, const char *queue, const char *lane);
/* A complete lane ref in acme/shop (borrows queue and name). */
Keyload__V1__QueueLaneRef xf_lane(const char *queue, const char *name);

/* A CLI context for parsing only (no cluster is contacted). */
cli xf_test_cli(void);
/* Parses `transfer ARGS...` (a NULL-terminated list); returns the exit code. */
int xf_tparse(cli *c, cli_transfer_args *o, const char *first, ...);

/* The arguments are a usage error whose message holds needle. */
#define USAGE_ERR(needle, ...)                                                                 \
    do {                                                                                       \
        cli c_ = xf_test_cli();                                                                \
        cli_transfer_args o_;                                                                  \
        ck_assert_int_eq(xf_tparse(&c_, &o_, __VA_ARGS__, (const char *)NULL), CLI_EXIT_USAGE); \
        ck_assert_msg(strstr(c_.last_usage, needle) != NULL, "want '%s' in '%s'", needle,      \
                      c_.last_usage);                                                          \
    } while (0)

#endif
