/*
 * `plait plugin test` by kind: the drivers that prepare runs and print the
 * verdict (the checks themselves are in core/conformance). Each returns the
 * command's exit status: 0 every check passed, 1 one failed, 2 usage.
 * Main thread only.
 */
#ifndef PLAIT_CORE_CLI_PLUGIN_TEST_H
#define PLAIT_CORE_CLI_PLUGIN_TEST_H

#include <plait/plugin.h>

/* A parallel plugin at `path` (loaded as `desc`): plans of every layout its
 * axes allow and 3 training steps of each against one process; the user's
 * section.key=value overrides apply to the plugin's runs. */
int plait_cli_plugin_test_parallel(const char *path, const plait_plugin_desc *desc, int n_over, char *const *over);

#endif
