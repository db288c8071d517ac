/*
 * What a plugin call may change in the process (runtime/process_state.h):
 * nothing changed says nothing; a changed working directory, a PLAIT_*
 * variable set, changed or unset are each named with their values, except a
 * secret's, and so are the few others a run reads later (TMPDIR,
 * CUDA_VISIBLE_DEVICES, ...); other variables are not plait's to watch. A refusal names the
 * calls and each change; nothing changed leaves the error as it was. A
 * compare costs microseconds, so a run can make one after every step.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "runtime/clock.h"
#include "runtime/error.h"
#include "runtime/process_state.h"

static void test_nothing_changed(void **state) {
    (void)state;
    setenv("PLAIT_TEST_KEEP", "1", 1);
    plait_process_state s;
    plait_process_state_take(&s);
    setenv("OTHER_TEST_VAR", "x", 1); /* not a PLAIT_* variable */
    char what[512];
    assert_int_equal(plait_process_state_changed(&s, what, sizeof what), 0);
    assert_string_equal(what, "");
    plait_process_state_free(&s);
    unsetenv("PLAIT_TEST_KEEP");
}

static void test_each_change_named(void **state) {
    (void)state;
    char here[4096];
    assert_non_null(getcwd(here, sizeof here));
    setenv("PLAIT_TEST_A", "old", 1);
    setenv("PLAIT_TEST_GONE", "was", 1);
    plait_process_state s;
    plait_process_state_take(&s);
    assert_int_equal(chdir("/"), 0);
    setenv("PLAIT_TEST_A", "new", 1);
    unsetenv("PLAIT_TEST_GONE");
    setenv("PLAIT_TEST_NEW", "1", 1);
    setenv("PLAIT_TEST_TOKEN", "hunter2", 1);
    char what[1024];
    assert_int_equal(plait_process_state_changed(&s, what, sizeof what), 1);
    char dir[4200];
    snprintf(dir, sizeof dir, "the working directory from '%s' to '/'", here);
    assert_non_null(strstr(what, dir));
    assert_non_null(strstr(what, "PLAIT_TEST_A from 'old' to 'new'"));
    assert_non_null(strstr(what, "PLAIT_TEST_GONE unset (was 'was')"));
    assert_non_null(strstr(what, "PLAIT_TEST_NEW set to '1'"));
    assert_non_null(strstr(what, "PLAIT_TEST_TOKEN set (value not shown)"));
    assert_null(strstr(what, "hunter2"));
    /* a short buffer is cut, never overrun */
    char small[24];
    assert_int_equal(plait_process_state_changed(&s, small, sizeof small), 1);
    assert_int_equal(strlen(small), sizeof small - 1);
    plait_process_state_free(&s);
    assert_int_equal(chdir(here), 0);
    unsetenv("PLAIT_TEST_A");
    unsetenv("PLAIT_TEST_NEW");
    unsetenv("PLAIT_TEST_TOKEN");
}

/* Besides PLAIT_*, the variables a run reads after its plugins load:
 * TMPDIR (scratch), XDG_CACHE_HOME (the peak cache), CUDA_VISIBLE_DEVICES;
 * a name that only begins like one is not watched. */
static void test_watched_others(void **state) {
    (void)state;
    const char *tmp = getenv("TMPDIR");
    char *saved = tmp ? strdup(tmp) : NULL;
    setenv("TMPDIR", "/tmp", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    plait_process_state s;
    plait_process_state_take(&s);
    setenv("TMPDIRX", "1", 1);
    char what[1024];
    assert_int_equal(plait_process_state_changed(&s, what, sizeof what), 0);
    setenv("TMPDIR", "/elsewhere", 1);
    setenv("CUDA_VISIBLE_DEVICES", "3", 1);
    assert_int_equal(plait_process_state_changed(&s, what, sizeof what), 1);
    assert_non_null(strstr(what, "TMPDIR from '/tmp' to '/elsewhere'"));
    assert_non_null(strstr(what, "CUDA_VISIBLE_DEVICES set to '3'"));
    assert_null(strstr(what, "TMPDIRX"));
    assert_int_equal(plait_process_state_refuse(&s, "the calls", ""), PLAIT_ERR_ABI);
    assert_non_null(strstr(plait_last_error(), "(and " PLAIT_WATCHED_OTHERS ")"));
    plait_process_state_free(&s);
    unsetenv("TMPDIRX");
    unsetenv("CUDA_VISIBLE_DEVICES");
    if (saved) setenv("TMPDIR", saved, 1);
    else unsetenv("TMPDIR");
    free(saved);
}

static void test_refusal_names_the_calls(void **state) {
    (void)state;
    plait_process_state s;
    plait_process_state_take(&s);
    plait_set_error(PLAIT_ERR_TIMEOUT, "an earlier error");
    assert_int_equal(plait_process_state_refuse(&s, "step 3: the step's calls", ""), PLAIT_OK);
    assert_string_equal(plait_last_error(), "an earlier error");
    setenv("PLAIT_TEST_STEP", "3", 1);
    assert_int_equal(plait_process_state_refuse(&s, "step 3: the step's calls", "; and more"), PLAIT_ERR_ABI);
    const char *msg = plait_last_error();
    assert_non_null(strstr(msg, "step 3: the step's calls changed the process: PLAIT_TEST_STEP set to '3'; a plugin "
                                "must leave"));
    assert_non_null(strstr(msg, "so it stops rather than follow the change; and more"));
    plait_process_state_free(&s);
    unsetenv("PLAIT_TEST_STEP");
}

/* A run compares once or twice a step: 10^4 compares, their cost printed.
 * A compare that blocked would meet ctest's TIMEOUT (30 s); no bound on the
 * time they took, which a loaded machine can stretch. */
static void test_compare_cost(void **state) {
    (void)state;
    plait_process_state s;
    plait_process_state_take(&s);
    char what[256];
    double t0 = plait_clock_now();
    for (int i = 0; i < 10000; i++) assert_int_equal(plait_process_state_changed(&s, what, sizeof what), 0);
    double each = (plait_clock_now() - t0) / 10000;
    printf("one compare: %.2f us\n", each * 1e6); /* for the log: no bound on it */
    plait_process_state_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nothing_changed),
        cmocka_unit_test(test_each_change_named),
        cmocka_unit_test(test_watched_others),
        cmocka_unit_test(test_refusal_names_the_calls),
        cmocka_unit_test(test_compare_cost),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
