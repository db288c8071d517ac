/*
 * The job environment under Slurm without MASTER_ADDR (launch/slurm_env.h,
 * launch/bootstrap.h): the first node of the step's list hosts the store, the
 * port is MASTER_PORT or derived from the job and step ids, equal on every
 * rank; one node needs nothing; several nodes without a token are refused
 * with what to set; a malformed list names its variable.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "launch/bootstrap.h"
#include "launch/slurm_env.h"
#include "runtime/error.h"
#include "host/host_table.h"

static void test_derived_address(void **state) {
    (void)state;
    char *env[] = {"SLURM_PROCID=3", "SLURM_STEP_ID=2", "SLURM_NTASKS=4", "SLURM_LOCALID=1", "SLURM_STEP_NUM_NODES=2",
                   "SLURM_JOB_ID=4711", "SLURM_STEP_NODELIST=node[07-08]", "SLURM_NODELIST=node[07-09]",
                   "PLAIT_JOB_TOKEN=secret", NULL};
    plait_job_env e;
    if (plait_job_env_detect(env, NULL, &e) != PLAIT_OK) fail_msg("%s", plait_last_error());
    assert_int_equal(e.launcher, PLAIT_LAUNCHER_SLURM);
    assert_int_equal(e.rank, 3);
    assert_int_equal(e.all_local, 0);
    assert_string_equal(e.store_host, "node07");
    assert_int_equal(e.store_port, 20000 + (16 * 4711 + 2) % 10000);
    assert_non_null(strstr(e.store_source, "SLURM_STEP_NODELIST"));
}

static void test_master_port_and_batch_list(void **state) {
    (void)state;
    /* a batch script (no step): SLURM_NODELIST, and MASTER_PORT wins */
    char *env[] = {"SLURM_JOB_ID=12", "SLURM_NODELIST=gpu[3,5]", "MASTER_PORT=29400", NULL};
    char host[64];
    int port = 0;
    assert_int_equal(plait_slurm_store_address(env, host, sizeof host, &port), PLAIT_OK);
    assert_string_equal(host, "gpu3");
    assert_int_equal(port, 29400);
    char *bad_port[] = {"SLURM_NODELIST=a", "MASTER_PORT=70000", NULL};
    assert_int_equal(plait_slurm_store_address(bad_port, host, sizeof host, &port), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "MASTER_PORT"));
    char *no_job[] = {"SLURM_NODELIST=a", NULL};
    assert_int_equal(plait_slurm_store_address(no_job, host, sizeof host, &port), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "SLURM_JOB_ID"));
    char *none[] = {"SLURM_JOB_ID=1", NULL};
    assert_int_equal(plait_slurm_store_address(none, host, sizeof host, &port), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "MASTER_ADDR"));
}

static void test_refusals(void **state) {
    (void)state;
    plait_job_env e;
    char *bad_list[] = {"SLURM_PROCID=0", "SLURM_STEP_ID=0", "SLURM_NTASKS=4", "SLURM_STEP_NUM_NODES=2",
                        "SLURM_JOB_ID=9", "SLURM_STEP_NODELIST=node[1-", "PLAIT_JOB_TOKEN=x", NULL};
    assert_int_equal(plait_job_env_detect(bad_list, NULL, &e), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "SLURM_STEP_NODELIST"));
    char *no_token[] = {"SLURM_PROCID=0", "SLURM_STEP_ID=0", "SLURM_NTASKS=4", "SLURM_STEP_NUM_NODES=2",
                        "SLURM_JOB_ID=9", "SLURM_STEP_NODELIST=node[1-2]", NULL};
    assert_int_equal(plait_job_env_detect(no_token, NULL, &e), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "PLAIT_JOB_TOKEN"));
    /* one node: the private rendezvous file, no address needed */
    char *one[] = {"SLURM_PROCID=1", "SLURM_STEP_ID=0", "SLURM_NTASKS=4", "SLURM_STEP_NUM_NODES=1", "SLURM_JOB_ID=9",
                   "SLURM_STEP_NODELIST=node1", NULL};
    if (plait_job_env_detect(one, NULL, &e) != PLAIT_OK) fail_msg("%s", plait_last_error());
    assert_string_equal(e.store_source, "private rendezvous file");
    /* the multi-host plait launcher's ranks are not all local */
    char *launched[] = {"PLAIT_RANK=2", "PLAIT_WORLD_SIZE=4", "PLAIT_LOCAL_RANK=0", "PLAIT_LOCAL_SIZE=2",
                        "PLAIT_NNODES=2", "PLAIT_STORE_ADDR=10.0.0.1:29500", "PLAIT_JOB_TOKEN=t", NULL};
    if (plait_job_env_detect(launched, NULL, &e) != PLAIT_OK) fail_msg("%s", plait_last_error());
    assert_int_equal(e.all_local, 0);
    assert_string_equal(e.store_host, "10.0.0.1");
}

int main(void) {
    plait_host_install();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_derived_address),
        cmocka_unit_test(test_master_port_and_batch_list),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
