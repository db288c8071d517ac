/*
 * Slurm host lists (launch/hostlist.h): plain names, ranges with zero
 * padding, several groups in one name, commas inside and outside brackets,
 * and every malformed form refused with the variable named.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "launch/hostlist.h"
#include "runtime/error.h"
#include "host/host_table.h"

/* Expand and compare with a space-separated expectation. */
static void expect(const char *list, const char *want) {
    char **names = NULL;
    int n = 0;
    if (plait_hostlist_expand(list, "SLURM_NODELIST", &names, &n) != PLAIT_OK)
        fail_msg("'%s': %s", list, plait_last_error());
    char got[4096] = "";
    size_t off = 0;
    for (int i = 0; i < n; i++) off += (size_t)snprintf(got + off, sizeof got - off, "%s%s", i ? " " : "", names[i]);
    plait_hostlist_free(names, n);
    if (strcmp(got, want) != 0) fail_msg("'%s' expands to '%s', expected '%s'", list, got, want);
}

static void test_expansions(void **state) {
    (void)state;
    expect("node1", "node1");
    expect("a,b,c", "a b c");
    expect("node[1-3]", "node1 node2 node3");
    expect("node[08-11]", "node08 node09 node10 node11");
    expect("node[001-002,7]", "node001 node002 node7"); /* padding is per item, as in Slurm */
    expect("gpu[1,3],cpu7", "gpu1 gpu3 cpu7");
    expect("rack[1-2]-n[1-2]", "rack1-n1 rack1-n2 rack2-n1 rack2-n2");
    expect("x[9-10]y", "x9y x10y");
    expect("h0.cluster.local,h[1-2].cluster.local", "h0.cluster.local h1.cluster.local h2.cluster.local");
    expect("n[5]", "n5");
}

static void test_first(void **state) {
    (void)state;
    char host[64];
    assert_int_equal(plait_hostlist_first("node[07-09],login", "SLURM_STEP_NODELIST", host, sizeof host), PLAIT_OK);
    assert_string_equal(host, "node07");
    char tiny[4];
    assert_int_equal(plait_hostlist_first("longname", "SLURM_NODELIST", tiny, sizeof tiny), PLAIT_ERR_INVALID_CONFIG);
}

static void expect_error(const char *list, const char *what) {
    char **names = NULL;
    int n = 0;
    plait_status st = plait_hostlist_expand(list, "SLURM_NODELIST", &names, &n);
    if (st == PLAIT_OK) fail_msg("'%s' was accepted (%d names)", list, n);
    assert_int_equal(st, PLAIT_ERR_INVALID_CONFIG);
    assert_null(names);
    if (!strstr(plait_last_error(), "SLURM_NODELIST") || !strstr(plait_last_error(), what))
        fail_msg("'%s': message '%s' lacks the variable or '%s'", list, plait_last_error(), what);
}

static void test_errors(void **state) {
    (void)state;
    expect_error("", "empty");
    expect_error("node[1-3", "without ']'");
    expect_error("node1-3]", "without '['");
    expect_error("node[[1]]", "nested");
    expect_error("node[3-1]", "ends below");
    expect_error("node[a-b]", "numbers");
    expect_error("node[]", "numbers");
    expect_error("node[1,]", "numbers");
    expect_error("a,,b", "empty name");
    expect_error("a,", "empty name");
    expect_error("n[0-99999]", "65536");
    expect_error("n[1234567890]", "1-9 digits");
}

int main(void) {
    plait_host_install();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expansions),
        cmocka_unit_test(test_first),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
