/* One Check runner for every unit suite; built with ASan+UBSan (Makefile: unit-test).
 * Each tests/unit/test_<name>.c defines Suite *suite_<name>(void). */
#include "tests/unit/harness.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

Suite *suite_common(void);
Suite *suite_cluster(void);
Suite *suite_rpc(void);
Suite *suite_codec(void);
Suite *suite_store(void);
Suite *suite_journal(void);
Suite *suite_engine(void);
Suite *suite_sdk(void);
Suite *suite_raft(void);
Suite *suite_driver(void);
Suite *suite_peer(void);
Suite *suite_peer_auth(void);
Suite *suite_keys(void);
Suite *suite_catalog(void);
Suite *suite_sdk_retry(void);
Suite *suite_session(void);
Suite *suite_authz(void);
Suite *suite_sessions(void);
Suite *suite_principal(void);
Suite *suite_access(void);
Suite *suite_tail_auth(void);
Suite *suite_sdk_transfer(void);
Suite *suite_sdk_advance(void);
Suite *suite_transfer(void);
Suite *suite_coordinator(void);
Suite *suite_q1(void);
Suite *suite_entry_clock(void);
Suite *suite_subject_cache(void);
Suite *suite_sdk_leader(void);
Suite *suite_sdk_members(void);
Suite *suite_group(void);
Suite *suite_park(void);
Suite *suite_node_read(void);
Suite *suite_service(void);
Suite *suite_notify(void);
Suite *suite_retain(void);
Suite *suite_snapshot(void);
Suite *suite_snapwire(void);
Suite *suite_metrics(void);
Suite *suite_settings(void);
Suite *suite_validate(void);
Suite *suite_overlay(void);
Suite *suite_pb_arena(void);
Suite *suite_log_writer(void);
Suite *suite_trace(void);

int main(void)
{
    if (th_run_root_make() != 0) {
        perror("unit tests: cannot create the run's temporary directory");
        return EXIT_FAILURE;
    }
    SRunner *sr = srunner_create(suite_common());
    srunner_add_suite(sr, suite_cluster());
    srunner_add_suite(sr, suite_rpc());
    srunner_add_suite(sr, suite_codec());
    srunner_add_suite(sr, suite_store());
    srunner_add_suite(sr, suite_engine());
    srunner_add_suite(sr, suite_sdk());
    srunner_add_suite(sr, suite_raft());
    srunner_add_suite(sr, suite_driver());
    srunner_add_suite(sr, suite_peer());
    srunner_add_suite(sr, suite_peer_auth());
    srunner_add_suite(sr, suite_keys());
    srunner_add_suite(sr, suite_catalog());
    srunner_add_suite(sr, suite_sdk_retry());
    srunner_add_suite(sr, suite_session());
    srunner_add_suite(sr, suite_authz());
    srunner_add_suite(sr, suite_sessions());
    srunner_add_suite(sr, suite_principal());
    srunner_add_suite(sr, suite_access());
    srunner_add_suite(sr, suite_tail_auth());
    srunner_add_suite(sr, suite_sdk_transfer());
    srunner_add_suite(sr, suite_sdk_advance());
    srunner_add_suite(sr, suite_transfer());
    srunner_add_suite(sr, suite_coordinator());
    srunner_add_suite(sr, suite_q1());
    srunner_add_suite(sr, suite_entry_clock());
    srunner_add_suite(sr, suite_subject_cache());
    srunner_add_suite(sr, suite_sdk_leader());
    srunner_add_suite(sr, suite_sdk_members());
    srunner_add_suite(sr, suite_group());
    srunner_add_suite(sr, suite_park());
    srunner_add_suite(sr, suite_node_read());
    srunner_add_suite(sr, suite_service());
    srunner_add_suite(sr, suite_notify());
    srunner_add_suite(sr, suite_retain());
    srunner_add_suite(sr, suite_snapshot());
    srunner_add_suite(sr, suite_snapwire());
    srunner_add_suite(sr, suite_metrics());
    srunner_add_suite(sr, suite_settings());
    srunner_add_suite(sr, suite_validate());
    srunner_add_suite(sr, suite_overlay());
    srunner_add_suite(sr, suite_pb_arena());
    srunner_add_suite(sr, suite_log_writer());
    srunner_add_suite(sr, suite_trace());
    srunner_add_suite(sr, suite_journal());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    int run = srunner_ntests_run(sr);
    srunner_free(sr);
    th_run_root_remove();
    printf("%d passed, %d failed\n", run - failed, failed);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
