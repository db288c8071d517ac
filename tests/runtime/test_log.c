/*
 * Logging: the line format ("[r<rank>] " once a rank is set, time,
 * component, level tag), level filtering by a default and per-component
 * rules ("warn,tcp=debug"), invalid specs refused without changing anything,
 * PLAIT_LOG_LEVEL, and the copy in the log file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "runtime/error.h"
#include "runtime/log.h"

#define assert_contains(haystack, needle)                                                  \
    do {                                                                                   \
        if (!strstr((haystack), (needle))) fail_msg("expected \"%s\" in: %s", (needle), (haystack)); \
    } while (0)
#define assert_lacks(haystack, needle)                                                     \
    do {                                                                                   \
        if (strstr((haystack), (needle))) fail_msg("did not expect \"%s\" in: %s", (needle), (haystack)); \
    } while (0)

/* stderr into a temporary file between begin and end. */
static FILE *g_tmp;
static int g_saved = -1;

static void capture_begin(void) {
    fflush(stderr);
    g_tmp = tmpfile();
    assert_non_null(g_tmp);
    g_saved = dup(STDERR_FILENO);
    assert_true(dup2(fileno(g_tmp), STDERR_FILENO) >= 0);
}

/* What was written to stderr (caller frees). */
static char *capture_end(void) {
    fflush(stderr);
    dup2(g_saved, STDERR_FILENO);
    close(g_saved);
    long n = ftell(g_tmp);
    char *text = calloc(1, (size_t)n + 1);
    rewind(g_tmp);
    assert_int_equal(fread(text, 1, (size_t)n, g_tmp), (size_t)n);
    fclose(g_tmp);
    return text;
}

static int reset(void **state) {
    (void)state;
    plait_log_set_rank(-1);
    return plait_log_configure("info");
}

static void test_line_format_and_rank_prefix(void **state) {
    (void)state;
    capture_begin();
    PLAIT_INFO("store", "before the rank is known");
    plait_log_set_rank(3);
    PLAIT_WARN("tcp", "rank %d speaking", 3);
    plait_log_set_rank(-1);
    PLAIT_ERROR("job", "prefix gone");
    char *out = capture_end();
    char *l1 = strtok(out, "\n"), *l2 = strtok(NULL, "\n"), *l3 = strtok(NULL, "\n");
    assert_non_null(l3);
    double t;
    char comp[32], rest[128];
    /* "   0.001 store: before ..." : no rank prefix, no tag at info level */
    assert_int_equal(sscanf(l1, "%lf %31[^:]: %127[^\n]", &t, comp, rest), 3);
    assert_string_equal(comp, "store");
    assert_string_equal(rest, "before the rank is known");
    assert_lacks(l1, "[r");
    /* "[r3]    0.001 tcp warn: rank 3 speaking" */
    assert_int_equal(strncmp(l2, "[r3] ", 5), 0);
    assert_int_equal(sscanf(l2 + 5, "%lf %31[^:]: %127[^\n]", &t, comp, rest), 3);
    assert_string_equal(comp, "tcp warn");
    assert_string_equal(rest, "rank 3 speaking");
    assert_lacks(l3, "[r");
    assert_contains(l3, " job error: prefix gone");
    free(out);
}

static void test_default_and_component_levels(void **state) {
    (void)state;
    assert_int_equal(plait_log_configure("warn,tcp=debug"), 0);
    capture_begin();
    PLAIT_INFO("store", "store info");
    PLAIT_WARN("store", "store warn");
    PLAIT_DEBUG("store", "store debug");
    PLAIT_INFO("tcp", "tcp info");
    PLAIT_DEBUG("tcp", "tcp debug");
    plait_log(PLAIT_LOG_TRACE, "tcp", "tcp trace");
    char *out = capture_end();
    assert_lacks(out, "store info");
    assert_contains(out, "store warn: store warn");
    assert_lacks(out, "store debug");
    assert_contains(out, "tcp: tcp info");
    assert_contains(out, "tcp debug: tcp debug");
    assert_lacks(out, "tcp trace");
    free(out);
    assert_true(plait_log_enabled(PLAIT_LOG_DEBUG)); /* some component logs at debug */
    assert_false(plait_log_enabled(PLAIT_LOG_TRACE));
    /* a later spec replaces the rules */
    assert_int_equal(plait_log_configure("error"), 0);
    assert_false(plait_log_enabled_for(PLAIT_LOG_DEBUG, "tcp"));
    assert_false(plait_log_enabled_for(PLAIT_LOG_WARN, "store"));
    assert_true(plait_log_enabled_for(PLAIT_LOG_ERROR, "store"));
    /* spaces around names and levels are ignored */
    assert_int_equal(plait_log_configure(" info , tcp = trace "), 0);
    assert_true(plait_log_enabled_for(PLAIT_LOG_TRACE, "tcp"));
    assert_false(plait_log_enabled_for(PLAIT_LOG_DEBUG, "store"));
}

