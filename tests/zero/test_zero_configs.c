/* configs/gpt-tiny-zero{1,2,3}.ini validate against the core's keys and the
 * plugin's own [optim.zeroN] section, and select that plugin at dp = 4. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "plugin/loader.h"
#include "runtime/error.h"
#include "host/host_table.h"

static void test_configs_validate(void **state) {
    (void)state;
    const char *src = getenv("PLAIT_SOURCE_DIR");
    assert_non_null(src);
    for (int n = 1; n <= 3; n++) {
        char path[4096], name[8], section[32];
        snprintf(name, sizeof name, "zero%d", n);
        snprintf(section, sizeof section, "optim.%s", name);
        snprintf(path, sizeof path, "%s/configs/gpt-tiny-%s.ini", src, name);
        const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_OPTIM, name);
        if (!d) fail_msg("%s", plait_last_error());
        plait_config *cfg = plait_config_new();
        char *env[] = {NULL};
        assert_int_equal(plait_config_declare_core(cfg), PLAIT_OK);
        assert_int_equal(plait_config_declare(cfg, section, d->keys, d->n_keys, d->key_size, name), PLAIT_OK);
        if (plait_config_load_file(cfg, path) != PLAIT_OK || plait_config_finalize(cfg, env) != PLAIT_OK)
            fail_msg("%s: %s", path, plait_last_error());
        assert_string_equal(plait_config_str(cfg, "optim", "plugin"), name);
        assert_int_equal(plait_config_int(cfg, "parallel", "dp"), 4);
        assert_int_equal(plait_config_int(cfg, section, "max_inflight"), 2);
        if (n == 3) assert_int_equal(plait_config_int(cfg, section, "prefetch_layers"), 1);
        plait_config_free(cfg);
    }
    plait_plugins_unload_all();
}

int main(void) {
    plait_host_install(); /* plugins are handed the core's host table */
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_configs_validate)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
