/* The SDK's convenience readers (plait_cfg_int/float/str in plait/host.h):
 * a declared key reads its value; a key the plugin never declared is logged
 * as an error naming the section and key instead of silently reading 0. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "config/config.h"
#include "host/host_table.h"

static const plait_key_decl keys[] = {
    {sizeof(plait_key_decl), 0, "depth", PLAIT_KEY_INT, "7", 0, 100, NULL, "an int"},
};

static char g_logged[1024];
static void capture(plait_log_level level, const char *component, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(g_logged, sizeof g_logged, "%d %s: ", (int)level, component);
    vsnprintf(g_logged + n, sizeof g_logged - (size_t)n, fmt, ap);
    va_end(ap);
}

static plait_config *config(void) {
    static char *const no_env[] = {NULL};
    plait_config *cfg = plait_config_new();
    assert_non_null(cfg);
    assert_int_equal(plait_config_declare_core(cfg), PLAIT_OK);
    assert_int_equal(plait_config_declare(cfg, "optim.test", keys, 1, sizeof keys[0], "test"), PLAIT_OK);
    assert_int_equal(plait_config_finalize(cfg, no_env), PLAIT_OK);
    return cfg;
}

static void test_declared_key_reads_its_value(void **state) {
    (void)state;
    plait_host h = *plait_host_table();
    h.log = capture;
    g_logged[0] = '\0';
    plait_config *cfg = config();
    assert_int_equal(plait_cfg_int(&h, cfg, "optim.test", "depth"), 7);
    assert_string_equal(g_logged, "");
    plait_config_free(cfg);
}

static void test_undeclared_key_is_reported(void **state) {
    (void)state;
    plait_host h = *plait_host_table();
    h.log = capture;
    plait_config *cfg = config();
    g_logged[0] = '\0';
    assert_int_equal(plait_cfg_int(&h, cfg, "optim.test", "dpeth"), 0);
    assert_non_null(strstr(g_logged, "0 config: [optim.test] dpeth could not be read"));
    g_logged[0] = '\0';
    assert_true(plait_cfg_float(&h, cfg, "optim.test", "rate") == 0.0);
    assert_non_null(strstr(g_logged, "[optim.test] rate could not be read"));
    g_logged[0] = '\0';
    assert_string_equal(plait_cfg_str(&h, cfg, "optim.nope", "name"), "");
    assert_non_null(strstr(g_logged, "[optim.nope] name could not be read"));
    plait_config_free(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_declared_key_reads_its_value),
        cmocka_unit_test(test_undeclared_key_is_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