static void test_invalid_specs_change_nothing(void **state) {
    (void)state;
    static const char seventeen_components[] = "a=info,b=info,c=info,d=info,e=info,f=info,g=info,h=info,i=info,"
                                               "j=info,k=info,l=info,m=info,n=info,o=info,p=info,q=info";
    static const char *const bad[] = {"loud", "warn,tcp=loud", "=debug", " = debug", "tcp=", "info,warn=",
                                      seventeen_components};
    assert_int_equal(plait_log_configure("warn,tcp=debug"), 0);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (plait_log_check_spec(bad[i]) != -1) fail_msg("check accepted '%s'", bad[i]);
        if (plait_log_configure(bad[i]) != -1) fail_msg("configure accepted '%s'", bad[i]);
        assert_true(plait_log_enabled_for(PLAIT_LOG_DEBUG, "tcp"));
        assert_false(plait_log_enabled_for(PLAIT_LOG_INFO, "store"));
    }
    assert_int_equal(plait_log_check_spec("debug,tcp=warn"), 0);
    assert_false(plait_log_enabled_for(PLAIT_LOG_INFO, "store")); /* checking applies nothing */
}

static void test_environment(void **state) {
    (void)state;
    setenv("PLAIT_LOG_LEVEL", "error,loader=debug", 1);
    plait_log_init_from_env();
    assert_false(plait_log_enabled_for(PLAIT_LOG_WARN, "store"));
    assert_true(plait_log_enabled_for(PLAIT_LOG_DEBUG, "loader"));
    setenv("PLAIT_LOG_LEVEL", "loud", 1);
    capture_begin();
    plait_log_init_from_env();
    char *out = capture_end();
    assert_contains(out, "warning: PLAIT_LOG_LEVEL='loud' is not valid");
    free(out);
    assert_true(plait_log_enabled_for(PLAIT_LOG_DEBUG, "loader")); /* unchanged */
    unsetenv("PLAIT_LOG_LEVEL");
}

static void test_log_file_gets_the_same_lines(void **state) {
    (void)state;
    char path[] = "/tmp/plait-test-log-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(plait_log_set_file(path), 0);
    plait_log_set_rank(1);
    capture_begin();
    PLAIT_WARN("train", "to both");
    PLAIT_DEBUG("train", "to neither");
    char *out = capture_end();
    assert_int_equal(plait_log_set_file(NULL), 0);
    FILE *f = fopen(path, "r");
    char file[512] = "";
    size_t n = fread(file, 1, sizeof file - 1, f);
    file[n] = '\0';
    fclose(f);
    unlink(path);
    assert_string_equal(file, out);
    assert_int_equal(strncmp(file, "[r1] ", 5), 0);
    assert_contains(file, "train warn: to both\n");
    assert_lacks(file, "to neither");
    free(out);
    assert_int_equal(plait_log_set_file("/nonexistent-dir/x.log"), -1);
    /* a FIFO in the log's place is refused at once, never waited on */
    char fifo[] = "/tmp/plait-log-fifo-XXXXXX";
    int tmp = mkstemp(fifo);
    assert_true(tmp >= 0);
    close(tmp);
    unlink(fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(plait_log_set_file(fifo), -1);
    assert_contains(plait_last_error(), "is a FIFO");
    unlink(fifo);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_line_format_and_rank_prefix, reset),
        cmocka_unit_test_setup(test_default_and_component_levels, reset),
        cmocka_unit_test_setup(test_invalid_specs_change_nothing, reset),
        cmocka_unit_test_setup(test_environment, reset),
        cmocka_unit_test_setup(test_log_file_gets_the_same_lines, reset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
