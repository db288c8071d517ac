/* Loader: the search directories and their order, and the error paths:
 * every refusal names the file and says what to do. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "plugin/loader.h"
#include "runtime/error.h"
#include "host/host_table.h"

static const char *plugin_dir(void) {
    const char *d = getenv("PLAIT_TEST_PLUGIN_DIR");
    return d ? d : "tests/plugins";
}

static const char *plugin_dir2(void) {
    const char *d = getenv("PLAIT_TEST_PLUGIN_DIR2");
    return d ? d : "tests/plugins2";
}

#define MISSING_DIR "/nonexistent/plait-plugins"

static int setup(void **state) {
    (void)state;
    char path[3000];
    snprintf(path, sizeof path, "%s:%s:%s", plugin_dir(), plugin_dir2(), MISSING_DIR);
    setenv("PLAIT_PLUGIN_PATH", path, 1);
    return 0;
}

/* The directories searched, in the documented order: next to libplait (the
 * build tree's lib/plait), the install prefix's lib/plait, then each
 * PLAIT_PLUGIN_PATH directory (a missing one as written). */
static size_t expected_dirs(char dirs[5][PATH_MAX]) {
    const char *given[5] = {getenv("PLAIT_TEST_BUILD_PLUGIN_DIR"), getenv("PLAIT_TEST_INSTALL_PLUGIN_DIR"),
                            plugin_dir(), plugin_dir2(), MISSING_DIR};
    for (int i = 0; i < 5; i++) {
        if (!given[i]) fail_msg("PLAIT_TEST_BUILD_PLUGIN_DIR / PLAIT_TEST_INSTALL_PLUGIN_DIR are not set (run by ctest)");
        if (!realpath(given[i], dirs[i])) snprintf(dirs[i], PATH_MAX, "%s", given[i]);
    }
    return 5;
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

static void test_search_dirs_in_order(void **state) {
    (void)state;
    char want[5][PATH_MAX];
    size_t n_want = expected_dirs(want);
    const char *const *dirs = NULL;
    size_t n = plait_plugin_dirs(&dirs);
    assert_int_equal(n, n_want);
    for (size_t i = 0; i < n; i++) assert_string_equal(dirs[i], want[i]);
}

static void test_not_found_lists_dirs(void **state) {
    (void)state;
    plait_clear_error();
    assert_null(plait_plugin_load(PLAIT_KIND_OPTIM, "nope"));
    const char *msg = plait_last_error();
    assert_contains(msg, "optim plugin 'nope' not found");
    assert_contains(msg, "libplait-optim-nope.so");
    assert_contains(msg, "plait plugins");
    /* every directory searched, in the search order */
    char want[5][PATH_MAX];
    size_t n = expected_dirs(want);
    const char *at = msg;
    for (size_t i = 0; i < n; i++) {
        const char *p = strstr(at, want[i]);
        if (!p) fail_msg("directory %zu (%s) missing from, or out of order in: %s", i, want[i], msg);
        at = p + strlen(want[i]);
    }
}

/* A name found in two directories: the first directory's file is loaded,
 * the later one is left alone (and listed as shadowed by a scan). */
static void test_first_directory_wins(void **state) {
    (void)state;
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_OPTIM, "shadow");
    assert_non_null(d);
    assert_string_equal(d->version, "first");
    char dir[PATH_MAX];
    assert_non_null(realpath(plugin_dir(), dir));
    assert_contains(plait_plugin_path(d), dir);
    /* the build's own adam comes before one of that name on PLAIT_PLUGIN_PATH */
    d = plait_plugin_load(PLAIT_KIND_OPTIM, "adam");
    assert_non_null(d);
    if (strcmp(d->version, "impostor") == 0) fail_msg("loaded %s, not the build's adam", plait_plugin_path(d));
    char build[PATH_MAX];
    assert_non_null(realpath(getenv("PLAIT_TEST_BUILD_PLUGIN_DIR"), build));
    assert_contains(plait_plugin_path(d), build);
}

/* A file named for one kind holding a plugin of another is refused, naming
 * both and the file name to use. */
static void test_file_name_kind_mismatch(void **state) {
    (void)state;
    plait_clear_error();
    assert_null(plait_plugin_load(PLAIT_KIND_COMM, "kindswap"));
    const char *msg = plait_last_error();
    assert_contains(msg, "libplait-comm-kindswap.so: file name says comm/kindswap but the plugin inside calls "
                         "itself optim/kindswap; rename the file libplait-optim-kindswap.so");
}

/* A descriptor that lies about its kind (comm, with an optim function table)
 * is refused by the table's size, or (an optim table as large as comm's
 * first one, as the optim table has grown) by the comm functions it lacks,
 * before anything in it is called. */
static void test_kind_lie(void **state) {
    (void)state;
    plait_clear_error();
    assert_null(plait_plugin_load(PLAIT_KIND_COMM, "kindlie"));
    const char *msg = plait_last_error();
    assert_contains(msg, "libplait-comm-kindlie.so: comm/kindlie ");
    if (!strstr(msg, "smaller than ABI v1.0's")) assert_contains(msg, "lacks the required function");
}

/* A file named as an optim plugin whose descriptor says comm (over an
 * optim table) is refused for its kind, naming both, before its table is
 * read as a comm table (which would be refused for lacking a comm
 * function, naming neither kind). */
