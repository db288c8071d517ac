/* The same scenarios under Debian's Open MPI launcher:
 * `mpirun --allow-run-as-root --oversubscribe -np 4`. plait joins it as one
 * rank per process (OMPI_COMM_WORLD_*) and, all ranks being on this host,
 * finds rank 0's store through the private rendezvous file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "job_runner.h"

static const char *mpirun_path(void) {
    const char *p = getenv("PLAIT_MPIRUN");
    return p ? p : "/usr/bin/mpirun";
}

static void mpirun(int np, const char *timeout, const char *const *args, job_outcome *out) {
    if (access(mpirun_path(), X_OK) != 0)
        fail_msg("%s not found: install openmpi-bin (this test runs under a real mpirun)", mpirun_path());
    char npbuf[16], tbuf[64];
    snprintf(npbuf, sizeof npbuf, "%d", np);
    snprintf(tbuf, sizeof tbuf, "PLAIT_COMM_TIMEOUT=%s", timeout);
    char *argv[32];
    int k = 0;
    argv[k++] = (char *)mpirun_path();
    argv[k++] = (char *)"--allow-run-as-root";
    argv[k++] = (char *)"--oversubscribe";
    argv[k++] = (char *)"--bind-to";
    argv[k++] = (char *)"none";
    argv[k++] = (char *)"-np";
    argv[k++] = npbuf;
    argv[k++] = (char *)"-x";
    argv[k++] = tbuf;
    argv[k++] = (char *)test_driver();
    for (int i = 0; args[i] && k < 31; i++) argv[k++] = (char *)args[i];
    argv[k] = NULL;
    run_command(argv, NULL, out);
}

static void test_mpirun_basic_4(void **state) {
    (void)state;
    job_outcome o;
    mpirun(4, "60", (const char *const[]){"basic", NULL}, &o);
    if (o.exit_code != 0) fail_msg("mpirun exited %d:\n%s", o.exit_code, o.output);
    assert_contains(o.output, "driver: basic: ok");
    outcome_free(&o);
}

static void test_mpirun_basic_3(void **state) {
    (void)state;
    job_outcome o;
    mpirun(3, "60", (const char *const[]){"basic", NULL}, &o);
    if (o.exit_code != 0) fail_msg("mpirun exited %d:\n%s", o.exit_code, o.output);
    assert_contains(o.output, "driver: basic: ok");
    outcome_free(&o);
}

static void test_mpirun_stray_clients(void **state) {
    (void)state;
    job_outcome o;
    mpirun(4, "60", (const char *const[]){"stray", NULL}, &o);
    if (o.exit_code != 0) fail_msg("mpirun exited %d:\n%s", o.exit_code, o.output);
    assert_contains(o.output, "driver: stray: ok");
    assert_contains(o.output, "stray wrong token to the store: rejected as expected");
    assert_contains(o.output, "did not prove the job token");
    assert_contains(o.output, "wrong secret (claims rank 0)");
    assert_contains(o.output, "bad hello magic");
    outcome_free(&o);
}

static void test_mpirun_rank_never_joins(void **state) {
    (void)state;
    job_outcome o;
    mpirun(4, "2", (const char *const[]){"nojoin", "2", NULL}, &o);
    assert_int_not_equal(o.exit_code, 0);
    assert_contains(o.output, "rank 2 never joined the job within 2 s");
    outcome_free(&o);
}

static void test_mpirun_rank_killed(void **state) {
    (void)state;
    job_outcome o;
    mpirun(4, "3600", (const char *const[]){"kill", "2", NULL}, &o);
    assert_int_not_equal(o.exit_code, 0);
    /* mpirun reports the signal; the survivors (if mpirun has not killed them
     * first) name the lost peer; nobody waits for the hour's timeout */
    assert_contains(o.output, "rank 2");
    assert_no_timeout(o.output);
    outcome_free(&o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mpirun_basic_4),
        cmocka_unit_test(test_mpirun_basic_3),
        cmocka_unit_test(test_mpirun_stray_clients),
        cmocka_unit_test(test_mpirun_rank_never_joins),
        cmocka_unit_test(test_mpirun_rank_killed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
