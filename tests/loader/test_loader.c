/* Loader error paths: every refusal names the file and says what to do. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "plugin/loader.h"
#include "runtime/error.h"

static const char *plugin_dir(void) {
    const char *d = getenv("PLAIT_TEST_PLUGIN_DIR");
    return d ? d : "tests/plugins";
}

static int setup(void **state) {
    (void)state;
    setenv("PLAIT_PLUGIN_PATH", plugin_dir(), 1);
    return 0;
}

#define assert_contains(haystack, needle)                                                  \
    do {                                                                                   \
        if (!strstr((haystack), (needle)))                                                 \
            fail_msg("expected \"%s\" in message: %s", (needle), (haystack));              \
    } while (0)

static void refused(const char *name, const char *const *needles) {
    plait_clear_error();
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_OPTIM, name);
    assert_null(d);
    const char *msg = plait_last_error();
    char file[128];
    snprintf(file, sizeof file, "libplait-optim-%s.so", name);
    assert_contains(msg, file);
    for (int i = 0; needles[i]; i++) assert_contains(msg, needles[i]);
}

static void test_not_found_lists_dirs(void **state) {
    (void)state;
    plait_clear_error();
    assert_null(plait_plugin_load(PLAIT_KIND_OPTIM, "nope"));
    const char *msg = plait_last_error();
    assert_contains(msg, "not found");
    assert_contains(msg, "libplait-optim-nope.so");
    assert_contains(msg, plugin_dir());
    assert_contains(msg, "plait plugins");
}

static void test_abi_major_symbol(void **state) {
    (void)state;
    refused("abi2", (const char *const[]){"ABI v2", "ABI v1.0", "rebuild", NULL});
}

static void test_abi_major_descriptor(void **state) {
    (void)state;
    refused("descmajor2", (const char *const[]){"ABI v2.0", "v1.0", NULL});
}

static void test_missing_symbol(void **state) {
    (void)state;
    refused("nosym", (const char *const[]){"not a plait plugin", "plait_plugin_v1", NULL});
}

static void test_short_descriptor(void **state) {
    (void)state;
    refused("shortdesc", (const char *const[]){"16 bytes", "smaller than", NULL});
}

static void test_newer_minor(void **state) {
    (void)state;
    refused("newminor", (const char *const[]){"needs plait ABI v1.99", "upgrade plait", NULL});
}

static void test_bad_magic(void **state) {
    (void)state;
    refused("badmagic", (const char *const[]){"magic", NULL});
}

static void test_entry_refuses(void **state) {
    (void)state;
    refused("refuses", (const char *const[]){"refused to load", "always refuses", NULL});
}

static void test_name_mismatch(void **state) {
    (void)state;
    refused("misnamed", (const char *const[]){"optim/misnamed", "optim/othername", "rename", NULL});
}

static void test_duplicate_in_one_file(void **state) {
    (void)state;
    refused("twice", (const char *const[]){"two plugins named optim/twice", NULL});
}

static void test_duplicate_across_files(void **state) {
    (void)state;
    const plait_plugin_desc *a = plait_plugin_load(PLAIT_KIND_OPTIM, "dupa");
    assert_non_null(a); /* registers dupa and dupb */
    refused("dupb", (const char *const[]){"two plugins named optim/dupb", "libplait-optim-dupa.so", NULL});
}

static void test_good_after_refusals(void **state) {
    (void)state;
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_OPTIM, "testgood");
    assert_non_null(d);
    assert_string_equal(d->name, "testgood");
    assert_int_equal(d->abi_major, PLAIT_ABI_MAJOR);
    assert_int_equal(d->n_params, 1);
    const char *path = plait_plugin_path(d);
    assert_non_null(path);
    assert_contains(path, "libplait-optim-testgood.so");
    /* a second load returns the same descriptor (one handle per file) */
    assert_ptr_equal(plait_plugin_load(PLAIT_KIND_OPTIM, "testgood"), d);
}

static void test_explicit_path(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/libplait-optim-testgood.so", plugin_dir());
    assert_non_null(plait_plugin_load(PLAIT_KIND_OPTIM, path));
    plait_clear_error();
    assert_null(plait_plugin_load(PLAIT_KIND_COMM, path));
    assert_contains(plait_last_error(), "holds no comm plugin");
}

static void test_scan_lists_good_and_refused(void **state) {
    (void)state;
    plait_plugin_row *rows = NULL;
    size_t n = plait_plugins_scan(&rows);
    int good = 0, abi2 = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(rows[i].name, "testgood") == 0 && rows[i].loaded && rows[i].available) {
            good = 1;
            assert_string_equal(rows[i].abi, "1.0");
        }
        if (strcmp(rows[i].name, "abi2") == 0) {
            abi2 = 1;
            assert_false(rows[i].loaded);
            assert_contains(rows[i].status, "ABI v2");
        }
    }
    free(rows);
    assert_true(good);
    assert_true(abi2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_not_found_lists_dirs),
        cmocka_unit_test(test_abi_major_symbol),
        cmocka_unit_test(test_abi_major_descriptor),
        cmocka_unit_test(test_missing_symbol),
        cmocka_unit_test(test_short_descriptor),
        cmocka_unit_test(test_newer_minor),
        cmocka_unit_test(test_bad_magic),
        cmocka_unit_test(test_entry_refuses),
        cmocka_unit_test(test_name_mismatch),
        cmocka_unit_test(test_duplicate_in_one_file),
        cmocka_unit_test(test_duplicate_across_files),
        cmocka_unit_test(test_good_after_refusals),
        cmocka_unit_test(test_explicit_path),
        cmocka_unit_test(test_scan_lists_good_and_refused),
    };
    int rc = cmocka_run_group_tests(tests, setup, NULL);
    plait_plugins_unload_all();
    return rc;
}