static void test_kind_not_the_file_s(void **state) {
    (void)state;
    plait_clear_error();
    assert_null(plait_plugin_load(PLAIT_KIND_OPTIM, "kindwrong"));
    const char *msg = plait_last_error();
    assert_contains(msg, "libplait-optim-kindwrong.so: file name says optim/kindwrong but the plugin inside calls "
                         "itself comm/kindwrong; rename the file libplait-comm-kindwrong.so or fix the descriptor's "
                         "kind");
}

/* A descriptor of an unknown kind is refused; so is a load for one. */
static void test_unknown_kind(void **state) {
    (void)state;
    refused("badkind", (const char *const[]){"unknown plugin kind 7", "comm=1, parallel=2, optim=3", NULL});
    for (uint32_t kind = 0; kind < 10; kind += 9) {
        plait_clear_error();
        assert_null(plait_plugin_load(kind, "adam"));
        char want[64];
        snprintf(want, sizeof want, "plugin 'adam': unknown plugin kind %u", kind);
        assert_contains(plait_last_error(), want);
    }
}

/* "v1.1": this core's ABI, which every refusal names beside the plugin's. */
static const char *core_abi(void) {
    static char v[32];
    snprintf(v, sizeof v, "v%d.%d", PLAIT_ABI_MAJOR, PLAIT_ABI_MINOR);
    return v;
}

static void test_abi_major_symbol(void **state) {
    (void)state;
    refused("abi2", (const char *const[]){"ABI v2", core_abi(), "rebuild", NULL});
}

static void test_abi_major_descriptor(void **state) {
    (void)state;
    refused("descmajor2", (const char *const[]){"built for plait plugin ABI v2.", core_abi(), NULL});
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
    refused("newminor", (const char *const[]){"needs plait ABI v1.99", core_abi(), "upgrade plait", NULL});
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

static void test_count_past_the_array(void **state) {
    (void)state;
    refused("hugecount", (const char *const[]){"returned 1000000 plugin descriptors (at most 64", NULL});
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
    assert_int_equal(d->n_keys, 1);
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
    /* what it is, and what to do */
    assert_contains(plait_last_error(), "libplait-optim-testgood.so: holds no comm plugin (it holds optim/testgood): "
                                        "it can serve as [optim] plugin; for [comm] plugin give a comm plugin "
                                        "('plait plugins' lists them)");
}

static void test_scan_lists_good_and_refused(void **state) {
    (void)state;
    plait_plugin_row *rows = NULL;
    size_t n = plait_plugins_scan(&rows);
    int good = 0, abi2 = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(rows[i].name, "testgood") == 0 && rows[i].loaded && rows[i].available) {
            good = 1;
            char abi[16];
            snprintf(abi, sizeof abi, "%d.%d", PLAIT_ABI_MAJOR, PLAIT_ABI_MINOR);
            assert_string_equal(rows[i].abi, abi);
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

/* A scan lists the later file of a name as shadowed, and refuses a file
 * name whose kind plait does not know, saying what to rename it to. */
static void test_scan_shadowed_and_unknown_file_kind(void **state) {
    (void)state;
    char dir2[PATH_MAX];
    assert_non_null(realpath(plugin_dir2(), dir2));
    plait_plugin_row *rows = NULL;
    size_t n = plait_plugins_scan(&rows);
    int shadow = 0, adam = 0, odd = 0;
    for (size_t i = 0; i < n; i++) {
        if (!strstr(rows[i].path, dir2)) continue;
        if (strcmp(rows[i].name, "shadow") == 0 || strcmp(rows[i].name, "adam") == 0) {
            assert_false(rows[i].loaded);
            assert_string_equal(rows[i].status, "shadowed by an earlier directory");
            shadow += strcmp(rows[i].name, "shadow") == 0;
            adam += strcmp(rows[i].name, "adam") == 0;
        }
        if (strcmp(rows[i].name, "odd") == 0) {
            odd = 1;
            assert_false(rows[i].loaded);
            assert_contains(rows[i].status, "libplait-widget-odd.so: the file name says kind 'widget', which this "
                                            "plait does not know (comm, parallel, optim, device); rename the file "
                                            "libplait-optim-odd.so");
        }
    }
    free(rows);
    assert_int_equal(shadow, 1);
    assert_int_equal(adam, 1);
    assert_true(odd);
}

int main(void) {
    plait_host_install(); /* plugins are handed the core's host table */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_search_dirs_in_order),
        cmocka_unit_test(test_not_found_lists_dirs),
        cmocka_unit_test(test_first_directory_wins),
        cmocka_unit_test(test_file_name_kind_mismatch),
        cmocka_unit_test(test_unknown_kind),
        cmocka_unit_test(test_kind_lie),
        cmocka_unit_test(test_kind_not_the_file_s),
        cmocka_unit_test(test_abi_major_symbol),
        cmocka_unit_test(test_abi_major_descriptor),
        cmocka_unit_test(test_missing_symbol),
        cmocka_unit_test(test_short_descriptor),
        cmocka_unit_test(test_newer_minor),
        cmocka_unit_test(test_bad_magic),
        cmocka_unit_test(test_entry_refuses),
        cmocka_unit_test(test_name_mismatch),
        cmocka_unit_test(test_duplicate_in_one_file),
        cmocka_unit_test(test_count_past_the_array),
        cmocka_unit_test(test_duplicate_across_files),
        cmocka_unit_test(test_good_after_refusals),
        cmocka_unit_test(test_explicit_path),
        cmocka_unit_test(test_scan_lists_good_and_refused),
        cmocka_unit_test(test_scan_shadowed_and_unknown_file_kind),
    };
    int rc = cmocka_run_group_tests(tests, setup, NULL);
    plait_plugins_unload_all();
    return rc;
}
