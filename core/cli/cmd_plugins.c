/* plait plugins: every plugin found, with kind, version, ABI, path and status. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "plugin/loader.h"

static int cmd_plugins(int argc, char **argv, const plait_cli_job_opts *job) {
    (void)job; /* starts no ranks */
    if (argc > 1) {
        fprintf(stderr, "plait plugins: takes no arguments, not '%s'; 'plait help plugins' says what it lists\n",
                argv[1]);
        return 2;
    }
    plait_plugin_row *rows = NULL;
    size_t n = plait_plugins_scan(&rows);
    const char *const *dirs = NULL;
    size_t nd = plait_plugin_dirs(&dirs);
    printf("%-9s %-10s %-8s %-4s %-12s %s\n", "KIND", "NAME", "VERSION", "ABI", "STATUS", "PATH");
    size_t refused = 0;
    for (size_t i = 0; i < n; i++) {
        const plait_plugin_row *r = &rows[i];
        const char *state = !r->loaded ? "refused" : r->available ? "available" : "unavailable";
        if (!r->loaded && r->status[0] && r->status[0] != 's') refused++;
        if (!r->loaded && r->status[0] == 's') state = "shadowed";
        printf("%-9s %-10s %-8s %-4s %-12s %s\n", r->kind, r->name, r->loaded ? r->version : "-",
               r->loaded ? r->abi : "-", state, r->path);
        if (r->status[0]) printf("%-9s   -> %s\n", "", r->status);
    }
    if (n == 0) printf("(no plugins found)\n");
    printf("\nsearched:");
    for (size_t i = 0; i < nd; i++) printf(" %s", dirs[i]);
    printf("\n");
    if (refused) fprintf(stderr, "plait: %zu plugin file(s) refused; see above\n", refused);
    free(rows);
    return 0;
}

const plait_command plait_cmd_plugins = {
    "plugins", "list plugins: kind, name, version, ABI, availability, path",
    "usage: plait plugins\n\n"
    "Lists every libplait-<kind>-<name>.so in the plugin directories (next to libplait, the install\n"
    "prefix's lib/plait, then PLAIT_PLUGIN_PATH). A plugin that cannot run on this machine (no GPU,\n"
    "no RDMA device) is listed as unavailable with the reason; a file that fails the loader's checks\n"
    "is listed as refused with what to do. Each file is loaded and probed in a child process, so a\n"
    "file that crashes, exits or hangs (PLAIT_PLUGIN_SCAN_TIMEOUT seconds, default 30) while it is\n"
    "loaded is listed as refused, naming what happened, and every other plugin is still listed.\n",
    cmd_plugins};
